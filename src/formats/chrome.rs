//! Chrome trace reader: Kineto / PyTorch-profiler traces and any Chrome trace
//! with `[memory]` events (formats.md B, C, D12–D21).
//!
//! Three passes over one buffer:
//!
//! 1. **Fast path.** `serde_json` streams `traceEvents` through a `visit_seq`
//!    into skeleton events (borrowed strings, only the fields memcut reads;
//!    everything else is skipped as `IgnoredAny`). Events are filtered while
//!    streaming: operator intervals (`cpu_op`, `python_function`,
//!    `user_annotation`, legacy `Operator`/`User`), `B`/`E` pairs, and
//!    `[memory]`/`[OutOfMemory]` instants are kept; the rest is dropped.
//! 2. **Token repair** ([`crate::formats::json_repair`], shared with the
//!    memory-timeline reader). When that fails, what Kineto is known to emit
//!    but JSON forbids (bare `NaN`/`inf`/`Infinity`/`N/A`, raw control
//!    characters in strings, trailing NUL padding) is rewritten and the fast
//!    path retried. Error positions are those of the original bytes.
//! 3. **Recovery.** When the buffer still does not parse (truncated file,
//!    trailing comma, a broken event), a string-aware scanner walks the
//!    top-level structure and parses every event on its own: complete events are
//!    kept, broken ones are skipped (resynchronising at the next `}, {`), and a
//!    truncated tail is reported as a warning instead of failing the file.
//!
//! Memory events are then attributed to the operator stack open at that
//! instant on the same (pid, tid) with one sort and a sweep per thread.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::formats::json_repair::{parse_or_repair, sanitize, JsonErrorAt, Repairs};
use crate::model::{
    Action, Annotation, DeviceTrace, Diagnostic, Event, Format, Frame, ReportedTotals, Sites, Trace,
};

/// Innermost operator frames kept per memory event.
const MAX_FRAMES: usize = 64;
/// The recovery pass gives up after this many malformed events.
const MAX_BROKEN_EVENTS: usize = 10_000;

/// Parses a Chrome trace (object form `{"traceEvents": [...]}` or bare array
/// form), already decompressed.
///
/// Returns [`Error::NoMemoryEvents`] when the trace holds no `[memory]` or
/// `[OutOfMemory]` event and [`Error::Json`] when nothing usable can be read.
pub fn parse_chrome_trace(bytes: &[u8]) -> Result<Trace> {
    let unparsed = match parse_or_repair(bytes, |buf, repairs| {
        parse_strict(buf).map(|col| build_trace(col, repairs.diagnostics()))
    }) {
        Ok(built) => return built,
        Err(unparsed) => unparsed,
    };
    let first_err = unparsed.error;
    let mut diagnostics = Vec::new();
    // Recovery works on the original bytes and repairs events one at a time,
    // so an unescaped quote cannot invert the string state of the whole file.
    let col = recover(bytes, &first_err, &mut diagnostics)?;
    let damage: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.partial_read)
        .map(|d| d.message.clone())
        .collect();
    match build_trace(col, diagnostics) {
        // Nothing usable before the damage: say so rather than blaming the
        // profiler settings.
        Err(Error::NoMemoryEvents) if !damage.is_empty() => Err(Error::Json(format!(
            "no memory event could be read: {}",
            damage.join("; ")
        ))),
        other => other,
    }
}

// ---------------------------------------------------------------------------
// Lenient skeleton values
// ---------------------------------------------------------------------------

/// A number that tolerates every JSON type (wrong types become `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) enum Num {
    #[default]
    None,
    I(i64),
    /// Integers above `i64::MAX` (serde_json falls back to `F` above `u64::MAX`).
    U(u64),
    F(f64),
}

impl Num {
    fn from_str(s: &str) -> Num {
        let s = s.trim();
        if let Ok(v) = s.parse::<i64>() {
            Num::I(v)
        } else if let Ok(v) = s.parse::<u64>() {
            Num::U(v)
        } else {
            match s.parse::<f64>() {
                Ok(v) if v.is_finite() => Num::F(v),
                _ => Num::None,
            }
        }
    }

    pub(crate) fn f64(self) -> Option<f64> {
        match self {
            Num::None => None,
            Num::I(v) => Some(v as f64),
            Num::U(v) => Some(v as f64),
            Num::F(v) => v.is_finite().then_some(v),
        }
    }

    pub(crate) fn i64(self) -> Option<i64> {
        match self {
            Num::None => None,
            Num::I(v) => Some(v),
            Num::U(_) => Some(i64::MAX),
            Num::F(v) => v.is_finite().then_some(v as i64),
        }
    }

    /// Non-negative integer value (`None` for negative, NaN or missing).
    pub(crate) fn u64(self) -> Option<u64> {
        match self {
            Num::I(v) if v >= 0 => Some(v as u64),
            Num::U(v) => Some(v),
            Num::F(v) if v.is_finite() && v >= 0.0 => Some(v as u64),
            _ => None,
        }
    }

    /// An address: like `u64`, but a negative int64 is read as its bit pattern.
    fn addr(self) -> Option<u64> {
        match self {
            Num::I(v) => Some(v as u64),
            other => other.u64(),
        }
    }

    /// Microseconds → integer nanoseconds (exact for integers and for the
    /// three-decimal floats Kineto writes).
    fn ns(self) -> Option<i64> {
        match self {
            Num::None => None,
            Num::I(v) => Some(v.saturating_mul(1000)),
            Num::U(_) => Some(i64::MAX),
            Num::F(v) => v.is_finite().then(|| (v * 1000.0).round() as i64),
        }
    }
}

struct NumVisitor;

