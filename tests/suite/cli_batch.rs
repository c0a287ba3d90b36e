//! `memcut batch` end to end: a bad file never stops the batch, outputs are
//! the same at any `--jobs`, summaries parse, names never collide, exit codes.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

use crate::common;
use common::files_in;

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces")
        .join(name)
}

/// A folder of mixed inputs:
///
/// ```text
/// a/run.snapshot.pickle.gz      train_adamw          → report
/// b/run.snapshot.pickle.gz      grad_accum (same basename, other folder) → report
/// broken.pickle                 pickle header, then garbage → failed
/// truncated.snapshot.pickle.gz  first 15 kB of a gzip → failed
/// notes.md                      text → skipped
/// other.json                    JSON without memory events → skipped
/// ```
fn mixed_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("a")).unwrap();
    std::fs::create_dir_all(p.join("b")).unwrap();
    std::fs::copy(
        sample("train_adamw.snapshot.pickle.gz"),
        p.join("a/run.snapshot.pickle.gz"),
    )
    .unwrap();
    std::fs::copy(
        sample("grad_accum.snapshot.pickle.gz"),
        p.join("b/run.snapshot.pickle.gz"),
    )
    .unwrap();
    std::fs::write(p.join("broken.pickle"), b"\x80\x04garbage-garbage").unwrap();
    let gz = std::fs::read(sample("train_adamw.snapshot.pickle.gz")).unwrap();
    std::fs::write(p.join("truncated.snapshot.pickle.gz"), &gz[..gz.len() / 2]).unwrap();
    std::fs::write(p.join("notes.md"), "# not a trace\n").unwrap();
    std::fs::write(p.join("other.json"), r#"{"traceEvents": []}"#).unwrap();
    dir
}

fn memcut() -> Command {
    Command::cargo_bin("memcut").unwrap()
}

#[test]
fn a_bad_file_fails_its_row_and_the_others_still_get_reports() {
    let input = mixed_folder();
    let out = tempfile::tempdir().unwrap();
    let assert = memcut()
        .arg("batch")
        .arg(input.path())
        .arg("--out-dir")
        .arg(out.path())
        .args(["--format", "md,json,html", "--jobs", "2"])
        .assert()
        .code(1);
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    let written = files_in(out.path());
    let names: Vec<&str> = written.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "a__run.snapshot.pickle.gz.html",
            "a__run.snapshot.pickle.gz.json",
            "a__run.snapshot.pickle.gz.md",
            "b__run.snapshot.pickle.gz.html",
            "b__run.snapshot.pickle.gz.json",
            "b__run.snapshot.pickle.gz.md",
        ],
        "one report per good input and format, names from the relative path"
    );
    assert_ne!(
        written["a__run.snapshot.pickle.gz.json"],
        written["b__run.snapshot.pickle.gz.json"]
    );
    let row = |file: &str| {
        stdout
            .lines()
            .find(|l| l.contains(&format!("/{file}`")))
            .unwrap_or_else(|| panic!("no row for {file} in:\n{stdout}"))
            .to_owned()
    };
    assert!(row("broken.pickle").contains("| failed |"));
    assert!(row("broken.pickle").contains("bad pickle"));
    assert!(row("truncated.snapshot.pickle.gz").contains("| failed |"));
    assert!(row("notes.md").contains("| skipped |"));
    assert!(row("other.json").contains("| skipped |"));
    assert!(row("a/run.snapshot.pickle.gz").contains("| ok |"));
    assert!(stdout.contains("2 analysed (0 over budget, 0 partial), 2 skipped, 2 failed."));
    assert!(stderr.contains("broken.pickle: bad pickle"), "{stderr}");
    // Not a terminal: no progress bar, no control characters.
    for text in [&stdout, &stderr] {
        assert!(
            !text.contains(['\x1b', '\r']),
            "control characters in output"
        );
    }
}

#[test]
fn output_is_identical_at_1_and_4_jobs() {
    let input = mixed_folder();
    let run = |jobs: &str| {
        let out = tempfile::tempdir().unwrap();
        let summary = out.path().join("summary.csv");
        let assert = memcut()
            .current_dir(input.path())
            .args(["batch", ".", "--format", "md,json,html", "--jobs", jobs])
            .arg("--out-dir")
            .arg(out.path().join("reports"))
            .arg("--summary")
            .arg(&summary)
            .assert()
            .code(1);
        (
            assert.get_output().stdout.clone(),
            std::fs::read(&summary).unwrap(),
            files_in(&out.path().join("reports")),
        )
    };
    let one = run("1");
    let four = run("4");
    assert!(one.0 == four.0, "stdout summary differs");
    assert!(one.1 == four.1, "CSV summary differs");
    assert_eq!(
        one.2.keys().collect::<Vec<_>>(),
        four.2.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &one.2 {
        assert!(
            *bytes == four.2[name],
            "{name} differs between --jobs 1 and 4"
        );
    }
    // Paths stay as given (relative), never made absolute.
    let csv = String::from_utf8(one.1).unwrap();
    assert!(csv.contains("\n./a/run.snapshot.pickle.gz,"), "{csv}");
    assert!(!csv.contains(&input.path().display().to_string()));
}

/// Splits one CSV record (RFC 4180 quoting; no newlines inside fields here).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                fields.last_mut().unwrap().push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().unwrap().push(c),
        }
    }
    assert!(!quoted, "unterminated quote in {line}");
    fields
}

