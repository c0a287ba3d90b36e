//! Run facts: what the trace shows about the run, each fact with the
//! evidence that decided it, and the lever conditions ([`Condition`])
//! decided from them. This is the one place that reads evidence for the
//! planner, so richer evidence (the operator tree, inferred categories,
//! observed dtypes) changes this module and nothing else.
//!
//! Evidence read today:
//! - the trace's strings: snapshot frames (file and function names) and a
//!   Chrome trace's operator stacks at memory events;
//! - a Chrome trace's whole operator list with counts, `record_shapes`
//!   weight dtypes ([`crate::model::RunInfo`]) and `distributedInfo` (`Trace::distributed`);
//!   annotations (`Optimizer.step#AdamW.step`);
//! - the classification of this device's allocations (how many were made in
//!   backward, in the optimizer step, in forward; what existed before the
//!   recording and was *assumed* to be weights, …);
//! - the demand's pools (optimizer state, gradients held across steps) and
//!   how the reserved curve was known.
//!
//! A fact is known (with the evidence), or unknown (saying what would tell).

use crate::classify::{Builtin, Classification, Phase, Provenance, Rule};
use crate::model::{Action, Category, DeviceTrace, Trace};
use crate::schema::{LiveAllocation, PlanFact};
use crate::units::human_bytes as h;

use super::levers::Condition;
use super::pools::{Overlay, Part, NPOOL};

mod signals;
use signals::Signals;

/// A fact about the run and the evidence that decided it; `value` is `None`
/// when the trace does not tell.
#[derive(Debug, Clone, PartialEq)]
pub struct Fact<T> {
    pub value: Option<T>,
    pub because: String,
}

impl<T> Fact<T> {
    fn known(value: T, because: impl Into<String>) -> Fact<T> {
        Fact {
            value: Some(value),
            because: because.into(),
        }
    }
    fn unknown(because: impl Into<String>) -> Fact<T> {
        Fact {
            value: None,
            because: because.into(),
        }
    }
}

/// Training or inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Training,
    Inference,
}

/// How the optimizer's step is implemented, when the trace shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    Foreach,
    Fused,
    SingleTensor,
}

/// The optimizer, as far as the trace shows it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Optimizer {
    /// `AdamW`, `SGD`, … when an annotation or a frame names it.
    pub name: Option<String>,
    pub step: Option<StepKind>,
    /// 8-bit states (bitsandbytes frames).
    pub eight_bit: bool,
    /// The most optimizer state in memory at any instant.
    pub state_bytes: u64,
}

/// The weights' dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Fp32,
    SixteenBit,
    EightBit,
    Other,
}

/// Data parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataParallel {
    /// Ranks to shard over; `None` when the trace shows data parallelism
    /// but not how many ranks.
    pub ranks: Option<u32>,
    /// ZeRO / FSDP is in use already.
    pub sharded: bool,
}

/// What a condition comes to for this run.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    Holds(String),
    Fails(String),
    /// The trace does not tell: `wording` is the "if …" a step says.
    Unknown {
        wording: String,
        because: String,
    },
}

/// Everything the planner knows about one device's run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFacts {
    pub mode: Fact<Mode>,
    pub optimizer: Fact<Optimizer>,
    pub weights: Fact<Dtype>,
    pub data_parallel: Fact<DataParallel>,
    /// Activation checkpointing in use already.
    pub checkpointing: Fact<bool>,
    /// A serving engine (vLLM, SGLang) that preallocates its KV-cache pool
    /// to fill a share of the GPU, whatever the dtype or context.
    pub kv_pool: Fact<bool>,
    /// A GPU (`cuda:N`, `hip:N`, …) rather than the CPU.
    pub gpu: Fact<bool>,
    /// Expandable segments on already.
    pub expandable_segments: Fact<bool>,
    /// Gradients held from an optimizer step through the next forward:
    /// the most bytes, and whether a step was seen before them.
    pub kept_gradients: Fact<u64>,
    /// Why reserved memory (hence the allocator cache) is an estimate.
    pub reserved_estimate: Option<String>,
    /// Per category: why its bytes at the peak are partly inferred.
    pub inferred: Vec<(Category, String)>,
}

/// This device's allocations by the phase their rule records.
#[derive(Debug, Default)]
struct Allocations {
    forward: u64,
    backward: u64,
    optimizer: u64,
    /// Gradient or optimizer-state bytes from before the recording.
    training_state_before: u64,
    recomputed: u64,
    with_frames: u64,
}