impl<'de> Visitor<'de> for NumVisitor {
    type Value = Num;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Num, E> {
        Ok(Num::None)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Num, E> {
        Ok(Num::I(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Num, E> {
        Ok(i64::try_from(v).map_or(Num::U(v), Num::I))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Num, E> {
        Ok(Num::F(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Num, E> {
        Ok(Num::from_str(v))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Num, E> {
        Ok(Num::None)
    }
    fn visit_none<E: de::Error>(self) -> std::result::Result<Num, E> {
        Ok(Num::None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Num, D::Error> {
        d.deserialize_any(NumVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> std::result::Result<Num, A::Error> {
        drain_seq(a).map(|_| Num::None)
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> std::result::Result<Num, A::Error> {
        drain_map(a).map(|_| Num::None)
    }
}

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Num, D::Error> {
        d.deserialize_any(NumVisitor)
    }
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut a: A) -> std::result::Result<(), A::Error> {
    while a.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut a: A) -> std::result::Result<(), A::Error> {
    while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// A string that borrows when it can; numbers are stringified, anything else is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
struct LStr<'a>(Option<Cow<'a, str>>);

struct LStrVisitor;

impl<'de> Visitor<'de> for LStrVisitor {
    type Value = LStr<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> std::result::Result<LStr<'de>, E> {
        Ok(LStr(Some(Cow::Borrowed(v))))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<LStr<'de>, E> {
        Ok(LStr(Some(Cow::Owned(v.to_owned()))))
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<LStr<'de>, E> {
        Ok(LStr(Some(Cow::Owned(v))))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<LStr<'de>, E> {
        Ok(LStr(None))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<LStr<'de>, E> {
        Ok(LStr(Some(Cow::Owned(v.to_string()))))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<LStr<'de>, E> {
        Ok(LStr(Some(Cow::Owned(v.to_string()))))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<LStr<'de>, E> {
        Ok(LStr(Some(Cow::Owned(v.to_string()))))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<LStr<'de>, E> {
        Ok(LStr(None))
    }
    fn visit_none<E: de::Error>(self) -> std::result::Result<LStr<'de>, E> {
        Ok(LStr(None))
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> std::result::Result<LStr<'de>, D::Error> {
        d.deserialize_any(LStrVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> std::result::Result<LStr<'de>, A::Error> {
        drain_seq(a).map(|_| LStr(None))
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> std::result::Result<LStr<'de>, A::Error> {
        drain_map(a).map(|_| LStr(None))
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for LStr<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<LStr<'a>, D::Error> {
        d.deserialize_any(LStrVisitor)
    }
}

/// A `pid`/`tid`: integers and integer-looking strings compare equal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
enum Id<'a> {
    #[default]
    None,
    Int(i64),
    Str(Cow<'a, str>),
}

impl<'a> Id<'a> {
    fn from_cow(s: Cow<'a, str>) -> Id<'a> {
        match s.trim().parse::<i64>() {
            Ok(v) => Id::Int(v),
            Err(_) => Id::Str(s),
        }
    }
}

struct IdVisitor;

impl<'de> Visitor<'de> for IdVisitor {
    type Value = Id<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a pid or tid")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<Id<'de>, E> {
        Ok(Id::Int(v as i64))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Id<'de>, E> {
        Ok(Id::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Id<'de>, E> {
        Ok(i64::try_from(v).map_or_else(|_| Id::Str(Cow::Owned(v.to_string())), Id::Int))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Id<'de>, E> {
        if v.fract() == 0.0 && v.abs() < 9.0e15 {
            Ok(Id::Int(v as i64))
        } else {
            Ok(Id::Str(Cow::Owned(v.to_string())))
        }
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> std::result::Result<Id<'de>, E> {
        Ok(Id::from_cow(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Id<'de>, E> {
        Ok(Id::from_cow(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Id<'de>, E> {
        Ok(Id::from_cow(Cow::Owned(v)))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Id<'de>, E> {
        Ok(Id::None)
    }
    fn visit_none<E: de::Error>(self) -> std::result::Result<Id<'de>, E> {
        Ok(Id::None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Id<'de>, D::Error> {
        d.deserialize_any(IdVisitor)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> std::result::Result<Id<'de>, A::Error> {
        drain_seq(a).map(|_| Id::None)
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> std::result::Result<Id<'de>, A::Error> {
        drain_map(a).map(|_| Id::None)
    }
}

impl<'de> Deserialize<'de> for Id<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Id<'de>, D::Error> {
        d.deserialize_any(IdVisitor)
    }
}

/// Declares a field-name enum whose identifier visitor maps known keys and
/// sends everything else to `Other`.
macro_rules! key_enum {
    ($name:ident { $($key:literal => $var:ident),* $(,)? }) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum $name { $($var,)* Other }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<$name, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a key")
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<$name, E> {
                        Ok(match v { $($key => $name::$var,)* _ => $name::Other })
                    }
                }
                d.deserialize_identifier(V)
            }
        }
    };
}

key_enum!(EvKey {
    "ph" => Ph, "cat" => Cat, "name" => Name, "pid" => Pid, "tid" => Tid,
    "ts" => Ts, "dur" => Dur, "args" => Args,
});

key_enum!(ArgKey {
    "Device Type" => DeviceType, "Device Id" => DeviceId, "Bytes" => Bytes, "Addr" => Addr,
    "Total Allocated" => TotalAllocated, "Total Reserved" => TotalReserved, "Ev Idx" => EvIdx,
});

/// The `args` of a `[memory]` event (other events' args are skimmed the same way).
#[derive(Debug, Clone, Copy, Default)]
struct MemArgs {
    device_type: Num,
    device_id: Num,
    bytes: Num,
    addr: Num,
    total_allocated: Num,
    total_reserved: Num,
    ev_idx: Num,
}

struct MemArgsVisitor;

impl<'de> Visitor<'de> for MemArgsVisitor {
    type Value = MemArgs;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an args object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<MemArgs, A::Error> {
        let mut a = MemArgs::default();
        while let Some(k) = map.next_key::<ArgKey>()? {
            let slot = match k {
                ArgKey::DeviceType => &mut a.device_type,
                ArgKey::DeviceId => &mut a.device_id,
                ArgKey::Bytes => &mut a.bytes,
                ArgKey::Addr => &mut a.addr,
                ArgKey::TotalAllocated => &mut a.total_allocated,
                ArgKey::TotalReserved => &mut a.total_reserved,
                ArgKey::EvIdx => &mut a.ev_idx,
                ArgKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value()?;
        }
        Ok(a)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> std::result::Result<MemArgs, A::Error> {
        drain_seq(a).map(|_| MemArgs::default())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<MemArgs, E> {
        Ok(MemArgs::default())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<MemArgs, E> {
        Ok(MemArgs::default())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<MemArgs, E> {
        Ok(MemArgs::default())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<MemArgs, E> {
        Ok(MemArgs::default())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<MemArgs, E> {
        Ok(MemArgs::default())
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<MemArgs, E> {
        Ok(MemArgs::default())
    }
}

impl<'de> Deserialize<'de> for MemArgs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<MemArgs, D::Error> {
        d.deserialize_any(MemArgsVisitor)
    }
}

/// The fields of one trace event that memcut reads.
#[derive(Debug, Default)]
struct RawEvent<'a> {
    ph: LStr<'a>,
    cat: LStr<'a>,
    name: LStr<'a>,
    pid: Id<'a>,
    tid: Id<'a>,
    ts: Num,
    dur: Num,
    args: MemArgs,
}

impl RawEvent<'_> {
    fn into_owned(self) -> RawEvent<'static> {
        let own = |s: LStr<'_>| LStr(s.0.map(|c| Cow::Owned(c.into_owned())));
        let id = |i: Id<'_>| match i {
            Id::None => Id::None,
            Id::Int(v) => Id::Int(v),
            Id::Str(c) => Id::Str(Cow::Owned(c.into_owned())),
        };
        RawEvent {
            ph: own(self.ph),
            cat: own(self.cat),
            name: own(self.name),
            pid: id(self.pid),
            tid: id(self.tid),
            ts: self.ts,
            dur: self.dur,
            args: self.args,
        }
    }
}

/// Deserializes one element of `traceEvents`; non-objects become `None`.
struct EventSeed;

impl<'de> DeserializeSeed<'de> for EventSeed {
    type Value = Option<RawEvent<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventSeed {
    type Value = Option<RawEvent<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a trace event")
    }
    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut ev = RawEvent::default();
        while let Some(k) = map.next_key::<EvKey>()? {
            match k {
                EvKey::Ph => ev.ph = map.next_value()?,
                EvKey::Cat => ev.cat = map.next_value()?,
                EvKey::Name => ev.name = map.next_value()?,
                EvKey::Pid => ev.pid = map.next_value()?,
                EvKey::Tid => ev.tid = map.next_value()?,
                EvKey::Ts => ev.ts = map.next_value()?,
                EvKey::Dur => ev.dur = map.next_value()?,
                EvKey::Args => ev.args = map.next_value()?,
                EvKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(ev))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> std::result::Result<Self::Value, A::Error> {
        drain_seq(a).map(|_| None)
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(None)
    }
}

/// One entry of `deviceProperties`.
#[derive(Debug, Default, Deserialize)]
struct DeviceProp<'a> {
    #[serde(default)]
    id: Num,
    #[serde(default, borrow)]
    name: LStr<'a>,
    #[serde(default, rename = "totalGlobalMem")]
    total_global_mem: Num,
}

// ---------------------------------------------------------------------------
// Collection (filtering while streaming)
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    CpuOp = 0,
    PythonFunction = 1,
    UserAnnotation = 2,
}

const KIND_NAMES: [&str; 3] = ["cpu_op", "python_function", "user_annotation"];

/// Host categories that open an operator frame (case-insensitive; `cat` may be
/// a comma-separated list). Legacy `Operator`/`User` map to the current names.
fn op_kind(cat: Option<&str>) -> Option<OpKind> {
    let cat = cat?;
    cat.split(',').find_map(|part| {
        let part = part.trim();
        if part.eq_ignore_ascii_case("cpu_op") || part.eq_ignore_ascii_case("operator") {
            Some(OpKind::CpuOp)
        } else if part.eq_ignore_ascii_case("python_function") {
            Some(OpKind::PythonFunction)
        } else if part.eq_ignore_ascii_case("user_annotation") || part.eq_ignore_ascii_case("user")
        {
            Some(OpKind::UserAnnotation)
        } else {
            None
        }
    })
}

/// An operator interval `[start, end)` in integer nanoseconds.
#[derive(Debug, Clone)]
struct OpRec<'a> {
    thread: u32,
    start: i64,
    end: i64,
    kind: OpKind,
    name: Cow<'a, str>,
}

#[derive(Debug, Clone)]
struct BeRec<'a> {
    thread: u32,
    ts: i64,
    order: u32,
    begin: bool,
    kind: Option<OpKind>,
    name: Cow<'a, str>,
}

#[derive(Debug, Clone, Copy)]
struct MemRec {
    thread: u32,
    order: u32,
    ts_ns: i64,
    ts_us: f64,
    oom: bool,
    bytes: i64,
    addr: Option<u64>,
    device: (Option<i64>, Option<i64>),
    allocated: Option<u64>,
    reserved: Option<u64>,
    site: u32,
}

/// (thread, ts ns, Addr, Bytes, Ev Idx, Device Type, Device Id) of a memory event.
type DedupeKey = (u32, i64, Option<u64>, i64, i64, Option<i64>, Option<i64>);

/// Everything kept from one pass over the events.
#[derive(Default)]
struct Collector<'a> {
    threads: HashMap<(Id<'a>, Id<'a>), u32>,
    last_thread: Option<((Id<'a>, Id<'a>), u32)>,
    ops: Vec<OpRec<'a>>,
    be: Vec<BeRec<'a>>,
    mems: Vec<MemRec>,
    dedupe: HashSet<DedupeKey>,
    device_props: Vec<(Option<i64>, Option<u64>, String)>,
    base_time_ns: Option<i64>,
    amd_hint: bool,
    saw_trace_events: bool,
    events_seen: u64,
    duplicates: usize,
    mem_without_ts: usize,
    mem_without_bytes: usize,
}

impl<'a> Collector<'a> {
    fn thread(&mut self, pid: Id<'a>, tid: Id<'a>) -> u32 {
        if let Some((key, id)) = &self.last_thread {
            if key.0 == pid && key.1 == tid {
                return *id;
            }
        }
        let n = self.threads.len() as u32;
        let key = (pid, tid);
        let id = *self.threads.entry(key.clone()).or_insert(n);
        self.last_thread = Some((key, id));
        id
    }

    fn push(&mut self, ev: RawEvent<'a>) {
        let order = self.events_seen.min(u32::MAX as u64) as u32;
        self.events_seen += 1;
        let RawEvent {
            ph,
            cat,
            name,
            pid,
            tid,
            ts,
            dur,
            args,
        } = ev;
        let ph = ph.0.as_deref().unwrap_or("");
        match ph {
            "X" => {
                let Some(kind) = op_kind(cat.0.as_deref()) else {
                    return;
                };
                let Some(start) = ts.ns() else { return };
                let dur = dur.ns().unwrap_or(0).max(0);
                let thread = self.thread(pid, tid);
                self.ops.push(OpRec {
                    thread,
                    start,
                    end: start.saturating_add(dur),
                    kind,
                    name: name.0.unwrap_or_default(),
                });
            }
            "B" | "E" => {
                let Some(t) = ts.ns() else { return };
                let thread = self.thread(pid, tid);
                self.be.push(BeRec {
                    thread,
                    ts: t,
                    order,
                    begin: ph == "B",
                    kind: op_kind(cat.0.as_deref()),
                    name: name.0.unwrap_or_default(),
                });
            }
            "M" => {}
            _ => {
                let oom = match name.0.as_deref() {
                    Some("[memory]") => false,
                    Some("[OutOfMemory]") => true,
                    _ => return,
                };
                let (Some(ts_ns), Some(ts_us)) = (ts.ns(), ts.f64()) else {
                    self.mem_without_ts += 1;
                    return;
                };
                let bytes = match args.bytes.i64() {
                    Some(b) if b != 0 || oom => b,
                    _ => {
                        self.mem_without_bytes += 1;
                        return;
                    }
                };
                let thread = self.thread(pid, tid);
                let device = (args.device_type.i64(), args.device_id.i64());
                let addr = args.addr.addr();
                if let Some(idx) = args.ev_idx.i64() {
                    // Only events that carry `Ev Idx` are deduplicated: without
                    // it, two equal allocations in the same microsecond are
                    // legitimate (2021 schema, integer µs timestamps).
                    let key = (thread, ts_ns, addr, bytes, idx, device.0, device.1);
                    if !self.dedupe.insert(key) {
                        self.duplicates += 1;
                        return;
                    }
                }
                self.mems.push(MemRec {
                    thread,
                    order,
                    ts_ns,
                    ts_us,
                    oom,
                    bytes,
                    addr,
                    device,
                    allocated: args.total_allocated.u64(),
                    reserved: args.total_reserved.u64(),
                    site: 0,
                });
            }
        }
    }

    fn set_device_props(&mut self, props: Vec<DeviceProp<'_>>) {
        self.device_props = props
            .into_iter()
            .map(|p| {
                let name = p.name.0.map(Cow::into_owned).unwrap_or_default();
                (p.id.i64(), p.total_global_mem.u64(), name)
            })
            .collect();
    }

    /// Top-level keys that only ROCm builds of Kineto write.
    fn note_top_key(&mut self, key: &str) {
        if key.starts_with("roctracer") || key.starts_with("hip_") {
            self.amd_hint = true;
        }
    }
}

key_enum!(TopKey {
    "traceEvents" => TraceEvents, "deviceProperties" => DeviceProperties,
    "baseTimeNanoseconds" => BaseTime,
});

/// Top-level key: known ones, plus the raw text for ROCm hints.
struct TopKeySeen<'a>(TopKey, Cow<'a, str>);

impl<'de> Deserialize<'de> for TopKeySeen<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(d)?;
        let k = match s.as_ref() {
            "traceEvents" => TopKey::TraceEvents,
            "deviceProperties" => TopKey::DeviceProperties,
            "baseTimeNanoseconds" => TopKey::BaseTime,
            _ => TopKey::Other,
        };
        Ok(TopKeySeen(k, s))
    }
}

/// Streams the top level (object or array form) into a [`Collector`].
struct TopSeed<'c, 'a>(&'c mut Collector<'a>);

impl<'de, 'c> DeserializeSeed<'de> for TopSeed<'c, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'c> Visitor<'de> for TopSeed<'c, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Chrome trace object or array")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        while let Some(TopKeySeen(key, raw)) = map.next_key::<TopKeySeen<'de>>()? {
            match key {
                TopKey::TraceEvents => map.next_value_seed(EventsSeed(&mut *self.0))?,
                TopKey::DeviceProperties => {
                    let props: Option<Vec<DeviceProp<'de>>> = map.next_value()?;
                    self.0.set_device_props(props.unwrap_or_default());
                }
                TopKey::BaseTime => self.0.base_time_ns = map.next_value::<Num>()?.i64(),
                TopKey::Other => {
                    self.0.note_top_key(&raw);
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<(), A::Error> {
        EventsSeed(self.0).visit_seq(seq)
    }
}

/// Streams `traceEvents` element by element, keeping only what is needed.
struct EventsSeed<'c, 'a>(&'c mut Collector<'a>);

impl<'de, 'c> DeserializeSeed<'de> for EventsSeed<'c, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'c> Visitor<'de> for EventsSeed<'c, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        self.0.saw_trace_events = true;
        while let Some(ev) = seq.next_element_seed(EventSeed)? {
            if let Some(ev) = ev {
                self.0.push(ev);
            }
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, a: A) -> std::result::Result<(), A::Error> {
        drain_map(a)
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<(), E> {
        Ok(())
    }
}

/// Fast path: the whole buffer is valid JSON.
fn parse_strict(buf: &[u8]) -> std::result::Result<Collector<'_>, serde_json::Error> {
    let mut col = Collector::default();
    let mut de = serde_json::Deserializer::from_slice(buf);
    TopSeed(&mut col).deserialize(&mut de)?;
    de.end()?;
    Ok(col)
}

// ---------------------------------------------------------------------------
// Recovery: a string-aware scanner over broken or truncated JSON
// ---------------------------------------------------------------------------

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n' | 0 | 0xEF | 0xBB | 0xBF) {
        i += 1;
    }
    i
}

/// `start` is at `"`; returns the index after the closing quote.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    None
}

/// The end (exclusive) of the JSON value starting at `start`; `None` at end of input.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            while i < b.len() {
                match b[i] {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let mut i = start;
            while i < b.len() && !matches!(b[i], b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')
            {
                i += 1;
            }
            (i < b.len()).then_some(i)
        }
    }
}

/// The next event boundary `}` ws `,` ws `{` after `from`; returns the `{`.
fn resync(b: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < b.len() {
        if b[i] == b'}' {
            let j = skip_ws(b, i + 1);
            if j < b.len() && b[j] == b',' {
                let k = skip_ws(b, j + 1);
                if k < b.len() && b[k] == b'{' {
                    return Some(k);
                }
            }
        }
        i += 1;
    }
    None
}

/// How the recovery pass left the events array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArrayEnd {
    /// Saw the closing `]`.
    Closed { trailing_comma: bool },
    /// Input ended after a complete event (no closing `]`).
    NoBracket,
    /// Input ended inside an event.
    HalfEvent,
    /// Recovery stopped early: too many malformed events, or re-scanning
    /// broken events cost more than [`RESCAN_BUDGET`] allows.
    GaveUp,
}

/// Bytes the recovery pass may scan, as a multiple of the input size (plus
/// 256 MiB). Without a bound, a file of events whose brackets never balance
/// (or whose strings a stray quote inverts) costs O(n²): each is scanned to
/// the end of the input.
const RESCAN_BUDGET: usize = 16;
/// Longest single event the recovery pass looks for the end of; beyond
/// this an event is treated as broken and skipped to the next boundary.
const MAX_EVENT_BYTES: usize = 4 << 20;

#[derive(Default)]
struct RecoveryStats {
    complete: usize,
    broken: usize,
    first_broken: Option<String>,
    /// Repairs made inside single events.
    repairs: Repairs,
    /// Bytes scanned looking for event ends.
    scanned: usize,
}

impl RecoveryStats {
    fn note_broken(&mut self, message: impl FnOnce() -> String) {
        self.broken += 1;
        if self.first_broken.is_none() {
            self.first_broken = Some(message());
        }
    }
}

/// Parses one event on its own; on failure, retries after repairing tokens and
/// control characters in that event only.
fn parse_one_event<'a>(
    slice: &'a [u8],
    start: usize,
    stats: &mut RecoveryStats,
) -> std::result::Result<Option<RawEvent<'a>>, String> {
    let mut de = serde_json::Deserializer::from_slice(slice);
    let err = match EventSeed.deserialize(&mut de) {
        Ok(ev) => return Ok(ev),
        Err(e) => JsonErrorAt::new(&e, slice, start).to_string(),
    };
    let fixed = sanitize(slice);
    if fixed.changed() {
        let mut de = serde_json::Deserializer::from_slice(&fixed.bytes);
        if let Ok(ev) = EventSeed.deserialize(&mut de) {
            stats.repairs.add(fixed.repairs);
            return Ok(ev.map(RawEvent::into_owned));
        }
    }
    Err(err)
}

/// Parses the events of an array whose `[` is just before `pos`.
fn recover_events<'a>(
    b: &'a [u8],
    mut pos: usize,
    col: &mut Collector<'a>,
    stats: &mut RecoveryStats,
) -> (usize, ArrayEnd) {
    col.saw_trace_events = true;
    let mut after_comma = false;
    loop {
        pos = skip_ws(b, pos);
        if pos >= b.len() {
            return (pos, ArrayEnd::NoBracket);
        }
        match b[pos] {
            b']' => {
                let trailing_comma = after_comma;
                return (pos + 1, ArrayEnd::Closed { trailing_comma });
            }
            b',' => {
                after_comma = true;
                pos += 1;
                continue;
            }
            _ => after_comma = false,
        }
        let budget = b
            .len()
            .saturating_mul(RESCAN_BUDGET)
            .saturating_add(256 << 20);
        if stats.broken > MAX_BROKEN_EVENTS || stats.scanned > budget {
            return (pos, ArrayEnd::GaveUp);
        }
        let start = pos;
        let window = &b[..b.len().min(start.saturating_add(MAX_EVENT_BYTES))];
        let end = value_end(window, start);
        stats.scanned += end.unwrap_or(window.len()) - start;
        match end {
            Some(end) => match parse_one_event(&b[start..end], start, stats) {
                Ok(ev) => {
                    stats.complete += 1;
                    if let Some(ev) = ev {
                        col.push(ev);
                    }
                    pos = end;
                }
                Err(message) => {
                    stats.note_broken(|| message);
                    match resync(b, start + 1) {
                        Some(next) => pos = next,
                        None => return (start, ArrayEnd::HalfEvent),
                    }
                }
            },
            None => match resync(b, start + 1) {
                // A quote inside this event broke the scan, but a later event
                // boundary exists: skip this event.
                Some(next) if b[start] == b'{' => {
                    stats.note_broken(|| format!("unbalanced event at byte {start}"));
                    pos = next;
                }
                _ => return (start, ArrayEnd::HalfEvent),
            },
        }
    }
}

