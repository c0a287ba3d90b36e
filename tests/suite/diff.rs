//! `memcut diff` as a user runs it: on the committed samples (plain
//! `cargo test`) and on the corpus's natural pairs (ignored without it).

use crate::common;

use assert_cmd::Command;
use serde_json::Value;

const ADAMW: &str = "sample_traces/train_adamw.snapshot.pickle.gz";
const CHECKPOINTING: &str = "sample_traces/checkpointing.snapshot.pickle.gz";

fn memcut() -> Command {
    Command::cargo_bin("memcut").unwrap()
}

/// `memcut diff BEFORE AFTER -f json ARGS`: the exit code and the JSON.
fn diff_json(before: &str, after: &str, args: &[&str]) -> (i32, Value) {
    let out = memcut()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["diff", before, after, "-f", "json"])
        .args(args)
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{before} vs {after}: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), json)
}

/// A category's change at the peaks of device 0.
fn change(v: &Value, category: &str) -> i64 {
    v["devices"][0]["by_category"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["category"] == category)
        .map_or(0, |c| c["change_bytes"].as_i64().unwrap())
}

fn bytes(v: &Value, category: &str, side: &str) -> u64 {
    v["devices"][0]["by_category"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["category"] == category)
        .map_or(0, |c| c[side].as_u64().unwrap())
}

const MIB: f64 = 1048576.0;

#[test]
fn a_file_against_itself_is_all_zeros_and_exits_0() {
    let (code, v) = diff_json(ADAMW, ADAMW, &["--fail-if-peak-grows", "0"]);
    assert_eq!(code, 0);
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["kind"], "diff");
    let d = &v["devices"][0];
    assert_eq!(d["peak"]["change_bytes"], 0);
    assert!(d["by_category"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["change_bytes"] == 0 && c["before"] == c["after"]));
    assert_eq!(d["sites"].as_array().unwrap().len(), 0);
    assert_eq!(d["before_peak"], d["after_peak"]);
    assert_eq!(v["check"]["failed"].as_array().unwrap().len(), 0);
}

/// The same model with activation checkpointing (before) and without
/// (after): the parameters stay, the activations at the peak grow.
#[test]
fn dropping_checkpointing_grows_the_activations_and_the_check_sees_it() {
    let (code, v) = diff_json(CHECKPOINTING, ADAMW, &[]);
    assert_eq!(code, 0, "no check asked for");
    assert_eq!(change(&v, "parameter"), 0);
    assert!(bytes(&v, "parameter", "before") > 0);
    let activation = change(&v, "activation") as f64 / MIB;
    assert!((7.5..8.5).contains(&activation), "{activation} MiB");
    assert!(v["devices"][0]["peak"]["change_bytes"].as_i64().unwrap() > 0);
    let (code, grew) = diff_json(CHECKPOINTING, ADAMW, &["--fail-if-peak-grows", "10"]);
    assert_eq!(code, 4);
    assert_eq!(grew["check"]["failed"][0], grew["devices"][0]["device"]);
    let (code, _) = diff_json(CHECKPOINTING, ADAMW, &["--fail-if-peak-grows", "100"]);
    assert_eq!(code, 0, "+66% is under 100%");
    let (code, _) = diff_json(ADAMW, CHECKPOINTING, &["--fail-if-peak-grows", "0"]);
    assert_eq!(code, 0, "the peak shrinks");
}

/// Mixed formats: the snapshot and the Chrome trace of one run compare
/// equal category by category.
#[test]
fn a_snapshot_and_a_trace_of_one_run_compare_equal() {
    let (code, v) = diff_json(ADAMW, "sample_traces/train_adamw.trace.json.gz", &[]);
    assert_eq!(code, 0);
    assert_eq!(v["before"]["format"], "torch_snapshot");
    assert_eq!(v["after"]["format"], "chrome_trace");
    assert_eq!(v["devices"][0]["peak"]["change_bytes"], 0);
    for c in v["devices"][0]["by_category"].as_array().unwrap() {
        assert_eq!(c["change_bytes"], 0, "{c}");
    }
}

/// A saved JSON report reads back as it is: the same as its input.
#[test]
fn a_saved_json_report_compares_like_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("adamw.json");
    memcut()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["analyze", ADAMW, "-f", "json", "-o"])
        .arg(&saved)
        .assert()
        .success();
    let (code, v) = diff_json(saved.to_str().unwrap(), ADAMW, &[]);
    assert_eq!(code, 0);
    let d = &v["devices"][0];
    assert_eq!(d["peak"]["change_bytes"], 0);
    assert_eq!(d["sites"].as_array().unwrap().len(), 0);
}

