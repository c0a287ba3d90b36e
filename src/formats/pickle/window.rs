//! The buffered window over the input that the interpreter reads opcodes
//! from: 64 KiB at first, 1 MiB once the input proves large, and more only
//! when a single item (a long string) needs it and only as its bytes
//! actually arrive, so a hostile declared length never allocates up front.
//! Declared lengths are checked against [`Limits`] before anything is read.

use std::io::BufRead;
use std::rc::Rc;

use super::opcodes::{self, Scalar};
use super::{Limits, PickleError, Value};

const INITIAL_BUF: usize = 64 << 10;
const TARGET_BUF: usize = 1 << 20;

pub(super) type PResult<T> = Result<T, PickleError>;

pub(super) struct Window<R> {
    rd: R,
    pub(super) buf: Vec<u8>,
    /// The next byte to read is `buf[pos]`; `buf[end..]` holds nothing yet.
    pub(super) pos: usize,
    pub(super) end: usize,
    /// Absolute offset of `buf[0]`.
    base: u64,
    /// Absolute offset of the opcode being executed (errors name it).
    pub(super) op_off: u64,
    max_string_bytes: u64,
    max_total_bytes: u64,
}

impl<R: BufRead> Window<R> {
    pub(super) fn new(rd: R, limits: &Limits) -> Self {
        Window {
            rd,
            buf: vec![0; INITIAL_BUF],
            pos: 0,
            end: 0,
            base: 0,
            op_off: 0,
            max_string_bytes: limits.max_string_bytes,
            max_total_bytes: limits.max_total_bytes,
        }
    }

