#!/usr/bin/env python3
"""Write a large synthetic PyTorch CUDA memory snapshot for benchmarks (plain Python 3, no torch).

    python3 scripts/make_big_snapshot.py                       # 1,000,000 entries -> big_snapshot.pickle
    python3 scripts/make_big_snapshot.py --entries 20000 --out /tmp/small.pickle --seed 7

The file imitates what `torch.cuda.memory._dump_snapshot()` writes after
`_record_memory_history(context="all", stacks="all")` of a GPT-style training loop:

* top level `segments`, `device_traces` (one device), `allocator_settings`, `external_annotations`;
* trace entries `alloc` / `free_requested` / `free_completed`, a few `segment_alloc` (a small
  caching-allocator model decides when a new segment is needed) and one `oom` near the end;
* entry fields in the order PyTorch writes them: action, addr (`device_free` for oom), size,
  stream, time_us, compile_context, user_metadata, frames;
* allocation pattern of training steps: parameters allocated first and alive to the end,
  activations growing through forward and released in backward, gradients from backward to
  zero_grad, Adam moments created by the first optimizer step, short-lived temporaries;
* final `segments`/`blocks` derived from the allocator model, so they agree with the replay.

Frame sharing follows real files (measured on a torch 2.x `_dump_snapshot` of a training step:
22k entries, 665 distinct frame dicts, ~15k distinct frame lists). The symbolizer creates one
dict per distinct frame and one *list* per captured traceback; `free_requested` and
`free_completed` of a block share the traceback of the free, and an active block shares the
list of its `alloc` entry. pickle memoizes by object identity, so the same sharing is what
makes real files compact (LONG_BINGET) and is what a reader's memo table must handle. Stacks come
from a pool of ~2000 distinct call sites; `--share-stacks` additionally reuses one list object
per site (a smaller, less realistic file).
"""

import argparse
import bisect
import pickle
import random
import sys
import zlib

MiB = 1 << 20
GiB = 1 << 30

# Keys and constant values are single str objects, so pickle memoizes them like PyTorch's.
K_ACTION, K_ADDR, K_SIZE, K_STREAM, K_TIME, K_CC, K_UM, K_FRAMES = (
    "action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata", "frames")
A_ALLOC, A_FREQ, A_FCOMP, A_SEG, A_OOM = (
    "alloc", "free_requested", "free_completed", "segment_alloc", "oom")
NA = "N/A"
EMPTY = ""

# ----------------------------------------------------------------------------- frame pool

ALLOC_PREFIX = [
    ("torch::unwind::unwind()", "??"),
    ("torch::CapturedTraceback::gather(bool, bool, bool)", "??"),
    ("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", "CUDACachingAllocator.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc(void**, signed char, unsigned long, CUstream_st*)", ""),
    ("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)", ""),
    ("at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)", ""),
    ("at::detail::empty_generic(c10::ArrayRef<long>, c10::Allocator*, c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)", "??"),
    ("at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, std::optional<c10::MemoryFormat>)", "??"),
]
FREE_PREFIX = [
    ("torch::unwind::unwind()", "??"),
    ("torch::CapturedTraceback::gather(bool, bool, bool)", "??"),
    ("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::free(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::Block*)", "CUDACachingAllocator.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)", ""),
    ("c10::StorageImpl::~StorageImpl()", "??"),
    ("c10::TensorImpl::~TensorImpl()", "??"),
    ("c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reset_()", "??"),
]
SEG_PREFIX = [
    ("torch::unwind::unwind()", "??"),
    ("torch::CapturedTraceback::gather(bool, bool, bool)", "??"),
    ("torch::cuda::(anonymous namespace)::gather_with_cpp()", "memory_snapshot.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block(c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::AllocParams&, bool, std::shared_ptr<c10::GatheredContext> const&, std::unique_lock<std::recursive_mutex>&)", "CUDACachingAllocator.cpp"),
    ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, CUstream_st*)", "CUDACachingAllocator.cpp"),
]
OPS = ["addmm", "mm", "bmm", "baddbmm", "_softmax", "gelu", "native_layer_norm", "add", "mul", "div",
       "cat", "native_dropout", "embedding", "_log_softmax", "nll_loss_forward", "sum", "clone",
       "_scaled_dot_product_efficient_attention", "empty_like", "zeros_like", "_to_copy", "copy_",
       "transpose", "contiguous", "view", "silu", "sqrt", "addcdiv", "lerp", "_foreach_mul",
       "_foreach_add", "_foreach_sqrt", "_foreach_div", "_foreach_lerp", "_foreach_addcdiv"]
