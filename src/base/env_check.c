/* Environment check (see env_check.h). */
#define _GNU_SOURCE
#include "base/env_check.h"

#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/affinity.h"
#include "base/log.h"
#include "base/pool.h"

typedef struct chk {
    const pg_envchk_input *in;
    char sys[512], proc[512];
    pg_envchk_finding *out;
    int cap, n;
    /* the CPUs the threads run on: the pinned CPUs, else the affinity mask */
    int run[PG_CPU_MAX];
    int n_run;
    bool pinned;
    /* one CPU per physical core of the affinity mask (the pool's default list) */
    int n_cores;
    char one_per_core[160];
} chk;

/* ---- files -------------------------------------------------------------- */

/* Read root + rel (rel starts with '/') into buf, at most cap-1 bytes,
 * trailing whitespace removed. false if it cannot be opened. */
static bool read_text(const char *root, const char *rel, char *buf, size_t cap) {
    char path[1024];
    snprintf(path, sizeof path, "%s%s", root, rel);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    while (n > 0 && isspace((unsigned char)buf[n - 1]))
        buf[--n] = 0;
    return true;
}

static long long read_ll(const char *root, const char *rel, long long dflt) {
    char buf[64];
    if (!read_text(root, rel, buf, sizeof buf)) return dflt;
    char *end;
    long long v = strtoll(buf, &end, 10);
    return end == buf ? dflt : v;
}

/* "1.5 GiB" style size. */
static const char *fmt_size(char *buf, size_t cap, uint64_t bytes) {
    if (bytes >= (1ull << 30))
        snprintf(buf, cap, "%.1f GiB", (double)bytes / (double)(1ull << 30));
    else
        snprintf(buf, cap, "%.1f MiB", (double)bytes / (double)(1ull << 20));
    return buf;
}

/* Value in kB of "key:" in a meminfo-style file (the key may be preceded by
 * "Node N "); -1 if absent. */
static long long meminfo_kb(const char *root, const char *rel, const char *key) {
    char path[1024];
    snprintf(path, sizeof path, "%s%s", root, rel);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    long long v = -1;
    size_t kl = strlen(key);
    while (v < 0 && fgets(line, sizeof line, f)) {
        char *p = strstr(line, key);
        if (p && p[kl] == ':') v = strtoll(p + kl + 1, NULL, 10);
    }
    fclose(f);
    return v;
}

