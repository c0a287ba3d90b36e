//! The JSON report is a contract, pinned here independently of the types
//! that write it (as ripgrep's `tests/json.rs` does): these mirror structs
//! deny unknown fields and require every known one, so renaming, adding or
//! dropping a field, or a new enum value, fails this test until the
//! contract (and `schema_version`) is changed on purpose.

// The mirror's fields are there to be required, not read.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Report {
    schema_version: u32,
    tool: Tool,
    source: Source,
    devices: Vec<Device>,
    diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tool {
    name: String,
    version: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Source {
    path: String,
    format: InputFormat,
    size_bytes: u64,
    /// Only when the input says which rank recorded it.
    #[serde(default)]
    distributed: Option<Distributed>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Distributed {
    rank: u32,
    world_size: u32,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum InputFormat {
    TorchSnapshot,
    ChromeTrace,
    MemoryTimeline,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
enum Category {
    Parameter,
    Gradient,
    OptimizerState,
    Activation,
    AutogradDetail,
    Temporary,
    Input,
    KvCache,
    AllocatorCache,
    Unknown,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Device {
    device: String,
    events: u64,
    baseline_bytes: u64,
    before_recording: Vec<BeforeRecordingPart>,
    capacity_bytes: Option<u64>,
    peak: Peak,
    reserved_peak_bytes: Option<u64>,
    reserved_peak_event_index: Option<u64>,
    ooms: Vec<Oom>,
    findings: Vec<Finding>,
    /// Written only for `--what-if`.
    #[serde(default)]
    what_if: Option<WhatIf>,
    /// Written only for a recording of a first training step.
    #[serde(default)]
    next_step: Option<NextStep>,
    plan: Option<Plan>,
    timeline: Timeline,
    /// Written only for `--at`.
    #[serde(default)]
    at: Option<ReportedInstant>,
    /// Written only for snapshots that record the allocator's segments.
    #[serde(default)]
    segments: Option<SegmentsView>,
    /// Written only when some live allocation has frames.
    #[serde(default)]
    stacks: Option<StackTable>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Finding {
    kind: String,
    bytes_at_peak: u64,
    evidence: Vec<String>,
    fix: String,
    saving_bytes: u64,
    peak_after_bytes: u64,
    #[serde(default)]
    series: Vec<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NextStep {
    peak_allocated_bytes: u64,
    peak_event_index: u64,
    carried_bytes: u64,
    evidence: Vec<String>,
    #[serde(default)]
    series: Vec<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WhatIf {
    levers: Vec<String>,
    peak_allocated_bytes: u64,
    peak_reserved_bytes: Option<u64>,
    peak_event_index: u64,
    estimate: bool,
    because: Vec<String>,
    #[serde(default)]
    series: Vec<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportedInstant {
    spec: String,
    event_index: u64,
    peak_allocated_bytes: u64,
    peak_event_index: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentsView {
    instants: Vec<SegmentState>,
    ooms_left_out: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentState {
    label: String,
    event_index: Option<u64>,
    exact: bool,
    segment_count: u64,
    reserved_bytes: u64,
    allocated_bytes: u64,
    pending_free_bytes: u64,
    inactive_bytes: u64,
    largest_free_block_bytes: u64,
    request_bytes: u64,
    fragmentation_bytes: u64,
    unplaced_bytes: u64,
    /// `[address, size, expandable, [[offset, size, state, category], …]]`.
    segments: Vec<(u64, u64, bool, Vec<Block>)>,
}

/// `[offset, size, state, category]`.
type Block = (u64, u64, BlockUse, Option<Category>);

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum BlockUse {
    Allocated,
    PendingFree,
    Inactive,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StackTable {
    frames: Vec<String>,
    internal: Vec<u32>,
    stacks: Vec<Vec<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Peak {
    allocated_bytes: u64,
    reserved_bytes: Option<u64>,
    event_index: u64,
    ts_us: Option<f64>,
    phase: String,
    by_category: BTreeMap<Category, u64>,
    attribution: Attribution,
    top_sites: Vec<TopSite>,
    allocations: Vec<Allocation>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Attribution {
    observed_bytes: u64,
    inferred_bytes: u64,
    unknown_bytes: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BeforeRecordingPart {
    category: Category,
    bytes: u64,
    rule: String,
    evidence: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopSite {
    site: String,
    category: Category,
    bytes: u64,
    count: u64,
    /// Indices into the device's `stacks.stacks`.
    stacks: Vec<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Allocation {
    addr: u64,
    size: u64,
    category: Category,
    site: String,
    rule: String,
    stack: Option<u32>,
    /// `[event_index, t_us]`.
    alloc: Option<(u64, Option<f64>)>,
    free: Option<(u64, Option<f64>)>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Oom {
    event_index: u64,
    ts_us: Option<f64>,
    requested_bytes: u64,
    device_free_bytes: Option<u64>,
    allocated_bytes: u64,
    reserved_bytes: Option<u64>,
    by_category: BTreeMap<Category, u64>,
    largest_free_block_bytes: Option<u64>,
    verdict: String,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Verdict {
    Fits,
    FitsAfterCuts,
    DoesNotFit,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    budget_bytes: u64,
    headroom_bytes: u64,
    target_bytes: u64,
    /// What the report leads with: the OOM's plan when there is one.
    #[serde(default)]
    headline: Option<Headline>,
    peak_before_bytes: u64,
    steps: Vec<PlanStep>,
    estimated_peak_bytes: u64,
    verdict: Verdict,
    reason: String,
    budget_source: String,
    peak_before_at: String,
    gap_bytes: u64,
    /// Left out when there is no OOM.
    #[serde(default)]
    oom_plan: Option<OomPlan>,
    estimate: bool,
    #[serde(default)]
    estimate_reason: Option<String>,
    min_step_bytes: u64,
    /// Left out when empty.
    #[serde(default)]
    considered: Vec<ConsideredLever>,
    /// Left out when empty.
    #[serde(default)]
    facts: Vec<PlanFact>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Headline {
    about: HeadlineAbout,
    verdict: Verdict,
    reason: String,
    estimate: bool,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum HeadlineAbout {
    Oom,
    Peak,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsideredLever {
    lever: String,
    outcome: ConsideredOutcome,
    reason: String,
    saved_bytes: u64,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum ConsideredOutcome {
    NotApplicable,
    Negligible,
    NoEffect,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFact {
    fact: String,
    value: String,
    because: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanStep {
    lever: String,
    action: String,
    cost: Cost,
    categories: Vec<Category>,
    saved_bytes: u64,
    peak_after_bytes: u64,
    peak_moved_to: String,
    scales: BTreeMap<Category, f64>,
    peak_event_index: u64,
    peak_moved: bool,
    targets: BTreeMap<String, f64>,
    because: String,
    /// Left out when the lever's conditions all hold.
    #[serde(default)]
    condition: Option<String>,
    #[serde(default)]
    tradeoff: Option<String>,
    estimate: bool,
    #[serde(default)]
    estimate_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
enum Cost {
    #[serde(rename = "free")]
    Free,
    #[serde(rename = "cheap")]
    Cheap,
    #[serde(rename = "costs compute")]
    Compute,
    #[serde(rename = "costs bandwidth")]
    Bandwidth,
    #[serde(rename = "costs accuracy")]
    Accuracy,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OomPlan {
    event_index: u64,
    requested_bytes: u64,
    demand_bytes: u64,
    steps: Vec<PlanStep>,
    estimated_peak_bytes: u64,
    verdict: Verdict,
    gap_bytes: u64,
    reason: String,
    estimate: bool,
    #[serde(default)]
    estimate_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Timeline {
    x_unit: XUnit,
    x: Vec<f64>,
    series: BTreeMap<Category, Vec<u64>>,
    reserved: Option<Vec<u64>>,
    peak_x: f64,
    oom_x: Vec<f64>,
    #[serde(default)]
    bands: Vec<Band>,
    segments: Option<SegmentFrames>,
    #[serde(default)]
    detail: Vec<Detail>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Detail {
    x: Vec<f64>,
    series: BTreeMap<Category, Vec<u64>>,
    reserved: Option<Vec<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentFrames {
    categories: Vec<Category>,
    frames: Vec<SegmentFrame>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SegmentFrame {
    point: usize,
    x: f64,
    event_index: Option<u64>,
    exact: bool,
    segment_count: u64,
    reserved_bytes: u64,
    allocated_bytes: u64,
    pending_free_bytes: u64,
    inactive_bytes: u64,
    largest_free_block_bytes: u64,
    unplaced_bytes: u64,
    /// `[count, size, expandable, [offset, bytes, code, …]]`.
    bars: Vec<(u64, u64, bool, Vec<u64>)>,
    /// Segments in no bar: count, bytes, free bytes.
    rest: [u64; 3],
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Band {
    x0: f64,
    x1: f64,
    bytes: u64,
    category: Category,
    rule: String,
    site: String,
    stack: Option<u32>,
    alloc: Option<(u64, Option<f64>)>,
    free: Option<(u64, Option<f64>)>,
    /// Absent for 0.
    #[serde(default)]
    level: u8,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum XUnit {
    TimeUs,
    EventIndex,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Diagnostic {
    level: Level,
    message: String,
    /// Written only when true.
    #[serde(default)]
    partial_read: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Level {
    Info,
    Warning,
}

/// A plan's steps each save at least 1% of the peak, and add up to the
/// total reduction; the headline is the OOM's plan when there is one.
fn check_plan(what: &str, plan: &Plan) {
    let totals = [(
        plan.peak_before_bytes,
        plan.estimated_peak_bytes,
        &plan.steps,
    )]
    .into_iter()
    .chain(
        plan.oom_plan
            .iter()
            .map(|o| (o.demand_bytes, o.estimated_peak_bytes, &o.steps)),
    );
    for (before, after, steps) in totals {
        let saved: u64 = steps.iter().map(|s| s.saved_bytes).sum();
        assert_eq!(saved, before - after, "{what}: the steps add up");
        for s in steps {
            assert!(
                s.saved_bytes >= plan.min_step_bytes.min(1),
                "{what}: {}",
                s.lever
            );
        }
    }
    assert!(
        plan.steps
            .iter()
            .all(|s| s.saved_bytes >= plan.min_step_bytes),
        "{what}"
    );
    let headline = plan.headline.as_ref().expect("a headline");
    let about = match plan.oom_plan {
        Some(_) => HeadlineAbout::Oom,
        None => HeadlineAbout::Peak,
    };
    assert_eq!(headline.about, about, "{what}");
}

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Reads `text` through the mirror and checks what the field names alone
/// cannot: `schema_version` first, and the numbers agreeing with each other.
fn check(what: &str, text: &str) -> Report {
    assert!(
        text.starts_with("{\n  \"schema_version\": 3,"),
        "{what}: schema_version is not first"
    );
    let report: Report =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: off the contract: {e}"));
    assert_eq!(report.schema_version, 3);
    assert_eq!(report.tool.name, "memcut");
    assert!(!report.tool.version.is_empty() && !report.source.path.is_empty());
    for d in &report.devices {
        let tensors: u64 = d
            .peak
            .by_category
            .iter()
            .filter(|(c, _)| **c != Category::AllocatorCache)
            .map(|(_, b)| b)
            .sum();
        assert_eq!(tensors, d.peak.allocated_bytes, "{what}: {}", d.device);
        let at = &d.peak.attribution;
        assert_eq!(
            at.observed_bytes + at.inferred_bytes + at.unknown_bytes,
            d.peak.allocated_bytes,
            "{what}: {}: observed + inferred + unknown",
            d.device
        );
        assert_eq!(
            at.unknown_bytes,
            d.peak
                .by_category
                .get(&Category::Unknown)
                .copied()
                .unwrap_or(0),
            "{what}: {}: unknown bytes",
            d.device
        );
        let before: u64 = d.before_recording.iter().map(|p| p.bytes).sum();
        assert_eq!(
            before, d.baseline_bytes,
            "{what}: {}: before recording",
            d.device
        );
        let stacks = d.stacks.as_ref().map_or(0, |t| t.stacks.len());
        for a in &d.peak.allocations {
            assert!(
                a.stack.is_none_or(|s| (s as usize) < stacks),
                "{what}: stack index"
            );
            assert!(
                a.alloc.is_none_or(|e| e.0 <= d.peak.event_index),
                "{what}: alloc after the peak"
            );
            assert!(
                a.free.is_none_or(|e| e.0 > d.peak.event_index),
                "{what}: freed before the peak"
            );
        }
        if let Some(t) = &d.stacks {
            let frames = t.frames.len() as u32;
            assert!(
                t.stacks
                    .iter()
                    .flatten()
                    .chain(&t.internal)
                    .all(|&f| f < frames),
                "{what}"
            );
        }
        for s in d.segments.iter().flat_map(|v| &v.instants) {
            let mut by_state = [0u64; 3];
            let mut reserved = 0;
            for (_, size, _, blocks) in &s.segments {
                reserved += size;
                // Blocks cover their segment from start to end.
                let mut cursor = 0;
                for (offset, bytes, state, category) in blocks {
                    assert_eq!(*offset, cursor, "{what}: {}: blocks leave a gap", s.label);
                    assert_eq!(category.is_none(), *state == BlockUse::Inactive, "{what}");
                    cursor += bytes;
                    by_state[match state {
                        BlockUse::Allocated => 0,
                        BlockUse::PendingFree => 1,
                        BlockUse::Inactive => 2,
                    }] += bytes;
                }
                assert_eq!(
                    cursor, *size,
                    "{what}: {}: blocks do not fill their segment",
                    s.label
                );
            }
            assert_eq!(s.segment_count as usize, s.segments.len(), "{what}");
            assert_eq!(reserved, s.reserved_bytes, "{what}: {}", s.label);
            assert_eq!(
                by_state,
                [s.allocated_bytes, s.pending_free_bytes, s.inactive_bytes],
                "{what}: {}",
                s.label
            );
            assert!(s.fragmentation_bytes <= s.inactive_bytes);
            assert!(s.largest_free_block_bytes <= s.inactive_bytes);
        }
        let t = &d.timeline;
        assert!(t.series.values().all(|s| s.len() == t.x.len()), "{what}");
        assert!(t.reserved.as_ref().is_none_or(|r| r.len() == t.x.len()));
        assert_eq!(t.oom_x.len(), d.ooms.len(), "{what}");
        // Bands: the largest allocations, each within the plotted span, its
        // stack in the table, its life in order.
        let lo = t.x.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = t.x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        for b in &t.bands {
            assert!(
                b.bytes > 0 && !b.rule.is_empty() && !b.site.is_empty(),
                "{what}"
            );
            assert!(
                lo <= b.x0 && b.x0 <= b.x1 && b.x1 <= hi,
                "{what}: band {b:?}"
            );
            let stacks = d.stacks.as_ref().map_or(0, |s| s.stacks.len());
            assert!(b.stack.is_none_or(|k| (k as usize) < stacks), "{what}");
            assert!(
                b.alloc
                    .zip(b.free)
                    .is_none_or(|(a, f)| a.0 < f.0 && f.0 < d.events),
                "{what}: band {b:?}"
            );
            let _ = b.category;
        }
        assert!(
            t.bands.len() <= 32 * 16 * (1 + t.detail.len()),
            "{what}: {} bands",
            t.bands.len()
        );
        // Detail levels: each within the one before it, no more points
        // than the whole run's, its series as long as its x; bands name a
        // level there is.
        assert!(t.detail.len() <= 2, "{what}");
        let mut outer = (lo, hi, t.x.len());
        for l in &t.detail {
            assert!(
                l.x.len() >= 2 && l.x.len() <= t.x.len().max(outer.2),
                "{what}"
            );
            assert!(l.series.values().all(|s| s.len() == l.x.len()), "{what}");
            assert!(
                l.reserved.as_ref().is_none_or(|r| r.len() == l.x.len()),
                "{what}"
            );
            let (a, b) = (l.x[0], l.x[l.x.len() - 1]);
            assert!(a <= b, "{what}: detail {a} > {b}");
            assert!(
                b - a <= outer.1 - outer.0 || outer.1 <= outer.0,
                "{what}: detail wider than its level"
            );
            outer = (a, b, l.x.len());
        }
        assert!(
            t.bands.iter().all(|b| (b.level as usize) <= t.detail.len()),
            "{what}: a band of a level there is not"
        );
        // The viewer's segment maps: at plotted points, in order; the bars
        // and the rest are every segment; runs within their segment, in
        // order, coded by the categories; the dump's frame is the dump's
        // state and the reported instant's frame is its state.
        if let Some(sf) = &t.segments {
            assert!(d.segments.is_some(), "{what}: frames without segments");
            assert!(
                // Evenly spaced points, the reported instant and the OOMs.
                !sf.frames.is_empty() && sf.frames.len() <= 26 + 1 + 8,
                "{what}"
            );
            assert!(
                sf.frames.windows(2).all(|w| w[0].point < w[1].point),
                "{what}"
            );
            for f in &sf.frames {
                assert!(f.point < t.x.len(), "{what}");
                assert!(f.x.is_finite(), "{what}");
                assert!(f.bars.len() <= 48, "{what}");
                let count: u64 = f.bars.iter().map(|b| b.0).sum::<u64>() + f.rest[0];
                let bytes: u64 = f.bars.iter().map(|b| b.0 * b.1).sum::<u64>() + f.rest[1];
                assert_eq!(count, f.segment_count, "{what}: frame {}", f.point);
                assert_eq!(bytes, f.reserved_bytes, "{what}: frame {}", f.point);
                let mut held = 0;
                for (n, size, _, runs) in &f.bars {
                    assert_eq!(runs.len() % 3, 0, "{what}");
                    let mut end = 0;
                    for r in runs.chunks(3) {
                        assert!(r[0] >= end && r[0] + r[1] <= *size, "{what}: {runs:?}");
                        assert!((r[2] / 2) < sf.categories.len() as u64, "{what}");
                        end = r[0] + r[1];
                        held += n * r[1];
                    }
                }
                let free: u64 = f.bars.iter().map(|b| b.0 * b.1).sum::<u64>() - held + f.rest[2];
                assert_eq!(free, f.inactive_bytes, "{what}: frame {}", f.point);
                assert!(f.largest_free_block_bytes <= f.inactive_bytes, "{what}");
                let state = d
                    .segments
                    .iter()
                    .flat_map(|v| &v.instants)
                    .find(|s| s.event_index == f.event_index && s.exact == f.exact);
                if let Some(s) = state {
                    assert_eq!(
                        (
                            s.allocated_bytes,
                            s.pending_free_bytes,
                            s.inactive_bytes,
                            s.segment_count,
                            s.unplaced_bytes
                        ),
                        (
                            f.allocated_bytes,
                            f.pending_free_bytes,
                            f.inactive_bytes,
                            f.segment_count,
                            f.unplaced_bytes
                        ),
                        "{what}: frame {} against the state there",
                        f.point
                    );
                }
            }
            let reported = d.segments.iter().flat_map(|v| &v.instants).next();
            assert!(
                reported.is_none_or(|s| sf.frames.iter().any(|f| f.event_index == s.event_index)),
                "{what}: the reported instant without its frame"
            );
        }
        // A finding's curve with its fix: one value per x, its highest the
        // peak with the fix.
        for f in &d.findings {
            if !f.series.is_empty() {
                assert_eq!(f.series.len(), t.x.len(), "{what}: {}", f.kind);
                assert_eq!(f.series.iter().max(), Some(&f.peak_after_bytes), "{what}");
            }
        }
        assert!(!d.device.is_empty() && d.events >= d.peak.event_index);
        // Live at the peak: allocated at or before it, freed after it.
        for a in &d.peak.allocations {
            assert!(
                a.alloc.is_none_or(|(e, _)| e <= d.peak.event_index)
                    && a.free
                        .is_none_or(|(e, _)| e > d.peak.event_index && e < d.events),
                "{what}: {}: allocation at {} not live at the peak",
                d.device,
                a.addr
            );
        }
        if let Some(plan) = &d.plan {
            check_plan(what, plan);
        }
    }
    report
}

#[test]
fn every_golden_json_report_is_on_the_contract() {
    let mut seen = 0;
    for entry in std::fs::read_dir(manifest().join("tests/golden")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let report = check(
                &path.display().to_string(),
                &std::fs::read_to_string(&path).unwrap(),
            );
            assert!(!report.devices[0].timeline.x.is_empty());
            seen += 1;
        }
    }
    assert!(seen >= 14, "{seen} golden JSON reports");
}

/// Plans, OOMs, several devices and damaged input: the fields the samples
/// without a budget do not show.
#[test]
fn plans_ooms_and_damaged_inputs_are_on_the_contract() {
    let run = |file: &str, args: &[&str]| -> Report {
        let out = assert_cmd::Command::cargo_bin("memcut")
            .unwrap()
            .current_dir(manifest())
            .arg("analyze")
            .arg(file)
            .args(["-f", "json"])
            .args(args)
            .output()
            .unwrap();
        check(file, &String::from_utf8(out.stdout).unwrap())
    };
    let oom = run(
        "tests/data/broken/snapshot_oom_without_device_free.pkl",
        &["--budget", "1GiB"],
    );
    let d = &oom.devices[0];
    assert!(!d.ooms.is_empty());
    let plan = d.plan.as_ref().expect("a plan");
    assert!(plan.oom_plan.is_some());
    let planned = run(
        "sample_traces/train_adamw.snapshot.pickle.gz",
        &["--budget", "16MiB"],
    );
    let plan = planned.devices[0].plan.as_ref().expect("a plan");
    assert_eq!(plan.verdict, Verdict::FitsAfterCuts);
    assert!(!plan.steps.is_empty());
    assert!(plan.steps.iter().all(|s| !s.scales.is_empty()));
    // A run with a finding (the README's example): its curve with the fix.
    let found = run(
        "sample_traces/pairs/tuned/kept_graph.tinylm.warm.waste.trace.json.gz",
        &[],
    );
    let f = &found.devices[0].findings;
    assert!(!f.is_empty() && f.iter().all(|f| !f.series.is_empty()));
    let many = run("tests/data/broken/snapshot_ten_devices.pkl", &[]);
    assert_eq!(many.devices.len(), 10);
    let cut = run("tests/data/broken/chrome_cut_mid_event.json", &[]);
    assert_eq!(cut.source.format, InputFormat::ChromeTrace);
    assert!(cut.diagnostics.iter().any(|d| d.partial_read));
    let timeline = run("sample_traces/train_adamw.timeline.json.gz", &[]);
    assert_eq!(timeline.source.format, InputFormat::MemoryTimeline);
    let fragmented = run("tests/data/segments/fragmented_oom.pickle", &[]);
    let segments = fragmented.devices[0].segments.as_ref().expect("segments");
    assert!(segments.instants.iter().any(|s| s.label.contains("oom 0")));
    let at = run(
        "sample_traces/train_adamw.snapshot.pickle.gz",
        &["--at", "100"],
    );
    assert_eq!(at.devices[0].at.as_ref().map(|a| a.event_index), Some(100));
    let trace = run("sample_traces/train_adamw.trace.json.gz", &[]);
    assert_eq!(trace.devices[0].timeline.x_unit, XUnit::TimeUs);
    assert!(trace.source.distributed.is_none());
    let rank = run("tests/data/ranks/rank_step.3.pt.trace.json.gz", &[]);
    let d = rank.source.distributed.expect("distributedInfo");
    assert_eq!((d.rank, d.world_size), (3, 4));
}

/// The mirror is strict: an unknown field, a missing one or an unknown
/// category is refused.
#[test]
fn the_mirror_refuses_what_is_off_the_contract() {
    let text =
        std::fs::read_to_string(manifest().join("tests/golden/grad_accum.snapshot.json")).unwrap();
    check("golden", &text);
    for (from, to) in [
        ("\"events\":", "\"event_count\":"),
        ("\"baseline_bytes\": ", "\"baseline_bytes\": 1, \"extra\": "),
        ("\"optimizer_state\":", "\"optimiser_state\":"),
    ] {
        let changed = text.replacen(from, to, 1);
        assert_ne!(changed, text, "{from}");
        assert!(
            serde_json::from_str::<Report>(&changed).is_err(),
            "accepted {from} -> {to}"
        );
    }
}

// The diff's JSON (`memcut diff -f json`): a contract of its own, with its
// own `schema_version`.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffReport {
    schema_version: u32,
    kind: String,
    tool: Tool,
    before: Source,
    after: Source,
    devices: Vec<DeviceDiff>,
    only_before: Vec<String>,
    only_after: Vec<String>,
    check: Option<PeakCheck>,
    diagnostics: Vec<Diagnostic>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeakCheck {
    max_growth_percent: f64,
    failed: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceDiff {
    device: String,
    after_device: Option<String>,
    peak: Change,
    reserved_at_peak: Option<Change>,
    reserved_peak: Option<Change>,
    by_category: Vec<CategoryChange>,
    sites: Vec<SiteChange>,
    sites_left_out: u64,
    before_peak: PeakInstant,
    after_peak: PeakInstant,
    before_plan: Option<PlanSummary>,
    after_plan: Option<PlanSummary>,
    timeline: DiffTimeline,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Change {
    before: u64,
    after: u64,
    change_bytes: i64,
    change_percent: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CategoryChange {
    category: Category,
    before: u64,
    after: u64,
    change_bytes: i64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SiteChange {
    site: String,
    category: Category,
    status: SiteStatus,
    before_bytes: u64,
    after_bytes: u64,
    change_bytes: i64,
    before_count: u64,
    after_count: u64,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum SiteStatus {
    Appeared,
    Disappeared,
    Grew,
    Shrank,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PeakInstant {
    event_index: u64,
    events: u64,
    phase: String,
    t_us: Option<f64>,
    fraction: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanSummary {
    verdict: Verdict,
    target_bytes: u64,
    estimated_peak_bytes: u64,
    levers: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffTimeline {
    before: NormalisedSeries,
    after: NormalisedSeries,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NormalisedSeries {
    x_unit: XUnit,
    span: f64,
    x: Vec<f64>,
    allocated: Vec<u64>,
    reserved: Option<Vec<u64>>,
    peak_x: f64,
}

/// Mixed formats, a budget (plans on both sides) and the check: every
/// field of the diff's contract, and its numbers agreeing.
#[test]
fn the_diff_json_is_on_its_contract() {
    let out = assert_cmd::Command::cargo_bin("memcut")
        .unwrap()
        .current_dir(manifest())
        .args([
            "diff",
            "sample_traces/checkpointing.snapshot.pickle.gz",
            "sample_traces/train_adamw.trace.json.gz",
            "-f",
            "json",
            "--budget",
            "12MiB",
            "--fail-if-peak-grows",
            "5",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("{\n  \"schema_version\": 1,\n  \"kind\": \"diff\","));
    let r: DiffReport =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("off the contract: {e}"));
    assert_eq!(r.tool.name, "memcut");
    assert_eq!(r.check.as_ref().unwrap().failed.len(), 1);
    for d in &r.devices {
        assert!(d.before_plan.is_some() && d.after_plan.is_some());
        let sum = |f: fn(&CategoryChange) -> u64| -> u64 {
            d.by_category
                .iter()
                .filter(|c| c.category != Category::AllocatorCache)
                .map(f)
                .sum()
        };
        assert_eq!(sum(|c| c.before), d.peak.before);
        assert_eq!(sum(|c| c.after), d.peak.after);
        assert_eq!(
            d.peak.change_bytes,
            d.peak.after as i64 - d.peak.before as i64
        );
        for s in &d.sites {
            assert_eq!(s.change_bytes, s.after_bytes as i64 - s.before_bytes as i64);
        }
        for (t, p) in [
            (&d.timeline.before, &d.before_peak),
            (&d.timeline.after, &d.after_peak),
        ] {
            assert_eq!(t.x.len(), t.allocated.len());
            assert!(t.x.iter().all(|x| (0.0..=1.0).contains(x)));
            assert!((0.0..=1.0).contains(&p.fraction) && p.event_index < p.events);
        }
    }
}
