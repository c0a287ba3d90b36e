//! Activation checkpointing modelled from the run: which tensors a
//! checkpointed block would not keep for backward, and when backward would
//! make them again, from the module calls the stacks name (`nn.Module:
//! Block_1`, as the profiler's stacks do).
//!
//! The blocks are the repeating run of module calls under one parent
//! (`Block_0, Block_1, Block_2` under a model; `Conv2d, BatchNorm2d, ReLU`
//! three times under a `Sequential`): what `checkpoint(block, x)` or
//! `checkpoint_sequential` wraps. With each block checkpointed, the forward
//! keeps only each block's input (the previous block's output) and drops
//! the rest of what autograd saved inside the block when the block returns;
//! backward runs the block's forward again just before its own backward,
//! so its tensors are back from then until they are freed as they were.
//! Where the stacks name no module, the lever stays the catalogue's factor.

use std::collections::HashMap;

use crate::classify::{Builtin, Classification, Rule};
use crate::model::{Sites, StrId};
use crate::timeline::{DeviceTimeline, Origin};

/// What checkpointing each block removes, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpointed {
    /// `(interval, from, to)`: the interval is not live in `[from, to)`.
    pub gaps: Vec<(usize, u32, u32)>,
    /// The block, as a person names it (`Block`, `Conv2d+BatchNorm2d+ReLU`).
    pub block: String,
    /// `(position, bytes)`: what each block's recomputation holds at once
    /// besides the tensors it saves again, at the position they are back:
    /// the most its forward held of the tensors it frees itself, and its
    /// output made again (the original stays, the next block's input).
    pub recomputed: Vec<(u32, u64)>,
    /// Calls of a block in the trace.
    pub calls: usize,
}

/// One allocation made during a forward pass, with its module chain.
struct Alloc {
    interval: usize,
    /// Its index among the run's allocations: a call is a run of
    /// consecutive ones (between two forwards, the loss, backward and the
    /// step allocate outside any module).
    seq: usize,
    /// Module frames' names, outermost first.
    chain: Vec<StrId>,
}

/// A call of a module: its name and the allocations inside it (indices
/// into the forward allocations, `lo..hi`).
#[derive(Debug, Clone, Copy)]
struct Call {
    name: StrId,
    lo: usize,
    hi: usize,
}

/// The blocks of a training run and what checkpointing them changes;
/// `None` when no stack names a module or no module call repeats.
pub fn model(
    sites: &Sites,
    timeline: &DeviceTimeline,
    classes: &[Classification],
) -> Option<Checkpointed> {
    let intervals = &timeline.replay.intervals;
    let mut chains: HashMap<u32, Vec<StrId>> = HashMap::new();
    let mut allocs = Vec::new();
    for (seq, (i, iv)) in intervals
        .iter()
        .enumerate()
        .filter(|(_, iv)| iv.origin == Origin::Traced)
        .enumerate()
    {
        let chain = chains.entry(iv.site).or_insert_with(|| {
            let mut c: Vec<StrId> = sites
                .frames(iv.site)
                .iter()
                .filter(|f| crate::vocabulary::is_module_frame(sites.str(f.name)))
                .map(|f| f.name)
                .collect();
            c.reverse();
            c
        });
        if chain.is_empty() {
            continue;
        }
        allocs.push(Alloc {
            interval: i,
            seq,
            chain: chain.clone(),
        });
    }
    if allocs.is_empty() {
        return None;
    }
    let saved = |a: &Alloc| {
        classes[a.interval].rule == Rule::Builtin(Builtin::ForwardOutputFreedInBackward)
    };
    // Every call, by depth: each parent's children that repeat, with the
    // bytes checkpointing their blocks would not keep.
    let mut runs: Vec<(StrId, Run, u64)> = Vec::new();
    let mut stack = vec![(0usize, allocs.len(), 0usize)];
    while let Some((lo, hi, depth)) = stack.pop() {
        let children = calls_at(&allocs, lo, hi, depth);
        let parent = depth
            .checked_sub(1)
            .and_then(|d| allocs[lo].chain.get(d).copied());
        if let Some(parent) = parent {
            for (unit, blocks) in repeating_units(sites, &children) {
                let bytes: u64 = blocks
                    .iter()
                    .map(|&(l, h)| removable(&allocs[l..h], &saved, intervals))
                    .sum();
                runs.push((parent, (unit, blocks), bytes));
            }
        }
        for c in children {
            stack.push((c.lo, c.hi, depth + 1));
        }
    }
    // The unit that drops the most (the first found on ties), in every
    // call of its parent.
    let mut best: Option<&(StrId, Run, u64)> = None;
    for r in &runs {
        if best.is_none_or(|b| r.2 > b.2) {
            best = Some(r);
        }
    }
    let (parent, (unit, _), _) = best.filter(|b| b.2 > 0)?;
    let mut gaps = Vec::new();
    let mut recomputed = Vec::new();
    let mut count = 0;
    for (_, (_, blocks), _) in runs.iter().filter(|r| r.0 == *parent && r.1 .0 == *unit) {
        for (k, &(l, h)) in blocks.iter().enumerate() {
            count += 1;
            let block = &allocs[l..h];
            let output = &intervals[block[block.len() - 1].interval];
            let self_saved = sites
                .frames(output.site)
                .iter()
                .any(|f| crate::vocabulary::saves_its_result(sites.str(f.name)));
            let Some(at) = block_gaps(block, self_saved, &saved, intervals, &mut gaps) else {
                continue;
            };
            // The last block's output is no checkpoint's input: when only
            // its own backward read it, checkpointing drops it like the
            // rest, and the recomputation makes it back.
            let output_back = self_saved && k + 1 == blocks.len();
            if output_back && output.start + 1 < at {
                gaps.push((block[block.len() - 1].interval, output.start + 1, at));
            }
            let bytes = recomputation(block, self_saved, output_back, &saved, intervals);
            recomputed.push((at, bytes));
        }
    }
    let block = unit
        .iter()
        .map(|&s| class_of(sites.str(s)).to_owned())
        .collect::<Vec<_>>()
        .join("+");
    Some(Checkpointed {
        gaps,
        recomputed,
        block,
        calls: count,
    })
}

