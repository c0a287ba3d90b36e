//! The HTML chart, measured in headless Chromium (issue 14, item 8): every
//! label inside the picture and clear of the other labels and of the peak
//! and OOM lines; memory (areas and reserved) drawn as steps; an idle
//! stretch drawn narrow so the activity gets the width. Each page is also
//! screenshotted into `$CARGO_TARGET_TMPDIR/chart-screenshots/` for a
//! person to look at.

use crate::common;

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// A snapshot (JSON form) with timestamps: `(action, addr, size, time_us)`.
fn snapshot(events: &[(&str, u64, u64, f64)], reserved: u64) -> String {
    let events: Vec<serde_json::Value> = events
        .iter()
        .map(|&(action, addr, size, t)| {
            let mut e = serde_json::json!({
                "action": action, "addr": addr, "size": size, "time_us": t,
                "frames": [{"filename": "train.py", "line": 7, "name": "forward"}]
            });
            if action == "oom" {
                e["device_free"] = serde_json::json!(1u64 << 30);
            }
            e
        })
        .collect();
    serde_json::json!({
        "segments": [{"device": 0, "address": 0, "total_size": reserved,
                      "allocated_size": 0, "active_size": 0, "blocks": []}],
        "device_traces": [events]
    })
    .to_string()
}

const MIB: u64 = 1 << 20;

/// One allocation, 800 ms of nothing, then a burst that peaks in its
/// middle; an allocation fails right after the peak.
fn idle_then_burst() -> String {
    let mut ev = vec![("alloc", 1, 512 * MIB, 0.0)];
    let t = 800_000.0;
    for k in 0..40u64 {
        ev.push(("alloc", 100 + k, 64 * MIB, t + k as f64 * 1000.0));
    }
    ev.push(("oom", 0, 8 << 30, t + 40_010.0));
    for k in 0..40u64 {
        ev.push((
            "free_completed",
            100 + k,
            64 * MIB,
            t + 41_000.0 + k as f64 * 1000.0,
        ));
    }
    snapshot(&ev, 4 << 30)
}

/// Allocations every 5 ms for 985 ms (ticks of 200 ms would end past
/// the last point); an allocation fails shortly before the peak, which is
/// near the right edge.
fn oom_before_peak() -> String {
    let mut ev = Vec::new();
    for k in 0..198u64 {
        ev.push(("alloc", 1 + k, MIB, k as f64 * 5000.0));
        if k == 190 {
            ev.push(("oom", 0, 1 << 30, k as f64 * 5000.0 + 1.0));
        }
    }
    snapshot(&ev, 256 * MIB)
}

/// Renders `input` as `dir/name.html` with the binary: its path and text.
fn page(dir: &Path, name: &str, input: &Path) -> (PathBuf, String) {
    let html = dir.join(format!("{name}.html"));
    Command::cargo_bin("memcut")
        .unwrap()
        .arg("analyze")
        .arg(input)
        .args(["-f", "html", "-o"])
        .arg(&html)
        .assert()
        .success();
    let text = std::fs::read_to_string(&html).unwrap();
    (html, text)
}

