//! Fragmentation at an OOM: the `fragmentation_at_oom` finding.

use crate::schema::{Finding, FindingKind, OomFinding, SegmentsView};
use crate::units::human_bytes;

/// An OOM the cache could have served: the allocator had at least the
/// requested bytes cached (reserved, not allocated) but no free block as
/// large as the request, so it asked the device for a new segment and the
/// device had none. With `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`
/// the allocator maps more memory onto one segment instead, and the cached
/// bytes serve the request.
///
/// The evidence is the OOM's own numbers (reserved and allocated at the
/// failed request) and the largest free block (the segments rebuilt at the
/// OOM, or the dump's). Not stated when its segments are expandable
/// already. The allocated peak does not move: `saving_bytes` and
/// `bytes_at_peak` count the cached bytes the request could not use (free
/// blocks smaller than it, where the segments were rebuilt; else all that
/// was cached), and `peak_after_bytes` is the allocated peak as it was.
pub fn fragmentation_at_oom(
    ooms: &[OomFinding],
    segments: Option<&SegmentsView>,
    peak_allocated: u64,
) -> Option<Finding> {
    let state = |n: usize| {
        let label = format!("oom {n}");
        segments?
            .instants
            .iter()
            .find(|s| s.label.split(", ").any(|l| l == label))
    };
    let fragmented: Vec<(usize, &OomFinding, u64)> = ooms
        .iter()
        .enumerate()
        .filter_map(|(n, o)| {
            let cached = o.reserved_bytes?.checked_sub(o.allocated_bytes)?;
            let largest = o.largest_free_block_bytes?;
            if cached < o.requested_bytes || largest >= o.requested_bytes {
                return None;
            }
            let s = state(n);
            if s.is_some_and(|s| s.segments.iter().any(|m| m.expandable)) {
                return None;
            }
            Some((n, o, s.map_or(cached, |s| s.fragmentation_bytes)))
        })
        .collect();
    let &(n, o, unusable) = fragmented.first()?;
    let cached = o.reserved_bytes.unwrap_or(0) - o.allocated_bytes;
    let blocks = state(n).map_or(String::new(), |s| {
        format!(
            ", {} of it in free blocks smaller than the request across {} segment{}",
            human_bytes(s.fragmentation_bytes),
            s.segment_count,
            if s.segment_count == 1 { "" } else { "s" }
        )
    });
    let mut evidence = vec![format!(
        "the request that failed at event {} asked for {} while {} was cached (reserved, not allocated){blocks}; the largest free block was {}",
        o.event_index,
        human_bytes(o.requested_bytes),
        human_bytes(cached),
        human_bytes(o.largest_free_block_bytes.unwrap_or(0)),
    )];
    if fragmented.len() > 1 {
        evidence.push(format!(
            "{} of the {} OOMs failed the same way",
            fragmented.len(),
            ooms.len()
        ));
    }
    evidence.push(
        "set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`: the allocator then grows one segment instead of asking the device for a new one, so cached memory serves a request larger than any free block".to_owned(),
    );
    Some(Finding {
        kind: FindingKind::FragmentationAtOom,
        bytes_at_peak: unusable,
        evidence,
        fix: FindingKind::FragmentationAtOom.lever().to_owned(),
        saving_bytes: unusable,
        peak_after_bytes: peak_allocated,
        series: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn oom(
        requested: u64,
        allocated: u64,
        reserved: Option<u64>,
        largest: Option<u64>,
    ) -> OomFinding {
        OomFinding {
            event_index: 7,
            ts_us: None,
            requested_bytes: requested,
            device_free_bytes: Some(0),
            allocated_bytes: allocated,
            reserved_bytes: reserved,
            by_category: Default::default(),
            largest_free_block_bytes: largest,
            verdict: String::new(),
        }
    }

    #[test]
    fn a_request_the_cache_holds_but_no_block_fits_is_fragmentation() {
        let f = fragmentation_at_oom(
            &[oom(16 * MIB, 32 * MIB, Some(64 * MIB), Some(8 * MIB))],
            None,
            40 * MIB,
        )
        .expect("a finding");
        assert_eq!(f.kind, FindingKind::FragmentationAtOom);
        assert_eq!(f.fix, "expandable_segments");
        // Without rebuilt segments, all that was cached is what it could not use.
        assert_eq!(f.saving_bytes, 32 * MIB);
        assert_eq!(f.peak_after_bytes, 40 * MIB);
        assert!(f.evidence[0].contains("event 7"), "{:?}", f.evidence);
    }

    #[test]
    fn a_shortage_or_a_fitting_block_or_unknown_reserve_is_not() {
        for o in [
            // Less cached than requested: a genuine shortage.
            oom(48 * MIB, 32 * MIB, Some(64 * MIB), Some(8 * MIB)),
            // A free block as large as the request: not fragmentation.
            oom(16 * MIB, 32 * MIB, Some(64 * MIB), Some(16 * MIB)),
            // Reserved or the largest block unknown: no evidence.
            oom(16 * MIB, 32 * MIB, None, Some(8 * MIB)),
            oom(16 * MIB, 32 * MIB, Some(64 * MIB), None),
        ] {
            assert_eq!(
                fragmentation_at_oom(std::slice::from_ref(&o), None, 40 * MIB),
                None,
                "{o:?}"
            );
        }
    }
}
