//! Gradients kept through the forward: the `gradients_kept_through_forward`
//! finding.

use super::Found;
use crate::analysis::ClassifiedDevice;
use crate::classify::{first_after, last_before, PhasePositions};
use crate::model::Category;
use crate::schema::FindingKind;
use crate::units::human_bytes;

/// Gradients that live from an optimizer step through the next forward
/// pass, until backward writes them again: `zero_grad()` zeroed them in
/// place (`set_to_none=False`) instead of freeing them, so the forward's
/// activations are made on top of a whole set of gradients nobody reads.
///
/// The evidence is the order of the phases' allocations, read as the
/// planner's `zero_grad_set_to_none` lever reads them
/// (`plan::pools::Overlay::build`): a gradient alive at the first forward
/// allocation after an optimizer step, with no backward allocation in
/// between (with gradient accumulation, the gradients live through the
/// next micro-step's forward because backward wrote them: not after a
/// step). Only steps seen in the recording count: gradients alive when it
/// began may be an accumulation's.
///
/// The fix is the catalogue's `zero_grad_set_to_none`, which the what-if
/// models from the same windows; `fixed_ends` stays empty.
pub(super) fn kept_through_forward(
    cd: &ClassifiedDevice,
    phases: &PhasePositions,
) -> Option<Found> {
    let intervals = &cd.timeline.replay.intervals;
    let PhasePositions {
        forward,
        backward,
        optimizer,
    } = phases;
    if optimizer.is_empty() || forward.is_empty() {
        return None;
    }
    let mut kept = Vec::new();
    let mut bytes = 0u64;
    // A window (step, forward) for the evidence.
    let mut first: Option<(Option<u32>, u32)> = None;
    for (i, (iv, c)) in intervals.iter().zip(&cd.classes).enumerate() {
        if c.category != Category::Gradient {
            continue;
        }
        // The step it is held from: one inside its life, or the last one
        // before it when it starts after that step and before any backward
        // (a profile's snapshot starts a gradient again at its `zero_()`).
        let started_after_a_step = last_before(optimizer, iv.start)
            .is_some_and(|o| last_before(backward, iv.start).is_none_or(|b| o > b));
        let held_from = if started_after_a_step || iv.origin.before_recording() {
            Some(iv.start)
        } else {
            first_after(optimizer, iv.start.saturating_sub(1)).filter(|&o| o < iv.end)
        };
        let Some(from) = held_from else { continue };
        let Some(f) = first_after(forward, from).filter(|&f| f < iv.end) else {
            continue;
        };
        if first_after(backward, from).is_some_and(|b| b < f) {
            continue;
        }
        kept.push(i);
        bytes += iv.size;
        let step = last_before(optimizer, from + 1);
        // A window after a step seen in the recording is the better evidence.
        if first.is_none_or(|(s, _)| s.is_none() && step.is_some()) {
            first = Some((step, f));
        }
    }
    let (step, f) = first?;
    let from = match step {
        Some(step) => format!("the optimizer step (event {})", step - 1),
        // Only a recording that begins at a step's forward tells kept
        // gradients from an accumulation's: the same assumption as the
        // lever's model.
        None => "before the recording began (read as a previous step's: the recording opens with a forward pass)".to_owned(),
    };
    let evidence = vec![
        format!(
            "{} gradients ({}) lived from {from} through the next forward pass (from event {}) until backward wrote them again: `zero_grad()` zeroed them in place instead of freeing them",
            kept.len(),
            human_bytes(bytes),
            f.saturating_sub(1),
        ),
        "call `optimizer.zero_grad(set_to_none=True)` (the default since PyTorch 2.0) right after `optimizer.step()`: the forward then runs without them, and backward makes each gradient again".to_owned(),
    ];
    Some(Found {
        kind: FindingKind::GradientsKeptThroughForward,
        intervals: kept,
        evidence,
        fixed_ends: Vec::new(),
        after: None,
    })
}
