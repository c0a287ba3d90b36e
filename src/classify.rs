//! Classification: every allocation interval → a [`Category`] and the rule that fired.
//!
//! Rules are ordered and explainable: evidence comes from the allocation
//! site's frames (innermost first), the *phase* the program was in when the
//! memory was allocated and freed (forward, backward, optimizer step, …), and
//! the allocation's lifetime. User rules from a file are tried first.
//!
//! Phases come from frames because every format has them: snapshot stacks
//! (`torch/optim/adamw.py`, `run_backward`, `nn.Module: …`) and Chrome
//! operator stacks (`Optimizer.step#…`, `autograd::engine::evaluate_function`).
//! A Chrome trace recorded without Python stacks (the profiler's default)
//! has only operators: there an operator that computes outside the backward
//! pass and the optimizer is the forward pass, and one that creates a tensor
//! says nothing about the phase (`operators.rs`). The phase at a free is the
//! phase of the latest allocation before it, since free events often carry
//! the *allocation* stack (`context="alloc"`). `external_annotations` time
//! ranges (`Optimizer.step#…`) override both.
//!
//! Where the trace knows operator boundaries (Chrome traces:
//! `DeviceTrace::op_calls`), a block allocated and freed within one operator
//! call is that call's scratch space, `temporary`, in any phase: PyTorch's
//! own definition. Elsewhere "freed before any other allocation" stands in.
//!
//! Classification of one interval only reads shared, precomputed facts, so it
//! runs in parallel with rayon and gives the same answer at any thread count.

mod call_runs;
mod calls;
mod chains;
mod layers;
mod phases;
mod update_order;

pub use phases::{first_after, last_before, PhasePositions};

use rayon::prelude::*;

use rustc_hash::FxHashSet;

use crate::model::{Action, Category, DeviceTrace, Event, Format, OpCall, Sites, Trace};
use crate::timeline::{Interval, Origin, Replay};
pub(crate) use chains::{version_bumps, Chains};

mod buffers;
mod evidence;
pub use evidence::weight_sizes;
mod before_recording;
mod user_rules;

pub use before_recording::Inference;
pub use user_rules::{parse_rules, user_rule_counts, RulesError, UserRule};

/// The category of one interval and the rule that chose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classification {
    pub category: Category,
    pub rule: Rule,
}

mod rules;
pub use rules::{Builtin, Provenance, Rule};

pub use crate::vocabulary::{Phase, SiteFacts};

/// Everything the rules read besides the intervals, computed once per
/// device from its events alone (so it can be made while the replay runs).
pub struct Context<'a> {
    trace: &'a Trace,
    device: &'a DeviceTrace,
    /// Operator shapes (`record_shapes`) speak for this device: it is the
    /// trace's only device, or its only one that is not the CPU.
    shapes_apply: bool,
    sites: &'a Sites,
    events: &'a [Event],
    /// Per event, its operator call (empty when the format has none).
    op_calls: &'a [Option<OpCall>],
    facts: Vec<SiteFacts>,
    /// Framework buffers' classification by site (`buffers.rs`).
    framework: Vec<Option<Classification>>,
    /// Phase at each position (after the latest allocation event).
    phase_at: Vec<Phase>,
    /// Positions where the phase differs from the position before.
    phase_changes: Vec<u32>,
    /// Number of allocation events among the first `p` events.
    allocs_before: Vec<u32>,
    /// First position at or after `p` whose latest allocation was in forward.
    next_forward: Vec<u32>,
    /// Event indices of allocations that are in-place updates (`chains.rs`).
    version_bumps: Vec<u32>,
    /// Some site creates tensors (Chrome operator stacks): the weights
    /// rules need the gradients' sizes.
    creates: bool,
    positions: u32,
    /// The trace has a backward pass at all (training rather than inference).
    training: bool,
    trust_given: bool,
}

