//! The comparison of two reports (`memcut diff BEFORE AFTER`): its own
//! contract, with its own `schema_version` ([`DIFF_SCHEMA_VERSION`]). Sizes
//! are bytes; a change is `after − before` (negative when memory went down).

use serde::{Deserialize, Serialize};

use super::{SourceInfo, Tool, Verdict};
use crate::model::{Category, Diagnostic};

/// The `schema_version` of the diff JSON this build writes.
pub const DIFF_SCHEMA_VERSION: u32 = 1;

/// Two inputs compared, device by device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DiffReport {
    pub schema_version: u32,
    /// Always `diff`: tells this JSON from an analysis report.
    pub kind: String,
    pub tool: Tool,
    pub before: SourceInfo,
    pub after: SourceInfo,
    /// Devices present in both inputs, matched by name (or, when each input
    /// has one device under different names, the two of them).
    pub devices: Vec<DeviceDiff>,
    /// Devices of one input only.
    pub only_before: Vec<String>,
    pub only_after: Vec<String>,
    /// `--fail-if-peak-grows`: the threshold and the devices over it.
    pub check: Option<PeakCheck>,
    /// Each input's warnings (prefixed `before:`/`after:`) and the diff's own notes.
    pub diagnostics: Vec<Diagnostic>,
}

/// The CI check: fails when a device's allocated peak grew by more than
/// `max_growth_percent` (or from nothing to something).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PeakCheck {
    pub max_growth_percent: f64,
    /// Devices whose peak grew more than allowed; empty when the check passes.
    pub failed: Vec<String>,
}

/// One device before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeviceDiff {
    pub device: String,
    /// The device's name in AFTER when it differs from `device` (matched
    /// because each input has one device).
    pub after_device: Option<String>,
    /// Allocated bytes at the peak.
    pub peak: Change,
    /// Reserved bytes at the peak, when both inputs know them.
    pub reserved_at_peak: Option<Change>,
    /// The peak of reserved memory, when both inputs know it.
    pub reserved_peak: Option<Change>,
    /// Bytes at each peak by category: every category present in either,
    /// in category order (`allocator_cache` is reserved − allocated).
    pub by_category: Vec<CategoryChange>,
    /// Sites matched by their text, the largest change first.
    pub sites: Vec<SiteChange>,
    /// Sites with a change beyond the rows kept in `sites`.
    pub sites_left_out: u64,
    pub before_peak: PeakInstant,
    pub after_peak: PeakInstant,
    pub before_plan: Option<PlanSummary>,
    pub after_plan: Option<PlanSummary>,
    /// Both timelines on one axis from 0 (first event) to 1 (last event).
    pub timeline: DiffTimeline,
}

/// A number before and after.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Change {
    pub before: u64,
    pub after: u64,
    /// `after − before`.
    pub change_bytes: i64,
    /// The change in percent of `before`; `None` when `before` is 0.
    pub change_percent: Option<f64>,
}

impl Change {
    pub fn new(before: u64, after: u64) -> Change {
        let change_bytes =
            (after as i128 - before as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64;
        Change {
            before,
            after,
            change_bytes,
            change_percent: (before > 0).then(|| change_bytes as f64 * 100.0 / before as f64),
        }
    }
}

/// One category's bytes at each peak.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CategoryChange {
    pub category: Category,
    pub before: u64,
    pub after: u64,
    pub change_bytes: i64,
}

/// One site's live bytes at each peak.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SiteChange {
    pub site: String,
    /// The category holding most of the site's bytes (after, else before).
    pub category: Category,
    pub status: SiteStatus,
    pub before_bytes: u64,
    pub after_bytes: u64,
    pub change_bytes: i64,
    pub before_count: u64,
    pub after_count: u64,
}

/// How a site changed between the two peaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteStatus {
    /// Live at AFTER's peak only.
    Appeared,
    /// Live at BEFORE's peak only.
    Disappeared,
    Grew,
    Shrank,
    Unchanged,
}

impl SiteStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SiteStatus::Appeared => "appeared",
            SiteStatus::Disappeared => "disappeared",
            SiteStatus::Grew => "grew",
            SiteStatus::Shrank => "shrank",
            SiteStatus::Unchanged => "unchanged",
        }
    }
}

/// Where one input's peak is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PeakInstant {
    pub event_index: u64,
    /// Events on the device (the peak's place in the run is `fraction`).
    pub events: u64,
    pub phase: String,
    /// Time since the first event, when the trace has timestamps.
    pub t_us: Option<f64>,
    /// How far through the recording the peak is, 0 to 1 (by time when the
    /// trace has timestamps, else by event index).
    pub fraction: f64,
}

/// One input's cut plan, in short.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PlanSummary {
    pub verdict: Verdict,
    pub target_bytes: u64,
    pub estimated_peak_bytes: u64,
    /// The levers applied, in order.
    pub levers: Vec<String>,
}

/// Both inputs' allocated (and reserved) memory over a normalised time axis.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DiffTimeline {
    pub before: NormalisedSeries,
    pub after: NormalisedSeries,
}

/// One input's plotted totals, x scaled to 0..1 of its recording.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NormalisedSeries {
    /// What x = 1 is in: `time_us` or `event_index` (as `timeline.x_unit`).
    pub x_unit: String,
    /// The span x = 1 stands for, in `x_unit`.
    pub span: f64,
    pub x: Vec<f64>,
    /// Allocated bytes (Σ categories) at each x.
    pub allocated: Vec<u64>,
    pub reserved: Option<Vec<u64>>,
    pub peak_x: f64,
}
