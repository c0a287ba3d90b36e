//! The report: the machine contract (JSON, `schema_version` 1) and the value
//! every renderer reads. Field names here are the JSON field names.
//!
//! Sizes are bytes (integers) everywhere; renderers turn them into GiB/MiB.
//! Maps are `BTreeMap`s keyed by [`Category`] (declaration order), rows are
//! sorted, so the same input gives the same bytes at any thread count.

pub mod html;
pub mod json;
pub mod markdown;
pub mod text;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{Category, Diagnostic};
use crate::plan::Plan;

pub const SCHEMA_VERSION: u32 = 1;

/// Output formats of `memcut analyze`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Text,
    Md,
    Json,
    Html,
}

impl OutputFormat {
    pub fn extension(self) -> &'static str {
        match self {
            OutputFormat::Text => "txt",
            OutputFormat::Md => "md",
            OutputFormat::Json => "json",
            OutputFormat::Html => "html",
        }
    }
}

/// Renders a report in the given format.
pub fn render(report: &Report, format: OutputFormat) -> String {
    match format {
        OutputFormat::Text => text::render(report),
        OutputFormat::Md => markdown::render(report),
        OutputFormat::Json => json::render(report),
        OutputFormat::Html => html::render(report),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub schema_version: u32,
    pub tool: Tool,
    pub source: SourceInfo,
    pub devices: Vec<DeviceReport>,
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceInfo {
    pub path: String,
    /// `torch_snapshot`, `chrome_trace` or `memory_timeline`.
    pub format: String,
    pub size_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub device: String,
    pub events: u64,
    /// Memory that existed before recording began (counted from the start).
    pub baseline_bytes: u64,
    /// Total device memory, when the file says.
    pub capacity_bytes: Option<u64>,
    pub peak: Peak,
    pub reserved_peak_bytes: Option<u64>,
    pub reserved_peak_event_index: Option<u64>,
    pub ooms: Vec<OomFinding>,
    pub plan: Option<Plan>,
    /// Memory by category over time, downsampled for plots (HTML only; not in JSON).
    #[serde(skip)]
    pub timeline: TimelineSeries,
}

/// The instant of maximum allocated bytes (earliest on ties) and what was live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    pub top_sites: Vec<TopSite>,
    /// Every allocation live at the peak, largest first.
    pub allocations: Vec<LiveAllocation>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopSite {
    pub site: String,
    pub category: Category,
    pub bytes: u64,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveAllocation {
    pub addr: u64,
    pub size: u64,
    pub category: Category,
    pub site: String,
    pub rule: String,
}

/// One failed allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// Per-category memory over time, downsampled (local maxima kept).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TimelineSeries {
    /// `time_us` (relative to the first event) or event index when the trace has no timestamps.
    pub x_unit: String,
    pub x: Vec<f64>,
    /// Categories in order, each with one value per `x`.
    pub series: BTreeMap<Category, Vec<u64>>,
    pub reserved: Option<Vec<u64>>,
    pub peak_x: f64,
    pub oom_x: Vec<f64>,
}

/// Human units for renderers: binary GiB/MiB/KiB.
pub fn human_bytes(bytes: u64) -> String {
    const KIB: f64 = 1024.0;
    let b = bytes as f64;
    if b >= KIB * KIB * KIB {
        format!("{:.2} GiB", b / (KIB * KIB * KIB))
    } else if b >= KIB * KIB {
        format!("{:.1} MiB", b / (KIB * KIB))
    } else if b >= KIB {
        format!("{:.1} KiB", b / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// Share of `part` in `whole` as a percentage string.
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "0%".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Categories at the peak, largest first (ties in display order), without
/// `allocator_cache`: that one is reserved − allocated, not part of the peak,
/// and comes back apart.
pub fn peak_categories(peak: &Peak) -> (Vec<(Category, u64)>, Option<u64>) {
    let mut rows: Vec<(Category, u64)> = peak
        .by_category
        .iter()
        .filter(|(c, _)| **c != Category::AllocatorCache)
        .map(|(c, b)| (*c, *b))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let cache = peak.by_category.get(&Category::AllocatorCache).copied();
    (rows, cache)
}

/// The largest category live at the peak (never `allocator_cache`).
pub fn top_category(device: &DeviceReport) -> Option<Category> {
    peak_categories(&device.peak).0.first().map(|(c, _)| *c)
}

/// Column names and one device's cells (plain text) of the multi-device
/// overview table that both Markdown and HTML show.
pub const OVERVIEW_COLUMNS: [&str; 7] = [
    "Device",
    "Peak allocated",
    "Reserved at peak",
    "Top category",
    "Phase",
    "OOMs",
    "Verdict",
];

pub fn overview_row(d: &DeviceReport) -> [String; 7] {
    [
        d.device.clone(),
        human_bytes(d.peak.allocated_bytes),
        d.peak.reserved_bytes.map_or("?".into(), human_bytes),
        top_category(d).map_or("-", |c| c.as_str()).to_owned(),
        d.peak.phase.clone(),
        d.ooms.len().to_string(),
        d.plan
            .as_ref()
            .map_or("-", |p| p.verdict.as_str())
            .to_owned(),
    ]
}

/// Column names and one step's cells (plain text) of the cut-plan table
/// that both Markdown and HTML show; columns 0, 4 and 5 are numbers.
pub const PLAN_STEP_COLUMNS: [&str; 7] = [
    "#",
    "Lever",
    "Action",
    "Cost",
    "Saves",
    "Peak after",
    "Peak moves to",
];

pub fn plan_step_row(index: usize, step: &crate::plan::PlanStep) -> [String; 7] {
    [
        (index + 1).to_string(),
        step.lever.clone(),
        step.action.clone(),
        step.cost.clone(),
        human_bytes(step.saved_bytes),
        human_bytes(step.peak_after_bytes),
        step.peak_moved_to.clone(),
    ]
}

/// Devices by peak allocated bytes, largest first (ties by name).
pub fn devices_by_peak(report: &Report) -> Vec<&DeviceReport> {
    let mut devices: Vec<&DeviceReport> = report.devices.iter().collect();
    devices.sort_by(|a, b| {
        b.peak
            .allocated_bytes
            .cmp(&a.peak.allocated_bytes)
            .then(a.device.cmp(&b.device))
    });
    devices
}

/// When the peak happened: the event index, and the time since the first
/// event when the trace has timestamps.
pub fn peak_instant(device: &DeviceReport) -> String {
    let t = &device.timeline;
    if t.x_unit == "time_us" && device.peak.ts_us.is_some() {
        format!(
            "event {} (t = {} after the first event)",
            device.peak.event_index,
            human_duration_us(t.peak_x)
        )
    } else {
        format!("event {}", device.peak.event_index)
    }
}

/// A duration in microseconds in the largest unit that keeps it ≥ 1.
pub fn human_duration_us(us: f64) -> String {
    let a = us.abs();
    if a >= 60e6 {
        format!("{:.1} min", us / 60e6)
    } else if a >= 1e6 {
        format!("{:.3} s", us / 1e6)
    } else if a >= 1e3 {
        format!("{:.2} ms", us / 1e3)
    } else {
        format!("{us:.0} µs")
    }
}
