#!/usr/bin/env python3
"""Record nn.MultiheadAttention in eval under no_grad (PyTorch's fast path: one
`aten::_native_multi_head_attention` call per layer, which reads `in_proj_weight`, `in_proj_bias`,
`out_proj.weight` and `out_proj.bias`), with the model built before recording, as a GPU reports
it: `Total Allocated` counts the weights made before recording (the matrix's `gpulike` copy).

    VENV/bin/python sample_traces/mha_eval/generate.py

Writes mha_eval.gpulike.trace.json.gz next to this script (gzip, mtime 0) and prints the bytes of
the weights made before recording: memcut must name them `parameter` from the operators' shapes.
"""

import gzip
import importlib.util
import json
import os
import re

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    spec = importlib.util.spec_from_file_location(
        "generate_matrix", os.path.join(HERE, "..", "matrix", "generate_matrix.py"))
    matrix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix)
    torch.manual_seed(71)
    torch.set_num_threads(1)
    d = 256

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.MultiheadAttention(d, 8, batch_first=True) for _ in range(3))
            self.head = nn.Linear(d, 10)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x, x, x, need_weights=False)[0]
            return self.head(x)

    model = Model().eval()
    x = torch.randn(4, 32, d)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    with torch.no_grad():
        model(x)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        with torch.no_grad():
            model(x).sum().item()
    path = os.path.join(HERE, "mha_eval.trace.json")
    prof.export_chrome_trace(path)
    with open(path, "rb") as f:
        raw = f.read()
    os.remove(path)
    n_memory = len(re.findall(rb'"name": "\[memory\]"', raw))
    # The input (made before recording too) is counted with the weights.
    out = matrix.gpulike(raw, weights + x.numel() * x.element_size(), n_memory)
    with open(os.path.join(HERE, "mha_eval.gpulike.trace.json.gz"), "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as g:
            g.write(out)
    print(json.dumps({"weights": weights, "input": x.numel() * x.element_size()}))


if __name__ == "__main__":
    main()
