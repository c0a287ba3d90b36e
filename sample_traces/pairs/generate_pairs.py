#!/usr/bin/env python3
"""Record paired real CPU PyTorch runs: a run with a waste, and the same run with the fix applied.

    VENV/bin/python sample_traces/pairs/generate_pairs.py            # the tuning set
    VENV/bin/python sample_traces/pairs/generate_pairs.py --untuned  # the set kept apart (other seeds, shapes, models)
    VENV/bin/python sample_traces/pairs/generate_pairs.py --fresh    # recorded last, reported apart
    VENV/bin/python sample_traces/pairs/generate_pairs.py --tuned --only leak   # one workload again
    VENV/bin/python sample_traces/pairs/generate_pairs.py --levers --only train --models mlp  # and model
    VENV/bin/python sample_traces/pairs/generate_pairs.py --levers          # catalogue levers, clean runs
    VENV/bin/python sample_traces/pairs/generate_pairs.py --levers_untuned  # the same, kept apart
    VENV/bin/python sample_traces/pairs/generate_pairs.py --levers_fresh    # recorded last, untouched
    VENV/bin/python sample_traces/pairs/generate_pairs.py --levers --only train --variants bf16_weights
    VENV/bin/python sample_traces/pairs/generate_pairs.py --levers_bf16 --only train --variants waste,bf16_weights
    VENV/bin/python sample_traces/pairs/generate_pairs.py --sequential_check --only infer_grad  # then kept_graph
    VENV/bin/python sample_traces/pairs/generate_pairs.py --findings_check   # recorded last, untouched
    VENV/bin/python sample_traces/pairs/generate_pairs.py --levers_check     # the same for the levers
    VENV/bin/python sample_traces/pairs/generate_pairs.py --levers_grads_check --only train --variants waste,zero_grad_set_to_none
    VENV/bin/python sample_traces/pairs/generate_pairs.py --combined       # two levers applied together (`A+B`)

Each run is recorded in a fresh process (on CPU the profiler's `Total Allocated` counts from the
first profile in a process), the whole run inside the recording when `start` is cold (model built
inside), or after two unrecorded iterations when warm. For every run it writes, next to this
script (gzip, mtime 0):

  <set>/<run>.trace.json.gz       prof.export_chrome_trace (profile_memory, record_shapes, with_stack)
  <set>/<run>.snapshot.pickle.gz  torch.cuda._memory_viz._profile_to_snapshot(prof), protocol 4

and <set>/pairs.json: for each pair (baseline, lever, fixed run) the true peak of each run (the
Chrome trace's maximum running sum of `[memory]` Bytes, i.e. its max `Total Allocated`), which is
what memcut's `--what-if LEVER` on the baseline must predict for the fixed run.
"""

import gzip
import json
import os
import pickle
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))

# workload -> the levers whose fixed runs are recorded beside the baseline ("waste").
WORKLOADS = {
    # `out = model(x)` in a loop with autograd on: the previous forward's graph is alive while
    # the next forward runs. Fixes: `del out` at the end of each iteration; inference_mode.
    "kept_graph": ["free_kept_graph", "inference_mode"],
    # One forward with autograd on whose result is reduced and dropped. Fix: inference_mode.
    "infer_grad": ["inference_mode"],
    # `outs.append(model(x))` with autograd on: every forward's graph stays, memory grows
    # forward after forward. Fix: keep only what is needed (`.argmax(-1)`), the graph goes.
    "leak": ["drop_growing_refs"],
    # Training with a hand-written AdamW that updates its moments out of place
    # (`m = 0.9 * m + 0.1 * g`, as course code often does): each step holds two copies of the
    # moments of the parameter it updates. Fix: the same optimizer updating them in place.
    "train_oop": ["optimizer_state_in_place"],
    # Inference (no_grad) under torch.autocast(bf16) with the weight cache on, two forwards in
    # one region.
    # Fix: autocast(cache_enabled=False).
    "autocast": ["autocast_no_cache"],
}

# Catalogue levers, on runs without a waste: training (AdamW unless the set says otherwise,
# foreach, zero_grad keeping the gradients, no checkpointing) and batched inference. Each fixed
# run applies the lever for real.
LEVER_WORKLOADS = {
    # Two optimizer steps (cold: model built inside the recording; warm: the third step).
    "train": ["zero_grad_set_to_none", "fused_optimizer", "halve_micro_batch",
              "activation_checkpointing", "bf16_weights"],
    # Two forwards under inference_mode. Fix: half the batch.
    "infer": ["halve_batch"],
    # Hugging Face generate() (greedy, its DynamicCache), causal LMs only. Fix: half the new
    # tokens (kv_cache_limit: the cache then holds fewer tokens).
    "generate": ["kv_cache_limit"],
}

