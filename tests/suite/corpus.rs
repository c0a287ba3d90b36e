//! The real-trace corpus in `../shared/corpus` (other people's files, never
//! committed here). Each test skips with a message when the folder is absent.

use crate::common;
use common::{corpus, read_maybe_gz};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memcut::{AnalyzeOptions, Category, Error};

fn files(dir: &Path, keep: &dyn Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if keep(&path.to_string_lossy()) {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Peaks from `scripts/replay_peak.py` (a plain Python replay in the
/// MemoryViz manner: frees of unseen addresses and live blocks never
/// allocated count from the start) on the same files.
const PYTHON_PEAKS: &[(&str, u64)] = &[
    ("cs336-bcrafton/memory_snapshot.pickle", 3849232640),
    ("cs336-magma27/memory_snapshot.pickle", 13923997700),
    (
        "cs336-nothanmin/memory_snapshot_forward.pickle",
        43754773506,
    ),
    (
        "cs336-nothanmin/memory_snapshot_forward_without_mixed.pickle",
        44087612420,
    ),
    ("cs336-silmont2000/mem_snapshot.pickle", 3249143816),
    (
        "cs336-silmont2000/memory_forward_bf16_128.pickle",
        779837440,
    ),
    (
        "cs336-silmont2000/memory_forward_fp32_128.pickle",
        556843008,
    ),
    (
        "cs336-wedsonlin/results/medium_1024_training_memory_snapshot.pickle",
        24207167496,
    ),
    (
        "cs336-wedsonlin/results/medium_128_inference_memory_snapshot.pickle",
        1736962048,
    ),
    (
        "cs336-wedsonlin/results/medium_128_training_memory_snapshot.pickle",
        7013335044,
    ),
    (
        "cs336-wedsonlin/results/medium_512_training_memory_snapshot.pickle",
        12426629128,
    ),
    ("decomfl/memory.pickle", 1783664516),
    ("flexgen-yiyi/1.3b_snapshot.pickle", 5692346376),
    ("flexgen-yiyi/log1/1.3b_snapshot.pickle", 809849328),
    ("flexgen-yiyi/oom_snapshot.pickle", 11840159744),
    ("sketchkv2/my_snapshot.pickle", 16380108176),
    ("verl/mem.pickle", 24886778000),
];

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn every_snapshot_pickle_matches_the_python_replay_peak() {
    let dir = corpus();
    let found = files(&dir, &|p| p.ends_with(".pickle"));
    assert_eq!(found.len(), PYTHON_PEAKS.len(), "corpus pickles changed");
    for (name, expected) in PYTHON_PEAKS {
        let report = memcut::analyze_path(&dir.join(name), &AnalyzeOptions::new())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(report.devices.len(), 1, "{name}");
        let peak = &report.devices[0].peak;
        assert_eq!(peak.allocated_bytes, *expected, "{name}");
        let categorised: u64 = peak
            .by_category
            .iter()
            .filter(|(c, _)| **c != memcut::Category::AllocatorCache)
            .map(|(_, b)| b)
            .sum();
        assert_eq!(
            categorised, peak.allocated_bytes,
            "{name}: categories sum to the peak"
        );
    }
}

/// Max `Total Allocated` per device, read independently of memcut's reader.
fn max_total_allocated(path: &Path) -> BTreeMap<String, u64> {
    let text = read_maybe_gz(path);
    let json: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let events = json
        .get("traceEvents")
        .and_then(|e| e.as_array())
        .cloned()
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for e in events {
        if e.get("name").and_then(|n| n.as_str()) != Some("[memory]") {
            continue;
        }
        let args = &e["args"];
        let Some(total) = args.get("Total Allocated").and_then(|v| v.as_u64()) else {
            continue;
        };
        let kind = args
            .get("Device Type")
            .and_then(|v| v.as_i64())
            .unwrap_or(0);
        let id = args.get("Device Id").and_then(|v| v.as_i64()).unwrap_or(-1);
        let name = match kind {
            0 => "cpu".to_owned(),
            1 => format!("cuda:{id}"),
            6 => format!("hip:{id}"),
            k => format!("type{k}:{id}"),
        };
        let slot = out.entry(name).or_insert(0u64);
        *slot = (*slot).max(total);
    }
    out
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn chrome_traces_with_memory_peak_at_the_allocator_total() {
    let dir = corpus();
    let mut with_memory = 0;
    let mut without = 0;
    for path in files(&dir, &|p| p.contains(".json")) {
        let name = path.strip_prefix(&dir).unwrap().display().to_string();
        match memcut::analyze_path(&path, &AnalyzeOptions::new()) {
            Err(Error::NoMemoryEvents) => without += 1,
            Err(e) => panic!("{name}: {e}"),
            Ok(report) => {
                with_memory += 1;
                let totals = max_total_allocated(&path);
                for d in &report.devices {
                    if let Some(total) = totals.get(&d.device) {
                        assert_eq!(d.peak.allocated_bytes, *total, "{name} {}", d.device);
                    }
                }
                if name.contains("df_index_resolver") {
                    assert!(
                        report.devices.iter().any(|d| d.device == "cuda:1"),
                        "{name}"
                    );
                }
                if name.contains("mi300") || name.contains("inference/") {
                    assert!(
                        report.devices.iter().any(|d| d.device.starts_with("hip:")),
                        "{name}"
                    );
                }
            }
        }
    }
    assert_eq!((with_memory, without), (12, 20));
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn memory_timeline_export_is_categorised() {
    let dir = corpus();
    let path = dir.join("hta/tests/data/memory_analysis/memory_timeline.raw.gz");
    let report = memcut::analyze_path(&path, &AnalyzeOptions::new()).unwrap();
    assert_eq!(report.source.format, "memory_timeline");
    let by = &report.devices[0].peak.by_category;
    let top = by.iter().max_by_key(|(_, b)| **b).unwrap().0;
    assert_eq!(*top, memcut::Category::Activation);
}

/// The main device's `unknown` share at the peak, per corpus file with
/// memory events (peak ≥ 1 MiB), as a ceiling in % (today's share rounded
/// up to the next 5%, at most 30% as issue 11 asks), and its largest
/// category at the peak, by the end of its path.
#[rustfmt::skip]
const UNKNOWN_CEILINGS: &[(&str, u32, Category)] = &[
    ("cs336-bcrafton/memory_snapshot.pickle",                                 5, Category::OptimizerState),
    ("cs336-magma27/memory_snapshot.pickle",                                 10, Category::Activation),
    ("cs336-nothanmin/memory_snapshot_forward.pickle",                        5, Category::OptimizerState),
    ("cs336-nothanmin/memory_snapshot_forward_without_mixed.pickle",          5, Category::OptimizerState),
    ("cs336-silmont2000/mem_snapshot.pickle",                                20, Category::AutogradDetail),
    ("cs336-silmont2000/memory_forward_bf16_128.pickle",                      5, Category::Parameter),
    ("cs336-silmont2000/memory_forward_fp32_128.pickle",                      5, Category::Parameter),
    ("edsonlin/results/medium_1024_training_memory_snapshot.pickle",          5, Category::Activation),
    ("edsonlin/results/medium_128_inference_memory_snapshot.pickle",          5, Category::Parameter),
    ("wedsonlin/results/medium_128_training_memory_snapshot.pickle",          5, Category::OptimizerState),
    ("wedsonlin/results/medium_512_training_memory_snapshot.pickle",          5, Category::Activation),
    ("decomfl/memory.pickle",                                                20, Category::Parameter),
    ("flexgen-yiyi/1.3b_snapshot.pickle",                                     5, Category::Parameter),
    ("flexgen-yiyi/log1/1.3b_snapshot.pickle",                                5, Category::Parameter),
    ("flexgen-yiyi/oom_snapshot.pickle",                                      5, Category::Parameter),
    ("hta/tests/data/df_index_resolver/df_index_resolver.json.gz",           30, Category::Unknown),
    ("hta/tests/data/memory_analysis/memory_timeline.raw.gz",                 5, Category::Activation),
    ("esnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",          5, Category::Activation),
    ("esnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz",          5, Category::Activation),
    ("sketchkv2/my_snapshot.pickle",                                          5, Category::Parameter),
    ("traces/h100/Falconsai_nsfw_image_detection__1016002.json.gz",           5, Category::Parameter),
    ("ns/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",          5, Category::Parameter),
    ("ts/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz",          5, Category::Parameter),
    ("es/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",          5, Category::Activation),
    ("s/inference/sglang_decode/capture_traces/bs_32_rank0.json.gz",         10, Category::KvCache),
    ("es/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",         10, Category::KvCache),
    ("s/tests/traces/mi300/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",         10, Category::Parameter),
    ("s/traces/mi300/gaunernst_bert-small-uncased__1016001.json.gz",          5, Category::Temporary),
    ("es/perf_model/normalization/normalization_layer_test.json.gz",         10, Category::Activation),
    ("verl/mem.pickle",                                                       5, Category::KvCache),
];

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn unknown_share_at_the_peak_stays_pinned() {
    let dir = corpus();
    let mut shares = Vec::new();
    let mut failures = Vec::new();
    for path in files(&dir, &|p| !p.ends_with("SOURCES.md")) {
        let Ok(report) = memcut::analyze_path(&path, &AnalyzeOptions::new()) else {
            continue;
        };
        let Some(d) = report
            .devices
            .iter()
            .filter(|d| d.peak.allocated_bytes > 0)
            .max_by_key(|d| d.peak.allocated_bytes)
        else {
            continue;
        };
        if d.peak.allocated_bytes < 1 << 20 {
            continue;
        }
        let unknown = d
            .peak
            .by_category
            .get(&memcut::Category::Unknown)
            .copied()
            .unwrap_or(0);
        let share = unknown as f64 * 100.0 / d.peak.allocated_bytes as f64;
        shares.push(share);
        let name = path.to_string_lossy();
        // Of allocated bytes (the allocator's cache is reserved, not
        // allocated); in a tie any of the largest.
        let bytes_of = |c: Category| d.peak.by_category.get(&c).copied().unwrap_or(0);
        let largest_bytes = d
            .peak
            .by_category
            .iter()
            .filter(|(c, _)| **c != Category::AllocatorCache)
            .map(|(_, b)| *b)
            .max();
        match UNKNOWN_CEILINGS
            .iter()
            .find(|(end, _, _)| name.ends_with(end))
        {
            Some(&(end, ceiling, _)) if share > ceiling as f64 => {
                failures.push(format!("{end}: unknown {share:.1}% > ceiling {ceiling}%"))
            }
            Some(&(end, _, top)) if Some(bytes_of(top)) != largest_bytes => {
                failures.push(format!("{end}: {top:?} is not the largest category"))
            }
            Some(_) => {}
            None => failures.push(format!("{name}: no ceiling (unknown today {share:.1}%)")),
        }
    }
    assert_eq!(
        shares.len(),
        UNKNOWN_CEILINGS.len(),
        "files with memory events"
    );
    let mean = shares.iter().sum::<f64>() / shares.len() as f64;
    assert!(mean <= 10.0, "mean unknown share {mean:.1}% > 10%");
    assert!(UNKNOWN_CEILINGS
        .iter()
        .all(|&(_, ceiling, _)| ceiling <= 30));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Findings on the corpus: exactly these (file, device, kind), each read
/// off the file by hand (see issue 31's note), and nothing else: no false
/// alarm on training runs, serving traces or plain inference. Each is
/// real: a bf16 forward under autocast whose `cached_cast` copies of the
/// weights stay until the region exits; two course AdamWs that update
/// their moments out of place (`optimizer.py:74`, `:76`: new moments made
/// while the old ones are alive, freed later in the step).
const CORPUS_FINDINGS: &[(&str, &str, &str)] = &[
    (
        "cs336-bcrafton/memory_snapshot.pickle",
        "cuda:0",
        "optimizer_state_replaced_out_of_place",
    ),
    (
        "cs336-silmont2000/memory_forward_bf16_128.pickle",
        "cuda:0",
        "autocast_weight_cache",
    ),
    (
        "cs336-wedsonlin/results/medium_128_training_memory_snapshot.pickle",
        "cuda:0",
        "optimizer_state_replaced_out_of_place",
    ),
];

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn corpus_findings_are_exactly_the_known_ones() {
    let dir = corpus();
    let mut found = Vec::new();
    for path in files(&dir, &|p| !p.ends_with("SOURCES.md")) {
        let Ok(report) = memcut::analyze_path(&path, &AnalyzeOptions::new()) else {
            continue;
        };
        let name = path
            .strip_prefix(&dir)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        for d in &report.devices {
            for f in &d.findings {
                found.push((name.clone(), d.device.clone(), f.kind.as_str().to_owned()));
            }
        }
    }
    let expected: Vec<(String, String, String)> = CORPUS_FINDINGS
        .iter()
        .map(|(f, d, k)| (f.to_string(), d.to_string(), k.to_string()))
        .collect();
    assert_eq!(found, expected);
}
