//! Analysis: replayed and classified devices → the [`Report`] (peak,
//! contributors, reserved peak, OOM findings, timeline for plots).

mod bands;
mod oom;
mod series;
mod site_names;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rayon::prelude::*;

use crate::classify::{self, Builtin, Classification, Phase, Rule, UserRule};
use crate::instant::At;
use crate::model::{Action, Category, DeviceTrace, Sites, Trace};
use crate::schema::{
    Attribution, BeforeRecordingPart, DeviceReport, LiveAllocation, Peak, Report, ReportedInstant,
    SegmentFrames, SegmentsView, SourceInfo, Tool, TopSite, SCHEMA_VERSION,
};
use crate::segments;
use crate::timeline::{self, DeviceTimeline, Interval, Replay};
use crate::vocabulary::site_facts;

mod stacks;

use series::timeline_series;
pub use series::{plot_bucket, plot_spans};

/// Knobs of the analysis that come from the command line.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Only this device (`cuda:0`, `cpu`, …); all when `None`.
    pub device: Option<String>,
    /// How many top sites to list.
    pub top: usize,
    pub user_rules: Vec<UserRule>,
    /// Points per category in the plotted timeline; 0 for outputs without
    /// plots (the series are left empty, saving a walk over every position).
    pub plot_points: usize,
    /// Report this instant instead of the peak (`--at`).
    pub at: Option<At>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            device: None,
            top: 10,
            user_rules: Vec::new(),
            plot_points: 2000,
            at: None,
        }
    }
}

impl Options {
    pub fn new() -> Options {
        Options::default()
    }
}

/// One device after replay and classification.
pub struct ClassifiedDevice {
    /// The replay and its bytes by category over time.
    pub timeline: DeviceTimeline,
    /// The classification of each of `timeline.replay.intervals`.
    pub classes: Vec<Classification>,
    /// What existed before recording, by part (see `classify::Inference`).
    pub before_recording: Vec<classify::Inference>,
    /// What each site's frames say (indexed by site), as classification read them.
    pub site_facts: Vec<classify::SiteFacts>,
}

impl ClassifiedDevice {
    /// Allocated and reserved bytes at a position, and what was live there.
    pub fn state_at(&self, position: u32) -> (u64, Option<u64>, Vec<(&Interval, &Classification)>) {
        let replay = &self.timeline.replay;
        let live = replay
            .intervals
            .iter()
            .zip(&self.classes)
            .filter(|(i, _)| i.live_at(position))
            .collect();
        (
            replay.allocated[position as usize],
            replay.reserved.as_ref().map(|r| r.get(position)),
            live,
        )
    }
}

/// Replays and classifies one device.
pub fn replay_and_classify(
    trace: &Trace,
    device: &DeviceTrace,
    user_rules: &[UserRule],
) -> ClassifiedDevice {
    // What classification needs of the events is independent of the replay.
    let (replay, context) = rayon::join(
        || timeline::replay(device),
        || classify::Context::new(trace, device),
    );
    let (replay, classes, before_recording) =
        classify::classify_device(&context, replay, user_rules);
    // The context's per-position tables (9 MB for 1M events) are freed
    // before the timeline's changes are made, not held beside them: peak
    // RSS of `memcut analyze snap-pyframes.pickle -f json -o /dev/null`
    // (`scripts/bench_inputs.sh`, medians of 3) 101 → 93 MB, given the
    // one malloc arena `main.rs` asks for. Only the sites' facts are kept.
    let site_facts = context.into_site_facts();
    ClassifiedDevice {
        timeline: DeviceTimeline::new(replay, |i| classes[i].category),
        classes,
        before_recording,
        site_facts,
    }
}

/// The devices the options select, in order.
pub fn selected<'t>(trace: &'t Trace, options: &Options) -> impl Iterator<Item = &'t DeviceTrace> {
    let wanted = options.device.clone();
    trace
        .devices
        .iter()
        .filter(move |d| wanted.as_ref().is_none_or(|w| w == &d.device))
}

/// Replays and classifies each device the options select, in order (a
/// caller may start on them, e.g. on a plan's demand, while [`report`] runs).
pub fn classify_devices(trace: &Trace, options: &Options) -> Vec<ClassifiedDevice> {
    // Each device on its own, side by side (trace-owlv2.json: its CPU
    // device's 6 ms beside the GPU's 25 ms).
    let devices: Vec<&DeviceTrace> = selected(trace, options).collect();
    devices
        .into_par_iter()
        .map(|device| replay_and_classify(trace, device, &options.user_rules))
        .collect()
}

