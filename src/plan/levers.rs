//! Levers: the ways to cut memory, each scaling some pools (categories, or
//! parts of them: [`super::pools`]) by a factor at a cost, under conditions
//! on the run ([`Condition`]) that the trace's evidence decides
//! (`super::facts`). The built-in catalogue ([`CATALOGUE`], [`catalogue`]),
//! the `--levers FILE` format ([`parse_levers`]), and what a lever would do
//! at an instant ([`Lever::applicability`]). The search (`super::search`)
//! picks among the levers that apply; nothing else here knows about it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::demand::{scale, Row};
use super::pools::{Part, Target, NPOOL};
use crate::model::Category;

/// What a lever costs, cheapest first (the default plan order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Cost {
    /// A setting; no code change, no slowdown.
    #[serde(rename = "free")]
    Free,
    /// A small code or config change with little effect on speed.
    #[serde(rename = "cheap")]
    Cheap,
    /// Recomputation or smaller kernels: the step takes longer.
    #[serde(rename = "costs compute")]
    Compute,
    /// Moves data between GPUs or to the host every step.
    #[serde(rename = "costs bandwidth")]
    Bandwidth,
    /// Fewer bits for numbers the model computes with: check the quality.
    #[serde(rename = "costs accuracy")]
    Accuracy,
}

impl Cost {
    pub fn as_str(self) -> &'static str {
        match self {
            Cost::Free => "free",
            Cost::Cheap => "cheap",
            Cost::Compute => "costs compute",
            Cost::Bandwidth => "costs bandwidth",
            Cost::Accuracy => "costs accuracy",
        }
    }
}

/// A condition on the run under which a lever applies. The planner decides
/// each from the trace's evidence (`super::facts`) as holds, does not hold,
/// or unknown; a lever whose condition is unknown is planned last and
/// worded "if …". `--levers` files name them in `when`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// The run trains: backward, an optimizer step, gradients or optimizer
    /// state in memory.
    Training,
    /// The run only infers: forward passes without backward or optimizer.
    Inference,
    /// The device is a GPU (host memory is elsewhere; a caching allocator).
    Gpu,
    /// The caching allocator does not use expandable segments already.
    ExpandableSegmentsOff,
    /// Optimizer state is in memory (and not 8-bit already).
    OptimizerState,
    /// The optimizer step is not fused already.
    OptimizerNotFused,
    /// The weights are fp32.
    WeightsFp32,
    /// The weights are wider than 8 bits.
    WeightsNotQuantized,
    /// Data parallel over more than one rank, not sharded already.
    DataParallel,
    /// Gradients are held from an optimizer step through the next forward.
    GradientsKeptAcrossSteps,
    /// Activations are not checkpointed already.
    NotCheckpointing,
    /// The KV cache grows with the tokens it holds (not a pool preallocated
    /// by a serving engine).
    KvCacheGrows,
    /// The KV cache is a pool a serving engine (vLLM, SGLang) preallocates
    /// to fill a share of the GPU.
    KvCachePool,
}

impl Condition {
    pub const ALL: [Condition; 13] = [
        Condition::Training,
        Condition::Inference,
        Condition::Gpu,
        Condition::ExpandableSegmentsOff,
        Condition::OptimizerState,
        Condition::OptimizerNotFused,
        Condition::WeightsFp32,
        Condition::WeightsNotQuantized,
        Condition::DataParallel,
        Condition::GradientsKeptAcrossSteps,
        Condition::NotCheckpointing,
        Condition::KvCacheGrows,
        Condition::KvCachePool,
    ];

    /// The name in `--levers` files and the README.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Training => "training",
            Condition::Inference => "inference",
            Condition::Gpu => "gpu",
            Condition::ExpandableSegmentsOff => "expandable_segments_off",
            Condition::OptimizerState => "optimizer_state",
            Condition::OptimizerNotFused => "optimizer_not_fused",
            Condition::WeightsFp32 => "weights_fp32",
            Condition::WeightsNotQuantized => "weights_not_quantized",
            Condition::DataParallel => "data_parallel",
            Condition::GradientsKeptAcrossSteps => "gradients_kept_across_steps",
            Condition::NotCheckpointing => "not_checkpointing",
            Condition::KvCacheGrows => "kv_cache_grows",
            Condition::KvCachePool => "kv_cache_pool",
        }
    }
}

