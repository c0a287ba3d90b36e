//! Demand: a device's memory by pool (category, or part of one: see
//! [`super::pools`]) at every position of its timeline, and the peak of it
//! under any factors, found without a table of every position.

use super::pools::{Overlay, OverlayWalk, Part, NPOOL};
use crate::model::Category;
use crate::timeline::{DeviceTimeline, Steps, Walk};

/// Bytes by pool at one position.
pub type Row = [u64; NPOOL];

/// A device's memory demand at every position of its timeline, by pool:
/// allocated bytes by category (what the replay cannot attribute is
/// `unknown`), the parts of categories that some lever acts on alone moved
/// into their own pools, plus `allocator_cache`: the allocator's overhead.
///
/// **The allocator's overhead is one number**, reserved peak − allocated
/// peak, added at every position. A caching allocator keeps what the
/// allocated peak needed plus its fragmentation; cutting tensors lowers the
/// allocated peak and what it reserves with it, so the cache left behind at
/// quieter instants (reserved − allocated there) is not a demand of its own.
/// Before any cut the peak of the demand is the reserved peak.
///
/// A 1M-event trace has 1M positions, and the planner asks for the peak
/// under new factors many times, so the rows are not stored: the positions
/// are cut into blocks of [`BLOCK`], each keeping the state of the replay at
/// its start and the componentwise maximum of its rows. A peak search
/// replays only the blocks whose maximum, scaled, can still reach the best
/// total found so far.
#[derive(Clone)]
pub struct Demand<'a> {
    pools: Vec<usize>,
    positions: usize,
    rows: Rows<'a>,
    block_max: Vec<BlockMax>,
}

/// What bounds a block's rows: their componentwise maximum, and the largest
/// row total and tensor (non-cache) total.
#[derive(Debug, Clone, Copy)]
struct BlockMax {
    per_pool: Row,
    total: u64,
    tensors: u64,
}

impl Default for BlockMax {
    fn default() -> BlockMax {
        BlockMax {
            per_pool: [0; NPOOL],
            total: 0,
            tensors: 0,
        }
    }
}

impl BlockMax {
    fn add(&mut self, row: &Row) {
        for (m, v) in self.per_pool.iter_mut().zip(row) {
            *m = (*m).max(*v);
        }
        let total: u64 = row.iter().sum();
        self.total = self.total.max(total);
        self.tensors = self
            .tensors
            .max(total - row[Category::AllocatorCache.index()]);
    }
}

/// Positions per block of a [`Demand`].
pub(crate) const BLOCK: usize = 128;

#[derive(Clone)]
enum Rows<'a> {
    /// Every row (small demands: an OOM instant, tests).
    Table(Vec<Row>),
    /// Rows replayed from the timeline's category changes and the parts'
    /// overlay, from the walk states saved at each block's start.
    Timeline {
        tl: &'a DeviceTimeline,
        overlay: Overlay,
        overhead: u64,
        starts: Vec<(Walk, OverlayWalk)>,
    },
}

impl<'a> Demand<'a> {
    /// Builds the demand from a replayed, classified device and the parts
    /// of its categories: one walk over its positions, O(positions +
    /// allocations), O(positions / [`BLOCK`]) memory.
    pub fn from_timeline(tl: &'a DeviceTimeline, overlay: Overlay) -> Demand<'a> {
        let positions = tl.replay.positions() as usize;
        let overhead = allocator_overhead(tl);
        let mut starts = Vec::with_capacity(positions.div_ceil(BLOCK));
        let mut block_max = Vec::with_capacity(positions.div_ceil(BLOCK));
        let mut walk = (Walk::default(), OverlayWalk::default());
        for start in (0..positions).step_by(BLOCK) {
            starts.push(walk.clone());
            let mut max = BlockMax::default();
            walk_rows(
                &mut walk,
                tl,
                &overlay,
                overhead,
                start..(start + BLOCK).min(positions),
                |_, row| max.add(row),
            );
            block_max.push(max);
        }
        Demand::new(
            positions,
            Rows::Timeline {
                tl,
                overlay,
                overhead,
                starts,
            },
            block_max,
        )
    }

    /// Builds a demand from rows by pool.
    pub fn from_rows(rows: Vec<Row>) -> Demand<'static> {
        let block_max = rows
            .chunks(BLOCK)
            .map(|block| {
                let mut max = BlockMax::default();
                block.iter().for_each(|row| max.add(row));
                max
            })
            .collect();
        Demand::new(rows.len(), Rows::Table(rows), block_max)
    }

