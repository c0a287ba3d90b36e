//! Command-line arguments (clap derive). Parsing only; `main.rs` acts on them.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use memcut::report::OutputFormat;

#[derive(Debug, Parser)]
#[command(
    name = "memcut",
    version,
    about = "Post-mortem for GPU memory: where did the peak come from, and what to cut to fit",
    long_about = None
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Analyse traces: peak, what was live, OOMs, and a cut plan when a budget is known.
    Analyze(AnalyzeArgs),
    /// Analyse many traces (files, folders, globs) in parallel: one report each plus a summary.
    Batch(BatchArgs),
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Snapshot pickles, Chrome traces (.json/.json.gz) or memory-timeline exports; `-` reads stdin.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output format [default: text on a terminal, md otherwise].
    #[arg(long, short = 'f', value_enum)]
    pub format: Option<OutputFormat>,
    /// Write the report here instead of stdout (one input only).
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Only this device (e.g. cuda:0, cpu).
    #[arg(long)]
    pub device: Option<String>,
    /// How many top allocation sites to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Extra classification rules (JSON list), tried before the built-in ones.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Exit 1 when the input was damaged (truncated, …) even if a partial report was made.
    #[arg(long)]
    pub strict: bool,
}

#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Files, folders (searched recursively; files recognised by content) and globs.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Write one report per input and format here (created if missing).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Report formats, comma-separated.
    #[arg(
        long,
        short = 'f',
        value_enum,
        value_delimiter = ',',
        default_value = "md"
    )]
    pub format: Vec<OutputFormat>,
    /// Files analysed at once [default: one per core].
    #[arg(long, short = 'j', default_value_t = 0)]
    pub jobs: usize,
    /// Device memory budget (e.g. 80GiB, 79.6GB, 512MiB, or bytes).
    #[arg(long, value_parser = memcut::size::parse_size)]
    pub budget: Option<u64>,
    /// Also write the summary to FILE: .csv, .jsonl or .md by extension.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Exit 3 when some input does not fit the budget.
    #[arg(long, requires = "budget")]
    pub fail_over_budget: bool,
}
