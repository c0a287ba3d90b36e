//! The streaming reader (issue 16): a Chrome trace read from a stream of
//! chunks, never held whole, with the result the strict `serde_json` pass
//! (`collect::parse_strict`) gives on the whole buffer, or none at all.
//!
//! - **Chunks.** [`Feed`] parses each item (a top-level key, one event with
//!   its separator) straight from the reader's buffer; an item cut by the
//!   end of a buffer is parsed again from a small stitch of the two
//!   ([`Feed::item`]). Memory holds a chunk, one stitched item and what the
//!   collector keeps, not the file.
//! - **Events.** [`event`] reads the fields the skeleton reads (the
//!   `record_shapes` inputs of the operator calls memcut reads them for
//!   included) and validates everything it skips as `serde_json` would
//!   (strings, escapes, control characters, number grammar, literals,
//!   nesting); the tokens are `stream/token.rs`'s. Whatever it does not
//!   model (a number where a name belongs, an escaped key, `-0`, invalid
//!   JSON) makes it [`Stop::Unsure`] and that one event goes through
//!   `serde_json` with the skeleton's own [`EventSeed`]. Top-level values other than `traceEvents` (small) go
//!   through `serde_json` with the skeleton's types too. The bytes between
//!   an event's values (a comma, whitespace, a key, a colon) are mostly the
//!   bytes of the event before; `stream/gaps.rs` matches them whole.
//! - **Declining.** Anything `serde_json` refuses (damage of any kind:
//!   `NaN`, raw control characters, a cut or truncated file, a trailing
//!   comma), a read error, or an object without a top-level `traceEvents`
//!   makes [`read_streamed`] return `None`: the caller then reads the input
//!   again the plain way (`input.rs`), which repairs or recovers and words
//!   the errors. So no damaged file is ever read differently.
//!
//! Tested against the plain path on every sample, corpus and broken trace
//! (`tests/streaming.rs`). Speed: see `read_streamed`.

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::de::{DeserializeSeed, IgnoredAny};

mod gaps;
mod token;

use gaps::{Field, Gaps, Kind, END};
#[cfg(test)]
pub(super) use token::NUMBERS;
use token::{json_number, key, literal, skip_value, text, value_end, ws};

use super::collect::Collector;
use super::skeleton::{DeviceProp, EventSeed, Id, LStr, MemArgs, Num, RawEvent, RawInputs};
use super::{build, ReadError};
use crate::model::Trace;

/// Why a parse stopped short of an item.
///
/// A word wide, not a byte: a `Parsed<Cow<str>>` (a name, a category) keeps
/// its `Err` in the word after `Cow`'s niche, and with a one-byte `Stop`
/// the compiler moved every such result as a byte and fifteen bytes, each
/// move loading eight bytes across two earlier stores, which the CPU cannot
/// forward (perf annotate: a third of the event reader's own samples on
/// trace-adamw.json sat on those loads). Word-sized, the result moves as
/// whole words: trace-adamw.json 0.85x user time, 0.83–0.91x wall on the
/// bench traces (docs/performance.md, twenty-fourth session).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub(super) enum Stop {
    /// The slice ends inside the item: parse again with more bytes.
    More,
    /// Something this reader does not model, or not JSON: `serde_json` decides.
    Unsure,
}

type Parsed<T> = Result<T, Stop>;

const _: () = assert!(std::mem::size_of::<Stop>() == 8);

/// Bytes added to a stitch at a time (at least; doubled as it grows).
const STITCH: usize = 4 << 10;

