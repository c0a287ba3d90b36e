//! When a tensor would die without autograd, from the module calls the
//! stacks name (`nn.Module: Block_1`, as the profiler's stacks do).
//!
//! Without autograd a tensor lives as long as Python holds it: a module's
//! local dies by the time the module returns, and a module's output lives
//! in its caller until the next call there has used it (`x = blk(x)`: the
//! old `x` goes when the next block returns). Graph-held tensors of a
//! forward-only run are given that end; where the stacks name no module
//! the caller falls back to a count of allocations.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::{Action, DeviceTrace, Frame, SiteId, Sites, StrId};

/// Allocations scanned for the next link of a chain before taking the
/// caller's return as the end (bounds the work on a very long call).
const MAX_SCAN: u32 = 4096;

/// How a tensor is held without autograd (see [`Calls::last_use`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A local of a module call: gone by the time the call returns, and
    /// not before the position given: the end of the expression it was
    /// made in (`0.5 * x * (1 + tanh(…))` holds `0.5 * x` until the last
    /// multiply), read as the run of the call's allocations made on its
    /// source line.
    Local(u32),
    /// A call's output, held by its caller until the next call used it.
    Output,
}

/// The module calls of one device: for each module (by its frame's name),
/// the spans of consecutive allocations made inside it, each a call.
pub struct Calls {
    /// Per allocation (in order): its site.
    sites: Vec<SiteId>,
    /// Position after each allocation event.
    positions: Vec<u32>,
    /// Bytes of each allocation.
    sizes: Vec<u64>,
    /// Per site: its module frames, innermost first.
    chains: FxHashMap<SiteId, Vec<StrId>>,
    /// Per site, per module of its chain: the source line in that
    /// module's code the allocation was made from (its own line, or the
    /// line that called the child module it was made in).
    lines: FxHashMap<SiteId, Vec<Option<Frame>>>,
    /// The sites whose operator saves its own result (see [`Held::Local`]).
    saves_result: FxHashSet<SiteId>,
    /// Per module: its class (`nn.Module: Linear_3` → `Linear`).
    classes: FxHashMap<StrId, Box<str>>,
    /// Per call (module, first allocation): its output ([`Calls::output_of`]).
    outputs: std::cell::RefCell<FxHashMap<(StrId, u32), u32>>,
    /// Per module: its calls as (first, last) allocation indices, in order.
    spans: FxHashMap<StrId, Vec<(u32, u32)>>,
    /// The modules that are `nn.Sequential`s (`nn.Module: Sequential_0`).
    sequential: FxHashSet<StrId>,
}

impl Calls {
    /// Reads the module calls off a device's allocations; `None` when no
    /// stack names a module.
    pub fn new(sites: &Sites, device: &DeviceTrace) -> Option<Calls> {
        Calls::of(sites, device, None)
    }

    /// [`Calls::new`] for the calls of the modules in `only` (cheaper: a
    /// deep stack names a dozen modules per allocation).
    pub fn only(
        sites: &Sites,
        device: &DeviceTrace,
        only: &std::collections::HashSet<StrId>,
    ) -> Option<Calls> {
        Calls::of(sites, device, Some(only))
    }