/// What the rules read of the replay as a whole, beyond one interval.
#[derive(Default)]
struct ReplayFacts {
    /// Sizes of the allocations the backward pass left behind (gradients).
    gradient_sizes: FxHashSet<u64>,
    /// Without gradient allocations: sizes of the tensors the optimizer
    /// step made and kept (its state; one-element `step` counters left
    /// out).
    state_sizes: FxHashSet<u64>,
    /// Intervals that are DistributedDataParallel's buckets, made while
    /// recording (see [`Builtin::InferredDdpBucketMade`]).
    ddp_buckets: FxHashSet<usize>,
    /// Per interval (empty when none): kept by attention code across the
    /// layers of an inference forward pass (`layers.rs`).
    kept_across_layers: Vec<bool>,
    /// The tensors behind the intervals, when some were updated in place.
    chains: Option<Chains>,
    /// Per interval (empty when none): freed within the built-in call that
    /// made it, where the trace does not delimit calls (`call_runs.rs`).
    freed_within_call_run: Vec<bool>,
    /// Inference with `record_shapes`: byte sizes of the tensors that
    /// `aten::index_copy_` writes into more than once (a static cache).
    written_in_place_sizes: FxHashSet<u64>,
}

/// Classifies every interval of one replayed device.
pub fn classify(
    trace: &Trace,
    device: &DeviceTrace,
    replay: &Replay,
    user_rules: &[UserRule],
) -> Vec<Classification> {
    classify_in(&Context::new(trace, device), replay, user_rules)
}

/// [`classify`] with the device's [`Context`] made already.
pub fn classify_in(
    ctx: &Context<'_>,
    replay: &Replay,
    user_rules: &[UserRule],
) -> Vec<Classification> {
    let mut classes = classify_each(ctx, replay, user_rules);
    buffers::per_parameter_buffers(replay, &mut classes);
    let chains = Chains::new(&replay.intervals, &ctx.version_bumps);
    let evidence = evidence::Evidence::gather(ctx, replay, &classes, chains.as_ref());
    before_recording::match_blocks(
        ctx,
        &evidence,
        chains.as_ref(),
        replay,
        &mut classes,
        &mut Default::default(),
    );
    classes
}

/// [`classify_in`], and the memory that existed before recording split by
/// evidence: the untracked lump of a Chrome trace becomes one interval per
/// part in the returned replay. Returns the replay, the classification of
/// each of its intervals, and what existed before recording, by part.
pub fn classify_device(
    ctx: &Context<'_>,
    mut replay: Replay,
    user_rules: &[UserRule],
) -> (Replay, Vec<Classification>, Vec<Inference>) {
    let mut classes = classify_each(ctx, &replay, user_rules);
    buffers::per_parameter_buffers(&replay, &mut classes);
    let decided = before_recording::infer(ctx, &replay, &mut classes);
    if let Some((k, parts)) = &decided.lump {
        let sizes: Vec<u64> = parts.iter().map(|&(bytes, _)| bytes).collect();
        replay.split(*k, &sizes);
        classes.splice(*k..=*k, parts.iter().map(|&(_, c)| c));
    }
    let before = before_recording::summarize(&replay, &classes, &decided);
    (replay, classes, before)
}

/// Every interval by the rules alone, in parallel.
fn classify_each(
    ctx: &Context<'_>,
    replay: &Replay,
    user_rules: &[UserRule],
) -> Vec<Classification> {
    assert_eq!(
        ctx.positions,
        replay.positions(),
        "context of another device"
    );
    let user_sites: Vec<Option<Vec<bool>>> =
        user_rules.iter().map(|r| r.site_table(ctx.sites)).collect();
    let facts = ReplayFacts::new(ctx, &replay.intervals);
    let one = |i: usize, interval: &Interval| {
        classify_one(ctx, &facts, i, interval, user_rules, &user_sites)
    };
    let Some(chains) = &facts.chains else {
        return replay
            .intervals
            .par_iter()
            .enumerate()
            .map(|(i, interval)| one(i, interval))
            .collect();
    };
    // A tensor updated in place is classified once, over all its versions.
    let mut classes: Vec<Option<Classification>> = replay
        .intervals
        .par_iter()
        .enumerate()
        .map(|(i, interval)| (chains.root(i) == i).then(|| one(i, &chains.whole(i, interval))))
        .collect();
    for i in 0..classes.len() {
        if classes[i].is_none() {
            classes[i] = classes[chains.root(i)];
        }
    }
    classes
        .into_iter()
        .map(|c| c.expect("every version has its first version's class"))
        .collect()
}

impl<'a> Context<'a> {
    /// The facts of every site (indexed by site), the context given up
    /// for them: later stages read the same facts (`crate::findings`).
    pub fn into_site_facts(self) -> Vec<SiteFacts> {
        self.facts
    }

