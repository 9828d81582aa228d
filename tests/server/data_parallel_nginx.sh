#!/usr/bin/env bash
# Data parallelism: two `pagoda serve` replicas behind nginx with the shipped
# configuration (deploy/nginx/pagoda-dp.conf; only its listen port and
# replica addresses are rewritten). Checks:
#   - /health and a non-streaming chat completion through nginx;
#   - streaming: every SSE event well formed, ends with [DONE], and events
#     are passed on as they come (not buffered): a second nginx with the same
#     configuration fronts a stand-in upstream that sends one event and then
#     waits until the client has seen it -- a buffering proxy would hold it
#     back and the client would wait in vain (no timing involved);
#   - both replicas serve (least_conn spreads requests);
#   - failover: with one replica killed, every request still succeeds;
#   - with both down, nginx answers 502.
# Every process started here is stopped on every exit path (trap).
# usage: data_parallel_nginx.sh MODEL CHAT_TEMPLATE CONF PAGODA [ARGS...]
set -euo pipefail
MODEL=$1
TEMPLATE=$2
CONF=$3
shift 3
PAGODA=("$@")
NGINX=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
[ -x "$NGINX" ] || { echo "FAIL: nginx not found (scripts/install-deps.sh installs it)" >&2; exit 1; }

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    # nginx's master and the servers exit on TERM; don't wait forever on one that doesn't
    local end=$((SECONDS + 10))
    while [ $SECONDS -lt $end ]; do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

die() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/*.log "$TMP"/ng*/error.log; do
    [ -f "$f" ] && { echo "--- $f:" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}

# Every wait polls until a deadline of WAIT_S seconds of wall time (a slow
# or loaded machine only takes longer; nothing here is timed otherwise).
WAIT_S=${WAIT_S:-120}

# poll until URL answers 200
wait_http() {
  local end=$((SECONDS + WAIT_S))
  while [ $SECONDS -lt $end ]; do
    if [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" = 200 ]; then return 0; fi
    sleep 0.1
  done
  die "$1 not ready after $WAIT_S s"
}

# replica I: pagoda serve on an ephemeral port (--port 0 prints PORT=)
declare -A RPORT RPID
start_replica() {
  local i=$1 args=(--port 0 --max-model-len 256)
  [ -n "$TEMPLATE" ] && args+=(--chat-template "$TEMPLATE")
  "${PAGODA[@]}" serve "$MODEL" "${args[@]}" >"$TMP/replica$i.out" 2>"$TMP/replica$i.log" &
  RPID[$i]=$!
  PIDS+=("${RPID[$i]}")
  local end=$((SECONDS + WAIT_S))
  while [ $SECONDS -lt $end ]; do
    grep -q '^PORT=' "$TMP/replica$i.out" 2>/dev/null && break
    kill -0 "${RPID[$i]}" 2>/dev/null || die "replica $i exited at start"
    sleep 0.1
  done
  RPORT[$i]=$(sed -n 's/^PORT=//p' "$TMP/replica$i.out")
  [ -n "${RPORT[$i]}" ] || die "replica $i printed no port"
}

# a port nobody listens on right now (the kernel's pick); nginx start is
# retried with another if someone takes it meanwhile
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_nginx NAME UPSTREAM_PORT_1 UPSTREAM_PORT_2: sets NGPORT, NGURL
start_nginx() {
  local name=$1 dir="$TMP/$1" g="daemon off; pid $TMP/$1/nginx.pid;"
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && g="$g user root;"   # workers must read the temp dirs under $TMP
  for attempt in 1 2 3 4 5; do
    NGPORT=$(free_port)
    # the shipped file with its ports replaced, plus paths inside the prefix
    sed -e "s/listen 8000;/listen 127.0.0.1:$NGPORT;/" -e "s/127\.0\.0\.1:8001 /127.0.0.1:$2 /" \
        -e "s/127\.0\.0\.1:8002 /127.0.0.1:$3 /" \
        -e "s|^http {|http {\n    access_log $dir/access.log;\n    client_body_temp_path $dir/body;\n    proxy_temp_path $dir/proxy;\n    fastcgi_temp_path $dir/fastcgi;\n    uwsgi_temp_path $dir/uwsgi;\n    scgi_temp_path $dir/scgi;|" \
        "$CONF" >"$dir/nginx.conf"
    grep -q "listen 127.0.0.1:$NGPORT;" "$dir/nginx.conf" && grep -q "127.0.0.1:$2 " "$dir/nginx.conf" &&
      grep -q "127.0.0.1:$3 " "$dir/nginx.conf" || die "the config's listen / server lines changed: update this test"
    "$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" -g "$g" >"$dir/stdout" 2>&1 &
    local pid=$!
    # ready when it accepts connections; an exit means the port was taken or the config is bad
    local end=$((SECONDS + WAIT_S))
    while [ $SECONDS -lt $end ]; do
      kill -0 "$pid" 2>/dev/null || break
      # a TCP connect, not a request (which the held-stream upstream would hold)
      if (exec 3<>"/dev/tcp/127.0.0.1/$NGPORT") 2>/dev/null; then
        PIDS+=("$pid"); NGURL="http://127.0.0.1:$NGPORT"; return 0
      fi
      sleep 0.1
    done
    kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
    grep -q "Address already in use" "$dir/error.log" 2>/dev/null || die "nginx $name did not start: $(cat "$dir/stdout" "$dir/error.log" 2>/dev/null)"
  done
  die "nginx $name: no free port in 5 attempts"
}

CHAT='{"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 24, "temperature": 0'

echo "== 2 replicas + nginx"
start_replica 1
start_replica 2
wait_http "http://127.0.0.1:${RPORT[1]}/health"
wait_http "http://127.0.0.1:${RPORT[2]}/health"
start_nginx ng "${RPORT[1]}" "${RPORT[2]}"
wait_http "$NGURL/health"

code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$NGURL/v1/chat/completions" \
  -H 'Content-Type: application/json' --data-binary "$CHAT}")
