//! The allocator's view: a snapshot's segments and their blocks at the
//! instants a post-mortem asks about (the reported instant, each OOM, the
//! dump), with the free memory and how much of it is too fragmented to
//! serve a request.
//!
//! At dump time the file's own segments and blocks are used (exact). At an
//! earlier position the state is rebuilt (an estimate): the segments by
//! walking the segment events back from the dump (`segment_alloc` undone
//! removes a segment, `segment_free` undone restores it, `segment_map` /
//! `segment_unmap` shrink and grow expandable ranges), and the blocks by
//! placing every allocation live at that position at its address, sized as
//! the caching allocator sizes it (the dump's block when the same
//! allocation is still there, else rounded up to 512 bytes; a large-pool
//! block also keeps a tail of 1 MiB or less, which the allocator does not
//! split off). The gaps are the free (`inactive`) blocks.

use std::collections::BTreeMap;

use rayon::prelude::*;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::model::{Action, BlockState, Category, DeviceTrace};
use crate::schema::{
    alike, runs_into, BlockSpan, BlockUse, Run, SegmentBar, SegmentFrame, SegmentFrames,
    SegmentMap, SegmentState, SegmentsView,
};
use crate::timeline::Replay;

/// Blocks are multiples of this (`kMinBlockSize`).
const MIN_BLOCK: u64 = 512;
/// The small pool's segments (`kSmallBuffer`); other segments are the large pool's.
const SMALL_SEGMENT: u64 = 2 << 20;
/// A large-pool block is split only when more than this would remain (`kSmallSize`).
const LARGE_SPLIT_REMAINDER: u64 = 1 << 20;

/// The segment the caching allocator asks the device for to serve a
/// request of `size` bytes (`CUDACachingAllocator.cpp`, `get_allocation_size`):
/// 2 MiB for requests up to 1 MiB, 20 MiB up to 10 MiB, else the request
/// rounded up to 2 MiB. When that fails the device had less than it free.
pub fn segment_for(size: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    if size <= MIB {
        2 * MIB
    } else if size < 10 * MIB {
        20 * MIB
    } else {
        size.div_ceil(2 * MIB) * (2 * MIB)
    }
}

/// An instant to show: what it is called, its position (the state after
/// `position` events) and the failed request there, if any.
pub struct Instant {
    pub label: String,
    pub position: u32,
    pub request: Option<u64>,
}

/// The segments at each instant, or `None` when the file records no
/// segments the allocator reserved (Chrome traces, profile-derived
/// snapshots, a history without segment events or dumped segments); and
/// the viewer's segment maps at `frame_points` (see [`frames`]).
pub fn view(
    device: &DeviceTrace,
    replay: &Replay,
    category: &(dyn Fn(usize) -> Category + Sync),
    instants: &[Instant],
    ooms_left_out: u64,
    frame_points: &[(usize, u32)],
) -> Option<(SegmentsView, Option<SegmentFrames>)> {
    let dump = device
        .segments
        .as_ref()
        .filter(|_| device.segments_show_reserved)?;
    let segment_events = device.events.iter().any(|e| is_segment_event(e.action));
    if dump.is_empty() && !segment_events {
        return None;
    }
    let end = replay.events;
    // Every position rebuilt, the instants' and the frames', in one sweep.
    let mut positions: Vec<u32> = instants
        .iter()
        .map(|i| i.position)
        .chain(frame_points.iter().map(|p| p.1))
        .filter(|&p| p < end)
        .collect();
    positions.sort_unstable();
    positions.dedup();
    let largest_request = largest_request(device);
    // What each rebuilt position gives: the whole layout where an instant
    // is, else a frame (the frames at instants come from their states).
    let frame_at: HashMap<u32, usize> =
        frame_points.iter().map(|&(i, p)| (p.min(end), i)).collect();
    let wants: Vec<Want> = positions
        .iter()
        .map(|p| {
            if instants.iter().any(|i| i.position == *p) {
                Want::Layout
            } else {
                Want::Frame(frame_at[p])
            }
        })
        .collect();
    let mut made =
        Sweep::new(device, replay, positions, category).run(device, &wants, largest_request);
    let mut states: Vec<(u32, u64, SegmentState)> = Vec::new();
    for (n, instant) in instants.iter().enumerate() {
        let request = instant.request.unwrap_or(largest_request);
        if let Some((_, _, same)) = states
            .iter_mut()
            .find(|(p, r, _)| *p == instant.position && *r == request)
        {
            same.label = format!("{}, {}", same.label, instant.label);
            continue;
        }
        let segments = if instant.position >= end {
            dump_layout(device, replay, category)
        } else {
            let again = instants[n + 1..]
                .iter()
                .any(|i| i.position == instant.position);
            match made.remove(&instant.position) {
                Some(Made::Layout(layout)) => {
                    if again {
                        made.insert(instant.position, Made::Layout(layout.clone()));
                    }
                    layout
                }
                _ => unreachable!("each instant's position is laid out"),
            }
        };
        let mut state = summarise(segments.0, request, segments.1);
        state.label = instant.label.clone();
        state.exact = instant.position >= end;
        state.event_index = (instant.position > 0).then(|| u64::from(instant.position) - 1);
        states.push((instant.position, request, state));
    }
    // Each state's position (an instant at position 0 has no event).
    let at: Vec<u32> = states.iter().map(|(p, _, _)| *p).collect();
    let view = SegmentsView {
        instants: states.into_iter().map(|(_, _, s)| s).collect(),
        ooms_left_out,
    };
    let frames = (!frame_points.is_empty()).then(|| {
        frames(
            device,
            replay,
            category,
            frame_points,
            &at.iter().copied().zip(&view.instants).collect::<Vec<_>>(),
            made,
            largest_request,
        )
    });
    Some((view, frames))
}