/// The report on `classified`, made by [`classify_devices`] with the same
/// options; without plans (the caller adds them: see `crate::plan`).
pub fn report(
    trace: &Trace,
    source: SourceInfo,
    classified: &[ClassifiedDevice],
    options: &Options,
    at: &[AtResolved],
) -> Report {
    let mut diagnostics = trace.diagnostics.clone();
    let mut devices = Vec::new();
    // Per device: bytes at the peak that no event names.
    let mut unattributed = Vec::new();
    for ((device, cd), resolved) in selected(trace, options).zip(classified).zip(at) {
        for d in &cd.timeline.replay.diagnostics {
            let mut d = d.clone();
            if trace.devices.len() > 1 {
                d.message = format!("{}: {}", device.device, d.message);
            }
            diagnostics.push(d);
        }
        let at = match (&options.at, resolved) {
            (Some(at), Some(Ok(position))) => Some((at, *position)),
            (_, Some(Err(why))) => {
                diagnostics.push(crate::model::Diagnostic::warning(format!(
                    "{why}; this device's report shows its peak"
                )));
                None
            }
            _ => None,
        };
        let (report, before) = device_report(trace, device, cd, options, at);
        devices.push(report);
        unattributed.push(before);
    }
    diagnostics.extend(user_rule_notes(classified, &options.user_rules));
    if let Some(share) = unknown_share(&devices) {
        diagnostics.push(crate::model::Diagnostic::info(format!(
            "{share:.0}% of peak bytes could not be categorised (category `unknown`)"
        )));
    }
    for (d, before) in devices.iter().zip(unattributed) {
        if before * 5 >= d.peak.allocated_bytes.max(1) {
            diagnostics.push(crate::model::Diagnostic::info(format!(
                "{}: {} of the peak was allocated before profiling started and no event names it (weights, caches, …); start the profiler before the model is built, or record a memory snapshot, to categorise it",
                d.device,
                crate::units::human_bytes(before)
            )));
        }
    }
    diagnostics.sort();
    diagnostics.dedup();
    Report {
        schema_version: SCHEMA_VERSION,
        tool: Tool::default(),
        source,
        devices,
        diagnostics,
    }
}

/// How many allocations each `--rules` rule classified (over every device
/// analysed); a rule that classified none is a warning, since a rule that
/// never fires is almost always a pattern that does not match.
fn user_rule_notes(
    classified: &[ClassifiedDevice],
    rules: &[UserRule],
) -> Vec<crate::model::Diagnostic> {
    let mut counts = vec![0u64; rules.len()];
    for cd in classified {
        for (total, n) in counts
            .iter_mut()
            .zip(classify::user_rule_counts(&cd.classes, rules.len()))
        {
            *total += n;
        }
    }
    rules
        .iter()
        .zip(counts)
        .map(|(rule, n)| match n {
            0 => crate::model::Diagnostic::warning(format!(
                "rule `{}` (--rules) classified no allocation: `site_contains` is matched against each frame's path (with `/`), its function name and `path:LINE name`; an earlier rule wins",
                rule.name
            )),
            n => crate::model::Diagnostic::info(format!(
                "rule `{}` (--rules) classified {n} allocation{}",
                rule.name,
                if n == 1 { "" } else { "s" }
            )),
        })
        .collect()
}

fn unknown_share(devices: &[DeviceReport]) -> Option<f64> {
    // Summed wide: a damaged file's peaks may each be near `u64::MAX`.
    let (unknown, total) = devices.iter().fold((0u128, 0u128), |(u, t), d| {
        (
            u + u128::from(
                d.peak
                    .by_category
                    .get(&Category::Unknown)
                    .copied()
                    .unwrap_or(0),
            ),
            t + u128::from(d.peak.allocated_bytes),
        )
    });
    let share = unknown as f64 * 100.0 / total.max(1) as f64;
    (share >= 20.0).then_some(share)
}