    /// Builds a demand from per-category series of equal length (repeated
    /// categories add up; `allocator_cache` is taken as given).
    #[cfg(test)]
    pub fn from_series(series: &[(Category, Vec<u64>)]) -> Demand<'static> {
        let positions = series.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
        let mut rows = vec![[0u64; NPOOL]; positions];
        for (c, v) in series {
            for (row, x) in rows.iter_mut().zip(v) {
                row[c.index()] += x;
            }
        }
        Demand::from_rows(rows)
    }

    fn new(positions: usize, rows: Rows<'a>, block_max: Vec<BlockMax>) -> Demand<'a> {
        let pools = (0..NPOOL)
            .filter(|&p| block_max.iter().any(|m| m.per_pool[p] > 0))
            .collect();
        Demand {
            pools,
            positions,
            rows,
            block_max,
        }
    }

    /// This timeline's demand with `edits` (see [`Overlay::edits`]) walked
    /// with it; `None` for a table of rows.
    pub fn with_edits(&self, edits: Vec<(u32, usize, i64)>) -> Option<Demand<'a>> {
        let Rows::Timeline { tl, overlay, .. } = &self.rows else {
            return None;
        };
        let mut overlay = overlay.clone();
        overlay.edits = edits;
        Some(Demand::from_timeline(tl, overlay))
    }

    /// The parts' overlay the demand was made with (empty for a table).
    pub fn overlay(&self) -> Option<&Overlay> {
        match &self.rows {
            Rows::Timeline { overlay, .. } => Some(overlay),
            Rows::Table(_) => None,
        }
    }

    /// The largest bytes each pool holds at any position.
    pub fn max_by_pool(&self) -> Row {
        let mut out = [0u64; NPOOL];
        for m in &self.block_max {
            for (o, v) in out.iter_mut().zip(&m.per_pool) {
                *o = (*o).max(*v);
            }
        }
        out
    }

    /// Bytes by pool at a position, each pool scaled by its factor
    /// (rounded to whole bytes).
    pub fn scaled_at(&self, position: usize, factors: &[f64; NPOOL]) -> Row {
        let mut out = [0u64; NPOOL];
        if position < self.positions {
            self.visit_block(position / BLOCK, |p, row| {
                if p == position {
                    for &c in &self.pools {
                        out[c] = scale(row[c], factors[c]);
                    }
                }
            });
        }
        out
    }

    /// The peak of the scaled total over the whole timeline and its position.
    /// Ties go to the position with the most allocated (non-cache) bytes,
    /// then the earliest.
    ///
    /// Blocks are searched by their scaled maximum, largest first, until no
    /// block left can reach the best total (`scale` is monotone, so a block's
    /// scaled maximum bounds every scaled row in it).
    pub fn peak(&self, factors: &[f64; NPOOL]) -> (u64, usize) {
        let pools = &self.pools;
        let cache = Category::AllocatorCache.index();
        let total = |row: &Row| -> u64 { pools.iter().map(|&c| scale(row[c], factors[c])).sum() };
        // Per block: bounds on its scaled total and on its tensor bytes.
        // Factors of at most 1 never grow a row (`scale` rounds to the
        // nearest byte), so its unscaled totals bound it too.
        let shrink_only = factors.iter().all(|f| *f <= 1.0);
        let bound: Vec<(u64, u64)> = self
            .block_max
            .iter()
            .map(|max| {
                let t = total(&max.per_pool);
                let n = t - scale(max.per_pool[cache], factors[cache]);
                match shrink_only {
                    true => (t.min(max.total), n.min(max.tensors)),
                    false => (t, n),
                }
            })
            .collect();
        let mut order: Vec<usize> = (0..bound.len()).collect();
        order.sort_unstable_by_key(|&b| (std::cmp::Reverse(bound[b]), b));
        // Best (total, tensors, position): the largest total, then tensors,
        // then the earliest position.
        let mut best: Option<(u64, u64, usize)> = None;
        for b in order {
            let (bound_total, bound_tensors) = bound[b];
            if let Some((t, n, _)) = best {
                if bound_total < t {
                    break;
                }
                if bound_total == t && bound_tensors < n {
                    continue;
                }
            }
            self.visit_block(b, |p, row| {
                let t = total(row);
                let tensors = t - scale(row[cache], factors[cache]);
                let better = best.is_none_or(|(bt, bn, bp)| {
                    (t, tensors, std::cmp::Reverse(p)) > (bt, bn, std::cmp::Reverse(bp))
                });
                if better {
                    best = Some((t, tensors, p));
                }
            });
        }
        best.map_or((0, 0), |(t, _, p)| (t, p))
    }

    /// Calls `visit(position, row)` for every position, in order.
    pub fn for_each_row(&self, mut visit: impl FnMut(usize, &Row)) {
        for b in 0..self.block_max.len() {
            self.visit_block(b, &mut visit);
        }
    }

    /// Calls `visit(position, row)` for each position of block `b`, in order.
    fn visit_block(&self, b: usize, mut visit: impl FnMut(usize, &Row)) {
        let range = b * BLOCK..((b + 1) * BLOCK).min(self.positions);
        match &self.rows {
            Rows::Table(rows) => {
                for p in range {
                    visit(p, &rows[p]);
                }
            }
            Rows::Timeline {
                tl,
                overlay,
                overhead,
                starts,
            } => walk_rows(&mut starts[b].clone(), tl, overlay, *overhead, range, visit),
        }
    }
}

