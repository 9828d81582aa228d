/* KV cache manager: prefix-cache reuse, counters, LRU eviction only when
 * needed, allocation failure leaves no trace, KV cache groups. */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"

#define BS 4

static const pg_block_hash_algo g_sha256 = PG_BLOCK_HASH_SHA256;

static pg_kvm *make_kvm(int32_t num_blocks, bool caching) {
    pg_kvm_config c = {.num_blocks = num_blocks,
                       .block_size = BS,
                       .max_model_len = 64,
                       .max_num_seqs = 8,
                       .enable_prefix_caching = caching};
    pg_kvm *m = NULL;
    assert_int_equal(pg_kvm_create(&c, &m), PAGODA_OK);
    return m;
}

/* A request with prompt toks[0..n), max_tokens, SHA-256 block hashes. */
static pg_request *make_req_toks(uint64_t id, const int32_t *toks, int32_t n, int32_t max_tokens) {
    pg_request *r = NULL;
    assert_int_equal(pg_request_create(id, toks, n, max_tokens, 64, &r), PAGODA_OK);
    assert_int_equal(pg_request_hash_blocks(r, BS, &g_sha256), PAGODA_OK);
    return r;
}

/* A request whose tokens are base + i (prompt only). */
static pg_request *make_req(uint64_t id, int32_t n, int32_t base) {
    int32_t toks[64];
    for (int32_t i = 0; i < n; i++)
        toks[i] = base + i;
    return make_req_toks(id, toks, n, 8);
}

/* Admit r as the scheduler does: lookup, then allocate the rest of the prompt. */
static pagoda_status admit(pg_kvm *m, pg_request *r, int32_t *hit_out) {
    int32_t hit = pg_kvm_find_cached_prefix(m, r);
    pagoda_status st = pg_kvm_allocate_slots(m, r, r->num_tokens - hit, hit);
    if (st == PAGODA_OK) r->num_computed_tokens = r->num_tokens; /* the runner computed it */
    if (hit_out) *hit_out = hit;
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    return st;
}

static const int32_t *table(pg_kvm *m, const pg_request *r, int32_t *n) {
    return pg_kvm_block_table(m, 0, r, n);
}

static void test_shared_prefix_is_reused(void **state) {
    (void)state;
    pg_kvm *m = make_kvm(20, true);
    pg_request *a = make_req(1, 10, 100), *b;
    int32_t toks[14]; /* b shares a's first 9 tokens: two full blocks */
    for (int i = 0; i < 14; i++)
        toks[i] = i < 9 ? 100 + i : 7;
    b = make_req_toks(2, toks, 14, 4);

    int32_t hit = -1, na, nb;
    assert_int_equal(admit(m, a, &hit), PAGODA_OK);
    assert_int_equal(hit, 0);
    const int32_t *ta = table(m, a, &na);
    assert_int_equal(na, 3);
    assert_int_equal(admit(m, b, &hit), PAGODA_OK);
    assert_int_equal(hit, 8);
    assert_int_equal(b->num_tokens - hit, 6);
    const int32_t *tb = table(m, b, &nb);
    assert_int_equal(nb, 4);
    assert_int_equal(tb[0], ta[0]);
    assert_int_equal(tb[1], ta[1]);
    assert_true(tb[2] != ta[2]);
    pg_block_pool *pool = pg_kvm_pool(m);
    assert_int_equal(pg_block_pool_ref_cnt(pool, ta[0]), 2);
    assert_int_equal(pg_block_pool_ref_cnt(pool, ta[2]), 1);
    pg_kvm_stats st;
    pg_kvm_get_stats(m, &st);
    assert_true(st.prefix_queries_tokens == 10 + 14);
    assert_true(st.prefix_hits_tokens == 8);
    assert_int_equal(st.num_free_blocks, 19 - 3 - 2);

    pg_kvm_free(m, a);
    pg_kvm_free(m, b);
    assert_int_equal(a->kv_slot, -1);
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    pg_kvm_get_stats(m, &st);
    assert_int_equal(st.num_free_blocks, 19);
    assert_int_equal(st.num_cached_blocks, 3); /* a's 2 full blocks + b's third */
    pg_request_destroy(a);
    pg_request_destroy(b);
    pg_kvm_destroy(m);
}

