//! JSON: the machine contract. `schema_version` first, field names fixed by
//! [`crate::schema::Report`], pretty-printed so two saved reports `diff`
//! well, except that an array of numbers (the plotted series) is one line:
//! 2000 points are a line each in a diff, not 2000.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::Formatter;

use crate::schema::Report;

pub fn render(report: &Report) -> String {
    to_json(report)
}

/// Any report (an analysis, a diff) in this layout, with a final newline.
pub(crate) fn to_json<T: Serialize>(report: &T) -> String {
    let mut out = Vec::with_capacity(64 * 1024);
    write_json(report, &mut out).expect("writing to memory does not fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// [`to_json`] written straight to `out`, never held whole: a report of
/// 193K segments is 190 MB of JSON (`cs336-nothanmin` replicated to 1M
/// entries), which as a string doubled `analyze`'s peak RSS.
///
/// The serializer writes through a buffer of its own, whatever `out` is:
/// its many small writes (a comma, an indent) then compile to copies into
/// that buffer, not calls through `out` (a `dyn Write` from the CLI).
/// Whole-process, `memcut analyze FILE -f json -o /dev/null`, medians of 7
/// pairs side by side (A B A B) against the same binary without it
/// (2026-12-04): snap-cs336 (19.5 MB report) 0.95x wall, snap-unshared
/// (23.4 MB report) 0.92x wall.
pub fn write_json<T: Serialize, W: Write>(report: &T, out: W) -> io::Result<()> {
    let buffered = io::BufWriter::with_capacity(64 << 10, out);
    let mut ser = serde_json::Serializer::with_formatter(buffered, ReportFormatter::default());
    report.serialize(&mut ser).map_err(io::Error::from)?;
    let mut buffered = ser.into_inner();
    buffered.write_all(b"\n")?;
    buffered.flush()
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

impl ReportFormatter {
    fn newline<W: ?Sized + Write>(&self, w: &mut W) -> io::Result<()> {
        w.write_all(b"\n")?;
        for _ in 0..self.indent {
            w.write_all(b"  ")?;
        }
        Ok(())
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
            (_, first) => {
                if !first {
                    w.write_all(b",")?;
                }
                self.newline(w)
            }
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

    fn write_raw_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        self.element(w, false)?;
        w.write_all(fragment.as_bytes())
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
        if !first {
            w.write_all(b",")?;
        }
        self.newline(w)
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
}
