//! How the contract is written: `schema_version` first, field names fixed
//! by [`super::Report`], pretty-printed so two saved reports `diff` well,
//! except that an array of numbers (the plotted series) is one line: 2000
//! points are a line each in a diff, not 2000. The report's long arrays are
//! written on two threads ([`chunked`]), to the same bytes.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::Formatter;

/// `value` written in this layout to `out`, with a final newline, through
/// a buffer of the serializer's own.
pub(crate) fn write<T: Serialize + ?Sized, W: Write>(value: &T, out: W) -> io::Result<()> {
    let buffered = io::BufWriter::with_capacity(64 << 10, out);
    let mut ser = serde_json::Serializer::with_formatter(buffered, ReportFormatter::default());
    let written = {
        let _two = TwoThreads::enter();
        value.serialize(&mut ser)
    };
    written.map_err(io::Error::from)?;
    let mut buffered = ser.into_inner();
    buffered.write_all(b"\n")?;
    buffered.flush()
}

thread_local! {
    /// Set while this thread writes a report through [`write`]: the
    /// only serializer [`chunked`] may hand fragments to, for only
    /// [`ReportFormatter`] indents them.
    static TWO_THREADS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// [`TWO_THREADS`] for as long as it lives (as it was before, after).
struct TwoThreads(bool);

impl TwoThreads {
    fn enter() -> TwoThreads {
        // Inside `memcut batch`'s workers the cores are taken; and a worker
        // waiting on rayon may run another job that serializes a report
        // some other way while the flag is up.
        let on = rayon::current_thread_index().is_none()
            && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
        TwoThreads(TWO_THREADS.replace(on))
    }
}

impl Drop for TwoThreads {
    fn drop(&mut self) {
        TWO_THREADS.set(self.0);
    }
}

/// Elements per fragment of a [`chunked`] array.
const CHUNK: usize = 1024;

/// For `#[serde(serialize_with)]` on a long array of objects or arrays
/// (never of numbers, whose layout is one line): written by
/// [`write`], every other run of [`CHUNK`] elements is made on a
/// second thread into a fragment (as [`ReportFormatter`] writes them at no
/// depth) while this thread writes the runs between, and each fragment
/// goes in as one element, indented to its depth by
/// [`ReportFormatter::write_raw_fragment`]: the same bytes as the elements
/// written one by one (`tests`). Two fragments wait at most. Anywhere else
/// (another serializer, another thread, a short array) the elements are
/// serialized as they are.
///
/// On `cs336-nothanmin` forward × 112 (389K rows live at the peak, 193K
/// segments at each of two instants: a 190 MB report) writing took
/// ~430 ms on one core.
pub(crate) fn chunked<T, S>(items: &[T], serializer: S) -> Result<S::Ok, S::Error>
where
    T: Serialize + Sync,
    S: serde::Serializer,
{
    use serde::ser::{Error, SerializeSeq};
    if items.len() < 4 * CHUNK || !TWO_THREADS.get() {
        return serializer.collect_seq(items);
    }
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<String, String>>(2);
        // The odd runs, in order, on the second thread.
        let helper = scope.spawn(move || {
            for run in items.chunks(CHUNK).skip(1).step_by(2) {
                if tx.send(fragment(run)).is_err() {
                    return;
                }
            }
        });
        let mut seq = serializer.serialize_seq(Some(items.len()))?;
        for (k, run) in items.chunks(CHUNK).enumerate() {
            if k % 2 == 0 {
                for item in run {
                    seq.serialize_element(item)?;
                }
                continue;
            }
            let text = rx
                .recv()
                .map_err(|_| S::Error::custom("the second writing thread stopped"))?
                .map_err(S::Error::custom)?;
            seq.serialize_element(&Fragment(&text))?;
        }
        drop(rx);
        if let Err(p) = helper.join() {
            std::panic::resume_unwind(p);
        }
        seq.end()
    })
}

/// `run` as [`ReportFormatter`] writes a run of array elements at no
/// depth: the elements, separated by `,` and a newline.
fn fragment<T: Serialize>(run: &[T]) -> Result<String, String> {
    #[cfg(test)]
    tests::FRAGMENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut out = Vec::with_capacity(256 * run.len());
    for (j, item) in run.iter().enumerate() {
        if j > 0 {
            out.extend_from_slice(b",\n");
        }
        let mut ser = serde_json::Serializer::with_formatter(&mut out, ReportFormatter::default());
        item.serialize(&mut ser).map_err(|e| e.to_string())?;
    }
    String::from_utf8(out).map_err(|e| e.to_string())
}

/// Text written in place of a value by [`ReportFormatter::write_raw_fragment`]
/// (serde_json's raw value, which holds one whole value; a fragment holds
/// several elements).
struct Fragment<'a>(&'a str);

impl Serialize for Fragment<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        // serde_json's token for a raw value (its `raw_value` feature).
        const TOKEN: &str = "$serde_json::private::RawValue";
        let mut s = serializer.serialize_struct(TOKEN, 1)?;
        s.serialize_field(TOKEN, self.0)?;
        s.end()
    }
}

