//! `kv_cache_limit` modelled from the run: generating half the new tokens
//! is the same run stopped after half its forwards. A growing KV cache
//! (Hugging Face's `DynamicCache`: each forward concatenates one token more
//! onto every layer's keys and values) shows each forward as a run of cache
//! tensors of one size, one size larger than the last. Stopped after half
//! the forwards, the later ones make nothing, and the cache and activations
//! live at the stop are freed there; the weights stay. The prompt's forward
//! is kept whole, so a peak in the prompt's forward (a long prompt) does not
//! move, which the catalogue's factor (the cache ×0.5) cannot say.

use crate::classify::Classification;
use crate::model::Category;
use crate::timeline::DeviceTimeline;

/// What stopping after half the forwards removes, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct KvLimited {
    /// `(interval, from, to)`: the interval is not live in `[from, to)`.
    pub gaps: Vec<(usize, u32, u32)>,
    /// Forwards that grew the cache, and how many are kept.
    pub forwards: usize,
    pub kept: usize,
}

/// The model, or `None` when the cache does not grow forward by forward
/// (a preallocated cache, or fewer than two forwards).
pub fn model(timeline: &DeviceTimeline, classes: &[Classification]) -> Option<KvLimited> {
    let intervals = &timeline.replay.intervals;
    let cache: Vec<&crate::timeline::Interval> = intervals
        .iter()
        .zip(classes)
        .filter(|(iv, c)| c.category == Category::KvCache && !iv.origin.before_recording())
        .map(|(iv, _)| iv)
        .collect();
    // A forward's cache tensors live until the next forward replaces them;
    // a tensor the cache's code makes and drops at once (a Llama's rotary
    // tables, concatenated in each forward: most of its cache-like
    // tensors) lives a few events, under a tenth of the long-lived ones'
    // life (the 90th percentile), and is no forward's cache.
    let mut lives: Vec<u32> = cache.iter().map(|iv| iv.end - iv.start).collect();
    lives.sort_unstable();
    let typical = lives.get(lives.len() * 9 / 10).copied().unwrap_or(0);
    // The first position of each forward's cache tensors: a run of one
    // size, each run larger than the one before.
    let mut starts: Vec<u32> = Vec::new();
    let mut size = 0u64;
    for iv in cache {
        if (iv.end - iv.start) * 10 < typical {
            continue;
        }
        if iv.size != size {
            if iv.size < size {
                // Not one growing cache (a second generate() call, or
                // caches of several sizes): the factor stands in.
                return None;
            }
            starts.push(iv.start);
            size = iv.size;
        }
    }
    if starts.len() < 2 {
        return None;
    }
    let kept = starts.len() / 2;
    let stop = starts[kept];
    let ends_at_stop = |c: Category| {
        matches!(
            c,
            Category::KvCache
                | Category::Activation
                | Category::Temporary
                | Category::AutogradDetail
        )
    };
    let gaps = intervals
        .iter()
        .zip(classes)
        .enumerate()
        .filter_map(|(i, (iv, c))| {
            if iv.start >= stop && iv.end > iv.start {
                Some((i, iv.start, iv.end))
            } else if iv.end > stop && ends_at_stop(c.category) {
                Some((i, stop, iv.end))
            } else {
                None
            }
        })
        .collect();
    Some(KvLimited {
        gaps,
        forwards: starts.len(),
        kept,
    })
}
