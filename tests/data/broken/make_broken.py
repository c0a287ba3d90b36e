#!/usr/bin/env python3
"""Regenerates the broken-input corpus in this directory (deterministic).

    python3 tests/data/broken/make_broken.py

Each file is named after its fault; README.md says how each was made and
tests/suite/broken.rs checks memcut's exact answer to it. Files named `fuzz_*`
are crash inputs found by `cargo fuzz` and are copied, not generated.
"""
import base64, gzip, json, os, pickle

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def gz(data):
    # mtime=0: byte-identical output on every run.
    return gzip.compress(data, mtime=0)


# --- A small valid snapshot, pickled with protocol 4 -----------------------
FRAMES = [{"filename": "train.py", "line": 10, "name": "forward"}]


def entry(action, addr, size, t, **extra):
    e = {"action": action, "addr": addr, "size": size, "stream": 0,
         "time_us": t, "frames": FRAMES}
    e.update(extra)
    return e


def snapshot(device_traces, segments=()):
    return {"segments": list(segments), "device_traces": device_traces,
            "allocator_settings": {}}


def snap_pickle(snap):
    return pickle.dumps(snap, protocol=4)


GOOD = snapshot([[entry("alloc", 0x1000, 512, 1), entry("alloc", 0x2000, 1024, 2),
                  entry("free_requested", 0x1000, 512, 3),
                  entry("free_completed", 0x1000, 512, 4)]])
good_pkl = snap_pickle(GOOD)

# --- A small valid Chrome trace ------------------------------------------


def mem(ts, addr, nbytes, total, reserved=2097152, device=0):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
            "pid": 1, "tid": 1, "ts": ts,
            "args": {"Total Reserved": reserved, "Total Allocated": total,
                     "Bytes": nbytes, "Addr": addr, "Device Id": device,
                     "Device Type": 1}}


def chrome(events):
    return json.dumps({"schemaVersion": 1, "traceEvents": events}, indent=1).encode()


CHROME_EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "pid": 1, "tid": 1, "ts": 0, "dur": 100,
     "args": {}},
    mem(1, 4096, 512, 512), mem(2, 8192, 1024, 1536), mem(3, 4096, -512, 1024),
    mem(4, 12288, 256, 1280),
]
good_chrome = chrome(CHROME_EVENTS)

