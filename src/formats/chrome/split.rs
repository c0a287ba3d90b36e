//! A large plain Chrome trace read on two cores (issue 16): one thread
//! reads the file from its start, another from an element of
//! `traceEvents` near its middle, and the two collections are joined.
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

/// What the second thread read: the rest of the file from its offset.
pub(crate) struct TailRead(Collector, Counts);

/// Reads a Chrome trace from `head` (its start) on this thread while
/// `tail` reads the rest from an offset of its choosing on another (by
/// [`read_tail_near`] or [`read_tail_at`], which tell the meeting where).
/// `None`: declined, as the streaming reader declines.
pub(super) fn read_two(
    head: &mut dyn BufRead,
    tail: impl FnOnce(&Meeting) -> Option<TailRead> + Send,
) -> Option<Result<Trace, ReadError>> {
    read_parts(head, None, tail).map(|(trace, _, _)| trace)
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

/// [`read_tail_near`] from a reader whose buffer holds the next [`SEARCH`]
/// bytes (or the rest of the input), searched in place instead of copied.
pub(crate) fn read_tail_near_buffered(
    reader: &mut dyn BufRead,
    from: u64,
    meeting: &Meeting,
) -> Option<TailRead> {
    let window = reader.fill_buf().ok()?;
    let k = element_start_near(&window[..window.len().min(SEARCH)])?;
    reader.consume(k);
    read_tail_at(reader, from + k as u64, meeting)
}

/// The second thread's read from `reader`, positioned at offset `at`,
/// told to the first thread before it starts.
pub(crate) fn read_tail_at(
    reader: &mut dyn BufRead,
    at: u64,
    meeting: &Meeting,
) -> Option<TailRead> {
    meeting.at.store(at, Ordering::Release);
    stream::read_tail(reader, meeting).map(|(col, counts)| TailRead(col, counts))
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

/// [`read_two`], with the counts and whether the first thread reached the
/// second's offset. `known`: the offset the second thread will read from,
/// told before either starts (tests: else a small input may be read to its
/// end by the first thread before the second has told it). `None`:
/// declined.
pub(super) fn read_parts(
    head: &mut dyn BufRead,
    known: Option<u64>,
    tail: impl FnOnce(&Meeting) -> Option<TailRead> + Send,
) -> Option<(Result<Trace, ReadError>, Counts, Head)> {
    let meeting = Meeting::new();
    if let Some(at) = known {
        meeting.at.store(at, Ordering::Release);
    }
    let (first, second) = std::thread::scope(|scope| {
        let later = scope.spawn(|| {
            let mut read = tail(&meeting);
            if let Some(TailRead(col, _)) = &mut read {
                col.sort_ops();
            }
            // No offset told: the first thread is not to wait for one.
            let _ = meeting.at.compare_exchange(
                Meeting::UNKNOWN,
                Meeting::NOWHERE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            read
        });
        let mut first = stream::read_head(head, &meeting);
        match &mut first {
            Some((col, _, Head::Reached)) => col.sort_ops(),
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
    let (mut col, mut counts, head) = first?;
    if head == Head::Reached {
        let TailRead(later, more) = second?;
        col.append(later);
        counts.events += more.events;
        counts.by_serde += more.by_serde;
    }
    Some((build::build_trace(col.finish(), Vec::new()), counts, head))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streaming reader's result on `bytes`, and the split read's when
    /// the second thread starts at `at`; with whether the split was taken.
    fn both(bytes: &[u8], at: usize) -> (String, String, Option<Head>) {
        let whole = stream::read_counted(&mut &bytes[..]);
        let split = read_parts(&mut &bytes[..], Some(at as u64), |m| {
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
            let split = read_parts(&mut &bytes[..], None, |m| {
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
            let split = read_parts(&mut &bytes[..], known, |m| {
                read_tail_near_buffered(&mut &bytes[at..], at as u64, m)
            });
            let head = split.as_ref().map(|s| s.2);
            assert_eq!(show(split.map(|(t, c, _)| (t, c))), want, "offset {at}");
            reached += usize::from(head == Some(Head::Reached));
        }
        // From every offset before an event's comma, up to the last one.
        let last = TRACE.rfind("},").unwrap();
        assert!(reached > 8 && reached <= last, "{reached}");
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