#[test]
fn csv_summary_parses_with_the_same_columns_on_every_row() {
    let input = mixed_folder();
    let out = tempfile::tempdir().unwrap();
    let summary = out.path().join("s.csv");
    memcut()
        .arg("batch")
        .arg(input.path())
        .arg(input.path().join("notes.md")) // named twice: listed once
        .arg("--summary")
        .arg(&summary)
        .assert()
        .code(1);
    let text = std::fs::read_to_string(&summary).unwrap();
    let rows: Vec<Vec<String>> = text.lines().map(csv_fields).collect();
    assert_eq!(
        rows[0],
        [
            "file",
            "status",
            "format",
            "device",
            "peak_bytes",
            "reserved_bytes",
            "top_category",
            "verdict",
            "report",
            "error",
            "findings",
            "next_step_bytes"
        ]
    );
    assert_eq!(rows.len(), 1 + 6, "{text}");
    for r in &rows {
        assert_eq!(r.len(), rows[0].len(), "{r:?}");
    }
    // Sorted: analysed by peak (descending), then failed, then skipped.
    let status: Vec<&str> = rows[1..].iter().map(|r| r[1].as_str()).collect();
    assert_eq!(
        status,
        ["ok", "ok", "failed", "failed", "skipped", "skipped"]
    );
    let peaks: Vec<u64> = rows[1..3].iter().map(|r| r[4].parse().unwrap()).collect();
    assert!(peaks[0] >= peaks[1]);
    // No --out-dir: no report column.
    assert!(rows[1][8].is_empty());
}

#[test]
fn jsonl_summary_has_one_object_per_line() {
    let input = mixed_folder();
    let out = tempfile::tempdir().unwrap();
    let summary = out.path().join("s.jsonl");
    memcut()
        .arg("batch")
        .arg(input.path().join("*/run.snapshot.pickle.gz"))
        .arg("--out-dir")
        .arg(out.path())
        .arg("--summary")
        .arg(&summary)
        .assert()
        .code(0);
    let text = std::fs::read_to_string(&summary).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 2);
    for v in &lines {
        assert_eq!(v["status"], "ok");
        assert_eq!(v["format"], "torch_snapshot");
        assert_eq!(v["device"], "cpu");
        assert!(v["peak_bytes"].as_u64().unwrap() > 0);
        assert!(out
            .path()
            .join(format!("{}.md", v["report"].as_str().unwrap()))
            .is_file());
    }
}

#[test]
fn over_budget_exits_3_only_when_asked() {
    let input = sample("train_adamw.snapshot.pickle.gz");
    let assert = memcut()
        .arg("batch")
        .arg(&input)
        .args(["--budget", "1MiB", "--fail-over-budget"])
        .assert()
        .code(3);
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert!(stdout.contains("| over_budget |") && stdout.contains("does_not_fit"));
    memcut()
        .arg("batch")
        .arg(&input)
        .args(["--budget", "1MiB"])
        .assert()
        .code(0);
    let assert = memcut()
        .arg("batch")
        .arg(&input)
        .args(["--budget", "80GiB", "--fail-over-budget"])
        .assert()
        .code(0);
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert!(stdout.contains("| ok |") && stdout.contains("| fits |"));
}