/// Reads a Chrome trace in the object form from `reader` (positioned at
/// its first byte). `None`: not read here (see the module doc); the
/// caller reads the input again the plain way.
///
/// Measured whole-process, `memcut analyze -f json FILE`, release build,
/// medians of 5 runs taken side by side (A B A B) against the binary of
/// main before this reader (whole buffer, strict `serde_json`), on the
/// inputs of `scripts/bench_inputs.sh`, 2 cores shared with other jobs
/// (2026-12-03; together with the attribution and classify changes of the
/// same branch):
///
/// | input | CPU | wall | peak RSS |
/// |---|---|---|---|
/// | trace-owlv2.json (335 MB, TraceLens) | 1.89 s -> 1.15 s (0.62x) | 2.78 s -> 1.60 s | 379 -> 56 MB |
/// | trace-adamw.json (304 MB, CPU profiler) | 1.91 s -> 1.18 s (0.66x) | 2.74 s -> 1.73 s | 370 -> 78 MB |
/// | trace-resnet50.json (317 MB, Kineto 2021) | 1.27 s -> 0.68 s (0.55x) | 1.34 s -> 0.91 s | 348 -> 45 MB |
/// | trace-owlv2.json.gz (18 MB) | 1.88 s -> 1.17 s (0.62x) | 2.85 s -> 1.60 s | 379 -> 57 MB |
///
/// Against `python scripts/trace_peak.py` (`json.load` + the largest
/// `Total Allocated`) on trace-owlv2.json: 13.1 s vs 1.72 s wall (7.7x),
/// 1476 MB vs 56 MB.
///
/// Then the token readers (`stream/token.rs`: integers read while their
/// digits are scanned, a word at a time; floats by the exact fast path;
/// whitespace runs and short strings a word at a time, long ones with
/// `memchr`; operator inputs read here, not by `serde_json`). Instructions
/// of the whole process (`valgrind --tool=callgrind memcut analyze FILE -f
/// json -o /dev/null`), main's binary of 16:55 -> this reader:
/// trace-resnet50.json 6.54 G -> 4.48 G (0.68x), trace-owlv2.json
/// 9.44 G -> 6.69 G (0.71x). Whole-process, medians of 5 side by side
/// (A B A B), 2 cores shared with other jobs (2026-12-03; together with
/// main's two-thread read, `split.rs`, which runs only when two cores are
/// free; peak RSS is that read's):
///
/// | input | CPU | wall |
/// |---|---|---|
/// | trace-owlv2.json | 1.38 s -> 1.00 s (0.74x) | 1.40 s -> 0.97 s |
/// | trace-adamw.json | 1.33 s -> 1.07 s (0.79x) | 1.25 s -> 0.99 s |
/// | trace-resnet50.json | 0.92 s -> 0.66 s (0.71x) | 0.93 s -> 0.66 s |
/// | trace-owlv2.json.gz | 1.44 s -> 1.27 s (0.89x) | 1.23 s -> 0.86 s |
///
/// The token readers alone (against main with the two-thread read): CPU
/// 0.75x on trace-owlv2.json, 0.72x on trace-resnet50.json, 0.83x on the
/// `.json.gz`. The `.json.gz` against `zcat FILE > /dev/null` (medians of
/// 7 side by side): 0.91 s vs 1.04 s wall (0.86x) when the two-thread read
/// runs; read on one thread (no free core) it is still about 1.2x zcat.
pub(super) fn read_streamed(reader: &mut dyn BufRead) -> Option<Result<Trace, ReadError>> {
    read_counted(reader).map(|(trace, _)| trace)
}

/// How the events of a streamed trace were read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counts {
    /// Elements of `traceEvents`.
    pub(super) events: usize,
    /// Of those, the ones [`event`] left to `serde_json`.
    pub(super) by_serde: usize,
}

/// [`read_streamed`], and how its events were read.
pub(super) fn read_counted(reader: &mut dyn BufRead) -> Option<(Result<Trace, ReadError>, Counts)> {
    let mut col = Collector::default();
    let mut feed = Feed::new(reader, None);
    if !read_top(&mut feed, &mut col)? {
        return None;
    }
    Some((build::build_trace(col.finish(), Vec::new()), feed.counts))
}

/// Where a read of the start of a file stopped (`split.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Head {
    /// At the given offset, which is the start of an element of
    /// `traceEvents` (just after the comma before it).
    Reached,
    /// The offset is not where an element starts: the read went on to the
    /// end of the file instead.
    Whole,
}

/// What the two threads of a split read (`split.rs`) share.
pub(crate) struct Meeting {
    claims: Mutex<Claims>,
    /// Raised when the second thread's result is no longer wanted.
    pub(super) cancel: AtomicBool,
    /// How far past the offset it last published the first thread may
    /// read before it looks at the claims again: a claim below that is
    /// refused ([`Meeting::MARGIN`]).
    pub(super) margin: u64,
    /// The smallest piece the second thread starts after its first.
    pub(super) min_piece: u64,
}

