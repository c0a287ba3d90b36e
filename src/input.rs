//! Input: bytes → a parsed [`Trace`], with the format sniffed from content.
//!
//! | first bytes | meaning |
//! |---|---|
//! | `1f 8b` | gzip: inflate (bounded), then sniff again |
//! | `80 0N` | pickle: PyTorch memory snapshot (streamed, never loaded whole) |
//! | `{`…`"traceEvents"`, `[{` | Chrome trace |
//! | `{`…`"segments"`/`"device_traces"` | snapshot saved as JSON |
//! | `[[` numbers | `export_memory_timeline` output |
//! | `<` | `_memory_viz.py` HTML with an embedded pickle |
//!
//! File names are never consulted.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};
use std::rc::Rc;

use flate2::bufread::MultiGzDecoder;

use crate::error::{Error, Result};
use crate::formats::{chrome, pickle, snapshot, timeline_export};
use crate::model::{Diagnostic, Trace};

mod mapped;

/// Bounds on what an input may make memcut do.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Limits {
    /// Most bytes a gzip stream may inflate to.
    pub max_inflated_bytes: u64,
    /// Most bytes a gzip layer may inflate to per compressed byte, checked
    /// once it has inflated 64 MiB (`RATIO_CHECK_AFTER`). Deflate tops out near
    /// 1032:1 and real traces compress 5–50:1, so only bombs come close.
    pub max_inflate_ratio: u64,
    /// Bounds of the pickle reader.
    pub pickle: pickle::Limits,
    /// Whether a big plain Chrome trace may be read through a memory map
    /// of its file instead of `read` calls (`input/mapped.rs`: faster, the
    /// same result; but a file truncated by another process while it is
    /// read ends the process with `SIGBUS`). The `memcut` command sets it;
    /// off by default, so that a library or Python caller never meets that
    /// signal.
    pub map_files: bool,
}

/// Inflated bytes after which [`Limits::max_inflate_ratio`] applies.
pub const RATIO_CHECK_AFTER: u64 = 64 << 20;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_inflated_bytes: default_inflate_limit(),
            max_inflate_ratio: 250,
            pickle: pickle::Limits::default(),
            map_files: false,
        }
    }
}

/// 16 GiB or the memory available, whichever is lower.
fn default_inflate_limit() -> u64 {
    const CAP: u64 = 16 << 30;
    let available = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    });
    available.map_or(CAP, |a| a.min(CAP))
}

/// How [`read_sniffed`] reads text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Text {
    /// All of it into memory, then parsed: every format, every repair.
    Whole,
    /// A Chrome trace in the object form is streamed
    /// ([`chrome::read_chrome_stream`]); when that declines, the read
    /// gives `None` and the input is to be read again [`Text::Whole`].
    Streamed,
}

/// A [`Text::Whole`] read, which always decides.
fn decided(read: Result<Option<Trace>>) -> Result<Trace> {
    read?.ok_or_else(|| Error::Io(std::io::Error::other("a whole read declined")))
}

/// Parses a trace from a reader of raw file bytes.
pub fn read_trace<R: Read>(reader: R, limits: &Limits) -> Result<Trace> {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    decided(read_sniffed(&mut reader, limits, 0, None, Text::Whole))
}

/// Parses a trace file, read as [`read_trace_ahead`] reads it; a Chrome
/// trace is streamed (a few MiB held, not the file) unless it needs the
/// repairs only a whole read can make, in which case the file is read a
/// second time, whole.
pub fn read_file(path: &std::path::Path, limits: &Limits) -> Result<Trace> {
    if let Some(split) = read_split(path, limits) {
        return match split {
            Some(read) => read,
            None => read_trace_ahead(std::fs::File::open(path)?, limits),
        };
    }
    let file = std::fs::File::open(path)?;
    match read_trace_ahead_in(file, limits, 1 << 20, Text::Streamed)? {
        Some(trace) => Ok(trace),
        None => read_trace_ahead(std::fs::File::open(path)?, limits),
    }
}

