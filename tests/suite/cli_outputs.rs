//! Outputs people can trust and script (issue 14): one test per item of
//! the issue, each run through the binary as a user runs it. Every one of
//! them but item 4's (fixed on `main` by issue 11) failed on the `main` of
//! 2026-12-03 11:30 UTC.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

const SNAPSHOT: &str = "sample_traces/grad_accum.snapshot.pickle.gz";
const TRACE: &str = "sample_traces/grad_accum.trace.json.gz";
/// 17 distinct sites at the peak: enough to see `--top` honoured.
const MANY_SITES: &str = "sample_traces/train_adamw.snapshot.pickle.gz";

fn memcut() -> Command {
    Command::cargo_bin("memcut").unwrap()
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Run {
    run_in(Path::new("."), args, None)
}

fn run_in(dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut cmd = memcut();
    cmd.current_dir(dir).args(args);
    if let Some(bytes) = stdin {
        cmd.write_stdin(bytes.to_vec());
    }
    let out = cmd.output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn manifest(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn gunzip(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// What a job killed mid-write leaves: the first half of `bytes`
/// compressed, as `(the cut .gz, the text it inflates to)`.
fn truncated_gzip(bytes: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    let gz = enc.finish().unwrap();
    let cut = gz[..gz.len() / 2].to_vec();
    let mut inflated = Vec::new();
    let mut dec = flate2::read::GzDecoder::new(&cut[..]);
    let mut buf = [0u8; 4096];
    loop {
        match dec.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => inflated.extend_from_slice(&buf[..n]),
        }
    }
    (cut, inflated)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:.300}"))
}

/// Item 1: a truncated trace is `partial` in the batch summary, CSV and
/// JSONL, said on stderr, and fails `--strict`; a truncated `.json.gz`
/// gives the partial report its inflated prefix gives.
#[test]
fn truncated_inputs_are_partial_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let full = gunzip(&manifest(TRACE));
    std::fs::write(dir.path().join("cut.json"), &full[..full.len() / 2]).unwrap();
    let (gz, inflated) = truncated_gzip(&full);
    std::fs::write(dir.path().join("cut.json.gz"), gz).unwrap();
    std::fs::write(dir.path().join("prefix.json"), &inflated).unwrap();
    std::fs::copy(manifest(SNAPSHOT), dir.path().join("whole.pickle.gz")).unwrap();

    let files = ["cut.json", "cut.json.gz", "whole.pickle.gz"];
    let mut args = vec!["batch", "--summary", "s.csv"];
    args.extend(files);
    let r = run_in(dir.path(), &args, None);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for f in ["cut.json", "cut.json.gz"] {
        let row = r
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("| `{f}`")));
        assert!(row.unwrap().contains("| partial |"), "{}", r.stdout);
        assert!(
            r.stderr
                .contains(&format!("memcut: warning: {f}: input is truncated")),
            "{}",
            r.stderr
        );
    }
    assert!(
        r.stderr.contains("the gzip stream is truncated"),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout
            .contains("3 analysed (0 over budget, 2 partial), 0 skipped, 0 failed."),
        "{}",
        r.stdout
    );
    let csv = std::fs::read_to_string(dir.path().join("s.csv")).unwrap();
    assert!(csv.contains("cut.json,partial,chrome_trace,"), "{csv}");
    assert!(csv.contains("whole.pickle.gz,ok,"), "{csv}");

    let r = run_in(
        dir.path(),
        &["batch", "cut.json.gz", "--summary", "s.jsonl"],
        None,
    );
    assert_eq!(r.code, 0);
    let row = json(&std::fs::read_to_string(dir.path().join("s.jsonl")).unwrap());
    assert_eq!(row["status"], "partial");
    assert!(row["error"].as_str().unwrap().contains("truncated"));

    assert_eq!(
        run_in(dir.path(), &["batch", "--strict", "cut.json.gz"], None).code,
        1
    );
    assert_eq!(
        run_in(dir.path(), &["batch", "--strict", "whole.pickle.gz"], None).code,
        0
    );

    // The .gz gives the report of the text it inflates to, said to be partial.
    let from_gz = run_in(dir.path(), &["analyze", "-f", "json", "cut.json.gz"], None);
    let from_text = run_in(dir.path(), &["analyze", "-f", "json", "prefix.json"], None);
    assert_eq!((from_gz.code, from_text.code), (0, 0), "{}", from_gz.stderr);
    let (a, b) = (json(&from_gz.stdout), json(&from_text.stdout));
    assert_eq!(a["devices"], b["devices"]);
    assert!(a["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["partial_read"] == true && d["message"].as_str().unwrap().contains("gzip")));
}

/// Item 2: `-o`'s extension sets the format; several inputs give one JSON
/// list (or JSON Lines); HTML for several is refused; write errors name
/// the path.
#[test]
fn output_format_follows_the_extension_and_several_inputs_stay_valid() {
    let dir = tempfile::tempdir().unwrap();
    let snap = manifest(SNAPSHOT);
    let trace = manifest(TRACE);
    let (snap, trace) = (snap.to_str().unwrap(), trace.to_str().unwrap());
    let at = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();

    for (name, starts) in [
        ("r.html", "<!DOCTYPE html>"),
        ("r.json", "{"),
        ("r.md", "# memcut report"),
        ("r.txt", "memcut: "),
    ] {
        let r = run(&["analyze", snap, "-o", &at(name)]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let text = std::fs::read_to_string(at(name)).unwrap();
        assert!(text.starts_with(starts), "{name}: {text:.80}");
    }
    assert_eq!(
        json(&std::fs::read_to_string(at("r.json")).unwrap())["schema_version"],
        3
    );
    // -f wins over the extension.
    assert_eq!(
        run(&["analyze", snap, "-f", "md", "-o", &at("m.json")]).code,
        0
    );
    assert!(std::fs::read_to_string(at("m.json"))
        .unwrap()
        .starts_with("# memcut report"));

    // Several inputs, JSON: one document, a list of reports in input order.
    let r = run(&["analyze", snap, trace, "-f", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let list = json(&r.stdout);
    let formats: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|rep| rep["source"]["format"].as_str().unwrap())
        .collect();
    assert_eq!(formats, ["torch_snapshot", "chrome_trace"]);
    // JSON Lines: one report per line, by flag or by extension.
    let r = run(&["analyze", snap, trace, "--jsonl"]);
    assert_eq!(r.code, 0);
    assert_eq!(r.stdout.lines().map(json).count(), 2);
    assert_eq!(
        run(&["analyze", snap, trace, "-o", &at("all.jsonl")]).code,
        0
    );
    let lines = std::fs::read_to_string(at("all.jsonl")).unwrap();
    assert_eq!(lines.lines().map(json).count(), 2);

    // HTML for several inputs: refused, nothing written.
    let r = run(&["analyze", snap, trace, "-o", &at("two.html")]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("memcut batch"), "{}", r.stderr);
    assert!(!dir.path().join("two.html").exists());

    // Write errors name the path.
    let folder = dir.path().to_str().unwrap();
    let r = run(&["analyze", snap, "-o", folder]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains(&format!("--output {folder}: is a folder")),
        "{}",
        r.stderr
    );
    let missing = at("no/such/dir/r.md");
    let r = run(&["analyze", snap, "-o", &missing]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains(&format!("cannot write {missing}")),
        "{}",
        r.stderr
    );
    let r = run(&["analyze", snap, "-o", &at("r.xyz")]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("r.xyz: the extension names no report format"),
        "{}",
        r.stderr
    );
}

/// Item 4: a trace that says nothing about reserved memory prints
/// "unknown" (JSON `null`), never `0 B` below the allocated bytes.
#[test]
fn unknown_reserved_memory_is_never_zero() {
    let text = run(&["analyze", SNAPSHOT, "-f", "text"]).stdout;
    assert!(text.contains("reserved unknown"), "{text}");
    let md = run(&["analyze", SNAPSHOT, "-f", "md"]).stdout;
    assert!(md.contains("| Reserved at peak | unknown |"), "{md}");
    let r = json(&run(&["analyze", SNAPSHOT, "-f", "json"]).stdout);
    assert_eq!(r["devices"][0]["peak"]["reserved_bytes"], Value::Null);
    for out in [&text, &md] {
        assert!(
            !out.contains("0 B reserved") && !out.contains("| 0 B (0 bytes)"),
            "{out}"
        );
    }
}

/// Item 5: flags that used to be accepted with a silly meaning, or
/// refused with a confusing message.
#[test]
fn flags_are_validated_with_clear_messages() {
    for (args, code, says) in [
        (&["--budget", "0"][..], 2, "the size must be greater than 0"),
        (&["--budget", "0GiB"], 2, "the size must be greater than 0"),
        (
            &["--budget", "40"],
            2,
            "`40` has no unit and is under a MiB as bytes: write a size (`40GiB`, `40GB`) or a share of the peak (`40%`)",
        ),
        (
            &["--what-if", "nope"],
            2,
            "unknown lever `nope` for --what-if (levers: free_kept_graph, inference_mode",
        ),
        (
            &["--budget", "-5GiB"],
            2,
            "`-5GiB`: a size cannot be negative",
        ),
        (
            &["--budget", "1GiB", "--headroom", "2GiB"],
            2,
            "the headroom must be smaller than the budget",
        ),
        (
            &["--budget", "1GiB", "--headroom", "1GiB"],
            2,
            "the headroom must be smaller than the budget",
        ),
        (
            &["--budget", "1GiB", "--headroom", "10"],
            2,
            "`10` has no unit: write a percentage of the budget (`10%`)",
        ),
        (
            &["--budget", "1GiB", "--headroom", "-1GiB"],
            2,
            "a size cannot be negative",
        ),
        (
            &["--device", "cuda:7"],
            1,
            "no device cuda:7 in this trace (devices: cpu)",
        ),
    ] {
        let mut all = vec!["analyze", SNAPSHOT, "-f", "text"];
        all.extend(args);
        let r = run(&all);
        assert_eq!(r.code, code, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
        assert_eq!(r.stdout, "", "{args:?}");
    }
    // Accepted: a percentage, a size with a unit, a bare 0.
    for headroom in ["10%", "512MiB", "0"] {
        let r = run(&[
            "analyze",
            SNAPSHOT,
            "-f",
            "text",
            "--budget",
            "1GiB",
            "--headroom",
            headroom,
        ]);
        assert_eq!(r.code, 0, "{headroom}: {}", r.stderr);
    }
    // `batch -f` writes reports only into --out-dir: without it, refused.
    let r = run(&["batch", SNAPSHOT, "-f", "text"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--out-dir"), "{}", r.stderr);
}

/// Item 5: `--top N` lists N sites in every format (text used to show 3,
/// Markdown at most 10).
#[test]
fn top_is_honoured_by_every_format() {
    let count = |format: &str, top: &str| {
        let r = run(&["analyze", MANY_SITES, "-f", format, "--top", top]);
        assert_eq!(r.code, 0);
        match format {
            "text" => r.stdout.matches("  top site: ").count(),
            "md" => r.stdout.lines().filter(|l| l.starts_with("| `")).count(),
            "html" => r.stdout.matches("<tr><td><code>").count(),
            _ => json(&r.stdout)["devices"][0]["peak"]["top_sites"]
                .as_array()
                .unwrap()
                .len(),
        }
    };
    for format in ["text", "md", "html", "json"] {
        assert_eq!(count(format, "5"), 5, "{format}");
        assert_eq!(count(format, "14"), 14, "{format}");
    }
    // The defaults: 3 in text (a terminal summary), 10 elsewhere.
    let r = run(&["analyze", MANY_SITES, "-f", "text"]);
    assert_eq!(r.stdout.matches("  top site: ").count(), 3);
}

/// Item 5: `plan -` reads stdin as `analyze -` does; `plan` on a trace
/// points to `analyze --budget`; `analyze --fail-over-budget` exits 3.
#[test]
fn plan_reads_stdin_and_points_traces_to_analyze_and_fail_over_budget() {
    let components = br#"[{"name": "weights", "peak_gb": 10.0, "cuttable": false}]"#;
    let r = run_in(
        Path::new("."),
        &["plan", "-", "--target-gb", "20"],
        Some(components),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("weights"), "{}", r.stdout);

    let r = run(&["plan", SNAPSHOT, "--target-gb", "5"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains(&format!("run `memcut analyze {SNAPSHOT} --budget SIZE`")),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("UTF-8"), "{}", r.stderr);

    // The peak is 8.1 MiB: over a 1 MiB budget, within 1 GiB.
    let over = run(&[
        "analyze",
        SNAPSHOT,
        "-f",
        "json",
        "--budget",
        "1MiB",
        "--fail-over-budget",
    ]);
    assert_eq!(over.code, 3, "{}", over.stderr);
    assert!(!over.stdout.is_empty(), "the report is still written");
    let fits = run(&[
        "analyze",
        SNAPSHOT,
        "-f",
        "json",
        "--budget",
        "1GiB",
        "--fail-over-budget",
    ]);
    assert_eq!(fits.code, 0);
    let r = run(&["analyze", SNAPSHOT, "--fail-over-budget"]);
    assert_eq!(r.code, 2, "--fail-over-budget needs --budget");
}

/// A snapshot (JSON form) whose frames have Windows paths.
fn windows_snapshot() -> String {
    let frames = serde_json::json!([
        {"filename": "C:\\work\\proj\\train.py", "line": 42, "name": "forward"}
    ]);
    serde_json::json!({
        "segments": [{"device": 0, "address": 0, "total_size": 1u64 << 30,
                      "allocated_size": 0, "active_size": 0, "blocks": []}],
        "device_traces": [[
            {"action": "alloc", "addr": 4096, "size": 1u64 << 20, "frames": frames},
            {"action": "alloc", "addr": 8192, "size": 2u64 << 20, "frames": frames}
        ]]
    })
    .to_string()
}

/// Item 6: `site_contains` matches what the report prints for a site and
/// `/` paths against Windows frames; a rule that matches nothing warns.
#[test]
fn rules_match_the_printed_site_and_report_what_they_matched() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.json");
    let rules_arg = rules.to_str().unwrap();
    let with_rule = |input: &str, needle: &str| {
        std::fs::write(
            &rules,
            serde_json::json!([{"name": "mine", "category": "activation", "site_contains": needle}])
                .to_string(),
        )
        .unwrap();
        run(&["analyze", input, "-f", "json", "--rules", rules_arg])
    };
    let classified_by_rule = |r: &Run| {
        json(&r.stdout)["devices"][0]["peak"]["allocations"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["rule"] == "user:mine")
            .count()
    };

    // The site text as the text report prints it for Adam's state.
    let r = with_rule(MANY_SITES, "torch/optim/adam.py(140): _init_group");
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(classified_by_rule(&r) > 0);
    assert!(
        !r.stderr.contains("classified no allocation"),
        "{}",
        r.stderr
    );

    let input = dir.path().join("win.json");
    std::fs::write(&input, windows_snapshot()).unwrap();
    let input = input.to_str().unwrap();
    for needle in ["work/proj/train.py", "work\\proj\\train.py", "train.py:42"] {
        let r = with_rule(input, needle);
        assert_eq!(r.code, 0, "{needle}: {}", r.stderr);
        assert_eq!(classified_by_rule(&r), 2, "{needle}");
        assert!(
            json(&r.stdout)["diagnostics"]
                .to_string()
                .contains("rule `mine` (--rules) classified 2 allocations"),
            "{needle}"
        );
    }

    let r = with_rule(input, "no_such_file.py");
    assert_eq!(r.code, 0);
    assert_eq!(classified_by_rule(&r), 0);
    assert!(
        r.stderr.contains("memcut: warning: ")
            && r.stderr
                .contains("rule `mine` (--rules) classified no allocation"),
        "{}",
        r.stderr
    );
}

/// Item 7: warnings about damaged content reach stderr even when the
/// report goes to a file (a file claiming 256 TiB used to exit 0 silently).
#[test]
fn damaged_content_is_said_on_stderr_with_the_report_in_a_file() {
    let dir = tempfile::tempdir().unwrap();
    for (file, says) in [
        (
            "fuzz_chrome_size_over_i64.json",
            "claim more than 281474976710656 bytes (256 TiB)",
        ),
        ("snapshot_negative_size.pkl", "are negative or not integers"),
        (
            "snapshot_free_unknown_address.pkl",
            "the history starts with a free",
        ),
    ] {
        let input = manifest(&format!("tests/data/broken/{file}"));
        let report = dir.path().join(format!("{file}.md"));
        let r = run(&[
            "analyze",
            input.to_str().unwrap(),
            "-o",
            report.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 0, "{file}: {}", r.stderr);
        assert_eq!(r.stdout, "");
        assert!(report.exists());
        let line = format!("memcut: warning: {}: ", input.display());
        assert!(
            r.stderr
                .lines()
                .any(|l| l.starts_with(&line) && l.contains(says)),
            "{file}: {}",
            r.stderr
        );
    }
}

/// Item 3: every format gives a category's share of the *allocated* peak,
/// and shows the allocator cache (reserved − allocated) on its own line,
/// without a share (text used to divide by reserved and list the cache
/// among the categories).
#[test]
fn shares_are_of_the_allocated_peak_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let frames = serde_json::json!([{"filename": "train.py", "line": 7, "name": "forward"}]);
    let mib = 1u64 << 20;
    let snapshot = serde_json::json!({
        "segments": [{"device": 0, "address": 0, "total_size": 8 * mib,
                      "allocated_size": mib, "active_size": mib,
                      "blocks": [{"address": 4096, "size": mib, "state": "active_allocated"},
                                 {"address": mib + 4096, "size": 7 * mib, "state": "inactive"}]}],
        "device_traces": [[
            {"action": "alloc", "addr": 4096, "size": mib, "frames": frames},
            {"action": "alloc", "addr": mib + 4096, "size": 3 * mib, "frames": frames},
            {"action": "free_completed", "addr": mib + 4096, "size": 3 * mib, "frames": frames}
        ]]
    });
    let input = dir.path().join("seg.json");
    std::fs::write(&input, snapshot.to_string()).unwrap();
    let input = input.to_str().unwrap();
    // Peak: 4 MiB allocated (3 MiB temporary, 1 MiB activation), 8 MiB reserved.
    let text = run(&["analyze", input, "-f", "text"]).stdout;
    assert!(
        text.contains("4.0 MiB allocated at event 1 (forward), 8.0 MiB reserved"),
        "{text}"
    );
    assert!(
        text.contains("temporary            3.0 MiB   75.0%"),
        "{text}"
    );
    assert!(
        text.contains("allocator_cache      4.0 MiB  (reserved, not allocated)"),
        "{text}"
    );
    let md = run(&["analyze", input, "-f", "md"]).stdout;
    assert!(md.contains("| temporary | 3.0 MiB | 75.0% |"), "{md}");
    assert!(md.contains("| activation | 1.0 MiB | 25.0% |"), "{md}");
    let html = run(&["analyze", input, "-f", "html"]).stdout;
    assert!(html.contains("<td class=\"num\">75.0%</td>"), "{html}");
    for out in [&text, &md, &html] {
        assert!(
            !out.contains("37.5%") && !out.contains("50.0%"),
            "a share of reserved: {out}"
        );
    }
}

/// Item 9 (clutter): devices with a trivial peak beside a larger one get
/// one line; "Peak moves to" only when the peak moved; punctuation in the
/// plan's reason; `1 file`; one default for `-j`.
#[test]
fn reports_leave_out_the_clutter() {
    let ten = manifest("tests/data/broken/snapshot_ten_devices.pkl");
    let ten = ten.to_str().unwrap();
    let text = run(&["analyze", ten, "-f", "text"]).stdout;
    assert_eq!(text.matches(": peak ").count(), 1, "{text}");
    assert!(text.contains(
        "Also recorded, with a peak under 1.0 MiB each (in the JSON report): cuda:8 (9.0 KiB), cuda:7 (8.0 KiB)"
    ), "{text}");
    let md = run(&["analyze", ten, "-f", "md"]).stdout;
    assert_eq!(md.matches("## Device `").count(), 1, "{md}");
    let r = json(&run(&["analyze", ten, "-f", "json"]).stdout);
    assert_eq!(
        r["devices"].as_array().unwrap().len(),
        10,
        "JSON keeps them all"
    );

    let md = run(&["analyze", MANY_SITES, "-f", "md", "--budget", "12MiB"]).stdout;
    let step = md.lines().find(|l| l.starts_with("| 1 | ")).unwrap();
    assert!(step.ends_with("| — |"), "{step}");
    let r = json(&run(&["analyze", SNAPSHOT, "-f", "json", "--budget", "1KiB"]).stdout);
    let reason = r["devices"][0]["plan"]["reason"].as_str().unwrap();
    assert!(
        reason.contains(", the peak is still") || reason.contains("applies: the peak"),
        "{reason}"
    );

    let r = run(&["batch", SNAPSHOT]);
    assert!(
        r.stdout.starts_with("# memcut batch: 1 file\n"),
        "{}",
        r.stdout
    );
    let help = run(&["batch", "--help"]).stdout;
    // The text of --jobs: up to the next option (or blank line).
    let after = help.split("--jobs").nth(1).unwrap();
    let end = ["\n\n", "\n  -", "\n      --"]
        .iter()
        .filter_map(|m| after.find(m))
        .min()
        .unwrap_or(after.len());
    let jobs = &after[..end];
    assert_eq!(jobs.matches("[default").count(), 1, "{jobs}");
}
