//! The `memcut` binary: parses arguments, reads files, prints reports, and
//! maps outcomes to exit codes. All analysis lives in the library.

mod cli;
mod output;

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use cli::{
    AnalyzeArgs, BatchArgs, BudgetArgs, Cli, Command, DiffArgs, FormatArg, MergeArgs, PlanArgs,
    PlanFormat, SummaryCommand,
};
use memcut::{AnalyzeOptions, Error, Level, OutputFormat, Report};
use output::{Layout, Sink, WriteError};

/// Exit codes (DESIGN.md §8; the output table in docs/outputs.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Exit {
    Ok = 0,
    InputFailed = 1,
    Usage = 2,
    OverBudget = 3,
    /// `diff --fail-if-peak-grows`: a peak grew more than allowed.
    PeakGrew = 4,
}

impl Exit {
    /// The exit code of several outcomes: a failure (1) beats over budget
    /// (3), which beats success.
    fn and(self, other: Exit) -> Exit {
        let rank = |e: Exit| match e {
            Exit::Ok => 0,
            Exit::OverBudget | Exit::PeakGrew => 1,
            Exit::InputFailed => 2,
            Exit::Usage => 3,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { Exit::Usage as u8 } else { 0 });
        }
    };
    let exit = match cli.command {
        Command::Analyze(args) => {
            malloc_returns_what_a_stage_frees();
            analyze(&args)
        }
        Command::Plan(args) => plan_components(&args),
        Command::Batch(args) => batch(&args),
        Command::Diff(args) => diff(&args),
        Command::Summary(args) => match &args.command {
            SummaryCommand::Merge(args) => merge_summaries(args),
        },
    };
    ExitCode::from(exit as u8)
}

/// Has glibc's malloc give back what one stage of `analyze` frees before
/// the next allocates: one arena for every thread (the parser, the
/// read-ahead thread and the analysis's rayon workers then reuse each
/// other's freed memory instead of each growing its own), and blocks of
/// 1 MiB or more mapped and unmapped on their own (by default the
/// threshold rises to 32 MiB once the parser frees its memo, after which
/// freed memory stays resident). Not for `batch`, whose many workers
/// would contend for the one arena. (No-op off glibc.)
///
/// `/usr/bin/time -f %M memcut analyze FILE -f json -o /dev/null`,
/// medians of 3, on `scripts/bench_inputs.sh`'s inputs: peak RSS
/// snap-unshared 160 → 129 MB, snap-cs336 134 → 121 MB, snap-synthetic
/// 96 → 88 MB, snap-pyframes 97 → 93 MB; snap-profile and the Chrome
/// traces unchanged (±1 MB). CPU time unchanged within noise (whole-process,
/// medians of 7, A B A B: 0.98× and 0.94× on snap-pyframes and
/// snap-synthetic). The threshold was 128 KiB at first: the same peak RSS
/// as 1 MiB (snap-unshared 129.6 vs 129.9 MB, snap-pyframes 92.8 vs
/// 93.5 MB, single runs), but more system time mapping and unmapping
/// (snap-profile 0.29 s vs 0.23 s) and ~1.06x the CPU of no setting on
/// snap-profile (medians of 9, noisy: 0.86-1.22); 1 MiB vs no setting
/// there: 1.03x (0.84-1.25).
fn malloc_returns_what_a_stage_frees() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn mallopt(param: i32, value: i32) -> i32;
        }
        // glibc's malloc.h.
        const M_MMAP_THRESHOLD: i32 = -3;
        const M_ARENA_MAX: i32 = -8;
        // SAFETY: `mallopt` only sets malloc's tunables, and is called
        // before any thread is started; a refused setting changes nothing.
        unsafe {
            mallopt(M_ARENA_MAX, 1);
            mallopt(M_MMAP_THRESHOLD, 1 << 20);
        }
    }
}

fn usage(msg: impl std::fmt::Display) -> Exit {
    eprintln!("memcut: error: {msg}");
    Exit::Usage
}

