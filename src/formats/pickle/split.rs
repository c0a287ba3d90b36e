//! Where a snapshot's parse can be cut in two, and what the part after the
//! cut needs to know of the part before it (issue 35: the parse on both
//! cores). This is the first pass of that plan: a walk over the opcodes
//! that decodes nothing but what a second parser starting at the cut must
//! be given.
//!
//! A big snapshot is, past its first few percent, one `device_traces` list
//! filled by `MARK` … `APPENDS` batches of trace entries (Python batches
//! them by 1000). A second parser can start at one of those batch `MARK`s
//! with a stack that holds only the list, except for one thing: the memo.
//! Every `MEMOIZE` fills the next slot, so the part after the cut numbers
//! its slots from the count before it, and it fetches slots made before
//! it: on snap-cs336 (`scripts/bench_inputs.sh`), cut at 51.9%, 16.5 M
//! gets of 15,619 distinct earlier slots, all of them strings (an entry's
//! keys, a frame's file and function), frame dicts or tracebacks
//! (`scripts/snapshot_split_facts.py`). So the walk counts the `MEMOIZE`s
//! and keeps the strings memoized before the cut (their text: a second
//! parser reads them as the first would), and says of every other slot
//! only that it is not a string: what a frame dict or a traceback there
//! stands for is only known to the first parser, which the join asks.
//!
//! The walk is exact about the memo or gives no cut: a file that stores to
//! the memo by `BINPUT` (a slot of its own choosing; `pickle.dump` of
//! protocol 4 never does), an opcode it does not know, or no batch of trace
//! entries past the point asked for — no cut, and the parse stays on one
//! thread. It reads opcodes as the interpreter does (`opcodes.rs`'s widths);
//! it keeps no stack, so it is ~0.3 of the parse's time per byte.

use rustc_hash::FxHashMap;

use super::opcodes::op;

/// A cut of a pickle at a batch `MARK` of a list of trace entries.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cut {
    /// Offset of the batch's `MARK`: the second part starts there, the first
    /// part's last opcode is the `APPENDS` just before it.
    pub(crate) at: usize,
    /// What each memo slot filled before the cut holds, by slot (their number
    /// is the slot the part after the cut fills first).
    pub(crate) slots: Vec<Kept>,
    /// The distinct strings those slots hold ([`Kept::Str`]'s index), each
    /// decoded as the interpreter decodes it.
    pub(crate) strings: Vec<Box<str>>,
}

/// What the walk keeps of a memo slot before the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kept {
    /// A string: its index in [`Cut::strings`].
    Str(u32),
    /// Anything else (a dict, a list, a number, …).
    Other,
}

/// What the walk knows of the stack's top: whether it is a string, which
/// [`Kept::Str`] a `MEMOIZE` then stores.
#[derive(Clone, Copy)]
enum Top {
    Str(u32),
    Other,
}

