//! The `memcut` binary: parses arguments, reads files, prints reports, and
//! maps outcomes to exit codes. All analysis lives in the library.

mod cli;
mod output;

use std::io::{IsTerminal, Read};
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use cli::{AnalyzeArgs, BatchArgs, BudgetArgs, Cli, Command, FormatArg, PlanArgs, PlanFormat};
use memcut::{AnalyzeOptions, Error, Level, OutputFormat, Report};
use output::{Layout, Sink, WriteError};

/// Exit codes (DESIGN.md §8; the README's output table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Exit {
    Ok = 0,
    InputFailed = 1,
    Usage = 2,
    OverBudget = 3,
}

impl Exit {
    /// The exit code of several outcomes: a failure (1) beats over budget
    /// (3), which beats success.
    fn and(self, other: Exit) -> Exit {
        let rank = |e: Exit| match e {
            Exit::Ok => 0,
            Exit::OverBudget => 1,
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
        Command::Analyze(args) => analyze(&args),
        Command::Plan(args) => plan_components(&args),
        Command::Batch(args) => batch(&args),
    };
    ExitCode::from(exit as u8)
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
    if let Some(path) = &args.rules {
        match load_rules(path) {
            Ok(rules) => options.analysis.user_rules = rules,
            Err(msg) => return usage(format!("{}: {msg}", path.display())),
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
                eprintln!("memcut: error: {name}: {e}");
                exit = exit.and(Exit::InputFailed);
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

fn load_rules(path: &Path) -> Result<Vec<memcut::UserRule>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("bad rules file: {e}"))
}

/// The planner's options from the command line (`--levers` is read here).
fn plan_options(args: &BudgetArgs) -> Result<memcut::PlanOptions, String> {
    if let (Some(budget), memcut::Headroom::Bytes(room)) = (args.budget, args.headroom) {
        if room >= budget {
            return Err(format!(
                "--headroom {} leaves nothing of --budget {}: the headroom must be smaller than the budget",
                memcut::human_bytes(room),
                memcut::human_bytes(budget)
            ));
        }
    }
    let levers = match &args.levers {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
            let levers =
                memcut::parse_levers(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            Some(levers)
        }
        None => None,
    };
    let mut options = memcut::PlanOptions::default();
    options.budget = args.budget;
    options.headroom = args.headroom;
    options.dp_ranks = args.dp_ranks;
    options.levers = levers;
    options.order = args.order.into();
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
    let (inputs, mut rows) = batch::discover(&args.paths);
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
    let tally = batch::tally(&rows);
    let mut exit = Exit::Ok;
    if tally.failed > 0 || (tally.partial > 0 && args.strict) {
        exit = exit.and(Exit::InputFailed);
    }
    if tally.over_budget > 0 && args.fail_over_budget {
        exit = exit.and(Exit::OverBudget);
    }
    if let (Some(path), Some(format)) = (&args.summary, summary_format) {
        if let Err(e) = std::fs::write(path, format.render(&rows)) {
            eprintln!("memcut: error: cannot write {}: {e}", path.display());
            exit = exit.and(Exit::InputFailed);
        }
    }
    match output::write_stdout(&batch::render_markdown(&rows)) {
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
