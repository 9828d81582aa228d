#include "engine/rng.h"

#include <stdatomic.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Philox4x32 constants (Salmon et al. 2011, section 4.3): round multipliers
 * and the Weyl key increments (golden ratio, sqrt(3) - 1). */
#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t n0 = hi1 ^ c[1] ^ k[0];
    uint32_t n2 = hi0 ^ c[3] ^ k[1];
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
}

void pg_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

/* splitmix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom
 * number generators", OOPSLA'14): a bijective 64-bit mix. */
static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t pg_rng_random_seed(void) {
    static atomic_uint_fast64_t calls;
    uint64_t n = atomic_fetch_add(&calls, 1);
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = splitmix64((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^
            splitmix64((uint64_t)getpid() << 32);
    }
    /* Mixing the call counter in keeps two calls distinct even if the
     * source repeated itself; it is a bijection of n for fixed v. */
    return splitmix64(v ^ splitmix64(n));
}

pg_rng pg_rng_from_seed(int64_t seed) {
    pg_rng r;
    r.key = seed == -1 ? pg_rng_random_seed() : (uint64_t)seed;
    return r;
}

void pg_rng_bits(const pg_rng *r, uint64_t index, uint32_t stream, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)index, (uint32_t)(index >> 32), stream, 0};
    const uint32_t key[2] = {(uint32_t)r->key, (uint32_t)(r->key >> 32)};
    pg_philox4x32_10(ctr, key, out);
}

double pg_rng_uniform(const pg_rng *r, uint64_t index, uint32_t stream) {
    uint32_t w[4];
    pg_rng_bits(r, index, stream, w);
    uint64_t bits = ((uint64_t)(w[0] >> 5) << 26) | (uint64_t)(w[1] >> 6);
    return (double)bits * 0x1.0p-53;
}
