#!/usr/bin/env bash
# `pagoda download` / `generate` / `serve` with hub repo ids against a mock
# Hugging Face hub (tests/hub/mock_hub.py, Python 3 stdlib): the HF cache
# layout (blobs named by etag, relative snapshot symlinks, refs), only the
# files a model needs, a GGUF by quant tag or file name, the LFS redirect to
# a CDN on another host (which never sees the token), a gated repo (401
# without / with a wrong token, 200 with the right one), a transfer cut once
# (resumed in the same run) and cut every time (kept, resumed with Range by
# the next run), a corrupt blob (checksum error, nothing in the snapshot),
# unknown repo / revision / file, HF_HUB_OFFLINE, a local path winning over a
# repo id, and `pagoda serve org/name` downloading and answering.
# usage: e2e_hub.sh ASSETS PAGODA [ARGS...]
set -euo pipefail
ASSETS=$1
shift
PAGODA=("$@")
for i in "${!PAGODA[@]}"; do # absolute paths: one case runs in another directory
  if [ -e "${PAGODA[$i]}" ]; then PAGODA[$i]=$(realpath "${PAGODA[$i]}"); fi
done
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../server/lib.sh" # TMP, die, start_lib_server (the server's stderr: $TMP/err.N)
MPID=""
trap 'if [ -n "$MPID" ]; then kill "$MPID" 2>/dev/null || true; fi; cleanup' EXIT
ERR="$TMP/err.0"           # pagoda's stderr in the download cases (die prints it)

ST="$ASSETS/llm/stories260K-hf"
GG="$ASSETS/llm/llama2c"
for f in config.json generation_config.json tokenizer.json tokenizer_config.json model.safetensors; do
  [ -f "$ST/$f" ] || die "asset $ST/$f missing"
done
C1=1111111111111111111111111111111111111111
C2=2222222222222222222222222222222222222222
C3=3333333333333333333333333333333333333333
stories_files() { # the stories260K repo, plus files a model does not need
  cat <<EOF
   "config.json": "$ST/config.json", "generation_config.json": "$ST/generation_config.json",
   "tokenizer.json": "$ST/tokenizer.json", "tokenizer_config.json": "$ST/tokenizer_config.json",
   "model.safetensors": "$ST/model.safetensors", "README.md": "$ST/config.json",
   "original/consolidated.pth": "$ST/tokenizer.json"
EOF
}
repo() { # repo ORG/NAME JSON-BODY
  mkdir -p "$TMP/repos/$1"
  printf '{%s}\n' "$2" >"$TMP/repos/$1/repo.json"
}
repo tiny/stories "\"revisions\": {\"main\": \"$C1\", \"v1.0\": \"$C2\"}, \"files\": {$(stories_files)}"
repo tiny/gated "\"revisions\": {\"main\": \"$C1\"}, \"token\": \"hf_right\", \"files\": {$(stories_files)}"
repo tiny/flaky "\"revisions\": {\"main\": \"$C1\"}, \"interrupt\": {\"model.safetensors\": 1}, \"files\": {$(stories_files)}"
repo tiny/cut "\"revisions\": {\"main\": \"$C1\"}, \"interrupt\": {\"model.safetensors\": 3}, \"files\": {$(stories_files)}"
repo tiny/norange "\"revisions\": {\"main\": \"$C1\"}, \"interrupt\": {\"model.safetensors\": 1}, \"no_range\": true, \"files\": {$(stories_files)}"
repo tiny/corrupt "\"revisions\": {\"main\": \"$C1\"}, \"corrupt\": [\"model.safetensors\"], \"files\": {$(stories_files)}"
repo tiny/slow "\"revisions\": {\"main\": \"$C1\"}, \"slow\": {\"model.safetensors\": 1.5}, \"files\": {$(stories_files)}"
repo tiny/gguf "\"revisions\": {\"main\": \"$C3\"}, \"files\": {
  \"stories260K-F32.gguf\": \"$GG/stories260K.gguf\", \"stories260K-Q4_0.gguf\": \"$GG/stories260K-q4_0.gguf\",
  \"README.md\": \"$ST/config.json\"}"

