#!/usr/bin/env bash
# Issue 23's speed check in one command: pagoda vs llama.cpp on the GGUF files llama-quantize
# wrote (K-quant / IQ4 mixtures), 2 threads, alternated rounds (llama.cpp then pagoda, file by
# file), one table of medians and ratios at the end. Per file and round:
#   prefill 512:  llama-bench -m F -p 512 -n TG -t 2 -r REPS (its pp512; tg from the same run)
#                 vs pagoda bench latency F --batch-size 1 --input-len 512 --output-len 1
#   decode b1:    llama-bench's tg (mean of its repeats)
#                 vs pagoda bench latency F --batch-size 1 --input-len 8 --output-len TG
#                    --bandwidth-bound (decode steps/s; read bandwidth measured after every
#                    decode step of that same run, the steps' harmonic mean)
#   bound:        read bandwidth / the file's streamed bytes per token (bench/gguf_stream_bytes.py:
#                 every tensor as stored, token_embd left out when output.weight is separate);
#                 both engines' decode as % of it ("pagoda packed%": pagoda's own packed bytes)
#   32 sequences: llama-batched-bench -m F -c 8192 -b 2048 -ub 512 -npp 128 -ntg BTG -npl 32 -t 2
#                 (S_TG) vs pagoda bench latency F --batch-size 32 --input-len 128 with
#                 --output-len BTG minus --output-len 1: 32 x (BTG - 1) tokens over the
#                 difference of the medians (prefill excluded, as S_TG excludes it)
#
# usage: bench/vs_kquant.sh [MODEL.gguf...]
#   default models: $MODELS_DIR/{llama-1b,qwen3-1.7b}-{q4_k_m,q5_k_m,q6_k,iq4_xs}.gguf
#   Env: ROUNDS (default 3), QUICK=1 (shake-out: TG 32; 32 sequences of 16 prompt + 16 new
#   tokens; 1 llama-bench repeat, 1 pagoda iteration, no warm-up), LLAMA_BIN (default
#   /work/peers/llama.cpp/build/bin), PAGODA (default build/pagoda), MODELS_DIR (default /work/models), OUT (logs, default /tmp/vs_kquant),
#   NPL (default 32), PAGODA_FLAGS (extra flags for every pagoda run). LLAMA_BIN=none: pagoda
#   only (the llama.cpp columns print "-").
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
QUICK=${QUICK:-0}
LLAMA_BIN=${LLAMA_BIN:-/work/peers/llama.cpp/build/bin}
PAGODA=${PAGODA:-build/pagoda}
MODELS_DIR=${MODELS_DIR:-/work/models}
OUT=${OUT:-/tmp/vs_kquant}
NPL=${NPL:-32}
if [ "$QUICK" = 1 ]; then TG=32; BPP=16; BTG=16; REPS=1; ITERS=1; WARM=0
else TG=128; BPP=128; BTG=128; REPS=3; ITERS=3; WARM=1; fi
MODELS=("$@")
if [ ${#MODELS[@]} -eq 0 ]; then
  for s in llama-1b qwen3-1.7b; do
    for q in q4_k_m q5_k_m q6_k iq4_xs; do MODELS+=("$MODELS_DIR/$s-$q.gguf"); done
  done
fi
for m in "${MODELS[@]}"; do [ -f "$m" ] || { echo "vs_kquant: no such file: $m" >&2; exit 2; }; done
if [ "$LLAMA_BIN" != none ]; then
  for t in llama-bench llama-batched-bench; do
    [ -x "$LLAMA_BIN/$t" ] || { echo "vs_kquant: no $LLAMA_BIN/$t (LLAMA_BIN)" >&2; exit 2; }
  done
fi
[ -x "$PAGODA" ] || { echo "vs_kquant: no $PAGODA (PAGODA)" >&2; exit 2; }
mkdir -p "$OUT"
RES="$OUT/results.tsv"
: > "$RES"
echo "vs_kquant: ROUNDS=$ROUNDS QUICK=$QUICK TG=$TG BTG=$BTG NPL=$NPL; $(uptime)" | tee "$OUT/load.txt"

pagoda_run() { # tag, extra args...: bench latency with the common flags, JSON to $OUT/$tag.json
  local tag=$1; shift
  # shellcheck disable=SC2086
  "$PAGODA" bench latency "$m" --threads 2 --no-prefix-caching --num-iters-warmup "$WARM" \
      --num-iters "$ITERS" "$@" ${PAGODA_FLAGS:-} --output-json "$OUT/$tag.json" \
      > "$OUT/$tag.log" 2>&1 || { echo "vs_kquant: pagoda failed, see $OUT/$tag.log" >&2; exit 1; }
}

for r in $(seq 1 "$ROUNDS"); do
  for m in "${MODELS[@]}"; do
    name=$(basename "$m" .gguf)
    bytes=$(python3 bench/gguf_stream_bytes.py "$m")
    if [ "$LLAMA_BIN" != none ]; then
      echo "== round $r $name: llama-bench" >&2
      "$LLAMA_BIN/llama-bench" -m "$m" -p 512 -n "$TG" -t 2 -r "$REPS" -o json \
          > "$OUT/lb_${name}_$r.json" 2> "$OUT/lb_${name}_$r.log"
    fi
    echo "== round $r $name: pagoda pp512 / decode" >&2
    pagoda_run "pp_${name}_$r" --batch-size 1 --input-len 512 --output-len 1
    pagoda_run "tg_${name}_$r" --batch-size 1 --input-len 8 --output-len "$TG" --bandwidth-bound
    if [ "$LLAMA_BIN" != none ]; then
      echo "== round $r $name: llama-batched-bench -npl $NPL" >&2
      "$LLAMA_BIN/llama-batched-bench" -m "$m" -c 8192 -b 2048 -ub 512 -npp "$BPP" -ntg "$BTG" \
          -npl "$NPL" -t 2 > "$OUT/lbb_${name}_$r.log" 2>&1
    fi
    echo "== round $r $name: pagoda $NPL sequences" >&2
    for ol in 1 "$BTG"; do
      pagoda_run "b${ol}_${name}_$r" --batch-size "$NPL" --input-len "$BPP" --output-len "$ol"
    done
    python3 - "$OUT" "$name" "$r" "$bytes" "$NPL" "$BTG" "$LLAMA_BIN" "$BPP" >> "$RES" <<'EOF'
import json, statistics, sys
out, name, r, nbytes, npl, btg = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
llama = sys.argv[7] != "none"
bpp = sys.argv[8]
row = lambda who, what, v: print(f"{name}\t{r}\t{who}\t{what}\t{v:.4f}")
if llama:
    for t in json.load(open(f"{out}/lb_{name}_{r}.json")):
        row("llama.cpp", "pp512" if t["n_prompt"] > 0 else "tg", t["avg_ts"])
pp = json.load(open(f"{out}/pp_{name}_{r}.json"))
row("pagoda", "pp512", 512 / statistics.median(pp["latencies"]))
bb = json.load(open(f"{out}/tg_{name}_{r}.json"))["bandwidth_bound"]
row("pagoda", "tg", bb["decode_steps_per_second"])
row("pagoda", "packed%", 100 * bb["fraction_of_bound"])
row("bound", "bw_gbs", bb["read_bandwidth_gbs"])
row("bound", "tok_s", bb["read_bandwidth_gbs"] * 1e9 / nbytes)
s_tg = None  # the llama-batched-bench table row | PP | TG | B | N_KV | T_PP | S_PP | T_TG | S_TG | ...
for line in open(f"{out}/lbb_{name}_{r}.log") if llama else []:
    c = [x.strip() for x in line.split("|")]
    if len(c) > 8 and c[1] == bpp and c[2] == str(btg) and c[3] == str(npl):
        s_tg = float(c[8])
if llama and s_tg is None:
    sys.exit(f"vs_kquant: no S_TG row in {out}/lbb_{name}_{r}.log")
if llama:
    row("llama.cpp", "S_TG", s_tg)
a = json.load(open(f"{out}/b1_{name}_{r}.json")); b = json.load(open(f"{out}/b{btg}_{name}_{r}.json"))
dt = statistics.median(b["latencies"]) - statistics.median(a["latencies"])
row("pagoda", "S_TG", npl * (btg - 1) / dt)
EOF
    grep -P "^$name\t$r\t" "$RES" | sed "s/^/  /" >&2
  done
done
echo "vs_kquant: done; $(uptime)" | tee -a "$OUT/load.txt"

python3 - "$RES" "$NPL" <<'EOF'
import collections, statistics, sys
v = collections.defaultdict(list)
names = []
for l in open(sys.argv[1]):
    name, r, who, what, x = l.rstrip("\n").split("\t")
    v[(name, who, what)].append(float(x))
    if name not in names:
        names.append(name)
med = lambda n, w, k: statistics.median(v[(n, w, k)]) if v[(n, w, k)] else float("nan")
f = lambda x, d: "-" if x != x else f"{x:.{d}f}"
pc = lambda a: f(a, 0) + ("%" if a == a else "")
x = lambda a, b: "-" if a != a or b != b else f"{a / b:.2f}x"
npl = sys.argv[2]
print(f"medians over {max(len(x) for x in v.values())} round(s); ratio = pagoda / llama.cpp; "
      "%bound = decode tok/s over (read bandwidth / file bytes per token)")
hdr = ["model", "pp512 llama", "pp512 pagoda", "x (>=2)", "tg llama", "tg pagoda", "x",
       "bw GB/s", "bound tok/s", "llama %bound", "pagoda %bound (>=90)", "pagoda packed%",
       f"S_TG{npl} llama", f"S_TG{npl} pagoda", "x (>=1.3)"]
print("| " + " | ".join(hdr) + " |")
print("|" + " --- |" * len(hdr))
for n in names:
    ppl, ppp = med(n, "llama.cpp", "pp512"), med(n, "pagoda", "pp512")
    tgl, tgp = med(n, "llama.cpp", "tg"), med(n, "pagoda", "tg")
    bound = med(n, "bound", "tok_s")
    sl, sp = med(n, "llama.cpp", "S_TG"), med(n, "pagoda", "S_TG")
    tgx = x(tgp, tgl) + (" (>=1.1)" if tgl < 0.8 * bound else "")
    cells = [n, f(ppl, 1), f(ppp, 1), x(ppp, ppl), f(tgl, 2), f(tgp, 2), tgx,
             f(med(n, "bound", "bw_gbs"), 1), f(bound, 2), pc(100 * tgl / bound),
             pc(100 * tgp / bound), pc(med(n, "pagoda", "packed%")),
             f(sl, 1), f(sp, 1), x(sp, sl)]
    print("| " + " | ".join(cells) + " |")
EOF