BWD_NODES = ["AddmmBackward0", "MmBackward0", "BmmBackward0", "SoftmaxBackward0", "GeluBackward0",
             "NativeLayerNormBackward0", "AddBackward0", "MulBackward0", "NativeDropoutBackward0",
             "EmbeddingBackward0", "LogSoftmaxBackward0", "NllLossBackward0", "ViewBackward0",
             "TransposeBackward0", "CatBackward0", "ScaledDotProductEfficientAttentionBackward0",
             "torch::autograd::AccumulateGrad"]
SITE = "/home/user/.venv/lib/python3.12/site-packages/torch"
PY = "/usr/local/src/conda/python-3.12.3"
APP = "/home/user/proj/train"
INTERP = [("_PyEval_EvalFrameDefault", PY + "/Python/bytecodes.c"),
          ("_PyFunction_Vectorcall", PY + "/Objects/call.c"),
          ("_PyObject_MakeTpCall", PY + "/Objects/call.c"),
          ("method_vectorcall", PY + "/Objects/classobject.c"),
          ("slot_tp_call", PY + "/Objects/typeobject.c"),
          ("cfunction_call", PY + "/Objects/methodobject.c")]
TAIL = [("PyEval_EvalCode", PY + "/Python/ceval.c"), ("run_eval_code_obj", PY + "/Python/pythonrun.c"),
        ("run_mod", PY + "/Python/pythonrun.c"), ("pyrun_file", PY + "/Python/pythonrun.c"),
        ("_PyRun_SimpleFileObject", PY + "/Python/pythonrun.c"), ("pymain_run_file_obj", PY + "/Modules/main.c"),
        ("Py_BytesMain", PY + "/Modules/main.c"), ("__libc_start_main", "??"), ("_start", "??")]
THREAD_TAIL = [("torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)", "??"),
               ("torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)", "??"),
               ("torch::autograd::python::PythonEngine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)", "python_engine.cpp"),
               ("execute_native_thread_routine", "??"), ("start_thread", "??"), ("__clone", "??")]
MODULES = {  # innermost module code for a forward op
    "linear": ("forward", SITE + "/nn/modules/linear.py", 125),
    "layernorm": ("forward", SITE + "/nn/modules/normalization.py", 229),
    "embedding": ("forward", SITE + "/nn/modules/sparse.py", 192),
    "dropout": ("forward", SITE + "/nn/modules/dropout.py", 73),
    "gelu": ("gelu", SITE + "/nn/functional.py", 2010),
    "sdpa": ("attention", APP + "/model.py", 88),
    "loss": ("cross_entropy", SITE + "/nn/functional.py", 3462),
}


class FramePool:
    """Interns frame dicts: one dict object per distinct (name, file, line), like the symbolizer."""

    def __init__(self):
        self.d = {}

    def f(self, name, filename, line=0):
        key = (name, filename, line)
        fr = self.d.get(key)
        if fr is None:
            fr = self.d[key] = {"name": name, "filename": filename, "line": line}
        return fr

    def many(self, pairs):
        return [self.f(n, fn, 0) for n, fn in pairs]


