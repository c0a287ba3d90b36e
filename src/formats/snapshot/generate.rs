//! Snapshot-shaped pickles for property tests (`tests.rs`, driven by
//! proptest) and the structure-aware fuzz target (`fuzz/`, driven by
//! libFuzzer through `arbitrary`): byte-level mutation rarely gets past the
//! pickle's syntax to its schema, so the crash of issue 12 (a trace entry
//! where a frame belongs) was out of its reach. These are built as values —
//! dicts with `segments`/`device_traces`, entries with known and unknown
//! actions, missing and extra keys, wrong types, frames lists of shared
//! (memoized) frame dicts and of things that are not frames, frames lists
//! shared by several entries — and pickled by the test writer
//! ([`pickle::writer`]) with the opcodes PyTorch's pickler emits, so the
//! unpickler's fast paths see them as they see a real snapshot.
//!
//! [`all_ways`] is the reader's oracle: the plain path, the fast paths and
//! the fast paths on a trickle must give the same trace or the same error.
//! What needs the rest of the pipeline (the read-ahead thread, the analysis)
//! is checked above the readers, in `crate::generated_checks`.

use arbitrary::{Result, Unstructured};

use super::super::pickle::writer::{dumps, Py};
use super::super::pickle::{self, Hook, Limits};
use super::{build_trace, parse_pickle, Plain};

/// A snapshot-shaped pickle made from `u`'s bytes.
pub(crate) fn snapshot_pickle(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let protocol = u.int_in_range(2..=5)?;
    let mut g = Gen {
        u,
        frames: Vec::new(),
        lists: Vec::new(),
        entries: Vec::new(),
    };
    let root = g.root()?;
    Ok(dumps(&root, protocol))
}

/// Parses `bytes` every way memcut can — plainly (the snapshot hook with
/// the fast paths' door closed), with the fast paths, with them fed three
/// bytes at a time — and returns the trace's `Debug` or the error they
/// agree on.
/// Panics, naming the two, when they do not agree.
pub(crate) fn all_ways(bytes: &[u8]) -> std::result::Result<String, String> {
    let show = |r: crate::error::Result<crate::model::Trace>| match r {
        Ok(trace) => Ok(format!("{trace:?}")),
        Err(e) => Err(e.to_string()),
    };
    let limits = Limits::default();
    let mut plain_hook = Plain::default();
    let plain_trace = pickle::unpickle(bytes, &limits, &mut plain_hook)
        .map_err(crate::error::Error::from)
        .and_then(|root| build_trace(&root, plain_hook.0));
    let plain = match &plain_trace {
        Ok(trace) => Ok(format!("{trace:?}")),
        Err(e) => Err(e.to_string()),
    };
    let fast = show(parse_pickle(bytes, &limits));
    let trickled = show(parse_pickle(
        std::io::BufReader::with_capacity(1, Trickle(bytes)),
        &limits,
    ));
    // Buffers of a few sizes: the window reads each in place and stitches
    // the items that run across their ends (`pickle/window.rs`).
    let [small, large] = [61, 4099].map(|n| {
        show(parse_pickle(
            std::io::BufReader::with_capacity(n, bytes),
            &limits,
        ))
    });
    for (name, other) in [
        ("fast", &fast),
        ("trickled", &trickled),
        ("in 61-byte buffers", &small),
        ("in 4099-byte buffers", &large),
    ] {
        agree(("plain", &plain), (name, other));
    }
    // The allocator's state read from its dicts after the parse, and trace
    // lists holding one handle per entry (the lowering before they were
    // read as they stream, `allocator_state.rs`). Blocks' sites may be
    // numbered in another order, so both are compared with each site
    // spelled out.
    let mut unlowered = Unlowered::default();
    let read_after = pickle::unpickle(bytes, &limits, &mut unlowered)
        .map_err(crate::error::Error::from)
        .and_then(|root| build_trace(&root, unlowered.0));
    agree(
        ("plain", &sites_spelled_out(plain_trace)),
        (
            "allocator state read after the parse",
            &sites_spelled_out(read_after),
        ),
    );
    plain
}

/// [`Plain`] that leaves block and segment dicts as dicts and a trace
/// list's entries one handle each: the oracle of `allocator_state.rs` and
/// of the runs of events.
#[derive(Default)]
struct Unlowered(super::EntryLowering);

