//! PyTorch CUDA caching-allocator snapshots (formats.md part A) → [`Trace`].
//!
//! The pickle is read by our own unpickler ([`super::pickle`]); while it
//! streams, every trace entry (`{"action": …}`) is lowered into a compact
//! [`Event`] by [`EntryLowering`] — most of them straight from the pickle's
//! bytes, without a dict ever being built — so a 1M-entry snapshot never
//! holds 1M generic dicts. A memoized frames list is turned into a site once
//! and recognised afterwards by its identity.
//!
//! The same builder serves the JSON form of the schema, the legacy top-level
//! list of segments, and the base64 pickle inside `_memory_viz.py` HTML.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use rustc_hash::FxHashMap;

use super::pickle::{self, Handle, Hook, Item, Limits, Lowered, Records, Value};
use crate::error::{Error, Result};
use crate::model::{
    Action, Annotation, Block, BlockState, Category, DeviceTrace, Diagnostic, Event, Format, Frame,
    Segment, SiteId, Sites, Trace,
};

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

/// Lowers dicts to compact records while the unpickler streams:
/// trace entries (`{"action": …}`) become [`Event`]s and frame dicts
/// (`{"filename", "line", "name"}`) become [`Frame`]s, each replaced in the
/// value tree by a [`Value::Handle`]. Real dumps share frame *dicts* across
/// entries (memoized), so a frame is decoded once; each entry's frames list
/// is interned into a site and then emptied, keeping memory near the size of
/// the compact records.
#[derive(Default)]
struct EntryLowering {
    sites: Sites,
    events: Vec<Event>,
    frames: Vec<Frame>,
    unknown_actions: BTreeMap<String, u64>,
    /// A bit per event: whether its entry had `frames` (counted per
    /// appearance in a device's trace, see [`build_trace`]).
    framed: Vec<u64>,
    /// Sites by the frame handles of a traceback: a traceback seen before is
    /// recognised by hashing its handles, without resolving its frames.
    site_by_handles: FxHashMap<Box<[Handle]>, SiteId>,
    /// Scratch for the handles of the list being lowered.
    handles: Vec<Handle>,
    /// `addr`/`size`/`device_free` values that are negative or not integers.
    bad_numbers: u64,
    /// Items of `frames` lists that are trace entries (dicts with an
    /// `action`), not frames: the snapshot is refused (see [`build_trace`]).
    entries_in_frames: u64,
}

impl Hook for EntryLowering {
    fn on_list_dict(
        &mut self,
        dict: &[(Value, Value)],
    ) -> std::result::Result<Option<Value>, String> {
        if let Some(handle) = self.entry_of_dict(dict)? {
            return Ok(Some(Value::Handle(handle)));
        }
        if has_key(dict, "filename") && has_key(dict, "name") {
            let frame = frame_of(&mut self.sites, dict);
            let handle = Handle::frame(self.frames.len())?;
            self.frames.push(frame);
            return Ok(Some(Value::Handle(handle)));
        }
        Ok(None)
    }

    /// A trace entry with a known action is lowered as soon as its pairs are
    /// complete; its dict keeps only a marker pair `(Handle(marker), None)`,
    /// recognised when the dict is appended to its trace list.
    /// Anything else (unknown actions, malformed entries) waits for
    /// [`Hook::on_list_dict`], which has the last word.
    fn on_dict_items(
        &mut self,
        items: &[Value],
    ) -> std::result::Result<Option<(Value, Value)>, String> {
        Ok(self.lower_entry(items)?.map(marker))
    }

    /// Keys added to a trace entry after it was lowered (through the memo,
    /// which holds its event handle): they overwrite its fields, as they
    /// would have in its dict.
    fn on_handle_items(
        &mut self,
        handle: Handle,
        items: &[Value],
    ) -> std::result::Result<bool, String> {
        let Lowered::Event(index) = handle.lowered() else {
            return Ok(false);
        };
        self.patch_event(index, items.chunks_exact(2).map(|c| (&c[0], &c[1])));
        Ok(true)
    }

    /// A traceback whose frames are all frame handles becomes a one-item
    /// list holding its site's handle, so no frames list is ever built.
    fn on_list_items(&mut self, items: &[Value]) -> std::result::Result<Option<Value>, String> {
        let mut handles = std::mem::take(&mut self.handles);
        handles.clear();
        for item in items {
            match item {
                Value::Handle(h) => handles.push(*h),
                _ => return Ok(None),
            }
        }
        let site = self.site_of_handles(&handles);
        self.handles = handles;
        Ok(site.map(|site| Value::Handle(Handle::site(site))))
    }