/// Reads a big Chrome trace in the object form, plain or gzipped, on two
/// threads ([`chrome::read_chrome_two`]): `None` when it is not one, or
/// when two cores are not free for it (`memcut batch`'s rayon workers
/// already fill them); `Some(None)` when the streaming reader declines it
/// (read it whole).
///
/// A plain file is read from its start and from its middle through two
/// handles. A gzip stream can only be inflated from its start, so the
/// second thread inflates the first part too and skips it (inflating is
/// ~4x faster than parsing what it gives); the size is guessed from the
/// gzip trailer (a wrong guess only moves the split).
fn read_split(path: &std::path::Path, limits: &Limits) -> Option<Option<Result<Trace>>> {
    use std::io::{Seek, SeekFrom};
    let cores = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if !cores || rayon::current_thread_index().is_some() {
        return None;
    }
    // One handle for the checks and the first thread's read.
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let (gzip, size) = size_to_read(&mut file, len)?;
    if size < chrome::MIN_SPLIT_BYTES {
        return None;
    }
    // Where the second thread starts. With gzip it inflates all it skips,
    // so it starts later: inflating takes ~1/4 of parsing's time, and the
    // threads are even when the second thread's whole inflate and its
    // share of parsing match the first's share of both (5/9 of the way).
    // A plain file is read in pieces (`read_tail_pieces`): the first one,
    // from 3/5 of the way, is less than half, so that a second one below
    // it evens out the threads' pace.
    let middle = if gzip { size / 9 * 5 } else { size / 5 * 3 };
    // A plain file mapped (`mapped.rs`): both threads read the page cache
    // in place, and the read buffer below is never used.
    let map = match gzip || !limits.map_files {
        true => None,
        false => mapped::Mapped::open(&file, len),
    };
    file.seek(SeekFrom::Start(0)).ok()?;
    let buffer = if map.is_some() { 0 } else { 1 << 20 };
    let mut compressed = BufReader::with_capacity(buffer, file);
    let mut head: Box<dyn BufRead> = match &map {
        Some(map) => Box::new(map.reader(0)),
        None if gzip => {
            let inflated = LimitedReader::new(&mut compressed, limits, Rc::default());
            Box::new(BufReader::with_capacity(1 << 20, inflated))
        }
        None => Box::new(&mut compressed),
    };
    if skip_bom_and_space(head.fill_buf().ok()?).first() != Some(&b'{') {
        return None;
    }
    Some(chrome::read_chrome_two(&mut head, |meeting| {
        if let Some(map) = &map {
            let open = |at| Some(Box::new(map.reader(at)) as Box<dyn BufRead>);
            return chrome::read_tail_pieces(&open, middle, len, meeting);
        }
        if gzip {
            let file = std::fs::File::open(path).ok()?;
            let mut compressed = BufReader::with_capacity(1 << 20, file);
            let mut inflated = LimitedReader::new(&mut compressed, limits, Rc::default());
            chrome::skip_inflated(&mut inflated, middle, meeting)?;
            return chrome::read_tail_near(&mut inflated, middle, meeting);
        }
        let open = |at| {
            let mut file = std::fs::File::open(path).ok()?;
            file.seek(SeekFrom::Start(at)).ok()?;
            Some(Box::new(BufReader::with_capacity(1 << 20, file)) as Box<dyn BufRead>)
        };
        chrome::read_tail_pieces(&open, middle, len, meeting)
    }))
}

/// Whether `file` (`len` bytes, read from its start) is gzip, and the bytes
/// reading it gives: a gzip file's inflated size as its trailer gives it
/// ([`gzip_size_hint`]: a guess), else `len`. `None` for a gzip file whose
/// trailer cannot be read.
pub(crate) fn size_to_read(file: &mut std::fs::File, len: u64) -> Option<(bool, u64)> {
    let mut magic = [0u8; 2];
    let gzip = file.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
    let size = if gzip {
        gzip_size_hint(file, len)?
    } else {
        len
    };
    Some((gzip, size))
}

/// The inflated size the trailer of the gzip `file` (`len` bytes) gives
/// (its last member's, modulo 4 GiB): a guess, good for single-member
/// files under 4 GiB.
fn gzip_size_hint(file: &mut std::fs::File, len: u64) -> Option<u64> {
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(len.checked_sub(4)?))
        .ok()?;
    let mut isize = [0u8; 4];
    file.read_exact(&mut isize).ok()?;
    Some(u64::from(u32::from_le_bytes(isize)))
}

/// Parses a trace from a file (or any reader that can move to a thread),
/// reading it on a second thread a few chunks ahead of the parser: the copy
/// out of the page cache (about a fifth of a large snapshot's parse) then
/// overlaps the parse instead of adding to it, and so does inflating a
/// gzip file (with the same limits as [`read_trace`]). In a pickle, that
/// thread also finds the tracebacks' runs of memo gets
/// (`pickle::GetRunFinder`), so that the parser does not have to read
/// them.
pub fn read_trace_ahead<R: Read + Send>(reader: R, limits: &Limits) -> Result<Trace> {
    decided(read_trace_ahead_in(reader, limits, 1 << 20, Text::Whole))
}

