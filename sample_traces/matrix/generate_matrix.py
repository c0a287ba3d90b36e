#!/usr/bin/env python3
"""Record the *recording matrix* of issue 11 and PyTorch's ground truth for every run.

    /work/venv/torch/bin/python sample_traces/matrix/generate_matrix.py            # the committed set
    /work/venv/torch/bin/python sample_traces/matrix/generate_matrix.py \\
        --seed 1000 --variant heldout --out /tmp/heldout                          # a fresh held-out set
    ... --workloads adamw,cnn --starts warm                                      # a subset

Matrix: workloads x {cold, warm} x {stack, nostack} (+ a few `bare` runs), one fresh process per run.

- cold: model and optimizer are built inside the recorded step (`## build ##`), then one step.
- warm: model built (and, for training, AdamW state made by real steps) before recording; the
  profiler's schedule is `wait=1, warmup=1, active=1`, so the recorded step is the third one
  (`ProfilerStep#2`), the way people record "from step N".
- stack:   `profile_memory=True, record_shapes=True, with_stack=True` (what PyTorch's memory
           profiler needs; the only mode that gives a `_profile_to_snapshot` snapshot).
- nostack: `profile_memory=True, record_shapes=True` (the profiler's default `with_stack=False`).
- bare:    `profile_memory=True` only: no stacks, no shapes.

Per run, under --out: `<run>.trace.json.gz` (Chrome trace as exported), `<run>.gpulike.trace.json.gz`
(the same trace as a GPU reports it, see `gpulike()`), `<run>.snapshot.pickle.gz` (stack runs only)
and `<run>.truth.json.gz` (PyTorch's categories and peaks, see README.md "Ground truth").

PyTorch's memory profiler refuses profiles recorded without stacks or shapes, and its categories
need the Python tracer (optimizer state, inputs). The truth of a nostack/bare run therefore comes from
its `stack` twin (same workload, start, seed and variant, recorded in another fresh process): the two
runs make the same `[memory]` events in the same order (checked: every event's size, and the pairing
of allocations with frees), so the truth carries over event by event, with the run's own addresses.
"""

import argparse
import collections
import decimal
import gzip
import io
import json
import os
import pickle
import platform
import re
import subprocess
import sys
import types
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))

WORKLOADS = {
    "adamw": "TinyLM (pre-LN transformer), AdamW foreach=False (single-tensor)",
    "sgd_momentum": "MLP, SGD(momentum=0.9)",
    "adamw_foreach": "MLP, AdamW foreach=True (multi-tensor intermediates)",
    "grad_accum": "MLP, 3 micro-batches accumulating .grad, then AdamW",
    "cnn": "small CNN (2 conv + batch norm), Adam: conv backward workspaces",
    "hf_train": "transformers LlamaForCausalLM from a tiny LlamaConfig, AdamW, loss from labels",
    "hf_generate": "transformers GPT2LMHeadModel from a tiny GPT2Config, generate(use_cache=True), greedy",
    "inference": "TinyLM forward under torch.inference_mode()",
    # Issue 32's shapes (added after the first eight; a workload's seed is its index, so the
    # first eight keep theirs).
    "hf_static": "transformers LlamaForCausalLM from a tiny LlamaConfig, generate(cache_implementation='static'), greedy (StaticCache)",
    "tied": "TinyLM with its output head tied to the token embedding, forward under torch.inference_mode()",
    "mha_eval": "nn.MultiheadAttention layers and a head in eval under torch.inference_mode() (the fast path, aten::_native_multi_head_attention)",
    "ddp": "MLP in two-rank gloo DistributedDataParallel (rank 0 recorded, rank 1 a peer process), AdamW",
    "ddp_bucket_view": "the same with DistributedDataParallel(gradient_as_bucket_view=True): gradients are views of the buckets",
    "compiled": "TinyLM compiled with torch.compile (CPU Inductor), AdamW; warm only (compiled in the unrecorded steps)",
    # Added in the thirteenth session, last, so that every workload before it keeps its seed.
    "compiled_aot": "TinyLM compiled with torch.compile(backend='aot_eager') and FX's enrich_profiler_metadata "
                    "(graphs run as FX modules, code in fx_generated__<hash>.py), AdamW; warm only",
    "ddp_buckets": "the DDP MLP with bucket_cap_mb=0.1: several gradient buckets, one all-reduce each",
}
# Workloads recorded from some starts only (a cold torch.compile would record the compiler).
ONLY_STARTS = {"compiled": ("warm",), "compiled_aot": ("warm",)}
DDP = ("ddp", "ddp_bucket_view", "ddp_buckets")
STARTS = ("cold", "warm")
# Bare runs (no stacks, no shapes) recorded besides stack/nostack: the profiler's defaults + memory.
BARE = (("adamw", "warm"), ("hf_train", "warm"), ("inference", "warm"))

VARIANTS = {
    "base": {
        "lm": dict(vocab=256, d=64, heads=4, ff=256, layers=2, ctx=64), "lm_batch": (4, 32),
        "mlp": (128, 256, 256, 10), "mlp_batch": 32, "micro": 3,
        "cnn": (8, 16, 10), "cnn_batch": (8, 16),
        "llama": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64),
        "hf_batch": (2, 16),
        "gpt2": dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64),
        "gen": (2, 8, 3),  # batch, prompt tokens, new tokens
        "mha": (64, 4, 2), "mha_batch": (4, 24),  # d, heads, layers; batch, tokens
    },
    "heldout": {
        "lm": dict(vocab=320, d=96, heads=6, ff=320, layers=3, ctx=64), "lm_batch": (3, 24),
        "mlp": (160, 320, 192, 12), "mlp_batch": 24, "micro": 2,
        "cnn": (12, 20, 7), "cnn_batch": (6, 20),
        "llama": dict(vocab_size=320, hidden_size=96, intermediate_size=160, num_hidden_layers=3,
                      num_attention_heads=6, num_key_value_heads=3, max_position_embeddings=64),
        "hf_batch": (3, 12),
        "gpt2": dict(vocab_size=320, n_embd=96, n_layer=3, n_head=6, n_positions=64),
        "gen": (3, 6, 5),
        "mha": (96, 6, 3), "mha_batch": (3, 20),
    },
    # Recorded once at the end of a round of classifier work, with a seed not used before, as
    # the set nothing was tuned on (issue 11: "record a fresh set with new seeds and shapes").
    "fresh": {
        "lm": dict(vocab=384, d=80, heads=5, ff=288, layers=4, ctx=48), "lm_batch": (5, 20),
        "mlp": (96, 384, 128, 7), "mlp_batch": 40, "micro": 4,
        "cnn": (6, 24, 9), "cnn_batch": (7, 24),
        "llama": dict(vocab_size=384, hidden_size=80, intermediate_size=224, num_hidden_layers=2,
                      num_attention_heads=5, num_key_value_heads=1, max_position_embeddings=64),
        "hf_batch": (2, 20),
        "gpt2": dict(vocab_size=384, n_embd=80, n_layer=4, n_head=5, n_positions=64),
        "gen": (4, 10, 4),
        "mha": (80, 5, 2), "mha_batch": (5, 16),
    },
}

