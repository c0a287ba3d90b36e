//! Replay: one device's events → allocation intervals and memory curves.
//!
//! Positions, not timestamps, are the clock: position `p` is the state after
//! the first `p` events (position 0 = the start of the recording). An
//! [`Interval`] is live at `p` when `start <= p < end`. List order is
//! authoritative; timestamps tie often (formats.md A7).
//!
//! Memory that existed before recording began — frees of addresses never
//! allocated in the trace, blocks live at dump time that were never allocated,
//! and what a Chrome trace's `Total Allocated` says beyond the replayed sum —
//! is memory *before recording* (`Origin::before_recording`; the report's
//! `baseline_bytes`): live from position 0, as pytorch.org/memory_viz shows it.

use rustc_hash::FxHashMap as HashMap;

use super::Steps;
use crate::model::{Action, BlockState, Category, DeviceTrace, Diagnostic, ReportedTotals, SiteId};

/// Largest allocation replay believes (256 TiB); larger sizes are clamped.
pub const MAX_BYTES: u64 = 1 << 48;

/// Largest timestamp magnitude used for the time axis, in microseconds
/// (2^60 µs, 36,000 years): a larger (or infinite) one is a damaged file,
/// and the axis falls back to event indices.
pub const MAX_TS_US: f64 = (1u64 << 60) as f64;

/// Where an interval's memory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Allocated by an event in the trace.
    Traced,
    /// Freed in the trace but allocated before recording began.
    BeforeRecordingFreed,
    /// Live at dump time (a block in `segments`) but never allocated in the trace.
    BeforeRecordingLive,
    /// Allocator total beyond the replayed sum (Chrome traces): memory from
    /// before profiling that no event names.
    BeforeRecordingUnnamed,
}

impl Origin {
    pub fn before_recording(self) -> bool {
        self != Origin::Traced
    }
}

/// One allocation's lifetime on the position clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    pub addr: u64,
    pub size: u64,
    pub site: SiteId,
    /// First position where it is live.
    pub start: u32,
    /// First position where it is gone; `positions()` means alive at the end.
    pub end: u32,
    pub origin: Origin,
    /// Category stated by the file (see [`crate::model::Event::given`]).
    pub given: Option<Category>,
}

impl Interval {
    pub fn live_at(&self, position: u32) -> bool {
        self.start <= position && position < self.end
    }
}

/// The replayed device.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    /// Number of events; positions run `0..=events`.
    pub events: u32,
    /// Every allocation, in order of allocation (baseline ones first).
    pub intervals: Vec<Interval>,
    /// Allocated bytes at each position (`events + 1` values).
    pub allocated: Vec<u64>,
    /// Reserved bytes at each position, when the file lets us know.
    pub reserved: Option<Steps>,
    pub baseline_bytes: u64,
    pub diagnostics: Vec<Diagnostic>,
    /// Event indices of the `oom` entries, in order.
    pub ooms: Vec<u32>,
    /// Whether there are events and every one has a usable timestamp
    /// (within ±[`MAX_TS_US`]), so that times since the first event are
    /// finite and can be plotted and written.
    pub timestamped: bool,
}

impl Replay {
    /// Splits interval `k` in its place into consecutive intervals of these
    /// sizes (its address, lifetime and origin each): the parts classify
    /// tells apart in the untracked lump of memory from before recording.
    pub fn split(&mut self, k: usize, sizes: &[u64]) {
        let whole = self.intervals[k];
        debug_assert_eq!(
            sizes.iter().sum::<u64>(),
            whole.size,
            "parts of interval {k}"
        );
        let parts = sizes.iter().map(|&size| Interval { size, ..whole });
        self.intervals.splice(k..=k, parts);
    }

    /// Number of positions (`events + 1`); also the `end` of intervals alive at the end.
    pub fn positions(&self) -> u32 {
        self.events + 1
    }

    /// The position of maximum allocated bytes; the earliest on ties.
    pub fn peak_position(&self) -> u32 {
        argmax(&self.allocated)
    }

    pub fn reserved_peak_position(&self) -> Option<u32> {
        self.reserved.as_ref().map(Steps::argmax)
    }
}

/// Index of the maximum; the earliest on ties; 0 for an empty slice.
pub fn argmax(values: &[u64]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}

/// An interval still open during the walk.
struct Open {
    interval: usize,
    /// Position of a `free_requested` not yet completed.
    requested_at: Option<u32>,
}

