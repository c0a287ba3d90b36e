//! Evidence about memory that existed before recording began, read once per
//! device from what the trace shows while recording (issue 11): how large
//! the parameters are, which optimizer ran and how many state tensors it
//! keeps per parameter, whether gradients are kept between steps, what the
//! weights the forward reads add up to, and how large a KV-cache pool the
//! cache-writing operators write into.
//!
//! Every amount is arithmetic the reader can check, and each carries the
//! sentence that says where it comes from ([`Amount::from`]). Nothing here
//! decides a category: `before_recording.rs` does, with these amounts.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::{EvidenceOp, OperatorCall, TensorShape};
use crate::timeline::{Origin, Replay};
use crate::units::human_bytes;
use crate::vocabulary::{is_ddp_name, optimizer_class};

use super::chains::Chains;
use super::{Classification, Context};

mod gradients;
use gradients::{
    accumulated_in_place, accumulated_into_existing, added_into_before_recording,
    freed_by_zero_grad, live_gradients, sorted, zero_grad_runs,
};

/// A number of bytes and the sentence that says where it comes from.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Amount {
    pub(super) bytes: u64,
    pub(super) from: String,
}

/// The weights the operators read, and the output projections among them
/// that may be the embedding table read again (tied) or weights of their own.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct WeightsRead {
    /// Every weight once, a head shaped like an embedding table and read as
    /// often as it counted once (as if tied).
    pub(super) amount: Amount,
    /// Bytes of those heads: a shape alone cannot tell a tied head (GPT-2,
    /// BERT) from an untied one of the same shape (Llama, a `[vocab, d]`
    /// output projection beside its embedding). The lump from before
    /// recording decides (`before_recording::split_lump`).
    pub(super) heads_like_tables: u64,
}

/// The parameters' sizes, one per parameter (sorted), from the gradients.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ParamSizes {
    pub(super) sizes: Vec<u64>,
    pub(super) from: String,
}

impl ParamSizes {
    pub(super) fn bytes(&self) -> u64 {
        self.sizes.iter().fold(0u64, |s, &b| s.saturating_add(b))
    }
}

/// The optimizer that ran and the state tensors it keeps per parameter.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Optimizer {
    pub(super) name: String,
    /// State tensors the size of its parameter, per parameter (AdamW: 2).
    pub(super) states_per_param: u64,
    /// Why that many (`exp_avg` and `exp_avg_sq`; momentum seen; …).
    pub(super) because: String,
}

/// A KV-cache pool written by cache operators: `calls` calls, each writing
/// caches of `per_call` bytes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct KvPool {
    pub(super) per_call: u64,
    pub(super) calls: u64,
    pub(super) from: String,
}

/// What one device's trace says about memory from before recording.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Evidence {
    /// Parameter sizes from gradient allocations (exact, one per parameter).
    pub(super) params: Option<ParamSizes>,
    /// Parameter bytes from the weights operators read (`record_shapes`): a
    /// lower bound (blocks are rounded up, unread weights are missing).
    pub(super) weights: Option<WeightsRead>,
    pub(super) optimizer: Option<Optimizer>,
    /// Set when `Optimizer.zero_grad` freed nothing, or the first backward
    /// pass added gradients into existing ones: gradients live from step
    /// to step, so they existed before recording.
    pub(super) gradients_kept: bool,
    /// The first versions of the tensors from before recording that
    /// backward added a new gradient into ([`added_into_before_recording`]).
    pub(super) added_into: Vec<usize>,
    pub(super) kv_pool: Option<KvPool>,
    /// PyTorch's cuBLAS workspace, which a trace recorded after warm-up
    /// holds from its first matrix multiply on (see [`cublas_workspace`]).
    pub(super) cublas_workspace: Option<Amount>,
    /// The model's input, made before recording (see [`model_input`]).
    pub(super) model_input: Option<Amount>,
    /// DistributedDataParallel's gradient buckets, made before recording
    /// (see [`all_reduced_buckets`]).
    pub(super) ddp_buckets: Option<Amount>,
    /// The history has a backward pass or an optimizer step.
    pub(super) training: bool,
    /// An operator that reads weights (a linear layer, a convolution, an
    /// embedding, a norm) ran, shapes recorded or not: a forward pass.
    pub(super) reads_weights: bool,
}

