//! The pipeline, assembled (DESIGN.md §1): bytes → [`crate::input`] →
//! [`crate::analysis`] (replay, classify, report) and, beside the report,
//! the planner's demand → one plan per device, which this module puts into
//! the report. Each stage takes only the previous one's value.

use std::path::{Path, PathBuf};

use crate::classify::PhasePositions;
use crate::classify::{parse_rules, RulesError, UserRule};
use crate::error::{Error, Result};
use crate::model::{DeviceTrace, Diagnostic, Trace};
use crate::plan::demand::Demand;
use crate::plan::facts::{FactsInput, Mode, RunFacts};
use crate::plan::levers::{parse_levers, Lever, LeversError};
use crate::plan::pools::{Overlay, OverlayInput};
use crate::plan::whatif;
use crate::schema::{Finding, FindingKind, NextStep, WhatIf};
use crate::schema::{Report, SourceInfo};
use crate::timeline::Replay;
use crate::{analysis, findings, input, plan};

/// Everything `memcut analyze` can be told (`AnalyzeOptions::default()`,
/// then set what differs).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct AnalyzeOptions {
    /// Device filter, top sites, user rules, plot points.
    pub analysis: analysis::Options,
    /// Bounds on what an input may make memcut do (gzip, pickle).
    pub limits: input::Limits,
    /// Budget, headroom and levers for the cut plan.
    pub plan: plan::PlanOptions,
}

impl AnalyzeOptions {
    pub fn new() -> AnalyzeOptions {
        AnalyzeOptions::default()
    }
}

/// A `--levers` or `--rules` file that cannot be used. One line, the
/// message `memcut` prints after `memcut: error: `: `PATH: cannot read: …`,
/// `PATH: bad levers file: …`, `PATH: bad rules file: …`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsFileError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Levers { path: PathBuf, source: LeversError },
    #[error("{}: {source}", path.display())]
    Rules { path: PathBuf, source: RulesError },
}

fn read_options_file(path: &Path) -> std::result::Result<String, OptionsFileError> {
    std::fs::read_to_string(path).map_err(|source| OptionsFileError::Read {
        path: path.to_owned(),
        source,
    })
}

/// `--top` (and Python's `top=`): how many sites to list, a whole number.
pub fn parse_top(s: &str) -> std::result::Result<usize, String> {
    s.trim()
        .parse::<usize>()
        .map_err(|_| format!("`{s}` is not a number of sites (a whole number, 0 or more)"))
}

/// Reads and checks a levers file (`--levers`, for the `levers` of [`plan::PlanOptions`]).
/// The CLI and the Python binding both read it here, so its errors read the same.
pub fn read_levers_file(path: &Path) -> std::result::Result<Vec<Lever>, OptionsFileError> {
    parse_levers(&read_options_file(path)?).map_err(|source| OptionsFileError::Levers {
        path: path.to_owned(),
        source,
    })
}

/// Reads a rules file (`--rules`, for [`analysis::Options::user_rules`]).
pub fn read_rules_file(path: &Path) -> std::result::Result<Vec<UserRule>, OptionsFileError> {
    parse_rules(&read_options_file(path)?).map_err(|source| OptionsFileError::Rules {
        path: path.to_owned(),
        source,
    })
}

