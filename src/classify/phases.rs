//! Where each phase allocated, as the rules observed the phases.

use super::{version_bumps, Chains, Classification, Phase, Rule};
use crate::model::{Category, Event};
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
    /// `events`: the device's, for the in-place updates of a profile-made
    /// snapshot (`classify::chains`): a tensor's new version carries the
    /// frames of its first one, so where it starts says nothing of the
    /// phase its frames name (an optimizer step's in-place update of a
    /// tensor first made in forward read as a forward in the middle of the
    /// step: gradients freed after that step read as held through it).
    pub fn of(intervals: &[Interval], classes: &[Classification], events: &[Event]) -> Self {
        let (mut forward, mut backward, mut optimizer) = (Vec::new(), Vec::new(), Vec::new());
        let chains = Chains::new(intervals, &version_bumps(events));
        let first_version = |i: usize| chains.as_ref().is_none_or(|c| c.root(i) == i);
        for (i, (interval, class)) in intervals.iter().zip(classes).enumerate() {
            let Rule::Builtin(rule) = class.rule else {
                continue;
            };
            if !first_version(i) {
                continue;
            }
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
