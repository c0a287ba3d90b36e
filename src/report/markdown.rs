//! Markdown: the ticket attachment. Renders on code-hosting sites; stays
//! under 200 lines for any input (tables are capped).

use std::fmt::Write;

use super::{human_bytes as h, percent, DeviceReport, Report};
use crate::model::Level;

/// Most rows of the top-sites table.
const MAX_SITES: usize = 10;
/// Most diagnostics listed.
const MAX_DIAGNOSTICS: usize = 12;

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
    if report.devices.is_empty() {
        let _ = writeln!(out, "No device with memory events.\n");
    }
    for d in &report.devices {
        device(&mut out, d);
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

fn device(out: &mut String, d: &DeviceReport) {
    let p = &d.peak;
    let _ = writeln!(out, "## Device `{}`\n", d.device);
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(
        out,
        "| Peak allocated | **{}** ({} bytes) |",
        h(p.allocated_bytes),
        p.allocated_bytes
    );
    let when = match p.ts_us {
        Some(ts) => format!("event {} (t = {ts:.0} µs)", p.event_index),
        None => format!("event {}", p.event_index),
    };
    let _ = writeln!(out, "| At | {when}, phase: {} |", cell(&p.phase));
    if let Some(r) = p.reserved_bytes {
        let _ = writeln!(out, "| Reserved at peak | {} |", h(r));
    }
    if let Some(r) = d.reserved_peak_bytes {
        let _ = writeln!(out, "| Reserved peak | {} |", h(r));
    }
    let _ = writeln!(
        out,
        "| Baseline (before recording) | {} |",
        h(d.baseline_bytes)
    );
    if let Some(c) = d.capacity_bytes {
        let _ = writeln!(out, "| Device memory | {} |", h(c));
    }
    let _ = writeln!(out, "| Events | {} |\n", d.events);

    let whole: u64 = p.by_category.values().sum();
    let _ = writeln!(out, "### Memory at the peak by category\n");
    let _ = writeln!(out, "| Category | Bytes | Share |\n|---|---:|---:|");
    let mut cats: Vec<_> = p.by_category.iter().collect();
    cats.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (c, b) in cats {
        let _ = writeln!(out, "| {} | {} | {} |", c, h(*b), percent(*b, whole));
    }
    let _ = writeln!(out);

    if !p.top_sites.is_empty() {
        let _ = writeln!(out, "### Top sites at the peak\n");
        let _ = writeln!(
            out,
            "| Site | Category | Bytes | Count |\n|---|---|---:|---:|"
        );
        for s in p.top_sites.iter().take(MAX_SITES) {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} |",
                code(&s.site),
                s.category,
                h(s.bytes),
                s.count
            );
        }
        let _ = writeln!(out);
    }

    if !d.ooms.is_empty() {
        let _ = writeln!(out, "### Out-of-memory events\n");
        let _ = writeln!(out, "| Event | Requested | Free on device | Allocated | Reserved | Largest free block |\n|---:|---:|---:|---:|---:|---:|");
        for o in d.ooms.iter().take(5) {
            let opt = |v: Option<u64>| v.map_or("?".to_owned(), h);
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
        for o in d.ooms.iter().take(5) {
            let _ = writeln!(out, "- event {}: {}", o.event_index, cell(&o.verdict));
        }
        let _ = writeln!(out);
    }

    let _ = writeln!(out, "### Cut plan\n");
    match &d.plan {
        Some(plan) => {
            let _ = writeln!(
                out,
                "Budget {} − headroom {} = target **{}**; peak now {}.\n",
                h(plan.budget_bytes),
                h(plan.headroom_bytes),
                h(plan.target_bytes),
                h(plan.peak_before_bytes)
            );
            if !plan.budget_source.is_empty() {
                let _ = writeln!(
                    out,
                    "Budget from {}. Peak = allocated + allocator cache (reserved − allocated), at {}; each step re-simulates the whole timeline.\n",
                    cell(&plan.budget_source),
                    cell(&plan.peak_before_at)
                );
            }
            if !plan.steps.is_empty() {
                let _ = writeln!(out, "| # | Lever | Action | Cost | Saves | Peak after | Peak moves to |\n|---:|---|---|---|---:|---:|---|");
                for (i, s) in plan.steps.iter().enumerate() {
                    let _ = writeln!(
                        out,
                        "| {} | {} | {} | {} | {} | {} | {} |",
                        i + 1,
                        cell(&s.lever),
                        cell(&s.action),
                        cell(&s.cost),
                        h(s.saved_bytes),
                        h(s.peak_after_bytes),
                        cell(&s.peak_moved_to)
                    );
                }
                let _ = writeln!(out);
            }
            let _ = writeln!(
                out,
                "**Verdict: {}** — {}\n",
                plan.verdict.as_str(),
                cell(&plan.reason)
            );
            if let Some(o) = &plan.oom_plan {
                let _ = writeln!(
                    out,
                    "At the OOM (event {}): allocated + the {} request = {}; {}. **{}** — {}\n",
                    o.event_index,
                    h(o.requested_bytes),
                    h(o.demand_bytes),
                    if o.steps.is_empty() {
                        "no cut".to_owned()
                    } else {
                        format!(
                            "cuts {} → {}",
                            o.steps
                                .iter()
                                .map(|s| s.lever.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                            h(o.estimated_peak_bytes)
                        )
                    },
                    o.verdict.as_str(),
                    cell(&o.reason)
                );
            }
        }
        None => {
            let _ = writeln!(
                out,
                "No budget known: run with `--budget SIZE` (e.g. `--budget 80GiB`) for a plan.\n"
            );
        }
    }
}

/// Makes trace text safe inside a table cell.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// Makes trace text safe inside inline code in a table.
fn code(s: &str) -> String {
    s.replace('`', "'").replace('|', "\\|").replace('\n', " ")
}
