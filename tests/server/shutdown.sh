#!/usr/bin/env bash
# Graceful shutdown of `pagoda serve` under load (issue 20; vLLM's
# --shutdown-timeout). Three servers:
#  1. --shutdown-timeout 600 (generous: sanitizer builds are slow; the wait
#     ends when the requests do) and 24 streaming + 8 non-streamed requests in
#     flight at SIGTERM: new connections are refused at once, a request on a
#     kept-alive connection gets 503 + `Connection: close` (/health too),
#     /metrics still answers, and every request in flight finishes normally
#     (finish_reason length, usage, [DONE]); exit 0 with the totals logged.
#  2. --shutdown-timeout 0.2 with more work queued than fits in it (one
#     sequence at a time): the requests still running after 1 s end with
#     finish_reason "abort" -- streams with a final chunk, usage and [DONE],
#     non-streamed requests with a 200 response; exit 0.
#  3. the default (0, as vLLM): SIGINT aborts what runs at once, the same way.
# usage: shutdown.sh MODEL PAGODA [EMULATOR ARGS... before PAGODA]
set -euo pipefail
MODEL=$1
shift
PAGODA=("$@")
. "$(dirname "$0")/lib.sh"

# stream I MAX_TOKENS: a streamed completion into $TMP/s.I (curl's exit code in $TMP/s.I.rc)
stream() {
  local rc=0
  curl -sN -o "$TMP/s.$1" "$URL/v1/completions" -H 'Content-Type: application/json' --data-binary \
    "{\"prompt\": \"Once upon a time\", \"max_tokens\": $2, \"ignore_eos\": true, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}" ||
    rc=$?
  echo "$rc" >"$TMP/s.$1.rc"
}
# plain I MAX_TOKENS: a non-streamed completion into $TMP/p.I (HTTP code in $TMP/p.I.code)
plain() {
  curl -s -o "$TMP/p.$1" -w '%{http_code}' "$URL/v1/completions" -H 'Content-Type: application/json' \
    --data-binary "{\"prompt\": \"The little dog\", \"max_tokens\": $2, \"ignore_eos\": true, \"temperature\": 0}" \
    >"$TMP/p.$1.code" || echo "curl-$?" >"$TMP/p.$1.code"
}
# wait_inflight N: every one of the N requests sent so far reached the server
# (running, waiting or finished), so that each was admitted before the signal
# (a request sent after it gets 503 or a refused connection, by design)
wait_inflight() {
  local n=0
  for _ in $(seq 1 1200); do
    n=$(curl -s "$URL/metrics" | awk '/^vllm:num_requests_(running|waiting)\{/ {s += $2}
      /^vllm:request_success_total\{/ {s += $2} END {print s + 0}')
    [ "$n" -ge "$1" ] && return 0
    sleep 0.1
  done
  die "only $n of $1 requests reached the server"
}
# stream_ends I REASON: stream I finished with REASON, then usage, then [DONE]
stream_ends() {
  local f="$TMP/s.$1"
  [ "$(cat "$f.rc")" = 0 ] || die "stream $1: curl exit $(cat "$f.rc")"
  tail -n 2 "$f" | grep -q '^data: \[DONE\]$' || die "stream $1: no [DONE] at the end: $(tail -c 300 "$f")"
  grep -q "\"finish_reason\":\"$2\"" "$f" || die "stream $1: no finish_reason $2: $(tail -c 400 "$f")"
  grep -q '"usage":{"prompt_tokens":' "$f" || die "stream $1: no usage chunk"
}
stop_and_check_exit() { # SIGNAL
  wait "$SPID" || die "server exit code $? after $1"
  SPID=""
}
# A kept-alive connection (bash /dev/tcp): one GET now, another after the signal.
open_keepalive() {
  exec 3<>"/dev/tcp/127.0.0.1/$PORT"
  printf 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' >&3
  IFS= read -r -t 10 line <&3 || die "no answer on the kept-alive connection"
  case "$line" in "HTTP/1.1 200"*) ;; *) die "kept-alive /health: $line" ;; esac
  while IFS= read -r -t 5 line <&3 && [ "$line" != $'\r' ]; do :; done
}
keepalive_request() { # PATH -> the response's head in $TMP/ka
  printf 'GET %s HTTP/1.1\r\nHost: x\r\n\r\n' "$1" >&3
  : >"$TMP/ka"
  while IFS= read -r -t 10 line <&3 && [ "$line" != $'\r' ]; do echo "$line" >>"$TMP/ka"; done
}

