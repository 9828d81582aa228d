#!/usr/bin/env bash
# End-to-end tensor parallelism (issue 22) through the `pagoda` command:
#   tp_e2e.sh generate_shm PAGODA MODEL          -tp 2 (forked ranks) prints the
#                                                -tp 1 text (greedy)
#   tp_e2e.sh generate_mpi PAGODA MODEL MPIEXEC  the same under mpirun -np 2
#   tp_e2e.sh no_tp_mpi PAGODA MODEL MPIEXEC     mpirun -np 2 without -tp: each
#                                                process warns that it runs a whole copy
#   tp_e2e.sh mismatch_mpi PAGODA MODEL MPIEXEC  two MPI ranks started with
#                                                different options: a clear error
#   tp_e2e.sh spec_draft_shm PAGODA MODEL        -tp 2 with a draft model
#                                                (--speculative-config draft_model,
#                                                the model as its own draft) prints
#                                                the -tp 1 text (the draft runs whole
#                                                on rank 0)
#   tp_e2e.sh mismatch_weights_mpi PAGODA MODEL MPIEXEC GEN_MODEL
#                                                MPMD ranks given two models of the
#                                                same shape, other weights: refused
#   tp_e2e.sh rank_dies PAGODA MODEL             `serve -tp 2`, rank 1 killed, one
#                                                request: the server exits non-zero
#                                                naming rank 1 (bounded wait)
#   tp_e2e.sh rank_dies_idle PAGODA MODEL        the same with no request: the idle
#                                                server notices and exits by itself
# Waits poll (0.1 s) up to a bound; nothing depends on timing otherwise.
set -uo pipefail
MODE=$1
PAGODA=$2
MODEL=$3
MPIEXEC=${4:-}
GEN_MODEL=${5:-}
TMP=$(mktemp -d)
SPID=""
cleanup() {
  if [ -n "$SPID" ] && kill -0 "$SPID" 2>/dev/null; then kill -KILL "$SPID" 2>/dev/null; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
die() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/*.err; do [ -f "$f" ] && { echo "--- $f:" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}
GEN=(generate "$MODEL" --prompt "Once upon a time" --max-tokens 48 --temperature 0 --ignore-eos
     --kv-cache-memory 16MiB)
MPI=("$MPIEXEC" --allow-run-as-root --oversubscribe)

case "$MODE" in
generate_shm | generate_mpi)
  "$PAGODA" "${GEN[@]}" -tp 1 >"$TMP/ref.out" 2>"$TMP/ref.err" || die "-tp 1 failed"
  if [ "$MODE" = generate_shm ]; then
    "$PAGODA" "${GEN[@]}" -tp 2 >"$TMP/tp.out" 2>"$TMP/tp.err" || die "-tp 2 failed"
    kind=shm
  else
    # (an ASan build: no leak report at exit, Open MPI's unloaded plugins
    # leave ~120 KB LeakSanitizer cannot attribute; pagoda's own paths are
    # leak-checked by generate_shm; memory errors are still checked here)
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
      "${MPI[@]}" -np 2 "$PAGODA" "${GEN[@]}" --tensor-parallel-size 2 >"$TMP/tp.out" \
      2>"$TMP/tp.err" || die "mpirun -np 2 failed"
    kind=mpi
  fi
  grep -q "tensor parallelism over 2 ranks ($kind)" "$TMP/tp.err" || die "no 2-rank $kind log line"
  if [ "$MODE" = generate_mpi ] &&
     [ "$("${MPI[@]}" -np 1 sh -c 'echo ${OMPI_MCA_orte_bound_at_launch:-0}')" = 1 ]; then
    # mpirun bound each rank to its CPUs: those are the rank's, pinned, not
    # split again between the local ranks (which left 0 CPUs each: unpinned)
    grep -q "rank 0 on CPUs [0-9,-]* (bound by mpirun)" "$TMP/tp.err" ||
      die "the rank did not take the CPUs mpirun bound it to"
    grep -q "threads not pinned" "$TMP/tp.err" && die "threads not pinned under mpirun's binding"
  fi
  [ -s "$TMP/ref.out" ] || die "-tp 1 printed nothing"
  cmp -s "$TMP/ref.out" "$TMP/tp.out" || {
    echo "-tp 1: $(cat "$TMP/ref.out")" >&2
    echo "-tp 2: $(cat "$TMP/tp.out")" >&2
    die "texts differ"
  }
  echo "OK: $(head -c 120 "$TMP/tp.out")"
  ;;
no_tp_mpi)
  # mpirun -np 2 without -tp: two whole copies, and a warning saying so
  "${MPI[@]}" -np 2 "$PAGODA" "${GEN[@]}" >"$TMP/np.out" 2>"$TMP/np.err" || die "mpirun -np 2 failed"
  [ "$(grep -c 'started by mpirun with 2 processes but --tensor-parallel-size 1' "$TMP/np.err")" = 2 ] ||
    die "no warning from each process"
  echo "OK: warned"
  ;;
mismatch_mpi)
  # MPMD: rank 0 and rank 1 run the same model with different --max-model-len
  if "${MPI[@]}" -np 1 "$PAGODA" "${GEN[@]}" -tp 2 : -np 1 "$PAGODA" "${GEN[@]}" -tp 2 \
       --max-model-len 128 >"$TMP/mm.out" 2>"$TMP/mm.err"; then
    die "mismatched ranks started"
  fi
  grep -q "rank 1 was started with a different model, config or options" "$TMP/mm.err" ||
    die "no mismatch message"
  echo "OK: refused"
  ;;
spec_draft_shm)
  "$PAGODA" "${GEN[@]}" -tp 1 >"$TMP/ref.out" 2>"$TMP/ref.err" || die "-tp 1 failed"
  SPEC="{\"method\": \"draft_model\", \"model\": \"$MODEL\", \"num_speculative_tokens\": 3}"
  "$PAGODA" "${GEN[@]}" -tp 2 --speculative-config "$SPEC" >"$TMP/tp.out" 2>"$TMP/tp.err" ||
    die "-tp 2 with a draft model failed"
  grep -q "speculative decoding: draft model" "$TMP/tp.err" || die "no draft model log line"
  grep -q "Accepted: [1-9]" "$TMP/tp.err" || die "no draft token accepted"
  [ -s "$TMP/ref.out" ] || die "-tp 1 printed nothing"
  cmp -s "$TMP/ref.out" "$TMP/tp.out" || {
    echo "-tp 1: $(cat "$TMP/ref.out")" >&2
    echo "-tp 2 + draft: $(cat "$TMP/tp.out")" >&2
    die "texts differ"
  }
  echo "OK: $(head -c 120 "$TMP/tp.out")"
  ;;
mismatch_weights_mpi)
  # two checkpoints of one shape (a base model and its fine-tune, say): the
  # ranks would each hold a slice of a different model and print nonsense
  [ -x "$GEN_MODEL" ] || die "gen_model not given"
  for s in 1 2; do
    "$GEN_MODEL" --hf "$TMP/m$s" --heads 4 --kv-heads 2 --hidden 64 --ffn 128 --layers 2 \
      --vocab 512 --tokenizer "$MODEL" --dtype f32 --seed $s >/dev/null 2>&1 || die "gen_model"
  done
  A=(--prompt "Once upon a time" --max-tokens 4 --kv-cache-memory 16MiB -tp 2)
  if "${MPI[@]}" -np 1 "$PAGODA" generate "$TMP/m1" "${A[@]}" : -np 1 "$PAGODA" generate \
       "$TMP/m2" "${A[@]}" >"$TMP/mw.out" 2>"$TMP/mw.err"; then
    die "ranks with different weights started"
  fi
  grep -q "rank 1 was started with a different model, config or options" "$TMP/mw.err" ||
    die "no mismatch message"
  # the same model on both ranks still starts (the check reads the weights' bytes only)
  "${MPI[@]}" -np 2 "$PAGODA" generate "$TMP/m1" "${A[@]}" >"$TMP/ok.out" 2>"$TMP/ok.err" ||
    die "the same model on both ranks refused"
  echo "OK: refused"
  ;;
rank_dies | rank_dies_idle)
  "$PAGODA" serve "$MODEL" --port 0 -tp 2 --kv-cache-memory 16MiB >"$TMP/s.out" 2>"$TMP/s.err" &
  SPID=$!
  for _ in $(seq 1 1200); do
    grep -q '^PORT=' "$TMP/s.out" 2>/dev/null && break
    kill -0 "$SPID" 2>/dev/null || die "server exited at start"
    sleep 0.1
  done
  PORT=$(sed -n 's/^PORT=//p' "$TMP/s.out")
  [ -n "$PORT" ] || die "no port"
  kid=""
  for st in /proc/[0-9]*/stat; do
    { read -r line <"$st"; } 2>/dev/null || continue
    set -- $line
    [ "${4:-}" = "$SPID" ] && kid=$1
  done
  [ -n "$kid" ] || die "no forked rank under the server (pid $SPID)"
  kill -KILL "$kid"
  # rank_dies_idle: no request; the idle server must notice by itself
  if [ "$MODE" = rank_dies ]; then
    curl -s -m 120 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "Once upon a time", "max_tokens": 8}' >/dev/null 2>&1
  fi
  for _ in $(seq 1 1200); do
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$SPID" 2>/dev/null && die "the server still runs 120 s after its rank 1 died"
  wait "$SPID"
  rc=$?
  SPID=""
  [ "$rc" -ne 0 ] || die "the server exited with status 0"
  grep -q "tensor parallelism failed: .*rank 1" "$TMP/s.err" || die "no message naming rank 1"
  echo "OK: exit $rc: $(grep 'tensor parallelism failed' "$TMP/s.err" | head -1)"
  ;;
*)
  die "unknown mode $MODE"
  ;;
esac
