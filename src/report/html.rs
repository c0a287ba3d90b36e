//! HTML: one self-contained file that opens offline in any browser. No
//! script, no external fonts, styles or images; a Content-Security-Policy
//! forbids fetching anything. Per device: the facts, an inline SVG
//! stacked-area chart of memory by category over time ([`super::chart`]:
//! peak and OOMs marked, reserved memory as a dashed line), then the
//! Markdown report's tables as HTML tables. Every string that comes from the trace goes through
//! [`escape`].

use std::fmt::Write;

use super::document::{self, Cell, Column, DeviceDocument, Table};
use super::markup::{colour, escape};
use super::{major_devices, minor_devices_line, not_proposed};
use crate::model::Level;
use crate::schema::{DeviceReport, Plan, PlanStep, Report};
use crate::units::human_bytes as h;

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
    let t = document::overview(devices);
    let _ = writeln!(out, "<section>\n<h2>{}</h2>", t.title);
    table(out, &t);
    out.push_str("</section>\n");
}

fn device(out: &mut String, d: &DeviceReport, n: usize) {
    let doc = DeviceDocument::new(d);
    let _ = writeln!(
        out,
        "<section class=\"device\">\n<h2>Device <code>{}</code></h2>",
        escape(&d.device)
    );
    for l in &doc.lists {
        headed_list(out, l.kind, l.label, &l.headline, &l.items);
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
    for f in &doc.facts {
        let value: String = f.value.iter().map(|c| spell(c, false).1).collect();
        let _ = writeln!(out, "<tr><th>{}</th><td>{value}</td></tr>", f.name);
    }
    out.push_str("</tbody>\n</table>\n");
    if let Some(note) = &doc.at_note {
        let _ = writeln!(out, "<p class=\"at\">{}</p>", escape(note));
    }

    super::chart::render(out, d);
    super::viewer::html(out, d, n);

    headed_table(out, &doc.categories);
    if let Some(t) = &doc.before_recording {
        headed_table(out, t);
    }
    if let Some(t) = &doc.top_sites {
        headed_table(out, t);
        super::stacks::html(out, d);
    }
    if let Some(t) = &doc.ooms {
        headed_table(out, t);
    }
    super::allocator::html(out, d);
    out.push_str("</section>\n");
}

/// `<h3>TITLE</h3>` and the table.
fn headed_table(out: &mut String, t: &Table) {
    let _ = writeln!(out, "<h3>{}</h3>", escape(&t.title));
    table(out, t);
}

/// A table; every text escaped here, numbers right-aligned.
pub(super) fn table(out: &mut String, t: &Table) {
    out.push_str("<table>\n<thead><tr>");
    for c in &t.columns {
        let class = if matches!(c, Column::Number(_)) {
            " class=\"num\""
        } else {
            ""
        };
        let _ = write!(out, "<th{class}>{}</th>", escape(c.name()));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &t.rows {
        out.push_str("<tr>");
        for (c, column) in row.iter().zip(&t.columns) {
            let (attributes, content) = spell(c, matches!(column, Column::Number(_)));
            let _ = write!(out, "<td{attributes}>{content}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

/// A cell as HTML: its `<td>` attributes (in a column of numbers or not)
/// and its content, every text escaped.
fn spell(c: &Cell, number: bool) -> (String, String) {
    let num = if number { " class=\"num\"" } else { "" };
    match c {
        Cell::Plain(s) | Cell::Text(s) => (num.to_owned(), escape(s)),
        Cell::Code(s) => (num.to_owned(), format!("<code>{}</code>", escape(s))),
        Cell::Strong(s) => (num.to_owned(), format!("<b>{}</b>", escape(s))),
        Cell::Swatch(category, s) => (
            " class=\"cat\"".to_owned(),
            format!(
                "<span class=\"sw\" style=\"background:{}\"></span>{}",
                colour(*category),
                escape(s)
            ),
        ),
        Cell::Bytes(b) => (format!(" class=\"num\" title=\"{b} bytes\""), h(*b)),
        Cell::Change(b) => (
            format!(" class=\"num {}\"", document::direction(*b)),
            document::signed(*b),
        ),
        Cell::Bar(share, category) => (
            " class=\"bar\"".to_owned(),
            format!(
                "<span style=\"width:{share:.1}%;background:{}\"></span>",
                colour(*category)
            ),
        ),
        Cell::Empty => (String::new(), String::new()),
    }
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
            table(out, &document::plan_steps(steps, plan.target_bytes));
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