    /// An error at the opcode being executed.
    pub(super) fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        Err(PickleError {
            offset: self.op_off,
            message: message.into(),
        })
    }

    /// The bytes buffered after the read position.
    #[inline(always)]
    pub(super) fn rest(&self) -> &[u8] {
        &self.buf[self.pos..self.end]
    }

    /// Absolute offset of the read position.
    #[inline(always)]
    pub(super) fn at(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Reads the next opcode and notes its offset for errors.
    #[inline(always)]
    pub(super) fn next_op(&mut self) -> PResult<u8> {
        self.ensure(1)?;
        self.op_off = self.at();
        let code = self.buf[self.pos];
        self.pos += 1;
        Ok(code)
    }

    /// Makes at least `n` bytes available at `buf[pos..]`.
    #[inline(always)]
    pub(super) fn ensure(&mut self, n: usize) -> PResult<()> {
        if self.end - self.pos >= n {
            Ok(())
        } else {
            self.fill(n)
        }
    }

    #[cold]
    #[inline(never)]
    fn fill(&mut self, n: usize) -> PResult<()> {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.base += self.pos as u64;
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.base > 0 && self.buf.len() < TARGET_BUF {
            // The input is larger than the first window: read bigger chunks.
            self.buf.resize(TARGET_BUF, 0);
        }
        while self.end < n {
            if self.end == self.buf.len() {
                // Grow only when the buffer is full of real data: by doubling,
                // up to what this item needs (or the streaming target size).
                let want = n.max(TARGET_BUF);
                let new_len = (self.buf.len() * 2).min(want).max(self.end + 1);
                self.buf.resize(new_len, 0);
            }
            let consumed = self.base + self.end as u64;
            let allowed = self.max_total_bytes.saturating_sub(consumed);
            if allowed == 0 {
                return self.err(format!(
                    "input exceeds the limit of {} bytes",
                    self.max_total_bytes
                ));
            }
            let room =
                (self.buf.len() - self.end).min(usize::try_from(allowed).unwrap_or(usize::MAX));
            match self.rd.read(&mut self.buf[self.end..self.end + room]) {
                Ok(0) => {
                    return self.err(format!(
                        "truncated pickle: unexpected end of input at byte {}",
                        self.base + self.end as u64
                    ))
                }
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return self.err(format!("read error: {e}")),
            }
        }
        Ok(())
    }

    #[inline(always)]
    pub(super) fn take<const N: usize>(&mut self) -> PResult<[u8; N]> {
        self.ensure(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(a)
    }

    #[inline(always)]
    pub(super) fn take_u8(&mut self) -> PResult<u8> {
        self.ensure(1)?;
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(b)
    }

    /// The scalar that `code` pushes, its argument `width` bytes long
    /// (`LONG1`: after its length byte), decoded by [`opcodes::scalar`].
    #[inline(always)]
    pub(super) fn scalar(&mut self, code: u8, width: usize) -> PResult<Scalar> {
        self.ensure(width)?;
        let mut i = self.pos;
        match opcodes::scalar(code, &self.buf[..self.end], &mut i) {
            Some(v) => {
                self.pos = i;
                Ok(v)
            }
            None => self.err("internal: a scalar opcode's argument was not in the window"),
        }
    }

    /// The memo index of the `BINGET` or `LONG_BINGET` `code`.
    #[inline(always)]
    pub(super) fn memo_index(&mut self, code: u8) -> PResult<u32> {
        self.ensure(opcodes::memo_get_len(code).unwrap_or(1) - 1)?;
        let mut i = self.pos;
        match opcodes::memo_index(code, &self.buf[..self.end], &mut i) {
            Some(idx) => {
                self.pos = i;
                Ok(idx)
            }
            None => self.err("internal: a memo get's argument was not in the window"),
        }
    }

    /// Checks a declared payload length against the limits (before any allocation).
    pub(super) fn check_len(&self, n: u64, what: &str) -> PResult<usize> {
        if n > self.max_string_bytes {
            return self.err(format!(
                "{what} of {n} bytes exceeds the limit of {} bytes",
                self.max_string_bytes
            ));
        }
        if n > self.max_total_bytes {
            return self.err(format!(
                "{what} of {n} bytes exceeds the input limit of {} bytes",
                self.max_total_bytes
            ));
        }
        match usize::try_from(n) {
            Ok(n) if n < usize::MAX / 2 => Ok(n),
            _ => self.err(format!("{what} of {n} bytes is too long")),
        }
    }

    /// A string of `n` bytes.
    #[inline(always)]
    pub(super) fn string(&mut self, n: usize) -> PResult<Value> {
        self.ensure(n)?;
        let s = str_value(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(s)
    }

    /// The string of a `SHORT_BINUNICODE`, decoded by [`opcodes::short_str`].
    #[inline(always)]
    pub(super) fn short_string(&mut self) -> PResult<Value> {
        self.ensure(1)?;
        self.ensure(1 + self.buf[self.pos] as usize)?;
        let mut i = self.pos;
        match opcodes::short_str(&self.buf[..self.end], &mut i) {
            Some(bytes) => {
                let s = str_value(bytes);
                self.pos = i;
                Ok(s)
            }
            None => self.err("internal: a string's bytes were not in the window"),
        }
    }

    /// A `LONG1`/`LONG4` payload of `n` bytes: an `Int`, or a `BigInt`
    /// past i64 (up to 16 bytes).
    pub(super) fn long(&mut self, n: usize) -> PResult<Value> {
        if n > 16 {
            return self.err(format!("integer wider than 128 bits ({n} bytes)"));
        }
        self.ensure(n)?;
        let small = match n {
            0..=8 => opcodes::small_long(&self.buf[..self.end], self.pos, n),
            _ => None,
        };
        let v = match small {
            Some(i) => Value::Int(i),
            None => {
                let mut a = [0u8; 16];
                a[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
                let sh = 128 - 8 * n as u32;
                let v = (i128::from_le_bytes(a) << sh) >> sh;
                match i64::try_from(v) {
                    Ok(i) => Value::Int(i),
                    Err(_) => Value::BigInt(Box::new(v)),
                }
            }
        };
        self.pos += n;
        Ok(v)
    }
}

/// A string value of `bytes` (invalid UTF-8, e.g. a lone surrogate written
/// with CPython's `surrogatepass`, is decoded lossily with U+FFFD).
#[inline(always)]
fn str_value(bytes: &[u8]) -> Value {
    let s: Rc<Box<str>> = match std::str::from_utf8(bytes) {
        Ok(s) => Rc::new(Box::from(s)),
        Err(_) => Rc::new(Box::from(&*String::from_utf8_lossy(bytes))),
    };
    Value::Str(s)
}
