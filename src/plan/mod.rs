//! The cut planner (DESIGN.md §6): summarise peak sources → plan cuts → recommend.
//!
//! Public here: the plan's options ([`PlanOptions`], the budget and headroom
//! parsers), the levers ([`Lever`], [`parse_levers`]), the search order and
//! pools ([`Order`], [`Target`]), [`check_what_if`] and the seed's
//! [`components`] mode. The plan itself is part of the report:
//! [`crate::report::Plan`].
//!
//! Two modes share the same three steps:
//!
//! - **Component lists** (the seed's own input, [`components`]):
//!   `[{name, peak_gb, cuttable}]` and a target in decimal GB; a cut removes
//!   a whole component.
//! - **Traces**: a device's memory demand by category at every position of
//!   its timeline (`demand::Demand`) and the levers ([`Lever`]), each
//!   scaling some categories by a factor. The search (`search`) applies
//!   one lever at a time and re-simulates the peak over the *whole* timeline
//!   after each (the peak can move); `plan_for` wraps it with the budget,
//!   headroom, verdict and reason that reports render, and returns the plan
//!   for the caller to put into the report.

pub(crate) mod checkpointing;
pub mod components;
pub(crate) mod demand;
pub(crate) mod facts;
pub(crate) mod fp32;
pub(crate) mod kv_limit;
pub(crate) mod levers;
mod options;
pub(crate) mod pools;
#[cfg(test)]
mod properties;
pub(crate) mod search;
pub(crate) mod whatif;

use crate::model::Category;
use crate::schema::{ConsideredLever, Headline, OomFinding, OomPlan, Plan, PlanStep, Verdict};
use crate::units::human_bytes as h;

use demand::{Demand, Row};
use facts::{Check, RunFacts};
use pools::{pool_category, NPOOL};
use search::{Eligibility, Search, TimelineCuts};

pub use levers::{parse_levers, Condition, Cost, Lever, LeversError};
pub(crate) use options::{budget_for, capacity, may_have_budget, Budget, DeviceState};
pub use options::{
    parse_budget, parse_device_memory, parse_dp_ranks, parse_headroom, BudgetSpec, Headroom,
    PlanOptions,
};
pub use pools::Target;
pub use search::Order;
pub use whatif::check_what_if;

const NCAT: usize = Category::ALL.len();

/// What the run's evidence says about one lever.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    pub eligibility: Eligibility,
    /// The evidence for its conditions (or against the one that fails).
    pub because: String,
    /// The "if …" of a conditional lever.
    pub condition: Option<String>,
}

/// Decides a lever from the run's facts: excluded if a condition fails,
/// conditional if one is unknown, certain otherwise.
pub(crate) fn decide(lever: &Lever, facts: &RunFacts) -> Decision {
    let mut holds = Vec::new();
    let mut unknown = Vec::new();
    for c in &lever.when {
        match facts.check(*c) {
            Check::Fails(why) => {
                return Decision {
                    eligibility: Eligibility::Excluded,
                    because: why,
                    condition: None,
                }
            }
            Check::Holds(why) => holds.push(why),
            Check::Unknown { wording, because } => unknown.push((wording, because)),
        }
    }
    holds.dedup();
    if unknown.is_empty() {
        return Decision {
            eligibility: Eligibility::Certain,
            because: holds.join("; "),
            condition: None,
        };
    }
    let wording: Vec<&str> = unknown.iter().map(|(w, _)| w.as_str()).collect();
    let because: Vec<&str> = unknown.iter().map(|(_, b)| b.as_str()).collect();
    Decision {
        eligibility: Eligibility::Conditional,
        because: holds.join("; "),
        condition: Some(format!("{}: {}", wording.join(" and "), because.join("; "))),
    }
}

/// The smallest saving that makes a step: 1% of the peak, at least 1 B.
pub(crate) fn min_step(peak: u64) -> u64 {
    peak.div_ceil(100).max(1)
}

