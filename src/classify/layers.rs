//! Keys and values kept across the layers of an inference forward pass.
//!
//! In inference nothing is saved for a backward pass: a layer's
//! intermediates die inside the layer, and the residual stream is handed
//! from one layer to the next (at most two of it live at once). What the
//! same attention code allocates in layer after layer *and keeps* is the KV
//! cache (on its first forward pass, before any concatenation: Hugging
//! Face's `DynamicCache` stores the first keys and values as they come out
//! of `apply_rotary_pos_emb` and the value projection). The same code in
//! another layer differs only by the module instances on its stack
//! (`nn.Module: Qwen2Attention_5`), so those frames are left out when
//! comparing.
//!
//! A recording that stops before the backward pass looks like inference but
//! keeps *every* layer's saved activations, and autocast keeps a
//! low-precision copy of every weight it casts: then code outside attention
//! keeps one allocation per layer too, and nothing here is called a cache.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rustc_hash::FxHashMap;

use super::{Context, Phase};
use crate::model::{Frame, SiteId};
use crate::timeline::{Interval, Origin};

/// Allocations of one code live at once from this many on are kept across
/// layers. Within one layer the same code rarely keeps more than a few
/// (the residual stream: 3, `q`/`k`/`v` made contiguous: 4, in a 24-layer
/// Qwen2 trace); its KV cache reaches the number of layers.
const LAYERS: usize = 6;

/// One forward allocation: its code, lifetime and index among the intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Alloc {
    code: u32,
    start: u32,
    end: u32,
    index: usize,
}

/// Per interval: whether it is a forward allocation by attention code live
/// while [`LAYERS`] or more of that code's allocations are. Empty when none
/// is, or when code outside attention keeps as many.
pub(super) fn kept_across_layers(ctx: &Context<'_>, intervals: &[Interval]) -> Vec<bool> {
    // The same code, whatever module instances run it.
    let mut code_of_site: FxHashMap<SiteId, Option<u32>> = FxHashMap::default();
    let casts = crate::vocabulary::CastSites::new(ctx.sites);
    let mut codes: FxHashMap<Vec<Frame>, u32> = FxHashMap::default();
    let mut forward: Vec<Alloc> = Vec::new();
    for (index, interval) in intervals.iter().enumerate() {
        if interval.origin != Origin::Traced
            || interval.site == 0
            || ctx.phase(interval.start) != Phase::Forward
        {
            continue;
        }
        let code = *code_of_site.entry(interval.site).or_insert_with(|| {
            // Autocast's copy of a weight is a cast, never a cache (a model
            // of few layers keeps more of them than `LAYERS` at one line:
            // BERT's query, key and value).
            if casts.explicit(interval.site) {
                return None;
            }
            let frames: Vec<Frame> = ctx
                .sites
                .frames(interval.site)
                .iter()
                .filter(|f| !ctx.sites.str(f.name).starts_with("nn.Module: "))
                .copied()
                .collect();
            let next = codes.len() as u32;
            Some(*codes.entry(frames).or_insert(next))
        });
        let Some(code) = code else {
            continue;
        };
        forward.push(Alloc {
            code,
            start: interval.start,
            end: interval.end,
            index,
        });
    }
    forward.sort_unstable();
    let mut kept = vec![false; intervals.len()];
    let mut any = false;
    for group in forward.chunk_by(|a, b| a.code == b.code) {
        let deep = kept_deep(group);
        if deep.is_empty() {
            continue;
        }
        // Only a cache keeps one allocation per layer. When code outside
        // attention does too (activations saved for a backward pass,
        // autocast's low-precision copies of the weights), what attention
        // keeps is the same thing, not a cache.
        if !ctx.facts[intervals[group[0].index].site as usize].attention {
            return Vec::new();
        }
        for i in deep {
            kept[i] = true;
        }
        any = true;
    }
    if any {
        kept
    } else {
        Vec::new()
    }
}

/// The intervals of `group` (one code, sorted by start) that are live while
/// [`LAYERS`] or more of the group are.
fn kept_deep(group: &[Alloc]) -> Vec<usize> {
    let mut live: BinaryHeap<Reverse<(u32, usize)>> = BinaryHeap::new();
    let mut deep = Vec::new();
    // Every allocation live now is in `deep` already.
    let mut all_in = false;
    for a in group {
        while live.peek().is_some_and(|e| e.0 .0 <= a.start) {
            live.pop();
        }
        if live.len() + 1 < LAYERS {
            all_in = false;
        }
        live.push(Reverse((a.end, a.index)));
        if live.len() >= LAYERS {
            if all_in {
                deep.push(a.index);
            } else {
                deep.extend(live.iter().map(|e| e.0 .1));
                all_in = true;
            }
        }
    }
    deep.sort_unstable();
    deep.dedup();
    deep
}
