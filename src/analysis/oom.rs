//! The OOMs of a device: the state when each request failed, and what its
//! numbers say (`verdict`).

use crate::model::{BlockState, DeviceTrace};
use crate::schema::{OomFinding, SegmentState, SegmentsView};

use super::{categories_at, ClassifiedDevice};

pub(super) fn findings(
    device: &DeviceTrace,
    cd: &ClassifiedDevice,
    segments: Option<&SegmentsView>,
) -> Vec<OomFinding> {
    // The dump's free blocks, for an OOM whose segments were not rebuilt.
    let dumped_largest_free = device.segments.as_ref().and_then(|segs| {
        segs.iter()
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.state == BlockState::Inactive)
            .map(|b| b.size)
            .max()
    });
    cd.timeline
        .replay
        .ooms
        .iter()
        .enumerate()
        .map(|(n, &k)| {
            let e = &device.events[k as usize];
            // The state when the request failed: before this event.
            let position = k;
            let (allocated, reserved, live) = cd.state_at(position);
            let device_free = (e.device_free() > 0).then_some(e.device_free());
            let state = segments.and_then(|v| {
                let label = format!("oom {n}");
                v.instants
                    .iter()
                    .find(|s| s.label.split(", ").any(|l| l == label))
            });
            let largest_free = state
                .map(|s| s.largest_free_block_bytes)
                .or(dumped_largest_free);
            OomFinding {
                event_index: k as u64,
                ts_us: e.ts(),
                requested_bytes: e.size,
                device_free_bytes: device_free,
                allocated_bytes: allocated,
                reserved_bytes: reserved,
                by_category: categories_at(&live, allocated, reserved),
                largest_free_block_bytes: largest_free,
                verdict: verdict(
                    e.size,
                    device_free,
                    allocated,
                    reserved,
                    largest_free,
                    state,
                    device.capacity_bytes,
                ),
            }
        })
        .collect()
}

/// What an OOM's numbers say, in one line. Without the free bytes (a
/// Chrome trace's OOM), the device's capacity still bounds them: less than
/// the segment the allocator asked for was free.
fn verdict(
    requested: u64,
    device_free: Option<u64>,
    allocated: u64,
    reserved: Option<u64>,
    largest_free: Option<u64>,
    segments: Option<&SegmentState>,
    capacity: Option<u64>,
) -> String {
    use crate::units::human_bytes as h;
    let cached = reserved.map(|r| r.saturating_sub(allocated)).unwrap_or(0);
    let free = device_free.unwrap_or(0);
    // What the segments show: the free blocks and how much of them is too small.
    let blocks = segments.map_or(String::new(), |s| {
        format!(
            " ({} in free blocks, {} of it in blocks smaller than the request, across {} segment{})",
            h(s.inactive_bytes),
            h(s.fragmentation_bytes),
            s.segment_count,
            if s.segment_count == 1 { "" } else { "s" }
        )
    });
    match largest_free {
        Some(largest) if cached >= requested && largest < requested => format!(
            "fragmentation: {} cached{blocks} but the largest free block is {} < {} requested; try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            h(cached), h(largest), h(requested)
        ),
        _ if device_free.is_none() => {
            // The device's capacity bounds what was free: the allocator
            // asked it for a segment and got none.
            let bound = capacity.zip(reserved).map_or(String::new(), |(c, r)| {
                format!(
                    " (less than the {} segment the allocator asked for; of the device's {}, {} was PyTorch's)",
                    h(crate::segments::segment_for(requested)),
                    h(c),
                    h(r)
                )
            });
            format!(
                "{} requested with {} cached; the trace does not say how much memory was free on the device{bound}",
                h(requested),
                reserved.map_or_else(|| "an unknown amount".to_owned(), |_| h(cached))
            )
        }
        _ if free + cached < requested => format!(
            "genuine shortage: {} requested, {} free on the device + {} cached",
            h(requested), h(free), h(cached)
        ),
        _ => format!(
            "{} requested with {} free on the device and {} cached: the allocator could not place it",
            h(requested), h(free), h(cached)
        ),
    }
}
