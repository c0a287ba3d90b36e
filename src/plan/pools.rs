//! Pools: the planner's finer view of the categories. A lever often acts on
//! only part of a category — checkpointing on the activations saved for
//! backward, a fused optimizer on the optimizer step's transients,
//! `zero_grad(set_to_none=True)` on gradients held between steps — so the
//! demand splits those parts out of their category ([`Part`]), and a lever
//! names a whole category or one part of it ([`Target`]).
//!
//! Which bytes belong to a part is decided per allocation from its
//! classification rule and lifetime ([`Overlay::build`]); the overlay moves
//! them out of their category while they are in the part, so the demand's
//! walk stays one pass over the timeline plus a few sorted changes.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::classify::{Builtin, Classification, Rule};
use crate::model::Category;
use crate::timeline::DeviceTimeline;

use super::NCAT;

/// A part of a category that some lever acts on alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// Activations saved for backward: made in forward and freed in
    /// backward (or, in training, still alive when the trace ends in forward).
    SavedForBackward,
    /// Transients of the optimizer step (scratch freed within it).
    OptimizerStep,
    /// Gradients held from an optimizer step through the next forward,
    /// until backward writes them again.
    KeptAcrossSteps,
    /// Backward's tensors the size of a weight: each weight's new gradient
    /// before it is added into the kept one. They do not shrink with the
    /// batch.
    WeightGradients,
    /// Activations saved for backward by attention's math path, which
    /// computes in fp32 whatever the weights' dtype ([`super::fp32`]).
    SavedInFp32,
}

impl Part {
    pub const ALL: [Part; 5] = [
        Part::SavedForBackward,
        Part::OptimizerStep,
        Part::KeptAcrossSteps,
        Part::WeightGradients,
        Part::SavedInFp32,
    ];

    /// The category the part belongs to.
    pub const fn category(self) -> Category {
        match self {
            Part::SavedForBackward => Category::Activation,
            Part::OptimizerStep => Category::Temporary,
            Part::KeptAcrossSteps => Category::Gradient,
            Part::WeightGradients => Category::AutogradDetail,
            Part::SavedInFp32 => Category::Activation,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Part::SavedForBackward => "saved_for_backward",
            Part::OptimizerStep => "optimizer_step",
            Part::KeptAcrossSteps => "kept_across_steps",
            Part::WeightGradients => "weight_gradients",
            Part::SavedInFp32 => "saved_in_fp32",
        }
    }

    /// The part's index in a demand row (after the categories').
    pub fn pool(self) -> usize {
        NCAT + self as usize
    }
}

/// Pools in a demand row: one per category (what no part claims), then one per part.
pub const NPOOL: usize = NCAT + Part::ALL.len();

/// The category of a pool.
pub fn pool_category(pool: usize) -> Category {
    match pool.checked_sub(NCAT) {
        None => Category::ALL[pool],
        Some(p) => Part::ALL[p].category(),
    }
}

/// What a lever scales: a whole category (`activation`), one part of it
/// (`activation.saved_for_backward`), or what is left of a category outside
/// its parts (`temporary.other`). Written as those strings in `--levers`
/// files and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    pub category: Category,
    pub(crate) part: Option<PartSel>,
}

/// A selection within a category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PartSel {
    Part(Part),
    /// The category without its parts.
    Other,
}

impl Target {
    pub const fn all(category: Category) -> Target {
        Target {
            category,
            part: None,
        }
    }

    pub(crate) const fn part(part: Part) -> Target {
        Target {
            category: part.category(),
            part: Some(PartSel::Part(part)),
        }
    }

    pub const fn other(category: Category) -> Target {
        Target {
            category,
            part: Some(PartSel::Other),
        }
    }

    /// The pools this target covers.
    pub(crate) fn pools(self) -> Vec<usize> {
        let parts = Part::ALL.iter().filter(|p| p.category() == self.category);
        match self.part {
            None => std::iter::once(self.category.index())
                .chain(parts.map(|p| p.pool()))
                .collect(),
            Some(PartSel::Other) => vec![self.category.index()],
            Some(PartSel::Part(p)) => vec![p.pool()],
        }
    }

