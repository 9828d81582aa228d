/* `pagoda env` report (see env_report.h). */
#include "kernels/env_report.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/affinity.h"
#include "base/pool.h"

/* "48 KiB", "1.0 MiB", "15.6 GiB"; "unknown" for 0. */
static const char *fmt_bytes(char *buf, size_t cap, uint64_t v) {
    if (!v) return "unknown";
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double d = (double)v;
    int u = 0;
    while (d >= 1024 && u < 4)
        d /= 1024, u++;
    if (d == (double)(uint64_t)d)
        snprintf(buf, cap, "%llu %s", (unsigned long long)d, units[u]);
    else
        snprintf(buf, cap, "%.1f %s", d, units[u]);
    return buf;
}

int pg_env_findings(uint64_t model_bytes, bool speculation, pg_envchk_finding *out, int cap) {
    static int allowed[PG_CPU_MAX], cpus[PG_POOL_MAX_THREADS];
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    pg_envchk_input in = {.cpu = pg_cpu(), .speculation = speculation, .model_bytes = model_bytes};
    int level = pg_isa_parse(pg_kernels()->isa);
    in.isa_chosen = level >= 0 ? (pg_isa)level : in.cpu->best_isa;
    if (pg_cpu_allowed(allowed, PG_CPU_MAX, &in.n_allowed) == PAGODA_OK) in.allowed = allowed;
    pg_pool *pool = pg_pool_default();
    if (pool) {
        in.n_threads = pg_pool_size(pool);
        for (int i = 0; i < in.n_threads && i < PG_POOL_MAX_THREADS; i++)
            cpus[i] = pg_pool_cpu(pool, i);
        in.thread_cpus = cpus;
        in.blocktime_us = pg_pool_blocktime_us(pool);
    } else {
        in.n_threads = 1;
        in.blocktime_us = PG_POOL_BLOCKTIME_DEFAULT_US;
    }
    int n = pg_envchk_run(&in, out, cap);
    pthread_mutex_unlock(&mu);
    return n;
}

int pg_env_log_findings(uint64_t model_bytes, bool speculation) {
    pg_envchk_finding f[PG_ENVCHK_COUNT];
    int n = pg_env_findings(model_bytes, speculation, f, PG_ENVCHK_COUNT);
    pg_envchk_log(f, n);
    return n;
}

void pg_env_report(FILE *f) {
    const pg_cpu_info *c = pg_cpu();
    const pg_kernel_table *t = pg_kernels();
    char b1[32], b2[32], b3[32];

    fprintf(f, "pagoda %s (%s)\n", PAGODA_VERSION, c->arch);

    fprintf(f, "\ncpu\n");
    fprintf(f, "  %-16s %s\n", "model", c->model);
    fprintf(f, "  %-16s %d allowed (%d online)\n", "logical cpus", c->logical_cpus, c->online_cpus);
    fprintf(f, "  %-16s %d\n", "physical cores", c->physical_cores);
    fprintf(f, "  %-16s %d\n", "smt per core", c->smt_per_core);
    fprintf(f, "  %-16s %d\n", "numa nodes", c->numa_nodes);
    fprintf(f, "  %-16s %s / %s / %s\n", "l1d / l2 / l3", fmt_bytes(b1, sizeof b1, c->l1d_bytes),
            fmt_bytes(b2, sizeof b2, c->l2_bytes), fmt_bytes(b3, sizeof b3, c->l3_bytes));

    fprintf(f, "\nisa features\n");
    pg_cpu_feature feats[PG_CPU_MAX_FEATURES];
    size_t nf = pg_cpu_features(c, feats);
    for (size_t i = 0; i < nf; i++)
        fprintf(f, "  %-16s %s\n", feats[i].name, feats[i].present ? "yes" : "no");
    if (c->sve)
        fprintf(f, "  %-16s %d bytes (%d bits)\n", "sve vector len", c->sve_vl_bytes,
                8 * c->sve_vl_bytes);

    fprintf(f, "\nisa level\n");
    const char *req = getenv("PAGODA_ISA");
    fprintf(f, "  %-16s %s\n", "best", pg_isa_name(c->best_isa));
    fprintf(f, "  %-16s %s\n", "PAGODA_ISA", req && *req ? req : "(unset)");
    fprintf(f, "  %-16s %s\n", "chosen", t->isa);

    fprintf(f, "\nkernels\n");
    pg_kernels_describe(t, f, "");

    fprintf(f, "\nmemory\n");
    fprintf(f, "  %-16s %s\n", "total", fmt_bytes(b1, sizeof b1, c->mem_total));
    fprintf(f, "  %-16s %s\n", "available", fmt_bytes(b1, sizeof b1, c->mem_available));
    fprintf(f, "  %-16s %s\n", "transparent hp", c->thp_mode);
    fprintf(f, "  %-16s %llu total, %llu free (%s each)\n", "huge pages",
            (unsigned long long)c->hugepages_total, (unsigned long long)c->hugepages_free,
            fmt_bytes(b1, sizeof b1, c->hugepage_bytes));

    fprintf(f, "\nthreads\n");
    pg_pool *pool = pg_pool_default(); /* created here if nothing used it yet */
    if (pool)
        pg_pool_describe(pool, f);
    else
        fprintf(f, "  %-16s %s\n", "thread pool", "(could not be created)");

    fprintf(f, "\nfindings\n");
    pg_envchk_finding found[PG_ENVCHK_COUNT];
    pg_envchk_print(found, pg_env_findings(0, false, found, PG_ENVCHK_COUNT), f);
}
