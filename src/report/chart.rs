//! The HTML report's chart: an inline SVG of memory by category over time
//! (stacked areas), reserved memory, the peak and the OOMs.
//!
//! What it promises, each checked in headless Chromium by
//! `tests/suite/html_chart.rs`:
//!
//! - Memory is a step function (it changes at events and holds between
//!   them), so areas and the reserved line are drawn as steps: no ramp that
//!   never happened.
//! - Every label lies inside the picture, and no two labels overlap: ticks
//!   stop at the last point, the peak and OOM labels take two rows above
//!   the plot.
//! - A long idle stretch (a gap between plotted points over 1/8 of the span
//!   and 20× the typical one) is drawn [`GAP_W`] wide, shaded and labelled
//!   with its length, so the activity around it gets the width.

use std::fmt::Write;

use super::markup::{colour, escape};
use crate::model::Category;
use crate::schema::DeviceReport;
use crate::units::{human_bytes as h, human_duration_us};

// Geometry (SVG user units; the SVG scales down to the page width).
const W: f64 = 1000.0;
const H: f64 = 374.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
/// The plot starts here; the two label rows are above it.
const TOP: f64 = 40.0;
const BOTTOM: f64 = 44.0;
/// Baselines of the two label rows above the plot.
const ROWS: [f64; 2] = [14.0, 30.0];
/// Width of a compressed idle stretch.
const GAP_W: f64 = 24.0;
/// Fewest units between two x tick labels.
const MIN_TICK_GAP: f64 = 56.0;
/// Most idle stretches compressed (the longest ones).
const MAX_GAPS: usize = 8;

/// Width of a label of `chars` characters in the chart's 11 px font: an
/// upper bound (digits and lower case are narrower), so boxes kept apart
/// by it do not touch.
fn text_width(text: &str) -> f64 {
    text.chars().count() as f64 * 7.0
}

/// Where an x value (µs since the first event, or an event index) is drawn:
/// linear, except across the compressed idle stretches.
struct XAxis {
    /// Pieces of the axis in order: (x from, x to, drawn from, drawn to, idle).
    pieces: Vec<(f64, f64, f64, f64, bool)>,
}

impl XAxis {
    /// The axis for `xs` (in order); `time` allows idle stretches.
    fn new(xs: &[f64], time: bool) -> XAxis {
        let (lo, hi) = (xs[0], xs[xs.len() - 1]);
        let span = hi - lo;
        let sorted = xs.windows(2).all(|w| w[1] >= w[0]);
        let mut gaps: Vec<(f64, f64)> = Vec::new();
        if time && sorted && xs.len() >= 3 {
            let steps: Vec<f64> = xs.windows(2).map(|w| w[1] - w[0]).collect();
            let mut sorted_steps = steps.clone();
            sorted_steps.sort_by(f64::total_cmp);
            let typical = sorted_steps[sorted_steps.len() / 2];
            let idle = |d: f64| d > span / 8.0 && d > 20.0 * typical;
            let mut candidates: Vec<(f64, usize)> = steps
                .iter()
                .enumerate()
                .filter(|(_, d)| idle(**d))
                .map(|(i, d)| (*d, i))
                .collect();
            candidates.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            candidates.truncate(MAX_GAPS);
            candidates.sort_by_key(|c| c.1);
            gaps = candidates
                .iter()
                .map(|&(_, i)| (xs[i], xs[i + 1]))
                .collect();
        }
        // Active stretches between the gaps, each drawn in proportion to
        // its length (a lone point gets 1% of the active time, to be seen).
        let mut active = Vec::new();
        let mut from = lo;
        for &(a, b) in &gaps {
            active.push((from, a));
            from = b;
        }
        active.push((from, hi));
        let total: f64 = active.iter().map(|(a, b)| b - a).sum();
        let weight = |(a, b): (f64, f64)| {
            if total > 0.0 {
                (b - a).max(total / 100.0)
            } else {
                1.0
            }
        };
        let weights: f64 = active.iter().map(|&p| weight(p)).sum();
        let active_px = W - LEFT - RIGHT - GAP_W * gaps.len() as f64;
        let mut pieces = Vec::new();
        let mut px = LEFT;
        for (k, &(a, b)) in active.iter().enumerate() {
            let w = weight((a, b)) / weights * active_px;
            pieces.push((a, b, px, px + w, false));
            px += w;
            if let Some(&(ga, gb)) = gaps.get(k) {
                pieces.push((ga, gb, px, px + GAP_W, true));
                px += GAP_W;
            }
        }
        XAxis { pieces }
    }

