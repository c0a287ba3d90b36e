//! The tokens of the streaming reader (`stream.rs`): whitespace, strings,
//! keys, literals and numbers, and the values it skips, each read from a
//! slice at an index and checked as `serde_json` checks it, or
//! [`Stop`]ped short. Hot: every
//! byte of a trace passes through here, so the common shapes (an indented
//! line, a short key, a plain ASCII name, an integer) take word-at-a-time
//! paths, and only what is rare goes the general way.

use std::borrow::Cow;

use super::{Parsed, Stop};
use crate::formats::chrome::skeleton::Num;

/// Skips JSON whitespace; the byte after it. Most calls find none, or one
/// space; pretty-printed traces indent every line, and a run of spaces
/// is skipped a word at a time.
#[inline(always)]
pub(super) fn ws(s: &[u8], i: &mut usize) -> Parsed<u8> {
    let b = *s.get(*i).ok_or(Stop::More)?;
    if b > b' ' {
        return Ok(b);
    }
    ws_run(s, i)
}

/// [`ws`] from a byte that may be whitespace.
fn ws_run(s: &[u8], i: &mut usize) -> Parsed<u8> {
    loop {
        let b = *s.get(*i).ok_or(Stop::More)?;
        if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
            return Ok(b);
        }
        *i += 1;
        match s.get(*i) {
            Some(&next) if next > b' ' => return Ok(next),
            Some(b' ') => *i += spaces(s, *i),
            _ => {}
        }
    }
}

/// How many spaces `s` holds from `from` on, eight bytes at a time.
#[inline]
fn spaces(s: &[u8], from: usize) -> usize {
    let mut k = from;
    while let Some(word) = s.get(k..k + 8) {
        let other = u64::from_le_bytes(word.try_into().unwrap_or_default()) ^ (ONES * 0x20);
        if other != 0 {
            return k - from + other.trailing_zeros() as usize / 8;
        }
        k += 8;
    }
    k - from
}

/// `0x0101…01`: a byte broadcast to a word when multiplied.
const ONES: u64 = u64::MAX / 255;

/// The first quote, backslash or control character (below 0x20) at or
/// after `i`: the bytes that end a plain run inside a string. The first
/// 16 bytes (a key, a name) eight at a time (the test `serde_json` uses:
/// the lowest flagged byte is exact); longer strings (call stacks, file
/// paths) with `memchr` for the quote and backslash, then a check for
/// control characters before it.
#[inline(always)]
fn string_stop(s: &[u8], i: usize) -> Option<usize> {
    string_stop_ascii(s, i).map(|(at, _)| at)
}

/// [`string_stop`], and whether the bytes before the stop are all ASCII
/// (read on the way, so that a text need not be checked again for UTF-8).
/// On x86-64, 16 bytes at a time with SSE2 (part of every x86-64 CPU) for
/// the first 64 bytes: a trace's names and categories are read in one to
/// four steps, where eight bytes at a time took up to eight and the rest
/// of a long name went to `memchr` (callgrind, the corpus's OWLv2 trace:
/// [`text`] 141 → 82 instructions a call, 396,534 calls).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn string_stop_ascii(s: &[u8], i: usize) -> Option<(usize, bool)> {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    let mut k = i;
    // The high bits of the bytes passed, a bit a byte.
    let mut high = 0u32;
    for _ in 0..4 {
        let Some(chunk) = s.get(k..k + 16) else {
            return last_stop(s, k, high == 0);
        };
        // SAFETY: SSE2 is in the x86-64 baseline, so these intrinsics are
        // always available; the load reads the 16 bytes of `chunk`.
        let (stops, highs) = unsafe {
            let v = _mm_loadu_si128(chunk.as_ptr().cast());
            // A control character: a byte that `min(byte, 0x1f)` leaves as it is.
            let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
            let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
            let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
            let stops = _mm_or_si128(_mm_or_si128(quote, backslash), control);
            (_mm_movemask_epi8(stops) as u32, _mm_movemask_epi8(v) as u32)
        };
        if stops != 0 {
            let at = stops.trailing_zeros();
            let before = (1u32 << at) - 1;
            return Some((k + at as usize, high == 0 && highs & before == 0));
        }
        high |= highs;
        k += 16;
    }
    let (at, ascii) = long_string_stop(s, k)?;
    Some((at, high == 0 && ascii))
}

