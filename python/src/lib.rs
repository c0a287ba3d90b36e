//! `memcut._native`: the Python binding of the memcut library.
//!
//! Deliberately thin. Every answer comes from the Rust library, the one
//! implementation; this file only converts arguments, releases the GIL while
//! the library works, and turns the library's one-line errors into
//! `memcut.MemcutError`. Values cross the boundary as JSON text produced by
//! the library's own serialisation, so Python sees exactly the bytes the CLI
//! prints (`memcut analyze -f json`, `memcut plan -f json`, `memcut batch
//! --summary x.jsonl`). The Python package (`python/memcut/`) shapes the API.
//!
//! Library calls made here (all of them), and which will move when the core
//! branch restructures the crate:
//! - `memcut::analyze_path`, `memcut::analyze_reader` (MOVES: bytes go
//!   through `memcut::analyze_bytes(bytes, display_name, &options)` once it
//!   exists);
//! - `memcut::report::render`, `memcut::report::json::parse` and the report
//!   types (MOVES: to the `schema` module);
//! - `memcut::plan::{parse_size, Headroom, parse_levers, parse_components,
//!   summarize_peak_sources, plan_memory_cuts, recommend}` (the component
//!   planner of `memcut plan`);
//! - `memcut::batch::{rows_of, Row::for_input, skip_reason, one_line,
//!   sort_rows, SummaryFormat}` (the summary rows of `memcut batch`).

use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use memcut::batch::{self, Row, Status};
use memcut::plan::{self, Headroom, Order};
use memcut::report::{self, OutputFormat, Report};
use memcut::AnalyzeOptions;

create_exception!(
    _native,
    MemcutError,
    PyValueError,
    "memcut could not do what was asked: the message is the CLI's one-line error."
);

fn error(message: impl Into<String>) -> PyErr {
    MemcutError::new_err(message.into())
}

/// Everything `memcut analyze`/`batch` can be told, checked once and kept in
/// the library's form. Picklable (Ray ships it to its workers): files named
/// by `levers_file`/`rules_file` are read here, on the caller's machine, and
/// travel as their text.
#[pyclass(module = "memcut._native", frozen)]
struct Options {
    inner: AnalyzeOptions,
    /// The arguments again, files replaced by their text: what `__reduce__` returns.
    args: OptionArgs,
}

#[derive(Clone)]
struct OptionArgs {
    budget: Option<String>,
    headroom: String,
    levers: Option<String>,
    rules: Option<String>,
    device: Option<String>,
    top: usize,
    dp_ranks: u32,
    order: String,
}

/// A levers or rules option: the JSON text of its file (read now, with the
/// CLI's message when it cannot be) or the text given, and the label its
/// errors start with (the file as the CLI names it, else `what`).
fn json_option(
    text: Option<String>,
    file: Option<PathBuf>,
    what: &str,
) -> PyResult<(Option<String>, String)> {
    match file {
        Some(path) => {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| error(format!("{}: cannot read: {e}", path.display())))?;
            Ok((Some(text), path.display().to_string()))
        }
        None => Ok((text, what.to_owned())),
    }
}

/// `Options(...)`'s positional arguments, as `__reduce__` gives them back.
type NewArgs = (
    Option<String>,
    String,
    Option<String>,
    Option<PathBuf>,
    Option<String>,
    Option<PathBuf>,
    Option<String>,
    usize,
    u32,
    String,
);