/// [`read_trace_ahead`] in chunks of `chunk_size` bytes.
fn read_trace_ahead_in<R: Read + Send>(
    reader: R,
    limits: &Limits,
    chunk_size: usize,
    text: Text,
) -> Result<Option<Trace>> {
    /// How many chunks may wait: 4 MiB in flight at most.
    const AHEAD: usize = 3;
    std::thread::scope(|scope| {
        let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<std::io::Result<Chunk>>(AHEAD);
        let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let (gzip_tx, gzip_rx) = std::sync::mpsc::channel::<bool>();
        for spare in SpareChunks::take(chunk_size) {
            let _ = empty_tx.send(spare);
        }
        let pump = scope.spawn(move || {
            let mut pump = Pump {
                full: full_tx,
                empty: empty_rx,
                chunk_size,
                finder: None,
                unread: None,
            };
            let mut reader = reader;
            let (mut first, filled, result) = pump.read_chunk(&mut reader);
            let gzip = result.is_ok() && first[..filled].starts_with(&[0x1f, 0x8b]);
            let _ = gzip_tx.send(gzip);
            if gzip {
                first.truncate(filled);
                let source = std::io::Cursor::new(first).chain(reader);
                let mut compressed = BufReader::with_capacity(1 << 16, source);
                // Its errors reach the parser through the chunks.
                let failure = Rc::new(Cell::new(None));
                pump.pump(&mut LimitedReader::new(&mut compressed, limits, failure));
            } else if pump.send_read(first, filled, result) {
                pump.pump(&mut reader);
            }
            // What the parser gave back after the last chunk was read.
            (pump.empty, pump.unread)
        });
        // What the reader thread decided from the first bytes.
        let gzip = gzip_rx.recv().unwrap_or(false);
        let hints = Rc::new(pickle::GetRunHints::default());
        let failure = Rc::new(Cell::new(None));
        let mut chunks = Chunks {
            full: full_rx,
            empty: empty_tx,
            current: Vec::new(),
            pos: 0,
            end: 0,
            hints: Rc::clone(&hints),
            failure: Rc::clone(&failure),
        };
        // `Chunks` buffers already: a `BufReader` on top would only copy.
        let read = if gzip {
            // As `read_sniffed` does with a gzip layer of its own.
            read_sniffed(&mut chunks, limits, 1, Some(hints), text)
                .map_err(|e| stream_error(failure.take(), e))
        } else {
            read_sniffed(&mut chunks, limits, 0, Some(hints), text)
        };
        let current = std::mem::take(&mut chunks.current);
        // Dropped before the reader thread is joined, so that a reader
        // blocked on a full channel wakes up and stops.
        drop(chunks);
        let (empty, unread) = pump.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        let left = [current].into_iter().chain(unread).chain(empty.try_iter());
        SpareChunks::keep(chunk_size, left);
        read
    })
}

/// The read-ahead's chunks kept by a `memcut batch` worker (a rayon
/// thread) from one input to the next: a fresh chunk is zeroed and
/// faulted in (1 MiB for every input, however small, and a few more for a
/// gzip file); a kept one is only written over. Outside rayon (one input,
/// read once) nothing is kept: the chunks are freed as the read ends. A
/// rayon thread keeps at most [`SpareChunks::MOST`] MiB until it ends
/// (`batch::run`'s pool ends with the batch; a library caller's own pool
/// keeps them while it lives).
struct SpareChunks;