/// Runs the whole pipeline on a trace already parsed.
pub fn analyze_trace(
    trace: &Trace,
    source: SourceInfo,
    options: &AnalyzeOptions,
) -> Result<Report> {
    let devices = analysis::classify_devices(trace, &options.analysis);
    let at = analysis::resolve_at(trace, &devices, &options.analysis).map_err(Error::Usage)?;
    let selected: Vec<&DeviceTrace> = analysis::selected(trace, &options.analysis).collect();
    let what_if = &options.plan.what_if;
    // Where each phase allocated (read by the findings, the next step and
    // the planner's overlay alike), and the next step a recording of a
    // first training step predicts.
    let early: Vec<(PhasePositions, Option<findings::PredictedStep>)> = devices
        .iter()
        .zip(&selected)
        .map(|(d, device)| {
            let phases =
                PhasePositions::of(&d.timeline.replay.intervals, &d.classes, &device.events);
            let next = findings::next_step(trace, device, d, &phases);
            (phases, next)
        })
        .collect();
    // Where a next step is predicted, the plan and the what-if price it:
    // the run's peak is there, not in the recorded first step.
    let next_devices: Vec<Option<analysis::ClassifiedDevice>> = early
        .iter()
        .zip(&devices)
        .zip(&selected)
        .map(|(((_, next), d), device)| {
            let priced =
                may_get_a_plan(device, &d.timeline.replay, &options.plan) || !what_if.is_empty();
            next.as_ref()
                .filter(|_| priced)
                .map(|n| findings::next_step_device(d, n))
        })
        .collect();
    // The findings, and the planner's evidence and demand, need only the
    // classified timelines: made meanwhile. Evidence and demand only for
    // devices that can get a plan (a budget given, or one the file implies:
    // see `plan::budget_for`) or whose what-if scales by factors.
    let (mut report, planned) = rayon::join(
        || analysis::report(trace, source, &devices, &options.analysis, &at),
        || {
            devices
                .iter()
                .zip(&selected)
                .zip(early.iter().zip(&next_devices))
                .map(|((recorded, device), ((phases, next), next_d))| {
                    let wants_plan =
                        may_get_a_plan(device, &recorded.timeline.replay, &options.plan);
                    let priced = wants_plan || !what_if.is_empty();
                    // The findings (the recording's) and what the plan and
                    // the what-if price (the next step where one is
                    // predicted, else the recording) read nothing of each
                    // other: side by side.
                    let (found, planned) = rayon::join(
                        || {
                            let found = findings::find(trace, device, recorded, phases);
                            let kept = kept_gradients_curve(
                                &found,
                                recorded,
                                phases,
                                options.analysis.plot_points,
                            );
                            (found, kept)
                        },
                        || {
                            priced.then(|| {
                                let d = next_d.as_ref().unwrap_or(recorded);
                                let input = FactsInput {
                                    device,
                                    classes: &d.classes,
                                    dp_ranks: options.plan.dp_ranks,
                                };
                                let facts = RunFacts::gather(trace, &input);
                                let training = facts.mode.value == Some(Mode::Training);
                                let weight_sizes = crate::classify::weight_sizes(trace, device);
                                let attention_math =
                                    plan::fp32::attention_math(&trace.sites, &d.timeline);
                                let overlay = Overlay::build(
                                    &d.timeline,
                                    &d.classes,
                                    OverlayInput {
                                        phases,
                                        training,
                                        weight_sizes: &weight_sizes,
                                        attention_math: &attention_math,
                                        carried: next
                                            .as_ref()
                                            .filter(|_| next_d.is_some())
                                            .map_or(&[][..], |n| &n.carried_from_start),
                                    },
                                );
                                let demand = Demand::from_timeline(&d.timeline, overlay);
                                (facts, demand)
                            })
                        },
                    );
                    (found, planned, wants_plan)
                })
                .collect::<Vec<_>>()
        },
    );
    let mut warnings = Vec::new();
    for ((((d, ((found, kept_curve), planned, wants_plan)), device), recorded), (early, next_d)) in
        report
            .devices
            .iter_mut()
            .zip(planned)
            .zip(selected)
            .zip(&devices)
            .zip(early.iter().zip(&next_devices))
    {
        let next_step = early.1.as_ref();
        // The device the plan and the what-if price (the next step, where
        // predicted); the findings are the recording's.
        let cd = next_d.as_ref().unwrap_or(recorded);
        let catalogue = planned
            .as_ref()
            .map(|(facts, _)| options.plan.levers(facts))
            .unwrap_or_default();
        let checkpointed = what_if
            .iter()
            .any(|l| l == whatif::CHECKPOINTING)
            .then(|| plan::checkpointing::model(&trace.sites, &cd.timeline, &cd.classes))
            .flatten();
        let kv_limited = what_if
            .iter()
            .any(|l| l == whatif::KV_LIMIT)
            .then(|| plan::kv_limit::model(&cd.timeline, &cd.classes))
            .flatten();
        // The findings are priced on the recording.
        let peak = recorded.timeline.replay.peak_position();
        let before = recorded.timeline.replay.allocated[peak as usize];
        let found = ungated(found, recorded, before);
        let demand = planned.as_ref().map(|(_, demand)| demand);
        let sim_on = |on: &analysis::ClassifiedDevice, demand, levers: &[String]| {
            let input = whatif::Input {
                timeline: &on.timeline,
                classes: &on.classes,
                findings: &found,
                demand,
                catalogue: &catalogue,
                checkpointing: checkpointed.as_ref(),
                kv_limited: kv_limited.as_ref(),
                phases: Some(&early.0),
                events: &device.events,
            };
            whatif::what_if(&input, levers)
        };
        // A what-if: on the next step where one is predicted.
        let sim = |levers: &[String]| sim_on(cd, demand, levers);
        // A finding's fix: on the recording (the demand, when it is the
        // next step's, is another timeline's).
        let sim_recorded =
            |levers: &[String]| sim_on(recorded, demand.filter(|_| next_d.is_none()), levers);
        d.findings = found
            .iter()
            .filter_map(|f| {
                let intervals = &recorded.timeline.replay.intervals;
                let (peak_after, curve, bytes_at_peak) = match &kept_curve {
                    // A catalogue lever's finding, priced by its own curve
                    // (the what-if gives the same peak through the
                    // demand); at the peak, the bytes that curve removes.
                    Some(kept) if f.kind == FindingKind::GradientsKeptThroughForward => {
                        let removed = before.saturating_sub(kept.at_peak);
                        (kept.max, kept.series.clone(), removed)
                    }
                    _ => {
                        if cannot_stand(&found, f.kind, intervals, peak, before) {
                            return None;
                        }
                        let after = sim_recorded(&[f.kind.lever().to_owned()]).ok()?;
                        let live = |i: usize| intervals[i].live_at(peak);
                        let bytes = if f.kind == FindingKind::OptimizerStateReplacedOutOfPlace {
                            // The second copies live at the peak: old state
                            // whose replacement was already made.
                            f.fixed_ends
                                .iter()
                                .filter(|&&(i, end)| live(i) && end <= peak)
                                .map(|&(i, _)| intervals[i].size)
                                .sum()
                        } else {
                            f.intervals
                                .iter()
                                .filter(|&&i| live(i))
                                .map(|&i| intervals[i].size)
                                .sum()
                        };
                        let series = Plotted::of(&after.curve, options.analysis.plot_points);
                        (after.peak_allocated, series, bytes)
                    }
                };
                if !stands(before, peak_after) {
                    return None;
                }
                let saving = before.saturating_sub(peak_after);
                Some(Finding {
                    kind: f.kind,
                    bytes_at_peak,
                    evidence: f.evidence.clone(),
                    fix: f.kind.lever().to_owned(),
                    saving_bytes: saving,
                    peak_after_bytes: peak_after,
                    series: curve,
                })
            })
            .collect();
        d.next_step = next_step.filter(|n| n.higher).map(|n| NextStep {
            peak_allocated_bytes: n.peak_allocated,
            peak_event_index: n.position.saturating_sub(1) as u64,
            carried_bytes: n.carried,
            evidence: n.evidence.clone(),
            series: Plotted::of(&n.curve, options.analysis.plot_points),
        });
        d.findings.extend(findings::fragmentation_at_oom(
            &d.ooms,
            d.segments.as_ref(),
            before,
        ));
        d.findings.extend(findings::memory_outside_allocator(
            &d.ooms,
            plan::capacity(d.capacity_bytes, &options.plan),
            before,
        ));
        if !what_if.is_empty() {
            match sim(what_if) {
                Ok(o) => {
                    let mut because = o.because;
                    if let Some(n) = next_step.filter(|_| next_d.is_some()) {
                        because.insert(0, next_step_said(n, false));
                    }
                    d.what_if = Some(WhatIf {
                        levers: o.levers,
                        peak_allocated_bytes: o.peak_allocated,
                        peak_reserved_bytes: o.peak_reserved,
                        peak_event_index: o.position.saturating_sub(1) as u64,
                        estimate: o.estimate,
                        because,
                        series: Plotted::of(&o.curve, options.analysis.plot_points),
                    })
                }
                Err(why) => warnings.push(Diagnostic::warning(format!("{}: {why}", d.device))),
            }
        }
        let Some((mut facts, demand)) = planned.filter(|_| wants_plan) else {
            continue;
        };
        if let Some(overlay) = demand.overlay() {
            facts.complete(&demand.max_by_pool(), overlay, &d.peak.allocations);
        }
        // The findings' fixes, in order; the demand with the first k+1 of
        // them applied is made when the plan tries the k-th. A fix that is
        // a catalogue lever (`zero_grad_set_to_none`) is the search's: it
        // costs nothing there too, so it comes first all the same.
        let fixes: Vec<plan::Fix> = d
            .findings
            .iter()
            .filter(|f| f.kind.modelled_by_finding())
            .map(|f| plan::Fix {
                lever: f.fix.clone(),
                action: f.kind.action().to_owned(),
                because: f.evidence.first().cloned().unwrap_or_default(),
                estimate_reason: f.kind.estimate_reason().map(str::to_owned),
            })
            .collect();
        let fix_input = whatif::Input {
            timeline: &cd.timeline,
            classes: &cd.classes,
            findings: &found,
            demand: Some(&demand),
            catalogue: &[],
            checkpointing: None,
            kv_limited: None,
            phases: None,
            events: &[],
        };
        let fixed_demand = |k: usize| {
            let levers: Vec<String> = fixes[..=k].iter().map(|f| f.lever.clone()).collect();
            whatif::edited_demand(&fix_input, &demand, &levers)
        };
        // The levers the plan prices with the run's own model
        // (plan::modelled_levers): the what-if's models when it made them,
        // else made once, when the search first tries each.
        let ckpt_made = std::cell::OnceCell::new();
        let ckpt = || {
            checkpointed.as_ref().or_else(|| {
                ckpt_made
                    .get_or_init(|| {
                        plan::checkpointing::model(&trace.sites, &cd.timeline, &cd.classes)
                    })
                    .as_ref()
            })
        };
        let kv_made = std::cell::OnceCell::new();
        let kv = || {
            kv_limited.as_ref().or_else(|| {
                kv_made
                    .get_or_init(|| plan::kv_limit::model(&cd.timeline, &cd.classes))
                    .as_ref()
            })
        };
        let modelled_demand = |k: Option<usize>, names: &[&str]| {
            let mut input = whatif::Input {
                catalogue: &catalogue,
                phases: Some(&early.0),
                events: &device.events,
                ..fix_input
            };
            for &name in names {
                match name {
                    whatif::CHECKPOINTING => input.checkpointing = Some(ckpt()?),
                    whatif::KV_LIMIT => input.kv_limited = Some(kv()?),
                    whatif::HALVE_MICRO_BATCH => {}
                    _ => return None,
                }
            }
            let levers: Vec<String> = k
                .map_or(&[][..], |k| &fixes[..=k])
                .iter()
                .map(|f| f.lever.clone())
                .chain(names.iter().map(|n| n.to_string()))
                .collect();
            whatif::modelled_demand(&input, &demand, &levers)
        };
        let describe = |p: usize| analysis::describe_position(trace, device, p);
        let input = plan::PlanInput {
            demand: &demand,
            facts: &facts,
            describe: &describe,
            fixes: &fixes,
            fixed_demand: &fixed_demand,
            modelled_demand: &modelled_demand,
        };
        let state = plan::DeviceState {
            ooms: &d.ooms,
            capacity_bytes: d.capacity_bytes,
            outside_allocator_bytes: d
                .findings
                .iter()
                .find(|f| f.kind == FindingKind::MemoryOutsideAllocator)
                .map(|f| f.saving_bytes),
            next_step: next_d.is_some(),
        };
        d.plan = plan::plan_for(&state, &input, &options.plan);
        if let (Some(plan), Some(next)) = (d.plan.as_mut(), next_step.filter(|_| next_d.is_some()))
        {
            let said = format!("; {}", next_step_said(next, true));
            plan.reason.push_str(&said);
            if let Some(h) = plan.headline.as_mut() {
                h.reason.push_str(&said);
            }
        }
    }
    report.diagnostics.extend(warnings);
    Ok(report)
}

