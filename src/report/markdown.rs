//! Markdown: the ticket attachment. Renders on code-hosting sites; stays
//! under 200 lines for any input at the default `--top` (every other table
//! is capped, only the [`MAX_FULL_DEVICES`] devices with the highest peaks
//! get a full section, and devices with a trivial peak get one line).

use std::fmt::Write;

use super::document::{self, Cell, Column, DeviceDocument, Table};
use super::{major_devices, minor_devices_line, not_proposed};
use crate::model::Level;
use crate::schema::{DeviceReport, Plan, PlanStep, Report};
use crate::units::human_bytes as h;

/// Devices with a full section; the rest are rows of the overview table.
pub const MAX_FULL_DEVICES: usize = 2;
/// Most rows of the device overview table.
pub const MAX_DEVICE_ROWS: usize = 12;
/// Most OOM events listed per device.
pub const MAX_OOMS: usize = 3;
/// Most plan steps listed per device.
pub const MAX_STEPS: usize = 6;
/// Most parts of the memory that existed before recording.
pub const MAX_BEFORE_RECORDING: usize = 8;
/// Most diagnostics listed.
pub const MAX_DIAGNOSTICS: usize = 10;

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# memcut report: `{}`\n", code(&report.source.path));
    let _ = writeln!(
        out,
        "Format: {} · {} · memcut {}\n",
        report.source.format,
        h(report.source.size_bytes),
        report.tool.version
    );
    let (devices, minor) = major_devices(report);
    if devices.is_empty() {
        let _ = writeln!(out, "No device with memory events.\n");
    }
    if devices.len() > 1 {
        overview(&mut out, &devices);
    }
    for d in devices.iter().take(MAX_FULL_DEVICES) {
        device(&mut out, d);
    }
    if devices.len() > MAX_FULL_DEVICES {
        let _ = writeln!(
            out,
            "{} more device(s) are in the table above; the JSON report has every device in full.\n",
            devices.len() - MAX_FULL_DEVICES
        );
    }
    if let Some(line) = minor_devices_line(&minor) {
        let _ = writeln!(out, "{}.\n", cell(&line));
    }
    if !report.diagnostics.is_empty() {
        let _ = writeln!(out, "## Diagnostics\n");
        for d in report.diagnostics.iter().take(MAX_DIAGNOSTICS) {
            let tag = match d.level {
                Level::Warning => "**warning**",
                Level::Info => "info",
            };
            let _ = writeln!(out, "- {tag}: {}", cell(&d.message));
        }
        if report.diagnostics.len() > MAX_DIAGNOSTICS {
            let _ = writeln!(
                out,
                "- … {} more in the JSON report",
                report.diagnostics.len() - MAX_DIAGNOSTICS
            );
        }
    }
    out
}

/// One row per device, highest peak first.
fn overview(out: &mut String, devices: &[&DeviceReport]) {
    let t = document::overview(devices);
    let _ = writeln!(out, "## {}\n", t.title);
    let more = table(out, &t, MAX_DEVICE_ROWS);
    if more > 0 {
        more_row(out, &t, &[&format!("… {more} more")]);
    }
    let _ = writeln!(out);
}

fn device(out: &mut String, d: &DeviceReport) {
    let doc = DeviceDocument::new(d);
    let _ = writeln!(out, "## Device `{}`\n", code(&d.device));
    for l in &doc.lists {
        headed_list(out, l.label, &l.headline, &l.items);
    }
    let _ = writeln!(out, "| | |\n|---|---|");
    for f in &doc.facts {
        let value: String = f.value.iter().map(spell).collect();
        let _ = writeln!(out, "| {} | {value} |", f.name);
    }
    let _ = writeln!(out);
    if let Some(note) = &doc.at_note {
        let _ = writeln!(out, "> **{}**\n", cell(note));
    }
    headed_table(out, &doc.categories, usize::MAX);
    if let Some(t) = &doc.before_recording {
        let _ = writeln!(out, "### {}\n", t.title);
        let more = table(out, t, MAX_BEFORE_RECORDING);
        if more > 0 {
            more_row(out, t, &[&format!("… {more} more in the JSON report")]);
        }
        let _ = writeln!(out);
    }
    if let Some(t) = &doc.top_sites {
        headed_table(out, t, usize::MAX);
        super::stacks::markdown(out, d);
    }
    if let Some(t) = &doc.ooms {
        headed_table(out, t, MAX_OOMS);
        for o in d.ooms.iter().take(MAX_OOMS) {
            let _ = writeln!(out, "- event {}: {}", o.event_index, cell(&o.verdict));
        }
        if d.ooms.len() > MAX_OOMS {
            let _ = writeln!(
                out,
                "- … {} more in the JSON report",
                d.ooms.len() - MAX_OOMS
            );
        }
        let _ = writeln!(out);
    }
    super::allocator::markdown(out, d);
    let _ = writeln!(out, "### Cut plan\n");
    match &d.plan {
        Some(plan) => write_plan(out, plan),
        None => {
            let _ = writeln!(
                out,
                "No budget known: run with `--budget SIZE` (e.g. `--budget 80GiB`, or `--budget 80%` of the peak) for a plan.\n"
            );
        }
    }
}

