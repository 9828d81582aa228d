#!/usr/bin/env bash
# Instruction counts of the aarch64 kernels (docs/PERFORMANCE.md "Arm kernels:
# instruction counts"). qemu is not a timer, so Arm performance is argued from
# what the kernels execute: multiply-accumulate instructions against the
# loads, shuffles and loop control around them.
#
#   tools/arm_insn_count.sh [static|dynamic|x86|all]     (default: all)
#
# static   disassembles the cross-compiled kernel objects (build-arm, made by
#          `make test-arm` or `cmake --build build-arm --target pagoda_core`)
#          and, for every innermost loop (a backward branch whose range holds
#          no other one) of every function in src/kernels/arm/*.c, counts per
#          iteration: loads, stores, MAC instructions (BFMMLA, SMMLA, SDOT,
#          BFDOT, FMLA ...), other vector instructions, scalar/branch, and
#          stack accesses ([sp...]: spills).
# dynamic  runs build-arm/insn_probe (tools/insn_probe.c) under
#          qemu-aarch64 -cpu max -singlestep -d exec,nochain: every executed
#          guest instruction is one "Trace" line. Per-call count =
#          (count(REPS=3) - count(REPS=1)) / 2, so start-up cancels.
# x86      the same probe, native build (build/insn_probe), under
#          valgrind --tool=callgrind (Collected Ir). valgrind hides AVX-512
#          from CPUID, so the table picks the AVX2 variants there.
# Environment: BUILD_ARM (default build-arm), BUILD (default build),
# KERNELS (probe kernel list), OBJDUMP (default aarch64-linux-gnu-objdump).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-all}
BUILD_ARM=${BUILD_ARM:-build-arm}
BUILD=${BUILD:-build}
OBJDUMP=${OBJDUMP:-aarch64-linux-gnu-objdump}
SYSROOT=${SYSROOT:-/usr/aarch64-linux-gnu}
KERNELS=${KERNELS:-"gemm_bf16 gemm_bf16_neon gemm_f32 qgemm_w8 qgemm_w8:dotprod qgemm_w4 qgemm_w4:dotprod attn_qk attn_pv attn_qk_f32 attn_pv_f32 vexp"}
OBJDIR=$BUILD_ARM/CMakeFiles/pagoda_core.dir/src/kernels/arm

