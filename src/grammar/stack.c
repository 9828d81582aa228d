/* Hash-consed stacks and the automaton's step (closure + byte advance).
 * A stack id stands for (top node, parent stack id); interning makes equal
 * stacks equal ids, so a state is a small set of ints (graph-structured
 * stack). Pushing a rule from a node whose return target is a pure tail
 * (final, nothing after) reuses the caller's parent: tail calls keep
 * right-recursive rules at a constant depth. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

bool g_stacks_init(g_stacks *s) {
    memset(s, 0, sizeof *s);
    s->ht_mask = 1023;
    s->ht = malloc(1024 * sizeof *s->ht);
    if (!s->ht) return false;
    memset(s->ht, 0xff, 1024 * sizeof *s->ht);
    s->epoch = 1;
    return true;
}

void g_stacks_free(g_stacks *s) {
    free(s->node);
    free(s->parent);
    free(s->mark);
    free(s->ht);
    memset(s, 0, sizeof *s);
}

void g_stacks_clear(g_stacks *s) {
    s->n = 0;
    memset(s->ht, 0xff, ((size_t)s->ht_mask + 1) * sizeof *s->ht);
}

static inline uint32_t hpair(int32_t node, int32_t parent) {
    uint64_t h = ((uint64_t)(uint32_t)node << 32 | (uint32_t)parent) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(h >> 32);
}

static bool rehash(g_stacks *s, uint32_t size) {
    int32_t *ht = malloc((size_t)size * sizeof *ht);
    if (!ht) return false;
    memset(ht, 0xff, (size_t)size * sizeof *ht);
    for (int32_t i = 0; i < s->n; i++) {
        uint32_t k = hpair(s->node[i], s->parent[i]) & (size - 1);
        while (ht[k] >= 0)
            k = (k + 1) & (size - 1);
        ht[k] = i;
    }
    free(s->ht);
    s->ht = ht;
    s->ht_mask = size - 1;
    return true;
}

int32_t g_stacks_intern(g_stacks *s, int32_t node, int32_t parent) {
    uint32_t k = hpair(node, parent) & s->ht_mask;
    for (int32_t id; (id = s->ht[k]) >= 0; k = (k + 1) & s->ht_mask)
        if (s->node[id] == node && s->parent[id] == parent) return id;
    if (s->n == s->cap) {
        int32_t c = s->cap ? s->cap * 2 : 256;
        int32_t *a = realloc(s->node, (size_t)c * sizeof *a);
        if (a) s->node = a;
        int32_t *p = realloc(s->parent, (size_t)c * sizeof *p);
        if (p) s->parent = p;
        uint32_t *m = realloc(s->mark, (size_t)c * sizeof *m);
        if (m) {
            memset(m + s->cap, 0, (size_t)(c - s->cap) * sizeof *m);
            s->mark = m;
        }
        if (!a || !p || !m) return -1;
        s->cap = c;
    }
    int32_t id = s->n++;
    s->node[id] = node;
    s->parent[id] = parent;
    s->mark[id] = 0;
    if ((uint32_t)s->n * 2 > s->ht_mask + 1) {
        if (!rehash(s, (s->ht_mask + 1) * 2)) {
            s->n--;
            return -1;
        }
    } else {
        s->ht[k] = id;
    }
    return id;
}

void g_set_free(g_set *s) {
    free(s->ids);
    memset(s, 0, sizeof *s);
}

static void set_push(g_set *o, int32_t id) {
    if (o->n == o->cap) {
        int32_t c = o->cap ? o->cap * 2 : 16;
        int32_t *p = realloc(o->ids, (size_t)c * sizeof *p);
        if (!p) {
            o->oom = true;
            return;
        }
        o->ids = p;
        o->cap = c;
    }
    o->ids[o->n++] = id;
}

void g_begin(g_stacks *st, g_set *out) {
    if (++st->epoch == 0) { /* wrapped: clear all marks */
        memset(st->mark, 0, (size_t)st->cap * sizeof *st->mark);
        st->epoch = 1;
    }
    out->n = 0;
    out->accept = out->popped = out->oom = false;
}

