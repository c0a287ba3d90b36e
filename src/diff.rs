//! `memcut diff BEFORE AFTER`: two analysis reports compared device by
//! device. Works on reports, not traces, so that any two inputs memcut reads
//! compare (mixed formats, or a saved JSON report): peaks, bytes by category,
//! sites matched by their text, the plans' verdicts, where each peak is, and
//! both timelines on one normalised axis.

use std::collections::BTreeMap;

use crate::model::{Category, Diagnostic};
use crate::schema::{
    CategoryChange, Change, DeviceDiff, DeviceReport, DiffReport, DiffTimeline, NormalisedSeries,
    PeakCheck, PeakInstant, PlanSummary, Report, SiteChange, SiteStatus, Tool, DIFF_SCHEMA_VERSION,
};

/// Knobs of a comparison.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DiffOptions {
    /// Only this device (matched by name in both inputs).
    pub device: Option<String>,
    /// Site rows kept per device (the largest changes).
    pub top: usize,
    /// `--fail-if-peak-grows`: the largest allowed growth of a device's
    /// allocated peak, in percent.
    pub max_growth_percent: Option<f64>,
}

impl Default for DiffOptions {
    fn default() -> DiffOptions {
        DiffOptions {
            device: None,
            top: 20,
            max_growth_percent: None,
        }
    }
}

impl DiffReport {
    /// Whether `--fail-if-peak-grows` was given and some device is over it.
    pub fn check_failed(&self) -> bool {
        self.check.as_ref().is_some_and(|c| !c.failed.is_empty())
    }
}

/// Compares two reports. Devices are matched by name; when each report has
/// exactly one device (after `--device`), those two are compared whatever
/// their names (a run on `cuda:0` against one on `cuda:1`).
pub fn diff(before: &Report, after: &Report, options: &DiffOptions) -> DiffReport {
    let pick = |r: &Report| -> Vec<usize> {
        (0..r.devices.len())
            .filter(|&k| {
                options
                    .device
                    .as_ref()
                    .is_none_or(|d| *d == r.devices[k].device)
            })
            .collect()
    };
    let (b, a) = (pick(before), pick(after));
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    if b.len() == 1 && a.len() == 1 {
        pairs.push((b[0], a[0]));
    } else {
        for &k in &b {
            if let Some(&j) = a
                .iter()
                .find(|&&j| after.devices[j].device == before.devices[k].device)
            {
                pairs.push((k, j));
            }
        }
    }
    let only = |r: &Report, mine: &[usize], paired: &dyn Fn(usize) -> bool| -> Vec<String> {
        mine.iter()
            .filter(|&&k| !paired(k))
            .map(|&k| r.devices[k].device.clone())
            .collect()
    };
    let only_before = only(before, &b, &|k| pairs.iter().any(|p| p.0 == k));
    let only_after = only(after, &a, &|j| pairs.iter().any(|p| p.1 == j));
    let devices: Vec<DeviceDiff> = pairs
        .iter()
        .map(|&(k, j)| device_diff(&before.devices[k], &after.devices[j], options.top))
        .collect();
    let check = options.max_growth_percent.map(|max| PeakCheck {
        max_growth_percent: max,
        failed: devices
            .iter()
            .filter(|d| grew_too_much(&d.peak, max))
            .map(|d| d.device.clone())
            .collect(),
    });
    let mut diagnostics: Vec<Diagnostic> = Vec::new();
    for (side, r) in [("before", before), ("after", after)] {
        for d in &r.diagnostics {
            let mut d = d.clone();
            d.message = format!("{side}: {}", d.message);
            diagnostics.push(d);
        }
    }
    if devices.is_empty() {
        diagnostics.push(Diagnostic::warning(match &options.device {
            Some(d) => format!("no device `{d}` in both inputs"),
            None => "the inputs have no device in common (give --device to pick one)".to_owned(),
        }));
    }
    DiffReport {
        schema_version: DIFF_SCHEMA_VERSION,
        kind: "diff".to_owned(),
        tool: Tool::default(),
        before: before.source.clone(),
        after: after.source.clone(),
        devices,
        only_before,
        only_after,
        check,
        diagnostics,
    }
}

/// Over the threshold: grew by more than `max` percent, or from nothing.
fn grew_too_much(peak: &Change, max: f64) -> bool {
    match peak.change_percent {
        Some(p) => p > max,
        None => peak.after > 0,
    }
}

