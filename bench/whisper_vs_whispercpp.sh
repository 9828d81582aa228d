#!/bin/sh
# pagoda vs whisper.cpp on the same random Whisper weights (docs/PERFORMANCE.md,
# "Session 8: Whisper vs whisper.cpp"). Alternates whisper.cpp's whisper-bench
# and pagoda's bench_whisper ROUNDS times and prints each run's encoder and
# decode figures, then the medians and the ratios.
#
#   bench/whisper_vs_whispercpp.sh PRESET ROUNDS [WHISPER_BENCH_FLAGS...]
#
# PRESET: base, large-v3-turbo (any gen_whisper preset). Environment:
#   BUILD     pagoda build dir (default build)
#   WCPP      whisper.cpp's whisper-bench (default /work/peers/whisper.cpp/build/bin/whisper-bench)
#   MODELS    where the checkpoints go (default /work/models/whisper): PRESET-hf/ (pagoda,
#             BF16) and PRESET-f16.bin (whisper.cpp, F16), written once by build/whisper_ggml
#   THREADS   threads for both (default 2)
#   PROUNDS   pagoda encoder rounds per run (median; default 3)
# whisper-bench times one encode (conv stem + encoder + cross K/V of all decoder
# layers) after a warm-up, and 256 single-token decode calls at KV lengths
# 0..255 over the 1500-position cross-attention (ms per call); bench_whisper
# times the encoder and the cross K/V separately (the encode figure compared is
# their sum) and 256 single-token steps after a 4-token prompt (KV lengths
# 5..260), logits and argmax included in both.
set -eu
PRESET=$1
ROUNDS=$2
shift 2
BUILD=${BUILD:-build}
WCPP=${WCPP:-/work/peers/whisper.cpp/build/bin/whisper-bench}
MODELS=${MODELS:-/work/models/whisper}
THREADS=${THREADS:-2}
PROUNDS=${PROUNDS:-3}
HF=$MODELS/$PRESET-hf
GG=$MODELS/$PRESET-f16.bin
mkdir -p "$MODELS"
[ -f "$HF/model.safetensors" ] || "$BUILD/whisper_ggml" gen "$PRESET" "$HF"
[ -f "$GG" ] || "$BUILD/whisper_ggml" convert "$HF" "$GG"
CPUS=$(seq -s, 0 $((THREADS - 1)))
OUT=$(mktemp)
for i in $(seq 1 "$ROUNDS"); do
    echo "round $i $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    "$WCPP" -m "$GG" -t "$THREADS" "$@" 2>&1 |
        awk '/encode time/ {print "  whisper.cpp encode_ms", $5 / $8}
             /decode time/ {print "  whisper.cpp decode_ms", $5 / $8}' | tee -a "$OUT"
    PAGODA_CPUS=$CPUS "$BUILD/bench/bench_whisper" "$HF" "$PROUNDS" 256 bf16 |
        awk '/^BF16/ {for (i = 1; i <= NF; i++) {
                 if ($i == "encoder") e = $(i+1); if ($i == "K/V") c = $(i+1);
                 if ($i == "per" && $(i+1) == "token)") d = substr($(i-2), 2) }
             print "  pagoda encode_ms", e + c; print "  pagoda encoder_only_ms", e;
             print "  pagoda decode_ms", d}' | tee -a "$OUT"
done
awk '{k = $1 " " $2; v[k, ++n[k]] = $3}
     END {
       for (k in n) { m = n[k]
         for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
           if (v[k, j] < v[k, i]) { t = v[k, i]; v[k, i] = v[k, j]; v[k, j] = t }
         med[k] = m % 2 ? v[k, (m + 1) / 2] : (v[k, m / 2] + v[k, m / 2 + 1]) / 2 }
       printf "median whisper.cpp encode %.1f ms, decode %.2f ms/token (%.1f tok/s)\n",
              med["whisper.cpp encode_ms"], med["whisper.cpp decode_ms"], 1000 / med["whisper.cpp decode_ms"]
       printf "median pagoda encoder + cross K/V %.1f ms (encoder alone %.1f), decode %.2f ms/token (%.1f tok/s)\n",
              med["pagoda encode_ms"], med["pagoda encoder_only_ms"], med["pagoda decode_ms"], 1000 / med["pagoda decode_ms"]
       printf "ratio (medians): encode %.2fx faster (encoder alone %.2fx), decode tokens/s %.2fx\n",
              med["whisper.cpp encode_ms"] / med["pagoda encode_ms"],
              med["whisper.cpp encode_ms"] / med["pagoda encoder_only_ms"],
              med["whisper.cpp decode_ms"] / med["pagoda decode_ms"] }' "$OUT"
rm -f "$OUT"
