#!/usr/bin/env bash
# End-to-end test of `pagoda serve`'s strict request parsing over raw HTTP
# (curl + jq): malformed JSON bodies (bad escapes, NUL, invalid UTF-8,
# trailing text, bad numbers, raw control characters, lone surrogates) are
# 400s; n that can never fit is a 400 naming the limits; mixed prompt lists;
# unknown model on /tokenize and /detokenize is a 404; /tokenize
# return_token_strs; int64 extreme seeds; continue_final_message; and
# max_tokens null with a KV cache smaller than the context.
# usage: e2e_strict.sh MODEL CHAT_TEMPLATE PAGODA [EMULATOR ARGS... before PAGODA]
set -euo pipefail
MODEL=$1
TEMPLATE=$2
shift 2
PAGODA=("$@")
. "$(dirname "$0")/lib.sh"
start_server() { start_lib_server "$@"; }

stop_server() {
  kill -TERM "$SPID"
  local rc=0
  wait "$SPID" || rc=$?
  SPID=""
  [ "$rc" = 0 ] || die "server exited with $rc on SIGTERM"
}

# req PATH BODY: POST the exact bytes of BODY (printf %b escapes: \xNN);
# sets CODE, body in $TMP/body
req() {
  printf '%b' "$2" >"$TMP/req"
  CODE=$(curl -s -o "$TMP/body" -w '%{http_code}' -X POST "$URL$1" \
    -H 'Content-Type: application/json' --data-binary @"$TMP/req") || die "curl failed on $1"
}
expect() { [ "$CODE" = "$1" ] || die "$2: HTTP $CODE, expected $1"; }
jqb() { jq -r "$@" "$TMP/body"; }
check() { jq -e "$1" "$TMP/body" >/dev/null || die "$2: jq '$1' is false"; }
expect_error() {
  expect "$1" "$3"
  check '.error | (.message|type=="string") and (.type|type=="string") and has("param") and has("code")' "$3: OpenAI error shape"
  jqb '.error.message' | grep -qF -- "$2" || die "$3: message '$(jqb .error.message)' lacks '$2'"
}

echo "== malformed JSON is a 400"
start_server --max-model-len 128 --max-num-seqs 1 --max-queue 2
C=/v1/completions
req $C '{"prompt": "Once\\uZZZZ upon", "max_tokens": 2}'; expect_error 400 "invalid \\u escape" "bad \\u escape"
req $C '{"prompt": "Once\\u0000 upon", "max_tokens": 2}'; expect_error 400 "'prompt' contains a NUL character" "escaped NUL"
check '.error.param == "prompt"' "NUL error names the field"
req $C '{"prompt": "caf\xe9", "max_tokens": 2}'; expect_error 400 "invalid UTF-8 byte 0xe9" "invalid UTF-8"
req $C '{"prompt": "\xc0\xaf", "max_tokens": 2}'; expect_error 400 "invalid UTF-8" "overlong UTF-8"
req $C '{"prompt": "a", "max_tokens": 2} trailing'; expect_error 400 "after the JSON value" "trailing garbage"
req $C '{"prompt": "a", "max_tokens": 01}'; expect_error 400 "leading zero" "number 01"
req $C '{"prompt": "a", "max_tokens": 1.}'; expect_error 400 "digits after" "number 1."
req $C '{"prompt": "a", "temperature": .5}'; expect_error 400 "not valid JSON" "number .5"
req $C '{"prompt": "a", "max_tokens": +1}'; expect_error 400 "not valid JSON" "number +1"
req $C '{"prompt": "a\tb", "max_tokens": 2}'; expect_error 400 "control character 0x09" "raw tab"
req $C '{"prompt": "a\nb", "max_tokens": 2}'; expect_error 400 "control character 0x0a" "raw newline"
req $C '{"prompt": "a\\ud800", "max_tokens": 2}'; expect_error 400 "lone high surrogate" "lone surrogate"
req /tokenize '{"prompt": "a\\udc00"}'; expect_error 400 "lone low surrogate" "tokenize: lone surrogate"
req /detokenize '{"tokens": [1, 2], }'; expect_error 400 "not valid JSON" "detokenize: malformed"
# valid escapes still work: the surrogate pair and \n decode to the same text
req $C '{"prompt": "Once \\ud83d\\ude00\\nupon", "max_tokens": 2, "temperature": 0}'; expect 200 "valid escapes"

echo "== n that can never fit is a 400, not a 503"
req $C '{"prompt": "a", "max_tokens": 2, "n": 4}'; expect_error 400 "--max-num-seqs 1 running + --max-queue 2 waiting" "n over the capacity"
check '.error.param == "n"' "capacity error names n"
req $C '{"prompt": ["a", "b"], "max_tokens": 2, "n": 2}'; expect_error 400 "needs 4 sequences" "prompts x n over the capacity"
req $C '{"prompt": "a", "max_tokens": 2, "n": 3}'; expect 200 "n at the capacity"
check '.choices|length==3' "three choices"

echo "== prompt lists are not mixed; errors name the item"
req $C '{"prompt": [[1, 2], "a"], "max_tokens": 2}'; expect_error 400 "item 1 is a string but item 0 is a list" "[[ids], str]"
req $C '{"prompt": ["a", [1]], "max_tokens": 2}'; expect_error 400 "item 1 is a list but item 0 is a string" "[str, [ids]]"
req $C '{"prompt": [[1], [2], [3, -1]], "max_tokens": 2}'; expect_error 400 "'prompt' item 2: token 1" "bad id in item 2"
req $C '{"prompt": [[1], [2, 99999999]], "max_tokens": 2}'; expect_error 400 "'prompt' item 1: token id 99999999 at position 1" "id out of the vocabulary in item 1"

