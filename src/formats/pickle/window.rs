//! The window over the input that the interpreter reads opcodes from: the
//! reader's own buffer, read in place (the read-ahead thread's 1 MiB
//! chunks, `input.rs`), and where an item runs across a buffer's end a
//! stitch of the two, which grows only as the item's bytes actually arrive
//! (a long string), so a hostile declared length never allocates up front.
//! Declared lengths are checked against [`Limits`] before anything is read.

use std::io::BufRead;
use std::rc::Rc;

use super::opcodes::{self, Scalar};
use super::{Limits, PickleError, Value};

/// Bytes of the next buffer copied after a stitch's leftover at a time (at
/// least; more when one item needs more).
const STITCH: usize = 4 << 10;

pub(super) type PResult<T> = Result<T, PickleError>;

/// The interpreter's view of the input: the reader's own buffer, read in
/// place (nothing is copied out of a 1 MiB read-ahead chunk), or, where an
/// item runs across the end of one buffer, a *stitch*: the first buffer's
/// last bytes copied in front of the next buffer's first bytes, left as soon
/// as the read position is back inside the next buffer.
pub(super) struct Window<'r, R: ?Sized> {
    rd: &'r mut R,
    /// The window's bytes are `ptr[..end]`: the start of `rd`'s buffer as
    /// its `fill_buf` last gave it (none of which is consumed yet), or
    /// `stitch`'s. `rd` is borrowed for the window's life and only the
    /// window calls it, so the buffer stays where it is (and as it is) until
    /// the window's next call on it.
    ptr: *const u8,
    /// The next byte to read is at `pos`; `end` bytes are in the window.
    pub(super) pos: usize,
    pub(super) end: usize,
    /// `None`: the window is `rd`'s buffer. `Some(t)`: it is `stitch`, whose
    /// last `t` bytes are the first `t` of `rd`'s buffer (not consumed yet).
    tail: Option<usize>,
    stitch: Vec<u8>,
    /// Absolute offset of the window's first byte.
    base: u64,
    /// Absolute offset of the opcode being executed (errors name it).
    pub(super) op_off: u64,
    max_string_bytes: u64,
    max_total_bytes: u64,
}

