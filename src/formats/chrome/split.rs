//! A large plain Chrome trace read on two cores (issue 16): one thread
//! reads the file from its start, another from an element of
//! `traceEvents` further on, and the two collections are joined.
//!
//! The second thread's starting point is a guess ([`element_start_near`]:
//! a comma between `}` and `{`, which may also sit inside a string or a
//! nested list of objects). The first thread settles it: it reads elements
//! up to the guessed offset ([`stream::read_head`]) and, if an element
//! starts exactly there, the bytes from there on are read by the second
//! thread in the very state the first would have read them in (inside
//! `traceEvents`, after a comma), so its events are the first thread's
//! would-be events; [`Collector::append`] joins them as one collector
//! would have collected them. If no element starts there, the first thread
//! reads on to the end alone and the second thread's work is dropped. So
//! the result is the streaming reader's, byte for byte, or the streaming
//! reader's decline — tested against it at every element boundary and at
//! offsets that are not boundaries (`tests` below, `tests/streaming.rs`).
//!
//! Where it can open the file anywhere (a plain file, read or mapped), the
//! second thread reads in pieces ([`read_tail_pieces`], issue 35): first
//! from 3/5 of the way to the end, then, while the first thread is still
//! far enough behind, a piece below the last one, up to its start, from
//! where the two would meet at the paces each has kept so far. The first
//! thread stops at the lowest piece it meets exactly (a guess inside a
//! string is passed); the join takes the pieces from there up, each
//! having met the next exactly. So neither thread waits long for the
//! other when one is slowed down (this machine's neighbours, a denser
//! part of the file: trace-owlv2.json's last 40% parse ~1.5x slower per
//! byte than its start). Which pieces there are depends on timing; the
//! result never does (the tests below cut pieces at any two offsets).
//!
//! Each thread reads the file through its own handle, so neither the file
//! nor a copy of it is held, and the copy out of the page cache is split
//! between the two cores as well; for the `memcut` command each reads a
//! map of the file instead, with no copy (`input/mapped.rs`). A deflate stream can only be inflated
//! from its start, so for a gzipped file the second thread inflates what
//! it skips (`input::read_split` picks where it starts and which files are
//! worth two threads).
//!
//! Speed bought, whole-process, `memcut analyze FILE -f json -o /dev/null`,
//! medians of 5 side by side (A B A B) against the same binary with this
//! read turned off (one thread parsing, the file read ahead on the other),
//! on `scripts/bench_inputs.sh`'s inputs, 2-core machine, load ~1
//! (2026-12-03, after the token readers of `stream/token.rs`): trace-owlv2.json
//! wall 0.67 s -> 0.60 s (0.82x, CPU 1.03x), trace-owlv2.json.gz 0.73 s ->
//! 0.69 s (0.94x, CPU 1.10x: the skipped part is inflated twice); peak RSS
//! 56 -> 67 MB (two buffers, two collectors). Before the token readers the
//! scan was slower and the split bought more (owlv2: 0.91x wall under load).
//! The pieces, against one second thread from the middle (farm-bench, 21
//! pairs each, 2026-12-07, `memcut analyze FILE -f json -o /dev/null`,
//! mapped): wall 0.97x trace-owlv2.json, 0.91x trace-adamw.json, 0.96x
//! trace-resnet50.json, 0.97x the SGLang trace x 18 (not tuned on); the
//! spreads are wide (0.72-1.36) on this noisy machine.

use std::io::{BufRead, BufReader, Read};
use std::sync::atomic::Ordering;

use super::collect::Collector;
use super::stream::{self, Counts, Head, Meeting};
use super::{build, ReadError};
use crate::model::Trace;

/// Below this size (inflated) a second thread costs more than it saves.
pub(crate) const MIN_SPLIT_BYTES: u64 = 32 << 20;

/// How many bytes after the middle are searched for an element's start.
const SEARCH: usize = 1 << 20;

/// The second thread's read buffer.
const BUFFER: usize = 1 << 20;

/// What the second thread read: the rest of the file from its offset, in
/// one piece or in several (lowest first).
pub(crate) struct TailRead(Vec<Piece>);

/// A piece of the file the second thread read, from `start` up to `end`
/// (an element starts exactly there: the next piece's start), or to the
/// end of the file (`None`).
struct Piece {
    start: u64,
    end: Option<u64>,
    col: Collector,
    counts: Counts,
}

