//! Findings: what is wrong with a device's memory, read off its classified
//! timeline (DESIGN.md §6b). Categories say where memory went; a finding
//! says which waste an expert would name, with the evidence in the file,
//! the lever that fixes it, and how the fix changes each allocation's life
//! (what the planner's what-if re-simulates).
//!
//! The evidence is the order of events, which every format keeps:
//!
//! - **A graph release**: a run of frees with no allocation between them
//!   that frees at least [`MIN_GRAPH_RELEASED`] tensors made by a forward
//!   pass, most of what was allocated while they were; or, where the stacks
//!   name module calls, fewer that the forward's calls would have freed
//!   before it returned (a small model's graph: `is_small_graph_release`).
//!   Autograd frees a graph's saved tensors together when the graph dies;
//!   without autograd (`inference_mode`, `no_grad`) a forward's
//!   intermediates die one by one as the next operator consumes them.
//! - **`graph_kept_alive`**: a release whose tensors outlived the *next*
//!   forward pass: the sizes they free are allocated again (the next
//!   forward) before they go. The previous output is still referenced
//!   (`out = model(x)` in a loop), so its whole graph is too.
//! - **`autograd_in_inference`**: releases in a run with no backward pass
//!   and no optimizer step: the graph was recorded for a backward that never
//!   came (frames such as `BmmBackward0::release_variables` are the graph
//!   being freed, not a backward: see [`crate::vocabulary::frees_a_graph`]).
//! - **`autocast_weight_cache`**: allocations made in a forward at a cast
//!   (`cached_cast`, `aten::_to_copy`, or a matmul-like call when the stack
//!   is Python only) whose sizes are exactly half those of the run's weights,
//!   alive across forwards until one release frees them: autocast's cache of
//!   low-precision weight copies, kept until the autocast region exits.

use std::collections::HashMap;

mod calls;
mod ddp;
mod gradients;
mod growth;
mod next_step;
mod oom;
mod optimizer;

pub use next_step::{device as next_step_device, predict as next_step, NextStep as PredictedStep};
pub use oom::{fragmentation_at_oom, memory_outside_allocator};

use crate::analysis::ClassifiedDevice;
use crate::classify::{Phase, SiteFacts};
use crate::model::{Action, Category, DeviceTrace, SiteId, Sites, Trace};
use crate::schema::FindingKind;
use crate::units::human_bytes;
use crate::vocabulary::{CastSites as Casts, MATMUL};

/// Fewest forward tensors a run of frees must release to be read at all
/// (a forward without autograd frees its output and perhaps its input
/// together: two).
pub const MIN_RELEASED: usize = 4;

/// Fewest forward tensors a graph release frees: a forward without
/// autograd frees a few tensors at once where an operator or a module call
/// returns (an autocast matmul's three casts and its input), a graph holds
/// one or more per operator that saves its inputs.
pub const MIN_GRAPH_RELEASED: usize = 8;

/// Allocations after its own a tensor is taken to live for when autograd
/// no longer holds it and the stacks name no module call to read its life
/// from (`calls.rs`; a CUDA snapshot's frames): its consumer's output, and
/// a little after. Chosen on the tuning pairs (`sample_traces/pairs/tuned`,
/// `tests/suite/what_if_pairs.rs`) when every run used it: the median error of
/// `inference_mode`'s saving, as a share of the peak, was 5.2% with 1, 4.4%
/// with 2, 3.8% with 3, 5.9% with 4, 6.3% with 6; the worst 17%, 15%, 14%,
/// 24%, 38%. With module calls read, the same pairs give 1.2% and 7.7%.
pub const LAST_USE_ALLOCATIONS: usize = 3;

/// One finding on a device, with the allocations it concerns and how its
/// fix changes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub kind: FindingKind,
    /// The waste's allocations (indices into the replay's intervals).
    pub intervals: Vec<usize>,
    /// What in the file shows it.
    pub evidence: Vec<String>,
    /// With the fix applied: the position at which each changed allocation
    /// is freed instead (never later than before).
    pub fixed_ends: Vec<(usize, u32)>,
    /// A finding whose fix changes nothing unless this other finding's fix
    /// was applied first (autocast's copies are saved by a live graph).
    pub after: Option<FindingKind>,
}

