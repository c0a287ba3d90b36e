//! Tracebacks lowered straight from the bytes: a traceback that
//! `pickle.dump` writes as `EMPTY_LIST MEMOIZE MARK`, memo gets of shared
//! frame dicts, `APPENDS` becomes the hook's handle for it with one look at
//! the gets' bytes, or none at all when the read-ahead thread found the run
//! ([`GetRunFinder`]) and the same run was answered before.

use std::io::BufRead;
use std::rc::Rc;

use rustc_hash::FxHashMap;

use super::super::fast_state::TracebackLists;
pub(crate) use super::super::fast_state::{GetRun, GetRunHints};
use super::super::machine::{PResult, Parser, NO_MEMO};
use super::super::memo::Memo;
use super::super::opcodes::{self, op};
use super::super::{Handle, Hook, Value};
use super::{put_all, scan_record, Put, Slots};

impl TracebackLists {
    /// Answers that take the runs `hints` finds ahead, if any.
    pub(in crate::formats::pickle) fn new(hints: Option<Rc<GetRunHints>>) -> Self {
        TracebackLists {
            hints,
            ..TracebackLists::default()
        }
    }

    /// Past this many distinct lists, or bytes of them (a file whose
    /// tracebacks never repeat), the answers by bytes start over rather
    /// than grow with the file.
    const MAX_LISTS: usize = 1 << 16;
    const MAX_KEY_BYTES: usize = 16 << 20;

    /// Slots from this one on are not watched one by one: a change to any
    /// of them drops the answers (the bitset stays within 2 MiB).
    const MAX_WATCHED: u32 = 1 << 24;

    /// Drops the answers if a memo slot they were fetched from changed
    /// since they were made.
    pub(super) fn sync(&mut self, memo: &mut Memo) {
        if memo.changed_handles.is_empty() {
            return;
        }
        let stale = memo.changed_handles.iter().any(|&i| self.watches(i));
        memo.changed_handles.clear();
        if stale {
            self.forget_bytes();
            self.generation += 1;
            self.watched.clear();
        }
    }

    fn watches(&self, slot: u32) -> bool {
        if slot >= Self::MAX_WATCHED {
            return true;
        }
        let word = self.watched.get(slot as usize / 64).copied().unwrap_or(0);
        word & (1 << (slot % 64)) != 0
    }

    fn watch(&mut self, slot: u32) {
        if slot >= Self::MAX_WATCHED {
            return;
        }
        let word = slot as usize / 64;
        if self.watched.len() <= word {
            self.watched.resize(word + 1, 0);
        }
        self.watched[word] |= 1 << (slot % 64);
    }

    fn forget_bytes(&mut self) {
        self.by_bytes.clear();
        self.key_bytes = 0;
    }

    /// Lowers the traceback at `buf[first..]` up to its `APPENDS` (`at` is
    /// the offset of `buf[0]` in the stream): memo gets of frame handles,
    /// or — if `inline_ok` — frame dicts spelled out inline
    /// ([`TracebackLists::lower_inline`], whose memo puts are added to
    /// `puts`). The index of the `APPENDS` and the hook's handle, or `None`
    /// if they are no such run, a memo slot holds no handle, or the hook
    /// does not lower them (`puts` is then as it was).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(super) fn lower(
        &mut self,
        buf: &[u8],
        first: usize,
        at: u64,
        memo: &Memo,
        hook: &mut dyn Hook,
        puts: &mut Vec<Put>,
        inline_ok: bool,
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
        let Some(end) = gets_end(buf, first) else {
            if !inline_ok {
                return None;
            }
            let mark = puts.len();
            let lowered = self.lower_inline(buf, first, memo, hook, puts);
            if lowered.is_none() {
                puts.truncate(mark);
            }
            return lowered;
        };
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

    /// Lowers a traceback whose frames are spelled out inline — `EMPTY_DICT
    /// [MEMOIZE] MARK`, a record of scalars and strings (see
    /// [`scan_record`]), `SETITEMS`, for each frame, or a memo get of a
    /// frame handle, then `APPENDS` — as the
    /// opcodes would: each frame by [`super::Records::on_frame`] (standing for
    /// [`Hook::on_list_dict`]) and the list by [`Hook::on_list_items`]. The
    /// memo puts (each frame's dict as its handle, and its strings) are
    /// added to `puts`. (How `_profile_to_snapshot` writes an allocation's
    /// traceback, a new dict per frame and occurrence.) On `None` the frames
    /// lowered before the one declined stay lowered: the opcodes lower them
    /// again, to equal frames.
    fn lower_inline(
        &mut self,
        buf: &[u8],
        first: usize,
        memo: &Memo,
        hook: &mut dyn Hook,
        puts: &mut Vec<Put>,
    ) -> Option<(usize, Handle)> {
        self.handles.clear();
        let mut i = first;
        loop {
            match *buf.get(i)? {
                op::EMPTY_DICT => i += 1,
                // A frame fetched from the memo (one spelled out before).
                code @ (op::BINGET | op::LONG_BINGET) => {
                    i += 1;
                    let h = memo
                        .get(opcodes::memo_index(code, buf, &mut i)?)?
                        .handle()?;
                    self.handles.push(Value::Handle(h));
                    continue;
                }
                op::APPENDS if i > first => break,
                _ => return None,
            }
            let memoized = buf.get(i) == Some(&op::MEMOIZE);
            i += usize::from(memoized);
            if buf.get(i) != Some(&op::MARK) {
                return None;
            }
            let slot = puts.len();
            if memoized {
                puts.push(Put::Handle(Handle::SKIPPED));
            }
            let mut items = Slots::new();
            i = scan_record(buf, i + 1, memo, None, &mut items, puts)?;
            let h = hook.fast()?.on_frame(items.as_slice())?;
            if memoized {
                puts[slot] = Put::Handle(h);
            }
            self.handles.push(Value::Handle(h));
        }
        match hook.on_list_items(&self.handles) {
            Ok(Some(Value::Handle(h))) => Some((i, h)),
            _ => None,
        }
    }

