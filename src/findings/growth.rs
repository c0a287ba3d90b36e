//! Memory growing run after run: the `memory_growth` finding.

use std::collections::HashMap;

use super::{calls, holder, Found};
use crate::analysis::ClassifiedDevice;
use crate::model::{Category, DeviceTrace, SiteId, Sites, StrId, Trace};
use crate::schema::FindingKind;
use crate::units::human_bytes;
use crate::vocabulary::innermost_module;

/// Memory that grows run after run: lines (sites) whose tensors outlive
/// their next two runs, each run a call of the line's innermost module. Parameters,
/// gradients, optimizer state and KV caches are made once and kept on
/// purpose; a graph kept until the next forward outlives one run only.
///
/// A line must name its module instance (`nn.Module: Block_2`, as the
/// profiler's stacks do): with file and line alone (a CUDA snapshot's
/// Python frames) the blocks of one deep forward run the same lines one
/// after another, and one forward's graph would read as growth.
///
/// Fixed: a run's tensors are freed when the next run starts (the next run
/// of the growing line that runs least often: a whole forward or step).
pub(super) fn memory_growth(
    trace: &Trace,
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
) -> Option<Found> {
    let intervals = &cd.timeline.replay.intervals;
    let sites = &trace.sites;
    // Per site, its instances in allocation order (an index difference
    // counts the allocations between them), and the innermost module it
    // names (sites that name none are not read: see above).
    let mut by_site: HashMap<SiteId, Vec<usize>> = HashMap::new();
    let mut module_of: Vec<Option<Option<StrId>>> = vec![None; sites.len()];
    for (k, (iv, c)) in intervals.iter().zip(&cd.classes).enumerate() {
        let kept_on_purpose = matches!(
            c.category,
            Category::Parameter | Category::Gradient | Category::OptimizerState | Category::KvCache
        );
        if iv.origin != crate::timeline::Origin::Traced || iv.site == 0 || kept_on_purpose {
            continue;
        }
        let Some(m) = module_of.get_mut(iv.site as usize) else {
            continue;
        };
        if m.get_or_insert_with(|| innermost_module(sites, iv.site))
            .is_some()
        {
            by_site.entry(iv.site).or_default().push(k);
        }
    }
    // Growth needs a tensor alive when its line has run twice more; without
    // one (most runs) the module calls are not read at all, and then only
    // the innermost modules of the lines that may grow.
    let outlives_two = |list: &Vec<usize>| {
        list.windows(3)
            .any(|w| intervals[w[0]].end > intervals[w[2]].start)
    };
    let module = |site: SiteId| module_of[site as usize].flatten();
    let inner_modules: std::collections::HashSet<StrId> = by_site
        .iter()
        .filter(|(_, list)| outlives_two(list))
        .filter_map(|(&site, _)| module(site))
        .collect();
    if inner_modules.is_empty() {
        return None;
    }
    by_site.retain(|&site, _| module(site).is_some_and(|m| inner_modules.contains(&m)));
    let module_calls = calls::Calls::only(sites, device, &inner_modules)?;
    let mut lines: Vec<(u64, SiteId, usize, usize)> = Vec::new();
    let mut grown_by_site: Vec<(SiteId, Vec<usize>, Vec<u32>)> = Vec::new();
    let mut keys: Vec<SiteId> = by_site.keys().copied().collect();
    keys.sort_unstable();
    for site in keys {
        let list = &by_site[&site];
        // Runs: the instances made in one call of the line's innermost
        // module are one run (a layer norm's output, mean and rstd; the
        // four products of one GELU expression).
        let mut runs: Vec<&[usize]> = Vec::new();
        let mut from = 0;
        for j in 1..=list.len() {
            let call = |k: usize| module_calls.call_of(intervals[list[k]].start);
            if j == list.len() || call(j) != call(j - 1) {
                runs.push(&list[from..j]);
                from = j;
            }
        }
        if runs.len() < 3 {
            continue;
        }
        let run_start = |r: &[usize]| intervals[r[0]].start;
        let last_done = intervals[*list.last()?].start;
        let mut grown = Vec::new();
        let mut growing_runs = 0;
        for (r, run) in runs.iter().enumerate() {
            let Some(next) = runs.get(r + 1) else { break };
            let held_until = runs.get(r + 2).map_or(last_done + 1, |n| run_start(n));
            let here: Vec<usize> = run
                .iter()
                .copied()
                .filter(|&i| intervals[i].end >= held_until && intervals[i].end > run_start(next))
                .collect();
            growing_runs += usize::from(!here.is_empty());
            grown.extend(here);
        }
        if growing_runs < 2 {
            continue;
        }
        let bytes: u64 = grown.iter().map(|&i| intervals[i].size).sum();
        lines.push((bytes, site, grown.len(), list.len()));
        grown_by_site.push((site, grown, runs.iter().map(|r| run_start(r)).collect()));
    }
    // The cycle: the runs of the growing line that runs least often.
    let (_, _, cycle) = grown_by_site
        .iter()
        .min_by_key(|(site, _, starts)| (starts.len(), *site))?;
    let mut grown = Vec::new();
    let mut fixed_ends = Vec::new();
    for (_, list, _) in &grown_by_site {
        for &i in list {
            let iv = &intervals[i];
            let next = cycle.partition_point(|&p| p <= iv.start);
            if let Some(&at) = cycle.get(next) {
                fixed_ends.push((i, at.min(iv.end)));
            }
            grown.push(i);
        }
    }
    grown.sort_unstable();
    lines.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let total: u64 = lines.iter().map(|l| l.0).sum();
    let mut evidence = vec![format!(
        "{} lines keep a tensor from each run alive through their next runs ({} tensors, {}): memory grows run after run",
        lines.len(),
        grown.len(),
        human_bytes(total)
    )];
    for (bytes, site, kept, runs) in lines.iter().take(3) {
        evidence.push(format!(
            "{}: {kept} of its {runs} tensors outlived the next two runs of the line ({})",
            holder(sites, *site)
                .or_else(|| innermost(sites, *site))
                .unwrap_or_else(|| format!("site {site}")),
            human_bytes(*bytes)
        ));
    }
    evidence.push(
        "something keeps every run's result (a list of outputs with their graphs, a running total without `.item()`): keep only what later code needs".into(),
    );
    Some(Found {
        kind: FindingKind::MemoryGrowth,
        intervals: grown,
        evidence,
        fixed_ends,
        after: None,
    })
}

/// The innermost frame of a site, as text.
fn innermost(sites: &Sites, site: SiteId) -> Option<String> {
    sites
        .frames(site)
        .first()
        .map(|f| sites.str(f.name).to_owned())
}
