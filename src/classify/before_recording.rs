//! Memory that existed before recording began (intervals whose [`Origin`]
//! is not `Traced`; the report's `baseline_bytes` and `before_recording`),
//! categorised by evidence. One name for it in the code: *before recording*.
//!
//! What its own frames show was decided by the rules already
//! (`classify_before_recording`); this module decides what they do not show, from
//! the [`Evidence`] the rest of the trace gives, and every byte it decides
//! carries an `inferred_…` rule:
//!
//! - **The untracked lump** (Chrome traces: `Total Allocated` beyond what
//!   the events replay, one interval) is split into parts: parameters (from
//!   gradient sizes, else from the weights operators read), gradients kept
//!   between steps, optimizer state (its state tensors per parameter ×
//!   the parameters), a KV-cache pool, and `unknown` for the rest. Amounts
//!   the trace shows allocated while recording are subtracted first, and
//!   each part is at most what is left of the lump.
//! - **Blocks without frames** (snapshots: live at dump time or freed, never
//!   allocated in the history) are matched by size: each parameter size
//!   (one gradient each) gives one parameter block, one gradient block when
//!   gradients are kept, and one block per optimizer state tensor; the rest
//!   stay `unknown`. In a history with no backward pass and no optimizer
//!   step, a block alive from before recording to the end is taken as a
//!   weight, and named so (`inferred_weights_…`).

use std::collections::BTreeMap;

use crate::model::Category;
use crate::timeline::{Interval, Origin, Replay};
use crate::units::human_bytes;

use super::chains::Chains;
use super::evidence::Evidence;
use super::{update_order, Builtin, Classification, Context, Rule};

/// One part of the memory that existed before recording, as the report
/// shows it: its bytes (at the start of recording), category, rule, and
/// what the category was decided from.
#[derive(Debug, Clone, PartialEq)]
pub struct Inference {
    pub category: Category,
    pub bytes: u64,
    pub rule: Rule,
    pub from: String,
}

/// What [`infer`] decided beyond the classes it changed in place: the
/// untracked lump's parts (the caller makes an interval and a class of each:
/// [`Replay::split`]), and each inferred rule's reason.
#[derive(Debug, Default)]
pub(super) struct Decided {
    /// The lump's interval and its parts, in order.
    pub(super) lump: Option<(usize, Vec<(u64, Classification)>)>,
    from: BTreeMap<Rule, String>,
}

/// Categorises the intervals from before recording that no rule could:
/// blocks by size (in `classes`), and the untracked lump by part (returned).
pub(super) fn infer(ctx: &Context<'_>, replay: &Replay, classes: &mut [Classification]) -> Decided {
    // Nothing existed before recording: no evidence to gather (passes over
    // every event saved).
    if replay.intervals.iter().all(|i| i.origin == Origin::Traced) {
        return Decided::default();
    }
    // The in-place updates' chains, read by the evidence and the blocks.
    let chains = Chains::new(&replay.intervals, &ctx.version_bumps);
    let evidence = Evidence::gather(ctx, replay, classes, chains.as_ref());
    if std::env::var_os("MEMCUT_DEBUG_EVIDENCE").is_some() {
        eprintln!("{}: {evidence:#?}", ctx.device.device);
    }
    let mut from: BTreeMap<Rule, String> = BTreeMap::new();
    match_blocks(ctx, &evidence, chains.as_ref(), replay, classes, &mut from);
    let mut lump = None;
    if let Some(k) = replay
        .intervals
        .iter()
        .position(|i| i.origin == Origin::BeforeRecordingUnnamed)
    {
        let parts = split_lump(&evidence, replay, classes, k);
        lump = Some((k, parts.iter().map(|&(bytes, c, _)| (bytes, c)).collect()));
        for (_, c, why) in parts {
            from.entry(c.rule).or_insert(why);
        }
    }
    Decided { lump, from }
}

/// Classifies the frameless baseline blocks by size (see the module doc);
/// `from` gets each inferred rule's reason.
pub(super) fn match_blocks(
    ctx: &Context<'_>,
    evidence: &Evidence,
    chains: Option<&Chains>,
    replay: &Replay,
    classes: &mut [Classification],
    from: &mut BTreeMap<Rule, String>,
) {
    // Gradients backward added into, told by that (`evidence.rs`).
    let added = Builtin::InferredGradientAddedInto.class();
    for &k in &evidence.added_into {
        if classes[k].rule == Builtin::ExistedBeforeTraceNoEvidence.into() {
            classes[k] = added;
        }
    }
    if !evidence.added_into.is_empty() {
        from.insert(
            added.rule,
            format!(
                "from before recording, and backward added a new gradient into each in place ({} tensors): gradients kept between steps",
                evidence.added_into.len()
            ),
        );
    }
    if let Some(chains) = chains {
        update_order::classify(ctx, evidence, replay, chains, classes, from);
    }
    match_by_size(ctx, evidence, replay, classes, from);
    // Later versions of a tensor (in-place updates) share its category.
    if let Some(chains) = chains {
        let open = Rule::from(Builtin::ExistedBeforeTraceNoEvidence);
        for i in 0..classes.len() {
            let root = chains.root(i);
            if root != i && classes[i].rule == open {
                classes[i] = classes[root];
            }
        }
    }
}

