//! The unpickler's own tests: CPython's output for every protocol, every
//! opcode and error, limits, the memo, teardown, and the hooks (with the
//! fast paths' door open and closed). The snapshot-level differential tests
//! of the fast paths against the plain path are in `formats::snapshot`.

use super::machine::MAX_STACK;
use super::memo::Memo;
use super::opcodes::op;
use super::*;
use std::cell::RefCell;
use std::io::{BufReader, Read};
use std::rc::{Rc, Weak};

// `pickle.dumps(OBJ, protocol=N)` from CPython 3.11 (`testdata/make_fixtures.py`).
const CPY_P2: &[u8] = include_bytes!("testdata/cpython_p2.pickle");
const CPY_P3: &[u8] = include_bytes!("testdata/cpython_p3.pickle");
const CPY_P4: &[u8] = include_bytes!("testdata/cpython_p4.pickle");
const CPY_P5: &[u8] = include_bytes!("testdata/cpython_p5.pickle");

const ALL_CPY: [(&str, &[u8]); 4] = [
    ("p2", CPY_P2),
    ("p3", CPY_P3),
    ("p4", CPY_P4),
    ("p5", CPY_P5),
];

/// Emits pickle opcodes byte by byte.
struct P(Vec<u8>);

impl P {
    /// `PROTO 2`.
    fn new() -> P {
        P(vec![op::PROTO, 2])
    }
    fn bare() -> P {
        P(Vec::new())
    }
    fn op(mut self, c: u8) -> P {
        self.0.push(c);
        self
    }
    fn raw(mut self, b: &[u8]) -> P {
        self.0.extend_from_slice(b);
        self
    }
    fn binint(self, i: i32) -> P {
        self.op(op::BININT).raw(&i.to_le_bytes())
    }
    fn k(self, i: u8) -> P {
        self.op(op::BININT1).raw(&[i])
    }
    fn s(self, x: &str) -> P {
        assert!(x.len() < 256);
        self.op(op::SHORT_BINUNICODE)
            .raw(&[x.len() as u8])
            .raw(x.as_bytes())
    }
    fn long1(self, b: &[u8]) -> P {
        self.op(op::LONG1).raw(&[b.len() as u8]).raw(b)
    }
    fn put(self, i: u8) -> P {
        self.op(op::BINPUT).raw(&[i])
    }
    fn get(self, i: u8) -> P {
        self.op(op::BINGET).raw(&[i])
    }
    fn long_put(self, i: u32) -> P {
        self.op(op::LONG_BINPUT).raw(&i.to_le_bytes())
    }
    fn long_get(self, i: u32) -> P {
        self.op(op::LONG_BINGET).raw(&i.to_le_bytes())
    }
    fn stop(self) -> Vec<u8> {
        self.op(op::STOP).0
    }
}

fn ok(b: &[u8]) -> Value {
    unpickle_slice(b).unwrap_or_else(|e| panic!("unexpected error: {e}"))
}

fn fail(b: &[u8]) -> PickleError {
    match unpickle_slice(b) {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e,
    }
}

fn with_limits(b: &[u8], limits: &Limits) -> Result<Value, PickleError> {
    unpickle(b, limits, &mut NoHook)
}

fn s(x: &str) -> Value {
    Value::Str(Rc::new(Box::from(x)))
}

/// A handle numbered `i` (the tests' hooks number what they lower).
fn hv(i: u32) -> Value {
    Value::Handle(Handle::event(i as usize).unwrap())
}

/// The number of a handle made by [`hv`].
fn num(h: Handle) -> u32 {
    match h.lowered() {
        Lowered::Event(i) => i,
        other => panic!("not a numbered handle: {other:?}"),
    }
}

/// A reader that hands out at most `n` bytes per `read`, to exercise
/// opcodes straddling buffer refills.
struct Trickle<'a> {
    data: &'a [u8],
    n: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let k = self.n.min(buf.len()).min(self.data.len());
        buf[..k].copy_from_slice(&self.data[..k]);
        self.data = &self.data[k..];
        Ok(k)
    }
}

fn trickle(data: &[u8], n: usize) -> Result<Value, PickleError> {
    let r = BufReader::with_capacity(1, Trickle { data, n });
    unpickle(r, &Limits::default(), &mut NoHook)
}

#[test]
fn value_is_16_bytes() {
    assert!(std::mem::size_of::<Value>() <= 16);
    assert!(std::mem::size_of::<Option<Value>>() <= 16);
}

fn check_cpython_obj(v: &Value) {
    assert_eq!(v.type_name(), "dict");
    let a = v.get("a").expect("a");
    let a = a.list_items().expect("list");
    assert_eq!(a.len(), 20);
    assert_eq!(a[0], Value::Int(1));
    assert_eq!(a[1].as_f64(), Some(2.5));
    assert_eq!(a[2], Value::None);
    assert_eq!(a[3].as_bool(), Some(true));
    assert_eq!(a[4].as_bool(), Some(false));
    assert_eq!(a[5].as_str(), Some("héllo ☃"));
    assert_eq!(
        a[6].tuple_items(),
        Some(&[Value::Int(1), Value::Int(2)][..])
    );
    assert_eq!(a[7].tuple_items().map(<[Value]>::len), Some(0));
    assert_eq!(a[8].tuple_items(), Some(&[Value::Int(7)][..]));
    assert_eq!(a[9].tuple_items().map(<[Value]>::len), Some(3));
    assert_eq!(a[10].tuple_items().map(<[Value]>::len), Some(4));
    assert!(matches!(a[11], Value::BigInt(_)));
    assert_eq!(a[11].as_u64(), Some(u64::MAX));
    assert_eq!(a[11].as_i64(), None);
    assert_eq!(a[12], Value::BigInt(Box::new(-(1i128 << 70))));
    assert_eq!(a[12].as_u64(), None);
    assert_eq!(a[13], Value::Int(300));
    assert_eq!(a[14], Value::Int(70000));
    assert_eq!(a[15], Value::Int(-5));
    assert_eq!(a[16], Value::Int(-(1 << 31)));
    assert_eq!(a[17], Value::Int(1 << 31));
    assert_eq!(a[18], Value::Int(i64::MAX));
    assert_eq!(a[19], Value::Int(i64::MIN));
    let b = v.get("b").expect("b");
    assert_eq!(
        b.get("x").as_ref().and_then(Value::as_str),
        Some(&*"y".repeat(256))
    );
    let s1 = v.get("s1").expect("s1");
    let s2 = v.get("s2").expect("s2");
    assert_eq!(s1.identity(), s2.identity());
    assert!(s1.identity().is_some());
    match (&s1, &s2) {
        (Value::List(x), Value::List(y)) => assert!(Rc::ptr_eq(x, y)),
        _ => panic!("s1/s2 not lists"),
    }
    assert_eq!(*s1.list_items().unwrap(), vec![Value::Int(1), s("x")]);
    assert_eq!(v.get("e").unwrap().dict_items().unwrap().len(), 0);
    let one = v.get("one").unwrap();
    let one = one.list_items().unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].get("action").unwrap().as_str(), Some("alloc"));
    assert!(v.get("missing").is_none());
}

#[test]
fn cpython_protocols_2_to_5() {
    for (name, bytes) in ALL_CPY {
        let v = ok(bytes);
        check_cpython_obj(&v);
        // Same result when the input arrives in small pieces.
        for n in [1, 2, 3, 7, 64] {
            let w = trickle(bytes, n).unwrap_or_else(|e| panic!("{name} n={n}: {e}"));
            assert_eq!(v, w, "{name} n={n}");
        }
    }
}

