//! Text: what a person reads in ten seconds on a terminal.

use std::fmt::Write;

use super::{
    attribution_line, before_recording_line, category_lines, is_tiny, major_devices,
    minor_devices_line, phase_label, share_label,
};
use crate::schema::{DeviceReport, Report};
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

fn device(out: &mut String, d: &DeviceReport) {
    let p = &d.peak;
    let _ = write!(
        out,
        "\n{}: peak {} allocated at event {} ({})",
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
    match &d.plan {
        Some(plan) => {
            let _ = writeln!(
                out,
                "  plan: {} for target {} (budget {} - headroom {}): {}",
                plan.verdict.as_str(),
                h(plan.target_bytes),
                h(plan.budget_bytes),
                h(plan.headroom_bytes),
                plan.reason
            );
            for (i, s) in plan.steps.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "    {}. {} -> peak {} (saves {}){}",
                    i + 1,
                    s.lever,
                    h(s.peak_after_bytes),
                    h(s.saved_bytes),
                    if s.peak_moved {
                        format!(", peak moves to {}", phase_label(&s.peak_moved_to))
                    } else {
                        String::new()
                    }
                );
            }
            if let Some(o) = &plan.oom_plan {
                let _ = writeln!(
                    out,
                    "  at the OOM (event {}): {}: {}",
                    o.event_index,
                    o.verdict.as_str(),
                    o.reason
                );
            }
        }
        None => {
            let _ = writeln!(
                out,
                "  plan: pass --budget SIZE (e.g. --budget 80GiB) to get a cut plan"
            );
        }
    }
}