/// The first batch `MARK` of a list of trace entries at or past `from`
/// (`MARK` right after an `APPENDS`, then `EMPTY_DICT [MEMOIZE] MARK` and the
/// key `action`, spelled out or fetched), with the memo as it stands there;
/// `None` when the walk cannot be exact or finds none (see the module's
/// notes).
pub(crate) fn find_cut(bytes: &[u8], from: usize) -> Option<Cut> {
    let mut slots: Vec<Kept> = Vec::new();
    let mut ids: FxHashMap<&[u8], u32> = FxHashMap::default();
    let mut texts: Vec<&[u8]> = Vec::new();
    let mut top = Top::Other;
    let mut last = 0u8;
    let mut i = 0usize;
    loop {
        let at = i;
        let code = *bytes.get(i)?;
        i += 1;
        let mut next_top = Top::Other;
        match code {
            op::MARK => {
                if at >= from && last == op::APPENDS && starts_entry(bytes, i, &slots, &texts) {
                    let strings = texts.iter().map(|b| decode(b)).collect();
                    return Some(Cut { at, slots, strings });
                }
            }
            op::MEMOIZE => {
                slots.push(match top {
                    Top::Str(id) => Kept::Str(id),
                    Top::Other => Kept::Other,
                });
                // The top is still what it was.
                next_top = top;
            }
            op::DUP => next_top = top,
            op::BINGET | op::LONG_BINGET => {
                let slot = if code == op::BINGET {
                    u32::from(*bytes.get(i)?)
                } else {
                    u32::from_le_bytes(bytes.get(i..i + 4)?.try_into().ok()?)
                };
                i += if code == op::BINGET { 1 } else { 4 };
                if let Some(Kept::Str(id)) = slots.get(slot as usize) {
                    next_top = Top::Str(*id);
                }
            }
            op::SHORT_BINUNICODE | op::BINUNICODE | op::BINUNICODE8 => {
                let width = match code {
                    op::SHORT_BINUNICODE => 1,
                    op::BINUNICODE => 4,
                    _ => 8,
                };
                let mut n = [0u8; 8];
                n[..width].copy_from_slice(bytes.get(i..i + width)?);
                let len = usize::try_from(u64::from_le_bytes(n)).ok()?;
                let text = bytes.get(i + width..(i + width).checked_add(len)?)?;
                i += width + len;
                let id = *ids.entry(text).or_insert_with(|| {
                    texts.push(text);
                    texts.len() as u32 - 1
                });
                next_top = Top::Str(id);
            }
            op::PROTO | op::BININT1 => i += 1,
            op::BININT2 => i += 2,
            op::BININT => i += 4,
            op::BINFLOAT | op::FRAME => i += 8,
            op::LONG1 => i += 1 + usize::from(*bytes.get(i)?),
            op::LONG4 => {
                let n = u32::from_le_bytes(bytes.get(i..i + 4)?.try_into().ok()?);
                i += 4 + usize::try_from(n).ok()?;
            }
            op::POP
            | op::POP_MARK
            | op::APPEND
            | op::APPENDS
            | op::DICT
            | op::LIST
            | op::TUPLE
            | op::TUPLE1
            | op::TUPLE2
            | op::TUPLE3
            | op::SETITEM
            | op::SETITEMS
            | op::EMPTY_DICT
            | op::EMPTY_LIST
            | op::EMPTY_TUPLE
            | op::NONE
            | op::NEWTRUE
            | op::NEWFALSE => {}
            // STOP before a cut, BINPUT (a slot the file chooses), and any
            // opcode the interpreter refuses or does not know: no cut.
            _ => return None,
        }
        top = next_top;
        last = code;
    }
}

/// Whether `bytes[i..]` (just past a `MARK`) starts a trace entry:
/// `EMPTY_DICT [MEMOIZE] MARK` and the key `action`, spelled out or fetched
/// from a slot that holds it.
fn starts_entry(bytes: &[u8], mut i: usize, slots: &[Kept], texts: &[&[u8]]) -> bool {
    if bytes.get(i) != Some(&op::EMPTY_DICT) {
        return false;
    }
    i += 1;
    if bytes.get(i) == Some(&op::MEMOIZE) {
        i += 1;
    }
    if bytes.get(i) != Some(&op::MARK) {
        return false;
    }
    i += 1;
    let key: Option<&[u8]> = match bytes.get(i) {
        Some(&op::SHORT_BINUNICODE) => {
            let len = bytes.get(i + 1).map_or(0, |&n| usize::from(n));
            bytes.get(i + 2..i + 2 + len)
        }
        Some(&op::BINGET) => match bytes.get(i + 1).and_then(|&s| slots.get(usize::from(s))) {
            Some(Kept::Str(id)) => Some(texts[*id as usize]),
            _ => None,
        },
        Some(&op::LONG_BINGET) => {
            let slot = bytes
                .get(i + 1..i + 5)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize);
            match slot.and_then(|s| slots.get(s)) {
                Some(Kept::Str(id)) => Some(texts[*id as usize]),
                _ => None,
            }
        }
        _ => None,
    };
    key == Some(b"action".as_slice())
}

