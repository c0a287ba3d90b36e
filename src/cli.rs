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
