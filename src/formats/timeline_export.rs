//! `torch.profiler.profile.export_memory_timeline` outputs (formats.md B7).
//!
//! Two JSON shapes, both already categorised by PyTorch's memory profiler:
//!
//! - `.json`: `[times, sizes]`; `times[k]` epoch µs, `sizes[k]` = 9 ints, the
//!   bytes live per category after step k (column 0 unused, column `i + 1` =
//!   `_CATEGORY_TO_INDEX` i).
//! - `.raw.json(.gz)`: `[[t_ns, action, bytes, category_index], …]`, `t_ns = -1`
//!   for memory that existed before profiling; actions 1 PREEXISTING, 2 CREATE,
//!   3 INCREMENT_VERSION, 4 DESTROY; `bytes` signed.
//!
//! Neither carries addresses, sizes of individual blocks (the series form) or a
//! device name. Both become synthetic `Alloc`/`FreeCompleted` events with
//! `given: Some(category)` and unique synthetic addresses on one device,
//! arranged per category as a LIFO so that replaying the events reproduces
//! PyTorch's per-category live bytes exactly after every step.

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::formats::json_repair::parse_or_repair;
use crate::model::{Action, Category, DeviceTrace, Diagnostic, Event, Format, Trace};

/// `_CATEGORY_TO_INDEX` in `torch/profiler/_memory_profiler.py`.
const INDEX_TO_CATEGORY: [Category; 8] = [
    Category::Parameter,
    Category::OptimizerState,
    Category::Input,
    Category::Temporary,
    Category::Activation,
    Category::Gradient,
    Category::AutogradDetail,
    Category::Unknown,
];
const N_CAT: usize = INDEX_TO_CATEGORY.len();

/// Synthetic addresses: distinct, aligned, far from zero.
const ADDR_BASE: u64 = 0x7f00_0000_0000;
const ADDR_STRIDE: u64 = 0x1000;

/// How far below the top of a category's stack a free looks for an
/// allocation of exactly its size before falling back to LIFO.
const EXACT_MATCH_WINDOW: usize = 256;

/// Parses an `export_memory_timeline` output: the `[times, sizes]` `.json`
/// form or the `.raw.json(.gz)` list of `[t_ns, action, bytes, category_index]`
/// (already decompressed).
pub fn parse_memory_timeline(bytes: &[u8]) -> Result<Trace> {
    let root = parse_nodes(bytes)?;
    let Node::List(items) = root else {
        return Err(Error::UnknownFormat(
            "a memory-timeline export is a JSON array".to_string(),
        ));
    };
    let mut diagnostics = Vec::new();
    let built = if is_series_form(&items) {
        let (times, sizes) = series_from_nodes(&items, &mut diagnostics)?;
        build_series(&times, &sizes)
    } else {
        let rows = raw_rows_from_nodes(&items)?;
        build_raw(&rows)
    };
    if built.events.is_empty() {
        return Err(Error::NoMemoryEvents);
    }
    let mut trace = Trace::new(Format::MemoryTimeline);
    diagnostics.push(Diagnostic::info(
        "the memory-timeline export carries no device name; its events are shown on device `cpu`",
    ));
    diagnostics.push(Diagnostic::info(format!(
        "{} time steps; categories come from PyTorch's memory profiler; allocation addresses are synthetic",
        built.step_ends.len()
    )));
    if built.clamped > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "{} step(s) free more bytes than were live in their category; the curve is clamped at 0 there",
            built.clamped
        )));
    }
    if built.bad_category > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "{} row(s) have an unknown category index; counted as `unknown`",
            built.bad_category
        )));
    }
    trace.devices.push(DeviceTrace {
        device: "cpu".to_string(),
        events: built.events,
        ..DeviceTrace::default()
    });
    trace.diagnostics = diagnostics;
    Ok(trace)
}