/// Where each thread of a split read is, as the other one may know it.
struct Claims {
    /// The offsets the second thread reads pieces from (each piece up to
    /// the next, the last to the end of the file). A guess may lie inside
    /// a string: the first thread stops at the first one it meets exactly
    /// at an element's start, and passes the others.
    starts: Vec<u64>,
    /// Where the first thread was when it last looked at `starts`.
    head: u64,
    /// The first thread has stopped, or read to the end: no more claims.
    head_done: bool,
}

impl Meeting {
    /// How far past the offset it last published the first thread may
    /// read before it looks at the claims again: a reader's buffer (1 MiB
    /// at most in `split.rs`'s readers), an element stitched across its
    /// end, and room to spare. Only a matter of speed: a claim the first
    /// thread passed unseen is a piece the join drops.
    pub(super) const MARGIN: u64 = 3 << 20;
    /// The smallest piece the second thread starts after its first: below
    /// this the first thread reads the rest (a piece costs a join).
    pub(super) const MIN_PIECE: u64 = 4 << 20;

    pub(super) fn new() -> Meeting {
        Meeting::sized(Meeting::MARGIN, Meeting::MIN_PIECE)
    }

    /// A meeting with other sizes than the file readers' (tests: pieces
    /// of a small input).
    pub(super) fn sized(margin: u64, min_piece: u64) -> Meeting {
        Meeting {
            claims: Mutex::new(Claims {
                starts: Vec::new(),
                head: 0,
                head_done: false,
            }),
            cancel: AtomicBool::new(false),
            margin,
            min_piece,
        }
    }

    fn claims(&self) -> std::sync::MutexGuard<'_, Claims> {
        // A thread that panicked holding it leaves plain numbers behind.
        self.claims.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the first thread before either starts where the second
    /// will read from (tests: else a small input may be read to its end
    /// before the second thread has said).
    #[cfg(test)]
    pub(super) fn tell(&self, at: u64) {
        self.claims().starts.push(at);
    }

    /// The second thread asks to read a piece from `at` on: granted when
    /// that is an offset already told, or while the first thread is still
    /// far enough before it ([`Meeting::MARGIN`]) to see the claim in time.
    pub(super) fn claim(&self, at: u64) -> bool {
        let mut c = self.claims();
        if c.starts.contains(&at) {
            return true;
        }
        if c.head_done || at < c.head.saturating_add(self.margin) {
            return false;
        }
        c.starts.push(at);
        true
    }

    /// The second thread takes back its claim of a piece from `at` (it
    /// could not read it), so that the first thread reads on past it.
    pub(super) fn unclaim(&self, at: u64) {
        self.claims().starts.retain(|&s| s != at);
    }

    /// The first thread's offset at its last look (the second thread's
    /// estimate of where it is).
    pub(super) fn head(&self) -> u64 {
        self.claims().head
    }

    /// The first thread is at `position`: publishes it, and gives the
    /// lowest claim at or after it.
    fn look(&self, position: u64) -> Option<u64> {
        let mut c = self.claims();
        c.head = c.head.max(position);
        c.starts.iter().copied().filter(|&s| s >= position).min()
    }

    /// The first thread claims nothing more (it stopped, or read to the
    /// end): the second thread starts no further piece.
    fn head_done(&self) {
        self.claims().head_done = true;
    }
}

/// Reads a Chrome trace like [`read_counted`], but stops at the lowest
/// offset the other thread claimed in `meeting` (it may lower it while
/// this one reads) if an element of `traceEvents` starts exactly there:
/// the elements from there on are [`read_tail`]'s; with the offset where
/// it stopped. `None`: declined, as [`read_streamed`] declines.
pub(super) fn read_head(
    reader: &mut dyn BufRead,
    meeting: &Meeting,
) -> Option<(Collector, Counts, Head, u64)> {
    let mut col = Collector::default();
    let mut feed = Feed::new(reader, Some(meeting));
    feed.watching = true;
    let top = read_top(&mut feed, &mut col);
    meeting.head_done();
    if !top? {
        return None;
    }
    let head = if feed.stopped {
        Head::Reached
    } else {
        Head::Whole
    };
    Some((col, feed.counts, head, feed.position()))
}

