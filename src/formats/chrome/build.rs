//! Trace building: from what collection kept ([`Collected`]) to the
//! [`Trace`] the analysis reads.
//!
//! Pairs `B`/`E` events, lifts annotations (`user_annotation` ranges and
//! `ProfilerStep#N`) out of the operator intervals, gives every memory event
//! its operator site (`attribute.rs`), names and orders the devices
//! (formats.md B4), turns memory events into per-device events with the
//! allocator's reported totals, and says in diagnostics what the trace
//! lacks (addresses, totals, operators) or what was dropped.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use super::attribute::{attribute, pair_begin_end, Attributed, OpKind, OpRec, Operators};
use super::collect::{Collected, DeviceInfo, MemRec};
use super::ReadError;
use crate::model::{
    Action, Annotation, DeviceTrace, Diagnostic, Dtype, Event, EvidenceOp, Format, OpCall,
    OperatorCall, ReportedTotals, RunInfo, SiteId, Trace,
};

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

/// (`Device Type`, `Device Id`) of a memory event.
type DeviceKey = (Option<i64>, Option<i64>);

/// Operators from this many on are freed on a thread of their own
/// (`aside`): trace-owlv2.json's 540K took ~3 ms to free after the
/// attribution; a small trace's few are freed here.
const FREED_ASIDE: usize = 100_000;

/// Builds the trace; `diagnostics` holds what the reading pass found.
pub(super) fn build_trace(
    col: Collected,
    mut diagnostics: Vec<Diagnostic>,
) -> Result<Trace, ReadError> {
    let Collected {
        mut ops,
        evidence,
        be,
        mems,
        devices: device_info,
        base_time_ns,
        distributed,
        amd_hint,
        dropped,
    } = col;
    if mems.is_empty() {
        return Err(ReadError::NoMemoryEvents);
    }
    let mut trace = Trace::new(Format::ChromeTrace);
    trace.distributed = distributed;
    let unclosed = pair_begin_end(be, &mut ops);
    if unclosed > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "{unclosed} `B` event(s) have no matching `E`; they are treated as open to the end of the trace"
        )));
    }

    let total_mem = mems.len();
    let ops = Operators::new(ops);
    // The attribution (the longest step) beside what does not need it: the
    // run's facts and annotations (neither depends on the operators' order,
    // so they read them as `Operators` sorted them), the devices and the
    // events' order.
    let sites = &mut trace.sites;
    let devices = &mut trace.devices;
    let (attributed, (run, annotations, keys, order)) = rayon::join(
        || attribute(&ops, &mems, MemRec::instant, sites),
        || {
            let run = run_info(ops.all(), &evidence);
            let annotations = annotations(ops.all(), &mems);
            let (by_device, keys) = add_devices(devices, &mems, &device_info);
            let order = event_order(&mems, &by_device);
            (run, annotations, keys, order)
        },
    );
    let Attributed {
        sites: site_of,
        calls: call_of,
        unattributed,
    } = attributed;
    let many = ops.len() >= FREED_ASIDE;
    crate::aside::free(ops, many);
    trace.run = run;
    trace.annotations = annotations;
    trace.evidence = evidence;
    let without_addr = add_events(&mut trace, mems, site_of, call_of, order);
    let devices_without_totals = drop_missing_totals(&mut trace);

    let amd_names = device_info.iter().any(|d| looks_amd(&d.name));
    if keys.iter().any(|k| k.0 == Some(1)) && (amd_hint || amd_names) {
        diagnostics.push(Diagnostic::info(
            "ROCm device (PyTorch reports HIP as cuda): `cuda:N` devices here are AMD GPUs",
        ));
    }
    if keys.iter().any(|k| k.0.is_none()) {
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
    if dropped.duplicates > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "removed {} duplicate memory event(s) (same pid, tid, ts, Addr, Bytes, Ev Idx)",
            dropped.duplicates
        )));
    }
    if unattributed.outside > 0 {
        let (outside, no_ops) = (unattributed.outside, unattributed.on_threads_without_ops);
        let detail = if no_ops > 0 {
            format!(", {no_ops} of them on threads without operators")
        } else {
            String::new()
        };
        diagnostics.push(Diagnostic::info(format!(
            "{outside} of {total_mem} memory events happen outside any operator{detail}; they have no operator stack"
        )));
    }
    if dropped.without_ts > 0 {
        diagnostics.push(Diagnostic::warning(format!(
            "ignored {} memory event(s) without a usable `ts`",
            dropped.without_ts
        )));
    }
    if dropped.without_bytes > 0 {
        diagnostics.push(Diagnostic::info(format!(
            "ignored {} memory event(s) with zero or missing `Bytes`",
            dropped.without_bytes
        )));
    }
    if let Some(base) = base_time_ns {
        diagnostics.push(Diagnostic::info(format!(
            "timestamps are relative to baseTimeNanoseconds = {base} (epoch ns)"
        )));
    }
    trace.diagnostics = diagnostics;
    Ok(trace)
}

