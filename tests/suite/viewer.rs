//! The HTML report's interactive timeline (`src/report/viewer.rs`), driven
//! in headless Chromium as a person would use it: the page loads without an
//! error in the console, hovering the largest allocation's band shows its
//! size, site and stack, the wheel zooms in and Reset zooms out, and a click
//! at the peak lists what was live there, totalling the report's bytes at
//! that instant.

use crate::common;

use std::path::Path;

use assert_cmd::Command;

/// Drives the viewer of the page's first device and reports what it saw.
const PROBE: &str = r#"<script>
(function () {
const res = {errors: window.__errors};
try {
  const root = document.querySelector('section.viewer'), m = root.memcut;
  res.visible = !root.hidden;
  res.findings = m.findings;
  res.static_chart_hidden = getComputedStyle(document.querySelector('figure.chart')).display === 'none';
  const lanes = root.querySelector('canvas.bands'), area = root.querySelector('canvas.area');
  const D = JSON.parse(root.querySelector('script.memcut-data').textContent);
  // Hover the middle of the largest band.
  const b = m.bands.reduce((a, c) => c.bytes > a.bytes ? c : a);
  const r = lanes.getBoundingClientRect();
  const px = (m.X(b.x0) + Math.max(m.X(b.x1), m.X(b.x0) + 1.5)) / 2;
  const py = m.top + b.lane * m.laneH() + m.laneH() / 2;
  lanes.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + px, clientY: r.top + py, bubbles: true}));
  const tip = root.querySelector('.tip');
  res.tip = tip.hidden ? null : tip.textContent;
  res.tip_frames = tip.hidden ? [] : [...tip.querySelectorAll('li')].map(li => li.textContent);
  res.band = {site: b.site, bytes: b.bytes, stack: b.stack === null ? null : b.stack};
  // Zoom in with the wheel at the middle, then Reset.
  const ar = area.getBoundingClientRect();
  res.range_before = m.range();
  area.dispatchEvent(new WheelEvent('wheel', {clientX: ar.left + ar.width / 2, clientY: ar.top + 50, deltaY: -100, bubbles: true, cancelable: true}));
  res.range_zoomed = m.range();
  root.querySelector('button[data-zoom=reset]').click();
  res.range_reset = m.range();
  // Click at the peak.
  const x = D.peak_x, pxp = m.left + (x - m.full[0]) / (m.full[1] - m.full[0]) * (area.clientWidth - m.left - 14);
  for (const type of ['mousedown', 'mouseup', 'click'])
    area.dispatchEvent(new MouseEvent(type, {clientX: ar.left + pxp, clientY: ar.top + 100, bubbles: true}));
  const t = root.querySelector('.live .total');
  res.live_total = t ? Number(t.dataset.total) : null;
  res.live_rows = [...root.querySelectorAll('.live td[data-bytes]')].map(td => Number(td.dataset.bytes));
  // Zoom deep at the peak (the wheel, 25 times): a finer level is drawn
  // where the report has one, and a click at the peak still gives it.
  for (let k = 0; k < 25; k++) {
    const px = ar.left + m.X(D.peak_x);
    area.dispatchEvent(new WheelEvent('wheel', {clientX: px, clientY: ar.top + 50, deltaY: -100, bubbles: true, cancelable: true}));
  }
  res.deep = {level: m.level(), visible: m.visible(), range: m.range(), bands: m.bandsDrawn()};
  const dpx = m.X(D.peak_x);
  for (const type of ['mousedown', 'mouseup', 'click'])
    area.dispatchEvent(new MouseEvent(type, {clientX: ar.left + dpx, clientY: ar.top + 100, bubbles: true}));
  const dt = root.querySelector('.live .total');
  res.deep.live_total = dt ? Number(dt.dataset.total) : null;
  root.querySelector('button[data-zoom=reset]').click();
  // Back at the peak's click for what follows.
  for (const type of ['mousedown', 'mouseup', 'click'])
    area.dispatchEvent(new MouseEvent(type, {clientX: ar.left + pxp, clientY: ar.top + 100, bubbles: true}));
  // The allocator's segments at that instant, when the file has them.
  const sh = root.querySelector('.segmap .seg-head'), box = root.querySelector('div.segmap');
  res.seg = !box || box.hidden ? null : {allocated: Number(sh.dataset.allocated), event: sh.dataset.event === '' ? null : Number(sh.dataset.event), text: sh.textContent};
  if (res.seg) {
    // Hover the middle of the first bar's first block.
    const f = m.segFrame(), b = f.bars[0], cv = root.querySelector('canvas.segmap'), cr = cv.getBoundingClientRect();
    if (b && b[3].length) {
      const mid = (b[3][0] + b[3][1] / 2) / b[1], x = 118 + mid * (cv.clientWidth - 118 - 8);
      cv.dispatchEvent(new MouseEvent('mousemove', {clientX: cr.left + x, clientY: cr.top + 3 + 5, bubbles: true}));
      res.seg.tip = tip.hidden ? null : tip.textContent;
      res.seg.block = [b[3][1], D.segments.cats[b[3][2] >> 1]];
    }
  }
  res.paint_ms = performance.now();
} catch (e) { res.exception = String(e) + ' ' + e.stack; }
const pre = document.createElement('pre'); pre.id = 'memcut-result'; pre.textContent = JSON.stringify(res);
document.body.appendChild(pre);
})();
</script>"#;

