/* Prefix-cache block hashes: XXH64 (streaming) and the 128-bit chained hash
 * that names one FULL block of KV cache.
 *
 * Idea from vLLM v1 (vllm/v1/core/kv_cache_utils.py: hash_block_tokens,
 * BlockHash): a block's identity is hash(parent block's hash, the block's
 * token ids, extra keys), so equal hashes mean "same tokens at the same
 * position after the same prefix" and a lookup walks the chain from the
 * first block.
 *
 * The hash function is XXH64 (Yann Collet, https://github.com/Cyan4973/xxHash,
 * doc/xxhash_spec.md), written here from the specification. A block hash is
 * 128 bits: two XXH64 of the same byte string with two different seeds.
 *
 * Collisions: two different prefixes with equal 128-bit hashes would share
 * KV blocks and give a wrong answer silently. With n cached blocks the
 * chance of any accidental collision is about n^2 / 2^129 (n = 10^7 blocks:
 * ~1.5e-25), far below hardware error rates. XXH64 is NOT cryptographic: a
 * client who can choose prompts could search for collisions against another
 * tenant's prefix. Multi-tenant servers isolate tenants with a per-tenant
 * `cache_salt` (mixed into every block's extra key), as vLLM does; a keyed
 * hash (SipHash/SHA-256, vLLM's `--prefix-caching-hash-algo sha256`) can
 * replace pg_block_hash_compute without touching its callers. */
#ifndef PAGODA_ENGINE_BLOCK_HASH_H
#define PAGODA_ENGINE_BLOCK_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- XXH64 ---- */

typedef struct pg_xxh64_state {
    uint64_t v[4];      /* the four lane accumulators */
    uint64_t total_len; /* bytes consumed so far */
    uint64_t seed;
    uint8_t buf[32]; /* pending bytes of an incomplete 32-byte stripe */
    uint32_t buf_len;
} pg_xxh64_state;

/* One-shot XXH64 of `len` bytes at `data` (may be NULL when len == 0). */
uint64_t pg_xxh64(const void *data, size_t len, uint64_t seed);
/* Streaming: init, any number of updates, digest (state stays usable).
 * The digest equals pg_xxh64 of the concatenated input. */
void pg_xxh64_init(pg_xxh64_state *st, uint64_t seed);
void pg_xxh64_update(pg_xxh64_state *st, const void *data, size_t len);
uint64_t pg_xxh64_digest(const pg_xxh64_state *st);

/* ---- block hash ---- */

typedef struct pg_block_hash {
    uint64_t lo, hi;
} pg_block_hash;

static inline bool pg_block_hash_eq(pg_block_hash a, pg_block_hash b) {
    return a.lo == b.lo && a.hi == b.hi;
}

/* Hash of one full block of `num_tokens` token ids.
 *   parent:    hash of the previous block of the sequence, NULL for the first
 *              block (a fixed root value is used then).
 *   tokens:    int32 token ids, num_tokens of them (the block size).
 *   extra_key: 64 bits for features that change a block's KV without changing
 *              its token ids: cache salt, LoRA adapter id, multimodal input
 *              hash (0 = none).
 * The hashed byte string is: parent.lo, parent.hi, extra_key (little-endian
 * u64 each), then the token ids as little-endian int32. lo uses XXH64 seed 0,
 * hi seed 0x9E3779B97F4A7C15. Deterministic across runs and machines. */
pg_block_hash pg_block_hash_compute(const pg_block_hash *parent, const int32_t *tokens,
                                    int32_t num_tokens, uint64_t extra_key);

#endif