    pub fn new(trace: &'a Trace, device: &'a DeviceTrace) -> Context<'a> {
        let sites = &trace.sites;
        let facts = crate::vocabulary::all_site_facts(sites);
        // As `Replay::positions`: the start, then after each event.
        let positions = device.events.len() as u32 + 1;
        let mut phase_at = Vec::with_capacity(positions as usize);
        let mut allocs_before = Vec::with_capacity(positions as usize);
        let mut phase = Phase::Unknown;
        let mut allocs = 0u32;
        phase_at.push(phase);
        allocs_before.push(0);
        let optimizer_ranges = Ranges::new(
            trace
                .annotations
                .iter()
                .filter(|a| a.name.starts_with("Optimizer.step"))
                .map(|a| (a.start_us, a.end_us)),
        );
        let version_bumps = version_bumps(&device.events);
        let mut bumps = version_bumps.iter().peekable();
        let mut training = false;
        for (k, event) in device.events.iter().enumerate() {
            // An in-place update is no new tensor and carries its first
            // version's stack, not the current phase's.
            let bump = bumps.next_if(|&&b| b as usize == k).is_some();
            if event.action == Action::Alloc && !bump {
                allocs += 1;
                let f = facts[event.site as usize];
                training |= f.backward || f.accumulate_grad;
                // An allocation without frames says nothing about the phase.
                if event.site != 0 {
                    phase = f.phase();
                }
                if let Some(ts) = event.ts() {
                    if optimizer_ranges.contains(ts) {
                        phase = Phase::Optimizer;
                    }
                }
            }
            phase_at.push(phase);
            allocs_before.push(allocs);
        }
        let mut next_forward = vec![u32::MAX; phase_at.len()];
        let mut next = u32::MAX;
        for p in (0..phase_at.len()).rev() {
            if phase_at[p] == Phase::Forward {
                next = p as u32;
            }
            next_forward[p] = next;
        }
        let phase_changes = (1..phase_at.len())
            .filter(|&p| phase_at[p] != phase_at[p - 1])
            .map(|p| p as u32)
            .collect();
        Context {
            trace,
            device,
            shapes_apply: shapes_apply(trace, device),
            creates: facts.iter().any(|f| f.creates),
            next_forward,
            framework: buffers::by_site(sites),
            sites,
            events: &device.events,
            op_calls: &device.op_calls,
            facts,
            phase_at,
            phase_changes,
            allocs_before,
            version_bumps,
            positions,
            training,
            trust_given: trace.format == Format::MemoryTimeline,
        }
    }

    fn phase(&self, position: u32) -> Phase {
        self.phase_at[(position as usize).min(self.phase_at.len() - 1)]
    }

    /// Whether the phase stays the same from position `a` to `b` (`a <= b`).
    fn same_phase_throughout(&self, a: u32, b: u32) -> bool {
        let changes_upto = |p: u32| self.phase_changes.partition_point(|&c| c <= p);
        changes_upto(a) == changes_upto(b)
    }

    /// Whether a traced interval was freed inside the operator call that
    /// allocated it; `None` when the trace does not know (no operator
    /// boundaries, or allocated outside any call).
    fn freed_within_its_call(&self, interval: &Interval) -> Option<bool> {
        let at = |position: u32| self.op_calls.get(position as usize - 1).copied().flatten();
        let call = at(interval.start)?;
        if interval.end >= self.positions {
            return Some(false);
        }
        let free = &self.events[interval.end as usize - 1];
        let is_its_free = matches!(free.action, Action::FreeCompleted | Action::FreeRequested)
            && free.addr == interval.addr;
        Some(is_its_free && at(interval.end) == Some(call))
    }

    /// Whether a traced interval was freed by the event right after a larger
    /// concatenation was allocated: replaced by a longer copy of itself.
    fn replaced_by_longer_concatenation(&self, interval: &Interval) -> bool {
        let Some(k) = (interval.end as usize).checked_sub(2) else {
            return false;
        };
        interval.end < self.positions
            && self.events.get(k).is_some_and(|e| {
                e.action == Action::Alloc
                    && e.size > interval.size
                    && self.facts[e.site as usize].concatenates
            })
    }
}

