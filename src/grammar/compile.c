/* IR -> byte-level pushdown automaton: per rule a Thompson NFA (byte-class,
 * rule-reference and epsilon edges), then the subset construction (Aho,
 * Sethi, Ullman, "Compilers", 3.7) with rule references as extra symbols;
 * then the whole-grammar checks (defined, productive, no left recursion). */
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

#define MAX_NFA_STATES (1 << 20)
#define MAX_DFA_NODES (1 << 18)
/* Work budget of one grammar's subset construction, in elementary steps
 * (NFA states scanned per node, 512 per character-class edge scanned, states
 * reached by closures): about 1 s of CPU here. The node limit bounds memory,
 * not time: a 9-byte regex such as `.*a.{12}` (each UTF-8 `.` is several byte
 * paths, and the DFA remembers the last 13 positions) reached 151k nodes and
 * 5 s of CPU below it. The largest grammar of tests/test_grammar.c takes 9M
 * steps, those of `pagoda bench grammar` 1.4M. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define MAX_WORK (16ull << 20) /* a sixteenth: ~1 s under ASan (make fuzz) */
#else
#define MAX_WORK (256ull << 20)
#endif

enum { E_EPS, E_CLS, E_REF };

typedef struct nedge {
    int32_t from, to, arg;
    uint8_t kind;
} nedge;

typedef struct nfa {
    const gx_builder *b;
    int32_t n_states;
    nedge *e;
    int32_t n_e, cap_e;
    bool too_big, oom;
} nfa;

static int32_t nstate(nfa *a) {
    if (a->n_states >= MAX_NFA_STATES) {
        a->too_big = true;
        return 0;
    }
    return a->n_states++;
}

static void nadd(nfa *a, int32_t from, uint8_t kind, int32_t arg, int32_t to) {
    if (a->n_e == a->cap_e) {
        int32_t c = a->cap_e ? a->cap_e * 2 : 256;
        void *p = realloc(a->e, (size_t)c * sizeof *a->e);
        if (!p) {
            a->oom = true;
            return;
        }
        a->e = p;
        a->cap_e = c;
    }
    a->e[a->n_e++] = (nedge){.from = from, .to = to, .arg = arg, .kind = kind};
}

/* Thompson construction: fragment of expression x from state s; returns its end. */
static int32_t frag(nfa *a, int32_t x, int32_t s, int depth) {
    if (a->too_big || a->oom) return s;
    if (depth > 2000) {
        a->too_big = true;
        return s;
    }
    const gx_node *n = &a->b->nodes[x];
    switch (n->kind) {
    case GX_EMPTY:
        return s;
    case GX_CLASS: {
        int32_t t = nstate(a);
        nadd(a, s, E_CLS, n->a, t);
        return t;
    }
    case GX_REF: {
        int32_t t = nstate(a);
        nadd(a, s, E_REF, n->a, t);
        return t;
    }
    case GX_SEQ:
        for (int32_t i = 0; i < n->n; i++)
            s = frag(a, a->b->kids[n->a + i], s, depth + 1);
        return s;
    case GX_ALT: {
        int32_t t = nstate(a);
        for (int32_t i = 0; i < n->n; i++) {
            int32_t k = nstate(a);
            nadd(a, s, E_EPS, 0, k);
            nadd(a, frag(a, a->b->kids[n->a + i], k, depth + 1), E_EPS, 0, t);
        }
        return t;
    }
    case GX_REP: {
        for (int32_t i = 0; i < n->n && !a->too_big; i++)
            s = frag(a, n->a, s, depth + 1);
        if (n->max < 0) { /* loop: s -> kid -> s */
            int32_t k = nstate(a);
            nadd(a, s, E_EPS, 0, k);
            nadd(a, frag(a, n->a, k, depth + 1), E_EPS, 0, s);
            int32_t t = nstate(a);
            nadd(a, s, E_EPS, 0, t);
            return t;
        }
        /* (max - min) nested optional copies: x (x (x)?)? */
        int32_t opt = n->max - n->n, t = nstate(a);
        for (int32_t i = 0; i < opt && !a->too_big; i++) {
            nadd(a, s, E_EPS, 0, t);
            int32_t k = nstate(a);
            nadd(a, s, E_EPS, 0, k);
            s = frag(a, n->a, k, depth + 1);
        }
        nadd(a, s, E_EPS, 0, t);
        return t;
    }
    }
    return s;
}

/* ---- subset construction */

