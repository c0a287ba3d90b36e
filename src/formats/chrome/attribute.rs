//! Operator attribution: which operators were open on a memory event's
//! thread at its instant (formats.md B6).
//!
//! - **Input:** operator intervals per thread ([`OpRec`]: thread, `[start,
//!   end)` in ns, [`OpKind`], name), from `X` events and from `B`/`E` pairs
//!   ([`pair_begin_end`]); and the [`Instant`] (thread, ts, file order) of
//!   each memory event.
//! - **Sweep:** [`Operators`] sorts the intervals once by (thread, start,
//!   −end); [`sweep`] visits the instants in (thread, ts, order) order with
//!   a stack per thread and hands each one its [`OpenOps`]: the operators
//!   open at that instant, innermost first, each named by its [`OpId`].
//! - **Output:** [`attribute`] turns the open stack into an interned site
//!   (kind as the frame's file, name as its function; at most
//!   [`MAX_FRAMES`]) and names the event's *operator call* ([`OpCall`]: the
//!   outermost open `cpu_op` that PyTorch's memory profiler treats as one
//!   op, see [`is_operator_call`]). The classifier reads both: the site for
//!   evidence, the call for "allocated and freed within one operator call".
//!
//! ## Extending it
//!
//! An [`OpId`] names one operator *call* (one interval), so later work adds
//! consumers of [`sweep`] rather than rewriting it:
//!
//! - *Allocated and freed within one operator call* (issue 11.2, 11.3): done;
//!   each memory event carries its call ([`Attributed::calls`], then
//!   `DeviceTrace::op_calls`), and a block whose alloc and free carry the
//!   same call was freed inside it.
//! - *Annotations* (`ProfilerStep#N`, `Optimizer.step#…`,
//!   `Optimizer.zero_grad#…`, `## forward ##`): they are intervals of kind
//!   [`OpKind::UserAnnotation`] (or named `ProfilerStep#…`), so they are
//!   already in every open stack; a phase classifier walks
//!   [`OpenOps::innermost_first`] for the nearest one instead of reading
//!   Python frames. Annotations on another thread than the memory event's
//!   (the optimizer step on the main thread, autograd on its own) need a
//!   second, per-process pass over the same sorted [`Operators`].
//! - *`record_shapes` inputs* (`Input Dims`/`Input type` of `aten::linear`,
//!   convolutions, `aten::embedding`, foreach ops): add an optional field to
//!   [`OpRec`], filled in `collect.rs` from a skeleton args visitor that reads
//!   those two keys only for `cpu_op` events (the rest stays `IgnoredAny`),
//!   and read it through the `OpId` the sweep hands out.
//! - *Streaming* (issue 16): a scanner that never holds the file produces the
//!   same two inputs: memory events and operator intervals (with owned or
//!   interned names instead of borrowed ones). Nothing here reads the input
//!   bytes.

use std::cmp::Reverse;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::model::{Frame, OpCall, SiteId, Sites, StrId};
use crate::vocabulary::is_operator_call;

/// Innermost operator frames kept per memory event.
pub(super) const MAX_FRAMES: usize = 64;
/// A thread's open stack is pruned of buried closed intervals beyond this
/// depth (badly nested intervals could otherwise grow it without bound).
const PRUNE_DEPTH: usize = 4 * MAX_FRAMES;

/// The host categories that open an operator frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum OpKind {
    CpuOp = 0,
    PythonFunction = 1,
    UserAnnotation = 2,
}

impl OpKind {
    /// Indexed by discriminant, in the order their names are interned (site
    /// string ids depend on it).
    const ALL: [OpKind; 3] = [
        OpKind::CpuOp,
        OpKind::PythonFunction,
        OpKind::UserAnnotation,
    ];