impl FindingKind {
    /// The lever that fixes this kind of waste.
    pub fn lever(self) -> &'static str {
        match self {
            FindingKind::GraphKeptAlive => "free_kept_graph",
            FindingKind::AutogradInInference => "inference_mode",
            FindingKind::AutocastWeightCache => "autocast_no_cache",
            FindingKind::MemoryGrowth => "drop_growing_refs",
            FindingKind::GradientsKeptThroughForward => "zero_grad_set_to_none",
            FindingKind::FragmentationAtOom => "expandable_segments",
            FindingKind::OptimizerStateReplacedOutOfPlace => "optimizer_state_in_place",
            FindingKind::MemoryOutsideAllocator => "free_outside_memory",
            FindingKind::DdpBucketCopiesGradients => "gradient_as_bucket_view",
        }
    }

    /// What to do to fix it, as a plan step says it.
    pub fn action(self) -> &'static str {
        match self {
            FindingKind::GraphKeptAlive => "drop the reference to the previous output before the next forward (`del out`, or keep `.item()` / `.detach()` of it), so its autograd graph is freed",
            FindingKind::AutogradInInference => "run the forward under `torch.inference_mode()` (or `torch.no_grad()`)",
            FindingKind::AutocastWeightCache => "use `torch.autocast(..., cache_enabled=False)`, or cast the model to bf16 when the accuracy allows",
            FindingKind::MemoryGrowth => "keep only what later code needs of each run's tensors (`.item()`, `.detach().cpu()`, a reduction), not the tensors themselves",
            FindingKind::GradientsKeptThroughForward => "call `optimizer.zero_grad(set_to_none=True)` right after `optimizer.step()`, so gradients are freed until backward writes them again",
            FindingKind::FragmentationAtOom => "set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`",
            FindingKind::OptimizerStateReplacedOutOfPlace => "update the optimizer's state in place (`m.mul_(beta1).add_(g, alpha=1 - beta1)`, `v.mul_(beta2).addcmul_(g, g, value=1 - beta2)`), or use `torch.optim.AdamW`, so the step never holds two copies of a moment",
            FindingKind::DdpBucketCopiesGradients => "construct DistributedDataParallel with `gradient_as_bucket_view=True`, so the gradients are views of its buckets instead of copies beside them",
            FindingKind::MemoryOutsideAllocator => "find what else holds the device's memory and free it: other processes on the GPU (`nvidia-smi`), NCCL's buffers (`NCCL_BUFFSIZE`, fewer channels), libraries that allocate without PyTorch's allocator (CuPy, TensorRT, JAX); the CUDA context itself stays (`CUDA_MODULE_LOADING=LAZY` loads fewer kernels)",
        }
    }

    /// Why the fix's saving is an estimate, when its model is one.
    pub fn estimate_reason(self) -> Option<&'static str> {
        (self == FindingKind::AutogradInInference).then_some(
            "when each tensor would be freed without autograd is estimated: the trace records no data flow",
        )
    }

    /// Whether the what-if models the fix from the finding's own
    /// allocations (`Found::fixed_ends`); else its lever is the
    /// catalogue's, modelled there (`zero_grad_set_to_none`,
    /// `expandable_segments`).
    pub fn modelled_by_finding(self) -> bool {
        !matches!(
            self,
            FindingKind::GradientsKeptThroughForward
                | FindingKind::FragmentationAtOom
                | FindingKind::MemoryOutsideAllocator
        )
    }

    /// The kind whose own model a lever name applies, if it is such a
    /// finding's lever.
    pub fn for_lever(lever: &str) -> Option<FindingKind> {
        FindingKind::ALL
            .into_iter()
            .find(|k| k.modelled_by_finding() && k.lever() == lever)
    }
}

/// A run of frees with no allocation between them.
struct Release {
    /// Position of the run's first free.
    at: u32,
    /// The forward's tensors it frees, in order.
    freed: Vec<usize>,
    /// The other tensors it frees at the same time (made outside a module's
    /// forward: masks, position ids, …), but weights and caches: held by the
    /// same reference, they go when it goes.
    with: Vec<usize>,
    /// The site of its first free.
    site: SiteId,
}

impl Release {
    /// What it frees, but the allocations in `skip` (autocast's copies).
    fn freed_except(&self, skip: &std::collections::HashSet<usize>) -> Vec<usize> {
        self.freed
            .iter()
            .copied()
            .filter(|i| !skip.contains(i))
            .collect()
    }
}