/// Reads the rest of a Chrome trace from the start of an element of
/// `traceEvents` (just after a comma), into a collector that remembers
/// what [`Collector::append`] needs: up to `end` (an offset from the
/// reader's start) if an element starts exactly there (`true`), else to
/// the end of the file (`false`). Only meaningful when [`read_head`] (or
/// the piece before) confirms that an element starts where it starts.
/// `None`: declined, or cancelled.
pub(super) fn read_tail(
    reader: &mut dyn BufRead,
    end: Option<u64>,
    meeting: &Meeting,
) -> Option<(Collector, Counts, bool)> {
    let mut col = Collector::for_tail();
    let mut feed = Feed::new(reader, Some(meeting));
    feed.stop = end;
    col.saw_trace_events = true;
    read_elements(&mut feed, &mut col)?;
    if feed.stopped {
        return Some((col, feed.counts, true));
    }
    let more = feed.item(|s| {
        let mut i = 0;
        let more = separator(s, &mut i, b'}')?;
        Ok((i, more))
    })?;
    read_keys(&mut feed, &mut col, more)?;
    Some((col, feed.counts, false))
}

/// The top-level object; whether it had a `traceEvents` key.
fn read_top(feed: &mut Feed<'_>, col: &mut Collector) -> Option<bool> {
    let more = feed.item(open_top)?;
    read_keys(feed, col, more)
}

/// The keys and values of the top-level object from one that follows
/// (`more`) to the end of the file; whether a `traceEvents` key was among
/// them (or the read stopped in one, at [`Feed::stop`]).
fn read_keys(feed: &mut Feed<'_>, col: &mut Collector, mut more: bool) -> Option<bool> {
    let mut saw_trace_events = false;
    while more {
        let key = feed.item(top_key)?;
        if key == "traceEvents" {
            saw_trace_events = true;
            read_events(feed, col)?;
            if feed.stopped {
                return Some(true);
            }
            more = feed.item(|s| {
                let mut i = 0;
                let more = separator(s, &mut i, b'}')?;
                Ok((i, more))
            })?;
        } else {
            more = feed.item(|s| top_value(s, &key, col))?;
        }
    }
    // Only JSON whitespace may follow (as `serde_json`'s `end` checks).
    loop {
        let buf = feed.reader.fill_buf().ok()?;
        if buf.is_empty() {
            return Some(saw_trace_events);
        }
        if !buf
            .iter()
            .all(|&b| matches!(b, b' ' | b'\n' | b'\r' | b'\t'))
        {
            return None;
        }
        let n = buf.len();
        feed.take(n);
    }
}

/// A UTF-8 byte order mark and ASCII whitespace (as `input.rs` skips them
/// before the plain parse), then `{`; whether the object has keys.
fn open_top(s: &[u8]) -> Parsed<(usize, bool)> {
    const BOM: &[u8] = b"\xef\xbb\xbf";
    let mut i = 0;
    if s.starts_with(BOM) {
        i = 3;
    } else if s.len() < 3 && BOM.starts_with(s) {
        return Err(Stop::More);
    }
    while s.get(i).ok_or(Stop::More)?.is_ascii_whitespace() {
        i += 1;
    }
    if s[i] != b'{' {
        return Err(Stop::Unsure);
    }
    i += 1;
    if ws(s, &mut i)? == b'}' {
        i += 1;
        return Ok((i, false));
    }
    Ok((i, true))
}

/// A top-level key and its colon.
fn top_key(s: &[u8]) -> Parsed<(usize, String)> {
    let mut i = 0;
    let key = std::str::from_utf8(key(s, &mut i)?).map_err(|_| Stop::Unsure)?;
    Ok((i, key.to_owned()))
}

/// A top-level value other than `traceEvents`, read by `serde_json` with
/// the skeleton's types, and the separator after it.
fn top_value(s: &[u8], key: &str, col: &mut Collector) -> Parsed<(usize, bool)> {
    let mut i = 0;
    ws(s, &mut i)?;
    let start = i;
    value_end(s, &mut i)?;
    let raw = &s[start..i];
    let more = separator(s, &mut i, b'}')?;
    let unsure = |_| Stop::Unsure;
    match key {
        "deviceProperties" => {
            let props: Option<Vec<DeviceProp<'_>>> = serde_json::from_slice(raw).map_err(unsure)?;
            col.set_device_props(props.unwrap_or_default());
        }
        "distributedInfo" => col.set_distributed(serde_json::from_slice(raw).map_err(unsure)?),
        "baseTimeNanoseconds" => {
            col.set_base_time(serde_json::from_slice::<Num>(raw).map_err(unsure)?.i64())
        }
        _ => {
            serde_json::from_slice::<IgnoredAny>(raw).map_err(unsure)?;
            col.note_top_key(key);
        }
    }
    Ok((i, more))
}