    fn of(
        sites: &Sites,
        device: &DeviceTrace,
        only: Option<&std::collections::HashSet<StrId>>,
    ) -> Option<Calls> {
        let mut chains: FxHashMap<SiteId, Vec<StrId>> = FxHashMap::default();
        let mut lines: FxHashMap<SiteId, Vec<Option<Frame>>> = FxHashMap::default();
        let mut saves_result = FxHashSet::default();
        let mut classes: FxHashMap<StrId, Box<str>> = FxHashMap::default();
        // Per distinct frame, read once: sites share most of their frames.
        let mut code_lines: FxHashMap<(StrId, StrId), bool> = FxHashMap::default();
        let mut result_savers: FxHashMap<StrId, bool> = FxHashMap::default();
        let mut alloc_sites = Vec::new();
        let mut positions = Vec::new();
        let mut sizes = Vec::new();
        for (k, e) in device.events.iter().enumerate() {
            if e.action != Action::Alloc {
                continue;
            }
            alloc_sites.push(e.site);
            positions.push(k as u32 + 1);
            sizes.push(e.size);
            if let std::collections::hash_map::Entry::Vacant(v) = chains.entry(e.site) {
                let frames = sites.frames(e.site);
                let chain: Vec<StrId> = frames
                    .iter()
                    .filter(|f| crate::vocabulary::is_module_frame(sites.str(f.name)))
                    .filter(|f| only.is_none_or(|o| o.contains(&f.name)))
                    .map(|f| f.name)
                    .collect();
                // Lines, result-saving operators and classes serve
                // `last_use`; `Calls::only`'s users read the calls alone.
                if only.is_none() {
                    let mut code_line = |f: &Frame| {
                        *code_lines
                            .entry((f.filename, f.name))
                            .or_insert_with(|| is_code_line(sites, f))
                    };
                    let mut at = Vec::with_capacity(chain.len());
                    let mut from = 0;
                    for &m in &chain {
                        at.push(frames[from..].iter().copied().find(|f| code_line(f)));
                        from += frames[from..]
                            .iter()
                            .position(|f| f.name == m)
                            .map_or(frames.len() - from, |k| k + 1);
                    }
                    for &m in &chain {
                        classes.entry(m).or_insert_with(|| {
                            crate::vocabulary::module_class(sites.str(m)).into()
                        });
                    }
                    lines.insert(e.site, at);
                    if frames.iter().any(|f| {
                        *result_savers.entry(f.name).or_insert_with(|| {
                            crate::vocabulary::saves_its_result(sites.str(f.name))
                        })
                    }) {
                        saves_result.insert(e.site);
                    }
                }
                v.insert(chain);
            }
        }
        if chains.values().all(Vec::is_empty) {
            return None;
        }
        let mut spans: FxHashMap<StrId, Vec<(u32, u32)>> = FxHashMap::default();
        for (a, site) in alloc_sites.iter().enumerate() {
            let a = a as u32;
            for &m in &chains[site] {
                let list = spans.entry(m).or_default();
                match list.last_mut() {
                    Some(last) if last.1 + 1 == a => last.1 = a,
                    _ => list.push((a, a)),
                }
            }
        }
        let sequential = spans
            .keys()
            .copied()
            .filter(|&m| crate::vocabulary::is_sequential_frame(sites.str(m)))
            .collect();
        Some(Calls {
            sites: alloc_sites,
            positions,
            sizes,
            chains,
            lines,
            saves_result,
            classes,
            outputs: Default::default(),
            spans,
            sequential,
        })
    }

    /// The call of module `m` that allocation `a` was made in.
    fn span(&self, m: StrId, a: u32) -> Option<(u32, u32)> {
        let list = self.spans.get(&m)?;
        let i = list.partition_point(|s| s.0 <= a).checked_sub(1)?;
        let s = list[i];
        (s.1 >= a).then_some(s)
    }

    /// Where a tensor allocated at `start` would be freed without autograd
    /// at the latest, and whether it is a call's local (then Python may
    /// drop it sooner, when its name is bound again) or a call's output
    /// (then its caller holds it until the next call there has used it).
    /// `None` when its stack names no module, or it is the output of the
    /// outermost module (the program keeps that).
    pub fn last_use(&self, start: u32) -> Option<(u32, Held)> {
        let a = self.positions.partition_point(|&p| p < start) as u32;
        if self.positions.get(a as usize) != Some(&start) {
            return None;
        }
        let chain = &self.chains[&self.sites[a as usize]];
        for (level, &m) in chain.iter().enumerate() {
            let (first, last) = self.span(m, a)?;
            if a == self.output_of(m, (first, last)) {
                continue;
            }
            if level == 0 {
                let site = self.sites[a as usize];
                let line = self.line(a, 0);
                let mut end = a;
                while line.is_some()
                    && !self.saves_result.contains(&site)
                    && end < last
                    && self.line(end + 1, 0) == line
                {
                    end += 1;
                }
                return Some((self.after(last), Held::Local(self.after(end))));
            }
            // The output of the call inside `m` that made it: held by a
            // name in `m`'s code until that name is bound again, which is
            // read as the next tensor of its size that `m` makes (`x =
            // blk(x)`, `x = x + attn(x)`: the chain's next link), or until
            // `m` returns (`q, k, v = qkv(x).split(…)` stay bound to the end).
            let (_, child_last) = self.span(chain[level - 1], a)?;
            let size = self.sizes[a as usize];
            // `nn.Sequential` passes each child's output to the next child
            // and binds its name to what that returns (`input =
            // module(input)`): held until the next child call returns,
            // whatever its size (a convolution changes the channels).
            let sequential = self.sequential.contains(&m);
            let line = self.line(a, level);
            let class = &self.classes[&chain[level - 1]];
            let scan_to = last.min(child_last + MAX_SCAN);
            let mut b = child_last + 1;
            while b <= scan_to {
                let b_chain = &self.chains[&self.sites[b as usize]];
                let at = b_chain.iter().position(|&x| x == m)?;
                // What `m`'s code got back: a child call's output, or an
                // operator's own allocation there.
                let (made, done) = match at.checked_sub(1) {
                    Some(inner) => {
                        let span = self.span(b_chain[inner], b)?;
                        (self.output_of(b_chain[inner], span), span.1)
                    }
                    None => (b, b),
                };
                // Another child called on the same line (`act(gate(x)) *
                // up(x)`: `up`'s output is no new binding of `act`'s) is an
                // operand beside it; a child of the same class there is the
                // next turn of a loop (`for blk in blocks: x = blk(x)`).
                let beside = at > 0
                    && line.is_some()
                    && self.line(b, at) == line
                    && self.classes[&b_chain[at - 1]] != *class;
                if sequential || (self.sizes[made as usize] == size && !beside) {
                    return Some((self.after(done), Held::Output));
                }
                b = done + 1;
            }
            return Some((self.after(last), Held::Output));
        }
        None
    }