    fn px(&self, x: f64) -> f64 {
        let piece = self
            .pieces
            .iter()
            .find(|p| x <= p.1)
            .or(self.pieces.last())
            .expect("an axis has a piece");
        let (a, b, pa, pb, _) = *piece;
        if b > a {
            pa + (x - a) / (b - a) * (pb - pa)
        } else {
            pa
        }
    }

    fn gaps(&self) -> impl Iterator<Item = &(f64, f64, f64, f64, bool)> {
        self.pieces.iter().filter(|p| p.4)
    }

    /// Tick values (`x_min + k·step`) inside the active stretches, at
    /// least [`MIN_TICK_GAP`] apart on the page.
    ///
    /// Bounded for any step: a piece holds at most one kept tick per
    /// [`MIN_TICK_GAP`] of its width, so where the step would put far more
    /// candidates in it (a degenerate axis whose active stretches have no
    /// length gets the smallest step there is) only every so many are
    /// tried, and a piece whose first index does not fit a `u64` has none.
    fn ticks(&self, x_min: f64, step: f64) -> Vec<f64> {
        let mut out: Vec<f64> = Vec::new();
        if !(step > 0.0 && step.is_finite()) {
            return out;
        }
        let mut last_px = f64::NEG_INFINITY;
        let eps = step * 1e-9;
        for &(a, b, pa, pb, idle) in &self.pieces {
            if idle {
                continue;
            }
            let first = ((a - x_min) / step - 1e-9).ceil().max(0.0);
            let candidates = ((b + eps - x_min) / step).floor() - first + 1.0;
            if !(first < u64::MAX as f64 && candidates.is_finite()) {
                continue;
            }
            let room = ((pb - pa) / MIN_TICK_GAP).floor().max(0.0) + 1.0;
            let stride = (candidates / (4.0 * room)).ceil().max(1.0) as u64;
            let mut k = first as u64;
            loop {
                let v = k as f64 * step;
                if x_min + v > b + eps {
                    break;
                }
                let px = self.px(x_min + v);
                if px - last_px >= MIN_TICK_GAP {
                    out.push(v);
                    last_px = px;
                }
                let Some(next) = k.checked_add(stride) else {
                    break;
                };
                k = next;
            }
        }
        out
    }
}

