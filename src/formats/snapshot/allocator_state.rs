//! The allocator's state at dump time — `segments`, each with its `blocks` —
//! read from their dicts. The lowering reads each block and segment dict
//! as soon as it is appended to its list (so the unpickler frees it, and the
//! memo keeps a handle instead of it), and [`build_trace`](super::build_trace)
//! reads any it left as dicts (a JSON snapshot's, or a shape the lowering
//! does not recognise) with the same functions: one reading either way.
//!
//! Why: a snapshot's segments come before its trace entries, so their dicts
//! were held through the whole parse. On `snap-unshared.pickle`
//! (`scripts/bench_inputs.sh`: 42K segments, 88K blocks) they were ~40 MB of
//! the 126 MiB peak RSS.

use super::pickle::{dict_value as field, Handle, Lowered, Value};
use crate::error::{Error, Result};
use crate::model::{Block, BlockState, Segment, SiteId};

/// What reading the allocator state needs of the lowering that read the
/// file (`lowering.rs` implements it; this module does not import it): a
/// site for frames, and the blocks and segments it read already.
pub(super) trait Read {
    /// The site of a `frames` list.
    fn site_of(&mut self, frames: &Value) -> SiteId;
    /// The blocks the lowering read from the dict `h` stands for, if any.
    fn blocks_of_handle(&self, h: Handle) -> Option<&[BlockFields]>;
    /// The `i`-th segment the lowering read: moved out of the lowering at
    /// its `last` use, copied before it.
    fn segment(&mut self, i: usize, last: bool) -> SegmentFields;
}

/// A block as its dict says it, before its segment places it.
#[derive(Debug, Clone, Copy)]
pub(super) struct BlockFields {
    /// `address`, if the key is there (its value may not be a number).
    has_address: bool,
    address: Option<u64>,
    size: u64,
    requested_size: u64,
    state: BlockState,
    site: SiteId,
}

/// A segment as its dict says it: where it is, on which device, its blocks
/// placed, and what `build_trace` tallies over all segments.
#[derive(Debug, Clone)]
pub(super) struct SegmentFields {
    pub(super) device: i64,
    pub(super) segment: Segment,
    /// Lacks the caching allocator's own fields (see [`segment_of`]).
    pub(super) synthetic: bool,
    /// Live blocks without frames.
    pub(super) blocks_without_frames: u64,
}

impl SegmentFields {
    /// What a segment moved out of the lowering leaves there.
    pub(super) fn moved_out() -> SegmentFields {
        SegmentFields {
            device: 0,
            segment: Segment {
                addr: 0,
                total_size: 0,
                is_expandable: false,
                blocks: Default::default(),
            },
            synthetic: false,
            blocks_without_frames: 0,
        }
    }
}

/// Whether a dict's pairs have `key`.
pub(super) fn has(pairs: &[(Value, Value)], key: &str) -> bool {
    field(pairs, key).is_some()
}

/// Whether a dict appended to a list is a block the lowering reads at
/// once: it has a `size` and a `state`, and nothing of a trace entry, a
/// frame or the torch 1.13 `history` (read at build time, as it was).
/// With no `filename`, `name` or `line`, a block that ends up inside a
/// `frames` list (a crafted file) reads as the empty frame it would have
/// read as.
pub(super) fn is_block(pairs: &[(Value, Value)]) -> bool {
    has(pairs, "size")
        && has(pairs, "state")
        && !["action", "filename", "name", "line", "history"]
            .iter()
            .any(|k| has(pairs, k))
}

/// Whether a dict appended to a list is a segment the lowering reads at
/// once: it has a `total_size` and `blocks` that are a list, and nothing
/// of a trace entry or a frame (so, inside a `frames` list, it reads as
/// the empty frame it would have read as). Any other `blocks` is left to
/// `build_trace`, which refuses it.
pub(super) fn is_segment(pairs: &[(Value, Value)]) -> bool {
    matches!(field(pairs, "blocks"), Some(Value::List(_)))
        && has(pairs, "total_size")
        && !["action", "filename", "name", "line"]
            .iter()
            .any(|k| has(pairs, k))
}