static void test_last_token_is_never_a_hit(void **state) {
    (void)state;
    pg_kvm *m = make_kvm(20, true);
    pg_request *a = make_req(1, 8, 0), *c = make_req(3, 8, 0);
    assert_int_equal(admit(m, a, NULL), PAGODA_OK);
    int32_t hit;
    assert_int_equal(admit(m, c, &hit), PAGODA_OK);
    assert_int_equal(hit, 4); /* both blocks cached, but token 7 must be computed */
    pg_kvm_free(m, a);
    pg_kvm_free(m, c);
    pg_request_destroy(a);
    pg_request_destroy(c);
    pg_kvm_destroy(m);
}

static void test_cache_survives_free_and_eviction_is_lru(void **state) {
    (void)state;
    pg_kvm *m = make_kvm(5, true); /* 4 usable blocks */
    pg_block_pool *pool = pg_kvm_pool(m);
    pg_request *a = make_req(1, 8, 0); /* 2 full blocks */
    assert_int_equal(admit(m, a, NULL), PAGODA_OK);
    int32_t n;
    int32_t a0 = table(m, a, &n)[0], a1 = table(m, a, &n)[1];
    pg_kvm_free(m, a);
    /* queue: the two never-used blocks, then a's tail block, then its head */
    int32_t q[4];
    assert_int_equal(pg_block_pool_free_queue(pool, q, 4), 4);
    assert_int_equal(q[2], a1);
    assert_int_equal(q[3], a0);

    /* x needs one block: a never-used one, no eviction */
    pg_request *x = make_req(2, 3, 500);
    assert_int_equal(admit(m, x, NULL), PAGODA_OK);
    pg_kvm_stats st;
    pg_kvm_get_stats(m, &st);
    assert_true(st.evictions == 0);
    assert_int_equal(st.num_cached_blocks, 2);

    /* y needs two: the other never-used one, then a's TAIL block is evicted */
    pg_request *y = make_req(3, 6, 900);
    assert_int_equal(admit(m, y, NULL), PAGODA_OK);
    pg_kvm_get_stats(m, &st);
    assert_true(st.evictions == 1);
    assert_false(pg_block_pool_is_cached(pool, a1) && pg_block_pool_ref_cnt(pool, a1) == 0);
    assert_true(pg_block_pool_is_cached(pool, a0));

    /* a's prefix comes back for the head block only, reusing it from the free queue */
    pg_request *a2 = make_req(4, 8, 0);
    pg_kvm_free(m, x);
    int32_t hit;
    assert_int_equal(admit(m, a2, &hit), PAGODA_OK);
    assert_int_equal(hit, 4);
    assert_int_equal(table(m, a2, &n)[0], a0);
    pg_kvm_free(m, y);
    pg_kvm_free(m, a2);
    pg_kvm_get_stats(m, &st);
    assert_int_equal(st.num_free_blocks, 4);
    pg_request_destroy(a);
    pg_request_destroy(x);
    pg_request_destroy(y);
    pg_request_destroy(a2);
    pg_kvm_destroy(m);
}

/* Hits that sit in the free queue count against the free blocks; a failed
 * allocation changes nothing (no ref taken, no block evicted). */
