//! The cut planner end to end: `memcut plan` (component lists) and the plan
//! in `memcut analyze` reports (sample traces, corpus snapshots, an OOM).

use crate::common;
use common::corpus;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

const SEED: &str = r#"[
  {"name": "weights", "peak_gb": 10.0, "cuttable": false},
  {"name": "activations", "peak_gb": 8.0, "cuttable": true},
  {"name": "temporary_buffers", "peak_gb": 3.0, "cuttable": true}
]"#;

fn memcut() -> Command {
    Command::cargo_bin("memcut").unwrap()
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces")
        .join(name)
}

fn json_of(output: &[u8]) -> Value {
    serde_json::from_slice(output).expect("valid JSON")
}

#[test]
fn plan_json_reproduces_the_seed_example_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "components.json", SEED);
    let out = memcut()
        .args(["plan", file.to_str().unwrap(), "--target-gb", "15.0"])
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    let v = json_of(&out.stdout);
    assert_eq!(v["largest_source"], "weights");
    assert_eq!(v["largest_peak_gb"], 10.0);
    assert_eq!(v["cut_order"], serde_json::json!(["activations"]));
    assert_eq!(v["estimated_peak_gb"], 13.0);
    assert_eq!(v["verdict"], "fits_after_cuts");
    assert!(v["reason"].as_str().is_some_and(|r| !r.is_empty()));
    // Decimal GB print as given: 13.0, not 13 or 12.999999999999998.
    assert!(text.contains("\"estimated_peak_gb\": 13.0"), "{text}");
    assert!(text.contains("\"largest_peak_gb\": 10.0"), "{text}");
}

#[test]
fn plan_text_and_markdown_read_well() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "components.json", SEED);
    let text = memcut()
        .args(["plan", file.to_str().unwrap(), "--target-gb", "15"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("largest source: weights (10.0 GB of 21.0 GB)"),
        "{text}"
    );
    assert!(
        text.contains("1. cut activations (saves 8.0 GB) -> peak 13.0 GB"),
        "{text}"
    );
    assert!(text.contains("verdict: fits_after_cuts"), "{text}");
    let md = memcut()
        .args([
            "plan",
            file.to_str().unwrap(),
            "--target-gb",
            "15",
            "-f",
            "md",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let md = String::from_utf8(md).unwrap();
    assert!(md.contains("| 1 | activations | 8.0 | 13.0 |"), "{md}");
    assert!(md.contains("**Verdict: fits_after_cuts**"), "{md}");
}

#[test]
fn plan_does_not_fit_reports_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "components.json", SEED);
    let out = memcut()
        .args([
            "plan",
            file.to_str().unwrap(),
            "--target-gb",
            "9.5",
            "-f",
            "json",
        ])
        .output()
        .unwrap();
    let v = json_of(&out.stdout);
    assert_eq!(v["verdict"], "does_not_fit");
    assert_eq!(
        v["cut_order"],
        serde_json::json!(["activations", "temporary_buffers"])
    );
    assert_eq!(v["estimated_peak_gb"], 10.0);
    assert_eq!(v["gap_gb"], 0.5);
}