#[test]
fn every_prefix_is_truncated() {
    let hand = P::new()
        .op(op::EMPTY_DICT)
        .put(0)
        .s("k")
        .op(op::MARK)
        .binint(-7)
        .long1(&[0xff; 9])
        .op(op::BINFLOAT)
        .raw(&1.5f64.to_be_bytes())
        .op(op::BINUNICODE)
        .raw(&3u32.to_le_bytes())
        .raw(b"abc")
        .op(op::BINUNICODE8)
        .raw(&2u64.to_le_bytes())
        .raw(b"de")
        .op(op::LONG4)
        .raw(&2i32.to_le_bytes())
        .raw(&[1, 2])
        .op(op::TUPLE)
        .op(op::SETITEM)
        .stop();
    ok(&hand);
    let mut cases: Vec<&[u8]> = ALL_CPY.iter().map(|(_, b)| *b).collect();
    cases.push(&hand);
    for bytes in cases {
        for len in 0..bytes.len() {
            let e = fail(&bytes[..len]);
            assert_eq!(
                e.message,
                format!("truncated pickle: unexpected end of input at byte {len}"),
                "prefix {len}"
            );
            assert!(
                e.offset < len.max(1) as u64,
                "prefix {len}: offset {}",
                e.offset
            );
            let e2 = trickle(&bytes[..len], 3).unwrap_err();
            assert_eq!(e, e2);
        }
    }
}

#[test]
fn scalars() {
    assert_eq!(ok(&P::new().k(200).stop()), Value::Int(200));
    assert_eq!(
        ok(&P::new().op(op::BININT2).raw(&[0xff, 0xff]).stop()),
        Value::Int(65535)
    );
    assert_eq!(ok(&P::new().binint(-123456).stop()), Value::Int(-123456));
    assert_eq!(ok(&P::new().op(op::NONE).stop()), Value::None);
    assert_eq!(ok(&P::new().op(op::NEWTRUE).stop()), Value::Bool(true));
    assert_eq!(ok(&P::new().op(op::NEWFALSE).stop()), Value::Bool(false));
    let f = ok(&P::new()
        .op(op::BINFLOAT)
        .raw(&(-0.1f64).to_be_bytes())
        .stop());
    assert_eq!(f, Value::Float(-0.1));
    assert_eq!(f.type_name(), "float");
    let nan = ok(&P::new()
        .op(op::BINFLOAT)
        .raw(&f64::NAN.to_be_bytes())
        .stop());
    assert!(nan.as_f64().unwrap().is_nan());
    assert_eq!(Value::Bool(true).as_i64(), Some(1));
    assert_eq!(Value::Int(-1).as_u64(), None);
    assert_eq!(Value::Int(5).as_f64(), Some(5.0));
    assert_eq!(Value::Int(5).as_str(), None);
    assert_eq!(Value::Int(5).identity(), None);
    assert_eq!(s("x").identity(), None);
    assert_eq!(hv(3).type_name(), "handle");
    assert_eq!(Value::None.get("x"), None);
}