/// What a rebuilt position is for.
#[derive(Clone, Copy)]
enum Want {
    /// An instant's state: every segment and block.
    Layout,
    /// A frame at this plotted point.
    Frame(usize),
}

/// What the sweep made at a position.
enum Made {
    Layout((Vec<SegmentMap>, u64)),
    Frame((SegmentFrame, Bars)),
}

/// What the rebuilt positions share, made in one pass over the intervals
/// and one forward over the free requests: at each position (ascending),
/// the addresses whose free is pending and the allocations live (as blocks,
/// by address). The segments come from one walk back from the dump as
/// [`Sweep::run`] goes.
struct Sweep {
    positions: Vec<u32>,
    pending: Vec<HashSet<u64>>,
    /// Each allocation live at one position or more, by address (the
    /// interval's index breaks ties, the order the intervals are listed
    /// in): its address, its block's size (as the dump says for an
    /// allocation it still holds, by address and requested size, else
    /// rounded up to [`MIN_BLOCK`]) and its category. Sized and classified
    /// once, however many positions it is live at.
    blocks: Vec<(u64, u64, Category)>,
    /// At each position, the allocations live there: indices into
    /// `blocks`, ascending (so by address).
    live: Vec<Vec<u32>>,
}

impl Sweep {
    fn new(
        device: &DeviceTrace,
        replay: &Replay,
        positions: Vec<u32>,
        category: &(dyn Fn(usize) -> Category + Sync),
    ) -> Sweep {
        let mut live: Vec<Vec<u32>> = vec![Vec::new(); positions.len()];
        let mut blocks = Vec::new();
        if !positions.is_empty() {
            // (address, interval, first and last position + 1 live at).
            let mut spans: Vec<(u64, u32, u32, u32)> = Vec::new();
            for (k, iv) in replay.intervals.iter().enumerate() {
                if iv.addr == 0 {
                    continue;
                }
                let from = positions.partition_point(|&p| p < iv.start);
                let to = positions.partition_point(|&p| p < iv.end);
                if from < to {
                    spans.push((iv.addr, k as u32, from as u32, to as u32));
                }
            }
            spans.sort_unstable();
            let dumped = dumped_blocks(device);
            blocks.reserve_exact(spans.len());
            for (t, &(addr, k, from, to)) in spans.iter().enumerate() {
                for list in &mut live[from as usize..to as usize] {
                    list.push(t as u32);
                }
                let size = block_size(&dumped, addr, replay.intervals[k as usize].size);
                blocks.push((addr, size, category(k as usize)));
            }
        }
        Sweep {
            pending: pending_at_each(device, &positions),
            positions,
            blocks,
            live,
        }
    }

    /// Each position's layout or frame, by position. The segments are
    /// walked back from the dump, last position first, two positions at a
    /// time laid out side by side (so at most two copies of the segments
    /// are held).
    fn run(self, device: &DeviceTrace, wants: &[Want], request: u64) -> HashMap<u32, Made> {
        let mut ranges: BTreeMap<u64, (u64, bool)> = device
            .segments
            .iter()
            .flatten()
            .map(|s| (s.addr, (s.total_size, s.is_expandable)))
            .collect();
        // Only segment events change the ranges.
        let changes: Vec<usize> = device
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| is_segment_event(e.action))
            .map(|(k, _)| k)
            .collect();
        let mut next = changes.len();
        let mut out = HashMap::default();
        let order: Vec<usize> = (0..self.positions.len()).rev().collect();
        for pair in order.chunks(2) {
            let at: Vec<(usize, Segments)> = pair
                .iter()
                .map(|&j| {
                    let p = self.positions[j] as usize;
                    while next > 0 && changes[next - 1] >= p {
                        next -= 1;
                        undo(&mut ranges, &device.events[changes[next]]);
                    }
                    (j, ranges.iter().map(|(&a, &r)| (a, r)).collect())
                })
                .collect();
            let made: Vec<(u32, Made)> = at
                .into_par_iter()
                .map(|(j, segments)| {
                    let position = self.positions[j];
                    let made = match wants[j] {
                        Want::Layout => Made::Layout(lay_out(&segments, self.blocks(j).collect())),
                        Want::Frame(point) => {
                            let mut frame = Grouping::new(request);
                            frame.lay_out(&segments, self.blocks(j));
                            Made::Frame(frame.finish(point, position, SegmentFrames::MAX_BARS))
                        }
                    };
                    (position, made)
                })
                .collect();
            out.extend(made);
        }
        out
    }

    /// The blocks of the allocations live at `positions[j]`, by address.
    fn blocks(&self, j: usize) -> impl Iterator<Item = LiveBlock> + '_ {
        // Mostly none is pending: then no address is looked up.
        let pending = Some(&self.pending[j]).filter(|p| !p.is_empty());
        self.live[j].iter().map(move |&t| {
            let (addr, size, category) = self.blocks[t as usize];
            let state = if pending.is_some_and(|p| p.contains(&addr)) {
                BlockUse::PendingFree
            } else {
                BlockUse::Allocated
            };
            (addr, size, state, category)
        })
    }
}

fn is_segment_event(action: Action) -> bool {
    matches!(
        action,
        Action::SegmentAlloc | Action::SegmentFree | Action::SegmentMap | Action::SegmentUnmap
    )
}

/// The largest request the trace shows: allocations and failed requests,
/// or, without history, the largest live block.
fn largest_request(device: &DeviceTrace) -> u64 {
    let traced = device
        .events
        .iter()
        .filter(|e| matches!(e.action, Action::Alloc | Action::Oom))
        .map(|e| e.size)
        .max();
    traced.unwrap_or_else(|| {
        device
            .segments
            .iter()
            .flatten()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| b.requested_size)
            .max()
            .unwrap_or(0)
    })
}

