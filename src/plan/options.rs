//! What a plan is made against: the budget (`--budget`, the device's
//! memory, an OOM's free + reserved), the headroom below it, and the
//! planner's other options, with the parsers the CLI and the Python
//! binding share (so both refuse a bad value with the same words).

use crate::schema::OomFinding;
use crate::units::{human_bytes as h, parse_size, SizeError};

use super::facts::{self, RunFacts};
use super::levers::{catalogue, Lever};
use super::search::Order;

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

/// Parses `NN%` into a percentage in `[0, max)` (`max` excluded).
fn parse_percent(s: &str, max: f64) -> Option<Result<f64, SizeError>> {
    let p = s.trim().strip_suffix('%')?;
    Some(match p.trim().parse::<f64>() {
        Err(_) => Err(SizeError::BadPercentage(s.to_owned())),
        Ok(p) if !p.is_finite() || !(0.0..max).contains(&p) => {
            Err(SizeError::PercentageOutOfRange(s.to_owned()))
        }
        Ok(p) => Ok(p),
    })
}

impl Headroom {
    /// Parses `10%` or a size (see [`parse_size`]).
    pub fn parse(s: &str) -> Result<Headroom, SizeError> {
        match parse_percent(s, 100.0) {
            Some(p) => p.map(Headroom::Percent),
            None => parse_size(s.trim()).map(Headroom::Bytes),
        }
    }

    /// Bytes of headroom for a budget (never more than the budget).
    pub fn bytes(self, budget: u64) -> u64 {
        match self {
            Headroom::Bytes(b) => b.min(budget),
            Headroom::Percent(p) => ((budget as f64 * p / 100.0).round() as u64).min(budget),
        }
    }
}

/// A budget as given on the command line: a size, or a share of each
/// device's observed peak (`--budget 80%`: what would it take to need a
/// fifth less?).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetSpec {
    Bytes(u64),
    /// Percent of the observed peak (allocated + the allocator's overhead).
    PercentOfPeak(f64),
}

impl BudgetSpec {
    /// Parses `80GiB`, `79.6GB`, bytes (see [`parse_size`]) or `80%`
    /// (of the observed peak; more than 0%, at most 1000%).
    pub fn parse(s: &str) -> Result<BudgetSpec, SizeError> {
        match parse_percent(s, 1_000.000_001) {
            Some(Ok(p)) if p > 0.0 => Ok(BudgetSpec::PercentOfPeak(p)),
            Some(Ok(_)) | Some(Err(SizeError::PercentageOutOfRange(_))) => {
                Err(SizeError::BudgetPercentageOutOfRange(s.to_owned()))
            }
            Some(Err(e)) => Err(e),
            None => parse_size(s.trim()).map(BudgetSpec::Bytes),
        }
    }
}

/// `--budget` (and Python's `budget=`): a share of the observed peak
/// (`80%`), or a positive size; a bare number of bytes under a MiB is
/// refused (`--budget 40` means no budget of 40 bytes).
pub fn parse_budget(s: &str) -> Result<BudgetSpec, SizeError> {
    let t = s.trim();
    if t.ends_with('%') {
        return BudgetSpec::parse(s);
    }
    let bytes = crate::units::parse_positive_size(s)?;
    if is_bare_number(t) && bytes < 1 << 20 {
        return Err(SizeError::BareBudget(t.to_owned()));
    }
    Ok(BudgetSpec::Bytes(bytes))
}

/// `--device-memory` (and Python's `device_memory=`): the device's memory,
/// a size (`80GiB`); a bare number under a MiB is refused as `--budget`
/// refuses it (bytes that few are a missing unit, not a device).
pub fn parse_device_memory(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    if t.ends_with('%') {
        return Err(SizeError::NotDeviceMemory(t.to_owned()));
    }
    let bytes = crate::units::parse_positive_size(s)?;
    if is_bare_number(t) && bytes < 1 << 20 {
        return Err(SizeError::NotDeviceMemory(t.to_owned()));
    }
    Ok(bytes)
}

/// `--dp-ranks` (and Python's `dp_ranks=`): the data-parallel ranks the
/// sharding levers may shard over, a whole number of at least 1.
pub fn parse_dp_ranks(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "`{s}` is not a number of data-parallel ranks (a whole number, at least 1)"
        )),
    }
}

/// `--headroom` (and Python's `headroom=`): a percentage or a size with a
/// unit. A bare number other than 0 is refused: `10` would be ten bytes,
/// which nobody means.
pub fn parse_headroom(s: &str) -> Result<Headroom, SizeError> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(SizeError::Negative(s.to_owned()));
    }
    if is_bare_number(t) && t.parse::<f64>().is_ok_and(|v| v != 0.0) {
        return Err(SizeError::NoUnit(t.to_owned()));
    }
    Headroom::parse(t)
}

/// A number without a unit (`40`, `0.5`).
fn is_bare_number(t: &str) -> bool {
    !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// Where a budget comes from and how large it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub bytes: u64,
    pub source: String,
}