python3 "$HERE/mock_hub.py" --root "$TMP/repos" --port-file "$TMP/port" --log "$TMP/log" &
MPID=$!
for _ in $(seq 1 300); do [ -f "$TMP/port" ] && break; kill -0 "$MPID" || die "mock hub exited"; sleep 0.1; done
[ -f "$TMP/port" ] || die "mock hub did not start"
HUBPORT=$(cat "$TMP/port")

unset HF_TOKEN HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HUB_OFFLINE HF_TOKEN_PATH XDG_CACHE_HOME
export HF_ENDPOINT="http://127.0.0.1:$HUBPORT/"   # a trailing slash is allowed
export HF_HOME="$TMP/hf"
HUB="$HF_HOME/hub"

# run_ok ARGS...: pagoda succeeds, stdout in $TMP/out, stderr in $ERR
run_ok() { "${PAGODA[@]}" "$@" >"$TMP/out" 2>"$ERR" || die "pagoda $* failed"; }
# run_fail RC NEEDLE ARGS...: pagoda exits RC and stderr holds NEEDLE
run_fail() {
  local want=$1 needle=$2 rc=0
  shift 2
  "${PAGODA[@]}" "$@" >"$TMP/out" 2>"$ERR" || rc=$?
  [ "$rc" = "$want" ] || die "pagoda $*: exit $rc, expected $want"
  grep -qF -- "$needle" "$ERR" || die "pagoda $*: stderr lacks '$needle'"
}
sha256() { sha256sum "$1" | cut -d' ' -f1; }
gitsha1() { python3 -c 'import hashlib,sys; d=open(sys.argv[1],"rb").read(); print(hashlib.sha1(b"blob %d\0" % len(d) + d).hexdigest())' "$1"; }
log_count() { grep -c -- "$1" "$TMP/log" || true; }

echo "== download: the HF cache layout, only the files a model needs"
run_ok download tiny/stories
R="$HUB/models--tiny--stories"
[ "$(cat "$TMP/out")" = "$R/snapshots/$C1" ] || die "printed path '$(cat "$TMP/out")'"
[ "$(cat "$R/refs/main")" = "$C1" ] || die "refs/main"
SHA=$(sha256 "$ST/model.safetensors")
[ "$(readlink "$R/snapshots/$C1/model.safetensors")" = "../../blobs/$SHA" ] || die "LFS link target"
[ "$(readlink "$R/snapshots/$C1/config.json")" = "../../blobs/$(gitsha1 "$ST/config.json")" ] || die "small-file link"
for f in config.json generation_config.json tokenizer.json tokenizer_config.json model.safetensors; do
  cmp -s "$R/snapshots/$C1/$f" "$ST/$f" || die "$f differs from the repo's"
done
[ ! -e "$R/snapshots/$C1/README.md" ] && [ ! -e "$R/snapshots/$C1/original" ] || die "unneeded files downloaded"
[ -f "$HUB/.locks/models--tiny--stories/$SHA.lock" ] || die "no lock file"
[ "$(log_count "GET /cdn/$SHA")" = 1 ] || die "the blob was not fetched once from the CDN"
grep "/cdn/" "$TMP/log" | grep -q "auth=yes" && die "the CDN got an Authorization header"
grep -q "download: \[5/5\] tokenizer_config.json: 323 B" "$ERR" || die "no progress line"
ls "$R/blobs" | grep -q incomplete && die ".incomplete left behind"

echo "== download again: nothing transferred; --revision writes its ref"
before=$(log_count "resolve/")
run_ok download tiny/stories
[ "$(log_count "resolve/")" = "$before" ] || die "cached files were requested again"
run_ok download tiny/stories --revision v1.0
[ "$(cat "$R/refs/v1.0")" = "$C2" ] || die "refs/v1.0"
[ "$(cat "$TMP/out")" = "$R/snapshots/$C2" ] || die "v1.0 path"
[ "$(readlink "$R/snapshots/$C2/model.safetensors")" = "../../blobs/$SHA" ] || die "v1.0 shares the blob"
[ "$(log_count "GET /cdn/$SHA")" = 1 ] || die "a blob already in the cache was downloaded again"
run_ok download tiny/stories@v1.0 --include '*.json'
[ "$(cat "$TMP/out")" = "$R/snapshots/$C2" ] || die "org/name@rev path"

