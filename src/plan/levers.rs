//! Levers: the ways to cut memory, each scaling some categories by a factor
//! at a cost, the built-in catalogue of them ([`CATALOGUE`], [`catalogue`]),
//! the `--levers FILE` format ([`parse_levers`]), and when a lever applies
//! at an instant ([`Lever::applicability`]). The search (`super::search`)
//! picks among the levers that apply; nothing else here knows about it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::demand::scale;
use super::NCAT;
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
}

impl Cost {
    pub fn as_str(self) -> &'static str {
        match self {
            Cost::Free => "free",
            Cost::Cheap => "cheap",
            Cost::Compute => "costs compute",
            Cost::Bandwidth => "costs bandwidth",
        }
    }
}

/// A way to cut memory: the categories it scales and by what factor.
/// `--levers FILE` takes a JSON list of these:
/// `[{"name": "…", "scales": {"activation": 0.5}, "cost": "cheap", "action": "…"}]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lever {
    pub name: String,
    /// Factor in `[0, 1]` per category it shrinks.
    pub scales: BTreeMap<Category, f64>,
    pub cost: Cost,
    /// What to do, concretely.
    pub action: String,
}

impl Lever {
    /// The factor for every category (1 where the lever does not scale it),
    /// by [`Category::index`].
    pub fn factors(&self) -> [f64; NCAT] {
        let mut f = [1.0; NCAT];
        for (c, s) in &self.scales {
            f[c.index()] = *s;
        }
        f
    }

    /// The categories this lever actually shrinks (factor < 1).
    pub fn categories(&self) -> Vec<Category> {
        self.scales
            .iter()
            .filter(|(_, s)| **s < 1.0)
            .map(|(c, _)| *c)
            .collect()
    }

