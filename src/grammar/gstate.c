/* The byte matcher (gram.h pg_gstate_*). */
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

struct pg_gstate {
    const pg_gram *g;
    g_stacks st;
    g_set cur, tmp;
};

static pagoda_status limit_error(void) {
    return pg_error(PAGODA_ERR_LIMIT,
                    "grammar: matching one byte or token needs more than %llu steps (an "
                    "ambiguous grammar: alternatives that only differ later keep multiplying "
                    "the parses)",
                    (unsigned long long)G_WORK_BUDGET);
}

pagoda_status pg_gstate_create(const pg_gram *g, pg_gstate **out) {
    pg_gstate *m = calloc(1, sizeof *m);
    if (!m || !g_stacks_init(&m->st)) {
        free(m);
        return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    }
    m->g = g;
    pg_gstate_reset(m);
    if (m->cur.oom) {
        pagoda_status st =
            m->st.over ? limit_error() : pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        pg_gstate_free(m);
        return st;
    }
    *out = m;
    return PAGODA_OK;
}

void pg_gstate_free(pg_gstate *m) {
    if (!m) return;
    g_stacks_free(&m->st);
    g_set_free(&m->cur);
    g_set_free(&m->tmp);
    free(m);
}

void pg_gstate_reset(pg_gstate *m) {
    g_stacks_clear(&m->st);
    g_budget_start(&m->st, G_WORK_BUDGET);
    g_start(m->g, &m->st, &m->cur);
}

bool pg_gstate_feed(pg_gstate *m, const uint8_t *s, size_t n) {
    if (n == 0) return true;
    /* work on copies so a failure leaves the state unchanged */
    g_set a = {0}, b = {0};
    g_set *in = &m->cur;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        g_set *o = in == &a ? &b : &a;
        g_budget_start(&m->st, G_WORK_BUDGET);
        g_advance(m->g, &m->st, in, s[i], o);
        if (m->st.over) limit_error();
        ok = !o->oom && (o->n > 0 || o->accept);
        in = o;
    }
    if (ok) {
        g_set keep = *in;
        g_set other = in == &a ? b : a;
        g_set_free(&other);
        g_set_free(&m->cur);
        m->cur = keep;
    } else {
        g_set_free(&a);
        g_set_free(&b);
    }
    return ok;
}

bool pg_gstate_accepting(const pg_gstate *m) {
    return m->cur.accept;
}

bool pg_gstate_finished(const pg_gstate *m) {
    return m->cur.accept && m->cur.n == 0;
}

void pg_gstate_allowed(pg_gstate *m, uint64_t out[4]) {
    memset(out, 0, 4 * sizeof *out);
    g_budget_start(&m->st, G_WORK_BUDGET); /* one budget for the 256 bytes */
    for (int c = 0; c < 256; c++) {
        g_advance(m->g, &m->st, &m->cur, (uint8_t)c, &m->tmp);
        if (m->st.over) {
            limit_error();
            break;
        }
        if (!m->tmp.oom && (m->tmp.n > 0 || m->tmp.accept)) out[c >> 6] |= 1ull << (c & 63);
    }
}
