//! PyTorch CUDA caching-allocator snapshots (formats.md part A) → `Trace`.
//!
//! The pickle is read by our own unpickler ([`super::pickle`]); while it
//! streams, every trace entry (`{"action": …}`) is lowered into a compact
//! `Event` by `EntryLowering` (`lowering.rs`) — most of them straight
//! from the pickle's bytes, without a dict ever being built — so a 1M-entry
//! snapshot never holds 1M generic dicts. A memoized frames list is turned
//! into a site once and recognised afterwards by its identity; segment and
//! block dicts are read as they stream too (`allocator_state.rs`), and a
//! trace list keeps one handle per batch of consecutive entries rather than
//! one per entry (`EntryLowering::run_of`: 16 MB of a 1M-entry snapshot's
//! peak). This file assembles the `Trace` from what is left (`build_trace`).
//!
//! `generate.rs` (tests and fuzzing only) builds snapshot-shaped pickles and
//! holds the oracle of the differential tests: the plain path and the fast
//! paths must agree on every input.
//!
//! The same builder serves the JSON form of the schema, the legacy top-level
//! list of segments, and the base64 pickle inside `_memory_viz.py` HTML.

use std::collections::BTreeMap;
use std::io::BufRead;

use super::pickle::{self, Limits, Value};
use crate::error::{Error, Result};
use crate::model::{Annotation, DeviceTrace, Diagnostic, Event, Format, Segment, SiteId, Trace};

mod allocator_state;
mod lowering;

use lowering::EntryLowering;
#[cfg(any(test, feature = "fuzzing"))]
use lowering::Plain;

/// Reads a pickled snapshot from a stream.
pub fn parse_pickle<R: BufRead>(reader: R, limits: &Limits) -> Result<Trace> {
    parse_pickle_hinted(reader, limits, None)
}

/// [`parse_pickle`] with hints found ahead in the same bytes (see
/// [`pickle::unpickle_hinted`]).
pub(crate) fn parse_pickle_hinted<R: BufRead>(
    reader: R,
    limits: &Limits,
    hints: Option<std::rc::Rc<pickle::GetRunHints>>,
) -> Result<Trace> {
    let mut lowering = EntryLowering::default();
    let root = pickle::unpickle_hinted(reader, limits, &mut lowering, hints)?;
    build_trace(&root, lowering)
}

/// Reads a snapshot saved as JSON (same schema; tuples as arrays).
pub fn parse_json(bytes: &[u8]) -> Result<Trace> {
    let json: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Error::Json(e.to_string()))?;
    build_trace(&json_to_value(&json), EntryLowering::default())
}

/// Extracts the pickle that `_memory_viz.py trace_plot` embeds as base64 in
/// its HTML (`"base64": "…"`) and parses it.
pub fn parse_memory_viz_html(bytes: &[u8], limits: &Limits) -> Result<Trace> {
    use base64::Engine;
    let key = b"\"base64\":";
    let start = memchr::memmem::find(bytes, key)
        .ok_or_else(|| Error::UnknownFormat("HTML without an embedded memory snapshot".into()))?;
    let rest = &bytes[start + key.len()..];
    let open = memchr::memchr(b'"', rest)
        .ok_or_else(|| Error::Schema("unterminated base64 snapshot in HTML".into()))?;
    let body = &rest[open + 1..];
    let close = memchr::memchr(b'"', body)
        .ok_or_else(|| Error::Schema("unterminated base64 snapshot in HTML".into()))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(&body[..close])
        .map_err(|e| Error::Schema(format!("bad base64 snapshot in HTML: {e}")))?;
    parse_pickle(&decoded[..], limits)
}