impl Allocations {
    fn count(device: &DeviceTrace, classes: &[Classification]) -> Allocations {
        let mut a = Allocations::default();
        for c in classes {
            let Rule::Builtin(b) = c.rule else { continue };
            match (b.provenance(), b.phase()) {
                (Provenance::Observed, Some(Phase::Forward)) => a.forward += 1,
                (Provenance::Observed, Some(Phase::Backward)) => a.backward += 1,
                (Provenance::Observed, Some(Phase::Optimizer)) => a.optimizer += 1,
                (Provenance::BeforeRecording, Some(Phase::Optimizer | Phase::Backward)) => {
                    a.training_state_before += 1
                }
                _ => {}
            }
            a.recomputed += u64::from(b == Builtin::RecomputedActivationInBackward);
        }
        a.with_frames = device
            .events
            .iter()
            .filter(|e| e.action == Action::Alloc && e.site != 0)
            .count() as u64;
        a
    }
}

/// What gathering the facts needs besides the trace.
pub struct FactsInput<'a> {
    pub device: &'a DeviceTrace,
    pub classes: &'a [Classification],
    /// `--dp-ranks` (0 or 1: none given).
    pub dp_ranks: u32,
}

impl RunFacts {
    /// Facts for tests: the given mode, a GPU, nothing else known.
    #[cfg(test)]
    pub(crate) fn for_tests(mode: Option<Mode>) -> RunFacts {
        RunFacts {
            mode: Fact {
                value: mode,
                because: "assumed".into(),
            },
            optimizer: Fact::unknown("assumed"),
            weights: Fact::unknown("assumed"),
            data_parallel: Fact::known(
                DataParallel {
                    ranks: Some(1),
                    sharded: false,
                },
                "assumed",
            ),
            checkpointing: Fact::known(false, "assumed"),
            kv_pool: Fact::known(false, "assumed"),
            gpu: Fact::known(true, "assumed"),
            expandable_segments: Fact::known(false, "assumed"),
            kept_gradients: Fact::known(0, "assumed"),
            reserved_estimate: None,
            inferred: Vec::new(),
        }
    }

    /// The facts that decide the parts of categories (training or not):
    /// everything but what needs the demand ([`RunFacts::complete`]).
    pub fn gather(trace: &Trace, input: &FactsInput<'_>) -> RunFacts {
        let signals = Signals::read(trace);
        let allocs = Allocations::count(input.device, input.classes);
        let mode = mode(trace, &signals, &allocs);
        RunFacts {
            mode,
            optimizer: optimizer(&signals),
            weights: weights(trace),
            data_parallel: data_parallel(trace, &signals, input.dp_ranks),
            kv_pool: if signals.serving_engine.any() {
                Fact::known(
                    true,
                    format!(
                        "a serving engine that preallocates its KV-cache pool ({})",
                        signals.serving_engine.example()
                    ),
                )
            } else {
                Fact::known(false, "no vLLM or SGLang in the trace")
            },
            checkpointing: if signals.checkpoint.any() || allocs.recomputed > 0 {
                let shown = if signals.checkpoint.any() {
                    signals.checkpoint.example().to_owned()
                } else {
                    format!("{} activations recomputed in backward", allocs.recomputed)
                };
                Fact::known(true, format!("activation checkpointing in use ({shown})"))
            } else {
                Fact::known(false, "no torch.utils.checkpoint in the trace")
            },
            gpu: gpu(&input.device.device),
            expandable_segments: expandable(trace, input.device),
            kept_gradients: Fact::known(0, "no gradient is held through a forward"),
            reserved_estimate: reserved_estimate(input.device),
            inferred: Vec::new(),
        }
    }