/// A string's text as the interpreter decodes it (invalid UTF-8, e.g. a
/// lone surrogate written with `surrogatepass`, lossily with U+FFFD).
fn decode(bytes: &[u8]) -> Box<str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Box::from(s),
        Err(_) => Box::from(&*String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::memo_strings_after;
    use super::super::writer::{dumps, Py};
    use super::*;
    use crate::test_support::{corpus_dir, read_maybe_gz};

    /// The cuts [`find_cut`] finds in `bytes`, about six spread over the
    /// file, each checked against the interpreter's memo at it: the same
    /// slots, the same strings in them, nothing else called a string.
    fn check_cuts(bytes: &[u8], what: &str) -> usize {
        let step = (bytes.len() / 6).max(1);
        let (mut from, mut checked) = (0, 0);
        while let Some(cut) = find_cut(bytes, from) {
            assert!(cut.at >= from, "{what}");
            assert_eq!(
                bytes[cut.at - 1..cut.at + 2],
                [op::APPENDS, op::MARK, op::EMPTY_DICT]
            );
            let walked: Vec<Option<String>> = cut
                .slots
                .iter()
                .map(|k| match *k {
                    Kept::Str(id) => Some(cut.strings[id as usize].to_string()),
                    Kept::Other => None,
                })
                .collect();
            assert_eq!(
                walked,
                memo_strings_after(&bytes[..cut.at]),
                "{what}: cut at {}",
                cut.at
            );
            checked += 1;
            from = cut.at + step;
        }
        checked
    }

    /// A snapshot of `n` alloc entries sharing two frames, by protocol.
    fn entries(n: usize, protocol: u8) -> Vec<u8> {
        let frame = |file: &str, line| {
            Py::dict([
                ("filename", Py::str(file)),
                ("line", Py::Int(line)),
                ("name", Py::str("f")),
            ])
            .shared()
        };
        let (a, b) = (frame("a.py", 1), frame("b.py", 2));
        let entry = |k: usize| {
            Py::dict([
                ("action", Py::str("alloc")),
                ("addr", Py::Int(k as i128 * 512)),
                ("size", Py::Int(512)),
                ("frames", Py::List(vec![a.clone(), b.clone()])),
                (
                    "compile_context",
                    Py::str(if k % 3 == 0 { "N/A" } else { "fwd" }),
                ),
            ])
        };
        let root = Py::dict([
            ("segments", Py::List(vec![])),
            (
                "device_traces",
                Py::List(vec![Py::List((0..n).map(entry).collect())]),
            ),
        ]);
        dumps(&root, protocol)
    }

    #[test]
    fn cuts_match_the_interpreters_memo_on_written_snapshots() {
        let bytes = entries(5000, 4);
        // Batches of 1000: a cut before each of the last four.
        assert_eq!(check_cuts(&bytes, "5000 entries"), 4);
        let first = find_cut(&bytes, 0).unwrap();
        assert!(first.slots.len() > 1000 && first.strings.iter().any(|s| &**s == "a.py"));
        let mut cuts = vec![first.at];
        while let Some(cut) = find_cut(&bytes, cuts[cuts.len() - 1] + 1) {
            cuts.push(cut.at);
        }
        // One before each batch but the first; past the last, none.
        assert_eq!(cuts.len(), 4);
        assert!(find_cut(&entries(900, 4), 0).is_none());
    }

    #[test]
    fn no_cut_where_the_memo_cannot_be_followed() {
        // Protocols 2 and 3 store to the memo by BINPUT, at slots the file
        // chooses.
        for protocol in [2, 3] {
            assert!(
                find_cut(&entries(3000, protocol), 0).is_none(),
                "{protocol}"
            );
        }
        let bytes = entries(3000, 4);
        let cut = find_cut(&bytes, 0).unwrap();
        // Cut short before the batch, or an opcode memcut refuses before it.
        assert!(find_cut(&bytes[..cut.at - 1], 0).is_none());
        let mut refused = bytes.clone();
        refused[cut.at - 1] = b'R';
        assert!(find_cut(&refused, 0).is_none());
        // A batch of dicts that are no trace entries (a segment's blocks).
        let blocks = Py::List(
            (0..3000)
                .map(|k| Py::dict([("size", Py::Int(k)), ("state", Py::str("active_allocated"))]))
                .collect(),
        );
        let root = Py::dict([("segments", Py::List(vec![Py::dict([("blocks", blocks)])]))]);
        assert!(find_cut(&dumps(&root, 4), 0).is_none());
    }

    #[test]
    fn cuts_match_the_interpreters_memo_on_samples() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let pattern = format!("{}/sample_traces/*.pickle.gz", root.display());
        let mut checked = 0;
        for path in glob::glob(&pattern).unwrap() {
            let path = path.unwrap();
            checked += check_cuts(&read_maybe_gz(&path), &path.display().to_string());
        }
        assert!(checked > 0);
    }

    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn cuts_match_the_interpreters_memo_on_corpus_pickles() {
        let dir = corpus_dir();
        let (mut files, mut checked) = (0, 0);
        for path in glob::glob(&format!("{}/**/*.pickle", dir.display())).unwrap() {
            let path = path.unwrap();
            checked += check_cuts(&std::fs::read(&path).unwrap(), &path.display().to_string());
            files += 1;
        }
        assert!(files > 0 && checked > 0, "{files} files, {checked} cuts");
    }
}
