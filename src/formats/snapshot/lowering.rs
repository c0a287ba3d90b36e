//! The snapshot lowering: the [`Hook`] (and, behind the fast paths' door,
//! the [`Records`]) that turns trace entries and frame dicts into compact
//! records while the unpickler streams, so a 1M-entry snapshot never holds
//! 1M generic dicts. What a lowered value stands for is its [`Handle`]'s
//! kind: an event, a skipped entry, a frame or a site, never bits of an index.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use super::super::pickle::{Handle, Hook, Item, Lowered, Records, Value};
use super::allocator_state::{self, BlockFields, SegmentFields};
use crate::model::{Action, Category, Event, Frame, SiteId, Sites, StrId};
use crate::vocabulary::COMPILED_REGION;

/// Lowers dicts to compact records while the unpickler streams:
/// trace entries (`{"action": …}`) become [`Event`]s and frame dicts
/// (`{"filename", "line", "name"}`) become [`Frame`]s, each replaced in the
/// value tree by a [`Value::Handle`]. Real dumps share frame *dicts* across
/// entries (memoized), so a frame is decoded once; each entry's frames list
/// is interned into a site and then emptied, keeping memory near the size of
/// the compact records.
#[derive(Default)]
pub(super) struct EntryLowering {
    pub(super) sites: Sites,
    pub(super) events: Vec<Event>,
    frames: Vec<Frame>,
    pub(super) unknown_actions: BTreeMap<String, u64>,
    /// A bit per event: whether its entry had `frames` (counted per
    /// appearance in a device's trace, see [`build_trace`]).
    pub(super) framed: Vec<u64>,
    /// Sites by the frame handles of a traceback: a traceback seen before is
    /// recognised by hashing its handles, without resolving its frames.
    site_by_handles: FxHashMap<Box<[Handle]>, SiteId>,
    /// Scratch for the handles of the list being lowered.
    handles: Vec<Handle>,
    /// The handles of frames lowered from inline frame dicts
    /// ([`Records::on_frame`]), by frame.
    frame_handles: FxHashMap<Frame, Handle>,
    /// `addr`/`size`/`device_free` values that are negative or not integers.
    pub(super) bad_numbers: u64,
    /// The sites of `frames` lists that hold a trace entry (a dict with an
    /// `action`), not only frames, each a site of its own: a snapshot whose
    /// events or blocks use one is refused (see [`build_trace`]). Only the
    /// sites the trace uses count: a list in a value a later key replaced
    /// is no part of the snapshot.
    pub(super) sites_with_entries: FxHashSet<SiteId>,
    /// Entries lowered by the fast paths ([`Records`]) straight from the
    /// pickle's bytes: the benchmark shapes' tests require all of them.
    pub(super) in_place: u64,
    /// Runs of consecutive events that trace lists hold
    /// ([`Lowered::Events`]): `(first, count)`.
    event_runs: Vec<(u32, u32)>,
    /// Blocks read as their dicts were appended to a list ([`Lowered::Block`]).
    blocks: Vec<BlockFields>,
    /// Runs of consecutive blocks that lists hold ([`Lowered::Blocks`]).
    block_runs: Vec<(u32, u32)>,
    /// Segments read as their dicts were appended to a list ([`Lowered::Segment`]).
    pub(super) segments: Vec<SegmentFields>,
    /// Sites of entries made inside a compiled region, by (the entry's own
    /// site, the region's name): its frames and the region's.
    regions: FxHashMap<(SiteId, StrId), SiteId>,
    /// The sites' ids of the memo's strings that frames named.
    pub(super) memo_strs: MemoStrs,
}

/// The sites' id of each of the memo's strings a frame named, by the
/// string's index among the memo's strings ([`Item::MemoStr`]): a
/// `_profile_to_snapshot` traceback spells out each frame's file and
/// function again for every frame, and the fast path finds each as the
/// memo's string put before, so the frame takes its id here instead of
/// hashing the string into [`Sites`] again. Exact: an index is one string
/// for the whole parse, and the id is what interning that string gave.
#[derive(Default)]
pub(super) struct MemoStrs(Vec<StrId>);

