//! Chrome trace reader: Kineto / PyTorch-profiler traces and any Chrome trace
//! with `[memory]` events (formats.md B, C, D12–D21).
//!
//! One buffer, read by the first of three passes that succeeds:
//!
//! 1. **Fast path** (`collect.rs`). `serde_json` streams `traceEvents`
//!    through a `visit_seq` into skeleton events (`skeleton.rs`: borrowed
//!    strings, only the fields memcut reads, everything else skipped as
//!    `IgnoredAny`), filtered while streaming: operator intervals, `B`/`E`
//!    pairs and `[memory]`/`[OutOfMemory]` instants are kept.
//! 2. **Token repair** (`formats/json_repair.rs`, shared with the
//!    memory-timeline reader). What Kineto is known to emit but JSON forbids
//!    (bare `NaN`/`inf`/`N/A`, raw control characters in strings, NUL
//!    padding) is rewritten and the fast path retried; errors keep their
//!    offsets in the original bytes.
//! 3. **Recovery** (`recover.rs`). A truncated file, a trailing comma or a
//!    broken event: a string-aware scanner parses every event on its own,
//!    keeps the complete ones and reports the damage as `partial_read`.
//!
//! Then `build.rs` makes the [`Trace`]: each memory event gets the operator
//! stack open at its instant on its thread (`attribute.rs`, one sort and a
//! sweep per thread), devices are named, and what the file lacks is said in
//! diagnostics.
//!
//! A file read from disk or a stream is first streamed (`stream.rs`: the
//! same result as pass 1 without holding the file, or a decline that sends
//! it down the passes above); a large plain file is streamed on two threads
//! from its start and from an element near its middle (`split.rs`).
//!
//! Data flows one way: `skeleton` → `collect` (and `stream`/`split` or
//! `recover`, which feed the same collector) → `attribute` → `build`.

mod attribute;
mod build;
mod collect;
mod recover;
mod skeleton;
mod split;
mod stream;
#[cfg(test)]
mod tests;

use std::io::BufRead;

use crate::error::{Error, Result};
use crate::formats::json_repair::{parse_or_repair, JsonErrorAt};
use crate::model::Trace;

/// Why a Chrome trace could not be read. Converts into [`Error`]: every
/// variant but `NoMemoryEvents` is [`Error::Json`] with this message.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("no memory events")]
    NoMemoryEvents,
    /// Not JSON, even after repair, and nothing recoverable: the strict
    /// parse's error.
    #[error("{0}")]
    Unparsed(JsonErrorAt),
    #[error("empty input at byte {at}")]
    Empty { at: usize },
    #[error("input ends before `traceEvents` ({0})")]
    EndsBeforeTraceEvents(JsonErrorAt),
    /// Recovery read no memory event before the damage it describes.
    #[error("no memory event could be read: {}", .0.join("; "))]
    NothingBeforeDamage(Vec<String>),
}

impl From<ReadError> for Error {
    fn from(e: ReadError) -> Error {
        match e {
            ReadError::NoMemoryEvents => Error::NoMemoryEvents,
            other => Error::Json(other.to_string()),
        }
    }
}

/// Parses a Chrome trace (object form `{"traceEvents": [...]}` or bare array
/// form), already decompressed.
///
/// Returns [`Error::NoMemoryEvents`] when the trace holds no `[memory]` or
/// `[OutOfMemory]` event and [`Error::Json`] when nothing usable can be read.
pub fn parse_chrome_trace(bytes: &[u8]) -> Result<Trace> {
    Ok(read(bytes)?)
}

/// Reads a Chrome trace in the object form from a stream, never holding
/// all of it (`stream.rs`), with the result [`parse_chrome_trace`] gives on
/// the whole input. `None` when it cannot promise that (damaged or unusual
/// input, a read error, not a Chrome trace after all): the caller then
/// reads the input again and hands all of it to [`parse_chrome_trace`].
pub fn read_chrome_stream(reader: &mut dyn BufRead) -> Option<Result<Trace>> {
    stream::read_streamed(reader).map(|r| r.map_err(Error::from))
}

pub(crate) use split::{
    read_tail_near, read_tail_pieces, skip_inflated, TailRead, MIN_SPLIT_BYTES,
};
pub(crate) use stream::Meeting;

/// Reads a Chrome trace in the object form on two threads (`split.rs`):
/// `head` from its start on this one, `tail` the rest from an element near
/// the middle on another ([`read_tail_near`]). The result is
/// [`read_chrome_stream`]'s, and `None` where it declines.
pub(crate) fn read_chrome_two(
    head: &mut dyn BufRead,
    tail: impl FnOnce(&Meeting) -> Option<TailRead> + Send,
) -> Option<Result<Trace>> {
    split::read_two(head, tail).map(|r| r.map_err(Error::from))
}

fn read(bytes: &[u8]) -> std::result::Result<Trace, ReadError> {
    let unparsed = match parse_or_repair(bytes, |buf, repairs| {
        collect::parse_strict(buf).map(|col| build::build_trace(col, repairs.diagnostics()))
    }) {
        Ok(built) => return built,
        Err(unparsed) => unparsed,
    };
    // Recovery works on the original bytes and repairs events one at a time,
    // so an unescaped quote cannot invert the string state of the whole file.
    let mut diagnostics = Vec::new();
    let col = recover::recover(bytes, &unparsed.error, &mut diagnostics)?;
    let damage: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.partial_read)
        .map(|d| d.message.clone())
        .collect();
    match build::build_trace(col, diagnostics) {
        // Nothing usable before the damage: say so rather than blaming the
        // profiler settings.
        Err(ReadError::NoMemoryEvents) if !damage.is_empty() => {
            Err(ReadError::NothingBeforeDamage(damage))
        }
        other => other,
    }
}
