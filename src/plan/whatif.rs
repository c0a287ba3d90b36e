//! What-if: a device's whole timeline re-simulated with levers applied in
//! order (DESIGN.md §6b). A finding's fix is modelled from the run itself:
//! the finding names the allocations it changes and where each would be
//! freed instead ([`crate::findings::Found::fixed_ends`]), and the new curve
//! is the replayed one minus those bytes where they are no longer live. A
//! catalogue lever whose structure the trace does not show scales its pools
//! by its documented factor, and the result says `estimate`.

use std::collections::HashMap;

use crate::classify::Classification;
use crate::findings::Found;
use crate::model::Category;
use crate::schema::FindingKind;
use crate::timeline::DeviceTimeline;

use super::checkpointing::Checkpointed;
use super::demand::{allocator_overhead, scale, Demand, Row};
use super::kv_limit::KvLimited;
use super::levers::Lever;
use super::pools::{Part, NPOOL};
use super::NCAT;

/// The re-simulated peak.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub levers: Vec<String>,
    pub peak_allocated: u64,
    /// The position of the new peak (earliest on ties).
    pub position: u32,
    /// With the allocator's overhead at the old peak carried over, when
    /// reserved memory is known.
    pub peak_reserved: Option<u64>,
    pub estimate: bool,
    pub because: Vec<String>,
    /// Allocated bytes at every position after the levers.
    pub curve: Vec<u64>,
}

/// What the re-simulation reads of a device.
pub struct Input<'a> {
    pub timeline: &'a DeviceTimeline,
    pub classes: &'a [Classification],
    pub findings: &'a [Found],
    /// The demand by pool, needed only when a lever is a factor.
    pub demand: Option<&'a Demand<'a>>,
    /// The levers a factor can come from (the catalogue, or `--levers`).
    pub catalogue: &'a [Lever],
    /// Checkpointing each block, modelled from the run's module calls
    /// (`None`: the catalogue's factor stands in).
    pub checkpointing: Option<&'a Checkpointed>,
    /// Half the new tokens, modelled from the cache's growth (`None`: the
    /// catalogue's factor stands in).
    pub kv_limited: Option<&'a KvLimited>,
    /// Where each phase allocated (the pipeline's `PhasePositions` of the
    /// recording) and the device's events (its in-place updates), for what
    /// `halve_micro_batch` holds before it is made; `None` and empty where
    /// no factor lever is asked for.
    pub phases: Option<&'a crate::classify::PhasePositions>,
    pub events: &'a [crate::model::Event],
}

/// Names `--what-if` takes: every finding's fix, then the catalogue's.
pub fn lever_names(catalogue: &[Lever]) -> Vec<String> {
    FindingKind::ALL
        .iter()
        .filter(|k| k.modelled_by_finding() || **k == FindingKind::MemoryOutsideAllocator)
        .map(|k| k.lever().to_owned())
        .chain(catalogue.iter().map(|l| l.name.clone()))
        .collect()
}

/// Checks `--what-if` names: a finding's fix, or a lever of `levers` (a
/// `--levers` file) or else of the built-in catalogue.
pub fn check_what_if(names: &[String], levers: Option<&[Lever]>) -> Result<(), String> {
    let known: Vec<String> = match levers {
        Some(l) => lever_names(l),
        None => lever_names(&super::levers::catalogue(1, true, false)),
    };
    match names.iter().find(|n| !known.contains(n)) {
        Some(name) => Err(unknown_lever(name, &known)),
        None => Ok(()),
    }
}

fn unknown_lever(name: &str, known: &[String]) -> String {
    format!(
        "unknown lever `{name}` for --what-if (levers: {})",
        known.join(", ")
    )
}

/// `(interval, from, to)`: a stretch of positions of one interval.
type Window = (usize, u32, u32);

/// The levers of a what-if, resolved: where each changed allocation is
/// freed now, the factors by pool, and how each lever was modelled.
struct Applied {
    ends: HashMap<usize, u32>,
    /// Not live in `[from, to)` (checkpointing).
    gaps: Vec<Window>,
    /// `(position, bytes)` of temporaries made that the run did not make
    /// there (checkpointing's recomputation).
    extra: Vec<(u32, u64)>,
    /// Also live in `[from, to)`, before it was made (the gradients
    /// accumulation holds: `halve_micro_batch`).
    held: Vec<Window>,
    factors: [f64; NPOOL],
    because: Vec<String>,
    estimate: bool,
}