static void test_failed_allocation_leaves_no_trace(void **state) {
    (void)state;
    pg_kvm *m = make_kvm(5, true);
    pg_block_pool *pool = pg_kvm_pool(m);
    pg_request *a = make_req(1, 8, 0);
    assert_int_equal(admit(m, a, NULL), PAGODA_OK);
    pg_kvm_free(m, a);
    /* 8 cached + 12 new tokens = 20 tokens = 5 blocks: 2 hits (free) + 3 new > 4 free */
    int32_t toks[20];
    for (int i = 0; i < 20; i++)
        toks[i] = i < 8 ? i : 1000 + i;
    pg_request *big = make_req_toks(9, toks, 20, 1);
    int32_t hit = pg_kvm_find_cached_prefix(m, big);
    assert_int_equal(hit, 8);
    assert_int_equal(pg_kvm_allocate_slots(m, big, 12, hit), PAGODA_ERR_LIMIT);
    assert_int_equal(big->kv_slot, -1);
    assert_int_equal(pg_block_pool_num_free(pool), 4);
    assert_int_equal(pg_block_pool_num_cached(pool), 2);
    assert_true(pg_block_pool_num_evictions(pool) == 0);
    pg_kvm_stats st;
    pg_kvm_get_stats(m, &st);
    assert_true(st.prefix_queries_tokens == 8); /* failed admissions are not counted */
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    /* a chunk that fits: 2 hits + 1 new block for 4 more tokens */
    assert_int_equal(pg_kvm_allocate_slots(m, big, 4, hit), PAGODA_OK);
    int32_t n;
    table(m, big, &n);
    assert_int_equal(n, 3);
    assert_int_equal(pg_block_pool_num_free(pool), 1);
    /* hit tokens not from the last lookup are refused */
    pg_request *other = make_req(5, 8, 0);
    assert_int_equal(pg_kvm_allocate_slots(m, other, 4, 4), PAGODA_ERR_INVALID_ARG);
    /* more tokens than the request has */
    assert_int_equal(pg_kvm_allocate_slots(m, other, 9, 0), PAGODA_ERR_INVALID_ARG);
    pg_kvm_free(m, big);
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    pg_request_destroy(a);
    pg_request_destroy(big);
    pg_request_destroy(other);
    pg_kvm_destroy(m);
}

static void test_prefix_caching_disabled(void **state) {
    (void)state;
    pg_kvm *m = make_kvm(20, false);
    pg_request *a = make_req(1, 12, 0), *b = make_req(2, 12, 0);
    int32_t hit;
    assert_int_equal(admit(m, a, &hit), PAGODA_OK);
    assert_int_equal(admit(m, b, &hit), PAGODA_OK);
    assert_int_equal(hit, 0);
    pg_kvm_stats st;
    pg_kvm_get_stats(m, &st);
    assert_true(st.prefix_queries_tokens == 0 && st.prefix_hits_tokens == 0);
    assert_int_equal(st.num_cached_blocks, 0);
    pg_kvm_free(m, a);
    pg_kvm_free(m, b);
    pg_request_destroy(a);
    pg_request_destroy(b);
    pg_kvm_destroy(m);
}

/* Decode growth: a new block exactly when a block boundary is crossed; the
 * block that fills up is cached at that point. */
static void test_decode_growth_and_caching(void **state) {
    (void)state;
    pg_kvm *m = make_kvm(20, true);
    pg_block_pool *pool = pg_kvm_pool(m);
    pg_request *a = make_req(1, 5, 0);
    assert_int_equal(admit(m, a, NULL), PAGODA_OK);
    int32_t n;
    table(m, a, &n);
    assert_int_equal(n, 2);
    for (int32_t t = 0; t < 7; t++) {
        assert_int_equal(pg_request_append_token(a, 50 + t), PAGODA_OK);
        assert_int_equal(pg_kvm_allocate_slots(m, a, 1, 0), PAGODA_OK);
        a->num_computed_tokens++;
        const int32_t *ids = table(m, a, &n);
        assert_int_equal(n, (a->num_tokens + BS - 1) / BS);
        for (int32_t b = 0; b < n; b++)
            assert_int_equal(pg_block_pool_is_cached(pool, ids[b]), b < a->num_tokens / BS);
        assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    }
    pg_kvm_free(m, a);
    pg_request_destroy(a);
    pg_kvm_destroy(m);
}

