//! Text: what a person reads in ten seconds on a terminal.

use std::fmt::Write;

use super::{
    attribution_line, before_recording_line, category_lines, condition_words, is_tiny,
    major_devices, minor_devices_line, not_proposed, phase_label, plan_step_line, share_label,
};
use crate::schema::{DeviceReport, Plan, PlanStep, Report};
use crate::units::human_bytes as h;

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memcut: {} ({})",
        report.source.path, report.source.format
    );
    let (major, minor) = major_devices(report);
    for d in major {
        device(&mut out, d);
    }
    if let Some(line) = minor_devices_line(&minor) {
        let _ = writeln!(out, "\n{line}");
    }
    let warnings: Vec<_> = report
        .diagnostics
        .iter()
        .filter(|d| d.level == crate::model::Level::Warning)
        .collect();
    if !warnings.is_empty() {
        let _ = writeln!(out);
        for w in warnings {
            let _ = writeln!(out, "warning: {}", w.message);
        }
    }
    out
}

/// The cut plan: the failed allocation's first when the trace holds an
/// OOM, then the replayed peak's; the evidence in one line; the levers not
/// proposed, by reason.
fn write_plan(out: &mut String, plan: &Plan) {
    let steps = |out: &mut String, steps: &[PlanStep]| {
        for (i, s) in steps.iter().enumerate() {
            let _ = writeln!(
                out,
                "    {}. {}",
                i + 1,
                plan_step_line(s, plan.target_bytes)
            );
        }
    };
    let target = format!(
        "target {} (budget {} - headroom {})",
        h(plan.target_bytes),
        h(plan.budget_bytes),
        h(plan.headroom_bytes)
    );
    if let Some(o) = &plan.oom_plan {
        let _ = writeln!(
            out,
            "  plan at the OOM (event {}): {} for {target}: {}",
            o.event_index,
            o.verdict.as_str(),
            o.reason
        );
        steps(out, &o.steps);
        let _ = writeln!(
            out,
            "  plan for the replayed peak: {}: {}",
            plan.verdict.as_str(),
            plan.reason
        );
    } else {
        let _ = writeln!(
            out,
            "  plan: {} for {target}: {}",
            plan.verdict.as_str(),
            plan.reason
        );
    }
    steps(out, &plan.steps);
    if let Some(why) = &plan.estimate_reason {
        let _ = writeln!(out, "  estimate: {why}");
    }
    if let Some((run, rest)) = plan.facts.split_first() {
        let others: Vec<String> = rest
            .iter()
            .map(|f| format!("{} {}", f.fact, f.value))
            .collect();
        let _ = writeln!(
            out,
            "  evidence: run {} ({}); {}",
            run.value,
            run.because,
            others.join("; ")
        );
    }
    let groups: Vec<String> = not_proposed(plan)
        .into_iter()
        .map(|(reason, levers)| format!("{} ({})", levers.join(", "), condition_words(&reason)))
        .collect();
    if !groups.is_empty() {
        let _ = writeln!(out, "  not proposed: {}", groups.join("; "));
    }
}

fn device(out: &mut String, d: &DeviceReport) {
    let p = &d.peak;
    // With `--at` the instant shown is not the peak: the headline says so.
    let what = match &d.at {
        Some(a) => format!("--at {}:", a.spec),
        None => "peak".to_owned(),
    };
    let _ = write!(
        out,
        "\n{}: {what} {} allocated at event {} ({})",
        d.device,
        h(p.allocated_bytes),
        p.event_index,
        phase_label(&p.phase)
    );
    match p.reserved_bytes {
        Some(r) => {
            let _ = write!(out, ", {} reserved", h(r));
        }
        None => {
            let _ = write!(out, ", reserved unknown");
        }
    }
    let _ = writeln!(out);
    for f in &d.findings {
        let _ = writeln!(out, "  finding {}", super::finding_line(f));
        for e in &f.evidence {
            let _ = writeln!(out, "    - {e}");
        }
    }
    if let Some(n) = &d.next_step {
        let _ = writeln!(out, "  next step {}", super::next_step_line(d, n));
        for e in &n.evidence {
            let _ = writeln!(out, "    - {e}");
        }
    }
    if let Some(w) = &d.what_if {
        let _ = writeln!(out, "  what if {}", super::what_if_line(d, w));
        for b in &w.because {
            let _ = writeln!(out, "    - {b}");
        }
    }
    if let Some(note) = super::at_note(d) {
        let _ = writeln!(out, "  {note}");
    }
    if d.baseline_bytes > 0 {
        let _ = writeln!(
            out,
            "  existed before recording: {}: {}",
            h(d.baseline_bytes),
            before_recording_line(d)
        );
    }
    let _ = writeln!(out, "  categories at the peak: {}", attribution_line(p));
    // Shares of the allocated peak, as every report shows them; the
    // cache is reserved on top of it, so it gets a line but no share.
    // Six rows at most; the rest, and rows under 0.05% (`0.0%`), are summed
    // in one `other` line, so the lines still add up to the peak.
    let cats = category_lines(p);
    let (shown, mut rest): (Vec<_>, Vec<_>) = cats.rows.iter().partition(|(_, b)| !is_tiny(p, *b));
    let (shown, more) = shown.split_at(shown.len().min(6));
    rest.extend_from_slice(more);
    for (c, b) in shown {
        let _ = writeln!(
            out,
            "  {:<16} {:>11}  {:>6}",
            c.as_str(),
            h(*b),
            p.share_text(*b)
        );
    }
    let mut other: Vec<&str> = rest.iter().map(|(c, _)| c.as_str()).collect();
    let mut other_bytes: u64 = rest.iter().map(|(_, b)| b).sum();
    if let Some((small, bytes)) = &cats.other {
        other.extend(small.iter().map(|c| c.as_str()));
        other_bytes += bytes;
    }
    if !other.is_empty() {
        let _ = writeln!(
            out,
            "  {:<16} {:>11}  {:>6}  ({})",
            "other",
            h(other_bytes),
            share_label(p, other_bytes),
            other.join(", ")
        );
    }
    if let Some(cache) = cats.allocator_cache {
        let _ = writeln!(
            out,
            "  {:<16} {:>11}  (reserved, not allocated)",
            "allocator_cache",
            h(cache)
        );
    }
    for s in &p.top_sites {
        let _ = writeln!(
            out,
            "  top site: {} ({}, {}, {}x)",
            s.site,
            h(s.bytes),
            s.category,
            s.count
        );
    }
    for o in &d.ooms {
        let _ = writeln!(out, "  OOM at event {}: {}", o.event_index, o.verdict);
    }
    super::allocator::text(out, d);
    match &d.plan {
        Some(plan) => write_plan(out, plan),
        None => {
            let _ = writeln!(
                out,
                "  plan: pass --budget SIZE (e.g. --budget 80GiB, or 80% of the peak) to get a cut plan"
            );
        }
    }
}
