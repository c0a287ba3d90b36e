//! `memcut diff` for people and machines: text, Markdown (a ticket
//! comment: the headline first, then the tables), JSON (the
//! [`DiffReport`] contract, with its own `schema_version`) and HTML (the
//! tables, and both timelines on one time-normalised axis).

use std::fmt::Write;

use super::chart::{points, YAxis};
use super::document::{signed, Cell, Column, Table};
use super::html::STYLE;
use super::markdown::{cell, code};
use super::markup::escape;
use super::OutputFormat;
use crate::model::{Category, Level};
use crate::schema::{Change, DeviceDiff, DiffReport, PeakInstant, PlanSummary, SiteChange};
use crate::units::human_bytes as h;

/// Renders a comparison in `format`.
pub fn render(report: &DiffReport, format: OutputFormat) -> String {
    match format {
        OutputFormat::Text => text(report),
        OutputFormat::Md => markdown(report),
        OutputFormat::Json => super::json::to_json(report),
        OutputFormat::Html => html(report),
    }
}

/// `+12.3%`, `−0.7%`, or `new` when there was nothing before.
fn signed_percent(c: &Change) -> String {
    match c.change_percent {
        Some(p) if p < 0.0 => format!("\u{2212}{:.1}%", -p),
        Some(p) => format!("+{p:.1}%"),
        None if c.after == 0 => "+0.0%".to_owned(),
        None => "new".to_owned(),
    }
}

/// `peak 41.10 GiB → 40.80 GiB (−0.7%): activation −6.10 GiB, parameter +0 B`:
/// every category of the allocated peak, the largest change first.
pub fn headline(d: &DeviceDiff) -> String {
    let mut cats: Vec<_> = d
        .by_category
        .iter()
        .filter(|c| c.category != Category::AllocatorCache)
        .collect();
    cats.sort_by(|a, b| {
        b.change_bytes
            .unsigned_abs()
            .cmp(&a.change_bytes.unsigned_abs())
            .then(a.category.cmp(&b.category))
    });
    let parts: Vec<String> = cats
        .iter()
        .map(|c| format!("{} {}", c.category, signed(c.change_bytes)))
        .collect();
    format!(
        "peak {} → {} ({}): {}",
        h(d.peak.before),
        h(d.peak.after),
        signed_percent(&d.peak),
        if parts.is_empty() {
            "no allocations".to_owned()
        } else {
            parts.join(", ")
        }
    )
}

fn device_name(d: &DeviceDiff) -> String {
    match &d.after_device {
        Some(a) => format!("{} → {a}", d.device),
        None => d.device.clone(),
    }
}

/// `event 144 (forward, 5% through)`.
fn instant(p: &PeakInstant) -> String {
    format!(
        "event {} ({}, {:.0}% through)",
        p.event_index,
        p.phase,
        p.fraction * 100.0
    )
}

fn plan(p: Option<&PlanSummary>) -> String {
    match p {
        None => "no budget".to_owned(),
        Some(p) if p.levers.is_empty() => format!(
            "{} (target {})",
            p.verdict.as_str().replace('_', " "),
            h(p.target_bytes)
        ),
        Some(p) => format!(
            "{} (target {}, est. {} after {})",
            p.verdict.as_str().replace('_', " "),
            h(p.target_bytes),
            h(p.estimated_peak_bytes),
            p.levers.join(", ")
        ),
    }
}

/// The check's outcome in one line, if asked for.
fn check_line(r: &DiffReport) -> Option<String> {
    let c = r.check.as_ref()?;
    Some(if c.failed.is_empty() {
        format!(
            "check passed: no peak grew more than {}%",
            c.max_growth_percent
        )
    } else {
        format!(
            "check FAILED: the peak grew more than {}% on {}",
            c.max_growth_percent,
            c.failed.join(", ")
        )
    })
}

fn sites_note(d: &DeviceDiff) -> Option<String> {
    (d.sites_left_out > 0).then(|| format!("… {} more sites changed", d.sites_left_out))
}

fn counts(s: &SiteChange) -> String {
    format!("×{} → ×{}", s.before_count, s.after_count)
}

