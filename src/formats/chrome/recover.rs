//! Recovery: reading what can be read from a trace that is not valid JSON
//! even after token repair: a file cut short (a crashed or killed run), a
//! trailing comma, an event broken by an unescaped quote
//! (pytorch/pytorch#146900).
//!
//! A string-aware byte scanner walks the top-level structure. Each event of
//! `traceEvents` is found by bracket matching and parsed on its own (and
//! repaired on its own, see [`crate::formats::json_repair`]), so one broken
//! event costs only itself: complete events go to the same
//! [`Collector::push`] as on the fast path, a broken one is skipped to the
//! next `}, {` boundary, and a truncated tail becomes a `partial_read`
//! diagnostic instead of failing the file. The scan is bounded (events
//! skipped, bytes re-scanned) so damaged input cannot cost O(n²).

use serde::de::DeserializeSeed;

use super::collect::{Collected, Collector};
use super::skeleton::{DeviceProp, DistributedInfo, EventSeed, Num, RawEvent};
use super::ReadError;
use crate::formats::json_repair::{sanitize, JsonErrorAt, Repairs};
use crate::model::Diagnostic;

/// The recovery pass gives up after this many malformed events.
const MAX_BROKEN_EVENTS: usize = 10_000;

/// Skips JSON whitespace, and the NUL padding and stray BOM bytes damaged
/// files carry.
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n' | 0 | 0xEF | 0xBB | 0xBF) {
        i += 1;
    }
    i
}

/// `start` is at `"`; returns the index after the closing quote.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    None
}

/// The end (exclusive) of the JSON value starting at `start`; `None` at end of input.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = start;
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')
            {
                i += 1;
            }
            (i < b.len()).then_some(i)
        }
    }
}

/// The next event boundary `}` ws `,` ws `{` after `from`; returns the `{`.
fn resync(b: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < b.len() {
        if b[i] == b'}' {
            let j = skip_ws(b, i + 1);
            if j < b.len() && b[j] == b',' {
                let k = skip_ws(b, j + 1);
                if k < b.len() && b[k] == b'{' {
                    return Some(k);
                }
            }
        }
        i += 1;
    }
    None
}

/// How the recovery pass left the events array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArrayEnd {
    /// Saw the closing `]`.
    Closed { trailing_comma: bool },
    /// Input ended after a complete event (no closing `]`).
    NoBracket,
    /// Input ended inside an event.
    HalfEvent,
    /// Recovery stopped early: too many malformed events, or re-scanning
    /// broken events cost more than [`RESCAN_BUDGET`] allows.
    GaveUp,
}

/// Bytes the recovery pass may scan, as a multiple of the input size (plus
/// 256 MiB). Without a bound, a file of events whose brackets never balance
/// (or whose strings a stray quote inverts) costs O(n²): each is scanned to
/// the end of the input.
const RESCAN_BUDGET: usize = 16;
/// Longest single event the recovery pass looks for the end of; beyond
/// this an event is treated as broken and skipped to the next boundary.
const MAX_EVENT_BYTES: usize = 4 << 20;

#[derive(Default)]
struct RecoveryStats {
    complete: usize,
    broken: usize,
    first_broken: Option<String>,
    /// Repairs made inside single events.
    repairs: Repairs,
    /// Bytes scanned looking for event ends.
    scanned: usize,
}

impl RecoveryStats {
    fn note_broken(&mut self, message: impl FnOnce() -> String) {
        self.broken += 1;
        if self.first_broken.is_none() {
            self.first_broken = Some(message());
        }
    }
}

/// Parses one event on its own; on failure, retries after repairing tokens and
/// control characters in that event only.
fn parse_one_event<'a>(
    slice: &'a [u8],
    start: usize,
    stats: &mut RecoveryStats,
) -> Result<Option<RawEvent<'a>>, String> {
    let mut de = serde_json::Deserializer::from_slice(slice);
    let err = match EventSeed.deserialize(&mut de) {
        Ok(ev) => return Ok(ev),
        Err(e) => JsonErrorAt::new(&e, slice, start).to_string(),
    };
    let fixed = sanitize(slice);
    if fixed.changed() {
        let mut de = serde_json::Deserializer::from_slice(&fixed.bytes);
        if let Ok(ev) = EventSeed.deserialize(&mut de) {
            stats.repairs.add(fixed.repairs);
            return Ok(ev.map(RawEvent::into_owned));
        }
    }
    Err(err)
}

/// Parses the events of an array whose `[` is just before `pos`.
fn recover_events(
    b: &[u8],
    mut pos: usize,
    col: &mut Collector,
    stats: &mut RecoveryStats,
) -> (usize, ArrayEnd) {
    col.saw_trace_events = true;
    let mut after_comma = false;
    loop {
        pos = skip_ws(b, pos);
        if pos >= b.len() {
            return (pos, ArrayEnd::NoBracket);
        }
        match b[pos] {
            b']' => {
                let trailing_comma = after_comma;
                return (pos + 1, ArrayEnd::Closed { trailing_comma });
            }
            b',' => {
                after_comma = true;
                pos += 1;
                continue;
            }
            _ => after_comma = false,
        }
        let budget = b
            .len()
            .saturating_mul(RESCAN_BUDGET)
            .saturating_add(256 << 20);
        if stats.broken > MAX_BROKEN_EVENTS || stats.scanned > budget {
            return (pos, ArrayEnd::GaveUp);
        }
        let start = pos;
        let window = &b[..b.len().min(start.saturating_add(MAX_EVENT_BYTES))];
        let end = value_end(window, start);
        stats.scanned += end.unwrap_or(window.len()) - start;
        match end {
            Some(end) => match parse_one_event(&b[start..end], start, stats) {
                Ok(ev) => {
                    stats.complete += 1;
                    if let Some(ev) = ev {
                        col.push(&ev);
                    }
                    pos = end;
                }
                Err(message) => {
                    stats.note_broken(|| message);
                    match resync(b, start + 1) {
                        Some(next) => pos = next,
                        None => return (start, ArrayEnd::HalfEvent),
                    }
                }
            },
            None => match resync(b, start + 1) {
                // A quote inside this event broke the scan, but a later event
                // boundary exists: skip this event.
                Some(next) if b[start] == b'{' => {
                    stats.note_broken(|| format!("unbalanced event at byte {start}"));
                    pos = next;
                }
                _ => return (start, ArrayEnd::HalfEvent),
            },
        }
    }
}

