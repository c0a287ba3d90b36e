//! Markdown: the ticket attachment. Renders on code-hosting sites; stays
//! under 200 lines for any input at the default `--top` (every other table
//! is capped, only the [`MAX_FULL_DEVICES`] devices with the highest peaks
//! get a full section, and devices with a trivial peak get one line).

use std::fmt::Write;

use super::{
    attribution_line, before_recording_row, category_lines, major_devices, minor_devices_line,
    not_proposed, overview_row, peak_instant, phase_label, plan_step_row, share_label,
    BEFORE_RECORDING_COLUMNS, OVERVIEW_COLUMNS, PLAN_STEP_COLUMNS,
};
use crate::model::Level;
use crate::schema::{DeviceReport, Plan, PlanStep, Report};
use crate::units::{human_bytes as h, percent};

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
    let _ = writeln!(out, "## Devices\n");
    let _ = writeln!(
        out,
        "| {} |\n|---|---:|---:|---|---|---:|---|",
        OVERVIEW_COLUMNS.join(" | ")
    );
    for d in devices.iter().take(MAX_DEVICE_ROWS) {
        let [device, rest @ ..] = overview_row(d);
        let rest: Vec<String> = rest.iter().map(|c| cell(c)).collect();
        let _ = writeln!(out, "| `{}` | {} |", code(&device), rest.join(" | "));
    }
    if devices.len() > MAX_DEVICE_ROWS {
        let _ = writeln!(
            out,
            "| … {} more | | | | | | |",
            devices.len() - MAX_DEVICE_ROWS
        );
    }
    let _ = writeln!(out);
}

fn device(out: &mut String, d: &DeviceReport) {
    let p = &d.peak;
    let _ = writeln!(out, "## Device `{}`\n", code(&d.device));
    for f in &d.findings {
        headed_list(out, "Finding", &super::finding_line(f), &f.evidence);
    }
    if let Some(n) = &d.next_step {
        headed_list(out, "Next step", &super::next_step_line(d, n), &n.evidence);
    }
    if let Some(w) = &d.what_if {
        let _ = writeln!(out, "**What if** {}\n", cell(&super::what_if_line(d, w)));
        for b in &w.because {
            let _ = writeln!(out, "- {}", cell(b));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(
        out,
        "| Peak allocated | **{}** ({} bytes) |",
        h(p.allocated_bytes),
        p.allocated_bytes
    );
    let _ = writeln!(
        out,
        "| At | {}, phase: {} |",
        peak_instant(d),
        cell(&phase_label(&p.phase))
    );
    match p.reserved_bytes {
        Some(r) => {
            let _ = writeln!(out, "| Reserved at peak | {} ({} bytes) |", h(r), r);
        }
        None => {
            let _ = writeln!(out, "| Reserved at peak | unknown |");
        }
    }
    if let Some(r) = d.reserved_peak_bytes {
        let at = d
            .reserved_peak_event_index
            .map_or(String::new(), |e| format!(" at event {e}"));
        let _ = writeln!(out, "| Reserved peak | {}{at} |", h(r));
    }
    let _ = writeln!(
        out,
        "| Baseline (allocated before recording) | {} |",
        h(d.baseline_bytes)
    );
    let _ = writeln!(out, "| Categories at the peak | {} |", attribution_line(p));
    if let Some(c) = d.capacity_bytes {
        let _ = writeln!(
            out,
            "| Device memory | {} (peak is {}) |",
            h(c),
            percent(p.allocated_bytes, c)
        );
    }
    let _ = writeln!(out, "| Events | {} |\n", d.events);
    if let Some(note) = super::at_note(d) {
        let _ = writeln!(out, "> **{}**\n", cell(&note));
    }

    let cats = category_lines(p);
    let _ = writeln!(out, "### Memory at the peak by category\n");
    let _ = writeln!(out, "| Category | Bytes | Share of peak |\n|---|---:|---:|");
    for (c, b) in &cats.rows {
        let _ = writeln!(out, "| {} | {} | {} |", c, h(*b), share_label(p, *b));
    }
    if let Some((small, bytes)) = &cats.other {
        let names: Vec<&str> = small.iter().map(|c| c.as_str()).collect();
        let _ = writeln!(
            out,
            "| other: {} | {} | {} |",
            names.join(", "),
            h(*bytes),
            share_label(p, *bytes)
        );
    }
    let _ = writeln!(
        out,
        "| **allocated (peak)** | **{}** | 100% |",
        h(p.allocated_bytes)
    );
    if let Some(cache) = cats.allocator_cache {
        let _ = writeln!(
            out,
            "| allocator_cache (reserved, not allocated) | {} | |",
            h(cache)
        );
    }
    let _ = writeln!(out);

    if !d.before_recording.is_empty() {
        let _ = writeln!(out, "### Memory that existed before recording\n");
        let _ = writeln!(
            out,
            "| {} |\n|---|---:|---|---|",
            BEFORE_RECORDING_COLUMNS.join(" | ")
        );
        for part in d.before_recording.iter().take(MAX_BEFORE_RECORDING) {
            let cells: Vec<String> = before_recording_row(part).iter().map(|c| cell(c)).collect();
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        let _ = writeln!(out);
    }

    if !p.top_sites.is_empty() {
        let _ = writeln!(out, "### Top sites at the peak\n");
        let _ = writeln!(
            out,
            "| Site (operator < nearest program line) | Category | Bytes | Share | Count |\n|---|---|---:|---:|---:|"
        );
        for s in &p.top_sites {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} | {} |",
                code(&s.site),
                s.category,
                h(s.bytes),
                share_label(p, s.bytes),
                s.count
            );
        }
        let _ = writeln!(out);
        super::stacks::markdown(out, d);
    }

    if !d.ooms.is_empty() {
        let _ = writeln!(out, "### Out-of-memory events ({})\n", d.ooms.len());
        let _ = writeln!(out, "| Event | Requested | Free on device | Allocated | Reserved | Largest free block |\n|---:|---:|---:|---:|---:|---:|");
        let opt = |v: Option<u64>| v.map_or("?".to_owned(), h);
        for o in d.ooms.iter().take(MAX_OOMS) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                o.event_index,
                h(o.requested_bytes),
                opt(o.device_free_bytes),
                h(o.allocated_bytes),
                opt(o.reserved_bytes),
                opt(o.largest_free_block_bytes)
            );
        }
        let _ = writeln!(out);
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
    let _ = writeln!(
        out,
        "| {} |\n|---:|---|---|---|---:|---:|---|",
        PLAN_STEP_COLUMNS.join(" | ")
    );
    for (i, s) in steps.iter().enumerate().take(max) {
        let cells: Vec<String> = plan_step_row(i, s, target)
            .iter()
            .map(|c| cell(c))
            .collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    if steps.len() > max {
        let _ = writeln!(
            out,
            "| … | {} more steps in the JSON report | | | | | |",
            steps.len() - max
        );
    }
    let _ = writeln!(out);
}

/// Makes trace text safe in a table cell or list item: no column breaks, no
/// line breaks, no raw HTML (hosting sites render inline tags).
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
        .replace(['\n', '\r'], " ")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Makes trace text safe inside inline code in a table (code spans are
/// literal, so only the delimiters need replacing).
fn code(s: &str) -> String {
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
    use crate::model::{Category, Diagnostic};
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