/// Replays one device (formats.md A11, "Recommended memcut algorithm").
/// The reserved curve, which needs only the events and the segments, is
/// walked on another thread meanwhile.
pub fn replay(device: &DeviceTrace) -> Replay {
    let (mut replay, (reserved, notes)) = rayon::join(
        || replay_allocations(device),
        || {
            let mut notes = Vec::new();
            (reserved_curve(device, &mut notes), notes)
        },
    );
    replay.reserved = reserved;
    replay.diagnostics.extend(notes);
    drop_impossible_reserved(&mut replay);
    replay
}

/// Reserved memory holds every allocated byte: a reserved curve that falls
/// below the allocated one anywhere (a `Total Reserved` of 0 or below
/// `Total Allocated`, segments that do not add up) says nothing reliable,
/// so reserved memory is unknown rather than an impossible number.
fn drop_impossible_reserved(replay: &mut Replay) {
    let Some(reserved) = &replay.reserved else {
        return;
    };
    let Some(p) = reserved
        .values()
        .zip(&replay.allocated)
        .position(|(r, &a)| r < a)
    else {
        return;
    };
    let at = match p {
        0 => "the start".to_owned(),
        p => format!("event {}", p - 1),
    };
    replay.diagnostics.push(Diagnostic::warning(format!(
        "reserved memory is unknown: the file's reserved bytes ({}) are below the allocated bytes ({}) at {at}, which no allocator reports",
        reserved.get(p as u32),
        replay.allocated[p]
    )));
    replay.reserved = None;
}