thread_local! {
    static SPARE_CHUNKS: std::cell::RefCell<Vec<Vec<u8>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl SpareChunks {
    /// Most chunks a worker keeps: as many as one read has in use at once
    /// (the parser's, the one being read, `AHEAD` waiting, one handed back).
    const MOST: usize = 6;

    /// This worker's kept chunks of `chunk_size` bytes.
    fn take(chunk_size: usize) -> Vec<Vec<u8>> {
        if rayon::current_thread_index().is_none() {
            return Vec::new();
        }
        let mut kept = SPARE_CHUNKS.with(|s| std::mem::take(&mut *s.borrow_mut()));
        kept.retain(|c| c.len() == chunk_size);
        kept
    }

    /// Keeps `chunks` (those of `chunk_size` bytes, up to [`Self::MOST`])
    /// for this worker's next input.
    fn keep(chunk_size: usize, chunks: impl Iterator<Item = Vec<u8>>) {
        if rayon::current_thread_index().is_none() {
            return;
        }
        SPARE_CHUNKS.with(|s| {
            let mut kept = s.borrow_mut();
            kept.extend(chunks.filter(|c| c.len() == chunk_size));
            kept.truncate(Self::MOST);
        });
    }
}

/// The reader thread's end of [`read_trace_ahead`].
struct Pump {
    full: std::sync::mpsc::SyncSender<std::io::Result<Chunk>>,
    empty: std::sync::mpsc::Receiver<Vec<u8>>,
    chunk_size: usize,
    /// Decided at the first chunk sent: only a pickle's bytes are searched.
    finder: Option<Option<pickle::GetRunFinder>>,
    /// The chunk that met the end of the input with nothing in it.
    unread: Option<Vec<u8>>,
}

impl Pump {
    /// Reads a chunk from `source`: a buffer of `chunk_size` bytes, how
    /// many of them were read (fewer at its end), and the error that
    /// stopped the reading, if one did. A chunk given back keeps its
    /// length, so that it is never zeroed again.
    fn read_chunk(&mut self, source: &mut dyn Read) -> (Vec<u8>, usize, std::io::Result<()>) {
        let mut chunk = self.empty.try_recv().unwrap_or_default();
        chunk.resize(self.chunk_size, 0);
        let mut filled = 0;
        let result = loop {
            match source.read(&mut chunk[filled..]) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    filled += n;
                    if filled == self.chunk_size {
                        break Ok(());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        (chunk, filled, result)
    }

    /// Sends what [`Pump::read_chunk`] read; whether there may be more
    /// (`false` at the end of the input, after an error, or when the parser
    /// is gone: a closed channel means it is done or failed).
    fn send_read(&mut self, chunk: Vec<u8>, filled: usize, result: std::io::Result<()>) -> bool {
        let full = filled == self.chunk_size;
        if filled > 0 {
            let finder = self.finder.get_or_insert_with(|| {
                (chunk.first() == Some(&0x80)).then(pickle::GetRunFinder::default)
            });
            let runs = finder
                .as_mut()
                .map(|f| f.find(&chunk[..filled]))
                .unwrap_or_default();
            let chunk = Chunk {
                bytes: chunk,
                filled,
                runs,
            };
            if self.full.send(Ok(chunk)).is_err() {
                return false;
            }
        } else {
            // Kept for the next input (see `SpareChunks`).
            self.unread = Some(chunk);
        }
        match result {
            Ok(()) => full,
            Err(e) => {
                let _ = self.full.send(Err(e));
                false
            }
        }
    }

    /// Reads and sends `source` to its end.
    fn pump(&mut self, source: &mut dyn Read) {
        loop {
            let (chunk, filled, result) = self.read_chunk(source);
            if !self.send_read(chunk, filled, result) {
                return;
            }
        }
    }
}

/// A chunk of the input (its first `filled` bytes) and the runs found in it.
struct Chunk {
    bytes: Vec<u8>,
    filled: usize,
    runs: Vec<pickle::GetRun>,
}

/// The parser's end of [`read_trace_ahead`]: chunks arrive in order; an
/// empty channel is the end of the input. A chunk's runs go to `hints`
/// as it arrives, before the parser can read its bytes.
struct Chunks {
    full: std::sync::mpsc::Receiver<std::io::Result<Chunk>>,
    empty: std::sync::mpsc::Sender<Vec<u8>>,
    /// The chunk being read, up to `end`.
    current: Vec<u8>,
    pos: usize,
    end: usize,
    hints: Rc<pickle::GetRunHints>,
    /// The error that ended the input, kept as `LimitedReader` keeps its
    /// own (a copy is returned).
    failure: Rc<Cell<Option<std::io::Error>>>,
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        read_buffered(self, buf)
    }
}

/// `Read::read` of a reader that buffers already: a copy from its buffer.
fn read_buffered(reader: &mut impl BufRead, buf: &mut [u8]) -> std::io::Result<usize> {
    let available = reader.fill_buf()?;
    let n = available.len().min(buf.len());
    buf[..n].copy_from_slice(&available[..n]);
    reader.consume(n);
    Ok(n)
}

impl BufRead for Chunks {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.pos == self.end {
            if let Ok(next) = self.full.recv() {
                let next = next.map_err(|e| keep_failure(&self.failure, e))?;
                self.hints.add(next.runs);
                let used = std::mem::replace(&mut self.current, next.bytes);
                let _ = self.empty.send(used);
                self.pos = 0;
                self.end = next.filled;
            }
        }
        Ok(&self.current[self.pos..self.end])
    }
    fn consume(&mut self, amt: usize) {
        self.pos += amt;
    }
}

/// Parses a trace already in memory (a Chrome trace streamed from it when
/// it can be, as [`read_file`] does).
pub fn parse_bytes(bytes: &[u8], limits: &Limits) -> Result<Trace> {
    // The same 64 KiB buffer as `read_trace` gives every other format.
    let mut reader = BufReader::with_capacity(1 << 16, bytes);
    match read_sniffed(&mut reader, limits, 0, None, Text::Streamed)? {
        Some(trace) => Ok(trace),
        None => read_trace(bytes, limits),
    }
}

/// Sniffs and parses `reader`; `hints`, if any, were found in its bytes
/// (only a pickle read directly from them may use them). `None` only from
/// a [`Text::Streamed`] read that declined.
fn read_sniffed(
    reader: &mut dyn BufRead,
    limits: &Limits,
    depth: u32,
    hints: Option<Rc<pickle::GetRunHints>>,
    text: Text,
) -> Result<Option<Trace>> {
    let head = peek(reader, 2)?;
    if head.is_empty() {
        return Err(if depth == 0 {
            Error::Empty
        } else {
            Error::UnknownFormat("gzip stream inflates to nothing".into())
        });
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        if depth >= 2 {
            return Err(Error::UnknownFormat("gzip nested more than twice".into()));
        }
        let failure = Rc::new(Cell::new(None));
        let inflated = LimitedReader::new(reader, limits, Rc::clone(&failure));
        let mut inner = BufReader::with_capacity(1 << 16, inflated);
        return read_sniffed(&mut inner, limits, depth + 1, None, text)
            .map_err(|e| stream_error(failure.take(), e));
    }
    if head[0] == 0x80 || looks_like_protocol0_global(reader)? {
        // Protocol 2+ pickles start with PROTO; a protocol 0/1 pickle that
        // starts with GLOBAL (`cos\nsystem\n…`) goes to the unpickler too, so
        // that it is refused as what it is.
        return snapshot::parse_pickle_hinted(reader, &limits.pickle, hints).map(Some);
    }
    // Refuse what cannot be text before reading (and inflating) all of it.
    let buffered = reader.fill_buf().map_err(gzip_error)?;
    let first = skip_bom_and_space(buffered).first().copied();
    if let Some(b) = first {
        if !matches!(b, b'{' | b'[' | b'<') {
            return Err(unrecognised(b));
        }
    }
    if text == Text::Streamed && first == Some(b'{') {
        return chrome::read_chrome_stream(reader).transpose();
    }
    // A gzip stream that breaks off (a job killed mid-write) leaves a text
    // prefix: it is read as a damaged trace is, and said to be partial.
    let mut bytes = Vec::new();
    let cut = match reader.read_to_end(&mut bytes).map_err(gzip_error) {
        Ok(_) => false,
        Err(Error::TruncatedGzip) if depth > 0 && !bytes.is_empty() => true,
        Err(e) => return Err(e),
    };
    if !cut {
        return parse_text(&bytes, limits).map(Some);
    }
    // Nothing usable in the prefix: the truncation is the story.
    let mut trace = parse_text(&bytes, limits).map_err(|_| Error::TruncatedGzip)?;
    trace.diagnostics.push(Diagnostic::partial(
        "the gzip stream is truncated (the file was cut short): the report covers what could be inflated",
    ));
    Ok(Some(trace))
}

/// The error of a parse under a gzip layer: a parser that fails because
/// the stream under it broke (`failure`) reports the stream's problem, not
/// the half-read content's.
fn stream_error(failure: Option<std::io::Error>, e: Error) -> Error {
    match (failure, e) {
        (Some(io), _) | (None, Error::Io(io)) => gzip_error(io),
        (None, other) => other,
    }
}

/// Keeps a stream's error in `failure` (for [`stream_error`]) and returns
/// a copy of it (same kind and message) for the reader's caller.
fn keep_failure(failure: &Cell<Option<std::io::Error>>, e: std::io::Error) -> std::io::Error {
    let copy = std::io::Error::new(e.kind(), e.to_string());
    failure.set(Some(e));
    copy
}

/// Turns inflate errors into one-line reasons.
fn gzip_error(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::TruncatedGzip,
        _ if e.to_string().contains("incomplete deflate") => Error::TruncatedGzip,
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => {
            Error::CorruptGzip(e.to_string())
        }
        std::io::ErrorKind::FileTooLarge => Error::Limit(e.to_string()),
        _ => Error::Io(e),
    }
}