/// `### TITLE`, the table (at most `max` rows) and a blank line.
fn headed_table(out: &mut String, t: &Table, max: usize) {
    let _ = writeln!(out, "### {}\n", t.title);
    table(out, t, max);
    let _ = writeln!(out);
}

/// A table's header and its first `max` rows; the columns Markdown cannot
/// show well (bars, sentences) are left out. Returns how many rows were
/// left out.
pub(super) fn table(out: &mut String, t: &Table, max: usize) -> usize {
    let shown = shown(t);
    let names: Vec<&str> = shown.iter().map(|&i| t.columns[i].name()).collect();
    let _ = write!(out, "| {} |\n|", names.join(" | "));
    for &i in &shown {
        out.push_str(match t.columns[i] {
            Column::Number(_) => "---:|",
            _ => "---|",
        });
    }
    out.push('\n');
    for row in t.rows.iter().take(max) {
        out.push('|');
        for &i in &shown {
            // An empty cell as `| |`; any other, even one of empty text,
            // as `| TEXT |`.
            if row[i] != Cell::Empty {
                out.push(' ');
                out.push_str(&spell(&row[i]));
            }
            out.push_str(" |");
        }
        out.push('\n');
    }
    t.rows.len().saturating_sub(max)
}

/// The columns Markdown shows (not bars, not sentences).
fn shown(t: &Table) -> Vec<usize> {
    (0..t.columns.len())
        .filter(|&i| matches!(t.columns[i], Column::Text(_) | Column::Number(_)))
        .collect()
}

/// The row under a table that says what [`table`] left out: these cells
/// first, the table's other shown columns empty.
fn more_row(out: &mut String, t: &Table, cells: &[&str]) {
    out.push('|');
    for c in cells {
        out.push(' ');
        out.push_str(c);
        out.push_str(" |");
    }
    for _ in cells.len()..shown(t).len() {
        out.push_str(" |");
    }
    out.push('\n');
}

/// A cell as Markdown: trace text escaped, memcut's own words as they are.
fn spell(c: &Cell) -> String {
    match c {
        Cell::Plain(s) | Cell::Swatch(_, s) => s.clone(),
        Cell::Text(s) => cell(s),
        Cell::Code(s) => format!("`{}`", code(s)),
        Cell::Strong(s) => format!("**{s}**"),
        Cell::Bytes(b) => h(*b),
        Cell::Change(b) => document::signed(*b),
        Cell::Bar(..) | Cell::Empty => String::new(),
    }
}

/// The cut plan: the failed allocation's first when there is one, then the
/// replayed peak's; the evidence and the levers not proposed. Compact: two
/// devices' plans must fit the 200 lines with everything else.
fn write_plan(out: &mut String, plan: &Plan) {
    let source = if plan.budget_source.is_empty() {
        String::new()
    } else {
        format!(" (from {})", cell(&plan.budget_source))
    };
    let _ = writeln!(
        out,
        "Budget {} − headroom {} = target **{}**{source}; peak now {} = allocated + the allocator's overhead (reserved peak − allocated peak), at {}. Each step re-simulates the whole timeline and lowers the peak by at least {} (1%).\n",
        h(plan.budget_bytes),
        h(plan.headroom_bytes),
        h(plan.target_bytes),
        h(plan.peak_before_bytes),
        cell(&plan.peak_before_at),
        h(plan.min_step_bytes)
    );
    let mut rows = MAX_STEPS;
    if let Some(o) = &plan.oom_plan {
        rows = MAX_STEPS / 2;
        let _ = writeln!(out, "#### At the OOM (event {})\n", o.event_index);
        steps_table(out, &o.steps, rows, plan.target_bytes);
        verdict(
            out,
            o.verdict.as_str(),
            &o.reason,
            o.estimate_reason.as_deref(),
        );
        let _ = writeln!(out, "#### At the replayed peak\n");
    }
    steps_table(out, &plan.steps, rows, plan.target_bytes);
    verdict(
        out,
        plan.verdict.as_str(),
        &plan.reason,
        plan.estimate_reason.as_deref(),
    );
    let mut why = Vec::new();
    if !plan.facts.is_empty() {
        let facts: Vec<String> = plan
            .facts
            .iter()
            .map(|f| format!("{}: **{}** ({})", f.fact, cell(&f.value), cell(&f.because)))
            .collect();
        why.push(format!("**Evidence.** {}.", facts.join(" · ")));
    }
    let groups: Vec<String> = not_proposed(plan)
        .into_iter()
        .map(|(reason, levers)| format!("`{}`: {}", levers.join("`, `"), cell(&reason)))
        .collect();
    if !groups.is_empty() {
        why.push(format!("**Not proposed.** {}.", groups.join(" · ")));
    }
    if !why.is_empty() {
        let _ = writeln!(out, "{}\n", why.join(" "));
    }
}

