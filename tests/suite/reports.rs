//! Reports: golden text, Markdown, JSON and HTML of every sample trace
//! (bless with `MEMCUT_BLESS=1 cargo test --release --test suite reports::`), the
//! same pages rendered from a saved JSON, the same bytes at 1 and 4
//! threads, HTML that escapes trace strings and fetches nothing, Markdown
//! under 200 lines for any input, and the HTML loading cleanly in headless
//! Chromium.

use crate::common;
use common::corpus;

use std::path::{Path, PathBuf};

use memcut::AnalyzeOptions;
use memcut::{render, OutputFormat, Report};

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The sample snapshots, sorted (`sample_traces/*.snapshot.pickle.gz`).
fn sample_snapshots() -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(manifest().join("sample_traces"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".snapshot.pickle.gz"))
        .collect();
    runs.sort();
    assert!(runs.len() >= 6, "sample snapshots missing: {runs:?}");
    runs
}

/// Analyses a sample under its repository-relative name (what the goldens show).
fn analyze_sample(path: &Path) -> Report {
    analyze_sample_with(path, &AnalyzeOptions::new())
}

fn analyze_sample_with(path: &Path, options: &AnalyzeOptions) -> Report {
    let rel = path.strip_prefix(manifest()).unwrap().to_string_lossy();
    let bytes = std::fs::read(path).unwrap();
    memcut::analyze_reader(&bytes[..], &rel, bytes.len() as u64, options).unwrap()
}

/// The report `memcut analyze -f text` makes: 3 top sites, not 10.
fn analyze_sample_for_text(path: &Path) -> Report {
    let mut options = AnalyzeOptions::new();
    options.analysis.top = 3;
    analyze_sample_with(path, &options)
}