/// What one device's plan is made from.
pub(crate) struct PlanInput<'d> {
    pub demand: &'d Demand<'d>,
    pub facts: &'d RunFacts,
    /// Names a position (`event N (phase)`).
    pub describe: &'d dyn Fn(usize) -> String,
    /// The findings' fixes, in order: tried before any lever (they cost
    /// nothing), one at a time until the peak fits.
    pub fixes: &'d [Fix],
    /// The demand once fixes `0..=k` are applied, made only for the fixes
    /// the plan tries (see `whatif::edited_demand`).
    pub fixed_demand: &'d dyn Fn(usize) -> Demand<'d>,
    /// The demand once fixes `0..=k` (none for `None`) and the named
    /// levers of [`modelled_levers`] are applied, modelled from the run
    /// (see [`checkpointing::model`], [`kv_limit::model`],
    /// `whatif::holds_gradients`); their factors are the search's. `None`
    /// where the run does not show what one of them needs (no blocks, no
    /// growing cache, no gradient made afresh each step), and that lever is
    /// its factor alone.
    pub modelled_demand: &'d ModelledDemand<'d>,
}

/// See [`PlanInput::modelled_demand`].
pub(crate) type ModelledDemand<'d> = dyn Fn(Option<usize>, &[&str]) -> Option<Demand<'d>> + 'd;

/// [`PlanInput::modelled_demand`] where the run shows no structure.
#[cfg(test)]
pub(crate) fn no_modelled_demand<'d>(_: Option<usize>, _: &[&str]) -> Option<Demand<'d>> {
    None
}

/// A finding's fix as a plan step (see [`PlanInput::fixes`]).
pub(crate) struct Fix {
    pub lever: String,
    pub action: String,
    /// The finding's evidence, in one line.
    pub because: String,
    /// Why its saving is an estimate, if it is.
    pub estimate_reason: Option<String>,
}

/// [`PlanInput::fixed_demand`] where there are no fixes.
#[cfg(test)]
pub(crate) fn no_fixed_demand<'d>(_: usize) -> Demand<'d> {
    unreachable!("no fixes to apply")
}