echo "== /tokenize and /detokenize: unknown model, return_token_strs"
req /tokenize '{"model": "gpt-9", "prompt": "a"}'; expect_error 404 "gpt-9" "tokenize: unknown model"
check '.error.code == "model_not_found"' "tokenize model_not_found"
req /detokenize '{"model": "gpt-9", "tokens": [1]}'; expect_error 404 "gpt-9" "detokenize: unknown model"
check '.error.code == "model_not_found"' "detokenize model_not_found"
req /detokenize '{"model": 5, "tokens": [1]}'; expect_error 400 "'model' must be a string" "detokenize: model type"
NAME=$(basename "$MODEL")
req /detokenize "{\"model\": \"$NAME\", \"tokens\": [1]}"; expect 200 "detokenize: served model"
req /detokenize '{"tokens": [1, 99999999]}'; expect_error 400 "item 1: token id 99999999" "detokenize: id out of range"
req /tokenize '{"prompt": "Once upon a time"}'; expect 200 "tokenize"
check '.token_strs == null' "no token_strs unless asked"
req /tokenize '{"prompt": "Once upon a time", "return_token_strs": true}'; expect 200 "tokenize return_token_strs"
check '(.token_strs|length) == .count and (.token_strs|all(type=="string"))' "one token string per token"
# stories260K is a SentencePiece (llama) vocabulary: BOS "<s>", word pieces start with U+2581
check '.token_strs[0] == "<s>" and .token_strs[1] == "\u2581Once"' "token strings are the vocabulary pieces"

echo "== int64 extreme seeds"
for SEED in -9223372036854775808 9223372036854775807 0 -1; do
  req $C "{\"prompt\": \"a\", \"max_tokens\": 3, \"seed\": $SEED}"; expect 200 "seed $SEED"
done
req $C '{"prompt": "a", "max_tokens": 3, "seed": 9223372036854775807, "temperature": 1}'; expect 200 "seed max"
A=$(jqb '.choices[0].text')
req $C '{"prompt": "a", "max_tokens": 3, "seed": 9223372036854775807, "temperature": 1}'; expect 200 "seed max again"
[ "$(jqb '.choices[0].text')" = "$A" ] || die "the same int64 seed gave different text"
req $C '{"prompt": "a", "max_tokens": 3, "seed": 18446744073709551615}'; expect_error 400 "9223372036854775807], got 18446744073709551615" "seed 2^64-1"
req $C '{"prompt": "a", "max_tokens": 3, "seed": 9223372036854775808}'; expect_error 400 "'seed' must be an integer in" "seed 2^63"
req $C '{"prompt": "a", "max_tokens": 3, "seed": 1.5}'; expect_error 400 "'seed'" "seed 1.5"
req /health ''; [ "$CODE" = 405 ] || [ "$CODE" = 200 ] || die "health after errors: $CODE"
stop_server

echo "== max_tokens null: up to the context, capped by a small KV cache"
# stories260K F32 KV: 5 layers x 4 KV heads x 8 dims x K,V x 4 B = 1280 B/token;
# 200 KiB = 10 blocks of 16 (one is the null block): 144 tokens < max_model_len 512
start_server --max-model-len 512 --kv-cache-memory 200KiB
for MT in null absent; do
  if [ "$MT" = null ]; then B='{"prompt": "Once upon a time", "max_tokens": null, "ignore_eos": true}'
  else B='{"prompt": "Once upon a time", "ignore_eos": true}'; fi
  req $C "$B"; expect 200 "max_tokens $MT with a small KV cache"
  check '.choices[0].finish_reason == "length"' "finish length"
  check '.usage.prompt_tokens + .usage.completion_tokens == 144' "max_tokens $MT: generated up to the KV cache (144 tokens)"
done
req $C '{"prompt": "Once upon a time", "max_tokens": 400}'; expect_error 400 "KV" "explicit max_tokens over the KV cache"
stop_server

if [ -n "$TEMPLATE" ]; then
  echo "== chat: continue_final_message"
  start_server --chat-template "$TEMPLATE" --max-num-seqs 1 --max-queue 2
  H='{"role": "user", "content": "Tell a story"}, {"role": "assistant", "content": "Once upon a"}'
  req /v1/chat/completions "{\"messages\": [$H], \"continue_final_message\": true, \"max_tokens\": 2}"
  expect_error 400 "Cannot set both" "continue_final_message with the default add_generation_prompt"
  req /v1/chat/completions "{\"messages\": [$H], \"continue_final_message\": true, \"add_generation_prompt\": true, \"max_tokens\": 2}"
  expect_error 400 "Cannot set both" "continue_final_message + add_generation_prompt"
  req /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "continue_final_message": true, "add_generation_prompt": false, "max_tokens": 2}'
  expect_error 400 "needs the last message to be from the assistant" "continue_final_message after a user message"
  req /v1/chat/completions '{"messages": [{"role": "user", "content": "x"}], "n": 4, "max_tokens": 2}'
  expect_error 400 "needs 4 sequences" "chat n over the capacity"
  req /tokenize "{\"messages\": [$H], \"continue_final_message\": true, \"add_generation_prompt\": false}"
  expect 200 "tokenize continue_final_message"
  req /detokenize "{\"tokens\": $(jq -c .tokens "$TMP/body")}"; expect 200 "detokenize the continued prompt"
  jqb .prompt | grep -q 'assistant: Once upon a$' || die "continued prompt does not end in the final message: '$(jqb .prompt)'"
  req /v1/chat/completions "{\"messages\": [$H], \"continue_final_message\": true, \"add_generation_prompt\": false, \"max_tokens\": 4, \"temperature\": 0}"
  expect 200 "chat continue_final_message"
  check '.usage.completion_tokens >= 1' "continued generation"
  stop_server
fi
echo "PASS"
