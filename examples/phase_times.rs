//! Times each pipeline stage on one file: `cargo run --release --example phase_times FILE`.
use std::time::Instant;
fn main() {
    let path = std::env::args().nth(1).expect("FILE");
    let t = Instant::now();
    let trace =
        memcut::input::read_trace_ahead(std::fs::File::open(&path).unwrap(), &Default::default())
            .unwrap();
    eprintln!("parse: {:?} ({} sites)", t.elapsed(), trace.sites.len());
    for device in &trace.devices {
        let t = Instant::now();
        let replay = memcut::timeline::replay(device);
        eprintln!(
            "replay {}: {:?} ({} intervals)",
            device.device,
            t.elapsed(),
            replay.intervals.len()
        );
        let t = Instant::now();
        let classes = memcut::classify::classify(&trace, device, &replay, &[]);
        eprintln!("classify: {:?} ({})", t.elapsed(), classes.len());
    }
    let t = Instant::now();
    let source = memcut::report::SourceInfo::new(path.clone(), "x", 0);
    let (mut report, timelines) =
        memcut::analysis::analyze(&trace, source, &memcut::analysis::Options::new());
    eprintln!("analyze (replay+classify+report): {:?}", t.elapsed());
    let t = Instant::now();
    memcut::plan::attach_plans(&trace, &mut report, &timelines, &Default::default());
    eprintln!("plan: {:?}", t.elapsed());
    let t = Instant::now();
    let json = memcut::report::render(&report, memcut::report::OutputFormat::Json);
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
