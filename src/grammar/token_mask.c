/* Token masks (token_mask.h): the vocabulary trie, the per-node caches,
 * the per-request matcher. */
#include <math.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"
#include "grammar/token_mask.h"

/* ------------------------------------------------------------ vocab trie */

struct pg_vocab_trie {
    int32_t n_vocab;       /* ids 0..n_vocab-1 */
    int32_t n;             /* tokens in the trie (non-empty, allowed) */
    int32_t *ord;          /* [n] token id in byte order */
    int32_t *lcp;          /* [n] common prefix with the previous token (0 for k = 0) */
    int32_t *len;          /* [n] */
    const uint8_t **bytes; /* [n] into blob */
    int64_t
        *rend_off; /* [n]: rend[rend_off[k] + d - 1] = end of the run sharing k's first d bytes */
    int32_t *rend;
    uint8_t *blob;
    int32_t max_len;
    int32_t *pos_of; /* [n_vocab] sorted index of each id, -1 if absent */
};

static _Thread_local const pg_vocab_trie *sort_v; /* qsort has no context argument in C11 */
static int cmp_tok(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const pg_vocab_trie *v = sort_v;
    int32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->bytes[x], v->bytes[y], (size_t)(lx < ly ? lx : ly));
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

void pg_vocab_trie_free(pg_vocab_trie *v) {
    if (!v) return;
    free(v->ord);
    free(v->lcp);
    free(v->len);
    free(v->bytes);
    free(v->rend_off);
    free(v->rend);
    free(v->blob);
    free(v->pos_of);
    free(v);
}

int32_t pg_vocab_trie_size(const pg_vocab_trie *v) {
    return v->n_vocab;
}

pagoda_status pg_vocab_trie_create(const char *const *bytes, const size_t *lens, int32_t n,
                                   pg_vocab_trie **out) {
    *out = NULL;
    pg_vocab_trie *v = calloc(1, sizeof *v);
    if (!v) return pg_error(PAGODA_ERR_NOMEM, "vocab trie: out of memory");
    v->n_vocab = n;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++)
        if (bytes[i] && lens[i]) total += lens[i];
    v->blob = malloc(total + 1);
    /* per-id arrays first (len/bytes indexed by id for sorting), then permuted */
    int32_t *idlen = malloc((size_t)n * sizeof *idlen + 1);
    const uint8_t **idbytes = malloc((size_t)n * sizeof *idbytes + 1);
    v->ord = malloc((size_t)n * sizeof *v->ord + 1);
    v->pos_of = malloc((size_t)n * sizeof *v->pos_of + 1);
    if (!v->blob || !idlen || !idbytes || !v->ord || !v->pos_of) goto oom;
    size_t at = 0;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        v->pos_of[i] = -1;
        idlen[i] = 0;
        idbytes[i] = NULL;
        if (!bytes[i] || !lens[i]) continue;
        memcpy(v->blob + at, bytes[i], lens[i]);
        idbytes[i] = v->blob + at;
        idlen[i] = (int32_t)lens[i];
        at += lens[i];
        v->ord[m++] = i;
    }
    v->n = m;
    {
        pg_vocab_trie tmp = {.len = idlen, .bytes = idbytes};
        sort_v = &tmp;
        qsort(v->ord, (size_t)m, sizeof *v->ord, cmp_tok);
        sort_v = NULL;
    }
    v->lcp = malloc((size_t)m * sizeof *v->lcp + 1);
    v->len = malloc((size_t)m * sizeof *v->len + 1);
    v->bytes = malloc((size_t)m * sizeof *v->bytes + 1);
    v->rend_off = malloc((size_t)m * sizeof *v->rend_off + 1);
    v->rend = malloc(total * sizeof *v->rend + 1);
    if (!v->lcp || !v->len || !v->bytes || !v->rend_off || !v->rend) goto oom;
    int64_t ro = 0;
    for (int32_t k = 0; k < m; k++) {
        int32_t id = v->ord[k];
        v->pos_of[id] = k;
        v->len[k] = idlen[id];
        v->bytes[k] = idbytes[id];
        if (v->len[k] > v->max_len) v->max_len = v->len[k];
        int32_t l = 0;
        if (k) {
            int32_t lim = v->len[k] < v->len[k - 1] ? v->len[k] : v->len[k - 1];
            while (l < lim && v->bytes[k][l] == v->bytes[k - 1][l])
                l++;
        }
        v->lcp[k] = l;
        v->rend_off[k] = ro;
        ro += v->len[k];
    }
    /* rend: right to left with a chain of "next index with a smaller lcp" */
    {
        int32_t *chain = malloc(((size_t)v->max_len + 2) * sizeof *chain);
        int32_t top = 0;
        if (!chain) goto oom;
        for (int32_t k = m - 1; k >= 0; k--) {
            /* chain[top-1] is k+1; lcps strictly decrease toward chain[0] */
            int32_t p = top - 1;
            for (int32_t d = v->len[k]; d >= 1; d--) {
                while (p >= 0 && v->lcp[chain[p]] >= d)
                    p--;
                v->rend[v->rend_off[k] + d - 1] = p >= 0 ? chain[p] : m;
            }
            while (top > 0 && v->lcp[chain[top - 1]] >= v->lcp[k])
                top--;
            if (top <= v->max_len) chain[top++] = k;
        }
        free(chain);
    }
    free(idlen);
    free(idbytes);
    *out = v;
    return PAGODA_OK;