/// A device's report, and the bytes live at its peak that were allocated
/// before profiling and that no event names.
fn device_report(
    trace: &Trace,
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
    options: &Options,
    at: Option<(&At, u32)>,
) -> (DeviceReport, u64) {
    let replay = &cd.timeline.replay;
    let peak_position = replay.peak_position();
    let position = at.map_or(peak_position, |(_, p)| p);
    let (allocated, reserved, live) = cd.state_at(position);
    let unattributed: u64 = live
        .iter()
        .filter(|(_, c)| c.rule == Rule::Builtin(Builtin::AllocatedBeforeProfilingUnattributed))
        .map(|(i, _)| i.size)
        .sum();
    let by_category = categories_at(&live, allocated, reserved);
    let attribution = attribution_at(&live, allocated);
    let before_recording = cd
        .before_recording
        .iter()
        .map(|b| {
            BeforeRecordingPart::new(
                b.category,
                b.bytes,
                b.rule.name(&options.user_rules),
                b.from.clone(),
            )
        })
        .collect();
    let label = at.map_or("peak".to_owned(), |(a, _)| format!("at {a}"));
    // The allocator's view (the largest part on snapshots with many
    // segments) is made beside the rows and the bands, which share the
    // sites' descriptions.
    let ((mut timeline, (segments, frames)), (allocations, stacks, bands)) = rayon::join(
        || {
            let (timeline, plotted_at) =
                timeline_series(device, &cd.timeline, options.plot_points, position);
            let view = segments_view(
                device,
                cd,
                label,
                position,
                &plotted_at,
                options.plot_points,
            );
            (timeline, view)
        },
        || {
            let mut names = SiteNames::default();
            let (allocations, mut stacks) = live_allocations(
                trace,
                device,
                replay,
                &cd.site_facts,
                &live,
                options,
                &mut names,
            );
            let bands = (options.plot_points > 0).then(|| {
                let spans = plot_spans(
                    cd.timeline.replay.positions() as usize,
                    options.plot_points,
                    position,
                );
                bands::bands(
                    &trace.sites,
                    device,
                    cd,
                    &mut stacks,
                    &mut names,
                    options,
                    &spans,
                )
            });
            (allocations, stacks, bands)
        },
    );
    timeline.segments = frames;
    if let Some(bands) = bands {
        timeline.bands = bands;
        bands::clamp(&mut timeline);
    }
    let top_sites = top_sites(&allocations, options.top);
    let event_index = position.saturating_sub(1) as u64;
    let ts_us = event_ts(device, position);
    let reserved_peak_position = replay.reserved_peak_position();
    let report = DeviceReport {
        device: device.device.clone(),
        events: replay.events as u64,
        baseline_bytes: replay.baseline_bytes,
        before_recording,
        capacity_bytes: device.capacity_bytes,
        peak: Peak {
            allocated_bytes: allocated,
            reserved_bytes: reserved,
            event_index,
            ts_us,
            phase: phase_name(trace, device, position),
            by_category,
            attribution,
            top_sites,
            allocations,
        },
        reserved_peak_bytes: reserved_peak_position
            .and_then(|p| replay.reserved.as_ref().map(|r| r.get(p))),
        reserved_peak_event_index: reserved_peak_position.map(|p| p.saturating_sub(1) as u64),
        ooms: oom::findings(device, cd, segments.as_ref()),
        findings: Vec::new(),
        what_if: None,
        next_step: None,
        plan: None,
        timeline,
        at: at.map(|(a, _)| ReportedInstant {
            spec: a.to_string(),
            event_index,
            peak_allocated_bytes: replay.allocated[peak_position as usize],
            peak_event_index: peak_position.saturating_sub(1) as u64,
        }),
        segments,
        stacks: stacks.finish(),
    };
    (report, unattributed)
}

/// `--at` on one device: the position it names, or why it names none
/// (`None` without `--at`).
pub type AtResolved = Option<std::result::Result<u32, String>>;

/// `--at` resolved once on each classified device; `Err` with the first
/// device's reason when it names an instant on none of them (a device where
/// it names none reports its peak, with a warning).
pub fn resolve_at(
    trace: &Trace,
    classified: &[ClassifiedDevice],
    options: &Options,
) -> std::result::Result<Vec<AtResolved>, String> {
    let Some(at) = &options.at else {
        return Ok(vec![None; classified.len()]);
    };
    let resolved: Vec<AtResolved> = selected(trace, options)
        .zip(classified)
        .map(|(device, cd)| Some(at.resolve(device, &cd.timeline.replay)))
        .collect();
    if resolved.iter().any(|r| matches!(r, Some(Ok(_)))) {
        return Ok(resolved);
    }
    match resolved.into_iter().flatten().find_map(|r| r.err()) {
        Some(why) => Err(why),
        None => Ok(Vec::new()),
    }
}