/// [`string_stop_ascii`] eight bytes at a time (other than x86-64).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn string_stop_ascii(s: &[u8], i: usize) -> Option<(usize, bool)> {
    let mut k = i;
    // The high bits of the bytes passed.
    let mut high = 0u64;
    for _ in 0..2 {
        let Some(word) = s.get(k..k + 8) else {
            return last_stop(s, k, high == 0);
        };
        let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
        let hit = string_stops(w);
        if hit != 0 {
            // Every bit below the lowest flag: the bytes before the stop.
            let before = (hit & hit.wrapping_neg()) - 1;
            high |= w & before & (ONES << 7);
            return Some((k + hit.trailing_zeros() as usize / 8, high == 0));
        }
        high |= w & (ONES << 7);
        k += 8;
    }
    let (at, ascii) = long_string_stop(s, k)?;
    Some((at, high == 0 && ascii))
}

/// [`string_stop_ascii`] over the last bytes of `s`, from `k`, one at a
/// time; `ascii` says whether the bytes before `k` were.
fn last_stop(s: &[u8], k: usize, ascii: bool) -> Option<(usize, bool)> {
    let at = (k..s.len()).find(|&k| matches!(s[k], b'"' | b'\\' | 0..=0x1f))?;
    Some((at, ascii && s[k..at].is_ascii()))
}

/// The high bit of each byte of `word` that is a quote, a backslash or a
/// control character: exact for the lowest one.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
fn string_stops(c: u64) -> u64 {
    let ctrl = c.wrapping_sub(ONES * 0x20) & !c;
    let q = c ^ (ONES * u64::from(b'"'));
    let quote = q.wrapping_sub(ONES) & !q;
    let b = c ^ (ONES * u64::from(b'\\'));
    let backslash = b.wrapping_sub(ONES) & !b;
    (ctrl | quote | backslash) & (ONES << 7)
}

/// [`string_stop_ascii`] past the first 16 bytes.
#[inline(never)]
fn long_string_stop(s: &[u8], k: usize) -> Option<(usize, bool)> {
    let rest = &s[k..];
    let end = memchr::memchr2(b'"', b'\\', rest);
    let run = &rest[..end.unwrap_or(rest.len())];
    // No early exit: the compiler reads many bytes at a time.
    let (ctrl, high) = run.iter().fold((0u8, 0u8), |(ctrl, high), &b| {
        (ctrl | u8::from(b < 0x20), high | (b & 0x80))
    });
    if ctrl != 0 {
        return run
            .iter()
            .position(|&b| b < 0x20)
            .map(|at| (k + at, run[..at].is_ascii()));
    }
    end.map(|at| (k + at, high == 0))
}

/// A string whose opening quote is at `*i`, skipped as `serde_json`
/// ignores one: escapes checked, control characters refused, the bytes
/// not otherwise validated.
fn skip_string(s: &[u8], i: &mut usize) -> Parsed<()> {
    let mut k = *i + 1;
    loop {
        let at = string_stop(s, k).ok_or(Stop::More)?;
        match s[at] {
            b'"' => {
                *i = at + 1;
                return Ok(());
            }
            b'\\' => match *s.get(at + 1).ok_or(Stop::More)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => k = at + 2,
                b'u' => {
                    let hex = s.get(at + 2..at + 6).ok_or(Stop::More)?;
                    if !hex.iter().all(u8::is_ascii_hexdigit) {
                        return Err(Stop::Unsure);
                    }
                    k = at + 6;
                }
                _ => return Err(Stop::Unsure),
            },
            _ => return Err(Stop::Unsure),
        }
    }
}