# Issue 32's set nothing was tuned on: recorded after its classifier work, seed 3200.
VARIANTS["fresh32"] = {
    "lm": dict(vocab=288, d=112, heads=7, ff=224, layers=3, ctx=40), "lm_batch": (3, 28),
    "mlp": (112, 288, 160, 9), "mlp_batch": 28, "micro": 3,
    "cnn": (10, 14, 6), "cnn_batch": (5, 18),
    "llama": dict(vocab_size=288, hidden_size=112, intermediate_size=192, num_hidden_layers=3,
                  num_attention_heads=7, num_key_value_heads=7, max_position_embeddings=64),
    "hf_batch": (3, 14),
    "gpt2": dict(vocab_size=288, n_embd=112, n_layer=3, n_head=7, n_positions=64),
    "gen": (3, 7, 6),
    "mha": (112, 7, 3), "mha_batch": (3, 20),
}

# Recorded at the end of the seventh session, after the warm snapshots' gradients were read
# from backward's in-place adds: seed 3400, not tuned on.
VARIANTS["fresh33"] = {
    "lm": dict(vocab=320, d=96, heads=4, ff=256, layers=3, ctx=44), "lm_batch": (4, 22),
    "mlp": (104, 320, 144, 6), "mlp_batch": 32, "micro": 3,
    "cnn": (8, 16, 7), "cnn_batch": (6, 20),
    "llama": dict(vocab_size=320, hidden_size=96, intermediate_size=176, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64),
    "hf_batch": (2, 16),
    "gpt2": dict(vocab_size=320, n_embd=96, n_layer=3, n_head=4, n_positions=64),
    "gen": (3, 8, 5),
    "mha": (96, 4, 3), "mha_batch": (4, 24),
}

# Recorded at the start of the thirteenth session, after the classifier changes of sessions 8-12
# (DDP buckets, parameters per size, the model input from before recording): seed 3600, shapes
# never used before, not tuned on.
VARIANTS["fresh36"] = {
    "lm": dict(vocab=272, d=80, heads=5, ff=240, layers=3, ctx=48), "lm_batch": (5, 20),
    "mlp": (120, 264, 176, 8), "mlp_batch": 26, "micro": 4,
    "cnn": (9, 13, 6), "cnn_batch": (7, 16),
    "llama": dict(vocab_size=272, hidden_size=80, intermediate_size=168, num_hidden_layers=3,
                  num_attention_heads=5, num_key_value_heads=5, max_position_embeddings=64),
    "hf_batch": (2, 15),
    "gpt2": dict(vocab_size=272, n_embd=80, n_layer=2, n_head=5, n_positions=64),
    "gen": (2, 7, 4),
    "mha": (80, 5, 2), "mha_batch": (3, 26),
}

# Recorded once at the end of the session after fresh32 had been looked at: seed 3300.
VARIANTS["fresh32b"] = {
    "lm": dict(vocab=352, d=72, heads=3, ff=200, layers=2, ctx=36), "lm_batch": (6, 18),
    "mlp": (88, 200, 232, 5), "mlp_batch": 20, "micro": 2,
    "cnn": (7, 11, 5), "cnn_batch": (4, 22),
    "llama": dict(vocab_size=352, hidden_size=72, intermediate_size=136, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64),
    "hf_batch": (2, 18),
    "gpt2": dict(vocab_size=352, n_embd=72, n_layer=2, n_head=3, n_positions=64),
    "gen": (2, 9, 5),
    "mha": (72, 3, 4), "mha_batch": (2, 30),
}

# Where the truth departs from PyTorch's label (README "Adjusted labels"); PyTorch's category
# names are written in memcut's spelling (lower case; None = "unknown").
STEP_REASON = "allocated and freed inside one {} range (issue 11 section 3)"
CACHE_REASON = "allocated by the Hugging Face cache ({}) (issue 11 section 4)"
OP_REASON = ("allocated and freed within one call of {}: PyTorch's own definition of temporary, which it "
             "applies only to allocations it can tie to a tensor (issue 11 section 2)")
CACHE_FILE = "transformers/cache_utils.py"
COMPILED_GRAPH = ("CompiledFunction", "## Call CompiledFxGraph")  # CompiledFunctionBackward too
GRAPH_REASON = ("allocated inside a compiled graph's call, which makes neither parameters nor inputs (those exist "
                "before the graph runs): PyTorch's profiler does not see the data flow inside the graph and labels "
                "the forward graph's saved buffers 'parameter' or 'input'; the truth does not know (issue 32)")
SAVED_REASON = ("allocated by a compiled graph's forward (inside CompiledFunction) and freed by its backward "
                "(inside CompiledFunctionBackward): saved for backward, PyTorch's own definition of an activation; "
                "PyTorch's profiler does not see the data flow inside the graph and labels it 'parameter' or "
                "'input', or leaves it unlabelled (issue 32)")
PARAM_REASON = ("its storage is one of the model's parameters (model.parameters() at the end of the run), which "
                "PyTorch labels otherwise: the MHA fast path's out_proj is an 'input' to it (issue 32)")


def run_name(workload, start, mode):
    return f"{workload}.{start}.{mode}"


# =========================================================================== recording (child)