/// A way to cut memory: the pools it scales and by what factor, and when it
/// applies. `--levers FILE` takes a JSON list of these:
/// `[{"name": "…", "scales": {"activation": 0.5}, "cost": "cheap", "action": "…",
///    "when": ["training"], "tradeoff": "…"}]` (`when` and `tradeoff` optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lever {
    pub name: String,
    /// Factor in `[0, 1]` per target it shrinks: a category, or one part of it.
    pub scales: BTreeMap<Target, f64>,
    pub cost: Cost,
    /// What to do, concretely.
    pub action: String,
    /// Conditions on the run, all of which must hold (none: always).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<Condition>,
    /// What the cost means here (`≈ one extra forward per step`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tradeoff: String,
}

impl Lever {
    /// The factor for every pool (1 where the lever does not scale it). A
    /// target naming a part overrides its category's factor for that part.
    pub(crate) fn factors(&self) -> [f64; NPOOL] {
        let mut f = [1.0; NPOOL];
        // Whole categories first, then the narrower targets over them.
        let mut targets: Vec<(&Target, &f64)> = self.scales.iter().collect();
        targets.sort_by_key(|(t, _)| t.part.is_some());
        for (t, s) in targets {
            for p in t.pools() {
                f[p] = *s;
            }
        }
        f
    }

    /// How the lever is modelled from the run, when the pools it scales are
    /// ones the run itself delimits and it removes them entirely (its
    /// factor is no estimate): zeroing the gradients kept from a step
    /// through the next forward is `zero_grad(set_to_none=True)` exactly,
    /// as far as the windows are right (see `pools::Overlay::build`).
    pub fn modelled_from_run(&self) -> Option<&'static str> {
        let kept = Target::part(Part::KeptAcrossSteps);
        let only_kept =
            !self.scales.is_empty() && self.scales.iter().all(|(t, s)| *t == kept && *s == 0.0);
        only_kept.then_some(
            "each gradient kept from the optimizer step is freed there and made again where the next backward computes its new value (a tensor of its size that backward adds into it)",
        )
    }

    /// The categories this lever actually shrinks (factor < 1 for some part).
    pub fn categories(&self) -> Vec<Category> {
        let mut out: Vec<Category> = self
            .scales
            .iter()
            .filter(|(_, s)| **s < 1.0)
            .map(|(t, _)| t.category)
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// What the lever would do at an instant with `bytes` by pool (scaled by
    /// the levers applied so far): what it saves there, and the bytes of the
    /// pools it shrinks.
    pub(crate) fn applicability(&self, bytes: &Row) -> Applicability {
        let f = self.factors();
        let mut a = Applicability::default();
        for (p, b) in bytes.iter().enumerate() {
            if f[p] < 1.0 {
                a.contribution += b;
                a.saving += b - scale(*b, f[p]);
            }
        }
        a
    }
}

/// What a lever would do at one instant ([`Lever::applicability`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applicability {
    /// Bytes the lever removes there.
    pub saving: u64,
    /// Bytes of the pools it scales there.
    pub contribution: u64,
}

/// Why a levers file was refused (one line each).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LeversError {
    #[error("bad levers file: {0}")]
    Json(serde_json::Error),
    #[error("bad levers file: a lever has an empty name")]
    EmptyName,
    #[error("bad levers file: lever {lever}: factor for {target} must be in [0, 1], got {factor}")]
    BadFactor {
        lever: String,
        target: Target,
        factor: f64,
    },
}

/// Parses and checks a levers file (JSON list of [`Lever`]).
pub fn parse_levers(text: &str) -> Result<Vec<Lever>, LeversError> {
    let levers: Vec<Lever> = serde_json::from_str(text).map_err(LeversError::Json)?;
    for l in &levers {
        if l.name.trim().is_empty() {
            return Err(LeversError::EmptyName);
        }
        for (t, s) in &l.scales {
            if !s.is_finite() || !(0.0..=1.0).contains(s) {
                return Err(LeversError::BadFactor {
                    lever: l.name.clone(),
                    target: *t,
                    factor: *s,
                });
            }
        }
    }
    Ok(levers)
}

