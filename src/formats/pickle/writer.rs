//! A small pickle *writer* for tests and fuzz targets: it writes a [`Py`]
//! value with the protocol 2–5 opcodes CPython's pickler emits for data —
//! every string and container memoized (`MEMOIZE` from protocol 4, else
//! `BINPUT`/`LONG_BINPUT`), a shared object fetched again with
//! `BINGET`/`LONG_BINGET`, items in batches of 1000 (`APPENDS`/`SETITEMS`,
//! or `APPEND`/`SETITEM` for one), a `FRAME` from protocol 4 — so that what
//! it writes takes the unpickler's fast paths as a real snapshot does.

use std::collections::HashMap;
use std::rc::Rc;

use super::opcodes::op;

/// A Python value to pickle.
#[derive(Debug, Clone)]
pub(crate) enum Py {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    List(Vec<Py>),
    Tuple(Vec<Py>),
    /// Pairs in order (a repeated key is written twice, as no CPython dict
    /// would be, but a crafted file may).
    Dict(Vec<(Py, Py)>),
    /// One object wherever it appears: written once and memoized, then
    /// fetched from the memo (frames shared by tracebacks, a frames list
    /// shared by a free and its alloc).
    Shared(Rc<Py>),
}

impl Py {
    pub(crate) fn str(s: &str) -> Py {
        Py::Str(s.to_owned())
    }

    /// A dict of string keys.
    pub(crate) fn dict<'a>(pairs: impl IntoIterator<Item = (&'a str, Py)>) -> Py {
        Py::Dict(pairs.into_iter().map(|(k, v)| (Py::str(k), v)).collect())
    }

    pub(crate) fn shared(self) -> Py {
        Py::Shared(Rc::new(self))
    }
}

/// Pickles `value` with `protocol` (2 to 5).
pub(crate) fn dumps(value: &Py, protocol: u8) -> Vec<u8> {
    dumps_as(value, protocol, true)
}

/// [`dumps`] with every string spelled out and memoized wherever it
/// appears: equal strings that are distinct objects, as pickle writes a
/// `_profile_to_snapshot` traceback's file and function names (only a
/// [`Py::Shared`] string is written once).
#[cfg(test)]
pub(crate) fn dumps_spelled(value: &Py, protocol: u8) -> Vec<u8> {
    dumps_as(value, protocol, false)
}

fn dumps_as(value: &Py, protocol: u8, one_string_object: bool) -> Vec<u8> {
    assert!((2..=5).contains(&protocol), "protocol {protocol}");
    let mut w = Writer {
        out: Vec::new(),
        protocol,
        next_memo: 0,
        one_string_object,
        strings: HashMap::new(),
        shared: HashMap::new(),
    };
    w.value(value);
    w.out.push(op::STOP);
    let mut pickle = vec![op::PROTO, protocol];
    if protocol >= 4 {
        pickle.push(op::FRAME);
        pickle.extend_from_slice(&(w.out.len() as u64).to_le_bytes());
    }
    pickle.extend_from_slice(&w.out);
    pickle
}

struct Writer {
    out: Vec<u8>,
    protocol: u8,
    next_memo: u32,
    /// Whether equal strings are one object (fetched from the memo after
    /// the first), as the interned keys of a real snapshot are.
    one_string_object: bool,
    /// Memo slots of the strings written (the last, for each string).
    strings: HashMap<String, u32>,
    /// Memo slots of the shared objects written, by address.
    shared: HashMap<*const Py, u32>,
}

/// Items per `APPENDS`/`SETITEMS`, as CPython batches them.
const BATCH: usize = 1000;

