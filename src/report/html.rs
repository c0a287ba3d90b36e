//! HTML: one self-contained file that opens offline in any browser. No
//! script, no external fonts, styles or images; a Content-Security-Policy
//! forbids fetching anything. Per device: the facts, an inline SVG
//! stacked-area chart of memory by category over time ([`super::chart`]:
//! peak and OOMs marked, reserved memory as a dashed line), then the
//! Markdown report's tables as HTML tables. Every string that comes from the trace goes through
//! [`escape`].

use std::fmt::Write;

use super::markup::{colour, escape};
use super::{
    attribution_line, before_recording_row, category_lines, major_devices, minor_devices_line,
    not_proposed, overview_row, peak_instant, phase_label, plan_step_row, share_label,
    BEFORE_RECORDING_COLUMNS, OVERVIEW_COLUMNS, PLAN_STEP_COLUMNS,
};
use crate::model::{Category, Level};
use crate::schema::{DeviceReport, Plan, PlanStep, Report};
use crate::units::{human_bytes as h, percent};

pub fn render(report: &Report) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let path = escape(&report.source.path);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>memcut: {path}</title>\n<style>{STYLE}\n{}</style>\n</head>\n<body>\n",
        super::viewer::STYLE
    );
    let _ = writeln!(
        out,
        "<header><h1>memcut report</h1><p class=\"source\"><code>{path}</code> · {} · {} · memcut {}</p></header>",
        escape(&report.source.format),
        h(report.source.size_bytes),
        escape(&report.tool.version)
    );
    let (devices, minor) = major_devices(report);
    if devices.is_empty() {
        out.push_str("<p>No device with memory events.</p>\n");
    }
    if devices.len() > 1 {
        overview(&mut out, &devices);
    }
    for (n, d) in devices.iter().enumerate() {
        device(&mut out, d, n);
    }
    if let Some(line) = minor_devices_line(&minor) {
        let _ = writeln!(out, "<p class=\"note\">{}.</p>", escape(&line));
    }
    if !report.diagnostics.is_empty() {
        out.push_str("<section>\n<h2>Diagnostics</h2>\n<ul class=\"diagnostics\">\n");
        for d in &report.diagnostics {
            let (class, tag) = match d.level {
                Level::Warning => ("warning", "warning"),
                Level::Info => ("info", "info"),
            };
            let _ = writeln!(
                out,
                "<li class=\"{class}\"><b>{tag}</b>: {}</li>",
                escape(&d.message)
            );
        }
        out.push_str("</ul>\n</section>\n");
    }
    if out.contains("<section class=\"viewer\"") {
        let _ = writeln!(out, "<script>{}</script>", super::viewer::SCRIPT);
    }
    out.push_str("</body>\n</html>\n");
    out
}

