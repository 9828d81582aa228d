/* The environment check (base/env_check.h): each condition injected into a
 * fake /sys and /proc tree (and the environment), the finding's text
 * checked; a clean tree gives no finding. Then the same through this
 * process's gathering (pg_env_findings / pg_env_log_findings), `pagoda env`
 * and `pagoda generate` (the start-up warning, logged once). */
#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/affinity.h"
#include "base/cpu.h"
#include "base/env_check.h"
#include "base/log.h"
#include "kernels/env_report.h"

/* ---- the fake tree ---------------------------------------------------------- */

static char g_root[512]; /* <tmp>/sys and <tmp>/proc */
static char g_sys[600], g_proc[600];

static void mkdirs(const char *path) {
    char p[1024];
    snprintf(p, sizeof p, "%s", path);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) fail_msg("mkdir %s", p);
            *s = '/';
        }
}

/* Write `text` to <root>/<rel> (rel starts with "sys/" or "proc/"). */
static void put(const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_root, rel);
    mkdirs(path);
    pg_test_write_file(path, text, strlen(text));
}

static void putf(const char *rel, const char *fmt, int v) {
    char buf[128];
    snprintf(buf, sizeof buf, fmt, v);
    put(rel, buf);
}

/* A healthy 4-core, 1-node machine: every CPU its own core, THP madvise,
 * governor performance, a cgroup v2 without a quota, no swap, libgomp mapped
 * (Debian's libavcodec brings it; not a finding). */