impl Evidence {
    /// Reads the evidence of `ctx`'s device; `classes` are the traced
    /// intervals' classifications (gradients live together are a last
    /// source of parameter sizes).
    pub(super) fn gather(
        ctx: &Context<'_>,
        replay: &Replay,
        classes: &[Classification],
        chains: Option<&Chains>,
    ) -> Evidence {
        let optimizer = optimizer(ctx);
        let zero_grad = zero_grad_runs(ctx);
        let added_into =
            chains.map_or_else(Vec::new, |c| added_into_before_recording(ctx, replay, c));
        let gradients_kept = zero_grad
            .as_ref()
            .is_some_and(|runs| runs.iter().all(Vec::is_empty))
            || accumulated_into_existing(ctx, replay, classes)
            || !added_into.is_empty();
        let params = zero_grad
            .and_then(freed_by_zero_grad)
            .or_else(|| live_gradients(replay, classes))
            .or_else(|| accumulated_in_place(ctx))
            .or_else(|| {
                (!added_into.is_empty()).then(|| {
                    let n = added_into.len();
                    sorted(
                        added_into.iter().map(|&k| replay.intervals[k].size).collect(),
                        format!("sizes of the {n} gradients from before recording that backward added new ones into"),
                    )
                })
            });
        let training = ctx.training || optimizer.is_some() || has_optimizer_step(ctx);
        // Shapes are not tied to a device: they speak for the one device
        // with memory from before recording.
        let (weights, kv_pool, model_input, ddp_buckets) = if ctx.shapes_apply {
            (
                weights_read(ctx),
                kv_pool(ctx),
                model_input(ctx, replay),
                all_reduced_buckets(ctx, replay, training),
            )
        } else {
            (None, None, None, None)
        };
        Evidence {
            params,
            weights,
            optimizer,
            gradients_kept,
            added_into,
            kv_pool,
            cublas_workspace: cublas_workspace(ctx, replay),
            model_input,
            ddp_buckets,
            training,
            reads_weights: ctx
                .trace
                .evidence
                .iter()
                .any(|c| !weight_inputs(c.op).is_empty()),
        }
    }
}

/// Operators that run cuBLAS on a CUDA device (a linear layer is an
/// `addmm` or a `matmul`).
const CUBLAS_OPERATORS: [&str; 9] = [
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::addbmm",
    "aten::matmul",
    "aten::linear",
    "aten::addmv",
    "aten::_addmm_activation",
];

/// PyTorch's default cuBLAS workspace for a compute capability
/// (`parseChosenWorkspaceSize` in aten/src/ATen/cuda/CublasHandlePool.cpp,
/// `CUBLAS_WORKSPACE_CONFIG` unset): `:4096:8` (32 MiB) on 9.0 (Hopper),
/// `:4096:2:16:8` (8 MiB + 128 KiB) before it. Newer architectures are left
/// out: their default differs between versions.
fn default_cublas_workspace(capability: (u32, u32)) -> Option<u64> {
    match capability {
        (9, 0) => Some(4096 * 1024 * 8),
        (major, _) if major < 9 => Some(4096 * 1024 * 2 + 16 * 1024 * 8),
        _ => None,
    }
}