def record(spec, peer=False):
    """One run in this (fresh) process: record, export, and for stack runs compute the truth.

    `peer`: rank 1 of a DDP run, which runs the same steps without a profiler."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    cfg = VARIANTS[spec["variant"]]
    torch.manual_seed(spec["seed"])

    class Block(nn.Module):
        def __init__(self, d, heads, ff):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, ff), nn.Linear(ff, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class TinyLM(nn.Module):
        def __init__(self, vocab, d, heads, ff, layers, ctx, tied=False):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
            self.blocks = nn.ModuleList(Block(d, heads, ff) for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
            if tied:
                self.head.weight = self.tok.weight

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    class MhaNet(nn.Module):
        def __init__(self, d, heads, layers):
            super().__init__()
            self.layers = nn.ModuleList(nn.MultiheadAttention(d, heads, batch_first=True)
                                        for _ in range(layers))
            self.head = nn.Linear(d, 10)

        def forward(self, x):
            for layer in self.layers:
                x = layer(x, x, x, need_weights=False)[0]
            return self.head(x)

    def mlp():
        a, b, c, n = cfg["mlp"]
        return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, c), nn.ReLU(), nn.Linear(c, n))

    def cnn():
        c1, c2, n = cfg["cnn"]
        return nn.Sequential(
            nn.Conv2d(3, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c2, n))

    def lm_loss(model):
        b, t = cfg["lm_batch"]
        x, y = torch.randint(0, cfg["lm"]["vocab"], (2, b, t))
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())

    def mlp_loss(model, scale=1.0):
        x = torch.randn(cfg["mlp_batch"], cfg["mlp"][0])
        y = torch.randint(0, cfg["mlp"][-1], (cfg["mlp_batch"],))
        return F.cross_entropy(model(x), y) * scale

    def cnn_loss(model):
        b, side = cfg["cnn_batch"]
        x, y = torch.randn(b, 3, side, side), torch.randint(0, cfg["cnn"][-1], (b,))
        return F.cross_entropy(model(x), y)

    def hf_loss(model):
        b, t = cfg["hf_batch"]
        ids = torch.randint(0, cfg["llama"]["vocab_size"], (b, t))
        return model(input_ids=ids, labels=ids).loss

    if spec["workload"] in DDP:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        if not peer:
            peer_proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--peer",
                                          json.dumps(spec)])
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{spec['port']}",
                                rank=1 if peer else 0, world_size=2)

        def ddp_mlp():
            small = {"bucket_cap_mb": 0.1} if spec["workload"] == "ddp_buckets" else {}
            return DistributedDataParallel(mlp(), gradient_as_bucket_view=spec["workload"] == "ddp_bucket_view",
                                           **small)

    if spec["workload"] in ("hf_train", "hf_generate", "hf_static"):
        # Imported before recording, as a script does at its top: transformers' lazy import
        # machinery inside the profiler would add ~1M Python events to a stack trace.
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
        transformers.logging.set_verbosity_error()

        # Configs hold no tensors: made before recording too (~3K Python events fewer).
        llama_config, gpt2_config = LlamaConfig(**cfg["llama"]), GPT2Config(**cfg["gpt2"])

    def llama():
        return LlamaForCausalLM(llama_config)

    def gpt2():
        return GPT2LMHeadModel(gpt2_config).eval()

    def compiled_lm():
        return torch.compile(TinyLM(**cfg["lm"]))

    def compiled_aot_lm():
        import torch.fx.experimental._config as fx_config
        fx_config.enrich_profiler_metadata = True
        return torch.compile(TinyLM(**cfg["lm"]), backend="aot_eager")

    adamw = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, foreach=False)  # noqa: E731
    train = {  # workload: (model, optimizer, loss, micro-batches)
        "adamw": (lambda: TinyLM(**cfg["lm"]), adamw, lm_loss, 1),
        "sgd_momentum": (mlp, lambda m: torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9,
                                                        foreach=False), mlp_loss, 1),
        "adamw_foreach": (mlp, lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3, foreach=True),
                          mlp_loss, 1),
        "grad_accum": (mlp, adamw, lambda m: mlp_loss(m, 1 / cfg["micro"]), cfg["micro"]),
        "cnn": (cnn, lambda m: torch.optim.Adam(m.parameters(), lr=1e-3, foreach=False), cnn_loss, 1),
        "hf_train": (llama, adamw, hf_loss, 1),
        "ddp": (lambda: ddp_mlp(), adamw, mlp_loss, 1),
        "ddp_bucket_view": (lambda: ddp_mlp(), adamw, mlp_loss, 1),
        "ddp_buckets": (lambda: ddp_mlp(), adamw, mlp_loss, 1),
        "compiled": (compiled_lm, adamw, lm_loss, 1),
        "compiled_aot": (compiled_aot_lm, adamw, lm_loss, 1),
    }
    state = {}

    def build():
        w = spec["workload"]
        if w in train:
            make_model, make_opt, _, _ = train[w]
            state["model"] = make_model()
            state["opt"] = make_opt(state["model"])
        elif w == "hf_generate":
            state["model"] = gpt2()
        elif w == "hf_static":
            state["model"] = llama().eval()
        elif w == "mha_eval":
            state["model"] = MhaNet(*cfg["mha"]).eval()
        else:
            state["model"] = TinyLM(**cfg["lm"], tied=w == "tied").eval()

    def step():
        w, model = spec["workload"], state["model"]
        if w in train:
            _, _, loss_fn, micro = train[w]
            for _ in range(micro):
                loss_fn(model).backward()
            state["opt"].step()
            state["opt"].zero_grad()
        elif w in ("hf_generate", "hf_static"):
            b, prompt, new = cfg["gen"]
            vocab = cfg["gpt2" if w == "hf_generate" else "llama"]["vocab_size"]
            ids = torch.randint(0, vocab, (b, prompt))
            extra = {"cache_implementation": "static"} if w == "hf_static" else {}
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                     min_new_tokens=new, do_sample=False, use_cache=True, pad_token_id=0,
                                     **extra)
            del out
        elif w == "mha_eval":
            b, t = cfg["mha_batch"]
            with torch.inference_mode():
                out = model(torch.randn(b, t, cfg["mha"][0]))
                del out
        else:
            b, t = cfg["lm_batch"]
            with torch.inference_mode():
                logits = model(torch.randint(0, cfg["lm"]["vocab"], (b, t)))
                del logits

    stack = spec["mode"] == "stack"
    shapes = spec["mode"] in ("stack", "nostack")
    cold = spec["start"] == "cold"
    if peer:  # the same collectives as rank 0, unrecorded
        build()
        for _ in range(1 if cold else 3):
            step()
        dist.barrier()  # rank 0 is still writing its profile: leave together
        dist.destroy_process_group()
        return
    if not cold:
        build()
    sched = schedule(wait=0 if cold else 1, warmup=0 if cold else 1, active=1, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=shapes,
                 with_stack=stack, schedule=sched) as prof:
        for _ in range(1 if cold else 3):
            if cold:
                with record_function("## build ##"):
                    build()
            step()
            prof.step()

    if spec["workload"] in DDP:
        dist.barrier()
        dist.destroy_process_group()
        if peer_proc.wait():
            raise SystemExit("the DDP peer (rank 1) failed")
    os.chdir(spec["work"])
    name = spec["name"]
    prof.export_chrome_trace(name + ".trace.json")  # relative: Kineto stores it as traceName
    model = state["model"]
    facts = {
        "parameter_addrs": sorted({p.untyped_storage().data_ptr() for p in model.parameters()}),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in model.buffers()),
        "optimizer_state_bytes": sum(
            t.numel() * t.element_size() for s in state["opt"].state.values()
            for t in s.values() if torch.is_tensor(t)) if "opt" in state else 0,
    }
    work = {"facts": facts}
    if stack:
        from torch.cuda._memory_viz import _profile_to_snapshot
        mp = prof._memory_profile()
        snap = _profile_to_snapshot(types.SimpleNamespace(_memory_profile=lambda: mp))
        with open(name + ".snapshot.pickle", "wb") as f:
            pickle.dump(snap, f, protocol=4)
        prof.export_memory_timeline(name + ".timeline.json", device="cpu")
        with open(name + ".timeline.json") as f:
            exported = json.load(f)
        os.remove(name + ".timeline.json")
        work["profile"] = memory_profile_facts(mp, exported)
    else:
        try:
            prof._memory_profile()
            work["snapshot_refused"] = None
        except ValueError as e:  # PyTorch's own check; the reason goes into the README
            work["snapshot_refused"] = str(e)
    with open(name + ".work.json", "w") as f:
        json.dump(work, f)


def memory_profile_facts(mp, exported):
    """Everything the truth needs from PyTorch's memory profiler, in plain data (times in ns)."""
    from torch._C._profiler import _EventType
    from torch.profiler._memory_profiler import Action, TensorKey

    def cat(key, version):
        c = mp._categories.get(key, version) if isinstance(key, TensorKey) else None
        return c.name.lower() if c is not None else "unknown"

    # Allocation events of the op tree are the Chrome trace's [memory] events. For each: the
    # operator call it happened in, as PyTorch's data flow graph delimits calls (its leaf events:
    # the outermost op with an ATen schema, or an autograd backward function), and the innermost
    # Python frame of the HF cache it was made under, if any.
    leaf_ops = {e.id: e.name for e in mp._data_flow_graph.leaf_events if e.tag == _EventType.TorchOp}
    allocs = {}
    for e in mp._op_tree.dfs():
        if e.typed[0] == _EventType.Allocation:
            f = e.typed[1]
            k = (e.start_time_ns, f.ptr, f.alloc_size)
            if k in allocs:
                raise SystemExit(f"two allocation events at {k}")
            # compiled: None outside a compiled graph; inside one, which autograd function
            # runs it, innermost ("CompiledFunction": forward, "CompiledFunctionBackward"), or
            # "graph" (a graph called without one: inference).
            cache, op, compiled, parent = None, None, None, e.parent
            while parent:
                if cache is None and parent.tag in (_EventType.PyCall, _EventType.PyCCall) \
                        and CACHE_FILE in parent.name:
                    cache = parent.name
                if op is None and parent.id in leaf_ops:
                    op = [parent.id, parent.name]
                if parent.name in ("CompiledFunction", "CompiledFunctionBackward"):
                    compiled = compiled if compiled not in (None, "graph") else parent.name
                elif compiled is None and parent.name.startswith(COMPILED_GRAPH):
                    compiled = "graph"
                parent = parent.parent
            allocs[k] = (TensorKey.from_allocation(f), cache, op, compiled)
    key_ids = {}  # TensorKey -> small int
    versions = collections.defaultdict(list)  # key id -> [(t_ns, version, raw category)]
    preexisting = []  # [key id, size]
    for t, action, (key, version), size in mp.timeline:
        if not isinstance(key, TensorKey):
            if action == Action.PREEXISTING:
                preexisting.append([None, abs(size), None])
            continue
        kid = key_ids.setdefault(key, len(key_ids))
        if action in (Action.CREATE, Action.PREEXISTING):
            versions[kid].append([t, 0, cat(key, 0)])
            if action == Action.PREEXISTING:
                preexisting.append([kid, size, key.storage.ptr])
        elif action == Action.INCREMENT_VERSION:
            versions[kid].append([t, version + 1, cat(key, version + 1)])
    steps = [[e.start_time_ns, e.start_time_ns + e.duration_time_ns, e.name]
             for e in mp._op_tree.dfs() if e.name.startswith("Optimizer.step#")]
    # The snapshot, entry by entry, as _profile_to_snapshot builds it from the same timeline.
    snap_entries = []  # [action, key id, version]
    for _t, action, (key, version), _size in mp.timeline:
        if not isinstance(key, TensorKey):
            continue
        kid = key_ids[key]
        if action == Action.CREATE:
            snap_entries.append(["alloc", kid, 0])
        elif action == Action.DESTROY:
            snap_entries.append(["free", kid, version])
        elif action == Action.INCREMENT_VERSION:
            snap_entries += [["free", kid, version], ["alloc", kid, version + 1]]
    return {
        "allocations": [[t, ptr, size, key_ids.get(k) if k is not None else None, cache, op, compiled]
                        for (t, ptr, size), (k, cache, op, compiled) in sorted(allocs.items(),
                                                                               key=lambda kv: kv[0])],
        "versions": {str(k): sorted(v) for k, v in versions.items()},
        "preexisting": preexisting,
        "optimizer_steps": steps,
        "snapshot_entries": snap_entries,
        "exported_timeline": exported,
    }


