//! The pipeline, assembled (DESIGN.md §1): bytes → [`crate::input`] →
//! [`crate::analysis`] (replay, classify, report) and, beside the report,
//! the planner's demand → one plan per device, which this module puts into
//! the report. Each stage takes only the previous one's value.

use std::path::Path;

use crate::error::{Error, Result};
use crate::model::Trace;
use crate::schema::{Report, SourceInfo};
use crate::{analysis, input, plan};

/// Everything `memcut analyze` can be told (`AnalyzeOptions::default()`,
/// then set what differs).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AnalyzeOptions {
    /// Device filter, top sites, user rules, plot points.
    pub analysis: analysis::Options,
    /// Bounds on what an input may make memcut do (gzip, pickle).
    pub limits: input::Limits,
    /// Budget, headroom and levers for the cut plan.
    pub plan: plan::PlanOptions,
}

impl AnalyzeOptions {
    pub fn new() -> AnalyzeOptions {
        AnalyzeOptions::default()
    }
}

/// Runs the whole pipeline on a trace already parsed.
pub fn analyze_trace(trace: &Trace, source: SourceInfo, options: &AnalyzeOptions) -> Report {
    let devices = analysis::classify_devices(trace, &options.analysis);
    // The planner's demand needs only the timelines: made meanwhile.
    let (mut report, demands) = rayon::join(
        || analysis::report(trace, source, &devices, &options.analysis),
        || {
            devices
                .iter()
                .map(|d| plan::demand::Demand::from_timeline(&d.timeline))
                .collect::<Vec<_>>()
        },
    );
    let selected = analysis::selected(trace, &options.analysis);
    for ((d, demand), device) in report.devices.iter_mut().zip(&demands).zip(selected) {
        let describe = |p: usize| analysis::describe_position(trace, device, p);
        d.plan = plan::plan_for(d, demand, &options.plan, &describe);
    }
    report
}

/// Reads, parses and analyses one input. `display_path` is what the report
/// names as its source (as given, never made absolute).
pub fn analyze_reader<R: std::io::Read>(
    reader: R,
    display_path: &str,
    size_bytes: u64,
    options: &AnalyzeOptions,
) -> Result<Report> {
    let trace = input::read_trace(reader, &options.limits)?;
    analyze_parsed(&trace, display_path, size_bytes, options)
}

/// Analyses a trace held in memory (e.g. bytes handed over from Python);
/// `display_path` is what the report names as its source.
pub fn analyze_bytes(bytes: &[u8], display_path: &str, options: &AnalyzeOptions) -> Result<Report> {
    let trace = input::parse_bytes(bytes, &options.limits)?;
    analyze_parsed(&trace, display_path, bytes.len() as u64, options)
}

/// Reads, parses and analyses one file.
pub fn analyze_path(path: &Path, options: &AnalyzeOptions) -> Result<Report> {
    if path.is_dir() {
        return Err(Error::IsDirectory);
    }
    let file = std::fs::File::open(path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let trace = input::read_trace_ahead(file, &options.limits)?;
    analyze_parsed(&trace, &path.display().to_string(), size, options)
}

/// Analyses a parsed trace; a `device` option that names no device of the
/// trace is an error listing the ones it has.
fn analyze_parsed(
    trace: &Trace,
    display_path: &str,
    size_bytes: u64,
    options: &AnalyzeOptions,
) -> Result<Report> {
    if let Some(wanted) = &options.analysis.device {
        if !trace.devices.iter().any(|d| &d.device == wanted) {
            let have: Vec<&str> = trace.devices.iter().map(|d| d.device.as_str()).collect();
            return Err(Error::NoSuchDevice {
                device: wanted.clone(),
                available: if have.is_empty() {
                    "none".into()
                } else {
                    have.join(", ")
                },
            });
        }
    }
    let source = SourceInfo::new(display_path, trace.format.as_str(), size_bytes);
    Ok(analyze_trace(trace, source, options))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Action, DeviceTrace, Event, Format};
    use crate::report::{render, OutputFormat};
    use crate::schema::Verdict;

    /// Four 1 GiB allocations, then a failed 3 GiB request with 1 GiB free
    /// (no segments: reserved memory unknown).
    fn synthetic_oom_trace() -> Trace {
        let mut trace = Trace::new(Format::TorchSnapshot);
        let mut events = Vec::new();
        for k in 0..4u64 {
            events.push(Event::new(Action::Alloc, 0x1000 * (k + 1), 1 << 30));
        }
        events.push(Event::oom(3 << 30, 1 << 30));
        trace.devices.push(DeviceTrace {
            device: "cuda:0".into(),
            events,
            ..DeviceTrace::default()
        });
        trace
    }

    #[test]
    fn oom_budget_and_oom_plan() {
        let trace = synthetic_oom_trace();
        let source = SourceInfo::new("synthetic", "torch_snapshot", 0);
        let report = analyze_trace(&trace, source, &AnalyzeOptions::new());
        let d = &report.devices[0];
        let plan = d.plan.as_ref().expect("an OOM gives a budget");
        // Budget = free (1 GiB) + held (4 GiB allocated, no reserved curve).
        assert_eq!(plan.budget_bytes, 5 << 30);
        assert!(
            plan.budget_source.starts_with("OOM at event 4"),
            "{}",
            plan.budget_source
        );
        let oom = plan.oom_plan.as_ref().expect("oom plan");
        assert_eq!(oom.event_index, 4);
        assert_eq!(oom.requested_bytes, 3 << 30);
        assert_eq!(oom.demand_bytes, 7 << 30);
        // Nothing in the catalogue shrinks `unknown`: 7 GiB cannot fit 4.5 GiB.
        assert_eq!(oom.verdict, Verdict::DoesNotFit);
        assert_eq!(oom.gap_bytes, oom.estimated_peak_bytes - plan.target_bytes);
        // It renders.
        let md = render(&report, OutputFormat::Md);
        assert!(md.contains("At the OOM (event 4)"), "{md}");
        let text = render(&report, OutputFormat::Text);
        assert!(
            text.contains("at the OOM (event 4): does_not_fit"),
            "{text}"
        );
    }
}