/// A factor in the built-in catalogue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Factor {
    Times(f64),
    /// `1 / N` for `N` data-parallel ranks (`--dp-ranks`, or the trace's
    /// `distributedInfo`).
    PerRank,
    /// 8-bit weights: ×0.5 of 16-bit weights, ×0.25 of fp32 ones.
    EightBitWeights,
    /// A KV cache that holds each sequence's tokens: ×0.5 with half the
    /// sequences; ×1 for a serving engine's preallocated pool, whose size
    /// the engine sets whatever the batch.
    HalfUnlessPool,
}

/// One row of the built-in catalogue.
#[derive(Debug, Clone, Copy)]
pub struct LeverSpec {
    pub name: &'static str,
    pub scales: &'static [(Target, Factor)],
    pub cost: Cost,
    /// `{N}` is replaced by the number of data-parallel ranks.
    pub action: &'static str,
    pub when: &'static [Condition],
    pub tradeoff: &'static str,
}

use Category as C;
use Condition as W;
use Factor::{EightBitWeights, HalfUnlessPool, PerRank, Times};

const ACTIVATION: Target = Target::all(C::Activation);
const SAVED: Target = Target::part(Part::SavedForBackward);
const SAVED_IN_FP32: Target = Target::part(Part::SavedInFp32);
const STEP_TRANSIENTS: Target = Target::part(Part::OptimizerStep);
const KEPT_GRADIENTS: Target = Target::part(Part::KeptAcrossSteps);
const SET_TO_NONE: &str = "zero_grad_set_to_none";
/// The catalogue's lever whose factor the gradients' lifetimes complete
/// (`whatif::accumulated_gradients`).
pub const HALVE_MICRO_BATCH: &str = "halve_micro_batch";
const OPTIMIZER_8BIT: &str = "optimizer_8bit";
const BF16_WEIGHTS: &str = "bf16_weights";
const OTHER_TEMPORARIES: Target = Target::other(C::Temporary);

