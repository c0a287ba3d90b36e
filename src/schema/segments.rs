//! The allocator's view (`devices[].segments`): the caching allocator's
//! segments (one `cudaMalloc`, or one mapped range of an expandable
//! segment) and the blocks they are cut into, at the instants a post-mortem
//! asks about. Part of the report contract (see the parent module).

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::model::Category;

/// The segments at the reported instant (the peak, or `--at`), at each OOM
/// (the first [`SegmentsView::MAX_OOMS`]) and at dump time, in that order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SegmentsView {
    pub instants: Vec<SegmentState>,
    /// OOMs after the first [`SegmentsView::MAX_OOMS`], not shown.
    pub ooms_left_out: u64,
}

impl SegmentsView {
    /// OOMs whose segments are kept (a trace may hold hundreds of retries).
    pub const MAX_OOMS: usize = 8;
}

/// The allocator's state at one instant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SegmentState {
    /// What the instant is: `peak`, `at` (`--at`), `oom N` (index into
    /// `ooms`), `dump`; joined with `, ` when they coincide (`peak, dump`).
    pub label: String,
    /// The event after which this state holds; `None` for the dump of a
    /// snapshot without history.
    pub event_index: Option<u64>,
    /// `true`: the file's own segments and blocks (dump time). `false`: an
    /// estimate rebuilt from the history (segment events walked back from
    /// the dump; live allocations placed at their addresses, sizes rounded
    /// as the allocator rounds them).
    pub exact: bool,
    pub segment_count: u64,
    /// Σ segment sizes.
    pub reserved_bytes: u64,
    /// Σ blocks handed to the program (allocator-rounded sizes).
    pub allocated_bytes: u64,
    /// Σ blocks freed by the program but still in use by another stream.
    pub pending_free_bytes: u64,
    /// Σ free (`inactive`) blocks: the cache.
    pub inactive_bytes: u64,
    pub largest_free_block_bytes: u64,
    /// The request fragmentation is measured against: the failed request at
    /// an OOM, else the largest request of the trace (the largest live
    /// block for a snapshot without history).
    pub request_bytes: u64,
    /// Free bytes in blocks smaller than `request_bytes`: cached memory that
    /// cannot serve that request.
    pub fragmentation_bytes: u64,
    /// Bytes of live allocations that fall in no known segment (the history
    /// does not say where the segment was).
    pub unplaced_bytes: u64,
    /// By address.
    #[serde(serialize_with = "super::json::chunked")]
    pub segments: Vec<SegmentMap>,
}

impl SegmentState {
    /// `fragmentation_bytes` as a share of the free bytes, in percent.
    pub fn fragmentation_percent(&self) -> f64 {
        self.fragmentation_bytes as f64 * 100.0 / self.inactive_bytes.max(1) as f64
    }
}

/// One segment and its blocks, which cover it from start to end. Written
/// on one line as `[address, size, expandable, [block, …]]`: a snapshot can
/// hold thousands of segments.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "SegmentTuple")]
#[non_exhaustive]
pub struct SegmentMap {
    pub address: u64,
    pub size: u64,
    pub expandable: bool,
    /// In address order.
    pub blocks: BlockSpans,
}

/// A segment's blocks: most segments hold one (a large tensor's own
/// segment), kept inline, without an allocation of its own. On
/// `snap-unshared.pickle` (`scripts/bench_inputs.sh`: 41,904 segments at
/// the peak and as many at dump time, 80% of them one block) the two
/// instants' maps took ~1.4 MiB less than as `Vec`s.
pub type BlockSpans = smallvec::SmallVec<[BlockSpan; 1]>;

/// How a [`SegmentMap`] is written and read.
#[derive(Deserialize)]
struct SegmentTuple(u64, u64, bool, BlockSpans);

impl From<SegmentTuple> for SegmentMap {
    fn from(t: SegmentTuple) -> SegmentMap {
        SegmentMap {
            address: t.0,
            size: t.1,
            expandable: t.2,
            blocks: t.3,
        }
    }
}

/// Written as [`SegmentTuple`] is, from a borrow (serde's `into` would
/// clone each segment and its blocks first: 193K segments at each of two
/// instants on `cs336-nothanmin` forward × 112).
impl Serialize for SegmentMap {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (self.address, self.size, self.expandable, &self.blocks).serialize(serializer)
    }
}

/// A block, written `[offset, size, state, category]`: its offset from the
/// segment's address, its size, what it holds, and the category of the
/// allocation in it (`null` for a free block).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSpan(pub u64, pub u64, pub BlockUse, pub Option<Category>);

impl BlockSpan {
    pub fn offset(&self) -> u64 {
        self.0
    }
    pub fn size(&self) -> u64 {
        self.1
    }
    pub fn state(&self) -> BlockUse {
        self.2
    }
    pub fn category(&self) -> Option<Category> {
        self.3
    }
}

