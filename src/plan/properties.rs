//! Properties of the cut planner (DESIGN.md §6), checked against a naive
//! re-simulation: for every position, sum the live allocations by pool,
//! scale, add the scaled allocator overhead (reserved peak − allocated
//! peak), take the maximum.

use proptest::prelude::*;

use super::components::{plan_memory_cuts, Component};
use super::demand::{scale, Demand};
use super::facts::{Mode, RunFacts};
use super::levers::{catalogue, combined_factors, Lever};
use super::pools::{Overlay, Part, NPOOL};
use super::search::{plan_timeline_cuts, Eligibility, Order, Search};
use super::{min_step, plan_device, Budget, Headroom, PlanInput, PlanOptions};
use crate::model::Category;
use crate::schema::Verdict;
use crate::timeline::{curve, DeviceTimeline, Interval, Origin, Replay, Steps};

const NCAT: usize = Category::ALL.len();

/// The `i`th category the classifier assigns to allocations (all but the
/// cache, which comes from reserved − allocated); `i < NCAT - 1`.
fn tensor_category(i: usize) -> Category {
    Category::ALL
        .into_iter()
        .filter(|c| *c != Category::AllocatorCache)
        .nth(i)
        .expect("in range")
}

/// The part of a category an interval may be moved into.
fn part_of(c: Category) -> Option<Part> {
    Part::ALL.into_iter().find(|p| p.category() == c)
}

#[derive(Debug)]
struct Case {
    positions: u32,
    /// (start, end, size, category, in its category's part)
    intervals: Vec<(u32, u32, u64, Category, bool)>,
    cache: Option<Vec<u64>>,
}

fn case() -> impl Strategy<Value = Case> {
    (2u32..40).prop_flat_map(|positions| {
        let interval = (
            0..positions,
            1..=positions,
            1u64..1_000_000,
            0..NCAT - 1,
            any::<bool>(),
        )
            .prop_map(move |(start, len, size, c, part)| {
                let end = (start + len).min(positions);
                let c = tensor_category(c);
                (
                    start,
                    end.max(start + 1),
                    size,
                    c,
                    part && part_of(c).is_some(),
                )
            });
        (
            prop::collection::vec(interval, 0..30),
            prop::option::of(prop::collection::vec(0u64..2_000_000, positions as usize)),
        )
            .prop_map(move |(intervals, cache)| Case {
                positions,
                intervals,
                cache,
            })
    })
}

fn timeline(case: &Case) -> DeviceTimeline {
    let intervals: Vec<Interval> = case
        .intervals
        .iter()
        .map(|&(start, end, size, ..)| Interval {
            addr: 0,
            size,
            site: 0,
            start,
            end,
            origin: Origin::Traced,
            given: None,
        })
        .collect();
    let allocated = curve(&intervals, case.positions);
    let reserved = case.cache.as_ref().map(|extra| {
        allocated
            .iter()
            .zip(extra)
            .map(|(a, e)| a + e)
            .collect::<Steps>()
    });
    DeviceTimeline::new(
        Replay {
            events: case.positions - 1,
            intervals,
            allocated,
            reserved,
            baseline_bytes: 0,
            diagnostics: Vec::new(),
            ooms: Vec::new(),
            timestamped: false,
        },
        |i| case.intervals[i].3,
    )
}

/// The intervals marked as in a part, as an overlay.
fn overlay(case: &Case) -> Overlay {
    let mut o = Overlay::default();
    for &(start, end, size, c, part) in &case.intervals {
        if let (true, Some(p)) = (part, part_of(c)) {
            o.enter.push((start, p, size as i64));
            if end < case.positions {
                o.leave.push((end, p, -(size as i64)));
            }
        }
    }
    o.enter.sort_by_key(|c| c.0);
    o.leave.sort_by_key(|c| c.0);
    o
}

/// The allocator's overhead: reserved peak − allocated peak.
fn overhead(case: &Case) -> u64 {
    let Some(extra) = &case.cache else { return 0 };
    let allocated: Vec<u64> = (0..case.positions)
        .map(|p| {
            case.intervals
                .iter()
                .filter(|i| i.0 <= p && p < i.1)
                .map(|i| i.2)
                .sum()
        })
        .collect();
    let reserved = allocated.iter().zip(extra).map(|(a, e)| a + e).max();
    reserved.unwrap_or(0) - allocated.iter().max().copied().unwrap_or(0)
}

