//! How well memcut's categories match PyTorch's own on the recording matrix
//! of issue 11 (`sample_traces/matrix/`, made by `generate_matrix.py`): every
//! committed run, read as the Chrome CPU trace, its GPU-like copy and (stack
//! runs) its `_profile_to_snapshot` snapshot.
//!
//! Two measures per (run, format), both against the run's `.truth.json.gz`:
//! PyTorch's memory-profiler categories, *adjusted* where issue 11 defines a
//! category differently (optimizer-step transients and unlabelled operator
//! workspaces are `temporary`, the Hugging Face cache is `kv_cache`; the
//! folder's README says exactly how). `unknown` truth never agrees.
//!
//! - **per allocation**: of the bytes live at memcut's peak whose truth
//!   category is known, the share memcut puts in the same category. memcut's
//!   live allocations are matched to truth rows by address (unique among live
//!   allocations) after picking the truth rows live at memcut's
//!   `peak.event_index` (Chrome: index of the `[memory]` event; snapshot:
//!   index of the entry in the CPU device list). The GPU-like copy's
//!   pre-recording lump is no allocation of the trace and counts only below.
//! - **category totals**: Σ over known categories of min(memcut's bytes,
//!   PyTorch's bytes) / PyTorch's peak bytes, with PyTorch's mix at the peak
//!   this format should match.
//! - **labelled totals**: the same Σ over the bytes PyTorch labels (its peak
//!   less its `unknown`). Category totals cannot exceed PyTorch's labelled
//!   share, so where PyTorch leaves much of the peak unlabelled (DDP's
//!   gradient bucket, a `no_grad` generate's activations, a compiled graph's
//!   buffers) they say more about PyTorch than about memcut; this measure
//!   asks what per allocation asks, by category. Every run must keep it at
//!   95% or more ([`LABELLED_FLOOR`]), or at its per-allocation floor where
//!   that is lower (`hf_static.warm` on the CPU trace: the rotary embedding's
//!   cos and sin, which PyTorch calls `input` and memcut `activation`).
//!
//! memcut's `kv_cache` also agrees with PyTorch's `activation` (PyTorch has no
//! KV-cache category); `allocator_cache` is never an allocation and is left
//! out. The run's own nostack/bare recordings share its stack twin's truth.
//!
//! Peaks must be exact. Which peak each format shows:
//! - Chrome CPU trace: allocations made while recording only (a CPU trace's
//!   `Total Allocated` starts at 0), i.e. the maximum `Total Allocated`;
//! - GPU-like copy: that plus everything PyTorch's memory timeline shows as
//!   existing before recording, i.e. `export_memory_timeline`'s peak;
//! - snapshot: its own replay with pre-existing blocks counted from the
//!   start, as pytorch.org/memory_viz draws it (the snapshot holds only
//!   allocations PyTorch proved to be tensors, so this can differ from the
//!   timeline's peak by the rest).
//!
//! The floors below are today's values rounded down to the next 5%: they
//! catch regressions; none is above 95%, the target (a value printed as
//! 100.0% can be 99.96%).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The labelled-totals floor of every committed run and format.
const LABELLED_FLOOR: f64 = 95.0;