/// Assembles the [`Trace`] from the unpickled root and the lowered entries.
fn build_trace(root: &Value, mut lowering: EntryLowering) -> Result<Trace> {
    let mut trace = Trace::new(Format::TorchSnapshot);
    let (segments, device_traces) = match root {
        Value::Dict(_) => {
            let segments = root.get("segments");
            let traces = root.get("device_traces");
            if segments.is_none() && traces.is_none() {
                return Err(Error::Schema(
                    "a dict without `segments` or `device_traces`".into(),
                ));
            }
            (segments, traces)
        }
        // Legacy `torch.cuda.memory_snapshot()`: a bare list of segments.
        Value::List(_) => (Some(root.clone()), None),
        other => {
            return Err(Error::Schema(format!(
                "top level is a {}, expected a dict",
                other.type_name()
            )))
        }
    };

    // Device traces: lists of handles (pickle) or of dicts (JSON).
    let mut per_device: Vec<Vec<Event>> = Vec::new();
    let mut profile_derived = false;
    // Counted per appearance in a trace, however the entry was lowered.
    let mut entries_without_frames = 0u64;
    if let Some(traces) = &device_traces {
        let lists = traces
            .list_items()
            .ok_or_else(|| Error::Schema("`device_traces` is not a list".into()))?;
        for list in lists.iter() {
            // (Only for a single list: another could refer to the same events.)
            let taken = match lists.len() {
                1 => take_in_order(&mut lowering, list),
                _ => None,
            };
            if let Some(events) = taken {
                profile_derived |= events.iter().any(|e| e.given.is_some());
                let framed: u32 = lowering.framed.iter().map(|w| w.count_ones()).sum();
                entries_without_frames += events.len() as u64 - u64::from(framed);
                per_device.push(events);
                continue;
            }
            let mut events = Vec::new();
            if let Some(items) = list.list_items() {
                for item in items.iter() {
                    let handle = match item {
                        Value::Handle(h) => *h,
                        Value::Dict(d) => {
                            match lowering.entry_of_dict(&d.borrow()).map_err(Error::Schema)? {
                                Some(handle) => handle,
                                None => continue,
                            }
                        }
                        _ => continue,
                    };
                    for index in lowering.events_of_handle(handle).unwrap_or_default() {
                        let event = lowering.events[index as usize];
                        profile_derived |= event.given.is_some();
                        entries_without_frames += u64::from(!lowering.is_framed(index as usize));
                        events.push(event);
                    }
                }
            }
            per_device.push(events);
        }
    }
    lowering.events = Vec::new();

    // Segments at dump time, grouped by device ordinal.
    let mut segs_by_device: BTreeMap<i64, Vec<Segment>> = BTreeMap::new();
    let mut blocks_without_frames = 0u64;
    // Every segment lacks the allocator's own fields (see `segment_of`).
    let mut synthetic_segments = true;
    if let Some(segments) = &segments {
        let items = segments
            .list_items()
            .ok_or_else(|| Error::Schema("`segments` is not a list".into()))?;
        // A lowered segment is moved out of the lowering at its last place
        // in the list (the memo can list one twice), copied before: copying
        // each was most of this step (cs336-nothanmin forward × 112: 193K
        // segments, 465K blocks).
        let mut last_place = vec![usize::MAX; lowering.segments.len()];
        for (k, seg) in items.iter().enumerate() {
            if let Some(place) =
                allocator_state::lowered_segment(seg).and_then(|i| last_place.get_mut(i))
            {
                *place = k;
            }
        }
        for (k, seg) in items.iter().enumerate() {
            let last = |i: usize| last_place.get(i) == Some(&k);
            let fields = allocator_state::segment_item(seg, &mut lowering, last)?;
            blocks_without_frames += fields.blocks_without_frames;
            synthetic_segments &= fields.synthetic;
            segs_by_device
                .entry(fields.device)
                .or_default()
                .push(fields.segment);
        }
    }
    let uses_an_entry_site = |site: SiteId| lowering.sites_with_entries.contains(&site);
    if !lowering.sites_with_entries.is_empty()
        && (per_device
            .iter()
            .flatten()
            .any(|e| uses_an_entry_site(e.site))
            || segs_by_device
                .values()
                .flatten()
                .flat_map(|s| &s.blocks)
                .any(|b| uses_an_entry_site(b.site)))
    {
        // PyTorch writes frames as `{filename, line, name}`; an entry there
        // is no traceback memcut can attribute (and was once misread as one).
        return Err(Error::Schema(
            "a `frames` list holds a trace entry (a dict with an `action`), not a frame".into(),
        ));
    }

    // Ordinals that have events or segments (a hostile `device: 2**60` names
    // one device, not a range of 2**60 to walk).
    let ordinals: std::collections::BTreeSet<usize> = (0..per_device.len())
        .chain(
            segs_by_device
                .keys()
                .filter_map(|&d| usize::try_from(d).ok()),
        )
        .collect();
    for ordinal in ordinals {
        let events = per_device
            .get_mut(ordinal)
            .map(std::mem::take)
            .unwrap_or_default();
        let segments = segs_by_device.remove(&(ordinal as i64));
        // `_profile_to_snapshot` appends the CPU as the last list.
        let name = if profile_derived && ordinal + 1 == per_device.len() {
            "cpu".to_owned()
        } else {
            format!("cuda:{ordinal}")
        };
        if events.is_empty() && segments.as_ref().is_none_or(|s| s.is_empty()) {
            continue;
        }
        trace.devices.push(DeviceTrace {
            device: name,
            events,
            reported: Vec::new(),
            segments: Some(segments.unwrap_or_default()),
            segments_show_reserved: !profile_derived && !synthetic_segments,
            capacity_bytes: None,
            compute_capability: None,
            op_calls: Vec::new(),
        });
    }
    if let Some(host) = segs_by_device.remove(&-1) {
        trace.diagnostics.push(Diagnostic::info(format!(
            "{} pinned host segments present; not analysed",
            host.len()
        )));
    }

    trace.annotations = parse_annotations(root);
    trace.run.expandable_segments = root
        .get("allocator_settings")
        .and_then(|s| s.get("expandable_segments"))
        .and_then(|v| v.as_bool());
    let without_frames = Unattributed {
        entries: entries_without_frames,
        blocks: blocks_without_frames,
    };
    diagnose(root, &lowering, without_frames, &mut trace);
    if profile_derived {
        trace.diagnostics.push(Diagnostic::info(
            "profile-derived snapshot (_profile_to_snapshot): PyTorch's own categories are present and ignored by the classifier",
        ));
    }
    trace.sites = std::mem::take(&mut lowering.sites);
    if trace.devices.is_empty() {
        trace.diagnostics.push(Diagnostic::warning(
            "the snapshot has no devices with events or segments",
        ));
    }
    Ok(trace)
}

