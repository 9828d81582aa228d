/* CPU feature detection and machine topology, detected once per process.
 *
 * x86-64: CPUID leaves 1, 7.0, 7.1 and 0x80000002..4 (brand string), plus
 * XGETBV(0) to check that the OS saves the YMM / ZMM / AMX tile state
 * (Intel SDM vol. 1 ch. 13 "Managing state using the XSAVE feature set";
 * feature bits: Intel SDM vol. 2A, CPUID instruction, tables 3-8 and 3-10).
 * aarch64: getauxval(AT_HWCAP / AT_HWCAP2) (Linux
 * Documentation/arch/arm64/elf_hwcaps.rst), the SVE vector length from
 * prctl(PR_SVE_GET_VL), MIDR_EL1 from sysfs or the kernel-emulated MRS.
 * Topology, caches and memory come from /sys and /proc (Linux only; missing
 * files leave fields 0 / "unknown", never an error).
 *
 * ISA levels order the kernel variants of one architecture:
 *   x86-64:  scalar < avx2 < avx512 < avx512bf16
 *   aarch64: scalar < neon < sve
 * PAGODA_ISA (read by the dispatch table, src/kernels/dispatch.h) may force a
 * LOWER level; see pg_isa_resolve. */
#ifndef PAGODA_BASE_CPU_H
#define PAGODA_BASE_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Kernel ISA levels. Values of both architectures share one enum so names
 * can be parsed (and rejected with a clear message) on either. */
typedef enum pg_isa {
    PG_ISA_SCALAR = 0,
    PG_ISA_AVX2,       /* x86: AVX2 + FMA + F16C, OS saves YMM */
    PG_ISA_AVX512,     /* x86: AVX-512 F+BW+VL+DQ, OS saves ZMM/opmask */
    PG_ISA_AVX512BF16, /* x86: avx512 + AVX512_BF16 */
    PG_ISA_NEON,       /* arm: Advanced SIMD (ASIMD) */
    PG_ISA_SVE,        /* arm: neon + SVE */
    PG_ISA_COUNT
} pg_isa;

typedef struct pg_cpu_info {
    /* ---- identity */
    char arch[16];   /* "x86_64" or "aarch64" */
    char model[128]; /* x86 brand string; arm "Neoverse-V2 (0x41:0xd4f)" or "unknown" */
    uint32_t midr;   /* aarch64 MIDR_EL1 (0 if unknown; always 0 on x86) */

    /* ---- x86-64 features (all false on aarch64). OS state support (XCR0)
     * is folded in: avx2 is false when the OS does not save YMM, etc. */
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq;
    bool avx512_bf16, avx512_vnni, avx_vnni;
    bool amx_tile, amx_int8,
        amx_bf16;                /* Linux also needs arch_prctl permission: pg_cpu_request_amx */
    bool os_ymm, os_zmm, os_amx; /* XCR0: YMM (bits 1,2), ZMM (5,6,7), tile (17,18) */

    /* ---- aarch64 features (all false on x86-64) */
    bool asimd, asimd_dotprod, i8mm, bf16, sve, sve2, lse;
    bool fp16;        /* half-precision arithmetic, scalar + vector (FPHP + ASIMDHP) */
    int sve_vl_bytes; /* SVE vector length in bytes (0 without SVE) */

    /* ---- topology */
    int logical_cpus;   /* CPUs this process may run on (sched_getaffinity) */
    int online_cpus;    /* CPUs online in the machine */
    int physical_cores; /* distinct (package, core) among the allowed CPUs */
    int smt_per_core;   /* hardware threads per core (>= 1) */
    int numa_nodes;     /* /sys/devices/system/node/node* (>= 1) */
    size_t l1d_bytes;   /* per core */
    size_t l2_bytes;    /* per instance (per core on most servers) */
    size_t l3_bytes;    /* per instance (one CCX / die / socket) */

    /* ---- memory (bytes; 0 if /proc/meminfo is unreadable) */
    uint64_t mem_total, mem_available;
    uint64_t hugepages_total, hugepages_free; /* count of persistent huge pages */
    uint64_t hugepage_bytes;                  /* Hugepagesize */
    char thp_mode[16]; /* transparent huge pages: "always", "madvise", "never" or "unknown" */

    /* ---- derived */
    pg_isa best_isa; /* highest level this CPU (and OS) supports */
} pg_cpu_info;

/* One named ISA feature of this architecture, for reports and tests. */
typedef struct pg_cpu_feature {
    const char *name; /* report name: "avx512_bf16", "dotprod", "lse", ... */
    const char
        *cpuinfo; /* the Linux /proc/cpuinfo flag: "avx512_bf16", "asimddp", "atomics", ... */
    bool present;
} pg_cpu_feature;

#define PG_CPU_MAX_FEATURES 16

/* The features this build's architecture knows, in a fixed order, with
 * whether `cpu` has them (OS support included). Fills out[] and returns the
 * count (<= PG_CPU_MAX_FEATURES). */
size_t pg_cpu_features(const pg_cpu_info *cpu, pg_cpu_feature out[PG_CPU_MAX_FEATURES]);

/* The process-wide description of this machine. Thread-safe; the first call
 * detects everything (a few small /sys and /proc reads), later calls return
 * the same pointer. Never NULL. */
const pg_cpu_info *pg_cpu(void);

/* Fill *out by detecting the machine now (what pg_cpu() does once). Exposed
 * for tests. */
void pg_cpu_detect(pg_cpu_info *out);

/* MemTotal and MemAvailable of /proc/meminfo read now (bytes; both 0 when
 * it is unreadable): pg_cpu()'s figures are those of the first call. */
void pg_mem_info(uint64_t *total, uint64_t *available);

/* Level name: "scalar", "avx2", "avx512", "avx512bf16", "neon", "sve". */
const char *pg_isa_name(pg_isa isa);

/* The level named `name` (case-insensitive, either architecture), or -1. */
int pg_isa_parse(const char *name);

/* true if `cpu` can run kernels of level `isa` (scalar: always; a level of
 * the other architecture: never). */
bool pg_isa_supported(const pg_cpu_info *cpu, pg_isa isa);

/* Highest level supported by `cpu`. */
pg_isa pg_isa_best(const pg_cpu_info *cpu);

/* Resolve a requested level name (the PAGODA_ISA value) against `cpu`:
 *   NULL or ""                      -> *out = best level, PAGODA_OK
 *   a level the CPU supports        -> *out = that level, PAGODA_OK
 *   a known level of this arch the CPU lacks
 *                                   -> *out = best level, *clamped = true,
 *                                      PAGODA_OK (caller warns)
 *   anything else (unknown name, or a level of the other architecture)
 *                                   -> *out = best level,
 *                                      PAGODA_ERR_INVALID_ARG with a message
 *                                      listing the valid names
 * `clamped` may be NULL. Case-insensitive. */
pagoda_status pg_isa_resolve(const pg_cpu_info *cpu, const char *name, pg_isa *out, bool *clamped);

/* Linux x86-64: ask the kernel for permission to use the AMX tile data
 * state (arch_prctl ARCH_REQ_XCOMP_PERM, Linux >= 5.16); required once per
 * process before any AMX instruction. Errors: PAGODA_ERR_UNSUPPORTED if the
 * CPU/OS has no AMX or the kernel refuses. No-op error on aarch64. */
pagoda_status pg_cpu_request_amx(void);

#endif