/// JSON or HTML text (whole file in memory; these parsers borrow from it).
fn parse_text(bytes: &[u8], limits: &Limits) -> Result<Trace> {
    let body = skip_bom_and_space(bytes);
    match body.first() {
        Some(b'{') => {
            let key_pos = |k: &[u8]| memchr::memmem::find(body, k);
            match (key_pos(b"\"traceEvents\""), key_pos(b"\"device_traces\"").or(key_pos(b"\"segments\""))) {
                (Some(_), _) => chrome::parse_chrome_trace(body),
                (None, Some(_)) => snapshot::parse_json(body),
                (None, None) => Err(Error::UnknownFormat(
                    "a JSON object with neither `traceEvents` (Chrome trace) nor `segments`/`device_traces` (memory snapshot)".into(),
                )),
            }
        }
        Some(b'[') => {
            if timeline_export::looks_like_memory_timeline(body) {
                timeline_export::parse_memory_timeline(body)
            } else if looks_like_segment_list(body) {
                snapshot::parse_json(body)
            } else {
                chrome::parse_chrome_trace(body)
            }
        }
        Some(b'<') => snapshot::parse_memory_viz_html(body, &limits.pickle),
        Some(&b) => Err(unrecognised(b)),
        None => Err(Error::Empty),
    }
}

fn unrecognised(b: u8) -> Error {
    Error::UnknownFormat(format!(
        "unrecognised content (first byte 0x{b:02x}); expected a snapshot pickle, a Chrome trace JSON or gzip"
    ))
}

/// `c<module>\n<name>\n`: a protocol 0/1 pickle that starts by importing.
fn looks_like_protocol0_global(reader: &mut dyn BufRead) -> Result<bool> {
    let buf = reader.fill_buf().map_err(gzip_error)?;
    let Some(rest) = buf.strip_prefix(b"c") else {
        return Ok(false);
    };
    let ident = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.';
    let mut lines = rest.splitn(3, |&b| b == b'\n');
    let (Some(module), Some(name), Some(_)) = (lines.next(), lines.next(), lines.next()) else {
        return Ok(false);
    };
    Ok(
        !module.is_empty()
            && !name.is_empty()
            && module.iter().all(ident)
            && name.iter().all(ident),
    )
}

/// The legacy `memory_snapshot()` JSON: a list of segment objects.
fn looks_like_segment_list(body: &[u8]) -> bool {
    let head = &body[..body.len().min(4096)];
    let first_obj = head.iter().skip(1).find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    first_obj
        && memchr::memmem::find(head, b"\"total_size\"").is_some()
        && memchr::memmem::find(head, b"\"traceEvents\"").is_none()
        && memchr::memmem::find(head, b"\"ph\"").is_none()
}

