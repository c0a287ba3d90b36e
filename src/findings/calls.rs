//! When a tensor would die without autograd, from the module calls the
//! stacks name (`nn.Module: Block_1`, as the profiler's stacks do).
//!
//! Without autograd a tensor lives as long as Python holds it: a module's
//! local dies by the time the module returns, and a module's output lives
//! in its caller until the next call there has used it (`x = blk(x)`: the
//! old `x` goes when the next block returns). Graph-held tensors of a
//! forward-only run are given that end; where the stacks name no module
//! the caller falls back to a count of allocations.

use std::collections::HashMap;

use crate::model::{Action, DeviceTrace, SiteId, Sites, StrId};

/// Allocations scanned for the next link of a chain before taking the
/// caller's return as the end (bounds the work on a very long call).
const MAX_SCAN: u32 = 4096;

/// How a tensor is held without autograd (see [`Calls::last_use`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A local of a module call: gone by the time the call returns.
    Local,
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
    chains: HashMap<SiteId, Vec<StrId>>,
    /// Per module: its calls as (first, last) allocation indices, in order.
    spans: HashMap<StrId, Vec<(u32, u32)>>,
    /// The modules that are `nn.Sequential`s (`nn.Module: Sequential_0`).
    sequential: std::collections::HashSet<StrId>,
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
        let mut chains: HashMap<SiteId, Vec<StrId>> = HashMap::new();
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
            chains.entry(e.site).or_insert_with(|| {
                sites
                    .frames(e.site)
                    .iter()
                    .filter(|f| crate::vocabulary::is_module_frame(sites.str(f.name)))
                    .filter(|f| only.is_none_or(|o| o.contains(&f.name)))
                    .map(|f| f.name)
                    .collect()
            });
        }
        if chains.values().all(Vec::is_empty) {
            return None;
        }
        let mut spans: HashMap<StrId, Vec<(u32, u32)>> = HashMap::new();
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
            // A leaf module's output is its first allocation (LayerNorm
            // makes its mean and rstd after it); a module of modules
            // returns what it made last.
            let output = a == last || (level == 0 && a == first);
            if output {
                continue;
            }
            if level == 0 {
                return Some((self.after(last), Held::Local));
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
            let scan_to = last.min(child_last + MAX_SCAN);
            let mut b = child_last + 1;
            while b <= scan_to {
                let b_chain = &self.chains[&self.sites[b as usize]];
                let at = b_chain.iter().position(|&x| x == m)?;
                // What `m`'s code got back: a child call's output, or an
                // operator's own allocation there.
                let (made, done) = match at.checked_sub(1) {
                    Some(inner) => {
                        let (first, end) = self.span(b_chain[inner], b)?;
                        let leaf = self.chains[&self.sites[first as usize]].len() == at;
                        let out = if leaf { first } else { end };
                        (out, end)
                    }
                    None => (b, b),
                };
                if sequential || self.sizes[made as usize] == size {
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

    /// The position just after allocation `a` (the tensor is still live
    /// while it is made).
    fn after(&self, a: u32) -> u32 {
        self.positions[a as usize] + 1
    }
}
