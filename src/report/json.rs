//! JSON: the machine contract. `schema_version` first, field names fixed by
//! [`crate::schema::Report`], laid out as `schema::json` lays it out
//! (pretty-printed, but arrays of numbers on one line).

use std::io::{self, Write};

use serde::Serialize;

use crate::schema::Report;

pub fn render(report: &Report) -> String {
    to_json(report)
}

/// Any report (an analysis, a diff) in this layout, with a final newline.
pub(crate) fn to_json<T: Serialize>(report: &T) -> String {
    let mut out = Vec::with_capacity(64 * 1024);
    write_json(report, &mut out).expect("writing to memory does not fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// [`to_json`] written straight to `out`, never held whole: a report of
/// 193K segments is 190 MB of JSON (`cs336-nothanmin` replicated to 1M
/// entries), which as a string doubled `analyze`'s peak RSS.
///
/// The serializer writes through a buffer of its own, whatever `out` is:
/// its many small writes (a comma, an indent) then compile to copies into
/// that buffer, not calls through `out` (a `dyn Write` from the CLI).
/// Whole-process, `memcut analyze FILE -f json -o /dev/null`, medians of 7
/// pairs side by side (A B A B) against the same binary without it
/// (2026-12-04): snap-cs336 (19.5 MB report) 0.95x wall, snap-unshared
/// (23.4 MB report) 0.92x wall.
///
/// The layout is the contract's (`schema::json`), which also writes the
/// longest arrays (the rows of every allocation live at the peak, a
/// state's segments) on two threads.
pub fn write_json<T: Serialize, W: Write>(report: &T, out: W) -> io::Result<()> {
    crate::schema::json::write(report, out)
}
