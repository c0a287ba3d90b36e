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

/// The peak a report's finding of `run` predicts with its fix applied, and
/// the peak it reports.
fn predicted(run: &str, suffix: &str) -> (u64, Option<u64>) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces/matrix")
        .join(format!("{run}{suffix}"));
    let report = memcut::analyze_path(&path, &AnalyzeOptions::default()).unwrap();
    let d = &report.devices[0];
    let after = d
        .findings
        .iter()
        .find(|f| f.kind.as_str() == "ddp_bucket_copies_gradients")
        .map(|f| f.peak_after_bytes);
    (d.peak.allocated_bytes, after)
}

/// `ddp_bucket_copies_gradients` (fix: `gradient_as_bucket_view=True`)
/// predicts the peak of the same run recorded with bucket views: the
/// matrix's `ddp` and `ddp_bucket_view` runs are that pair, cold and warm,
/// as the GPU-like trace and the snapshot. (On the fresh set's pair, not
/// looked at while building it: 1,972,804 B predicted 1,652,804 B, its
/// bucket-view run's peak, in every format.) No finding where the gradients
/// are the buckets.
#[test]
fn the_bucket_view_fix_comes_true() {
    for start in ["cold", "warm"] {
        for suffix in [".gpulike.trace.json.gz", ".snapshot.pickle.gz"] {
            let (_, after) = predicted(&format!("ddp.{start}.stack"), suffix);
            let (actual, none) = predicted(&format!("ddp_bucket_view.{start}.stack"), suffix);
            assert_eq!(after, Some(actual), "{start}{suffix}");
            assert_eq!(none, None, "{start}{suffix}");
        }
    }
}
