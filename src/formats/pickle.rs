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
//!   and [`Value::get`] returns the last one (Python's "last write wins").
//! - Depth: `MARK` nesting is limited while parsing; container nesting of the
//!   finished value is checked iteratively after `STOP` (cycles are rejected
//!   too), and everything the parser discards is torn down iteratively, so a
//!   hostile input cannot overflow the stack. The returned value is at most
//!   `max_depth` containers deep, so the ordinary recursive `Drop` is safe.

use rustc_hash::FxHashMap;
use std::cell::{Ref, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::io::BufRead;
use std::rc::{Rc, Weak};

/// A decoded pickle value. Cloning is cheap (`Rc` clones for containers and strings).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    /// Integers that do not fit i64 (e.g. 9-byte LONG1 unsigned 64-bit values). Larger than i128 → error.
    BigInt(Box<i128>),
    Float(f64),
    /// Thin pointers (`Rc<Box<…>>`) keep a `Value` at 16 bytes: the memo of a
    /// 1M-entry snapshot holds ~1.7M of them.
    Str(Rc<Box<str>>),
    List(Rc<RefCell<Vec<Value>>>),
    Tuple(Rc<Box<[Value]>>),
    /// Pairs in insertion order (keys may be any value).
    Dict(Rc<RefCell<Vec<(Value, Value)>>>),
    /// A value the caller's hook substituted for a completed dict (see [`Hook`]).
    Handle(Handle),
}

/// What a [`Hook`] put in place of a container: one of the compact records
/// the snapshot lowering (`formats::snapshot`) makes, by kind and index.
/// The unpickler only stores, copies and compares handles. The kind is an
/// `enum` beside the index, never bits of it, so no index can pass for
/// another kind; the constructors check that an index fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle(Lowered);

/// The kinds of [`Handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lowered {
    /// A trace entry with a known action: its index among the events.
    Event(u32),
    /// The key of the pair a trace entry's dict keeps once its fields are
    /// lowered (its value says whether the entry had frames). Only the
    /// lowering makes one, so no pickle can forge it through the memo.
    Marker(u32),
    /// A trace entry whose action memcut skips.
    Skipped,
    /// A frame dict: its index among the frames.
    Frame(u32),
    /// A traceback: its site.
    Site(u32),
}

impl Handle {
    pub const SKIPPED: Handle = Handle(Lowered::Skipped);

    pub fn event(index: usize) -> Result<Handle, String> {
        Ok(Handle(Lowered::Event(fits(index, "trace entries")?)))
    }

    pub fn marker(event: Handle) -> Option<Handle> {
        match event.0 {
            Lowered::Event(i) => Some(Handle(Lowered::Marker(i))),
            _ => None,
        }
    }

    pub fn frame(index: usize) -> Result<Handle, String> {
        Ok(Handle(Lowered::Frame(fits(index, "distinct frames")?)))
    }

    pub fn site(site: u32) -> Handle {
        Handle(Lowered::Site(site))
    }

    pub fn lowered(self) -> Lowered {
        self.0
    }
}

/// `index` as a `u32`, or an error naming the `what` that overflowed.
fn fits(index: usize, what: &str) -> Result<u32, String> {
    u32::try_from(index).map_err(|_| format!("more than 2^32 {what}"))
}

impl Value {
    /// Dict lookup by string key (the last pair wins if a key repeats). `None`
    /// if `self` is not a dict or the key is missing.
    pub fn get(&self, key: &str) -> Option<Value> {
        match self {
            Value::Dict(d) => d
                .borrow()
                .iter()
                .rev()
                .find(|(k, _)| matches!(k, Value::Str(s) if &***s == key))
                .map(|(_, v)| v.clone()),
            _ => None,
        }
    }

    /// `Int`, `Bool` (0/1) or a `BigInt` in i64 range.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i64),
            Value::BigInt(b) => i64::try_from(**b).ok(),
            _ => None,
        }
    }

    /// A non-negative `Int` or a `BigInt` in u64 range.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(i) => u64::try_from(*i).ok(),
            Value::BigInt(b) => u64::try_from(**b).ok(),
            _ => None,
        }
    }

    /// `Float`, `Int` or `BigInt` (rounded).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::BigInt(b) => Some(**b as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn list_items(&self) -> Option<Ref<'_, Vec<Value>>> {
        match self {
            Value::List(l) => Some(l.borrow()),
            _ => None,
        }
    }

    pub fn tuple_items(&self) -> Option<&[Value]> {
        match self {
            Value::Tuple(t) => Some(t),
            _ => None,
        }
    }

    pub fn dict_items(&self) -> Option<Ref<'_, Vec<(Value, Value)>>> {
        match self {
            Value::Dict(d) => Some(d.borrow()),
            _ => None,
        }
    }

    /// Identity of a shared container (its `Rc` address), so callers can intern
    /// a memoized list once. `None` for scalars and strings.
    pub fn identity(&self) -> Option<usize> {
        match self {
            Value::List(l) => Some(Rc::as_ptr(l) as *const u8 as usize),
            Value::Dict(d) => Some(Rc::as_ptr(d) as *const u8 as usize),
            Value::Tuple(t) => Some(Rc::as_ptr(t) as *const u8 as usize),
            _ => None,
        }
    }

    /// Python-ish type name for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
            Value::Handle(_) => "handle",
        }
    }

    fn is_container(&self) -> bool {
        matches!(self, Value::List(_) | Value::Tuple(_) | Value::Dict(_))
    }

    /// Strong count of the container's `Rc` (1 for scalars).
    fn share_count(&self) -> usize {
        match self {
            Value::List(l) => Rc::strong_count(l),
            Value::Dict(d) => Rc::strong_count(d),
            Value::Tuple(t) => Rc::strong_count(t),
            _ => 1,
        }
    }
}

/// Lets the caller replace completed dicts with compact records as they are
/// appended to a list, so a 1M-entry snapshot never holds 1M generic dicts at once.
pub trait Hook {
    /// Called for each dict appended to a list by APPEND/APPENDS. Return
    /// `Ok(Some(v))` to store `v` instead of the dict — the memo slot that holds
    /// the dict is replaced too, so that the dict is freed. `Ok(None)` keeps the
    /// dict. `Err(msg)` aborts with a [`PickleError`] at the current offset.
    fn on_list_dict(&mut self, dict: &[(Value, Value)]) -> Result<Option<Value>, String>;

    /// Called when APPENDS or APPEND adds `items` to a list that is still
    /// empty (after [`Hook::on_list_dict`] has run on them). Return
    /// `Ok(Some(v))` to store the single value `v` in the list instead of the
    /// items (the list keeps its identity; later appends go after `v`), so a
    /// caller can lower a whole list — e.g. a traceback of frame handles —
    /// without the parser ever building it. `Ok(None)` (the default) appends
    /// the items. `Err(msg)` aborts with a [`PickleError`] at the current offset.
    fn on_list_items(&mut self, items: &[Value]) -> Result<Option<Value>, String> {
        let _ = items;
        Ok(None)
    }

    /// Called when SETITEMS adds `items` (key0, value0, key1, value1, …) to
    /// a dict that is still empty. Return `Ok(Some(pair))` to store that one
    /// pair instead (the dict keeps its identity and memo slot; later
    /// SETITEM(S) add after it), so a caller can lower a record — e.g. a
    /// trace entry — before its pairs are ever moved into a dict. `Ok(None)`
    /// (the default) stores the items. `Err(msg)` aborts with a [`PickleError`].
    fn on_dict_items(&mut self, items: &[Value]) -> Result<Option<(Value, Value)>, String> {
        let _ = items;
        Ok(None)
    }

    /// A fast path of [`Hook::on_list_items`] for the common case where every
    /// item is a [`Value::Handle`] fetched from the memo (`MARK`, then only
    /// `BINGET`/`LONG_BINGET`s, then `APPENDS` into an empty list): the parser
    /// collects the handles without building values. It must answer as
    /// `on_list_items` would for `[Value::Handle(h), …]`; `Ok(None)` (the
    /// default) makes the parser run the opcodes normally, which then calls
    /// `on_list_items`. A handle it answers must stand for any later list of
    /// the same handles too: the parser may reuse the answer without a call.
    fn on_handle_list(&mut self, handles: &[Handle]) -> Result<Option<Value>, String> {
        let _ = handles;
        Ok(None)
    }

    /// Whether the parser should offer records to [`Hook::on_record`]
    /// (scanning for them costs time when nobody lowers them).
    fn wants_records(&self) -> bool {
        false
    }

    /// A fast path of [`Hook::on_dict_items`] for the common shape of a
    /// record: `MARK`, then string keys and scalar values (or lists of
    /// handles that [`Hook::on_handle_list`] lowered to a handle), then
    /// `SETITEMS` into an empty dict, all in the buffered input. The parser
    /// decodes the fields without building values. It must answer as
    /// `on_dict_items` would for the same items, where a lowered list is
    /// given as the handle it was lowered to; `Ok(None)` or `Err` make the
    /// parser run the opcodes normally (which then calls `on_dict_items`).
    fn on_record(&mut self, items: &[Item<'_>]) -> Result<Option<(Value, Value)>, String> {
        let _ = items;
        Ok(None)
    }

    /// A stronger [`Hook::on_record`] for a record that is a whole new dict
    /// (`EMPTY_DICT`, `MEMOIZE` or not, `MARK`, the record, `SETITEMS`):
    /// return `Ok(Some(v))` to have `v` stand for the dict wherever it would
    /// have gone — the stack and its memo slot — so the dict is never built
    /// (what [`Hook::on_list_dict`] would later do to it must be done now).
    /// `Ok(None)` (the default) or `Err` make the parser build the dict
    /// (offering the record to `on_record`).
    fn on_whole_record(&mut self, items: &[Item<'_>]) -> Result<Option<Value>, String> {
        let _ = items;
        Ok(None)
    }

    /// Called when SETITEM(S) adds `items` (key0, value0, …) to a
    /// [`Value::Handle`] where a dict was expected — a dict the hook lowered
    /// (e.g. by [`Hook::on_whole_record`]) that the pickle goes on to add
    /// keys to through the memo. Return `Ok(true)` if the hook applied them;
    /// `Ok(false)` (the default) makes it an error.
    fn on_handle_items(&mut self, handle: Handle, items: &[Value]) -> Result<bool, String> {
        let _ = (handle, items);
        Ok(false)
    }
}

/// A field of a record offered to [`Hook::on_record`]: a borrowed view of a
/// scalar or string [`Value`] (keys are always [`Item::Str`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Item<'a> {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
    Handle(Handle),
}

/// A hook that keeps every dict.
pub struct NoHook;

impl Hook for NoHook {
    fn on_list_dict(&mut self, _dict: &[(Value, Value)]) -> Result<Option<Value>, String> {
        Ok(None)
    }
}

/// Resource limits for [`unpickle`].
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
pub struct PickleError {
    pub offset: u64,
    pub message: String,
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
pub fn unpickle<R: BufRead>(
    reader: R,
    limits: &Limits,
    hook: &mut dyn Hook,
) -> Result<Value, PickleError> {
    unpickle_hinted(reader, limits, hook, None)
}

/// [`unpickle`] with the [`GetRun`]s a [`GetRunFinder`] is finding in the
/// very bytes `reader` gives, from its first byte on.
pub fn unpickle_hinted<R: BufRead>(
    reader: R,
    limits: &Limits,
    hook: &mut dyn Hook,
    hints: Option<Rc<GetRunHints>>,
) -> Result<Value, PickleError> {
    let mut p = Parser::new(reader, limits, hook, hints);
    let result = p.run();
    let offset = p.op_off;
    // The depth check runs while the memo still holds its values, so every
    // container reachable from the result that is also held elsewhere is in
    // `reachable`; whatever else the parser holds is emptied before it is
    // dropped, which frees reference cycles among discarded values.
    let checked = result.and_then(|value| match check_depth(&value, limits.max_depth) {
        Ok(reachable) => Ok((value, reachable)),
        Err(message) => {
            break_all(vec![value], &HashMap::new());
            Err(PickleError { offset, message })
        }
    });
    let held: Vec<Value> = p
        .stack
        .drain(..)
        .chain(p.memo.dense.drain(..).flatten())
        .chain(p.memo.sparse.drain().map(|(_, v)| v))
        .filter(Value::is_container)
        .collect();
    match checked {
        Ok((value, reachable)) => {
            break_all(held, &reachable);
            Ok(value)
        }
        Err(e) => {
            break_all(held, &HashMap::new());
            Err(e)
        }
    }
}

/// Drops values that nothing else will use, emptying every list and dict
/// reachable from them even when shared, so reference cycles are freed;
/// containers in `keep` (part of the returned value) are only released.
/// Iterative; each shared container is visited once.
fn break_all(mut work: Vec<Value>, keep: &HashMap<usize, Seen>) {
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = work.pop() {
        let Some(id) = v.identity() else { continue };
        if keep.contains_key(&id) || (v.share_count() > 1 && !seen.insert(id)) {
            continue;
        }
        match &v {
            Value::List(l) => work.extend(std::mem::take(&mut *l.borrow_mut())),
            Value::Dict(d) => {
                for (k, x) in std::mem::take(&mut *d.borrow_mut()) {
                    work.push(k);
                    work.push(x);
                }
            }
            Value::Tuple(t) => work.extend(t.iter().filter(|x| x.is_container()).cloned()),
            _ => {}
        }
    }
}

/// Convenience: [`unpickle`] with default limits and [`NoHook`].
pub fn unpickle_slice(bytes: &[u8]) -> Result<Value, PickleError> {
    unpickle(bytes, &Limits::default(), &mut NoHook)
}

// ---------------------------------------------------------------------------
// Opcodes

mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
}

/// Name of an implemented opcode (for messages).
fn op_name(code: u8) -> &'static str {
    match code {
        op::MARK => "MARK",
        op::STOP => "STOP",
        op::POP => "POP",
        op::POP_MARK => "POP_MARK",
        op::DUP => "DUP",
        op::APPEND => "APPEND",
        op::APPENDS => "APPENDS",
        op::DICT => "DICT",
        op::LIST => "LIST",
        op::TUPLE => "TUPLE",
        op::TUPLE1 => "TUPLE1",
        op::TUPLE2 => "TUPLE2",
        op::TUPLE3 => "TUPLE3",
        op::SETITEM => "SETITEM",
        op::SETITEMS => "SETITEMS",
        op::MEMOIZE => "MEMOIZE",
        op::BINPUT => "BINPUT",
        op::LONG_BINPUT => "LONG_BINPUT",
        _ => "this opcode",
    }
}

/// Opcodes that import or call code: always refused.
fn refused_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'i' => "INST",
        b'o' => "OBJ",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        _ => return None,
    })
}

/// Harmless opcodes that PyTorch snapshots never contain.
fn unsupported_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'I' => "INT",
        b'L' => "LONG",
        b'F' => "FLOAT",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'p' => "PUT",
        b'g' => "GET",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x8e => "BINBYTES8",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

// ---------------------------------------------------------------------------
// Parser

/// The shared dict inside [`Value::Dict`].
type DictRc = Rc<RefCell<Vec<(Value, Value)>>>;
/// The shared list inside [`Value::List`].
type ListRc = Rc<RefCell<Vec<Value>>>;

/// Most values the parser stack may hold (Python batches list and dict items
/// by 1000, so real snapshots stay far below this).
const MAX_STACK: usize = 1 << 20;

/// Memo indices are u32; this one is reserved so that `MEMOIZE` can detect overflow.
const NO_MEMO: u32 = u32::MAX;
const DICT_POOL_MAX: usize = 4096;
const INITIAL_BUF: usize = 64 << 10;
const TARGET_BUF: usize = 1 << 20;

#[derive(Default)]
struct Memo {
    dense: Vec<Option<Value>>,
    sparse: HashMap<u32, Value>,
    count: usize,
    /// Bumped whenever a slot that held a [`Value::Handle`] is overwritten
    /// (never, in a pickle that `pickle.dump` wrote): answers cached by the
    /// bytes of memo gets ([`TracebackLists`]) hold only while it is unchanged.
    handles_changed: u64,
}

impl Memo {
    fn get(&self, idx: u32) -> Option<&Value> {
        match self.dense.get(idx as usize) {
            Some(Some(v)) => Some(v),
            _ if self.sparse.is_empty() => None,
            _ => self.sparse.get(&idx),
        }
    }

    /// Stores `v` at `idx`, returning the value it replaced.
    fn put(&mut self, idx: u32, v: Value, max_memo: usize) -> Result<Option<Value>, String> {
        let i = idx as usize;
        if i < self.dense.len() {
            let old = self.dense[i].replace(v);
            let old = match old {
                Some(o) => Some(o),
                None if !self.sparse.is_empty() => self.sparse.remove(&idx),
                None => None,
            };
            self.counted(&old, max_memo)?;
            return Ok(old);
        }
        if i >= max_memo {
            return Err(format!("memo index {idx} exceeds the limit of {max_memo}"));
        }
        let len = self.dense.len();
        if i <= len + len / 2 + 1024 {
            // Dense enough: grow the vector.
            let old = if self.sparse.is_empty() {
                None
            } else {
                self.sparse.remove(&idx)
            };
            self.counted(&old, max_memo)?;
            self.dense.resize(i, None);
            self.dense.push(Some(v));
            Ok(old)
        } else {
            let old = self.sparse.insert(idx, v);
            self.counted(&old, max_memo)?;
            Ok(old)
        }
    }

    /// Accounts for a put that replaced `old`: a new slot, or a changed one.
    fn counted(&mut self, old: &Option<Value>, max_memo: usize) -> Result<(), String> {
        match old {
            None => self.count_one(max_memo),
            Some(Value::Handle(_)) => {
                self.handles_changed += 1;
                Ok(())
            }
            Some(_) => Ok(()),
        }
    }

    fn count_one(&mut self, max_memo: usize) -> Result<(), String> {
        if self.count >= max_memo {
            return Err(format!("memo holds more than {max_memo} entries"));
        }
        self.count += 1;
        Ok(())
    }

    /// Replaces slot `idx` with `new` if it still holds the list `l`; returns the old value.
    fn replace_list(&mut self, idx: u32, l: &ListRc, new: Value) -> Option<Value> {
        let slot = match self.dense.get_mut(idx as usize) {
            Some(Some(v)) => v,
            _ => self.sparse.get_mut(&idx)?,
        };
        match slot {
            Value::List(x) if Rc::ptr_eq(x, l) => Some(std::mem::replace(slot, new)),
            _ => None,
        }
    }

    /// Replaces slot `idx` with `new` if it still holds a value equal to `old`.
    fn replace_if(&mut self, idx: u32, old: &Value, new: Value) {
        let slot = match self.dense.get_mut(idx as usize) {
            Some(Some(v)) => v,
            _ => match self.sparse.get_mut(&idx) {
                Some(v) => v,
                None => return,
            },
        };
        if slot == old {
            let was_handle = matches!(slot, Value::Handle(_));
            *slot = new;
            self.handles_changed += u64::from(was_handle);
        }
    }