impl MemoStrs {
    const UNKNOWN: StrId = StrId::MAX;

    /// How many of the memo's strings have their sites' id here.
    #[cfg(test)]
    pub(super) fn known(&self) -> usize {
        self.0.iter().filter(|&&id| id != Self::UNKNOWN).count()
    }

    /// The sites' id of `s`, the memo's string `index`.
    fn intern(&mut self, sites: &mut Sites, s: &str, index: u32) -> StrId {
        let i = index as usize;
        match self.0.get(i) {
            Some(&id) if id != Self::UNKNOWN => id,
            _ => {
                let id = sites.intern_str(s);
                if self.0.len() <= i {
                    self.0.resize(i + 1, Self::UNKNOWN);
                }
                self.0[i] = id;
                id
            }
        }
    }
}

impl Hook for EntryLowering {
    fn on_list_dict(
        &mut self,
        dict: &[(Value, Value)],
    ) -> std::result::Result<Option<Value>, String> {
        if let Some(handle) = self.entry_of_dict(dict)? {
            return Ok(Some(Value::Handle(handle)));
        }
        if allocator_state::has(dict, "filename") && allocator_state::has(dict, "name") {
            let frame = frame_of(
                &mut self.sites,
                &mut self.memo_strs,
                dict.iter().map(|(k, v)| (k, v)),
            );
            let handle = Handle::frame(self.frames.len())?;
            self.frames.push(frame);
            return Ok(Some(Value::Handle(handle)));
        }
        if allocator_state::is_block(dict) {
            let block = allocator_state::block_of(dict, self);
            let handle = Handle::block(self.blocks.len())?;
            self.blocks.push(block);
            return Ok(Some(Value::Handle(handle)));
        }
        if allocator_state::is_segment(dict) {
            let segment = allocator_state::segment_of(dict, self).map_err(|e| e.to_string())?;
            let handle = Handle::segment(self.segments.len())?;
            self.segments.push(segment);
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
        let site = self.with_handles(items, |s, handles| s.site_of_handles(handles));
        Ok(site.flatten().map(|site| Value::Handle(Handle::site(site))))
    }

    /// A batch of a trace's entries (or of a segment's blocks) becomes one
    /// handle for the run.
    fn on_appended_items(&mut self, items: &[Value]) -> std::result::Result<Option<Value>, String> {
        let run = self.with_handles(items, |s, handles| s.run_of(handles));
        Ok(run.transpose()?.flatten().map(Value::Handle))
    }

    /// The fast paths are open to every snapshot.
    fn fast(&mut self) -> Option<&mut dyn Records> {
        Some(self)
    }
}

/// Trace entries decoded straight from the pickle's bytes (see
/// `pickle::fast`): lowered as [`Hook::on_dict_items`] lowers them.
impl Records for EntryLowering {
    /// Only trace entries are lowered from records, and PyTorch writes an
    /// entry's `action` first: a record that starts with another key (a
    /// block, a segment) is left to the opcodes at once. An entry whose
    /// `action` comes later is lowered by them all the same.
    fn may_take(&self, key: &str) -> bool {
        key == "action"
    }

