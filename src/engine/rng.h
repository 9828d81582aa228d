/* Per-request random numbers for sampling: Philox4x32-10, a counter-based
 * generator (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11; reference implementation: Random123).
 *
 * A request's generator is only its 64-bit key (the seed). Each draw is a
 * pure function of (key, draw index, stream): there is no state to advance,
 * no global generator, and no dependence on other requests in the batch, on
 * the thread that runs the draw, or on how many draws happened before. The
 * sampler uses the output position of the token being sampled as the draw
 * index (stream PG_RNG_STREAM_SAMPLE), so a request that is preempted and
 * recomputed redraws exactly the same numbers.
 *
 * Philox block: counter = {index lo, index hi, stream, 0}, key = {seed lo,
 * seed hi}; the 4 x 32-bit output words are the random bits of that draw. */
#ifndef PAGODA_ENGINE_RNG_H
#define PAGODA_ENGINE_RNG_H

#include <stdint.h>

/* Streams: independent sequences under one key (one per consumer). */
enum {
    PG_RNG_STREAM_SAMPLE = 0, /* pg_sampler_sample: one uniform per output token */
    PG_RNG_STREAM_SPEC = 1,   /* speculative decoding: the acceptance test of a draft token */
};

typedef struct pg_rng {
    uint64_t key; /* the effective seed (what a user passes back to reproduce) */
} pg_rng;

/* The Philox4x32-10 block function: out = philox(ctr, key), 10 rounds.
 * Matches Random123's philox4x32_10 known-answer vectors. */
void pg_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* A generator for `seed`. seed == -1 means "random": the key then comes from
 * pg_rng_random_seed(). Any other value (also negative) is used as is
 * (reinterpreted as uint64), so equal seeds give equal streams. */
pg_rng pg_rng_from_seed(int64_t seed);

/* 64 bits from the process-wide random source (getrandom(2); if that fails,
 * a splitmix64 mix of the clock, the pid and an atomic counter). Thread-safe;
 * two calls never return the same value in one process (counter mixed in). */
uint64_t pg_rng_random_seed(void);

/* Four raw 32-bit words of draw `index` in `stream`. */
void pg_rng_bits(const pg_rng *r, uint64_t index, uint32_t stream, uint32_t out[4]);

/* A uniform double in [0, 1) with 53 random bits (words 0 and 1 of the
 * block: (w0 >> 5) * 2^26 + (w1 >> 6), times 2^-53). */
double pg_rng_uniform(const pg_rng *r, uint64_t index, uint32_t stream);

#endif