    /// Replaces slot `idx` with `new` if it still holds the dict `d`; returns the old value.
    fn replace_dict(&mut self, idx: u32, d: &DictRc, new: Value) -> Option<Value> {
        let slot = match self.dense.get_mut(idx as usize) {
            Some(Some(v)) => v,
            _ => self.sparse.get_mut(&idx)?,
        };
        match slot {
            Value::Dict(x) if Rc::ptr_eq(x, d) => Some(std::mem::replace(slot, new)),
            _ => None,
        }
    }
}

/// Moves `items` out as (key, value) pairs, leaving `None`s behind. An exact-size
/// iterator over slots is much faster than pairing `Drain::next()` results,
/// which go through `Option<Value>` temporaries.
#[inline(always)]
fn pairs(items: &mut [Value]) -> impl ExactSizeIterator<Item = (Value, Value)> + '_ {
    items.chunks_exact_mut(2).map(|c| {
        (
            std::mem::replace(&mut c[0], Value::None),
            std::mem::replace(&mut c[1], Value::None),
        )
    })
}

/// Most items (keys and values) of a record for [`Parser::record_run`].
const MAX_RECORD_ITEMS: usize = 32;

/// Fixed-capacity scratch filled in order, never initialised as a whole:
/// a record's items and memo puts are scanned into two of these per entry,
/// and zeroing both (1.5 KB) for each of 1M entries cost ~5% of a parse.
struct Slots<T, const N: usize> {
    buf: [std::mem::MaybeUninit<T>; N],
    len: usize,
}

impl<T: Copy, const N: usize> Slots<T, N> {
    fn new() -> Self {
        Slots {
            buf: [const { std::mem::MaybeUninit::uninit() }; N],
            len: 0,
        }
    }

    /// Appends `v`; `None` when full.
    #[inline(always)]
    fn push(&mut self, v: T) -> Option<()> {
        self.buf.get_mut(self.len)?.write(v);
        self.len += 1;
        Some(())
    }

    #[inline(always)]
    fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` slots were written by `push`, and `T:
        // Copy` has no drop to run for them.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<T>(), self.len) }
    }
}

/// What the hook made of a record: the value standing for its whole dict
/// ([`Hook::on_whole_record`]), or the one pair its dict keeps
/// ([`Hook::on_record`]).
enum RecordAnswer {
    Whole(Value),
    Pair((Value, Value)),
}

/// How a record's traceback — `MARK`, memo gets of frame handles, `APPENDS`
/// — is lowered to the handle [`Hook::on_handle_list`] answers for it,
/// without the ~40 memo lookups and the hashing of the handles each time.
/// A training step's tracebacks repeat the same gets entry after entry, so
/// answers are kept by the gets' bytes, or by the id of the run of bytes
/// when [`GetRunFinder`] found it ahead of the parser (then the parser
/// neither scans, hashes nor compares the bytes). Exact: equal bytes fetch
/// equal handles as long as no memo slot holding a handle has changed since
/// ([`Memo::handles_changed`]; answers from before are dropped then).
#[derive(Default)]
struct TracebackLists {
    by_bytes: FxHashMap<Box<[u8]>, Handle>,
    /// Bytes of the keys of `by_bytes`.
    key_bytes: usize,
    /// Runs found ahead, and answers by run id with their generation.
    hints: Option<Rc<GetRunHints>>,
    by_run: Vec<(Handle, u64)>,
    generation: u64,
    handles: Vec<Handle>,
}

impl TracebackLists {
    /// Past this many distinct lists, or bytes of them (a file whose
    /// tracebacks never repeat), the answers by bytes start over rather
    /// than grow with the file.
    const MAX_LISTS: usize = 1 << 16;
    const MAX_KEY_BYTES: usize = 16 << 20;

    /// Drops the answers if the memo's handles changed since they were made.
    fn sync(&mut self, memo: &Memo) {
        if self.generation != memo.handles_changed {
            self.forget_bytes();
            self.generation = memo.handles_changed;
        }
    }

    fn forget_bytes(&mut self) {
        self.by_bytes.clear();
        self.key_bytes = 0;
    }

    /// Lowers the memo gets at `buf[first..]` up to an `APPENDS` (`at` is
    /// the offset of `buf[0]` in the stream): the index of the `APPENDS`
    /// and the hook's handle, or `None` if they are no such run, a memo slot
    /// holds no handle, or the hook does not lower them.
    #[inline]
    fn lower(
        &mut self,
        buf: &[u8],
        first: usize,
        at: u64,
        memo: &Memo,
        hook: &mut dyn Hook,
    ) -> Option<(usize, Handle)> {
        if let Some(run) = self
            .hints
            .as_ref()
            .and_then(|h| h.run_at(at + first as u64))
        {
            let end = first + run.len as usize;
            if buf.get(end) == Some(&op::APPENDS) {
                let id = run.id as usize;
                if let Some(&(h, generation)) = self.by_run.get(id) {
                    if generation == self.generation {
                        return Some((end, h));
                    }
                }
                let h = self.resolve(&buf[first..end], memo, hook)?;
                if self.by_run.len() <= id {
                    self.by_run.resize(id + 1, (Handle::SKIPPED, u64::MAX));
                }
                self.by_run[id] = (h, self.generation);
                return Some((end, h));
            }
        }
        let end = gets_end(buf, first)?;
        let gets = &buf[first..end];
        if let Some(&h) = self.by_bytes.get(gets) {
            return Some((end, h));
        }
        let h = self.resolve(gets, memo, hook)?;
        if self.by_bytes.len() >= Self::MAX_LISTS || self.key_bytes >= Self::MAX_KEY_BYTES {
            self.forget_bytes();
        }
        self.key_bytes += gets.len();
        self.by_bytes.insert(gets.into(), h);
        Some((end, h))
    }

    /// Fetches the handles of `gets` (only `BINGET`/`LONG_BINGET`s, as
    /// [`gets_end`] found them) from the memo and offers them to the hook.
    fn resolve(&mut self, gets: &[u8], memo: &Memo, hook: &mut dyn Hook) -> Option<Handle> {
        self.handles.clear();
        let mut j = 0;
        while let Some(&code) = gets.get(j) {
            j += 1;
            match memo.get(get_index(gets, &mut j, code)?)? {
                Value::Handle(h) => self.handles.push(*h),
                _ => return None,
            }
        }
        match hook.on_handle_list(&self.handles) {
            Ok(Some(Value::Handle(h))) => Some(h),
            _ => None,
        }
    }
}

/// The memo index of the `BINGET` (else `LONG_BINGET`) whose argument
/// starts at `buf[*i]`; moves `*i` past it.
#[inline(always)]
fn get_index(buf: &[u8], i: &mut usize, code: u8) -> Option<u32> {
    if code == op::BINGET {
        let b = *buf.get(*i)?;
        *i += 1;
        Some(b as u32)
    } else {
        let b = buf.get(*i..*i + 4)?;
        *i += 4;
        Some(u32::from_le_bytes(b.try_into().ok()?))
    }
}

/// The index of the `APPENDS` ending the run of memo gets (at least one)
/// that starts at `buf[first]`, or `None` if the bytes there are not one.
#[inline]
fn gets_end(buf: &[u8], first: usize) -> Option<usize> {
    let mut i = first;
    loop {
        match *buf.get(i)? {
            op::BINGET => i += 2,
            op::LONG_BINGET => i += 5,
            op::APPENDS if i > first => return Some(i),
            _ => return None,
        }
    }
}

/// A run of memo gets between `EMPTY_LIST MEMOIZE MARK` and `APPENDS` —
/// how `pickle.dump` writes a traceback of shared frame dicts — found in
/// the stream ahead of the parser: its gets are the bytes `at..at + len`,
/// and runs with equal bytes have equal ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetRun {
    pub at: u64,
    pub len: u32,
    pub id: u32,
}

/// Finds [`GetRun`]s in a pickle's bytes, chunk by chunk, on a thread of
/// its own while the parser works (see `input::read_trace_ahead`): with
/// the run's id the parser takes the answer for a repeated traceback
/// without reading its bytes. Whether a run really is a traceback is for
/// the parser to see: a run found inside a string or a number is a hint
/// for an offset the parser never asks about.
pub struct GetRunFinder {
    ids: FxHashMap<Box<[u8]>, u32>,
    /// Bytes of the keys of `ids`.
    id_bytes: usize,
    opening: memchr::memmem::Finder<'static>,
    offset: u64,
}

impl Default for GetRunFinder {
    fn default() -> Self {
        GetRunFinder {
            ids: FxHashMap::default(),
            id_bytes: 0,
            opening: memchr::memmem::Finder::new(&[op::EMPTY_LIST, op::MEMOIZE, op::MARK])
                .into_owned(),
            offset: 0,
        }
    }
}

impl GetRunFinder {
    /// Distinct runs named, and bytes of them; past either, new runs get no
    /// hint (ids are never reused), so the finder's memory stays bounded
    /// whatever the file.
    const MAX_RUNS: usize = 1 << 16;
    const MAX_RUN_BYTES: usize = 16 << 20;

    /// The runs wholly inside `chunk`, the next bytes of the stream.
    pub fn find(&mut self, chunk: &[u8]) -> Vec<GetRun> {
        let mut runs = Vec::new();
        for opening in self.opening.find_iter(chunk) {
            let first = opening + 3;
            let Some(end) = gets_end(chunk, first) else {
                continue;
            };
            let gets = &chunk[first..end];
            let id = match self.ids.get(gets) {
                Some(&id) => id,
                None if self.ids.len() < Self::MAX_RUNS
                    && self.id_bytes + gets.len() <= Self::MAX_RUN_BYTES =>
                {
                    let id = self.ids.len() as u32;
                    self.ids.insert(gets.into(), id);
                    self.id_bytes += gets.len();
                    id
                }
                None => continue,
            };
            runs.push(GetRun {
                at: self.offset + first as u64,
                len: gets.len() as u32,
                id,
            });
        }
        self.offset += chunk.len() as u64;
        runs
    }
}

/// The parser's end of a [`GetRunFinder`]: runs in stream order, added as
/// their chunks arrive, dropped as the parser passes them.
#[derive(Default)]
pub struct GetRunHints {
    runs: RefCell<std::collections::VecDeque<GetRun>>,
    taken: std::cell::Cell<u64>,
}

impl GetRunHints {
    pub fn add(&self, runs: Vec<GetRun>) {
        self.runs.borrow_mut().extend(runs);
    }

    /// How many runs the parser has asked for and found.
    pub fn taken(&self) -> u64 {
        self.taken.get()
    }

    /// The run whose gets start at `at`, if one was found there.
    #[inline]
    fn run_at(&self, at: u64) -> Option<GetRun> {
        let mut runs = self.runs.borrow_mut();
        while let Some(run) = runs.front() {
            if run.at >= at {
                let found = run.at == at;
                self.taken.set(self.taken.get() + u64::from(found));
                return found.then_some(*run);
            }
            runs.pop_front();
        }
        None
    }
}

/// A memo put that a record's opcodes make, in order.
#[derive(Clone, Copy)]
enum Pending<'a> {
    Str(&'a str),
    Handle(Handle),
}

struct RecordScan {
    /// Bytes through the `SETITEMS`.
    consumed: usize,
    /// Whether a list of handles was lowered.
    lists: bool,
}

/// Decodes a record at the start of `buf` (just after its `MARK`) into
/// `items` and `pending` without side effects on the parser (lists of
/// handles are lowered by `hook`); `None` if `buf` does not start with a
/// whole record of the simple shape [`Hook::on_record`] describes.
#[allow(clippy::too_many_arguments)]
fn scan_record<'b: 'x, 'm: 'x, 'x>(
    buf: &'b [u8],
    at: u64,
    memo: &'m Memo,
    hook: &mut dyn Hook,
    tracebacks: &mut TracebackLists,
    nested_ok: bool,
    items: &mut Slots<Item<'x>, MAX_RECORD_ITEMS>,
    pending: &mut Slots<Pending<'b>, MAX_RECORD_ITEMS>,
) -> Option<RecordScan> {
    #[inline(always)]
    fn bytes<const N: usize>(buf: &[u8], i: &mut usize) -> Option<[u8; N]> {
        let b = buf.get(*i..*i + N)?;
        *i += N;
        b.try_into().ok()
    }
    let mut lists = false;
    let mut i = 0;
    loop {
        let code = *buf.get(i)?;
        i += 1;
        if code == op::SETITEMS {
            if items.len == 0 {
                return None;
            }
            break;
        }
        let key = items.len % 2 == 0;
        let item = match code {
            op::BINGET | op::LONG_BINGET => match memo.get(get_index(buf, &mut i, code)?)? {
                Value::Str(s) => Item::Str(s),
                _ if key => return None,
                Value::Int(v) => Item::Int(*v),
                Value::Handle(h) => Item::Handle(*h),
                Value::Float(f) => Item::Float(*f),
                Value::Bool(b) => Item::Bool(*b),
                Value::None => Item::None,
                _ => return None,
            },
            op::SHORT_BINUNICODE => {
                let len = *buf.get(i)? as usize;
                let s = std::str::from_utf8(buf.get(i + 1..i + 1 + len)?).ok()?;
                i += 1 + len;
                if buf.get(i) == Some(&op::MEMOIZE) {
                    i += 1;
                    pending.push(Pending::Str(s))?;
                }
                Item::Str(s)
            }
            _ if key => return None,
            op::BININT1 => Item::Int(bytes::<1>(buf, &mut i)?[0] as i64),
            op::BININT2 => Item::Int(u16::from_le_bytes(bytes(buf, &mut i)?) as i64),
            op::BININT => Item::Int(i32::from_le_bytes(bytes(buf, &mut i)?) as i64),
            op::LONG1 => {
                let len = *buf.get(i)? as usize;
                if len > 8 {
                    return None;
                }
                let v = small_long(buf, i + 1, len)?;
                i += 1 + len;
                Item::Int(v)
            }
            op::BINFLOAT => Item::Float(f64::from_be_bytes(bytes(buf, &mut i)?)),
            op::NONE => Item::None,
            op::NEWTRUE => Item::Bool(true),
            op::NEWFALSE => Item::Bool(false),
            op::EMPTY_LIST => {
                let memoized = buf.get(i) == Some(&op::MEMOIZE);
                if memoized {
                    i += 1;
                }
                if !nested_ok || buf.get(i) != Some(&op::MARK) {
                    return None;
                }
                let (end, h) = tracebacks.lower(buf, i + 1, at, memo, hook)?;
                i = end + 1;
                if memoized {
                    pending.push(Pending::Handle(h))?;
                }
                lists = true;
                Item::Handle(h)
            }
            _ => return None,
        };
        items.push(item)?;
    }
    Some(RecordScan { consumed: i, lists })
}

/// The `LONG1` payload `buf[at..at + len]` (`len` ≤ 8) as a two's-complement
/// little-endian integer. Reads 8 bytes at once where the buffer has them
/// (the extra bytes are shifted out): copying `len` bytes is a call to
/// `memcpy` and a store-forwarding stall, on every address and timestamp.
#[inline(always)]
fn small_long(buf: &[u8], at: usize, len: usize) -> Option<i64> {
    if len == 0 {
        return Some(0);
    }
    let sh = 64 - 8 * len as u32;
    let raw = match buf.get(at..at + 8) {
        Some(b) => i64::from_le_bytes(b.try_into().expect("8 bytes")),
        None => {
            let mut a = [0u8; 8];
            a[..len].copy_from_slice(buf.get(at..at + len)?);
            i64::from_le_bytes(a)
        }
    };
    Some((raw << sh) >> sh)
}

/// Makes the memo puts a scanned record's opcodes would have made, from slot
/// `first` on (the caller checked there is room). A record's lowered lists
/// were never built, so there is nothing to restore for them (but see
/// [`Parser::restore_lowered`] for the last list lowered before).
fn put_pending(
    memo: &mut Memo,
    first: u32,
    pending: &[Pending<'_>],
    max_memo: usize,
) -> Result<(), String> {
    for (j, p) in pending.iter().enumerate() {
        let v = match *p {
            Pending::Str(s) => Value::Str(Rc::new(Box::from(s))),
            Pending::Handle(h) => Value::Handle(h),
        };
        memo.put(first + j as u32, v, max_memo)?;
    }
    Ok(())
}

/// Records that the dict at stack position `pos` is held by memo slot `idx`.
#[inline]
fn tag_dict(tags: &mut Vec<(usize, u32)>, pos: usize, idx: u32) {
    while matches!(tags.last(), Some(&(p, _)) if p >= pos) {
        tags.pop();
    }
    tags.push((pos, idx));
}

/// Pushes a value onto the parser's stack, constructing it in place after the
/// capacity check (a plain `Vec::push` builds small enum values in a stack
/// temporary first, which costs a store-forwarding stall on every opcode).
macro_rules! push {
    ($p:expr, $v:expr) => {{
        let st = &mut $p.stack;
        if st.len() == st.capacity() {
            // Checked where the stack grows, not per push: the next opcode
            // fails (see `Parser::run`), wherever the input's windows end.
            $p.stack_full |= st.len() >= MAX_STACK;
            st.reserve(st.len().max(64));
        }
        let len = st.len();
        st.spare_capacity_mut()[0].write($v);
        // SAFETY: `len < capacity` (reserved above) and the slot at `len` was
        // initialised by the write just above.
        unsafe { st.set_len(len + 1) };
    }};
}

struct Parser<'a, R> {
    rd: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Absolute offset of `buf[0]`.
    base: u64,
    /// Absolute offset of the opcode being executed.
    op_off: u64,
    /// The opcode being executed.
    code: u8,
    limits: &'a Limits,
    hook: &'a mut dyn Hook,
    stack: Vec<Value>,
    /// `(stack position, memo index)` for dicts and lists stored in or
    /// fetched from the memo, increasing by position; lets the hook replace a
    /// container's memo slot in O(1). Entries may be stale: they are verified
    /// by pointer identity.
    memo_tags: Vec<(usize, u32)>,
    /// The last lowered list whose memo slot holds its lowered value instead
    /// of the list, and that slot (see [`Parser::lowered`]).
    last_lowered: Option<(Weak<RefCell<Vec<Value>>>, u32)>,
    /// Emptied dicts (unique, capacity kept) for `EMPTY_DICT` to reuse.
    dict_pool: Vec<DictRc>,
    marks: Vec<usize>,
    memo: Memo,
    work: Vec<Value>,
    tracebacks: TracebackLists,
    /// Whether the hook wants [`Hook::on_record`].
    records: bool,
    /// The stack grew past [`MAX_STACK`] values.
    stack_full: bool,
}

type PResult<T> = Result<T, PickleError>;

