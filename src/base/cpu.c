/* CPU feature detection, topology, caches and memory (see cpu.h). */
#define _GNU_SOURCE
#include "base/cpu.h"

#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#include <sys/prctl.h>
#endif

/* ------------------------------------------------------------------ files */

/* Read the first line of a small text file into buf (newline stripped).
 * Returns false if the file cannot be read. */
static bool read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) return false;
    buf[strcspn(buf, "\n")] = 0;
    return true;
}

/* Integer content of a sysfs file, or `dflt` when missing/unparsable. */
static long read_long(const char *path, long dflt) {
    char buf[64];
    if (!read_line(path, buf, sizeof buf)) return dflt;
    char *end;
    long v = strtol(buf, &end, 0);
    return end == buf ? dflt : v;
}

/* Number of CPUs in a sysfs cpulist such as "0-3,8,10-11". */
static int cpulist_count(const char *s) {
    int count = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10);
        if (end == s) break;
        long b = a;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
        }
        if (b >= a) count += (int)(b - a + 1);
        s = end;
        if (*s == ',') s++;
    }
    return count;
}

/* Cache size strings in sysfs: "48K", "1024K", "32M". */
static size_t parse_size(const char *s) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    switch (toupper((unsigned char)*end)) {
    case 'K':
        return (size_t)v << 10;
    case 'M':
        return (size_t)v << 20;
    case 'G':
        return (size_t)v << 30;
    default:
        return (size_t)v;
    }
}

/* ------------------------------------------------------------- x86-64 */
#if defined(__x86_64__)

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    /* XGETBV with ECX=0 reads XCR0; encoded as bytes so no -mxsave is needed. */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void detect_x86(pg_cpu_info *c) {
    snprintf(c->arch, sizeof c->arch, "x86_64");
    unsigned a, b, cx, d;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 1) return;

    __cpuid_count(1, 0, a, b, cx, d);
    bool osxsave = cx & (1u << 27), avx = cx & (1u << 28);
    bool fma = cx & (1u << 12), f16c = cx & (1u << 29);

    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    c->os_ymm = (xcr0 & 0x6) == 0x6;                /* SSE + AVX state */
    c->os_zmm = c->os_ymm && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    c->os_amx = (xcr0 & 0x60000) == 0x60000;        /* XTILECFG + XTILEDATA */

    bool avx2 = false, f512 = false, bw = false, vl = false, dq = false, vnni = false;
    bool tile = false, ti8 = false, tbf16 = false, bf16 = false, avxvnni = false;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, cx, d);
        unsigned max_sub = a;
        avx2 = b & (1u << 5);
        f512 = b & (1u << 16);
        dq = b & (1u << 17);
        bw = b & (1u << 30);
        vl = b & (1u << 31);
        vnni = cx & (1u << 11);
        tbf16 = d & (1u << 22);
        tile = d & (1u << 24);
        ti8 = d & (1u << 25);
        if (max_sub >= 1) {
            __cpuid_count(7, 1, a, b, cx, d);
            avxvnni = a & (1u << 4);
            bf16 = a & (1u << 5);
        }
    }
    bool ymm = avx && c->os_ymm, zmm = c->os_zmm;
    c->avx2 = avx2 && ymm;
    c->fma = fma && ymm;
    c->f16c = f16c && ymm;
    c->avx_vnni = avxvnni && ymm;
    c->avx512f = f512 && zmm;
    c->avx512bw = bw && zmm;
    c->avx512vl = vl && zmm;
    c->avx512dq = dq && zmm;
    c->avx512_bf16 = bf16 && zmm;
    c->avx512_vnni = vnni && zmm;
    c->amx_tile = tile && c->os_amx;
    c->amx_int8 = ti8 && c->os_amx;
    c->amx_bf16 = tbf16 && c->os_amx;

    /* Brand string: 48 bytes from leaves 0x80000002..4, padded with spaces. */
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        unsigned regs[12];
        for (unsigned i = 0; i < 3; i++)
            __cpuid(0x80000002u + i, regs[4 * i], regs[4 * i + 1], regs[4 * i + 2],
                    regs[4 * i + 3]);
        char brand[49];
        memcpy(brand, regs, 48);
        brand[48] = 0;
        char *s = brand;
        while (*s == ' ')
            s++;
        size_t n = strlen(s);
        while (n && s[n - 1] == ' ')
            s[--n] = 0;
        if (n) snprintf(c->model, sizeof c->model, "%s", s);
    }
}