/// The recovery pass; `first_err` is the fast path's error, reported when
/// nothing can be recovered.
fn recover<'a>(
    b: &'a [u8],
    first_err: &JsonErrorAt,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<Collector<'a>> {
    let mut col = Collector::default();
    let mut stats = RecoveryStats::default();
    let total = b.len();
    let fail = || Err(Error::Json(first_err.to_string()));

    let start = skip_ws(b, 0);
    if start >= total {
        return Err(Error::Json(format!("empty input at byte {start}")));
    }
    let mut array_end = None;
    let mut object_truncated = false;
    match b[start] {
        b'[' => array_end = Some(recover_events(b, start + 1, &mut col, &mut stats)),
        b'{' => {
            let mut pos = start + 1;
            loop {
                pos = skip_ws(b, pos);
                if pos >= total {
                    object_truncated = true;
                    break;
                }
                match b[pos] {
                    b'}' => break,
                    b',' => {
                        pos += 1;
                        continue;
                    }
                    b'"' => {}
                    _ if col.saw_trace_events => break,
                    _ => return fail(),
                }
                let Some(key_end) = string_end(b, pos) else {
                    object_truncated = true;
                    break;
                };
                let key = &b[pos + 1..key_end - 1];
                pos = skip_ws(b, key_end);
                if pos >= total {
                    object_truncated = true;
                    break;
                }
                if b[pos] != b':' {
                    if col.saw_trace_events {
                        break;
                    }
                    return fail();
                }
                pos = skip_ws(b, pos + 1);
                if pos >= total {
                    object_truncated = true;
                    break;
                }
                if key == b"traceEvents" && b[pos] == b'[' {
                    let (p, end) = recover_events(b, pos + 1, &mut col, &mut stats);
                    array_end = Some((p, end));
                    pos = p;
                    if matches!(end, ArrayEnd::Closed { .. }) {
                        continue;
                    }
                    break;
                }
                let Some(end) = value_end(b, pos) else {
                    object_truncated = true;
                    break;
                };
                let slice = &b[pos..end];
                match key {
                    b"deviceProperties" => {
                        let fixed = sanitize(slice);
                        if let Ok(Some(props)) =
                            serde_json::from_slice::<Option<Vec<DeviceProp<'_>>>>(&fixed.bytes)
                        {
                            col.set_device_props(props);
                        }
                    }
                    b"baseTimeNanoseconds" => {
                        col.base_time_ns =
                            serde_json::from_slice::<Num>(slice).ok().and_then(Num::i64);
                    }
                    _ => {
                        if let Ok(k) = std::str::from_utf8(key) {
                            col.note_top_key(k);
                        }
                    }
                }
                pos = end;
            }
            if !col.saw_trace_events {
                if object_truncated {
                    return Err(Error::Json(format!(
                        "input ends before `traceEvents` ({first_err})"
                    )));
                }
                return Ok(col); // a complete object without traceEvents
            }
        }
        _ => return fail(),
    }

    diagnostics.extend(stats.repairs.diagnostics());
    match array_end {
        Some((_, ArrayEnd::Closed { trailing_comma })) => {
            if trailing_comma {
                diagnostics.push(Diagnostic::info(
                    "the events array ends with a trailing comma (accepted)",
                ));
            }
            if object_truncated {
                diagnostics.push(Diagnostic::partial(format!(
                    "input is truncated after `traceEvents` ({total} bytes); all {} events were loaded",
                    stats.complete
                )));
            }
        }
        Some((_, ArrayEnd::NoBracket)) => diagnostics.push(Diagnostic::partial(format!(
            "input is truncated: the events array has no closing `]`; loaded {} complete events ({total} bytes)",
            stats.complete
        ))),
        Some((read, ArrayEnd::GaveUp)) => diagnostics.push(Diagnostic::partial(format!(
            "input is damaged: stopped reading at byte {read} of {total} after {} malformed events; loaded {} complete events before that",
            stats.broken, stats.complete
        ))),
        Some((read, ArrayEnd::HalfEvent)) => diagnostics.push(Diagnostic::partial(format!(
            "input is truncated: loaded {} complete events from the first {read} of {total} bytes; the last event is incomplete",
            stats.complete
        ))),
        None => {}
    }
    if stats.broken > 0 {
        diagnostics.push(Diagnostic::partial(format!(
            "skipped {} malformed event(s) (first: {})",
            stats.broken,
            stats.first_broken.as_deref().unwrap_or("?")
        )));
    }
    Ok(col)
}

