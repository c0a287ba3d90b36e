//! The plotted timeline: memory by category over positions, downsampled
//! to about `points` x values by bucket, each bucket keeping the position
//! of its largest total (so every local maximum, and the peak, survive);
//! and finer levels of the same around the reported instant, for a zoom.

use std::collections::BTreeMap;

use crate::model::{Category, DeviceTrace};
use crate::schema::{DetailSeries, TimelineSeries};
use crate::timeline::DeviceTimeline;

use super::bands;

/// Positions per plotted point: each point is the highest of its bucket.
pub fn plot_bucket(positions: usize, points: usize) -> usize {
    positions.div_ceil(points.max(1)).max(1)
}

/// Levels of finer series around the reported instant, each over a
/// sixteenth of the stretch of the one before it.
const DETAIL_LEVELS: usize = 2;
const DETAIL_ZOOM: usize = 16;

/// The stretches of positions the plots cover, `[start, end)` with the
/// positions per plotted point: the whole run, then each detail level's
/// stretch around `shown` while the level before it had more positions
/// than points.
pub fn plot_spans(positions: usize, points: usize, shown: u32) -> Vec<(usize, usize, usize)> {
    let mut spans = vec![(0, positions, plot_bucket(positions, points))];
    let mut len = positions;
    for _ in 0..DETAIL_LEVELS {
        len /= DETAIL_ZOOM;
        if spans.last().is_some_and(|s| s.2 < 2) || len < 2 || points == 0 {
            break;
        }
        let start = (shown as usize)
            .saturating_sub(len / 2)
            .min(positions - len);
        spans.push((start, start + len, plot_bucket(len, points)));
    }
    spans
}

/// One plotted stretch as the walk fills it: each slice of `bucket`
/// positions gives its highest total.
struct Plotter {
    start: usize,
    end: usize,
    bucket: usize,
    best: Option<(i64, usize, [i64; Category::ALL.len()])>,
    x: Vec<f64>,
    at: Vec<u32>,
    series: Vec<Vec<u64>>,
    reserved: Option<Vec<u64>>,
}

impl Plotter {
    fn new((start, end, bucket): (usize, usize, usize)) -> Plotter {
        Plotter {
            start,
            end,
            bucket,
            best: None,
            x: Vec::new(),
            at: Vec::new(),
            series: vec![Vec::new(); Category::ALL.len()],
            reserved: None,
        }
    }

    fn visit(
        &mut self,
        p: usize,
        current: &[i64; Category::ALL.len()],
        x_of: impl Fn(usize) -> f64,
        reserved: Option<&crate::timeline::Steps>,
    ) {
        if p < self.start || p >= self.end {
            return;
        }
        let total: i64 = current.iter().sum();
        if self.best.is_none_or(|(t, _, _)| total > t) {
            self.best = Some((total, p, *current));
        }
        if (p - self.start + 1) % self.bucket == 0 || p + 1 == self.end {
            let (_, bp, values) = self.best.take().expect("set above");
            self.x.push(x_of(bp));
            self.at.push(bp as u32);
            for (c, v) in values.iter().enumerate() {
                self.series[c].push((*v).max(0) as u64);
            }
            if let Some(r) = reserved {
                self.reserved
                    .get_or_insert_with(Vec::new)
                    .push(r.get(bp as u32));
            }
        }
    }

    /// The categories with bytes somewhere, in order.
    fn series(series: Vec<Vec<u64>>) -> BTreeMap<Category, Vec<u64>> {
        series
            .into_iter()
            .enumerate()
            .filter(|(_, values)| values.iter().any(|&v| v > 0))
            .map(|(c, values)| (Category::ALL[c], values))
            .collect()
    }
}

/// The plotted series (with the detail levels around `shown`), and the
/// position each plotted point of the whole run shows. `peak_x` marks
/// `shown`: the peak, or the `--at` instant the report shows instead.
pub(super) fn timeline_series(
    device: &DeviceTrace,
    tl: &DeviceTimeline,
    points: usize,
    shown: u32,
) -> (TimelineSeries, Vec<u32>) {
    let positions = tl.replay.positions() as usize;
    let has_ts = tl.replay.timestamped;
    let x_of = |p: usize| bands::x_of(device, &tl.replay, p);
    let mut out = TimelineSeries {
        x_unit: if has_ts { "time_us" } else { "event_index" }.into(),
        ..TimelineSeries::default()
    };
    let mut plots: Vec<Plotter> = plot_spans(positions, points, shown)
        .into_iter()
        .map(Plotter::new)
        .collect();
    // Without plots (points = 0) only the instants below are needed.
    if points > 0 {
        let reserved = tl.replay.reserved.as_ref();
        tl.for_each_position(|p, current| {
            for plot in &mut plots {
                plot.visit(p, current, x_of, reserved);
            }
        });
    }
    let mut plots = plots.into_iter();
    let base = plots.next().expect("the whole run");
    out.x = base.x;
    out.series = Plotter::series(base.series);
    out.reserved = base.reserved;
    out.detail = plots
        .map(|p| DetailSeries {
            x: p.x,
            series: Plotter::series(p.series),
            reserved: p.reserved,
        })
        .collect();
    out.peak_x = x_of(shown as usize);
    out.oom_x = tl
        .replay
        .ooms
        .iter()
        .map(|&k| x_of(k as usize + 1))
        .collect();
    (out, base.at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detail_levels_nest_around_the_instant_and_stay_in_the_run() {
        // A million positions, 2000 points: two levels of 62,500 and 3,906.
        let spans = plot_spans(1_000_000, 2000, 500_000);
        assert_eq!(
            spans,
            [
                (0, 1_000_000, 500),
                (468_750, 531_250, 32),
                (498_047, 501_953, 2)
            ]
        );
        // At the start of the run the stretches start at 0; at its end
        // they end there.
        assert_eq!(plot_spans(1_000_000, 2000, 10)[1], (0, 62_500, 32));
        assert_eq!(plot_spans(1_000_000, 2000, 999_999)[2].1, 1_000_000);
        // No finer level where the whole run's points are its positions,
        // nor without plots.
        assert_eq!(plot_spans(1500, 2000, 700).len(), 1);
        assert_eq!(plot_spans(1_000_000, 0, 700).len(), 1);
        // A level stops once one before it has a position per point.
        assert_eq!(plot_spans(30_000, 2000, 20_000).len(), 2);
        assert_eq!(plot_spans(40_000, 2000, 20_000).len(), 3);
    }
}
