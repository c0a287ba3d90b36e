#!/usr/bin/env python3
"""Record the multi-rank test set: one real training step of a 4-process
DDP job (gloo, CPU), each rank profiled with `profile_memory=True`.

    /work/venv/torch/bin/python tests/data/ranks/record_ddp.py

Writes `rank_step.<R>.pt.trace.json.gz` for R = 0..3 next to this script.
Kineto writes each rank's `distributedInfo` (backend, rank, world_size)
into its trace, which is what `memcut batch` groups ranks by; the file
names deliberately carry no rank number.

The imbalance is real, not edited in: the data loader buckets sequences
by length and rank 3 drew the long bucket (3x the tokens of the others),
so its activations at the peak are about three times theirs while its
parameters, gradients and optimizer state are the same as every rank's.
"""

import gzip
import os
import socket
import sys
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 4
SEQ = {0: 32, 1: 32, 2: 32, 3: 96}  # tokens per sample: rank 3 drew the long bucket
BATCH, D, FF, LAYERS = 4, 64, 256, 2

warnings.filterwarnings("ignore", message=".*warmup.*")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, FF)
        self.fc2 = nn.Linear(FF, D)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.ln(x))))


def worker(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        # Inside the profiler, so that parameters are in the trace too.
        model = DDP(nn.Sequential(*[Block() for _ in range(LAYERS)], nn.Linear(D, D)))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(rank)
        x = torch.randn(BATCH, SEQ[rank], D, generator=g)
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    dist.barrier()
    name = f"rank_step.{rank}.pt.trace.json"
    path = os.path.join(HERE, name)
    prof.export_chrome_trace(path)
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    # Deterministic gzip (mtime 0, no file name).
    with open(path + ".gz", "wb") as f:
        f.write(gzip.compress(data, compresslevel=9, mtime=0))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    mp.spawn(worker, args=(free_port(),), nprocs=WORLD, join=True)
    print("wrote", ", ".join(f"rank_step.{r}.pt.trace.json.gz" for r in range(WORLD)), file=sys.stderr)