/// Every allocation in `live`, largest first, with its whole stack (in the
/// returned table), its site's short name and the events that made and
/// ended it.
fn live_allocations(
    trace: &Trace,
    device: &DeviceTrace,
    replay: &Replay,
    site_facts: &[classify::SiteFacts],
    live: &[(&Interval, &Classification)],
    options: &Options,
    names: &mut SiteNames,
) -> (Vec<LiveAllocation>, stacks::StackTableBuilder) {
    // Live allocations share sites and rules: describe each once, and the
    // rows share the text.
    let mut freed_at: HashMap<_, Option<Arc<str>>> = HashMap::new();
    let mut rule_names: HashMap<Rule, Arc<str>> = HashMap::new();
    let untracked: Arc<str> = "(allocated before recording; no event)".into();
    let mut rows: Vec<LiveAllocation> = live
        .iter()
        .map(|(i, c)| {
            let (alloc, free) = bands::life(device, replay, i);
            LiveAllocation {
                addr: i.addr,
                size: i.size,
                category: c.category,
                site: if i.origin == timeline::Origin::BeforeRecordingUnnamed {
                    // No event names it: the allocator's total says it is there.
                    untracked.clone()
                } else if let Some(Some(freed)) =
                    (i.origin == timeline::Origin::BeforeRecordingFreed).then(|| {
                        // Made before recording: its only frames may be its
                        // free's (a snapshot recorded with context="all").
                        freed_at
                            .entry(i.site)
                            .or_insert_with(|| {
                                site_facts[i.site as usize].free_stack.then(|| {
                                    format!("freed at {}", describe_site(&trace.sites, i.site))
                                        .into()
                                })
                            })
                            .clone()
                    })
                {
                    freed
                } else {
                    names.of(&trace.sites, i.site)
                },
                rule: rule_names
                    .entry(c.rule)
                    .or_insert_with(|| c.rule.name(&options.user_rules).into())
                    .clone(),
                stack: None,
                alloc,
                free,
            }
        })
        .collect();
    // Largest first, then by address, then by site (stable: equal rows keep
    // their order). The rows (112 bytes each, hundreds of thousands on a
    // big snapshot) are put in that order in place, so they are never held
    // twice.
    let mut order: Vec<(u64, u64, u32)> = rows
        .iter()
        .enumerate()
        .map(|(k, r)| (r.size, r.addr, k as u32))
        .collect();
    order.sort_unstable_by(|&(size_a, addr_a, a), &(size_b, addr_b, b)| {
        size_b
            .cmp(&size_a)
            .then(addr_a.cmp(&addr_b))
            .then_with(|| rows[a as usize].site.cmp(&rows[b as usize].site))
            .then(a.cmp(&b))
    });
    let mut order: Vec<u32> = order.into_iter().map(|(_, _, k)| k).collect();
    // The rows are `live`'s, in its order.
    let sites: Vec<crate::model::SiteId> = order.iter().map(|&k| live[k as usize].0.site).collect();
    permute(&mut rows, &mut order);
    // Stacks numbered in the order of the rows: the same bytes every run.
    let mut stacks = stacks::StackTableBuilder::default();
    for (row, site) in rows.iter_mut().zip(sites) {
        row.stack = stacks.stack_of(&trace.sites, site);
    }
    let allocations = rows;
    (allocations, stacks)
}

/// Puts `items` in `order` in place: afterwards `items[j]` is what was at
/// `items[order[j]]` (`order`, a permutation, is used up).
fn permute<T>(items: &mut [T], order: &mut [u32]) {
    const DONE: u32 = u32::MAX;
    for start in 0..order.len() {
        let mut j = start;
        while order[j] != DONE {
            let k = order[j] as usize;
            order[j] = DONE;
            if k == start {
                break;
            }
            items.swap(j, k);
            j = k;
        }
    }
}