impl Writer {
    fn value(&mut self, v: &Py) {
        match v {
            Py::None => self.out.push(op::NONE),
            Py::Bool(b) => self.out.push(if *b { op::NEWTRUE } else { op::NEWFALSE }),
            Py::Int(i) => self.int(*i),
            Py::Float(f) => {
                self.out.push(op::BINFLOAT);
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            Py::Str(s) => self.string(s),
            Py::List(items) => {
                self.out.push(op::EMPTY_LIST);
                self.memoize();
                self.batches(items.iter().map(|x| [x]), op::APPEND, op::APPENDS);
            }
            Py::Dict(pairs) => {
                self.out.push(op::EMPTY_DICT);
                self.memoize();
                self.batches(pairs.iter().map(|(k, v)| [k, v]), op::SETITEM, op::SETITEMS);
            }
            Py::Tuple(items) => {
                match items.len() {
                    0 => self.out.push(op::EMPTY_TUPLE),
                    n @ 1..=3 => {
                        items.iter().for_each(|x| self.value(x));
                        self.out.push(op::TUPLE1 + n as u8 - 1);
                    }
                    _ => {
                        self.out.push(op::MARK);
                        items.iter().for_each(|x| self.value(x));
                        self.out.push(op::TUPLE);
                    }
                }
                if !items.is_empty() {
                    self.memoize();
                }
            }
            Py::Shared(rc) => match self.shared.get(&Rc::as_ptr(rc)) {
                Some(&slot) => self.get(slot),
                None => {
                    // Where `value` memoized it: a list or a dict before its
                    // items, a tuple after them, a string once for all its
                    // copies; anything else gets a slot of its own.
                    let before = self.next_memo;
                    self.value(rc);
                    let slot = match &**rc {
                        Py::List(_) | Py::Dict(_) => before,
                        Py::Tuple(items) if !items.is_empty() => self.next_memo - 1,
                        Py::Str(s) => self.strings[s],
                        _ => self.memoize(),
                    };
                    self.shared.insert(Rc::as_ptr(rc), slot);
                }
            },
        }
    }

    /// Writes items (one or two values each) in batches: `one` after a
    /// single item, `MARK` … `many` around more.
    fn batches<'a, const N: usize>(
        &mut self,
        items: impl ExactSizeIterator<Item = [&'a Py; N]>,
        one: u8,
        many: u8,
    ) {
        let items: Vec<[&Py; N]> = items.collect();
        for chunk in items.chunks(BATCH) {
            if chunk.len() > 1 {
                self.out.push(op::MARK);
            }
            for item in chunk {
                item.iter().for_each(|x| self.value(x));
            }
            self.out.push(if chunk.len() > 1 { many } else { one });
        }
    }

    fn int(&mut self, i: i128) {
        match i {
            0..=0xff => self.out.extend_from_slice(&[op::BININT1, i as u8]),
            0x100..=0xffff => {
                self.out.push(op::BININT2);
                self.out.extend_from_slice(&(i as u16).to_le_bytes());
            }
            _ if i32::try_from(i).is_ok() => {
                self.out.push(op::BININT);
                self.out.extend_from_slice(&(i as i32).to_le_bytes());
            }
            _ => {
                // Two's complement, little-endian, as short as keeps the sign.
                let bytes = i.to_le_bytes();
                let mut n = 16;
                while n > 1 && {
                    let top = bytes[n - 1];
                    let sign = bytes[n - 2] & 0x80;
                    (top == 0 && sign == 0) || (top == 0xff && sign != 0)
                } {
                    n -= 1;
                }
                self.out.extend_from_slice(&[op::LONG1, n as u8]);
                self.out.extend_from_slice(&bytes[..n]);
            }
        }
    }

    fn string(&mut self, s: &str) {
        if let Some(&slot) = self.strings.get(s).filter(|_| self.one_string_object) {
            return self.get(slot);
        }
        let len = s.len();
        if self.protocol >= 4 && len < 256 {
            self.out
                .extend_from_slice(&[op::SHORT_BINUNICODE, len as u8]);
        } else {
            self.out.push(op::BINUNICODE);
            self.out.extend_from_slice(&(len as u32).to_le_bytes());
        }
        self.out.extend_from_slice(s.as_bytes());
        let slot = self.memoize();
        self.strings.insert(s.to_owned(), slot);
    }

    /// Memoizes the value just written; its slot.
    fn memoize(&mut self) -> u32 {
        let slot = self.next_memo;
        self.next_memo += 1;
        match (self.protocol, slot) {
            (4.., _) => self.out.push(op::MEMOIZE),
            (_, 0..=0xff) => self.out.extend_from_slice(&[op::BINPUT, slot as u8]),
            _ => {
                self.out.push(op::LONG_BINPUT);
                self.out.extend_from_slice(&slot.to_le_bytes());
            }
        }
        slot
    }

    fn get(&mut self, slot: u32) {
        match u8::try_from(slot) {
            Ok(s) => self.out.extend_from_slice(&[op::BINGET, s]),
            Err(_) => {
                self.out.push(op::LONG_BINGET);
                self.out.extend_from_slice(&slot.to_le_bytes());
            }
        }
    }
}