/// Frameless blocks matched to the evidence by size alone.
fn match_by_size(
    ctx: &Context<'_>,
    evidence: &Evidence,
    replay: &Replay,
    classes: &mut [Classification],
    from: &mut BTreeMap<Rule, String>,
) {
    let open: Vec<usize> = replay
        .intervals
        .iter()
        .zip(classes.iter())
        .enumerate()
        .filter(|(_, (i, c))| {
            matches!(
                i.origin,
                Origin::BeforeRecordingFreed | Origin::BeforeRecordingLive
            ) && c.rule == Builtin::ExistedBeforeTraceNoEvidence.into()
        })
        .map(|(k, _)| k)
        .collect();
    if open.is_empty() {
        return;
    }
    let Some(params) = evidence.params.as_ref().filter(|_| evidence.training) else {
        if !evidence.training {
            let weight = Builtin::InferredWeightsForwardOnly.class();
            for &k in &open {
                if replay.intervals[k].end >= ctx.positions {
                    classes[k] = weight;
                }
            }
            from.insert(weight.rule, FORWARD_ONLY_WEIGHTS.into());
        }
        return;
    };
    // Roles a block of each parameter size can have, in order, and how
    // many blocks per parameter.
    let mut roles: Vec<(Classification, u64)> =
        vec![(Builtin::InferredParameterFromGradients.class(), 1)];
    if evidence.gradients_kept {
        roles.push((Builtin::InferredGradientKept.class(), 1));
    }
    if let Some(o) = evidence
        .optimizer
        .as_ref()
        .filter(|o| o.states_per_param > 0)
    {
        roles.push((Builtin::InferredOptimizerState.class(), o.states_per_param));
    }
    let mut per_size: BTreeMap<u64, u64> = BTreeMap::new();
    for &s in &params.sizes {
        *per_size.entry(s).or_default() += 1;
    }
    // Blocks from before recording whose own frames show their category
    // (optimizer state with optimizer frames, …) leave fewer blocks of that
    // size to infer. (Not blocks allocated while recording: a
    // profile-derived snapshot shows each in-place update of a pre-existing
    // tensor as a new allocation of the same size.)
    let mut shown: BTreeMap<(Category, u64), u64> = BTreeMap::new();
    for (i, c) in replay.intervals.iter().zip(classes.iter()) {
        if i.origin.before_recording() && (shows(replay, i, c) || update_order::decided(c)) {
            *shown.entry((c.category, i.size)).or_default() += 1;
        }
    }
    // An optimizer that replaces its state shows, per size, its states of
    // every parameter of that size: more parameters of a size than the
    // gradients counted (an embedding's gradient is not added in place by
    // AccumulateGrad) are read from there. Only sizes the gradients name:
    // some optimizers' states are not shaped like their parameters.
    let mut from_optimizer = false;
    if let Some(states) = evidence
        .optimizer
        .as_ref()
        .map(|o| o.states_per_param)
        .filter(|&s| s > 0)
    {
        for (size, count) in per_size.iter_mut() {
            let seen = shown
                .get(&(Category::OptimizerState, *size))
                .copied()
                .unwrap_or(0);
            if seen / states > *count {
                *count = seen / states;
                from_optimizer = true;
            }
        }
    }
    // Blocks of one size are interchangeable: nothing in a snapshot tells a
    // parameter from an optimizer state of the same size. They are taken in
    // order of their end, then address; only the totals by size are evidence.
    let mut by_size: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for &k in &open {
        by_size.entry(replay.intervals[k].size).or_default().push(k);
    }
    for (size, mut blocks) in by_size {
        let Some(&count) = per_size.get(&size) else {
            continue;
        };
        let i = |k: usize| &replay.intervals[k];
        blocks.sort_by_key(|&k| (i(k).end, i(k).addr, k));
        let mut blocks = blocks.into_iter();
        for &(c, per_param) in &roles {
            let seen = shown.get(&(c.category, size)).copied().unwrap_or(0);
            let slots = (count * per_param).saturating_sub(seen);
            for k in blocks.by_ref().take(slots as usize) {
                classes[k] = c;
            }
        }
    }
    from.insert(
        Builtin::InferredParameterFromGradients.into(),
        format!(
            "blocks matched by size to the {}{}",
            params.from,
            if from_optimizer {
                ", and to the optimizer's state blocks from before recording where they show more parameters of a size"
            } else {
                ""
            }
        ),
    );
    from.insert(
        Builtin::InferredGradientKept.into(),
        gradients_kept_reason(),
    );
    if let Some(o) = &evidence.optimizer {
        from.insert(Builtin::InferredOptimizerState.into(), optimizer_reason(o));
    }
}

