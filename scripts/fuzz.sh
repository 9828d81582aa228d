#!/usr/bin/env bash
# Build and run pagoda's libFuzzer targets (fuzz/fuzz_*.c; docs/FUZZING.md).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (make fuzz FUZZ_SECONDS=N [FUZZ_TARGETS="a b"])
#
# Builds the targets with clang, ASan + UBSan and libFuzzer in $FUZZ_BUILD
# (default build-fuzz), makes the seed corpora from ../shared/assets
# (fuzz/make_seeds.py, into $FUZZ_BUILD/seeds), then runs every target (or the
# ones named) for SECONDS seconds each (default 10), $FUZZ_JOBS at a time
# (default 2). Each target keeps its corpus in $FUZZ_BUILD/corpus/<target>
# (grown run after run), its log in $FUZZ_BUILD/logs/<target>.log, and
# anything it finds in $FUZZ_BUILD/artifacts/<target>/ (crash-*, leak-*,
# timeout-*, oom-*). Exit status: 0 when no target found anything, 1
# otherwise (the failing targets and their artifacts are listed).
# FUZZ_FLAGS adds libFuzzer flags (e.g. "-runs=1000"); FUZZ_NICE (default 0)
# is the nice level of the fuzzers; FUZZ_WERROR=OFF builds without -Werror.
# FUZZ_CPU_SECONDS=N gives each target a budget of N CPU seconds instead
# (polled once a second; the target is then interrupted and its final stats
# kept): on a loaded machine wall time says little about the work done.
# SECONDS then stays a wall-clock cap when given (default 30 x N).
# FUZZ_TIMEOUT (default 25) is libFuzzer's per-input timeout in seconds: an
# input running longer is reported as a hang.
# Each summary line gives the target's executions, CPU seconds and libFuzzer's
# last status line (cov, ft, corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS_GIVEN=${1:-}
SECS=${1:-10}
shift || true
CPU_SECS=${FUZZ_CPU_SECONDS:-}
TIMEOUT=${FUZZ_TIMEOUT:-25}
for v in "$SECS" "$TIMEOUT" ${CPU_SECS:+"$CPU_SECS"}; do
  case $v in
    '' | *[!0-9]*) echo "fuzz: '$v' is not a whole number of seconds" >&2; exit 2 ;;
  esac
done
if [ -n "$CPU_SECS" ] && [ -z "$SECS_GIVEN" ]; then SECS=$((CPU_SECS * 30)); fi
BUILD=${FUZZ_BUILD:-build-fuzz}
JOBS=${FUZZ_JOBS:-2}
NICE=${FUZZ_NICE:-0}
ASSETS=${PAGODA_ASSETS:-$(cd .. && pwd)/shared/assets}
export PAGODA_ASSETS=$ASSETS

if ! command -v clang >/dev/null; then
  echo "fuzz: clang is missing (scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi
cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPAGODA_FUZZ=ON -DPAGODA_WERROR="${FUZZ_WERROR:-ON}" >/dev/null
cmake --build "$BUILD" --target fuzz_targets gen_model -j"$JOBS" -- --no-print-directory

rm -rf "$BUILD/seeds"
python3 fuzz/make_seeds.py "$BUILD/seeds" "$ASSETS" . "$BUILD/gen_model"

if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in "$BUILD"/fuzz_*; do [ -x "$f" ] && targets+=("$(basename "$f")"); done
fi
mkdir -p "$BUILD/logs"

# run_one TARGET: libFuzzer for SECS seconds; prints one summary line.
run_one() {
  local t=$1 dict="" d
  local corpus="$BUILD/corpus/$t" art="$BUILD/artifacts/$t"
  mkdir -p "$corpus" "$art" "$BUILD/seeds/$t"
  d=$(sed -n 's/^ \* Dictionary: fuzz\/\([a-z_]*\.dict\).*/\1/p' "fuzz/$t.c" | head -1)
  [ -n "$d" ] && dict="-dict=fuzz/$d"
  local rc=0 me=$BASHPID ticks
  # -timeout: one input running $TIMEOUT s (default 25) is a hang (a slow
  # input under a loaded machine takes several seconds); -rss_limit_mb: 2 GiB
  # is a blow-up (the limits in the code are far lower); -max_len: 1 MiB
  # inputs.
  nice -n "$NICE" "$BUILD/$t" $dict -max_total_time="$SECS" -timeout="$TIMEOUT" \
    -rss_limit_mb=2048 -max_len=1048576 -print_final_stats=1 \
    -artifact_prefix="$art/" ${FUZZ_FLAGS:-} \
    "$corpus" "$BUILD/seeds/$t" >"$BUILD/logs/$t.log" 2>&1 &
  local pid=$! stopped=0
  if [ -n "$CPU_SECS" ]; then
    # user + system ticks of the fuzzer (fields 14, 15 of /proc/PID/stat)
    local hz used
    hz=$(getconf CLK_TCK)
    local state
    while kill -0 "$pid" 2>/dev/null; do
      read -r _ _ state _ <"/proc/$pid/stat" 2>/dev/null || break
      [ "$state" = Z ] && break # exited: wait reaps it
      used=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)
      if [ "${used:-0}" -ge $((CPU_SECS * hz)) ]; then
        kill -INT "$pid" 2>/dev/null || true
        stopped=1
        break
      fi
      sleep 1
    done
  fi
  wait "$pid" || rc=$?
  # our SIGINT at the CPU budget is no finding: libFuzzer (14) prints its
  # final stats and exits 72 ("run interrupted"), a code no finding uses
  if [ "$stopped" = 1 ] && [ "$rc" -eq 72 ] &&
    grep -q 'libFuzzer: run interrupted' "$BUILD/logs/$t.log"; then
    rc=0
  fi
  # CPU seconds the fuzzer used (this shell's reaped children, clock ticks)
  ticks=$(awk '{print $16 + $17}' "/proc/$me/stat" 2>/dev/null || echo 0)
  local cpu=$((ticks / $(getconf CLK_TCK)))
  local last runs
  last=$(grep -E '^#[0-9]+' "$BUILD/logs/$t.log" | tail -1 || true)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$BUILD/logs/$t.log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    echo "FAIL $t (exit $rc): $(grep -m1 -E 'ERROR: |runtime error|^[a-z_]+: .*abort|==ERROR' \
      "$BUILD/logs/$t.log" || echo see log) -- $BUILD/logs/$t.log, $art/"
    return 1
  fi
  echo "ok   $t: ${runs:-?} runs, ${cpu} CPU s; ${last:-no status line}"
}
export -f run_one
export BUILD SECS NICE CPU_SECS TIMEOUT

if [ -n "$CPU_SECS" ]; then
  echo "fuzz: ${#targets[@]} targets x ${CPU_SECS} CPU s (wall cap ${SECS}s), $JOBS at a time"
else
  echo "fuzz: ${#targets[@]} targets x ${SECS}s, $JOBS at a time"
fi
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one {}' || status=1
exit $status
