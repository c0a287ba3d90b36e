#!/usr/bin/env python3
"""Record the small *real* PyTorch memory traces that memcut's tests and README use.

Run with a Python that has torch (CPU is enough):

    /tmp/t/bin/python sample_traces/generate.py            # all workloads
    /tmp/t/bin/python sample_traces/generate.py kv_cache_decode   # just one

For every workload it writes, next to this script:

  <name>.trace.json.gz         Kineto Chrome trace (`prof.export_chrome_trace`) with `[memory]` events
  <name>.snapshot.pickle.gz    `torch.cuda._memory_viz._profile_to_snapshot(prof)`, pickle protocol 4;
                               its `alloc` entries carry PyTorch's own `category` (ground truth)

plus `train_adamw.timeline.json.gz` / `train_adamw.timeline.raw.json.gz` (`export_memory_timeline`)
and `ground_truth.json` (peak / category mix per snapshot, see `replay()` for the exact rules).

Neither CI nor memcut users have torch, so the outputs are committed; regenerate only when a
workload changes. Addresses and timestamps differ from run to run even with fixed seeds, so a
regeneration always produces a diff; that is expected.
"""

import collections
import gzip
import io
import json
import os
import pickle
import subprocess
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.checkpoint import checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# One intra-op thread keeps the op/temporary structure stable between runs and machines.
torch.set_num_threads(1)
# export_memory_timeline is deprecated in 2.15; the warning is noise here.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", message=".*export_memory_timeline.*")
# schedule(warmup=0) is deliberate: every step, including model construction, must be recorded.
warnings.filterwarnings("ignore", message=".*warmup.*")


# --------------------------------------------------------------------------- models


class Block(nn.Module):
    """Pre-LN GPT block, written out so the stacks show attention/MLP module names."""

    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def attn(self, x, past=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            # Growing KV cache: concatenation allocates a new, longer buffer every step
            # and frees the previous one -- the pattern memcut must recognise as kv_cache.
            pk, pv = past
            k = torch.cat([pk, k], dim=2)
            v = torch.cat([pv, v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        y = y.transpose(1, 2).reshape(b, t, d)
        return self.proj(y), (k, v)

    def forward(self, x, past=None):
        a, kv = self.attn(self.ln1(x), past)
        x = x + a
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x, kv


class TinyGPT(nn.Module):
    def __init__(self, vocab=512, d=128, heads=4, ff=512, layers=2, ctx=128, ckpt=False):
        super().__init__()
        self.ckpt = ckpt
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, past=None, start=0, last_only=False):
        t = idx.shape[1]
        pos = torch.arange(start, start + t)
        x = self.tok(idx) + self.pos(pos)
        new_past = []
        for i, blk in enumerate(self.blocks):
            if self.ckpt:
                # Non-reentrant checkpointing: activations inside the block are dropped after
                # forward and recomputed in backward.
                x, kv = checkpoint(blk, x, use_reentrant=False)
            else:
                x, kv = blk(x, None if past is None else past[i])
            new_past.append(kv)
        if last_only:  # generation needs only the next-token logits (like HF `logits_to_keep=1`)
            x = x[:, -1:]
        return self.head(self.ln(x)), new_past


def mlp():
    return nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )


def lm_batch(vocab=512, b=8, t=64):
    x = torch.randint(0, vocab, (b, t))
    y = torch.randint(0, vocab, (b, t))
    return x, y


def lm_step(model, opt, x, y):
    logits, _ = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad()


# --------------------------------------------------------------------------- workloads
# Each workload is a function taking a `prof_step` callback; it must call prof_step() after
# every profiled step so ProfilerStep#N ranges come from the real profiler schedule.


def w_train_adamw(run):
    torch.manual_seed(0)

    def body(prof_step):
        # Built inside the profiled region (ProfilerStep#0) so parameter allocations are traced.
        with record_function("## build_model ##"):
            model = TinyGPT()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        prof_step()
        for _ in range(2):
            x, y = lm_batch()
            lm_step(model, opt, x, y)
            prof_step()

    return run(body, steps=3, timeline=True)


def w_train_sgd_momentum(run):
    torch.manual_seed(1)

    def body(prof_step):
        model = mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        for _ in range(2):
            x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
            with record_function("## forward ##"):
                loss = F.cross_entropy(model(x), y)
            with record_function("## backward ##"):
                loss.backward()
            opt.step()
            opt.zero_grad()
            prof_step()

    return run(body, steps=2)


def w_grad_accum(run):
    torch.manual_seed(2)

    def body(prof_step):
        model = mlp()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        micro = 4
        for _ in range(micro):
            x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
            loss = F.cross_entropy(model(x), y) / micro
            loss.backward()  # grads accumulate in place after the first micro-batch
        opt.step()
        opt.zero_grad()
        prof_step()

    return run(body, steps=1)


def w_checkpointing(run):
    torch.manual_seed(3)

    def body(prof_step):
        model = TinyGPT(ckpt=True)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        x, y = lm_batch()
        lm_step(model, opt, x, y)
        prof_step()

    return run(body, steps=1)


def w_prebuilt_model(run):
    torch.manual_seed(4)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    # Warm-up step outside the profiler: parameters, optimizer state and (because zero_grad
    # is deferred to the profiled step) gradients all exist before recording starts.
    x, y = lm_batch()
    logits, _ = model(x)
    F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1)).backward()
    opt.step()

    def body(prof_step):
        opt.zero_grad()  # frees the warm-up gradients: frees of addresses never seen allocated
        x, y = lm_batch()
        lm_step(model, opt, x, y)
        prof_step()

    return run(body, steps=1)


