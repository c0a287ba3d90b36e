//! `analyze --at`: the state at any instant, in the peak's report shape.

use assert_cmd::Command;
use memcut::{analyze_path, AnalyzeOptions, At, Report};

const SAMPLE: &str = "sample_traces/train_adamw.snapshot.pickle.gz";
/// tests/data/segments/make_segments.py: a 64 MiB segment, eight 8 MiB
/// allocations (events 1–8), blocks 1, 3, 5, 7 freed (free_requested at
/// 9, 11, 13, 15, free_completed at 10, 12, 14, 16), an OOM (17), block 0
/// freed (18, 19).
const FRAGMENTED: &str = "tests/data/segments/fragmented_oom.pickle";
const MIB: u64 = 1 << 20;

fn path(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn analyze(rel: &str, at: Option<&str>) -> Report {
    let mut options = AnalyzeOptions::new();
    options.analysis.at = at.map(|a| At::parse(a).unwrap());
    analyze_path(&path(rel), &options).unwrap()
}

#[test]
fn at_the_peaks_event_the_report_is_the_peaks() {
    let peak = analyze(SAMPLE, None);
    let d = &peak.devices[0];
    for spec in [d.peak.event_index.to_string(), "peak".to_owned()] {
        let at = analyze(SAMPLE, Some(&spec));
        let a = &at.devices[0];
        assert_eq!(a.peak, d.peak, "--at {spec}");
        assert_eq!(a.timeline, d.timeline, "--at {spec}");
        assert_eq!(a.ooms, d.ooms);
        let instant =
            a.at.as_ref()
                .expect("the report says it was asked for an instant");
        assert_eq!(
            (instant.event_index, instant.peak_event_index),
            (d.peak.event_index, d.peak.event_index)
        );
    }
}

#[test]
fn elsewhere_the_report_holds_exactly_what_was_live_then() {
    let peak = analyze(SAMPLE, None);
    let d = &peak.devices[0];
    let k = d.peak.event_index / 2;
    let at = analyze(SAMPLE, Some(&k.to_string()));
    let a = &at.devices[0];
    assert_eq!(a.peak.event_index, k);
    assert_ne!(a.peak.allocated_bytes, d.peak.allocated_bytes);
    assert!(a.peak.allocated_bytes < d.peak.allocated_bytes);
    // Every allocation listed was made at or before k and freed after it.
    for x in &a.peak.allocations {
        assert!(x.alloc.is_none_or(|e| e.event_index() <= k), "{x:?}");
        assert!(x.free.is_none_or(|e| e.event_index() > k), "{x:?}");
    }
    let tensors: u64 = a.peak.allocations.iter().map(|x| x.size).sum();
    assert!(tensors <= a.peak.allocated_bytes);
    // The instant is marked on the plot; the real peak stays named.
    let instant = a.at.as_ref().unwrap();
    assert_eq!(instant.peak_allocated_bytes, d.peak.allocated_bytes);
    assert_eq!(instant.peak_event_index, d.peak.event_index);
}

/// A replay by hand of the synthetic history: the allocated bytes after
/// each instant.
#[test]
fn instants_of_a_known_history_match_a_replay_by_hand() {
    for (spec, event, allocated) in [
        ("0", 0, 0),
        ("8", 8, 64 * MIB),
        // A free requested is not yet a free completed.
        ("9", 9, 64 * MIB),
        ("10", 10, 56 * MIB),
        ("oom:0", 17, 32 * MIB),
        ("end", 19, 24 * MIB),
    ] {
        let r = analyze(FRAGMENTED, Some(spec));
        let d = &r.devices[0];
        assert_eq!(d.peak.event_index, event, "--at {spec}");
        assert_eq!(d.peak.allocated_bytes, allocated, "--at {spec}");
        let live: u64 = d.peak.allocations.iter().map(|a| a.size).sum();
        assert_eq!(live, allocated, "--at {spec}");
        // The allocator's view follows the instant.
        let s = &d.segments.as_ref().unwrap().instants[0];
        assert_eq!(s.event_index, Some(event), "--at {spec}");
        // The one segment is allocated by event 0.
        assert_eq!(s.reserved_bytes, 64 * MIB, "--at {spec}");
    }
}

#[test]
fn an_instant_outside_the_trace_is_a_usage_error_naming_the_file() {
    let out = Command::cargo_bin("memcut")
        .unwrap()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["analyze", FRAGMENTED, "--at", "99"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("fragmented_oom.pickle") && err.contains("events 0 to 19 only"),
        "{err}"
    );
    for bad in ["oom:1", "3h"] {
        let out = Command::cargo_bin("memcut")
            .unwrap()
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["analyze", FRAGMENTED, "--at", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--at {bad}");
    }
}

/// Issue 33 item 6: with `--at`, every format's headline says which
/// instant it shows and that it is not the peak, and no line doubles the
/// word (`allocator at at 1000`).
#[test]
fn the_headline_names_the_instant_not_the_peak() {
    let peak = analyze(FRAGMENTED, None);
    let k = peak.devices[0].peak.event_index - 2;
    for format in ["text", "md", "html"] {
        let out = Command::cargo_bin("memcut")
            .unwrap()
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["analyze", FRAGMENTED, "--at", &k.to_string(), "-f", format])
            .output()
            .unwrap();
        assert!(out.status.success(), "{format}");
        let page = String::from_utf8(out.stdout).unwrap();
        assert!(
            page.contains(&format!("--at {k}")) && page.contains("not the peak"),
            "{format}: {page}"
        );
        assert!(!page.contains("at at "), "{format}: {page}");
    }
}