[ "$code" = 200 ] || die "chat through nginx: HTTP $code: $(cat "$TMP/body")"
jq -e '.choices[0].message.content | type == "string"' "$TMP/body" >/dev/null || die "chat: no content"

echo "== streaming through nginx"
curl -sN -D "$TMP/hdr" "$NGURL/v1/chat/completions" -H 'Content-Type: application/json' \
  --data-binary "$CHAT, \"stream\": true}" >"$TMP/sse" || die "streaming curl failed"
grep -qi '^content-type: text/event-stream' "$TMP/hdr" || die "stream: content-type $(grep -i content-type "$TMP/hdr")"
grep -v '^\s*$' "$TMP/sse" | grep -v '^data: ' && die "stream: a line not starting with 'data: '"
[ "$(grep -c '^data: {' "$TMP/sse")" -ge 2 ] || die "stream: fewer than 2 events"
grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -s -e 'all(.[]; .object == "chat.completion.chunk")' >/dev/null ||
  die "stream: a chunk is not a chat.completion.chunk"
[ "$(grep '^data: ' "$TMP/sse" | tail -n 1)" = "data: [DONE]" ] || die "stream does not end with data: [DONE]"
# the same text as without streaming (greedy)
want=$(jq -r '.choices[0].message.content' "$TMP/body")
got=$(grep '^data: {' "$TMP/sse" | sed 's/^data: //' | jq -j '.choices[0].delta.content // ""')
[ "$got" = "$want" ] || die "stream text '$got' != non-stream '$want'"

echo "== events not buffered (stand-in upstream holds the stream until the client saw event 1)"
cat >"$TMP/sse_upstream.py" <<'PY'
import os, socket, sys, time
flag, portfile = sys.argv[1], sys.argv[2]
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(8)
with open(portfile + ".tmp", "w") as f:
    f.write(str(srv.getsockname()[1]))