impl ReplayFacts {
    fn new(ctx: &Context<'_>, intervals: &[Interval]) -> ReplayFacts {
        let mut facts = ReplayFacts::default();
        if ctx.creates && ctx.training {
            facts.gradient_sizes = intervals
                .iter()
                .filter(|i| {
                    i.origin == Origin::Traced
                        && ctx.phase(i.start) == Phase::Backward
                        && (i.end >= ctx.positions || ctx.phase(i.end) != Phase::Backward)
                })
                .map(|i| i.size)
                .collect();
            if facts.gradient_sizes.is_empty() {
                facts.state_sizes = intervals
                    .iter()
                    .filter(|i| {
                        i.origin == Origin::Traced
                            && i.size > update_order::MAX_SCALAR_BYTES
                            && ctx.phase(i.start) == Phase::Optimizer
                            && (i.end >= ctx.positions || ctx.phase(i.end) != Phase::Optimizer)
                    })
                    .map(|i| i.size)
                    .collect();
            }
        }
        let weight_sizes = if facts.gradient_sizes.is_empty() {
            &facts.state_sizes
        } else {
            &facts.gradient_sizes
        };
        facts.ddp_buckets = update_order::buckets_made(ctx, intervals, weight_sizes);
        if !ctx.training {
            facts.kept_across_layers = layers::kept_across_layers(ctx, intervals);
        }
        facts.chains = Chains::new(intervals, &ctx.version_bumps);
        facts.freed_within_call_run =
            call_runs::freed_within_call_runs(ctx, intervals, facts.chains.as_ref());
        if !ctx.training && ctx.shapes_apply {
            facts.written_in_place_sizes = evidence::written_in_place_sizes(ctx);
        }
        facts
    }

    fn kept_across_layers(&self, i: usize) -> bool {
        self.kept_across_layers.get(i).copied().unwrap_or(false)
    }
}

/// Closed time ranges, answering "is `t` in any of them" in O(log n)
/// (a training run has one `Optimizer.step` range per step).
struct Ranges {
    /// Starts, ascending.
    starts: Vec<f64>,
    /// `max_end[i]`: the latest end among the first `i + 1` ranges.
    max_end: Vec<f64>,
}

impl Ranges {
    fn new(ranges: impl Iterator<Item = (f64, f64)>) -> Ranges {
        // A NaN bound never contains anything.
        let mut ranges: Vec<(f64, f64)> =
            ranges.filter(|(s, e)| !s.is_nan() && !e.is_nan()).collect();
        ranges.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut latest = f64::NEG_INFINITY;
        let max_end = ranges
            .iter()
            .map(|&(_, e)| {
                latest = latest.max(e);
                latest
            })
            .collect();
        Ranges {
            starts: ranges.into_iter().map(|(s, _)| s).collect(),
            max_end,
        }
    }

    /// Whether some range has `start <= t <= end`.
    fn contains(&self, t: f64) -> bool {
        let n = self.starts.partition_point(|&s| s <= t);
        n > 0 && t <= self.max_end[n - 1]
    }
}

