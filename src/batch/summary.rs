//! The batch summary written out: Markdown (human units, then the tally
//! and the ranks), CSV and JSON Lines.

use super::{ranks, tally, Row, COLUMNS};
use crate::units::human_bytes;

/// The summary as a Markdown table (human units), then the tally.
pub fn render_markdown(rows: &[Row]) -> String {
    use std::fmt::Write;
    let t = tally(rows);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# memcut batch: {} file{}\n",
        t.files,
        if t.files == 1 { "" } else { "s" }
    );
    // Columns with nothing to say are left out: Verdict without a budget,
    // Findings for clean runs, Reason when every file was read whole.
    let verdicts = rows.iter().any(|r| !r.verdict.is_empty());
    let findings = rows.iter().any(|r| !r.findings.is_empty());
    let next_steps = rows.iter().any(|r| r.next_step_bytes.is_some());
    let reasons = rows.iter().any(|r| !r.error.is_empty());
    let mut head = vec![
        "File",
        "Status",
        "Format",
        "Device",
        "Peak",
        "Reserved",
        "Top category",
    ];
    let mut rule = vec!["---", "---", "---", "---", "---:", "---:", "---"];
    for (on, name) in [
        (verdicts, "Verdict"),
        (findings, "Findings"),
        (next_steps, "Next step (predicted)"),
        (reasons, "Reason"),
    ] {
        if on {
            head.push(name);
            rule.push(if name.starts_with("Next step") {
                "---:"
            } else {
                "---"
            });
        }
    }
    let _ = writeln!(out, "| {} |\n|{}|", head.join(" | "), rule.join("|"));
    let cell = |s: &str| {
        s.replace('|', "\\|")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let bytes = |b: Option<u64>| b.map_or(String::new(), human_bytes);
    for r in rows {
        let mut cells = vec![
            format!("`{}`", r.file.replace('`', "'").replace('|', "\\|")),
            r.status.as_str().to_owned(),
            r.format.clone(),
            cell(&r.device),
            bytes(r.peak_bytes),
            bytes(r.reserved_bytes),
            r.top_category.clone(),
        ];
        if verdicts {
            cells.push(r.verdict.clone());
        }
        if findings {
            cells.push(findings_cell(&r.findings));
        }
        if next_steps {
            cells.push(bytes(r.next_step_bytes));
        }
        if reasons {
            cells.push(cell(&r.error));
        }
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    let _ = writeln!(
        out,
        "\n{} analysed ({} over budget, {} partial), {} skipped, {} failed.",
        t.analysed, t.over_budget, t.partial, t.skipped, t.failed
    );
    out.push_str(&ranks::render_markdown(rows));
    out
}

/// `graph_kept_alive=13680640;…` as `graph_kept_alive (saves 13.0 MiB), …`.
fn findings_cell(findings: &str) -> String {
    findings
        .split(';')
        .filter(|f| !f.is_empty())
        .map(|f| match f.split_once('=') {
            Some((kind, bytes)) => match bytes.parse::<u64>() {
                Ok(b) => format!("{kind} (saves {})", human_bytes(b)),
                Err(_) => kind.to_owned(),
            },
            None => f.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The summary as CSV (RFC 4180: header first, quoted where needed, bytes as integers).
pub fn render_csv(rows: &[Row]) -> String {
    let mut out = COLUMNS.join(",");
    out.push('\n');
    let num = |b: Option<u64>| b.map_or(String::new(), |b| b.to_string());
    for r in rows {
        let fields = [
            csv_field(&r.file),
            r.status.as_str().to_owned(),
            csv_field(&r.format),
            csv_field(&r.device),
            num(r.peak_bytes),
            num(r.reserved_bytes),
            csv_field(&r.top_category),
            csv_field(&r.verdict),
            csv_field(&r.report),
            csv_field(&r.error),
            csv_field(&r.findings),
            num(r.next_step_bytes),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// The summary as JSON Lines: one [`Row`] object per line.
pub fn render_jsonl(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows {
        out.push_str(&serde_json::to_string(r).expect("a row always serialises"));
        out.push('\n');
    }
    out
}
