//! The report: the machine contract (JSON, `schema_version` 3) and the only
//! value the renderers read. A leaf: the analysis and the planner produce
//! these values, the caller assembles them, nobody else owns them.
//!
//! Field names here are the JSON field names. Sizes are bytes (integers)
//! everywhere; renderers turn them into GiB/MiB. Maps are `BTreeMap`s keyed
//! by [`Category`] (declaration order), rows are sorted, so the same input
//! gives the same bytes at any thread count. Every type reads back from its
//! JSON ([`Report::from_json`]), so a saved report renders the same pages.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Category, Diagnostic, Distributed};

/// The `schema_version` this build writes.
pub const SCHEMA_VERSION: u32 = 3;

/// Everything memcut found in one input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Report {
    pub schema_version: u32,
    pub tool: Tool,
    pub source: SourceInfo,
    pub devices: Vec<DeviceReport>,
    pub diagnostics: Vec<Diagnostic>,
}

impl Report {
    /// Reads a saved JSON report back.
    pub fn from_json(text: &str) -> Result<Report, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// The program that wrote the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Tool {
    pub name: String,
    pub version: String,
}

impl Default for Tool {
    fn default() -> Tool {
        Tool {
            name: "memcut".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        }
    }
}

/// The input the report is about.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SourceInfo {
    /// The path as given (never made absolute), or `-` for stdin.
    pub path: String,
    /// `torch_snapshot`, `chrome_trace` or `memory_timeline`.
    pub format: String,
    pub size_bytes: u64,
    /// The rank of a distributed job that recorded the input, when the file
    /// says (Kineto `distributedInfo`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<Distributed>,
}

impl SourceInfo {
    pub fn new(path: impl Into<String>, format: impl Into<String>, size_bytes: u64) -> SourceInfo {
        SourceInfo {
            path: path.into(),
            format: format.into(),
            size_bytes,
            distributed: None,
        }
    }
}

/// One device (`cuda:0`, `cpu`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeviceReport {
    pub device: String,
    pub events: u64,
    /// Memory that existed before recording began (counted from the start).
    pub baseline_bytes: u64,
    /// What that memory was, part by part (largest first): each part's
    /// category, the rule that decided it and what from. Empty when nothing
    /// existed before recording.
    #[serde(default)]
    pub before_recording: Vec<BeforeRecordingPart>,
    /// Total device memory, when the file says.
    pub capacity_bytes: Option<u64>,
    pub peak: Peak,
    pub reserved_peak_bytes: Option<u64>,
    pub reserved_peak_event_index: Option<u64>,
    pub ooms: Vec<OomFinding>,
    /// What is wrong, with its evidence and fix (empty for a clean run).
    /// Reports lead with these.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// The peak with the levers of `--what-if` applied, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what_if: Option<WhatIf>,
    /// The next training step's peak, predicted from a recording of a
    /// first step that made the optimizer's state (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_step: Option<NextStep>,
    /// The cut plan, when a budget is known.
    pub plan: Option<Plan>,
    /// Memory by category over time, downsampled for plots. Empty series
    /// when the report was made without plots (`plot_points` 0).
    #[serde(default)]
    pub timeline: TimelineSeries,
    /// Set when `peak` holds another instant than the peak (`--at`): which
    /// one, and where the real peak is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<ReportedInstant>,
    /// The caching allocator's segments and blocks, for snapshots that
    /// record them (see [`SegmentsView`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<SegmentsView>,
    /// The whole stacks that `peak.allocations` and `peak.top_sites` point
    /// into, each frame written once.
    #[serde(default, skip_serializing_if = "StackTable::is_empty")]
    pub stacks: StackTable,
}

impl DeviceReport {
    /// The largest category live at the peak (never `allocator_cache`).
    pub fn top_category(&self) -> Option<Category> {
        self.peak.categories().rows.first().map(|(c, _)| *c)
    }
}