def w_kv_cache_decode(run):
    torch.manual_seed(5)
    # Inference: weights are loaded before recording, as in a serving process.
    model = TinyGPT(ff=256, layers=2, ctx=64).eval()

    def body(prof_step):
        with torch.no_grad():
            prompt = torch.randint(0, 512, (8, 8))
            with record_function("## prefill ##"):
                logits, past = model(prompt, last_only=True)
            tok = logits[:, -1:].argmax(-1)
            pos = prompt.shape[1]
            for _ in range(16):
                with record_function("## decode ##"):
                    logits, past = model(tok, past=past, start=pos, last_only=True)
                tok = logits[:, -1:].argmax(-1)
                pos += 1
            del past
        prof_step()

    return run(body, steps=1)


WORKLOADS = {
    "train_adamw": (w_train_adamw, "TinyGPT (2 blocks, d=128) built inside the trace; 2 AdamW steps"),
    "train_sgd_momentum": (w_train_sgd_momentum, "MLP 256-512-512-10, 2 SGD(momentum=0.9) steps"),
    "grad_accum": (w_grad_accum, "MLP, 4 micro-batches of gradient accumulation, 1 AdamW step"),
    "checkpointing": (w_checkpointing, "TinyGPT (2 blocks) with checkpoint(use_reentrant=False), 1 Adam step"),
    "prebuilt_model": (w_prebuilt_model, "TinyGPT + AdamW built and warmed up before profiling; 1 step traced"),
    "kv_cache_decode": (w_kv_cache_decode, "TinyGPT (2 blocks) inference, batch 8, prefill 8 tokens + 16 decode steps, torch.cat KV cache"),
}


# --------------------------------------------------------------------------- recording


