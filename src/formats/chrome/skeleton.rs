//! Skeleton types for trace events: `serde` visitors that read only the
//! fields memcut uses, borrow strings from the input, and never fail on a
//! value of the wrong type (formats.md D12–D21).
//!
//! Real traces put strings where numbers belong (`"ts": "100.500"`), integers
//! above `u64::MAX` in ids, `null` after token repair, and objects where a
//! scalar is expected. A skeleton value turns each into `None` (or the number
//! it spells) instead of failing the whole file, and skips everything else as
//! `IgnoredAny` without building it, which is most of the bytes of a trace.
//! Any scanner (the streaming `serde_json` pass, the per-event recovery, a
//! future SIMD scanner) yields [`RawEvent`]s for [`super::collect`].

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use crate::model::EvidenceOp;

/// A number that tolerates every JSON type (wrong types become `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) enum Num {
    #[default]
    None,
    I(i64),
    /// Integers above `i64::MAX` (serde_json falls back to `F` above `u64::MAX`).
    U(u64),
    F(f64),
}

impl Num {
    /// A number spelled in a string (`"ts": "100.500"`).
    pub(super) fn from_str(s: &str) -> Num {
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

    pub(super) fn f64(self) -> Option<f64> {
        match self {
            Num::None => None,
            Num::I(v) => Some(v as f64),
            Num::U(v) => Some(v as f64),
            Num::F(v) => v.is_finite().then_some(v),
        }
    }

    pub(super) fn i64(self) -> Option<i64> {
        match self {
            Num::None => None,
            Num::I(v) => Some(v),
            Num::U(_) => Some(i64::MAX),
            Num::F(v) => v.is_finite().then_some(v as i64),
        }
    }

    /// Non-negative integer value (`None` for negative, NaN or missing).
    pub(super) fn u64(self) -> Option<u64> {
        match self {
            Num::I(v) if v >= 0 => Some(v as u64),
            Num::U(v) => Some(v),
            Num::F(v) if v.is_finite() && v >= 0.0 => Some(v as u64),
            _ => None,
        }
    }

    /// An address: like `u64`, but a negative int64 is read as its bit pattern.
    pub(super) fn addr(self) -> Option<u64> {
        match self {
            Num::I(v) => Some(v as u64),
            other => other.u64(),
        }
    }

    /// Microseconds → integer nanoseconds (exact for integers and for the
    /// three-decimal floats Kineto writes).
    pub(super) fn ns(self) -> Option<i64> {
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

pub(super) fn drain_seq<'de, A: SeqAccess<'de>>(mut a: A) -> std::result::Result<(), A::Error> {
    while a.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

pub(super) fn drain_map<'de, A: MapAccess<'de>>(mut a: A) -> std::result::Result<(), A::Error> {
    while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// A string that borrows when it can; numbers are stringified, anything else is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct LStr<'a>(pub(super) Option<Cow<'a, str>>);

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
pub(super) enum Id<'a> {
    #[default]
    None,
    Int(i64),
    Str(Cow<'a, str>),
}

impl<'a> Id<'a> {
    pub(super) fn into_owned(self) -> Id<'static> {
        match self {
            Id::None => Id::None,
            Id::Int(v) => Id::Int(v),
            Id::Str(c) => Id::Str(Cow::Owned(c.into_owned())),
        }
    }

    pub(super) fn from_cow(s: Cow<'a, str>) -> Id<'a> {
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
        pub(super) enum $name { $($var,)* Other }
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
    "Input Dims" => InputDims, "Input type" => InputType,
});

/// The `args` of a `[memory]` event (other events' args are skimmed the same way).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MemArgs {
    pub(super) device_type: Num,
    pub(super) device_id: Num,
    pub(super) bytes: Num,
    pub(super) addr: Num,
    pub(super) total_allocated: Num,
    pub(super) total_reserved: Num,
    pub(super) ev_idx: Num,
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
                ArgKey::InputDims | ArgKey::InputType | ArgKey::Other => {
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

/// `record_shapes` inputs of an operator call: `Input Dims` (one entry per
/// input: a tensor's dims, or `None` for a scalar, a list of tensors or
/// anything else) and `Input type` (the element type's C++ name).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct RawInputs<'a> {
    pub(super) dims: Vec<Option<Vec<u64>>>,
    pub(super) types: Vec<LStr<'a>>,
}

impl RawInputs<'_> {
    fn into_owned(self) -> RawInputs<'static> {
        RawInputs {
            dims: self.dims,
            types: self
                .types
                .into_iter()
                .map(|t| LStr(t.0.map(|c| Cow::Owned(c.into_owned()))))
                .collect(),
        }
    }
}

/// One `Input Dims` entry: the dims of a tensor (`[4, 32, 64]`, `[]` for
/// a 0-d tensor or a scalar), `None` for nested lists and other values.
struct DimsEntry(Option<Vec<u64>>);

impl<'de> Deserialize<'de> for DimsEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<DimsEntry, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DimsEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of dims")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<DimsEntry, A::Error> {
                let mut dims = Vec::new();
                let mut tensor = true;
                // A nested list (a `TensorList` input) reads as `Num::None`.
                while let Some(n) = a.next_element::<Num>()? {
                    match n.u64() {
                        Some(d) => dims.push(d),
                        None => tensor = false,
                    }
                }
                Ok(DimsEntry(tensor.then_some(dims)))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                a: A,
            ) -> std::result::Result<DimsEntry, A::Error> {
                drain_map(a).map(|_| DimsEntry(None))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<DimsEntry, E> {
                Ok(DimsEntry(None))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<DimsEntry, E> {
                Ok(DimsEntry(None))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<DimsEntry, E> {
                Ok(DimsEntry(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<DimsEntry, E> {
                Ok(DimsEntry(None))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<DimsEntry, E> {
                Ok(DimsEntry(None))
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<DimsEntry, E> {
                Ok(DimsEntry(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// A list of `T`, or empty for any other value (skeletons never fail on a
/// value of the wrong type).
struct ListOf<T>(Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ListOf<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<ListOf<T>, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = ListOf<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<ListOf<T>, A::Error> {
                let mut out = Vec::new();
                while let Some(x) = a.next_element()? {
                    out.push(x);
                }
                Ok(ListOf(out))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                a: A,
            ) -> std::result::Result<ListOf<T>, A::Error> {
                drain_map(a).map(|_| ListOf(Vec::new()))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<ListOf<T>, E> {
                Ok(ListOf(Vec::new()))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<ListOf<T>, E> {
                Ok(ListOf(Vec::new()))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<ListOf<T>, E> {
                Ok(ListOf(Vec::new()))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<ListOf<T>, E> {
                Ok(ListOf(Vec::new()))
            }
            fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<ListOf<T>, E> {
                Ok(ListOf(Vec::new()))
            }
            fn visit_unit<E: de::Error>(self) -> std::result::Result<ListOf<T>, E> {
                Ok(ListOf(Vec::new()))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Reads an event's `args`: the memory fields, and the `record_shapes`
/// inputs when `inputs` says the event is an operator call memcut keeps
/// them for (otherwise they are skipped like every other key).
struct ArgsSeed {
    inputs: bool,
}

impl<'de> DeserializeSeed<'de> for ArgsSeed {
    type Value = (MemArgs, Option<RawInputs<'de>>);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Self::Value, D::Error> {
        if !self.inputs {
            return MemArgs::deserialize(d).map(|a| (a, None));
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ArgsSeed {
    type Value = (MemArgs, Option<RawInputs<'de>>);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an args object")
    }
    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut inputs = RawInputs::default();
        while let Some(k) = map.next_key::<ArgKey>()? {
            match k {
                ArgKey::InputDims => {
                    inputs.dims = map
                        .next_value::<ListOf<DimsEntry>>()?
                        .0
                        .into_iter()
                        .map(|e| e.0)
                        .collect();
                }
                ArgKey::InputType => inputs.types = map.next_value::<ListOf<LStr<'de>>>()?.0,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        // Operator calls carry no memory fields.
        Ok((MemArgs::default(), Some(inputs)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> std::result::Result<Self::Value, A::Error> {
        drain_seq(a).map(|_| (MemArgs::default(), None))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Self::Value, E> {
        Ok((MemArgs::default(), None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<Self::Value, E> {
        Ok((MemArgs::default(), None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<Self::Value, E> {
        Ok((MemArgs::default(), None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<Self::Value, E> {
        Ok((MemArgs::default(), None))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<Self::Value, E> {
        Ok((MemArgs::default(), None))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok((MemArgs::default(), None))
    }
}

/// The fields of one trace event that memcut reads.
#[derive(Debug, Default)]
pub(super) struct RawEvent<'a> {
    pub(super) ph: LStr<'a>,
    pub(super) cat: LStr<'a>,
    pub(super) name: LStr<'a>,
    pub(super) pid: Id<'a>,
    pub(super) tid: Id<'a>,
    pub(super) ts: Num,
    pub(super) dur: Num,
    pub(super) args: MemArgs,
    /// `record_shapes` inputs of an operator call in
    /// [`EvidenceOp`](crate::model::EvidenceOp) that reads them (read only
    /// when `ph` and `name` come before `args`, as every known writer puts them).
    pub(super) inputs: Option<RawInputs<'a>>,
}

impl RawEvent<'_> {
    /// A complete operator event whose `record_shapes` inputs memcut reads
    /// (`args` then holds them), as far as the keys before `args` say.
    pub(super) fn reads_inputs(&self) -> bool {
        self.ph.0.as_deref() == Some("X")
            && self
                .name
                .0
                .as_deref()
                .and_then(EvidenceOp::from_name)
                .is_some_and(EvidenceOp::reads_inputs)
    }

    pub(super) fn into_owned(self) -> RawEvent<'static> {
        let own = |s: LStr<'_>| LStr(s.0.map(|c| Cow::Owned(c.into_owned())));
        RawEvent {
            ph: own(self.ph),
            cat: own(self.cat),
            name: own(self.name),
            pid: self.pid.into_owned(),
            tid: self.tid.into_owned(),
            ts: self.ts,
            dur: self.dur,
            args: self.args,
            inputs: self.inputs.map(RawInputs::into_owned),
        }
    }
}

/// Deserializes one element of `traceEvents`; non-objects become `None`.
pub(super) struct EventSeed;

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
                EvKey::Args => {
                    let inputs = ev.reads_inputs();
                    (ev.args, ev.inputs) = map.next_value_seed(ArgsSeed { inputs })?;
                }
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
pub(super) struct DeviceProp<'a> {
    #[serde(default)]
    pub(super) id: Num,
    #[serde(default, borrow)]
    pub(super) name: LStr<'a>,
    #[serde(default, rename = "totalGlobalMem")]
    pub(super) total_global_mem: Num,
    #[serde(default, rename = "computeMajor")]
    pub(super) compute_major: Num,
    #[serde(default, rename = "computeMinor")]
    pub(super) compute_minor: Num,
}

/// `distributedInfo`: which rank of how many (the rest is skipped). Any
/// other value (not an object) reads as neither, never as an error.
#[derive(Debug, Default)]
pub(super) struct DistributedInfo {
    pub(super) rank: Num,
    pub(super) world_size: Num,
}

struct DistributedInfoVisitor;

impl<'de> Visitor<'de> for DistributedInfoVisitor {
    type Value = DistributedInfo;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a distributedInfo object")
    }
    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> std::result::Result<Self::Value, A::Error> {
        let mut info = DistributedInfo::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "rank" => info.rank = map.next_value()?,
                "world_size" => info.world_size = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(info)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, a: A) -> std::result::Result<Self::Value, A::Error> {
        drain_seq(a).map(|_| DistributedInfo::default())
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> std::result::Result<Self::Value, E> {
        Ok(DistributedInfo::default())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> std::result::Result<Self::Value, E> {
        Ok(DistributedInfo::default())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> std::result::Result<Self::Value, E> {
        Ok(DistributedInfo::default())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> std::result::Result<Self::Value, E> {
        Ok(DistributedInfo::default())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> std::result::Result<Self::Value, E> {
        Ok(DistributedInfo::default())
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
        Ok(DistributedInfo::default())
    }
}

impl<'de> Deserialize<'de> for DistributedInfo {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(DistributedInfoVisitor)
    }
}

/// A top-level key of the object form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TopKey {
    TraceEvents,
    DeviceProperties,
    DistributedInfo,
    BaseTime,
    Other,
}

/// Top-level key: known ones, plus the raw text for ROCm hints.
pub(super) struct TopKeySeen<'a>(pub(super) TopKey, pub(super) Cow<'a, str>);

impl<'de> Deserialize<'de> for TopKeySeen<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(d)?;
        let k = match s.as_ref() {
            "traceEvents" => TopKey::TraceEvents,
            "deviceProperties" => TopKey::DeviceProperties,
            "distributedInfo" => TopKey::DistributedInfo,
            "baseTimeNanoseconds" => TopKey::BaseTime,
            _ => TopKey::Other,
        };
        Ok(TopKeySeen(k, s))
    }
}