/// `traceEvents`: its `[`, every element, its `]`.
fn read_events(feed: &mut Feed<'_>, col: &mut Collector) -> Option<()> {
    col.saw_trace_events = true;
    let more = feed.item(|s| {
        let mut i = 0;
        if ws(s, &mut i)? != b'[' {
            return Err(Stop::Unsure);
        }
        i += 1;
        if ws(s, &mut i)? == b']' {
            return Ok((i + 1, false));
        }
        Ok((i, true))
    })?;
    if more {
        read_elements(feed, col)?;
    }
    Some(())
}

/// The elements of `traceEvents` from the start of one to its `]` (or to
/// [`Feed::stop`]).
fn read_elements(feed: &mut Feed<'_>, col: &mut Collector) -> Option<()> {
    // The bytes between the values of the events read so far.
    let mut gaps = Box::<Gaps>::default();
    loop {
        if feed
            .meeting
            .is_some_and(|m| m.cancel.load(Ordering::Relaxed))
        {
            return None;
        }
        // As many whole elements as the reader's buffer holds, then one
        // stitched across its end.
        if feed.carry.is_empty() {
            // Where the buffer is in the file, and where to stop in it.
            let base = feed.taken;
            let stop_in = feed.stop().map(|at| at.saturating_sub(base));
            let buf = feed.reader.fill_buf().ok()?;
            let mut pos = 0;
            let counts = &mut feed.counts;
            let stop = loop {
                match element(&buf[pos..], col, counts, &mut gaps) {
                    Ok((n, next)) => {
                        pos += n;
                        if !next {
                            break None;
                        }
                        if let Some(at) = stop_in.filter(|&at| pos as u64 >= at) {
                            break Some(Err(pos as u64 == at));
                        }
                    }
                    Err(stop) => break Some(Ok(stop)),
                }
            };
            feed.take(pos);
            match stop {
                None => return Some(()),
                Some(Err(reached)) => {
                    if feed.passed(reached) {
                        return Some(());
                    }
                    continue;
                }
                Some(Ok(Stop::Unsure)) => return None,
                Some(Ok(Stop::More)) => {}
            }
        }
        let mut counts = feed.counts;
        let more = feed.item(|s| element(s, col, &mut counts, &mut gaps))?;
        feed.counts = counts;
        if !more {
            return Some(());
        }
        if let Some(at) = feed.stop() {
            let pos = feed.position();
            if pos >= at && feed.passed(pos == at) {
                return Some(());
            }
        }
    }
}

/// One element of `traceEvents` and the separator after it: pushed into
/// `col` only once all of it has been read. Whether more elements follow.
fn element(
    s: &[u8],
    col: &mut Collector,
    counts: &mut Counts,
    gaps: &mut Gaps,
) -> Parsed<(usize, bool)> {
    let mut i = 0;
    ws(s, &mut i)?;
    let start = i;
    let mut by_serde = 0;
    // Built in place: an event is a few hundred bytes, moved for nothing
    // otherwise.
    let mut ev = RawEvent::default();
    let is_event = match event(s, &mut i, &mut ev, gaps) {
        Ok(()) => true,
        Err(Stop::More) => return Err(Stop::More),
        Err(Stop::Unsure) => {
            by_serde = 1;
            let parsed;
            (parsed, i) = by_serde_json(s, start)?;
            match parsed {
                Some(parsed) => {
                    ev = parsed;
                    true
                }
                None => false,
            }
        }
    };
    let more = separator(s, &mut i, b']')?;
    if is_event {
        col.push(&ev);
    }
    counts.events += 1;
    counts.by_serde += by_serde;
    Ok((i, more))
}