/// A string read as text (quote at `*i`): borrowed when it has no escape,
/// decoded by `serde_json` when it has one (so both read it alike).
pub(super) fn text<'s>(s: &'s [u8], i: &mut usize) -> Parsed<Cow<'s, str>> {
    let start = *i;
    let (at, ascii) = string_stop_ascii(s, start + 1).ok_or(Stop::More)?;
    match s[at] {
        b'"' => {
            let bytes = &s[start + 1..at];
            let t = if ascii {
                // SAFETY: ASCII bytes are UTF-8 (the scan for the closing
                // quote saw every byte's high bit clear).
                unsafe { std::str::from_utf8_unchecked(bytes) }
            } else {
                std::str::from_utf8(bytes).map_err(|_| Stop::Unsure)?
            };
            *i = at + 1;
            Ok(Cow::Borrowed(t))
        }
        b'\\' => {
            skip_string(s, i)?;
            let t: String = serde_json::from_slice(&s[start..*i]).map_err(|_| Stop::Unsure)?;
            Ok(Cow::Owned(t))
        }
        _ => Err(Stop::Unsure),
    }
}

/// An object key without escapes (the only kind memcut's keys are) and the
/// colon after it, checked to be UTF-8 as `serde_json` checks the keys it
/// matches. Escaped keys are left to `serde_json`, which decodes them
/// before matching.
#[inline(always)]
pub(super) fn key<'s>(s: &'s [u8], i: &mut usize) -> Parsed<&'s [u8]> {
    if ws(s, i)? != b'"' {
        return Err(Stop::Unsure);
    }
    let start = *i + 1;
    let (at, ascii) = string_stop_ascii(s, start).ok_or(Stop::More)?;
    if s[at] != b'"' {
        return Err(Stop::Unsure);
    }
    let k = &s[start..at];
    if !ascii && std::str::from_utf8(k).is_err() {
        return Err(Stop::Unsure);
    }
    *i = at + 1;
    if ws(s, i)? != b':' {
        return Err(Stop::Unsure);
    }
    *i += 1;
    ws(s, i)?;
    Ok(k)
}

/// `true`, `false` or `null` at `*i` (the first letter checked by the caller).
pub(super) fn literal(s: &[u8], i: &mut usize, word: &[u8]) -> Parsed<()> {
    let have = &s[*i..s.len().min(*i + word.len())];
    if have != &word[..have.len()] {
        return Err(Stop::Unsure);
    }
    if have.len() < word.len() {
        return Err(Stop::More);
    }
    *i += word.len();
    Ok(())
}

/// A number's token, checked against JSON's grammar, with its digits read
/// while they were scanned.
struct Number<'s> {
    token: &'s [u8],
    negative: bool,
    /// No fraction, no exponent.
    integer: bool,
    /// The digits without the point, as an integer: exact when `digits`
    /// is at most 19 (wrapped otherwise).
    mantissa: u64,
    digits: u32,
    /// The value is `mantissa` times ten to this (saturated far beyond
    /// any `f64`).
    exp10: i32,
}

/// Powers of ten exactly representable in an `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A number's token at `*i`, checked against JSON's grammar. Needs the
/// byte after it.
/// Inlined: where the value is not wanted (a skipped number), the
/// compiler drops the arithmetic.
#[inline(always)]
fn number<'s>(s: &'s [u8], i: &mut usize) -> Parsed<Number<'s>> {
    let start = *i;
    let mut k = start;
    let negative = s[k] == b'-';
    k += usize::from(negative);
    let mut mantissa = 0;
    let mut digits = match *s.get(k).ok_or(Stop::More)? {
        b'0' => {
            k += 1;
            1
        }
        b'1'..=b'9' => read_digits(s, &mut k, &mut mantissa)?,
        _ => return Err(Stop::Unsure),
    };
    let mut integer = true;
    let mut exp10 = 0i32;
    if *s.get(k).ok_or(Stop::More)? == b'.' {
        k += 1;
        integer = false;
        let fraction = read_digits(s, &mut k, &mut mantissa)?;
        if fraction == 0 {
            return Err(Stop::Unsure);
        }
        digits += fraction;
        exp10 = -(fraction.min(1 << 20) as i32);
    }
    if matches!(*s.get(k).ok_or(Stop::More)?, b'e' | b'E') {
        k += 1;
        integer = false;
        let sign = *s.get(k).ok_or(Stop::More)?;
        k += usize::from(matches!(sign, b'+' | b'-'));
        let from = k;
        let mut e = 0i32;
        loop {
            let d = s.get(k).ok_or(Stop::More)?.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            e = (e * 10 + i32::from(d)).min(1 << 20);
            k += 1;
        }
        if k == from {
            return Err(Stop::Unsure);
        }
        exp10 += if sign == b'-' { -e } else { e };
    }
    *i = k;
    Ok(Number {
        token: &s[start..k],
        negative,
        integer,
        mantissa,
        digits,
        exp10,
    })
}