/// Reads a Chrome trace from `head` (its start) on this thread while
/// `tail` reads the rest from an offset of its choosing on another (by
/// [`read_tail_near`], [`read_tail_at`] or [`read_tail_pieces`], which
/// claim where in the meeting).
/// `None`: declined, as the streaming reader declines.
pub(super) fn read_two(
    head: &mut dyn BufRead,
    tail: impl FnOnce(&Meeting) -> Option<TailRead> + Send,
) -> Option<Result<Trace, ReadError>> {
    read_parts(head, Meeting::new(), tail).map(|(trace, _, _)| trace)
}

/// Skips `n` bytes of `reader` (an inflating one: it cannot seek), or
/// gives up when the meeting no longer wants the second thread's read.
pub(crate) fn skip_inflated(reader: &mut dyn Read, n: u64, meeting: &Meeting) -> Option<()> {
    let mut buf = vec![0u8; BUFFER];
    let mut left = n;
    while left > 0 {
        if meeting.cancel.load(Ordering::Relaxed) {
            return None;
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        match reader.read(&mut buf[..want]) {
            Ok(0) | Err(_) => return None,
            Ok(k) => left -= k as u64,
        }
    }
    Some(())
}

/// The second thread's read from `reader`, positioned at offset `from`:
/// the elements from the first guessed element start in the next
/// [`SEARCH`] bytes ([`element_start_near`]) to the end of the file.
pub(crate) fn read_tail_near(
    reader: &mut dyn Read,
    from: u64,
    meeting: &Meeting,
) -> Option<TailRead> {
    let mut window = Vec::with_capacity(SEARCH);
    reader.take(SEARCH as u64).read_to_end(&mut window).ok()?;
    let k = element_start_near(&window)?;
    let rest = std::io::Cursor::new(&window[k..]).chain(reader);
    read_tail_at(
        &mut BufReader::with_capacity(BUFFER, rest),
        from + k as u64,
        meeting,
    )
}

/// The second thread's read from `reader`, positioned at offset `at`,
/// claimed in the meeting before it starts (`None`: refused, the first
/// thread being too close to it or done).
pub(crate) fn read_tail_at(
    reader: &mut dyn BufRead,
    at: u64,
    meeting: &Meeting,
) -> Option<TailRead> {
    if !meeting.claim(at) {
        return None;
    }
    let (mut col, counts, _) = stream::read_tail(reader, None, meeting)?;
    col.sort_ops();
    Some(TailRead(vec![Piece {
        start: at,
        end: None,
        col,
        counts,
    }]))
}

/// The second thread's read of a file it can open anywhere (`open(at)`: a
/// reader positioned at offset `at`; `len`: the file's size): the end of
/// the file from an element near `from`, then, as long as the first
/// thread is still far enough behind, another piece below the ones read,
/// from where the two threads would meet if each kept its pace so far.
/// So a thread slowed down (a busy machine, denser events) is helped by
/// the other instead of waited for. The join ([`read_parts`]) keeps the
/// pieces from where the first thread stopped.
pub(crate) fn read_tail_pieces<'r>(
    open: &dyn Fn(u64) -> Option<Box<dyn BufRead + 'r>>,
    from: u64,
    len: u64,
    meeting: &Meeting,
) -> Option<TailRead> {
    let started = std::time::Instant::now();
    let mut pieces: Vec<Piece> = Vec::new();
    let mut from = from;
    let mut busy = std::time::Duration::ZERO;
    let mut read_bytes = 0u64;
    let mut misses = 0;
    loop {
        // The first element at or after `from`, found in the reader's
        // buffer; it must lie below the piece read last.
        let end = pieces.last().map(|p: &Piece| p.start);
        // A piece that cannot be opened or read is not claimed: the
        // pieces read so far stand.
        let Some(mut reader) = open(from) else { break };
        let Ok(window) = reader.fill_buf() else { break };
        let found = element_start_near(&window[..window.len().min(SEARCH)]);
        let Some(k) = found.filter(|&k| end.is_none_or(|e| from + (k as u64) < e)) else {
            break;
        };
        let start = from + k as u64;
        if !meeting.claim(start) {
            break;
        }
        reader.consume(k);
        let t = std::time::Instant::now();
        let read = stream::read_tail(&mut reader, end.map(|e| e - start), meeting);
        busy += t.elapsed();
        let Some((mut col, counts, to_next)) = read else {
            // Declined: a guess inside a string (the first thread reads
            // on past it), or damage the first thread meets too. The next
            // guess after it, a few times.
            meeting.unclaim(start);
            misses += 1;
            if misses == 3 || meeting.cancel.load(Ordering::Relaxed) {
                break;
            }
            from = start + 1;
            continue;
        };
        col.sort_ops();
        read_bytes += end.unwrap_or(len).saturating_sub(start);
        pieces.push(Piece {
            start,
            end: end.filter(|_| to_next),
            col,
            counts,
        });
        // Where the threads meet if each keeps its pace: the first one's
        // bytes per second since the start, this one's while reading.
        let head = meeting.head();
        let gap = start.saturating_sub(head);
        let head_rate = head as f64 / started.elapsed().as_secs_f64().max(1e-9);
        let rate = read_bytes as f64 / busy.as_secs_f64().max(1e-9);
        let share = rate / (rate + head_rate).max(1e-9);
        // No closer to the first thread than it may read unseen.
        let room = gap.saturating_sub(meeting.margin);
        let piece = ((gap as f64 * share) as u64).min(room);
        if piece < meeting.min_piece {
            break;
        }
        from = start - piece;
    }
    pieces.reverse();
    Some(TailRead(pieces))
}

