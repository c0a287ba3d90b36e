//! Collection: from trace events to what the trace is built from.
//!
//! [`Collector::push`] takes one [`RawEvent`] at a time and keeps only what
//! memcut uses: operator intervals (`X` events of the categories in
//! [`OpKind`]), `B`/`E` events (paired later), and `[memory]` /
//! `[OutOfMemory]` instants, deduplicated by `Ev Idx`. Everything else is
//! counted and dropped, so memory grows with the memory events and
//! operators, not with the file. Every reader feeds the same `push`: the
//! streaming `serde_json` pass here ([`parse_strict`]), the per-event
//! recovery in `recover.rs`, and later a streaming scanner (issue 16).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::attribute::{BeRec, Instant, OpKind, OpRec};
use super::skeleton::{
    drain_map, DeviceProp, DistributedInfo, EventSeed, Id, Num, RawEvent, RawInputs, TopKey,
    TopKeySeen,
};
use crate::model::{Distributed, Dtype, EvidenceOp, OperatorCall, TensorShape};

/// One `[memory]` or `[OutOfMemory]` event.
#[derive(Debug, Clone, Copy)]
pub(super) struct MemRec {
    pub(super) thread: u32,
    /// Position in the file: orders events with equal `ts`.
    pub(super) order: u32,
    pub(super) ts_ns: i64,
    pub(super) ts_us: f64,
    pub(super) oom: bool,
    pub(super) bytes: i64,
    pub(super) addr: Option<u64>,
    /// (`Device Type`, `Device Id`).
    pub(super) device: (Option<i64>, Option<i64>),
    pub(super) allocated: Option<u64>,
    pub(super) reserved: Option<u64>,
}

impl MemRec {
    pub(super) fn instant(&self) -> Instant {
        Instant {
            thread: self.thread,
            ts: self.ts_ns,
            order: self.order,
        }
    }
}

/// One entry of `deviceProperties`: id, `totalGlobalMem`, name,
/// `computeMajor`/`computeMinor`.
#[derive(Debug, Clone, Default)]
pub(super) struct DeviceInfo {
    pub(super) id: Option<i64>,
    pub(super) total_memory: Option<u64>,
    pub(super) name: String,
    pub(super) compute: Option<(u32, u32)>,
}

/// Memory events dropped while collecting, by reason.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Dropped {
    /// Same (pid, tid, ts, Addr, Bytes, Ev Idx, device) as an earlier one.
    pub(super) duplicates: usize,
    pub(super) without_ts: usize,
    pub(super) without_bytes: usize,
}

/// What collection keeps from a trace: the input of `build.rs`.
#[derive(Default)]
pub(super) struct Collected<'a> {
    /// Operator intervals from `X` events.
    pub(super) ops: Vec<OpRec<'a>>,
    /// Calls of the operators in [`EvidenceOp`], with their `record_shapes`
    /// inputs (times in µs, as memory events carry them).
    pub(super) evidence: Vec<OperatorCall>,
    /// `B`/`E` events, paired into intervals when the trace is built.
    pub(super) be: Vec<BeRec<'a>>,
    pub(super) mems: Vec<MemRec>,
    pub(super) devices: Vec<DeviceInfo>,
    /// `baseTimeNanoseconds`.
    pub(super) base_time_ns: Option<i64>,
    /// `distributedInfo`'s rank and world size.
    pub(super) distributed: Option<Distributed>,
    /// A top-level key only ROCm builds of Kineto write was seen.
    pub(super) amd_hint: bool,
    pub(super) dropped: Dropped,
}

/// (thread, ts ns, Addr, Bytes, Ev Idx, Device Type, Device Id) of a memory event.
type DedupeKey = (u32, i64, Option<u64>, i64, i64, Option<i64>, Option<i64>);

/// Collects events one at a time into a [`Collected`].
#[derive(Default)]
pub(super) struct Collector<'a> {
    threads: HashMap<(Id<'a>, Id<'a>), u32>,
    last_thread: Option<((Id<'a>, Id<'a>), u32)>,
    dedupe: HashSet<DedupeKey>,
    events_seen: u64,
    /// A `traceEvents` array (or the bare array form) was found.
    pub(super) saw_trace_events: bool,
    out: Collected<'a>,
}