    /// Adds what needs the demand: the most optimizer state and held
    /// gradients (`max_by_pool`), whether a step was seen before the held
    /// gradients (`overlay`), and which categories at the peak are partly
    /// inferred (`peak`: the allocations live at the reported peak).
    pub fn complete(
        &mut self,
        max_by_pool: &[u64; NPOOL],
        overlay: &Overlay,
        peak: &[LiveAllocation],
    ) {
        if let Some(o) = self.optimizer.value.as_mut() {
            o.state_bytes = max_by_pool[Category::OptimizerState.index()];
        } else if max_by_pool[Category::OptimizerState.index()] > 0 {
            self.optimizer = Fact::known(
                Optimizer {
                    state_bytes: max_by_pool[Category::OptimizerState.index()],
                    ..Optimizer::default()
                },
                "optimizer state in memory",
            );
        }
        let kept = max_by_pool[Part::KeptAcrossSteps.pool()];
        if kept > 0 {
            self.kept_gradients = if overlay.kept_after_a_step {
                Fact::known(
                    kept,
                    format!(
                        "up to {} of gradients stay allocated from the optimizer step through the next forward",
                        h(kept)
                    ),
                )
            } else {
                Fact::unknown(format!(
                    "{} of gradients from before the recording are allocated during the forward: held since the last step, or accumulating micro-batches",
                    h(kept)
                ))
            };
        }
        self.inferred = inferred(peak);
    }

    /// What `condition` comes to for this run; `ranks` is the number of
    /// data-parallel ranks the catalogue was made for.
    pub fn check(&self, condition: Condition) -> Check {
        use Check::{Fails, Holds};
        let unknown = |wording: &str, because: &str| Check::Unknown {
            wording: wording.to_owned(),
            because: because.to_owned(),
        };
        match condition {
            Condition::Training => match self.mode.value {
                Some(Mode::Training) => Holds(format!("training run: {}", self.mode.because)),
                Some(Mode::Inference) => {
                    Fails(format!("not a training run: {}", self.mode.because))
                }
                None => unknown("if this is a training run", &self.mode.because),
            },
            Condition::Inference => match self.mode.value {
                Some(Mode::Inference) => Holds(format!("inference run: {}", self.mode.because)),
                Some(Mode::Training) => {
                    Fails(format!("not an inference run: {}", self.mode.because))
                }
                None => unknown("if this is inference", &self.mode.because),
            },
            Condition::Gpu => match self.gpu.value {
                Some(true) => Holds(self.gpu.because.clone()),
                Some(false) => Fails(self.gpu.because.clone()),
                None => unknown("if the device is a GPU", &self.gpu.because),
            },
            Condition::ExpandableSegmentsOff => match self.expandable_segments.value {
                Some(true) => Fails(self.expandable_segments.because.clone()),
                _ => Holds(self.expandable_segments.because.clone()),
            },
            Condition::OptimizerState => match &self.optimizer.value {
                Some(o) if o.eight_bit => Fails("the optimizer state is 8-bit already".into()),
                Some(o) if o.state_bytes > 0 => Holds(format!(
                    "up to {} of optimizer state in memory",
                    h(o.state_bytes)
                )),
                _ => Fails("no optimizer state in memory".into()),
            },
            Condition::OptimizerNotFused => match &self.optimizer.value {
                Some(o) if o.step == Some(StepKind::Fused) => Fails(format!(
                    "the optimizer step is fused already: {}",
                    self.optimizer.because
                )),
                Some(o) if o.step == Some(StepKind::Foreach) => Holds(format!(
                    "the optimizer step is multi-tensor (foreach): {}",
                    self.optimizer.because
                )),
                _ => Holds("the optimizer step is not fused".into()),
            },
            Condition::WeightsFp32 => match self.weights.value {
                Some(Dtype::Fp32) => {
                    Holds(format!("the weights are fp32: {}", self.weights.because))
                }
                Some(_) => Fails(format!(
                    "the weights are not fp32: {}",
                    self.weights.because
                )),
                None => unknown("if the weights are fp32", &self.weights.because),
            },
            Condition::WeightsNotQuantized => match self.weights.value {
                Some(Dtype::EightBit) => {
                    Fails(format!("the weights are 8-bit: {}", self.weights.because))
                }
                Some(_) => Holds(self.weights.because.clone()),
                None => unknown("if the weights are 16- or 32-bit", &self.weights.because),
            },
            Condition::DataParallel => match self.data_parallel.value {
                Some(DataParallel { sharded: true, .. }) => {
                    Fails(format!("already sharded: {}", self.data_parallel.because))
                }
                Some(DataParallel { ranks: Some(n), .. }) if n > 1 => {
                    Holds(self.data_parallel.because.clone())
                }
                Some(DataParallel { ranks: None, .. }) => Fails(format!(
                    "{}; the number of ranks is unknown: pass --dp-ranks N",
                    self.data_parallel.because
                )),
                _ => Fails(format!(
                    "{}; with N data-parallel GPUs, pass --dp-ranks N",
                    self.data_parallel.because
                )),
            },
            Condition::GradientsKeptAcrossSteps => match self.kept_gradients.value {
                Some(b) if b > 0 => Holds(self.kept_gradients.because.clone()),
                Some(_) => Fails(self.kept_gradients.because.clone()),
                None => unknown(
                    "if this forward starts a new step (not a gradient-accumulation micro-batch)",
                    &self.kept_gradients.because,
                ),
            },
            Condition::KvCacheGrows => match self.kv_pool.value {
                Some(true) => Fails(format!(
                    "{}: a smaller KV dtype or context only fits more tokens into the same pool",
                    self.kv_pool.because
                )),
                _ => Holds(self.kv_pool.because.clone()),
            },
            Condition::KvCachePool => match self.kv_pool.value {
                Some(true) => Holds(self.kv_pool.because.clone()),
                _ => Fails(self.kv_pool.because.clone()),
            },
            Condition::NotCheckpointing => match self.checkpointing.value {
                Some(true) => Fails(self.checkpointing.because.clone()),
                _ => Holds(self.checkpointing.because.clone()),
            },
        }
    }

