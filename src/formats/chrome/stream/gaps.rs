//! The bytes between an object's values, remembered (issue 35: a trace's
//! keys matched by position and bytes instead of token by token).
//!
//! A writer prints every event of a kind alike: the same keys in the same
//! order, the same indentation. So the bytes from the end of one value to
//! the start of the next (`,\n      "cat": `: a comma, whitespace, a key,
//! a colon, whitespace), or from an object's `{` to its first value, or
//! from its last value past its `}`, are mostly bytes already read at the
//! same place of an earlier object. [`Gaps`] keeps, for each place (the
//! object's kind and the value's position in it), the last two runs of
//! such bytes read there and what they said (which field the key names,
//! or the object's end); bytes equal to one of them say the same again,
//! without reading their tokens.
//!
//! Exact by construction: a run is kept only once the token reader has
//! read it whole and accepted it (`,` or `{`, a key checked as `serde_json`
//! checks it, `:`, whitespace; or whitespace and `}`), and the same bytes
//! read the same way wherever they are. The run ends where its last
//! whitespace ends, so the byte after a matched run is read by the value's
//! reader as it would be after the token reader: where more whitespace
//! follows, that reader meets a space and leaves the event to `serde_json`
//! (slower, never different).

use super::token::{key, ws};
use super::{separator, Parsed};

/// Places remembered per kind of object: its first values.
const PLACES: usize = 16;

/// Longest run remembered (a comma, a newline, 24 spaces, a key of 20
/// bytes with its quotes, `": "`).
const LONGEST: usize = 56;

/// What a run of bytes said: a field of the object ([`Field`] numbers
/// them per kind), or its end.
pub(super) type Field = u8;

/// The object ended (its `}` read).
pub(super) const END: Field = u8::MAX;

/// The kinds of object whose runs are kept apart.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    /// An element of `traceEvents`.
    Event = 0,
    /// An event's `args`, read for memory fields.
    Args = 1,
}

#[derive(Clone, Copy)]
struct Run {
    /// 0: nothing kept.
    len: u8,
    field: Field,
    bytes: [u8; LONGEST],
}

const EMPTY: Run = Run {
    len: 0,
    field: 0,
    bytes: [0; LONGEST],
};

/// The runs last read at each place of each kind of object.
pub(super) struct Gaps {
    /// Per kind and place, the last run read there first.
    runs: [[[Run; 2]; PLACES]; 2],
    /// Runs matched (tests).
    #[cfg(test)]
    hits: usize,
}

impl Default for Gaps {
    fn default() -> Gaps {
        Gaps {
            runs: [[[EMPTY; 2]; PLACES]; 2],
            #[cfg(test)]
            hits: 0,
        }
    }
}

impl Gaps {
    /// Reads from `*i` (an object's `{` when `place` is 0, else the end of
    /// its value number `place - 1`) to the start of its next value, or
    /// past its `}`: the field the key there names (`field` of the key's
    /// bytes), or [`END`]. `*i` is then at the value (whitespace skipped),
    /// or past the `}`.
    #[inline(always)]
    pub(super) fn next(
        &mut self,
        kind: Kind,
        place: usize,
        s: &[u8],
        i: &mut usize,
        field: impl FnOnce(&[u8]) -> Field,
    ) -> Parsed<Field> {
        let Some(runs) = self.runs[kind as usize].get_mut(place) else {
            return read(s, i, place == 0).map(|k| k.map_or(END, field));
        };
        let from = *i;
        for run in runs.iter() {
            let len = usize::from(run.len);
            if len != 0 && same(s, from, &run.bytes[..len]) {
                *i = from + len;
                #[cfg(test)]
                {
                    self.hits += 1;
                }
                return Ok(run.field);
            }
        }
        let f = read(s, i, place == 0)?.map_or(END, field);
        let read = &s[from..*i];
        if read.len() <= LONGEST {
            let mut run = Run {
                len: read.len() as u8,
                field: f,
                bytes: [0; LONGEST],
            };
            run.bytes[..read.len()].copy_from_slice(read);
            runs[1] = runs[0];
            runs[0] = run;
        }
        Ok(f)
    }
}

/// Whether `s` holds `run` at `at`, and a byte after it (the value's
/// readers index their first byte, which the token reader's last `ws`
/// found; a run cut by the end of `s`, or ending with it, is read token
/// by token, which says whether more bytes are needed).
#[inline(always)]
fn same(s: &[u8], at: usize, run: &[u8]) -> bool {
    let n = run.len();
    if at + n >= s.len() {
        return false;
    }
    let have = &s[at..at + n];
    if n < 8 {
        return have == run;
    }
    // A word at a time, the last one overlapping the one before: a run is
    // 10-40 bytes, a few compares inlined here (callgrind counts the same
    // instructions as a call to `memcmp`, without the call).
    let word = |b: &[u8], k: usize| u64::from_le_bytes(b[k..k + 8].try_into().unwrap_or_default());
    if n <= 16 {
        return word(have, 0) == word(run, 0) && word(have, n - 8) == word(run, n - 8);
    }
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8};
        // 16 bytes at a time (SSE2, in every x86-64 CPU), the last block
        // overlapping the one before.
        let block = |k: usize| {
            // SAFETY: SSE2 is in the x86-64 baseline; each load reads 16
            // bytes of `have` and `run` (`k + 16 <= n`, both `n` long).
            unsafe {
                let a = _mm_loadu_si128(have[k..k + 16].as_ptr().cast());
                let b = _mm_loadu_si128(run[k..k + 16].as_ptr().cast());
                _mm_movemask_epi8(_mm_cmpeq_epi8(a, b)) == 0xffff
            }
        };
        let mut k = 0;
        while k + 16 < n {
            if !block(k) {
                return false;
            }
            k += 16;
        }
        block(n - 16)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut k = 0;
        while k + 8 < n {
            if word(have, k) != word(run, k) {
                return false;
            }
            k += 8;
        }
        word(have, n - 8) == word(run, n - 8)
    }
}

