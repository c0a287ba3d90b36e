//! The whole `analyze` pipeline (sniff, gunzip, parse, replay, classify,
//! report) on arbitrary bytes, with the report invariants checked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memcut::internals::{parse_bytes, read_trace_ahead};

fuzz_target!(|data: &[u8]| {
    let mut options = memcut::AnalyzeOptions::new();
    // Keep the fuzzer's memory bounded: small inputs may not inflate past 64 MiB.
    options.limits.max_inflated_bytes = 64 << 20;
    let report = memcut::analyze_reader(data, "fuzz", data.len() as u64, &options);
    let trace = parse_bytes(data, &options.limits);
    // Reading ahead (gzip inflated and tracebacks' memo-get runs found on
    // the reader thread) must parse exactly alike, and fail alike — except
    // that in a corrupt gzip stream, how much inflates before the damage
    // shows depends on the read sizes (1 MiB ahead, 64 KiB at once), so
    // the half-inflated content may be refused first on one path and the
    // stream on the other. Both must still fail.
    let show = |r: &Result<_, memcut::Error>| match r {
        Ok(trace) => format!("{trace:?}"), // Debug: a missing time is a NaN
        Err(e) => format!("error: {e}"),
    };
    let (ahead, at_once) = (show(&read_trace_ahead(data, &options.limits)), show(&trace));
    let broken_gzip = |s: &str| s.starts_with("error:") && s.contains("gzip stream");
    if !(broken_gzip(&ahead) && at_once.starts_with("error:")
        || broken_gzip(&at_once) && ahead.starts_with("error:"))
    {
        assert_eq!(ahead, at_once, "read_trace_ahead and parse_bytes disagree");
    }
    match (&report, &trace) {
        (Ok(report), Ok(trace)) => memcut_fuzz::check_report(trace, report),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("analyze_reader and parse_bytes disagree"),
    }
});