/// A verdict paragraph, with what it rests on when that is an estimate.
fn verdict(out: &mut String, verdict: &str, reason: &str, estimate: Option<&str>) {
    let estimate = estimate.map_or(String::new(), |e| format!(" *Estimate:* {}.", cell(e)));
    let _ = writeln!(
        out,
        "**Verdict: {verdict}** — {}.{estimate}\n",
        cell(reason)
    );
}

/// A plan's steps as a table (at most `max` rows).
fn steps_table(out: &mut String, steps: &[PlanStep], max: usize, target: u64) {
    if steps.is_empty() {
        return;
    }
    let t = document::plan_steps(steps, target);
    let more = table(out, &t, max);
    if more > 0 {
        more_row(
            out,
            &t,
            &["…", &format!("{more} more steps in the JSON report")],
        );
    }
    let _ = writeln!(out);
}

/// Makes trace text safe in a table cell or list item: no column breaks (a
/// backslash before a pipe is escaped too, or `\|` would break the row), no
/// line breaks, no raw HTML (hosting sites render inline tags).
pub(super) fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    // Backslashes written just before: doubled when a pipe follows.
    let mut run = 0;
    for ch in s.chars() {
        match ch {
            '\\' => {
                out.push('\\');
                run += 1;
                continue;
            }
            '|' => {
                out.extend(std::iter::repeat_n('\\', run));
                out.push_str("\\|");
            }
            '\n' | '\r' => out.push(' '),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
        run = 0;
    }
    out
}