/// What a plan (`plan`) or a what-if made for the next step a recording of
/// a first step predicts says of it: its peak, verdict and cuts are that
/// step's (the optimizer's state the first step made stays alive through
/// it), which is at least the recorded one at every point.
fn next_step_said(next: &findings::PredictedStep, plan: bool) -> String {
    let peak = crate::units::human_bytes(next.peak_allocated);
    let what = if plan { "planned for" } else { "on" };
    match (next.higher, plan) {
        (true, true) => format!(
            "{what} the next step, predicted at {peak} (`next_step`: the optimizer's state this first step made stays alive through it)"
        ),
        (true, false) => format!(
            "{what} the next step, predicted at {peak} (`next_step`): the run's peak, with the optimizer's state this first step made alive through it"
        ),
        (false, _) => format!(
            "{what} the next step as this first step predicts it (peak {peak}, within 1% of this step's): a cut in this step alone does not lower the run's peak"
        ),
    }
}

/// Whether a finding whose fix only frees its allocations earlier (its
/// `fixed_ends`: the what-if of its lever moves nothing else) cannot
/// stand, known without re-simulating the run: the new curve at the old
/// peak is `before` less what the fix frees there, and the new peak is at
/// least that, so the fix lowers the peak by at most the bytes it frees at
/// the peak. Below 1% of it, the walk over every position the what-if
/// makes is skipped (snap-cs336: the out-of-place optimizer check, ~30 ms
/// of a 0.5 s run). Counted loosely (an allocation listed twice counts
/// twice), so that the bound only ever skips a finding that cannot stand.
fn cannot_stand(
    found: &[findings::Found],
    kind: FindingKind,
    intervals: &[crate::timeline::Interval],
    peak: u32,
    before: u64,
) -> bool {
    freed_at_peak(found, kind, intervals, peak)
        .is_some_and(|freed| !stands(before, before.saturating_sub(freed)))
}

