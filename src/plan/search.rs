//! The search: levers applied one at a time, in an [`Order`], each
//! followed by a re-simulation of the peak over the whole timeline, until
//! the peak fits the target or no lever lowers it by enough.

use super::demand::{Demand, Row};
use super::levers::{combined_factors, Applicability, Condition, Lever};
use super::pools::NPOOL;

/// In what order levers are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Cheapest cost class first, then the largest saving.
    #[default]
    Cheapest,
    /// The largest cuttable contribution at the current peak first (the
    /// seed's method), whatever it costs.
    Largest,
}

impl Order {
    /// `--order` (and Python's `order=`): `cheapest` or `largest`.
    pub fn parse(s: &str) -> Result<Order, String> {
        match s.trim() {
            "cheapest" => Ok(Order::Cheapest),
            "largest" => Ok(Order::Largest),
            _ => Err(format!(
                "`{s}` is not an order: `cheapest` (the cheapest cost class first) or `largest` (the largest contribution at the peak first)"
            )),
        }
    }
}

/// Whether the search may use a lever, from the run's evidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eligibility {
    /// Its conditions hold.
    Certain,
    /// Some condition is unknown: tried only once no certain lever helps.
    Conditional,
    /// Some condition fails: never tried.
    Excluded,
}

/// One lever applied by [`plan_timeline_cuts`].
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineStep {
    /// Index into the levers given.
    pub lever: usize,
    /// Old peak − new peak: the step's marginal effect given the steps
    /// before it.
    pub saved_bytes: u64,
    pub peak_after_bytes: u64,
    /// Position of the new peak.
    pub position: usize,
    /// Cumulative factors after this step, by pool.
    pub factors: [f64; NPOOL],
}

/// An eligible lever that is not a step: what it would lower the peak by
/// after the steps, and what it could shrink at the final peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leftover {
    pub lever: usize,
    pub saved_bytes: u64,
    pub contribution: u64,
}

/// The result of [`plan_timeline_cuts`].
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineCuts {
    pub peak_before_bytes: u64,
    pub peak_before_position: usize,
    pub steps: Vec<TimelineStep>,
    pub estimated_peak_bytes: u64,
    pub final_position: usize,
    pub final_factors: [f64; NPOOL],
    /// The modelled levers ([`Search::modelled`]) that are steps with
    /// their model, as a [`Modelled::demand`] mask: the final factors
    /// scale that demand (0: the demand searched).
    pub modelled_mask: u8,
    /// Eligible levers not used, when the plan needed cuts (empty when the
    /// peak fit from the start).
    pub leftovers: Vec<Leftover>,
}

/// What [`plan_timeline_cuts`] searches with.
#[derive(Clone, Copy)]
pub struct Search<'a, 'd> {
    pub levers: &'a [Lever],
    /// One per lever.
    pub eligibility: &'a [Eligibility],
    pub target: u64,
    pub order: Order,
    /// A step must lower the peak by at least this much.
    pub min_step: u64,
    /// Levers modelled from the run, not (only) by factors.
    pub modelled: Option<Modelled<'a, 'd>>,
}

/// Levers the run's own structure models: once one is a step, the steps
/// after it scale the demand with its edits (and those of the modelled
/// steps before it) applied.
#[derive(Clone, Copy)]
pub struct Modelled<'a, 'd> {
    /// `(lever index, whether its factors still scale the edited demand)`:
    /// checkpointing's model replaces its factor; halving the micro-batch
    /// holds the first micro-batch's gradients beside its factor. At most
    /// 8 (bit `j` of a mask is `levers[j]`).
    pub levers: &'a [(usize, bool)],
    /// The demand with the modelled levers of a mask applied, made when
    /// first asked for; `None` where one of them has no model in this run
    /// (its factors stand in). Asked for only where a lever's factors
    /// touch bytes at the peak.
    pub demand: &'a dyn Fn(u8) -> Option<&'d Demand<'d>>,
}

impl Modelled<'_, '_> {
    /// Lever `i`'s bit and whether its factors still apply, if modelled.
    fn of(&self, i: usize) -> Option<(u8, bool)> {
        self.levers
            .iter()
            .position(|&(l, _)| l == i)
            .map(|j| (1u8 << j, self.levers[j].1))
    }
}