    /// The ranks the sharding levers shard over (1 when none is known).
    pub fn dp_ranks(&self) -> u32 {
        match self.data_parallel.value {
            Some(DataParallel {
                ranks: Some(n),
                sharded: false,
            }) => n.max(1),
            _ => 1,
        }
    }

    /// The facts as reports show them, in a fixed order.
    pub fn lines(&self) -> Vec<PlanFact> {
        let line = |fact: &str, value: String, because: &str| PlanFact {
            fact: fact.to_owned(),
            value,
            because: because.to_owned(),
        };
        let unknown = || "unknown".to_owned();
        let mut out = vec![line(
            "run",
            match self.mode.value {
                Some(Mode::Training) => "training".into(),
                Some(Mode::Inference) => "inference".into(),
                None => unknown(),
            },
            &self.mode.because,
        )];
        match &self.optimizer.value {
            Some(o) => {
                let mut v = o.name.clone().unwrap_or_else(|| "type not shown".into());
                match o.step {
                    Some(StepKind::Foreach) => v.push_str(", foreach step"),
                    Some(StepKind::Fused) => v.push_str(", fused step"),
                    Some(StepKind::SingleTensor) => v.push_str(", single-tensor step"),
                    None => {}
                }
                if o.eight_bit {
                    v.push_str(", 8-bit");
                }
                v.push_str(&format!(", state up to {}", h(o.state_bytes)));
                out.push(line("optimizer", v, &self.optimizer.because));
            }
            None => out.push(line(
                "optimizer",
                "none seen".into(),
                &self.optimizer.because,
            )),
        }
        out.push(line(
            "weights",
            match self.weights.value {
                Some(Dtype::Fp32) => "fp32".into(),
                Some(Dtype::SixteenBit) => "16-bit".into(),
                Some(Dtype::EightBit) => "8-bit".into(),
                Some(Dtype::Other) => "other".into(),
                None => unknown(),
            },
            &self.weights.because,
        ));
        out.push(line(
            "data parallel",
            match self.data_parallel.value {
                Some(DataParallel { sharded: true, .. }) => "sharded".into(),
                Some(DataParallel { ranks: Some(n), .. }) if n > 1 => format!("{n} ranks"),
                Some(DataParallel { ranks: None, .. }) => "yes, ranks unknown".into(),
                Some(_) => "no".into(),
                None => unknown(),
            },
            &self.data_parallel.because,
        ));
        if self.mode.value != Some(Mode::Inference) {
            out.push(line(
                "gradients held across steps",
                match self.kept_gradients.value {
                    Some(0) => "no".into(),
                    Some(b) => format!("yes, up to {}", h(b)),
                    None => unknown(),
                },
                &self.kept_gradients.because,
            ));
            out.push(line(
                "activation checkpointing",
                match self.checkpointing.value {
                    Some(true) => "in use".into(),
                    _ => "not seen".into(),
                },
                &self.checkpointing.because,
            ));
        }
        out.push(line(
            "allocator",
            match (self.gpu.value, self.expandable_segments.value) {
                (Some(false), _) => "CPU".into(),
                (_, Some(true)) => "expandable segments on".into(),
                _ => "caching, expandable segments off".into(),
            },
            &format!("{}; {}", self.gpu.because, self.expandable_segments.because),
        ));
        if self.kv_pool.value == Some(true) {
            out.push(line(
                "KV cache",
                "preallocated pool".into(),
                &self.kv_pool.because,
            ));
        }
        if let Some(r) = &self.reserved_estimate {
            out.push(line("reserved memory", "estimate".into(), r));
        }
        for (c, why) in &self.inferred {
            out.push(line(
                &format!("{c} at the peak"),
                "partly inferred".into(),
                why,
            ));
        }
        out
    }
}