/// Plans one device: runs [`search::plan_for_either_mode`] against budget − headroom
/// and writes the verdict and reason.
pub(crate) fn plan_device(input: &PlanInput<'_>, budget: &Budget, options: &PlanOptions) -> Plan {
    let catalogue = options.levers(input.facts);
    let headroom = options.headroom.bytes(budget.bytes);
    let target = budget.bytes - headroom;
    let (peak_before, pos_before) = input.demand.peak(&[1.0; NPOOL]);
    let min_step = min_step(peak_before);
    // The findings' fixes first, while the peak is over the target.
    let mut levers: Vec<Lever> = Vec::new();
    let mut decisions: Vec<Decision> = Vec::new();
    let mut fix_steps = Vec::new();
    let mut estimates = Vec::new();
    let mut fixed_demand: Option<Demand> = None;
    let mut applied_demand: Option<Demand> = None;
    let (mut peak, mut pos) = (peak_before, pos_before);
    let mut last_fix = None;
    for (k, fix) in input.fixes.iter().enumerate() {
        if peak <= target {
            break;
        }
        let tried = fixed_demand.insert((input.fixed_demand)(k));
        let (after, at) = tried.peak(&[1.0; NPOOL]);
        if peak.saturating_sub(after) < min_step {
            continue;
        }
        fix_steps.push(search::TimelineStep {
            lever: levers.len(),
            saved_bytes: peak - after,
            peak_after_bytes: after,
            position: at,
            factors: [1.0; NPOOL],
        });
        estimates.push(fix.estimate_reason.clone());
        levers.push(Lever {
            name: fix.lever.clone(),
            scales: Default::default(),
            cost: levers::Cost::Free,
            action: fix.action.clone(),
            when: Vec::new(),
            tradeoff: String::new(),
        });
        decisions.push(Decision {
            eligibility: Eligibility::Certain,
            because: fix.because.clone(),
            condition: None,
        });
        applied_demand = fixed_demand.take();
        last_fix = Some(k);
        (peak, pos) = (after, at);
    }
    let demand: &Demand = applied_demand.as_ref().unwrap_or(input.demand);
    let fixed = levers.len();
    decisions.extend(catalogue.iter().map(|l| decide(l, input.facts)));
    levers.extend(catalogue);
    // The levers modelled from the run (checkpointing from the run's
    // blocks and the first micro-batch's gradients in training, half the
    // new tokens from the cache's growth otherwise): each demand made only
    // when the search tries it, by the mask of those applied.
    let training = input.facts.mode.value == Some(facts::Mode::Training);
    let names: Vec<(&str, usize, bool)> = modelled_levers(training)
        .iter()
        .filter_map(|&(name, keeps)| {
            let i = levers[fixed..].iter().position(|l| l.name == name)?;
            Some((name, i, keeps))
        })
        .collect();
    let modelled_at: Vec<(usize, bool)> = names.iter().map(|&(_, i, k)| (i, k)).collect();
    let made: Vec<std::cell::OnceCell<Option<Demand>>> = (0..1usize << names.len())
        .map(|_| Default::default())
        .collect();
    let get = |mask: u8| {
        made[mask as usize]
            .get_or_init(|| {
                let applied: Vec<&str> = (0..names.len())
                    .filter(|j| mask & (1 << j) != 0)
                    .map(|j| names[j].0)
                    .collect();
                (input.modelled_demand)(last_fix, &applied)
            })
            .as_ref()
    };
    let modelled = search::Modelled {
        levers: &modelled_at,
        demand: &get,
    };
    let mut cuts = run_search(
        demand,
        &levers[fixed..],
        &decisions[fixed..],
        target,
        options.order,
        min_step,
        Some(modelled).filter(|m| !m.levers.is_empty()),
    );
    // What the last steps scale: the modelled levers' demand once they are steps.
    let demand = match cuts.modelled_mask {
        0 => demand,
        mask => made[mask as usize]
            .get()
            .and_then(Option::as_ref)
            .unwrap_or(demand),
    };
    if fixed > 0 {
        for s in &mut cuts.steps {
            s.lever += fixed;
        }
        for l in &mut cuts.leftovers {
            l.lever += fixed;
        }
        fix_steps.append(&mut cuts.steps);
        cuts.steps = fix_steps;
        cuts.peak_before_bytes = peak_before;
        cuts.peak_before_position = pos_before;
        if cuts.steps.len() == fixed && peak <= target {
            cuts.estimated_peak_bytes = peak;
            cuts.final_position = pos;
        }
    }
    let mut steps = plan_steps(&cuts, &levers, &decisions, input.facts, input.describe);
    for (step, why) in steps.iter_mut().zip(estimates) {
        if let Some(why) = why {
            step.estimate = true;
            step.estimate_reason = Some(why);
        }
    }
    let (verdict, gap, reason) = verdict_and_reason(
        demand,
        &cuts,
        &levers,
        &decisions,
        &steps,
        target,
        input.facts,
    );
    let cache_estimated = input.facts.reserved_estimate.is_some()
        && input
            .demand
            .scaled_at(cuts.peak_before_position, &[1.0; NPOOL])[Category::AllocatorCache.index()]
            > 0;
    let (estimate, estimate_reason) = plan_estimate(cache_estimated, input.facts, &steps);
    Plan {
        budget_bytes: budget.bytes,
        headroom_bytes: headroom,
        target_bytes: target,
        headline: Some(Headline {
            about: "peak".into(),
            verdict,
            reason: reason.clone(),
            estimate,
        }),
        peak_before_bytes: cuts.peak_before_bytes,
        steps,
        estimated_peak_bytes: cuts.estimated_peak_bytes,
        verdict,
        reason,
        budget_source: budget.source.clone(),
        peak_before_at: (input.describe)(cuts.peak_before_position),
        gap_bytes: gap,
        oom_plan: None,
        estimate,
        estimate_reason,
        min_step_bytes: min_step,
        considered: considered(&cuts, &levers, &decisions, min_step),
        facts: input.facts.lines(),
    }
}