/// Ten to the `n`, to append `n` digits to a mantissa. A static: a table
/// written in the expression was built on the stack at every number (8
/// stores; callgrind, the corpus's OWLv2 trace: `json_number` 88.1 M →
/// 82.0 M instructions).
static SHIFT10: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// ASCII digits from `*k` on, appended to `mantissa` (wrapping); how many.
/// A word at a time while eight bytes are left: eight digits, or the
/// digits that start the word.
#[inline(always)]
fn read_digits(s: &[u8], k: &mut usize, mantissa: &mut u64) -> Parsed<u32> {
    let from = *k;
    while let Some(word) = s.get(*k..*k + 8) {
        let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
        let n = leading_digits(w);
        if n == 8 {
            *mantissa = mantissa
                .wrapping_mul(100_000_000)
                .wrapping_add(eight_digits(w));
            *k += 8;
            continue;
        }
        if n > 0 {
            *mantissa = mantissa
                .wrapping_mul(SHIFT10[n])
                .wrapping_add(first_digits(w, n));
            *k += n;
        }
        return Ok((*k - from).min(u32::MAX as usize) as u32);
    }
    loop {
        let d = s.get(*k).ok_or(Stop::More)?.wrapping_sub(b'0');
        if d > 9 {
            break;
        }
        *mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
        *k += 1;
    }
    Ok((*k - from).min(u32::MAX as usize) as u32)
}

/// How many ASCII digits start `w` (a little-endian word), 0 to 8.
#[inline(always)]
fn leading_digits(w: u64) -> usize {
    // A byte is a digit when its high nibble is 3, and still 3 after
    // adding 6. Adding carries only into later bytes, so the first byte
    // that is not a digit is found exactly.
    let nibbles = ONES * 0xf0;
    let digit = ONES * 0x30;
    let off = ((w & nibbles) ^ digit) | ((w.wrapping_add(ONES * 6) & nibbles) ^ digit);
    // The high bit of every byte of `off` that is not zero.
    let low7 = !(ONES << 7);
    let flags = (((off & low7) + low7) | off) & (ONES << 7);
    flags.trailing_zeros() as usize / 8
}

/// The value of eight ASCII digits read as a little-endian word (the
/// first digit in the lowest byte): pairs, then fours, then all eight.
#[inline]
fn eight_digits(w: u64) -> u64 {
    let v = w.wrapping_sub(ONES * 0x30);
    let v = (v.wrapping_mul(10) + (v >> 8)) & 0x00ff_00ff_00ff_00ff;
    let v = (v.wrapping_mul(100) + (v >> 16)) & 0x0000_ffff_0000_ffff;
    (v.wrapping_mul(10_000) + (v >> 32)) & 0xffff_ffff
}

impl Number<'_> {
    /// The number as `serde_json` hands it to the skeleton's visitors;
    /// what it would not hand over the same way (`-0`, integers beyond 64
    /// bits, floats out of range) is [`Stop::Unsure`].
    fn value(&self) -> Parsed<Num> {
        let m = self.mantissa;
        if self.integer && self.digits <= 19 {
            return match (self.negative, m) {
                // `serde_json` reads `-0` as a float.
                (true, 0) => Err(Stop::Unsure),
                (true, _) => 0i64.checked_sub_unsigned(m).map(Num::I).ok_or(Stop::Unsure),
                (false, _) => Ok(i64::try_from(m).map_or(Num::U(m), Num::I)),
            };
        }
        // Exact mantissa, exact power of ten: one correctly rounded
        // operation gives the correctly rounded value `parse` gives
        // (Clinger's fast path).
        let exact = self.digits <= 19 && m <= 1 << 53 && self.exp10.unsigned_abs() <= 22;
        if !self.integer && exact {
            let power = POW10[self.exp10.unsigned_abs() as usize];
            let v = if self.exp10 < 0 {
                m as f64 / power
            } else {
                m as f64 * power
            };
            return Ok(Num::F(if self.negative { -v } else { v }));
        }
        // Only ASCII digits, signs, `.` and `e` were accepted.
        let t = std::str::from_utf8(self.token).map_err(|_| Stop::Unsure)?;
        if self.integer {
            if let Ok(v) = t.parse::<i64>() {
                return Ok(Num::I(v));
            }
            return t.parse::<u64>().map(Num::U).map_err(|_| Stop::Unsure);
        }
        match t.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(Num::F(v)),
            _ => Err(Stop::Unsure),
        }
    }
}