/* Iterative closure with an explicit work list (the set itself is not the
 * work list: stacks without byte edges are expanded but not kept). */
void g_expand(const pg_gram *g, g_stacks *st, int32_t s0, g_set *out) {
    int32_t work_buf[64], *work = work_buf, wcap = 64, wn = 0;
    if (st->mark[s0] == st->epoch) return;
    st->mark[s0] = st->epoch;
    work[wn++] = s0;
    while (wn) {
        if (st->budget && (st->work += 1) > st->budget) {
            st->over = true;
            out->oom = true;
            break;
        }
        int32_t s = work[--wn];
        int32_t node = st->node[s], parent = st->parent[s];
        if (g->has_bytes[node]) set_push(out, s);
        int32_t want[2], nw = 0; /* at most: pushes (many) + a return (1) */
        st->work += (uint64_t)(g->ref_off[node + 1] - g->ref_off[node]);
        for (int32_t k = g->ref_off[node]; k < g->ref_off[node + 1]; k++) {
            const g_ref *r = &g->refs[k];
            int32_t p = parent;
            if (!g->tail[r->ret]) {
                p = g_stacks_intern(st, r->ret, parent);
                if (p < 0) {
                    out->oom = true;
                    continue;
                }
            }
            int32_t t = g_stacks_intern(st, g->rule_start[r->rule], p);
            if (t < 0) {
                out->oom = true;
                continue;
            }
            if (st->mark[t] == st->epoch) continue;
            st->mark[t] = st->epoch;
            if (wn + 2 > wcap) {
                int32_t c = wcap * 2;
                int32_t *q = work == work_buf ? malloc((size_t)c * sizeof *q)
                                              : realloc(work, (size_t)c * sizeof *q);
                if (!q) {
                    out->oom = true;
                    break;
                }
                if (work == work_buf) memcpy(q, work_buf, sizeof work_buf);
                work = q;
                wcap = c;
            }
            work[wn++] = t;
        }
        if (g->final[node]) {
            if (parent == G_ROOT)
                out->accept = true;
            else if (parent == G_SENTINEL)
                out->popped = true;
            else if (st->mark[parent] != st->epoch)
                want[nw++] = parent;
        }
        for (int32_t i = 0; i < nw; i++) {
            st->mark[want[i]] = st->epoch;
            if (wn + 1 > wcap) {
                int32_t c = wcap * 2;
                int32_t *q = work == work_buf ? malloc((size_t)c * sizeof *q)
                                              : realloc(work, (size_t)c * sizeof *q);
                if (!q) {
                    out->oom = true;
                    break;
                }
                if (work == work_buf) memcpy(q, work_buf, sizeof work_buf);
                work = q;
                wcap = c;
            }
            work[wn++] = want[i];
        }
    }
    if (work != work_buf) free(work);
}

void g_advance(const pg_gram *g, g_stacks *st, const g_set *in, uint8_t c, g_set *out) {
    g_begin(st, out);
    for (int32_t i = 0; i < in->n; i++) {
        if (st->budget && (st->work += 1) > st->budget) st->over = true;
        if (st->over) {
            out->oom = true;
            return;
        }
        int32_t s = in->ids[i];
        int32_t nx = g->next[(size_t)st->node[s] * 256 + c];
        if (nx < 0) continue;
        int32_t t = g_stacks_intern(st, nx, st->parent[s]);
        if (t < 0) {
            out->oom = true;
            continue;
        }
        g_expand(g, st, t, out);
    }
}

void g_start(const pg_gram *g, g_stacks *st, g_set *out) {
    g_begin(st, out);
    int32_t t = g_stacks_intern(st, g->rule_start[g->root], G_ROOT);
    if (t < 0) {
        out->oom = true;
        return;
    }
    g_expand(g, st, t, out);
}
