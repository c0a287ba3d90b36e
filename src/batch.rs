//! `memcut batch`: many inputs → one report per input and format, plus a
//! summary table (DESIGN.md §8).
//!
//! Stages, each usable alone: [`discover`] (paths, folders, globs → inputs
//! with collision-free output names) → [`run`] (analyse in parallel, write
//! each report as soon as it is made, keep only [`Row`]s) → [`sort_rows`] →
//! [`render_markdown`] / [`render_csv`] / [`render_jsonl`]. Memory stays
//! bounded by the largest input times the number of jobs: no report outlives
//! its file's task. Progress goes to a callback (the binary draws a bar).
//!
//! A failure stays with its file: an error, and even a panic while a file is
//! analysed, becomes that file's `failed` row; the other files' reports and
//! the summary are still written. A file read only in part (truncated, …)
//! is analysed, and its rows say `partial` with the reason, never `ok`.
//!
//! Files are recognised by content, never by name: a file the readers do not
//! know (or a trace without memory events) is *skipped* with its reason; a
//! file that looks like a trace but cannot be read is *failed*.

pub mod merge;
pub mod ranks;
pub mod shard;

pub use crate::schema::batch::{Row, Status, Tally, COLUMNS};

use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::Error;
use crate::model::Level;
use crate::pipeline::{analyze_bytes, analyze_path, AnalyzeOptions};
use crate::report::{self, OutputFormat};
use crate::schema::{DeviceReport, Report};

/// What `memcut batch` was asked to do.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct BatchOptions {
    pub analyze: AnalyzeOptions,
    /// Report formats written per input (none when `out_dir` is `None`).
    pub formats: Vec<OutputFormat>,
    /// Where reports go; `None` writes no per-input report, only the summary.
    pub out_dir: Option<PathBuf>,
    /// Worker threads; 0 lets rayon choose (one per core).
    pub jobs: usize,
}

/// One input file found by [`discover`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub path: PathBuf,
    /// The path as the reports and the summary name it (as given, joined).
    pub display: String,
    /// Output file stem: the path relative to the inputs' common folder,
    /// `/` replaced by `__`, unique within the batch.
    pub name: String,
    pub size_bytes: u64,
}

impl Row {
    fn for_input(input: &Input, status: Status, error: String) -> Row {
        Row {
            file: input.display.clone(),
            status,
            format: String::new(),
            device: String::new(),
            peak_bytes: None,
            reserved_bytes: None,
            top_category: String::new(),
            verdict: String::new(),
            report: String::new(),
            error,
            findings: String::new(),
            next_step_bytes: None,
            distributed: None,
            warnings: Vec::new(),
        }
    }
}

/// Expands paths, folders (recursed, hidden entries skipped) and globs into
/// inputs, each file once, sorted by path. Paths that name nothing come back
/// as failed rows.
pub fn discover(args: &[PathBuf]) -> (Vec<Input>, Vec<Row>) {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut errors = Vec::new();
    for arg in args {
        let text = arg.to_string_lossy();
        if arg.exists() {
            collect(arg, &mut files);
        } else if text.contains(['*', '?', '[']) {
            let matches: Vec<PathBuf> = match glob::glob(&text) {
                Ok(paths) => paths.filter_map(|p| p.ok()).collect(),
                Err(e) => {
                    errors.push(path_error(&text, format!("bad glob pattern: {e}")));
                    continue;
                }
            };
            if matches.is_empty() {
                errors.push(path_error(&text, "no file matches this pattern".into()));
            }
            for m in matches {
                collect(&m, &mut files);
            }
        } else {
            errors.push(path_error(
                &text,
                "cannot read: no such file or folder".into(),
            ));
        }
    }
    let mut seen = HashSet::new();
    files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    files.sort();
    let names = output_names(&files);
    let inputs = files
        .into_iter()
        .zip(names)
        .map(|(path, name)| Input {
            display: path.display().to_string(),
            size_bytes: std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0),
            path,
            name,
        })
        .collect();
    (inputs, errors)
}