    /// Parses `activation`, `activation.saved_for_backward`, `temporary.other`.
    pub fn parse(s: &str) -> Option<Target> {
        let (cat, part) = match s.split_once('.') {
            Some((c, p)) => (c, Some(p)),
            None => (s, None),
        };
        let category = Category::ALL
            .into_iter()
            .find(|c| c.as_str() == cat.trim())?;
        let part = match part.map(str::trim) {
            None => None,
            Some("other") => Some(PartSel::Other),
            Some(name) => Some(PartSel::Part(
                Part::ALL
                    .into_iter()
                    .find(|p| p.as_str() == name && p.category() == category)?,
            )),
        };
        Some(Target { category, part })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.part {
            None => f.write_str(self.category.as_str()),
            Some(PartSel::Other) => write!(f, "{}.other", self.category),
            Some(PartSel::Part(p)) => write!(f, "{}.{}", self.category, p.as_str()),
        }
    }
}

impl Serialize for Target {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Target {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Target, D::Error> {
        let s = String::deserialize(d)?;
        Target::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown lever target `{s}` (a category such as `activation`, `activation.saved_for_backward`, `temporary.optimizer_step`, `gradient.kept_across_steps` or `temporary.other`)"
            ))
        })
    }
}

/// A change of a part's bytes at a position.
pub type PartChange = (u32, Part, i64);

/// Bytes moved from their category into a part, over time: sorted changes
/// where they enter and leave it (the same shape as the timeline's
/// category changes), walked next to them by the demand.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overlay {
    pub enter: Vec<PartChange>,
    pub leave: Vec<PartChange>,
    /// Bytes a what-if adds to (or, negative, takes from) a category from
    /// a position on, sorted by position: `(position, category index,
    /// bytes)`. Empty but for a demand with levers modelled from the run
    /// applied ([`super::demand::Demand::with_edits`]).
    pub edits: Vec<(u32, usize, i64)>,
    /// Whether some gradient window follows an optimizer step seen in the
    /// trace (else the windows, if any, start from before the recording).
    pub kept_after_a_step: bool,
}

/// Which lifetimes count for the parts: whether the run trains, the sizes
/// of the weights the operators read (sorted; see
/// [`crate::classify::weight_sizes`]), and the intervals made inside
/// attention's math path (ascending; see [`super::fp32::attention_math`]).
#[derive(Debug, Clone, Copy)]
pub struct OverlayInput<'a> {
    /// Where each phase allocated (`classify::PhasePositions::of` the
    /// timeline's intervals and `classes`).
    pub phases: &'a crate::classify::PhasePositions,
    pub training: bool,
    pub weight_sizes: &'a [u64],
    pub attention_math: &'a [usize],
    /// On a predicted next step (`findings::next_step_device`), the
    /// intervals it carries from the recorded step, alive from its start
    /// (ascending): gradients among them are held from that step.
    pub carried: &'a [usize],
}

impl Overlay {
    /// The parts of one classified device (`classes[i]` is the class of
    /// `timeline.replay.intervals[i]`). O(intervals · log).
    pub fn build(
        timeline: &DeviceTimeline,
        classes: &[Classification],
        input: OverlayInput<'_>,
    ) -> Overlay {
        Self::build_parts(timeline, classes, input, false)
    }

    /// Only the gradients kept across steps ([`Part::KeptAcrossSteps`]) of
    /// a training run, as [`Overlay::build`] finds them (what
    /// `zero_grad_set_to_none` removes, for the finding that it fixes,
    /// without the other parts' passes), added up at each position of the
    /// timeline (the bytes entering the part there, less those leaving it:
    /// see [`Overlay::windows`]).
    pub fn kept_across_steps_changes(
        timeline: &DeviceTimeline,
        classes: &[Classification],
        phases: &crate::classify::PhasePositions,
    ) -> Vec<i64> {
        let input = Self::kept_input(phases);
        let (windows, _) = Self::windows(timeline, classes, input, true);
        windows
            .kept
            .unwrap_or_else(|| vec![0; timeline.replay.positions() as usize])
    }

