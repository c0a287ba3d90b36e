//! Sites in graphs that run as FX graph modules (`torch.compile(backend=
//! "aot_eager")` with `enrich_profiler_metadata` on: their code is
//! `fx_generated__<hash>.py`) are named by the program's own line, not by
//! the generated file's hash (`sample_traces/fx_graphs/generate.py`, a real
//! CPU recording, as its Chrome trace and its `_profile_to_snapshot`). The
//! snapshot shape that maps generated frames back to the model's source
//! (`fx_original_trace`) is tested where snapshots are read
//! (`fx_frames_name_the_model_source_line`).

use std::path::Path;

use memcut::{AnalyzeOptions, Category};

fn sites(file: &str) -> Vec<(String, Category, u64)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces/fx_graphs")
        .join(file);
    let report = memcut::analyze_path(&path, &AnalyzeOptions::default()).unwrap();
    let peak = &report.devices[0].peak;
    peak.allocations
        .iter()
        .map(|a| (a.site.to_string(), a.category, a.size))
        .collect()
}

#[test]
fn generated_graph_code_is_not_a_site_name() {
    for file in ["aot_eager.trace.json.gz", "aot_eager.snapshot.pickle.gz"] {
        let sites = sites(file);
        assert!(sites.len() > 10, "{file}");
        let named_by_hash: Vec<_> = sites
            .iter()
            .filter(|(site, _, _)| site.contains("fx_generated_"))
            .collect();
        assert!(named_by_hash.is_empty(), "{file}: {named_by_hash:?}");
    }
    // The backward graph's weight gradients (two blocks and the head: 148,800
    // bytes of the 150,748 parameter bytes; the rest are biases' sums), named
    // by the step's line as eager backward's are.
    let mm: u64 = sites("aot_eager.trace.json.gz")
        .iter()
        .filter(|(site, category, _)| {
            site == "aten::mm < generate.py(69): step" && *category == Category::Gradient
        })
        .map(|s| s.2)
        .sum();
    assert_eq!(mm, 148_800);
}
