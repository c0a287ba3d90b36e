//! After `STOP` and on every discard: the iterative depth and cycle check of
//! the result, and the iterative teardown of values, so that no hostile
//! nesting can overflow the stack and no reference cycle the pickle built
//! outlives the parse.

use std::collections::HashMap;
use std::rc::Rc;

use super::{PickleError, Value};

/// Checks the parse's `result` (`offset`: where the parser stopped) against
/// `max_depth`, then frees `held` — the values the parser's stack and memo
/// still held, moved out of them but still alive, so that every container
/// reachable from the result and held elsewhere counts as shared in the
/// check. Whatever is not part of the result is emptied before it is
/// dropped, which frees reference cycles among discarded values.
pub(super) fn finish(
    result: Result<Value, PickleError>,
    offset: u64,
    max_depth: usize,
    held: Vec<Value>,
) -> Result<Value, PickleError> {
    let checked = result.and_then(|value| match check_depth(&value, max_depth) {
        Ok(reachable) => Ok((value, reachable)),
        Err(message) => {
            break_all(vec![value], &HashMap::new());
            Err(PickleError { offset, message })
        }
    });
    match checked {
        Ok((value, reachable)) => {
            break_all(held, &reachable);
            Ok(value)
        }
        Err(e) => {
            break_all(held, &HashMap::new());
            Err(e)
        }
    }
}

/// containers in `keep` (part of the returned value) are only released.
/// Iterative; each shared container is visited once.
fn break_all(mut work: Vec<Value>, keep: &HashMap<usize, Seen>) {
    let mut seen = std::collections::HashSet::new();
    while let Some(v) = work.pop() {
        let Some(id) = v.identity() else { continue };
        if keep.contains_key(&id) || (v.share_count() > 1 && !seen.insert(id)) {
            continue;
        }
        match &v {
            Value::List(l) => work.extend(std::mem::take(&mut *l.borrow_mut())),
            Value::Dict(d) => {
                for (k, x) in std::mem::take(&mut *d.borrow_mut()) {
                    work.push(k);
                    work.push(x);
                }
            }
            Value::Tuple(t) => work.extend(t.iter().filter(|x| x.is_container()).cloned()),
            _ => {}
        }
    }
}

/// Drops `v` without recursion: uniquely owned containers are emptied into
/// `work` first, so each drop is shallow.
pub(super) fn dismantle(v: Value, work: &mut Vec<Value>) {
    if !v.is_container() {
        return;
    }
    work.push(v);
    drain_work(work);
}

pub(super) fn dismantle_all(vals: impl Iterator<Item = Value>, work: &mut Vec<Value>) {
    for v in vals {
        if v.is_container() {
            work.push(v);
        }
    }
    drain_work(work);
}

pub(super) fn drain_work(work: &mut Vec<Value>) {
    while let Some(mut v) = work.pop() {
        match &mut v {
            Value::List(l) => {
                if let Some(cell) = Rc::get_mut(l) {
                    work.extend(cell.get_mut().drain(..).filter(Value::is_container));
                }
            }
            Value::Dict(d) => {
                if let Some(cell) = Rc::get_mut(d) {
                    for (k, x) in cell.get_mut().drain(..) {
                        if k.is_container() {
                            work.push(k);
                        }
                        if x.is_container() {
                            work.push(x);
                        }
                    }
                }
            }
            Value::Tuple(t) => {
                if let Some(items) = Rc::get_mut(t) {
                    for x in items.iter_mut() {
                        if x.is_container() {
                            work.push(std::mem::replace(x, Value::None));
                        }
                    }
                }
            }
            _ => {}
        }
        // `v` is now shallow (or shared, in which case dropping only decrements).
    }
}

enum Seen {
    InProgress,
    Height(usize),
}

struct Frame {
    v: Value,
    next: usize,
    max_child: usize,
    shared: bool,
}

/// Verifies that `root` nests at most `max_depth` containers deep and has no
/// cycles, iteratively. Shared containers are visited once (their heights are
/// memoized), so a DAG of shared frames costs O(size).
fn check_depth(root: &Value, max_depth: usize) -> Result<HashMap<usize, Seen>, String> {
    if !root.is_container() {
        return Ok(HashMap::new());
    }
    let too_deep = || format!("containers nested deeper than max_depth ({max_depth})");
    if max_depth == 0 {
        return Err(too_deep());
    }
    let mut seen: HashMap<usize, Seen> = HashMap::new();
    let root_shared = root.share_count() > 1;
    if root_shared {
        seen.insert(root.identity().expect("container"), Seen::InProgress);
    }
    let mut frames: Vec<Frame> = vec![Frame {
        v: root.clone(),
        next: 0,
        max_child: 0,
        shared: root_shared,
    }];
    while let Some(top) = frames.last_mut() {
        match next_container(&top.v, top.next) {
            Some((next, c)) => {
                top.next = next;
                // The clone in `c` adds one reference.
                let shared = c.share_count() > 2;
                if shared {
                    let id = c.identity().expect("container");
                    match seen.get(&id) {
                        Some(Seen::InProgress) => {
                            return Err("self-referential container (cycle) in pickle".into())
                        }
                        Some(Seen::Height(h)) => {
                            let h = *h;
                            if frames.len() + h > max_depth {
                                return Err(too_deep());
                            }
                            let top = frames.last_mut().expect("non-empty");
                            top.max_child = top.max_child.max(h);
                            continue;
                        }
                        None => {
                            seen.insert(id, Seen::InProgress);
                        }
                    }
                }
                if frames.len() >= max_depth {
                    return Err(too_deep());
                }
                frames.push(Frame {
                    v: c,
                    next: 0,
                    max_child: 0,
                    shared,
                });
            }
            None => {
                let f = frames.pop().expect("non-empty");
                let h = f.max_child + 1;
                if f.shared {
                    seen.insert(f.v.identity().expect("container"), Seen::Height(h));
                }
                if let Some(parent) = frames.last_mut() {
                    parent.max_child = parent.max_child.max(h);
                }
            }
        }
    }
    Ok(seen)
}

/// The first container child of `v` at or after position `from` (dict
/// positions: key0, value0, key1, …) and the position after it; `None` when
/// there is none. Scalars are skipped in one pass under a single borrow.
fn next_container(v: &Value, from: usize) -> Option<(usize, Value)> {
    fn scan<'a>(items: impl Iterator<Item = &'a Value>, from: usize) -> Option<(usize, Value)> {
        items
            .enumerate()
            .find(|(_, c)| c.is_container())
            .map(|(i, c)| (from + i + 1, c.clone()))
    }
    match v {
        Value::List(l) => scan(l.borrow().get(from..)?.iter(), from),
        Value::Tuple(t) => scan(t.get(from..)?.iter(), from),
        Value::Dict(d) => {
            let d = d.borrow();
            let pairs = d.get(from / 2..)?;
            let flat = pairs.iter().flat_map(|(k, x)| [k, x]).skip(from % 2);
            scan(flat, from)
        }
        _ => None,
    }
}
