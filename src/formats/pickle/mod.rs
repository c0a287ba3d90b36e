//! A small, safe, fast, **non-executing** unpickler for PyTorch memory snapshots
//! (formats.md §A1, §A2, §D 1–3, 10).
//!
//! Only the data opcodes listed in formats.md §A2 are implemented (plus the
//! trivial stack opcodes `POP`, `POP_MARK` and `DUP`). Every opcode that could
//! import or call code (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `NEWOBJ`,
//! `NEWOBJ_EX`, `INST`, `OBJ`, `PERSID`, `BINPERSID`, `EXT1/2/4`) is refused
//! with an error naming it; other opcodes (protocol-0 text forms, bytes, sets,
//! out-of-band buffers) are reported as unsupported. Nothing is ever imported
//! or called.
//!
//! What each file is for, in the order data flows through them:
//!
//! | file | what it holds |
//! |---|---|
//! | `opcodes.rs` | opcode bytes and names, and the one decoder of each opcode's argument bytes (the plain interpreter and the fast paths both call it) |
//! | `window.rs` | the buffered window over the input: refills, limits on declared lengths, strings and integers |
//! | `memo.rs` | the memo (`BINPUT`/`MEMOIZE` slots), dense or sparse |
//! | `value.rs` | `Value`, what a pickle builds, and `Handle`, what a `Hook` puts in place of a container |
//! | `machine.rs` | the plain interpreter: one `match` arm per opcode, calling the `Hook` where a container completes |
//! | `fast/` | the snapshot fast paths, behind one door (`Hook::fast`): whole trace entries and tracebacks lowered straight from the bytes |
//! | `teardown.rs` | after `STOP`: the depth and cycle check, and the iterative teardown of what the parser held |
//!
//! Design notes:
//! - Streaming: the input is read through a private buffer window (1 MiB once
//!   the input proves large) that grows only when a single item (a long string)
//!   needs more and only as the bytes actually arrive, so a hostile declared
//!   length never causes a large allocation up front.
//! - Memo: values are shared (`Rc`), never deep-copied. Dense indices live in a
//!   `Vec`, sparse ones in a `HashMap`.
//! - Strings: invalid UTF-8 (e.g. lone surrogates written with CPython's
//!   `surrogatepass`) is decoded lossily with U+FFFD, never an error.
//! - Dicts are vectors of pairs in insertion order; a duplicated key is kept
//!   and `Value::get` returns the last one (Python's "last write wins").
//! - Depth: `MARK` nesting is limited while parsing; container nesting of the
//!   finished value is checked iteratively after `STOP` (cycles are rejected
//!   too), and everything the parser discards is torn down iteratively, so a
//!   hostile input cannot overflow the stack. The returned value is at most
//!   `max_depth` containers deep, so the ordinary recursive `Drop` is safe.
//! - Plain and fast: a hook without the door (`Hook::fast` is `None`) gets
//!   every opcode interpreted one by one; that plain path is the oracle the
//!   fast paths are tested against (`formats::snapshot`'s differential tests:
//!   the same trace, or the same error, from the plain path, the fast paths,
//!   and the fast paths fed through the read-ahead thread or a trickle).

use std::fmt;
use std::io::BufRead;
use std::rc::Rc;

mod fast;
mod fast_state;
mod machine;
mod memo;
mod opcodes;
mod teardown;
mod value;
mod window;
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod writer;

#[cfg(test)]
mod tests;

pub(crate) use fast::{GetRun, GetRunFinder, GetRunHints, Item, Records};
pub(crate) use value::{dict_value, Handle, Lowered, Value};

/// Lets the caller replace containers with compact records as the pickle
/// completes them, so a 1M-entry snapshot never holds 1M generic dicts at
/// once. An `Err(message)` from any method aborts the parse with a
/// [`PickleError`] at the current opcode.
pub(crate) trait Hook {
    /// Called for each dict appended to a list by APPEND/APPENDS. Return
    /// `Ok(Some(v))` to store `v` instead of the dict — the memo slot that holds
    /// the dict is replaced too, so that the dict is freed. `Ok(None)` keeps the
    /// dict.
    fn on_list_dict(&mut self, dict: &[(Value, Value)]) -> Result<Option<Value>, String>;

    /// Called when APPENDS or APPEND adds `items` to a list that is still
    /// empty (after [`Hook::on_list_dict`] has run on them). Return
    /// `Ok(Some(v))` to store the single value `v` in the list instead of the
    /// items (the list keeps its identity; later appends go after `v`), so a
    /// caller can lower a whole list — e.g. a traceback of frame handles —
    /// without the parser ever building it. `Ok(None)` (the default) appends
    /// the items. When every item is a handle, the answer must depend on the
    /// handles alone: the fast paths reuse a handle answered for a list of
    /// the same memo gets without asking again.
    fn on_list_items(&mut self, items: &[Value]) -> Result<Option<Value>, String> {
        let _ = items;
        Ok(None)
    }