    fn kept_input(phases: &crate::classify::PhasePositions) -> OverlayInput<'_> {
        OverlayInput {
            phases,
            training: true,
            weight_sizes: &[],
            attention_math: &[],
            carried: &[],
        }
    }

    fn build_parts(
        timeline: &DeviceTimeline,
        classes: &[Classification],
        input: OverlayInput<'_>,
        only_kept: bool,
    ) -> Overlay {
        let (
            Windows {
                mut enter,
                mut leave,
                kept,
            },
            kept_after_a_step,
        ) = Self::windows(timeline, classes, input, only_kept);
        for (p, &total) in kept.iter().flatten().enumerate() {
            match total {
                0 => {}
                t if t > 0 => enter.push((p as u32, Part::KeptAcrossSteps, t)),
                t => leave.push((p as u32, Part::KeptAcrossSteps, t)),
            }
        }
        // Baseline intervals start at 0, before the rest: already sorted but
        // for gradient windows, which start later than their interval. The
        // order of changes at one position does not matter (a walk adds
        // them up), so the sorts need not be stable: an unstable sort of a
        // few hundred thousand ends took a third of the time a stable one did.
        if !enter.is_sorted_by_key(|c| c.0) {
            enter.sort_unstable_by_key(|c| c.0);
        }
        leave.sort_unstable_by_key(|c| c.0);
        Overlay {
            enter,
            leave,
            edits: Vec::new(),
            kept_after_a_step,
        }
    }

    /// [`Overlay::each_part`]'s windows: each listed as the changes where
    /// it enters and leaves its part, but the kept gradients' added up per
    /// position as they come (8 bytes a position, made at the first). A
    /// gradient alive through many steps has a window in each: the
    /// `cs336-bcrafton` snapshot × 155 (177 MiB) has 2.8M of them, which as
    /// changes took 90 MB and put the peak RSS at 1.47× the file (1.04×
    /// with `--budget`). A walk adds up the changes at a position, so their
    /// totals walk alike.
    fn windows(
        timeline: &DeviceTimeline,
        classes: &[Classification],
        input: OverlayInput<'_>,
        only_kept: bool,
    ) -> (Windows, bool) {
        let positions = timeline.replay.positions();
        let mut w = Windows::default();
        let kept_after_a_step = Self::each_part(
            timeline,
            classes,
            input,
            only_kept,
            |start, end, part, size| {
                if part != Part::KeptAcrossSteps {
                    return w.list(start, end, part, size, positions);
                }
                let at = w.kept.get_or_insert_with(|| vec![0; positions as usize]);
                at[start as usize] += size as i64;
                if let Some(total) = at.get_mut(end as usize) {
                    *total -= size as i64;
                }
            },
        );
        (w, kept_after_a_step)
    }

    /// Each window of bytes in a part (`sink(start, end, part, size)`,
    /// `start < end`, `size > 0`), in the order [`Overlay::build`] takes
    /// them; whether some gradient window follows an optimizer step
    /// ([`Overlay::kept_after_a_step`]).
    fn each_part(
        timeline: &DeviceTimeline,
        classes: &[Classification],
        input: OverlayInput<'_>,
        only_kept: bool,
        mut sink: impl FnMut(u32, u32, Part, u64),
    ) -> bool {
        use Builtin as B;
        let replay = &timeline.replay;
        let positions = replay.positions();
        let mut push = |start: u32, end: u32, part: Part, size: u64| {
            if start >= end || size == 0 {
                return;
            }
            sink(start, end, part, size);
        };
        // Positions where each phase allocated, ascending (intervals are in
        // allocation order; baseline ones start at 0 and carry no phase).
        let crate::classify::PhasePositions {
            forward,
            backward,
            optimizer,
        } = input.phases;
        // Where backward makes each new gradient: with gradients kept
        // (`zero_grad(set_to_none=False)`), the gradient an op computes is a
        // new tensor of the gradient's size, added into the kept one and
        // freed within backward; with `set_to_none=True` that tensor becomes
        // the gradient. So a kept gradient is needed from the first such
        // tensor of its size in the next backward, not from the backward's
        // first allocation.
        let mut computed = Computed::default();
        if input.training {
            // Only tensors of a gradient's size can stand for one.
            let gradient_sizes: rustc_hash::FxHashSet<u64> = replay
                .intervals
                .iter()
                .zip(classes)
                .filter(|(_, c)| c.category == Category::Gradient)
                .map(|(iv, _)| iv.size)
                .collect();
            for (interval, class) in replay.intervals.iter().zip(classes) {
                if matches!(
                    class.rule,
                    Rule::Builtin(B::ShortLivedInBackward | B::FreedWithinBackward)
                ) && gradient_sizes.contains(&interval.size)
                {
                    computed.push(interval.size, interval.start, interval.end);
                }
            }
        }
        // Whether a position comes after an optimizer step and before any
        // backward after it: a gradient that starts there is one the step
        // left (a snapshot made by `_profile_to_snapshot` ends a tensor and
        // starts another at each in-place change, so `zero_()` starts one).
        let after_a_step = |p: u32| {
            let last = |list: &[u32]| crate::classify::last_before(list, p);
            last(optimizer).is_some_and(|o| last(backward).is_none_or(|b| o > b))
        };
        let starts_after_a_step: Vec<bool> = replay
            .intervals
            .iter()
            .zip(classes)
            .map(|(iv, c)| {
                c.category == Category::Gradient && input.training && after_a_step(iv.start)
            })
            .collect();
        let (mut forward, mut backward, mut optimizer) = (
            Ascending::new(forward),
            Ascending::new(backward),
            Ascending::new(optimizer),
        );
        // The sizes of weights: the operators' (record_shapes), and the
        // parameters', gradients' and optimizer state's the trace shows.
        let mut weight_sizes: Vec<u64> = input.weight_sizes.to_vec();
        if input.training && !only_kept {
            weight_sizes.extend(
                replay
                    .intervals
                    .iter()
                    .zip(classes)
                    .filter(|(_, c)| {
                        matches!(
                            c.category,
                            Category::Parameter | Category::Gradient | Category::OptimizerState
                        )
                    })
                    .map(|(iv, _)| iv.size),
            );
            // A CUDA block is a multiple of 512 bytes.
            weight_sizes.extend(input.weight_sizes.iter().map(|b| b.next_multiple_of(512)));
        }
        weight_sizes.sort_unstable();
        weight_sizes.dedup();
        let mut kept_after_a_step = false;
        for (i, ((interval, class), after_step)) in replay
            .intervals
            .iter()
            .zip(classes)
            .zip(starts_after_a_step)
            .enumerate()
        {
            let (start, end, size) = (interval.start, interval.end, interval.size);
            let alive_at_end = end >= positions;
            if only_kept && class.category != Category::Gradient {
                continue;
            }
            match class.category {
                Category::Activation => {
                    let saved = class.rule == Rule::Builtin(B::ForwardOutputFreedInBackward)
                        || (input.training
                            && alive_at_end
                            && matches!(
                                class.rule,
                                Rule::Builtin(B::ForwardOutput | B::ExistedBeforeTraceForwardSite)
                            ));
                    if saved {
                        let part = if input.attention_math.binary_search(&i).is_ok() {
                            Part::SavedInFp32
                        } else {
                            Part::SavedForBackward
                        };
                        push(start, end, part, size);
                    }
                }
                Category::AutogradDetail
                    if input.training && weight_sizes.binary_search(&size).is_ok() =>
                {
                    push(start, end, Part::WeightGradients, size);
                }
                Category::Temporary => {
                    if matches!(
                        class.rule,
                        Rule::Builtin(B::OptimizerStepScratch | B::FreedWithinOptimizerStep)
                    ) {
                        push(start, end, Part::OptimizerStep, size);
                    }
                }
                Category::Gradient if input.training => {
                    // Held from an optimizer step (or from before the
                    // recording) through a forward, until backward runs.
                    // `pending`: held from before the recording, so the
                    // first forward may already be a new step's.
                    let mut from = start;
                    // Carried from the recorded step into a predicted next
                    // one: held from that step, as from before a recording.
                    let carried = input.carried.binary_search(&i).is_ok();
                    let mut pending = interval.origin.before_recording() || after_step || carried;
                    loop {
                        let held_from = if pending {
                            Some(from)
                        } else {
                            optimizer
                                .first_after(from.saturating_sub(1))
                                .filter(|&o| o < end)
                        };
                        let Some(held_from) = held_from else { break };
                        let Some(f) = forward.first_after(held_from).filter(|&f| f < end) else {
                            break;
                        };
                        let b = backward.first_after(held_from).map_or(end, |b| b.min(end));
                        if b < f {
                            // Backward read them before any forward: not held
                            // through one; look for a step after it.
                            pending = false;
                            from = b;
                            continue;
                        }
                        // Needed again where the next backward computes
                        // one of its size (before the step after it).
                        let next_step = optimizer.first_after(b).unwrap_or(u32::MAX);
                        // With set_to_none=True that tensor is the
                        // gradient: needed from where it is freed now.
                        // A snapshot made from a profile ends a gradient at
                        // the in-place add of its new value (and starts its
                        // next version there): that value is the tensor of
                        // its size live where it ends.
                        let taken = (end < next_step)
                            .then(|| computed.take_live_at(size, b, end))
                            .flatten()
                            .or_else(|| computed.take(size, b, next_step.min(end)));
                        let needed = taken.map_or(b, |(_, freed)| freed.min(end));
                        push(f, needed, Part::KeptAcrossSteps, size);
                        // After the add the new value lives on beside the
                        // next version until freed, where it would be the
                        // only one.
                        if let Some((_, freed)) = taken.filter(|t| t.1 > end) {
                            push(end, freed, Part::KeptAcrossSteps, size);
                        }
                        kept_after_a_step |= !pending || after_step || carried;
                        pending = false;
                        if b >= end {
                            break;
                        }
                        from = b;
                    }
                }
                _ => {}
            }
        }
        kept_after_a_step
    }
}