fn apply(input: &Input<'_>, levers: &[String]) -> Result<Applied, String> {
    let intervals = &input.timeline.replay.intervals;
    let mut out = Applied {
        held: Vec::new(),
        ends: HashMap::new(),
        gaps: Vec::new(),
        extra: Vec::new(),
        factors: [1.0; NPOOL],
        because: Vec::new(),
        estimate: false,
    };
    let mut applied: Vec<FindingKind> = Vec::new();
    let mut checkpointed = false;
    let mut factor_levers: Vec<&Lever> = Vec::new();
    for name in levers {
        if let Some(kind) = FindingKind::for_lever(name) {
            let Some(found) = input.findings.iter().find(|f| f.kind == kind) else {
                out.because.push(format!(
                    "{name}: no {} finding on this device, so nothing to change",
                    kind.as_str()
                ));
                continue;
            };
            if let Some(first) = found.after.filter(|k| !applied.contains(k)) {
                out.because.push(format!(
                    "{name}: changes nothing while autograd saves the copies for a backward ({}); apply {} first",
                    first.as_str(),
                    first.lever()
                ));
                applied.push(kind);
                continue;
            }
            let mut moved = 0u64;
            for &(i, end) in &found.fixed_ends {
                let e = out.ends.entry(i).or_insert(intervals[i].end);
                if end < *e {
                    *e = end;
                    moved += 1;
                }
            }
            out.because.push(format!(
                "{name}: modelled from the run: {moved} of the {} allocations of its finding freed earlier",
                found.intervals.len()
            ));
            applied.push(kind);
        } else if name == FindingKind::MemoryOutsideAllocator.lever() {
            // Memory PyTorch's allocator never saw: freeing it moves no
            // allocation, only the room the device leaves the allocator.
            out.because.push(format!(
                "{name}: frees device memory outside PyTorch's allocator, so the allocated and reserved peaks do not change; the allocator gains that room below the device's capacity (see the {} finding)",
                FindingKind::MemoryOutsideAllocator.as_str()
            ));
        } else if let Some(c) = input.checkpointing.filter(|_| name == CHECKPOINTING) {
            if checkpointed {
                continue;
            }
            checkpointed = true;
            out.gaps.extend_from_slice(&c.gaps);
            out.extra.extend_from_slice(&c.recomputed);
            out.because.push(format!(
                "{name}: modelled from the run: {} calls of `{}` checkpointed, {} saved tensors dropped when each returns and made again just before its backward, with the recomputation's own temporaries and output",
                c.calls,
                c.block,
                c.gaps.len()
            ));
        } else if let Some(k) = input.kv_limited.filter(|_| name == KV_LIMIT) {
            out.gaps.extend_from_slice(&k.gaps);
            out.because.push(format!(
                "{name}: modelled from the run: generation stopped after {} of its {} forwards that grew the cache (half the new tokens): what the later ones make is not made, and the cache and activations live at the stop are freed there",
                k.kept, k.forwards
            ));
        } else if let Some(lever) = input.catalogue.iter().find(|l| &l.name == name) {
            factor_levers.push(lever);
            if let Some(how) = lever.modelled_from_run() {
                out.because
                    .push(format!("{name}: modelled from the run: {how}"));
                continue;
            }
            out.estimate = true;
            let scales: Vec<String> = lever
                .scales
                .iter()
                .map(|(t, s)| format!("{t} ×{s}"))
                .collect();
            out.because.push(format!(
                "{name}: estimate, a documented factor ({}): the trace does not show what it changes allocation by allocation",
                scales.join(", ")
            ));
            if let Some((held, bytes)) = accumulated_gradients(name, input) {
                out.because.push(format!(
                    "{name}: modelled from the run: gradients are freed between steps here (no gradient is held through a forward), so with two micro-batches the first one's gradients ({} tensors, {}) are alive through the second's forward and backward: each held from its step's first forward to where backward made it",
                    held.len(),
                    crate::units::human_bytes(bytes)
                ));
                out.held.extend(held);
            }
        } else {
            return Err(unknown_lever(name, &lever_names(input.catalogue)));
        }
    }
    let (factors, together) = super::levers::combined_factors(&factor_levers);
    out.factors = factors;
    out.because.extend(together);
    Ok(out)
}