echo "== generate / offline: the cached model gives the same tokens as the local directory"
run_ok generate "$ST" --prompt "Once upon a time" --temperature 0 --max-tokens 8 --json
cp "$TMP/out" "$TMP/want"
HF_HUB_OFFLINE=1 run_ok generate tiny/stories --prompt "Once upon a time" --temperature 0 --max-tokens 8 --json
cmp -s "$TMP/out" "$TMP/want" || die "repo id output differs: $(cat "$TMP/out")"
HF_HUB_OFFLINE=1 run_fail 1 "HF_HUB_OFFLINE is set" generate tiny/gguf --prompt x
HF_HUB_OFFLINE=1 run_ok download tiny/stories
[ "$(cat "$TMP/out")" = "$R/snapshots/$C1" ] || die "offline download path"

echo "== errors: repo, revision, file"
run_fail 1 "repository not found" download tiny/nothere
run_fail 1 "revision 'nope' not found" download tiny/stories --revision nope
run_fail 1 "no .gguf file matches 'Q8_0'" download tiny/gguf:Q8_0
run_fail 1 "no .gguf file matches 'missing.gguf'" download tiny/gguf --gguf-file missing.gguf
run_fail 1 "several .gguf files" download tiny/gguf
grep -qF "stories260K-Q4_0.gguf" "$ERR" || die "the choices are not listed"
run_fail 1 "matches --include *.bin" download tiny/stories --include '*.bin'
run_fail 2 "not a Hugging Face repo id" download ../x
run_fail 1 "repository not found" generate tiny/nothere --prompt x
HF_ENDPOINT=http://127.0.0.1:1 run_fail 1 "set HF_HUB_OFFLINE=1 to use the cache only" download tiny/stories

echo "== GGUF by quant tag and by file name"
run_ok download tiny/gguf:q4_0
[ "$(cat "$TMP/out")" = "$HUB/models--tiny--gguf/snapshots/$C3/stories260K-Q4_0.gguf" ] || die "quant tag path"
[ ! -e "$HUB/models--tiny--gguf/snapshots/$C3/stories260K-F32.gguf" ] || die "the other quant was downloaded"
run_ok generate tiny/gguf --gguf-file stories260K-F32.gguf --prompt "Once upon a time" --temperature 0 --max-tokens 4 --json
[ -L "$HUB/models--tiny--gguf/snapshots/$C3/stories260K-F32.gguf" ] || die "--gguf-file not downloaded"

echo "== a progress bar on a terminal (script(1) gives pagoda a pty)"
command -v script >/dev/null || die "script(1) not found (Debian: bsdutils)"
HF_HOME="$TMP/hf-tty" TERM=xterm script -qec "$(printf '%q ' "${PAGODA[@]}") download tiny/gguf:Q4_0" /dev/null >"$TMP/tty" 2>&1 \
  || die "download on a pty failed: $(cat "$TMP/tty")"
grep -q $'\r\[1/1\] stories260K-Q4_0.gguf *\[#\{24\}\] 100%' "$TMP/tty" || die "no progress bar: $(cat -v "$TMP/tty")"

echo "== plain progress lines when stderr is not a terminal"
PAGODA_PROGRESS_INTERVAL=0.2 run_ok download tiny/slow
grep -q "download: \[3/5\] model.safetensors: [0-9]*% ([0-9.]* KiB of 1020.5 KiB, " "$ERR" \
  || die "no periodic progress line"

echo "== gated repo: 401 without and with a wrong token, 200 with the right one"
run_fail 1 "gated or private" download tiny/gated
grep -qF "set HF_TOKEN" "$ERR" || die "no HF_TOKEN hint"
HF_TOKEN=hf_wrong run_fail 1 "token (HF_TOKEN) was refused" download tiny/gated
mkdir -p "$TMP/tok" && echo hf_right >"$TMP/tok/token"
HF_TOKEN_PATH="$TMP/tok/token" run_ok download tiny/gated
HF_TOKEN=hf_right run_ok download tiny/gated --revision main
grep "/cdn/" "$TMP/log" | grep -q "auth=yes" && die "the token went to the CDN"
grep -q "GET /api/models/tiny/gated/revision/main range=- auth=yes" "$TMP/log" || die "no token sent to the hub"

