//! The allocator's view (`devices[].segments`) for people: one line in
//! text, a table of the instants in Markdown and HTML, and in HTML a
//! segment map: one bar per segment, its blocks as boxes coloured by
//! category, free space hatched.

use std::fmt::Write;

use super::markup::{colour, escape};
use crate::model::Category;
use crate::schema::{alike, BlockUse, DeviceReport, SegmentMap, SegmentState};
use crate::units::human_bytes as h;

/// Segments drawn per map; the rest are summed up in a line.
pub const MAX_BARS: usize = crate::schema::SegmentFrames::MAX_BARS;

/// What the state says in one sentence: segments, reserved, and how much
/// of the free memory cannot serve the request it is measured against.
fn summary(s: &SegmentState) -> String {
    let mut line = format!(
        "{} segment{}, {} reserved = {} allocated + {} free",
        s.segment_count,
        if s.segment_count == 1 { "" } else { "s" },
        h(s.reserved_bytes),
        h(s.allocated_bytes),
        h(s.inactive_bytes)
    );
    if s.pending_free_bytes > 0 {
        let _ = write!(line, " + {} pending free", h(s.pending_free_bytes));
    }
    if s.inactive_bytes > 0 {
        let _ = write!(
            line,
            "; largest free block {}; {} ({:.0}%) of the free memory is in blocks smaller than {} ({})",
            h(s.largest_free_block_bytes),
            h(s.fragmentation_bytes),
            s.fragmentation_percent(),
            h(s.request_bytes),
            request_name(s)
        );
    }
    if s.unplaced_bytes > 0 {
        let _ = write!(
            line,
            "; {} of allocations in no known segment",
            h(s.unplaced_bytes)
        );
    }
    line
}

fn request_name(s: &SegmentState) -> &'static str {
    if s.label.split(", ").any(|l| l.starts_with("oom ")) {
        "the failed request"
    } else {
        "the largest request"
    }
}

fn exactness(s: &SegmentState) -> &'static str {
    if s.exact {
        "as dumped"
    } else {
        "estimate, rebuilt from the history"
    }
}

/// "at" and the instant's label, once (`at peak`, `at oom 0`, and the
/// label of `--at 50`, which is `at 50` already).
fn at(label: &str) -> String {
    if label.starts_with("at ") {
        label.to_owned()
    } else {
        format!("at {label}")
    }
}

/// One line: the allocator at the reported instant.
pub fn text(out: &mut String, d: &DeviceReport) {
    let Some(s) = d.segments.as_ref().and_then(|v| v.instants.first()) else {
        return;
    };
    let _ = writeln!(
        out,
        "  allocator {} ({}): {}",
        at(&s.label),
        exactness(s),
        summary(s)
    );
}

/// A table of the instants.
pub fn markdown(out: &mut String, d: &DeviceReport) {
    let Some(view) = &d.segments else { return };
    let _ = writeln!(out, "### Allocator segments\n");
    let _ = writeln!(out, "| Instant | Event | Segments | Reserved | Allocated | Free | Largest free | Free < request | Request |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in &view.instants {
        let _ = writeln!(
            out,
            "| {}{} | {} | {} | {} | {} | {} | {} | {} ({:.0}%) | {} |",
            s.label,
            if s.exact { "" } else { " (estimate)" },
            s.event_index.map_or("-".to_owned(), |e| e.to_string()),
            s.segment_count,
            h(s.reserved_bytes),
            h(s.allocated_bytes + s.pending_free_bytes),
            h(s.inactive_bytes),
            h(s.largest_free_block_bytes),
            h(s.fragmentation_bytes),
            s.fragmentation_percent(),
            h(s.request_bytes)
        );
    }
    let _ = writeln!(out, "\nAllocated includes blocks pending free (freed, still used by another stream); free < request: free memory in blocks too small for the request (the failed one at an OOM, else the largest of the trace). Estimates are rebuilt from the history; the HTML report draws the segment map.\n");
}

/// The table of the instants and the segment map of the reported instant
/// (and of the first OOM, when it is another instant).
pub fn html(out: &mut String, d: &DeviceReport) {
    let Some(view) = &d.segments else { return };
    let _ = write!(
        out,
        "<h3 id=\"{}\">Allocator segments</h3>\n<table>",
        anchor(d)
    );
    out.push_str("\n<thead><tr><th>Instant</th><th class=\"num\">Event</th><th class=\"num\">Segments</th><th class=\"num\">Reserved</th><th class=\"num\">Allocated</th><th class=\"num\">Free</th><th class=\"num\">Largest free</th><th class=\"num\">Free &lt; request</th><th class=\"num\">Request</th></tr></thead>\n<tbody>\n");
    for s in &view.instants {
        let _ = writeln!(
            out,
            "<tr><td>{}{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\" title=\"{} pending free (freed, still used by another stream)\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} ({:.0}%)</td><td class=\"num\">{}</td></tr>",
            escape(&s.label),
            if s.exact { "" } else { " <span class=\"note\">(estimate)</span>" },
            s.event_index.map_or("-".to_owned(), |e| e.to_string()),
            s.segment_count,
            h(s.reserved_bytes),
            h(s.pending_free_bytes),
            h(s.allocated_bytes + s.pending_free_bytes),
            h(s.inactive_bytes),
            h(s.largest_free_block_bytes),
            h(s.fragmentation_bytes),
            s.fragmentation_percent(),
            h(s.request_bytes)
        );
    }
    out.push_str("</tbody>\n</table>\n<p class=\"note\">Allocated includes blocks pending free; free &lt; request: free memory in blocks too small for the request (the failed one at an OOM, else the largest of the trace). Estimates are rebuilt from the history; the dump is the file's own.</p>\n");
    if view.ooms_left_out > 0 {
        let _ = writeln!(
            out,
            "<p class=\"note\">{} more OOMs not shown.</p>",
            view.ooms_left_out
        );
    }
    let first_oom = view
        .instants
        .iter()
        .skip(1)
        .find(|s| s.label.starts_with("oom "));
    for (k, s) in view.instants.iter().take(1).chain(first_oom).enumerate() {
        segment_map(out, d, s, k);
    }
}

