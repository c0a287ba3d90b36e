//! Bytes by category over time: each interval's start and end as a change
//! of its category's bytes, in order of position, and a [`Walk`] that
//! applies them position by position. The plots and the planner both read
//! them, so they are built once per device.
//!
//! The changes are kept as interval indices in order (4 bytes each), not as
//! `(position, category, delta)` (16): the position and delta are the
//! interval's own, the category one byte per interval. And the starts need
//! no list at all when the intervals are already in order of start (as a
//! replay lists them). On `snap-unshared.pickle` (`scripts/bench_inputs.sh`,
//! 333K intervals): 11 MB of `analyze`'s peak RSS.

use crate::model::Category;

use super::{Interval, Replay};

/// One replayed device and the changes of its categories' bytes; the input
/// of the per-category plots and of the planner.
pub struct DeviceTimeline {
    pub replay: Replay,
    /// `category(i)` of each interval.
    categories: Vec<Category>,
    /// The intervals by start position, when they are not listed in that
    /// order already (hand-built timelines in tests).
    starts: Option<Vec<u32>>,
    /// The intervals that end before the last position, by end position.
    ends: Vec<u32>,
}

impl DeviceTimeline {
    /// `category(i)` is the category of `replay.intervals[i]`.
    pub fn new(replay: Replay, category: impl Fn(usize) -> Category + Sync) -> DeviceTimeline {
        let categories = (0..replay.intervals.len()).map(category).collect();
        let starts = starts_by_position(&replay.intervals);
        let ends = ends_by_position(&replay);
        DeviceTimeline {
            replay,
            categories,
            starts,
            ends,
        }
    }

    /// Calls `visit(position, bytes by category)` for every position in
    /// order (values may dip below 0 only on damaged input; callers clamp).
    pub fn for_each_position(&self, mut visit: impl FnMut(usize, &[i64; Category::ALL.len()])) {
        let mut walk = Walk::default();
        for p in 0..self.replay.positions() as usize {
            walk.advance(self, p);
            visit(p, &walk.current);
        }
    }

    /// The interval `k`-th in order of start.
    #[inline]
    fn start(&self, k: usize) -> Option<usize> {
        match &self.starts {
            None => (k < self.replay.intervals.len()).then_some(k),
            Some(order) => order.get(k).map(|&i| i as usize),
        }
    }
}

/// A walk over a timeline's positions: bytes by category at the position
/// last advanced to. Cloning it saves the walk to resume later.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    pub current: [i64; Category::ALL.len()],
    next_start: usize,
    next_end: usize,
}

impl Walk {
    /// Applies the changes at `position`; positions must be advanced to in
    /// order, none skipped.
    #[inline]
    pub fn advance(&mut self, tl: &DeviceTimeline, position: usize) {
        let intervals = &tl.replay.intervals;
        while let Some(k) = tl.start(self.next_start) {
            let i = &intervals[k];
            if i.start as usize != position {
                break;
            }
            self.current[tl.categories[k].index()] += i.size as i64;
            self.next_start += 1;
        }
        while let Some(&k) = tl.ends.get(self.next_end) {
            let i = &intervals[k as usize];
            if i.end as usize != position {
                break;
            }
            self.current[tl.categories[k as usize].index()] -= i.size as i64;
            self.next_end += 1;
        }
    }
}

/// The intervals by start position: `None` when they are listed in that
/// order already, as a replay lists them (in order of allocation, the
/// baseline ones, which all start at 0, first).
fn starts_by_position(intervals: &[Interval]) -> Option<Vec<u32>> {
    if intervals.is_sorted_by_key(|i| i.start) {
        return None;
    }
    let mut order: Vec<u32> = (0..intervals.len() as u32).collect();
    order.sort_by_key(|&k| intervals[k as usize].start);
    Some(order)
}

/// The intervals that end before the last position, by end position: a
/// counting sort (one count per position), several times faster than
/// sorting a few hundred thousand ends by comparison.
fn ends_by_position(replay: &Replay) -> Vec<u32> {
    let positions = replay.positions() as usize;
    let ending = || {
        replay
            .intervals
            .iter()
            .enumerate()
            .filter(|(_, i)| (i.end as usize) < positions)
    };
    // `next[p]`: where the next end at position `p` goes.
    let mut next = vec![0u32; positions];
    for (_, i) in ending() {
        next[i.end as usize] += 1;
    }
    let mut total = 0;
    for slot in &mut next {
        let count = *slot;
        *slot = total;
        total += count;
    }
    let mut ends = vec![0u32; total as usize];
    for (k, i) in ending() {
        let slot = &mut next[i.end as usize];
        ends[*slot as usize] = k as u32;
        *slot += 1;
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{curve, Interval, Origin};
    use proptest::prelude::*;

    proptest! {
        /// Walking the changes gives, at every position, the bytes of the
        /// intervals live there by category (intervals in any order, some
        /// starting at 0 or never ending).
        #[test]
        fn walk_equals_summing_live_intervals(
            spans in proptest::collection::vec((0u32..40, 1u32..45, 1u64..100, 0usize..10), 0..60)
        ) {
            let positions = 41u32;
            let intervals: Vec<Interval> = spans
                .iter()
                .map(|&(start, len, size, _)| Interval {
                    addr: 0,
                    size,
                    site: 0,
                    start,
                    end: (start + len).min(positions),
                    origin: Origin::Traced,
                    given: None,
                })
                .collect();
            let categories: Vec<Category> = spans.iter().map(|&(.., c)| Category::ALL[c]).collect();
            let replay = Replay {
                events: positions - 1,
                allocated: curve(&intervals, positions),
                intervals,
                reserved: None,
                baseline_bytes: 0,
                diagnostics: Vec::new(),
                ooms: Vec::new(),
                timestamped: false,
            };
            let tl = DeviceTimeline::new(replay, |i| categories[i]);
            let mut seen = 0;
            tl.for_each_position(|p, current| {
                let mut want = [0i64; Category::ALL.len()];
                for (i, c) in tl.replay.intervals.iter().zip(&categories) {
                    if i.live_at(p as u32) {
                        want[c.index()] += i.size as i64;
                    }
                }
                assert_eq!(current, &want, "position {p}");
                seen += 1;
            });
            prop_assert_eq!(seen, positions);
        }
    }
}