/// Everything of [`replay`] but the reserved curve.
fn replay_allocations(device: &DeviceTrace) -> Replay {
    let n = device.events.len() as u32;
    let end = n + 1;
    let mut intervals: Vec<Interval> = Vec::new();
    // FxHash: ~1M lookups by address on a 1M-entry snapshot (SipHash was
    // most of the replay's time); nothing iterates these maps.
    let mut open: HashMap<u64, Open> = HashMap::default();
    // Chrome traces before PyTorch 1.10 have no `Addr`: match frees by size.
    let mut open_without_addr: HashMap<u64, Vec<usize>> = HashMap::default();
    let mut frees_unmatched = (0u64, 0u64);
    let mut realloc_live = 0u64;
    let mut skipped_completion = 0u64;
    let mut ooms = Vec::new();

    for (k, event) in device.events.iter().enumerate() {
        let after = k as u32 + 1;
        match event.action {
            Action::Alloc => {
                if event.addr == 0 {
                    open_without_addr
                        .entry(event.size)
                        .or_default()
                        .push(intervals.len());
                } else if let Some(previous) = open.remove(&event.addr) {
                    // The address is live again: its free was skipped or lost.
                    let close_at = match previous.requested_at {
                        Some(at) => {
                            skipped_completion += 1;
                            at
                        }
                        None => {
                            realloc_live += 1;
                            after
                        }
                    };
                    intervals[previous.interval].end = close_at;
                }
                if event.addr != 0 {
                    open.insert(
                        event.addr,
                        Open {
                            interval: intervals.len(),
                            requested_at: None,
                        },
                    );
                }
                intervals.push(Interval {
                    addr: event.addr,
                    size: event.size,
                    site: event.site,
                    start: after,
                    end,
                    origin: Origin::Traced,
                    given: event.given,
                });
            }
            Action::FreeRequested | Action::FreeCompleted => {
                let completed = event.action == Action::FreeCompleted;
                if event.addr == 0 {
                    if completed {
                        let matched = open_without_addr
                            .get_mut(&event.size)
                            .and_then(|stack| stack.pop());
                        match matched {
                            Some(i) => intervals[i].end = after,
                            None => {
                                frees_unmatched.0 += 1;
                                frees_unmatched.1 = frees_unmatched.1.saturating_add(event.size);
                                intervals.push(before_trace(
                                    event.addr,
                                    event.size,
                                    event.site,
                                    after,
                                    event.given,
                                ));
                            }
                        }
                    }
                    continue;
                }
                let o = open.entry(event.addr).or_insert_with(|| {
                    // Allocated before recording began.
                    frees_unmatched.0 += 1;
                    frees_unmatched.1 = frees_unmatched.1.saturating_add(event.size);
                    let interval = intervals.len();
                    intervals.push(before_trace(
                        event.addr,
                        event.size,
                        event.site,
                        end,
                        event.given,
                    ));
                    Open {
                        interval,
                        requested_at: None,
                    }
                });
                if completed {
                    let interval = o.interval;
                    open.remove(&event.addr);
                    intervals[interval].end = after;
                } else {
                    o.requested_at = Some(after);
                }
            }
            Action::Oom => ooms.push(k as u32),
            _ => {}
        }
    }

    let mut diagnostics = Vec::new();
    let segments = device.segments.as_deref().unwrap_or(&[]);
    // Blocks live at dump time that the trace never allocated: baseline, alive throughout.
    let mut live_blocks = 0u64;
    let mut unmatched_open = 0u64;
    for block in segments.iter().flat_map(|s| s.blocks.iter()) {
        match block.state {
            BlockState::ActiveAllocated => {
                live_blocks += 1;
                if open.remove(&block.addr).is_none() {
                    intervals.push(Interval {
                        addr: block.addr,
                        size: block.requested_size,
                        site: block.site,
                        start: 0,
                        end,
                        origin: Origin::BeforeRecordingLive,
                        given: None,
                    });
                }
            }
            BlockState::ActivePendingFree => {
                open.remove(&block.addr);
            }
            BlockState::Inactive => {}
        }
    }
    if live_blocks > 0 && n > 0 {
        unmatched_open = open.len() as u64;
    }

    let first_is_free = device
        .events
        .iter()
        .find(|e| {
            matches!(
                e.action,
                Action::Alloc | Action::FreeRequested | Action::FreeCompleted
            )
        })
        .is_some_and(|e| e.action != Action::Alloc);
    if first_is_free {
        diagnostics.push(Diagnostic::warning(
            "the history starts with a free: recording began mid-program or the ring buffer wrapped; memory allocated earlier is counted as baseline",
        ));
    }
    let mut last_ts = f64::NEG_INFINITY;
    let mut backwards = 0u64;
    let mut timestamped = 0usize;
    for ts in device.events.iter().filter_map(|e| e.ts()) {
        backwards += u64::from(ts < last_ts);
        last_ts = last_ts.max(ts);
        timestamped += usize::from(ts.abs() <= MAX_TS_US);
    }
    if backwards > 0 {
        diagnostics.push(Diagnostic::info(format!(
            "{backwards} events are timestamped earlier than an event listed before them: the list order is used, as the allocator recorded it"
        )));
    }
    if frees_unmatched.0 > 0 {
        diagnostics.push(Diagnostic::info(format!(
            "{} frees of addresses never allocated in the trace ({} bytes): counted as baseline from the start",
            frees_unmatched.0, frees_unmatched.1
        )));
    }
    if realloc_live > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "{realloc_live} allocations reuse an address that was still live (a free is missing); the older allocation is closed there"
        )));
    }
    if skipped_completion > 0 {
        diagnostics.push(Diagnostic::info(format!(
            "{skipped_completion} free_requested without free_completed: closed at the request"
        )));
    }
    if unmatched_open > 0 {
        diagnostics.push(Diagnostic::info(format!(
            "{unmatched_open} allocations still open at the end of the trace are not live blocks in the dump"
        )));
    }
    if n == 0 {
        diagnostics.push(Diagnostic::warning(
            "no allocation history (segments-only snapshot): the report shows the state at dump time, not a timeline",
        ));
    }

    // No allocation is larger than 256 TiB: a bigger one is a damaged file,
    // and clamping keeps every sum below far from overflow.
    let mut clamped = 0u64;
    for i in &mut intervals {
        if i.size > MAX_BYTES {
            i.size = MAX_BYTES;
            clamped += 1;
        }
    }
    if clamped > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "{clamped} allocations claim more than {MAX_BYTES} bytes (256 TiB): the file is damaged; counted as {MAX_BYTES} bytes each"
        )));
    }
    let mut allocated = curve(&intervals, end);
    if let Some(untracked) = reconcile_with_reported(device, &mut allocated, &mut diagnostics) {
        intervals.push(Interval {
            addr: 0,
            size: untracked,
            site: 0,
            start: 0,
            end,
            origin: Origin::BeforeRecordingUnnamed,
            given: None,
        });
    }
    let baseline_bytes = intervals
        .iter()
        .filter(|i| i.origin.before_recording())
        .fold(0u64, |sum, i| sum.saturating_add(i.size));
    Replay {
        events: n,
        intervals,
        allocated,
        reserved: None,
        baseline_bytes,
        diagnostics,
        ooms,
        timestamped: n > 0 && timestamped == n as usize,
    }
}

