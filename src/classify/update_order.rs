//! Parameters and optimizer state from before recording, told apart by the
//! order an optimizer step updates them in (snapshots made from a profile).
//!
//! A tensor that existed before recording has no frames, and a parameter is
//! the size of its own optimizer state, so sizes alone cannot tell which
//! block is which (`before_recording.rs` can only count them). A profile-derived
//! snapshot shows each in-place update as a version of the tensor
//! (`chains.rs`), and every optimizer writes a parameter *after* the state
//! it is computed from: `buf.mul_(m).add_(g)` then `p.add_(buf)` (SGD),
//! `exp_avg.lerp_`, `exp_avg_sq.mul_().addcmul_()` then `p.addcdiv_` (Adam,
//! AdamW, whose weight decay `p.mul_` comes first and so is not the last
//! write). Ordering the tensors the step updates by their *last* update
//! gives one of two shapes:
//!
//! - one parameter at a time (`foreach=False`): `m₁ v₁ p₁ m₂ v₂ p₂ …`,
//!   groups of `k + 1` tensors of one size, the parameter last;
//! - all parameters at once (`foreach=True`, fused): `m₁…mₙ v₁…vₙ p₁…pₙ`,
//!   `k + 1` runs of `n` tensors with the same sizes in the same order, the
//!   parameters last.
//!
//! `n` is the number of parameters (one gradient each) or, without
//! gradients, `k` the optimizer's state tensors per parameter. A shape is
//! taken only when the sizes fit it exactly and, when the gradients are
//! known, the parameters it names have the gradients' sizes; when both
//! shapes fit and disagree, or neither fits, nothing is inferred here.

use std::collections::BTreeMap;

use rustc_hash::FxHashSet;

use crate::timeline::{Interval, Origin, Replay};
use crate::vocabulary::is_ddp_name;

use super::chains::Chains;
use super::evidence::Evidence;
use super::{Builtin, Classification, Context, Phase, Rule};

/// Classifies the frameless tensors from before recording that the
/// optimizer step updates in place (see the module doc); `from` gets each
/// rule's reason.
pub(super) fn classify(
    ctx: &Context<'_>,
    evidence: &Evidence,
    replay: &Replay,
    chains: &Chains,
    classes: &mut [Classification],
    from: &mut BTreeMap<Rule, String>,
) {
    let mut order = last_updated_order(ctx, replay, chains);
    let open = Builtin::ExistedBeforeTraceNoEvidence.class();
    // Gradients kept between steps are zeroed in place after the step
    // (`zero_grad(set_to_none=False)`): not the step's groups.
    let added = Builtin::InferredGradientAddedInto.class();
    order.retain(|&k| classes[k] != added);
    if order.is_empty() || order.iter().any(|&k| classes[k] != open) {
        return;
    }
    // Tensors the size of no parameter (Adam's `step` counters) are state
    // the step keeps; the order of the others tells their roles.
    let gradient_sized = |k: usize| {
        evidence
            .params
            .as_ref()
            .is_none_or(|p| p.sizes.contains(&replay.intervals[k].size))
    };
    let (mut order, mut other): (Vec<usize>, Vec<usize>) =
        order.into_iter().partition(|&k| gradient_sized(k));
    let sizes_of =
        |order: &[usize]| -> Vec<u64> { order.iter().map(|&k| replay.intervals[k].size).collect() };
    let mut params = parameters(&sizes_of(&order), evidence);
    // Without the gradients' sizes, Adam's `step` counters (one element,
    // updated first for each parameter) break the groups: set scalars
    // apart and try again.
    if params.is_none() && evidence.params.is_none() {
        let (tensors, scalars): (Vec<usize>, Vec<usize>) = order
            .iter()
            .partition(|&&k| replay.intervals[k].size > MAX_SCALAR_BYTES);
        if !scalars.is_empty() {
            params = parameters(&sizes_of(&tensors), evidence);
            if params.is_some() {
                order = tensors;
                other.extend(scalars);
            }
        }
    }
    let Some(params) = params else {
        return;
    };
    let parameter = Builtin::InferredParameterUpdatedLast.class();
    let state = Builtin::InferredOptimizerStateUpdatedFirst.class();
    for (j, &k) in order.iter().enumerate() {
        classes[k] = if params[j] { parameter } else { state };
    }
    for &k in &other {
        classes[k] = state;
    }
    let param_sizes: Vec<u64> = order
        .iter()
        .zip(&params)
        .filter(|(_, &p)| p)
        .map(|(&k, _)| replay.intervals[k].size)
        .collect();
    ddp_buckets(ctx, replay, &param_sizes, classes, from);
    let n = params.iter().filter(|&&p| p).count();
    from.insert(
        parameter.rule,
        format!(
            "the optimizer step updated {} tensors from before recording in place; the last one written of each parameter's group ({n}) is the parameter",
            order.len()
        ),
    );
    from.insert(
        state.rule,
        format!(
            "updated in place by the optimizer step before its parameter ({} state tensor(s) per parameter), or not the size of any parameter ({})",
            order.len() / n - 1,
            other.len()
        ),
    );
}