#[test]
fn usage_errors_exit_2() {
    let input = sample("train_adamw.snapshot.pickle.gz");
    memcut().arg("batch").assert().code(2);
    memcut()
        .arg("batch")
        .arg(&input)
        .args(["--summary", "s.txt"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(".csv, .jsonl or .md"));
    memcut()
        .arg("batch")
        .arg(&input)
        .args(["--budget", "80G"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("unknown unit `G`"));
    memcut()
        .arg("batch")
        .arg(&input)
        .arg("--fail-over-budget")
        .assert()
        .code(2);
    memcut()
        .arg("batch")
        .arg(&input)
        .args(["--format", "pdf"])
        .assert()
        .code(2);
}

#[test]
fn missing_paths_and_empty_globs_are_failed_rows() {
    let dir = tempfile::tempdir().unwrap();
    let assert = memcut()
        .arg("batch")
        .arg(sample("train_adamw.snapshot.pickle.gz"))
        .arg(dir.path().join("nope.pickle"))
        .arg(dir.path().join("*.nothing"))
        .assert()
        .code(1);
    let stdout = String::from_utf8(assert.get_output().stdout.clone()).unwrap();
    assert!(stdout.contains("no such file or folder"), "{stdout}");
    assert!(stdout.contains("no file matches this pattern"), "{stdout}");
    assert!(stdout.contains("1 analysed (0 over budget, 0 partial), 0 skipped, 2 failed."));
}

/// The whole corpus in one command: every file is analysed or skipped with
/// its reason; nothing fails.
#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn the_corpus_runs_in_one_batch() {
    let dir = common::corpus();
    let out = tempfile::tempdir().unwrap();
    let summary = out.path().join("s.jsonl");
    let assert = memcut()
        .arg("batch")
        .arg(&dir)
        .arg("--out-dir")
        .arg(out.path().join("r"))
        .args(["--format", "md,json,html"])
        .arg("--summary")
        .arg(&summary)
        .assert();
    let code = assert.get_output().status.code();
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&summary)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let failed: Vec<&serde_json::Value> = rows.iter().filter(|r| r["status"] == "failed").collect();
    assert!(failed.is_empty(), "failed: {failed:#?}");
    assert_eq!(code, Some(0));
    let analysed = rows
        .iter()
        .filter(|r| r["status"] == "ok" || r["status"] == "over_budget")
        .map(|r| r["file"].as_str().unwrap())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    assert!(analysed >= 10, "only {analysed} corpus files analysed");
    for r in rows.iter().filter(|r| r["status"] == "skipped") {
        assert!(
            !r["error"].as_str().unwrap().is_empty(),
            "skip without a reason: {r}"
        );
    }
    let reports = std::fs::read_dir(out.path().join("r")).unwrap().count();
    assert_eq!(reports, analysed * 3);
}

/// Issue 33 item 7: the Markdown summary leaves out the columns with
/// nothing to say (Verdict without a budget, Reason when every file was
/// read, Findings for clean runs) and keeps them when a row fills them.
#[test]
fn summary_columns_appear_only_with_something_to_say() {
    let header = |args: &[&str], inputs: &[PathBuf]| {
        let out = memcut()
            .arg("batch")
            .args(inputs)
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        stdout
            .lines()
            .find(|l| l.starts_with("| File"))
            .unwrap_or_else(|| panic!("no table in:\n{stdout}"))
            .to_owned()
    };
    let clean = [sample("train_adamw.snapshot.pickle.gz")];
    let h = header(&[], &clean);
    assert!(
        !h.contains("Verdict") && !h.contains("Reason") && !h.contains("Findings"),
        "{h}"
    );
    let h = header(&["--budget", "1MiB"], &clean);
    assert!(h.contains("Verdict") && !h.contains("Reason"), "{h}");
    let input = mixed_folder();
    let h = header(&[], &[input.path().to_path_buf()]);
    assert!(h.contains("Reason") && !h.contains("Verdict"), "{h}");
}

/// A sweep over first steps' recordings lists each one's predicted next
/// step (`next_step_bytes`, the report's `devices[].next_step`): on the
/// one-step runs of the `next_step` pairs, the two-step run's peak (within
/// 0.1%); null on the two-step runs.
#[test]
fn the_summary_lists_each_first_steps_predicted_next_step() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces/pairs/next_step");
    let out = tempfile::tempdir().unwrap();
    let summary = out.path().join("s.jsonl");
    memcut()
        .arg("batch")
        .arg(&dir)
        .arg("--summary")
        .arg(&summary)
        .assert()
        .code(0);
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&summary)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let peak_of = |file: &str| {
        rows.iter()
            .find(|r| r["file"].as_str().unwrap().ends_with(file))
            .unwrap_or_else(|| panic!("{file}: no row"))
            .clone()
    };
    let mut seen = 0;
    for r in &rows {
        let file = r["file"].as_str().unwrap();
        if file.ends_with("pairs.json") {
            continue;
        }
        if file.contains(".two_steps.") {
            assert!(r["next_step_bytes"].is_null(), "{r}");
            continue;
        }
        let two = peak_of(
            &file
                .rsplit('/')
                .next()
                .unwrap()
                .replace(".waste.", ".two_steps."),
        );
        let (predicted, truth) = (
            r["next_step_bytes"]
                .as_u64()
                .unwrap_or_else(|| panic!("{r}")),
            two["peak_bytes"].as_u64().unwrap(),
        );
        // tests/suite/what_if_pairs.rs scores the prediction; the row carries it.
        assert!(
            predicted.abs_diff(truth) * 1000 <= truth,
            "{r}: true {truth}"
        );
        seen += 1;
    }
    assert_eq!(seen, 6, "{rows:?}");
}
