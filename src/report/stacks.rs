//! Whole stacks of the top sites: expandable `<details>` in HTML (every
//! frame, plumbing greyed), a collapsed `<details>` block in Markdown (the
//! top three sites, plumbing folded), which renders on GitHub and GitLab.

use std::fmt::Write;

use super::markup::escape;
use crate::schema::{DeviceReport, TopSite};
use crate::units::human_bytes as h;

/// Sites whose stacks the Markdown shows.
pub const MD_SITES: usize = 3;
/// Frames per stack the Markdown shows (plumbing left out).
pub const MD_FRAMES: usize = 10;
/// Frames per stack the HTML shows.
pub const HTML_FRAMES: usize = 200;

/// The top sites that have a stack, in order.
fn with_stacks(d: &DeviceReport) -> impl Iterator<Item = &TopSite> {
    d.peak.top_sites.iter().filter(|s| !s.stacks.is_empty())
}

/// `<h3>` and one `<details>` per top site with its stacks.
pub fn html(out: &mut String, d: &DeviceReport) {
    if with_stacks(d).next().is_none() {
        return;
    }
    out.push_str("<h3>Stacks of the top sites</h3>\n<p class=\"note\">Innermost frame first; allocator, interpreter and framework plumbing in grey.</p>\n");
    for s in with_stacks(d) {
        let _ = writeln!(
            out,
            "<details class=\"stack\"><summary><code>{}</code> · {} · {}</summary>",
            escape(&s.site),
            h(s.bytes),
            s.category
        );
        for (k, &stack) in s.stacks.iter().enumerate() {
            if s.stacks.len() > 1 {
                let _ = writeln!(
                    out,
                    "<p class=\"note\">Stack {} of {}{}</p>",
                    k + 1,
                    s.stacks.len(),
                    if k == 0 { " (the most bytes)" } else { "" }
                );
            }
            let frames = d.stacks.frames_of(stack);
            out.push_str("<ol class=\"frames\">");
            for (text, internal) in frames.iter().take(HTML_FRAMES) {
                let class = if *internal { " class=\"internal\"" } else { "" };
                let _ = write!(out, "<li{class}><code>{}</code></li>", escape(text));
            }
            out.push_str("</ol>\n");
            if frames.len() > HTML_FRAMES {
                let _ = writeln!(
                    out,
                    "<p class=\"note\">… {} more frames in the JSON report</p>",
                    frames.len() - HTML_FRAMES
                );
            }
        }
        out.push_str("</details>\n");
    }
}

/// A collapsed block with the stacks of the top [`MD_SITES`] sites.
pub fn markdown(out: &mut String, d: &DeviceReport) {
    let sites: Vec<&TopSite> = with_stacks(d).take(MD_SITES).collect();
    if sites.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<details>\n<summary>Stacks of the top {} sites (innermost frame first)</summary>\n",
        sites.len()
    );
    for (k, s) in sites.iter().enumerate() {
        let frames = d.stacks.frames_of(s.stacks[0]);
        // Plumbing left out, unless that is all there is.
        let mut shown: Vec<&str> = frames.iter().filter(|f| !f.1).map(|f| f.0).collect();
        if shown.is_empty() {
            shown = frames.iter().map(|f| f.0).collect();
        }
        let _ = writeln!(
            out,
            "{}. `{}` ({}, {})\n",
            k + 1,
            s.site.replace('`', "'"),
            h(s.bytes),
            s.category
        );
        out.push_str("```text\n");
        for f in shown.iter().take(MD_FRAMES) {
            let _ = writeln!(out, "{}", f.replace("```", "'''"));
        }
        let hidden = frames.len() - shown.len().min(MD_FRAMES);
        if hidden > 0 {
            let _ = writeln!(
                out,
                "… {hidden} more frame{} (plumbing or deeper) in the JSON report",
                if hidden == 1 { "" } else { "s" }
            );
        }
        out.push_str("```\n\n");
    }
    out.push_str("</details>\n\n");
}