    /// Whether the lever applies at an instant with `bytes` by category
    /// (scaled by the levers applied so far): what it would save there, and
    /// the bytes of the categories it shrinks. A lever that saves nothing at
    /// the current peak cannot lower it, and waits for the peak to move.
    pub fn applicability(&self, bytes: &[u64; NCAT]) -> Applicability {
        let f = self.factors();
        let mut a = Applicability::default();
        for c in Category::ALL {
            if f[c.index()] < 1.0 {
                let b = bytes[c.index()];
                a.contribution += b;
                a.saving += b - scale(b, f[c.index()]);
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
    /// Bytes of the categories it scales there.
    pub contribution: u64,
}

impl Applicability {
    pub fn applies(self) -> bool {
        self.saving > 0
    }
}

/// Why a levers file was refused (one line each).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LeversError {
    #[error("bad levers file: {0}")]
    Json(serde_json::Error),
    #[error("bad levers file: a lever has an empty name")]
    EmptyName,
    #[error(
        "bad levers file: lever {lever}: factor for {category} must be in [0, 1], got {factor}"
    )]
    BadFactor {
        lever: String,
        category: Category,
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
        for (c, s) in &l.scales {
            if !s.is_finite() || !(0.0..=1.0).contains(s) {
                return Err(LeversError::BadFactor {
                    lever: l.name.clone(),
                    category: *c,
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
    /// `1 / N` for `N` data-parallel ranks (`--dp-ranks`); the lever is
    /// skipped when `N = 1`.
    PerRank,
}

/// One row of the built-in catalogue.
#[derive(Debug, Clone, Copy)]
pub struct LeverSpec {
    pub name: &'static str,
    pub scales: &'static [(Category, Factor)],
    pub cost: Cost,
    /// `{N}` is replaced by the number of data-parallel ranks.
    pub action: &'static str,
}

use Category as C;
use Factor::{PerRank, Times};

/// The built-in levers. The factors are deliberately round, documented
/// defaults, not measurements of your model; override them with `--levers`.
///
/// | lever | scales | cost | why this factor |
/// |---|---|---|---|
/// | `expandable_segments` | allocator_cache ×0.2 | free | Expandable segments grow one mapping per stream instead of many fixed `cudaMalloc` segments, which removes most fragmentation; the rest of the cache (rounding, blocks cached for reuse) stays: we keep a fifth. |
/// | `halve_micro_batch` | activation, autograd_detail, temporary, input ×0.5 | cheap | These scale linearly with the batch; gradient accumulation over twice the steps keeps the effective batch and the result. Smaller kernels cost some throughput. |
/// | `chunk_temporaries` | temporary ×0.5 | cheap | Chunking the largest workspaces (logits/loss over the vocabulary, attention scores) shrinks them by the chunk count, but not the many small ones: half, conservatively. |
/// | `kv_cache_quantization` | kv_cache ×0.5 | cheap | A bf16 cache stored in 8 bits is half the size; halving the maximum context (or paging it) gives the same. |
/// | `optimizer_8bit` | optimizer_state ×0.25 | cheap | Adam keeps two fp32 moments (8 bytes/parameter); 8-bit optimizers keep 2 bytes/parameter. |
/// | `activation_checkpointing` | activation ×0.3, autograd_detail ×0.5 | costs compute | Checkpointing every block keeps only block inputs plus one block being recomputed: typically 60–80% of activation memory goes (×0.3); engine buffers in backward shrink less (×0.5). About a third more forward compute. |
/// | `bf16_weights` | parameter ×0.5 | costs compute | fp32 weights held in bf16 are half the size (pure-bf16 training or inference; with AMP's fp32 master weights this does not apply). Its real cost is numerical, which no class names: it is ranked with the levers that cost compute so that the changes that leave the numbers alone come first. |
/// | `optimizer_state_sharding` | optimizer_state ×1/N | costs bandwidth | ZeRO-1: each of N data-parallel ranks keeps 1/N of the state. |
/// | `gradient_sharding` | gradient ×1/N | costs bandwidth | ZeRO-2: reduce-scatter leaves each rank 1/N of the gradients. |
/// | `parameter_sharding` | parameter ×1/N | costs bandwidth | ZeRO-3 / FSDP full shard: 1/N of the weights at rest (one layer is gathered at a time; ignored here). |
/// | `optimizer_cpu_offload` | optimizer_state ×0 | costs bandwidth | The state lives in host memory; the step streams it over PCIe. |
///
/// `N` defaults to 1 (`--dp-ranks`): a single-device trace says nothing about
/// how many GPUs you have, so sharding is only planned when you say.
pub const CATALOGUE: &[LeverSpec] = &[
    LeverSpec {
        name: "expandable_segments",
        scales: &[(C::AllocatorCache, Times(0.2))],
        cost: Cost::Free,
        action: "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    },
    LeverSpec {
        name: "halve_micro_batch",
        scales: &[
            (C::Activation, Times(0.5)),
            (C::AutogradDetail, Times(0.5)),
            (C::Temporary, Times(0.5)),
            (C::Input, Times(0.5)),
        ],
        cost: Cost::Cheap,
        action: "halve the micro-batch and double the gradient-accumulation steps (same effective batch)",
    },
    LeverSpec {
        name: "chunk_temporaries",
        scales: &[(C::Temporary, Times(0.5))],
        cost: Cost::Cheap,
        action: "compute the largest temporaries in chunks (chunked logits/loss, smaller attention blocks)",
    },
    LeverSpec {
        name: "kv_cache_quantization",
        scales: &[(C::KvCache, Times(0.5))],
        cost: Cost::Cheap,
        action: "store the KV cache in 8 bits, or halve the maximum context / use a paged cache",
    },
    LeverSpec {
        name: "optimizer_8bit",
        scales: &[(C::OptimizerState, Times(0.25))],
        cost: Cost::Cheap,
        action: "use an 8-bit optimizer (e.g. bitsandbytes AdamW8bit)",
    },
    LeverSpec {
        name: "activation_checkpointing",
        scales: &[(C::Activation, Times(0.3)), (C::AutogradDetail, Times(0.5))],
        cost: Cost::Compute,
        action: "checkpoint each block (torch.utils.checkpoint) so activations are recomputed in backward",
    },
    LeverSpec {
        name: "bf16_weights",
        scales: &[(C::Parameter, Times(0.5))],
        cost: Cost::Compute,
        action: "keep fp32 weights in bf16 (pure-bf16 training or inference)",
    },
    LeverSpec {
        name: "optimizer_state_sharding",
        scales: &[(C::OptimizerState, PerRank)],
        cost: Cost::Bandwidth,
        action: "shard optimizer state across the {N} data-parallel ranks (ZeRO-1 / FSDP SHARD_GRAD_OP)",
    },
    LeverSpec {
        name: "gradient_sharding",
        scales: &[(C::Gradient, PerRank)],
        cost: Cost::Bandwidth,
        action: "shard gradients across the {N} data-parallel ranks (ZeRO-2 / FSDP SHARD_GRAD_OP)",
    },
    LeverSpec {
        name: "parameter_sharding",
        scales: &[(C::Parameter, PerRank)],
        cost: Cost::Bandwidth,
        action: "shard parameters across the {N} data-parallel ranks (ZeRO-3 / FSDP FULL_SHARD)",
    },
    LeverSpec {
        name: "optimizer_cpu_offload",
        scales: &[(C::OptimizerState, Times(0.0))],
        cost: Cost::Bandwidth,
        action: "offload optimizer state to host memory (DeepSpeed offload_optimizer, FSDP CPUOffload)",
    },
];

/// The catalogue for `dp_ranks` data-parallel ranks (sharding levers are
/// left out when `dp_ranks <= 1`).
pub fn catalogue(dp_ranks: u32) -> Vec<Lever> {
    CATALOGUE
        .iter()
        .filter(|spec| dp_ranks > 1 || !spec.scales.iter().any(|(_, f)| *f == PerRank))
        .map(|spec| Lever {
            name: spec.name.to_owned(),
            scales: spec
                .scales
                .iter()
                .map(|(c, f)| {
                    let v = match f {
                        Times(x) => *x,
                        PerRank => 1.0 / dp_ranks.max(1) as f64,
                    };
                    (*c, v)
                })
                .collect(),
            cost: spec.cost,
            action: spec.action.replace("{N}", &dp_ranks.to_string()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_skips_sharding_for_one_rank() {
        let one = catalogue(1);
        assert!(one.iter().all(|l| !l.name.contains("sharding")));
        let eight = catalogue(8);
        let opt = eight
            .iter()
            .find(|l| l.name == "optimizer_state_sharding")
            .unwrap();
        assert_eq!(opt.scales[&Category::OptimizerState], 0.125);
        assert!(opt.action.contains("8 data-parallel"));
        // Every lever's factors are in [0, 1) for the categories it names.
        for l in eight {
            assert!(l.scales.values().all(|s| (0.0..1.0).contains(s)), "{l:?}");
        }
    }

    #[test]
    fn levers_file_round_trips_and_is_checked() {
        let text = serde_json::to_string(&catalogue(4)).unwrap();
        assert_eq!(parse_levers(&text).unwrap(), catalogue(4));
        assert!(parse_levers(
            r#"[{"name": "x", "scales": {"activation": 1.5}, "cost": "free", "action": "a"}]"#
        )
        .is_err());
        assert!(parse_levers(
            r#"[{"name": "x", "scales": {"nonsense": 0.5}, "cost": "free", "action": "a"}]"#
        )
        .is_err());
    }
}