/// How an open array is laid out, decided by its first element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// No element yet.
    Undecided,
    /// Numbers: `[1,2,3]` on one line.
    OneLine,
    /// Anything else: one element per line, as serde_json's pretty printer.
    Lines,
}

/// serde_json's `PrettyFormatter` (two-space indent), but arrays whose
/// first element is a number are written on one line, with every array
/// inside them. The separator before
/// an array element is held back until the element shows what it is.
#[derive(Debug, Default)]
struct ReportFormatter {
    indent: usize,
    has_value: bool,
    arrays: Vec<Layout>,
    /// An array element is about to be written (`true`: the first one).
    pending: Option<bool>,
}

/// A comma, a newline and the deepest indent a report reaches and more:
/// each separator is one slice of it, written at once, not piece by piece
/// (the comma, the newline, two spaces per level): the whole run on the
/// corpus's `cs336-nothanmin` forward snapshot, 193.2 M → 190.2 M
/// instructions (callgrind).
const SEPARATOR: &[u8; 2 + 2 * 32] =
    b",\n                                                                ";

impl ReportFormatter {
    /// A newline and the indent, after a comma if `comma`.
    fn newline_after<W: ?Sized + Write>(&self, w: &mut W, comma: bool) -> io::Result<()> {
        let from = usize::from(!comma);
        match SEPARATOR.get(from..2 + 2 * self.indent) {
            Some(separator) => w.write_all(separator),
            None => {
                w.write_all(&SEPARATOR[from..2])?;
                for _ in 0..self.indent {
                    w.write_all(b"  ")?;
                }
                Ok(())
            }
        }
    }

    fn newline<W: ?Sized + Write>(&self, w: &mut W) -> io::Result<()> {
        self.newline_after(w, false)
    }

    /// Writes the held-back separator before an element that is (or is
    /// not) a number.
    fn element<W: ?Sized + Write>(&mut self, w: &mut W, number: bool) -> io::Result<()> {
        let Some(first) = self.pending.take() else {
            return Ok(());
        };
        let layout = self.arrays.last_mut().expect("inside an array");
        if *layout == Layout::Undecided {
            *layout = if number {
                Layout::OneLine
            } else {
                Layout::Lines
            };
        }
        match (*layout, first) {
            (Layout::OneLine, true) => Ok(()),
            (Layout::OneLine, false) => w.write_all(b","),
            (_, first) => self.newline_after(w, !first),
        }
    }
}

/// Scalar writers: the separator first, then serde_json's own writing.
macro_rules! scalars {
    ($($name:ident: $ty:ty, $number:expr;)*) => {$(
        fn $name<W: ?Sized + Write>(&mut self, w: &mut W, value: $ty) -> io::Result<()> {
            self.element(w, $number)?;
            serde_json::ser::CompactFormatter.$name(w, value)
        }
    )*};
}

impl Formatter for ReportFormatter {
    scalars! {
        write_bool: bool, false;
        write_i8: i8, true;
        write_i16: i16, true;
        write_i32: i32, true;
        write_i64: i64, true;
        write_i128: i128, true;
        write_u8: u8, true;
        write_u16: u16, true;
        write_u32: u32, true;
        write_u64: u64, true;
        write_u128: u128, true;
        write_f32: f32, true;
        write_f64: f64, true;
        write_number_str: &str, true;
    }