/// The cuBLAS workspace, when the memory from before recording should hold
/// it: since PyTorch 2.3 the first matrix multiply on a (cuBLAS handle,
/// stream) allocates one through the caching allocator and keeps it for
/// the life of the process, so a trace recorded after warm-up starts with
/// it and no event names it. Inferred for a CUDA device whose compute
/// capability the trace states, in a trace that runs cuBLAS operators and
/// allocates no block of the workspace's size that stays to the end (a
/// trace recorded from a cold start shows the workspace allocated); one
/// workspace (one handle and stream) is counted.
fn cublas_workspace(ctx: &Context<'_>, replay: &Replay) -> Option<Amount> {
    let (major, minor) = ctx.device.compute_capability?;
    let bytes = default_cublas_workspace((major, minor))?;
    // The operator list is the whole trace's: it speaks for its only accelerator.
    if !ctx.shapes_apply || !ctx.device.device.starts_with("cuda") {
        return None;
    }
    let calls: u64 = ctx
        .trace
        .run
        .operators
        .iter()
        .filter(|(name, _)| CUBLAS_OPERATORS.contains(&name.as_str()))
        .map(|(_, n)| n)
        .sum();
    let allocated_while_recording = replay
        .intervals
        .iter()
        .any(|i| i.origin == Origin::Traced && i.size == bytes && i.end == replay.positions());
    if calls == 0 || allocated_while_recording {
        return None;
    }
    Some(Amount {
        bytes,
        from: format!(
            "an estimate: PyTorch's default cuBLAS workspace for compute capability {major}.{minor} ({}), kept from the first matrix multiply ({calls} cuBLAS operator calls in the trace, none allocating it); CUBLAS_WORKSPACE_CONFIG changes its size, and some PyTorch versions built with CUDA 12.2+ allocate none",
            human_bytes(bytes)
        ),
    })
}

/// Time ranges of the trace's annotations whose name starts with `prefix`.
fn ranges<'c>(ctx: &'c Context<'_>, prefix: &'c str) -> impl Iterator<Item = (f64, f64)> + 'c {
    ctx.trace
        .annotations
        .iter()
        .filter(move |a| a.name.starts_with(prefix))
        .map(|a| (a.start_us, a.end_us))
}

fn has_optimizer_step(ctx: &Context<'_>) -> bool {
    ranges(ctx, "Optimizer.step").next().is_some() || ctx.facts.iter().any(|f| f.optimizer)
}

/// The length of the shortest prefix `p` with `seq[i] == seq[i - p]` for
/// every `i >= p` (prefix function, linear time).
pub(super) fn shortest_period(seq: &[u64]) -> usize {
    let mut pi = vec![0usize; seq.len()];
    for i in 1..seq.len() {
        let mut k = pi[i - 1];
        while k > 0 && seq[i] != seq[k] {
            k = pi[k - 1];
        }
        if seq[i] == seq[k] {
            k += 1;
        }
        pi[i] = k;
    }
    seq.len() - pi.last().copied().unwrap_or(0)
}

/// The optimizer, from `Optimizer.step#NAME.step` annotations or frames,
/// or `torch/optim/NAME.py` frames, with the number of state tensors per
/// parameter that PyTorch's implementation keeps.
fn optimizer(ctx: &Context<'_>) -> Option<Optimizer> {
    let steps: Vec<(f64, f64)> = ranges(ctx, "Optimizer.step").collect();
    let mut name = ctx
        .trace
        .annotations
        .iter()
        .find_map(|a| optimizer_class(&a.name));
    let sites = ctx.sites;
    let mut frames = (0..sites.len() as u32).flat_map(|s| sites.frames(s).iter());
    if name.is_none() {
        // The strings that can name one (`optimizer_class`).
        let may_name =
            sites.strings_where(|s| s.starts_with("Optimizer.step#") || s.contains("optim"));
        name = frames.find_map(|f| {
            if !may_name[f.filename as usize] && !may_name[f.name as usize] {
                return None;
            }
            let (file, fname) = (sites.str(f.filename), sites.str(f.name));
            optimizer_class(fname).or_else(|| optimizer_class(file))
        });
    }
    let name = name?;
    // In-place operations inside a step (Chrome calls, or frames of a
    // profile-derived snapshot, where in-place updates have their own entries).
    let ran_in_step = |op: EvidenceOp, needle: &str| {
        ctx.trace.evidence.iter().any(|c| {
            c.op == op
                && steps
                    .iter()
                    .any(|&(s, e)| s <= c.start_us && c.start_us <= e)
        }) || {
            let has_needle = sites.strings_where(|s| s.contains(needle));
            let optim_file = sites.strings_where(|s| s.contains("torch/optim/"));
            let optim_name =
                sites.strings_where(|s| s.contains("torch/optim/") || s.contains("Optimizer.step"));
            (0..sites.len() as u32).any(|s| {
                let fr = sites.frames(s);
                fr.iter().any(|f| has_needle[f.name as usize])
                    && fr
                        .iter()
                        .any(|f| optim_file[f.filename as usize] || optim_name[f.name as usize])
            })
        }
    };
    let (n, because) = match name.as_str() {
        "Adam" | "AdamW" | "FusedAdam" | "FusedAdamW" => {
            if ran_in_step(EvidenceOp::Maximum, "maximum") {
                (
                    3,
                    "exp_avg, exp_avg_sq and max_exp_avg_sq (amsgrad: maximum in the step)",
                )
            } else {
                (2, "exp_avg and exp_avg_sq")
            }
        }
        "NAdam" | "RAdam" => (2, "exp_avg and exp_avg_sq"),
        "Adamax" => (2, "exp_avg and exp_inf"),
        "Adadelta" => (2, "square_avg and acc_delta"),
        "Adagrad" => (1, "sum"),
        "SGD" => {
            if ran_in_step(EvidenceOp::MulInPlace, "mul_") {
                (1, "momentum_buffer (the step decays it in place: mul_)")
            } else {
                (0, "no momentum (the step multiplies no buffer in place)")
            }
        }
        "RMSprop" => {
            if ran_in_step(EvidenceOp::LerpInPlace, "lerp_") {
                (2, "square_avg and grad_avg (centered: lerp_ in the step); momentum buffers, if any, not counted")
            } else {
                (1, "square_avg; momentum buffers, if any, not counted")
            }
        }
        _ => return None,
    };
    Some(Optimizer {
        name,
        states_per_param: n,
        because: because.to_owned(),
    })
}