/// The element at `start` read by the skeleton's own visitor: the same
/// result as in the whole-buffer parse, or an error (declined); and where
/// it ends. Read from the rest of the slice first, which needs no scan for
/// its end; when that fails (perhaps only because the slice ends inside
/// the element: `serde_json` does not always say so), from its exact
/// bytes, found by [`value_end`].
fn by_serde_json(s: &[u8], start: usize) -> Parsed<(Option<RawEvent<'_>>, usize)> {
    let mut elements = serde_json::Deserializer::from_slice(&s[start..]).into_iter::<Element>();
    if let Some(Ok(Element(parsed))) = elements.next() {
        return Ok((parsed, start + elements.byte_offset()));
    }
    let mut end = start;
    value_end(s, &mut end)?;
    let mut de = serde_json::Deserializer::from_slice(&s[start..end]);
    let parsed = EventSeed.deserialize(&mut de).map_err(|_| Stop::Unsure)?;
    de.end().map_err(|_| Stop::Unsure)?;
    Ok((parsed, end))
}

/// An element read by [`EventSeed`], as `serde_json`'s stream reader (which
/// says where a value ends) wants it: a type, not a seed.
struct Element<'a>(Option<RawEvent<'a>>);

impl<'de> serde::Deserialize<'de> for Element<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        EventSeed.deserialize(d).map(Element)
    }
}

/// Whitespace, then `,` (true) or `close` (false).
fn separator(s: &[u8], i: &mut usize, close: u8) -> Parsed<bool> {
    let b = ws(s, i)?;
    *i += 1;
    match b {
        b',' => Ok(true),
        _ if b == close => Ok(false),
        _ => Err(Stop::Unsure),
    }
}

/// Where a reader's bytes are parsed from: its own buffer, or `carry` when
/// an item runs past the end of that buffer.
struct Feed<'r> {
    reader: &'r mut dyn BufRead,
    /// The start of an item, already taken from the reader.
    carry: Vec<u8>,
    counts: Counts,
    /// Bytes taken from the reader so far.
    taken: u64,
    /// [`read_head`]'s offset, until the elements reach or pass it.
    stop: Option<u64>,
    /// [`read_head`] has not yet learnt its offset from the meeting.
    watching: bool,
    /// The elements reached [`Feed::stop`] exactly: the read ends there.
    stopped: bool,
    meeting: Option<&'r Meeting>,
}

impl<'r> Feed<'r> {
    fn new(reader: &'r mut dyn BufRead, meeting: Option<&'r Meeting>) -> Feed<'r> {
        Feed {
            reader,
            carry: Vec::new(),
            counts: Counts::default(),
            taken: 0,
            stop: None,
            watching: false,
            stopped: false,
            meeting,
        }
    }

    /// Where [`read_head`] is to stop, as far as it knows yet: the lowest
    /// claim of the other thread ahead of it (which may claim a lower one
    /// later, but none this read could pass before its next look).
    fn stop(&mut self) -> Option<u64> {
        if self.watching {
            let position = self.position();
            self.stop = self.meeting.and_then(|m| m.look(position));
        }
        self.stop
    }

    fn take(&mut self, n: usize) {
        self.reader.consume(n);
        self.taken += n as u64;
    }

    /// The offset of the next byte to parse.
    fn position(&self) -> u64 {
        self.taken - self.carry.len() as u64
    }

    /// The elements got to [`Feed::stop`] or past it: whether the read
    /// ends there (`exactly`), else it reads on without a stop.
    fn passed(&mut self, exactly: bool) -> bool {
        // Watching, a claim passed (not an element's start) leaves the
        // claims above it to meet at.
        self.stop = None;
        self.stopped = exactly;
        exactly
    }

    /// Parses one item with `parse`, which reads a slice from its start and
    /// says how many bytes the item took. `None`: declined (not JSON as
    /// the plain path wants it, the input ends inside the item, or a read
    /// error).
    fn item<T>(&mut self, mut parse: impl FnMut(&[u8]) -> Parsed<(usize, T)>) -> Option<T> {
        loop {
            let buf = self.reader.fill_buf().ok()?;
            if buf.is_empty() {
                return None;
            }
            if self.carry.is_empty() {
                match parse(buf) {
                    Ok((n, v)) => {
                        self.take(n);
                        return Some(v);
                    }
                    Err(Stop::Unsure) => return None,
                    Err(Stop::More) => {
                        self.carry.extend_from_slice(buf);
                        let n = buf.len();
                        self.take(n);
                    }
                }
            } else {
                // Bytes appended on trial: taken from the reader only if the
                // item needs them.
                let old = self.carry.len();
                let take = buf.len().min(old.max(STITCH));
                self.carry.extend_from_slice(&buf[..take]);
                match parse(&self.carry) {
                    Ok((n, v)) => {
                        if n >= old {
                            self.take(n - old);
                            self.carry.clear();
                        } else {
                            self.carry.truncate(old);
                            self.carry.drain(..n);
                        }
                        return Some(v);
                    }
                    Err(Stop::Unsure) => return None,
                    Err(Stop::More) => self.take(take),
                }
            }
        }
    }
}

