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
use std::fmt;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::attribute::{sort_for_sweep, BeRec, Instant, OpKind, OpRec};
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
pub(super) struct Collected {
    /// Operator intervals from `X` events.
    pub(super) ops: Vec<OpRec>,
    /// Calls of the operators in [`EvidenceOp`], with their `record_shapes`
    /// inputs (times in µs, as memory events carry them).
    pub(super) evidence: Vec<OperatorCall>,
    /// `B`/`E` events, paired into intervals when the trace is built.
    pub(super) be: Vec<BeRec>,
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

/// The memory events already collected that carry `Ev Idx`, for the
/// duplicate check: a set of their indices in [`Collected::mems`], hashed
/// and compared by (thread, ts ns, Addr, Bytes, Ev Idx, Device Type,
/// Device Id), read from the event itself and its `Ev Idx` from
/// [`Dedupe::idx`]: eight bytes a slot, where a set of the keys themselves
/// took 81 (docs/performance.md, twenty-fourth session). A slot keeps its
/// key's hash, so that the table's rehashes do not read the events again.
#[derive(Default)]
struct Dedupe {
    /// (index in `mems`, the key's hash).
    set: hashbrown::HashTable<(u32, u32)>,
    /// Each memory event's `Ev Idx`, beside `mems` (`None`: not checked).
    idx: Vec<Option<i64>>,
    /// Every key hashed alike, so that the comparison alone tells them
    /// apart (the tests').
    #[cfg(test)]
    collide: bool,
}

/// The duplicate check's key of a memory event with `Ev Idx` `idx`, hashed
/// to 32 bits (what a slot keeps).
fn dedupe_hash(mem: &MemRec, idx: i64) -> u32 {
    use std::hash::BuildHasher;
    let h = rustc_hash::FxBuildHasher
        .hash_one((mem.thread, mem.ts_ns, mem.addr, mem.bytes, idx, mem.device));
    (h >> 32) as u32 ^ h as u32
}

/// A slot's hash as the table wants it: 64 bits, the top ones (the tags the
/// table compares first) depending on every bit of the 32 kept.
fn spread(h: u32) -> u64 {
    u64::from(h).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Whether two memory events are the same by the duplicate check's key.
fn same_event(a: &MemRec, a_idx: i64, b: &MemRec, b_idx: i64) -> bool {
    a_idx == b_idx
        && a.thread == b.thread
        && a.ts_ns == b.ts_ns
        && a.addr == b.addr
        && a.bytes == b.bytes
        && a.device == b.device
}

impl Dedupe {
    /// [`dedupe_hash`], or one hash for every key where the tests ask.
    fn key_hash(&self, mem: &MemRec, idx: i64) -> u32 {
        #[cfg(test)]
        if self.collide {
            return 7;
        }
        dedupe_hash(mem, idx)
    }

    /// Pushes `mem` onto `mems` unless it has `Ev Idx` `idx` and one equal
    /// to it by the key is there already; whether it was pushed. `record`:
    /// a pushed one is added to the set (false where nothing is checked
    /// after it: [`Collector::append`] without `more`). `mems` is the list
    /// every earlier push was given.
    fn push(
        &mut self,
        mems: &mut Vec<MemRec>,
        mem: MemRec,
        idx: Option<i64>,
        record: bool,
    ) -> bool {
        if let Some(idx) = idx {
            let h = self.key_hash(&mem, idx);
            let (list, idxs) = (&*mems, &self.idx);
            let eq = |&(j, hj): &(u32, u32)| {
                let j = j as usize;
                hj == h && idxs[j].is_some_and(|k| same_event(&list[j], k, &mem, idx))
            };
            if self.set.find(spread(h), eq).is_some() {
                return false;
            }
            if record {
                let at = mems.len() as u32;
                self.set
                    .insert_unique(spread(h), (at, h), |&(_, hj)| spread(hj));
            }
        }
        self.idx.push(idx);
        mems.push(mem);
        true
    }
}

/// Collects events one at a time into a [`Collected`]. It keeps nothing
/// borrowed from the events it is given, so a reader may hand it events
/// from a buffer it then reuses (`stream.rs`).
#[derive(Default)]
pub(super) struct Collector {
    threads: FxHashMap<(Id<'static>, Id<'static>), u32>,
    last_thread: Option<((Id<'static>, Id<'static>), u32)>,
    dedupe: Dedupe,
    /// Operator names, interned.
    names: FxHashSet<Arc<str>>,
    events_seen: u64,
    /// A `traceEvents` array (or the bare array form) was found.
    pub(super) saw_trace_events: bool,
    /// A collector of the end of a file (`split.rs`): what
    /// [`Collector::append`] needs to join it to the start's.
    tail: Option<Box<Tail>>,
    out: Collected,
}

/// What a collector of the end of a file keeps for [`Collector::append`].
#[derive(Default)]
struct Tail {
    /// The top-level values seen, which override the start's.
    devices: bool,
    distributed: bool,
    base_time: bool,
}

impl Collector {
    pub(super) fn finish(self) -> Collected {
        self.out
    }

    /// Sorts the operator intervals collected so far for the sweep
    /// ([`sort_for_sweep`]): what a thread of a split read does with its
    /// half before the join, so that the sort after it only merges.
    pub(super) fn sort_ops(&mut self) {
        sort_for_sweep(&mut self.out.ops);
    }

    /// A collector for the end of a file, to [`Collector::append`] to the
    /// collector of its start.
    pub(super) fn for_tail() -> Collector {
        Collector {
            tail: Some(Box::default()),
            ..Collector::default()
        }
    }

    /// Joins what `later` collected from the rest of the file (from the
    /// start of an element of `traceEvents` on) to this collector's: the
    /// result is what one collector would have collected from the whole
    /// file. Thread ids are dense in order of first appearance, positions
    /// count on from this collector's, memory events are deduplicated
    /// against this collector's, names are this collector's (one
    /// allocation per name, which the attribution tells frames apart by),
    /// and the later top-level values win. Nothing is to be collected after
    /// it: the duplicate keys of `later` are not added to this collector's
    /// set unless another collector is to be appended after it (`more`).
    pub(super) fn append(&mut self, later: Collector, more: bool) {
        let Collector {
            threads,
            names: later_names,
            events_seen,
            saw_trace_events,
            tail,
            out,
            dedupe: Dedupe { idx: later_idx, .. },
            ..
        } = later;
        let tail = tail.map(|t| *t).unwrap_or_default();
        let mut by_id: Vec<_> = threads.into_iter().collect();
        by_id.sort_unstable_by_key(|&(_, id)| id);
        let remap: Vec<u32> = by_id
            .into_iter()
            .map(|(key, _)| {
                let n = self.threads.len() as u32;
                *self.threads.entry(key).or_insert(n)
            })
            .collect();
        let thread = |t: u32| remap[t as usize];
        // Each of the later names this collector has too, by where the later
        // one is: its operators take this collector's. A name new here joins
        // the set as it is (its operators keep it). Each name's text is
        // hashed once, not each operator's.
        let mut same_name: FxHashMap<usize, Arc<str>> = FxHashMap::default();
        for name in later_names {
            match self.names.get(&name) {
                Some(known) => {
                    same_name.insert(name.as_ptr() as usize, Arc::clone(known));
                }
                None => {
                    self.names.insert(name);
                }
            }
        }
        let name = |n: Arc<str>| same_name.get(&(n.as_ptr() as usize)).map_or(n, Arc::clone);
        let offset = self.events_seen;
        let order = |o: u32| (offset + u64::from(o)).min(u32::MAX as u64) as u32;
        self.events_seen += events_seen;
        self.saw_trace_events |= saw_trace_events;
        self.last_thread = None;
        let mine = &mut self.out;
        let dedupe = &mut self.dedupe;
        // The operators and the memory events side by side (each ~4 ms of
        // a join on trace-owlv2.json): each closure takes its own fields.
        let ((), duplicates) = rayon::join(
            || {
                mine.ops.extend(out.ops.into_iter().map(|op| OpRec {
                    thread: thread(op.thread),
                    name: name(op.name),
                    ..op
                }));
                mine.evidence
                    .extend(out.evidence.into_iter().map(|call| OperatorCall {
                        thread: thread(call.thread),
                        ..call
                    }));
                mine.be.extend(out.be.into_iter().map(|be| BeRec {
                    thread: thread(be.thread),
                    order: order(be.order),
                    name: name(be.name),
                    ..be
                }));
            },
            || {
                let mut duplicates = 0;
                // The tail's events are distinct among themselves (its own
                // check dropped the rest; the thread remap keeps distinct
                // keys distinct), and nothing is collected after a join:
                // each is looked up in this collector's set, which is grown
                // only for a collector appended after this one.
                mine.mems.reserve(out.mems.len());
                dedupe.idx.reserve(out.mems.len());
                for (j, mem) in out.mems.into_iter().enumerate() {
                    let mem = MemRec {
                        thread: thread(mem.thread),
                        order: order(mem.order),
                        ..mem
                    };
                    let idx = later_idx.get(j).copied().flatten();
                    if !dedupe.push(&mut mine.mems, mem, idx, more) {
                        duplicates += 1;
                    }
                }
                duplicates
            },
        );
        if tail.devices {
            mine.devices = out.devices;
        }
        if tail.distributed {
            mine.distributed = out.distributed;
        }
        if tail.base_time {
            mine.base_time_ns = out.base_time_ns;
        }
        mine.amd_hint |= out.amd_hint;
        mine.dropped.duplicates += out.dropped.duplicates + duplicates;
        mine.dropped.without_ts += out.dropped.without_ts;
        mine.dropped.without_bytes += out.dropped.without_bytes;
    }

    /// A dense id per (pid, tid); consecutive events mostly share one.
    fn thread(&mut self, pid: &Id<'_>, tid: &Id<'_>) -> u32 {
        if let Some((key, id)) = &self.last_thread {
            if key.0 == *pid && key.1 == *tid {
                return *id;
            }
        }
        let n = self.threads.len() as u32;
        let key = (pid.clone().into_owned(), tid.clone().into_owned());
        let id = *self.threads.entry(key.clone()).or_insert(n);
        self.last_thread = Some((key, id));
        id
    }

    /// The interned copy of an operator name (`""` for none).
    fn name(&mut self, name: Option<&str>) -> Arc<str> {
        let name = name.unwrap_or_default();
        if let Some(known) = self.names.get(name) {
            return Arc::clone(known);
        }
        let new: Arc<str> = Arc::from(name);
        self.names.insert(Arc::clone(&new));
        new
    }

    /// Takes one event (by reference: readers build it in place).
    pub(super) fn push(&mut self, ev: &RawEvent<'_>) {
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
                let name = self.name(name.0.as_deref());
                if matches!(kind, OpKind::CpuOp | OpKind::UserAnnotation) {
                    if let Some(op) = EvidenceOp::from_name(&name)
                        .filter(|&op| kind == OpKind::CpuOp || op == EvidenceOp::AllReduce)
                    {
                        self.out.evidence.push(OperatorCall {
                            op,
                            thread,
                            start_us: start as f64 / 1000.0,
                            end_us: end as f64 / 1000.0,
                            inputs: inputs.as_ref().map(tensor_inputs).unwrap_or_default(),
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
                let name = self.name(name.0.as_deref());
                self.out.be.push(BeRec {
                    thread,
                    ts: t,
                    order,
                    begin: ph == "B",
                    kind: OpKind::of_category(cat.0.as_deref()),
                    name,
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
                // Only events that carry `Ev Idx` are deduplicated: without
                // it, two equal allocations in the same microsecond are
                // legitimate (2021 schema, integer µs timestamps).
                let mem = MemRec {
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
                };
                if !self
                    .dedupe
                    .push(&mut self.out.mems, mem, args.ev_idx.i64(), true)
                {
                    self.out.dropped.duplicates += 1;
                }
            }
        }
    }

    pub(super) fn set_device_props(&mut self, props: Vec<DeviceProp<'_>>) {
        if let Some(tail) = &mut self.tail {
            tail.devices = true;
        }
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
        if let Some(tail) = &mut self.tail {
            tail.distributed = true;
        }
        let number = |n: Num| n.u64().and_then(|v| u32::try_from(v).ok());
        self.out.distributed = match (number(info.rank), number(info.world_size)) {
            (Some(rank), Some(world_size)) => Distributed::new(rank, world_size),
            _ => None,
        };
    }

    pub(super) fn set_base_time(&mut self, ns: Option<i64>) {
        if let Some(tail) = &mut self.tail {
            tail.base_time = true;
        }
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
fn tensor_inputs(raw: &RawInputs<'_>) -> Vec<Option<TensorShape>> {
    raw.dims
        .iter()
        .zip(&raw.types)
        .map(|(dims, ty)| {
            let dtype = Dtype::parse(ty.0.as_deref()?)?;
            Some(TensorShape {
                dims: dims.clone()?,
                dtype,
            })
        })
        .collect()
}

/// Streams the top level (object or array form) into a [`Collector`].
struct TopSeed<'c>(&'c mut Collector);

impl<'de, 'c> DeserializeSeed<'de> for TopSeed<'c> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'c> Visitor<'de> for TopSeed<'c> {
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
struct EventsSeed<'c>(&'c mut Collector);

impl<'de, 'c> DeserializeSeed<'de> for EventsSeed<'c> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, 'c> Visitor<'de> for EventsSeed<'c> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        self.0.saw_trace_events = true;
        while let Some(ev) = seq.next_element_seed(EventSeed)? {
            if let Some(ev) = ev {
                self.0.push(&ev);
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
pub(super) fn parse_strict(buf: &[u8]) -> serde_json::Result<Collected> {
    let mut col = Collector::default();
    let mut de = serde_json::Deserializer::from_slice(buf);
    TopSeed(&mut col).deserialize(&mut de)?;
    de.end()?;
    Ok(col.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::chrome::skeleton::LStr;
    use proptest::prelude::*;

    fn mem(thread: u32, ts_ns: i64, addr: Option<u64>, bytes: i64, device: u8) -> MemRec {
        MemRec {
            thread,
            order: 0,
            ts_ns,
            ts_us: 0.0,
            oom: false,
            bytes,
            addr,
            device: (Some(1), Some(i64::from(device))),
            allocated: None,
            reserved: None,
        }
    }

    /// A join leaves one allocation per operator name, as one collector
    /// makes (the attribution tells frames apart by it): a name the first
    /// collector has is taken from it, a new one kept, in operators and
    /// `B`/`E` events alike.
    #[test]
    fn a_join_keeps_one_allocation_per_name() {
        let event = |ph: &'static str, name: &'static str, ts: i64| RawEvent {
            ph: LStr(Some(ph.into())),
            cat: LStr(Some("cpu_op".into())),
            name: LStr(Some(name.into())),
            pid: Id::Int(1),
            tid: Id::Int(1),
            ts: Num::I(ts),
            dur: Num::I(1),
            ..RawEvent::default()
        };
        let mut first = Collector::default();
        first.push(&event("X", "aten::mm", 1));
        first.push(&event("X", "aten::relu", 2));
        let mut later = Collector::for_tail();
        for (k, name) in ["aten::mm", "aten::add", "aten::mm", "aten::add"]
            .into_iter()
            .enumerate()
        {
            later.push(&event("X", name, 10 + k as i64));
        }
        later.push(&event("B", "aten::mm", 20));
        later.push(&event("E", "aten::add", 21));
        first.append(later, false);
        let out = first.finish();
        assert_eq!(out.ops.len(), 6);
        assert_eq!(out.be.len(), 2);
        let names: Vec<&Arc<str>> = out
            .ops
            .iter()
            .map(|o| &o.name)
            .chain(out.be.iter().map(|b| &b.name))
            .collect();
        for a in &names {
            for b in &names {
                assert_eq!(a == b, Arc::ptr_eq(a, b), "{a} and {b}");
            }
        }
    }

    proptest! {
        /// The duplicate check keeps what a set of the whole keys keeps:
        /// events equal in every field of the key but one (few values per
        /// field, so near misses are common), without `Ev Idx` never
        /// dropped, a set that grows and rehashes meanwhile.
        #[test]
        fn duplicates_dropped_as_a_set_of_keys_drops_them(
            events in prop::collection::vec(
                (0u32..3, 0i64..3, prop::option::of(0u64..2), 1i64..3, prop::option::of(0i64..3), 0u8..2),
                0..300,
            ),
            record_every in 1usize..4,
            collide in any::<bool>(),
        ) {
            let mut dedupe = Dedupe {
                collide,
                ..Dedupe::default()
            };
            let mut mems = Vec::new();
            let mut keys = std::collections::HashSet::new();
            let mut kept = Vec::new();
            for (n, &(t, ts, addr, bytes, idx, dev)) in events.iter().enumerate() {
                // Now and then looked up and not added, as a join without
                // `more` does.
                let record = n % record_every == 0;
                let pushed = dedupe.push(&mut mems, mem(t, ts, addr, bytes, dev), idx, record);
                let fresh = match idx {
                    None => true,
                    Some(idx) if record => keys.insert((t, ts, addr, bytes, idx, dev)),
                    Some(idx) => !keys.contains(&(t, ts, addr, bytes, idx, dev)),
                };
                prop_assert_eq!(pushed, fresh, "event {}", n);
                if fresh {
                    kept.push((t, ts, addr, bytes, dev));
                }
            }
            let got: Vec<_> = mems
                .iter()
                .map(|m| (m.thread, m.ts_ns, m.addr, m.bytes, m.device.1.unwrap() as u8))
                .collect();
            prop_assert_eq!(got, kept);
        }
    }
}