/// The token reader's way over a run: from an object's `{` (`first`), or
/// from the end of a value, to the next value's start; the key there, or
/// `None` past the object's `}`.
#[inline]
fn read<'s>(s: &'s [u8], i: &mut usize, first: bool) -> Parsed<Option<&'s [u8]>> {
    if first {
        *i += 1;
        if ws(s, i)? == b'}' {
            *i += 1;
            return Ok(None);
        }
    } else if !separator(s, i, b'}')? {
        return Ok(None);
    }
    key(s, i).map(Some)
}

#[cfg(test)]
mod tests {
    use super::super::Stop;
    use super::*;

    fn field(k: &[u8]) -> Field {
        k.len() as Field
    }

    /// Reads an object's runs as `event` does (each value a number, read
    /// past by hand); the fields, and where the object ended.
    fn object(gaps: &mut Gaps, s: &[u8]) -> (Vec<Field>, Result<usize, Stop>) {
        let mut i = 0;
        let mut fields = Vec::new();
        for place in 0.. {
            match gaps.next(Kind::Event, place, s, &mut i, field) {
                Ok(END) => return (fields, Ok(i)),
                Ok(f) => fields.push(f),
                Err(stop) => return (fields, Err(stop)),
            }
            while s.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
        }
        unreachable!()
    }

    #[test]
    fn runs_read_once_are_matched_at_their_place_after() {
        let mut gaps = Gaps::default();
        let a = b"{\n  \"ph\": 1,\n  \"name\": 22\n}, ";
        assert_eq!(object(&mut gaps, a), (vec![2, 4], Ok(a.len() - 2)));
        assert_eq!(gaps.hits, 0);
        assert_eq!(object(&mut gaps, a), (vec![2, 4], Ok(a.len() - 2)));
        assert_eq!(gaps.hits, 3, "the two keys' runs and the end's");
        // Another key at the second place, a longer indent at the end:
        // read token by token, and remembered beside the first.
        let b = b"{\n  \"ph\": 1,\n  \"cat\": 3\n    }, ";
        assert_eq!(object(&mut gaps, b), (vec![2, 3], Ok(b.len() - 2)));
        assert_eq!(gaps.hits, 4);
        for _ in 0..3 {
            assert_eq!(object(&mut gaps, a), (vec![2, 4], Ok(a.len() - 2)));
            assert_eq!(object(&mut gaps, b), (vec![2, 3], Ok(b.len() - 2)));
        }
        assert_eq!(gaps.hits, 4 + 3 * 6, "two runs kept at each place");
    }

    #[test]
    fn a_run_cut_by_the_end_of_the_bytes_is_read_token_by_token() {
        let mut gaps = Gaps::default();
        let a = b"{\"ph\": 1, \"name\": 2}, ";
        assert_eq!(object(&mut gaps, a), (vec![2, 4], Ok(a.len() - 2)));
        // Cut inside the second run, and right after it (no byte of the
        // value): both need more bytes.
        for cut in [12, 18] {
            let (fields, end) = object(&mut gaps, &a[..cut]);
            assert_eq!((fields, end), (vec![2], Err(Stop::More)), "cut at {cut}");
        }
        assert_eq!(object(&mut gaps, a), (vec![2, 4], Ok(a.len() - 2)));
    }

    #[test]
    fn places_past_the_last_remembered_are_read_token_by_token() {
        let mut gaps = Gaps::default();
        let keys: Vec<String> = (0..PLACES + 4).map(|n| format!("\"k{n:02}\": 1")).collect();
        let text = format!("{{{}}}", keys.join(", "));
        let want = vec![3; PLACES + 4];
        assert_eq!(
            object(&mut gaps, text.as_bytes()),
            (want.clone(), Ok(text.len()))
        );
        assert_eq!(object(&mut gaps, text.as_bytes()), (want, Ok(text.len())));
        assert_eq!(gaps.hits, PLACES, "only the places remembered");
    }

    #[test]
    fn runs_longer_than_kept_are_read_every_time() {
        let mut gaps = Gaps::default();
        let key = "k".repeat(LONGEST);
        let text = format!("{{\"{key}\": 1}},");
        for _ in 0..2 {
            let read = object(&mut gaps, text.as_bytes());
            assert_eq!(read, (vec![LONGEST as Field], Ok(text.len() - 1)));
        }
        assert_eq!(gaps.hits, 1, "only the end's run");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        /// `same` says what a byte-by-byte comparison says, at every run
        /// length the runs may have (the word and 16-byte steps, and the
        /// last step overlapping the one before), for runs that differ in
        /// one byte anywhere or not at all.
        #[test]
        fn same_is_a_bytewise_comparison_with_a_byte_after(
            run in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..=LONGEST),
            at in 0usize..8,
            flip in proptest::option::of(0usize..LONGEST),
            after in 0usize..3,
        ) {
            let mut s = vec![b' '; at];
            s.extend_from_slice(&run);
            if let Some(k) = flip.filter(|&k| k < run.len()) {
                s[at + k] ^= 1;
            }
            s.extend(std::iter::repeat_n(b'x', after));
            let want = at + run.len() < s.len() && s[at..at + run.len()] == run[..];
            proptest::prop_assert_eq!(same(&s, at, &run), want);
        }
    }
}