/// Classifies `interval`, the `index`-th of its replay; `user_sites[i]`:
/// the site table of `user_rules[i]`.
fn classify_one(
    ctx: &Context,
    replay_facts: &ReplayFacts,
    index: usize,
    interval: &Interval,
    user_rules: &[UserRule],
    user_sites: &[Option<Vec<bool>>],
) -> Classification {
    let alive_at_end = interval.end >= ctx.positions;
    if let Some((i, rule)) = user_rules
        .iter()
        .enumerate()
        .find(|(i, r)| r.matches(user_sites[*i].as_deref(), interval, alive_at_end))
    {
        return Classification {
            category: rule.category,
            rule: Rule::User(i as u32),
        };
    }
    if ctx.trust_given {
        if let Some(c) = interval.given {
            return Classification {
                category: c,
                rule: Builtin::CategoryFromFile.into(),
            };
        }
    }
    if let Some(c) = ctx.framework[interval.site as usize] {
        return c;
    }
    let facts = ctx.facts[interval.site as usize];
    if interval.origin == Origin::BeforeRecordingUnnamed {
        return Builtin::AllocatedBeforeProfilingUnattributed.class();
    }
    if interval.origin.before_recording() {
        // A tensor from before recording that the optimizer step updates in
        // place may be a parameter as well as its state: its frames decide,
        // else the evidence of `before_recording`.
        return classify_before_recording(&facts, alive_at_end);
    }

    let alloc_phase = ctx.phase(interval.start);
    let free_phase = (!alive_at_end).then(|| ctx.phase(interval.end));
    let allocs_between = ctx.allocs_before[(interval.end.min(ctx.positions - 1)) as usize]
        - ctx.allocs_before[interval.start as usize];
    // An operator's scratch space: freed within the operator call that made
    // it where the trace knows calls; else freed before any other allocation
    // happens. (Allowing one allocation in between was tried on
    // sample_traces/: it turned PyTorch's autograd_detail buffers into
    // temporaries.)
    let short_lived = ctx.freed_within_its_call(interval).unwrap_or_else(|| {
        replay_facts
            .freed_within_call_run
            .get(index)
            .copied()
            .unwrap_or(false)
            || (!alive_at_end && allocs_between == 0)
    });

    if facts.accumulate_grad && free_phase != Some(Phase::Backward) {
        return Builtin::AccumulateGradOutlivesBackward.class();
    }
    match alloc_phase {
        Phase::Optimizer => {
            if short_lived {
                Builtin::OptimizerStepScratch.class()
            } else if !alive_at_end && ctx.same_phase_throughout(interval.start, interval.end) {
                Builtin::FreedWithinOptimizerStep.class()
            } else {
                Builtin::AllocatedInOptimizerStepOutlivesIt.class()
            }
        }
        Phase::ZeroGrad => Builtin::AllocatedInZeroGrad.class(),
        Phase::Backward => {
            if free_phase != Some(Phase::Backward) {
                Builtin::AllocatedInBackwardOutlivesIt.class()
            } else if short_lived {
                Builtin::ShortLivedInBackward.class()
            } else if facts.recompute {
                Builtin::RecomputedActivationInBackward.class()
            } else {
                Builtin::FreedWithinBackward.class()
            }
        }
        // Freed during init too: in-place initialisation (`kaiming_uniform_`)
        // can show up as free + alloc of the same weight.
        Phase::Init => Builtin::ModuleInitOrLoad.class(),
        Phase::DataLoading => Builtin::DataLoading.class(),
        Phase::Forward => {
            if short_lived {
                Builtin::ShortLivedInForward.class()
            } else if facts.kv_cache && !ctx.training {
                Builtin::InferenceCacheOutlivesForward.class()
            } else if !ctx.training && replay_facts.kept_across_layers(index) {
                Builtin::InferredCacheKeptAcrossLayers.class()
            } else if !ctx.training && ctx.replaced_by_longer_concatenation(interval) {
                Builtin::InferredCacheGrowsByConcatenation.class()
            } else if free_phase == Some(Phase::Backward) {
                Builtin::ForwardOutputFreedInBackward.class()
            } else {
                Builtin::ForwardOutput.class()
            }
        }
        Phase::Unknown => {
            if short_lived {
                Builtin::ShortLived.class()
            } else if facts.forward {
                Builtin::ForwardOutput.class()
            } else if facts.creates && replay_facts.written_in_place_sizes.contains(&interval.size)
            {
                Builtin::InferredCacheWrittenInPlace.class()
            } else if !alive_at_end
                && calls::freed_in_allocating_call(
                    ctx.sites,
                    interval.site,
                    ctx.events[interval.end as usize - 1].site,
                )
            {
                Builtin::InferredTemporaryFreedInAllocatingCall.class()
            } else if replay_facts.ddp_buckets.contains(&index) {
                Builtin::InferredDdpBucketMade.class()
            } else if facts.constructor && alive_at_end {
                Builtin::InferredWeightsMadeInConstructor.class()
            } else if facts.creates && alive_at_end && !ctx.training {
                Builtin::InferredWeightsCreatedAliveToEnd.class()
            } else if facts.creates
                && alive_at_end
                && replay_facts.gradient_sizes.contains(&interval.size)
            {
                Builtin::InferredWeightsGradientSized.class()
            } else if facts.creates
                && alive_at_end
                && replay_facts.state_sizes.contains(&interval.size)
            {
                Builtin::InferredWeightsStateSized.class()
            } else if ctx.next_forward[interval.start as usize] < interval.end {
                Builtin::AllocatedOutsideModelLiveDuringForward.class()
            } else {
                Builtin::NoEvidence.class()
            }
        }
    }
}

