//! `memcut analyze` and `memcut diff`.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;

use memcut::{AnalyzeOptions, Error, OutputFormat, Report};

use super::{AnalyzeArgs, DiffArgs, FormatArg};
use crate::output::{Layout, Sink};
use crate::{plan_options, usage, warn, write_failed, Exit};

/// How `analyze` lays its reports out: `--jsonl`, else the format (`-f`,
/// else `-o`'s extension, else text on a terminal and Markdown otherwise).
fn analyze_layout(args: &AnalyzeArgs) -> Result<Layout, String> {
    let jsonl_file = args.output.as_deref().is_some_and(super::is_jsonl);
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

pub fn analyze(args: &AnalyzeArgs) -> Exit {
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
    options.limits.map_files = true;
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

pub fn diff(args: &DiffArgs) -> Exit {
    let mut options = AnalyzeOptions::new();
    options.limits.map_files = true;
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