static pg_envchk_finding *add(chk *c, pg_envchk_kind kind) {
    if (c->n >= c->cap) return NULL;
    pg_envchk_finding *f = &c->out[c->n++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    return f;
}

/* A finding's sentence; longer text is cut (a finding never fails). */
__attribute__((format(printf, 3, 4))) static void set_text(char *dst, size_t cap, const char *fmt,
                                                           ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
}
#define SET(f, field, ...) set_text((f)->field, sizeof(f)->field, __VA_ARGS__)

/* ---- threads and CPUs ------------------------------------------------------ */

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* (package, core) of a logical CPU, as pg_cpu_physical_cores keys it. */
static long long core_key(const chk *c, int cpu) {
    char rel[128];
    snprintf(rel, sizeof rel, "/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
    long long pkg = read_ll(c->sys, rel, 0);
    snprintf(rel, sizeof rel, "/devices/system/cpu/cpu%d/topology/core_id", cpu);
    return pkg * 1000000 + read_ll(c->sys, rel, cpu);
}

static void check_threads(chk *c) {
    const pg_envchk_input *in = c->in;
    int n = in->n_threads, m = in->n_allowed;
    char list[160];
    const int n_cores = c->n_cores;
    const char *one_per_core = c->one_per_core;
    pg_cpulist_format(in->allowed, m, list, sizeof list);
    pg_envchk_finding *f;
    if (n > m) {
        if (!(f = add(c, PG_ENVCHK_AFFINITY))) return;
        int turns = (n + m - 1) / m;
        SET(f, what, "%d threads, but the affinity mask allows %d CPUs (%s)", n, m, list);
        SET(f, cost,
            "threads take turns on the CPUs and cannot be pinned: a step takes at least %.2fx as "
            "long as with %d threads (static split: ceil(%d/%d) turns of 1/%d of the work), more "
            "while a finished thread spins (50 us, then yields) waiting for a descheduled one: "
            "3 threads on 2 CPUs made a batch-1 decode 17x slower here (loaded machine, "
            "docs/PERFORMANCE.md)",
            (double)turns * m / n, m, n, m, n);
        SET(f, fix,
            "--threads %d (or PAGODA_CPUS=%s), or start pagoda with a wider mask (taskset -c, "
            "numactl --physcpubind, the container's cpuset)",
            n_cores, one_per_core);
        return; /* more threads than logical CPUs: the SMT case below says nothing more */
    }
    /* threads per physical core, at worst */
    int worst = 1, distinct = n_cores;
    char pair[128] = "";
    if (c->pinned) {
        long long keys[PG_CPU_MAX];
        distinct = 0;
        for (int i = 0; i < c->n_run; i++) {
            long long k = core_key(c, c->run[i]);
            int same = 1;
            for (int j = 0; j < i; j++)
                if (keys[j] == k) {
                    if (same == 1 && !pair[0])
                        snprintf(pair, sizeof pair, "CPUs %d and %d share a core", c->run[j],
                                 c->run[i]);
                    same++;
                }
            if (same == 1) distinct++;
            if (same > worst) worst = same;
            keys[i] = k;
        }
    } else if (n > n_cores) {
        worst = (n + n_cores - 1) / n_cores;
    }
    if (worst < 2) return;
    if (!(f = add(c, PG_ENVCHK_SMT))) return;
    if (c->pinned)
        SET(f, what, "SMT siblings in the pool: %d threads pinned to %d physical cores (%s)", n,
            distinct, pair);
    else
        SET(f, what, "%d threads on %d physical cores (SMT siblings of the affinity mask %s)", n,
            n_cores, list);
    int base = c->pinned ? distinct : n_cores;
    double ratio = (double)worst * base / n;
    if (ratio > 1.005)
        SET(f, cost,
            "siblings share one core's vector units, so the %d threads of a core run at about "
            "1/%d speed and every step waits for them: about %.2fx the step time of %d threads, "
            "one per core (estimate: static split)",
            worst, worst, ratio, base);
    else
        SET(f, cost,
            "no more compute than %d threads, one per core (siblings share one core's vector "
            "units), and the siblings evict each other's L1/L2 tiles",
            base);
    SET(f, fix,
        "one thread per physical core: --threads %d, and unset PAGODA_CPUS (the default pins one "
        "CPU per core) or set PAGODA_CPUS=%s",
        n_cores, one_per_core);
}

/* Smallest cgroup CPU quota on the path from `path` up to the hierarchy's
 * root under mount `mnt`; v2 reads cpu.max, v1 cpu.cfs_quota_us/period_us.
 * Updates *cpus / *period_us / where when smaller. */
static void cgroup_walk(const chk *c, const char *mnt, const char *path, bool v2, double *cpus,
                        double *period_us, char *where, size_t wcap) {
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    for (;;) {
        size_t len = strlen(p);
        while (len > 0 && p[len - 1] == '/')
            p[--len] = 0;
        char rel[1024], buf[128];
        double q = -1, per = 0;
        if (v2) {
            snprintf(rel, sizeof rel, "/fs/cgroup%s%s/cpu.max", mnt, p);
            char qs[32];
            long long pv;
            if (read_text(c->sys, rel, buf, sizeof buf) && sscanf(buf, "%31s %lld", qs, &pv) == 2 &&
                strcmp(qs, "max") != 0 && pv > 0) {
                q = strtod(qs, NULL);
                per = (double)pv;
            }
        } else {
            char prel[1024];
            snprintf(prel, sizeof prel, "/fs/cgroup%s%s/cpu.cfs_period_us", mnt, p);
            long long pv = read_ll(c->sys, prel, 0);
            snprintf(rel, sizeof rel, "/fs/cgroup%s%s/cpu.cfs_quota_us", mnt, p);
            long long qv = read_ll(c->sys, rel, -1);
            if (qv > 0 && pv > 0) q = (double)qv, per = (double)pv;
        }
        if (q > 0 && (*cpus <= 0 || q / per < *cpus)) {
            *cpus = q / per;
            *period_us = per;
            snprintf(where, wcap, "%.200s%.400s", c->sys, rel);
        }
        char *slash = strrchr(p, '/');
        if (!slash) break;
        *slash = 0;
    }
}

static void check_quota(chk *c) {
    char path[1024];
    snprintf(path, sizeof path, "%s/self/cgroup", c->proc);
    FILE *fp = fopen(path, "r");
    if (!fp) return;
    double cpus = 0, period = 0;
    char where[640] = "", line[1024];
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c1 = *c2 = 0;
        const char *ctrls = c1 + 1, *cg = c2 + 1;
        if (!strcmp(line, "0") && !*ctrls) {
            cgroup_walk(c, "", cg, true, &cpus, &period, where, sizeof where);
            continue;
        }
        bool has_cpu = false; /* v1: "cpu,cpuacct" names the cpu controller */
        char tmp[256];
        snprintf(tmp, sizeof tmp, "%s", ctrls);
        for (char *s = NULL, *t = strtok_r(tmp, ",", &s); t; t = strtok_r(NULL, ",", &s))
            has_cpu |= !strcmp(t, "cpu");
        if (!has_cpu) continue;
        static const char *const mounts[] = {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"};
        for (size_t i = 0; i < sizeof mounts / sizeof mounts[0]; i++)
            cgroup_walk(c, mounts[i], cg, false, &cpus, &period, where, sizeof where);
    }
    fclose(fp);
    int n = c->in->n_threads;
    if (cpus <= 0 || cpus >= (double)n - 1e-9) return;
    pg_envchk_finding *f = add(c, PG_ENVCHK_CPU_QUOTA);
    if (!f) return;
    int whole = cpus < 1 ? 1 : (int)cpus;
    double per_ms = period / 1000.0, busy = per_ms * cpus / n;
    SET(f, what, "the cgroup CPU quota is %.2f CPUs (%s) for %d threads", cpus, where, n);
    SET(f, cost,
        "%d busy threads spend the quota in %.0f ms of every %.0f ms period, then the kernel "
        "throttles the whole process for the other %.0f ms: steps stall for up to that long",
        n, busy, per_ms, per_ms - busy);
    SET(f, fix,
        "--threads %d (the quota's whole CPUs), or raise the quota: docker run --cpus=%d, "
        "Kubernetes resources.limits.cpu: %d, systemd CPUQuota=%d00%%",
        whole, n, n, n);
}

static void check_pinning(chk *c) {
    if (c->pinned) return;
    pg_envchk_finding *f = add(c, PG_ENVCHK_UNPINNED);
    if (!f) return;
    SET(f, what, "the pool's %d thread%s not pinned to CPUs", c->in->n_threads,
        c->in->n_threads == 1 ? " is" : "s are");
    SET(f, cost,
        "the kernel may move a thread to another core mid-step (its L1/L2 tiles are lost) or "
        "stack two threads on one core while another idles; vLLM's CPU backend binds one "
        "thread per core for the same reason (not measured here)");
    SET(f, fix,
        "no more threads than the pool's CPUs: --threads %d or fewer (one per physical core: "
        "%s), or a PAGODA_CPUS list with a CPU for every thread; the pool pins thread i to the "
        "i-th CPU whenever they fit",
        c->n_cores, c->one_per_core);
}

static void check_blocktime(chk *c) {
    const pg_envchk_input *in = c->in;
    if (!in->speculation || in->blocktime_us >= PG_POOL_BLOCKTIME_DEFAULT_US) return;
    pg_envchk_finding *f = add(c, PG_ENVCHK_BLOCKTIME);
    if (!f) return;
    SET(f, what, "pool block time %ld us with speculative decoding on", in->blocktime_us);
    SET(f, cost,
        "the workers fall asleep between the short draft and verify steps, and each parallel "
        "region then pays a 15-40 us futex wake-up instead of 0.15-0.4 us (docs/PERFORMANCE.md, "
        "\"Pool block time\"); vLLM measured speculative TPOT 115.6 ms with a sleeping runtime "
        "(libgomp) vs 58.1 ms with a spinning one (libiomp5), 1.99x (vllm-project/vllm#44191); "
        "here block time 0 made a whole batch-1 decode 18x slower on a loaded machine "
        "(docs/PERFORMANCE.md)");
    SET(f, fix, "unset PAGODA_BLOCKTIME_US (default %d us), or set PAGODA_BLOCKTIME_US=%d or more",
        PG_POOL_BLOCKTIME_DEFAULT_US, PG_POOL_BLOCKTIME_DEFAULT_US);
}

/* ---- foreign runtimes ------------------------------------------------------- */

static const struct {
    const char *prefix;
    bool openmp;
    bool when_mapped; /* reported when only mapped (not preloaded) */
} FOREIGN[] = {
    {"libiomp5", true, true},     {"libgomp", true, false},     {"libomp.", true, true},
    {"libtcmalloc", false, true}, {"libjemalloc", false, true},
};
enum { N_FOREIGN = sizeof FOREIGN / sizeof FOREIGN[0] };

typedef struct foreign_seen {
    char names[N_FOREIGN][96];
    const char *how[N_FOREIGN];
} foreign_seen;

/* Record path's basename if it names a watched library not yet seen. */
static void note_lib(foreign_seen *s, const char *path, size_t len, bool preload) {
    const char *b = path;
    for (size_t i = 0; i < len; i++)
        if (path[i] == '/') b = path + i + 1;
    size_t bl = len - (size_t)(b - path);
    for (int i = 0; i < N_FOREIGN; i++) {
        size_t pl = strlen(FOREIGN[i].prefix);
        if (bl < pl || strncmp(b, FOREIGN[i].prefix, pl) != 0 || s->how[i]) continue;
        if (!preload && !FOREIGN[i].when_mapped) continue;
        snprintf(s->names[i], sizeof s->names[i], "%.*s", (int)(bl < 95 ? bl : 95), b);
        s->how[i] = preload ? "LD_PRELOAD" : "loaded";
    }
}

static void check_foreign(chk *c) {
    foreign_seen s;
    memset(&s, 0, sizeof s);
    const char *pre = getenv("LD_PRELOAD");
    for (const char *p = pre ? pre : ""; *p;) {
        size_t len = strcspn(p, ": ");
        if (len) note_lib(&s, p, len, true);
        p += len;
        if (*p) p++;
    }
    char path[1024], line[2048];
    snprintf(path, sizeof path, "%s/self/maps", c->proc);
    FILE *fp = fopen(path, "r");
    if (fp) {
        while (fgets(line, sizeof line, fp)) {
            const char *slash = strchr(line, '/');
            if (slash) note_lib(&s, slash, strcspn(slash, "\n"), false);
        }
        fclose(fp);
    }
    char list[512] = "";
    bool omp = false, alloc = false;
    size_t len = 0;
    for (int i = 0; i < N_FOREIGN; i++) {
        if (!s.how[i]) continue;
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s (%s)", len ? ", " : "",
                                s.names[i], s.how[i]);
        if (len >= sizeof list) len = sizeof list - 1;
        omp |= FOREIGN[i].openmp;
        alloc |= !FOREIGN[i].openmp;
    }
    if (!list[0]) return;
    pg_envchk_finding *f = add(c, PG_ENVCHK_FOREIGN_LIB);
    if (!f) return;
    SET(f, what, "a foreign %s%s%s in the process: %s", omp ? "OpenMP runtime" : "",
        omp && alloc ? " and " : "", alloc ? "allocator" : "", list);
    SET(f, cost, "%s%s%s",
        omp ? "pagoda runs its own pinned thread pool, not OpenMP: whenever code in the process "
              "runs an OpenMP region, that runtime's threads spin afterwards (libiomp5 / libomp: "
              "KMP_BLOCKTIME 200 ms) on the cores the pool is pinned to, and every pool region "
              "waits for the descheduled thread"
            : "",
        omp && alloc ? "; " : "",
        alloc ? "a preloaded malloc replaces the one pagoda is built with (mimalloc) for every "
                "small allocation (weights and KV cache are mmap'ed either way; not measured)"
              : "");
    SET(f, fix,
        "start pagoda without them: unset LD_PRELOAD (vLLM's images preload libiomp5 and "
        "tcmalloc for their own kernels; pagoda needs neither); for an OpenMP runtime a host "
        "application loads, OMP_NUM_THREADS=1 or OMP_WAIT_POLICY=passive");
}

/* ---- memory ----------------------------------------------------------------- */

static void check_thp(chk *c) {
    char buf[128];
    if (!read_text(c->sys, "/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf)) return;
    if (!strstr(buf, "[never]")) return;
    pg_envchk_finding *f = add(c, PG_ENVCHK_THP);
    if (!f) return;
    SET(f, what, "transparent huge pages are off (transparent_hugepage/enabled: %s)", buf);
    SET(f, cost,
        "weights and the KV cache are mapped in 4 KiB pages instead of 2 MiB: 512x the page "
        "table entries (a 1 GiB weight stream touches 262144 pages instead of 512), so the "
        "weight streaming of every decode step misses the TLB far more often (not measured "
        "here: this machine has THP on)");
    SET(f, fix,
        "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled (pagoda asks for "
        "huge pages with madvise on its large buffers)");
}

/* NUMA nodes the threads run on: a cpulist of node ids into `used`, their
 * MemTotal sum into *mem (0 if unreadable); returns the count. */
static int numa_nodes_used(const chk *c, char *used, size_t cap, uint64_t *mem, int *first) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/devices/system/node", c->sys);
    DIR *d = opendir(dir);
    *mem = 0;
    *first = -1;
    if (!d) return 0;
    int ids[PG_CPU_MAX], n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < PG_CPU_MAX) {
        if (strncmp(e->d_name, "node", 4) || !isdigit((unsigned char)e->d_name[4])) continue;
        int id = atoi(e->d_name + 4);
        char rel[128], buf[4096];
        snprintf(rel, sizeof rel, "/devices/system/node/node%d/cpulist", id);
        int cpus[PG_CPU_MAX], nc = 0;
        if (!read_text(c->sys, rel, buf, sizeof buf) || !buf[0] ||
            pg_cpulist_parse("node cpulist", buf, cpus, PG_CPU_MAX, &nc) != PAGODA_OK)
            continue;
        bool hit = false;
        for (int i = 0, j = 0; i < c->n_run && j < nc && !hit;) {
            if (c->run[i] == cpus[j])
                hit = true;
            else if (c->run[i] < cpus[j])
                i++;
            else
                j++;
        }
        if (!hit) continue;
        ids[n++] = id;
        snprintf(rel, sizeof rel, "/devices/system/node/node%d/meminfo", id);
        long long kb = meminfo_kb(c->sys, rel, "MemTotal");
        if (kb > 0) *mem += (uint64_t)kb << 10;
    }
    closedir(d);
    qsort(ids, (size_t)n, sizeof *ids, cmp_int);
    pg_cpulist_format(ids, n, used, cap);
    if (n) *first = ids[0];
    return n;
}

static void check_numa(chk *c) {
    char used[128], b1[32], b2[32];
    uint64_t mem;
    int first;
    int n = numa_nodes_used(c, used, sizeof used, &mem, &first);
    pg_envchk_finding *f;
    if (n > 1 && (f = add(c, PG_ENVCHK_NUMA_SPAN))) {
        char rel[128], node_cpus[160] = "";
        snprintf(rel, sizeof rel, "/devices/system/node/node%d/cpulist", first);
        read_text(c->sys, rel, node_cpus, sizeof node_cpus);
        SET(f, what, "the %d threads run on CPUs of %d NUMA nodes (%s)", c->in->n_threads, n, used);
        SET(f, cost,
            "pages live on the node that first touched them, so the threads of the other "
            "node(s) read weights and KV cache across the socket interconnect, at a fraction "
            "of local bandwidth, in a decode step bound by bandwidth (not measured here: this "
            "machine has one node)");
        SET(f, fix,
            "numactl --cpunodebind=%d --membind=%d pagoda ... (or PAGODA_CPUS=%s, the CPUs of "
            "node %d)",
            first, first, node_cpus, first);
    }
    uint64_t model = c->in->model_bytes;
    if (n < 1 || mem == 0 || model <= mem || !(f = add(c, PG_ENVCHK_NUMA_MEMORY))) return;
    SET(f, what,
        "weights + KV cache (%s) exceed the memory of NUMA node%s %s (%s) the threads "
        "run on",
        fmt_size(b1, sizeof b1, model), n > 1 ? "s" : "", used, fmt_size(b2, sizeof b2, mem));
    SET(f, cost,
        "the rest is placed on other nodes (every step reads it remotely) or, with no room "
        "left, in swap (a disk read per page touched)");
    SET(f, fix,
        "a smaller KV cache (--kv-cache-memory), quantized weights (--quantization w8a8 halves "
        "BF16 weights, w4a8 quarters them), or threads on more nodes");
}

static void check_swap(chk *c) {
    long long total = meminfo_kb(c->proc, "/meminfo", "SwapTotal");
    long long freekb = meminfo_kb(c->proc, "/meminfo", "SwapFree");
    if (total <= 0 || freekb < 0 || total - freekb <= 0) return;
    pg_envchk_finding *f = add(c, PG_ENVCHK_SWAP);
    if (!f) return;
    char b1[32], b2[32], ours[64] = "";
    long long mine = meminfo_kb(c->proc, "/self/status", "VmSwap");
    if (mine >= 0)
        snprintf(ours, sizeof ours, ", %s of it pagoda's",
                 fmt_size(b2, sizeof b2, (uint64_t)mine << 10));
    char dev[256] = "", path[1024], line[512];
    snprintf(path, sizeof path, "%s/swaps", c->proc);
    FILE *fp = fopen(path, "r");
    if (fp) {
        size_t len = 0;
        while (fgets(line, sizeof line, fp)) {
            char name[200];
            if (line[0] != '/' || sscanf(line, "%199s", name) != 1) continue;
            len += (size_t)snprintf(dev + len, sizeof dev - len, "%s%s", len ? ", " : "", name);
            if (len >= sizeof dev) break;
        }
        fclose(fp);
    }
    SET(f, what, "%s of swap in use%s%s%s",
        fmt_size(b1, sizeof b1, (uint64_t)(total - freekb) << 10), ours, dev[0] ? " on " : "", dev);
    SET(f, cost,
        "a swapped-out weight or KV page costs a disk read when a step touches it: tens of "
        "microseconds on NVMe, milliseconds on a disk, against ~0.25 us to stream 4 KiB from "
        "RAM at 16 GB/s");
    SET(f, fix,
        "free memory (a smaller --kv-cache-memory, --quantization w8a8), then sudo swapoff -a "
        "&& sudo swapon -a to bring the pages back, or sudo sysctl vm.swappiness=1");
}

/* ---- frequency --------------------------------------------------------------- */

static void check_governor(chk *c) {
    int slow[PG_CPU_MAX], n = 0;
    char rel[128], buf[64], driver[64] = "";
    int probe = -1;
    for (int i = 0; i < c->n_run; i++) {
        snprintf(rel, sizeof rel, "/devices/system/cpu/cpu%d/cpufreq/scaling_governor", c->run[i]);
        if (!read_text(c->sys, rel, buf, sizeof buf) || strcmp(buf, "powersave") != 0) continue;
        if (probe < 0) probe = c->run[i];
        slow[n++] = c->run[i];
    }
    if (!n) return;
    pg_envchk_finding *f = add(c, PG_ENVCHK_GOVERNOR);
    if (!f) return;
    snprintf(rel, sizeof rel, "/devices/system/cpu/cpu%d/cpufreq/scaling_driver", probe);
    if (!read_text(c->sys, rel, driver, sizeof driver)) snprintf(driver, sizeof driver, "unknown");
    char list[256];
    SET(f, what, "cpufreq governor powersave on CPU%s %s (driver %s)", n > 1 ? "s" : "",
        pg_cpulist_format(slow, n, list, sizeof list), driver);
    if (!strcmp(driver, "intel_pstate") || !strncmp(driver, "amd-pstate", 10)) {
        SET(f, cost,
            "with %s, powersave lets the hardware pick the frequency by load: cores ramp up "
            "only after a burst starts, which lengthens short decode steps (not measured here)",
            driver);
    } else {
        snprintf(rel, sizeof rel, "/devices/system/cpu/cpu%d/cpufreq/scaling_min_freq", probe);
        long long lo = read_ll(c->sys, rel, 0);
        snprintf(rel, sizeof rel, "/devices/system/cpu/cpu%d/cpufreq/cpuinfo_max_freq", probe);
        long long hi = read_ll(c->sys, rel, 0);
        if (lo > 0 && hi > lo)
            SET(f, cost,
                "the CPUs run at their lowest frequency, %.2f of %.2f GHz: compute-bound work "
                "(prefill) up to %.1fx slower",
                (double)lo / 1e6, (double)hi / 1e6, (double)hi / (double)lo);
        else
            SET(f, cost,
                "the CPUs run at their lowest frequency: compute-bound work (prefill) "
                "slows by the ratio of the highest to the lowest frequency");
    }
    SET(f, fix,
        "sudo cpupower frequency-set -g performance (or: echo performance | sudo tee "
        "/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor)");
}

/* ---- ISA ---------------------------------------------------------------------- */

/* What running at level `lo` instead of `hi` costs (same architecture). */
static const char *isa_cost(pg_isa hi, pg_isa lo) {
    if (lo == PG_ISA_SCALAR)
        return "no SIMD: the dot-product kernels run 22-93x slower in cache and 3.4-27x on "
               "memory-bound streams than the AVX2 / AVX-512 ones (docs/PERFORMANCE.md, "
               "\"Dot-product kernels\"), every other kernel likewise";
    if (lo == PG_ISA_AVX2)
        return "half-width vectors: W8A8 prefill at 22-28% of the AVX512_VNNI peak (about 4x "
               "slower) and BF16 prefill at half the FMA width; decode, bound by memory "
               "bandwidth, stays at 89-95% of read bandwidth (docs/PERFORMANCE.md)";
    if (lo == PG_ISA_AVX512 && hi == PG_ISA_AVX512BF16)
        return "BF16 GEMMs widen to f32 FMA: a peak of 117 instead of 232 GFLOP/s per core "
               "(VDPBF16PS) measured here, about 2x on prefill";
    return "little: the GEMMs are NEON (BFMMLA / SMMLA) at every level; only the dot products "
           "and exp lose their SVE variants";
}

static void check_isa(chk *c) {
    const pg_cpu_info *cpu = c->in->cpu;
    pg_isa best = cpu->best_isa, used = c->in->isa_chosen;
    pg_envchk_finding *f;
    if (used < best && pg_isa_supported(cpu, used) && (f = add(c, PG_ENVCHK_ISA_FORCED))) {
        SET(f, what, "kernels run at ISA level %s (PAGODA_ISA) while this CPU supports %s",
            pg_isa_name(used), pg_isa_name(best));
        SET(f, cost, "%s", isa_cost(best, used));
        SET(f, fix, "unset PAGODA_ISA (pagoda then picks %s)", pg_isa_name(best));
    }
    char miss[160] = "", cost[600] = "";
    size_t ml = 0, cl = 0;
#define MISS(name, text)                                                                           \
    do {                                                                                           \
        ml += (size_t)snprintf(miss + ml, sizeof miss - ml, "%s%s", ml ? ", " : "", name);         \
        cl += (size_t)snprintf(cost + cl, sizeof cost - cl, "%s%s", cl ? "; " : "", text);         \
        if (ml >= sizeof miss) ml = sizeof miss - 1;                                               \
        if (cl >= sizeof cost) cl = sizeof cost - 1;                                               \
    } while (0)
#if defined(__x86_64__)
    if (best == PG_ISA_SCALAR) {
        MISS("AVX2/FMA", isa_cost(PG_ISA_AVX2, PG_ISA_SCALAR));
    } else {
        if (best < PG_ISA_AVX512)
            MISS("AVX-512", "AVX-512: the AVX2 kernels have half the vector width, about 2x "
                            "slower prefill (decode is bound by memory bandwidth)");
        if (!cpu->avx512_bf16)
            MISS("AVX512_BF16", "AVX512_BF16: BF16 GEMMs widen to f32 FMA, half the VDPBF16PS "
                                "peak (117 vs 232 GFLOP/s per core measured here)");
        if (!cpu->avx512_vnni && !cpu->avx_vnni)
            MISS("VNNI", "VNNI: W8A8/W4A8 run on VPMADDUBSW + VPMADDWD at 22-28% of the "
                         "VPDPBUSD peak, about 4x slower prefill");
    }
#else
    if (best == PG_ISA_SCALAR) {
        MISS("ASIMD", isa_cost(PG_ISA_NEON, PG_ISA_SCALAR));
    } else {
        if (!cpu->i8mm)
            MISS("I8MM", "I8MM: W8A8/W4A8 run on SDOT at half the SMMLA peak, 1.3-1.8x slower "
                         "prefill (docs/PERFORMANCE.md, \"Arm kernels\")");
        if (!cpu->bf16)
            MISS("BF16", "BF16: BF16 GEMMs widen to F32 FMLA, 1.6 instead of 9.7 MACs per "
                         "instruction (BFMMLA), several times slower prefill");
        if (!cpu->sve)
            MISS("SVE", "SVE: little (the GEMMs are NEON at every level; dot products and exp "
                        "lose their SVE variants)");
    }
#endif
#undef MISS
    if (!miss[0] || !(f = add(c, PG_ENVCHK_ISA_MISSING))) return;
    SET(f, what, "this CPU lacks %s", miss);
    SET(f, cost, "%s", cost);
#if defined(__x86_64__)
    SET(f, fix,
        "no setting adds an instruction: run on a CPU that has them (Intel Sapphire Rapids or "
        "AMD Zen 4 and later); where BF16 is what is missing, --quantization w8a8 moves the "
        "GEMMs to the int8 kernels");
#else
    SET(f, fix,
        "no setting adds an instruction: run on a CPU that has them (Arm Neoverse V1, N2, V2 "
        "and later, e.g. AWS Graviton3/4); where BF16 is what is missing, --quantization w8a8 "
        "moves the GEMMs to the int8 (SDOT) kernels");
#endif
}

/* ---- entry points ---------------------------------------------------------------- */

static const char *root_of(const char *given, const char *env, const char *dflt) {
    if (given) return given;
    const char *e = getenv(env);
    return e && *e ? e : dflt;
}

static int cmp_kind(const void *a, const void *b) {
    return (int)((const pg_envchk_finding *)a)->kind - (int)((const pg_envchk_finding *)b)->kind;
}

int pg_envchk_run(const pg_envchk_input *in, pg_envchk_finding *out, int cap) {
    static chk c; /* large (CPU arrays); the check runs once per process start */
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    memset(&c, 0, sizeof c);
    static pg_envchk_input fixed; /* n_threads below 1 is taken as 1 */
    fixed = *in;
    if (fixed.n_threads < 1) fixed.n_threads = 1;
    if (fixed.n_threads > PG_CPU_MAX) fixed.n_threads = PG_CPU_MAX;
    in = &fixed;
    c.in = in;
    c.out = out;
    c.cap = cap;
    snprintf(c.sys, sizeof c.sys, "%s", root_of(in->sysfs_root, "PAGODA_SYSFS_ROOT", "/sys"));
    snprintf(c.proc, sizeof c.proc, "%s", root_of(in->procfs_root, "PAGODA_PROCFS_ROOT", "/proc"));
    c.pinned = in->thread_cpus && in->n_threads > 0 && in->thread_cpus[0] >= 0;
    if (c.pinned) {
        for (int i = 0; i < in->n_threads && i < PG_CPU_MAX; i++)
            if (in->thread_cpus[i] >= 0) c.run[c.n_run++] = in->thread_cpus[i];
        qsort(c.run, (size_t)c.n_run, sizeof *c.run, cmp_int);
    } else {
        for (int i = 0; i < in->n_allowed && i < PG_CPU_MAX; i++)
            c.run[c.n_run++] = in->allowed[i];
    }
    if (in->n_allowed > 0) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/devices/system/cpu", c.sys);
        static int cores[PG_CPU_MAX];
        c.n_cores = pg_cpu_physical_cores(dir, in->allowed, in->n_allowed, cores);
        pg_cpulist_format(cores, c.n_cores, c.one_per_core, sizeof c.one_per_core);
        check_threads(&c);
    }
    check_quota(&c);
    if (in->n_allowed > 0) check_pinning(&c);
    check_blocktime(&c);
    check_foreign(&c);
    check_thp(&c);
    if (in->cpu) check_isa(&c);
    check_numa(&c);
    check_swap(&c);
    check_governor(&c);
    int n = c.n;
    pthread_mutex_unlock(&mu);
    qsort(out, (size_t)n, sizeof *out, cmp_kind);
    return n;
}