fn classify_before_recording(facts: &SiteFacts, alive_at_end: bool) -> Classification {
    if facts.zero_grad {
        Builtin::ExistedBeforeTraceFreedByZeroGrad.class()
    } else if facts.optimizer {
        Builtin::ExistedBeforeTraceOptimizerSite.class()
    } else if facts.frees_saved_tensor && !alive_at_end {
        Builtin::ExistedBeforeTraceSavedForBackward.class()
    } else if facts.accumulate_grad || (facts.backward && alive_at_end) {
        Builtin::ExistedBeforeTraceBackwardSite.class()
    } else if facts.module_init {
        Builtin::ExistedBeforeTraceInitSite.class()
    } else if facts.kv_cache {
        Builtin::ExistedBeforeTraceCacheSite.class()
    } else if facts.forward {
        Builtin::ExistedBeforeTraceForwardSite.class()
    } else {
        // Decided by evidence elsewhere in the trace, if any: see `before_recording`.
        Builtin::ExistedBeforeTraceNoEvidence.class()
    }
}

/// Whether operator shapes (`record_shapes`) speak for `device`: it is the
/// trace's only device, or its only one that is not the CPU.
pub(crate) fn shapes_apply(trace: &Trace, device: &DeviceTrace) -> bool {
    let accelerators = trace.devices.iter().filter(|d| d.device != "cpu").count();
    trace.devices.len() == 1 || (device.device != "cpu" && accelerators == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON's readers (and `schema::BeforeRecordingPart::inferred`)
    /// know an inferring rule by its name; the table says it once more.
    #[test]
    fn rule_names_say_which_rules_infer() {
        for &b in Builtin::ALL {
            assert_eq!(b.as_str().starts_with("inferred_"), b.infers(), "{b:?}");
            assert_eq!(
                b.category().is_none(),
                b == Builtin::CategoryFromFile,
                "{b:?}"
            );
        }
    }
    use crate::model::{DeviceTrace, Event, Frame, Trace};
    use crate::timeline::replay;
    use proptest::prelude::*;

    /// Builds a one-device trace from (action, addr, size, stack) rows; a
    /// stack is a list of frame names, innermost first.
    struct TraceBuilder {
        trace: Trace,
        events: Vec<Event>,
    }

    impl TraceBuilder {
        fn new() -> TraceBuilder {
            TraceBuilder {
                trace: Trace::new(Format::TorchSnapshot),
                events: Vec::new(),
            }
        }
        fn alloc(mut self, addr: u64, size: u64, stack: &[&str]) -> TraceBuilder {
            let frames: Vec<Frame> = stack
                .iter()
                .map(|n| Frame {
                    filename: 0,
                    line: 0,
                    name: self.trace.sites.intern_str(n),
                })
                .collect();
            let mut e = Event::new(Action::Alloc, addr, size);
            e.site = self.trace.sites.intern_site(&frames);
            self.events.push(e);
            self
        }
        fn free(mut self, addr: u64) -> TraceBuilder {
            let size = self
                .events
                .iter()
                .rev()
                .find(|e| e.addr == addr)
                .map_or(0, |e| e.size);
            self.events
                .push(Event::new(Action::FreeCompleted, addr, size));
            self
        }
        /// Category and rule of each allocation, in allocation order.
        fn classify(mut self) -> Vec<(Category, Rule)> {
            self.trace.devices.push(DeviceTrace {
                device: "cuda:0".into(),
                events: self.events,
                ..DeviceTrace::default()
            });
            let device = &self.trace.devices[0];
            let r = replay(device);
            classify(&self.trace, device, &r, &[])
                .into_iter()
                .map(|c| (c.category, c.rule))
                .collect()
        }
    }

    const INIT: &[&str] = &[
        "torch/nn/init.py(1): kaiming_uniform_",
        "torch/nn/modules/linear.py(100): __init__",
    ];
    const FWD: &[&str] = &[
        "<built-in function linear>",
        "torch/nn/modules/linear.py(130): forward",
        "nn.Module: Linear_0",
    ];
    const BWD: &[&str] = &[
        "<built-in method run_backward>",
        "torch/autograd/graph.py(1): _engine_run_backward",
    ];
    const OPT: &[&str] = &[
        "<built-in method zeros_like>",
        "torch/optim/adam.py(140): _init_group",
    ];
    const BATCH: &[&str] = &["<built-in method randn>", "train.py(10): main"];

    //  pos: 1 2 3 4 5 6 7 8 9 10
    //  w    ████████████████████  parameter (init, alive)
    //  x      ██████████████████  input (outside the model, live in forward)
    //  a        ██████            activation (forward, freed in backward)
    //  t          ██              temporary (forward, freed before any other alloc)
    //  g            ████████████  gradient (backward, outlives it)
    //  s                ████████  optimizer state (step, alive)
    #[test]
    fn a_training_step_gets_every_category_right() {
        let got = TraceBuilder::new()
            .alloc(1, 100, INIT)
            .alloc(2, 10, BATCH)
            .alloc(3, 50, FWD)
            .alloc(4, 5, FWD)
            .free(4)
            .alloc(5, 100, BWD)
            .free(3)
            .alloc(6, 200, OPT)
            .classify();
        let cats: Vec<Category> = got.iter().map(|c| c.0).collect();
        assert_eq!(
            cats,
            vec![
                Category::Parameter,
                Category::Input,
                Category::Activation,
                Category::Temporary,
                Category::Gradient,
                Category::OptimizerState,
            ],
            "{got:?}"
        );
    }

    #[test]
    fn backward_buffer_freed_within_backward_is_autograd_detail() {
        let got = TraceBuilder::new()
            .alloc(1, 64, BWD)
            .alloc(2, 64, BWD)
            .free(1)
            .alloc(3, 8, OPT)
            .classify();
        assert_eq!(
            got[0],
            (
                Category::AutogradDetail,
                Builtin::FreedWithinBackward.into()
            )
        );
    }

    #[test]
    fn concatenated_cache_under_attention_is_kv_cache_in_inference() {
        let kv = &[
            "<built-in method cat>",
            "model.py(67): attn",
            "nn.Module: Attention_0",
        ];
        let got = TraceBuilder::new()
            .alloc(1, 4096, kv)
            .alloc(2, 64, FWD)
            .alloc(3, 64, FWD)
            .free(2)
            .classify();
        assert_eq!(got[0].0, Category::KvCache);
    }

    #[test]
    fn user_rules_come_first() {
        let mut b = TraceBuilder::new().alloc(1, 100, FWD);
        b.trace.devices.push(DeviceTrace {
            device: "cuda:0".into(),
            events: std::mem::take(&mut b.events),
            ..DeviceTrace::default()
        });
        let rule = UserRule {
            name: "linear_is_weights".into(),
            category: Category::Parameter,
            site_contains: Some("linear.py".into()),
            alive_at_end: None,
            min_bytes: None,
        };
        let d = &b.trace.devices[0];
        let rules = [rule];
        let got = classify(&b.trace, d, &replay(d), &rules);
        assert_eq!(got[0].category, Category::Parameter);
        assert_eq!(got[0].rule, Rule::User(0));
        assert_eq!(got[0].rule.name(&rules), "user:linear_is_weights");
    }

    /// Reports name rules by these strings: each names one rule.
    #[test]
    fn builtin_rule_names_are_distinct() {
        let names: std::collections::BTreeSet<&str> =
            Builtin::ALL.iter().map(|b| b.as_str()).collect();
        assert_eq!(names.len(), Builtin::ALL.len());
    }

    #[test]
    fn same_answer_at_one_and_many_threads() {
        let mut b = TraceBuilder::new();
        for i in 0..2000u64 {
            let stack = [INIT, FWD, BWD, OPT, BATCH][(i % 5) as usize];
            b = b.alloc(i + 1, 100 + i, stack);
            if i % 3 == 0 {
                b = b.free(i + 1);
            }
        }
        let run = |threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut t = Trace::new(Format::TorchSnapshot);
            t.sites = b.trace.sites.clone();
            t.devices.push(DeviceTrace {
                device: "cuda:0".into(),
                events: b.events.clone(),
                ..DeviceTrace::default()
            });
            pool.install(|| {
                let d = &t.devices[0];
                classify(&t, d, &replay(d), &[])
            })
        };
        assert_eq!(run(1), run(4));
    }

    proptest! {
        /// `Ranges::contains` agrees with a linear scan, NaN bounds included.
        #[test]
        fn ranges_agree_with_a_scan(
            ranges in proptest::collection::vec((0u8..40, 0u8..40, 0u8..10, 0u8..10), 0..30),
            t in 0u8..45,
        ) {
            // Kind 0 stands for NaN and kind 9 for +inf (an annotation still open).
            let bound = |b: u8, kind: u8| match kind {
                0 => f64::NAN,
                9 => f64::INFINITY,
                _ => f64::from(b),
            };
            let ranges: Vec<(f64, f64)> = ranges
                .iter()
                .map(|&(s, len, ks, ke)| (bound(s, ks % 9), bound(s.saturating_add(len), ke)))
                .collect();
            let t = f64::from(t);
            let expected = ranges.iter().any(|&(s, e)| s <= t && t <= e);
            prop_assert_eq!(Ranges::new(ranges.into_iter()).contains(t), expected);
        }
    }

    // Agreement of memcut's categories with PyTorch's own, on real runs.
    //
    // `sample_traces/*.snapshot.pickle.gz` were made by `_profile_to_snapshot`
    // (see `sample_traces/generate.py`): every alloc entry carries PyTorch's
    // category. The classifier ignores it; here it is the ground truth. Metric:
    // bytes-weighted agreement among the bytes live at the peak whose PyTorch
    // category is known (memcut's `kv_cache` agrees with PyTorch's `activation`).

    /// (share agreeing at the peak, known bytes at the peak, disagreements, share agreeing over every allocation).
    fn agreement(path: &std::path::Path) -> (f64, u64, Vec<(Category, Category, u64)>, f64) {
        let trace = crate::input::read_trace(
            std::fs::File::open(path).unwrap(),
            &crate::input::Limits::default(),
        )
        .unwrap();
        let device = trace
            .devices
            .iter()
            .find(|d| d.device == "cpu")
            .expect("cpu device");
        let replay = replay(device);
        let classes = classify(&trace, device, &replay, &[]);
        let peak = replay.peak_position();
        let (mut agree, mut known) = (0u64, 0u64);
        let (mut all_agree, mut all_known) = (0u64, 0u64);
        let mut confusion = std::collections::BTreeMap::new();
        for (i, c) in replay.intervals.iter().zip(&classes) {
            if let Some(truth) = i.given.filter(|g| *g != Category::Unknown) {
                all_known += i.size;
                if c.category == truth
                    || (c.category == Category::KvCache && truth == Category::Activation)
                {
                    all_agree += i.size;
                }
            }
            if !i.live_at(peak) {
                continue;
            }
            let Some(truth) = i.given.filter(|g| *g != Category::Unknown) else {
                continue;
            };
            known += i.size;
            let ok = c.category == truth
                || (c.category == Category::KvCache && truth == Category::Activation);
            if ok {
                agree += i.size;
            } else {
                *confusion.entry((truth, c.category)).or_insert(0u64) += i.size;
            }
        }
        let mut conf: Vec<_> = confusion.into_iter().map(|((t, m), b)| (t, m, b)).collect();
        conf.sort_by_key(|c| std::cmp::Reverse(c.2));
        (
            agree as f64 / known.max(1) as f64,
            known,
            conf,
            all_agree as f64 / all_known.max(1) as f64,
        )
    }

    #[test]
    fn categories_agree_with_pytorch_on_sample_runs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
        let mut runs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with(".snapshot.pickle.gz"))
            .collect();
        runs.sort();
        assert!(
            runs.len() >= 6,
            "expected the six sample runs in {}",
            dir.display()
        );
        let mut failures = Vec::new();
        for run in &runs {
            let (share, known, confusion, overall) = agreement(run);
            let name = run.file_name().unwrap().to_string_lossy().to_string();
            println!("{name}: {:.1}% of {known} known bytes at the peak agree ({:.1}% over every allocation); top disagreements (pytorch -> memcut): {:?}", share * 100.0, overall * 100.0, &confusion[..confusion.len().min(4)]);
            if share < 0.90 {
                failures.push(format!("{name}: {:.1}%", share * 100.0));
            }
        }
        assert!(failures.is_empty(), "below 90% agreement: {failures:?}");
    }
}