/// [`plan_timeline_cuts`] for a run that may train or infer: where the
/// trace does not tell (levers of both kinds are conditional), the plan
/// assuming training and the one assuming inference are both made and the
/// better kept (one that fits, else the lower peak; then fewer steps).
pub fn plan_for_either_mode<'d>(demand: &'d Demand<'d>, search: &Search<'_, 'd>) -> TimelineCuts {
    let assumes = |mode: Condition| {
        search
            .levers
            .iter()
            .zip(search.eligibility)
            .any(|(l, e)| *e == Eligibility::Conditional && l.when.contains(&mode))
    };
    if !(assumes(Condition::Training) && assumes(Condition::Inference)) {
        return plan_timeline_cuts(demand, search);
    }
    let without = |mode: Condition| {
        let eligibility: Vec<Eligibility> = search
            .levers
            .iter()
            .zip(search.eligibility)
            .map(|(l, e)| {
                if l.when.contains(&mode) {
                    Eligibility::Excluded
                } else {
                    *e
                }
            })
            .collect();
        plan_timeline_cuts(
            demand,
            &Search {
                eligibility: &eligibility,
                ..*search
            },
        )
    };
    let training = without(Condition::Inference);
    let inference = without(Condition::Training);
    let key = |c: &TimelineCuts| {
        (
            c.estimated_peak_bytes > search.target,
            c.estimated_peak_bytes.max(search.target),
            c.steps.len(),
        )
    };
    if key(&inference) < key(&training) {
        inference
    } else {
        training
    }
}

/// Applies levers one at a time until the peak is at most `target`.
///
/// Each round looks at the bytes by pool at the *current* peak and, among
/// the unused eligible levers that shrink something there, simulates each
/// over the whole timeline: its saving is the drop of the peak (which can
/// move). Levers that lower it by less than `min_step` (or than what is
/// left of the gap, when that is less) are not steps. The
/// next step is the best of the rest by `order`, certain levers before
/// conditional ones. The savings of the steps add up to the total
/// reduction by construction. Cost: O(rounds × levers) peak searches.
pub fn plan_timeline_cuts<'d>(demand: &'d Demand<'d>, search: &Search<'_, 'd>) -> TimelineCuts {
    let levers = search.levers;
    let mut factors = [1.0f64; NPOOL];
    let (peak_before, pos_before) = demand.peak(&factors);
    let mut current = demand;
    let mut mask = 0u8;
    // The steps whose factors scale the demand (all but a modelled lever
    // whose model replaces its factors).
    let mut factor_levers: Vec<usize> = Vec::new();
    let (mut peak, mut pos) = (peak_before, pos_before);
    let mut used = vec![false; levers.len()];
    let mut steps = Vec::new();
    let min_step = search.min_step.max(1);
    while peak > search.target {
        // A lever that closes what is left of the gap is a step however
        // little that is (a cheap certain one then beats a conditional
        // one: a sub-MiB gap is no reason to cost accuracy).
        let min_step = min_step.min(peak - search.target);
        let here = current.scaled_at(pos, &factors);
        let at = State {
            current,
            mask,
            factors: &factors,
            factor_levers: &factor_levers,
            here: &here,
            pos,
        };
        // (lever, realized saving, contribution, new peak, new position,
        // factors, demand, mask)
        type Best<'d> = (
            usize,
            u64,
            u64,
            u64,
            usize,
            [f64; NPOOL],
            &'d Demand<'d>,
            u8,
        );
        let mut best: Option<Best<'d>> = None;
        for pass in [Eligibility::Certain, Eligibility::Conditional] {
            for (i, lever) in levers.iter().enumerate() {
                if used[i] || search.eligibility[i] != pass {
                    continue;
                }
                let factor = lever.applicability(&here);
                // What it changes is not live at the peak.
                if factor.contribution < min_step {
                    continue;
                }
                let (d, next, a, m) = applied(search, i, &at);
                // The peak cannot drop by more than the lever saves at it.
                if a.saving < min_step {
                    continue;
                }
                let (new_peak, new_pos) = d.peak(&next);
                let saved = peak.saturating_sub(new_peak);
                if saved < min_step {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some((j, s, k, ..)) => match search.order {
                        Order::Cheapest => {
                            (lever.cost, std::cmp::Reverse(saved), i)
                                < (levers[j].cost, std::cmp::Reverse(s), j)
                        }
                        Order::Largest => {
                            (
                                std::cmp::Reverse(a.contribution),
                                std::cmp::Reverse(saved),
                                i,
                            ) < (std::cmp::Reverse(k), std::cmp::Reverse(s), j)
                        }
                    },
                };
                if better {
                    best = Some((i, saved, a.contribution, new_peak, new_pos, next, d, m));
                }
            }
            if best.is_some() {
                break;
            }
        }
        let Some((i, saved, _, new_peak, new_pos, next, d, m)) = best else {
            break;
        };
        used[i] = true;
        if next != factors {
            factor_levers.push(i);
        }
        (current, mask) = (d, m);
        // One run trains or infers, not both: once a step assumes one
        // (a conditional step, where the trace does not tell), the levers
        // that assume the other are no longer steps.
        for (mode, other) in [
            (Condition::Training, Condition::Inference),
            (Condition::Inference, Condition::Training),
        ] {
            if levers[i].when.contains(&mode) {
                for (j, l) in levers.iter().enumerate() {
                    if l.when.contains(&other) {
                        used[j] = true;
                    }
                }
            }
        }
        factors = next;
        steps.push(TimelineStep {
            lever: i,
            saved_bytes: saved,
            peak_after_bytes: new_peak,
            position: new_pos,
            factors,
        });
        (peak, pos) = (new_peak, new_pos);
    }
    let leftovers = if peak_before <= search.target {
        Vec::new()
    } else {
        let here = current.scaled_at(pos, &factors);
        let at = State {
            current,
            mask,
            factors: &factors,
            factor_levers: &factor_levers,
            here: &here,
            pos,
        };
        (0..levers.len())
            .filter(|&i| !used[i] && search.eligibility[i] != Eligibility::Excluded)
            .map(|i| {
                let factor = levers[i].applicability(&here);
                let (a, saved) = if factor.saving == 0 {
                    (factor, 0)
                } else {
                    let (d, next, a, _) = applied(search, i, &at);
                    (a, peak.saturating_sub(d.peak(&next).0))
                };
                Leftover {
                    lever: i,
                    saved_bytes: saved,
                    contribution: a.contribution,
                }
            })
            .collect()
    };
    TimelineCuts {
        peak_before_bytes: peak_before,
        peak_before_position: pos_before,
        steps,
        estimated_peak_bytes: peak,
        final_position: pos,
        final_factors: factors,
        modelled_mask: mask,
        leftovers,
    }
}