# =========================================================================== truth (parent)


def load_trace(path):
    with open(path, "rb") as f:
        raw = f.read()
    doc = json.loads(raw, parse_float=decimal.Decimal)
    base = int(doc["baseTimeNanoseconds"])
    mem = []
    for e in doc["traceEvents"]:
        if e.get("name") == "[memory]":
            a = e["args"]
            mem.append([base + int(e["ts"] * 1000), int(a["Addr"]), int(a["Bytes"]), int(a["Total Allocated"])])
    # Indexes count [memory] events in time order, file order breaking ties (memcut's order). A
    # trace whose allocations come from several threads (DDP's gloo threads) is exported thread
    # by thread, not in time order.
    mem.sort(key=lambda m: m[0])
    return raw, mem


def pair_allocations(mem):
    """[(alloc index, free index or None, addr, size)] from a trace's [memory] events."""
    open_, out = {}, []
    for i, (_, addr, size, _) in enumerate(mem):
        if size > 0:
            if addr in open_:
                raise SystemExit(f"address {addr} allocated twice at event {i}")
            open_[addr] = len(out)
            out.append([i, None, addr, size])
        else:
            j = open_.pop(addr, None)
            if j is None or out[j][3] != -size:
                raise SystemExit(f"free of an unknown allocation at event {i} (CPU traces have none)")
            out[j][1] = i
    return out


