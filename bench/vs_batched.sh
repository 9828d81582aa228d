#!/usr/bin/env bash
# 32 concurrent sequences, pagoda vs llama.cpp's llama-batched-bench on the same GGUF files,
# alternated rounds, 2 threads (docs/PERFORMANCE.md's batched-decode method):
#   llama-batched-bench -m F -c 8192 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 32 -t 2   (its S_TG)
#   pagoda bench latency F --batch-size 32 --input-len 128 --output-len 128, minus the same
#   with --output-len 1: 32 x 127 decode tokens over the difference of the two medians
#   (prefill excluded, as S_TG excludes it).
# Prints each round and the medians with the ratio.
#
# usage: bench/vs_batched.sh LLAMA_BATCHED_BENCH ROUNDS MODEL.gguf... [-- PAGODA_BIN...]
#   LLAMA_BATCHED_BENCH "none" skips llama.cpp (ratios then against the first binary).
#   Env: PAGODA_FLAGS (extra flags for every pagoda run), OUT (log dir, default /tmp/vs_batched),
#   NPL (sequences, default 32).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n 2,13p "$0"; exit 2; }
LB=$1; ROUNDS=$2; shift 2
MODELS=(); BINS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do MODELS+=("$1"); shift; done
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do BINS+=("$1"); shift; done
[ ${#BINS[@]} -gt 0 ] || BINS=(build/pagoda)
OUT=${OUT:-/tmp/vs_batched}
NPL=${NPL:-32}
mkdir -p "$OUT"
RES="$OUT/results.tsv"
: > "$RES"

for r in $(seq 1 "$ROUNDS"); do
  for m in "${MODELS[@]}"; do
    name=$(basename "$m")
    if [ "$LB" != none ]; then
      echo "== round $r $name: llama-batched-bench" >&2
      "$LB" -m "$m" -c 8192 -b 2048 -ub 512 -npp 128 -ntg 128 -npl "$NPL" -t 2 \
          > "$OUT/lbb_${name}_$r.log" 2>&1
      # the table row: |  PP |  TG |  B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
      awk -F'|' -v n="$name" -v r="$r" '$2 ~ /^ *128 *$/ && $3 ~ /^ *128 *$/ {gsub(/ /, "", $9); print n "\t" r "\tllama.cpp\tS_TG\t" $9}' \
          "$OUT/lbb_${name}_$r.log" >> "$RES"
    fi
    for b in "${BINS[@]}"; do
      tag="pagoda:$b"
      for ol in 1 128; do
        echo "== round $r $name: $b batch $NPL output $ol" >&2
        # shellcheck disable=SC2086
        "$b" bench latency "$m" --threads 2 --no-prefix-caching --batch-size "$NPL" \
            --input-len 128 --output-len "$ol" --num-iters-warmup 1 --num-iters 3 \
            ${PAGODA_FLAGS:-} --output-json "$OUT/b${ol}_${name}_$r.json" \
            > "$OUT/b${ol}_${name}_$r.log" 2>&1
      done
      python3 - "$OUT/b1_${name}_$r.json" "$OUT/b128_${name}_$r.json" "$name" "$r" "$tag" "$NPL" >> "$RES" <<'EOF'
import json, statistics, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
name, r, tag, npl = sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
dt = statistics.median(b["latencies"]) - statistics.median(a["latencies"])
print(f"{name}\t{r}\t{tag}\tS_TG\t{npl * 127 / dt:.2f}")
EOF
    done
  done
done

python3 bench/summary.py "$RES" "${BINS[@]}"
