#!/usr/bin/env bash
# Checks that the thread pool's atomics compiled to Armv8.1 LSE instructions
# (ldadd/cas/swp/...) and not to load/store-exclusive retry loops
# (ldxr/ldaxr/stxr/stlxr) or out-of-line atomic helpers (__aarch64_*).
# Usage: check_lse.sh OBJDUMP OBJECT...   (the objects of pagoda_core; only
# pool.c.o and affinity.c.o are inspected). Registered by cmake/tests.cmake
# in the aarch64 cross build only.
set -euo pipefail
objdump=$1
shift
objs=()
# CMake passes $<TARGET_OBJECTS:...> as one ';'-separated argument.
IFS=';' read -r -a given <<< "$*"
for o in "${given[@]}"; do
  case "$o" in
    */base/pool.c.o|*/base/pool.c.obj|*/base/affinity.c.o) objs+=("$o") ;;
  esac
done
if [ ${#objs[@]} -eq 0 ]; then
  echo "check_lse: pool.c.o not among the objects given" >&2
  exit 1
fi
asm=$("$objdump" -d --no-show-raw-insn "${objs[@]}")
# Exclusive-monitor loads/stores (any width/acquire/release variant).
bad=$(printf '%s\n' "$asm" | grep -E $'\t(ldx|ldax|stx|stlx)(r|rb|rh|p)\\b' || true)
outline=$(printf '%s\n' "$asm" | grep -E '<__aarch64_(cas|swp|ldadd|ldclr|ldset|ldeor)' || true)
lse=$(printf '%s\n' "$asm" | grep -cE $'\t(ldadd|ldadda|ldaddal|ldaddl|cas|casa|casal|casl|swp|swpa|swpal|swpl|ldset|ldclr|ldeor|stadd|stset)(b|h)?\\b' || true)
if [ -n "$bad" ]; then
  echo "check_lse: load/store-exclusive instructions found in the pool:" >&2
  printf '%s\n' "$bad" >&2
  exit 1
fi
if [ -n "$outline" ]; then
  echo "check_lse: out-of-line atomic helpers called (-moutline-atomics?):" >&2
  printf '%s\n' "$outline" >&2
  exit 1
fi
if [ "$lse" -eq 0 ]; then
  echo "check_lse: no LSE atomic instruction found in the pool's objects" >&2
  exit 1
fi
echo "check_lse: $lse LSE atomic instructions, no exclusive loops (${objs[*]##*/})"