fn device_diff(before: &DeviceReport, after: &DeviceReport, top: usize) -> DeviceDiff {
    let both = |f: fn(&DeviceReport) -> Option<u64>| Some(Change::new(f(before)?, f(after)?));
    let (sites, sites_left_out) = site_changes(before, after, top);
    DeviceDiff {
        device: before.device.clone(),
        after_device: (after.device != before.device).then(|| after.device.clone()),
        peak: Change::new(before.peak.allocated_bytes, after.peak.allocated_bytes),
        reserved_at_peak: both(|d| d.peak.reserved_bytes),
        reserved_peak: both(|d| d.reserved_peak_bytes),
        by_category: category_changes(before, after),
        sites,
        sites_left_out,
        before_peak: peak_instant(before),
        after_peak: peak_instant(after),
        before_plan: before.plan.as_ref().map(plan_summary),
        after_plan: after.plan.as_ref().map(plan_summary),
        timeline: DiffTimeline {
            before: normalised(before),
            after: normalised(after),
        },
    }
}

/// Every category present at either peak, in category order.
fn category_changes(before: &DeviceReport, after: &DeviceReport) -> Vec<CategoryChange> {
    let get = |d: &DeviceReport, c| d.peak.by_category.get(&c).copied();
    Category::ALL
        .iter()
        .filter_map(|&c| {
            let (b, a) = (get(before, c), get(after, c));
            b.or(a)?;
            let (b, a) = (b.unwrap_or(0), a.unwrap_or(0));
            Some(CategoryChange {
                category: c,
                before: b,
                after: a,
                change_bytes: Change::new(b, a).change_bytes,
            })
        })
        .collect()
}

/// One site's live allocations at a peak: bytes, count, bytes by category.
#[derive(Default)]
struct SiteTotal {
    bytes: u64,
    count: u64,
    by_category: BTreeMap<Category, u64>,
}

impl SiteTotal {
    /// The category holding most bytes (the first in category order on ties).
    fn category(&self) -> Option<Category> {
        self.by_category
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map(|(c, _)| *c)
    }
}

fn site_totals(d: &DeviceReport) -> BTreeMap<&str, SiteTotal> {
    let mut out: BTreeMap<&str, SiteTotal> = BTreeMap::new();
    for a in &d.peak.allocations {
        let t = out.entry(&*a.site).or_default();
        t.bytes = t.bytes.saturating_add(a.size);
        t.count += 1;
        *t.by_category.entry(a.category).or_default() += a.size;
    }
    out
}

/// Sites that changed, the largest |change| first (then by site text), the
/// first `top` of them; and how many changed sites were left out.
fn site_changes(before: &DeviceReport, after: &DeviceReport, top: usize) -> (Vec<SiteChange>, u64) {
    let (b, a) = (site_totals(before), site_totals(after));
    let none = SiteTotal::default();
    let mut names: Vec<&str> = b.keys().chain(a.keys()).copied().collect();
    names.sort_unstable();
    names.dedup();
    let mut rows: Vec<SiteChange> = names
        .into_iter()
        .filter_map(|site| {
            let (tb, ta) = (b.get(site).unwrap_or(&none), a.get(site).unwrap_or(&none));
            let change = Change::new(tb.bytes, ta.bytes);
            let status = match (tb.count, ta.count) {
                (0, _) => SiteStatus::Appeared,
                (_, 0) => SiteStatus::Disappeared,
                _ if change.change_bytes > 0 => SiteStatus::Grew,
                _ if change.change_bytes < 0 => SiteStatus::Shrank,
                _ => SiteStatus::Unchanged,
            };
            (status != SiteStatus::Unchanged).then(|| SiteChange {
                site: site.to_owned(),
                category: ta.category().or(tb.category()).unwrap_or(Category::Unknown),
                status,
                before_bytes: tb.bytes,
                after_bytes: ta.bytes,
                change_bytes: change.change_bytes,
                before_count: tb.count,
                after_count: ta.count,
            })
        })
        .collect();
    rows.sort_by(|x, y| {
        y.change_bytes
            .unsigned_abs()
            .cmp(&x.change_bytes.unsigned_abs())
            .then(x.site.cmp(&y.site))
    });
    let left_out = rows.len().saturating_sub(top) as u64;
    rows.truncate(top);
    (rows, left_out)
}

/// The first plotted x and the span of the plotted axis (0 when there is
/// no plot).
fn axis(d: &DeviceReport) -> (f64, f64) {
    match (d.timeline.x.first(), d.timeline.x.last()) {
        (Some(&a), Some(&b)) => (a, (b - a).max(0.0)),
        _ => (0.0, 0.0),
    }
}

fn peak_instant(d: &DeviceReport) -> PeakInstant {
    let t = &d.timeline;
    let timed = t.x_unit == "time_us" && !t.x.is_empty();
    let (x0, span) = axis(d);
    let fraction = if timed && span > 0.0 {
        (t.peak_x - x0) / span
    } else {
        (d.peak.event_index + 1) as f64 / d.events.max(1) as f64
    };
    PeakInstant {
        event_index: d.peak.event_index,
        events: d.events,
        phase: d.peak.phase.clone(),
        t_us: timed.then_some(t.peak_x - x0),
        fraction: fraction.clamp(0.0, 1.0),
    }
}

