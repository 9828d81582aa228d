#!/usr/bin/env bash
# End-to-end test of `pagoda serve` over raw HTTP with curl (+ jq for JSON):
# endpoints, streaming == non-streaming, n > 1, stop strings never sent,
# every error of the API (400/401/404/405/413/503), a client that goes away
# mid-stream (its request aborted, all KV blocks free afterwards), and greedy
# output equal to `pagoda generate`.
# usage: e2e_curl.sh MODEL CHAT_TEMPLATE PAGODA [EMULATOR ARGS... before PAGODA]
set -euo pipefail
MODEL=$1
TEMPLATE=$2
shift 2
PAGODA=("$@")
. "$(dirname "$0")/lib.sh"

# lib.sh start_lib_server plus the checks of the ready message
start_server() {
  start_lib_server "$@"
  [ "$PORT" != 0 ] || die "--port 0 printed port 0"
  grep -q "curl http://127.0.0.1:$PORT/v1/completions" "$TMP/out.$N" || die "no curl command printed"
}

stop_server() {
  kill -TERM "$SPID"
  local rc=0
  wait "$SPID" || rc=$?
  SPID=""
  [ "$rc" = 0 ] || die "server exited with $rc on SIGTERM"
}

AUTH=()
# req METHOD PATH [BODY]: sets CODE, body in $TMP/body, headers in $TMP/hdr
req() {
  local args=(-s -o "$TMP/body" -D "$TMP/hdr" -w '%{http_code}' -X "$1" "$URL$2" "${AUTH[@]}")
  if [ $# -ge 3 ]; then args+=(-H 'Content-Type: application/json' --data-binary "$3"); fi
  CODE=$(curl "${args[@]}") || die "curl failed on $1 $2"
}
expect() { [ "$CODE" = "$1" ] || die "$2: HTTP $CODE, expected $1"; }
jqb() { jq -r "$@" "$TMP/body"; }
check() { jq -e "$1" "$TMP/body" >/dev/null || die "$2: jq '$1' is false"; }
# expect_error STATUS NEEDLE WHAT
expect_error() {
  expect "$1" "$3"
  check '.error | (.message|type=="string") and (.type|type=="string") and has("param") and has("code")' "$3: OpenAI error shape"
  jqb '.error.message' | grep -qF -- "$2" || die "$3: message '$(jqb .error.message)' lacks '$2'"
}
# stream BODY: SSE to $TMP/sse, concatenated text to $TMP/stext (choice 0)
stream() {
  curl -sN "$URL$1" "${AUTH[@]}" -H 'Content-Type: application/json' --data-binary "$2" >"$TMP/sse" || die "stream curl failed"
  [ "$(tail -c 14 "$TMP/sse")" = "data: [DONE]" ] || [ "$(tail -n 2 "$TMP/sse" | head -n 1)" = "data: [DONE]" ] || die "stream does not end with data: [DONE]"
  grep -v '^$' "$TMP/sse" | grep -v '^data: ' && die "SSE line not starting with 'data: '"
  grep '^data: {' "$TMP/sse" | sed 's/^data: //' >"$TMP/chunks"
  jq -s -e 'all(.[]; type=="object")' "$TMP/chunks" >/dev/null || die "an SSE chunk is not JSON"
}

echo "== basic endpoints"
start_server --max-model-len 128
rc=0
"${PAGODA[@]}" serve "$MODEL" --port "$PORT" >/dev/null 2>"$TMP/busy" || rc=$?
[ "$rc" = 1 ] || die "a second server on port $PORT: exit $rc, expected 1"
grep -q "cannot listen on 127.0.0.1:$PORT" "$TMP/busy" || die "port in use: $(cat "$TMP/busy")"
req GET /health; expect 200 health
req GET /version; expect 200 version; check '.version|type=="string"' version
req GET /v1/models; expect 200 models
NAME=$(jqb '.data[0].id')
[ "$NAME" = "$(basename "$MODEL")" ] || die "model name $NAME"
check '.data[0].max_model_len == 128' "max_model_len in /v1/models"
req POST /tokenize '{"prompt": "Once upon a time"}'; expect 200 tokenize
check '.count == (.tokens|length) and .count > 1 and .max_model_len == 128' tokenize
TOKS=$(jq -c .tokens "$TMP/body")
req POST /tokenize '{"prompt": "Once upon a time", "add_special_tokens": false}'; expect 200 tokenize
check ".count == $(echo "$TOKS" | jq length) - 1" "add_special_tokens false drops BOS"
req POST /detokenize "{\"tokens\": $(jq -c .tokens "$TMP/body")}"; expect 200 detokenize
[ "$(jqb .prompt)" = "Once upon a time" ] || die "detokenize round trip: $(jqb .prompt)"
req POST /detokenize "{\"tokens\": $TOKS}"; expect 200 detokenize
jqb .prompt | grep -q "Once upon a time$" || die "detokenize with BOS: $(jqb .prompt)"

echo "== completions: greedy, streaming == non-streaming"
BODY='{"model": "'$NAME'", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}'
req POST /v1/completions "$BODY"; expect 200 completion
check '.object=="text_completion" and (.id|startswith("cmpl-")) and (.created|type=="number") and .model=="'$NAME'"' "completion envelope"
check '.choices|length==1' "one choice"
check '.choices[0].finish_reason=="length" or .choices[0].finish_reason=="stop"' finish_reason
check '.usage.prompt_tokens > 0 and .usage.completion_tokens > 0 and .usage.total_tokens == .usage.prompt_tokens + .usage.completion_tokens' usage
GREEDY=$(jqb '.choices[0].text')
[ -n "$GREEDY" ] || die "empty greedy text"
stream /v1/completions '{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}'
S=$(jq -j '.choices[]?.text // empty' "$TMP/chunks")
[ "$S" = "$GREEDY" ] || die "streamed text differs: '$S' vs '$GREEDY'"
jq -s -e '.[-1].usage.completion_tokens > 0 and (.[-1].choices|length)==0' "$TMP/chunks" >/dev/null || die "no usage chunk at the end"
jq -s -e '[.[] | .choices[]? | select(.finish_reason != null)] | length == 1' "$TMP/chunks" >/dev/null || die "finish_reason not in exactly one chunk"

echo "== greedy == pagoda generate"
"${PAGODA[@]}" generate "$MODEL" --prompt "Once upon a time" --max-tokens 24 --temperature 0 --json >"$TMP/gen.json"
GEN=$(jq -r .text "$TMP/gen.json")
[ "$GEN" = "$GREEDY" ] || die "server greedy '$GREEDY' != generate '$GEN'"

echo "== seeded sampling: streaming == non-streaming, n > 1"
BODY='{"prompt": "The cat", "max_tokens": 20, "temperature": 1.0, "seed": 1234, "n": 3}'
req POST /v1/completions "$BODY"; expect 200 "n=3"
check '.choices|length==3' "three choices"
check '[.choices[].index] == [0,1,2]' "choice indices"
T0=$(jqb '.choices[0].text'); T2=$(jqb '.choices[2].text')
stream /v1/completions '{"prompt": "The cat", "max_tokens": 20, "temperature": 1.0, "seed": 1234, "n": 3, "stream": true}'
S0=$(jq -j 'select(.choices[0].index==0) | .choices[0].text' "$TMP/chunks")
S2=$(jq -j 'select(.choices[0].index==2) | .choices[0].text' "$TMP/chunks")
[ "$S0" = "$T0" ] || die "seeded stream choice 0 '$S0' != '$T0'"
[ "$S2" = "$T2" ] || die "seeded stream choice 2 '$S2' != '$T2'"
req POST /v1/completions '{"prompt": ["The cat", "A dog"], "max_tokens": 4, "n": 2}'; expect 200 "two prompts"
check '.choices|length==4' "2 prompts x n=2"
req POST /v1/completions "{\"prompt\": $TOKS, \"max_tokens\": 4, \"echo\": true, \"temperature\": 0}"; expect 200 "token-id prompt + echo"
jqb '.choices[0].text' | grep -q '^Once upon a time' || die "echo lacks the prompt"

echo "== stop strings are never sent"
for STOP in ' ' 'e' 'a t'; do
  B='{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stop": ["'$STOP'"]}'
  req POST /v1/completions "$B"; expect 200 "stop '$STOP'"
  T=$(jqb '.choices[0].text')
  case "$T" in *"$STOP"*) die "stop string '$STOP' in text '$T'";; esac
  stream /v1/completions "${B%\}}, \"stream\": true}"
  S=$(jq -j '.choices[]?.text // empty' "$TMP/chunks")
  [ "$S" = "$T" ] || die "stop '$STOP': streamed '$S' != '$T'"
  if jq -r '.choices[]?.text // empty' "$TMP/chunks" | grep -qF -- "$STOP"; then die "a chunk holds stop '$STOP'"; fi
