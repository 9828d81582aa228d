/* K-quant GEMMs (Q4_K, Q5_K, Q6_K, IQ4_XS) of the running CPU's kernel
 * table on random GGUF rows: decode (M = 1: GB/s of the packed weight
 * stream) and prefill (M = 512: GOP/s, 2 per multiply-add) on 1 and 2
 * threads, beside the read bandwidth of the same pool over a buffer as large
 * as the weights (pg_bench_read_bandwidth) measured in the same rounds. Median of
 * the rounds; alternating the binaries of two builds gives new / old
 * ratios (docs/PERFORMANCE.md issue 23 "AVX2").
 * Usage: bench_kquant [rounds] [N] [K] [types: any of 4 5 6 x] [calls] [M]
 *   defaults: 5 rounds, N = 8192, K = 4096 (32 MiB of Q6_K), all four.
 *   With calls: only rounds x calls calls of M rows (default 1, at most
 *   512) on one thread per type,
 *   timed in thread CPU time (which other jobs on a loaded machine skew
 *   less than wall time): with a weight that fits L2, e.g. N = 256,
 *   K = 2048, the kernel's own cost per weight.
 * bench_kquant step [steps] [layers]: the GEMV calls of one decode step of the
 *   Qwen3-1.7B shape quantized Q4_K_M (per layer qkv 4096 x 2048, o 2048 x
 *   2048 and gate/up 2 x 6144 x 2048 in Q4_K, down 2048 x 6144 in Q6_K on
 *   every other layer, else Q4_K; then the lm_head 151936 x 2048 in Q6_K;
 *   28 layers by default: 113 calls, 1.12 GB) at M = 1 on 2 threads, and
 *   after each step the read bandwidth of the next 64 MiB of a 256 MiB
 *   buffer: each step's stream against the bandwidth right after it,
 *   binned by that bandwidth (the machine's moves between regimes within
 *   seconds). No attention, norms or sampling: what the kernels stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/dtype.h"
#include "base/pool.h"
#include "bench/harness.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void put16(uint8_t *p, float f) {
    uint16_t h = pg_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* Random rows of t with small positive F16 scales where the block has them. */
static uint8_t *make_rows(pg_dtype t, int64_t N, int64_t K) {
    const size_t bb = pg_dtype_block_bytes(t), nb = (size_t)(N * K) / pg_dtype_block_elems(t);
    uint8_t *w = malloc(nb * bb);
    if (!w) return NULL;
    for (size_t i = 0; i < nb * bb; i++)
        w[i] = (uint8_t)rnd();
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = w + b * bb;
        if (t == PG_Q6_K) {
            put16(blk + 208, 0.001f);
        } else if (t == PG_IQ4_XS) {
            put16(blk, 0.001f);
        } else {
            put16(blk, 0.002f);
            put16(blk + 2, 0.001f);
        }
    }
    return w;
}

typedef struct {
    const int64_t *buf;
} read_job;

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return x[n / 2];
}

