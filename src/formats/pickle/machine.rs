//! The plain interpreter: one `match` arm per opcode over the buffered
//! window, with the [`Hook`] called where a container completes (a dict
//! appended to a list, items appended to an empty list or set into an empty
//! dict). The fast paths (`fast`) are entered at two opcodes only, `MARK` and
//! `EMPTY_DICT`, and only when the hook opened their door.

use std::cell::RefCell;
use std::io::BufRead;
use std::rc::{Rc, Weak};

use super::fast_state::{GetRunHints, Scratch, TracebackLists};
use super::memo::{Got, Memo};
use super::opcodes::{self, op, op_name, refused_name, unsupported_name};
use super::teardown::{dismantle, dismantle_all, drain_work};
use super::value::{DictRc, ListRc};
pub(super) use super::window::PResult;
use super::window::Window;
use super::{Hook, Limits, Value};

/// Most values the parser stack may hold (Python batches list and dict items
/// by 1000, so real snapshots stay far below this).
pub(super) const MAX_STACK: usize = 1 << 20;

/// Memo indices are u32; this one is reserved so that `MEMOIZE` can detect overflow.
pub(super) const NO_MEMO: u32 = u32::MAX;
const DICT_POOL_MAX: usize = 4096;
/// Moves `items` out as (key, value) pairs, leaving `None`s behind. An exact-size
/// iterator over slots is much faster than pairing `Drain::next()` results,
/// which go through `Option<Value>` temporaries.
#[inline(always)]
fn pairs(items: &mut [Value]) -> impl ExactSizeIterator<Item = (Value, Value)> + '_ {
    items.chunks_exact_mut(2).map(|c| {
        (
            std::mem::replace(&mut c[0], Value::None),
            std::mem::replace(&mut c[1], Value::None),
        )
    })
}

/// Records that the dict at stack position `pos` is held by memo slot `idx`.
#[inline]
fn tag_dict(tags: &mut Vec<(usize, u32)>, pos: usize, idx: u32) {
    while matches!(tags.last(), Some(&(p, _)) if p >= pos) {
        tags.pop();
    }
    tags.push((pos, idx));
}

/// Pushes a value onto the parser's stack, constructing it in place after the
/// capacity check (a plain `Vec::push` builds small enum values in a stack
/// temporary first, which costs a store-forwarding stall on every opcode).
macro_rules! push {
    ($p:expr, $v:expr) => {{
        let st = &mut $p.stack;
        if st.len() == st.capacity() {
            // Checked where the stack grows, not per push: the next opcode
            // fails (see `Parser::run`), wherever the input's windows end.
            $p.stack_full |= st.len() >= $crate::formats::pickle::machine::MAX_STACK;
            st.reserve(st.len().max(64));
        }
        let len = st.len();
        st.spare_capacity_mut()[0].write($v);
        // SAFETY: `len < capacity` (reserved above) and the slot at `len` was
        // initialised by the write just above.
        unsafe { st.set_len(len + 1) };
    }};
}
pub(super) use push;

/// The interpreter's state. Fields are visible to the fast paths (`fast`),
/// which work on the same stack, memo and window.
pub(super) struct Parser<'a, R: ?Sized> {
    pub(super) win: Window<'a, R>,
    /// The opcode being executed.
    pub(super) code: u8,
    pub(super) limits: &'a Limits,
    pub(super) hook: &'a mut dyn Hook,
    pub(super) stack: Vec<Value>,
    /// `(stack position, memo index)` for dicts and lists stored in or
    /// fetched from the memo, increasing by position; lets the hook replace a
    /// container's memo slot in O(1). Entries may be stale: they are verified
    /// by pointer identity.
    pub(super) memo_tags: Vec<(usize, u32)>,
    /// The last lowered list whose memo slot holds its lowered value instead
    /// of the list, and that slot (see [`Parser::lowered`]).
    last_lowered: Option<(Weak<RefCell<Vec<Value>>>, u32)>,
    /// Emptied dicts (unique, capacity kept) for `EMPTY_DICT` to reuse.
    dict_pool: Vec<DictRc>,
    pub(super) marks: Vec<usize>,
    pub(super) memo: Memo,
    work: Vec<Value>,
    /// The fast paths' answers for tracebacks.
    pub(super) tracebacks: TracebackLists,
    /// The fast paths' scratch.
    pub(super) scratch: Scratch,
    /// Whether the hook opened the door to the fast paths ([`Hook::fast`]).
    fast: bool,
    /// The stack grew past [`MAX_STACK`] values.
    pub(super) stack_full: bool,
}

