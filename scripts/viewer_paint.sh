#!/usr/bin/env bash
# The HTML viewer on big inputs: for each file, the size of its HTML report
# and the time from navigation to the viewer drawn (the page parsed, the
# viewer's script run over its data and its canvases drawn; the browser
# shows them at the next frame), in headless Chromium, N runs each (median).
# A benchmark, not a test: the numbers go to docs/performance.md.
#
#   bash scripts/viewer_paint.sh [-n RUNS] FILE...      # e.g. /tmp/memcut-bench/*
#
# Needs a release build (cargo build --release) and chromium.
set -euo pipefail
runs=3
if [[ "${1:-}" == "-n" ]]; then runs=$2; shift 2; fi
here=$(cd "$(dirname "$0")/.." && pwd)
memcut=${MEMCUT:-$here/target/release/memcut}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-28s %10s %14s  %s\n' file "HTML MB" "drawn (ms)" "each run"
for f in "$@"; do
  name=$(basename "$f")
  "$memcut" analyze "$f" -f html -o "$tmp/page.html" 2>/dev/null
  # Errors caught from the first script on; the time taken by a script
  # after the viewer's, which draws as it starts.
  python3 - "$tmp/page.html" "$tmp/probe.html" <<'PY'
import sys
s = open(sys.argv[1]).read()
head = "<script>window.__errors=[];window.addEventListener('error',e=>window.__errors.push(String(e.message)));</script>"
probe = """<script>(() => { const v = document.querySelector('section.viewer');
const r = {ms: performance.now(), errors: window.__errors, drawn: !!v && !v.hidden};
const p = document.createElement('pre'); p.id = 'memcut-paint'; p.textContent = JSON.stringify(r); document.body.appendChild(p); })();</script>"""
open(sys.argv[2], 'w').write(s.replace('<head>', '<head>' + head, 1).replace('</body>', probe + '</body>'))
PY
  times=()
  for _ in $(seq "$runs"); do
    profile=$(mktemp -d)
    dom=$(timeout 120 "$browser" --headless --no-sandbox --disable-gpu --no-first-run \
      --disable-background-networking --window-size=1200,1000 --user-data-dir="$profile" \
      --dump-dom "file://$tmp/probe.html" 2>/dev/null)
    rm -rf "$profile"
    result=$(sed -n 's/.*<pre id="memcut-paint">\([^<]*\)<\/pre>.*/\1/p' <<<"$dom" | sed 's/&quot;/"/g')
    ms=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["drawn"] and not r["errors"], r; print(round(r["ms"]))' "$result")
    times+=("$ms")
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
  size=$(stat -c %s "$tmp/page.html")
  printf '%-28s %10.2f %14s  %s\n' "$name" "$(echo "$size/1000000" | bc -l)" "$median" "${times[*]}"
done
