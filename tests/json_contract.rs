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
    plan: Option<Plan>,
    timeline: Timeline,
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Allocation {
    addr: u64,
    size: u64,
    category: Category,
    site: String,
    rule: String,
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
        text.starts_with("{\n  \"schema_version\": 2,"),
        "{what}: schema_version is not first"
    );
    let report: Report =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: off the contract: {e}"));
    assert_eq!(report.schema_version, 2);
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
        let t = &d.timeline;
        assert!(t.series.values().all(|s| s.len() == t.x.len()), "{what}");
        assert!(t.reserved.as_ref().is_none_or(|r| r.len() == t.x.len()));
        assert_eq!(t.oom_x.len(), d.ooms.len(), "{what}");
        assert!(!d.device.is_empty() && d.events >= d.peak.event_index);
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
    let many = run("tests/data/broken/snapshot_ten_devices.pkl", &[]);
    assert_eq!(many.devices.len(), 10);
    let cut = run("tests/data/broken/chrome_cut_mid_event.json", &[]);
    assert_eq!(cut.source.format, InputFormat::ChromeTrace);
    assert!(cut.diagnostics.iter().any(|d| d.partial_read));
    let timeline = run("sample_traces/train_adamw.timeline.json.gz", &[]);
    assert_eq!(timeline.source.format, InputFormat::MemoryTimeline);
    let trace = run("sample_traces/train_adamw.trace.json.gz", &[]);
    assert_eq!(trace.devices[0].timeline.x_unit, XUnit::TimeUs);
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
