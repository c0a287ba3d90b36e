#!/usr/bin/env python3
"""Replicate a real PyTorch memory snapshot N times into one big snapshot (plain Python 3, no
torch), for benchmarks of the snapshot reader on real-shaped input.

    python3 scripts/replicate_snapshot.py ../shared/corpus/cs336-bcrafton/memory_snapshot.pickle \\
        --target-entries 1000000 --out /tmp/big_cs336.pickle
    python3 scripts/replicate_snapshot.py sample_traces/train_adamw.snapshot.pickle.gz \\
        --target-mb 300 --out /tmp/big_profile.pickle --compare

Outputs are large: write them to /tmp, never into the repository.

The output keeps the input's pickling shape, because the reader's speed depends on it. The input
is loaded with a restricted unpickler (no globals, as `replay_peak.py`), every copy is built from
the loaded objects, and the result is dumped with the input's protocol by CPython's own pickler,
which memoizes by object identity, so what was shared in the input is shared in the output:

* frame dicts are the input's own objects in every copy (one memo entry each, fetched by every
  traceback that names them, as PyTorch's symbolizer shares them);
* a traceback list is new in every copy, shared within a copy exactly as in the input (an
  active block and its `alloc` entry, a `free_requested` and its `free_completed`);
* a string value (e.g. `compile_context`'s "N/A") that the input holds once per entry is a new
  object in every copy; one the input shares between entries stays shared; keys are the
  input's objects (memoized once);
* dicts keep their key order and exactly the keys they had.

Copy 0 is the input unchanged (`--copies 1` writes the input's bytes back when CPython's pickler
wrote it: the script checks that and says so). Copies 1..N-1 repeat every trace entry, segment
and external annotation with

* `time_us` shifted by k x the span of the input's times (int stays int, float stays float);
* addresses (`addr` of every action but `oom`, whose field is `device_free`; segment `address`,
  block `address`, history `addr`) shifted by k x the address range of their device, rounded up
  to 2 MiB, so the copies never alias;
* everything else as in the input (sizes, streams, categories, frames).

`--compare` prints the opcode mix of input and output (a slow pass over the output).
"""

import argparse
import collections
import gzip
import io
import math
import pickle
import pickletools
import sys

ALIGN = 2 << 20


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"snapshot refers to global {module}.{name}; refusing to load it")


def read_bytes(path):
    data = open(path, "rb").read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


def protocol_of(data):
    if data[:1] != b"\x80":
        sys.exit("not a protocol 2+ pickle")
    return data[1]


def fresh_str(s):
    """A new str object equal to `s` (CPython shares only the empty string and single characters)."""
    return s if len(s) <= 1 else (s + " ")[:-1]


class Shape:
    """What the input shares: how many references each string, dict and list below the top-level
    lists has (a trace entry and a segment count as referenced once)."""

    def __init__(self, snap):
        self.refs = collections.Counter()
        seen = set()
        work = [v for d in self.dicts(snap) for v in d.values()]
        while work:
            v = work.pop()
            if not isinstance(v, (str, list, dict)):
                continue
            self.refs[id(v)] += 1
            if isinstance(v, str) or id(v) in seen:
                continue
            seen.add(id(v))
            work.extend(v.values() if isinstance(v, dict) else v)

    @staticmethod
    def dicts(snap):
        for trace in snap.get("device_traces") or []:
            yield from trace
        yield from snap.get("segments") or []
        yield from snap.get("external_annotations") or []

    def shared(self, v):
        return self.refs[id(v)] > 1


class Copy:
    """Copy k of the input: shifted times and addresses; what the input shares (frame dicts,
    strings) is the input's object, what it holds once is new; lists are new, shared within
    the copy as in the input."""

    def __init__(self, shape, time_shift, addr_shift):
        self.shape = shape
        self.time_shift = time_shift
        self.addr_shift = addr_shift
        self.lists = {}

    def value(self, v, device):
        if isinstance(v, str):
            return v if self.shape.shared(v) else fresh_str(v)
        if isinstance(v, list):
            new = self.lists.get(id(v))
            if new is None:
                new = [self.value(x, device) for x in v]
                self.lists[id(v)] = new
            return new
        if isinstance(v, dict) and not self.shape.shared(v):
            return self.dict(v, device, ("address", "addr"))
        return v

    def dict(self, d, device, addr_keys):
        out = {}
        for key, v in d.items():
            if key in addr_keys and isinstance(v, int) and not isinstance(v, bool):
                out[key] = v + self.addr_shift.get(device, 0)
            elif key == "time_us" and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[key] = v + (self.time_shift if isinstance(v, int) else float(self.time_shift))
            else:
                out[key] = self.value(v, device)
        return out

    def entry(self, e, device):
        # An `oom` entry's address field holds the bytes that were free: not an address.
        return self.dict(e, device, () if e.get("action") == "oom" else ("addr",))

    def segment(self, seg):
        # Blocks and their `history` records are dicts held once: their addresses shift too.
        return self.dict(seg, seg.get("device", 0), ("address",))