/// What a modelled lever saves at a position: the row before it minus the
/// row after it (what it adds elsewhere there counts against it).
fn modelled_applicability(before: &Row, after: &Row) -> Applicability {
    let saving = before
        .iter()
        .sum::<u64>()
        .saturating_sub(after.iter().sum::<u64>());
    Applicability {
        saving,
        contribution: saving,
    }
}

/// Where the search stands: the demand (with the modelled levers of
/// `mask` applied), the factors that scale it (the combined factors of the
/// steps `factor_levers`), and the current peak's row `here` at `pos`.
struct State<'s, 'd> {
    current: &'d Demand<'d>,
    mask: u8,
    factors: &'s [f64; NPOOL],
    factor_levers: &'s [usize],
    here: &'s Row,
    pos: usize,
}

/// Lever `i` applied to the state: the demand it leaves, the factors that
/// scale it (the levers' product, as [`combined_factors`] combines them),
/// what it saves at the current peak, and the mask of modelled levers that
/// made that demand.
fn applied<'d>(
    search: &Search<'_, 'd>,
    i: usize,
    at: &State<'_, 'd>,
) -> (&'d Demand<'d>, [f64; NPOOL], Applicability, u8) {
    let lever = &search.levers[i];
    // The steps' factors with this lever's, as levers applied together
    // combine.
    let with_lever = || {
        let levers: Vec<&Lever> = at
            .factor_levers
            .iter()
            .chain([&i])
            .map(|&k| &search.levers[k])
            .collect();
        combined_factors(&levers).0
    };
    let model = search.modelled.and_then(|m| {
        let (bit, keeps) = m.of(i)?;
        Some(((m.demand)(at.mask | bit)?, keeps, at.mask | bit))
    });
    match model {
        Some((d, keeps, mask)) => {
            let next = if keeps { with_lever() } else { *at.factors };
            let a = modelled_applicability(at.here, &d.scaled_at(at.pos, &next));
            (d, next, a, mask)
        }
        None => {
            let next = with_lever();
            // What it saves at the peak: its own factors', unless it
            // combines with a step's otherwise (then as `next` scales it).
            let a = if next == combine(at.factors, &lever.factors()) {
                lever.applicability(at.here)
            } else {
                modelled_applicability(at.here, &at.current.scaled_at(at.pos, &next))
            };
            (at.current, next, a, at.mask)
        }
    }
}

