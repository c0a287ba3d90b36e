//! The snapshot fast paths, behind one door: [`Hook::fast`]. A hook that
//! opens it gets its trace entries and tracebacks lowered straight from the
//! pickle's bytes, without a value, a dict or a list ever being built for
//! them; one that does not (the plain path) gets every opcode interpreted by
//! `machine`. Each fast path checks the shape it can take in the buffered
//! window, and anything else — an odd shape, the end of the window, a memo
//! that is not dense, a hook that declines — leaves the input untouched for
//! the plain interpreter, so the fast paths only ever skip work, never
//! change an answer. The oracle is the plain path: `formats::snapshot`'s
//! differential tests give both the same inputs (whole and trickled, and
//! through the read-ahead thread) and require the same trace or error.
//!
//! Why they exist: a 1M-entry snapshot (147 MB, the benchmark file) is one
//! `EMPTY_DICT MEMOIZE MARK … SETITEMS` record per trace entry, each with a
//! traceback of ~40 memo gets of shared frame dicts. Interpreted opcode by
//! opcode, that is ~60 pushes, pops and memo clones per entry.
//!
//! | fast path | where | what it skips | without it (1M-entry file) |
//! |---|---|---|---|
//! | whole record ([`Records::on_whole_record`]) | `EMPTY_DICT [MEMOIZE] MARK` | the entry's dict: its fields are decoded in place ([`scan_record`]) and the hook's event handle pushed | 1.5× the CPU time (with the next row) |
//! | record ([`Records::on_record`]) | `MARK` on an empty dict | the same, for a dict already made | (above) |
//! | traceback (`tracebacks.rs`) | `MARK` on an empty list, or inside a record | ~40 memo lookups and pushes: the answer for the same gets' bytes is reused | all three off (the plain path): 2.7× the CPU time, 3.1× the wall time |
//! | run hints ([`GetRunFinder`]) | a traceback the read-ahead thread found | even the look at the gets' bytes: the answer for the run's id is reused | 1.14× the CPU time |
//!
//! | inline traceback (`TracebackLists::lower_inline`) | a traceback whose frames are spelled out (`EMPTY_DICT MEMOIZE MARK` per frame: `_profile_to_snapshot`, a frame's first use) | the frames' dicts and the record around them, interpreted opcode by opcode | `_profile_to_snapshot` shape: 3.1× the CPU time, 4.9× the peak RSS |
//! | empty and fetched lists ([`Item::EmptyList`], never made; [`Item::List`]) | `frames: []`, or a frames list fetched from the memo | the record, interpreted opcode by opcode | unshared-frames shape: 1.6× the CPU time, 1.4× the peak RSS |
//!
//! Measured whole-process on `big.pickle` (147 MB, 1M entries; `memcut
//! analyze big.pickle -f json -o /dev/null`, medians of 5, each way against
//! all fast paths on, on a 2-core machine shared with a build), with the
//! paths switched off one at a time in a build made for it. The last two
//! rows: the issue-16 inputs of `scripts/bench_inputs.sh`
//! (`snap-profile.pickle` 248 MB, `snap-unshared.pickle` 96 MB), the
//! same command before (main at 7f43711) and after, medians of 5, A B A B
//! on the shared 2-core machine; the 8-byte memo slots (`memo.rs`) are in
//! the after figures (profile shape: 727 → 149 MiB peak; unshared: 273 →
//! 201 MiB). On big.pickle, whose entries took the fast paths before,
//! the process runs 5% more instructions than at 7f43711 (`valgrind
//! --tool=callgrind`, the same command), none of them the 8-byte slots'.

use std::io::BufRead;

use super::machine::{push, PResult, Parser, NO_MEMO};
use super::memo::{Got, Memo};
use super::opcodes::{self, op, Scalar};
use super::value::ListRc;
use super::{Handle, Hook, Value};

mod tracebacks;

use super::fast_state::{Put, TracebackLists};

pub(crate) use tracebacks::{GetRun, GetRunFinder, GetRunHints};