impl<'a, R: BufRead + ?Sized> Parser<'a, R> {
    pub(super) fn new(
        rd: &'a mut R,
        limits: &'a Limits,
        hook: &'a mut dyn Hook,
        hints: Option<Rc<GetRunHints>>,
    ) -> Self {
        let fast = hook.fast().is_some();
        Parser {
            fast,
            stack_full: false,
            win: Window::new(rd, limits),
            code: 0,
            limits,
            hook,
            stack: Vec::with_capacity(64),
            memo_tags: Vec::with_capacity(64),
            last_lowered: None,
            dict_pool: Vec::new(),
            marks: Vec::with_capacity(16),
            memo: Memo::default(),
            work: Vec::new(),
            tracebacks: TracebackLists::new(hints),
            scratch: Scratch::default(),
        }
    }

    /// The values the stack and the memo still hold that are containers,
    /// for [`super::teardown::finish`].
    pub(super) fn into_held(mut self) -> Vec<Value> {
        self.stack
            .drain(..)
            .chain(self.memo.take_values())
            .filter(Value::is_container)
            .collect()
    }

    /// The offset of the opcode being executed (or last executed).
    pub(super) fn op_off(&self) -> u64 {
        self.win.op_off
    }

    pub(super) fn err<T>(&self, message: impl Into<String>) -> PResult<T> {
        self.win.err(message)
    }

    #[cold]
    #[inline(never)]
    fn stack_full_error<T>(&self) -> PResult<T> {
        self.err(format!(
            "more than {MAX_STACK} values on the pickle stack (e.g. millions of nested lists); not a memory snapshot"
        ))
    }

    #[inline(always)]
    pub(super) fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    #[inline(always)]
    fn push(&mut self, v: Value) {
        push!(self, v);
    }

    #[inline(always)]
    fn pop(&mut self) -> PResult<Value> {
        if self.stack.len() > self.floor() {
            Ok(self.stack.pop().expect("non-empty"))
        } else {
            self.underflow()
        }
    }

    #[cold]
    fn underflow<T>(&self) -> PResult<T> {
        self.err(format!(
            "stack underflow: {} needs more values than the stack holds (above the last MARK)",
            op_name(self.code)
        ))
    }

    fn top_index(&self) -> PResult<usize> {
        if self.stack.len() > self.floor() {
            Ok(self.stack.len() - 1)
        } else {
            self.underflow()
        }
    }

    fn pop_mark(&mut self) -> PResult<usize> {
        match self.marks.pop() {
            Some(k) => Ok(k),
            None => self.err(format!("MARK missing: {} needs a MARK", op_name(self.code))),
        }
    }

