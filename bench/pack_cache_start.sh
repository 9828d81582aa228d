#!/usr/bin/env bash
# First vs repeat start of `pagoda generate MODEL -n 1` with the packed-weight
# cache (docs/ARCHITECTURE.md "Packed-weight cache"): wall time and peak RSS
# (/usr/bin/time -v), medians of RUNS runs each. "first" deletes the cache
# file before every run (the source file stays in the page cache: this is
# the packing cost, not the disk); "repeat" maps the file the previous run
# wrote; "off" is --no-pack-cache (what every start cost before the cache).
#
#   bench/pack_cache_start.sh PAGODA_BIN MODEL [TOKENIZER] [RUNS] [SLOW_RUNS]
#
# SLOW_RUNS (default RUNS): runs of "off" and "first" (minutes each on a
# loaded machine).
#
# Models: build/gen_model --preset llama-3.2-1b --hf DIR --tokenizer
# $PAGODA_ASSETS/tokenizers/llama3 (BF16 HF) and build/gen_model --preset
# llama-3.2-1b --gguf FILE --dtype q8_0 (Q8_0 GGUF, TOKENIZER
# $PAGODA_ASSETS/tokenizers/llama3).
set -euo pipefail
bin=$1
model=$2
tok=${3:-}
runs=${4:-3}
slow_runs=${5:-$runs}
cache=$(mktemp -d /tmp/pagoda-pack-bench-XXXXXX)
trap 'rm -rf "$cache"' EXIT
export PAGODA_CACHE_DIR=$cache
args=(generate "$model" --prompt hi --max-tokens 1 --max-model-len 256 --kv-cache-memory 64MiB)
[ -n "$tok" ] && args+=(--tokenizer "$tok")

one() { # prints "seconds kib"
    /usr/bin/time -f '%e %M' -o "$cache/time" "$bin" "$@" >/dev/null 2>&1
    cat "$cache/time"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for mode in off first repeat; do
    t=() r=()
    n=$runs
    [ "$mode" != repeat ] && n=$slow_runs
    for i in $(seq "$n"); do
        case $mode in
            off) out=$(one "${args[@]}" --no-pack-cache) ;;
            first) rm -f "$cache"/*.pgpack; out=$(one "${args[@]}") ;;
            repeat) out=$(one "${args[@]}") ;;
        esac
        t+=("${out% *}") r+=("${out#* }")
    done
    printf '%-7s wall %6s s (runs: %s)  peak RSS %7s MiB\n' "$mode" \
        "$(printf '%s\n' "${t[@]}" | median)" "${t[*]}" \
        "$(( $(printf '%s\n' "${r[@]}" | median) / 1024 ))"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