#[test]
fn malformed_component_files_fail_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "missing.json",
            r#"[{"name": "w", "cuttable": true}]"#,
            "peak_gb",
        ),
        (
            "negative.json",
            r#"[{"name": "w", "peak_gb": -2.0, "cuttable": true}]"#,
            ">= 0",
        ),
        (
            "object.json",
            r#"{"name": "w", "peak_gb": 2.0, "cuttable": true}"#,
            "list",
        ),
        ("garbage.json", "peak_gb = 3", "bad JSON"),
    ];
    for (name, text, says) in cases {
        let file = write(&dir, name, text);
        let out = memcut()
            .args(["plan", file.to_str().unwrap(), "--target-gb", "15.0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = String::from_utf8(out.stderr).unwrap();
        let prefix = format!("memcut: error: {}: ", file.display());
        assert!(err.starts_with(&prefix), "{err}");
        assert!(err.contains(says), "{name}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    }
    let missing = dir.path().join("nope.json");
    let out = memcut()
        .args(["plan", missing.to_str().unwrap(), "--target-gb", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!(
            "memcut: error: {}: cannot read",
            missing.display()
        )),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn bad_budget_flags_are_usage_errors() {
    let trace = sample("train_adamw.snapshot.pickle.gz");
    for args in [
        ["--budget", "80G"],
        ["--headroom", "150%"],
        ["--dp-ranks", "0"],
    ] {
        memcut()
            .arg("analyze")
            .arg(&trace)
            .args(args)
            .assert()
            .code(2);
    }
    memcut()
        .args(["plan", "x.json", "--target-gb", "-3"])
        .assert()
        .code(2);
}

fn analyze_json(path: &Path, args: &[&str]) -> Value {
    let out = memcut()
        .arg("analyze")
        .arg(path)
        .args(["-f", "json"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    json_of(&out.stdout)
}

fn lever_names(plan: &Value) -> Vec<String> {
    plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["lever"].as_str().unwrap().to_owned())
        .collect()
}

/// A snapshot (JSON form) whose 60 MiB segment holds one 20 MiB forward
/// activation: two thirds of what the GPU holds is allocator cache.
fn cache_heavy_snapshot(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let mib = 1u64 << 20;
    let frames = r#"[{"filename": "model.py", "line": 3, "name": "forward"}, {"filename": "torch/nn/modules/module.py", "line": 1, "name": "_call_impl"}]"#;
    let json = format!(
        r#"{{"segments": [{{"device": 0, "address": 4096, "total_size": {total}, "blocks": [
              {{"address": 4096, "size": {act}, "requested_size": {act}, "state": "active_allocated", "frames": {frames}}},
              {{"address": {free_at}, "size": {free}, "requested_size": 0, "state": "inactive", "frames": []}}]}}],
            "device_traces": [[{{"action": "segment_alloc", "addr": 4096, "size": {total}}},
                               {{"action": "alloc", "addr": 4096, "size": {act}, "frames": {frames}}}]]}}"#,
        total = 60 * mib,
        act = 20 * mib,
        free = 40 * mib,
        free_at = 4096 + 20 * mib,
    );
    write(dir, "cache_heavy.json", &json)
}

#[test]
fn analyze_json_has_the_plan_contract() {
    let dir = tempfile::tempdir().unwrap();
    let v = analyze_json(&cache_heavy_snapshot(&dir), &["--budget", "40MiB"]);
    let plan = &v["devices"][0]["plan"];
    assert_eq!(plan["budget_bytes"], 40 << 20);
    assert_eq!(plan["headroom_bytes"], 4 << 20);
    assert_eq!(plan["target_bytes"], 36 << 20);
    assert_eq!(plan["budget_source"], "--budget");
    for field in [
        "estimated_peak_bytes",
        "verdict",
        "reason",
        "peak_before_bytes",
        "gap_bytes",
    ] {
        assert!(!plan[field].is_null(), "{field}: {plan}");
    }
    let steps = plan["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    for s in steps {
        for field in [
            "lever",
            "categories",
            "saved_bytes",
            "peak_after_bytes",
            "peak_moved_to",
            "action",
            "cost",
        ] {
            assert!(!s[field].is_null(), "{field}: {s}");
        }
    }
    // Two thirds of this peak is allocator cache: the free setting comes first.
    assert_eq!(lever_names(plan)[0], "expandable_segments");
    // The plan stops at the first step that reaches the target.
    let target = plan["target_bytes"].as_u64().unwrap();
    let last = steps.last().unwrap()["peak_after_bytes"].as_u64().unwrap();
    assert!(last <= target);
    for s in &steps[..steps.len() - 1] {
        assert!(s["peak_after_bytes"].as_u64().unwrap() > target);
    }
    assert_eq!(plan["verdict"], "fits_after_cuts");
    // The report still round-trips.
    let report = memcut::Report::from_json(&v.to_string()).unwrap();
    assert!(report.devices[0].plan.is_some());
}

