//! Evidence of the parameters' sizes and of gradients kept between steps:
//! what `zero_grad` freed, gradients live together, backward's in-place
//! adds.

use rustc_hash::FxHashSet;

use super::{ranges, shortest_period, ParamSizes};
use crate::classify::chains::Chains;
use crate::classify::{Classification, Context, Phase};
use crate::model::{Action, Category};
use crate::timeline::{Origin, Replay};

/// The frees of each `Optimizer.zero_grad` call (by its annotation's time
/// range or, without timestamps, its frames), in order; `None` when the
/// trace shows no `zero_grad`.
pub(super) fn zero_grad_runs(ctx: &Context<'_>) -> Option<Vec<Vec<u64>>> {
    let calls: Vec<(f64, f64)> = ranges(ctx, "Optimizer.zero_grad").collect();
    // Neither an annotation nor a frame names `zero_grad`: nothing to read
    // in the events (a pass over 1M events saved).
    if calls.is_empty() && !ctx.facts.iter().any(|f| f.zero_grad) {
        return None;
    }
    let find = CallFinder::new(&calls);
    let mut runs: Vec<Vec<u64>> = vec![Vec::new(); calls.len()];
    let mut by_site: Vec<Vec<u64>> = Vec::new();
    let mut open = false;
    for e in &ctx.device.events {
        match e.action {
            // An allocation ends a run of frees by frames.
            Action::Alloc => open = false,
            Action::FreeCompleted => {
                if let Some(k) = e.ts().and_then(|t| find.first_containing(t)) {
                    runs[k].push(e.size);
                    open = false;
                } else if ctx.facts[e.site as usize].zero_grad {
                    if !open {
                        by_site.push(Vec::new());
                    }
                    by_site.last_mut().expect("pushed").push(e.size);
                    open = true;
                } else {
                    open = false;
                }
            }
            _ => {}
        }
    }
    if calls.is_empty() && by_site.is_empty() {
        return None;
    }
    runs.extend(by_site);
    Some(runs)
}

/// The first call (in the order given) whose `[start, end]` holds a time.
/// Calls that are sorted and apart (as one optimizer's `zero_grad` calls
/// are) are searched by bisection: a linear scan per event made this
/// events × steps, 35% of `analyze` on a 1M-entry snapshot with many steps.
/// Any other list is scanned, with the same answer.
pub(super) struct CallFinder<'a> {
    calls: &'a [(f64, f64)],
    apart: bool,
}

