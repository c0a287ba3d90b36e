//! In-place updates in snapshots made from a profile.
//!
//! `torch.cuda._memory_viz._profile_to_snapshot` turns every in-place update
//! of a tensor (a new *version*: `param.add_()`, `exp_avg.lerp_()`, `grad +=`)
//! into `free_requested`, `free_completed` and `alloc` of the same block,
//! back to back, every entry carrying the stack of the tensor's first
//! allocation (frameless for a tensor that existed before recording) and no
//! time. A caching allocator's own history never looks like this: an
//! in-place update allocates nothing, and its entries carry their own stacks
//! and times. Such a chain of versions is one tensor: it is classified once,
//! over its whole lifetime, and every version keeps that category (an
//! optimizer step updating a parameter in place does not make it optimizer
//! state, nor its moments temporaries).

use crate::model::{Action, Event};
use crate::timeline::Interval;

/// Event indices of the allocations that are in-place updates of the block
/// freed by the two entries before them, in order.
pub(crate) fn version_bumps(events: &[Event]) -> Vec<u32> {
    let mut bumps = Vec::new();
    for (k, w) in events.windows(3).enumerate() {
        let [requested, completed, alloc] = w else {
            unreachable!("windows of 3")
        };
        let same_block = |e: &Event| {
            e.addr == alloc.addr && e.size == alloc.size && e.site == alloc.site && e.ts().is_none()
        };
        if alloc.action == Action::Alloc
            && completed.action == Action::FreeCompleted
            && requested.action == Action::FreeRequested
            && alloc.ts().is_none()
            && same_block(completed)
            && same_block(requested)
        {
            bumps.push(k as u32 + 2);
        }
    }
    bumps
}

/// The tensors behind the intervals: each interval's first version.
pub(crate) struct Chains {
    /// Per interval, the index of its tensor's first version (itself when
    /// it is one).
    root: Vec<u32>,
    /// Per first version, the end of its tensor's last version.
    end: Vec<u32>,
}

impl Chains {
    /// `None` when no allocation is an in-place update (`bumps` from
    /// [`version_bumps`]).
    pub(crate) fn new(intervals: &[Interval], bumps: &[u32]) -> Option<Chains> {
        if bumps.is_empty() {
            return None;
        }
        // The bump at event `b` replaces the interval that ends at position
        // `b` (its free_completed is event `b - 1`) and starts at `b + 1`.
        let replaced = |position: u32| bumps.binary_search(&position).is_ok();
        let mut ending_at = rustc_hash::FxHashMap::default();
        for (i, interval) in intervals.iter().enumerate() {
            if replaced(interval.end) {
                ending_at.insert(interval.end, i as u32);
            }
        }
        let mut root: Vec<u32> = (0..intervals.len() as u32).collect();
        let mut end: Vec<u32> = intervals.iter().map(|i| i.end).collect();
        for (i, interval) in intervals.iter().enumerate() {
            let Some(bump) = interval.start.checked_sub(1).filter(|&b| replaced(b)) else {
                continue;
            };
            let Some(&previous) = ending_at.get(&bump) else {
                continue;
            };
            // Versions are replayed in order, so the previous one comes first.
            if previous as usize >= i || intervals[previous as usize].addr != interval.addr {
                continue;
            }
            let first = root[previous as usize];
            root[i] = first;
            end[first as usize] = end[first as usize].max(interval.end);
        }
        Some(Chains { root, end })
    }

    /// The first version of interval `i`'s tensor.
    pub(crate) fn root(&self, i: usize) -> usize {
        self.root[i] as usize
    }

    /// The whole tensor of the first version `interval` (index `i`): its
    /// start, and the end of its last version.
    pub(super) fn whole(&self, i: usize, interval: &Interval) -> Interval {
        Interval {
            end: self.end[i],
            ..*interval
        }
    }
}