/// The segments at the reported instant, at each OOM and at dump time;
/// and the viewer's segment maps at evenly spaced plotted points (`at`:
/// the position each shows) and at those instants.
fn segments_view(
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
    label: String,
    position: u32,
    at: &[u32],
    plot_points: usize,
) -> (Option<SegmentsView>, Option<SegmentFrames>) {
    let replay = &cd.timeline.replay;
    let mut instants = vec![segments::Instant {
        label,
        position,
        request: None,
    }];
    for (n, &k) in replay.ooms.iter().enumerate().take(SegmentsView::MAX_OOMS) {
        instants.push(segments::Instant {
            label: format!("oom {n}"),
            position: k + 1,
            request: Some(device.events[k as usize].size),
        });
    }
    instants.push(segments::Instant {
        label: "dump".into(),
        position: replay.events,
        request: None,
    });
    let left_out = replay.ooms.len().saturating_sub(SegmentsView::MAX_OOMS) as u64;
    let mut points: Vec<(usize, u32)> = Vec::new();
    let n = at.len();
    if n > 0 {
        let k = (segments::frame_count(device, replay) + 2).min(n);
        points = (0..k)
            .map(|j| {
                let i = if k > 1 { j * (n - 1) / (k - 1) } else { n - 1 };
                (i, at[i])
            })
            .collect();
        // Each instant at its point (the reported one first, when two
        // share a point).
        let bucket = plot_bucket(replay.positions() as usize, plot_points);
        for p in instants.iter().rev().map(|i| i.position) {
            let i = (p as usize / bucket).min(n - 1);
            points.retain(|&(j, _)| j != i);
            points.push((i, p));
        }
    }
    match segments::view(
        device,
        replay,
        &|k| cd.classes[k].category,
        &instants,
        left_out,
        &points,
    ) {
        Some((view, mut frames)) => {
            // Each state's x on the timeline's clock.
            for f in frames.iter_mut().flat_map(|f| &mut f.frames) {
                let position = match (f.exact, f.event_index) {
                    (true, _) => replay.events,
                    (false, e) => e.map_or(0, |e| e as u32 + 1),
                };
                f.x = bands::x_of(device, replay, position as usize);
            }
            (Some(view), frames)
        }
        None => (None, None),
    }
}

/// Bytes by category among `live`; the allocator total beyond the live sum
/// (if any) is `unknown`, and reserved − allocated is `allocator_cache`.
fn categories_at(
    live: &[(&Interval, &Classification)],
    allocated: u64,
    reserved: Option<u64>,
) -> BTreeMap<Category, u64> {
    let mut by: BTreeMap<Category, u64> = BTreeMap::new();
    let mut sum = 0u64;
    for (i, c) in live {
        let v = by.entry(c.category).or_default();
        *v = v.saturating_add(i.size);
        sum = sum.saturating_add(i.size);
    }
    if allocated > sum {
        *by.entry(Category::Unknown).or_default() += allocated - sum;
    } else if sum > allocated {
        // The allocator's own total (Chrome `Total Allocated`) is below what
        // the replay holds live (frees missing from the trace): scale the
        // categories down so that they add up to the total that is reported.
        trim_to(&mut by, sum, allocated);
    }
    if let Some(r) = reserved {
        if r > allocated {
            by.insert(Category::AllocatorCache, r - allocated);
        }
    }
    by.retain(|_, v| *v > 0);
    by
}

/// Observed, inferred and unknown bytes among `live`, summing to
/// `allocated` the way [`categories_at`] does (the total beyond the live sum
/// is unknown; a live sum above the total is scaled down).
fn attribution_at(live: &[(&Interval, &Classification)], allocated: u64) -> Attribution {
    // 0 observed, 1 inferred, 2 unknown.
    let mut by: BTreeMap<u8, u64> = BTreeMap::new();
    let mut sum = 0u64;
    for (i, c) in live {
        let kind = if c.category == Category::Unknown {
            2
        } else if c.rule.infers() {
            1
        } else {
            0
        };
        let v = by.entry(kind).or_default();
        *v = v.saturating_add(i.size);
        sum = sum.saturating_add(i.size);
    }
    if allocated > sum {
        *by.entry(2).or_default() += allocated - sum;
    } else if sum > allocated {
        trim_to(&mut by, sum, allocated);
    }
    let get = |k| by.get(&k).copied().unwrap_or(0);
    Attribution::new(get(0), get(1), get(2))
}

/// Scales `by` (summing to `sum`) down to sum to `target`, proportionally;
/// the rounding remainder goes to the largest entries first.
fn trim_to<K: Ord + Copy>(by: &mut BTreeMap<K, u64>, sum: u64, target: u64) {
    let mut given = 0u64;
    for v in by.values_mut() {
        *v = (*v as u128 * target as u128 / sum.max(1) as u128) as u64;
        given += *v;
    }
    let mut order: Vec<K> = by.keys().copied().collect();
    order.sort_by_key(|c| std::cmp::Reverse(by[c]));
    for c in order.into_iter().cycle().take((target - given) as usize) {
        *by.get_mut(&c).expect("present") += 1;
    }
}

