#!/usr/bin/env python3
"""Writes the snapshot reader's fixtures in this directory (deterministic):

    python3 src/formats/snapshot/testdata/make_fixtures.py

shared_frames.pickle: a snapshot whose live block and alloc entry share one
frames list, as real dumps do through the memo (`pickle.dumps`, protocol 4).
"""
import os, pickle

HERE = os.path.dirname(os.path.abspath(__file__))

frames = [{"filename": "model.py", "line": 3, "name": "forward"},
          {"filename": "train.py", "line": 9, "name": "main"}]
SHARED_FRAMES = {
    "segments": [{"device": 0, "address": 4096, "total_size": 1024, "blocks": [
        {"address": 4096, "size": 512, "requested_size": 500, "state": "active_allocated",
         "frames": frames},
        {"address": 4608, "size": 512, "requested_size": 0, "state": "inactive", "frames": []}]}],
    "device_traces": [[{"action": "alloc", "addr": 4096, "size": 500, "stream": 0,
                        "frames": frames}]],
}

with open(os.path.join(HERE, "shared_frames.pickle"), "wb") as f:
    f.write(pickle.dumps(SHARED_FRAMES, protocol=4))
