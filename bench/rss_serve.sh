#!/usr/bin/env bash
# Peak RSS of `pagoda serve` vs `llama-server` on the same GGUF after one completion each
# (issue 20; load-independent). Each server starts alone, answers one /v1/completions request
# (prompt "Hello", 16 tokens, greedy), and its /proc/PID/status VmHWM (peak RSS), VmRSS,
# RssAnon and RssFile are read before it is stopped. Both get a context of CTX tokens and 2
# threads; pagoda's KV cache is sized to llama.cpp's F16 one (--kv-cache-memory KV). pagoda
# runs three ways: "off" (--no-pack-cache), "cold" (empty cache directory: packs and writes
# the packed-weight cache) and "warm" (maps the file "cold" wrote).
#
# usage: bench/rss_serve.sh MODEL.gguf
#   Env: LLAMA_SERVER (default /work/peers/llama.cpp/build/bin/llama-server), PAGODA (default
#   build/pagoda; LLAMA_SERVER=none: pagoda only), CTX (default 2048), KV (default 64MiB: Llama-3.2-1B's 16 layers x 8 KV
#   heads x 64 x K and V x 2 bytes x 2048), PORT (default 18431).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n 2,14p "$0"; exit 2; }
M=$1
LLAMA_SERVER=${LLAMA_SERVER:-/work/peers/llama.cpp/build/bin/llama-server}
PAGODA=${PAGODA:-build/pagoda}
CTX=${CTX:-2048}
KV=${KV:-64MiB}
PORT=${PORT:-18431}
cache=$(mktemp -d /tmp/rss-serve-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$cache"; }
trap cleanup EXIT
export PAGODA_CACHE_DIR=$cache/pack

one() { # label, command...: start, wait for /health, one completion, print the memory lines
  local label=$1; shift
  "$@" > "$cache/$label.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || { echo "rss_serve: $label exited, see:" >&2; tail -5 "$cache/$label.log" >&2; exit 1; }
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "Hello", "max_tokens": 16, "temperature": 0}' > "$cache/$label.json" ||
      { echo "rss_serve: $label: the completion failed" >&2; exit 1; }
  awk -v l="$label" '/^(VmHWM|VmRSS|RssAnon|RssFile):/ {v[$1] = sprintf("%.0f", $2 / 1024)}
       END {printf "%s\t%s\t%s\t%s\t%s\n", l, v["VmHWM:"], v["VmRSS:"], v["RssAnon:"], v["RssFile:"]}' \
      "/proc/$pid/status"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
}

echo "$(basename "$M"): peak RSS after one completion (MiB); $(uptime)"
printf "server\tVmHWM\tVmRSS\tRssAnon\tRssFile\n"
[ "$LLAMA_SERVER" = none ] ||
  one llama-server "$LLAMA_SERVER" -m "$M" -c "$CTX" -t 2 -np 1 --host 127.0.0.1 --port "$PORT"
common=(serve "$M" --threads 2 --max-model-len "$CTX" --kv-cache-memory "$KV" --host 127.0.0.1 --port "$PORT")
one "pagoda off" "$PAGODA" "${common[@]}" --no-pack-cache
one "pagoda cold" "$PAGODA" "${common[@]}"
one "pagoda warm" "$PAGODA" "${common[@]}"