/// Allocations outside any module that one call may have between two of
/// its own: stacks misattribute the odd small tensor (the snapshots
/// PyTorch makes from a profile give batch norm's counter its module's
/// `__init__` frames). Two forwards are further apart: the loss, backward
/// and the step allocate many times between them.
const MAX_SKIPPED: usize = 3;

/// The calls at `depth` among allocations `lo..hi` (which share their
/// chain above it): runs of consecutive allocations inside one module.
/// Allocations made directly in the parent belong to no call.
fn calls_at(allocs: &[Alloc], lo: usize, hi: usize, depth: usize) -> Vec<Call> {
    let mut out: Vec<Call> = Vec::new();
    for (k, a) in allocs.iter().enumerate().take(hi).skip(lo) {
        let Some(&name) = a.chain.get(depth) else {
            continue;
        };
        match out.last_mut() {
            Some(c) if c.name == name && c.hi == k && a.seq - allocs[k - 1].seq <= MAX_SKIPPED => {
                c.hi = k + 1
            }
            _ => out.push(Call {
                name,
                lo: k,
                hi: k + 1,
            }),
        }
    }
    out
}

/// `nn.Module: Block_12` → `Block`.
fn class_of(name: &str) -> &str {
    let name = name.strip_prefix("nn.Module: ").unwrap_or(name);
    match name.rsplit_once('_') {
        Some((class, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => class,
        _ => name,
    }
}

/// A unit of module calls (by its first instances) and its blocks'
/// allocation ranges.
type Run = (Vec<StrId>, Vec<(usize, usize)>);

/// Every run of a unit of module classes repeated among `children` (at
/// least twice, consecutive, each time other instances): the unit, by its
/// first instances, and the allocation ranges of its blocks. Runs of one
/// period do not overlap; a longer unit made of a shorter one repeated is
/// left out.
fn repeating_units(sites: &Sites, children: &[Call]) -> Vec<Run> {
    let classes: Vec<&str> = children
        .iter()
        .map(|c| class_of(sites.str(c.name)))
        .collect();
    let n = classes.len();
    let mut out = Vec::new();
    for period in 1..=n / 2 {
        let mut start = 0;
        while start + 2 * period <= n {
            let same = |r: usize, j: usize| {
                classes[start + r * period + j] == classes[start + j]
                    && children[start + r * period + j].name != children[start + j].name
            };
            let mut repeats = 1;
            while start + (repeats + 1) * period <= n && (0..period).all(|j| same(repeats, j)) {
                repeats += 1;
            }
            let primitive = (1..period)
                .filter(|q| period % q == 0)
                .all(|q| (q..period).any(|j| classes[start + j] != classes[start + j % q]));
            if repeats < 2 || !primitive {
                start += 1;
                continue;
            }
            let unit = children[start..start + period]
                .iter()
                .map(|c| c.name)
                .collect();
            let blocks = (0..repeats)
                .map(|r| {
                    let first = &children[start + r * period];
                    let last = &children[start + r * period + period - 1];
                    (first.lo, last.hi)
                })
                .collect();
            out.push((unit, blocks));
            start += repeats * period;
        }
    }
    out
}

/// Bytes a block's checkpoint would not keep: what autograd saved inside
/// it, but its output.
fn removable(
    block: &[Alloc],
    saved: &impl Fn(&Alloc) -> bool,
    intervals: &[crate::timeline::Interval],
) -> u64 {
    let Some((_, inner)) = block.split_last() else {
        return 0;
    };
    inner
        .iter()
        .filter(|a| saved(a))
        .map(|a| intervals[a.interval].size)
        .sum()
}

/// The gaps of one block's saved tensors (all but its output, the last it
/// made): from the block's return to where backward makes them again, just
/// before the first of them (or the output, when the block's own last
/// operator saved it) is freed. Returns that position.
fn block_gaps(
    block: &[Alloc],
    self_saved: bool,
    saved: &impl Fn(&Alloc) -> bool,
    intervals: &[crate::timeline::Interval],
    gaps: &mut Vec<(usize, u32, u32)>,
) -> Option<u32> {
    let (last, inner) = block.split_last()?;
    let returned = intervals[last.interval].start + 1;
    let kept: Vec<usize> = inner
        .iter()
        .filter(|a| saved(a))
        .map(|a| a.interval)
        .collect();
    let first_freed = kept.iter().map(|&i| intervals[i].end).min()?;
    let again = if self_saved {
        first_freed.min(intervals[last.interval].end)
    } else {
        first_freed
    }
    .checked_sub(1)?;
    for i in kept {
        let from = returned.max(intervals[i].start);
        if from < again {
            gaps.push((i, from, again));
        }
    }
    Some(again)
}

/// What a block's recomputation holds at its most besides what is back
/// anyway where it runs (the saved tensors, and the output when
/// `output_back`): its forward replayed, each saved tensor kept from where
/// it is made, each other tensor freed where the run freed it. It stops
/// once the last saved tensor is made (non-reentrant checkpointing), which
/// is the output itself when the block's own last operator saved it
/// (`self_saved`: a ReLU keeps its result); that output is made again
/// beside the original unless the original is gone (`output_back`).
fn recomputation(
    block: &[Alloc],
    self_saved: bool,
    output_back: bool,
    saved: &impl Fn(&Alloc) -> bool,
    intervals: &[crate::timeline::Interval],
) -> u64 {
    let Some((last, inner)) = block.split_last() else {
        return 0;
    };
    let stop = if self_saved {
        inner.len()
    } else {
        match inner.iter().rposition(saved) {
            Some(k) => k + 1,
            None => return 0,
        }
    };
    let mut back = 0i64;
    let mut changes: Vec<(u32, i64)> = Vec::with_capacity(2 * stop + 1);
    for a in &inner[..stop] {
        let iv = &intervals[a.interval];
        changes.push((iv.start, iv.size as i64));
        if saved(a) {
            back += iv.size as i64;
        } else {
            changes.push((iv.end, -(iv.size as i64)));
        }
    }
    if self_saved {
        let out = &intervals[last.interval];
        changes.push((out.start, out.size as i64));
        if output_back {
            back += out.size as i64;
        }
    }
    // At one position a free comes before an allocation.
    changes.sort_unstable_by_key(|&(p, d)| (p, d));
    let (mut live, mut most) = (0i64, 0i64);
    for (_, d) in changes {
        live += d;
        most = most.max(live);
    }
    (most - back).max(0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(sites: &mut Sites, names: &[&str]) -> Vec<Call> {
        names
            .iter()
            .enumerate()
            .map(|(k, n)| Call {
                name: sites.intern_str(&format!("nn.Module: {n}")),
                lo: 10 * k,
                hi: 10 * k + 10,
            })
            .collect()
    }

    #[test]
    fn blocks_are_the_repeated_runs_of_sibling_calls() {
        let mut sites = Sites::default();
        let lm = calls(
            &mut sites,
            &[
                "Embedding_0",
                "Embedding_1",
                "Block_0",
                "Block_1",
                "Block_2",
                "LayerNorm_0",
            ],
        );
        let units = repeating_units(&sites, &lm);
        let named: Vec<(String, Vec<(usize, usize)>)> = units
            .iter()
            .map(|(u, b)| {
                (
                    u.iter()
                        .map(|&s| sites.str(s))
                        .collect::<Vec<_>>()
                        .join(","),
                    b.clone(),
                )
            })
            .collect();
        assert_eq!(
            named,
            [
                ("nn.Module: Embedding_0".to_owned(), vec![(0, 10), (10, 20)]),
                (
                    "nn.Module: Block_0".to_owned(),
                    vec![(20, 30), (30, 40), (40, 50)]
                ),
            ]
        );
        let cnn = calls(
            &mut sites,
            &[
                "Conv2d_0",
                "BatchNorm2d_0",
                "ReLU_0",
                "Conv2d_1",
                "BatchNorm2d_1",
                "ReLU_1",
                "Linear_0",
            ],
        );
        let units = repeating_units(&sites, &cnn);
        assert_eq!(units.len(), 1);
        assert_eq!(units[0].0.len(), 3);
        assert_eq!(units[0].1, vec![(0, 30), (30, 60)]);
        // The same instance called again is no repetition of a block.
        let again = calls(&mut sites, &["Block_0", "Block_0"]);
        assert!(repeating_units(&sites, &again).is_empty());
    }

    #[test]
    fn module_classes_drop_the_instance_number() {
        assert_eq!(class_of("nn.Module: Block_12"), "Block");
        assert_eq!(class_of("nn.Module: GPT2Block_0"), "GPT2Block");
        assert_eq!(class_of("nn.Module: My_Layer"), "My_Layer");
    }
}
