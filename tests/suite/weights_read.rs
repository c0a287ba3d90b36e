//! Weights from before recording, inferred from the weights the operators
//! read (`record_shapes`): `nn.MultiheadAttention`'s fast path reads its
//! projections inside one `aten::_native_multi_head_attention` call
//! (`sample_traces/mha_eval/generate.py`, a CPU run written as a GPU
//! reports it: the weights made before recording are in `Total Allocated`).

use std::path::Path;

use memcut::{AnalyzeOptions, Category};

#[test]
fn the_mha_fast_path_s_weights_are_parameters() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces/mha_eval/mha_eval.gpulike.trace.json.gz");
    let report = memcut::analyze_path(&path, &AnalyzeOptions::default()).unwrap();
    let d = &report.devices[0];
    let parameter: u64 = d
        .before_recording
        .iter()
        .filter(|p| p.category == Category::Parameter)
        .map(|p| p.bytes)
        .sum();
    // 3 layers × (768×256 + 768 + 256×256 + 256) + a 256×10 head, fp32:
    // what generate.py printed (`weights`).
    assert_eq!(parameter, 3_168_296, "{:?}", d.before_recording);
    let evidence = &d.before_recording[0].evidence;
    assert!(
        evidence.contains("aten::_native_multi_head_attention 3"),
        "{evidence}"
    );
}