#[pymethods]
impl Options {
    #[new]
    #[pyo3(signature = (
        budget=None, headroom="10%".to_owned(), levers=None, levers_file=None,
        rules=None, rules_file=None, device=None, top=10, dp_ranks=1, order="cheapest".to_owned()
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        budget: Option<String>,
        headroom: String,
        levers: Option<String>,
        levers_file: Option<PathBuf>,
        rules: Option<String>,
        rules_file: Option<PathBuf>,
        device: Option<String>,
        top: usize,
        dp_ranks: u32,
        order: String,
    ) -> PyResult<Options> {
        let mut inner = AnalyzeOptions::new();
        // The same parsers as the CLI's --budget and --headroom.
        if let Some(b) = &budget {
            inner.plan.budget =
                Some(plan::parse_size(b).map_err(|e| error(format!("budget: {e}")))?);
        }
        inner.plan.headroom =
            Headroom::parse(&headroom).map_err(|e| error(format!("headroom: {e}")))?;
        if dp_ranks < 1 {
            return Err(error(format!(
                "dp_ranks must be at least 1, got {dp_ranks}"
            )));
        }
        inner.plan.dp_ranks = dp_ranks;
        inner.plan.order = match order.as_str() {
            "cheapest" => Order::Cheapest,
            "largest" => Order::Largest,
            _ => {
                return Err(error(format!(
                    "order must be `cheapest` or `largest`, got `{order}`"
                )))
            }
        };
        // Levers and rules: a file (named in messages as the CLI does) or JSON text.
        let (levers, levers_label) = json_option(levers, levers_file, "levers")?;
        if let Some(text) = &levers {
            let parsed =
                plan::parse_levers(text).map_err(|e| error(format!("{levers_label}: {e}")))?;
            inner.plan.levers = Some(parsed);
        }
        let (rules, rules_label) = json_option(rules, rules_file, "rules")?;
        if let Some(text) = &rules {
            inner.analysis.user_rules = serde_json::from_str(text)
                .map_err(|e| error(format!("{rules_label}: bad rules file: {e}")))?;
        }
        inner.analysis.device = device.clone();
        inner.analysis.top = top;
        let args = OptionArgs {
            budget,
            headroom,
            levers,
            rules,
            device,
            top,
            dp_ranks,
            order,
        };
        Ok(Options { inner, args })
    }

    /// Pickles as the constructor call with every file already read.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, pyo3::types::PyType>, NewArgs) {
        let a = slf.get().args.clone();
        let args = (
            a.budget, a.headroom, a.levers, None, a.rules, None, a.device, a.top, a.dp_ranks,
            a.order,
        );
        (slf.get_type(), args)
    }
}

/// A finished analysis, kept beside the dict `memcut.analyze` returns: the
/// dict is the JSON report, and the JSON does not carry the plotted timeline
/// the HTML chart is drawn from.
#[pyclass(module = "memcut._native", frozen)]
struct Analysis {
    report: Report,
}

/// The options of an analysis whose report may be rendered as HTML: only
/// then is the downsampled timeline worth computing (as the CLI does).
fn with_plot(options: &Options, plot: bool) -> AnalyzeOptions {
    let mut o = options.inner.clone();
    if !plot {
        o.analysis.plot_points = 0;
    }
    o
}

/// Analyses a file; errors read `PATH: message`, as after `memcut: error: `.
#[pyfunction]
#[pyo3(signature = (path, options, plot=true))]
fn analyze_file(
    py: Python<'_>,
    path: PathBuf,
    options: &Options,
    plot: bool,
) -> PyResult<(String, Analysis)> {
    let o = with_plot(options, plot);
    let report = py
        .detach(|| memcut::analyze_path(&path, &o))
        .map_err(|e| error(format!("{}: {e}", path.display())))?;
    Ok((report::json::render(&report), Analysis { report }))
}

/// Analyses bytes in memory; `name` is the report's `source.path` (`-` as
/// for stdin in the CLI) and starts error messages.
#[pyfunction]
#[pyo3(signature = (data, name, options, plot=true))]
fn analyze_bytes(
    py: Python<'_>,
    data: &[u8],
    name: &str,
    options: &Options,
    plot: bool,
) -> PyResult<(String, Analysis)> {
    let o = with_plot(options, plot);
    // MOVES: `memcut::analyze_bytes(data, name, &o)` on the core branch.
    let report = py
        .detach(|| memcut::analyze_reader(data, name, data.len() as u64, &o))
        .map_err(|e| error(format!("{name}: {e}")))?;
    Ok((report::json::render(&report), Analysis { report }))
}

/// Renders a JSON report (as `memcut analyze -f json` prints it) in a format
/// of the CLI's `--format`. The JSON does not hold the plotted timeline: with
/// `timeline_from` (the analysis that made the report), HTML charts take
/// each device's series from it; without, HTML says there is nothing to plot.
#[pyfunction]
#[pyo3(signature = (report_json, format, timeline_from=None))]
fn render(
    py: Python<'_>,
    report_json: &str,
    format: &str,
    timeline_from: Option<&Analysis>,
) -> PyResult<String> {
    let format = match format {
        "text" => OutputFormat::Text,
        "md" => OutputFormat::Md,
        "json" => OutputFormat::Json,
        "html" => OutputFormat::Html,
        other => {
            return Err(error(format!(
                "format must be one of text, md, json, html; got `{other}`"
            )))
        }
    };
    // MOVES: the report types and their parser go to the `schema` module.
    let mut parsed =
        report::json::parse(report_json).map_err(|e| error(format!("not a memcut report: {e}")))?;
    if let Some(analysis) = timeline_from {
        for d in &mut parsed.devices {
            if let Some(src) = analysis
                .report
                .devices
                .iter()
                .find(|s| s.device == d.device)
            {
                d.timeline = src.timeline.clone();
            }
        }
    }
    Ok(py.detach(|| report::render(&parsed, format)))
}

// ---------------------------------------------------------------------------
// The seed's component planner (`memcut plan COMPONENTS.json --target-gb N`)
// ---------------------------------------------------------------------------