/// The built-in levers. The factors are deliberately round, documented
/// defaults, not measurements of your model; override them with `--levers`.
/// Each applies under its conditions only (`when`); the lever table in
/// docs/plan.md explains every condition, factor and cost.
pub const CATALOGUE: &[LeverSpec] = &[
    LeverSpec {
        name: "expandable_segments",
        scales: &[(Target::all(C::AllocatorCache), Times(0.2))],
        cost: Cost::Free,
        action: "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        when: &[W::Gpu, W::ExpandableSegmentsOff],
        tradeoff: "",
    },
    LeverSpec {
        name: SET_TO_NONE,
        scales: &[(KEPT_GRADIENTS, Times(0.0))],
        cost: Cost::Free,
        action: "call optimizer.zero_grad(set_to_none=True) right after optimizer.step(), so gradients are freed until backward writes them again",
        when: &[W::Training, W::GradientsKeptAcrossSteps],
        tradeoff: "",
    },
    LeverSpec {
        name: "fused_optimizer",
        scales: &[(STEP_TRANSIENTS, Times(0.1))],
        cost: Cost::Free,
        action: "use the fused optimizer step (e.g. torch.optim.AdamW(..., fused=True)); foreach=False also avoids the multi-tensor intermediates",
        when: &[W::Training, W::OptimizerNotFused],
        tradeoff: "same math; foreach=False is slower on many small tensors",
    },
    LeverSpec {
        name: HALVE_MICRO_BATCH,
        // Not backward's weight-sized tensors (each weight's new gradient).
        scales: &[
            (ACTIVATION, Times(0.5)),
            (Target::other(C::AutogradDetail), Times(0.5)),
            (OTHER_TEMPORARIES, Times(0.5)),
            (Target::all(C::Input), Times(0.5)),
        ],
        cost: Cost::Cheap,
        action: "halve the micro-batch and double the gradient-accumulation steps (same effective batch)",
        when: &[W::Training],
        tradeoff: "smaller kernels: some throughput",
    },
    LeverSpec {
        name: "halve_batch",
        scales: &[
            (ACTIVATION, Times(0.5)),
            (OTHER_TEMPORARIES, Times(0.5)),
            (Target::all(C::Input), Times(0.5)),
            (Target::all(C::KvCache), HalfUnlessPool),
        ],
        cost: Cost::Cheap,
        action: "halve the batch (sequences per forward) or the longest sequence per forward (chunked prefill)",
        when: &[W::Inference],
        tradeoff: "fewer sequences at once: lower throughput",
    },
    LeverSpec {
        name: "chunk_temporaries",
        scales: &[(OTHER_TEMPORARIES, Times(0.5))],
        cost: Cost::Cheap,
        action: "compute the largest temporaries in chunks (chunked logits/loss, smaller attention blocks)",
        when: &[],
        tradeoff: "",
    },
    LeverSpec {
        name: "kv_cache_quantization",
        scales: &[(Target::all(C::KvCache), Times(0.5))],
        cost: Cost::Cheap,
        action: "store the KV cache in 8 bits (transformers QuantizedCache, KIVI-style quantisation), if it is 16-bit now",
        when: &[W::KvCacheGrows],
        tradeoff: "small quality loss",
    },
    LeverSpec {
        name: "kv_cache_limit",
        scales: &[(Target::all(C::KvCache), Times(0.5))],
        cost: Cost::Cheap,
        action: "halve the KV cache: a shorter maximum context or fewer sequences at once, or a paged cache that holds only the tokens in use",
        when: &[W::Inference, W::KvCacheGrows],
        tradeoff: "shorter contexts or fewer sequences at once",
    },
    LeverSpec {
        name: "kv_cache_pool",
        scales: &[(Target::all(C::KvCache), Times(0.5))],
        cost: Cost::Cheap,
        action: "give the engine a smaller share of the GPU (vLLM gpu_memory_utilization, SGLang mem_fraction_static): it fills that share with KV-cache blocks",
        when: &[W::KvCachePool],
        tradeoff: "half the cached tokens: fewer sequences at once or shorter contexts (fp8 kv_cache_dtype then holds as many tokens as before)",
    },
    LeverSpec {
        name: OPTIMIZER_8BIT,
        scales: &[(Target::all(C::OptimizerState), Times(0.25))],
        cost: Cost::Cheap,
        action: "use an 8-bit optimizer (e.g. bitsandbytes AdamW8bit)",
        when: &[W::Training, W::OptimizerState],
        tradeoff: "usually the same loss curve; check it",
    },
    LeverSpec {
        name: "activation_checkpointing",
        scales: &[(SAVED, Times(0.3)), (SAVED_IN_FP32, Times(0.3))],
        cost: Cost::Compute,
        action: "checkpoint each block (torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)): only block inputs are saved, the rest is recomputed in backward",
        when: &[W::Training, W::NotCheckpointing],
        tradeoff: "≈ one extra forward per step (about a third more compute)",
    },
    LeverSpec {
        name: "save_on_cpu",
        scales: &[(SAVED, Times(0.2)), (SAVED_IN_FP32, Times(0.2))],
        cost: Cost::Bandwidth,
        action: "run the forward under torch.autograd.graph.save_on_cpu(pin_memory=True): tensors saved for backward wait in host memory",
        when: &[W::Training, W::Gpu],
        tradeoff: "every saved tensor crosses PCIe twice per step",
    },
    LeverSpec {
        name: "optimizer_state_sharding",
        scales: &[(Target::all(C::OptimizerState), PerRank)],
        cost: Cost::Bandwidth,
        action: "shard optimizer state across the {N} data-parallel ranks (ZeRO-1 / FSDP SHARD_GRAD_OP)",
        when: &[W::Training, W::DataParallel, W::OptimizerState],
        tradeoff: "",
    },
    LeverSpec {
        name: "gradient_sharding",
        scales: &[(Target::all(C::Gradient), PerRank)],
        cost: Cost::Bandwidth,
        action: "shard gradients across the {N} data-parallel ranks (ZeRO-2 / FSDP SHARD_GRAD_OP)",
        when: &[W::Training, W::DataParallel],
        tradeoff: "reduce-scatter instead of all-reduce",
    },
    LeverSpec {
        name: "parameter_sharding",
        scales: &[(Target::all(C::Parameter), PerRank)],
        cost: Cost::Bandwidth,
        action: "shard parameters across the {N} data-parallel ranks (ZeRO-3 / FSDP FULL_SHARD)",
        when: &[W::Training, W::DataParallel],
        tradeoff: "an all-gather per layer in forward and in backward",
    },
    LeverSpec {
        name: "optimizer_cpu_offload",
        scales: &[(Target::all(C::OptimizerState), Times(0.0))],
        cost: Cost::Bandwidth,
        action: "offload optimizer state to host memory (DeepSpeed offload_optimizer, FSDP CPUOffload)",
        when: &[W::Training, W::OptimizerState, W::Gpu],
        tradeoff: "the step streams the state over PCIe",
    },
    LeverSpec {
        name: "weight_quantization",
        scales: &[(Target::all(C::Parameter), EightBitWeights)],
        cost: Cost::Accuracy,
        action: "load the weights in 8 bits (bitsandbytes LLM.int8, torchao int8 weight-only; from fp32 weights, bf16 alone halves them); 4-bit halves them again",
        when: &[W::Inference, W::WeightsNotQuantized],
        tradeoff: "check the quality; int8 matmuls may be slower",
    },
    LeverSpec {
        name: BF16_WEIGHTS,
        // Pure-bf16 training: the gradients, the optimizer's state (made like
        // the weights), what the forward and backward compute and the float
        // inputs cast to match follow the weights' dtype. Integer inputs
        // (token ids, small beside the rest) do not, nor what attention's
        // math path saves (it computes in fp32: `fp32.rs`); bytes no rule
        // names stay as they are (no lever claims them).
        scales: &[
            (Target::all(C::Input), Times(0.5)),
            (Target::all(C::Parameter), Times(0.5)),
            (Target::all(C::Gradient), Times(0.5)),
            (Target::all(C::OptimizerState), Times(0.5)),
            (Target::other(C::Activation), Times(0.5)),
            (SAVED, Times(0.5)),
            (Target::all(C::AutogradDetail), Times(0.5)),
            (Target::all(C::Temporary), Times(0.5)),
        ],
        cost: Cost::Accuracy,
        action: "train with bf16 weights (pure-bf16 training; keep an eye on updates below bf16 resolution)",
        // Inference has weight_quantization, which counts fp32 → 8-bit as
        // ×0.25: the two together would count the bf16 half twice.
        when: &[W::Training, W::WeightsFp32],
        tradeoff: "bf16 rounding; in training, updates smaller than bf16 resolution are lost",
    },
];