    /// [`Hook::on_dict_items`] for a record the parser decoded in place.
    fn on_record(
        &mut self,
        items: &[Item<'_>],
    ) -> std::result::Result<Option<(Value, Value)>, String> {
        let lowered = self.lower_entry(items)?;
        self.in_place += u64::from(lowered.is_some());
        Ok(lowered.map(marker))
    }

    /// A trace entry decoded in place becomes its event handle outright: no
    /// dict is built.
    fn on_whole_record(
        &mut self,
        items: &[Item<'_>],
    ) -> std::result::Result<Option<Value>, String> {
        let lowered = self.lower_entry(items)?;
        self.in_place += u64::from(lowered.is_some());
        Ok(lowered.map(Value::Handle))
    }

    /// A frame spelled out inline becomes a frame handle, as
    /// [`Hook::on_list_dict`] makes one of its dict (decided by its keys
    /// alone, before anything changes); equal frames share one handle, so
    /// a traceback repeated inline is found by its handles again
    /// ([`EntryLowering::site_of_handles`]) and the frames kept are the
    /// distinct ones.
    fn on_frame(&mut self, items: &[Item<'_>]) -> Option<Handle> {
        let has = |key: &str| items.chunks_exact(2).any(|c| c[0].str() == Some(key));
        // A dict with an `action` is a trace entry to `on_list_dict`.
        if has("action") || !has("filename") || !has("name") {
            return None;
        }
        let frame = frame_of(
            &mut self.sites,
            &mut self.memo_strs,
            items.chunks_exact(2).map(|c| (&c[0], &c[1])),
        );
        if let Some(&h) = self.frame_handles.get(&frame) {
            return Some(h);
        }
        let handle = Handle::frame(self.frames.len()).ok()?;
        self.frames.push(frame);
        self.frame_handles.insert(frame, handle);
        Some(handle)
    }
}

impl allocator_state::Read for EntryLowering {
    fn site_of(&mut self, frames: &Value) -> SiteId {
        EntryLowering::site_of(self, frames)
    }

    fn blocks_of_handle(&self, h: Handle) -> Option<&[BlockFields]> {
        EntryLowering::blocks_of_handle(self, h)
    }

    fn segment(&mut self, i: usize, last: bool) -> SegmentFields {
        if last {
            std::mem::replace(&mut self.segments[i], SegmentFields::moved_out())
        } else {
            self.segments[i].clone()
        }
    }
}

impl EntryLowering {
    /// `f` of the handles of `items` (gathered in the lowering's scratch
    /// list), or `None` unless every item is a handle.
    fn with_handles<T>(
        &mut self,
        items: &[Value],
        f: impl FnOnce(&mut Self, &[Handle]) -> T,
    ) -> Option<T> {
        let mut handles = std::mem::take(&mut self.handles);
        handles.clear();
        let all = items.iter().all(|item| match item {
            Value::Handle(h) => {
                handles.push(*h);
                true
            }
            _ => false,
        });
        let answer = all.then(|| f(self, &handles));
        self.handles = handles;
        answer
    }

    /// One handle for `handles` if they are two or more consecutive events
    /// (a batch of a trace list: 16 bytes a list instead of 16 an entry,
    /// 16 MB of a 1M-entry snapshot's peak) or consecutive blocks.
    fn run_of(&mut self, handles: &[Handle]) -> std::result::Result<Option<Handle>, String> {
        let (Some(first), true) = (handles.first(), handles.len() >= 2) else {
            return Ok(None);
        };
        let count = handles.len() as u32;
        let consecutive = |make: fn(u32) -> Lowered, start: u32| {
            start.checked_add(count).is_some()
                && handles
                    .iter()
                    .zip(start..)
                    .all(|(h, i)| h.lowered() == make(i))
        };
        match first.lowered() {
            Lowered::Event(start) if consecutive(Lowered::Event, start) => {
                let handle = Handle::events(self.event_runs.len())?;
                self.event_runs.push((start, count));
                Ok(Some(handle))
            }
            Lowered::Block(start) if consecutive(Lowered::Block, start) => {
                let handle = Handle::blocks(self.block_runs.len())?;
                self.block_runs.push((start, count));
                Ok(Some(handle))
            }
            _ => Ok(None),
        }
    }

    /// The events a handle in a trace list stands for: one, or a run.
    pub(super) fn events_of_handle(&self, h: Handle) -> Option<std::ops::Range<u32>> {
        match h.lowered() {
            Lowered::Event(i) => Some(i..i + 1),
            Lowered::Events(r) => {
                let (first, count) = self.event_runs[r as usize];
                Some(first..first + count)
            }
            _ => None,
        }
    }

    /// The blocks a handle in a `blocks` list stands for: one, or a run.
    pub(super) fn blocks_of_handle(&self, h: Handle) -> Option<&[BlockFields]> {
        let (first, count) = match h.lowered() {
            Lowered::Block(i) => (i, 1),
            Lowered::Blocks(r) => self.block_runs[r as usize],
            _ => return None,
        };
        Some(&self.blocks[first as usize..(first + count) as usize])
    }

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
    pub(super) fn entry_of_dict(
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
    pub(super) fn is_framed(&self, index: usize) -> bool {
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
        let mut region = None;
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
                // `N/A` outside `torch.compile`d code.
                "compile_context" => {
                    region = value
                        .str()
                        .filter(|c| !c.is_empty() && *c != "N/A")
                        .map(|c| self.sites.intern_str(&region_name(c)));
                }
                _ => {}
            }
        }
        if let Some(region) = region {
            event.site = self.in_region(event.site, region);
        }
        has_frames
    }

    /// `site` with the compiled region `region` as its outermost frame
    /// (profiler traces show the region as a range around the operators);
    /// a site that holds an entry stays apart, as it is.
    fn in_region(&mut self, site: SiteId, region: StrId) -> SiteId {
        if self.sites_with_entries.contains(&site) {
            return site;
        }
        if let Some(&s) = self.regions.get(&(site, region)) {
            return s;
        }
        let mut frames = self.sites.frames(site).to_vec();
        frames.push(Frame {
            filename: self.sites.intern_str(REGION_FILE),
            line: 0,
            name: region,
        });
        let s = self.sites.intern_site(&frames);
        self.regions.insert((site, region), s);
        s
    }

    /// Interns a frames list as a site, then empties the list and leaves the
    /// site's handle in it, so a later reference (free events share their
    /// alloc's list) costs nothing and the frames are not held twice. An
    /// empty list is the empty site (0) and stays as it is: the fast paths
    /// never make the lists of `frames: []` ([`Item::EmptyList`]), so
    /// neither path may change them.
    pub(super) fn site_of(&mut self, frames: &Value) -> SiteId {
        let list = match frames {
            Value::List(list) => list,
            // A frames list lowered while it streamed in (shared by a block
            // and its trace entries through the memo).
            Value::Handle(h) => return site_of_handle(*h),
            _ => return 0,
        };
        let mut items = list.borrow_mut();
        if items.is_empty() {
            return 0;
        }
        if let [Value::Handle(h)] = items.as_slice() {
            if let Lowered::Site(site) = h.lowered() {
                return site;
            }
        }
        let mut resolved = Vec::with_capacity(items.len());
        let mut holds_an_entry = false;
        for item in items.iter() {
            match item {
                Value::Handle(h) => match h.lowered() {
                    Lowered::Frame(i) => resolved.push(self.frames[i as usize]),
                    // The lowered first batch of a list appended to more than once.
                    Lowered::Site(site) => resolved.extend_from_slice(self.sites.frames(site)),
                    Lowered::Event(_) | Lowered::Events(_) | Lowered::Skipped => {
                        holds_an_entry = true
                    }
                    // A block or segment dict read as a frame: the empty
                    // frame (they have no `filename`, `name` or `line`).
                    Lowered::Block(_) | Lowered::Segment(_) => resolved.push(BLANK_FRAME),
                    Lowered::Blocks(r) => {
                        let count = self.block_runs[r as usize].1 as usize;
                        resolved.extend(std::iter::repeat_n(BLANK_FRAME, count));
                    }
                    // Only the lowering holds markers (in dicts, never in lists).
                    Lowered::Marker(_) => {}
                },
                Value::Dict(d) => {
                    let d = d.borrow();
                    resolved.push(frame_of(
                        &mut self.sites,
                        &mut self.memo_strs,
                        d.iter().map(|(k, v)| (k, v)),
                    ));
                }
                // `forward_frames` style: preformatted lines.
                Value::Str(line) => resolved.push(Frame {
                    filename: 0,
                    line: 0,
                    name: self.sites.intern_str(line),
                }),
                _ => {}
            }
        }
        let site = if holds_an_entry {
            let site = self.sites.site_apart(&resolved);
            self.sites_with_entries.insert(site);
            site
        } else {
            self.sites.intern_site(&resolved)
        };
        *items = vec![Value::Handle(Handle::site(site))];
        site
    }
}

/// What [`frame_of`] reads of a dict without `filename`, `line` or `name`.
const BLANK_FRAME: Frame = Frame {
    filename: 0,
    line: 0,
    name: 0,
};

/// The file of a compiled region's frame: what a profiler trace files its
/// ranges under.
const REGION_FILE: &str = "user_annotation";

/// A `compile_context` as the profiler names the region
/// (`Torch-Compiled Region: 0/0`), whether or not the value says it.
fn region_name(context: &str) -> String {
    if context.starts_with(COMPILED_REGION) {
        context.to_owned()
    } else {
        format!("{COMPILED_REGION}{context}")
    }
}

/// A field value of a trace entry: a [`Value`], or an [`Item`] of a record
/// the parser decoded in place (read exactly as the `Value` it stands for).
trait Field {
    fn u64(&self) -> Option<u64>;
    fn f64(&self) -> Option<f64>;
    fn str(&self) -> Option<&str>;
    /// A string the memo holds, with its index among the memo's strings
    /// ([`Item::MemoStr`]).
    fn memo_str(&self) -> Option<(&str, u32)> {
        None
    }
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
            Item::Str(s) | Item::MemoStr(s, _) => Some(s),
            _ => None,
        }
    }
    fn memo_str(&self) -> Option<(&str, u32)> {
        match *self {
            Item::MemoStr(s, index) => Some((s, index)),
            _ => None,
        }
    }
    fn site(&self, lowering: &mut EntryLowering) -> SiteId {
        // As `site_of` reads a handle (a lowered list is given as its handle).
        match *self {
            Item::Handle(h) => site_of_handle(h),
            Item::List(l) => lowering.site_of(&Value::List(std::rc::Rc::clone(l))),
            // An empty list: the empty site, as `site_of` reads it.
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

/// `{"filename", "line", "name"}` → frame, from a dict's pairs (the last
/// of a repeated key wins). A frame of code FX generated for a graph
/// (`fx_generated_….py`) that a snapshot taken with
/// `augment_with_fx_traces=True` maps back to the model's source
/// (`fx_original_trace`, the graph node's Python traceback) is that source
/// line instead: its innermost frame's file, line and function. Other keys
/// (`fx_node_op`, `fx_node_name`, `fx_node_target`, …) are ignored.
fn frame_of<'a, F: Field + 'a>(
    sites: &mut Sites,
    memo_strs: &mut MemoStrs,
    pairs: impl Iterator<Item = (&'a F, &'a F)>,
) -> Frame {
    let mut intern = |value: &F| match value.memo_str() {
        Some((s, index)) => memo_strs.intern(sites, s, index),
        None => sites.intern_str(value.str().unwrap_or("")),
    };
    let mut frame = Frame {
        filename: 0,
        line: 0,
        name: 0,
    };
    let mut original = None;
    for (key, value) in pairs {
        match key.str() {
            Some("filename") => frame.filename = intern(value),
            Some("name") => frame.name = intern(value),
            Some("line") => frame.line = value.u64().unwrap_or(0).min(u32::MAX as u64) as u32,
            Some("fx_original_trace") => original = value.str(),
            _ => {}
        }
    }
    if let Some((file, line, name)) =
        original.and_then(crate::vocabulary::innermost_traceback_frame)
    {
        frame = Frame {
            filename: sites.intern_str(file),
            line,
            name: sites.intern_str(name),
        };
    }
    frame
}

/// [`EntryLowering`] with the fast paths' door closed: every opcode is
/// interpreted one by one. The oracle of the differential tests.
#[cfg(any(test, feature = "fuzzing"))]
#[derive(Default)]
pub(super) struct Plain(pub(super) EntryLowering);

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
    fn on_appended_items(&mut self, items: &[Value]) -> std::result::Result<Option<Value>, String> {
        self.0.on_appended_items(items)
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