    /// The category as a frame shows it (legacy names mapped to current ones).
    pub(super) fn name(self) -> &'static str {
        match self {
            OpKind::CpuOp => "cpu_op",
            OpKind::PythonFunction => "python_function",
            OpKind::UserAnnotation => "user_annotation",
        }
    }

    /// One category name, trimmed (case-insensitive). Legacy
    /// `Operator`/`User` map to the current names.
    pub(super) fn of_name(part: &str) -> Option<OpKind> {
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
    }

    /// Reads `cat` (case-insensitive; may be a comma-separated list): each
    /// part trimmed and read by [`OpKind::of_name`], the first it names.
    #[inline]
    pub(super) fn of_category(cat: Option<&str>) -> Option<OpKind> {
        let cat = cat?;
        let of_part = |part: &str| {
            // What PyTorch writes, exactly: no trimming, no case folding.
            match part {
                "cpu_op" => return Some(OpKind::CpuOp),
                "python_function" => return Some(OpKind::PythonFunction),
                "user_annotation" => return Some(OpKind::UserAnnotation),
                _ => {}
            }
            // Trimmed, a name of another length is none of them (a GPU
            // kernel's, a runtime call's: half of a trace's events).
            let plain =
                |b: Option<&u8>| b.is_some_and(|b| b.is_ascii() && !b.is_ascii_whitespace());
            let part = if plain(part.as_bytes().first()) && plain(part.as_bytes().last()) {
                part
            } else {
                part.trim()
            };
            if !matches!(part.len(), 4 | 6 | 8 | 15) {
                return None;
            }
            OpKind::of_name(part)
        };
        // What PyTorch writes for operators, first: no byte of it is
        // looked at again for a comma (that scan was ~75 instructions an
        // event: callgrind, the corpus's OWLv2 trace).
        match cat {
            "cpu_op" => return Some(OpKind::CpuOp),
            "python_function" => return Some(OpKind::PythonFunction),
            "user_annotation" => return Some(OpKind::UserAnnotation),
            _ => {}
        }
        // Almost every other event's category is one short name too: asked
        // whole, without setting up a split (or a `memchr` call) for each.
        if cat.bytes().any(|b| b == b',') {
            cat.split(',').find_map(of_part)
        } else {
            of_part(cat)
        }
    }
}

/// An operator interval `[start, end)` in integer nanoseconds; `end` is
/// `i64::MAX` for a `B` without its `E`.
#[derive(Debug, Clone)]
pub(super) struct OpRec {
    pub(super) thread: u32,
    pub(super) start: i64,
    pub(super) end: i64,
    pub(super) kind: OpKind,
    /// Interned by the collector: a trace has a few thousand distinct names
    /// in hundreds of thousands of events.
    pub(super) name: Arc<str>,
}

/// A `B` or `E` event, before pairing. `kind` is `None` for categories
/// that open no frame: they still take part in the pairing.
#[derive(Debug, Clone)]
pub(super) struct BeRec {
    pub(super) thread: u32,
    pub(super) ts: i64,
    /// Position in the file: orders events with equal `ts`.
    pub(super) order: u32,
    pub(super) begin: bool,
    pub(super) kind: Option<OpKind>,
    pub(super) name: Arc<str>,
}

/// Turns `B`/`E` pairs into operator intervals appended to `ops` (per
/// thread, in time order: an `E` closes the latest open `B`). Returns how
/// many `B` that open a frame have no `E`; they stay open to the end.
pub(super) fn pair_begin_end(mut be: Vec<BeRec>, ops: &mut Vec<OpRec>) -> usize {
    if be.is_empty() {
        return 0;
    }
    be.sort_by_key(|r| (r.thread, r.ts, r.order));
    let mut unclosed = 0;
    let mut stack: Vec<BeRec> = Vec::new();
    let mut thread = u32::MAX;
    let flush = |stack: &mut Vec<BeRec>, ops: &mut Vec<OpRec>, unclosed: &mut usize| {
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
            flush(&mut stack, ops, &mut unclosed);
            thread = r.thread;
        }
        if r.begin {
            stack.push(r);
        } else if let Some(b) = stack.pop() {
            if let Some(kind) = b.kind {
                ops.push(OpRec {
                    thread: b.thread,
                    start: b.ts,
                    end: r.ts.max(b.ts),
                    kind,
                    name: b.name,
                });
            }
        }
    }
    flush(&mut stack, ops, &mut unclosed);
    unclosed
}

/// One operator call: an index into [`Operators`].
pub(super) type OpId = usize;

