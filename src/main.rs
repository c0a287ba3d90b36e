//! The `memcut` binary: parses arguments, reads files, prints reports, and
//! maps outcomes to exit codes. All analysis lives in the library.

mod cli;

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;

use clap::Parser;

use cli::{AnalyzeArgs, Cli, Command};
use memcut::report::{self, OutputFormat};
use memcut::{AnalyzeOptions, Error};

/// Exit codes (DESIGN.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    Ok = 0,
    InputFailed = 1,
    Usage = 2,
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
    let format = args.format.unwrap_or(if std::io::stdout().is_terminal() {
        OutputFormat::Text
    } else {
        OutputFormat::Md
    });
    let mut exit = Exit::Ok;
    for path in &args.files {
        let name = path.display().to_string();
        let result = if name == "-" {
            let mut bytes = Vec::new();
            match std::io::stdin().read_to_end(&mut bytes) {
                Ok(_) => memcut::analyze_reader(&bytes[..], "-", bytes.len() as u64, &options),
                Err(e) => Err(Error::Io(e)),
            }
        } else {
            memcut::analyze_path(path, &options)
        };
        match result {
            Ok(report) => {
                let damaged = warn_if_damaged(&name, &report);
                let text = report::render(&report, format);
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
fn warn_if_damaged(name: &str, report: &memcut::report::Report) -> bool {
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

fn load_rules(path: &Path) -> Result<Vec<memcut::classify::UserRule>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("bad rules file: {e}"))
}