/// The catalogue for `dp_ranks` data-parallel ranks (the sharding levers
/// scale by `1 / dp_ranks`; with one rank they change nothing and their
/// `data_parallel` condition keeps them out of the plan), with weights of
/// `weights_fp32` (8-bit weights are a quarter of fp32 ones, half of
/// 16-bit ones), and a KV cache that is a serving engine's preallocated
/// pool (`kv_pool`: halving the batch leaves it as it is) or not.
pub fn catalogue(dp_ranks: u32, weights_fp32: bool, kv_pool: bool) -> Vec<Lever> {
    CATALOGUE
        .iter()
        .map(|spec| Lever {
            name: spec.name.to_owned(),
            scales: spec
                .scales
                .iter()
                .map(|(t, f)| {
                    let v = match f {
                        Times(x) => *x,
                        PerRank => 1.0 / dp_ranks.max(1) as f64,
                        EightBitWeights if weights_fp32 => 0.25,
                        EightBitWeights => 0.5,
                        HalfUnlessPool if kv_pool => 1.0,
                        HalfUnlessPool => 0.5,
                    };
                    (*t, v)
                })
                .collect(),
            cost: spec.cost,
            action: spec.action.replace("{N}", &dp_ranks.to_string()),
            when: spec.when.to_vec(),
            tradeoff: spec.tradeoff.to_owned(),
        })
        .collect()
}