    /// Fetches the handles of `gets` (only `BINGET`/`LONG_BINGET`s, as
    /// [`gets_end`] found them) from the memo and offers them to the hook.
    fn resolve(&mut self, gets: &[u8], memo: &Memo, hook: &mut dyn Hook) -> Option<Handle> {
        self.handles.clear();
        let mut j = 0;
        while let Some(&code) = gets.get(j) {
            j += 1;
            let slot = opcodes::memo_index(code, gets, &mut j)?;
            let h = memo.get(slot)?.handle()?;
            self.watch(slot);
            self.handles.push(Value::Handle(h));
        }
        match hook.on_list_items(&self.handles) {
            Ok(Some(Value::Handle(h))) => Some(h),
            _ => None,
        }
    }
}

/// The index of the `APPENDS` ending the run of memo gets (at least one)
/// that starts at `buf[first]`, or `None` if the bytes there are not one.
#[inline(always)]
fn gets_end(buf: &[u8], first: usize) -> Option<usize> {
    let mut i = first;
    loop {
        let code = *buf.get(i)?;
        match opcodes::memo_get_len(code) {
            Some(len) => i += len,
            None if code == op::APPENDS && i > first => return Some(i),
            None => return None,
        }
    }
}

/// Finds [`GetRun`]s in a pickle's bytes, chunk by chunk, on a thread of
/// its own while the parser works (see `input::read_trace_ahead`): with
/// the run's id the parser takes the answer for a repeated traceback
/// without reading its bytes. Whether a run really is a traceback is for
/// the parser to see: a run found inside a string or a number is a hint
/// for an offset the parser never asks about.
pub(crate) struct GetRunFinder {
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
    pub(crate) fn find(&mut self, chunk: &[u8]) -> Vec<GetRun> {
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

impl GetRunHints {
    pub(crate) fn add(&self, runs: Vec<GetRun>) {
        self.runs.borrow_mut().extend(runs);
    }

    /// How many runs the parser has asked for and found.
    #[cfg(test)]
    pub(crate) fn taken(&self) -> u64 {
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

impl<R: BufRead + ?Sized> Parser<'_, R> {
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
    pub(super) fn handle_run(&mut self) -> PResult<bool> {
        let list = match self.stack.last() {
            Some(Value::List(l)) if self.stack.len() > self.floor() => l,
            _ => return Ok(false),
        };
        if !list.borrow().is_empty() {
            return Ok(false);
        }
        let list = Rc::clone(list);
        self.tracebacks.sync(&mut self.memo);
        // Frames' MARKs are one deeper; their memo puts fill new slots.
        let inline_ok = self.marks.len() + 1 < self.limits.max_depth && self.memo_in_order();
        self.scratch.puts.clear();
        let Some((end, h)) = self.tracebacks.lower(
            self.win.rest(),
            0,
            self.win.at(),
            &self.memo,
            &mut *self.hook,
            &mut self.scratch.puts,
            inline_ok,
        ) else {
            return Ok(false);
        };
        if !self.scratch.puts.is_empty() {
            let count = self.memo.count;
            let puts = self.scratch.puts.len();
            if count + puts > self.limits.max_memo || count + puts > NO_MEMO as usize {
                return Ok(false);
            }
            let put = put_all(
                &mut self.memo,
                count as u32,
                self.win.rest(),
                &self.scratch.puts,
                self.limits.max_memo,
            );
            if let Err(m) = put {
                // Unreachable: the room was checked above.
                return self.err(m);
            }
        }
        self.lowered(&list, self.stack.len() - 1, Value::Handle(h));
        self.win.pos += end + 1;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn answers_are_dropped_only_when_a_slot_they_came_from_changes() {
        let max = usize::MAX;
        let mut memo = Memo::default();
        for slot in 0..3 {
            let frame = Handle::frame(slot as usize).unwrap();
            memo.put(slot, Value::Handle(frame), max).unwrap();
        }
        let mut lists = TracebackLists::default();
        // An answer made from slot 0 (what `resolve` watches).
        lists.watch(0);
        lists
            .by_bytes
            .insert(vec![op::BINGET, 0].into(), Handle::site(7));
        // A handle in another slot changes (a lowered list put back).
        memo.put(1, Value::Int(1), max).unwrap();
        lists.sync(&mut memo);
        assert_eq!(lists.by_bytes.len(), 1, "slot 1 was not fetched");
        assert!(memo.changed_handles.is_empty(), "taken");
        memo.put(0, Value::Int(1), max).unwrap();
        lists.sync(&mut memo);
        assert!(lists.by_bytes.is_empty(), "slot 0 changed");
        assert!(!lists.watches(0), "nothing is cached from slot 0 now");
        // Past the bound on changes noted, any slot counts as changed.
        lists.watch(2);
        lists
            .by_bytes
            .insert(vec![op::BINGET, 2].into(), Handle::site(8));
        // (The first put replaces an int: not noted.)
        for _ in 0..(1 << 16) + 2 {
            memo.put(1, Value::Handle(Handle::SKIPPED), max).unwrap();
        }
        lists.sync(&mut memo);
        assert!(lists.by_bytes.is_empty(), "too many changes to tell");
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
}