# A first step's recording (the model built inside it, one optimizer step: its state is made
# there, lazily) and the same run recorded over two steps: what the second step's peak is, which
# the first's recording predicts (`devices[].next_step`). Cold runs only.
NEXT_STEP_WORKLOADS = {"first_step": ["two_steps"]}

# The plan for the next step: a first step's recording (the baseline), and the run recorded over
# two steps with each catalogue lever of training really applied (`two_steps+LEVER`): what the
# next step peaks at with the lever, which the first's recording predicts (the plan and the
# what-if priced on the next step). Cold runs only.
NEXT_STEP_LEVER_WORKLOADS = {"first_step": ["two_steps"] + [
    "two_steps+" + lever for lever in ("zero_grad_set_to_none", "fused_optimizer",
                                       "halve_micro_batch", "activation_checkpointing",
                                       "bf16_weights")]}

# Two levers applied together, where one changes what the other does: with the gradients kept
# across steps, zero_grad(set_to_none=True) frees them between steps; halving the micro-batch
# then keeps the first micro-batch's through the second's forward and backward.
COMBINED_WORKLOADS = {"train": ["zero_grad_set_to_none", "zero_grad_set_to_none+halve_micro_batch"]}

# The models that generate().
GENERATES = ("gpt2", "llama")

SETS = {
    # seed, model, shapes
    "tuned": [
        {"seed": 0, "model": "tinylm", "d": 128, "layers": 3, "batch": 8, "seq": 64},
        {"seed": 1, "model": "mlp", "d": 256, "layers": 4, "batch": 64, "seq": 1},
        {"seed": 2, "model": "gpt2", "d": 96, "layers": 2, "batch": 4, "seq": 48},
    ],
    "untuned": [
        {"seed": 10, "model": "tinylm", "d": 96, "layers": 4, "batch": 6, "seq": 80},
        {"seed": 11, "model": "mlp", "d": 384, "layers": 3, "batch": 48, "seq": 1},
        {"seed": 12, "model": "llama", "d": 128, "layers": 2, "batch": 3, "seq": 40},
    ],
    # Recorded last, once the models were settled: other seeds and shapes, and BERT, an
    # architecture neither set above has.
    "fresh": [
        {"seed": 20, "model": "bert", "d": 128, "layers": 3, "batch": 4, "seq": 64},
        {"seed": 21, "model": "gpt2", "d": 160, "layers": 3, "batch": 2, "seq": 96},
        {"seed": 22, "model": "mlp", "d": 512, "layers": 2, "batch": 32, "seq": 1},
    ],
    # Catalogue levers (LEVER_WORKLOADS): the set the lever models are tuned on, and the one
    # kept apart from them.
    "levers": [
        {"seed": 40, "model": "tinylm", "d": 128, "layers": 3, "batch": 8, "seq": 64},
        {"seed": 41, "model": "mlp", "d": 256, "layers": 4, "batch": 64, "seq": 1},
        {"seed": 42, "model": "gpt2", "d": 96, "layers": 2, "batch": 4, "seq": 48},
    ],
    "levers_untuned": [
        {"seed": 50, "model": "llama", "d": 128, "layers": 3, "batch": 6, "seq": 40},
        {"seed": 51, "model": "cnn", "d": 16, "layers": 3, "batch": 8, "seq": 32},
        {"seed": 52, "model": "tinylm", "d": 96, "layers": 4, "batch": 6, "seq": 80},
    ],
    # Recorded last, after the lever models above were settled, and not tuned on: other seeds and
    # shapes, BERT, and other optimizers (Adam, SGD with momentum) beside AdamW.
    "levers_fresh": [
        {"seed": 60, "model": "bert", "d": 96, "layers": 3, "batch": 4, "seq": 48, "opt": "adam"},
        {"seed": 61, "model": "cnn", "d": 12, "layers": 4, "batch": 6, "seq": 24, "opt": "sgd"},
        {"seed": 62, "model": "gpt2", "d": 128, "layers": 3, "batch": 4, "seq": 64, "opt": "adamw"},
        {"seed": 63, "model": "mlp", "d": 320, "layers": 3, "batch": 40, "seq": 1, "opt": "sgd"},
        {"seed": 64, "model": "llama", "d": 112, "layers": 2, "batch": 4, "seq": 56, "opt": "adam"},
    ],
    # Recorded at the end of the sixth session, after every lever model above was settled:
    # new seeds and shapes, other optimizers per model, scored once and not tuned on. Batches
    # are even: a first recording (seeds 110-113) had odd ones, and `batch //= 2` then keeps
    # a third to three sevenths of the batch, not the half the levers say.
    "levers_check": [
        {"seed": 120, "model": "gpt2", "d": 112, "layers": 2, "batch": 4, "seq": 56, "opt": "sgd"},
        {"seed": 121, "model": "llama", "d": 96, "layers": 2, "batch": 6, "seq": 40, "opt": "adamw"},
        {"seed": 122, "model": "cnn", "d": 14, "layers": 3, "batch": 8, "seq": 28, "opt": "adam"},
        {"seed": 123, "model": "bert", "d": 80, "layers": 2, "batch": 6, "seq": 44, "opt": "adamw"},
    ],
    # The hand-written optimizer's pairs (--only train_oop), recorded for a finding seen in two
    # corpus snapshots (cs336-bcrafton, cs336-wedsonlin: a course's AdamW updating its moments
    # out of place). A first model (each old moment freed where its replacement is made) said
    # 4.5 of the cold MLP's 13.2 MiB: in place, the expression's operands are never made either;
    # the model that landed reads them (cold MLP exact). Warm rows are not comparable (see
    # tests/suite/what_if_pairs.rs). Wide MLP and a TinyLM, small batches, so the step's second
    # copies matter.
    "oop_check": [
        {"seed": 140, "model": "mlp", "d": 768, "layers": 2, "batch": 8, "seq": 1},
        {"seed": 141, "model": "tinylm", "d": 192, "layers": 2, "batch": 2, "seq": 32},
    ],
    # Tenth session: the out-of-place optimizer finding had been scored only on the set it was
    # written on (oop_check, a hand-written AdamW); other hand-written optimizers (SGD with
    # momentum, Lion), other models and seeds, scored once (--only train_oop).
    "oop_fresh": [
        {"seed": 240, "model": "mlp", "d": 640, "layers": 2, "batch": 8, "seq": 1, "hand": "sgd"},
        {"seed": 241, "model": "gpt2", "d": 128, "layers": 2, "batch": 2, "seq": 32, "hand": "lion"},
        {"seed": 242, "model": "tinylm", "d": 160, "layers": 2, "batch": 2, "seq": 32, "hand": "sgd"},
    ],
    # Recorded at the end of the tenth session, after oop_fresh was looked at: Adam with bias
    # correction written by hand, other models and seeds, scored once (--only train_oop).
    "oop_untouched": [
        {"seed": 250, "model": "mlp", "d": 576, "layers": 2, "batch": 6, "seq": 1, "hand": "adam_bc"},
        {"seed": 251, "model": "llama", "d": 96, "layers": 2, "batch": 2, "seq": 24, "hand": "adam_bc"},
    ],
    # set_to_none pairs only (--only train --variants waste,zero_grad_set_to_none), recorded
    # after the gradients_kept_through_forward finding was settled on the sets above: new seeds,
    # shapes and optimizers per model, scored once and not tuned on.
    "levers_grads_check": [
        {"seed": 130, "model": "tinylm", "d": 104, "layers": 3, "batch": 6, "seq": 60, "opt": "sgd"},
        {"seed": 131, "model": "mlp", "d": 288, "layers": 3, "batch": 36, "seq": 1, "opt": "adam"},
        {"seed": 132, "model": "llama", "d": 120, "layers": 2, "batch": 4, "seq": 44, "opt": "adam"},
        {"seed": 133, "model": "cnn", "d": 20, "layers": 3, "batch": 4, "seq": 24, "opt": "adamw"},
        {"seed": 134, "model": "bert", "d": 96, "layers": 3, "batch": 4, "seq": 52, "opt": "sgd"},
    ],
    # First steps (--next_step: tuned on; --next_step_check: recorded after the prediction was
    # settled, scored once): the optimizer's state made lazily in the first step; with
    # zero_grad(set_to_none=False) the gradients are kept into the next step too.
    "next_step": [
        {"seed": 160, "model": "tinylm", "d": 96, "layers": 3, "batch": 6, "seq": 48, "opt": "adamw"},
        {"seed": 161, "model": "mlp", "d": 256, "layers": 3, "batch": 32, "seq": 1, "opt": "sgd"},
        {"seed": 162, "model": "gpt2", "d": 96, "layers": 2, "batch": 4, "seq": 40, "opt": "adam",
         "set_to_none": True},
    ],
    "next_step_check": [
        {"seed": 170, "model": "llama", "d": 104, "layers": 2, "batch": 4, "seq": 44, "opt": "adamw",
         "set_to_none": True},
        {"seed": 171, "model": "bert", "d": 88, "layers": 3, "batch": 4, "seq": 40, "opt": "sgd"},
        {"seed": 172, "model": "cnn", "d": 12, "layers": 3, "batch": 6, "seq": 24, "opt": "adam"},
        {"seed": 173, "model": "mlp", "d": 320, "layers": 2, "batch": 24, "seq": 1, "opt": "adamw",
         "set_to_none": True},
        {"seed": 174, "model": "tinylm", "d": 80, "layers": 2, "batch": 4, "seq": 64, "opt": "sgd",
         "set_to_none": True},
    ],
    # Recorded after next_step_check was looked at and its BERT snapshot fixed: scored once.
    "next_step_fresh": [
        {"seed": 180, "model": "gpt2", "d": 112, "layers": 3, "batch": 3, "seq": 56, "opt": "sgd"},
        {"seed": 181, "model": "bert", "d": 104, "layers": 2, "batch": 6, "seq": 36, "opt": "adam",
         "set_to_none": True},
        {"seed": 182, "model": "llama", "d": 80, "layers": 3, "batch": 3, "seq": 52, "opt": "sgd",
         "set_to_none": True},
        {"seed": 183, "model": "cnn", "d": 14, "layers": 2, "batch": 8, "seq": 28, "opt": "adamw"},
        {"seed": 184, "model": "tinylm", "d": 120, "layers": 2, "batch": 5, "seq": 40, "opt": "adam"},
    ],
    # halve_micro_batch where zero_grad frees the gradients (set_to_none=True, PyTorch's
    # default), ninth session: measured to size the gap the next_step_levers_check miss showed
    # (accumulation keeps the first micro-batch's gradients; the factor alone was off by a
    # median 18% of the peak here), then the set the held gradients were modelled on
    # (--only train --variants waste,halve_micro_batch).
    "levers_set_to_none": [
        {"seed": 200, "model": "gpt2", "d": 112, "layers": 3, "batch": 4, "seq": 48, "opt": "adamw",
         "set_to_none": True},
        {"seed": 201, "model": "mlp", "d": 352, "layers": 3, "batch": 32, "seq": 1, "opt": "sgd",
         "set_to_none": True},
        {"seed": 202, "model": "llama", "d": 96, "layers": 3, "batch": 4, "seq": 48, "opt": "adam",
         "set_to_none": True},
    ],
    # Recorded after halve_micro_batch's held gradients were modelled on the set above, and
    # scored once: other models, seeds, shapes and optimizers.
    "levers_set_to_none_check": [
        {"seed": 210, "model": "bert", "d": 96, "layers": 2, "batch": 6, "seq": 40, "opt": "adamw",
         "set_to_none": True},
        {"seed": 211, "model": "cnn", "d": 14, "layers": 3, "batch": 8, "seq": 28, "opt": "adam",
         "set_to_none": True},
        {"seed": 212, "model": "tinylm", "d": 128, "layers": 2, "batch": 6, "seq": 56, "opt": "sgd",
         "set_to_none": True},
        {"seed": 213, "model": "gpt2", "d": 80, "layers": 2, "batch": 8, "seq": 32, "opt": "adam",
         "set_to_none": True},
    ],
    # The next step's plan (NEXT_STEP_LEVER_WORKLOADS), ninth session: the set the model is
    # built on, and one recorded with it and kept apart, scored once.
    "next_step_levers": [
        {"seed": 190, "model": "tinylm", "d": 96, "layers": 3, "batch": 6, "seq": 48, "opt": "adamw"},
        {"seed": 191, "model": "mlp", "d": 288, "layers": 3, "batch": 32, "seq": 1, "opt": "adam"},
        {"seed": 192, "model": "gpt2", "d": 96, "layers": 2, "batch": 4, "seq": 40, "opt": "sgd"},
    ],
    "next_step_levers_check": [
        {"seed": 195, "model": "llama", "d": 96, "layers": 2, "batch": 4, "seq": 48, "opt": "adam"},
        {"seed": 196, "model": "bert", "d": 80, "layers": 3, "batch": 4, "seq": 40, "opt": "adamw"},
        {"seed": 197, "model": "cnn", "d": 12, "layers": 3, "batch": 6, "seq": 24, "opt": "sgd"},
        {"seed": 198, "model": "tinylm", "d": 112, "layers": 2, "batch": 4, "seq": 56, "opt": "sgd",
         "set_to_none": True},
    ],
    # Tenth session: the kept-gradient runs' plan takes zero_grad_set_to_none (a fix that costs
    # nothing) and then halve_micro_batch; the pair recorded to see what the two do together.
    "combined": [
        {"seed": 230, "model": "gpt2", "d": 96, "layers": 2, "batch": 6, "seq": 40, "opt": "adamw"},
        {"seed": 231, "model": "mlp", "d": 320, "layers": 3, "batch": 24, "seq": 1, "opt": "sgd"},
    ],
    # Recorded in the tenth session, after the plan priced halve_micro_batch's held gradients
    # and a new version's start stopped counting as a phase: every catalogue lever of training
    # and inference, new seeds and shapes, set_to_none on some runs and not others, scored once
    # and not tuned on.
    "levers_tenth": [
        {"seed": 220, "model": "gpt2", "d": 104, "layers": 2, "batch": 6, "seq": 36, "opt": "adamw",
         "set_to_none": True},
        {"seed": 221, "model": "llama", "d": 112, "layers": 2, "batch": 4, "seq": 44, "opt": "sgd"},
        {"seed": 222, "model": "cnn", "d": 18, "layers": 3, "batch": 6, "seq": 24, "opt": "adam",
         "set_to_none": True},
        {"seed": 223, "model": "bert", "d": 72, "layers": 3, "batch": 4, "seq": 48, "opt": "adam"},
        {"seed": 224, "model": "mlp", "d": 300, "layers": 3, "batch": 24, "seq": 1, "opt": "sgd",
         "set_to_none": True},
    ],
    # Recorded at the start of the eighth session, after the seventh's changes (warm snapshots'
    # gradients read from backward's in-place adds; the autocast gate): every catalogue lever of
    # training and inference (--only train, then --only infer; generate() has its untouched set
    # in levers_kv_check), new seeds, shapes and optimizers, scored once and not tuned on.
    "levers_final": [
        {"seed": 150, "model": "gpt2", "d": 80, "layers": 2, "batch": 4, "seq": 40, "opt": "adam"},
        {"seed": 151, "model": "llama", "d": 88, "layers": 2, "batch": 4, "seq": 36, "opt": "sgd"},
        {"seed": 152, "model": "cnn", "d": 10, "layers": 3, "batch": 6, "seq": 20, "opt": "adamw"},
        {"seed": 153, "model": "mlp", "d": 224, "layers": 3, "batch": 28, "seq": 1, "opt": "adamw"},
    ],
    # bf16 pairs only (--only train --variants waste,bf16_weights), recorded after the fresh
    # set showed attention's math path keeps fp32 in a bf16 run and the model learnt it: new
    # seeds and shapes, each attention kind (HF's SDPA with dropout: the math path; TinyLM's
    # causal SDPA without dropout: the fused kernel), not tuned on.
    "levers_bf16": [
        {"seed": 70, "model": "gpt2", "d": 144, "layers": 2, "batch": 3, "seq": 80, "opt": "adam"},
        {"seed": 71, "model": "bert", "d": 128, "layers": 2, "batch": 6, "seq": 40, "opt": "adamw"},
        {"seed": 72, "model": "llama", "d": 96, "layers": 3, "batch": 5, "seq": 48, "opt": "sgd"},
        {"seed": 73, "model": "tinylm", "d": 80, "layers": 3, "batch": 6, "seq": 96, "opt": "adamw"},
    ],
    # generate() with a prompt as long as its new tokens (--only generate): the prompt's share of
    # the cache does not shrink with fewer new tokens, which the kv_cache_limit factor ignores.
    "levers_long_prompt": [
        {"seed": 90, "model": "gpt2", "d": 128, "layers": 3, "batch": 4, "seq": 64, "prompt": 48,
         "new_tokens": 48},
        {"seed": 91, "model": "llama", "d": 112, "layers": 2, "batch": 3, "seq": 64, "prompt": 40,
         "new_tokens": 40},
    ],
    # generate() recorded after kv_cache_limit was modelled from the run (--only generate):
    # new seeds, shapes and prompt lengths, not looked at before scoring.
    "levers_kv_check": [
        {"seed": 95, "model": "gpt2", "d": 96, "layers": 4, "batch": 2, "seq": 64, "prompt": 20,
         "new_tokens": 60},
        {"seed": 96, "model": "llama", "d": 128, "layers": 3, "batch": 5, "seq": 64, "prompt": 12,
         "new_tokens": 72},
    ],
    # Forward-only runs of nn.Sequential models (--only infer_grad, --only kept_graph), recorded
    # after the final set's CNN showed inference_mode's model kept a Sequential child's output
    # until the Sequential returned and the model learnt `input = module(input)`: new seeds and
    # shapes, not tuned on.
    "sequential_check": [
        {"seed": 80, "model": "cnn", "d": 10, "layers": 4, "batch": 5, "seq": 28},
        {"seed": 82, "model": "mlp", "d": 448, "layers": 5, "batch": 24, "seq": 1},
    ],
    # Recorded after inference_mode's model learnt expressions (an operand held until its line's
    # last operator), operands beside each other on one line (`act(gate(x)) * up(x)`), a call's
    # output as what its last child returned, and small graphs (a two-layer MLP's) from the module
    # calls: new seeds and shapes of every architecture, all four findings' workloads, scored
    # once and not tuned on.
    "findings_check": [
        {"seed": 100, "model": "bert", "d": 112, "layers": 2, "batch": 3, "seq": 56},
        {"seed": 101, "model": "gpt2", "d": 128, "layers": 4, "batch": 2, "seq": 40},
        {"seed": 102, "model": "llama", "d": 80, "layers": 3, "batch": 4, "seq": 48},
        {"seed": 103, "model": "mlp", "d": 320, "layers": 2, "batch": 40, "seq": 1},
        {"seed": 104, "model": "cnn", "d": 12, "layers": 2, "batch": 6, "seq": 28},
    ],
    # Recorded after the fresh set was looked at (and memory_growth's runs changed for it):
    # untouched, with a CNN, an architecture no set above has.
    "final": [
        {"seed": 30, "model": "cnn", "d": 16, "layers": 3, "batch": 8, "seq": 32},
        {"seed": 31, "model": "llama", "d": 96, "layers": 3, "batch": 2, "seq": 56},
        {"seed": 32, "model": "tinylm", "d": 112, "layers": 2, "batch": 5, "seq": 72},
    ],
}


