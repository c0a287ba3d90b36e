//! A curve over positions kept as its steps: the positions where its value
//! changes and the value from there on.
//!
//! Why: reserved memory changes only where a segment is mapped or freed
//! (or a profiler's `Total Reserved` moves), a few thousand times in a
//! 1M-event history, so a value per position (8 MB there) is nearly all
//! repeats. On `snap-unshared.pickle` (`scripts/bench_inputs.sh`) the
//! reserved curve was 8 MB of `analyze`'s peak RSS.

/// A curve of `len` positions: `steps[i] = (p, v)` says the value is `v`
/// from position `p` up to the next step's position. The first step is at
/// position 0 (when `len > 0`) and no two steps in a row have one value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Steps {
    len: u32,
    steps: Vec<(u32, u64)>,
}

impl Steps {
    /// Appends the value at the next position.
    pub fn push(&mut self, value: u64) {
        if self.steps.last().is_none_or(|&(_, last)| last != value) {
            self.steps.push((self.len, value));
        }
        self.len += 1;
    }

    /// Appends `count` positions of `value`.
    pub fn push_run(&mut self, value: u64, count: u32) {
        if count == 0 {
            return;
        }
        self.push(value);
        self.len += count - 1;
    }

    /// Number of positions.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// The value at `position` (past the end, the last value; 0 without positions).
    pub fn get(&self, position: u32) -> u64 {
        let i = self.steps.partition_point(|&(p, _)| p <= position);
        self.steps.get(i.saturating_sub(1)).map_or(0, |s| s.1)
    }

    /// The values position by position.
    pub fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.steps.iter().enumerate().flat_map(move |(i, &(p, v))| {
            let next = self.steps.get(i + 1).map_or(self.len, |s| s.0);
            std::iter::repeat_n(v, (next - p) as usize)
        })
    }

    /// The largest value, if there is a position.
    pub fn max(&self) -> Option<u64> {
        self.steps.iter().map(|s| s.1).max()
    }

    /// The position of the largest value, the earliest on ties; 0 without positions.
    pub fn argmax(&self) -> u32 {
        let mut best: Option<(u32, u64)> = None;
        for &(p, v) in &self.steps {
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((p, v));
            }
        }
        best.map_or(0, |(p, _)| p)
    }

    #[cfg(test)]
    pub fn to_vec(&self) -> Vec<u64> {
        self.values().collect()
    }
}

/// The curve whose value at each position the iterator gives, in order.
impl FromIterator<u64> for Steps {
    fn from_iter<I: IntoIterator<Item = u64>>(values: I) -> Steps {
        let mut curve = Steps::default();
        for v in values {
            curve.push(v);
        }
        curve
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every reading of the steps equals the same reading of the
        /// values they were made from.
        #[test]
        fn steps_read_as_their_values(values in proptest::collection::vec(0u64..4, 0..60)) {
            let steps: Steps = values.iter().copied().collect();
            prop_assert_eq!(steps.len() as usize, values.len());
            prop_assert_eq!(steps.to_vec(), values.clone());
            for (p, &v) in values.iter().enumerate() {
                prop_assert_eq!(steps.get(p as u32), v);
            }
            prop_assert_eq!(steps.max(), values.iter().copied().max());
            prop_assert_eq!(steps.argmax(), super::super::replay::argmax(&values));
        }
    }
}