done
req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stop": " ", "include_stop_str_in_output": true}'
expect 200 include_stop_str
check '.choices[0].finish_reason != "stop" or (.choices[0].text|endswith(" "))' "include_stop_str_in_output keeps the stop string"

echo "== logprobs"
req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "logprobs": 2}'; expect 200 logprobs
check '(.choices[0].logprobs.tokens|length) == .usage.completion_tokens' "one logprob per token"
check '.choices[0].logprobs.top_logprobs | all(length <= 2)' "top_logprobs <= 2"
check '.choices[0].logprobs.token_logprobs | all(. <= 0)' "logprobs <= 0"
req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "ignore_eos": true, "logprobs": 1}'
expect 200 "logprobs tokens"
check '(.choices[0].logprobs.tokens | join("")) == .choices[0].text' "logprob tokens concatenate to the text"

echo "== cache_salt: prefix-cache blocks are shared only within one salt"
SP='Once upon a time there was a little girl who loved to play in the park with her dog'
hits() { req GET /metrics; sed -n 's/^vllm:prefix_cache_hits_total{[^}]*} //p' "$TMP/body"; }
salted() { # SALT_JSON WHAT
  req POST /v1/completions "{\"prompt\": \"$SP\", \"max_tokens\": 1$1}"; expect 200 "$2"
}
salted '' "unsalted"
H1=$(hits)
salted ', "cache_salt": "tenant-a"' "salt a"; H2=$(hits)
[ "$H2" = "$H1" ] || die "a salted request hit the unsalted blocks ($H1 -> $H2)"
salted ', "cache_salt": "tenant-b"' "salt b"; H3=$(hits)
[ "$H3" = "$H2" ] || die "salt b hit salt a's blocks ($H2 -> $H3)"
salted ', "cache_salt": "tenant-a"' "salt a again"; H4=$(hits)
[ "$H4" -gt "$H3" ] || die "the same salt did not share its blocks ($H3 -> $H4)"
salted '' "unsalted again"; H5=$(hits)
[ "$H5" -gt "$H4" ] || die "unsalted twins did not share ($H4 -> $H5)"
req POST /v1/completions '{"prompt": "a", "cache_salt": 5}'; expect_error 400 "'cache_salt' must be a non-empty string" "cache_salt a number"
check '.error.param == "cache_salt"' "cache_salt error param"
req POST /v1/completions '{"prompt": "a", "cache_salt": ""}'; expect_error 400 "non-empty string" "cache_salt empty"
req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}], "cache_salt": ["x"]}'
expect_error 400 "'cache_salt' must be a non-empty string" "chat cache_salt a list"