fn mode(trace: &Trace, s: &Signals, a: &Allocations) -> Fact<Mode> {
    let mut training = Vec::new();
    if a.backward > 0 {
        training.push(format!("{} allocations in backward", a.backward));
    } else if s.backward.any() {
        training.push(format!("backward ({})", s.backward.example()));
    }
    if a.optimizer > 0 || s.optimizer_step.any() {
        let shown = s
            .optimizer_step
            .example
            .clone()
            .unwrap_or_else(|| format!("{} allocations", a.optimizer));
        training.push(format!("an optimizer step ({shown})"));
    }
    if a.training_state_before > 0 {
        training.push("gradients or optimizer state from before the recording".into());
    }
    if !training.is_empty() {
        return Fact::known(Mode::Training, training.join(", "));
    }
    let operators: u64 = trace.run.operators.iter().map(|(_, c)| c).sum();
    let seen = if operators > 0 {
        format!("no backward and no optimizer step among {operators} operator calls")
    } else if a.with_frames > 0 {
        format!(
            "no backward and no optimizer step in {} allocation stacks",
            a.with_frames
        )
    } else {
        String::new()
    };
    let marker = s
        .inference
        .example
        .as_ref()
        .map(|m| format!("inference code ({m})"));
    match (seen.is_empty(), marker) {
        (true, None) => {
            Fact::unknown("the trace has no frames or operators that tell training from inference")
        }
        (true, Some(m)) => Fact::known(Mode::Inference, m),
        (false, None) => Fact::known(Mode::Inference, format!("forward only: {seen}")),
        (false, Some(m)) => Fact::known(Mode::Inference, format!("{m}; {seen}")),
    }
}

fn optimizer(s: &Signals) -> Fact<Optimizer> {
    if !s.optimizer_step.any() && !s.eight_bit_optimizer.any() {
        return Fact::unknown("no optimizer step in the trace");
    }
    let step = if s.fused.any() {
        Some((StepKind::Fused, s.fused.example()))
    } else if s.foreach.any() {
        Some((StepKind::Foreach, s.foreach.example()))
    } else if s.single_tensor.any() {
        Some((StepKind::SingleTensor, s.single_tensor.example()))
    } else {
        None
    };
    let mut because = vec![s.optimizer_step.example().to_owned()];
    if let Some((_, example)) = step {
        because.push(example.to_owned());
    }
    if s.eight_bit_optimizer.any() {
        because.push(s.eight_bit_optimizer.example().to_owned());
    }
    because.retain(|b| !b.is_empty());
    because.dedup();
    Fact::known(
        Optimizer {
            name: s.optimizer_name.clone(),
            step: step.map(|(k, _)| k),
            eight_bit: s.eight_bit_optimizer.any(),
            state_bytes: 0,
        },
        because.join("; "),
    )
}

fn weights(trace: &Trace) -> Fact<Dtype> {
    let dtypes = &trace.run.weight_dtypes;
    let total: u64 = dtypes.iter().map(|(_, c)| c).sum();
    let Some((name, count)) = dtypes
        .iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
    else {
        return Fact::unknown(
            "the trace does not show tensor dtypes (a profiler trace recorded with record_shapes=True does)",
        );
    };
    use crate::model::Dtype as D;
    let dtype = match name {
        D::Float32 => Dtype::Fp32,
        D::BFloat16 | D::Float16 => Dtype::SixteenBit,
        D::Float8 | D::Int8 | D::UInt8 => Dtype::EightBit,
        _ => Dtype::Other,
    };
    Fact::known(
        dtype,
        format!(
            "linear-layer weights are {} in {count} of {total} calls (record_shapes)",
            name.as_str()
        ),
    )
}

