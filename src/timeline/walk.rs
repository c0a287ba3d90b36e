//! Bytes by category over time: each interval's start and end as a change
//! of its category's bytes, in order of position, and a [`Walk`] that
//! applies them position by position. The plots and the planner both read
//! them, so they are built once per device.
//!
//! The changes are kept as interval indices in order (4 bytes each), not as
//! `(position, category, delta)` (16): the position and delta are the
//! interval's own, the category one byte per interval. And the starts need
//! no list beyond the intervals that start at 0 when the others are listed
//! in order of start (as a replay lists them: in order of allocation, and
//! the baseline ones, which start at 0, wherever they were found). On
//! `snap-unshared.pickle` (`scripts/bench_inputs.sh`, 333K intervals):
//! 11 MB of `analyze`'s peak RSS.

use crate::model::Category;

use super::{Interval, Replay};

/// One replayed device and the changes of its categories' bytes; the input
/// of the per-category plots and of the planner.
pub struct DeviceTimeline {
    pub replay: Replay,
    /// `category(i)` of each interval.
    categories: Vec<Category>,
    /// Where the intervals start.
    starts: Starts,
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
}

/// The order in which a [`Walk`] meets the intervals' starts.
enum Starts {
    /// Those that start at 0 (`at_zero`), then the others as listed: they
    /// are listed in order of start.
    Listed { at_zero: Vec<u32> },
    /// Every interval by start position (hand-built timelines in tests).
    Sorted(Vec<u32>),
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
        let mut start =
            |k: usize| self.current[tl.categories[k].index()] += intervals[k].size as i64;
        match &tl.starts {
            Starts::Listed { at_zero } => {
                if position == 0 {
                    at_zero.iter().for_each(|&k| start(k as usize));
                }
                // `next_start`: the next interval listed that starts after 0.
                while let Some(i) = intervals.get(self.next_start) {
                    if i.start == 0 {
                        self.next_start += 1;
                        continue;
                    }
                    if i.start as usize != position {
                        break;
                    }
                    start(self.next_start);
                    self.next_start += 1;
                }
            }
            Starts::Sorted(order) => {
                while let Some(&k) = order.get(self.next_start) {
                    if intervals[k as usize].start as usize != position {
                        break;
                    }
                    start(k as usize);
                    self.next_start += 1;
                }
            }
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

/// The order of the intervals' starts: as listed, but for those that
/// start at 0, when the others are listed in order of start (as a replay
/// lists them); else sorted.
fn starts_by_position(intervals: &[Interval]) -> Starts {
    let after_zero = || intervals.iter().filter(|i| i.start > 0);
    if after_zero().is_sorted_by_key(|i| i.start) {
        let at_zero = (0..intervals.len() as u32)
            .filter(|&k| intervals[k as usize].start == 0)
            .collect();
        return Starts::Listed { at_zero };
    }
    let mut order: Vec<u32> = (0..intervals.len() as u32).collect();
    order.sort_by_key(|&k| intervals[k as usize].start);
    Starts::Sorted(order)
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
        /// starting at 0 or never ending; `listed`: as a replay lists them,
        /// in order of start but for those at 0, which are anywhere).
        #[test]
        fn walk_equals_summing_live_intervals(
            mut spans in proptest::collection::vec((0u32..40, 1u32..45, 1u64..100, 0usize..10), 0..60),
            listed: bool,
        ) {
            if listed {
                let mut zero = 0;
                spans.sort_by_key(|s| (s.0, s.2));
                // Each start at 0 moved to a place of its own (by size).
                while let Some(k) = spans.iter().skip(zero).position(|s| s.0 == 0) {
                    let s = spans.remove(zero + k);
                    let to = (s.2 as usize) % (spans.len() + 1);
                    spans.insert(to, s);
                    zero += 1;
                    if zero >= spans.len() {
                        break;
                    }
                }
            }
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
            let after_zero = tl.replay.intervals.iter().filter(|i| i.start > 0);
            prop_assert_eq!(
                matches!(tl.starts, Starts::Listed { .. }),
                after_zero.is_sorted_by_key(|i| i.start)
            );
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