fn path_error(text: &str, reason: String) -> Row {
    let input = Input {
        path: PathBuf::from(text),
        display: text.to_owned(),
        name: String::new(),
        size_bytes: 0,
    };
    Row::for_input(&input, Status::Failed, reason)
}

/// Adds `path` (a file) or the files under it (a folder) to `out`.
fn collect(path: &Path, out: &mut Vec<PathBuf>) {
    if !path.is_dir() {
        out.push(path.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        out.push(path.to_path_buf()); // reported as unreadable by the run
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let p = e.path();
        // Do not follow links to folders (no cycles); links to files are read.
        let is_link = e.file_type().map(|t| t.is_symlink()).unwrap_or(false);
        if p.is_dir() {
            if !is_link {
                collect(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

/// Output stems for `files` (sorted): each path relative to the deepest
/// folder that holds them all, folders joined by `__`, odd characters made
/// `_`; a stem already taken gets `~2`, `~3`, ….
pub fn output_names(files: &[PathBuf]) -> Vec<String> {
    let parts: Vec<Vec<String>> = files
        .iter()
        .map(|f| {
            f.components()
                .filter_map(|c| match c {
                    Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                    Component::ParentDir => Some("..".into()),
                    _ => None,
                })
                .collect()
        })
        .collect();
    // Common folder prefix (never the file name itself).
    let mut common = parts.first().map_or(0, |p| p.len().saturating_sub(1));
    if let Some(first) = parts.first() {
        for p in &parts[1..] {
            common = common.min(p.len().saturating_sub(1));
            common = (0..common).find(|&i| p[i] != first[i]).unwrap_or(common);
        }
    }
    let mut taken: HashSet<String> = HashSet::new();
    parts
        .iter()
        .map(|p| {
            let stem = p[common.min(p.len())..]
                .iter()
                .map(|s| sanitize(s))
                .collect::<Vec<_>>()
                .join("__");
            let stem = if stem.is_empty() {
                "input".into()
            } else {
                stem
            };
            let mut name = stem.clone();
            let mut k = 2;
            while !taken.insert(name.clone()) {
                name = format!("{stem}~{k}");
                k += 1;
            }
            name
        })
        .collect()
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_alphanumeric() || "._-+=,@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Analyses every input on a pool of `options.jobs` threads, writes its
/// reports, and returns the rows (unsorted: see [`sort_rows`]). Never stops
/// on a bad file. `on_done(input, n)` is called as each input is finished,
/// `n` being how many are by then.
///
/// The inputs are taken largest first (`largest_first`): a sweep whose
/// biggest file came last in path order kept one core on it while the
/// others had nothing left to do.
pub fn run(
    inputs: &[Input],
    options: &BatchOptions,
    on_done: &(dyn Fn(&Input, usize) + Sync),
) -> Result<Vec<Row>, Error> {
    run_with(inputs, options, on_done, &|input, options| {
        analyze_path(&input.path, options)
    })
}

/// How [`run`] analyses one input (tests give one that fails on purpose).
type Analyze<'a> = &'a (dyn Fn(&Input, &AnalyzeOptions) -> Result<Report, Error> + Sync);

fn run_with(
    inputs: &[Input],
    options: &BatchOptions,
    on_done: &(dyn Fn(&Input, usize) + Sync),
    analyze: Analyze,
) -> Result<Vec<Row>, Error> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.jobs)
        .build()
        .map_err(|e| Error::Usage(format!("cannot start {} worker threads: {e}", options.jobs)))?;
    let order = largest_first(inputs);
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    // One queue for all workers, in `order`: each takes the next input as
    // it finishes one (rayon's split of an indexed iterator would hand each
    // worker a range of the list, and leave the last big file to one).
    let taken: Vec<Vec<(usize, Vec<Row>)>> = pool.broadcast(|_| {
        let mut mine = Vec::new();
        while let Some(&k) = order.get(next.fetch_add(1, Ordering::Relaxed)) {
            let input = &inputs[k];
            mine.push((k, process_with(input, options, analyze)));
            on_done(input, done.fetch_add(1, Ordering::Relaxed) + 1);
        }
        mine
    });
    let mut taken: Vec<(usize, Vec<Row>)> = taken.into_iter().flatten().collect();
    taken.sort_unstable_by_key(|&(k, _)| k);
    Ok(taken.into_iter().flat_map(|(_, rows)| rows).collect())
}

/// The order in which [`run`] takes `inputs`: their indices by the bytes
/// each has to read ([`bytes_to_read`]), largest first (equal ones in the
/// given order). The wall time of a batch on N workers is at least its
/// largest file's, and at most that much more than its total over N when
/// the large files are started first; in path order a large file met last
/// runs alone at the end.
fn largest_first(inputs: &[Input]) -> Vec<usize> {
    let bytes: Vec<u64> = inputs.iter().map(bytes_to_read).collect();
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(bytes[k]));
    order
}

/// What reading `input` takes, in bytes: a gzip file's inflated size as
/// its trailer gives it ([`crate::input::size_to_read`]: a guess, which
/// only moves the file in the order; a gzipped trace inflates 10–30x),
/// else the file's size.
fn bytes_to_read(input: &Input) -> u64 {
    let inflated = std::fs::File::open(&input.path)
        .ok()
        .and_then(|mut file| crate::input::size_to_read(&mut file, input.size_bytes));
    inflated.map_or(0, |(_, size)| size).max(input.size_bytes)
}

/// One input: analyse, write its reports, return its rows.
pub fn process(input: &Input, options: &BatchOptions) -> Vec<Row> {
    process_with(input, options, &|input, options| {
        analyze_path(&input.path, options)
    })
}

fn process_with(input: &Input, options: &BatchOptions, analyze: Analyze) -> Vec<Row> {
    // A panic is a bug in memcut, but it is this file's: the batch goes on
    // (the analysis holds no state shared with other files).
    let analysed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        analyze(input, &options.analyze)
    }));
    let report = match analysed {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let (status, reason) = match skip_reason(&e) {
                Some(reason) => (Status::Skipped, reason),
                None => (Status::Failed, one_line(&e.to_string())),
            };
            return vec![Row::for_input(input, status, reason)];
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            return vec![Row::for_input(
                input,
                Status::Failed,
                one_line(&format!(
                    "internal error (a bug in memcut; please report it with this file): {what}"
                )),
            )];
        }
    };
    if let Some(dir) = &options.out_dir {
        for format in &options.formats {
            let path = dir.join(format!("{}.{}", input.name, format.extension()));
            if let Err(e) = std::fs::write(&path, report::render(&report, *format)) {
                return vec![Row::for_input(
                    input,
                    Status::Failed,
                    one_line(&format!("cannot write {}: {e}", path.display())),
                )];
            }
        }
    }
    rows_of(input, &report, options)
}