fn text(r: &DiffReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memcut diff: {} ({}) → {} ({})",
        r.before.path, r.before.format, r.after.path, r.after.format
    );
    for d in &r.devices {
        let _ = writeln!(out, "\n{}: {}", device_name(d), headline(d));
        if let Some(c) = &d.reserved_at_peak {
            let _ = writeln!(
                out,
                "  reserved at the peak {} → {} ({})",
                h(c.before),
                h(c.after),
                signed(c.change_bytes)
            );
        }
        let _ = writeln!(
            out,
            "  peak at {} → {}",
            instant(&d.before_peak),
            instant(&d.after_peak)
        );
        for c in &d.by_category {
            let _ = writeln!(
                out,
                "  {:<16} {:>11} → {:>11}  {}",
                c.category.to_string(),
                h(c.before),
                h(c.after),
                signed(c.change_bytes)
            );
        }
        for s in &d.sites {
            let _ = writeln!(
                out,
                "  {:<11} {:>12}  {}  {} ({}, {})",
                s.status.as_str(),
                signed(s.change_bytes),
                s.category,
                s.site,
                counts(s),
                h(s.after_bytes)
            );
        }
        if let Some(note) = sites_note(d) {
            let _ = writeln!(out, "  {note}");
        }
        if d.before_plan.is_some() || d.after_plan.is_some() {
            let _ = writeln!(
                out,
                "  plan: {} → {}",
                plan(d.before_plan.as_ref()),
                plan(d.after_plan.as_ref())
            );
        }
    }
    for (side, names) in [("before", &r.only_before), ("after", &r.only_after)] {
        if !names.is_empty() {
            let _ = writeln!(out, "\nonly in {side}: {}", names.join(", "));
        }
    }
    for d in warnings(r) {
        let _ = writeln!(out, "warning: {}", d.message);
    }
    if let Some(line) = check_line(r) {
        let _ = writeln!(out, "\n{line}");
    }
    out
}

/// The inputs' warnings: text and Markdown leave the info notes to the
/// JSON and HTML (each input's own report has them too).
fn warnings(r: &DiffReport) -> impl Iterator<Item = &crate::model::Diagnostic> {
    r.diagnostics.iter().filter(|d| d.level == Level::Warning)
}

fn level(l: Level) -> &'static str {
    match l {
        Level::Warning => "warning",
        Level::Info => "info",
    }
}

fn markdown(r: &DiffReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## memcut diff: `{}` → `{}`\n",
        code(&r.before.path),
        code(&r.after.path)
    );
    if let Some(line) = check_line(r) {
        let _ = writeln!(out, "**{line}**\n");
    }
    for d in &r.devices {
        let _ = writeln!(out, "**{}**: {}\n", code(&device_name(d)), headline(d));
        out.push_str("| | Before | After | Change |\n|---|---:|---:|---:|\n");
        let _ = writeln!(
            out,
            "| Peak allocated | {} | {} | {} ({}) |",
            h(d.peak.before),
            h(d.peak.after),
            signed(d.peak.change_bytes),
            signed_percent(&d.peak)
        );
        for (name, c) in [
            ("Reserved at the peak", &d.reserved_at_peak),
            ("Reserved peak", &d.reserved_peak),
        ] {
            if let Some(c) = c {
                let _ = writeln!(
                    out,
                    "| {name} | {} | {} | {} |",
                    h(c.before),
                    h(c.after),
                    signed(c.change_bytes)
                );
            }
        }
        let _ = writeln!(
            out,
            "| Peak at | {} | {} | |",
            cell(&instant(&d.before_peak)),
            cell(&instant(&d.after_peak))
        );
        if d.before_plan.is_some() || d.after_plan.is_some() {
            let _ = writeln!(
                out,
                "| Plan | {} | {} | |",
                cell(&plan(d.before_plan.as_ref())),
                cell(&plan(d.after_plan.as_ref()))
            );
        }
        out.push('\n');
        super::markdown::table(&mut out, &by_category(d), usize::MAX);
        if !d.sites.is_empty() {
            out.push('\n');
            super::markdown::table(&mut out, &sites(d), usize::MAX);
        }
        if let Some(note) = sites_note(d) {
            let _ = writeln!(out, "\n{note}");
        }
        out.push('\n');
    }
    for (side, names) in [("before", &r.only_before), ("after", &r.only_after)] {
        if !names.is_empty() {
            let _ = writeln!(out, "Only in {side}: {}\n", code(&names.join(", ")));
        }
    }
    for d in warnings(r) {
        let _ = writeln!(out, "- warning: {}", code(&d.message));
    }
    out
}

/// Each category's bytes at the two peaks.
fn by_category(d: &DeviceDiff) -> Table {
    Table {
        title: String::new(),
        columns: vec![
            Column::Text("Category"),
            Column::Number("Before"),
            Column::Number("After"),
            Column::Number("Change"),
        ],
        rows: d
            .by_category
            .iter()
            .map(|c| {
                vec![
                    Cell::Plain(c.category.to_string()),
                    Cell::Plain(h(c.before)),
                    Cell::Plain(h(c.after)),
                    Cell::Change(c.change_bytes),
                ]
            })
            .collect(),
    }
}

