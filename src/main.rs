//! The `memcut` binary: parses arguments, reads files, prints reports, and
//! maps outcomes to exit codes. All analysis lives in the library.

mod cli;
mod huge_pages;
mod output;

use std::io::Read;
use std::process::ExitCode;

use clap::Parser;

use cli::run_analyze::{analyze, diff};
use cli::run_batch::{batch, merge_summaries};
use cli::{BudgetArgs, Cli, Command, PlanArgs, PlanFormat, SummaryCommand};
use memcut::{report::Level, Report};
use output::WriteError;

#[global_allocator]
static ALLOCATOR: huge_pages::HugePages = huge_pages::HugePages;

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
fn plan_options(args: &BudgetArgs) -> Result<memcut::plan::PlanOptions, String> {
    let mut options = memcut::plan::PlanOptions::default();
    options.set_budget_and_headroom(args.budget, args.headroom)?;
    let levers = match &args.levers {
        Some(path) => Some(memcut::read_levers_file(path).map_err(|e| e.to_string())?),
        None => None,
    };
    options.dp_ranks = args.dp_ranks;
    options.device_memory = args.device_memory;
    options.levers = levers;
    options.order = args.order;
    memcut::plan::check_what_if(&args.what_if, options.levers.as_deref())?;
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
        .and_then(|text| memcut::components::parse_components(&text).map_err(|e| e.to_string()));
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
