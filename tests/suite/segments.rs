//! The allocator's view: `devices[].segments` in JSON, the segment map in
//! HTML, fragmentation at an OOM.

use crate::common;

use memcut::{analyze_path, render, report::BlockUse, AnalyzeOptions, OutputFormat, Report};

const MIB: u64 = 1 << 20;

fn analyze(path: &std::path::Path) -> Report {
    analyze_path(path, &AnalyzeOptions::new()).unwrap()
}

/// tests/data/segments/make_segments.py: 32 MiB cached in 8 MiB holes, a
/// 16 MiB request fails with 4 MiB free on the device. Only the state
/// rebuilt at the OOM shows why: by dump time two holes have merged.
#[test]
fn a_request_larger_than_every_free_block_but_not_the_free_total_is_fragmentation() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/segments/fragmented_oom.pickle");
    let r = analyze(&path);
    let d = &r.devices[0];
    let oom = &d.ooms[0];
    assert_eq!(oom.requested_bytes, 16 * MIB);
    assert_eq!(oom.largest_free_block_bytes, Some(8 * MIB));
    assert!(oom.verdict.starts_with("fragmentation: 32.0 MiB cached (32.0 MiB in free blocks, 32.0 MiB of it in blocks smaller than the request, across 1 segment) but the largest free block is 8.0 MiB < 16.0 MiB requested"), "{}", oom.verdict);
    let view = d.segments.as_ref().unwrap();
    let labels: Vec<&str> = view.instants.iter().map(|s| s.label.as_str()).collect();
    assert_eq!(labels, ["peak", "oom 0", "dump"]);
    let at_oom = &view.instants[1];
    assert!(!at_oom.exact);
    assert_eq!(
        (
            at_oom.allocated_bytes,
            at_oom.inactive_bytes,
            at_oom.largest_free_block_bytes,
            at_oom.fragmentation_bytes
        ),
        (32 * MIB, 32 * MIB, 8 * MIB, 32 * MIB)
    );
    // Blocks alternate: allocated, free, allocated, … in the one segment.
    let states: Vec<BlockUse> = at_oom.segments[0]
        .blocks
        .iter()
        .map(|b| b.state())
        .collect();
    assert_eq!(states.len(), 8);
    assert!(states
        .iter()
        .enumerate()
        .all(|(k, s)| (*s == BlockUse::Inactive) == (k % 2 == 1)));
    let dump = &view.instants[2];
    assert!(dump.exact);
    assert_eq!(dump.largest_free_block_bytes, 16 * MIB);
    // The finding the report leads with: the 32 MiB of holes, fixed by
    // expandable segments; the allocated peak does not move.
    let kinds: Vec<_> = d.findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [memcut::report::FindingKind::FragmentationAtOom]);
    let f = &d.findings[0];
    assert_eq!(
        (f.fix.as_str(), f.saving_bytes),
        ("expandable_segments", 32 * MIB)
    );
    assert_eq!(f.peak_after_bytes, d.peak.allocated_bytes);
    assert!(
        f.evidence[0].contains("across 1 segment"),
        "{:?}",
        f.evidence
    );
    let html = render(&r, OutputFormat::Html);
    assert!(html.contains("<svg class=\"segments\""));
    assert!(html.contains("Segment map at oom 0"));
}

/// tests/data/segments/make_segments.py: a Chrome trace of a 16 GiB device
/// whose 3 GiB request fails with 6 GiB reserved: at least 7 GiB was held
/// outside PyTorch's allocator. The finding says so, and the plan's budget
/// is what the allocator could have had (16 - 7 GiB), not the capacity.
#[test]
fn an_oom_far_below_the_device_capacity_is_memory_outside_the_allocator() {
    const GIB: u64 = 1 << 30;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/segments/outside_oom.trace.json");
    let r = analyze(&path);
    let d = &r.devices[0];
    assert_eq!(d.capacity_bytes, Some(16 * GIB));
    let oom = &d.ooms[0];
    assert_eq!(
        (
            oom.requested_bytes,
            oom.reserved_bytes,
            oom.device_free_bytes
        ),
        (3 * GIB, Some(6 * GIB), None)
    );
    // No free bytes in a Chrome trace's OOM: the capacity bounds them.
    assert!(
        oom.verdict.ends_with("(less than the 3.00 GiB segment the allocator asked for; of the device's 16.00 GiB, 6.00 GiB was PyTorch's)"),
        "{}",
        oom.verdict
    );
    let kinds: Vec<_> = d.findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [memcut::report::FindingKind::MemoryOutsideAllocator]);
    let f = &d.findings[0];
    assert_eq!(
        (f.fix.as_str(), f.saving_bytes, f.bytes_at_peak),
        ("free_outside_memory", 7 * GIB, 7 * GIB)
    );
    assert_eq!(f.peak_after_bytes, d.peak.allocated_bytes);
    assert!(
        f.evidence[0].contains("at least 7.00 GiB"),
        "{:?}",
        f.evidence
    );
    let plan = d
        .plan
        .as_ref()
        .expect("a plan: the device's capacity is known");
    assert_eq!(plan.budget_bytes, 9 * GIB);
    let md = render(&r, OutputFormat::Md);
    assert!(
        md.contains("**Finding** memory_outside_allocator: at least 7.00 GiB"),
        "{md}"
    );
    // Asked for, its what-if moves nothing and says why.
    let mut options = AnalyzeOptions::new();
    options.plan.what_if = vec!["free_outside_memory".into()];
    let r = analyze_path(&path, &options).unwrap();
    let w = r.devices[0].what_if.as_ref().unwrap();
    assert_eq!(w.peak_allocated_bytes, r.devices[0].peak.allocated_bytes);
    assert!(
        w.because[0].contains("outside PyTorch's allocator"),
        "{:?}",
        w.because
    );
}