# ---- 1: everything in flight finishes within the timeout
start_lib_server --shutdown-timeout 600 --max-num-seqs 64 --keep-alive-timeout 600
open_keepalive
for i in $(seq 1 24); do stream "$i" 100 & done
for i in $(seq 1 8); do plain "$i" 100 & done
wait_inflight 32
kill -TERM "$SPID"
for _ in $(seq 1 50); do grep -q 'not accepting new requests' "$TMP/err.$N" && break; sleep 0.1; done
grep -q 'SIGTERM received: not accepting new requests; [0-9]* in flight' "$TMP/err.$N" ||
  die "no drain line in the log"
rc=0
curl -s -o /dev/null --max-time 10 "$URL/health" || rc=$?
[ "$rc" = 7 ] || die "a new connection during the drain: curl exit $rc, expected 7 (refused)"
keepalive_request /v1/models
grep -q '^HTTP/1.1 503' "$TMP/ka" || die "kept-alive request during the drain: $(head -1 "$TMP/ka")"
grep -qi '^Connection: close' "$TMP/ka" || die "503 during the drain without Connection: close"
exec 3>&-
wait $(jobs -p | grep -v "^$SPID$")
stop_and_check_exit SIGTERM
for i in $(seq 1 24); do stream_ends "$i" length; done
for i in $(seq 1 8); do
  [ "$(cat "$TMP/p.$i.code")" = 200 ] || die "non-streamed $i: HTTP $(cat "$TMP/p.$i.code")"
  jq -e '.choices[0].finish_reason == "length" and .usage.completion_tokens == 100' "$TMP/p.$i" >/dev/null ||
    die "non-streamed $i: $(head -c 300 "$TMP/p.$i")"
done
grep -q 'requests finished (stop 0, length 32, abort 0, error 0)' "$TMP/err.$N" ||
  die "no totals line: $(tail -n 3 "$TMP/err.$N")"
echo "ok: drain within --shutdown-timeout (32 requests completed, new connections refused)"

# ---- 2: the timeout passes: what still runs ends with finish_reason abort
rm -f "$TMP"/s.* "$TMP"/p.*
# 0.2 s: 29 requests of 480 tokens at one sequence a step; a quiet machine
# finishes ~2 of them in that time (stories260K: ~0.25 ms a token), so at
# least 4 of the 6 streams are still running or queued at the timeout
start_lib_server --shutdown-timeout 0.2 --max-num-seqs 1
# 20 requests ahead of the tested ones keep the queue long however fast the
# machine is
for i in $(seq 10 29); do plain "$i" 480 & done
wait_inflight 20
for i in $(seq 1 6); do stream "$i" 480 & done
for i in $(seq 1 3); do plain "$i" 480 & done
wait_inflight 29
kill -TERM "$SPID"
wait $(jobs -p | grep -v "^$SPID$")
stop_and_check_exit SIGTERM
for i in $(seq 1 6); do stream_ends "$i" '\(length\|abort\)'; done
aborted=$( (grep -l '"finish_reason":"abort"' "$TMP"/s.[0-9] || true) | wc -l)
[ "$aborted" -ge 4 ] || die "only $aborted of 6 streams aborted at the timeout"
for i in $(seq 1 3); do
  [ "$(cat "$TMP/p.$i.code")" = 200 ] || die "non-streamed $i: HTTP $(cat "$TMP/p.$i.code")"
  jq -e '.choices[0].finish_reason == "abort" or .choices[0].finish_reason == "length"' "$TMP/p.$i" \
    >/dev/null || die "non-streamed $i: $(head -c 300 "$TMP/p.$i")"
done
grep -q 'still running after [0-9.]* s: ended with finish_reason "abort"' "$TMP/err.$N" ||
  die "no abort line in the log"
echo "ok: --shutdown-timeout 0.2 ends the rest with finish_reason abort ($aborted streams)"

# ---- 3: the default (0): SIGINT aborts at once
rm -f "$TMP"/s.* "$TMP"/p.*
start_lib_server --max-num-seqs 2
for i in $(seq 10 29); do plain "$i" 480 & done   # ahead of the streams, as above
wait_inflight 20
for i in $(seq 1 4); do stream "$i" 480 & done
wait_inflight 24
kill -INT "$SPID"
wait $(jobs -p | grep -v "^$SPID$")
stop_and_check_exit SIGINT
for i in $(seq 1 4); do stream_ends "$i" abort; done
grep -q 'SIGINT received' "$TMP/err.$N" || die "no SIGINT line"
echo "ok: default --shutdown-timeout 0 aborts at once"
echo PASS
