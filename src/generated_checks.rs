//! Whole-pipeline checks on snapshot-shaped pickles made by the reader's
//! structure-aware generator (`formats::snapshot::generate`), for the
//! property test below and the fuzz target `snapshot` (`fuzz/`).
//!
//! They live above the pipeline, not in the reader, because they run it:
//! the reader's own oracle (`generate::all_ways`: plain path, fast paths,
//! fast paths on a trickle) stays beside the reader; this adds the
//! read-ahead thread as `memcut analyze` reads, and the analysis, which must
//! give a report in every format or an error of one line.

use crate::formats::snapshot::generate;
use crate::input::{parse_bytes, read_trace_ahead, Limits};
use crate::report::{render, OutputFormat};

/// Builds a snapshot-shaped pickle from `data`, parses it every way memcut
/// can and analyses it: panics when two ways disagree, when the analysis
/// panics or when an error is not one line.
pub fn check_generated(data: &[u8]) {
    let mut u = arbitrary::Unstructured::new(data);
    let Ok(bytes) = generate::snapshot_pickle(&mut u) else {
        return;
    };
    check_pickle(&bytes);
}

fn check_pickle(bytes: &[u8]) {
    let plain = generate::all_ways(bytes);
    let show = |r: crate::error::Result<crate::model::Trace>| match r {
        Ok(trace) => Ok(format!("{trace:?}")),
        Err(e) => Err(e.to_string()),
    };
    // As `memcut analyze` reads: sniffed, then parsed at once or with the
    // read-ahead thread (whose hints the fast paths take).
    let limits = Limits::default();
    let at_once = show(parse_bytes(bytes, &limits));
    let ahead = show(read_trace_ahead(bytes, &limits));
    // (Only a pickle that starts with PROTO goes to the unpickler as is.)
    if bytes.first() == Some(&0x80) {
        generate::agree(("plain", &plain), ("at once", &at_once));
    }
    generate::agree(("at once", &at_once), ("read ahead", &ahead));
    analyze(bytes);
}

/// Runs `memcut analyze` on `bytes`: a report in every format, or an error
/// of one line.
fn analyze(bytes: &[u8]) {
    let options = crate::pipeline::AnalyzeOptions::new();
    match crate::pipeline::analyze_reader(bytes, "generated", bytes.len() as u64, &options) {
        Ok(report) => {
            for format in [
                OutputFormat::Text,
                OutputFormat::Md,
                OutputFormat::Json,
                OutputFormat::Html,
            ] {
                let _ = render(&report, format);
            }
        }
        Err(e) => {
            let message = e.to_string();
            assert!(!message.contains('\n'), "not one line: {message}");
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        // 300 cases, or `PROPTEST_CASES` for a longer run.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(300),
            ..ProptestConfig::default()
        })]
        /// The plain path, the fast paths (whole and trickled) and the
        /// read-ahead path give the same trace or error, and the analysis a
        /// report or a one-line error. (The fuzz target `snapshot` runs the
        /// same check for as long as it is given.)
        #[test]
        fn generated_snapshots_parse_alike_and_analyse_without_a_panic(
            data in proptest::collection::vec(any::<u8>(), 0..4096)
        ) {
            crate::generated_checks::check_generated(&data);
        }
    }
}
