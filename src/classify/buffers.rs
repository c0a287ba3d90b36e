//! Framework buffers named for what they are (issue 11 §6): memory that
//! frameworks allocate in their own code, where the generic rules (phase,
//! lifetime) would mislabel it.
//!
//! - Megatron's contiguous buffers (`megatron/core/distributed/
//!   param_and_grad_buffer.py`, `_ParamAndGradBuffer.__init__`):
//!   `param_data` (parameters, only with the distributed optimizer) is
//!   allocated a few lines before `grad_data` (gradients, always). The
//!   lowest allocating line of that `__init__` in a trace is `param_data`
//!   when two lines allocate; a single line is `grad_data`.
//! - DistributedDataParallel's gradient buckets: what its `Reducer` makes
//!   (`torch/nn/parallel/distributed.py`, `_ddp_init_helper`, and
//!   `_rebuild_buckets` after the first step) holds the gradients, copied
//!   there for the all-reduce or viewed there
//!   (`gradient_as_bucket_view=True`): `gradient`.
//! - The cuBLAS workspace (`at::cuda::getNewWorkspace`, the cuBLASLt
//!   workspace): a library's scratch space, `temporary`.
//! - Buffers allocated together, one per parameter and each sized exactly
//!   like its parameter, outside module init (a hand-written optimizer's
//!   or gradient estimator's state, `[torch.ones_like(p) for p in params]`):
//!   optimizer state, inferred from the sizes.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::model::{Category, SiteId, Sites};
use crate::timeline::{Origin, Replay};
use crate::vocabulary::{is_ddp_name, DDP_FILE};

use super::{Builtin, Classification};

const MEGATRON_BUFFERS: &str = "megatron/core/distributed/param_and_grad_buffer.py";
/// The part of [`MEGATRON_BUFFERS`] no path separator can split.
const BUFFERS_FILE: &str = "param_and_grad_buffer.py";

/// The classification the framework rules give each site, if any.
pub(super) fn by_site(sites: &Sites) -> Vec<Option<Classification>> {
    // Every frame of every site comes here: its strings are tested by id.
    let buffers_file = sites.strings_where(|s| s.contains(BUFFERS_FILE));
    let workspace = sites
        .strings_where(|s| s.contains("getNewWorkspace") || s.contains("getCUDABlasLtWorkspace"));
    let ddp = sites.strings_where(|s| is_ddp_name(s) || s.contains("_rebuild_buckets"));
    let megatron_line = |site: SiteId| {
        sites.frames(site).iter().find_map(|f| {
            if !buffers_file[f.filename as usize] && !buffers_file[f.name as usize] {
                return None;
            }
            let (file, name) = (sites.str(f.filename), sites.str(f.name));
            let (file, line, func) = python_location(file, f.line, name)?;
            (file.ends_with(MEGATRON_BUFFERS) && func == "__init__").then_some(line)
        })
    };
    let lines: Vec<Option<u32>> = (0..sites.len() as SiteId).map(megatron_line).collect();
    let mut distinct: Vec<u32> = lines.iter().flatten().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    let param_line = (distinct.len() > 1).then(|| distinct[0]);
    (0..sites.len() as SiteId)
        .map(|site| {
            if let Some(line) = lines[site as usize] {
                return Some(if Some(line) == param_line {
                    Builtin::MegatronParamBuffer.class()
                } else {
                    Builtin::MegatronGradBuffer.class()
                });
            }
            let frames = sites.frames(site);
            if frames
                .iter()
                .any(|f| ddp[f.filename as usize] || ddp[f.name as usize])
                && frames.iter().any(|f| {
                    let (file, name) = (sites.str(f.filename), sites.str(f.name));
                    name.contains("_rebuild_buckets")
                        || python_location(file, f.line, name).is_some_and(|(file, _, func)| {
                            file.ends_with(DDP_FILE) && func == "_ddp_init_helper"
                        })
                })
            {
                return Some(Builtin::DdpGradientBucket.class());
            }
            let cublas = frames.iter().any(|f| workspace[f.name as usize]);
            cublas.then(|| Builtin::CublasWorkspace.class())
        })
        .collect()
}

/// (file, line, function) of a Python frame: a snapshot frame
/// (`filename`, `line`, `name`) or a profiler frame whose name is
/// `file.py(line): function`.
fn python_location<'s>(file: &'s str, line: u32, name: &'s str) -> Option<(String, u32, &'s str)> {
    if file.ends_with(".py") {
        return Some((file.replace('\\', "/"), line, name));
    }
    let (file, rest) = name.split_once(".py(")?;
    let (line, func) = rest.split_once("): ")?;
    Some((
        format!("{}.py", file.replace('\\', "/")),
        line.parse().ok()?,
        func,
    ))
}

