//! Renderers: a [`Report`] → text, Markdown, JSON or HTML. They read only
//! the report (so a saved JSON renders the same pages) and share the few
//! cells that two of them show alike.

pub mod html;
pub mod json;
pub mod markdown;
pub mod text;

use crate::schema::{BeforeRecordingPart, DeviceReport, Peak, Plan, PlanStep, Report, Verdict};
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

/// Renders a report in the given format.
pub fn render(report: &Report, format: OutputFormat) -> String {
    match format {
        OutputFormat::Text => text::render(report),
        OutputFormat::Md => markdown::render(report),
        OutputFormat::Json => json::render(report),
        OutputFormat::Html => html::render(report),
    }
}

/// Column names and one device's cells (plain text) of the multi-device
/// overview table that both Markdown and HTML show.
pub(crate) const OVERVIEW_COLUMNS: [&str; 7] = [
    "Device",
    "Peak allocated",
    "Reserved at peak",
    "Top category",
    "Phase",
    "OOMs",
    "Verdict",
];

pub(crate) fn overview_row(d: &DeviceReport) -> [String; 7] {
    [
        d.device.clone(),
        human_bytes(d.peak.allocated_bytes),
        d.peak.reserved_bytes.map_or("unknown".into(), human_bytes),
        d.top_category().map_or("-", |c| c.as_str()).to_owned(),
        d.peak.phase.clone(),
        d.ooms.len().to_string(),
        d.plan
            .as_ref()
            .map_or("-", |p| headline(p).0.as_str())
            .to_owned(),
    ]
}

/// Column names and one step's cells (plain text) of the cut-plan table
/// that both Markdown and HTML show; columns 0, 4 and 5 are numbers.
pub(crate) const PLAN_STEP_COLUMNS: [&str; 7] = [
    "#",
    "Lever",
    "Action",
    "Cost",
    "Saves",
    "Peak after",
    "Peak moves to",
];

pub(crate) fn plan_step_row(index: usize, step: &PlanStep) -> [String; 7] {
    let action = match &step.condition {
        Some(c) => format!("{}: {}", condition_words(c), step.action),
        None => step.action.clone(),
    };
    let cost = match &step.tradeoff {
        Some(t) => format!("{}: {t}", step.cost),
        None => step.cost.clone(),
    };
    let saves = if step.estimate {
        format!("≈ {} (estimate)", human_bytes(step.saved_bytes))
    } else {
        human_bytes(step.saved_bytes)
    };
    [
        (index + 1).to_string(),
        step.lever.clone(),
        action,
        cost,
        saves,
        human_bytes(step.peak_after_bytes),
        step.peak_moved_to.clone(),
    ]
}

/// The "if …" of a conditional step, without the evidence after its colon.
pub(crate) fn condition_words(condition: &str) -> &str {
    condition.split(": ").next().unwrap_or(condition)
}

/// A plan step as one line: `halve_batch -> peak 1.53 GiB (saves 526.3 MiB,
/// cheap)`, with its condition and whether the saving is an estimate.
pub(crate) fn plan_step_line(step: &PlanStep) -> String {
    let mut line = format!(
        "{} -> peak {} (saves {}{}, {})",
        step.lever,
        human_bytes(step.peak_after_bytes),
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

/// Column names and one part's cells (plain text) of the table of memory
/// that existed before recording, as Markdown and HTML show it.
pub(crate) const BEFORE_RECORDING_COLUMNS: [&str; 4] = ["Category", "Bytes", "How", "From"];

pub(crate) fn before_recording_row(part: &BeforeRecordingPart) -> [String; 4] {
    let how = if part.inferred() {
        "inferred"
    } else if part.category == crate::model::Category::Unknown {
        "unknown"
    } else {
        "observed"
    };
    [
        part.category.to_string(),
        human_bytes(part.bytes),
        format!("{how} ({})", part.rule),
        part.evidence.clone(),
    ]
}

/// Memory that existed before recording, in one line:
/// `parameter 535.0 KiB (inferred: …), unknown 116 B`.
pub(crate) fn before_recording_line(d: &DeviceReport) -> String {
    d.before_recording
        .iter()
        .map(|part| {
            let [category, bytes, how, from] = before_recording_row(part);
            if part.category == crate::model::Category::Unknown {
                format!("{category} {bytes}")
            } else {
                let how = how.split(' ').next().unwrap_or_default();
                format!("{category} {bytes} ({how}: {from})")
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}
