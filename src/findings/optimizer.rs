//! Optimizer state replaced out of place: the
//! `optimizer_state_replaced_out_of_place` finding.

use std::collections::HashMap;

use super::{holder, Found};
use crate::analysis::ClassifiedDevice;
use crate::classify::{first_after, Phase, PhasePositions, Rule};
use crate::model::{Category, Trace};
use crate::schema::FindingKind;
use crate::units::human_bytes;

/// Fewest replaced tensors a finding needs (one parameter's two moments).
const MIN_REPLACED: usize = 2;

/// Optimizer state made anew in the step while the tensors it replaces are
/// still alive: a hand-written optimizer that updates its moments out of
/// place (`m = beta1 * m + (1 - beta1) * g`) makes the expression's
/// operands and a second copy of each moment until it stores the new one
/// (and the last parameter's old ones until `step()` returns), where
/// `torch.optim`'s optimizers update them in place (`exp_avg.lerp_(…)`).
///
/// The evidence: a tensor of optimizer state allocated in the optimizer
/// step, while a tensor of its size made before it is alive and freed
/// later in the same step (before the next forward or backward
/// allocation), after the next allocation: state if some is (the first
/// step replaces its `zeros_like` moments, made by the step; a warm
/// snapshot's old moments predate the recording and have no frames). Each
/// old tensor pairs with one new one, the first it can. Fixed: updated in
/// place, the old tensor's memory is the new one (the old one ends where
/// the new one was made), and the operands the step freed right after
/// making it (`0.9 * m`, `0.1 * g`) are never made.
pub(super) fn replaced_out_of_place(
    trace: &Trace,
    cd: &ClassifiedDevice,
    phases: &PhasePositions,
) -> Option<Found> {
    let intervals = &cd.timeline.replay.intervals;
    let positions = cd.timeline.replay.positions();
    if phases.optimizer.is_empty() {
        return None;
    }
    // Where the step that allocated at `p` ends: the next forward or
    // backward allocation.
    let step_end = |p: u32| {
        first_after(&phases.forward, p)
            .into_iter()
            .chain(first_after(&phases.backward, p))
            .min()
            .unwrap_or(positions)
    };
    let state = |i: usize| cd.classes[i].category == Category::OptimizerState;
    let made_in_step = |i: usize| matches!(cd.classes[i].rule, Rule::Builtin(r) if r.phase_observed() == Some(Phase::Optimizer));
    let zeros_like = |i: usize| {
        trace
            .sites
            .frames(intervals[i].site)
            .iter()
            .take(4)
            .any(|f| trace.sites.str(f.name).contains("zeros_like"))
    };
    let unknown_before = |i: usize| {
        intervals[i].origin.before_recording() && cd.classes[i].category == Category::Unknown
    };
    // Old tensors and operands, freed while recording, by size, in order of
    // their end.
    let mut old: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, iv) in intervals.iter().enumerate() {
        if (state(i) || made_in_step(i) || unknown_before(i)) && iv.end < positions {
            old.entry(iv.size).or_default().push(i);
        }
    }
    if old.is_empty() {
        return None;
    }
    for list in old.values_mut() {
        list.sort_by_key(|&i| (intervals[i].end, i));
    }
    let mut taken = vec![false; intervals.len()];
    let mut replaced = Vec::new();
    let mut fixed_ends = Vec::new();
    let mut site = None;
    // The start of the last state tensor the step made.
    let mut previous = 0;
    for (n, iv) in intervals.iter().enumerate() {
        if !state(n) || !made_in_step(n) {
            continue;
        }
        let Some(list) = old.get(&iv.size) else {
            continue;
        };
        let end = step_end(iv.start);
        // (Not before it: the next interval may be one from before the
        // recording, which starts at 0 — a warm profile-made snapshot.)
        let next_alloc = intervals
            .get(n + 1)
            .map_or(positions, |next| next.start)
            .max(iv.start);
        let alive_here = |o: usize| !taken[o] && intervals[o].start < iv.start;
        // Its operands: made by the step before it, freed right after it.
        let lo = list.partition_point(|&o| intervals[o].end <= iv.start);
        let hi = list.partition_point(|&o| intervals[o].end <= next_alloc);
        // (Made after the state tensor made before it: the first step's
        // `zeros_like` moment, made before the other moment's expression,
        // is what this one replaces.)
        let mut operands: Vec<usize> = list[lo..hi]
            .iter()
            .copied()
            .filter(|&o| {
                alive_here(o) && made_in_step(o) && !state(o) && intervals[o].start > previous
            })
            .collect();
        // What it replaces dies in this step: state if any such is, else a
        // tensor from before recording nothing named, else one the step
        // made (not an operand).
        let candidates = || {
            list[lo..]
                .iter()
                .copied()
                .take_while(|&o| intervals[o].end <= end)
                .filter(|&o| alive_here(o))
        };
        let pick = candidates()
            .find(|&o| state(o))
            .or_else(|| candidates().find(|&o| unknown_before(o)))
            .or_else(|| candidates().find(|o| !operands.contains(o)))
            // A state with one tensor per parameter (SGD's momentum) makes
            // it with `zeros_like` right before the first step's
            // expression: freed with the operands, it is what is replaced.
            .or_else(|| {
                let k = operands.iter().position(|&o| zeros_like(o))?;
                Some(operands.remove(k))
            });
        previous = iv.start;
        let Some(o) = pick else { continue };
        taken[o] = true;
        replaced.push(o);
        fixed_ends.push((o, iv.start));
        for k in operands {
            taken[k] = true;
            fixed_ends.push((k, intervals[k].start));
        }
        site.get_or_insert(iv.site);
    }
    if replaced.len() < MIN_REPLACED {
        return None;
    }
    let bytes: u64 = replaced.iter().map(|&o| intervals[o].size).sum();
    let at = site
        .and_then(|s| holder(&trace.sites, s))
        .map(|l| format!(" (first at {l})"))
        .unwrap_or_default();
    let evidence = vec![
        format!(
            "{} optimizer-state tensors ({}) were made anew in the optimizer step{at} while the tensors of the same sizes they replace were still alive, freed later in the same step: the state is updated out of place (`m = beta1 * m + …`), so the step holds two copies of what it updates, and the expression's operands",
            replaced.len(),
            human_bytes(bytes),
        ),
        FindingKind::OptimizerStateReplacedOutOfPlace.action().to_owned(),
    ];
    let intervals = fixed_ends.iter().map(|&(i, _)| i).collect();
    Some(Found {
        kind: FindingKind::OptimizerStateReplacedOutOfPlace,
        intervals,
        evidence,
        fixed_ends,
        after: None,
    })
}