/// What the fix of `kind`'s finding frees at the peak, counted loosely
/// (see [`cannot_stand`]); `None` where the what-if of its lever does more
/// than free the finding's allocations earlier, or there is no finding.
fn freed_at_peak(
    found: &[findings::Found],
    kind: FindingKind,
    intervals: &[crate::timeline::Interval],
    peak: u32,
) -> Option<u64> {
    if FindingKind::for_lever(kind.lever()) != Some(kind) {
        return None;
    }
    // The what-if applies the first finding of the kind.
    let f = found.iter().find(|f| f.kind == kind)?;
    Some(
        f.fixed_ends
            .iter()
            .filter(|&&(i, end)| end <= peak && peak < intervals[i].end)
            .map(|&(i, _)| intervals[i].size)
            .fold(0u64, u64::saturating_add),
    )
}

/// Whether a finding's fix lowers the peak `before` by at least 1% when
/// applied alone: what a finding must do to be reported (less is not
/// worth a reader's attention, nor a false alarm's risk).
fn stands(before: u64, peak_after: u64) -> bool {
    before.saturating_sub(peak_after) * 100 >= before
}

/// The findings with each gate (`Found::after`: autocast's copies, which a
/// graph autograd keeps saves until `inference_mode`) dropped where the
/// gating finding does not stand: applied alone its fix changes the peak
/// by less than 1%, so no graph worth naming holds what it gates (a
/// `no_grad` BERT under autocast, whose Chrome trace has a release that
/// reads as a small graph).
fn ungated(
    mut found: Vec<findings::Found>,
    cd: &analysis::ClassifiedDevice,
    before: u64,
) -> Vec<findings::Found> {
    let gates: Vec<FindingKind> = found.iter().filter_map(|f| f.after).collect();
    if gates.is_empty() {
        return found;
    }
    let input = whatif::Input {
        timeline: &cd.timeline,
        classes: &cd.classes,
        findings: &found,
        demand: None,
        catalogue: &[],
        checkpointing: None,
        kv_limited: None,
        phases: None,
        events: &[],
    };
    let fallen: Vec<FindingKind> = gates
        .into_iter()
        .filter(|k| {
            whatif::what_if(&input, &[k.lever().to_owned()])
                .is_ok_and(|o| !stands(before, o.peak_allocated))
        })
        .collect();
    for f in &mut found {
        if f.after.is_some_and(|k| fallen.contains(&k)) {
            f.after = None;
        }
    }
    found
}

