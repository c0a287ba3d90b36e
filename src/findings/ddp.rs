//! DistributedDataParallel's gradient buckets copying the gradients: the
//! `ddp_bucket_copies_gradients` finding.

use super::Found;
use crate::analysis::ClassifiedDevice;
use crate::classify::{Builtin, Rule};
use crate::model::Category;
use crate::schema::FindingKind;
use crate::units::human_bytes;

/// The rules that name a DistributedDataParallel gradient bucket.
const BUCKET_RULES: [Builtin; 4] = [
    Builtin::DdpGradientBucket,
    Builtin::InferredDdpBucketMade,
    Builtin::InferredDdpBucket,
    Builtin::InferredDdpBucketAllReduced,
];

/// DistributedDataParallel keeps its gradient buckets (one flat buffer per
/// bucket, as large as the gradients it holds) beside the gradients
/// themselves unless `gradient_as_bucket_view=True`: backward writes each
/// gradient, DDP copies it into its bucket for the all-reduce and back.
/// With bucket views the gradients are views of the buckets, and their own
/// allocations are gone (PyTorch's documentation: the memory saved is the
/// gradients' size).
///
/// The evidence: buckets named by the classifier (observed, or inferred
/// before or while recording) and gradients allocated apart from them. The
/// fix: the gradients' allocations never made (`fixed_ends` at their
/// start); the buckets stay. Checked against the same run recorded with
/// bucket views (the matrix's `ddp` and `ddp_bucket_view`).
pub(super) fn bucket_copies_gradients(cd: &ClassifiedDevice) -> Option<Found> {
    let intervals = &cd.timeline.replay.intervals;
    let is_bucket = |rule: Rule| matches!(rule, Rule::Builtin(b) if BUCKET_RULES.contains(&b));
    let mut buckets = 0u64;
    let mut n_buckets = 0usize;
    let mut gradients = Vec::new();
    for (i, c) in cd.classes.iter().enumerate() {
        if c.category != Category::Gradient {
            continue;
        }
        if is_bucket(c.rule) {
            buckets += intervals[i].size;
            n_buckets += 1;
        } else {
            gradients.push(i);
        }
    }
    if n_buckets == 0 || gradients.is_empty() {
        return None;
    }
    let grad_bytes: u64 = gradients.iter().map(|&i| intervals[i].size).sum();
    Some(Found {
        kind: FindingKind::DdpBucketCopiesGradients,
        fixed_ends: gradients.iter().map(|&i| (i, intervals[i].start)).collect(),
        evidence: vec![
            format!(
                "{n_buckets} DistributedDataParallel gradient bucket(s) ({}) and {} gradient allocation(s) apart from them ({}): DDP copies each gradient into its bucket for the all-reduce, so both are held",
                human_bytes(buckets),
                gradients.len(),
                human_bytes(grad_bytes)
            ),
            "construct it with `DistributedDataParallel(model, gradient_as_bucket_view=True)`: the gradients become views of the buckets and their own allocations go".into(),
        ],
        intervals: gradients,
        after: None,
    })
}