echo "== errors"
req POST /v1/completions '{"prompt": '; expect_error 400 "not valid JSON" "malformed JSON"
req POST /v1/completions '{"prompt": "a", "max_tokens": "5"}'; expect_error 400 "must be an integer" "wrong type"
req POST /v1/completions '{"prompt": "a", "stream": "yes"}'; expect_error 400 "boolean" "wrong type stream"
req POST /v1/completions '{"prompt": ""}'; expect_error 400 "empty" "empty prompt"
LONG=$(printf 'hello %.0s' $(seq 1 200))
req POST /v1/completions "{\"prompt\": \"$LONG\"}"; expect_error 400 "maximum context length is 128 tokens" "prompt over the context"
req POST /v1/completions '{"prompt": "Once upon a time", "max_tokens": 125}'; expect_error 400 "maximum context length is 128 tokens" "prompt + max_tokens over the context"
jqb .error.message | grep -q "125 for the completion" || die "context message lacks the numbers"
req POST /v1/completions '{"prompt": "a", "max_tokens": 0}'; expect_error 400 "at least 1" "max_tokens 0"
req POST /v1/completions '{"prompt": "a", "temperature": -1}'; expect_error 400 "temperature" "temperature < 0"
req POST /v1/completions '{"prompt": "a", "top_p": 0}'; expect_error 400 "top_p" "top_p 0"
req POST /v1/completions '{"prompt": "a", "top_p": 1.5}'; expect_error 400 "top_p" "top_p > 1"
req POST /v1/completions '{"prompt": "a", "n": 0}'; expect_error 400 "'n'" "n 0"
req POST /v1/completions '{"prompt": [1, 99999999]}'; expect_error 400 "vocabulary" "token id out of range"
req POST /v1/completions '{"model": "gpt-9", "prompt": "a"}'; expect_error 404 "gpt-9" "unknown model"
check '.error.code == "model_not_found"' "model_not_found code"
req GET /v1/completions; expect_error 405 "not allowed" "GET on a POST endpoint"
req POST /health '{}'; expect_error 405 "not allowed" "POST on /health"
grep -qi '^Allow: GET, HEAD' "$TMP/hdr" || die "405 on /health lacks 'Allow: GET, HEAD'"
CODE=$(curl -s -I -o "$TMP/body" -w '%{http_code}' "$URL/v1/models" "${AUTH[@]}") || die "curl -I failed"
expect 200 "HEAD /v1/models"
grep -qi '^content-type: application/json' "$TMP/body" || die "HEAD /v1/models: no JSON content type"
req GET /v1/nothing; expect_error 404 "no such endpoint" "unknown path"
req POST /v1/chat/completions '{"messages": [{"role": "user", "content": "hi"}]}'
expect_error 400 "chat template" "chat without a template"
req GET /health; expect 200 "still up after the errors"