/// The catalogue's levers the plan prices with the run's own model
/// ([`PlanInput::modelled_demand`]), and whether their factors still scale
/// it: in training checkpointing (its model replaces its factor) and
/// halving the micro-batch (the first micro-batch's gradients held beside
/// its factor, where gradients are freed between steps); otherwise half
/// the new tokens.
pub(crate) fn modelled_levers(training: bool) -> &'static [(&'static str, bool)] {
    if training {
        &[
            (whatif::CHECKPOINTING, false),
            (whatif::HALVE_MICRO_BATCH, true),
        ]
    } else {
        &[(whatif::KV_LIMIT, false)]
    }
}

fn run_search<'d>(
    demand: &'d Demand<'d>,
    levers: &[Lever],
    decisions: &[Decision],
    target: u64,
    order: Order,
    min_step: u64,
    modelled: Option<search::Modelled<'_, 'd>>,
) -> TimelineCuts {
    let eligibility: Vec<Eligibility> = decisions.iter().map(|d| d.eligibility).collect();
    search::plan_for_either_mode(
        demand,
        &Search {
            levers,
            eligibility: &eligibility,
            target,
            order,
            min_step,
            modelled,
        },
    )
}

/// Whether the verdict rests on an estimate, and why: each distinct reason
/// once (the peak's cache, or what a step cuts).
fn plan_estimate(
    cache_estimated: bool,
    facts: &RunFacts,
    steps: &[PlanStep],
) -> (bool, Option<String>) {
    let mut why: Vec<String> = Vec::new();
    if cache_estimated {
        if let Some(r) = &facts.reserved_estimate {
            why.push(r.clone());
        }
    }
    for s in steps {
        for r in s.estimate_reason.iter().flat_map(|r| r.split("; ")) {
            if !why.iter().any(|w| w == r) {
                why.push(r.to_owned());
            }
        }
    }
    (!why.is_empty(), (!why.is_empty()).then(|| why.join("; ")))
}

/// Plans the failed instant of an OOM against `target`: `row` is the
/// demand by pool just before the failure (its `allocator_cache` ignored:
/// the cache at that instant comes from the finding).
pub(crate) fn plan_oom(
    oom: &OomFinding,
    row: &Row,
    target: u64,
    options: &PlanOptions,
    facts: &RunFacts,
) -> OomPlan {
    let mut row = *row;
    let cache = Category::AllocatorCache.index();
    row[cache] = oom
        .reserved_bytes
        .map_or(0, |r| r.saturating_sub(oom.allocated_bytes));
    row[Category::Unknown.index()] += oom.requested_bytes;
    let demand = Demand::from_rows(vec![row]);
    let levers = options.levers(facts);
    let decisions: Vec<Decision> = levers.iter().map(|l| decide(l, facts)).collect();
    let demand_bytes: u64 = row.iter().sum();
    let min_step = min_step(demand_bytes);
    let cuts = run_search(
        &demand,
        &levers,
        &decisions,
        target,
        options.order,
        min_step,
        None,
    );
    let at = format!("OOM at event {}", oom.event_index);
    let steps = plan_steps(&cuts, &levers, &decisions, facts, &|_| at.clone());
    let (verdict, gap, mut reason) =
        verdict_and_reason(&demand, &cuts, &levers, &decisions, &steps, target, facts);
    let what = if row[cache] > 0 {
        format!(
            "allocated + the allocator cache ({}) + the {} request",
            h(row[cache]),
            h(oom.requested_bytes)
        )
    } else {
        format!("allocated + the {} request", h(oom.requested_bytes))
    };
    reason = match verdict {
        Verdict::Fits => format!(
            "{what} = {} is within the target {}: a larger device or other processes' memory explain the failure; see the OOM finding",
            h(demand_bytes),
            h(target)
        ),
        _ => format!("{what} = {}; {reason}", h(demand_bytes)),
    };
    let (estimate, estimate_reason) = plan_estimate(false, facts, &steps);
    OomPlan {
        event_index: oom.event_index,
        requested_bytes: oom.requested_bytes,
        demand_bytes,
        steps,
        estimated_peak_bytes: cuts.estimated_peak_bytes,
        verdict,
        gap_bytes: gap,
        reason,
        estimate,
        estimate_reason,
    }
}

