#!/usr/bin/env python3
"""Record a model compiled with `torch.compile(backend="aot_eager")`, whose graphs run as FX
graph modules, with `torch.fx.experimental._config.enrich_profiler_metadata` on: their code is
then `fx_generated__<hash>.py`, a file named by a hash, and the profiler's Python frames show it
(`fx_generated__….py(4): forward`). memcut skips it when it names a site, as it skips Inductor's
generated code, so the name shows the program's own line. One warm training step (two steps run
before recording), with stacks, shapes and memory, in a fresh process.

    VENV/bin/python sample_traces/fx_graphs/generate.py

Writes aot_eager.trace.json.gz and aot_eager.snapshot.pickle.gz (`_profile_to_snapshot`) next to
this script (gzip, mtime 0).

A CUDA snapshot taken with `augment_with_fx_traces=True` maps each frame of generated code back
to the model's source (`fx_original_trace`); a snapshot made from a CPU profile cannot (its
Python frames carry the function's first line, not the line running), so that shape is tested on
a snapshot built in src/formats/snapshot/tests.rs (`fx_frames_name_the_model_source_line`).
"""

import gzip
import os
import pickle

import torch
import torch.fx.experimental._config as fx_config
import torch.nn as nn
from torch.cuda._memory_viz import _profile_to_snapshot
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.up(x)
        h = torch.nn.functional.gelu(h)
        return x + self.down(h)


class Model(nn.Module):
    def __init__(self, d=48, classes=7):
        super().__init__()
        self.blocks = nn.Sequential(Block(d), Block(d))
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        return self.head(self.blocks(x))


def write_gz(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as g:
            g.write(data)


def main():
    fx_config.enrich_profiler_metadata = True
    torch.manual_seed(3601)
    model = Model()
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(24, 48), torch.randint(0, 7, (24,))

    def step():
        loss = torch.nn.functional.cross_entropy(compiled(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    for _ in range(2):
        step()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        step()
    path = os.path.join(HERE, "aot_eager.trace.json")
    prof.export_chrome_trace(path)
    with open(path, "rb") as f:
        raw = f.read()
    os.remove(path)
    if b"fx_generated_" not in raw:
        raise SystemExit("no frame of FX-generated code in the trace: enrich_profiler_metadata had no effect")
    write_gz("aot_eager.trace.json.gz", raw)
    write_gz("aot_eager.snapshot.pickle.gz", pickle.dumps(_profile_to_snapshot(prof), protocol=4))
    print(f"torch {torch.__version__}: aot_eager.trace.json.gz ({len(raw)} B inflated), aot_eager.snapshot.pickle.gz")


if __name__ == "__main__":
    main()
