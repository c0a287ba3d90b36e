//! The timeline's bands: the largest allocations over time, which the HTML
//! viewer draws each on its own (hover one for its size, category, rule
//! and stack) beside the per-category curves that hold everything else.
//!
//! The trace is cut into [`WINDOWS`] equal stretches of positions and each
//! keeps its [`PER_WINDOW`] largest allocations live in it, so a zoom into
//! any stretch still finds that stretch's largest allocations, however
//! large the file, and the page stays small (at most 512 bands).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::model::DeviceTrace;
use crate::schema::{Band, EventRef};
use crate::timeline::{Interval, Replay};

use super::stacks::StackTableBuilder;
use super::{ClassifiedDevice, Options, SiteNames};

/// Stretches of the trace that each keep their largest allocations.
pub const WINDOWS: usize = 32;
/// Allocations kept per stretch.
pub const PER_WINDOW: usize = 16;

/// The largest allocations of a stretch: a min-heap of (size, index), the
/// earlier index first among equal sizes.
type Largest = BinaryHeap<Reverse<(u64, Reverse<usize>)>>;

/// `timeline.x` of a position: the time of the event before it since the
/// first event, or the position itself when the trace has no timestamps.
pub fn x_of(device: &DeviceTrace, replay: &Replay, position: usize) -> f64 {
    if replay.timestamped && !device.events.is_empty() {
        let t0 = device.events[0].ts().unwrap_or(0.0);
        device.events[position.saturating_sub(1).min(device.events.len() - 1)].ts_us - t0
    } else {
        position as f64
    }
}

/// The events that made and ended an interval: `None` for one made before
/// recording, or alive at the end. Times are since the first event, on the
/// clock of `timeline.x`.
pub fn life(
    device: &DeviceTrace,
    replay: &Replay,
    iv: &Interval,
) -> (Option<EventRef>, Option<EventRef>) {
    let event = |position: u32| {
        let k = position as usize - 1;
        EventRef(
            k as u64,
            replay
                .timestamped
                .then(|| device.events[k].ts_us - device.events[0].ts_us),
        )
    };
    (
        (!iv.origin.before_recording() && iv.start > 0).then(|| event(iv.start)),
        (iv.end < replay.positions()).then(|| event(iv.end)),
    )
}

/// The bands of a device, by first position then size (largest first);
/// their stacks are interned into `stacks`. `spans` are the plotted
/// stretches (`analysis::plot_spans`: the whole run, then the detail
/// levels): each is cut into [`WINDOWS`] stretches that keep their largest,
/// and a band's level is the first span that chose it.
pub fn bands(
    sites: &crate::model::Sites,
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
    stacks: &mut StackTableBuilder,
    names: &mut SiteNames,
    options: &Options,
    spans: &[(usize, usize, usize)],
) -> Vec<Band> {
    let replay = &cd.timeline.replay;
    let positions = replay.positions() as usize;
    if positions == 0 {
        return Vec::new();
    }
    // Per level and stretch, the largest allocations live in it: a
    // min-heap of (size, index) capped at PER_WINDOW; one pass over the
    // intervals fills every level.
    let mut heaps: Vec<Vec<Largest>> = spans
        .iter()
        .map(|_| (0..WINDOWS).map(|_| BinaryHeap::new()).collect())
        .collect();
    for (k, iv) in replay.intervals.iter().enumerate() {
        let (from, to) = (iv.start as usize, iv.end as usize);
        if iv.size == 0 || to <= from {
            continue;
        }
        for (level, &(start, end, _)) in spans.iter().enumerate() {
            if to <= start || from >= end {
                continue;
            }
            let len = end - start;
            let window = |p: usize| ((p - start) * WINDOWS / len).min(WINDOWS - 1);
            for heap in &mut heaps[level][window(from.max(start))..=window(to.min(end) - 1)] {
                let entry = Reverse((iv.size, Reverse(k)));
                if heap.len() < PER_WINDOW {
                    heap.push(entry);
                } else if heap.peek().is_some_and(|smallest| entry < *smallest) {
                    heap.pop();
                    heap.push(entry);
                }
            }
        }
    }
    // Interval index → the first level that chose it.
    let mut chosen: Vec<(usize, u8)> = heaps
        .into_iter()
        .enumerate()
        .flat_map(|(level, heaps)| {
            heaps.into_iter().flat_map(move |h| {
                h.into_iter()
                    .map(move |Reverse((_, Reverse(k)))| (k, level as u8))
            })
        })
        .collect();
    chosen.sort_unstable();
    chosen.dedup_by_key(|c| c.0);
    let mut bands: Vec<Band> = chosen
        .into_iter()
        .map(|(k, level)| {
            let iv = &replay.intervals[k];
            let class = &cd.classes[k];
            let (alloc, free) = life(device, replay, iv);
            Band {
                x0: x_of(device, replay, iv.start as usize),
                x1: x_of(device, replay, (iv.end as usize).min(positions - 1)),
                bytes: iv.size,
                category: class.category,
                rule: class.rule.name(&options.user_rules),
                site: names.of(sites, iv.site).to_string(),
                stack: stacks.stack_of(sites, iv.site),
                alloc,
                free,
                level,
            }
        })
        .collect();
    bands.sort_by(|a, b| {
        a.x0.total_cmp(&b.x0)
            .then(b.bytes.cmp(&a.bytes))
            .then(a.x1.total_cmp(&b.x1))
    });
    bands
}

/// Keeps the bands within the plotted x range (the last point is the
/// highest of the last slice, which may come before the last event).
/// (Events out of order give an x that goes back: the range is the
/// smallest and largest x.)
pub fn clamp(t: &mut crate::schema::TimelineSeries) {
    let lo = t.x.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = t.x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if lo > hi {
        return;
    }
    for b in &mut t.bands {
        b.x0 = b.x0.max(lo).min(hi);
        b.x1 = b.x1.max(b.x0).min(hi);
    }
}