/// The sites whose bytes at the peak changed.
fn sites(d: &DeviceDiff) -> Table {
    Table {
        title: "Sites that changed".to_owned(),
        columns: vec![
            Column::Text("Site"),
            Column::Text("Category"),
            Column::Text("Status"),
            Column::Number("Before"),
            Column::Number("After"),
            Column::Number("Change"),
        ],
        rows: d
            .sites
            .iter()
            .map(|s| {
                vec![
                    Cell::Code(s.site.clone()),
                    Cell::Plain(s.category.to_string()),
                    Cell::Plain(s.status.as_str().to_owned()),
                    Cell::Plain(format!("{} ×{}", h(s.before_bytes), s.before_count)),
                    Cell::Plain(format!("{} ×{}", h(s.after_bytes), s.after_count)),
                    Cell::Change(s.change_bytes),
                ]
            })
            .collect(),
    }
}

fn html(r: &DiffReport) -> String {
    let mut out = String::with_capacity(32 * 1024);
    let (b, a) = (escape(&r.before.path), escape(&r.after.path));
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>memcut diff: {b} → {a}</title>\n<style>{STYLE}\n.grew{{color:#b00020}}.shrank{{color:#1b7f3b}}</style>\n</head>\n<body>\n\
         <header><h1>memcut diff</h1><p class=\"source\">before <code>{b}</code> ({}) → after <code>{a}</code> ({}) · memcut {}</p></header>\n",
        escape(&r.before.format),
        escape(&r.after.format),
        escape(&r.tool.version)
    );
    if let Some(line) = check_line(r) {
        let _ = writeln!(out, "<p class=\"verdict\">{}</p>", escape(&line));
    }
    for d in &r.devices {
        let _ = writeln!(
            out,
            "<section>\n<h2>{}</h2>\n<p>{}</p>",
            escape(&device_name(d)),
            escape(&headline(d))
        );
        chart(&mut out, d);
        super::html::table(&mut out, &by_category(d));
        if !d.sites.is_empty() {
            let t = sites(d);
            let _ = writeln!(out, "<h3>{}</h3>", t.title);
            super::html::table(&mut out, &t);
        }
        if let Some(note) = sites_note(d) {
            let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(&note));
        }
        let _ = writeln!(
            out,
            "<p>Peak at {} → {}. Plan: {} → {}.</p>\n</section>",
            escape(&instant(&d.before_peak)),
            escape(&instant(&d.after_peak)),
            escape(&plan(d.before_plan.as_ref())),
            escape(&plan(d.after_plan.as_ref()))
        );
    }
    if !r.diagnostics.is_empty() {
        out.push_str("<section>\n<h2>Diagnostics</h2>\n<ul>\n");
        for d in &r.diagnostics {
            let _ = writeln!(
                out,
                "<li><b>{}</b>: {}</li>",
                level(d.level),
                escape(&d.message)
            );
        }
        out.push_str("</ul>\n</section>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

// Geometry of the comparison chart (SVG user units).
const W: f64 = 1000.0;
const H: f64 = 300.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 40.0;

/// Allocated memory of both runs over 0–100% of each recording: before
/// grey, after blue, each peak marked.
fn chart(out: &mut String, d: &DeviceDiff) {
    let (b, a) = (&d.timeline.before, &d.timeline.after);
    let y_top = b
        .allocated
        .iter()
        .chain(&a.allocated)
        .copied()
        .max()
        .unwrap_or(0);
    if b.x.len() < 2 || a.x.len() < 2 || y_top == 0 {
        out.push_str("<p class=\"note\">No allocation history to plot in one of the inputs.</p>\n");
        return;
    }
    let y_axis = YAxis::new(y_top, H - BOTTOM, TOP);
    let sx = |x: f64| LEFT + x * (W - LEFT - RIGHT);
    let sy = |y: f64| y_axis.px(y);
    let _ = writeln!(
        out,
        "<figure>\n<svg viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"Allocated memory on {} before and after\">",
        escape(&d.device)
    );
    y_axis.draw_grid(out);
    for k in 0..=4 {
        let x = sx(k as f64 / 4.0);
        let _ = writeln!(
            out,
            "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}%</text>",
            H - BOTTOM + 16.0,
            k * 25
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">share of each recording ({})</text>",
        sx(0.5),
        H - 6.0,
        if b.x_unit == a.x_unit && b.x_unit == "time_us" {
            "by time"
        } else {
            "by time or event index"
        }
    );
    for (series, colour, name) in [(b, "#9aa0a6", "before"), (a, "#1f5fbf", "after")] {
        let pts: Vec<(f64, f64)> = series
            .x
            .iter()
            .zip(&series.allocated)
            .map(|(x, y)| (sx(*x), sy(*y as f64)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.6\"><title>{name}</title></polyline><line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\" stroke=\"{colour}\" stroke-dasharray=\"3 3\"><title>{name}'s peak</title></line>",
            points(&pts),
            H - BOTTOM,
            x = sx(series.peak_x)
        );
    }
    out.push_str("</svg>\n<figcaption><span><span class=\"ln\" style=\"border-top-color:#9aa0a6\"></span>before</span><span><span class=\"ln\" style=\"border-top-color:#1f5fbf\"></span>after</span><span>dashed: each peak</span></figcaption>\n</figure>\n");
}