/// (run, format, per-allocation floor %, category-totals floor %).
#[rustfmt::skip]
const FLOORS: &[(&str, &str, u32, u32)] = &[
    ("adamw.cold.nostack",           "cpu",      95,  95),
    ("adamw.cold.nostack",           "gpulike",  95,  95),
    ("adamw.cold.stack",             "cpu",      95,  95),
    ("adamw.cold.stack",             "gpulike",  95,  95),
    ("adamw.cold.stack",             "snapshot", 95,  95),
    ("adamw.warm.bare",              "cpu",      95,  95),
    ("adamw.warm.bare",              "gpulike",  95,  95),
    ("adamw.warm.nostack",           "cpu",      95,  95),
    ("adamw.warm.nostack",           "gpulike",  95,  95),
    ("adamw.warm.stack",             "cpu",      95,  95),
    ("adamw.warm.stack",             "gpulike",  95,  95),
    ("adamw.warm.stack",             "snapshot", 95,  95),
    ("adamw_foreach.cold.nostack",   "cpu",      95,  95),
    ("adamw_foreach.cold.nostack",   "gpulike",  95,  95),
    ("adamw_foreach.cold.stack",     "cpu",      95,  95),
    ("adamw_foreach.cold.stack",     "gpulike",  95,  95),
    ("adamw_foreach.cold.stack",     "snapshot", 95,  95),
    ("adamw_foreach.warm.nostack",   "cpu",      95,  95),
    ("adamw_foreach.warm.nostack",   "gpulike",  95,  95),
    ("adamw_foreach.warm.stack",     "cpu",      95,  95),
    ("adamw_foreach.warm.stack",     "gpulike",  95,  95),
    ("adamw_foreach.warm.stack",     "snapshot", 95,  95),
    ("cnn.cold.nostack",             "cpu",      95,  95),
    ("cnn.cold.nostack",             "gpulike",  95,  95),
    ("cnn.cold.stack",               "cpu",      95,  95),
    ("cnn.cold.stack",               "gpulike",  95,  95),
    ("cnn.cold.stack",               "snapshot", 95,  95),
    ("cnn.warm.nostack",             "cpu",      95,  95),
    ("cnn.warm.nostack",             "gpulike",  95,  95),
    ("cnn.warm.stack",               "cpu",      95,  95),
    ("cnn.warm.stack",               "gpulike",  95,  95),
    ("cnn.warm.stack",               "snapshot", 95,  95),
    ("compiled.warm.nostack",        "cpu",      95,  95),
    ("compiled.warm.nostack",        "gpulike",  95,  95),
    ("compiled.warm.stack",          "cpu",      95,  95),
    ("compiled.warm.stack",          "gpulike",  95,  95),
    ("compiled.warm.stack",          "snapshot", 95,  95),
    ("compiled_aot.warm.nostack",    "cpu",      95,  95),
    ("compiled_aot.warm.nostack",    "gpulike",  95,  95),
    ("compiled_aot.warm.stack",      "cpu",      95,  95),
    ("compiled_aot.warm.stack",      "gpulike",  95,  95),
    ("compiled_aot.warm.stack",      "snapshot", 95,  95),
    ("ddp.cold.nostack",             "cpu",      95,  80),
    ("ddp.cold.nostack",             "gpulike",  95,  80),
    ("ddp.cold.stack",               "cpu",      95,  80),
    ("ddp.cold.stack",               "gpulike",  95,  80),
    ("ddp.cold.stack",               "snapshot", 95,  80),
    ("ddp.warm.nostack",             "cpu",      95,  95),
    ("ddp.warm.nostack",             "gpulike",  95,  80),
    ("ddp.warm.stack",               "cpu",      95,  95),
    ("ddp.warm.stack",               "gpulike",  95,  80),
    ("ddp.warm.stack",               "snapshot", 95,  80),
    ("ddp_buckets.cold.nostack",     "cpu",      95,  80),
    ("ddp_buckets.cold.nostack",     "gpulike",  95,  80),
    ("ddp_buckets.cold.stack",       "cpu",      95,  80),
    ("ddp_buckets.cold.stack",       "gpulike",  95,  80),
    ("ddp_buckets.cold.stack",       "snapshot", 95,  80),
    ("ddp_buckets.warm.nostack",     "cpu",      95,  95),
    ("ddp_buckets.warm.nostack",     "gpulike",  95,  80),
    ("ddp_buckets.warm.stack",       "cpu",      95,  95),
    ("ddp_buckets.warm.stack",       "gpulike",  95,  80),
    ("ddp_buckets.warm.stack",       "snapshot", 95,  80),
    ("ddp_bucket_view.cold.nostack", "cpu",      95,  95),
    ("ddp_bucket_view.cold.nostack", "gpulike",  95,  95),
    ("ddp_bucket_view.cold.stack",   "cpu",      95,  95),
    ("ddp_bucket_view.cold.stack",   "gpulike",  95,  95),
    ("ddp_bucket_view.cold.stack",   "snapshot", 95,  95),
    ("ddp_bucket_view.warm.nostack", "cpu",      95,  95),
    ("ddp_bucket_view.warm.nostack", "gpulike",  95,  95),
    ("ddp_bucket_view.warm.stack",   "cpu",      95,  95),
    ("ddp_bucket_view.warm.stack",   "gpulike",  95,  95),
    ("ddp_bucket_view.warm.stack",   "snapshot", 95,  95),
    ("grad_accum.cold.nostack",      "cpu",      95,  95),
    ("grad_accum.cold.nostack",      "gpulike",  95,  95),
    ("grad_accum.cold.stack",        "cpu",      95,  95),
    ("grad_accum.cold.stack",        "gpulike",  95,  95),
    ("grad_accum.cold.stack",        "snapshot", 95,  95),
    ("grad_accum.warm.nostack",      "cpu",      95,  95),
    ("grad_accum.warm.nostack",      "gpulike",  95,  95),
    ("grad_accum.warm.stack",        "cpu",      95,  95),
    ("grad_accum.warm.stack",        "gpulike",  95,  95),
    ("grad_accum.warm.stack",        "snapshot", 95,  95),
    ("hf_generate.cold.nostack",     "cpu",      95,  95),
    ("hf_generate.cold.nostack",     "gpulike",  95,  95),
    ("hf_generate.cold.stack",       "cpu",      95,  95),
    ("hf_generate.cold.stack",       "gpulike",  95,  95),
    ("hf_generate.cold.stack",       "snapshot", 95,  95),
    ("hf_generate.warm.nostack",     "cpu",      95,  95),
    ("hf_generate.warm.nostack",     "gpulike",  95,  95),
    ("hf_generate.warm.stack",       "cpu",      95,  95),
    ("hf_generate.warm.stack",       "gpulike",  95,  95),
    ("hf_generate.warm.stack",       "snapshot", 95,  95),
    ("hf_static.cold.nostack",       "cpu",      95,  90),
    ("hf_static.cold.nostack",       "gpulike",  95,  90),
    ("hf_static.cold.stack",         "cpu",      95,  90),
    ("hf_static.cold.stack",         "gpulike",  95,  90),
    ("hf_static.cold.stack",         "snapshot", 95,  90),
    ("hf_static.warm.nostack",       "cpu",      85,  25),
    ("hf_static.warm.nostack",       "gpulike",  85,  90),
    ("hf_static.warm.stack",         "cpu",      85,  25),
    ("hf_static.warm.stack",         "gpulike",  85,  90),
    ("hf_static.warm.stack",         "snapshot", 95,  90),
    ("hf_train.cold.nostack",        "cpu",      95,  95),
    ("hf_train.cold.nostack",        "gpulike",  95,  95),
    ("hf_train.cold.stack",          "cpu",      95,  95),
    ("hf_train.cold.stack",          "gpulike",  95,  95),
    ("hf_train.cold.stack",          "snapshot", 95,  95),
    ("hf_train.warm.bare",           "cpu",      95,  95),
    ("hf_train.warm.bare",           "gpulike",  95,  95),
    ("hf_train.warm.nostack",        "cpu",      95,  95),
    ("hf_train.warm.nostack",        "gpulike",  95,  95),
    ("hf_train.warm.stack",          "cpu",      95,  95),
    ("hf_train.warm.stack",          "gpulike",  95,  95),
    ("hf_train.warm.stack",          "snapshot", 95,  95),
    ("inference.cold.nostack",       "cpu",      95,  95),
    ("inference.cold.nostack",       "gpulike",  95,  95),
    ("inference.cold.stack",         "cpu",      95,  95),
    ("inference.cold.stack",         "gpulike",  95,  95),
    ("inference.cold.stack",         "snapshot", 95,  95),
    ("inference.warm.bare",          "cpu",      95,  95),
    ("inference.warm.bare",          "gpulike",  95,  95),
    ("inference.warm.nostack",       "cpu",      95,  95),
    ("inference.warm.nostack",       "gpulike",  95,  95),
    ("inference.warm.stack",         "cpu",      95,  95),
    ("inference.warm.stack",         "gpulike",  95,  95),
    ("inference.warm.stack",         "snapshot", 95,  95),
    ("mha_eval.cold.nostack",        "cpu",      95,  95),
    ("mha_eval.cold.nostack",        "gpulike",  95,  95),
    ("mha_eval.cold.stack",          "cpu",      95,  95),
    ("mha_eval.cold.stack",          "gpulike",  95,  95),
    ("mha_eval.cold.stack",          "snapshot", 95,  95),
    ("mha_eval.warm.nostack",        "cpu",      95,  95),
    ("mha_eval.warm.nostack",        "gpulike",  95,  95),
    ("mha_eval.warm.stack",          "cpu",      95,  95),
    ("mha_eval.warm.stack",          "gpulike",  95,  95),
    ("mha_eval.warm.stack",          "snapshot", 95,  95),
    ("sgd_momentum.cold.nostack",    "cpu",      95,  95),
    ("sgd_momentum.cold.nostack",    "gpulike",  95,  95),
    ("sgd_momentum.cold.stack",      "cpu",      95,  95),
    ("sgd_momentum.cold.stack",      "gpulike",  95,  95),
    ("sgd_momentum.cold.stack",      "snapshot", 95,  95),
    ("sgd_momentum.warm.nostack",    "cpu",      95,  95),
    ("sgd_momentum.warm.nostack",    "gpulike",  95,  95),
    ("sgd_momentum.warm.stack",      "cpu",      95,  95),
    ("sgd_momentum.warm.stack",      "gpulike",  95,  95),
    ("sgd_momentum.warm.stack",      "snapshot", 95,  95),
    ("tied.cold.nostack",            "cpu",      95,  95),
    ("tied.cold.nostack",            "gpulike",  95,  95),
    ("tied.cold.stack",              "cpu",      95,  95),
    ("tied.cold.stack",              "gpulike",  95,  95),
    ("tied.cold.stack",              "snapshot", 95,  95),
    ("tied.warm.nostack",            "cpu",      95,  95),
    ("tied.warm.nostack",            "gpulike",  95,  95),
    ("tied.warm.stack",              "cpu",      95,  95),
    ("tied.warm.stack",              "gpulike",  95,  95),
    ("tied.warm.stack",              "snapshot", 95,  95),
];

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Format {
    Cpu,
    GpuLike,
    Snapshot,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Cpu => "cpu",
            Format::GpuLike => "gpulike",
            Format::Snapshot => "snapshot",
        }
    }
    fn suffix(self) -> &'static str {
        match self {
            Format::Cpu => ".trace.json.gz",
            Format::GpuLike => ".gpulike.trace.json.gz",
            Format::Snapshot => ".snapshot.pickle.gz",
        }
    }
    fn device(self) -> &'static str {
        match self {
            Format::GpuLike => "cuda:0",
            _ => "cpu",
        }
    }
}

