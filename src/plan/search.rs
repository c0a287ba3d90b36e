//! The search: levers applied one at a time, in an [`Order`], each followed
//! by a re-simulation of the peak over the whole timeline, until the peak
//! fits the target or no lever applies.

use super::demand::Demand;
use super::levers::Lever;
use super::NCAT;

/// In what order levers are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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
            let a = lever.applicability(&here);
            if !a.applies() {
                continue;
            }
            let (saving, contribution) = (a.saving, a.contribution);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Category;
    use crate::plan::levers::Cost;

    fn lever(name: &str, cost: Cost, scales: &[(Category, f64)]) -> Lever {
        Lever {
            name: name.into(),
            scales: scales.iter().copied().collect(),
            cost,
            action: format!("do {name}"),
        }
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
}
