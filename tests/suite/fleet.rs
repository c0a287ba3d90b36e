//! Fleet scale: `memcut batch --shard I/N` and `memcut summary merge` give
//! the summary of a single run byte for byte; the rank table of a batch
//! that holds several ranks of one job.

use std::path::Path;

use assert_cmd::Command;

use crate::common;
use common::files_in;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn memcut() -> Command {
    let mut c = Command::cargo_bin("memcut").unwrap();
    c.current_dir(root());
    c
}

/// Traces, damaged files, non-traces, the multi-rank set, a glob and a
/// path that names nothing: every kind of row.
const INPUTS: [&str; 5] = [
    "sample_traces/*.gz",
    "tests/data/ranks",
    "tests/data/broken",
    "tests/data/no_such_file.pickle",
    "tests/data/*.no_such_extension",
];

/// Runs `memcut batch INPUTS … extra` and returns (exit code, stdout).
fn batch(extra: &[&str]) -> (Option<i32>, String) {
    let out = memcut()
        .arg("batch")
        .args(INPUTS)
        .args(["--budget", "16MiB", "-j", "2"])
        .args(extra)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_owned()
}

/// `--shard 0/2` + `--shard 1/2` + merge = the single run, for the
/// Markdown, CSV and JSON Lines summaries, stdout, the exit code and the
/// report files; and the same for three shards.
#[test]
fn shards_merged_give_the_single_run_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let single_dir = path(t, "single");
    let (single_code, single_stdout) = batch(&[
        "--summary",
        &path(t, "single.jsonl"),
        "--out-dir",
        &single_dir,
        "-f",
        "md,json",
    ]);
    assert_eq!(single_code, Some(1), "the broken files fail");
    assert!(single_stdout.contains("## Ranks"), "{single_stdout}");
    for ext in ["csv", "md"] {
        let summary = path(t, &format!("single.{ext}"));
        let (code, stdout) = batch(&[
            "--summary",
            &summary,
            "--out-dir",
            &single_dir,
            "-f",
            "md,json",
        ]);
        assert_eq!((code, &stdout), (single_code, &single_stdout));
    }
    for n in [2, 3] {
        let shard_dir = path(t, &format!("shards{n}"));
        let mut parts = Vec::new();
        let mut sizes = Vec::new();
        for i in 0..n {
            let part = path(t, &format!("part{i}of{n}.jsonl"));
            let shard = format!("{i}/{n}");
            batch(&[
                "--shard",
                &shard,
                "--summary",
                &part,
                "--out-dir",
                &shard_dir,
                "-f",
                "md,json",
            ]);
            sizes.push(std::fs::read_to_string(&part).unwrap().lines().count());
            parts.push(part);
        }
        assert!(
            sizes.iter().all(|&s| s > 0),
            "every shard has rows: {sizes:?}"
        );
        for ext in ["jsonl", "csv", "md"] {
            let merged = path(t, &format!("merged{n}.{ext}"));
            let out = memcut()
                .args(["summary", "merge"])
                .args(&parts)
                .args(["--summary", &merged])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), single_code);
            assert_eq!(String::from_utf8(out.stdout).unwrap(), single_stdout);
            assert_eq!(
                std::fs::read_to_string(&merged).unwrap(),
                std::fs::read_to_string(path(t, &format!("single.{ext}"))).unwrap(),
                "{n} shards, .{ext}"
            );
        }
        assert_eq!(
            files_in(Path::new(&shard_dir)),
            files_in(Path::new(&single_dir)),
            "the shards' reports are the single run's, with its names"
        );
    }
}