fn skip_bom_and_space(bytes: &[u8]) -> &[u8] {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    &bytes[start..]
}

fn peek(reader: &mut dyn BufRead, n: usize) -> Result<Vec<u8>> {
    let buf = reader.fill_buf().map_err(gzip_error)?;
    Ok(buf[..buf.len().min(n)].to_vec())
}

/// Counts the compressed bytes the gzip decoder consumes.
struct Counting<'a> {
    inner: &'a mut dyn BufRead,
    consumed: u64,
}

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.consumed += n as u64;
        Ok(n)
    }
}

impl BufRead for Counting<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.inner.fill_buf()
    }
    fn consume(&mut self, amt: usize) {
        self.consumed += amt as u64;
        self.inner.consume(amt);
    }
}

/// Stops inflation past the configured limit or ratio (gzip bombs) and
/// remembers the first error of the stream below.
struct LimitedReader<'a> {
    inner: MultiGzDecoder<Counting<'a>>,
    inflated: u64,
    limit: u64,
    ratio: u64,
    failure: Rc<Cell<Option<std::io::Error>>>,
}

impl<'a> LimitedReader<'a> {
    /// Inflates `compressed` within `limits`; the first error of the
    /// stream is also kept in `failure`.
    fn new(
        compressed: &'a mut dyn BufRead,
        limits: &Limits,
        failure: Rc<Cell<Option<std::io::Error>>>,
    ) -> Self {
        LimitedReader {
            inner: MultiGzDecoder::new(Counting {
                inner: compressed,
                consumed: 0,
            }),
            inflated: 0,
            limit: limits.max_inflated_bytes,
            ratio: limits.max_inflate_ratio,
            failure,
        }
    }

    fn bomb(&self, why: String) -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("{why} (possible gzip bomb)"),
        )
    }
}

impl Read for LimitedReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.read_limited(buf)
            .map_err(|e| keep_failure(&self.failure, e))
    }
}