fn data_parallel(trace: &Trace, s: &Signals, dp_ranks: u32) -> Fact<DataParallel> {
    let sharded = s.sharded.any();
    if dp_ranks > 1 {
        return Fact::known(
            DataParallel {
                ranks: Some(dp_ranks),
                sharded: false,
            },
            format!("--dp-ranks {dp_ranks}"),
        );
    }
    if sharded {
        return Fact::known(
            DataParallel {
                ranks: None,
                sharded: true,
            },
            format!("ZeRO/FSDP ({})", s.sharded.example()),
        );
    }
    let collectives = s
        .collectives
        .any()
        .then(|| format!("{} ×{}", s.collectives.example(), s.collectives.count));
    if let Some(d) = &trace.distributed {
        let w = d.world_size;
        if w > 1 {
            let mut because =
                format!("distributedInfo: world size {w}; assumes every rank is data-parallel");
            if let Some(c) = &collectives {
                because.push_str(&format!("; {c}"));
            }
            return Fact::known(
                DataParallel {
                    ranks: Some(w),
                    sharded: false,
                },
                because,
            );
        }
        if w == 1 {
            return Fact::known(
                DataParallel {
                    ranks: Some(1),
                    sharded: false,
                },
                "distributedInfo: world size 1".to_owned(),
            );
        }
    }
    if s.data_parallel.any() {
        return Fact::known(
            DataParallel {
                ranks: None,
                sharded: false,
            },
            format!("data parallel ({})", s.data_parallel.example()),
        );
    }
    match collectives {
        Some(c) => Fact::known(
            DataParallel {
                ranks: None,
                sharded: false,
            },
            format!("collectives ({c})"),
        ),
        None => Fact::known(
            DataParallel {
                ranks: Some(1),
                sharded: false,
            },
            "no process group or collective in the trace",
        ),
    }
}

fn gpu(device: &str) -> Fact<bool> {
    let kind = device.split(':').next().unwrap_or("");
    match kind {
        "cpu" => Fact::known(false, "the device is the CPU"),
        "cuda" | "hip" | "xpu" | "mps" | "maia" | "hpu" => {
            Fact::known(true, format!("the device is {device}"))
        }
        _ => Fact::unknown(format!("device {device}")),
    }
}

fn expandable(trace: &Trace, device: &DeviceTrace) -> Fact<bool> {
    let expandable_segment = device
        .segments
        .as_ref()
        .is_some_and(|s| s.iter().any(|seg| seg.is_expandable));
    match trace.run.expandable_segments {
        Some(true) => Fact::known(true, "allocator_settings: expandable_segments True"),
        _ if expandable_segment => Fact::known(true, "the dumped segments are expandable"),
        Some(false) => Fact::known(false, "allocator_settings: expandable_segments False"),
        None => Fact::known(
            false,
            "expandable segments are off by default (the trace does not show the allocator settings)",
        ),
    }
}

/// Why reserved memory is an estimate: a snapshot whose history has no
/// segment events knows reserved memory at dump time only.
fn reserved_estimate(device: &DeviceTrace) -> Option<String> {
    let segments = device.segments.as_ref()?;
    if !device.segments_show_reserved || segments.is_empty() || !device.reported.is_empty() {
        return None;
    }
    let segment_events = device.events.iter().any(|e| {
        matches!(
            e.action,
            Action::SegmentAlloc | Action::SegmentFree | Action::SegmentMap | Action::SegmentUnmap
        )
    });
    (!segment_events).then(|| {
        "reserved memory is known at dump time only (no segment events in the history): the allocator cache is the dump-time value".to_owned()
    })
}

/// Categories at the peak whose bytes are partly inferred rather than
/// observed: allocations that existed before the recording (their category
/// comes from a frame or is assumed), or from an `inferred_…` rule.
fn inferred(peak: &[LiveAllocation]) -> Vec<(Category, String)> {
    let mut by: Vec<(Category, u64, u64)> = Vec::new();
    for a in peak {
        let inferred =
            Builtin::from_name(&a.rule).is_some_and(|b| b.provenance() != Provenance::Observed);
        match by.iter_mut().find(|(c, ..)| *c == a.category) {
            Some(e) => {
                e.1 += a.size;
                e.2 += if inferred { a.size } else { 0 };
            }
            None => by.push((a.category, a.size, if inferred { a.size } else { 0 })),
        }
    }
    by.sort_by_key(|(c, ..)| *c);
    by.into_iter()
        .filter(|&(c, total, inferred)| {
            c != Category::Unknown && inferred > 0 && inferred * 10 >= total
        })
        .map(|(c, total, inferred)| {
            (
                c,
                format!(
                    "{} of its {} existed before the recording; its category is inferred, not observed (see before_recording)",
                    h(inferred),
                    h(total)
                ),
            )
        })
        .collect()
}
