#!/usr/bin/env python3
"""Baseline "plain Python job" for memcut's benchmarks: load a PyTorch memory snapshot and replay
each device trace to its peak, the way pytorch.org/memory_viz's "Active Memory Timeline" does.

    python3 scripts/replay_peak.py SNAPSHOT [SNAPSHOT ...]      # .pickle, .pickle.gz, or JSON

Per device it prints: trace events, peak bytes, index of the event at which the peak is first
reached (-1 = before the first event, i.e. the baseline itself), and the baseline bytes.

Rules (formats.md A11, "What MemoryViz does"; MemoryViz.js `process_alloc_data`):
* `alloc` adds its (requested) `size`; the address now has an open allocation. An `alloc` at an
  address that is still open leaves the old one counted to the end (MemoryViz overwrites its
  address map the same way).
* `free_completed` (MemoryViz merges it with a directly preceding `free_requested`) subtracts: the open allocation's size, or -- for an address never allocated in the
  trace -- the free's own size, that allocation being pre-existing. Pre-existing bytes are in the
  baseline, i.e. counted from the start until their free.
* `active_allocated` blocks in `segments` with no open allocation at the end existed before
  recording and are still alive: their `requested_size` counts from start to end (baseline).
* Everything else (segment_*, oom, snapshot, unmerged free_requested, unknown actions) leaves the
  curve unchanged. The x-axis is event count; ties keep the earliest peak.

No torch needed: the unpickler refuses every global, which is safe for PyTorch snapshots because
they contain only dicts, lists, tuples, str, int, float, bool and None.
"""

import gzip
import io
import json
import pickle
import sys


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"snapshot refers to global {module}.{name}; refusing to load it")


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data.lstrip()[:1] in (b"{", b"["):
        snap = json.loads(data)
    else:
        snap = SafeUnpickler(io.BytesIO(data)).load()
    if isinstance(snap, list):  # legacy torch.cuda.memory_snapshot(): segments only
        snap = {"segments": snap, "device_traces": []}
    return snap


def block_requested(b):
    if "requested_size" in b:
        return b["requested_size"]
    if b.get("history"):  # torch 1.13-era blocks
        return b["history"][0].get("real_size", b["size"])
    return b["size"]


def replay(trace, segments, device):
    open_ = {}           # addr -> size of the open allocation
    freed_pre = 0        # bytes of pre-existing allocations freed during the trace
    cur = 0              # in-trace live bytes minus pre-existing bytes freed so far
    best, peak_i = 0, -1
    for i, e in enumerate(trace):
        a = e.get("action")
        if a == "alloc":
            open_[e["addr"]] = e["size"]
            cur += e["size"]
            if cur > best:
                best, peak_i = cur, i
        elif a == "free_completed":
            # A free_requested is either merged into this (MemoryViz) or ignored: same curve.
            size = open_.pop(e["addr"], None)
            if size is None:
                size = e["size"]
                freed_pre += size
            cur -= size
    # Pre-existing blocks still alive at the end (MemoryViz step 3).
    live_pre = 0
    for seg in segments:
        if seg.get("device", 0) != device:
            continue
        addr = seg.get("address") or 0
        for b in seg.get("blocks", []):
            a = b.get("address", addr)
            if b.get("state") == "active_allocated" and a not in open_:
                live_pre += block_requested(b)
            addr = a + b["size"]
    # The curve starts at all pre-existing bytes and `cur` is relative to that start, so the
    # baseline shifts every point equally: argmax of `cur` is the peak (-1 = the start itself).
    baseline = freed_pre + live_pre
    return len(trace), baseline + best, peak_i, baseline


def main(paths):
    if not paths:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    w = max(len(p) for p in paths)
    print(f"{'file':<{w}} {'dev':>3} {'events':>9} {'peak_bytes':>14} {'peak_idx':>9} {'baseline_bytes':>14}")
    for path in paths:
        snap = load(path)
        traces = snap.get("device_traces") or []
        segments = snap.get("segments") or []
        devices = set(range(len(traces))) | {s.get("device", 0) for s in segments}
        for dev in sorted(devices):
            trace = traces[dev] if 0 <= dev < len(traces) else []
            n, peak, peak_i, base = replay(trace, segments, dev)
            print(f"{path:<{w}} {dev:>3} {n:>9} {peak:>14} {peak_i:>9} {base:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