def build_truth(mem, prof, param_addrs):
    """Truth rows of a stack run, in the index space of its Chrome trace's [memory] events."""
    by_event = {(t, addr, size): k for t, addr, size, k, _, _, _ in prof["allocations"]}
    cache_frame = {(t, addr): c for t, addr, size, _, c, _, _ in prof["allocations"] if size > 0}
    op_of = {(t, addr, size): op for t, addr, size, _, _, op, _ in prof["allocations"]}
    # Which compiled graph each allocation event happened in (see record()).
    in_graph = {(t, addr, size): g for t, addr, size, _, _, _, g in prof["allocations"]}
    if len(by_event) != len(mem):
        raise SystemExit(f"{len(mem)} [memory] events but {len(by_event)} profiler allocation events")
    ts = [m[0] for m in mem]

    def from_index(t_ns):  # first event index at or after t (a version counts from its op's start)
        lo, hi = 0, len(ts)
        while lo < hi:
            mid = (lo + hi) // 2
            if ts[mid] < t_ns:
                lo = mid + 1
            else:
                hi = mid
        return lo

    steps = prof["optimizer_steps"]
    rows, key_row = [], {}
    for a, f, addr, size in pair_allocations(mem):
        kid = by_event[(mem[a][0], addr, size)]
        if f is not None and by_event[(mem[f][0], addr, -size)] != kid:
            raise SystemExit(f"allocation at event {a} freed under another tensor key")
        if kid is None:
            vs = [[a, 0, "unknown"]]
        else:
            vs = [[max(a, from_index(t)), v, c] for t, v, c in prof["versions"][str(kid)]]
            key_row[kid] = len(rows)
        adj, reason = None, None
        op = op_of[(mem[a][0], addr, size)]
        if f is not None and op and all(v[2] == "unknown" for v in vs) and op == op_of[(mem[f][0], addr, -size)]:
            adj, reason = "temporary", OP_REASON.format(op[1])
        if f is not None:
            for s, e, n in steps:
                if s <= mem[a][0] and mem[f][0] <= e:
                    adj, reason = "temporary", STEP_REASON.format(n)
        if cache_frame[(mem[a][0], addr)]:
            adj, reason = "kv_cache", CACHE_REASON.format(cache_frame[(mem[a][0], addr)])
        if f is None and addr in param_addrs and any(v[2] != "parameter" for v in vs):
            adj, reason = "parameter", PARAM_REASON
        # Rule 5: made inside a compiled graph, where PyTorch's profiler does not see the data
        # flow. Made by the compiled forward and freed by the compiled backward: saved for
        # backward, PyTorch's own definition of an activation, whatever PyTorch called it
        # (parameter, input, or nothing); otherwise a graph makes neither parameters nor inputs.
        saved = adj is None and f is not None \
            and in_graph[(mem[a][0], addr, size)] == "CompiledFunction" \
            and in_graph.get((mem[f][0], addr, -size)) == "CompiledFunctionBackward"
        adjusted = ("parameter", "input", "unknown") if saved else ("parameter", "input")
        graph = in_graph[(mem[a][0], addr, size)] and adj is None and \
            any(v[2] in adjusted for v in vs)
        graph_category = "activation" if saved else "unknown"
        if graph:  # only those versions are adjusted
            reason = SAVED_REASON if saved else GRAPH_REASON
        rows.append({"alloc": a, "free": f, "addr": addr, "size": size, "key": kid,
                     "versions": [[i, v, c, (graph_category if graph and c in adjusted else
                                             adj or c)] for i, v, c in vs],
                     "reason": reason})
    pre = []
    for kid, size, addr in prof["preexisting"]:
        vs = [[0, 0, "unknown"]] if kid is None else [
            [from_index(t) if t >= 0 else 0, v, c] for t, v, c in prof["versions"][str(kid)]]
        adj = "parameter" if addr in param_addrs else None
        pre.append({"key": kid, "size": size, "addr": addr,
                    "versions": [[i, v, c, adj or c] for i, v, c in vs]})
    return rows, pre, key_row


def category_at(row, p, adjusted=True):
    c = row["versions"][0]
    for v in row["versions"]:
        if v[0] <= p:
            c = v
    return c[3] if adjusted else c[2]


def chrome_peak(mem, rows, pre, with_pre):
    """Peak of the running sum (+ pre-existing bytes when `with_pre`), earliest on ties."""
    live, best, best_i = 0, -1, -1
    for i, m in enumerate(mem):
        live += m[2]
        if live > best:
            best, best_i = live, i
    base = sum(r["size"] for r in pre) if with_pre else 0
    mix = {"adjusted": collections.Counter(), "pytorch": collections.Counter()}
    for r in rows + (pre if with_pre else []):
        if r.get("alloc", -1) <= best_i and (r.get("free") is None or r["free"] > best_i):
            mix["adjusted"][category_at(r, best_i)] += r["size"]
            mix["pytorch"][category_at(r, best_i, False)] += r["size"]
    total = best + base
    assert sum(mix["adjusted"].values()) == total, "live rows do not add up to the peak"
    return {"bytes": total, "event_index": best_i, "ts_ns": mem[best_i][0],
            "by_category": dict(sorted(mix["adjusted"].items())),
            "by_category_pytorch": dict(sorted(mix["pytorch"].items()))}


def param_adjusted(c, addr, param_addrs):
    """(adjusted, reason) of a tensor PyTorch labels `c` at `addr`."""
    return ("parameter", PARAM_REASON) if addr in param_addrs and c != "parameter" else (c, None)