/// Catches errors and `console.error` from the first script on.
const CATCH: &str = r#"<script>window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message)));
console.error = (...a) => window.__errors.push(a.join(' '));</script>"#;

fn memcut() -> Command {
    Command::cargo_bin("memcut").unwrap()
}

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The report of `input` as JSON and as the HTML rendered from that JSON
/// (what a saved report gives), with `extra` arguments.
fn reports(input: &Path, extra: &[&str], dir: &Path) -> (serde_json::Value, String) {
    let json_path = dir.join("report.json");
    memcut()
        .current_dir(manifest())
        .arg("analyze")
        .arg(input.strip_prefix(manifest()).unwrap_or(input))
        .args(extra)
        .args(["-f", "json", "-o"])
        .arg(&json_path)
        .assert()
        .success();
    let text = std::fs::read_to_string(&json_path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let saved = memcut::Report::from_json(&text).unwrap();
    (json, memcut::render(&saved, memcut::OutputFormat::Html))
}

/// Loads `html` with the probe in Chromium and returns what it reported.
fn drive(html: &str, dir: &Path, name: &str) -> serde_json::Value {
    let probe = html
        .replacen("<head>", &format!("<head>{CATCH}"), 1)
        .replace("</body>", &format!("{PROBE}</body>"));
    let page = dir.join(format!("{name}.html"));
    std::fs::write(&page, probe).unwrap();
    common::probe_result(&page, name)
}

/// A screenshot of the page as it opens; `docs/viewer.png` (the README's)
/// is rewritten from the KV-cache trace's page under `MEMCUT_BLESS=1`.
fn screenshot(html: &str, dir: &Path, name: &str) {
    let page = dir.join(format!("{name}.shot.html"));
    std::fs::write(&page, html).unwrap();
    let png = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("viewer-{name}.png"));
    let _ = std::fs::remove_file(&png);
    let out = common::browser(&[
        "--window-size=1100,1500".into(),
        format!("--screenshot={}", png.display()),
        format!("file://{}", page.display()),
    ]);
    let bytes = std::fs::read(&png).unwrap_or_default();
    assert!(
        out.status.success() && bytes.starts_with(b"\x89PNG") && bytes.len() > 20_000,
        "{name}: {} bytes of screenshot",
        bytes.len()
    );
    if name == "trace" && std::env::var_os("MEMCUT_BLESS").is_some_and(|v| v != "0") {
        std::fs::write(manifest().join("docs/viewer.png"), &bytes).unwrap();
    }
}