/// `$MEMCUT_MATRIX` (e.g. a held-out set recorded with `--variant heldout`)
/// or the committed folder.
fn matrix_dir() -> PathBuf {
    match std::env::var_os("MEMCUT_MATRIX") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces/matrix"),
    }
}

/// Floors hold for the committed runs only; another folder is measured and
/// printed, its peaks and index spaces still checked.
fn floors_apply() -> bool {
    std::env::var_os("MEMCUT_MATRIX").is_none()
}

fn read_gz_json(path: &Path) -> Value {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not a byte count: {v}"))
}

/// `None` for JSON null (an allocation alive before recording or to the end).
fn index_of(v: &Value) -> Option<u64> {
    (!v.is_null()).then(|| u64_of(v))
}

/// PyTorch's category in memcut's spelling, `None` when PyTorch did not know.
fn known(category: &str) -> Option<&str> {
    (category != "unknown").then_some(category)
}

fn agrees(memcut: &str, truth: &str) -> bool {
    memcut == truth || (memcut == "kv_cache" && truth == "activation")
}

/// Truth rows live after event `p`: address → (size, adjusted category).
fn truth_live_at(truth: &Value, format: Format, p: u64) -> BTreeMap<u64, (u64, String)> {
    let mut live = BTreeMap::new();
    let rows = match format {
        Format::Snapshot => &truth["snapshot"]["allocations"],
        _ => &truth["chrome"]["allocations"],
    };
    for row in rows.as_array().expect("allocations") {
        let r = row.as_array().expect("allocation row");
        let (alloc, free) = (index_of(&r[0]), index_of(&r[1]));
        if alloc.is_some_and(|a| a > p) || free.is_some_and(|f| f <= p) {
            continue;
        }
        let category = match format {
            // One row per snapshot allocation (a version bump is a free + alloc there).
            Format::Snapshot => r[5].as_str().unwrap().to_owned(),
            // One row per storage; its category is that of the version live at `p`.
            _ => {
                let versions = r[4].as_array().unwrap();
                let live_version = versions
                    .iter()
                    .rfind(|v| u64_of(&v[0]) <= p)
                    .unwrap_or(&versions[0]);
                live_version[3].as_str().unwrap().to_owned()
            }
        };
        let previous = live.insert(u64_of(&r[2]), (u64_of(&r[3]), category));
        assert!(previous.is_none(), "two truth rows live at one address");
    }
    live
}

