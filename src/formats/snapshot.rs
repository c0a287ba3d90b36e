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

use super::pickle::{self, Hook, Item, Limits, Value};
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
pub fn parse_pickle_hinted<R: BufRead>(
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
    entries_without_frames: u64,
    /// Sites by the frame handles of a traceback: a traceback seen before is
    /// recognised by hashing its handles, without resolving its frames.
    site_by_handles: FxHashMap<Box<[u32]>, SiteId>,
    /// Scratch for the handles of the list being lowered.
    handles: Vec<u32>,
    /// `addr`/`size`/`device_free` values that are negative or not integers.
    bad_numbers: u64,
}

/// Handle tags: the top two bits say what a [`Value::Handle`] indexes.
const TAG_MASK: u32 = 0b11 << 30;
const FRAME_TAG: u32 = 0b01 << 30;
const SITE_TAG: u32 = 0b10 << 30;
/// Marks an entry whose action memcut skips.
const SKIPPED: u32 = TAG_MASK - 1;

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
            let index = self.frames.len() as u32;
            if index >= FRAME_TAG {
                return Err("more than 2^30 distinct frames".into());
            }
            self.frames.push(frame);
            return Ok(Some(Value::Handle(FRAME_TAG | index)));
        }
        Ok(None)
    }

    /// A trace entry with a known action is lowered as soon as its pairs are
    /// complete; its dict keeps only a marker pair `(Handle(event), Bool(has
    /// frames))`, recognised when the dict is appended to its trace list.
    /// Anything else (unknown actions, malformed entries) waits for
    /// [`Hook::on_list_dict`], which has the last word.
    fn on_dict_items(
        &mut self,
        items: &[Value],
    ) -> std::result::Result<Option<(Value, Value)>, String> {
        Ok(self.lower_entry(items)?.map(marker))
    }

    fn wants_records(&self) -> bool {
        true
    }

    /// [`Hook::on_dict_items`] for a record the parser decoded in place.
    fn on_record(
        &mut self,
        items: &[Item<'_>],
    ) -> std::result::Result<Option<(Value, Value)>, String> {
        Ok(self.lower_entry(items)?.map(marker))
    }

    /// A trace entry decoded in place becomes its event handle outright: no
    /// dict is built, and its frames are counted now, as
    /// [`Hook::on_list_dict`] would have when it was appended.
    fn on_whole_record(
        &mut self,
        items: &[Item<'_>],
    ) -> std::result::Result<Option<Value>, String> {
        let Some((index, has_frames)) = self.lower_entry(items)? else {
            return Ok(None);
        };
        self.count_frames(has_frames);
        Ok(Some(Value::Handle(index)))
    }

    /// Keys added to a trace entry after it was lowered (through the memo,
    /// which holds its event handle): they overwrite its fields, as they
    /// would have in its dict.
    fn on_handle_items(
        &mut self,
        handle: u32,
        items: &[Value],
    ) -> std::result::Result<bool, String> {
        if handle & TAG_MASK != 0 || handle as usize >= self.events.len() {
            return Ok(false);
        }
        self.patch_event(handle, items.chunks_exact(2).map(|c| (&c[0], &c[1])));
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
        let lowered = self.on_handle_list(&handles);
        self.handles = handles;
        lowered
    }

    fn on_handle_list(&mut self, handles: &[u32]) -> std::result::Result<Option<Value>, String> {
        if let Some(&site) = self.site_by_handles.get(handles) {
            return Ok(Some(Value::Handle(SITE_TAG | site)));
        }
        if handles.iter().any(|h| h & TAG_MASK != FRAME_TAG) {
            return Ok(None);
        }
        let frames: Vec<Frame> = handles
            .iter()
            .map(|h| self.frames[(h & !TAG_MASK) as usize])
            .collect();
        let site = self.sites.intern_site(&frames);
        self.site_by_handles.insert(handles.into(), site);
        Ok(Some(Value::Handle(SITE_TAG | site)))
    }
}

impl EntryLowering {
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
    ) -> std::result::Result<Option<u32>, String> {
        if let [(Value::Handle(index), Value::Bool(has_frames)), rest @ ..] = dict {
            if !rest.is_empty() {
                // More pairs arrived in a later SETITEM(S): they overwrite.
                let more_frames = self.patch_event(*index, rest.iter().map(|(k, v)| (k, v)));
                self.count_frames(*has_frames || more_frames);
            } else {
                self.count_frames(*has_frames);
            }
            return Ok(Some(*index));
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
            return Ok(Some(SKIPPED));
        };
        let (index, has_frames) = self.push_event(action, pairs())?;
        self.count_frames(has_frames);
        Ok(Some(index))
    }

    /// Lowers a trace entry given as its items (key0, value0, …) into a new
    /// event if its action is known: the event's index and whether the entry
    /// has `frames`. `None` for anything else, which the opcode path and
    /// [`Hook::on_list_dict`] then see as a dict.
    fn lower_entry<F: Field>(
        &mut self,
        items: &[F],
    ) -> std::result::Result<Option<(u32, bool)>, String> {
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
    /// after it was lowered (they overwrite); returns whether there were
    /// `frames`.
    fn patch_event<'a>(
        &mut self,
        index: u32,
        pairs: impl Iterator<Item = (&'a Value, &'a Value)>,
    ) -> bool {
        let mut event = self.events[index as usize];
        let frames = self.apply_fields(&mut event, pairs);
        self.events[index as usize] = event;
        frames
    }

    fn count_frames(&mut self, has_frames: bool) {
        if !has_frames {
            self.entries_without_frames += 1;
        }
    }

    /// Lowers an entry's fields into a new event: its index and whether the
    /// entry has `frames`.
    fn push_event<'a, F: Field + 'a>(
        &mut self,
        action: Action,
        pairs: impl Iterator<Item = (&'a F, &'a F)>,
    ) -> std::result::Result<(u32, bool), String> {
        let mut event = Event::new(action, 0, 0);
        let has_frames = self.apply_fields(&mut event, pairs);
        let index = self.events.len() as u32;
        if index >= SKIPPED {
            return Err("more than 2^30 trace entries".into());
        }
        self.events.push(event);
        Ok((index, has_frames))
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
            Value::Handle(h) if h & TAG_MASK == SITE_TAG => return h & !TAG_MASK,
            _ => return 0,
        };
        let mut items = list.borrow_mut();
        if let [Value::Handle(h)] = items.as_slice() {
            if h & TAG_MASK == SITE_TAG {
                return h & !TAG_MASK;
            }
        }
        let mut resolved = Vec::with_capacity(items.len());
        for item in items.iter() {
            match item {
                Value::Handle(h) if h & TAG_MASK == FRAME_TAG => {
                    resolved.push(self.frames[(h & !TAG_MASK) as usize]);
                }
                // The lowered first batch of a list appended to more than once.
                Value::Handle(h) if h & TAG_MASK == SITE_TAG => {
                    resolved.extend_from_slice(self.sites.frames(h & !TAG_MASK));
                }
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
        *items = vec![Value::Handle(SITE_TAG | site)];
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
            Item::Handle(h) if h & TAG_MASK == SITE_TAG => h & !TAG_MASK,
            _ => 0,
        }
    }
}