impl Hook for Unlowered {
    fn on_list_dict(
        &mut self,
        dict: &[(pickle::Value, pickle::Value)],
    ) -> std::result::Result<Option<pickle::Value>, String> {
        if super::allocator_state::is_block(dict) || super::allocator_state::is_segment(dict) {
            return Ok(None);
        }
        self.0.on_list_dict(dict)
    }
    fn on_list_items(
        &mut self,
        items: &[pickle::Value],
    ) -> std::result::Result<Option<pickle::Value>, String> {
        self.0.on_list_items(items)
    }
    fn on_dict_items(
        &mut self,
        items: &[pickle::Value],
    ) -> std::result::Result<Option<(pickle::Value, pickle::Value)>, String> {
        self.0.on_dict_items(items)
    }
    fn on_handle_items(
        &mut self,
        handle: pickle::Handle,
        items: &[pickle::Value],
    ) -> std::result::Result<bool, String> {
        self.0.on_handle_items(handle, items)
    }
}

/// A trace's `Debug` with each site id replaced by its frames, or its error.
fn sites_spelled_out(
    trace: crate::error::Result<crate::model::Trace>,
) -> std::result::Result<String, String> {
    let mut trace = trace.map_err(|e| e.to_string())?;
    let spelled = |sites: &crate::model::Sites, site: u32| -> String {
        let frame = |f: &crate::model::Frame| {
            format!("{}:{}:{}", sites.str(f.filename), f.line, sites.str(f.name))
        };
        sites
            .frames(site)
            .iter()
            .map(frame)
            .collect::<Vec<_>>()
            .join("|")
    };
    let mut out = String::new();
    let sites = std::mem::take(&mut trace.sites);
    for device in &mut trace.devices {
        for e in &mut device.events {
            out.push_str(&spelled(&sites, e.site));
            out.push('\n');
            e.site = 0;
        }
        for segment in device.segments.iter_mut().flatten() {
            for b in &mut segment.blocks {
                out.push_str(&spelled(&sites, b.site));
                out.push('\n');
                b.site = 0;
            }
        }
    }
    Ok(format!("{trace:?}\n{out}"))
}

/// Panics unless the two results are equal, showing where they part.
pub(crate) fn agree(
    (a_name, a): (&str, &std::result::Result<String, String>),
    (b_name, b): (&str, &std::result::Result<String, String>),
) {
    if a == b {
        return;
    }
    let (x, y) = (format!("{a:?}"), format!("{b:?}"));
    let at = x.bytes().zip(y.bytes()).take_while(|(p, q)| p == q).count();
    let from = x[..at].char_indices().rev().nth(150).map_or(0, |(i, _)| i);
    let around = |s: &str| s[from..].chars().take(400).collect::<String>();
    panic!(
        "{a_name} and {b_name} disagree:\n  {a_name}: …{}\n  {b_name}: …{}",
        around(&x),
        around(&y)
    );
}

/// Hands out at most 3 bytes per `read`, so every window ends everywhere.
struct Trickle<'a>(&'a [u8]);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = out.len().min(self.0.len()).min(3);
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

const ACTIONS: [&str; 11] = [
    "alloc",
    "free_requested",
    "free_completed",
    "free",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "snapshot",
    "oom",
    "bogus",
];
const WORDS: [&str; 8] = [
    "forward",
    "backward",
    "train.py",
    "model.py",
    "??",
    "",
    "main",
    "héllo ☃",
];
const STATES: [&str; 5] = [
    "active_allocated",
    "active_pending_free",
    "active_awaiting_free",
    "inactive",
    "bogus",
];

/// Builds the values, keeping what later values may share.
struct Gen<'a, 'b> {
    u: &'b mut Unstructured<'a>,
    /// Frame dicts shared through the memo, as tracebacks share them.
    frames: Vec<Py>,
    /// Frames lists shared by several entries or blocks.
    lists: Vec<Py>,
    /// Trace entries that appear more than once.
    entries: Vec<Py>,
}

impl Gen<'_, '_> {
    fn below(&mut self, n: u32) -> Result<u32> {
        self.u.int_in_range(0..=n - 1)
    }

    fn chance(&mut self, percent: u32) -> Result<bool> {
        Ok(self.below(100)? < percent)
    }

    fn pick<T: Clone>(&mut self, from: &[T]) -> Result<T> {
        Ok(from[self.below(from.len() as u32)? as usize].clone())
    }