pagoda_status pg_cpu_request_amx(void) {
    const pg_cpu_info *c = pg_cpu();
    if (!c->amx_tile)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "cpu: no AMX tile support (CPU or OS)");
    /* ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 (Linux
     * Documentation/arch/x86/xstate.rst). */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "cpu: kernel refused AMX tile permission (arch_prctl)");
    return PAGODA_OK;
}

/* ------------------------------------------------------------ aarch64 */
#elif defined(__aarch64__)

/* Bits from the kernel's uapi asm/hwcap.h, spelled out so older headers build. */
#define HW_FPHP (1ul << 9)
#define HW_ASIMDHP (1ul << 10)
#define HW_ASIMD (1ul << 1)
#define HW_ATOMICS (1ul << 8)
#define HW_CPUID (1ul << 11)
#define HW_ASIMDDP (1ul << 20)
#define HW_SVE (1ul << 22)
#define HW2_SVE2 (1ul << 1)
#define HW2_I8MM (1ul << 13)
#define HW2_BF16 (1ul << 14)

#ifndef PR_SVE_GET_VL
#define PR_SVE_GET_VL 51
#endif
#ifndef PR_SVE_VL_LEN_MASK
#define PR_SVE_VL_LEN_MASK 0xffff
#endif

/* A few well-known MIDR implementer/part pairs (Arm TRMs; Linux
 * arch/arm64/include/asm/cputype.h). Unknown pairs are printed in hex. */
static const struct {
    unsigned impl, part;
    const char *name;
} ARM_PARTS[] = {
    {0x41, 0xd03, "Cortex-A53"},  {0x41, 0xd05, "Cortex-A55"},  {0x41, 0xd07, "Cortex-A57"},
    {0x41, 0xd08, "Cortex-A72"},  {0x41, 0xd0b, "Cortex-A76"},  {0x41, 0xd0c, "Neoverse-N1"},
    {0x41, 0xd40, "Neoverse-V1"}, {0x41, 0xd41, "Cortex-A78"},  {0x41, 0xd44, "Cortex-X1"},
    {0x41, 0xd49, "Neoverse-N2"}, {0x41, 0xd4f, "Neoverse-V2"}, {0x41, 0xd84, "Neoverse-V3"},
    {0x41, 0xd8e, "Neoverse-N3"}, {0x46, 0x001, "A64FX"},       {0x48, 0xd01, "Kunpeng-920"},
    {0xc0, 0xac3, "AmpereOne"},
};

