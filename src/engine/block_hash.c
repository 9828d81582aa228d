/* XXH64 from its specification (xxHash doc/xxhash_spec.md) and the chained
 * block hash used by the prefix cache. */
#include "engine/block_hash.h"

#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pagoda targets little-endian x86-64 and aarch64"
#endif

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl64(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t read64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint32_t read32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline uint64_t xround(uint64_t acc, uint64_t input) {
    acc += input * P2;
    acc = rotl64(acc, 31);
    return acc * P1;
}

static inline uint64_t xmerge(uint64_t acc, uint64_t val) {
    acc ^= xround(0, val);
    return acc * P1 + P4;
}

static void stripe(uint64_t v[4], const uint8_t *p) {
    v[0] = xround(v[0], read64(p));
    v[1] = xround(v[1], read64(p + 8));
    v[2] = xround(v[2], read64(p + 16));
    v[3] = xround(v[3], read64(p + 24));
}

/* Tail processing + avalanche, shared by one-shot and streaming. */
static uint64_t finish(uint64_t h, const uint8_t *p, size_t len) {
    while (len >= 8) {
        h ^= xround(0, read64(p));
        h = rotl64(h, 27) * P1 + P4;
        p += 8;
        len -= 8;
    }
    if (len >= 4) {
        h ^= (uint64_t)read32(p) * P1;
        h = rotl64(h, 23) * P2 + P3;
        p += 4;
        len -= 4;
    }
    while (len > 0) {
        h ^= (uint64_t)(*p) * P5;
        h = rotl64(h, 11) * P1;
        p++;
        len--;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

static uint64_t converge(const uint64_t v[4]) {
    uint64_t h = rotl64(v[0], 1) + rotl64(v[1], 7) + rotl64(v[2], 12) + rotl64(v[3], 18);
    for (int i = 0; i < 4; i++)
        h = xmerge(h, v[i]);
    return h;
}

static void init_lanes(uint64_t v[4], uint64_t seed) {
    v[0] = seed + P1 + P2;
    v[1] = seed + P2;
    v[2] = seed;
    v[3] = seed - P1;
}

uint64_t pg_xxh64(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = data;
    size_t n = len;
    uint64_t h;
    if (n >= 32) {
        uint64_t v[4];
        init_lanes(v, seed);
        while (n >= 32) {
            stripe(v, p);
            p += 32;
            n -= 32;
        }
        h = converge(v);
    } else {
        h = seed + P5;
    }
    h += (uint64_t)len;
    return finish(h, p, n);
}

void pg_xxh64_init(pg_xxh64_state *st, uint64_t seed) {
    memset(st, 0, sizeof *st);
    st->seed = seed;
    init_lanes(st->v, seed);
}

void pg_xxh64_update(pg_xxh64_state *st, const void *data, size_t len) {
    const uint8_t *p = data;
    st->total_len += len;
    if (st->buf_len + len < 32) {
        if (len) memcpy(st->buf + st->buf_len, p, len);
        st->buf_len += (uint32_t)len;
        return;
    }
    if (st->buf_len) {
        size_t fill = 32 - st->buf_len;
        memcpy(st->buf + st->buf_len, p, fill);
        stripe(st->v, st->buf);
        p += fill;
        len -= fill;
        st->buf_len = 0;
    }
    while (len >= 32) {
        stripe(st->v, p);
        p += 32;
        len -= 32;
    }
    if (len) memcpy(st->buf, p, len);
    st->buf_len = (uint32_t)len;
}

uint64_t pg_xxh64_digest(const pg_xxh64_state *st) {
    uint64_t h = st->total_len >= 32 ? converge(st->v) : st->seed + P5;
    h += st->total_len;
    return finish(h, st->buf, st->buf_len);
}

/* Root "parent" of the first block of every sequence. */
static const pg_block_hash ROOT = {0x70616730646121ULL, 0x726f6f74626c6b31ULL};
#define HI_SEED 0x9E3779B97F4A7C15ULL

pg_block_hash pg_block_hash_compute(const pg_block_hash *parent, const int32_t *tokens,
                                    int32_t num_tokens, uint64_t extra_key) {
    if (!parent) parent = &ROOT;
    uint8_t head[24];
    memcpy(head, &parent->lo, 8);
    memcpy(head + 8, &parent->hi, 8);
    memcpy(head + 16, &extra_key, 8);
    size_t tok_bytes = num_tokens > 0 ? (size_t)num_tokens * sizeof(int32_t) : 0;
    pg_xxh64_state a, b;
    pg_xxh64_init(&a, 0);
    pg_xxh64_init(&b, HI_SEED);
    pg_xxh64_update(&a, head, sizeof head);
    pg_xxh64_update(&b, head, sizeof head);
    pg_xxh64_update(&a, tokens, tok_bytes);
    pg_xxh64_update(&b, tokens, tok_bytes);
    return (pg_block_hash){pg_xxh64_digest(&a), pg_xxh64_digest(&b)};
}