fn before_trace(addr: u64, size: u64, site: SiteId, end: u32, given: Option<Category>) -> Interval {
    Interval {
        addr,
        size,
        site,
        start: 0,
        end,
        origin: Origin::BeforeRecordingFreed,
        given,
    }
}

/// Allocated bytes at each position: sum of sizes of live intervals.
pub fn curve(intervals: &[Interval], positions: u32) -> Vec<u64> {
    let all: u128 = intervals.iter().map(|i| u128::from(i.size)).sum();
    if all <= i64::MAX as u128 {
        // Every partial sum below lies within ±`all`, so i64 is exact, and
        // the deltas can live in the result itself: no second array of
        // positions (16 MB of fresh pages for a 1M-entry trace).
        let mut curve = vec![0u64; positions as usize + 1];
        for i in intervals {
            let size = i.size as i64;
            let start = &mut curve[i.start as usize];
            *start = (*start as i64 + size) as u64;
            let end = &mut curve[i.end as usize];
            *end = (*end as i64 - size) as u64;
        }
        let mut total = 0i64;
        for slot in &mut curve {
            total += *slot as i64;
            *slot = total.max(0) as u64;
        }
        curve.truncate(positions as usize);
        return curve;
    }
    let mut delta = vec![0i128; positions as usize + 1];
    for i in intervals {
        delta[i.start as usize] += i.size as i128;
        delta[i.end as usize] -= i.size as i128;
    }
    let mut total = 0i128;
    delta[..positions as usize]
        .iter()
        .map(|d| {
            total += d;
            total.clamp(0, u64::MAX as i128) as u64
        })
        .collect()
}

/// Chrome traces state the allocator's own total after each event. Where they
/// do, they are the truth: the curve takes them, and the constant excess over
/// the replay at the first event is memory from before profiling (returned as
/// an untracked baseline interval).
fn reconcile_with_reported(
    device: &DeviceTrace,
    allocated: &mut [u64],
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<u64> {
    if device.reported.len() != device.events.len() || device.reported.is_empty() {
        return None;
    }
    let total = |k: usize| believed(device.reported[k].allocated);
    let first = (0..device.reported.len()).find_map(|k| total(k).map(|a| (k, a)))?;
    let untracked = first.1.saturating_sub(allocated[first.0 + 1]);
    let mut worst = 0u64;
    for (p, slot) in allocated.iter_mut().enumerate() {
        let replayed = slot.saturating_add(untracked);
        let reported = p.checked_sub(1).and_then(total).unwrap_or(replayed);
        worst = worst.max(reported.abs_diff(replayed));
        *slot = reported;
    }
    warn_implausible_totals(
        device.reported.iter().map(|r| r.allocated),
        "Total Allocated",
        diagnostics,
    );
    if worst > 0 {
        diagnostics.push(Diagnostic::info(format!(
            "the allocator's Total Allocated differs from the replayed events by up to {worst} bytes; the allocator's totals are used"
        )));
    }
    (untracked > 0).then_some(untracked)
}

/// A reported total (`Total Allocated` or `Total Reserved`) as the curves
/// count it: as no allocation is believed larger than 256 TiB, no total
/// is; a bigger one is a damaged file (and would overflow sums of peaks).
fn believed(total: Option<u64>) -> Option<u64> {
    total.map(|v| v.min(MAX_BYTES))
}

/// Warns of the reported totals above [`MAX_BYTES`] ([`believed`]).
fn warn_implausible_totals(
    totals: impl Iterator<Item = Option<u64>>,
    what: &str,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let over = totals.filter(|t| t.is_some_and(|v| v > MAX_BYTES)).count();
    if over > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "{over} memory events report a `{what}` above {MAX_BYTES} bytes (256 TiB): the file is damaged; counted as {MAX_BYTES} bytes"
        )));
    }
}