#[test]
fn long_integers() {
    // LONG1 with zero bytes is 0.
    assert_eq!(ok(&P::new().long1(&[]).stop()), Value::Int(0));
    assert_eq!(ok(&P::new().long1(&[0xff]).stop()), Value::Int(-1));
    assert_eq!(ok(&P::new().long1(&[0x80]).stop()), Value::Int(-128));
    assert_eq!(ok(&P::new().long1(&[0x80, 0x00]).stop()), Value::Int(128));
    assert_eq!(
        ok(&P::new().long1(&[0x00, 0x80]).stop()),
        Value::Int(-32768)
    );
    let mut max = [0xffu8; 9];
    max[8] = 0;
    let v = ok(&P::new().long1(&max).stop());
    assert_eq!(v, Value::BigInt(Box::new(u64::MAX as i128)));
    assert_eq!(v.as_u64(), Some(u64::MAX));
    assert_eq!(v.as_i64(), None);
    assert_eq!(v.as_f64(), Some(u64::MAX as f64));
    assert_eq!(v.type_name(), "int");
    // A 9-byte encoding of a value that fits i64 narrows to Int.
    let minus2 = [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    assert_eq!(ok(&P::new().long1(&minus2).stop()), Value::Int(-2));
    // 16 bytes: i128::MIN.
    let mut min = [0u8; 16];
    min[15] = 0x80;
    assert_eq!(
        ok(&P::new().long1(&min).stop()),
        Value::BigInt(Box::new(i128::MIN))
    );
    let e = fail(&P::new().long1(&[0; 17]).stop());
    assert_eq!(e.message, "integer wider than 128 bits (17 bytes)");
    assert_eq!(e.offset, 2);
    // LONG4
    let v = ok(&P::new()
        .op(op::LONG4)
        .raw(&9i32.to_le_bytes())
        .raw(&max)
        .stop());
    assert_eq!(v.as_u64(), Some(u64::MAX));
    let v = ok(&P::new()
        .op(op::LONG4)
        .raw(&1i32.to_le_bytes())
        .raw(&[0x85])
        .stop());
    assert_eq!(v, Value::Int(-123));
    let e = fail(&P::new().op(op::LONG4).raw(&(-1i32).to_le_bytes()).stop());
    assert_eq!(e.message, "LONG4 with negative length -1");
    let e = fail(&P::new().op(op::LONG4).raw(&i32::MAX.to_le_bytes()).stop());
    assert!(
        e.message.starts_with("integer wider than 128 bits"),
        "{}",
        e.message
    );
}

#[test]
fn strings() {
    assert_eq!(ok(&P::new().s("").stop()), s(""));
    assert_eq!(ok(&P::new().s("naïve").stop()), s("naïve"));
    let long = "z".repeat(70_000);
    let b = P::new()
        .op(op::BINUNICODE)
        .raw(&(long.len() as u32).to_le_bytes())
        .raw(long.as_bytes())
        .stop();
    assert_eq!(ok(&b), s(&long));
    assert_eq!(trickle(&b, 1000).unwrap(), s(&long));
    let b = P::new()
        .op(op::BINUNICODE8)
        .raw(&3u64.to_le_bytes())
        .raw("☃".as_bytes())
        .stop();
    assert_eq!(ok(&b), s("☃"));
    // Invalid UTF-8 (a lone surrogate as CPython's surrogatepass writes it) is lossy.
    let b = P::new()
        .op(op::SHORT_BINUNICODE)
        .raw(&[5, b'a', 0xed, 0xa0, 0x80, b'b'])
        .stop();
    let v = ok(&b);
    assert!(v.as_str().unwrap().starts_with('a'));
    assert!(v.as_str().unwrap().ends_with('b'));
    assert!(v.as_str().unwrap().contains('\u{fffd}'));
}

#[test]
fn string_longer_than_buffer_and_limits() {
    // Larger than the initial window and delivered in pieces.
    let big = "q".repeat(3 << 20);
    let b = P::new()
        .op(op::BINUNICODE)
        .raw(&(big.len() as u32).to_le_bytes())
        .raw(big.as_bytes())
        .stop();
    assert_eq!(
        trickle(&b, 100_000).unwrap().as_str().map(str::len),
        Some(3 << 20)
    );
    // Over max_string_bytes: rejected before reading.
    let limits = Limits {
        max_string_bytes: 1000,
        ..Limits::default()
    };
    let e = with_limits(&b, &limits).unwrap_err();
    assert_eq!(
        e.message,
        "string of 3145728 bytes exceeds the limit of 1000 bytes"
    );
    assert_eq!(e.offset, 2);
    // Absurd declared lengths.
    let e = fail(
        &P::new()
            .op(op::BINUNICODE)
            .raw(&u32::MAX.to_le_bytes())
            .raw(b"ab")
            .stop(),
    );
    assert!(e.message.contains("exceeds the limit"), "{}", e.message);
    let e = fail(
        &P::new()
            .op(op::BINUNICODE8)
            .raw(&u64::MAX.to_le_bytes())
            .stop(),
    );
    assert!(e.message.contains("exceeds the limit"), "{}", e.message);
    // Within the limit but longer than the input: truncation, no big allocation up front.
    let e = fail(
        &P::new()
            .op(op::BINUNICODE)
            .raw(&(900u32 << 20).to_le_bytes())
            .raw(b"ab")
            .stop(),
    );
    assert_eq!(
        e.message,
        "truncated pickle: unexpected end of input at byte 10"
    );
}

#[test]
fn max_total_bytes() {
    let b = P::new().s("hello").stop();
    let limits = Limits {
        max_total_bytes: b.len() as u64,
        ..Limits::default()
    };
    assert_eq!(with_limits(&b, &limits).unwrap(), s("hello"));
    let limits = Limits {
        max_total_bytes: 5,
        ..Limits::default()
    };
    let e = with_limits(&b, &limits).unwrap_err();
    assert_eq!(e.message, "input exceeds the limit of 5 bytes");
}

#[test]
fn containers() {
    // EMPTY_LIST + APPEND, APPENDS
    let v = ok(&P::new()
        .op(op::EMPTY_LIST)
        .k(1)
        .op(op::APPEND)
        .op(op::MARK)
        .k(2)
        .k(3)
        .op(op::APPENDS)
        .op(op::MARK)
        .op(op::APPENDS)
        .stop());
    assert_eq!(
        *v.list_items().unwrap(),
        vec![Value::Int(1), Value::Int(2), Value::Int(3)]
    );
    assert_eq!(v.type_name(), "list");
    // LIST
    let v = ok(&P::new().op(op::MARK).k(1).s("a").op(op::LIST).stop());
    assert_eq!(*v.list_items().unwrap(), vec![Value::Int(1), s("a")]);
    // EMPTY_DICT + SETITEM, SETITEMS; DICT
    let v = ok(&P::new()
        .op(op::EMPTY_DICT)
        .s("a")
        .k(1)
        .op(op::SETITEM)
        .op(op::MARK)
        .s("b")
        .k(2)
        .k(7) // non-string key
        .s("seven")
        .op(op::SETITEMS)
        .stop());
    assert_eq!(v.get("a"), Some(Value::Int(1)));
    assert_eq!(v.get("b"), Some(Value::Int(2)));
    assert_eq!(v.dict_items().unwrap()[2], (Value::Int(7), s("seven")));
    let v = ok(&P::new()
        .op(op::MARK)
        .s("x")
        .op(op::NONE)
        .op(op::DICT)
        .stop());
    assert_eq!(v.get("x"), Some(Value::None));
    // Repeated keys: the last one wins for `get`.
    let v = ok(&P::new()
        .op(op::MARK)
        .s("x")
        .k(1)
        .s("x")
        .k(2)
        .op(op::DICT)
        .stop());
    assert_eq!(v.get("x"), Some(Value::Int(2)));
    // Tuples
    assert_eq!(
        ok(&P::new().op(op::EMPTY_TUPLE).stop()).tuple_items(),
        Some(&[][..])
    );
    assert_eq!(
        ok(&P::new().k(1).op(op::TUPLE1).stop()).tuple_items(),
        Some(&[Value::Int(1)][..])
    );
    assert_eq!(
        ok(&P::new().k(1).k(2).op(op::TUPLE2).stop()).tuple_items(),
        Some(&[Value::Int(1), Value::Int(2)][..])
    );
    assert_eq!(
        ok(&P::new().k(1).k(2).k(3).op(op::TUPLE3).stop()).tuple_items(),
        Some(&[Value::Int(1), Value::Int(2), Value::Int(3)][..])
    );
    let v = ok(&P::new()
        .op(op::MARK)
        .k(1)
        .k(2)
        .k(3)
        .k(4)
        .op(op::TUPLE)
        .stop());
    assert_eq!(v.tuple_items().unwrap().len(), 4);
    assert_eq!(v.type_name(), "tuple");
    assert!(v.identity().is_some());
    // Nested dict / list / tuple
    let v = ok(&P::new()
        .op(op::EMPTY_DICT)
        .s("l")
        .op(op::EMPTY_LIST)
        .op(op::EMPTY_DICT)
        .s("t")
        .k(1)
        .op(op::EMPTY_LIST)
        .op(op::TUPLE2)
        .op(op::SETITEM)
        .op(op::APPEND)
        .op(op::SETITEM)
        .stop());
    let l = v.get("l").unwrap();
    let inner = l.list_items().unwrap()[0].clone();
    let t = inner.get("t").unwrap();
    assert_eq!(t.tuple_items().unwrap()[0], Value::Int(1));
    assert_eq!(t.tuple_items().unwrap()[1].list_items().unwrap().len(), 0);
}

#[test]
fn pop_pop_mark_dup_frame() {
    let v = ok(&P::new().k(1).k(2).op(op::POP).stop());
    assert_eq!(v, Value::Int(1));
    let v = ok(&P::new().k(1).op(op::MARK).k(2).k(3).op(op::POP_MARK).stop());
    assert_eq!(v, Value::Int(1));
    // POP with nothing above the MARK pops the MARK.
    let v = ok(&P::new().k(1).op(op::MARK).op(op::POP).stop());
    assert_eq!(v, Value::Int(1));
    let v = ok(&P::new()
        .op(op::EMPTY_LIST)
        .op(op::DUP)
        .op(op::APPEND)
        .op(op::POP)
        .k(9)
        .stop());
    assert_eq!(v, Value::Int(9));
    let b = P::bare()
        .op(op::PROTO)
        .raw(&[4])
        .op(op::FRAME)
        .raw(&3u64.to_le_bytes())
        .k(5)
        .stop();
    assert_eq!(ok(&b), Value::Int(5));
}

#[test]
fn protocols() {
    for v in 2..=5u8 {
        assert_eq!(
            ok(&P::bare().op(op::PROTO).raw(&[v]).op(op::NONE).stop()),
            Value::None
        );
    }
    for v in [0u8, 1, 6, 255] {
        let e = fail(&P::bare().op(op::PROTO).raw(&[v]).op(op::NONE).stop());
        assert_eq!(
            e.message,
            format!("unsupported pickle protocol {v} (memcut reads protocols 2 to 5)")
        );
        assert_eq!(e.offset, 0);
    }
}

#[test]
fn trailing_bytes_after_stop_are_ignored() {
    let mut b = P::new().s("x").stop();
    b.extend_from_slice(&[0, 0, 0]);
    assert_eq!(ok(&b), s("x"));
    b.extend_from_slice(b"garbage\xff");
    assert_eq!(ok(&b), s("x"));
    for (_, cpy) in ALL_CPY {
        let mut padded = cpy.to_vec();
        padded.extend_from_slice(&[0, 0]);
        check_cpython_obj(&ok(&padded));
    }
}

#[test]
fn refused_opcodes() {
    let cases: [(u8, &str); 13] = [
        (b'c', "GLOBAL"),
        (0x93, "STACK_GLOBAL"),
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
        (0x82, "EXT1"),
        (0x83, "EXT2"),
        (0x84, "EXT4"),
    ];
    for (code, name) in cases {
        let e = fail(&P::new().k(1).op(code).raw(b"os\nsystem\n").stop());
        assert_eq!(
            e.message,
            format!(
                "opcode {name} (0x{code:02x}) refused: memcut never imports or calls code from a pickle"
            )
        );
        assert_eq!(e.offset, 4);
    }
    // The classic payload.
    let e = fail(b"cos\nsystem\n(S'echo pwned'\ntR.");
    assert_eq!(
        e,
        PickleError {
            offset: 0,
            message:
                "opcode GLOBAL (0x63) refused: memcut never imports or calls code from a pickle"
                    .into()
        }
    );
}

#[test]
fn unsupported_and_unknown_opcodes() {
    let e = fail(&P::new().op(0x8f).stop());
    assert_eq!(
        e.message,
        "opcode EMPTY_SET (0x8f) not supported: PyTorch memory snapshots do not use it"
    );
    let e = fail(&P::new().op(b'I').raw(b"1\n").stop());
    assert!(e.message.starts_with("opcode INT (0x49) not supported"));
    for code in [0xffu8, 0x00, 0x99, b'z'] {
        let e = fail(&P::new().op(code).stop());
        assert_eq!(e.message, format!("unknown opcode 0x{code:02x}"));
        assert_eq!(e.offset, 2);
    }
}

#[test]
fn stack_errors() {
    let e = fail(&P::new().stop());
    assert!(
        e.message.starts_with("stack underflow: STOP"),
        "{}",
        e.message
    );
    let e = fail(&P::new().k(1).op(op::APPEND).stop());
    assert!(
        e.message.starts_with("stack underflow: APPEND"),
        "{}",
        e.message
    );
    let e = fail(&P::new().k(1).k(2).op(op::APPEND).stop());
    assert_eq!(e.message, "APPEND on a int, expected a list");
    assert_eq!(e.offset, 6);
    let e = fail(
        &P::new()
            .op(op::EMPTY_LIST)
            .op(op::MARK)
            .k(1)
            .op(op::SETITEMS)
            .stop(),
    );
    assert_eq!(e.message, "SETITEMS on a list, expected a dict");
    let e = fail(
        &P::new()
            .op(op::EMPTY_DICT)
            .op(op::MARK)
            .k(1)
            .op(op::APPENDS)
            .stop(),
    );
    assert_eq!(e.message, "APPENDS on a dict, expected a list");
    let e = fail(&P::new().k(0).k(1).k(2).op(op::SETITEM).stop());
    assert_eq!(e.message, "SETITEM on a int, expected a dict");
    let e = fail(
        &P::new()
            .op(op::EMPTY_DICT)
            .op(op::MARK)
            .k(1)
            .op(op::SETITEMS)
            .stop(),
    );
    assert_eq!(e.message, "SETITEMS with an odd number of stack items (1)");
    let e = fail(&P::new().op(op::MARK).k(1).op(op::DICT).stop());
    assert_eq!(e.message, "DICT with an odd number of stack items (1)");
    let e = fail(&P::new().op(op::EMPTY_LIST).k(1).op(op::APPENDS).stop());
    assert_eq!(e.message, "MARK missing: APPENDS needs a MARK");
    let e = fail(&P::new().op(op::TUPLE).stop());
    assert_eq!(e.message, "MARK missing: TUPLE needs a MARK");
    let e = fail(&P::new().k(1).op(op::TUPLE2).stop());
    assert!(e.message.starts_with("stack underflow: TUPLE2"));
    // Values below a MARK are not reachable.
    let e = fail(&P::new().k(1).op(op::MARK).op(op::TUPLE1).stop());
    assert!(e.message.starts_with("stack underflow: TUPLE1"));
    let e = fail(&P::new().op(op::MARK).op(op::APPENDS).stop());
    assert!(e.message.starts_with("stack underflow: APPENDS"));
    let e = fail(&P::new().op(op::MEMOIZE).stop());
    assert!(e.message.starts_with("stack underflow: MEMOIZE"));
    let e = fail(&P::new().op(op::POP).stop());
    assert_eq!(e.message, "MARK missing: POP needs a MARK");
}

#[test]
fn memo_sharing() {
    // BINPUT / BINGET
    let v = ok(&P::new()
        .op(op::EMPTY_LIST)
        .put(0)
        .op(op::MARK)
        .op(op::EMPTY_LIST)
        .put(1)
        .k(1)
        .op(op::APPEND)
        .get(1)
        .get(1)
        .op(op::APPENDS)
        .stop());
    let items = v.list_items().unwrap();
    assert_eq!(items.len(), 3);
    let ids: Vec<_> = items.iter().map(Value::identity).collect();
    assert!(ids[0].is_some() && ids[0] == ids[1] && ids[1] == ids[2]);
    // LONG_BINPUT / LONG_BINGET and MEMOIZE
    let v = ok(&P::bare()
        .op(op::PROTO)
        .raw(&[4])
        .op(op::EMPTY_DICT)
        .op(op::MEMOIZE) // 0
        .s("k")
        .op(op::MEMOIZE) // 1
        .op(op::EMPTY_LIST)
        .long_put(70_000)
        .op(op::SETITEM)
        .s("k2")
        .long_get(70_000)
        .op(op::SETITEM)
        .s("k3")
        .get(1)
        .op(op::SETITEM)
        .stop());
    assert_eq!(
        v.get("k").unwrap().identity(),
        v.get("k2").unwrap().identity()
    );
    assert_eq!(v.get("k3"), Some(s("k")));
    // A memo slot can be overwritten.
    let v = ok(&P::new()
        .k(1)
        .put(0)
        .k(2)
        .put(0)
        .op(op::MARK)
        .get(0)
        .op(op::TUPLE)
        .stop());
    assert_eq!(v.tuple_items(), Some(&[Value::Int(2)][..]));
}

#[test]
fn memo_errors_and_sparse_indices() {
    let e = fail(&P::new().get(5).stop());
    assert_eq!(e.message, "BINGET: memo index 5 not found");
    assert_eq!(e.offset, 2);
    let e = fail(&P::new().long_get(123_456).stop());
    assert_eq!(e.message, "LONG_BINGET: memo index 123456 not found");
    let e = fail(&P::new().k(1).long_put(u32::MAX - 1).stop());
    assert_eq!(
        e.message,
        "memo index 4294967294 exceeds the limit of 268435456"
    );
    let limits = Limits {
        max_memo: 10,
        ..Limits::default()
    };
    let b = P::new().k(1).put(10).stop();
    assert_eq!(
        with_limits(&b, &limits).unwrap_err().message,
        "memo index 10 exceeds the limit of 10"
    );
    let mut p = P::new().k(1);
    for _ in 0..11 {
        p = p.op(op::MEMOIZE);
    }
    let e = with_limits(&p.stop(), &limits).unwrap_err();
    assert_eq!(e.message, "memo index 10 exceeds the limit of 10");
    // A large sparse index works without a huge dense table.
    let v = ok(&P::new()
        .k(7)
        .long_put(200_000_000)
        .long_get(200_000_000)
        .op(op::TUPLE2)
        .stop());
    assert_eq!(v.tuple_items(), Some(&[Value::Int(7), Value::Int(7)][..]));
    let mut m = Memo::default();
    assert!(m
        .put(200_000_000, Value::Int(1), 1 << 28)
        .unwrap()
        .is_none());
    assert_eq!(m.dense.len(), 0);
    assert_eq!(m.sparse.len(), 1);
    assert!(m.put(0, Value::Int(2), 1 << 28).unwrap().is_none());
    assert_eq!(m.dense.len(), 1);
    assert_eq!(m.count, 2);
    assert_eq!(m.value(200_000_000), Some(Value::Int(1)));
    assert_eq!(m.value(1), None);
    // Dense growth past a sparse entry keeps one value per index.
    let mut m = Memo::default();
    m.put(2000, Value::Int(1), 1 << 28).unwrap();
    assert_eq!(m.sparse.len(), 1);
    for i in 0..2001 {
        m.put(i, Value::Int(i as i64 + 10), 1 << 28).unwrap();
    }
    assert_eq!(m.value(2000), Some(Value::Int(2010)));
    assert!(m.sparse.is_empty());
    assert_eq!(m.count, 2001);
}

/// Slots hold handles in place and other values in a table whose freed
/// entries are reused; strings the fast paths put are one entry per
/// distinct string, and still read back as strings.
#[test]
fn memo_slots_share_strings_and_reuse_freed_values() {
    let max = 1 << 28;
    let mut m = Memo::default();
    let h = crate::formats::pickle::Handle::frame(3).unwrap();
    m.put(0, Value::Handle(h), max).unwrap();
    m.put_str(1, b"forward", max).unwrap();
    m.put_str(2, b"forward", max).unwrap();
    m.put(3, Value::Int(9), max).unwrap();
    assert_eq!(m.value(0), Some(Value::Handle(h)));
    assert_eq!(m.value(2), Some(Value::Str(Rc::new("forward".into()))));
    assert_eq!(m.dense[1], m.dense[2], "one string for both slots");
    // Overwriting a value frees its entry for the next value.
    assert_eq!(m.put(3, Value::Int(10), max).unwrap(), Some(Value::Int(9)));
    let before = m.dense[3];
    assert_eq!(
        m.put(3, Value::Handle(h), max).unwrap(),
        Some(Value::Int(10))
    );
    m.put(4, Value::Int(11), max).unwrap();
    assert_eq!(m.dense[4], before, "the freed entry is reused");
    assert_eq!(m.value(4), Some(Value::Int(11)));
    // Overwriting a handle is noted (answers by bytes depend on handles).
    assert!(m.changed_handles.is_empty());
    assert_eq!(
        m.put(0, Value::Int(1), max).unwrap(),
        Some(Value::Handle(h))
    );
    assert_eq!(m.changed_handles, [0]);
    assert_eq!(m.count, 5);
}

#[test]
fn mark_depth_limit() {
    let mut p = P::new();
    for _ in 0..1000 {
        p = p.op(op::MARK);
    }
    let ok_depth = p.0.clone();
    // 1000 MARKs are fine (then closed by 1000 TUPLEs).
    let mut q = P(ok_depth);
    for _ in 0..1000 {
        q = q.op(op::TUPLE);
    }
    let v = ok(&q.stop());
    assert!(v.tuple_items().is_some());
    let e = fail(&p.op(op::MARK).stop());
    assert_eq!(e.message, "nesting deeper than max_depth (1000)");
    assert_eq!(e.offset, 1002);
}

#[test]
fn container_depth_limit() {
    // 2000 nested lists built with EMPTY_LIST×n, APPEND×(n-1).
    let nested = |n: usize| {
        let mut p = P::new();
        for _ in 0..n {
            p = p.op(op::EMPTY_LIST);
        }
        for _ in 1..n {
            p = p.op(op::APPEND);
        }
        p.stop()
    };
    ok(&nested(1000));
    let e = fail(&nested(1001));
    assert_eq!(e.message, "containers nested deeper than max_depth (1000)");
    let limits = Limits {
        max_depth: 2000,
        ..Limits::default()
    };
    assert!(with_limits(&nested(2000), &limits).is_ok());
}

/// Runs `f` on a thread with a small stack, so that any recursion over a
/// deeply nested value would overflow.
fn small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 << 10)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap();
}