impl<'a, R: BufRead> Parser<'a, R> {
    fn new(
        rd: R,
        limits: &'a Limits,
        hook: &'a mut dyn Hook,
        hints: Option<Rc<GetRunHints>>,
    ) -> Self {
        let records = hook.wants_records();
        Parser {
            records,
            stack_full: false,
            rd,
            buf: vec![0; INITIAL_BUF],
            pos: 0,
            end: 0,
            base: 0,
            op_off: 0,
            code: 0,
            limits,
            hook,
            stack: Vec::with_capacity(64),
            memo_tags: Vec::with_capacity(64),
            last_lowered: None,
            dict_pool: Vec::new(),
            marks: Vec::with_capacity(16),
            memo: Memo::default(),
            work: Vec::new(),
            tracebacks: TracebackLists {
                hints,
                ..TracebackLists::default()
            },
        }
    }

    fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(PickleError {
            offset: self.op_off,
            message: message.into(),
        })
    }

    /// Makes at least `n` bytes available at `buf[pos..]`.
    #[inline(always)]
    fn ensure(&mut self, n: usize) -> PResult<()> {
        if self.end - self.pos >= n {
            Ok(())
        } else {
            self.fill(n)
        }
    }

    #[cold]
    #[inline(never)]
    fn stack_full_error<T>(&self) -> PResult<T> {
        self.err(format!(
            "more than {MAX_STACK} values on the pickle stack (e.g. millions of nested lists); not a memory snapshot"
        ))
    }

    #[cold]
    #[inline(never)]
    fn fill(&mut self, n: usize) -> PResult<()> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.base > 0 && self.buf.len() < TARGET_BUF {
            // The input is larger than the first window: read bigger chunks.
            self.buf.resize(TARGET_BUF, 0);
        }
        while self.end < n {
            if self.end == self.buf.len() {
                // Grow only when the buffer is full of real data: by doubling,
                // up to what this item needs (or the streaming target size).
                let want = n.max(TARGET_BUF);
                let new_len = (self.buf.len() * 2).min(want).max(self.end + 1);
                self.buf.resize(new_len, 0);
            }
            let consumed = self.base + self.end as u64;
            let allowed = self.limits.max_total_bytes.saturating_sub(consumed);
            if allowed == 0 {
                return self.err(format!(
                    "input exceeds the limit of {} bytes",
                    self.limits.max_total_bytes
                ));
            }
            let room =
                (self.buf.len() - self.end).min(usize::try_from(allowed).unwrap_or(usize::MAX));
            match self.rd.read(&mut self.buf[self.end..self.end + room]) {
                Ok(0) => {
                    return self.err(format!(
                        "truncated pickle: unexpected end of input at byte {}",
                        self.base + self.end as u64
                    ))
                }
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return self.err(format!("read error: {e}")),
            }
        }
        Ok(())
    }

    #[inline(always)]
    fn take<const N: usize>(&mut self) -> PResult<[u8; N]> {
        self.ensure(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(a)
    }

    #[inline(always)]
    fn take_u8(&mut self) -> PResult<u8> {
        self.ensure(1)?;
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(b)
    }

    /// Checks a declared payload length against the limits (before any allocation).
    fn check_len(&self, n: u64, what: &str) -> PResult<usize> {
        if n > self.limits.max_string_bytes {
            return self.err(format!(
                "{what} of {n} bytes exceeds the limit of {} bytes",
                self.limits.max_string_bytes
            ));
        }
        if n > self.limits.max_total_bytes {
            return self.err(format!(
                "{what} of {n} bytes exceeds the input limit of {} bytes",
                self.limits.max_total_bytes
            ));
        }
        match usize::try_from(n) {
            Ok(n) if n < usize::MAX / 2 => Ok(n),
            _ => self.err(format!("{what} of {n} bytes is too long")),
        }
    }

    #[inline(always)]
    fn string(&mut self, n: usize) -> PResult<Value> {
        self.ensure(n)?;
        let bytes = &self.buf[self.pos..self.pos + n];
        let s: Rc<Box<str>> = match std::str::from_utf8(bytes) {
            Ok(s) => Rc::new(Box::from(s)),
            Err(_) => Rc::new(Box::from(&*String::from_utf8_lossy(bytes))),
        };
        self.pos += n;
        Ok(Value::Str(s))
    }

    fn long(&mut self, n: usize) -> PResult<Value> {
        if n > 16 {
            return self.err(format!("integer wider than 128 bits ({n} bytes)"));
        }
        self.ensure(n)?;
        let bytes = &self.buf[self.pos..self.pos + n];
        let v = if n == 0 {
            Value::Int(0)
        } else if n <= 8 {
            let mut a = [0u8; 8];
            a[..n].copy_from_slice(bytes);
            let sh = 64 - 8 * n as u32;
            Value::Int((i64::from_le_bytes(a) << sh) >> sh)
        } else {
            let mut a = [0u8; 16];
            a[..n].copy_from_slice(bytes);
            let sh = 128 - 8 * n as u32;
            let v = (i128::from_le_bytes(a) << sh) >> sh;
            match i64::try_from(v) {
                Ok(i) => Value::Int(i),
                Err(_) => Value::BigInt(Box::new(v)),
            }
        };
        self.pos += n;
        Ok(v)
    }

    #[inline(always)]
    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    #[inline(always)]
    fn push(&mut self, v: Value) {
        push!(self, v);
    }

    #[inline(always)]
    fn pop(&mut self) -> PResult<Value> {
        if self.stack.len() > self.floor() {
            Ok(self.stack.pop().expect("non-empty"))
        } else {
            self.underflow()
        }
    }

    #[cold]
    fn underflow<T>(&self) -> PResult<T> {
        self.err(format!(
            "stack underflow: {} needs more values than the stack holds (above the last MARK)",
            op_name(self.code)
        ))
    }

    fn top_index(&self) -> PResult<usize> {
        if self.stack.len() > self.floor() {
            Ok(self.stack.len() - 1)
        } else {
            self.underflow()
        }
    }

    fn pop_mark(&mut self) -> PResult<usize> {
        match self.marks.pop() {
            Some(k) => Ok(k),
            None => self.err(format!("MARK missing: {} needs a MARK", op_name(self.code))),
        }
    }

    fn memo_put(&mut self, idx: u32) -> PResult<()> {
        let top = self.top_index()?;
        let v = self.stack[top].clone();
        if let Value::Dict(_) | Value::List(_) = v {
            self.tag_dict(top, idx);
        }
        match self.memo.put(idx, v, self.limits.max_memo) {
            Ok(Some(old)) => {
                dismantle(old, &mut self.work);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(m) => self.err(m),
        }
    }

    #[inline(always)]
    fn memo_get(&mut self, idx: u32, name: &str) -> PResult<()> {
        let pos = self.stack.len();
        let Some(v) = self.memo.get(idx) else {
            return self.err(format!("{name}: memo index {idx} not found"));
        };
        // One arm per common variant, each pushing a value built in place: a
        // generic `clone()` goes through a stack temporary whose partial
        // reloads stall store forwarding (was ~40% of `run` in `perf annotate`).
        match v {
            Value::Handle(h) => {
                let h = *h;
                push!(self, Value::Handle(h));
            }
            Value::Str(s) => {
                let s = Rc::clone(s);
                push!(self, Value::Str(s));
            }
            Value::Int(i) => {
                let i = *i;
                push!(self, Value::Int(i));
            }
            Value::Dict(d) => {
                let d = Rc::clone(d);
                tag_dict(&mut self.memo_tags, pos, idx);
                push!(self, Value::Dict(d));
            }
            Value::List(l) => {
                let l = Rc::clone(l);
                tag_dict(&mut self.memo_tags, pos, idx);
                push!(self, Value::List(l));
            }
            other => {
                let other = other.clone();
                push!(self, other);
            }
        }
        Ok(())
    }

    fn tag_dict(&mut self, pos: usize, idx: u32) {
        tag_dict(&mut self.memo_tags, pos, idx);
    }

    /// Runs the hook over `stack[from..]` (items about to be appended to a list).
    fn hook_items(&mut self, from: usize) -> PResult<()> {
        let first_tag = self.memo_tags.partition_point(|&(p, _)| p < from);
        let mut t = first_tag;
        for i in from..self.stack.len() {
            let d = match &self.stack[i] {
                Value::Dict(d) => d.clone(),
                _ => continue,
            };
            let r = self.hook.on_list_dict(&d.borrow());
            match r {
                Ok(None) => {}
                Ok(Some(new)) => {
                    while t < self.memo_tags.len() && self.memo_tags[t].0 < i {
                        t += 1;
                    }
                    if let Some(&(p, idx)) = self.memo_tags.get(t) {
                        if p == i {
                            // The old memo value is the dict `d` still holds:
                            // dropping it only decrements the count.
                            drop(self.memo.replace_dict(idx, &d, new.clone()));
                        }
                    }
                    drop(std::mem::replace(&mut self.stack[i], new));
                    self.recycle_dict(d);
                }
                Err(m) => return self.err(m),
            }
        }
        // These stack slots are about to be consumed.
        self.memo_tags.truncate(first_tag);
        Ok(())
    }

    /// Called at a `MARK`: if the buffered input continues with memo gets of
    /// handles only, then `APPENDS`, and the stack's top is an empty list,
    /// lowers them as a record's traceback is ([`TracebackLists::lower`]).
    /// When the hook lowers them to a handle, stores it in the list,
    /// consumes the input through the `APPENDS` and returns `true`;
    /// otherwise nothing has changed and the opcodes run normally (which
    /// offer the items to [`Hook::on_list_items`]). (A traceback of ~40
    /// memoized frames costs one scan instead of ~40 pushes, a scan by each
    /// hook and a drain.)
    #[inline]
    fn handle_run(&mut self) -> PResult<bool> {
        let list = match self.stack.last() {
            Some(Value::List(l)) if self.stack.len() > self.floor() => l,
            _ => return Ok(false),
        };
        if !list.borrow().is_empty() {
            return Ok(false);
        }
        let list = Rc::clone(list);
        self.tracebacks.sync(&self.memo);
        let Some((end, h)) = self.tracebacks.lower(
            &self.buf[self.pos..self.end],
            0,
            self.base + self.pos as u64,
            &self.memo,
            &mut *self.hook,
        ) else {
            return Ok(false);
        };
        self.lowered(&list, self.stack.len() - 1, Value::Handle(h));
        self.pos += end + 1;
        Ok(true)
    }

    /// Called at a `MARK`: if the stack's top is an empty dict, the hook
    /// wants records and the buffered input holds a whole record (see
    /// [`Hook::on_record`]) up to its `SETITEMS`, offers the record to the
    /// hook. When the hook lowers it, stores its pair in the dict, makes the
    /// memo puts the record's opcodes would have made (strings, and lowered
    /// lists as their handles), consumes the input through the `SETITEMS`
    /// and returns `true`; otherwise nothing has changed (calls of
    /// [`Hook::on_handle_list`] may have been made and are made again) and
    /// the opcodes run normally.
    #[inline]
    fn record_run(&mut self) -> PResult<bool> {
        if !self.records {
            return Ok(false);
        }
        match self.stack.last() {
            Some(Value::Dict(d)) if self.stack.len() > self.floor() && d.borrow().is_empty() => {
                self.lower_record(None)
            }
            _ => Ok(false),
        }
    }

    /// Called at an `EMPTY_DICT`: as [`Parser::record_run`] when the input
    /// continues with an optional `MEMOIZE`, a `MARK` and a whole record, but
    /// offers it to [`Hook::on_whole_record`]: when the hook lowers it, its
    /// value is pushed (and memoized where the dict would have been, before
    /// the record's own memo puts) and the dict is never built.
    #[inline]
    fn whole_record_run(&mut self) -> PResult<bool> {
        if !self.records || self.marks.len() >= self.limits.max_depth {
            return Ok(false);
        }
        let buf = &self.buf[self.pos..self.end];
        let memoized = buf.first() == Some(&op::MEMOIZE);
        if buf.get(usize::from(memoized)) != Some(&op::MARK) {
            return Ok(false);
        }
        self.lower_record(Some(memoized))
    }

    /// The common part of [`Parser::record_run`] (`whole` is `None`: the
    /// input is at the record) and [`Parser::whole_record_run`] (`whole` says
    /// whether the dict is memoized: the input is at the `MEMOIZE` or `MARK`).
    #[inline(always)]
    fn lower_record(&mut self, whole: Option<bool>) -> PResult<bool> {
        // MEMOIZEs inside the record then fill new slots in order.
        if !self.memo.sparse.is_empty() || self.memo.dense.len() != self.memo.count {
            return Ok(false);
        }
        let own_slot = usize::from(whole == Some(true));
        let start = match whole {
            Some(memoized) => usize::from(memoized) + 1,
            None => 0,
        };
        let nested_ok = self.marks.len() + 1 < self.limits.max_depth;
        self.tracebacks.sync(&self.memo);
        let mut items = Slots::new();
        let mut pending = Slots::new();
        let Some(scan) = scan_record(
            &self.buf[self.pos + start..self.end],
            self.base + (self.pos + start) as u64,
            &self.memo,
            &mut *self.hook,
            &mut self.tracebacks,
            nested_ok,
            &mut items,
            &mut pending,
        ) else {
            return Ok(false);
        };
        let count = self.memo.count;
        let puts = own_slot + pending.len;
        if count + puts > self.limits.max_memo || count + puts > NO_MEMO as usize {
            return Ok(false);
        }
        let items = items.as_slice();
        let lowered = match whole {
            Some(_) => self
                .hook
                .on_whole_record(items)
                .ok()
                .flatten()
                .map(RecordAnswer::Whole),
            None => self
                .hook
                .on_record(items)
                .ok()
                .flatten()
                .map(RecordAnswer::Pair),
        };
        let Some(lowered) = lowered else {
            return Ok(false);
        };
        // The dict's own slot comes before those of the record's opcodes.
        let max = self.limits.max_memo;
        let put = match &lowered {
            RecordAnswer::Whole(v) if own_slot == 1 => {
                self.memo.put(count as u32, v.clone(), max).map(drop)
            }
            _ => Ok(()),
        };
        let first = (count + own_slot) as u32;
        let pending = pending.as_slice();
        if let Err(m) = put.and_then(|()| put_pending(&mut self.memo, first, pending, max)) {
            // Unreachable: the room was checked above.
            return self.err(m);
        }
        if scan.lists {
            // As `lowered` would have done for each list (the lists
            // themselves were never built, so nothing is left to restore).
            self.restore_lowered();
        }
        match lowered {
            RecordAnswer::Whole(v) => push!(self, v),
            RecordAnswer::Pair(pair) => {
                if let Some(Value::Dict(d)) = self.stack.last() {
                    d.borrow_mut().push(pair);
                }
            }
        }
        self.pos += start + scan.consumed;
        // As if the record's last opcode had run (an error at the next
        // opcode's refill reports this offset, as the opcode path would).
        self.op_off = self.base + self.pos as u64 - 1;
        self.code = op::SETITEMS;
        Ok(true)
    }

    /// Offers `stack[from..]`, about to be appended to the empty list `l`, to
    /// [`Hook::on_list_items`]; if the hook lowers them, stores its value in
    /// `l`, discards the items and returns `true`.
    #[inline]
    fn lower_list(&mut self, list: &ListRc, from: usize) -> PResult<bool> {
        match self.hook.on_list_items(&self.stack[from..]) {
            Ok(None) => Ok(false),
            Ok(Some(v)) => {
                dismantle_all(self.stack.drain(from..), &mut self.work);
                self.lowered(list, from - 1, v);
                Ok(true)
            }
            Err(m) => self.err(m),
        }
    }

    /// Stores the hook's value `v` for the (empty) list `list` at stack
    /// position `pos`, and `v` in place of the list in the memo slot the list
    /// was stored to or fetched from, so that the list is freed as soon as
    /// the stack lets go of it rather than held by the memo to the end.
    ///
    /// Should the list receive more items later (a list of more than 1000
    /// items arrives in several batches), the list must be back in its memo
    /// slot before: [`Parser::unlower`] does that for the last lowered list
    /// (batches of one list are consecutive), and lowering another list
    /// first puts back the previous one if it is still alive.
    fn lowered(&mut self, list: &ListRc, pos: usize, v: Value) {
        self.restore_lowered();
        let tag = match self.memo_tags.last() {
            Some(&(p, idx)) if p == pos => Some(idx),
            _ => None,
        };
        if let Some(idx) = tag {
            if let Some(old) = self.memo.replace_list(idx, list, v.clone()) {
                // `old` is `list`, still held by the stack: only a decrement.
                drop(old);
                self.last_lowered = Some((Rc::downgrade(list), idx));
            }
        }
        let mut l = list.borrow_mut();
        l.reserve_exact(1);
        l.push(v);
    }

    /// Puts the last lowered list back in its memo slot if it is still alive
    /// and the slot still holds its lowered value.
    fn restore_lowered(&mut self) {
        let Some((weak, idx)) = self.last_lowered.take() else {
            return;
        };
        let Some(list) = weak.upgrade() else {
            return;
        };
        let first = list.borrow().first().cloned();
        if let Some(first) = first {
            self.memo.replace_if(idx, &first, Value::List(list));
        }
    }

    /// Called before items are appended to the non-empty `list`.
    #[inline]
    fn unlower(&mut self, list: &ListRc) {
        if matches!(&self.last_lowered, Some((w, _)) if std::ptr::eq(w.as_ptr(), Rc::as_ptr(list)))
        {
            self.restore_lowered();
        }
    }

    /// Frees a dict the hook replaced, keeping its allocations for reuse by
    /// `EMPTY_DICT` when nothing else refers to it (trace entries arrive in
    /// batches of ~1000 and all have the same shape).
    fn recycle_dict(&mut self, mut d: DictRc) {
        let Some(cell) = Rc::get_mut(&mut d) else {
            // Shared: dropping our reference is enough, unless the only other
            // references are the dict's own (it is its own key or value), a
            // cycle that would leak. Rare, so the scan is off the hot path.
            let own = d
                .borrow()
                .iter()
                .flat_map(|(k, x)| [k, x])
                .filter(|v| matches!(v, Value::Dict(x) if Rc::ptr_eq(x, &d)))
                .count();
            if own > 0 && Rc::strong_count(&d) == own + 1 {
                let pairs = std::mem::take(&mut *d.borrow_mut());
                dismantle_all(pairs.into_iter().flat_map(|(k, x)| [k, x]), &mut self.work);
            }
            return;
        };
        let pairs = cell.get_mut();
        for (k, x) in pairs.drain(..) {
            if k.is_container() {
                self.work.push(k);
            }
            if x.is_container() {
                self.work.push(x);
            }
        }
        drain_work(&mut self.work);
        if self.dict_pool.len() < DICT_POOL_MAX && pairs.capacity() <= 64 {
            self.dict_pool.push(d);
        }
    }

    fn list_at(&self, i: usize, name: &str) -> PResult<Rc<RefCell<Vec<Value>>>> {
        match &self.stack[i] {
            Value::List(l) => Ok(l.clone()),
            other => self.err(format!(
                "{name} on a {}, expected a list",
                other.type_name()
            )),
        }
    }

    /// SETITEM(S) into the handle at stack position `i` (the items from
    /// `from` on): offers them to [`Hook::on_handle_items`] and, if it takes
    /// them, drops them. `false` if `i` holds no handle or the hook refuses.
    fn handle_items(&mut self, i: usize, from: usize) -> PResult<bool> {
        let Value::Handle(h) = self.stack[i] else {
            return Ok(false);
        };
        match self.hook.on_handle_items(h, &self.stack[from..]) {
            Ok(true) => {
                dismantle_all(self.stack.drain(from..), &mut self.work);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(m) => self.err(m),
        }
    }

    fn dict_at(&self, i: usize, name: &str) -> PResult<DictRc> {
        match &self.stack[i] {
            Value::Dict(d) => Ok(d.clone()),
            other => self.err(format!(
                "{name} on a {}, expected a dict",
                other.type_name()
            )),
        }
    }

    fn run(&mut self) -> PResult<Value> {
        loop {
            if self.stack_full {
                // At the opcode that pushed past the limit.
                return self.stack_full_error();
            }
            self.ensure(1)?;
            self.op_off = self.base + self.pos as u64;
            let code = self.buf[self.pos];
            self.code = code;
            self.pos += 1;
            match code {
                op::BININT1 => {
                    let b = self.take_u8()?;
                    push!(self, Value::Int(b as i64));
                }
                op::BININT2 => {
                    let b = self.take::<2>()?;
                    push!(self, Value::Int(u16::from_le_bytes(b) as i64));
                }
                op::BININT => {
                    let b = self.take::<4>()?;
                    push!(self, Value::Int(i32::from_le_bytes(b) as i64));
                }
                op::BINGET => {
                    let i = self.take_u8()?;
                    self.memo_get(i as u32, "BINGET")?;
                }
                op::LONG_BINGET => {
                    let b = self.take::<4>()?;
                    self.memo_get(u32::from_le_bytes(b), "LONG_BINGET")?;
                }
                op::MEMOIZE => {
                    let idx = match u32::try_from(self.memo.count) {
                        Ok(i) if i != NO_MEMO => i,
                        _ => return self.err("memo is full"),
                    };
                    self.memo_put(idx)?;
                }
                op::BINPUT => {
                    let i = self.take_u8()?;
                    self.memo_put(i as u32)?;
                }
                op::LONG_BINPUT => {
                    let b = self.take::<4>()?;
                    let i = u32::from_le_bytes(b);
                    if i == NO_MEMO {
                        return self.err(format!(
                            "memo index {i} exceeds the limit of {}",
                            self.limits.max_memo
                        ));
                    }
                    self.memo_put(i)?;
                }
                op::SHORT_BINUNICODE => {
                    let n = self.take_u8()? as usize;
                    let v = self.string(n)?;
                    self.push(v);
                }
                op::BINUNICODE => {
                    let b = self.take::<4>()?;
                    let n = self.check_len(u32::from_le_bytes(b) as u64, "string")?;
                    let v = self.string(n)?;
                    self.push(v);
                }
                op::BINUNICODE8 => {
                    let b = self.take::<8>()?;
                    let n = self.check_len(u64::from_le_bytes(b), "string")?;
                    let v = self.string(n)?;
                    self.push(v);
                }
                op::LONG1 => {
                    let n = self.take_u8()? as usize;
                    if (1..=8).contains(&n) {
                        // Fast path: addresses and timestamps.
                        self.ensure(n)?;
                        let v = small_long(&self.buf[..self.end], self.pos, n).expect("ensured");
                        self.pos += n;
                        push!(self, Value::Int(v));
                    } else {
                        let v = self.long(n)?;
                        self.push(v);
                    }
                }
                op::LONG4 => {
                    let b = self.take::<4>()?;
                    let n = i32::from_le_bytes(b);
                    if n < 0 {
                        return self.err(format!("LONG4 with negative length {n}"));
                    }
                    let v = self.long(n as usize)?;
                    self.push(v);
                }
                op::BINFLOAT => {
                    let b = self.take::<8>()?;
                    push!(self, Value::Float(f64::from_be_bytes(b)));
                }
                op::NONE => push!(self, Value::None),
                op::NEWTRUE => push!(self, Value::Bool(true)),
                op::NEWFALSE => push!(self, Value::Bool(false)),
                op::EMPTY_DICT => {
                    if self.whole_record_run()? {
                        continue;
                    }
                    let d = match self.dict_pool.pop() {
                        Some(d) => d,
                        None => Rc::new(RefCell::new(Vec::new())),
                    };
                    push!(self, Value::Dict(d));
                }
                op::EMPTY_LIST => self.push(Value::List(Rc::new(RefCell::new(Vec::new())))),
                op::EMPTY_TUPLE => self.push(Value::Tuple(Rc::new(Box::default()))),
                op::MARK => {
                    if self.marks.len() >= self.limits.max_depth {
                        return self.err(format!(
                            "nesting deeper than max_depth ({})",
                            self.limits.max_depth
                        ));
                    }
                    if self.handle_run()? || self.record_run()? {
                        continue;
                    }
                    self.marks.push(self.stack.len());
                }
                op::APPENDS => {
                    let k = self.pop_mark()?;
                    if k <= self.floor() {
                        return self.underflow();
                    }
                    let list = self.list_at(k - 1, "APPENDS")?;
                    self.hook_items(k)?;
                    if list.borrow().is_empty() {
                        if self.stack.len() > k && self.lower_list(&list, k)? {
                            continue;
                        }
                    } else {
                        self.unlower(&list);
                    }
                    let mut l = list.borrow_mut();
                    l.reserve(self.stack.len() - k);
                    l.extend(self.stack.drain(k..));
                }
                op::APPEND => {
                    let top = self.top_index()?;
                    if top <= self.floor() {
                        return self.underflow();
                    }
                    let list = self.list_at(top - 1, "APPEND")?;
                    self.hook_items(top)?;
                    if list.borrow().is_empty() {
                        if self.lower_list(&list, top)? {
                            continue;
                        }
                    } else {
                        self.unlower(&list);
                    }
                    let v = self.stack.pop().expect("non-empty");
                    list.borrow_mut().push(v);
                }
                op::SETITEMS => {
                    let k = self.pop_mark()?;
                    if k <= self.floor() {
                        return self.underflow();
                    }
                    // A non-dict is reported before the item count; a handle
                    // (a dict the hook lowered) may still take the items.
                    let dict = match self.stack[k - 1] {
                        Value::Handle(_) => None,
                        _ => Some(self.dict_at(k - 1, "SETITEMS")?),
                    };
                    let n = self.stack.len() - k;
                    if n % 2 != 0 {
                        return self
                            .err(format!("SETITEMS with an odd number of stack items ({n})"));
                    }
                    let dict = match dict {
                        Some(dict) => dict,
                        None if self.handle_items(k - 1, k)? => continue,
                        None => self.dict_at(k - 1, "SETITEMS")?,
                    };
                    // Not borrowed while the hook runs: the items may hold
                    // the dict itself (through the memo), and the hook reads
                    // them.
                    if dict.borrow().is_empty() {
                        match self.hook.on_dict_items(&self.stack[k..]) {
                            Ok(None) => {}
                            Ok(Some(pair)) => {
                                dict.borrow_mut().push(pair);
                                dismantle_all(self.stack.drain(k..), &mut self.work);
                                continue;
                            }
                            Err(m) => return self.err(m),
                        }
                    }
                    dict.borrow_mut().extend(pairs(&mut self.stack[k..]));
                    self.stack.truncate(k);
                }
                op::SETITEM => {
                    let top = self.top_index()?;
                    if top < self.floor() + 2 {
                        return self.underflow();
                    }
                    if self.handle_items(top - 2, top - 1)? {
                        continue;
                    }
                    let dict = self.dict_at(top - 2, "SETITEM")?;
                    let val = self.stack.pop().expect("non-empty");
                    let key = self.stack.pop().expect("non-empty");
                    dict.borrow_mut().push((key, val));
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = (code - op::TUPLE1 + 1) as usize;
                    if self.stack.len() < self.floor() + n {
                        return self.underflow();
                    }
                    let k = self.stack.len() - n;
                    let t: Rc<Box<[Value]>> = Rc::new(self.stack.drain(k..).collect());
                    self.push(Value::Tuple(t));
                }
                op::TUPLE => {
                    let k = self.pop_mark()?;
                    let t: Rc<Box<[Value]>> = Rc::new(self.stack.drain(k..).collect());
                    self.push(Value::Tuple(t));
                }
                op::LIST => {
                    let k = self.pop_mark()?;
                    let l: Vec<Value> = self.stack.drain(k..).collect();
                    self.push(Value::List(Rc::new(RefCell::new(l))));
                }
                op::DICT => {
                    let k = self.pop_mark()?;
                    let n = self.stack.len() - k;
                    if n % 2 != 0 {
                        return self.err(format!("DICT with an odd number of stack items ({n})"));
                    }
                    let d: Vec<(Value, Value)> = pairs(&mut self.stack[k..]).collect();
                    self.stack.truncate(k);
                    self.push(Value::Dict(Rc::new(RefCell::new(d))));
                }
                op::FRAME => {
                    // Frames are an I/O hint; the data is parsed as a stream.
                    self.take::<8>()?;
                }
                op::PROTO => {
                    let v = self.take_u8()?;
                    if !(2..=5).contains(&v) {
                        return self.err(format!(
                            "unsupported pickle protocol {v} (memcut reads protocols 2 to 5)"
                        ));
                    }
                }
                op::STOP => {
                    return self.pop();
                }
                op::POP => {
                    if self.stack.len() > self.floor() {
                        let s = self.stack.pop().expect("non-empty");
                        dismantle(s, &mut self.work);
                    } else {
                        let k = self.pop_mark()?;
                        self.discard_from(k);
                    }
                }
                op::POP_MARK => {
                    let k = self.pop_mark()?;
                    self.discard_from(k);
                }
                op::DUP => {
                    let top = self.top_index()?;
                    let v = self.stack[top].clone();
                    if let Some(&(pos, idx)) = self.memo_tags.last() {
                        if pos == top {
                            self.tag_dict(top + 1, idx);
                        }
                    }
                    push!(self, v);
                }
                other => {
                    let hex = other;
                    return match (refused_name(other), unsupported_name(other)) {
                        (Some(name), _) => self.err(format!(
                            "opcode {name} (0x{hex:02x}) refused: memcut never imports or calls code from a pickle"
                        )),
                        (None, Some(name)) => self.err(format!(
                            "opcode {name} (0x{hex:02x}) not supported: PyTorch memory snapshots do not use it"
                        )),
                        (None, None) => self.err(format!("unknown opcode 0x{hex:02x}")),
                    };
                }
            }
        }
    }

    fn discard_from(&mut self, k: usize) {
        dismantle_all(self.stack.drain(k..), &mut self.work);
    }
}

// ---------------------------------------------------------------------------
// Iterative teardown and depth check

/// Drops `v` without recursion: uniquely owned containers are emptied into
/// `work` first, so each drop is shallow.
fn dismantle(v: Value, work: &mut Vec<Value>) {
    if !v.is_container() {
        return;
    }
    work.push(v);
    drain_work(work);
}

fn dismantle_all(vals: impl Iterator<Item = Value>, work: &mut Vec<Value>) {
    for v in vals {
        if v.is_container() {
            work.push(v);
        }
    }
    drain_work(work);
}

fn drain_work(work: &mut Vec<Value>) {
    while let Some(mut v) = work.pop() {
        match &mut v {
            Value::List(l) => {
                if let Some(cell) = Rc::get_mut(l) {
                    work.extend(cell.get_mut().drain(..).filter(Value::is_container));
                }
            }
            Value::Dict(d) => {
                if let Some(cell) = Rc::get_mut(d) {
                    for (k, x) in cell.get_mut().drain(..) {
                        if k.is_container() {
                            work.push(k);
                        }
                        if x.is_container() {
                            work.push(x);
                        }
                    }
                }
            }
            Value::Tuple(t) => {
                if let Some(items) = Rc::get_mut(t) {
                    for x in items.iter_mut() {
                        if x.is_container() {
                            work.push(std::mem::replace(x, Value::None));
                        }
                    }
                }
            }
            _ => {}
        }
        // `v` is now shallow (or shared, in which case dropping only decrements).
    }
}

enum Seen {
    InProgress,
    Height(usize),
}

struct Frame {
    v: Value,
    next: usize,
    max_child: usize,
    shared: bool,
}

/// Verifies that `root` nests at most `max_depth` containers deep and has no
/// cycles, iteratively. Shared containers are visited once (their heights are
/// memoized), so a DAG of shared frames costs O(size).
fn check_depth(root: &Value, max_depth: usize) -> Result<HashMap<usize, Seen>, String> {
    if !root.is_container() {
        return Ok(HashMap::new());
    }
    let too_deep = || format!("containers nested deeper than max_depth ({max_depth})");
    if max_depth == 0 {
        return Err(too_deep());
    }
    let mut seen: HashMap<usize, Seen> = HashMap::new();
    let root_shared = root.share_count() > 1;
    if root_shared {
        seen.insert(root.identity().expect("container"), Seen::InProgress);
    }
    let mut frames: Vec<Frame> = vec![Frame {
        v: root.clone(),
        next: 0,
        max_child: 0,
        shared: root_shared,
    }];
    while let Some(top) = frames.last_mut() {
        match next_container(&top.v, top.next) {
            Some((next, c)) => {
                top.next = next;
                // The clone in `c` adds one reference.
                let shared = c.share_count() > 2;
                if shared {
                    let id = c.identity().expect("container");
                    match seen.get(&id) {
                        Some(Seen::InProgress) => {
                            return Err("self-referential container (cycle) in pickle".into())
                        }
                        Some(Seen::Height(h)) => {
                            let h = *h;
                            if frames.len() + h > max_depth {
                                return Err(too_deep());
                            }
                            let top = frames.last_mut().expect("non-empty");
                            top.max_child = top.max_child.max(h);
                            continue;
                        }
                        None => {
                            seen.insert(id, Seen::InProgress);
                        }
                    }
                }
                if frames.len() >= max_depth {
                    return Err(too_deep());
                }
                frames.push(Frame {
                    v: c,
                    next: 0,
                    max_child: 0,
                    shared,
                });
            }
            None => {
                let f = frames.pop().expect("non-empty");
                let h = f.max_child + 1;
                if f.shared {
                    seen.insert(f.v.identity().expect("container"), Seen::Height(h));
                }
                if let Some(parent) = frames.last_mut() {
                    parent.max_child = parent.max_child.max(h);
                }
            }
        }
    }
    Ok(seen)
}

/// The first container child of `v` at or after position `from` (dict
/// positions: key0, value0, key1, …) and the position after it; `None` when
/// there is none. Scalars are skipped in one pass under a single borrow.
fn next_container(v: &Value, from: usize) -> Option<(usize, Value)> {
    fn scan<'a>(items: impl Iterator<Item = &'a Value>, from: usize) -> Option<(usize, Value)> {
        items
            .enumerate()
            .find(|(_, c)| c.is_container())
            .map(|(i, c)| (from + i + 1, c.clone()))
    }
    match v {
        Value::List(l) => scan(l.borrow().get(from..)?.iter(), from),
        Value::Tuple(t) => scan(t.get(from..)?.iter(), from),
        Value::Dict(d) => {
            let d = d.borrow();
            let pairs = d.get(from / 2..)?;
            let flat = pairs.iter().flat_map(|(k, x)| [k, x]).skip(from % 2);
            scan(flat, from)
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Read};
    use std::rc::Weak;

    #[test]
    fn get_run_finder_names_equal_runs_alike_within_chunks() {
        let open = [op::EMPTY_LIST, op::MEMOIZE, op::MARK];
        let run_a = [op::BINGET, 1, op::LONG_BINGET, 2, 0, 0, 0];
        let run_b = [op::BINGET, 3];
        let mut one = Vec::new();
        for part in [&open[..], &run_a, &[op::APPENDS]] {
            one.extend_from_slice(part);
        }
        // Not runs: a value that is no memo get, and no gets at all.
        one.extend_from_slice(&open);
        one.extend_from_slice(&[op::NONE, op::APPENDS]);
        one.extend_from_slice(&open);
        one.push(op::APPENDS);
        for part in [&open[..], &run_b, &[op::APPENDS]] {
            one.extend_from_slice(part);
        }
        let b_at = one.len() as u64 - 3;
        // A run cut by the end of the chunk is found in neither chunk.
        one.extend_from_slice(&open);
        one.extend_from_slice(&run_a[..3]);
        let mut two = run_a[3..].to_vec();
        two.push(op::APPENDS);
        let a_again = one.len() + two.len() + 3;
        for part in [&open[..], &run_a, &[op::APPENDS]] {
            two.extend_from_slice(part);
        }
        let mut finder = GetRunFinder::default();
        let run = |at: u64, len: usize, id: u32| GetRun {
            at,
            len: len as u32,
            id,
        };
        assert_eq!(finder.find(&one), [run(3, 7, 0), run(b_at, 2, 1)]);
        assert_eq!(finder.find(&two), [run(a_again as u64, 7, 0)]);
    }

    #[test]
    fn get_run_finder_memory_is_bounded() {
        // Distinct runs of 1000 LONG_BINGETs (5000 bytes), 17 MiB of them.
        let run = |k: u32| {
            let mut bytes = vec![op::EMPTY_LIST, op::MEMOIZE, op::MARK];
            for j in 0..1000u32 {
                bytes.push(op::LONG_BINGET);
                bytes.extend_from_slice(&(k * 1000 + j).to_le_bytes());
            }
            bytes.push(op::APPENDS);
            bytes
        };
        let count = (17 << 20) / 5000;
        let chunk: Vec<u8> = (0..count).flat_map(run).collect();
        let mut finder = GetRunFinder::default();
        let runs = finder.find(&chunk);
        assert!(
            runs.len() < count as usize,
            "{} of {count} named",
            runs.len()
        );
        assert!(runs.iter().map(|r| r.len as usize).sum::<usize>() <= GetRunFinder::MAX_RUN_BYTES);
        assert!(finder.id_bytes <= GetRunFinder::MAX_RUN_BYTES);
        // Runs named before keep their ids.
        let again = finder.find(&run(0));
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].id, 0);
    }

    // `pickle.dumps(OBJ, protocol=N)` from CPython 3.11, where
    // s = [1, 'x']; OBJ = {'a': [1, 2.5, None, True, False, 'héllo ☃', (1, 2), (), (7,),
    //   (1, 2, 3), (1, 2, 3, 4), 2**64-1, -2**70, 300, 70000, -5, -2**31, 2**31, 2**63-1,
    //   -2**63], 'b': {'x': 'y'*256}, 's1': s, 's2': s, 'e': {}, 'one': [{'action': 'alloc'}]}
    const CPY_P2: &[u8] = &[
        0x80, 0x02, 0x7d, 0x71, 0x00, 0x28, 0x58, 0x01, 0x00, 0x00, 0x00, 0x61, 0x71, 0x01, 0x5d,
        0x71, 0x02, 0x28, 0x4b, 0x01, 0x47, 0x40, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x4e,
        0x88, 0x89, 0x58, 0x0a, 0x00, 0x00, 0x00, 0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f, 0x20, 0xe2,
        0x98, 0x83, 0x71, 0x03, 0x4b, 0x01, 0x4b, 0x02, 0x86, 0x71, 0x04, 0x29, 0x4b, 0x07, 0x85,
        0x71, 0x05, 0x4b, 0x01, 0x4b, 0x02, 0x4b, 0x03, 0x87, 0x71, 0x06, 0x28, 0x4b, 0x01, 0x4b,
        0x02, 0x4b, 0x03, 0x4b, 0x04, 0x74, 0x71, 0x07, 0x8a, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0x00, 0x8a, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0,
        0x4d, 0x2c, 0x01, 0x4a, 0x70, 0x11, 0x01, 0x00, 0x4a, 0xfb, 0xff, 0xff, 0xff, 0x4a, 0x00,
        0x00, 0x00, 0x80, 0x8a, 0x05, 0x00, 0x00, 0x00, 0x80, 0x00, 0x8a, 0x08, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0x7f, 0x8a, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80,
        0x65, 0x58, 0x01, 0x00, 0x00, 0x00, 0x62, 0x71, 0x08, 0x7d, 0x71, 0x09, 0x58, 0x01, 0x00,
        0x00, 0x00, 0x78, 0x71, 0x0a, 0x58, 0x00, 0x01, 0x00, 0x00, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x71, 0x0b, 0x73, 0x58,
        0x02, 0x00, 0x00, 0x00, 0x73, 0x31, 0x71, 0x0c, 0x5d, 0x71, 0x0d, 0x28, 0x4b, 0x01, 0x68,
        0x0a, 0x65, 0x58, 0x02, 0x00, 0x00, 0x00, 0x73, 0x32, 0x71, 0x0e, 0x68, 0x0d, 0x58, 0x01,
        0x00, 0x00, 0x00, 0x65, 0x71, 0x0f, 0x7d, 0x71, 0x10, 0x58, 0x03, 0x00, 0x00, 0x00, 0x6f,
        0x6e, 0x65, 0x71, 0x11, 0x5d, 0x71, 0x12, 0x7d, 0x71, 0x13, 0x58, 0x06, 0x00, 0x00, 0x00,
        0x61, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x71, 0x14, 0x58, 0x05, 0x00, 0x00, 0x00, 0x61, 0x6c,
        0x6c, 0x6f, 0x63, 0x71, 0x15, 0x73, 0x61, 0x75, 0x2e,
    ];
    const CPY_P3: &[u8] = &[
        0x80, 0x03, 0x7d, 0x71, 0x00, 0x28, 0x58, 0x01, 0x00, 0x00, 0x00, 0x61, 0x71, 0x01, 0x5d,
        0x71, 0x02, 0x28, 0x4b, 0x01, 0x47, 0x40, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x4e,
        0x88, 0x89, 0x58, 0x0a, 0x00, 0x00, 0x00, 0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f, 0x20, 0xe2,
        0x98, 0x83, 0x71, 0x03, 0x4b, 0x01, 0x4b, 0x02, 0x86, 0x71, 0x04, 0x29, 0x4b, 0x07, 0x85,
        0x71, 0x05, 0x4b, 0x01, 0x4b, 0x02, 0x4b, 0x03, 0x87, 0x71, 0x06, 0x28, 0x4b, 0x01, 0x4b,
        0x02, 0x4b, 0x03, 0x4b, 0x04, 0x74, 0x71, 0x07, 0x8a, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0x00, 0x8a, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0,
        0x4d, 0x2c, 0x01, 0x4a, 0x70, 0x11, 0x01, 0x00, 0x4a, 0xfb, 0xff, 0xff, 0xff, 0x4a, 0x00,
        0x00, 0x00, 0x80, 0x8a, 0x05, 0x00, 0x00, 0x00, 0x80, 0x00, 0x8a, 0x08, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0x7f, 0x8a, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80,
        0x65, 0x58, 0x01, 0x00, 0x00, 0x00, 0x62, 0x71, 0x08, 0x7d, 0x71, 0x09, 0x58, 0x01, 0x00,
        0x00, 0x00, 0x78, 0x71, 0x0a, 0x58, 0x00, 0x01, 0x00, 0x00, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x71, 0x0b, 0x73, 0x58,
        0x02, 0x00, 0x00, 0x00, 0x73, 0x31, 0x71, 0x0c, 0x5d, 0x71, 0x0d, 0x28, 0x4b, 0x01, 0x68,
        0x0a, 0x65, 0x58, 0x02, 0x00, 0x00, 0x00, 0x73, 0x32, 0x71, 0x0e, 0x68, 0x0d, 0x58, 0x01,
        0x00, 0x00, 0x00, 0x65, 0x71, 0x0f, 0x7d, 0x71, 0x10, 0x58, 0x03, 0x00, 0x00, 0x00, 0x6f,
        0x6e, 0x65, 0x71, 0x11, 0x5d, 0x71, 0x12, 0x7d, 0x71, 0x13, 0x58, 0x06, 0x00, 0x00, 0x00,
        0x61, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x71, 0x14, 0x58, 0x05, 0x00, 0x00, 0x00, 0x61, 0x6c,
        0x6c, 0x6f, 0x63, 0x71, 0x15, 0x73, 0x61, 0x75, 0x2e,
    ];
    const CPY_P4: &[u8] = &[
        0x80, 0x04, 0x95, 0xd1, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d, 0x94, 0x28, 0x8c,
        0x01, 0x61, 0x94, 0x5d, 0x94, 0x28, 0x4b, 0x01, 0x47, 0x40, 0x04, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x4e, 0x88, 0x89, 0x8c, 0x0a, 0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f, 0x20, 0xe2,
        0x98, 0x83, 0x94, 0x4b, 0x01, 0x4b, 0x02, 0x86, 0x94, 0x29, 0x4b, 0x07, 0x85, 0x94, 0x4b,
        0x01, 0x4b, 0x02, 0x4b, 0x03, 0x87, 0x94, 0x28, 0x4b, 0x01, 0x4b, 0x02, 0x4b, 0x03, 0x4b,
        0x04, 0x74, 0x94, 0x8a, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x8a,
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x4d, 0x2c, 0x01, 0x4a, 0x70,
        0x11, 0x01, 0x00, 0x4a, 0xfb, 0xff, 0xff, 0xff, 0x4a, 0x00, 0x00, 0x00, 0x80, 0x8a, 0x05,
        0x00, 0x00, 0x00, 0x80, 0x00, 0x8a, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        0x8a, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x65, 0x8c, 0x01, 0x62, 0x94,
        0x7d, 0x94, 0x8c, 0x01, 0x78, 0x94, 0x58, 0x00, 0x01, 0x00, 0x00, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x94, 0x73, 0x8c,
        0x02, 0x73, 0x31, 0x94, 0x5d, 0x94, 0x28, 0x4b, 0x01, 0x68, 0x0a, 0x65, 0x8c, 0x02, 0x73,
        0x32, 0x94, 0x68, 0x0d, 0x8c, 0x01, 0x65, 0x94, 0x7d, 0x94, 0x8c, 0x03, 0x6f, 0x6e, 0x65,
        0x94, 0x5d, 0x94, 0x7d, 0x94, 0x8c, 0x06, 0x61, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x94, 0x8c,
        0x05, 0x61, 0x6c, 0x6c, 0x6f, 0x63, 0x94, 0x73, 0x61, 0x75, 0x2e,
    ];
    const CPY_P5: &[u8] = &[
        0x80, 0x05, 0x95, 0xd1, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d, 0x94, 0x28, 0x8c,
        0x01, 0x61, 0x94, 0x5d, 0x94, 0x28, 0x4b, 0x01, 0x47, 0x40, 0x04, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x4e, 0x88, 0x89, 0x8c, 0x0a, 0x68, 0xc3, 0xa9, 0x6c, 0x6c, 0x6f, 0x20, 0xe2,
        0x98, 0x83, 0x94, 0x4b, 0x01, 0x4b, 0x02, 0x86, 0x94, 0x29, 0x4b, 0x07, 0x85, 0x94, 0x4b,
        0x01, 0x4b, 0x02, 0x4b, 0x03, 0x87, 0x94, 0x28, 0x4b, 0x01, 0x4b, 0x02, 0x4b, 0x03, 0x4b,
        0x04, 0x74, 0x94, 0x8a, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x8a,
        0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0x4d, 0x2c, 0x01, 0x4a, 0x70,
        0x11, 0x01, 0x00, 0x4a, 0xfb, 0xff, 0xff, 0xff, 0x4a, 0x00, 0x00, 0x00, 0x80, 0x8a, 0x05,
        0x00, 0x00, 0x00, 0x80, 0x00, 0x8a, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
        0x8a, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x65, 0x8c, 0x01, 0x62, 0x94,
        0x7d, 0x94, 0x8c, 0x01, 0x78, 0x94, 0x58, 0x00, 0x01, 0x00, 0x00, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79,
        0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x79, 0x94, 0x73, 0x8c,
        0x02, 0x73, 0x31, 0x94, 0x5d, 0x94, 0x28, 0x4b, 0x01, 0x68, 0x0a, 0x65, 0x8c, 0x02, 0x73,
        0x32, 0x94, 0x68, 0x0d, 0x8c, 0x01, 0x65, 0x94, 0x7d, 0x94, 0x8c, 0x03, 0x6f, 0x6e, 0x65,
        0x94, 0x5d, 0x94, 0x7d, 0x94, 0x8c, 0x06, 0x61, 0x63, 0x74, 0x69, 0x6f, 0x6e, 0x94, 0x8c,
        0x05, 0x61, 0x6c, 0x6c, 0x6f, 0x63, 0x94, 0x73, 0x61, 0x75, 0x2e,
    ];

    const ALL_CPY: [(&str, &[u8]); 4] = [
        ("p2", CPY_P2),
        ("p3", CPY_P3),
        ("p4", CPY_P4),
        ("p5", CPY_P5),
    ];

    /// Emits pickle opcodes byte by byte.
    struct P(Vec<u8>);

    impl P {
        /// `PROTO 2`.
        fn new() -> P {
            P(vec![op::PROTO, 2])
        }
        fn bare() -> P {
            P(Vec::new())
        }
        fn op(mut self, c: u8) -> P {
            self.0.push(c);
            self
        }
        fn raw(mut self, b: &[u8]) -> P {
            self.0.extend_from_slice(b);
            self
        }
        fn binint(self, i: i32) -> P {
            self.op(op::BININT).raw(&i.to_le_bytes())
        }
        fn k(self, i: u8) -> P {
            self.op(op::BININT1).raw(&[i])
        }
        fn s(self, x: &str) -> P {
            assert!(x.len() < 256);
            self.op(op::SHORT_BINUNICODE)
                .raw(&[x.len() as u8])
                .raw(x.as_bytes())
        }
        fn long1(self, b: &[u8]) -> P {
            self.op(op::LONG1).raw(&[b.len() as u8]).raw(b)
        }
        fn put(self, i: u8) -> P {
            self.op(op::BINPUT).raw(&[i])
        }
        fn get(self, i: u8) -> P {
            self.op(op::BINGET).raw(&[i])
        }
        fn long_put(self, i: u32) -> P {
            self.op(op::LONG_BINPUT).raw(&i.to_le_bytes())
        }
        fn long_get(self, i: u32) -> P {
            self.op(op::LONG_BINGET).raw(&i.to_le_bytes())
        }
        fn stop(self) -> Vec<u8> {
            self.op(op::STOP).0
        }
    }

    fn ok(b: &[u8]) -> Value {
        unpickle_slice(b).unwrap_or_else(|e| panic!("unexpected error: {e}"))
    }

    fn fail(b: &[u8]) -> PickleError {
        match unpickle_slice(b) {
            Ok(v) => panic!("expected an error, got {v:?}"),
            Err(e) => e,
        }
    }

    fn with_limits(b: &[u8], limits: &Limits) -> Result<Value, PickleError> {
        unpickle(b, limits, &mut NoHook)
    }

    fn s(x: &str) -> Value {
        Value::Str(Rc::new(Box::from(x)))
    }

    /// A handle numbered `i` (the tests' hooks number what they lower).
    fn hv(i: u32) -> Value {
        Value::Handle(Handle::event(i as usize).unwrap())
    }

    /// The number of a handle made by [`hv`].
    fn num(h: Handle) -> u32 {
        match h.lowered() {
            Lowered::Event(i) => i,
            other => panic!("not a numbered handle: {other:?}"),
        }
    }

    /// A reader that hands out at most `n` bytes per `read`, to exercise
    /// opcodes straddling buffer refills.
    struct Trickle<'a> {
        data: &'a [u8],
        n: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let k = self.n.min(buf.len()).min(self.data.len());
            buf[..k].copy_from_slice(&self.data[..k]);
            self.data = &self.data[k..];
            Ok(k)
        }
    }

    fn trickle(data: &[u8], n: usize) -> Result<Value, PickleError> {
        let r = BufReader::with_capacity(1, Trickle { data, n });
        unpickle(r, &Limits::default(), &mut NoHook)
    }

    #[test]
    fn value_is_16_bytes() {
        assert!(std::mem::size_of::<Value>() <= 16);
        assert!(std::mem::size_of::<Option<Value>>() <= 16);
    }

    fn check_cpython_obj(v: &Value) {
        assert_eq!(v.type_name(), "dict");
        let a = v.get("a").expect("a");
        let a = a.list_items().expect("list");
        assert_eq!(a.len(), 20);
        assert_eq!(a[0], Value::Int(1));
        assert_eq!(a[1].as_f64(), Some(2.5));
        assert_eq!(a[2], Value::None);
        assert_eq!(a[3].as_bool(), Some(true));
        assert_eq!(a[4].as_bool(), Some(false));
        assert_eq!(a[5].as_str(), Some("héllo ☃"));
        assert_eq!(
            a[6].tuple_items(),
            Some(&[Value::Int(1), Value::Int(2)][..])
        );
        assert_eq!(a[7].tuple_items().map(<[Value]>::len), Some(0));
        assert_eq!(a[8].tuple_items(), Some(&[Value::Int(7)][..]));
        assert_eq!(a[9].tuple_items().map(<[Value]>::len), Some(3));
        assert_eq!(a[10].tuple_items().map(<[Value]>::len), Some(4));
        assert!(matches!(a[11], Value::BigInt(_)));
        assert_eq!(a[11].as_u64(), Some(u64::MAX));
        assert_eq!(a[11].as_i64(), None);
        assert_eq!(a[12], Value::BigInt(Box::new(-(1i128 << 70))));
        assert_eq!(a[12].as_u64(), None);
        assert_eq!(a[13], Value::Int(300));
        assert_eq!(a[14], Value::Int(70000));
        assert_eq!(a[15], Value::Int(-5));
        assert_eq!(a[16], Value::Int(-(1 << 31)));
        assert_eq!(a[17], Value::Int(1 << 31));
        assert_eq!(a[18], Value::Int(i64::MAX));
        assert_eq!(a[19], Value::Int(i64::MIN));
        let b = v.get("b").expect("b");
        assert_eq!(
            b.get("x").as_ref().and_then(Value::as_str),
            Some(&*"y".repeat(256))
        );
        let s1 = v.get("s1").expect("s1");
        let s2 = v.get("s2").expect("s2");
        assert_eq!(s1.identity(), s2.identity());
        assert!(s1.identity().is_some());
        match (&s1, &s2) {
            (Value::List(x), Value::List(y)) => assert!(Rc::ptr_eq(x, y)),
            _ => panic!("s1/s2 not lists"),
        }
        assert_eq!(*s1.list_items().unwrap(), vec![Value::Int(1), s("x")]);
        assert_eq!(v.get("e").unwrap().dict_items().unwrap().len(), 0);
        let one = v.get("one").unwrap();
        let one = one.list_items().unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].get("action").unwrap().as_str(), Some("alloc"));
        assert!(v.get("missing").is_none());
    }

    #[test]
    fn cpython_protocols_2_to_5() {
        for (name, bytes) in ALL_CPY {
            let v = ok(bytes);
            check_cpython_obj(&v);
            // Same result when the input arrives in small pieces.
            for n in [1, 2, 3, 7, 64] {
                let w = trickle(bytes, n).unwrap_or_else(|e| panic!("{name} n={n}: {e}"));
                assert_eq!(v, w, "{name} n={n}");
            }
        }
    }

    #[test]
    fn every_prefix_is_truncated() {
        let hand = P::new()
            .op(op::EMPTY_DICT)
            .put(0)
            .s("k")
            .op(op::MARK)
            .binint(-7)
            .long1(&[0xff; 9])
            .op(op::BINFLOAT)
            .raw(&1.5f64.to_be_bytes())
            .op(op::BINUNICODE)
            .raw(&3u32.to_le_bytes())
            .raw(b"abc")
            .op(op::BINUNICODE8)
            .raw(&2u64.to_le_bytes())
            .raw(b"de")
            .op(op::LONG4)
            .raw(&2i32.to_le_bytes())
            .raw(&[1, 2])
            .op(op::TUPLE)
            .op(op::SETITEM)
            .stop();
        ok(&hand);
        let mut cases: Vec<&[u8]> = ALL_CPY.iter().map(|(_, b)| *b).collect();
        cases.push(&hand);
        for bytes in cases {
            for len in 0..bytes.len() {
                let e = fail(&bytes[..len]);
                assert_eq!(
                    e.message,
                    format!("truncated pickle: unexpected end of input at byte {len}"),
                    "prefix {len}"
                );
                assert!(
                    e.offset < len.max(1) as u64,
                    "prefix {len}: offset {}",
                    e.offset
                );
                let e2 = trickle(&bytes[..len], 3).unwrap_err();
                assert_eq!(e, e2);
            }
        }
    }

    #[test]
    fn scalars() {
        assert_eq!(ok(&P::new().k(200).stop()), Value::Int(200));
        assert_eq!(
            ok(&P::new().op(op::BININT2).raw(&[0xff, 0xff]).stop()),
            Value::Int(65535)
        );
        assert_eq!(ok(&P::new().binint(-123456).stop()), Value::Int(-123456));
        assert_eq!(ok(&P::new().op(op::NONE).stop()), Value::None);
        assert_eq!(ok(&P::new().op(op::NEWTRUE).stop()), Value::Bool(true));
        assert_eq!(ok(&P::new().op(op::NEWFALSE).stop()), Value::Bool(false));
        let f = ok(&P::new()
            .op(op::BINFLOAT)
            .raw(&(-0.1f64).to_be_bytes())
            .stop());
        assert_eq!(f, Value::Float(-0.1));
        assert_eq!(f.type_name(), "float");
        let nan = ok(&P::new()
            .op(op::BINFLOAT)
            .raw(&f64::NAN.to_be_bytes())
            .stop());
        assert!(nan.as_f64().unwrap().is_nan());
        assert_eq!(Value::Bool(true).as_i64(), Some(1));
        assert_eq!(Value::Int(-1).as_u64(), None);
        assert_eq!(Value::Int(5).as_f64(), Some(5.0));
        assert_eq!(Value::Int(5).as_str(), None);
        assert_eq!(Value::Int(5).identity(), None);
        assert_eq!(s("x").identity(), None);
        assert_eq!(hv(3).type_name(), "handle");
        assert_eq!(Value::None.get("x"), None);
    }

    #[test]
    fn long_integers() {
        // LONG1 with zero bytes is 0.
        assert_eq!(ok(&P::new().long1(&[]).stop()), Value::Int(0));
        assert_eq!(ok(&P::new().long1(&[0xff]).stop()), Value::Int(-1));
        assert_eq!(ok(&P::new().long1(&[0x80]).stop()), Value::Int(-128));
        assert_eq!(ok(&P::new().long1(&[0x80, 0x00]).stop()), Value::Int(128));
        assert_eq!(
            ok(&P::new().long1(&[0x00, 0x80]).stop()),
            Value::Int(-32768)
        );
        let mut max = [0xffu8; 9];
        max[8] = 0;
        let v = ok(&P::new().long1(&max).stop());
        assert_eq!(v, Value::BigInt(Box::new(u64::MAX as i128)));
        assert_eq!(v.as_u64(), Some(u64::MAX));
        assert_eq!(v.as_i64(), None);
        assert_eq!(v.as_f64(), Some(u64::MAX as f64));
        assert_eq!(v.type_name(), "int");
        // A 9-byte encoding of a value that fits i64 narrows to Int.
        let minus2 = [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(ok(&P::new().long1(&minus2).stop()), Value::Int(-2));
        // 16 bytes: i128::MIN.
        let mut min = [0u8; 16];
        min[15] = 0x80;
        assert_eq!(
            ok(&P::new().long1(&min).stop()),
            Value::BigInt(Box::new(i128::MIN))
        );
        let e = fail(&P::new().long1(&[0; 17]).stop());
        assert_eq!(e.message, "integer wider than 128 bits (17 bytes)");
        assert_eq!(e.offset, 2);
        // LONG4
        let v = ok(&P::new()
            .op(op::LONG4)
            .raw(&9i32.to_le_bytes())
            .raw(&max)
            .stop());
        assert_eq!(v.as_u64(), Some(u64::MAX));
        let v = ok(&P::new()
            .op(op::LONG4)
            .raw(&1i32.to_le_bytes())
            .raw(&[0x85])
            .stop());
        assert_eq!(v, Value::Int(-123));
        let e = fail(&P::new().op(op::LONG4).raw(&(-1i32).to_le_bytes()).stop());
        assert_eq!(e.message, "LONG4 with negative length -1");
        let e = fail(&P::new().op(op::LONG4).raw(&i32::MAX.to_le_bytes()).stop());
        assert!(
            e.message.starts_with("integer wider than 128 bits"),
            "{}",
            e.message
        );
    }

    #[test]
    fn strings() {
        assert_eq!(ok(&P::new().s("").stop()), s(""));
        assert_eq!(ok(&P::new().s("naïve").stop()), s("naïve"));
        let long = "z".repeat(70_000);
        let b = P::new()
            .op(op::BINUNICODE)
            .raw(&(long.len() as u32).to_le_bytes())
            .raw(long.as_bytes())
            .stop();
        assert_eq!(ok(&b), s(&long));
        assert_eq!(trickle(&b, 1000).unwrap(), s(&long));
        let b = P::new()
            .op(op::BINUNICODE8)
            .raw(&3u64.to_le_bytes())
            .raw("☃".as_bytes())
            .stop();
        assert_eq!(ok(&b), s("☃"));
        // Invalid UTF-8 (a lone surrogate as CPython's surrogatepass writes it) is lossy.
        let b = P::new()
            .op(op::SHORT_BINUNICODE)
            .raw(&[5, b'a', 0xed, 0xa0, 0x80, b'b'])
            .stop();
        let v = ok(&b);
        assert!(v.as_str().unwrap().starts_with('a'));
        assert!(v.as_str().unwrap().ends_with('b'));
        assert!(v.as_str().unwrap().contains('\u{fffd}'));
    }

    #[test]
    fn string_longer_than_buffer_and_limits() {
        // Larger than the initial window and delivered in pieces.
        let big = "q".repeat(3 << 20);
        let b = P::new()
            .op(op::BINUNICODE)
            .raw(&(big.len() as u32).to_le_bytes())
            .raw(big.as_bytes())
            .stop();
        assert_eq!(
            trickle(&b, 100_000).unwrap().as_str().map(str::len),
            Some(3 << 20)
        );
        // Over max_string_bytes: rejected before reading.
        let limits = Limits {
            max_string_bytes: 1000,
            ..Limits::default()
        };
        let e = with_limits(&b, &limits).unwrap_err();
        assert_eq!(
            e.message,
            "string of 3145728 bytes exceeds the limit of 1000 bytes"
        );
        assert_eq!(e.offset, 2);
        // Absurd declared lengths.
        let e = fail(
            &P::new()
                .op(op::BINUNICODE)
                .raw(&u32::MAX.to_le_bytes())
                .raw(b"ab")
                .stop(),
        );
        assert!(e.message.contains("exceeds the limit"), "{}", e.message);
        let e = fail(
            &P::new()
                .op(op::BINUNICODE8)
                .raw(&u64::MAX.to_le_bytes())
                .stop(),
        );
        assert!(e.message.contains("exceeds the limit"), "{}", e.message);
        // Within the limit but longer than the input: truncation, no big allocation up front.
        let e = fail(
            &P::new()
                .op(op::BINUNICODE)
                .raw(&(900u32 << 20).to_le_bytes())
                .raw(b"ab")
                .stop(),
        );
        assert_eq!(
            e.message,
            "truncated pickle: unexpected end of input at byte 10"
        );
    }

    #[test]
    fn max_total_bytes() {
        let b = P::new().s("hello").stop();
        let limits = Limits {
            max_total_bytes: b.len() as u64,
            ..Limits::default()
        };
        assert_eq!(with_limits(&b, &limits).unwrap(), s("hello"));
        let limits = Limits {
            max_total_bytes: 5,
            ..Limits::default()
        };
        let e = with_limits(&b, &limits).unwrap_err();
        assert_eq!(e.message, "input exceeds the limit of 5 bytes");
    }

    #[test]
    fn containers() {
        // EMPTY_LIST + APPEND, APPENDS
        let v = ok(&P::new()
            .op(op::EMPTY_LIST)
            .k(1)
            .op(op::APPEND)
            .op(op::MARK)
            .k(2)
            .k(3)
            .op(op::APPENDS)
            .op(op::MARK)
            .op(op::APPENDS)
            .stop());
        assert_eq!(
            *v.list_items().unwrap(),
            vec![Value::Int(1), Value::Int(2), Value::Int(3)]
        );
        assert_eq!(v.type_name(), "list");
        // LIST
        let v = ok(&P::new().op(op::MARK).k(1).s("a").op(op::LIST).stop());
        assert_eq!(*v.list_items().unwrap(), vec![Value::Int(1), s("a")]);
        // EMPTY_DICT + SETITEM, SETITEMS; DICT
        let v = ok(&P::new()
            .op(op::EMPTY_DICT)
            .s("a")
            .k(1)
            .op(op::SETITEM)
            .op(op::MARK)
            .s("b")
            .k(2)
            .k(7) // non-string key
            .s("seven")
            .op(op::SETITEMS)
            .stop());
        assert_eq!(v.get("a"), Some(Value::Int(1)));
        assert_eq!(v.get("b"), Some(Value::Int(2)));
        assert_eq!(v.dict_items().unwrap()[2], (Value::Int(7), s("seven")));
        let v = ok(&P::new()
            .op(op::MARK)
            .s("x")
            .op(op::NONE)
            .op(op::DICT)
            .stop());
        assert_eq!(v.get("x"), Some(Value::None));
        // Repeated keys: the last one wins for `get`.
        let v = ok(&P::new()
            .op(op::MARK)
            .s("x")
            .k(1)
            .s("x")
            .k(2)
            .op(op::DICT)
            .stop());
        assert_eq!(v.get("x"), Some(Value::Int(2)));
        // Tuples
        assert_eq!(
            ok(&P::new().op(op::EMPTY_TUPLE).stop()).tuple_items(),
            Some(&[][..])
        );
        assert_eq!(
            ok(&P::new().k(1).op(op::TUPLE1).stop()).tuple_items(),
            Some(&[Value::Int(1)][..])
        );
        assert_eq!(
            ok(&P::new().k(1).k(2).op(op::TUPLE2).stop()).tuple_items(),
            Some(&[Value::Int(1), Value::Int(2)][..])
        );
        assert_eq!(
            ok(&P::new().k(1).k(2).k(3).op(op::TUPLE3).stop()).tuple_items(),
            Some(&[Value::Int(1), Value::Int(2), Value::Int(3)][..])
        );
        let v = ok(&P::new()
            .op(op::MARK)
            .k(1)
            .k(2)
            .k(3)
            .k(4)
            .op(op::TUPLE)
            .stop());
        assert_eq!(v.tuple_items().unwrap().len(), 4);
        assert_eq!(v.type_name(), "tuple");
        assert!(v.identity().is_some());
        // Nested dict / list / tuple
        let v = ok(&P::new()
            .op(op::EMPTY_DICT)
            .s("l")
            .op(op::EMPTY_LIST)
            .op(op::EMPTY_DICT)
            .s("t")
            .k(1)
            .op(op::EMPTY_LIST)
            .op(op::TUPLE2)
            .op(op::SETITEM)
            .op(op::APPEND)
            .op(op::SETITEM)
            .stop());
        let l = v.get("l").unwrap();
        let inner = l.list_items().unwrap()[0].clone();
        let t = inner.get("t").unwrap();
        assert_eq!(t.tuple_items().unwrap()[0], Value::Int(1));
        assert_eq!(t.tuple_items().unwrap()[1].list_items().unwrap().len(), 0);
    }

    #[test]
    fn pop_pop_mark_dup_frame() {
        let v = ok(&P::new().k(1).k(2).op(op::POP).stop());
        assert_eq!(v, Value::Int(1));
        let v = ok(&P::new().k(1).op(op::MARK).k(2).k(3).op(op::POP_MARK).stop());
        assert_eq!(v, Value::Int(1));
        // POP with nothing above the MARK pops the MARK.
        let v = ok(&P::new().k(1).op(op::MARK).op(op::POP).stop());
        assert_eq!(v, Value::Int(1));
        let v = ok(&P::new()
            .op(op::EMPTY_LIST)
            .op(op::DUP)
            .op(op::APPEND)
            .op(op::POP)
            .k(9)
            .stop());
        assert_eq!(v, Value::Int(9));
        let b = P::bare()
            .op(op::PROTO)
            .raw(&[4])
            .op(op::FRAME)
            .raw(&3u64.to_le_bytes())
            .k(5)
            .stop();
        assert_eq!(ok(&b), Value::Int(5));
    }

    #[test]
    fn protocols() {
        for v in 2..=5u8 {
            assert_eq!(
                ok(&P::bare().op(op::PROTO).raw(&[v]).op(op::NONE).stop()),
                Value::None
            );
        }
        for v in [0u8, 1, 6, 255] {
            let e = fail(&P::bare().op(op::PROTO).raw(&[v]).op(op::NONE).stop());
            assert_eq!(
                e.message,
                format!("unsupported pickle protocol {v} (memcut reads protocols 2 to 5)")
            );
            assert_eq!(e.offset, 0);
        }
    }

    #[test]
    fn trailing_bytes_after_stop_are_ignored() {
        let mut b = P::new().s("x").stop();
        b.extend_from_slice(&[0, 0, 0]);
        assert_eq!(ok(&b), s("x"));
        b.extend_from_slice(b"garbage\xff");
        assert_eq!(ok(&b), s("x"));
        for (_, cpy) in ALL_CPY {
            let mut padded = cpy.to_vec();
            padded.extend_from_slice(&[0, 0]);
            check_cpython_obj(&ok(&padded));
        }
    }

    #[test]
    fn refused_opcodes() {
        let cases: [(u8, &str); 13] = [
            (b'c', "GLOBAL"),
            (0x93, "STACK_GLOBAL"),
            (b'R', "REDUCE"),
            (b'b', "BUILD"),
            (0x81, "NEWOBJ"),
            (0x92, "NEWOBJ_EX"),
            (b'i', "INST"),
            (b'o', "OBJ"),
            (b'P', "PERSID"),
            (b'Q', "BINPERSID"),
            (0x82, "EXT1"),
            (0x83, "EXT2"),
            (0x84, "EXT4"),
        ];
        for (code, name) in cases {
            let e = fail(&P::new().k(1).op(code).raw(b"os\nsystem\n").stop());
            assert_eq!(
                e.message,
                format!(
                    "opcode {name} (0x{code:02x}) refused: memcut never imports or calls code from a pickle"
                )
            );
            assert_eq!(e.offset, 4);
        }
        // The classic payload.
        let e = fail(b"cos\nsystem\n(S'echo pwned'\ntR.");
        assert_eq!(
            e,
            PickleError {
                offset: 0,
                message:
                    "opcode GLOBAL (0x63) refused: memcut never imports or calls code from a pickle"
                        .into()
            }
        );
    }

    #[test]
    fn unsupported_and_unknown_opcodes() {
        let e = fail(&P::new().op(0x8f).stop());
        assert_eq!(
            e.message,
            "opcode EMPTY_SET (0x8f) not supported: PyTorch memory snapshots do not use it"
        );
        let e = fail(&P::new().op(b'I').raw(b"1\n").stop());
        assert!(e.message.starts_with("opcode INT (0x49) not supported"));
        for code in [0xffu8, 0x00, 0x99, b'z'] {
            let e = fail(&P::new().op(code).stop());
            assert_eq!(e.message, format!("unknown opcode 0x{code:02x}"));
            assert_eq!(e.offset, 2);
        }
    }

    #[test]
    fn stack_errors() {
        let e = fail(&P::new().stop());
        assert!(
            e.message.starts_with("stack underflow: STOP"),
            "{}",
            e.message
        );
        let e = fail(&P::new().k(1).op(op::APPEND).stop());
        assert!(
            e.message.starts_with("stack underflow: APPEND"),
            "{}",
            e.message
        );
        let e = fail(&P::new().k(1).k(2).op(op::APPEND).stop());
        assert_eq!(e.message, "APPEND on a int, expected a list");
        assert_eq!(e.offset, 6);
        let e = fail(
            &P::new()
                .op(op::EMPTY_LIST)
                .op(op::MARK)
                .k(1)
                .op(op::SETITEMS)
                .stop(),
        );
        assert_eq!(e.message, "SETITEMS on a list, expected a dict");
        let e = fail(
            &P::new()
                .op(op::EMPTY_DICT)
                .op(op::MARK)
                .k(1)
                .op(op::APPENDS)
                .stop(),
        );
        assert_eq!(e.message, "APPENDS on a dict, expected a list");
        let e = fail(&P::new().k(0).k(1).k(2).op(op::SETITEM).stop());
        assert_eq!(e.message, "SETITEM on a int, expected a dict");
        let e = fail(
            &P::new()
                .op(op::EMPTY_DICT)
                .op(op::MARK)
                .k(1)
                .op(op::SETITEMS)
                .stop(),
        );
        assert_eq!(e.message, "SETITEMS with an odd number of stack items (1)");
        let e = fail(&P::new().op(op::MARK).k(1).op(op::DICT).stop());
        assert_eq!(e.message, "DICT with an odd number of stack items (1)");
        let e = fail(&P::new().op(op::EMPTY_LIST).k(1).op(op::APPENDS).stop());
        assert_eq!(e.message, "MARK missing: APPENDS needs a MARK");
        let e = fail(&P::new().op(op::TUPLE).stop());
        assert_eq!(e.message, "MARK missing: TUPLE needs a MARK");
        let e = fail(&P::new().k(1).op(op::TUPLE2).stop());
        assert!(e.message.starts_with("stack underflow: TUPLE2"));
        // Values below a MARK are not reachable.
        let e = fail(&P::new().k(1).op(op::MARK).op(op::TUPLE1).stop());
        assert!(e.message.starts_with("stack underflow: TUPLE1"));
        let e = fail(&P::new().op(op::MARK).op(op::APPENDS).stop());
        assert!(e.message.starts_with("stack underflow: APPENDS"));
        let e = fail(&P::new().op(op::MEMOIZE).stop());
        assert!(e.message.starts_with("stack underflow: MEMOIZE"));
        let e = fail(&P::new().op(op::POP).stop());
        assert_eq!(e.message, "MARK missing: POP needs a MARK");
    }

    #[test]
    fn memo_sharing() {
        // BINPUT / BINGET
        let v = ok(&P::new()
            .op(op::EMPTY_LIST)
            .put(0)
            .op(op::MARK)
            .op(op::EMPTY_LIST)
            .put(1)
            .k(1)
            .op(op::APPEND)
            .get(1)
            .get(1)
            .op(op::APPENDS)
            .stop());
        let items = v.list_items().unwrap();
        assert_eq!(items.len(), 3);
        let ids: Vec<_> = items.iter().map(Value::identity).collect();
        assert!(ids[0].is_some() && ids[0] == ids[1] && ids[1] == ids[2]);
        // LONG_BINPUT / LONG_BINGET and MEMOIZE
        let v = ok(&P::bare()
            .op(op::PROTO)
            .raw(&[4])
            .op(op::EMPTY_DICT)
            .op(op::MEMOIZE) // 0
            .s("k")
            .op(op::MEMOIZE) // 1
            .op(op::EMPTY_LIST)
            .long_put(70_000)
            .op(op::SETITEM)
            .s("k2")
            .long_get(70_000)
            .op(op::SETITEM)
            .s("k3")
            .get(1)
            .op(op::SETITEM)
            .stop());
        assert_eq!(
            v.get("k").unwrap().identity(),
            v.get("k2").unwrap().identity()
        );
        assert_eq!(v.get("k3"), Some(s("k")));
        // A memo slot can be overwritten.
        let v = ok(&P::new()
            .k(1)
            .put(0)
            .k(2)
            .put(0)
            .op(op::MARK)
            .get(0)
            .op(op::TUPLE)
            .stop());
        assert_eq!(v.tuple_items(), Some(&[Value::Int(2)][..]));
    }

    #[test]
    fn memo_errors_and_sparse_indices() {
        let e = fail(&P::new().get(5).stop());
        assert_eq!(e.message, "BINGET: memo index 5 not found");
        assert_eq!(e.offset, 2);
        let e = fail(&P::new().long_get(123_456).stop());
        assert_eq!(e.message, "LONG_BINGET: memo index 123456 not found");
        let e = fail(&P::new().k(1).long_put(u32::MAX - 1).stop());
        assert_eq!(
            e.message,
            "memo index 4294967294 exceeds the limit of 268435456"
        );
        let limits = Limits {
            max_memo: 10,
            ..Limits::default()
        };
        let b = P::new().k(1).put(10).stop();
        assert_eq!(
            with_limits(&b, &limits).unwrap_err().message,
            "memo index 10 exceeds the limit of 10"
        );
        let mut p = P::new().k(1);
        for _ in 0..11 {
            p = p.op(op::MEMOIZE);
        }
        let e = with_limits(&p.stop(), &limits).unwrap_err();
        assert_eq!(e.message, "memo index 10 exceeds the limit of 10");
        // A large sparse index works without a huge dense table.
        let v = ok(&P::new()
            .k(7)
            .long_put(200_000_000)
            .long_get(200_000_000)
            .op(op::TUPLE2)
            .stop());
        assert_eq!(v.tuple_items(), Some(&[Value::Int(7), Value::Int(7)][..]));
        let mut m = Memo::default();
        assert!(m
            .put(200_000_000, Value::Int(1), 1 << 28)
            .unwrap()
            .is_none());
        assert_eq!(m.dense.len(), 0);
        assert_eq!(m.sparse.len(), 1);
        assert!(m.put(0, Value::Int(2), 1 << 28).unwrap().is_none());
        assert_eq!(m.dense.len(), 1);
        assert_eq!(m.count, 2);
        assert_eq!(m.get(200_000_000), Some(&Value::Int(1)));
        assert_eq!(m.get(1), None);
        // Dense growth past a sparse entry keeps one value per index.
        let mut m = Memo::default();
        m.put(2000, Value::Int(1), 1 << 28).unwrap();
        assert_eq!(m.sparse.len(), 1);
        for i in 0..2001 {
            m.put(i, Value::Int(i as i64 + 10), 1 << 28).unwrap();
        }
        assert_eq!(m.get(2000), Some(&Value::Int(2010)));
        assert!(m.sparse.is_empty());
        assert_eq!(m.count, 2001);
    }

    #[test]
    fn mark_depth_limit() {
        let mut p = P::new();
        for _ in 0..1000 {
            p = p.op(op::MARK);
        }
        let ok_depth = p.0.clone();
        // 1000 MARKs are fine (then closed by 1000 TUPLEs).
        let mut q = P(ok_depth);
        for _ in 0..1000 {
            q = q.op(op::TUPLE);
        }
        let v = ok(&q.stop());
        assert!(v.tuple_items().is_some());
        let e = fail(&p.op(op::MARK).stop());
        assert_eq!(e.message, "nesting deeper than max_depth (1000)");
        assert_eq!(e.offset, 1002);
    }

    #[test]
    fn container_depth_limit() {
        // 2000 nested lists built with EMPTY_LIST×n, APPEND×(n-1).
        let nested = |n: usize| {
            let mut p = P::new();
            for _ in 0..n {
                p = p.op(op::EMPTY_LIST);
            }
            for _ in 1..n {
                p = p.op(op::APPEND);
            }
            p.stop()
        };
        ok(&nested(1000));
        let e = fail(&nested(1001));
        assert_eq!(e.message, "containers nested deeper than max_depth (1000)");
        let limits = Limits {
            max_depth: 2000,
            ..Limits::default()
        };
        assert!(with_limits(&nested(2000), &limits).is_ok());
    }

    /// Runs `f` on a thread with a small stack, so that any recursion over a
    /// deeply nested value would overflow.
    fn small_stack(f: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(f)
            .unwrap()
            .join()
            .unwrap();
    }

    /// The stack limit fires at the opcode that pushes past it, whatever
    /// pieces the input arrives in (it used to be checked once per buffer
    /// window, so where it fired depended on the reader).
    #[test]
    fn stack_limit_fires_at_the_same_byte_however_the_input_arrives() {
        const N: usize = MAX_STACK + 100;
        let mut b = vec![op::PROTO, 2];
        b.resize(2 + N, op::EMPTY_LIST);
        b.resize(2 + 2 * N - 1, op::APPEND);
        b.push(op::STOP);
        let want = format!(
            "bad pickle at byte {}: more than {MAX_STACK} values on the pickle stack (e.g. millions of nested lists); not a memory snapshot",
            2 + MAX_STACK
        );
        assert_eq!(fail(&b).to_string(), want);
        for n in [1000, 65536, 1 << 20] {
            assert_eq!(
                trickle(&b, n).unwrap_err().to_string(),
                want,
                "pieces of {n}"
            );
        }
    }

    #[test]
    fn million_deep_nesting_is_an_error_not_a_stack_overflow() {
        small_stack(|| {
            const N: usize = 1_000_000;
            // Lists: EMPTY_LIST×N then APPEND×(N-1).
            let mut b = vec![op::PROTO, 2];
            b.resize(2 + N, op::EMPTY_LIST);
            b.resize(2 + 2 * N - 1, op::APPEND);
            b.push(op::STOP);
            let e = fail(&b);
            assert_eq!(e.message, "containers nested deeper than max_depth (1000)");
            // Truncated before STOP: the partial structure is torn down too.
            let e = fail(&b[..b.len() - 1]);
            assert!(e.message.starts_with("truncated pickle"));
            // Tuples with a constant-size stack: EMPTY_TUPLE then TUPLE1×N.
            let mut t = vec![op::PROTO, 2, op::EMPTY_TUPLE];
            t.resize(3 + N, op::TUPLE1);
            t.push(op::STOP);
            assert!(fail(&t).message.starts_with("containers nested deeper"));
            assert!(fail(&t[..t.len() - 1])
                .message
                .starts_with("truncated pickle"));
            // Deep structures that get overwritten in the memo or popped.
            let mut m = t[..t.len() - 1].to_vec();
            m.extend_from_slice(&[op::BINPUT, 0, op::NONE, op::BINPUT, 0, op::POP, op::POP]);
            m.extend_from_slice(&[op::NONE, op::STOP]);
            assert_eq!(ok(&m), Value::None);
            // MARKs: stopped by the limit.
            let mut k = vec![op::PROTO, 2];
            k.resize(2 + N, op::MARK);
            assert_eq!(fail(&k).message, "nesting deeper than max_depth (1000)");
        });
    }

    #[test]
    fn deep_value_inside_a_hook_replaced_dict_is_torn_down_safely() {
        small_stack(|| {
            const N: usize = 200_000;
            let mut b = vec![op::PROTO, 2, op::EMPTY_LIST, op::EMPTY_DICT, op::BINPUT, 0];
            b.extend_from_slice(&[op::SHORT_BINUNICODE, 1, b'd', op::EMPTY_TUPLE]);
            b.resize(b.len() + N, op::TUPLE1);
            b.extend_from_slice(&[op::SETITEM, op::APPEND, op::STOP]);
            let mut hook = Replace::default();
            let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
            assert_eq!(*v.list_items().unwrap(), vec![hv(0)]);
        });
    }

    #[test]
    fn cycles_are_rejected_and_dags_are_cheap() {
        let e = fail(
            &P::new()
                .op(op::EMPTY_LIST)
                .put(0)
                .get(0)
                .op(op::APPEND)
                .stop(),
        );
        assert_eq!(e.message, "self-referential container (cycle) in pickle");
        let e = fail(
            &P::new()
                .op(op::EMPTY_LIST)
                .op(op::EMPTY_DICT)
                .put(0)
                .s("x")
                .op(op::EMPTY_LIST)
                .get(0)
                .op(op::APPEND)
                .op(op::SETITEM)
                .op(op::APPEND)
                .stop(),
        );
        assert_eq!(e.message, "self-referential container (cycle) in pickle");
        // L(i+1) = (L(i), L(i)): 2^300 paths, 301 levels.
        let mut p = P::new().op(op::EMPTY_TUPLE).put(0);
        for _ in 0..300 {
            p = p.op(op::POP).get(0).get(0).op(op::TUPLE2).put(0);
        }
        let v = ok(&p.stop());
        assert!(v.tuple_items().is_some());
        let limits = Limits {
            max_depth: 300,
            ..Limits::default()
        };
        let mut p = P::new().op(op::EMPTY_TUPLE).put(0);
        for _ in 0..300 {
            p = p.op(op::POP).get(0).get(0).op(op::TUPLE2).put(0);
        }
        assert_eq!(
            with_limits(&p.stop(), &limits).unwrap_err().message,
            "containers nested deeper than max_depth (300)"
        );
    }

    /// Replaces every dict that has an "action" key with `Handle(n)`; keeps
    /// weak references to lists inside the dicts it sees.
    #[derive(Default)]
    struct Replace {
        calls: usize,
        replaced: u32,
        weak_lists: Vec<Weak<RefCell<Vec<Value>>>>,
    }

    impl Hook for Replace {
        fn on_list_dict(&mut self, dict: &[(Value, Value)]) -> Result<Option<Value>, String> {
            self.calls += 1;
            for (_, v) in dict {
                if let Value::List(l) = v {
                    self.weak_lists.push(Rc::downgrade(l));
                }
            }
            let has = |k: &str| dict.iter().any(|(key, _)| key.as_str() == Some(k));
            if has("fail") {
                return Err("hook says no".into());
            }
            if has("action") || has("d") {
                let h = self.replaced;
                self.replaced += 1;
                return Ok(Some(hv(h)));
            }
            Ok(None)
        }
    }

    fn entry(p: P, memo: u8, inner_list: bool) -> P {
        let p = p
            .op(op::EMPTY_DICT)
            .put(memo)
            .op(op::MARK)
            .s("action")
            .s("alloc");
        let p = if inner_list {
            p.s("frames").op(op::EMPTY_LIST).k(1).op(op::APPEND)
        } else {
            p
        };
        p.op(op::SETITEMS)
    }

    #[test]
    fn hook_replaces_dict_and_memo_slot() {
        // [entry, entry-via-BINGET] with APPEND; then the same with APPENDS.
        let b = entry(P::new().op(op::EMPTY_LIST).put(0), 1, true)
            .op(op::APPEND)
            .get(1) // the memo slot now holds the handle
            .op(op::APPEND)
            .stop();
        let mut hook = Replace::default();
        let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
        assert_eq!(*v.list_items().unwrap(), vec![hv(0), hv(0)]);
        assert_eq!(hook.calls, 1);
        assert_eq!(hook.weak_lists.len(), 1);
        // The dict (the only holder of its "frames" list) has been freed.
        assert!(hook.weak_lists[0].upgrade().is_none());

        let mut p = P::bare()
            .op(op::PROTO)
            .raw(&[4])
            .op(op::EMPTY_LIST)
            .put(0)
            .op(op::MARK);
        for i in 0..3 {
            p = entry(p, 1 + i, true);
        }
        p = p.op(op::APPENDS);
        // After the APPENDS the memo slots hold the handles.
        p = p
            .op(op::MARK)
            .get(1)
            .get(2)
            .get(3)
            .op(op::TUPLE)
            .op(op::APPEND);
        let mut hook = Replace::default();
        let v = unpickle(&p.stop()[..], &Limits::default(), &mut hook).unwrap();
        let items = v.list_items().unwrap();
        assert_eq!(items[..3], [hv(0), hv(1), hv(2)]);
        assert_eq!(items[3].tuple_items(), Some(&[hv(0), hv(1), hv(2)][..]));
        assert_eq!(hook.weak_lists.len(), 3);
        assert!(hook.weak_lists.iter().all(|w| w.upgrade().is_none()));
    }

    /// Lowers `{"h": n}` dicts in lists to `Handle(n)`, lists of handles to
    /// `Handle(1000 + sum)`, and dicts whose first key is "rec" to the pair
    /// `("rec", number of items)`; counts which hook answered. Fails on a
    /// handle list summing to 13 and on a record with value "fail".
    #[derive(Default)]
    struct Lower {
        decline_fast: bool,
        list_items: usize,
        handle_lists: usize,
        dict_items: usize,
    }

    impl Lower {
        fn lower(handles: impl Iterator<Item = u32>) -> Result<Option<Value>, String> {
            let sum: u32 = handles.sum();
            if sum == 13 {
                return Err("unlucky".into());
            }
            Ok(Some(hv(1000 + sum)))
        }
    }

    impl Hook for Lower {
        fn on_list_dict(&mut self, dict: &[(Value, Value)]) -> Result<Option<Value>, String> {
            Ok(match dict {
                [(k, Value::Int(n))] if k.as_str() == Some("h") => Some(hv(*n as u32)),
                _ => None,
            })
        }
        fn on_list_items(&mut self, items: &[Value]) -> Result<Option<Value>, String> {
            self.list_items += 1;
            let mut handles = Vec::new();
            for item in items {
                match item {
                    Value::Handle(h) => handles.push(num(*h)),
                    _ => return Ok(None),
                }
            }
            Lower::lower(handles.into_iter())
        }
        fn on_handle_list(&mut self, handles: &[Handle]) -> Result<Option<Value>, String> {
            self.handle_lists += 1;
            if self.decline_fast {
                return Ok(None);
            }
            Lower::lower(handles.iter().map(|h| num(*h)))
        }
        fn on_dict_items(&mut self, items: &[Value]) -> Result<Option<(Value, Value)>, String> {
            self.dict_items += 1;
            match items {
                [k, v, ..] if k.as_str() == Some("rec") => {
                    if v.as_str() == Some("fail") {
                        return Err("bad record".into());
                    }
                    Ok(Some((k.clone(), Value::Int(items.len() as i64))))
                }
                _ => Ok(None),
            }
        }
    }

    /// `MARK [{"h": 1}, {"h": 2}, {"h": 3}]` with the dicts memoized as 1, 2,
    /// 3 (so the memo then holds handles 1, 2, 3) and the list as 0 (it
    /// becomes `[Handle(1006)]`); then `then`.
    fn handle_memo(then: impl FnOnce(P) -> P) -> Vec<u8> {
        let mut p = P::new().op(op::MARK).op(op::EMPTY_LIST).put(0).op(op::MARK);
        for i in 1..=3 {
            p = p.op(op::EMPTY_DICT).put(i).s("h").k(i).op(op::SETITEM);
        }
        then(p.op(op::APPENDS)).stop()
    }

    /// Reads `b` a few bytes per `read`, so the parser's window ends everywhere.
    fn trickle_hooked(b: &[u8], hook: &mut dyn Hook) -> Result<Value, PickleError> {
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let n = out.len().min(self.0.len()).min(3);
                out[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        unpickle(
            BufReader::with_capacity(1, Trickle(b)),
            &Limits::default(),
            hook,
        )
    }

    #[test]
    fn handle_lists_take_the_fast_path() {
        // (outer, [h1, h2, h3, h2] lowered, the same list via the memo)
        let b = handle_memo(|p| {
            p.op(op::EMPTY_LIST)
                .put(4)
                .op(op::MARK)
                .get(1)
                .long_get(2)
                .get(3)
                .get(2)
                .op(op::APPENDS)
                .get(4)
                .op(op::TUPLE)
        });
        let lowered = vec![hv(1008)];
        let mut hook = Lower::default();
        let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
        let t = v.tuple_items().unwrap();
        let h = hv;
        assert_eq!(*t[0].list_items().unwrap(), vec![h(1006)]);
        assert_eq!(*t[1].list_items().unwrap(), lowered);
        // The memo slot holds the lowered value, not the list.
        assert_eq!(t[2], h(1008));
        assert_eq!(t[1].list_items().unwrap().capacity(), 1);
        // The outer list held dicts: only the normal path saw it.
        assert_eq!((hook.handle_lists, hook.list_items), (1, 1));

        // The same answers when the input arrives in 3-byte reads (the fast
        // path gives up wherever the window ends) or when it declines.
        for trickled in [false, true] {
            let mut hook = Lower {
                decline_fast: !trickled,
                ..Lower::default()
            };
            let v = if trickled {
                trickle_hooked(&b, &mut hook).unwrap()
            } else {
                unpickle(&b[..], &Limits::default(), &mut hook).unwrap()
            };
            let t = v.tuple_items().unwrap();
            assert_eq!(*t[1].list_items().unwrap(), lowered);
            assert_eq!(t[2], h(1008));
            assert_eq!(hook.list_items, 2, "trickled: {trickled}");
        }
        // Without a hook the list is built as usual.
        let v = unpickle_slice(&b).unwrap();
        let t = v.tuple_items().unwrap();
        assert_eq!(t[0].list_items().unwrap().len(), 3);
        let items = t[1].list_items().unwrap();
        assert_eq!(items.len(), 4);
        assert_eq!(items[3].get("h"), Some(Value::Int(2)));
    }

    #[test]
    fn handle_lists_fall_back_when_they_must() {
        let h = hv;
        // A string among the gets, a second APPENDS, APPEND, an empty batch,
        // and a MARK whose stack top is not a list.
        let b = handle_memo(|p| {
            p.s("x")
                .put(5)
                .op(op::POP)
                .op(op::EMPTY_LIST)
                .op(op::MARK)
                .get(1)
                .get(5)
                .op(op::APPENDS)
                .op(op::EMPTY_LIST)
                .op(op::MARK)
                .get(1)
                .op(op::APPENDS)
                .op(op::MARK)
                .get(2)
                .get(3)
                .op(op::APPENDS)
                .op(op::EMPTY_LIST)
                .get(3)
                .op(op::APPEND)
                .op(op::EMPTY_LIST)
                .op(op::MARK)
                .op(op::APPENDS)
                .op(op::MARK)
                .get(1)
                .op(op::TUPLE)
                .op(op::TUPLE)
        });
        let mut hook = Lower::default();
        let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
        let t = v.tuple_items().unwrap();
        assert_eq!(t.len(), 6);
        assert_eq!(t[1].list_items().unwrap()[0], h(1));
        assert_eq!(t[1].list_items().unwrap()[1].as_str(), Some("x"));
        assert_eq!(*t[2].list_items().unwrap(), vec![h(1001), h(2), h(3)]);
        assert_eq!(*t[3].list_items().unwrap(), vec![h(1003)]);
        assert!(t[4].list_items().unwrap().is_empty());
        assert_eq!(t[5].tuple_items(), Some(&[h(1)][..]));
        // [0] and [1]: slow (dicts, a string); [2]: fast, then appended to
        // (not empty); [3]: slow (APPEND); [4]: an empty batch is not
        // offered; [5]: no list below the MARK.
        assert_eq!(hook.handle_lists, 1);
        assert_eq!(hook.list_items, 3);
    }

    #[test]
    fn lowered_lists_return_to_the_memo_when_appended_to() {
        let h = hv;
        for trickled in [false, true] {
            let run = |b: &[u8]| {
                let mut hook = Lower::default();
                if trickled {
                    trickle_hooked(b, &mut hook).unwrap()
                } else {
                    unpickle(b, &Limits::default(), &mut hook).unwrap()
                }
            };
            // Two batches: the memo slot gets the list back.
            let b = handle_memo(|p| {
                p.op(op::EMPTY_LIST)
                    .put(4)
                    .op(op::MARK)
                    .get(1)
                    .get(2)
                    .op(op::APPENDS)
                    .op(op::MARK)
                    .get(3)
                    .get(3)
                    .op(op::APPENDS)
                    .get(3)
                    .op(op::APPEND)
                    .get(4)
                    .op(op::TUPLE)
            });
            let v = run(&b);
            let t = v.tuple_items().unwrap();
            assert_eq!(*t[1].list_items().unwrap(), vec![h(1003), h(3), h(3), h(3)]);
            assert_eq!(t[1].identity(), t[2].identity());
            // A lowered with one batch, B lowered while A is still on the
            // stack (A goes back to the memo), then A appended to.
            let b = handle_memo(|p| {
                p.op(op::EMPTY_LIST)
                    .put(4)
                    .op(op::MARK)
                    .get(1)
                    .op(op::APPENDS)
                    .op(op::EMPTY_LIST)
                    .put(5)
                    .op(op::MARK)
                    .get(2)
                    .op(op::APPENDS)
                    .op(op::POP)
                    .get(3)
                    .op(op::APPEND)
                    .get(4)
                    .get(5)
                    .op(op::TUPLE)
            });
            let v = run(&b);
            let t = v.tuple_items().unwrap();
            assert_eq!(*t[1].list_items().unwrap(), vec![h(1001), h(3)]);
            assert_eq!(t[1].identity(), t[2].identity());
            assert_eq!(t[3], h(1002));
            // A slot overwritten by a later PUT is left alone.
            let b = handle_memo(|p| {
                p.op(op::EMPTY_LIST)
                    .put(4)
                    .op(op::MARK)
                    .get(1)
                    .op(op::APPENDS)
                    .s("other")
                    .put(4)
                    .op(op::POP)
                    .get(2)
                    .op(op::APPEND)
                    .get(4)
                    .op(op::TUPLE)
            });
            let v = run(&b);
            let t = v.tuple_items().unwrap();
            assert_eq!(*t[1].list_items().unwrap(), vec![h(1001), h(2)]);
            assert_eq!(t[2].as_str(), Some("other"));
        }
    }

    #[test]
    fn handle_list_errors_name_the_appends() {
        // Handles 1, 3 and 9 sum to 13: the hook fails.
        let prefix = handle_memo(|p| p).len() - 1; // without STOP
        let b = handle_memo(|p| {
            p.op(op::EMPTY_DICT)
                .put(9)
                .s("h")
                .k(9)
                .op(op::SETITEM)
                .op(op::POP)
                .op(op::EMPTY_LIST)
                .op(op::MARK)
                .get(1)
                .get(3)
                .op(op::APPENDS)
        });
        // {"h": 9} was never appended: the memo holds the dict, not a handle.
        let mut hook = Lower::default();
        assert!(unpickle(&b[..], &Limits::default(), &mut hook).is_ok());
        let b = handle_memo(|p| {
            p.op(op::EMPTY_LIST)
                .op(op::MARK)
                .get(1)
                .get(3)
                .get(3)
                .get(3)
                .get(3)
                .op(op::APPENDS)
        });
        let appends = (prefix + 2 + 5 * 2) as u64;
        for trickled in [false, true] {
            let mut hook = Lower::default();
            let e = if trickled {
                trickle_hooked(&b, &mut hook).unwrap_err()
            } else {
                unpickle(&b[..], &Limits::default(), &mut hook).unwrap_err()
            };
            assert_eq!(
                e,
                PickleError {
                    offset: appends,
                    message: "unlucky".into()
                },
                "trickled: {trickled}"
            );
        }
    }

    #[test]
    fn dict_items_hook_lowers_complete_batches() {
        let b = P::new()
            .op(op::MARK)
            .op(op::EMPTY_DICT)
            .put(0)
            .op(op::MARK)
            .s("rec")
            .k(1)
            .s("a")
            .k(2)
            .op(op::SETITEMS)
            .op(op::MARK)
            .s("b")
            .k(3)
            .op(op::SETITEMS)
            .s("c")
            .k(4)
            .op(op::SETITEM)
            .get(0)
            .op(op::EMPTY_DICT)
            .op(op::MARK)
            .s("other")
            .k(5)
            .op(op::SETITEMS)
            .op(op::EMPTY_DICT)
            .s("rec")
            .k(6)
            .op(op::SETITEM)
            .op(op::TUPLE)
            .stop();
        let mut hook = Lower::default();
        let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
        let t = v.tuple_items().unwrap();
        assert_eq!(t.len(), 4);
        let pairs = |v: &Value| v.dict_items().unwrap().clone();
        assert_eq!(
            pairs(&t[0]),
            vec![
                (s("rec"), Value::Int(4)),
                (s("b"), Value::Int(3)),
                (s("c"), Value::Int(4))
            ]
        );
        assert_eq!(t[0].identity(), t[1].identity());
        assert_eq!(pairs(&t[2]), vec![(s("other"), Value::Int(5))]);
        assert_eq!(pairs(&t[3]), vec![(s("rec"), Value::Int(6))]);
        // Only the first batch into an empty dict is offered; SETITEM never.
        assert_eq!(hook.dict_items, 2);
        // No hook: plain dicts.
        let v = unpickle_slice(&b).unwrap();
        assert_eq!(v.tuple_items().unwrap()[0].dict_items().unwrap().len(), 4);

        let b = P::new()
            .op(op::EMPTY_DICT)
            .op(op::MARK)
            .s("rec")
            .s("fail")
            .op(op::SETITEMS)
            .stop();
        let e = unpickle(&b[..], &Limits::default(), &mut Lower::default()).unwrap_err();
        assert_eq!(
            e,
            PickleError {
                offset: 15,
                message: "bad record".into()
            }
        );
    }

    #[test]
    fn recycled_dicts_start_empty() {
        // The first batch's dict is replaced and recycled; the second batch's
        // EMPTY_DICT reuses its allocation and must not see old contents.
        let b = entry(P::new().op(op::EMPTY_LIST).op(op::MARK), 0, true)
            .op(op::APPENDS)
            .op(op::MARK)
            .op(op::EMPTY_DICT)
            .s("x")
            .k(1)
            .op(op::SETITEM)
            .op(op::EMPTY_DICT)
            .op(op::APPENDS)
            .stop();
        let mut hook = Replace::default();
        let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
        let items = v.list_items().unwrap();
        assert_eq!(items[0], hv(0));
        assert_eq!(
            *items[1].dict_items().unwrap(),
            vec![(s("x"), Value::Int(1))]
        );
        assert_eq!(items[2].dict_items().unwrap().len(), 0);
        assert_eq!(hook.calls, 3);
    }

    #[test]
    fn hook_keeps_dicts_it_declines() {
        let b = P::new()
            .op(op::EMPTY_LIST)
            .op(op::EMPTY_DICT)
            .put(0)
            .s("frames")
            .op(op::EMPTY_LIST)
            .op(op::SETITEM)
            .op(op::APPEND)
            .get(0)
            .op(op::TUPLE2)
            .stop();
        let mut hook = Replace::default();
        let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
        assert_eq!(hook.calls, 1);
        assert!(hook.weak_lists[0].upgrade().is_some());
        let t = v.tuple_items().unwrap();
        let in_list = t[0].list_items().unwrap()[0].clone();
        assert_eq!(in_list.identity(), t[1].identity());
        assert_eq!(in_list.type_name(), "dict");
        // Dicts in SETITEMS and tuples do not reach the hook.
        let b = P::new()
            .op(op::EMPTY_DICT)
            .s("a")
            .op(op::EMPTY_DICT)
            .s("action")
            .k(1)
            .op(op::SETITEM)
            .op(op::SETITEM)
            .stop();
        let mut hook = Replace::default();
        unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
        assert_eq!(hook.calls, 0);
    }

    #[test]
    fn hook_error_aborts_at_the_append() {
        let b = P::new()
            .op(op::EMPTY_LIST)
            .op(op::EMPTY_DICT)
            .s("fail")
            .k(1)
            .op(op::SETITEM)
            .op(op::APPEND)
            .stop();
        let e = unpickle(&b[..], &Limits::default(), &mut Replace::default()).unwrap_err();
        assert_eq!(
            e,
            PickleError {
                offset: 13,
                message: "hook says no".into()
            }
        );
    }

    #[test]
    fn error_conversion() {
        let e: crate::error::Error = PickleError {
            offset: 7,
            message: "x".into(),
        }
        .into();
        assert_eq!(e.to_string(), "bad pickle at byte 7: x");
        assert_eq!(
            PickleError {
                offset: 7,
                message: "x".into()
            }
            .to_string(),
            "bad pickle at byte 7: x"
        );
    }

    #[test]
    fn io_errors_are_reported() {
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk on fire"))
            }
        }
        let e = unpickle(BufReader::new(Broken), &Limits::default(), &mut NoHook).unwrap_err();
        assert_eq!(e.message, "read error: disk on fire");
    }

    // ---- corpus -----------------------------------------------------------

    use crate::test_support::corpus_dir;

    /// (path under the corpus, dicts with "action" appended to lists, all dicts
    /// appended to lists), computed with CPython's pickle and a find_class that raises.
    const CORPUS_EXPECTED: [(&str, usize, usize); 17] = [
        ("cs336-bcrafton/memory_snapshot.pickle", 6486, 210595),
        ("cs336-magma27/memory_snapshot.pickle", 5163, 17708),
        (
            "cs336-nothanmin/memory_snapshot_forward.pickle",
            8948,
            572662,
        ),
        (
            "cs336-nothanmin/memory_snapshot_forward_without_mixed.pickle",
            7600,
            493900,
        ),
        ("cs336-silmont2000/mem_snapshot.pickle", 97, 2011),
        (
            "cs336-silmont2000/memory_forward_bf16_128.pickle",
            2811,
            81488,
        ),
        (
            "cs336-silmont2000/memory_forward_fp32_128.pickle",
            2043,
            55486,
        ),
        (
            "cs336-wedsonlin/results/medium_1024_training_memory_snapshot.pickle",
            22331,
            557018,
        ),
        (
            "cs336-wedsonlin/results/medium_128_inference_memory_snapshot.pickle",
            3840,
            172052,
        ),
        (
            "cs336-wedsonlin/results/medium_128_training_memory_snapshot.pickle",
            19136,
            471548,
        ),
        (
            "cs336-wedsonlin/results/medium_512_training_memory_snapshot.pickle",
            22332,
            557195,
        ),
        ("decomfl/memory.pickle", 23105, 195764),
        ("flexgen-yiyi/1.3b_snapshot.pickle", 1, 11071),
        ("flexgen-yiyi/log1/1.3b_snapshot.pickle", 1, 12669),
        ("flexgen-yiyi/oom_snapshot.pickle", 1, 5700),
        ("sketchkv2/my_snapshot.pickle", 1, 10727),
        ("verl/mem.pickle", 0, 88545),
    ];

    /// Counts handles and "action" dicts in `device_traces`.
    fn count_traces(v: &Value) -> (usize, usize) {
        let (mut handles, mut dicts) = (0, 0);
        if let Some(traces) = v.get("device_traces") {
            for dev in traces.list_items().expect("device_traces is a list").iter() {
                for e in dev.list_items().expect("a device's trace is a list").iter() {
                    match e {
                        Value::Handle(_) => handles += 1,
                        d if d.get("action").is_some() => dicts += 1,
                        _ => {}
                    }
                }
            }
        }
        (handles, dicts)
    }

    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn corpus_snapshots_parse() {
        let dir = corpus_dir();
        let pattern = format!("{}/**/*.pickle", dir.display());
        let mut seen = 0;
        for path in glob::glob(&pattern).unwrap() {
            let path = path.unwrap();
            let rel = path
                .strip_prefix(&dir)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let file = std::fs::File::open(&path).unwrap();
            let mut hook = Replace::default();
            let v = unpickle(BufReader::new(file), &Limits::default(), &mut hook)
                .unwrap_or_else(|e| panic!("{rel}: {e}"));
            let segments = match &v {
                Value::Dict(_) => v.get("segments"),
                Value::List(_) => Some(v.clone()),
                _ => None,
            };
            assert!(
                segments.as_ref().and_then(Value::list_items).is_some(),
                "{rel}: no segments list"
            );
            let (handles, dicts) = count_traces(&v);
            assert_eq!(dicts, 0, "{rel}");
            assert_eq!(handles, hook.replaced as usize, "{rel}");
            let plain = unpickle_slice(&std::fs::read(&path).unwrap()).unwrap();
            let (h0, plain_dicts) = count_traces(&plain);
            assert_eq!((h0, plain_dicts), (0, handles), "{rel}");
            if let Some((_, actions, list_dicts)) =
                CORPUS_EXPECTED.iter().find(|(name, _, _)| *name == rel)
            {
                assert_eq!(hook.replaced as usize, *actions, "{rel}");
                assert_eq!(hook.calls, *list_dicts, "{rel}");
                seen += 1;
            } else {
                eprintln!("{rel}: no expected counts recorded");
            }
        }
        eprintln!("checked {seen} corpus pickles");
        assert!(seen > 0, "no corpus pickles under {}", dir.display());
    }

    /// Manual timing check (not run by default):
    /// `MEMCUT_SPEED_PICKLE=/tmp/big.pickle cargo test --release --lib
    ///  formats::pickle::tests::speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn speed() {
        let Some(path) = std::env::var_os("MEMCUT_SPEED_PICKLE") else {
            eprintln!("set MEMCUT_SPEED_PICKLE to a snapshot pickle");
            return;
        };
        let with_hook = std::env::var_os("MEMCUT_SPEED_NOHOOK").is_none();
        let t = std::time::Instant::now();
        let cpu0 = super::micro::cpu();
        let file = std::fs::File::open(&path).unwrap();
        /// What a real caller does: replace trace entries with handles.
        #[derive(Default)]
        struct Entries {
            calls: usize,
            n: u32,
        }
        impl Hook for Entries {
            fn on_list_dict(&mut self, d: &[(Value, Value)]) -> Result<Option<Value>, String> {
                self.calls += 1;
                if d.iter().any(|(k, _)| k.as_str() == Some("action")) {
                    self.n += 1;
                    return Ok(Some(hv(self.n - 1)));
                }
                Ok(None)
            }
        }
        let mut hook = Entries::default();
        let v = if with_hook {
            unpickle(BufReader::new(file), &Limits::default(), &mut hook).unwrap()
        } else {
            unpickle(BufReader::new(file), &Limits::default(), &mut NoHook).unwrap()
        };
        let parsed = t.elapsed();
        let parsed_cpu = super::micro::cpu() - cpu0;
        let (handles, dicts) = count_traces(&v);
        drop(v);
        eprintln!(
            "unpickle {:?}: {parsed:?} wall, {parsed_cpu:.3} s CPU (with drop {:?}); hook calls {}, handles {handles}, dicts {dicts}",
            path,
            t.elapsed(),
            hook.calls
        );
    }
}

