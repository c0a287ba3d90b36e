//! The Chrome trace reader on arbitrary bytes, then the analysis invariants.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(trace) = memcut::internals::chrome::parse_chrome_trace(data) else {
        return;
    };
    for d in &trace.devices {
        assert!(
            d.reported.is_empty() || d.reported.len() == d.events.len(),
            "reported totals must match events"
        );
    }
    let source = memcut::report::SourceInfo::new("fuzz", trace.format.as_str(), data.len() as u64);
    let report = memcut::internals::analyze_trace(&trace, source, &memcut::AnalyzeOptions::new());
    memcut_fuzz::check_report(&trace, &report);
});