oom:
    free(idlen);
    free(idbytes);
    pg_vocab_trie_free(v);
    return pg_error(PAGODA_ERR_NOMEM, "vocab trie: out of memory");
}

static inline int32_t rend_at(const pg_vocab_trie *v, int32_t k, int32_t d) {
    return v->rend[v->rend_off[k] + d - 1];
}

/* ------------------------------------------------------------ node caches */

typedef struct tcache {
    uint64_t *acc_bits; /* [words] or NULL */
    int32_t *acc_ids;   /* sorted token ids when acc_bits is NULL */
    int32_t n_acc;
    int32_t *unc; /* pairs [a, b) of sorted indices */
    int32_t n_unc;
} tcache;

struct pg_tgram {
    pg_gram *g;
    const pg_vocab_trie *v;
    _Atomic(tcache *) *cache; /* [n_nodes] */
    atomic_int refs;
    int32_t words;
};

static void tcache_free(tcache *c) {
    if (!c) return;
    free(c->acc_bits);
    free(c->acc_ids);
    free(c->unc);
    free(c);
}

pagoda_status pg_tgram_create(pg_gram *g, const pg_vocab_trie *v, pg_tgram **out) {
    *out = NULL;
    pg_tgram *t = calloc(1, sizeof *t);
    if (t) t->cache = calloc((size_t)g->n_nodes + 1, sizeof *t->cache);
    if (!t || !t->cache) {
        free(t);
        pg_gram_free(g);
        return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    }
    t->g = g;
    t->v = v;
    t->words = (v->n_vocab + 63) / 64;
    atomic_init(&t->refs, 1);
    *out = t;
    return PAGODA_OK;
}

void pg_tgram_retain(pg_tgram *t) {
    atomic_fetch_add(&t->refs, 1);
}

void pg_tgram_release(pg_tgram *t) {
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
    for (int32_t i = 0; i < t->g->n_nodes; i++)
        tcache_free(atomic_load(&t->cache[i]));
    free(t->cache);
    pg_gram_free(t->g);
    free(t);
}

const pg_gram *pg_tgram_gram(const pg_tgram *t) {
    return t->g;
}

const pg_vocab_trie *pg_tgram_trie(const pg_tgram *t) {
    return t->v;
}

/* Depth-indexed state sets for walks (one per byte of the longest token). */
typedef struct walk {
    g_set *s;    /* [max_len + 1] */
    uint8_t *pb; /* [max_len + 1] a return into the unknown context at depth <= d */
    int32_t n;
} walk;

static bool walk_init(walk *w, int32_t max_len) {
    w->n = max_len + 1;
    w->s = calloc((size_t)w->n, sizeof *w->s);
    w->pb = calloc((size_t)w->n, 1);
    return w->s && w->pb;
}

static void walk_free(walk *w) {
    if (w->s)
        for (int32_t i = 0; i < w->n; i++)
            g_set_free(&w->s[i]);
    free(w->s);
    free(w->pb);
}

typedef struct ivec {
    int32_t *p;
    int32_t n, cap;
    bool oom;
} ivec;

static void iv_push(ivec *v, int32_t x) {
    if (v->n == v->cap) {
        int32_t c = v->cap ? v->cap * 2 : 64;
        int32_t *q = realloc(v->p, (size_t)c * sizeof *q);
        if (!q) {
            v->oom = true;
            return;
        }
        v->p = q;
        v->cap = c;
    }
    v->p[v->n++] = x;
}