fn top_sites(allocations: &[LiveAllocation], top: usize) -> Vec<TopSite> {
    /// Bytes, count, and bytes per stack of one (site, category) group.
    type Group = (u64, u64, BTreeMap<Option<u32>, u64>);
    let mut groups: HashMap<(&str, Category), Group> = HashMap::new();
    for a in allocations {
        let g = groups.entry((&*a.site, a.category)).or_default();
        g.0 = g.0.saturating_add(a.size);
        g.1 += 1;
        let s = g.2.entry(a.stack).or_default();
        *s = s.saturating_add(a.size);
    }
    let mut rows: Vec<TopSite> = groups
        .into_iter()
        .map(|((site, category), (bytes, count, by_stack))| {
            let mut stacks: Vec<(u32, u64)> = by_stack
                .into_iter()
                .filter_map(|(s, b)| Some((s?, b)))
                .collect();
            stacks.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            TopSite {
                site: site.to_owned(),
                category,
                bytes,
                count,
                stacks: stacks.into_iter().take(3).map(|(s, _)| s).collect(),
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.bytes
            .cmp(&a.bytes)
            .then(a.site.cmp(&b.site))
            .then(a.category.cmp(&b.category))
    });
    rows.truncate(top);
    rows
}

fn event_ts(device: &DeviceTrace, position: u32) -> Option<f64> {
    let index = (position as usize).saturating_sub(1);
    device.events.get(index).and_then(|e| e.ts())
}

/// Names a position for the planner's steps: `event N (phase)`, with the
/// report's phase naming.
pub fn describe_position(trace: &Trace, device: &DeviceTrace, position: usize) -> String {
    match position {
        0 => "start of recording".to_owned(),
        p => format!("event {} ({})", p - 1, phase_name(trace, device, p as u32)),
    }
}

/// The phase at a position: the enclosing annotation if any (e.g.
/// `Optimizer.step#AdamW.step`), else the phase of the latest allocation.
fn phase_name(trace: &Trace, device: &DeviceTrace, position: u32) -> String {
    if device.events.is_empty() {
        return "dump time (no history)".into();
    }
    if position == 0 {
        return "start of recording".into();
    }
    if let Some(ts) = event_ts(device, position) {
        if let Some(a) = trace
            .annotations
            .iter()
            .filter(|a| a.start_us <= ts && ts <= a.end_us && !a.name.starts_with("ProfilerStep"))
            .max_by(|a, b| a.start_us.total_cmp(&b.start_us))
        {
            return a.name.clone();
        }
    }
    let latest_alloc = device.events[..position as usize]
        .iter()
        .rev()
        .find(|e| e.action == Action::Alloc);
    let phase = latest_alloc.map_or(Phase::Unknown, |e| site_facts(&trace.sites, e.site).phase());
    match phase {
        Phase::Unknown => "unknown".into(),
        Phase::Init => "model init / load".into(),
        Phase::DataLoading => "data loading".into(),
        Phase::Forward => "forward".into(),
        Phase::Backward => "backward".into(),
        Phase::Optimizer => "optimizer step".into(),
        Phase::ZeroGrad => "zero_grad".into(),
    }
}

/// A short, readable name for a site: the operator that allocated and the
/// nearest line of the program that called it (`site_names.rs`).
pub fn describe_site(sites: &Sites, site: crate::model::SiteId) -> String {
    site_names::describe(sites, site)
}

/// Sites described once for a device's report, the text shared by the
/// rows and bands that name them (a description reads all the site's
/// frames: on trace-owlv2, describing each band's site anew was ~2% of the
/// run's samples).
#[derive(Default)]
pub(crate) struct SiteNames(
    HashMap<crate::model::SiteId, Arc<str>>,
    site_names::FrameTraits,
);

impl SiteNames {
    pub(crate) fn of(&mut self, sites: &Sites, site: crate::model::SiteId) -> Arc<str> {
        let SiteNames(names, known) = self;
        names
            .entry(site)
            .or_insert_with(|| site_names::describe_with(sites, site, known).into())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn permute_puts_each_item_where_the_order_says(
            order in (0usize..200).prop_flat_map(|n| Just((0..n as u32).collect::<Vec<_>>()).prop_shuffle())
        ) {
            let items: Vec<u32> = (0..order.len() as u32).map(|k| k * 10).collect();
            let mut permuted = items.clone();
            crate::analysis::permute(&mut permuted, &mut order.clone());
            let want: Vec<u32> = order.iter().map(|&k| items[k as usize]).collect();
            prop_assert_eq!(permuted, want);
        }
    }
}