/// Running factors times a lever's.
fn combine(a: &[f64; NPOOL], b: &[f64; NPOOL]) -> [f64; NPOOL] {
    let mut out = *a;
    for (o, f) in out.iter_mut().zip(b) {
        *o *= f;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Category;
    use crate::plan::levers::Cost;
    use crate::plan::pools::Target;

    fn lever(name: &str, cost: Cost, scales: &[(Category, f64)]) -> Lever {
        Lever {
            name: name.into(),
            scales: scales.iter().map(|(c, f)| (Target::all(*c), *f)).collect(),
            cost,
            action: format!("do {name}"),
            when: Vec::new(),
            tradeoff: String::new(),
        }
    }

    fn search<'a>(
        levers: &'a [Lever],
        eligibility: &'a [Eligibility],
        target: u64,
        order: Order,
    ) -> Search<'a, 'a> {
        Search {
            levers,
            eligibility,
            target,
            order,
            min_step: 1,
            modelled: None,
        }
    }

    #[test]
    fn a_modelled_lever_switches_the_demand_the_later_steps_scale() {
        // Activations 10 at the peak; the modelled lever leaves 3 there but
        // adds 4 of recomputation elsewhere (position 2).
        let demand = Demand::from_series(&[
            (Category::Parameter, vec![4, 4, 4]),
            (Category::Activation, vec![0, 10, 2]),
        ]);
        let applied = Demand::from_series(&[
            (Category::Parameter, vec![4, 4, 4]),
            (Category::Activation, vec![0, 3, 2]),
            (Category::Temporary, vec![0, 0, 4]),
        ]);
        let levers = vec![
            lever("ckpt", Cost::Compute, &[(Category::Activation, 0.3)]),
            lever("temps", Cost::Compute, &[(Category::Temporary, 0.5)]),
        ];
        let mut s = search(&levers, &CERTAIN[..2], 7, Order::Cheapest);
        let get = |mask: u8| (mask == 1).then_some(&applied);
        s.modelled = Some(Modelled {
            levers: &[(0, false)],
            demand: &get,
        });
        let cuts = plan_timeline_cuts(&demand, &s);
        // Not the factor's 4 + 3 = 7: the model's peak, 10 at position 2.
        assert_eq!(cuts.steps[0].lever, 0);
        assert_eq!(cuts.steps[0].peak_after_bytes, 10);
        assert_eq!(cuts.steps[0].position, 2);
        // The next step scales the applied demand: 4 + 2 + 2.
        assert_eq!(cuts.steps[1].lever, 1);
        assert_eq!(cuts.steps[1].peak_after_bytes, 8);
        assert_eq!(cuts.modelled_mask, 1);
    }

    const CERTAIN: [Eligibility; 3] = [Eligibility::Certain; 3];

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
        assert_eq!(demand.peak(&[1.0; NPOOL]), (14, 1));
        let levers = vec![
            lever("ckpt", Cost::Compute, &[(Category::Activation, 0.3)]),
            lever("opt8", Cost::Cheap, &[(Category::OptimizerState, 0.25)]),
        ];
        let cuts = plan_timeline_cuts(
            &demand,
            &search(&levers, &CERTAIN[..2], 10, Order::Cheapest),
        );
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
        let cheap = plan_timeline_cuts(
            &demand,
            &search(&levers, &CERTAIN[..2], 11, Order::Cheapest),
        );
        assert_eq!(cheap.steps.iter().map(|s| s.lever).collect::<Vec<_>>(), [1]);
        let largest =
            plan_timeline_cuts(&demand, &search(&levers, &CERTAIN[..2], 11, Order::Largest));
        assert_eq!(
            largest.steps.iter().map(|s| s.lever).collect::<Vec<_>>(),
            [0]
        );
    }

    /// A 1000-byte peak: 300 bytes of parameters (halved by a conditional
    /// lever that costs accuracy), 695 of activations (checkpointing), 5 of
    /// temporaries (a free lever).
    fn small_and_conditional() -> (Demand<'static>, Vec<Lever>, [Eligibility; 3]) {
        let demand = Demand::from_series(&[
            (Category::Parameter, vec![300]),
            (Category::Activation, vec![695]),
            (Category::Temporary, vec![5]),
        ]);
        let levers = vec![
            lever("bf16", Cost::Accuracy, &[(Category::Parameter, 0.5)]),
            lever("chunk", Cost::Free, &[(Category::Temporary, 0.0)]),
            lever("ckpt", Cost::Compute, &[(Category::Activation, 0.3)]),
        ];
        let eligibility = [
            Eligibility::Conditional,
            Eligibility::Certain,
            Eligibility::Certain,
        ];
        (demand, levers, eligibility)
    }

    #[test]
    fn small_savings_are_not_steps_and_conditional_levers_come_last() {
        // A 1000-byte peak: 5 bytes of temporaries (0.5%), 300 of parameters.
        let (demand, levers, eligibility) = small_and_conditional();
        let s = Search {
            min_step: 10,
            ..search(&levers, &eligibility, 400, Order::Cheapest)
        };
        let cuts = plan_timeline_cuts(&demand, &s);
        let order: Vec<usize> = cuts.steps.iter().map(|s| s.lever).collect();
        // ckpt (certain) before bf16 (conditional, though it fits sooner);
        // chunk saves 5 B < 10 B: never a step, but left over.
        assert_eq!(order, [2, 0]);
        assert!(cuts.steps.iter().all(|s| s.saved_bytes >= 10));
        assert_eq!(
            cuts.leftovers,
            [Leftover {
                lever: 1,
                saved_bytes: 5,
                contribution: 5
            }]
        );
        // Excluded levers are never tried nor left over.
        let excluded = [Eligibility::Excluded; 3];
        let none = plan_timeline_cuts(&demand, &search(&levers, &excluded, 400, Order::Largest));
        assert!(none.steps.is_empty() && none.leftovers.is_empty());
    }

    /// Issue 33: a gap smaller than the smallest step is closed by the
    /// certain lever that closes it, not by a conditional one that costs
    /// accuracy.
    #[test]
    fn a_step_that_closes_a_small_gap_is_taken_however_small() {
        let (demand, levers, eligibility) = small_and_conditional();
        // ckpt leaves 300 + 209 + 5 = 514: 4 B over a target of 510.
        let s = Search {
            min_step: 10,
            ..search(&levers, &eligibility, 510, Order::Cheapest)
        };
        let cuts = plan_timeline_cuts(&demand, &s);
        let order: Vec<usize> = cuts.steps.iter().map(|s| s.lever).collect();
        assert_eq!(order, [2, 1]);
        assert!(cuts.estimated_peak_bytes <= 510);
    }

    /// A trace that does not tell training from inference gets no plan
    /// that assumes both (a real snapshot's plan had 8-bit weights `if
    /// this is inference` and bf16 weights `if this is a training run`).
    #[test]
    fn a_plan_assumes_training_or_inference_not_both() {
        let demand = Demand::from_series(&[(Category::Parameter, vec![1000])]);
        let mut quant = lever("quant", Cost::Accuracy, &[(Category::Parameter, 0.5)]);
        quant.when = vec![Condition::Inference];
        let mut bf16 = lever("bf16", Cost::Accuracy, &[(Category::Parameter, 0.5)]);
        bf16.when = vec![Condition::Training];
        let levers = vec![quant, bf16];
        let eligibility = [Eligibility::Conditional, Eligibility::Conditional];
        let cuts = plan_timeline_cuts(
            &demand,
            &search(&levers, &eligibility, 200, Order::Cheapest),
        );
        assert_eq!(cuts.steps.len(), 1, "{:?}", cuts.steps);
        // Made both ways, the plan that fits is kept: only halving the
        // activations (an inference lever here) reaches the target.
        let demand = Demand::from_series(&[
            (Category::Parameter, vec![100]),
            (Category::Activation, vec![900]),
        ]);
        let mut halve = lever("halve", Cost::Cheap, &[(Category::Activation, 0.5)]);
        halve.when = vec![Condition::Inference];
        // A free training lever the greedy search takes first.
        let mut free = lever("free", Cost::Free, &[(Category::Parameter, 0.5)]);
        free.when = vec![Condition::Training];
        let levers = vec![free, halve];
        let s = search(&levers, &eligibility, 600, Order::Cheapest);
        let greedy = plan_timeline_cuts(&demand, &s);
        assert!(greedy.estimated_peak_bytes > 600);
        let either = plan_for_either_mode(&demand, &s);
        assert_eq!(
            either.steps.iter().map(|s| s.lever).collect::<Vec<_>>(),
            [1]
        );
        assert!(either.estimated_peak_bytes <= 600);
    }

    #[test]
    fn a_lever_that_does_not_lower_the_peak_is_not_a_step() {
        // Two equal peaks: each lever cuts one of them only, so neither
        // lowers the peak alone. No 0 B step: the plan stops.
        let demand = Demand::from_series(&[
            (Category::Activation, vec![10, 0]),
            (Category::OptimizerState, vec![0, 10]),
        ]);
        let levers = vec![
            lever("ckpt", Cost::Compute, &[(Category::Activation, 0.3)]),
            lever("opt8", Cost::Cheap, &[(Category::OptimizerState, 0.25)]),
        ];
        let cuts = plan_timeline_cuts(&demand, &search(&levers, &CERTAIN[..2], 5, Order::Cheapest));
        assert!(cuts.steps.is_empty());
        assert_eq!(cuts.estimated_peak_bytes, 10);
        assert!(cuts.leftovers.iter().all(|l| l.saved_bytes == 0));
    }
}