/// Reserved bytes per position: from the Chrome trace's `Total Reserved`, or
/// from the dump's segments walked backwards through segment events.
fn reserved_curve(device: &DeviceTrace, diagnostics: &mut Vec<Diagnostic>) -> Option<Steps> {
    let n = device.events.len();
    // The CPU allocator reports `Total Reserved: 0` throughout: no cache to speak of.
    if device.reported.len() == n
        && device
            .reported
            .iter()
            .any(|r| r.reserved.is_some_and(|v| v > 0))
    {
        let reserved = |r: &ReportedTotals| believed(r.reserved);
        let mut out = Steps::default();
        let first = device.reported.iter().find_map(reserved).unwrap_or(0);
        out.push(first);
        let mut last = first;
        for r in &device.reported {
            last = reserved(r).unwrap_or(last);
            out.push(last);
        }
        warn_implausible_totals(
            device.reported.iter().map(|r| r.reserved),
            "Total Reserved",
            diagnostics,
        );
        return Some(out);
    }
    let segments = device
        .segments
        .as_ref()
        .filter(|_| device.segments_show_reserved)?;
    let final_reserved: i128 = segments.iter().map(|s| s.total_size as i128).sum();
    // Walked back from the dump: the value at position `k` is the value
    // after it, undone by event `k` when that maps or frees a segment.
    // `marks`: `(k, value at k)` at each segment event, and the end.
    let clamp = |v: i128| v.clamp(0, u64::MAX as i128) as u64;
    let mut marks = vec![(n as u32, clamp(final_reserved))];
    let mut value = final_reserved;
    let mut went_negative = false;
    for k in (0..n).rev() {
        let e = &device.events[k];
        let delta = match e.action {
            Action::SegmentAlloc | Action::SegmentMap => -(e.size as i128),
            Action::SegmentFree | Action::SegmentUnmap => e.size as i128,
            _ => continue,
        };
        value += delta;
        went_negative |= value < 0;
        marks.push((k as u32, clamp(value)));
    }
    let segment_events = marks.len() > 1;
    // Positions after the previous mark up to a mark hold its value.
    let mut out = Steps::default();
    let mut filled = 0;
    for &(k, v) in marks.iter().rev() {
        out.push_run(v, k + 1 - filled);
        filled = k + 1;
    }
    if went_negative {
        diagnostics.push(Diagnostic::warning(
            "segment events do not add up to the dumped segments (history incomplete): early reserved values are clamped at 0",
        ));
    }
    if n > 0 && !segment_events {
        diagnostics.push(Diagnostic::info(
            "the history has no segment events: reserved memory is known at dump time only and shown flat",
        ));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Block, Event, ReportedTotals, Segment};

    fn ev(action: Action, addr: u64, size: u64) -> Event {
        Event::new(action, addr, size)
    }

    fn device(events: Vec<Event>) -> DeviceTrace {
        DeviceTrace {
            device: "cuda:0".into(),
            events,
            ..DeviceTrace::default()
        }
    }

    //   a: ████████        (alloc 0, free at 3)
    //   b:    ██████████   (alloc 1, alive)
    //   positions 0 1 2 3 4
    #[test]
    fn alloc_and_free_make_a_curve_with_earliest_peak() {
        let d = device(vec![
            ev(Action::Alloc, 0x10, 100),
            ev(Action::Alloc, 0x20, 50),
            ev(Action::FreeRequested, 0x10, 100),
            ev(Action::FreeCompleted, 0x10, 100),
        ]);
        let r = replay(&d);
        assert_eq!(r.allocated, vec![0, 100, 150, 150, 50]);
        assert_eq!(r.peak_position(), 2);
        assert_eq!(r.baseline_bytes, 0);
        assert_eq!(r.intervals[0].end, 4);
        assert_eq!(r.intervals[1].end, 5);
    }

    #[test]
    fn free_of_unknown_address_is_baseline_from_the_start() {
        let d = device(vec![
            ev(Action::FreeCompleted, 0x99, 70),
            ev(Action::Alloc, 0x10, 10),
        ]);
        let r = replay(&d);
        assert_eq!(r.allocated, vec![70, 0, 10]);
        assert_eq!(r.baseline_bytes, 70);
        assert_eq!(r.intervals[0].origin, Origin::BeforeRecordingFreed);
        assert!(r
            .diagnostics
            .iter()
            .any(|d| d.message.contains("starts with a free")));
    }

    #[test]
    fn live_block_never_allocated_is_baseline_alive_throughout() {
        let mut d = device(vec![ev(Action::Alloc, 0x10, 10)]);
        d.segments_show_reserved = true;
        d.segments = Some(vec![Segment {
            addr: 0x0,
            total_size: 2048,
            is_expandable: false,
            blocks: smallvec::smallvec![
                Block {
                    addr: 0x10,
                    size: 512,
                    requested_size: 10,
                    state: BlockState::ActiveAllocated,
                    site: 0,
                },
                Block {
                    addr: 0x400,
                    size: 1024,
                    requested_size: 1000,
                    state: BlockState::ActiveAllocated,
                    site: 0,
                },
            ],
        }]);
        let r = replay(&d);
        assert_eq!(r.allocated, vec![1000, 1010]);
        assert_eq!(r.baseline_bytes, 1000);
        assert_eq!(r.reserved.map(|s| s.to_vec()), Some(vec![2048, 2048]));
    }

    #[test]
    fn free_requested_without_completion_closes_at_request_when_address_reused() {
        let d = device(vec![
            ev(Action::Alloc, 0x10, 100),
            ev(Action::FreeRequested, 0x10, 100),
            ev(Action::Alloc, 0x10, 30),
        ]);
        let r = replay(&d);
        assert_eq!(r.allocated, vec![0, 100, 0, 30]);
    }

    #[test]
    fn segment_events_walk_reserved_backwards_from_the_dump() {
        let mut d = device(vec![
            ev(Action::SegmentAlloc, 0x0, 4096),
            ev(Action::Alloc, 0x0, 100),
            ev(Action::SegmentAlloc, 0x10000, 8192),
        ]);
        d.segments_show_reserved = true;
        d.segments = Some(vec![
            Segment {
                addr: 0,
                total_size: 4096,
                is_expandable: false,
                blocks: Default::default(),
            },
            Segment {
                addr: 0x10000,
                total_size: 8192,
                is_expandable: false,
                blocks: Default::default(),
            },
        ]);
        let r = replay(&d);
        assert_eq!(
            r.reserved.map(|s| s.to_vec()),
            Some(vec![0, 4096, 4096, 12288])
        );
    }

    #[test]
    fn reported_totals_win_and_excess_is_untracked_baseline() {
        let mut d = device(vec![
            ev(Action::Alloc, 0x10, 100),
            ev(Action::FreeCompleted, 0x10, 100),
        ]);
        d.reported = vec![
            ReportedTotals {
                allocated: Some(1100),
                reserved: Some(2000),
            },
            ReportedTotals {
                allocated: Some(1000),
                reserved: Some(2000),
            },
        ];
        let r = replay(&d);
        assert_eq!(r.allocated, vec![1000, 1100, 1000]);
        assert_eq!(r.baseline_bytes, 1000);
        assert_eq!(r.peak_position(), 1);
        assert_eq!(r.reserved.map(|s| s.to_vec()), Some(vec![2000, 2000, 2000]));
    }

    #[test]
    fn frees_without_addresses_match_by_size() {
        let d = device(vec![
            ev(Action::Alloc, 0, 100),
            ev(Action::Alloc, 0, 50),
            ev(Action::FreeCompleted, 0, 100),
        ]);
        let r = replay(&d);
        assert_eq!(r.allocated, vec![0, 100, 150, 50]);
    }

    proptest::proptest! {
        /// Both ways of summing (i64 in place when the sizes allow, i128
        /// otherwise) agree with adding up the live intervals at each
        /// position, totals past 2^64 included.
        #[test]
        fn curve_is_the_sum_of_live_sizes(
            raw in proptest::collection::vec((0u32..40, 0u32..40, 0u64..4, 0u64..1000), 0..40),
        ) {
            let positions = 41;
            let intervals: Vec<Interval> = raw
                .iter()
                .map(|&(a, b, scale, size)| Interval {
                    addr: 0,
                    // Up to 2^62 bytes each: two of them pass i64::MAX.
                    size: if scale == 3 { (u64::MAX >> 2) - size } else { size << (16 * scale) },
                    site: 0,
                    start: a.min(b),
                    end: a.max(b) + 1,
                    origin: Origin::Traced,
                    given: None,
                })
                .collect();
            let want: Vec<u64> = (0..positions)
                .map(|p| {
                    let live: u128 = intervals
                        .iter()
                        .filter(|i| i.live_at(p))
                        .map(|i| u128::from(i.size))
                        .sum();
                    live.min(u128::from(u64::MAX)) as u64
                })
                .collect();
            proptest::prop_assert_eq!(curve(&intervals, positions), want);
        }
    }
}