def snapshot_truth(snap, prof, rows, key_row, param_addrs):
    """Truth rows in the snapshot's index space (CPU list = the last device list)."""
    trace = snap["device_traces"][-1]
    expect = prof["snapshot_entries"]
    if len(expect) != sum(e["action"] in ("alloc", "free_completed") for e in trace):
        raise SystemExit("snapshot entries do not match the memory profile's timeline")
    out, open_, k = [], {}, 0
    pre_size = {kid: size for kid, size, _ in prof["preexisting"] if kid is not None}
    for i, e in enumerate(trace):
        if e["action"] == "free_requested":
            continue
        action, kid, version = expect[k]
        k += 1
        if action != ("alloc" if e["action"] == "alloc" else "free"):
            raise SystemExit(f"snapshot entry {i}: {e['action']} where the timeline has {action}")
        if action == "alloc":
            r = rows[key_row[kid]] if kid in key_row else None
            if r and r["addr"] != e["addr"]:
                raise SystemExit(f"snapshot entry {i} at {e['addr']}, its tensor at {r['addr']}")
            raw = e["category"]
            adj = r["versions"][0][3] if (r and r["reason"]) else raw
            open_[(kid, version)] = len(out)
            out.append([i, None, e["addr"], e["size"], raw, adj, r["reason"] if r else None])
        else:
            j = open_.pop((kid, version), None)
            if j is None:  # a tensor that existed before recording, freed at its first version bump
                c = raw_category(prof, kid, version)
                out.append([None, i, e["addr"], pre_size[kid], c, *param_adjusted(c, e["addr"], param_addrs)])
            else:
                out[j][1] = i
    # Pre-existing tensors never bumped are the segment's active blocks that no alloc opened;
    # the segment's blocks carry no address: it is the running offset from the segment's start.
    never_bumped = {ptr: (kid, size) for kid, size, ptr in prof["preexisting"]
                    if kid is not None and not any(
                        e[1] == kid and e[2] > 0 for e in prof["snapshot_entries"])}
    opened = {out[j][2] for j in open_.values()}
    for seg in snap["segments"][-1:]:
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in opened:
                if addr not in never_bumped:
                    # Seen once in 23 DDP recordings (fresh36): a block the profiler did not
                    # list as a pre-existing tensor, made by a gloo thread beside the main one.
                    raise TwinMismatch(f"pre-existing block at {addr} ({b['requested_size']} B) "
                                       "is no pre-existing tensor of the profile")
                kid, size = never_bumped.pop(addr)
                if size != b["requested_size"]:
                    raise SystemExit(f"pre-existing block at {addr}: {b['requested_size']} B, profiler {size}")
                c = raw_category(prof, kid, 0)
                out.append([None, None, addr, size, c, *param_adjusted(c, addr, param_addrs)])
            addr += b["size"]
    if never_bumped:
        raise SystemExit(f"{len(never_bumped)} pre-existing tensors missing from the snapshot's blocks")
    return out, len(trace)


def raw_category(prof, kid, version):
    for _t, v, c in prof["versions"][str(kid)]:
        if v == version:
            return c
    return "unknown"


def snapshot_peak(rows, n):
    """MemoryViz-style replay: pre-existing rows count from the start until their free."""
    delta = [0] * (n + 1)
    cur = 0
    for a, f, _addr, size, *_ in rows:
        if a is None:
            cur += size
        else:
            delta[a] += size
        if f is not None:
            delta[f] -= size
    best, best_i = cur, -1
    for i in range(n):
        cur += delta[i]
        if cur > best:
            best, best_i = cur, i
    mix = {"adjusted": collections.Counter(), "pytorch": collections.Counter()}
    for a, f, _addr, size, raw, adj, _ in rows:
        if (a is None or a <= best_i) and (f is None or f > best_i):
            mix["adjusted"][adj] += size
            mix["pytorch"][raw] += size
    return {"bytes": best, "event_index": best_i,
            "by_category": dict(sorted(mix["adjusted"].items())),
            "by_category_pytorch": dict(sorted(mix["pytorch"].items()))}


def check_exported_timeline(mem, rows, pre, exported):
    """The truth rows give the same total bytes as PyTorch's own export_memory_timeline at every one
    of its (microsecond-coalesced) points. Returns the export's peak point, in its categories."""
    names = ["parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
             "autograd_detail", "unknown"]
    times, sizes = exported
    changes = []  # (t_ns, category, delta)
    for r in pre:
        vs = r["versions"]
        changes.append((-1, vs[0][2], r["size"]))
        for a, b in zip(vs, vs[1:]):
            changes += [(mem[b[0]][0] if b[0] < len(mem) else 2**62, a[2], -r["size"]),
                        (mem[b[0]][0] if b[0] < len(mem) else 2**62, b[2], r["size"])]
    for r in rows:
        vs = r["versions"]
        changes.append((mem[r["alloc"]][0], vs[0][2], r["size"]))
        for a, b in zip(vs, vs[1:]):
            t = mem[b[0]][0] if b[0] < len(mem) else 2**62
            changes += [(t, a[2], -r["size"]), (t, b[2], r["size"])]
        if r["free"] is not None:
            changes.append((mem[r["free"]][0], vs[-1][2], -r["size"]))
    # Version bumps are placed at the next [memory] event here but at their op's start in the
    # export: compare totals (exact) at every point, categories at the peak point only.
    changes.sort(key=lambda c: c[0])
    cur, j = collections.Counter(), 0
    peak = max(range(len(times)), key=lambda i: (sum(sizes[i]), -i))
    for i, t_us in enumerate(times):
        # PyTorch buckets by int(t / 1000) (float division), which is not always t // 1000.
        # The export's first point holds only the pre-existing memory when there is some (its
        # time -1 is relabelled to the first real time, which then appears twice).
        only_pre = i == 0 and pre
        while j < len(changes) and (changes[j][0] == -1 if only_pre else int(changes[j][0] / 1000) <= t_us):
            cur[changes[j][1]] += changes[j][2]
            j += 1
        if sum(cur.values()) != sum(sizes[i]):
            raise SystemExit(f"export_memory_timeline total {sum(sizes[i])} at {t_us} us, truth rows "
                             f"give {sum(cur.values())}")
    point = {names[s - 1]: v for s, v in enumerate(sizes[peak]) if s and v}
    return {"bytes": sum(sizes[peak]), "time_us": times[peak], "by_category": dict(sorted(point.items()))}


# =========================================================================== outputs (parent)