/* A cross-attention group (encoder-decoder models): the encoder's blocks
 * come at admission whatever the decoder length (0 tokens included), more
 * than the decoder's max_model_len would give a table, never prefix hits
 * (identical prompts over different audio), all freed at the end. */
static void test_cross_attention_group(void **state) {
    (void)state;
    pg_kvm_config c = {.num_blocks = 36, /* a, b: 11 each; d: 8; 5 left */
                       .block_size = BS,
                       .max_model_len = 16,
                       .max_num_seqs = 4,
                       .enable_prefix_caching = true,
                       .num_groups = 2};
    c.groups[0] = (pg_kv_cache_spec){.kind = PG_KV_FULL_ATTENTION,
                                     .block_size = BS,
                                     .num_layers = 2,
                                     .num_kv_heads = 1,
                                     .head_size = 8,
                                     .dtype_bytes = 2};
    c.groups[1] = c.groups[0];
    c.groups[1].kind = PG_KV_CROSS_ATTENTION;
    c.groups[1].u.cross.max_encoder_len = 30; /* 8 blocks of 4 > 16 / 4 */
    pg_kvm *m = NULL;
    assert_int_equal(pg_kvm_create(&c, &m), PAGODA_OK);
    assert_int_equal(pg_kvm_blocks_for_tokens(m, 0), 8);
    assert_int_equal(pg_kvm_blocks_for_tokens(m, 9), 3 + 8);
    pg_request *a = make_req(1, 9, 0), *b = make_req(2, 9, 0);
    /* admission with no decoder tokens yet: the encoder's blocks only */
    assert_int_equal(pg_kvm_find_cached_prefix(m, a), 0);
    assert_int_equal(pg_kvm_allocate_slots(m, a, 0, 0), PAGODA_OK);
    int32_t n0, n1;
    pg_kvm_block_table(m, 0, a, &n0);
    const int32_t *x = pg_kvm_block_table(m, 1, a, &n1);
    assert_int_equal(n0, 0);
    assert_int_equal(n1, 8);
    for (int i = 0; i < 8; i++)
        assert_false(pg_block_pool_is_cached(pg_kvm_pool(m), x[i]));
    /* then the prompt: self-attention blocks only, cached as usual */
    assert_int_equal(pg_kvm_allocate_slots(m, a, 9, 0), PAGODA_OK);
    a->num_computed_tokens = 9;
    pg_kvm_block_table(m, 0, a, &n0);
    pg_kvm_block_table(m, 1, a, &n1);
    assert_int_equal(n0, 3);
    assert_int_equal(n1, 8);
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    /* the same prompt again: no hit (its cross K/V would be someone else's) */
    int32_t hit;
    assert_int_equal(admit(m, b, &hit), PAGODA_OK);
    assert_int_equal(hit, 0);
    assert_int_equal(pg_block_pool_num_free(pg_kvm_pool(m)), 35 - 2 * 11);
    /* not enough for a third request's encoder blocks: LIMIT, nothing changed */
    pg_request *d = make_req(3, 2, 50);
    assert_int_equal(pg_kvm_allocate_slots(m, d, 0, 0), PAGODA_OK);
    pg_request *e = make_req(4, 2, 60);
    int32_t before = pg_block_pool_num_free(pg_kvm_pool(m));
    assert_true(before < 8);
    assert_int_equal(pg_kvm_allocate_slots(m, e, 0, 0), PAGODA_ERR_LIMIT);
    assert_int_equal(pg_block_pool_num_free(pg_kvm_pool(m)), before);
    pg_kvm_free(m, a);
    pg_kvm_free(m, b);
    pg_kvm_free(m, d);
    assert_int_equal(pg_block_pool_num_free(pg_kvm_pool(m)), 35);
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    pg_request_destroy(a);
    pg_request_destroy(b);
    pg_request_destroy(d);
    pg_request_destroy(e);
    pg_kvm_destroy(m);
}