/// What the planner reads about the run as a whole: every operator name
/// with its count, the weights' dtypes (the second input of linear layers
/// and library GEMMs, where `record_shapes` recorded it).
fn run_info(ops: &[OpRec], evidence: &[OperatorCall]) -> RunInfo {
    // Counted by where the name is (the collector interns names, so an
    // operator name is one allocation or a few), then by its text: no
    // string is hashed per operator (trace-owlv2.json: 540K operators,
    // ~8 ms of hashing).
    let mut by_place: FxHashMap<*const u8, (&str, u64)> = FxHashMap::default();
    for o in ops {
        by_place.entry(o.name.as_ptr()).or_insert((&o.name, 0)).1 += 1;
    }
    let mut counts: FxHashMap<&str, u64> = FxHashMap::default();
    for (name, n) in by_place.into_values() {
        *counts.entry(name).or_default() += n;
    }
    let mut operators: Vec<(String, u64)> =
        counts.into_iter().map(|(n, c)| (n.to_owned(), c)).collect();
    operators.sort_unstable();
    let mut by_dtype: HashMap<Dtype, u64> = HashMap::new();
    for call in evidence {
        if matches!(call.op, EvidenceOp::Linear | EvidenceOp::LibraryGemm) {
            if let Some(Some(weight)) = call.inputs.get(1) {
                *by_dtype.entry(weight.dtype).or_default() += 1;
            }
        }
    }
    let mut dtypes: Vec<(Dtype, u64)> = by_dtype.into_iter().collect();
    dtypes.sort_unstable();
    RunInfo {
        operators,
        weight_dtypes: dtypes,
        expandable_segments: None,
    }
}

/// `user_annotation` ranges and `ProfilerStep#N` under any category, sorted
/// by start, longest first; an unclosed one ends with the trace.
fn annotations(ops: &[OpRec], mems: &[MemRec]) -> Vec<Annotation> {
    let last_ts = mems.iter().map(|m| m.ts_ns).max().unwrap_or(0);
    let last_op = ops
        .iter()
        .map(|o| if o.end == i64::MAX { o.start } else { o.end })
        .max()
        .unwrap_or(0);
    let trace_end = last_ts.max(last_op);
    let mut annotations: Vec<Annotation> = ops
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
    annotations
}

