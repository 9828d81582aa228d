#!/usr/bin/env bash
# Runs every built benchmark in build/bench_* and prints its report.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
for b in build/bench/bench_*; do
  [ -x "$b" ] || continue
  echo "== $b"
  "$b"
done
