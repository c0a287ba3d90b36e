#!/usr/bin/env python3
"""Replicate a real Kineto / PyTorch-profiler Chrome trace N times into one big trace
(plain Python 3, no torch), for benchmarks of the Chrome-trace reader.

    python3 scripts/replicate_trace.py sample_traces/train_adamw.trace.json.gz --target-mb 300 \\
        --out /tmp/big_adamw.trace.json
    python3 scripts/replicate_trace.py ../shared/corpus/hta/tests/data/df_index_resolver/df_index_resolver.json.gz \\
        --copies 6 --out /tmp/big_hta.trace.json.gz

Outputs are large: write them to /tmp, never into the repository.

The output keeps the input's shape, because the reader's speed depends on it: the header and
the trailer are copied byte for byte, and every event of every copy is the input event's own
text with only some numbers rewritten, so key order, spacing, which `args` are present and
Kineto's odd layout (`"dur": 8.1\\n    ,`) stay as recorded. Copy 0 is the input's events
unchanged; copies 1..N-1 repeat every event except the `M` metadata events, with

* `ts` shifted by k x the trace's span (decimal text kept: `1.385` stays three decimals);
* `Addr` shifted by k x the address range of the device's memory events (2 MiB-aligned), so
  the blocks of one copy never alias another's;
* `Total Allocated` / `Total Reserved` running on: + k x the net bytes the input allocates per
  device (`Device Type`, `Device Id`), which is what the allocator would report if the same
  work ran again without freeing what the input left live (the CPU's `Total Reserved`, which
  PyTorch writes as 0, stays as it is);
* ids shifted by k x (their maximum + 1), per namespace: `External id`; `correlation` and flow
  `id`; `Ev Idx`; `Sequence number`; `Python id` and `Python parent id`;
* `ProfilerStep#N` renumbered by k x the number of steps.
"""

import argparse
import gzip
import json
import math
import re
import sys

ID_GROUPS = {
    "External id": "external",
    "correlation": "correlation",
    "id": "correlation",
    "Ev Idx": "ev_idx",
    "Sequence number": "sequence",
    "Python id": "python",
    "Python parent id": "python",
}
SHIFTED_KEYS = ["ts", "Addr", "Total Allocated", "Total Reserved"] + list(ID_GROUPS)
NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
FIELD = re.compile(
    r'"(' + "|".join(re.escape(k) for k in SHIFTED_KEYS) + r')"(\s*:\s*)(' + NUMBER + r")"
)
STEP = re.compile(r'"ProfilerStep#(\d+)"')
WS = " \t\r\n"