/// The allocated curve with the gradients kept across steps removed,
/// for a device with a `gradients_kept_through_forward` finding: what its
/// fix (`zero_grad_set_to_none`) leaves, read off the windows the planner's
/// lever removes, without gathering the planner's facts and demand.
fn kept_gradients_curve(
    found: &[findings::Found],
    d: &analysis::ClassifiedDevice,
    phases: &PhasePositions,
    points: usize,
) -> Option<KeptCurve> {
    found
        .iter()
        .any(|f| f.kind == FindingKind::GradientsKeptThroughForward)
        .then(|| {
            let changes = Overlay::kept_across_steps_changes(&d.timeline, &d.classes, phases);
            let peak = d.timeline.replay.peak_position() as usize;
            let mut kept = KeptCurve {
                max: 0,
                at_peak: 0,
                series: Vec::new(),
            };
            let mut plot = Plotted::new(d.timeline.replay.allocated.len(), points);
            whatif::curve_without(&d.timeline, &changes, |p, v| {
                kept.max = kept.max.max(v);
                if p == peak {
                    kept.at_peak = v;
                }
                plot.push(v);
            });
            kept.series = plot.finish();
            kept
        })
}

/// What the pricing of a `gradients_kept_through_forward` finding reads
/// of the curve its fix leaves: its highest value, its value at the
/// recorded peak, and its plotted points (see [`Plotted`]).
struct KeptCurve {
    max: u64,
    at_peak: u64,
    series: Vec<u64>,
}

/// A curve over positions on the report's plotted points, fed one value
/// at a time: the largest value of each bucket of positions, the
/// timeline's buckets.
struct Plotted {
    bucket: usize,
    filled: usize,
    current: u64,
    out: Vec<u64>,
}

impl Plotted {
    fn new(len: usize, points: usize) -> Plotted {
        Plotted {
            // No points: nothing is kept (a bucket no run fills).
            bucket: if points == 0 || len == 0 {
                usize::MAX
            } else {
                analysis::plot_bucket(len, points)
            },
            filled: 0,
            current: 0,
            out: Vec::new(),
        }
    }

