#!/usr/bin/env python3
"""Writes the unpickler's CPython fixtures in this directory (deterministic):

    python3 src/formats/pickle/testdata/make_fixtures.py

cpython_pN.pickle is `pickle.dumps(OBJ, protocol=N)` for N = 2..5 (CPython
3.11): every data opcode PyTorch's pickler emits, a shared list, a long
string and integers past 64 bits. `tests.rs` checks what memcut reads.
"""
import os, pickle

HERE = os.path.dirname(os.path.abspath(__file__))

s = [1, 'x']
OBJ = {'a': [1, 2.5, None, True, False, 'héllo ☃', (1, 2), (), (7,),
             (1, 2, 3), (1, 2, 3, 4), 2**64 - 1, -2**70, 300, 70000, -5, -2**31, 2**31,
             2**63 - 1, -2**63],
       'b': {'x': 'y' * 256}, 's1': s, 's2': s, 'e': {}, 'one': [{'action': 'alloc'}]}

for protocol in (2, 3, 4, 5):
    with open(os.path.join(HERE, f"cpython_p{protocol}.pickle"), "wb") as f:
        f.write(pickle.dumps(OBJ, protocol=protocol))