/// Tensors backward computes and frees within it, by size, in allocation
/// order: each can stand for one kept gradient's new value.
#[derive(Default)]
struct Computed {
    /// Per size: the tensors' positions and ends, and for each index the
    /// first index at or after it not taken yet (`len`: none),
    /// path-compressed so that many gradients of one size do not scan what
    /// others took.
    by_size: rustc_hash::FxHashMap<u64, Made>,
}

/// Tensors of one size backward made: their positions, their ends, and
/// for each index the first index at or after it not taken yet.
type Made = (Vec<u32>, Vec<u32>, Vec<u32>);

impl Computed {
    fn push(&mut self, size: u64, start: u32, end: u32) {
        let (starts, ends, next) = self.by_size.entry(size).or_default();
        next.push(starts.len() as u32);
        starts.push(start);
        ends.push(end);
    }

    /// The position and end of the first tensor of `size` made in
    /// `[from, before)` that no gradient has taken yet, taken now.
    fn take(&mut self, size: u64, from: u32, before: u32) -> Option<(u32, u32)> {
        let (starts, ends, next) = self.by_size.get_mut(&size)?;
        let first = starts.partition_point(|&p| p < from);
        let k = untaken(next, first);
        let start = *starts.get(k)?;
        if start >= before {
            return None;
        }
        next[k] = k as u32 + 1;
        Some((start, ends[k]))
    }
}