/// How `analyze` lays its reports out: `--jsonl`, else the format (`-f`,
/// else `-o`'s extension, else text on a terminal and Markdown otherwise).
fn analyze_layout(args: &AnalyzeArgs) -> Result<Layout, String> {
    let jsonl_file = args.output.as_deref().is_some_and(cli::is_jsonl);
    if args.jsonl || (args.format.is_none() && jsonl_file) {
        return Ok(Layout::JsonLines);
    }
    let format = match (args.format, &args.output) {
        (Some(f), _) => OutputFormat::from(f),
        (None, Some(path)) => FormatArg::from_path(path).map(OutputFormat::from).ok_or_else(|| {
            format!(
                "--output {}: the extension names no report format; name it .txt, .md, .json, .jsonl or .html, or pass --format",
                path.display()
            )
        })?,
        (None, None) if std::io::stdout().is_terminal() => OutputFormat::Text,
        (None, None) => OutputFormat::Md,
    };
    Ok(match format {
        OutputFormat::Json if args.files.len() > 1 => Layout::JsonList,
        OutputFormat::Html if args.files.len() > 1 => {
            return Err(format!(
                "--format html writes one page per input and {} were given: run once per file, or `memcut batch FILES --out-dir DIR --format html`",
                args.files.len()
            ))
        }
        f => Layout::Each(f),
    })
}

fn analyze(args: &AnalyzeArgs) -> Exit {
    if let Some(dir) = args.output.as_deref().filter(|p| p.is_dir()) {
        return usage(format!(
            "--output {}: is a folder; give a file name (`memcut batch --out-dir DIR` writes one report per input)",
            dir.display()
        ));
    }
    let layout = match analyze_layout(args) {
        Ok(l) => l,
        Err(msg) => return usage(msg),
    };
    let mut options = AnalyzeOptions::new();
    options.analysis.device = args.device.clone();
    options.analysis.top = args
        .top
        .unwrap_or(if layout == Layout::Each(OutputFormat::Text) {
            3
        } else {
            10
        });
    options.analysis.at = args.at.clone();
    if let Some(path) = &args.rules {
        match memcut::read_rules_file(path) {
            Ok(rules) => options.analysis.user_rules = rules,
            Err(e) => return usage(e),
        }
    }
    match plan_options(&args.budget) {
        Ok(plan) => options.plan = plan,
        Err(msg) => return usage(msg),
    }
    // Only HTML draws the series, and JSON carries them for a later
    // rendering; text and Markdown skip the walk that makes them.
    if matches!(
        layout,
        Layout::Each(OutputFormat::Text) | Layout::Each(OutputFormat::Md)
    ) {
        options.analysis.plot_points = 0;
    }
    let mut sink = Sink::new(args.output.clone(), layout);
    let mut exit = Exit::Ok;
    for path in &args.files {
        let name = path.display().to_string();
        let result = if name == "-" {
            let mut bytes = Vec::new();
            match std::io::stdin().read_to_end(&mut bytes) {
                Ok(_) => memcut::analyze_bytes(&bytes, "-", &options),
                Err(e) => Err(Error::Io(e)),
            }
        } else {
            memcut::analyze_path(path, &options)
        };
        let report = match result {
            Ok(report) => report,
            Err(e) => {
                // A folder: say how to analyse what is in it.
                let hint = match e {
                    Error::IsDirectory => format!(" (for every trace in it: memcut batch {name})"),
                    _ => String::new(),
                };
                eprintln!("memcut: error: {name}: {e}{hint}");
                // `--at` naming no instant of the input is the caller's mistake.
                exit = exit.and(if matches!(e, Error::Usage(_)) {
                    Exit::Usage
                } else {
                    Exit::InputFailed
                });
                continue;
            }
        };
        let damaged = warn(&name, &report);
        if let Err(e) = sink.write(&report) {
            return write_failed(e, exit);
        }
        if damaged && args.strict {
            exit = exit.and(Exit::InputFailed);
        }
        let over = report
            .devices
            .iter()
            .any(|d| memcut::batch::over_budget(d) == Some(true));
        if over && args.fail_over_budget {
            exit = exit.and(Exit::OverBudget);
        }
    }
    match sink.finish() {
        Ok(()) => exit,
        Err(e) => write_failed(e, exit),
    }
}