// ---------------------------------------------------------------------------
// Building the trace
// ---------------------------------------------------------------------------

/// `c10::DeviceType` names as PyTorch prints them (formats.md B4).
const DEVICE_TYPES: [&str; 21] = [
    "cpu",
    "cuda",
    "mkldnn",
    "opengl",
    "opencl",
    "ideep",
    "hip",
    "fpga",
    "maia",
    "xla",
    "vulkan",
    "metal",
    "xpu",
    "mps",
    "meta",
    "hpu",
    "ve",
    "lazy",
    "ipu",
    "mtia",
    "privateuseone",
];

/// Device name and sort key: GPUs (cuda, hip) first by index, then other
/// accelerators, then the CPU.
fn device_label(device_type: Option<i64>, device_id: Option<i64>) -> (String, (u8, i64, i64)) {
    let index = device_id.unwrap_or(0);
    match device_type {
        Some(0) => ("cpu".to_string(), (2, 0, 0)),
        Some(t) => {
            let base = usize::try_from(t)
                .ok()
                .and_then(|i| DEVICE_TYPES.get(i))
                .map_or_else(|| format!("type{t}"), |s| s.to_string());
            let sort = if t == 1 || t == 6 {
                (0, index, t)
            } else {
                (1, t, index)
            };
            (format!("{base}:{index}"), sort)
        }
        None => (format!("unknown:{index}"), (1, i64::MAX, index)),
    }
}

fn looks_amd(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["amd", "instinct", "radeon"]
        .iter()
        .any(|w| lower.contains(w))
}

/// Turns `B`/`E` pairs into operator intervals (per thread, in time order).
fn pair_begin_end<'a>(col: &mut Collector<'a>) -> usize {
    let mut be = std::mem::take(&mut col.be);
    if be.is_empty() {
        return 0;
    }
    be.sort_by_key(|r| (r.thread, r.ts, r.order));
    let mut unclosed = 0;
    let mut stack: Vec<BeRec<'a>> = Vec::new();
    let mut thread = u32::MAX;
    let flush = |stack: &mut Vec<BeRec<'a>>, ops: &mut Vec<OpRec<'a>>, unclosed: &mut usize| {
        for b in stack.drain(..) {
            if let Some(kind) = b.kind {
                *unclosed += 1;
                ops.push(OpRec {
                    thread: b.thread,
                    start: b.ts,
                    end: i64::MAX,
                    kind,
                    name: b.name,
                });
            }
        }
    };
    for r in be {
        if r.thread != thread {
            flush(&mut stack, &mut col.ops, &mut unclosed);
            thread = r.thread;
        }
        if r.begin {
            stack.push(r);
        } else if let Some(b) = stack.pop() {
            if let Some(kind) = b.kind {
                col.ops.push(OpRec {
                    thread: b.thread,
                    start: b.ts,
                    end: r.ts.max(b.ts),
                    kind,
                    name: b.name,
                });
            }
        }
    }
    flush(&mut stack, &mut col.ops, &mut unclosed);
    unclosed
}