static void detect_arm(pg_cpu_info *c) {
    snprintf(c->arch, sizeof c->arch, "aarch64");
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    c->asimd = hw & HW_ASIMD;
    c->fp16 = (hw & HW_FPHP) && (hw & HW_ASIMDHP);
    c->asimd_dotprod = hw & HW_ASIMDDP;
    c->lse = hw & HW_ATOMICS;
    c->sve = hw & HW_SVE;
    c->sve2 = hw2 & HW2_SVE2;
    c->i8mm = hw2 & HW2_I8MM;
    c->bf16 = hw2 & HW2_BF16;
    if (c->sve) {
        int vl = prctl(PR_SVE_GET_VL);
        c->sve_vl_bytes = vl > 0 ? (vl & PR_SVE_VL_LEN_MASK) : 0;
    }

    /* MIDR_EL1: sysfs on real hardware; otherwise the MRS the kernel (or
     * qemu-user) emulates for EL0 when HWCAP_CPUID is set. */
    char buf[64];
    uint64_t midr = 0;
    if (read_line("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1", buf, sizeof buf))
        midr = strtoull(buf, NULL, 0);
    else if (hw & HW_CPUID)
        __asm__ volatile("mrs %0, midr_el1" : "=r"(midr));
    c->midr = (uint32_t)midr;
    if (midr) {
        unsigned impl = (unsigned)(midr >> 24) & 0xff, part = (unsigned)(midr >> 4) & 0xfff;
        const char *name = "unknown";
        for (size_t i = 0; i < sizeof ARM_PARTS / sizeof ARM_PARTS[0]; i++)
            if (ARM_PARTS[i].impl == impl && ARM_PARTS[i].part == part) name = ARM_PARTS[i].name;
        snprintf(c->model, sizeof c->model, "%s (implementer 0x%02x, part 0x%03x)", name, impl,
                 part);
    }
}

pagoda_status pg_cpu_request_amx(void) {
    return pg_error(PAGODA_ERR_UNSUPPORTED, "cpu: AMX is an x86-64 feature");
}

#else
#error "pagoda supports x86_64 and aarch64"
#endif

/* ------------------------------------------------------- topology, memory */

static void detect_topology(pg_cpu_info *c) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    c->online_cpus = online > 0 ? (int)online : 1;

    /* CPUs we may run on; a dynamic set so machines with > 1024 CPUs work. */
    enum { MAX_CPUS = 8192 };
    cpu_set_t *set = CPU_ALLOC(MAX_CPUS);
    size_t setsize = CPU_ALLOC_SIZE(MAX_CPUS);
    int first = -1, cores = 0, logical = 0;
    /* (package, core) pairs seen, to count physical cores. */
    long *seen = calloc(MAX_CPUS, sizeof *seen);
    if (set && seen && sched_getaffinity(0, setsize, set) == 0) {
        for (int cpu = 0; cpu < MAX_CPUS; cpu++) {
            if (!CPU_ISSET_S((size_t)cpu, setsize, set)) continue;
            logical++;
            if (first < 0) first = cpu;
            char path[128];
            snprintf(path, sizeof path,
                     "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
            long pkg = read_long(path, 0);
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
            long core = read_long(path, cpu); /* unknown: count each CPU as a core */
            long key = pkg * 1000000 + core;
            bool dup = false;
            for (int i = 0; i < cores && !dup; i++)
                dup = seen[i] == key;
            if (!dup) seen[cores++] = key;
        }
    }
    CPU_FREE(set);
    free(seen);
    c->logical_cpus = logical > 0 ? logical : c->online_cpus;
    c->physical_cores = cores > 0 ? cores : c->logical_cpus;
    if (first < 0) first = 0;

    char path[160], buf[256];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
             first);
    c->smt_per_core = read_line(path, buf, sizeof buf) ? cpulist_count(buf) : 0;
    if (c->smt_per_core < 1) c->smt_per_core = 1;

    c->numa_nodes = 0;
    DIR *dir = opendir("/sys/devices/system/node");
    if (dir) {
        struct dirent *e;
        while ((e = readdir(dir)))
            if (!strncmp(e->d_name, "node", 4) && isdigit((unsigned char)e->d_name[4]))
                c->numa_nodes++;
        closedir(dir);
    }
    if (c->numa_nodes < 1) c->numa_nodes = 1;

    /* Caches of the first allowed CPU. */
    for (int i = 0; i < 16; i++) {
        char type[32], size[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/level", first, i);
        long level = read_long(path, -1);
        if (level < 0) break;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/type", first, i);
        if (!read_line(path, type, sizeof type)) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cache/index%d/size", first, i);
        if (!read_line(path, size, sizeof size)) continue;
        size_t bytes = parse_size(size);
        if (level == 1 && !strcmp(type, "Data"))
            c->l1d_bytes = bytes;
        else if (level == 2 && strcmp(type, "Instruction") != 0)
            c->l2_bytes = bytes;
        else if (level == 3 && strcmp(type, "Instruction") != 0)
            c->l3_bytes = bytes;
    }
}