/// A kind of waste memcut names (DESIGN.md §6b).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A previous forward's graph kept alive by a variable while the next
    /// forward runs (fix: `free_kept_graph`).
    GraphKeptAlive,
    /// Autograd recording a graph in a forward-only run (fix: `inference_mode`).
    AutogradInInference,
    /// Autocast's cached low-precision copies of the weights (fix:
    /// `autocast_no_cache`).
    AutocastWeightCache,
    /// Memory growing run after run: a line whose tensors outlive its
    /// next runs (fix: `drop_growing_refs`).
    MemoryGrowth,
    /// Gradients kept from an optimizer step through the next forward,
    /// zeroed in place instead of freed (fix: `zero_grad_set_to_none`).
    GradientsKeptThroughForward,
    /// An OOM whose request the cached memory could have served but for
    /// fragmentation (fix: `expandable_segments`).
    FragmentationAtOom,
    /// Optimizer state made anew each step while the tensors it replaces
    /// are alive (fix: `optimizer_state_in_place`).
    OptimizerStateReplacedOutOfPlace,
    /// At an OOM, device memory held outside PyTorch's caching allocator
    /// (the CUDA context, NCCL, other processes): capacity − reserved −
    /// free (fix: `free_outside_memory`).
    MemoryOutsideAllocator,
    /// DistributedDataParallel's gradient buckets held beside the gradients
    /// they copy (fix: `gradient_as_bucket_view`).
    DdpBucketCopiesGradients,
}

impl FindingKind {
    pub const ALL: [FindingKind; 9] = [
        FindingKind::GraphKeptAlive,
        FindingKind::AutogradInInference,
        FindingKind::AutocastWeightCache,
        FindingKind::MemoryGrowth,
        FindingKind::GradientsKeptThroughForward,
        FindingKind::FragmentationAtOom,
        FindingKind::OptimizerStateReplacedOutOfPlace,
        FindingKind::MemoryOutsideAllocator,
        FindingKind::DdpBucketCopiesGradients,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::GraphKeptAlive => "graph_kept_alive",
            FindingKind::AutogradInInference => "autograd_in_inference",
            FindingKind::AutocastWeightCache => "autocast_weight_cache",
            FindingKind::MemoryGrowth => "memory_growth",
            FindingKind::GradientsKeptThroughForward => "gradients_kept_through_forward",
            FindingKind::FragmentationAtOom => "fragmentation_at_oom",
            FindingKind::OptimizerStateReplacedOutOfPlace => {
                "optimizer_state_replaced_out_of_place"
            }
            FindingKind::MemoryOutsideAllocator => "memory_outside_allocator",
            FindingKind::DdpBucketCopiesGradients => "ddp_bucket_copies_gradients",
        }
    }
}

/// One waste on a device: what it is, what in the file shows it, and what
/// its fix does to the peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Finding {
    pub kind: FindingKind,
    /// Bytes of the waste's allocations live at the peak.
    pub bytes_at_peak: u64,
    /// What in the file shows it (sites, counts, sizes), then the advice.
    pub evidence: Vec<String>,
    /// The lever that fixes it (ask `--what-if` for it).
    pub fix: String,
    /// How much the whole timeline's peak drops with the fix applied alone.
    pub saving_bytes: u64,
    /// The peak with the fix applied alone.
    pub peak_after_bytes: u64,
    /// Allocated bytes with the fix applied alone, on the same positions as
    /// `timeline` (empty without plots): the viewer shades the waste, what
    /// lies between the recorded curve and this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<u64>,
}

/// The next training step's peak, predicted from a recording that holds
/// one step and ends after its optimizer step, which made the optimizer's
/// state (PyTorch's optimizers make it lazily, at their first `step()`):
/// the next step runs its forward and backward with that state (and the
/// gradients `zero_grad()` keeps) alive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NextStep {
    pub peak_allocated_bytes: u64,
    /// Index of the recorded event at whose point the next step peaks.
    pub peak_event_index: u64,
    /// Bytes the recorded step made and left alive: the next step holds
    /// them from its start.
    pub carried_bytes: u64,
    /// What in the file shows it, then what it means.
    pub evidence: Vec<String>,
    /// Allocated bytes with what is carried alive from the start, on the
    /// same positions as `timeline` (empty without plots).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<u64>,
}

