/* Shared measurement pieces of the benchmarks: see harness.h. */
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

/* Each peak loop keeps 16 independent accumulator chains (enough to cover
 * the instruction's latency times its throughput on current cores), hides
 * one operand from the optimizer every iteration so the loop is not folded,
 * and finally forces the accumulators to memory so none is dropped. It
 * returns the operations it did (one multiply-add = 2). */
#define KEEP(acc) __asm__ volatile("" : : "r"(acc) : "memory")

#if defined(__x86_64__)
enum { ITERS = PG_BENCH_PEAK_ITERS };

__attribute__((target("avx512f,avx512bf16"))) static double peak_bf16(void) {
    __m512 c[16];
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80),
             b = (__m512bh)_mm512_set1_epi32(0x3c003c00);
    for (int i = 0; i < 16; i++)
        c[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = _mm512_dpbf16_ps(c[i], a, b);
        __asm__ volatile("" : "+v"(a));
    }
    KEEP(c);
    return (double)ITERS * 16 * 16 * 2 * 2; /* 16 lanes x 2 products x 2 */
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double peak_int8(void) {
    __m512i c[16];
    __m512i a = _mm512_set1_epi32(0x01010101), b = _mm512_set1_epi32(0x02020202);
    for (int i = 0; i < 16; i++)
        c[i] = _mm512_set1_epi32(i);
    for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = _mm512_dpbusd_epi32(c[i], a, b);
        __asm__ volatile("" : "+v"(a));
    }
    KEEP(c);
    return (double)ITERS * 16 * 16 * 4 * 2; /* 16 lanes x 4 products x 2 */
}

__attribute__((target("avx512f"))) static double peak_f32_zmm(void) {
    __m512 c[16];
    __m512 a = _mm512_set1_ps(1e-7f), b = _mm512_set1_ps(1.0f);
    for (int i = 0; i < 16; i++)
        c[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = _mm512_fmadd_ps(a, b, c[i]);
        __asm__ volatile("" : "+v"(a));
    }
    KEEP(c);
    return (double)ITERS * 16 * 16 * 2;
}

__attribute__((target("avx2,fma"))) static double peak_f32_ymm(void) {
    __m256 c[12]; /* 16 ymm registers: 12 chains + operands */
    __m256 a = _mm256_set1_ps(1e-7f), b = _mm256_set1_ps(1.0f);
    for (int i = 0; i < 12; i++)
        c[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++)
            c[i] = _mm256_fmadd_ps(a, b, c[i]);
        __asm__ volatile("" : "+x"(a));
    }
    KEEP(c);
    return (double)ITERS * 12 * 8 * 2;
}

static double peak(pg_bench_kind kind) {
    if (kind == PG_BENCH_PEAK_BF16) return peak_bf16();
    if (kind == PG_BENCH_PEAK_INT8) return peak_int8();
    return pg_cpu()->avx512f ? peak_f32_zmm() : peak_f32_ymm();
}

int pg_bench_have(pg_bench_kind kind) {
    const pg_cpu_info *c = pg_cpu();
    switch (kind) {
    case PG_BENCH_PEAK_BF16:
        return c->avx512_bf16;
    case PG_BENCH_PEAK_INT8:
        return c->avx512_vnni && c->avx512bw;
    case PG_BENCH_PEAK_F32:
        return c->avx512f || (c->avx2 && c->fma);
    default:
        return 1;
    }
}

const char *pg_bench_kind_name(pg_bench_kind kind) {
    switch (kind) {
    case PG_BENCH_PEAK_BF16:
        return "VDPBF16PS zmm";
    case PG_BENCH_PEAK_INT8:
        return "VPDPBUSD zmm";
    case PG_BENCH_PEAK_F32:
        return pg_cpu()->avx512f ? "FMA zmm" : "FMA ymm";
    default:
        return "read";
    }
}

__attribute__((target("avx512f"))) static float sum_zmm(const void *p, size_t bytes) {
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

/* SSE2 (every x86-64): 4 x 16 bytes a step, enough to saturate DRAM. */
static float sum_xmm(const void *p, size_t bytes) {
    const __m128 *v = p;
    __m128 s0 = _mm_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 4 <= bytes / 16; i += 4) {
        s0 = _mm_add_ps(s0, v[i]);
        s1 = _mm_add_ps(s1, v[i + 1]);
        s2 = _mm_add_ps(s2, v[i + 2]);
        s3 = _mm_add_ps(s3, v[i + 3]);
    }
    float f[4];
    _mm_storeu_ps(f, _mm_add_ps(_mm_add_ps(s0, s1), _mm_add_ps(s2, s3)));
    return f[0] + f[1] + f[2] + f[3];
}

static float sum_bytes(const void *p, size_t bytes) {
    return pg_cpu()->avx512f ? sum_zmm(p, bytes) : sum_xmm(p, bytes);
}
#elif defined(__aarch64__)
enum { ITERS = PG_BENCH_PEAK_ITERS / 64 }; /* qemu: keep it short */

