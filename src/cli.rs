//! Command-line arguments (clap derive). Parsing only; `main.rs` acts on them.

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

pub mod run_analyze;
pub mod run_batch;

use memcut::{
    plan::{BudgetSpec, Headroom, Order},
    OutputFormat,
};

/// A report format on the command line (the library's [`OutputFormat`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    Text,
    Md,
    Json,
    Html,
}

impl FormatArg {
    /// The format a report file's extension names (`.txt`, `.md`, `.json`,
    /// `.html`; `.jsonl` is JSON, one report per line: see [`is_jsonl`]).
    pub fn from_path(path: &Path) -> Option<FormatArg> {
        let ext = path.extension()?.to_string_lossy().to_ascii_lowercase();
        match ext.as_str() {
            "txt" | "text" => Some(FormatArg::Text),
            "md" | "markdown" => Some(FormatArg::Md),
            "json" | "jsonl" | "ndjson" => Some(FormatArg::Json),
            "html" | "htm" => Some(FormatArg::Html),
            _ => None,
        }
    }
}

/// Whether a report file's extension asks for JSON Lines (`.jsonl`, `.ndjson`).
pub fn is_jsonl(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("ndjson"))
}

impl From<FormatArg> for OutputFormat {
    fn from(f: FormatArg) -> OutputFormat {
        match f {
            FormatArg::Text => OutputFormat::Text,
            FormatArg::Md => OutputFormat::Md,
            FormatArg::Json => OutputFormat::Json,
            FormatArg::Html => OutputFormat::Html,
        }
    }
}

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
    /// Plan cuts for a component list `[{"name", "peak_gb", "cuttable"}]` against a target in GB.
    Plan(PlanArgs),
    /// Compare two inputs (traces, snapshots or saved JSON reports): peaks, categories, sites, plans.
    Diff(DiffArgs),
    /// Analyse many traces (files, folders, globs) in parallel: one report each plus a summary.
    Batch(BatchArgs),
    /// Work with batch summaries (`memcut summary merge` joins the shards of a batch).
    Summary(SummaryArgs),
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Snapshot pickles, Chrome traces (.json/.json.gz) or memory-timeline exports; `-` reads stdin.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Output format [default: from --output's extension; else text on a terminal, md otherwise].
    /// Several inputs: json writes one JSON list of reports, html is refused (use `memcut batch`).
    #[arg(long, short = 'f', value_enum)]
    pub format: Option<FormatArg>,
    /// One JSON report per line (JSON Lines), for any number of inputs.
    #[arg(long, conflicts_with = "format")]
    pub jsonl: bool,
    /// Write the report(s) here instead of stdout; .txt, .md, .json, .jsonl or .html sets the format.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Only this device (e.g. cuda:0, cpu).
    #[arg(long)]
    pub device: Option<String>,
    /// How many top allocation sites to list, in every format [default: 3 in text, 10 otherwise].
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = memcut::parse_top)]
    pub top: Option<usize>,
    /// Extra classification rules (JSON list), tried before the built-in ones.
    #[arg(long)]
    pub rules: Option<PathBuf>,
    /// Exit 1 when the input was damaged (truncated, …) even if a partial report was made.
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Report this instant instead of the peak: an event index (1234), a time since the
    /// first event (1.5s, 300ms, 20us), oom:N (the N-th OOM, from 0), peak or end.
    #[arg(long, value_name = "EVENT|TIME|oom:N", value_parser = memcut::At::parse)]
    pub at: Option<memcut::At>,
    /// Exit 3 when some device's peak does not fit the budget (after any
    /// other outcome: a failed input still exits 1).
    #[arg(long, requires = "budget")]
    pub fail_over_budget: bool,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The run before (any input `analyze` reads, or a JSON report memcut wrote).
    pub before: PathBuf,
    /// The run after.
    pub after: PathBuf,
    /// Output format [default: text on a terminal, md otherwise].
    #[arg(long, short = 'f', value_enum)]
    pub format: Option<FormatArg>,
    /// Write the comparison here instead of stdout.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Only this device (matched by name in both inputs).
    #[arg(long)]
    pub device: Option<String>,
    /// How many changed sites to list per device.
    #[arg(long, default_value_t = 20)]
    pub top: usize,
    /// Exit 4 when a device's allocated peak grew by more than PCT percent (0: any growth).
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    pub fail_if_peak_grows: Option<f64>,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a percentage (a number >= 0)")),
    }
}

