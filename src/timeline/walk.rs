//! Bytes by category over time: each interval's start and end as a change
//! of its category's bytes, sorted by position, and a [`Walk`] that applies
//! them position by position. The plots and the planner both read them, so
//! they are built once per device.

use crate::model::Category;

use super::Replay;

/// A change of a category's bytes at a position: `(position, category, delta)`.
pub type Change = (u32, Category, i64);

/// One replayed device and the changes of its categories' bytes; the input
/// of the per-category plots and of the planner.
pub struct DeviceTimeline {
    pub replay: Replay,
    /// Per-category changes where intervals start, `(position, category,
    /// +bytes)`, sorted by position; with [`DeviceTimeline::ends`], replaying
    /// them ([`Walk`]) gives bytes by category over time.
    pub starts: Vec<Change>,
    /// Per-category changes where intervals end, `(position, category,
    /// −bytes)`, sorted by position.
    pub ends: Vec<Change>,
}

impl DeviceTimeline {
    /// `category(i)` is the category of `replay.intervals[i]`.
    pub fn new(replay: Replay, category: impl Fn(usize) -> Category + Sync) -> DeviceTimeline {
        let (starts, ends) = rayon::join(
            || starts_by_position(&replay, &category),
            || ends_by_position(&replay, &category),
        );
        DeviceTimeline {
            replay,
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
        for (changes, next) in [
            (&tl.starts, &mut self.next_start),
            (&tl.ends, &mut self.next_end),
        ] {
            while let Some(&(at, c, d)) = changes.get(*next) {
                if at as usize != position {
                    break;
                }
                self.current[c.index()] += d;
                *next += 1;
            }
        }
    }
}

/// The starts of every interval, sorted by position. They need no sort:
/// intervals are listed in order of allocation, except the baseline ones,
/// which all start at 0.
fn starts_by_position(replay: &Replay, category: &impl Fn(usize) -> Category) -> Vec<Change> {
    let intervals = || replay.intervals.iter().enumerate();
    let mut starts = Vec::with_capacity(replay.intervals.len());
    starts.extend(
        intervals()
            .filter(|(_, i)| i.start == 0)
            .map(|(k, i)| (0, category(k), i.size as i64)),
    );
    starts.extend(
        intervals()
            .filter(|(_, i)| i.start > 0)
            .map(|(k, i)| (i.start, category(k), i.size as i64)),
    );
    if !starts.is_sorted_by_key(|s| s.0) {
        // Not from `replay` (hand-built timelines in tests).
        starts.sort_by_key(|s| s.0);
    }
    starts
}

/// The ends of intervals that end before the last position, sorted by
/// position: a counting sort (one count per position), several times
/// faster than sorting a few hundred thousand ends by comparison.
fn ends_by_position(replay: &Replay, category: &impl Fn(usize) -> Category) -> Vec<Change> {
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
    let mut ends = vec![(0, Category::Unknown, 0); total as usize];
    for (k, i) in ending() {
        let slot = &mut next[i.end as usize];
        ends[*slot as usize] = (i.end, category(k), -(i.size as i64));
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