__attribute__((target("arch=armv8.2-a+fp16+bf16"))) static double peak_bf16(void) {
    float32x4_t c[16];
    bfloat16x8_t a = vreinterpretq_bf16_u16(vdupq_n_u16(0x3f80));
    bfloat16x8_t b = vreinterpretq_bf16_u16(vdupq_n_u16(0x3c00));
    for (int i = 0; i < 16; i++)
        c[i] = vdupq_n_f32((float)i);
    for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = vbfmmlaq_f32(c[i], a, b);
        __asm__ volatile("" : "+w"(a));
    }
    KEEP(c);
    return (double)ITERS * 16 * 16 * 2; /* 2x2x4 multiply-adds */
}

__attribute__((target("arch=armv8.2-a+dotprod+i8mm"))) static double peak_smmla(void) {
    int32x4_t c[16];
    int8x16_t a = vdupq_n_s8(1), b = vdupq_n_s8(2);
    for (int i = 0; i < 16; i++)
        c[i] = vdupq_n_s32(i);
    for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = vmmlaq_s32(c[i], a, b);
        __asm__ volatile("" : "+w"(a));
    }
    KEEP(c);
    return (double)ITERS * 16 * 32 * 2; /* 2x2x8 multiply-adds */
}

__attribute__((target("arch=armv8.2-a+dotprod"))) static double peak_sdot(void) {
    int32x4_t c[16];
    int8x16_t a = vdupq_n_s8(1), b = vdupq_n_s8(2);
    for (int i = 0; i < 16; i++)
        c[i] = vdupq_n_s32(i);
    for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = vdotq_s32(c[i], a, b);
        __asm__ volatile("" : "+w"(a));
    }
    KEEP(c);
    return (double)ITERS * 16 * 16 * 2; /* 4 lanes x 4 products */
}

static double peak_f32(void) {
    float32x4_t c[16];
    float32x4_t a = vdupq_n_f32(1e-7f), b = vdupq_n_f32(1.0f);
    for (int i = 0; i < 16; i++)
        c[i] = vdupq_n_f32((float)i);
    for (long it = 0; it < ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++)
            c[i] = vfmaq_f32(c[i], a, b);
        __asm__ volatile("" : "+w"(a));
    }
    KEEP(c);
    return (double)ITERS * 16 * 4 * 2;
}

static double peak(pg_bench_kind kind) {
    if (kind == PG_BENCH_PEAK_BF16) return peak_bf16();
    if (kind == PG_BENCH_PEAK_INT8) return pg_cpu()->i8mm ? peak_smmla() : peak_sdot();
    return peak_f32();
}

int pg_bench_have(pg_bench_kind kind) {
    const pg_cpu_info *c = pg_cpu();
    if (kind == PG_BENCH_PEAK_BF16) return c->bf16;
    if (kind == PG_BENCH_PEAK_INT8) return c->i8mm || c->asimd_dotprod;
    return 1;
}

const char *pg_bench_kind_name(pg_bench_kind kind) {
    switch (kind) {
    case PG_BENCH_PEAK_BF16:
        return "BFMMLA";
    case PG_BENCH_PEAK_INT8:
        return pg_cpu()->i8mm ? "SMMLA" : "SDOT";
    case PG_BENCH_PEAK_F32:
        return "FMLA q";
    default:
        return "read";
    }
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
    if (c->kind != PG_BENCH_READ_BW) {
        c->ops[tid] = peak(c->kind);
        return;
    }
    size_t share = (c->bytes / (size_t)n) & ~(size_t)4095;
    pg_bench_sink = sum_bytes(c->buf + (size_t)tid * share, share);
    c->ops[tid] = (double)share;
}

double pg_bench_run_peak(pg_pool *pool, pg_bench_peak *c, double *per_cpu_s) {
    double t0 = pg_bench_now(), c0 = pg_bench_cpu_now();
    pg_pool_run(pool, peak_region, c);
    double dt = pg_bench_now() - t0, dc = pg_bench_cpu_now() - c0, total = 0;
    for (int i = 0; i < pg_pool_size(pool); i++)
        total += c->ops[i];
    if (per_cpu_s) *per_cpu_s = dc > 0 ? total / dc * 1e-9 * pg_pool_size(pool) : 0;
    return total / dt * 1e-9;
}

double pg_bench_read_bandwidth(pg_pool *pool, const void *buf, size_t bytes, int reps) {
    enum { MAX_REPS = 64 };
    double v[MAX_REPS];
    if (reps < 1) reps = 1;
    if (reps > MAX_REPS) reps = MAX_REPS;
    pg_bench_peak c = {.kind = PG_BENCH_READ_BW, .buf = buf, .bytes = bytes};
    for (int i = 0; i < reps; i++)
        v[i] = pg_bench_run_peak(pool, &c, NULL);
    return pg_bench_median(v, reps);
}