#[test]
fn every_format_renders_and_bad_input_is_one_line_naming_the_file() {
    for (format, needle) in [
        ("text", "peak "),
        ("md", "| Category | Before | After | Change |"),
        ("html", "<svg"),
    ] {
        let out = memcut()
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["diff", CHECKPOINTING, ADAMW, "-f", format])
            .output()
            .unwrap();
        assert!(out.status.success(), "{format}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(needle), "{format}: {text}");
    }
    let out = memcut()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["diff", ADAMW, "tests/data/no_such_file.pickle"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no_such_file.pickle"), "{err}");
}

fn corpus(rel: &str) -> String {
    common::corpus().join(rel).display().to_string()
}

/// Forward at context 128, fp32 vs bf16 autocast: the weights are the same
/// 499.5 MiB; autocast keeps a bf16 copy of the weights it casts (about
/// half their bytes), live at the bf16 run's peak as activations of the
/// einsum site.
#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn bf16_autocast_adds_its_weight_copies_to_the_fp32_forward() {
    let (code, v) = diff_json(
        &corpus("cs336-silmont2000/memory_forward_fp32_128.pickle"),
        &corpus("cs336-silmont2000/memory_forward_bf16_128.pickle"),
        &["--fail-if-peak-grows", "10"],
    );
    assert_eq!(code, 4, "the peak grows 40%");
    let d = &v["devices"][0];
    let pct = d["peak"]["change_percent"].as_f64().unwrap();
    assert!((39.5..40.5).contains(&pct), "{pct}");
    assert_eq!(change(&v, "parameter"), 0);
    let weights = bytes(&v, "parameter", "after") as f64 / MIB;
    assert!((499.0..500.0).contains(&weights), "{weights} MiB");
    let activation = change(&v, "activation") as f64 / MIB;
    assert!((200.0..206.0).contains(&activation), "{activation} MiB");
    let top = &d["sites"][0];
    assert_eq!(top["status"], "appeared", "{top}");
    assert!(top["site"].as_str().unwrap().contains("einsum"), "{top}");
}

/// Mixed precision on vs off (the same forward): the weights, gradients and
/// optimizer state do not move; the activations shrink by 0.3 GiB.
#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn mixed_precision_changes_only_the_activations() {
    let (code, v) = diff_json(
        &corpus("cs336-nothanmin/memory_snapshot_forward_without_mixed.pickle"),
        &corpus("cs336-nothanmin/memory_snapshot_forward.pickle"),
        &["--fail-if-peak-grows", "0"],
    );
    assert_eq!(code, 0, "the peak shrinks");
    for c in ["parameter", "gradient", "optimizer_state"] {
        assert_eq!(change(&v, c), 0, "{c}");
        assert!(bytes(&v, c, "before") > 7 << 30, "{c}");
    }
    let activation = change(&v, "activation") as f64 / MIB;
    assert!((-310.0..-290.0).contains(&activation), "{activation} MiB");
    let pct = v["devices"][0]["peak"]["change_percent"].as_f64().unwrap();
    assert!((-1.0..-0.5).contains(&pct), "{pct}");
}

/// The same model trained at context 128, 512 and 1024: parameters and
/// optimizer state stay, activations at the peak grow with the context.
#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn activations_grow_with_the_context() {
    let run = |n: u32| {
        corpus(&format!(
            "cs336-wedsonlin/results/medium_{n}_training_memory_snapshot.pickle"
        ))
    };
    let (_, small) = diff_json(&run(128), &run(512), &[]);
    let (_, large) = diff_json(&run(512), &run(1024), &[]);
    for v in [&small, &large] {
        assert_eq!(change(v, "parameter"), 0);
    }
    assert_eq!(change(&large, "optimizer_state"), 0);
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let a128 = gib(bytes(&small, "activation", "before"));
    let a512 = gib(bytes(&small, "activation", "after"));
    let a1024 = gib(bytes(&large, "activation", "after"));
    assert_eq!(
        bytes(&large, "activation", "before"),
        bytes(&small, "activation", "after")
    );
    assert!(
        a128 < 0.1 && (6.4..6.7).contains(&a512) && (16.2..16.7).contains(&a1024),
        "{a128} {a512} {a1024}"
    );
    let growth = |v: &Value| v["devices"][0]["peak"]["change_percent"].as_f64().unwrap();
    assert!((76.0..78.5).contains(&growth(&small)), "{}", growth(&small));
    assert!((94.0..95.5).contains(&growth(&large)), "{}", growth(&large));
}