impl LimitedReader<'_> {
    fn read_limited(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.limit - self.inflated;
        if left == 0 {
            // Is there more? One byte tells.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(self.bomb(format!("gzip stream inflates past {} bytes", self.limit))),
            };
        }
        let want = buf.len().min(left.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..want])?;
        self.inflated += n as u64;
        let compressed = self.inner.get_ref().consumed.max(1);
        if self.inflated >= RATIO_CHECK_AFTER && self.inflated / compressed > self.ratio {
            return Err(self.bomb(format!(
                "gzip stream inflates more than {}:1 ({} bytes from {compressed})",
                self.ratio, self.inflated
            )));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{corpus_dir, read_maybe_gz};

    /// Reading ahead in chunks of each size (runs of memo gets found on the
    /// reader thread, split across chunks or not) gives what parsing the
    /// bytes at once gives. (Debug strings: a missing time is a NaN.) Tiny
    /// chunks are slow (a thread switch per chunk), so only small inputs
    /// get them; real chunks are 1 MiB.
    fn same_read_ahead(bytes: &[u8], chunk_sizes: &[usize], what: &str) {
        let limits = Limits::default();
        let show = |r: Result<Trace>| match r {
            Ok(trace) => format!("{trace:?}"),
            Err(e) => format!("error: {e}"),
        };
        let want = show(parse_bytes(bytes, &limits));
        for &size in chunk_sizes {
            let got = show(decided(read_trace_ahead_in(
                bytes,
                &limits,
                size,
                Text::Whole,
            )));
            assert!(
                got == want,
                "{what}, chunks of {size}: read ahead differs: {got:.300}"
            );
        }
    }

    /// Gzip files are inflated on the reader thread, with the same results
    /// and the same errors (truncated, corrupt, bombs, nested, empty).
    #[test]
    fn reading_ahead_inflates_gzip_alike() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let samples = glob::glob(&format!("{}/sample_traces/*.gz", root.display())).unwrap();
        let broken = glob::glob(&format!("{}/tests/data/broken/*", root.display())).unwrap();
        let mut gz = 0;
        for path in samples.chain(broken).map(|p| p.unwrap()) {
            let bytes = std::fs::read(&path).unwrap();
            gz += usize::from(bytes.starts_with(&[0x1f, 0x8b]));
            same_read_ahead(&bytes, &[4099, 1 << 20], &path.display().to_string());
        }
        assert!(gz > 10, "{gz} gzip files");
        // A pickle whose gzip stream breaks off: the stream's problem is
        // reported, not the half-read pickle's.
        let pickle =
            std::fs::read(root.join("sample_traces/train_adamw.snapshot.pickle.gz")).unwrap();
        let cut = &pickle[..pickle.len() / 2];
        same_read_ahead(cut, &[4099, 1 << 20], "cut pickle.gz");
        let err = read_trace_ahead(cut, &Limits::default()).unwrap_err();
        assert_eq!(err.to_string(), "not a memory trace: truncated gzip stream");
    }

    /// On a `memcut batch` worker the read-ahead's chunks are kept from one
    /// input to the next (`SpareChunks`): inputs read one after another on
    /// one worker — large before small, so that kept chunks hold a larger
    /// input's bytes past a smaller one's end; gzip, plain, broken; chunks
    /// of two sizes — read as at once; the worker keeps some chunks, and
    /// never more than `SpareChunks::MOST`.
    #[test]
    fn a_batch_worker_reuses_its_chunks_and_reads_alike() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let samples = glob::glob(&format!("{}/sample_traces/*", root.display())).unwrap();
        let broken = glob::glob(&format!("{}/tests/data/broken/*", root.display())).unwrap();
        let mut inputs: Vec<Vec<u8>> = samples
            .chain(broken)
            .map(|p| p.unwrap())
            .filter(|p| p.is_file())
            .map(|p| std::fs::read(p).unwrap())
            .collect();
        inputs.sort_by_key(|b| std::cmp::Reverse(b.len()));
        // A big plain input first: its bytes fill every kept chunk.
        inputs.insert(0, big_trace().into_bytes());
        let kept = || SPARE_CHUNKS.with(|s| s.borrow().len());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        pool.install(|| {
            assert_eq!(kept(), 0);
            for bytes in &inputs {
                same_read_ahead(bytes, &[1 << 20, 4099, 1 << 20], "a worker's next input");
                assert!((1..=SpareChunks::MOST).contains(&kept()), "{}", kept());
            }
        });
        // Not on a worker: nothing kept.
        same_read_ahead(&inputs[0], &[1 << 20], "one input");
        assert_eq!(kept(), 0);
    }

    /// A Chrome trace past `chrome::MIN_SPLIT_BYTES` (memory events and
    /// operators repeated, pretty printed, across 7 threads), plain and
    /// gzipped.
    fn big_trace() -> String {
        let event = |k: usize| {
            format!(
                "    {{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 1, \"tid\": {}, \"ts\": {}, \"dur\": 1}},\n    \
                 {{\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": {}, \"ts\": {}, \"args\": {{\"Device Type\": 1, \"Device Id\": 0, \"Addr\": {}, \"Bytes\": {}, \"Total Allocated\": 64, \"Total Reserved\": 128, \"Ev Idx\": {}}}}}",
                k % 3,
                2 * k,
                k % 7,
                2 * k + 1,
                4096 + (k / 2) * 64,
                if k % 2 == 0 { 64 } else { -64 },
                k
            )
        };
        let n = (chrome::MIN_SPLIT_BYTES as usize) / 300 + 1000;
        let events: Vec<String> = (0..n).map(event).collect();
        let text = format!("{{\"traceEvents\": [\n{}\n]}}\n", events.join(",\n"));
        assert!(text.len() as u64 >= chrome::MIN_SPLIT_BYTES);
        text
    }

    /// A big trace is read on two threads (`read_split` takes it), plain or
    /// gzipped, with what the whole read gives; a gzip stream cut in its
    /// second half is declined there and read whole, with the whole read's
    /// diagnostics.
    #[test]
    fn big_traces_read_on_two_threads_as_read_whole() {
        use flate2::{write::GzEncoder, Compression};
        use std::io::Write;
        let text = big_trace();
        let dir = tempfile::tempdir().unwrap();
        let plain = dir.path().join("big.json");
        std::fs::write(&plain, &text).unwrap();
        let mut enc = GzEncoder::new(Vec::new(), Compression::fast());
        enc.write_all(text.as_bytes()).unwrap();
        let gz = enc.finish().unwrap();
        let zipped = dir.path().join("big.json.gz");
        std::fs::write(&zipped, &gz).unwrap();
        let cut = dir.path().join("cut.json.gz");
        std::fs::write(&cut, &gz[..gz.len() * 3 / 4]).unwrap();
        let limits = Limits::default();
        let show = |r: Result<Trace>| match r {
            Ok(trace) => format!("{trace:?}"),
            Err(e) => format!("error: {e}"),
        };
        let whole = show(parse_bytes(text.as_bytes(), &limits));
        assert!(!whole.starts_with("error"), "{whole:.300}");
        // Read, and through a map of the file (what the `memcut` command
        // asks; a gzipped file is read either way): the same trace.
        let mapped = Limits {
            map_files: true,
            ..Limits::default()
        };
        for (limits, path) in [&limits, &mapped]
            .into_iter()
            .flat_map(|l| [(l, &plain), (l, &zipped)])
        {
            let split = read_split(path, limits)
                .expect("split")
                .expect("not declined");
            let how = format!("{} mapped: {}", path.display(), limits.map_files);
            assert_eq!(show(split), whole, "{how}");
            assert_eq!(show(read_file(path, limits)), whole, "{how}");
        }
        assert!(matches!(read_split(&cut, &limits), Some(None)));
        let cut_whole = show(read_trace(std::fs::File::open(&cut).unwrap(), &limits));
        assert!(cut_whole.contains("truncated"), "{cut_whole:.300}");
        assert_eq!(show(read_file(&cut, &limits)), cut_whole);
        // A file that is not a trace in the object form is left to the
        // whole read, mapped or not.
        let list = dir.path().join("list.json");
        std::fs::write(&list, format!("[{}", &text[1..])).unwrap();
        assert!(read_split(&list, &mapped).is_none());
    }

    #[test]
    fn reading_ahead_gives_the_trace_parsing_at_once_gives() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seen = 0;
        let shared = root.join("tests/data/synthetic_shared_frames.pickle.gz");
        let samples = glob::glob(&format!("{}/sample_traces/*.gz", root.display())).unwrap();
        for path in samples.map(|p| p.unwrap()).chain([shared]) {
            let what = path.display().to_string();
            same_read_ahead(&read_maybe_gz(&path), &[1000, 4099, 1 << 20], &what);
            seen += 1;
        }
        assert!(seen > 0);
        let overwritten = crate::formats::snapshot::record_tests::OVERWRITTEN_FRAME;
        same_read_ahead(overwritten, &[1, 2, 5, 1 << 20], "overwritten frame");
    }

    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn reading_ahead_gives_the_trace_parsing_at_once_gives_on_corpus_pickles() {
        let dir = corpus_dir();
        let mut seen = 0;
        for path in glob::glob(&format!("{}/**/*.pickle", dir.display())).unwrap() {
            let path = path.unwrap();
            let bytes = std::fs::read(&path).unwrap();
            same_read_ahead(&bytes, &[4099, 1 << 20], &path.display().to_string());
            seen += 1;
        }
        assert!(seen > 0, "no pickles in {}", dir.display());
    }

    #[test]
    fn empty_input_is_an_error() {
        assert!(matches!(
            parse_bytes(b"", &Limits::default()),
            Err(Error::Empty)
        ));
    }

    #[test]
    fn random_bytes_are_not_a_trace() {
        let err = parse_bytes(b"\x07\x01garbage", &Limits::default()).unwrap_err();
        assert!(err.to_string().contains("unrecognised content"), "{err}");
    }

    #[test]
    fn json_object_that_is_neither_format_is_refused() {
        let err = parse_bytes(br#"{"hello": 1}"#, &Limits::default()).unwrap_err();
        assert!(err.to_string().contains("neither"), "{err}");
    }

    #[test]
    fn gzip_bomb_stops_at_the_limit() {
        use flate2::{write::GzEncoder, Compression};
        use std::io::Write;
        let mut enc = GzEncoder::new(Vec::new(), Compression::best());
        enc.write_all(b"[").unwrap();
        enc.write_all(&vec![b' '; 1 << 20]).unwrap();
        let gz = enc.finish().unwrap();
        let limits = Limits {
            max_inflated_bytes: 1000,
            ..Limits::default()
        };
        let err = parse_bytes(&gz, &limits).unwrap_err();
        assert!(err.to_string().contains("gzip bomb"), "{err}");
    }

    #[test]
    fn truncated_gzip_is_reported() {
        use flate2::{write::GzEncoder, Compression};
        use std::io::Write;
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(br#"{"segments": [], "device_traces": []}"#)
            .unwrap();
        let gz = enc.finish().unwrap();
        let err = parse_bytes(&gz[..gz.len() / 2], &Limits::default()).unwrap_err();
        assert!(err.to_string().contains("gzip"), "{err}");
    }
    #[test]
    fn gzip_bomb_is_stopped_by_the_ratio_before_the_limit() {
        use flate2::{write::GzEncoder, Compression};
        use std::io::Write;
        let mut enc = GzEncoder::new(Vec::new(), Compression::best());
        enc.write_all(b"[").unwrap();
        let block = vec![b' '; 1 << 20];
        for _ in 0..80 {
            enc.write_all(&block).unwrap();
        }
        let gz = enc.finish().unwrap();
        let err = parse_bytes(&gz, &Limits::default()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("input exceeds a limit: gzip stream inflates more than 250:1 ("),
            "{msg}"
        );
        assert!(msg.ends_with("(possible gzip bomb)"), "{msg}");
    }

    #[test]
    fn binary_content_is_refused_before_inflating_it_all() {
        use flate2::{write::GzEncoder, Compression};
        use std::io::Write;
        let mut enc = GzEncoder::new(Vec::new(), Compression::best());
        enc.write_all(&vec![0u8; 8 << 20]).unwrap();
        let gz = enc.finish().unwrap();
        let limits = Limits {
            max_inflated_bytes: 1 << 20,
            ..Limits::default()
        };
        // Refused on its first byte, not for its size.
        let err = parse_bytes(&gz, &limits).unwrap_err();
        assert!(err.to_string().contains("first byte 0x00"), "{err}");
    }

    #[test]
    fn protocol0_global_pickle_goes_to_the_unpickler_and_is_refused() {
        let err = parse_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.", &Limits::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad pickle at byte 0: opcode GLOBAL (0x63) refused: memcut never imports or calls code from a pickle"
        );
    }
}