typedef struct adj {
    int32_t *off; /* [n_states + 1] */
    int32_t *ix;  /* edge indexes grouped by from */
} adj;

typedef struct dfa_build {
    /* nodes under construction (all rules) */
    int32_t n, cap;
    int32_t *next; /* [cap][256] */
    uint8_t *final;
    int32_t *rule;
    g_ref *refs;
    int32_t n_refs, cap_refs;
    int32_t *ref_off; /* [cap + 1]: filled in order */
    /* subsets of the current rule: set storage + hash */
    int32_t *sets;
    int32_t n_sets_int, cap_sets_int;
    int32_t *set_off; /* per local node: offset, len */
    int32_t *set_len;
    int32_t *ht;
    uint32_t ht_mask;
    int32_t base; /* first node of the current rule */
    uint64_t work; /* steps so far (MAX_WORK) */
    bool oom, too_big, too_slow;
} dfa_build;

static uint64_t hash_set(const int32_t *s, int32_t n) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    for (int32_t i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static bool ensure_nodes(dfa_build *d, int32_t need) {
    if (need <= d->cap) return true;
    if (need > MAX_DFA_NODES) {
        d->too_big = true;
        return false;
    }
    int32_t c = d->cap ? d->cap * 2 : 256;
    while (c < need)
        c *= 2;
    int32_t *nx = realloc(d->next, (size_t)c * 256 * sizeof *nx);
    if (nx) d->next = nx;
    uint8_t *f = realloc(d->final, (size_t)c);
    if (f) d->final = f;
    int32_t *r = realloc(d->rule, (size_t)c * sizeof *r);
    if (r) d->rule = r;
    int32_t *ro = realloc(d->ref_off, (size_t)(c + 1) * sizeof *ro);
    if (ro) d->ref_off = ro;
    int32_t *so = realloc(d->set_off, (size_t)c * sizeof *so);
    if (so) d->set_off = so;
    int32_t *sl = realloc(d->set_len, (size_t)c * sizeof *sl);
    if (sl) d->set_len = sl;
    if (!nx || !f || !r || !ro || !so || !sl) {
        d->oom = true;
        return false;
    }
    d->cap = c;
    return true;
}

static void ht_reset(dfa_build *d, uint32_t size) {
    free(d->ht);
    d->ht = malloc(size * sizeof *d->ht);
    if (!d->ht) {
        d->oom = true;
        return;
    }
    memset(d->ht, 0xff, size * sizeof *d->ht);
    d->ht_mask = size - 1;
}

static void ht_insert(dfa_build *d, int32_t node) {
    int32_t l = node - d->base;
    uint64_t h = hash_set(d->sets + d->set_off[l], d->set_len[l]);
    uint32_t i = (uint32_t)h & d->ht_mask;
    while (d->ht[i] >= 0)
        i = (i + 1) & d->ht_mask;
    d->ht[i] = node;
}

/* The node for NFA-state set s[0..n) (sorted, closed): existing or new. */
static int32_t intern_set(dfa_build *d, const int32_t *s, int32_t n, bool *is_new) {
    *is_new = false;
    uint64_t h = hash_set(s, n);
    uint32_t i = (uint32_t)h & d->ht_mask;
    for (; d->ht[i] >= 0; i = (i + 1) & d->ht_mask) {
        int32_t l = d->ht[i] - d->base;
        if (d->set_len[l] == n && memcmp(d->sets + d->set_off[l], s, (size_t)n * sizeof *s) == 0)
            return d->ht[i];
    }
    int32_t node = d->n;
    if (!ensure_nodes(d, node + 1)) return -1;
    if (d->n_sets_int + n > d->cap_sets_int) {
        int32_t c = d->cap_sets_int ? d->cap_sets_int : 1024;
        while (c < d->n_sets_int + n)
            c *= 2;
        int32_t *p = realloc(d->sets, (size_t)c * sizeof *p);
        if (!p) {
            d->oom = true;
            return -1;
        }
        d->sets = p;
        d->cap_sets_int = c;
    }
    int32_t l = node - d->base;
    d->set_off[l] = d->n_sets_int;
    d->set_len[l] = n;
    memcpy(d->sets + d->n_sets_int, s, (size_t)n * sizeof *s);
    d->n_sets_int += n;
    d->n++;
    *is_new = true;
    if ((uint32_t)(d->n - d->base) * 2 > d->ht_mask + 1) { /* grow the table */
        uint32_t size = (d->ht_mask + 1) * 2;
        ht_reset(d, size);
        if (d->oom) return -1;
        for (int32_t k = d->base; k < d->n; k++)
            ht_insert(d, k);
    } else {
        ht_insert(d, node);
    }
    return node;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Epsilon closure of set (in place; mark/stack are scratch of n_states). */
static int32_t closure(const nfa *a, const adj *j, int32_t *set, int32_t n, uint32_t *mark,
                       uint32_t epoch, int32_t *stack) {
    int32_t sp = 0;
    for (int32_t i = 0; i < n; i++) {
        mark[set[i]] = epoch;
        stack[sp++] = set[i];
    }
    while (sp) {
        int32_t s = stack[--sp];
        for (int32_t k = j->off[s]; k < j->off[s + 1]; k++) {
            const nedge *e = &a->e[j->ix[k]];
            if (e->kind == E_EPS && mark[e->to] != epoch) {
                mark[e->to] = epoch;
                set[n++] = e->to;
                stack[sp++] = e->to;
            }
        }
    }
    qsort(set, (size_t)n, sizeof *set, cmp_i32);
    return n;
}

static pagoda_status compile_rule(dfa_build *d, const gx_builder *b, int32_t rule,
                                  int32_t *start_out) {
    nfa a = {.b = b};
    int32_t s0 = nstate(&a);
    int32_t end = frag(&a, b->rules[rule].expr, s0, 0);
    if (a.too_big) {
        free(a.e);
        return pg_error(PAGODA_ERR_LIMIT, "grammar: rule '%s' is too large (repetition bounds?)",
                        b->rules[rule].name);
    }
    if (a.oom) {
        free(a.e);
        return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    }
    int32_t ns = a.n_states;
    adj j = {calloc((size_t)ns + 1, sizeof(int32_t)),
             malloc((size_t)(a.n_e + 1) * sizeof(int32_t))};
    uint32_t *mark = calloc((size_t)ns, sizeof *mark);
    int32_t *stack = malloc((size_t)ns * sizeof *stack),
            *tmp = malloc((size_t)(ns + a.n_e + 1) * sizeof *tmp);
    int32_t *bucket_n = NULL, *bucket = NULL;
    pagoda_status st = PAGODA_OK;
    if (!j.off || !j.ix || !mark || !stack || !tmp) {
        st = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (int32_t k = 0; k < a.n_e; k++)
        j.off[a.e[k].from + 1]++;
    for (int32_t s = 0; s < ns; s++)
        j.off[s + 1] += j.off[s];
    {
        int32_t *fill = malloc((size_t)ns * sizeof *fill);
        if (!fill) {
            st = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
            goto done;
        }
        memcpy(fill, j.off, (size_t)ns * sizeof *fill);
        for (int32_t k = 0; k < a.n_e; k++)
            j.ix[fill[a.e[k].from]++] = k;
        free(fill);
    }
    d->base = d->n;
    d->n_sets_int = 0;
    ht_reset(d, 256);
    uint32_t epoch = 1;
    tmp[0] = s0;
    int32_t n0 = closure(&a, &j, tmp, 1, mark, epoch++, stack);
    bool is_new;
    int32_t start = intern_set(d, tmp, n0, &is_new);
    if (start < 0) goto fail;
    *start_out = start;
    /* per-byte target lists: counts then members (reused per node) */
    bucket_n = malloc(257 * sizeof *bucket_n);
    if (!bucket_n) {
        st = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        goto done;
    }
    for (int32_t node = start; node < d->n; node++) {
        if (d->work > MAX_WORK) {
            d->too_slow = true;
            goto fail;
        }
        int32_t l = node - d->base;
        /* copy: d->sets may move while interning */
        int32_t sn = d->set_len[l];
        int32_t *set = malloc((size_t)(sn ? sn : 1) * sizeof *set);
        if (!set) goto fail;
        memcpy(set, d->sets + d->set_off[l], (size_t)sn * sizeof *set);
        d->final[node] = 0;
        d->rule[node] = rule;
        d->work += (uint64_t)sn + 256;
        for (int32_t i = 0; i < sn; i++)
            if (set[i] == end) d->final[node] = 1;
        /* bytes */
        memset(bucket_n, 0, 257 * sizeof *bucket_n);
        for (int32_t i = 0; i < sn; i++)
            for (int32_t k = j.off[set[i]]; k < j.off[set[i] + 1]; k++) {
                const nedge *e = &a.e[j.ix[k]];
                if (e->kind != E_CLS) continue;
                const uint64_t *c = b->cls[e->arg];
                d->work += 512; /* this scan and the fill below */
                for (int by = 0; by < 256; by++)
                    if (c[by >> 6] >> (by & 63) & 1) bucket_n[by + 1]++;
            }
        for (int by = 0; by < 256; by++)
            bucket_n[by + 1] += bucket_n[by];
        int32_t total = bucket_n[256];
        free(bucket);
        bucket = malloc((size_t)(total ? total : 1) * sizeof *bucket);
        int32_t fillp[256];
        if (!bucket) {
            free(set);
            goto fail;
        }
        memcpy(fillp, bucket_n, sizeof fillp);
        for (int32_t i = 0; i < sn; i++)
            for (int32_t k = j.off[set[i]]; k < j.off[set[i] + 1]; k++) {
                const nedge *e = &a.e[j.ix[k]];
                if (e->kind != E_CLS) continue;
                const uint64_t *c = b->cls[e->arg];
                for (int by = 0; by < 256; by++)
                    if (c[by >> 6] >> (by & 63) & 1) bucket[fillp[by]++] = e->to;
            }
        int32_t *row = d->next + (size_t)node * 256;
        int32_t prev_n = -1, prev_t = -1, prev_by = -1;
        for (int by = 0; by < 256; by++) {
            int32_t cnt = bucket_n[by + 1] - bucket_n[by];
            row = d->next + (size_t)node * 256; /* d->next may move */
            if (cnt == 0) {
                row[by] = -1;
                continue;
            }
            /* same target list as the previous byte: same node */
            if (prev_by >= 0 && cnt == prev_n &&
                memcmp(bucket + bucket_n[by], bucket + bucket_n[prev_by],
                       (size_t)cnt * sizeof *bucket) == 0) {
                row[by] = prev_t;
                continue;
            }
            memcpy(tmp, bucket + bucket_n[by], (size_t)cnt * sizeof *tmp);
            /* dedupe via the closure's marks */
            int32_t m = 0;
            for (int32_t i = 0; i < cnt; i++) {
                if (mark[tmp[i]] == epoch) continue;
                mark[tmp[i]] = epoch;
                tmp[m++] = tmp[i];
            }
            epoch++;
            m = closure(&a, &j, tmp, m, mark, epoch++, stack);
            d->work += (uint64_t)m;
            int32_t t = intern_set(d, tmp, m, &is_new);
            if (t < 0) {
                free(set);
                goto fail;
            }
            row = d->next + (size_t)node * 256;
            row[by] = t;
            prev_n = cnt;
            prev_t = t;
            prev_by = by;
        }
        /* rule references: group targets by rule */
        d->ref_off[node] = d->n_refs;
        for (int32_t i = 0; i < sn; i++)
            for (int32_t k = j.off[set[i]]; k < j.off[set[i] + 1]; k++) {
                const nedge *e = &a.e[j.ix[k]];
                if (e->kind != E_REF) continue;
                bool seen = false;
                for (int32_t r = d->ref_off[node]; r < d->n_refs; r++)
                    seen |= d->refs[r].rule == e->arg;
                if (seen) continue;
                int32_t m = 0;
                for (int32_t i2 = 0; i2 < sn; i2++)
                    for (int32_t k2 = j.off[set[i2]]; k2 < j.off[set[i2] + 1]; k2++) {
                        const nedge *e2 = &a.e[j.ix[k2]];
                        if (e2->kind == E_REF && e2->arg == e->arg && mark[e2->to] != epoch) {
                            mark[e2->to] = epoch;
                            tmp[m++] = e2->to;
                        }
                    }
                epoch++;
                m = closure(&a, &j, tmp, m, mark, epoch++, stack);
                int32_t t = intern_set(d, tmp, m, &is_new);
                if (t < 0) {
                    free(set);
                    goto fail;
                }
                if (d->n_refs == d->cap_refs) {
                    int32_t c = d->cap_refs ? d->cap_refs * 2 : 256;
                    void *p = realloc(d->refs, (size_t)c * sizeof *d->refs);
                    if (!p) {
                        free(set);
                        goto fail;
                    }
                    d->refs = p;
                    d->cap_refs = c;
                }
                d->refs[d->n_refs++] = (g_ref){.rule = e->arg, .ret = t};
            }
        d->ref_off[node + 1] = d->n_refs;
        free(set);
    }
    goto done;
fail:
    if (d->too_slow)
        st = pg_error(PAGODA_ERR_LIMIT,
                      "grammar: too complex to compile (more than %llu automaton steps, rule "
                      "'%s'): bounded repetitions of '.' or of wide character classes multiply "
                      "the states; use fewer or narrower ones",
                      (unsigned long long)MAX_WORK, b->rules[rule].name);
    else if (d->too_big)
        st = pg_error(PAGODA_ERR_LIMIT, "grammar: more than %d automaton nodes (rule '%s')",
                      MAX_DFA_NODES, b->rules[rule].name);
    else
        st = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
done:
    free(bucket);
    free(bucket_n);
    free(a.e);
    free(j.off);
    free(j.ix);
    free(mark);
    free(stack);
    free(tmp);
    return st;
}

void pg_gram_free(pg_gram *g) {
    if (!g) return;
    free(g->next);
    free(g->final);
    free(g->has_bytes);
    free(g->tail);
    free(g->ref_off);
    free(g->refs);
    free(g->rule_start);
    free(g->node_rule);
    if (g->rule_names)
        for (int32_t i = 0; i < g->n_rules; i++)
            free(g->rule_names[i]);
    free(g->rule_names);
    free(g);
}

int32_t pg_gram_num_nodes(const pg_gram *g) {
    return g->n_nodes;
}

/* Rules reachable from root through references. */
static void reach(const pg_gram *g, int32_t rule, uint8_t *seen) {
    if (seen[rule]) return;
    seen[rule] = 1;
    for (int32_t n = 0; n < g->n_nodes; n++) {
        if (g->node_rule[n] != rule) continue;
        for (int32_t k = g->ref_off[n]; k < g->ref_off[n + 1]; k++)
            reach(g, g->refs[k].rule, seen);
    }
}

static pagoda_status check(pg_gram *g) {
    int32_t R = g->n_rules, N = g->n_nodes;
    uint8_t *used = calloc((size_t)R, 1), *prod = calloc((size_t)R, 1),
            *nullable = calloc((size_t)R, 1), *ok = calloc((size_t)N, 1);
    int32_t *lstack = malloc((size_t)(N + 1) * sizeof *lstack);
    uint8_t *lvis = calloc((size_t)N, 1);
    pagoda_status st = PAGODA_OK;
    if (!used || !prod || !nullable || !ok || !lstack || !lvis) {
        st = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        goto out;
    }
    reach(g, g->root, used);
    /* productive: a node is ok when final, or a byte edge / ref to a
     * productive rule leads to an ok node (fixpoint) */
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t n = N - 1; n >= 0; n--) {
            if (ok[n]) continue;
            bool v = g->final[n];
            for (int b = 0; b < 256 && !v; b++)
                v = g->next[(size_t)n * 256 + b] >= 0 && ok[g->next[(size_t)n * 256 + b]];
            for (int32_t k = g->ref_off[n]; k < g->ref_off[n + 1] && !v; k++)
                v = prod[g->refs[k].rule] && ok[g->refs[k].ret];
            if (v) {
                ok[n] = 1;
                changed = true;
                if (n == g->rule_start[g->node_rule[n]]) prod[g->node_rule[n]] = 1;
            }
        }
    }
    for (int32_t r = 0; r < R; r++)
        if (used[r] && !prod[r]) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "grammar: rule '%s' can never complete (no finite derivation)",
                          g->rule_names[r]);
            goto out;
        }
    /* nodes that cannot complete (a byte edge into a dead branch) would break
     * "a non-empty state can always be completed": refuse them */
    for (int32_t n = 0; n < N; n++)
        if (used[g->node_rule[n]] && !ok[n]) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "grammar: rule '%s' has a branch that can never complete",
                          g->rule_names[g->node_rule[n]]);
            goto out;
        }
    /* nullable rules: the start reaches a final node through refs to nullable rules */
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < R; r++) {
            if (nullable[r]) continue;
            int32_t sp = 0;
            memset(lvis, 0, (size_t)N);
            lstack[sp++] = g->rule_start[r];
            lvis[g->rule_start[r]] = 1;
            bool v = false;
            while (sp && !v) {
                int32_t n = lstack[--sp];
                if (g->final[n]) v = true;
                for (int32_t k = g->ref_off[n]; k < g->ref_off[n + 1]; k++)
                    if (nullable[g->refs[k].rule] && !lvis[g->refs[k].ret]) {
                        lvis[g->refs[k].ret] = 1;
                        lstack[sp++] = g->refs[k].ret;
                    }
            }
            if (v) {
                nullable[r] = 1;
                changed = true;
            }
        }
    }
    /* left recursion: rule r reaches a push of r without consuming a byte */
    for (int32_t r = 0; r < R; r++) {
        if (!used[r]) continue;
        /* DFS over (node) through refs; a ref into rule q adds q's start */
        int32_t sp = 0;
        memset(lvis, 0, (size_t)N);
        lstack[sp++] = g->rule_start[r];
        lvis[g->rule_start[r]] = 1;
        while (sp) {
            int32_t n = lstack[--sp];
            for (int32_t k = g->ref_off[n]; k < g->ref_off[n + 1]; k++) {
                int32_t q = g->refs[k].rule;
                if (q == r) {
                    st = pg_error(PAGODA_ERR_INVALID_ARG,
                                  "grammar: rule '%s' is left-recursive (not supported)",
                                  g->rule_names[r]);
                    goto out;
                }
                int32_t qs = g->rule_start[q];
                if (!lvis[qs]) {
                    lvis[qs] = 1;
                    lstack[sp++] = qs;
                }
                if (nullable[q] && !lvis[g->refs[k].ret]) {
                    lvis[g->refs[k].ret] = 1;
                    lstack[sp++] = g->refs[k].ret;
                }
            }
        }
    }