/// The findings on one device, in a fixed order: of a training run,
/// gradients kept through the forward, optimizer state replaced out of
/// place, DDP's bucket copies; of a run without a backward pass, kept
/// graph, autograd in inference, autocast cache, memory growth.
pub fn find(
    trace: &Trace,
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
    phases: &crate::classify::PhasePositions,
) -> Vec<Found> {
    // Sites' phases, as classification read their frames.
    let phase = |site: SiteId| {
        cd.site_facts
            .get(site as usize)
            .map_or(Phase::Unknown, SiteFacts::phase)
    };
    let training = device.events.iter().any(|e| {
        matches!(e.action, Action::Alloc | Action::FreeCompleted)
            && matches!(
                phase(e.site),
                Phase::Backward | Phase::Optimizer | Phase::ZeroGrad
            )
    });
    // Each kind below is waste of a run without a backward pass: in
    // training a backward frees what the forward saved, its gradients have
    // the forward's sizes (no release says a graph outlived the next
    // forward; a history kept across steps, such as `total += loss`, is
    // left to a finding of its own), and autocast's copies are saved for
    // the backward anyway.
    if training {
        return gradients::kept_through_forward(cd, phases)
            .into_iter()
            .chain(optimizer::replaced_out_of_place(trace, cd, phases))
            .chain(ddp::bucket_copies_gradients(cd))
            .collect();
    }
    // Growth reads the module calls of the lines that may grow, the rest
    // the releases of graphs and autocast's copies: each on its own (on
    // trace-owlv2.json ~12 ms each), side by side.
    let (mut out, growth) = rayon::join(
        || graph_and_cast_findings(trace, device, cd, &phase),
        || growth::memory_growth(trace, device, cd),
    );
    out.extend(growth);
    out
}

/// The findings of a run without a backward pass, other than memory
/// growth, in their order in [`find`]: kept graph, autograd in inference,
/// autocast cache.
fn graph_and_cast_findings(
    trace: &Trace,
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
    phase: &(impl Fn(SiteId) -> Phase + Sync),
) -> Vec<Found> {
    let replay = &cd.timeline.replay;
    let intervals = &replay.intervals;
    // Which interval each event frees (an interval ends after its free).
    let mut freed_by = vec![u32::MAX; device.events.len()];
    for (i, iv) in intervals.iter().enumerate() {
        if iv.end >= 1 && iv.end < replay.positions() {
            freed_by[iv.end as usize - 1] = i as u32;
        }
    }
    let alloc_positions: Vec<u32> = device
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.action == Action::Alloc)
        .map(|(k, _)| k as u32 + 1)
        .collect();
    let forward = |i: usize| {
        let iv = &intervals[i];
        !matches!(
            cd.classes[i].category,
            Category::Parameter | Category::KvCache | Category::Input
        ) && (iv.origin.before_recording() || phase(iv.site) == Phase::Forward)
    };
    let mut releases = Vec::new();
    let mut run: Option<Release> = None;
    for (k, e) in device.events.iter().enumerate() {
        match e.action {
            Action::Alloc => {
                releases.extend(run.take());
            }
            Action::FreeCompleted => {
                let i = freed_by[k];
                if i == u32::MAX {
                    continue;
                }
                let i = i as usize;
                if forward(i) {
                    run.get_or_insert_with(|| Release {
                        at: k as u32 + 1,
                        freed: Vec::new(),
                        with: Vec::new(),
                        site: e.site,
                    })
                    .freed
                    .push(i);
                } else if let Some(r) = run.as_mut() {
                    if !matches!(
                        cd.classes[i].category,
                        Category::Parameter | Category::KvCache
                    ) {
                        r.with.push(i);
                    }
                }
            }
            _ => {}
        }
    }
    releases.extend(run);
    releases.retain(|r| r.freed.len() >= MIN_RELEASED);
    let cast_sites = Casts::new(&trace.sites);
    // The module calls, read once and only where needed (a big trace's
    // sites hold thousands of frames).
    let calls = std::cell::OnceCell::new();
    let read_calls = || calls.get_or_init(|| calls::Calls::new(&trace.sites, device));
    let (graphs, others): (Vec<Release>, Vec<Release>) = releases.into_iter().partition(|r| {
        let traced = traced(r, intervals, &cast_sites);
        is_graph_release(r, &traced, intervals, &alloc_positions)
            || (may_be_small_graph(&traced, &alloc_positions)
                && read_calls()
                    .as_ref()
                    .is_some_and(|c| is_small_graph_release(r, &traced, &alloc_positions, c)))
    });

    // The weights' sizes, each weight once: a weight initialised in place
    // is one tensor whose versions the snapshot lists as intervals at the
    // same address.
    let mut params: HashMap<u64, u32> = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for (iv, c) in intervals.iter().zip(&cd.classes) {
        if c.category == Category::Parameter && seen.insert((iv.addr, iv.size)) {
            *params.entry(iv.size).or_default() += 1;
        }
    }
    let casts = autocast_cache(
        &cast_sites,
        &trace.sites,
        device,
        cd,
        graphs.iter().chain(&others),
        &params,
        &alloc_positions,
    );
    let cast_set: std::collections::HashSet<usize> = casts
        .as_ref()
        .map(|f| f.intervals.iter().copied().collect())
        .unwrap_or_default();

    let mut out = Vec::new();
    out.extend(kept_graph(trace, device, cd, &graphs, &cast_set));
    let calls = if graphs.is_empty() {
        None
    } else {
        read_calls();
        calls.into_inner().flatten()
    };
    out.extend(autograd_in_inference(
        cd,
        &graphs,
        &cast_set,
        &alloc_positions,
        calls,
    ));
    if let Some(mut f) = casts {
        if out
            .iter()
            .any(|f| f.kind == FindingKind::AutogradInInference)
        {
            f.after = Some(FindingKind::AutogradInInference);
        }
        out.push(f);
    }
    out
}