/// What the truth says about the peak `format` should show.
fn truth_peak(truth: &Value, format: Format) -> &Value {
    match format {
        Format::Cpu => &truth["chrome"]["peak"],
        Format::GpuLike => &truth["chrome"]["gpulike_peak"],
        Format::Snapshot => &truth["snapshot"]["peak"],
    }
}

fn by_category(v: &Value) -> BTreeMap<&str, u64> {
    v.as_object()
        .expect("by_category")
        .iter()
        .map(|(c, b)| (c.as_str(), u64_of(b)))
        .collect()
}

/// Σ over PyTorch's known categories of min(memcut, PyTorch). memcut's
/// `kv_cache` first meets the truth's `kv_cache` (the HF cache, adjusted);
/// what is left of it counts as `activation`, PyTorch's name for a cache.
fn totals_agreement(memcut: &BTreeMap<&str, u64>, truth: &BTreeMap<&str, u64>) -> u64 {
    let get = |m: &BTreeMap<&str, u64>, c: &str| m.get(c).copied().unwrap_or(0);
    let kv = get(memcut, "kv_cache").min(get(truth, "kv_cache"));
    let spare_kv = get(memcut, "kv_cache") - kv;
    truth
        .iter()
        .filter(|(c, _)| known(c).is_some() && **c != "kv_cache")
        .map(|(c, b)| {
            let mine = get(memcut, c) + if *c == "activation" { spare_kv } else { 0 };
            (*b).min(mine)
        })
        .sum::<u64>()
        + kv
}

