//! The batch summary's rows and the rank tables' jobs: what `memcut batch`
//! keeps of each file (one [`Row`] per device, JSON Lines' contract) and
//! what it compares across the ranks of a job ([`Job`]). Computed by
//! `batch`, written out by `report::summary`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::Category;
use crate::schema::Verdict;

/// How one row of the summary ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Analysed (and within budget, when one is given).
    Ok,
    /// Analysed; the peak does not fit the budget.
    OverBudget,
    /// Analysed, but the input was read only in part (reason in `error`):
    /// the numbers describe what could be read.
    Partial,
    /// Could not be analysed: damaged, unreadable, or a report could not be written.
    Failed,
    /// Not a memory trace this version reads (reason in `error`).
    Skipped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::OverBudget => "over_budget",
            Status::Partial => "partial",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// One summary row: a device of an analysed file, or a file that was
/// skipped or failed. Field order is the CSV column order. An empty string
/// is a missing value: an empty CSV field, `null` in JSON Lines (as the
/// missing numbers are).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub file: String,
    pub status: Status,
    /// Input format (`torch_snapshot`, …); empty when not analysed.
    #[serde(with = "empty_as_null")]
    pub format: String,
    #[serde(with = "empty_as_null")]
    pub device: String,
    pub peak_bytes: Option<u64>,
    /// Highest reserved memory over the trace (reserved at the peak when the
    /// trace has no reserved curve).
    pub reserved_bytes: Option<u64>,
    #[serde(with = "empty_as_null")]
    pub top_category: String,
    /// The plan's verdict, or `fits`/`does_not_fit` against `--budget`; empty without a budget.
    #[serde(with = "empty_as_null")]
    pub verdict: String,
    /// Stem of this input's report files in the output folder.
    #[serde(with = "empty_as_null")]
    pub report: String,
    /// One-line reason for `skipped`, `failed` and `partial` rows.
    #[serde(with = "empty_as_null")]
    pub error: String,
    /// The device's findings as `kind=saving_bytes`, `;`-separated
    /// (`graph_kept_alive=13680640;autograd_in_inference=23396352`); empty
    /// for a clean run.
    #[serde(default, with = "empty_as_null")]
    pub findings: String,
    /// The next training step's predicted peak, on a recording of a first
    /// step (`devices[].next_step`); null otherwise.
    #[serde(default)]
    pub next_step_bytes: Option<u64>,
    /// The rank of a distributed job this device's trace is, when known
    /// (`batch::ranks`): in JSON Lines only (not a CSV column), absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<RankOf>,
    /// The report's warnings (damaged content, …), on the file's first row
    /// only: the binary prints them to stderr. Not a summary column.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// `""` written as `null` and read back from it, so that JSON Lines has one
/// spelling of "missing" for strings and numbers alike.
mod empty_as_null {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(s: &str, ser: S) -> Result<S::Ok, S::Error> {
        if s.is_empty() {
            ser.serialize_none()
        } else {
            ser.serialize_str(s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<String, D::Error> {
        Ok(Option::<String>::deserialize(de)?.unwrap_or_default())
    }
}

impl Row {
    /// Whether the row's device does not fit the budget (its verdict says
    /// cuts are needed, or that even they are not enough).
    pub fn is_over_budget(&self) -> bool {
        Verdict::from_name(&self.verdict).is_some_and(Verdict::over_budget)
    }
}

/// The column names of the CSV summary, in order.
pub const COLUMNS: [&str; 12] = [
    "file",
    "status",
    "format",
    "device",
    "peak_bytes",
    "reserved_bytes",
    "top_category",
    "verdict",
    "report",
    "error",
    "findings",
    "next_step_bytes",
];

/// Counts of files by outcome, for the exit code and the summary's last line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub files: usize,
    /// Analysed, partial ones included.
    pub analysed: usize,
    /// Analysed files with a device over budget (partial ones included).
    pub over_budget: usize,
    /// Analysed from an input read only in part.
    pub partial: usize,
    pub failed: usize,
    pub skipped: usize,
}

/// A rank whose peak is further than this share from the median is an outlier.
pub const OUTLIER_SHARE: f64 = 0.10;

/// Where a row's rank number comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RankSource {
    /// Kineto's `distributedInfo` in the trace.
    DistributedInfo,
    /// A rank number in the file name (`rank3`, `rank-3`, `rank_3`).
    FileName,
}

/// The rank a summary row belongs to, and what it held at its peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RankOf {
    pub rank: u32,
    /// `None` when the rank comes from the file name.
    pub world_size: Option<u32>,
    pub from: RankSource,
    /// Allocated bytes by category at the device's peak (no
    /// `allocator_cache`, no zeros): what the rank table compares.
    pub peak_by_category: BTreeMap<Category, u64>,
}

/// One rank of a [`Job`]: its highest peak and the file it is from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RankPeak {
    pub rank: u32,
    pub peak_bytes: u64,
    pub file: String,
    /// How many files of this rank the job holds (steps, …).
    pub files: usize,
    pub peak_by_category: BTreeMap<Category, u64>,
}

/// A rank whose peak is more than [`OUTLIER_SHARE`] from the median.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Outlier {
    pub rank: u32,
    /// Peak − median, in bytes.
    pub delta_bytes: i128,
    /// The category whose bytes at the peak differ most from the median
    /// rank's in the same direction, and by how much.
    pub category: Option<(Category, i128)>,
}

/// The ranks of one job on one kind of device.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Job {
    /// The folder of the job's files (`.` for none).
    pub folder: String,
    pub world_size: Option<u32>,
    /// `cuda`, `cpu`, … (the device name before `:`).
    pub device_kind: String,
    pub from: RankSource,
    /// By rank.
    pub ranks: Vec<RankPeak>,
    pub median_bytes: u64,
    /// Per category, the median over the ranks of its bytes at their peaks.
    pub median_by_category: BTreeMap<Category, u64>,
    /// Highest peak / median peak; `None` when the median is 0.
    pub imbalance: Option<f64>,
    /// By rank.
    pub outliers: Vec<Outlier>,
}

impl Job {
    /// The rank with the highest peak (the lowest rank on ties).
    pub fn max(&self) -> &RankPeak {
        let mut best = &self.ranks[0];
        for r in &self.ranks[1..] {
            if r.peak_bytes > best.peak_bytes {
                best = r;
            }
        }
        best
    }

    /// Ranks below the world size that have no analysed file here.
    pub fn missing_ranks(&self) -> Vec<u32> {
        let Some(n) = self.world_size else {
            return Vec::new();
        };
        let have: Vec<u32> = self.ranks.iter().map(|r| r.rank).collect();
        (0..n).filter(|r| have.binary_search(r).is_err()).collect()
    }
}
