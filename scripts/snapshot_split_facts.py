#!/usr/bin/env python3
"""What a two-core parse of a snapshot pickle would have to carry across a split.

    python3 scripts/snapshot_split_facts.py FILE.pickle

Walks the pickle's opcodes (pickletools.genops: nothing is unpickled, nothing
runs; slow, ~10 min for a 170 MB file) and prints where `device_traces` starts,
where a split at the first batch `MARK` past the middle of the entries would
fall (a `MARK` right after an `APPENDS`, that opens the next batch of entries),
how many memo slots exist there, and what the part after the split fetches
from the slots before it (`BINGET`/`LONG_BINGET`), by the opcode that made
each fetched value: the placeholders a second parser would need. Issue 35;
numbers in docs/performance.md (twentieth session).
"""
import collections
import pickletools
import sys

VALUE_OPS = {
    "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "EMPTY_DICT", "EMPTY_LIST",
    "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BININT", "BININT1",
    "BININT2", "LONG1", "BINFLOAT", "NEWTRUE", "NEWFALSE", "NONE",
}


def main(path):
    data = open(path, "rb").read()
    made_by = []  # per memo slot: the opcode that made the value memoized
    last = None  # the opcode that made the value on top of the stack (approximately)
    binputs = 0
    ops = []  # (offset, opcode name, argument, memo slots so far)
    for op, arg, pos in pickletools.genops(data):
        name = op.name
        if name == "MEMOIZE":
            made_by.append(last)
        elif name in ("BINPUT", "LONG_BINPUT"):
            binputs += 1
        if name in ("BINGET", "LONG_BINGET"):
            last = made_by[arg] if arg < len(made_by) else None
        elif name in VALUE_OPS:
            last = name
        ops.append((pos, name, arg, len(made_by)))
    start = data.find(b"device_traces")
    print(f"{path}: {len(data)} bytes, {len(ops)} opcodes, {len(made_by)} memo slots, "
          f"{binputs} BINPUTs; `device_traces` at byte {start} ({start / len(data):.1%})")
    middle = start + (len(data) - start) // 2
    split = next(
        (k for k, (pos, name, _, _) in enumerate(ops)
         if pos >= middle and name == "MARK" and ops[k - 1][1] == "APPENDS"
         and k + 1 < len(ops) and ops[k + 1][1] == "EMPTY_DICT"),
        None,
    )
    if split is None:
        print("no batch MARK past the middle of the entries")
        return
    at, _, _, slots = ops[split]
    print(f"split at byte {at} ({at / len(data):.1%}), {slots} memo slots before it")
    gets = collections.Counter()
    distinct = set()
    for _, name, arg, _ in ops[split:]:
        if name in ("BINGET", "LONG_BINGET") and arg < slots:
            gets[made_by[arg]] += 1
            distinct.add(arg)
    print(f"after it: {sum(gets.values())} gets of earlier slots, {len(distinct)} distinct slots")
    for made, n in gets.most_common():
        print(f"  {n:>10} made by {made}")


if __name__ == "__main__":
    main(sys.argv[1])