    /// The fast paths are open to every snapshot.
    fn fast(&mut self) -> Option<&mut dyn Records> {
        Some(self)
    }
}

/// Trace entries decoded straight from the pickle's bytes (see
/// `pickle::fast`): lowered as [`Hook::on_dict_items`] lowers them.
impl Records for EntryLowering {
    /// [`Hook::on_dict_items`] for a record the parser decoded in place.
    fn on_record(
        &mut self,
        items: &[Item<'_>],
    ) -> std::result::Result<Option<(Value, Value)>, String> {
        Ok(self.lower_entry(items)?.map(marker))
    }

    /// A trace entry decoded in place becomes its event handle outright: no
    /// dict is built.
    fn on_whole_record(
        &mut self,
        items: &[Item<'_>],
    ) -> std::result::Result<Option<Value>, String> {
        Ok(self.lower_entry(items)?.map(Value::Handle))
    }
}

impl EntryLowering {
    /// The site of a traceback given as its frames' handles (a traceback
    /// seen before is found by its handles, without resolving its frames);
    /// `None` unless every handle is a frame's.
    fn site_of_handles(&mut self, handles: &[Handle]) -> Option<SiteId> {
        if let Some(&site) = self.site_by_handles.get(handles) {
            return Some(site);
        }
        let mut frames = Vec::with_capacity(handles.len());
        for h in handles {
            match h.lowered() {
                Lowered::Frame(i) => frames.push(self.frames[i as usize]),
                _ => return None,
            }
        }
        let site = self.sites.intern_site(&frames);
        self.site_by_handles.insert(handles.into(), site);
        Some(site)
    }

    /// A byte count or address; anything else (a negative size) reads as 0
    /// and is counted, so the report can say so.
    #[inline]
    fn uint(&mut self, value: Option<u64>) -> u64 {
        value.unwrap_or_else(|| {
            self.bad_numbers += 1;
            0
        })
    }

    /// The event handle of a trace-entry dict (lowering it unless
    /// [`Hook::on_dict_items`] already has), or `None` if it is no entry.
    fn entry_of_dict(
        &mut self,
        dict: &[(Value, Value)],
    ) -> std::result::Result<Option<Handle>, String> {
        if let [(Value::Handle(marker), _), rest @ ..] = dict {
            if let Lowered::Marker(index) = marker.lowered() {
                // More pairs arrived in a later SETITEM(S): they overwrite.
                self.patch_event(index, rest.iter().map(|(k, v)| (k, v)));
                return Handle::event(index as usize).map(Some);
            }
        }
        let pairs = || dict.iter().map(|(k, v)| (k, v));
        let Some(action) = first_value(pairs(), "action") else {
            return Ok(None);
        };
        let name = action
            .as_str()
            .ok_or_else(|| format!("trace entry action is a {}", action.type_name()))?;
        let Some(action) = Action::parse(name) else {
            *self.unknown_actions.entry(name.to_owned()).or_default() += 1;
            return Ok(Some(Handle::SKIPPED));
        };
        self.push_event(action, pairs()).map(Some)
    }

    /// Lowers a trace entry given as its items (key0, value0, …) into a new
    /// event if its action is known: the event's handle. `None` for anything
    /// else, which the opcode path and [`Hook::on_list_dict`] then see as a
    /// dict.
    fn lower_entry<F: Field>(
        &mut self,
        items: &[F],
    ) -> std::result::Result<Option<Handle>, String> {
        let pairs = || items.chunks_exact(2).map(|c| (&c[0], &c[1]));
        let Some(action) = pairs()
            .find(|(k, _)| k.str() == Some("action"))
            .and_then(|(_, v)| Action::parse(v.str()?))
        else {
            return Ok(None);
        };
        self.push_event(action, pairs()).map(Some)
    }

    /// Sets fields of the lowered event `index` from pairs that arrived
    /// after it was lowered (they overwrite).
    fn patch_event<'a>(&mut self, index: u32, pairs: impl Iterator<Item = (&'a Value, &'a Value)>) {
        let mut event = self.events[index as usize];
        if self.apply_fields(&mut event, pairs) {
            self.framed[index as usize / 64] |= 1 << (index % 64);
        }
        self.events[index as usize] = event;
    }

    /// Whether the entry of event `index` had `frames`.
    fn is_framed(&self, index: usize) -> bool {
        self.framed
            .get(index / 64)
            .is_some_and(|w| w >> (index % 64) & 1 == 1)
    }

    /// Lowers an entry's fields into a new event: its handle.
    fn push_event<'a, F: Field + 'a>(
        &mut self,
        action: Action,
        pairs: impl Iterator<Item = (&'a F, &'a F)>,
    ) -> std::result::Result<Handle, String> {
        let mut event = Event::new(action, 0, 0);
        let has_frames = self.apply_fields(&mut event, pairs);
        let index = self.events.len();
        let handle = Handle::event(index)?;
        self.events.push(event);
        if index % 64 == 0 {
            self.framed.push(0);
        }
        self.framed[index / 64] |= u64::from(has_frames) << (index % 64);
        Ok(handle)
    }

    /// Sets `event`'s fields from an entry's pairs (the last of a repeated
    /// key wins); returns whether there were `frames`.
    fn apply_fields<'a, F: Field + 'a>(
        &mut self,
        event: &mut Event,
        pairs: impl Iterator<Item = (&'a F, &'a F)>,
    ) -> bool {
        let mut has_frames = false;
        for (key, value) in pairs {
            let Some(key) = key.str() else { continue };
            match key {
                // An `oom` entry's address field is its `device_free`.
                "addr" if event.action != Action::Oom => event.addr = self.uint(value.u64()),
                "size" => event.size = self.uint(value.u64()),
                "device_free" if event.action == Action::Oom => event.addr = self.uint(value.u64()),
                "time_us" => event.ts_us = value.f64().unwrap_or(f64::NAN),
                "category" => event.given = value.str().and_then(Category::parse),
                "frames" => {
                    has_frames = true;
                    event.site = value.site(self);
                }
                _ => {}
            }
        }
        has_frames
    }

    /// Interns a frames list as a site, then empties the list and leaves the
    /// site's handle in it, so a later reference (free events share their
    /// alloc's list) costs nothing and the frames are not held twice.
    fn site_of(&mut self, frames: &Value) -> SiteId {
        let list = match frames {
            Value::List(list) => list,
            // A frames list lowered while it streamed in (shared by a block
            // and its trace entries through the memo).
            Value::Handle(h) => return site_of_handle(*h),
            _ => return 0,
        };
        let mut items = list.borrow_mut();
        if let [Value::Handle(h)] = items.as_slice() {
            if let Lowered::Site(site) = h.lowered() {
                return site;
            }
        }
        let mut resolved = Vec::with_capacity(items.len());
        for item in items.iter() {
            match item {
                Value::Handle(h) => match h.lowered() {
                    Lowered::Frame(i) => resolved.push(self.frames[i as usize]),
                    // The lowered first batch of a list appended to more than once.
                    Lowered::Site(site) => resolved.extend_from_slice(self.sites.frames(site)),
                    Lowered::Event(_) | Lowered::Skipped => self.entries_in_frames += 1,
                    // Only the lowering holds markers (in dicts, never in lists).
                    Lowered::Marker(_) => {}
                },
                Value::Dict(d) => resolved.push(frame_of(&mut self.sites, &d.borrow())),
                // `forward_frames` style: preformatted lines.
                Value::Str(line) => resolved.push(Frame {
                    filename: 0,
                    line: 0,
                    name: self.sites.intern_str(line),
                }),
                _ => {}
            }
        }
        let site = self.sites.intern_site(&resolved);
        *items = vec![Value::Handle(Handle::site(site))];
        site
    }
}

/// A field value of a trace entry: a [`Value`], or an [`Item`] of a record
/// the parser decoded in place (read exactly as the `Value` it stands for).
trait Field {
    fn u64(&self) -> Option<u64>;
    fn f64(&self) -> Option<f64>;
    fn str(&self) -> Option<&str>;
    /// The site of a `frames` value.
    fn site(&self, lowering: &mut EntryLowering) -> SiteId;
}

impl Field for Value {
    fn u64(&self) -> Option<u64> {
        self.as_u64()
    }
    fn f64(&self) -> Option<f64> {
        self.as_f64()
    }
    fn str(&self) -> Option<&str> {
        self.as_str()
    }
    fn site(&self, lowering: &mut EntryLowering) -> SiteId {
        lowering.site_of(self)
    }
}

impl Field for Item<'_> {
    fn u64(&self) -> Option<u64> {
        match *self {
            Item::Int(i) => u64::try_from(i).ok(),
            _ => None,
        }
    }
    fn f64(&self) -> Option<f64> {
        match *self {
            Item::Float(f) => Some(f),
            Item::Int(i) => Some(i as f64),
            _ => None,
        }
    }
    fn str(&self) -> Option<&str> {
        match *self {
            Item::Str(s) => Some(s),
            _ => None,
        }
    }
    fn site(&self, _: &mut EntryLowering) -> SiteId {
        // As `site_of` reads a handle (a lowered list is given as its handle).
        match *self {
            Item::Handle(h) => site_of_handle(h),
            _ => 0,
        }
    }
}