/// Assigns every memory event the site of the operator stack open at its
/// instant on its thread: one sort of the operators by (thread, start, −end),
/// one sort of the memory events by (thread, ts), and a sweep with a stack.
/// Returns (events outside any operator, of which on threads without operators).
fn attribute(ops: &mut [OpRec<'_>], mems: &mut [MemRec], sites: &mut Sites) -> (usize, usize) {
    ops.sort_by_key(|o| (o.thread, o.start, Reverse(o.end)));
    let kind_ids = KIND_NAMES.map(|k| sites.intern_str(k));
    let mut name_ids = vec![u32::MAX; ops.len()];
    let mut order: Vec<u32> = (0..mems.len() as u32).collect();
    order.sort_by_key(|&i| {
        let m = &mems[i as usize];
        (m.thread, m.ts_ns, m.order)
    });

    let (mut outside, mut no_ops) = (0usize, 0usize);
    let mut next_op = 0usize;
    let mut stack: Vec<usize> = Vec::new();
    let mut frames: Vec<Frame> = Vec::with_capacity(MAX_FRAMES);
    let mut thread = u32::MAX;
    let mut thread_has_ops = false;
    for &i in &order {
        let m = &mems[i as usize];
        let t = m.ts_ns;
        if m.thread != thread {
            thread = m.thread;
            stack.clear();
            while next_op < ops.len() && ops[next_op].thread < thread {
                next_op += 1;
            }
            thread_has_ops = next_op < ops.len() && ops[next_op].thread == thread;
        }
        while next_op < ops.len() && ops[next_op].thread == thread && ops[next_op].start <= t {
            let s = ops[next_op].start;
            while stack.last().is_some_and(|&k| ops[k].end <= s) {
                stack.pop();
            }
            stack.push(next_op);
            next_op += 1;
        }
        while stack.last().is_some_and(|&k| ops[k].end <= t) {
            stack.pop();
        }
        if stack.len() > 4 * MAX_FRAMES {
            // Badly nested intervals can bury closed ones; drop them.
            stack.retain(|&k| ops[k].end > t);
        }
        frames.clear();
        for &k in stack.iter().rev() {
            if ops[k].end <= t {
                continue;
            }
            if frames.len() == MAX_FRAMES {
                break;
            }
            if name_ids[k] == u32::MAX {
                name_ids[k] = sites.intern_str(&ops[k].name);
            }
            let f = Frame {
                filename: kind_ids[ops[k].kind as usize],
                line: 0,
                name: name_ids[k],
            };
            if frames.last() != Some(&f) {
                frames.push(f);
            }
        }
        let site = if frames.is_empty() {
            outside += 1;
            if !thread_has_ops {
                no_ops += 1;
            }
            0
        } else {
            sites.intern_site(&frames)
        };
        mems[i as usize].site = site;
    }
    (outside, no_ops)
}

fn build_trace(mut col: Collector<'_>, mut diagnostics: Vec<Diagnostic>) -> Result<Trace> {
    if col.mems.is_empty() {
        return Err(Error::NoMemoryEvents);
    }
    let mut trace = Trace::new(Format::ChromeTrace);
    let unclosed = pair_begin_end(&mut col);
    if unclosed > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "{unclosed} `B` event(s) have no matching `E`; they are treated as open to the end of the trace"
        )));
    }

    // Annotations: user_annotation ranges and ProfilerStep#N under any category.
    let last_ts = col.mems.iter().map(|m| m.ts_ns).max().unwrap_or(0);
    let last_op = col
        .ops
        .iter()
        .map(|o| if o.end == i64::MAX { o.start } else { o.end })
        .max()
        .unwrap_or(0);
    let trace_end = last_ts.max(last_op);
    let mut annotations: Vec<Annotation> = col
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::UserAnnotation || o.name.starts_with("ProfilerStep#"))
        .map(|o| Annotation {
            name: o.name.to_string(),
            device: None,
            start_us: o.start as f64 / 1000.0,
            end_us: if o.end == i64::MAX { trace_end } else { o.end } as f64 / 1000.0,
        })
        .collect();
    annotations.sort_by(|a, b| {
        a.start_us
            .total_cmp(&b.start_us)
            .then(b.end_us.total_cmp(&a.end_us))
            .then_with(|| a.name.cmp(&b.name))
    });
    annotations.dedup();
    trace.annotations = annotations;

    let total_mem = col.mems.len();
    let (outside, no_ops) = attribute(&mut col.ops, &mut col.mems, &mut trace.sites);

    // Devices.
    let mut keys: Vec<(Option<i64>, Option<i64>)> = col.mems.iter().map(|m| m.device).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut labelled: Vec<_> = keys
        .into_iter()
        .map(|k| {
            let (name, sort) = device_label(k.0, k.1);
            (sort, name, k)
        })
        .collect();
    labelled.sort();
    let amd_names = col.device_props.iter().any(|(_, _, n)| looks_amd(n));
    let mut by_device: HashMap<(Option<i64>, Option<i64>), usize> = HashMap::new();
    // Keys that name the same device (the CPU under any `Device Id`, or a
    // missing id read as 0) share one device: two devices may not share a name.
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (_, name, key) in labelled.iter() {
        if let Some(&i) = by_name.get(name.as_str()) {
            by_device.insert(*key, i);
            continue;
        }
        let i = trace.devices.len();
        by_name.insert(name, i);
        by_device.insert(*key, i);
        let capacity = match key.0 {
            Some(0) => None,
            _ => key.1.and_then(|id| {
                col.device_props
                    .iter()
                    .find(|(pid, _, _)| *pid == Some(id))
                    .and_then(|(_, mem, _)| *mem)
            }),
        };
        trace.devices.push(DeviceTrace {
            device: name.clone(),
            capacity_bytes: capacity,
            ..DeviceTrace::default()
        });
    }
    let mut mems = std::mem::take(&mut col.mems);
    mems.sort_by_key(|m| (by_device[&m.device], m.ts_ns, m.order));
    let mut without_addr = 0usize;
    for m in &mems {
        let d = &mut trace.devices[by_device[&m.device]];
        let (action, size) = if m.oom {
            (Action::Oom, m.bytes.unsigned_abs())
        } else if m.bytes > 0 {
            (Action::Alloc, m.bytes as u64)
        } else {
            (Action::FreeCompleted, m.bytes.unsigned_abs())
        };
        if m.addr.is_none() && !m.oom {
            without_addr += 1;
        }
        d.events.push(Event {
            action,
            given: None,
            site: m.site,
            addr: m.addr.unwrap_or(0),
            size,
            ts_us: m.ts_us,
        });
        d.reported.push(ReportedTotals {
            allocated: m.allocated,
            reserved: m.reserved,
        });
    }
    let mut devices_without_totals = Vec::new();
    for d in &mut trace.devices {
        if d.reported
            .iter()
            .all(|r| r.allocated.is_none() && r.reserved.is_none())
        {
            d.reported.clear();
            devices_without_totals.push(d.device.clone());
        }
    }

    // Diagnostics.
    if labelled.iter().any(|(_, _, k)| k.0 == Some(1)) && (col.amd_hint || amd_names) {
        diagnostics.push(Diagnostic::info(
            "ROCm device (PyTorch reports HIP as cuda): `cuda:N` devices here are AMD GPUs",
        ));
    }
    if labelled.iter().any(|(_, _, k)| k.0.is_none()) {
        diagnostics.push(Diagnostic::info(
            "some memory events carry no `Device Type`; their device is shown as `unknown:N`",
        ));
    }
    if without_addr > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "{without_addr} of {total_mem} memory events carry no `Addr` (trace schema before PyTorch 1.10): \
             frees cannot be matched to their allocations, so per-allocation attribution is limited"
        )));
    }
    if !devices_without_totals.is_empty() {
        diagnostics.push(Diagnostic::info(format!(
            "no `Total Allocated`/`Total Reserved` on memory events of {}: the allocator's own totals cannot be cross-checked",
            devices_without_totals.join(", ")
        )));
    }
    if col.duplicates > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "removed {} duplicate memory event(s) (same pid, tid, ts, Addr, Bytes, Ev Idx)",
            col.duplicates
        )));
    }
    if outside > 0 {
        let detail = if no_ops > 0 {
            format!(", {no_ops} of them on threads without operators")
        } else {
            String::new()
        };
        diagnostics.push(Diagnostic::info(format!(
            "{outside} of {total_mem} memory events happen outside any operator{detail}; they have no operator stack"
        )));
    }
    if col.mem_without_ts > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "ignored {} memory event(s) without a usable `ts`",
            col.mem_without_ts
        )));
    }
    if col.mem_without_bytes > 0 {
        diagnostics.push(Diagnostic::info(format!(
            "ignored {} memory event(s) with zero or missing `Bytes`",
            col.mem_without_bytes
        )));
    }
    if let Some(base) = col.base_time_ns {
        diagnostics.push(Diagnostic::info(format!(
            "timestamps are relative to baseTimeNanoseconds = {base} (epoch ns)"
        )));
    }
    trace.diagnostics = diagnostics;
    Ok(trace)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::Level;

    fn mem(tid: i64, ts: f64, bytes: i64, addr: u64, dtype: i64, did: i64) -> String {
        format!(
            r#"{{"ph":"i","cat":"cpu_instant_event","s":"t","name":"[memory]","pid":1,"tid":{tid},"ts":{ts},"args":{{"Total Reserved":4096,"Total Allocated":{},"Bytes":{bytes},"Device Id":{did},"Device Type":{dtype},"Addr":{addr}}}}}"#,
            bytes.max(0)
        )
    }

    fn op(tid: i64, cat: &str, name: &str, ts: f64, dur: f64) -> String {
        format!(
            r#"{{"ph":"X","cat":"{cat}","name":"{name}","pid":1,"tid":{tid},"ts":{ts},"dur":{dur},"args":{{"External id":7}}}}"#
        )
    }

    fn obj(events: &[String]) -> String {
        format!(
            r#"{{"schemaVersion":1,"deviceProperties":[{{"id":0,"name":"NVIDIA H100","totalGlobalMem":85899345920}}],"traceEvents":[{}],"traceName":"x"}}"#,
            events.join(",\n")
        )
    }

    fn parse(s: &str) -> Trace {
        match parse_chrome_trace(s.as_bytes()) {
            Ok(t) => t,
            Err(e) => panic!("parse failed: {e}\n{s}"),
        }
    }

    fn site_names(t: &Trace, site: u32) -> Vec<String> {
        t.sites
            .frames(site)
            .iter()
            .map(|f| format!("{}:{}", t.sites.str(f.filename), t.sites.str(f.name)))
            .collect()
    }

    fn has_warning(t: &Trace, needle: &str) -> bool {
        t.diagnostics
            .iter()
            .any(|d| d.level == Level::Warning && d.message.contains(needle))
    }

    fn basic_events() -> Vec<String> {
        vec![
            op(10, "user_annotation", "ProfilerStep#1", 0.0, 100.0),
            op(10, "cpu_op", "aten::linear", 10.0, 20.0),
            op(10, "cpu_op", "aten::addmm", 12.0, 5.0),
            mem(10, 13.0, 512, 0x1000, 1, 0),
            mem(10, 25.0, -512, 0x1000, 1, 0),
            mem(10, 50.0, 64, 0x2000, 0, -1),
        ]
    }

    #[test]
    fn object_form() {
        let t = parse(&obj(&basic_events()));
        assert_eq!(t.format, Format::ChromeTrace);
        let names: Vec<_> = t.devices.iter().map(|d| d.device.as_str()).collect();
        assert_eq!(names, ["cuda:0", "cpu"]);
        let gpu = &t.devices[0];
        assert_eq!(gpu.capacity_bytes, Some(85899345920));
        assert_eq!(gpu.events.len(), 2);
        assert_eq!(gpu.events[0].action, Action::Alloc);
        assert_eq!(gpu.events[0].size, 512);
        assert_eq!(gpu.events[0].addr, 0x1000);
        assert_eq!(gpu.events[0].ts_us, 13.0);
        assert_eq!(gpu.events[1].action, Action::FreeCompleted);
        assert_eq!(gpu.events[1].size, 512);
        assert_eq!(
            site_names(&t, gpu.events[0].site),
            [
                "cpu_op:aten::addmm",
                "cpu_op:aten::linear",
                "user_annotation:ProfilerStep#1"
            ]
        );
        assert_eq!(
            site_names(&t, gpu.events[1].site),
            ["cpu_op:aten::linear", "user_annotation:ProfilerStep#1"]
        );
        assert_eq!(gpu.reported.len(), 2);
        assert_eq!(
            gpu.reported[0],
            ReportedTotals {
                allocated: Some(512),
                reserved: Some(4096)
            }
        );
        assert_eq!(t.devices[1].capacity_bytes, None);
        assert_eq!(t.annotations.len(), 1);
        assert_eq!(t.annotations[0].name, "ProfilerStep#1");
        assert_eq!(
            (t.annotations[0].start_us, t.annotations[0].end_us),
            (0.0, 100.0)
        );
        assert!(!t.diagnostics.iter().any(|d| d.level == Level::Warning));
    }

    #[test]
    fn array_form() {
        let s = format!("[{}]", basic_events().join(","));
        let t = parse(&s);
        assert_eq!(t.devices.len(), 2);
        assert_eq!(t.devices[0].capacity_bytes, None);
        assert_eq!(t.devices[0].events.len(), 2);
    }

    #[test]
    fn truncated_array_without_bracket() {
        let s = format!("[{},\n", basic_events().join(",\n"));
        let t = parse(&s);
        assert_eq!(t.devices[0].events.len(), 2);
        assert_eq!(t.devices[1].events.len(), 1);
        assert!(has_warning(&t, "no closing `]`"), "{:?}", t.diagnostics);
        assert!(has_warning(&t, "6 complete events"), "{:?}", t.diagnostics);
    }

    #[test]
    fn truncated_array_half_written_event() {
        let full = format!("[{}", basic_events().join(","));
        let cut = &full[..full.len() - 30];
        let t = parse(cut);
        // The CPU alloc (last event) is cut off.
        assert_eq!(t.devices.len(), 1);
        assert_eq!(t.devices[0].events.len(), 2);
        assert!(
            has_warning(&t, "last event is incomplete"),
            "{:?}",
            t.diagnostics
        );
        assert!(has_warning(&t, "5 complete events"), "{:?}", t.diagnostics);
    }

    #[test]
    fn truncated_object_form() {
        let full = obj(&basic_events());
        let cut = &full[..full.find("],\"traceName\"").unwrap() - 10];
        let t = parse(cut);
        assert_eq!(t.devices[0].device, "cuda:0");
        assert_eq!(t.devices[0].capacity_bytes, Some(85899345920));
        assert_eq!(t.devices[0].events.len(), 2);
        assert!(has_warning(&t, "truncated"));
        // Cut inside deviceProperties: nothing usable.
        let early = &full[..40];
        assert!(matches!(
            parse_chrome_trace(early.as_bytes()),
            Err(Error::Json(_))
        ));
    }

    #[test]
    fn trailing_comma() {
        let s = format!("[{},]", basic_events().join(","));
        let t = parse(&s);
        assert_eq!(t.devices[0].events.len(), 2);
        assert!(t
            .diagnostics
            .iter()
            .any(|d| d.message.contains("trailing comma")));
        assert!(!t.diagnostics.iter().any(|d| d.level == Level::Warning));
    }

    #[test]
    fn invalid_number_tokens() {
        let s = r#"{"traceEvents":[
          {"ph":"X","cat":"gpu_memcpy","name":"Memcpy","pid":0,"tid":7,"ts":1,"dur":0,"args":{"memory bandwidth (GB/s)": inf, "a": -Infinity, "b": NaN, "c": nan, "d": N/A, "e": Infinity}},
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":5,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":4096,"Total Allocated":512,"Total Reserved":NaN}},
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":6,"args":{"Device Type":1,"Device Id":0,"Bytes":-512,"Addr":4096,"Total Allocated":0,"Total Reserved":-inf, "note":"NaN inside a string stays"}}
        ]}"#;
        let t = parse(s);
        let d = &t.devices[0];
        assert_eq!(d.events.len(), 2);
        assert_eq!(d.reported[0].allocated, Some(512));
        assert_eq!(d.reported[0].reserved, None);
        assert_eq!(d.reported[1].reserved, None);
        assert!(
            t.diagnostics
                .iter()
                .any(|x| x.message.contains("8 non-JSON")),
            "{:?}",
            t.diagnostics
        );
    }

    #[test]
    fn string_pid_tid_and_ts() {
        let s = r#"[
          {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":"7","tid":"stream 7","ts":"100.500","dur":"10"},
          {"ph":"i","name":"[memory]","pid":7,"tid":"stream 7","ts":"105.250","args":{"Device Type":"1","Device Id":"2","Bytes":"1024","Addr":"8192"}},
          {"ph":"i","name":"[memory]","pid":"7","tid":"other","ts":106,"args":{"Device Type":1,"Device Id":2,"Bytes":1024,"Addr":9000}}
        ]"#;
        let t = parse(s);
        let d = &t.devices[0];
        assert_eq!(d.device, "cuda:2");
        assert_eq!(d.events[0].ts_us, 105.25);
        assert_eq!(d.events[0].size, 1024);
        assert_eq!(d.events[0].addr, 8192);
        assert_eq!(site_names(&t, d.events[0].site), ["cpu_op:aten::mm"]);
        assert_eq!(d.events[1].site, 0);
        assert!(d.reported.is_empty());
    }

    #[test]
    fn integers_above_i64_and_u64() {
        let s = r#"{"traceEvents":[
          {"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":1,"tid":1,"ts":100,"dur":50,"args":{"Comms Id":18446744073709551615, "Huge": 123456789012345678901234567890}},
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":120,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":18446744073709551615,"Ev Idx":99999999999999999999999}}
        ]}"#;
        let t = parse(s);
        let d = &t.devices[0];
        assert_eq!(d.events[0].addr, u64::MAX);
        assert_eq!(
            site_names(&t, d.events[0].site),
            ["cpu_op:record_param_comms"]
        );
    }

    #[test]
    fn empty_and_trivial_inputs_do_not_panic() {
        for s in [
            "",
            "   ",
            "{}",
            "[]",
            "{\"traceEvents\":[]}",
            "{\"traceEvents\":null}",
            "[1,2,\"x\"]",
            "null",
            "42",
            "\"str\"",
            "{\"a\":[1,2",
            "[",
            "{",
            "[{",
            "}{",
            "garbage",
            "{\"traceEvents\":{}}",
            "\u{feff}[]",
        ] {
            match parse_chrome_trace(s.as_bytes()) {
                Err(Error::NoMemoryEvents) | Err(Error::Json(_)) => {}
                other => panic!("{s:?}: {other:?}"),
            }
        }
        assert!(matches!(
            parse_chrome_trace(b"{}"),
            Err(Error::NoMemoryEvents)
        ));
        assert!(matches!(
            parse_chrome_trace(b"[]"),
            Err(Error::NoMemoryEvents)
        ));
        match parse_chrome_trace(b"garbage") {
            Err(Error::Json(m)) => assert!(m.contains("at byte 0"), "{m}"),
            other => panic!("{other:?}"),
        }
        match parse_chrome_trace(b"{\"a\": 1, \"b\" 2}") {
            Err(Error::Json(m)) => assert!(m.contains("at byte 13"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_prefix_is_handled_without_panic() {
        let full = obj(&basic_events());
        for cut in 0..=full.len() {
            let r = parse_chrome_trace(&full.as_bytes()[..cut]);
            match r {
                Ok(t) => assert!(t.devices.iter().map(|d| d.events.len()).sum::<usize>() >= 1),
                Err(Error::NoMemoryEvents) | Err(Error::Json(_)) => {}
                Err(e) => panic!("prefix {cut}: {e}"),
            }
        }
        let full = format!("[{}]", basic_events().join(","));
        for cut in 0..=full.len() {
            let _ = parse_chrome_trace(&full.as_bytes()[..cut]);
        }
    }

    #[test]
    fn begin_end_pairs() {
        let s = r###"[
          {"ph":"B","cat":"user_annotation","name":"## forward ##","pid":1,"tid":1,"ts":0},
          {"ph":"B","cat":"cpu_op","name":"aten::relu","pid":1,"tid":1,"ts":10},
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":15,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":1}},
          {"ph":"E","pid":1,"tid":1,"ts":20},
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":20,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":2}},
          {"ph":"B","cat":"gpu_user_annotation","name":"gpu","pid":1,"tid":1,"ts":21},
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":22,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":3}},
          {"ph":"E","pid":1,"tid":1,"ts":23},
          {"ph":"E","pid":1,"tid":1,"ts":30}
        ]"###;
        let t = parse(s);
        let ev = &t.devices[0].events;
        assert_eq!(
            site_names(&t, ev[0].site),
            ["cpu_op:aten::relu", "user_annotation:## forward ##"]
        );
        assert_eq!(
            site_names(&t, ev[1].site),
            ["user_annotation:## forward ##"]
        );
        // The gpu_user_annotation B/E pair is matched but opens no frame.
        assert_eq!(
            site_names(&t, ev[2].site),
            ["user_annotation:## forward ##"]
        );
        assert_eq!(t.annotations.len(), 1);
        assert_eq!(t.annotations[0].end_us, 30.0);
    }

    #[test]
    fn attribution_is_per_thread_and_deepest() {
        // thread 1: |---- nn.Module: Linear_0 (python) [0,100) ----|
        //             |-- aten::linear [10,50) --|
        //                |- aten::mm [20,30) -|
        // thread 2:   |-------- aten::other [0,1000) --------|
        let events = vec![
            op(2, "cpu_op", "aten::other", 0.0, 1000.0),
            op(1, "cpu_op", "aten::mm", 20.0, 10.0),
            op(1, "python_function", "nn.Module: Linear_0", 0.0, 100.0),
            op(1, "cpu_op", "aten::linear", 10.0, 40.0),
            op(1, "kernel", "volta_sgemm", 0.0, 1000.0),
            mem(1, 25.0, 512, 1, 1, 0),
            mem(1, 30.0, 512, 2, 1, 0), // end of aten::mm is exclusive
            mem(1, 50.0, 512, 3, 1, 0), // end of aten::linear is exclusive
            mem(1, 100.0, 512, 4, 1, 0),
            mem(2, 25.0, 512, 5, 1, 0),
            mem(3, 25.0, 512, 6, 1, 0),
        ];
        let t = parse(&obj(&events));
        let ev = &t.devices[0].events;
        let by_addr = |a: u64| ev.iter().find(|e| e.addr == a).unwrap().site;
        assert_eq!(
            site_names(&t, by_addr(1)),
            [
                "cpu_op:aten::mm",
                "cpu_op:aten::linear",
                "python_function:nn.Module: Linear_0"
            ]
        );
        assert_eq!(
            site_names(&t, by_addr(2)),
            ["cpu_op:aten::linear", "python_function:nn.Module: Linear_0"]
        );
        assert_eq!(
            site_names(&t, by_addr(3)),
            ["python_function:nn.Module: Linear_0"]
        );
        assert_eq!(by_addr(4), 0);
        assert_eq!(site_names(&t, by_addr(5)), ["cpu_op:aten::other"]);
        assert_eq!(by_addr(6), 0);
        let d = t
            .diagnostics
            .iter()
            .find(|d| d.message.contains("outside any operator"))
            .unwrap();
        assert!(d.message.starts_with("2 of 6"), "{}", d.message);
        assert!(d.message.contains("1 of them on threads without operators"));
    }

    #[test]
    fn consecutive_duplicate_frames_are_dropped() {
        let events = vec![
            op(1, "cpu_op", "aten::to", 0.0, 100.0),
            op(1, "cpu_op", "aten::to", 0.0, 50.0),
            op(1, "cpu_op", "aten::copy_", 5.0, 10.0),
            mem(1, 6.0, 512, 1, 1, 0),
        ];
        let t = parse(&obj(&events));
        assert_eq!(
            site_names(&t, t.devices[0].events[0].site),
            ["cpu_op:aten::copy_", "cpu_op:aten::to"]
        );
    }

    #[test]
    fn deep_stacks_are_capped() {
        let mut events: Vec<String> = (0..100)
            .map(|i| {
                op(
                    1,
                    "python_function",
                    &format!("f{i}"),
                    i as f64,
                    1000.0 - 2.0 * i as f64,
                )
            })
            .collect();
        events.push(mem(1, 500.0, 512, 1, 1, 0));
        let t = parse(&obj(&events));
        let frames = site_names(&t, t.devices[0].events[0].site);
        assert_eq!(frames.len(), MAX_FRAMES);
        assert_eq!(frames[0], "python_function:f99");
    }

    #[test]
    fn devices_are_named_and_ordered() {
        let events = vec![
            mem(1, 1.0, 512, 1, 0, -1),
            mem(1, 2.0, 512, 2, 19, 2),
            mem(1, 3.0, 512, 3, 1, 1),
            mem(1, 4.0, 512, 4, 6, 0),
            mem(1, 5.0, 512, 5, 42, 0),
            mem(1, 6.0, 512, 6, 1, 0),
            mem(1, 7.0, 512, 7, 12, 0),
        ];
        let t = parse(&obj(&events));
        let names: Vec<_> = t.devices.iter().map(|d| d.device.as_str()).collect();
        assert_eq!(
            names,
            ["cuda:0", "hip:0", "cuda:1", "xpu:0", "mtia:2", "type42:0", "cpu"]
        );
        assert_eq!(t.devices[0].capacity_bytes, Some(85899345920));
        assert_eq!(t.devices[1].capacity_bytes, Some(85899345920));
        assert_eq!(t.devices[2].capacity_bytes, None);
    }

    #[test]
    fn rocm_hint_for_cuda_devices() {
        let s = r#"{"deviceProperties":[{"id":0,"name":"AMD Instinct MI300X","totalGlobalMem":1000}],
          "traceEvents":[{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":1}}]}"#;
        let t = parse(s);
        assert_eq!(t.devices[0].device, "cuda:0");
        assert_eq!(t.devices[0].capacity_bytes, Some(1000));
        assert!(t.diagnostics.iter().any(|d| d.message.contains("ROCm")));
        let s = r#"{"traceEvents":[{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":1}}],"roctracer_version":4}"#;
        assert!(parse(s)
            .diagnostics
            .iter()
            .any(|d| d.message.contains("ROCm")));
    }

    #[test]
    fn totals_are_carried_and_cpu_reserved_zero_is_kept() {
        let s = r#"[
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Device Type":0,"Device Id":-1,"Bytes":16,"Addr":1,"Total Allocated":16,"Total Reserved":0}},
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":2,"args":{"Device Type":0,"Device Id":-1,"Bytes":-16,"Addr":1,"Total Allocated":0,"Total Reserved":0}}
        ]"#;
        let t = parse(s);
        let d = &t.devices[0];
        assert_eq!(d.device, "cpu");
        assert_eq!(
            d.reported,
            [
                ReportedTotals {
                    allocated: Some(16),
                    reserved: Some(0)
                },
                ReportedTotals {
                    allocated: Some(0),
                    reserved: Some(0)
                }
            ]
        );
    }

    #[test]
    fn legacy_schema_without_addr_or_totals() {
        let s = r#"{"schemaVersion":1,"traceEvents":[
          {"ph":"X","cat":"Operator","name":"aten::conv2d","pid":9,"tid":9,"ts":1623142623460100,"dur":200},
          {"ph":"X","cat":"Operator","name":"ProfilerStep#3","pid":9,"tid":9,"ts":1623142623460000,"dur":1000},
          {"ph":"i","s":"t","name":"[memory]","pid":9,"tid":9,"ts":1623142623460121,"args":{"Device Type":0,"Device Id":-1,"Bytes":4}},
          {"ph":"i","s":"t","name":"[memory]","pid":9,"tid":9,"ts":1623142623460121,"args":{"Device Type":0,"Device Id":-1,"Bytes":4}},
          {"ph":"i","s":"t","name":"[memory]","pid":9,"tid":9,"ts":1623142623460199,"args":{"Device Type":0,"Device Id":-1,"Bytes":-4}}
        ]}"#;
        let t = parse(s);
        let d = &t.devices[0];
        // Identical events without `Ev Idx` are not deduplicated.
        assert_eq!(d.events.len(), 3);
        assert_eq!(d.events[0].addr, 0);
        assert_eq!(d.events[0].ts_us, 1623142623460121.0);
        assert!(d.reported.is_empty());
        assert_eq!(
            site_names(&t, d.events[0].site),
            ["cpu_op:aten::conv2d", "cpu_op:ProfilerStep#3"]
        );
        assert_eq!(t.annotations[0].name, "ProfilerStep#3");
        assert!(has_warning(&t, "no `Addr`"));
        assert!(t
            .diagnostics
            .iter()
            .any(|x| x.message.contains("no `Total Allocated`")));
    }

    #[test]
    fn duplicates_are_removed() {
        let e = r#"{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":5,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":4096,"Ev Idx":3}}"#;
        let f = r#"{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":5,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":4096,"Ev Idx":4}}"#;
        let t = parse(&format!("[{e},{e},{f},{e}]"));
        assert_eq!(t.devices[0].events.len(), 2);
        assert!(has_warning(&t, "removed 2 duplicate"));
    }

    #[test]
    fn out_of_memory_event() {
        let s = r#"[
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":1,"args":{"Device Type":1,"Device Id":0,"Bytes":512,"Addr":1}},
          {"ph":"i","cat":"cpu_instant_event","name":"[OutOfMemory]","pid":1,"tid":1,"ts":2,"args":{"Device Type":1,"Device Id":0,"Bytes":1073741824,"Total Allocated":512,"Total Reserved":2097152}}
        ]"#;
        let t = parse(s);
        let ev = &t.devices[0].events;
        assert_eq!(ev[1].action, Action::Oom);
        assert_eq!(ev[1].size, 1 << 30);
        assert_eq!(t.devices[0].reported[1].reserved, Some(2097152));
        // An OOM has no Addr: no legacy-schema warning for it.
        assert!(!has_warning(&t, "no `Addr`"));
    }

    #[test]
    fn events_sorted_by_time_stably() {
        let events = vec![
            mem(1, 30.0, 512, 3, 1, 0),
            mem(2, 10.0, 512, 1, 1, 0),
            mem(1, 20.0, 512, 2, 1, 0),
            mem(2, 20.0, -512, 2, 1, 0),
        ];
        let t = parse(&obj(&events));
        let order: Vec<_> = t.devices[0]
            .events
            .iter()
            .map(|e| (e.ts_us, e.addr))
            .collect();
        assert_eq!(order, [(10.0, 1), (20.0, 2), (20.0, 2), (30.0, 3)]);
        assert_eq!(t.devices[0].events[1].action, Action::Alloc);
        assert_eq!(t.devices[0].events[2].action, Action::FreeCompleted);
    }

    #[test]
    fn control_characters_in_strings() {
        let s = "[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"a\tb\nc\u{1}\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":10},\
                 {\"ph\":\"i\",\"name\":\"[memory]\",\"pid\":1,\"tid\":1,\"ts\":5,\"args\":{\"Device Type\":1,\"Device Id\":0,\"Bytes\":8,\"Addr\":1}}]";
        let t = parse(s);
        assert_eq!(
            site_names(&t, t.devices[0].events[0].site),
            ["cpu_op:a\tb\nc\u{1}"]
        );
        assert!(t
            .diagnostics
            .iter()
            .any(|d| d.message.contains("control character")));
    }

    #[test]
    fn broken_event_is_skipped() {
        // An unescaped quote inside a name (pytorch/pytorch#146900).
        let s = r#"[
          {"ph":"X","cat":"cpu_op","name":"bad "quoted" name","pid":1,"tid":1,"ts":0,"dur":10},
          {"ph":"X","cat":"cpu_op","name":"odd " quote","pid":1,"tid":1,"ts":0,"dur":10},
          {"ph":"X","cat":"cpu_op","name":"good","pid":1,"tid":1,"ts":0,"dur":10},
          {"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":5,"args":{"Device Type":1,"Device Id":0,"Bytes":8,"Addr":1}}
        ]"#;
        let t = parse(s);
        assert_eq!(t.devices[0].events.len(), 1);
        assert_eq!(site_names(&t, t.devices[0].events[0].site), ["cpu_op:good"]);
        assert!(
            has_warning(&t, "skipped 2 malformed"),
            "{:?}",
            t.diagnostics
        );
    }

    #[test]
    fn truncated_and_repaired_events_combined() {
        // A cut-off file whose events also need token repair: the recovery
        // pass repairs events one at a time.
        let s = "[{\"ph\":\"X\",\"cat\":\"cpu_op\",\"name\":\"op\ttab\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":10,\"args\":{\"bw\":inf}},\n\
                 {\"ph\":\"i\",\"name\":\"[memory]\",\"pid\":1,\"tid\":1,\"ts\":5,\"args\":{\"Device Type\":1,\"Device Id\":0,\"Bytes\":8,\"Addr\":1,\"Total Reserved\":NaN}},\n\
                 {\"ph\":\"i\",\"name\":\"[mem";
        let t = parse(s);
        assert_eq!(t.devices[0].events.len(), 1);
        assert_eq!(
            site_names(&t, t.devices[0].events[0].site),
            ["cpu_op:op\ttab"]
        );
        assert!(has_warning(&t, "2 complete events"), "{:?}", t.diagnostics);
        assert!(t
            .diagnostics
            .iter()
            .any(|d| d.message.contains("2 non-JSON")));
        // NUL padding after a complete file.
        let mut padded = obj(&basic_events()).into_bytes();
        padded.extend_from_slice(&[0; 64]);
        let t = parse_chrome_trace(&padded).unwrap();
        assert_eq!(t.devices[0].events.len(), 2);
        assert!(t.diagnostics.iter().any(|d| d.message.contains("NUL")));
    }

    use crate::test_support::{corpus_dir, read_maybe_gz};

    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains(".json"))
            {
                out.push(p);
            }
        }
    }

    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn corpus_traces() {
        let dir = corpus_dir();
        let mut files = Vec::new();
        walk(&dir, &mut files);
        assert!(!files.is_empty());
        let mut rows = Vec::new();
        let (mut with_mem, mut without) = (0, 0);
        for path in &files {
            let rel = path.strip_prefix(&dir).unwrap().display().to_string();
            let bytes = read_maybe_gz(path);
            let t0 = std::time::Instant::now();
            let result = parse_chrome_trace(&bytes);
            let ms = t0.elapsed().as_secs_f64() * 1000.0;
            let path_taken = if parse_strict(&bytes).is_ok() {
                "strict"
            } else {
                "repaired"
            };
            let mb = bytes.len() as f64 / 1e6;
            match result {
                Ok(t) => {
                    with_mem += 1;
                    let n: usize = t.devices.iter().map(|d| d.events.len()).sum();
                    assert!(n >= 1, "{rel}");
                    let mut peaks = Vec::new();
                    for d in &t.devices {
                        if d.reported.is_empty() {
                            peaks.push(format!("{}: -", d.device));
                            continue;
                        }
                        assert_eq!(d.reported.len(), d.events.len());
                        let max = d.reported.iter().filter_map(|r| r.allocated).max();
                        if let Some(max) = max {
                            assert!(max > 0, "{rel} {}", d.device);
                        }
                        peaks.push(format!(
                            "{}: {}",
                            d.device,
                            max.map_or("-".to_string(), |m| m.to_string())
                        ));
                    }
                    let devs: Vec<_> = t.devices.iter().map(|d| d.device.as_str()).collect();
                    if rel.contains("df_index_resolver") {
                        assert!(devs.contains(&"cuda:1"), "{devs:?}");
                    }
                    if rel.contains("tracelens/tests/traces/mi300") {
                        assert!(devs.contains(&"hip:0"), "{devs:?}");
                    }
                    for w in t.diagnostics.iter().filter(|d| d.level == Level::Warning) {
                        eprintln!("  {rel}: warning: {}", w.message);
                    }
                    rows.push(format!(
                        "| {rel} | {mb:.1} | {} | {n} | {} | {} | {path_taken} | {ms:.1} |",
                        devs.join(", "),
                        peaks.join("; "),
                        t.sites.len(),
                    ));
                }
                Err(Error::NoMemoryEvents) => {
                    without += 1;
                    rows.push(format!(
                        "| {rel} | {mb:.1} | no memory events | 0 | - | - | {path_taken} | {ms:.1} |"
                    ));
                }
                Err(e) => panic!("{rel}: {e}"),
            }
        }
        println!(
            "| file | MB | devices | memory events | max Total Allocated (bytes) | sites | JSON | parse ms |"
        );
        println!("|---|---|---|---|---|---|---|---|");
        for r in &rows {
            println!("{r}");
        }
        println!("{with_mem} traces with memory events, {without} without");
        assert!(
            with_mem >= 12,
            "expected the 12 corpus traces with memory events"
        );
    }
}