/* bench_kquant step: see the head comment. */
static int run_steps(int steps, int layers) {
    enum { MAXW = 4 * 64 + 1, NV = 151936, PROBE = 64 << 20, PBUF = 256 << 20 };
    if (steps < 1 || steps > 10000 || layers < 1 || layers > 64) {
        fprintf(stderr, "usage: bench_kquant step [steps 1-10000] [layers 1-64]\n");
        return 2;
    }
    pg_pool_options po = pg_pool_options_default();
    po.n_threads = 2;
    pg_pool *pool = NULL;
    if (pg_pool_create(&po, &pool) != PAGODA_OK) return 1;
    pg_packed_weight *w[MAXW];
    int64_t wk[MAXW];
    pg_gemm_epilogue ep[MAXW];
    int nw = 0;
    size_t bytes = 0, scratch_bytes = 0;
    for (int l = 0; l <= layers; l++) {
        /* per layer: qkv, o, gate/up, down; after the last: the lm_head */
        const struct {
            pg_dtype t;
            int64_t N, K;
            int swiglu;
        } sh[4] = {{PG_Q4_K, 4096, 2048, 0},
                   {PG_Q4_K, 2048, 2048, 0},
                   {PG_Q4_K, 6144, 2048, 1},
                   {l % 2 ? PG_Q6_K : PG_Q4_K, 2048, 6144, 0}},
          lm = {PG_Q6_K, NV, 2048, 0};
        for (int i = 0; i < (l < layers ? 4 : 1); i++) {
            const pg_dtype t = l < layers ? sh[i].t : lm.t;
            const int64_t N = l < layers ? sh[i].N : lm.N, K = l < layers ? sh[i].K : lm.K;
            uint8_t *g = make_rows(t, N, K);
            uint8_t *u = l < layers && sh[i].swiglu ? make_rows(t, N, K) : NULL;
            if (!g || (l < layers && sh[i].swiglu && !u)) return 1;
            const pagoda_status st = u ? pg_gemm_pack_swiglu(t, g, u, N, K, NULL, &w[nw])
                                       : pg_gemm_pack(t, g, N, K, NULL, &w[nw]);
            free(g);
            free(u);
            if (st != PAGODA_OK) return 1;
            wk[nw] = K;
            ep[nw] = u ? PG_GEMM_SWIGLU : PG_GEMM_STORE;
            bytes += pg_gemm_packed_bytes(w[nw]);
            size_t sb = pg_gemm_scratch_size(w[nw], 1, 2);
            scratch_bytes = sb > scratch_bytes ? sb : scratch_bytes;
            nw++;
        }
    }
    float *A = pg_malloc_aligned(6144 * sizeof(float)), *C = pg_malloc_aligned(NV * sizeof(float));
    void *scratch = pg_malloc_aligned(scratch_bytes);
    uint8_t *pb = pg_malloc_aligned(PBUF);
    double *gbs = malloc((size_t)steps * sizeof *gbs), *rd = malloc((size_t)steps * sizeof *rd);
    if (!A || !C || !scratch || !pb || !gbs || !rd) return 1;
    for (int i = 0; i < 6144; i++)
        A[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 0.001f;
    memset(pb, 1, PBUF);
    printf("isa %s, %d calls, %.3f GB of packed weights per step, 2 threads, %d steps\n",
           pg_kernels()->isa, nw, (double)bytes * 1e-9, steps);
    for (int s = 0; s < steps; s++) {
        const double t0 = now();
        for (int i = 0; i < nw; i++)
            if (pg_gemm(w[i], A, 1, wk[i], C, NV, NULL, ep[i], pool, scratch)) return 1;
        gbs[s] = (double)bytes / (now() - t0) * 1e-9;
        rd[s] = pg_bench_read_bandwidth(pool, pb + (size_t)(s % (PBUF / PROBE)) * PROBE, PROBE, 1);
    }
    /* bins of the probe's GB/s: each step's stream and its ratio, medians */
    const double edges[] = {0, 34, 42, 1e9};
    printf("%-12s %5s %14s %16s\n", "read GB/s", "steps", "stream GB/s", "stream / read");
    double all_t = 0, all_b = 0;
    for (int b = 0; b < 3; b++) {
        double x[10000], r[10000];
        int n = 0;
        for (int s = 0; s < steps; s++)
            if (rd[s] >= edges[b] && rd[s] < edges[b + 1]) {
                x[n] = gbs[s];
                r[n++] = gbs[s] / rd[s];
            }
        if (!n) continue;
        const double mx = median(x, n), mr = median(r, n);
        printf("%4.0f-%-7.0f %5d %14.1f %15.1f%%\n", edges[b], b == 2 ? 99.0 : edges[b + 1], n, mx,
               100.0 * mr);
    }
    for (int s = 0; s < steps; s++) {
        all_t += 1.0 / gbs[s];
        all_b += 1.0 / rd[s];
    }
    printf("all steps: %.1f%% (their bounds summed over their times)\n", 100.0 * all_b / all_t);
    for (int i = 0; i < nw; i++)
        pg_gemm_free(w[i]);
    pg_free(A);
    pg_free(C);
    pg_free(scratch);
    pg_free(pb);
    free(gbs);
    free(rd);
    pg_pool_free(pool);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "step"))
        return run_steps(argc > 2 ? atoi(argv[2]) : 40, argc > 3 ? atoi(argv[3]) : 28);
    const int rounds = argc > 1 ? atoi(argv[1]) : 5;
    const int64_t N = argc > 2 ? atoll(argv[2]) : 8192, K = argc > 3 ? atoll(argv[3]) : 4096;
    const char *sel = argc > 4 ? argv[4] : "456x";
    if (rounds < 1 || rounds > 31 || N < 32 || K < 256 || K % 256) {
        fprintf(stderr, "usage: bench_kquant [rounds 1-31] [N >= 32] [K, a multiple of 256] "
                        "[types: 4 5 6 x]\n");
        return 2;
    }
    const pg_dtype types[4] = {PG_Q4_K, PG_Q5_K, PG_Q6_K, PG_IQ4_XS};
    const char tc[4] = {'4', '5', '6', 'x'};
    const int64_t Mp = 512;
    float *A = pg_malloc_aligned((size_t)(Mp * K) * sizeof(float));
    float *C = pg_malloc_aligned((size_t)(Mp * N) * sizeof(float));
    if (!A || !C) return 1;
    for (int64_t i = 0; i < Mp * K; i++)
        A[i] = (float)((int64_t)(rnd() % 2001) - 1000) * 0.001f;
    pg_pool *pools[2] = {NULL, NULL};
    for (int p = 0; p < 2; p++) {
        pg_pool_options o = pg_pool_options_default();
        o.n_threads = p + 1;
        if (pg_pool_create(&o, &pools[p]) != PAGODA_OK) return 1;
    }
    const int calls = argc > 5 ? atoi(argv[5]) : 0;
    const int64_t Mc = argc > 6 ? atoll(argv[6]) : 1;
    if (calls > 0 && (Mc < 1 || Mc > Mp)) {
        fprintf(stderr, "bench_kquant: M must be 1..512\n");
        return 2;
    }
    if (calls > 0) {
        for (int ti = 0; ti < 4; ti++) {
            if (!strchr(sel, tc[ti])) continue;
            uint8_t *w = make_rows(types[ti], N, K);
            pg_packed_weight *pw = NULL;
            if (!w || pg_gemm_pack(types[ti], w, N, K, NULL, &pw) != PAGODA_OK) return 1;
            free(w);
            void *scratch = pg_malloc_aligned(pg_gemm_scratch_size(pw, Mc, 1));
            if (!scratch) return 1;
            double cpu[31];
            for (int r = 0; r < rounds; r++) {
                const double t0 = cpu_now();
                for (int k = 0; k < calls; k++)
                    if (pg_gemm(pw, A, Mc, K, C, N, NULL, PG_GEMM_STORE, pools[0], scratch))
                        return 1;
                cpu[r] = (cpu_now() - t0) / calls;
            }
            const double us = median(cpu, rounds) * 1e6;
            printf("%-7s %8.2f us CPU per call, %.4f ns per weight and row (M %lld, %d calls x %d "
                   "rounds)\n",
                   pg_dtype_name(types[ti]), us, us * 1e3 / (double)(N * K * Mc), (long long)Mc,
                   calls, rounds);
            pg_free(scratch);
            pg_gemm_free(pw);
        }
        return 0;
    }
    printf("isa %s, N %lld, K %lld, %d rounds (median)\n", pg_kernels()->isa, (long long)N,
           (long long)K, rounds);
    printf("%-7s %3s %12s %12s %9s %14s\n", "type", "thr", "M=1 GB/s", "read GB/s", "% read",
           "M=512 GOP/s");
    for (int ti = 0; ti < 4; ti++) {
        if (!strchr(sel, tc[ti])) continue;
        const pg_dtype t = types[ti];
        uint8_t *w = make_rows(t, N, K);
        pg_packed_weight *pw = NULL;
        if (!w || pg_gemm_pack(t, w, N, K, NULL, &pw) != PAGODA_OK) return 1;
        free(w);
        const size_t wb = pg_gemm_packed_bytes(pw);
        read_job rj = {pg_malloc_aligned(wb)};
        if (!rj.buf) return 1;
        memset((void *)rj.buf, 1, wb);
        for (int p = 0; p < 2; p++) {
            void *scratch = pg_malloc_aligned(pg_gemm_scratch_size(pw, Mp, p + 1));
            if (!scratch) return 1;
            double d1[31], rd[31], pf[31];
            const int reps = 8;
            for (int r = 0; r < rounds; r++) {
                double t0 = now();
                for (int k = 0; k < reps; k++)
                    if (pg_gemm(pw, A, 1, K, C, N, NULL, PG_GEMM_STORE, pools[p], scratch))
                        return 1;
                d1[r] = (double)wb * reps / (now() - t0) * 1e-9;
                rd[r] = pg_bench_read_bandwidth(pools[p], rj.buf, wb, 3);
                t0 = now();
                if (pg_gemm(pw, A, Mp, K, C, N, NULL, PG_GEMM_STORE, pools[p], scratch)) return 1;
                pf[r] = 2.0 * (double)Mp * (double)N * (double)K / (now() - t0) * 1e-9;
            }
            const double m1 = median(d1, rounds), mr = median(rd, rounds);
            printf("%-7s %3d %12.2f %12.2f %8.1f%% %14.1f\n", pg_dtype_name(t), p + 1, m1, mr,
                   100.0 * m1 / mr, median(pf, rounds));
            fflush(stdout);
            pg_free(scratch);
        }
        pg_free((void *)rj.buf);
        pg_gemm_free(pw);
    }
    printf("(checksum %lld)\n", (long long)C[0]);
    for (int p = 0; p < 2; p++)
        pg_pool_free(pools[p]);
    pg_free(A);
    pg_free(C);
    return 0;
}
