//! Where each phase allocated, as the rules observed the phases.

use super::{Classification, Phase, Rule};
use crate::model::Category;
use crate::timeline::Interval;

/// Positions where each phase allocated, ascending, as the rules observed
/// the phases (intervals are in allocation order; baseline ones start at 0
/// and carry no phase): what tells a step, the forward after it and the
/// backward that needs the gradients again, for the gradients kept across
/// steps (`plan::pools`) and for the findings that read steps
/// (`findings::gradients`, `findings::optimizer`).
#[derive(Debug)]
pub struct PhasePositions {
    pub forward: Vec<u32>,
    /// Not gradients: a snapshot's `zero_()` restarts a kept gradient with
    /// its backward frames, after the step.
    pub backward: Vec<u32>,
    pub optimizer: Vec<u32>,
}

impl PhasePositions {
    pub fn of(intervals: &[Interval], classes: &[Classification]) -> Self {
        let (mut forward, mut backward, mut optimizer) = (Vec::new(), Vec::new(), Vec::new());
        for (interval, class) in intervals.iter().zip(classes) {
            let Rule::Builtin(rule) = class.rule else {
                continue;
            };
            match rule.phase_observed() {
                Some(Phase::Forward) => forward.push(interval.start),
                Some(Phase::Backward) if class.category != Category::Gradient => {
                    backward.push(interval.start)
                }
                Some(Phase::Optimizer) => optimizer.push(interval.start),
                _ => {}
            }
        }
        PhasePositions {
            forward,
            backward,
            optimizer,
        }
    }
}

/// The first position after `p` in an ascending list.
pub fn first_after(list: &[u32], p: u32) -> Option<u32> {
    list.get(list.partition_point(|&x| x <= p)).copied()
}

/// The last position before `p` in an ascending list.
pub fn last_before(list: &[u32], p: u32) -> Option<u32> {
    let i = list.partition_point(|&x| x < p).checked_sub(1)?;
    Some(list[i])
}
