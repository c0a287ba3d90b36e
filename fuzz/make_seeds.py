#!/usr/bin/env python3
"""Writes small seed corpora for the fuzz targets into fuzz/corpus/<target>/.

Run from the repository root: python3 fuzz/make_seeds.py
Seeds are small on purpose (libFuzzer mutates small inputs much faster):
compact excerpts of the sample traces, tiny hand-written pickles and JSON.
"""
import gzip, io, json, os, pickle, glob

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def mini_snapshot(proto):
    frames = [{"filename": "train.py", "line": 10, "name": "forward"},
              {"filename": "torch/nn/modules/linear.py", "line": 125, "name": "forward"}]
    snap = {
        "segments": [{"device": 0, "address": 4096, "total_size": 2097152,
                      "allocated_size": 512, "active_size": 512, "requested_size": 500,
                      "stream": 0, "segment_type": "small", "segment_pool_id": (0, 0),
                      "is_expandable": False, "frames": frames,
                      "blocks": [{"address": 4096, "size": 512, "requested_size": 500,
                                  "state": "active_allocated", "frames": frames},
                                 {"address": 4608, "size": 2096640, "requested_size": 0,
                                  "state": "inactive", "frames": []}]}],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 4096, "size": 2097152, "stream": 0,
             "time_us": 1, "frames": frames},
            {"action": "alloc", "addr": 4096, "size": 512, "stream": 0, "time_us": 2,
             "frames": frames},
            {"action": "alloc", "addr": 8192, "size": 1024, "stream": 0, "time_us": 3,
             "frames": frames},
            {"action": "free_requested", "addr": 8192, "size": 1024, "stream": 0,
             "time_us": 4, "frames": frames},
            {"action": "free_completed", "addr": 8192, "size": 1024, "stream": 0,
             "time_us": 5, "frames": frames},
            {"action": "oom", "addr": 0, "size": 1 << 40, "stream": 0, "time_us": 6,
             "device_free": 1 << 20, "frames": frames},
        ], []],
        "allocator_settings": {"max_split_size": -1},
    }
    return pickle.dumps(snap, protocol=proto)


def chrome_excerpts():
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "sample_traces", "*.trace.json.gz"))):
        doc = json.load(gzip.open(path))
        evs = doc["traceEvents"]
        keep, mem = [], 0
        for e in evs:
            if e.get("name") == "[memory]":
                if mem < 12:
                    keep.append(e)
                    mem += 1
            elif e.get("cat") in ("cpu_op", "user_annotation", "python_function") and len(keep) < 30:
                keep.append(e)
        name = os.path.basename(path).split(".")[0]
        obj = {"deviceProperties": doc.get("deviceProperties", [])[:1],
               "traceEvents": keep}
        out.append((name + ".obj.json", json.dumps(obj, separators=(",", ":")).encode()))
        out.append((name + ".arr.json", json.dumps(keep, separators=(",", ":")).encode()))
    return out


def main():
    small = [
        ("bare_mem.json", b'[{"ph":"i","name":"[memory]","pid":0,"tid":1,"ts":1,'
                          b'"args":{"Addr":16,"Bytes":100,"Total Allocated":100,'
                          b'"Total Reserved":2097152,"Device Type":1,"Device Id":0}}]'),
        ("nan_tokens.json", b'{"traceEvents":[{"ph":"i","name":"[memory]","pid":0,"tid":1,'
                            b'"ts":NaN,"args":{"Addr":16,"Bytes":inf,"Total Allocated":N/A,'
                            b'"Device Type":1,"Device Id":0}}]}'),
        ("oom.json", b'{"traceEvents":[{"ph":"i","name":"[OutOfMemory]","pid":0,"tid":1,'
                     b'"ts":5,"args":{"Bytes":4096,"Total Allocated":100,'
                     b'"Total Reserved":200,"Device Type":1,"Device Id":0}}]}'),
        ("truncated.json", b'[{"ph":"i","name":"[memory]","pid":0,"tid":1,"ts":1,'
                           b'"args":{"Addr":16,"Bytes":100,"Device Type":1,"Dev'),
    ]
    chrome = chrome_excerpts() + small
    for name, data in chrome:
        write("chrome", name, data)
        write("analyze", name, data)
    pickles = [("snap_p%d.pkl" % p, mini_snapshot(p)) for p in (2, 3, 4, 5)]
    pickles += [
        ("dict.pkl", pickle.dumps({"a": [1, 2.5, None, True, "x" * 300, 2 ** 70, -1]}, protocol=4)),
        ("shared.pkl", pickle.dumps([[1], [1]] * 3, protocol=2)),
        ("tuple.pkl", pickle.dumps((1, (2, 3), ()), protocol=3)),
    ]
    sgd = gzip.open(os.path.join(ROOT, "sample_traces", "train_sgd_momentum.snapshot.pickle.gz")).read()
    pickles.append(("train_sgd_momentum.pkl", sgd))
    for name, data in pickles:
        write("unpickle", name, data)
        write("analyze", name, data)
    for p in ("train_adamw.timeline.json.gz", "train_adamw.timeline.raw.json.gz"):
        raw = gzip.open(os.path.join(ROOT, "sample_traces", p)).read()
        doc = json.loads(raw)
        if isinstance(doc, list) and len(doc) == 2 and isinstance(doc[0], list) and doc and isinstance(doc[0][0], (int, float)) and isinstance(doc[1][0], list):
            doc = [doc[0][:20], doc[1][:20]]
        else:
            doc = doc[:40]
        write("analyze", p[:-3], json.dumps(doc, separators=(",", ":")).encode())
    write("analyze", "snap.json", json.dumps(pickle.loads(mini_snapshot(4))).encode())
    write("analyze", "snap_p4.pkl.gz", gzip.compress(mini_snapshot(4)))
    write("analyze", "bare_mem.json.gz", gzip.compress(small[0][1]))
    import base64
    html = b'<html><script>const data = {"base64": "' + base64.b64encode(mini_snapshot(4)) + b'"};</script></html>'
    write("analyze", "memory_viz.html", html)


if __name__ == "__main__":
    main()
