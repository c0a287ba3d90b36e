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

use std::collections::HashMap;
use std::fmt;
use std::io::BufRead;
use std::rc::Rc;

mod fast;
mod fast_state;
mod machine;
mod memo;
mod opcodes;
// The first pass of the two-core parse (issue 35); the second parser that
// starts at its cut is the next step.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod split;
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

    /// The hook as [`std::any::Any`], for a join at a cut to reach the
    /// hook's own type (`None`, the default: no join).
    fn as_any(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}

/// What a first parser's memo holds at a slot, as a join reads it.
pub(crate) enum Held<'a> {
    Handle(Handle),
    List(&'a value::ListRc),
    /// A string, an empty list never fetched, anything else, or nothing.
    Other,
}

/// A first parser's memo, paused at a cut.
pub(crate) struct MemoView<'a>(&'a memo::Memo);

impl MemoView<'_> {
    pub(crate) fn get(&self, slot: u32) -> Held<'_> {
        match self.0.get(slot) {
            Some(memo::Got::Handle(h)) | Some(memo::Got::Value(&Value::Handle(h))) => {
                Held::Handle(h)
            }
            Some(memo::Got::Value(Value::List(l))) => Held::List(l),
            _ => Held::Other,
        }
    }
}

/// What a memo slot filled after a cut holds, as the part after the cut
/// hands it over: a handle, a string (its index in the part's strings), a
/// new empty list, or a value only the second parser held (a get of its
/// slot fails in the first parser, which then has the whole pickle parsed
/// again on one thread).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Made {
    Handle(Handle),
    Str(u32),
    EmptyList,
    Unknown,
}

/// What a first parser appends at a cut, made by a second parser that
/// started there (see [`JoinAt`]).
pub(crate) struct Joined {
    /// The handles the part's batches appended to the trace list.
    pub(crate) items: Vec<Handle>,
    /// The memo slots the part filled, in order, and their strings.
    pub(crate) made: Vec<Made>,
    pub(crate) strings: Vec<Box<str>>,
    /// Offset of the first opcode after the part.
    pub(crate) end: u64,
}

/// A first parser's join with a second parser that starts at a cut
/// (`split.rs`): `at` is the cut's offset once it is known (`u64::MAX`
/// until then: a parser already past it never joins), `join` is called
/// there, once, with the hook and the memo as they stand, and gives the
/// part to append, or `None` to parse on alone.
pub(crate) struct JoinAt<'a> {
    pub(crate) at: &'a std::sync::atomic::AtomicU64,
    #[allow(clippy::type_complexity)]
    pub(crate) join: Box<dyn FnMut(&mut dyn Hook, &MemoView<'_>) -> Option<Joined> + 'a>,
}

/// What a parser that started at a cut made of the trace list's batches
/// after it.
pub(crate) struct AfterCut {
    /// Offset of the first opcode after the batches.
    pub(crate) end: u64,
    /// What they appended to the list, in order.
    pub(crate) items: Vec<Handle>,
    /// The memo slots they filled, in order, and their strings.
    pub(crate) made: Vec<Made>,
    pub(crate) strings: Vec<Box<str>>,
}

/// Parses the batches of trace entries that start at `cut` in `bytes` (the
/// whole pickle), with the memo as the walk found it there, up to the
/// first opcode between batches that is not a `MARK`. `Err` (why) where it
/// cannot: bad bytes, the end of the input, a memo put out of order, or
/// anything but handles appended.
pub(crate) fn unpickle_after_cut(
    bytes: &[u8],
    cut: &split::Cut,
    limits: &Limits,
    hook: &mut dyn Hook,
) -> Result<AfterCut, String> {
    let mut reader = bytes.get(cut.at..).ok_or("a cut past the end")?;
    let memo = memo::Memo::at_cut(cut);
    let mut parser = machine::Parser::after_cut(&mut reader, limits, hook, memo);
    let result = parser.run();
    let outcome = result.map_err(|e| e.message).and_then(|_| {
        let list = match parser.stack.as_slice() {
            [Value::List(l)] if parser.memo_in_order() => Rc::clone(l),
            _ => return Err("the stack is not as the batches leave it".to_owned()),
        };
        let items = list.borrow();
        let (Some(Value::None), rest) = (items.first(), items.get(1..).unwrap_or_default()) else {
            return Err("the list's stand-in was changed".to_owned());
        };
        let items = rest
            .iter()
            .map(|v| match v {
                Value::Handle(h) => Ok(*h),
                _ => Err("a batch appended what is not a handle".to_owned()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut strings: Vec<Box<str>> = Vec::new();
        let mut string_of: HashMap<u32, u32> = HashMap::new();
        let made = (cut.slots.len()..parser.memo.count)
            .map(|slot| match parser.memo.get(slot as u32) {
                Some(memo::Got::Handle(h) | memo::Got::Value(&Value::Handle(h))) => Made::Handle(h),
                Some(memo::Got::Str(s, id)) => {
                    Made::Str(*string_of.entry(id).or_insert_with(|| {
                        strings.push(Box::from(&***s));
                        strings.len() as u32 - 1
                    }))
                }
                Some(memo::Got::Value(Value::Str(s))) => {
                    strings.push(Box::from(&***s));
                    Made::Str(strings.len() as u32 - 1)
                }
                Some(memo::Got::EmptyList) => Made::EmptyList,
                _ => Made::Unknown,
            })
            .collect();
        Ok(AfterCut {
            end: cut.at as u64 + parser.win.at(),
            items,
            made,
            strings,
        })
    });
    let offset = parser.op_off();
    let _ = teardown::finish(
        Ok(Value::None),
        offset,
        limits.max_depth,
        parser.into_held(),
    );
    outcome
}

/// [`unpickle_hinted`] that joins a second parser's part at a cut (see
/// [`JoinAt`]); also says whether it did.
pub(crate) fn unpickle_joining<R: BufRead>(
    reader: R,
    limits: &Limits,
    hook: &mut dyn Hook,
    hints: Option<Rc<GetRunHints>>,
    join: JoinAt<'_>,
) -> (Result<Value, PickleError>, bool) {
    let mut reader = reader;
    let mut parser = machine::Parser::new(&mut reader, limits, hook, hints);
    parser.join_at(join);
    let result = parser.run();
    let offset = parser.op_off();
    let joined = parser.joined;
    (
        teardown::finish(result, offset, limits.max_depth, parser.into_held()),
        joined,
    )
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

/// What the memo holds after the plain interpreter ran `prefix` (the bytes
/// of a pickle up to an opcode): by slot, a string's text or `None` for any
/// other value or an empty slot (the oracle of [`split`]'s tests).
#[cfg(test)]
pub(crate) fn memo_strings_after(prefix: &[u8]) -> Vec<Option<String>> {
    let mut reader = prefix;
    let limits = Limits::default();
    let mut hook = NoHook;
    let mut parser = machine::Parser::new(&mut reader, &limits, &mut hook, None);
    // The prefix ends at an opcode, so the run stops there, truncated.
    assert!(parser.run().is_err());
    (0..parser.memo.count as u32)
        .map(|i| parser.memo.get(i).and_then(|g| g.str().map(str::to_owned)))
        .collect()
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