/// The fast paths' half of a [`Hook`], behind its door ([`Hook::fast`]).
pub(crate) trait Records {
    /// [`Hook::on_dict_items`] for a record decoded straight from the bytes
    /// (see [`scan_record`]): it must answer as `on_dict_items` would for
    /// the same items, where a lowered list is given as the handle it was
    /// lowered to. `Ok(None)` or `Err` make the parser interpret the
    /// opcodes (which then calls `on_dict_items`).
    fn on_record(&mut self, items: &[Item<'_>]) -> Result<Option<(Value, Value)>, String>;

    /// [`Records::on_record`] for a record that is a whole new dict
    /// (`EMPTY_DICT`, `MEMOIZE` or not, `MARK`, the record, `SETITEMS`):
    /// `Ok(Some(v))` has `v` stand for the dict wherever it would have gone
    /// — the stack and its memo slot — so the dict is never built (what
    /// [`Hook::on_list_dict`] would later do to it must be done now).
    /// `Ok(None)` or `Err` make the parser build the dict (offering the
    /// record to `on_record`).
    fn on_whole_record(&mut self, items: &[Item<'_>]) -> Result<Option<Value>, String>;

    /// A frame dict of a traceback spelled out inline (`EMPTY_DICT
    /// [MEMOIZE] MARK` … `SETITEMS`, each frame of a traceback list),
    /// decoded straight from the bytes: `Some(handle)` exactly when
    /// [`Hook::on_list_dict`] would answer `Value::Handle(handle)` for a
    /// dict of these pairs, or one standing for the same thing. `None` (the
    /// default) makes the parser interpret the opcodes; it must then have
    /// changed nothing.
    fn on_frame(&mut self, items: &[Item<'_>]) -> Option<Handle> {
        let _ = items;
        None
    }

    /// Whether a record whose first key is `key` may be one that
    /// [`Records::on_record`] and [`Records::on_whole_record`] take: `false`
    /// leaves it to the opcodes before it is scanned (its lists, and a
    /// traceback in it, are then lowered once, not again after a scan the
    /// hook would decline). Only a speed: the opcodes give the same answer.
    fn may_take(&self, key: &str) -> bool {
        let _ = key;
        true
    }
}

/// A field of a record offered to [`Records`]: a borrowed view of a
/// scalar or string [`Value`] (keys are always [`Item::Str`] or
/// [`Item::MemoStr`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Item<'a> {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
    /// A string the memo holds, and its index among the memo's strings
    /// (the same index is always the same string, for the whole parse): a
    /// hook may keep what it makes of a string by that index. Read as
    /// [`Item::Str`] otherwise.
    MemoStr(&'a str, u32),
    Handle(Handle),
    /// A list fetched from the memo: the hook may read and change it as it
    /// would the list the opcodes fetch.
    List(&'a ListRc),
    /// A new empty list (`frames: []`), or one fetched from the memo that
    /// nothing has fetched before: no list is made for it, so the hook
    /// reads it as an empty list and cannot change it.
    EmptyList,
}

impl From<Scalar> for Item<'_> {
    #[inline(always)]
    fn from(s: Scalar) -> Self {
        match s {
            Scalar::None => Item::None,
            Scalar::Bool(b) => Item::Bool(b),
            Scalar::Int(i) => Item::Int(i),
            Scalar::Float(f) => Item::Float(f),
        }
    }
}

impl<R: BufRead + ?Sized> Parser<'_, R> {
    /// The door at a `MARK` (whose depth was checked): a traceback into an
    /// empty list, or a record into an empty dict. `true` when the input was
    /// consumed through the list's `APPENDS` or the dict's `SETITEMS`.
    #[inline]
    pub(super) fn fast_mark(&mut self) -> PResult<bool> {
        Ok(self.handle_run()? || self.record_run()?)
    }

    /// The door at an `EMPTY_DICT`: a whole record. `true` when the input
    /// was consumed through its `SETITEMS` and the hook's value pushed.
    #[inline]
    pub(super) fn fast_empty_dict(&mut self) -> PResult<bool> {
        self.whole_record_run()
    }

    /// Called at a `MARK`: if the stack's top is an empty dict, the hook
    /// buffered input holds a whole record (see [`scan_record`]) up to its
    /// `SETITEMS`, offers the record to the
    /// hook. When the hook lowers it, stores its pair in the dict, makes the
    /// memo puts the record's opcodes would have made (strings, and lowered
    /// lists as their handles), consumes the input through the `SETITEMS`
    /// and returns `true`; otherwise nothing has changed (calls of
    /// [`Hook::on_list_items`] may have been made and are made again) and
    /// the opcodes run normally.
    #[inline]
    fn record_run(&mut self) -> PResult<bool> {
        match self.stack.last() {
            Some(Value::Dict(d)) if self.stack.len() > self.floor() && d.borrow().is_empty() => {
                self.lower_record(None)
            }
            _ => Ok(false),
        }
    }

    /// Called at an `EMPTY_DICT`: as [`Parser::record_run`] when the input
    /// continues with an optional `MEMOIZE`, a `MARK` and a whole record, but
    /// offers it to [`Records::on_whole_record`]: when the hook lowers it, its
    /// value is pushed (and memoized where the dict would have been, before
    /// the record's own memo puts) and the dict is never built.
    #[inline]
    fn whole_record_run(&mut self) -> PResult<bool> {
        if self.marks.len() >= self.limits.max_depth {
            return Ok(false);
        }
        let buf = self.win.rest();
        let memoized = buf.first() == Some(&op::MEMOIZE);
        if buf.get(usize::from(memoized)) != Some(&op::MARK) {
            return Ok(false);
        }
        self.lower_record(Some(memoized))
    }

    /// Whether memo puts may be made ahead of the opcodes: only while the
    /// memo is dense, where the opcodes' `MEMOIZE`s fill new slots in order.
    pub(super) fn memo_in_order(&self) -> bool {
        self.memo.sparse.is_empty() && self.memo.dense.len() == self.memo.count
    }

    /// The common part of [`Parser::record_run`] (`whole` is `None`: the
    /// input is at the record) and [`Parser::whole_record_run`] (`whole` says
    /// whether the dict is memoized: the input is at the `MEMOIZE` or `MARK`).
    #[inline(always)]
    fn lower_record(&mut self, whole: Option<bool>) -> PResult<bool> {
        // MEMOIZEs inside the record then fill new slots in order.
        if !self.memo_in_order() {
            return Ok(false);
        }
        let own_slot = usize::from(whole == Some(true));
        let start = match whole {
            Some(memoized) => usize::from(memoized) + 1,
            None => 0,
        };
        // A record the hook never takes is left before anything is made ready.
        if let Some(key) = first_key(&self.win.rest()[start..], &self.memo) {
            if !self.hook.fast().is_some_and(|r| r.may_take(key)) {
                return Ok(false);
            }
        }
        // The record's MARK is checked by the caller; a traceback's and its
        // frames' MARKs are one and two deeper.
        let depth = self.marks.len() + 1;
        self.tracebacks.sync(&mut self.memo);
        self.scratch.puts.clear();
        let mut items = Slots::new();
        let buf = &self.win.rest()[start..];
        let mut lists = RecordLists {
            hook: &mut *self.hook,
            tracebacks: &mut self.tracebacks,
            at: self.win.at() + start as u64,
            lists_ok: depth < self.limits.max_depth,
            frames_ok: depth + 1 < self.limits.max_depth,
            lowered: false,
        };
        let scanned = scan_record(
            buf,
            0,
            &self.memo,
            Some(&mut lists),
            &mut items,
            &mut self.scratch.puts,
        );
        let lowered_lists = lists.lowered;
        let lowered = scanned.and_then(|consumed| {
            let count = self.memo.count;
            let puts = own_slot + self.scratch.puts.len();
            if count + puts > self.limits.max_memo || count + puts > NO_MEMO as usize {
                return None;
            }
            let items = items.as_slice();
            let records = self.hook.fast()?;
            let answer = match whole {
                Some(_) => records
                    .on_whole_record(items)
                    .ok()
                    .flatten()
                    .map(RecordAnswer::Whole),
                None => records
                    .on_record(items)
                    .ok()
                    .flatten()
                    .map(RecordAnswer::Pair),
            };
            Some((consumed, answer?))
        });
        let Some((consumed, lowered)) = lowered else {
            return Ok(false);
        };
        // The dict's own slot comes before those of the record's opcodes.
        let max = self.limits.max_memo;
        let count = self.memo.count as u32;
        let put = match &lowered {
            RecordAnswer::Whole(Value::Handle(h)) if own_slot == 1 => {
                self.memo.put_handle(count, *h, max)
            }
            RecordAnswer::Whole(v) if own_slot == 1 => {
                self.memo.put(count, v.clone(), max).map(drop)
            }
            _ => Ok(()),
        };
        let first = count + own_slot as u32;
        let put = put.and_then(|()| {
            put_all(
                &mut self.memo,
                first,
                &self.win.rest()[start..],
                &self.scratch.puts,
                max,
            )
        });
        if let Err(m) = put {
            // Unreachable: the room was checked above.
            return self.err(m);
        }
        if lowered_lists {
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
        self.win.pos += start + consumed;
        // As if the record's last opcode had run (an error at the next
        // opcode's refill reports this offset, as the opcode path would).
        self.win.op_off = self.win.at() - 1;
        self.code = op::SETITEMS;
        Ok(true)
    }
}

/// Most items (keys and values) of a record for [`Parser::record_run`].
const MAX_RECORD_ITEMS: usize = 32;

/// What the hook made of a record: the value standing for its whole dict
/// ([`Records::on_whole_record`]), or the one pair its dict keeps
/// ([`Records::on_record`]).
enum RecordAnswer {
    Whole(Value),
    Pair((Value, Value)),
}

/// What a record's values that are lists need: the hook and the answers
/// for tracebacks.
struct RecordLists<'a> {
    hook: &'a mut dyn Hook,
    tracebacks: &'a mut TracebackLists,
    /// Offset of the scanned bytes in the stream.
    at: u64,
    /// Whether a traceback's `MARK`, and its frames' `MARK`s, are within
    /// the depth limit.
    lists_ok: bool,
    frames_ok: bool,
    /// Whether a traceback was lowered.
    lowered: bool,
}

impl RecordLists<'_> {
    /// The list value at `buf[*i..]`, just after its `EMPTY_LIST`: a
    /// traceback (`[MEMOIZE] MARK` … `APPENDS`) lowered to its handle, or
    /// an empty list (`[MEMOIZE]`, then anything but `MARK`), which is
    /// never made (see [`Item::EmptyList`]).
    fn list<'x>(
        &mut self,
        buf: &[u8],
        i: &mut usize,
        memo: &Memo,
        puts: &mut Vec<Put>,
    ) -> Option<Item<'x>> {
        let memoized = buf.get(*i) == Some(&op::MEMOIZE);
        *i += usize::from(memoized);
        if buf.get(*i) != Some(&op::MARK) {
            if memoized {
                puts.push(Put::EmptyList);
            }
            return Some(Item::EmptyList);
        }
        if !self.lists_ok {
            return None;
        }
        // The list's slot comes before those of its frames.
        let slot = puts.len();
        if memoized {
            puts.push(Put::Handle(Handle::SKIPPED));
        }
        let (end, h) = self.tracebacks.lower(
            buf,
            *i + 1,
            self.at,
            memo,
            &mut *self.hook,
            puts,
            self.frames_ok,
        )?;
        if memoized {
            puts[slot] = Put::Handle(h);
        }
        *i = end + 1;
        self.lowered = true;
        Some(Item::Handle(h))
    }
}

/// Decodes a record at `buf[i..]` (just after its `MARK`) into `items`,
/// and the memo puts its opcodes make into `puts`, without side effects on
/// the parser (tracebacks are lowered by the hook); the index just past its
/// `SETITEMS`, or `None` if `buf` does not hold a whole record of the
/// simple shape the fast paths take: string keys (new, memoized or fetched
/// from the memo), scalar or string values, and — only given `lists` — list
/// values: fetched from the memo, new and empty, or a traceback (`MARK` …
/// `APPENDS`) that the hook lowers to a handle.
fn scan_record<'b: 'x, 'm: 'x, 'x>(
    buf: &'b [u8],
    mut i: usize,
    memo: &'m Memo,
    mut lists: Option<&mut RecordLists<'_>>,
    items: &mut Slots<Item<'x>, MAX_RECORD_ITEMS>,
    puts: &mut Vec<Put>,
) -> Option<usize> {
    loop {
        let code = *buf.get(i)?;
        i += 1;
        if code == op::SETITEMS {
            if items.len == 0 {
                return None;
            }
            return Some(i);
        }
        let key = items.len % 2 == 0;
        let item = match code {
            op::BINGET | op::LONG_BINGET => {
                match memo.get(opcodes::memo_index(code, buf, &mut i)?)? {
                    Got::Str(s, id) => Item::MemoStr(s, id),
                    Got::Handle(_) if key => return None,
                    Got::Handle(h) => Item::Handle(h),
                    Got::EmptyList if lists.is_some() && !key => Item::EmptyList,
                    Got::EmptyList => return None,
                    Got::Value(v) => match v {
                        Value::Str(s) => Item::Str(s),
                        _ if key => return None,
                        Value::Int(v) => Item::Int(*v),
                        Value::Handle(h) => Item::Handle(*h),
                        Value::Float(f) => Item::Float(*f),
                        Value::Bool(b) => Item::Bool(*b),
                        Value::None => Item::None,
                        Value::List(l) if lists.is_some() => Item::List(l),
                        _ => return None,
                    },
                }
            }
            op::SHORT_BINUNICODE => {
                let at = i + 1;
                let bytes = opcodes::short_str(buf, &mut i)?;
                if buf.get(i) == Some(&op::MEMOIZE) {
                    i += 1;
                    // A string put before (a frame's file and function,
                    // spelled out again for each frame of a
                    // `_profile_to_snapshot` traceback) is the memo's own:
                    // no UTF-8 check, and its put needs no lookup.
                    if let Some((id, s)) = memo.str_id(bytes) {
                        puts.push(Put::StrId(id));
                        Item::MemoStr(s, id)
                    } else {
                        let s = std::str::from_utf8(bytes).ok()?;
                        puts.push(Put::Str { at, len: s.len() });
                        Item::Str(s)
                    }
                } else {
                    Item::Str(std::str::from_utf8(bytes).ok()?)
                }
            }
            _ if key => return None,
            op::EMPTY_LIST => lists.as_deref_mut()?.list(buf, &mut i, memo, puts)?,
            _ => opcodes::scalar(code, buf, &mut i)?.into(),
        };
        items.push(item)?;
    }
}