#[test]
fn analyze_without_budget_has_no_plan_and_says_how() {
    let v = analyze_json(&sample("train_adamw.snapshot.pickle.gz"), &[]);
    assert!(v["devices"][0]["plan"].is_null());
    let md = memcut()
        .arg("analyze")
        .arg(sample("train_adamw.snapshot.pickle.gz"))
        .args(["-f", "md"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(String::from_utf8(md).unwrap().contains("--budget SIZE"));
}

#[test]
fn headroom_order_and_levers_flags() {
    let trace = sample("train_adamw.snapshot.pickle.gz");
    let dir = tempfile::tempdir().unwrap();
    let v = analyze_json(&trace, &["--budget", "20MiB", "--headroom", "4MiB"]);
    assert_eq!(v["devices"][0]["plan"]["target_bytes"], 16 << 20);
    let v = analyze_json(&trace, &["--budget", "20MiB", "--headroom", "0%"]);
    assert_eq!(v["devices"][0]["plan"]["target_bytes"], 20 << 20);

    // --order largest: the largest contribution at the peak first (the cache, here too).
    let cache_heavy = cache_heavy_snapshot(&dir);
    let v = analyze_json(&cache_heavy, &["--budget", "40MiB", "--order", "largest"]);
    assert_eq!(
        lever_names(&v["devices"][0]["plan"])[0],
        "expandable_segments"
    );

    // A levers file replaces the catalogue.
    let levers = write(
        &dir,
        "levers.json",
        r#"[{"name": "drop_activations", "scales": {"activation": 0.0}, "cost": "costs compute", "action": "don't"}]"#,
    );
    let v = analyze_json(
        &trace,
        &["--budget", "8MiB", "--levers", levers.to_str().unwrap()],
    );
    let plan = &v["devices"][0]["plan"];
    assert_eq!(lever_names(plan), ["drop_activations"]);
    assert_eq!(plan["verdict"], "does_not_fit");
    assert!(plan["gap_bytes"].as_u64().unwrap() > 0);

    let bad = write(&dir, "bad.json", r#"[{"name": "x"}]"#);
    memcut()
        .arg("analyze")
        .arg(&trace)
        .args(["--budget", "20MiB", "--levers", bad.to_str().unwrap()])
        .assert()
        .code(2);
}

#[test]
fn sample_training_peak_of_activations_gets_batch_or_checkpointing_first() {
    // prebuilt_model: the peak is forward→backward, mostly activations.
    let v = analyze_json(
        &sample("prebuilt_model.snapshot.pickle.gz"),
        &["--budget", "12MiB", "--headroom", "0"],
    );
    let plan = &v["devices"][0]["plan"];
    let names = lever_names(plan);
    let first_tensor_lever = names
        .iter()
        .find(|n| *n != "expandable_segments")
        .expect("a lever beyond the allocator setting");
    assert!(
        first_tensor_lever == "halve_micro_batch"
            || first_tensor_lever == "activation_checkpointing",
        "{names:?}"
    );
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn corpus_plans_make_sense() {
    let corpus = corpus();
    let medium = corpus.join("cs336-wedsonlin/results/medium_1024_training_memory_snapshot.pickle");
    {
        let v = analyze_json(&medium, &["--budget", "16GiB"]);
        let plan = &v["devices"][0]["plan"];
        let names = lever_names(plan);
        // The peak is activations in backward: a smaller micro-batch or checkpointing,
        // right after the free allocator setting.
        let first = names.iter().find(|n| *n != "expandable_segments").unwrap();
        assert!(
            first == "halve_micro_batch" || first == "activation_checkpointing",
            "{names:?}"
        );
        assert_eq!(plan["verdict"], "fits_after_cuts");

        // Tighter: Adam's state (from before the recording) is live in
        // backward too, so the 8-bit optimizer is a step there, before the
        // costlier checkpointing.
        let v = analyze_json(&medium, &["--budget", "8GiB"]);
        let plan = &v["devices"][0]["plan"];
        let names = lever_names(plan);
        let at = |l: &str| names.iter().position(|n| n == l);
        assert!(
            at("optimizer_8bit") < at("activation_checkpointing"),
            "{names:?}"
        );
        assert!(at("optimizer_8bit").is_some(), "{names:?}");
        assert_eq!(plan["verdict"], "fits_after_cuts");
    }
    let silmont = corpus.join("cs336-silmont2000/mem_snapshot.pickle");
    {
        let v = analyze_json(&silmont, &["--budget", "3GiB"]);
        let plan = &v["devices"][0]["plan"];
        assert_eq!(lever_names(plan)[0], "expandable_segments");
        assert_eq!(plan["verdict"], "fits_after_cuts");
    }
    // Every snapshot in the corpus plans without trouble, and the plan is consistent.
    for entry in glob::glob(&format!("{}/**/*.pickle", corpus.display())).unwrap() {
        let path = entry.unwrap();
        let v = analyze_json(&path, &["--budget", "4GiB", "--dp-ranks", "8"]);
        for d in v["devices"].as_array().unwrap() {
            let plan = &d["plan"];
            let target = plan["target_bytes"].as_u64().unwrap();
            let mut peak = plan["peak_before_bytes"].as_u64().unwrap();
            for s in plan["steps"].as_array().unwrap() {
                let after = s["peak_after_bytes"].as_u64().unwrap();
                assert!(after <= peak, "{}", path.display());
                assert_eq!(s["saved_bytes"].as_u64().unwrap(), peak - after);
                peak = after;
            }
            assert_eq!(plan["estimated_peak_bytes"].as_u64().unwrap(), peak);
            let verdict = plan["verdict"].as_str().unwrap();
            assert_eq!(
                verdict == "does_not_fit",
                peak > target,
                "{}",
                path.display()
            );
        }
    }
}