/// What `halve_micro_batch` adds beside its factor on a training run whose
/// gradients are freed between steps (`zero_grad(set_to_none=True)`, the
/// default; no gradient held through a forward): with two micro-batches
/// the first one's gradients stay alive through the second's forward and
/// backward. Each gradient made in a backward (a tensor's first version,
/// not an in-place update's new one) is held from its step's first forward
/// to where it was made, and there beside the new value backward makes.
/// Returns the windows and their largest total. (Found on
/// `next_step_levers_check`'s TinyLM, 18.4% of the peak off, and measured
/// on `levers_set_to_none`: 7-26%.)
fn accumulated_gradients(name: &str, input: &Input<'_>) -> Option<(Vec<Window>, u64)> {
    if name != HALVE_MICRO_BATCH {
        return None;
    }
    let max = input.demand?.max_by_pool();
    if max[Part::KeptAcrossSteps.pool()] > 0 || max[Category::Gradient.index()] == 0 {
        return None;
    }
    let phases = input.phases?;
    let intervals = &input.timeline.replay.intervals;
    // The tensors behind the intervals: a profile-made snapshot starts a
    // tensor again at each in-place update (`classify::chains`).
    let chains =
        crate::classify::Chains::new(intervals, &crate::classify::version_bumps(input.events));
    let first_version = |i: usize| chains.as_ref().is_none_or(|c| c.root(i) == i);
    let mut held = Vec::new();
    for (i, iv) in intervals.iter().enumerate() {
        if input.classes[i].category != Category::Gradient
            || iv.origin.before_recording()
            || !first_version(i)
        {
            continue;
        }
        // Its step: after the last optimizer step before it.
        let step = crate::classify::last_before(&phases.optimizer, iv.start).unwrap_or(0);
        let Some(forward) = crate::classify::first_after(&phases.forward, step.saturating_sub(1))
        else {
            continue;
        };
        // Held up to where backward makes it, and there beside it: the
        // second micro-batch's backward makes a new value of its size and
        // adds it into the held one (`AccumulateGrad`).
        if forward < iv.start {
            held.push((i, forward, iv.start + 1));
        }
    }
    if held.is_empty() {
        return None;
    }
    // The largest total held at once.
    let mut changes: Vec<(u32, i64)> = held
        .iter()
        .flat_map(|&(i, from, to)| {
            let size = intervals[i].size as i64;
            [(from, size), (to, -size)]
        })
        .collect();
    changes.sort_unstable();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, d) in changes {
        now += d;
        most = most.max(now);
    }
    Some((held, most as u64))
}

/// The allocated bytes at every position less a part whose bytes change by
/// `changes[p]` at each position `p` (one total a position:
/// [`super::pools::Overlay::kept_across_steps_changes`]): the what-if of a lever that
/// removes exactly that part and nothing else (`zero_grad_set_to_none` on
/// the gradients kept across steps), without the demand's other pools. A
/// finding whose fix is such a lever is priced by it; `what_if` gives the
/// same peak through the demand.
///
/// Handed to `visit` position by position rather than kept: its reader needs
/// only its highest value, one position's and its plotted points, and the
/// curve of a 1M-entry snapshot is 8 MB made while the report is built.
pub fn curve_without(tl: &DeviceTimeline, changes: &[i64], mut visit: impl FnMut(usize, u64)) {
    let mut removed = 0i64;
    for (p, &allocated) in tl.replay.allocated.iter().enumerate() {
        removed += changes.get(p).copied().unwrap_or(0);
        visit(p, allocated.saturating_sub(removed.max(0) as u64));
    }
}

/// The catalogue's lever that the run's module calls can model.
pub const CHECKPOINTING: &str = "activation_checkpointing";

pub use super::levers::HALVE_MICRO_BATCH;

/// The catalogue's lever that the cache's growth can model.
pub const KV_LIMIT: &str = "kv_cache_limit";