fn plan_summary(p: &crate::schema::Plan) -> PlanSummary {
    PlanSummary {
        verdict: p.verdict,
        target_bytes: p.target_bytes,
        estimated_peak_bytes: p.estimated_peak_bytes,
        levers: p.steps.iter().map(|s| s.lever.clone()).collect(),
    }
}

/// The report's plotted totals with x scaled to 0..1.
fn normalised(d: &DeviceReport) -> NormalisedSeries {
    let t = &d.timeline;
    let (x0, span) = axis(d);
    let scale = |x: f64| if span > 0.0 { (x - x0) / span } else { 0.0 };
    let allocated = (0..t.x.len())
        .map(|k| {
            t.series
                .iter()
                .filter(|(c, _)| **c != Category::AllocatorCache)
                .map(|(_, s)| s.get(k).copied().unwrap_or(0))
                .sum()
        })
        .collect();
    NormalisedSeries {
        x_unit: t.x_unit.clone(),
        span,
        x: t.x.iter().map(|&x| scale(x)).collect(),
        allocated,
        reserved: t.reserved.clone(),
        peak_x: scale(t.peak_x),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str) -> Report {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("sample_traces")
            .join(name);
        crate::pipeline::analyze_path(&path, &crate::pipeline::AnalyzeOptions::new()).unwrap()
    }

    #[test]
    fn a_report_against_itself_is_all_zeros_and_passes_the_check() {
        let r = sample("train_adamw.snapshot.pickle.gz");
        let options = DiffOptions {
            max_growth_percent: Some(0.0),
            ..DiffOptions::default()
        };
        let d = diff(&r, &r, &options);
        assert_eq!(d.devices.len(), 1);
        let dev = &d.devices[0];
        assert_eq!(dev.peak.change_bytes, 0);
        assert_eq!(dev.peak.change_percent, Some(0.0));
        assert!(dev.by_category.iter().all(|c| c.change_bytes == 0));
        assert!(!dev.by_category.is_empty());
        assert!(dev.sites.is_empty() && dev.sites_left_out == 0);
        assert_eq!(dev.before_peak, dev.after_peak);
        assert!(!d.check_failed());
        assert!(d.only_before.is_empty() && d.only_after.is_empty());
    }

    #[test]
    fn sites_are_matched_by_text_and_sorted_by_the_size_of_their_change() {
        let before = sample("train_adamw.snapshot.pickle.gz");
        let mut after = before.clone();
        let allocations = &mut after.devices[0].peak.allocations;
        // Drop one site's allocations, and add a new one.
        let gone = allocations[0].site.clone();
        let gone_bytes: u64 = allocations
            .iter()
            .filter(|a| a.site == gone)
            .map(|a| a.size)
            .sum();
        allocations.retain(|a| a.site != gone);
        let mut new = allocations[0].clone();
        new.site = "new.py:1 grow".into();
        new.size = 1;
        allocations.push(new);
        after.devices[0].peak.allocated_bytes -= gone_bytes - 1;
        let options = DiffOptions {
            max_growth_percent: Some(50.0),
            ..DiffOptions::default()
        };
        let d = diff(&before, &after, &options);
        let sites = &d.devices[0].sites;
        assert_eq!(sites.len(), 2);
        assert_eq!(
            (sites[0].site.as_str(), sites[0].status),
            (&*gone, SiteStatus::Disappeared)
        );
        assert_eq!(sites[0].change_bytes, -(gone_bytes as i64));
        assert_eq!(
            (sites[1].status, sites[1].change_bytes, sites[1].after_count),
            (SiteStatus::Appeared, 1, 1)
        );
        assert!(d.devices[0].peak.change_bytes < 0);
        assert!(!d.check_failed());
        // The other way round the peak grows: over a threshold of 0%.
        let back = diff(
            &after,
            &before,
            &DiffOptions {
                max_growth_percent: Some(0.0),
                ..options
            },
        );
        assert!(back.check_failed());
        assert_eq!(
            back.check.unwrap().failed,
            [before.devices[0].device.clone()]
        );
    }

    #[test]
    fn one_device_each_is_compared_whatever_its_name() {
        let before = sample("train_adamw.snapshot.pickle.gz");
        let mut after = before.clone();
        after.devices[0].device = "cuda:3".into();
        let d = diff(&before, &after, &DiffOptions::default());
        assert_eq!(d.devices[0].after_device.as_deref(), Some("cuda:3"));
        // Picked by name: in BEFORE only.
        let name = before.devices[0].device.clone();
        let picked = DiffOptions {
            device: Some(name.clone()),
            ..DiffOptions::default()
        };
        let none = diff(&before, &after, &picked);
        assert!(none.devices.is_empty());
        assert_eq!(none.only_before, std::slice::from_ref(&name));
        assert!(none
            .diagnostics
            .iter()
            .any(|d| d.message.contains(&format!("no device `{name}`"))));
    }
}
