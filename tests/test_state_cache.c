/* The recurrent-state snapshot cache (engine/state_cache.h): acquire /
 * publish / lookup, duplicate keys, pins against eviction, LRU order,
 * dropping superseded snapshots, reset, and a random workload against a
 * simple model of the cache (tombstone rebuilds included). */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "engine/state_cache.h"

static pg_block_hash H(uint64_t k) {
    return (pg_block_hash){{k * 0x9E3779B97F4A7C15ull + 1, k, 0, 0}};
}

static void test_publish_lookup_evict(void **state) {
    (void)state;
    pg_state_cache *c;
    assert_int_equal(pg_state_cache_create(3, &c), PAGODA_OK);
    assert_int_equal(pg_state_cache_lookup(c, H(1)), -1);
    int32_t a = pg_state_cache_acquire(c), b = pg_state_cache_acquire(c);
    assert_true(a >= 0 && b >= 0 && a != b);
    assert_int_equal(pg_state_cache_lookup(c, H(1)), -1); /* not findable while written */
    pg_state_cache_publish(c, a, H(1));
    pg_state_cache_publish(c, b, H(2));
    assert_int_equal(pg_state_cache_lookup(c, H(1)), a);
    assert_int_equal(pg_state_cache_lookup(c, H(2)), b);
    /* a duplicate key frees the new entry, the old one stays */
    int32_t d = pg_state_cache_acquire(c);
    pg_state_cache_publish(c, d, H(2));
    assert_int_equal(pg_state_cache_lookup(c, H(2)), b);
    pg_state_cache_stats st;
    pg_state_cache_get_stats(c, &st);
    assert_int_equal(st.num_published, 2);
    /* full: the third entry, then eviction of the least recently used unpinned */
    int32_t e = pg_state_cache_acquire(c);
    pg_state_cache_publish(c, e, H(3));
    pg_state_cache_pin(c, a); /* a is now most recent and pinned */
    int32_t f = pg_state_cache_acquire(c);
    assert_int_equal(f, b); /* b: least recently used, unpinned */
    assert_int_equal(pg_state_cache_lookup(c, H(2)), -1);
    pg_state_cache_publish(c, f, H(4));
    int32_t g = pg_state_cache_acquire(c);
    assert_int_equal(g, e);
    int32_t h = pg_state_cache_acquire(c); /* f is the only unpinned published one */
    assert_int_equal(h, f);
    assert_int_equal(pg_state_cache_acquire(c), -1); /* a pinned, g and h being written */
    pg_state_cache_unpin(c, a);
    assert_int_equal(pg_state_cache_acquire(c), a);
    pg_state_cache_get_stats(c, &st);
    assert_int_equal(st.evictions, 4);
    assert_int_equal(st.num_published, 0);
    pg_state_cache_destroy(c);
}

static void test_drop_and_reset(void **state) {
    (void)state;
    pg_state_cache *c;
    assert_int_equal(pg_state_cache_create(4, &c), PAGODA_OK);
    int32_t a = pg_state_cache_acquire(c);
    pg_state_cache_publish(c, a, H(10));
    pg_state_cache_pin(c, a);
    pg_state_cache_drop(c, a); /* pinned: kept */
    assert_int_equal(pg_state_cache_lookup(c, H(10)), a);
    pg_state_cache_unpin(c, a);
    pg_state_cache_drop(c, a);
    assert_int_equal(pg_state_cache_lookup(c, H(10)), -1);
    for (int k = 0; k < 4; k++)
        pg_state_cache_publish(c, pg_state_cache_acquire(c), H(20 + k));
    pg_state_cache_pin(c, pg_state_cache_lookup(c, H(21)));
    pg_state_cache_reset(c);
    for (int k = 0; k < 4; k++)
        assert_int_equal(pg_state_cache_lookup(c, H(20 + k)) >= 0, k == 1);
    pg_state_cache_destroy(c);
}

/* Random acquire / publish / drop / pin against a model: every published
 * key is findable at its entry until evicted or dropped, never two entries
 * for one key, at most n live. */
static void test_random_against_model(void **state) {
    (void)state;
    enum { N = 16, KEYS = 64, OPS = 20000 };
    pg_state_cache *c;
    assert_int_equal(pg_state_cache_create(N, &c), PAGODA_OK);
    int32_t key_of[N]; /* key published in entry e, or -1 */
    int pins[N] = {0};
    for (int i = 0; i < N; i++)
        key_of[i] = -1;
    srand(7);
    for (int op = 0; op < OPS; op++) {
        int r = rand() % 4;
        if (r <= 1) {
            int32_t e = pg_state_cache_acquire(c);
            if (e < 0) {
                for (int i = 0; i < N; i++) /* only possible when all are pinned */
                    assert_true(pins[i] > 0);
                continue;
            }
            assert_int_equal(pins[e], 0);
            key_of[e] = -1; /* evicted (or was free) */
            int k = rand() % KEYS;
            int32_t old = pg_state_cache_lookup(c, H((uint64_t)k));
            pg_state_cache_publish(c, e, H((uint64_t)k));
            if (old < 0) key_of[e] = k;
        } else if (r == 2) {
            int k = rand() % KEYS;
            int32_t e = pg_state_cache_lookup(c, H((uint64_t)k));
            if (e >= 0 && pins[e] == 0) {
                pg_state_cache_drop(c, e);
                key_of[e] = -1;
            }
        } else {
            int k = rand() % KEYS;
            int32_t e = pg_state_cache_lookup(c, H((uint64_t)k));
            if (e >= 0 && rand() % 2 && pins[e] < 3) {
                pg_state_cache_pin(c, e);
                pins[e]++;
            }
            for (int i = 0; i < N; i++)
                if (pins[i] && rand() % 3 == 0) {
                    pg_state_cache_unpin(c, i);
                    pins[i]--;
                }
        }
        for (int i = 0; i < N; i++)
            if (key_of[i] >= 0)
                assert_int_equal(pg_state_cache_lookup(c, H((uint64_t)key_of[i])), i);
        for (int k = 0; k < KEYS; k++) {
            int32_t e = pg_state_cache_lookup(c, H((uint64_t)k));
            if (e >= 0) assert_int_equal(key_of[e], k);
        }
    }
    pg_state_cache_destroy(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publish_lookup_evict),
        cmocka_unit_test(test_drop_and_reset),
        cmocka_unit_test(test_random_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
