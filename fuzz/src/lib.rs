//! Invariants shared by the fuzz targets (see `fuzz/README.md`).

use memcut::internals::Trace;
use memcut::{Category, Report};

/// Checks what every report must satisfy, whatever the input:
/// - per device, the by-category bytes (excluding `allocator_cache`) sum to
///   `peak.allocated_bytes`;
/// - `allocator_cache` = reserved − allocated at the peak when reserved is known;
/// - the peak is ≥ every point of the replayed allocated curve;
/// - a plan never saves more than the peak.
pub fn check_report(trace: &Trace, report: &Report) {
    for d in &report.devices {
        let peak = &d.peak;
        let sum: u128 = peak
            .by_category
            .iter()
            .filter(|(c, _)| **c != Category::AllocatorCache)
            .map(|(_, v)| *v as u128)
            .sum();
        assert_eq!(
            sum, peak.allocated_bytes as u128,
            "{}: categories {:?} do not sum to the peak {}",
            d.device, peak.by_category, peak.allocated_bytes
        );
        let cache = peak
            .by_category
            .get(&Category::AllocatorCache)
            .copied()
            .unwrap_or(0);
        match peak.reserved_bytes {
            Some(r) => assert_eq!(
                cache,
                r.saturating_sub(peak.allocated_bytes),
                "{}: allocator_cache != reserved - allocated",
                d.device
            ),
            None => assert_eq!(cache, 0, "{}: cache without reserved", d.device),
        }
        let device = trace
            .devices
            .iter()
            .find(|t| t.device == d.device)
            .expect("a reported device exists in the trace");
        let replay = memcut::internals::replay(device);
        assert_eq!(replay.allocated.len(), device.events.len() + 1);
        let max = replay.allocated.iter().copied().max().unwrap_or(0);
        assert!(
            peak.allocated_bytes >= max,
            "{}: peak {} below a curve point {}",
            d.device,
            peak.allocated_bytes,
            max
        );
        if let Some(plan) = &d.plan {
            let saved: u128 = plan.steps.iter().map(|s| s.saved_bytes as u128).sum();
            assert!(saved <= peak.allocated_bytes as u128, "plan saves more than the peak");
            assert!(plan.estimated_peak_bytes <= plan.peak_before_bytes);
        }
        for oom in &d.ooms {
            let sum: u128 = oom
                .by_category
                .iter()
                .filter(|(c, _)| **c != Category::AllocatorCache)
                .map(|(_, v)| *v as u128)
                .sum();
            assert_eq!(sum, oom.allocated_bytes as u128, "OOM categories");
        }
    }
    // Every renderer must cope with whatever the analysis produced.
    for format in [
        memcut::OutputFormat::Text,
        memcut::OutputFormat::Md,
        memcut::OutputFormat::Json,
        memcut::OutputFormat::Html,
    ] {
        let _ = memcut::render(report, format);
    }
}
