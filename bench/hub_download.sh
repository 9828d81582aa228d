#!/usr/bin/env bash
# What a checked download costs: `pagoda download` of one LFS blob (HEAD,
# GET through the CDN redirect, sha256 check, rename, symlink) against plain
# `curl -L -o` of the same URL (the transfer alone), from the mock hub of
# tests/hub/ on 127.0.0.1, alternated, into a fresh cache every run.
# usage: bench/hub_download.sh PAGODA [SIZE_MIB (256)] [ROUNDS (5)]
set -euo pipefail
PAGODA=$(realpath "$1")
MIB=${2:-256}
ROUNDS=${3:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
TMP=$(mktemp -d)
MPID=""
trap 'if [ -n "$MPID" ]; then kill "$MPID" 2>/dev/null || true; fi; rm -rf "$TMP"' EXIT

head -c $((MIB << 20)) /dev/urandom >"$TMP/blob.safetensors"
echo '{}' >"$TMP/config.json"
mkdir -p "$TMP/repos/bench/blob"
cat >"$TMP/repos/bench/blob/repo.json" <<EOF
{"revisions": {"main": "4444444444444444444444444444444444444444"},
 "files": {"config.json": "$TMP/config.json", "model.safetensors": "$TMP/blob.safetensors"}}
EOF
python3 "$HERE/../tests/hub/mock_hub.py" --root "$TMP/repos" --port-file "$TMP/port" --log /dev/null &
MPID=$!
for _ in $(seq 1 300); do [ -f "$TMP/port" ] && break; sleep 0.1; done
export HF_ENDPOINT="http://127.0.0.1:$(cat "$TMP/port")"
URL="$HF_ENDPOINT/bench/blob/resolve/main/model.safetensors"

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
: >"$TMP/curl.t"
: >"$TMP/pagoda.t"
for r in $(seq 1 "$ROUNDS"); do
  rm -f "$TMP/out.bin"
  t0=$(now)
  curl -sfL -o "$TMP/out.bin" "$URL"
  t1=$(now)
  echo "$t1 - $t0" | bc -l >>"$TMP/curl.t"
  rm -rf "$TMP/hf"
  t0=$(now)
  HF_HOME="$TMP/hf" HF_HUB_DISABLE_PROGRESS_BARS=1 PAGODA_LOG=warn \
    "$PAGODA" download bench/blob --include model.safetensors >/dev/null
  t1=$(now)
  echo "$t1 - $t0" | bc -l >>"$TMP/pagoda.t"
  cmp -s "$TMP/hf/hub/models--bench--blob/snapshots/4444444444444444444444444444444444444444/model.safetensors" \
    "$TMP/blob.safetensors" || { echo "download differs" >&2; exit 1; }
done
c=$(median <"$TMP/curl.t")
p=$(median <"$TMP/pagoda.t")
t0=$(now)
sha256sum "$TMP/blob.safetensors" >/dev/null
t1=$(now)
printf '%d MiB blob, %d alternated rounds, medians:\n' "$MIB" "$ROUNDS"
printf '  curl -L -o (transfer only)      %.3f s  (%.0f MiB/s)\n' "$c" "$(echo "$MIB / $c" | bc -l)"
printf '  pagoda download (+ sha256 etc.) %.3f s  (%.0f MiB/s)\n' "$p" "$(echo "$MIB / $p" | bc -l)"
printf '  ratio pagoda / curl             %.2f\n' "$(echo "$p / $c" | bc -l)"
printf '  (sha256sum of the blob alone    %.3f s)\n' "$(echo "$t1 - $t0" | bc -l)"
