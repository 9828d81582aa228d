/* Quantized GEMM benchmark (kernels/qgemm.h, W8A8 / W4A8) on the
 * Llama-3.2-1B linear layers, with the baselines measured in the same run:
 *   peak   int8 dot-product throughput (x86 VPDPBUSD zmm / Arm SMMLA), 16
 *          independent accumulators, on every pool thread, in int8 ops/s
 *          (one multiply-add = 2 ops)
 *   bw     read bandwidth: every pool thread sums its share of a 512 MiB buffer
 *   M=512  prefill: GOP/s and % of the measured int8 peak
 *   M=32   batched decode
 *   M=1    decode: GB/s of packed weight bytes (scales and compensation
 *          included) vs the read bandwidth
 * Usage: bench_qgemm [--rounds R] [--threads T] [--scheme w8a8|w4a8]
 *                    [--group G (0 = per channel)] [--act-group] [--quick]
 * (--act-group: activation scales per token and group, the GGUF path) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/dtype.h"
#include "base/pool.h"
#include "bench/harness.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/qgemm.h"

/* ---- peak throughput microbenchmarks (flops per call returned) */

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double peak_bf16_thread(void) {
    __m512i c[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        c[i] = _mm512_set1_epi32(i); /* distinct chains: no CSE */
    __m512i a = _mm512_set1_epi32(0x01010101), b = _mm512_set1_epi32(0x02020202);
    for (long it = 0; it < PG_BENCH_PEAK_ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = _mm512_dpbusd_epi32(c[i], a, b);
        __asm__ volatile("" : "+v"(a)); /* keep the loop from being folded */
    }
    __m512i s = c[0];
    for (int i = 1; i < 16; i++)
        s = _mm512_add_epi32(s, c[i]);
    pg_bench_sink = (float)_mm512_reduce_add_epi32(s);
    return (double)PG_BENCH_PEAK_ITERS * 16 * 16 * 4 * 2; /* 16 lanes x 4 products x 2 ops */
}

static int have_peak_bf16(void) {
    return pg_cpu()->avx512_vnni;
}
#elif defined(__aarch64__)
__attribute__((target("arch=armv8.2-a+fp16+dotprod+i8mm"))) static double peak_bf16_thread(void) {
    int32x4_t c[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        c[i] = vdupq_n_s32(i); /* distinct chains: no CSE */
    int8x16_t a = vdupq_n_s8(1), b = vdupq_n_s8(2);
    for (long it = 0; it < PG_BENCH_PEAK_ITERS / 64; it++) { /* qemu: keep it short */
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = vmmlaq_s32(c[i], a, b);
        __asm__ volatile("" : "+w"(a));
    }
    int32x4_t s = c[0];
    for (int i = 1; i < 16; i++)
        s = vaddq_s32(s, c[i]);
    pg_bench_sink = (float)vaddvq_s32(s);
    return (double)(PG_BENCH_PEAK_ITERS / 64) * 16 * 32 * 2; /* 2x2x8 multiply-adds */
}

static int have_peak_bf16(void) {
    return pg_cpu()->i8mm;
}
#endif

enum { MAX_COPIES = 64, MAX_ROUNDS = 15 };

typedef struct {
    pg_packed_weight *w[MAX_COPIES];
    int copies, next;
} packed_set;

int main(int argc, char **argv) {
    int rounds = 3, threads = 0, quick = 0, bits = 8, act_group = 0;
    int64_t group = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scheme") && i + 1 < argc)
            bits = !strcmp(argv[++i], "w4a8") ? 4 : 8;
        else if (!strcmp(argv[i], "--group") && i + 1 < argc)
            group = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--act-group"))
            act_group = 1;
        else if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else {
            fprintf(
                stderr,
                "usage: bench_qgemm [--rounds R] [--threads T] [--scheme w8a8|w4a8] [--group G] "
                "[--act-group] [--quick]\n");
            return 2;
        }
    }
    if (rounds < 1) rounds = 1;
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = threads;
    pg_pool *pool = NULL;
    if (pg_pool_create(&o, &pool) != PAGODA_OK) {
        fprintf(stderr, "bench_qgemm: %s\n", pg_last_error());
        return 1;
    }
    const pg_kernel_table *kt = pg_kernels();
    const int nth = pg_pool_size(pool);
    const int64_t Ms[] = {512, 32, 1};
    const size_t stream_bytes = quick ? (64u << 20) : (256u << 20);
    const int nshapes = quick ? PG_BENCH_N_SHAPES - 1 : PG_BENCH_N_SHAPES;

    /* pack every shape (copies for the streamed runs) */
    packed_set sets[PG_BENCH_N_SHAPES];
    size_t max_n = 0, max_k = 0;
    for (int s = 0; s < nshapes; s++) {
        const pg_bench_shape *sh = &PG_BENCH_SHAPES[s];
        size_t elems = (size_t)(sh->N * sh->K);
        int64_t ng = pg_qweight_ngroups(sh->K, group);
        uint16_t *src = malloc(elems * 2);
        int8_t *q = malloc(elems);
        float *sc = malloc((size_t)(sh->N * ng) * sizeof(float));
        if (!src || !q || !sc) return 1;
        for (size_t i = 0; i < elems; i++)
            src[i] = pg_f32_to_bf16((float)((i * 2654435761u) % 2001) * 1e-3f - 1.0f);
        pg_qgemm_quantize_weight(PG_BF16, src, sh->K, bits, group, 0, sh->N, q, sc);
        pg_qweight qw = {bits, group, sh->N, sh->K, q, sc, act_group};
        size_t bytes = elems * (size_t)bits / 8 * (sh->swiglu ? 2 : 1);
        int copies = (int)((stream_bytes + bytes - 1) / bytes);
        if (copies > MAX_COPIES) copies = MAX_COPIES;
        if (copies < 1) copies = 1;
        sets[s].copies = copies;
        sets[s].next = 0;
        for (int c = 0; c < copies; c++) {
            pagoda_status st =
                pg_gemm_pack_qweight(&qw, sh->swiglu ? &qw : NULL, kt, &sets[s].w[c]);
            if (st != PAGODA_OK) {
                fprintf(stderr, "bench_qgemm: %s\n", pg_last_error());
                return 1;
            }
        }
        free(src);
        free(q);
        free(sc);
        if ((size_t)sh->N > max_n) max_n = (size_t)sh->N;
        if ((size_t)sh->K > max_k) max_k = (size_t)sh->K;
    }
    size_t scratch_bytes = 0;
    for (int s = 0; s < nshapes; s++) {
        size_t b = pg_gemm_scratch_size(sets[s].w[0], 512, nth);
        if (b > scratch_bytes) scratch_bytes = b;
    }
    void *scratch = pg_malloc_aligned(scratch_bytes);
    float *A = pg_malloc_aligned(512 * max_k * sizeof(float));
    float *C = pg_malloc_aligned(512 * max_n * sizeof(float));
    size_t bw_bytes = 512u << 20;
    char *bwbuf = pg_alloc_huge(bw_bytes);
    if (!scratch || !A || !C || !bwbuf) return 1;
    for (size_t i = 0; i < 512 * max_k; i++)
        A[i] = (float)(i % 97) * 0.01f - 0.5f;
    for (size_t i = 0; i < bw_bytes; i += 4096)
        bwbuf[i] = 1; /* fault the pages in */

    printf("bench_qgemm: %s, %d threads, W%dA8 group %lld, variant %s, %d rounds (median)\n",
           pg_cpu()->model, nth, bits, (long long)group, pg_gemm_variant(sets[0].w[0]), rounds);
    /* Each GEMM timing is paired with the baseline it is compared to,
     * measured just before it (the peak for M >= 32, the read bandwidth for
     * all), so the ratio holds even when other jobs take the cores. */
    double peak_bf16[MAX_ROUNDS], peak_f32[MAX_ROUNDS], bw[MAX_ROUNDS];
    double res[3][PG_BENCH_N_SHAPES][MAX_ROUNDS], rpeak[3][PG_BENCH_N_SHAPES][MAX_ROUNDS],
        rbw[3][PG_BENCH_N_SHAPES][MAX_ROUNDS];
    double cpeak[3][PG_BENCH_N_SHAPES][MAX_ROUNDS], cbw[3][PG_BENCH_N_SHAPES][MAX_ROUNDS];
    pg_bench_peak pc = {.kernel_peak = peak_bf16_thread, .buf = bwbuf, .bytes = bw_bytes};
    const int peak_kind = 0;
    const int have_peak = have_peak_bf16();
    for (int r = 0; r < rounds; r++) {
        pc.kind = 0;
        peak_bf16[r] = have_peak_bf16() ? pg_bench_run_peak(pool, &pc, NULL) : 0;
        pc.kind = 1;
        peak_f32[r] = pg_bench_have_peak_f32() ? pg_bench_run_peak(pool, &pc, NULL) : 0;
        pc.kind = 2;
        bw[r] = pg_bench_run_peak(pool, &pc, NULL);
        for (int mi = 0; mi < 3; mi++) {
            int64_t M = Ms[mi];
            for (int s = 0; s < nshapes; s++) {
                packed_set *ps = &sets[s];
                double flops = 2.0 * (double)M * (double)PG_BENCH_SHAPES[s].N *
                               (double)PG_BENCH_SHAPES[s].K * (PG_BENCH_SHAPES[s].swiglu ? 2 : 1);
                int reps = M == 512 ? 2 : ps->copies * 2;
                if (M == 512 && flops > 1e11) reps = 1;
                pg_gemm_epilogue ep = PG_BENCH_SHAPES[s].swiglu ? PG_GEMM_SWIGLU : PG_GEMM_STORE;
                pc.kind = 2;
                double bc, pkc = 0;
                double b = pg_bench_run_peak(pool, &pc, &bc);
                pc.kind = peak_kind;
                double pk = have_peak ? pg_bench_run_peak(pool, &pc, &pkc) : 0;
                /* warm-up call (first touch of C, wakes the pool) */
                pg_gemm(ps->w[ps->next], A, M, PG_BENCH_SHAPES[s].K, C, PG_BENCH_SHAPES[s].N, NULL,
                        ep, pool, scratch);
                ps->next = (ps->next + 1) % ps->copies;
                double t0 = pg_bench_now(), c0 = pg_bench_cpu_now();
                for (int i = 0; i < reps; i++) {
                    pg_gemm(ps->w[ps->next], A, M, PG_BENCH_SHAPES[s].K, C, PG_BENCH_SHAPES[s].N,
                            NULL, ep, pool, scratch);
                    ps->next = (ps->next + 1) % ps->copies;
                }
                double t = (pg_bench_now() - t0) / reps;
                double tc = (pg_bench_cpu_now() - c0) / reps / nth; /* CPU s per thread */
                cpeak[mi][s][r] = pkc > 0 ? flops / tc * 1e-9 / pkc : 0;
                cbw[mi][s][r] = (double)pg_gemm_packed_bytes(ps->w[0]) / tc * 1e-9 / bc;
                res[mi][s][r] = t;
                rpeak[mi][s][r] = pk > 0 ? flops / t * 1e-9 / pk : 0;
                rbw[mi][s][r] = (double)pg_gemm_packed_bytes(ps->w[0]) / t * 1e-9 / b;
            }
        }
    }
    double pb = pg_bench_median(peak_bf16, rounds), pf = pg_bench_median(peak_f32, rounds),
           bwm = pg_bench_median(bw, rounds);
    printf("peak int8 (%s, 16 acc/thread): %.0f GOP/s;  peak F32 FMA: %.0f GFLOP/s;  read "
           "bandwidth: %.1f GB/s\n",
#if defined(__x86_64__)
           "VPDPBUSD zmm",
#else
           "SMMLA",
#endif
           pb, pf, bwm);
    printf("(%% of peak / of read bw: median over rounds of the ratio to the baseline measured "
           "just before that call;\n [cpu: the same ratio per CPU second, robust to other jobs "
           "taking the cores])\n");
    for (int mi = 0; mi < 3; mi++) {
        int64_t M = Ms[mi];
        printf("M=%lld\n", (long long)M);
        for (int s = 0; s < nshapes; s++) {
            double t = pg_bench_median(res[mi][s], rounds);
            double flops = 2.0 * (double)M * (double)PG_BENCH_SHAPES[s].N *
                           (double)PG_BENCH_SHAPES[s].K * (PG_BENCH_SHAPES[s].swiglu ? 2 : 1);
            double gbs = (double)pg_gemm_packed_bytes(sets[s].w[0]) / t * 1e-9;
            printf("  %-27s %9.3f ms %7.1f GOP/s (%5.1f%% of peak) [cpu %5.1f%%] %6.1f GB/s "
                   "(%5.1f%% of read bw) [cpu %5.1f%%]\n",
                   PG_BENCH_SHAPES[s].name, t * 1e3, flops / t * 1e-9,
                   100.0 * pg_bench_median(rpeak[mi][s], rounds),
                   100.0 * pg_bench_median(cpeak[mi][s], rounds), gbs,
                   100.0 * pg_bench_median(rbw[mi][s], rounds),
                   100.0 * pg_bench_median(cbw[mi][s], rounds));
        }
    }
    for (int s = 0; s < nshapes; s++)
        for (int c = 0; c < sets[s].copies; c++)
            pg_gemm_free(sets[s].w[c]);
    pg_free_huge(bwbuf, bw_bytes);
    pg_free(scratch);
    pg_free(A);
    pg_free(C);
    pg_pool_free(pool);
    return 0;
}