def read_text(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw.decode("utf-8", errors="surrogateescape")


def skip_ws(s, i):
    while i < len(s) and s[i] in WS:
        i += 1
    return i


def find_events(s):
    """Returns (start of the events array's contents, [(sep, start, end, obj)], end of last event)."""
    top = skip_ws(s, 0)
    if s[top] == "[":
        pos = top + 1
    else:
        m = re.search(r'"traceEvents"\s*:\s*\[', s)
        if not m:
            sys.exit("no traceEvents array")
        pos = m.end()
    decoder = json.JSONDecoder()
    events = []
    body_start = pos
    sep_start = pos
    while True:
        i = skip_ws(s, pos)
        if s[i] == "]":
            break
        if s[i] == ",":
            pos = i + 1
            continue
        obj, end = decoder.raw_decode(s, i)
        events.append((s[sep_start:i], i, end, obj))
        pos = sep_start = end
    return body_start, events, pos


def num_text_plus(text, shift):
    """`text` (a JSON number) plus an integer, keeping its decimals."""
    if shift == 0:
        return text
    m = re.fullmatch(r"(-?\d+)(\.\d+)?", text)
    if m:
        return str(int(m.group(1)) + shift) + (m.group(2) or "")
    return repr(float(text) + shift)


def device_of(obj):
    args = obj.get("args") or {}
    return (args.get("Device Type"), args.get("Device Id"))


def is_memory(obj):
    return obj.get("name") in ("[memory]", "[OutOfMemory]")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="a Chrome trace (.json or .json.gz) with [memory] events")
    ap.add_argument("--out", required=True, help="output path; gzip when it ends in .gz")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--copies", type=int, help="number of copies (the input counts as one)")
    group.add_argument("--target-mb", type=float, help="copies enough to reach about this many MB (uncompressed)")
    args = ap.parse_args()

    s = read_text(args.trace)
    body_start, events, body_end = find_events(s)
    if not events:
        sys.exit("no events")

    # What a copy shifts by.
    starts, ends, steps = [], [], []
    addrs, sizes = {}, {}
    id_max = {}
    net = {}
    for _, _, _, obj in events:
        if not isinstance(obj, dict):
            continue
        ts = obj.get("ts")
        if obj.get("ph") != "M" and isinstance(ts, (int, float)):
            starts.append(ts)
            dur = obj.get("dur")
            ends.append(ts + (dur if isinstance(dur, (int, float)) else 0))
        a = obj.get("args") or {}
        for key, group in ID_GROUPS.items():
            v = a.get(key) if key != "id" else obj.get("id")
            if isinstance(v, int):
                id_max[group] = max(id_max.get(group, 0), v)
        if is_memory(obj):
            if isinstance(a.get("Addr"), int):
                addrs.setdefault(device_of(obj), []).append(a["Addr"])
            b = a.get("Bytes")
            if isinstance(b, int):
                sizes[device_of(obj)] = max(sizes.get(device_of(obj), 0), abs(b))
                if obj.get("name") == "[memory]":
                    net[device_of(obj)] = net.get(device_of(obj), 0) + b
        m = STEP.fullmatch(json.dumps(obj.get("name")))
        if m:
            steps.append(int(m.group(1)))
    time_shift = math.ceil(max(ends) - min(starts)) + 1000
    align = 2 << 20
    addr_shift = {
        dev: ((max(a) - min(a) + sizes.get(dev, 0)) // align + 1) * align for dev, a in addrs.items()
    }
    id_shift = {g: v + 1 for g, v in id_max.items()}
    step_shift = (max(steps) - min(steps) + 1) if steps else 0

    copies = args.copies or max(1, math.ceil(args.target_mb * 1e6 / len(s.encode("utf-8", "surrogateescape"))))
    last = copies - 1
    if any(max(a) + last * addr_shift[dev] >= 1 << 64 for dev, a in addrs.items()):
        sys.exit(f"{copies} copies push addresses past 2**64; use fewer")
    for dev, d in net.items():
        if d < 0:
            print(f"note: device {dev} frees {-d} bytes more than it allocates; "
                  f"its Total Allocated is kept from going below 0", file=sys.stderr)

    # Each event's text as literal pieces and the numbers to rewrite.
    templates = []
    for sep, start, end, obj in events:
        if isinstance(obj, dict) and obj.get("ph") == "M":
            continue
        text = s[start:end]
        pieces, slots, at = [], [], 0
        dev = device_of(obj) if isinstance(obj, dict) and is_memory(obj) else None
        for m in FIELD.finditer(text):
            key, val = m.group(1), m.group(3)
            pieces.append(text[at:m.start(3)])
            slots.append((key, val, dev))
            at = m.end(3)
        pieces.append(text[at:])
        templates.append((pieces, slots))

    sep = events[1][0] if len(events) > 1 else ","
    opener = gzip.open if args.out.endswith(".gz") else open
    with opener(args.out, "wt", encoding="utf-8", errors="surrogateescape", newline="") as out:
        out.write(s[:body_start])
        out.write(s[body_start:body_end])
        for k in range(1, copies):
            for pieces, slots in templates:
                parts = [sep]
                for piece, (key, val, dev) in zip(pieces, slots):
                    parts.append(piece)
                    if key == "ts":
                        parts.append(num_text_plus(val, k * time_shift))
                    elif key == "Addr" and dev is not None:
                        parts.append(num_text_plus(val, k * addr_shift.get(dev, 0)))
                    elif key == "Total Allocated" and dev is not None:
                        parts.append(str(max(0, int(float(val)) + k * net.get(dev, 0))))
                    elif key == "Total Reserved" and dev is not None and dev[0] != 0:
                        parts.append(str(int(float(val)) + k * max(0, net.get(dev, 0))))
                    elif key in ID_GROUPS:
                        parts.append(num_text_plus(val, k * id_shift.get(ID_GROUPS[key], 0)))
                    else:
                        parts.append(val)
                parts.append(pieces[-1])
                text = "".join(parts)
                if step_shift and "ProfilerStep#" in text:
                    text = STEP.sub(lambda m: f'"ProfilerStep#{int(m.group(1)) + k * step_shift}"', text)
                out.write(text)
        out.write(s[body_end:])
    print(
        f"{args.out}: {copies} copies of {len(events)} events; shifts: ts {time_shift} us, "
        f"Addr {dict((d, hex(v)) for d, v in sorted(addr_shift.items(), key=str))}, steps {step_shift}, net bytes per copy {dict(sorted(net.items(), key=str))}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