static void test_groups(void **state) {
    (void)state;
    pg_kvm_config c = {.num_blocks = 40,
                       .block_size = BS,
                       .max_model_len = 64,
                       .max_num_seqs = 4,
                       .enable_prefix_caching = true,
                       .num_groups = 2};
    for (int g = 0; g < 2; g++)
        c.groups[g] = (pg_kv_cache_spec){.kind = PG_KV_FULL_ATTENTION,
                                         .block_size = BS,
                                         .num_layers = 2,
                                         .num_kv_heads = 1,
                                         .head_size = 8,
                                         .dtype_bytes = 2};
    pg_kvm *m = NULL;
    assert_int_equal(pg_kvm_create(&c, &m), PAGODA_OK);
    assert_int_equal(pg_kvm_num_groups(m), 2);
    assert_int_equal(pg_kvm_blocks_for_tokens(m, 9), 6);
    pg_request *a = make_req(1, 9, 0), *b = make_req(2, 9, 0);
    int32_t hit, n0, n1;
    assert_int_equal(admit(m, a, &hit), PAGODA_OK);
    assert_int_equal(admit(m, b, &hit), PAGODA_OK);
    assert_int_equal(hit, 8);
    const int32_t *a0 = pg_kvm_block_table(m, 0, a, &n0), *a1 = pg_kvm_block_table(m, 1, a, &n1);
    assert_int_equal(n0, 3);
    assert_int_equal(n1, 3);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            assert_true(a0[i] != a1[j]); /* groups never share blocks */
    const int32_t *b1 = pg_kvm_block_table(m, 1, b, &n1);
    assert_int_equal(b1[0], a1[0]);
    assert_int_equal(b1[1], a1[1]);
    assert_int_equal(pg_block_pool_num_free(pg_kvm_pool(m)), 39 - 6 - 2);
    pg_kvm_free(m, a);
    pg_kvm_free(m, b);
    assert_int_equal(pg_block_pool_num_free(pg_kvm_pool(m)), 39);
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    pg_request_destroy(a);
    pg_request_destroy(b);
    pg_kvm_destroy(m);

    /* config errors */
    c.groups[1].block_size = 8;
    assert_int_equal(pg_kvm_create(&c, &m), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "block_size 8"));
    c.groups[1].block_size = BS;
    c.num_groups = PG_KV_MAX_GROUPS + 1;
    assert_int_equal(pg_kvm_create(&c, &m), PAGODA_ERR_INVALID_ARG);
    assert_null(m);
}

/* Sliding window: blocks wholly outside the window of the next query go
 * back to the pool and become PG_NULL_BLOCK in the table; a prefix hit needs
 * only the blocks of the window. */
