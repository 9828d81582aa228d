/* Shared pieces of the GEMM benchmarks: see harness.h. */
#include "bench/harness.h"

#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "base/cpu.h"

volatile float pg_bench_sink;

double pg_bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double pg_bench_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double pg_bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n & 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#if defined(__x86_64__)
__attribute__((target("avx512f,fma"))) static double peak_f32_thread(void) {
    __m512 c[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        c[i] = _mm512_set1_ps((float)i); /* distinct chains: no CSE */
    __m512 a = _mm512_set1_ps(1e-7f), b = _mm512_set1_ps(1.0f);
    for (long it = 0; it < PG_BENCH_PEAK_ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = _mm512_fmadd_ps(a, b, c[i]);
        __asm__ volatile("" : "+v"(a));
    }
    __m512 s = c[0];
    for (int i = 1; i < 16; i++)
        s = _mm512_add_ps(s, c[i]);
    pg_bench_sink = _mm512_reduce_add_ps(s);
    return (double)PG_BENCH_PEAK_ITERS * 16 * 16 * 2;
}

int pg_bench_have_peak_f32(void) {
    return pg_cpu()->avx512f;
}

__attribute__((target("avx512f"))) static float sum_bytes(const void *p, size_t bytes) {
    const __m512 *v = p;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 4 <= bytes / 64; i += 4) {
        s0 = _mm512_add_ps(s0, v[i]);
        s1 = _mm512_add_ps(s1, v[i + 1]);
        s2 = _mm512_add_ps(s2, v[i + 2]);
        s3 = _mm512_add_ps(s3, v[i + 3]);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}
#elif defined(__aarch64__)
static double peak_f32_thread(void) {
    float32x4_t c[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        c[i] = vdupq_n_f32((float)i); /* distinct chains: no CSE */
    float32x4_t a = vdupq_n_f32(1e-7f), b = vdupq_n_f32(1.0f);
    for (long it = 0; it < PG_BENCH_PEAK_ITERS / 64; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = vfmaq_f32(c[i], a, b);
        __asm__ volatile("" : "+w"(a));
    }
    float32x4_t s = c[0];
    for (int i = 1; i < 16; i++)
        s = vaddq_f32(s, c[i]);
    pg_bench_sink = vaddvq_f32(s);
    return (double)(PG_BENCH_PEAK_ITERS / 64) * 16 * 4 * 2;
}

int pg_bench_have_peak_f32(void) {
    return 1;
}

static float sum_bytes(const void *p, size_t bytes) {
    const float *f = p;
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 16 <= bytes / 4; i += 16) {
        s0 = vaddq_f32(s0, vld1q_f32(f + i));
        s1 = vaddq_f32(s1, vld1q_f32(f + i + 4));
        s2 = vaddq_f32(s2, vld1q_f32(f + i + 8));
        s3 = vaddq_f32(s3, vld1q_f32(f + i + 12));
    }
    return vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
}
#endif

static void peak_region(void *vctx, int tid, int n) {
    pg_bench_peak *c = vctx;
    if (c->kind == 0)
        c->flops[tid] = c->kernel_peak();
    else if (c->kind == 1)
        c->flops[tid] = peak_f32_thread();
    else {
        size_t share = (c->bytes / (size_t)n) & ~(size_t)4095;
        pg_bench_sink = sum_bytes(c->buf + (size_t)tid * share, share);
        c->flops[tid] = (double)share;
    }
}

/* GFLOP/s (kind 0, 1) or GB/s (kind 2) of one region over the pool. */
double pg_bench_run_peak(pg_pool *pool, pg_bench_peak *c, double *per_cpu_s) {
    double t0 = pg_bench_now(), c0 = pg_bench_cpu_now();
    pg_pool_run(pool, peak_region, c);
    double dt = pg_bench_now() - t0, dc = pg_bench_cpu_now() - c0, total = 0;
    for (int i = 0; i < pg_pool_size(pool); i++)
        total += c->flops[i];
    if (per_cpu_s) *per_cpu_s = total / dc * 1e-9 * pg_pool_size(pool);
    return total / dt * 1e-9;
}

double pg_bench_read_bandwidth(pg_pool *pool, const void *buf, size_t bytes, int reps) {
    enum { MAX_REPS = 64 };
    double v[MAX_REPS];
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    pg_bench_peak c = {.kind = 2, .buf = buf, .bytes = bytes};
    for (int i = 0; i < reps; i++)
        v[i] = pg_bench_run_peak(pool, &c, NULL);
    return pg_bench_median(v, reps);
}

const pg_bench_shape PG_BENCH_SHAPES[PG_BENCH_N_SHAPES] = {
    {"q 2048x2048", 2048, 2048, 0},
    {"k/v 512x2048", 512, 2048, 0},
    {"o 2048x2048", 2048, 2048, 0},
    {"gate|up 8192x2048", 8192, 2048, 0},
    {"gate+up SwiGLU 2x8192x2048", 8192, 2048, 1},
    {"down 2048x8192", 2048, 8192, 0},
    {"lm_head 128256x2048", 128256, 2048, 0},
};
