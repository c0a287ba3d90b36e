//! The cut planner (DESIGN.md §6): summarise peak sources → plan cuts → recommend.
//!
//! Two modes share the same three steps:
//!
//! - **Component lists** (the seed's own input): `[{name, peak_gb, cuttable}]`
//!   and a target in decimal GB. A cut removes a whole component:
//!   [`summarize_peak_sources`], [`plan_memory_cuts`], [`recommend`].
//! - **Traces**: a device's memory demand by category at every position of
//!   its timeline ([`Demand`]) and a catalogue of levers ([`catalogue`]), each
//!   scaling some categories by a factor. [`plan_timeline_cuts`] applies one
//!   lever at a time and re-simulates the peak over the *whole* timeline after
//!   each (the peak can move); [`plan_device`] wraps it with the budget,
//!   headroom, verdict and reason that reports render; [`attach_plans`] does
//!   this for every device of a report.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::analysis::{DeviceTimeline, Walk};
use crate::model::{Category, Trace};
use crate::schema::{DeviceReport, OomFinding, Report};
pub use crate::schema::{OomPlan, Plan, PlanStep, Verdict};
pub use crate::units::parse_size;
use crate::units::{human_bytes as h, SizeError};

const NCAT: usize = Category::ALL.len();

// ---------------------------------------------------------------------------
// Component-list mode (the seed)
// ---------------------------------------------------------------------------

/// One entry of a component list: `{"name": "weights", "peak_gb": 10.0, "cuttable": false}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Component {
    pub name: String,
    /// Decimal GB (10^9 bytes), used exactly as given.
    pub peak_gb: f64,
    pub cuttable: bool,
}

/// The largest contributor (ties: the first listed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeakSummary {
    /// Empty for an empty list.
    pub largest_source: String,
    pub largest_peak_gb: f64,
    /// Sum of all components: the peak before any cut.
    pub total_peak_gb: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutStep {
    pub name: String,
    pub saved_gb: f64,
    pub peak_after_gb: f64,
}

/// Cuts in order, with the estimated peak after each and at the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CutPlan {
    pub target_gb: f64,
    pub peak_before_gb: f64,
    pub cut_order: Vec<String>,
    pub steps: Vec<CutStep>,
    pub estimated_peak_gb: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recommendation {
    pub verdict: Verdict,
    /// How far over the target the plan still is (0 unless `does_not_fit`).
    pub gap_gb: f64,
    pub reason: String,
}

/// Rounds decimal GB to whole bytes, so that float noise (`21.0 − 8.0`,
/// `0.1 + 0.2`) never shows: the result is the double nearest to a whole
/// number of bytes, and prints as such.
pub fn round_gb(x: f64) -> f64 {
    let r = (x * 1e9).round() / 1e9;
    if r == 0.0 {
        0.0 // no "-0.0"
    } else {
        r
    }
}

/// Parses and checks a component list (JSON). The error is one line.
pub fn parse_components(text: &str) -> Result<Vec<Component>, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("bad JSON: {e}"))?;
    let items = value
        .as_array()
        .ok_or("expected a JSON list of {\"name\", \"peak_gb\", \"cuttable\"} objects")?;
    if items.is_empty() {
        return Err("empty component list".into());
    }
    let mut out = Vec::with_capacity(items.len());
    for (k, item) in items.iter().enumerate() {
        let c: Component = serde_json::from_value(item.clone())
            .map_err(|e| format!("component {}: {e}", k + 1))?;
        if !c.peak_gb.is_finite() || c.peak_gb < 0.0 {
            return Err(format!(
                "component {} ({}): peak_gb must be a size >= 0, got {}",
                k + 1,
                c.name,
                c.peak_gb
            ));
        }
        out.push(c);
    }
    Ok(out)
}

/// The largest source at the peak (the seed's `summarize_peak_sources`).
pub fn summarize_peak_sources(components: &[Component]) -> PeakSummary {
    let mut largest: Option<&Component> = None;
    for c in components {
        if largest.is_none_or(|l| c.peak_gb > l.peak_gb) {
            largest = Some(c);
        }
    }
    PeakSummary {
        largest_source: largest.map(|c| c.name.clone()).unwrap_or_default(),
        largest_peak_gb: largest.map_or(0.0, |c| round_gb(c.peak_gb)),
        total_peak_gb: round_gb(components.iter().map(|c| c.peak_gb).sum()),
    }
}

/// The seed's `plan_memory_cuts`: cuttable components by `peak_gb`
/// descending (ties: file order); the running total starts at the sum of all
/// components; a component is cut only while the total is still above the
/// target.
pub fn plan_memory_cuts(components: &[Component], target_gb: f64) -> CutPlan {
    let mut total = round_gb(components.iter().map(|c| c.peak_gb).sum());
    let peak_before_gb = total;
    let mut candidates: Vec<&Component> = components.iter().filter(|c| c.cuttable).collect();
    candidates.sort_by(|a, b| b.peak_gb.total_cmp(&a.peak_gb));
    let mut steps = Vec::new();
    for c in candidates {
        if total <= target_gb {
            break;
        }
        total = round_gb(total - c.peak_gb);
        steps.push(CutStep {
            name: c.name.clone(),
            saved_gb: round_gb(c.peak_gb),
            peak_after_gb: total,
        });
    }
    CutPlan {
        target_gb,
        peak_before_gb,
        cut_order: steps.iter().map(|s| s.name.clone()).collect(),
        steps,
        estimated_peak_gb: total,
    }
}