/// Makes trace text safe inside inline code in a table (code spans are
/// literal, so only the delimiters need replacing).
pub(super) fn code(s: &str) -> String {
    s.replace('`', "'")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// `**LABEL** HEADLINE`, then one bullet per line and a blank line (a
/// finding and its evidence, the next step).
fn headed_list(out: &mut String, label: &str, headline: &str, items: &[String]) {
    let _ = writeln!(out, "**{label}** {}\n", cell(headline));
    for item in items {
        let _ = writeln!(out, "- {}", cell(item));
    }
    let _ = writeln!(out);
}

#[cfg(test)]
mod tests {
    use super::{cell, more_row};
    use crate::report::document::{Column, Table};

    /// The "more" row fills the shown columns (a bar column is not shown).
    #[test]
    fn the_more_row_spans_the_shown_columns() {
        let t = Table {
            title: String::new(),
            columns: vec![
                Column::Text("a"),
                Column::Number("b"),
                Column::Bar,
                Column::Text("c"),
            ],
            rows: Vec::new(),
        };
        let mut out = String::new();
        more_row(&mut out, &t, &["…", "2 more"]);
        assert_eq!(out, "| … | 2 more | |\n");
    }
    use crate::model::{Category, Diagnostic};

    /// Unescaped pipes in a spelled cell: each would break the row.
    fn column_breaks(s: &str) -> usize {
        let b = s.as_bytes();
        (0..b.len())
            .filter(|&i| {
                b[i] == b'|' && b[..i].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 0
            })
            .count()
    }

    #[test]
    fn a_cell_of_trace_text_never_breaks_its_row() {
        for text in [
            "a|b",
            "a\\|b",
            "a\\\\|b",
            "x\ny\r|",
            "<b>|</b>",
            "C:\\path\\file.py",
        ] {
            let c = cell(text);
            assert_eq!(column_breaks(&c), 0, "{text:?} -> {c:?}");
            assert!(!c.contains(['\n', '\r', '<', '>']), "{c:?}");
        }
        // Text without a pipe keeps its backslashes as they are.
        assert_eq!(cell("C:\\path\\file.py"), "C:\\path\\file.py");
    }
    use crate::schema::{
        ConsideredLever, OomFinding, OomPlan, Plan, PlanFact, PlanStep, Report, Verdict,
    };

    /// The worst case for length: many devices, OOMs, plan steps, diagnostics.
    #[test]
    fn markdown_stays_under_200_lines_for_a_crowded_report() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/golden/checkpointing.snapshot.json"
        );
        let mut report = Report::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
        let mut device = report.devices[0].clone();
        device.ooms = (0..40)
            .map(|k| OomFinding {
                event_index: k,
                ts_us: None,
                requested_bytes: 1 << 30,
                device_free_bytes: Some(1),
                allocated_bytes: 2 << 30,
                reserved_bytes: Some(3 << 30),
                by_category: [(Category::Activation, 2 << 30)].into(),
                largest_free_block_bytes: Some(1 << 20),
                verdict: "genuine shortage".into(),
            })
            .collect();
        let steps: Vec<PlanStep> = (0..30)
            .map(|k| PlanStep {
                lever: format!("lever {k}"),
                action: "do it".into(),
                cost: "some".into(),
                categories: vec![Category::Activation],
                saved_bytes: 1 << 20,
                peak_after_bytes: 1 << 29,
                peak_moved_to: "backward".into(),
                scales: [(Category::Activation, 0.5)].into(),
                peak_event_index: 7,
                peak_moved: k % 2 == 0,
                targets: [("activation".to_owned(), 0.5)].into(),
                because: "training run".into(),
                condition: Some("if the weights are fp32: unknown".into()),
                tradeoff: Some("slower".into()),
                estimate: true,
                estimate_reason: Some("a guess".into()),
            })
            .collect();
        device.plan = Some(Plan {
            budget_bytes: 1 << 30,
            headroom_bytes: 1 << 28,
            target_bytes: 3 << 28,
            headline: None,
            peak_before_bytes: device.peak.allocated_bytes,
            steps: steps.clone(),
            estimated_peak_bytes: 1 << 29,
            verdict: Verdict::DoesNotFit,
            reason: "too big".into(),
            budget_source: "--budget".into(),
            peak_before_at: "event 7 (backward)".into(),
            gap_bytes: 1 << 28,
            oom_plan: Some(OomPlan {
                event_index: 3,
                requested_bytes: 1 << 30,
                demand_bytes: 3 << 30,
                steps,
                estimated_peak_bytes: 2 << 30,
                verdict: Verdict::DoesNotFit,
                gap_bytes: 1 << 30,
                reason: "too big".into(),
                estimate: true,
                estimate_reason: Some("a guess".into()),
            }),
            estimate: true,
            estimate_reason: Some("a guess".into()),
            min_step_bytes: 1 << 20,
            considered: (0..30)
                .map(|k| ConsideredLever {
                    lever: format!("other {k}"),
                    outcome: "not_applicable".into(),
                    reason: format!("reason {}", k % 7),
                    saved_bytes: 0,
                })
                .collect(),
            facts: (0..12)
                .map(|k| PlanFact {
                    fact: format!("fact {k}"),
                    value: "yes".into(),
                    because: "evidence".into(),
                })
                .collect(),
        });
        // The sample is a first step's recording: its next-step prediction
        // is a fixed five lines, not what this test crowds (devices, plan
        // rows, warnings).
        device.next_step = None;
        report.devices = (0..64)
            .map(|k| {
                let mut d = device.clone();
                d.device = format!("cuda:{k}");
                d
            })
            .collect();
        report.diagnostics = (0..100)
            .map(|k| Diagnostic::warning(format!("warning {k}")))
            .collect();
        let md = super::render(&report);
        // What a reader scrolls through: the collapsed stacks blocks are
        // folded on GitHub and GitLab, so they are counted apart.
        let (mut shown, mut folded, mut inside) = (0, 0, false);
        for line in md.lines() {
            inside |= line == "<details>";
            if inside {
                folded += 1;
            } else {
                shown += 1;
            }
            inside &= line != "</details>";
        }
        assert!(shown < 200, "{shown} lines shown:\n{md}");
        assert!(folded < 120, "{folded} lines folded:\n{md}");
    }
}
