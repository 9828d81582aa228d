/* Engine test helpers (see engine_run.h). */
#include "engine_run.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/pool.h"
#include "base/utf8.h"

pagoda_engine *pg_er_open(const char *model, pagoda_engine_options *o) {
    pagoda_engine_options d;
    if (!o) {
        pagoda_engine_options_default(&d);
        o = &d;
    }
    if (!o->kv_cache_memory) o->kv_cache_memory = 8u << 20;
    pagoda_engine *e = NULL;
    if (pagoda_engine_create(model, o, &e) != PAGODA_OK) fail_msg("%s", pagoda_last_error());
    return e;
}

int pg_er_one_thread_under_qemu(void) {
#if defined(__aarch64__)
    pg_pool_options po = pg_pool_options_default();
    po.n_threads = 1;
    if (pg_pool_default_configure(&po) != PAGODA_OK) return -1;
#endif
    return 0;
}

pagoda_request pg_er_greedy(const pagoda_engine *e, const int32_t *ids, size_t n,
                            int32_t max_tokens) {
    pagoda_request r;
    pagoda_request_defaults(e, &r);
    r.prompt_token_ids = ids;
    r.n_prompt_token_ids = n;
    r.sampling.temperature = 0;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = 0;
    return r;
}

bool pg_er_utf8_valid(const char *str, size_t n) {
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = pg_utf8_seq_len(str + i, n - i))) return false;
    return true;
}

/* Appends output o to r (see pg_er_run_watch for held). */
static void collect(pg_er_result *r, const pagoda_output *o, const char *held) {
    for (size_t t = 0; t < o->n_new_tokens; t++) {
        assert_true(r->n < PG_ER_MAX_TOKENS);
        r->ids[r->n] = o->new_token_ids[t];
        if (o->logprobs) {
            r->lp[r->n] = o->logprobs[t].logprob;
            for (int32_t j = 0; j < o->logprobs[t].n_top && j < PG_ER_TOP; j++) {
                r->top[r->n][j] = o->logprobs[t].top[j].token;
                r->top_lp[r->n][j] = o->logprobs[t].top[j].logprob;
            }
        }
        r->n++;
    }
    if (!pg_er_utf8_valid(o->text_delta, o->text_delta_len)) r->utf8_ok = false;
    assert_true(r->text_len + o->text_delta_len < sizeof r->text);
    memcpy(r->text + r->text_len, o->text_delta, o->text_delta_len);
    r->text_len += o->text_delta_len;
    r->text[r->text_len] = 0;
    if (held && o->finish_reason == PAGODA_FINISH_NONE) {
        size_t hl = strlen(held);
        for (size_t k = 1; k < hl && k <= r->text_len; k++)
            if (!memcmp(r->text + r->text_len - k, held, k)) r->held_ok = false;
    }
    if (o->finish_reason != PAGODA_FINISH_NONE) {
        r->finish = o->finish_reason;
        r->stop_token = o->stop_token;
        if (o->stop_reason) snprintf(r->stop_reason, sizeof r->stop_reason, "%s", o->stop_reason);
    }
}

void pg_er_run_watch(pagoda_engine *e, const uint64_t *ids, pg_er_result *res, size_t n,
                     const char *held, int32_t *max_used_blocks) {
    for (size_t i = 0; i < n; i++) {
        memset(&res[i], 0, sizeof res[i]);
        res[i].utf8_ok = res[i].held_ok = true;
        res[i].stop_token = -1;
    }
    if (max_used_blocks) *max_used_blocks = 0;
    int guard = 0;
    while (pagoda_engine_has_unfinished(e)) {
        size_t nout;
        assert_int_equal(pagoda_engine_step(e, &nout), PAGODA_OK);
        assert_true(++guard < 100000);
        if (max_used_blocks && guard > 1) {
            pagoda_stats bs;
            pagoda_engine_get_stats(e, &bs);
            if (bs.num_kv_blocks - bs.num_free_kv_blocks > *max_used_blocks)
                *max_used_blocks = bs.num_kv_blocks - bs.num_free_kv_blocks;
        }
        const pagoda_output *outs = pagoda_engine_outputs(e, &nout);
        for (size_t k = 0; k < nout; k++)
            for (size_t i = 0; i < n; i++)
                if (ids[i] == outs[k].id) {
                    collect(&res[i], &outs[k], held);
                    break;
                }
    }
}

void pg_er_run(pagoda_engine *e, const uint64_t *ids, pg_er_result *res, size_t n) {
    pg_er_run_watch(e, ids, res, n, NULL, NULL);
}

void pg_er_run_requests(pagoda_engine *e, const pagoda_request *reqs, size_t n, uint64_t *ids,
                        pg_er_result *res) {
    for (size_t i = 0; i < n; i++)
        assert_int_equal(pagoda_engine_add_request(e, &reqs[i], &ids[i], NULL), PAGODA_OK);
    pg_er_run(e, ids, res, n);
}

void pg_er_prompt(int i, int len, int32_t *out) {
    uint32_t x = 2654435761u * (uint32_t)(i + 1);
    out[0] = 1;
    for (int k = 1; k < len; k++) {
        x = x * 1664525u + 1013904223u;
        out[k] = 3 + (int32_t)((x >> 8) % 500);
    }
}

void pg_er_assert_same_tokens(const pg_er_result *a, const pg_er_result *b, bool logprobs) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        if (a->ids[i] != b->ids[i]) fail_msg("token %d: %d vs %d", i, a->ids[i], b->ids[i]);
        if (logprobs) {
            assert_memory_equal(&a->lp[i], &b->lp[i], sizeof(float));
            assert_memory_equal(a->top[i], b->top[i], sizeof a->top[i]);
            assert_memory_equal(a->top_lp[i], b->top_lp[i], sizeof a->top_lp[i]);
        }
    }
}

void pg_er_assert_same(const pg_er_result *a, const pg_er_result *b, bool logprobs) {
    pg_er_assert_same_tokens(a, b, logprobs);
    assert_int_equal(a->finish, b->finish);
    assert_int_equal(a->stop_token, b->stop_token);
    assert_string_equal(a->stop_reason, b->stop_reason);
    assert_int_equal(a->text_len, b->text_len);
    assert_memory_equal(a->text, b->text, a->text_len);
}