/// The file's own segments and blocks; allocations get the category of the
/// interval live at the end at their address. Also returns the unplaced
/// bytes (none: every dumped block is in its segment).
fn dump_layout(
    device: &DeviceTrace,
    replay: &Replay,
    category: &(dyn Fn(usize) -> Category + Sync),
) -> (Vec<SegmentMap>, u64) {
    let end = replay.events;
    let live: HashMap<u64, Category> = replay
        .intervals
        .iter()
        .enumerate()
        .filter(|(_, i)| i.live_at(end))
        .map(|(k, i)| (i.addr, category(k)))
        .collect();
    let mut maps: Vec<SegmentMap> = device
        .segments
        .iter()
        .flatten()
        .map(|s| SegmentMap {
            address: s.addr,
            size: s.total_size,
            expandable: s.is_expandable,
            blocks: s
                .blocks
                .iter()
                .map(|b| {
                    let (state, category) = match b.state {
                        BlockState::ActiveAllocated => (
                            BlockUse::Allocated,
                            Some(live.get(&b.addr).copied().unwrap_or(Category::Unknown)),
                        ),
                        BlockState::ActivePendingFree => (
                            BlockUse::PendingFree,
                            Some(live.get(&b.addr).copied().unwrap_or(Category::Unknown)),
                        ),
                        BlockState::Inactive => (BlockUse::Inactive, None),
                    };
                    BlockSpan(b.addr.saturating_sub(s.addr), b.size, state, category)
                })
                .collect(),
        })
        .collect();
    maps.sort_by_key(|m| m.address);
    (maps, 0)
}

#[cfg(test)]
/// The state after `position` events, rebuilt from the history (see the
/// module's doc). Also returns the bytes of live allocations outside every
/// known segment.
fn rebuilt_layout(
    device: &DeviceTrace,
    replay: &Replay,
    category: &(dyn Fn(usize) -> Category + Sync),
    position: u32,
    dumped: &HashMap<(u64, u64), u64>,
) -> (Vec<SegmentMap>, u64) {
    let blocks = live_blocks(device, replay, category, position, dumped);
    lay_out(&segments_at(device, position), blocks)
}

/// The dump's block size for each allocation still there at the end, by
/// (address, requested size); made once for every rebuilt instant.
fn dumped_blocks(device: &DeviceTrace) -> HashMap<(u64, u64), u64> {
    device
        .segments
        .iter()
        .flatten()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state != BlockState::Inactive)
        .map(|b| ((b.addr, b.requested_size), b.size))
        .collect()
}

/// The block of an allocation of `size` bytes at `addr`: as the dump
/// says where it still holds it (by address and requested size), else
/// rounded up to [`MIN_BLOCK`].
fn block_size(dumped: &HashMap<(u64, u64), u64>, addr: u64, size: u64) -> u64 {
    dumped
        .get(&(addr, size))
        .copied()
        .unwrap_or_else(|| size.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK)
}

/// Segments by address: (address, (size, expandable)).
type Segments = Vec<(u64, (u64, bool))>;

/// A block of an allocation: address, size, state, category.
type LiveBlock = (u64, u64, BlockUse, Category);

#[cfg(test)]
/// The blocks of the allocations live after `position` events, by address:
/// sized as `dumped` says for an allocation the dump still holds (by address
/// and requested size), else rounded up to [`MIN_BLOCK`].
fn live_blocks(
    device: &DeviceTrace,
    replay: &Replay,
    category: &(dyn Fn(usize) -> Category + Sync),
    position: u32,
    dumped: &HashMap<(u64, u64), u64>,
) -> Vec<LiveBlock> {
    let live: Vec<(usize, &crate::timeline::Interval)> = replay
        .intervals
        .iter()
        .enumerate()
        .filter(|(_, i)| i.live_at(position) && i.addr != 0)
        .collect();
    let pending = pending_frees(device, &live, position);
    let mut blocks: Vec<LiveBlock> = live
        .iter()
        .map(|&(k, i)| {
            let size = block_size(dumped, i.addr, i.size);
            let state = if pending.contains(&i.addr) {
                BlockUse::PendingFree
            } else {
                BlockUse::Allocated
            };
            (i.addr, size, state, category(k))
        })
        .collect();
    blocks.sort_by_key(|b| b.0);
    blocks
}

/// Places `blocks` (by address) into `segments`; the gaps are free blocks.
/// Also returns the bytes of blocks outside every segment.
fn lay_out(segments: &[(u64, (u64, bool))], blocks: Vec<LiveBlock>) -> (Vec<SegmentMap>, u64) {
    let mut maps = Vec::with_capacity(segments.len());
    let unplaced = place(
        segments,
        blocks.into_iter(),
        |address, size, expandable, spans| {
            maps.push(SegmentMap {
                address,
                size,
                expandable,
                blocks: spans.into(),
            });
        },
    );
    (maps, unplaced)
}

/// Places `blocks` (by address) into `segments` as the caching allocator
/// cuts them, calling `segment(address, size, expandable, spans)` for each
/// segment with its blocks from start to end (the gaps are free blocks);
/// returns the bytes of blocks outside every segment.
fn place(
    segments: &[(u64, (u64, bool))],
    blocks: impl Iterator<Item = LiveBlock>,
    mut segment: impl FnMut(u64, u64, bool, &[BlockSpan]),
) -> u64 {
    let mut blocks = blocks.peekable();
    let mut unplaced = 0u64;
    let mut spans = Vec::new();
    for &(address, (size, expandable)) in segments {
        let seg_end = address.saturating_add(size);
        // Blocks below this segment belong to no segment.
        while let Some(b) = blocks.next_if(|b| b.0 < address) {
            unplaced = unplaced.saturating_add(b.1);
        }
        spans.clear();
        let mut cursor = address;
        while let Some((addr, block_size, state, category)) = blocks.next_if(|b| b.0 < seg_end) {
            if addr < cursor {
                // Overlaps the block before it: a damaged history.
                unplaced = unplaced.saturating_add(block_size);
                continue;
            }
            if addr > cursor {
                spans.push(BlockSpan(
                    cursor - address,
                    addr - cursor,
                    BlockUse::Inactive,
                    None,
                ));
            }
            let mut block_end = addr.saturating_add(block_size).min(seg_end);
            // The tail the allocator would not split off stays in the block.
            let following = blocks.peek().map_or(seg_end, |b| b.0.min(seg_end));
            let tail = following.saturating_sub(block_end);
            if tail > 0 && tail <= LARGE_SPLIT_REMAINDER && size != SMALL_SEGMENT {
                block_end = following;
            }
            spans.push(BlockSpan(
                addr - address,
                block_end - addr,
                state,
                Some(category),
            ));
            cursor = block_end;
        }
        if cursor < seg_end {
            spans.push(BlockSpan(
                cursor - address,
                seg_end - cursor,
                BlockUse::Inactive,
                None,
            ));
        }
        segment(address, size, expandable, &spans);
    }
    for b in blocks {
        unplaced = unplaced.saturating_add(b.1);
    }
    unplaced
}