/// Whether a run of frees is a graph released at once: at least
/// [`MIN_GRAPH_RELEASED`] forward tensors not made by an explicit cast
/// (autocast's cache is freed in a run of its own when its region exits),
/// and a good share of what was allocated while they were made (a graph
/// keeps a tensor or more per operator; a module returning without autograd
/// frees a few locals of one call).
fn is_graph_release(
    r: &Release,
    traced: &[&crate::timeline::Interval],
    intervals: &[crate::timeline::Interval],
    alloc_positions: &[u32],
) -> bool {
    let baseline = r
        .freed
        .iter()
        .filter(|&&i| intervals[i].origin.before_recording())
        .count();
    let count = traced.len() + baseline;
    if count < MIN_GRAPH_RELEASED {
        return false;
    }
    // A small model's graph (a two-layer MLP saves seven tensors) is not
    // told from a module returning its locals without autograd (BERT's
    // attention under no_grad frees six, from three calls) by the count:
    // the module calls tell them apart ([`is_small_graph_release`]).
    traced.is_empty() || frees_a_share_of_its_span(traced, alloc_positions)
}

/// Whether `traced` are at least [`MIN_SHARE_OF_SPAN_TENTHS`] of the
/// allocations made from the first of them to the last.
fn frees_a_share_of_its_span(
    traced: &[&crate::timeline::Interval],
    alloc_positions: &[u32],
) -> bool {
    let first = traced.iter().map(|iv| iv.start).min().unwrap_or(0);
    let last = traced.iter().map(|iv| iv.start).max().unwrap_or(first);
    let span = alloc_positions.partition_point(|&p| p <= last)
        - alloc_positions.partition_point(|&p| p < first);
    traced.len() * 10 >= span * MIN_SHARE_OF_SPAN_TENTHS
}

/// What a release frees that was made while recording, not by an explicit
/// cast (autocast's cache is freed in a run of its own when its region
/// exits).
fn traced<'i>(
    r: &Release,
    intervals: &'i [crate::timeline::Interval],
    casts: &Casts,
) -> Vec<&'i crate::timeline::Interval> {
    r.freed
        .iter()
        .map(|&i| &intervals[i])
        .filter(|iv| !iv.origin.before_recording() && !casts.explicit(iv.site))
        .collect()
}