/// DistributedDataParallel's gradient buckets among the blocks from before
/// recording nothing else named: DDP fills its buckets with the
/// parameters in reverse order (the order their gradients are ready), so
/// the buckets are runs of consecutive parameters, last updated first,
/// each exactly a block's size. Taken only in a run that shows DDP in its
/// frames and when the blocks tile every parameter.
fn ddp_buckets(
    ctx: &Context<'_>,
    replay: &Replay,
    param_sizes: &[u64],
    classes: &mut [Classification],
    from: &mut BTreeMap<Rule, String>,
) {
    if !shows_ddp(ctx) || param_sizes.is_empty() {
        return;
    }
    let open = Builtin::ExistedBeforeTraceNoEvidence.class();
    let blocks: Vec<(usize, u64)> = (0..replay.intervals.len())
        .filter(|&k| classes[k] == open && replay.intervals[k].origin.before_recording())
        .map(|k| (k, replay.intervals[k].size))
        .collect();
    let Some(taken) = tile(param_sizes, blocks) else {
        return;
    };
    let bucket = Builtin::InferredDdpBucket.class();
    for &k in &taken {
        classes[k] = bucket;
    }
    from.insert(
        bucket.rule,
        format!(
            "DistributedDataParallel's gradient buckets: {} block(s) from before recording that hold the {} parameters' sizes exactly, in runs of consecutive parameters (last updated first, as DDP fills its buckets)",
            taken.len(),
            param_sizes.len()
        ),
    );
}

/// Whether some frame shows DistributedDataParallel ([`is_ddp_name`]).
fn shows_ddp(ctx: &Context<'_>) -> bool {
    ctx.sites.strings().any(is_ddp_name)
}

/// DistributedDataParallel's buckets among the tensors made while
/// recording (`Builtin::InferredDdpBucketMade`): in a run that shows DDP,
/// the tensors made outside the optimizer step and kept to the end that
/// hold the weights (those of `weight_sizes`, in the order they were made)
/// in runs of exactly their sizes ([`tile`]).
pub(super) fn buckets_made(
    ctx: &Context<'_>,
    intervals: &[Interval],
    weight_sizes: &FxHashSet<u64>,
) -> FxHashSet<usize> {
    if weight_sizes.is_empty() || !shows_ddp(ctx) {
        return FxHashSet::default();
    }
    let (weights, rest): (Vec<usize>, Vec<usize>) = (0..intervals.len())
        .filter(|&k| {
            let i = &intervals[k];
            i.origin == Origin::Traced
                && i.end >= ctx.positions
                && ctx.facts[i.site as usize].creates
                && ctx.phase(i.start) != Phase::Optimizer
        })
        .partition(|&k| weight_sizes.contains(&intervals[k].size));
    let sizes: Vec<u64> = weights.iter().map(|&k| intervals[k].size).collect();
    let rest = rest.into_iter().map(|k| (k, intervals[k].size)).collect();
    tile(&sizes, rest).unwrap_or_default().into_iter().collect()
}

/// The blocks (id, bytes) that hold `param_sizes`, last first, in runs of
/// consecutive parameters of exactly a block's size each; `None` unless
/// every parameter falls in one.
pub(super) fn tile(param_sizes: &[u64], mut blocks: Vec<(usize, u64)>) -> Option<Vec<usize>> {
    let mut taken = Vec::new();
    let mut run = 0u64;
    for &size in param_sizes.iter().rev() {
        run = run.saturating_add(size);
        if let Some(j) = blocks.iter().position(|&(_, b)| b == run) {
            taken.push(blocks.swap_remove(j).0);
            run = 0;
        }
    }
    (run == 0 && !taken.is_empty()).then_some(taken)
}

/// The most bytes a one-element tensor takes (a float64 or int64 step
/// counter).
pub(super) const MAX_SCALAR_BYTES: u64 = 8;

/// Whether `c` was decided from the tensor's in-place updates, here or by
/// backward's adds (`before_recording` counts such blocks as shown).
pub(super) fn decided(c: &Classification) -> bool {
    c.rule == Builtin::InferredParameterUpdatedLast.into()
        || c.rule == Builtin::InferredOptimizerStateUpdatedFirst.into()
        || c.rule == Builtin::InferredGradientAddedInto.into()
}

/// The first versions of the tensors from before recording that the
/// optimizer step updates in place, ordered by their last update there.
fn last_updated_order(ctx: &Context<'_>, replay: &Replay, chains: &Chains) -> Vec<usize> {
    let bumped: Vec<u32> = ctx
        .version_bumps
        .iter()
        .map(|&b| b + 1)
        .filter(|&start| ctx.phase(start) == Phase::Optimizer)
        .collect();
    if bumped.is_empty() {
        return Vec::new();
    }
    // Last update position of each first version (the step's own
    // intermediates, made while recording, are updated in place too).
    let mut last: BTreeMap<usize, u32> = BTreeMap::new();
    for (i, interval) in replay.intervals.iter().enumerate() {
        if bumped.binary_search(&interval.start).is_ok() {
            let root = chains.root(i);
            if root == i || !replay.intervals[root].origin.before_recording() {
                continue;
            }
            let at = last.entry(root).or_default();
            *at = (*at).max(interval.start);
        }
    }
    let mut order: Vec<(u32, usize)> = last.into_iter().map(|(k, at)| (at, k)).collect();
    order.sort_unstable();
    order.into_iter().map(|(_, k)| k).collect()
}