/// Reclassifies as optimizer state the allocations of one site, all live
/// together, that are sized exactly like the parameters live when the
/// first of them is allocated (one buffer per parameter, or several), where the rules
/// found no better category than `input` or `unknown`. The parameters are
/// the intervals classified `parameter` from their own evidence.
pub(super) fn per_parameter_buffers(replay: &Replay, classes: &mut [Classification]) {
    let params: Vec<usize> = replay
        .intervals
        .iter()
        .zip(classes.iter())
        .enumerate()
        .filter(|(_, (i, c))| {
            c.category == Category::Parameter
                && !c.rule.infers()
                && i.origin != Origin::BeforeRecordingUnnamed
        })
        .map(|(k, _)| k)
        .collect();
    if params.len() < 2 {
        return;
    }
    let mut by_site: FxHashMap<SiteId, Vec<usize>> = FxHashMap::default();
    for (k, (i, c)) in replay.intervals.iter().zip(classes.iter()).enumerate() {
        if i.site != 0
            && i.origin == Origin::Traced
            && matches!(c.category, Category::Input | Category::Unknown)
        {
            by_site.entry(i.site).or_default().push(k);
        }
    }
    let state = Builtin::InferredStateSizedLikeParameters.class();
    let mut groups: Vec<&Vec<usize>> = by_site.values().filter(|g| g.len() >= 2).collect();
    groups.sort_unstable();
    for group in groups {
        // Held together, as state is (per-parameter scratch in a loop is not).
        let last = group
            .iter()
            .map(|&k| replay.intervals[k].start)
            .max()
            .unwrap_or(0);
        let first_end = group
            .iter()
            .map(|&k| replay.intervals[k].end)
            .min()
            .unwrap_or(0);
        if last >= first_end {
            continue;
        }
        let first = group
            .iter()
            .map(|&k| replay.intervals[k].start)
            .min()
            .unwrap_or(0);
        let mut want: BTreeMap<u64, usize> = BTreeMap::new();
        for &k in &params {
            let p = &replay.intervals[k];
            if p.live_at(first) {
                *want.entry(p.size).or_default() += 1;
            }
        }
        let n: usize = want.values().sum();
        if n < 2 || group.len() % n != 0 {
            continue;
        }
        let copies = group.len() / n;
        let mut sizes: BTreeMap<u64, usize> = BTreeMap::new();
        for &k in group.iter() {
            *sizes.entry(replay.intervals[k].size).or_default() += 1;
        }
        if sizes
            .iter()
            .all(|(s, &c)| want.get(s).is_some_and(|&w| w * copies == c))
            && sizes.len() == want.len()
        {
            for &k in group.iter() {
                classes[k] = state;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_locations_from_both_frame_forms() {
        assert_eq!(
            python_location(
                "/x/megatron/core/distributed/param_and_grad_buffer.py",
                586,
                "__init__"
            ),
            Some((
                "/x/megatron/core/distributed/param_and_grad_buffer.py".into(),
                586,
                "__init__"
            ))
        );
        assert_eq!(
            python_location(
                "python_function",
                0,
                "megatron/core/distributed/param_and_grad_buffer.py(592): __init__"
            ),
            Some((
                "megatron/core/distributed/param_and_grad_buffer.py".into(),
                592,
                "__init__"
            ))
        );
        assert_eq!(
            python_location("??", 0, "at::cuda::getNewWorkspace()"),
            None
        );
    }

    fn site(sites: &mut Sites, frames: &[(&str, u32, &str)]) -> SiteId {
        sites.intern_frames(frames)
    }

    #[test]
    fn megatron_param_buffer_comes_before_grad_buffer() {
        let mut sites = Sites::default();
        let file = "/site-packages/megatron/core/distributed/param_and_grad_buffer.py";
        let grad = site(&mut sites, &[(file, 592, "__init__"), ("ddp.py", 1, "f")]);
        let param = site(&mut sites, &[(file, 586, "__init__"), ("ddp.py", 1, "f")]);
        let ws = site(&mut sites, &[("??", 0, "at::cuda::getNewWorkspace()")]);
        let rules = by_site(&sites);
        assert_eq!(rules[param as usize].unwrap().category, Category::Parameter);
        assert_eq!(rules[grad as usize].unwrap().category, Category::Gradient);
        assert_eq!(rules[ws as usize].unwrap().category, Category::Temporary);
        assert_eq!(rules[0], None);
        // One allocating line only: `grad_data` (no distributed optimizer).
        let mut sites = Sites::default();
        let only = site(&mut sites, &[(file, 592, "__init__")]);
        assert_eq!(
            by_site(&sites)[only as usize].unwrap().category,
            Category::Gradient
        );
    }
}
