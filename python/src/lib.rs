//! `memcut._native`: the Python binding of the memcut library.
//!
//! Deliberately thin. Every answer comes from the Rust library's public API,
//! the one implementation; this file only converts arguments, releases the
//! GIL while the library works, and turns the library's one-line errors into
//! `memcut.MemcutError`. Values cross the boundary as JSON text made by the
//! library's own serialisation, so Python sees exactly the bytes the CLI
//! prints (`memcut analyze -f json`, `memcut plan -f json`, `memcut batch
//! --summary x.jsonl`). The Python package (`python/memcut/`) shapes the API.
//!
//! Library calls made here: `analyze_path`, `analyze_bytes`, `render` and
//! `Report::from_json`; the options' parsers (`parse_budget`, `parse_headroom`,
//! `parse_levers`, `parse_rules`, `read_levers_file`, `read_rules_file`, the
//! same the CLI uses); the seed's `components` module; and the batch
//! summary's `batch::{rows_of_bytes, sort_rows, SummaryFormat, COLUMNS, Row}`
//! and `batch::merge::merge_rows`.

use std::path::PathBuf;

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use memcut::batch::{self, Row};
use memcut::{components, plan::Order, AnalyzeOptions, OutputFormat, Report};

create_exception!(
    _native,
    MemcutError,
    PyValueError,
    "memcut could not do what was asked: the message is the CLI's one-line error."
);

fn error(message: impl ToString) -> PyErr {
    MemcutError::new_err(message.to_string())
}

/// Everything `memcut analyze`/`batch` can be told, checked once and kept in
/// the library's form. Picklable (Ray ships it to its workers): files named
/// by `levers_file`/`rules_file` are read here, on the caller's machine, and
/// travel as the lists they hold.
#[pyclass(module = "memcut._native", frozen)]
struct Options {
    inner: AnalyzeOptions,
    /// The arguments that are not lists, as given: for `__reduce__`.
    args: OptionArgs,
}

#[derive(Clone)]
struct OptionArgs {
    budget: Option<String>,
    headroom: String,
    order: String,
    device_memory: Option<String>,
}

/// A levers or rules list given as a file (read and parsed by the library,
/// whose message names the file as the CLI's does) or as JSON text (errors
/// start with `what`).
fn json_list<T>(
    text: Option<String>,
    file: Option<PathBuf>,
    what: &str,
    read: impl Fn(&std::path::Path) -> Result<T, memcut::OptionsFileError>,
    parse: impl Fn(&str) -> Result<T, String>,
) -> PyResult<Option<T>> {
    match (file, text) {
        (Some(path), _) => read(&path).map(Some).map_err(error),
        (None, Some(t)) => parse(&t)
            .map(Some)
            .map_err(|e| error(format!("{what}: {e}"))),
        (None, None) => Ok(None),
    }
}

#[pymethods]
impl Options {
    #[new]
    #[pyo3(signature = (
        budget=None, headroom="10%".to_owned(), levers=None, levers_file=None,
        rules=None, rules_file=None, device=None, top=10, dp_ranks=1, order="cheapest".to_owned(),
        what_if=Vec::new(), at=None, device_memory=None
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
        top: i64,
        dp_ranks: i64,
        order: String,
        what_if: Vec<String>,
        at: Option<String>,
        device_memory: Option<String>,
    ) -> PyResult<Options> {
        let mut inner = AnalyzeOptions::new();
        // The same parsers and check as the CLI's --budget and --headroom,
        // and the same messages with the options spelled as here.
        let spelled = |e: String| {
            error(
                e.replace("--budget", "budget")
                    .replace("--headroom", "headroom"),
            )
        };
        let budget_spec = budget
            .as_deref()
            .map(memcut::plan::parse_budget)
            .transpose()
            .map_err(|e| error(format!("budget: {e}")))?;
        let room =
            memcut::plan::parse_headroom(&headroom).map_err(|e| error(format!("headroom: {e}")))?;
        inner
            .plan
            .set_budget_and_headroom(budget_spec, room)
            .map_err(spelled)?;
        // The CLI's parsers, so that a bad value is refused with its words.
        inner.plan.dp_ranks = memcut::plan::parse_dp_ranks(&dp_ranks.to_string())
            .map_err(|e| error(format!("dp_ranks: {e}")))?;
        // The CLI's --device-memory parser and message.
        inner.plan.device_memory = device_memory
            .as_deref()
            .map(memcut::plan::parse_device_memory)
            .transpose()
            .map_err(|e| error(format!("device_memory: {e}")))?;
        inner.plan.order = Order::parse(&order).map_err(|e| error(format!("order: {e}")))?;
        inner.plan.levers = json_list(
            levers,
            levers_file,
            "levers",
            memcut::read_levers_file,
            |t| memcut::plan::parse_levers(t).map_err(|e| e.to_string()),
        )?;
        inner.analysis.user_rules =
            json_list(rules, rules_file, "rules", memcut::read_rules_file, |t| {
                memcut::parse_rules(t).map_err(|e| e.to_string())
            })?
            .unwrap_or_default();
        // The same check as the CLI's --what-if.
        memcut::plan::check_what_if(&what_if, inner.plan.levers.as_deref())
            .map_err(|e| error(e.replace("--what-if", "what_if")))?;
        inner.plan.what_if = what_if;
        inner.analysis.device = device;
        inner.analysis.top =
            memcut::parse_top(&top.to_string()).map_err(|e| error(format!("top: {e}")))?;
        // `--at`'s instant: resolved against the trace when it is read (an
        // instant the trace does not have is an error then, as in the CLI).
        inner.analysis.at = at
            .as_deref()
            .map(memcut::At::parse)
            .transpose()
            .map_err(|e| error(format!("at: {e}")))?;
        let args = OptionArgs {
            budget,
            headroom,
            order,
            device_memory,
        };
        Ok(Options { inner, args })
    }

    /// Pickles as the constructor call, the levers and rules as the JSON of
    /// the lists already read (no file is read again on the worker).
    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, pyo3::types::PyType>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let o = slf.get();
        let a = o.args.clone();
        let i = &o.inner;
        let rules = (!i.analysis.user_rules.is_empty()).then(|| to_json(&i.analysis.user_rules));
        let none = || None::<String>.into_pyobject(py);
        // `Options(...)`'s positional arguments, in order.
        let args = [
            a.budget.into_pyobject(py)?,
            a.headroom.into_pyobject(py)?.into_any(),
            i.plan.levers.as_ref().map(to_json).into_pyobject(py)?,
            none()?,
            rules.into_pyobject(py)?,
            none()?,
            i.analysis.device.clone().into_pyobject(py)?,
            i.analysis.top.into_pyobject(py)?.into_any(),
            i.plan.dp_ranks.into_pyobject(py)?.into_any(),
            a.order.into_pyobject(py)?.into_any(),
            i.plan.what_if.clone().into_pyobject(py)?,
            i.analysis
                .at
                .as_ref()
                .map(|a| a.to_string())
                .into_pyobject(py)?,
            a.device_memory.into_pyobject(py)?,
        ];
        Ok((slf.get_type(), PyTuple::new(py, args)?))
    }
}

