//! Every trace of the corpus reads (or fails with "no memory events"),
//! the recovery pass reads the valid ones as the fast path does, and the
//! table it prints is the evidence.

use super::recovered;
use crate::error::Error;
use crate::formats::chrome::collect::parse_strict;
use crate::formats::chrome::parse_chrome_trace;
use crate::model::Level;
use crate::test_support::{corpus_dir, read_maybe_gz};

fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains(".json"))
        {
            out.push(p);
        }
    }
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn corpus_traces() {
    let dir = corpus_dir();
    let mut files = Vec::new();
    walk(&dir, &mut files);
    assert!(!files.is_empty());
    let mut rows = Vec::new();
    let (mut with_mem, mut without) = (0, 0);
    for path in &files {
        let rel = path.strip_prefix(&dir).unwrap().display().to_string();
        let bytes = read_maybe_gz(path);
        let t0 = std::time::Instant::now();
        let result = parse_chrome_trace(&bytes);
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let path_taken = if parse_strict(&bytes).is_ok() {
            "strict"
        } else {
            "repaired"
        };
        let mb = bytes.len() as f64 / 1e6;
        match result {
            Ok(t) => {
                with_mem += 1;
                if path_taken == "strict" {
                    assert_eq!(
                        recovered(&bytes),
                        t,
                        "{rel}: recovery differs from the fast path"
                    );
                }
                let n: usize = t.devices.iter().map(|d| d.events.len()).sum();
                assert!(n >= 1, "{rel}");
                let mut peaks = Vec::new();
                for d in &t.devices {
                    if d.reported.is_empty() {
                        peaks.push(format!("{}: -", d.device));
                        continue;
                    }
                    assert_eq!(d.reported.len(), d.events.len());
                    let max = d.reported.iter().filter_map(|r| r.allocated).max();
                    if let Some(max) = max {
                        assert!(max > 0, "{rel} {}", d.device);
                    }
                    peaks.push(format!(
                        "{}: {}",
                        d.device,
                        max.map_or("-".to_string(), |m| m.to_string())
                    ));
                }
                let devs: Vec<_> = t.devices.iter().map(|d| d.device.as_str()).collect();
                if rel.contains("df_index_resolver") {
                    assert!(devs.contains(&"cuda:1"), "{devs:?}");
                }
                if rel.contains("tracelens/tests/traces/mi300") {
                    assert!(devs.contains(&"hip:0"), "{devs:?}");
                }
                for w in t.diagnostics.iter().filter(|d| d.level == Level::Warning) {
                    eprintln!("  {rel}: warning: {}", w.message);
                }
                rows.push(format!(
                    "| {rel} | {mb:.1} | {} | {n} | {} | {} | {path_taken} | {ms:.1} |",
                    devs.join(", "),
                    peaks.join("; "),
                    t.sites.len(),
                ));
            }
            Err(Error::NoMemoryEvents) => {
                without += 1;
                rows.push(format!(
                    "| {rel} | {mb:.1} | no memory events | 0 | - | - | {path_taken} | {ms:.1} |"
                ));
            }
            Err(e) => panic!("{rel}: {e}"),
        }
    }
    println!(
        "| file | MB | devices | memory events | max Total Allocated (bytes) | sites | JSON | parse ms |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!("{r}");
    }
    println!("{with_mem} traces with memory events, {without} without");
    assert!(
        with_mem >= 12,
        "expected the 12 corpus traces with memory events"
    );
}

/// The Chrome-trace shapes of issue 16's benchmark set (`benches/shapes.rs`,
/// `scripts/bench_inputs.sh`) are read by the fast path (one strict
/// `serde_json` pass), not by token repair or recovery: a change that sends
/// one of them down a slower pass fails here.
#[test]
fn benchmark_trace_shapes_take_the_strict_path() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let samples = root.join("sample_traces");
    let mut seen = 0;
    for entry in std::fs::read_dir(&samples).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".trace.json.gz") {
            assert!(
                parse_strict(&read_maybe_gz(&path)).is_ok(),
                "{}",
                path.display()
            );
            seen += 1;
        }
    }
    assert!(seen > 0, "no sample traces in {}", samples.display());
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn benchmark_trace_shapes_take_the_strict_path_on_corpus_traces() {
    let dir = corpus_dir();
    for rel in [
        "kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
        "tracelens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
    ] {
        assert!(
            parse_strict(&read_maybe_gz(&dir.join(rel))).is_ok(),
            "{rel}"
        );
    }
}