/// Where a memory event happened: its thread, time (ns) and position in the
/// file (which orders events with equal times).
#[derive(Debug, Clone, Copy)]
pub(super) struct Instant {
    pub(super) thread: u32,
    pub(super) ts: i64,
    pub(super) order: u32,
}

/// The operator intervals of a trace, sorted for the sweep by (thread,
/// start, −end): on one thread an enclosing interval comes before the ones
/// it contains.
pub(super) struct Operators {
    ops: Vec<OpRec>,
}

impl Operators {
    pub(super) fn new(mut ops: Vec<OpRec>) -> Operators {
        sort_for_sweep(&mut ops);
        Operators { ops }
    }

    pub(super) fn get(&self, id: OpId) -> &OpRec {
        &self.ops[id]
    }

    pub(super) fn len(&self) -> usize {
        self.ops.len()
    }

    /// Every operator, in the sweep's order.
    pub(super) fn all(&self) -> &[OpRec] {
        &self.ops
    }
}

/// Sorts intervals as [`Operators`] holds them: by (thread, start, −end),
/// equal ones in the order given (a stable sort). Sorting parts first
/// changes nothing but the time: the two halves of a split read are
/// sorted on their own threads, and the sort of the joined list then
/// merges a few runs (trace-owlv2.json, 540K intervals: 15 ms after the
/// join -> 6 ms there and 7 ms on each thread before it, side by side).
pub(super) fn sort_for_sweep(ops: &mut [OpRec]) {
    ops.sort_by_key(|o| (o.thread, o.start, Reverse(o.end)));
}

/// The operators open at one instant on its thread.
pub(super) struct OpenOps<'s> {
    ops: &'s [OpRec],
    stack: &'s [OpId],
    at: i64,
    /// The instant's thread has operators at all (else it is outside any by
    /// construction, e.g. an allocator thread).
    pub(super) thread_has_ops: bool,
}

impl OpenOps<'_> {
    /// The open operators, innermost first (the sweep's tests read them so).
    #[cfg(test)]
    pub(super) fn innermost_first(&self) -> impl Iterator<Item = OpId> + '_ {
        // The stack may hold closed intervals under open ones (bad nesting);
        // they are skipped here rather than searched for on every push.
        self.stack
            .iter()
            .rev()
            .copied()
            .filter(|&k| self.ops[k].end > self.at)
    }

    /// The open operators, outermost first.
    pub(super) fn outermost_first(&self) -> impl Iterator<Item = OpId> + '_ {
        self.stack
            .iter()
            .copied()
            .filter(|&k| self.ops[k].end > self.at)
    }
}