fn plan_steps(
    cuts: &TimelineCuts,
    levers: &[Lever],
    decisions: &[Decision],
    facts: &RunFacts,
    describe: &dyn Fn(usize) -> String,
) -> Vec<PlanStep> {
    let mut previous = cuts.peak_before_position;
    cuts.steps
        .iter()
        .map(|s| {
            let lever = &levers[s.lever];
            let decision = &decisions[s.lever];
            let estimate_reason = step_estimate(lever, facts);
            let step = PlanStep {
                lever: lever.name.clone(),
                action: lever.action.clone(),
                cost: lever.cost.as_str().to_owned(),
                categories: lever.categories(),
                saved_bytes: s.saved_bytes,
                peak_after_bytes: s.peak_after_bytes,
                peak_moved_to: describe(s.position),
                scales: lever.scales.iter().map(|(t, f)| (t.category, *f)).collect(),
                peak_event_index: s.position.saturating_sub(1) as u64,
                peak_moved: s.position != previous,
                targets: lever
                    .scales
                    .iter()
                    .map(|(t, f)| (t.to_string(), *f))
                    .collect(),
                because: decision.because.clone(),
                condition: decision.condition.clone(),
                tradeoff: (!lever.tradeoff.is_empty()).then(|| lever.tradeoff.clone()),
                estimate: estimate_reason.is_some(),
                estimate_reason,
            };
            previous = s.position;
            step
        })
        .collect()
}

