//! The state the fast paths (`fast/`) keep in the parser between records,
//! defined apart from their code: the parser (`machine.rs`) holds it
//! without importing the fast paths, which run on the parser.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use rustc_hash::FxHashMap;

use super::{Handle, Value};

/// A memo put that the opcodes a fast path skipped would have made, in
/// order. Strings are named by where they are in the scanned bytes.
#[derive(Clone, Copy)]
pub(super) enum Put {
    /// A string's UTF-8 bytes (already checked), `at..at + len`.
    Str {
        at: usize,
        len: usize,
    },
    /// A string the memo's strings hold already (`Memo::str_id`): the
    /// index in them.
    StrId(u32),
    Handle(Handle),
    /// A new empty list ([`Memo::put_empty_list`](super::memo::Memo::put_empty_list)).
    EmptyList,
}

/// The fast paths' scratch, kept by the parser between records.
#[derive(Default)]
pub(super) struct Scratch {
    /// The memo puts of the record or traceback being scanned.
    pub(super) puts: Vec<Put>,
}

/// How a record's traceback — `MARK`, memo gets of frame handles, `APPENDS`
/// — is lowered to the handle [`Hook::on_list_items`](super::Hook::on_list_items) answers for it,
/// without the ~40 memo lookups and the hashing of the handles each time.
/// A training step's tracebacks repeat the same gets entry after entry, so
/// answers are kept by the gets' bytes, or by the id of the run of bytes
/// when [`GetRunFinder`](super::GetRunFinder) found it ahead of the parser (then the parser
/// neither scans, hashes nor compares the bytes). Exact: equal bytes fetch
/// equal handles as long as none of the memo slots the answers were
/// fetched from has changed since ([`Memo::changed_handles`](super::memo::Memo::changed_handles); all answers
/// are dropped then). Other slots may change: a lowered list is put back
/// in its slot when the next list is lowered, and dropping the answers
/// each time made the 255 MB `untuned-nothanmin` bench snapshot resolve its
/// tracebacks 346,803 times instead of fewer than 256 (counted in a debug
/// build; `analyze` 1.84 → 1.52 s, see docs/performance.md).
#[derive(Default)]
pub(in crate::formats::pickle) struct TracebackLists {
    pub(super) by_bytes: FxHashMap<Box<[u8]>, Handle>,
    /// Bytes of the keys of `by_bytes`.
    pub(super) key_bytes: usize,
    /// Runs found ahead, and answers by run id with their generation.
    pub(super) hints: Option<Rc<GetRunHints>>,
    pub(super) by_run: Vec<(Handle, u64)>,
    pub(super) generation: u64,
    /// The memo slots the answers were fetched from, a bit each (up to
    /// [`TracebackLists::MAX_WATCHED`]).
    pub(super) watched: Vec<u64>,
    /// Scratch: the handles of the list being resolved.
    pub(super) handles: Vec<Value>,
}

/// A run of memo gets between `EMPTY_LIST MEMOIZE MARK` and `APPENDS` —
/// how `pickle.dump` writes a traceback of shared frame dicts — found in
/// the stream ahead of the parser: its gets are the bytes `at..at + len`,
/// and runs with equal bytes have equal ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GetRun {
    pub(crate) at: u64,
    pub(crate) len: u32,
    pub(crate) id: u32,
}

/// The parser's end of a [`GetRunFinder`](super::GetRunFinder): runs in stream order, added as
/// their chunks arrive, dropped as the parser passes them.
#[derive(Default)]
pub(crate) struct GetRunHints {
    pub(super) runs: RefCell<VecDeque<GetRun>>,
    pub(super) taken: Cell<u64>,
}
