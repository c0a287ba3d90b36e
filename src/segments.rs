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

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::model::{Action, BlockState, Category, DeviceTrace};
use crate::schema::{BlockSpan, BlockUse, SegmentMap, SegmentState, SegmentsView};
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
/// snapshots, a history without segment events or dumped segments).
pub fn view(
    device: &DeviceTrace,
    replay: &Replay,
    category: &(dyn Fn(usize) -> Category + Sync),
    instants: &[Instant],
    ooms_left_out: u64,
) -> Option<SegmentsView> {
    let dump = device
        .segments
        .as_ref()
        .filter(|_| device.segments_show_reserved)?;
    let segment_events = device.events.iter().any(|e| is_segment_event(e.action));
    if dump.is_empty() && !segment_events {
        return None;
    }
    let largest_request = largest_request(device);
    let end = replay.events;
    let mut states: Vec<(u32, u64, SegmentState)> = Vec::new();
    let mut dumped = None;
    for instant in instants {
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
            let dumped = dumped.get_or_insert_with(|| dumped_blocks(device));
            rebuilt_layout(device, replay, category, instant.position, dumped)
        };
        let mut state = summarise(segments.0, request, segments.1);
        state.label = instant.label.clone();
        state.exact = instant.position >= end;
        state.event_index = (instant.position > 0).then(|| u64::from(instant.position) - 1);
        states.push((instant.position, request, state));
    }
    Some(SegmentsView {
        instants: states.into_iter().map(|(_, _, s)| s).collect(),
        ooms_left_out,
    })
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

/// A block of an allocation: address, size, state, category.
type LiveBlock = (u64, u64, BlockUse, Category);

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
            let size = dumped
                .get(&(i.addr, i.size))
                .copied()
                .unwrap_or_else(|| i.size.max(1).div_ceil(MIN_BLOCK) * MIN_BLOCK);
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
fn lay_out(
    segments: &BTreeMap<u64, (u64, bool)>,
    blocks: Vec<LiveBlock>,
) -> (Vec<SegmentMap>, u64) {
    let mut unplaced = 0u64;
    let mut next = 0usize;
    let mut maps = Vec::with_capacity(segments.len());
    for (&address, &(size, expandable)) in segments {
        let seg_end = address.saturating_add(size);
        // Blocks below this segment belong to no segment.
        while next < blocks.len() && blocks[next].0 < address {
            unplaced = unplaced.saturating_add(blocks[next].1);
            next += 1;
        }
        let mut spans = Vec::new();
        let mut cursor = address;
        while next < blocks.len() && blocks[next].0 < seg_end {
            let (addr, block_size, state, category) = blocks[next];
            next += 1;
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
            let following = blocks.get(next).map_or(seg_end, |b| b.0.min(seg_end));
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
        maps.push(SegmentMap {
            address,
            size,
            expandable,
            blocks: spans,
        });
    }
    for b in &blocks[next..] {
        unplaced = unplaced.saturating_add(b.1);
    }
    (maps, unplaced)
}

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

/// The segments after `position` events: the dump's, with the segment
/// events from `position` on undone, last first. Ranges by address →
/// (size, expandable).
fn segments_at(device: &DeviceTrace, position: u32) -> BTreeMap<u64, (u64, bool)> {
    let mut ranges: BTreeMap<u64, (u64, bool)> = device
        .segments
        .iter()
        .flatten()
        .map(|s| (s.addr, (s.total_size, s.is_expandable)))
        .collect();
    for e in device.events[position as usize..].iter().rev() {
        match e.action {
            Action::SegmentAlloc => {
                ranges.remove(&e.addr);
            }
            Action::SegmentFree => {
                ranges.insert(e.addr, (e.size, false));
            }
            Action::SegmentMap => unmap(&mut ranges, e.addr, e.size),
            Action::SegmentUnmap => map(&mut ranges, e.addr, e.size),
            _ => {}
        }
    }
    ranges
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
        state.reserved_bytes = state.reserved_bytes.saturating_add(s.size);
        for b in &s.blocks {
            let bytes = b.size();
            match b.state() {
                BlockUse::Allocated => state.allocated_bytes += bytes,
                BlockUse::PendingFree => state.pending_free_bytes += bytes,
                BlockUse::Inactive => {
                    state.inactive_bytes += bytes;
                    state.largest_free_block_bytes = state.largest_free_block_bytes.max(bytes);
                    if bytes < request {
                        state.fragmentation_bytes += bytes;
                    }
                }
            }
        }
    }
    state.segments = segments;
    state
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
            blocks,
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
        let at = |p| segments_at(&device, p).into_iter().collect::<Vec<_>>();
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
        let view = view(&device, &replay, &|_| Category::Activation, &instants, 0).unwrap();
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
