//! The cuBLAS workspace inferred in memory from before recording
//! (`classify/evidence.rs::cublas_workspace`): only on a CUDA device whose
//! compute capability the trace states, only when the trace runs cuBLAS
//! operators and allocates no block of the workspace's size, and only whole.

use memcut::{analyze_bytes, AnalyzeOptions, Category};

const MIB: u64 = 1 << 20;
const RULE: &str = "inferred_cublas_workspace_default_size";

/// A Kineto-like trace: `before` bytes allocated before recording, then an
/// operator `op` that allocates and frees 1 MiB; `kept` bytes allocated
/// inside it and never freed when given.
fn trace(device_props: &str, before: u64, op: &str, kept: Option<u64>) -> String {
    let mut events = vec![format!(
        r#"{{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": 1, "tid": 1, "ts": 10, "dur": 20, "args": {{}}}}"#
    )];
    let mut total = before;
    let mut mem = |ts: u64, addr: u64, bytes: i64, total: u64| {
        events.push(format!(
            r#"{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": {ts}, "args": {{"Total Reserved": {}, "Total Allocated": {total}, "Bytes": {bytes}, "Addr": {addr}, "Device Id": 0, "Device Type": 1}}}}"#,
            total + 64 * MIB
        ))
    };
    total += MIB;
    mem(12, 0x1000_0000, MIB as i64, total);
    if let Some(k) = kept {
        total += k;
        mem(13, 0x2000_0000, k as i64, total);
    }
    total -= MIB;
    mem(14, 0x1000_0000, -(MIB as i64), total);
    format!(
        r#"{{"deviceProperties": [{device_props}], "traceEvents": [{}]}}"#,
        events.join(",\n")
    )
}

const H100: &str = r#"{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "computeMajor": 9, "computeMinor": 0}"#;
const A100: &str = r#"{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85018279936, "computeMajor": 8, "computeMinor": 0}"#;
const B200: &str = r#"{"id": 0, "name": "NVIDIA B200", "totalGlobalMem": 85018279936, "computeMajor": 10, "computeMinor": 0}"#;
const MI300: &str = r#"{"id": 0, "name": "AMD Instinct MI300X", "totalGlobalMem": 85018279936, "computeMajor": 9, "computeMinor": 4}"#;

/// The inferred workspace's bytes, and the unknown bytes that existed
/// before recording.
fn inferred(json: &str) -> (u64, u64) {
    let report = analyze_bytes(json.as_bytes(), "t.json", &AnalyzeOptions::new()).unwrap();
    let d = &report.devices[0];
    let of = |pick: &dyn Fn(&memcut::report::BeforeRecordingPart) -> bool| -> u64 {
        d.before_recording
            .iter()
            .filter(|p| pick(p))
            .map(|p| p.bytes)
            .sum()
    };
    let ws = of(&|p| p.rule == RULE);
    if ws > 0 {
        let part = d.before_recording.iter().find(|p| p.rule == RULE).unwrap();
        assert_eq!(part.category, Category::Temporary);
        assert!(part.evidence.contains("estimate"), "{}", part.evidence);
    }
    (ws, of(&|p| p.category == Category::Unknown))
}

#[test]
fn hopper_after_warm_up_holds_a_32_mib_workspace() {
    assert_eq!(
        inferred(&trace(H100, 40 * MIB, "aten::mm", None)),
        (32 * MIB, 8 * MIB)
    );
}

#[test]
fn before_hopper_the_workspace_is_8_mib_and_128_kib() {
    let ws = 4096 * 1024 * 2 + 16 * 1024 * 8;
    assert_eq!(
        inferred(&trace(A100, 40 * MIB, "aten::addmm", None)),
        (ws, 40 * MIB - ws)
    );
}

#[test]
fn no_workspace_without_evidence() {
    // No cuBLAS operator in the trace.
    assert_eq!(
        inferred(&trace(H100, 40 * MIB, "aten::add", None)),
        (0, 40 * MIB)
    );
    // An architecture whose default differs between PyTorch versions.
    assert_eq!(
        inferred(&trace(B200, 40 * MIB, "aten::mm", None)),
        (0, 40 * MIB)
    );
    // AMD: the same fields hold a gfx version.
    assert_eq!(
        inferred(&trace(MI300, 40 * MIB, "aten::mm", None)),
        (0, 40 * MIB)
    );
    // Less than a workspace is unexplained: never part of one.
    assert_eq!(
        inferred(&trace(H100, 20 * MIB, "aten::mm", None)),
        (0, 20 * MIB)
    );
    // Recorded from a cold start: the trace allocates the workspace itself.
    assert_eq!(
        inferred(&trace(H100, 40 * MIB, "aten::mm", Some(32 * MIB))),
        (0, 40 * MIB)
    );
}
