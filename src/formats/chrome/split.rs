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
//! between the two cores as well. gzip input cannot be split (a deflate
//! stream is read from its start); it stays on `stream.rs`'s path, with
//! the inflate on the read-ahead thread.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::stream::{self, Counts, Head};
use super::{build, ReadError};
use crate::model::Trace;

/// Below this size a second thread costs more than it saves.
pub(crate) const MIN_SPLIT_BYTES: u64 = 32 << 20;

/// How many bytes after the middle are searched for an element's start.
const SEARCH: usize = 1 << 20;

/// Each thread's read buffer.
const BUFFER: usize = 1 << 20;

/// What [`read_split`] did.
pub(crate) enum Split {
    /// Read (in two halves, or by the first thread alone).
    Read(Box<Result<Trace, ReadError>>),
    /// The streaming reader's decline: the file is to be read whole.
    Declined,
    /// No element start was found near the middle: nothing was read.
    Unsplit,
}

/// Reads the plain (not gzipped) Chrome trace at `path` on two threads.
pub(crate) fn read_split(path: &Path) -> Split {
    let Ok(size) = std::fs::metadata(path).map(|m| m.len()) else {
        return Split::Unsplit;
    };
    let open = |at: u64| -> Option<BufReader<File>> {
        let mut file = File::open(path).ok()?;
        file.seek(SeekFrom::Start(at)).ok()?;
        Some(BufReader::with_capacity(BUFFER, file))
    };
    let Some(at) = open(size / 2).and_then(|r| element_start_near(r, size / 2)) else {
        return Split::Unsplit;
    };
    let (Some(mut head), Some(tail)) = (open(0), open(at)) else {
        return Split::Unsplit;
    };
    match read_parts(&mut head, tail, at) {
        Some((trace, _, _)) => Split::Read(Box::new(trace)),
        None => Split::Declined,
    }
}

/// The offset just after the first comma at or after `from` that has `}`
/// before it and `{` after it (whitespace aside), searched in `reader`
/// (positioned at `from`) for [`SEARCH`] bytes.
pub(super) fn element_start_near(reader: impl Read, from: u64) -> Option<u64> {
    let mut window = Vec::with_capacity(SEARCH);
    reader.take(SEARCH as u64).read_to_end(&mut window).ok()?;
    let ws = |b: &u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t');
    memchr::memchr_iter(b',', &window)
        .find(|&comma| {
            let before = window[..comma].iter().rev().find(|b| !ws(b));
            let after = window[comma + 1..].iter().find(|b| !ws(b));
            before == Some(&b'}') && after == Some(&b'{')
        })
        .map(|comma| from + comma as u64 + 1)
}

/// Reads `head` (the file from its start) on this thread and `tail` (the
/// file from offset `at`) on another; see the module doc. `None`: declined.
pub(super) fn read_parts(
    head: &mut dyn BufRead,
    tail: impl BufRead + Send,
    at: u64,
) -> Option<(Result<Trace, ReadError>, Counts, Head)> {
    let cancel = AtomicBool::new(false);
    let (first, second) = std::thread::scope(|scope| {
        let later = scope.spawn(|| {
            let mut tail = tail;
            stream::read_tail(&mut tail, &cancel)
        });
        let first = stream::read_head(head, at, &cancel);
        if !matches!(first, Some((_, _, Head::Reached))) {
            // Not wanted: the first thread declined or read to the end.
            cancel.store(true, Ordering::Relaxed);
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
        let (later, more) = second?;
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
        let split = read_parts(&mut &bytes[..], &bytes[at..], at as u64);
        let show = |r: Option<(Result<Trace, ReadError>, Counts)>| match r {
            None => "declined".to_string(),
            Some((Ok(t), c)) => format!("{t:?} {c:?}"),
            Some((Err(e), c)) => format!("error {e} {c:?}"),
        };
        let head = split.as_ref().map(|s| s.2);
        (show(whole), show(split.map(|(t, c, _)| (t, c))), head)
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
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 100, "Bytes": -64, "Total Allocated": 32, "Total Reserved": 128, "Ev Idx": 2}}
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
        assert_eq!(reached, 7);
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

    /// A file past [`MIN_SPLIT_BYTES`] (the sample's events repeated, pretty
    /// printed) is read in two halves, as the streaming reader reads it,
    /// and `read_file` takes that path.
    #[test]
    fn a_big_file_is_read_in_two_halves() {
        let event = |k: usize| {
            format!(
                "    {{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 1, \"tid\": {}, \"ts\": {}, \"dur\": 1}},\n    \
                 {{\"ph\": \"i\", \"name\": \"[memory]\", \"pid\": 1, \"tid\": {}, \"ts\": {}, \"args\": {{\"Device Type\": 1, \"Device Id\": 0, \"Addr\": {}, \"Bytes\": {}, \"Total Allocated\": 64, \"Total Reserved\": 128, \"Ev Idx\": {}}}}}",
                k % 3,
                2 * k,
                k % 5,
                2 * k + 1,
                4096 + (k / 2) * 64,
                if k % 2 == 0 { 64 } else { -64 },
                k
            )
        };
        let n = (MIN_SPLIT_BYTES as usize) / 300 + 1000;
        let events: Vec<String> = (0..n).map(event).collect();
        let text = format!("{{\"traceEvents\": [\n{}\n]}}\n", events.join(",\n"));
        assert!(text.len() as u64 >= MIN_SPLIT_BYTES);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.json");
        std::fs::write(&path, &text).unwrap();
        let streamed = stream::read_counted(&mut text.as_bytes())
            .unwrap()
            .0
            .unwrap();
        let Split::Read(split) = read_split(&path) else {
            panic!("not split");
        };
        assert_eq!(format!("{:?}", (*split).unwrap()), format!("{streamed:?}"));
        let read = crate::input::read_file(&path, &Default::default()).unwrap();
        assert_eq!(format!("{read:?}"), format!("{streamed:?}"));
    }

    #[test]
    fn the_search_finds_a_comma_between_objects() {
        let text = br#"x": 1}, "y": [1, 2], {"a": 1}   ,
   {"b": 2}"#;
        let comma = memchr::memmem::find(text, b",\n").unwrap();
        assert_eq!(
            element_start_near(&text[..], 100),
            Some(100 + comma as u64 + 1)
        );
        assert_eq!(element_start_near(&b"[1, 2], 3"[..], 0), None);
    }
}
