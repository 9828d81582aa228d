#!/usr/bin/env bash
# Speculative decoding at a known acceptance rate on the Llama-3.2-1B shape (issue 18's speed
# check; docs/PERFORMANCE.md "Speculative decoding on synthetic successor models"). Writes
#   target: gen_model --preset llama-3.2-1b --successor (Q8_0 GGUF, ~1.6 GB): greedy output
#           t, t + 1, t + 2, ... after any token t;
#   drafts: a 2-layer hidden-256 successor model of the same vocabulary with --successor-skip P
#           for each P in SKIPS (its successor is t + 2 on a fraction P of the tokens: per-token
#           acceptance ~1 - P by construction);
# then runs, alternated per round, `pagoda bench latency` at batch 1 on "repeat this passage"
# prompts (--dataset-name copy --copy-repeat-len 16: a 112-token run of the chain, then its
# first 16 tokens again, so the output continues inside the passage) without speculation, with
# n-gram speculation and with each draft, and prints every run's median TPOT and SpecDecoding
# line, then a table of medians and ratios. The models are synthetic: this measures the
# engine's speculation overhead at a given acceptance on a bandwidth-bound step, not
# acceptance on real text.
#
# usage: bench/spec_synthetic.sh
#   Env: ROUNDS (default 3), SKIPS (default "0.25 0.1"), K (num_speculative_tokens, default 4),
#   OUT (models and logs, default /tmp/spec_synthetic; the models are deleted at the end unless
#   KEEP=1), VOCAB_GGUF (a GGUF whose tokenizer.* keys both models copy, default
#   /work/models/llama-1b-f16.gguf; none: gen_model's synthetic vocabulary), PAGODA (default
#   build/pagoda), GEN (default build/gen_model), PAGODA_FLAGS (extra flags for every run, e.g.
#   --threads 1).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SKIPS=${SKIPS:-"0.25 0.1"}
K=${K:-4}
OUT=${OUT:-/tmp/spec_synthetic}
PAGODA=${PAGODA:-build/pagoda}
GEN=${GEN:-build/gen_model}
VOCAB_GGUF=${VOCAB_GGUF:-/work/models/llama-1b-f16.gguf}
PAGODA_FLAGS=${PAGODA_FLAGS:-}
mkdir -p "$OUT"
VOC=()
[ "$VOCAB_GGUF" != none ] && VOC=(--gguf-vocab "$VOCAB_GGUF")
T="$OUT/target-q8_0.gguf"
[ -f "$T" ] || "$GEN" --preset llama-3.2-1b --successor --dtype q8_0 --gguf "$T" "${VOC[@]}"
for p in $SKIPS; do
  d="$OUT/draft-skip$p-q8_0.gguf"
  [ -f "$d" ] || "$GEN" --preset llama-3.2-1b --successor --successor-skip "$p" --seed 11 \
    --hidden 256 --layers 2 --heads 4 --kv-heads 2 --head-dim 64 --ffn 512 --dtype q8_0 \
    --gguf "$d" "${VOC[@]}"
done
COMMON=(--batch-size 1 --input-len 128 --output-len 64 --num-iters-warmup 1 --num-iters 2
        --temperature 0 --dataset-name copy --copy-repeat-len 16 --max-model-len 1024
        --kv-cache-memory 256MiB)
CONFIGS=(off ngram)
for p in $SKIPS; do CONFIGS+=("draft$p"); done
spec_of() {
  case "$1" in
    off) echo "" ;;
    ngram) echo "{\"method\": \"ngram\", \"num_speculative_tokens\": $K, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}" ;;
    draft*) echo "{\"method\": \"draft_model\", \"model\": \"$OUT/draft-skip${1#draft}-q8_0.gguf\", \"num_speculative_tokens\": $K}" ;;
  esac
}
for r in $(seq 1 "$ROUNDS"); do
  for c in "${CONFIGS[@]}"; do
    log="$OUT/$c.$r.log"
    s=$(spec_of "$c")
    { date -u; uptime; } > "$log"
    # shellcheck disable=SC2086
    if [ -z "$s" ]; then
      "$PAGODA" bench latency "$T" "${COMMON[@]}" $PAGODA_FLAGS >> "$log" 2>&1
    else
      "$PAGODA" bench latency "$T" "${COMMON[@]}" $PAGODA_FLAGS --speculative-config "$s" >> "$log" 2>&1
    fi
    uptime >> "$log"
    echo "round $r $c: $(grep 'Median TPOT' "$log" | sed 's/ (.*//') $(grep -o 'Mean acceptance length: [0-9.]*' "$log" || true) $(grep -o 'Avg Draft acceptance rate: [0-9.%]*' "$log" || true) ($(tail -1 "$log" | sed 's/.*load/load/'))"
  done
done
python3 - "$OUT" "$ROUNDS" "${CONFIGS[@]}" <<'EOF'
import re, statistics, sys
out, rounds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def tpot(c, r):
    m = re.search(r"Median TPOT: ([0-9.]+)", open(f"{out}/{c}.{r}.log").read())
    return float(m.group(1)) if m else float("nan")
med = {c: statistics.median(tpot(c, r) for r in range(1, rounds + 1)) for c in configs}
print("| config | median TPOT ms | rounds | vs off |")
print("| --- | ---: | --- | ---: |")
for c in configs:
    rs = " ".join(f"{tpot(c, r):.1f}" for r in range(1, rounds + 1))
    print(f"| {c} | {med[c]:.1f} | {rs} | {med['off'] / med[c]:.2f}x |")
EOF
[ "${KEEP:-0}" = 1 ] || rm -f "$T" "$OUT"/draft-skip*-q8_0.gguf