/// Re-simulates the timeline with `levers` applied in order. An unknown
/// lever name is an error naming the ones there are.
pub fn what_if(input: &Input<'_>, levers: &[String]) -> Result<Outcome, String> {
    let Applied {
        ends,
        gaps,
        extra,
        held,
        factors,
        because,
        estimate,
    } = apply(input, levers)?;
    let edits = Edits::new(input.timeline, &ends, gaps, extra, held);
    let curve = match (factors.iter().all(|f| *f == 1.0), input.demand) {
        (true, _) => edited_curve(input.timeline, &edits),
        (false, Some(demand)) => {
            let cache = Category::AllocatorCache.index();
            let mut curve = Vec::with_capacity(input.timeline.replay.positions() as usize);
            for_each_edited_row(input, demand, &edits, |_, row| {
                curve.push(
                    (0..NPOOL)
                        .filter(|&q| q != cache)
                        .map(|q| scale(row[q], factors[q]))
                        .sum(),
                );
            });
            curve
        }
        (false, None) => return Err("a factor lever needs the device's demand".into()),
    };
    let position = crate::timeline::argmax(&curve);
    let peak_allocated = curve.get(position as usize).copied().unwrap_or(0);
    let overhead = scale(
        allocator_overhead(input.timeline),
        factors[Category::AllocatorCache.index()],
    );
    let peak_reserved = input
        .timeline
        .replay
        .reserved
        .as_ref()
        .map(|_| peak_allocated + overhead);
    Ok(Outcome {
        levers: levers.to_vec(),
        peak_allocated,
        position,
        peak_reserved,
        estimate,
        because,
        curve,
    })
}

/// The demand with `levers` applied that change intervals (findings'
/// fixes, checkpointing modelled from the run), made like the demand it
/// edits: a timeline's demand is walked with the edits as its overlay's
/// (no table of every position); a table's rows are edited. Factor levers
/// are the search's business.
pub fn edited_demand<'t>(input: &Input<'_>, demand: &Demand<'t>, levers: &[String]) -> Demand<'t> {
    demand_with(input, demand, &edits(input, levers))
}

/// [`edited_demand`] for the plan's levers modelled from the run; `None`
/// where `halve_micro_batch` is among them and holds no gradient here (its
/// factor alone stands, and the search prices it so).
pub fn modelled_demand<'t>(
    input: &Input<'_>,
    demand: &Demand<'t>,
    levers: &[String],
) -> Option<Demand<'t>> {
    let a = apply(input, levers).ok()?;
    if a.held.is_empty() && levers.iter().any(|l| l == HALVE_MICRO_BATCH) {
        return None;
    }
    let edits = Edits::new(input.timeline, &a.ends, a.gaps, a.extra, a.held);
    Some(demand_with(input, demand, &edits))
}

/// `demand` with `edits` applied (see [`edited_demand`]).
fn demand_with<'t>(input: &Input<'_>, demand: &Demand<'t>, edits: &Edits) -> Demand<'t> {
    let tl = input.timeline;
    let temporary = Category::Temporary.index();
    let mut changes: Vec<(u32, usize, i64)> = removals(tl, edits)
        .into_iter()
        .map(|(p, i, d)| (p, input.classes[i].category.index(), -d))
        .chain(
            edits
                .extra
                .iter()
                .flat_map(|&(p, b)| [(p, temporary, b as i64), (p + 1, temporary, -(b as i64))]),
        )
        .filter(|c| (c.0 as usize) < tl.replay.positions() as usize)
        .collect();
    changes.sort_unstable_by_key(|c| c.0);
    demand.with_edits(changes).unwrap_or_else(|| {
        let mut rows = Vec::with_capacity(tl.replay.positions() as usize);
        for_each_edited_row(input, demand, edits, |_, row| rows.push(*row));
        Demand::from_rows(rows)
    })
}

/// The edits of `levers` that change intervals (none when a name is
/// unknown: [`what_if`] says so).
fn edits(input: &Input<'_>, levers: &[String]) -> Edits {
    apply(input, levers)
        .map(|a| Edits::new(input.timeline, &a.ends, a.gaps, a.extra, a.held))
        .unwrap_or_default()
}

/// The timeline's changes: where intervals are not live, and temporaries
/// added at one position.
#[derive(Default)]
struct Edits {
    windows: Vec<Window>,
    /// Also live there (`Applied::held`).
    held: Vec<Window>,
    /// `(position, bytes)`, by position, one entry per position.
    extra: Vec<(u32, u64)>,
}

impl Edits {
    fn new(
        tl: &DeviceTimeline,
        ends: &HashMap<usize, u32>,
        gaps: Vec<Window>,
        extra: Vec<(u32, u64)>,
        held: Vec<Window>,
    ) -> Edits {
        Edits {
            held,
            windows: windows(tl, ends, gaps),
            extra: extra_at(extra),
        }
    }
}