struct Cell {
    run: String,
    format: Format,
    memcut_peak: u64,
    truth_peak: u64,
    /// Per allocation: agreeing and known bytes among matched allocations.
    agree: u64,
    known: u64,
    /// Category totals: Σ min over known categories, and PyTorch's peak bytes.
    totals_agree: u64,
    /// PyTorch's peak bytes less those it labels `unknown`.
    truth_labelled: u64,
    /// Largest disagreements: (truth → memcut (rule), bytes).
    confusions: Vec<(String, u64)>,
    problems: Vec<String>,
}

impl Cell {
    fn per_allocation(&self) -> f64 {
        100.0 * self.agree as f64 / self.known.max(1) as f64
    }
    fn totals(&self) -> f64 {
        100.0 * self.totals_agree as f64 / self.truth_peak.max(1) as f64
    }
    fn labelled_totals(&self) -> f64 {
        100.0 * self.totals_agree as f64 / self.truth_labelled.max(1) as f64
    }
}

fn measure(run: &str, truth: &Value, format: Format, path: &Path) -> Cell {
    let report = memcut::analyze_path(path, &memcut::AnalyzeOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let report = serde_json::to_value(&report).expect("report serialises");
    let devices = report["devices"].as_array().expect("devices");
    let mut problems = Vec::new();
    if devices.len() != 1 || devices[0]["device"] != format.device() {
        problems.push(format!(
            "expected one device {}, got {:?}",
            format.device(),
            devices.iter().map(|d| &d["device"]).collect::<Vec<_>>()
        ));
    }
    let peak = &devices[0]["peak"];
    let memcut_peak = u64_of(&peak["allocated_bytes"]);
    let expected = truth_peak(truth, format);
    let truth_peak_bytes = u64_of(&expected["bytes"]);
    if memcut_peak != truth_peak_bytes {
        problems.push(format!(
            "peak {memcut_peak} B, PyTorch {truth_peak_bytes} B"
        ));
    }

    // Per allocation, at memcut's own peak instant.
    let p = u64_of(&peak["event_index"]);
    let live = truth_live_at(truth, format, p);
    let live_bytes: u64 = live.values().map(|v| v.0).sum();
    let lump = match format {
        Format::GpuLike => u64_of(&truth["preexisting"]["bytes"]),
        _ => 0,
    };
    if live_bytes + lump != memcut_peak {
        problems.push(format!(
            "truth rows live at event {p} hold {live_bytes} B (+{lump} B before recording), memcut's peak {memcut_peak} B: index spaces differ"
        ));
    }
    let (mut agree, mut known_bytes, mut unmatched) = (0, 0, 0);
    let mut confusion: BTreeMap<String, u64> = BTreeMap::new();
    for a in peak["allocations"].as_array().expect("allocations") {
        let (addr, size) = (u64_of(&a["addr"]), u64_of(&a["size"]));
        let category = a["category"].as_str().unwrap();
        match live.get(&addr) {
            Some((s, truth_category)) if *s == size => {
                let Some(t) = known(truth_category) else {
                    continue;
                };
                known_bytes += size;
                if agrees(category, t) {
                    agree += size;
                } else {
                    let key = format!("{t} -> {category} ({})", a["rule"].as_str().unwrap());
                    *confusion.entry(key).or_default() += size;
                }
            }
            _ => unmatched += size,
        }
    }
    if unmatched != lump {
        problems.push(format!(
            "{unmatched} B live at memcut's peak match no truth allocation (expected {lump})"
        ));
    }
    let mut confusions: Vec<_> = confusion.into_iter().collect();
    confusions.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    confusions.truncate(3);

    let truth_mix = by_category(&expected["by_category"]);
    let totals_agree = totals_agreement(&by_category(&peak["by_category"]), &truth_mix);
    let truth_labelled = truth_peak_bytes - truth_mix.get("unknown").copied().unwrap_or(0);
    Cell {
        run: run.to_owned(),
        format,
        memcut_peak,
        truth_peak: truth_peak_bytes,
        agree,
        known: known_bytes,
        totals_agree,
        truth_labelled,
        confusions,
        problems,
    }
}

/// A share in percent rounded down to a multiple of 5.
fn floor_5(percent: f64) -> u32 {
    (percent / 5.0).floor() as u32 * 5
}

fn runs() -> Vec<(String, Value)> {
    let mut runs: Vec<_> = std::fs::read_dir(matrix_dir())
        .expect("sample_traces/matrix")
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".truth.json.gz").map(str::to_owned)
        })
        .collect();
    runs.sort();
    runs.into_iter()
        .map(|r| {
            let truth = read_gz_json(&matrix_dir().join(format!("{r}.truth.json.gz")));
            (r, truth)
        })
        .collect()
}

