//! memcut: the post-mortem on GPU memory.
//!
//! Give it a PyTorch memory snapshot or a profiler trace; it rebuilds the
//! memory timeline per device, sorts every allocation into a [`Category`],
//! finds the peak and what was live there, and plans what to cut, in what
//! order, to fit a budget. Nothing in the file is ever executed.
//!
//! ```no_run
//! let mut options = memcut::AnalyzeOptions::default();
//! options.plan.budget = Some(memcut::parse_size("80GiB")?);
//! let report = memcut::analyze_path("snapshot.pickle".as_ref(), &options)?;
//! for device in &report.devices {
//!     println!("{}: peak {} bytes", device.device, device.peak.allocated_bytes);
//! }
//! print!("{}", memcut::render(&report, memcut::OutputFormat::Md));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The API
//!
//! At the root, the entry points:
//!
//! - Analyse: [`analyze_path`] (a file, read on a second thread),
//!   [`analyze_bytes`] (a buffer, e.g. handed over from Python),
//!   [`analyze_reader`] (any reader), all with [`AnalyzeOptions`] (its
//!   parts: [`AnalysisOptions`], [`Limits`], [`plan::PlanOptions`]). The
//!   options files of `--levers` and `--rules` are read by
//!   [`read_levers_file`] and [`read_rules_file`] (the CLI's messages);
//!   [`plan::parse_levers`] and [`parse_rules`] take their JSON text.
//! - Write: [`render`] a [`Report`] as text, Markdown, JSON or HTML
//!   ([`OutputFormat`]); [`Report::from_json`] reads a saved one back (the
//!   JSON contract, `schema_version` [`SCHEMA_VERSION`]), and renders the same
//!   pages as the analysis did.
//! - Compare two reports: [`diff`], [`render_diff`].
//! - Many files: the [`batch`] driver (progress through a callback).
//! - Errors are one line each and typed: [`Error`], [`SizeError`],
//!   [`OptionsFileError`], [`RulesError`].
//!
//! Under three modules, the rest:
//!
//! - [`report`]: every type of the report (the JSON contract: [`Report`]
//!   down to [`report::Peak`], [`report::Finding`], [`report::Plan`]; the
//!   diff's types) and the renderers.
//! - [`plan`]: the plan's options (budget, headroom, device memory, data
//!   parallel ranks), the levers, the search order, [`plan::check_what_if`].
//! - [`components`]: the seed's component-list mode ([`plan_components`]
//!   and its three functions, with the seed's names).
//!
//! # Inside: the pipeline (DESIGN.md §1)
//!
//! Each stage is a private module that takes only the previous stage's
//! value: `input` (sniff, gunzip) → `formats` (parse into a `model::Trace`)
//! → `timeline` (replay; bytes by category per position) → `classify`
//! (category and rule per allocation) → `analysis` (peak, live set, OOMs,
//! plotted series: the [`Report`]); beside the report, `plan` (demand,
//! levers, search) makes each device's [`report::Plan`], which `pipeline` puts into
//! the report. `report` renders a [`Report`] (and the batch summary's
//! rows) and reads nothing else.
//! `schema` (the report's types) and `units` are leaves. Data flows one
//! way; `tests/suite/module_graph.rs` fails on an import cycle. The graph (`+`:
//! test code only):
//!
//! ```text
//! batch    -> error, model, pipeline, report, schema, units
//! pipeline -> analysis, aside, classify, error, input, model, plan, schema, +report
//! analysis -> classify, model, schema, timeline, units
//! plan     -> model, schema, timeline, units
//! report   -> model, schema, units
//! input    -> error, formats, model
//! classify -> model, timeline, +input
//! formats  -> aside, error, model
//! timeline -> model
//! schema   -> model, units
//! model, units, error, aside -> (nothing)
//! ```
//!
//! Only `main.rs` and [`batch`] touch files, threads and exit codes (the
//! read-ahead thread of [`analyze_path`] only reads bytes, and `aside`'s
//! threads only free what a big input's analysis no longer needs).

mod analysis;
mod aside;
pub mod batch;
mod classify;
mod diff;
mod error;
mod findings;
mod formats;
#[cfg(any(test, feature = "fuzzing"))]
mod generated_checks;
mod input;
mod instant;
mod model;
mod pipeline;
pub mod plan;
pub mod report;
mod schema;
mod segments;
#[cfg(test)]
mod test_support;
mod timeline;
mod units;
mod vocabulary;

pub use analysis::Options as AnalysisOptions;
pub use classify::{parse_rules, RulesError, UserRule};
pub use diff::{diff, DiffOptions};
pub use error::{Error, Result};
pub use formats::pickle::Limits as PickleLimits;
pub use input::Limits;
pub use instant::At;
pub use model::Category;
pub use pipeline::{
    analyze_bytes, analyze_path, analyze_reader, parse_top, read_levers_file, read_rules_file,
    report_or_analysis, AnalyzeOptions, OptionsFileError,
};
pub use plan::components::{self as components, plan_components};
pub use report::{render, render_diff, write_json, OutputFormat, Report, SCHEMA_VERSION};
pub use units::{human_bytes, parse_positive_size, parse_size, SizeError};

/// Single stages, for the benches, examples and fuzz targets that time or
/// fuzz one stage alone. Not a stable API.
#[doc(hidden)]
pub mod internals {
    pub use crate::classify::{classify, Builtin};
    pub use crate::formats::{chrome, pickle};
    #[cfg(feature = "fuzzing")]
    pub use crate::generated_checks::check_generated;
    pub use crate::input::{parse_bytes, read_file, read_trace, read_trace_ahead};
    pub use crate::model::Trace;
    pub use crate::pipeline::analyze_trace;
    pub use crate::timeline::replay;
}
