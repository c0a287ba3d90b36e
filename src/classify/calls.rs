//! Buffers a user's function allocates and frees before it returns.
//!
//! A snapshot from the caching allocator's own history gives every free
//! its own stack. When the Python frames outside some function on the
//! allocation's stack are exactly the frames outside that function on the
//! free's stack (same files, lines and names), the free happened while that
//! call of the function was still running: the buffer is the function's
//! working memory, a `temporary`, however large. Only the allocating
//! function and its caller are tried, so that a program's outer loop (one
//! call that frees everything eventually) proves nothing. Snapshots made
//! from a profile give a free the stack of the allocation instead, so an
//! identical stack is not evidence and is not taken.

use crate::model::{Frame, SiteId, Sites};

/// Python frames of a site, innermost first.
fn python(sites: &Sites, site: SiteId) -> impl DoubleEndedIterator<Item = &Frame> + Clone {
    sites
        .frames(site)
        .iter()
        .filter(|f| sites.str(f.filename).ends_with(".py"))
}

/// Whether the block allocated at `alloc` and freed at `free` was freed
/// inside the call (of the allocating function or its caller) that
/// allocated it; see the module doc.
pub(super) fn freed_in_allocating_call(sites: &Sites, alloc: SiteId, free: SiteId) -> bool {
    if alloc == free || alloc == 0 || free == 0 {
        return false;
    }
    let a_len = python(sites, alloc).count();
    let f_len = python(sites, free).count();
    // Outermost first: `same` frames are shared exactly; the call tried is
    // at depth `m` from the outside (the allocating function, `a_len - 1`,
    // or its caller), with `m` frames outside it (at least one: the
    // program's outermost frame is never a call that returns).
    let mut same = 0;
    let mut at = [None; 2];
    for (depth, (x, y)) in python(sites, alloc)
        .rev()
        .zip(python(sites, free).rev())
        .enumerate()
    {
        if depth + 2 >= a_len {
            at[a_len - 1 - depth] = Some((x, y));
        }
        if same == depth && x == y {
            same += 1;
        }
    }
    (0..a_len.min(2)).any(|j| {
        let m = a_len - 1 - j;
        m >= 1
            && same >= m
            && f_len > m
            && at[j].is_some_and(|(x, y)| x.filename == y.filename && x.name == y.name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(sites: &mut Sites, frames: &[(&str, u32, &str)]) -> SiteId {
        sites.intern_frames(frames)
    }

    #[test]
    fn a_free_inside_the_same_call_is_seen() {
        let mut sites = Sites::default();
        let alloc = site(
            &mut sites,
            &[
                ("est.py", 185, "perturb"),
                ("est.py", 262, "update"),
                ("main.py", 9, "run"),
            ],
        );
        // Freed in the caller, later in the same call of `update`.
        let free = site(
            &mut sites,
            &[("est.py", 270, "update"), ("main.py", 9, "run")],
        );
        assert!(freed_in_allocating_call(&sites, alloc, free));
        // Freed after `update` returned, from another line of `run`.
        let later = site(
            &mut sites,
            &[("est.py", 270, "update"), ("main.py", 10, "run")],
        );
        assert!(!freed_in_allocating_call(&sites, alloc, later));
        // The outermost frame proves nothing.
        let top = site(&mut sites, &[("main.py", 12, "run")]);
        assert!(!freed_in_allocating_call(&sites, alloc, top));
        // The same stack (a profile-derived snapshot) is no evidence.
        assert!(!freed_in_allocating_call(&sites, alloc, alloc));
    }
}