/// Why a lever's saving rests on an estimate: it cuts the allocator cache
/// and reserved memory is a dump-time value, or it cuts a category whose
/// bytes at the peak are partly inferred.
fn step_estimate(lever: &Lever, facts: &RunFacts) -> Option<String> {
    let mut why = Vec::new();
    for c in lever.categories() {
        if c == Category::AllocatorCache {
            if let Some(r) = &facts.reserved_estimate {
                why.push(r.clone());
            }
        }
        if let Some((_, r)) = facts.inferred.iter().find(|(ic, _)| *ic == c) {
            why.push(format!("{c} at the peak: {r}"));
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// The eligible levers that are not steps, and those the evidence rules
/// out, with why.
fn considered(
    cuts: &TimelineCuts,
    levers: &[Lever],
    decisions: &[Decision],
    min_step: u64,
) -> Vec<ConsideredLever> {
    if cuts.leftovers.is_empty() && cuts.steps.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for l in &cuts.leftovers {
        let name = levers[l.lever].name.clone();
        let (outcome, reason) = if l.contribution == 0 {
            (
                "no_effect",
                "nothing it cuts is live at the peak".to_owned(),
            )
        } else if l.saved_bytes == 0 {
            (
                "negligible",
                "does not lower the peak: another instant is as high".to_owned(),
            )
        } else if l.saved_bytes < min_step {
            (
                "negligible",
                format!(
                    "would lower the peak by {}, less than 1% of it",
                    h(l.saved_bytes)
                ),
            )
        } else {
            continue;
        };
        out.push(ConsideredLever {
            lever: name,
            outcome: outcome.into(),
            reason,
            saved_bytes: l.saved_bytes,
        });
    }
    // Levers the search set aside because they assume the other mode (the
    // trace does not tell training from inference: see
    // `search::plan_for_either_mode`).
    for (i, (lever, d)) in levers.iter().zip(decisions).enumerate() {
        let listed =
            cuts.steps.iter().any(|s| s.lever == i) || cuts.leftovers.iter().any(|l| l.lever == i);
        if listed || d.eligibility != Eligibility::Conditional {
            continue;
        }
        let (assumes, plan) = if lever.when.contains(&levers::Condition::Training) {
            ("a training run", "inference")
        } else if lever.when.contains(&levers::Condition::Inference) {
            ("inference", "a training run")
        } else {
            continue;
        };
        out.push(ConsideredLever {
            lever: lever.name.clone(),
            outcome: "not_applicable".into(),
            reason: format!(
                "assumes {assumes}; this plan assumes {plan} (the trace does not tell which: both were planned, this one kept)"
            ),
            saved_bytes: 0,
        });
    }
    for (lever, d) in levers.iter().zip(decisions) {
        if d.eligibility == Eligibility::Excluded {
            out.push(ConsideredLever {
                lever: lever.name.clone(),
                outcome: "not_applicable".into(),
                reason: d.because.clone(),
                saved_bytes: 0,
            });
        }
    }
    out
}

fn verdict_and_reason(
    demand: &Demand,
    cuts: &TimelineCuts,
    levers: &[Lever],
    decisions: &[Decision],
    steps: &[PlanStep],
    target: u64,
    facts: &RunFacts,
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
    let conditions: Vec<String> = steps
        .iter()
        .filter_map(|s| {
            s.condition
                .as_ref()
                .map(|c| format!("{} rests on {c}", s.lever))
        })
        .collect();
    let conditional = if conditions.is_empty() {
        String::new()
    } else {
        format!(" — only if that holds: {}", conditions.join("; "))
    };
    if cuts.estimated_peak_bytes <= target {
        return (
            Verdict::FitsAfterCuts,
            0,
            format!(
                "{} bring{} the peak from {} to {}, within the target {}{conditional}",
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
    let mut by_category = [0u64; NCAT];
    for (pool, b) in left.iter().enumerate() {
        by_category[pool_category(pool).index()] += b;
    }
    let (largest, bytes) = Category::ALL
        .into_iter()
        .map(|c| (c, by_category[c.index()]))
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .unwrap_or((Category::Unknown, 0));
    let after = if names.is_empty() {
        "with no lever that lowers it by 1% or more,".to_owned()
    } else {
        format!("after {},", names.join(" + "))
    };
    let sharding_could = facts.dp_ranks() <= 1
        && facts.mode.value != Some(facts::Mode::Inference)
        && matches!(
            largest,
            Category::Parameter | Category::Gradient | Category::OptimizerState
        );
    let hint =
        if sharding_could {
            "; with more GPUs, pass --dp-ranks N to plan sharding".to_owned()
        } else if !levers.iter().zip(decisions).any(|(l, d)| {
            d.eligibility != Eligibility::Excluded && l.categories().contains(&largest)
        }) {
            "; no lever that applies shrinks it".to_owned()
        } else {
            String::new()
        };
    (
        Verdict::DoesNotFit,
        gap,
        format!(
            "{after} the peak is still {}; the largest part left is {} ({}){hint}{conditional}",
            if h(cuts.estimated_peak_bytes) == h(target) {
                // Equal-looking numbers either side of the verdict: the gap in bytes.
                format!(
                    "{gap} B over the target {} (within rounding of it)",
                    h(target)
                )
            } else {
                format!(
                    "{}, {} over the target {}",
                    h(cuts.estimated_peak_bytes),
                    h(gap),
                    h(target)
                )
            },
            largest,
            h(bytes)
        ),
    )
}

/// The plan for one device of a report, or `None` when no budget is known
/// (see [`budget_for`]). The caller puts it into the report.
pub(crate) fn plan_for(
    device: &DeviceState<'_>,
    input: &PlanInput<'_>,
    options: &PlanOptions,
) -> Option<Plan> {
    let (peak, _) = input.demand.peak(&[1.0; NPOOL]);
    let budget = budget_for(device, options, peak)?;
    let mut plan = plan_device(input, &budget, options);
    if let Some(oom) = device.ooms.first() {
        let row = input
            .demand
            .scaled_at(oom.event_index as usize, &[1.0; NPOOL]);
        let oom_plan = plan_oom(oom, &row, plan.target_bytes, options, input.facts);
        plan.headline = Some(Headline {
            about: "oom".into(),
            verdict: oom_plan.verdict,
            reason: format!(
                "at the OOM (event {}): {}",
                oom.event_index, oom_plan.reason
            ),
            estimate: oom_plan.estimate,
        });
        plan.oom_plan = Some(oom_plan);
    }
    Some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI and Python take budgets and headrooms through these, so both
    /// refuse the same values with the same words.
    #[test]
    fn budgets_and_headrooms_are_refused_alike() {
        let err = |r: Result<(), String>| r.unwrap_err();
        assert_eq!(
            parse_budget("80%").unwrap(),
            BudgetSpec::PercentOfPeak(80.0)
        );
        assert_eq!(parse_budget("2MiB").unwrap(), BudgetSpec::Bytes(2 << 20));
        assert!(parse_budget("40")
            .unwrap_err()
            .to_string()
            .contains("has no unit and is under a MiB"));
        for bad in ["0%", "1001%"] {
            assert_eq!(
                parse_budget(bad).unwrap_err().to_string(),
                format!("budget `{bad}` must be more than 0% and at most 1000% of the peak")
            );
        }
        assert!(parse_headroom("10")
            .unwrap_err()
            .to_string()
            .contains("has no unit"));
        assert_eq!(parse_headroom("0").unwrap(), Headroom::Bytes(0));
        assert!(parse_headroom("-1MiB")
            .unwrap_err()
            .to_string()
            .contains("cannot be negative"));
        let mut o = PlanOptions::default();
        assert_eq!(
            err(o.set_budget_and_headroom(Some(BudgetSpec::Bytes(1 << 30)), Headroom::Bytes(2 << 30))),
            "--headroom 2.00 GiB leaves nothing of --budget 1.00 GiB: the headroom must be smaller than the budget"
        );
        o.set_budget_and_headroom(
            Some(BudgetSpec::PercentOfPeak(80.0)),
            Headroom::Bytes(2 << 30),
        )
        .unwrap();
        assert_eq!(o.budget_percent_of_peak, Some(80.0));
    }
    use facts::Mode;

    #[test]
    fn headroom_and_budget_specs() {
        assert_eq!(Headroom::parse("10%"), Ok(Headroom::Percent(10.0)));
        assert_eq!(Headroom::parse("2GiB"), Ok(Headroom::Bytes(2 << 30)));
        assert!(Headroom::parse("100%").is_err());
        assert_eq!(Headroom::Percent(10.0).bytes(1000), 100);
        assert_eq!(Headroom::Bytes(5000).bytes(1000), 1000);
        assert_eq!(
            BudgetSpec::parse("80%"),
            Ok(BudgetSpec::PercentOfPeak(80.0))
        );
        assert_eq!(BudgetSpec::parse(" 2GiB "), Ok(BudgetSpec::Bytes(2 << 30)));
        assert!(BudgetSpec::parse("0%").is_err());
        assert!(BudgetSpec::parse("-5%").is_err());
        assert!(BudgetSpec::parse("x%").is_err());
        assert!(BudgetSpec::parse("2000%").is_err());
        assert_eq!(min_step(0), 1);
        assert_eq!(min_step(1000), 10);
        assert_eq!(min_step(1001), 11);
    }

    fn plan(demand: &Demand, facts: &RunFacts, budget: u64) -> Plan {
        let describe = |p: usize| format!("position {p}");
        let input = PlanInput {
            demand,
            facts,
            describe: &describe,
            fixes: &[],
            fixed_demand: &no_fixed_demand,
            modelled_demand: &no_modelled_demand,
        };
        let budget = Budget {
            bytes: budget,
            source: "test".into(),
        };
        plan_device(&input, &budget, &PlanOptions::default())
    }

    #[test]
    fn verdicts_for_a_device() {
        let demand = Demand::from_series(&[
            (Category::Parameter, vec![600, 600]),
            (Category::Activation, vec![0, 400]),
        ]);
        let training = RunFacts::for_tests(Some(Mode::Training));
        let fits = plan(&demand, &training, 2000);
        assert_eq!(fits.verdict, Verdict::Fits);
        assert_eq!(fits.target_bytes, 1800);
        assert!(fits.steps.is_empty() && fits.considered.is_empty());
        let after = plan(&demand, &training, 1000);
        assert_eq!(after.verdict, Verdict::FitsAfterCuts, "{after:?}");
        assert_eq!(after.steps[0].lever, "halve_micro_batch");
        assert!(
            after.steps[0].because.starts_with("training run"),
            "{:?}",
            after.steps[0]
        );
        assert_eq!(after.estimated_peak_bytes, 800);
        let nope = plan(&demand, &training, 300);
        assert_eq!(nope.verdict, Verdict::DoesNotFit);
        assert_eq!(
            nope.gap_bytes,
            nope.estimated_peak_bytes - nope.target_bytes
        );
        assert!(nope.reason.contains("--dp-ranks"), "{}", nope.reason);
        // The weights' dtype is unknown: bf16_weights is conditional, last, and says so.
        let last = nope.steps.last().unwrap();
        assert_eq!(last.lever, "bf16_weights");
        assert!(
            last.condition
                .as_deref()
                .unwrap()
                .starts_with("if the weights are fp32"),
            "{last:?}"
        );
        assert!(
            nope.reason.contains("only if that holds"),
            "{}",
            nope.reason
        );
        // Inference: no training lever, and those are listed as not applicable.
        let inference = RunFacts::for_tests(Some(Mode::Inference));
        let inf = plan(&demand, &inference, 1000);
        let names: Vec<&str> = inf.steps.iter().map(|s| s.lever.as_str()).collect();
        assert_eq!(names[0], "halve_batch", "{names:?}");
        for lever in [
            "halve_micro_batch",
            "activation_checkpointing",
            "optimizer_8bit",
        ] {
            assert!(!names.contains(&lever));
            let c = inf.considered.iter().find(|c| c.lever == lever).unwrap();
            assert_eq!(c.outcome, "not_applicable");
            assert!(c.reason.starts_with("not a training run"), "{c:?}");
        }
    }

    #[test]
    fn a_serving_engine_s_kv_pool_is_cut_by_its_share_not_its_dtype() {
        let demand = Demand::from_series(&[
            (Category::Parameter, vec![100, 100]),
            (Category::KvCache, vec![800, 800]),
        ]);
        let mut engine = RunFacts::for_tests(Some(Mode::Inference));
        engine.kv_pool = facts::Fact {
            value: Some(true),
            because: "vLLM".into(),
        };
        let p = plan(&demand, &engine, 800);
        let names: Vec<&str> = p.steps.iter().map(|s| s.lever.as_str()).collect();
        assert_eq!(names, ["kv_cache_pool"]);
        for lever in ["kv_cache_quantization", "kv_cache_limit", "bf16_weights"] {
            let c = p.considered.iter().find(|c| c.lever == lever).unwrap();
            assert_eq!(c.outcome, "not_applicable", "{c:?}");
        }
        // Without an engine the KV cache grows with the tokens: its dtype,
        // its length and the sequences (half the batch halves it too) are
        // the levers, and the pool lever does not apply.
        let generate = RunFacts::for_tests(Some(Mode::Inference));
        let p = plan(&demand, &generate, 800);
        assert!(
            ["halve_batch", "kv_cache_quantization"].contains(&p.steps[0].lever.as_str()),
            "{:?}",
            p.steps
        );
        assert!(p.considered.iter().any(|c| c.lever == "kv_cache_pool"));
    }

    #[test]
    fn oom_plan_counts_the_request_and_the_cache() {
        let oom = OomFinding {
            event_index: 0,
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
        let mut row = [0u64; NPOOL];
        row[Category::Parameter.index()] = 400;
        row[Category::Activation.index()] = 500;
        let training = RunFacts::for_tests(Some(Mode::Training));
        let plan = plan_oom(&oom, &row, 1000, &PlanOptions::default(), &training);
        assert_eq!(plan.demand_bytes, 1300);
        assert_eq!(plan.verdict, Verdict::FitsAfterCuts);
        assert_eq!(plan.steps[0].lever, "expandable_segments");
        assert_eq!(plan.steps[1].lever, "halve_micro_batch");
        assert_eq!(plan.estimated_peak_bytes, 970);
        assert!(plan.reason.contains("allocator cache"), "{}", plan.reason);
        let fits = plan_oom(&oom, &row, 1500, &PlanOptions::default(), &training);
        assert_eq!(fits.verdict, Verdict::Fits);
        assert!(fits.reason.contains("within the target"), "{}", fits.reason);
    }
}