/// The peak re-simulated over the whole timeline with levers applied in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WhatIf {
    pub levers: Vec<String>,
    pub peak_allocated_bytes: u64,
    /// Reserved memory at the new peak, when reserved memory is known
    /// (the allocator's overhead at the old peak carried over).
    pub peak_reserved_bytes: Option<u64>,
    /// Index of the event after which the new peak holds.
    pub peak_event_index: u64,
    /// Whether some lever was modelled by a factor rather than from the run.
    pub estimate: bool,
    /// How each lever was modelled, in order.
    pub because: Vec<String>,
    /// Allocated bytes after the levers, on the same positions as
    /// `timeline` (empty without plots).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<u64>,
}

/// The instant of maximum allocated bytes (earliest on ties) and what was live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Peak {
    pub allocated_bytes: u64,
    pub reserved_bytes: Option<u64>,
    /// Index of the event after which the peak holds.
    pub event_index: u64,
    pub ts_us: Option<f64>,
    /// What the program was doing (forward, backward, optimizer step, …).
    pub phase: String,
    /// Bytes live at the peak by category; `allocator_cache` is reserved − allocated.
    pub by_category: BTreeMap<Category, u64>,
    /// How the allocated bytes at the peak got their category.
    #[serde(default)]
    pub attribution: Attribution,
    pub top_sites: Vec<TopSite>,
    /// Every allocation live at the peak, largest first.
    #[serde(serialize_with = "json::chunked")]
    pub allocations: Vec<LiveAllocation>,
}

/// How the allocated bytes at an instant got their category; the three sum
/// to the allocated bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Attribution {
    /// Categorised from the allocation's own evidence (its frames or
    /// operator stack, its lifetime, a rule of the user's, the file).
    pub observed_bytes: u64,
    /// Categorised from evidence elsewhere in the trace (rules named
    /// `inferred_…`: gradient sizes, operator shapes, the optimizer).
    pub inferred_bytes: u64,
    /// Category `unknown`.
    pub unknown_bytes: u64,
}

impl Attribution {
    pub fn new(observed_bytes: u64, inferred_bytes: u64, unknown_bytes: u64) -> Attribution {
        Attribution {
            observed_bytes,
            inferred_bytes,
            unknown_bytes,
        }
    }
}

/// One part of the memory that existed before recording began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BeforeRecordingPart {
    pub category: Category,
    /// Bytes at the start of recording.
    pub bytes: u64,
    /// The rule that chose the category (`inferred_…` when it was inferred).
    pub rule: String,
    /// What the category was decided from, in words.
    pub evidence: String,
}

impl BeforeRecordingPart {
    pub fn new(
        category: Category,
        bytes: u64,
        rule: String,
        evidence: String,
    ) -> BeforeRecordingPart {
        BeforeRecordingPart {
            category,
            bytes,
            rule,
            evidence,
        }
    }

    /// Whether the rule inferred the category rather than observing it.
    /// A reader of the JSON knows it by the name, as this does: inferring
    /// rules, and only they, are named `inferred_…` (the rule table's test
    /// `rule_names_say_which_rules_infer` holds the table to it).
    pub fn inferred(&self) -> bool {
        self.rule.starts_with("inferred_")
    }
}

/// The categories at the peak as every renderer shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeakCategories {
    /// Allocated bytes by category, largest first (ties in display order),
    /// without `allocator_cache`: they sum to the allocated peak.
    pub rows: Vec<(Category, u64)>,
    /// Reserved − allocated at the peak: not part of the allocated peak, so
    /// shown on its own line and never given a share of it.
    pub allocator_cache: Option<u64>,
}

impl Peak {
    /// The one way categories are listed: see [`PeakCategories`].
    pub fn categories(&self) -> PeakCategories {
        let mut rows: Vec<(Category, u64)> = self
            .by_category
            .iter()
            .filter(|(c, _)| **c != Category::AllocatorCache)
            .map(|(c, b)| (*c, *b))
            .collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        PeakCategories {
            rows,
            allocator_cache: self.by_category.get(&Category::AllocatorCache).copied(),
        }
    }