/// Analyses a file and returns its JSON report (with the plotted series, as
/// `memcut analyze -f json` prints it); errors read `PATH: message`, as after
/// `memcut: error: `.
#[pyfunction]
fn analyze_file(py: Python<'_>, path: PathBuf, options: &Options) -> PyResult<String> {
    let report = py
        .detach(|| memcut::analyze_path(&path, &options.inner))
        .map_err(|e| error(format!("{}: {e}", path.display())))?;
    Ok(memcut::render(&report, OutputFormat::Json))
}

/// Analyses bytes in memory; `name` is the report's `source.path` (`-` as
/// for stdin in the CLI) and starts error messages.
#[pyfunction]
fn analyze_bytes(py: Python<'_>, data: &[u8], name: &str, options: &Options) -> PyResult<String> {
    let report = py
        .detach(|| memcut::analyze_bytes(data, name, &options.inner))
        .map_err(|e| error(format!("{name}: {e}")))?;
    Ok(memcut::render(&report, OutputFormat::Json))
}

fn output_format(format: &str) -> PyResult<OutputFormat> {
    Ok(match format {
        "text" => OutputFormat::Text,
        "md" => OutputFormat::Md,
        "json" => OutputFormat::Json,
        "html" => OutputFormat::Html,
        other => {
            return Err(error(format!(
                "format must be one of text, md, json, html; got `{other}`"
            )))
        }
    })
}

/// Renders a JSON report (as `memcut analyze -f json` prints it, or a saved
/// one) in a format of the CLI's `--format`. The JSON carries the plotted
/// series, so HTML draws the same chart as the analysis did.
#[pyfunction]
fn render(py: Python<'_>, report_json: &str, format: &str) -> PyResult<String> {
    let format = output_format(format)?;
    let report =
        Report::from_json(report_json).map_err(|e| error(format!("not a memcut report: {e}")))?;
    Ok(py.detach(|| memcut::render(&report, format)))
}

/// One side of a diff: a file (`"path"`, the bytes are the path), a trace
/// in memory (`"bytes"`) or a saved JSON report (`"json"`).
fn diff_side(
    py: Python<'_>,
    which: &str,
    kind: &str,
    data: &[u8],
    options: &AnalyzeOptions,
) -> PyResult<Report> {
    match kind {
        // A saved JSON report is read back, as the CLI's `diff` does.
        "path" => {
            let path = PathBuf::from(String::from_utf8_lossy(data).into_owned());
            py.detach(|| memcut::report_or_analysis(&path, options))
                .map_err(|e| error(format!("{}: {e}", path.display())))
        }
        "bytes" => py
            .detach(|| memcut::analyze_bytes(data, "-", options))
            .map_err(|e| error(format!("{which}: {e}"))),
        _ => Report::from_json(&String::from_utf8_lossy(data))
            .map_err(|e| error(format!("{which}: not a memcut report: {e}"))),
    }
}