/// A number at `*i` as [`Number::value`] gives it: the common ones read
/// in place ([`short_number`]), the rest by a call.
#[inline(always)]
pub(super) fn json_number(s: &[u8], i: &mut usize) -> Parsed<Num> {
    match short_number(s, i) {
        Some(v) => Ok(v),
        None => long_number(s, i),
    }
}

/// [`json_number`] of a number [`short_number`] does not read: apart, so
/// that the common path needs few registers.
#[inline(never)]
fn long_number(s: &[u8], i: &mut usize) -> Parsed<Num> {
    number(s, i)?.value()
}

/// The value of the first `n` (1 to 7) ASCII digits of `w`, a word read
/// little-endian.
#[inline(always)]
fn first_digits(w: u64, n: usize) -> u64 {
    // The digits moved to the top of the word, zeros below them.
    eight_digits((w << (8 * (8 - n))) | ((ONES * u64::from(b'0')) >> (8 * n)))
}

/// The common numbers of a trace, read from a few words as
/// [`Number::value`] reads them: an integer of up to 15 digits (a thread
/// id, an address, a size), or a fraction with up to 15 digits before the
/// point and one to seven after it, no exponent, whose mantissa is at
/// most 2^53 (a time stamp, a duration: one correctly rounded division,
/// Clinger's fast path). `None` for anything else (a leading zero before
/// a digit, `-0`, more digits, an exponent, fewer than eight bytes left
/// after a part), with `*i` unmoved: [`number`] reads those. Callgrind,
/// the corpus's OWLv2 trace (696,550 numbers): `json_number` 125.1 M →
/// 91.2 M instructions with its callees.
#[inline(always)]
fn short_number(s: &[u8], i: &mut usize) -> Option<Num> {
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(s.get(at..at + 8)?.try_into().ok()?))
    };
    let negative = *s.get(*i)? == b'-';
    let k = *i + usize::from(negative);
    let w = word(k)?;
    let n = leading_digits(w);
    if n == 0 || (n > 1 && s[k] == b'0') {
        return None;
    }
    // The digits before the point: one word's, or eight and a second's.
    let (whole, digits) = if n < 8 {
        (first_digits(w, n), n)
    } else {
        let w2 = word(k + 8)?;
        let n2 = leading_digits(w2);
        match n2 {
            8 => return None,
            0 => (eight_digits(w), 8),
            _ => (eight_digits(w) * SHIFT10[n2] + first_digits(w2, n2), 8 + n2),
        }
    };
    let after = k + digits;
    match s[after] {
        b'.' => {}
        b'e' | b'E' => return None,
        _ => {
            // An integer: below 10^15, so an `i64`.
            let m = whole as i64;
            if negative && m == 0 {
                return None;
            }
            *i = after;
            return Some(Num::I(if negative { -m } else { m }));
        }
    }
    let f = word(after + 1)?;
    let fraction = leading_digits(f);
    if fraction == 0 || fraction == 8 || matches!(s[after + 1 + fraction], b'e' | b'E') {
        return None;
    }
    // At most 22 digits: `checked_mul` leaves the rest to `number`.
    let m = whole
        .checked_mul(SHIFT10[fraction])?
        .checked_add(first_digits(f, fraction))?;
    if m > 1 << 53 {
        return None;
    }
    let v = m as f64 / POW10[fraction];
    *i = after + 1 + fraction;
    Some(Num::F(if negative { -v } else { v }))
}

/// Number tokens at the edges of [`Number::value`]'s paths (64 bits,
/// exact floats, `-0`, exponents), and tokens that are not JSON.
/// Containers nested deeper than this are left to `serde_json`.
const MAX_DEPTH: u32 = 100;