    fn push(&mut self, v: u64) {
        self.current = if self.filled == 0 {
            v
        } else {
            self.current.max(v)
        };
        self.filled += 1;
        if self.filled == self.bucket {
            self.out.push(self.current);
            self.filled = 0;
        }
    }

    fn finish(mut self) -> Vec<u64> {
        if self.filled > 0 && self.bucket != usize::MAX {
            self.out.push(self.current);
        }
        self.out
    }

    /// The plotted points of a whole curve.
    fn of(curve: &[u64], points: usize) -> Vec<u64> {
        let mut plot = Plotted::new(curve.len(), points);
        curve.iter().for_each(|&v| plot.push(v));
        plot.finish()
    }
}

/// Whether [`plan::plan_for`] can find a budget for a device (see
/// [`plan::may_have_budget`]). Without one no plan is made, so the
/// planner's evidence is not gathered (about a fifth of `analyze`'s CPU
/// time on a 1M-entry snapshot).
fn may_get_a_plan(device: &DeviceTrace, replay: &Replay, options: &plan::PlanOptions) -> bool {
    plan::may_have_budget(options, device.capacity_bytes, !replay.ooms.is_empty())
}

/// Reads, parses and analyses one input. `display_path` is what the report
/// names as its source (as given, never made absolute).
pub fn analyze_reader<R: std::io::Read>(
    reader: R,
    display_path: &str,
    size_bytes: u64,
    options: &AnalyzeOptions,
) -> Result<Report> {
    let trace = input::read_trace(reader, &options.limits)?;
    analyze_owned(trace, display_path, size_bytes, options)
}

/// Analyses a trace held in memory (e.g. bytes handed over from Python);
/// `display_path` is what the report names as its source.
pub fn analyze_bytes(bytes: &[u8], display_path: &str, options: &AnalyzeOptions) -> Result<Report> {
    let trace = input::parse_bytes(bytes, &options.limits)?;
    analyze_owned(trace, display_path, bytes.len() as u64, options)
}

/// Reads, parses and analyses one file.
pub fn analyze_path(path: &Path, options: &AnalyzeOptions) -> Result<Report> {
    if path.is_dir() {
        return Err(Error::IsDirectory);
    }
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let trace = input::read_file(path, &options.limits)?;
    analyze_owned(trace, &path.display().to_string(), size, options)
}

/// A JSON report memcut wrote (read back as it is: `memcut diff` takes
/// saved reports), or the analysis of any other input. Errors are the
/// one-line message, without the path.
pub fn report_or_analysis(
    path: &Path,
    options: &AnalyzeOptions,
) -> std::result::Result<Report, String> {
    use std::io::Read;
    let mut head = [0u8; 24];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| e.to_string())?;
    if head[..n].starts_with(b"{\n  \"schema_version\"") {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        return Report::from_json(&text).map_err(|e| format!("not a memcut analysis report: {e}"));
    }
    analyze_path(path, options).map_err(|e| e.to_string())
}

/// Inputs from this size on are big ones ([`release_freed_heap`],
/// [`analyze_owned`]); the corpus's largest is 3.9 MB.
const BIG_INPUT: u64 = 16 << 20;

/// [`analyze_parsed`], then the trace freed: a big input's on a thread of
/// its own, so that the caller goes on (`memcut analyze` writes the report
/// and exits) instead of waiting for the frees (trace-owlv2.json: 3.5 ms of
/// the process's ~300). A small one, or one whose thread cannot start, is
/// freed here.
fn analyze_owned(
    trace: Trace,
    display_path: &str,
    size_bytes: u64,
    options: &AnalyzeOptions,
) -> Result<Report> {
    let report = analyze_parsed(&trace, display_path, size_bytes, options);
    crate::aside::free(trace, size_bytes >= BIG_INPUT);
    report
}