#[cfg(test)]
/// Addresses of the live allocations whose free was requested (at or after
/// their allocation, before `position`) but not completed: blocks another
/// stream still uses.
fn pending_frees(
    device: &DeviceTrace,
    live: &[(usize, &crate::timeline::Interval)],
    position: u32,
) -> HashSet<u64> {
    // An allocation made by event `start − 1` (or before recording, start 0).
    let starts: HashMap<u64, usize> = live
        .iter()
        .map(|(_, i)| (i.addr, i.start as usize))
        .collect();
    let first = starts.values().copied().min().unwrap_or(0);
    let mut pending = HashSet::default();
    for k in first..position as usize {
        let e = &device.events[k];
        if e.action == Action::FreeRequested && starts.get(&e.addr).is_some_and(|&s| s <= k) {
            pending.insert(e.addr);
        }
    }
    pending
}

#[cfg(test)]
/// The segments after `position` events: the dump's, with the segment
/// events from `position` on undone, last first. Ranges by address →
/// (size, expandable).
fn segments_at(device: &DeviceTrace, position: u32) -> Vec<(u64, (u64, bool))> {
    let mut ranges: BTreeMap<u64, (u64, bool)> = device
        .segments
        .iter()
        .flatten()
        .map(|s| (s.addr, (s.total_size, s.is_expandable)))
        .collect();
    for e in device.events[position as usize..].iter().rev() {
        undo(&mut ranges, e);
    }
    ranges.into_iter().collect()
}

/// Removes `[addr, addr + size)` from the range that holds it (splitting it
/// when the hole is in the middle).
fn unmap(ranges: &mut BTreeMap<u64, (u64, bool)>, addr: u64, size: u64) {
    let Some((&start, &(len, expandable))) = ranges.range(..=addr).next_back() else {
        return;
    };
    let (end, hole_end) = (start.saturating_add(len), addr.saturating_add(size));
    if addr >= end {
        return;
    }
    ranges.remove(&start);
    if addr > start {
        ranges.insert(start, (addr - start, expandable));
    }
    if hole_end < end {
        ranges.insert(hole_end, (end - hole_end, expandable));
    }
}

/// Adds `[addr, addr + size)` as an expandable range, joined with the
/// expandable ranges it touches.
fn map(ranges: &mut BTreeMap<u64, (u64, bool)>, addr: u64, size: u64) {
    let (mut start, mut end) = (addr, addr.saturating_add(size));
    if let Some((&s, &(len, true))) = ranges.range(..addr).next_back() {
        if s.saturating_add(len) == addr {
            ranges.remove(&s);
            start = s;
        }
    }
    if let Some(&(len, true)) = ranges.get(&end) {
        ranges.remove(&end);
        end = end.saturating_add(len);
    }
    ranges.insert(start, (end - start, true));
}

/// Adds one segment of `size` cut into `spans` to `state`'s totals;
/// returns its free bytes.
fn tally(state: &mut SegmentState, size: u64, spans: &[BlockSpan]) -> u64 {
    state.reserved_bytes = state.reserved_bytes.saturating_add(size);
    let mut free = 0;
    for b in spans {
        let bytes = b.size();
        match b.state() {
            BlockUse::Allocated => state.allocated_bytes += bytes,
            BlockUse::PendingFree => state.pending_free_bytes += bytes,
            BlockUse::Inactive => {
                free += bytes;
                state.inactive_bytes += bytes;
                state.largest_free_block_bytes = state.largest_free_block_bytes.max(bytes);
                if bytes < state.request_bytes {
                    state.fragmentation_bytes += bytes;
                }
            }
        }
    }
    free
}

/// Totals of one state; `label`, `exact` and `event_index` are the caller's.
fn summarise(segments: Vec<SegmentMap>, request: u64, unplaced: u64) -> SegmentState {
    let mut state = SegmentState {
        label: String::new(),
        event_index: None,
        exact: false,
        segment_count: segments.len() as u64,
        reserved_bytes: 0,
        allocated_bytes: 0,
        pending_free_bytes: 0,
        inactive_bytes: 0,
        largest_free_block_bytes: 0,
        request_bytes: request,
        fragmentation_bytes: 0,
        unplaced_bytes: unplaced,
        segments: Vec::new(),
    };
    for s in &segments {
        tally(&mut state, s.size, &s.blocks);
    }
    state.segments = segments;
    state
}

/// Frames kept for the viewer at most; fewer when the segments are many
/// (each frame lays every segment out once).
pub const MAX_FRAMES: usize = 24;
/// Segments laid out over all frames, at most (a bound on the work).
const FRAME_WORK: usize = 1_000_000;