out:
    free(used);
    free(prod);
    free(nullable);
    free(ok);
    free(lstack);
    free(lvis);
    return st;
}

pagoda_status g_compile(gx_builder *b, const char *root, pg_gram **out) {
    *out = NULL;
    if (b->oom) return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    int32_t root_id = -1;
    for (int32_t r = 0; r < b->n_rules; r++)
        if (strcmp(b->rules[r].name, root) == 0) root_id = r;
    if (root_id < 0 || b->rules[root_id].expr < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "grammar: no rule named '%s'", root);
    for (int32_t r = 0; r < b->n_rules; r++)
        if (b->rules[r].expr < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG, "grammar: rule '%s' is used but not defined",
                            b->rules[r].name);
    dfa_build d = {0};
    pg_gram *g = calloc(1, sizeof *g);
    pagoda_status st = PAGODA_OK;
    if (!g || !(g->rule_start = malloc((size_t)b->n_rules * sizeof(int32_t))) ||
        !(g->rule_names = calloc((size_t)b->n_rules, sizeof(char *)))) {
        st = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        goto fail;
    }
    g->n_rules = b->n_rules;
    for (int32_t r = 0; r < b->n_rules; r++)
        if (!(g->rule_names[r] = strdup(b->rules[r].name))) {
            st = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
            goto fail;
        }
    for (int32_t r = 0; r < b->n_rules; r++)
        if ((st = compile_rule(&d, b, r, &g->rule_start[r])) != PAGODA_OK) goto fail;
    g->n_nodes = d.n;
    g->root = root_id;
    g->next = d.next;
    g->final = d.final;
    g->node_rule = d.rule;
    g->refs = d.refs;
    g->ref_off = d.ref_off;
    d.next = NULL;
    d.final = NULL;
    d.rule = NULL;
    d.refs = NULL;
    d.ref_off = NULL;
    g->has_bytes = calloc((size_t)g->n_nodes + 1, 1);
    g->tail = calloc((size_t)g->n_nodes + 1, 1);
    if (!g->has_bytes || !g->tail) {
        st = pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
        goto fail;
    }
    for (int32_t n = 0; n < g->n_nodes; n++) {
        for (int c = 0; c < 256 && !g->has_bytes[n]; c++)
            g->has_bytes[n] = g->next[(size_t)n * 256 + c] >= 0;
        g->tail[n] = g->final[n] && !g->has_bytes[n] && g->ref_off[n] == g->ref_off[n + 1];
    }
    if ((st = check(g)) != PAGODA_OK) goto fail;
    free(d.sets);
    free(d.set_off);
    free(d.set_len);
    free(d.ht);
    *out = g;
    return PAGODA_OK;
fail:
    free(d.next);
    free(d.final);
    free(d.rule);
    free(d.refs);
    free(d.ref_off);
    free(d.sets);
    free(d.set_off);
    free(d.set_len);
    free(d.ht);
    pg_gram_free(g);
    return st;
}
