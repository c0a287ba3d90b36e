//! What an OOM's own numbers show: the `fragmentation_at_oom` and
//! `memory_outside_allocator` findings.

use crate::schema::{Finding, FindingKind, OomFinding, SegmentsView};
use crate::segments::segment_for;
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

/// Least memory outside the allocator worth a finding: the CUDA context
/// and its loaded kernels take a few hundred MiB to about 1 GiB of every
/// process (more with many kernels loaded eagerly), which no setting of
/// the program frees. Above this (and above [`OUTSIDE_MIN_SHARE`] of the
/// device) something else holds the memory.
pub const OUTSIDE_MIN_BYTES: u64 = 2 << 30;

/// Least share of the device's capacity outside the allocator worth a
/// finding (5%: 4 GiB of an 80 GiB device).
pub const OUTSIDE_MIN_SHARE: f64 = 0.05;

/// Bytes of device memory PyTorch's allocator never saw at an OOM, and
/// whether the amount is a lower bound: the device's capacity less what
/// the allocator had reserved and what was free. A snapshot's OOM says what
/// `cudaMemGetInfo` reported free; a Chrome trace's does not, and then the
/// failed segment ([`segment_for`]) bounds what was free from above.
pub fn outside_at(o: &OomFinding, capacity: u64) -> Option<(u64, bool)> {
    let reserved = o.reserved_bytes?;
    match o.device_free_bytes {
        // More than the device holds: the capacity is not this device's.
        Some(free) => capacity
            .checked_sub(reserved.checked_add(free)?)
            .map(|b| (b, false)),
        None => Some((
            capacity
                .saturating_sub(reserved)
                .saturating_sub(segment_for(o.requested_bytes)),
            true,
        )),
    }
}

/// An OOM while much of the device was held outside PyTorch's caching
/// allocator: its capacity − reserved − free at the failed request is at
/// least [`OUTSIDE_MIN_BYTES`] and [`OUTSIDE_MIN_SHARE`] of the capacity.
/// Needs the device's capacity (`--device-memory`, or a Chrome trace's
/// `deviceProperties`) and where it was read; the
/// first such OOM is the evidence. The allocated peak does not move:
/// `saving_bytes` and `bytes_at_peak` are the bytes outside (the room the
/// allocator gains when they are freed) and `peak_after_bytes` the
/// allocated peak as it was.
pub fn memory_outside_allocator(
    ooms: &[OomFinding],
    capacity: Option<(u64, &str)>,
    peak_allocated: u64,
) -> Option<Finding> {
    let (capacity, from) = capacity.filter(|&(c, _)| c > 0)?;
    let least = OUTSIDE_MIN_BYTES.max((capacity as f64 * OUTSIDE_MIN_SHARE) as u64);
    let (o, outside) = ooms.iter().find_map(|o| {
        let (outside, _) = outside_at(o, capacity)?;
        (outside >= least).then_some((o, outside))
    })?;
    let reserved = o.reserved_bytes.unwrap_or(0);
    let share = 100.0 * outside as f64 / capacity as f64;
    let mut evidence = vec![match o.device_free_bytes {
        Some(free) => format!(
            "the request that failed at event {} asked for {}; the device holds {} ({from}), PyTorch's allocator had {} reserved ({} allocated) and {} was free: {} ({share:.0}% of the device) was held outside the allocator",
            o.event_index,
            human_bytes(o.requested_bytes),
            human_bytes(capacity),
            human_bytes(reserved),
            human_bytes(o.allocated_bytes),
            human_bytes(free),
            human_bytes(outside),
        ),
        None => format!(
            "the request that failed at event {} asked for {}; the device holds {} ({from}) and PyTorch's allocator had {} reserved ({} allocated), so less than the {} segment it asked for was free: at least {} ({share:.0}% of the device) was held outside the allocator",
            o.event_index,
            human_bytes(o.requested_bytes),
            human_bytes(capacity),
            human_bytes(reserved),
            human_bytes(o.allocated_bytes),
            human_bytes(segment_for(o.requested_bytes)),
            human_bytes(outside),
        ),
    }];
    evidence.push(format!(
        "the CUDA context and its kernels take about 0.3-1 GiB of that on every process; the rest is other processes on the GPU (`nvidia-smi`), NCCL's buffers, or libraries that allocate without PyTorch's allocator: freed, the allocator has {} more before it fails",
        human_bytes(outside)
    ));
    Some(Finding {
        kind: FindingKind::MemoryOutsideAllocator,
        bytes_at_peak: outside,
        evidence,
        fix: FindingKind::MemoryOutsideAllocator.lever().to_owned(),
        saving_bytes: outside,
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

    const GIB: u64 = 1 << 30;

    fn at(requested: u64, reserved: u64, free: Option<u64>) -> OomFinding {
        OomFinding {
            device_free_bytes: free,
            ..oom(requested, reserved / 2, Some(reserved), None)
        }
    }

    #[test]
    fn capacity_less_reserved_and_free_is_memory_outside_the_allocator() {
        // A snapshot's numbers: 80 GiB device, 60 GiB reserved, 1 GiB free.
        let f = memory_outside_allocator(
            &[at(2 * GIB, 60 * GIB, Some(GIB))],
            Some((80 * GIB, "--device-memory")),
            50 * GIB,
        )
        .expect("a finding");
        assert_eq!(f.kind, FindingKind::MemoryOutsideAllocator);
        assert_eq!(f.fix, "free_outside_memory");
        assert_eq!(f.saving_bytes, 19 * GIB);
        assert_eq!(f.bytes_at_peak, 19 * GIB);
        assert_eq!(f.peak_after_bytes, 50 * GIB);
        assert!(f.evidence[0].contains("19.00 GiB"), "{:?}", f.evidence);
        assert!(
            f.evidence[0].contains("(--device-memory)"),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn without_free_bytes_the_failed_segment_bounds_it() {
        // A Chrome trace's: no free bytes; a 3 GiB request (its segment 3 GiB).
        let f = memory_outside_allocator(
            &[at(3 * GIB, 6 * GIB, None)],
            Some((16 * GIB, "deviceProperties")),
            6 * GIB,
        )
        .expect("a finding");
        assert_eq!(f.saving_bytes, 7 * GIB);
        assert!(
            f.evidence[0].contains("at least 7.00 GiB"),
            "{:?}",
            f.evidence
        );
        assert_eq!(segment_for(1), 2 << 20);
        assert_eq!(segment_for(5 << 20), 20 << 20);
        assert_eq!(segment_for((10 << 20) + 1), 12 << 20);
    }

    #[test]
    fn a_context_sized_gap_or_no_capacity_or_impossible_numbers_are_not() {
        let cases = [
            // 1 GiB outside: the CUDA context's order, under the 2 GiB floor.
            (at(GIB, 78 * GIB, Some(GIB)), Some((80 * GIB, "x"))),
            // 3 GiB of an 80 GiB device: under 5% (4 GiB).
            (at(GIB, 76 * GIB, Some(GIB)), Some((80 * GIB, "x"))),
            // No capacity: no evidence.
            (at(GIB, 10 * GIB, Some(GIB)), None),
            // Reserved + free above the capacity: not this device's.
            (at(GIB, 79 * GIB, Some(2 * GIB)), Some((80 * GIB, "x"))),
        ];
        for (o, capacity) in cases {
            assert_eq!(
                memory_outside_allocator(std::slice::from_ref(&o), capacity, GIB),
                None,
                "{o:?}"
            );
        }
    }
}