os.rename(portfile + ".tmp", portfile)
while True:
    conn, _ = srv.accept()
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 b"Connection: close\r\n\r\n")
    conn.sendall(b'data: {"event": 1}\n\n')
    for _ in range(3000):  # at most 300 s; the test removes us long before
        if os.path.exists(flag):
            break
        time.sleep(0.1)
    conn.sendall(b"data: [DONE]\n\n")
    conn.close()
PY
python3 "$TMP/sse_upstream.py" "$TMP/seen" "$TMP/sse_port" 2>"$TMP/sse_upstream.log" &
PIDS+=("$!")
end=$((SECONDS + WAIT_S))
while [ $SECONDS -lt $end ]; do [ -s "$TMP/sse_port" ] && break; sleep 0.1; done
[ -s "$TMP/sse_port" ] || die "stand-in upstream did not start"
UP=$(cat "$TMP/sse_port")
MAIN_URL=$NGURL
start_nginx ng_sse "$UP" "$UP"
SSE_URL=$NGURL
NGURL=$MAIN_URL
curl -sN "$SSE_URL/v1/chat/completions" -H 'Content-Type: application/json' \
  --data-binary '{"stream": true}' >"$TMP/held" &
CURL_PID=$!
PIDS+=("$CURL_PID")
end=$((SECONDS + WAIT_S))
while [ $SECONDS -lt $end ]; do
  grep -q '"event": 1' "$TMP/held" 2>/dev/null && break
  kill -0 "$CURL_PID" 2>/dev/null || break
  sleep 0.1
done
grep -q '"event": 1' "$TMP/held" || die "the first event did not reach the client while the stream was open (buffered?)"
grep -q '\[DONE\]' "$TMP/held" && die "stream ended before the client was released"
touch "$TMP/seen"
wait "$CURL_PID" || die "held stream: curl failed"
tail -n 2 "$TMP/held" | grep -q '^data: \[DONE\]' || die "held stream did not end with [DONE]"

echo "== both replicas serve"
for i in $(seq 1 8); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "$NGURL/v1/completions" -H 'Content-Type: application/json' \
    --data-binary '{"prompt": "Once", "max_tokens": 4, "temperature": 0}')
  [ "$code" = 200 ] || die "completion $i: HTTP $code"
done
# every replica finished some (its vLLM-named counter in /metrics)
for i in 1 2; do
  n=$(curl -s "http://127.0.0.1:${RPORT[$i]}/metrics" | awk '/^vllm:request_success_total/ {s += $NF} END {print s + 0}')
  [ "$n" -ge 1 ] || die "replica $i finished no request (nginx sent all to one)"
done

echo "== failover: replica 1 killed"
kill -KILL "${RPID[1]}"
wait "${RPID[1]}" 2>/dev/null || true
for i in $(seq 1 8); do
  code=$(curl -s -o "$TMP/body" -w '%{http_code}' "$NGURL/v1/chat/completions" \
    -H 'Content-Type: application/json' --data-binary "$CHAT}")
  [ "$code" = 200 ] || die "request $i with replica 1 down: HTTP $code"
done
curl -sN "$NGURL/v1/chat/completions" -H 'Content-Type: application/json' \
  --data-binary "$CHAT, \"stream\": true}" >"$TMP/sse2" || die "streaming with replica 1 down failed"
[ "$(grep '^data: ' "$TMP/sse2" | tail -n 1)" = "data: [DONE]" ] || die "stream with replica 1 down: no [DONE]"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$NGURL/health")" = 200 ] || die "/health with one replica down"

echo "== both down: 502"
kill -KILL "${RPID[2]}"
wait "${RPID[2]}" 2>/dev/null || true
code=$(curl -s -o /dev/null -w '%{http_code}' "$NGURL/v1/chat/completions" \
  -H 'Content-Type: application/json' --data-binary "$CHAT}")
[ "$code" = 502 ] || die "both replicas down: HTTP $code, expected 502"
echo "PASS"