/// Whether a run of frees too small for [`is_graph_release`] is a graph all
/// the same, read from the module calls (a two-layer MLP's graph is seven
/// tensors): after the forward's outermost call returned and the program
/// allocated again (`out.argmax()`, the next forward), it frees at least
/// [`MIN_RELEASED`] tensors that without autograd would have died inside
/// that call (a call's locals, an output the next call had used), past
/// [`may_be_small_graph`]'s checks. A module returning its locals
/// without autograd does that inside the forward; a returned tuple holds
/// outputs, not intermediates.
fn is_small_graph_release(
    r: &Release,
    traced: &[&crate::timeline::Interval],
    alloc_positions: &[u32],
    calls: &calls::Calls,
) -> bool {
    let returned_before = |iv: &crate::timeline::Interval| {
        calls.outermost_end(iv.start).is_some_and(|end| {
            let next = alloc_positions.partition_point(|&p| p <= end);
            alloc_positions.get(next).is_some_and(|&p| p < r.at)
        })
    };
    let intermediates = traced
        .iter()
        .filter(|iv| returned_before(iv) && calls.last_use(iv.start).is_some())
        .count();
    intermediates >= MIN_RELEASED
}

/// What [`is_small_graph_release`] asks of a release's [`traced`] tensors
/// that needs no module calls: a count too small for [`is_graph_release`]
/// but at least [`MIN_RELEASED`], and the same share of its span as a
/// bigger graph.
fn may_be_small_graph(traced: &[&crate::timeline::Interval], alloc_positions: &[u32]) -> bool {
    (MIN_RELEASED..MIN_GRAPH_RELEASED).contains(&traced.len())
        && frees_a_share_of_its_span(traced, alloc_positions)
}

/// Share of the allocations in a release's span that it must free, in
/// tenths. A graph release freed 0.31 (Llama, whose rotary and mask
/// tensors die during the forward) to 1.0 (an MLP) of its span on the
/// pairs; no run without autograd had a release of 8 tensors at all.
const MIN_SHARE_OF_SPAN_TENTHS: usize = 2;

/// Casts an operator makes before its output, at most (autocast's
/// `addmm` casts its input, weight and bias).
const MAX_CASTS_BEFORE_OUTPUT: usize = 4;

/// The end of a tensor that lives until just after the `n`-th allocation
/// following its own (or `end` if that is sooner).
fn after_allocations(alloc_positions: &[u32], start: u32, end: u32, n: usize) -> u32 {
    let first = alloc_positions.partition_point(|&p| p <= start);
    match alloc_positions.get(first + n - 1) {
        Some(&p) => (p + 1).min(end),
        None => end,
    }
}

fn kept_graph(
    trace: &Trace,
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
    releases: &[Release],
    casts: &std::collections::HashSet<usize>,
) -> Option<Found> {
    let intervals = &cd.timeline.replay.intervals;
    let mut kept = Vec::new();
    let mut fixed_ends = Vec::new();
    let mut lines = Vec::new();
    for r in releases {
        // A graph (`is_graph_release`), less autocast's copies.
        let freed = r.freed_except(casts);
        if freed.len() < MIN_RELEASED {
            continue;
        }
        let Some(last) = freed.iter().map(|&i| intervals[i].start).max() else {
            continue;
        };
        // Sizes the release frees, and the allocations made between the
        // last of them and the release: a forward that ran meanwhile makes
        // the same sizes again.
        let mut sizes: HashMap<u64, u32> = HashMap::new();
        for &i in &freed {
            *sizes.entry(intervals[i].size).or_default() += 1;
        }
        let total: u64 = freed.iter().map(|&i| intervals[i].size).sum();
        let mut mirrored = 0u64;
        let mut mirror_count = 0u32;
        let mut first_mirror = None;
        for k in last..r.at.saturating_sub(1) {
            let e = &device.events[k as usize];
            if e.action != Action::Alloc {
                continue;
            }
            if let Some(n) = sizes.get_mut(&e.size).filter(|n| **n > 0) {
                *n -= 1;
                mirrored += e.size;
                mirror_count += 1;
                first_mirror.get_or_insert(k);
            }
        }
        let Some(first) = first_mirror else { continue };
        if mirrored * 2 < total || (mirror_count as usize) < MIN_RELEASED {
            continue;
        }
        // `del` before the next forward: freed where its first mirror is
        // allocated, with what the release freed beside them.
        let with: Vec<usize> = r
            .with
            .iter()
            .copied()
            .filter(|i| !casts.contains(i))
            .collect();
        for &i in freed.iter().chain(&with) {
            fixed_ends.push((i, first.max(intervals[i].start)));
        }
        kept.extend(freed.iter().chain(&with).copied());
        lines.push(format!(
            "{} tensors ({}) made by a forward pass were freed together at event {}, after the next forward pass had allocated {} tensors of the same sizes ({}){}",
            freed.len(),
            human_bytes(total),
            r.at - 1,
            mirror_count,
            human_bytes(mirrored),
            holder(&trace.sites, r.site)
                .map(|l| format!("; freed at {l}"))
                .unwrap_or_default()
        ));
    }
    if kept.is_empty() {
        return None;
    }
    lines.push(
        "a variable still held the previous forward's output (and with it its autograd graph) while the next forward ran: drop it (`del out`, `.item()`, `.detach()`) before the next forward".into(),
    );
    Some(Found {
        kind: FindingKind::GraphKeptAlive,
        intervals: kept,
        evidence: lines,
        fixed_ends,
        after: None,
    })
}

