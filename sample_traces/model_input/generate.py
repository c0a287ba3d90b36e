#!/usr/bin/env python3
"""Record runs whose model input was made before recording, as a GPU reports them (`Total
Allocated` counts what existed before recording: the matrix's `gpulike` copy), and one control
whose input is made while recording. memcut must name the input `input` from the first
weight-reading operator's shapes (`inferred_model_input_read_by_first_operator`), and nothing in
the control. Shapes, seeds and models were not used to build that rule (mha_eval was).

    VENV/bin/python sample_traces/model_input/generate.py

Writes <run>.gpulike.trace.json.gz next to this script (gzip, mtime 0) and expected.json: per run,
the bytes of the input made before recording (0 for the control). Each run is recorded in a fresh
process (on CPU the profiler's `Total Allocated` keeps counting across profiles in one process).
"""

import gzip
import importlib.util
import json
import os
import re
import subprocess
import sys

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def record(matrix, name, step, before_bytes):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        step()
    path = os.path.join(HERE, name + ".trace.json")
    prof.export_chrome_trace(path)
    with open(path, "rb") as f:
        raw = f.read()
    os.remove(path)
    n_memory = len(re.findall(rb'"name": "\[memory\]"', raw))
    out = matrix.gpulike(raw, before_bytes, n_memory)
    with open(os.path.join(HERE, name + ".gpulike.trace.json.gz"), "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as g:
            g.write(out)


RUNS = ["mlp_infer", "cnn_infer", "tokens_infer", "mlp_train_warm", "control_input_recorded"]


def run(which):
    spec = importlib.util.spec_from_file_location(
        "generate_matrix", os.path.join(HERE, "..", "matrix", "generate_matrix.py"))
    matrix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix)
    torch.set_num_threads(1)
    expected = {}
    if which == "mlp_infer":
        mlp_infer(matrix, expected)
    elif which == "cnn_infer":
        cnn_infer(matrix, expected)
    elif which == "tokens_infer":
        tokens_infer(matrix, expected)
    elif which == "mlp_train_warm":
        mlp_train_warm(matrix, expected)
    else:
        control(matrix, expected)
    print(json.dumps(expected))


def mlp_infer(matrix, expected):

    # An MLP in inference, its batch made before recording.
    torch.manual_seed(501)
    mlp = nn.Sequential(nn.Linear(300, 512), nn.ReLU(), nn.Linear(512, 7)).eval()
    x = torch.randn(16, 300)
    with torch.no_grad():
        mlp(x)

    def mlp_step():
        with torch.no_grad():
            mlp(x).sum().item()
    record(matrix, "mlp_infer", mlp_step, nbytes(mlp.parameters()) + nbytes([x]))
    expected["mlp_infer"] = nbytes([x])


def cnn_infer(matrix, expected):
    # A small CNN in inference (a convolution reads the images first).
    torch.manual_seed(502)
    cnn = nn.Sequential(nn.Conv2d(3, 12, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(12, 5)).eval()
    images = torch.randn(8, 3, 40, 40)
    with torch.no_grad():
        cnn(images)

    def cnn_step():
        with torch.no_grad():
            cnn(images).sum().item()
    record(matrix, "cnn_infer", cnn_step, nbytes(cnn.parameters()) + nbytes([images]))
    expected["cnn_infer"] = nbytes([images])


def tokens_infer(matrix, expected):
    # A token model: the embedding reads the token ids (int64) first.
    torch.manual_seed(503)
    lm = nn.Sequential(nn.Embedding(1000, 96), nn.Linear(96, 96), nn.GELU(), nn.Linear(96, 1000)).eval()
    ids = torch.randint(0, 1000, (6, 40))
    with torch.no_grad():
        lm(ids)

    def lm_step():
        with torch.no_grad():
            lm(ids).sum().item()
    record(matrix, "tokens_infer", lm_step, nbytes(lm.parameters()) + nbytes([ids]))
    expected["tokens_infer"] = nbytes([ids])


def mlp_train_warm(matrix, expected):
    # A training step recorded warm: model, optimizer state and the batch made before.
    torch.manual_seed(504)
    net = nn.Sequential(nn.Linear(200, 384), nn.Tanh(), nn.Linear(384, 3))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=False)
    xb = torch.randn(24, 200)
    yb = torch.randint(0, 3, (24,))
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(net(xb), yb).backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
    state = [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]

    def train_step():
        nn.functional.cross_entropy(net(xb), yb).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    before = nbytes(net.parameters()) + nbytes(state) + nbytes([xb, yb])
    record(matrix, "mlp_train_warm", train_step, before)
    expected["mlp_train_warm"] = nbytes([xb])


def control(matrix, expected):
    # Control: the batch is made while recording; nothing from before is an input.
    torch.manual_seed(505)
    ctl = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 4)).eval()

    def control_step():
        with torch.no_grad():
            ctl(torch.randn(10, 128)).sum().item()
    record(matrix, "control_input_recorded", control_step, nbytes(ctl.parameters()))
    expected["control_input_recorded"] = 0


def main():
    if len(sys.argv) > 1:
        run(sys.argv[1])
        return
    expected = {}
    for which in RUNS:
        out = subprocess.run([sys.executable, __file__, which], check=True, capture_output=True, text=True)
        expected.update(json.loads(out.stdout.strip().splitlines()[-1]))
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")
    print(json.dumps(expected))


if __name__ == "__main__":
    main()
