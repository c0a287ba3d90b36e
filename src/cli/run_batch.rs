//! `memcut batch` and `memcut summary merge`.

use std::io::IsTerminal;
use std::path::Path;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{BatchArgs, FormatArg, MergeArgs};
use crate::output;
use memcut::{AnalyzeOptions, OutputFormat};

use crate::{plan_options, usage, write_failed, Exit};

pub fn batch(args: &BatchArgs) -> Exit {
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
pub fn merge_summaries(args: &MergeArgs) -> Exit {
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
