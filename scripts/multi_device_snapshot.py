#!/usr/bin/env python3
"""Make a snapshot of several devices from one of one device (plain Python 3, no torch), for
measuring memcut on multi-GPU snapshots (docs/performance.md, issue 35, twenty-fourth session).

    python3 scripts/make_big_snapshot.py --entries 250000 --out /tmp/one.pickle --seed 11
    python3 scripts/multi_device_snapshot.py /tmp/one.pickle /tmp/four.pickle 4

Device 0 is the input's; each further device gets a copy of its trace entries (new dicts, as
PyTorch writes one per entry; the frame lists shared, as the symbolizer shares them) and of its
segments with `device` set. Only for files this project generated: `pickle.load` runs whatever a
pickle says, so never point it at a file from elsewhere.
"""

import pickle
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(src, "rb") as f:
        snap = pickle.load(f)
    first = snap["device_traces"][0]
    first_segments = [s for s in snap["segments"] if s.get("device", 0) == 0]
    traces = [first]
    segments = list(snap["segments"])
    for device in range(1, n):
        traces.append([dict(e) for e in first])
        for s in first_segments:
            copy = dict(s)
            copy["device"] = device
            copy["blocks"] = [dict(b) for b in s.get("blocks", [])]
            segments.append(copy)
    snap["device_traces"] = traces
    snap["segments"] = segments
    with open(out, "wb") as f:
        pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)


if __name__ == "__main__":
    main()