// Geometry of a segment map (SVG user units).
const W: f64 = 1000.0;
const LABEL: f64 = 120.0;
const RIGHT: f64 = 8.0;
const ROW: f64 = 16.0;
const BAR: f64 = 11.0;

/// One bar per segment (the largest [`MAX_BARS`]), each stretched to the
/// full width, blocks as boxes: runs of blocks alike are one box.
fn segment_map(out: &mut String, d: &DeviceReport, s: &SegmentState, k: usize) {
    if s.segments.is_empty() {
        return;
    }
    // Segments alike (same size, same blocks in the same places) are one
    // bar: a run of 48 identical 128 MiB segments says so in one line.
    let alike = alike(&s.segments);
    let groups = &alike[..alike.len().min(MAX_BARS)];
    let hatch = format!("hatch-{}-{k}", slug(&d.device));
    let height = ROW * groups.len() as f64 + 4.0;
    let _ = writeln!(
        out,
        "<figure>\n<figcaption class=\"title\">Segment map {} ({}): {}</figcaption>",
        escape(&at(&s.label)),
        exactness(s),
        escape(&summary(s))
    );
    let _ = writeln!(
        out,
        "<svg class=\"segments\" viewBox=\"0 0 {W} {height}\" width=\"{W}\" height=\"{height}\" role=\"img\" aria-label=\"Segments of {} {}\">\n<defs><pattern id=\"{hatch}\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fff\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#9aa0a6\" stroke-width=\"2\"/></pattern></defs>",
        escape(&d.device),
        escape(&at(&s.label))
    );
    let mut present: Vec<Category> = Vec::new();
    let mut pending = false;
    for (row, g) in groups.iter().enumerate() {
        let (group, seg) = (&g.members, g.members[0]);
        let y = 2.0 + row as f64 * ROW;
        let scale = (W - LABEL - RIGHT) / seg.size.max(1) as f64;
        let (label, title) = match group.len() {
            1 => (h(seg.size), format!("segment {:#x}", seg.address)),
            n => (
                format!("{n} × {}", h(seg.size)),
                format!("{n} segments alike, from {:#x}", seg.address),
            ),
        };
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text><rect class=\"seg\" x=\"{LABEL}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{BAR}\" fill=\"url(#{hatch})\"><title>{title}: {}{}</title></rect>",
            LABEL - 6.0,
            y + BAR - 1.5,
            W - LABEL - RIGHT,
            h(seg.size),
            if seg.expandable { ", expandable" } else { "" }
        );
        for run in &g.runs {
            let Some(c) = run.category else { continue };
            if !present.contains(&c) {
                present.push(c);
            }
            pending |= run.state == BlockUse::PendingFree;
            let x = LABEL + run.offset as f64 * scale;
            let width = (run.bytes as f64 * scale).max(0.6);
            let _ = write!(
                out,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{BAR}\" fill=\"{}\"{}><title>{c}: {} in {} block{}{}</title></rect>",
                colour(c),
                if run.state == BlockUse::PendingFree { " fill-opacity=\"0.45\"" } else { "" },
                h(run.bytes),
                run.blocks,
                if run.blocks == 1 { "" } else { "s" },
                if run.state == BlockUse::PendingFree { ", pending free" } else { "" },
            );
        }
        out.push('\n');
    }
    out.push_str("</svg>\n<figcaption>");
    present.sort();
    for c in &present {
        let _ = write!(
            out,
            "<span><span class=\"sw\" style=\"background:{}\"></span>{c}</span>",
            colour(*c)
        );
    }
    if pending {
        out.push_str("<span><span class=\"sw\" style=\"background:#999;opacity:.45\"></span>pending free (lighter)</span>");
    }
    out.push_str("<span><span class=\"sw hatch\"></span>free (cached)</span></figcaption>\n");
    let mut note = "One bar per segment, stretched to the full width (its size on the left), largest first; segments alike (the same blocks in the same places) share a bar (N × size); blocks of the same category side by side are one box (hover for its size).".to_owned();
    if alike.len() > groups.len() {
        let rest: Vec<&SegmentMap> = alike[groups.len()..]
            .iter()
            .flat_map(|g| g.members.iter().copied())
            .collect();
        let reserved: u64 = rest.iter().map(|m| m.size).sum();
        let free: u64 = rest
            .iter()
            .flat_map(|m| &m.blocks)
            .filter(|b| b.state() == BlockUse::Inactive)
            .map(|b| b.size())
            .sum();
        let _ = write!(
            note,
            " {} smaller segments not drawn: {} reserved, {} free.",
            rest.len(),
            h(reserved),
            h(free)
        );
    }
    let _ = writeln!(out, "<p class=\"note\">{note}</p>\n</figure>");
}

/// The id of a device's "Allocator segments" heading.
pub fn anchor(d: &DeviceReport) -> String {
    format!("segments-{}", slug(&d.device))
}

/// A device name usable in an element id.
fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}
