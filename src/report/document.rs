//! One document per report, built once from it and spelled by Markdown and
//! HTML: the tables (devices, facts, categories at the peak, memory from
//! before recording, top sites, OOMs, plan steps) and the headed lists
//! (findings, next step, what-if) as data, each cell saying what it is,
//! not how a format sets it. A renderer picks the order, caps what it must
//! (Markdown stays under 200 lines) and spells the cells; the content of a
//! section is written here only. The text output keeps its compact lines.

use super::{
    attribution_line, category_lines, finding_line, next_step_line, peak_instant, phase_label,
    share_label, what_if_line,
};
use crate::model::Category;
use crate::schema::{BeforeRecordingPart, DeviceReport, Peak, PlanStep};
use crate::units::{human_bytes as h, percent};

/// One cell of a table, or one piece of a fact's value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cell {
    /// memcut's own words and numbers: safe in every format as they are.
    Plain(String),
    /// Text that may come from the trace (a rule's evidence, a phase, a
    /// lever's reason): escaped where the format needs it.
    Text(String),
    /// Trace text set in monospace (a site, a device).
    Code(String),
    /// Bold (a total, the peak).
    Strong(String),
    /// A label with its category's colour where the format has colour.
    Swatch(Category, String),
    /// A size: human-readable, with the byte count where the format can
    /// hold it out of the way (HTML's title).
    Bytes(u64),
    /// A change in bytes, signed ([`signed`]), coloured by its direction
    /// where the format has colour.
    Change(i64),
    /// A bar of this share (percent) in the category's colour; only formats
    /// that draw leave room for it (the column is [`Column::Bar`]).
    Bar(f64, Category),
    Empty,
}

/// A column: its name, and whether it holds numbers (right-aligned).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Column {
    Text(&'static str),
    Number(&'static str),
    /// Sentences (an OOM's verdict): HTML shows them in the table,
    /// Markdown lists them under it.
    Sentence(&'static str),
    /// The bars of [`Cell::Bar`]: drawn by HTML, left out by Markdown.
    Bar,
}

impl Column {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Column::Text(n) | Column::Number(n) | Column::Sentence(n) => n,
            Column::Bar => "",
        }
    }
}

/// A table: its heading (empty for the plan's steps and the diff's
/// categories, which sit under their renderer's own headings), columns and
/// rows.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Table {
    pub title: String,
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Cell>>,
}

/// One line of the facts table: a name and its value in pieces.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fact {
    pub name: &'static str,
    pub value: Vec<Cell>,
}

/// A headline with its lines: a finding and its evidence, the next step,
/// the what-if and what it rests on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Listed {
    /// `finding` or `what-if` (HTML's class).
    pub kind: &'static str,
    /// `Finding`, `Next step`, `What if`.
    pub label: &'static str,
    pub headline: String,
    pub items: Vec<String>,
}

/// A device's sections, in the order Markdown reads them; HTML puts the
/// plan and the charts between them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DeviceDocument {
    pub lists: Vec<Listed>,
    pub facts: Vec<Fact>,
    /// When the report shows another instant than the peak (`--at`).
    pub at_note: Option<String>,
    pub categories: Table,
    pub before_recording: Option<Table>,
    pub top_sites: Option<Table>,
    pub ooms: Option<Table>,
}

impl DeviceDocument {
    pub(crate) fn new(d: &DeviceReport) -> DeviceDocument {
        let p = &d.peak;
        DeviceDocument {
            lists: lists(d),
            facts: facts(d),
            at_note: super::at_note(d),
            categories: categories(p),
            before_recording: (!d.before_recording.is_empty()).then(|| before_recording(d)),
            top_sites: (!p.top_sites.is_empty()).then(|| top_sites(p)),
            ooms: (!d.ooms.is_empty()).then(|| ooms(d)),
        }
    }
}