impl<'a> CallFinder<'a> {
    fn new(calls: &'a [(f64, f64)]) -> CallFinder<'a> {
        let apart = calls.iter().all(|&(s, e)| s <= e) && calls.windows(2).all(|w| w[0].1 < w[1].0);
        CallFinder { calls, apart }
    }

    fn first_containing(&self, t: f64) -> Option<usize> {
        if !self.apart {
            return self.calls.iter().position(|&(s, end)| s <= t && t <= end);
        }
        // The last call starting at or before `t` is the only one that can hold it.
        let k = self
            .calls
            .partition_point(|&(s, _)| s <= t)
            .checked_sub(1)?;
        (t <= self.calls[k].1).then_some(k)
    }
}

/// Parameter sizes from the gradients one `zero_grad(set_to_none=True)`
/// call freed (the call that freed most: every parameter with a gradient),
/// given [`zero_grad_runs`].
pub(super) fn freed_by_zero_grad(runs: Vec<Vec<u64>>) -> Option<ParamSizes> {
    let run = runs
        .into_iter()
        .max_by_key(|r| r.iter().fold(0u64, |s, &b| s.saturating_add(b)))?;
    (!run.is_empty()).then(|| {
        let n = run.len();
        sorted(
            run,
            format!("sizes of the {n} gradients Optimizer.zero_grad freed"),
        )
    })
}

/// Parameter sizes from the gradients live together at their peak, as the
/// rules classified them from their own evidence (their frames; blocks
/// from before recording included).
pub(super) fn live_gradients(replay: &Replay, classes: &[Classification]) -> Option<ParamSizes> {
    let grads: Vec<usize> = replay
        .intervals
        .iter()
        .zip(classes)
        .enumerate()
        .filter(|(_, (i, c))| {
            i.origin != Origin::BeforeRecordingUnnamed
                && c.category == Category::Gradient
                && !c.rule.infers()
        })
        .map(|(k, _)| k)
        .collect();
    if grads.is_empty() {
        return None;
    }
    // Sweep starts and ends in position order for the instant most gradient bytes are live.
    let mut changes: Vec<(u32, i64)> = Vec::with_capacity(grads.len() * 2);
    for &k in &grads {
        let i = &replay.intervals[k];
        changes.push((i.start, i.size as i64));
        changes.push((i.end, -(i.size as i64)));
    }
    changes.sort_by_key(|&(p, d)| (p, d));
    let (mut live, mut best, mut at) = (0i64, 0i64, 0u32);
    for (k, &(p, d)) in changes.iter().enumerate() {
        live += d;
        let last_at_p = changes.get(k + 1).is_none_or(|n| n.0 != p);
        if last_at_p && live > best {
            best = live;
            at = p;
        }
    }
    let sizes: Vec<u64> = grads
        .iter()
        .map(|&k| &replay.intervals[k])
        .filter(|i| i.live_at(at))
        .map(|i| i.size)
        .collect();
    let n = sizes.len();
    Some(sorted(
        sizes,
        format!("sizes of the {n} gradients live together in the trace"),
    ))
}

/// Parameter sizes from the gradients `AccumulateGrad` added into existing
/// `.grad` tensors (it frees each incoming gradient): one backward pass's
/// worth, the shortest prefix the sequence of sizes repeats.
pub(super) fn accumulated_in_place(ctx: &Context<'_>) -> Option<ParamSizes> {
    let seq: Vec<u64> = ctx
        .device
        .events
        .iter()
        .filter(|e| e.action == Action::FreeCompleted && ctx.facts[e.site as usize].accumulate_grad)
        .map(|e| e.size)
        .collect();
    if seq.is_empty() {
        return None;
    }
    let period = shortest_period(&seq);
    let repeats = seq.len() / period;
    let pass = seq[..period].to_vec();
    let why = if repeats > 1 {
        format!("sizes of the {period} gradients AccumulateGrad added in place in one backward pass (the pattern repeats {repeats}×)")
    } else {
        format!("sizes of the {period} gradients AccumulateGrad added in place")
    };
    Some(sorted(pass, why))
}

/// Gradients kept from before recording, in a snapshot made from a
/// profile (which shows each in-place update as a new version of the
/// tensor, `chains.rs`): backward computes each new gradient as a tensor of
/// its own, `AccumulateGrad` adds it into the kept `.grad` in place (a new
/// version of a frameless tensor from before recording) and the computed
/// one is freed at once. So a version, in backward, of a tensor from before
/// recording, followed straight away by the free of a tensor of its size
/// that backward made, is a gradient. Returns those tensors' first versions
/// (interval indices), each once, in the order of their first such add.
pub(super) fn added_into_before_recording(
    ctx: &Context<'_>,
    replay: &Replay,
    chains: &Chains,
) -> Vec<usize> {
    let bumps = &ctx.version_bumps;
    let events = &ctx.device.events;
    let mut seen = FxHashSet::default();
    let mut out = Vec::new();
    for (i, iv) in replay.intervals.iter().enumerate() {
        // A version starts just after its bump's allocation event.
        let Some(bump) = iv.start.checked_sub(1) else {
            continue;
        };
        if bumps.binary_search(&bump).is_err() || ctx.phase(iv.start) != Phase::Backward {
            continue;
        }
        let root = chains.root(i);
        if root == i || !replay.intervals[root].origin.before_recording() {
            continue;
        }
        // The next free (its request first, when the format has one).
        let next = events[bump as usize + 1..]
            .iter()
            .find(|e| e.action != Action::FreeRequested);
        let freed_computed = next.is_some_and(|e| {
            e.action == Action::FreeCompleted
                && e.size == iv.size
                && e.addr != iv.addr
                && ctx.facts[e.site as usize].phase() == Phase::Backward
        });
        if freed_computed && seen.insert(root) {
            out.push(root);
        }
    }
    out
}

/// Whether the first backward pass found `.grad` tensors already there:
/// `AccumulateGrad` added a gradient in place (freeing the incoming one)
/// before any gradient was allocated and kept.
pub(super) fn accumulated_into_existing(
    ctx: &Context<'_>,
    replay: &Replay,
    classes: &[Classification],
) -> bool {
    let Some(first_add) = ctx.device.events.iter().position(|e| {
        e.action == Action::FreeCompleted && ctx.facts[e.site as usize].accumulate_grad
    }) else {
        return false;
    };
    // Positions count events from 1 (position k + 1 is after event k).
    let first_add = first_add as u32 + 1;
    !replay.intervals.iter().zip(classes).any(|(i, c)| {
        i.origin == Origin::Traced
            && c.category == Category::Gradient
            && !c.rule.infers()
            && i.start < first_add
    })
}

pub(super) fn sorted(mut sizes: Vec<u64>, from: String) -> ParamSizes {
    sizes.sort_unstable();
    ParamSizes { sizes, from }
}

#[cfg(test)]
mod tests {
    #[test]
    fn call_finder_answers_as_a_scan() {
        let lists: [&[(f64, f64)]; 4] = [
            &[(0.0, 1.0), (2.0, 3.0), (5.0, 9.0)],
            &[(0.0, 4.0), (2.0, 3.0)],
            &[(0.0, 1.0), (1.0, 2.0)],
            &[(3.0, 4.0), (0.0, 1.0)],
        ];
        for calls in lists {
            let find = super::CallFinder::new(calls);
            for k in 0..=40 {
                let t = f64::from(k) * 0.25 - 0.5;
                let scan = calls.iter().position(|&(s, e)| s <= t && t <= e);
                assert_eq!(find.first_containing(t), scan, "{calls:?} at {t}");
            }
        }
    }
}