/// The stack limit fires at the opcode that pushes past it, whatever
/// pieces the input arrives in (it used to be checked once per buffer
/// window, so where it fired depended on the reader).
#[test]
fn stack_limit_fires_at_the_same_byte_however_the_input_arrives() {
    const N: usize = MAX_STACK + 100;
    let mut b = vec![op::PROTO, 2];
    b.resize(2 + N, op::EMPTY_LIST);
    b.resize(2 + 2 * N - 1, op::APPEND);
    b.push(op::STOP);
    let want = format!(
        "bad pickle at byte {}: more than {MAX_STACK} values on the pickle stack (e.g. millions of nested lists); not a memory snapshot",
        2 + MAX_STACK
    );
    assert_eq!(fail(&b).to_string(), want);
    for n in [1000, 65536, 1 << 20] {
        assert_eq!(
            trickle(&b, n).unwrap_err().to_string(),
            want,
            "pieces of {n}"
        );
    }
}

#[test]
fn million_deep_nesting_is_an_error_not_a_stack_overflow() {
    small_stack(|| {
        const N: usize = 1_000_000;
        // Lists: EMPTY_LIST×N then APPEND×(N-1).
        let mut b = vec![op::PROTO, 2];
        b.resize(2 + N, op::EMPTY_LIST);
        b.resize(2 + 2 * N - 1, op::APPEND);
        b.push(op::STOP);
        let e = fail(&b);
        assert_eq!(e.message, "containers nested deeper than max_depth (1000)");
        // Truncated before STOP: the partial structure is torn down too.
        let e = fail(&b[..b.len() - 1]);
        assert!(e.message.starts_with("truncated pickle"));
        // Tuples with a constant-size stack: EMPTY_TUPLE then TUPLE1×N.
        let mut t = vec![op::PROTO, 2, op::EMPTY_TUPLE];
        t.resize(3 + N, op::TUPLE1);
        t.push(op::STOP);
        assert!(fail(&t).message.starts_with("containers nested deeper"));
        assert!(fail(&t[..t.len() - 1])
            .message
            .starts_with("truncated pickle"));
        // Deep structures that get overwritten in the memo or popped.
        let mut m = t[..t.len() - 1].to_vec();
        m.extend_from_slice(&[op::BINPUT, 0, op::NONE, op::BINPUT, 0, op::POP, op::POP]);
        m.extend_from_slice(&[op::NONE, op::STOP]);
        assert_eq!(ok(&m), Value::None);
        // MARKs: stopped by the limit.
        let mut k = vec![op::PROTO, 2];
        k.resize(2 + N, op::MARK);
        assert_eq!(fail(&k).message, "nesting deeper than max_depth (1000)");
    });
}