impl Computed {
    /// The last tensor of `size` made in `[from, at)` and still live at
    /// `at`, not taken yet, taken now (looking back a few tensors only).
    fn take_live_at(&mut self, size: u64, from: u32, at: u32) -> Option<(u32, u32)> {
        let (starts, ends, next) = self.by_size.get_mut(&size)?;
        let before = starts.partition_point(|&p| p < at);
        for k in (0..before).rev().take(16) {
            if starts[k] < from {
                break;
            }
            if ends[k] >= at && next[k] as usize == k {
                next[k] = k as u32 + 1;
                return Some((starts[k], ends[k]));
            }
        }
        None
    }
}

/// The first index at or after `i` whose entry is not taken (`next.len()`
/// when none), compressing the path walked.
fn untaken(next: &mut [u32], i: usize) -> usize {
    let mut root = i;
    while root < next.len() && next[root] as usize != root {
        root = next[root] as usize;
    }
    let mut k = i;
    while k < next.len() && next[k] as usize != k {
        let after = next[k] as usize;
        next[k] = root as u32;
        k = after;
    }
    root
}

/// The first position after `p` in an ascending list, for queries that
/// mostly ascend (gradients, in allocation order, ask about their own
/// start): galloping on from where the last query ended, from the front
/// again when a query goes back. Binary searches over the whole list for
/// every gradient were most of `Overlay::build` on a 1M-event snapshot.
struct Ascending<'a> {
    list: &'a [u32],
    /// Every element before it is at most the last query.
    at: usize,
    /// Answers given: a gradient kept across many steps asks, step after
    /// step, what every other gradient kept from those steps asks.
    memo: rustc_hash::FxHashMap<u32, Option<u32>>,
}