/// Skips one value at `*i` (whitespace already skipped), validating it as
/// `serde_json` validates a value it ignores.
pub(super) fn skip_value(s: &[u8], i: &mut usize) -> Parsed<()> {
    match s[*i] {
        b'{' | b'[' => skip_container(s, i),
        _ => skip_scalar(s, i),
    }
}

fn skip_scalar(s: &[u8], i: &mut usize) -> Parsed<()> {
    match s[*i] {
        b'"' => skip_string(s, i),
        b'-' | b'0'..=b'9' => number(s, i).map(|_| ()),
        b't' => literal(s, i, b"true"),
        b'f' => literal(s, i, b"false"),
        b'n' => literal(s, i, b"null"),
        _ => Err(Stop::Unsure),
    }
}

/// An object or array at `*i`, without recursion: `objects` holds one bit
/// per open container (1: object), `depth` how many are open.
fn skip_container(s: &[u8], i: &mut usize) -> Parsed<()> {
    let mut objects: u128 = 0;
    let mut depth = 0u32;
    loop {
        // At the start of a value.
        let b = s[*i];
        if b == b'{' || b == b'[' {
            if depth == MAX_DEPTH {
                return Err(Stop::Unsure);
            }
            depth += 1;
            objects = objects << 1 | u128::from(b == b'{');
            *i += 1;
            let close = if b == b'{' { b'}' } else { b']' };
            if ws(s, i)? == close {
                *i += 1;
                depth -= 1;
                objects >>= 1;
            } else {
                if b == b'{' {
                    skip_key(s, i)?;
                }
                continue;
            }
        } else {
            skip_scalar(s, i)?;
        }
        // After a value: close containers until a comma starts the next one.
        loop {
            if depth == 0 {
                return Ok(());
            }
            let object = objects & 1 == 1;
            match ws(s, i)? {
                b',' => {
                    *i += 1;
                    ws(s, i)?;
                    if object {
                        skip_key(s, i)?;
                    }
                    break;
                }
                b'}' if object => {}
                b']' if !object => {}
                _ => return Err(Stop::Unsure),
            }
            *i += 1;
            depth -= 1;
            objects >>= 1;
        }
    }
}

/// A key of an ignored object and its colon (not checked for UTF-8, as
/// `serde_json` does not check ignored strings); whitespace after.
fn skip_key(s: &[u8], i: &mut usize) -> Parsed<()> {
    if ws(s, i)? != b'"' {
        return Err(Stop::Unsure);
    }
    skip_string(s, i)?;
    if ws(s, i)? != b':' {
        return Err(Stop::Unsure);
    }
    *i += 1;
    ws(s, i)?;
    Ok(())
}

/// The end of the value at `*i`, found by matching brackets outside
/// strings, without validating it: for the bytes handed to `serde_json`
/// (which validates them).
pub(super) fn value_end(s: &[u8], i: &mut usize) -> Parsed<()> {
    match *s.get(*i).ok_or(Stop::More)? {
        b'"' => return string_end(s, i),
        b'{' | b'[' => {}
        _ => {
            // A scalar: up to the byte that ends it.
            while !matches!(
                *s.get(*i).ok_or(Stop::More)?,
                b',' | b']' | b'}' | b' ' | b'\n' | b'\r' | b'\t'
            ) {
                *i += 1;
            }
            return Ok(());
        }
    }
    let mut depth = 0usize;
    loop {
        match *s.get(*i).ok_or(Stop::More)? {
            b'"' => {
                string_end(s, i)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    *i += 1;
                    return Ok(());
                }
            }
            _ => {}
        }
        *i += 1;
    }
}

/// Past the string whose quote is at `*i` (escapes skipped, not checked).
fn string_end(s: &[u8], i: &mut usize) -> Parsed<()> {
    let mut k = *i + 1;
    loop {
        let rest = s.get(k..).ok_or(Stop::More)?;
        let at = memchr::memchr2(b'"', b'\\', rest).ok_or(Stop::More)?;
        if rest[at] == b'"' {
            *i = k + at + 1;
            return Ok(());
        }
        k += at + 2;
    }
}

