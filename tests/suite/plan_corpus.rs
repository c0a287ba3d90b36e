//! Issue 13's "done when", on real traces: every plan over the corpus and
//! the sample traces (budget 80% of the observed peak) proposes only levers
//! that apply to the run, no step under 1% of the peak and no 0 B step, and
//! its steps add up to the total reduction; the corpus files the issue
//! names get the plans an engineer would follow.

use crate::common;
use common::corpus;

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

/// Levers that only a training run can use.
const TRAINING_ONLY: [&str; 10] = [
    "activation_checkpointing",
    "halve_micro_batch",
    "save_on_cpu",
    "fused_optimizer",
    "zero_grad_set_to_none",
    "optimizer_8bit",
    "optimizer_cpu_offload",
    "optimizer_state_sharding",
    "gradient_sharding",
    "parameter_sharding",
];

/// The JSON report of `memcut analyze FILE ARGS`, or `None` when the file
/// has no memory to analyse (exit 1: not a memory trace).
fn analyze(path: &Path, args: &[&str]) -> Option<Value> {
    let out = Command::cargo_bin("memcut")
        .unwrap()
        .arg("analyze")
        .arg(path)
        .args(["-f", "json"])
        .args(args)
        .output()
        .unwrap();
    match out.status.code() {
        Some(0) | Some(3) => Some(serde_json::from_slice(&out.stdout).unwrap()),
        Some(1) => None,
        _ => panic!("{}: {out:?}", path.display()),
    }
}

fn fact<'a>(plan: &'a Value, name: &str) -> &'a str {
    plan["facts"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["fact"] == name))
        .and_then(|f| f["value"].as_str())
        .unwrap_or("")
}

fn levers(steps: &Value) -> Vec<&str> {
    steps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["lever"].as_str().unwrap())
        .collect()
}

/// Checks one plan (and its OOM plan); returns what is wrong, one line each.
fn problems(plan: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let run = fact(plan, "run");
    let weights = fact(plan, "weights");
    let min_step = plan["min_step_bytes"].as_u64().unwrap();
    let mut plans = vec![(
        "peak",
        plan["peak_before_bytes"].as_u64().unwrap(),
        plan["estimated_peak_bytes"].as_u64().unwrap(),
        &plan["steps"],
        min_step,
    )];
    if let Some(o) = plan.get("oom_plan") {
        let demand = o["demand_bytes"].as_u64().unwrap();
        plans.push((
            "oom",
            demand,
            o["estimated_peak_bytes"].as_u64().unwrap(),
            &o["steps"],
            demand.div_ceil(100).max(1),
        ));
    }
    for (which, before, after, steps, min_step) in plans {
        let saved: u64 = steps
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["saved_bytes"].as_u64().unwrap())
            .sum();
        if saved != before - after {
            out.push(format!(
                "{which}: steps save {saved}, the peak drops by {}",
                before - after
            ));
        }
        let target = plan["target_bytes"].as_u64().unwrap();
        let steps_list = steps.as_array().unwrap();
        for (k, s) in steps_list.iter().enumerate() {
            let lever = s["lever"].as_str().unwrap();
            let bytes = s["saved_bytes"].as_u64().unwrap();
            // Under 1% only as the last step, closing what was left of the
            // gap (issue 33: a sub-MiB gap needs no costly lever).
            let closes_the_gap =
                k + 1 == steps_list.len() && s["peak_after_bytes"].as_u64().unwrap() <= target;
            if bytes < min_step && !closes_the_gap {
                out.push(format!(
                    "{which}: {lever} saves {bytes} B < 1% ({min_step} B)"
                ));
            }
            if run == "inference" && TRAINING_ONLY.contains(&lever) {
                out.push(format!("{which}: {lever} on an inference run"));
            }
            if weights != "fp32" && weights != "unknown" && lever == "bf16_weights" {
                out.push(format!("{which}: bf16_weights with {weights} weights"));
            }
        }
    }
    out
}

fn every_trace(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = glob::glob(&format!("{}/**/*", dir.display()))
        .unwrap()
        .map(|p| p.unwrap())
        .filter(|p| p.is_file() && !p.to_string_lossy().ends_with(".md"))
        .collect();
    out.sort();
    out
}

