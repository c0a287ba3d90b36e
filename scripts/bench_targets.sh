#!/usr/bin/env bash
# Issue 35's targets measured in one go, whole process, release: memcut against the plain Python
# job on each input (A B A B with farm-bench, medians of the pairs), its peak RSS against the
# file's size, a gzipped trace against `zcat FILE > /dev/null` alone, and optionally
# `memcut batch` at --jobs 2 against --jobs 1. Prints one Markdown table, each row with the
# target it is held to and whether it is met.
#
#   bash scripts/bench_inputs.sh                      # the inputs, into /tmp/memcut-bench (once)
#   bash scripts/bench_targets.sh                     # every file of /tmp/memcut-bench
#   bash scripts/bench_targets.sh /tmp/memcut-bench /tmp/untuned-*.pickle   # folders and files
#   BATCH=/tmp/corpus20 bash scripts/bench_targets.sh # and batch scaling over that folder
#
# RUNS sets the pairs (default 5), BIN the binary (default target/release/memcut), PYTHON the
# interpreter of the Python jobs (default python3). Snapshots (.pickle) are held to >= 20x
# scripts/replay_peak.py and peak RSS <= 1.0x the file; Chrome traces (.json) to >= 40x
# scripts/trace_peak.py and <= 0.5x; .json.gz to memcut's wall <= zcat's; batch to >= 1.8x.
# Needs farm-bench (the project's side-by-side timer). Keep the machine otherwise idle.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-$here/../target/release/memcut}
runs=${RUNS:-5}
py=${PYTHON:-python3}
command -v farm-bench >/dev/null || { echo "bench_targets.sh: farm-bench not found" >&2; exit 2; }
[ -x "$bin" ] || { echo "bench_targets.sh: no binary at $bin (cargo build --release)" >&2; exit 2; }
[ $# -gt 0 ] || set -- /tmp/memcut-bench
files=()
for a in "$@"; do
  if [ -d "$a" ]; then
    while IFS= read -r f; do files+=("$f"); done < <(find "$a" -maxdepth 1 -type f \( -name '*.pickle' -o -name '*.json' -o -name '*.json.gz' \) | sort)
  else
    files+=("$a")
  fi
done
[ ${#files[@]} -gt 0 ] || { echo "bench_targets.sh: no inputs in $*" >&2; exit 2; }

# One farm-bench pair run; prints "A_wall A_cpu A_peak B_wall ratio_wall ratio_cpu" (medians).
pair() { # pair 'COMMAND_B' COMMAND_A...
  local vs=$1; shift
  farm-bench -n "$runs" --timeout 3600 --vs "$vs" -- "$@" 2>&1 | awk '
    /^A wall s/ {aw=$5} /^A cpu s/ {ac=$5} /^A peak MiB/ {ap=$5}
    /^B wall s/ {bw=$5} /^A\/B wall/ {rw=$4} /^A\/B cpu/ {rc=$4}
    END { if (rw == "") exit 1; print aw, ac, ap, bw, rw, rc }'
}

echo "| input | file | memcut wall / CPU | yardstick wall | memcut faster (wall / CPU) | peak RSS / file | target | met |"
echo "|---|---:|---:|---:|---:|---:|---|---|"
for f in "${files[@]}"; do
  name=$(basename "$f")
  bytes=$(stat -c %s "$f")
  case "$f" in
    *.pickle) vs="$py $here/replay_peak.py $f"; speed=20; rss=1.0 ;;
    *.json.gz) vs="sh -c 'zcat $f > /dev/null'"; speed=1; rss= ;;
    *.json) vs="$py $here/trace_peak.py $f"; speed=40; rss=0.5 ;;
    *) continue ;;
  esac
  if ! read -r aw ac ap bw rw rc < <(pair "$vs" "$bin" analyze "$f" -f json -o /dev/null); then
    echo "| $name | | failed | | | | | |"
    continue
  fi
  "$py" - "$name" "$bytes" "$aw" "$ac" "$ap" "$bw" "$rw" "$rc" "$speed" "$rss" <<'EOF'
import sys
name, size, aw, ac, ap, bw, rw, rc, speed, rss = sys.argv[1:]
size = int(size) / 2**20
fw, fc = 1 / float(rw), 1 / float(rc)
ratio = float(ap) / size
if rss:
    target = f">= {speed}x, RSS <= {rss}x"
    met = f"speed {'yes' if fw >= float(speed) else 'no'}, RSS {'yes' if ratio <= float(rss) else 'no'}"
    yard, rss_cell = f"{float(bw):.2f} s", f"{float(ap):.1f} MiB / {ratio:.2f}x"
else:
    target, met = "wall <= zcat's", "yes" if fw >= 1.0 else "no"
    yard, rss_cell = f"zcat {float(bw):.2f} s", f"{float(ap):.1f} MiB"
print(f"| {name} | {size:.1f} MiB | {float(aw):.2f} s / {float(ac):.2f} s | {yard} | "
      f"{fw:.1f}x / {fc:.1f}x | {rss_cell} | {target} | {met} |")
EOF
done
if [ -n "${BATCH:-}" ]; then
  out=$(mktemp -d)
  if read -r aw ac ap bw rw rc < <(pair "$bin batch $BATCH --out-dir $out/1 --format json --jobs 1" \
      "$bin" batch "$BATCH" --out-dir "$out/2" --format json --jobs 2); then
    "$py" -c "import sys; r=1/float(sys.argv[3]); print(f'| batch {sys.argv[4]} | | --jobs 2 {float(sys.argv[1]):.2f} s | --jobs 1 {float(sys.argv[2]):.2f} s | {r:.2f}x | | >= 1.8x | {\"yes\" if r >= 1.8 else \"no\"} |')" \
      "$aw" "$bw" "$rw" "$BATCH"
  else
    echo "| batch $BATCH | | failed | | | | | |"
  fi
  rm -rf "$out"
fi