/// Knobs of the planner that come from the command line.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PlanOptions {
    /// `--budget SIZE`; else the device's memory (`device_memory`, else the
    /// trace's); else free + reserved at an OOM.
    pub budget: Option<u64>,
    /// `--budget NN%`: that share of each device's observed peak (wins over
    /// the device's capacity; `budget` wins over it).
    pub budget_percent_of_peak: Option<f64>,
    pub headroom: Headroom,
    /// `--device-memory SIZE`: the device's memory, for traces that do not
    /// record it (snapshots); wins over a trace's `deviceProperties`.
    pub device_memory: Option<u64>,
    /// Data-parallel ranks for the sharding levers (`--dp-ranks`); 0 or 1:
    /// what the trace shows (Kineto's `distributedInfo`), else none.
    pub dp_ranks: u32,
    /// `--levers FILE`: replaces the catalogue.
    pub levers: Option<Vec<Lever>>,
    pub order: Order,
    /// `--what-if LEVER,…`: levers to re-simulate the timeline with, in
    /// order (findings' fixes and the catalogue's levers).
    pub what_if: Vec<String>,
}

impl PlanOptions {
    /// The levers to plan with for a run with these facts.
    pub(crate) fn levers(&self, facts: &RunFacts) -> Vec<Lever> {
        self.levers.clone().unwrap_or_else(|| {
            let fp32 = facts.weights.value == Some(facts::Dtype::Fp32);
            catalogue(facts.dp_ranks(), fp32, facts.kv_pool.value == Some(true))
        })
    }

    /// Sets the budget and the headroom below it, refusing a headroom that
    /// leaves nothing of a budget in bytes (the message names the options
    /// as the CLI spells them: `--budget`, `--headroom`).
    pub fn set_budget_and_headroom(
        &mut self,
        budget: Option<BudgetSpec>,
        headroom: Headroom,
    ) -> Result<(), String> {
        if let (Some(BudgetSpec::Bytes(budget)), Headroom::Bytes(room)) = (budget, headroom) {
            if room >= budget {
                return Err(format!(
                    "--headroom {} leaves nothing of --budget {}: the headroom must be smaller than the budget",
                    crate::units::human_bytes(room),
                    crate::units::human_bytes(budget)
                ));
            }
        }
        if let Some(budget) = budget {
            self.set_budget(budget);
        }
        self.headroom = headroom;
        Ok(())
    }

    /// Sets the budget from a [`BudgetSpec`].
    pub fn set_budget(&mut self, spec: BudgetSpec) {
        match spec {
            BudgetSpec::Bytes(b) => self.budget = Some(b),
            BudgetSpec::PercentOfPeak(p) => self.budget_percent_of_peak = Some(p),
        }
    }
}

/// What the plan reads of a device besides its demand and facts: its
/// OOMs, its memory, what was held outside the allocator, and whether it
/// plans a predicted next step. Made by the pipeline from what it found;
/// the planner never reads the report.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceState<'a> {
    pub ooms: &'a [OomFinding],
    /// The device's memory as the trace records it (`deviceProperties`).
    pub capacity_bytes: Option<u64>,
    /// Held outside the allocator at an OOM (the `memory_outside_allocator`
    /// finding's bytes).
    pub outside_allocator_bytes: Option<u64>,
    /// Whether the plan is for the next step a first step's recording
    /// predicts (its peak is then that step's).
    pub next_step: bool,
}

/// The budget for a device whose demand peaks at `peak` bytes: `--budget`,
/// else its capacity (less what a `memory_outside_allocator` finding says
/// was held outside the allocator), else (for a device with an OOM) what
/// `cudaMemGetInfo` said was free plus what PyTorch had reserved when the
/// first allocation failed; else none.
pub fn budget_for(device: &DeviceState<'_>, options: &PlanOptions, peak: u64) -> Option<Budget> {
    if let Some(b) = options.budget {
        return Some(Budget {
            bytes: b,
            source: "--budget".into(),
        });
    }
    if let Some(p) = options.budget_percent_of_peak {
        // A first step's plan is its next step's: so is the peak.
        let whose = if device.next_step {
            "the next step's predicted peak"
        } else {
            "the observed peak"
        };
        return Some(Budget {
            bytes: (peak as f64 * p / 100.0).round() as u64,
            source: format!("--budget {p}% of {whose} {}", h(peak)),
        });
    }
    if let Some((c, from)) = capacity(device.capacity_bytes, options) {
        // What was held outside the allocator at an OOM is not the
        // allocator's to use: the room is the capacity less it.
        let outside = device.outside_allocator_bytes.filter(|&b| b < c);
        return Some(match outside {
            Some(b) => Budget {
                bytes: c - b,
                source: format!(
                    "device memory ({from}) {} less {} held outside the allocator at the OOM",
                    h(c),
                    h(b)
                ),
            },
            None => Budget {
                bytes: c,
                source: format!("device memory ({from})"),
            },
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

/// Whether [`budget_for`] can find a budget before the device is analysed:
/// one given, the device's memory, or an OOM (whose free bytes may say
/// it). Without one no plan is made, so its evidence need not be gathered.
pub fn may_have_budget(options: &PlanOptions, capacity_bytes: Option<u64>, has_oom: bool) -> bool {
    options.budget.is_some()
        || options.budget_percent_of_peak.is_some()
        || capacity(capacity_bytes, options).is_some()
        || has_oom
}

/// The device's memory and where it was read: `--device-memory`, else the
/// trace's `deviceProperties` (`capacity_bytes`).
pub fn capacity(capacity_bytes: Option<u64>, options: &PlanOptions) -> Option<(u64, &'static str)> {
    match (options.device_memory, capacity_bytes) {
        (Some(m), _) => Some((m, "--device-memory")),
        (None, Some(c)) => Some((c, "deviceProperties")),
        (None, None) => None,
    }
}
