#!/usr/bin/env bash
# Writes memcut's outputs for every committed trace (sample_traces/, tests/data/)
# and every file of ../shared/corpus into DIR: JSON, with a budget and a what-if,
# and text, so that a change meant to keep behaviour can be checked byte for byte:
#   bash scripts/outputs.sh /tmp/before   # on the old build
#   bash scripts/outputs.sh /tmp/after    # on the new one
#   diff -r /tmp/before /tmp/after && echo identical
# BIN overrides the binary (default target/release/memcut). PAGES=1 adds Markdown
# and HTML, plain and with the budget and what-if (for changes to the renderers).
set -u
dir=${1:?usage: outputs.sh DIR}
bin=${BIN:-target/release/memcut}
mkdir -p "$dir"
n=0
while IFS= read -r f; do
  name=$(echo "$f" | tr '/' '_')
  "$bin" analyze "$f" --format json >"$dir/$name.json" 2>"$dir/$name.err"
  echo "rc=$?" >>"$dir/$name.err"
  "$bin" analyze "$f" --format json --budget 1GiB --what-if free_kept_graph,inference_mode,halve_micro_batch \
    >"$dir/$name.budget.json" 2>>"$dir/$name.err"
  "$bin" analyze "$f" --format text >"$dir/$name.txt" 2>>"$dir/$name.err"
  n=$((n + 3))
  if [ "${PAGES:-0}" = 1 ]; then
    for fmt in md html; do
      "$bin" analyze "$f" --format $fmt >"$dir/$name.$fmt" 2>>"$dir/$name.err"
      "$bin" analyze "$f" --format $fmt --budget 1GiB --what-if free_kept_graph,inference_mode,halve_micro_batch \
        >"$dir/$name.budget.$fmt" 2>>"$dir/$name.err"
      n=$((n + 2))
    done
  fi
done < <(find sample_traces tests/data ../shared/corpus -type f \
  \( -name '*.gz' -o -name '*.pickle' -o -name '*.json' -o -name '*.pkl' \) | sort)
echo "$n outputs in $dir"
