//! Operator calls where the trace does not delimit them: a snapshot made
//! from a profile (`_profile_to_snapshot`) names, for each allocation, the
//! Python stack whose innermost frame is the built-in that allocated
//! (`<built-in method _native_multi_head_attention …>`), but every call of
//! that line has the same stack. A loop over layers calls it again and
//! again; each call allocates the same sizes in the same order, so the
//! shortest period of the run's sizes splits the run into calls. What a
//! call frees before the next call starts (the last call: before the next
//! allocation elsewhere) is its scratch space; its output outlives it.

use super::chains::Chains;
use super::evidence::shortest_period;
use super::Context;
use crate::timeline::{Interval, Origin};

/// Per interval: made by a built-in's call and freed before that call
/// ended, where runs of allocations at one built-in's site repeat their
/// sizes at least twice (one call, or sizes that never repeat, such as a
/// cache growing by concatenation, tell no call apart: `false`). Empty
/// where the trace delimits operator calls itself.
///
/// An in-place update is no allocation and no free (a snapshot made from a
/// profile writes it as a free and an allocation at one address): runs
/// hold first versions only, and a tensor is freed where its last version
/// is (`chains`).
pub(super) fn freed_within_call_runs(
    ctx: &Context<'_>,
    intervals: &[Interval],
    chains: Option<&Chains>,
) -> Vec<bool> {
    if ctx.op_calls.iter().any(Option::is_some) {
        return Vec::new();
    }
    // The autograd engine's one call (`run_backward`) runs a whole backward
    // pass: no operator's call.
    let builtin: Vec<bool> = (0..ctx.sites.len() as u32)
        .map(|site| {
            let facts = &ctx.facts[site as usize];
            !facts.backward
                && !facts.accumulate_grad
                && ctx.sites.frames(site).first().is_some_and(|f| {
                    let name = ctx.sites.str(f.name);
                    name.starts_with("<built-in method ") || name.starts_with("<built-in function ")
                })
        })
        .collect();
    if !builtin.iter().any(|&b| b) {
        return Vec::new();
    }
    let first_version = |k: usize| chains.is_none_or(|c| c.root(k) == k);
    let end = |k: usize| chains.map_or(intervals[k].end, |c| c.whole(k, &intervals[k]).end);
    let mut order: Vec<usize> = (0..intervals.len())
        .filter(|&k| intervals[k].origin == Origin::Traced && first_version(k))
        .collect();
    order.sort_by_key(|&k| intervals[k].start);
    let mut out = vec![false; intervals.len()];
    let mut r = 0;
    while r < order.len() {
        let site = intervals[order[r]].site;
        let e = r + order[r..]
            .iter()
            .take_while(|&&k| intervals[k].site == site)
            .count();
        let run = &order[r..e];
        if builtin[site as usize] {
            let sizes: Vec<u64> = run.iter().map(|&k| intervals[k].size).collect();
            let period = shortest_period(&sizes).max(1);
            let after = order.get(e).map_or(ctx.positions, |&k| intervals[k].start);
            for (j, &k) in run.iter().enumerate() {
                let next_call = run
                    .get((j / period + 1) * period)
                    .map_or(after, |&n| intervals[n].start);
                let end = end(k);
                out[k] = end < ctx.positions && end < next_call;
            }
        }
        r = e;
    }
    out
}
