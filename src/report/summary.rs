//! The batch summary written out: Markdown (human units, then the tally
//! and the rank tables), CSV and JSON Lines. `batch` computes the rows, the
//! tally and the jobs; this writes them.

use std::fmt::Write;

use super::document::{Cell, Column, Table};
use super::markdown::code;
use crate::schema::batch::{Job, RankPeak, Row, Tally, COLUMNS, OUTLIER_SHARE};
use crate::units::human_bytes;

/// Jobs with more ranks than this list only their outliers and extremes.
const LIST_ALL_UP_TO: usize = 32;

/// The summary as a Markdown table (human units), then the tally.
pub(crate) fn markdown(rows: &[Row], t: &Tally, jobs: &[Job]) -> String {
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
    let mut columns = vec![
        Column::Text("File"),
        Column::Text("Status"),
        Column::Text("Format"),
        Column::Text("Device"),
        Column::Number("Peak"),
        Column::Number("Reserved"),
        Column::Text("Top category"),
    ];
    for (on, column) in [
        (verdicts, Column::Text("Verdict")),
        (findings, Column::Text("Findings")),
        (next_steps, Column::Number("Next step (predicted)")),
        (reasons, Column::Text("Reason")),
    ] {
        if on {
            columns.push(column);
        }
    }
    let bytes = |b: Option<u64>| Cell::Plain(b.map_or(String::new(), human_bytes));
    let rows = rows
        .iter()
        .map(|r| {
            let mut cells = vec![
                Cell::Code(r.file.clone()),
                Cell::Plain(r.status.as_str().to_owned()),
                Cell::Plain(r.format.clone()),
                Cell::Text(r.device.clone()),
                bytes(r.peak_bytes),
                bytes(r.reserved_bytes),
                Cell::Plain(r.top_category.clone()),
            ];
            if verdicts {
                cells.push(Cell::Plain(r.verdict.clone()));
            }
            if findings {
                cells.push(Cell::Plain(findings_cell(&r.findings)));
            }
            if next_steps {
                cells.push(bytes(r.next_step_bytes));
            }
            if reasons {
                cells.push(Cell::Text(r.error.clone()));
            }
            cells
        })
        .collect();
    let table = Table {
        title: String::new(),
        columns,
        rows,
    };
    super::markdown::table(&mut out, &table, usize::MAX);
    let _ = writeln!(
        out,
        "\n{} analysed ({} over budget, {} partial), {} skipped, {} failed.",
        t.analysed, t.over_budget, t.partial, t.skipped, t.failed
    );
    out.push_str(&ranks_markdown(jobs));
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
pub(crate) fn csv(rows: &[Row]) -> String {
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
pub(crate) fn jsonl(rows: &[Row]) -> String {
    let mut out = String::new();
    for r in rows {
        out.push_str(&serde_json::to_string(r).expect("a row always serialises"));
        out.push('\n');
    }
    out
}

/// `+1.0 MiB`, `-680.6 KiB`.
fn signed_bytes(delta: i128) -> String {
    let sign = if delta < 0 { "-" } else { "+" };
    format!(
        "{sign}{}",
        human_bytes(delta.unsigned_abs().min(u64::MAX as u128) as u64)
    )
}

/// `+72.4%` of the median (`n/a` when the median is 0).
fn signed_share(delta: i128, median: u64) -> String {
    if median == 0 {
        return "n/a".into();
    }
    let pct = delta as f64 * 100.0 / median as f64;
    if pct.abs() < 0.05 {
        "0.0%".into() // never `-0.0%`
    } else {
        format!("{pct:+.1}%")
    }
}

/// `0, 2–5, 7`.
fn ranges(ranks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        out.push(if j > i + 1 {
            format!("{}–{}", ranks[i], ranks[j])
        } else if j == i + 1 {
            format!("{}, {}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    out.join(", ")
}

/// The rank tables of the Markdown summary; empty without a job of
/// several ranks.
pub(crate) fn ranks_markdown(jobs: &[Job]) -> String {
    if jobs.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n## Ranks\n");
    for job in jobs {
        let max = job.max();
        let of = match job.world_size {
            Some(n) => format!("{} of {n} ranks (distributedInfo)", job.ranks.len()),
            None => format!(
                "{} ranks (numbers from the file names; world size unknown)",
                job.ranks.len()
            ),
        };
        let _ = writeln!(
            out,
            "\n### `{}` · {} · {of}\n",
            code(&job.folder),
            job.device_kind
        );
        let imbalance = job
            .imbalance
            .map_or("unknown (median 0)".into(), |x| format!("{x:.2}×"));
        let _ = writeln!(
            out,
            "Peak per rank: median {}, max {} (rank {}); max/median {imbalance}.",
            human_bytes(job.median_bytes),
            human_bytes(max.peak_bytes),
            max.rank,
        );
        let outlier_ranks: Vec<u32> = job.outliers.iter().map(|o| o.rank).collect();
        let pct = OUTLIER_SHARE * 100.0;
        if outlier_ranks.is_empty() {
            let _ = writeln!(
                out,
                "No outlier: every peak is within {pct:.0}% of the median."
            );
        } else {
            let _ = writeln!(
                out,
                "Outliers (peak more than {pct:.0}% from the median): rank {}.",
                ranges(&outlier_ranks)
            );
        }
        let missing = job.missing_ranks();
        if !missing.is_empty() {
            let _ = writeln!(
                out,
                "No analysed trace for rank {} (skipped, failed or not in the batch).",
                ranges(&missing)
            );
        }
        let _ = writeln!(
            out,
            "\n| Rank | Peak | vs median | Differs most from the median rank | File |\n|---:|---:|---:|---|---|"
        );
        let min = job
            .ranks
            .iter()
            .min_by_key(|r| r.peak_bytes)
            .map(|r| r.rank);
        let listed: Vec<&RankPeak> = job
            .ranks
            .iter()
            .filter(|r| {
                job.ranks.len() <= LIST_ALL_UP_TO
                    || outlier_ranks.contains(&r.rank)
                    || r.rank == max.rank
                    || Some(r.rank) == min
            })
            .collect();
        for r in &listed {
            let delta = r.peak_bytes as i128 - job.median_bytes as i128;
            let differs = job
                .outliers
                .iter()
                .find(|o| o.rank == r.rank)
                .and_then(|o| o.category)
                .map_or(String::new(), |(c, d)| format!("{c} {}", signed_bytes(d)));
            let files = if r.files > 1 {
                format!(" (highest of {} files)", r.files)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {differs} | `{}`{files} |",
                r.rank,
                human_bytes(r.peak_bytes),
                signed_share(delta, job.median_bytes),
                code(&r.file),
            );
        }
        if listed.len() < job.ranks.len() {
            let _ = writeln!(
                out,
                "\n{} more ranks within {pct:.0}% of the median are not listed (the .jsonl summary has every rank).",
                job.ranks.len() - listed.len()
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{markdown, ranges};
    use crate::schema::batch::{Row, Status, Tally};

    /// A device name or reason with a pipe or a line break stays in its row.
    #[test]
    fn summary_rows_stay_rows() {
        let row = Row {
            file: "runs/a|b\nc.json".into(),
            status: Status::Failed,
            format: String::new(),
            device: "cu|da\n0".into(),
            peak_bytes: None,
            reserved_bytes: None,
            top_category: String::new(),
            verdict: String::new(),
            report: String::new(),
            error: "bad <x> | y\nz".into(),
            findings: String::new(),
            next_step_bytes: None,
            distributed: None,
            warnings: Vec::new(),
        };
        let md = markdown(&[row], &Tally::default(), &[]);
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with("| `runs")).collect();
        assert_eq!(lines.len(), 1, "{md}");
        let unescaped = lines[0].matches('|').count() - lines[0].matches("\\|").count();
        assert_eq!(unescaped, 9, "{}", lines[0]);
    }

    #[test]
    fn ranges_are_compact() {
        assert_eq!(ranges(&[0, 2, 3, 4, 5, 7, 8]), "0, 2–5, 7, 8");
        assert_eq!(ranges(&[]), "");
    }
}