/// What a block holds (PyTorch's `active_allocated`, `active_pending_free`,
/// `inactive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockUse {
    /// Handed to the program.
    Allocated,
    /// Freed by the program, still used by another stream.
    PendingFree,
    /// Free: cached for reuse.
    Inactive,
}

/// The allocator's segments at some of the timeline's plotted points
/// (`timeline.segments`), drawn by the HTML viewer when an instant is
/// clicked: each frame is a segment map as the report draws one (segments
/// alike share a bar, the largest bars first, the rest summed), kept at
/// evenly spaced points and at the reported instant. Empty for files
/// without segments and for reports without plots.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SegmentFrames {
    /// What a run's category code names: code `c` is `categories[c / 2]`,
    /// pending free when `c` is odd.
    pub categories: Vec<Category>,
    /// In order of `point`.
    pub frames: Vec<SegmentFrame>,
}

impl SegmentFrames {
    /// Bars per segment map; the rest are summed up.
    pub const MAX_BARS: usize = 48;
}

/// The segments after one plotted point's event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SegmentFrame {
    /// Index into `timeline.x`: the plotted point it stands for.
    pub point: usize,
    /// Where the state is on the clock of `timeline.x` (an OOM's or the
    /// dump's state is at its own event, not at the point's).
    pub x: f64,
    /// The event after which this state holds (as [`SegmentState`]'s).
    pub event_index: Option<u64>,
    pub exact: bool,
    pub segment_count: u64,
    pub reserved_bytes: u64,
    pub allocated_bytes: u64,
    pub pending_free_bytes: u64,
    pub inactive_bytes: u64,
    pub largest_free_block_bytes: u64,
    pub unplaced_bytes: u64,
    /// The largest groups of segments alike, largest first.
    pub bars: Vec<SegmentBar>,
    /// The segments in no bar: how many, their bytes, their free bytes.
    pub rest: [u64; 3],
}

/// Segments alike (same size, the same blocks in the same places), written
/// `[count, size, expandable, [offset, bytes, code, …]]`: the runs of
/// blocks handed out (adjacent blocks of one category and state are one
/// run; free space is what no run covers), `code` as
/// [`SegmentFrames::categories`] says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentBar(pub u64, pub u64, pub bool, pub Vec<u64>);

/// Adjacent blocks with the same state and category: what a segment map
/// draws as one box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Run {
    pub offset: u64,
    pub bytes: u64,
    pub blocks: u64,
    pub state: BlockUse,
    pub category: Option<Category>,
}

/// A segment's blocks as runs, in address order.
pub fn runs(seg: &SegmentMap) -> Vec<Run> {
    let mut out = Vec::new();
    runs_into(&seg.blocks, &mut out);
    out
}

/// [`runs`] of a segment's blocks, into `out` (cleared first).
pub fn runs_into(blocks: &[BlockSpan], out: &mut Vec<Run>) {
    out.clear();
    for b in blocks {
        match out.last_mut() {
            Some(r)
                if r.state == b.state()
                    && r.category == b.category()
                    && r.offset + r.bytes == b.offset() =>
            {
                r.bytes += b.size();
                r.blocks += 1;
            }
            _ => out.push(Run {
                offset: b.offset(),
                bytes: b.size(),
                blocks: 1,
                state: b.state(),
                category: b.category(),
            }),
        }
    }
}

/// Segments alike: the same size, the same runs in the same places.
pub struct Alike<'a> {
    pub runs: Vec<Run>,
    pub members: Vec<&'a SegmentMap>,
}

/// The segments grouped as a segment map draws them: largest first (then
/// by address), segments alike in one group, groups in order of their
/// first member.
pub fn alike(segments: &[SegmentMap]) -> Vec<Alike<'_>> {
    let mut order: Vec<&SegmentMap> = segments.iter().collect();
    order.sort_by(|a, b| b.size.cmp(&a.size).then(a.address.cmp(&b.address)));
    let mut members: Vec<Vec<&SegmentMap>> = Vec::new();
    let mut index: FxHashMap<(u64, bool, Vec<Run>), usize> = FxHashMap::default();
    for seg in order {
        let next = members.len();
        let g = *index
            .entry((seg.size, seg.expandable, runs(seg)))
            .or_insert(next);
        if g == next {
            members.push(Vec::new());
        }
        members[g].push(seg);
    }
    let mut runs_of: Vec<Vec<Run>> = vec![Vec::new(); members.len()];
    for ((_, _, runs), g) in index {
        runs_of[g] = runs;
    }
    runs_of
        .into_iter()
        .zip(members)
        .map(|(runs, members)| Alike { runs, members })
        .collect()
}