static void test_sliding_window_frees_old_blocks(void **state) {
    (void)state;
    pg_kvm_config c = {.num_blocks = 40,
                       .block_size = BS,
                       .max_model_len = 64,
                       .max_num_seqs = 4,
                       .enable_prefix_caching = true,
                       .num_groups = 2};
    c.groups[0] = (pg_kv_cache_spec){.kind = PG_KV_FULL_ATTENTION,
                                     .block_size = BS,
                                     .num_layers = 1,
                                     .num_kv_heads = 1,
                                     .head_size = 8,
                                     .dtype_bytes = 2};
    c.groups[1] = c.groups[0];
    c.groups[1].kind = PG_KV_SLIDING_WINDOW;
    c.groups[1].u.sliding.window = 6;
    pg_kvm *m = NULL;
    assert_int_equal(pg_kvm_create(&c, &m), PAGODA_OK);
    pg_request *a = make_req(1, 20, 0);
    /* prefill in chunks of 4 tokens */
    for (int32_t done = 0; done < 20; done += 4) {
        assert_int_equal(pg_kvm_allocate_slots(m, a, 4, 0), PAGODA_OK);
        int32_t n;
        const int32_t *t = pg_kvm_block_table(m, 1, a, &n);
        /* the chunk's first query (position done) sees keys > done - 6 */
        int32_t first_needed = done - 6 + 1;
        for (int32_t b = 0; b < n; b++) {
            bool needed = (b + 1) * BS > first_needed;
            assert_int_equal(t[b] != PG_NULL_BLOCK, needed);
        }
        a->num_computed_tokens += 4;
        assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    }
    int32_t n0, n1;
    pg_kvm_block_table(m, 0, a, &n0);
    pg_kvm_block_table(m, 1, a, &n1);
    assert_int_equal(n0, 5);
    assert_int_equal(n1, 5);
    /* full group 5 blocks + window group 3 live blocks: the last chunk's first
     * query (position 16) still reads positions 11.., i.e. blocks 2, 3, 4 */
    assert_int_equal(pg_block_pool_num_free(pg_kvm_pool(m)), 39 - 5 - 3);
    /* prefix hit for the same 20 tokens: 4 blocks (never the last token); the
     * window group needs only blocks 2, 3 (the query at 16 reads 11..16) */
    const int32_t *as = pg_kvm_block_table(m, 1, a, &n1);
    int32_t a_s2 = as[2], a_s3 = as[3];
    pg_request *b = make_req(2, 20, 0);
    int32_t hit = pg_kvm_find_cached_prefix(m, b);
    assert_int_equal(hit, 16);
    assert_int_equal(pg_kvm_allocate_slots(m, b, 4, hit), PAGODA_OK);
    b->num_computed_tokens = 20;
    const int32_t *bs = pg_kvm_block_table(m, 1, b, &n1);
    assert_int_equal(n1, 5);
    assert_int_equal(bs[0], PG_NULL_BLOCK);
    assert_int_equal(bs[1], PG_NULL_BLOCK);
    assert_int_equal(bs[2], a_s2);
    assert_int_equal(bs[3], a_s3);
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    /* a request sharing only 12 tokens: the full group caps the hit at 3
     * blocks; for L = 3 the window group needs blocks 1, 2, and block 1 sits
     * in the free queue (dropped by a's window, still cached): reused */
    int32_t toks[20];
    for (int i = 0; i < 20; i++)
        toks[i] = i < 12 ? i : 900 + i;
    pg_request *c3 = make_req_toks(3, toks, 20, 1);
    int32_t free_before = pg_block_pool_num_free(pg_kvm_pool(m));
    hit = pg_kvm_find_cached_prefix(m, c3);
    assert_int_equal(hit, 12);
    assert_int_equal(pg_kvm_allocate_slots(m, c3, 8, hit), PAGODA_OK);
    const int32_t *cs = pg_kvm_block_table(m, 1, c3, &n1);
    assert_int_equal(cs[0], PG_NULL_BLOCK);
    assert_true(cs[1] != PG_NULL_BLOCK && pg_block_pool_ref_cnt(pg_kvm_pool(m), cs[1]) == 1);
    assert_int_equal(cs[2], a_s2);
    /* taken: the cached window block 1 + 2 new per group (blocks 3, 4) */
    assert_int_equal(pg_block_pool_num_free(pg_kvm_pool(m)), free_before - 1 - 2 - 2);
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    pg_kvm_free(m, a);
    pg_kvm_free(m, b);
    pg_kvm_free(m, c3);
    assert_int_equal(pg_block_pool_num_free(pg_kvm_pool(m)), 39);
    assert_int_equal(pg_kvm_check(m), PAGODA_OK);
    pg_request_destroy(a);
    pg_request_destroy(b);
    pg_request_destroy(c3);
    pg_kvm_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_prefix_is_reused),
        cmocka_unit_test(test_last_token_is_never_a_hit),
        cmocka_unit_test(test_cache_survives_free_and_eviction_is_lru),
        cmocka_unit_test(test_failed_allocation_leaves_no_trace),
        cmocka_unit_test(test_prefix_caching_disabled),
        cmocka_unit_test(test_decode_growth_and_caching),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_cross_attention_group),
        cmocka_unit_test(test_sliding_window_frees_old_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