    /// The share of the allocated peak that `bytes` are, in percent
    /// (0 for an empty peak). Every share a report shows is this one.
    pub fn share(&self, bytes: u64) -> f64 {
        bytes as f64 * 100.0 / self.allocated_bytes.max(1) as f64
    }

    /// [`Peak::share`] written for people (`56.1%`, `0%` of an empty peak).
    pub fn share_text(&self, bytes: u64) -> String {
        crate::units::percent(bytes, self.allocated_bytes)
    }
}

/// Where the memory live at the peak was allocated, grouped by site and category.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TopSite {
    pub site: String,
    pub category: Category,
    pub bytes: u64,
    pub count: u64,
    /// The group's distinct stacks (indices into the device's
    /// `stacks.stacks`), most bytes first, at most three.
    #[serde(default)]
    pub stacks: Vec<u32>,
}

/// One allocation live at the peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LiveAllocation {
    pub addr: u64,
    pub size: u64,
    pub category: Category,
    /// Shared by the rows of one site (and `rule` by those of one rule): a
    /// peak of 45K live allocations held 6 MB of copies of them
    /// (`snap-unshared.pickle`, `scripts/bench_inputs.sh`).
    pub site: std::sync::Arc<str>,
    /// The classification rule that chose the category (`user:NAME` for a
    /// rule from `--rules`).
    pub rule: std::sync::Arc<str>,
    /// Its whole stack: an index into the device's `stacks.stacks`; `None`
    /// when the file recorded no frames for it.
    #[serde(default)]
    pub stack: Option<u32>,
    /// The event that allocated it; `None` when it was allocated before
    /// recording began.
    #[serde(default)]
    pub alloc: Option<EventRef>,
    /// The event that freed it; `None` when it is still alive at the end.
    #[serde(default)]
    pub free: Option<EventRef>,
}

/// An event of the trace, written `[event_index, t_us]`: its index, and the
/// time since the first event in microseconds (`null` when the trace has no
/// usable timestamps), the clock of `timeline.x`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EventRef(pub u64, pub Option<f64>);

impl EventRef {
    pub fn event_index(&self) -> u64 {
        self.0
    }
    pub fn t_us(&self) -> Option<f64> {
        self.1
    }
}

/// Interned whole stacks: each frame's text once, each stack a list of
/// frame indices, innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StackTable {
    /// `file:line function` (the operator or annotation name for Chrome
    /// traces), object addresses left out so that runs compare.
    pub frames: Vec<String>,
    /// Indices of the frames that are allocator, interpreter or framework
    /// plumbing (the frames a site's short name skips); renderers may fold them.
    pub internal: Vec<u32>,
    /// Stacks as indices into `frames`, innermost first.
    pub stacks: Vec<Vec<u32>>,
}

impl StackTable {
    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// The frames of stack `index`, innermost first, each with whether it is
    /// internal; empty for an index out of range (a damaged saved report).
    pub fn frames_of(&self, index: u32) -> Vec<(&str, bool)> {
        let Some(stack) = self.stacks.get(index as usize) else {
            return Vec::new();
        };
        stack
            .iter()
            .filter_map(|&f| {
                let text = self.frames.get(f as usize)?;
                Some((text.as_str(), self.internal.binary_search(&f).is_ok()))
            })
            .collect()
    }
}

/// The instant a report shows when it is not the peak (`--at`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReportedInstant {
    /// As asked for: `oom:0`, `1234` (an event), `1.5s` (a time), `end`.
    pub spec: String,
    /// The event after which the shown state holds (as `peak.event_index`).
    pub event_index: u64,
    /// The real peak, which `peak` does not show.
    pub peak_allocated_bytes: u64,
    pub peak_event_index: u64,
}

