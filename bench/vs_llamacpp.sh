#!/usr/bin/env bash
# pagoda vs llama.cpp on the same GGUF files, alternated rounds, 2 threads:
#   llama-bench -m F -p 512 -n 128 -t 2 -r 3          (pp512 and tg128, mean of its repeats)
#   pagoda bench latency F --batch-size 1 --input-len 512 --output-len 1   (pp512)
#   pagoda bench latency F --batch-size 1 --input-len 8 --output-len 128 --bandwidth-bound
#                                                      (decode steps/s and fraction of the bound)
# Prints each round and the medians with the ratio (docs/PERFORMANCE.md's
# method: ratios measured in one run, medians of rounds).
#
# usage: bench/vs_llamacpp.sh LLAMA_BENCH ROUNDS MODEL.gguf... [-- PAGODA_BIN...]
#   PAGODA_BIN defaults to build/pagoda; with several binaries each runs in
#   every round (old vs new), in the order given. LLAMA_BENCH "none" skips
#   llama.cpp (then ratios are against the first binary).
#   Env: PAGODA_FLAGS (extra flags for every pagoda run), OUT (log dir, default /tmp/vs_llamacpp).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n 2,14p "$0"; exit 2; }
LB=$1; ROUNDS=$2; shift 2
MODELS=(); BINS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do MODELS+=("$1"); shift; done
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do BINS+=("$1"); shift; done
[ ${#BINS[@]} -gt 0 ] || BINS=(build/pagoda)
OUT=${OUT:-/tmp/vs_llamacpp}
mkdir -p "$OUT"
RES="$OUT/results.tsv"
: > "$RES"

for r in $(seq 1 "$ROUNDS"); do
  for m in "${MODELS[@]}"; do
    name=$(basename "$m")
    if [ "$LB" != none ]; then
      echo "== round $r $name: llama-bench" >&2
      "$LB" -m "$m" -p 512 -n 128 -t 2 -r 3 -o json > "$OUT/lb_${name}_$r.json" 2> "$OUT/lb_${name}_$r.log"
      python3 - "$OUT/lb_${name}_$r.json" "$name" "$r" >> "$RES" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for t in d:
    what = "pp512" if t["n_prompt"] > 0 else "tg128"
    print(f"{sys.argv[2]}\t{sys.argv[3]}\tllama.cpp\t{what}\t{t['avg_ts']:.2f}")
EOF
    fi
    for b in "${BINS[@]}"; do
      tag="pagoda:$b"
      echo "== round $r $name: $b pp512" >&2
      # shellcheck disable=SC2086
      "$b" bench latency "$m" --threads 2 --no-prefix-caching --batch-size 1 --input-len 512 \
          --output-len 1 --num-iters-warmup 1 --num-iters 3 ${PAGODA_FLAGS:-} \
          --output-json "$OUT/pp_${name}_$r.json" > "$OUT/pp_${name}_$r.log" 2>&1
      echo "== round $r $name: $b tg128" >&2
      # shellcheck disable=SC2086
      "$b" bench latency "$m" --threads 2 --no-prefix-caching --batch-size 1 --input-len 8 \
          --output-len 128 --num-iters-warmup 1 --num-iters 3 --bandwidth-bound ${PAGODA_FLAGS:-} \
          --output-json "$OUT/tg_${name}_$r.json" > "$OUT/tg_${name}_$r.log" 2>&1
      python3 - "$OUT/pp_${name}_$r.json" "$OUT/tg_${name}_$r.json" "$name" "$r" "$tag" >> "$RES" <<'EOF'
import json, statistics, sys
pp = json.load(open(sys.argv[1])); tg = json.load(open(sys.argv[2]))
name, r, tag = sys.argv[3:6]
print(f"{name}\t{r}\t{tag}\tpp512\t{512 / statistics.median(pp['latencies']):.2f}")
bb = tg["bandwidth_bound"]
print(f"{name}\t{r}\t{tag}\ttg128\t{bb['decode_steps_per_second']:.2f}")
print(f"{name}\t{r}\t{tag}\tbound%\t{100 * bb['fraction_of_bound']:.1f}@{bb['read_bandwidth_gbs']:.1f}GB/s")
EOF
    done
  done
done

python3 bench/summary.py "$RES" "${BINS[@]}"