/// The seed's `recommend_memory_followup`: verdict, remaining gap, one line.
pub fn recommend(summary: &PeakSummary, plan: &CutPlan) -> Recommendation {
    let g = fmt_gb;
    let target = plan.target_gb;
    if plan.peak_before_gb <= target {
        return Recommendation {
            verdict: Verdict::Fits,
            gap_gb: 0.0,
            reason: format!(
                "peak {} GB is within the {} GB target; nothing to cut",
                g(plan.peak_before_gb),
                g(target)
            ),
        };
    }
    if plan.estimated_peak_gb <= target {
        return Recommendation {
            verdict: Verdict::FitsAfterCuts,
            gap_gb: 0.0,
            reason: format!(
                "cutting {} brings the peak from {} GB to {} GB, within the {} GB target",
                plan.cut_order.join(", "),
                g(plan.peak_before_gb),
                g(plan.estimated_peak_gb),
                g(target)
            ),
        };
    }
    let gap = round_gb(plan.estimated_peak_gb - target);
    let cut = if plan.cut_order.is_empty() {
        "nothing is cuttable".to_owned()
    } else {
        format!("even after cutting {}", plan.cut_order.join(", "))
    };
    Recommendation {
        verdict: Verdict::DoesNotFit,
        gap_gb: gap,
        reason: format!(
            "{cut}: the peak is {} GB, {} GB over the {} GB target (largest source: {}, {} GB)",
            g(plan.estimated_peak_gb),
            g(gap),
            g(target),
            summary.largest_source,
            g(summary.largest_peak_gb)
        ),
    }
}

/// Decimal GB for people: `13.0`, `13.25`, never `13` or `12.999999999`.
pub fn fmt_gb(x: f64) -> String {
    let x = round_gb(x);
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

/// Everything `memcut plan` prints (the JSON form is this struct).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComponentReport {
    pub largest_source: String,
    pub largest_peak_gb: f64,
    pub peak_gb: f64,
    pub target_gb: f64,
    pub cut_order: Vec<String>,
    pub steps: Vec<CutStep>,
    pub estimated_peak_gb: f64,
    pub verdict: Verdict,
    pub gap_gb: f64,
    pub reason: String,
}

impl ComponentReport {
    /// Runs the three steps on a component list.
    pub fn new(components: &[Component], target_gb: f64) -> ComponentReport {
        let summary = summarize_peak_sources(components);
        let plan = plan_memory_cuts(components, target_gb);
        let rec = recommend(&summary, &plan);
        ComponentReport {
            largest_source: summary.largest_source,
            largest_peak_gb: summary.largest_peak_gb,
            peak_gb: plan.peak_before_gb,
            target_gb,
            cut_order: plan.cut_order,
            steps: plan.steps,
            estimated_peak_gb: plan.estimated_peak_gb,
            verdict: rec.verdict,
            gap_gb: rec.gap_gb,
            reason: rec.reason,
        }
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("always serialises");
        s.push('\n');
        s
    }

    pub fn to_text(&self) -> String {
        let g = fmt_gb;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "largest source: {} ({} GB of {} GB)",
            self.largest_source,
            g(self.largest_peak_gb),
            g(self.peak_gb)
        );
        let _ = writeln!(out, "target: {} GB", g(self.target_gb));
        for (i, s) in self.steps.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {}. cut {} (saves {} GB) -> peak {} GB",
                i + 1,
                s.name,
                g(s.saved_gb),
                g(s.peak_after_gb)
            );
        }
        let _ = writeln!(
            out,
            "estimated peak: {} GB\nverdict: {} - {}",
            g(self.estimated_peak_gb),
            self.verdict.as_str(),
            self.reason
        );
        out
    }

    pub fn to_markdown(&self) -> String {
        let g = fmt_gb;
        let mut out = String::new();
        let _ = writeln!(out, "# memcut plan\n");
        let _ = writeln!(
            out,
            "Largest source: **{}** ({} GB of {} GB). Target: {} GB.\n",
            self.largest_source,
            g(self.largest_peak_gb),
            g(self.peak_gb),
            g(self.target_gb)
        );
        if !self.steps.is_empty() {
            let _ = writeln!(
                out,
                "| # | Cut | Saves (GB) | Peak after (GB) |\n|---:|---|---:|---:|"
            );
            for (i, s) in self.steps.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} |",
                    i + 1,
                    s.name.replace('|', "\\|"),
                    g(s.saved_gb),
                    g(s.peak_after_gb)
                );
            }
            let _ = writeln!(out);
        }
        let _ = writeln!(
            out,
            "Estimated peak: {} GB.\n\n**Verdict: {}** — {}",
            g(self.estimated_peak_gb),
            self.verdict.as_str(),
            self.reason
        );
        out
    }
}

// ---------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------

/// Room kept free below the budget: a size or a percentage of the budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Headroom {
    Bytes(u64),
    Percent(f64),
}

impl Default for Headroom {
    /// 10% of the budget: the CUDA context, NCCL buffers, cuBLAS workspaces
    /// and other memory the trace does not see usually take a few percent;
    /// 10% leaves room for run-to-run variation as well.
    fn default() -> Headroom {
        Headroom::Percent(10.0)
    }
}

impl Headroom {
    /// Parses `10%` or a size (see [`parse_size`]).
    pub fn parse(s: &str) -> Result<Headroom, SizeError> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let p: f64 = p
                .trim()
                .parse()
                .map_err(|_| SizeError::BadPercentage(s.to_owned()))?;
            if !(0.0..100.0).contains(&p) {
                return Err(SizeError::PercentageOutOfRange(s.to_owned()));
            }
            return Ok(Headroom::Percent(p));
        }
        parse_size(t).map(Headroom::Bytes)
    }

    /// Bytes of headroom for a budget (never more than the budget).
    pub fn bytes(self, budget: u64) -> u64 {
        match self {
            Headroom::Bytes(b) => b.min(budget),
            Headroom::Percent(p) => ((budget as f64 * p / 100.0).round() as u64).min(budget),
        }
    }
}