fn components(json: &str) -> PyResult<Vec<plan::Component>> {
    plan::parse_components(json).map_err(|e| error(format!("components: {e}")))
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain data always serialises")
}

/// `summarize_peak_sources`: the library's `PeakSummary` as JSON.
#[pyfunction]
fn summarize_peak_sources(components_json: &str) -> PyResult<String> {
    Ok(to_json(&plan::summarize_peak_sources(&components(
        components_json,
    )?)))
}

/// `plan_memory_cuts`: the library's `CutPlan` as JSON.
#[pyfunction]
fn plan_memory_cuts(components_json: &str, target_gb: f64) -> PyResult<String> {
    Ok(to_json(&plan::plan_memory_cuts(
        &components(components_json)?,
        target_gb,
    )))
}

/// `recommend_memory_followup`: the library's `Recommendation` as JSON, from
/// a `PeakSummary` and a `CutPlan` given as JSON.
#[pyfunction]
fn recommend(summary_json: &str, plan_json: &str) -> PyResult<String> {
    let summary: plan::PeakSummary =
        serde_json::from_str(summary_json).map_err(|e| error(format!("summary: {e}")))?;
    let cuts: plan::CutPlan =
        serde_json::from_str(plan_json).map_err(|e| error(format!("plan: {e}")))?;
    Ok(to_json(&plan::recommend(&summary, &cuts)))
}

// ---------------------------------------------------------------------------
// `memcut batch` summary rows, for batches run by other engines (Ray, …)
// ---------------------------------------------------------------------------

/// The summary rows `memcut batch` writes for one input, as a JSON list:
/// one row per device, or one `skipped`/`failed` row with the reason.
/// `name` is the row's `file`.
#[pyfunction]
fn summary_rows(py: Python<'_>, data: &[u8], name: &str, options: &Options) -> String {
    let input = batch::Input {
        path: PathBuf::from(name),
        display: name.to_owned(),
        // No per-input report is written, so no output stem.
        name: String::new(),
        size_bytes: data.len() as u64,
    };
    let batch_options = batch::BatchOptions {
        analyze: with_plot(options, false),
        formats: Vec::new(),
        out_dir: None,
        jobs: 1,
    };
    let rows = py.detach(|| {
        // MOVES: `memcut::analyze_bytes` on the core branch.
        match memcut::analyze_reader(data, name, input.size_bytes, &batch_options.analyze) {
            Ok(report) => batch::rows_of(&input, &report, &batch_options),
            Err(e) => {
                let (status, reason) = match batch::skip_reason(&e) {
                    Some(reason) => (Status::Skipped, reason),
                    None => (Status::Failed, batch::one_line(&e.to_string())),
                };
                vec![Row::for_input(&input, status, reason)]
            }
        }
    });
    to_json(&rows)
}

fn rows(rows_json: &str) -> PyResult<Vec<Row>> {
    serde_json::from_str(rows_json).map_err(|e| error(format!("not summary rows: {e}")))
}

/// Rows in the summary's order (by peak, then failed, then skipped).
#[pyfunction]
fn sort_rows(rows_json: &str) -> PyResult<String> {
    let mut r = rows(rows_json)?;
    batch::sort_rows(&mut r);
    Ok(to_json(&r))
}

/// The summary file `memcut batch --summary PATH` would write for these
/// rows (format by PATH's extension: .csv, .jsonl or .md).
#[pyfunction]
fn render_summary(rows_json: &str, path: PathBuf) -> PyResult<String> {
    let format = batch::SummaryFormat::from_path(&path).map_err(error)?;
    Ok(format.render(&rows(rows_json)?))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The library's version: what reports name in `tool.version`.
    m.add("__version__", report::Tool::default().version)?;
    m.add("MemcutError", m.py().get_type::<MemcutError>())?;
    m.add("SUMMARY_COLUMNS", batch::COLUMNS.to_vec())?;
    m.add_class::<Options>()?;
    m.add_class::<Analysis>()?;
    m.add_function(wrap_pyfunction!(analyze_file, m)?)?;
    m.add_function(wrap_pyfunction!(analyze_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(render, m)?)?;
    m.add_function(wrap_pyfunction!(summarize_peak_sources, m)?)?;
    m.add_function(wrap_pyfunction!(plan_memory_cuts, m)?)?;
    m.add_function(wrap_pyfunction!(recommend, m)?)?;
    m.add_function(wrap_pyfunction!(summary_rows, m)?)?;
    m.add_function(wrap_pyfunction!(sort_rows, m)?)?;
    m.add_function(wrap_pyfunction!(render_summary, m)?)?;
    Ok(())
}