/// The allocator's overhead the demand adds at every position: reserved
/// peak − allocated peak (0 when reserved memory is unknown).
pub fn allocator_overhead(tl: &DeviceTimeline) -> u64 {
    let allocated = tl.replay.allocated.iter().copied().max().unwrap_or(0);
    let reserved = tl
        .replay
        .reserved
        .as_ref()
        .and_then(Steps::max)
        .unwrap_or(0);
    reserved.saturating_sub(allocated)
}

/// Walks `range` (which must start where `walk` stands), calling
/// `visit(position, row)`: the categories' bytes (clamped at 0), plus
/// `unknown` for allocated bytes the categories do not cover, the parts
/// moved out of their categories, and the allocator's overhead.
fn walk_rows(
    walk: &mut (Walk, OverlayWalk),
    tl: &DeviceTimeline,
    overlay: &Overlay,
    overhead: u64,
    range: std::ops::Range<usize>,
    mut visit: impl FnMut(usize, &Row),
) {
    let (walk, parts) = walk;
    for p in range {
        walk.advance(tl, p);
        parts.advance(overlay, p);
        let mut row = [0u64; NPOOL];
        for (r, c) in row.iter_mut().zip(&walk.current) {
            *r = (*c).max(0) as u64;
        }
        let tracked: u64 = row.iter().sum();
        let allocated = tl.replay.allocated.get(p).copied().unwrap_or(tracked);
        row[Category::Unknown.index()] += allocated.saturating_sub(tracked);
        // A what-if's edits, after what the replay could not attribute is
        // counted from its own curve.
        for (r, e) in row.iter_mut().zip(&parts.edited) {
            *r = (*r as i64 + e).max(0) as u64;
        }
        for part in Part::ALL {
            let moved =
                (parts.current[part as usize].max(0) as u64).min(row[part.category().index()]);
            row[part.category().index()] -= moved;
            row[part.pool()] = moved;
        }
        row[Category::AllocatorCache.index()] = overhead;
        visit(p, &row);
    }
}

/// `bytes × factor`, rounded to whole bytes (exact for factor 1).
pub fn scale(bytes: u64, factor: f64) -> u64 {
    if factor == 1.0 {
        bytes
    } else {
        (bytes as f64 * factor).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The block search finds what a scan of every row finds: the largest
    /// scaled total, then the most tensor bytes, then the earliest position
    /// (sparse small values over several blocks, so blocks differ and ties
    /// are common).
    #[test]
    fn block_search_equals_a_full_scan() {
        use proptest::prelude::*;
        let cases = (1usize..3 * BLOCK + 7).prop_flat_map(|n| {
            (
                proptest::collection::vec(
                    proptest::collection::vec(prop_oneof![12 => Just(0u64), 1 => 1u64..4], n),
                    3,
                ),
                proptest::collection::vec(
                    prop_oneof![Just(0.0), Just(0.25), Just(1.0), Just(1.5)],
                    3,
                ),
            )
        });
        let cats = [
            Category::Activation,
            Category::Parameter,
            Category::AllocatorCache,
        ];
        proptest!(ProptestConfig::with_cases(4000), |((series, f) in cases)| {
            let series: Vec<(Category, Vec<u64>)> = cats.iter().copied().zip(series).collect();
            let demand = Demand::from_series(&series);
            let mut factors = [1.0; NPOOL];
            for (c, x) in cats.iter().zip(&f) {
                factors[c.index()] = *x;
            }
            let mut want = (0u64, 0u64, 0usize);
            for p in 0..demand.positions {
                let row = demand.scaled_at(p, &factors);
                let total: u64 = row.iter().sum();
                let tensors = total - row[Category::AllocatorCache.index()];
                if (total, tensors) > (want.0, want.1) {
                    want = (total, tensors, p);
                }
                for (c, v) in &series {
                    prop_assert_eq!(row[c.index()], scale(v[p], factors[c.index()]));
                }
            }
            prop_assert_eq!(demand.peak(&factors), (want.0, want.2));
        });
    }
}