    fn word(&mut self) -> Result<Py> {
        if self.chance(5)? {
            return Ok(Py::Str(self.u.arbitrary()?));
        }
        Ok(Py::str(self.pick(&WORDS)?))
    }

    /// An integer field: mostly what PyTorch writes, sometimes not.
    fn number(&mut self) -> Result<Py> {
        Ok(match self.below(12)? {
            0..=2 => Py::Int(self.below(256)?.into()),
            3..=4 => Py::Int(self.u.int_in_range(0..=1i128 << 48)?),
            5 => Py::Int(self.u.arbitrary::<i32>()?.into()),
            6 => Py::Int(self.u.arbitrary::<u64>()?.into()),
            7 => Py::Int(self.u.arbitrary::<i64>()?.into()),
            8 => Py::Int(self.u.arbitrary::<i128>()?),
            9 => Py::Float(self.u.arbitrary()?),
            10 => self.word()?,
            _ => self.junk()?,
        })
    }

    /// Anything that is no part of the schema.
    fn junk(&mut self) -> Result<Py> {
        Ok(match self.below(7)? {
            0 => Py::None,
            1 => Py::Bool(self.u.arbitrary()?),
            2 => Py::Int(self.u.arbitrary::<i16>()?.into()),
            3 => self.word()?,
            4 => Py::List(vec![Py::Int(1), Py::None]),
            5 => Py::Tuple(vec![Py::Int(1), self.word()?]),
            _ => Py::dict([("x", Py::Int(1))]),
        })
    }

    /// Pairs in PyTorch's order, each kept with probability `keep`%, an
    /// extra key sometimes, and rarely a key written twice.
    fn dict(&mut self, pairs: Vec<(&str, Py)>, keep: u32) -> Result<Py> {
        let mut out = Vec::new();
        for (key, value) in pairs {
            if self.chance(keep)? {
                out.push((Py::str(key), value));
            }
        }
        if self.chance(10)? {
            let key = self.word()?;
            out.push((key, self.junk()?));
        }
        if !out.is_empty() && self.chance(3)? {
            let i = self.below(out.len() as u32)? as usize;
            out.push((out[i].0.clone(), self.junk()?));
        }
        Ok(Py::Dict(out))
    }

    fn root(&mut self) -> Result<Py> {
        match self.below(20)? {
            0..=17 => {
                let segments = self.segments()?;
                let traces = self.device_traces()?;
                let mut pairs = vec![("segments", segments), ("device_traces", traces)];
                if self.chance(20)? {
                    pairs.reverse();
                }
                let settings =
                    Py::dict([("trace_alloc_overflowed", Py::Bool(self.u.arbitrary()?))]);
                pairs.push(("allocator_settings", settings));
                let annotations = self.annotations()?;
                pairs.push(("external_annotations", annotations));
                self.dict(pairs, 85)
            }
            // The legacy form: a bare list of segments.
            18 => self.segments(),
            _ => self.junk(),
        }
    }

    fn device_traces(&mut self) -> Result<Py> {
        if self.chance(3)? {
            return self.junk();
        }
        let devices = self.below(4)?;
        let mut out = Vec::new();
        for _ in 0..devices {
            // Past 1000 entries, CPython appends in several batches.
            let n = match self.chance(3)? {
                true => self.u.int_in_range(995..=1010)?,
                false => self.below(24)?,
            };
            let mut entries = Vec::new();
            for _ in 0..n {
                entries.push(self.entry()?);
            }
            out.push(Py::List(entries));
        }
        Ok(Py::List(out))
    }

    fn entry(&mut self) -> Result<Py> {
        match self.below(20)? {
            0 if !self.entries.is_empty() => self.pick(&self.entries.clone()),
            1 => self.junk(),
            // A dict that is no entry.
            2 => {
                let addr = self.number()?;
                self.dict(vec![("addr", addr)], 100)
            }
            _ => {
                let action = match self.below(200)? {
                    0 => self.junk()?,
                    _ => Py::str(self.pick(&ACTIONS)?),
                };
                let pairs = vec![
                    ("action", action),
                    ("addr", self.number()?),
                    ("size", self.number()?),
                    ("stream", Py::Int(0)),
                    ("time_us", self.number()?),
                    ("frames", self.frames_value()?),
                    ("device_free", self.number()?),
                    ("category", self.word()?),
                ];
                let mut entry = self.dict(pairs, 85)?;
                // Now and then a key before `action`, which PyTorch writes
                // first: the fast paths leave such a record to the opcodes
                // (`Records::may_take`), which lower it all the same.
                if let Py::Dict(pairs) = &mut entry {
                    if pairs.len() > 1 && self.chance(10)? {
                        pairs.rotate_left(1);
                    }
                }
                if self.chance(5)? {
                    entry = entry.shared();
                    self.entries.push(entry.clone());
                }
                Ok(entry)
            }
        }
    }