/// A snapshot does not record the device's memory; given
/// (`--device-memory`), its OOM's own numbers say how much was outside the
/// allocator: 16 GiB − 64 MiB reserved − 4 MiB free.
#[test]
fn device_memory_makes_a_snapshot_oom_say_what_was_outside_the_allocator() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/segments/fragmented_oom.pickle");
    let mut options = AnalyzeOptions::new();
    options.plan.device_memory = Some(16 << 30);
    let r = analyze_path(&path, &options).unwrap();
    let d = &r.devices[0];
    let kinds: Vec<_> = d.findings.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        [
            memcut::report::FindingKind::FragmentationAtOom,
            memcut::report::FindingKind::MemoryOutsideAllocator
        ]
    );
    let outside = (16 << 30) - 64 * MIB - 4 * MIB;
    assert_eq!(d.findings[1].saving_bytes, outside);
    assert!(d.findings[1].evidence[0].contains("(--device-memory)"));
    let plan = d.plan.as_ref().unwrap();
    assert_eq!(plan.budget_bytes, (16 << 30) - outside);
    assert!(
        plan.budget_source.contains("--device-memory"),
        "{}",
        plan.budget_source
    );
    // Without it, the snapshot says nothing of the device's size.
    assert_eq!(analyze(&path).devices[0].findings.len(), 1);
}

/// Snapshots without history (verl) and with (sketchkv2) get a segment
/// map and fragmentation figures; without history, the dump's own.
#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn segments_only_and_history_snapshots_get_a_segment_map() {
    for (rel, exact, segments) in [
        ("verl/mem.pickle", true, 127),
        ("sketchkv2/my_snapshot.pickle", false, 259),
    ] {
        let r = analyze(&common::corpus().join(rel));
        let d = &r.devices[0];
        let first = &d.segments.as_ref().expect(rel).instants[0];
        assert_eq!(
            (first.exact, first.segment_count),
            (exact, segments),
            "{rel}"
        );
        assert!(
            first.inactive_bytes > 0 && first.largest_free_block_bytes > 0,
            "{rel}"
        );
        assert!(first.fragmentation_bytes <= first.inactive_bytes, "{rel}");
        assert_eq!(Some(first.reserved_bytes), d.peak.reserved_bytes, "{rel}");
        let html = render(&r, OutputFormat::Html);
        assert!(html.contains("<svg class=\"segments\""), "{rel}");
        assert!(html.contains("largest free block"), "{rel}");
        // Segments alike share a bar ("56 × 128.0 MiB"): each bar of the
        // first map is a different layout, and the bars count every
        // segment but those summed up in the note.
        let map = html
            .split("<svg class=\"segments\"")
            .nth(1)
            .and_then(|m| m.split("</figure>").next())
            .unwrap();
        let bars: Vec<u64> = map
            .split("text-anchor=\"end\">")
            .skip(1)
            .map(|t| {
                let label = t.split('<').next().unwrap();
                label
                    .split_once(" × ")
                    .map_or(1, |(n, _)| n.parse().unwrap())
            })
            .collect();
        let not_drawn: u64 = map
            .split("</svg>")
            .nth(1)
            .and_then(|note| note.split(" smaller segments not drawn").next())
            .and_then(|t| t.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(bars.iter().any(|&n| n > 1), "{rel}: no segments alike");
        assert_eq!(bars.iter().sum::<u64>() + not_drawn, segments, "{rel}");
    }
}
