#!/usr/bin/env bash
# Runs every built benchmark in build/bench/bench_* and the kernel
# microbenchmarks of the pagoda binary (`pagoda bench kernels`: peaks,
# GEMM, quantized GEMM, paged attention), and prints their reports.
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
for b in build/bench/bench_*; do
  [ -x "$b" ] || continue
  echo "== $b"
  "$b"
done
echo "== build/pagoda bench kernels"
build/pagoda bench kernels
