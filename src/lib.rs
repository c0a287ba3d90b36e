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
pub mod pipeline;
pub mod plan;
pub mod report;
pub mod schema;
#[cfg(test)]
mod test_support;
pub mod timeline;
pub mod units;

pub use analysis::Options as AnalysisOptions;
pub use classify::UserRule;
pub use error::{Error, Result};
pub use input::Limits;
pub use model::{Category, Diagnostic, Level};
pub use pipeline::{analyze_bytes, analyze_path, analyze_reader, AnalyzeOptions};
pub use plan::components::{
    self as components, parse_components, plan_components, Component, ComponentReport,
    ComponentsError,
};
pub use plan::levers::{parse_levers, Cost, Lever, LeversError};
pub use plan::search::Order;
pub use plan::{Headroom, PlanOptions};
pub use report::{render, OutputFormat};
pub use schema::{
    Attribution, BeforeRecordingPart, DeviceReport, LiveAllocation, OomFinding, OomPlan, Peak,
    PeakCategories, Plan, PlanStep, Report, SourceInfo, TimelineSeries, Tool, TopSite, Verdict,
    SCHEMA_VERSION,
};
pub use units::{parse_size, SizeError};

/// Stages for benches, examples and the fuzz targets, which time or fuzz
/// one stage alone. Not a stable API.
#[doc(hidden)]
pub mod internals {
    pub use crate::classify::classify;
    pub use crate::formats::{chrome, pickle};
    pub use crate::input::{parse_bytes, read_trace, read_trace_ahead};
    pub use crate::model::Trace;
    pub use crate::pipeline::analyze_trace;
    pub use crate::timeline::replay;
}
