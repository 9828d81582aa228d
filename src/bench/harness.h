/* Measurement pieces shared by the benchmarks (bench/bench_gemm.c,
 * bench/bench_qgemm.c) and `pagoda bench` (src/cli/cmd_bench_offline.c):
 * clocks, medians, the F32 FMA peak and read-bandwidth baselines measured
 * on every pool thread, and the Llama-3.2-1B linear-layer shapes.
 * Part of pagoda_core so the CLI can measure the bandwidth bound in the
 * same run as a decode benchmark. */
#ifndef PAGODA_BENCH_HARNESS_H
#define PAGODA_BENCH_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"

/* Wall seconds (CLOCK_MONOTONIC). */
double pg_bench_now(void);
/* CPU seconds of all the process's threads: unlike wall time it does not
 * count the time other jobs on the shared cores take from us, so ratios of
 * "work per CPU second" stay meaningful under load (spin-waiting at a join
 * counts, which makes them conservative). */
double pg_bench_cpu_now(void);
/* Median of v[0..n) (sorts v). */
double pg_bench_median(double *v, int n);

/* Results are stored here so the compiler keeps the measured loops. */
extern volatile float pg_bench_sink;

/* Iterations of the 16-accumulator peak loops (Arm: / 64, for qemu). */
enum { PG_BENCH_PEAK_ITERS = 1000000 };

/* One peak/bandwidth region over the pool. kind 0: kernel_peak() on every
 * thread (the bench's own instruction: VDPBF16PS, VPDPBUSD, BFMMLA, ...,
 * returning its flops or int ops); 1: F32 FMA peak; 2: read bandwidth, each
 * thread summing its share of buf[0..bytes). */
typedef struct pg_bench_peak {
    double (*kernel_peak)(void);
    int kind;
    double flops[PG_POOL_MAX_THREADS > 64 ? 64 : PG_POOL_MAX_THREADS];
    const char *buf;
    size_t bytes;
} pg_bench_peak;

/* Whether this CPU runs the F32 FMA peak loop (x86: AVX-512F). */
int pg_bench_have_peak_f32(void);
/* G(FL)OP/s (kind 0, 1) or GB/s (kind 2) of one region over the pool;
 * *per_cpu_s (optional) the same per CPU second. */
double pg_bench_run_peak(pg_pool *pool, pg_bench_peak *c, double *per_cpu_s);

/* Read bandwidth in GB/s over the pool: median of `reps` (>= 1) passes in
 * which every pool thread sums its contiguous share of buf[0..bytes) (f32
 * adds, AVX-512 / NEON loads); buf should be well over the last-level
 * cache (e.g. 256 MiB) and touched once before. */
double pg_bench_read_bandwidth(pg_pool *pool, const void *buf, size_t bytes, int reps);

/* The Llama-3.2-1B linear layers: W [N, K]; swiglu: gate+up fused, N outputs
 * from 2 x N rows. */
typedef struct pg_bench_shape {
    const char *name;
    int64_t N, K;
    int swiglu;
} pg_bench_shape;
enum { PG_BENCH_N_SHAPES = 7 };
extern const pg_bench_shape PG_BENCH_SHAPES[PG_BENCH_N_SHAPES];

#endif