/// One failed allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OomFinding {
    pub event_index: u64,
    pub ts_us: Option<f64>,
    pub requested_bytes: u64,
    pub device_free_bytes: Option<u64>,
    pub allocated_bytes: u64,
    pub reserved_bytes: Option<u64>,
    pub by_category: BTreeMap<Category, u64>,
    /// Largest inactive block in the dumped segments.
    pub largest_free_block_bytes: Option<u64>,
    /// One line: fragmentation or a genuine shortage.
    pub verdict: String,
}

/// Per-category memory over time, downsampled (local maxima kept): what the
/// HTML chart draws (the JSON writes each array of numbers on one line).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TimelineSeries {
    /// `time_us` (relative to the first event) or `event_index` when the
    /// trace has no timestamps.
    pub x_unit: String,
    pub x: Vec<f64>,
    /// Categories in order, each with one value per `x`.
    pub series: BTreeMap<Category, Vec<u64>>,
    pub reserved: Option<Vec<u64>>,
    pub peak_x: f64,
    pub oom_x: Vec<f64>,
    /// The largest allocations over time, each drawn on its own by the HTML
    /// viewer: each stretch of the trace keeps its largest (see
    /// `analysis/bands.rs`). Empty without plots.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bands: Vec<Band>,
    /// The allocator's segments at some plotted points, for files that
    /// record segments (see `SegmentFrames`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<SegmentFrames>,
    /// Finer series around the reported instant, for a zoom: each level
    /// plots a sixteenth of the span of the one before it with as many
    /// points (only where the trace has more positions than points).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<DetailSeries>,
}

/// One level of [`TimelineSeries::detail`]: `x`, `series` and `reserved`
/// as the timeline's own, over the stretch of positions it covers.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DetailSeries {
    pub x: Vec<f64>,
    pub series: BTreeMap<Category, Vec<u64>>,
    pub reserved: Option<Vec<u64>>,
}

/// One allocation of [`TimelineSeries::bands`]: where it lives on the
/// x axis (`x1` is the last x when it is alive at the end), what it is,
/// and the events that made and ended it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Band {
    pub x0: f64,
    pub x1: f64,
    pub bytes: u64,
    pub category: Category,
    pub rule: String,
    pub site: String,
    /// Its whole stack: an index into the device's `stacks.stacks`.
    #[serde(default)]
    pub stack: Option<u32>,
    #[serde(default)]
    pub alloc: Option<EventRef>,
    #[serde(default)]
    pub free: Option<EventRef>,
    /// The coarsest level whose stretches chose it (0: the whole run's,
    /// then `detail`'s); the viewer draws it from that level's zoom on.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub level: u8,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// A device's cut plan against a memory budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Plan {
    pub budget_bytes: u64,
    pub headroom_bytes: u64,
    pub target_bytes: u64,
    /// What a report leads with: the failed allocation's plan when the
    /// trace holds an OOM (the question a post-mortem asks), else the
    /// replayed peak's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headline: Option<Headline>,
    /// Peak of the demand (allocated + allocator cache) before any cut.
    pub peak_before_bytes: u64,
    pub steps: Vec<PlanStep>,
    pub estimated_peak_bytes: u64,
    pub verdict: Verdict,
    pub reason: String,
    /// Where the budget came from (`--budget`, device capacity, OOM).
    #[serde(default)]
    pub budget_source: String,
    /// Where the demand peaks before any cut (`event N (phase)`).
    #[serde(default)]
    pub peak_before_at: String,
    /// `estimated_peak_bytes − target_bytes` when the verdict is `does_not_fit`, else 0.
    #[serde(default)]
    pub gap_bytes: u64,
    /// The same levers planned for the instant of the (first) failed allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_plan: Option<OomPlan>,
    /// The verdict rests on an estimate (`estimate_reason` says which).
    #[serde(default)]
    pub estimate: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_reason: Option<String>,
    /// The smallest saving a step must make: 1% of the peak (at least 1 B).
    #[serde(default)]
    pub min_step_bytes: u64,
    /// Levers that are not steps, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub considered: Vec<ConsideredLever>,
    /// What the trace shows about the run, with the evidence: why a lever
    /// applies or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<PlanFact>,
}

