#!/usr/bin/env bash
# tools/gguf_kl on a small random model (gen_model, F16) and GGUF copies of it with every
# linear layer in Q8_0 and in Q2_K, over the tokens of a .kld header written here
# (llama-perplexity's "_logits_" layout: n_ctx 64, vocab 512, 3 chunks):
#   - the F16 file against itself, both at the same compute dtype: KL exactly 0, top-1 100%;
#   - 0 < KL(Q8_0) < KL(Q2_K) (the coarser format is further from the reference);
#   - a file without the "_logits_" magic, a token id outside the vocab: exit 1, one line.
# usage: check_gguf_kl.sh GEN_MODEL GGUF_KL   (registered by cmake/tests.cmake)
set -euo pipefail
gen=$1
kl=$2
d=$(mktemp -d /tmp/check_gguf_kl-XXXXXX)
trap 'rm -rf "$d"' EXIT
for t in f16 q8_0 q2_k; do
  "$gen" --gguf "$d/m-$t.gguf" --hidden 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 \
      --vocab 512 --dtype f16 --gguf-dtype "$t" --std 0.05 --seed 3 > /dev/null
done
python3 - "$d" <<'EOF'
import random, struct, sys
d = sys.argv[1]
r = random.Random(5)
n, v, c = 64, 512, 3
tok = [1] + [r.randrange(3, v) for _ in range(n * c - 1)]
hdr = b"_logits_" + struct.pack("<Iii", n, v, c)
open(f"{d}/ok.kld", "wb").write(hdr + struct.pack(f"<{n * c}i", *tok))
open(f"{d}/magic.kld", "wb").write(b"_logitz_" + hdr[8:] + struct.pack(f"<{n * c}i", *tok))
tok[70] = v
open(f"{d}/range.kld", "wb").write(hdr + struct.pack(f"<{n * c}i", *tok))
EOF
out=$("$kl" "$d/ok.kld" "$d/m-f16.gguf" "$d/m-f16.gguf" "$d/m-q8_0.gguf" "$d/m-q2_k.gguf" \
      --ref-compute auto --threads 1 2>/dev/null)
echo "$out"
echo "$out" | python3 -c '
import sys
rows = {l.split()[0]: l.split() for l in sys.stdin if l.split() and l.split()[0].endswith(".gguf")}
f16, q8, q2 = (float(rows[k][1]) for k in ("m-f16.gguf", "m-q8_0.gguf", "m-q2_k.gguf"))
assert f16 == 0.0 and rows["m-f16.gguf"][4] == "100.00%", ("self KL", rows["m-f16.gguf"])
assert 0 < q8 < q2, ("ordering", q8, q2)
print("check_gguf_kl: self 0, Q8_0", q8, "< Q2_K", q2)
'
echo "$out" | grep -q '3 chunks of 64 tokens, 31 rows each (positions 32..62)'
for bad in magic range; do
  if "$kl" "$d/$bad.kld" "$d/m-f16.gguf" "$d/m-q8_0.gguf" > "$d/err" 2>&1; then
    echo "check_gguf_kl: $bad.kld was accepted" >&2
    exit 1
  fi
  grep -q '^gguf_kl: ' "$d/err" || { echo "check_gguf_kl: no error line for $bad.kld" >&2; exit 1; }
done
echo "check_gguf_kl: ok"