/// Per-opcode timings on synthetic lists (run by hand:
/// `cargo test --release --lib formats::pickle::micro -- --ignored --nocapture`).
#[cfg(test)]
mod micro {
    use super::*;

    fn list_of(n: usize, item: &[u8], prefix: &[u8]) -> Vec<u8> {
        let mut b = vec![op::PROTO, 4];
        b.extend_from_slice(prefix);
        b.push(op::EMPTY_LIST);
        for c in 0..n / 1000 {
            let _ = c;
            b.push(op::MARK);
            for _ in 0..1000 {
                b.extend_from_slice(item);
            }
            b.push(op::APPENDS);
        }
        b.push(op::STOP);
        b
    }

    struct H;
    impl Hook for H {
        fn on_list_dict(&mut self, _d: &[(Value, Value)]) -> Result<Option<Value>, String> {
            Ok(Some(Value::Handle(Handle::SKIPPED)))
        }
    }

    /// CPU time of this thread in seconds (the machine is shared).
    /// (Linux only; NaN elsewhere.)
    pub(super) fn cpu() -> f64 {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(f64::NAN, |ns| ns / 1e9)
    }

    fn time(name: &str, b: &[u8], hook: &mut dyn Hook) {
        if let Ok(only) = std::env::var("MICRO") {
            if !name.starts_with(&only) {
                return;
            }
        }
        let mut best = f64::MAX;
        for _ in 0..std::env::var("MICRO_N").map_or(5, |n| n.parse().unwrap()) {
            let t = cpu();
            let v = unpickle(b, &Limits::default(), hook).unwrap();
            drop(v);
            best = best.min(cpu() - t);
        }
        eprintln!("{name}: {:.1} ns/item", best * 1e9 / 1e6);
    }