/// The summary rows of one input held in memory, exactly as [`run`] makes
/// them for a file: for engines that hand memcut bytes rather than paths
/// (the Python binding under Ray, …). `name` is the rows' `file`; no report
/// is written. A skip, a failure or a panic is the input's one row.
pub fn rows_of_bytes(name: &str, bytes: &[u8], analyze: &AnalyzeOptions) -> Vec<Row> {
    let input = Input {
        path: PathBuf::from(name),
        display: name.to_owned(),
        name: String::new(),
        size_bytes: bytes.len() as u64,
    };
    let options = BatchOptions {
        analyze: analyze.clone(),
        ..BatchOptions::default()
    };
    process_with(&input, &options, &|input, o| {
        analyze_bytes(bytes, &input.display, o)
    })
}

/// The summary rows of an analysed input: one per device, leaving out
/// devices with a trivial peak beside a real one (see
/// `report::major_devices`; the JSON report keeps them). A file read only
/// in part has `partial` rows with the reason; its first row carries the
/// report's warnings.
pub fn rows_of(input: &Input, report: &Report, options: &BatchOptions) -> Vec<Row> {
    let report_name = if options.out_dir.is_some() && !options.formats.is_empty() {
        input.name.clone()
    } else {
        String::new()
    };
    let partial: Vec<&str> = report
        .diagnostics
        .iter()
        .filter(|d| d.partial_read)
        .map(|d| d.message.as_str())
        .collect();
    let partial = one_line(&partial.join("; "));
    let warnings: Vec<String> = report
        .diagnostics
        .iter()
        .filter(|d| d.level == Level::Warning)
        .map(|d| d.message.clone())
        .collect();
    let mut rows = if report.devices.is_empty() {
        let mut row = Row::for_input(input, Status::Ok, "no device with memory events".into());
        row.format = report.source.format.clone();
        row.report = report_name;
        vec![row]
    } else {
        let (major, _) = report::major_devices(report);
        major
            .into_iter()
            .map(|d| device_row(input, report, d, &report_name))
            .collect()
    };
    if !partial.is_empty() {
        for row in &mut rows {
            row.status = Status::Partial;
            row.error = partial.clone();
        }
    }
    rows[0].warnings = warnings;
    rows
}