#[test]
fn deep_value_inside_a_hook_replaced_dict_is_torn_down_safely() {
    small_stack(|| {
        const N: usize = 200_000;
        let mut b = vec![op::PROTO, 2, op::EMPTY_LIST, op::EMPTY_DICT, op::BINPUT, 0];
        b.extend_from_slice(&[op::SHORT_BINUNICODE, 1, b'd', op::EMPTY_TUPLE]);
        b.resize(b.len() + N, op::TUPLE1);
        b.extend_from_slice(&[op::SETITEM, op::APPEND, op::STOP]);
        let mut hook = Replace::default();
        let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
        assert_eq!(*v.list_items().unwrap(), vec![hv(0)]);
    });
}

#[test]
fn cycles_are_rejected_and_dags_are_cheap() {
    let e = fail(
        &P::new()
            .op(op::EMPTY_LIST)
            .put(0)
            .get(0)
            .op(op::APPEND)
            .stop(),
    );
    assert_eq!(e.message, "self-referential container (cycle) in pickle");
    let e = fail(
        &P::new()
            .op(op::EMPTY_LIST)
            .op(op::EMPTY_DICT)
            .put(0)
            .s("x")
            .op(op::EMPTY_LIST)
            .get(0)
            .op(op::APPEND)
            .op(op::SETITEM)
            .op(op::APPEND)
            .stop(),
    );
    assert_eq!(e.message, "self-referential container (cycle) in pickle");
    // L(i+1) = (L(i), L(i)): 2^300 paths, 301 levels.
    let mut p = P::new().op(op::EMPTY_TUPLE).put(0);
    for _ in 0..300 {
        p = p.op(op::POP).get(0).get(0).op(op::TUPLE2).put(0);
    }
    let v = ok(&p.stop());
    assert!(v.tuple_items().is_some());
    let limits = Limits {
        max_depth: 300,
        ..Limits::default()
    };
    let mut p = P::new().op(op::EMPTY_TUPLE).put(0);
    for _ in 0..300 {
        p = p.op(op::POP).get(0).get(0).op(op::TUPLE2).put(0);
    }
    assert_eq!(
        with_limits(&p.stop(), &limits).unwrap_err().message,
        "containers nested deeper than max_depth (300)"
    );
}

/// Replaces every dict that has an "action" key with `Handle(n)`; keeps
/// weak references to lists inside the dicts it sees.
#[derive(Default)]
struct Replace {
    calls: usize,
    replaced: u32,
    weak_lists: Vec<Weak<RefCell<Vec<Value>>>>,
}

impl Hook for Replace {
    fn on_list_dict(&mut self, dict: &[(Value, Value)]) -> Result<Option<Value>, String> {
        self.calls += 1;
        for (_, v) in dict {
            if let Value::List(l) = v {
                self.weak_lists.push(Rc::downgrade(l));
            }
        }
        let has = |k: &str| dict.iter().any(|(key, _)| key.as_str() == Some(k));
        if has("fail") {
            return Err("hook says no".into());
        }
        if has("action") || has("d") {
            let h = self.replaced;
            self.replaced += 1;
            return Ok(Some(hv(h)));
        }
        Ok(None)
    }
}

fn entry(p: P, memo: u8, inner_list: bool) -> P {
    let p = p
        .op(op::EMPTY_DICT)
        .put(memo)
        .op(op::MARK)
        .s("action")
        .s("alloc");
    let p = if inner_list {
        p.s("frames").op(op::EMPTY_LIST).k(1).op(op::APPEND)
    } else {
        p
    };
    p.op(op::SETITEMS)
}

#[test]
fn hook_replaces_dict_and_memo_slot() {
    // [entry, entry-via-BINGET] with APPEND; then the same with APPENDS.
    let b = entry(P::new().op(op::EMPTY_LIST).put(0), 1, true)
        .op(op::APPEND)
        .get(1) // the memo slot now holds the handle
        .op(op::APPEND)
        .stop();
    let mut hook = Replace::default();
    let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
    assert_eq!(*v.list_items().unwrap(), vec![hv(0), hv(0)]);
    assert_eq!(hook.calls, 1);
    assert_eq!(hook.weak_lists.len(), 1);
    // The dict (the only holder of its "frames" list) has been freed.
    assert!(hook.weak_lists[0].upgrade().is_none());

    let mut p = P::bare()
        .op(op::PROTO)
        .raw(&[4])
        .op(op::EMPTY_LIST)
        .put(0)
        .op(op::MARK);
    for i in 0..3 {
        p = entry(p, 1 + i, true);
    }
    p = p.op(op::APPENDS);
    // After the APPENDS the memo slots hold the handles.
    p = p
        .op(op::MARK)
        .get(1)
        .get(2)
        .get(3)
        .op(op::TUPLE)
        .op(op::APPEND);
    let mut hook = Replace::default();
    let v = unpickle(&p.stop()[..], &Limits::default(), &mut hook).unwrap();
    let items = v.list_items().unwrap();
    assert_eq!(items[..3], [hv(0), hv(1), hv(2)]);
    assert_eq!(items[3].tuple_items(), Some(&[hv(0), hv(1), hv(2)][..]));
    assert_eq!(hook.weak_lists.len(), 3);
    assert!(hook.weak_lists.iter().all(|w| w.upgrade().is_none()));
}

