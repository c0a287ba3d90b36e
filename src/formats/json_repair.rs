//! JSON repair shared by the JSON readers (Chrome traces in [`super::chrome`],
//! memory-timeline exports in [`super::timeline_export`]).
//!
//! PyTorch's exporters write text that JSON forbids: bare `NaN`/`Infinity`
//! (Kineto's bandwidth args, `Total Reserved` on some builds), `N/A`, raw
//! control characters inside names, NUL padding after a crash (formats.md
//! D12–D21). Both readers parse strictly first (the common case costs
//! nothing), then retry once on a repaired copy, and report errors at a byte
//! offset of the *original* input. This module is that one path, so the two
//! readers accept the same inputs and word their errors the same way.

use std::borrow::Cow;
use std::fmt;

use crate::model::Diagnostic;

/// What [`sanitize`] rewrote; each kind becomes one info diagnostic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Repairs {
    /// Bare non-JSON tokens (`NaN`, `Infinity`, `N/A`, …) replaced by `null`.
    pub(crate) tokens: usize,
    /// Raw control characters inside strings that were escaped.
    pub(crate) control_chars: usize,
    /// Trailing NUL bytes dropped.
    pub(crate) nul_padding: usize,
}

impl Repairs {
    pub(crate) fn add(&mut self, other: Repairs) {
        self.tokens += other.tokens;
        self.control_chars += other.control_chars;
        self.nul_padding += other.nul_padding;
    }

    pub(crate) fn diagnostics(&self) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        if self.tokens > 0 {
            out.push(Diagnostic::info(format!(
                "replaced {} non-JSON number token(s) (NaN/Infinity/N/A) with null",
                self.tokens
            )));
        }
        if self.control_chars > 0 {
            out.push(Diagnostic::info(format!(
                "escaped {} raw control character(s) inside strings",
                self.control_chars
            )));
        }
        if self.nul_padding > 0 {
            out.push(Diagnostic::info(format!(
                "ignored {} trailing NUL byte(s)",
                self.nul_padding
            )));
        }
        out
    }
}

/// Output of [`sanitize`]: the input, rewritten only where needed.
pub(crate) struct Sanitized<'a> {
    pub(crate) bytes: Cow<'a, [u8]>,
    pub(crate) repairs: Repairs,
}

impl Sanitized<'_> {
    pub(crate) fn changed(&self) -> bool {
        matches!(self.bytes, Cow::Owned(_))
    }
}

/// A buffer that did not parse, even after repair.
#[derive(Debug, Clone)]
pub(crate) struct Unparsed {
    /// The error of the strict parse of the original bytes.
    pub(crate) error: JsonErrorAt,
    /// The input ended inside a value (cut short, not malformed).
    pub(crate) truncated: bool,
}

/// Parses `bytes` with `parse`; when that fails, once more on a repaired
/// copy (see [`sanitize`]). `parse` is told what the repair changed
/// ([`Repairs::default`] on the first try) so it can report it.
///
/// A buffer that ends too early is not retried: a repair cannot complete it,
/// and copying a large file for nothing is the slow part of a truncated read.
pub(crate) fn parse_or_repair<T>(
    bytes: &[u8],
    mut parse: impl FnMut(&[u8], Repairs) -> serde_json::Result<T>,
) -> Result<T, Unparsed> {
    let unparsed = match parse(bytes, Repairs::default()) {
        Ok(v) => return Ok(v),
        Err(e) => Unparsed {
            error: JsonErrorAt::new(&e, bytes, 0),
            truncated: e.classify() == serde_json::error::Category::Eof,
        },
    };
    if !unparsed.truncated {
        let clean = sanitize(bytes);
        if clean.changed() {
            if let Ok(v) = parse(&clean.bytes, clean.repairs) {
                return Ok(v);
            }
        }
    }
    Err(unparsed)
}

/// Bytes that end a plain run inside a string: quote, backslash, control chars.
const STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

fn is_bad_token(tok: &[u8]) -> bool {
    let body = match tok.first() {
        Some(b'-' | b'+') => &tok[1..],
        _ => tok,
    };
    ["nan", "inf", "infinity", "n/a", "undefined"]
        .iter()
        .any(|w| body.eq_ignore_ascii_case(w.as_bytes()))
}