fn autograd_in_inference(
    cd: &ClassifiedDevice,
    releases: &[Release],
    casts: &std::collections::HashSet<usize>,
    alloc_positions: &[u32],
    calls: Option<calls::Calls>,
) -> Option<Found> {
    let intervals = &cd.timeline.replay.intervals;
    let mut held = Vec::new();
    let mut fixed_ends = Vec::new();
    let mut bytes = 0u64;
    let mut used = 0usize;
    for r in releases {
        // A graph (`is_graph_release`), less autocast's copies.
        let freed = r.freed_except(casts);
        if freed.len() < MIN_RELEASED {
            continue;
        }
        used += 1;
        // The forward's output is still referenced after it returns
        // (`out = model(x)`), with or without autograd.
        let output = freed.iter().copied().max_by_key(|&i| intervals[i].start);
        for &i in &freed {
            bytes += intervals[i].size;
            held.push(i);
            if Some(i) == output {
                continue;
            }
            let iv = &intervals[i];
            let counted =
                after_allocations(alloc_positions, iv.start, iv.end, LAST_USE_ALLOCATIONS);
            let end = match calls.as_ref().and_then(|c| c.last_use(iv.start)) {
                Some((end, calls::Held::Output)) => end,
                Some((end, calls::Held::Local(expression))) => end.min(counted.max(expression)),
                None if calls.is_some() => continue,
                None => counted,
            };
            fixed_ends.push((i, end.min(iv.end)));
        }
    }
    if held.is_empty() {
        return None;
    }
    let evidence = vec![
        format!(
            "no backward pass and no optimizer step, yet {} release{} of a forward's tensors all at once ({} tensors, {}), the way autograd frees a graph it recorded",
            used,
            if used == 1 { "" } else { "s" },
            held.len(),
            human_bytes(bytes)
        ),
        "run the forward under `torch.inference_mode()` (or `torch.no_grad()`): each intermediate is then freed when the next operator has used it".into(),
    ];
    Some(Found {
        kind: FindingKind::AutogradInInference,
        intervals: held,
        evidence,
        fixed_ends,
        after: None,
    })
}

/// Whether a site's innermost frame is a profiler operator (`aten::addmm`),
/// as a Chrome trace's sites are: allocations there are that call's.
fn names_an_operator(sites: &Sites, site: SiteId) -> bool {
    sites
        .frames(site)
        .first()
        .is_some_and(|f| sites.str(f.name).starts_with("aten::"))
}

