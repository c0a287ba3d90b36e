//! The next training step, predicted from a recording of the first: the
//! optimizer's state is made lazily in the first `step()`, and with
//! `zero_grad(set_to_none=False)` the gradients stay too, so the second
//! step runs its forward and backward on top of memory the first one's
//! forward never had. A recording of one step shows a peak the run will
//! exceed: "it fit in step 1 and ran out of memory in step 2".

use crate::analysis::ClassifiedDevice;
use crate::classify::{Phase, PhasePositions, Rule};
use crate::model::{Category, DeviceTrace, Trace};
use crate::timeline::{DeviceTimeline, Interval};
use crate::units::human_bytes;

/// The next step's peak as this recording predicts it.
#[derive(Debug, Clone, PartialEq)]
pub struct NextStep {
    /// The predicted peak of allocated bytes.
    pub peak_allocated: u64,
    /// Where in the recorded step it is (the position whose bytes, with
    /// what the step left, are the peak).
    pub position: u32,
    /// Bytes the step made and left alive at the end: the next step
    /// carries them from its start.
    pub carried: u64,
    /// The allocated curve with what is carried alive from the start.
    pub curve: Vec<u64>,
    pub evidence: Vec<String>,
    /// The carried tensors' first versions (indices of the intervals): the
    /// next step has them from its start.
    pub carried_from_start: Vec<usize>,
    /// Where the next backward makes a new value beside a kept gradient:
    /// (position, bytes, the kept gradient's interval).
    pub new_values: Vec<(u32, u64, usize)>,
    /// Whether its peak is 1% or more above the recorded one: only then
    /// is it a finding (`devices[].next_step`). Either way the plan and the
    /// what-if price it: it is at least the recorded step at every point
    /// (the carried tensors only live longer), so the run's peak with a
    /// lever is its peak with that lever (an Adam step's temporaries on top
    /// of the state it made are the first step's peak; with `fused=True`
    /// they are gone, and the next step's backward, with the state alive,
    /// is the peak).
    pub higher: bool,
}

