//! Properties of the cut planner (DESIGN.md §6), checked against a naive
//! re-simulation: for every position, sum the live allocations by category,
//! scale, add the scaled allocator cache, take the maximum.

use proptest::prelude::*;

use super::components::{plan_memory_cuts, Component};
use super::demand::{scale, Demand};
use super::levers::{catalogue, Lever};
use super::search::{plan_timeline_cuts, Order};
use super::{plan_device, Budget, Headroom, PlanOptions};
use crate::model::Category;
use crate::schema::Verdict;
use crate::timeline::{curve, DeviceTimeline, Interval, Origin, Replay};

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

#[derive(Debug)]
struct Case {
    positions: u32,
    intervals: Vec<(u32, u32, u64, Category)>,
    cache: Option<Vec<u64>>,
}

fn case() -> impl Strategy<Value = Case> {
    (2u32..40).prop_flat_map(|positions| {
        let interval = (0..positions, 1..=positions, 1u64..1_000_000, 0..NCAT - 1).prop_map(
            move |(start, len, size, c)| {
                let end = (start + len).min(positions);
                (start, end.max(start + 1), size, tensor_category(c))
            },
        );
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
        .map(|&(start, end, size, _)| Interval {
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
            .collect::<Vec<u64>>()
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

/// The peak of the scaled demand, the slow way: every position, every interval.
fn naive_peak(case: &Case, factors: &[f64; NCAT]) -> u64 {
    (0..case.positions)
        .map(|p| {
            let mut by = [0u64; NCAT];
            for &(start, end, size, c) in &case.intervals {
                if start <= p && p < end {
                    by[c.index()] += size;
                }
            }
            if let Some(cache) = &case.cache {
                by[Category::AllocatorCache.index()] += cache[p as usize];
            }
            Category::ALL
                .iter()
                .map(|c| scale(by[c.index()], factors[c.index()]))
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

fn levers_for(dp_ranks: u32, custom: bool) -> Vec<Lever> {
    if custom {
        // Levers that overlap and can zero a category.
        serde_json::from_str(
            r#"[{"name": "a", "scales": {"activation": 0.0, "temporary": 0.9}, "cost": "costs compute", "action": "a"},
                {"name": "b", "scales": {"parameter": 0.33, "gradient": 0.5}, "cost": "free", "action": "b"},
                {"name": "c", "scales": {"allocator_cache": 0.1, "activation": 0.5}, "cost": "cheap", "action": "c"}]"#,
        )
        .unwrap()
    } else {
        catalogue(dp_ranks)
    }
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
        let demand = Demand::from_timeline(&tl);
        let levers = levers_for(dp_ranks, custom);
        let before = naive_peak(&case, &[1.0; NCAT]);
        let target = (before as f64 * target_share) as u64;
        let order = if largest { Order::Largest } else { Order::Cheapest };
        let cuts = plan_timeline_cuts(&demand, &levers, target, order);

        // The re-simulated peak equals the naive replay, before and after every step.
        prop_assert_eq!(cuts.peak_before_bytes, before);
        for step in &cuts.steps {
            prop_assert_eq!(step.peak_after_bytes, naive_peak(&case, &step.factors));
        }
        prop_assert_eq!(cuts.estimated_peak_bytes, naive_peak(&case, &cuts.final_factors));

        // Savings never exceed the peak; they add up to the total reduction.
        let mut peak = cuts.peak_before_bytes;
        for step in &cuts.steps {
            prop_assert!(step.saved_bytes <= peak);
            prop_assert_eq!(step.saved_bytes, peak - step.peak_after_bytes);
            peak = step.peak_after_bytes;
        }
        let saved: u64 = cuts.steps.iter().map(|s| s.saved_bytes).sum();
        prop_assert!(saved <= cuts.peak_before_bytes);
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
        // Stopping short of the target means no unused lever shrinks anything at the final peak.
        if cuts.estimated_peak_bytes > target {
            let here = demand.scaled_at(cuts.final_position, &cuts.final_factors);
            for (i, lever) in levers.iter().enumerate() {
                if cuts.steps.iter().any(|s| s.lever == i) {
                    continue;
                }
                for (c, f) in &lever.scales {
                    prop_assert_eq!(scale(here[c.index()], *f), here[c.index()]);
                }
            }
        }

        // The device plan agrees with the cuts and the verdict with the numbers.
        let options = PlanOptions {
            dp_ranks,
            levers: custom.then(|| levers.clone()),
            order,
            headroom: Headroom::Bytes(0),
            ..PlanOptions::default()
        };
        let p = plan_device(&demand, &Budget { bytes: target, source: "test".into() }, &options, &|p| format!("p{p}"));
        prop_assert_eq!(p.target_bytes, target);
        prop_assert_eq!(p.estimated_peak_bytes, cuts.estimated_peak_bytes);
        prop_assert_eq!(p.steps.len(), cuts.steps.len());
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
        let p = plan_device(&demand, &Budget { bytes: target, source: "test".into() }, &options, &|p| format!("p{p}"));
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