fn diff(args: &DiffArgs) -> Exit {
    let mut options = AnalyzeOptions::new();
    options.analysis.device = args.device.clone();
    // Every format places each peak on the same normalised time axis.
    options.analysis.plot_points = 500;
    match plan_options(&args.budget) {
        Ok(plan) => options.plan = plan,
        Err(msg) => return usage(msg),
    }
    let format = match (args.format, &args.output) {
        (Some(f), _) => OutputFormat::from(f),
        (None, Some(path)) => match FormatArg::from_path(path) {
            Some(f) => OutputFormat::from(f),
            None => {
                return usage(format!(
                    "--output {}: the extension names no report format; name it .txt, .md, .json or .html, or pass --format",
                    path.display()
                ))
            }
        },
        (None, None) if std::io::stdout().is_terminal() => OutputFormat::Text,
        (None, None) => OutputFormat::Md,
    };
    let read = |path: &Path| -> Option<Report> {
        match memcut::report_or_analysis(path, &options) {
            Ok(report) => Some(report),
            Err(e) => {
                eprintln!("memcut: error: {}: {e}", path.display());
                None
            }
        }
    };
    let (before, after) = (read(&args.before), read(&args.after));
    let (Some(before), Some(after)) = (before, after) else {
        return Exit::InputFailed;
    };
    let mut diff_options = memcut::DiffOptions::default();
    diff_options.device = args.device.clone();
    diff_options.top = args.top;
    diff_options.max_growth_percent = args.fail_if_peak_grows;
    let report = memcut::diff(&before, &after, &diff_options);
    let text = memcut::render_diff(&report, format);
    let written = match &args.output {
        Some(path) => std::fs::write(path, &text).map_err(|e| format!("{}: {e}", path.display())),
        None => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(text.as_bytes())
                .and_then(|()| stdout.flush())
            {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(format!("stdout: {e}")),
                _ => Ok(()),
            }
        }
    };
    if let Err(e) = written {
        eprintln!("memcut: error: cannot write the comparison: {e}");
        return Exit::InputFailed;
    }
    if report.check_failed() {
        Exit::PeakGrew
    } else {
        Exit::Ok
    }
}

/// A report could not be written: a closed pipe ends quietly (`memcut … |
/// head`), anything else is an error naming where.
fn write_failed(e: WriteError, exit: Exit) -> Exit {
    if e.is_broken_pipe() {
        return exit;
    }
    eprintln!("memcut: error: {e}");
    Exit::InputFailed
}

/// Prints the report's warnings on stderr (they are in the report too, but
/// a report written to a file must not hide them); whether the input was
/// read only in part.
fn warn(name: &str, report: &Report) -> bool {
    for d in report
        .diagnostics
        .iter()
        .filter(|d| d.level == Level::Warning)
    {
        eprintln!("memcut: warning: {name}: {}", d.message);
    }
    report.diagnostics.iter().any(|d| d.partial_read)
}

/// The planner's options from the command line (`--levers` is read here).
fn plan_options(args: &BudgetArgs) -> Result<memcut::PlanOptions, String> {
    let mut options = memcut::PlanOptions::default();
    options.set_budget_and_headroom(args.budget, args.headroom)?;
    let levers = match &args.levers {
        Some(path) => Some(memcut::read_levers_file(path).map_err(|e| e.to_string())?),
        None => None,
    };
    options.dp_ranks = args.dp_ranks;
    options.levers = levers;
    options.order = args.order.into();
    memcut::check_what_if(&args.what_if, options.levers.as_deref())?;
    options.what_if = args.what_if.clone();
    Ok(options)
}

/// `memcut plan COMPONENTS.json --target-gb N`: the seed's component mode.
fn plan_components(args: &PlanArgs) -> Exit {
    let name = args.file.display().to_string();
    let mut bytes = Vec::new();
    let read = if name == "-" {
        std::io::stdin().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::File::open(&args.file).and_then(|mut f| f.read_to_end(&mut bytes).map(|_| ()))
    };
    let parsed = read
        .map_err(|e| format!("cannot read: {e}"))
        .and_then(|()| match output::trace_hint(&bytes) {
            Some(what) => Err(format!(
                "{what}, not a component list; for a cut plan of a trace run `memcut analyze {name} --budget SIZE`"
            )),
            None => String::from_utf8(bytes)
                .map_err(|_| "not a component list (not UTF-8 text)".to_owned()),
        })
        .and_then(|text| memcut::parse_components(&text).map_err(|e| e.to_string()));
    let components = match parsed {
        Ok(c) => c,
        Err(msg) => {
            eprintln!("memcut: error: {name}: {msg}");
            return Exit::InputFailed;
        }
    };
    let report = memcut::plan_components(&components, args.target_gb);
    let text = match args.format {
        PlanFormat::Text => report.to_text(),
        PlanFormat::Md => report.to_markdown(),
        PlanFormat::Json => report.to_json(),
    };
    match output::write_stdout(&text) {
        Ok(()) => Exit::Ok,
        Err(e) => write_failed(e, Exit::Ok),
    }
}