/// The first key of the record at the start of `buf`, when it is a string
/// spelled out or fetched from the memo.
fn first_key<'b: 'x, 'm: 'x, 'x>(buf: &'b [u8], memo: &'m Memo) -> Option<&'x str> {
    let mut i = 1;
    match *buf.first()? {
        op::SHORT_BINUNICODE => std::str::from_utf8(opcodes::short_str(buf, &mut i)?).ok(),
        code @ (op::BINGET | op::LONG_BINGET) => {
            memo.get(opcodes::memo_index(code, buf, &mut i)?)?.str()
        }
        _ => None,
    }
}

/// Makes the memo puts `puts` (scanned from `buf`) from slot `first` on
/// (the caller checked there is room). A record's lowered lists were never
/// built, so there is nothing to restore for them (but see
/// [`Parser::restore_lowered`] for the last list lowered before).
fn put_all(
    memo: &mut Memo,
    first: u32,
    buf: &[u8],
    puts: &[Put],
    max_memo: usize,
) -> Result<(), String> {
    for (j, p) in puts.iter().enumerate() {
        let idx = first + j as u32;
        match *p {
            Put::Str { at, len } => memo.put_str(idx, &buf[at..at + len], max_memo)?,
            Put::StrId(id) => memo.put_str_id(idx, id, max_memo)?,
            Put::Handle(h) => memo.put_handle(idx, h, max_memo)?,
            Put::EmptyList => memo.put_empty_list(idx, max_memo)?,
        }
    }
    Ok(())
}

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
