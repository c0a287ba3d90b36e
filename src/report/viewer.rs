//! The HTML report's interactive timeline: memory by category over time
//! (stacked, with reserved memory, the peak, the OOMs and a what-if's curve)
//! and below it the largest allocations, each a band of its own. Zoom with
//! the wheel or the buttons, pan by dragging, double-click to reset; hover a
//! band for its size, category, rule, life and stack; click an instant for
//! what was live there, by category and by site.
//!
//! Everything it draws is in the report (`timeline`, `timeline.bands`,
//! `stacks`), so a saved JSON renders the same page; the data sits in the
//! page as JSON and one inline script draws it on canvases. Without script
//! (a mail client, a locked-down viewer) the static SVG chart stays, and it
//! is the one a printout shows.

use std::fmt::Write;

use serde_json::json;

use super::markup::colour;
use crate::schema::DeviceReport;

/// The viewer of one device: its controls, canvases and data. `n` numbers
/// the viewers of a page.
pub fn html(out: &mut String, d: &DeviceReport, n: usize) {
    let t = &d.timeline;
    if t.x.len() < 2 {
        return;
    }
    // The categories of every level, each level's series in their order
    // (zeros where a level has none of one).
    let mut present: Vec<crate::model::Category> = t
        .series
        .keys()
        .chain(t.detail.iter().flat_map(|d| d.series.keys()))
        .copied()
        .collect();
    present.sort();
    present.dedup();
    let cats: Vec<&str> = present.iter().map(|c| c.as_str()).collect();
    let colours: Vec<&str> = present.iter().map(|c| colour(*c)).collect();
    let aligned = |series: &std::collections::BTreeMap<crate::model::Category, Vec<u64>>,
                   n: usize| {
        present
            .iter()
            .map(|c| series.get(c).cloned().unwrap_or_else(|| vec![0; n]))
            .collect::<Vec<Vec<u64>>>()
    };
    let series = aligned(&t.series, t.x.len());
    let detail: Vec<serde_json::Value> = t
        .detail
        .iter()
        .map(|d| json!({"x": d.x, "series": aligned(&d.series, d.x.len()), "reserved": d.reserved}))
        .collect();
    let bands: Vec<serde_json::Value> = t
        .bands
        .iter()
        .map(|b| {
            json!([
                b.x0,
                b.x1,
                b.bytes,
                b.category.as_str(),
                b.rule,
                b.site,
                b.stack,
                b.alloc.map(|e| e.0),
                b.free.map(|e| e.0),
                b.level
            ])
        })
        .collect();
    let what_if = d
        .what_if
        .as_ref()
        .filter(|w| w.series.len() == t.x.len())
        .map(|w| (&w.series, w.levers.join(", ")));
    // The next step predicted from a first step's recording.
    let next_step = d
        .next_step
        .as_ref()
        .filter(|n| n.series.len() == t.x.len())
        .map(|n| &n.series);
    // Each finding's waste: what lies between the recorded curve and the
    // curve with its fix.
    let drawn: Vec<&crate::schema::Finding> = d
        .findings
        .iter()
        .filter(|f| f.series.len() == t.x.len())
        .collect();
    let findings: Vec<serde_json::Value> = drawn
        .iter()
        .map(|f| json!({"kind": f.kind.as_str(), "fix": f.fix, "series": f.series}))
        .collect();
    // The allocator's segments at some points, for a click.
    let segments = t
        .segments
        .as_ref()
        .filter(|s| !s.frames.is_empty())
        .map(|s| {
            json!({
                "cats": s.categories.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                "colours": s.categories.iter().map(|c| colour(*c)).collect::<Vec<_>>(),
                "frames": s.frames,
            })
        });
    let data = json!({
        "unit": t.x_unit,
        "x": t.x,
        "cats": cats,
        "colours": colours,
        "series": series,
        "reserved": t.reserved,
        "peak_x": t.peak_x,
        "peak_bytes": d.peak.allocated_bytes,
        "oom_x": t.oom_x,
        "what_if": what_if.as_ref().map(|w| w.0),
        "next_step": next_step,
        "what_if_levers": what_if.as_ref().map(|w| &w.1),
        "bands": bands,
        "findings": findings,
        "finding_colours": FINDING_COLOURS,
        "frames": d.stacks.frames,
        "internal": d.stacks.internal,
        "stacks": d.stacks.stacks,
        "segments": segments,
        "detail": detail,
    });
    let mut legend = String::new();
    for c in &present {
        let _ = write!(
            legend,
            "<span><span class=\"sw\" style=\"background:{}\"></span>{c}</span>",
            colour(*c)
        );
    }
    if t.reserved.is_some() {
        legend.push_str("<span><span class=\"ln reserved\"></span>reserved</span>");
    }
    if let Some((_, levers)) = &what_if {
        let _ = write!(
            legend,
            "<span><span class=\"ln\" style=\"border-top-color:#0a7d2c\"></span>what if: {}</span>",
            super::markup::escape(levers)
        );
    }
    if next_step.is_some() {
        legend.push_str(
            "<span><span class=\"ln\" style=\"border-top-color:#c25400;border-top-style:dashed\"></span>next step (predicted)</span>",
        );
    }
    for (k, f) in drawn.iter().enumerate() {
        let _ = write!(
            legend,
            "<span><span class=\"sw\" style=\"background:{}\"></span>{} (what {} frees)</span>",
            FINDING_COLOURS[k % FINDING_COLOURS.len()],
            f.kind.as_str(),
            super::markup::escape(&f.fix)
        );
    }
    legend.push_str("<span><span class=\"ln\"></span>peak</span>");
    if !t.oom_x.is_empty() {
        legend.push_str("<span><span class=\"ln oom\"></span>OOM</span>");
    }
    // No `<`, `>` or `&` inside the <script> element: trace strings cannot
    // end it or open a comment (JSON reads the escapes back).
    let data = data
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026");
    let _ = writeln!(
        out,
        "<section class=\"viewer\" id=\"viewer-{n}\" aria-label=\"Interactive timeline\" hidden>\n\
         <div class=\"controls\"><button type=\"button\" data-zoom=\"in\">Zoom in</button> \
         <button type=\"button\" data-zoom=\"out\">Zoom out</button> \
         <button type=\"button\" data-zoom=\"reset\">Reset</button> \
         <span class=\"range\" aria-live=\"polite\"></span></div>\n\
         <canvas class=\"area\" tabindex=\"0\" role=\"img\" aria-label=\"Memory by category over time: wheel or +/- to zoom, arrows or drag to pan, 0 to reset, click an instant for what was live there\"></canvas>\n\
         <p class=\"legend\">{legend}</p>\n\
         <canvas class=\"bands\" tabindex=\"0\" role=\"img\" aria-label=\"The largest allocations over time: hover one for its stack\"></canvas>\n\
         <div class=\"tip\" role=\"tooltip\" hidden></div>\n\
         <div class=\"live\" aria-live=\"polite\"><p class=\"note\">Click an instant on the chart to list what was live there{}.</p></div>\n{}\
         <script type=\"application/json\" class=\"memcut-data\">{data}</script>\n</section>",
        if segments.is_some() {
            " and the allocator's segments"
        } else {
            ""
        },
        if segments.is_some() {
            "<div class=\"segmap\" hidden><p class=\"seg-head\"></p><canvas class=\"segmap\" tabindex=\"0\" role=\"img\"></canvas><p class=\"legend seg-legend\"></p><p class=\"note seg-rest\"></p></div>\n"
        } else {
            ""
        }
    );
}