    /// Called when APPENDS adds `items` to a list, after
    /// [`Hook::on_list_dict`] has run on them and [`Hook::on_list_items`]
    /// has declined them. Return `Ok(Some(v))` to append the single value
    /// `v` instead of the items — e.g. one handle for a batch of a trace's
    /// events — the list keeping its identity and its memo slot (later gets
    /// see the list, and may append to it); `Ok(None)` (the default) appends
    /// the items.
    fn on_appended_items(&mut self, items: &[Value]) -> Result<Option<Value>, String> {
        let _ = items;
        Ok(None)
    }

    /// Called when SETITEMS adds `items` (key0, value0, key1, value1, …) to
    /// a dict that is still empty. Return `Ok(Some(pair))` to store that one
    /// pair instead (the dict keeps its identity and memo slot; later
    /// SETITEM(S) add after it), so a caller can lower a record — e.g. a
    /// trace entry — before its pairs are ever moved into a dict. `Ok(None)`
    /// (the default) stores the items.
    fn on_dict_items(&mut self, items: &[Value]) -> Result<Option<(Value, Value)>, String> {
        let _ = items;
        Ok(None)
    }

    /// Called when SETITEM(S) adds `items` (key0, value0, …) to a
    /// [`Value::Handle`] where a dict was expected — a dict the hook lowered
    /// that the pickle goes on to add keys to through the memo. Return
    /// `Ok(true)` if the hook applied them; `Ok(false)` (the default) makes
    /// it an error.
    fn on_handle_items(&mut self, handle: Handle, items: &[Value]) -> Result<bool, String> {
        let _ = (handle, items);
        Ok(false)
    }

    /// The door to the fast paths (module `fast`): the hook's answers for
    /// records decoded straight from the bytes. `None` (the default) has
    /// every opcode interpreted plainly.
    fn fast(&mut self) -> Option<&mut dyn Records> {
        None
    }
}

/// A hook that keeps every dict.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) struct NoHook;

#[cfg(any(test, feature = "fuzzing"))]
impl Hook for NoHook {
    fn on_list_dict(&mut self, _dict: &[(Value, Value)]) -> Result<Option<Value>, String> {
        Ok(None)
    }
}

/// Resource limits for the unpickler.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Nesting of MARKs and of containers in the result (default 1000).
    pub max_depth: usize,
    /// Largest memo index and largest number of memo entries (default 2^28).
    pub max_memo: usize,
    /// Longest single string or integer payload, in bytes (default 1 GiB).
    pub max_string_bytes: u64,
    /// Bytes of input consumed (default unlimited).
    pub max_total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 1000,
            max_memo: 1 << 28,
            max_string_bytes: 1 << 30,
            max_total_bytes: u64::MAX,
        }
    }
}

/// Why a pickle could not be read; `offset` is the byte offset of the offending opcode.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PickleError {
    pub(crate) offset: u64,
    pub(crate) message: String,
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad pickle at byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for PickleError {}

impl From<PickleError> for crate::error::Error {
    fn from(e: PickleError) -> Self {
        crate::error::Error::Pickle {
            offset: e.offset,
            message: e.message,
        }
    }
}

/// Reads one pickle from `reader` up to and including STOP; bytes after STOP
/// (e.g. NUL padding) are ignored (the reader may have been read past STOP).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) fn unpickle<R: BufRead>(
    reader: R,
    limits: &Limits,
    hook: &mut dyn Hook,
) -> Result<Value, PickleError> {
    unpickle_hinted(reader, limits, hook, None)
}

/// [`unpickle`](fn@unpickle) with the [`GetRun`]s a [`GetRunFinder`] is finding in the
/// very bytes `reader` gives, from its first byte on (used by the fast
/// paths only).
pub(crate) fn unpickle_hinted<R: BufRead>(
    reader: R,
    limits: &Limits,
    hook: &mut dyn Hook,
    hints: Option<Rc<GetRunHints>>,
) -> Result<Value, PickleError> {
    let mut reader = reader;
    let mut parser = machine::Parser::new(&mut reader, limits, hook, hints);
    let result = parser.run();
    let offset = parser.op_off();
    teardown::finish(result, offset, limits.max_depth, parser.into_held())
}

/// [`unpickle`] with default limits and [`NoHook`].
#[cfg(test)]
pub(crate) fn unpickle_slice(bytes: &[u8]) -> Result<Value, PickleError> {
    unpickle(bytes, &Limits::default(), &mut NoHook)
}

/// What the fuzz targets (`fuzz/`) reach of the unpickler, with results as
/// text (the value's `Debug`, or the error's message) so that no type of
/// the unpickler is public.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    use std::io::BufRead;

    use super::{Limits, NoHook};

    /// Unpickles `reader` without a hook; reads every accessor of the value.
    pub fn unpickle<R: BufRead>(reader: R, limits: &Limits) -> Result<String, String> {
        let value = super::unpickle(reader, limits, &mut NoHook).map_err(|e| e.to_string())?;
        let _ = (value.get("segments"), value.as_i64(), value.type_name());
        Ok(format!("{value:?}"))
    }
}