/// Adds one device per name the memory events' keys map to, in display
/// order, with its capacity from `deviceProperties`. Returns each key's
/// device index, and the keys seen.
fn add_devices(
    devices: &mut Vec<DeviceTrace>,
    mems: &[MemRec],
    info: &[DeviceInfo],
) -> (FxHashMap<DeviceKey, usize>, Vec<DeviceKey>) {
    let mut keys: Vec<DeviceKey> = mems.iter().map(|m| m.device).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut labelled: Vec<_> = keys
        .iter()
        .map(|&k| {
            let (name, sort) = device_label(k.0, k.1);
            (sort, name, k)
        })
        .collect();
    labelled.sort();
    let mut by_device: FxHashMap<DeviceKey, usize> = FxHashMap::default();
    // Keys that name the same device (the CPU under any `Device Id`, or a
    // missing id read as 0) share one device: two devices may not share a name.
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (_, name, key) in labelled.iter() {
        if let Some(&i) = by_name.get(name.as_str()) {
            by_device.insert(*key, i);
            continue;
        }
        let i = devices.len();
        by_name.insert(name, i);
        by_device.insert(*key, i);
        let props = match key.0 {
            Some(0) => None,
            _ => key.1.and_then(|id| info.iter().find(|d| d.id == Some(id))),
        };
        devices.push(DeviceTrace {
            device: name.clone(),
            capacity_bytes: props.and_then(|d| d.total_memory),
            // AMD devices report a gfx version in the same fields.
            compute_capability: props
                .filter(|d| !looks_amd(&d.name))
                .and_then(|d| d.compute),
            ..DeviceTrace::default()
        });
    }
    (by_device, keys)
}

/// Appends every memory event to its device, in (time, file) order, with
/// its site, operator call and reported totals. Returns how many carry no
/// `Addr`.
///
/// The order is found by sorting indices (4 bytes each, [`event_order`],
/// beside the attribution), not the events (80 bytes with their site and
/// call), and each device's lists are sized once: trace-owlv2.json (81K
/// memory events, 2 devices), this step and `add_devices` 18 ms -> 8 ms.
/// With the run's facts and annotations also beside the attribution, the
/// whole build (timed inside, 5 runs each, medians) trace-owlv2 98 -> 89
/// ms, trace-adamw 94 -> 91 ms.
fn add_events(
    trace: &mut Trace,
    mems: Vec<MemRec>,
    site_of: Vec<SiteId>,
    call_of: Vec<Option<OpCall>>,
    EventOrder { device_of, order }: EventOrder,
) -> usize {
    let mut counts = vec![0usize; trace.devices.len()];
    for &d in &device_of {
        counts[d as usize] += 1;
    }
    for (d, &n) in trace.devices.iter_mut().zip(&counts) {
        d.events.reserve_exact(n);
        d.reported.reserve_exact(n);
        d.op_calls.reserve_exact(n);
    }
    let mut without_addr = 0usize;
    for i in order {
        let (i, m) = (i as usize, &mems[i as usize]);
        let d = &mut trace.devices[device_of[i] as usize];
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
            site: site_of[i],
            addr: m.addr.unwrap_or(0),
            size,
            ts_us: m.ts_us,
        });
        d.reported.push(ReportedTotals {
            allocated: m.allocated,
            reserved: m.reserved,
        });
        d.op_calls.push(call_of[i]);
    }
    without_addr
}

/// Each memory event's device, and the events in (device, time, file)
/// order, as indices.
struct EventOrder {
    device_of: Vec<u32>,
    order: Vec<u32>,
}

fn event_order(mems: &[MemRec], by_device: &FxHashMap<DeviceKey, usize>) -> EventOrder {
    let device_of: Vec<u32> = mems.iter().map(|m| by_device[&m.device] as u32).collect();
    let mut order: Vec<u32> = (0..mems.len() as u32).collect();
    order.sort_by_key(|&i| {
        let m = &mems[i as usize];
        (device_of[i as usize], m.ts_ns, m.order)
    });
    EventOrder { device_of, order }
}

/// Clears the reported totals of devices whose events carry none; returns
/// their names.
fn drop_missing_totals(trace: &mut Trace) -> Vec<String> {
    let mut names = Vec::new();
    for d in &mut trace.devices {
        if d.reported
            .iter()
            .all(|r| r.allocated.is_none() && r.reserved.is_none())
        {
            d.reported.clear();
            names.push(d.device.clone());
        }
    }
    names
}