/// Shades of the findings' waste (translucent over the categories).
const FINDING_COLOURS: [&str; 3] = [
    "rgba(106,27,154,.45)",
    "rgba(183,28,28,.45)",
    "rgba(0,96,100,.45)",
];

/// The viewer's style.
pub const STYLE: &str = "\
.viewer{position:relative;margin:1rem 0}.viewer canvas{display:block;width:100%;border:1px solid var(--line);border-radius:3px;margin:.3rem 0;cursor:crosshair}
.viewer canvas.area{height:300px}.viewer canvas.bands{height:160px}.viewer canvas:focus{outline:2px solid #4e79a7}
.viewer .controls button{font:inherit;font-size:.85rem;padding:.15rem .6rem}.viewer .range{color:var(--muted);font-size:.85rem;margin-left:.6rem}
.viewer .tip{position:absolute;z-index:2;max-width:560px;background:#fff;border:1px solid #888;border-radius:4px;padding:.4rem .6rem;font-size:.8rem;box-shadow:0 2px 8px rgba(0,0,0,.2);pointer-events:none}
.viewer .tip ol{margin:.2rem 0 0;padding-left:1.6rem}.viewer .tip li.internal{color:#9aa0a6}.viewer .tip li.user{font-weight:600}
.viewer .live table{font-size:.85rem}.viewer canvas.segmap{cursor:default}.viewer .seg-head{font-size:.88rem;margin:.6rem 0 .2rem}.viewer .legend{display:flex;flex-wrap:wrap;gap:.3rem 1.1rem;font-size:.88rem;margin:.2rem 0}
@media print{.viewer{display:none}}";

/// The script that draws every viewer of the page.
pub const SCRIPT: &str = r#"(function () {
'use strict';
const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
function fmtB(b) { let i = 0; while (b >= 1024 && i < 4) { b /= 1024; i++; } return (i ? b.toFixed(2) : String(b)) + ' ' + units[i]; }
function esc(s) { return String(s).replace(/[&<>"']/g, c => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'})[c]); }
function init(root) {
  const D = JSON.parse(root.querySelector('script.memcut-data').textContent);
  const area = root.querySelector('canvas.area'), lanes = root.querySelector('canvas.bands');
  const tip = root.querySelector('.tip'), live = root.querySelector('.live'), rangeText = root.querySelector('.range');
  const C = D.series.length, time = D.unit === 'time_us';
  const fmtX = x => !time ? 'event ' + Math.round(x) : Math.abs(x) >= 1e6 ? (x / 1e6).toFixed(3) + ' s' : Math.abs(x) >= 1e3 ? (x / 1e3).toFixed(2) + ' ms' : x.toFixed(1) + ' µs';
  const full = [D.x[0], D.x[D.x.length - 1] > D.x[0] ? D.x[D.x.length - 1] : D.x[0] + 1];
  let lo = full[0], hi = full[1];
  // The whole run's points, then finer ones around the reported instant
  // (timeline.detail): a zoom inside a finer level's stretch draws it.
  const levels = [{x: D.x, series: D.series, reserved: D.reserved}].concat(D.detail || []).map((l, k) => {
    const n = l.x.length, total = new Float64Array(n), cum = l.series.map(() => new Float64Array(n));
    for (let i = 0; i < n; i++) { let s = 0; for (let c = 0; c < C; c++) { s += l.series[c][i]; cum[c][i] = s; } total[i] = s; }
    return {k: k, x: l.x, series: l.series, reserved: l.reserved, n: n, total: total, cum: cum, span: [l.x[0], l.x[n - 1]]};
  });
  let V = levels[0], n = V.n, total = V.total, cum = V.cum;
  function pickLevel() {
    V = levels[0];
    for (const l of levels) if (l.k > 0 && l.n > 1 && lo >= l.span[0] && hi <= l.span[1]) V = l;
    n = V.n; total = V.total; cum = V.cum;
  }
  // The byte axis fits what is in view (the whole run's highest at first).
  let ymax = 1;
  function fitY(i0, i1) {
    let m = 0;
    for (let i = i0; i <= i1; i++) {
      m = Math.max(m, total[i], V.reserved ? V.reserved[i] : 0);
      if (V.k === 0) m = Math.max(m, D.what_if ? D.what_if[i] : 0, D.next_step ? D.next_step[i] : 0);
    }
    ymax = m > 0 ? m * 1.05 : 1;
  }
  // Bands in lanes: each takes the first lane free at its start.
  const allBands = D.bands.map(b => ({x0: b[0], x1: Math.max(b[1], b[0]), bytes: b[2], cat: b[3], rule: b[4], site: b[5], stack: b[6], alloc: b[7], free: b[8], level: b[9] || 0}));
  // The bands a level draws (those chosen for it or a coarser one), in
  // lanes: each takes the first lane free at its start.
  let bands = [], laneCount = 1, lanesOf = -1;
  function layBands() {
    if (lanesOf === V.k) return;
    lanesOf = V.k; bands = allBands.filter(b => b.level <= V.k);
    const laneEnd = [];
    for (const b of bands) {
      let k = laneEnd.findIndex(e => e < b.x0);
      if (k < 0) { k = laneEnd.length; laneEnd.push(0); }
      laneEnd[k] = b.x1; b.lane = k;
    }
    laneCount = Math.max(1, laneEnd.length);
  }
  const colourOf = {};
  D.cats.forEach((c, i) => colourOf[c] = D.colours[i]);
  const L = 72, R = 14, T = 10, B = 26;
  function fit(cv) {
    const dpr = window.devicePixelRatio || 1, w = cv.clientWidth || 800, h = cv.clientHeight || 200;
    cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
    const g = cv.getContext('2d'); g.setTransform(dpr, 0, 0, dpr, 0, 0);
    return [g, w, h];
  }
  const X = (x, w) => L + (x - lo) / (hi - lo) * (w - L - R);
  const invX = (px, w) => lo + (px - L) / (w - L - R) * (hi - lo);
  const laneH = h => Math.max(2, Math.min(14, (h - T - B) / laneCount));
  // The plotted point an x falls on: the last at or before it.
  function pointAt(x, L) { const xs = (L || V).x; let a = 0, b = xs.length - 1; while (a < b) { const m = (a + b + 1) >> 1; if (xs[m] <= x) a = m; else b = m - 1; } return a; }
  // The plotted point nearest an x (a click lands between two).
  function nearest(x, L) { const xs = (L || V).x, a = pointAt(x, L); return a + 1 < xs.length && xs[a + 1] - x < x - xs[a] ? a + 1 : a; }
  // The point with the most memory within 3 pixels of a click (a pixel
  // may hold many points; a click near the peak means the peak).
  function highestNear(px, w) {
    let best = nearest(invX(px, w));
    for (let i = pointAt(invX(px - 3, w)); i < n && V.x[i] <= invX(px + 3, w); i++)
      if (V.x[i] >= invX(px - 3, w) && total[i] > total[best]) best = i;
    return best;
  }
  function xTicks(g, w, h) {
    g.fillStyle = '#333'; g.strokeStyle = '#e6e8eb'; g.font = '11px system-ui, sans-serif'; g.textAlign = 'center';
    for (let k = 0; k <= 5; k++) {
      const x = lo + (hi - lo) * k / 5, px = X(x, w);
      g.beginPath(); g.moveTo(px, T); g.lineTo(px, h - B); g.stroke();
      g.fillText(fmtX(x), Math.min(Math.max(px, L + 30), w - R - 30), h - 8);
    }
  }
  function drawArea() {
    const i0 = Math.max(0, pointAt(lo)), i1 = Math.min(n - 1, pointAt(hi) + 1);
    fitY(i0, i1);
    const [g, w, h] = fit(area), ph = h - T - B, Y = y => T + ph - y / ymax * ph;
    g.clearRect(0, 0, w, h);
    g.save(); g.beginPath(); g.rect(L, 0, w - L - R, h); g.clip();
    for (let c = C - 1; c >= 0; c--) {
      g.beginPath(); g.moveTo(X(V.x[i0], w), Y(0));
      for (let i = i0; i <= i1; i++) {
        const xa = X(V.x[i], w), xb = i < n - 1 ? X(V.x[i + 1], w) : xa;
        g.lineTo(xa, Y(cum[c][i])); g.lineTo(xb, Y(cum[c][i]));
      }
      g.lineTo(X(V.x[i1], w), Y(0)); g.closePath(); g.fillStyle = D.colours[c]; g.fill();
    }
    const line = (vals, style, dash, width) => {
      g.beginPath(); g.setLineDash(dash); g.strokeStyle = style; g.lineWidth = width;
      for (let i = i0; i <= i1; i++) {
        const xa = X(V.x[i], w), xb = i < n - 1 ? X(V.x[i + 1], w) : xa;
        if (i === i0) g.moveTo(xa, Y(vals[i])); else g.lineTo(xa, Y(vals[i]));
        g.lineTo(xb, Y(vals[i]));
      }
      g.stroke(); g.setLineDash([]); g.lineWidth = 1;
    };
    if (V.k === 0) D.findings.forEach((f, k) => {
      // The waste: from the curve with the fix up to the recorded total.
      g.beginPath();
      for (let i = i0; i <= i1; i++) {
        const xa = X(V.x[i], w), xb = i < n - 1 ? X(V.x[i + 1], w) : xa, y = Y(Math.min(f.series[i], total[i]));
        if (i === i0) g.moveTo(xa, y); else g.lineTo(xa, y);
        g.lineTo(xb, y);
      }
      for (let i = i1; i >= i0; i--) {
        const xa = X(V.x[i], w), xb = i < n - 1 ? X(V.x[i + 1], w) : xa;
        g.lineTo(xb, Y(total[i])); g.lineTo(xa, Y(total[i]));
      }
      g.closePath(); g.fillStyle = D.finding_colours[k % D.finding_colours.length]; g.fill();
    });
    if (V.reserved) line(V.reserved, '#222', [5, 3], 1.3);
    if (D.what_if && V.k === 0) line(D.what_if, '#0a7d2c', [], 2);
    if (D.next_step && V.k === 0) line(D.next_step, '#c25400', [6, 3], 2);
    const mark = (x, style, label) => {
      if (x < lo || x > hi) return;
      const px = X(x, w); g.strokeStyle = style; g.lineWidth = 1.3;
      g.beginPath(); g.moveTo(px, T); g.lineTo(px, h - B); g.stroke(); g.lineWidth = 1;
      g.fillStyle = style; g.textAlign = px > w - 120 ? 'right' : 'left'; g.font = '600 11px system-ui, sans-serif';
      g.fillText(label, px + (px > w - 120 ? -4 : 4), T + 12);
    };
    mark(D.peak_x, '#000', 'peak ' + fmtB(D.peak_bytes));
    D.oom_x.forEach((x, k) => mark(x, '#d00', 'OOM ' + k));
    g.restore();
    g.strokeStyle = '#888'; g.beginPath(); g.moveTo(L, T); g.lineTo(L, h - B); g.lineTo(w - R, h - B); g.stroke();
    g.fillStyle = '#333'; g.font = '11px system-ui, sans-serif'; g.textAlign = 'right';
    for (let k = 0; k <= 4; k++) { const y = ymax * k / 4; g.fillText(fmtB(Math.round(y)), L - 6, Y(y) + 4); }
    xTicks(g, w, h);
  }
  function drawBands() {
    const [g, w, h] = fit(lanes), lh = laneH(h);
    g.clearRect(0, 0, w, h);
    g.save(); g.beginPath(); g.rect(L, 0, w - L - R, h); g.clip();
    for (const b of bands) {
      if (b.x1 < lo || b.x0 > hi) continue;
      const a = X(b.x0, w), z = Math.max(X(b.x1, w), a + 1.5);
      g.fillStyle = colourOf[b.cat] || '#bab0ac'; g.fillRect(a, T + b.lane * lh, z - a, Math.max(1, lh - 1));
    }
    g.restore();
    g.fillStyle = '#333'; g.font = '11px system-ui, sans-serif'; g.textAlign = 'right';
    g.fillText(bands.length + ' largest', L - 6, T + 10);
    xTicks(g, w, h);
  }
  function draw() {
    pickLevel(); layBands(); drawArea(); drawBands();
    rangeText.textContent = fmtX(lo) + ' – ' + fmtX(hi) + (lo > full[0] || hi < full[1] ? ' (zoomed' + (V.k ? '; finer detail, level ' + V.k + ')' : ')') : '');
  }
  function zoom(factor, at) {
    const span = Math.min(full[1] - full[0], Math.max((hi - lo) * factor, (full[1] - full[0]) * 1e-6));
    const c = at === undefined ? (lo + hi) / 2 : at, k = (c - lo) / (hi - lo);
    lo = c - span * k; hi = lo + span; clamp(); draw();
  }
  function clamp() {
    const span = hi - lo;
    if (lo < full[0]) { lo = full[0]; hi = lo + span; }
    if (hi > full[1]) { hi = full[1]; lo = Math.max(full[0], hi - span); }
  }
  function pan(dx) { lo += dx; hi += dx; clamp(); draw(); }
  function reset() { lo = full[0]; hi = full[1]; draw(); }
  function bandAt(px, py) {
    const w = lanes.clientWidth, lh = laneH(lanes.clientHeight), x = invX(px, w), lane = Math.floor((py - T) / lh);
    const slack = (hi - lo) * 2 / (w - L - R);
    return bands.find(b => b.lane === lane && b.x0 - slack <= x && x <= b.x1 + slack);
  }
  function stackHtml(k) {
    if (k === null || k === undefined || !D.stacks[k]) return '<p class="note">no stack recorded</p>';
    const internal = new Set(D.internal);
    return '<ol>' + D.stacks[k].map(f => '<li class="' + (internal.has(f) ? 'internal' : 'user') + '">' + esc(D.frames[f]) + '</li>').join('') + '</ol>';
  }
  function showTip(html, px, py, cv) {
    tip.innerHTML = html; tip.hidden = false;
    const left = Math.min(px + 14, root.clientWidth - tip.offsetWidth - 4);
    tip.style.left = Math.max(0, left) + 'px'; tip.style.top = (cv.offsetTop + py + 14) + 'px';
  }
  const local = (e, cv) => { const r = cv.getBoundingClientRect(); return [e.clientX - r.left, e.clientY - r.top]; };
  lanes.addEventListener('mousemove', e => {
    const [px, py] = local(e, lanes), b = bandAt(px, py);
    if (!b) { tip.hidden = true; return; }
    const life = (b.alloc === null ? 'from before recording' : 'allocated at event ' + b.alloc) + ', ' + (b.free === null ? 'alive at the end' : 'freed at event ' + b.free);
    showTip('<b>' + esc(fmtB(b.bytes)) + '</b> · ' + esc(b.cat) + ' (rule ' + esc(b.rule) + ')<br>' + esc(b.site) + '<br>' + esc(fmtX(b.x0)) + ' – ' + esc(fmtX(b.x1)) + '; ' + esc(life) + stackHtml(b.stack), px, py, lanes);
  });
  area.addEventListener('mousemove', e => {
    const [px, py] = local(e, area);
    if (drag) { const dx = (drag - px) / (area.clientWidth - L - R) * (hi - lo); drag = px; pan(dx); return; }
    if (px < L) { tip.hidden = true; return; }
    const i = nearest(invX(px, area.clientWidth));
    const waste = V.k ? '' : D.findings.map(f => '<br>' + esc(f.kind) + ': ' + esc(fmtB(Math.max(0, total[i] - f.series[i]))) + ' that ' + esc(f.fix) + ' frees').join('');
    const base = V.k === 0;
    showTip(esc(fmtX(V.x[i])) + ': <b>' + esc(fmtB(total[i])) + '</b> allocated' + (D.what_if && base ? '; with ' + esc(D.what_if_levers) + ': ' + esc(fmtB(D.what_if[i])) : '') + (D.next_step && base ? '; next step (predicted): ' + esc(fmtB(D.next_step[i])) : '') + waste, px, py, area);
  });
  for (const cv of [area, lanes]) cv.addEventListener('mouseleave', () => { tip.hidden = true; drag = null; });
  let drag = null, moved = false, downAt = 0;
  area.addEventListener('mousedown', e => { drag = local(e, area)[0]; downAt = drag; moved = false; });
  area.addEventListener('mouseup', e => { const px = local(e, area)[0]; moved = Math.abs(px - downAt) > 3; drag = null; });
  area.addEventListener('click', e => { if (moved) return; const px = local(e, area)[0]; if (px >= L) showLive(highestNear(px, area.clientWidth)); });
  area.addEventListener('dblclick', reset);
  for (const cv of [area, lanes]) {
    cv.addEventListener('wheel', e => { e.preventDefault(); const px = local(e, cv)[0]; zoom(e.deltaY < 0 ? 0.8 : 1.25, invX(px, cv.clientWidth)); }, {passive: false});
    cv.addEventListener('keydown', e => {
      const step = (hi - lo) / 10;
      if (e.key === '+' || e.key === '=') zoom(0.8); else if (e.key === '-') zoom(1.25); else if (e.key === '0') reset();
      else if (e.key === 'ArrowLeft') pan(-step); else if (e.key === 'ArrowRight') pan(step);
      else if (e.key === 'Enter') showLive(nearest((lo + hi) / 2)); else return;
      e.preventDefault();
    });
  }
  root.querySelectorAll('button[data-zoom]').forEach(b => b.addEventListener('click', () => {
    const z = b.dataset.zoom; if (z === 'in') zoom(0.5); else if (z === 'out') zoom(2); else reset();
  }));
  // What was live at plotted point i: its categories' bytes (the chart's
  // own values), the bands live there by site, and the rest per category.
  function showLive(i) {
    const x = V.x[i], rows = [];
    for (let c = 0; c < C; c++) if (V.series[c][i] > 0) rows.push([D.cats[c], V.series[c][i]]);
    const inBands = {}, bySite = new Map();
    for (const b of bands) if (b.x0 <= x && x < b.x1 || (b.free === null && b.x0 <= x && x <= b.x1)) {
      inBands[b.cat] = (inBands[b.cat] || 0) + b.bytes;
      const s = bySite.get(b.site) || {bytes: 0, count: 0, cat: b.cat}; s.bytes += b.bytes; s.count++; bySite.set(b.site, s);
    }
    let h = '<h4>At ' + esc(fmtX(x)) + ': <span class="total" data-total="' + total[i] + '">' + esc(fmtB(total[i])) + '</span> allocated</h4><table><thead><tr><th>Category</th><th class="num">Bytes</th><th class="num">in the largest allocations</th></tr></thead><tbody>';
    for (const [c, v] of rows) h += '<tr><td class="cat"><span class="sw" style="background:' + colourOf[c] + '"></span>' + esc(c) + '</td><td class="num" data-bytes="' + v + '">' + esc(fmtB(v)) + '</td><td class="num">' + esc(fmtB(Math.min(v, inBands[c] || 0))) + '</td></tr>';
    h += '</tbody></table>';
    const sites = [...bySite.entries()].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, 12);
    if (sites.length) {
      h += '<table><thead><tr><th>Largest allocations live here, by site</th><th>Category</th><th class="num">Bytes</th><th class="num">Count</th></tr></thead><tbody>';
      for (const [s, v] of sites) h += '<tr><td class="site"><code>' + esc(s) + '</code></td><td>' + esc(v.cat) + '</td><td class="num">' + esc(fmtB(v.bytes)) + '</td><td class="num">' + v.count + '</td></tr>';
      h += '</tbody></table>';
    }
    live.innerHTML = h;
    if (S) showSegments(V.k ? nearest(x, levels[0]) : i, x);
  }
  // The allocator's segments at the kept state nearest plotted point i:
  // one bar per group of segments alike, blocks coloured by category,
  // pending frees lighter, free space hatched.
  const S = D.segments, segBox = root.querySelector('div.segmap'), segCanvas = S && segBox.querySelector('canvas');
  const SL = 118, SR = 8, SRow = 16, SBar = 11;
  let segFrame = null;
  function showSegments(i, clicked) {
    let f = S.frames[0];
    for (const g of S.frames) if (Math.abs(g.point - i) < Math.abs(f.point - i)) f = g;
    segFrame = f;
    const free = f.inactive_bytes ? '; largest free block ' + fmtB(f.largest_free_block_bytes) : '';
    const head = 'Segments at ' + fmtX(f.x) + (f.event_index === null ? '' : ' (event ' + f.event_index + ')') + ', ' + (f.exact ? 'as dumped' : 'an estimate rebuilt from the history') +
      (f.x !== clicked ? ', the nearest of ' + S.frames.length + ' kept states to ' + fmtX(clicked) : '') + ': ' + f.segment_count + ' segment' + (f.segment_count === 1 ? '' : 's') + ', ' +
      fmtB(f.reserved_bytes) + ' reserved = ' + fmtB(f.allocated_bytes) + ' allocated' + (f.pending_free_bytes ? ' + ' + fmtB(f.pending_free_bytes) + ' pending free' : '') + ' + ' + fmtB(f.inactive_bytes) + ' free' + free +
      (f.unplaced_bytes ? '; ' + fmtB(f.unplaced_bytes) + ' of allocations in no known segment' : '') + '.';
    const p = segBox.querySelector('.seg-head');
    p.textContent = head; p.dataset.allocated = f.allocated_bytes + f.pending_free_bytes; p.dataset.event = f.event_index === null ? '' : f.event_index; p.dataset.point = f.point;
    segCanvas.setAttribute('aria-label', head);
    segBox.querySelector('.seg-rest').textContent = (f.rest[0] ? f.rest[0] + ' more segments not drawn: ' + fmtB(f.rest[1]) + ' reserved, ' + fmtB(f.rest[2]) + ' free. ' : '') + 'One bar per segment, stretched to the full width (its size on the left), largest first; segments alike share a bar (N × size). Hover a block for its category and size.';
    const used = new Set(), pend = f.bars.some(b => b[3].some((c, k) => k % 3 === 2 && c % 2));
    for (const b of f.bars) for (let k = 2; k < b[3].length; k += 3) used.add(b[3][k] >> 1);
    segBox.querySelector('.seg-legend').innerHTML = [...used].sort((a, b) => a - b).map(c => '<span><span class="sw" style="background:' + S.colours[c] + '"></span>' + esc(S.cats[c]) + '</span>').join('') +
      (pend ? '<span><span class="sw" style="background:#999;opacity:.45"></span>pending free (lighter)</span>' : '') + '<span><span class="sw hatch"></span>free (cached)</span>';
    segBox.hidden = false;
    drawSegments();
  }
  let hatch = null;
  function drawSegments() {
    const f = segFrame;
    if (!f) return;
    segCanvas.style.height = (f.bars.length * SRow + 6) + 'px';
    const [g, w] = fit(segCanvas), bw = w - SL - SR;
    if (!hatch) {
      const t = document.createElement('canvas'); t.width = t.height = 6;
      const c = t.getContext('2d'); c.fillStyle = '#fff'; c.fillRect(0, 0, 6, 6); c.strokeStyle = '#9aa0a6'; c.lineWidth = 1.5;
      c.beginPath(); c.moveTo(0, 6); c.lineTo(6, 0); c.stroke();
      hatch = g.createPattern(t, 'repeat');
    }
    g.clearRect(0, 0, w, segCanvas.clientHeight);
    g.font = '11px system-ui, sans-serif'; g.textAlign = 'right';
    f.bars.forEach((b, r) => {
      const y = 3 + r * SRow, scale = bw / Math.max(1, b[1]), runs = b[3];
      g.fillStyle = '#333'; g.fillText((b[0] > 1 ? b[0] + ' × ' : '') + fmtB(b[1]), SL - 6, y + SBar - 1.5);
      g.fillStyle = hatch; g.fillRect(SL, y, bw, SBar);
      for (let k = 0; k < runs.length; k += 3) {
        const c = runs[k + 2];
        g.globalAlpha = c % 2 ? 0.45 : 1; g.fillStyle = S.colours[c >> 1];
        g.fillRect(SL + runs[k] * scale, y, Math.max(0.6, runs[k + 1] * scale), SBar);
      }
      g.globalAlpha = 1;
    });
  }
  if (S) segCanvas.addEventListener('mousemove', e => {
    const [px, py] = local(e, segCanvas), f = segFrame, r = Math.floor((py - 3) / SRow), b = f && f.bars[r];
    if (!b || px < SL || px > segCanvas.clientWidth - SR) { tip.hidden = true; return; }
    const at = (px - SL) / (segCanvas.clientWidth - SL - SR) * b[1], runs = b[3];
    let what = 'free (cached)';
    for (let k = 0; k < runs.length; k += 3) if (runs[k] <= at && at < runs[k] + runs[k + 1]) {
      const c = runs[k + 2]; what = '<b>' + esc(fmtB(runs[k + 1])) + '</b> ' + esc(S.cats[c >> 1]) + (c % 2 ? ', pending free' : ''); break;
    }
    showTip(what + '<br>' + (b[0] > 1 ? b[0] + ' segments alike of ' : 'a segment of ') + esc(fmtB(b[1])) + (b[2] ? ', expandable' : ''), px, py, segCanvas);
  });
  if (S) segCanvas.addEventListener('mouseleave', () => { tip.hidden = true; });
  root.hidden = false;
  root.memcut = {findings: D.findings.length, range: () => [lo, hi], full: full, get bands() { return bands; }, segFrame: () => segFrame, level: () => V.k, visible: () => V.x.filter(x => x >= lo && x <= hi).length, bandsDrawn: () => bands.filter(b => b.x1 >= lo && b.x0 <= hi).length, X: x => X(x, lanes.clientWidth), laneH: () => laneH(lanes.clientHeight), top: T, left: L, nearest: nearest, showLive: showLive};
  draw();
  window.addEventListener('resize', () => { draw(); drawSegments(); });
}
// On screen the viewer stands in for the static chart (print and pages
// without script keep the chart).
if (document.querySelector('section.viewer')) document.documentElement.classList.add('viewing');
document.querySelectorAll('section.viewer').forEach(init);
})();"#;
