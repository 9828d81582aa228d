#!/usr/bin/env bash
# The fault soak (tests/server/soak.mjs) against `pagoda serve`: CLIENTS
# (default 64) clients of mixed kinds -- random disconnects, slow readers,
# n > 1, logprobs, cancellations, oversized requests -- for SECONDS; zero
# lost or hung requests, the server idle with KV usage 0 afterwards, RSS
# growth bounded (slope reported); then SIGTERM and exit 0.
# usage: soak.sh MODEL SECONDS CHAT_TEMPLATE PAGODA [EMULATOR ARGS... before PAGODA]
# env: PAGODA_SOAK_CLIENTS, PAGODA_SOAK_SEED, SOAK_SKIP_RSS (sanitizer builds)
set -euo pipefail
MODEL=$1
SOAK_SECONDS=$2
TEMPLATE=$3
shift 3
PAGODA=("$@")
. "$(dirname "$0")/lib.sh"
command -v node >/dev/null || die "node is needed"
# A small KV cache (touched in full during the warm-up, so RSS measures
# leaks, not lazily touched cache pages), a 1 MiB body limit for the
# oversized requests, and a keep-alive timeout above the client's (undici
# closes idle connections after 4 s; a server closing at 5 s races a client
# whose event loop is late under load, and the request sent on the closing
# connection fails: the usual rule, server idle timeout > client's).
start_lib_server --max-num-seqs 64 --kv-cache-memory 16MiB --max-request-bytes 1MiB --keep-alive-timeout 60 \
  ${TEMPLATE:+--chat-template "$TEMPLATE"}
PAGODA_URL=$URL PAGODA_PID=$SPID SOAK_SECONDS=$SOAK_SECONDS SOAK_CLIENTS=${PAGODA_SOAK_CLIENTS:-64} \
  SOAK_SEED=${PAGODA_SOAK_SEED:-12345} SOAK_MAX_BODY=1048576 SOAK_CTX=512 \
  node "$(dirname "$0")/soak.mjs" || { cp "$TMP/err.$N" "${PAGODA_SOAK_LOG:-/dev/null}" 2>/dev/null || true; die "soak failed"; }
kill -TERM "$SPID"
wait "$SPID" || die "server exit code $? on SIGTERM"
SPID=""