fn batch(args: &BatchArgs) -> Exit {
    use memcut::batch::{self, SummaryFormat};
    let summary_format = match args.summary.as_deref().map(SummaryFormat::from_path) {
        Some(Err(msg)) => return usage(msg),
        Some(Ok(f)) => Some(f),
        None => None,
    };
    if let Some(dir) = &args.out_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return usage(format!("--out-dir {}: {e}", dir.display()));
        }
    }
    let mut formats = Vec::new();
    let given = if args.format.is_empty() {
        &[FormatArg::Md][..]
    } else {
        &args.format[..]
    };
    for f in given.iter().map(|f| OutputFormat::from(*f)) {
        if !formats.contains(&f) {
            formats.push(f);
        }
    }
    let mut analyze = AnalyzeOptions::new();
    match plan_options(&args.budget) {
        Ok(plan) => analyze.plan = plan,
        Err(msg) => return usage(msg),
    }
    let mut options = batch::BatchOptions::default();
    options.analyze = analyze;
    options.formats = formats;
    options.out_dir = args.out_dir.clone();
    options.jobs = args.jobs;
    // A panic becomes its file's failed row (the batch goes on); one line
    // here says where, instead of a backtrace per worker.
    std::panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
        eprintln!("memcut: internal error{at}; the summary names the file");
    }));
    let (mut inputs, mut rows) = batch::discover(&args.paths);
    // --shard I/N: this process's part; names come from the whole listing.
    if let Some(shard) = args.shard {
        (inputs, rows) = shard.select(inputs, rows);
    }
    let bar = progress_bar(&inputs, std::io::stderr().is_terminal());
    let ran = batch::run(&inputs, &options, &|input, done| {
        bar.set_message(format!("{done}/{}", inputs.len()));
        bar.inc(input.size_bytes);
    });
    bar.finish_and_clear();
    match ran {
        Ok(more) => rows.extend(more),
        Err(e) => return usage(e),
    }
    batch::sort_rows(&mut rows);
    // Rows are sorted: stderr is the same at any --jobs.
    for r in &rows {
        for w in &r.warnings {
            eprintln!("memcut: warning: {}: {w}", r.file);
        }
        if r.status == batch::Status::Failed {
            eprintln!("memcut: error: {}: {}", r.file, r.error);
        }
    }
    write_summaries(
        &rows,
        args.summary.as_deref().zip(summary_format),
        args.fail_over_budget,
        args.strict,
    )
}

/// `memcut summary merge`: the shards' .jsonl summaries → the summary of
/// one run (stdout and `--summary`), with the batch's exit codes. The
/// shards printed their inputs' warnings and errors; the merge does not
/// repeat them.
fn merge_summaries(args: &MergeArgs) -> Exit {
    use memcut::batch::{self, SummaryFormat};
    let summary_format = match args.summary.as_deref().map(SummaryFormat::from_path) {
        Some(Err(msg)) => return usage(msg),
        Some(Ok(f)) => Some(f),
        None => None,
    };
    let rows = match batch::merge::read_summaries(&args.files) {
        Ok(rows) => rows,
        Err(e) => return usage(e),
    };
    write_summaries(
        &rows,
        args.summary.as_deref().zip(summary_format),
        args.fail_over_budget,
        args.strict,
    )
}

/// The end of `batch` and `summary merge`: the summary file (if asked),
/// the Markdown summary on stdout, and the batch's exit code.
fn write_summaries(
    rows: &[memcut::batch::Row],
    summary: Option<(&Path, memcut::batch::SummaryFormat)>,
    fail_over_budget: bool,
    strict: bool,
) -> Exit {
    use memcut::batch;
    let tally = batch::tally(rows);
    let mut exit = Exit::Ok;
    if tally.failed > 0 || (tally.partial > 0 && strict) {
        exit = exit.and(Exit::InputFailed);
    }
    if tally.over_budget > 0 && fail_over_budget {
        exit = exit.and(Exit::OverBudget);
    }
    if let Some((path, format)) = summary {
        if let Err(e) = std::fs::write(path, format.render(rows)) {
            eprintln!("memcut: error: cannot write {}: {e}", path.display());
            exit = exit.and(Exit::InputFailed);
        }
    }
    match output::write_stdout(&batch::render_markdown(rows)) {
        Ok(()) => exit,
        Err(e) => write_failed(e, exit),
    }
}

/// A progress bar over the inputs' bytes (files done/total as its message);
/// drawn on stderr only when `visible` (stderr is a terminal).
fn progress_bar(inputs: &[memcut::batch::Input], visible: bool) -> ProgressBar {
    let total: u64 = inputs.iter().map(|i| i.size_bytes).sum();
    let bar = ProgressBar::with_draw_target(
        Some(total),
        if visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        },
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed}] {wide_bar} {msg} files · {binary_bytes_per_sec} · ETA {eta}",
        )
        .expect("valid template"),
    );
    bar.set_message(format!("0/{}", inputs.len()));
    bar
}