def gzip_bytes(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
        g.write(data)
    return buf.getvalue()


MEM_ARGS = re.compile(rb'"Total Reserved": (-?\d+), "Total Allocated": (-?\d+), "Bytes": (-?\d+), '
                      rb'"Device Id": -1, "Device Type": 0,')


def gpulike(raw, preexisting, n_memory):
    """The CPU trace as a GPU reports the same run: `Total Allocated` counts what the caching
    allocator holds, i.e. also memory allocated before recording (PyTorch's pre-existing tensors),
    and the events belong to cuda:0 (`Device Type` 1, `Device Id` 0). `Total Reserved` (0 on CPU)
    becomes the running maximum of the new `Total Allocated`: a caching allocator that never
    returned a segment, the smallest reserved value a GPU could report (reserved >= allocated)."""
    high = [0]

    def sub(m):
        total = int(m.group(2)) + preexisting
        high[0] = max(high[0], total)
        return (b'"Total Reserved": %d, "Total Allocated": %d, "Bytes": %s, "Device Id": 0, '
                b'"Device Type": 1,' % (high[0], total, m.group(3)))

    out, n = MEM_ARGS.subn(sub, raw)
    if n != n_memory:
        raise SystemExit(f"GPU-like copy: rewrote {n} of {n_memory} [memory] events")
    return out


class TwinMismatch(Exception):
    pass


def finish_run(out_dir, work_dir, spec, twin):
    """Writes the run's four (three) files; returns its truth."""
    name = spec["name"]
    raw, mem = load_trace(os.path.join(work_dir, name + ".trace.json"))
    with open(os.path.join(work_dir, name + ".work.json")) as f:
        work = json.load(f)
    if spec["mode"] == "stack":
        prof = work["profile"]
        param_addrs = set(work["facts"]["parameter_addrs"])
        rows, pre, key_row = build_truth(mem, prof, param_addrs)
        with open(os.path.join(work_dir, name + ".snapshot.pickle"), "rb") as f:
            snap_bytes = f.read()
        snap = pickle.loads(snap_bytes)
        snap_rows, n_entries = snapshot_truth(snap, prof, rows, key_row, param_addrs)
        exported = check_exported_timeline(mem, rows, pre, prof["exported_timeline"])
        with open(os.path.join(out_dir, name + ".snapshot.pickle.gz"), "wb") as f:
            f.write(gzip_bytes(snap_bytes))
    else:
        t = twin
        if [m[2] for m in mem] != t["_sizes"]:
            raise TwinMismatch(f"{name}: [memory] events differ from its twin {t['run']['name']}")
        pairs = pair_allocations(mem)
        rows = [dict(r) for r in t["chrome"]["allocations_full"]]
        if [(p[0], p[1]) for p in pairs] != [(r["alloc"], r["free"]) for r in rows]:
            raise TwinMismatch(f"{name}: allocations pair differently from its twin")
        for r, p in zip(rows, pairs):
            r["addr"] = p[2]
        pre, snap_rows, exported = t["_pre"], None, t["pytorch_timeline_peak"]
    peak_cpu = chrome_peak(mem, rows, pre, with_pre=False)
    peak_gpu = chrome_peak(mem, rows, pre, with_pre=True)
    pre_bytes = sum(r["size"] for r in pre)
    gpu_raw = gpulike(raw, pre_bytes, len(mem))
    max_total = max(int(m.group(1)) for m in re.finditer(rb'"Total Allocated": (-?\d+), "Bytes"', gpu_raw))
    checks = {
        "gpulike_max_total_allocated_equals_truth_peak": max_total == peak_gpu["bytes"],
        "cpu_max_total_allocated_equals_truth_peak": max(m[3] for m in mem) == peak_cpu["bytes"],
        "exported_timeline_peak_le_event_peak": exported["bytes"] <= peak_gpu["bytes"],
    }
    facts = work["facts"] if spec["mode"] == "stack" else twin["run"]["facts"]
    pre_mix = collections.Counter()
    for r in pre:
        pre_mix[category_at(r, 0)] += r["size"]
    truth = {
        "schema": 1,
        "run": dict(spec, facts=facts, truth_from=twin["run"]["name"] if twin else name,
                    torch=TORCH_VERSION, transformers=TRANSFORMERS_VERSION,
                    python=platform.python_version()),
        "categories_note": "PyTorch category names in memcut spelling; 'unknown' = PyTorch's None",
        "preexisting": {"bytes": pre_bytes, "by_category": dict(sorted(pre_mix.items()))},
        "chrome": {
            "events": len(mem),
            "peak": peak_cpu,
            "gpulike_peak": peak_gpu,
            "allocation_columns": ["alloc_event", "free_event", "addr", "size",
                                   "versions: [[from_event, version, pytorch, adjusted]]", "reason"],
            "allocations": [[r["alloc"], r["free"], r["addr"], r["size"],
                             [[v[0], v[1], v[2], v[3]] for v in r["versions"]], r["reason"]]
                            for r in rows],
        },
        "snapshot": None if snap_rows is None else {
            "entries": n_entries,
            "peak": snapshot_peak(snap_rows, n_entries),
            "allocation_columns": ["alloc_entry", "free_entry", "addr", "size", "pytorch", "adjusted", "reason"],
            "allocations": snap_rows,
        },
        "pytorch_timeline_peak": exported,
        "checks": checks,
    }
    if not all(checks.values()):
        raise SystemExit(f"{name}: failed checks {checks}")
    for suffix, data in ((".trace.json.gz", raw), (".gpulike.trace.json.gz", gpu_raw),
                         (".truth.json.gz", json.dumps(truth, sort_keys=True).encode())):
        with open(os.path.join(out_dir, name + suffix), "wb") as f:
            f.write(gzip_bytes(data))
    truth["_sizes"] = [m[2] for m in mem]
    truth["_pre"] = pre
    truth["chrome"]["allocations_full"] = rows
    if spec["mode"] != "stack":
        truth["snapshot_refused"] = work["snapshot_refused"]
    return truth


def spot_checks(t):
    """Category sanity checks against the model and optimizer objects (printed, not fatal)."""
    f, w = t["run"]["facts"], t["run"]["workload"]
    g = t["chrome"]["gpulike_peak"]["by_category"]
    out = [f"parameter at peak {g.get('parameter', 0)} vs model {f['parameter_bytes']}"]
    if f["optimizer_state_bytes"]:
        out.append(f"optimizer_state at peak {g.get('optimizer_state', 0)} vs optimizer "
                   f"{f['optimizer_state_bytes']} ({f['optimizer_state_bytes'] / max(f['parameter_bytes'], 1):.3f}x params)")
    if t["run"]["start"] == "warm":
        out.append(f"pre-existing {t['preexisting']['by_category']}")
    return f"[{w}] " + "; ".join(out)


def table(out_dir):
    """The README's run table, from the committed truths and file sizes."""
    def kb(path):
        return f"{os.path.getsize(path) / 1000:.0f}" if os.path.exists(path) else "-"

    def mix(by):
        total = sum(by.values()) or 1
        return ", ".join(f"{c} {100 * b / total:.0f}%" for c, b in sorted(by.items(), key=lambda kv: -kv[1])
                         if 100 * b / total >= 1)

    print("| run | events | KB: trace / gpulike / snapshot / truth | peak cpu / gpu-like / snapshot (B) "
          "| before recording (B) | truth mix at gpu-like peak (adjusted) |")
    print("|---|---:|---|---|---:|---|")
    names = sorted(f[:-len(".truth.json.gz")] for f in os.listdir(out_dir) if f.endswith(".truth.json.gz"))
    for name in names:
        with gzip.open(os.path.join(out_dir, name + ".truth.json.gz")) as f:
            t = json.load(f)
        p = lambda s: os.path.join(out_dir, name + s)  # noqa: E731
        c, g, s = t["chrome"]["peak"], t["chrome"]["gpulike_peak"], t["snapshot"]
        print(f"| `{name}` | {t['chrome']['events']} | {kb(p('.trace.json.gz'))} / {kb(p('.gpulike.trace.json.gz'))}"
              f" / {kb(p('.snapshot.pickle.gz'))} / {kb(p('.truth.json.gz'))} | {c['bytes']} / {g['bytes']} / "
              f"{s['peak']['bytes'] if s else '-'} | {t['preexisting']['bytes']} | {mix(g['by_category'])} |")


TORCH_VERSION = TRANSFORMERS_VERSION = None


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=HERE, help="output folder (default: this script's folder)")
    ap.add_argument("--seed", type=int, default=0, help="base seed; workload i uses seed + i")
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="base", help="model/batch shapes")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset")
    ap.add_argument("--starts", default=",".join(STARTS), help="cold,warm or one of them")
    ap.add_argument("--no-bare", action="store_true", help="skip the bare (no stacks, no shapes) runs")
    ap.add_argument("--table", action="store_true", help="print the README's run table for --out and exit")
    ap.add_argument("--record", help=argparse.SUPPRESS)  # internal: one run, in a fresh process
    ap.add_argument("--peer", help=argparse.SUPPRESS)  # internal: a DDP run's rank 1
    args = ap.parse_args()
    if args.record:
        record(json.loads(args.record))
        return
    if args.peer:
        record(json.loads(args.peer), peer=True)
        return
    if args.table:
        table(os.path.abspath(args.out))
        return
    global TORCH_VERSION, TRANSFORMERS_VERSION
    import torch
    import transformers
    TORCH_VERSION, TRANSFORMERS_VERSION = torch.__version__, transformers.__version__
    out_dir = os.path.abspath(args.out)
    work_dir = os.path.join(out_dir, ".work")
    os.makedirs(work_dir, exist_ok=True)
    names = list(WORKLOADS)
    summary = []
    for w in args.workloads.split(","):
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; known: {', '.join(WORKLOADS)}")
        for start in args.starts.split(","):
            if start not in ONLY_STARTS.get(w, STARTS):
                print(f"{w}.{start}: not recorded ({w} runs {', '.join(ONLY_STARTS[w])} only)")
                continue
            modes = ["stack", "nostack"] + (["bare"] if (w, start) in BARE and not args.no_bare else [])
            twin = None
            for mode in modes:
                spec = {"name": run_name(w, start, mode), "workload": w, "start": start, "mode": mode,
                        "description": WORKLOADS[w], "seed": args.seed + names.index(w),
                        "variant": args.variant, "shapes": VARIANTS[args.variant],
                        "profiler": {"activities": ["CPU"], "profile_memory": True,
                                     "record_shapes": mode != "bare", "with_stack": mode == "stack"},
                        "schedule": {"wait": 0, "warmup": 0, "active": 1, "repeat": 1} if start == "cold"
                        else {"wait": 1, "warmup": 1, "active": 1, "repeat": 1}}
                # A DDP run's gloo threads allocate beside the main thread, so two recordings can
                # interleave their [memory] events differently: a twin is recorded again until
                # its events are its stack twin's (up to 5 times); a stack run is recorded again
                # when its snapshot shows a block made beside the profile (see snapshot_truth).
                for attempt in range(5 if w in DDP else 1):
                    child = dict(spec, work=work_dir, port=free_port())
                    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--record",
                                        json.dumps(child)],
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                    if p.returncode:
                        raise SystemExit(f"{spec['name']}: recording failed:\n{p.stdout}")
                    try:
                        t = finish_run(out_dir, work_dir, spec, twin)
                        break
                    except TwinMismatch as e:
                        print(f"    attempt {attempt + 1}: {e}", flush=True)
                else:
                    print(f"{spec['name']}: not recorded (no recording matched its twin)", flush=True)
                    summary.append(f"{spec['name']}: not recorded (no recording matched its twin)")
                    continue
                twin = twin or t
                c, g, s = t["chrome"]["peak"], t["chrome"]["gpulike_peak"], t["snapshot"]
                line = (f"{spec['name']:28} events {t['chrome']['events']:5}  cpu peak {c['bytes']:>9}  "
                        f"gpu-like peak {g['bytes']:>9} (pre {t['preexisting']['bytes']})  "
                        f"snapshot peak {s['peak']['bytes'] if s else '-':>9}  "
                        f"timeline export peak {t['pytorch_timeline_peak']['bytes']}")
                print(line, flush=True)
                if mode == "stack":
                    print("    " + spot_checks(t))
                    print(f"    gpu-like mix (adjusted): {g['by_category']}")
                    print(f"    gpu-like mix (pytorch):  {g['by_category_pytorch']}")
                else:
                    print(f"    snapshot: {t['snapshot_refused']}")
                summary.append(line)
    for f in os.listdir(work_dir):
        os.remove(os.path.join(work_dir, f))
    os.rmdir(work_dir)
    print(f"torch {TORCH_VERSION}, transformers {TRANSFORMERS_VERSION}, python {platform.python_version()}")


if __name__ == "__main__":
    main()