/// The viewer's segment maps (see [`SegmentFrames`]): the state after each
/// of `points` (a plotted point's index and the position it shows), each as
/// the report's segment map groups it ([`alike`], the largest
/// [`SegmentFrames::MAX_BARS`] groups). A state the report holds already
/// (`known`: the reported instant, the OOMs, the dump) is not laid out
/// again; the others come from the sweep.
fn frames(
    device: &DeviceTrace,
    replay: &Replay,
    category: &(dyn Fn(usize) -> Category + Sync),
    points: &[(usize, u32)],
    known: &[(u32, &SegmentState)],
    mut made: HashMap<u32, Made>,
    request: u64,
) -> SegmentFrames {
    let max_bars = SegmentFrames::MAX_BARS;
    let end = replay.events;
    let mut points: Vec<(usize, u32)> = points.iter().map(|&(i, p)| (i, p.min(end))).collect();
    points.sort_by_key(|x| x.0);
    points.dedup_by_key(|x| x.0);
    let known_at = |p: u32| {
        known
            .iter()
            .find(|(at, _)| (*at).min(end) == p)
            .map(|k| k.1)
    };
    let mut laid: Vec<(SegmentFrame, Bars)> = Vec::with_capacity(points.len());
    for &(point, position) in &points {
        if let Some(Made::Frame((mut frame, bars))) = made.remove(&position) {
            frame.point = point;
            laid.push((frame, bars));
        } else if let Some(s) = known_at(position) {
            laid.push(grouped(s, point, position, end, max_bars));
        } else if position >= end {
            // The dump, which no instant names (callers name it).
            let (maps, unplaced) = dump_layout(device, replay, category);
            let state = summarise(maps, request, unplaced);
            laid.push(grouped(&state, point, position, end, max_bars));
        }
        // (A second point at a position already drawn has no frame.)
    }
    encode(laid)
}

/// Frames with their bars' category codes, in order of first use, frame
/// by frame.
fn encode(made: Vec<(SegmentFrame, Bars)>) -> SegmentFrames {
    // Category codes in order of first use, frame by frame.
    let mut categories: Vec<Category> = Vec::new();
    let mut frames = Vec::with_capacity(made.len());
    for (mut frame, bars) in made {
        frame.bars = bars
            .into_iter()
            .map(|(count, size, expandable, runs)| {
                let mut flat = Vec::with_capacity(3 * runs.len());
                for r in runs {
                    let Some(c) = r.category else { continue };
                    let k = categories.iter().position(|&x| x == c).unwrap_or_else(|| {
                        categories.push(c);
                        categories.len() - 1
                    });
                    let code = 2 * k as u64 + u64::from(r.state == BlockUse::PendingFree);
                    flat.extend([r.offset, r.bytes, code]);
                }
                SegmentBar(count, size, expandable, flat)
            })
            .collect();
        frames.push(frame);
    }
    SegmentFrames { categories, frames }
}

/// A frame's bars: (segments alike, size, expandable, runs).
type Bars = Vec<(u64, u64, bool, Vec<Run>)>;

/// A frame from a whole [`SegmentState`] (the dump's).
fn grouped(
    state: &SegmentState,
    point: usize,
    position: u32,
    end: u32,
    max_bars: usize,
) -> (SegmentFrame, Bars) {
    let groups = alike(&state.segments);
    let bars = groups
        .iter()
        .take(max_bars)
        .map(|g| {
            let seg = g.members[0];
            (
                g.members.len() as u64,
                seg.size,
                seg.expandable,
                g.runs.clone(),
            )
        })
        .collect();
    let mut rest = [0u64; 3];
    for seg in groups.iter().skip(max_bars).flat_map(|g| &g.members) {
        rest[0] += 1;
        rest[1] += seg.size;
        rest[2] += seg
            .blocks
            .iter()
            .filter(|b| b.state() == BlockUse::Inactive)
            .map(|b| b.size())
            .sum::<u64>();
    }
    let frame = frame_of(state, point, position, end, rest);
    (frame, bars)
}

/// A frame's totals from `state` at `position` (exact at `end`, the
/// dump), its bars left to [`encode`].
fn frame_of(
    state: &SegmentState,
    point: usize,
    position: u32,
    end: u32,
    rest: [u64; 3],
) -> SegmentFrame {
    SegmentFrame {
        point,
        x: 0.0,
        event_index: (position > 0).then(|| u64::from(position) - 1),
        exact: position >= end,
        segment_count: state.segment_count,
        reserved_bytes: state.reserved_bytes,
        allocated_bytes: state.allocated_bytes,
        pending_free_bytes: state.pending_free_bytes,
        inactive_bytes: state.inactive_bytes,
        largest_free_block_bytes: state.largest_free_block_bytes,
        unplaced_bytes: state.unplaced_bytes,
        bars: Vec::new(),
        rest,
    }
}

/// One group of segments alike, as [`Grouping`] gathers it.
struct Group {
    size: u64,
    expandable: bool,
    runs: Vec<Run>,
    count: u64,
    first_address: u64,
    free: u64,
}

/// [`lay_out`], [`summarise`] and [`alike`] in one pass ([`place`],
/// [`tally`], the runs), without a segment's blocks kept: only the runs of
/// a group's first segment are. The same totals and groups as the three
/// (`the_sweep_rebuilds_each_instant_as_the_plain_path_does`).
struct Grouping {
    state: SegmentState,
    groups: Vec<Group>,
    /// Groups by a hash of (size, expandable, runs).
    index: HashMap<u64, Vec<usize>>,
}

impl Grouping {
    fn new(request: u64) -> Grouping {
        Grouping {
            state: summarise(Vec::new(), request, 0),
            groups: Vec::new(),
            index: HashMap::default(),
        }
    }