/// Compares two inputs as `memcut diff` does (each analysed with the CLI's
/// diff settings, or a saved report) and returns the diff's JSON
/// (`"kind": "diff"`, as `memcut diff -f json` prints it).
#[pyfunction]
#[pyo3(signature = (before_kind, before, after_kind, after, options, device=None, top=20, fail_if_peak_grows=None))]
#[allow(clippy::too_many_arguments)]
fn diff(
    py: Python<'_>,
    before_kind: &str,
    before: &[u8],
    after_kind: &str,
    after: &[u8],
    options: &Options,
    device: Option<String>,
    top: usize,
    fail_if_peak_grows: Option<f64>,
) -> PyResult<String> {
    let mut analyze = options.inner.clone();
    analyze.analysis.device = device.clone();
    // As `memcut diff`: both peaks on one normalised time axis.
    analyze.analysis.plot_points = 500;
    let before = diff_side(py, "before", before_kind, before, &analyze)?;
    let after = diff_side(py, "after", after_kind, after, &analyze)?;
    let mut diff_options = memcut::DiffOptions::default();
    diff_options.device = device;
    diff_options.top = top;
    diff_options.max_growth_percent = fail_if_peak_grows;
    let report = py.detach(|| memcut::diff(&before, &after, &diff_options));
    Ok(memcut::render_diff(&report, OutputFormat::Json))
}

/// Renders a diff's JSON (as [`diff`] returns it) in a format of the CLI's
/// `--format`.
#[pyfunction]
fn render_diff(py: Python<'_>, diff_json: &str, format: &str) -> PyResult<String> {
    let format = output_format(format)?;
    let report: memcut::report::DiffReport =
        serde_json::from_str(diff_json).map_err(|e| error(format!("not a memcut diff: {e}")))?;
    Ok(py.detach(|| memcut::render_diff(&report, format)))
}

// ---------------------------------------------------------------------------
// The seed's component planner (`memcut plan COMPONENTS.json --target-gb N`)
// ---------------------------------------------------------------------------

fn parse_components(json: &str) -> PyResult<Vec<components::Component>> {
    components::parse_components(json).map_err(|e| error(format!("components: {e}")))
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("plain data always serialises")
}

/// `summarize_peak_sources`: the library's `PeakSummary` as JSON.
#[pyfunction]
fn summarize_peak_sources(components_json: &str) -> PyResult<String> {
    let list = parse_components(components_json)?;
    Ok(to_json(&components::summarize_peak_sources(&list)))
}

/// `plan_memory_cuts`: the library's `CutPlan` as JSON.
#[pyfunction]
fn plan_memory_cuts(components_json: &str, target_gb: f64) -> PyResult<String> {
    let list = parse_components(components_json)?;
    Ok(to_json(&components::plan_memory_cuts(&list, target_gb)))
}

/// `recommend_memory_followup`: the library's `Recommendation` as JSON, from
/// a `PeakSummary` and a `CutPlan` given as JSON.
#[pyfunction]
fn recommend(summary_json: &str, plan_json: &str) -> PyResult<String> {
    let summary: components::PeakSummary =
        serde_json::from_str(summary_json).map_err(|e| error(format!("summary: {e}")))?;
    let cuts: components::CutPlan =
        serde_json::from_str(plan_json).map_err(|e| error(format!("plan: {e}")))?;
    Ok(to_json(&components::recommend(&summary, &cuts)))
}

// ---------------------------------------------------------------------------
// `memcut batch` summary rows, for batches run by other engines (Ray, …)
// ---------------------------------------------------------------------------

/// The summary rows `memcut batch` writes for one input, as a JSON list:
/// one row per device, or one `skipped`/`failed` row with the reason.
/// `name` is the rows' `file`.
#[pyfunction]
fn summary_rows(py: Python<'_>, data: &[u8], name: &str, options: &Options) -> String {
    let mut analyze = options.inner.clone();
    // The summary has no chart: skip the walk that makes the series.
    analyze.analysis.plot_points = 0;
    to_json(&py.detach(|| batch::rows_of_bytes(name, data, &analyze)))
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
    m.add("__version__", memcut::report::Tool::default().version)?;
    m.add("MemcutError", m.py().get_type::<MemcutError>())?;
    m.add("SUMMARY_COLUMNS", batch::COLUMNS.to_vec())?;
    m.add_class::<Options>()?;
    m.add_function(wrap_pyfunction!(analyze_file, m)?)?;
    m.add_function(wrap_pyfunction!(analyze_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(render, m)?)?;
    m.add_function(wrap_pyfunction!(diff, m)?)?;
    m.add_function(wrap_pyfunction!(render_diff, m)?)?;
    m.add_function(wrap_pyfunction!(summarize_peak_sources, m)?)?;
    m.add_function(wrap_pyfunction!(plan_memory_cuts, m)?)?;
    m.add_function(wrap_pyfunction!(recommend, m)?)?;
    m.add_function(wrap_pyfunction!(summary_rows, m)?)?;
    m.add_function(wrap_pyfunction!(sort_rows, m)?)?;
    m.add_function(wrap_pyfunction!(render_summary, m)?)?;
    Ok(())
}