/// What the cut plan is planned against (shared by every command that plans).
#[derive(Debug, Args)]
pub struct BudgetArgs {
    /// Memory budget per device: 80GiB, 79.6GB, 512MiB or bytes (GB = 10^9, GiB = 2^30),
    /// or a share of each device's observed peak (80%)
    /// [default: the device's memory if the trace says, else free + reserved at an OOM].
    #[arg(long, value_name = "SIZE|PCT", allow_hyphen_values = true, value_parser = memcut::plan::parse_budget)]
    pub budget: Option<BudgetSpec>,
    /// Room kept free below the budget: a percentage of the budget (10%) or a
    /// size with a unit (2GiB); smaller than the budget.
    #[arg(long, value_name = "PCT|SIZE", default_value = "10%", allow_hyphen_values = true, value_parser = memcut::plan::parse_headroom)]
    pub headroom: Headroom,
    /// The device's memory (80GiB), for traces that do not record it: a
    /// snapshot says what was free at an OOM, not how much the device holds.
    /// The budget when --budget is not given, and what an OOM is checked
    /// against for memory held outside PyTorch's allocator
    /// [default: the trace's deviceProperties, if any].
    #[arg(long, value_name = "SIZE", value_parser = memcut::plan::parse_device_memory)]
    pub device_memory: Option<u64>,
    /// Data-parallel ranks the sharding levers may shard over (1: no sharding levers).
    #[arg(long, value_name = "N", default_value_t = 1, allow_hyphen_values = true, value_parser = memcut::plan::parse_dp_ranks)]
    pub dp_ranks: u32,
    /// Levers to plan with instead of the built-in catalogue (JSON list of
    /// {name, scales: {category: factor}, cost, action}).
    #[arg(long, value_name = "FILE")]
    pub levers: Option<PathBuf>,
    /// Lever order: `cheapest` (the cheapest cost class first, then the
    /// largest saving) or `largest` (the largest contribution at the peak
    /// first, whatever it costs).
    #[arg(long, value_name = "cheapest|largest", default_value = "cheapest", value_parser = Order::parse)]
    pub order: Order,
    /// Re-simulate the whole timeline with these levers applied in order
    /// (a finding's fix such as inference_mode, or a catalogue lever) and
    /// report the peak after them.
    #[arg(long, value_name = "LEVER[,LEVER…]", value_delimiter = ',')]
    pub what_if: Vec<String>,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Component list (JSON): [{"name": "weights", "peak_gb": 10.0, "cuttable": false}, …];
    /// `-` reads stdin. (For a trace, `memcut analyze FILE --budget SIZE` plans the cuts.)
    pub file: PathBuf,
    /// Target peak in decimal GB (10^9 bytes).
    #[arg(long, value_name = "GB", value_parser = parse_target_gb)]
    pub target_gb: f64,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value = "text")]
    pub format: PlanFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlanFormat {
    Text,
    Md,
    Json,
}

fn parse_target_gb(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a size in GB (a number > 0)")),
    }
}

#[derive(Debug, Args)]
pub struct BatchArgs {
    /// Files, folders (searched recursively; files recognised by content) and globs.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Write one report per input and format here (created if missing).
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Report formats written to --out-dir, comma-separated [default: md].
    #[arg(
        long,
        short = 'f',
        value_enum,
        value_delimiter = ',',
        requires = "out_dir"
    )]
    pub format: Vec<FormatArg>,
    /// Files analysed at once [default: one per core].
    #[arg(long, short = 'j', default_value_t = 0, hide_default_value = true)]
    pub jobs: usize,
    #[command(flatten)]
    pub budget: BudgetArgs,
    /// Also write the summary to FILE: .csv, .jsonl or .md by extension.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Exit 3 when some input does not fit the budget.
    #[arg(long, requires = "budget")]
    pub fail_over_budget: bool,
    /// Exit 1 when some input was read only in part (status `partial`).
    #[arg(long)]
    pub strict: bool,
    /// Analyse only shard I of N (0 <= I < N): the files whose path hashes to I.
    /// Run N shards with the same arguments, then `memcut summary merge` their .jsonl summaries.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<memcut::batch::shard::Shard>,
}

#[derive(Debug, Args)]
pub struct SummaryArgs {
    #[command(subcommand)]
    pub command: SummaryCommand,
}

#[derive(Debug, Subcommand)]
pub enum SummaryCommand {
    /// Join the .jsonl summaries of a batch run in shards (`--shard I/N`) into
    /// the summary a single run gives: Markdown on stdout, `--summary` by extension.
    Merge(MergeArgs),
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' summaries (`memcut batch … --shard I/N --summary part-I.jsonl`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Also write the merged summary to FILE: .csv, .jsonl or .md by extension.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Exit 3 when some input does not fit its budget.
    #[arg(long)]
    pub fail_over_budget: bool,
    /// Exit 1 when some input was read only in part (status `partial`).
    #[arg(long)]
    pub strict: bool,
}