/// Visits every event with the operators open at its instant: one sort of
/// the events by (thread, ts, order) and one pass over the sorted operators
/// with a stack. `visit` gets the event's index in `events`.
pub(super) fn sweep<M>(
    ops: &Operators,
    events: &[M],
    instant: impl Fn(&M) -> Instant,
    mut visit: impl FnMut(usize, OpenOps<'_>),
) {
    let ops = &ops.ops;
    let mut order: Vec<u32> = (0..events.len() as u32).collect();
    order.sort_by_key(|&i| {
        let at = instant(&events[i as usize]);
        (at.thread, at.ts, at.order)
    });

    let mut next_op = 0usize;
    let mut stack: Vec<OpId> = Vec::new();
    let mut thread = u32::MAX;
    let mut thread_has_ops = false;
    for &i in &order {
        let Instant {
            thread: th, ts: t, ..
        } = instant(&events[i as usize]);
        if th != thread {
            thread = th;
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
        if stack.len() > PRUNE_DEPTH {
            stack.retain(|&k| ops[k].end > t);
        }
        visit(
            i as usize,
            OpenOps {
                ops,
                stack: &stack,
                at: t,
                thread_has_ops,
            },
        );
    }
}

/// Memory events that no operator was open around.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Unattributed {
    pub(super) outside: usize,
    /// Of `outside`, those on threads that have no operator at all.
    pub(super) on_threads_without_ops: usize,
}

/// What [`attribute`] gives each memory event.
pub(super) struct Attributed {
    /// The event's operator stack as a site (site 0 when none is open).
    pub(super) sites: Vec<SiteId>,
    /// The outermost open `cpu_op` that is a call ([`is_operator_call`]).
    pub(super) calls: Vec<Option<OpCall>>,
    pub(super) unattributed: Unattributed,
}

/// The site of every event: its open operators, innermost first, as frames
/// (`kind` as the file, name as its function; consecutive equal frames
/// once; at most [`MAX_FRAMES`]). Site 0 (no frames) when none is open.
/// And the operator call each event happened in.
///
/// Events follow each other under mostly the same open operators, with one
/// or two new ones on top. So what the open operators say (their frame
/// path, their outermost call) is kept per position of the open list
/// ([`Prefixes`]): an event's entry is its top's, made from the one below
/// in O(1) when the top is new, and a frame path's site is made once. The
/// strings and sites are interned in the order the frame-by-frame reading
/// interned them (by the first event that needs each), so their ids and
/// every report stay the same.
///
/// Measured with the phase's own timer on `scripts/bench_inputs.sh`'s
/// trace-owlv2.json (with_stack: Python frames under every operator; 540K
/// intervals, 81K memory events, open lists 48 deep on average): this
/// step (sweep, sites and calls) 42 ms -> 28 ms; trace-adamw.json 31 ms ->
/// 24 ms; trace-resnet50.json (no stacks) 12 ms either way.
pub(super) fn attribute<M>(
    ops: &Operators,
    events: &[M],
    instant: impl Fn(&M) -> Instant,
    sites: &mut Sites,
) -> Attributed {
    let mut state = Attribution::new(ops, events.len(), sites);
    let mut prefixes = Prefixes::default();
    let mut open_ids: Vec<OpId> = Vec::new();
    sweep(ops, events, instant, |i, open| {
        open_ids.clear();
        open_ids.extend(open.outermost_first());
        match prefixes.top(&open_ids, &mut state) {
            Some(top) => state.by_prefixes(i, &open_ids, top, &mut prefixes),
            None => state.outside(i, &open),
        }
    });
    Attributed {
        sites: state.site_of,
        calls: state.call_of,
        unattributed: state.unattributed,
    }
}

/// What [`attribute`] builds, and what both of its ways share.
struct Attribution<'o, 's> {
    ops: &'o Operators,
    sites: &'s mut Sites,
    kind_ids: [StrId; 3],
    /// Per operator: its name's string id, once interned.
    name_ids: Vec<StrId>,
    /// Per operator: not yet looked at, a call, or not a call.
    is_call: Vec<Option<bool>>,
    site_of: Vec<SiteId>,
    call_of: Vec<Option<OpCall>>,
    unattributed: Unattributed,
    frames: Vec<Frame>,
}

impl<'o, 's> Attribution<'o, 's> {
    fn new(ops: &'o Operators, events: usize, sites: &'s mut Sites) -> Self {
        Attribution {
            ops,
            kind_ids: OpKind::ALL.map(|k| sites.intern_str(k.name())),
            sites,
            name_ids: vec![u32::MAX; ops.len()],
            is_call: vec![None; ops.len()],
            site_of: vec![0; events],
            call_of: vec![None; events],
            unattributed: Unattributed::default(),
            frames: Vec::with_capacity(MAX_FRAMES),
        }
    }

    /// Whether operator `k` is a call ([`is_operator_call`]), read once.
    fn is_call(&mut self, k: OpId) -> bool {
        let ops = self.ops;
        *self.is_call[k].get_or_insert_with(|| {
            let op = ops.get(k);
            op.kind == OpKind::CpuOp && is_operator_call(&op.name)
        })
    }

    /// The site of `ids` (open operators, innermost first): their frames
    /// (`kind` as the file, name as its function), consecutive equal ones
    /// once, at most [`MAX_FRAMES`].
    fn site_of_ops(&mut self, ids: impl Iterator<Item = OpId>) -> SiteId {
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        for k in ids {
            if frames.len() == MAX_FRAMES {
                break;
            }
            let op = self.ops.get(k);
            if self.name_ids[k] == u32::MAX {
                self.name_ids[k] = self.sites.intern_str(&op.name);
            }
            let f = Frame {
                filename: self.kind_ids[op.kind as usize],
                line: 0,
                name: self.name_ids[k],
            };
            if frames.last() != Some(&f) {
                frames.push(f);
            }
        }
        let site = self.sites.intern_site(&frames);
        self.frames = frames;
        site
    }

    /// Event `i`, outside any operator.
    fn outside(&mut self, i: usize, open: &OpenOps<'_>) {
        self.unattributed.outside += 1;
        if !open.thread_has_ops {
            self.unattributed.on_threads_without_ops += 1;
        }
        self.site_of[i] = 0;
        self.call_of[i] = None;
    }

    /// Event `i` under the operators `open` (outermost first), whose top's
    /// entry is `top`.
    fn by_prefixes(&mut self, i: usize, open: &[OpId], top: Prefix, prefixes: &mut Prefixes) {
        self.call_of[i] = top.call.and_then(OpCall::new);
        let slot = &mut prefixes.site_of_node[top.node as usize];
        if *slot == SiteId::MAX {
            *slot = self.site_of_ops(open.iter().rev().copied());
        }
        self.site_of[i] = *slot;
    }
}

/// What the first `j + 1` open operators of an event (outermost first)
/// say, kept for each position `j` of the open list while the operator
/// there stays. The list changes by operators closing (anywhere in it: a
/// buried interval may end before the ones above it, the float times of
/// Kineto nest loosely) and by new ones on top; either way an operator
/// still at the position it had when its entry was made has the same
/// operators below it (none can be added below, and any removed would have
/// moved it down), so the entry still holds.
#[derive(Clone, Copy)]
struct Prefix {
    /// The operator at this position when the entry was made.
    op: OpId,
    /// Their frames, as a node of [`Prefixes::nodes`] (distinct from the
    /// site: equal frames in a row and the cap are applied when a node's
    /// site is made).
    node: u32,
    /// The outermost call among them.
    call: Option<OpId>,
}

/// A frame as the prefixes tell them apart: the operator's kind and where
/// its name is (the collector interns names, a split read's join included:
/// one allocation per name). No string is hashed or interned.
type FrameKey = (OpKind, *const u8);

/// The entries of the sweep's open stack, and the frame paths they name: a
/// node is its parent node and one frame, so equal frame paths are one node
/// whatever operators made them, and a node's site is made once.
#[derive(Default)]
struct Prefixes {
    at: Vec<Prefix>,
    nodes: FxHashMap<(u32, FrameKey), u32>,
    /// Per node: its site, once an event needed it (`SiteId::MAX` before).
    site_of_node: Vec<SiteId>,
}

impl Prefixes {
    /// The entry of the stack's top, made (with those missing below it)
    /// if need be; `None` for an empty stack.
    fn top(&mut self, stack: &[OpId], attribution: &mut Attribution<'_, '_>) -> Option<Prefix> {
        let ops = attribution.ops;
        let top = stack.len().checked_sub(1)?;
        let mut valid = stack.len();
        while valid > 0
            && self
                .at
                .get(valid - 1)
                .is_none_or(|p| p.op != stack[valid - 1])
        {
            valid -= 1;
        }
        for (j, &k) in stack.iter().enumerate().skip(valid) {
            let op = ops.get(k);
            let frame = (op.kind, op.name.as_ptr());
            // Below the outermost operator: no frame, no call, no node
            // (node ids start at 0, the root is u32::MAX).
            let below = j.checked_sub(1).map(|b| self.at[b]);
            let parent = below.map_or(u32::MAX, |p| p.node);
            let next = self.site_of_node.len() as u32;
            let node = *self.nodes.entry((parent, frame)).or_insert(next);
            if node == next {
                self.site_of_node.push(SiteId::MAX);
            }
            let call = below.and_then(|p| p.call);
            let entry = Prefix {
                op: k,
                node,
                call: call.or_else(|| attribution.is_call(k).then_some(k)),
            };
            if j < self.at.len() {
                self.at[j] = entry;
            } else {
                self.at.push(entry);
            }
        }
        Some(self.at[top])
    }
}
