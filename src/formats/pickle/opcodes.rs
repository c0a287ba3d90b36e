//! Opcodes: their bytes and names, and the one decoder of each argument
//! that both the plain interpreter (`machine`, which first makes sure the
//! argument is in its window) and the fast paths (`fast`, which give up
//! where the window ends) read opcodes with.

use super::Value;

pub(super) mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
}

/// Name of an implemented opcode (for messages).
pub(super) fn op_name(code: u8) -> &'static str {
    match code {
        op::MARK => "MARK",
        op::STOP => "STOP",
        op::POP => "POP",
        op::POP_MARK => "POP_MARK",
        op::DUP => "DUP",
        op::APPEND => "APPEND",
        op::APPENDS => "APPENDS",
        op::DICT => "DICT",
        op::LIST => "LIST",
        op::TUPLE => "TUPLE",
        op::TUPLE1 => "TUPLE1",
        op::TUPLE2 => "TUPLE2",
        op::TUPLE3 => "TUPLE3",
        op::SETITEM => "SETITEM",
        op::SETITEMS => "SETITEMS",
        op::MEMOIZE => "MEMOIZE",
        op::BINPUT => "BINPUT",
        op::LONG_BINPUT => "LONG_BINPUT",
        _ => "this opcode",
    }
}

/// Opcodes that import or call code: always refused.
pub(super) fn refused_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'i' => "INST",
        b'o' => "OBJ",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        _ => return None,
    })
}

/// Harmless opcodes that PyTorch snapshots never contain.
pub(super) fn unsupported_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'I' => "INT",
        b'L' => "LONG",
        b'F' => "FLOAT",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'p' => "PUT",
        b'g' => "GET",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x8e => "BINBYTES8",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

/// A scalar a data opcode pushes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Scalar {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl From<Scalar> for Value {
    #[inline(always)]
    fn from(s: Scalar) -> Self {
        match s {
            Scalar::None => Value::None,
            Scalar::Bool(b) => Value::Bool(b),
            Scalar::Int(i) => Value::Int(i),
            Scalar::Float(f) => Value::Float(f),
        }
    }
}

/// Bytes of the argument of the scalar opcode `code` when it has a fixed
/// width (`LONG1`'s is its length byte plus the length it gives).
pub(super) const fn scalar_width(code: u8) -> usize {
    match code {
        op::BININT1 => 1,
        op::BININT2 => 2,
        op::BININT => 4,
        op::BINFLOAT => 8,
        _ => 0,
    }
}

/// Decodes the scalar that `code` pushes, from its argument at `buf[*i..]`,
/// and moves `*i` past the argument. `None` if `code` is no scalar opcode
/// (or a `LONG1` wider than 8 bytes, a `BigInt` that only the interpreter
/// builds), or its argument is not all in `buf`.
#[inline(always)]
pub(super) fn scalar(code: u8, buf: &[u8], i: &mut usize) -> Option<Scalar> {
    Some(match code {
        op::BININT1 => Scalar::Int(arg::<1>(buf, i)?[0] as i64),
        op::BININT2 => Scalar::Int(u16::from_le_bytes(arg(buf, i)?) as i64),
        op::BININT => Scalar::Int(i32::from_le_bytes(arg(buf, i)?) as i64),
        op::LONG1 => {
            let len = *buf.get(*i)? as usize;
            if len > 8 {
                return None;
            }
            let v = small_long(buf, *i + 1, len)?;
            *i += 1 + len;
            Scalar::Int(v)
        }
        op::BINFLOAT => Scalar::Float(f64::from_be_bytes(arg(buf, i)?)),
        op::NONE => Scalar::None,
        op::NEWTRUE => Scalar::Bool(true),
        op::NEWFALSE => Scalar::Bool(false),
        _ => return None,
    })
}

/// The `N` argument bytes at `buf[*i..]`; moves `*i` past them.
#[inline(always)]
fn arg<const N: usize>(buf: &[u8], i: &mut usize) -> Option<[u8; N]> {
    let b = buf.get(*i..*i + N)?;
    *i += N;
    b.try_into().ok()
}

/// The `LONG1` payload `buf[at..at + len]` (`len` ≤ 8) as a two's-complement
/// little-endian integer. Reads 8 bytes at once where the buffer has them
/// (the extra bytes are shifted out): copying `len` bytes is a call to
/// `memcpy` and a store-forwarding stall, on every address and timestamp.
#[inline(always)]
pub(super) fn small_long(buf: &[u8], at: usize, len: usize) -> Option<i64> {
    if len == 0 {
        return Some(0);
    }
    let sh = 64 - 8 * len as u32;
    let raw = match buf.get(at..at + 8) {
        Some(b) => i64::from_le_bytes(b.try_into().ok()?),
        None => {
            let mut a = [0u8; 8];
            a[..len].copy_from_slice(buf.get(at..at + len)?);
            i64::from_le_bytes(a)
        }
    };
    Some((raw << sh) >> sh)
}

/// Bytes of a `BINGET` (else `LONG_BINGET`) with its argument.
#[inline(always)]
pub(super) fn memo_get_len(code: u8) -> Option<usize> {
    match code {
        op::BINGET => Some(2),
        op::LONG_BINGET => Some(5),
        _ => None,
    }
}

/// The memo index of the `BINGET` (else `LONG_BINGET`) whose argument
/// starts at `buf[*i]`; moves `*i` past it.
#[inline(always)]
pub(super) fn memo_index(code: u8, buf: &[u8], i: &mut usize) -> Option<u32> {
    if code == op::BINGET {
        Some(arg::<1>(buf, i)?[0] as u32)
    } else {
        Some(u32::from_le_bytes(arg(buf, i)?))
    }
}

/// The payload of the `SHORT_BINUNICODE` whose argument (a length byte,
/// then that many bytes) starts at `buf[*i]`; moves `*i` past it.
#[inline(always)]
pub(super) fn short_str<'a>(buf: &'a [u8], i: &mut usize) -> Option<&'a [u8]> {
    let len = *buf.get(*i)? as usize;
    let s = buf.get(*i + 1..*i + 1 + len)?;
    *i += 1 + len;
    Some(s)
}
