#!/usr/bin/env bash
# Faults of `pagoda serve` (issue 21, "Faults under load"):
#  a. KV exhaustion: a KV cache of 1 MiB (~50 blocks of 16 tokens: about
#     three of these requests) and 12 concurrent greedy requests of 200..300
#     tokens. The scheduler preempts (recompute) and every request's output
#     equals the same request run alone on an unloaded server (batch
#     invariance); vllm:num_preemptions_total shows it happened; KV usage is
#     back to 0 afterwards.
#  (a body a little over --max-request-bytes is read, then answered 413)
#  b. (SIGTERM under load: tests/server/shutdown.sh)
#  c. (--kv-cache-memory above the machine: cmake/tests.cmake,
#     pagoda_kv_cache_memory_too_big)
#  d. the model file truncated while the server runs: a file shorter than its
#     header says is refused at start with the numbers; truncated after it
#     was mapped, the next read of a lost page ends the server with a message
#     naming the file and exit code 74 (model/mapped_file.h), not a SIGBUS
#     core dump.
# usage: faults.sh MODEL_DIR PAGODA [EMULATOR ARGS... before PAGODA]
set -euo pipefail
MODEL=$1
shift
PAGODA=("$@")
. "$(dirname "$0")/lib.sh"

PROMPTS=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day, a big bird"
         "There was a girl who loved" "The sun was shining and" "Tim had a red ball" "The cat sat")
NREQ=12
body() { # I -> a greedy request of 200..300 tokens
  local i=$1
  echo "{\"prompt\": \"${PROMPTS[$((i % 8))]}\", \"max_tokens\": $((200 + (i * 37) % 101)), \"temperature\": 0, \"ignore_eos\": true}"
}
complete() { # I OUT
  local code
  code=$(curl -s -o "$2" -w '%{http_code}' "$URL/v1/completions" -H 'Content-Type: application/json' \
    --data-binary "$(body "$1")") || code="curl-$?"
  [ "$code" = 200 ] || echo "request $1: HTTP $code" >>"$TMP/errors"
}
metric() { curl -s "$URL/metrics" | sed -n "s/^$1{[^}]*} //p"; }

# ---- a: unloaded reference, then all at once in a cache that cannot hold them
start_lib_server --kv-cache-memory 1MiB --max-num-seqs 16 --no-prefix-caching
for i in $(seq 0 $((NREQ - 1))); do complete "$i" "$TMP/ref.$i"; done
[ "$(metric vllm:num_preemptions_total)" = 0 ] || die "preemptions while running one request at a time"
for i in $(seq 0 $((NREQ - 1))); do complete "$i" "$TMP/load.$i" & done
wait $(jobs -p | grep -v "^$SPID$")
[ ! -f "$TMP/errors" ] || die "$(cat "$TMP/errors")"
PRE=$(metric vllm:num_preemptions_total)
[ "${PRE%.*}" -gt 0 ] || die "no preemption: the cache held every request (raise N or lower the cache)"
for i in $(seq 0 $((NREQ - 1))); do
  a=$(jq -c '[.choices[0].text, .choices[0].finish_reason, .usage.completion_tokens]' "$TMP/ref.$i")
  b=$(jq -c '[.choices[0].text, .choices[0].finish_reason, .usage.completion_tokens]' "$TMP/load.$i")
  [ "$a" = "$b" ] || die "request $i under KV pressure differs from its unloaded run: $a vs $b"
done
for _ in $(seq 1 50); do [ "$(metric vllm:kv_cache_usage_perc)" = 0 ] && break; sleep 0.1; done
[ "$(metric vllm:kv_cache_usage_perc)" = 0 ] || die "KV blocks in use after the load"
kill -TERM "$SPID"; wait "$SPID" || die "server exit code $?"; SPID=""
echo "ok: KV exhaustion: $NREQ requests, $PRE preemptions, every output equal to its unloaded run"

# ---- a body a little over --max-request-bytes is read before the 413: a
# server that answered during the upload and closed made clients see a
# connection reset instead of the 413 (the soak's "oversized: fetch failed")
start_lib_server --max-request-bytes 4KiB
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n' >&3
if IFS= read -r -t 1 line <&3; then die "answered before the body was sent: $line"; fi
head -c 5000 /dev/zero | tr '\0' ' ' >&3
IFS= read -r -t 10 line <&3 || die "no answer after the body"
case "$line" in "HTTP/1.1 413"*) ;; *) die "a body over the limit: $line" ;; esac
exec 3>&-
kill -TERM "$SPID"; wait "$SPID" || die "server exit code $?"; SPID=""
echo "ok: a body a little over the limit is read, then answered 413"

# ---- d: a model file truncated before the start, and while mapped
COPY="$TMP/model"
mkdir "$COPY"
cp "$MODEL"/*.json "$MODEL"/*.safetensors "$COPY/"
chmod u+w "$COPY"/*
W="$COPY/model.safetensors"
SIZE=$(stat -c %s "$W")
truncate -s $((SIZE - 4096)) "$W"
rc=0
"${PAGODA[@]}" generate "$COPY" --prompt "Once" --max-tokens 2 >"$TMP/gen.out" 2>"$TMP/gen.err" || rc=$?
[ "$rc" = 1 ] || die "a truncated model file: generate exit $rc, expected 1"
grep -q "past the end of the file" "$TMP/gen.err" || die "truncated at start: $(cat "$TMP/gen.err")"

cp "$MODEL/model.safetensors" "$W"
MODEL="$COPY" start_lib_server --kv-cache-memory 4MiB
curl -sf -o /dev/null "$URL/v1/completions" -H 'Content-Type: application/json' \
  --data-binary '{"prompt": "Once", "max_tokens": 4}' || die "no answer before the truncation"
truncate -s 0 "$W"
# the next forward pass reads weights from the mapping (or not: a model
# whose weights were all repacked at load keeps serving)
curl -s -o /dev/null --max-time 30 "$URL/v1/completions" -H 'Content-Type: application/json' \
  --data-binary '{"prompt": "The little dog", "max_tokens": 4}' || true
rc=0
for _ in $(seq 1 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SPID" 2>/dev/null; then
  die "the server neither failed nor kept the weights it needs: still running after the truncation"
fi
wait "$SPID" || rc=$?
SPID=""
[ "$rc" = 74 ] || die "server exit $rc after its model file was truncated (74 expected; 135 = SIGBUS)"
grep -q "pagoda: fatal: model file $W changed while in use: byte [0-9]* of the $SIZE bytes mapped at load is gone" \
  "$TMP/err.$N" || die "no message naming the file: $(tail -n 3 "$TMP/err.$N")"
echo "ok: a truncated model file is refused at start, and ends the server cleanly (exit 74) when truncated while mapped"
echo PASS