/// Lowers `{"h": n}` dicts in lists to `Handle(n)`, lists of handles to
/// `Handle(1000 + sum)`, and dicts whose first key is "rec" to the pair
/// `("rec", number of items)`; counts the calls. Fails on a handle list
/// summing to 13 and on a record with value "fail". With `fast`, opens the
/// door to the fast paths (and declines every record they offer).
#[derive(Default)]
struct Lower {
    fast: bool,
    list_items: usize,
    dict_items: usize,
}

impl Lower {
    fn lower(handles: impl Iterator<Item = u32>) -> Result<Option<Value>, String> {
        let sum: u32 = handles.sum();
        if sum == 13 {
            return Err("unlucky".into());
        }
        Ok(Some(hv(1000 + sum)))
    }
}

impl Hook for Lower {
    fn on_list_dict(&mut self, dict: &[(Value, Value)]) -> Result<Option<Value>, String> {
        Ok(match dict {
            [(k, Value::Int(n))] if k.as_str() == Some("h") => Some(hv(*n as u32)),
            _ => None,
        })
    }
    fn on_list_items(&mut self, items: &[Value]) -> Result<Option<Value>, String> {
        self.list_items += 1;
        let mut handles = Vec::new();
        for item in items {
            match item {
                Value::Handle(h) => handles.push(num(*h)),
                _ => return Ok(None),
            }
        }
        Lower::lower(handles.into_iter())
    }
    fn on_dict_items(&mut self, items: &[Value]) -> Result<Option<(Value, Value)>, String> {
        self.dict_items += 1;
        match items {
            [k, v, ..] if k.as_str() == Some("rec") => {
                if v.as_str() == Some("fail") {
                    return Err("bad record".into());
                }
                Ok(Some((k.clone(), Value::Int(items.len() as i64))))
            }
            _ => Ok(None),
        }
    }
    fn fast(&mut self) -> Option<&mut dyn Records> {
        match self.fast {
            true => Some(self),
            false => None,
        }
    }
}

