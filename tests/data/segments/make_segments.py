#!/usr/bin/env python3
"""Writes the synthetic snapshots of this folder (plain Python 3, no torch; deterministic).

    python3 tests/data/segments/make_segments.py

fragmented_oom.pickle: one 64 MiB segment cut into eight 8 MiB blocks; every other block is
freed, then a 16 MiB request fails with 4 MiB free on the device: 32 MiB is cached, but in
8 MiB pieces, so the request cannot be placed (fragmentation, not a shortage). After the OOM
the program frees its first block, so at dump time the first two blocks have merged into one
16 MiB free block: only the state rebuilt at the OOM shows why it failed.

outside_oom.trace.json: a Chrome trace (the profiler's `[memory]` and `[OutOfMemory]` events,
as Kineto writes them) of a 16 GiB device (`deviceProperties.totalGlobalMem`). The program
holds four 1 GiB tensors, frees one (6 GiB reserved: 4 GiB segments + 2 GiB cached), then a
3 GiB request fails: the allocator asked the device for a 3 GiB segment and got none, so less
than 3 GiB was free and at least 16 - 6 - 3 = 7 GiB was held outside PyTorch's allocator
(another process, NCCL, ...). A Chrome trace's OOM says nothing of free memory: the failed
segment bounds it.
"""

import json

import os
import pickle

MiB = 1 << 20
BASE = 0x7F0000000000
HERE = os.path.dirname(os.path.abspath(__file__))

FORWARD = [
    {"filename": "/home/user/model.py", "line": 41, "name": "forward"},
    {"filename": "/home/user/train.py", "line": 88, "name": "train_step"},
]


def entry(action, addr, size, t):
    return {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t,
            "frames": FORWARD}


def fragmented_oom():
    t = 1_700_000_000_000_000
    events = [entry("segment_alloc", BASE, 64 * MiB, t)]
    for k in range(8):
        t += 10
        events.append(entry("alloc", BASE + k * 8 * MiB, 8 * MiB, t))
    for k in (1, 3, 5, 7):
        for action in ("free_requested", "free_completed"):
            t += 10
            events.append(entry(action, BASE + k * 8 * MiB, 8 * MiB, t))
    t += 10
    oom = entry("oom", 0, 16 * MiB, t)
    del oom["addr"]  # an oom entry has no address: it says what was free on the device
    oom["device_free"] = 4 * MiB
    events.append(oom)
    for action in ("free_requested", "free_completed"):
        t += 10
        events.append(entry(action, BASE, 8 * MiB, t))

    def block(offset, size, live):
        b = {"address": BASE + offset, "size": size,
             "requested_size": size if live else 0,
             "state": "active_allocated" if live else "inactive"}
        if live:
            b["frames"] = FORWARD
        return b

    blocks = [block(0, 16 * MiB, False)]
    for k in range(2, 8):
        blocks.append(block(k * 8 * MiB, 8 * MiB, k % 2 == 0))
    segment = {"device": 0, "address": BASE, "total_size": 64 * MiB,
               "allocated_size": 24 * MiB, "active_size": 24 * MiB, "requested_size": 24 * MiB,
               "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
               "is_expandable": False, "frames": [], "blocks": blocks}
    return {"segments": [segment], "device_traces": [events],
            "allocator_settings": {"expandable_segments": False}, "external_annotations": []}


def outside_oom():
    GiB = 1 << 30
    events = [{"ph": "X", "cat": "cpu_op", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
               "ts": 100.0, "dur": 900.0, "args": {"External id": 1}}]
    allocated = reserved = 0
    t = 110.0

    def mem(name, addr, size):
        nonlocal t
        t += 10.0
        args = {"Device Type": 1, "Device Id": 0, "Bytes": size,
                "Total Allocated": allocated, "Total Reserved": reserved}
        if addr is not None:
            args = {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": size,
                    "Total Allocated": allocated, "Total Reserved": reserved}
        events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": name,
                       "pid": 1, "tid": 1, "ts": t, "args": args})

    sizes = [GiB, GiB, 2 * GiB, GiB, GiB]
    for k, size in enumerate(sizes):
        allocated += size
        reserved += size
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1,
                       "ts": t + 5.0, "dur": 8.0, "args": {"External id": 10 + k}})
        mem("[memory]", BASE + k * 4 * GiB, size)
    # Frees the 2 GiB tensor: cached, still reserved.
    allocated -= 2 * GiB
    mem("[memory]", BASE + 2 * 4 * GiB, -2 * GiB)
    # A 3 GiB request: no cached block that large, no 3 GiB segment free on the device.
    mem("[OutOfMemory]", None, 3 * GiB)
    trace = {"schemaVersion": 1,
             "deviceProperties": [{"id": 0, "name": "NVIDIA T4-like 16 GiB",
                                   "totalGlobalMem": 16 * GiB, "computeMajor": 7,
                                   "computeMinor": 5}],
             "traceEvents": events, "traceName": "outside_oom"}
    return trace


def main():
    with open(os.path.join(HERE, "fragmented_oom.pickle"), "wb") as f:
        pickle.dump(fragmented_oom(), f, protocol=4)
    with open(os.path.join(HERE, "outside_oom.trace.json"), "w") as f:
        json.dump(outside_oom(), f, indent=0, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