fn check_all(files: &[PathBuf]) -> usize {
    let mut planned = 0;
    let mut bad = Vec::new();
    for path in files {
        let Some(v) = analyze(path, &["--budget", "80%"]) else {
            continue;
        };
        for d in v["devices"].as_array().unwrap() {
            let plan = &d["plan"];
            assert!(
                plan.is_object(),
                "{}: no plan at --budget 80%",
                path.display()
            );
            planned += 1;
            for p in problems(plan) {
                bad.push(format!("{} {}: {p}", path.display(), d["device"]));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    planned
}

#[test]
fn sample_trace_plans_are_applicable_and_add_up() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
    assert!(check_all(&every_trace(&dir)) >= 14);
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn corpus_plans_are_applicable_and_add_up() {
    assert!(check_all(&every_trace(&corpus())) >= 30);
}

fn corpus_plan(file: &str, args: &[&str]) -> Value {
    let v = analyze(&corpus().join(file), args).expect("a memory trace");
    v["devices"][0]["plan"].clone()
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn the_issue_s_corpus_files_get_plans_that_apply() {
    // TraceLens Qwen: recorded under inference_mode, no backward at all.
    let qwen = "tracelens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz";
    for order in ["cheapest", "largest"] {
        let plan = corpus_plan(qwen, &["--budget", "80%", "--order", order]);
        assert_eq!(fact(&plan, "run"), "inference");
        assert_eq!(fact(&plan, "weights"), "16-bit");
        let names = levers(&plan["steps"]);
        assert!(!names.contains(&"activation_checkpointing"), "{names:?}");
        assert!(!names.contains(&"bf16_weights"), "{names:?}");
        // An inference lever: the batch, or the KV cache the decoder
        // layers keep (classified kv_cache since issue 11's cache rules).
        assert!(
            names
                .iter()
                .any(|n| ["halve_batch", "kv_cache_quantization", "kv_cache_limit"].contains(n)),
            "{names:?}"
        );
        // expandable_segments is credited with at most what it can save:
        // 80% of the allocator cache at the peak (516 MiB there).
        for s in plan["steps"].as_array().unwrap() {
            if s["lever"] == "expandable_segments" {
                assert!(s["saved_bytes"].as_u64().unwrap() <= 413 << 20, "{s}");
            }
        }
    }
    // vLLM and SGLang decode: no micro-batch or gradient-accumulation
    // advice; the engine's preallocated KV-cache pool is the lever (a
    // smaller KV dtype or context would only fit more tokens into it).
    for file in [
        "tracelens/tests/traces/inference/vllm_decode_full/capture_traces/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
        "tracelens/tests/traces/inference/sglang_decode/capture_traces/bs_32_rank0.json.gz",
    ] {
        let plan = corpus_plan(file, &["--budget", "80%"]);
        assert_eq!(fact(&plan, "run"), "inference", "{file}");
        let names = levers(&plan["steps"]);
        assert_eq!(fact(&plan, "KV cache"), "preallocated pool", "{file}");
        assert_eq!(names[0], "kv_cache_pool", "{file}: {names:?}");
        for not in ["halve_micro_batch", "kv_cache_quantization", "kv_cache_limit"] {
            assert!(!names.contains(&not), "{file}: {names:?}");
        }
        // The KV cache at the peak is inferred: the plan says it is an estimate.
        assert_eq!(plan["steps"][0]["estimate"], true, "{file}");
        assert_eq!(plan["estimate"], true, "{file}");
    }
    // LLaMA-7B (KIVI) snapshot: the weights' dtype is not in the file, so
    // no weight lever is certain: each says what it rests on.
    let llama = corpus_plan("sketchkv2/my_snapshot.pickle", &["--budget", "80%"]);
    for s in llama["steps"].as_array().unwrap() {
        let lever = s["lever"].as_str().unwrap();
        if lever.contains("weight") {
            assert!(s["condition"].is_string(), "{s}");
        }
    }
    assert!(!levers(&llama["steps"]).contains(&"bf16_weights"));
    // The README's example: activations are 0 B at the peak and
    // checkpointing does not shrink backward scratch: it is not a step.
    let readme = corpus_plan(
        "cs336-silmont2000/mem_snapshot.pickle",
        &["--budget", "2GiB"],
    );
    // Pure bf16 halves backward's scratch too: the last step, and only if
    // the weights are fp32 (the snapshot does not show dtypes).
    let names = levers(&readme["steps"]);
    assert_eq!(
        names,
        ["expandable_segments", "halve_micro_batch", "bf16_weights"]
    );
    assert_eq!(readme["verdict"], "fits_after_cuts");
    assert!(readme["steps"][2]["condition"].is_string());
    assert!(readme["reason"].as_str().unwrap().contains("only if"));
    let considered = readme["considered"].as_array().unwrap();
    let ckpt = considered
        .iter()
        .find(|c| c["lever"] == "activation_checkpointing")
        .expect("checkpointing considered");
    assert_eq!(ckpt["outcome"], "no_effect", "{ckpt}");
}