impl<'r, R: BufRead + ?Sized> Window<'r, R> {
    pub(super) fn new(rd: &'r mut R, limits: &Limits) -> Self {
        Window {
            rd,
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            pos: 0,
            end: 0,
            tail: None,
            stitch: Vec::new(),
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

    /// The window's bytes.
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr[..end]` is `stitch`'s bytes (not changed since `ptr`
        // was taken) or the start of the slice `rd.fill_buf()` returned,
        // which stays valid: `rd` is exclusively borrowed by the window, and
        // the window has not called it since.
        unsafe { std::slice::from_raw_parts(self.ptr, self.end) }
    }

    /// The bytes buffered after the read position.
    #[inline(always)]
    pub(super) fn rest(&self) -> &[u8] {
        &self.bytes()[self.pos..]
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
        let code = self.bytes()[self.pos];
        self.pos += 1;
        Ok(code)
    }

    /// Makes at least `n` bytes available at the read position.
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
        while self.end - self.pos < n {
            let left = self.end - self.pos;
            match self.tail {
                // The reader's buffer is read: on to its next one.
                None if left == 0 => self.in_place(self.pos)?,
                None => {
                    // An item runs past the buffer's end: its start is copied.
                    // SAFETY: the window is `rd`'s buffer here, not `stitch`.
                    let rest = unsafe { std::slice::from_raw_parts(self.ptr.add(self.pos), left) };
                    self.stitch.clear();
                    self.stitch.extend_from_slice(rest);
                    self.rd.consume(self.end);
                    self.base += self.pos as u64;
                    self.pos = 0;
                    self.tail = Some(0);
                    self.stitched();
                }
                // Back inside the reader's buffer: read it in place.
                Some(t) if left <= t => self.in_place(t - left)?,
                Some(t) => {
                    // The stitch needs more of the reader's bytes.
                    if self.pos > 0 {
                        self.stitch.drain(..self.pos);
                        self.base += self.pos as u64;
                        self.pos = 0;
                        self.stitched();
                    }
                    let (ptr, len) = self.buffer()?;
                    if len > t {
                        let want = (n - left).max(STITCH).min(len - t);
                        // SAFETY: `buffer`'s slice, used before `rd` is called again.
                        let more = unsafe { std::slice::from_raw_parts(ptr.add(t), want) };
                        self.stitch.extend_from_slice(more);
                        self.tail = Some(t + want);
                    } else {
                        // This buffer is all in the stitch: the next one.
                        self.rd.consume(t);
                        self.tail = Some(0);
                        if self.buffer()?.1 == 0 {
                            return self.truncated();
                        }
                    }
                    self.stitched();
                }
            }
        }
        Ok(())
    }

    /// The window becomes the reader's buffer from the read position on,
    /// once `consumed` more of its bytes (those before that position, not
    /// yet consumed) are.
    fn in_place(&mut self, consumed: usize) -> PResult<()> {
        self.rd.consume(consumed);
        self.base += self.pos as u64;
        self.pos = 0;
        self.end = 0;
        self.tail = None;
        (self.ptr, self.end) = self.buffer()?;
        if self.end == 0 {
            return self.truncated();
        }
        Ok(())
    }

    /// The window is `stitch`, all of it.
    fn stitched(&mut self) {
        (self.ptr, self.end) = (self.stitch.as_ptr(), self.stitch.len());
    }

    /// The reader's buffer (its start and length), cut where the input
    /// reaches its size limit (the bytes past it are never looked at). Of
    /// length 0 at the end of the input. Valid until `rd` is called again.
    fn buffer(&mut self) -> PResult<(*const u8, usize)> {
        // Where the reader's buffer starts in the input.
        let start = self.base + (self.end - self.tail.unwrap_or(self.end)) as u64;
        let allowed = self.max_total_bytes.saturating_sub(start);
        if allowed == 0 {
            return self.err(format!(
                "input exceeds the limit of {} bytes",
                self.max_total_bytes
            ));
        }
        loop {
            match self.rd.fill_buf() {
                Ok(buf) => {
                    let len = buf
                        .len()
                        .min(usize::try_from(allowed).unwrap_or(usize::MAX));
                    return Ok((buf.as_ptr(), len));
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return self.err(format!("read error: {e}")),
            }
        }
    }

    /// The error at the end of the input.
    fn truncated<T>(&self) -> PResult<T> {
        self.err(format!(
            "truncated pickle: unexpected end of input at byte {}",
            self.base + self.end as u64
        ))
    }

    #[inline(always)]
    pub(super) fn take<const N: usize>(&mut self) -> PResult<[u8; N]> {
        self.ensure(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(&self.bytes()[self.pos..self.pos + N]);
        self.pos += N;
        Ok(a)
    }

    #[inline(always)]
    pub(super) fn take_u8(&mut self) -> PResult<u8> {
        self.ensure(1)?;
        let b = self.bytes()[self.pos];
        self.pos += 1;
        Ok(b)
    }

    /// The scalar that `code` pushes, its argument `width` bytes long
    /// (`LONG1`: after its length byte), decoded by [`opcodes::scalar`].
    #[inline(always)]
    pub(super) fn scalar(&mut self, code: u8, width: usize) -> PResult<Scalar> {
        self.ensure(width)?;
        let mut i = self.pos;
        match opcodes::scalar(code, self.bytes(), &mut i) {
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
        match opcodes::memo_index(code, self.bytes(), &mut i) {
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
        let s = str_value(&self.bytes()[self.pos..self.pos + n]);
        self.pos += n;
        Ok(s)
    }

    /// The string of a `SHORT_BINUNICODE`, decoded by [`opcodes::short_str`].
    #[inline(always)]
    pub(super) fn short_string(&mut self) -> PResult<Value> {
        self.ensure(1)?;
        self.ensure(1 + self.bytes()[self.pos] as usize)?;
        let mut i = self.pos;
        match opcodes::short_str(self.bytes(), &mut i) {
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
            0..=8 => opcodes::small_long(self.bytes(), self.pos, n),
            _ => None,
        };
        let v = match small {
            Some(i) => Value::Int(i),
            None => {
                let mut a = [0u8; 16];
                a[..n].copy_from_slice(&self.bytes()[self.pos..self.pos + n]);
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