/// The site of a `frames` value that is a handle: a traceback lowered while
/// it streamed in (shared by a block and its trace entries through the
/// memo); anything else has no site.
fn site_of_handle(h: Handle) -> SiteId {
    match h.lowered() {
        Lowered::Site(site) => site,
        _ => 0,
    }
}

/// The pair a lowered entry's dict keeps: `(Handle(marker), None)`,
/// recognised when the dict is appended to its trace list.
fn marker(event: Handle) -> (Value, Value) {
    let marker = Handle::marker(event).expect("an event's handle");
    (Value::Handle(marker), Value::None)
}

/// The value of the first `key` among `pairs`.
fn first_value<'a>(
    mut pairs: impl Iterator<Item = (&'a Value, &'a Value)>,
    key: &str,
) -> Option<&'a Value> {
    pairs.find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
}

fn has_key(dict: &[(Value, Value)], key: &str) -> bool {
    dict.iter().any(|(k, _)| k.as_str() == Some(key))
}

/// `{"filename", "line", "name"}` → frame. FX fields and other keys are ignored.
fn frame_of(sites: &mut Sites, dict: &[(Value, Value)]) -> Frame {
    let mut frame = Frame {
        filename: 0,
        line: 0,
        name: 0,
    };
    for (key, value) in dict {
        match key.as_str() {
            Some("filename") => frame.filename = sites.intern_str(value.as_str().unwrap_or("")),
            Some("name") => frame.name = sites.intern_str(value.as_str().unwrap_or("")),
            Some("line") => frame.line = value.as_u64().unwrap_or(0).min(u32::MAX as u64) as u32,
            _ => {}
        }
    }
    frame
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
                1 => take_in_order(&mut lowering.events, list),
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
                    if let Lowered::Event(index) = handle.lowered() {
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
    if let Some(segments) = &segments {
        let items = segments
            .list_items()
            .ok_or_else(|| Error::Schema("`segments` is not a list".into()))?;
        for seg in items.iter() {
            let device = seg.get("device").and_then(|v| v.as_i64()).unwrap_or(0);
            let segment = parse_segment(seg, &mut lowering, &mut blocks_without_frames)?;
            segs_by_device.entry(device).or_default().push(segment);
        }
    }
    if lowering.entries_in_frames > 0 {
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
            segments_show_reserved: !profile_derived,
            capacity_bytes: None,
        });
    }
    if let Some(host) = segs_by_device.remove(&-1) {
        trace.diagnostics.push(Diagnostic::info(format!(
            "{} pinned host segments present; not analysed",
            host.len()
        )));
    }

    trace.annotations = parse_annotations(root);
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

