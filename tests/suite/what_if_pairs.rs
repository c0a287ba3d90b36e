//! Findings and what-if against reality: real CPU PyTorch runs recorded in
//! pairs (`sample_traces/pairs/`, made by `generate_pairs.py`): a run with a
//! waste, and the same run recorded again with the fix really applied.
//!
//! For each pair and each format (the Chrome trace and the
//! `_profile_to_snapshot` snapshot of the same run): memcut analyses the
//! baseline with `--what-if LEVER` and the fixed run as it is. The error is
//! |predicted saving − true saving| / baseline peak, where the predicted
//! saving is the baseline's peak minus the what-if peak and the true saving
//! the baseline's peak minus the fixed run's peak (peaks are exact; the
//! Chrome peaks are also checked against `pairs.json`, which the generator
//! computed from the files with Python).
//!
//! Findings: the baseline names the finding the lever fixes, with a saving
//! within 10% of the true one; the fixed run does not name it again.
//!
//! `tuned` is the set the models were chosen on; `untuned` was recorded
//! after, with other seeds, shapes and models, and is reported apart.

use std::path::{Path, PathBuf};

use memcut::{report::FindingKind, AnalyzeOptions, Report};

struct Pair {
    baseline: String,
    lever: String,
    fixed: String,
    baseline_peak: u64,
    fixed_peak: u64,
}