    #[test]
    #[ignore]
    fn micro() {
        const N: usize = 1_000_000;
        time("BININT1", &list_of(N, &[op::BININT1, 7], &[]), &mut NoHook);
        time(
            "LONG1x6",
            &list_of(N, &[op::LONG1, 6, 1, 2, 3, 4, 5, 6], &[]),
            &mut NoHook,
        );
        let pre = [op::SHORT_BINUNICODE, 1, b'a', op::MEMOIZE, op::POP];
        time(
            "BINGET str",
            &list_of(N, &[op::BINGET, 0], &pre),
            &mut NoHook,
        );
        time(
            "LONG_BINGET str",
            &list_of(N, &[op::LONG_BINGET, 0, 0, 0, 0], &pre),
            &mut NoHook,
        );
        time(
            "EMPTY_DICT",
            &list_of(N, &[op::EMPTY_DICT], &[]),
            &mut NoHook,
        );
        time(
            "EMPTY_DICT hook",
            &list_of(N, &[op::EMPTY_DICT], &[]),
            &mut H,
        );
        time(
            "EMPTY_DICT MEMOIZE hook",
            &list_of(N, &[op::EMPTY_DICT, op::MEMOIZE], &[]),
            &mut H,
        );
        let entry = [
            op::EMPTY_DICT,
            op::MEMOIZE,
            op::MARK,
            op::BINGET,
            0,
            op::BINGET,
            0,
            op::BINGET,
            0,
            op::BININT1,
            3,
            op::SETITEMS,
        ];
        time("dict(2) MEMOIZE hook", &list_of(N, &entry, &pre), &mut H);
    }
}