const char *pg_envchk_kind_name(pg_envchk_kind k) {
    static const char *const names[PG_ENVCHK_COUNT] = {
        [PG_ENVCHK_SMT] = "smt",
        [PG_ENVCHK_AFFINITY] = "affinity",
        [PG_ENVCHK_CPU_QUOTA] = "cpu_quota",
        [PG_ENVCHK_UNPINNED] = "unpinned",
        [PG_ENVCHK_BLOCKTIME] = "blocktime",
        [PG_ENVCHK_FOREIGN_LIB] = "foreign_lib",
        [PG_ENVCHK_THP] = "thp",
        [PG_ENVCHK_ISA_FORCED] = "isa_forced",
        [PG_ENVCHK_ISA_MISSING] = "isa_missing",
        [PG_ENVCHK_NUMA_SPAN] = "numa_span",
        [PG_ENVCHK_NUMA_MEMORY] = "numa_memory",
        [PG_ENVCHK_SWAP] = "swap",
        [PG_ENVCHK_GOVERNOR] = "governor",
    };
    return (unsigned)k < PG_ENVCHK_COUNT ? names[k] : "invalid";
}

void pg_envchk_print(const pg_envchk_finding *f, int n, FILE *out) {
    if (n == 0) fprintf(out, "  none\n");
    for (int i = 0; i < n; i++)
        fprintf(out, "  - %s\n      cost: %s\n      fix:  %s\n", f[i].what, f[i].cost, f[i].fix);
}

void pg_envchk_log(const pg_envchk_finding *f, int n) {
    for (int i = 0; i < n; i++)
        PG_WARN("env: %s; cost: %s; fix: %s", f[i].what, f[i].cost, f[i].fix);
}
