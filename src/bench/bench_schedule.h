/* Request arrival schedule for `pagoda bench serve`, and the seeded random
 * numbers the benchmark's workload is built from.
 *
 * Arrivals follow vLLM's get_request (vllm/benchmarks/serve.py): the gap
 * before each request is drawn from a gamma distribution with
 * shape = burstiness and scale = 1 / (rate * burstiness), so the mean gap is
 * 1/rate; burstiness 1 is a Poisson process, < 1 burstier, > 1 more regular.
 * The cumulative times are then rescaled so the last request is due at
 * exactly n / rate (vLLM does this to steady throughput across seeds).
 * rate = inf sends everything at t = 0; burstiness = inf gives constant gaps. */
#ifndef PAGODA_SERVER_BENCH_SCHEDULE_H
#define PAGODA_SERVER_BENCH_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* xoshiro256** (Blackman & Vigna, 2018) seeded through splitmix64. */
typedef struct pg_bench_rng {
    uint64_t s[4];
} pg_bench_rng;

void pg_bench_rng_seed(pg_bench_rng *r, uint64_t seed);
uint64_t pg_bench_rng_next(pg_bench_rng *r);
/* Uniform double in [0, 1) (53 random bits). */
double pg_bench_rng_uniform(pg_bench_rng *r);
/* Uniform integer in [lo, hi] (inclusive), lo <= hi; unbiased (rejection). */
int64_t pg_bench_rng_int(pg_bench_rng *r, int64_t lo, int64_t hi);
/* Standard normal (Box-Muller). */
double pg_bench_rng_normal(pg_bench_rng *r);
/* Gamma(shape k > 0, scale theta > 0): mean k*theta, variance k*theta^2.
 * Marsaglia & Tsang, "A simple method for generating gamma variables"
 * (ACM TOMS 2000), with the U^(1/k) boost for k < 1. */
double pg_bench_rng_gamma(pg_bench_rng *r, double shape, double scale);

/* Arrival time (s from the run's start) of each of `n` requests into
 * times[n], non-decreasing. rate > 0 (may be INFINITY), burstiness > 0 (may
 * be INFINITY). Errors: PAGODA_ERR_INVALID_ARG. */
pagoda_status pg_bench_arrivals(size_t n, double rate, double burstiness, pg_bench_rng *r,
                                double *times);

#endif
