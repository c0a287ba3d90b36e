//! The same real run recorded two ways — the Kineto Chrome trace and the
//! `_profile_to_snapshot` snapshot (sample_traces/generate.py) — must give
//! the same peak and the same category for every allocation live at it.

use std::collections::BTreeMap;
use std::path::Path;

use memcut::internals::Builtin;
use memcut::AnalyzeOptions;
use memcut::Category;

const RUNS: &[&str] = &[
    "train_adamw",
    "train_sgd_momentum",
    "grad_accum",
    "checkpointing",
    "prebuilt_model",
    "kv_cache_decode",
];

fn cpu_peak(path: &Path) -> memcut::report::Peak {
    let report = memcut::analyze_path(path, &AnalyzeOptions::new()).unwrap();
    report
        .devices
        .into_iter()
        .find(|d| d.device == "cpu")
        .expect("cpu device")
        .peak
}

#[test]
fn chrome_trace_and_snapshot_of_one_run_agree() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
    for run in RUNS {
        let chrome = cpu_peak(&dir.join(format!("{run}.trace.json.gz")));
        let snapshot = cpu_peak(&dir.join(format!("{run}.snapshot.pickle.gz")));
        // Memory that existed before profiling is invisible to the CPU
        // profiler's events but is in the snapshot's blocks: compare what both saw.
        let traced = |p: &memcut::report::Peak| -> BTreeMap<(u64, u64), Category> {
            p.allocations
                .iter()
                .filter(|a| !Builtin::from_name(&a.rule).is_some_and(Builtin::before_recording))
                .map(|a| ((a.addr, a.size), a.category))
                .collect()
        };
        let (c, s) = (traced(&chrome), traced(&snapshot));
        let c_bytes: u64 = c.keys().map(|k| k.1).sum();
        let s_bytes: u64 = s.keys().map(|k| k.1).sum();
        assert_eq!(c_bytes, s_bytes, "{run}: peak bytes traced in both");
        let mismatched: Vec<_> = c.iter().filter(|(k, cat)| s.get(k) != Some(cat)).collect();
        assert!(
            mismatched.is_empty(),
            "{run}: categories differ at {mismatched:?}"
        );
    }
}