/// The stacked-area chart and its legend. Layers are drawn as cumulative
/// areas from the top layer down, each from zero to its running total, so a
/// layer is one edge (half the points of a band) and the picture is the same.
pub(crate) fn render(out: &mut String, d: &DeviceReport) {
    let t = &d.timeline;
    let totals: Vec<u64> = (0..t.x.len())
        .map(|i| t.series.values().map(|s| s[i]).sum())
        .collect();
    let y_top = totals
        .iter()
        .copied()
        .chain(t.reserved.iter().flatten().copied())
        .max()
        .unwrap_or(0);
    let (x_min, x_max) = match (t.x.first(), t.x.last()) {
        (Some(a), Some(b)) => (*a, *b),
        _ => (0.0, 0.0),
    };
    if t.x.len() < 2 || x_max <= x_min || y_top == 0 {
        out.push_str(
            "<p class=\"note\">No allocation history to plot (the trace holds a single instant).",
        );
        if d.segments.is_some() {
            let _ = write!(
                out,
                " The segment map under <a href=\"#{}\">Allocator segments</a> shows the allocator's state.",
                super::allocator::anchor(d)
            );
        }
        out.push_str("</p>\n");
        return;
    }
    let time = t.x_unit == "time_us";
    let axis = XAxis::new(&t.x, time);
    let y = YAxis::new(y_top, H - BOTTOM, TOP);
    let y_max = y.max;
    let (x_label, x_unit, x_div) = if time {
        let (u, div) = time_unit(x_max - x_min);
        ("time since the first event", u, div)
    } else {
        ("event index", "", 1.0)
    };
    let sx = |x: f64| axis.px(x);
    let sy = |v: f64| y.px(v);

    let _ = writeln!(
        out,
        "<figure class=\"chart\">\n<svg viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"Memory on {} by category over time\">",
        escape(&d.device)
    );
    // Grid and y axis.
    y.draw_grid(out);
    // Idle stretches, under the areas.
    for &(a, b, pa, pb, _) in axis.gaps() {
        let _ = writeln!(
            out,
            "<rect class=\"gap\" x=\"{pa:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{:.1}\"><title>{} with almost no events, drawn narrow</title></rect>",
            pb - pa,
            H - BOTTOM - TOP,
            human_duration_us(b - a)
        );
    }
    // Areas, top layer first; each value holds until the next point.
    let xs: Vec<f64> = t.x.iter().map(|x| sx(*x)).collect();
    let layers: Vec<(&Category, &Vec<u64>)> = t.series.iter().collect();
    let mut cumulative = totals.clone();
    for (c, values) in layers.iter().rev() {
        let mut pts = vec![(xs[0], sy(0.0))];
        pts.extend(steps(&xs, cumulative.iter().map(|y| sy(*y as f64))));
        pts.push((xs[xs.len() - 1], sy(0.0)));
        let _ = writeln!(
            out,
            "<polygon points=\"{}\" fill=\"{}\"><title>{c}</title></polygon>",
            points(&pts),
            colour(**c)
        );
        for (sum, v) in cumulative.iter_mut().zip(values.iter()) {
            *sum -= v;
        }
    }
    if let Some(r) = &t.reserved {
        let pts = steps(&xs, r.iter().map(|y| sy(*y as f64)));
        let _ = writeln!(
            out,
            "<polyline class=\"reserved\" points=\"{}\"><title>reserved</title></polyline>",
            points(&pts)
        );
    }
    if let Some(w) = d.what_if.as_ref().filter(|w| w.series.len() == xs.len()) {
        let pts = steps(&xs, w.series.iter().map(|y| sy(*y as f64)));
        let _ = writeln!(
            out,
            "<polyline class=\"what-if\" points=\"{}\"><title>allocated with {}</title></polyline>",
            points(&pts),
            escape(&w.levers.join(", "))
        );
    }
    // X axis, its ticks, and a break mark and the length of each idle stretch.
    let _ = writeln!(
        out,
        "<line class=\"axis\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/>",
        W - RIGHT,
        H - BOTTOM,
        H - BOTTOM
    );
    let step = if time {
        nice_step(active_span(&axis) / x_div)
    } else {
        nice_step((x_max - x_min) / x_div).max(1.0)
    };
    let x_ticks = axis.ticks(x_min, step * x_div);
    for v in &x_ticks {
        let x = sx(x_min + v);
        let label = format!(
            "{}{}",
            tick_label(v / x_div, &[0.0, step]),
            if x_unit.is_empty() {
                String::new()
            } else {
                format!(" {x_unit}")
            }
        );
        let (anchor, tx) = inside(x, text_width(&label));
        let _ = writeln!(
            out,
            "<line class=\"axis\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{label}</text>",
            H - BOTTOM,
            H - BOTTOM + 5.0,
            H - BOTTOM + 18.0,
        );
    }
    for &(a, b, pa, pb, _) in axis.gaps() {
        let (cx, cy, y) = ((pa + pb) / 2.0, (TOP + H - BOTTOM) / 2.0, H - BOTTOM);
        let _ = writeln!(
            out,
            "<path class=\"brk\" d=\"M{:.1},{:.1}L{:.1},{:.1}M{:.1},{:.1}L{:.1},{:.1}\"/><text class=\"gap\" x=\"{cx:.1}\" y=\"{cy:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 {cx:.1} {cy:.1})\">{} gap</text>",
            pa - 3.0,
            y + 5.0,
            pa + 3.0,
            y - 5.0,
            pb - 3.0,
            y + 5.0,
            pb + 3.0,
            y - 5.0,
            human_duration_us(b - a)
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{x_label}</text>",
        (LEFT + W - RIGHT) / 2.0,
        H - 6.0
    );
    markers(
        out,
        d,
        &axis,
        sy(d.peak.allocated_bytes.min(y_max as u64) as f64),
    );
    out.push_str("</svg>\n<figcaption>");
    for c in t.series.keys() {
        let _ = write!(
            out,
            "<span><span class=\"sw\" style=\"background:{}\"></span>{c}</span>",
            colour(*c)
        );
    }
    if t.reserved.is_some() {
        out.push_str("<span><span class=\"ln reserved\"></span>reserved</span>");
    }
    if let Some(w) = d.what_if.as_ref().filter(|w| w.series.len() == t.x.len()) {
        let _ = write!(
            out,
            "<span><span class=\"ln\" style=\"border-top-color:#0a7d2c\"></span>allocated with {}</span>",
            escape(&w.levers.join(", "))
        );
    }
    out.push_str("<span><span class=\"ln\"></span>peak</span>");
    if !t.oom_x.is_empty() {
        out.push_str("<span><span class=\"ln oom\"></span>OOM</span>");
    }
    let gaps = if axis.gaps().next().is_some() {
        " Shaded stretches had almost no events and are drawn narrow; their length is written in them."
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "</figcaption>\n<p class=\"note\">Allocated memory stacked by category; each of the {} points is the highest total in its slice of the trace, so the peak is kept.{gaps}</p>\n</figure>",
        t.x.len()
    );
}

/// The active (not compressed) length of the axis.
fn active_span(axis: &XAxis) -> f64 {
    axis.pieces
        .iter()
        .filter(|p| !p.4)
        .map(|p| p.1 - p.0)
        .sum::<f64>()
        .max(f64::MIN_POSITIVE)
}

/// How to anchor a label of `width` centred at `x` so that it stays inside
/// the picture: (`text-anchor`, x to write).
fn inside(x: f64, width: f64) -> (&'static str, f64) {
    if x + width / 2.0 > W - 2.0 {
        ("end", x.min(W - 2.0))
    } else if x - width / 2.0 < 2.0 {
        ("start", x.max(2.0))
    } else {
        ("middle", x)
    }
}

/// The peak (line, dot, label on the first row) and the OOMs (lines; one
/// label, on the first row when it clears the peak's label, else on the
/// second, on the side away from the peak line).
fn markers(out: &mut String, d: &DeviceReport, axis: &XAxis, peak_y: f64) {
    let t = &d.timeline;
    let px = axis.px(t.peak_x);
    let peak_label = format!("peak {}", h(d.peak.allocated_bytes));
    let peak_w = text_width(&peak_label);
    let (anchor, tx, peak_box) = if px + 6.0 + peak_w > W - 2.0 {
        ("end", px - 6.0, (px - 6.0 - peak_w, px))
    } else {
        ("start", px + 6.0, (px, px + 6.0 + peak_w))
    };
    for (k, ox) in t.oom_x.iter().take(50).enumerate() {
        let x = axis.px(*ox);
        let mut y1 = TOP;
        let mut label = String::new();
        if k == 0 {
            let text = format!("OOM ({})", t.oom_x.len());
            let w = text_width(&text);
            let right = (x, x + 5.0 + w);
            let left = (x - 5.0 - w, x);
            let fits = |b: (f64, f64)| b.0 >= 2.0 && b.1 <= W - 2.0;
            let clear = |b: (f64, f64)| b.1 + 6.0 < peak_box.0 || b.0 > peak_box.1 + 6.0;
            let (row, (lo, _)) = if fits(right) && clear(right) {
                (0, right)
            } else if fits(left) && clear(left) {
                (0, left)
            } else if (x >= px && fits(right)) || !fits(left) {
                (1, right)
            } else {
                (1, left)
            };
            let (a, lx) = if lo < x {
                ("end", x - 5.0)
            } else {
                ("start", x + 5.0)
            };
            y1 = ROWS[row] - 10.0;
            label = format!(
                "<text class=\"oom\" x=\"{lx:.1}\" y=\"{:.1}\" text-anchor=\"{a}\">{text}</text>",
                ROWS[row]
            );
        }
        let _ = writeln!(
            out,
            "<line class=\"oom\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{y1:.1}\" y2=\"{:.1}\"><title>OOM</title></line>{label}",
            H - BOTTOM
        );
    }
    let _ = writeln!(
        out,
        "<line class=\"peak\" x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{:.1}\" y2=\"{:.1}\"/><circle cx=\"{px:.1}\" cy=\"{peak_y:.1}\" r=\"3.5\" fill=\"#000\"/><text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" font-weight=\"600\">{peak_label}</text>",
        ROWS[0] - 10.0,
        H - BOTTOM,
        ROWS[0]
    );
}

/// The corners of a step line through `(xs[i], ys[i])`: each value holds
/// until the next x.
fn steps(xs: &[f64], ys: impl Iterator<Item = f64>) -> Vec<(f64, f64)> {
    let mut pts = Vec::with_capacity(xs.len() * 2);
    for (i, y) in ys.enumerate() {
        pts.push((xs[i], y));
        if let Some(next) = xs.get(i + 1) {
            pts.push((*next, y));
        }
    }
    pts
}

/// SVG `points` at 0.1 precision, leaving out the middle of runs at the same
/// height (flat stretches are common: parameters, reserved memory) and
/// repeats of the same point, which draws the same line with far fewer
/// points.
/// The byte axis both charts share (this one and `memcut diff`'s): unit,
/// round ticks and the scale from bytes to the plot's y (each chart gives
/// its own plot area; both share the width and the left and right margins).
pub(crate) struct YAxis {
    unit: &'static str,
    div: f64,
    ticks: Vec<f64>,
    max: f64,
    /// The y of 0 bytes and of the axis' top tick.
    base: f64,
    top: f64,
}

impl YAxis {
    pub(crate) fn new(top_bytes: u64, base: f64, top: f64) -> YAxis {
        let (unit, div) = byte_unit(top_bytes);
        let ticks = nice_ticks(top_bytes as f64 / div);
        let max = ticks.last().copied().unwrap_or(1.0).max(1e-9) * div;
        YAxis {
            unit,
            div,
            ticks,
            max,
            base,
            top,
        }
    }

    /// The plot's y for a number of bytes.
    pub(crate) fn px(&self, bytes: f64) -> f64 {
        self.base - bytes / self.max * (self.base - self.top)
    }

    /// A grid line and a label per tick.
    pub(crate) fn draw_grid(&self, out: &mut String) {
        let unit = self.unit;
        for v in &self.ticks {
            let y = self.px(v * self.div);
            let _ = writeln!(
                out,
                "<line class=\"grid\" x1=\"{LEFT}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{} {unit}</text>",
                W - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                tick_label(*v, &self.ticks)
            );
        }
    }
}

pub(crate) fn points(pts: &[(f64, f64)]) -> String {
    let mut rounded: Vec<(i64, i64)> = pts
        .iter()
        .map(|(x, y)| ((x * 10.0).round() as i64, (y * 10.0).round() as i64))
        .collect();
    rounded.dedup();
    let mut out = String::with_capacity(rounded.len() * 12);
    for (i, &(x, y)) in rounded.iter().enumerate() {
        // The middle of three points on one horizontal or vertical line,
        // between the other two: the line is the same without it.
        let inner = i > 0 && i + 1 < rounded.len();
        let (p, n) = if inner {
            (rounded[i - 1], rounded[i + 1])
        } else {
            ((0, 0), (0, 0))
        };
        let between = |a: i64, v: i64, b: i64| (a <= v && v <= b) || (a >= v && v >= b);
        let flat = inner && p.1 == y && n.1 == y;
        let upright = inner && p.0 == x && n.0 == x && between(p.1, y, n.1);
        if flat || upright {
            continue;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        let _ = write!(out, "{},{}", Tenths(x), Tenths(y));
    }
    out
}

/// A number of tenths written as a decimal (`123` → `12.3`, `120` → `12`).
struct Tenths(i64);

impl std::fmt::Display for Tenths {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sign, v) = if self.0 < 0 {
            ("-", -self.0)
        } else {
            ("", self.0)
        };
        match v % 10 {
            0 => write!(f, "{sign}{}", v / 10),
            d => write!(f, "{sign}{}.{d}", v / 10),
        }
    }
}