# 1. gzip cut in half.
g = gz(good_chrome)
write("truncated_gzip.json.gz", g[: len(g) // 2])

# 2. pickle truncated at several offsets (header only, mid-string, near the end).
write("truncated_pickle_at_2.pkl", good_pkl[:2])
write("truncated_pickle_at_40.pkl", good_pkl[:40])
write("truncated_pickle_before_stop.pkl", good_pkl[:-1])

# 3. GLOBAL/REDUCE: the classic os.system payload (protocol 0) and a protocol-2 one.
write("global_reduce_os_system_proto0.pkl", b"cos\nsystem\n(S'echo pwned'\ntR.")
write("global_reduce_os_system_proto2.pkl",
      b"\x80\x02cos\nsystem\nq\x00X\x0b\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03.")

# 4. Chrome trace array form cut in the middle of an event.
arr = json.dumps(CHROME_EVENTS, indent=1).encode()
cut = arr.index(b'"Total Allocated": 1280')
write("chrome_cut_mid_event.json", arr[:cut])

# 5. An unterminated string (the file ends inside a string).
write("chrome_unterminated_string.json",
      b'{"traceEvents": [{"ph": "i", "name": "[memory', )

# 6. NaN as a total (a bare NaN token, as Kineto writes for 0/0).
nan = good_chrome.replace(b'"Total Allocated": 1536', b'"Total Allocated": NaN')
assert nan != good_chrome
write("chrome_nan_total.json", nan)

# 7. Negative sizes: a snapshot alloc of -4096 bytes.
write("snapshot_negative_size.pkl", snap_pickle(snapshot([[entry("alloc", 0x1000, -4096, 1)]])))

# 8. A free of an address never allocated.
write("snapshot_free_unknown_address.pkl", snap_pickle(snapshot(
    [[entry("free_completed", 0xdead000, 4096, 1), entry("alloc", 0x1000, 512, 2)]])))

# 9. An alloc of an address already live.
write("snapshot_alloc_address_live.pkl", snap_pickle(snapshot(
    [[entry("alloc", 0x1000, 512, 1), entry("alloc", 0x1000, 2048, 2)]])))

# 10. Events out of order (time_us goes backwards; list order is authoritative).
write("snapshot_events_out_of_order.pkl", snap_pickle(snapshot(
    [[entry("alloc", 0x1000, 512, 30), entry("alloc", 0x2000, 1024, 20),
      entry("free_completed", 0x1000, 512, 10)]])))

# 11. A device with no events (device 0 empty, device 1 has history).
write("snapshot_device_without_events.pkl", snap_pickle(snapshot(
    [[], [entry("alloc", 0x1000, 512, 1)]])))

# 12. An OOM entry without `device_free`.
oom = {"action": "oom", "size": 1 << 30, "stream": 0, "time_us": 2, "frames": FRAMES}
write("snapshot_oom_without_device_free.pkl", snap_pickle(snapshot(
    [[entry("alloc", 0x1000, 512, 1), oom]])))

# 13. Ten devices, each with one allocation of (d + 1) KiB.
write("snapshot_ten_devices.pkl", snap_pickle(snapshot(
    [[entry("alloc", 0x1000, 1024 * (d + 1), 1)] for d in range(10)])))

# 14. A 0-byte file.
write("empty.bin", b"")

# 15. (a directory passed as a file: the test uses this directory itself.)

# 16. Random bytes (fixed seed, first byte 0x07 is no known format).
import random
rng = random.Random(1234)
write("random_bytes.bin", bytes([7]) + bytes(rng.randrange(256) for _ in range(255)))

# 17. JSON that is not a trace.
write("json_not_a_trace.json", b'{"name": "resnet50", "epochs": 90, "lr": 0.1}\n')

# 18. memory_viz HTML whose embedded base64 snapshot is corrupt.
b64 = base64.b64encode(good_pkl).decode()
bad = b64[:20] + "!!" + b64[22:]
write("html_corrupt_base64.html",
      ('<!DOCTYPE html>\n<html><body><script type="module">\n'
       'import {add_local_files} from "https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js"\n'
       'const local_files = [{"name": "snapshot.pickle", "base64": "%s"}]\n'
       'add_local_files(local_files, "Active Memory Timeline")\n</script></body></html>\n' % bad).encode())

# 19. A Chrome trace whose events nest 100 000 arrays deep (recursion bomb).
write("chrome_deeply_nested.json.gz",
      gz(b'{"traceEvents": [{"ph": "i", "name": "[memory]", "args": ' + b"[" * 100000 + b"]" * 100000 + b"}]}"))

# 20. A pickle of 1 200 000 nested empty lists (EMPTY_LIST x N, APPEND x N-1):
#     refused by the parser-stack limit (2**20 values) before anything is built.
N = 1_200_000
write("pickle_nested_lists.pkl.gz", gz(b"\x80\x02" + b"]" * N + b"a" * (N - 1) + b"."))

# 21. A pickle that claims a 4 GiB string (BINUNICODE8 length) in 20 bytes.
write("pickle_huge_length_claim.pkl", b"\x80\x04\x8d" + (1 << 32).to_bytes(8, "little") + b"abc")

# 22. A memo index far out of range (LONG_BINGET 0xfffffff0).
write("pickle_memo_out_of_range.pkl", b"\x80\x02j\xf0\xff\xff\xff.")

# 23. A gzip that inflates to nothing.
write("gzip_of_nothing.gz", gz(b""))

# 24. A segment on device 2**60: one device, not 2**60 ordinals to walk.
write("snapshot_huge_device_ordinal.pkl", snap_pickle(
    {"segments": [{"device": 1 << 60, "address": 4096, "total_size": 2097152, "blocks": []}],
     "device_traces": []}))

# 25. A gzip bomb, gzipped twice so that it stays small: the inner layer
#     inflates 100 MiB of '[' + spaces from ~100 KB (over 1000:1).
import zlib
def gz_stream(chunks):
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join([c.compress(ch) for ch in chunks] + [c.flush()])
inner = gz_stream([b"["] + [b" " * (1 << 20)] * 100)
# Python's gzip writes mtime; zlib's gzip wrapper writes 0: deterministic.
write("gzip_bomb_double.json.gz.gz", gz_stream([inner]))

# 26. Issue 12: a trace entry (a dict with an unknown `action`) where a frame
#     belongs, alone and after a real frame. Its handle once carried the
#     bits of a site's and was read as site 2**30 - 1 (a panic).
write("snapshot_entry_in_frames.pkl", snap_pickle(
    {"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 16, "size": 100, "frames": [{"action": "bogus"}]}]]}))
write("snapshot_entry_in_frames_after_a_frame.pkl", snap_pickle(
    {"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 16, "size": 100,
         "frames": [{"filename": "a.py", "line": 1, "name": "f"}, {"action": "bogus"}]}]]}))

# 27. Totals no allocator reports (the shape `cargo fuzz run chrome` found):
#     `Total Allocated` of 2**64 - 1 and `Total Reserved` of 2**62 on two
#     devices. They were taken as they were (a 16 EiB peak, and the sum of
#     the peaks overflowed); they are counted as 256 TiB with a warning.
huge = [dict(mem(1, 4096, 512, 2**64 - 1, reserved=2**62, device=d)) for d in (0, 1)]
huge += [mem(2, 8192, 512, 1024, device=0), mem(2, 8192, 512, 1024, device=1)]
write("chrome_totals_over_256tib.json", chrome(huge))
