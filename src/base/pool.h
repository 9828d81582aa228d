/* Thread pool: persistent workers pinned one per core, fork-join regions,
 * static parallel_for and an in-region barrier.
 *
 * Model (OpenMP's "parallel" without the compiler): pg_pool_run(p, fn, ctx)
 * runs fn(ctx, tid, n) once on each of the pool's n threads, tid = 0..n-1,
 * and returns when all have finished. The calling thread is worker 0; the
 * pool owns n-1 threads created once at pg_pool_create.
 *
 * Waiting policy: an idle worker spins (x86 `pause` / Arm `isb`; after the
 * first 50 us also sched_yield between checks) for the block time, then
 * sleeps on a futex (SYS_futex FUTEX_WAIT_PRIVATE) until the next region;
 * the caller's join and pg_pool_barrier wait the same way. Block time
 * comes from the options, else PAGODA_BLOCKTIME_US, else
 * PG_POOL_BLOCKTIME_DEFAULT_US (why that value: docs/PERFORMANCE.md). 0 means
 * sleep at once.
 *
 * CPUs: the options' cpu list, else PAGODA_CPUS (cpulist syntax, see
 * affinity.h), else one logical CPU per physical core of the process's
 * allowed set (sched_getaffinity + sysfs topology). Thread i is pinned to
 * cpus[i]; worker 0 (the caller) is pinned to cpus[0] the first time it
 * enters a region (this changes the caller thread's affinity, as OpenMP's
 * OMP_PROC_BIND does; threads it creates later inherit that mask). With more
 * threads than CPUs nothing is pinned and workers may run on any allowed CPU.
 *
 * Concurrency: one pool runs one region at a time. pg_pool_run from two
 * external threads at once is serialized (a mutex); pg_pool_run on the same
 * pool from inside one of its regions (nesting) runs fn inline on the calling
 * thread as a region of 1 thread (tid 0, nthreads 1), like OpenMP with nested
 * parallelism off. Memory written before pg_pool_run is visible to every
 * worker inside fn, and everything the workers wrote is visible to the
 * caller after it returns (release/acquire on the fork and join words).
 *
 * After fork(2) a child must not use a pool created by its parent. */
#ifndef PAGODA_BASE_POOL_H
#define PAGODA_BASE_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* Default spin time before sleeping, microseconds. */
#define PG_POOL_BLOCKTIME_DEFAULT_US 1000
/* Largest accepted block time, microseconds (10 s). */
#define PG_POOL_BLOCKTIME_MAX_US 10000000L
/* Largest accepted thread count. */
#define PG_POOL_MAX_THREADS 1024

typedef struct pg_pool pg_pool;

typedef struct pg_pool_options {
    int n_threads;     /* 0 = one per CPU of the cpu list (default: physical cores) */
    const char *cpus;  /* cpulist "0-3,8"; NULL = PAGODA_CPUS, else physical cores */
    long blocktime_us; /* spin time before sleeping; -1 = PAGODA_BLOCKTIME_US or default */
    int pin;           /* 1 = pin thread i to cpus[i], 0 = leave placement to the OS */
} pg_pool_options;

/* Options meaning "all defaults": {0, NULL, -1, 1}. */
pg_pool_options pg_pool_options_default(void);

/* Create a pool. opt NULL = pg_pool_options_default(). The explicit cpu list
 * is used as given (every listed logical CPU, hyperthreads included); the
 * default keeps one CPU per physical core. n_threads below the CPU count uses
 * the first n_threads CPUs; above it, threads are not pinned (a warning is
 * logged). Errors (message says which setting): PAGODA_ERR_INVALID_ARG for a
 * bad cpu list / PAGODA_CPUS / PAGODA_BLOCKTIME_US, a CPU outside the allowed
 * set, n_threads < 0 or > PG_POOL_MAX_THREADS, blocktime out of
 * [0, PG_POOL_BLOCKTIME_MAX_US]; PAGODA_ERR_NOMEM; PAGODA_ERR_INTERNAL if a
 * thread cannot be created. */
pagoda_status pg_pool_create(const pg_pool_options *opt, pg_pool **out);

/* Stop and join the workers, free the pool. NULL is a no-op. Must not be
 * called from inside a region or while another thread uses the pool. */
void pg_pool_free(pg_pool *p);

/* Number of threads (>= 1), the caller included. */
int pg_pool_size(const pg_pool *p);

/* Fork-join: run fn(ctx, tid, nthreads) on all threads (tid 0 = caller),
 * return when every call has returned. See the header comment for nesting
 * and concurrency. */
void pg_pool_run(pg_pool *p, void (*fn)(void *ctx, int tid, int nthreads), void *ctx);