fn device_row(input: &Input, report: &Report, d: &DeviceReport, report_name: &str) -> Row {
    let over = over_budget(d);
    Row {
        file: input.display.clone(),
        status: if over == Some(true) {
            Status::OverBudget
        } else {
            Status::Ok
        },
        format: report.source.format.clone(),
        device: d.device.clone(),
        peak_bytes: Some(d.peak.allocated_bytes),
        reserved_bytes: d.reserved_peak_bytes.or(d.peak.reserved_bytes),
        top_category: d
            .top_category()
            .map_or(String::new(), |c| c.as_str().to_owned()),
        verdict: d
            .plan
            .as_ref()
            .map_or(String::new(), |plan| plan.verdict.as_str().to_owned()),
        report: report_name.to_owned(),
        error: String::new(),
        findings: d
            .findings
            .iter()
            .map(|f| format!("{}={}", f.kind.as_str(), f.saving_bytes))
            .collect::<Vec<_>>()
            .join(";"),
        next_step_bytes: d.next_step.as_ref().map(|n| n.peak_allocated_bytes),
        distributed: ranks::rank_of(&input.display, report, d),
        warnings: Vec::new(),
    }
}

/// Whether a device is over budget ([`crate::report::Verdict::over_budget`], the same
/// test a summary row's verdict gets). `None`: no budget known, no plan.
pub fn over_budget(device: &DeviceReport) -> Option<bool> {
    device.plan.as_ref().map(|plan| plan.verdict.over_budget())
}

/// Errors that mean "not a memory trace memcut reads" rather than "a broken
/// trace": other JSON, text files, profiler traces recorded without memory.
/// A gzip stream that is itself damaged is a failure, not a skip.
pub fn skip_reason(e: &Error) -> Option<String> {
    match e {
        Error::NoMemoryEvents | Error::Empty | Error::UnknownFormat(_) => {
            Some(one_line(&e.to_string()))
        }
        _ => None,
    }
}

fn one_line(s: &str) -> String {
    let line = s.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    if line.chars().count() > 300 {
        let mut cut: String = line.chars().take(297).collect();
        cut.push_str("...");
        cut
    } else {
        line
    }
}

/// Summary order: analysed rows by peak (highest first), then failed, then
/// skipped; ties by file and device.
pub fn sort_rows(rows: &mut [Row]) {
    let rank = |s: Status| match s {
        Status::Ok | Status::OverBudget | Status::Partial => 0,
        Status::Failed => 1,
        Status::Skipped => 2,
    };
    rows.sort_by(|a, b| {
        rank(a.status)
            .cmp(&rank(b.status))
            .then(b.peak_bytes.cmp(&a.peak_bytes))
            .then(a.file.cmp(&b.file))
            .then(a.device.cmp(&b.device))
    });
}

/// The summary as a Markdown table (human units), then the tally and the
/// rank tables.
pub fn render_markdown(rows: &[Row]) -> String {
    report::summary::markdown(rows, &tally(rows), &ranks::jobs(rows))
}

