//! Renderers: a [`Report`] → text, Markdown, JSON or HTML. They read only
//! the report (so a saved JSON renders the same pages) and share the few
//! cells that two of them show alike.
//!
//! Public here: the report's types (the JSON contract, [`Report`] down to
//! each [`Peak`], [`Finding`] and [`Plan`]; the diff's [`DiffReport`]) and
//! the renderers ([`render`], [`render_diff`], [`write_json`]). Inside, the
//! batch summary is written here too (`summary`), from its rows.

pub(crate) mod allocator;
mod chart;
pub(crate) mod diff;
mod document;
pub(crate) mod html;
pub(crate) mod json;
pub(crate) mod markdown;
mod markup;
pub(crate) mod stacks;
pub(crate) mod summary;
pub(crate) mod text;
mod viewer;

pub use crate::model::{Category, Diagnostic, Distributed, Level};
pub use crate::schema::{
    Attribution, Band, BeforeRecordingPart, BlockSpan, BlockUse, CategoryChange, Change,
    ConsideredLever, DetailSeries, DeviceDiff, DeviceReport, DiffReport, DiffTimeline, EventRef,
    Finding, FindingKind, Headline, LiveAllocation, NextStep, NormalisedSeries, OomFinding,
    OomPlan, Peak, PeakCategories, PeakCheck, PeakInstant, Plan, PlanFact, PlanStep, PlanSummary,
    Report, ReportedInstant, SegmentBar, SegmentFrame, SegmentFrames, SegmentMap, SegmentState,
    SegmentsView, SiteChange, SiteStatus, SourceInfo, StackTable, TimelineSeries, Tool, TopSite,
    Verdict, WhatIf, DIFF_SCHEMA_VERSION, SCHEMA_VERSION,
};
use crate::units::{human_bytes, human_duration_us, percent};

/// Output formats of a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutputFormat {
    /// What a person reads in ten seconds on a terminal.
    Text,
    /// The ticket attachment.
    Md,
    /// The machine contract ([`Report::from_json`] reads it back).
    Json,
    /// One self-contained page with a chart of memory over time.
    Html,
}

impl OutputFormat {
    /// The file extension of a report in this format (`txt`, `md`, `json`, `html`).
    pub fn extension(self) -> &'static str {
        match self {
            OutputFormat::Text => "txt",
            OutputFormat::Md => "md",
            OutputFormat::Json => "json",
            OutputFormat::Html => "html",
        }
    }
}

/// Renders a comparison (`memcut diff`) in the given format.
pub fn render_diff(report: &crate::schema::DiffReport, format: OutputFormat) -> String {
    diff::render(report, format)
}

/// Writes a report as [`render`] renders it in JSON, without holding the
/// text whole (an I/O error of `out` is returned).
pub fn write_json(report: &Report, out: impl std::io::Write) -> std::io::Result<()> {
    json::write_json(report, out)
}

/// Renders a report in the given format.
pub fn render(report: &Report, format: OutputFormat) -> String {
    match format {
        OutputFormat::Text => text::render(report),
        OutputFormat::Md => markdown::render(report),
        OutputFormat::Json => json::render(report),
        OutputFormat::Html => html::render(report),
    }
}

/// The "if …" of a conditional step, without the evidence after its colon.
pub(crate) fn condition_words(condition: &str) -> &str {
    condition.split(": ").next().unwrap_or(condition)
}

/// A peak after a step, and how far from the target in bytes when the two
/// would read the same (`5.40 GiB (328595 B over the target)`): never two
/// equal-looking numbers on either side of a verdict.
pub(crate) fn peak_against(peak: u64, target: u64) -> String {
    let shown = human_bytes(peak);
    if peak == target || shown != human_bytes(target) {
        return shown;
    }
    if peak > target {
        format!("{shown} ({} B over the target)", peak - target)
    } else {
        format!("{shown} ({} B under the target)", target - peak)
    }
}