impl Records for Lower {
    fn on_record(&mut self, _: &[Item<'_>]) -> Result<Option<(Value, Value)>, String> {
        Ok(None)
    }
    fn on_whole_record(&mut self, _: &[Item<'_>]) -> Result<Option<Value>, String> {
        Ok(None)
    }
}

/// `MARK [{"h": 1}, {"h": 2}, {"h": 3}]` with the dicts memoized as 1, 2,
/// 3 (so the memo then holds handles 1, 2, 3) and the list as 0 (it
/// becomes `[Handle(1006)]`); then `then`.
fn handle_memo(then: impl FnOnce(P) -> P) -> Vec<u8> {
    let mut p = P::new().op(op::MARK).op(op::EMPTY_LIST).put(0).op(op::MARK);
    for i in 1..=3 {
        p = p.op(op::EMPTY_DICT).put(i).s("h").k(i).op(op::SETITEM);
    }
    then(p.op(op::APPENDS)).stop()
}

/// Reads `b` a few bytes per `read`, so the parser's window ends everywhere.
fn trickle_hooked(b: &[u8], hook: &mut dyn Hook) -> Result<Value, PickleError> {
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = out.len().min(self.0.len()).min(3);
            out[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    unpickle(
        BufReader::with_capacity(1, Trickle(b)),
        &Limits::default(),
        hook,
    )
}

#[test]
fn handle_lists_take_the_fast_path() {
    // (outer, then [h1, h2, h3, h2] three times, each into a new list)
    let gets = |p: P| {
        p.op(op::EMPTY_LIST)
            .op(op::MARK)
            .get(1)
            .long_get(2)
            .get(3)
            .get(2)
            .op(op::APPENDS)
    };
    let b = handle_memo(|p| gets(gets(gets(p))).op(op::TUPLE));
    let h = hv;
    for (fast, trickled, calls) in [
        // The fast path answers the second and third lists by the bytes of
        // their gets: lowering the first put the outer list back in its memo
        // slot, a slot no answer was fetched from, so the answers hold.
        (true, false, Some(2)),
        // The plain path offers every list; in 3-byte reads the fast path
        // gives up wherever the window ends.
        (false, false, Some(4)),
        (true, true, None),
    ] {
        let what = format!("fast: {fast}, trickled: {trickled}");
        let mut hook = Lower {
            fast,
            ..Lower::default()
        };
        let v = if trickled {
            trickle_hooked(&b, &mut hook).unwrap()
        } else {
            unpickle(&b[..], &Limits::default(), &mut hook).unwrap()
        };
        let t = v.tuple_items().unwrap();
        assert_eq!(*t[0].list_items().unwrap(), vec![h(1006)], "{what}");
        for list in &t[1..] {
            assert_eq!(*list.list_items().unwrap(), vec![h(1008)], "{what}");
            assert_eq!(list.list_items().unwrap().capacity(), 1, "{what}");
        }
        if let Some(calls) = calls {
            assert_eq!(hook.list_items, calls, "{what}");
        }
    }
    // Without a hook the list is built as usual.
    let v = unpickle_slice(&b).unwrap();
    let t = v.tuple_items().unwrap();
    assert_eq!(t[0].list_items().unwrap().len(), 3);
    let items = t[1].list_items().unwrap();
    assert_eq!(items.len(), 4);
    assert_eq!(items[3].get("h"), Some(Value::Int(2)));
}

#[test]
fn handle_lists_fall_back_when_they_must() {
    let h = hv;
    // A string among the gets, a second APPENDS, APPEND, an empty batch,
    // and a MARK whose stack top is not a list.
    let b = handle_memo(|p| {
        p.s("x")
            .put(5)
            .op(op::POP)
            .op(op::EMPTY_LIST)
            .op(op::MARK)
            .get(1)
            .get(5)
            .op(op::APPENDS)
            .op(op::EMPTY_LIST)
            .op(op::MARK)
            .get(1)
            .op(op::APPENDS)
            .op(op::MARK)
            .get(2)
            .get(3)
            .op(op::APPENDS)
            .op(op::EMPTY_LIST)
            .get(3)
            .op(op::APPEND)
            .op(op::EMPTY_LIST)
            .op(op::MARK)
            .op(op::APPENDS)
            .op(op::MARK)
            .get(1)
            .op(op::TUPLE)
            .op(op::TUPLE)
    });
    for fast in [true, false] {
        let mut hook = Lower {
            fast,
            ..Lower::default()
        };
        let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
        let t = v.tuple_items().unwrap();
        assert_eq!(t.len(), 6);
        assert_eq!(t[1].list_items().unwrap()[0], h(1));
        assert_eq!(t[1].list_items().unwrap()[1].as_str(), Some("x"));
        assert_eq!(*t[2].list_items().unwrap(), vec![h(1001), h(2), h(3)]);
        assert_eq!(*t[3].list_items().unwrap(), vec![h(1003)]);
        assert!(t[4].list_items().unwrap().is_empty());
        assert_eq!(t[5].tuple_items(), Some(&[h(1)][..]));
        // [0]: dicts; [1]: a string (the fast path falls back); [2]: fast,
        // then appended to (not empty, not offered again); [3]: APPEND;
        // [4]: an empty batch is not offered; [5]: no list below the MARK.
        assert_eq!(hook.list_items, 4, "fast: {fast}");
    }
}

#[test]
fn lowered_lists_return_to_the_memo_when_appended_to() {
    let h = hv;
    for trickled in [false, true] {
        let run = |b: &[u8]| {
            let mut hook = Lower {
                fast: true,
                ..Lower::default()
            };
            if trickled {
                trickle_hooked(b, &mut hook).unwrap()
            } else {
                unpickle(b, &Limits::default(), &mut hook).unwrap()
            }
        };
        // Two batches: the memo slot gets the list back.
        let b = handle_memo(|p| {
            p.op(op::EMPTY_LIST)
                .put(4)
                .op(op::MARK)
                .get(1)
                .get(2)
                .op(op::APPENDS)
                .op(op::MARK)
                .get(3)
                .get(3)
                .op(op::APPENDS)
                .get(3)
                .op(op::APPEND)
                .get(4)
                .op(op::TUPLE)
        });
        let v = run(&b);
        let t = v.tuple_items().unwrap();
        assert_eq!(*t[1].list_items().unwrap(), vec![h(1003), h(3), h(3), h(3)]);
        assert_eq!(t[1].identity(), t[2].identity());
        // A lowered with one batch, B lowered while A is still on the
        // stack (A goes back to the memo), then A appended to.
        let b = handle_memo(|p| {
            p.op(op::EMPTY_LIST)
                .put(4)
                .op(op::MARK)
                .get(1)
                .op(op::APPENDS)
                .op(op::EMPTY_LIST)
                .put(5)
                .op(op::MARK)
                .get(2)
                .op(op::APPENDS)
                .op(op::POP)
                .get(3)
                .op(op::APPEND)
                .get(4)
                .get(5)
                .op(op::TUPLE)
        });
        let v = run(&b);
        let t = v.tuple_items().unwrap();
        assert_eq!(*t[1].list_items().unwrap(), vec![h(1001), h(3)]);
        assert_eq!(t[1].identity(), t[2].identity());
        assert_eq!(t[3], h(1002));
        // A slot overwritten by a later PUT is left alone.
        let b = handle_memo(|p| {
            p.op(op::EMPTY_LIST)
                .put(4)
                .op(op::MARK)
                .get(1)
                .op(op::APPENDS)
                .s("other")
                .put(4)
                .op(op::POP)
                .get(2)
                .op(op::APPEND)
                .get(4)
                .op(op::TUPLE)
        });
        let v = run(&b);
        let t = v.tuple_items().unwrap();
        assert_eq!(*t[1].list_items().unwrap(), vec![h(1001), h(2)]);
        assert_eq!(t[2].as_str(), Some("other"));
    }
}

#[test]
fn handle_list_errors_name_the_appends() {
    // Handles 1, 3 and 9 sum to 13: the hook fails.
    let prefix = handle_memo(|p| p).len() - 1; // without STOP
    let b = handle_memo(|p| {
        p.op(op::EMPTY_DICT)
            .put(9)
            .s("h")
            .k(9)
            .op(op::SETITEM)
            .op(op::POP)
            .op(op::EMPTY_LIST)
            .op(op::MARK)
            .get(1)
            .get(3)
            .op(op::APPENDS)
    });
    // {"h": 9} was never appended: the memo holds the dict, not a handle.
    let mut hook = Lower {
        fast: true,
        ..Lower::default()
    };
    assert!(unpickle(&b[..], &Limits::default(), &mut hook).is_ok());
    let b = handle_memo(|p| {
        p.op(op::EMPTY_LIST)
            .op(op::MARK)
            .get(1)
            .get(3)
            .get(3)
            .get(3)
            .get(3)
            .op(op::APPENDS)
    });
    let appends = (prefix + 2 + 5 * 2) as u64;
    for trickled in [false, true] {
        let mut hook = Lower {
            fast: true,
            ..Lower::default()
        };
        let e = if trickled {
            trickle_hooked(&b, &mut hook).unwrap_err()
        } else {
            unpickle(&b[..], &Limits::default(), &mut hook).unwrap_err()
        };
        assert_eq!(
            e,
            PickleError {
                offset: appends,
                message: "unlucky".into()
            },
            "trickled: {trickled}"
        );
    }
}

#[test]
fn dict_items_hook_lowers_complete_batches() {
    let b = P::new()
        .op(op::MARK)
        .op(op::EMPTY_DICT)
        .put(0)
        .op(op::MARK)
        .s("rec")
        .k(1)
        .s("a")
        .k(2)
        .op(op::SETITEMS)
        .op(op::MARK)
        .s("b")
        .k(3)
        .op(op::SETITEMS)
        .s("c")
        .k(4)
        .op(op::SETITEM)
        .get(0)
        .op(op::EMPTY_DICT)
        .op(op::MARK)
        .s("other")
        .k(5)
        .op(op::SETITEMS)
        .op(op::EMPTY_DICT)
        .s("rec")
        .k(6)
        .op(op::SETITEM)
        .op(op::TUPLE)
        .stop();
    let mut hook = Lower::default();
    let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
    let t = v.tuple_items().unwrap();
    assert_eq!(t.len(), 4);
    let pairs = |v: &Value| v.dict_items().unwrap().clone();
    assert_eq!(
        pairs(&t[0]),
        vec![
            (s("rec"), Value::Int(4)),
            (s("b"), Value::Int(3)),
            (s("c"), Value::Int(4))
        ]
    );
    assert_eq!(t[0].identity(), t[1].identity());
    assert_eq!(pairs(&t[2]), vec![(s("other"), Value::Int(5))]);
    assert_eq!(pairs(&t[3]), vec![(s("rec"), Value::Int(6))]);
    // Only the first batch into an empty dict is offered; SETITEM never.
    assert_eq!(hook.dict_items, 2);
    // No hook: plain dicts.
    let v = unpickle_slice(&b).unwrap();
    assert_eq!(v.tuple_items().unwrap()[0].dict_items().unwrap().len(), 4);

    let b = P::new()
        .op(op::EMPTY_DICT)
        .op(op::MARK)
        .s("rec")
        .s("fail")
        .op(op::SETITEMS)
        .stop();
    let e = unpickle(&b[..], &Limits::default(), &mut Lower::default()).unwrap_err();
    assert_eq!(
        e,
        PickleError {
            offset: 15,
            message: "bad record".into()
        }
    );
}

#[test]
fn recycled_dicts_start_empty() {
    // The first batch's dict is replaced and recycled; the second batch's
    // EMPTY_DICT reuses its allocation and must not see old contents.
    let b = entry(P::new().op(op::EMPTY_LIST).op(op::MARK), 0, true)
        .op(op::APPENDS)
        .op(op::MARK)
        .op(op::EMPTY_DICT)
        .s("x")
        .k(1)
        .op(op::SETITEM)
        .op(op::EMPTY_DICT)
        .op(op::APPENDS)
        .stop();
    let mut hook = Replace::default();
    let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
    let items = v.list_items().unwrap();
    assert_eq!(items[0], hv(0));
    assert_eq!(
        *items[1].dict_items().unwrap(),
        vec![(s("x"), Value::Int(1))]
    );
    assert_eq!(items[2].dict_items().unwrap().len(), 0);
    assert_eq!(hook.calls, 3);
}

#[test]
fn hook_keeps_dicts_it_declines() {
    let b = P::new()
        .op(op::EMPTY_LIST)
        .op(op::EMPTY_DICT)
        .put(0)
        .s("frames")
        .op(op::EMPTY_LIST)
        .op(op::SETITEM)
        .op(op::APPEND)
        .get(0)
        .op(op::TUPLE2)
        .stop();
    let mut hook = Replace::default();
    let v = unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
    assert_eq!(hook.calls, 1);
    assert!(hook.weak_lists[0].upgrade().is_some());
    let t = v.tuple_items().unwrap();
    let in_list = t[0].list_items().unwrap()[0].clone();
    assert_eq!(in_list.identity(), t[1].identity());
    assert_eq!(in_list.type_name(), "dict");
    // Dicts in SETITEMS and tuples do not reach the hook.
    let b = P::new()
        .op(op::EMPTY_DICT)
        .s("a")
        .op(op::EMPTY_DICT)
        .s("action")
        .k(1)
        .op(op::SETITEM)
        .op(op::SETITEM)
        .stop();
    let mut hook = Replace::default();
    unpickle(&b[..], &Limits::default(), &mut hook).unwrap();
    assert_eq!(hook.calls, 0);
}

#[test]
fn hook_error_aborts_at_the_append() {
    let b = P::new()
        .op(op::EMPTY_LIST)
        .op(op::EMPTY_DICT)
        .s("fail")
        .k(1)
        .op(op::SETITEM)
        .op(op::APPEND)
        .stop();
    let e = unpickle(&b[..], &Limits::default(), &mut Replace::default()).unwrap_err();
    assert_eq!(
        e,
        PickleError {
            offset: 13,
            message: "hook says no".into()
        }
    );
}

#[test]
fn error_conversion() {
    let e: crate::error::Error = PickleError {
        offset: 7,
        message: "x".into(),
    }
    .into();
    assert_eq!(e.to_string(), "bad pickle at byte 7: x");
    assert_eq!(
        PickleError {
            offset: 7,
            message: "x".into()
        }
        .to_string(),
        "bad pickle at byte 7: x"
    );
}

#[test]
fn io_errors_are_reported() {
    struct Broken;
    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("disk on fire"))
        }
    }
    let e = unpickle(BufReader::new(Broken), &Limits::default(), &mut NoHook).unwrap_err();
    assert_eq!(e.message, "read error: disk on fire");
}