fn pairs(set: &str) -> (PathBuf, Vec<Pair>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces/pairs")
        .join(set);
    let text = std::fs::read_to_string(dir.join("pairs.json"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join("pairs.json").display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let pairs = v["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Pair {
            baseline: p["baseline"].as_str().unwrap().into(),
            lever: p["lever"].as_str().unwrap().into(),
            fixed: p["fixed"].as_str().unwrap().into(),
            baseline_peak: p["baseline_peak"].as_u64().unwrap(),
            fixed_peak: p["fixed_peak"].as_u64().unwrap(),
        })
        .collect();
    (dir, pairs)
}

fn analyze(path: &Path, what_if: &[&str]) -> Report {
    let mut options = AnalyzeOptions::default();
    options.plan.what_if = what_if.iter().map(|s| s.to_string()).collect();
    memcut::analyze_path(path, &options).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One row per (pair, format): the error as a share of the baseline's peak,
/// and what went wrong with the findings, if anything.
fn score(set: &str) -> Vec<(String, f64, Vec<String>)> {
    let (dir, pairs) = pairs(set);
    let mut rows = Vec::new();
    for p in &pairs {
        for format in ["trace.json.gz", "snapshot.pickle.gz"] {
            // `A+B`: both levers applied.
            let levers: Vec<&str> = p.lever.split('+').collect();
            let base = analyze(&dir.join(format!("{}.{format}", p.baseline)), &levers);
            let fixed = analyze(&dir.join(format!("{}.{format}", p.fixed)), &[]);
            let (b, f) = (&base.devices[0], &fixed.devices[0]);
            let mut problems = Vec::new();
            if format == "trace.json.gz" {
                assert_eq!(b.peak.allocated_bytes, p.baseline_peak, "{}", p.baseline);
                assert_eq!(f.peak.allocated_bytes, p.fixed_peak, "{}", p.fixed);
            }
            let before = b.peak.allocated_bytes;
            let predicted = before as f64 - b.what_if.as_ref().unwrap().peak_allocated_bytes as f64;
            let truth = before as f64 - f.peak.allocated_bytes as f64;
            let error = (predicted - truth).abs() / before as f64;
            if set.starts_with("levers") || set == "combined" {
                // Catalogue levers: the runs' only waste is the gradients
                // `zero_grad()` keeps in training (`set_to_none=False` in
                // every baseline; its pair's fixed run frees them), named
                // where the recording shows a step then a forward and the
                // fix saves 1% of the peak; no other finding on either run;
                // the prediction within the worst case.
                let set_to_none = p.lever == "zero_grad_set_to_none";
                for (run, r, fixed) in [(&p.baseline, b, false), (&p.fixed, f, true)] {
                    let may_keep = !(levers.contains(&"zero_grad_set_to_none") && fixed);
                    for x in &r.findings {
                        if !(may_keep && x.kind == FindingKind::GradientsKeptThroughForward) {
                            problems.push(format!("{run} names {:?}", x.kind));
                        }
                    }
                }
                if set_to_none {
                    let named = b
                        .findings
                        .iter()
                        .find(|x| x.kind == FindingKind::GradientsKeptThroughForward);
                    // Priced by its own curve, the finding says what the
                    // what-if says.
                    if let Some(x) = named {
                        assert_eq!(
                            x.peak_after_bytes,
                            b.what_if.as_ref().unwrap().peak_allocated_bytes,
                            "{} ({format})",
                            p.baseline
                        );
                    }
                    match named {
                        None if truth >= 0.01 * before as f64 => {
                            problems.push(format!("no finding for a true saving of {truth}"))
                        }
                        Some(x) if (x.saving_bytes as f64 - truth).abs() > 0.1 * truth.max(0.0) => {
                            problems.push(format!(
                                "finding saves {}, not within 10% of the true {truth}",
                                x.saving_bytes
                            ))
                        }
                        _ => {}
                    }
                }
                if error > 0.10 {
                    problems.push(format!("error {:.1}% of the peak", error * 100.0));
                }
                rows.push((
                    format!("{} {} ({format})", p.baseline, p.lever),
                    error,
                    problems,
                ));
                continue;
            }
            let fix = |r: &memcut::report::DeviceReport| {
                r.findings
                    .iter()
                    .find(|x| x.fix == p.lever)
                    .map(|x| x.saving_bytes)
            };
            match fix(b) {
                None => problems.push(format!("no finding fixed by {}", p.lever)),
                Some(s) if truth > 0.0 && (s as f64 - truth).abs() > 0.1 * truth => problems.push(
                    format!("finding saves {s}, not within 10% of the true {truth}"),
                ),
                _ => {}
            }
            if fix(f).is_some() {
                problems.push(format!("the fixed run still names {}", p.lever));
            }
            rows.push((
                format!("{} {} ({format})", p.baseline, p.lever),
                error,
                problems,
            ));
        }
    }
    rows
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Per lever: the largest median and worst error (share of the peak) that
/// the pairs may show. The target is 3% / 10% for every lever.
/// `inference_mode` reads module calls and source lines where the trace
/// records no data flow (`findings/calls.rs`); since it reads an operand
/// held to its line's end, operands beside each other on one line, and a
/// call's output as its last child's, its errors are tuned 0.00% / 2.31%,
/// untuned 0.00% / 2.29% (they were 0.87% / 7.70% and 1.24% / 10.75%).
fn limits(set: &str) -> &'static [(&'static str, f64, f64)] {
    match set {
        // Looked at once recorded, then memory_growth's runs were changed
        // for its MLP (so its drop_growing_refs rows are tuned on).
        "fresh" => &[
            ("free_kept_graph", 0.03, 0.08),
            ("inference_mode", 0.01, 0.03),
            ("autocast_no_cache", 0.03, 0.05),
            ("drop_growing_refs", 0.03, 0.05),
        ],
        // Recorded untouched, then looked at: its CNN taught inference_mode
        // nn.Sequential (37% to 70% of the true saving before).
        "final" => &[
            ("free_kept_graph", 0.03, 0.10),
            ("inference_mode", 0.01, 0.02),
            ("autocast_no_cache", 0.03, 0.05),
            ("drop_growing_refs", 0.03, 0.10),
        ],
        // Catalogue levers (`generate_pairs.py --levers`): today's values
        // rounded up, to catch regressions; the target is 3% / 10%.
        // zero_grad_set_to_none and activation_checkpointing are modelled
        // from the run (each kept gradient is needed again where the next
        // backward computes a tensor of its size; each block's saved
        // tensors go when it returns and are back just before its
        // backward, with its forward replayed there); the others scale
        // their pools by the catalogue's factors.
        "levers" => &[
            ("zero_grad_set_to_none", 0.01, 0.10),
            ("fused_optimizer", 0.01, 0.01),
            ("halve_micro_batch", 0.01, 0.02),
            ("activation_checkpointing", 0.01, 0.05),
            ("halve_batch", 0.01, 0.01),
            ("bf16_weights", 0.01, 0.07),
            ("kv_cache_limit", 0.01, 0.01),
        ],
        // Recorded after the models above were settled (a Llama, a CNN, a
        // deeper TinyLM; other seeds), then looked at: its CNN showed that
        // checkpointing's recomputation holds tensors of its own, which
        // the model now replays. The untouched set is "levers_fresh".
        "levers_untuned" => &[
            ("zero_grad_set_to_none", 0.01, 0.09),
            ("fused_optimizer", 0.01, 0.01),
            ("halve_micro_batch", 0.01, 0.01),
            ("activation_checkpointing", 0.01, 0.01),
            ("halve_batch", 0.01, 0.01),
            ("bf16_weights", 0.01, 0.07),
            ("kv_cache_limit", 0.01, 0.01),
        ],
        // Recorded last; the first scores, before the changes it prompted
        // (backward's weight-sized tensors do not halve with the
        // micro-batch; a snapshot's kept gradient is paired with the new
        // value live where it ends), are in docs/accuracy.md.
        "levers_fresh" => &[
            ("zero_grad_set_to_none", 0.01, 0.10),
            ("fused_optimizer", 0.01, 0.01),
            ("halve_micro_batch", 0.01, 0.03),
            ("activation_checkpointing", 0.01, 0.04),
            ("halve_batch", 0.01, 0.01),
            ("bf16_weights", 0.01, 0.06),
            ("kv_cache_limit", 0.01, 0.01),
        ],
        // Untouched (seeds 120-123, even batches: a first recording's odd
        // ones halved to a third of the batch): the 3% / 10%.
        // Over every prediction, warm snapshots' listed misses included:
        // set_to_none 0.01% / 11.4%, fused 0 / 0, halve_micro_batch 0.01% /
        // 0.86%, checkpointing 0.12% / 1.62%, bf16 1.84% / 20.3%, halve_batch
        // 0.16% / 0.50%, kv_cache_limit 0 / 0.
        "levers_check" => &[
            ("zero_grad_set_to_none", 0.03, 0.10),
            ("fused_optimizer", 0.01, 0.01),
            ("halve_micro_batch", 0.03, 0.10),
            ("activation_checkpointing", 0.03, 0.10),
            ("halve_batch", 0.03, 0.10),
            ("bf16_weights", 0.03, 0.10),
            ("kv_cache_limit", 0.01, 0.01),
        ],
        // Untouched (seeds 150-153, after the seventh session's changes):
        // the 3% / 10%.
        "levers_final" => &[
            ("zero_grad_set_to_none", 0.03, 0.10),
            ("fused_optimizer", 0.03, 0.10),
            ("halve_micro_batch", 0.03, 0.10),
            ("activation_checkpointing", 0.03, 0.10),
            ("halve_batch", 0.03, 0.10),
            ("bf16_weights", 0.03, 0.10),
        ],
        // Two levers together (seeds 230-231, tenth session): a run keeping
        // its gradients, zero_grad(set_to_none=True) alone and with half the
        // micro-batch. Together they were predicted as set_to_none's saving
        // plus halving's (GPT-2 cold 7.6% of the peak off, the MLP 6.5%); the
        // two free none of the kept gradients together (`combined_factors`).
        "combined" => &[
            ("zero_grad_set_to_none", 0.01, 0.01),
            ("zero_grad_set_to_none+halve_micro_batch", 0.01, 0.01),
        ],
        // Untouched (seeds 220-224, tenth session): the 3% / 10%.
        "levers_tenth" => &[
            ("zero_grad_set_to_none", 0.03, 0.10),
            ("fused_optimizer", 0.03, 0.10),
            ("halve_micro_batch", 0.03, 0.10),
            ("activation_checkpointing", 0.03, 0.10),
            ("halve_batch", 0.03, 0.10),
            ("bf16_weights", 0.03, 0.10),
            ("kv_cache_limit", 0.03, 0.10),
        ],
        // bf16 pairs recorded after the fresh set showed that attention's
        // math path keeps fp32 in a bf16 run and the model learnt it (new
        // seeds, shapes and optimizers; HF's SDPA with dropout takes the
        // math path, TinyLM's causal SDPA the fused kernel): not tuned on.
        "levers_bf16" => &[("bf16_weights", 0.03, 0.10)],
        // generate() with a prompt as long as its new tokens (seeds 90-91),
        // recorded when only the factor existed (it said 5.5% / 10.7%, true
        // 0: the peak is the prompt's forward); kv_cache_limit is now the run
        // stopped after half its forwards.
        "levers_long_prompt" => &[("kv_cache_limit", 0.01, 0.01)],
        // halve_micro_batch where zero_grad frees the gradients
        // (set_to_none=True): the factor alone was off by a median 18%, at
        // worst 26% of the peak (the first micro-batch's gradients are held
        // through the second); with them held, 0.02% / 0.08% (built on).
        "levers_set_to_none" => &[("halve_micro_batch", 0.01, 0.01)],
        // Recorded after that model, scored once: the target.
        "levers_set_to_none_check" => &[("halve_micro_batch", 0.03, 0.10)],
        // generate() recorded after kv_cache_limit was modelled, scored
        // untouched (GPT-2 20+60 tokens, Llama 12+72; seeds 95-96): 0.00% /
        // 0.00% (the factor: 2.46% / 10.99%).
        "levers_kv_check" => &[("kv_cache_limit", 0.01, 0.01)],
        // Untouched (seeds 100-104, recorded after inference_mode's sixth-
        // session model): the 3% / 10%, except inference_mode held
        // to what it showed (0.00% / 2.81%).
        "findings_check" => &[
            ("free_kept_graph", 0.03, 0.05),
            ("inference_mode", 0.01, 0.03),
            ("autocast_no_cache", 0.03, 0.10),
            ("drop_growing_refs", 0.03, 0.10),
        ],
        // Forward-only runs of nn.Sequential models (a CNN, a five-layer
        // MLP; seeds 80, 82), recorded after the final set's CNN showed
        // that a Sequential binds each child's output to the next child's
        // and the model learnt it: not tuned on.
        "sequential_check" => &[
            ("free_kept_graph", 0.01, 0.01),
            ("inference_mode", 0.01, 0.01),
        ],
        _ => LIMITS,
    }
}

const LIMITS: &[(&str, f64, f64)] = &[
    ("optimizer_state_in_place", 0.03, 0.10),
    ("free_kept_graph", 0.03, 0.05),
    ("inference_mode", 0.01, 0.03),
    ("autocast_no_cache", 0.03, 0.05),
    ("drop_growing_refs", 0.03, 0.10),
];

/// Predictions known to miss, each with why. Every other row must pass,
/// and each of these must still be a miss (so the list stays true).
const KNOWN_MISSES: &[(&str, &str)] = &[
    // The fresh catalogue set (`--levers_fresh`): a warm Chrome trace's
    // set_to_none pair is not comparable (below). (Warm profile-made
    // snapshots, whose model state predates the recording without frames,
    // were listed here for set_to_none and bf16 until the state was read
    // from its in-place updates: `classify/evidence.rs`,
    // `added_into_before_recording`, and `classify/update_order.rs`.)
    (
        "levers_fresh/train.mlp.warm.waste zero_grad_set_to_none (trace.json.gz)",
        "the truth is not comparable",
    ),
    // A warm run's Chrome trace counts only what is allocated while it
    // records: the baseline's gradients were made before it, the fixed
    // run's are made again in its backward, so the fixed run's peak is
    // higher (true saving -162%) and no prediction from the baseline can
    // be compared with it.
    (
        "levers/train.mlp.warm.waste zero_grad_set_to_none (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "levers_grads_check/train.mlp.warm.waste zero_grad_set_to_none (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "levers_final/train.mlp.warm.waste zero_grad_set_to_none (trace.json.gz)",
        "the truth is not comparable",
    ),
    // The same for the two levers together (`combined`): warm Chrome traces
    // whose fixed runs make again the gradients the baseline made before
    // the recording (GPT-2's counts them in its fixed run's peak: 13.5%).
    (
        "combined/train.mlp.warm.waste zero_grad_set_to_none (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "combined/train.mlp.warm.waste zero_grad_set_to_none+halve_micro_batch (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "combined/train.gpt2.warm.waste zero_grad_set_to_none+halve_micro_batch (trace.json.gz)",
        "the truth is not comparable",
    ),
    // The hand-written optimizer (`oop_check`): the TinyLM's step is not its
    // peak (true saving 0: no finding is right); warm runs are not
    // comparable: the Chrome trace counts only what is allocated while it
    // records (the in-place run allocates nothing in its step: true saving
    // 89% and 71% of the peak), and the profile-made snapshot of the
    // out-of-place run holds 72 MiB from the warm-up steps, `unknown`, that
    // the in-place run's does not (59% and 38%).
    (
        "oop_check/train_oop.tinylm.cold.waste optimizer_state_in_place (trace.json.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_check/train_oop.tinylm.cold.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_check/train_oop.mlp.warm.waste optimizer_state_in_place (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_check/train_oop.mlp.warm.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_check/train_oop.tinylm.warm.waste optimizer_state_in_place (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_check/train_oop.tinylm.warm.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "the truth is not comparable",
    ),
    // Other hand-written optimizers (`oop_fresh`), as `oop_check` above: Lion
    // on GPT-2 and SGD on the TinyLM do not peak in the step (true saving 0,
    // no finding: right), and warm runs are not comparable (the Chrome trace
    // counts only what is allocated while it records; the out-of-place
    // run's profile-made snapshot holds its warm-up steps' tensors).
    (
        "oop_fresh/train_oop.gpt2.cold.waste optimizer_state_in_place (trace.json.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_fresh/train_oop.gpt2.cold.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_fresh/train_oop.tinylm.cold.waste optimizer_state_in_place (trace.json.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_fresh/train_oop.tinylm.cold.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_fresh/train_oop.gpt2.warm.waste optimizer_state_in_place (trace.json.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_fresh/train_oop.gpt2.warm.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_fresh/train_oop.mlp.warm.waste optimizer_state_in_place (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_fresh/train_oop.mlp.warm.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_fresh/train_oop.tinylm.warm.waste optimizer_state_in_place (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_fresh/train_oop.tinylm.warm.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "the truth is not comparable",
    ),
    // Adam with bias correction by hand (`oop_untouched`, scored once): its
    // corrected moments are temporaries either way, so the step's peak
    // barely moves in place (the MLP's true saving 9 KB, 0.02%; Llama's 0):
    // no finding, right; warm runs not comparable, as above. It checks no
    // false alarm, not a finding named.
    (
        "oop_untouched/train_oop.llama.cold.waste optimizer_state_in_place (trace.json.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_untouched/train_oop.llama.cold.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_untouched/train_oop.mlp.cold.waste optimizer_state_in_place (trace.json.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_untouched/train_oop.mlp.cold.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "true saving 0: no finding",
    ),
    (
        "oop_untouched/train_oop.llama.warm.waste optimizer_state_in_place (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_untouched/train_oop.llama.warm.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_untouched/train_oop.mlp.warm.waste optimizer_state_in_place (trace.json.gz)",
        "the truth is not comparable",
    ),
    (
        "oop_untouched/train_oop.mlp.warm.waste optimizer_state_in_place (snapshot.pickle.gz)",
        "the truth is not comparable",
    ),
    // The CNN's autocast copies save 11 KB (0.2% of the peak); the
    // finding says 47 KB: off by 0.9% of the peak, four times the truth.
    (
        "final/autocast.cnn.cold.waste autocast_no_cache (trace.json.gz)",
        "tiny saving, 4x over",
    ),
    (
        "final/autocast.cnn.warm.waste autocast_no_cache (trace.json.gz)",
        "tiny saving, 4x over",
    ),
    // The untouched findings_check set: a CNN's autocast copies are 0.13%
    // of its peak, under the 1% a finding needs (no finding is right; the
    // rows fail only for naming none).
    (
        "findings_check/autocast.cnn.cold.waste autocast_no_cache (trace.json.gz)",
        "saving 0.13% of the peak: no finding",
    ),
    (
        "findings_check/autocast.cnn.cold.waste autocast_no_cache (snapshot.pickle.gz)",
        "saving 0.13% of the peak: no finding",
    ),
    (
        "findings_check/autocast.cnn.warm.waste autocast_no_cache (trace.json.gz)",
        "saving 0.13% of the peak: no finding",
    ),
    (
        "findings_check/autocast.cnn.warm.waste autocast_no_cache (snapshot.pickle.gz)",
        "saving 0.13% of the peak: no finding",
    ),
];

/// Rows whose prediction passes but whose baseline does not name the
/// finding its lever fixes (within 10% of the true saving), each with why.
/// Each must still miss (so the list stays true).
const KNOWN_FINDING_MISSES: &[(&str, &str)] = &[
    // The Chrome trace ends one 512 KiB gradient's window at a tensor of
    // its size that backward made before the peak: 1.79 MiB of the true
    // 2.21 MiB (2.0% of the peak; the snapshot of the same run is exact).
    (
        "levers_fresh/train.gpt2.cold.waste zero_grad_set_to_none (trace.json.gz)",
        "one gradient's window ends early",
    ),
];

/// A problem with the finding rather than with the prediction.
fn is_finding_problem(problem: &str) -> bool {
    problem.starts_with("no finding for a true saving") || problem.starts_with("finding saves")
}

fn check(set: &str) {
    let rows = score(set);
    for (name, error, problems) in &rows {
        eprintln!(
            "{set}: {name}: error {:.2}% {}",
            error * 100.0,
            problems.join("; ")
        );
    }
    let mut failures = Vec::new();
    for (name, _, problems) in &rows {
        let key = format!("{set}/{name}");
        let known = KNOWN_MISSES.iter().any(|(n, _)| *n == key);
        let finding_known = KNOWN_FINDING_MISSES.iter().any(|(n, _)| *n == key);
        if finding_known && !problems.iter().any(|p| is_finding_problem(p)) {
            failures.push(format!(
                "{name}: listed as a known finding miss but names it"
            ));
        }
        let real: Vec<&String> = problems
            .iter()
            .filter(|p| !(finding_known && is_finding_problem(p)))
            .collect();
        match (known, real.is_empty()) {
            (false, false) => failures.push(format!("{name}: {problems:?}")),
            (true, true) => failures.push(format!("{name}: listed as a known miss but passes")),
            _ => {}
        }
    }
    for (lever, max_median, max_worst) in limits(set) {
        let errors: Vec<f64> = rows
            .iter()
            .filter(|r| r.0.split(' ').nth(1) == Some(lever))
            .filter(|r| {
                !KNOWN_MISSES
                    .iter()
                    .any(|(n, _)| *n == format!("{set}/{}", r.0))
            })
            .map(|r| r.1)
            .collect();
        if errors.is_empty() {
            continue;
        }
        let (med, worst) = (
            median(errors.clone()),
            errors.iter().cloned().fold(0.0, f64::max),
        );
        eprintln!(
            "{set}: {lever}: {} predictions, median error {:.2}%, worst {:.2}% of the peak",
            errors.len(),
            med * 100.0,
            worst * 100.0
        );
        if med > *max_median || worst > *max_worst {
            failures.push(format!(
                "{lever}: median {:.2}% (limit {:.0}%), worst {:.2}% (limit {:.0}%)",
                med * 100.0,
                max_median * 100.0,
                worst * 100.0,
                max_worst * 100.0
            ));
        }
    }
    assert!(failures.is_empty(), "{set}:\n{}", failures.join("\n"));
}

#[test]
fn tuned_pairs_come_true() {
    check("tuned");
}

/// The set kept apart: recorded after the models above were chosen, with
/// other seeds, shapes and models (TinyLM with 4 blocks, a wider MLP, a
/// Llama from a config), and never tuned on.
#[test]
fn untuned_pairs_come_true() {
    check("untuned");
}

/// No false alarms: the recording matrix (`sample_traces/matrix/`: training
/// with four optimizers, accumulation, a CNN, Hugging Face training and
/// `generate()`, inference under `inference_mode`; cold and warm; with and
/// without stacks) and the older samples get no finding, but its DDP runs
/// without bucket views, whose buckets copy the gradients: those get
/// `ddp_bucket_copies_gradients` and nothing else wherever the trace shows
/// the bucket (`ddp_buckets.rs` checks what its fix predicts); their CPU
/// traces recorded warm do not (the bucket predates them).
#[test]
fn clean_runs_get_no_finding() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in [root.clone(), root.join("matrix")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.to_string_lossy().into_owned();
            if name.ends_with(".trace.json.gz") || name.ends_with(".snapshot.pickle.gz") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(files.len() > 50, "{} files", files.len());
    let mut alarms = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let copies = name.starts_with("ddp.") || name.starts_with("ddp_buckets.");
        // A warm CPU trace (`…stack.trace.json.gz`; GPU-like copies end in
        // `gpulike.trace.json.gz`) holds nothing from before recording.
        let shows_bucket = !(name.contains(".warm.") && name.ends_with("stack.trace.json.gz"));
        let expected: &[&str] = if copies && shows_bucket {
            &["ddp_bucket_copies_gradients"]
        } else {
            &[]
        };
        let kinds: Vec<&str> = analyze(path, &[])
            .devices
            .iter()
            .flat_map(|d| d.findings.iter().map(|f| f.kind.as_str()))
            .collect();
        if kinds != expected {
            alarms.push(format!(
                "{}: {kinds:?}, expected {expected:?}",
                path.display()
            ));
        }
    }
    assert!(alarms.is_empty(), "{}", alarms.join("\n"));
}

/// The plan tries the findings' fixes first (they cost nothing), one at a
/// time until the peak fits, and its numbers are the what-if's.
#[test]
fn the_plan_fixes_findings_first_with_the_what_if_numbers() {
    let (dir, _) = pairs("tuned");
    let path = dir.join("kept_graph.tinylm.warm.waste.snapshot.pickle.gz");
    let mut options = AnalyzeOptions::default();
    options.plan.budget = Some(8 << 20);
    options.plan.what_if = vec!["free_kept_graph".into(), "inference_mode".into()];
    let report = memcut::analyze_path(&path, &options).unwrap();
    let d = &report.devices[0];
    let plan = d.plan.as_ref().unwrap();
    let levers: Vec<&str> = plan.steps.iter().map(|s| s.lever.as_str()).collect();
    assert_eq!(levers, ["free_kept_graph", "inference_mode"]);
    assert_eq!(plan.verdict, memcut::report::Verdict::FitsAfterCuts);
    let what_if = d.what_if.as_ref().unwrap();
    assert_eq!(plan.estimated_peak_bytes, what_if.peak_allocated_bytes);
    assert_eq!(
        plan.steps[0].peak_after_bytes,
        d.findings[0].peak_after_bytes
    );
    assert!(!plan.steps[0].estimate && plan.steps[1].estimate);
    // A budget the first fix meets stops there.
    options.plan.budget = Some(20 << 20);
    let report = memcut::analyze_path(&path, &options).unwrap();
    let plan = report.devices[0].plan.as_ref().unwrap();
    let levers: Vec<&str> = plan.steps.iter().map(|s| s.lever.as_str()).collect();
    assert_eq!(levers, ["free_kept_graph"]);
}

/// The what-if's curve is in the report on the timeline's points, drawn
/// over the categories in the HTML chart, and never above the curve it
/// comes from.
#[test]
fn the_what_if_curve_is_plotted_over_the_timeline() {
    let (dir, _) = pairs("tuned");
    let report = analyze(
        &dir.join("kept_graph.tinylm.warm.waste.trace.json.gz"),
        &["free_kept_graph"],
    );
    let d = &report.devices[0];
    let w = d.what_if.as_ref().unwrap();
    assert_eq!(w.series.len(), d.timeline.x.len());
    for (i, after) in w.series.iter().enumerate() {
        let before: u64 = d.timeline.series.values().map(|s| s[i]).sum();
        assert!(*after <= before, "point {i}: {after} > {before}");
    }
    assert_eq!(w.series.iter().max(), Some(&w.peak_allocated_bytes));
    let html = memcut::render(&report, memcut::OutputFormat::Html);
    assert!(html.contains("<polyline class=\"what-if\""));
    assert!(html.contains("allocated with free_kept_graph"));
}

/// The set recorded last, after every model above was settled, with other
/// seeds and shapes and an architecture neither set above has (BERT from
/// a config, GPT-2 wider, a wider MLP): looked at once, for the report.
#[test]
fn fresh_pairs_come_true() {
    check("fresh");
}

/// The final set (a CNN, a deeper Llama, a TinyLM of other shapes; seeds
/// 30-32), recorded after everything above and reported untouched.
#[test]
fn final_pairs_come_true() {
    check("final");
}

/// Recorded in the sixth session after inference_mode learnt expressions,
/// operands beside each other and small graphs (BERT, GPT-2, Llama, a
/// two-layer MLP, a CNN; seeds 100-104; all four findings' workloads):
/// scored once, untouched, the report of record for the findings.
#[test]
fn findings_check_pairs_come_true() {
    check("findings_check");
}

/// The catalogue's levers on a set recorded at the end of the sixth
/// session (GPT-2 with SGD, Llama with AdamW, a CNN with Adam, BERT with
/// AdamW; seeds 120-123): scored once, untouched.
#[test]
fn levers_check_pairs_come_true() {
    check("levers_check");
}

/// A hand-written AdamW updating its moments out of place, and the same
/// optimizer updating them in place (`--oop_check --only train_oop`: a wide
/// MLP and a TinyLM, seeds 140-141, cold and warm), recorded once the
/// `optimizer_state_replaced_out_of_place` finding was written from two
/// corpus snapshots: scored once, untouched.
#[test]
fn optimizer_state_pairs_come_true() {
    check("oop_check");
}

/// Other hand-written optimizers (`--oop_fresh --only train_oop`: SGD with
/// momentum on a wide MLP and a TinyLM, Lion on GPT-2; seeds 240-242;
/// cold and warm), recorded in the tenth session. Scored once: the MLP's
/// cold rows named nothing (true saving 6.6% of the peak: the first step's
/// `zeros_like` momentum, made right before its expression, read as an
/// operand) and two warm snapshots panicked (the next interval, one from
/// before the recording, started before the state tensor). Both mended,
/// so no longer untouched: the MLP's cold rows are exact.
#[test]
fn hand_written_optimizer_pairs_come_true() {
    check("oop_fresh");
}

/// Adam with bias correction written by hand (`--oop_untouched --only
/// train_oop`: a wide MLP and Llama; seeds 250-251; cold and warm),
/// recorded after oop_fresh was looked at and scored once, untouched: the
/// step is not where either peaks in place or out of place (true savings
/// 0.02% and 0), and no run names the finding.
#[test]
fn untouched_hand_written_optimizer_pairs_come_true() {
    check("oop_untouched");
}

/// `zero_grad_set_to_none` pairs only, recorded after the
/// `gradients_kept_through_forward` finding was settled on the sets above
/// (TinyLM with SGD, an MLP with Adam, Llama with Adam, a CNN with AdamW,
/// BERT with SGD; seeds 130-134; cold and warm): scored once, untouched.
#[test]
fn grads_check_pairs_come_true() {
    check("levers_grads_check");
}

/// generate() with long prompts: half the new tokens leaves the prompt's
/// forward, and its peak, as they are.
#[test]
fn long_prompt_pairs_come_true() {
    check("levers_long_prompt");
}

/// generate() recorded after kv_cache_limit was modelled from the run.
#[test]
fn kv_check_pairs_come_true() {
    check("levers_kv_check");
}

/// nn.Sequential models recorded after `input = module(input)` was modelled.
#[test]
fn sequential_pairs_come_true() {
    check("sequential_check");
}

/// Catalogue levers, each recorded applied for real on clean training and
/// inference runs (TinyLM, an MLP, GPT-2 from a config; cold and warm).
#[test]
fn lever_pairs_come_true() {
    check("levers");
}

/// The catalogue levers' set kept apart (`--levers_untuned`), reported
/// apart: its misses are listed in [`KNOWN_MISSES`].
#[test]
fn untuned_lever_pairs_come_true() {
    check("levers_untuned");
}

/// The catalogue levers' set recorded last (`--levers_fresh`: BERT, a
/// deeper CNN with SGD, GPT-2, an MLP with SGD, Llama with Adam; seeds
/// 60-64), after the lever models above were settled: its first scores are
/// in docs/accuracy.md; the changes made after it are listed there.
#[test]
fn fresh_lever_pairs_come_true() {
    check("levers_fresh");
}

/// Every catalogue lever of training and inference on a set recorded at
/// the start of the eighth session, after the seventh's changes (GPT-2
/// with Adam, Llama with SGD, a CNN with AdamW, an MLP with AdamW; seeds
/// 150-153; cold and warm): scored once, untouched.
#[test]
fn final_lever_pairs_come_true() {
    check("levers_final");
}

/// Two levers applied together where one changes what the other does
/// (`zero_grad_set_to_none` then `halve_micro_batch` on runs keeping their
/// gradients: GPT-2 with AdamW, an MLP with SGD; seeds 230-231): recorded to
/// check the plan's usual pair of steps on such runs, then modelled.
#[test]
fn combined_lever_pairs_come_true() {
    check("combined");
}

/// Every catalogue lever of training and inference on a set recorded in
/// the tenth session, after the plan priced halve_micro_batch's held
/// gradients and a new version's start stopped counting as a phase (GPT-2
/// with AdamW, Llama with SGD, a CNN with Adam, BERT with Adam, an MLP with
/// SGD; set_to_none on three of them; seeds 220-224; cold and warm):
/// scored once, untouched.
#[test]
fn tenth_lever_pairs_come_true() {
    check("levers_tenth");
}

/// bf16 pairs recorded after attention's math path was modelled (seeds
/// 70-73): the check that the model was not fitted to the set it came from.
#[test]
fn bf16_pairs_come_true() {
    check("levers_bf16");
}

/// The plan's steps are what-ifs: on every training baseline of the
/// catalogue sets, asked to halve its peak, each step's peak is the
/// what-if's peak of the steps so far, checkpointing (modelled from the
/// run's blocks) and halving the micro-batch where gradients are freed
/// between steps (the first micro-batch's held beside its factor) included.
#[test]
fn plan_steps_are_the_what_if_peaks() {
    let (mut checkpointed, mut kv_limited, mut held) = (0, 0, 0);
    for set in [
        "levers",
        "levers_untuned",
        "levers_long_prompt",
        "levers_set_to_none",
        "levers_set_to_none_check",
        "levers_tenth",
        "combined",
    ] {
        let (dir, pairs) = pairs(set);
        let mut baselines: Vec<&str> = pairs
            .iter()
            .filter(|p| p.baseline.starts_with("train.") || p.baseline.starts_with("generate."))
            .map(|p| p.baseline.as_str())
            .collect();
        baselines.dedup();
        for base in baselines {
            for format in ["trace.json.gz", "snapshot.pickle.gz"] {
                let path = dir.join(format!("{base}.{format}"));
                for order in [memcut::plan::Order::Cheapest, memcut::plan::Order::Largest] {
                    let mut options = AnalyzeOptions::default();
                    options.plan.budget_percent_of_peak = Some(50.0);
                    options.plan.order = order;
                    let report = memcut::analyze_path(&path, &options).unwrap();
                    let plan = report.devices[0].plan.as_ref().unwrap();
                    let mut levers = Vec::new();
                    for step in &plan.steps {
                        levers.push(step.lever.as_str());
                        checkpointed += usize::from(step.lever == "activation_checkpointing");
                        kv_limited += usize::from(step.lever == "kv_cache_limit");
                        let w = analyze(&path, &levers);
                        let w = w.devices[0].what_if.as_ref().unwrap();
                        held += usize::from(
                            step.lever == "halve_micro_batch"
                                && w.because
                                    .iter()
                                    .any(|b| b.contains("first one's gradients")),
                        );
                        assert_eq!(
                            step.peak_after_bytes, w.peak_allocated_bytes,
                            "{set}/{base}.{format} {order:?}: {levers:?}"
                        );
                    }
                }
            }
        }
    }
    assert!(checkpointed > 0, "no plan used checkpointing");
    assert!(kv_limited > 0, "no plan used kv_cache_limit");
    assert!(held > 0, "no plan held the first micro-batch's gradients");
}

/// A warm profile-made snapshot of a training run that keeps its
/// gradients: the model's state from before the recording has no frames,
/// and is read from its in-place updates (backward's adds into the kept
/// gradients, then the optimizer step's order), not left `unknown`.
#[test]
fn warm_snapshots_name_the_state_from_before_recording() {
    let mut checked = 0;
    for set in [
        "levers",
        "levers_check",
        "levers_untuned",
        "levers_grads_check",
    ] {
        let (dir, pairs) = pairs(set);
        let mut baselines: Vec<&str> = pairs
            .iter()
            .map(|p| p.baseline.as_str())
            .filter(|b| b.starts_with("train.") && b.contains(".warm."))
            .collect();
        baselines.sort_unstable();
        baselines.dedup();
        for b in baselines {
            let path = dir.join(format!("{b}.snapshot.pickle.gz"));
            let r = analyze(&path, &[]);
            let d = &r.devices[0];
            let named = d
                .before_recording
                .iter()
                .find(|p| p.rule == "inferred_gradient_added_into_in_backward");
            assert!(named.is_some(), "{set}/{b}: {:?}", d.before_recording);
            let unknown = d.peak.attribution.unknown_bytes;
            assert!(
                unknown * 100 <= d.peak.allocated_bytes,
                "{set}/{b}: {unknown} of {} unknown at the peak",
                d.peak.allocated_bytes
            );
            checked += 1;
        }
    }
    assert!(checked >= 12, "{checked} warm training snapshots");
}

/// The next step's peak predicted from a recording of the first (the
/// optimizer's state made lazily in it): each baseline of `set` records one
/// step, its pair the same run over two steps. Both formats: the prediction
/// within `worst` of the second recording's peak (as a share of it), the
/// median within `median`; none where the second step's peak is within 1%
/// of the first's; the two-step recording predicts nothing (its second
/// step shows what the first left).
fn check_next_step(set: &str, median_limit: f64, worst: f64) {
    let (dir, pairs) = pairs(set);
    let mut errors = Vec::new();
    let mut failures = Vec::new();
    for p in &pairs {
        assert_eq!(p.lever, "two_steps", "{set}: {}", p.baseline);
        for format in ["trace.json.gz", "snapshot.pickle.gz"] {
            let base = analyze(&dir.join(format!("{}.{format}", p.baseline)), &[]);
            let two = analyze(&dir.join(format!("{}.{format}", p.fixed)), &[]);
            let (b, t) = (&base.devices[0], &two.devices[0]);
            if format == "trace.json.gz" {
                assert_eq!(b.peak.allocated_bytes, p.baseline_peak, "{}", p.baseline);
                assert_eq!(t.peak.allocated_bytes, p.fixed_peak, "{}", p.fixed);
            }
            let truth = t.peak.allocated_bytes;
            let row = format!("{} ({format})", p.baseline);
            if t.next_step.is_some() {
                failures.push(format!("{} ({format}) predicts a next step", p.fixed));
            }
            // A next step within 1% of the recorded peak is said nothing of.
            let grows =
                truth.saturating_sub(b.peak.allocated_bytes) * 100 >= b.peak.allocated_bytes;
            let Some(n) = &b.next_step else {
                if grows {
                    failures.push(format!(
                        "{row}: no prediction (recorded {}, true next step {truth})",
                        b.peak.allocated_bytes
                    ));
                } else {
                    eprintln!(
                        "{set}: {row}: recorded {}, true {truth}: none needed, none said",
                        b.peak.allocated_bytes
                    );
                }
                continue;
            };
            let error = n.peak_allocated_bytes.abs_diff(truth) as f64 / truth as f64;
            eprintln!(
                "{set}: {row}: recorded {}, predicted {}, true {truth}: error {:.2}%",
                b.peak.allocated_bytes,
                n.peak_allocated_bytes,
                error * 100.0
            );
            if error > worst {
                failures.push(format!("{row}: error {:.2}%", error * 100.0));
            }
            errors.push(error);
        }
    }
    if !errors.is_empty() {
        summarize(set, "next step", &errors, median_limit, &mut failures);
    }
    assert!(failures.is_empty(), "{set}:\n{}", failures.join("\n"));
}

/// Prints a set's median and worst error and fails a median over `limit`.
fn summarize(set: &str, what: &str, errors: &[f64], limit: f64, failures: &mut Vec<String>) {
    let med = median(errors.to_vec());
    let max = errors.iter().cloned().fold(0.0, f64::max);
    eprintln!(
        "{set}: {what}: {} predictions, median error {:.2}%, worst {:.2}% of the true peak",
        errors.len(),
        med * 100.0,
        max * 100.0
    );
    if med > limit {
        failures.push(format!("median error {:.2}%", med * 100.0));
    }
}

/// The set the prediction was written on (TinyLM with AdamW, an MLP with
/// SGD and momentum, GPT-2 with Adam and `set_to_none=True`; seeds
/// 160-162).
#[test]
fn next_step_predictions_come_true() {
    check_next_step("next_step", 0.01, 0.02);
}

/// Recorded after the prediction was written (Llama with AdamW, BERT with
/// SGD, a CNN with Adam, an MLP with AdamW, TinyLM with SGD; seeds
/// 170-174) and scored once: 7 predictions exact to 0.01%; BERT's snapshot
/// said nothing (a parameter's in-place update in the step starts a new
/// version with its forward frames: read as a forward after the step, so
/// as a recording of more than one step); the MLP's second step peaks as
/// its first (the optimizer step's temporaries), where nothing is right.
/// Since the fix (new versions are not new allocations): 8 of 8 within
/// 0.01%. The 3% / 10%.
#[test]
fn next_step_check_predictions_come_true() {
    check_next_step("next_step_check", 0.03, 0.10);
}

/// A plan on a first step's recording whose next step is predicted is the
/// next step's (the run's peak): with a budget between the recorded peak
/// and the next step's it cuts, above the next step's it fits, and either
/// way it says whose plan it is.
#[test]
fn a_plan_on_a_first_step_is_the_next_steps() {
    let (dir, _) = pairs("next_step");
    let path = dir.join("first_step.tinylm.cold.waste.trace.json.gz");
    let plan_for = |budget: u64| {
        let mut options = AnalyzeOptions::default();
        options
            .plan
            .set_budget_and_headroom(
                Some(memcut::plan::parse_budget(&budget.to_string()).unwrap()),
                memcut::plan::parse_headroom("0").unwrap(),
            )
            .unwrap();
        let report = memcut::analyze_path(&path, &options).unwrap();
        let d = &report.devices[0];
        (
            d.peak.allocated_bytes,
            d.next_step.as_ref().unwrap().peak_allocated_bytes,
            d.plan.clone().unwrap(),
        )
    };
    let (recorded, next, _) = plan_for(1 << 30);
    let between = (recorded + next) / 2;
    let (_, _, plan) = plan_for(between);
    assert_eq!(plan.verdict.as_str(), "fits_after_cuts", "{}", plan.reason);
    assert!(
        plan.reason
            .contains("planned for the next step, predicted at"),
        "{}",
        plan.reason
    );
    let (_, _, roomy) = plan_for(next + (next / 10));
    assert_eq!(roomy.verdict.as_str(), "fits", "{}", roomy.reason);
    assert!(
        roomy.reason.contains("planned for the next step"),
        "{}",
        roomy.reason
    );
}

/// The what-if on a first step's recording is the next step's: each
/// catalogue lever of training asked for on the first step's recording,
/// against the same run recorded over two steps with the lever really
/// applied (`generate_pairs.py --next_step_levers*`, `two_steps+LEVER`).
/// Error: |predicted − true peak with the lever| / the true two-step peak.
fn check_next_step_levers(set: &str, median_limit: f64, worst: f64) {
    let (dir, pairs) = pairs(set);
    let mut errors = Vec::new();
    let mut failures = Vec::new();
    for p in pairs.iter().filter(|p| p.lever.starts_with("two_steps+")) {
        let lever = &p.lever["two_steps+".len()..];
        let two = p.fixed.replace(&p.lever, "two_steps");
        for format in ["trace.json.gz", "snapshot.pickle.gz"] {
            let base = analyze(&dir.join(format!("{}.{format}", p.baseline)), &[lever]);
            let truth_base = analyze(&dir.join(format!("{two}.{format}")), &[]).devices[0]
                .peak
                .allocated_bytes;
            let truth = analyze(&dir.join(format!("{}.{format}", p.fixed)), &[]).devices[0]
                .peak
                .allocated_bytes;
            let w = base.devices[0].what_if.as_ref().unwrap();
            let error = w.peak_allocated_bytes.abs_diff(truth) as f64 / truth_base as f64;
            let row = format!("{} {lever} ({format})", p.baseline);
            eprintln!(
                "{set}: {row}: predicted {}, true {truth} (two steps {truth_base}): error {:.2}%",
                w.peak_allocated_bytes,
                error * 100.0
            );
            if error > worst {
                failures.push(format!("{row}: error {:.2}%", error * 100.0));
            }
            errors.push(error);
        }
    }
    assert!(!errors.is_empty(), "{set}: no pairs");
    summarize(
        set,
        "next step with a lever",
        &errors,
        median_limit,
        &mut failures,
    );
    assert!(failures.is_empty(), "{set}:\n{}", failures.join("\n"));
}

/// The set the next step's what-if was built on (TinyLM with AdamW, an MLP
/// with Adam, GPT-2 with SGD; seeds 190-192). The MLP's `fused_optimizer`
/// was 6.7% off while a next step was priced only when its peak was higher:
/// Adam's first step is the MLP's peak (the state it made with the step's
/// temporaries), `fused=True` removes those, and the second step's
/// backward, with the state alive, is then the run's peak. The next step is
/// priced whenever predicted since (0.01%); worst 1.98%.
#[test]
fn next_step_lever_predictions_come_true() {
    check_next_step_levers("next_step_levers", 0.01, 0.03);
}

/// Recorded with the set above, kept apart and scored once when the model
/// was settled (Llama with Adam, BERT with AdamW, a CNN with SGD, TinyLM
/// with SGD and `set_to_none=True`; seeds 195-198): 38 of 40 predictions
/// within 2.75% of the peak, median 0.04%. The miss, TinyLM's
/// `halve_micro_batch` (18.4%: with `set_to_none=True` the first
/// micro-batch's gradients stay alive through the second one's), is now
/// modelled (`levers_set_to_none`), so this set is no longer untouched for
/// that lever: 0.01% since.
#[test]
fn next_step_lever_check_predictions_come_true() {
    check_next_step_levers("next_step_levers_check", 0.03, 0.10);
}

/// `halve_micro_batch` where zero_grad frees the gradients, the set its
/// held gradients were modelled on (GPT-2 with AdamW, an MLP with SGD,
/// Llama with Adam; seeds 200-202; cold and warm).
#[test]
fn set_to_none_micro_batch_pairs_come_true() {
    check("levers_set_to_none");
}

/// Recorded after that model (BERT with AdamW, a CNN with Adam, TinyLM with
/// SGD, GPT-2 with Adam; seeds 210-213; cold and warm): scored once, 15 of
/// 16 within 0.01%. The miss, BERT's cold profile-made snapshot (12.0%),
/// read an optimizer step's in-place update of a tensor first made in
/// forward as a forward, so its gradients, freed after the step, as held
/// through one; a new version's start is no phase since
/// (`classify::PhasePositions::of`): 0.01%.
#[test]
fn set_to_none_micro_batch_check_pairs_come_true() {
    check("levers_set_to_none_check");
}

/// Recorded after `next_step_check` was looked at and its BERT snapshot
/// fixed (GPT-2 with SGD, BERT with Adam and `set_to_none=True`, Llama with
/// SGD and `set_to_none=True`, a CNN with AdamW, TinyLM with Adam; seeds
/// 180-184): scored once, untouched.
#[test]
fn next_step_fresh_predictions_come_true() {
    check_next_step("next_step_fresh", 0.03, 0.10);
}