/// The factors of levers applied together: their product, but where one
/// changes what another does. With two micro-batches (`halve_micro_batch`)
/// the first one's gradients live through the second's forward and
/// backward: the windows `zero_grad_set_to_none` frees of the gradients
/// kept across steps, so together they free none of them (measured on the
/// `combined` pairs: GPT-2 and an MLP keeping their gradients, both levers
/// applied, peak where halving alone predicts). Returns why, when so.
///
/// Likewise an 8-bit optimizer keeps its state in 8 bits whatever the
/// weights' dtype: with `optimizer_8bit`, `bf16_weights` does not halve the
/// optimizer's state again (by construction; no CPU run has an 8-bit
/// optimizer to record).
pub fn combined_factors(levers: &[&Lever]) -> ([f64; NPOOL], Option<String>) {
    let has = |n: &str| levers.iter().any(|l| l.name == n);
    let kept_stay = has(SET_TO_NONE) && has(HALVE_MICRO_BATCH);
    let state_8bit = has(OPTIMIZER_8BIT) && has(BF16_WEIGHTS);
    let mut out = [1.0; NPOOL];
    for lever in levers {
        let mut f = lever.factors();
        if kept_stay && lever.name == SET_TO_NONE {
            f[Part::KeptAcrossSteps.pool()] = 1.0;
        }
        if state_8bit && lever.name == BF16_WEIGHTS {
            for p in Target::all(Category::OptimizerState).pools() {
                f[p] = 1.0;
            }
        }
        for (o, x) in out.iter_mut().zip(f) {
            *o *= x;
        }
    }
    let mut why = Vec::new();
    if kept_stay {
        why.push("zero_grad_set_to_none with halve_micro_batch: the gradients kept from the step would be freed there, but the first micro-batch's are alive through the second's forward and backward, where they were kept: together the two free none of them");
    }
    if state_8bit {
        why.push("optimizer_8bit with bf16_weights: an 8-bit optimizer's state is 8-bit whatever the weights' dtype, so bf16_weights does not halve it again");
    }
    (out, (!why.is_empty()).then(|| why.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levers_together_combine_as_they_act() {
        let all = catalogue(1, true, false);
        let get = |n: &str| all.iter().find(|l| l.name == n).unwrap();
        let kept = Part::KeptAcrossSteps.pool();
        let (alone, why) = combined_factors(&[get(SET_TO_NONE)]);
        assert_eq!((alone[kept], why), (0.0, None));
        // Either order: the first micro-batch's gradients stay where they were kept.
        for pair in [
            [get(SET_TO_NONE), get(HALVE_MICRO_BATCH)],
            [get(HALVE_MICRO_BATCH), get(SET_TO_NONE)],
        ] {
            let (f, why) = combined_factors(&pair);
            assert_eq!(f[kept], 1.0);
            assert!(why.unwrap().contains("free none of them"));
            assert_eq!(f[Category::Activation.index()], 0.5);
        }
        // An 8-bit state is 8-bit whatever the weights' dtype; the weights halve.
        let (f, _) = combined_factors(&[get(OPTIMIZER_8BIT), get(BF16_WEIGHTS)]);
        for p in Target::all(Category::OptimizerState).pools() {
            assert_eq!(f[p], 0.25);
        }
        assert_eq!(f[Category::Parameter.index()], 0.5);
    }

    #[test]
    fn catalogue_scales_sharding_by_the_ranks_and_weights_by_their_dtype() {
        let eight = catalogue(8, false, false);
        let opt = eight
            .iter()
            .find(|l| l.name == "optimizer_state_sharding")
            .unwrap();
        assert_eq!(opt.scales[&Target::all(Category::OptimizerState)], 0.125);
        assert!(opt.action.contains("8 data-parallel"));
        assert!(opt.when.contains(&Condition::DataParallel));
        let quant = |fp32| {
            catalogue(1, fp32, false)
                .into_iter()
                .find(|l| l.name == "weight_quantization")
                .unwrap()
                .scales[&Target::all(Category::Parameter)]
        };
        assert_eq!((quant(false), quant(true)), (0.5, 0.25));
        // Every lever's factors are in [0, 1) for the targets it names,
        // and the names are unique.
        for l in &eight {
            assert!(l.scales.values().all(|s| (0.0..1.0).contains(s)), "{l:?}");
        }
        let mut names: Vec<&str> = eight.iter().map(|l| l.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), eight.len());
    }

    #[test]
    fn checkpointing_scales_only_what_is_saved_for_backward() {
        // Halving the batch halves a KV cache that holds each sequence's
        // tokens, not a serving engine's preallocated pool.
        let kv = |pool| {
            catalogue(1, false, pool)
                .into_iter()
                .find(|l| l.name == "halve_batch")
                .unwrap()
                .scales[&Target::all(Category::KvCache)]
        };
        assert_eq!((kv(false), kv(true)), (0.5, 1.0));
        let ckpt = catalogue(1, false, false)
            .into_iter()
            .find(|l| l.name == "activation_checkpointing")
            .unwrap();
        let f = ckpt.factors();
        assert_eq!(f[Part::SavedForBackward.pool()], 0.3);
        assert_eq!(f[Category::Activation.index()], 1.0);
        assert_eq!(f[Category::AutogradDetail.index()], 1.0);
        assert!(ckpt.tradeoff.contains("one extra forward"));
        // A whole-category target covers its parts; a part target overrides it.
        let lever: Vec<Lever> = serde_json::from_str(
            r#"[{"name": "x", "scales": {"temporary": 0.5, "temporary.optimizer_step": 0.0}, "cost": "cheap", "action": "a"}]"#,
        )
        .unwrap();
        let f = lever[0].factors();
        assert_eq!(f[Category::Temporary.index()], 0.5);
        assert_eq!(f[Part::OptimizerStep.pool()], 0.0);
        assert_eq!(lever[0].categories(), [Category::Temporary]);
    }

    #[test]
    fn levers_file_round_trips_and_is_checked() {
        let text = serde_json::to_string(&catalogue(4, true, false)).unwrap();
        assert_eq!(parse_levers(&text).unwrap(), catalogue(4, true, false));
        let with_when = parse_levers(
            r#"[{"name": "x", "scales": {"activation.saved_for_backward": 0.5}, "cost": "costs accuracy", "action": "a", "when": ["training", "weights_fp32"]}]"#,
        )
        .unwrap();
        assert_eq!(
            with_when[0].when,
            [Condition::Training, Condition::WeightsFp32]
        );
        for bad in [
            r#"[{"name": "x", "scales": {"activation": 1.5}, "cost": "free", "action": "a"}]"#,
            r#"[{"name": "x", "scales": {"nonsense": 0.5}, "cost": "free", "action": "a"}]"#,
            r#"[{"name": "x", "scales": {"parameter.saved_for_backward": 0.5}, "cost": "free", "action": "a"}]"#,
            r#"[{"name": "x", "scales": {}, "cost": "free", "action": "a", "when": ["sometimes"]}]"#,
        ] {
            assert!(parse_levers(bad).is_err(), "{bad}");
        }
        for c in Condition::ALL {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
        }
    }

    /// The lever table (docs/plan.md) names every lever of the catalogue with
    /// each of its conditions.
    #[test]
    fn the_readme_lever_table_follows_the_catalogue() {
        let readme = include_str!("../../docs/plan.md");
        for spec in CATALOGUE {
            let row = readme
                .lines()
                .find(|l| {
                    l.starts_with(&format!("| {} |", spec.name))
                        || (spec.name.ends_with("_sharding") && l.contains(" sharding | ×1/N"))
                })
                .unwrap_or_else(|| panic!("docs/plan.md: no row for {}", spec.name));
            for c in spec.when {
                assert!(
                    row.contains(c.as_str()),
                    "docs/plan.md, {}: no {}",
                    spec.name,
                    c.as_str()
                );
            }
        }
    }
}