/// Cheap content check for the format sniffer: a top-level array of arrays of
/// numbers (`[[…` followed by a number or `]`, and only JSON number/array
/// characters in the first 4 KiB).
pub fn looks_like_memory_timeline(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    let mut i = skip_ws(head, 0);
    if head.get(i) != Some(&b'[') {
        return false;
    }
    i = skip_ws(head, i + 1);
    if head.get(i) != Some(&b'[') {
        return false;
    }
    i = skip_ws(head, i + 1);
    if !head
        .get(i)
        .is_some_and(|&c| c.is_ascii_digit() || c == b'-' || c == b']' || c == b'[')
    {
        return false;
    }
    head.iter().all(|&c| {
        c.is_ascii_digit()
            || matches!(
                c,
                b'[' | b']'
                    | b','
                    | b'-'
                    | b'+'
                    | b'.'
                    | b'e'
                    | b'E'
                    | b' '
                    | b'\t'
                    | b'\r'
                    | b'\n'
            )
    })
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    if b[i..].starts_with(&[0xEF, 0xBB, 0xBF]) {
        i += 3;
    }
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

// ---------------------------------------------------------------------------
// A small JSON tree of numbers and lists
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Int(i64),
    Float(f64),
    List(Vec<Node>),
    Other,
}

impl Node {
    fn as_i64(&self) -> Option<i64> {
        match *self {
            Node::Int(v) => Some(v),
            Node::Float(v) if v.is_finite() => Some(v.round() as i64),
            _ => None,
        }
    }
    fn as_f64(&self) -> Option<f64> {
        match *self {
            Node::Int(v) => Some(v as f64),
            Node::Float(v) if v.is_finite() => Some(v),
            _ => None,
        }
    }
    fn is_number(&self) -> bool {
        matches!(self, Node::Int(_) | Node::Float(_))
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("numbers and lists")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Node, E> {
        Ok(Node::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Node, E> {
        Ok(i64::try_from(v).map_or(Node::Float(v as f64), Node::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Node, E> {
        let v = v.trim();
        Ok(match (v.parse::<i64>(), v.parse::<f64>()) {
            (Ok(i), _) => Node::Int(i),
            (_, Ok(f)) => Node::Float(f),
            _ => Node::Other,
        })
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Node, E> {
        Ok(Node::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Node, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
        while let Some(n) = seq.next_element::<Node>()? {
            out.push(n);
        }
        Ok(Node::List(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Node, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Node::Other)
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Node, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

fn parse_nodes(bytes: &[u8]) -> Result<Node> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(Error::Json("empty input at byte 0".to_string()));
    }
    // This reader has never reported what the repair changed (the Chrome
    // reader does); kept as it was so its reports do not change.
    parse_or_repair(bytes, |buf, _repairs| serde_json::from_slice::<Node>(buf))
        .map_err(|unparsed| Error::Json(unparsed.error.to_string()))
}

/// `[times, sizes]`: two lists, the first of numbers, the second of lists.
fn is_series_form(items: &[Node]) -> bool {
    match items {
        [Node::List(times), Node::List(sizes)] => {
            times.iter().all(Node::is_number)
                && sizes.iter().all(|s| matches!(s, Node::List(_)))
                && (sizes.is_empty() || !times.is_empty())
        }
        _ => false,
    }
}

fn series_from_nodes(
    items: &[Node],
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<(Vec<f64>, Vec<[i64; N_CAT]>)> {
    let (Node::List(times), Node::List(sizes)) = (&items[0], &items[1]) else {
        unreachable!("checked by is_series_form");
    };
    if times.len() != sizes.len() {
        return Err(Error::UnknownFormat(format!(
            "memory timeline has {} times but {} size rows",
            times.len(),
            sizes.len()
        )));
    }
    let times: Vec<f64> = times.iter().filter_map(Node::as_f64).collect();
    let mut short_rows = 0;
    let sizes = sizes
        .iter()
        .map(|row| {
            let Node::List(cols) = row else {
                unreachable!("checked by is_series_form")
            };
            if cols.len() < N_CAT + 1 {
                short_rows += 1;
            }
            let mut out = [0i64; N_CAT];
            for (c, slot) in out.iter_mut().enumerate() {
                *slot = cols.get(c + 1).and_then(Node::as_i64).unwrap_or(0);
            }
            out
        })
        .collect();
    if short_rows > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "{short_rows} size row(s) have fewer than 9 columns; missing categories count as 0"
        )));
    }
    Ok((times, sizes))
}

/// One row of the raw form.
#[derive(Debug, Clone, Copy, PartialEq)]
struct RawRow {
    t_ns: i64,
    action: i64,
    bytes: i64,
    category: i64,
}

fn raw_rows_from_nodes(items: &[Node]) -> Result<Vec<RawRow>> {
    items
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let row = match n {
                Node::List(cols) if cols.len() >= 4 => (
                    cols[0].as_i64(),
                    cols[1].as_i64(),
                    cols[2].as_i64(),
                    cols[3].as_i64(),
                ),
                _ => (None, None, None, None),
            };
            match row {
                (Some(t_ns), Some(action), Some(bytes), Some(category)) => Ok(RawRow {
                    t_ns,
                    action,
                    bytes,
                    category,
                }),
                _ => Err(Error::UnknownFormat(format!(
                    "memory timeline row {i} is not [t_ns, action, bytes, category]"
                ))),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Synthetic events
// ---------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Built {
    events: Vec<Event>,
    /// Index into `events` after each step (for tests and checks).
    step_ends: Vec<usize>,
    /// Steps that would need a category below zero bytes.
    clamped: usize,
    /// Raw rows whose category index is out of range.
    bad_category: usize,
}

/// Per-category stacks of live synthetic allocations.
struct Lifo {
    stacks: [Vec<(u64, u64)>; N_CAT],
    next_addr: u64,
    events: Vec<Event>,
    clamped: usize,
}

impl Lifo {
    fn new() -> Lifo {
        Lifo {
            stacks: Default::default(),
            next_addr: ADDR_BASE,
            events: Vec::new(),
            clamped: 0,
        }
    }

    fn emit(&mut self, action: Action, cat: usize, addr: u64, size: u64, ts_us: f64) {
        self.events.push(Event {
            action,
            given: Some(INDEX_TO_CATEGORY[cat]),
            site: 0,
            addr,
            size,
            ts_us,
        });
    }

    fn alloc(&mut self, cat: usize, size: u64, ts_us: f64) {
        if size == 0 {
            return;
        }
        let addr = self.next_addr;
        self.next_addr += ADDR_STRIDE;
        self.stacks[cat].push((addr, size));
        self.emit(Action::Alloc, cat, addr, size, ts_us);
    }

    /// Frees `size` bytes of category `cat`: an allocation of exactly that size
    /// near the top if there is one, else the top allocations, re-allocating
    /// what is left of the last one.
    fn free(&mut self, cat: usize, size: u64, ts_us: f64) {
        if size == 0 {
            return;
        }
        let stack = &self.stacks[cat];
        let lo = stack.len().saturating_sub(EXACT_MATCH_WINDOW);
        if let Some(pos) = (lo..stack.len()).rev().find(|&i| stack[i].1 == size) {
            let (addr, sz) = self.stacks[cat].remove(pos);
            self.emit(Action::FreeCompleted, cat, addr, sz, ts_us);
            return;
        }
        let mut need = size;
        while need > 0 {
            let Some((addr, sz)) = self.stacks[cat].pop() else {
                self.clamped += 1;
                return;
            };
            self.emit(Action::FreeCompleted, cat, addr, sz, ts_us);
            if sz > need {
                self.alloc(cat, sz - need, ts_us);
                need = 0;
            } else {
                need -= sz;
            }
        }
    }
}

/// `[times, sizes]`: per step, free the categories that shrank, then allocate
/// the ones that grew (so a step never shows a transient peak).
fn build_series(times: &[f64], sizes: &[[i64; N_CAT]]) -> Built {
    let mut lifo = Lifo::new();
    let mut live = [0u64; N_CAT];
    let mut step_ends = Vec::with_capacity(times.len());
    for (ts, row) in times.iter().zip(sizes) {
        let target = row.map(|v| v.max(0) as u64);
        for c in 0..N_CAT {
            if target[c] < live[c] {
                lifo.free(c, live[c] - target[c], *ts);
            }
        }
        for c in 0..N_CAT {
            if target[c] > live[c] {
                lifo.alloc(c, target[c] - live[c], *ts);
            }
        }
        live = target;
        step_ends.push(lifo.events.len());
    }
    let clamped = sizes.iter().flatten().filter(|&&v| v < 0).count();
    Built {
        clamped: clamped + lifo.clamped,
        events: lifo.events,
        step_ends,
        bad_category: 0,
    }
}

/// The raw form: one event per row (`+bytes` allocates, `−bytes` frees), rows
/// with `t_ns = −1` at the first real time. A step is a run of rows with the
/// same time.
fn build_raw(rows: &[RawRow]) -> Built {
    let first_real = rows.iter().map(|r| r.t_ns).filter(|&t| t >= 0).min();
    let ts_of = |t: i64| -> f64 {
        match (t >= 0, first_real) {
            (true, _) => t as f64 / 1000.0,
            (false, Some(f)) => f as f64 / 1000.0,
            (false, None) => 0.0,
        }
    };
    // Pre-existing rows first, then time order (stable: PyTorch writes sorted rows).
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| {
        if rows[i].t_ns < 0 {
            i64::MIN
        } else {
            rows[i].t_ns
        }
    });

    let mut lifo = Lifo::new();
    let mut step_ends = Vec::new();
    let mut bad_category = 0;
    let mut prev: Option<i64> = None;
    for &i in &order {
        let r = rows[i];
        let key = if r.t_ns < 0 { -1 } else { r.t_ns };
        if prev.is_some_and(|p| p != key) {
            step_ends.push(lifo.events.len());
        }
        prev = Some(key);
        let cat = match usize::try_from(r.category) {
            Ok(c) if c < N_CAT => c,
            _ => {
                bad_category += 1;
                N_CAT - 1
            }
        };
        let ts = ts_of(r.t_ns);
        if r.bytes > 0 {
            lifo.alloc(cat, r.bytes as u64, ts);
        } else {
            lifo.free(cat, r.bytes.unsigned_abs(), ts);
        }
    }
    if prev.is_some() {
        step_ends.push(lifo.events.len());
    }
    Built {
        clamped: lifo.clamped,
        events: lifo.events,
        step_ends,
        bad_category,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Replays events with a running sum per category; returns the sums after
    /// each step end. Also checks every free matches a live allocation.
    fn replay(events: &[Event], step_ends: &[usize]) -> Vec<[u64; N_CAT]> {
        let mut live: HashMap<u64, (usize, u64)> = HashMap::new();
        let mut sums = [0u64; N_CAT];
        let mut out = Vec::new();
        let mut ends = step_ends.iter().peekable();
        let idx = |c: Category| INDEX_TO_CATEGORY.iter().position(|&x| x == c).unwrap();
        while ends.peek() == Some(&&0) {
            out.push(sums);
            ends.next();
        }
        for (i, e) in events.iter().enumerate() {
            let c = idx(e.given.unwrap());
            match e.action {
                Action::Alloc => {
                    assert!(live.insert(e.addr, (c, e.size)).is_none(), "addr reused");
                    sums[c] += e.size;
                }
                Action::FreeCompleted => {
                    let (lc, ls) = live.remove(&e.addr).expect("free of a live alloc");
                    assert_eq!((lc, ls), (c, e.size));
                    sums[c] -= e.size;
                }
                other => panic!("unexpected {other:?}"),
            }
            while ends.peek() == Some(&&(i + 1)) {
                out.push(sums);
                ends.next();
            }
        }
        out
    }

    fn series_json(times: &[i64], sizes: &[[i64; 9]]) -> String {
        let t: Vec<String> = times.iter().map(|t| t.to_string()).collect();
        let s: Vec<String> = sizes
            .iter()
            .map(|r| {
                format!(
                    "[{}]",
                    r.iter()
                        .map(|v| v.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect();
        format!("[[{}], [{}]]", t.join(", "), s.join(", "))
    }

    #[test]
    fn series_form_replays_exactly() {
        let times = [1000, 1000, 1010, 1020, 1030, 1040];
        let sizes = [
            [0, 100, 0, 0, 0, 0, 0, 0, 7],
            [0, 100, 0, 64, 0, 0, 0, 0, 7],
            [0, 100, 0, 64, 32, 500, 0, 0, 7],
            // activation shrinks by less than the top alloc: partial free
            [0, 100, 0, 64, 32, 200, 10, 0, 7],
            [0, 100, 50, 64, 0, 0, 10, 0, 0],
            [0, 100, 50, 64, 0, 0, 10, 0, 0],
        ];
        let s = series_json(&times, &sizes);
        assert!(looks_like_memory_timeline(s.as_bytes()));
        let t = parse_memory_timeline(s.as_bytes()).unwrap();
        assert_eq!(t.format, Format::MemoryTimeline);
        assert_eq!(t.devices.len(), 1);
        assert_eq!(t.devices[0].device, "cpu");
        assert!(t
            .diagnostics
            .iter()
            .any(|d| d.message.contains("no device name")));

        let (tf, sz): (Vec<f64>, Vec<[i64; N_CAT]>) = (
            times.iter().map(|&t| t as f64).collect(),
            sizes
                .iter()
                .map(|r| std::array::from_fn(|c| r[c + 1]))
                .collect(),
        );
        let built = build_series(&tf, &sz);
        assert_eq!(built.events, t.devices[0].events);
        let got = replay(&built.events, &built.step_ends);
        let want: Vec<[u64; N_CAT]> = sz.iter().map(|r| r.map(|v| v as u64)).collect();
        assert_eq!(got, want);
        // Pre-existing memory appears at the first time.
        assert_eq!(built.events[0].ts_us, 1000.0);
        assert_eq!(built.events[0].given, Some(Category::Parameter));
        assert!(built.events.iter().all(|e| e.ts_us.is_finite()));
    }

    #[test]
    fn raw_form_replays_exactly() {
        let s = "[[-1, 1, 1024, 0], [-1, 1, 512, 7], [100000, 2, 4096, 4], [100000, 2, 2048, 3], \
                 [101000, 4, -2048, 3], [102000, 3, -4096, 4], [102000, 3, 4096, 6], \
                 [103000, 2, 300, 5], [104000, 4, -100, 5], [105000, 4, -512, 7]]";
        assert!(looks_like_memory_timeline(s.as_bytes()));
        let t = parse_memory_timeline(s.as_bytes()).unwrap();
        let ev = &t.devices[0].events;
        assert_eq!(ev[0].ts_us, 100.0); // pre-existing at the first real time
        assert_eq!(ev[0].action, Action::Alloc);
        assert_eq!(ev[0].given, Some(Category::Parameter));
        assert_eq!(ev[1].given, Some(Category::Unknown));
        // INCREMENT_VERSION: activation → autograd_detail
        assert!(ev
            .iter()
            .any(|e| e.action == Action::Alloc && e.given == Some(Category::AutogradDetail)));
        let rows = raw_rows_from_nodes(match &parse_nodes(s.as_bytes()).unwrap() {
            Node::List(items) => items,
            _ => unreachable!(),
        })
        .unwrap();
        let built = build_raw(&rows);
        assert_eq!(&built.events, ev);
        assert_eq!(replay(&built.events, &built.step_ends), running_sums(&rows));
    }

    /// The per-category series PyTorch's `_coalesce_timeline` derives from raw rows.
    fn running_sums(rows: &[RawRow]) -> Vec<[u64; N_CAT]> {
        let mut out = Vec::new();
        let mut sums = [0i64; N_CAT];
        let mut prev = None;
        for r in rows {
            let key = r.t_ns.max(-1);
            if prev.is_some_and(|p| p != key) {
                out.push(sums.map(|v| v as u64));
            }
            prev = Some(key);
            sums[(r.category as usize).min(N_CAT - 1)] += r.bytes;
        }
        out.push(sums.map(|v| v as u64));
        out
    }

    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn corpus_raw_timeline() {
        let dir = crate::test_support::corpus_dir();
        let path = dir.join("hta/tests/data/memory_analysis/memory_timeline.raw.gz");
        let bytes = crate::test_support::read_maybe_gz(&path);
        assert!(looks_like_memory_timeline(&bytes));
        let t0 = std::time::Instant::now();
        let t = parse_memory_timeline(&bytes).unwrap();
        let ms = t0.elapsed().as_secs_f64() * 1000.0;
        let rows = raw_rows_from_nodes(match &parse_nodes(&bytes).unwrap() {
            Node::List(items) => items,
            _ => unreachable!(),
        })
        .unwrap();
        assert_eq!(rows.len(), 16845);
        let built = build_raw(&rows);
        assert_eq!(built.clamped, 0);
        let want = running_sums(&rows);
        assert_eq!(replay(&built.events, &built.step_ends), want);
        let peak: u64 = want.iter().map(|r| r.iter().sum::<u64>()).max().unwrap();
        let mut by_cat = [0u64; N_CAT];
        for e in &t.devices[0].events {
            if e.action == Action::Alloc {
                by_cat[INDEX_TO_CATEGORY
                    .iter()
                    .position(|&c| Some(c) == e.given)
                    .unwrap()] += 1;
            }
        }
        println!(
            "memory_timeline.raw.gz: {} rows, {} steps, {} events, peak {} bytes, allocs per category {:?}, {ms:.1} ms",
            rows.len(),
            built.step_ends.len(),
            t.devices[0].events.len(),
            peak,
            INDEX_TO_CATEGORY.iter().zip(by_cat).collect::<Vec<_>>()
        );
    }

    #[test]
    fn sniffing() {
        assert!(looks_like_memory_timeline(
            b"[[1, 2], [[0, 1, 2, 3, 4, 5, 6, 7, 8], [0,0,0,0,0,0,0,0,0]]]"
        ));
        assert!(looks_like_memory_timeline(
            b"  [[-1, 1, 37888, 7], [-1, 1, 512, 7]"
        ));
        assert!(looks_like_memory_timeline(b"[[], []]"));
        assert!(!looks_like_memory_timeline(b"[{\"ph\":\"X\"}]"));
        assert!(!looks_like_memory_timeline(b"{\"traceEvents\": []}"));
        assert!(!looks_like_memory_timeline(b"[]"));
        assert!(!looks_like_memory_timeline(b""));
        assert!(!looks_like_memory_timeline(b"[[\"a\"]]"));
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        for s in [
            "",
            "  ",
            "[]",
            "{}",
            "[[], []]",
            "[[1], []]",
            "[[1,2,3]]",
            "[1, 2]",
            "[[1, 2], [3]]",
            "nonsense",
            "[[1, 2, 3, 4]",
            "[[\"x\", 1, 2, 3]]",
            "[[1, 1, 2, 99]]",
            "[[1,1,-5,0]]",
        ] {
            match parse_memory_timeline(s.as_bytes()) {
                Ok(t) => assert!(!t.devices[0].events.is_empty(), "{s}"),
                Err(Error::Json(_) | Error::UnknownFormat(_) | Error::NoMemoryEvents) => {}
                Err(e) => panic!("{s}: unexpected {e}"),
            }
        }
        assert!(matches!(
            parse_memory_timeline(b"[]"),
            Err(Error::NoMemoryEvents)
        ));
        assert!(matches!(
            parse_memory_timeline(b"{}"),
            Err(Error::UnknownFormat(_))
        ));
        assert!(matches!(
            parse_memory_timeline(b"[[1,"),
            Err(Error::Json(_))
        ));
        let t = parse_memory_timeline(b"[[1, 1, 2, 99]]").unwrap();
        assert!(t
            .diagnostics
            .iter()
            .any(|d| d.message.contains("unknown category")));
        assert!(parse_memory_timeline(b"[[1, 1, 2, NaN]]").is_err());
    }

    proptest! {
        #[test]
        fn series_replay_matches_random_input(
            rows in proptest::collection::vec(proptest::array::uniform8(0i64..5000), 1..40)
        ) {
            let times: Vec<f64> = (0..rows.len()).map(|i| 1e6 + i as f64).collect();
            let built = build_series(&times, &rows);
            let want: Vec<[u64; N_CAT]> = rows.iter().map(|r| r.map(|v| v as u64)).collect();
            prop_assert_eq!(replay(&built.events, &built.step_ends), want);
        }

        #[test]
        fn raw_replay_matches_random_input(
            ops in proptest::collection::vec((0usize..N_CAT, 1i64..5000, any::<bool>(), 0i64..3), 1..60)
        ) {
            // Generate consistent raw rows: frees only of bytes that are live.
            let mut live = [0i64; N_CAT];
            let mut rows = Vec::new();
            let mut t = 1_000_000i64;
            for (c, b, free, dt) in ops {
                t += dt * 1000;
                if free && live[c] > 0 {
                    let b = b.min(live[c]);
                    live[c] -= b;
                    rows.push(RawRow { t_ns: t, action: 4, bytes: -b, category: c as i64 });
                } else {
                    live[c] += b;
                    rows.push(RawRow { t_ns: t, action: 2, bytes: b, category: c as i64 });
                }
            }
            let built = build_raw(&rows);
            prop_assert_eq!(built.clamped, 0);
            prop_assert_eq!(replay(&built.events, &built.step_ends), running_sums(&rows));
        }
    }
}