echo "== a transfer cut once: resumed with Range in the same run"
run_ok download tiny/flaky
grep -q "resuming" "$ERR" || die "no resume message"
grep -q "GET /cdn/$SHA range=bytes=[1-9][0-9]*- " "$TMP/log" || die "no Range request"
cmp -s "$HUB/models--tiny--flaky/snapshots/$C1/model.safetensors" "$ST/model.safetensors" || die "resumed file differs"

echo "== a CDN that ignores Range: the whole body again, the partial file restarted"
before=$(log_count "GET /cdn/$SHA range=bytes=")
run_ok download tiny/norange
[ "$(log_count "GET /cdn/$SHA range=bytes=")" -gt "$before" ] || die "no Range request"
cmp -s "$HUB/models--tiny--norange/snapshots/$C1/model.safetensors" "$ST/model.safetensors" || die "restarted file differs"

echo "== a transfer cut every time: the partial file stays, the next run resumes it"
run_fail 1 "run again to resume" download tiny/cut
INC="$HUB/models--tiny--cut/blobs/$SHA.incomplete"
[ -s "$INC" ] || die "no partial file kept"
have=$(stat -c %s "$INC")
[ ! -e "$HUB/models--tiny--cut/snapshots/$C1/model.safetensors" ] || die "a partial file was linked"
[ ! -e "$HUB/models--tiny--cut/refs/main" ] || die "refs written for an incomplete snapshot"
run_ok download tiny/cut
grep -q "GET /cdn/$SHA range=bytes=$have- " "$TMP/log" || die "the second run did not resume at byte $have"
cmp -s "$HUB/models--tiny--cut/snapshots/$C1/model.safetensors" "$ST/model.safetensors" || die "resumed file differs"
[ ! -e "$INC" ] || die ".incomplete left after completion"

echo "== a corrupt blob: checksum error, nothing in the snapshot"
run_fail 1 "checksum mismatch" download tiny/corrupt
RC="$HUB/models--tiny--corrupt"
[ ! -e "$RC/snapshots/$C1/model.safetensors" ] && [ ! -e "$RC/blobs/$SHA" ] && [ ! -e "$RC/blobs/$SHA.incomplete" ] \
  || die "corrupt download left behind"
[ ! -e "$RC/refs/main" ] || die "refs written for a failed download"
run_fail 1 "checksum mismatch" generate tiny/corrupt --prompt x

echo "== a local path wins over a repo id"
mkdir -p "$TMP/cwd/tiny" && ln -s "$ST" "$TMP/cwd/tiny/nothere"
(cd "$TMP/cwd" && HF_HUB_OFFLINE=1 "${PAGODA[@]}" generate tiny/nothere --prompt "Once upon a time" \
  --temperature 0 --max-tokens 8 --json >"$TMP/out" 2>"$ERR") || die "local path not used"
cmp -s "$TMP/out" "$TMP/want" || die "local path output differs"

echo "== pagoda serve org/name: downloads into an empty cache, then answers"
export HF_HOME="$TMP/hf2"
MODEL=tiny/stories
start_lib_server
[ -L "$TMP/hf2/hub/models--tiny--stories/snapshots/$C1/model.safetensors" ] || die "serve did not download"
curl -sf "$URL/v1/models" >"$TMP/models" || die "/v1/models"
grep -q '"id":"tiny/stories"' "$TMP/models" || die "served name: $(cat "$TMP/models")"
curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}' >"$TMP/comp" || die "completion"
grep -q '"text":", there was a little girl"' "$TMP/comp" || die "completion text: $(cat "$TMP/comp")"
kill -TERM "$SPID"
wait "$SPID" || die "server exit code"
SPID=""
echo "PASS"