def run_name(workload, cfg, start, variant):
    return f"{workload}.{cfg['model']}.{start}.{variant}"


def record(spec):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    cfg, workload, variant = spec["cfg"], spec["workload"], spec["variant"]
    # `two_steps+LEVER`: two steps, with the lever applied; `A+B`: both levers applied.
    two_steps = variant.startswith("two_steps")
    applied = set(variant.split("+")) - {"two_steps"}
    torch.manual_seed(cfg["seed"])
    d, layers, batch, seq = cfg["d"], cfg["layers"], cfg["batch"], cfg["seq"]
    vocab = 256
    checkpointing = "activation_checkpointing" in applied
    if applied & {"halve_micro_batch", "halve_batch"}:
        batch //= 2

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, 4, -1).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx)
            for blk in self.blocks:
                if checkpointing:
                    x = torch.utils.checkpoint.checkpoint(blk, x, use_reentrant=False)
                else:
                    x = blk(x)
            return self.head(self.ln(x))

    if cfg["model"] in ("gpt2", "llama", "bert"):
        import transformers
        from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel,
                                  LlamaConfig, LlamaForCausalLM)
        transformers.logging.set_verbosity_error()
        if cfg["model"] == "bert":
            hf_config = BertConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=4,
                                   intermediate_size=4 * d, vocab_size=vocab, max_position_embeddings=128)
            hf_class = BertForMaskedLM
        elif cfg["model"] == "gpt2":
            hf_config = GPT2Config(n_embd=d, n_layer=layers, n_head=4, vocab_size=vocab, n_positions=128)
            hf_class = GPT2LMHeadModel
        else:
            hf_config = LlamaConfig(hidden_size=d, intermediate_size=3 * d, num_hidden_layers=layers,
                                    num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                                    max_position_embeddings=128)
            hf_class = LlamaForCausalLM

    def build():
        model = build_fp32()
        # Pure-bf16 training: the weights (and so gradients, optimizer state and activations) in
        # bf16.
        return model.to(torch.bfloat16) if "bf16_weights" in applied else model

    def build_fp32():
        m = cfg["model"]
        if m == "tinylm":
            return TinyLM().eval()
        if m == "cnn":
            mods, c = [], 3
            for i in range(layers):
                mods += [nn.Conv2d(c, d * 2 ** i, 3, padding=1), nn.BatchNorm2d(d * 2 ** i), nn.ReLU()]
                c = d * 2 ** i
            return nn.Sequential(*mods, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10)).eval()
        if m == "mlp":
            mods = []
            for _ in range(layers):
                mods += [nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d)]
            return nn.Sequential(*mods, nn.Linear(d, 10)).eval()
        return hf_class(hf_config).eval()

    dtype = torch.bfloat16 if "bf16_weights" in applied else torch.float32

    def inputs():
        if cfg["model"] == "mlp":
            return torch.randn(batch, d, dtype=dtype)
        if cfg["model"] == "cnn":
            return torch.randn(batch, 3, seq, seq, dtype=dtype)
        return torch.randint(0, vocab, (batch, seq))

    def forward(model, x):
        if checkpointing and cfg["model"] in ("mlp", "cnn"):
            # Each block checkpointed (conv/BN/ReLU, or Linear/GELU/Linear), as the lever says:
            # checkpoint_sequential would leave the last one out.
            n = len(model) - (3 if cfg["model"] == "cnn" else 1)
            out = x
            for i in range(0, n, 3):
                out = torch.utils.checkpoint.checkpoint(model[i:i + 3], out, use_reentrant=False)
            return model[n:](out)
        out = model(x)
        return out.logits if hasattr(out, "logits") else out

    def targets():
        if cfg["model"] in ("mlp", "cnn"):
            return torch.randint(0, 10, (batch,))
        return torch.randint(0, vocab, (batch, seq))

    optimizer = None

    class HandAdamW(torch.optim.Optimizer):
        # A hand-written AdamW (no bias correction, no weight decay: only the memory matters).
        def __init__(self, params, in_place):
            super().__init__(params, dict(lr=1e-3))
            self.in_place = in_place

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                    g = p.grad
                    if self.in_place:
                        m, v = state["m"], state["v"]
                        m.mul_(0.9).add_(g, alpha=0.1)
                        v.mul_(0.999).addcmul_(g, g, value=0.001)
                    else:
                        m = 0.9 * state["m"] + 0.1 * g
                        v = 0.999 * state["v"] + 0.001 * g * g
                        state["m"], state["v"] = m, v
                    p.addcdiv_(m, v.sqrt().add_(1e-8), value=-group["lr"])

    class HandSGD(torch.optim.Optimizer):
        """SGD with momentum written by hand: `buf = 0.9 * buf + g` out of place, or in place."""

        def __init__(self, params, in_place):
            super().__init__(params, {"lr": 1e-2})
            self.in_place = in_place

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["buf"] = torch.zeros_like(p)
                    if self.in_place:
                        buf = state["buf"].mul_(0.9).add_(p.grad)
                    else:
                        buf = 0.9 * state["buf"] + p.grad
                        state["buf"] = buf
                    p.add_(buf, alpha=-group["lr"])

    class HandLion(torch.optim.Optimizer):
        """Lion written by hand: the update is the sign of an interpolation; the moment
        `m = 0.99 * m + 0.01 * g` out of place, or in place."""

        def __init__(self, params, in_place):
            super().__init__(params, {"lr": 1e-4})
            self.in_place = in_place

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["m"] = torch.zeros_like(p)
                    g = p.grad
                    update = torch.sign(0.9 * state["m"] + 0.1 * g)
                    p.add_(update, alpha=-group["lr"])
                    if self.in_place:
                        state["m"].mul_(0.99).add_(g, alpha=0.01)
                    else:
                        state["m"] = 0.99 * state["m"] + 0.01 * g

    class HandAdamBC(torch.optim.Optimizer):
        """Adam with bias correction written by hand: the moments out of place, or in place;
        the corrected moments are temporaries either way."""

        def __init__(self, params, in_place):
            super().__init__(params, {"lr": 1e-3})
            self.in_place = in_place

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state[p]
                    if not state:
                        state["t"] = 0
                        state["m"], state["v"] = torch.zeros_like(p), torch.zeros_like(p)
                    state["t"] += 1
                    t, g = state["t"], p.grad
                    if self.in_place:
                        state["m"].mul_(0.9).add_(g, alpha=0.1)
                        state["v"].mul_(0.999).addcmul_(g, g, value=0.001)
                    else:
                        state["m"] = 0.9 * state["m"] + 0.1 * g
                        state["v"] = 0.999 * state["v"] + 0.001 * (g * g)
                    m_hat = state["m"] / (1 - 0.9 ** t)
                    v_hat = state["v"] / (1 - 0.999 ** t)
                    p.addcdiv_(m_hat, v_hat.sqrt().add_(1e-8), value=-group["lr"])

    def train_step(model):
        nonlocal optimizer
        if optimizer is None:
            model.train()
            if checkpointing and hasattr(model, "gradient_checkpointing_enable"):
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            fused = "fused_optimizer" in applied
            opt = cfg.get("opt", "adamw")
            if workload == "train_oop":
                hand = {"adamw": HandAdamW, "sgd": HandSGD, "lion": HandLion,
                        "adam_bc": HandAdamBC}[cfg.get("hand", "adamw")]
                optimizer = hand(model.parameters(), in_place="optimizer_state_in_place" in applied)
            elif opt == "sgd":
                optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9, fused=fused)
            elif opt == "adam":
                optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused)
            else:
                optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=fused)
        micro_steps = 2 if "halve_micro_batch" in applied else 1
        for _ in range(micro_steps):
            x, y = inputs(), targets()
            logits = forward(model, x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            del logits, loss
        optimizer.step()
        optimizer.zero_grad(set_to_none="zero_grad_set_to_none" in applied
                            or cfg.get("set_to_none", False))

    def step(model):
        if workload in ("train", "train_oop", "first_step"):
            train_step(model)
            return
        x = inputs()
        if workload == "generate":
            # A short prompt and many new tokens: the cache, not the prompt's forward, is the peak.
            x = x[:, :cfg.get("prompt", 8)]
            new = cfg.get("new_tokens", 96)
            if "kv_cache_limit" in applied:
                new //= 2
            with torch.inference_mode():
                model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new,
                               min_new_tokens=new, do_sample=False, pad_token_id=0)
            return
        if workload == "infer":
            with torch.inference_mode():
                for _ in range(2):
                    out = forward(model, x)
                    out.argmax(-1)
                    del out
            return
        if workload == "kept_graph":
            if "inference_mode" in applied:
                with torch.inference_mode():
                    for _ in range(3):
                        out = forward(model, x)
                        out.argmax(-1)
                    del out
            else:
                for _ in range(3):
                    out = forward(model, x)
                    out.argmax(-1)
                    if "free_kept_graph" in applied:
                        del out
        elif workload == "infer_grad":
            if "inference_mode" in applied:
                with torch.inference_mode():
                    out = forward(model, x)
                    out.argmax(-1)
                    del out
            else:
                out = forward(model, x)
                out.argmax(-1)
                del out
        elif workload == "leak":
            outs = []
            for _ in range(4):
                out = forward(model, x)
                outs.append(out.argmax(-1) if "drop_growing_refs" in applied else out)
                del out
            del outs
        elif workload == "autocast":
            cache = "autocast_no_cache" not in applied
            # no_grad, as inference under autocast is usually written: autocast caches casts of
            # weights that require grad under no_grad too (not under inference_mode).
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache):
                for _ in range(2):
                    out = forward(model, x)
                    out.argmax(-1)
                    del out

    cold = spec["start"] == "cold"
    model = None if cold else build()
    sched = schedule(wait=0 if cold else 1, warmup=0 if cold else 1, active=1, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True, schedule=sched) as prof:
        for i in range(1 if cold else 3):
            if cold:
                model = build()
            # Cold training runs two steps: the optimizer's state is made in the first.
            two = workload in ("train", "train_oop") or two_steps
            for _ in range(2 if cold and two else 1):
                step(model)
            prof.step()
    out_dir = os.path.join(HERE, spec["set"])
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, spec["name"])
    prof.export_chrome_trace(base + ".trace.json")
    with open(base + ".trace.json", "rb") as f:
        trace_bytes = f.read()
    os.remove(base + ".trace.json")
    snap = torch.cuda._memory_viz._profile_to_snapshot(prof)
    write_gz(base + ".snapshot.pickle.gz", pickle.dumps(snap, protocol=4))
    write_gz(base + ".trace.json.gz", trace_bytes)
    trace = json.loads(trace_bytes)
    total, peak = 0, 0
    for e in trace["traceEvents"]:
        if e.get("name") == "[memory]":
            total += e["args"]["Bytes"]
            peak = max(peak, total)
    print(json.dumps({"peak": peak, "torch": torch.__version__}))


