//! Structure-aware: the fuzzer's bytes drive `arbitrary::Unstructured`
//! choices that build a snapshot-shaped value (memcut's
//! `formats::snapshot::generate`: entries with known and unknown actions,
//! shared frames, frames lists that hold no frames, wrong types, missing and
//! extra keys), pickled as PyTorch's pickler writes it. Checks that the
//! plain path, the fast paths (whole and trickled) and the read-ahead path
//! agree, and that the analysis gives a report or a one-line error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    memcut::internals::check_generated(data);
});