#[test]
fn memcut_attribution_on_the_recording_matrix() {
    let runs = runs();
    assert!(
        runs.len() >= if floors_apply() { 35 } else { 1 },
        "expected the recording matrix in sample_traces/matrix, found {} runs",
        runs.len()
    );
    let mut cells = Vec::new();
    for (run, truth) in &runs {
        for format in [Format::Cpu, Format::GpuLike, Format::Snapshot] {
            if format == Format::Snapshot && truth["snapshot"].is_null() {
                continue; // PyTorch makes snapshots of stack runs only
            }
            let path = matrix_dir().join(format!("{run}{}", format.suffix()));
            cells.push(measure(run, truth, format, &path));
        }
    }

    println!(
        "{:<28} {:<9} {:>10} {:>10} {:>8} {:>8} {:>10}  largest disagreements (PyTorch -> memcut (rule): bytes)",
        "run", "format", "peak", "PyTorch", "alloc %", "totals %", "labelled %"
    );
    for c in &cells {
        println!(
            "{:<28} {:<9} {:>10} {:>10} {:>8.1} {:>8.1} {:>10.1}  {}",
            c.run,
            c.format.name(),
            c.memcut_peak,
            c.truth_peak,
            c.per_allocation(),
            c.totals(),
            c.labelled_totals(),
            c.confusions
                .iter()
                .map(|(k, b)| format!("{k}: {b}"))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    for format in [Format::Cpu, Format::GpuLike, Format::Snapshot] {
        let of: Vec<_> = cells.iter().filter(|c| c.format == format).collect();
        let mean = |f: fn(&Cell) -> f64| of.iter().map(|c| f(c)).sum::<f64>() / of.len() as f64;
        println!(
            "mean {:<9} over {:>2} runs: per allocation {:.1}%, category totals {:.1}%, labelled totals {:.1}% (lowest: per allocation {:.1}%, labelled totals {:.1}%)",
            format.name(),
            of.len(),
            mean(Cell::per_allocation),
            mean(Cell::totals),
            mean(Cell::labelled_totals),
            of.iter().map(|c| c.per_allocation()).fold(100.0, f64::min),
            of.iter().map(|c| c.labelled_totals()).fold(100.0, f64::min)
        );
    }

    let mut failures = Vec::new();
    for c in &cells {
        let cell = format!("{} {}", c.run, c.format.name());
        failures.extend(c.problems.iter().map(|p| format!("{cell}: {p}")));
        if !floors_apply() {
            continue;
        }
        match FLOORS
            .iter()
            .find(|f| f.0 == c.run && f.1 == c.format.name())
        {
            None => failures.push(format!(
                "{cell}: no floor in FLOORS; today's, rounded down to 5%: (\"{}\", \"{}\", {}, {}),",
                c.run,
                c.format.name(),
                floor_5(c.per_allocation()),
                floor_5(c.totals())
            )),
            Some(&(_, _, alloc, totals)) => {
                if c.per_allocation() < alloc as f64 {
                    failures.push(format!(
                        "{cell}: per allocation {:.1}% < floor {alloc}%",
                        c.per_allocation()
                    ));
                }
                if c.totals() < totals as f64 {
                    failures.push(format!(
                        "{cell}: category totals {:.1}% < floor {totals}%",
                        c.totals()
                    ));
                }
                let labelled = LABELLED_FLOOR.min(alloc as f64);
                if c.labelled_totals() < labelled {
                    failures.push(format!(
                        "{cell}: labelled totals {:.1}% < floor {labelled}%",
                        c.labelled_totals()
                    ));
                }
            }
        }
    }
    for f in FLOORS.iter().filter(|_| floors_apply()) {
        if !cells.iter().any(|c| c.run == f.0 && c.format.name() == f.1) {
            failures.push(format!("floor for {} {} matches no run", f.0, f.1));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
