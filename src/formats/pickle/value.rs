//! The values the unpickler builds: [`Value`] (Python's data types, shared
//! through `Rc` as the pickle's memo shares them) and [`Handle`], what the
//! snapshot lowering puts in place of a container it has made a compact
//! record of.

use std::cell::{Ref, RefCell};
use std::rc::Rc;

/// The shared dict inside [`Value::Dict`].
pub(super) type DictRc = Rc<RefCell<Vec<(Value, Value)>>>;
/// The shared list inside [`Value::List`].
pub(super) type ListRc = Rc<RefCell<Vec<Value>>>;

/// A decoded pickle value. Cloning is cheap (`Rc` clones for containers and strings).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
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
    /// What the caller's hook put in place of a container (see [`Hook`](super::Hook)).
    Handle(Handle),
}

/// What a [`Hook`](super::Hook) put in place of a container: one of the compact records
/// the snapshot lowering (`formats::snapshot`) makes, by kind and index.
/// The unpickler only stores, copies and compares handles. The kind is an
/// `enum` beside the index, never bits of it, so no index can pass for
/// another kind; the constructors check that an index fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Handle(Lowered);

/// The kinds of [`Handle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Lowered {
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
    /// A list's run of consecutive trace entries (its items' event
    /// handles, in order): its index among the lowering's event runs.
    Events(u32),
    /// A block of a segment: its index among the lowered blocks.
    Block(u32),
    /// A list's run of consecutive blocks: its index among the block runs.
    Blocks(u32),
    /// A segment at dump time: its index among the lowered segments.
    Segment(u32),
}

impl Handle {
    pub(crate) const SKIPPED: Handle = Handle(Lowered::Skipped);

    pub(crate) fn event(index: usize) -> Result<Handle, String> {
        Ok(Handle(Lowered::Event(fits(index, "trace entries")?)))
    }

    pub(crate) fn marker(event: Handle) -> Option<Handle> {
        match event.0 {
            Lowered::Event(i) => Some(Handle(Lowered::Marker(i))),
            _ => None,
        }
    }

    pub(crate) fn frame(index: usize) -> Result<Handle, String> {
        Ok(Handle(Lowered::Frame(fits(index, "distinct frames")?)))
    }

    pub(crate) fn site(site: u32) -> Handle {
        Handle(Lowered::Site(site))
    }

    pub(crate) fn events(run: usize) -> Result<Handle, String> {
        Ok(Handle(Lowered::Events(fits(run, "runs of trace entries")?)))
    }

    pub(crate) fn block(index: usize) -> Result<Handle, String> {
        Ok(Handle(Lowered::Block(fits(index, "blocks")?)))
    }

    pub(crate) fn blocks(run: usize) -> Result<Handle, String> {
        Ok(Handle(Lowered::Blocks(fits(run, "runs of blocks")?)))
    }

    pub(crate) fn segment(index: usize) -> Result<Handle, String> {
        Ok(Handle(Lowered::Segment(fits(index, "segments")?)))
    }

    pub(crate) fn lowered(self) -> Lowered {
        self.0
    }
}

/// `index` as a `u32`, or an error naming the `what` that overflowed.
fn fits(index: usize, what: &str) -> Result<u32, String> {
    u32::try_from(index).map_err(|_| format!("more than 2^32 {what}"))
}

/// The value of `key` among a dict's pairs: the last pair wins if a key
/// repeats (as [`Value::get`] reads a dict).
pub(crate) fn dict_value<'a>(pairs: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    pairs
        .iter()
        .rev()
        .find(|(k, _)| matches!(k, Value::Str(s) if &***s == key))
        .map(|(_, v)| v)
}

impl Value {
    /// Dict lookup by string key (the last pair wins if a key repeats). `None`
    /// if `self` is not a dict or the key is missing.
    pub(crate) fn get(&self, key: &str) -> Option<Value> {
        match self {
            Value::Dict(d) => dict_value(&d.borrow(), key).cloned(),
            _ => None,
        }
    }

    /// `Int`, `Bool` (0/1) or a `BigInt` in i64 range.
    pub(crate) fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i64),
            Value::BigInt(b) => i64::try_from(**b).ok(),
            _ => None,
        }
    }

    /// A non-negative `Int` or a `BigInt` in u64 range.
    pub(crate) fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int(i) => u64::try_from(*i).ok(),
            Value::BigInt(b) => u64::try_from(**b).ok(),
            _ => None,
        }
    }

    /// `Float`, `Int` or `BigInt` (rounded).
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            Value::BigInt(b) => Some(**b as f64),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub(crate) fn list_items(&self) -> Option<Ref<'_, Vec<Value>>> {
        match self {
            Value::List(l) => Some(l.borrow()),
            _ => None,
        }
    }

    #[cfg(test)]
    pub(crate) fn tuple_items(&self) -> Option<&[Value]> {
        match self {
            Value::Tuple(t) => Some(t),
            _ => None,
        }
    }

    #[cfg(test)]
    pub(crate) fn dict_items(&self) -> Option<Ref<'_, Vec<(Value, Value)>>> {
        match self {
            Value::Dict(d) => Some(d.borrow()),
            _ => None,
        }
    }

    /// Identity of a shared container (its `Rc` address), so callers can intern
    /// a memoized list once. `None` for scalars and strings.
    pub(crate) fn identity(&self) -> Option<usize> {
        match self {
            Value::List(l) => Some(Rc::as_ptr(l) as *const u8 as usize),
            Value::Dict(d) => Some(Rc::as_ptr(d) as *const u8 as usize),
            Value::Tuple(t) => Some(Rc::as_ptr(t) as *const u8 as usize),
            _ => None,
        }
    }

    /// Python-ish type name for error messages.
    pub(crate) fn type_name(&self) -> &'static str {
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

    pub(super) fn is_container(&self) -> bool {
        matches!(self, Value::List(_) | Value::Tuple(_) | Value::Dict(_))
    }

    /// Strong count of the container's `Rc` (1 for scalars).
    pub(super) fn share_count(&self) -> usize {
        match self {
            Value::List(l) => Rc::strong_count(l),
            Value::Dict(d) => Rc::strong_count(d),
            Value::Tuple(t) => Rc::strong_count(t),
            _ => 1,
        }
    }
}