/// The byte sizes of the weights the operators read on `device`
/// (`record_shapes`), sorted, each once; empty when the trace's shapes do
/// not speak for the device (see `Context::shapes_apply`).
pub fn weight_sizes(trace: &crate::model::Trace, device: &crate::model::DeviceTrace) -> Vec<u64> {
    if !super::shapes_apply(trace, device) {
        return Vec::new();
    }
    let mut out: Vec<u64> = trace
        .evidence
        .iter()
        .flat_map(|c| {
            weight_inputs(c.op)
                .iter()
                .filter_map(|&k| c.inputs.get(k)?.as_ref())
                .map(|w| w.bytes())
        })
        .filter(|&b| b > 0)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Which inputs of a weight-reading operator are weights (and biases,
/// norms' running statistics).
fn weight_inputs(op: EvidenceOp) -> &'static [usize] {
    match op {
        EvidenceOp::Linear | EvidenceOp::Convolution | EvidenceOp::LibraryGemm => &[1, 2],
        EvidenceOp::Addmm => &[0, 2],
        EvidenceOp::Embedding | EvidenceOp::EmbeddingBag => &[0],
        EvidenceOp::LayerNorm | EvidenceOp::GroupNorm => &[2, 3],
        EvidenceOp::BatchNorm => &[1, 2, 3, 4],
        EvidenceOp::RmsNorm => &[2],
        EvidenceOp::NativeMultiHeadAttention => &[5, 6, 7, 8],
        _ => &[],
    }
}

/// Which inputs of a weight-reading operator are its data (what the layer
/// transforms), by position (`record_shapes`' `Input Dims`).
fn data_inputs(op: EvidenceOp) -> &'static [usize] {
    match op {
        EvidenceOp::Linear
        | EvidenceOp::Convolution
        | EvidenceOp::LibraryGemm
        | EvidenceOp::LayerNorm
        | EvidenceOp::GroupNorm
        | EvidenceOp::BatchNorm
        | EvidenceOp::RmsNorm
        | EvidenceOp::NativeMultiHeadAttention => &[0],
        EvidenceOp::Addmm | EvidenceOp::Embedding | EvidenceOp::EmbeddingBag => &[1],
        _ => &[],
    }
}