#[test]
fn merge_refuses_overlapping_shards_and_files_that_are_not_jsonl_summaries() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let all = path(t, "all.jsonl");
    batch(&["--summary", &all]);
    let copy = path(t, "copy.jsonl");
    std::fs::copy(&all, &copy).unwrap();
    let out = memcut()
        .args(["summary", "merge", &all, &copy])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("memcut: error: `"), "{err}");
    assert!(
        err.trim_end().ends_with(&format!(
            "is in both {all} and {copy}: were the shards run with the same paths and the same N?"
        )),
        "{err}"
    );
    let csv = path(t, "all.csv");
    batch(&["--summary", &csv]);
    let out = memcut().args(["summary", "merge", &csv]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!("memcut: error: {csv}:1: not a summary row (")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let missing = path(t, "missing.jsonl");
    let out = memcut()
        .args(["summary", "merge", &missing])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .starts_with(&format!("memcut: error: {missing}: cannot read: ")));
    let out = memcut()
        .args(["summary", "merge", &all, "--summary", "x.txt"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // An empty shard (no file hashed to it) merges as nothing.
    let empty = path(t, "empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let out = memcut()
        .args(["summary", "merge", &empty])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .starts_with("# memcut batch: 0 files"));
}

#[test]
fn a_bad_shard_is_a_usage_error() {
    for bad in ["2/2", "1", "x/3"] {
        let out = memcut()
            .args(["batch", "sample_traces", "--shard", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains(&format!("`{bad}` is not a shard: give I/N with 0 <= I < N")),
            "{err}"
        );
    }
}

/// The recorded 4-rank DDP step (tests/data/ranks): rank 3 drew the long
/// sequences, and the table says so, and what made the difference.
#[test]
fn the_rank_table_of_the_ddp_run() {
    let tmp = tempfile::tempdir().unwrap();
    let summary = path(tmp.path(), "s.jsonl");
    let out = memcut()
        .args(["batch", "tests/data/ranks", "--summary", &summary])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let table = &stdout[stdout.find("## Ranks").expect("a rank table")..];
    assert!(
        table.contains("### `tests/data/ranks` · cpu · 4 of 4 ranks (distributedInfo)"),
        "{table}"
    );
    assert!(
        table.contains("Outliers (peak more than 10% from the median): rank 3."),
        "{table}"
    );
    let rank3 = table
        .lines()
        .find(|l| l.starts_with("| 3 |"))
        .expect("rank 3's row");
    assert!(rank3.contains("| activation +"), "{rank3}");
    for r in 0..3 {
        let line = table
            .lines()
            .find(|l| l.starts_with(&format!("| {r} |")))
            .unwrap();
        assert!(line.contains("|  | `tests/data/ranks/rank_step."), "{line}");
    }
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&summary)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"status\":\"ok\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4);
    for r in &rows {
        let d = &r["distributed"];
        assert_eq!(d["world_size"], 4);
        assert_eq!(d["from"], "distributed_info");
        let sum: u64 = d["peak_by_category"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(Some(sum), r["peak_bytes"].as_u64());
    }
}

/// Without `distributedInfo`, rank numbers in the file names group the
/// files of one folder (stated in the table); other folders are other jobs.
#[test]
fn rank_numbers_in_file_names_are_the_fallback() {
    let tmp = tempfile::tempdir().unwrap();
    let job = tmp.path().join("job");
    std::fs::create_dir_all(&job).unwrap();
    let samples = root().join("sample_traces");
    for (rank, sample) in [
        (0, "train_adamw.snapshot.pickle.gz"),
        (1, "train_adamw.snapshot.pickle.gz"),
        (2, "kv_cache_decode.snapshot.pickle.gz"),
    ] {
        std::fs::copy(
            samples.join(sample),
            job.join(format!("rank_{rank}.pickle.gz")),
        )
        .unwrap();
    }
    let out = memcut()
        .arg("batch")
        .arg(&job)
        .arg(samples.join("grad_accum.snapshot.pickle.gz"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains(&format!(
            "### `{}` · cpu · 3 ranks (numbers from the file names; world size unknown)",
            job.display()
        )),
        "{stdout}"
    );
    assert_eq!(stdout.matches("\n### ").count(), 1, "{stdout}");
}

/// Rank sets without memory events (the corpus's DLRM worker0..7 and HTA's
/// sampled ranks) are skipped rows: they give no table and break none.
#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn rank_sets_without_memory_events_do_not_break_the_table() {
    let corpus = common::corpus();
    let out = memcut()
        .arg("batch")
        .arg(corpus.join("param/et_replay/tests/inputs/dlrm_kineto"))
        .arg(corpus.join("hta/tests/data/trace_filter"))
        .arg(corpus.join("hta/tests/data/df_index_resolver"))
        .arg("tests/data/ranks")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("5 analysed (0 over budget, 0 partial), 11 skipped, 0 failed."),
        "{stdout}"
    );
    assert_eq!(stdout.matches("\n### ").count(), 1, "{stdout}");
    assert!(
        stdout.contains("### `tests/data/ranks` · cpu · 4 of 4 ranks"),
        "{stdout}"
    );
}

/// The rows the Python binding makes from bytes are the batch's rows.
#[test]
fn rows_of_bytes_are_the_batch_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let summary = path(tmp.path(), "s.jsonl");
    let files = [
        "tests/data/ranks/rank_step.3.pt.trace.json.gz",
        "sample_traces/train_adamw.snapshot.pickle.gz",
        "tests/data/broken/random_bytes.bin",
        "tests/data/broken/chrome_cut_mid_event.json",
        "tests/data/broken/json_not_a_trace.json",
    ];
    memcut()
        .arg("batch")
        .args(files)
        .args(["--budget", "16MiB", "--summary", &summary])
        .output()
        .unwrap();
    let mut options = memcut::AnalyzeOptions::default();
    options.plan.budget = Some(16 << 20);
    let mut rows: Vec<memcut::batch::Row> = files
        .iter()
        .flat_map(|f| {
            let bytes = std::fs::read(root().join(f)).unwrap();
            memcut::batch::rows_of_bytes(f, &bytes, &options)
        })
        .collect();
    memcut::batch::sort_rows(&mut rows);
    assert_eq!(
        memcut::batch::render_jsonl(&rows),
        std::fs::read_to_string(&summary).unwrap()
    );
}
