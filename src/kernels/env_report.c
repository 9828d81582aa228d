/* `pagoda env` report (see env_report.h). */
#include "kernels/env_report.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

int pg_env_warnings(const pg_cpu_info *c, const pg_kernel_table *t, FILE *f) {
    int n = 0;
    if (c->smt_per_core > 1) {
        fprintf(f,
                "  - SMT siblings share cores (%d threads per core): use one thread per physical "
                "core (%d), not per logical CPU\n",
                c->smt_per_core, c->physical_cores);
        n++;
    }
    if (c->numa_nodes > 1) {
        fprintf(f,
                "  - %d NUMA nodes: bind threads and memory to one node (numactl) or split "
                "the model across nodes\n",
                c->numa_nodes);
        n++;
    }
    if (c->logical_cpus < c->online_cpus) {
        fprintf(f, "  - this process may use only %d of %d online CPUs (affinity mask)\n",
                c->logical_cpus, c->online_cpus);
        n++;
    }
    if (!strcmp(c->thp_mode, "never")) {
        fprintf(f, "  - THP disabled (transparent_hugepage=never): weights and KV cache use 4 KiB "
                   "pages; set it to madvise or always\n");
        n++;
    }
    if (t && strcmp(t->isa, pg_isa_name(c->best_isa)) != 0) {
        fprintf(f, "  - kernels limited to %s by PAGODA_ISA; this CPU supports %s\n", t->isa,
                pg_isa_name(c->best_isa));
        n++;
    }
    if (c->best_isa == PG_ISA_SCALAR) {
        fprintf(f, "  - no supported SIMD level: scalar kernels only (slow)\n");
        n++;
    }
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

    fprintf(f, "\nwarnings\n");
    if (pg_env_warnings(c, t, f) == 0) fprintf(f, "  none\n");
}