impl<'a> Ascending<'a> {
    fn new(list: &'a [u32]) -> Ascending<'a> {
        Ascending {
            list,
            at: 0,
            memo: Default::default(),
        }
    }

    fn first_after(&mut self, p: u32) -> Option<u32> {
        if let Some(&answer) = self.memo.get(&p) {
            return answer;
        }
        let answer = self.search(p);
        self.memo.insert(p, answer);
        answer
    }

    fn search(&mut self, p: u32) -> Option<u32> {
        if self.at > 0 && self.list[self.at - 1] > p {
            // Gallop back from `hi`, an element above `p`: the answer is
            // at or below it.
            let mut hi = self.at - 1;
            let mut step = 1;
            while hi >= step && self.list[hi - step] > p {
                hi -= step;
                step *= 2;
            }
            // Below `lo` (and at it, unless it is 0) everything is at most `p`.
            let lo = hi.saturating_sub(step);
            self.at = lo + self.list[lo..=hi].partition_point(|&x| x <= p);
            return self.list.get(self.at).copied();
        }
        let mut step = 1;
        while self.at + step <= self.list.len() && self.list[self.at + step - 1] <= p {
            self.at += step;
            step *= 2;
        }
        // Past `end` everything is above `p` (the loop stopped at such an element).
        let end = (self.at + step).min(self.list.len());
        self.at += self.list[self.at..end].partition_point(|&x| x <= p);
        self.list.get(self.at).copied()
    }
}

/// The windows of an overlay being built ([`Overlay::windows`]).
#[derive(Default)]
struct Windows {
    enter: Vec<PartChange>,
    leave: Vec<PartChange>,
    /// The kept gradients' bytes entering (less those leaving) at each
    /// position, once one is found.
    kept: Option<Vec<i64>>,
}

impl Windows {
    /// A window as its two changes (none where it leaves at the end).
    fn list(&mut self, start: u32, end: u32, part: Part, size: u64, positions: u32) {
        self.enter.push((start, part, size as i64));
        if end < positions {
            self.leave.push((end, part, -(size as i64)));
        }
    }
}

/// A walk over an overlay: bytes in each part at the position last advanced to.
#[derive(Debug, Clone, Default)]
pub struct OverlayWalk {
    pub current: [i64; Part::ALL.len()],
    /// The overlay's edits so far, by category.
    pub edited: [i64; NCAT],
    next_enter: usize,
    next_leave: usize,
    next_edit: usize,
}

impl OverlayWalk {
    /// Applies the changes at `position` (advanced to in order, none skipped).
    #[inline]
    pub fn advance(&mut self, overlay: &Overlay, position: usize) {
        for (changes, next) in [
            (&overlay.enter, &mut self.next_enter),
            (&overlay.leave, &mut self.next_leave),
        ] {
            while let Some(&(at, part, d)) = changes.get(*next) {
                if at as usize != position {
                    break;
                }
                self.current[part as usize] += d;
                *next += 1;
            }
        }
        while let Some(&(at, c, d)) = overlay.edits.get(self.next_edit) {
            if at as usize != position {
                break;
            }
            self.edited[c] += d;
            self.next_edit += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Taking computed tensors through the compressed "next untaken"
        /// links gives what a scan over every tensor gives.
        #[test]
        fn computed_takes_as_a_scan_does(
            starts in proptest::collection::vec(0u32..100, 0..40),
            queries in proptest::collection::vec((0u32..110, 0u32..120), 0..40),
        ) {
            let mut starts = starts;
            starts.sort_unstable();
            let mut computed = Computed::default();
            for &p in &starts {
                computed.push(8, p, p + 1);
            }
            let mut taken = vec![false; starts.len()];
            for (from, before) in queries {
                let want = (0..starts.len())
                    .find(|&k| starts[k] >= from && !taken[k])
                    .filter(|&k| starts[k] < before);
                if let Some(k) = want {
                    taken[k] = true;
                }
                proptest::prop_assert_eq!(computed.take(8, from, before).map(|t| t.0), want.map(|k| starts[k]));
            }
        }
    }

    proptest::proptest! {
        /// Any sequence of queries gets what a binary search gives.
        #[test]
        fn ascending_answers_as_a_binary_search(
            mut list in proptest::collection::vec(0u32..200, 0..60),
            queries in proptest::collection::vec(0u32..220, 0..40),
        ) {
            list.sort_unstable();
            let mut asc = Ascending::new(&list);
            for p in queries {
                let want = list.get(list.partition_point(|&x| x <= p)).copied();
                proptest::prop_assert_eq!(asc.first_after(p), want);
            }
        }
    }

    /// Every window as a change of its own, sorted (the overlay as it was
    /// built before the kept gradients were added up per position): the
    /// oracle.
    fn listed(
        d: &crate::analysis::ClassifiedDevice,
        phases: &crate::classify::PhasePositions,
        only_kept: bool,
    ) -> Overlay {
        let (timeline, classes) = (&d.timeline, &d.classes[..]);
        let input = Overlay::kept_input(phases);
        let positions = timeline.replay.positions();
        let mut w = Windows::default();
        let kept_after_a_step = Overlay::each_part(
            timeline,
            classes,
            input,
            only_kept,
            |start, end, part, size| w.list(start, end, part, size, positions),
        );
        w.enter.sort_by_key(|c| c.0);
        w.leave.sort_by_key(|c| c.0);
        Overlay {
            enter: w.enter,
            leave: w.leave,
            edits: Vec::new(),
            kept_after_a_step,
        }
    }

    /// Each part's bytes at every position, as the demand walks them.
    fn walked(overlay: &Overlay, positions: u32) -> Vec<[i64; Part::ALL.len()]> {
        let mut walk = OverlayWalk::default();
        (0..positions as usize)
            .map(|p| {
                walk.advance(overlay, p);
                walk.current
            })
            .collect()
    }

    /// On the committed training samples and the corpus's training
    /// snapshots: the overlay walks as the listed one does (every part at
    /// every position, all parts and the kept ones alone), and the kept
    /// gradients' totals per position are the listed changes added up;
    /// some inputs have kept gradients, so the totals are not all zero.
    #[test]
    fn kept_changes_per_position_are_the_overlays_summed() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(repo.join("sample_traces"))
            .expect("sample_traces")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.to_string_lossy().ends_with(".snapshot.pickle.gz"))
            .collect();
        let corpus = crate::test_support::corpus_dir();
        for f in [
            "cs336-wedsonlin/results/medium_128_training_memory_snapshot.pickle",
            "cs336-bcrafton/memory_snapshot.pickle",
        ] {
            if corpus.join(f).exists() {
                files.push(corpus.join(f));
            }
        }
        files.sort();
        let mut nonzero = 0;
        for path in &files {
            let trace = crate::input::read_file(path, &crate::input::Limits::default())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let options = crate::analysis::Options::default();
            let devices = crate::analysis::classify_devices(&trace, &options);
            for (d, device) in devices.iter().zip(&trace.devices) {
                let phases = crate::classify::PhasePositions::of(
                    &d.timeline.replay.intervals,
                    &d.classes,
                    &device.events,
                );
                let changes = Overlay::kept_across_steps_changes(&d.timeline, &d.classes, &phases);
                let positions = d.timeline.replay.positions();
                for only_kept in [false, true] {
                    let input = Overlay::kept_input(&phases);
                    let built = Overlay::build_parts(&d.timeline, &d.classes, input, only_kept);
                    let oracle = listed(d, &phases, only_kept);
                    assert_eq!(built.kept_after_a_step, oracle.kept_after_a_step);
                    assert!(
                        walked(&built, positions) == walked(&oracle, positions),
                        "{} (only kept: {only_kept})",
                        path.display()
                    );
                }
                let overlay = listed(d, &phases, true);
                let mut want = vec![0i64; d.timeline.replay.allocated.len()];
                for c in overlay.enter.iter().chain(&overlay.leave) {
                    if c.1 == Part::KeptAcrossSteps {
                        want[c.0 as usize] += c.2;
                    }
                }
                assert_eq!(changes, want, "{}", path.display());
                nonzero += usize::from(changes.iter().any(|&c| c != 0));
            }
        }
        assert!(nonzero > 0, "no input with kept gradients among {files:?}");
    }

    #[test]
    fn targets_parse_and_cover_their_pools() {
        for s in [
            "activation",
            "activation.saved_for_backward",
            "activation.saved_in_fp32",
            "temporary.optimizer_step",
            "gradient.kept_across_steps",
            "temporary.other",
        ] {
            assert_eq!(Target::parse(s).unwrap().to_string(), s);
        }
        assert!(Target::parse("parameter.saved_for_backward").is_none());
        assert!(Target::parse("nonsense").is_none());
        let act = Target::all(Category::Activation).pools();
        assert_eq!(
            act,
            vec![
                Category::Activation.index(),
                Part::SavedForBackward.pool(),
                Part::SavedInFp32.pool()
            ]
        );
        assert_eq!(
            Target::other(Category::Temporary).pools(),
            vec![Category::Temporary.index()]
        );
        for p in Part::ALL {
            assert_eq!(pool_category(p.pool()), p.category());
        }
    }
}