/// The model's input, when it existed before recording: the tensor the
/// first weight-reading operator of the recording reads as its data
/// (`record_shapes`), when no allocation made while recording and live at
/// that call could hold it (one at least as large: the input may be a view
/// of a bigger batch, as `x, y = torch.randint(…, (2, b, t))` makes).
/// `None` without timestamps or shapes.
fn model_input(ctx: &Context<'_>, replay: &Replay) -> Option<Amount> {
    let steps = calls_by_step(ctx, |op| !data_inputs(op).is_empty());
    let first = steps
        .first()?
        .iter()
        .filter(|c| c.start_us.is_finite())
        .min_by(|a, b| a.start_us.total_cmp(&b.start_us))?;
    let shape = first.inputs.get(data_inputs(first.op)[0])?.as_ref()?;
    let bytes = shape.bytes();
    if bytes == 0 || ctx.events.iter().any(|e| !e.ts_us.is_finite()) {
        return None;
    }
    // A view of a bigger batch counts: held by any allocation as large.
    if held_while_recording(ctx, replay, first.start_us, |size| size >= bytes) {
        return None;
    }
    Some(Amount {
        bytes,
        from: format!(
            "the model's input: the data {} reads first in the recording (record_shapes: {:?} {:?}), made by no allocation while recording",
            op_name(first.op),
            shape.dims,
            shape.dtype
        ),
    })
}

/// DistributedDataParallel's gradient buckets, when they existed before
/// recording: in a training run that shows DDP, the tensors the first
/// recorded step's all-reduces reduce (`gloo:all_reduce` /
/// `nccl:all_reduce`, `record_shapes`; DDP all-reduces each bucket once a
/// step), each counted when no allocation made while recording and live at
/// its call is it (a bucket made while recording is an allocation of its
/// own size). `None` without timestamps, shapes or such a call.
fn all_reduced_buckets(ctx: &Context<'_>, replay: &Replay, training: bool) -> Option<Amount> {
    if !training || !ctx.sites.strings().any(is_ddp_name) {
        return None;
    }
    if ctx.events.iter().any(|e| !e.ts_us.is_finite()) {
        return None;
    }
    let steps = calls_by_step(ctx, |op| op == EvidenceOp::AllReduce);
    let calls = steps.into_iter().find(|calls| !calls.is_empty())?;
    let mut shapes = Vec::new();
    for c in calls.iter().filter(|c| c.start_us.is_finite()) {
        let Some(shape) = c.inputs.first().and_then(Option::as_ref) else {
            continue;
        };
        let bytes = shape.bytes();
        // A bucket is a tensor of its own: held only by an allocation of its
        // size (the CUDA caching allocator rounds up to 512 bytes), not by a
        // bigger one, such as a gradient of a larger parameter made meanwhile.
        let its_own = |size: u64| size >= bytes && size < bytes.saturating_add(512);
        if bytes > 0 && !held_while_recording(ctx, replay, c.start_us, its_own) {
            shapes.push(shape);
        }
    }
    let bytes: u64 = shapes.iter().map(|s| s.bytes()).sum();
    (bytes > 0).then(|| Amount {
        bytes,
        from: format!(
            "DistributedDataParallel's gradient buckets: the {} tensor(s) the first recorded step all-reduces ({}), made by no allocation while recording",
            shapes.len(),
            shapes
                .iter()
                .map(|s| format!("{:?} {:?}", s.dims, s.dtype))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    })
}

/// Whether an allocation made while recording whose size `could_hold`
/// accepts is live at `t` (µs; the events' clock): a tensor an operator
/// reads then may be (a view of) it, so it is no evidence of memory from
/// before recording.
fn held_while_recording(
    ctx: &Context<'_>,
    replay: &Replay,
    t: f64,
    could_hold: impl Fn(u64) -> bool,
) -> bool {
    let ts = |position: u32| ctx.events[position as usize - 1].ts_us;
    replay.intervals.iter().any(|i| {
        i.origin == Origin::Traced
            && could_hold(i.size)
            && i.start > 0
            && ts(i.start) <= t
            && (i.end >= replay.positions() || ts(i.end) > t)
    })
}

fn op_name(op: EvidenceOp) -> &'static str {
    match op {
        EvidenceOp::Linear => "aten::linear",
        EvidenceOp::Addmm => "aten::addmm",
        EvidenceOp::Embedding => "aten::embedding",
        EvidenceOp::EmbeddingBag => "aten::embedding_bag",
        EvidenceOp::Convolution => "convolutions",
        EvidenceOp::LayerNorm => "aten::layer_norm",
        EvidenceOp::GroupNorm => "aten::group_norm",
        EvidenceOp::BatchNorm => "aten::batch_norm",
        EvidenceOp::RmsNorm => "aten::rms_norm",
        EvidenceOp::NativeMultiHeadAttention => "aten::_native_multi_head_attention",
        EvidenceOp::LibraryGemm => "library GEMMs",
        EvidenceOp::KvCacheWrite | EvidenceOp::KvCacheWriteMla => "KV-cache writes",
        EvidenceOp::MulInPlace => "aten::mul_",
        EvidenceOp::Maximum => "aten::maximum",
        EvidenceOp::LerpInPlace => "aten::lerp_",
        EvidenceOp::IndexCopyInPlace => "aten::index_copy_",
        EvidenceOp::AllReduce => "all-reduces",
    }
}