/// The prediction for a training recording that holds one step's forward
/// and backward and ends after its optimizer step (no forward allocation
/// after any optimizer allocation), when that step left optimizer state it
/// made (lazily, or) gradients alive at the end.
///
/// Model: the next step does what the recorded one did, with what the
/// recorded step made and left alive at the end (optimizer state, kept
/// gradients) alive from its start. At each position, the recorded bytes
/// plus those of the carried tensors not made yet there (each from the
/// first version of its chain: a profile-made snapshot starts a tensor
/// again at each in-place change, at the same address and size); where the
/// recorded step made them, the next one finds them made (the optimizer
/// updates its state in place), and where backward made a kept gradient,
/// the next backward makes a new value of its size beside it, added into
/// it and freed (`AccumulateGrad`).
pub fn predict(
    trace: &Trace,
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
    phases: &PhasePositions,
) -> Option<NextStep> {
    // A profiler step after the first: the loop ran before the recording
    // (a warm CPU trace shows nothing of what it left, not even its frees).
    if trace
        .annotations
        .iter()
        .any(|a| crate::vocabulary::profiler_step_number(&a.name).is_some_and(|n| n > 0))
    {
        return None;
    }
    let replay = &cd.timeline.replay;
    let intervals = &replay.intervals;
    let positions = replay.positions();
    let &first_forward = phases.forward.first()?;
    let &first_step = phases.optimizer.first()?;
    // The first step: no optimizer state was alive when its forward began
    // (a warm recording's state is from before it, and state replaced out
    // of place in each step is not made lazily).
    if intervals
        .iter()
        .zip(&cd.classes)
        .any(|(iv, c)| c.category == Category::OptimizerState && iv.live_at(first_forward))
    {
        return None;
    }
    // The tensors behind the intervals: a profile-made snapshot starts a
    // tensor again at each in-place change (`classify::chains`).
    let chains =
        crate::classify::Chains::new(intervals, &crate::classify::version_bumps(&device.events));
    let root = |i: usize| chains.as_ref().map_or(i, |c| c.root(i));
    // One step recorded: no forward allocation after the optimizer's (but
    // a new version of a tensor the step changed in place, which keeps the
    // frames of the tensor's first allocation).
    let forward_after_step = intervals
        .iter()
        .zip(&cd.classes)
        .enumerate()
        .any(|(i, (iv, c))| {
            iv.start > first_step
                && matches!(c.rule, Rule::Builtin(b) if b.phase_observed() == Some(Phase::Forward))
                && root(i) == i
        });
    if forward_after_step {
        return None;
    }
    let first_version = |i: usize| intervals[root(i)].start;
    let (mut state, mut gradients) = ((0usize, 0u64), (0usize, 0u64));
    let mut carried: Vec<(u32, u64)> = Vec::new();
    // Where the recorded backward made each kept gradient the next one
    // makes a new value of its size and adds it into the kept one: both
    // are alive there.
    let mut added_into: Vec<(u32, u64, usize)> = Vec::new();
    let mut carried_from_start: Vec<usize> = Vec::new();
    let mut carried_state: Vec<u64> = Vec::new();
    let mut state_site = None;
    for (i, (iv, c)) in intervals.iter().zip(&cd.classes).enumerate() {
        if iv.end < positions || iv.origin.before_recording() {
            continue;
        }
        let tally = match c.category {
            Category::OptimizerState => &mut state,
            Category::Gradient => &mut gradients,
            _ => continue,
        };
        let from = first_version(i);
        // Made by this step's backward or optimizer, not before its forward.
        if from <= first_forward {
            continue;
        }
        tally.0 += 1;
        tally.1 += iv.size;
        carried.push((from, iv.size));
        carried_from_start.push(root(i));
        if c.category == Category::Gradient {
            added_into.push((from, iv.size, i));
        } else {
            carried_state.push(iv.size);
            state_site.get_or_insert(iv.site);
        }
    }
    // A tensor from before the recording freed in the step, of a size of
    // the state it made: state replaced (out of place, as each step does),
    // not made lazily (a warm Chrome trace does not see the old state's
    // allocation, only its free).
    let state_sizes: std::collections::HashSet<u64> = carried_state.iter().copied().collect();
    if intervals.iter().any(|iv| {
        iv.origin.before_recording()
            && iv.end >= first_step
            && iv.end < positions
            && state_sizes.contains(&iv.size)
    }) {
        return None;
    }
    // Lazily made state is what this finding is about; kept gradients alone
    // are `gradients_kept_through_forward`'s when a forward follows.
    if state.0 == 0 {
        return None;
    }
    carried.sort_unstable();
    let total: u64 = carried.iter().map(|c| c.1).sum();
    let mut not_made_yet = total;
    let mut next = carried.iter().peekable();
    let mut curve = Vec::with_capacity(replay.allocated.len());
    for (p, &allocated) in replay.allocated.iter().enumerate() {
        while let Some(&&(from, size)) = next.peek() {
            if from as usize > p {
                break;
            }
            not_made_yet -= size;
            next.next();
        }
        curve.push(allocated + not_made_yet);
    }
    for &(at, size, _) in &added_into {
        if let Some(bytes) = curve.get_mut(at as usize) {
            *bytes += size;
        }
    }
    let position = crate::timeline::argmax(&curve);
    let peak_allocated = curve[position as usize];
    let recorded = replay.allocated[replay.peak_position() as usize];
    let higher = peak_allocated.saturating_sub(recorded) * 100 >= recorded;
    let mut left = format!(
        "the optimizer's state ({} tensors, {}), made lazily by its first `step()`{}, as PyTorch's optimizers do",
        state.0,
        human_bytes(state.1),
        state_site
            .and_then(|s| super::holder(&trace.sites, s))
            .map(|l| format!(" (at {l})"))
            .unwrap_or_default()
    );
    if gradients.0 > 0 {
        left.push_str(&format!(
            ", and {} gradients ({}) that `zero_grad()` kept (`set_to_none=False`)",
            gradients.0,
            human_bytes(gradients.1)
        ));
    }
    let evidence = vec![
        format!(
            "the recording holds one training step (forward from event {}, optimizer step from event {}) and ends after it; alive at its end: {left}",
            first_forward.saturating_sub(1),
            first_step.saturating_sub(1)
        ),
        format!(
            "the next step runs its forward and backward with them alive: predicted peak {} at the point of this step's event {}, {} more than recorded (a prediction: record two steps to see it)",
            human_bytes(peak_allocated),
            position.saturating_sub(1),
            human_bytes(peak_allocated.saturating_sub(recorded))
        ),
    ];
    carried_from_start.sort_unstable();
    Some(NextStep {
        peak_allocated,
        position,
        carried: total,
        curve,
        evidence,
        carried_from_start,
        new_values: added_into,
        higher,
    })
}

/// The device as the next step would record it: the carried tensors alive
/// from its start, and a new value beside each kept gradient where
/// backward makes it (alive for one position, as `AccumulateGrad` adds it
/// in and frees it). Its allocated bytes are the prediction's curve. What
/// the plan and the what-if price when a next step is predicted; reserved
/// memory is not predicted.
pub fn device(cd: &ClassifiedDevice, n: &NextStep) -> ClassifiedDevice {
    let mut replay = cd.timeline.replay.clone();
    let mut classes = cd.classes.clone();
    for &i in &n.carried_from_start {
        replay.intervals[i].start = 0;
    }
    for (k, &(at, size, gradient)) in n.new_values.iter().enumerate() {
        debug_assert_eq!(classes[gradient].category, Category::Gradient);
        let kept = replay.intervals[gradient];
        replay.intervals.push(Interval {
            // An address no recorded tensor has, so no chain takes it in.
            addr: u64::MAX - k as u64,
            size,
            start: at,
            end: at + 1,
            ..kept
        });
        // What backward records for it: a tensor of the gradient's size
        // made and freed within backward.
        classes.push(crate::classify::Builtin::FreedWithinBackward.class());
    }
    replay.allocated = n.curve.clone();
    replay.reserved = None;
    let timeline = DeviceTimeline::new(replay, |i| classes[i].category);
    ClassifiedDevice {
        timeline,
        classes,
        before_recording: cd.before_recording.clone(),
        site_facts: cd.site_facts.clone(),
    }
}