pub(crate) const STYLE: &str = "\
:root{color-scheme:light;--fg:#1d1d1f;--muted:#5f6368;--line:#d9dce1;--zebra:#f6f7f9}
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;color:var(--fg);margin:2rem auto;max-width:1080px;padding:0 1rem;line-height:1.45}
h1{margin:0 0 .2rem;font-size:1.6rem}h2{margin-top:2.2rem;border-bottom:2px solid var(--line);padding-bottom:.2rem}h3{margin:1.6rem 0 .5rem;font-size:1.05rem}
.source{color:var(--muted);margin:0}code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.9em;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:.4rem 0;font-size:.92rem}th,td{border-bottom:1px solid var(--line);padding:.3rem .6rem;text-align:left;vertical-align:top}
th{background:var(--zebra);font-weight:600}tbody tr:nth-child(even){background:#fbfbfc}td.cat{white-space:nowrap}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
table.facts th{background:none;font-weight:normal;color:var(--muted)}table.facts td{font-weight:500}
.sw{display:inline-block;width:.9em;height:.9em;border-radius:2px;vertical-align:-.1em;margin-right:.4em}
.bar{width:140px}.bar span{display:block;height:.7em;background:#8aa4c8;border-radius:2px}
figure{margin:1rem 0}svg{width:100%;height:auto;display:block}svg text{font:11px system-ui,sans-serif;fill:#333}
svg .grid{stroke:#e6e8eb}svg .axis{stroke:#888}svg .peak{stroke:#000;stroke-width:1.2}svg line.oom{stroke:#d00;stroke-width:1.5}svg text.oom{fill:#d00;font-weight:600}
svg .reserved{fill:none;stroke:#222;stroke-width:1.3;stroke-dasharray:5 3}
svg .what-if{fill:none;stroke:#0a7d2c;stroke-width:2}
svg rect.gap{fill:#eef0f3}svg .brk{stroke:#888;stroke-width:1.2;fill:none}svg text.gap{font-size:10px;fill:#5f6368}
figcaption{display:flex;flex-wrap:wrap;gap:.3rem 1.1rem;font-size:.88rem;margin-top:.4rem}
.ln{display:inline-block;width:1.6em;height:0;vertical-align:.25em;margin-right:.4em;border-top:2px solid #000}.ln.reserved{border-top:2px dashed #222}.ln.oom{border-top-color:#d00}
.verdict{font-weight:600}.does_not_fit{color:#b00020}.fits_after_cuts{color:#a05a00}.fits{color:#1b7f3b}
li.warning b{color:#b00020}.note{color:var(--muted)}
details.stack{margin:.2rem 0}details.stack summary{cursor:pointer}ol.frames{margin:.2rem 0 .6rem;padding-left:2.4rem;font-size:.85rem}ol.frames li.internal{color:#9aa0a6}
svg.segments text{font-size:10px}svg .seg{stroke:#c4c7cc;stroke-width:.5}.sw.hatch{background:repeating-linear-gradient(45deg,#fff 0 2px,#9aa0a6 2px 4px);outline:1px solid #c4c7cc}
figcaption.title{font-weight:600;margin:0 0 .3rem}.at{background:#fff4e5;border-left:4px solid #a05a00;padding:.4rem .7rem}
.plan table{width:100%}.plan td:nth-child(3){overflow-wrap:anywhere}.plan td:nth-child(4),.plan th:nth-child(4){min-width:7.5em}
@media screen{html.viewing figure.chart{display:none}}
@media print{body{margin:0;max-width:none}h2{break-before:auto}figure,table{break-inside:avoid}}";

fn overview(out: &mut String, devices: &[&DeviceReport]) {
    out.push_str("<section>\n<h2>Devices</h2>\n");
    numeric_table(
        out,
        &OVERVIEW_COLUMNS,
        &[1, 2, 5],
        Some(0),
        devices.iter().map(|d| overview_row(d)),
    );
    out.push_str("</section>\n");
}

/// A table of plain-text cells, all escaped here; `numeric` columns are
/// right-aligned and the `code` column is set in monospace.
fn numeric_table<const N: usize>(
    out: &mut String,
    columns: &[&str; N],
    numeric: &[usize],
    code: Option<usize>,
    rows: impl Iterator<Item = [String; N]>,
) {
    let class = |i: usize| {
        if numeric.contains(&i) {
            " class=\"num\""
        } else {
            ""
        }
    };
    out.push_str("<table>\n<thead><tr>");
    for (i, name) in columns.iter().enumerate() {
        let _ = write!(out, "<th{}>{}</th>", class(i), escape(name));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for cells in rows {
        out.push_str("<tr>");
        for (i, c) in cells.iter().enumerate() {
            if code == Some(i) {
                let _ = write!(out, "<td{}><code>{}</code></td>", class(i), escape(c));
            } else {
                let _ = write!(out, "<td{}>{}</td>", class(i), escape(c));
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

fn device(out: &mut String, d: &DeviceReport, n: usize) {
    let p = &d.peak;
    let _ = writeln!(
        out,
        "<section class=\"device\">\n<h2>Device <code>{}</code></h2>",
        escape(&d.device)
    );
    for f in &d.findings {
        headed_list(
            out,
            "finding",
            "Finding",
            &super::finding_line(f),
            &f.evidence,
        );
    }
    if let Some(n) = &d.next_step {
        let line = super::next_step_line(d, n);
        headed_list(out, "finding", "Next step", &line, &n.evidence);
    }
    if let Some(w) = &d.what_if {
        let line = super::what_if_line(d, w);
        headed_list(out, "what-if", "What if", &line, &w.because);
    }
    // What a person reads first: the findings, the what-if and the plan,
    // then the facts, the timeline and the tables behind them.
    out.push_str("<div class=\"plan\">\n<h3>Cut plan</h3>\n");
    match &d.plan {
        Some(plan) => write_plan(out, plan),
        None => out.push_str(
            "<p class=\"note\">No budget known: run with <code>--budget SIZE</code> (e.g. <code>--budget 80GiB</code>, or <code>--budget 80%</code> of the peak) for a plan.</p>\n",
        ),
    }
    out.push_str("</div>\n");
    out.push_str("<table class=\"facts\">\n<tbody>\n");
    fact(
        out,
        "Peak allocated",
        &format!(
            "<b>{}</b> ({} bytes)",
            h(p.allocated_bytes),
            p.allocated_bytes
        ),
    );
    fact(
        out,
        "At",
        &format!(
            "{}, phase: {}",
            escape(&peak_instant(d)),
            escape(&phase_label(&p.phase))
        ),
    );
    match p.reserved_bytes {
        Some(r) => fact(out, "Reserved at peak", &format!("{} ({r} bytes)", h(r))),
        None => fact(out, "Reserved at peak", "unknown"),
    }
    if let Some(r) = d.reserved_peak_bytes {
        let at = d
            .reserved_peak_event_index
            .map_or(String::new(), |e| format!(" at event {e}"));
        fact(out, "Reserved peak", &format!("{}{at}", h(r)));
    }
    fact(
        out,
        "Baseline (allocated before recording)",
        &h(d.baseline_bytes),
    );
    fact(out, "Categories at the peak", &escape(&attribution_line(p)));
    if let Some(c) = d.capacity_bytes {
        fact(
            out,
            "Device memory",
            &format!("{} (peak is {})", h(c), percent(p.allocated_bytes, c)),
        );
    }
    fact(out, "Events", &d.events.to_string());
    out.push_str("</tbody>\n</table>\n");
    if let Some(note) = super::at_note(d) {
        let _ = writeln!(out, "<p class=\"at\">{}</p>", escape(&note));
    }

    super::chart::render(out, d);
    super::viewer::html(out, d, n);

    let cats = category_lines(p);
    out.push_str("<h3>Memory at the peak by category</h3>\n<table>\n<thead><tr><th>Category</th><th class=\"num\">Bytes</th><th class=\"num\">Share of peak</th><th></th></tr></thead>\n<tbody>\n");
    for (c, b) in &cats.rows {
        let share = p.share(*b);
        let _ = writeln!(
            out,
            "<tr><td class=\"cat\"><span class=\"sw\" style=\"background:{}\"></span>{}</td><td class=\"num\" title=\"{b} bytes\">{}</td><td class=\"num\">{}</td><td class=\"bar\"><span style=\"width:{:.1}%;background:{}\"></span></td></tr>",
            colour(*c),
            c,
            h(*b),
            share_label(p, *b),
            share.min(100.0),
            colour(*c)
        );
    }
    if let Some((small, bytes)) = &cats.other {
        let names: Vec<&str> = small.iter().map(|c| c.as_str()).collect();
        let _ = writeln!(
            out,
            "<tr><td class=\"cat\">other: {}</td><td class=\"num\" title=\"{bytes} bytes\">{}</td><td class=\"num\">{}</td><td></td></tr>",
            names.join(", "),
            h(*bytes),
            share_label(p, *bytes)
        );
    }
    let _ = writeln!(
        out,
        "<tr><td><b>allocated (peak)</b></td><td class=\"num\"><b>{}</b></td><td class=\"num\">100%</td><td></td></tr>",
        h(p.allocated_bytes)
    );
    if let Some(cache) = cats.allocator_cache {
        let _ = writeln!(
            out,
            "<tr><td><span class=\"sw\" style=\"background:{}\"></span>allocator_cache (reserved, not allocated)</td><td class=\"num\">{}</td><td></td><td></td></tr>",
            colour(Category::AllocatorCache),
            h(cache)
        );
    }
    out.push_str("</tbody>\n</table>\n");

    if !d.before_recording.is_empty() {
        out.push_str("<h3>Memory that existed before recording</h3>\n");
        numeric_table(
            out,
            &BEFORE_RECORDING_COLUMNS,
            &[1],
            None,
            d.before_recording.iter().map(before_recording_row),
        );
    }

    if !p.top_sites.is_empty() {
        out.push_str("<h3>Top sites at the peak</h3>\n<table>\n<thead><tr><th>Site (operator < nearest program line)</th><th>Category</th><th class=\"num\">Bytes</th><th class=\"num\">Share</th><th class=\"num\">Count</th></tr></thead>\n<tbody>\n");
        for s in &p.top_sites {
            let _ = writeln!(
                out,
                "<tr><td><code>{}</code></td><td class=\"cat\"><span class=\"sw\" style=\"background:{}\"></span>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                escape(&s.site),
                colour(s.category),
                s.category,
                h(s.bytes),
                share_label(p, s.bytes),
                s.count
            );
        }
        out.push_str("</tbody>\n</table>\n");
        super::stacks::html(out, d);
    }

    if !d.ooms.is_empty() {
        let _ = writeln!(
            out,
            "<h3>Out-of-memory events ({})</h3>\n<table>\n<thead><tr><th class=\"num\">Event</th><th class=\"num\">Requested</th><th class=\"num\">Free on device</th><th class=\"num\">Allocated</th><th class=\"num\">Reserved</th><th class=\"num\">Largest free block</th><th>Finding</th></tr></thead>\n<tbody>",
            d.ooms.len()
        );
        let opt = |v: Option<u64>| v.map_or("?".to_owned(), h);
        for o in &d.ooms {
            let _ = writeln!(
                out,
                "<tr><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                o.event_index,
                h(o.requested_bytes),
                opt(o.device_free_bytes),
                h(o.allocated_bytes),
                opt(o.reserved_bytes),
                opt(o.largest_free_block_bytes),
                escape(&o.verdict)
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }

    super::allocator::html(out, d);
    out.push_str("</section>\n");
}

/// The cut plan: the failed allocation's first when there is one, then the
/// replayed peak's; the evidence; the levers not proposed.
fn write_plan(out: &mut String, plan: &Plan) {
    let _ = writeln!(
        out,
        "<p>Budget {} − headroom {} = target <b>{}</b>; peak now {}. Budget from {}; each step lowers the peak by at least {} (1%).</p>",
        h(plan.budget_bytes),
        h(plan.headroom_bytes),
        h(plan.target_bytes),
        h(plan.peak_before_bytes),
        escape(&plan.budget_source),
        h(plan.min_step_bytes)
    );
    let steps = |out: &mut String, steps: &[PlanStep]| {
        if !steps.is_empty() {
            numeric_table(
                out,
                &PLAN_STEP_COLUMNS,
                &[0, 4, 5],
                None,
                steps
                    .iter()
                    .enumerate()
                    .map(|(i, s)| plan_step_row(i, s, plan.target_bytes)),
            );
        }
    };
    let verdict = |out: &mut String, v: &str, reason: &str| {
        let _ = writeln!(
            out,
            "<p class=\"verdict {v}\">Verdict: {v} — {}</p>",
            escape(reason)
        );
    };
    if let Some(o) = &plan.oom_plan {
        let _ = writeln!(out, "<h4>At the OOM (event {})</h4>", o.event_index);
        steps(out, &o.steps);
        verdict(out, o.verdict.as_str(), &o.reason);
        out.push_str("<h4>At the replayed peak</h4>\n");
    }
    steps(out, &plan.steps);
    verdict(out, plan.verdict.as_str(), &plan.reason);
    if let Some(why) = &plan.estimate_reason {
        let _ = writeln!(out, "<p class=\"note\">Estimate: {}</p>", escape(why));
    }
    if !plan.facts.is_empty() {
        out.push_str("<table>\n<thead><tr><th>Evidence</th><th>Value</th><th>Because</th></tr></thead>\n<tbody>\n");
        for f in &plan.facts {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&f.fact),
                escape(&f.value),
                escape(&f.because)
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
    let groups = not_proposed(plan);
    if !groups.is_empty() {
        out.push_str("<p>Not proposed:</p>\n<ul>\n");
        for (reason, levers) in groups {
            let _ = writeln!(
                out,
                "<li><code>{}</code>: {}</li>",
                escape(&levers.join(", ")),
                escape(&reason)
            );
        }
        out.push_str("</ul>\n");
    }
}

/// One row of the facts table; `value` is HTML already.
fn fact(out: &mut String, name: &str, value: &str) {
    let _ = writeln!(out, "<tr><th>{name}</th><td>{value}</td></tr>");
}

/// A headed list: `<div class="CLASS"><p><b>LABEL</b> HEADLINE</p>` and
/// one item per line (a finding and its evidence, the next step, a what-if).
fn headed_list(out: &mut String, class: &str, label: &str, headline: &str, items: &[String]) {
    let _ = writeln!(
        out,
        "<div class=\"{class}\"><p><b>{label}</b> {}</p>\n<ul>",
        escape(headline)
    );
    for item in items {
        let _ = writeln!(out, "<li>{}</li>", escape(item));
    }
    out.push_str("</ul></div>\n");
}
