/* Prefix-cache block hashing cost (engine/block_hash.h): nanoseconds per
 * block and microseconds per 50k-token prompt (the whole chain of its full
 * blocks, what pg_request_hash_blocks computes per request), SHA-256 (the
 * default, nettle) against XXH3-128 (--prefix-caching-hash-algo xxhash,
 * libxxhash) measured in the same run, and the ratio. Block sizes 16
 * (pagoda's default) and 128 (vLLM's CPU default).
 *
 *   build/bench_block_hash [prompt_tokens (50000)] [reps (21)]
 *
 * Single thread; each figure is the median of reps runs over the chain.
 * NETTLE_FAT_VERBOSE=1 makes nettle print the SHA-256 code it picked. */
#include <stdio.h>
#include <stdlib.h>

#include "bench/harness.h"
#include "engine/block_hash.h"

static volatile uint64_t g_sink;

/* Seconds to hash the chain of n_tokens / bs full blocks once (median). */
static double chain_seconds(pg_block_hash_algo algo, const int32_t *tok, int32_t n_tokens,
                            int32_t bs, int reps) {
    double *t = malloc((size_t)reps * sizeof *t);
    if (!t) exit(1);
    int32_t nb = n_tokens / bs;
    for (int r = 0; r < reps; r++) {
        double t0 = pg_bench_now();
        pg_block_hash h = pg_block_hash_compute(algo, NULL, tok, bs, "salt", 4);
        for (int32_t b = 1; b < nb; b++)
            h = pg_block_hash_compute(algo, &h, tok + (size_t)b * bs, bs, NULL, 0);
        t[r] = pg_bench_now() - t0;
        g_sink += h.w[0];
    }
    double m = pg_bench_median(t, reps);
    free(t);
    return m;
}

int main(int argc, char **argv) {
    int32_t n_tokens = argc > 1 ? atoi(argv[1]) : 50000;
    int reps = argc > 2 ? atoi(argv[2]) : 21;
    if (n_tokens < 128 || reps < 1) {
        fprintf(stderr, "usage: bench_block_hash [prompt_tokens >= 128] [reps >= 1]\n");
        return 2;
    }
    int32_t *tok = malloc((size_t)n_tokens * sizeof *tok);
    if (!tok) return 1;
    uint32_t x = 12345;
    for (int32_t i = 0; i < n_tokens; i++) {
        x = x * 1664525u + 1013904223u;
        tok[i] = (int32_t)(x >> 15) % 151936; /* a Qwen-sized vocab */
    }
    printf("prefix-cache block hash, %d-token prompt, median of %d (single thread)\n", n_tokens,
           reps);
    printf("%-6s %-8s %12s %14s %12s\n", "block", "algo", "ns/block", "us/prompt", "MB/s");
    const int32_t sizes[2] = {16, 128};
    for (int s = 0; s < 2; s++) {
        int32_t bs = sizes[s], nb = n_tokens / bs;
        double sec[2];
        for (int a = 0; a < 2; a++) {
            pg_block_hash_algo algo = a ? PG_BLOCK_HASH_XXHASH : PG_BLOCK_HASH_SHA256;
            chain_seconds(algo, tok, n_tokens, bs, 2); /* warm */
            sec[a] = chain_seconds(algo, tok, n_tokens, bs, reps);
            double bytes = (double)nb * (32 + 4 + 4.0 * bs + 8);
            printf("%-6d %-8s %12.1f %14.1f %12.0f\n", bs, pg_block_hash_algo_name(algo),
                   sec[a] / nb * 1e9, sec[a] * 1e6, bytes / sec[a] / 1e6);
        }
        printf("%-6d sha256 / xxhash = %.2fx\n", bs, sec[0] / sec[1]);
    }
    free(tok);
    return g_sink == 42 ? 3 : 0;
}