/// Rewrites bare `NaN`/`nan`/`Infinity`/`-Infinity`/`inf`/`N/A` tokens outside
/// strings into `null`, escapes raw control characters inside strings and drops
/// trailing NUL padding. Copies only when something must change.
///
/// Offsets in the output differ from the input after an edit: report error
/// positions from a parse of the original bytes.
pub(crate) fn sanitize(input: &[u8]) -> Sanitized<'_> {
    let mut end = input.len();
    while end > 0 && matches!(input[end - 1], 0 | b' ' | b'\t' | b'\r' | b'\n') {
        end -= 1;
    }
    let nul_padding = input[end..].iter().filter(|&&b| b == 0).count();
    let src = if nul_padding > 0 {
        &input[..end]
    } else {
        input
    };

    let n = src.len();
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0usize;
    let (mut tokens, mut control_chars) = (0usize, 0usize);
    let mut in_str = false;
    let mut i = 0usize;
    while i < n {
        let c = src[i];
        if in_str {
            if !STRING_STOP[c as usize] {
                i += 1;
                continue;
            }
            match c {
                b'"' => {
                    in_str = false;
                    i += 1;
                }
                b'\\' => i += 2,
                _ => {
                    let o = out.get_or_insert_with(|| Vec::with_capacity(n + 64));
                    o.extend_from_slice(&src[copied..i]);
                    match c {
                        b'\n' => o.extend_from_slice(b"\\n"),
                        b'\r' => o.extend_from_slice(b"\\r"),
                        b'\t' => o.extend_from_slice(b"\\t"),
                        _ => o.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
                    }
                    copied = i + 1;
                    control_chars += 1;
                    i += 1;
                }
            }
        } else {
            match c {
                b'"' => {
                    in_str = true;
                    i += 1;
                }
                b'a'..=b'z' | b'A'..=b'Z' | b'-' | b'+' => {
                    let mut j = i + 1;
                    while j < n && (src[j].is_ascii_alphanumeric() || src[j] == b'/') {
                        j += 1;
                    }
                    if is_bad_token(&src[i..j]) {
                        let o = out.get_or_insert_with(|| Vec::with_capacity(n + 64));
                        o.extend_from_slice(&src[copied..i]);
                        o.extend_from_slice(b"null");
                        copied = j;
                        tokens += 1;
                    }
                    i = j;
                }
                _ => i += 1,
            }
        }
    }
    let bytes = match out {
        Some(mut o) => {
            o.extend_from_slice(&src[copied..]);
            Cow::Owned(o)
        }
        None if nul_padding > 0 => Cow::Owned(src.to_vec()),
        None => Cow::Borrowed(input),
    };
    Sanitized {
        bytes,
        repairs: Repairs {
            tokens,
            control_chars,
            nul_padding,
        },
    }
}

/// A serde_json error as a one-line message with a byte offset in the input.
#[derive(Debug, Clone)]
pub(crate) struct JsonErrorAt {
    pub(crate) message: String,
    pub(crate) offset: usize,
}

impl JsonErrorAt {
    /// `err` came from parsing `buf`, which starts at `base` in the input.
    pub(crate) fn new(err: &serde_json::Error, buf: &[u8], base: usize) -> JsonErrorAt {
        let mut message = err.to_string();
        if let Some(p) = message.rfind(" at line ") {
            message.truncate(p);
        }
        let offset = base + line_col_to_offset(buf, err.line(), err.column());
        JsonErrorAt { message, offset }
    }
}

impl fmt::Display for JsonErrorAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.message, self.offset)
    }
}

fn line_col_to_offset(buf: &[u8], line: usize, column: usize) -> usize {
    let mut start = 0usize;
    for _ in 1..line.max(1) {
        match buf[start..].iter().position(|&b| b == b'\n') {
            Some(p) => start += p + 1,
            None => return buf.len(),
        }
    }
    (start + column.saturating_sub(1)).min(buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_rewrites_only_outside_strings() {
        let s = sanitize(b"[NaN, \"a\tb\", inf, -Infinity, N/A, \"N/A\", 1]\0\0");
        assert_eq!(
            &*s.bytes,
            b"[null, \"a\\tb\", null, null, null, \"N/A\", 1]".as_slice()
        );
        assert_eq!(
            s.repairs,
            Repairs {
                tokens: 4,
                control_chars: 1,
                nul_padding: 2
            }
        );
        let same = sanitize(b"[1, \"NaN\", true, -2.5e-3]");
        assert!(!same.changed());
    }

    fn parse_value(bytes: &[u8]) -> Result<(serde_json::Value, Repairs), Unparsed> {
        parse_or_repair(bytes, |buf, repairs| {
            serde_json::from_slice(buf).map(|v| (v, repairs))
        })
    }

    #[test]
    fn repair_is_tried_after_the_strict_parse_and_reported() {
        let (v, r) = parse_value(b"[1, 2]").unwrap();
        assert_eq!((v, r), (serde_json::json!([1, 2]), Repairs::default()));
        let (v, r) = parse_value(b"[1, NaN]").unwrap();
        assert_eq!(v, serde_json::json!([1, null]));
        assert_eq!(r.tokens, 1);
        assert_eq!(r.diagnostics().len(), 1);
    }

    #[test]
    fn an_unrepairable_buffer_reports_the_strict_error() {
        // The repaired copy fails too (at another offset, in other bytes):
        // the error is the original's.
        let e = parse_value(b"[NaN,\n  \"a\" \"b\"]").unwrap_err();
        assert_eq!(e.error.to_string(), "expected value at byte 1");
        assert!(!e.truncated);
        let e = parse_value(b"[1, 2").unwrap_err();
        assert!(e.truncated);
        assert_eq!(e.error.offset, 4);
    }
}