static_counts() {
    [ -d "$OBJDIR" ] || { echo "no $OBJDIR: build the aarch64 library first (make test-arm)" >&2; exit 1; }
    for o in "$OBJDIR"/*.o; do
        echo "== $(basename "$o" .o).c  ($OBJDUMP -d --no-show-raw-insn $o)"
        "$OBJDUMP" -d --no-show-raw-insn "$o" | python3 -c '
import re, sys
MAC = {"bfmmla", "smmla", "ummla", "usmmla", "sdot", "udot", "usdot", "sudot", "bfdot",
       "fmla", "fmls", "fmad", "fmsb", "fmmla", "bfmlalb", "bfmlalt", "mla"}
BR = re.compile(r"^(b|b\.\w+|bc\.\w+|cbz|cbnz|tbz|tbnz)$")
funcs, cur = {}, None
for line in sys.stdin:
    m = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
    if m:
        cur = m.group(1); funcs[cur] = []; continue
    m = re.match(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$", line)
    if m and cur:
        funcs[cur].append((int(m.group(1), 16), m.group(2), m.group(3)))
def cls(mn, ops):
    if mn in MAC: return "mac"
    if "[sp" in ops: return "spill"
    if mn.startswith("ld"): return "load"
    if mn.startswith("st"): return "store"
    if BR.match(mn) or mn == "ret": return "branch"
    if re.search(r"\b([vz]\d+|[qdshb]\d+\b|p\d+[./])", ops): return "vec"
    return "scalar"
for f, ins in funcs.items():
    loops = []
    for a, mn, ops in ins:
        if BR.match(mn):
            t = re.search(r"\b([0-9a-f]+) <", ops)
            if t and int(t.group(1), 16) <= a:
                loops.append((int(t.group(1), 16), a))
    inner = [l for l in loops if not any(o != l and l[0] <= o[0] and o[1] <= l[1] for o in loops)]
    for lo, hi in sorted(set(inner)):
        body = [(mn, ops) for a, mn, ops in ins if lo <= a <= hi]
        n = {k: 0 for k in ("mac", "load", "store", "vec", "scalar", "branch", "spill")}
        hist = {}
        for mn, ops in body:
            n[cls(mn, ops)] += 1
            hist[mn] = hist.get(mn, 0) + 1
        if n["mac"] == 0: continue
        top = " ".join("%s:%d" % kv for kv in sorted(hist.items(), key=lambda kv: -kv[1])[:8])
        print("  %-34s loop %5x-%-5x insns %3d  mac %3d  load %2d  store %2d  vec %2d  "
              "scalar+branch %2d  spill %d  mac/insn %.2f  [%s]" %
              (f[:34], lo, hi, len(body), n["mac"], n["load"], n["store"], n["vec"],
               n["scalar"] + n["branch"], n["spill"], n["mac"] / len(body), top))
'
    done
}

# count_lines CMD...: executed guest instructions of CMD under qemu singlestep.
qemu_count() {
    qemu-aarch64 -L "$SYSROOT" -cpu "${QEMU_CPU:-max}" -singlestep -d exec,nochain -D /dev/fd/3 \
        "$@" 3>&1 1>/dev/null | grep -c '^Trace'
}

dynamic_counts() {
    local probe=$BUILD_ARM/insn_probe
    [ -x "$probe" ] || { echo "no $probe: cmake --build $BUILD_ARM --target insn_probe" >&2; exit 1; }
    echo "== aarch64 under qemu-aarch64 -cpu ${QEMU_CPU:-max} -singlestep -d exec,nochain"
    printf '  %-18s %-14s %12s %12s %10s\n' kernel variant insns/call macs/call macs/insn
    for k in $KERNELS; do
        local info c1 c3
        info=$(qemu-aarch64 -L "$SYSROOT" -cpu "${QEMU_CPU:-max}" "$probe" "$k" 1) || continue
        c1=$(qemu_count "$probe" "$k" 1)
        c3=$(qemu_count "$probe" "$k" 3)
        report "$k" "$info" "$c1" "$c3"
    done
}

x86_counts() {
    local probe=$BUILD/insn_probe
    [ -x "$probe" ] || { echo "no $probe: cmake --build $BUILD --target insn_probe" >&2; exit 1; }
    command -v valgrind >/dev/null || { echo "valgrind missing" >&2; exit 1; }
    echo "== x86-64 under valgrind --tool=callgrind (AVX-512 hidden by valgrind)"
    printf '  %-18s %-14s %12s %12s %10s\n' kernel variant insns/call macs/call macs/insn
    for k in $KERNELS; do
        local info c1 c3
        info=$(valgrind -q --tool=callgrind --callgrind-out-file=/dev/null "$probe" "$k" 1 2>/dev/null) || continue
        c1=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$probe" "$k" 1 2>&1 >/dev/null |
            sed -n 's/.*Collected : //p')
        c3=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$probe" "$k" 3 2>&1 >/dev/null |
            sed -n 's/.*Collected : //p')
        report "$k" "$info" "$c1" "$c3"
    done
}

report() { # kernel, probe's line, count at REPS=1, count at REPS=3
    local variant work per
    variant=$(sed -n 's/.*variant=\([^ ]*\).*/\1/p' <<<"$2")
    work=$(sed -n 's/.*\(macs\|elements\)_per_call=\([0-9]*\).*/\2/p' <<<"$2")
    per=$((($4 - $3) / 2))
    printf '  %-18s %-14s %12d %12d %10s\n' "$1" "$variant" "$per" "$work" \
        "$(awk -v w="$work" -v p="$per" 'BEGIN { printf "%.2f", w / p }')"
}

case $MODE in
static) static_counts ;;
dynamic) dynamic_counts ;;
x86) x86_counts ;;
all)
    static_counts
    dynamic_counts
    x86_counts
    ;;
*)
    echo "usage: $0 [static|dynamic|x86|all]" >&2
    exit 2
    ;;
esac