    /// As [`lay_out`] places blocks, counting each segment as it is cut.
    fn lay_out(
        &mut self,
        segments: &[(u64, (u64, bool))],
        blocks: impl Iterator<Item = LiveBlock>,
    ) {
        let mut runs: Vec<Run> = Vec::new();
        let unplaced = place(segments, blocks, |address, size, expandable, spans| {
            self.state.segment_count += 1;
            let free = tally(&mut self.state, size, spans);
            runs_into(spans, &mut runs);
            self.add(address, size, expandable, &runs, free);
        });
        self.state.unplaced_bytes = self.state.unplaced_bytes.saturating_add(unplaced);
    }

    /// Counts a segment in its group (a new one when none is alike).
    fn add(&mut self, address: u64, size: u64, expandable: bool, runs: &[Run], free: u64) {
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        (size, expandable, runs).hash(&mut h);
        let same = self.index.entry(h.finish()).or_default();
        let groups = &mut self.groups;
        match same.iter().find(|&&g| {
            let g = &groups[g];
            g.size == size && g.expandable == expandable && g.runs == runs
        }) {
            Some(&g) => {
                let g = &mut groups[g];
                g.count += 1;
                g.first_address = g.first_address.min(address);
            }
            None => {
                same.push(groups.len());
                groups.push(Group {
                    size,
                    expandable,
                    runs: runs.to_vec(),
                    count: 1,
                    first_address: address,
                    free,
                });
            }
        }
    }

    /// The frame: groups largest first (then by their first address), as
    /// [`alike`] orders them.
    fn finish(mut self, point: usize, position: u32, max_bars: usize) -> (SegmentFrame, Bars) {
        self.groups.sort_by(|a, b| {
            b.size
                .cmp(&a.size)
                .then(a.first_address.cmp(&b.first_address))
        });
        let mut rest = [0u64; 3];
        for g in self.groups.iter().skip(max_bars) {
            rest[0] += g.count;
            rest[1] += g.count * g.size;
            rest[2] += g.count * g.free;
        }
        let frame = frame_of(&self.state, point, position, u32::MAX, rest);
        let bars = self
            .groups
            .into_iter()
            .take(max_bars)
            .map(|g| (g.count, g.size, g.expandable, g.runs))
            .collect();
        (frame, bars)
    }
}

/// How many frames to keep for a device besides the states the report
/// holds: each reads every allocation and lays out the dump's segments and
/// about as many blocks as it holds.
pub fn frame_count(device: &DeviceTrace, replay: &Replay) -> usize {
    let work: usize = device
        .segments
        .iter()
        .flatten()
        .map(|s| 1 + s.blocks.len())
        .sum::<usize>()
        + replay.intervals.len() / 4;
    (FRAME_WORK / work.max(1)).min(MAX_FRAMES)
}

/// The addresses whose free was requested and not completed after each of
/// `positions` (ascending), in one walk forward: blocks another stream
/// still uses (as [`pending_frees`] finds them one instant at a time).
fn pending_at_each(device: &DeviceTrace, positions: &[u32]) -> Vec<HashSet<u64>> {
    let mut out = vec![HashSet::default(); positions.len()];
    if !device
        .events
        .iter()
        .any(|e| e.action == Action::FreeRequested)
    {
        return out;
    }
    // Mostly each request is completed by the very next event: then only a
    // position right between the two has a block pending.
    let events = &device.events;
    let at_once = |k: usize| {
        events
            .get(k + 1)
            .is_some_and(|n| n.action == Action::FreeCompleted && n.addr == events[k].addr)
    };
    if (0..events.len()).all(|k| events[k].action != Action::FreeRequested || at_once(k)) {
        for (j, &p) in positions.iter().enumerate() {
            if let Some(e) = (p as usize).checked_sub(1).map(|k| &events[k]) {
                if e.action == Action::FreeRequested {
                    out[j].insert(e.addr);
                }
            }
        }
        return out;
    }
    let mut pending: HashSet<u64> = HashSet::default();
    let mut j = 0;
    for (k, e) in device.events.iter().enumerate() {
        while positions.get(j).is_some_and(|&p| p as usize <= k) {
            out[j] = pending.clone();
            j += 1;
        }
        if j == positions.len() {
            return out;
        }
        match e.action {
            Action::FreeRequested => {
                pending.insert(e.addr);
            }
            Action::FreeCompleted | Action::Alloc => {
                pending.remove(&e.addr);
            }
            _ => {}
        }
    }
    for slot in &mut out[j..] {
        slot.clone_from(&pending);
    }
    out
}

