/* The linear layer pg_matmul (dispatch-table dots, default thread pool)
 * against its scalar reference (pg_ref_matmul_rows, one thread) measured in
 * the same run: GFLOP/s (2 flops per multiply-add) and the ratio, median of 5
 * alternating rounds, for a 4096 x 4096 weight at M = 1 (decode) and M = 16
 * (a small prefill chunk), weights F32 / BF16 / Q8_0 / Q4_0.
 * Usage: bench_matmul [rounds_scale]  (default 1; smaller is quicker). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/pool.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/ref/ops_ref.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Weights of type t holding roughly `wf` (rows of K). */
static void *make_weights(pg_dtype t, const float *wf, size_t N, size_t K) {
    size_t rb = pg_dtype_row_bytes(t, K);
    uint8_t *w = pg_malloc_aligned(rb * N);
    if (!w) return NULL;
    for (size_t n = 0; n < N; n++) {
        const float *r = wf + n * K;
        uint8_t *o = w + n * rb;
        if (t == PG_F32) {
            memcpy(o, r, K * 4);
        } else if (t == PG_BF16) {
            for (size_t k = 0; k < K; k++) ((uint16_t *)o)[k] = pg_f32_to_bf16(r[k]);
        } else { /* Q8_0 / Q4_0 blocks with a fixed scale: speed does not depend on values */
            size_t bb = pg_dtype_block_bytes(t);
            for (size_t b = 0; b < K / 32; b++) {
                uint16_t d = pg_f32_to_f16(0.01f);
                memcpy(o + b * bb, &d, 2);
                for (size_t j = 2; j < bb; j++) o[b * bb + j] = (uint8_t)((b * 31 + j * 7) & 0xff);
            }
        }
    }
    return w;
}

typedef struct run_args {
    float *out;
    const float *x;
    const void *w;
    pg_dtype t;
    size_t M, N, K;
    float *scratch;
} run_args;

static double time_once(const run_args *a, int ref) {
    double t0 = now();
    if (ref)
        pg_ref_matmul_rows(a->out, a->x, a->w, a->t, NULL, a->M, a->N, a->K, 0, a->N, a->scratch);
    else if (pg_matmul(a->out, a->x, a->w, a->t, NULL, a->M, a->N, a->K) != PAGODA_OK)
        return -1;
    return now() - t0;
}

int main(int argc, char **argv) {
    double scale = argc > 1 ? atof(argv[1]) : 1.0;
    if (scale <= 0) scale = 1.0;
    const size_t N = 4096, K = 4096, Ms[2] = {1, 16};
    const pg_dtype types[4] = {PG_F32, PG_BF16, PG_Q8_0, PG_Q4_0};
    float *wf = pg_malloc_aligned(N * K * sizeof(float));
    float *x = pg_malloc_aligned(16 * K * sizeof(float));
    float *out = pg_malloc_aligned(16 * N * sizeof(float));
    float *scratch = pg_malloc_aligned(K * sizeof(float));
    if (!wf || !x || !out || !scratch) return 1;
    for (size_t i = 0; i < N * K; i++) wf[i] = (float)((i * 7919u) % 201u) / 1000.0f - 0.1f;
    for (size_t i = 0; i < 16 * K; i++) x[i] = (float)(i % 13) * 0.02f;
    printf("pg_matmul vs scalar reference: N = K = %zu, kernels %s, %d threads\n", N,
           pg_kernels()->isa, pg_pool_size(pg_pool_default()));
    printf("| weights | M | scalar ref (1 thread) GFLOP/s | pg_matmul GFLOP/s | ratio |\n");
    printf("| --- | --- | --- | --- | --- |\n");
    int rounds = 5;
    for (int ti = 0; ti < 4; ti++) {
        void *w = make_weights(types[ti], wf, N, K);
        if (!w) return 1;
        for (int mi = 0; mi < 2; mi++) {
            run_args a = {out, x, w, types[ti], Ms[mi], N, K, scratch};
            double flops = 2.0 * (double)Ms[mi] * (double)N * (double)K;
            int reps = (int)(scale * (mi ? 1 : 4));
            if (reps < 1) reps = 1;
            double tr[5], tm[5];
            for (int r = 0; r < rounds; r++) {
                double s = 0, f = 0;
                for (int k = 0; k < reps; k++) s += time_once(&a, 1);
                for (int k = 0; k < reps; k++) f += time_once(&a, 0);
                tr[r] = s / reps;
                tm[r] = f / reps;
            }
            qsort(tr, 5, sizeof tr[0], cmp_double);
            qsort(tm, 5, sizeof tm[0], cmp_double);
            printf("| %s | %zu | %.2f | %.2f | %.1fx |\n", pg_dtype_name(types[ti]), Ms[mi],
                   flops / tr[2] * 1e-9, flops / tm[2] * 1e-9, tr[2] / tm[2]);
        }
        pg_free(w);
    }
    pg_free(wf);
    pg_free(x);
    pg_free(out);
    pg_free(scratch);
    pg_pool_default_shutdown();
    return 0;
}