// ---- corpus -----------------------------------------------------------

use crate::test_support::corpus_dir;

/// (path under the corpus, dicts with "action" appended to lists, all dicts
/// appended to lists), computed with CPython's pickle and a find_class that raises.
const CORPUS_EXPECTED: [(&str, usize, usize); 17] = [
    ("cs336-bcrafton/memory_snapshot.pickle", 6486, 210595),
    ("cs336-magma27/memory_snapshot.pickle", 5163, 17708),
    (
        "cs336-nothanmin/memory_snapshot_forward.pickle",
        8948,
        572662,
    ),
    (
        "cs336-nothanmin/memory_snapshot_forward_without_mixed.pickle",
        7600,
        493900,
    ),
    ("cs336-silmont2000/mem_snapshot.pickle", 97, 2011),
    (
        "cs336-silmont2000/memory_forward_bf16_128.pickle",
        2811,
        81488,
    ),
    (
        "cs336-silmont2000/memory_forward_fp32_128.pickle",
        2043,
        55486,
    ),
    (
        "cs336-wedsonlin/results/medium_1024_training_memory_snapshot.pickle",
        22331,
        557018,
    ),
    (
        "cs336-wedsonlin/results/medium_128_inference_memory_snapshot.pickle",
        3840,
        172052,
    ),
    (
        "cs336-wedsonlin/results/medium_128_training_memory_snapshot.pickle",
        19136,
        471548,
    ),
    (
        "cs336-wedsonlin/results/medium_512_training_memory_snapshot.pickle",
        22332,
        557195,
    ),
    ("decomfl/memory.pickle", 23105, 195764),
    ("flexgen-yiyi/1.3b_snapshot.pickle", 1, 11071),
    ("flexgen-yiyi/log1/1.3b_snapshot.pickle", 1, 12669),
    ("flexgen-yiyi/oom_snapshot.pickle", 1, 5700),
    ("sketchkv2/my_snapshot.pickle", 1, 10727),
    ("verl/mem.pickle", 0, 88545),
];

/// Counts handles and "action" dicts in `device_traces`.
fn count_traces(v: &Value) -> (usize, usize) {
    let (mut handles, mut dicts) = (0, 0);
    if let Some(traces) = v.get("device_traces") {
        for dev in traces.list_items().expect("device_traces is a list").iter() {
            for e in dev.list_items().expect("a device's trace is a list").iter() {
                match e {
                    Value::Handle(_) => handles += 1,
                    d if d.get("action").is_some() => dicts += 1,
                    _ => {}
                }
            }
        }
    }
    (handles, dicts)
}

#[test]
#[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
fn corpus_snapshots_parse() {
    let dir = corpus_dir();
    let pattern = format!("{}/**/*.pickle", dir.display());
    let mut seen = 0;
    for path in glob::glob(&pattern).unwrap() {
        let path = path.unwrap();
        let rel = path
            .strip_prefix(&dir)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let file = std::fs::File::open(&path).unwrap();
        let mut hook = Replace::default();
        let v = unpickle(BufReader::new(file), &Limits::default(), &mut hook)
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        let segments = match &v {
            Value::Dict(_) => v.get("segments"),
            Value::List(_) => Some(v.clone()),
            _ => None,
        };
        assert!(
            segments.as_ref().and_then(Value::list_items).is_some(),
            "{rel}: no segments list"
        );
        let (handles, dicts) = count_traces(&v);
        assert_eq!(dicts, 0, "{rel}");
        assert_eq!(handles, hook.replaced as usize, "{rel}");
        let plain = unpickle_slice(&std::fs::read(&path).unwrap()).unwrap();
        let (h0, plain_dicts) = count_traces(&plain);
        assert_eq!((h0, plain_dicts), (0, handles), "{rel}");
        if let Some((_, actions, list_dicts)) =
            CORPUS_EXPECTED.iter().find(|(name, _, _)| *name == rel)
        {
            assert_eq!(hook.replaced as usize, *actions, "{rel}");
            assert_eq!(hook.calls, *list_dicts, "{rel}");
            seen += 1;
        } else {
            eprintln!("{rel}: no expected counts recorded");
        }
    }
    eprintln!("checked {seen} corpus pickles");
    assert!(seen > 0, "no corpus pickles under {}", dir.display());
}

#[test]
fn fuzz_cycle_inputs_are_freed_without_a_panic() {
    // Found by `cargo fuzz run unpickle` (they leaked reference cycles); the
    // CLI's answers are in `tests/suite/broken.rs`, but the sniffer does not hand
    // the first one (no PROTO header) to the unpickler.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/broken");
    for (file, message) in [
        (
            "fuzz_pickle_dict_cycle_leak.pkl",
            "truncated pickle: unexpected end of input at byte 25",
        ),
        ("fuzz_pickle_memo_cycle_leak.pkl", ""),
    ] {
        let bytes = std::fs::read(dir.join(file)).unwrap();
        match unpickle_slice(&bytes) {
            Ok(v) => assert_eq!(message, "", "{file}: {v:?}"),
            Err(e) => assert_eq!(e.message, message, "{file}"),
        }
    }
}

/// A pickle of short and long strings, a long int and memo traffic, read
/// through buffers of every small size and with every input limit around
/// its length: the window reads each buffer in place and stitches what
/// runs across their ends (`window.rs`), with the result, the error and
/// the error's offset the whole slice gives.
#[test]
fn buffers_of_any_size_and_limits_read_alike() {
    let long = "x".repeat(300);
    let b = P::new()
        .op(op::EMPTY_LIST)
        .put(0)
        .op(op::MARK)
        .s("hello")
        .put(1)
        .op(op::BINUNICODE)
        .raw(&(long.len() as u32).to_le_bytes())
        .raw(long.as_bytes())
        .get(1)
        .long1(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
        .binint(-7)
        .op(op::APPENDS)
        .stop();
    let show = |r: Result<Value, PickleError>| match r {
        Ok(v) => format!("{v:?}"),
        Err(e) => format!("error at {}: {}", e.offset, e.message),
    };
    let lens = (0..=b.len() as u64 + 2).chain([u64::MAX]);
    for max_total_bytes in lens {
        let limits = Limits {
            max_total_bytes,
            ..Limits::default()
        };
        let buffered = |bytes: &[u8], cap| {
            show(unpickle(
                BufReader::with_capacity(cap, bytes),
                &limits,
                &mut NoHook,
            ))
        };
        let whole = show(with_limits(&b, &limits));
        for cap in (1..=40).chain([299, 300, 301, 4096]) {
            let got = buffered(&b, cap);
            assert_eq!(got, whole, "buffers of {cap}, limit {max_total_bytes}");
        }
        // Cut short: the same truncation wherever the buffers end.
        let cut = &b[..b.len() * 2 / 3];
        let whole = show(with_limits(cut, &limits));
        for cap in [1, 7, 64] {
            let got = buffered(cut, cap);
            assert_eq!(got, whole, "cut, buffers of {cap}, limit {max_total_bytes}");
        }
    }
}
