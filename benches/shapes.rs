//! One criterion group per input shape of issue 16's benchmark set
//! (`scripts/bench_inputs.sh` makes the 1M-entry / 300 MB versions of the
//! same shapes for whole-process timing). Each group times reading the file
//! as `memcut analyze` reads it (`read_file`: a second thread reading ahead,
//! inflating gzip there; Chrome traces streamed) and the whole analysis
//! after it. `formats::chrome`'s `streaming` tests check that the trace
//! shapes stay on the streaming path.
//!
//! `cargo bench --bench shapes` (CI only compiles it, via clippy --all-targets).
//!
//! Shapes from committed files: `snapshot_synthetic` (make_big_snapshot.py's
//! shape, `tests/data`), `snapshot_profile` (`_profile_to_snapshot` output:
//! no `time_us`, every frame spelled out), `trace_kineto_2025` (the adamw
//! sample, inflated) and `trace_gz` (the same, gzipped). Shapes from the
//! corpus (`../shared/corpus` or `$MEMCUT_CORPUS`; skipped with a note when
//! absent, never copied into the repository): `snapshot_cpp_frames`,
//! `snapshot_python_frames`, `snapshot_unshared_frames`, `trace_kineto_2021`
//! (old memory schema: no `Addr`, no `Total Allocated`), `trace_tracelens`.
//! `formats::snapshot`'s `fast_path_shapes` tests check that the snapshot
//! shapes stay on the fast paths these figures depend on.

use std::hint::black_box;
use std::io::Read;
use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use memcut::internals::{analyze_trace, read_file};
use memcut::{report::SourceInfo, AnalyzeOptions, Limits};

enum Keep {
    /// The file's bytes as they are (gzip stays gzip).
    AsIs,
    /// Inflated first, so the group times the parser alone.
    Inflated,
}

/// Where a shape's file is.
enum Source {
    /// Committed, relative to the repository.
    Repo(&'static str),
    /// In the corpus (`../shared/corpus` or `$MEMCUT_CORPUS`), relative to it.
    Corpus(&'static str),
}

impl Source {
    fn path(&self) -> Option<PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        match self {
            Source::Repo(rel) => Some(root.join(rel)),
            Source::Corpus(rel) => {
                let dir = std::env::var_os("MEMCUT_CORPUS")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| root.join("../shared/corpus"));
                Some(dir.join(rel)).filter(|p| p.is_file())
            }
        }
    }
}

const SHAPES: &[(&str, Source, Keep)] = &[
    (
        "snapshot_synthetic",
        Source::Repo("tests/data/synthetic_shared_frames.pickle.gz"),
        Keep::Inflated,
    ),
    (
        "snapshot_profile",
        Source::Repo("sample_traces/train_adamw.snapshot.pickle.gz"),
        Keep::Inflated,
    ),
    (
        "snapshot_cpp_frames",
        Source::Corpus("cs336-wedsonlin/results/medium_512_training_memory_snapshot.pickle"),
        Keep::AsIs,
    ),
    (
        "snapshot_python_frames",
        Source::Corpus("decomfl/memory.pickle"),
        Keep::AsIs,
    ),
    (
        "snapshot_unshared_frames",
        Source::Corpus("cs336-magma27/memory_snapshot.pickle"),
        Keep::AsIs,
    ),
    (
        "trace_kineto_2025",
        Source::Repo("sample_traces/train_adamw.trace.json.gz"),
        Keep::Inflated,
    ),
    (
        "trace_gz",
        Source::Repo("sample_traces/train_adamw.trace.json.gz"),
        Keep::AsIs,
    ),
    (
        "trace_kineto_2021",
        Source::Corpus("kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"),
        Keep::Inflated,
    ),
    (
        "trace_tracelens",
        Source::Corpus("tracelens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"),
        Keep::Inflated,
    ),
];

/// The file to read: the shape's own, or an inflated copy of it in a
/// temporary file (kept alive by the second value).
fn load(path: &Path, keep: &Keep) -> (PathBuf, u64, Option<tempfile::NamedTempFile>) {
    let raw = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    match keep {
        Keep::Inflated if raw.starts_with(&[0x1f, 0x8b]) => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(&raw[..])
                .read_to_end(&mut out)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
            std::io::Write::write_all(&mut file, &out).expect("written");
            (file.path().to_path_buf(), out.len() as u64, Some(file))
        }
        _ => (path.to_path_buf(), raw.len() as u64, None),
    }
}

fn shapes(c: &mut Criterion) {
    let limits = Limits::default();
    let options = AnalyzeOptions::default();
    for (name, from, keep) in SHAPES {
        let Some(path) = from.path() else {
            eprintln!("{name}: skipped (no corpus; set MEMCUT_CORPUS)");
            continue;
        };
        let (file, size, _keep) = load(&path, keep);
        let read = || read_file(black_box(&file), &limits).expect("a shape parses");
        let source = SourceInfo::new(path.display().to_string(), "", size);
        let mut g = c.benchmark_group(*name);
        g.sample_size(10);
        g.throughput(Throughput::Bytes(size));
        g.bench_function("read", |b| b.iter(read));
        g.bench_function("read+analyze", |b| {
            b.iter(|| analyze_trace(&read(), source.clone(), &options))
        });
        g.finish();
    }
}

criterion_group!(benches, shapes);
criterion_main!(benches);
