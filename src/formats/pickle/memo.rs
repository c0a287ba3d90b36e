//! The memo: dense indices (what `pickle.dump` writes, counting up from 0)
//! in a `Vec`, sparse ones (a crafted file's) in a `HashMap`, so a hostile
//! index never allocates up to itself.
//!
//! A snapshot's memo holds millions of slots (10M in a 248 MB
//! `_profile_to_snapshot` file: a dict and a string per frame of every
//! traceback), nearly all of them handles and strings. So a slot is a
//! [`Slot`] of 8 bytes — a handle in place, anything else by its index in
//! a table — rather than a 16-byte [`Value`]; and the strings the fast
//! paths put are shared by content (a frame's name spelled out in each
//! traceback, `compile_context: 'N/A'` in each entry): one table entry
//! each. The memo's values are the same either way (strings compare by
//! content, and nothing takes a string's identity).
//! `/usr/bin/time memcut analyze snap-profile.pickle -f json -o /dev/null`
//! (`scripts/bench_inputs.sh`'s 248 MB `_profile_to_snapshot` input):
//! peak RSS 229 MB with 16-byte slots, 152 MB with these.
//!
//! A new empty list that a fast path memoized (`frames: []` in a trace
//! entry) is a [`Slot::EmptyList`], no list at all: nothing but the memo
//! can refer to it until a memo get fetches it, and the plain interpreter's
//! first get makes the list then ([`Memo::list_for_get`]) and keeps it in
//! the slot, so every later get shares it, as in Python. On
//! `snap-unshared.pickle` (`scripts/bench_inputs.sh`: 96 MB, 466K entries
//! with `frames: []`), `/usr/bin/time -f %M memcut analyze FILE -f json
//! -o /dev/null`, medians of 5: peak RSS 213 → 160 MB (each such list was
//! a list, a value slot and the site handle the lowering left in it).

use std::collections::HashMap;
use std::rc::Rc;

use rustc_hash::FxHashMap;

use super::value::{DictRc, ListRc};
use super::{Handle, Value};

/// What a memo slot holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Slot {
    Empty,
    Handle(Handle),
    /// A string of [`Memo::strs`] (shared by the slots the fast paths fill
    /// with equal strings).
    Str(u32),
    /// A value of [`Memo::values`] (this slot's alone).
    Value(u32),
    /// A new empty list that nothing but this slot refers to (made by a
    /// fast path's put); the list is made when a get fetches it.
    EmptyList,
}

const _: () = assert!(std::mem::size_of::<Slot>() == 8);

/// A value fetched from the memo: a handle (slots hold them in place), or
/// a reference to the value.
pub(super) enum Got<'a> {
    Handle(Handle),
    /// One of the memo's strings ([`Slot::Str`]) and its index in them.
    Str(&'a Rc<Box<str>>, u32),
    Value(&'a Value),
    /// A [`Slot::EmptyList`]: an empty list nothing else refers to.
    EmptyList,
}

impl Got<'_> {
    /// The handle fetched, if it is one.
    pub(super) fn handle(&self) -> Option<Handle> {
        match *self {
            Got::Handle(h) | Got::Value(&Value::Handle(h)) => Some(h),
            Got::Str(..) | Got::Value(_) | Got::EmptyList => None,
        }
    }
}

impl<'a> Got<'a> {
    /// The string fetched, if it is one.
    pub(super) fn str(&self) -> Option<&'a str> {
        match *self {
            Got::Str(s, _) | Got::Value(Value::Str(s)) => Some(s),
            Got::Handle(_) | Got::Value(_) | Got::EmptyList => None,
        }
    }
}

/// The memo: values stored by `BINPUT`/`LONG_BINPUT`/`MEMOIZE` for later gets.
#[derive(Default)]
pub(super) struct Memo {
    pub(super) dense: Vec<Slot>,
    pub(super) sparse: HashMap<u32, Slot>,
    /// The values of [`Slot::Value`]s; a freed entry is `Value::None` and
    /// its index in `free`.
    values: Vec<Value>,
    free: Vec<u32>,
    /// The strings of [`Slot::Str`]s.
    strs: Vec<Rc<Box<str>>>,
    /// Indices in `strs` by the string's bytes (bounded: see [`Memo::put_str`]).
    str_ids: FxHashMap<Box<[u8]>, u32>,
    str_id_bytes: usize,
    /// Slots filled (what the next `MEMOIZE` stores to).
    pub(super) count: usize,
    /// The slots that held a [`Value::Handle`] and were overwritten since
    /// the last [`TracebackLists::sync`](super::fast_state::TracebackLists::sync)
    /// took them: answers cached by the bytes of memo gets hold only while
    /// the slots they were fetched from are unchanged. (`pickle.dump` never
    /// reuses a slot; what lands here in its files is a lowered list put
    /// back by [`Parser::restore_lowered`](super::machine::Parser::restore_lowered),
    /// a slot no traceback fetches.)
    pub(super) changed_handles: Vec<u32>,
}