/* Static contiguous partition of [0, n) among the threads, in units of
 * `grain` elements (grain 0 is taken as 1):
 *     chunks = ceil(n / grain), t = min(nthreads, chunks) active threads,
 *     q = chunks / t, r = chunks % t,
 *     thread i < t gets chunks [i*q + min(i, r), (i+1)*q + min(i+1, r)),
 *     i.e. elements [c0 * grain, min(c1 * grain, n)).
 * So every boundary is a multiple of `grain`, the first r threads get one
 * chunk more, and the split depends only on (n, grain, nthreads) — kernels
 * may rely on it being deterministic. Threads i >= t get begin == end.
 * This is the function pg_pool_parallel_for uses. */
void pg_pool_partition(size_t n, size_t grain, int nthreads, int tid, size_t *begin, size_t *end);

/* Run fn(ctx, begin, end, tid) once per thread whose range (per
 * pg_pool_partition with the pool's size) is non-empty; returns when all are
 * done. No shared counter is touched per iteration or per chunk. n == 0 does
 * nothing; when only one thread gets work (or the call is nested inside a
 * region of p), fn runs inline on the caller over the whole range with
 * tid 0, without waking the workers. Must not call pg_pool_barrier (threads without
 * work do not call fn). */
void pg_pool_parallel_for(pg_pool *p, size_t n, size_t grain,
                          void (*fn)(void *ctx, size_t begin, size_t end, int tid), void *ctx);

/* Barrier among all nthreads threads of the current pg_pool_run region:
 * returns once every thread has called it; writes before it are visible to
 * all threads after it. Every thread of the region must call it the same
 * number of times. In a nested (inline) region it returns at once. */
void pg_pool_barrier(pg_pool *p, int tid);

/* How many times a thread of this pool went to sleep on its futex so far
 * (diagnostics; tests use it to see the sleep/wake path taken). */
uint64_t pg_pool_sleep_count(const pg_pool *p);

/* How many regions this pool forked to its workers so far (pg_pool_run and
 * pg_pool_parallel_for calls that did not run inline; diagnostics: tests use
 * it to see that a small kernel call did not fork). */
uint64_t pg_pool_region_count(const pg_pool *p);

/* Work (multiply-adds) below which a kernel call runs on the calling thread
 * alone instead of forking the pool: the GEMM driver (kernels/gemm.c) and
 * paged attention (kernels/attention.c) walk every thread's share in turn on
 * the caller, so the results are bit-identical to the forked call. A
 * fork-join costs ~1-5 us on a quiet machine, but on a loaded one the join
 * waits for a descheduled peer (up to a time slice) while such a call is a
 * few microseconds of work: a small draft model's layers, a tiny model's
 * whole step (docs/PERFORMANCE.md, "Speculative decoding on synthetic
 * models"). Default PG_POOL_SERIAL_MACS_DEFAULT; env PAGODA_SERIAL_MACS
 * (read once, 0 = always fork); pg_pool_set_serial_macs overrides both
 * (tests; < 0 goes back to them). Thread-safe. */
#define PG_POOL_SERIAL_MACS_DEFAULT (1L << 19)
int64_t pg_pool_serial_macs(void);
void pg_pool_set_serial_macs(int64_t macs);

/* Block time in microseconds. */
long pg_pool_blocktime_us(const pg_pool *p);

/* CPU thread i is pinned to, or -1 if unpinned. */
int pg_pool_cpu(const pg_pool *p, int i);

/* For `pagoda env`: three lines "  pool threads ...", "  pool cpus ...",
 * "  pool blocktime ..." (2-space indent, 16-column label, like the rest of
 * the report), each saying where the value came from (default / option /
 * environment variable). */
void pg_pool_describe(const pg_pool *p, FILE *f);

/* The process-wide pool, created on first use from opt set by
 * pg_pool_default_configure, else defaults + environment. Thread-safe.
 * If the environment is invalid (e.g. a bad PAGODA_CPUS) the error is logged
 * once and a pool with default settings is created instead; call
 * pg_pool_default_configure first to get the error as a status. Never NULL
 * unless even an unpinned 1-thread pool cannot be created (out of memory). */
pg_pool *pg_pool_default(void);

/* Set the default pool's options before its first use (the CLI's
 * --threads N: opt->n_threads = N) and create it now, reporting errors.
 * opt NULL = defaults. Errors: those of pg_pool_create;
 * PAGODA_ERR_INVALID_ARG if the default pool already exists (used before
 * configuring). */
pagoda_status pg_pool_default_configure(const pg_pool_options *opt);

/* Free the default pool (tests, clean exit). A later pg_pool_default()
 * creates a new one. Not safe concurrently with use of the default pool. */
void pg_pool_default_shutdown(void);

#endif