/// The pair a lowered entry's dict keeps: `(Handle(event), Bool(has
/// frames))`, recognised when the dict is appended to its trace list.
fn marker((index, has_frames): (u32, bool)) -> (Value, Value) {
    (Value::Handle(index), Value::Bool(has_frames))
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
                per_device.push(events);
                continue;
            }
            let mut events = Vec::new();
            if let Some(items) = list.list_items() {
                for item in items.iter() {
                    let index = match item {
                        Value::Handle(h) => *h,
                        Value::Dict(d) => {
                            match lowering.entry_of_dict(&d.borrow()).map_err(Error::Schema)? {
                                Some(index) => index,
                                None => continue,
                            }
                        }
                        _ => continue,
                    };
                    if index & TAG_MASK == 0 {
                        let event = lowering.events[index as usize];
                        profile_derived |= event.given.is_some();
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
    trace.run.expandable_segments = root
        .get("allocator_settings")
        .and_then(|s| s.get("expandable_segments"))
        .and_then(|v| v.as_bool());
    diagnose(root, &lowering, blocks_without_frames, &mut trace);
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
    let in_order = items
        .iter()
        .enumerate()
        .all(|(i, item)| matches!(item, Value::Handle(h) if *h as usize == i));
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

fn diagnose(root: &Value, lowering: &EntryLowering, blocks_without_frames: u64, trace: &mut Trace) {
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
    if lowering.entries_without_frames > 0 {
        trace.diagnostics.push(Diagnostic::info(format!(
            "{} trace entries carry no frames (recorded without context): their sites are unknown",
            lowering.entries_without_frames
        )));
    }
    if lowering.bad_numbers > 0 {
        trace.diagnostics.push(Diagnostic::warning(format!(
            "{} trace entry fields (addr/size/device_free) are negative or not integers: read as 0, so sizes may be understated",
            lowering.bad_numbers
        )));
    }
    if blocks_without_frames > 0 {
        trace.diagnostics.push(Diagnostic::info(format!(
            "{blocks_without_frames} live blocks at dump time have no frames"
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

#[cfg(test)]
mod sharing_tests {
    use super::*;

    /// `pickle.dumps(..., protocol=4)` of a snapshot whose live block and
    /// alloc entry share one frames list (as real dumps do through the memo).
    pub(super) const SHARED_FRAMES: &[u8] = &[
        128, 4, 149, 89, 1, 0, 0, 0, 0, 0, 0, 125, 148, 40, 140, 8, 115, 101, 103, 109, 101, 110,
        116, 115, 148, 93, 148, 125, 148, 40, 140, 6, 100, 101, 118, 105, 99, 101, 148, 75, 0, 140,
        7, 97, 100, 100, 114, 101, 115, 115, 148, 77, 0, 16, 140, 10, 116, 111, 116, 97, 108, 95,
        115, 105, 122, 101, 148, 77, 0, 4, 140, 6, 98, 108, 111, 99, 107, 115, 148, 93, 148, 40,
        125, 148, 40, 104, 5, 77, 0, 16, 140, 4, 115, 105, 122, 101, 148, 77, 0, 2, 140, 14, 114,
        101, 113, 117, 101, 115, 116, 101, 100, 95, 115, 105, 122, 101, 148, 77, 244, 1, 140, 5,
        115, 116, 97, 116, 101, 148, 140, 16, 97, 99, 116, 105, 118, 101, 95, 97, 108, 108, 111,
        99, 97, 116, 101, 100, 148, 140, 6, 102, 114, 97, 109, 101, 115, 148, 93, 148, 40, 125,
        148, 40, 140, 8, 102, 105, 108, 101, 110, 97, 109, 101, 148, 140, 8, 109, 111, 100, 101,
        108, 46, 112, 121, 148, 140, 4, 108, 105, 110, 101, 148, 75, 3, 140, 4, 110, 97, 109, 101,
        148, 140, 7, 102, 111, 114, 119, 97, 114, 100, 148, 117, 125, 148, 40, 104, 17, 140, 8,
        116, 114, 97, 105, 110, 46, 112, 121, 148, 104, 19, 75, 9, 104, 20, 140, 4, 109, 97, 105,
        110, 148, 117, 101, 117, 125, 148, 40, 104, 5, 77, 0, 18, 104, 10, 77, 0, 2, 104, 11, 75,
        0, 104, 12, 140, 8, 105, 110, 97, 99, 116, 105, 118, 101, 148, 104, 14, 93, 148, 117, 101,
        117, 97, 140, 13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115, 148, 93,
        148, 93, 148, 125, 148, 40, 140, 6, 97, 99, 116, 105, 111, 110, 148, 140, 5, 97, 108, 108,
        111, 99, 148, 140, 4, 97, 100, 100, 114, 148, 77, 0, 16, 104, 10, 77, 244, 1, 140, 6, 115,
        116, 114, 101, 97, 109, 148, 75, 0, 104, 14, 104, 15, 117, 97, 97, 117, 46,
    ];

    #[test]
    fn a_frames_list_shared_by_a_block_and_an_entry_gives_both_the_site() {
        let trace = parse_pickle(SHARED_FRAMES, &Limits::default()).unwrap();
        let device = &trace.devices[0];
        let block = &device.segments.as_ref().unwrap()[0].blocks[0];
        assert_eq!(trace.sites.frames(block.site).len(), 2);
        assert_eq!(device.events[0].site, block.site);
        assert!(
            !trace
                .diagnostics
                .iter()
                .any(|d| d.message.contains("no frames")),
            "{:?}",
            trace.diagnostics
        );
    }
}

#[cfg(test)]
pub(crate) mod record_tests {
    use super::*;
    use crate::test_support::{corpus_dir, read_maybe_gz};

    /// [`EntryLowering`] without the in-place record path: every entry goes
    /// through the opcodes and [`Hook::on_dict_items`].
    #[derive(Default)]
    struct NoRecords(EntryLowering);

    impl Hook for NoRecords {
        fn on_list_dict(
            &mut self,
            dict: &[(Value, Value)],
        ) -> std::result::Result<Option<Value>, String> {
            self.0.on_list_dict(dict)
        }
        fn on_dict_items(
            &mut self,
            items: &[Value],
        ) -> std::result::Result<Option<(Value, Value)>, String> {
            self.0.on_dict_items(items)
        }
        fn on_list_items(&mut self, items: &[Value]) -> std::result::Result<Option<Value>, String> {
            self.0.on_list_items(items)
        }
        fn on_handle_list(
            &mut self,
            handles: &[u32],
        ) -> std::result::Result<Option<Value>, String> {
            self.0.on_handle_list(handles)
        }
        fn on_handle_items(
            &mut self,
            handle: u32,
            items: &[Value],
        ) -> std::result::Result<bool, String> {
            self.0.on_handle_items(handle, items)
        }
    }

    fn both_ways(bytes: &[u8], what: &str) {
        let fast = parse_pickle(bytes, &Limits::default());
        let mut slow = NoRecords::default();
        let slow = pickle::unpickle(bytes, &Limits::default(), &mut slow)
            .map_err(Error::from)
            .and_then(|root| build_trace(&root, slow.0));
        match (fast, slow) {
            (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{what}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{what}"),
            (a, b) => panic!("{what}: {:?} vs {:?}", a.err(), b.err()),
        }
    }

    #[test]
    fn records_lowered_in_place_match_the_opcode_path() {
        both_ways(sharing_tests::SHARED_FRAMES, "shared frames");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seen = 0;
        let shared = root.join("tests/data/synthetic_shared_frames.pickle.gz");
        let samples = glob::glob(&format!("{}/sample_traces/*.pickle.gz", root.display())).unwrap();
        for path in samples.map(|p| p.unwrap()).chain([shared]) {
            both_ways(&read_maybe_gz(&path), &path.display().to_string());
            seen += 1;
        }
        assert!(seen > 1);
    }

    #[test]
    #[ignore = "needs ../shared/corpus (or MEMCUT_CORPUS)"]
    fn records_lowered_in_place_match_the_opcode_path_on_corpus_pickles() {
        let dir = corpus_dir();
        let pattern = format!("{}/**/*.pickle", dir.display());
        let mut seen = 0;
        for path in glob::glob(&pattern).unwrap() {
            let path = path.unwrap();
            both_ways(&std::fs::read(&path).unwrap(), &path.display().to_string());
            seen += 1;
        }
        assert!(seen > 0, "no pickles in {}", dir.display());
    }

    /// `{"device_traces": [[{"action": "alloc", "addr": 16, "size": 32}]]}`,
    /// then `"size": 64` set on the entry through the memo: while its batch
    /// is open (`OPEN`) and after it was appended (`LATER`). Python's
    /// `pickle.loads` gives size 64 for both.
    const PATCHED_OPEN: &[u8] = &[
        128, 4, 125, 148, 40, 140, 13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115,
        148, 93, 148, 40, 93, 148, 40, 125, 148, 40, 140, 6, 97, 99, 116, 105, 111, 110, 148, 140,
        5, 97, 108, 108, 111, 99, 148, 140, 4, 97, 100, 100, 114, 148, 75, 16, 140, 4, 115, 105,
        122, 101, 148, 75, 32, 117, 104, 4, 104, 8, 75, 64, 115, 48, 101, 101, 117, 46,
    ];
    const PATCHED_LATER: &[u8] = &[
        128, 4, 125, 148, 40, 140, 13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115,
        148, 93, 148, 40, 93, 148, 40, 125, 148, 40, 140, 6, 97, 99, 116, 105, 111, 110, 148, 140,
        5, 97, 108, 108, 111, 99, 148, 140, 4, 97, 100, 100, 114, 148, 75, 16, 140, 4, 115, 105,
        122, 101, 148, 75, 32, 117, 101, 101, 117, 104, 4, 104, 8, 75, 64, 115, 48, 46,
    ];

    #[test]
    fn keys_set_on_a_lowered_entry_overwrite_its_fields() {
        for (bytes, what) in [
            (PATCHED_OPEN, "batch open"),
            (PATCHED_LATER, "after append"),
        ] {
            both_ways(bytes, what);
            let trace = parse_pickle(bytes, &Limits::default()).unwrap();
            assert_eq!(trace.devices[0].events[0].size, 64, "{what}");
        }
    }

    /// A traceback list whose memo gets repeat an earlier list's bytes after
    /// the memo slot of one of its frames was overwritten (`BINPUT` of another
    /// frame dict): `pickle.loads` gives frames a.py, b.py for addr 32 and
    /// c.py, b.py for addr 64. (Hand-assembled; `pickle.dump` never reuses a
    /// slot, but a crafted file may.)
    pub(crate) const OVERWRITTEN_FRAME: &[u8] = &[
        128, 4, 125, 148, 40, 140, 8, 115, 101, 103, 109, 101, 110, 116, 115, 148, 93, 148, 140,
        13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115, 148, 93, 148, 40, 93, 148,
        40, 125, 148, 40, 140, 6, 97, 99, 116, 105, 111, 110, 148, 140, 5, 97, 108, 108, 111, 99,
        148, 140, 4, 97, 100, 100, 114, 148, 77, 16, 0, 140, 4, 115, 105, 122, 101, 148, 77, 0, 2,
        140, 6, 115, 116, 114, 101, 97, 109, 148, 75, 0, 140, 6, 102, 114, 97, 109, 101, 115, 148,
        93, 148, 40, 125, 148, 40, 140, 8, 102, 105, 108, 101, 110, 97, 109, 101, 148, 140, 4, 97,
        46, 112, 121, 148, 140, 4, 108, 105, 110, 101, 148, 75, 1, 140, 4, 110, 97, 109, 101, 148,
        140, 1, 102, 148, 117, 125, 148, 40, 104, 15, 140, 4, 98, 46, 112, 121, 148, 104, 17, 75,
        2, 104, 18, 140, 1, 103, 148, 117, 101, 117, 125, 148, 40, 104, 7, 104, 8, 104, 9, 77, 32,
        0, 104, 10, 77, 0, 2, 104, 11, 75, 0, 104, 12, 93, 148, 40, 104, 14, 104, 20, 101, 117,
        125, 148, 40, 104, 7, 104, 8, 104, 9, 77, 48, 0, 104, 10, 77, 0, 2, 104, 11, 75, 0, 104,
        12, 93, 148, 40, 125, 113, 14, 40, 104, 15, 140, 4, 99, 46, 112, 121, 148, 104, 17, 75, 3,
        104, 18, 140, 1, 104, 148, 117, 101, 117, 125, 148, 40, 104, 7, 104, 8, 104, 9, 77, 64, 0,
        104, 10, 77, 0, 2, 104, 11, 75, 0, 104, 12, 93, 148, 40, 104, 14, 104, 20, 101, 117, 101,
        101, 117, 46,
    ];

    #[test]
    fn equal_traceback_bytes_after_a_memo_slot_changed_give_the_new_frames() {
        both_ways(OVERWRITTEN_FRAME, "overwritten frame");
        let trace = parse_pickle(OVERWRITTEN_FRAME, &Limits::default()).unwrap();
        let files = |addr: u64| -> Vec<String> {
            let event = trace.devices[0]
                .events
                .iter()
                .find(|e| e.addr == addr)
                .unwrap();
            let sites = &trace.sites;
            sites
                .frames(event.site)
                .iter()
                .map(|f| sites.str(f.filename).to_owned())
                .collect()
        };
        assert_eq!(files(32), ["a.py", "b.py"]);
        assert_eq!(files(48), ["c.py"]);
        assert_eq!(files(64), ["c.py", "b.py"]);
    }

    /// The parser takes the answers of hinted runs (a sample trace's
    /// tracebacks repeat), and they are the answers it would have found.
    #[test]
    fn hinted_tracebacks_are_taken_and_lowered_alike() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let bytes = read_maybe_gz(&root.join("tests/data/synthetic_shared_frames.pickle.gz"));
        let hints = std::rc::Rc::new(pickle::GetRunHints::default());
        hints.add(pickle::GetRunFinder::default().find(&bytes));
        let hinted = parse_pickle_hinted(&bytes[..], &Limits::default(), Some(hints.clone()));
        let plain = parse_pickle(&bytes[..], &Limits::default());
        assert_eq!(format!("{hinted:?}"), format!("{plain:?}"));
        assert!(hints.taken() > 100, "{} runs taken", hints.taken());
    }

    /// A trace entry whose frames list holds the entry itself (through the
    /// memo), set by SETITEMS: `pickle.loads` gives `e['frames'][0] is e`.
    /// (Found by the fuzzer: the dict was borrowed while the hook read it.)
    const SELF_FRAMED_ENTRY: &[u8] = &[
        128, 4, 125, 148, 40, 140, 13, 100, 101, 118, 105, 99, 101, 95, 116, 114, 97, 99, 101, 115,
        148, 93, 148, 40, 93, 148, 40, 125, 148, 40, 140, 6, 97, 99, 116, 105, 111, 110, 148, 140,
        5, 97, 108, 108, 111, 99, 148, 140, 4, 97, 100, 100, 114, 148, 75, 16, 140, 4, 115, 105,
        122, 101, 148, 75, 32, 140, 6, 102, 114, 97, 109, 101, 115, 148, 93, 148, 104, 4, 97, 117,
        101, 101, 117, 46,
    ];

    #[test]
    fn an_entry_in_its_own_frames_is_no_panic() {
        both_ways(SELF_FRAMED_ENTRY, "self-framed entry");
        let trace = parse_pickle(SELF_FRAMED_ENTRY, &Limits::default()).unwrap();
        assert_eq!(trace.devices[0].events[0].size, 32);
    }

    #[test]
    fn truncated_records_fail_alike() {
        let bytes = sharing_tests::SHARED_FRAMES;
        for cut in 0..bytes.len() {
            both_ways(&bytes[..cut], &format!("cut at {cut}"));
        }
    }
}