/// A plan step as one line: `halve_batch -> peak 1.53 GiB (saves 526.3 MiB,
/// cheap)`, with its condition and whether the saving is an estimate.
pub(crate) fn plan_step_line(step: &PlanStep, target: u64) -> String {
    let mut line = format!(
        "{} -> peak {} (saves {}{}, {})",
        step.lever,
        peak_against(step.peak_after_bytes, target),
        if step.estimate { "≈ " } else { "" },
        human_bytes(step.saved_bytes),
        step.cost
    );
    if step.peak_moved {
        line.push_str(&format!(", peak moves to {}", step.peak_moved_to));
    }
    if let Some(c) = &step.condition {
        line.push_str(&format!(" — {}", condition_words(c)));
    }
    line
}

/// The levers a plan did not use, grouped by the same reason, in the
/// plan's order: `(reason, levers)`.
pub(crate) fn not_proposed(plan: &Plan) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for c in &plan.considered {
        let reason = match c.outcome.as_str() {
            "no_effect" => "nothing it cuts is live at the peak".to_owned(),
            _ => c.reason.clone(),
        };
        match groups.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, levers)) => levers.push(c.lever.clone()),
            None => groups.push((reason, vec![c.lever.clone()])),
        }
    }
    groups
}

/// The verdict a report leads with and its subject: the OOM's when the
/// trace holds one, else the replayed peak's.
pub(crate) fn headline(plan: &Plan) -> (Verdict, String, bool) {
    match &plan.headline {
        Some(hl) => (hl.verdict, hl.reason.clone(), hl.estimate),
        None => (plan.verdict, plan.reason.clone(), plan.estimate),
    }
}

/// The categories at the peak as text, Markdown and HTML list them: the
/// rows of [`Peak::categories`], except that two or more rows under 0.05%
/// of the peak (which would read `0.0%`) are summed into one `other` line
/// (a single one stays a row, its share written `<0.1%`).
pub(crate) struct CategoryLines {
    /// Category rows, largest first.
    pub rows: Vec<(Category, u64)>,
    /// The categories folded into `other` (display order), and their bytes.
    pub other: Option<(Vec<Category>, u64)>,
    /// Reserved − allocated at the peak (its own line, no share).
    pub allocator_cache: Option<u64>,
}

/// A finding's headline: what, how much of the peak, and what its fix does
/// (`graph_kept_alive: 12.3 MiB at the peak; fix free_kept_graph: peak 30.0 MiB -> 16.4 MiB (saves 13.6 MiB)`).
pub(crate) fn finding_line(f: &crate::schema::Finding) -> String {
    if f.kind == crate::schema::FindingKind::FragmentationAtOom {
        // Reserved memory at an OOM: the allocated peak does not move.
        return format!(
            "{}: {} cached at an OOM in free blocks too small for its request; fix {}: the cache serves it (the allocated peak stays {})",
            f.kind.as_str(),
            human_bytes(f.saving_bytes),
            f.fix,
            human_bytes(f.peak_after_bytes)
        );
    }
    if f.kind == crate::schema::FindingKind::MemoryOutsideAllocator {
        // Device memory the allocator never saw: the allocated peak stays.
        return format!(
            "{}: at least {} of the device held outside PyTorch's allocator at an OOM; fix {}: the allocator gains that room (the allocated peak stays {})",
            f.kind.as_str(),
            human_bytes(f.saving_bytes),
            f.fix,
            human_bytes(f.peak_after_bytes)
        );
    }
    format!(
        "{}: {} at the peak; fix {}: peak {} → {} (saves {})",
        f.kind.as_str(),
        human_bytes(f.bytes_at_peak),
        f.fix,
        human_bytes(f.peak_after_bytes + f.saving_bytes),
        human_bytes(f.peak_after_bytes),
        human_bytes(f.saving_bytes)
    )
}

/// The next step's headline: the recorded peak, the one predicted for the
/// next step and what is carried into it
/// (`peak 11.3 MiB → 15.3 MiB (+4.0 MiB, predicted): …`).
pub(crate) fn next_step_line(d: &DeviceReport, n: &crate::schema::NextStep) -> String {
    let recorded = d.peak.allocated_bytes;
    format!(
        "peak {} → {} (+{}, predicted): it carries the {} this first step made and left alive",
        human_bytes(recorded),
        human_bytes(n.peak_allocated_bytes),
        human_bytes(n.peak_allocated_bytes.saturating_sub(recorded)),
        human_bytes(n.carried_bytes)
    )
}