/// A value read as [`Num`]: numbers, numeric strings; anything else `None`.
fn num(s: &[u8], i: &mut usize) -> Parsed<Num> {
    match s[*i] {
        b'-' | b'0'..=b'9' => json_number(s, i),
        b'"' => Ok(Num::from_str(&text(s, i)?)),
        _ => skip_value(s, i).map(|_| Num::None),
    }
}

/// A value read as [`LStr`]: strings; numbers are left to `serde_json`
/// (it spells them), anything else is `None`.
fn lstr<'s>(s: &'s [u8], i: &mut usize) -> Parsed<LStr<'s>> {
    match s[*i] {
        b'"' => Ok(LStr(Some(text(s, i)?))),
        b'-' | b'0'..=b'9' => Err(Stop::Unsure),
        _ => skip_value(s, i).map(|_| LStr(None)),
    }
}

/// A value read as [`Id`]: integers, strings, booleans; floats and
/// integers above `i64::MAX` are left to `serde_json`.
fn id<'s>(s: &'s [u8], i: &mut usize) -> Parsed<Id<'s>> {
    match s[*i] {
        b'-' | b'0'..=b'9' => match json_number(s, i)? {
            Num::I(v) => Ok(Id::Int(v)),
            _ => Err(Stop::Unsure),
        },
        b'"' => Ok(Id::from_cow(text(s, i)?)),
        b't' => literal(s, i, b"true").map(|_| Id::Int(1)),
        b'f' => literal(s, i, b"false").map(|_| Id::Int(0)),
        _ => skip_value(s, i).map(|_| Id::None),
    }
}

/// One trace event (an object at `*i`) as [`EventSeed`] reads it, into
/// `ev` (a default one); the bytes between its values as `gaps` last saw
/// them at the same place, or read token by token.
fn event<'s>(s: &'s [u8], i: &mut usize, ev: &mut RawEvent<'s>, gaps: &mut Gaps) -> Parsed<()> {
    if s[*i] != b'{' {
        return Err(Stop::Unsure);
    }
    let mut place = 0;
    loop {
        match gaps.next(Kind::Event, place, s, i, event_field)? {
            PH => ev.ph = lstr(s, i)?,
            CAT => ev.cat = lstr(s, i)?,
            NAME => ev.name = lstr(s, i)?,
            PID => ev.pid = id(s, i)?,
            TID => ev.tid = id(s, i)?,
            TS => ev.ts = num(s, i)?,
            DUR => ev.dur = num(s, i)?,
            ARGS => {
                if ev.reads_inputs() {
                    (ev.args, ev.inputs) = input_args(s, i)?;
                } else {
                    ev.args = mem_args(s, i, gaps)?;
                    ev.inputs = None;
                }
            }
            END => return Ok(()),
            _ => skip_value(s, i)?,
        }
        place += 1;
    }
}

/// An event's fields, as [`Gaps`] names them.
const PH: Field = 0;
const CAT: Field = 1;
const NAME: Field = 2;
const PID: Field = 3;
const TID: Field = 4;
const TS: Field = 5;
const DUR: Field = 6;
const ARGS: Field = 7;
const OTHER: Field = 8;

fn event_field(k: &[u8]) -> Field {
    match k {
        b"ph" => PH,
        b"cat" => CAT,
        b"name" => NAME,
        b"pid" => PID,
        b"tid" => TID,
        b"ts" => TS,
        b"dur" => DUR,
        b"args" => ARGS,
        _ => OTHER,
    }
}