fn autocast_cache<'r>(
    cast_sites: &Casts,
    sites: &Sites,
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
    releases: impl Iterator<Item = &'r Release>,
    params: &HashMap<u64, u32>,
    alloc_positions: &[u32],
) -> Option<Found> {
    let intervals = &cd.timeline.replay.intervals;
    // Without the weights in the trace (a warm Chrome trace): a run of
    // frees that is nearly all explicit casts is autocast clearing its
    // cache when its region exits (a graph released at once holds every
    // kind of activation, a cast now and then).
    let cast_release = |r: &Release| {
        let explicit = r
            .freed
            .iter()
            .filter(|&&i| cast_sites.explicit(intervals[i].site))
            .count();
        explicit * 4 >= r.freed.len() * 3
    };
    let mut casts = Vec::new();
    let mut how = None;
    for r in releases {
        let mut here = Vec::new();
        let cleared = params.is_empty() && cast_release(r);
        for &i in &r.freed {
            let iv = &intervals[i];
            if iv.origin.before_recording() {
                continue;
            }
            let Some(h) = cast_sites.how(iv.site) else {
                continue;
            };
            let weight_sized = params.contains_key(&(iv.size * 2));
            let cached = cleared && h != MATMUL;
            if weight_sized || cached {
                how.get_or_insert(h);
                here.push(i);
            }
        }
        if here.len() >= MIN_RELEASED {
            casts.extend(here);
        }
    }
    // A cache copies each weight once: what only its size and a matmul
    // show (no cast frame) and is made again at the same place (each
    // forward's activations, in a run without autocast) is no copy.
    let mut made: HashMap<(SiteId, u64), u32> = HashMap::new();
    for &i in &casts {
        *made
            .entry((intervals[i].site, intervals[i].size))
            .or_default() += 1;
    }
    casts.retain(|&i| {
        let iv = &intervals[i];
        cast_sites.explicit(iv.site) || made[&(iv.site, iv.size)] == 1
    });
    // Copies of most of the weights, not a few coincidences of size.
    let weights: u32 = params.values().sum();
    if casts.len() < MIN_RELEASED || (casts.len() as u32) * 4 < weights {
        return None;
    }
    let bytes: u64 = casts.iter().map(|&i| intervals[i].size).sum();
    // Without the cache each copy is freed once its operator has used it:
    // just after the operator's output, the next allocation that is not
    // itself a cast (a linear casts its input, weight and bias first).
    // The site of the allocation at position `p` (after its event).
    let site_at = |p: u32| device.events[p as usize - 1].site;
    let fixed_ends = casts
        .iter()
        .map(|&i| {
            let iv = &intervals[i];
            let next = alloc_positions.partition_point(|&p| p <= iv.start);
            let output = alloc_positions[next..]
                .iter()
                .take(MAX_CASTS_BEFORE_OUTPUT)
                .position(|&p| !cast_sites.explicit(site_at(p)));
            let end = match output {
                Some(k) => {
                    // A named operator's own scratch after its output (a
                    // bf16 `addmm`'s workspace) is made at the output's
                    // site: the copy lives through it, to the operator's end.
                    let k = next + k;
                    let site = site_at(alloc_positions[k]);
                    let mut last = k;
                    while names_an_operator(sites, site)
                        && last + 1 < alloc_positions.len()
                        && site_at(alloc_positions[last + 1]) == site
                    {
                        last += 1;
                    }
                    (alloc_positions[last] + 1).min(iv.end)
                }
                None => after_allocations(alloc_positions, iv.start, iv.end, 1),
            };
            (i, end)
        })
        .collect();
    let shown = match weights {
        0 => "were freed together, in a run of frees that is nearly all casts (the weights were made before recording)".to_owned(),
        n => format!("are exactly half the size of the run's weights ({n} weight tensors)"),
    };
    let evidence = vec![
        format!(
            "{} tensors ({}) made at a cast in the forward ({}) {shown} and stay alive across forward passes until they are freed together: autocast's cache of low-precision weight copies, kept until the autocast region exits",
            casts.len(),
            human_bytes(bytes),
            how.unwrap_or("a cast"),
        ),
        "`torch.autocast(..., cache_enabled=False)` frees each copy after use; casting the model itself (`model.to(torch.bfloat16)`) removes the fp32 weights and the copies alike, when the accuracy allows".into(),
    ];
    Some(Found {
        kind: FindingKind::AutocastWeightCache,
        intervals: casts,
        evidence,
        fixed_ends,
        after: None,
    })
}

/// The user's line in a site: its innermost Python frame outside torch and
/// site-packages (`train.py:47 step`), if any.
pub(super) fn holder(sites: &Sites, site: SiteId) -> Option<String> {
    sites.frames(site).iter().find_map(|f| {
        let file = sites.str(f.filename).replace('\\', "/");
        let name = sites.str(f.name).replace('\\', "/");
        let text = if file.ends_with(".py") {
            format!("{file}:{} {name}", f.line)
        } else if name.contains(".py(") {
            name.clone()
        } else {
            return None;
        };
        (!text.contains("torch/") && !text.contains("site-packages/")).then_some(text)
    })
}
