//! DistributedDataParallel's gradient buckets from before recording, in a
//! Chrome trace written as a GPU reports it (the matrix's `gpulike` copies:
//! what existed before recording is one untracked lump): the tensors the
//! first recorded step's all-reduces reduce (`gloo:all_reduce`,
//! `record_shapes`), made by no allocation while recording, are `gradient`
//! (`inferred_ddp_gradient_bucket_all_reduced`). The rule was built on
//! `ddp.warm.stack`; on the fresh set's DDP runs (`generate_matrix.py
//! --variant fresh36 --seed 3600`, not committed, not looked at while
//! building it) it names their 320,000-byte bucket too. Not where the bucket is made while recording (`ddp.cold`), nor with
//! `gradient_as_bucket_view`, whose buckets are the gradients kept between
//! steps.

use std::path::Path;

use memcut::{AnalyzeOptions, Category};

const RULE: &str = "inferred_ddp_gradient_bucket_all_reduced";

/// Bytes from before recording the rule names, on the matrix run `run`.
fn bucket_bytes(run: &str) -> u64 {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces/matrix")
        .join(format!("{run}.gpulike.trace.json.gz"));
    let report = memcut::analyze_path(&path, &AnalyzeOptions::default()).unwrap();
    report.devices[0]
        .before_recording
        .iter()
        .filter(|p| p.rule == RULE)
        .inspect(|p| assert_eq!(p.category, Category::Gradient, "{run}"))
        .map(|p| p.bytes)
        .sum()
}

#[test]
fn buckets_from_before_recording_are_the_all_reduced_tensors() {
    // MLP 128-256-256-10 in float32: 101,386 parameters, in one bucket, or
    // in two (33,024 + 68,362 elements) with `bucket_cap_mb=0.1`, each
    // all-reduced while a gradient larger than it is alive.
    for run in [
        "ddp.warm.stack",
        "ddp.warm.nostack",
        "ddp_buckets.warm.stack",
        "ddp_buckets.warm.nostack",
    ] {
        assert_eq!(bucket_bytes(run), 101_386 * 4, "{run}");
    }
    for run in [
        "ddp.cold.stack",
        "ddp_buckets.cold.stack",
        "ddp_bucket_view.warm.stack",
        "ddp_bucket_view.warm.nostack",
        "adamw.warm.stack",
    ] {
        assert_eq!(bucket_bytes(run), 0, "{run}");
    }
}