/// A block's fields from its dict's pairs (anything else reads as `&[]`:
/// a block of size 0, inactive, without frames).
pub(super) fn block_of(pairs: &[(Value, Value)], lowering: &mut impl Read) -> BlockFields {
    let size = field(pairs, "size").and_then(|v| v.as_u64()).unwrap_or(0);
    let state = match field(pairs, "state").and_then(|v| v.as_str()) {
        Some("active_allocated") => BlockState::ActiveAllocated,
        Some("active_pending_free") | Some("active_awaiting_free") => BlockState::ActivePendingFree,
        _ => BlockState::Inactive,
    };
    // torch 1.13 era: `history: [{addr, real_size, frames}]`.
    let history_first = field(pairs, "history")
        .and_then(|h| h.list_items().and_then(|items| items.first().cloned()));
    let requested_size = field(pairs, "requested_size")
        .and_then(|v| v.as_u64())
        .or_else(|| {
            history_first
                .as_ref()
                .and_then(|h| h.get("real_size")?.as_u64())
        })
        .unwrap_or(size);
    let history_frames = history_first.as_ref().and_then(|h| h.get("frames"));
    let frames = field(pairs, "frames").or(history_frames.as_ref());
    let site = frames.map_or(0, |f| lowering.site_of(f));
    let address = field(pairs, "address");
    BlockFields {
        has_address: address.is_some(),
        address: address.and_then(|v| v.as_u64()),
        size,
        requested_size,
        state,
        site,
    }
}

/// A segment's fields from its dict's pairs, its blocks read from their
/// dicts or taken from what the lowering made of them.
pub(super) fn segment_of(
    pairs: &[(Value, Value)],
    lowering: &mut impl Read,
) -> Result<SegmentFields> {
    let addr = field(pairs, "address")
        .and_then(|v| v.as_u64())
        .unwrap_or(0);
    let mut fields = SegmentFields {
        device: field(pairs, "device").and_then(|v| v.as_i64()).unwrap_or(0),
        segment: Segment {
            addr,
            total_size: field(pairs, "total_size")
                .and_then(|v| v.as_u64())
                .unwrap_or(0),
            is_expandable: field(pairs, "is_expandable")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            blocks: Default::default(),
        },
        synthetic: false,
        blocks_without_frames: 0,
    };
    let blocks = match field(pairs, "blocks") {
        None => Vec::new(),
        Some(list) => blocks_in(list, lowering)?,
    };
    // The caching allocator's segments say what kind of pool they are and
    // how much of them is allocated, and their blocks have addresses;
    // `_profile_to_snapshot` lays out one synthetic segment per device from
    // the tensors' own addresses (CPU heap addresses span terabytes) and
    // says none of it.
    fields.synthetic = !has(pairs, "segment_type")
        && !has(pairs, "allocated_size")
        && !blocks.iter().any(|b| b.has_address);
    // Old files have no block address: blocks are contiguous (MemoryViz does the same).
    let mut next_addr = addr;
    for b in blocks {
        let block_addr = b.address.unwrap_or(next_addr);
        next_addr = block_addr.saturating_add(b.size);
        if b.site == 0 && b.state != BlockState::Inactive {
            fields.blocks_without_frames += 1;
        }
        fields.segment.blocks.push(Block {
            addr: block_addr,
            size: b.size,
            requested_size: b.requested_size,
            state: b.state,
            site: b.site,
        });
    }
    Ok(fields)
}

/// The fields of each block of a segment's `blocks` list: a block the
/// lowering read is taken as it read it, a run of them too, anything else
/// is read now.
fn blocks_in(list: &Value, lowering: &mut impl Read) -> Result<Vec<BlockFields>> {
    let items = list
        .list_items()
        .ok_or_else(|| Error::Schema("segment `blocks` is not a list".into()))?;
    let mut blocks = Vec::with_capacity(items.len());
    for item in items.iter() {
        match item {
            Value::Handle(h) => match lowering.blocks_of_handle(*h) {
                Some(lowered) => blocks.extend_from_slice(lowered),
                // Any other handle read as a dict would be: as `&[]`.
                None => blocks.push(block_of(&[], lowering)),
            },
            Value::Dict(d) => blocks.push(block_of(&d.borrow(), lowering)),
            _ => blocks.push(block_of(&[], lowering)),
        }
    }
    Ok(blocks)
}

/// Which segment the lowering read `item` (of the `segments` list) stands
/// for, if it is one.
pub(super) fn lowered_segment(item: &Value) -> Option<usize> {
    match item {
        Value::Handle(h) => match h.lowered() {
            Lowered::Segment(i) => Some(i as usize),
            _ => None,
        },
        _ => None,
    }
}

/// The segment an item of the `segments` list stands for; `last(i)`:
/// whether this is the last place in the list of the lowered segment `i`.
pub(super) fn segment_item(
    item: &Value,
    lowering: &mut impl Read,
    last: impl FnOnce(usize) -> bool,
) -> Result<SegmentFields> {
    if let Some(i) = lowered_segment(item) {
        return Ok(lowering.segment(i, last(i)));
    }
    match item {
        Value::Dict(d) => segment_of(&d.borrow(), lowering),
        _ => segment_of(&[], lowering),
    }
}
