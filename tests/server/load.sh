#!/usr/bin/env bash
# Load test of `pagoda serve`: 64 concurrent streaming clients against
# MODEL, each sending at least one request and then more until SECONDS have
# passed (a warm-up phase, then the measured one). Passes when every request
# completed (HTTP 200, ends with data: [DONE], a finish_reason), no request
# failed, every client completed at least one in each phase, all KV blocks
# are free afterwards and the server's RSS after the run is within 10%
# (+16 MiB) of its RSS after warm-up (no leak per request). Nothing depends
# on speed: on a loaded machine the phases only take longer than SECONDS
# (a request gets PAGODA_LOAD_REQ_TIMEOUT seconds, default 300, before it
# counts as failed, so a hang fails instead of waiting forever).
# usage: load.sh MODEL SECONDS PAGODA [EMULATOR ARGS... before PAGODA]
set -euo pipefail
MODEL=$1
SECONDS_TOTAL=$2
shift 2
CLIENTS=${PAGODA_LOAD_CLIENTS:-64}
TMP=$(mktemp -d)
SPID=""
cleanup() {
  if [ -n "$SPID" ] && kill -0 "$SPID" 2>/dev/null; then kill -TERM "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
die() { echo "FAIL: $*" >&2; tail -n 20 "$TMP/err" >&2 || true; exit 1; }

# A small KV cache (all of it touched during warm-up): the cache's pages are
# touched lazily, so with the default size RSS would grow with every new
# block the prefix cache keeps, which is not a leak.
"$@" serve "$MODEL" --port 0 --max-num-seqs 64 --kv-cache-memory "${PAGODA_LOAD_KV:-16MiB}" >"$TMP/out" 2>"$TMP/err" &
SPID=$!
for _ in $(seq 1 600); do
  grep -q '^PORT=' "$TMP/out" 2>/dev/null && break
  kill -0 "$SPID" 2>/dev/null || die "server exited at start"
  sleep 0.1
done
PORT=$(sed -n 's/^PORT=//p' "$TMP/out")
URL="http://127.0.0.1:$PORT"
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$SPID/status"; }

PROMPTS=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big bird"
         "There was a girl who loved" "The sun was shining and")
REQ_TIMEOUT=${PAGODA_LOAD_REQ_TIMEOUT:-300}
client() { # client INDEX DEADLINE PHASE: one request, then more until DEADLINE
  local i=$1 deadline=$2 phase=$3 n=0
  while [ "$n" -eq 0 ] || [ "$(date +%s)" -lt "$deadline" ]; do
    local p=${PROMPTS[$(( (i + n) % ${#PROMPTS[@]} ))]}
    local mt=$(( 8 + (i * 7 + n * 3) % 40 ))
    local body="{\"prompt\": \"$p\", \"max_tokens\": $mt, \"temperature\": 0.8, \"seed\": $((i * 1000 + n)), \"stream\": true, \"stream_options\": {\"include_usage\": true}}"
    local code
    code=$(curl -sN -m "$REQ_TIMEOUT" -o "$TMP/c$i.sse" -w '%{http_code}' "$URL/v1/completions" \
      -H 'Content-Type: application/json' --data-binary "$body") || code="curl-$?"
    if [ "$code" != 200 ] || ! tail -n 2 "$TMP/c$i.sse" | grep -q '^data: \[DONE\]$' ||
       ! grep -q '"finish_reason":"\(stop\|length\)"' "$TMP/c$i.sse"; then
      echo "client $i request $n: HTTP $code" >>"$TMP/errors"
      head -c 300 "$TMP/c$i.sse" >>"$TMP/errors"
      echo >>"$TMP/errors"
    else
      echo ok >>"$TMP/ok.$phase.$i"
    fi
    n=$((n + 1))
  done
}

# warm-up: a few rounds so that allocator pools and caches reach steady state
WARM=$(( SECONDS_TOTAL / 3 > 2 ? SECONDS_TOTAL / 3 : 2 ))
END=$(( $(date +%s) + WARM ))
for i in $(seq 1 "$CLIENTS"); do client "$i" "$END" warm & done
for p in $(jobs -p); do [ "$p" = "$SPID" ] || wait "$p"; done
RSS_WARM=$(rss)
END=$(( $(date +%s) + SECONDS_TOTAL ))
for i in $(seq 1 "$CLIENTS"); do client "$i" "$END" run & done
for p in $(jobs -p); do [ "$p" = "$SPID" ] || wait "$p"; done
RSS_END=$(rss)

OK=$(cat "$TMP"/ok.run.* 2>/dev/null | wc -l)
ERR=$( [ -f "$TMP/errors" ] && grep -c '^client' "$TMP/errors" || echo 0)
echo "load: $CLIENTS clients, $OK requests ok, $ERR failed; RSS warm ${RSS_WARM} KiB, end ${RSS_END} KiB"
[ "$ERR" = 0 ] || { head -n 20 "$TMP/errors" >&2; die "$ERR requests failed"; }
for phase in warm run; do
  for i in $(seq 1 "$CLIENTS"); do
    [ -s "$TMP/ok.$phase.$i" ] || die "client $i completed no request in the $phase phase"
  done
done
for _ in $(seq 1 50); do
  curl -s "$URL/metrics" >"$TMP/metrics"
  grep -q '^vllm:num_requests_running{[^}]*} 0$' "$TMP/metrics" &&
    grep -q '^vllm:kv_cache_usage_perc{[^}]*} 0$' "$TMP/metrics" && break
  sleep 0.1
done
grep -q '^vllm:kv_cache_usage_perc{[^}]*} 0$' "$TMP/metrics" || die "KV blocks in use after the run: $(grep kv_cache_usage "$TMP/metrics")"
grep -q '^vllm:num_requests_waiting{[^}]*} 0$' "$TMP/metrics" || die "requests still waiting"
LIMIT=$(( RSS_WARM + RSS_WARM / 10 + 16384 ))
if [ -z "${PAGODA_LOAD_SKIP_RSS:-}" ]; then
  [ "$RSS_END" -le "$LIMIT" ] || die "RSS grew from ${RSS_WARM} KiB to ${RSS_END} KiB"
else
  echo "load: RSS check skipped (PAGODA_LOAD_SKIP_RSS)"
fi
kill -TERM "$SPID"
wait "$SPID" || die "server exit code $? on SIGTERM"
SPID=""
echo PASS
