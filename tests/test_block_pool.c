/* KV block pool, block hashes (SHA-256 / XXH3-128 known answers) and KV
 * sizing helpers. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include <stdio.h>
#include <xxhash.h>

#include "engine/block_hash.h"
#include "engine/block_pool.h"
#include "engine/kv_cache_spec.h"

/* ---- block hashes ---- */

/* libxxhash (the xxhash algorithm's implementation) against the xxHash
 * project's reference values: proves the library pagoda links is the one
 * the known answers below were computed with. */
static void test_xxhash_library_reference_vectors(void **state) {
    (void)state;
    assert_true(XXH64("", 0, 0) == 0xEF46DB3751D8E999ULL);
    assert_true(XXH64("a", 1, 0) == 0xD24EC4F1A98C6E5BULL);
    assert_true(XXH64("abc", 3, 5381) == 0x19D1C1B5C673451FULL);
    const char *fox = "The quick brown fox jumps over the lazy dog";
    assert_true(XXH64(fox, strlen(fox), 0) == 0x0B242D361FDA71BCULL);
    XXH128_hash_t e = XXH3_128bits("", 0); /* `printf '' | xxhsum -H2 -` */
    assert_true(e.high64 == 0x99AA06D3014798D8ULL && e.low64 == 0x6001C324468D497FULL);
}

