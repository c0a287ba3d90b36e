#!/usr/bin/env python3
"""Baseline "plain Python job" for memcut's Chrome-trace benchmarks: load a PyTorch-profiler
(Kineto) Chrome trace with `json.load` and report the largest `Total Allocated` per device, the
number a reader of the trace looks for first.

    python3 scripts/trace_peak.py TRACE [TRACE ...]      # .json or .json.gz

Per device (`Device Type`, `Device Id`) it prints: `[memory]` events, the largest `Total
Allocated` and the `ts` of the first event that reports it (`-` when the trace's memory events
carry no `Total Allocated`: the 2021 schema). The companion of `replay_peak.py` (snapshots).
"""

import gzip
import json
import sys


def load(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        return json.load(f)


def peaks(trace):
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    out = {}
    for e in events:
        if not isinstance(e, dict) or e.get("name") != "[memory]":
            continue
        args = e.get("args") or {}
        device = (args.get("Device Type"), args.get("Device Id"))
        n, best, at = out.get(device, (0, None, None))
        total = args.get("Total Allocated")
        if isinstance(total, (int, float)) and (best is None or total > best):
            best, at = total, e.get("ts")
        out[device] = (n + 1, best, at)
    return out


def main(paths):
    if not paths:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    w = max(len(p) for p in paths)
    print(f"{'file':<{w}} {'device':>8} {'events':>9} {'max_total_allocated':>20} {'at_ts':>20}")
    for path in paths:
        for (dtype, did), (n, best, at) in sorted(peaks(load(path)).items(), key=str):
            best = "-" if best is None else best
            at = "-" if at is None else at
            print(f"{path:<{w}} {f'{dtype}:{did}':>8} {n:>9} {best:>20} {at:>20}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