/// The verdict a report leads with ([`Plan::headline`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Headline {
    /// `oom` (the failed allocation: [`Plan::oom_plan`]) or `peak` (the
    /// replayed peak: the plan's own steps).
    pub about: String,
    pub verdict: Verdict,
    pub reason: String,
    pub estimate: bool,
}

/// A lever the planner did not make a step, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConsideredLever {
    pub lever: String,
    /// `not_applicable` (the run's evidence rules it out), `negligible`
    /// (it would lower the peak by less than 1% of it) or `no_effect`
    /// (nothing it cuts is live at the peak).
    pub outcome: String,
    pub reason: String,
    /// What it would lower the peak by after the plan's steps.
    pub saved_bytes: u64,
}

/// One fact about the run and the evidence for it (`run`: `training`,
/// because `412 allocations in backward, …`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanFact {
    pub fact: String,
    pub value: String,
    pub because: String,
}

/// One lever applied, and the whole timeline's peak after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanStep {
    pub lever: String,
    pub action: String,
    pub cost: String,
    pub categories: Vec<Category>,
    /// How much the peak went down with this step (old peak − new peak).
    pub saved_bytes: u64,
    pub peak_after_bytes: u64,
    /// Where the peak is after this step: `event N (phase)`.
    pub peak_moved_to: String,
    /// The factor applied to each category by this step.
    #[serde(default)]
    pub scales: BTreeMap<Category, f64>,
    /// Event index of the peak after this step.
    #[serde(default)]
    pub peak_event_index: u64,
    /// Whether this step moved the peak to another instant.
    #[serde(default)]
    pub peak_moved: bool,
    /// The exact targets and factors (`activation.saved_for_backward`:
    /// 0.3); `scales` shows them by category.
    #[serde(default)]
    pub targets: BTreeMap<String, f64>,
    /// Why the lever applies to this run: the evidence for its conditions.
    #[serde(default)]
    pub because: String,
    /// What the step rests on that the trace does not show (`if the
    /// weights are fp32`); such steps come after every certain one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// What the cost means here (`≈ one extra forward per step`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tradeoff: Option<String>,
    /// The saving rests on an estimated quantity (`estimate_reason`).
    #[serde(default)]
    pub estimate: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_reason: Option<String>,
}

/// Whether the peak fits the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// No cut needed.
    Fits,
    /// The cuts listed bring the peak within the target.
    FitsAfterCuts,
    /// Even after every applicable cut the peak is over the target.
    DoesNotFit,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Fits => "fits",
            Verdict::FitsAfterCuts => "fits_after_cuts",
            Verdict::DoesNotFit => "does_not_fit",
        }
    }

    /// The verdict of this name (`fits`, `fits_after_cuts`, `does_not_fit`).
    pub fn from_name(name: &str) -> Option<Verdict> {
        [Verdict::Fits, Verdict::FitsAfterCuts, Verdict::DoesNotFit]
            .into_iter()
            .find(|v| v.as_str() == name)
    }

    /// Whether the peak is over the budget's target as recorded: cuts are
    /// needed (`fits_after_cuts`), or even they are not enough.
    pub fn over_budget(self) -> bool {
        self != Verdict::Fits
    }
}

/// The plan for the instant an allocation failed: demand = bytes allocated
/// just before the failure (by category) + the allocator cache then
/// (reserved − allocated, when known: fragmentation is a reason requests
/// fail) + the failed request (counted as `unknown`: no lever is assumed to
/// shrink it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OomPlan {
    pub event_index: u64,
    pub requested_bytes: u64,
    pub demand_bytes: u64,
    pub steps: Vec<PlanStep>,
    pub estimated_peak_bytes: u64,
    pub verdict: Verdict,
    pub gap_bytes: u64,
    pub reason: String,
    /// The verdict rests on an estimate (`estimate_reason` says which).
    #[serde(default)]
    pub estimate: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_reason: Option<String>,
}

pub mod batch;
mod diff;
pub(crate) mod json;
mod segments;

pub use diff::*;
pub use segments::*;
