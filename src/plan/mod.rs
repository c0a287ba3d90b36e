//! The cut planner (DESIGN.md §6): summarise peak sources → plan cuts → recommend.
//!
//! Two modes share the same three steps:
//!
//! - **Component lists** (the seed's own input, [`components`]):
//!   `[{name, peak_gb, cuttable}]` and a target in decimal GB; a cut removes
//!   a whole component.
//! - **Traces**: a device's memory demand by category at every position of
//!   its timeline ([`demand::Demand`]) and the levers ([`levers`]), each
//!   scaling some categories by a factor. The search ([`search`]) applies
//!   one lever at a time and re-simulates the peak over the *whole* timeline
//!   after each (the peak can move); [`plan_for`] wraps it with the budget,
//!   headroom, verdict and reason that reports render, and returns the plan
//!   for the caller to put into the report.

pub mod components;
pub mod demand;
pub mod levers;
#[cfg(test)]
mod properties;
pub mod search;

use crate::model::Category;
use crate::schema::{DeviceReport, OomFinding, OomPlan, Plan, PlanStep, Verdict};
use crate::units::{human_bytes as h, parse_size, SizeError};

use demand::Demand;
use levers::{catalogue, Lever};
use search::{plan_timeline_cuts, Order, TimelineCuts};

const NCAT: usize = Category::ALL.len();

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
        "no lever applies:".to_owned()
    } else {
        format!("after {},", names.join(" + "))
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

/// The plan for one device of a report, or `None` when no budget is known
/// (see [`budget_for`]); `demand` is the device's, `describe` names a
/// position (`event N (phase)`). The caller puts it into the report.
pub fn plan_for(
    device: &DeviceReport,
    demand: &Demand,
    options: &PlanOptions,
    describe: &dyn Fn(usize) -> String,
) -> Option<Plan> {
    let budget = budget_for(device, options)?;
    let mut plan = plan_device(demand, &budget, options, describe);
    if let Some(oom) = device.ooms.first() {
        plan.oom_plan = Some(plan_oom(oom, plan.target_bytes, options));
    }
    Some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom() {
        assert_eq!(Headroom::parse("10%"), Ok(Headroom::Percent(10.0)));
        assert_eq!(Headroom::parse("2GiB"), Ok(Headroom::Bytes(2 << 30)));
        assert!(Headroom::parse("100%").is_err());
        assert_eq!(Headroom::Percent(10.0).bytes(1000), 100);
        assert_eq!(Headroom::Bytes(5000).bytes(1000), 1000);
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