fn lists(d: &DeviceReport) -> Vec<Listed> {
    let mut out: Vec<Listed> = d
        .findings
        .iter()
        .map(|f| Listed {
            kind: "finding",
            label: "Finding",
            headline: finding_line(f),
            items: f.evidence.clone(),
        })
        .collect();
    if let Some(n) = &d.next_step {
        out.push(Listed {
            kind: "finding",
            label: "Next step",
            headline: next_step_line(d, n),
            items: n.evidence.clone(),
        });
    }
    if let Some(w) = &d.what_if {
        out.push(Listed {
            kind: "what-if",
            label: "What if",
            headline: what_if_line(d, w),
            items: w.because.clone(),
        });
    }
    out
}

fn facts(d: &DeviceReport) -> Vec<Fact> {
    let p = &d.peak;
    let plain = |s: String| vec![Cell::Plain(s)];
    let mut out = vec![
        Fact {
            name: "Peak allocated",
            value: vec![
                Cell::Strong(h(p.allocated_bytes)),
                Cell::Plain(format!(" ({} bytes)", p.allocated_bytes)),
            ],
        },
        Fact {
            name: "At",
            value: vec![
                Cell::Plain(format!("{}, phase: ", peak_instant(d))),
                Cell::Text(phase_label(&p.phase)),
            ],
        },
        Fact {
            name: "Reserved at peak",
            value: plain(match p.reserved_bytes {
                Some(r) => format!("{} ({r} bytes)", h(r)),
                None => "unknown".to_owned(),
            }),
        },
    ];
    if let Some(r) = d.reserved_peak_bytes {
        let at = d
            .reserved_peak_event_index
            .map_or(String::new(), |e| format!(" at event {e}"));
        out.push(Fact {
            name: "Reserved peak",
            value: plain(format!("{}{at}", h(r))),
        });
    }
    out.push(Fact {
        name: "Baseline (allocated before recording)",
        value: plain(h(d.baseline_bytes)),
    });
    out.push(Fact {
        name: "Categories at the peak",
        value: plain(attribution_line(p)),
    });
    if let Some(c) = d.capacity_bytes {
        out.push(Fact {
            name: "Device memory",
            value: plain(format!(
                "{} (peak is {})",
                h(c),
                percent(p.allocated_bytes, c)
            )),
        });
    }
    out.push(Fact {
        name: "Events",
        value: plain(d.events.to_string()),
    });
    out
}

/// The peak by category: a row per category (the tiny ones summed in
/// `other`), the total, and the allocator's cache on top of it.
fn categories(p: &Peak) -> Table {
    let cats = category_lines(p);
    let mut rows: Vec<Vec<Cell>> = cats
        .rows
        .iter()
        .map(|(c, b)| {
            vec![
                Cell::Swatch(*c, c.to_string()),
                Cell::Bytes(*b),
                Cell::Plain(share_label(p, *b)),
                Cell::Bar(p.share(*b).min(100.0), *c),
            ]
        })
        .collect();
    if let Some((small, bytes)) = &cats.other {
        let names: Vec<&str> = small.iter().map(|c| c.as_str()).collect();
        rows.push(vec![
            Cell::Plain(format!("other: {}", names.join(", "))),
            Cell::Bytes(*bytes),
            Cell::Plain(share_label(p, *bytes)),
            Cell::Empty,
        ]);
    }
    rows.push(vec![
        Cell::Strong("allocated (peak)".to_owned()),
        Cell::Strong(h(p.allocated_bytes)),
        Cell::Plain("100%".to_owned()),
        Cell::Empty,
    ]);
    if let Some(cache) = cats.allocator_cache {
        rows.push(vec![
            Cell::Swatch(
                Category::AllocatorCache,
                "allocator_cache (reserved, not allocated)".to_owned(),
            ),
            Cell::Bytes(cache),
            Cell::Empty,
            Cell::Empty,
        ]);
    }
    Table {
        title: "Memory at the peak by category".to_owned(),
        columns: vec![
            Column::Text("Category"),
            Column::Number("Bytes"),
            Column::Number("Share of peak"),
            Column::Bar,
        ],
        rows,
    }
}