    /// An entry's or a block's `frames`: mostly a traceback of shared frame
    /// dicts, sometimes shared with another entry, sometimes not frames.
    fn frames_value(&mut self) -> Result<Py> {
        match self.below(12)? {
            0..=1 if !self.lists.is_empty() => self.pick(&self.lists.clone()),
            2 => self.junk(),
            // Spelled out inline, a new dict per frame (as
            // `_profile_to_snapshot` writes them), or empty.
            3 => {
                let n = self.below(8)?;
                Ok(Py::List(
                    (0..n).map(|_| self.frame()).collect::<Result<_>>()?,
                ))
            }
            _ => {
                let n = self.below(8)?;
                let mut items = Vec::new();
                for _ in 0..n {
                    items.push(self.frame_item()?);
                }
                let mut list = Py::List(items);
                if self.chance(40)? {
                    list = list.shared();
                    self.lists.push(list.clone());
                }
                Ok(list)
            }
        }
    }

    fn frame_item(&mut self) -> Result<Py> {
        Ok(match self.below(100)? {
            0..=79 => {
                if self.frames.is_empty() || self.chance(20)? {
                    let frame = self.frame()?.shared();
                    self.frames.push(frame);
                }
                self.pick(&self.frames.clone())?
            }
            80..=89 => self.frame()?,
            // A trace entry where a frame belongs (issue 12).
            90 => Py::dict([("action", Py::str(self.pick(&ACTIONS)?))]),
            91 if !self.entries.is_empty() => self.pick(&self.entries.clone())?,
            // `forward_frames` style: a preformatted line.
            92..=95 => self.word()?,
            _ => self.junk()?,
        })
    }

    fn frame(&mut self) -> Result<Py> {
        let pairs = vec![
            ("filename", self.word()?),
            ("line", self.number()?),
            ("name", self.word()?),
        ];
        self.dict(pairs, 90)
    }

    fn segments(&mut self) -> Result<Py> {
        if self.chance(3)? {
            return self.junk();
        }
        let n = self.below(4)?;
        let mut out = Vec::new();
        for _ in 0..n {
            let device = match self.below(8)? {
                0 => Py::Int(-1),
                1 => self.number()?,
                d => Py::Int(i128::from(d % 3)),
            };
            let blocks = match self.chance(2)? {
                true => self.junk()?,
                false => {
                    let k = self.below(6)?;
                    let mut blocks = Vec::new();
                    for _ in 0..k {
                        blocks.push(self.block()?);
                    }
                    Py::List(blocks)
                }
            };
            let pairs = vec![
                ("device", device),
                ("address", self.number()?),
                ("total_size", self.number()?),
                ("is_expandable", Py::Bool(self.u.arbitrary()?)),
                ("blocks", blocks),
            ];
            out.push(self.dict(pairs, 85)?);
        }
        Ok(Py::List(out))
    }

    fn block(&mut self) -> Result<Py> {
        let history = match self.chance(10)? {
            true => {
                let pairs = vec![
                    ("addr", self.number()?),
                    ("real_size", self.number()?),
                    ("frames", self.frames_value()?),
                ];
                Py::List(vec![self.dict(pairs, 80)?])
            }
            false => Py::None,
        };
        let pairs = vec![
            ("address", self.number()?),
            ("size", self.number()?),
            ("requested_size", self.number()?),
            ("state", Py::str(self.pick(&STATES)?)),
            ("frames", self.frames_value()?),
            ("history", history),
        ];
        self.dict(pairs, 80)
    }

    fn annotations(&mut self) -> Result<Py> {
        let n = self.below(3)?;
        let mut out = Vec::new();
        for _ in 0..n {
            let stage = Py::str(self.pick(&["START", "END", "bogus"])?);
            let pairs = vec![
                ("name", self.word()?),
                ("stage", stage),
                ("time_us", self.number()?),
                ("device", Py::Int(0)),
            ];
            out.push(self.dict(pairs, 90)?);
        }
        Ok(Py::List(out))
    }
}