impl<'a> Collector<'a> {
    pub(super) fn finish(self) -> Collected<'a> {
        self.out
    }

    /// A dense id per (pid, tid); consecutive events mostly share one.
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

    pub(super) fn push(&mut self, ev: RawEvent<'a>) {
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
            inputs,
        } = ev;
        let ph = ph.0.as_deref().unwrap_or("");
        match ph {
            "X" => {
                let Some(kind) = OpKind::of_category(cat.0.as_deref()) else {
                    return;
                };
                let Some(start) = ts.ns() else { return };
                let dur = dur.ns().unwrap_or(0).max(0);
                let thread = self.thread(pid, tid);
                let end = start.saturating_add(dur);
                let name = name.0.unwrap_or_default();
                if kind == OpKind::CpuOp {
                    if let Some(op) = EvidenceOp::from_name(&name) {
                        self.out.evidence.push(OperatorCall {
                            op,
                            thread,
                            start_us: start as f64 / 1000.0,
                            end_us: end as f64 / 1000.0,
                            inputs: inputs.map(tensor_inputs).unwrap_or_default(),
                        });
                    }
                }
                self.out.ops.push(OpRec {
                    thread,
                    start,
                    end,
                    kind,
                    name,
                });
            }
            "B" | "E" => {
                let Some(t) = ts.ns() else { return };
                let thread = self.thread(pid, tid);
                self.out.be.push(BeRec {
                    thread,
                    ts: t,
                    order,
                    begin: ph == "B",
                    kind: OpKind::of_category(cat.0.as_deref()),
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
                    self.out.dropped.without_ts += 1;
                    return;
                };
                let bytes = match args.bytes.i64() {
                    Some(b) if b != 0 || oom => b,
                    _ => {
                        self.out.dropped.without_bytes += 1;
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
                        self.out.dropped.duplicates += 1;
                        return;
                    }
                }
                self.out.mems.push(MemRec {
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
                });
            }
        }
    }

    pub(super) fn set_device_props(&mut self, props: Vec<DeviceProp<'_>>) {
        self.out.devices = props
            .into_iter()
            .map(|p| DeviceInfo {
                id: p.id.i64(),
                total_memory: p.total_global_mem.u64(),
                name: p.name.0.map(Cow::into_owned).unwrap_or_default(),
                compute: p
                    .compute_major
                    .u64()
                    .zip(p.compute_minor.u64())
                    .and_then(|(a, b)| Some((u32::try_from(a).ok()?, u32::try_from(b).ok()?))),
            })
            .collect();
    }

    pub(super) fn set_distributed(&mut self, info: DistributedInfo) {
        let number = |n: Num| n.u64().and_then(|v| u32::try_from(v).ok());
        self.out.distributed = match (number(info.rank), number(info.world_size)) {
            (Some(rank), Some(world_size)) => Distributed::new(rank, world_size),
            _ => None,
        };
    }

    pub(super) fn set_base_time(&mut self, ns: Option<i64>) {
        self.out.base_time_ns = ns;
    }

    /// Top-level keys that only ROCm builds of Kineto write.
    pub(super) fn note_top_key(&mut self, key: &str) {
        if key.starts_with("roctracer") || key.starts_with("hip_") {
            self.out.amd_hint = true;
        }
    }
}

/// `Input Dims` paired with `Input type`: a shape for each input that is a
/// tensor of a known element type.
fn tensor_inputs(raw: RawInputs<'_>) -> Vec<Option<TensorShape>> {
    raw.dims
        .into_iter()
        .zip(raw.types)
        .map(|(dims, ty)| {
            let dtype = Dtype::parse(ty.0.as_deref()?)?;
            Some(TensorShape { dims: dims?, dtype })
        })
        .collect()
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
                TopKey::DistributedInfo => self.0.set_distributed(map.next_value()?),
                TopKey::BaseTime => self.0.set_base_time(map.next_value::<Num>()?.i64()),
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

/// The fast path: streams the whole buffer through `serde_json`, which
/// fails unless all of it is valid JSON.
pub(super) fn parse_strict(buf: &[u8]) -> serde_json::Result<Collected<'_>> {
    let mut col = Collector::default();
    let mut de = serde_json::Deserializer::from_slice(buf);
    TopSeed(&mut col).deserialize(&mut de)?;
    de.end()?;
    Ok(col.finish())
}