/// Hands back to the system the pages of the heap that the parse freed.
/// A parse leaves most of what it allocated free but held by malloc (the
/// memo's strings and lists, the read window's buffers: small blocks in
/// the middle of the heap, which `free` never returns); the analysis then
/// allocates in fresh pages beside them, so the process's peak RSS was the
/// two together. Measured on the cs336-nothanmin forward snapshot × 112
/// (`/tmp/big_nothanmin.pickle`, 243.4 MiB, `memcut analyze … -f json`):
/// after the parse 61.7 MiB in use and 63.0 MiB free in the heap; peak RSS
/// 254–260 MiB (1.05× the file) before, 214–224 MiB (0.88–0.92×) with
/// this call, which took 6 ms. Only after the parse of a big input: the
/// pages it returns are faulted in again by the next allocations, and over
/// `memcut batch` of many small files (the corpus copied 20 times, 1,020
/// files under 4 MB) a call after each file added 1.5–2 s of system time
/// to ~24 s of CPU. glibc only; elsewhere it does nothing.
fn release_freed_heap(input_bytes: u64) {
    if input_bytes < BIG_INPUT {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: `malloc_trim` takes malloc's own lock and only returns
        // free pages to the system; nothing the process holds moves.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// Analyses a parsed trace; a `device` option that names no device of the
/// trace is an error listing the ones it has.
fn analyze_parsed(
    trace: &Trace,
    display_path: &str,
    size_bytes: u64,
    options: &AnalyzeOptions,
) -> Result<Report> {
    release_freed_heap(size_bytes);
    if let Some(wanted) = &options.analysis.device {
        if !trace.devices.iter().any(|d| &d.device == wanted) {
            let have: Vec<&str> = trace.devices.iter().map(|d| d.device.as_str()).collect();
            return Err(Error::NoSuchDevice {
                device: wanted.clone(),
                available: if have.is_empty() {
                    "none".into()
                } else {
                    have.join(", ")
                },
            });
        }
    }
    let mut source = SourceInfo::new(display_path, trace.format.as_str(), size_bytes);
    source.distributed = trace.distributed;
    analyze_trace(trace, source, options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Action, DeviceTrace, Event, Format};
    use crate::report::{render, OutputFormat};
    use crate::schema::Verdict;

    /// Issue 33 item 8: memory from before recording whose only frames are
    /// its free's (a snapshot recorded with `context="all"`) is shown as
    /// "freed at …", and autograd dropping a saved tensor there says it was
    /// an activation.
    #[test]
    fn memory_known_only_by_its_free_is_shown_and_read_as_freed() {
        let mut trace = Trace::new(Format::TorchSnapshot);
        let frames: Vec<crate::model::Frame> = [
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free",
            "torch::autograd::SavedVariable::reset_data()",
            "torch::autograd::generated::BmmBackward0::release_variables()",
        ]
        .iter()
        .map(|n| crate::model::Frame {
            filename: 0,
            line: 0,
            name: trace.sites.intern_str(n),
        })
        .collect();
        let site = trace.sites.intern_site(&frames);
        let mut events = vec![Event::new(Action::Alloc, 0x9000, 1 << 20)];
        let mut freed = Event::new(Action::FreeCompleted, 0x1000, 8 << 20);
        freed.site = site;
        events.push(freed);
        trace.devices.push(DeviceTrace {
            events,
            ..DeviceTrace::default()
        });
        let source = SourceInfo::new("synthetic", "torch_snapshot", 0);
        let report = analyze_trace(&trace, source, &AnalyzeOptions::new()).unwrap();
        let a = report.devices[0]
            .peak
            .allocations
            .iter()
            .find(|a| a.size == 8 << 20)
            .expect("the tensor from before recording");
        assert_eq!(&*a.rule, "existed_before_trace_saved_for_backward");
        assert_eq!(a.category, crate::model::Category::Activation);
        assert!(a.site.starts_with("freed at "), "{}", a.site);
    }

    /// Four 1 GiB allocations, then a failed 3 GiB request with 1 GiB free
    /// (no segments: reserved memory unknown).
    fn synthetic_oom_trace() -> Trace {
        let mut trace = Trace::new(Format::TorchSnapshot);
        let mut events = Vec::new();
        for k in 0..4u64 {
            events.push(Event::new(Action::Alloc, 0x1000 * (k + 1), 1 << 30));
        }
        events.push(Event::oom(3 << 30, 1 << 30));
        trace.devices.push(DeviceTrace {
            device: "cuda:0".into(),
            events,
            ..DeviceTrace::default()
        });
        trace
    }

    #[test]
    fn oom_budget_and_oom_plan() {
        let trace = synthetic_oom_trace();
        let source = SourceInfo::new("synthetic", "torch_snapshot", 0);
        let report = analyze_trace(&trace, source, &AnalyzeOptions::new()).unwrap();
        let d = &report.devices[0];
        let plan = d.plan.as_ref().expect("an OOM gives a budget");
        // Budget = free (1 GiB) + held (4 GiB allocated, no reserved curve).
        assert_eq!(plan.budget_bytes, 5 << 30);
        assert!(
            plan.budget_source.starts_with("OOM at event 4"),
            "{}",
            plan.budget_source
        );
        let oom = plan.oom_plan.as_ref().expect("oom plan");
        assert_eq!(oom.event_index, 4);
        assert_eq!(oom.requested_bytes, 3 << 30);
        assert_eq!(oom.demand_bytes, 7 << 30);
        // Nothing in the catalogue shrinks `unknown`: 7 GiB cannot fit 4.5 GiB.
        assert_eq!(oom.verdict, Verdict::DoesNotFit);
        assert_eq!(oom.gap_bytes, oom.estimated_peak_bytes - plan.target_bytes);
        // It renders.
        let md = render(&report, OutputFormat::Md);
        assert!(md.contains("At the OOM (event 4)"), "{md}");
        let text = render(&report, OutputFormat::Text);
        assert!(
            text.contains("at the OOM (event 4): does_not_fit"),
            "{text}"
        );
    }

    /// `cannot_stand`'s bound against the what-if it spares: on every committed
    /// sample of the findings' pairs and tests/data, each finding whose fix
    /// the what-if models from its own allocations lowers the peak by no
    /// more than the bound says (the bytes its fix frees at the peak), so a
    /// finding skipped by the bound is one the what-if would not let stand.
    #[test]
    fn a_fix_lowers_the_peak_by_at_most_what_it_frees_there() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in [
            "sample_traces",
            "sample_traces/pairs/oop_check",
            "sample_traces/pairs/oop_fresh",
            "sample_traces/pairs/findings_check",
            "tests/data",
        ] {
            let mut here: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| {
                    let name = p.file_name().unwrap().to_string_lossy();
                    name.contains(".pickle") || name.contains("trace.json")
                })
                .collect();
            here.sort();
            files.extend(here);
        }
        let (mut checked, mut skipped) = (0, 0);
        let options = AnalyzeOptions::new();
        for path in &files {
            let Ok(trace) = input::read_file(path, &options.limits) else {
                continue;
            };
            let devices = analysis::classify_devices(&trace, &options.analysis);
            for (d, device) in devices
                .iter()
                .zip(analysis::selected(&trace, &options.analysis))
            {
                let phases =
                    PhasePositions::of(&d.timeline.replay.intervals, &d.classes, &device.events);
                let peak = d.timeline.replay.peak_position();
                let before = d.timeline.replay.allocated[peak as usize];
                let found = ungated(findings::find(&trace, device, d, &phases), d, before);
                let intervals = &d.timeline.replay.intervals;
                for f in &found {
                    if FindingKind::for_lever(f.kind.lever()) != Some(f.kind) {
                        continue;
                    }
                    let input = whatif::Input {
                        timeline: &d.timeline,
                        classes: &d.classes,
                        findings: &found,
                        demand: None,
                        catalogue: &[],
                        checkpointing: None,
                        kv_limited: None,
                        phases: Some(&phases),
                        events: &device.events,
                    };
                    let after = whatif::what_if(&input, &[f.kind.lever().to_owned()]).unwrap();
                    let freed = freed_at_peak(&found, f.kind, intervals, peak).unwrap();
                    let saving = before.saturating_sub(after.peak_allocated);
                    assert!(
                        saving <= freed,
                        "{}: {:?} lowers the peak by {saving} B, more than the {freed} B it frees there",
                        path.display(),
                        f.kind,
                    );
                    let skip = cannot_stand(&found, f.kind, intervals, peak, before);
                    assert!(!(skip && stands(before, after.peak_allocated)));
                    checked += 1;
                    skipped += usize::from(skip);
                }
            }
        }
        eprintln!(
            "{} files, {checked} findings checked, {skipped} skipped by the bound",
            files.len()
        );
        assert!(
            checked > 0 && skipped > 0,
            "{checked} checked, {skipped} skipped"
        );
    }
    /// A curve over positions on the report's plotted points, from the
    /// whole curve at once: the largest value of each bucket of positions.
    fn plotted(curve: &[u64], points: usize) -> Vec<u64> {
        if points == 0 || curve.is_empty() {
            return Vec::new();
        }
        let bucket = analysis::plot_bucket(curve.len(), points);
        curve
            .chunks(bucket)
            .map(|c| c.iter().copied().max().unwrap_or(0))
            .collect()
    }

    /// The curves are plotted as they are made: the same points as
    /// `plotted` over the whole curve.
    #[test]
    fn plotted_fed_one_value_at_a_time_is_plotted() {
        for len in [0usize, 1, 2, 7, 100, 1001, 4099] {
            for points in [0usize, 1, 3, 10, 500, 2000] {
                let curve: Vec<u64> = (0..len).map(|i| (i * 7919 % 13) as u64).collect();
                let mut fed = Plotted::new(len, points);
                curve.iter().for_each(|&v| fed.push(v));
                assert_eq!(
                    fed.finish(),
                    plotted(&curve, points),
                    "{len} values, {points} points"
                );
            }
        }
    }
}