/// The summary as CSV (RFC 4180: header first, quoted where needed, bytes as
/// integers; the columns are [`COLUMNS`]).
pub fn render_csv(rows: &[Row]) -> String {
    report::summary::csv(rows)
}

/// The summary as JSON Lines: one [`Row`] object per line.
pub fn render_jsonl(rows: &[Row]) -> String {
    report::summary::jsonl(rows)
}

pub fn tally(rows: &[Row]) -> Tally {
    // A file's outcome is its worst row (failed > skipped > analysed), and
    // whether any of its rows is partial or over budget.
    let mut by_file: BTreeMap<&str, (Status, bool, bool)> = BTreeMap::new();
    let worse = |s: Status| match s {
        Status::Failed => 2,
        Status::Skipped => 1,
        Status::Ok | Status::OverBudget | Status::Partial => 0,
    };
    for r in rows {
        let over = r.status == Status::OverBudget || r.is_over_budget();
        let e = by_file.entry(&r.file).or_insert((r.status, false, false));
        if worse(r.status) > worse(e.0) {
            e.0 = r.status;
        }
        e.1 |= r.status == Status::Partial;
        e.2 |= over;
    }
    let mut t = Tally {
        files: by_file.len(),
        ..Tally::default()
    };
    for (status, partial, over) in by_file.values() {
        match status {
            Status::Failed => t.failed += 1,
            Status::Skipped => t.skipped += 1,
            Status::Ok | Status::OverBudget | Status::Partial => {
                t.analysed += 1;
                t.partial += usize::from(*partial);
                t.over_budget += usize::from(*over);
            }
        }
    }
    t
}

/// Summary file formats, chosen by the file's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SummaryFormat {
    Csv,
    Jsonl,
    Md,
}

/// A summary file whose extension names no summary format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--summary {}: name it .csv, .jsonl or .md to choose its format", .0.display())]
pub struct UnknownSummaryFormat(pub PathBuf);

impl SummaryFormat {
    /// The format a summary file's extension names.
    pub fn from_path(path: &Path) -> Result<SummaryFormat, UnknownSummaryFormat> {
        match path
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .as_deref()
        {
            Some("csv") => Ok(SummaryFormat::Csv),
            Some("jsonl") | Some("ndjson") => Ok(SummaryFormat::Jsonl),
            Some("md") => Ok(SummaryFormat::Md),
            _ => Err(UnknownSummaryFormat(path.to_owned())),
        }
    }