/// All of the lowering's events when `list` holds exactly their handles
/// in order, one by one or in runs (one device whose entries were all
/// lowered: the common case), without copying.
fn take_in_order(lowering: &mut EntryLowering, list: &Value) -> Option<Vec<Event>> {
    let items = list.list_items()?;
    if lowering.events.is_empty() {
        return None;
    }
    let mut next = 0u32;
    for item in items.iter() {
        let Value::Handle(h) = item else {
            return None;
        };
        let run = lowering.events_of_handle(*h)?;
        if run.start != next {
            return None;
        }
        next = run.end;
    }
    (next as usize == lowering.events.len()).then(|| std::mem::take(&mut lowering.events))
}

/// `external_annotations` START/END marks → time ranges, paired per (name, device).
fn parse_annotations(root: &Value) -> Vec<Annotation> {
    let Some(list) = root.get("external_annotations") else {
        return Vec::new();
    };
    let Some(items) = list.list_items() else {
        return Vec::new();
    };
    // Ordered: the ranges still open at the end are listed in its order.
    let mut open: BTreeMap<(String, Option<i64>), Vec<f64>> = BTreeMap::new();
    let mut out = Vec::new();
    for item in items.iter() {
        let (Some(name), Some(stage), Some(t)) = (
            item.get("name").and_then(|v| v.as_str().map(str::to_owned)),
            item.get("stage")
                .and_then(|v| v.as_str().map(str::to_owned)),
            item.get("time_us").and_then(|v| v.as_f64()),
        ) else {
            continue;
        };
        let device = item.get("device").and_then(|v| v.as_i64());
        let key = (name, device);
        match stage.as_str() {
            "START" => open.entry(key).or_default().push(t),
            "END" => {
                if let Some(start) = open.get_mut(&key).and_then(|v| v.pop()) {
                    out.push(Annotation {
                        name: key.0,
                        device: key.1,
                        start_us: start,
                        end_us: t,
                    });
                }
            }
            _ => {}
        }
    }
    // Ranges still open at dump time last until the end.
    for ((name, device), starts) in open {
        for start in starts {
            out.push(Annotation {
                name: name.clone(),
                device,
                start_us: start,
                end_us: f64::INFINITY,
            });
        }
    }
    // A total order (ties of time and name once came out in a HashMap's order).
    out.sort_by(|a, b| {
        (a.start_us.total_cmp(&b.start_us))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.device.cmp(&b.device))
            .then_with(|| a.end_us.total_cmp(&b.end_us))
    });
    out
}

/// Trace entries and live blocks without frames.
struct Unattributed {
    entries: u64,
    blocks: u64,
}

fn diagnose(
    root: &Value,
    lowering: &EntryLowering,
    without_frames: Unattributed,
    trace: &mut Trace,
) {
    let overflowed = root
        .get("allocator_settings")
        .and_then(|s| s.get("trace_alloc_overflowed"))
        .or_else(|| root.get("trace_alloc_overflowed"))
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    if overflowed {
        trace.diagnostics.push(Diagnostic::warning(
            "the allocator's history ring buffer wrapped (trace_alloc_overflowed): the oldest events are missing",
        ));
    }
    for (name, count) in &lowering.unknown_actions {
        trace.diagnostics.push(Diagnostic::info(format!(
            "{count} trace entries with action `{name}` skipped"
        )));
    }
    if without_frames.entries > 0 {
        trace.diagnostics.push(Diagnostic::info(format!(
            "{} trace entries carry no frames (recorded without context): their sites are unknown",
            without_frames.entries
        )));
    }
    if lowering.bad_numbers > 0 {
        trace.diagnostics.push(Diagnostic::warning(format!(
            "{} trace entry fields (addr/size/device_free) are negative or not integers: read as 0, so sizes may be understated",
            lowering.bad_numbers
        )));
    }
    if without_frames.blocks > 0 {
        trace.diagnostics.push(Diagnostic::info(format!(
            "{} live blocks at dump time have no frames",
            without_frames.blocks
        )));
    }
}

/// JSON snapshot → the same value tree the unpickler builds.
fn json_to_value(json: &serde_json::Value) -> Value {
    use std::cell::RefCell;
    use std::rc::Rc;
    match json {
        serde_json::Value::Null => Value::None,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::BigInt(Box::new(u as i128)),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::Str(Rc::new(Box::from(s.as_str()))),
        serde_json::Value::Array(items) => Value::List(Rc::new(RefCell::new(
            items.iter().map(json_to_value).collect(),
        ))),
        serde_json::Value::Object(map) => Value::Dict(Rc::new(RefCell::new(
            map.iter()
                .map(|(k, v)| (Value::Str(Rc::new(Box::from(k.as_str()))), json_to_value(v)))
                .collect(),
        ))),
    }
}

#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod generate;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) use tests::record_tests;