/// Byte sizes of the tensors `aten::index_copy_` writes into more than
/// once (`record_shapes`): a preallocated cache (`StaticCache.update`).
pub(super) fn written_in_place_sizes(ctx: &Context<'_>) -> FxHashSet<u64> {
    let mut writes: FxHashMap<&TensorShape, u32> = FxHashMap::default();
    for c in &ctx.trace.evidence {
        if let (EvidenceOp::IndexCopyInPlace, Some(Some(target))) = (c.op, c.inputs.first()) {
            *writes.entry(target).or_default() += 1;
        }
    }
    writes
        .into_iter()
        .filter(|&(_, n)| n > 1)
        .map(|(t, _)| t.bytes())
        .filter(|&b| b > 0)
        .collect()
}

/// The calls of `ops` with recorded inputs, grouped by profiler step (one
/// group when the trace has no `ProfilerStep#N`), outermost calls only (a
/// call inside another of `ops` on its thread reads the same tensors).
fn calls_by_step<'c>(
    ctx: &'c Context<'_>,
    keep: impl Fn(EvidenceOp) -> bool,
) -> Vec<Vec<&'c OperatorCall>> {
    let mut calls: Vec<&OperatorCall> = ctx
        .trace
        .evidence
        .iter()
        .filter(|c| keep(c.op) && !c.inputs.is_empty())
        .collect();
    calls.sort_by(|a, b| {
        (a.thread, a.start_us, b.end_us)
            .partial_cmp(&(b.thread, b.start_us, a.end_us))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let mut outer: Vec<&OperatorCall> = Vec::with_capacity(calls.len());
    for c in calls {
        let inside = outer.last().is_some_and(|o| {
            o.thread == c.thread && o.start_us <= c.start_us && c.end_us <= o.end_us
        });
        if !inside {
            outer.push(c);
        }
    }
    let steps: Vec<(f64, f64)> = ranges(ctx, "ProfilerStep#").collect();
    if steps.is_empty() {
        return vec![outer];
    }
    steps
        .iter()
        .map(|&(s, e)| {
            outer
                .iter()
                .copied()
                .filter(|c| s <= c.start_us && c.start_us <= e)
                .collect()
        })
        .collect()
}

/// Parameter bytes from the weights that weight-reading operators take
/// (`record_shapes`), per forward pass, in the profiler step that reads most.
///
/// A step may hold several forward passes (`generate()`): each weight is
/// read once per pass, and the token embedding is read once per pass, so
/// when an embedding is among the calls, every weight's count is divided by
/// the greatest common divisor of the counts. A linear weight shaped like an
/// embedding table and read as often is counted once: it may be the tied
/// output embedding (GPT-2, BERT), and the amount is a lower bound.
fn weights_read(ctx: &Context<'_>) -> Option<WeightsRead> {
    let mut best: Option<WeightsRead> = None;
    for calls in calls_by_step(ctx, |op| !weight_inputs(op).is_empty()) {
        let mut counts: BTreeMap<(EvidenceOp, Vec<&TensorShape>), u64> = BTreeMap::new();
        for c in &calls {
            let weights: Vec<&TensorShape> = weight_inputs(c.op)
                .iter()
                .filter_map(|&k| c.inputs.get(k)?.as_ref())
                .collect();
            if !weights.is_empty() {
                *counts.entry((c.op, weights)).or_default() += 1;
            }
        }
        if counts.is_empty() {
            continue;
        }
        // Embedding tables and how often each is read.
        let tables: Vec<(&TensorShape, u64)> = counts
            .iter()
            .filter(|((op, _), _)| *op == EvidenceOp::Embedding)
            .map(|((_, w), &n)| (w[0], n))
            .collect();
        let passes = if tables.is_empty() {
            1
        } else {
            counts.values().fold(0, |g, &n| gcd(g, n))
        };
        let (mut bytes, mut heads, mut per_op) = (0u64, 0u64, BTreeMap::<&str, u64>::new());
        for ((op, weights), &n) in &counts {
            for (k, w) in weights.iter().enumerate() {
                // An output projection that may be tied to the embedding: same shape, read as often.
                let tied = *op == EvidenceOp::Linear && k == 0 && tables.contains(&(*w, n));
                let b = w.bytes().saturating_mul(n / passes);
                if tied {
                    heads = heads.saturating_add(b);
                } else {
                    bytes = bytes.saturating_add(b);
                }
            }
            *per_op.entry(op_name(*op)).or_default() += n / passes;
        }
        let listed: Vec<String> = per_op.iter().map(|(op, n)| format!("{op} {n}")).collect();
        let per_pass = if passes > 1 {
            format!(", per forward pass ({passes} passes)")
        } else {
            String::new()
        };
        let from = format!(
            "weights the operators read (record_shapes: {}{per_pass}); a lower bound",
            listed.join(", ")
        );
        if best.as_ref().is_none_or(|b| bytes > b.amount.bytes) {
            best = Some(WeightsRead {
                amount: Amount { bytes, from },
                heads_like_tables: heads,
            });
        }
    }
    best
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The KV-cache pool the cache-writing operators write into (vLLM
/// `reshape_and_cache_flash`, SGLang `store_cache`: one call per attention
/// layer and forward pass, the caches as inputs), in the profiler step that
/// writes most.
fn kv_pool(ctx: &Context<'_>) -> Option<KvPool> {
    let caches = |op| match op {
        EvidenceOp::KvCacheWrite => &[2usize, 3][..],
        EvidenceOp::KvCacheWriteMla => &[2][..],
        _ => &[][..],
    };
    let mut best: Option<KvPool> = None;
    for calls in calls_by_step(ctx, |op| !caches(op).is_empty()) {
        let shapes: Vec<Vec<&TensorShape>> = calls
            .iter()
            .map(|c| {
                caches(c.op)
                    .iter()
                    .filter_map(|&k| c.inputs.get(k)?.as_ref())
                    .collect()
            })
            .collect();
        let per_call = shapes
            .iter()
            .map(|s| s.iter().map(|t| t.bytes()).sum::<u64>())
            .max()
            .unwrap_or(0);
        if per_call == 0 {
            continue;
        }
        let calls_n = calls.len() as u64;
        let example = shapes
            .iter()
            .find(|s| !s.is_empty())
            .map(|s| {
                let t = s[0];
                format!("{:?} {} × {}", t.dims, t.dtype.as_str(), s.len())
            })
            .unwrap_or_default();
        let from = format!(
            "{calls_n} cache-writing calls, each into caches of {} ({example})",
            human_bytes(per_call)
        );
        if best
            .as_ref()
            .is_none_or(|b| per_call * calls_n > b.per_call * b.calls)
        {
            best = Some(KvPool {
                per_call,
                calls: calls_n,
                from,
            });
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_period_finds_one_pass() {
        assert_eq!(shortest_period(&[4, 8, 4, 8, 4, 8]), 2);
        assert_eq!(shortest_period(&[4, 8, 16]), 3);
        assert_eq!(shortest_period(&[4, 8, 16, 4, 8]), 3);
        assert_eq!(shortest_period(&[7, 7, 7]), 1);
        assert_eq!(shortest_period(&[]), 0);
    }
}