/// Measures every chart of the page in Chromium: the problems found (a
/// label outside the picture, two labels overlapping, a label crossing
/// the peak or an OOM line).
fn problems_in_browser(html: &str, dir: &Path, name: &str) -> Vec<String> {
    const MEASURE: &str = r#"<script>
// The static chart, as print and pages without script show it (on screen
// the viewer's script hides it behind the interactive timeline).
document.documentElement.classList.remove('viewing');
const out = [];
document.querySelectorAll('svg').forEach(svg => {
  const vb = svg.viewBox.baseVal, r = svg.getBoundingClientRect(), k = vb.width / r.width;
  const box = e => { const b = e.getBoundingClientRect();
    return {l: (b.left - r.left) * k, t: (b.top - r.top) * k, r: (b.right - r.left) * k,
            b: (b.bottom - r.top) * k, what: e.textContent || e.getAttribute('class')}; };
  const texts = [...svg.querySelectorAll('text')].map(box);
  const lines = [...svg.querySelectorAll('line.peak, line.oom')].map(box);
  const e = 0.5, show = b => `"${b.what}" [${b.l.toFixed(1)}, ${b.r.toFixed(1)}] x [${b.t.toFixed(1)}, ${b.b.toFixed(1)}]`;
  for (const t of texts)
    if (t.l < -e || t.t < -e || t.r > vb.width + e || t.b > vb.height + e)
      out.push(`outside the ${vb.width}x${vb.height} picture: ${show(t)}`);
  for (let i = 0; i < texts.length; i++)
    for (let j = i + 1; j < texts.length; j++) {
      const a = texts[i], b = texts[j];
      if (a.l < b.r - e && b.l < a.r - e && a.t < b.b - e && b.t < a.b - e)
        out.push(`overlap: ${show(a)} and ${show(b)}`);
    }
  for (const t of texts) for (const l of lines)
    if (l.l > t.l + e && l.l < t.r - e && l.t < t.b - e && l.b > t.t + e)
      out.push(`${show(t)} crosses the ${l.what} line at x = ${l.l.toFixed(1)}`);
});
document.body.innerHTML = '<pre id="memcut-result">' + JSON.stringify(out) + '</pre>';
</script>"#;
    // The page forbids scripts (its CSP): this copy, for measuring only,
    // drops that line and adds the measuring script.
    let probe: String = html
        .lines()
        .filter(|l| !l.contains("Content-Security-Policy"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("</body>", &format!("{MEASURE}</body>"));
    let probe_path = dir.join(format!("{name}.probe.html"));
    std::fs::write(&probe_path, probe).unwrap();
    let run = |extra: &[String]| common::browser(extra);
    let json = common::probe_result(&probe_path, name);
    // The page itself, for a person to look at.
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let png = shots.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&png);
    let shot = run(&[
        format!("--screenshot={}", png.display()),
        format!("file://{}", dir.join(format!("{name}.html")).display()),
    ]);
    assert!(
        shot.status.success() && std::fs::metadata(&png).is_ok_and(|m| m.len() > 10_000),
        "{name}: no screenshot"
    );
    eprintln!("{name}: screenshot {}", png.display());
    serde_json::from_value(json.clone()).unwrap_or_else(|e| panic!("{name}: {e}: {json}"))
}

/// The `points` of every line of the page holding `marker`.
fn point_lists(html: &str, marker: &str) -> Vec<Vec<(f64, f64)>> {
    html.lines()
        .filter(|l| l.contains(marker))
        .map(|l| {
            let pts = l
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            pts.split(' ')
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

/// An attribute of the first line holding `marker`.
fn attr(html: &str, marker: &str, name: &str) -> f64 {
    let line = html.lines().find(|l| l.contains(marker)).unwrap();
    line.split(&format!(" {name}=\""))
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The pages checked: two made-up snapshots (an idle stretch, an OOM
/// just before a peak near the right edge) and two sample traces.
fn pages(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut pages = Vec::new();
    for (name, json) in [
        ("idle_then_burst", idle_then_burst()),
        ("oom_before_peak", oom_before_peak()),
    ] {
        let input = dir.join(format!("{name}.json"));
        std::fs::write(&input, json).unwrap();
        pages.push(page(dir, name, &input));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
    for sample in [
        "train_adamw.trace.json.gz",
        "kv_cache_decode.snapshot.pickle.gz",
    ] {
        let name = sample.replace('.', "_");
        pages.push(page(dir, &name, &root.join(sample)));
    }
    pages
}

fn name_of(path: &Path) -> String {
    path.file_stem().unwrap().to_string_lossy().into_owned()
}

/// What the SVG text alone shows, without a browser: memory drawn in
/// steps, the idle stretch compressed.
#[test]
fn memory_is_drawn_in_steps_and_idle_stretches_are_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let pages = pages(dir.path());
    let mut failures = Vec::new();
    for (path, html) in &pages {
        let name = name_of(path);
        // Memory holds between events: every segment of an area or of the
        // reserved line is horizontal or vertical.
        for marker in ["<polygon points=", "class=\"reserved\" points="] {
            for pts in point_lists(html, marker) {
                if let Some(w) = pts
                    .windows(2)
                    .find(|w| w[0].0 != w[1].0 && w[0].1 != w[1].1)
                {
                    failures.push(format!(
                        "{name}: a ramp from {:?} to {:?} ({marker})",
                        w[0], w[1]
                    ));
                }
            }
        }
    }
    // The burst after 800 idle ms gets the width: its peak (mid-burst) is
    // drawn in the middle of the plot, not squashed to the right.
    let html = &pages[0].1;
    let peak_x = attr(html, "<line class=\"peak\"", "x1");
    if !(400.0..700.0).contains(&peak_x) {
        failures.push(format!(
            "idle_then_burst: peak drawn at x = {peak_x}: the idle stretch takes the width"
        ));
    }
    if !html.contains("<rect class=\"gap\"") {
        failures.push("idle_then_burst: no compressed stretch".into());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What needs a browser to measure: every label inside the picture, no two
/// labels overlapping, no label crossing the peak or an OOM line (the last
/// x tick used to be clipped, the OOM label drawn over the peak label).
#[test]
#[ignore = "needs chromium (apt-get install chromium)"]
fn chart_labels_stay_inside_and_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (path, html) in &pages(dir.path()) {
        let name = name_of(path);
        for p in problems_in_browser(html, dir.path(), &name) {
            failures.push(format!("{name}: {p}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
