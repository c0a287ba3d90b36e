//! The `memcut` binary's allocator: the system's, with every block of
//! 2 MiB or more marked for transparent huge pages (`MADV_HUGEPAGE`), so
//! that the first touch of its memory maps 2 MiB at a time instead of
//! 4 KiB.
//!
//! Why: a big input's parse and analysis fill a few hundred MB of fresh
//! memory (the memo, the events, the replay's per-position tables), and
//! on this project's machine each 4 KiB page costs a fault on first touch
//! (~1.2–1.5 µs with its zeroing): on snap-cs336.pickle the parsing
//! thread spent ~11% of its samples in page faults. Kernels set to
//! `madvise` (the common default, and this machine's) give huge pages
//! only to memory marked so. Only the big blocks are marked: their pages
//! are touched whole anyway, so the peak RSS moves by a few MiB at most
//! (a huge page is resident as a whole). Small blocks, on malloc's heap,
//! are left as they are.
//!
//! Measured against the same binary without it (farm-bench, 11 pairs,
//! `memcut analyze FILE -f json -o /dev/null`, 2026-12-07): wall 0.93x
//! snap-cs336, 0.97x snap-synthetic, 0.91x snap-unshared, 0.98x
//! big_nothanmin, 0.91x trace-adamw; peak RSS +1.6 to +3 MiB. Marking the
//! heap as well (glibc's `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`) measured
//! the same as this (9 pairs: 0.99x, 1.01x). The library and the Python
//! binding keep their callers' allocator.

use std::alloc::{GlobalAlloc, Layout, System};

/// The size of a transparent huge page on x86-64 and most arm64 kernels;
/// smaller blocks are never marked.
const HUGE: usize = 2 << 20;

/// [`System`], marking blocks of [`HUGE`] bytes or more for huge pages.
pub struct HugePages;

// SAFETY: every call is `System`'s, with the same arguments; the only
// addition is `madvise` on memory `System` just handed out, which changes
// how the kernel backs it, never its contents or its ownership.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        advise(p, new_size);
        p
    }
}

/// Marks the pages of `len` bytes at `p` for huge pages, when the block is
/// big enough to hold one. A refusal (a kernel without them) changes
/// nothing.
fn advise(p: *mut u8, len: usize) {
    #[cfg(target_os = "linux")]
    if len >= HUGE && !p.is_null() {
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        const MADV_HUGEPAGE: i32 = 14;
        const PAGE: usize = 4096;
        let start = p as usize & !(PAGE - 1);
        let end = p as usize + len;
        // SAFETY: `[start, end)` covers the block `System` just gave and
        // at most the start of the page it begins in (the block's header,
        // or the end of a neighbouring block): memory this process maps.
        // `MADV_HUGEPAGE` changes how the kernel backs those pages, never
        // their contents, so no block, this one or another, is affected.
        unsafe {
            madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, len);
}