def gzip_bytes(data: bytes) -> bytes:
    """gzip with mtime 0 and no file name, so identical content gives identical bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
        g.write(data)
    return buf.getvalue()


def write_gz(rel_path: str, data: bytes) -> None:
    with open(os.path.join(REPO, rel_path), "wb") as f:
        f.write(gzip_bytes(data))


def make_runner(name):
    out = {}

    def run(body, steps, timeline=False):
        with profile(
            activities=[ProfilerActivity.CPU],
            profile_memory=True,
            record_shapes=True,
            with_stack=True,
            schedule=schedule(wait=0, warmup=0, active=steps, repeat=1),
        ) as prof:
            body(prof.step)

        rel = f"sample_traces/{name}"
        # Export uncompressed under its final name (Kineto stores the path as `traceName`),
        # then gzip deterministically ourselves.
        prof.export_chrome_trace(rel + ".trace.json")
        with open(os.path.join(REPO, rel + ".trace.json"), "rb") as f:
            trace_bytes = f.read()
        os.remove(os.path.join(REPO, rel + ".trace.json"))
        write_gz(rel + ".trace.json.gz", trace_bytes)

        snap = torch.cuda._memory_viz._profile_to_snapshot(prof)
        write_gz(rel + ".snapshot.pickle.gz", pickle.dumps(snap, protocol=4))

        if timeline:
            # Plain `.json` is the [times, sizes] form; `.raw.json.gz` is the event list.
            prof.export_memory_timeline(rel + ".timeline.json", device="cpu")
            with open(os.path.join(REPO, rel + ".timeline.json"), "rb") as f:
                tl = f.read()
            os.remove(os.path.join(REPO, rel + ".timeline.json"))
            write_gz(rel + ".timeline.json.gz", tl)
            tmp_raw = rel + ".tmp.raw.json.gz"
            prof.export_memory_timeline(tmp_raw, device="cpu")
            with gzip.open(os.path.join(REPO, tmp_raw), "rb") as f:
                raw = f.read()
            os.remove(os.path.join(REPO, tmp_raw))
            write_gz(rel + ".timeline.raw.json.gz", raw)
            out["timeline"] = (json.loads(tl), json.loads(raw))

        out["trace"] = json.loads(trace_bytes)
        out["snapshot"] = snap

    return run, out


# --------------------------------------------------------------------------- ground truth


def replay(snapshot, device_index):
    """Plain replay of one device trace, the rules `ground_truth.json` documents.

    - `alloc` opens an allocation (addr -> size, category), live bytes += size.
    - `free_completed` closes the open allocation at that address, live bytes -= its size.
      `free_requested` is ignored (in profile-derived snapshots it always directly precedes
      `free_completed`; nothing is pending on CPU).
    - A `free_completed` of an address with no open allocation is pre-existing memory (allocated
      before recording). It is NOT counted in `peak_bytes`; its size is added to
      `baseline_freed_bytes`. `active_allocated` blocks of this device in `segments` that no
      alloc of the trace left open are pre-existing and alive at the end: `baseline_live_bytes`
      (their `requested_size`, falling back to `size`).
    - The peak is the maximum of live bytes after an event, ties -> earliest; `peak_event_index`
      is the index in `device_traces[device_index]` of the event after which it is reached
      (-1 for an empty trace).
    - `memoryviz_*` repeat the computation the way pytorch.org/memory_viz (and
      scripts/replay_peak.py) draw it: all pre-existing bytes (freed + still live) count from
      the start and drop out at their free.
    """
    trace = snapshot["device_traces"][device_index]
    open_ = {}
    live = 0
    by_cat = collections.Counter()
    peak, peak_i, peak_cat = 0, -1, {}
    baseline_freed = 0
    for i, e in enumerate(trace):
        a = e["action"]
        if a == "alloc":
            open_[e["addr"]] = (e["size"], e.get("category", "unknown"))
            live += e["size"]
            by_cat[e.get("category", "unknown")] += e["size"]
        elif a == "free_completed":
            hit = open_.pop(e["addr"], None)
            if hit is None:
                baseline_freed += e["size"]
                continue
            live -= hit[0]
            by_cat[hit[1]] -= hit[0]
        else:
            continue
        if live > peak:
            peak, peak_i = live, i
            peak_cat = {k: v for k, v in by_cat.items() if v}
    baseline_live = 0
    for seg in snapshot["segments"]:
        if seg["device"] != device_index:
            continue
        # Profile-derived segments have no block addresses: rebuild them from the running offset.
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and b.get("address", addr) not in open_:
                baseline_live += b.get("requested_size", b["size"])
            addr += b["size"]
    # MemoryViz curve: start at all pre-existing bytes (category "preexisting": frees carry no
    # category), subtract a pre-existing allocation at its free.
    cur = baseline_freed + baseline_live
    mv_cat = collections.Counter({"preexisting": cur})
    mv_peak, mv_i, mv_peak_cat = cur, -1, dict(mv_cat)
    open_ = {}
    for i, e in enumerate(trace):
        a = e["action"]
        if a == "alloc":
            open_[e["addr"]] = (e["size"], e.get("category", "unknown"))
            cur += e["size"]
            mv_cat[e.get("category", "unknown")] += e["size"]
        elif a == "free_completed":
            size, cat = open_.pop(e["addr"], (e["size"], "preexisting"))
            cur -= size
            mv_cat[cat] -= size
        else:
            continue
        if cur > mv_peak:
            mv_peak, mv_i, mv_peak_cat = cur, i, {k: v for k, v in mv_cat.items() if v}
    return {
        "device_index": device_index,
        "events": len(trace),
        "peak_bytes": peak,
        "peak_event_index": peak_i,
        "live_at_peak_by_category": dict(sorted(peak_cat.items())),
        "baseline_freed_bytes": baseline_freed,
        "baseline_live_bytes": baseline_live,
        "memoryviz_peak_bytes": mv_peak,
        "memoryviz_peak_event_index": mv_i,
        "live_at_memoryviz_peak_by_category": dict(sorted(mv_peak_cat.items())),
    }


def cpu_device_index(snapshot):
    # _profile_to_snapshot puts the CPU last: index torch.cuda.device_count().
    return len(snapshot["device_traces"]) - 1


def mib(n):
    return f"{n / 2**20:.2f} MiB"


def main(argv):
    if not argv:
        # One process per workload: the CPU allocator's `Total Allocated` in `[memory]` events is
        # process-wide, so a fresh process keeps earlier workloads' leftovers out of each trace.
        for name in WORKLOADS:
            subprocess.run([sys.executable, os.path.abspath(__file__), name], check=True)
        return
    names = argv
    os.chdir(REPO)  # export paths below are repo-relative (they end up in `traceName`)
    gt_path = os.path.join(HERE, "ground_truth.json")
    ground_truth = {}
    if os.path.exists(gt_path):
        with open(gt_path) as f:
            ground_truth = json.load(f)
    for name in names:
        fn, desc = WORKLOADS[name]
        run, out = make_runner(name)
        fn(run)
        events = out["trace"]["traceEvents"]
        mem = [e for e in events if e.get("name") == "[memory]"]
        snap = out["snapshot"]
        dev = cpu_device_index(snap)
        allocs = [e for e in snap["device_traces"][dev] if e["action"] == "alloc"]
        gt = replay(snap, dev)
        gt["device"] = "cpu"
        gt["workload"] = desc
        ground_truth[name] = gt
        print(f"== {name}: {desc}")
        print(f"   trace events {len(events)}, [memory] events {len(mem)}, "
              f"snapshot device_traces {len(snap['device_traces'])} list(s), "
              f"cpu entries {gt['events']}, alloc entries {len(allocs)}")
        print(f"   peak {gt['peak_bytes']} B ({mib(gt['peak_bytes'])}) at entry {gt['peak_event_index']}; "
              f"baseline freed {gt['baseline_freed_bytes']} B, still live {gt['baseline_live_bytes']} B; "
              f"MemoryViz peak {gt['memoryviz_peak_bytes']} B at {gt['memoryviz_peak_event_index']}")
        total = gt["peak_bytes"] or 1
        mix = sorted(gt["live_at_peak_by_category"].items(), key=lambda kv: -kv[1])
        print("   category mix at peak: " + ", ".join(
            f"{k} {v} B ({100 * v / total:.1f}%)" for k, v in mix))
        if "timeline" in out:
            (times, sizes), raw = out["timeline"]
            print(f"   timeline: {len(times)} points x {len(sizes[0])} slots; raw: {len(raw)} rows, "
                  f"actions {sorted({r[1] for r in raw})}, category indexes {sorted({r[3] for r in raw})}")
    with open(gt_path, "w") as f:
        json.dump(dict(sorted(ground_truth.items())), f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
