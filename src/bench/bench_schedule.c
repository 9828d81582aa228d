/* Arrival schedule and seeded random numbers: see bench_schedule.h. */
#include "bench/bench_schedule.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void pg_bench_rng_seed(pg_bench_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

uint64_t pg_bench_rng_next(pg_bench_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double pg_bench_rng_uniform(pg_bench_rng *r) {
    return (double)(pg_bench_rng_next(r) >> 11) * 0x1.0p-53;
}

int64_t pg_bench_rng_int(pg_bench_rng *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1; /* 0 means the full 2^64 range */
    if (span == 0) return (int64_t)pg_bench_rng_next(r);
    uint64_t limit = UINT64_MAX - UINT64_MAX % span; /* reject the biased tail */
    uint64_t x;
    do
        x = pg_bench_rng_next(r);
    while (x >= limit);
    return (int64_t)((uint64_t)lo + x % span);
}

double pg_bench_rng_normal(pg_bench_rng *r) {
    double u1 = 1.0 - pg_bench_rng_uniform(r); /* (0, 1]: log is finite */
    double u2 = pg_bench_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

double pg_bench_rng_gamma(pg_bench_rng *r, double shape, double scale) {
    if (shape < 1.0) {
        /* Gamma(k) = Gamma(k + 1) * U^(1/k) */
        double u = 1.0 - pg_bench_rng_uniform(r);
        return pg_bench_rng_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = pg_bench_rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = pg_bench_rng_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v * scale;
    }
}

pagoda_status pg_bench_arrivals(size_t n, double rate, double burstiness, pg_bench_rng *r,
                                double *times) {
    if (!(rate > 0.0))
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: request rate %g must be > 0", rate);
    if (!(burstiness > 0.0))
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench: burstiness %g must be > 0", burstiness);
    if (n == 0) return PAGODA_OK;
    if (isinf(rate)) {
        for (size_t i = 0; i < n; i++)
            times[i] = 0.0;
        return PAGODA_OK;
    }
    double t = 0.0;
    for (size_t i = 0; i < n; i++) {
        double gap = isinf(burstiness)
                         ? 1.0 / rate
                         : pg_bench_rng_gamma(r, burstiness, 1.0 / (rate * burstiness));
        t += gap;
        times[i] = t;
    }
    if (t > 0.0) {
        double f = ((double)n / rate) / t;
        for (size_t i = 0; i < n; i++)
            times[i] *= f;
        times[n - 1] = (double)n / rate;
    }
    return PAGODA_OK;
}
