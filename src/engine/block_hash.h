/* Prefix-cache block hashes: the 256-bit chained hash that names one FULL
 * block of KV cache.
 *
 * Idea from vLLM v1 (vllm/v1/core/kv_cache_utils.py: hash_block_tokens,
 * BlockHash; vllm/utils/hashing.py): a block's identity is
 * hash(parent block's hash, the block's token ids, extra keys), so equal
 * hashes mean "same tokens at the same position after the same prefix (and
 * the same cache salt)" and a lookup walks the chain from the first block.
 *
 * Algorithms (vLLM's `--prefix-caching-hash-algo`, same spellings):
 *   sha256  (default) SHA-256 (FIPS 180-4) from nettle (Debian nettle-dev;
 *           its "fat" build picks the x86 SHA-NI / Armv8 SHA-2 instructions
 *           at run time). Collision resistant: finding two prefixes with one
 *           hash costs ~2^128 work, so a client who chooses prompts cannot
 *           make its blocks alias another tenant's (vLLM advisory
 *           GHSA-rm76-4mrf-v9r8: cache poisoning / reading another tenant's
 *           context through a colliding non-cryptographic block hash).
 *   xxhash  XXH3-128 from libxxhash (Debian libxxhash-dev). About an order
 *           of magnitude cheaper, NOT collision resistant against a chosen
 *           prompt (collisions of xxhash are found in practical time, even
 *           seeded): only for single-tenant deployments, and the engine logs
 *           a warning when it is selected. Accidental collisions: ~n^2/2^129
 *           for n cached blocks.
 * Costs per block and per 50k-token prompt: docs/PERFORMANCE.md
 * ("Prefix-cache block hashing", `build/bench_block_hash`).
 *
 * The hashed byte string of one block (both algorithms; every field has a
 * fixed size or a length in front, so distinct inputs give distinct strings):
 *   parent      32 bytes: the previous block's hash, or 32 zero bytes for
 *               the first block of a sequence
 *   num_tokens  u32 little-endian
 *   tokens      num_tokens x int32 little-endian
 *   extra_len   u64 little-endian
 *   extra       extra_len bytes: the block's extra keys (the request's cache
 *               salt on block 0, as vLLM's generate_block_hash_extra_keys
 *               puts cache_salt only into the first block; the chain carries
 *               it to every later block). Empty otherwise.
 * The value is deterministic across runs and machines (tests/test_block_pool.c
 * checks known answers computed with python3 hashlib and xxhsum,
 * tests/data/block_hash_kat.py). vLLM's bytes differ (it pickles or
 * CBOR-encodes a Python tuple); only the structure is the same. */
#ifndef PAGODA_ENGINE_BLOCK_HASH_H
#define PAGODA_ENGINE_BLOCK_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum pg_block_hash_algo {
    PG_BLOCK_HASH_SHA256 = 0, /* default */
    PG_BLOCK_HASH_XXHASH = 1, /* XXH3-128: fast, not collision resistant */
} pg_block_hash_algo;

/* 256 bits: the SHA-256 digest bytes in order (w viewed as 32 bytes). For
 * xxhash the first 16 bytes are XXH3-128's canonical (big-endian) form, as
 * `xxhsum -H2` prints it, and the rest are zero. */
typedef struct pg_block_hash {
    uint64_t w[4];
} pg_block_hash;

#define PG_BLOCK_HASH_BYTES 32

static inline bool pg_block_hash_eq(pg_block_hash a, pg_block_hash b) {
    return a.w[0] == b.w[0] && a.w[1] == b.w[1] && a.w[2] == b.w[2] && a.w[3] == b.w[3];
}

/* Hash of one full block.
 *   algo:      PG_BLOCK_HASH_SHA256 or PG_BLOCK_HASH_XXHASH.
 *   parent:    hash of the previous block of the sequence, NULL for the
 *              first block (32 zero bytes are hashed then).
 *   tokens:    int32 token ids, num_tokens (>= 0) of them (the block size).
 *   extra:     extra_len bytes of extra keys (may be NULL when extra_len is 0).
 * Returns the hash of the byte string described at the top of this file.
 * Never fails; an unknown algo is treated as sha256. */
pg_block_hash pg_block_hash_compute(pg_block_hash_algo algo, const pg_block_hash *parent,
                                    const int32_t *tokens, int32_t num_tokens, const void *extra,
                                    size_t extra_len);

/* "sha256" / "xxhash" (vLLM's option values). */
const char *pg_block_hash_algo_name(pg_block_hash_algo algo);
/* Parse vLLM's spelling ("sha256", "xxhash"); false for anything else
 * (vLLM's "sha256_cbor" / "xxhash_cbor" serialize differently and are not
 * offered). */
bool pg_block_hash_algo_parse(const char *name, pg_block_hash_algo *out);

#endif
