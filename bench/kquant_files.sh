#!/usr/bin/env bash
# The GGUF files of issue 23's checks, written by llama.cpp's own llama-quantize from F16 GGUFs
# of the Llama-3.2-1B and Qwen3-1.7B shapes (gen_model, random weights). Files already present
# are kept. Then every file runs once in `pagoda generate` (4 greedy tokens) as a load check.
#   $MODELS_DIR/llama-1b-f16.gguf      build/gen_model --preset llama-3.2-1b --dtype f16 --gguf F
#   $MODELS_DIR/qwen3-1.7b-f16.gguf    build/gen_model --preset qwen3-1.7b --dtype f16 --gguf F
#   $MODELS_DIR/SHAPE-TYPE.gguf        llama-quantize SHAPE-f16.gguf SHAPE-type.gguf TYPE 2
# TYPES: the speed set Q4_K_M Q5_K_M Q6_K IQ4_XS, then the correctness-only Q4_K_S Q3_K_M Q2_K
# IQ4_NL, and Q8_0 of the 1B shape (bench/rss_serve.sh). IQ4_XS / IQ4_NL need no imatrix
# (llama-quantize refuses only IQ1 / IQ2 / Q2_K_S without one).
#
# usage: bench/kquant_files.sh [SHAPE...]   (default: llama-1b qwen3-1.7b)
#   Env: LLAMA_BIN (default /work/peers/llama.cpp/build/bin), MODELS_DIR (default /work/models),
#   TYPES (default all of the above), NO_RUN=1 (skip the pagoda generate check).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN=${LLAMA_BIN:-/work/peers/llama.cpp/build/bin}
MODELS_DIR=${MODELS_DIR:-/work/models}
TYPES=${TYPES:-Q4_K_M Q5_K_M Q6_K IQ4_XS Q4_K_S Q3_K_M Q2_K IQ4_NL Q8_0}
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=(llama-1b qwen3-1.7b)
mkdir -p "$MODELS_DIR"
for s in "${SHAPES[@]}"; do
  src=$MODELS_DIR/$s-f16.gguf
  if [ ! -f "$src" ]; then
    case $s in
      llama-1b) preset=llama-3.2-1b ;;
      qwen3-1.7b) preset=qwen3-1.7b ;;
      *) echo "kquant_files: unknown shape $s" >&2; exit 2 ;;
    esac
    build/gen_model --preset "$preset" --dtype f16 --gguf "$src"
  fi
  for t in $TYPES; do
    [ "$t" = Q8_0 ] && [ "$s" != llama-1b ] && continue
    f=$MODELS_DIR/$s-$(echo "$t" | tr 'A-Z' 'a-z').gguf
    if [ ! -f "$f" ]; then
      echo "== llama-quantize $s $t" >&2
      "$LLAMA_BIN/llama-quantize" "$src" "$f.tmp" "$t" 2 > "$f.quantize.log" 2>&1 ||
        { echo "kquant_files: llama-quantize failed, see $f.quantize.log" >&2; exit 1; }
      mv "$f.tmp" "$f"
    fi
    if [ "${NO_RUN:-0}" != 1 ]; then
      echo "== pagoda generate $(basename "$f")" >&2
      build/pagoda generate "$f" --prompt "Once upon a time" --max-tokens 4 --temperature 0 \
          --threads 2 --max-model-len 256 --kv-cache-memory 64MiB > "$f.generate.log" 2>&1 ||
        { echo "kquant_files: pagoda generate failed, see $f.generate.log" >&2; exit 1; }
      python3 bench/gguf_stream_bytes.py "$f" -v 2>&1 | tr '\n' ' ' | sed "s|^|  $(basename "$f"): streamed bytes |"
      echo
    fi
  done
done