fn before_recording(d: &DeviceReport) -> Table {
    Table {
        title: "Memory that existed before recording".to_owned(),
        columns: vec![
            Column::Text("Category"),
            Column::Number("Bytes"),
            Column::Text("How"),
            Column::Text("From"),
        ],
        rows: d
            .before_recording
            .iter()
            .map(|part| {
                vec![
                    Cell::Text(part.category.to_string()),
                    Cell::Bytes(part.bytes),
                    Cell::Text(format!("{} ({})", how(part), part.rule)),
                    Cell::Text(part.evidence.clone()),
                ]
            })
            .collect(),
    }
}

/// How a part of the memory from before recording got its category.
pub(crate) fn how(part: &BeforeRecordingPart) -> &'static str {
    if part.inferred() {
        "inferred"
    } else if part.category == Category::Unknown {
        "unknown"
    } else {
        "observed"
    }
}

fn top_sites(p: &Peak) -> Table {
    Table {
        title: "Top sites at the peak".to_owned(),
        columns: vec![
            Column::Text("Site (operator < nearest program line)"),
            Column::Text("Category"),
            Column::Number("Bytes"),
            Column::Number("Share"),
            Column::Number("Count"),
        ],
        rows: p
            .top_sites
            .iter()
            .map(|s| {
                vec![
                    Cell::Code(s.site.clone()),
                    Cell::Swatch(s.category, s.category.to_string()),
                    Cell::Bytes(s.bytes),
                    Cell::Plain(share_label(p, s.bytes)),
                    Cell::Plain(s.count.to_string()),
                ]
            })
            .collect(),
    }
}

/// The OOMs, their verdict last (Markdown lists the verdicts under the table).
fn ooms(d: &DeviceReport) -> Table {
    let opt = |v: Option<u64>| v.map_or(Cell::Plain("?".to_owned()), Cell::Bytes);
    Table {
        title: format!("Out-of-memory events ({})", d.ooms.len()),
        columns: vec![
            Column::Number("Event"),
            Column::Number("Requested"),
            Column::Number("Free on device"),
            Column::Number("Allocated"),
            Column::Number("Reserved"),
            Column::Number("Largest free block"),
            Column::Sentence("Finding"),
        ],
        rows: d
            .ooms
            .iter()
            .map(|o| {
                vec![
                    Cell::Plain(o.event_index.to_string()),
                    Cell::Bytes(o.requested_bytes),
                    opt(o.device_free_bytes),
                    Cell::Bytes(o.allocated_bytes),
                    opt(o.reserved_bytes),
                    opt(o.largest_free_block_bytes),
                    Cell::Text(o.verdict.clone()),
                ]
            })
            .collect(),
    }
}

/// One row per device, highest peak first (the overview of a report with
/// several devices).
pub(crate) fn overview(devices: &[&DeviceReport]) -> Table {
    Table {
        title: "Devices".to_owned(),
        columns: vec![
            Column::Text("Device"),
            Column::Number("Peak allocated"),
            Column::Number("Reserved at peak"),
            Column::Text("Top category"),
            Column::Text("Phase"),
            Column::Number("OOMs"),
            Column::Text("Verdict"),
        ],
        rows: devices
            .iter()
            .map(|d| {
                vec![
                    Cell::Code(d.device.clone()),
                    Cell::Bytes(d.peak.allocated_bytes),
                    d.peak
                        .reserved_bytes
                        .map_or(Cell::Plain("unknown".into()), Cell::Bytes),
                    Cell::Text(d.top_category().map_or("-", |c| c.as_str()).to_owned()),
                    Cell::Text(phase_label(&d.peak.phase)),
                    Cell::Text(d.ooms.len().to_string()),
                    Cell::Text(
                        d.plan
                            .as_ref()
                            .map_or("-", |p| super::headline(p).0.as_str())
                            .to_owned(),
                    ),
                ]
            })
            .collect(),
    }
}