/// The position just after the first comma in `window` that has `}` before
/// it and `{` after it (whitespace aside).
pub(super) fn element_start_near(window: &[u8]) -> Option<usize> {
    let ws = |b: &u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t');
    memchr::memchr_iter(b',', window)
        .find(|&comma| {
            let before = window[..comma].iter().rev().find(|b| !ws(b));
            let after = window[comma + 1..].iter().find(|b| !ws(b));
            before == Some(&b'}') && after == Some(&b'{')
        })
        .map(|comma| comma + 1)
}

/// [`read_two`] through `meeting`, with the counts and whether the first
/// thread reached the second's offset (tests tell the meeting the offset
/// before either thread starts: else a small input may be read to its end
/// by the first thread before the second has told it). `None`: declined.
pub(super) fn read_parts(
    head: &mut dyn BufRead,
    meeting: Meeting,
    tail: impl FnOnce(&Meeting) -> Option<TailRead> + Send,
) -> Option<(Result<Trace, ReadError>, Counts, Head)> {
    let (first, second) = std::thread::scope(|scope| {
        let later = scope.spawn(|| tail(&meeting));
        let mut first = stream::read_head(head, &meeting);
        match &mut first {
            Some((col, _, Head::Reached, _)) => col.sort_ops(),
            // Not wanted: the first thread declined or read to the end.
            _ => meeting.cancel.store(true, Ordering::Relaxed),
        }
        // A panic on the other thread is passed on as it would have been
        // on this one.
        let second = later
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (first, second)
    });
    let (mut col, mut counts, head, met) = first?;
    if head == Head::Reached {
        // The pieces from where the first thread stopped (those below it
        // read what it read too), each up to the next, to the one that
        // reads to the end of the file.
        let TailRead(pieces) = second?;
        let from = pieces.iter().position(|p| p.start == met)?;
        let mut joined = pieces.into_iter().skip(from).peekable();
        while let Some(piece) = joined.next() {
            // More follow where this piece stopped short of the end.
            col.append(piece.col, piece.end.is_some());
            #[cfg(test)]
            tests::JOINED.with(|n| n.set(n.get() + 1));
            counts.events += piece.counts.events;
            counts.by_serde += piece.counts.by_serde;
            // The next piece must start where this one stopped.
            match piece.end {
                None => break,
                Some(end) if joined.peek()?.start != end => return None,
                Some(_) => {}
            }
        }
    }
    Some((build::build_trace(col.finish(), Vec::new()), counts, head))
}

