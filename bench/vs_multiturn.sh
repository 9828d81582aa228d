#!/usr/bin/env bash
# Multi-turn chat TTFT (bench/multiturn.py) on one GGUF: pagoda serve with
# prefix caching, pagoda serve --no-prefix-caching (every turn re-prefills the
# whole history) and llama-server, one server at a time, 2 threads, rounds
# alternated. Prints each run's median TTFT of turns 2+ and the medians over
# rounds with the ratios (docs/PERFORMANCE.md's method).
#
# usage: bench/vs_multiturn.sh LLAMA_SERVER|none ROUNDS MODEL.gguf [multiturn.py options...]
#   Env: PAGODA (default build/pagoda), PAGODA_FLAGS, LLAMA_FLAGS, OUT (default /tmp/vs_multiturn),
#        PORT (default 18460).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n 2,11p "$0"; exit 2; }
LS=$1; ROUNDS=$2; MODEL=$3; shift 3
PAGODA=${PAGODA:-build/pagoda}
OUT=${OUT:-/tmp/vs_multiturn}
PORT=${PORT:-18460}
mkdir -p "$OUT"
RES="$OUT/results.tsv"
: > "$RES"

wait_up() {
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/v1/models" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  echo "server did not come up" >&2; return 1
}

run_one() { # label, command...
  local label=$1; shift
  "$@" > "$OUT/$label.server.log" 2>&1 &
  local pid=$!
  wait_up
  python3 bench/multiturn.py --url "http://127.0.0.1:$PORT" --label "$label" \
    --json "$OUT/$label.json" "${EXTRA[@]}" 2> "$OUT/$label.client.log" > /dev/null
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], sys.argv[3], round(d['ttft_ms_median_turns2plus'],1), round(d['ttft_ms_median_turn1'],1), sep='\t')" \
    "$OUT/$label.json" "$label" "$r" | tee -a "$RES"
}

EXTRA=("$@")
for r in $(seq 1 "$ROUNDS"); do
  run_one "pagoda_r$r" "$PAGODA" serve "$MODEL" --port "$PORT" --threads 2 --max-model-len 8192 ${PAGODA_FLAGS:-}
  run_one "pagoda_nocache_r$r" "$PAGODA" serve "$MODEL" --port "$PORT" --threads 2 --max-model-len 8192 --no-prefix-caching ${PAGODA_FLAGS:-}
  if [ "$LS" != none ]; then
    run_one "llama_server_r$r" "$LS" -m "$MODEL" --port "$PORT" -t 2 -c 8192 -np 1 ${LLAMA_FLAGS:-}
  fi
done

python3 - "$RES" <<'EOF'
import statistics, sys, collections
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
first = collections.defaultdict(list)
for label, r, t2, t1 in rows:
    kind = label.rsplit("_r", 1)[0]
    by[kind].append(float(t2)); first[kind].append(float(t1))
med = {k: statistics.median(v) for k, v in by.items()}
print("median TTFT of turns 2+ (ms), medians over rounds:")
for k, v in med.items():
    print(f"  {k:16s} {v:10.1f}   (turn 1: {statistics.median(first[k]):.1f})")
if "pagoda" in med and "pagoda_nocache" in med:
    print(f"  no-cache / cache: {med['pagoda_nocache'] / med['pagoda']:.2f}x")
if "pagoda" in med and "llama_server" in med:
    print(f"  llama-server / pagoda: {med['llama_server'] / med['pagoda']:.2f}x")
EOF