req GET /metrics; expect 200 metrics
grep -q '^# TYPE vllm:time_to_first_token_seconds histogram$' "$TMP/body" || die "metrics: TTFT histogram"
for m in vllm:inter_token_latency_seconds_count vllm:e2e_request_latency_seconds_count \
         vllm:request_queue_time_seconds_count vllm:num_requests_waiting vllm:num_preemptions_total \
         vllm:prompt_tokens_total vllm:generation_tokens_total vllm:prefix_cache_queries_total \
         vllm:prefix_cache_hits_total; do
  grep -q "^$m{model_name=\"$NAME\"} " "$TMP/body" || die "metrics: $m missing"
done
grep -q "^pagoda I .*cmpl-.*prompt [0-9]* tokens, output [0-9]* tokens, ttft" "$TMP/err.$N" || die "no per-request log line"
stop_server

echo "== clients gone: a queued stream and a running non-streamed request are aborted, KV blocks freed"
start_server --max-num-seqs 1
# A: long and non-streamed (64 choices run one at a time); B: a stream queued behind it
curl -s "$URL/v1/completions" -H 'Content-Type: application/json' -o /dev/null \
  --data-binary '{"prompt": "Once upon a time", "n": 64, "max_tokens": 480, "ignore_eos": true}' &
APID=$!
for _ in $(seq 1 200); do
  req GET /metrics
  grep -q '^vllm:num_requests_running{[^}]*} 1$' "$TMP/body" && break
  sleep 0.05
done
curl -sN "$URL/v1/completions" -H 'Content-Type: application/json' -o "$TMP/partial" \
  --data-binary '{"prompt": "Once", "max_tokens": 50, "stream": true}' &
BPID=$!
sleep 0.2
kill "$BPID" 2>/dev/null || true
wait "$BPID" 2>/dev/null || true
for _ in $(seq 1 100); do grep -q "client went away" "$TMP/err.$N" && break; sleep 0.05; done
grep -q "client went away" "$TMP/err.$N" || die "the queued stream's request was not aborted"
kill "$APID" 2>/dev/null || true
wait "$APID" 2>/dev/null || true
for _ in $(seq 1 200); do
  req GET /metrics
  if grep -q '^vllm:num_requests_running{[^}]*} 0$' "$TMP/body" &&
     grep -q '^vllm:num_requests_waiting{[^}]*} 0$' "$TMP/body" &&
     grep -q '^vllm:kv_cache_usage_perc{[^}]*} 0$' "$TMP/body"; then break; fi
  sleep 0.05
done
grep -q '^vllm:num_requests_running{[^}]*} 0$' "$TMP/body" || die "requests still running after their clients went away"
grep -q '^vllm:num_requests_waiting{[^}]*} 0$' "$TMP/body" || die "requests still waiting after their clients went away"
grep -q '^vllm:kv_cache_usage_perc{[^}]*} 0$' "$TMP/body" || die "KV blocks still in use after the clients went away"
[ "$(grep -c 'client went away' "$TMP/err.$N")" -ge 2 ] || die "the non-streamed request was not aborted"
grep -q '^vllm:request_success_total{finished_reason="abort",[^}]*} [1-9]' "$TMP/body" || die "aborts not counted"
stop_server

echo "== auth, body limit, queue full"
start_server --api-key sekrit --max-request-bytes 4KiB --max-num-seqs 1 --max-queue 40
req GET /health; expect 200 "health needs no key"
req GET /v1/models; expect_error 401 "API key" "missing key"
AUTH=(-H 'Authorization: Bearer wrong'); req GET /v1/models; expect_error 401 "API key" "wrong key"
AUTH=(-H 'Authorization: Bearer sekrit'); req GET /v1/models; expect 200 "right key"
BIG=$(head -c 8000 /dev/zero | tr '\0' 'a')
req POST /v1/completions "{\"prompt\": \"$BIG\"}"; expect_error 413 "limit" "body over the limit"
# 40 long choices in flight (one runs at a time); 20 more exceed 1 + 40 while
# fewer than 20 of them have finished
curl -s "$URL/v1/completions" "${AUTH[@]}" -H 'Content-Type: application/json' -o /dev/null \
  --data-binary '{"prompt": "Once", "n": 40, "max_tokens": 480, "ignore_eos": true}' &
