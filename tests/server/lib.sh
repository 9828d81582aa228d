# Shared setup of the raw-HTTP server tests (sourced by e2e_*.sh after they
# set MODEL and PAGODA): a temp dir removed on exit with the server stopped,
# die (prints the last body and the server log), and start_server ARGS...
# (start_lib_server: starts `pagoda serve MODEL --port 0 ARGS...`, waits for its PORT= line,
# sets PORT and URL).
TMP=$(mktemp -d)
SPID=""
N=0

cleanup() {
  if [ -n "$SPID" ] && kill -0 "$SPID" 2>/dev/null; then kill -TERM "$SPID" 2>/dev/null || true; wait "$SPID" 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT

die() {
  echo "FAIL: $*" >&2
  [ -f "$TMP/body" ] && { echo "--- last body:" >&2; head -c 2000 "$TMP/body" >&2; echo >&2; }
  [ -f "$TMP/err.$N" ] && { echo "--- server log:" >&2; tail -n 30 "$TMP/err.$N" >&2; }
  exit 1
}

start_lib_server() {
  N=$((N + 1))
  "${PAGODA[@]}" serve "$MODEL" --port 0 "$@" >"$TMP/out.$N" 2>"$TMP/err.$N" &
  SPID=$!
  for _ in $(seq 1 600); do
    if grep -q '^PORT=' "$TMP/out.$N" 2>/dev/null; then break; fi
    kill -0 "$SPID" 2>/dev/null || die "server exited at start: $(cat "$TMP/err.$N")"
    sleep 0.1
  done
  PORT=$(sed -n 's/^PORT=//p' "$TMP/out.$N")
  [ -n "$PORT" ] || die "server printed no port"
  URL="http://127.0.0.1:$PORT"
}