/// Which of the tensors (by `sizes`, in last-update order) are parameters,
/// if exactly one shape of the module doc fits.
fn parameters(sizes: &[u64], evidence: &Evidence) -> Option<Vec<bool>> {
    let total = sizes.len();
    let gradients = evidence.params.as_ref().map(|p| p.sizes.clone());
    let group = match (&gradients, &evidence.optimizer) {
        (Some(g), _) if !g.is_empty() && total % g.len() == 0 => total / g.len(),
        (Some(_), _) => return None,
        (None, Some(o)) => usize::try_from(o.states_per_param).ok()? + 1,
        (None, None) => return None,
    };
    if group == 0 || total % group != 0 {
        return None;
    }
    let n = total / group;
    let fits = |params: &[bool]| {
        let mut named: Vec<u64> = (0..total)
            .filter(|&j| params[j])
            .map(|j| sizes[j])
            .collect();
        named.sort_unstable();
        gradients.as_ref().is_none_or(|g| {
            let mut g = g.clone();
            g.sort_unstable();
            g == named
        })
    };
    // One parameter at a time: groups of one size, the parameter last.
    let one_at_a_time = sizes
        .chunks(group)
        .all(|c| c.iter().all(|&s| s == c[0]))
        .then(|| {
            (0..total)
                .map(|j| j % group == group - 1)
                .collect::<Vec<_>>()
        })
        .filter(|p| fits(p));
    // All at once: runs of `n` with the same sizes, the parameters last.
    let all_at_once = sizes
        .chunks(n)
        .all(|run| run == &sizes[total - n..])
        .then(|| (0..total).map(|j| j >= total - n).collect::<Vec<_>>())
        .filter(|p| fits(p));
    match (one_at_a_time, all_at_once) {
        (Some(a), Some(b)) => (a == b).then_some(a),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::evidence::{Optimizer, ParamSizes};

    fn evidence(gradients: Option<Vec<u64>>, states: Option<u64>) -> Evidence {
        Evidence {
            params: gradients.map(|sizes| ParamSizes {
                sizes,
                from: String::new(),
            }),
            optimizer: states.map(|states_per_param| Optimizer {
                name: "AdamW".into(),
                states_per_param,
                because: String::new(),
            }),
            ..Evidence::default()
        }
    }

    #[test]
    fn one_parameter_at_a_time_names_the_last_of_each_group() {
        // m1 v1 p1 m2 v2 p2 (sizes 8 and 4)
        let sizes = [8, 8, 8, 4, 4, 4];
        let want = vec![false, false, true, false, false, true];
        assert_eq!(
            parameters(&sizes, &evidence(Some(vec![4, 8]), None)),
            Some(want.clone())
        );
        assert_eq!(parameters(&sizes, &evidence(None, Some(2))), Some(want));
    }

    #[test]
    fn all_at_once_names_the_last_run() {
        // m1 m2 v1 v2 p1 p2
        let sizes = [8, 4, 8, 4, 8, 4];
        let want = vec![false, false, false, false, true, true];
        assert_eq!(
            parameters(&sizes, &evidence(Some(vec![4, 8]), None)),
            Some(want)
        );
    }

    #[test]
    fn ambiguous_or_misfitting_orders_infer_nothing() {
        // All one size and both shapes fit but disagree.
        assert_eq!(parameters(&[4, 4, 4, 4], &evidence(None, Some(1))), None);
        // Three tensors for two gradients.
        assert_eq!(
            parameters(&[4, 4, 8], &evidence(Some(vec![4, 8]), None)),
            None
        );
        // Groups of mixed sizes and runs that differ.
        assert_eq!(
            parameters(&[4, 8, 8, 4], &evidence(Some(vec![4, 8]), None)),
            None
        );
        // No gradients and no optimizer: no group size.
        assert_eq!(parameters(&[4, 4], &evidence(None, None)), None);
    }

    #[test]
    fn buckets_tile_the_parameters_last_first() {
        // Parameters 4, 8, 16, 32: one bucket of all, or 32+16 then 8+4.
        assert_eq!(tile(&[4, 8, 16, 32], vec![(7, 60)]), Some(vec![7]));
        assert_eq!(
            tile(&[4, 8, 16, 32], vec![(1, 12), (2, 48), (3, 99)]),
            Some(vec![2, 1])
        );
        // A block that takes some but not all parameters, or none at all.
        assert_eq!(tile(&[4, 8, 16, 32], vec![(2, 48)]), None);
        assert_eq!(tile(&[4, 8], vec![(1, 5)]), None);
    }

    #[test]
    fn without_state_every_updated_tensor_is_a_parameter() {
        assert_eq!(
            parameters(&[4, 8], &evidence(Some(vec![4, 8]), None)),
            Some(vec![true, true])
        );
    }
}