/// Compares `actual` with the golden file, or rewrites it under `MEMCUT_BLESS=1`.
/// A mismatch shows the differing middle of the two texts.
fn check_golden(name: &str, actual: &str) -> Result<(), String> {
    let path = manifest().join("tests/golden").join(name);
    if std::env::var_os("MEMCUT_BLESS").is_some_and(|v| v != "0") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return Ok(());
    }
    let expected = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "{}: {e}; run `MEMCUT_BLESS=1 cargo test --test suite reports::` to create it",
            path.display()
        )
    })?;
    if expected == actual {
        return Ok(());
    }
    let (e, a): (Vec<&str>, Vec<&str>) = (expected.lines().collect(), actual.lines().collect());
    let head = e.iter().zip(&a).take_while(|(x, y)| x == y).count();
    let tail = e[head..]
        .iter()
        .rev()
        .zip(a[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let mut diff = format!(
        "{} differs from the output (line {}); if the change is intended, run `MEMCUT_BLESS=1 cargo test --test suite reports::`\n",
        path.display(),
        head + 1
    );
    for l in e[head..e.len() - tail].iter().take(40) {
        diff.push_str(&format!("- {l}\n"));
    }
    for l in a[head..a.len() - tail].iter().take(40) {
        diff.push_str(&format!("+ {l}\n"));
    }
    Err(diff)
}

const FORMATS: [OutputFormat; 4] = [
    OutputFormat::Text,
    OutputFormat::Md,
    OutputFormat::Json,
    OutputFormat::Html,
];

/// A sample's golden files are named by its file name without the
/// compression and container extensions: `train_adamw.snapshot.pickle.gz`
/// → `train_adamw.snapshot.{txt,md,json,html}`.
fn golden_stem(sample: &Path) -> String {
    let name = sample.file_name().unwrap().to_string_lossy();
    let name = name.trim_end_matches(".gz");
    name.rsplit_once('.')
        .map_or(name, |(stem, _)| stem)
        .to_owned()
}

#[test]
fn sample_reports_match_their_golden_files() {
    let mut failures = Vec::new();
    let mut expected = std::collections::BTreeSet::new();
    for path in samples() {
        let report = analyze_sample(&path);
        let for_text = analyze_sample_for_text(&path);
        for format in FORMATS {
            let name = format!("{}.{}", golden_stem(&path), format.extension());
            let report = if format == OutputFormat::Text {
                &for_text
            } else {
                &report
            };
            if let Err(e) = check_golden(&name, &render(report, format)) {
                failures.push(e);
            }
            expected.insert(name);
        }
    }
    // Every golden file belongs to a sample (none left behind by a rename).
    for entry in std::fs::read_dir(manifest().join("tests/golden")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !expected.contains(&name) {
            failures.push(format!("tests/golden/{name} belongs to no sample trace"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn reports_are_the_same_bytes_at_1_and_4_threads() {
    let render_all = |threads: usize| -> Vec<String> {
        on_threads(threads, || {
            samples()
                .iter()
                .flat_map(|p| {
                    let r = analyze_sample(p);
                    FORMATS.map(|f| render(&r, f))
                })
                .collect()
        })
    };
    let one = render_all(1);
    let four = render_all(4);
    assert_eq!(one.len(), four.len());
    for (a, b) in one.iter().zip(&four) {
        assert!(a == b, "output differs between 1 and 4 threads");
    }
}

/// Runs `f` on a rayon pool of `threads` threads.
fn on_threads<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

/// Every sample trace (`sample_traces/*.gz`), sorted.
fn samples() -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(manifest().join("sample_traces"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "gz"))
        .collect();
    runs.sort();
    assert!(runs.len() >= 14, "sample traces missing: {runs:?}");
    runs
}

/// Renderers read only the report: the Markdown and HTML rendered from a
/// saved JSON report equal the ones rendered from the analysis, chart
/// included, and the JSON itself reads back to the same report.
#[test]
fn saved_json_renders_the_same_pages() {
    for path in samples() {
        let report = analyze_sample(&path);
        let json = render(&report, OutputFormat::Json);
        let back = Report::from_json(&json).unwrap();
        assert_eq!(back, report, "{}", path.display());
        for format in [OutputFormat::Md, OutputFormat::Html, OutputFormat::Text] {
            assert!(
                render(&back, format) == render(&report, format),
                "{}: {format:?} from the saved JSON differs",
                path.display()
            );
        }
        assert!(
            report.devices.iter().all(|d| !d.timeline.x.is_empty()),
            "{}: no plotted series",
            path.display()
        );
    }
}

/// A snapshot (JSON form) whose frame strings try to break out of the HTML.
const HOSTILE_SNAPSHOT: &str = r#"{"segments": [], "device_traces": [[
  {"action":"alloc","addr":1,"size":100,"frames":[{"filename":"<script>alert(1)</script>","line":1,"name":"x&y \"quoted\" 'single'"}]},
  {"action":"alloc","addr":2,"size":50,"frames":[{"filename":"<img src=x onerror=alert(2)>","line":2,"name":"</code></td>|`tick`"}]},
  {"action":"free_requested","addr":2,"size":50,"frames":[]},
  {"action":"free_completed","addr":2,"size":50,"frames":[]}
]]}"#;

fn hostile_report() -> Report {
    memcut::analyze_reader(
        HOSTILE_SNAPSHOT.as_bytes(),
        "<b>evil</b> & \"path\".json",
        HOSTILE_SNAPSHOT.len() as u64,
        &AnalyzeOptions::new(),
    )
    .unwrap()
}

#[test]
fn html_escapes_every_trace_string() {
    let html = without_viewer_scripts(&render(&hostile_report(), OutputFormat::Html));
    for raw in [
        "<script",
        "<img",
        "onerror=alert(2)>",
        "<b>evil",
        "x&y",
        "\"quoted\"",
        "</code></td>|",
    ] {
        assert!(!html.contains(raw), "unescaped `{raw}` in the HTML");
    }
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("x&amp;y &quot;quoted&quot; &#39;single&#39;"));
    assert!(html.contains("&lt;b&gt;evil&lt;/b&gt; &amp; &quot;path&quot;.json"));
}

#[test]
fn markdown_keeps_trace_strings_inert() {
    let md = render(&hostile_report(), OutputFormat::Md);
    // Sites are code spans and stacks fenced code blocks (literal on every
    // renderer); no raw tags outside them.
    let mut fenced = false;
    for line in md.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            // A frame cannot close the fence early.
            assert!(!line.contains("```"), "fence closed by a frame: {line}");
            continue;
        }
        let outside_code: String = line.split('`').step_by(2).collect();
        assert!(
            !outside_code.contains("<script") && !outside_code.contains("<img"),
            "raw HTML outside a code span: {line}"
        );
    }
    assert!(!fenced, "a stack's fence is left open");
    assert!(
        md.contains("<script>alert(1)</script>"),
        "the stacks block is missing"
    );
    // Every table row keeps its column count.
    for line in md.lines().filter(|l| l.starts_with("| `")) {
        let unescaped_pipes = line.replace("\\|", "").matches('|').count();
        assert_eq!(unescaped_pipes, 6, "broken table row: {line}");
    }
}