static void detect_memory(pg_cpu_info *c) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            char key[64];
            unsigned long long v;
            if (sscanf(line, "%63[^:]: %llu", key, &v) != 2) continue;
            if (!strcmp(key, "MemTotal"))
                c->mem_total = v << 10;
            else if (!strcmp(key, "MemAvailable"))
                c->mem_available = v << 10;
            else if (!strcmp(key, "HugePages_Total"))
                c->hugepages_total = v;
            else if (!strcmp(key, "HugePages_Free"))
                c->hugepages_free = v;
            else if (!strcmp(key, "Hugepagesize"))
                c->hugepage_bytes = v << 10;
        }
        fclose(f);
    }
    /* "always [madvise] never": the bracketed word is the active mode. */
    char buf[128];
    snprintf(c->thp_mode, sizeof c->thp_mode, "unknown");
    if (read_line("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf)) {
        char *l = strchr(buf, '['), *r = l ? strchr(l, ']') : NULL;
        if (l && r && r - l - 1 < (long)sizeof c->thp_mode)
            snprintf(c->thp_mode, sizeof c->thp_mode, "%.*s", (int)(r - l - 1), l + 1);
    }
}

void pg_cpu_detect(pg_cpu_info *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->model, sizeof out->model, "unknown");
#if defined(__x86_64__)
    detect_x86(out);
#elif defined(__aarch64__)
    detect_arm(out);
#endif
    detect_topology(out);
    detect_memory(out);
    out->best_isa = pg_isa_best(out);
}

static pg_cpu_info g_cpu;
static pthread_once_t g_cpu_once = PTHREAD_ONCE_INIT;

static void cpu_init(void) {
    pg_cpu_detect(&g_cpu);
}

void pg_mem_info(uint64_t *total, uint64_t *available) {
    pg_cpu_info c = {0};
    detect_memory(&c);
    *total = c.mem_total;
    *available = c.mem_available;
}

const pg_cpu_info *pg_cpu(void) {
    pthread_once(&g_cpu_once, cpu_init);
    return &g_cpu;
}

/* ------------------------------------------------------------- features */

size_t pg_cpu_features(const pg_cpu_info *c, pg_cpu_feature out[PG_CPU_MAX_FEATURES]) {
    const pg_cpu_feature list[] = {
#if defined(__x86_64__)
        {"avx2", "avx2", c->avx2},
        {"fma", "fma", c->fma},
        {"f16c", "f16c", c->f16c},
        {"avx512f", "avx512f", c->avx512f},
        {"avx512bw", "avx512bw", c->avx512bw},
        {"avx512vl", "avx512vl", c->avx512vl},
        {"avx512dq", "avx512dq", c->avx512dq},
        {"avx512_bf16", "avx512_bf16", c->avx512_bf16},
        {"avx512_vnni", "avx512_vnni", c->avx512_vnni},
        {"avx_vnni", "avx_vnni", c->avx_vnni},
        {"amx_tile", "amx_tile", c->amx_tile},
        {"amx_int8", "amx_int8", c->amx_int8},
        {"amx_bf16", "amx_bf16", c->amx_bf16},
#else
        {"asimd", "asimd", c->asimd},
        {"fp16", "asimdhp", c->fp16},
        {"dotprod", "asimddp", c->asimd_dotprod},
        {"i8mm", "i8mm", c->i8mm},
        {"bf16", "bf16", c->bf16},
        {"sve", "sve", c->sve},
        {"sve2", "sve2", c->sve2},
        {"lse", "atomics", c->lse},
#endif
    };
    size_t n = sizeof list / sizeof list[0];
    for (size_t i = 0; i < n && i < PG_CPU_MAX_FEATURES; i++)
        out[i] = list[i];
    return n < PG_CPU_MAX_FEATURES ? n : PG_CPU_MAX_FEATURES;
}