    fn memo_put(&mut self, idx: u32) -> PResult<()> {
        let top = self.top_index()?;
        let v = self.stack[top].clone();
        if let Value::Dict(_) | Value::List(_) = v {
            self.tag_dict(top, idx);
        }
        match self.memo.put(idx, v, self.limits.max_memo) {
            Ok(Some(old)) => {
                dismantle(old, &mut self.work);
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(m) => self.err(m),
        }
    }

    #[inline(always)]
    fn memo_get(&mut self, idx: u32, name: &str) -> PResult<()> {
        let pos = self.stack.len();
        let v = match self.memo.get(idx) {
            Some(Got::Handle(h)) => {
                push!(self, Value::Handle(h));
                return Ok(());
            }
            Some(Got::Str(s, _)) => {
                let s = Rc::clone(s);
                push!(self, Value::Str(s));
                return Ok(());
            }
            Some(Got::Value(v)) => v,
            Some(Got::EmptyList) => return self.get_empty_list(idx, pos),
            None => return self.err(format!("{name}: memo index {idx} not found")),
        };
        // One arm per common variant, each pushing a value built in place: a
        // generic `clone()` goes through a stack temporary whose partial
        // reloads stall store forwarding (was ~40% of `run` in `perf annotate`).
        match v {
            Value::Handle(h) => {
                let h = *h;
                push!(self, Value::Handle(h));
            }
            Value::Str(s) => {
                let s = Rc::clone(s);
                push!(self, Value::Str(s));
            }
            Value::Int(i) => {
                let i = *i;
                push!(self, Value::Int(i));
            }
            Value::Dict(d) => {
                let d = Rc::clone(d);
                tag_dict(&mut self.memo_tags, pos, idx);
                push!(self, Value::Dict(d));
            }
            Value::List(l) => {
                let l = Rc::clone(l);
                tag_dict(&mut self.memo_tags, pos, idx);
                push!(self, Value::List(l));
            }
            other => {
                let other = other.clone();
                push!(self, other);
            }
        }
        Ok(())
    }

    /// A memo get of a new empty list that only the memo held
    /// ([`Got::EmptyList`]): the list is made now and stays in its slot.
    #[cold]
    fn get_empty_list(&mut self, idx: u32, pos: usize) -> PResult<()> {
        let Some(list) = self.memo.list_for_get(idx) else {
            return self.err("a memo slot changed while it was read");
        };
        tag_dict(&mut self.memo_tags, pos, idx);
        push!(self, Value::List(list));
        Ok(())
    }

    fn tag_dict(&mut self, pos: usize, idx: u32) {
        tag_dict(&mut self.memo_tags, pos, idx);
    }

    /// Runs the hook over `stack[from..]` (items about to be appended to a list).
    fn hook_items(&mut self, from: usize) -> PResult<()> {
        let first_tag = self.memo_tags.partition_point(|&(p, _)| p < from);
        let mut t = first_tag;
        for i in from..self.stack.len() {
            let d = match &self.stack[i] {
                Value::Dict(d) => d.clone(),
                _ => continue,
            };
            let r = self.hook.on_list_dict(&d.borrow());
            match r {
                Ok(None) => {}
                Ok(Some(new)) => {
                    while t < self.memo_tags.len() && self.memo_tags[t].0 < i {
                        t += 1;
                    }
                    if let Some(&(p, idx)) = self.memo_tags.get(t) {
                        if p == i {
                            // The old memo value is the dict `d` still holds:
                            // dropping it only decrements the count.
                            drop(self.memo.replace_dict(idx, &d, new.clone()));
                        }
                    }
                    drop(std::mem::replace(&mut self.stack[i], new));
                    self.recycle_dict(d);
                }
                Err(m) => return self.err(m),
            }
        }
        // These stack slots are about to be consumed.
        self.memo_tags.truncate(first_tag);
        Ok(())
    }

    /// Offers `stack[from..]`, about to be appended to the empty list `l`, to
    /// [`Hook::on_list_items`]; if the hook lowers them, stores its value in
    /// `l`, discards the items and returns `true`.
    #[inline]
    fn lower_list(&mut self, list: &ListRc, from: usize) -> PResult<bool> {
        match self.hook.on_list_items(&self.stack[from..]) {
            Ok(None) => Ok(false),
            Ok(Some(v)) => {
                dismantle_all(self.stack.drain(from..), &mut self.work);
                self.lowered(list, from - 1, v);
                Ok(true)
            }
            Err(m) => self.err(m),
        }
    }

    /// Offers `stack[from..]`, about to be appended to the list `l`, to
    /// [`Hook::on_appended_items`]; if the hook lowers them, appends its
    /// value instead (the list keeps its memo slot), discards the items and
    /// returns `true`.
    fn lower_appended(&mut self, list: &ListRc, from: usize) -> PResult<bool> {
        match self.hook.on_appended_items(&self.stack[from..]) {
            Ok(None) => Ok(false),
            Ok(Some(v)) => {
                dismantle_all(self.stack.drain(from..), &mut self.work);
                list.borrow_mut().push(v);
                Ok(true)
            }
            Err(m) => self.err(m),
        }
    }

    /// Stores the hook's value `v` for the (empty) list `list` at stack
    /// position `pos`, and `v` in place of the list in the memo slot the list
    /// was stored to or fetched from, so that the list is freed as soon as
    /// the stack lets go of it rather than held by the memo to the end.
    ///
    /// Should the list receive more items later (a list of more than 1000
    /// items arrives in several batches), the list must be back in its memo
    /// slot before: [`Parser::unlower`] does that for the last lowered list
    /// (batches of one list are consecutive), and lowering another list
    /// first puts back the previous one if it is still alive.
    pub(super) fn lowered(&mut self, list: &ListRc, pos: usize, v: Value) {
        self.restore_lowered();
        let tag = match self.memo_tags.last() {
            Some(&(p, idx)) if p == pos => Some(idx),
            _ => None,
        };
        if let Some(idx) = tag {
            if let Some(old) = self.memo.replace_list(idx, list, v.clone()) {
                // `old` is `list`, still held by the stack: only a decrement.
                drop(old);
                self.last_lowered = Some((Rc::downgrade(list), idx));
            }
        }
        let mut l = list.borrow_mut();
        l.reserve_exact(1);
        l.push(v);
    }

    /// Puts the last lowered list back in its memo slot if it is still alive
    /// and the slot still holds its lowered value.
    pub(super) fn restore_lowered(&mut self) {
        let Some((weak, idx)) = self.last_lowered.take() else {
            return;
        };
        let Some(list) = weak.upgrade() else {
            return;
        };
        let first = list.borrow().first().cloned();
        if let Some(first) = first {
            self.memo.replace_if(idx, &first, Value::List(list));
        }
    }

    /// Called before items are appended to the non-empty `list`.
    #[inline]
    fn unlower(&mut self, list: &ListRc) {
        if matches!(&self.last_lowered, Some((w, _)) if std::ptr::eq(w.as_ptr(), Rc::as_ptr(list)))
        {
            self.restore_lowered();
        }
    }

    /// Frees a dict the hook replaced, keeping its allocations for reuse by
    /// `EMPTY_DICT` when nothing else refers to it (trace entries arrive in
    /// batches of ~1000 and all have the same shape).
    fn recycle_dict(&mut self, mut d: DictRc) {
        let Some(cell) = Rc::get_mut(&mut d) else {
            // Shared: dropping our reference is enough, unless the only other
            // references are the dict's own (it is its own key or value), a
            // cycle that would leak. Rare, so the scan is off the hot path.
            let own = d
                .borrow()
                .iter()
                .flat_map(|(k, x)| [k, x])
                .filter(|v| matches!(v, Value::Dict(x) if Rc::ptr_eq(x, &d)))
                .count();
            if own > 0 && Rc::strong_count(&d) == own + 1 {
                let pairs = std::mem::take(&mut *d.borrow_mut());
                dismantle_all(pairs.into_iter().flat_map(|(k, x)| [k, x]), &mut self.work);
            }
            return;
        };
        let pairs = cell.get_mut();
        for (k, x) in pairs.drain(..) {
            if k.is_container() {
                self.work.push(k);
            }
            if x.is_container() {
                self.work.push(x);
            }
        }
        drain_work(&mut self.work);
        if self.dict_pool.len() < DICT_POOL_MAX && pairs.capacity() <= 64 {
            self.dict_pool.push(d);
        }
    }

    fn list_at(&self, i: usize, name: &str) -> PResult<Rc<RefCell<Vec<Value>>>> {
        match &self.stack[i] {
            Value::List(l) => Ok(l.clone()),
            other => self.err(format!(
                "{name} on a {}, expected a list",
                other.type_name()
            )),
        }
    }

    /// SETITEM(S) into the handle at stack position `i` (the items from
    /// `from` on): offers them to [`Hook::on_handle_items`] and, if it takes
    /// them, drops them. `false` if `i` holds no handle or the hook refuses.
    fn handle_items(&mut self, i: usize, from: usize) -> PResult<bool> {
        let Value::Handle(h) = self.stack[i] else {
            return Ok(false);
        };
        match self.hook.on_handle_items(h, &self.stack[from..]) {
            Ok(true) => {
                dismantle_all(self.stack.drain(from..), &mut self.work);
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(m) => self.err(m),
        }
    }

    fn dict_at(&self, i: usize, name: &str) -> PResult<DictRc> {
        match &self.stack[i] {
            Value::Dict(d) => Ok(d.clone()),
            other => self.err(format!(
                "{name} on a {}, expected a dict",
                other.type_name()
            )),
        }
    }

    pub(super) fn run(&mut self) -> PResult<Value> {
        loop {
            if self.stack_full {
                // At the opcode that pushed past the limit.
                return self.stack_full_error();
            }
            let code = self.win.next_op()?;
            self.code = code;
            match code {
                op::BININT1 => self.push_scalar(op::BININT1)?,
                op::BININT2 => self.push_scalar(op::BININT2)?,
                op::BININT => self.push_scalar(op::BININT)?,
                op::BINGET => {
                    let i = self.win.memo_index(op::BINGET)?;
                    self.memo_get(i, "BINGET")?;
                }
                op::LONG_BINGET => {
                    let i = self.win.memo_index(op::LONG_BINGET)?;
                    self.memo_get(i, "LONG_BINGET")?;
                }
                op::MEMOIZE => {
                    let idx = match u32::try_from(self.memo.count) {
                        Ok(i) if i != NO_MEMO => i,
                        _ => return self.err("memo is full"),
                    };
                    self.memo_put(idx)?;
                }
                op::BINPUT => {
                    let i = self.win.take_u8()?;
                    self.memo_put(i as u32)?;
                }
                op::LONG_BINPUT => {
                    let b = self.win.take::<4>()?;
                    let i = u32::from_le_bytes(b);
                    if i == NO_MEMO {
                        return self.err(format!(
                            "memo index {i} exceeds the limit of {}",
                            self.limits.max_memo
                        ));
                    }
                    self.memo_put(i)?;
                }
                op::SHORT_BINUNICODE => {
                    let v = self.win.short_string()?;
                    self.push(v);
                }
                op::BINUNICODE => {
                    let b = self.win.take::<4>()?;
                    let n = self.win.check_len(u32::from_le_bytes(b) as u64, "string")?;
                    let v = self.win.string(n)?;
                    self.push(v);
                }
                op::BINUNICODE8 => {
                    let b = self.win.take::<8>()?;
                    let n = self.win.check_len(u64::from_le_bytes(b), "string")?;
                    let v = self.win.string(n)?;
                    self.push(v);
                }
                op::LONG1 => {
                    self.win.ensure(1)?;
                    let n = self.win.rest()[0] as usize;
                    if n <= 8 {
                        // Addresses and timestamps: as the fast paths decode them.
                        let v = self.win.scalar(op::LONG1, 1 + n)?;
                        push!(self, Value::from(v));
                    } else {
                        self.win.pos += 1;
                        let v = self.win.long(n)?;
                        self.push(v);
                    }
                }
                op::LONG4 => {
                    let b = self.win.take::<4>()?;
                    let n = i32::from_le_bytes(b);
                    if n < 0 {
                        return self.err(format!("LONG4 with negative length {n}"));
                    }
                    let v = self.win.long(n as usize)?;
                    self.push(v);
                }
                op::BINFLOAT => self.push_scalar(op::BINFLOAT)?,
                op::NONE => self.push_scalar(op::NONE)?,
                op::NEWTRUE => self.push_scalar(op::NEWTRUE)?,
                op::NEWFALSE => self.push_scalar(op::NEWFALSE)?,
                op::EMPTY_DICT => {
                    if self.fast && self.fast_empty_dict()? {
                        continue;
                    }
                    let d = match self.dict_pool.pop() {
                        Some(d) => d,
                        None => Rc::new(RefCell::new(Vec::new())),
                    };
                    push!(self, Value::Dict(d));
                }
                op::EMPTY_LIST => self.push(Value::List(Rc::new(RefCell::new(Vec::new())))),
                op::EMPTY_TUPLE => self.push(Value::Tuple(Rc::new(Box::default()))),
                op::MARK => {
                    if self.marks.len() >= self.limits.max_depth {
                        return self.err(format!(
                            "nesting deeper than max_depth ({})",
                            self.limits.max_depth
                        ));
                    }
                    if self.fast && self.fast_mark()? {
                        continue;
                    }
                    self.marks.push(self.stack.len());
                }
                op::APPENDS => {
                    let k = self.pop_mark()?;
                    if k <= self.floor() {
                        return self.underflow();
                    }
                    let list = self.list_at(k - 1, "APPENDS")?;
                    self.hook_items(k)?;
                    if list.borrow().is_empty() {
                        if self.stack.len() > k && self.lower_list(&list, k)? {
                            continue;
                        }
                    } else {
                        self.unlower(&list);
                    }
                    if self.stack.len() > k && self.lower_appended(&list, k)? {
                        continue;
                    }
                    let mut l = list.borrow_mut();
                    l.reserve(self.stack.len() - k);
                    l.extend(self.stack.drain(k..));
                }
                op::APPEND => {
                    let top = self.top_index()?;
                    if top <= self.floor() {
                        return self.underflow();
                    }
                    let list = self.list_at(top - 1, "APPEND")?;
                    self.hook_items(top)?;
                    if list.borrow().is_empty() {
                        if self.lower_list(&list, top)? {
                            continue;
                        }
                    } else {
                        self.unlower(&list);
                    }
                    let v = self.stack.pop().expect("non-empty");
                    list.borrow_mut().push(v);
                }
                op::SETITEMS => {
                    let k = self.pop_mark()?;
                    if k <= self.floor() {
                        return self.underflow();
                    }
                    // A non-dict is reported before the item count; a handle
                    // (a dict the hook lowered) may still take the items.
                    let dict = match self.stack[k - 1] {
                        Value::Handle(_) => None,
                        _ => Some(self.dict_at(k - 1, "SETITEMS")?),
                    };
                    let n = self.stack.len() - k;
                    if n % 2 != 0 {
                        return self
                            .err(format!("SETITEMS with an odd number of stack items ({n})"));
                    }
                    let dict = match dict {
                        Some(dict) => dict,
                        None if self.handle_items(k - 1, k)? => continue,
                        None => self.dict_at(k - 1, "SETITEMS")?,
                    };
                    // Not borrowed while the hook runs: the items may hold
                    // the dict itself (through the memo), and the hook reads
                    // them.
                    if dict.borrow().is_empty() {
                        match self.hook.on_dict_items(&self.stack[k..]) {
                            Ok(None) => {}
                            Ok(Some(pair)) => {
                                dict.borrow_mut().push(pair);
                                dismantle_all(self.stack.drain(k..), &mut self.work);
                                continue;
                            }
                            Err(m) => return self.err(m),
                        }
                    }
                    dict.borrow_mut().extend(pairs(&mut self.stack[k..]));
                    self.stack.truncate(k);
                }
                op::SETITEM => {
                    let top = self.top_index()?;
                    if top < self.floor() + 2 {
                        return self.underflow();
                    }
                    if self.handle_items(top - 2, top - 1)? {
                        continue;
                    }
                    let dict = self.dict_at(top - 2, "SETITEM")?;
                    let val = self.stack.pop().expect("non-empty");
                    let key = self.stack.pop().expect("non-empty");
                    dict.borrow_mut().push((key, val));
                }
                op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                    let n = (code - op::TUPLE1 + 1) as usize;
                    if self.stack.len() < self.floor() + n {
                        return self.underflow();
                    }
                    let k = self.stack.len() - n;
                    let t: Rc<Box<[Value]>> = Rc::new(self.stack.drain(k..).collect());
                    self.push(Value::Tuple(t));
                }
                op::TUPLE => {
                    let k = self.pop_mark()?;
                    let t: Rc<Box<[Value]>> = Rc::new(self.stack.drain(k..).collect());
                    self.push(Value::Tuple(t));
                }
                op::LIST => {
                    let k = self.pop_mark()?;
                    let l: Vec<Value> = self.stack.drain(k..).collect();
                    self.push(Value::List(Rc::new(RefCell::new(l))));
                }
                op::DICT => {
                    let k = self.pop_mark()?;
                    let n = self.stack.len() - k;
                    if n % 2 != 0 {
                        return self.err(format!("DICT with an odd number of stack items ({n})"));
                    }
                    let d: Vec<(Value, Value)> = pairs(&mut self.stack[k..]).collect();
                    self.stack.truncate(k);
                    self.push(Value::Dict(Rc::new(RefCell::new(d))));
                }
                op::FRAME => {
                    // Frames are an I/O hint; the data is parsed as a stream.
                    self.win.take::<8>()?;
                }
                op::PROTO => {
                    let v = self.win.take_u8()?;
                    if !(2..=5).contains(&v) {
                        return self.err(format!(
                            "unsupported pickle protocol {v} (memcut reads protocols 2 to 5)"
                        ));
                    }
                }
                op::STOP => {
                    return self.pop();
                }
                op::POP => {
                    if self.stack.len() > self.floor() {
                        let s = self.stack.pop().expect("non-empty");
                        dismantle(s, &mut self.work);
                    } else {
                        let k = self.pop_mark()?;
                        self.discard_from(k);
                    }
                }
                op::POP_MARK => {
                    let k = self.pop_mark()?;
                    self.discard_from(k);
                }
                op::DUP => {
                    let top = self.top_index()?;
                    let v = self.stack[top].clone();
                    if let Some(&(pos, idx)) = self.memo_tags.last() {
                        if pos == top {
                            self.tag_dict(top + 1, idx);
                        }
                    }
                    push!(self, v);
                }
                other => {
                    let hex = other;
                    return match (refused_name(other), unsupported_name(other)) {
                        (Some(name), _) => self.err(format!(
                            "opcode {name} (0x{hex:02x}) refused: memcut never imports or calls code from a pickle"
                        )),
                        (None, Some(name)) => self.err(format!(
                            "opcode {name} (0x{hex:02x}) not supported: PyTorch memory snapshots do not use it"
                        )),
                        (None, None) => self.err(format!("unknown opcode 0x{hex:02x}")),
                    };
                }
            }
        }
    }

    fn discard_from(&mut self, k: usize) {
        dismantle_all(self.stack.drain(k..), &mut self.work);
    }

    /// Pushes the scalar `code` decodes ([`opcodes::scalar`]).
    #[inline(always)]
    fn push_scalar(&mut self, code: u8) -> PResult<()> {
        let v = self.win.scalar(code, opcodes::scalar_width(code))?;
        push!(self, Value::from(v));
        Ok(())
    }
}