static void add_unc(ivec *u, int32_t a, int32_t b) {
    if (a >= b) return;
    if (u->n && u->p[u->n - 1] == a) { /* extend the last run */
        u->p[u->n - 1] = b;
        return;
    }
    iv_push(u, a);
    iv_push(u, b);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static pagoda_status limit_error(void) {
    return pg_error(PAGODA_ERR_LIMIT,
                    "grammar: matching one token needs more than %llu steps (an ambiguous "
                    "grammar: alternatives that only differ later keep multiplying the parses)",
                    (unsigned long long)G_WORK_BUDGET);
}

/* Classify every token from `node` with the unknown context below
 * (NULL and *err: NOMEM, or LIMIT past the work budget; pg_last_error set). */
static tcache *compute_cache(const pg_tgram *t, int32_t node, pagoda_status *err) {
    const pg_vocab_trie *v = t->v;
    const pg_gram *g = t->g;
    tcache *c = calloc(1, sizeof *c);
    g_stacks st;
    walk w = {0};
    ivec acc = {0}, unc = {0};
    if (!c || !g_stacks_init(&st)) {
        free(c);
        return NULL;
    }
    if (!walk_init(&w, v->max_len)) goto fail;
    g_budget_start(&st, G_WORK_BUDGET);
    g_begin(&st, &w.s[0]);
    int32_t s0 = g_stacks_intern(&st, node, G_SENTINEL);
    if (s0 < 0) goto fail;
    w.s[0].ids = malloc(16 * sizeof(int32_t));
    if (!w.s[0].ids) goto fail;
    w.s[0].cap = 16;
    w.s[0].ids[0] = s0;
    w.s[0].n = 1;
    w.pb[0] = 0;
    int32_t k = 0;
    while (k < v->n) {
        int32_t L = v->len[k];
        int32_t d0 = v->lcp[k];
        bool dead = false;
        for (int32_t d = d0 + 1; d <= L; d++) {
            g_set *o = &w.s[d];
            g_advance(g, &st, &w.s[d - 1], v->bytes[k][d - 1], o);
            if (o->oom) goto fail;
            w.pb[d] = w.pb[d - 1] | o->popped;
            if (o->n == 0) {
                int32_t end = rend_at(v, k, d), start = k;
                if (o->popped && L == d) { /* the rule ends exactly with the token */
                    iv_push(&acc, v->ord[k]);
                    start = k + 1;
                }
                if (w.pb[d]) add_unc(&unc, start, end);
                k = end;
                dead = true;
                break;
            }
        }
        if (dead) continue;
        iv_push(&acc, v->ord[k]);
        k++;
    }
    if (acc.oom || unc.oom) goto fail;
    c->n_acc = acc.n;
    if ((int64_t)acc.n * 32 > v->n_vocab) {
        c->acc_bits = calloc((size_t)t->words, sizeof(uint64_t));
        if (!c->acc_bits) goto fail;
        for (int32_t i = 0; i < acc.n; i++)
            c->acc_bits[acc.p[i] >> 6] |= 1ull << (acc.p[i] & 63);
        free(acc.p);
    } else {
        qsort(acc.p, (size_t)acc.n, sizeof *acc.p, cmp_i32);
        c->acc_ids = acc.p;
    }
    acc.p = NULL;
    c->unc = unc.p;
    c->n_unc = unc.n / 2;
    if (getenv("PAGODA_GRAMMAR_DEBUG")) {
        int64_t tot = 0;
        for (int32_t r = 0; r < c->n_unc; r++)
            tot += c->unc[2 * r + 1] - c->unc[2 * r];
        fprintf(stderr, "cache node %d (rule %s): accepted %d, uncertain %lld in %d runs\n", node,
                g->rule_names[g->node_rule[node]], c->n_acc, (long long)tot, c->n_unc);
    }
    walk_free(&w);
    g_stacks_free(&st);
    return c;
fail:
    *err = st.over ? limit_error() : pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    free(acc.p);
    free(unc.p);
    walk_free(&w);
    g_stacks_free(&st);
    tcache_free(c);
    return NULL;
}

static const tcache *get_cache(pg_tgram *t, int32_t node, pagoda_status *err) {
    tcache *c = atomic_load_explicit(&t->cache[node], memory_order_acquire);
    if (c) return c;
    c = compute_cache(t, node, err);
    if (!c) return NULL;
    tcache *expect = NULL;
    if (!atomic_compare_exchange_strong_explicit(&t->cache[node], &expect, c, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        tcache_free(c); /* another thread published first */
        return expect;
    }
    return c;
}

/* ------------------------------------------------------------ matcher */

struct pg_tmatch {
    pg_tgram *t;
    g_stacks st;
    g_set cur;
    walk w;
    int32_t *stop;
    int32_t n_stop;
    bool stopped;      /* a stop token was accepted */
    pagoda_status err; /* of the last accept / fill_mask: OK, NOMEM or LIMIT */
};

pagoda_status pg_tmatch_create(pg_tgram *t, const int32_t *stop_ids, int32_t n_stop,
                               pg_tmatch **out) {
    *out = NULL;
    pg_tmatch *m = calloc(1, sizeof *m);
    if (!m) return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    if (!g_stacks_init(&m->st) || !walk_init(&m->w, t->v->max_len) ||
        !(m->stop = malloc((size_t)(n_stop + 1) * sizeof *m->stop))) {
        pg_tmatch_free(m);
        return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    }
    if (n_stop) memcpy(m->stop, stop_ids, (size_t)n_stop * sizeof *m->stop);
    m->n_stop = n_stop;
    m->t = t;
    pg_tgram_retain(t);
    g_budget_start(&m->st, G_WORK_BUDGET);
    g_start(t->g, &m->st, &m->cur);
    if (m->cur.oom) {
        pagoda_status st =
            m->st.over ? limit_error() : pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        pg_tmatch_free(m);
        return st;
    }
    *out = m;
    return PAGODA_OK;
}

void pg_tmatch_free(pg_tmatch *m) {
    if (!m) return;
    g_stacks_free(&m->st);
    g_set_free(&m->cur);
    walk_free(&m->w);
    free(m->stop);
    if (m->t) pg_tgram_release(m->t);
    free(m);
}

pagoda_status pg_tmatch_status(const pg_tmatch *m) {
    return m->err;
}

bool pg_tmatch_complete(const pg_tmatch *m) {
    return m->stopped || m->cur.accept;
}

static bool is_stop(const pg_tmatch *m, int32_t tok) {
    for (int32_t i = 0; i < m->n_stop; i++)
        if (m->stop[i] == tok) return true;
    return false;
}

bool pg_tmatch_accept(pg_tmatch *m, int32_t tok) {
    const pg_vocab_trie *v = m->t->v;
    m->err = PAGODA_OK;
    if (m->stopped) return false;
    if (is_stop(m, tok)) {
        if (!m->cur.accept) return false;
        m->stopped = true;
        return true;
    }
    if (tok < 0 || tok >= v->n_vocab || v->pos_of[tok] < 0) return false;
    int32_t k = v->pos_of[tok];
    g_set *in = &m->cur;
    g_budget_start(&m->st, G_WORK_BUDGET);
    for (int32_t d = 1; d <= v->len[k]; d++) {
        g_set *o = &m->w.s[d];
        g_advance(m->t->g, &m->st, in, v->bytes[k][d - 1], o);
        if (o->oom) {
            m->err =
                m->st.over ? limit_error() : pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
            return false;
        }
        if (o->n == 0 && !o->accept) return false;
        in = o;
    }
    /* swap the final set into cur */
    g_set tmp = m->cur;
    m->cur = *in;
    *in = tmp;
    return true;
}

/* Walk the uncertain runs of a cache from real stack s: set bits of the
 * tokens that pass. */
static bool walk_uncertain(pg_tmatch *m, int32_t s, const tcache *c, uint64_t *bits,
                           int32_t *n_allowed) {
    const pg_vocab_trie *v = m->t->v;
    const pg_gram *g = m->t->g;
    walk *w = &m->w;
    g_set *s0 = &w->s[0];
    g_begin(&m->st, s0);
    if (s0->cap < 1) {
        s0->ids = malloc(16 * sizeof(int32_t));
        if (!s0->ids) return false;
        s0->cap = 16;
    }
    s0->ids[0] = s;
    s0->n = 1;
    for (int32_t r = 0; r < c->n_unc; r++) {
        int32_t k = c->unc[2 * r], b = c->unc[2 * r + 1];
        int32_t valid = 0; /* depth up to which w->s holds k-1's path */
        while (k < b) {
            int32_t L = v->len[k];
            int32_t d0 = v->lcp[k] < valid ? v->lcp[k] : valid;
            bool dead = false;
            for (int32_t d = d0 + 1; d <= L; d++) {
                g_set *o = &w->s[d];
                g_advance(g, &m->st, &w->s[d - 1], v->bytes[k][d - 1], o);
                if (o->oom) return false;
                if (o->n == 0 && !o->accept) {
                    int32_t end = rend_at(v, k, d);
                    k = end < b ? end : b;
                    valid = d - 1;
                    dead = true;
                    break;
                }
            }
            if (dead) continue;
            int32_t id = v->ord[k];
            if (!(bits[id >> 6] >> (id & 63) & 1)) {
                bits[id >> 6] |= 1ull << (id & 63);
                (*n_allowed)++;
            }
            valid = L;
            k++;
        }
    }
    return true;
}

int32_t pg_tmatch_fill_mask(pg_tmatch *m, uint64_t *bits) {
    pg_tgram *t = m->t;
    memset(bits, 0, (size_t)t->words * sizeof *bits);
    int32_t n_allowed = 0;
    m->err = PAGODA_OK;
    if (m->stopped) return 0;
    g_budget_start(&m->st, G_WORK_BUDGET);
    /* copy the stack ids: walks reuse the matcher's scratch sets */
    int32_t n = m->cur.n;
    int32_t buf[64], *ids = n <= 64 ? buf : malloc((size_t)n * sizeof *ids);
    if (!ids) {
        m->err = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        return 0;
    }
    if (n) memcpy(ids, m->cur.ids, (size_t)n * sizeof *ids);
    bool counted_bits = false;
    for (int32_t i = 0; i < n; i++) {
        const tcache *c = get_cache(t, m->st.node[ids[i]], &m->err);
        if (!c) { /* compute_cache set the error */
            n_allowed = 0;
            goto out;
        }
        if (c->acc_bits) {
            for (int32_t w = 0; w < t->words; w++)
                bits[w] |= c->acc_bits[w];
            counted_bits = true;
        } else {
            for (int32_t j = 0; j < c->n_acc; j++) {
                int32_t id = c->acc_ids[j];
                bits[id >> 6] |= 1ull << (id & 63);
            }
            counted_bits = true;
        }
        if (c->n_unc && !walk_uncertain(m, ids[i], c, bits, &n_allowed)) {
            m->err =
                m->st.over ? limit_error() : pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
            n_allowed = 0;
            goto out;
        }
    }
    if (m->cur.accept)
        for (int32_t i = 0; i < m->n_stop; i++)
            if (m->stop[i] >= 0 && m->stop[i] < t->v->n_vocab)
                bits[m->stop[i] >> 6] |= 1ull << (m->stop[i] & 63);
    (void)counted_bits;
    n_allowed = 0;
    for (int32_t w = 0; w < t->words; w++)
        n_allowed += __builtin_popcountll((unsigned long long)bits[w]);
out:
    if (ids != buf) free(ids);
    return n_allowed;
}

int32_t pg_tmatch_apply(pg_tmatch *m, float *logits, int32_t vocab) {
    pg_tgram *t = m->t;
    uint64_t stackbits[2048];
    uint64_t *bits = t->words <= 2048 ? stackbits : malloc((size_t)t->words * sizeof *bits);
    if (!bits) {
        m->err = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        return 0;
    }
    int32_t n = pg_tmatch_fill_mask(m, bits);
    int32_t lim = vocab < t->v->n_vocab ? vocab : t->v->n_vocab;
    static const float ninf[64] = {
        -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
        -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
        -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
        -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
        -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
        -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
        -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
        -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int32_t full = lim / 64;
    for (int32_t w = 0; w < full; w++) {
        uint64_t word = bits[w];
        if (word == ~0ull) continue;
        float *row = logits + (size_t)w * 64;
        if (word == 0) { /* most words of a JSON state: 256 bytes of -inf */
            memcpy(row, ninf, sizeof ninf);
            continue;
        }
        for (uint64_t z = ~word; z; z &= z - 1)
            row[__builtin_ctzll(z)] = -INFINITY;
    }
    for (int32_t i = full * 64; i < lim; i++)
        if (!(bits[i >> 6] >> (i & 63) & 1)) logits[i] = -INFINITY;
    for (int32_t i = lim; i < vocab; i++)
        logits[i] = -INFINITY;
    if (bits != stackbits) free(bits);
    return n;
}