static void hex_of(pg_block_hash h, char out[2 * PG_BLOCK_HASH_BYTES + 1]) {
    const uint8_t *b = (const uint8_t *)h.w;
    for (int i = 0; i < PG_BLOCK_HASH_BYTES; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* Known answers computed outside pagoda (python3 hashlib, xxhsum -H2) by
 * tests/data/block_hash_kat.py: the byte layout of block_hash.h, SHA-256
 * (nettle) and XXH3-128 (libxxhash), chaining and the salt of block 0. */
static void test_block_hash_known_answers(void **state) {
    (void)state;
    static const char *const want[2][7] = {
        {
            /* SHA256: first block, 4 tokens */
            "fec8109a3922c417a33c765303b0c13bfe037a7b6ed61db4a15c9f5e09557497",
            /* SHA256: its child */
            "debfc5f7e88c759bbf8e50f76451e02632b84b5db2ca36aa413f8f68296e7433",
            /* SHA256: first block, salt "tenant-a" */
            "04c88d3ad3f48935473132e5d713a59ae0a745c686441f883ea7bd9274eb320d",
            /* SHA256: child of the salted block */
            "56d7889152ca557052fe16130310161c107d44b52b9bd874660bbc78c36a0529",
            /* SHA256: 16 tokens incl. large ids */
            "10e644a576f99f80891bb8646e4fa7c9ed5979ecd7681c8aff5d270ba1fe2214",
            /* SHA256: no tokens, salt of 40 bytes */
            "e1ee34ee4a8218530836ead26e04caeb87bbda780c38fd6b10c57b6a8530998b",
            /* SHA256: 300 tokens (i * 7919 % 151936) after case 1 */
            "f266fc71462296caba9c01a9169471e478c0b0469550e105a999e17b91d00b6a",
        },
        {
            /* XXHASH: first block, 4 tokens */
            "34bb38d65cce9e417fd0177fffc10c0100000000000000000000000000000000",
            /* XXHASH: its child */
            "6275014a08378b7c52b3a490653bf99a00000000000000000000000000000000",
            /* XXHASH: first block, salt "tenant-a" */
            "095717105c95a1ed3ee1cfd2cd035cda00000000000000000000000000000000",
            /* XXHASH: child of the salted block */
            "aab43304ea2b92f0acc07e1cc940f5a100000000000000000000000000000000",
            /* XXHASH: 16 tokens incl. large ids */
            "2936772c95ce89d836ea045ada39ee0200000000000000000000000000000000",
            /* XXHASH: no tokens, salt of 40 bytes */
            "56331bbaa0bd25fb3ae08a464984e07800000000000000000000000000000000",
            /* XXHASH: 300 tokens (i * 7919 % 151936) after case 1 */
            "156abfedd1f2f3a19dc51760958988d100000000000000000000000000000000",
        },
    };
    const int32_t t4[4] = {1, 2, 3, 4}, t4b[4] = {5, 6, 7, 8};
    const int32_t t16[16] = {0,    1,    255,  256,  65535, 65536, 151643, 2147483647,
                             1000, 1001, 1002, 1003, 1004,  1005,  1006,   1007};
    const char *salt40 = "0123456789abcdefghijklmnopqrstuvwxyzABCD";
    int32_t t300[300]; /* longer than XXH3's one-shot copy: the streaming path */
    for (int i = 0; i < 300; i++)
        t300[i] = i * 7919 % 151936;
    const pg_block_hash_algo algos[2] = {PG_BLOCK_HASH_SHA256, PG_BLOCK_HASH_XXHASH};
    for (int a = 0; a < 2; a++) {
        pg_block_hash h[7];
        h[0] = pg_block_hash_compute(algos[a], NULL, t4, 4, NULL, 0);
        h[1] = pg_block_hash_compute(algos[a], &h[0], t4b, 4, NULL, 0);
        h[2] = pg_block_hash_compute(algos[a], NULL, t4, 4, "tenant-a", 8);
        h[3] = pg_block_hash_compute(algos[a], &h[2], t4b, 4, NULL, 0);
        h[4] = pg_block_hash_compute(algos[a], NULL, t16, 16, NULL, 0);
        h[5] = pg_block_hash_compute(algos[a], NULL, NULL, 0, salt40, 40);
        h[6] = pg_block_hash_compute(algos[a], &h[1], t300, 300, NULL, 0);
        for (int i = 0; i < 7; i++) {
            char hex[2 * PG_BLOCK_HASH_BYTES + 1];
            hex_of(h[i], hex);
            if (strcmp(hex, want[a][i]))
                fail_msg("%s case %d: got %s, want %s", pg_block_hash_algo_name(algos[a]), i, hex,
                         want[a][i]);
        }
    }
}

static void test_block_hash_chain(void **state) {
    (void)state;
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
    for (int alg = 0; alg < 2; alg++) {
        pg_block_hash_algo x = alg ? PG_BLOCK_HASH_XXHASH : PG_BLOCK_HASH_SHA256;
        pg_block_hash h0 = pg_block_hash_compute(x, NULL, a, 4, NULL, 0);
        assert_true(pg_block_hash_eq(h0, pg_block_hash_compute(x, NULL, a, 4, NULL, 0)));
        assert_false(pg_block_hash_eq(h0, pg_block_hash_compute(x, NULL, b, 4, NULL, 0)));
        assert_false(pg_block_hash_eq(h0, pg_block_hash_compute(x, NULL, a, 4, "s", 1))); /* salt */
        assert_false(pg_block_hash_eq(pg_block_hash_compute(x, NULL, a, 4, "s1", 2),
                                      pg_block_hash_compute(x, NULL, a, 4, "s2", 2)));
        /* lengths are part of the string: 3 tokens + a 4-byte salt that spells
         * the fourth token is another block than 4 tokens */
        int32_t four = 4;
        assert_false(pg_block_hash_eq(h0, pg_block_hash_compute(x, NULL, a, 3, &four, 4)));
        /* same tokens after a different parent: a different block */
        pg_block_hash p1 = pg_block_hash_compute(x, NULL, b, 4, NULL, 0);
        pg_block_hash c0 = pg_block_hash_compute(x, &h0, a, 4, NULL, 0);
        pg_block_hash c1 = pg_block_hash_compute(x, &p1, a, 4, NULL, 0);
        assert_false(pg_block_hash_eq(c0, c1));
        assert_false(pg_block_hash_eq(c0, h0));
        /* the algorithms differ */
        if (alg)
            assert_false(pg_block_hash_eq(
                h0, pg_block_hash_compute(PG_BLOCK_HASH_SHA256, NULL, a, 4, NULL, 0)));
    }
    pg_block_hash_algo g;
    assert_true(pg_block_hash_algo_parse("sha256", &g) && g == PG_BLOCK_HASH_SHA256);
    assert_true(pg_block_hash_algo_parse("xxhash", &g) && g == PG_BLOCK_HASH_XXHASH);
    assert_false(pg_block_hash_algo_parse("sha256_cbor", &g));
    assert_false(pg_block_hash_algo_parse("XXH64", &g));
}

/* ---- block pool ---- */

static pg_block_pool *make_pool(int32_t n, bool caching) {
    pg_block_pool *p = NULL;
    assert_int_equal(pg_block_pool_create(n, caching, &p), PAGODA_OK);
    assert_int_equal(pg_block_pool_check(p), PAGODA_OK);
    return p;
}

static pg_block_hash hash_of(int v) {
    int32_t t[2] = {v, v * 7 + 1};
    return pg_block_hash_compute(PG_BLOCK_HASH_SHA256, NULL, t, 2, NULL, 0);
}

static void test_pool_create_errors(void **state) {
    (void)state;
    pg_block_pool *p = (pg_block_pool *)1;
    assert_int_equal(pg_block_pool_create(1, true, &p), PAGODA_ERR_INVALID_ARG);
    assert_null(p);
    assert_non_null(strstr(pg_last_error(), "null block"));
}

static void test_pool_alloc_free_and_null_block(void **state) {
    (void)state;
    pg_block_pool *p = make_pool(6, true);
    assert_int_equal(pg_block_pool_num_free(p), 5);
    int32_t ids[5];
    assert_int_equal(pg_block_pool_alloc(p, 3, ids), PAGODA_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(ids[i], i + 1); /* from the head, never the null block */
        assert_int_equal(pg_block_pool_ref_cnt(p, ids[i]), 1);
    }
    assert_int_equal(pg_block_pool_num_free(p), 2);
    assert_int_equal(pg_block_pool_alloc(p, 3, ids + 3), PAGODA_ERR_LIMIT);
    assert_int_equal(pg_block_pool_num_free(p), 2); /* nothing taken */
    assert_int_equal(pg_block_pool_check(p), PAGODA_OK);
    pg_block_pool_touch(p, ids, 1); /* shared */
    assert_int_equal(pg_block_pool_ref_cnt(p, ids[0]), 2);
    pg_block_pool_free(p, ids, 3);
    assert_int_equal(pg_block_pool_ref_cnt(p, ids[0]), 1);
    assert_int_equal(pg_block_pool_num_free(p), 4);
    pg_block_pool_free(p, ids, 1);
    assert_int_equal(pg_block_pool_num_free(p), 5);
    int32_t null_id = PG_NULL_BLOCK;
    pg_block_pool_free(p, &null_id, 1); /* ignored */
    assert_int_equal(pg_block_pool_check(p), PAGODA_OK);
    assert_true(pg_block_pool_usage(p) == 0.0);
    pg_block_pool_destroy(p);
}

static void test_pool_lru_order_and_lazy_eviction(void **state) {
    (void)state;
    pg_block_pool *p = make_pool(5, true);
    int32_t ids[4];
    assert_int_equal(pg_block_pool_alloc(p, 4, ids), PAGODA_OK); /* 1 2 3 4 */
    for (int i = 0; i < 4; i++)
        assert_true(pg_block_pool_cache_block(p, ids[i], hash_of(i), 0));
    assert_int_equal(pg_block_pool_num_cached(p), 4);
    /* free as a request would: last block first */
    int32_t rev[4] = {ids[3], ids[2], ids[1], ids[0]};
    pg_block_pool_free(p, rev, 4);
    int32_t q[8];
    assert_int_equal(pg_block_pool_free_queue(p, q, 8), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(q[i], rev[i]); /* tail of the sequence first */
    /* still cached while free */
    for (int i = 0; i < 4; i++)
        assert_int_equal(pg_block_pool_lookup(p, hash_of(i), 0), ids[i]);
    assert_int_equal(pg_block_pool_lookup(p, hash_of(0), 1), -1); /* other group */
    /* a hit takes block 2 back out of the queue, keeping its hash */
    int32_t hit = pg_block_pool_lookup(p, hash_of(1), 0);
    pg_block_pool_touch(p, &hit, 1);
    assert_int_equal(pg_block_pool_num_free(p), 3);
    assert_true(pg_block_pool_is_cached(p, hit));
    /* allocating one evicts exactly the LRU head (block 4, hash 3) */
    int32_t one;
    assert_int_equal(pg_block_pool_alloc(p, 1, &one), PAGODA_OK);
    assert_int_equal(one, ids[3]);
    assert_int_equal(pg_block_pool_num_evictions(p), 1);
    assert_int_equal(pg_block_pool_lookup(p, hash_of(3), 0), -1);
    assert_int_equal(pg_block_pool_lookup(p, hash_of(2), 0), ids[2]);
    assert_int_equal(pg_block_pool_num_cached(p), 3);
    assert_int_equal(pg_block_pool_check(p), PAGODA_OK);
    /* a duplicate hash is not registered twice */
    assert_false(pg_block_pool_cache_block(p, one, hash_of(1), 0));
    assert_false(pg_block_pool_is_cached(p, one));
    /* reset refused while blocks are in use */
    assert_int_equal(pg_block_pool_reset_cache(p), PAGODA_ERR_INVALID_ARG);
    pg_block_pool_free(p, &one, 1);
    pg_block_pool_free(p, &hit, 1);
    assert_int_equal(pg_block_pool_reset_cache(p), PAGODA_OK);
    assert_int_equal(pg_block_pool_num_cached(p), 0);
    assert_int_equal(pg_block_pool_lookup(p, hash_of(0), 0), -1);
    assert_int_equal(pg_block_pool_check(p), PAGODA_OK);
    pg_block_pool_destroy(p);
}

/* A freed block without a hash is reused before any cached block is evicted. */
static void test_pool_uncached_blocks_are_reused_first(void **state) {
    (void)state;
    pg_block_pool *p = make_pool(4, true);
    int32_t ids[3];
    assert_int_equal(pg_block_pool_alloc(p, 3, ids), PAGODA_OK);
    assert_true(pg_block_pool_cache_block(p, ids[0], hash_of(0), 0));
    assert_true(pg_block_pool_cache_block(p, ids[1], hash_of(1), 0));
    int32_t rev[3] = {ids[2], ids[1], ids[0]}; /* ids[2]: a partial last block */
    pg_block_pool_free(p, rev, 3);
    int32_t q[3];
    assert_int_equal(pg_block_pool_free_queue(p, q, 3), 3);
    assert_int_equal(q[0], ids[2]);
    assert_int_equal(q[1], ids[1]);
    assert_int_equal(q[2], ids[0]);
    int32_t one;
    assert_int_equal(pg_block_pool_alloc(p, 1, &one), PAGODA_OK);
    assert_int_equal(one, ids[2]);
    assert_true(pg_block_pool_num_evictions(p) == 0);
    assert_int_equal(pg_block_pool_num_cached(p), 2);
    assert_int_equal(pg_block_pool_check(p), PAGODA_OK);
    pg_block_pool_free(p, &one, 1);
    pg_block_pool_destroy(p);
}

static void test_pool_caching_disabled(void **state) {
    (void)state;
    pg_block_pool *p = make_pool(4, false);
    int32_t id;
    assert_int_equal(pg_block_pool_alloc(p, 1, &id), PAGODA_OK);
    assert_false(pg_block_pool_cache_block(p, id, hash_of(1), 0));
    assert_int_equal(pg_block_pool_lookup(p, hash_of(1), 0), -1);
    pg_block_pool_free(p, &id, 1);
    pg_block_pool_destroy(p);
}

/* Random alloc/free/cache/touch against a shadow model: ref counts, cached
 * hashes, map probing with deletions (backward shift) all stay consistent. */
static void test_pool_random_ops(void **state) {
    (void)state;
    enum { N = 200 };
    pg_block_pool *p = make_pool(N, true);
    int32_t held[4 * N];
    int nheld = 0;
    int32_t owner_hash[N]; /* shadow: hash value each cached block holds, -1 none */
    for (int i = 0; i < N; i++)
        owner_hash[i] = -1;
    srand(1234);
    int next_hash = 0;
    for (int it = 0; it < 20000; it++) {
        int op = rand() % 4;
        if (op == 0) {
            int32_t n = rand() % 5, ids[5];
            if (pg_block_pool_alloc(p, n, ids) == PAGODA_OK) {
                for (int k = 0; k < n; k++) {
                    owner_hash[ids[k]] = -1; /* evicted if it was cached */
                    held[nheld++] = ids[k];
                }
            } else {
                assert_true(n > pg_block_pool_num_free(p));
            }
        } else if (op == 1 && nheld > 0) {
            int k = rand() % nheld;
            pg_block_pool_free(p, &held[k], 1);
            held[k] = held[--nheld];
        } else if (op == 2 && nheld > 0) {
            int32_t id = held[rand() % nheld];
            int hv = next_hash++ % 500; /* repeats produce duplicates */
            bool dup = false;
            for (int b = 1; b < N; b++)
                dup |= owner_hash[b] == hv;
            bool ok = pg_block_pool_cache_block(p, id, hash_of(hv), 0);
            assert_int_equal(ok, owner_hash[id] < 0 && !dup);
            if (ok) owner_hash[id] = hv;
        } else if (op == 3) {
            int hv = rand() % 500;
            int32_t id = pg_block_pool_lookup(p, hash_of(hv), 0);
            int32_t want = -1;
            for (int b = 1; b < N; b++)
                if (owner_hash[b] == hv) want = b;
            assert_int_equal(id, want);
            if (id > 0 && nheld < 4 * N) {
                pg_block_pool_touch(p, &id, 1);
                held[nheld++] = id;
            }
        }
        if (it % 500 == 0) assert_int_equal(pg_block_pool_check(p), PAGODA_OK);
    }
    pg_block_pool_free(p, held, nheld);
    assert_int_equal(pg_block_pool_num_free(p), N - 1);
    for (int b = 1; b < N; b++)
        assert_int_equal(pg_block_pool_ref_cnt(p, b), 0);
    assert_int_equal(pg_block_pool_check(p), PAGODA_OK);
    pg_block_pool_destroy(p);
}

/* ---- sizes and block counts ---- */

static void test_parse_size(void **state) {
    (void)state;
    uint64_t b = 0;
    assert_int_equal(pg_parse_size("4GiB", &b), PAGODA_OK);
    assert_true(b == 4ULL << 30);
    assert_int_equal(pg_parse_size("512MiB", &b), PAGODA_OK);
    assert_true(b == 512ULL << 20);
    assert_int_equal(pg_parse_size("1.5G", &b), PAGODA_OK);
    assert_true(b == 3ULL << 29);
    assert_int_equal(pg_parse_size("2 GB", &b), PAGODA_OK);
    assert_true(b == 2000000000ULL);
    assert_int_equal(pg_parse_size("100000", &b), PAGODA_OK);
    assert_true(b == 100000);
    assert_int_equal(pg_parse_size("64k", &b), PAGODA_OK);
    assert_true(b == 65536);
    assert_int_equal(pg_parse_size("0.5kib", &b), PAGODA_OK);
    assert_true(b == 512);
    assert_int_equal(pg_parse_size("1TB", &b), PAGODA_OK);
    assert_true(b == 1000000000000ULL);

    const struct {
        const char *text, *why;
    } bad[] = {
        {"", "expected a number"},     {"GiB", "expected a number"},
        {"-1G", "negative"},           {"4 XB", "unknown unit 'XB'"},
        {"4GiB extra", "unexpected"},  {"1.5.2G", "unexpected"},
        {"99999999999T", "too large"}, {"99999999999999999999999", "too large"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(pg_parse_size(bad[i].text, &b), PAGODA_ERR_INVALID_ARG);
        if (!strstr(pg_last_error(), bad[i].why))
            fail_msg("'%s': %s", bad[i].text, pg_last_error());
    }
    assert_int_equal(pg_parse_size(NULL, &b), PAGODA_ERR_INVALID_ARG);
}

static void test_num_blocks(void **state) {
    (void)state;
    /* 2 layers x 4 kv heads x 64 dims x 2 (K,V) x 2 bytes = 2048 bytes per token */
    int32_t n = 0;
    assert_int_equal(pg_kv_num_blocks(1ULL << 20, 16, 2048, &n), PAGODA_OK);
    assert_int_equal(n, (1 << 20) / (16 * 2048));
    assert_int_equal(pg_kv_num_blocks(16 * 2048, 16, 2048, &n), PAGODA_ERR_LIMIT);
    assert_non_null(strstr(pg_last_error(), "need at least 2"));
    assert_int_equal(pg_kv_num_blocks(1 << 20, 0, 2048, &n), PAGODA_ERR_INVALID_ARG);

    pg_kv_cache_spec g[2] = {
        {.kind = PG_KV_FULL_ATTENTION,
         .block_size = 16,
         .num_layers = 12,
         .num_kv_heads = 4,
         .head_size = 64,
         .dtype_bytes = 2},
        {.kind = PG_KV_SLIDING_WINDOW,
         .block_size = 16,
         .num_layers = 12,
         .num_kv_heads = 4,
         .head_size = 64,
         .dtype_bytes = 2,
         .u.sliding.window = 128},
    };
    assert_true(pg_kv_cache_spec_page_bytes(&g[0]) == 2ULL * 16 * 4 * 64 * 2);
    uint64_t mem = 64ULL << 20;
    assert_int_equal(pg_kv_num_blocks_for_groups(mem, g, 2, &n), PAGODA_OK);
    assert_int_equal(n, (int32_t)(mem / (pg_kv_cache_spec_page_bytes(&g[0]) * 12)));
    /* one full-attention group of 12 layers agrees with the per-token formula */
    int32_t n1 = 0, n2 = 0;
    assert_int_equal(pg_kv_num_blocks_for_groups(mem, g, 1, &n1), PAGODA_OK);
    assert_int_equal(pg_kv_num_blocks(mem, 16, 2ULL * 12 * 4 * 64 * 2, &n2), PAGODA_OK);
    assert_int_equal(n1, n2);
    g[1].head_size = 128;
    assert_int_equal(pg_kv_num_blocks_for_groups(mem, g, 2, &n), PAGODA_ERR_UNSUPPORTED);
    g[1].head_size = 64;
    g[1].u.sliding.window = 0;
    assert_int_equal(pg_kv_num_blocks_for_groups(mem, g, 2, &n), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "window"));

    assert_true(pg_kv_default_memory_bytes(0) == PG_KV_DEFAULT_MEMORY_BYTES);
    assert_true(pg_kv_default_memory_bytes(64ULL << 30) == 4ULL << 30);
    assert_true(pg_kv_default_memory_bytes(2ULL << 30) == 1ULL << 30);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xxhash_library_reference_vectors),
        cmocka_unit_test(test_block_hash_known_answers),
        cmocka_unit_test(test_block_hash_chain),
        cmocka_unit_test(test_pool_create_errors),
        cmocka_unit_test(test_pool_alloc_free_and_null_block),
        cmocka_unit_test(test_pool_lru_order_and_lazy_eviction),
        cmocka_unit_test(test_pool_uncached_blocks_are_reused_first),
        cmocka_unit_test(test_pool_caching_disabled),
        cmocka_unit_test(test_pool_random_ops),
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_num_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