def shifts(snap):
    times, ranges = [], collections.defaultdict(list)
    for device, trace in enumerate(snap.get("device_traces") or []):
        for e in trace:
            t = e.get("time_us")
            if isinstance(t, (int, float)):
                times.append(t)
            a, s = e.get("addr"), e.get("size")
            if e.get("action") != "oom" and isinstance(a, int):
                ranges[device].append((a, a + (s if isinstance(s, int) else 0)))
    for seg in snap.get("segments") or []:
        a, s = seg.get("address"), seg.get("total_size")
        if isinstance(a, int):
            ranges[seg.get("device", 0)].append((a, a + (s if isinstance(s, int) else 0)))
    for ann in snap.get("external_annotations") or []:
        t = ann.get("time_us")
        if isinstance(t, (int, float)):
            times.append(t)
    time_shift = math.ceil(max(times) - min(times)) + 1000 if times else 0
    addr_shift = {
        dev: ((max(e for _, e in r) - min(a for a, _ in r)) // ALIGN + 1) * ALIGN for dev, r in ranges.items()
    }
    return time_shift, addr_shift


# An output size no benchmark wants (about; the output is near copies x the input).
MAX_OUTPUT_BYTES = 4 << 30


def replicate(snap, copies):
    shape = Shape(snap)
    time_shift, addr_shift = shifts(snap)
    traces = snap.get("device_traces")
    segments = snap.get("segments")
    annotations = snap.get("external_annotations")
    new_traces = [list(t) for t in traces] if isinstance(traces, list) else traces
    new_segments = list(segments) if isinstance(segments, list) else segments
    new_annotations = list(annotations) if isinstance(annotations, list) else annotations
    for k in range(1, copies):
        copy = Copy(shape, k * time_shift, {d: k * s for d, s in addr_shift.items()})
        # Segments first: pickle meets a copy's shared tracebacks in the order the input had them.
        if isinstance(segments, list):
            new_segments.extend(copy.segment(s) if isinstance(s, dict) else s for s in segments)
        if isinstance(traces, list):
            for device, trace in enumerate(traces):
                new_traces[device].extend(copy.entry(e, device) if isinstance(e, dict) else e for e in trace)
        if isinstance(annotations, list):
            new_annotations.extend(copy.dict(a, None, ()) if isinstance(a, dict) else a for a in annotations)
    out = {}
    for key, v in snap.items():
        out[key] = {"device_traces": new_traces, "segments": new_segments,
                    "external_annotations": new_annotations}.get(key, v)
    return out, time_shift, addr_shift


def opcode_mix(data):
    counts = collections.Counter(op.name for op, _, _ in pickletools.genops(data))
    total = sum(counts.values())
    return {name: n / total for name, n in counts.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("snapshot", help="a snapshot pickle (.pickle or .pickle.gz)")
    ap.add_argument("--out", required=True, help="output path; gzip when it ends in .gz")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--copies", type=int, help="number of copies (the input counts as one)")
    group.add_argument("--target-entries", type=int, help="copies enough for about this many trace entries")
    group.add_argument("--target-mb", type=float, help="copies enough for about this many MB (uncompressed)")
    ap.add_argument("--compare", action="store_true", help="print the opcode mix of input and output")
    args = ap.parse_args()

    data = read_bytes(args.snapshot)
    protocol = protocol_of(data)
    snap = SafeUnpickler(io.BytesIO(data)).load()
    if isinstance(snap, list):
        snap = {"segments": snap}
    if not isinstance(snap, dict):
        sys.exit("top level is not a dict")
    entries = sum(len(t) for t in snap.get("device_traces") or [])
    if args.copies:
        copies = args.copies
    elif args.target_entries:
        copies = math.ceil(args.target_entries / max(entries, 1))
    else:
        copies = math.ceil(args.target_mb * 1e6 / len(data))
    copies = max(1, copies)
    # Copies repeat the segments too: a snapshot with few entries (allocator state only, as
    # verl's or FlexGen's) would need millions of copies for an entry target.
    if copies * len(data) > MAX_OUTPUT_BYTES:
        sys.exit(
            f"{args.snapshot}: {copies} copies of a {len(data)}-byte input ({entries} trace entries) "
            f"would be over {MAX_OUTPUT_BYTES >> 30} GiB; pass --target-mb (or --copies) instead"
        )

    out, time_shift, addr_shift = replicate(snap, copies)
    buf = io.BytesIO()
    pickle.Pickler(buf, protocol=protocol).dump(out)
    body = buf.getvalue()
    if copies == 1:
        print("copies 1: " + ("the input's bytes exactly" if body == data else
              "NOT the input's bytes (not written by this CPython's pickler)"), file=sys.stderr)
    opener = gzip.open if args.out.endswith(".gz") else open
    with opener(args.out, "wb") as f:
        f.write(body)
    print(
        f"{args.out}: {copies} copies of {entries} entries, {len(body) / 1e6:.1f} MB, protocol {protocol}; "
        f"shifts: time_us {time_shift}, addr {dict((d, hex(v)) for d, v in sorted(addr_shift.items(), key=str))}",
        file=sys.stderr,
    )
    if args.compare:
        before, after = opcode_mix(data), opcode_mix(body)
        print(f"{'opcode':<18} {'input %':>8} {'output %':>9}", file=sys.stderr)
        for name in sorted(set(before) | set(after), key=lambda n: -before.get(n, 0)):
            print(f"{name:<18} {100 * before.get(name, 0):8.2f} {100 * after.get(name, 0):9.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
