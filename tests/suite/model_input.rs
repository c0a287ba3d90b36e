//! A model input made before recording is named `input` from the shapes
//! of the first weight-reading operator (`record_shapes`), in runs written
//! as a GPU reports them (`sample_traces/model_input/generate.py`: an MLP,
//! a CNN, a token model, a warm training step, and a control whose input is
//! made while recording; `sample_traces/mha_eval` too). The rule was built
//! on mha_eval; the model_input runs were recorded after it, not tuned on.

use std::collections::BTreeMap;
use std::path::Path;

use memcut::{AnalyzeOptions, Category};

const RULE: &str = "inferred_model_input_read_by_first_operator";

/// Bytes the rule names `input` among what existed before recording.
fn input_bytes(path: &Path) -> u64 {
    let report = memcut::analyze_path(path, &AnalyzeOptions::default()).unwrap();
    let d = &report.devices[0];
    d.before_recording
        .iter()
        .filter(|p| p.rule == RULE)
        .inspect(|p| assert_eq!(p.category, Category::Input, "{}", path.display()))
        .map(|p| p.bytes)
        .sum()
}

#[test]
fn inputs_made_before_recording_are_named_input() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces/model_input");
    let expected: BTreeMap<String, u64> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    assert_eq!(expected.len(), 5);
    for (run, bytes) in &expected {
        let path = dir.join(format!("{run}.gpulike.trace.json.gz"));
        assert_eq!(input_bytes(&path), *bytes, "{run}");
    }
    // 4 × 32 × 256 float32, what mha_eval/generate.py made before recording.
    let mha = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sample_traces/mha_eval/mha_eval.gpulike.trace.json.gz");
    assert_eq!(input_bytes(&mha), 4 * 32 * 256 * 4);
}