/// A plan's steps (the failed allocation's or the replayed peak's).
pub(crate) fn plan_steps(steps: &[PlanStep], target: u64) -> Table {
    Table {
        title: String::new(),
        columns: vec![
            Column::Number("#"),
            Column::Text("Lever"),
            Column::Text("Action"),
            Column::Text("Cost"),
            Column::Number("Saves"),
            Column::Number("Peak after"),
            Column::Text("Peak moves to"),
        ],
        rows: steps
            .iter()
            .enumerate()
            .map(|(i, s)| plan_step(i, s, target))
            .collect(),
    }
}

fn plan_step(index: usize, step: &PlanStep, target: u64) -> Vec<Cell> {
    let action = match &step.condition {
        Some(c) => format!("{}: {}", super::condition_words(c), step.action),
        None => step.action.clone(),
    };
    let cost = match &step.tradeoff {
        Some(t) => format!("{}: {t}", step.cost),
        None => step.cost.clone(),
    };
    let saves = if step.estimate {
        format!("≈ {} (estimate)", h(step.saved_bytes))
    } else {
        h(step.saved_bytes)
    };
    let moved = if step.peak_moved {
        phase_label(&step.peak_moved_to)
    } else {
        "—".to_owned()
    };
    [
        (index + 1).to_string(),
        step.lever.clone(),
        action,
        cost,
        saves,
        super::peak_against(step.peak_after_bytes, target),
        moved,
    ]
    .into_iter()
    .map(Cell::Text)
    .collect()
}

/// A signed size: `+1.2 MiB`, `−6.10 GiB` (a real minus sign), `+0 B`.
pub(crate) fn signed(bytes: i64) -> String {
    let sign = if bytes < 0 { '\u{2212}' } else { '+' };
    format!("{sign}{}", h(bytes.unsigned_abs()))
}

/// `grew`, `shrank` or nothing: the class a change is coloured by.
pub(crate) fn direction(change: i64) -> &'static str {
    match change.signum() {
        1 => "grew",
        -1 => "shrank",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Report;

    fn golden_reports() -> Vec<Report> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "json") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push(Report::from_json(&text).unwrap());
            }
        }
        assert!(out.len() >= 10, "golden reports: {}", out.len());
        out
    }

    /// Every row has a cell per column, bars only in the bar column; the
    /// category rows (the `other` line included) add up to the peak.
    #[test]
    fn tables_are_rectangular_and_categories_add_up_to_the_peak() {
        for report in golden_reports() {
            let devices: Vec<&DeviceReport> = report.devices.iter().collect();
            for d in &devices {
                let doc = DeviceDocument::new(d);
                let steps = d.plan.iter().map(|p| plan_steps(&p.steps, p.target_bytes));
                let tables = [
                    Some(doc.categories.clone()),
                    doc.before_recording,
                    doc.top_sites,
                ]
                .into_iter()
                .flatten()
                .chain(doc.ooms)
                .chain(steps)
                .chain([overview(&devices)]);
                for t in tables {
                    for row in &t.rows {
                        assert_eq!(row.len(), t.columns.len(), "{}: {row:?}", t.title);
                        for (cell, column) in row.iter().zip(&t.columns) {
                            if let Cell::Bar(..) = cell {
                                assert_eq!(*column, Column::Bar, "{}", t.title);
                            }
                        }
                    }
                }
                let listed: u64 = doc
                    .categories
                    .rows
                    .iter()
                    .filter(|r| !matches!(&r[0], Cell::Swatch(Category::AllocatorCache, _)))
                    .filter_map(|r| match r[1] {
                        Cell::Bytes(b) => Some(b),
                        _ => None,
                    })
                    .sum();
                assert_eq!(listed, d.peak.allocated_bytes, "{}", d.device);
                assert!(!doc.facts.is_empty() && doc.facts[0].name == "Peak allocated");
            }
        }
    }
}
