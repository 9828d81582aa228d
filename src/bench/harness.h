/* Measurement pieces of the benchmarks (`pagoda bench kernels`,
 * src/bench/kernels.c; the serving client; bench/bench_*.c): clocks,
 * medians, and the baselines a kernel is compared to, measured on every
 * pool thread: the peak throughput of one instruction (VDPBF16PS / BFMMLA
 * for BF16, VPDPBUSD / SMMLA / SDOT for int8, F32 FMA) with 16 independent
 * accumulators per thread, and the read bandwidth. Part of pagoda_core so
 * the CLI can measure a bound in the same run as the benchmark. */
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

/* What one peak/bandwidth region measures. */
typedef enum pg_bench_kind {
    PG_BENCH_PEAK_BF16 = 0, /* x86 VDPBF16PS zmm; Arm BFMMLA: GFLOP/s */
    PG_BENCH_PEAK_INT8,     /* x86 VPDPBUSD zmm; Arm SMMLA, else SDOT: GOP/s (1 MAC = 2 ops) */
    PG_BENCH_PEAK_F32,      /* x86 FMA zmm, else ymm; Arm FMLA q: GFLOP/s */
    PG_BENCH_READ_BW,       /* each thread sums its share of buf[0..bytes): GB/s */
    PG_BENCH_N_KINDS
} pg_bench_kind;

/* One region over the pool (per-thread results land in ops[]). */
typedef struct pg_bench_peak {
    pg_bench_kind kind;
    double ops[PG_POOL_MAX_THREADS];
    const char *buf; /* PG_BENCH_READ_BW: the buffer (pages faulted in) */
    size_t bytes;
} pg_bench_peak;

/* Whether this CPU runs the loop of `kind` (READ_BW: always). */
int pg_bench_have(pg_bench_kind kind);
/* The instruction measured, e.g. "VDPBF16PS zmm", "SMMLA", "read". */
const char *pg_bench_kind_name(pg_bench_kind kind);
/* G(FL)OP/s (peaks) or GB/s (READ_BW) of one region over the pool, wall
 * time; *per_cpu_s (optional) the same per CPU second of the region times
 * the pool size. The caller checks pg_bench_have(c->kind) first. */
double pg_bench_run_peak(pg_pool *pool, pg_bench_peak *c, double *per_cpu_s);

/* Read bandwidth in GB/s over the pool: median of `reps` (>= 1) passes in
 * which every pool thread sums its contiguous share of buf[0..bytes) (f32
 * adds, AVX-512 / SSE2 / NEON loads); buf should be well over the last-level
 * cache (e.g. 256 MiB) and touched once before. */
double pg_bench_read_bandwidth(pg_pool *pool, const void *buf, size_t bytes, int reps);

#endif