/// The what-if's headline after "what if" (`inference_mode,autocast_no_cache: peak 30.0 MiB → 6.5 MiB`),
/// with `≈` when some lever was a factor.
/// On a recording of a first step whose next step is predicted, the
/// what-if is the next step's, and so is the peak it starts from.
pub(crate) fn what_if_line(d: &DeviceReport, w: &crate::schema::WhatIf) -> String {
    let before = match &d.next_step {
        Some(n) => n.peak_allocated_bytes,
        None => {
            d.at.as_ref()
                .map_or(d.peak.allocated_bytes, |a| a.peak_allocated_bytes)
        }
    };
    format!(
        "{}: {}peak {} → {}{} ({} {}, at event {})",
        w.levers.join(","),
        if d.next_step.is_some() {
            "next step's "
        } else {
            ""
        },
        human_bytes(before),
        if w.estimate { "≈ " } else { "" },
        human_bytes(w.peak_allocated_bytes),
        if w.peak_allocated_bytes <= before {
            "saves"
        } else {
            "adds"
        },
        human_bytes(before.abs_diff(w.peak_allocated_bytes)),
        w.peak_event_index
    )
}

/// Whether `bytes` are under 0.05% of a non-empty peak: a share that would
/// read `0.0%`.
pub(crate) fn is_tiny(peak: &Peak, bytes: u64) -> bool {
    peak.allocated_bytes > 0 && bytes.saturating_mul(2000) < peak.allocated_bytes
}

pub(crate) fn category_lines(peak: &Peak) -> CategoryLines {
    let cats = peak.categories();
    let tiny = |b: u64| is_tiny(peak, b);
    let (mut small, mut rows): (Vec<_>, Vec<_>) =
        cats.rows.into_iter().partition(|(_, b)| tiny(*b));
    if small.len() == 1 {
        rows.append(&mut small);
    }
    small.sort();
    let other = (!small.is_empty()).then(|| {
        let bytes = small.iter().map(|(_, b)| b).sum();
        (small.into_iter().map(|(c, _)| c).collect(), bytes)
    });
    CategoryLines {
        rows,
        other,
        allocator_cache: cats.allocator_cache,
    }
}

/// A share of the peak for people, `<0.1%` where it would read `0.0%`.
pub(crate) fn share_label(peak: &Peak, bytes: u64) -> String {
    if is_tiny(peak, bytes) && bytes > 0 {
        "<0.1%".into()
    } else {
        peak.share_text(bytes)
    }
}

/// A phase (or a text naming one) for people: the `## … ##` markers of
/// profiler annotations dropped and hash-like names shortened
/// (`## Call CompiledFxGraph f4ii27ddivzk…(52 characters) ##` →
/// `Call CompiledFxGraph f4ii27dd…`). The JSON keeps the name as recorded.
pub(crate) fn phase_label(phase: &str) -> String {
    let unwrapped = phase.replace("(## ", "(").replace(" ##)", ")");
    let words: Vec<String> = unwrapped
        .split(' ')
        .filter(|w| !w.is_empty() && *w != "##")
        .map(|w| {
            let core = w.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            if core.len() > 24 && core.chars().all(|c| c.is_ascii_alphanumeric()) {
                w.replace(core, &format!("{}…", &core[..8]))
            } else {
                w.to_owned()
            }
        })
        .collect();
    words.join(" ")
}

/// Devices by peak allocated bytes, largest first (ties by name).
pub(crate) fn devices_by_peak(report: &Report) -> Vec<&DeviceReport> {
    let mut devices: Vec<&DeviceReport> = report.devices.iter().collect();
    devices.sort_by(|a, b| {
        b.peak
            .allocated_bytes
            .cmp(&a.peak.allocated_bytes)
            .then(a.device.cmp(&b.device))
    });
    devices
}

/// Devices whose peak is below this are *minor* beside a larger one.
pub(crate) const MINOR_DEVICE_BYTES: u64 = 1 << 20;