def build_sites(rng, n_sites):
    """Return {kind: [Site]}; a Site is (alloc, free, segment_alloc) frame tuples of shared dicts."""
    fp = FramePool()
    kinds = {"init": 0.06, "data": 0.02, "forward": 0.45, "loss": 0.02, "backward": 0.30,
             "optimizer": 0.13, "misc": 0.02}
    sites = {k: [] for k in kinds}

    def op_frames(op):
        return fp.many([
            (f"at::native::{op}_out_cuda(at::Tensor const&, at::Tensor&)", "??"),
            (f"at::(anonymous namespace)::wrapper_CUDA_{op}(at::Tensor const&)", "RegisterCUDA.cpp"),
            (f"c10::impl::wrap_kernel_functor_unboxed_<{op}>::call(c10::OperatorKernel*, c10::DispatchKeySet)", "RegisterCUDA.cpp"),
            (f"at::_ops::{op}::redispatch(c10::DispatchKeySet, at::Tensor const&)", "??"),
            (f"torch::autograd::VariableType::(anonymous namespace)::{op}(c10::DispatchKeySet, at::Tensor const&)", "VariableType_2.cpp"),
            (f"at::_ops::{op}::call(at::Tensor const&)", "??"),
        ])

    def interp(n):
        return [fp.f(*INTERP[i % len(INTERP)], 0) for i in range(n)]

    def py_stack(kind, i):
        """Python frames innermost first, with this site's line numbers."""
        j = i % 97
        fwd_chain = [fp.f("_call_impl", SITE + "/nn/modules/module.py", 1786),
                     fp.f("_wrapped_call_impl", SITE + "/nn/modules/module.py", 1775)]
        block = [fp.f("forward", APP + "/model.py", 140 + j % 23)] + fwd_chain
        model = [fp.f("forward", APP + "/model.py", 210 + j % 11)] + fwd_chain
        main = [fp.f("train_step", APP + "/train.py", 60 + j % 7),
                fp.f("main", APP + "/train.py", 120 + j % 5), fp.f("<module>", APP + "/train.py", 180)]
        if kind == "init":
            return [fp.f(rng.choice(["reset_parameters", "__init__"]), SITE + "/nn/modules/linear.py", 106 + j % 5),
                    fp.f("convert", SITE + "/nn/modules/module.py", 1355),
                    fp.f("_apply", SITE + "/nn/modules/module.py", 933 + j % 3),
                    fp.f("to", SITE + "/nn/modules/module.py", 1369),
                    fp.f("build_model", APP + "/train.py", 40 + j % 9)] + main[1:]
        if kind == "data":
            return [fp.f("get_batch", APP + "/data.py", 30 + j % 8)] + main
        if kind in ("forward", "misc"):
            mod = MODULES[rng.choice(["linear", "linear", "linear", "layernorm", "dropout", "gelu", "sdpa", "embedding"])]
            inner = [fp.f(*mod)] + fwd_chain
            return inner + block * (1 + j % 2) + model + main
        if kind == "loss":
            return [fp.f(*MODULES["loss"]), fp.f("loss_fn", APP + "/train.py", 52)] + main
        if kind == "backward":
            return [fp.f("_engine_run_backward", SITE + "/autograd/graph.py", 829),
                    fp.f("backward", SITE + "/autograd/__init__.py", 354),
                    fp.f("backward", SITE + "/_tensor.py", 647)] + main
        if kind == "optimizer":
            fn = rng.choice([("_multi_tensor_adamw", SITE + "/optim/adamw.py", 545 + j % 30),
                             ("_init_group", SITE + "/optim/adamw.py", 147 + j % 12),
                             ("_default_to_fused_or_foreach", SITE + "/optim/optimizer.py", 160)])
            return [fp.f(*fn), fp.f("step", SITE + "/optim/adamw.py", 231),
                    fp.f("_use_grad", SITE + "/optim/optimizer.py", 79),
                    fp.f("wrapper", SITE + "/optim/optimizer.py", 485)] + main
        raise ValueError(kind)

    for kind, share in kinds.items():
        for i in range(max(1, int(n_sites * share))):
            # Depth between 20 and 60, skewed low (real training stacks average ~32 frames).
            extra = int(rng.triangular(0, 30, 0))
            if kind == "backward":
                node = rng.choice(BWD_NODES)
                core = fp.many([(f"torch::autograd::generated::{node}::apply(std::vector<at::Tensor>&&)", "Functions.cpp"),
                                ("torch::autograd::Node::operator()(std::vector<at::Tensor>&&)", "??"),
                                ("torch::autograd::call_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&)", "engine.cpp"),
                                ("torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&, torch::autograd::Node*, torch::autograd::InputBuffer&, std::shared_ptr<torch::autograd::ReadyQueue> const&)", "engine.cpp")])
                core = op_frames(rng.choice(OPS)) + core
                # Most backward allocations run on the autograd device thread (C++ only); some on the
                # caller's thread, where the Python `loss.backward()` frames are visible.
                if rng.random() < 0.3:
                    tail = core + interp(2 + extra // 3) + py_stack(kind, i) + interp(extra - extra // 3) + fp.many(TAIL)
                else:
                    tail = core + interp(extra // 4) + fp.many(THREAD_TAIL)
            else:
                py = py_stack(kind, i)
                # The symbolizer splices the innermost Python frame at its eval-loop frame and
                # appends the rest after `_start` (as seen in real stacks="all" snapshots).
                tail = (op_frames(rng.choice(OPS)) + interp(2) + py[:1] + interp(extra)
                        + fp.many(TAIL) + py[1:])
            alloc = tuple(fp.many(ALLOC_PREFIX) + tail)
            free = tuple(fp.many(FREE_PREFIX) + tail[len(tail) // 3:])
            seg = tuple(fp.many(SEG_PREFIX) + tail)   # cudaMalloc triggered from this site
            sites[kind].append((alloc, free, seg))
    return sites, len(fp.d)


# ----------------------------------------------------------------------------- allocator model


def round_size(n):
    return max(512, (n + 511) // 512 * 512)


class Allocator:
    """A small model of CUDACachingAllocator: 2 MiB small segments for <=1 MiB, 20 MiB segments for
    <10 MiB, 2 MiB-rounded segments above; best-fit split; merge free neighbours; no release."""

    SMALL = 1 * MiB

    def __init__(self, rng, capacity):
        self.rng = rng
        self.capacity = capacity
        self.reserved = 0
        self.next_addr = 0x7F2A00000000
        self.segs = {}     # base -> segment dict (address, size, pool, frames)
        self.blocks = {}   # addr -> [size, state, requested, frames, seg_base]
        self.ends = {}     # end addr -> start addr, for left-neighbour merges
        self.free = {"small": [], "large": []}   # sorted (size, addr)

    def pool_of(self, size):
        return "small" if size <= self.SMALL else "large"

    def malloc(self, requested, frames):
        """Return (addr, new_segment_or_None, rounded size)."""
        size = round_size(requested)
        pool = self.pool_of(size)
        fl = self.free[pool]
        i = bisect.bisect_left(fl, (size, 0))
        new_seg = None
        if i == len(fl):
            if pool == "small":
                seg_size = 2 * MiB
            elif size < 10 * MiB:
                seg_size = 20 * MiB
            else:
                seg_size = (size + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
            base = self.next_addr
            self.next_addr += seg_size + 2 * MiB * self.rng.randint(0, 3)  # VA gaps between segments
            self.reserved += seg_size
            self.segs[base] = new_seg = {"address": base, "size": seg_size, "pool": pool}
            self.blocks[base] = [seg_size, "inactive", 0, (), base]
            self.ends[base + seg_size] = base
            bisect.insort(fl, (seg_size, base))
            i = bisect.bisect_left(fl, (size, 0))
        bsize, addr = fl.pop(i)
        b = self.blocks[addr]
        rest = bsize - size
        # Same split rule as the real allocator: keep remainders big enough to be reusable.
        if (pool == "small" and rest >= 512) or (pool == "large" and rest > self.SMALL):
            self.blocks[addr + size] = [rest, "inactive", 0, (), b[4]]
            self.ends[addr + bsize] = addr + size
            self.ends[addr + size] = addr
            bisect.insort(fl, (rest, addr + size))
            b[0] = size
        b[1], b[2], b[3] = "active_allocated", requested, frames
        return addr, new_seg, b[0]

    def release(self, addr):
        b = self.blocks[addr]
        pool = self.segs[b[4]]["pool"]
        fl = self.free[pool]
        b[1], b[3] = "inactive", ()
        seg = self.segs[b[4]]
        seg_end = seg["address"] + seg["size"]
        # merge right
        nxt = addr + b[0]
        if nxt < seg_end and self.blocks[nxt][1] == "inactive":
            n = self.blocks.pop(nxt)
            fl.pop(bisect.bisect_left(fl, (n[0], nxt)))
            del self.ends[nxt]
            b[0] += n[0]
            self.ends[addr + b[0]] = addr
        # merge left
        if addr != seg["address"]:
            prev = self.ends[addr]
            p = self.blocks[prev]
            if p[1] == "inactive":
                fl.pop(bisect.bisect_left(fl, (p[0], prev)))
                del self.ends[addr]
                p[0] += b[0]
                self.ends[prev + p[0]] = prev
                del self.blocks[addr]
                addr, b = prev, p
        bisect.insort(fl, (b[0], addr))

    def segments(self, device):
        out = []
        for base in sorted(self.segs):
            s = self.segs[base]
            blocks, a = [], base
            alloc = req = 0
            while a < base + s["size"]:
                b = self.blocks[a]
                blk = {"address": a, "size": b[0], "requested_size": b[2], "state": b[1],
                       "frames": b[3] if b[1] != "inactive" else []}
                if b[1] != "inactive":
                    alloc += b[0]
                    req += b[2]
                blocks.append(blk)
                a += b[0]
            out.append({"device": device, "address": base, "total_size": s["size"],
                        "allocated_size": alloc, "active_size": alloc, "requested_size": req,
                        "stream": 0, "segment_type": s["pool"], "segment_pool_id": (0, 0),
                        "is_expandable": False, "frames": s["frames"],
                        "blocks": blocks})
        return out


# ----------------------------------------------------------------------------- workload


class Done(Exception):
    """Raised when the trace has reached its body length; the OOM tail follows."""


class Recorder:
    def __init__(self, args, rng, sites):
        self.rng = rng
        self.sites = sites
        self.share = args.share_stacks
        self.limit = args.entries
        self.trace = []
        self.ann = []
        self.alloc = Allocator(rng, capacity=80 * GiB)
        self.t = 1_783_874_600_000_000 + rng.randint(0, 10**9)   # epoch µs
        self.live = {}   # addr -> (requested, frames)
        self.site_of = {}

    def site(self, kind, key):
        """Same (kind, key) -> same call site, like the same line of model code every step."""
        s = self.site_of.get((kind, key))
        if s is None:
            pool = self.sites[kind]
            # crc32, not hash(): str hashing is randomised per process.
            s = self.site_of[(kind, key)] = pool[zlib.crc32(repr((kind, key)).encode()) % len(pool)]
        return s

    def frames(self, tpl):
        # A fresh list per captured traceback, sharing the frame dicts (see module docstring).
        return tpl if self.share else list(tpl)

    def tick(self, lo=0, hi=25):
        self.t += self.rng.randint(lo, hi)

    def entry(self, action, key, value, size, frames):
        self.trace.append({K_ACTION: action, key: value, K_SIZE: size, K_STREAM: 0,
                           K_TIME: self.t, K_CC: NA, K_UM: EMPTY, K_FRAMES: frames})

    def malloc(self, requested, kind, key):
        if len(self.trace) + 2 > self.limit:   # checked before appending: free pairs stay whole
            raise Done
        site = self.site(kind, key)
        fr = self.frames(site[0])
        addr, new_seg, _ = self.alloc.malloc(requested, fr)
        self.tick()
        if new_seg is not None:
            sf = self.frames(site[2])
            new_seg["frames"] = sf
            self.entry(A_SEG, K_ADDR, new_seg["address"], new_seg["size"], sf)
        self.entry(A_ALLOC, K_ADDR, addr, requested, fr)
        self.live[addr] = requested
        return addr

    def free(self, addr, kind, key):
        if len(self.trace) + 2 > self.limit:
            raise Done
        requested = self.live.pop(addr)
        fr = self.frames(self.site(kind, key)[1])
        self.tick()
        self.entry(A_FREQ, K_ADDR, addr, requested, fr)
        self.entry(A_FCOMP, K_ADDR, addr, requested, fr)
        self.alloc.release(addr)

    def annotate(self, name, stage):
        self.ann.append({"stage": stage, "name": name, "device": 0, "time_us": self.t})


def run(args):
    rng = random.Random(args.seed)
    sites, n_frames = build_sites(rng, args.sites)
    R = Recorder(args, rng, sites)

    # GPT-ish model, fp32 Adam: d=1536, 20 layers, vocab 50304, batch 8 x 1024 tokens.
    d, L, V, B, T, H = 1536, 20, 50304, 8, 1024, 12
    BT = B * T
    layer_params = [("ln1.w", d), ("ln1.b", d), ("qkv.w", 3 * d * d), ("qkv.b", 3 * d),
                    ("proj.w", d * d), ("proj.b", d), ("ln2.w", d), ("ln2.b", d),
                    ("fc1.w", 4 * d * d), ("fc1.b", 4 * d), ("fc2.w", 4 * d * d), ("fc2.b", d)]
    params = [("tok", V * d), ("pos", T * d)]
    params += [(f"h{i}.{n}", k) for i in range(L) for n, k in layer_params]
    params += [("lnf.w", d), ("lnf.b", d)]
    # (name, elements) of tensors each layer saves for backward, and of its forward temporaries.
    saved = [("ln1", BT * d), ("qkv", 3 * BT * d), ("attn_lse", B * H * T), ("attn", BT * d),
             ("proj", BT * d), ("drop_mask", BT * d // 4), ("ln2", BT * d), ("fc1", 4 * BT * d),
             ("gelu", 4 * BT * d), ("fc2", BT * d)]
    temps = [("ln_stats", 2 * BT), ("q_t", BT * d), ("k_t", BT * d), ("resid", BT * d)]

    p_addr = {}
    grads = {}
    state = {}

    def step(n):
        R.tick(2000, 9000)   # data loading between steps
        x = R.malloc(BT * 8, "data", "x")
        y = R.malloc(BT * 8, "data", "y")
        R.annotate("## forward ##", "START")
        acts = []
        h = R.malloc(BT * d * 4, "forward", "embed")
        for i in range(L):
            for name, el in saved:
                acts.append(R.malloc(el * 4, "forward", (name, i)))
                if R.rng.random() < 0.5:  # a short-lived temporary inside the op
                    t = R.malloc(el * 4 // 2, "forward", (name, "tmp", i))
                    R.free(t, "forward", (name, "tmp", i))
            for name, el in temps:
                t = R.malloc(el * 4, "forward", (name, i))
                R.free(t, "forward", (name, i))
        logits = R.malloc(BT * V * 4, "forward", "logits")
        R.annotate("## forward ##", "END")
        lse = R.malloc(BT * 4, "loss", "lse")
        loss = R.malloc(4, "loss", "loss")
        R.annotate("## backward ##", "START")
        glogits = R.malloc(BT * V * 4, "backward", "glogits")
        R.free(logits, "backward", "logits")
        R.free(lse, "backward", "lse")
        gh = R.malloc(BT * d * 4, "backward", "gh")
        R.free(glogits, "backward", "glogits")
        pi = len(params) - 1
        for i in reversed(range(L)):
            for name, el in reversed(saved):
                t = R.malloc(el * 4, "backward", (name, "grad_in", i))
                R.free(acts.pop(), "backward", (name, "saved", i))
                R.free(t, "backward", (name, "grad_in", i))
            # weight grads of this layer (AccumulateGrad keeps them until zero_grad)
            for _ in layer_params:
                pname, el = params[pi]
                if pname not in grads:
                    grads[pname] = R.malloc(el * 4, "backward", ("accgrad", pname))
                pi -= 1
        for pname, el in params[:2]:
            if pname not in grads:
                grads[pname] = R.malloc(el * 4, "backward", ("accgrad", pname))
        for pname, el in params[-2:]:
            if pname not in grads:
                grads[pname] = R.malloc(el * 4, "backward", ("accgrad", pname))
        R.free(gh, "backward", "gh")
        R.free(h, "backward", "h")
        R.annotate("## backward ##", "END")
        R.free(loss, "misc", "loss")
        R.free(x, "misc", "x")
        R.free(y, "misc", "y")
        R.annotate("Optimizer.step#AdamW.step", "START")
        if not state:   # first step creates exp_avg / exp_avg_sq, alive to the end
            for pname, el in params:
                state[pname] = (R.malloc(el * 4, "optimizer", ("exp_avg", pname)),
                                R.malloc(el * 4, "optimizer", ("exp_avg_sq", pname)))
        # foreach kernels allocate a temporary per parameter chunk and free them together
        for chunk in range(0, len(params), 24):
            tmp = [R.malloc(el * 4, "optimizer", ("foreach", chunk, k))
                   for k, (_, el) in enumerate(params[chunk:chunk + 24])]
            for k, t in enumerate(tmp):
                R.free(t, "optimizer", ("foreach", chunk, k))
        R.annotate("Optimizer.step#AdamW.step", "END")
        R.annotate("Optimizer.zero_grad#AdamW.zero_grad", "START")
        for pname in list(grads):
            R.free(grads.pop(pname), "optimizer", ("zero_grad", pname))
        R.annotate("Optimizer.zero_grad#AdamW.zero_grad", "END")
        return acts

    # Parameters first (model.to("cuda")): alive to the end.
    for pname, el in params:
        p_addr[pname] = R.malloc(el * 4, "init", pname)
    n = 0
    tail_budget = 1 + 12   # oom + a few frees while the exception unwinds
    R.limit = args.entries - tail_budget
    try:
        while True:
            step(n)
            n += 1
    except Done:
        pass

    # The failed request: a logits buffer for a longer sequence, larger than what the device has
    # left (capacity minus reserved minus ~1 GiB of CUDA context and other processes).
    R.limit = args.entries
    device_free = max(0, R.alloc.capacity - R.alloc.reserved - GiB)
    want = round_size(device_free + 3 * GiB + BT * V * 4)
    R.tick()
    R.trace.append({K_ACTION: A_OOM, "device_free": device_free,
                    K_SIZE: want, K_STREAM: 0, K_TIME: R.t, K_CC: NA, K_UM: EMPTY,
                    K_FRAMES: R.frames(R.site("forward", "logits")[0])})
    # Unwinding frees the most recent allocations (what was live in the failing frame).
    params_set = set(p_addr.values()) | {a for pair in state.values() for a in pair}
    victims = [a for a in reversed(list(R.live)) if a not in params_set]
    while args.entries - len(R.trace) >= 2 and victims:
        R.free(victims.pop(0), "misc", "unwind")
    if len(R.trace) < args.entries and R.alloc.free["small"]:
        # Odd remainder: one last small allocation that fits an existing small segment.
        R.limit += 1
        R.malloc(512, "misc", "pad")

    snapshot = {
        "segments": R.alloc.segments(0),
        "device_traces": [R.trace],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
            "expandable_segments": False, "pinned_num_register_threads": 1,
            "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
            "graph_capture_record_stream_reuse": False,
            "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
        },
        "external_annotations": R.ann,
    }
    return snapshot, n, n_frames


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=1_000_000, help="trace entries (default 1,000,000)")
    ap.add_argument("--out", default="big_snapshot.pickle", help="output path (default big_snapshot.pickle)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sites", type=int, default=2000, help="distinct call sites (default 2000)")
    ap.add_argument("--share-stacks", action="store_true",
                    help="reuse one frames list per call site instead of one per traceback")
    args = ap.parse_args()
    if args.entries < 2000:
        ap.error("--entries must be at least 2000 (the parameter setup alone needs ~500)")
    snap, steps, n_frames = run(args)
    with open(args.out, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    tr = snap["device_traces"][0]
    acts = {}
    for e in tr:
        acts[e["action"]] = acts.get(e["action"], 0) + 1
    import os
    print(f"{args.out}: {os.path.getsize(args.out):,} bytes, {len(tr):,} entries "
          f"({', '.join(f'{k} {v}' for k, v in sorted(acts.items()))}), {steps} full steps, "
          f"{len(snap['segments'])} segments, {n_frames} distinct frames", file=sys.stderr)


if __name__ == "__main__":
    main()
