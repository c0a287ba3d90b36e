//! What keeps its size when the weights go to bf16: the tensors attention's
//! math path saves for backward. That path computes in fp32 whatever its
//! inputs' dtype (PyTorch casts bf16 and fp16 query, key and value up to
//! fp32 there for accuracy), so its scores, softmax and dropout stay fp32 in
//! a bf16 run. Recorded pairs show it: a GPT-2 trained on CPU in bf16 keeps
//! attention's bytes at the peak (3.54 MB → 3.74 MB) while the rest halves.
//!
//! The path shows by name where the stacks name operators or C++ frames
//! (`aten::_scaled_dot_product_attention_math`). With Python frames only, a
//! call of `scaled_dot_product_attention` shows which kernel ran by how many
//! tensors it made: the fused kernels make their output and a few
//! statistics (flash: output and log-sum-exp; memory-efficient: those and a
//! seed and offset), the math path a scaled query and key, the scores, the
//! softmax, dropout's mask and output and the result.

use crate::model::{SiteId, Sites};
use crate::timeline::DeviceTimeline;
use crate::vocabulary::{is_attention_call_frame, is_attention_math_frame};

/// Fewest tensors one call of the math path makes (two scaled inputs, the
/// scores, the softmax, the result); the fused kernels make at most four.
const MATH_PATH_TENSORS: usize = 5;

/// What a site says of attention's kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attention {
    None,
    /// An operator or C++ frame names the math path.
    Math,
    /// A Python call of `scaled_dot_product_attention`, no operator frame.
    Call,
}

/// What each frame name says of attention, by string id
/// ([`Sites::strings_where`]): a site's frames repeat across sites (an
/// OWLv2 trace: ~48 frames a site), and a search of each name's text for
/// three needles each time it was met was 2% of the whole run's samples
/// (`perf`, trace-owlv2 of `scripts/bench_inputs.sh`).
struct NameKinds {
    math: Vec<bool>,
    cpp: Vec<bool>,
    call: Vec<bool>,
}

impl NameKinds {
    fn new(sites: &Sites) -> NameKinds {
        NameKinds {
            math: sites.strings_where(is_attention_math_frame),
            cpp: sites.strings_where(|n| n.contains("::")),
            call: sites.strings_where(is_attention_call_frame),
        }
    }
}

fn attention(sites: &Sites, site: SiteId, names: &NameKinds) -> Attention {
    let frames = sites.frames(site);
    let any = |table: &[bool]| frames.iter().any(|f| table[f.name as usize]);
    if any(&names.math) {
        Attention::Math
    } else if any(&names.cpp) {
        // Operators or C++ frames name the kernel, and it is not the math path.
        Attention::None
    } else if any(&names.call) {
        Attention::Call
    } else {
        Attention::None
    }
}

/// The intervals (indices, ascending) made inside attention's math path.
pub fn attention_math(sites: &Sites, timeline: &DeviceTimeline) -> Vec<usize> {
    let mut by_site: rustc_hash::FxHashMap<SiteId, Attention> = Default::default();
    let names = NameKinds::new(sites);
    let mut out = Vec::new();
    // A run of consecutive allocations at one Python call site is one call
    // (the projections between two layers' attention allocate elsewhere).
    let mut run: Vec<usize> = Vec::new();
    let mut run_site = None;
    let flush = |run: &mut Vec<usize>, out: &mut Vec<usize>| {
        if run.len() >= MATH_PATH_TENSORS {
            out.extend_from_slice(run);
        }
        run.clear();
    };
    for (i, interval) in timeline.replay.intervals.iter().enumerate() {
        let kind = *by_site
            .entry(interval.site)
            .or_insert_with(|| attention(sites, interval.site, &names));
        if kind != Attention::Call || run_site != Some(interval.site) {
            flush(&mut run, &mut out);
            run_site = None;
        }
        match kind {
            Attention::Math => out.push(i),
            Attention::Call => {
                run_site = Some(interval.site);
                run.push(i);
            }
            Attention::None => {}
        }
    }
    flush(&mut run, &mut out);
    out.sort_unstable();
    out
}