def write_gz(path, data):
    with open(path, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as g:
            g.write(data)


def main(argv):
    if argv and argv[0] == "--child":
        record(json.loads(argv[1]))
        return
    set_name = next((s for s in SETS if f"--{s}" in argv), "tuned")
    # --only WORKLOAD records that workload again and keeps the other pairs.
    only = argv[argv.index("--only") + 1] if "--only" in argv else None
    # --models a,b: only those models' runs of that workload.
    models = argv[argv.index("--models") + 1].split(",") if "--models" in argv else None
    # --variants a,b: only those levers' fixed runs; the baselines and other pairs are kept.
    variants = argv[argv.index("--variants") + 1].split(",") if "--variants" in argv else None
    pairs, peaks = [], {}
    pairs_path = os.path.join(HERE, set_name, "pairs.json")
    if (only or variants) and os.path.exists(pairs_path):
        with open(pairs_path) as f:
            old = json.load(f)["pairs"]
        for p in old:
            peaks[p["baseline"]] = p["baseline_peak"]
        pairs = [p for p in old
                 if not ((only is None or p["baseline"].startswith(only + "."))
                         and (models is None or p["baseline"].split(".")[1] in models)
                         and (variants is None or p["lever"] in variants))]
    workloads = (COMBINED_WORKLOADS if set_name == "combined"
                 else LEVER_WORKLOADS if set_name.startswith("levers")
                 else NEXT_STEP_LEVER_WORKLOADS if set_name.startswith("next_step_levers")
                 else NEXT_STEP_WORKLOADS if set_name.startswith("next_step") else WORKLOADS)
    for cfg in SETS[set_name]:
        if models is not None and cfg["model"] not in models:
            continue
        for workload, levers in workloads.items():
            if only and workload != only:
                continue
            if workload == "generate" and cfg["model"] not in GENERATES:
                continue
            cold_only = workloads in (NEXT_STEP_WORKLOADS, NEXT_STEP_LEVER_WORKLOADS)
            for start in ("cold",) if cold_only else ("cold", "warm"):
                for variant in ["waste"] + levers:
                    if variants is not None and variant not in variants:
                        continue
                    name = run_name(workload, cfg, start, variant)
                    spec = {"set": set_name, "name": name, "cfg": cfg, "workload": workload,
                            "start": start, "variant": variant}
                    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)],
                                         check=True, capture_output=True, text=True)
                    peaks[name] = json.loads(out.stdout.strip().splitlines()[-1])["peak"]
                    print(f"{name}: peak {peaks[name]}", file=sys.stderr)
                base = run_name(workload, cfg, start, "waste")
                for lever in levers:
                    if variants is not None and lever not in variants:
                        continue
                    fixed = run_name(workload, cfg, start, lever)
                    pairs.append({"baseline": base, "lever": lever, "fixed": fixed,
                                  "baseline_peak": peaks[base], "fixed_peak": peaks[fixed]})
    pairs.sort(key=lambda p: (p["baseline"].split(".")[1], list(workloads).index(p["baseline"].split(".")[0])))
    with open(pairs_path, "w") as f:
        json.dump({"set": set_name, "configs": SETS[set_name], "pairs": pairs}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
