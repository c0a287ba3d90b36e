//! Times each pipeline stage on one file: `cargo run --release --example phase_times FILE`.
use std::time::Instant;

use memcut::internals::{classify, read_file, replay};

fn main() {
    let path = std::env::args().nth(1).expect("FILE");
    let t = Instant::now();
    let trace = read_file(path.as_ref(), &Default::default()).unwrap();
    eprintln!("parse: {:?} ({} sites)", t.elapsed(), trace.sites.len());
    for device in &trace.devices {
        let t = Instant::now();
        let replay = replay(device);
        eprintln!(
            "replay {}: {:?} ({} intervals)",
            device.device,
            t.elapsed(),
            replay.intervals.len()
        );
        let t = Instant::now();
        let classes = classify(&trace, device, &replay, &[]);
        eprintln!("classify: {:?} ({})", t.elapsed(), classes.len());
    }
    let t = Instant::now();
    let source = memcut::report::SourceInfo::new(path.clone(), trace.format.as_str(), 0);
    let report = memcut::internals::analyze_trace(&trace, source, &memcut::AnalyzeOptions::new())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    eprintln!("analyze (replay+classify+report+plan): {:?}", t.elapsed());
    let t = Instant::now();
    let json = memcut::render(&report, memcut::OutputFormat::Json);
    eprintln!(
        "render json: {:?} ({} bytes, {} live allocations)",
        t.elapsed(),
        json.len(),
        report
            .devices
            .iter()
            .map(|d| d.peak.allocations.len())
            .sum::<usize>()
    );
    let t = Instant::now();
    drop(trace);
    eprintln!("drop trace: {:?}", t.elapsed());
}