    pub fn render(self, rows: &[Row]) -> String {
        match self {
            SummaryFormat::Csv => render_csv(rows),
            SummaryFormat::Jsonl => render_jsonl(rows),
            SummaryFormat::Md => render_markdown(rows),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(paths: &[&str]) -> Vec<String> {
        output_names(&paths.iter().map(PathBuf::from).collect::<Vec<_>>())
    }

    #[test]
    fn names_are_relative_to_the_common_folder() {
        assert_eq!(
            names(&["/c/a/x.pickle", "/c/b/x.pickle"]),
            ["a__x.pickle", "b__x.pickle"]
        );
        assert_eq!(names(&["/c/a/x.pickle"]), ["x.pickle"]);
        assert_eq!(names(&["c/x.gz", "c/d/e/y.gz"]), ["x.gz", "d__e__y.gz"]);
        assert_eq!(names(&["x.gz", "../y.gz"]), ["x.gz", "..__y.gz"]);
    }

    #[test]
    fn colliding_names_get_a_suffix() {
        assert_eq!(
            names(&["r/a__b/c", "r/a/b__c", "r/a b/c", "r/a_b/c"]),
            ["a__b__c", "a__b__c~2", "a_b__c", "a_b__c~2"]
        );
    }

    #[test]
    fn skips_are_non_traces_and_failures_are_broken_traces() {
        assert!(skip_reason(&Error::NoMemoryEvents).is_some());
        assert!(skip_reason(&Error::UnknownFormat(
            "unrecognised content (first byte 0x23); expected a snapshot pickle, a Chrome trace JSON or gzip".into()
        ))
        .is_some());
        assert!(skip_reason(&Error::CorruptGzip("bad header".into())).is_none());
        assert!(skip_reason(&Error::TruncatedGzip).is_none());
        assert!(skip_reason(&Error::Pickle {
            offset: 3,
            message: "bad opcode".into()
        })
        .is_none());
    }

    fn row(file: &str, status: Status, peak: Option<u64>) -> Row {
        Row {
            file: file.into(),
            status,
            format: "torch_snapshot".into(),
            device: "cuda:0".into(),
            peak_bytes: peak,
            reserved_bytes: None,
            top_category: String::new(),
            verdict: String::new(),
            report: String::new(),
            error: "a, \"quoted\" reason".into(),
            findings: String::new(),
            next_step_bytes: None,
            distributed: None,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn rows_sort_by_peak_then_failed_then_skipped() {
        let mut rows = vec![
            row("s", Status::Skipped, None),
            row("small", Status::Ok, Some(1)),
            row("f", Status::Failed, None),
            row("big", Status::OverBudget, Some(9)),
        ];
        sort_rows(&mut rows);
        let files: Vec<&str> = rows.iter().map(|r| r.file.as_str()).collect();
        assert_eq!(files, ["big", "small", "f", "s"]);
        let t = tally(&rows);
        assert_eq!(
            (t.files, t.analysed, t.over_budget, t.failed, t.skipped),
            (4, 2, 1, 1, 1)
        );
        // A partial file counts as analysed, and as over budget when it is.
        let mut partial = row("p", Status::Partial, Some(3));
        partial.verdict = "fits_after_cuts".into();
        rows.push(partial);
        let t = tally(&rows);
        assert_eq!((t.analysed, t.partial, t.over_budget), (3, 1, 2));
    }

    #[test]
    fn csv_quotes_and_jsonl_round_trips() {
        let rows = vec![row("a,b.pickle", Status::Ok, Some(5))];
        let csv = render_csv(&rows);
        assert_eq!(
            csv.lines().nth(1).unwrap(),
            "\"a,b.pickle\",ok,torch_snapshot,cuda:0,5,,,,,\"a, \"\"quoted\"\" reason\",,"
        );
        let back: Row = serde_json::from_str(render_jsonl(&rows).trim_end()).unwrap();
        assert_eq!(back, rows[0]);
        // Missing strings are `null`, as missing numbers are.
        let line = render_jsonl(&rows);
        assert!(
            line.contains("\"top_category\":null") && line.contains("\"reserved_bytes\":null"),
            "{line}"
        );
    }

    /// Three small sample snapshots (gzip), for the tests of [`run_with`].
    fn three_samples() -> [PathBuf; 3] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("sample_traces");
        [
            root.join("grad_accum.snapshot.pickle.gz"),
            root.join("train_sgd_momentum.snapshot.pickle.gz"),
            root.join("kv_cache_decode.snapshot.pickle.gz"),
        ]
    }

    /// Inputs are taken largest first (equal sizes in path order), each
    /// exactly once, whatever the number of workers; the rows come back in
    /// the inputs' order.
    #[test]
    fn inputs_are_taken_largest_first_and_rows_keep_their_order() {
        let files = three_samples();
        let (mut inputs, errors) = discover(&files);
        assert!(errors.is_empty());
        // Gzip files are taken by their inflated sizes (kv_cache_decode
        // 554,005 bytes, grad_accum 167,363, train_sgd_momentum 59,140;
        // 17,346, 6,472 and 2,947 on disk), a plain file by its size.
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("plain.json");
        std::fs::write(&plain, vec![b' '; 100_000]).unwrap();
        let (mixed, _) = discover(&[files.to_vec(), vec![plain]].concat());
        let names: Vec<&str> = largest_first(&mixed)
            .into_iter()
            .map(|k| mixed[k].path.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "kv_cache_decode.snapshot.pickle.gz",
                "grad_accum.snapshot.pickle.gz",
                "plain.json",
                "train_sgd_momentum.snapshot.pickle.gz"
            ]
        );
        // Sizes as a sweep may meet them: a tie, and the largest last
        // (files that are not there: their sizes as given).
        for (input, size) in inputs.iter_mut().zip([5, 5, 9]) {
            input.path = input.path.with_extension("absent");
            input.size_bytes = size;
        }
        assert_eq!(largest_first(&inputs), [2, 0, 1]);
        let seen = std::sync::Mutex::new(Vec::new());
        let analyze = |input: &Input, _: &AnalyzeOptions| {
            seen.lock().unwrap().push(input.name.clone());
            Err(Error::Empty)
        };
        for jobs in [1, 2, 3] {
            seen.lock().unwrap().clear();
            let options = BatchOptions {
                jobs,
                ..BatchOptions::default()
            };
            let rows = run_with(&inputs, &options, &|_, _| {}, &analyze).unwrap();
            let files: Vec<&str> = rows.iter().map(|r| r.file.as_str()).collect();
            let given: Vec<&str> = inputs.iter().map(|i| i.display.as_str()).collect();
            assert_eq!(files, given, "jobs {jobs}");
            let mut seen = seen.lock().unwrap().clone();
            if jobs == 1 {
                let names: Vec<&str> = [2, 0, 1].iter().map(|&k| inputs[k].name.as_str()).collect();
                assert_eq!(seen, names);
            }
            seen.sort();
            let mut names: Vec<String> = inputs.iter().map(|i| i.name.clone()).collect();
            names.sort();
            assert_eq!(seen, names, "each input once, jobs {jobs}");
        }
    }

    /// A panic while one file is analysed (injected here: the known crash
    /// input is fixed at its root) is that file's failed row; the other
    /// files are analysed and their reports written.
    #[test]
    fn a_panic_is_its_files_failed_row_and_the_others_still_get_reports() {
        let files = three_samples();
        let (inputs, errors) = discover(&files);
        assert!(errors.is_empty());
        let out = tempfile::tempdir().unwrap();
        let options = BatchOptions {
            out_dir: Some(out.path().to_owned()),
            formats: vec![OutputFormat::Json, OutputFormat::Md],
            jobs: 2,
            ..BatchOptions::default()
        };
        let analyze = |input: &Input, o: &AnalyzeOptions| {
            if input.name.starts_with("train_sgd") {
                let frames: Vec<u32> = Vec::new();
                let _ = frames[input.size_bytes as usize]; // index out of bounds
            }
            analyze_path(&input.path, o)
        };
        let calls = AtomicUsize::new(0);
        let mut rows = run_with(
            &inputs,
            &options,
            &|_, _| {
                calls.fetch_add(1, Ordering::Relaxed);
            },
            &analyze,
        )
        .unwrap();
        assert_eq!(calls.into_inner(), 3, "progress reported for every file");
        sort_rows(&mut rows);
        let failed: Vec<&Row> = rows.iter().filter(|r| r.status == Status::Failed).collect();
        assert_eq!(failed.len(), 1, "{rows:?}");
        assert!(failed[0]
            .file
            .ends_with("train_sgd_momentum.snapshot.pickle.gz"));
        assert!(
            failed[0]
                .error
                .starts_with("internal error (a bug in memcut")
                && failed[0].error.contains("index out of bounds"),
            "{}",
            failed[0].error
        );
        let t = tally(&rows);
        assert_eq!((t.analysed, t.failed), (2, 1));
        for name in [
            "grad_accum.snapshot.pickle.gz",
            "kv_cache_decode.snapshot.pickle.gz",
        ] {
            for ext in ["json", "md"] {
                assert!(
                    out.path().join(format!("{name}.{ext}")).is_file(),
                    "{name}.{ext}"
                );
            }
        }
        assert!(!out
            .path()
            .join("train_sgd_momentum.snapshot.pickle.gz.json")
            .exists());
        assert!(render_markdown(&rows).contains("| failed |"));
    }
}
