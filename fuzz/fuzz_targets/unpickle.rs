//! The unpickler on arbitrary bytes: never panics, never recurses without bound,
//! and a value it returns is re-readable (tearing it down is iterative-safe).
#![no_main]

use libfuzzer_sys::fuzz_target;
use memcut::internals::pickle::{fuzzing::unpickle, Limits};

fuzz_target!(|data: &[u8]| {
    let value = unpickle(data, &Limits::default());
    // Tight limits: every limit error is an error, never a panic.
    let tight = Limits {
        max_depth: 8,
        max_memo: 16,
        max_string_bytes: 64,
        max_total_bytes: 256,
    };
    let limited = unpickle(data, &tight);
    // Tighter limits can only refuse more, never accept something different.
    if let Ok(l) = &limited {
        match &value {
            Ok(v) => assert_eq!(l, v),
            Err(e) => panic!("accepted under tight limits but refused by default: {e}"),
        }
    }
    // Streamed through a one-byte buffer: same outcome as from a slice.
    let trickled = unpickle(std::io::BufReader::with_capacity(1, data), &Limits::default());
    assert_eq!(value, trickled, "slice and stream disagree");
});