fn extra_at(mut extra: Vec<(u32, u64)>) -> Vec<(u32, u64)> {
    extra.sort_unstable();
    let mut out: Vec<(u32, u64)> = Vec::with_capacity(extra.len());
    for (p, b) in extra {
        match out.last_mut() {
            Some(last) if last.0 == p => last.1 += b,
            _ => out.push((p, b)),
        }
    }
    out
}

/// The bytes `extra` adds at `p`.
fn added(extra: &[(u32, u64)], p: usize) -> u64 {
    extra
        .binary_search_by_key(&(p as u32), |e| e.0)
        .map_or(0, |k| extra[k].1)
}

/// Where each edited interval is not live: from its new end to its old
/// one, and its gaps, merged per interval so no byte is taken out twice.
fn windows(
    tl: &DeviceTimeline,
    ends: &HashMap<usize, u32>,
    mut gaps: Vec<(usize, u32, u32)>,
) -> Vec<(usize, u32, u32)> {
    let intervals = &tl.replay.intervals;
    gaps.extend(
        ends.iter()
            .filter(|(&i, &end)| end < intervals[i].end)
            .map(|(&i, &end)| (i, end, intervals[i].end)),
    );
    gaps.sort_unstable();
    let mut out: Vec<(usize, u32, u32)> = Vec::with_capacity(gaps.len());
    for (i, from, to) in gaps {
        match out.last_mut() {
            Some(last) if last.0 == i && from <= last.2 => last.2 = last.2.max(to),
            _ => out.push((i, from, to)),
        }
    }
    out
}

/// Bytes no longer live at each position, as (position, interval, ±bytes)
/// changes in order; held windows are bytes live where they were not
/// (negative removals).
fn removals(tl: &DeviceTimeline, edits: &Edits) -> Vec<(u32, usize, i64)> {
    let intervals = &tl.replay.intervals;
    let mut out = Vec::with_capacity((edits.windows.len() + edits.held.len()) * 2);
    let positions = tl.replay.positions();
    for (windows, sign) in [(&edits.windows, 1i64), (&edits.held, -1)] {
        for &(i, from, to) in windows {
            let size = sign * intervals[i].size as i64;
            out.push((from, i, size));
            if to < positions {
                out.push((to, i, -size));
            }
        }
    }
    out.sort_unstable();
    out
}

fn edited_curve(tl: &DeviceTimeline, edits: &Edits) -> Vec<u64> {
    let mut curve = tl.replay.allocated.clone();
    let changes = removals(tl, edits);
    let mut removed = 0i64;
    let mut next = changes.iter().peekable();
    for (p, v) in curve.iter_mut().enumerate() {
        while let Some((_, _, d)) = next.next_if(|c| c.0 as usize <= p) {
            removed += d;
        }
        *v = (*v as i64 - removed).max(0) as u64 + added(&edits.extra, p);
    }
    curve
}

/// Calls `visit(position, row)` with the demand's rows, the edited
/// intervals' bytes taken out of their category (then out of its parts).
fn for_each_edited_row(
    input: &Input<'_>,
    demand: &Demand<'_>,
    edits: &Edits,
    mut visit: impl FnMut(usize, &Row),
) {
    let changes = removals(input.timeline, edits);
    let mut removed = [0i64; NCAT];
    let mut next = changes.iter().peekable();
    demand.for_each_row(|p, row| {
        while let Some(&(_, i, d)) = next.next_if(|c| c.0 as usize <= p) {
            removed[input.classes[i].category.index()] += d;
        }
        let mut row = *row;
        for (c, r) in removed.iter().enumerate() {
            // Held bytes (a negative removal) join the category.
            if *r < 0 {
                row[c] += r.unsigned_abs();
                continue;
            }
            let mut left = (*r).max(0) as u64;
            let take = left.min(row[c]);
            row[c] -= take;
            left -= take;
            // Out of the parts last first: as a walk with edits does (its
            // parts take their bytes in order, so what the edits remove
            // comes out of the category, then the last part).
            for part in Part::ALL.iter().rev().filter(|p| p.category().index() == c) {
                let take = left.min(row[part.pool()]);
                row[part.pool()] -= take;
                left -= take;
            }
        }
        row[Category::Temporary.index()] += added(&edits.extra, p);
        visit(p, &row);
    });
}