    /// `null` in an array of numbers is a number that could not be written
    /// (NaN): it keeps the array on one line.
    fn write_null<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.element(w, true)?;
        w.write_all(b"null")
    }

    fn begin_string<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.element(w, false)?;
        w.write_all(b"\"")
    }

    /// A [`Fragment`] made at no depth, each of its lines after the first
    /// indented to this one (a newline in JSON text is always layout:
    /// strings hold it escaped).
    fn write_raw_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        self.element(w, false)?;
        let bytes = fragment.as_bytes();
        let mut from = 0;
        for nl in memchr::memchr_iter(b'\n', bytes) {
            w.write_all(&bytes[from..nl])?;
            self.newline(w)?;
            from = nl + 1;
        }
        w.write_all(&bytes[from..])
    }

    fn begin_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.element(w, false)?;
        // Inside a one-line array (a tuple such as a segment), one line too.
        let inner = if self.arrays.last() == Some(&Layout::OneLine) {
            Layout::OneLine
        } else {
            Layout::Undecided
        };
        self.arrays.push(inner);
        self.indent += 1;
        self.has_value = false;
        w.write_all(b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.indent -= 1;
        let layout = self.arrays.pop().expect("an array is open");
        if self.has_value && layout == Layout::Lines {
            self.newline(w)?;
        }
        w.write_all(b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(&mut self, _w: &mut W, first: bool) -> io::Result<()> {
        self.pending = Some(first);
        Ok(())
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.element(w, false)?;
        self.indent += 1;
        self.has_value = false;
        w.write_all(b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        self.indent -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        w.write_all(b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        self.newline_after(w, !first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _w: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fragments made by [`chunked`] in this process.
    pub(super) static FRAGMENTS: std::sync::atomic::AtomicUsize =
        std::sync::atomic::AtomicUsize::new(0);

    #[derive(Serialize)]
    struct Row {
        size: u64,
        name: String,
        tuple: (u64, bool, Vec<(u64, Option<&'static str>)>),
        nested: std::collections::BTreeMap<String, Vec<String>>,
        empty: Vec<u8>,
    }

    #[derive(Serialize)]
    struct Rows {
        before: Vec<u64>,
        #[serde(serialize_with = "chunked")]
        rows: Vec<Row>,
        after: &'static str,
    }

    #[derive(Serialize)]
    struct Doc {
        title: &'static str,
        inner: Vec<Rows>,
    }

    fn doc(lens: &[usize]) -> Doc {
        let row = |i: usize| Row {
            size: i as u64 * 512,
            // Escaped newlines and quotes: only layout newlines are indented.
            name: format!("site {i}\n\"q\"\t"),
            tuple: (i as u64, i % 2 == 0, vec![(1, Some("x")), (2, None)]),
            nested: [(format!("k{}", i % 3), vec!["a".into(); i % 3])]
                .into_iter()
                .collect(),
            empty: Vec::new(),
        };
        Doc {
            title: "t",
            inner: lens
                .iter()
                .map(|&n| Rows {
                    before: vec![1, 2],
                    rows: (0..n).map(row).collect(),
                    after: "end",
                })
                .collect(),
        }
    }

    /// Written with and without the second thread, the same bytes; and the
    /// second thread did write.
    #[test]
    fn chunked_arrays_are_written_as_one_thread_writes_them() {
        use std::sync::atomic::Ordering;
        let lens = [
            0,
            1,
            4 * CHUNK - 1,
            4 * CHUNK,
            4 * CHUNK + 1,
            9 * CHUNK + 17,
        ];
        let doc = doc(&lens);
        let written = |two: bool| {
            let was = TWO_THREADS.replace(two);
            let mut out = Vec::new();
            let mut ser =
                serde_json::Serializer::with_formatter(&mut out, ReportFormatter::default());
            doc.serialize(&mut ser).unwrap();
            TWO_THREADS.set(was);
            String::from_utf8(out).unwrap()
        };
        let plain = written(false);
        let before = FRAGMENTS.load(Ordering::Relaxed);
        let two = written(true);
        // 2 + 2 + 5 odd runs of the three long arrays.
        assert!(FRAGMENTS.load(Ordering::Relaxed) - before >= 9);
        assert_eq!(two, plain);
        assert!(plain.contains("\n        {\n          \"size\": 512,"));
        // And through `write`, as the CLI writes.
        let mut out = Vec::new();
        write(&doc, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), plain + "\n");
    }

    /// Everything but arrays of numbers is laid out as serde_json's pretty
    /// printer lays it out.
    #[test]
    fn pretty_except_arrays_of_numbers() {
        let value = serde_json::json!({
            "a": [], "b": {}, "c": ["x", "y"], "d": [1, 2.5, -3], "e": [[1, 2], [3]],
            "f": [{"g": [null, 1]}, {}], "h": "s", "i": null, "j": [true, false],
            "k": [7, false, [[1, "x"], []]],
        });
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, ReportFormatter::default());
        value.serialize(&mut ser).unwrap();
        let got = String::from_utf8(out).unwrap();
        let want = serde_json::to_string_pretty(&value)
            .unwrap()
            .replace("[\n    1,\n    2.5,\n    -3\n  ]", "[1,2.5,-3]")
            .replace("[\n      1,\n      2\n    ]", "[1,2]")
            .replace("[\n      3\n    ]", "[3]")
            .replace("[\n        null,\n        1\n      ]", "[null,1]")
            .replace(
                "[\n    7,\n    false,\n    [\n      [\n        1,\n        \"x\"\n      ],\n      []\n    ]\n  ]",
                "[7,false,[[1,\"x\"],[]]]",
            );
        assert_eq!(got, want);
    }

    /// Past the depth whose indent is written in one piece, the indent is
    /// still serde_json's.
    #[test]
    fn deep_nesting_is_indented_as_serde_json_indents_it() {
        let mut value = serde_json::json!({"leaf": "x", "list": ["a", {}]});
        for depth in 0..40 {
            value = serde_json::json!({"depth": depth, "inner": value, "after": [{"k": ["d", {}]}, "t"]});
            if depth % 3 == 0 {
                value = serde_json::json!([value, "s"]);
            }
        }
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, ReportFormatter::default());
        value.serialize(&mut ser).unwrap();
        let got = String::from_utf8(out).unwrap();
        let want = serde_json::to_string_pretty(&value).unwrap();
        let deep = " ".repeat(2 * 40);
        assert!(want.lines().any(|l| l.starts_with(&deep)));
        assert_eq!(got, want);
    }
}