/// A meeting told before either thread starts where the second one
/// starts (`None`: not told).
#[cfg(test)]
pub(super) fn told(at: Option<u64>) -> Meeting {
    let meeting = Meeting::new();
    if let Some(at) = at {
        meeting.tell(at);
    }
    meeting
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streaming reader's result on `bytes`, and the split read's when
    /// the second thread starts at `at`; with whether the split was taken.
    fn both(bytes: &[u8], at: usize) -> (String, String, Option<Head>) {
        let whole = stream::read_counted(&mut &bytes[..]);
        let split = read_parts(&mut &bytes[..], told(Some(at as u64)), |m| {
            read_tail_at(&mut &bytes[at..], at as u64, m)
        });
        let head = split.as_ref().map(|s| s.2);
        (show(whole), show(split.map(|(t, c, _)| (t, c))), head)
    }

    /// A read's result as text, to compare.
    fn show(r: Option<(Result<Trace, ReadError>, Counts)>) -> String {
        match r {
            None => "declined".to_string(),
            Some((Ok(t), c)) => format!("{t:?} {c:?}"),
            Some((Err(e), c)) => format!("error {e} {c:?}"),
        }
    }

    const TRACE: &str = r#"{"schemaVersion": 1, "deviceProperties": [{"id": 0, "totalGlobalMem": 1000}],
  "traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10, "dur": 5},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 11,
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 100, "Bytes": 64, "Total Allocated": 64, "Total Reserved": 128, "Ev Idx": 0}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 3, "ts": 12, "dur": 5, "args": {"note": "}, {"}},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 11,
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 100, "Bytes": 64, "Total Allocated": 64, "Total Reserved": 128, "Ev Idx": 0}},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 3, "ts": 13,
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 200, "Bytes": 32, "Total Allocated": 96, "Total Reserved": 128, "Ev Idx": 1}},
    {"ph": "B", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 4, "ts": 9},
    {"ph": "E", "cat": "user_annotation", "name": "step", "pid": 1, "tid": 4, "ts": 20},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 4, "ts": 21,
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 100, "Bytes": -64, "Total Allocated": 32, "Total Reserved": 128, "Ev Idx": 2}},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 11,
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 100, "Bytes": 64, "Total Allocated": 64, "Total Reserved": 128, "Ev Idx": 0}}
  ],
  "deviceProperties": [{"id": 0, "totalGlobalMem": 2000}], "baseTimeNanoseconds": 5
}"#;

    #[test]
    fn every_offset_gives_the_streaming_result() {
        let bytes = TRACE.as_bytes();
        let mut reached = 0;
        for at in 0..bytes.len() {
            let (whole, split, head) = both(bytes, at);
            assert_eq!(whole, split, "second thread from offset {at}");
            reached += usize::from(head == Some(Head::Reached));
        }
        // Every comma between two events, and only those.
        assert_eq!(reached, 8);
    }

    /// The second thread tells its offset late (the first one may be past
    /// it, or done): the result is still the streaming reader's.
    #[test]
    fn an_offset_told_late_gives_the_streaming_result() {
        let bytes = TRACE.as_bytes();
        let want = both(bytes, 0).0;
        for at in (0..bytes.len()).step_by(97) {
            let split = read_parts(&mut &bytes[..], told(None), |m| {
                std::thread::sleep(std::time::Duration::from_millis(5));
                read_tail_at(&mut &bytes[at..], at as u64, m)
            });
            assert_eq!(show(split.map(|(t, c, _)| (t, c))), want, "offset {at}");
        }
    }

    /// The second thread searching its reader's buffer in place (a mapped
    /// file) gives the streaming result from every offset, and meets the
    /// first thread at the element after the offset.
    #[test]
    fn a_search_in_the_buffer_gives_the_streaming_result() {
        let bytes = TRACE.as_bytes();
        let want = both(bytes, 0).0;
        let mut reached = 0;
        for at in 0..bytes.len() {
            // Told before either starts, where the search will land.
            let known = element_start_near(&bytes[at..]).map(|k| (at + k) as u64);
            let split = read_parts(&mut &bytes[..], told(known), |m| {
                let open = |from: u64| Some(Box::new(&bytes[from as usize..]) as Box<dyn BufRead>);
                read_tail_pieces(&open, at as u64, bytes.len() as u64, m)
            });
            let head = split.as_ref().map(|s| s.2);
            assert_eq!(show(split.map(|(t, c, _)| (t, c))), want, "offset {at}");
            reached += usize::from(head == Some(Head::Reached));
        }
        // From every offset before an event's comma, up to the last one.
        let last = TRACE.rfind("},").unwrap();
        assert!(reached > 8 && reached <= last, "{reached}");
    }

    thread_local! {
        /// Pieces joined by `read_parts` on this thread.
        pub(super) static JOINED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// The second thread's pieces at given offsets (ascending), each read
    /// up to the next, as `read_tail_pieces` reads them (and drops those
    /// that decline).
    fn pieces_at(bytes: &[u8], starts: &[usize], meeting: &Meeting) -> Option<TailRead> {
        let pieces = starts
            .iter()
            .enumerate()
            .filter_map(|(i, &start)| {
                let end = starts.get(i + 1).map(|&e| e as u64);
                let within = end.map(|e| e - start as u64);
                let (col, counts, to_next) =
                    stream::read_tail(&mut &bytes[start..], within, meeting)?;
                Some(Piece {
                    start: start as u64,
                    end: end.filter(|_| to_next),
                    col,
                    counts,
                })
            })
            .collect();
        Some(TailRead(pieces))
    }

    /// Where the elements of `TRACE` start (after the comma before each).
    fn element_starts(bytes: &[u8]) -> Vec<usize> {
        memchr::memchr_iter(b',', bytes)
            .filter(|&c| element_start_near(&bytes[c - 1..]) == Some(2))
            .map(|c| c + 1)
            .collect()
    }

    /// Two pieces at any two offsets, the first thread stopping at either:
    /// the result is the streaming reader's (the pieces below where it
    /// stopped, or above one that read to the end, are dropped; a piece
    /// that started inside a string is never joined).
    #[test]
    fn pieces_at_any_offsets_give_the_streaming_result() {
        let bytes = TRACE.as_bytes();
        let want = both(bytes, 0).0;
        let mut offsets: Vec<usize> = (0..bytes.len()).step_by(23).collect();
        offsets.extend(element_starts(bytes));
        offsets.sort_unstable();
        let mut joined_two = 0;
        for (i, &low) in offsets.iter().enumerate() {
            for &high in &offsets[i + 1..] {
                for stop in [low, high] {
                    JOINED.with(|n| n.set(0));
                    let split = read_parts(&mut &bytes[..], told(Some(stop as u64)), |m| {
                        pieces_at(bytes, &[low, high], m)
                    });
                    let got = show(split.map(|(t, c, _)| (t, c)));
                    assert_eq!(got, want, "pieces at {low} and {high}, stop at {stop}");
                    joined_two += usize::from(JOINED.with(|n| n.get()) == 2);
                }
            }
        }
        assert!(joined_two > 0);
    }

    /// Pieces at every element start: the first thread stops at the lowest,
    /// and every piece is joined; with one more inside a string, those up
    /// to it.
    #[test]
    fn a_piece_per_element_gives_the_streaming_result() {
        let bytes = TRACE.as_bytes();
        let want = both(bytes, 0).0;
        let mut starts = element_starts(bytes);
        // One is no element's start: a comma inside a string.
        let inside = TRACE.find(r#"}, {"#).unwrap() + 2;
        assert_eq!(starts.len(), 9);
        assert!(starts.contains(&inside));
        JOINED.with(|n| n.set(0));
        let split = read_parts(&mut &bytes[..], told(Some(starts[0] as u64)), |m| {
            pieces_at(bytes, &starts, m)
        });
        assert_eq!(show(split.map(|(t, c, _)| (t, c))), want);
        // The piece before it reads on to the end: the ones after it are
        // not joined.
        let before = starts.iter().filter(|&&s| s < inside).count();
        assert_eq!(JOINED.with(|n| n.get()), before);
        starts.retain(|&s| s != inside);
        JOINED.with(|n| n.set(0));
        let split = read_parts(&mut &bytes[..], told(Some(starts[0] as u64)), |m| {
            pieces_at(bytes, &starts, m)
        });
        assert_eq!(show(split.map(|(t, c, _)| (t, c))), want);
        assert_eq!(JOINED.with(|n| n.get()), 8);
    }

    /// `TRACE` with its events `n` more times.
    fn repeated(n: usize) -> String {
        let (start, events) = TRACE.split_once("\n    {").unwrap();
        let (events, end) = events.rsplit_once("\n  ]").unwrap();
        let mut text = format!("{start}\n    {{{events}");
        for _ in 0..n {
            text.push_str(",\n    {");
            text.push_str(events);
        }
        text.push_str("\n  ]");
        text.push_str(end);
        text
    }

    /// A reader that waits before each buffer it gives: a slow first
    /// thread, so that the second one has time for pieces below its first.
    struct Slow<'a>(std::io::BufReader<&'a [u8]>);

    impl std::io::Read for Slow<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }

    impl BufRead for Slow<'_> {
        fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
            std::thread::sleep(std::time::Duration::from_micros(300));
            self.0.fill_buf()
        }
        fn consume(&mut self, amt: usize) {
            self.0.consume(amt)
        }
    }

    /// The second thread reading in pieces while the first is slow: it
    /// reads several pieces, they meet where the claims say, and the
    /// result is the streaming reader's.
    #[test]
    fn pieces_claimed_while_the_first_thread_reads_give_the_streaming_result() {
        let text = repeated(300);
        let bytes = text.as_bytes();
        let want = show(stream::read_counted(&mut &bytes[..]));
        let mut several = 0;
        for _ in 0..5 {
            JOINED.with(|n| n.set(0));
            let head = Slow(std::io::BufReader::with_capacity(2048, bytes));
            let split = read_parts(&mut { head }, Meeting::sized(8192, 4096), |m| {
                let open = |from: u64| Some(Box::new(&bytes[from as usize..]) as Box<dyn BufRead>);
                read_tail_pieces(&open, bytes.len() as u64 / 5 * 4, bytes.len() as u64, m)
            });
            assert_eq!(show(split.map(|(t, c, _)| (t, c))), want);
            several += usize::from(JOINED.with(|n| n.get()) > 1);
        }
        assert!(several > 0, "never more than one piece");
    }

    /// A piece below the first that cannot be opened is not claimed: the
    /// first piece stands, and the first thread reads up to it.
    #[test]
    fn a_piece_that_cannot_be_opened_leaves_the_ones_read() {
        let text = repeated(300);
        let bytes = text.as_bytes();
        let want = show(stream::read_counted(&mut &bytes[..]));
        let first = bytes.len() as u64 / 5 * 4;
        for _ in 0..3 {
            JOINED.with(|n| n.set(0));
            let head = Slow(std::io::BufReader::with_capacity(2048, bytes));
            let split = read_parts(&mut { head }, Meeting::sized(8192, 4096), |m| {
                let open = |from: u64| {
                    (from >= first).then(|| Box::new(&bytes[from as usize..]) as Box<dyn BufRead>)
                };
                read_tail_pieces(&open, first, bytes.len() as u64, m)
            });
            let head = split.as_ref().map(|s| s.2);
            assert_eq!(show(split.map(|(t, c, _)| (t, c))), want);
            assert_eq!(head, Some(Head::Reached));
            assert_eq!(JOINED.with(|n| n.get()), 1);
        }
    }

    #[test]
    fn a_guess_inside_a_string_is_dropped() {
        let bytes = TRACE.as_bytes();
        let inside = TRACE.find(r#"}, {"}"#).unwrap() + 2;
        let (whole, split, head) = both(bytes, inside);
        assert_eq!(head, Some(Head::Whole));
        assert_eq!(whole, split);
    }

    #[test]
    fn damage_after_the_split_declines_as_the_streaming_reader_does() {
        let damaged = TRACE.replace(r#""ts": 21"#, r#""ts": NaN"#);
        let bytes = damaged.as_bytes();
        let at = damaged.find(r#""name": "step""#).unwrap();
        let at = damaged[..at].rfind(',').unwrap() + 1;
        let (whole, split, _) = both(bytes, at);
        assert_eq!(whole, "declined");
        assert_eq!(split, "declined");
    }

    #[test]
    fn the_search_finds_a_comma_between_objects() {
        let text = br#"x": 1}, "y": [1, 2], {"a": 1}   ,
   {"b": 2}"#;
        let comma = memchr::memmem::find(text, b",\n").unwrap();
        assert_eq!(element_start_near(text), Some(comma + 1));
        assert_eq!(element_start_near(b"[1, 2], 3"), None);
    }
}
