//! memcut: the post-mortem on GPU memory.
//!
//! Pipeline (DESIGN.md §1), each stage a pure function of the previous one's
//! value: bytes → [`input`] (sniff, gunzip) → [`formats`] (parse into a
//! [`model::Trace`]) → [`timeline`] (replay) → [`classify`] → [`analysis`]
//! (peak, contributors, OOMs) → [`plan`] → [`report`] (text, md, json, html).
//! Only `main.rs` and [`batch`] touch files, threads and exit codes.

pub mod analysis;
pub mod batch;
pub mod classify;
pub mod error;
pub mod formats;
pub mod input;
pub mod model;
pub mod plan;
pub mod report;
pub mod schema;
#[cfg(test)]
mod test_support;
pub mod timeline;
pub mod units;

use std::path::Path;

pub use error::{Error, Result};

/// Everything `memcut analyze` can be told.
#[derive(Debug, Clone, Default)]
pub struct AnalyzeOptions {
    pub analysis: analysis::Options,
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
pub fn analyze_trace(
    trace: &model::Trace,
    source: report::SourceInfo,
    options: &AnalyzeOptions,
) -> report::Report {
    let timelines = analysis::timelines(trace, &options.analysis);
    // The planner's demand needs only the timelines: made meanwhile.
    let (mut report, demands) = rayon::join(
        || analysis::report(trace, source, &timelines, &options.analysis),
        || {
            timelines
                .iter()
                .map(plan::Demand::from_timeline)
                .collect::<Vec<_>>()
        },
    );
    plan::attach_plans_with(trace, &mut report, &demands, &options.plan);
    report
}

/// Reads, parses and analyses one input. `display_path` is what the report
/// names as its source (as given, never made absolute).
pub fn analyze_reader<R: std::io::Read>(
    reader: R,
    display_path: &str,
    size_bytes: u64,
    options: &AnalyzeOptions,
) -> Result<report::Report> {
    let trace = input::read_trace(reader, &options.limits)?;
    Ok(analyze_parsed(&trace, display_path, size_bytes, options))
}

fn analyze_parsed(
    trace: &model::Trace,
    display_path: &str,
    size_bytes: u64,
    options: &AnalyzeOptions,
) -> report::Report {
    let source = report::SourceInfo {
        path: display_path.to_owned(),
        format: trace.format.as_str().to_owned(),
        size_bytes,
    };
    analyze_trace(trace, source, options)
}

/// Reads, parses and analyses one file.
pub fn analyze_path(path: &Path, options: &AnalyzeOptions) -> Result<report::Report> {
    if path.is_dir() {
        return Err(Error::Usage("is a directory, not a trace file".into()));
    }
    let file = std::fs::File::open(path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let trace = input::read_trace_ahead(file, &options.limits)?;
    Ok(analyze_parsed(
        &trace,
        &path.display().to_string(),
        size,
        options,
    ))
}
