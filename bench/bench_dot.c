/* Dot-product kernels: every ISA level this CPU supports against the scalar
 * reference measured in the same run. Reports GFLOP/s (2 flops per element)
 * and the ratio to scalar, median of 5 alternating rounds, for a row that
 * fits in L1 (n = 4096) and one streamed from memory (n = 4M f32 = 16 MiB).
 * Usage: bench_dot [rounds_scale]  (default 1; smaller is quicker). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/dtype.h"
#include "kernels/dispatch.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static volatile float g_sink; /* keeps results alive */

/* Seconds per call of entry k of table t on n elements (reps calls per round). */
static double time_entry(const pg_kernel_table *t, int k, const float *a, const float *b,
                         const uint16_t *w, size_t n, int reps) {
    double t0 = now();
    float s = 0;
    for (int r = 0; r < reps; r++) {
        if (k == 0)
            s += t->dot_f32(a, b, n);
        else if (k == 1)
            s += t->dot_bf16_f32(w, b, n);
        else
            s += t->dot_f16_f32(w, b, n);
    }
    g_sink = s;
    return (now() - t0) / reps;
}

int main(int argc, char **argv) {
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    if (scale <= 0) scale = 1.0;
    const char *entry[3] = {"dot_f32", "dot_bf16_f32", "dot_f16_f32"};
    const size_t sizes[2] = {4096, 4u << 20};
    const size_t maxn = sizes[1];
    float *a = pg_malloc_aligned(maxn * sizeof *a), *b = pg_malloc_aligned(maxn * sizeof *b);
    uint16_t *w = pg_malloc_aligned(maxn * sizeof *w);
    if (!a || !b || !w) return 1;
    for (size_t i = 0; i < maxn; i++) {
        a[i] = (float)(i % 17) * 0.01f;
        b[i] = (float)(i % 13) * 0.02f;
        w[i] = pg_f32_to_bf16(a[i]); /* also a finite f16 bit pattern */
    }
    const pg_kernel_table *tables[PG_ISA_COUNT];
    int nt = 0;
    for (int l = 0; l < PG_ISA_COUNT; l++) {
        const pg_kernel_table *t = pg_kernels_for_isa(pg_isa_name((pg_isa)l));
        if (t) tables[nt++] = t;
    }
    printf("bench_dot: %s, %s; GFLOP/s (ratio to scalar), median of 5 rounds\n", pg_cpu()->model,
           pg_cpu()->arch);
    for (int si = 0; si < 2; si++) {
        size_t n = sizes[si];
        int reps = (int)(scale * (si == 0 ? 20000 : 20));
        if (reps < 1) reps = 1;
        for (int k = 0; k < 3; k++) {
            double med[PG_ISA_COUNT];
            double runs[PG_ISA_COUNT][5];
            for (int round = 0; round < 5; round++) /* alternate variants within a round */
                for (int i = 0; i < nt; i++)
                    runs[i][round] = time_entry(tables[i], k, a, b, w, n, reps);
            printf("  %-13s n=%-8zu", entry[k], n);
            for (int i = 0; i < nt; i++) {
                qsort(runs[i], 5, sizeof(double), cmp_double);
                med[i] = runs[i][2];
                printf("  %s %.2f (%.1fx)", tables[i]->isa, 2.0 * (double)n / med[i] * 1e-9,
                       med[0] / med[i]);
            }
            printf("\n");
        }
    }
    pg_free(a);
    pg_free(b);
    pg_free(w);
    return 0;
}