/// Undoes one segment event.
fn undo(ranges: &mut BTreeMap<u64, (u64, bool)>, e: &crate::model::Event) {
    match e.action {
        Action::SegmentAlloc => {
            ranges.remove(&e.addr);
        }
        Action::SegmentFree => {
            ranges.insert(e.addr, (e.size, false));
        }
        Action::SegmentMap => unmap(ranges, e.addr, e.size),
        Action::SegmentUnmap => map(ranges, e.addr, e.size),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Block, Event, Segment};

    fn ev(action: Action, addr: u64, size: u64) -> Event {
        Event::new(action, addr, size)
    }

    fn segment(addr: u64, size: u64, expandable: bool, blocks: Vec<Block>) -> Segment {
        Segment {
            addr,
            total_size: size,
            is_expandable: expandable,
            blocks: blocks.into(),
        }
    }

    fn block(addr: u64, size: u64, state: BlockState) -> Block {
        Block {
            addr,
            size,
            requested_size: size,
            state,
            site: 0,
        }
    }

    //   event:   0 seg_alloc A   1 seg_map E[0,2)   2 seg_alloc B   3 seg_free B
    //            4 seg_map E[2,4)   5 seg_unmap E[1,2)
    //   dump:    A, E[0,1), E[2,4)
    #[test]
    fn segment_events_are_undone_back_from_the_dump() {
        const A: u64 = 0x1000_0000;
        const B: u64 = 0x2000_0000;
        const E: u64 = 0x4000_0000;
        const P: u64 = 2 << 20; // a page of the expandable segment
        let device = DeviceTrace {
            device: "cuda:0".into(),
            events: vec![
                ev(Action::SegmentAlloc, A, 20 << 20),
                ev(Action::SegmentMap, E, 2 * P),
                ev(Action::SegmentAlloc, B, 2 << 20),
                ev(Action::SegmentFree, B, 2 << 20),
                ev(Action::SegmentMap, E + 2 * P, 2 * P),
                ev(Action::SegmentUnmap, E + P, P),
            ],
            segments: Some(vec![
                segment(A, 20 << 20, false, vec![]),
                segment(E, P, true, vec![]),
                segment(E + 2 * P, 2 * P, true, vec![]),
            ]),
            segments_show_reserved: true,
            ..DeviceTrace::default()
        };
        let at = |p| segments_at(&device, p);
        assert_eq!(
            at(6),
            [
                (A, (20 << 20, false)),
                (E, (P, true)),
                (E + 2 * P, (2 * P, true))
            ]
        );
        assert_eq!(at(5), [(A, (20 << 20, false)), (E, (4 * P, true))]);
        assert_eq!(at(4), [(A, (20 << 20, false)), (E, (2 * P, true))]);
        assert_eq!(
            at(3),
            [
                (A, (20 << 20, false)),
                (B, (2 << 20, false)),
                (E, (2 * P, true))
            ]
        );
        assert_eq!(at(2), [(A, (20 << 20, false)), (E, (2 * P, true))]);
        assert_eq!(at(1), [(A, (20 << 20, false))]);
        assert!(at(0).is_empty());
    }

    //   one 20 MiB segment:  a (3 MiB + 300 B, freed)  b (5 MiB, free requested)  c (1.5 MiB)
    //   positions:   0   1 a   2 b   3 c   4 b requested   5 a freed
    #[test]
    fn rebuilt_blocks_are_rounded_keep_unsplit_tails_and_pending_frees() {
        const S: u64 = 0x1000_0000;
        const MIB: u64 = 1 << 20;
        let a = S;
        let b = S + 3 * MIB + 512;
        let c = b + 5 * MIB;
        let device = DeviceTrace {
            device: "cuda:0".into(),
            events: vec![
                ev(Action::Alloc, a, 3 * MIB + 300),
                ev(Action::Alloc, b, 5 * MIB),
                ev(Action::Alloc, c, MIB + MIB / 2),
                ev(Action::FreeRequested, b, 5 * MIB),
                ev(Action::FreeCompleted, a, 3 * MIB + 300),
            ],
            segments: Some(vec![segment(
                S,
                20 * MIB,
                false,
                vec![
                    block(a, b - a, BlockState::Inactive),
                    block(b, 5 * MIB, BlockState::ActivePendingFree),
                    Block {
                        requested_size: MIB + MIB / 2,
                        ..block(c, 20 * MIB - (c - S), BlockState::ActiveAllocated)
                    },
                ],
            )]),
            segments_show_reserved: true,
            ..DeviceTrace::default()
        };
        let replay = crate::timeline::replay(&device);
        let cat = |_: usize| Category::Activation;
        let (maps, unplaced) = rebuilt_layout(&device, &replay, &cat, 4, &dumped_blocks(&device));
        assert_eq!(unplaced, 0);
        let spans: Vec<(u64, u64, BlockUse)> = maps[0]
            .blocks
            .iter()
            .map(|b| (b.offset(), b.size(), b.state()))
            .collect();
        assert_eq!(
            spans,
            [
                // Rounded up to 512 bytes.
                (0, 3 * MIB + 512, BlockUse::Allocated),
                (b - S, 5 * MIB, BlockUse::PendingFree),
                // The dump's own block: the tail was not split off.
                (c - S, 20 * MIB - (c - S), BlockUse::Allocated),
            ]
        );
        // Without the dump's sizes, c keeps a tail of at most 1 MiB only.
        let blocks = live_blocks(&device, &replay, &cat, 4, &HashMap::default());
        let (maps, _) = lay_out(&segments_at(&device, 4), blocks);
        let last = maps[0].blocks.last().unwrap();
        assert_eq!(
            (last.offset(), last.state()),
            (c - S + MIB + MIB / 2, BlockUse::Inactive)
        );
    }

    #[test]
    fn a_failed_request_larger_than_every_free_block_is_fragmentation() {
        // The fragmented OOM of tests/data/segments: 8 MiB holes, 16 MiB asked.
        const MIB: u64 = 1 << 20;
        const S: u64 = 0x1000_0000;
        let mut events: Vec<Event> = (0..8)
            .map(|k| ev(Action::Alloc, S + k * 8 * MIB, 8 * MIB))
            .collect();
        events.insert(0, ev(Action::SegmentAlloc, S, 64 * MIB));
        for k in [1, 3, 5, 7] {
            events.push(ev(Action::FreeCompleted, S + k * 8 * MIB, 8 * MIB));
        }
        events.push(Event::oom(16 * MIB, 4 * MIB));
        let device = DeviceTrace {
            device: "cuda:0".into(),
            events,
            segments: Some(vec![segment(S, 64 * MIB, false, vec![])]),
            segments_show_reserved: true,
            ..DeviceTrace::default()
        };
        let replay = crate::timeline::replay(&device);
        let instants = [Instant {
            label: "oom 0".into(),
            position: 13,
            request: Some(16 * MIB),
        }];
        let (view, _) = view(
            &device,
            &replay,
            &|_| Category::Activation,
            &instants,
            0,
            &[],
        )
        .unwrap();
        let s = &view.instants[0];
        assert_eq!(
            (s.label.as_str(), s.event_index, s.exact),
            ("oom 0", Some(12), false)
        );
        assert_eq!(s.inactive_bytes, 32 * MIB);
        assert_eq!(s.largest_free_block_bytes, 8 * MIB);
        assert_eq!(s.fragmentation_bytes, 32 * MIB);
        assert_eq!(s.fragmentation_percent(), 100.0);
    }

    /// The rebuilt state at the end of a real history equals the file's own
    /// dump block for block, with every block sized by the rules alone (none
    /// taken from the dump): the rounding and unsplit-tail rules are the
    /// allocator's.
    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn rebuilt_end_state_matches_the_dump_on_real_snapshots() {
        let dir = crate::test_support::corpus_dir();
        let mut checked = 0;
        for path in walk(&dir) {
            let bytes = std::fs::read(&path).unwrap();
            let Ok(trace) = crate::input::parse_bytes(&bytes, &Default::default()) else {
                continue;
            };
            for device in &trace.devices {
                if device.events.is_empty() || !device.segments_show_reserved {
                    continue;
                }
                let replay = crate::timeline::replay(device);
                let unknown = |_: usize| Category::Unknown;
                let (dump, _) = dump_layout(device, &replay, &unknown);
                let blocks = live_blocks(
                    device,
                    &replay,
                    &unknown,
                    replay.events,
                    &HashMap::default(),
                );
                let (rebuilt, unplaced) = lay_out(&segments_at(device, replay.events), blocks);
                let differ = dump.iter().zip(&rebuilt).filter(|(a, b)| a != b).count();
                assert_eq!(unplaced, 0, "{}", path.display());
                assert_eq!(dump.len(), rebuilt.len(), "{}", path.display());
                assert_eq!(
                    differ,
                    0,
                    "{}: {differ} of {} segments differ",
                    path.display(),
                    dump.len()
                );
                checked += 1;
            }
        }
        assert!(checked >= 14, "{checked} snapshots with history");
    }

    /// The sweep against the plain path: each instant's state equals the
    /// one rebuilt on its own (`rebuilt_layout`: every interval, every
    /// event), and each frame the grouping of that state.
    fn check_sweep(device: &DeviceTrace, name: &str) -> usize {
        let replay = crate::timeline::replay(device);
        let cat = |k: usize| Category::ALL[k % 3];
        let end = replay.events;
        let mut positions: Vec<u32> = (0..=12u64)
            .map(|j| (j * u64::from(end) / 12) as u32)
            .collect();
        positions.dedup();
        let instants: Vec<Instant> = positions
            .iter()
            .map(|&p| Instant {
                label: format!("at {p}"),
                position: p,
                request: None,
            })
            .collect();
        let points: Vec<(usize, u32)> = positions.iter().copied().enumerate().collect();
        let (states, _) = view(device, &replay, &cat, &instants, 0, &[]).unwrap();
        let dumped = dumped_blocks(device);
        let request = largest_request(device);
        let plain = |p: u32| {
            let (maps, unplaced) = if p >= end {
                dump_layout(device, &replay, &cat)
            } else {
                rebuilt_layout(device, &replay, &cat, p, &dumped)
            };
            summarise(maps, request, unplaced)
        };
        for (state, &p) in states.instants.iter().zip(&positions) {
            let want = plain(p);
            assert_eq!(state.segments, want.segments, "{name}: segments at {p}");
            assert_eq!(
                (
                    state.allocated_bytes,
                    state.pending_free_bytes,
                    state.inactive_bytes,
                    state.unplaced_bytes
                ),
                (
                    want.allocated_bytes,
                    want.pending_free_bytes,
                    want.inactive_bytes,
                    want.unplaced_bytes
                ),
                "{name}: totals at {p}"
            );
        }
        // Frames laid out by the sweep (only the dump is known).
        let dump = [Instant {
            label: "dump".into(),
            position: end,
            request: None,
        }];
        let (_, frames) = view(device, &replay, &cat, &dump, 0, &points).unwrap();
        let want = encode(
            points
                .iter()
                .map(|&(i, p)| grouped(&plain(p), i, p, end, SegmentFrames::MAX_BARS))
                .collect(),
        );
        assert_eq!(frames.unwrap(), want, "{name}: frames");
        // An instant at position 0 (no event before it) and the dump, both
        // known: each frame is its own state.
        let both = [
            Instant {
                label: "peak".into(),
                position: 0,
                request: None,
            },
            Instant {
                label: "dump".into(),
                position: end,
                request: None,
            },
        ];
        let ends = [(0, 0), (1, end)];
        let (_, frames) = view(device, &replay, &cat, &both, 0, &ends).unwrap();
        let want = encode(
            ends.iter()
                .map(|&(i, p)| grouped(&plain(p), i, p, end, SegmentFrames::MAX_BARS))
                .collect(),
        );
        assert_eq!(frames.unwrap(), want, "{name}: frames at 0 and the dump");
        positions.len()
    }

    #[test]
    fn the_sweep_rebuilds_each_instant_as_the_plain_path_does() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/segments/fragmented_oom.pickle"
        );
        let bytes = std::fs::read(path).unwrap();
        let trace = crate::input::parse_bytes(&bytes, &Default::default()).unwrap();
        assert!(check_sweep(&trace.devices[0], "fragmented_oom") > 10);
    }

    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn the_sweep_rebuilds_each_instant_as_the_plain_path_does_on_real_snapshots() {
        let dir = crate::test_support::corpus_dir();
        let mut checked = 0;
        for path in walk(&dir) {
            let bytes = std::fs::read(&path).unwrap();
            let Ok(trace) = crate::input::parse_bytes(&bytes, &Default::default()) else {
                continue;
            };
            for device in &trace.devices {
                if device.events.is_empty() || !device.segments_show_reserved {
                    continue;
                }
                check_sweep(device, &path.display().to_string());
                checked += 1;
            }
        }
        assert!(checked >= 14, "{checked} snapshots with history");
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else if p.extension().is_some_and(|x| x == "pickle") {
                out.push(p);
            }
        }
        out.sort();
        out
    }
}