// ---------------------------------------------------------------------------
// Levers
// ---------------------------------------------------------------------------

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
    fn factors(&self) -> [f64; NCAT] {
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
}

/// Parses and checks a levers file (JSON list of [`Lever`]).
pub fn parse_levers(text: &str) -> Result<Vec<Lever>, String> {
    let levers: Vec<Lever> =
        serde_json::from_str(text).map_err(|e| format!("bad levers file: {e}"))?;
    for l in &levers {
        if l.name.trim().is_empty() {
            return Err("bad levers file: a lever has an empty name".into());
        }
        for (c, s) in &l.scales {
            if !s.is_finite() || !(0.0..=1.0).contains(s) {
                return Err(format!(
                    "bad levers file: lever {}: factor for {c} must be in [0, 1], got {s}",
                    l.name
                ));
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

// ---------------------------------------------------------------------------
// Demand: bytes by category at every position
// ---------------------------------------------------------------------------

/// A device's memory demand at every position of its timeline, by category:
/// allocated bytes by category (what the replay cannot attribute is
/// `unknown`) plus `allocator_cache` = reserved − allocated where reserved is
/// known.
///
/// A 1M-event trace has 1M positions, and the planner asks for the peak
/// under new factors after every lever, so the rows are not stored: the
/// positions are cut into blocks of [`BLOCK`], each keeping the state of the
/// replay at its start and the componentwise maximum of its rows. A peak
/// search replays only the blocks whose maximum, scaled, can still reach the
/// best total found so far.
#[derive(Clone)]
pub struct Demand<'a> {
    cats: Vec<Category>,
    positions: usize,
    rows: Rows<'a>,
    block_max: Vec<BlockMax>,
}

/// What bounds a block's rows: their componentwise maximum, and the largest
/// row total and tensor (non-cache) total.
#[derive(Debug, Clone, Copy, Default)]
struct BlockMax {
    per_category: [u64; NCAT],
    total: u64,
    tensors: u64,
}

impl BlockMax {
    fn add(&mut self, row: &[u64; NCAT]) {
        for (m, v) in self.per_category.iter_mut().zip(row) {
            *m = (*m).max(*v);
        }
        let total: u64 = row.iter().sum();
        self.total = self.total.max(total);
        self.tensors = self
            .tensors
            .max(total - row[Category::AllocatorCache.index()]);
    }
}

/// Positions per block of a [`Demand`].
const BLOCK: usize = 128;

#[derive(Clone)]
enum Rows<'a> {
    /// Every row (small demands: an OOM instant, tests).
    Table(Vec<[u64; NCAT]>),
    /// Rows replayed from the timeline's category deltas, from the walk
    /// state saved at each block's start.
    Timeline {
        tl: &'a DeviceTimeline,
        starts: Vec<Walk>,
    },
}

impl<'a> Demand<'a> {
    /// Builds the demand from a replayed, classified device: one walk over
    /// its positions, O(positions + allocations), O(positions / [`BLOCK`])
    /// memory.
    pub fn from_timeline(tl: &'a DeviceTimeline) -> Demand<'a> {
        let positions = tl.replay.positions() as usize;
        let mut starts = Vec::with_capacity(positions.div_ceil(BLOCK));
        let mut block_max = Vec::with_capacity(positions.div_ceil(BLOCK));
        let mut walk = Walk::default();
        for start in (0..positions).step_by(BLOCK) {
            starts.push(walk.clone());
            let mut max = BlockMax::default();
            walk_rows(
                &mut walk,
                tl,
                start..(start + BLOCK).min(positions),
                |_, row| max.add(row),
            );
            block_max.push(max);
        }
        Demand::new(positions, Rows::Timeline { tl, starts }, block_max)
    }

    /// Builds a demand from per-category series of equal length (repeated
    /// categories add up).
    pub fn from_series(series: &[(Category, Vec<u64>)]) -> Demand<'static> {
        let positions = series.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
        let mut rows = vec![[0u64; NCAT]; positions];
        for (c, v) in series {
            for (row, x) in rows.iter_mut().zip(v) {
                row[c.index()] += x;
            }
        }
        let block_max = rows
            .chunks(BLOCK)
            .map(|block| {
                let mut max = BlockMax::default();
                block.iter().for_each(|row| max.add(row));
                max
            })
            .collect();
        Demand::new(positions, Rows::Table(rows), block_max)
    }

    fn new(positions: usize, rows: Rows<'a>, block_max: Vec<BlockMax>) -> Demand<'a> {
        let cats = Category::ALL
            .into_iter()
            .filter(|c| block_max.iter().any(|m| m.per_category[c.index()] > 0))
            .collect();
        Demand {
            cats,
            positions,
            rows,
            block_max,
        }
    }

    pub fn positions(&self) -> usize {
        self.positions
    }

    /// Bytes by category at a position, each category scaled by its factor
    /// (rounded to whole bytes).
    pub fn scaled_at(&self, position: usize, factors: &[f64; NCAT]) -> [u64; NCAT] {
        let mut out = [0u64; NCAT];
        if position < self.positions {
            self.visit_block(position / BLOCK, |p, row| {
                if p == position {
                    for c in &self.cats {
                        out[c.index()] = scale(row[c.index()], factors[c.index()]);
                    }
                }
            });
        }
        out
    }

    /// The peak of the scaled total over the whole timeline and its position.
    /// Ties go to the position with the most allocated (non-cache) bytes,
    /// then the earliest: reserved memory often plateaus at its maximum, and
    /// the instant that matters is where the tensors peak.
    ///
    /// Blocks are searched by their scaled maximum, largest first, until no
    /// block left can reach the best total (`scale` is monotone, so a block's
    /// scaled maximum bounds every scaled row in it).
    pub fn peak(&self, factors: &[f64; NCAT]) -> (u64, usize) {
        let cats: Vec<usize> = self.cats.iter().map(|c| c.index()).collect();
        let cache = Category::AllocatorCache.index();
        let total =
            |row: &[u64; NCAT]| -> u64 { cats.iter().map(|&c| scale(row[c], factors[c])).sum() };
        // Per block: bounds on its scaled total and on its tensor bytes.
        // Factors of at most 1 never grow a row (`scale` rounds to the
        // nearest byte), so its unscaled totals bound it too.
        let shrink_only = factors.iter().all(|f| *f <= 1.0);
        let bound: Vec<(u64, u64)> = self
            .block_max
            .iter()
            .map(|max| {
                let t = total(&max.per_category);
                let n = t - scale(max.per_category[cache], factors[cache]);
                match shrink_only {
                    true => (t.min(max.total), n.min(max.tensors)),
                    false => (t, n),
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..bound.len()).collect();
        order.sort_unstable_by_key(|&b| (std::cmp::Reverse(bound[b]), b));
        // Best (total, tensors, position): the largest total, then tensors,
        // then the earliest position.
        let mut best: Option<(u64, u64, usize)> = None;
        for b in order {
            let (bound_total, bound_tensors) = bound[b];
            if let Some((t, n, _)) = best {
                if bound_total < t {
                    break;
                }
                // Reserved memory plateaus, so with the cache counted many
                // blocks tie on the total: only those that may hold more
                // tensor bytes (or as many, earlier) can win.
                if bound_total == t && bound_tensors < n {
                    continue;
                }
            }
            self.visit_block(b, |p, row| {
                let t = total(row);
                let tensors = t - scale(row[cache], factors[cache]);
                let better = best.is_none_or(|(bt, bn, bp)| {
                    (t, tensors, std::cmp::Reverse(p)) > (bt, bn, std::cmp::Reverse(bp))
                });
                if better {
                    best = Some((t, tensors, p));
                }
            });
        }
        best.map_or((0, 0), |(t, _, p)| (t, p))
    }

    /// Calls `visit(position, row)` for each position of block `b`, in order.
    fn visit_block(&self, b: usize, mut visit: impl FnMut(usize, &[u64; NCAT])) {
        let range = b * BLOCK..((b + 1) * BLOCK).min(self.positions);
        match &self.rows {
            Rows::Table(rows) => {
                for p in range {
                    visit(p, &rows[p]);
                }
            }
            Rows::Timeline { tl, starts } => walk_rows(&mut starts[b].clone(), tl, range, visit),
        }
    }
}

/// Walks `range` (which must start where `walk` stands), calling
/// `visit(position, row)`: the categories' bytes (clamped at 0), plus
/// `unknown` for allocated bytes the categories do not cover, plus
/// `allocator_cache` = reserved − allocated.
fn walk_rows(
    walk: &mut Walk,
    tl: &DeviceTimeline,
    range: std::ops::Range<usize>,
    mut visit: impl FnMut(usize, &[u64; NCAT]),
) {
    let reserved = tl.replay.reserved.as_deref();
    for p in range {
        walk.advance(tl, p);
        let mut row = [0u64; NCAT];
        for (r, c) in row.iter_mut().zip(&walk.current) {
            *r = (*c).max(0) as u64;
        }
        let tracked: u64 = row.iter().sum();
        let allocated = tl.replay.allocated.get(p).copied().unwrap_or(tracked);
        row[Category::Unknown.index()] += allocated.saturating_sub(tracked);
        if let Some(r) = reserved.and_then(|r| r.get(p)) {
            row[Category::AllocatorCache.index()] += r.saturating_sub(allocated);
        }
        visit(p, &row);
    }
}

/// `bytes × factor`, rounded to whole bytes (exact for factor 1).
pub fn scale(bytes: u64, factor: f64) -> u64 {
    if factor == 1.0 {
        bytes
    } else {
        (bytes as f64 * factor).round() as u64
    }
}

// ---------------------------------------------------------------------------
// Planning over a timeline
// ---------------------------------------------------------------------------

/// In what order levers are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Order {
    /// Cheapest cost class first, then the largest saving at the current peak.
    #[default]
    Cheapest,
    /// The largest cuttable contribution at the current peak first (the
    /// seed's method), whatever it costs.
    Largest,
}

/// One lever applied by [`plan_timeline_cuts`].
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineStep {
    /// Index into the levers given.
    pub lever: usize,
    /// Old peak − new peak.
    pub saved_bytes: u64,
    pub peak_after_bytes: u64,
    /// Position of the new peak.
    pub position: usize,
    /// Cumulative factors after this step, by [`Category::index`].
    pub factors: [f64; NCAT],
}

/// The result of [`plan_timeline_cuts`].
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineCuts {
    pub peak_before_bytes: u64,
    pub peak_before_position: usize,
    pub steps: Vec<TimelineStep>,
    pub estimated_peak_bytes: u64,
    pub final_position: usize,
    pub final_factors: [f64; NCAT],
}

/// Applies levers one at a time until the peak is at most `target`.
///
/// Each round looks at the bytes by category at the *current* peak, picks the
/// next lever by `order` among those that shrink something there (a lever
/// whose categories are absent at the peak cannot lower it and waits for a
/// later round), multiplies its factors into the running ones, and
/// re-simulates the peak over the whole timeline. Each lever is applied at
/// most once. Cost: O(positions × categories × levers applied).
pub fn plan_timeline_cuts(
    demand: &Demand,
    levers: &[Lever],
    target: u64,
    order: Order,
) -> TimelineCuts {
    let mut factors = [1.0f64; NCAT];
    let (peak_before, pos_before) = demand.peak(&factors);
    let (mut peak, mut pos) = (peak_before, pos_before);
    let mut used = vec![false; levers.len()];
    let mut steps = Vec::new();
    while peak > target {
        let here = demand.scaled_at(pos, &factors);
        let mut best: Option<(usize, u64, u64)> = None; // (lever, saving, contribution)
        for (i, lever) in levers.iter().enumerate() {
            if used[i] {
                continue;
            }
            let f = lever.factors();
            let (mut saving, mut contribution) = (0u64, 0u64);
            for c in Category::ALL {
                if f[c.index()] < 1.0 {
                    let b = here[c.index()];
                    contribution += b;
                    saving += b - scale(b, f[c.index()]);
                }
            }
            if saving == 0 {
                continue;
            }
            let better = match best {
                None => true,
                Some((j, s, k)) => match order {
                    Order::Cheapest => {
                        (lever.cost, std::cmp::Reverse(saving), i)
                            < (levers[j].cost, std::cmp::Reverse(s), j)
                    }
                    Order::Largest => {
                        (
                            std::cmp::Reverse(contribution),
                            std::cmp::Reverse(saving),
                            i,
                        ) < (std::cmp::Reverse(k), std::cmp::Reverse(s), j)
                    }
                },
            };
            if better {
                best = Some((i, saving, contribution));
            }
        }
        let Some((i, _, _)) = best else { break };
        used[i] = true;
        for (acc, f) in factors.iter_mut().zip(levers[i].factors()) {
            *acc *= f;
        }
        let (new_peak, new_pos) = demand.peak(&factors);
        steps.push(TimelineStep {
            lever: i,
            saved_bytes: peak.saturating_sub(new_peak),
            peak_after_bytes: new_peak,
            position: new_pos,
            factors,
        });
        (peak, pos) = (new_peak, new_pos);
    }
    TimelineCuts {
        peak_before_bytes: peak_before,
        peak_before_position: pos_before,
        steps,
        estimated_peak_bytes: peak,
        final_position: pos,
        final_factors: factors,
    }
}

/// Where a budget comes from and how large it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub bytes: u64,
    pub source: String,
}

/// Knobs of the planner that come from the command line.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// `--budget`; else the device's capacity; else free + reserved at an OOM.
    pub budget: Option<u64>,
    pub headroom: Headroom,
    /// Data-parallel ranks for the sharding levers (`--dp-ranks`); 0 or 1: none.
    pub dp_ranks: u32,
    /// `--levers FILE`: replaces the catalogue.
    pub levers: Option<Vec<Lever>>,
    pub order: Order,
}

impl PlanOptions {
    pub fn levers(&self) -> Vec<Lever> {
        self.levers
            .clone()
            .unwrap_or_else(|| catalogue(self.dp_ranks))
    }
}

/// The budget for a device: `--budget`, else its capacity, else (for a device
/// with an OOM) what `cudaMemGetInfo` said was free plus what PyTorch had
/// reserved when the first allocation failed; else none.
pub fn budget_for(device: &DeviceReport, options: &PlanOptions) -> Option<Budget> {
    if let Some(b) = options.budget {
        return Some(Budget {
            bytes: b,
            source: "--budget".into(),
        });
    }
    if let Some(c) = device.capacity_bytes {
        return Some(Budget {
            bytes: c,
            source: "device memory (deviceProperties)".into(),
        });
    }
    device.ooms.iter().find_map(|o| {
        let free = o.device_free_bytes?;
        let held = o.reserved_bytes.unwrap_or(o.allocated_bytes);
        Some(Budget {
            bytes: free + held,
            source: format!(
                "OOM at event {}: {} free + {} reserved",
                o.event_index,
                h(free),
                h(held)
            ),
        })
    })
}

/// Plans one device: runs [`plan_timeline_cuts`] against budget − headroom
/// and writes the verdict and reason. `describe` names a position
/// (`event N (phase)`).
pub fn plan_device(
    demand: &Demand,
    budget: &Budget,
    options: &PlanOptions,
    describe: &dyn Fn(usize) -> String,
) -> Plan {
    let levers = options.levers();
    let headroom = options.headroom.bytes(budget.bytes);
    let target = budget.bytes - headroom;
    let cuts = plan_timeline_cuts(demand, &levers, target, options.order);
    let steps = plan_steps(&cuts, &levers, describe);
    let (verdict, gap, reason) =
        verdict_and_reason(demand, &cuts, &levers, &steps, target, options);
    Plan {
        budget_bytes: budget.bytes,
        headroom_bytes: headroom,
        target_bytes: target,
        peak_before_bytes: cuts.peak_before_bytes,
        steps,
        estimated_peak_bytes: cuts.estimated_peak_bytes,
        verdict,
        reason,
        budget_source: budget.source.clone(),
        peak_before_at: describe(cuts.peak_before_position),
        gap_bytes: gap,
        oom_plan: None,
    }
}

/// Plans the failed instant of an OOM against `target`.
pub fn plan_oom(oom: &OomFinding, target: u64, options: &PlanOptions) -> OomPlan {
    let mut series: Vec<(Category, Vec<u64>)> = oom
        .by_category
        .iter()
        .filter(|(c, _)| **c != Category::AllocatorCache)
        .map(|(c, b)| (*c, vec![*b]))
        .collect();
    series.push((Category::Unknown, vec![oom.requested_bytes]));
    let demand = Demand::from_series(&series);
    let levers = options.levers();
    let cuts = plan_timeline_cuts(&demand, &levers, target, options.order);
    let at = format!("OOM at event {}", oom.event_index);
    let steps = plan_steps(&cuts, &levers, &|_| at.clone());
    let (verdict, gap, mut reason) =
        verdict_and_reason(&demand, &cuts, &levers, &steps, target, options);
    if verdict == Verdict::Fits {
        reason = format!(
            "allocated + the {} request ({}) is within the target: the allocator failed to place it, not the total; see the OOM finding",
            h(oom.requested_bytes),
            h(cuts.peak_before_bytes)
        );
    }
    OomPlan {
        event_index: oom.event_index,
        requested_bytes: oom.requested_bytes,
        demand_bytes: cuts.peak_before_bytes,
        steps,
        estimated_peak_bytes: cuts.estimated_peak_bytes,
        verdict,
        gap_bytes: gap,
        reason,
    }
}

fn plan_steps(
    cuts: &TimelineCuts,
    levers: &[Lever],
    describe: &dyn Fn(usize) -> String,
) -> Vec<PlanStep> {
    let mut previous = cuts.peak_before_position;
    cuts.steps
        .iter()
        .map(|s| {
            let lever = &levers[s.lever];
            let step = PlanStep {
                lever: lever.name.clone(),
                action: lever.action.clone(),
                cost: lever.cost.as_str().to_owned(),
                categories: lever.categories(),
                saved_bytes: s.saved_bytes,
                peak_after_bytes: s.peak_after_bytes,
                peak_moved_to: describe(s.position),
                scales: lever.scales.clone(),
                peak_event_index: s.position.saturating_sub(1) as u64,
                peak_moved: s.position != previous,
            };
            previous = s.position;
            step
        })
        .collect()
}

fn verdict_and_reason(
    demand: &Demand,
    cuts: &TimelineCuts,
    levers: &[Lever],
    steps: &[PlanStep],
    target: u64,
    options: &PlanOptions,
) -> (Verdict, u64, String) {
    let names: Vec<&str> = steps.iter().map(|s| s.lever.as_str()).collect();
    if cuts.peak_before_bytes <= target {
        return (
            Verdict::Fits,
            0,
            format!(
                "peak demand {} (allocated + allocator cache) is within the target {}; no cut needed",
                h(cuts.peak_before_bytes),
                h(target)
            ),
        );
    }
    if cuts.estimated_peak_bytes <= target {
        return (
            Verdict::FitsAfterCuts,
            0,
            format!(
                "{} bring{} the peak from {} to {}, within the target {}",
                names.join(" + "),
                if names.len() == 1 { "s" } else { "" },
                h(cuts.peak_before_bytes),
                h(cuts.estimated_peak_bytes),
                h(target)
            ),
        );
    }
    let gap = cuts.estimated_peak_bytes - target;
    // What is left at the final peak, and whether anything could still cut it.
    let left = demand.scaled_at(cuts.final_position, &cuts.final_factors);
    let (largest, bytes) = Category::ALL
        .into_iter()
        .map(|c| (c, left[c.index()]))
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .unwrap_or((Category::Unknown, 0));
    let after = if names.is_empty() {
        "no lever applies".to_owned()
    } else {
        format!("after {}", names.join(" + "))
    };
    let sharding_unused = options.levers.is_none()
        && options.dp_ranks <= 1
        && matches!(
            largest,
            Category::Parameter | Category::Gradient | Category::OptimizerState
        );
    let hint = if sharding_unused {
        "; with more GPUs, pass --dp-ranks N to plan sharding".to_owned()
    } else if !levers.iter().any(|l| l.categories().contains(&largest)) {
        "; no lever shrinks it".to_owned()
    } else {
        String::new()
    };
    (
        Verdict::DoesNotFit,
        gap,
        format!(
            "{after} the peak is still {}, {} over the target {}; the largest part left is {} ({}){hint}",
            h(cuts.estimated_peak_bytes),
            h(gap),
            h(target),
            largest,
            h(bytes)
        ),
    )
}

/// Attaches a plan to every device of `report` whose budget is known
/// (`timelines` in the same order as `report.devices`, as
/// [`crate::analysis::analyze`] returns them).
pub fn attach_plans(
    trace: &Trace,
    report: &mut Report,
    timelines: &[DeviceTimeline],
    options: &PlanOptions,
) {
    let demands: Vec<Demand> = timelines.iter().map(Demand::from_timeline).collect();
    attach_plans_with(trace, report, &demands, options);
}

/// [`attach_plans`] with each timeline's [`Demand`] made already (in the
/// order of `report.devices`), e.g. while the report was being made.
pub fn attach_plans_with(
    trace: &Trace,
    report: &mut Report,
    demands: &[Demand],
    options: &PlanOptions,
) {
    for (d, demand) in report.devices.iter_mut().zip(demands) {
        let Some(budget) = budget_for(d, options) else {
            continue;
        };
        let Some(device) = trace.devices.iter().find(|t| t.device == d.device) else {
            continue;
        };
        let describe = |p: usize| match p {
            0 => "start of recording".to_owned(),
            _ => format!(
                "event {} ({})",
                p - 1,
                crate::analysis::phase_at(trace, device, p as u32)
            ),
        };
        let mut plan = plan_device(demand, &budget, options, &describe);
        if let Some(oom) = d.ooms.first() {
            plan.oom_plan = Some(plan_oom(oom, plan.target_bytes, options));
        }
        d.plan = Some(plan);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> Vec<Component> {
        parse_components(
            r#"[{"name": "weights", "peak_gb": 10.0, "cuttable": false},
                {"name": "activations", "peak_gb": 8.0, "cuttable": true},
                {"name": "temporary_buffers", "peak_gb": 3.0, "cuttable": true}]"#,
        )
        .unwrap()
    }

    #[test]
    fn seed_worked_example() {
        let components = seed();
        let summary = summarize_peak_sources(&components);
        assert_eq!(summary.largest_source, "weights");
        assert_eq!(summary.largest_peak_gb, 10.0);
        let plan = plan_memory_cuts(&components, 15.0);
        assert_eq!(plan.cut_order, vec!["activations".to_owned()]);
        assert_eq!(plan.estimated_peak_gb, 13.0);
        assert_eq!(plan.peak_before_gb, 21.0);
        let rec = recommend(&summary, &plan);
        assert_eq!(rec.verdict, Verdict::FitsAfterCuts);
        assert_eq!(rec.gap_gb, 0.0);
        let json = ComponentReport::new(&components, 15.0).to_json();
        assert!(json.contains("\"estimated_peak_gb\": 13.0"), "{json}");
        assert!(json.contains("\"verdict\": \"fits_after_cuts\""), "{json}");
    }

    #[test]
    fn components_fit_and_do_not_fit() {
        let components = seed();
        let summary = summarize_peak_sources(&components);
        let fits = plan_memory_cuts(&components, 21.0);
        assert!(fits.cut_order.is_empty());
        assert_eq!(recommend(&summary, &fits).verdict, Verdict::Fits);
        let both = plan_memory_cuts(&components, 10.5);
        assert_eq!(both.cut_order, vec!["activations", "temporary_buffers"]);
        assert_eq!(both.estimated_peak_gb, 10.0);
        let nope = plan_memory_cuts(&components, 9.0);
        let rec = recommend(&summary, &nope);
        assert_eq!(rec.verdict, Verdict::DoesNotFit);
        assert_eq!(rec.gap_gb, 1.0);
        assert!(rec.reason.contains("1.0 GB over"), "{}", rec.reason);
    }

    #[test]
    fn float_noise_never_shows() {
        let components = vec![
            Component {
                name: "a".into(),
                peak_gb: 0.1,
                cuttable: false,
            },
            Component {
                name: "b".into(),
                peak_gb: 0.2,
                cuttable: true,
            },
            Component {
                name: "c".into(),
                peak_gb: 0.7,
                cuttable: true,
            },
        ];
        let plan = plan_memory_cuts(&components, 0.35);
        assert_eq!(plan.peak_before_gb, 1.0);
        assert_eq!(plan.steps[0].peak_after_gb, 0.3);
        assert_eq!(fmt_gb(plan.estimated_peak_gb), "0.3");
        assert_eq!(fmt_gb(21.0 - 8.0), "13.0");
    }

    #[test]
    fn component_errors_are_one_line() {
        for bad in [
            "{}",
            "[]",
            "not json",
            r#"[{"name": "w", "cuttable": true}]"#,
            r#"[{"name": "w", "peak_gb": -1.0, "cuttable": true}]"#,
            r#"[{"name": "w", "peak_gb": "3", "cuttable": true}]"#,
        ] {
            let e = parse_components(bad).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
        }
        let e = parse_components(r#"[{"name": "w", "cuttable": true}]"#).unwrap_err();
        assert!(e.contains("peak_gb"), "{e}");
    }

    #[test]
    fn headroom() {
        assert_eq!(Headroom::parse("10%"), Ok(Headroom::Percent(10.0)));
        assert_eq!(Headroom::parse("2GiB"), Ok(Headroom::Bytes(2 << 30)));
        assert!(Headroom::parse("100%").is_err());
        assert_eq!(Headroom::Percent(10.0).bytes(1000), 100);
        assert_eq!(Headroom::Bytes(5000).bytes(1000), 1000);
    }

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

    fn lever(name: &str, cost: Cost, scales: &[(Category, f64)]) -> Lever {
        Lever {
            name: name.into(),
            scales: scales.iter().copied().collect(),
            cost,
            action: format!("do {name}"),
        }
    }

    /// The block search finds what a scan of every row finds: the largest
    /// scaled total, then the most tensor bytes, then the earliest position
    /// (sparse small values over several blocks, so blocks differ and ties
    /// are common).
    #[test]
    fn block_search_equals_a_full_scan() {
        use proptest::prelude::*;
        let cases = (1usize..3 * BLOCK + 7).prop_flat_map(|n| {
            (
                proptest::collection::vec(
                    proptest::collection::vec(prop_oneof![12 => Just(0u64), 1 => 1u64..4], n),
                    3,
                ),
                proptest::collection::vec(
                    prop_oneof![Just(0.0), Just(0.25), Just(1.0), Just(1.5)],
                    3,
                ),
            )
        });
        let cats = [
            Category::Activation,
            Category::Parameter,
            Category::AllocatorCache,
        ];
        proptest!(ProptestConfig::with_cases(4000), |((series, f) in cases)| {
            let series: Vec<(Category, Vec<u64>)> = cats.iter().copied().zip(series).collect();
            let demand = Demand::from_series(&series);
            let mut factors = [1.0; NCAT];
            for (c, x) in cats.iter().zip(&f) {
                factors[c.index()] = *x;
            }
            let mut want = (0u64, 0u64, 0usize);
            for p in 0..demand.positions() {
                let row = demand.scaled_at(p, &factors);
                let total: u64 = row.iter().sum();
                let tensors = total - row[Category::AllocatorCache.index()];
                if (total, tensors) > (want.0, want.1) {
                    want = (total, tensors, p);
                }
                for (c, v) in &series {
                    prop_assert_eq!(row[c.index()], scale(v[p], factors[c.index()]));
                }
            }
            prop_assert_eq!(demand.peak(&factors), (want.0, want.2));
        });
    }

    #[test]
    fn peak_moves_from_activations_to_the_optimizer_step() {
        // Positions: forward peak (params + activations), then optimizer step
        // (params + grads + optimizer state).
        let demand = Demand::from_series(&[
            (Category::Parameter, vec![4, 4, 4]),
            (Category::Activation, vec![0, 10, 0]),
            (Category::Gradient, vec![0, 0, 4]),
            (Category::OptimizerState, vec![0, 0, 4]),
        ]);
        assert_eq!(demand.peak(&[1.0; NCAT]), (14, 1));
        let levers = vec![
            lever("ckpt", Cost::Compute, &[(Category::Activation, 0.3)]),
            lever("opt8", Cost::Cheap, &[(Category::OptimizerState, 0.25)]),
        ];
        let cuts = plan_timeline_cuts(&demand, &levers, 10, Order::Cheapest);
        // opt8 is cheaper but saves nothing at the activation peak: skipped,
        // then used once the peak has moved to the optimizer step.
        assert_eq!(cuts.steps.len(), 2);
        assert_eq!(cuts.steps[0].lever, 0);
        assert_eq!(cuts.steps[0].peak_after_bytes, 12);
        assert_eq!(cuts.steps[0].position, 2);
        assert_eq!(cuts.steps[0].saved_bytes, 2);
        assert_eq!(cuts.steps[1].lever, 1);
        assert_eq!(cuts.steps[1].peak_after_bytes, 9);
        assert_eq!(cuts.estimated_peak_bytes, 9);
    }

    #[test]
    fn order_cheapest_vs_largest() {
        let demand = Demand::from_series(&[
            (Category::Activation, vec![10]),
            (Category::AllocatorCache, vec![2]),
        ]);
        let levers = vec![
            lever("ckpt", Cost::Compute, &[(Category::Activation, 0.3)]),
            lever("expandable", Cost::Free, &[(Category::AllocatorCache, 0.2)]),
        ];
        let cheap = plan_timeline_cuts(&demand, &levers, 11, Order::Cheapest);
        assert_eq!(cheap.steps.iter().map(|s| s.lever).collect::<Vec<_>>(), [1]);
        let largest = plan_timeline_cuts(&demand, &levers, 11, Order::Largest);
        assert_eq!(
            largest.steps.iter().map(|s| s.lever).collect::<Vec<_>>(),
            [0]
        );
    }

    #[test]
    fn verdicts_for_a_device() {
        let demand = Demand::from_series(&[
            (Category::Parameter, vec![600, 600]),
            (Category::Activation, vec![0, 400]),
        ]);
        let options = PlanOptions::default();
        let describe = |p: usize| format!("position {p}");
        let budget = |bytes| Budget {
            bytes,
            source: "test".into(),
        };
        let fits = plan_device(&demand, &budget(2000), &options, &describe);
        assert_eq!(fits.verdict, Verdict::Fits);
        assert_eq!(fits.target_bytes, 1800);
        assert!(fits.steps.is_empty());
        let after = plan_device(&demand, &budget(1000), &options, &describe);
        assert_eq!(after.verdict, Verdict::FitsAfterCuts, "{after:?}");
        assert_eq!(after.steps[0].lever, "halve_micro_batch");
        assert_eq!(after.estimated_peak_bytes, 800);
        let nope = plan_device(&demand, &budget(300), &options, &describe);
        assert_eq!(nope.verdict, Verdict::DoesNotFit);
        assert_eq!(
            nope.gap_bytes,
            nope.estimated_peak_bytes - nope.target_bytes
        );
        assert!(nope.reason.contains("--dp-ranks"), "{}", nope.reason);
    }

    #[test]
    fn oom_plan_counts_the_request() {
        let oom = OomFinding {
            event_index: 7,
            ts_us: None,
            requested_bytes: 300,
            device_free_bytes: Some(10),
            allocated_bytes: 900,
            reserved_bytes: Some(1000),
            by_category: [
                (Category::Parameter, 400),
                (Category::Activation, 500),
                (Category::AllocatorCache, 100),
            ]
            .into_iter()
            .collect(),
            largest_free_block_bytes: None,
            verdict: String::new(),
        };
        let plan = plan_oom(&oom, 1000, &PlanOptions::default());
        assert_eq!(plan.demand_bytes, 1200);
        assert_eq!(plan.verdict, Verdict::FitsAfterCuts);
        assert_eq!(plan.steps[0].lever, "halve_micro_batch");
        assert_eq!(plan.estimated_peak_bytes, 950);
        let fits = plan_oom(&oom, 1500, &PlanOptions::default());
        assert_eq!(fits.verdict, Verdict::Fits);
        assert!(fits.reason.contains("allocator"), "{}", fits.reason);
    }
}