CPID=$!
for _ in $(seq 1 200); do
  req GET /metrics
  grep -q '^vllm:num_requests_running{[^}]*} 1$' "$TMP/body" && break
  sleep 0.02
done
req POST /v1/completions '{"prompt": "a", "max_tokens": 2, "n": 20}'; expect_error 503 "busy" "queue full"
grep -qi '^Retry-After: ' "$TMP/hdr" || die "503 without Retry-After"
kill "$CPID" 2>/dev/null || true
wait "$CPID" 2>/dev/null || true
for _ in $(seq 1 200); do
  req GET /metrics
  grep -q '^vllm:num_requests_waiting{[^}]*} 0$' "$TMP/body" && grep -q '^vllm:num_requests_running{[^}]*} 0$' "$TMP/body" && break
  sleep 0.05
done
req POST /v1/completions '{"prompt": "a", "max_tokens": 2, "n": 10}'; expect 200 "accepted again after the queue drained"
AUTH=()
stop_server

if [ -n "$TEMPLATE" ]; then
  echo "== chat"
  start_server --chat-template "$TEMPLATE"
  MSG='[{"role": "system", "content": "Be nice."}, {"role": "user", "content": [{"type": "text", "text": "Once upon a time"}]}]'
  req POST /v1/chat/completions "{\"messages\": $MSG, \"max_tokens\": 16, \"temperature\": 0}"; expect 200 chat
  check '.object=="chat.completion" and (.id|startswith("chatcmpl-")) and .choices[0].message.role=="assistant"' "chat envelope"
  C=$(jqb '.choices[0].message.content')
  stream /v1/chat/completions "{\"messages\": $MSG, \"max_tokens\": 16, \"temperature\": 0, \"stream\": true}"
  jq -s -e '.[0].choices[0].delta.role == "assistant"' "$TMP/chunks" >/dev/null || die "first chat chunk lacks the role"
  jq -s -e 'all(.[]; .object == "chat.completion.chunk")' "$TMP/chunks" >/dev/null || die "chunk object"
  S=$(jq -j '.choices[]?.delta.content // empty' "$TMP/chunks")
  [ "$S" = "$C" ] || die "chat stream '$S' != '$C'"
  req POST /tokenize '{"prompt": "x"}'; expect 200 "tokenize with BOS"
  BOS=$(jqb '.tokens[0]')
  req POST /tokenize "{\"messages\": $MSG}"; expect 200 "tokenize messages"
  # the template starts with {{ bos_token }} (from the model's tokenizer_config.json)
  [ "$(jqb '.tokens[0]')" = "$BOS" ] && [ "$(jqb '.tokens[1]')" != "$BOS" ] ||
    die "chat prompt does not start with exactly one BOS (is pg_engine_model_path of src/engine/chat.h defined by the engine?)"
  # the chat prompt's tokens as a completion give the same greedy text (and
  # greedy completions equal `pagoda generate`, checked above)
  req POST /v1/completions "{\"prompt\": $(jq -c .tokens "$TMP/body"), \"max_tokens\": 16, \"temperature\": 0}"
  expect 200 "chat tokens as a completion"
  [ "$(jqb '.choices[0].text')" = "$C" ] || die "chat '$C' != completion over its tokens '$(jqb '.choices[0].text')'"
  req POST /v1/chat/completions "{\"messages\": $MSG, \"max_completion_tokens\": 3, \"logprobs\": true, \"top_logprobs\": 2}"
  expect 200 "chat logprobs"
  check '(.choices[0].logprobs.content|length) == .usage.completion_tokens' "chat logprobs per token"
  req POST /v1/chat/completions '{"messages": [{"role": "wizard", "content": "x"}]}'; expect_error 400 "wizard" "bad role"
  LONG=$(printf 'hello %.0s' $(seq 1 600))
  req POST /v1/chat/completions "{\"messages\": [{\"role\": \"user\", \"content\": \"$LONG\"}]}"
  expect_error 400 "maximum context length" "chat prompt over the context"
  check '.error.param == "messages"' "a chat prompt over the context names 'messages'"
  stop_server
fi
echo "PASS"
