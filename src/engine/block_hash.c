/* The chained block hash of the prefix cache: SHA-256 (nettle) by default,
 * XXH3-128 (libxxhash) on request. Byte layout: block_hash.h. */
#include "engine/block_hash.h"

#include <string.h>

#include <nettle/sha2.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pagoda targets little-endian x86-64 and aarch64: token ids are hashed in memory order"
#endif

static const pg_block_hash ROOT; /* 32 zero bytes: the first block's parent */

pg_block_hash pg_block_hash_compute(pg_block_hash_algo algo, const pg_block_hash *parent,
                                    const int32_t *tokens, int32_t num_tokens, const void *extra,
                                    size_t extra_len) {
    if (!parent) parent = &ROOT;
    uint32_t n = num_tokens > 0 ? (uint32_t)num_tokens : 0;
    uint64_t elen = extra ? (uint64_t)extra_len : 0;
    size_t tok_bytes = (size_t)n * sizeof(int32_t);
    pg_block_hash h = {{0, 0, 0, 0}};
    if (algo == PG_BLOCK_HASH_XXHASH) {
        XXH128_hash_t d;
        uint8_t buf[1024]; /* blocks of up to 243 tokens: one-shot over a copy */
        size_t total = PG_BLOCK_HASH_BYTES + sizeof n + tok_bytes + sizeof elen + (size_t)elen;
        if (total <= sizeof buf) {
            uint8_t *p = buf;
            memcpy(p, parent->w, PG_BLOCK_HASH_BYTES);
            p += PG_BLOCK_HASH_BYTES;
            memcpy(p, &n, sizeof n);
            p += sizeof n;
            if (tok_bytes) memcpy(p, tokens, tok_bytes);
            p += tok_bytes;
            memcpy(p, &elen, sizeof elen);
            p += sizeof elen;
            if (elen) memcpy(p, extra, (size_t)elen);
            d = XXH3_128bits(buf, total);
        } else {
            XXH3_state_t st;
            XXH3_128bits_reset(&st);
            XXH3_128bits_update(&st, parent->w, PG_BLOCK_HASH_BYTES);
            XXH3_128bits_update(&st, &n, sizeof n);
            if (tok_bytes) XXH3_128bits_update(&st, tokens, tok_bytes);
            XXH3_128bits_update(&st, &elen, sizeof elen);
            if (elen) XXH3_128bits_update(&st, extra, (size_t)elen);
            d = XXH3_128bits_digest(&st);
        }
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, d);
        memcpy(h.w, c.digest, sizeof c.digest);
        return h;
    }
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, PG_BLOCK_HASH_BYTES, (const uint8_t *)parent->w);
    sha256_update(&ctx, sizeof n, (const uint8_t *)&n);
    if (tok_bytes) sha256_update(&ctx, tok_bytes, (const uint8_t *)tokens);
    sha256_update(&ctx, sizeof elen, (const uint8_t *)&elen);
    if (elen) sha256_update(&ctx, (size_t)elen, extra);
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, (uint8_t *)h.w);
    return h;
}

const char *pg_block_hash_algo_name(pg_block_hash_algo algo) {
    return algo == PG_BLOCK_HASH_XXHASH ? "xxhash" : "sha256";
}

bool pg_block_hash_algo_parse(const char *name, pg_block_hash_algo *out) {
    if (!name) return false;
    if (!strcmp(name, "sha256")) {
        *out = PG_BLOCK_HASH_SHA256;
        return true;
    }
    if (!strcmp(name, "xxhash")) {
        *out = PG_BLOCK_HASH_XXHASH;
        return true;
    }
    return false;
}