/// All of `events` when `list` holds exactly their handles in order (one
/// device whose entries were all lowered: the common case), without copying.
fn take_in_order(events: &mut Vec<Event>, list: &Value) -> Option<Vec<Event>> {
    let items = list.list_items()?;
    if events.is_empty() || items.len() != events.len() {
        return None;
    }
    let in_order = items.iter().enumerate().all(
        |(i, item)| matches!(item, Value::Handle(h) if h.lowered() == Lowered::Event(i as u32)),
    );
    in_order.then(|| std::mem::take(events))
}

fn parse_segment(
    seg: &Value,
    lowering: &mut EntryLowering,
    blocks_without_frames: &mut u64,
) -> Result<Segment> {
    let addr = seg.get("address").and_then(|v| v.as_u64()).unwrap_or(0);
    let mut segment = Segment {
        addr,
        total_size: seg.get("total_size").and_then(|v| v.as_u64()).unwrap_or(0),
        is_expandable: seg
            .get("is_expandable")
            .and_then(|v| v.as_bool())
            .unwrap_or(false),
        blocks: Vec::new(),
    };
    let Some(blocks) = seg.get("blocks") else {
        return Ok(segment);
    };
    let blocks = blocks
        .list_items()
        .ok_or_else(|| Error::Schema("segment `blocks` is not a list".into()))?;
    let mut next_addr = addr;
    for block in blocks.iter() {
        let size = block.get("size").and_then(|v| v.as_u64()).unwrap_or(0);
        // Old files have no block address: blocks are contiguous (MemoryViz does the same).
        let block_addr = block
            .get("address")
            .and_then(|v| v.as_u64())
            .unwrap_or(next_addr);
        next_addr = block_addr.saturating_add(size);
        let state = match block.get("state").as_ref().and_then(|v| v.as_str()) {
            Some("active_allocated") => BlockState::ActiveAllocated,
            Some("active_pending_free") | Some("active_awaiting_free") => {
                BlockState::ActivePendingFree
            }
            _ => BlockState::Inactive,
        };
        // torch 1.13 era: `history: [{addr, real_size, frames}]`.
        let history_first = block
            .get("history")
            .and_then(|h| h.list_items().and_then(|items| items.first().cloned()));
        let requested_size = block
            .get("requested_size")
            .and_then(|v| v.as_u64())
            .or_else(|| {
                history_first
                    .as_ref()
                    .and_then(|h| h.get("real_size")?.as_u64())
            })
            .unwrap_or(size);
        let frames = block
            .get("frames")
            .or_else(|| history_first.as_ref().and_then(|h| h.get("frames")));
        let site = frames.map_or(0, |f| lowering.site_of(&f));
        if site == 0 && state != BlockState::Inactive {
            *blocks_without_frames += 1;
        }
        segment.blocks.push(Block {
            addr: block_addr,
            size,
            requested_size,
            state,
            site,
        });
    }
    Ok(segment)
}

