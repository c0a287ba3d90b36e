//! The `memcut` binary: parses arguments, reads files, prints reports, and
//! maps outcomes to exit codes. All analysis lives in the library.

mod cli;

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use cli::{AnalyzeArgs, BatchArgs, BudgetArgs, Cli, Command, PlanArgs, PlanFormat};
use memcut::{AnalyzeOptions, Error, OutputFormat, Report};

/// Exit codes (DESIGN.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Ok = 0,
    InputFailed = 1,
    Usage = 2,
    OverBudget = 3,
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

fn analyze(args: &AnalyzeArgs) -> Exit {
    if args.output.is_some() && args.files.len() > 1 {
        eprintln!("memcut: error: --output takes one input; use `memcut batch` for many");
        return Exit::Usage;
    }
    let mut options = AnalyzeOptions::new();
    options.analysis.device = args.device.clone();
    options.analysis.top = args.top;
    if let Some(path) = &args.rules {
        match load_rules(path) {
            Ok(rules) => options.analysis.user_rules = rules,
            Err(msg) => {
                eprintln!("memcut: error: {}: {msg}", path.display());
                return Exit::Usage;
            }
        }
    }
    match plan_options(&args.budget) {
        Ok(plan) => options.plan = plan,
        Err(msg) => {
            eprintln!("memcut: error: {msg}");
            return Exit::Usage;
        }
    }
    let format = args.format.map_or(
        if std::io::stdout().is_terminal() {
            OutputFormat::Text
        } else {
            OutputFormat::Md
        },
        OutputFormat::from,
    );
    // Only HTML draws the series, and JSON carries them for a later
    // rendering; text and Markdown skip the walk that makes them.
    if matches!(format, OutputFormat::Text | OutputFormat::Md) {
        options.analysis.plot_points = 0;
    }
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
        match result {
            Ok(report) => {
                let damaged = warn_if_damaged(&name, &report);
                let text = memcut::render(&report, format);
                if let Err(e) = emit(&text, args.output.as_deref()) {
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        return exit;
                    }
                    eprintln!("memcut: error: cannot write report: {e}");
                    return Exit::InputFailed;
                }
                if damaged && args.strict {
                    exit = Exit::InputFailed;
                }
            }
            Err(e) => {
                eprintln!("memcut: error: {name}: {e}");
                exit = Exit::InputFailed;
            }
        }
    }
    exit
}

/// Prints a one-line warning for inputs that were read only in part.
fn warn_if_damaged(name: &str, report: &Report) -> bool {
    let damaged: Vec<_> = report
        .diagnostics
        .iter()
        .filter(|d| d.partial_read)
        .collect();
    for d in &damaged {
        eprintln!("memcut: warning: {name}: {}", d.message);
    }
    !damaged.is_empty()
}

fn emit(text: &str, output: Option<&Path>) -> std::io::Result<()> {
    match output {
        Some(path) => std::fs::write(path, text),
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(text.as_bytes())?;
            stdout.flush()
        }
    }
}

fn load_rules(path: &Path) -> Result<Vec<memcut::UserRule>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("bad rules file: {e}"))
}

/// The planner's options from the command line (`--levers` is read here).
fn plan_options(args: &BudgetArgs) -> Result<memcut::PlanOptions, String> {
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
    if let Some(budget) = args.budget {
        options.set_budget(budget);
    }
    options.headroom = args.headroom;
    options.dp_ranks = args.dp_ranks;
    options.levers = levers;
    options.order = args.order.into();
    Ok(options)
}

/// `memcut plan COMPONENTS.json --target-gb N`: the seed's component mode.
fn plan_components(args: &PlanArgs) -> Exit {
    let name = args.file.display().to_string();
    let parsed = std::fs::read_to_string(&args.file)
        .map_err(|e| format!("cannot read: {e}"))
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
    match emit(&text, None) {
        Ok(()) => Exit::Ok,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Exit::Ok,
        Err(e) => {
            eprintln!("memcut: error: cannot write report: {e}");
            Exit::InputFailed
        }
    }
}

fn batch(args: &BatchArgs) -> Exit {
    use memcut::batch::{self, SummaryFormat};
    let summary_format = match args.summary.as_deref().map(SummaryFormat::from_path) {
        Some(Err(msg)) => {
            eprintln!("memcut: error: {msg}");
            return Exit::Usage;
        }
        Some(Ok(f)) => Some(f),
        None => None,
    };
    if let Some(dir) = &args.out_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("memcut: error: --out-dir {}: {e}", dir.display());
            return Exit::Usage;
        }
    }
    let mut formats = Vec::new();
    for f in args.format.iter().map(|f| OutputFormat::from(*f)) {
        if !formats.contains(&f) {
            formats.push(f);
        }
    }
    let mut analyze = AnalyzeOptions::new();
    match plan_options(&args.budget) {
        Ok(plan) => analyze.plan = plan,
        Err(msg) => {
            eprintln!("memcut: error: {msg}");
            return Exit::Usage;
        }
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
        Err(e) => {
            eprintln!("memcut: error: {e}");
            return Exit::Usage;
        }
    }
    batch::sort_rows(&mut rows);
    for r in rows.iter().filter(|r| r.status == batch::Status::Failed) {
        eprintln!("memcut: error: {}: {}", r.file, r.error);
    }
    let tally = batch::tally(&rows);
    let mut exit = if tally.failed > 0 {
        Exit::InputFailed
    } else if tally.over_budget > 0 && args.fail_over_budget {
        Exit::OverBudget
    } else {
        Exit::Ok
    };
    if let (Some(path), Some(format)) = (&args.summary, summary_format) {
        if let Err(e) = std::fs::write(path, format.render(&rows)) {
            eprintln!("memcut: error: cannot write {}: {e}", path.display());
            exit = Exit::InputFailed;
        }
    }
    if let Err(e) = emit(&batch::render_markdown(&rows), None) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("memcut: error: cannot write summary: {e}");
            return Exit::InputFailed;
        }
    }
    exit
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