impl Memo {
    /// Past this many strings, or bytes of them, the strings the fast paths
    /// put are looked up anew (those put before stay shared), so the
    /// lookup's memory stays bounded whatever the file.
    const MAX_STR_IDS: usize = 1 << 16;
    const MAX_STR_ID_BYTES: usize = 16 << 20;

    #[inline(always)]
    fn slot(&self, idx: u32) -> Option<Slot> {
        match self.dense.get(idx as usize) {
            Some(Slot::Empty) | None if self.sparse.is_empty() => None,
            Some(Slot::Empty) | None => self.sparse.get(&idx).copied(),
            Some(&slot) => Some(slot),
        }
    }

    #[inline(always)]
    pub(super) fn get(&self, idx: u32) -> Option<Got<'_>> {
        match self.dense.get(idx as usize) {
            Some(&Slot::Value(i)) => self.values.get(i as usize).map(Got::Value),
            Some(&Slot::Handle(h)) => Some(Got::Handle(h)),
            Some(&Slot::Str(i)) => self.strs.get(i as usize).map(|s| Got::Str(s, i)),
            Some(&Slot::EmptyList) => Some(Got::EmptyList),
            _ => self.get_sparse(idx),
        }
    }

    /// [`Memo::get`] of a slot not in `dense`.
    #[cold]
    fn get_sparse(&self, idx: u32) -> Option<Got<'_>> {
        match *self.sparse.get(&idx)? {
            Slot::Handle(h) => Some(Got::Handle(h)),
            Slot::Str(i) => self.strs.get(i as usize).map(|s| Got::Str(s, i)),
            Slot::Value(i) => self.values.get(i as usize).map(Got::Value),
            Slot::EmptyList => Some(Got::EmptyList),
            Slot::Empty => None,
        }
    }

    /// The list a memo get of the [`Slot::EmptyList`] at `idx` pushes:
    /// made now and kept in the slot, so that this get and every later one
    /// share it (whatever is appended to it through one is seen through
    /// the others). `None` if the slot holds anything else.
    pub(super) fn list_for_get(&mut self, idx: u32) -> Option<ListRc> {
        let list: ListRc = Rc::default();
        let slot = self.store(Value::List(Rc::clone(&list)));
        let held = match self.dense.get_mut(idx as usize) {
            Some(held @ Slot::EmptyList) => held,
            _ => match self.sparse.get_mut(&idx) {
                Some(held @ Slot::EmptyList) => held,
                _ => {
                    drop(self.release(slot));
                    return None;
                }
            },
        };
        *held = slot;
        Some(list)
    }

    /// The value at `idx`, as a `Value`.
    #[cfg(test)]
    pub(super) fn value(&self, idx: u32) -> Option<Value> {
        Some(match self.get(idx)? {
            Got::Handle(h) => Value::Handle(h),
            Got::Str(s, _) => Value::Str(Rc::clone(s)),
            Got::Value(v) => v.clone(),
            Got::EmptyList => Value::List(Rc::default()),
        })
    }

    /// Stores `v` at `idx`, returning the value it replaced.
    #[inline]
    pub(super) fn put(
        &mut self,
        idx: u32,
        v: Value,
        max_memo: usize,
    ) -> Result<Option<Value>, String> {
        let i = idx as usize;
        if i >= self.dense.len() && i >= max_memo {
            return Err(format!("memo index {idx} exceeds the limit of {max_memo}"));
        }
        let slot = self.store(v);
        self.put_slot(idx, slot, max_memo)
    }

    /// The index in the memo's strings of a string equal to `bytes` that a
    /// fast path put before (while the lookup holds it: see
    /// [`Memo::put_str`]), and the string: a scan takes it instead of
    /// checking the bytes as UTF-8 again.
    #[inline]
    pub(super) fn str_id(&self, bytes: &[u8]) -> Option<(u32, &str)> {
        let id = *self.str_ids.get(bytes)?;
        Some((id, self.strs.get(id as usize)?))
    }

    /// Stores the memo's string `id` ([`Memo::str_id`]) at `idx`.
    pub(super) fn put_str_id(&mut self, idx: u32, id: u32, max_memo: usize) -> Result<(), String> {
        if id as usize >= self.strs.len() {
            return Err("a string the fast path found is not in the memo".into());
        }
        self.put_in_place(idx, Slot::Str(id), max_memo)
    }

    /// Stores the string of the UTF-8 `bytes` at `idx` (a fast path's put
    /// of a string it decoded), shared with the equal strings put before.
    pub(super) fn put_str(
        &mut self,
        idx: u32,
        bytes: &[u8],
        max_memo: usize,
    ) -> Result<(), String> {
        let id = match self.str_ids.get(bytes) {
            Some(&id) => id,
            None => {
                let s = std::str::from_utf8(bytes)
                    .map_err(|_| "a string the fast path checked is not UTF-8")?;
                let id = u32::try_from(self.strs.len()).map_err(|_| "memo is full")?;
                self.strs.push(Rc::new(Box::from(s)));
                if self.str_ids.len() >= Self::MAX_STR_IDS
                    || self.str_id_bytes >= Self::MAX_STR_ID_BYTES
                {
                    self.str_ids.clear();
                    self.str_id_bytes = 0;
                }
                self.str_id_bytes += bytes.len();
                self.str_ids.insert(bytes.into(), id);
                id
            }
        };
        self.put_in_place(idx, Slot::Str(id), max_memo)
    }

    /// Stores the handle `h` at `idx` (a fast path's put).
    #[inline]
    pub(super) fn put_handle(
        &mut self,
        idx: u32,
        h: Handle,
        max_memo: usize,
    ) -> Result<(), String> {
        self.put_in_place(idx, Slot::Handle(h), max_memo)
    }

    /// Stores a new empty list at `idx` that nothing else refers to (a fast
    /// path's put of a list it never made): see [`Slot::EmptyList`].
    pub(super) fn put_empty_list(&mut self, idx: u32, max_memo: usize) -> Result<(), String> {
        self.put_in_place(idx, Slot::EmptyList, max_memo)
    }

    /// Stores `slot`, a value held in place (no entry of `values`), at `idx`.
    #[inline]
    fn put_in_place(&mut self, idx: u32, slot: Slot, max_memo: usize) -> Result<(), String> {
        let i = idx as usize;
        if i >= self.dense.len() && i >= max_memo {
            return Err(format!("memo index {idx} exceeds the limit of {max_memo}"));
        }
        self.put_slot(idx, slot, max_memo).map(drop)
    }

    /// `v` as a slot: a handle in place, anything else in `values`.
    #[inline]
    fn store(&mut self, v: Value) -> Slot {
        match v {
            Value::Handle(h) => Slot::Handle(h),
            v => match self.free.pop() {
                Some(i) => {
                    self.values[i as usize] = v;
                    Slot::Value(i)
                }
                None => {
                    // At most one value per slot: fewer than 2^32.
                    let i = self.values.len() as u32;
                    self.values.push(v);
                    Slot::Value(i)
                }
            },
        }
    }

    /// The value of a slot being replaced (its table entry freed).
    fn release(&mut self, old: Slot) -> Option<Value> {
        match old {
            Slot::Empty => None,
            Slot::Handle(h) => Some(Value::Handle(h)),
            Slot::Str(i) => Some(Value::Str(Rc::clone(&self.strs[i as usize]))),
            Slot::EmptyList => Some(Value::List(Rc::default())),
            Slot::Value(i) => {
                self.free.push(i);
                Some(std::mem::replace(&mut self.values[i as usize], Value::None))
            }
        }
    }

    #[inline]
    fn put_slot(&mut self, idx: u32, new: Slot, max_memo: usize) -> Result<Option<Value>, String> {
        let i = idx as usize;
        if i == self.dense.len() && self.sparse.is_empty() {
            // The next slot (what `MEMOIZE` and the fast paths fill).
            self.count_one(max_memo)?;
            self.dense.push(new);
            return Ok(None);
        }
        if i < self.dense.len() {
            let old = std::mem::replace(&mut self.dense[i], new);
            let old = match old {
                Slot::Empty if !self.sparse.is_empty() => {
                    self.sparse.remove(&idx).unwrap_or(Slot::Empty)
                }
                old => old,
            };
            self.counted(idx, old, max_memo)?;
            return Ok(self.release(old));
        }
        let len = self.dense.len();
        let old = if i <= len + len / 2 + 1024 {
            // Dense enough: grow the vector.
            let old = match self.sparse.is_empty() {
                true => None,
                false => self.sparse.remove(&idx),
            };
            self.dense.resize(i, Slot::Empty);
            self.dense.push(new);
            old.unwrap_or(Slot::Empty)
        } else {
            self.sparse.insert(idx, new).unwrap_or(Slot::Empty)
        };
        self.counted(idx, old, max_memo)?;
        Ok(self.release(old))
    }

    /// Accounts for a put to `idx` that replaced `old`: a new slot, or a changed one.
    fn counted(&mut self, idx: u32, old: Slot, max_memo: usize) -> Result<(), String> {
        match old {
            Slot::Empty => self.count_one(max_memo),
            Slot::Handle(_) => {
                self.note_changed(idx);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Notes that slot `idx`, which held a handle, changed. Bounded, for a
    /// file that overwrites handles and never reaches a traceback: past
    /// `MAX_CHANGED` the last entry stands for every slot (`u32::MAX`, a
    /// slot no answer is fetched from one by one).
    fn note_changed(&mut self, idx: u32) {
        const MAX_CHANGED: usize = 1 << 16;
        match self.changed_handles.len() < MAX_CHANGED {
            true => self.changed_handles.push(idx),
            false => self.changed_handles[MAX_CHANGED - 1] = u32::MAX,
        }
    }

    fn count_one(&mut self, max_memo: usize) -> Result<(), String> {
        if self.count >= max_memo {
            return Err(format!("memo holds more than {max_memo} entries"));
        }
        self.count += 1;
        Ok(())
    }

    /// Whether the value in `slot` passes `test`.
    fn holds(&self, slot: Slot, test: impl Fn(&Value) -> bool) -> bool {
        match slot {
            Slot::Empty => false,
            Slot::Handle(h) => test(&Value::Handle(h)),
            Slot::Str(i) => test(&Value::Str(Rc::clone(&self.strs[i as usize]))),
            Slot::Value(i) => test(&self.values[i as usize]),
            Slot::EmptyList => test(&Value::List(Rc::default())),
        }
    }

    /// Replaces slot `idx` with `new` if its value passes `test`; returns
    /// the old value.
    fn replace_where(
        &mut self,
        idx: u32,
        test: impl Fn(&Value) -> bool,
        new: Value,
    ) -> Option<Value> {
        let old = self.slot(idx)?;
        if !self.holds(old, test) {
            return None;
        }
        let new = self.store(new);
        match self.dense.get_mut(idx as usize) {
            Some(slot) if *slot != Slot::Empty => *slot = new,
            _ => {
                self.sparse.insert(idx, new);
            }
        }
        if let Slot::Handle(_) = old {
            self.note_changed(idx);
        }
        self.release(old)
    }

    /// Replaces slot `idx` with `new` if it still holds the list `l`; returns the old value.
    pub(super) fn replace_list(&mut self, idx: u32, l: &ListRc, new: Value) -> Option<Value> {
        self.replace_where(
            idx,
            |v| matches!(v, Value::List(x) if Rc::ptr_eq(x, l)),
            new,
        )
    }

    /// Replaces slot `idx` with `new` if it still holds a value equal to `old`.
    pub(super) fn replace_if(&mut self, idx: u32, old: &Value, new: Value) {
        drop(self.replace_where(idx, |v| v == old, new));
    }

    /// Replaces slot `idx` with `new` if it still holds the dict `d`; returns the old value.
    pub(super) fn replace_dict(&mut self, idx: u32, d: &DictRc, new: Value) -> Option<Value> {
        self.replace_where(
            idx,
            |v| matches!(v, Value::Dict(x) if Rc::ptr_eq(x, d)),
            new,
        )
    }

    /// Every value the memo holds apart from handles and strings (for the
    /// teardown), leaving it empty.
    pub(super) fn take_values(&mut self) -> Vec<Value> {
        self.dense.clear();
        self.sparse.clear();
        self.strs.clear();
        self.free.clear();
        std::mem::take(&mut self.values)
    }
}