/// The peak of the scaled demand, the slow way: every position, every interval.
fn naive_peak(case: &Case, factors: &[f64; NPOOL]) -> u64 {
    let cache = scale(overhead(case), factors[Category::AllocatorCache.index()]);
    (0..case.positions)
        .map(|p| {
            let mut by = [0u64; NPOOL];
            for &(start, end, size, c, part) in &case.intervals {
                if start <= p && p < end {
                    let pool = match (part, part_of(c)) {
                        (true, Some(part)) => part.pool(),
                        _ => c.index(),
                    };
                    by[pool] += size;
                }
            }
            (0..NPOOL)
                .map(|pool| scale(by[pool], factors[pool]))
                .sum::<u64>()
                + cache
        })
        .max()
        .unwrap_or(0)
}

fn levers_for(dp_ranks: u32, custom: bool) -> Vec<Lever> {
    let mut levers: Vec<Lever> = if custom {
        // Levers that overlap, name parts and can zero a pool.
        serde_json::from_str(
            r#"[{"name": "a", "scales": {"activation": 0.0, "temporary": 0.9}, "cost": "costs compute", "action": "a"},
                {"name": "b", "scales": {"parameter": 0.33, "gradient.kept_across_steps": 0.0}, "cost": "free", "action": "b"},
                {"name": "c", "scales": {"allocator_cache": 0.1, "activation.saved_for_backward": 0.5, "temporary.other": 0.5}, "cost": "cheap", "action": "c"}]"#,
        )
        .unwrap()
    } else {
        catalogue(dp_ranks, dp_ranks % 2 == 0, false)
    };
    // Every lever applies here: conditions are tested elsewhere.
    for l in &mut levers {
        l.when.clear();
    }
    levers
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn planned_peaks_match_a_naive_replay(
        case in case(),
        dp_ranks in 1u32..9,
        custom in any::<bool>(),
        largest in any::<bool>(),
        target_share in 0.0f64..1.2,
    ) {
        let tl = timeline(&case);
        let demand = Demand::from_timeline(&tl, overlay(&case));
        let levers = levers_for(dp_ranks, custom);
        let eligibility = vec![Eligibility::Certain; levers.len()];
        let before = naive_peak(&case, &[1.0; NPOOL]);
        let target = (before as f64 * target_share) as u64;
        let order = if largest { Order::Largest } else { Order::Cheapest };
        let min = min_step(before);
        let search = Search { levers: &levers, eligibility: &eligibility, target, order, min_step: min, modelled: None };
        let cuts = plan_timeline_cuts(&demand, &search);

        // The re-simulated peak equals the naive replay, before and after every step.
        prop_assert_eq!(cuts.peak_before_bytes, before);
        for step in &cuts.steps {
            prop_assert_eq!(step.peak_after_bytes, naive_peak(&case, &step.factors));
        }
        prop_assert_eq!(cuts.estimated_peak_bytes, naive_peak(&case, &cuts.final_factors));

        // Every step lowers the peak by at least 1% of it, or closes what
        // was left of the gap (never 0 B); the savings add up to the total
        // reduction.
        let mut peak = cuts.peak_before_bytes;
        for step in &cuts.steps {
            let gap = peak.saturating_sub(target);
            prop_assert!(step.saved_bytes >= min.min(gap) && step.saved_bytes > 0);
            if step.saved_bytes < min {
                prop_assert!(step.peak_after_bytes <= target);
            }
            prop_assert_eq!(step.saved_bytes, peak - step.peak_after_bytes);
            peak = step.peak_after_bytes;
        }
        let saved: u64 = cuts.steps.iter().map(|s| s.saved_bytes).sum();
        prop_assert_eq!(saved, cuts.peak_before_bytes - cuts.estimated_peak_bytes);

        // The plan stops at the first step that reaches the target.
        if cuts.peak_before_bytes <= target {
            prop_assert!(cuts.steps.is_empty());
        }
        if let Some((last, rest)) = cuts.steps.split_last() {
            for step in rest {
                prop_assert!(step.peak_after_bytes > target);
            }
            prop_assert_eq!(last.peak_after_bytes, cuts.estimated_peak_bytes);
        }
        // Each lever at most once.
        let mut used: Vec<usize> = cuts.steps.iter().map(|s| s.lever).collect();
        used.sort();
        used.dedup();
        prop_assert_eq!(used.len(), cuts.steps.len());
        // Stopping short of the target means no unused lever lowers the
        // peak by 1% or more; the leftovers say what each would save.
        if cuts.estimated_peak_bytes > target {
            for (i, lever) in levers.iter().enumerate() {
                if cuts.steps.iter().any(|s| s.lever == i) {
                    continue;
                }
                // Levers combine as the search combines them (`combined_factors`).
                let mut with: Vec<&Lever> = cuts.steps.iter().map(|s| &levers[s.lever]).collect();
                with.push(lever);
                // (With one applied, another can raise the peak: halving the
                // micro-batch after set_to_none keeps the gradients again.)
                let after = naive_peak(&case, &combined_factors(&with).0);
                let saves = cuts.estimated_peak_bytes.saturating_sub(after);
                prop_assert!(saves < min, "{} would save {}", lever.name, saves);
                let left = cuts.leftovers.iter().find(|l| l.lever == i).unwrap();
                prop_assert_eq!(left.saved_bytes, saves);
            }
        }

        // The device plan agrees with the cuts and the verdict with the numbers.
        let options = PlanOptions {
            dp_ranks,
            levers: Some(levers.clone()),
            order,
            headroom: Headroom::Bytes(0),
            ..PlanOptions::default()
        };
        let facts = RunFacts::for_tests(Some(Mode::Training));
        let describe = |p: usize| format!("p{p}");
        let input = PlanInput { demand: &demand, facts: &facts, describe: &describe, fixes: &[], fixed_demand: &super::no_fixed_demand, modelled_demand: &super::no_modelled_demand };
        let p = plan_device(&input, &Budget { bytes: target, source: "test".into() }, &options);
        prop_assert_eq!(p.target_bytes, target);
        prop_assert_eq!(p.estimated_peak_bytes, cuts.estimated_peak_bytes);
        prop_assert_eq!(p.steps.len(), cuts.steps.len());
        prop_assert_eq!(p.min_step_bytes, min);
        let verdict = if cuts.peak_before_bytes <= target {
            Verdict::Fits
        } else if cuts.estimated_peak_bytes <= target {
            Verdict::FitsAfterCuts
        } else {
            Verdict::DoesNotFit
        };
        prop_assert_eq!(p.verdict, verdict);
        prop_assert_eq!(p.gap_bytes, cuts.estimated_peak_bytes.saturating_sub(target));
    }

    #[test]
    fn nothing_cuttable_does_not_fit_with_the_gap(
        sizes in prop::collection::vec(1u64..1_000_000_000, 1..50),
        dp_ranks in 1u32..9,
        largest in any::<bool>(),
        target_share in 0.0f64..0.99,
        mode in prop_oneof![Just(None), Just(Some(Mode::Training)), Just(Some(Mode::Inference))],
    ) {
        // Only `unknown` memory: no lever in the catalogue touches it.
        let demand = Demand::from_series(&[(Category::Unknown, sizes.clone())]);
        let peak = *sizes.iter().max().unwrap();
        let target = (peak as f64 * target_share) as u64;
        let options = PlanOptions {
            dp_ranks,
            order: if largest { Order::Largest } else { Order::Cheapest },
            headroom: Headroom::Bytes(0),
            ..PlanOptions::default()
        };
        let facts = RunFacts::for_tests(mode);
        let describe = |p: usize| format!("p{p}");
        let input = PlanInput { demand: &demand, facts: &facts, describe: &describe, fixes: &[], fixed_demand: &super::no_fixed_demand, modelled_demand: &super::no_modelled_demand };
        let p = plan_device(&input, &Budget { bytes: target, source: "test".into() }, &options);
        prop_assert!(p.steps.is_empty());
        prop_assert_eq!(p.verdict, Verdict::DoesNotFit);
        prop_assert_eq!(p.estimated_peak_bytes, peak);
        prop_assert_eq!(p.gap_bytes, peak - target);
        prop_assert!(p.reason.contains("no lever"), "{}", p.reason);
    }

    #[test]
    fn component_cuts_follow_the_seed(
        items in prop::collection::vec((0u32..2000, any::<bool>()), 1..12),
        target_tenths in 0u32..20000,
    ) {
        let components: Vec<Component> = items
            .iter()
            .enumerate()
            .map(|(i, (tenths, cuttable))| Component {
                name: format!("c{i}"),
                peak_gb: *tenths as f64 / 10.0,
                cuttable: *cuttable,
            })
            .collect();
        let target = target_tenths as f64 / 10.0;
        let plan = plan_memory_cuts(&components, target);
        let total_tenths: u32 = items.iter().map(|(t, _)| t).sum();
        prop_assert_eq!(plan.peak_before_gb, total_tenths as f64 / 10.0);
        let mut running = total_tenths;
        for (k, step) in plan.steps.iter().enumerate() {
            // Entered only while still above the target.
            prop_assert!(running > target_tenths);
            let c = components.iter().find(|c| c.name == step.name).unwrap();
            prop_assert!(c.cuttable);
            running -= (c.peak_gb * 10.0).round() as u32;
            prop_assert_eq!(step.peak_after_gb, running as f64 / 10.0);
            if k + 1 < plan.steps.len() {
                prop_assert!(plan.steps[k + 1].saved_gb <= step.saved_gb);
            }
        }
        prop_assert_eq!(plan.estimated_peak_gb, running as f64 / 10.0);
        // If it stopped above the target, every cuttable component was cut.
        if running > target_tenths {
            prop_assert_eq!(plan.steps.len(), components.iter().filter(|c| c.cuttable).count());
        }
    }
}
