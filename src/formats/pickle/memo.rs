//! The memo: dense indices (what `pickle.dump` writes, counting up from 0)
//! in a `Vec`, sparse ones (a crafted file's) in a `HashMap`, so a hostile
//! index never allocates up to itself.

use std::collections::HashMap;
use std::rc::Rc;

use super::value::{DictRc, ListRc};
use super::Value;

/// The memo: values stored by `BINPUT`/`LONG_BINPUT`/`MEMOIZE` for later gets.
#[derive(Default)]
pub(super) struct Memo {
    pub(super) dense: Vec<Option<Value>>,
    pub(super) sparse: HashMap<u32, Value>,
    /// Slots filled (what the next `MEMOIZE` stores to).
    pub(super) count: usize,
    /// Bumped whenever a slot that held a [`Value::Handle`] is overwritten
    /// (never, in a pickle that `pickle.dump` wrote): answers cached by the
    /// bytes of memo gets ([`TracebackLists`]) hold only while it is unchanged.
    pub(super) handles_changed: u64,
}

impl Memo {
    pub(super) fn get(&self, idx: u32) -> Option<&Value> {
        match self.dense.get(idx as usize) {
            Some(Some(v)) => Some(v),
            _ if self.sparse.is_empty() => None,
            _ => self.sparse.get(&idx),
        }
    }

    /// Stores `v` at `idx`, returning the value it replaced.
    pub(super) fn put(
        &mut self,
        idx: u32,
        v: Value,
        max_memo: usize,
    ) -> Result<Option<Value>, String> {
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
    pub(super) fn replace_list(&mut self, idx: u32, l: &ListRc, new: Value) -> Option<Value> {
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
    pub(super) fn replace_if(&mut self, idx: u32, old: &Value, new: Value) {
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
    pub(super) fn replace_dict(&mut self, idx: u32, d: &DictRc, new: Value) -> Option<Value> {
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