/// `external_annotations` START/END marks → time ranges, paired per (name, device).
fn parse_annotations(root: &Value) -> Vec<Annotation> {
    let Some(list) = root.get("external_annotations") else {
        return Vec::new();
    };
    let Some(items) = list.list_items() else {
        return Vec::new();
    };
    let mut open: HashMap<(String, Option<i64>), Vec<f64>> = HashMap::new();
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
    out.sort_by(|a, b| a.start_us.total_cmp(&b.start_us).then(a.name.cmp(&b.name)));
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

/// [`EntryLowering`] with the fast paths' door closed: every opcode is
/// interpreted one by one. The oracle of the differential tests.
#[cfg(any(test, feature = "fuzzing"))]
#[derive(Default)]
struct Plain(EntryLowering);

#[cfg(any(test, feature = "fuzzing"))]
impl Hook for Plain {
    fn on_list_dict(
        &mut self,
        dict: &[(Value, Value)],
    ) -> std::result::Result<Option<Value>, String> {
        self.0.on_list_dict(dict)
    }
    fn on_list_items(&mut self, items: &[Value]) -> std::result::Result<Option<Value>, String> {
        self.0.on_list_items(items)
    }
    fn on_dict_items(
        &mut self,
        items: &[Value],
    ) -> std::result::Result<Option<(Value, Value)>, String> {
        self.0.on_dict_items(items)
    }
    fn on_handle_items(
        &mut self,
        handle: Handle,
        items: &[Value],
    ) -> std::result::Result<bool, String> {
        self.0.on_handle_items(handle, items)
    }
}

/// What the structure-aware fuzz target (`fuzz/`) reaches of the snapshot
/// reader.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    /// Builds a snapshot-shaped pickle from `data` (see `generate`), parses
    /// it every way memcut can and analyses it: panics when two ways
    /// disagree, when the analysis panics or when an error is not one line.
    pub fn check_generated(data: &[u8]) {
        let mut u = arbitrary::Unstructured::new(data);
        let Ok(bytes) = super::generate::snapshot_pickle(&mut u) else {
            return;
        };
        let _ = super::generate::all_ways(&bytes);
        super::generate::analyze(&bytes);
    }
}

#[cfg(any(test, feature = "fuzzing"))]
mod generate;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) use tests::record_tests;
