/* Environment check: what in the machine's setup costs pagoda speed, what
 * it costs, and the exact fix. Behind the "findings" section of `pagoda env`
 * and the warnings `serve` / `generate` log once at start (the gathering of
 * this process's settings lives in kernels/env_report.h).
 *
 * Every file is read under two roots so tests can build a fake tree:
 *   sysfs root  (input, else $PAGODA_SYSFS_ROOT, else "/sys"):
 *     devices/system/cpu/cpu<N>/topology/{physical_package_id,core_id}
 *     devices/system/cpu/cpu<N>/cpufreq/{scaling_governor,scaling_driver,
 *                                         scaling_min_freq,cpuinfo_max_freq}
 *     devices/system/node/node<N>/{cpulist,meminfo}
 *     kernel/mm/transparent_hugepage/enabled
 *     fs/cgroup/<path>/cpu.max                          (cgroup v2)
 *     fs/cgroup/{cpu,cpu,cpuacct,cpuacct,cpu}/<path>/cpu.cfs_{quota,period}_us (v1)
 *   procfs root (input, else $PAGODA_PROCFS_ROOT, else "/proc"):
 *     meminfo (SwapTotal, SwapFree), swaps, self/cgroup, self/maps
 * plus the LD_PRELOAD environment variable. A file that cannot be read
 * gives no finding (never an error): the check only reports what it saw.
 *
 * The findings (one at most of each kind), with the thresholds:
 *   SMT          pinned threads sharing a physical core (same
 *                physical_package_id and core_id), or more threads than
 *                physical cores in the affinity mask
 *   AFFINITY     more threads than CPUs in the affinity mask
 *   CPU_QUOTA    cgroup quota (v2 cpu.max "Q P", v1 cfs_quota_us /
 *                cfs_period_us; the smallest on the path to the root) below
 *                the thread count, in CPUs = Q / P
 *   UNPINNED     the pool's threads are not pinned
 *   BLOCKTIME    speculative decoding on and a pool block time below
 *                PG_POOL_BLOCKTIME_DEFAULT_US
 *   FOREIGN_LIB  an OpenMP runtime (libiomp5, libgomp, libomp) or allocator
 *                (tcmalloc, jemalloc) named in LD_PRELOAD, or libiomp5 /
 *                libomp / tcmalloc / jemalloc mapped in the process
 *                (self/maps). libgomp mapped without LD_PRELOAD is not
 *                reported: Debian's libavcodec (audio decoding) pulls it
 *                in, idle, in every pagoda process.
 *   THP          transparent_hugepage/enabled is "never"
 *   ISA_FORCED   the kernel level in use is below the CPU's best
 *                (PAGODA_ISA)
 *   ISA_MISSING  the CPU lacks a feature the fast kernels use: x86 AVX-512,
 *                AVX512_BF16, VNNI (AVX512_VNNI or AVX-VNNI); Arm I8MM,
 *                BF16, SVE; or no SIMD at all
 *   NUMA_SPAN    the threads run on CPUs of more than one NUMA node
 *   NUMA_MEMORY  model_bytes above the MemTotal of the node(s) the threads
 *                run on
 *   SWAP         SwapTotal - SwapFree > 0
 *   GOVERNOR     a thread's CPU has the "powersave" cpufreq governor */
#ifndef PAGODA_BASE_ENV_CHECK_H
#define PAGODA_BASE_ENV_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/cpu.h"

typedef enum pg_envchk_kind {
    PG_ENVCHK_SMT = 0,
    PG_ENVCHK_AFFINITY,
    PG_ENVCHK_CPU_QUOTA,
    PG_ENVCHK_UNPINNED,
    PG_ENVCHK_BLOCKTIME,
    PG_ENVCHK_FOREIGN_LIB,
    PG_ENVCHK_THP,
    PG_ENVCHK_ISA_FORCED,
    PG_ENVCHK_ISA_MISSING,
    PG_ENVCHK_NUMA_SPAN,
    PG_ENVCHK_NUMA_MEMORY,
    PG_ENVCHK_SWAP,
    PG_ENVCHK_GOVERNOR,
    PG_ENVCHK_COUNT
} pg_envchk_kind;

/* One finding: three NUL-terminated sentences without newlines. */
typedef struct pg_envchk_finding {
    pg_envchk_kind kind;
    char what[320]; /* the condition, with the values read ("4 threads on 2 physical cores") */
    char cost[640]; /* what it costs, a number where one is known and where it comes from */
    char fix[400];  /* the exact flag, environment variable or command */
} pg_envchk_finding;

/* What the check looks at besides the files. */
typedef struct pg_envchk_input {
    const char *sysfs_root;  /* NULL: $PAGODA_SYSFS_ROOT, else "/sys" */
    const char *procfs_root; /* NULL: $PAGODA_PROCFS_ROOT, else "/proc" */
    const pg_cpu_info *cpu;  /* ISA features and best level (required) */
    pg_isa isa_chosen;       /* level of the kernel table in use */
    int n_threads;           /* pool threads, the caller included (>= 1) */
    const int *thread_cpus;  /* n_threads entries: CPU thread i is pinned to, -1 = unpinned */
    const int *allowed;      /* the process's affinity mask, ascending (pg_cpu_allowed) */
    int n_allowed;
    long blocktime_us;    /* pool block time (pg_pool_blocktime_us) */
    bool speculation;     /* speculative decoding is on */
    uint64_t model_bytes; /* weights + KV cache + workspace resident; 0 = no model loaded */
} pg_envchk_input;

/* Run every check of the header comment on `in`; write the findings, in
 * pg_envchk_kind order, to out[0..cap) and return how many (<= cap;
 * PG_ENVCHK_COUNT always suffices). Reads files, never fails. */
int pg_envchk_run(const pg_envchk_input *in, pg_envchk_finding *out, int cap);

/* Short name of a kind ("smt", "cpu_quota", ...) for tests and logs. */
const char *pg_envchk_kind_name(pg_envchk_kind k);

/* Print findings for `pagoda env`: per finding "  - <what>\n" then
 * "      cost: <cost>\n" and "      fix:  <fix>\n"; "  none\n" if n == 0. */
void pg_envchk_print(const pg_envchk_finding *f, int n, FILE *out);

/* Log each finding once as a warning: "env: <what>; cost: <cost>; fix: <fix>". */
void pg_envchk_log(const pg_envchk_finding *f, int n);

#endif