fn check(input: &Path, extra: &[&str], name: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let (report, html) = reports(input, extra, dir.path());
    screenshot(&html, dir.path(), name);
    let seen = drive(&html, dir.path(), name);
    let at = |k: &str| &seen[k];
    assert!(at("exception").is_null(), "{name}: {}", at("exception"));
    assert_eq!(
        at("errors"),
        &serde_json::json!([]),
        "{name}: console errors"
    );
    assert_eq!(at("visible"), true, "{name}: the viewer did not start");
    assert_eq!(
        at("static_chart_hidden"),
        true,
        "{name}: two charts on screen"
    );
    // Hover: the band's size, site and its stack, innermost frame first.
    let device = &report["devices"][0];
    // Each finding's waste is shaded (those with a curve: a fragmented
    // OOM's fix frees no bytes over time).
    let points = device["timeline"]["x"].as_array().map_or(0, |x| x.len());
    let findings = device["findings"].as_array().map_or(0, |f| {
        f.iter()
            .filter(|f| f["series"].as_array().is_some_and(|s| s.len() == points))
            .count()
    });
    assert_eq!(
        at("findings").as_u64(),
        Some(findings as u64),
        "{name}: findings drawn"
    );
    let tip = at("tip")
        .as_str()
        .unwrap_or_else(|| panic!("{name}: no tooltip"));
    let band = at("band");
    assert!(
        tip.contains(band["site"].as_str().unwrap()),
        "{name}: {tip}"
    );
    if let Some(k) = band["stack"].as_u64() {
        let frames: Vec<&str> = device["stacks"]["stacks"][k as usize]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                device["stacks"]["frames"][f.as_u64().unwrap() as usize]
                    .as_str()
                    .unwrap()
            })
            .collect();
        let shown: Vec<&str> = at("tip_frames")
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert_eq!(shown, frames, "{name}: the tooltip's stack");
    }
    // Zoom: the wheel narrows the range, Reset brings the whole run back.
    let range =
        |k: &str| -> (f64, f64) { (at(k)[0].as_f64().unwrap(), at(k)[1].as_f64().unwrap()) };
    let (before, zoomed, reset) = (
        range("range_before"),
        range("range_zoomed"),
        range("range_reset"),
    );
    assert!(
        zoomed.1 - zoomed.0 < 0.9 * (before.1 - before.0),
        "{name}: {before:?} -> {zoomed:?}"
    );
    assert!(zoomed.0 >= before.0 && zoomed.1 <= before.1, "{name}");
    assert_eq!(reset, before, "{name}: Reset");
    // Click at the peak: the live set totals the report's peak, and its
    // categories add up to it.
    let peak = device["peak"]["allocated_bytes"].as_u64().unwrap();
    assert_eq!(
        at("live_total").as_u64(),
        Some(peak),
        "{name}: live set at the peak"
    );
    let rows: u64 = at("live_rows")
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(rows, peak, "{name}: the live set's categories");
    // Deep zoom at the peak: the finest level covering the view is drawn
    // (more points than the whole run's there), the peak still clicks.
    let deep = at("deep");
    let detail = device["timeline"]["detail"]
        .as_array()
        .map_or(0, |d| d.len());
    let (dlo, dhi) = (
        deep["range"][0].as_f64().unwrap(),
        deep["range"][1].as_f64().unwrap(),
    );
    let base_points = device["timeline"]["x"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| (dlo..=dhi).contains(&x.as_f64().unwrap()))
        .count() as u64;
    if detail > 0 {
        assert!(deep["level"].as_u64().unwrap() > 0, "{name}: {deep}");
        assert!(
            deep["visible"].as_u64().unwrap() > base_points,
            "{name}: {deep} against {base_points} points of the whole run"
        );
    } else {
        assert_eq!(deep["level"], 0, "{name}: {deep}");
    }
    assert_eq!(
        deep["live_total"].as_u64(),
        Some(peak),
        "{name}: the peak zoomed in: {deep}"
    );
    // The allocator's segments there: the state the report gives for its
    // instant (the peak), and a hovered block names its category.
    match device["segments"]["instants"].get(0) {
        Some(state) => {
            let seg = at("seg");
            let allocated = state["allocated_bytes"].as_u64().unwrap()
                + state["pending_free_bytes"].as_u64().unwrap();
            assert_eq!(seg["allocated"].as_u64(), Some(allocated), "{name}: {seg}");
            assert_eq!(seg["event"], state["event_index"], "{name}: {seg}");
            if let Some(block) = seg["block"].as_array() {
                let tip = seg["tip"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{name}: no tooltip on the segment map"));
                let category = block[1].as_str().unwrap();
                assert!(tip.contains(category), "{name}: {tip}");
            }
        }
        None => assert!(
            at("seg").is_null(),
            "{name}: a segment map without segments"
        ),
    }
    seen
}

#[test]
#[ignore = "needs chromium (apt-get install chromium)"]
fn the_viewer_hovers_zooms_and_lists_the_live_set() {
    let samples = manifest().join("sample_traces");
    // A snapshot (x in events), a Chrome trace (x in time) with a KV cache,
    // and a training run with a what-if curve drawn over it.
    check(
        &samples.join("train_adamw.snapshot.pickle.gz"),
        &[],
        "snapshot",
    );
    check(&samples.join("kv_cache_decode.trace.json.gz"), &[], "trace");
    check(
        &samples.join("pairs/levers/train.tinylm.cold.waste.trace.json.gz"),
        &["--what-if", "activation_checkpointing", "--budget", "60%"],
        "what_if",
    );
    // A snapshot with the allocator's segments and an OOM.
    check(
        &manifest().join("tests/data/segments/fragmented_oom.pickle"),
        &[],
        "segments",
    );
    // A run with two findings, each shaded.
    let seen = check(
        &samples.join("pairs/tuned/kept_graph.tinylm.warm.waste.trace.json.gz"),
        &[],
        "findings",
    );
    assert_eq!(seen["findings"], 2);
}

/// The corpus's largest snapshot: the page stays small and paints at once.
#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS) and chromium"]
fn the_viewer_opens_the_largest_corpus_snapshot() {
    let dir = common::corpus();
    let input = dir.join("cs336-wedsonlin/results/medium_512_training_memory_snapshot.pickle");
    let seen = check(&input, &[], "corpus");
    let ms = seen["paint_ms"].as_f64().unwrap();
    eprintln!("corpus: first paint and the probe's work done {ms:.0} ms after navigation");
}
