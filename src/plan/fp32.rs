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

fn attention(sites: &Sites, site: SiteId) -> Attention {
    let frames = sites.frames(site);
    let names = || frames.iter().map(|f| sites.str(f.name));
    if names().any(is_attention_math_frame) {
        Attention::Math
    } else if names().any(|n| n.contains("::")) {
        // Operators or C++ frames name the kernel, and it is not the math path.
        Attention::None
    } else if names().any(is_attention_call_frame) {
        Attention::Call
    } else {
        Attention::None
    }
}

/// The intervals (indices, ascending) made inside attention's math path.
pub fn attention_math(sites: &Sites, timeline: &DeviceTimeline) -> Vec<usize> {
    let mut by_site: rustc_hash::FxHashMap<SiteId, Attention> = Default::default();
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
            .or_insert_with(|| attention(sites, interval.site));
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