/// The page without the viewer's own two script tags (its data and its
/// code), so that any other `<script` is one that got in.
fn without_viewer_scripts(html: &str) -> String {
    html.replace(
        "<script type=\"application/json\" class=\"memcut-data\">",
        "",
    )
    .replace("<script>(function () {", "")
}

#[test]
fn html_is_self_contained() {
    let html = without_viewer_scripts(&render(
        &analyze_sample(&sample_snapshots()[0]),
        OutputFormat::Html,
    ));
    for forbidden in [
        "http:", "https:", "<script", "<link", "@import", "url(", "src=", "href=",
    ] {
        assert!(!html.contains(forbidden), "HTML contains `{forbidden}`");
    }
    assert!(html.contains("Content-Security-Policy"));
    assert!(html.contains("<svg") && html.contains("<polygon"));
    assert!(html.contains("<table"), "tables are HTML tables");
    assert!(!html.contains("<pre"), "no Markdown dumped as text");
    assert!(html.contains("class=\"peak\""));
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn markdown_stays_under_200_lines_on_the_corpus() {
    let dir = corpus();
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().filter_map(|e| e.ok()) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push((e.metadata().unwrap().len(), p));
            }
        }
    }
    files.sort();
    let mut analysed = 0;
    for (_, path) in files.iter().rev() {
        let Ok(report) = memcut::analyze_path(path, &AnalyzeOptions::new()) else {
            continue;
        };
        analysed += 1;
        // The stacks' collapsed <details> blocks are folded on GitHub and
        // GitLab: counted apart from what a reader scrolls through.
        let md = render(&report, OutputFormat::Md);
        let folded: usize = md
            .split("<details>\n")
            .skip(1)
            .map(|b| b.split("</details>").next().unwrap_or("").lines().count() + 1)
            .sum();
        let lines = md.lines().count() - folded;
        assert!(lines < 200, "{}: {lines} lines", path.display());
        assert!(folded < 120, "{}: {folded} lines folded", path.display());
    }
    assert!(analysed > 0, "no corpus file could be analysed");
}