static void clean_tree(void) {
    snprintf(g_root, sizeof g_root, "%s", pg_test_tmpdir());
    snprintf(g_sys, sizeof g_sys, "%s/sys", g_root);
    snprintf(g_proc, sizeof g_proc, "%s/proc", g_root);
    char rel[256];
    for (int i = 0; i < 4; i++) {
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/topology/physical_package_id", i);
        put(rel, "0\n");
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/topology/core_id", i);
        putf(rel, "%d\n", i);
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/cpufreq/scaling_governor", i);
        put(rel, "performance\n");
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/cpufreq/scaling_driver", i);
        put(rel, "acpi-cpufreq\n");
    }
    put("sys/devices/system/node/node0/cpulist", "0-3\n");
    put("sys/devices/system/node/node0/meminfo",
        "Node 0 MemTotal:       16777216 kB\nNode 0 MemFree:        8000000 kB\n");
    put("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
    put("proc/self/cgroup", "0::/pagoda.slice\n");
    put("sys/fs/cgroup/pagoda.slice/cpu.max", "max 100000\n");
    put("proc/meminfo", "MemTotal:       16777216 kB\nSwapTotal:             0 kB\n"
                        "SwapFree:              0 kB\n");
    put("proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n");
    put("proc/self/status", "Name:\tpagoda\nVmSwap:\t       0 kB\n");
    put("proc/self/maps",
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f0000002000-7f0000003000 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libgomp.so.1\n"
        "7f0000004000-7f0000005000 rw-p 00000000 00:00 0 [heap]\n");
}

/* A CPU with every feature the fast kernels use. */
static pg_cpu_info g_cpu;
static void full_cpu(void) {
    memset(&g_cpu, 0, sizeof g_cpu);
#if defined(__x86_64__)
    g_cpu.avx2 = g_cpu.fma = g_cpu.f16c = true;
    g_cpu.avx512f = g_cpu.avx512bw = g_cpu.avx512vl = g_cpu.avx512dq = true;
    g_cpu.avx512_bf16 = g_cpu.avx512_vnni = true;
#else
    g_cpu.asimd = g_cpu.asimd_dotprod = g_cpu.i8mm = g_cpu.bf16 = g_cpu.sve = true;
    g_cpu.sve_vl_bytes = 16;
#endif
    g_cpu.best_isa = pg_isa_best(&g_cpu);
}

static int g_allowed[4] = {0, 1, 2, 3};
static int g_pinned[4] = {0, 1, 2, 3};
static int g_unpinned[4] = {-1, -1, -1, -1};

static pg_envchk_input base_input(void) {
    full_cpu();
    pg_envchk_input in = {.sysfs_root = g_sys,
                          .procfs_root = g_proc,
                          .cpu = &g_cpu,
                          .isa_chosen = g_cpu.best_isa,
                          .n_threads = 4,
                          .thread_cpus = g_pinned,
                          .allowed = g_allowed,
                          .n_allowed = 4,
                          .blocktime_us = 1000,
                          .speculation = false,
                          .model_bytes = 1ull << 30};
    return in;
}

static pg_envchk_finding g_f[PG_ENVCHK_COUNT];
static int g_n;

static void run(const pg_envchk_input *in) {
    g_n = pg_envchk_run(in, g_f, PG_ENVCHK_COUNT);
}

/* The finding of `kind`, failing the test (with all findings) if absent. */
static const pg_envchk_finding *find(pg_envchk_kind kind) {
    for (int i = 0; i < g_n; i++)
        if (g_f[i].kind == kind) return &g_f[i];
    for (int i = 0; i < g_n; i++)
        print_message("found %s: %s\n", pg_envchk_kind_name(g_f[i].kind), g_f[i].what);
    fail_msg("no %s finding among %d", pg_envchk_kind_name(kind), g_n);
    return NULL;
}

/* Exactly one finding, of `kind`, whose what / cost / fix contain the given
 * substrings (NULL: not checked). */
static void expect_only(pg_envchk_kind kind, const char *what, const char *cost, const char *fix) {
    const pg_envchk_finding *f = find(kind);
    if (g_n != 1)
        for (int i = 0; i < g_n; i++)
            print_message("found %s: %s\n", pg_envchk_kind_name(g_f[i].kind), g_f[i].what);
    assert_int_equal(g_n, 1);
    if (what && !strstr(f->what, what)) fail_msg("what: '%s' lacks '%s'", f->what, what);
    if (cost && !strstr(f->cost, cost)) fail_msg("cost: '%s' lacks '%s'", f->cost, cost);
    if (fix && !strstr(f->fix, fix)) fail_msg("fix: '%s' lacks '%s'", f->fix, fix);
    assert_true(f->cost[0] && f->fix[0]);
}

static int setup(void **state) {
    (void)state;
    unsetenv("LD_PRELOAD");
    unsetenv("PAGODA_SYSFS_ROOT");
    unsetenv("PAGODA_PROCFS_ROOT");
    clean_tree();
    return 0;
}

/* ---- one test per condition ------------------------------------------------------ */

static void test_clean_tree_has_no_findings(void **state) {
    (void)state;
    pg_envchk_input in = base_input();
    run(&in);
    for (int i = 0; i < g_n; i++)
        print_message("unexpected %s: %s\n", pg_envchk_kind_name(g_f[i].kind), g_f[i].what);
    assert_int_equal(g_n, 0);
    /* speculation with the default block time is fine too */
    in.speculation = true;
    run(&in);
    assert_int_equal(g_n, 0);
}

static void test_smt_siblings_in_pinned_pool(void **state) {
    (void)state;
    put("sys/devices/system/cpu/cpu2/topology/core_id", "0\n"); /* CPU 2 = CPU 0's sibling */
    pg_envchk_input in = base_input();
    run(&in);
    /* 4 threads on 3 cores, one core with 2: 2 * 3 / 4 = 1.5x the step time of 3 threads */
    expect_only(PG_ENVCHK_SMT,
                "SMT siblings in the pool: 4 threads pinned to 3 physical cores "
                "(CPUs 0 and 2 share a core)",
                "1.50x the step time of 3 threads", "--threads 3");
    assert_non_null(strstr(g_f[0].fix, "PAGODA_CPUS=0-1,3"));
}

static void test_more_threads_than_physical_cores(void **state) {
    (void)state;
    put("sys/devices/system/cpu/cpu1/topology/core_id", "0\n"); /* cores {0,1} and {2,3} */
    put("sys/devices/system/cpu/cpu3/topology/core_id", "2\n");
    pg_envchk_input in = base_input();
    in.thread_cpus = g_unpinned; /* what the pool does with more threads than cores */
    in.n_threads = 3;
    run(&in);
    assert_int_equal(g_n, 2); /* + unpinned */
    const pg_envchk_finding *f = find(PG_ENVCHK_SMT);
    assert_non_null(strstr(f->what, "3 threads on 2 physical cores"));
    assert_non_null(strstr(f->cost, "1.33x the step time of 2 threads"));
    assert_non_null(strstr(f->fix, "--threads 2"));
    assert_non_null(strstr(f->fix, "PAGODA_CPUS=0,2"));
    f = find(PG_ENVCHK_UNPINNED); /* the pool pins when threads <= physical cores */
    assert_non_null(strstr(f->fix, "--threads 2 or fewer (one per physical core: 0,2)"));
}

static void test_affinity_mask_below_threads(void **state) {
    (void)state;
    pg_envchk_input in = base_input();
    in.n_allowed = 2; /* taskset -c 0-1 */
    in.n_threads = 3;
    in.thread_cpus = g_unpinned;
    run(&in);
    assert_int_equal(g_n, 2); /* + unpinned; no SMT finding on top */
    const pg_envchk_finding *f = find(PG_ENVCHK_AFFINITY);
    assert_non_null(strstr(f->what, "3 threads, but the affinity mask allows 2 CPUs (0-1)"));
    assert_non_null(strstr(f->cost, "at least 1.33x as long as with 2 threads"));
    assert_non_null(strstr(f->cost, "17x slower here"));
    assert_non_null(strstr(f->fix, "--threads 2"));
    assert_non_null(strstr(f->fix, "taskset"));
}

static void test_cgroup_v2_quota(void **state) {
    (void)state;
    put("sys/fs/cgroup/pagoda.slice/cpu.max", "200000 100000\n");
    pg_envchk_input in = base_input();
    run(&in);
    expect_only(PG_ENVCHK_CPU_QUOTA, "the cgroup CPU quota is 2.00 CPUs",
                "quota in 50 ms of every "
                "100 ms period, then the kernel throttles the whole process for the other 50 ms",
                "--threads 2");
    assert_non_null(strstr(g_f[0].what, "pagoda.slice/cpu.max"));
    assert_non_null(strstr(g_f[0].fix, "docker run --cpus=4"));
    /* a quota of 4 CPUs fits 4 threads */
    put("sys/fs/cgroup/pagoda.slice/cpu.max", "400000 100000\n");
    run(&in);
    assert_int_equal(g_n, 0);
    /* the smallest quota on the path counts: a parent's 1.5 CPUs over a child without one */
    put("proc/self/cgroup", "0::/pagoda.slice/inner\n");
    put("sys/fs/cgroup/pagoda.slice/inner/cpu.max", "max 100000\n");
    put("sys/fs/cgroup/pagoda.slice/cpu.max", "150000 100000\n");
    run(&in);
    expect_only(PG_ENVCHK_CPU_QUOTA, "1.50 CPUs", NULL, "--threads 1 ");
}

static void test_cgroup_v1_quota(void **state) {
    (void)state;
    put("proc/self/cgroup", "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    pg_envchk_input in = base_input();
    run(&in);
    assert_int_equal(g_n, 0); /* -1: no quota */
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "100000\n");
    run(&in);
    expect_only(PG_ENVCHK_CPU_QUOTA, "1.00 CPUs (",
                "throttles the whole process for the other 75 ms", "--threads 1");
    assert_non_null(strstr(g_f[0].what, "cpu,cpuacct/docker/abc/cpu.cfs_quota_us"));
}

static void test_threads_not_pinned(void **state) {
    (void)state;
    pg_envchk_input in = base_input();
    in.thread_cpus = g_unpinned;
    in.n_threads = 2;
    run(&in);
    expect_only(PG_ENVCHK_UNPINNED, "the pool's 2 threads are not pinned", "vLLM",
                "--threads 4 or fewer (one per physical core: 0-3)");
}

static void test_small_blocktime_with_speculation(void **state) {
    (void)state;
    pg_envchk_input in = base_input();
    in.blocktime_us = 0;
    run(&in);
    assert_int_equal(g_n, 0); /* no speculation: PAGODA_BLOCKTIME_US=0 is a valid choice */
    in.speculation = true;
    run(&in);
    expect_only(PG_ENVCHK_BLOCKTIME, "pool block time 0 us with speculative decoding on",
                "115.6 ms", "unset PAGODA_BLOCKTIME_US (default 1000 us)");
    assert_non_null(strstr(g_f[0].cost, "15-40 us futex wake-up"));
    assert_non_null(strstr(g_f[0].cost, "18x slower on a loaded machine (docs/PERFORMANCE.md)"));
    in.blocktime_us = 200; /* "small" too */
    run(&in);
    expect_only(PG_ENVCHK_BLOCKTIME, "pool block time 200 us", NULL, NULL);
}

static void test_foreign_runtime_preloaded(void **state) {
    (void)state;
    setenv("LD_PRELOAD", "/opt/intel/lib/libiomp5.so:/usr/lib/libtcmalloc_minimal.so.4", 1);
    pg_envchk_input in = base_input();
    run(&in);
    unsetenv("LD_PRELOAD");
    expect_only(PG_ENVCHK_FOREIGN_LIB,
                "a foreign OpenMP runtime and allocator in the process: "
                "libiomp5.so (LD_PRELOAD), libtcmalloc_minimal.so.4 (LD_PRELOAD)",
                "KMP_BLOCKTIME 200 ms", "unset LD_PRELOAD");
    /* libgomp counts when preloaded */
    setenv("LD_PRELOAD", "libgomp.so.1", 1);
    run(&in);
    unsetenv("LD_PRELOAD");
    expect_only(PG_ENVCHK_FOREIGN_LIB, "libgomp.so.1 (LD_PRELOAD)", NULL, NULL);
}

static void test_foreign_allocator_mapped(void **state) {
    (void)state;
    put("proc/self/maps",
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f0000002000-7f0000003000 r-xp 00000000 08:01 3 /usr/lib/libjemalloc.so.2\n"
        "7f0000003000-7f0000004000 r--p 00001000 08:01 3 /usr/lib/libjemalloc.so.2\n");
    pg_envchk_input in = base_input();
    run(&in);
    expect_only(PG_ENVCHK_FOREIGN_LIB,
                "a foreign allocator in the process: libjemalloc.so.2 (loaded)", "mimalloc", NULL);
}

static void test_thp_never(void **state) {
    (void)state;
    put("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
    pg_envchk_input in = base_input();
    run(&in);
    expect_only(PG_ENVCHK_THP, "transparent huge pages are off", "4 KiB pages instead of 2 MiB",
                "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled");
}

static void test_isa_forced_below_best(void **state) {
    (void)state;
    pg_envchk_input in = base_input();
#if defined(__x86_64__)
    in.isa_chosen = PG_ISA_AVX2;
    run(&in);
    expect_only(PG_ENVCHK_ISA_FORCED,
                "kernels run at ISA level avx2 (PAGODA_ISA) while this CPU supports avx512bf16",
                "22-28%", "unset PAGODA_ISA");
    in.isa_chosen = PG_ISA_AVX512;
    run(&in);
    expect_only(PG_ENVCHK_ISA_FORCED, "level avx512", "117 instead of 232 GFLOP/s", NULL);
#else
    in.isa_chosen = PG_ISA_NEON;
    run(&in);
    expect_only(PG_ENVCHK_ISA_FORCED,
                "kernels run at ISA level neon (PAGODA_ISA) while this CPU "
                "supports sve",
                "little", "unset PAGODA_ISA");
#endif
    in.isa_chosen = PG_ISA_SCALAR;
    run(&in);
    expect_only(PG_ENVCHK_ISA_FORCED, "level scalar", "22-93x slower", NULL);
}

static void test_isa_features_missing(void **state) {
    (void)state;
    pg_envchk_input in = base_input();
#if defined(__x86_64__)
    g_cpu.avx512f = g_cpu.avx512_bf16 = g_cpu.avx512_vnni = false; /* an AVX2-only CPU */
    g_cpu.best_isa = pg_isa_best(&g_cpu);
    in.isa_chosen = g_cpu.best_isa;
    run(&in);
    expect_only(PG_ENVCHK_ISA_MISSING, "this CPU lacks AVX-512, AVX512_BF16, VNNI",
                "about 4x slower prefill", "Sapphire Rapids");
    full_cpu();
    g_cpu.avx512_bf16 = false; /* an Ice Lake-like CPU: VNNI, no BF16 */
    g_cpu.best_isa = pg_isa_best(&g_cpu);
    in.isa_chosen = g_cpu.best_isa;
    run(&in);
    expect_only(PG_ENVCHK_ISA_MISSING, "this CPU lacks AVX512_BF16", "117 vs 232", "w8a8");
#else
    g_cpu.i8mm = g_cpu.bf16 = g_cpu.sve = false; /* a Neoverse N1-like CPU */
    g_cpu.best_isa = pg_isa_best(&g_cpu);
    in.isa_chosen = g_cpu.best_isa;
    run(&in);
    expect_only(PG_ENVCHK_ISA_MISSING, "this CPU lacks I8MM, BF16, SVE", "1.3-1.8x", "Neoverse");
#endif
    memset(&g_cpu, 0, sizeof g_cpu); /* no SIMD at all */
    in.isa_chosen = PG_ISA_SCALAR;
    run(&in);
    expect_only(PG_ENVCHK_ISA_MISSING, "this CPU lacks", "no SIMD", NULL);
}

static void test_threads_span_numa_nodes(void **state) {
    (void)state;
    put("sys/devices/system/node/node0/cpulist", "0-1\n");
    put("sys/devices/system/node/node1/cpulist", "2-3\n");
    put("sys/devices/system/node/node1/meminfo", "Node 1 MemTotal:       16777216 kB\n");
    pg_envchk_input in = base_input();
    run(&in);
    expect_only(PG_ENVCHK_NUMA_SPAN, "the 4 threads run on CPUs of 2 NUMA nodes (0-1)",
                "socket interconnect", "numactl --cpunodebind=0 --membind=0");
    assert_non_null(strstr(g_f[0].fix, "PAGODA_CPUS=0-1, the CPUs of node 0"));
    /* pinned to node 1's CPUs only: fine */
    static int node1[2] = {2, 3};
    in.thread_cpus = node1;
    in.n_threads = 2;
    run(&in);
    assert_int_equal(g_n, 0);
}

static void test_model_larger_than_numa_node(void **state) {
    (void)state;
    put("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:        1048576 kB\n");
    pg_envchk_input in = base_input();
    in.model_bytes = 3ull << 30;
    run(&in);
    expect_only(PG_ENVCHK_NUMA_MEMORY,
                "weights + KV cache (3.0 GiB) exceed the memory of NUMA node 0 (1.0 GiB)",
                "other nodes", "--kv-cache-memory");
    in.model_bytes = 0; /* `pagoda env`: no model, no check */
    run(&in);
    assert_int_equal(g_n, 0);
}

static void test_swap_in_use(void **state) {
    (void)state;
    put("proc/meminfo", "MemTotal:       16777216 kB\nSwapTotal:       4194304 kB\n"
                        "SwapFree:        3145728 kB\n");
    put("proc/swaps",
        "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
        "/dev/sda2                               partition\t4194304\t\t1048576\t\t-2\n");
    put("proc/self/status", "Name:\tpagoda\nVmSwap:\t    2048 kB\n");
    pg_envchk_input in = base_input();
    run(&in);
    expect_only(PG_ENVCHK_SWAP, "1.0 GiB of swap in use, 2.0 MiB of it pagoda's on /dev/sda2",
                "disk read", "sudo swapoff -a");
    /* swap configured but unused: no finding */
    put("proc/meminfo", "SwapTotal:       4194304 kB\nSwapFree:        4194304 kB\n");
    run(&in);
    assert_int_equal(g_n, 0);
}

static void test_powersave_governor(void **state) {
    (void)state;
    put("sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "powersave\n");
    put("sys/devices/system/cpu/cpu3/cpufreq/scaling_governor", "powersave\n");
    put("sys/devices/system/cpu/cpu1/cpufreq/scaling_min_freq", "1000000\n");
    put("sys/devices/system/cpu/cpu1/cpufreq/cpuinfo_max_freq", "3500000\n");
    pg_envchk_input in = base_input();
    run(&in);
    expect_only(PG_ENVCHK_GOVERNOR, "cpufreq governor powersave on CPUs 1,3 (driver acpi-cpufreq)",
                "1.00 of 3.50 GHz: compute-bound work (prefill) up to 3.5x slower",
                "sudo cpupower frequency-set -g performance");
    put("sys/devices/system/cpu/cpu1/cpufreq/scaling_driver", "intel_pstate\n");
    run(&in);
    expect_only(PG_ENVCHK_GOVERNOR, "(driver intel_pstate)", "lets the hardware pick", NULL);
}

/* Several conditions at once: findings come in kind order, one of each. */
static void test_findings_in_kind_order(void **state) {
    (void)state;
    put("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
    put("sys/fs/cgroup/pagoda.slice/cpu.max", "100000 100000\n");
    put("proc/meminfo", "SwapTotal:       100 kB\nSwapFree:        0 kB\n");
    pg_envchk_input in = base_input();
    in.thread_cpus = g_unpinned;
    run(&in);
    assert_int_equal(g_n, 4);
    assert_int_equal(g_f[0].kind, PG_ENVCHK_CPU_QUOTA);
    assert_int_equal(g_f[1].kind, PG_ENVCHK_UNPINNED);
    assert_int_equal(g_f[2].kind, PG_ENVCHK_THP);
    assert_int_equal(g_f[3].kind, PG_ENVCHK_SWAP);
    /* cap: only as many as asked */
    assert_int_equal(pg_envchk_run(&in, g_f, 2), 2);
    /* printing: each finding with its cost and fix */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pg_envchk_print(g_f, 2, f);
    pg_envchk_print(g_f, 0, f);
    fclose(f);
    assert_non_null(strstr(buf, "  - the cgroup CPU quota is 1.00 CPUs"));
    assert_non_null(strstr(buf, "\n      cost: 4 busy threads"));
    assert_non_null(strstr(buf, "\n      fix:  --threads 1"));
    assert_non_null(strstr(buf, "  none\n"));
    free(buf);
}

/* Missing files are no finding and no crash. */
static void test_empty_roots(void **state) {
    (void)state;
    pg_envchk_input in = base_input();
    in.sysfs_root = in.procfs_root = "/nonexistent/pagoda-root";
    run(&in);
    assert_int_equal(g_n, 0);
}

/* Garbage in every file (and a thread count of 0) is no finding and no crash. */
static void test_malformed_files(void **state) {
    (void)state;
    put("sys/fs/cgroup/pagoda.slice/cpu.max", "lots of cpus\n");
    put("proc/self/cgroup", "::::\n0\n\n12:cpu\n");
    put("proc/meminfo", "SwapTotal: many kB\nSwapFree:\n");
    put("proc/swaps", "");
    put("proc/self/maps", "/\n\n     \n");
    put("sys/kernel/mm/transparent_hugepage/enabled", "");
    put("sys/devices/system/node/node0/cpulist", "3-1\n");
    put("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: x kB\n");
    put("sys/devices/system/cpu/cpu0/topology/core_id", "core zero\n");
    put("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "\n");
    pg_envchk_input in = base_input();
    run(&in);
    for (int i = 0; i < g_n; i++)
        print_message("unexpected %s: %s\n", pg_envchk_kind_name(g_f[i].kind), g_f[i].what);
    assert_int_equal(g_n, 0);
    in.n_threads = 0;
    in.thread_cpus = NULL;
    run(&in);
    expect_only(PG_ENVCHK_UNPINNED, "the pool's 1 thread is not pinned", NULL, NULL);
}

/* ---- this process: the roots from the environment, the log ---------------------- */

static int g_logged_thp, g_logged;
static void sink(void *ctx, pg_log_level level, const char *msg) {
    (void)ctx;
    if (level == PG_LOG_WARN && !strncmp(msg, "env: ", 5)) g_logged++;
    if (strstr(msg, "env: transparent huge pages are off") && strstr(msg, "; fix: echo madvise"))
        g_logged_thp++;
}

static void test_process_findings_use_root_variables(void **state) {
    (void)state;
    put("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
    setenv("PAGODA_SYSFS_ROOT", g_sys, 1);
    setenv("PAGODA_PROCFS_ROOT", g_proc, 1);
    pg_envchk_finding f[PG_ENVCHK_COUNT];
    int n = pg_env_findings(0, false, f, PG_ENVCHK_COUNT);
    bool thp = false;
    for (int i = 0; i < n; i++)
        thp |= f[i].kind == PG_ENVCHK_THP;
    assert_true(thp);
    pg_log_set_sink(sink, NULL);
    int logged = pg_env_log_findings(0, false);
    pg_log_set_sink(NULL, NULL);
    unsetenv("PAGODA_SYSFS_ROOT");
    unsetenv("PAGODA_PROCFS_ROOT");
    assert_int_equal(g_logged_thp, 1);
    assert_int_equal(g_logged, logged);
}

/* ---- the CLI ---------------------------------------------------------------------- */

/* Findings the fake tree cannot remove: the CPU's own ISA features, and what
 * PAGODA_* settings of the test environment cause. */
static int cpu_only_findings(void) {
    pg_envchk_input in = {.sysfs_root = "/nonexistent",
                          .procfs_root = "/nonexistent",
                          .cpu = pg_cpu(),
                          .isa_chosen = pg_cpu()->best_isa,
                          .n_threads = 1};
    pg_envchk_finding f[PG_ENVCHK_COUNT];
    return pg_envchk_run(&in, f, PG_ENVCHK_COUNT);
}

/* A clean tree for this process's real CPUs: each its own core, one node. */
static void clean_tree_for_this_process(void) {
    int cpus[PG_CPU_MAX], n = 0;
    assert_int_equal(pg_cpu_allowed(cpus, PG_CPU_MAX, &n), PAGODA_OK);
    char rel[256], list[1024];
    for (int i = 0; i < n; i++) {
        snprintf(rel, sizeof rel, "sys/devices/system/cpu/cpu%d/topology/core_id", cpus[i]);
        putf(rel, "%d\n", cpus[i]);
    }
    put("sys/devices/system/node/node0/cpulist", pg_cpulist_format(cpus, n, list, sizeof list));
}

static char *run_pagoda(const char *env, const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "env -u LD_PRELOAD -u PAGODA_ISA -u PAGODA_CPUS -u PAGODA_BLOCKTIME_US "
             "PAGODA_SYSFS_ROOT='%s' PAGODA_PROCFS_ROOT='%s' %s %s '%s' %s 2>&1",
             g_sys, g_proc, env, pg_test_exec_wrapper(), pg_test_pagoda_bin(), args);
    char *out = NULL;
    int rc = pg_test_run_command(cmd, &out);
    if (rc != 0) fail_msg("exit %d: %s\n%s", rc, cmd, out);
    return out;
}

static void test_cli_env_findings(void **state) {
    (void)state;
    clean_tree_for_this_process();
    char *out = run_pagoda("", "env");
    const char *sec = strstr(out, "\nfindings\n");
    if (!sec) fail_msg("no findings section:\n%s", out);
    if (cpu_only_findings() == 0 && !strstr(sec, "\nfindings\n  none\n"))
        fail_msg("clean tree, yet:\n%s", sec);
    free(out);

    put("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
    put("proc/meminfo", "SwapTotal:       2097152 kB\nSwapFree:        1048576 kB\n");
    out = run_pagoda("", "env");
    sec = strstr(out, "\nfindings\n");
    assert_non_null(sec);
    if (!strstr(sec, "\n  - transparent huge pages are off (transparent_hugepage/enabled: always "
                     "madvise [never])\n      cost: ") ||
        !strstr(sec, "\n      fix:  echo madvise | sudo tee") ||
        !strstr(sec, "\n  - 1.0 GiB of swap in use"))
        fail_msg("findings lack THP / swap:\n%s", sec);
    free(out);
}

static void test_cli_generate_logs_findings_once(void **state) {
    (void)state;
    clean_tree_for_this_process();
    put("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
    char args[2048];
    snprintf(args, sizeof args, "generate '%s' --prompt 'Once upon' --max-tokens 2",
             pg_test_asset("llm/stories260K-hf"));
    char *out = run_pagoda("", args);
    const char *first = strstr(out, "env: transparent huge pages are off");
    if (!first) fail_msg("no start-up warning:\n%s", out);
    assert_null(strstr(first + 1, "env: transparent huge pages are off"));
    assert_non_null(strstr(first, "; fix: echo madvise"));
    free(out);
}

/* `pagoda serve` logs the findings once at start, before it listens:
 * started in the background, stopped with SIGINT once it printed PORT=. */
static void test_cli_serve_logs_findings_once(void **state) {
    (void)state;
    clean_tree_for_this_process();
    put("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
    char log[700], args[2048];
    snprintf(log, sizeof log, "%s/serve.log", g_root);
    snprintf(args, sizeof args,
             "serve '%s' --port 0 > '%s' 2>&1 & pid=$!; i=0; "
             "while [ $i -lt 1200 ] && ! grep -q '^PORT=' '%s'; do sleep 0.1; i=$((i+1)); done; "
             "kill -INT $pid; wait $pid",
             pg_test_asset("llm/stories260K-hf"), log, log);
    char *out = run_pagoda("", args);
    free(out);
    char *text = pg_test_read_file(log, NULL);
    const char *first = strstr(text, "env: transparent huge pages are off");
    if (!first || !strstr(text, "\nPORT=")) fail_msg("no start-up warning or no PORT=:\n%s", text);
    assert_null(strstr(first + 1, "env: transparent huge pages are off"));
    assert_true(first < strstr(text, "\nPORT="));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_clean_tree_has_no_findings, setup),
        cmocka_unit_test_setup(test_smt_siblings_in_pinned_pool, setup),
        cmocka_unit_test_setup(test_more_threads_than_physical_cores, setup),
        cmocka_unit_test_setup(test_affinity_mask_below_threads, setup),
        cmocka_unit_test_setup(test_cgroup_v2_quota, setup),
        cmocka_unit_test_setup(test_cgroup_v1_quota, setup),
        cmocka_unit_test_setup(test_threads_not_pinned, setup),
        cmocka_unit_test_setup(test_small_blocktime_with_speculation, setup),
        cmocka_unit_test_setup(test_foreign_runtime_preloaded, setup),
        cmocka_unit_test_setup(test_foreign_allocator_mapped, setup),
        cmocka_unit_test_setup(test_thp_never, setup),
        cmocka_unit_test_setup(test_isa_forced_below_best, setup),
        cmocka_unit_test_setup(test_isa_features_missing, setup),
        cmocka_unit_test_setup(test_threads_span_numa_nodes, setup),
        cmocka_unit_test_setup(test_model_larger_than_numa_node, setup),
        cmocka_unit_test_setup(test_swap_in_use, setup),
        cmocka_unit_test_setup(test_powersave_governor, setup),
        cmocka_unit_test_setup(test_findings_in_kind_order, setup),
        cmocka_unit_test_setup(test_empty_roots, setup),
        cmocka_unit_test_setup(test_malformed_files, setup),
        cmocka_unit_test_setup(test_process_findings_use_root_variables, setup),
        cmocka_unit_test_setup(test_cli_env_findings, setup),
        cmocka_unit_test_setup(test_cli_generate_logs_findings_once, setup),
        cmocka_unit_test_setup(test_cli_serve_logs_findings_once, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