/* ------------------------------------------------------------ ISA levels */

static const char *const ISA_NAMES[PG_ISA_COUNT] = {
    [PG_ISA_SCALAR] = "scalar",         [PG_ISA_AVX2] = "avx2", [PG_ISA_AVX512] = "avx512",
    [PG_ISA_AVX512BF16] = "avx512bf16", [PG_ISA_NEON] = "neon", [PG_ISA_SVE] = "sve",
};

const char *pg_isa_name(pg_isa isa) {
    return (unsigned)isa < PG_ISA_COUNT ? ISA_NAMES[isa] : "invalid";
}

int pg_isa_parse(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < PG_ISA_COUNT; i++)
        if (!strcasecmp(name, ISA_NAMES[i])) return i;
    return -1;
}

/* Levels of the architecture this binary was built for, lowest first. */
#if defined(__x86_64__)
static const pg_isa ARCH_LEVELS[] = {PG_ISA_SCALAR, PG_ISA_AVX2, PG_ISA_AVX512, PG_ISA_AVX512BF16};
static const char ARCH_NAME[] = "x86_64";
#else
static const pg_isa ARCH_LEVELS[] = {PG_ISA_SCALAR, PG_ISA_NEON, PG_ISA_SVE};
static const char ARCH_NAME[] = "aarch64";
#endif
enum { N_ARCH_LEVELS = sizeof ARCH_LEVELS / sizeof ARCH_LEVELS[0] };

bool pg_isa_supported(const pg_cpu_info *c, pg_isa isa) {
    switch (isa) {
    case PG_ISA_SCALAR:
        return true;
#if defined(__x86_64__)
    case PG_ISA_AVX2:
        return c->avx2 && c->fma && c->f16c;
    case PG_ISA_AVX512:
        return pg_isa_supported(c, PG_ISA_AVX2) && c->avx512f && c->avx512bw && c->avx512vl &&
               c->avx512dq;
    case PG_ISA_AVX512BF16:
        return pg_isa_supported(c, PG_ISA_AVX512) && c->avx512_bf16;
#else
    case PG_ISA_NEON:
        return c->asimd;
    case PG_ISA_SVE:
        return c->asimd && c->sve && c->sve_vl_bytes >= 16;
#endif
    default:
        return false;
    }
}

pg_isa pg_isa_best(const pg_cpu_info *c) {
    pg_isa best = PG_ISA_SCALAR;
    for (int i = 0; i < N_ARCH_LEVELS; i++)
        if (pg_isa_supported(c, ARCH_LEVELS[i])) best = ARCH_LEVELS[i];
    return best;
}

pagoda_status pg_isa_resolve(const pg_cpu_info *c, const char *name, pg_isa *out, bool *clamped) {
    pg_isa best = pg_isa_best(c);
    *out = best;
    if (clamped) *clamped = false;
    if (!name || !*name) return PAGODA_OK;
    for (int i = 0; i < N_ARCH_LEVELS; i++) {
        if (strcasecmp(name, ISA_NAMES[ARCH_LEVELS[i]]) != 0) continue;
        /* Levels are ordered, so "supported" means "not above best". */
        if (pg_isa_supported(c, ARCH_LEVELS[i])) {
            *out = ARCH_LEVELS[i];
        } else if (clamped) {
            *clamped = true;
        }
        return PAGODA_OK;
    }
    char valid[128] = "";
    for (int i = 0; i < N_ARCH_LEVELS; i++) {
        strcat(valid, i ? ", " : "");
        strcat(valid, ISA_NAMES[ARCH_LEVELS[i]]);
    }
    return pg_error(PAGODA_ERR_INVALID_ARG, "PAGODA_ISA=%s: unknown ISA level on %s (valid: %s)",
                    name, ARCH_NAME, valid);
}
