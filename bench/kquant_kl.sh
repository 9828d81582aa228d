#!/usr/bin/env bash
# Issue 23's accuracy check: pagoda's KL divergence from the F16 model vs llama.cpp's
# (`llama-perplexity --kl-divergence`) on the same files llama-quantize wrote, the same tokens.
#   1. REF (default: gen_model's random model, hidden 512, 4 layers, 8 / 4 heads, ffn 1536,
#      vocab 4096, F16, std 0.05, seed 7; written to $DIR/r-f16.gguf if missing)
#   2. llama-quantize REF -> $DIR/r-TYPE.gguf for every TYPE
#   3. llama-perplexity -m REF -f TEXT -c CTX --chunks CHUNKS --kl-divergence-base base.kld, then
#      llama-perplexity -m r-TYPE.gguf --kl-divergence-base base.kld --kl-divergence per TYPE
#   4. build/gguf_kl base.kld REF r-TYPE.gguf... (pagoda, the tokens of base.kld, the same rows)
# Prints one table: per file llama.cpp's Mean KLD +- and "Same top p", pagoda's mean KLD +- and
# same top-1, and pagoda / llama.cpp.
#
# usage: bench/kquant_kl.sh [REF.gguf]
#   Env: LLAMA_BIN (default /work/peers/llama.cpp/build/bin), DIR (default /work/models/kl),
#   TYPES (default "Q4_K_M Q5_K_M Q6_K IQ4_XS Q4_K_S Q3_K_M Q2_K IQ4_NL"), CTX (256), CHUNKS
#   (16), TEXT (default: the first 30000 bytes of docs/QUANTIZATION.md at commit 7283e00).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BIN=${LLAMA_BIN:-/work/peers/llama.cpp/build/bin}
DIR=${DIR:-/work/models/kl}
TYPES=${TYPES:-Q4_K_M Q5_K_M Q6_K IQ4_XS Q4_K_S Q3_K_M Q2_K IQ4_NL}
CTX=${CTX:-256}
CHUNKS=${CHUNKS:-16}
mkdir -p "$DIR"
REF=${1:-$DIR/r-f16.gguf}
if [ ! -f "$REF" ]; then
  build/gen_model --gguf "$REF" --hidden 512 --layers 4 --heads 8 --kv-heads 4 --ffn 1536 \
      --vocab 4096 --dtype f16 --std 0.05 --seed 7
fi
base=$(basename "$REF" .gguf)
TEXT=${TEXT:-$DIR/text.txt}
[ -f "$TEXT" ] || git show 7283e00:docs/QUANTIZATION.md | head -c 30000 > "$TEXT"
KLD=$DIR/$base.kld
"$LLAMA_BIN/llama-perplexity" -m "$REF" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t 2 \
    --kl-divergence-base "$KLD" > "$DIR/$base.ppl.log" 2>&1 ||
  { echo "kquant_kl: llama-perplexity base failed, see $DIR/$base.ppl.log" >&2; exit 1; }
files=()
for t in $TYPES; do
  lt=$(echo "$t" | tr 'A-Z' 'a-z')
  f=$DIR/${base%-f16}-$lt.gguf
  [ -f "$f" ] || "$LLAMA_BIN/llama-quantize" "$REF" "$f" "$t" 2 > "$f.quantize.log" 2>&1 ||
    { echo "kquant_kl: llama-quantize $t failed, see $f.quantize.log" >&2; exit 1; }
  "$LLAMA_BIN/llama-perplexity" -m "$f" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t 2 \
      --kl-divergence-base "$KLD" --kl-divergence > "$f.kld.log" 2>&1 ||
    { echo "kquant_kl: llama-perplexity $t failed, see $f.kld.log" >&2; exit 1; }
  files+=("$f")
done
build/gguf_kl "$KLD" "$REF" "${files[@]}" --threads 2 --chunks "$CHUNKS" 2>/dev/null \
    > "$DIR/$base.pagoda.txt"
python3 - "$DIR/$base.pagoda.txt" "${files[@]}" <<'EOF'
import os, re, sys
pg = {}
for l in open(sys.argv[1]):
    c = l.split()
    if len(c) == 5 and c[0].endswith(".gguf"):
        pg[c[0]] = (float(c[1]), float(c[2]), c[4])
print("| file | llama.cpp mean KLD | llama.cpp same top p | pagoda mean KLD | pagoda same top-1 | pagoda / llama.cpp |")
print("| --- | --- | --- | --- | --- | --- |")
for f in sys.argv[2:]:
    log = open(f + ".kld.log").read()
    k = re.search(r"Mean\s+KLD:\s+([0-9.e-]+)\s+±\s+([0-9.e-]+)", log)
    t = re.search(r"Same top p:\s+([0-9.]+)\s+±\s+([0-9.]+)", log)
    name = os.path.basename(f)
    m, s, top = pg[name]
    lk = float(k.group(1))
    print(f"| {name} | {lk:.6f} ± {k.group(2)} | {t.group(1)} ± {t.group(2)} % | {m:.6f} ± {s:.6f} | {top} | {m / lk:.3f} |")
EOF
