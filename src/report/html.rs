//! HTML: one self-contained file (no network) with an inline SVG stacked-area
//! chart of memory by category over time, then the Markdown report's tables.

use std::fmt::Write;

use super::{human_bytes as h, markdown, DeviceReport, Report};
use crate::model::Category;

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>memcut: {}</title>\n<style>{}</style></head><body>\n",
        escape(&report.source.path),
        STYLE
    );
    let _ = writeln!(
        out,
        "<h1>memcut report: <code>{}</code></h1>",
        escape(&report.source.path)
    );
    for d in &report.devices {
        let _ = writeln!(out, "<h2>Device <code>{}</code></h2>", escape(&d.device));
        chart(&mut out, d);
    }
    let _ = writeln!(
        out,
        "<pre class=\"md\">{}</pre>",
        escape(&markdown::render(report))
    );
    out.push_str("</body></html>\n");
    out
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1100px}pre.md{white-space:pre-wrap;background:#f6f6f6;padding:1em}svg text{font-size:11px}";

/// Stable colour per category (legend and areas).
pub fn colour(c: Category) -> &'static str {
    match c {
        Category::Parameter => "#4e79a7",
        Category::Gradient => "#f28e2b",
        Category::OptimizerState => "#e15759",
        Category::Activation => "#76b7b2",
        Category::AutogradDetail => "#59a14f",
        Category::Temporary => "#edc948",
        Category::Input => "#b07aa1",
        Category::KvCache => "#ff9da7",
        Category::AllocatorCache => "#9c755f",
        Category::Unknown => "#bab0ac",
    }
}

fn chart(out: &mut String, d: &DeviceReport) {
    let t = &d.timeline;
    if t.x.is_empty() {
        return;
    }
    let (w, ht, left, bottom) = (1000.0, 320.0, 70.0, 30.0);
    let x_min = t.x.first().copied().unwrap_or(0.0);
    let x_max = t.x.last().copied().unwrap_or(1.0).max(x_min + 1.0);
    let totals: Vec<u64> = (0..t.x.len())
        .map(|i| t.series.values().map(|s| s[i]).sum())
        .collect();
    let y_max = totals
        .iter()
        .copied()
        .chain(t.reserved.iter().flatten().copied())
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let sx = |x: f64| left + (x - x_min) / (x_max - x_min) * (w - left - 10.0);
    let sy = |y: f64| ht - bottom - y / y_max * (ht - bottom - 10.0);
    let _ = writeln!(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{ht}\" viewBox=\"0 0 {w} {ht}\" role=\"img\">");
    let mut below = vec![0u64; t.x.len()];
    for (c, values) in &t.series {
        let mut pts = String::new();
        for (i, x) in t.x.iter().enumerate() {
            let _ = write!(
                pts,
                "{:.1},{:.1} ",
                sx(*x),
                sy((below[i] + values[i]) as f64)
            );
        }
        for i in (0..t.x.len()).rev() {
            let _ = write!(pts, "{:.1},{:.1} ", sx(t.x[i]), sy(below[i] as f64));
        }
        let _ = writeln!(
            out,
            "<polygon points=\"{}\" fill=\"{}\"><title>{}</title></polygon>",
            pts.trim_end(),
            colour(*c),
            c
        );
        for (b, v) in below.iter_mut().zip(values) {
            *b += v;
        }
    }
    if let Some(r) = &t.reserved {
        let pts: Vec<String> =
            t.x.iter()
                .zip(r)
                .map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y as f64)))
                .collect();
        let _ = writeln!(out, "<polyline points=\"{}\" fill=\"none\" stroke=\"#333\" stroke-dasharray=\"4 2\"><title>reserved</title></polyline>", pts.join(" "));
    }
    let px = sx(t.peak_x);
    let _ = writeln!(out, "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"10\" y2=\"{:.1}\" stroke=\"#000\"/><text x=\"{:.1}\" y=\"20\">peak {}</text>", ht - bottom, px + 3.0, h(d.peak.allocated_bytes));
    for ox in &t.oom_x {
        let x = sx(*ox);
        let _ = writeln!(out, "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"10\" y2=\"{:.1}\" stroke=\"#d00\" stroke-width=\"2\"/><text x=\"{:.1}\" y=\"34\" fill=\"#d00\">OOM</text>", ht - bottom, x + 3.0);
    }
    let _ = writeln!(
        out,
        "<text x=\"2\" y=\"14\">{}</text><text x=\"{left}\" y=\"{}\">{}</text>",
        h(y_max as u64),
        ht - 8.0,
        escape(&t.x_unit)
    );
    out.push_str("</svg>\n<p>");
    for c in t.series.keys() {
        let _ = write!(
            out,
            "<span style=\"background:{};padding:0 .6em\">&nbsp;</span> {} &nbsp; ",
            colour(*c),
            c
        );
    }
    out.push_str("</p>\n");
}

/// Escapes text for HTML element content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
