#!/usr/bin/env bash
# Make memcut's real-shaped benchmark input set (issue 16): real recorded snapshots and Kineto
# traces replicated to 1M+ trace entries / 300+ MB, each keeping its own shape, plus the
# synthetic snapshot of make_big_snapshot.py as one shape among them.
#
#     bash scripts/bench_inputs.sh [OUTDIR]        # default /tmp/memcut-bench; never the repo
#
# Needs plain python3 (no torch) and the corpus (../shared/corpus or $MEMCUT_CORPUS). The
# replicators are deterministic, so the same inputs give the same bytes. A file already there
# is kept (delete it to remake it). Shapes:
#
#   snap-cs336.pickle      modern CUDA snapshot: time_us, compile_context, user_metadata,
#                          Python + C++ frames (cs336-wedsonlin medium_512 training step)
#   snap-pyframes.pickle   modern CUDA snapshot, Python frames only, compile_context, no
#                          user_metadata (decomfl)
#   snap-unshared.pickle  modern CUDA snapshot whose frame dicts are not shared: every
#                          traceback spells its frames out (cs336-magma27, torch on Windows)
#   snap-profile.pickle    `_profile_to_snapshot` output: no time_us, a `category` key, no
#                          segments' history (sample_traces/train_adamw)
#   snap-synthetic.pickle  scripts/make_big_snapshot.py --entries 1000000
#   trace-resnet50.json    Kineto 2021 (schemaVersion 1): old memory schema, Bytes only, no
#                          Addr / Total Allocated (kineto tb_plugin ResNet-50 sample)
#   trace-owlv2.json       Kineto 2025, float ts, record_shapes + with_stack + big metadata
#                          (TraceLens OWLv2 on H100)
#   trace-adamw.json       this repo's sample run (torch 2.x CPU profiler, train_adamw)
#   trace-owlv2.json.gz    trace-owlv2.json gzipped (level 6)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
corpus=${MEMCUT_CORPUS:-$repo/../shared/corpus}
out=${1:-/tmp/memcut-bench}
py=${PYTHON:-python3}

case "$(cd "$(dirname "$out")" && pwd)/$(basename "$out")/" in
"$repo"/*) echo "bench_inputs.sh: $out is inside the repository; write the inputs elsewhere" >&2; exit 2 ;;
esac
[ -d "$corpus" ] || { echo "bench_inputs.sh: no corpus at $corpus (set MEMCUT_CORPUS)" >&2; exit 2; }
mkdir -p "$out"

make() { # make NAME COMMAND...: run COMMAND unless $out/NAME exists
    local name=$1; shift
    if [ -s "$out/$name" ]; then echo "keep $out/$name"; return; fi
    "$@"
}

make snap-cs336.pickle "$py" "$here/replicate_snapshot.py" \
    "$corpus/cs336-wedsonlin/results/medium_512_training_memory_snapshot.pickle" \
    --target-entries 1000000 --out "$out/snap-cs336.pickle"
make snap-pyframes.pickle "$py" "$here/replicate_snapshot.py" "$corpus/decomfl/memory.pickle" \
    --target-entries 1000000 --out "$out/snap-pyframes.pickle"
make snap-unshared.pickle "$py" "$here/replicate_snapshot.py" "$corpus/cs336-magma27/memory_snapshot.pickle" \
    --target-entries 1000000 --out "$out/snap-unshared.pickle"
make snap-profile.pickle "$py" "$here/replicate_snapshot.py" \
    "$repo/sample_traces/train_adamw.snapshot.pickle.gz" \
    --target-entries 1000000 --out "$out/snap-profile.pickle"
make snap-synthetic.pickle "$py" "$here/make_big_snapshot.py" --entries 1000000 \
    --out "$out/snap-synthetic.pickle"

make trace-resnet50.json "$py" "$here/replicate_trace.py" \
    "$corpus/kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz" \
    --target-mb 300 --out "$out/trace-resnet50.json"
make trace-owlv2.json "$py" "$here/replicate_trace.py" \
    "$corpus/tracelens/tests/traces/h100/google_owlv2-large-patch14-ensemble__1016001.json.gz" \
    --target-mb 300 --out "$out/trace-owlv2.json"
make trace-adamw.json "$py" "$here/replicate_trace.py" "$repo/sample_traces/train_adamw.trace.json.gz" \
    --target-mb 300 --out "$out/trace-adamw.json"
make trace-owlv2.json.gz sh -c "gzip -6 -c '$out/trace-owlv2.json' > '$out/trace-owlv2.json.gz.tmp' && mv '$out/trace-owlv2.json.gz.tmp' '$out/trace-owlv2.json.gz'"

ls -l "$out"