/// The recovery pass; `first_err` is the fast path's error, reported when
/// nothing can be recovered.
pub(super) fn recover(
    b: &[u8],
    first_err: &JsonErrorAt,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<Collected, ReadError> {
    let mut col = Collector::default();
    let mut stats = RecoveryStats::default();
    let total = b.len();
    let fail = || Err(ReadError::Unparsed(first_err.clone()));

    let start = skip_ws(b, 0);
    if start >= total {
        return Err(ReadError::Empty { at: start });
    }
    let mut array_end = None;
    let mut object_truncated = false;
    match b[start] {
        b'[' => array_end = Some(recover_events(b, start + 1, &mut col, &mut stats)),
        b'{' => {
            let mut pos = start + 1;
            loop {
                pos = skip_ws(b, pos);
                if pos >= total {
                    object_truncated = true;
                    break;
                }
                match b[pos] {
                    b'}' => break,
                    b',' => {
                        pos += 1;
                        continue;
                    }
                    b'"' => {}
                    _ if col.saw_trace_events => break,
                    _ => return fail(),
                }
                let Some(key_end) = string_end(b, pos) else {
                    object_truncated = true;
                    break;
                };
                let key = &b[pos + 1..key_end - 1];
                pos = skip_ws(b, key_end);
                if pos >= total {
                    object_truncated = true;
                    break;
                }
                if b[pos] != b':' {
                    if col.saw_trace_events {
                        break;
                    }
                    return fail();
                }
                pos = skip_ws(b, pos + 1);
                if pos >= total {
                    object_truncated = true;
                    break;
                }
                if key == b"traceEvents" && b[pos] == b'[' {
                    let (p, end) = recover_events(b, pos + 1, &mut col, &mut stats);
                    array_end = Some((p, end));
                    pos = p;
                    if matches!(end, ArrayEnd::Closed { .. }) {
                        continue;
                    }
                    break;
                }
                let Some(end) = value_end(b, pos) else {
                    object_truncated = true;
                    break;
                };
                let slice = &b[pos..end];
                match key {
                    b"deviceProperties" => {
                        let fixed = sanitize(slice);
                        if let Ok(Some(props)) =
                            serde_json::from_slice::<Option<Vec<DeviceProp<'_>>>>(&fixed.bytes)
                        {
                            col.set_device_props(props);
                        }
                    }
                    b"distributedInfo" => {
                        if let Ok(info) = serde_json::from_slice::<DistributedInfo>(slice) {
                            col.set_distributed(info);
                        }
                    }
                    b"baseTimeNanoseconds" => {
                        col.set_base_time(
                            serde_json::from_slice::<Num>(slice).ok().and_then(Num::i64),
                        );
                    }
                    _ => {
                        if let Ok(k) = std::str::from_utf8(key) {
                            col.note_top_key(k);
                        }
                    }
                }
                pos = end;
            }
            if !col.saw_trace_events {
                if object_truncated {
                    return Err(ReadError::EndsBeforeTraceEvents(first_err.clone()));
                }
                return Ok(col.finish()); // a complete object without traceEvents
            }
        }
        _ => return fail(),
    }

    diagnostics.extend(stats.repairs.diagnostics());
    match array_end {
        Some((_, ArrayEnd::Closed { trailing_comma })) => {
            if trailing_comma {
                diagnostics.push(Diagnostic::info(
                    "the events array ends with a trailing comma (accepted)",
                ));
            }
            if object_truncated {
                diagnostics.push(Diagnostic::partial(format!(
                    "input is truncated after `traceEvents` ({total} bytes); all {} events were loaded",
                    stats.complete
                )));
            }
        }
        Some((_, ArrayEnd::NoBracket)) => diagnostics.push(Diagnostic::partial(format!(
            "input is truncated: the events array has no closing `]`; loaded {} complete events ({total} bytes)",
            stats.complete
        ))),
        Some((read, ArrayEnd::GaveUp)) => diagnostics.push(Diagnostic::partial(format!(
            "input is damaged: stopped reading at byte {read} of {total} after {} malformed events; loaded {} complete events before that",
            stats.broken, stats.complete
        ))),
        Some((read, ArrayEnd::HalfEvent)) => diagnostics.push(Diagnostic::partial(format!(
            "input is truncated: loaded {} complete events from the first {read} of {total} bytes; the last event is incomplete",
            stats.complete
        ))),
        None => {}
    }
    if stats.broken > 0 {
        diagnostics.push(Diagnostic::partial(format!(
            "skipped {} malformed event(s) (first: {})",
            stats.broken,
            stats.first_broken.as_deref().unwrap_or("?")
        )));
    }
    Ok(col.finish())
}