    /// The call of the innermost module that the allocation at `start`
    /// was made in (its module and its first allocation).
    pub fn call_of(&self, start: u32) -> Option<(StrId, u32)> {
        let a = self.positions.partition_point(|&p| p < start) as u32;
        let m = *self.chains.get(self.sites.get(a as usize)?)?.first()?;
        Some((m, self.span(m, a)?.0))
    }

    /// The position after the last allocation of the outermost module call
    /// that the allocation at `start` was made in.
    pub fn outermost_end(&self, start: u32) -> Option<u32> {
        let a = self.positions.partition_point(|&p| p < start) as u32;
        let m = *self.chains.get(self.sites.get(a as usize)?)?.last()?;
        Some(self.positions[self.span(m, a)?.1 as usize])
    }

    /// The allocation a call of module `m` (its first and last allocation)
    /// returns: what its last child call returned when that call ended it
    /// (a block ending in `self.norm(x)`), else what it made last; of the
    /// last operator's allocations (a run at one site) the last of the
    /// largest (LayerNorm makes its output, then its mean and rstd).
    fn output_of(&self, m: StrId, span: (u32, u32)) -> u32 {
        if let Some(&out) = self.outputs.borrow().get(&(m, span.0)) {
            return out;
        }
        let (first, last) = span;
        let chain = &self.chains[&self.sites[last as usize]];
        let child = chain
            .iter()
            .position(|&x| x == m)
            .and_then(|p| p.checked_sub(1))
            .map(|p| chain[p]);
        let out = match child.and_then(|c| Some((c, self.span(c, last)?))) {
            Some((c, child_span)) => self.output_of(c, child_span),
            None => {
                let site = self.sites[last as usize];
                let mut from = last;
                while from > first && self.sites[from as usize - 1] == site {
                    from -= 1;
                }
                let run = from..=last;
                let largest = run.clone().map(|k| self.sizes[k as usize]).max();
                run.rev()
                    .find(|&k| Some(self.sizes[k as usize]) == largest)
                    .unwrap_or(last)
            }
        };
        self.outputs.borrow_mut().insert((m, span.0), out);
        out
    }

    /// The source line in the code of the `level`th module of allocation
    /// `a`'s chain that it was made from.
    fn line(&self, a: u32, level: usize) -> Option<Frame> {
        let site = self.sites[a as usize];
        self.lines[&site].get(level).copied().flatten()
    }

    /// The position just after allocation `a` (the tensor is still live
    /// while it is made).
    fn after(&self, a: u32) -> u32 {
        self.positions[a as usize] + 1
    }
}

/// A Python source line of the program's or a library's code, not
/// `nn.Module`'s call machinery.
fn is_code_line(sites: &Sites, f: &Frame) -> bool {
    let (file, name) = (sites.str(f.filename), sites.str(f.name));
    crate::vocabulary::is_source_line(file, name)
        && !file.ends_with("torch/nn/modules/module.py")
        && !name.starts_with("torch/nn/modules/module.py(")
}