/// The binary unit that makes `max` read between 1 and 1024.
pub(crate) fn byte_unit(max: u64) -> (&'static str, f64) {
    const K: f64 = 1024.0;
    let m = max as f64;
    if m >= K * K * K {
        ("GiB", K * K * K)
    } else if m >= K * K {
        ("MiB", K * K)
    } else if m >= K {
        ("KiB", K)
    } else {
        ("B", 1.0)
    }
}

/// The time unit for a span of `span_us` microseconds.
fn time_unit(span_us: f64) -> (&'static str, f64) {
    if span_us >= 1e6 {
        ("s", 1e6)
    } else if span_us >= 1e3 {
        ("ms", 1e3)
    } else {
        ("µs", 1.0)
    }
}

/// The 1-2-5 step that cuts `max` into 5 to 10 parts.
fn nice_step(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// Ticks 0, step, 2·step, … covering `max` with a 1-2-5 step (4 to 10 ticks).
pub(crate) fn nice_ticks(max: f64) -> Vec<f64> {
    if max <= 0.0 || !max.is_finite() {
        return vec![0.0, 1.0];
    }
    let step = nice_step(max);
    let n = (max / step - 1e-9).ceil().max(1.0) as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

/// A tick value with as many decimals as its step needs.
pub(crate) fn tick_label(v: f64, ticks: &[f64]) -> String {
    let step = ticks.get(1).copied().unwrap_or(1.0);
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    format!("{v:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::{nice_ticks, points, steps, tick_label, XAxis, GAP_W, LEFT, RIGHT, W};

    #[test]
    fn ticks_cover_the_maximum_with_round_steps() {
        assert_eq!(nice_ticks(18.8), vec![0.0, 5.0, 10.0, 15.0, 20.0]);
        assert_eq!(
            nice_ticks(4276.0),
            vec![0.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0]
        );
        assert_eq!(
            nice_ticks(1.0),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        let t = nice_ticks(0.37);
        assert_eq!(tick_label(t[1], &t), "0.1");
        assert_eq!(tick_label(20.0, &nice_ticks(18.8)), "20");
    }

    /// The silmont trace's shape: one event, 800 ms of nothing, then a
    /// burst: the burst gets nearly the whole width.
    #[test]
    fn an_idle_stretch_is_drawn_narrow() {
        let mut xs = vec![0.0];
        xs.extend((0..100).map(|k| 800_000.0 + k as f64 * 2000.0));
        let axis = XAxis::new(&xs, true);
        assert_eq!(axis.gaps().count(), 1);
        let burst = axis.px(xs[100]) - axis.px(xs[1]);
        assert!(burst > 0.9 * (W - LEFT - RIGHT - GAP_W), "{burst}");
        assert_eq!(axis.px(xs[100]), W - RIGHT);
        // Evenly spaced points: nothing to compress; event indices never.
        let even: Vec<f64> = (0..50).map(|k| k as f64 * 10.0).collect();
        assert_eq!(XAxis::new(&even, true).gaps().count(), 0);
        assert_eq!(XAxis::new(&xs, false).gaps().count(), 0);
        // Ticks stop at the last point and keep apart.
        let ticks = axis.ticks(0.0, 20_000.0);
        assert!(ticks.iter().all(|t| *t <= xs[100]), "{ticks:?}");
        let px: Vec<f64> = ticks.iter().map(|t| axis.px(*t)).collect();
        assert!(px.windows(2).all(|w| w[1] - w[0] >= 56.0), "{px:?}");
    }

    /// Found by the `chrome` fuzz target: a trace whose active stretches
    /// have no length (points only at the ends of idle stretches) gets the
    /// smallest step there is, and the tick loop counted up from an index
    /// it could never reach an end from (a hang in release builds, an
    /// overflow panic in debug ones). Ticks now end whatever the step.
    #[test]
    fn ticks_end_for_any_step() {
        let xs = [0.0, 0.0, 0.0, 5.0e9, 5.0e9, 5.0e9, 5.0e9 + 1.0];
        let axis = XAxis::new(&xs, true);
        assert!(axis.gaps().count() >= 1);
        for step in [
            f64::MIN_POSITIVE,
            1e-300,
            1e-9,
            0.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
        ] {
            let ticks = axis.ticks(0.0, step);
            assert!(ticks.len() <= 100, "{step}: {} ticks", ticks.len());
        }
        // A piece far from `x_min` at a tiny step: the first index does not
        // fit a u64.
        let far = XAxis {
            pieces: vec![(1e300, 2e300, LEFT, W - RIGHT, false)],
        };
        assert!(far.ticks(0.0, 1e-300).len() <= 100);
        // An ordinary axis keeps its ticks.
        let even: Vec<f64> = (0..50).map(|k| k as f64 * 10.0).collect();
        let ticks = XAxis::new(&even, true).ticks(0.0, 100.0);
        assert_eq!(ticks, [0.0, 100.0, 200.0, 300.0, 400.0]);
    }

    #[test]
    fn lines_are_steps() {
        let pts = steps(&[0.0, 1.0, 2.0], [5.0, 7.0, 6.0].into_iter());
        assert_eq!(
            pts,
            [(0.0, 5.0), (1.0, 5.0), (1.0, 7.0), (2.0, 7.0), (2.0, 6.0)]
        );
        assert_eq!(points(&pts), "0,5 1,5 1,7 2,7 2,6");
    }
}