fn gradients_kept_reason() -> String {
    "gradients are kept between steps (Optimizer.zero_grad freed nothing, or the first backward pass added into existing .grad tensors), one per parameter".into()
}

fn optimizer_reason(o: &super::evidence::Optimizer) -> String {
    format!(
        "{}: {} state tensor(s) per parameter ({})",
        o.name, o.states_per_param, o.because
    )
}

/// Whether the trace shows `i` as memory of its category on its own
/// evidence: classified by a rule that observes, and either from before
/// recording or alive at the end (state that persists, rather than a
/// step's scratch).
fn shows(replay: &Replay, i: &Interval, c: &Classification) -> bool {
    !c.rule.infers()
        && c.category != Category::Unknown
        && i.origin != Origin::BeforeRecordingUnnamed
        && (i.origin.before_recording() || i.end >= replay.positions())
}

/// Bytes of category `c` that the trace shows as its own ([`shows`]).
fn shown(replay: &Replay, classes: &[Classification], c: Category) -> u64 {
    replay
        .intervals
        .iter()
        .zip(classes)
        .filter(|(i, cl)| cl.category == c && shows(replay, i, cl))
        .fold(0u64, |s, (i, _)| s.saturating_add(i.size))
}

/// The parts of the untracked lump at `replay.intervals[lump]`, in order:
/// (bytes, classification, why), summing to the lump.
fn split_lump(
    evidence: &Evidence,
    replay: &Replay,
    classes: &[Classification],
    lump: usize,
) -> Vec<(u64, Classification, String)> {
    let total = replay.intervals[lump].size;
    let mut rest = total;
    let mut parts = Vec::new();
    let mut take = |want: u64, c: Classification, why: String, rest: &mut u64| {
        let b = want.min(*rest);
        if b > 0 {
            *rest -= b;
            parts.push((b, c, why));
        }
    };
    let shown = |c| shown(replay, classes, c);
    let params = evidence
        .params
        .as_ref()
        .map(|p| {
            (
                p.bytes(),
                Builtin::InferredParameterFromGradients,
                p.from.clone(),
            )
        })
        .or_else(|| {
            evidence.weights.as_ref().map(|w| {
                (
                    w.amount.bytes,
                    Builtin::InferredParameterFromShapes,
                    w.amount.from.clone(),
                )
            })
        });
    if let Some((p, rule, why)) = &params {
        let want = p.saturating_sub(shown(Category::Parameter));
        take(want, rule.class(), why.clone(), &mut rest);
        if evidence.gradients_kept {
            let want = p.saturating_sub(shown(Category::Gradient));
            take(
                want,
                Builtin::InferredGradientKept.class(),
                gradients_kept_reason(),
                &mut rest,
            );
        }
        if let Some(o) = &evidence.optimizer {
            let want = p
                .saturating_mul(o.states_per_param)
                .saturating_sub(shown(Category::OptimizerState));
            let why = format!("{} × {}", optimizer_reason(o), human_bytes(*p));
            take(
                want,
                Builtin::InferredOptimizerState.class(),
                why,
                &mut rest,
            );
        }
    }
    if let Some(kv) = &evidence.kv_pool {
        let all = kv.per_call.saturating_mul(kv.calls);
        let (want, why) = if all <= rest {
            (all, kv.from.clone())
        } else {
            // More than is left: the layers share cache tensors (vLLM gives
            // layers of different attention groups one tensor). Counted as
            // the most whole calls' caches, in equal groups, that fit.
            let fit = (1..=kv.calls)
                .rev()
                .find(|d| kv.calls % d == 0 && d * kv.per_call <= rest)
                .unwrap_or(0);
            (
                fit * kv.per_call,
                format!(
                    "{}; all of them ({}) exceed what existed before recording, so layers share cache tensors: counted as {fit} calls' caches, the most that fit in equal groups",
                    kv.from,
                    human_bytes(all)
                ),
            )
        };
        take(want, Builtin::InferredKvCachePool.class(), why, &mut rest);
    }
    // Taken only whole: part of one is no evidence of it (what is left
    // smaller than it says it was not there). The cuBLAS workspace; then,
    // once the weights are known, DistributedDataParallel's gradient
    // buckets (after the weights, their state and kept gradients: with
    // bucket views the buckets are the gradients, and nothing is left for
    // them) and the model's input (what the forward reads besides the
    // weights); all before the heads below, whose test is what is left.
    let weights_known = params.is_some();
    for (amount, rule) in [
        (
            evidence.cublas_workspace.as_ref(),
            Builtin::InferredCublasWorkspace,
        ),
        (
            evidence.ddp_buckets.as_ref().filter(|_| weights_known),
            Builtin::InferredDdpBucketAllReduced,
        ),
        (
            evidence.model_input.as_ref().filter(|_| weights_known),
            Builtin::InferredModelInput,
        ),
    ] {
        if let Some(a) = amount.filter(|a| a.bytes <= rest) {
            take(a.bytes, rule.class(), a.from.clone(), &mut rest);
        }
    }
    // Heads shaped like embedding tables were counted once, as if tied to
    // them. What existed before recording decides: with room left for them
    // (and, when an optimizer keeps state, for theirs), they are weights of
    // their own; a tied head would leave exactly those bytes unexplained.
    if let Some(w) = evidence
        .weights
        .as_ref()
        .filter(|w| evidence.params.is_none() && w.heads_like_tables > 0)
    {
        let heads = w.heads_like_tables;
        let states = evidence
            .optimizer
            .as_ref()
            .map_or(0, |o| o.states_per_param);
        let kept = u64::from(evidence.gradients_kept);
        let need = heads.saturating_mul(1 + kept + states);
        if need <= rest {
            rest -= need;
            let how = if rest == 0 {
                "exactly what was left"
            } else {
                "with room for them"
            };
            let note = format!(
                "; output projections shaped like the embedding table and read as often ({}) are weights of their own, not tied to it: what existed before recording holds them ({how})",
                human_bytes(heads)
            );
            let mut add = |bytes: u64, builtin: Builtin, why: String| {
                let class = builtin.class();
                if bytes == 0 {
                    return;
                }
                match parts.iter_mut().find(|p| p.1 == class) {
                    Some(p) => {
                        p.0 = p.0.saturating_add(bytes);
                        p.2.push_str(&note);
                    }
                    None => parts.push((bytes, class, format!("{why}{note}"))),
                }
            };
            add(
                heads,
                Builtin::InferredParameterFromShapes,
                w.amount.from.clone(),
            );
            add(
                heads * kept,
                Builtin::InferredGradientKept,
                gradients_kept_reason(),
            );
            if let Some(o) = &evidence.optimizer {
                let why = format!("{} × {}", optimizer_reason(o), human_bytes(heads));
                add(heads * states, Builtin::InferredOptimizerState, why);
            }
        }
    }
    if rest > 0 {
        // Nothing read from the trace explains it, and the history runs
        // forward passes and trains nothing: taken as weights, as a block
        // alive through such a history is (match_by_size), and said to be
        // an assumption.
        let (class, why) = if parts.is_empty() && !evidence.training && evidence.reads_weights {
            (
                Builtin::InferredWeightsForwardOnly.class(),
                FORWARD_ONLY_WEIGHTS.into(),
            )
        } else {
            (
                Builtin::AllocatedBeforeProfilingUnattributed.class(),
                "no evidence in the trace says what it is".into(),
            )
        };
        parts.push((rest, class, why));
    }
    parts
}

const FORWARD_ONLY_WEIGHTS: &str = "alive from before recording to the end of a history with no backward pass and no optimizer step: taken as weights (an assumption, not a measurement)";

/// What existed before recording (every such interval, at the start), by
/// (category, rule), largest first; on the intervals after the lump's split.
pub(super) fn summarize(
    replay: &Replay,
    classes: &[Classification],
    decided: &Decided,
) -> Vec<Inference> {
    let from = &decided.from;
    let mut by: BTreeMap<(Category, Rule), u64> = BTreeMap::new();
    for (i, c) in replay.intervals.iter().zip(classes) {
        if i.origin.before_recording() {
            let b = by.entry((c.category, c.rule)).or_default();
            *b = b.saturating_add(i.size);
        }
    }
    let mut out: Vec<Inference> = by
        .into_iter()
        .map(|((category, rule), bytes)| Inference {
            category,
            bytes,
            rule,
            from: from.get(&rule).cloned().unwrap_or_else(|| {
                if category == Category::Unknown {
                    "no evidence in the trace says what it is".into()
                } else {
                    "the block's own frames".into()
                }
            }),
        })
        .collect();
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.category.cmp(&b.category)));
    out
}