/// Renders sample HTML in headless Chromium: it must load with no console
/// error and no refused fetch, and the DOM must hold the chart.
#[test]
#[ignore = "needs chromium (apt-get install chromium)"]
fn html_loads_in_headless_chromium_without_errors() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = manifest();
    let fragmented = memcut::analyze_path(
        &manifest.join("tests/data/segments/fragmented_oom.pickle"),
        &AnalyzeOptions::new(),
    )
    .unwrap();
    let checkpointing =
        analyze_sample(&manifest.join("sample_traces/checkpointing.snapshot.pickle.gz"));
    let plain = analyze_sample(&manifest.join("sample_traces/train_adamw.snapshot.pickle.gz"));
    let diff = memcut::diff(&checkpointing, &plain, &memcut::DiffOptions::default());
    let pages = [
        (
            "sample.html",
            render(&analyze_sample(&sample_snapshots()[0]), OutputFormat::Html),
        ),
        (
            "hostile.html",
            render(&hostile_report(), OutputFormat::Html),
        ),
        ("segments.html", render(&fragmented, OutputFormat::Html)),
        ("diff.html", memcut::render_diff(&diff, OutputFormat::Html)),
    ];
    for (name, html) in pages {
        let page = dir.path().join(name);
        std::fs::write(&page, html).unwrap();
        let out = common::browser(&[
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--enable-logging=stderr".into(),
            "--v=0".into(),
            "--dump-dom".into(),
            format!("file://{}", page.display()),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let dom = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name}: chromium failed:\n{stderr}");
        for bad in ["Uncaught", ":CONSOLE", "Refused to"] {
            let hit: Vec<&str> = stderr.lines().filter(|l| l.contains(bad)).collect();
            assert!(
                hit.is_empty(),
                "{name}: browser reported {bad}:\n{}",
                hit.join("\n")
            );
        }
        assert!(dom.contains("<svg"), "{name}: no chart in the DOM");
        // The only scripts are the viewer's: its data and its code.
        let viewers = dom.matches("<section class=\"viewer\"").count();
        assert_eq!(
            dom.matches("<script").count(),
            dom.matches("<script type=\"application/json\" class=\"memcut-data\">")
                .count()
                + usize::from(viewers > 0),
            "{name}: a script element got in"
        );
        assert_eq!(
            dom.matches("class=\"memcut-data\"").count(),
            viewers,
            "{name}: one data block per viewer"
        );
        // A screenshot: the page paints (a blank page is a few KB of PNG).
        let shot = dir.path().join(format!("{name}.png"));
        let out = common::browser(&[
            "--window-size=1100,1400".into(),
            format!("--screenshot={}", shot.display()),
            format!("file://{}", page.display()),
        ]);
        assert!(out.status.success(), "{name}: screenshot failed");
        let png = std::fs::read(&shot).unwrap_or_default();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 20_000,
            "{name}: {} bytes of screenshot",
            png.len()
        );
    }
    assert!(dom_has_segment_map(&dir.path().join("segments.html")));
}

/// The segment map is in the page written for the fragmented OOM.
fn dom_has_segment_map(page: &std::path::Path) -> bool {
    let html = std::fs::read_to_string(page).unwrap();
    html.contains("<svg class=\"segments\"") && html.contains("Segment map at oom 0")
}

/// Findings, the what-if and the plan that fixes findings first give the
/// same bytes at 1 and 4 threads too (issue 31), on runs with every kind.
#[test]
fn findings_and_what_if_are_the_same_bytes_at_1_and_4_threads() {
    let files = [
        "sample_traces/pairs/tuned/kept_graph.gpt2.cold.waste.snapshot.pickle.gz",
        "sample_traces/pairs/tuned/leak.tinylm.warm.waste.trace.json.gz",
        "sample_traces/pairs/final/autocast.llama.cold.waste.trace.json.gz",
    ];
    let mut options = memcut::AnalyzeOptions::default();
    options.plan.budget = Some(1 << 20);
    options.plan.what_if = [
        "free_kept_graph",
        "inference_mode",
        "drop_growing_refs",
        "autocast_no_cache",
        "halve_batch",
    ]
    .map(String::from)
    .to_vec();
    let render_all = |threads: usize| -> Vec<String> {
        on_threads(threads, || {
            files
                .iter()
                .flat_map(|f| {
                    let r = memcut::analyze_path(&manifest().join(f), &options).unwrap();
                    assert!(!r.devices[0].findings.is_empty(), "{f}");
                    FORMATS.map(|fmt| render(&r, fmt))
                })
                .collect()
        })
    };
    assert!(
        render_all(1) == render_all(4),
        "output differs between 1 and 4 threads"
    );
}