/// An event's `args` as [`MemArgs`] reads them: the memory fields of an
/// object, defaults for any other value.
fn mem_args(s: &[u8], i: &mut usize, gaps: &mut Gaps) -> Parsed<MemArgs> {
    let mut a = MemArgs::default();
    if s[*i] != b'{' {
        skip_value(s, i)?;
        return Ok(a);
    }
    let mut place = 0;
    loop {
        let field = gaps.next(Kind::Args, place, s, i, args_field)?;
        if field == END {
            return Ok(a);
        }
        match MEMORY_FIELDS.get(usize::from(field)) {
            Some((_, slot)) => *slot(&mut a) = num(s, i)?,
            None => skip_value(s, i)?,
        }
        place += 1;
    }
}

/// The memory fields of `args`: each one's key and where [`MemArgs`]
/// keeps it. [`Gaps`] names a field by its index here.
const MEMORY_FIELDS: [(&[u8], Slot); 7] = [
    (b"Device Type", |a| &mut a.device_type),
    (b"Device Id", |a| &mut a.device_id),
    (b"Bytes", |a| &mut a.bytes),
    (b"Addr", |a| &mut a.addr),
    (b"Total Allocated", |a| &mut a.total_allocated),
    (b"Total Reserved", |a| &mut a.total_reserved),
    (b"Ev Idx", |a| &mut a.ev_idx),
];

/// Where [`MemArgs`] keeps one memory field.
type Slot = fn(&mut MemArgs) -> &mut Num;

/// A key of `args`: its index in [`MEMORY_FIELDS`], else [`OTHER`].
fn args_field(k: &[u8]) -> Field {
    MEMORY_FIELDS
        .iter()
        .position(|&(key, _)| key == k)
        .map_or(OTHER, |n| n as Field)
}

/// The `args` of an operator call whose `record_shapes` inputs memcut
/// reads, as the skeleton's `ArgsSeed` reads them: an object's `Input
/// Dims` and `Input type` (no memory fields); no inputs for other values.
fn input_args<'s>(s: &'s [u8], i: &mut usize) -> Parsed<(MemArgs, Option<RawInputs<'s>>)> {
    let mut inputs = RawInputs::default();
    let object = entries(s, i, |k, i| {
        match k {
            b"Input Dims" => inputs.dims = list(s, i, dims)?,
            b"Input type" => inputs.types = list(s, i, lstr)?,
            _ => skip_value(s, i)?,
        }
        Ok(())
    })?;
    Ok((MemArgs::default(), object.then_some(inputs)))
}

/// The entries of the object at `*i`: each key is handed to `entry` with
/// `*i` at its value, which `entry` reads past. `false` (the value
/// skipped) when the value is not an object.
#[inline]
fn entries<'s>(
    s: &'s [u8],
    i: &mut usize,
    mut entry: impl FnMut(&'s [u8], &mut usize) -> Parsed<()>,
) -> Parsed<bool> {
    if s[*i] != b'{' {
        skip_value(s, i)?;
        return Ok(false);
    }
    *i += 1;
    if ws(s, i)? == b'}' {
        *i += 1;
        return Ok(true);
    }
    loop {
        let k = key(s, i)?;
        entry(k, i)?;
        if !separator(s, i, b'}')? {
            return Ok(true);
        }
    }
}

/// A list read item by item, empty for any other value (the skeleton's
/// `ListOf`).
fn list<'s, T>(
    s: &'s [u8],
    i: &mut usize,
    mut item: impl FnMut(&'s [u8], &mut usize) -> Parsed<T>,
) -> Parsed<Vec<T>> {
    let mut out = Vec::new();
    if s[*i] != b'[' {
        skip_value(s, i)?;
        return Ok(out);
    }
    *i += 1;
    if ws(s, i)? == b']' {
        *i += 1;
        return Ok(out);
    }
    loop {
        out.push(item(s, i)?);
        if !separator(s, i, b']')? {
            return Ok(out);
        }
        ws(s, i)?;
    }
}

/// One `Input Dims` entry (the skeleton's `DimsEntry`): the dims of a
/// tensor; `None` for a list holding anything but sizes, or no list.
fn dims(s: &[u8], i: &mut usize) -> Parsed<Option<Vec<u64>>> {
    if s[*i] != b'[' {
        skip_value(s, i)?;
        return Ok(None);
    }
    let mut tensor = true;
    let sizes = list(s, i, |s, i| {
        let d = num(s, i)?.u64();
        tensor &= d.is_some();
        Ok(d.unwrap_or(0))
    })?;
    Ok(tensor.then_some(sizes))
}