/// The devices that get a full section (and a batch row), highest peak
/// first, and the minor ones that get one line: a device whose peak is
/// under [`MINOR_DEVICE_BYTES`] is minor unless it has the highest peak
/// (a profiler trace's `cpu` device with 8 B beside a GPU's gigabytes). So
/// every report keeps at least one full device; JSON keeps them all.
pub(crate) fn major_devices(report: &Report) -> (Vec<&DeviceReport>, Vec<&DeviceReport>) {
    let devices = devices_by_peak(report);
    let mut major = Vec::new();
    let mut minor = Vec::new();
    for (k, d) in devices.into_iter().enumerate() {
        if k > 0 && d.peak.allocated_bytes < MINOR_DEVICE_BYTES {
            minor.push(d);
        } else {
            major.push(d);
        }
    }
    (major, minor)
}

/// The one line that names the minor devices of [`major_devices`].
pub(crate) fn minor_devices_line(minor: &[&DeviceReport]) -> Option<String> {
    if minor.is_empty() {
        return None;
    }
    let list: Vec<String> = minor
        .iter()
        .map(|d| format!("{} ({})", d.device, human_bytes(d.peak.allocated_bytes)))
        .collect();
    Some(format!(
        "Also recorded, with a peak under {} each (in the JSON report): {}",
        human_bytes(MINOR_DEVICE_BYTES),
        list.join(", ")
    ))
}

/// When the peak happened: the event index, and the time since the first
/// event when the trace has timestamps.
pub(crate) fn peak_instant(device: &DeviceReport) -> String {
    let t = &device.timeline;
    if t.x_unit == "time_us" && device.peak.ts_us.is_some() {
        format!(
            "event {} (t = {} after the first event)",
            device.peak.event_index,
            human_duration_us(t.peak_x)
        )
    } else {
        format!("event {}", device.peak.event_index)
    }
}

/// When the report shows another instant than the peak (`--at`): one
/// sentence that says so, and where the peak is.
pub(crate) fn at_note(device: &DeviceReport) -> Option<String> {
    let at = device.at.as_ref()?;
    if at.event_index == at.peak_event_index {
        return Some(format!(
            "This report shows the state after event {} (--at {}), which is the peak.",
            at.event_index, at.spec
        ));
    }
    Some(format!(
        "This report shows the state after event {} (--at {}), not the peak: the peak is {} at event {}. \"Peak\" below means the instant shown.",
        at.event_index,
        at.spec,
        human_bytes(at.peak_allocated_bytes),
        at.peak_event_index
    ))
}

/// How the peak's bytes got their category, in one line:
/// `observed 1.5 MiB (48.0%) · inferred 1.6 MiB (52.0%) · unknown 0 B (0%)`.
pub(crate) fn attribution_line(p: &Peak) -> String {
    let a = &p.attribution;
    [
        ("observed", a.observed_bytes),
        ("inferred", a.inferred_bytes),
        ("unknown", a.unknown_bytes),
    ]
    .iter()
    .map(|(name, b)| {
        format!(
            "{name} {} ({})",
            human_bytes(*b),
            percent(*b, p.allocated_bytes)
        )
    })
    .collect::<Vec<_>>()
    .join(" · ")
}

/// Memory that existed before recording, in one line:
/// `parameter 535.0 KiB (inferred: …), unknown 116 B`.
pub(crate) fn before_recording_line(d: &DeviceReport) -> String {
    d.before_recording
        .iter()
        .map(|part| {
            let (category, bytes) = (part.category, human_bytes(part.bytes));
            if part.category == Category::Unknown {
                format!("{category} {bytes}")
            } else {
                format!(
                    "{category} {bytes} ({}: {})",
                    document::how(part),
                    part.evidence
                )
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use crate::report::phase_label;

    #[test]
    fn phase_labels_drop_markers_and_shorten_hashes() {
        assert_eq!(
            phase_label(
                "## Call CompiledFxGraph f4ii27ddivzklxr54hd45chngp247rp2ytmjxpq3f55wet4szuh7 ##"
            ),
            "Call CompiledFxGraph f4ii27dd…"
        );
        assert_eq!(phase_label("## decode ##"), "decode");
        assert_eq!(phase_label("event 3 (## decode ##)"), "event 3 (decode)");
        assert_eq!(
            phase_label("Optimizer.step#Adam.step"),
            "Optimizer.step#Adam.step"
        );
        assert_eq!(phase_label("backward"), "backward");
    }
}