#[cfg(test)]
pub(in crate::formats::chrome) const NUMBERS: &[&str] = &[
    "0",
    "7",
    "-1",
    "10",
    "12345678",
    "123456789",
    "1234567890123456",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    "1000000000000000000000",
    "-0",
    "0.0",
    "-0.0",
    "1.5",
    "-1.5e3",
    "1419116234324.666",
    "5349805725085.384",
    "0.1",
    "0.30000000000000004",
    "1e5",
    "1E+5",
    "1e-5",
    "1e22",
    "1e23",
    "1e-22",
    "1e-23",
    "9007199254740992.0",
    "9007199254740993.0",
    "9007199254740993",
    "123456789012345678.9",
    "1234567890123456789.5",
    "0.0000000000000000000001",
    "4.9e-324",
    "5e-324",
    "2.2250738585072014e-308",
    "1.7976931348623157e308",
    "1e999",
    "-1e999",
    "1e-999",
    "1e0000000000000000000000001",
    "01",
    "00",
    "-01",
    "1.",
    ".5",
    "1e",
    "1e+",
    "-",
    "+1",
    "1.e5",
    "12345678x",
    "1234567.8",
    "0e5",
    "-0e0",
    "0.5E-3",
];

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `token` read by [`json_number`] with a byte after it, as `serde_json`
    /// hands it to the skeleton's [`Num`] (Debug strings: bit-identical
    /// floats, `-0.0` included). `Unsure` is checked to be one of the
    /// cases left to `serde_json` on purpose.
    fn same_number(token: &str) {
        same_number_before(token, ",");
        // With bytes to spare after it, as in a trace: the word-at-a-time
        // reading (`short_number`) takes most numbers, each end in turn.
        for end in [",", "]", "}", " ", "\n", "x"] {
            same_number_before(token, &format!("{end}0123456789abcdef"));
        }
    }

    /// [`same_number`] with `after` after the token.
    fn same_number_before(token: &str, after: &str) {
        let text = format!("{token}{after}");
        let mut i = 0;
        let ours = json_number(text.as_bytes(), &mut i);
        let theirs = serde_json::from_str::<Num>(token);
        match (ours, theirs) {
            (Ok(v), Ok(want)) if i == token.len() => {
                assert_eq!(format!("{v:?}"), format!("{want:?}"), "{token}");
            }
            // A token that is not all JSON: the byte where ours stopped is
            // refused by the caller, as `serde_json` refuses the token.
            (Ok(_), Err(_)) if i < token.len() => {}
            (Err(Stop::Unsure), Err(_)) => {}
            (Err(Stop::Unsure), Ok(want)) => {
                let negative_zero = token == "-0";
                let beyond_64_bits = matches!(want, Num::F(_)) && !token.contains(['.', 'e', 'E']);
                let below_i64 = token.starts_with('-') && token.parse::<i64>().is_err();
                assert!(
                    negative_zero || beyond_64_bits || below_i64,
                    "{token}: {want:?} left to serde_json"
                );
            }
            (ours, theirs) => panic!("{token}: ours {ours:?} at {i}, serde_json {theirs:?}"),
        }
        // Without the byte after it, the number may go on.
        if i == token.len() {
            let mut i = 0;
            assert_eq!(
                json_number(token.as_bytes(), &mut i).err(),
                Some(Stop::More),
                "{token}"
            );
        }
    }

    #[test]
    fn numbers_read_as_serde_json_reads_them() {
        for token in NUMBERS {
            same_number(token);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn random_numbers_read_as_serde_json_reads_them(
            token in "-?(0|[1-9][0-9]{0,21})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?"
        ) {
            same_number(&token);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn leading_digits_counts_the_digits_that_start_a_word(word in any::<[u8; 8]>(), digits in 0usize..=8) {
            // Bytes next to '0'..'9' ('/', ':') and bytes that carry when 6 is added.
            let mut word = word;
            for (k, b) in word.iter_mut().enumerate() {
                if k < digits {
                    *b = b'0' + *b % 10;
                } else if *b % 3 == 0 {
                    *b = [b'/', b':', 0xfa, 0xff, b'0' - 1, b'9' + 1][usize::from(*b) % 6];
                }
            }
            let want = word.iter().take_while(|b| b.is_ascii_digit()).count();
            prop_assert_eq!(leading_digits(u64::from_le_bytes(word)), want);
        }
    }

    /// The first stop byte, one at a time.
    fn naive_stop(s: &[u8], from: usize) -> Option<usize> {
        (from..s.len()).find(|&k| matches!(s[k], b'"' | b'\\' | 0..=0x1f))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn string_stop_finds_the_first_quote_backslash_or_control_and_says_if_ascii_before(
            body in proptest::collection::vec(
                prop_oneof![8 => 0x20u8..0x7f, 1 => 0x80u8..=0xff, 1 => Just(b'"'), 1 => Just(b'\\'), 1 => 0u8..0x20],
                0..160,
            ),
            from in 0usize..20,
        ) {
            let from = from.min(body.len());
            prop_assert_eq!(string_stop(&body, from), naive_stop(&body, from));
            // And whether the bytes before the stop are ASCII, told by the
            // same scan (high bytes before, at and after the stop).
            let want = naive_stop(&body, from).map(|at| (at, body[from..at].is_ascii()));
            prop_assert_eq!(string_stop_ascii(&body, from), want);
        }
    }

    #[test]
    fn whitespace_runs_of_every_shape_are_skipped() {
        for n in 0..40 {
            for pattern in [&b" "[..], b"\n ", b"\t", b"\r\n  ", b"  \n        "] {
                let run: Vec<u8> = pattern.iter().copied().cycle().take(n).collect();
                let mut text = run.clone();
                text.push(b'x');
                let mut i = 0;
                assert_eq!(ws(&text, &mut i), Ok(b'x'), "{run:?}");
                assert_eq!(i, n, "{run:?}");
                let mut i = 0;
                assert_eq!(ws(&run, &mut i), Err(Stop::More), "{run:?}");
            }
        }
        // Not JSON whitespace: returned, not skipped.
        for b in [0u8, 0x0b, 0x0c, 0x1f] {
            let mut i = 0;
            assert_eq!(ws(&[b' ', b, b' '], &mut i), Ok(b));
            assert_eq!(i, 1);
        }
    }

    #[test]
    fn keys_of_every_length_and_kind() {
        for n in 0..40 {
            let name: String = "abcdefghijklmnopqrstuvwxyz0123456789 ABC"
                .chars()
                .take(n)
                .collect();
            let text = format!("\"{name}\" :\n 1");
            let mut i = 0;
            assert_eq!(key(text.as_bytes(), &mut i), Ok(name.as_bytes()), "{name}");
            assert_eq!(&text[i..], "1");
            // Cut anywhere: more bytes wanted.
            for cut in 0..text.len() - 1 {
                let mut i = 0;
                assert_eq!(
                    key(&text.as_bytes()[..cut], &mut i),
                    Err(Stop::More),
                    "{name}, {cut}"
                );
            }
        }
        let ok = "\"Größe 名前\": 1";
        let mut i = 0;
        assert_eq!(key(ok.as_bytes(), &mut i), Ok("Größe 名前".as_bytes()));
        // Not UTF-8, escaped, a control character, no colon: serde_json decides.
        for bad in [
            &b"\"a\xff\": 1"[..],
            b"\"Device\\u0020Id\": 1",
            b"\"a\tb\": 1",
            b"\"a\" 1",
        ] {
            let mut i = 0;
            assert_eq!(key(bad, &mut i), Err(Stop::Unsure), "{bad:?}");
        }
    }

    #[test]
    fn texts_borrow_what_they_can_and_decode_the_rest() {
        let cases: [(&[u8], Option<&str>); 8] = [
            (b"\"X\",", Some("X")),
            (b"\"\",", Some("")),
            (b"\"aten::mm\",", Some("aten::mm")),
            ("\"é\",".as_bytes(), Some("é")),
            (
                "\"a long name with ünïcödé past sixteen bytes\",".as_bytes(),
                Some("a long name with ünïcödé past sixteen bytes"),
            ),
            (b"\"\\u00e9\\n\",", Some("é\n")),
            (b"\"\xc3\",", None),
            (
                b"\"a long name that is not UTF-8 \xff past sixteen bytes\",",
                None,
            ),
        ];
        for (text_bytes, want) in cases {
            let mut i = 0;
            let got = text(text_bytes, &mut i);
            match want {
                Some(want) => {
                    assert_eq!(got.as_deref(), Ok(want));
                    assert_eq!(text_bytes[i], b',');
                }
                None => assert_eq!(got, Err(Stop::Unsure)),
            }
        }
    }
}
