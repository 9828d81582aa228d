#!/usr/bin/env bash
# Runs the openai-client test of `pagoda serve` (openai.test.mjs) from a copy
# in WORK_DIR after `npm ci` there (the pinned openai package of
# package-lock.json; re-installed when the lock file changes).
# usage: run.sh SRC_DIR WORK_DIR MODEL CHAT_TEMPLATE PAGODA [EMULATOR ARGS... before PAGODA]
# Env NODE_TEST: the test file (default openai.test.mjs; harmony.test.mjs wants the
# scripted gpt-oss model of scripted_gpt_oss.py as MODEL).
set -euo pipefail
SRC=$1 WORK=$2 MODEL=$3 TEMPLATE=$4
shift 4
if [ -n "$TEMPLATE" ]; then TEMPLATE=$(realpath "$TEMPLATE"); fi
MODEL=$(realpath "$MODEL")
ARGS=()
for a in "$@"; do if [ -e "$a" ]; then ARGS+=("$(realpath "$a")"); else ARGS+=("$a"); fi; done
set -- "${ARGS[@]}"
mkdir -p "$WORK"
NODE_TEST=${NODE_TEST:-openai.test.mjs}
cp "$SRC/package.json" "$SRC/$NODE_TEST" "$SRC/serve.mjs" "$WORK/"
if ! cmp -s "$SRC/package-lock.json" "$WORK/package-lock.json" || [ ! -d "$WORK/node_modules/openai" ]; then
  cp "$SRC/package-lock.json" "$WORK/"
  (cd "$WORK" && npm ci --no-audit --no-fund --loglevel=error)
fi
CMD=$(printf '%s\n' "$@" | jq -R . | jq -s -c .)
cd "$WORK"
PAGODA_CMD="$CMD" PAGODA_SERVE_MODEL="$MODEL" PAGODA_CHAT_TEMPLATE="$TEMPLATE" node --test "$NODE_TEST"
