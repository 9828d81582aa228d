/* The paged-attention driver: work planning, split-KV, the per-partition
 * online softmax loop over KV blocks and the fixed-order merge. The ISA
 * specific work (QK^T, the softmax step with a vector exp, PV) is done by the
 * micro-kernels of a pg_attn_ukernels set (kernels/attention.h).
 *
 * Work unit: (request, KV head, tile of up to T query tokens); its rows are
 * the T tokens x G query heads sharing that KV head (G = n_heads /
 * n_kv_heads), so every K/V block tile is read once for all of them.
 * T = max(1, ROWS_TARGET / G). A unit walks its visible KV range in fixed
 * partitions of pg_attn_partition_tokens(block_size) tokens, stepping over
 * super-blocks of pg_attn_superblock_tokens(block_size) tokens (aligned runs
 * of consecutive blocks, 128 tokens for blocks of 16..128: one micro-kernel
 * call covers them all); each partition
 * starts a fresh online-softmax state (m, l, acc) and is merged into the
 * unit's running state in partition order (merge_rows). Split-KV runs the
 * partitions of a unit as separate work items on any thread, stores their
 * states in the scratch, and merges them afterwards with the same routine in
 * the same order, so splitting changes the speed, never the bits. */
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attention.h"
#include "kernels/dispatch.h"

enum {
    ROWS_TARGET = 32,    /* rows (tokens x heads) per unit when the group is small */
    SPLIT_MAX_Q = 16,    /* only requests with at most this many query tokens split */
    SPLIT_FACTOR = 4,    /* split when units < SPLIT_FACTOR * threads */
    PARTITION_MIN = 512, /* KV tokens per partition (rounded up to a super-block multiple) */
    SUPERBLOCK_MIN = 128 /* KV tokens per softmax step (whole blocks) */
};

int32_t pg_attn_superblock_tokens(int32_t block_size) {
    if (block_size <= 0) return SUPERBLOCK_MIN;
    return block_size >= SUPERBLOCK_MIN ? block_size : SUPERBLOCK_MIN / block_size * block_size;
}

int32_t pg_attn_partition_tokens(int32_t block_size) {
    int32_t sb = pg_attn_superblock_tokens(block_size);
    int32_t pt = sb >= PARTITION_MIN ? sb : PARTITION_MIN;
    return (pt + sb - 1) / sb * sb;
}

typedef struct unit {
    int32_t seq, kvh, t0, t1; /* query tokens [t0, t1) of request seq */
    int32_t part0, nparts;    /* partitions [part0, part0 + nparts) it visits */
    int64_t partial_off;      /* floats into the partials area (split units), else -1 */
} unit;

typedef struct item {
    int32_t unit, part; /* part -1: the whole unit (all partitions + output) */
} item;

typedef struct plan {
    int32_t group, tile_tokens, rows_max, part_tokens, sb_tokens;
    int64_t n_units, n_items;
    size_t ws_floats;      /* per thread */
    size_t partial_floats; /* split-KV partial states */
    bool split;
    size_t bytes; /* total scratch */
} plan;

static size_t up16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* Visible KV positions of a unit: [lo, hi] (non-causal: all keys, hi = kv_len - 1,
 * which is -1 for an empty KV). */
static void unit_range(const pg_attn_params *p, const pg_attn_batch *b, int32_t seq, int32_t t0,
                       int32_t t1, int32_t *lo, int32_t *hi) {
    if (p->non_causal) {
        *lo = 0;
        *hi = b->seq_lens[seq] - 1;
        return;
    }
    int32_t ql = b->cu_seqlens_q[seq + 1] - b->cu_seqlens_q[seq];
    int32_t pos0 = b->seq_lens[seq] - ql + t0;
    *hi = pos0 + (t1 - t0) - 1;
    *lo = p->sliding_window > 0 && pos0 - p->sliding_window + 1 > 0 ? pos0 - p->sliding_window + 1
                                                                    : 0;
}

/* Count units/items and sizes; with `units`/`items` non-NULL also fill them. */
static void make_plan(const pg_attn_params *p, const pg_attn_batch *b, const pg_paged_kv *kv,
                      int n_threads, bool allow_split, plan *pl, unit *units, item *items) {
    memset(pl, 0, sizeof *pl);
    pl->group = p->n_heads / p->n_kv_heads;
    pl->tile_tokens = pl->group >= ROWS_TARGET ? 1 : ROWS_TARGET / pl->group;
    pl->rows_max = pl->group * pl->tile_tokens;
    pl->part_tokens = pg_attn_partition_tokens(kv->block_size);
    pl->sb_tokens = pg_attn_superblock_tokens(kv->block_size);
    const size_t hd = (size_t)p->head_dim, R = (size_t)pl->rows_max;
    pl->ws_floats = up16(R * hd) * 3 + up16(R * (size_t)pl->sb_tokens) + up16(R) * 4;
    int64_t nu = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t ql = b->cu_seqlens_q[s + 1] - b->cu_seqlens_q[s];
        nu += (int64_t)((ql + pl->tile_tokens - 1) / pl->tile_tokens) * p->n_kv_heads;
    }
    pl->n_units = nu;
    pl->split = allow_split && n_threads > 1 && nu < (int64_t)SPLIT_FACTOR * n_threads;
    int64_t u = 0, it = 0;
    size_t poff = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t ql = b->cu_seqlens_q[s + 1] - b->cu_seqlens_q[s];
        for (int32_t t0 = 0; t0 < ql; t0 += pl->tile_tokens) {
            int32_t t1 = t0 + pl->tile_tokens < ql ? t0 + pl->tile_tokens : ql;
            int32_t lo, hi;
            unit_range(p, b, s, t0, t1, &lo, &hi);
            int32_t part0 = lo / pl->part_tokens,
                    nparts = hi < 0 ? 1 : hi / pl->part_tokens - part0 + 1;
            bool split = pl->split && ql <= SPLIT_MAX_Q && nparts > 1;
            size_t rows = (size_t)pl->group * (size_t)(t1 - t0);
            for (int32_t h = 0; h < p->n_kv_heads; h++, u++) {
                if (units)
                    units[u] = (unit){s, h, t0, t1, part0, nparts, split ? (int64_t)poff : -1};
                if (split) {
                    for (int32_t k = 0; k < nparts; k++, it++)
                        if (items) items[it] = (item){(int32_t)u, part0 + k};
                    poff += (size_t)nparts * rows * (hd + 2);
                } else {
                    if (items) items[it] = (item){(int32_t)u, -1};
                    it++;
                }
            }
        }
    }
    pl->n_items = it;
    pl->partial_floats = poff;
    pl->bytes =
        64 + (size_t)pl->n_units * sizeof(unit) + (size_t)pl->n_items * sizeof(item) + 64 +
        (up16(poff) + pl->ws_floats * (size_t)(n_threads > 0 ? n_threads : 1)) * sizeof(float);
}

size_t pg_attention_scratch_bytes(const pg_attn_params *p, const pg_attn_batch *b,
                                  const pg_paged_kv *kv, int n_threads) {
    if (!p || !b || !kv || p->n_kv_heads < 1 || p->n_heads < 1 || p->head_dim < 1 ||
        kv->block_size < 1 || !b->cu_seqlens_q || !b->seq_lens)
        return 0;
    plan pl;
    make_plan(p, b, kv, n_threads, true, &pl, NULL, NULL);
    return pl.bytes;
}

/* ---- execution -------------------------------------------------------------------- */

typedef struct ctx {
    const pg_attn_params *p;
    const pg_attn_batch *b;
    const pg_paged_kv *kv;
    const pg_attn_ukernels *uk;
    const float *q;
    size_t q_stride, out_stride;
    float *out;
    const plan *pl;
    const unit *units;
    const item *items;
    float *partials, *ws;
    const int64_t *split_units; /* phase 2: indices of split units */
    int64_t n_split_units;
    atomic_llong next;
} ctx;

/* Per-thread tiles. */
typedef struct wsp {
    float *q, *s, *tm, *tl, *tacc, *sm, *sl, *sacc;
} wsp;

static wsp thread_ws(const ctx *c, int tid) {
    const size_t hd = (size_t)c->p->head_dim, R = (size_t)c->pl->rows_max;
    float *w = c->ws + (size_t)tid * c->pl->ws_floats;
    wsp x;
    x.q = w, w += up16(R * hd);
    x.tacc = w, w += up16(R * hd);
    x.sacc = w, w += up16(R * hd);
    x.s = w, w += up16(R * (size_t)c->pl->sb_tokens);
    x.tm = w, w += up16(R);
    x.tl = w, w += up16(R);
    x.sm = w, w += up16(R);
    x.sl = w;
    return x;
}

static void state_reset(float *m, float *l, float *acc, int rows, int hd) {
    for (int r = 0; r < rows; r++)
        m[r] = -INFINITY, l[r] = 0;
    memset(acc, 0, (size_t)rows * (size_t)hd * sizeof *acc);
}

/* S <- merge(S, T) row by row; the one place partition results combine. */
static void merge_rows(float *sm, float *sl, float *sacc, const float *tm, const float *tl,
                       const float *tacc, int rows, int hd) {
    for (int r = 0; r < rows; r++) {
        float *a = sacc + (size_t)r * hd;
        const float *t = tacc + (size_t)r * hd;
        if (tm[r] == -INFINITY) continue;
        if (sm[r] == -INFINITY) {
            sm[r] = tm[r], sl[r] = tl[r];
            memcpy(a, t, (size_t)hd * sizeof *a);
            continue;
        }
        float mn = sm[r] > tm[r] ? sm[r] : tm[r];
        float ea = expf(sm[r] - mn), eb = expf(tm[r] - mn);
        sl[r] = sl[r] * ea + tl[r] * eb;
        for (int d = 0; d < hd; d++)
            a[d] = a[d] * ea + t[d] * eb;
        sm[r] = mn;
    }
}

/* out rows of unit u from its final state (sinks enter here). */
static void finalize(const ctx *c, const unit *u, const float *sm, const float *sl,
                     const float *sacc) {
    const int hd = c->p->head_dim, G = c->pl->group;
    const int32_t q0 = c->b->cu_seqlens_q[u->seq];
    for (int32_t tt = 0; tt < u->t1 - u->t0; tt++)
        for (int g = 0; g < G; g++) {
            int r = tt * G + g, h = u->kvh * G + g;
            float m = sm[r], l = sl[r], alpha = 1;
            if (c->p->sinks) {
                float sk = c->p->sinks[h], mn = m > sk ? m : sk;
                alpha = expf(m - mn);
                l = l * alpha + expf(sk - mn);
            }
            float inv = l > 0 ? alpha / l : 0;
            const float *a = sacc + (size_t)r * hd;
            float *o = c->out + (size_t)(q0 + u->t0 + tt) * c->out_stride + (size_t)h * hd;
            for (int d = 0; d < hd; d++)
                o[d] = a[d] * inv;
        }
}

/* The online-softmax state of unit u over partition `part` into (m, l, acc). */
static void run_partition(const ctx *c, const unit *u, int32_t part, const wsp *w, float *m,
                          float *l, float *acc) {
    const pg_attn_params *p = c->p;
    const pg_paged_kv *kv = c->kv;
    const int hd = p->head_dim, G = c->pl->group, bs = kv->block_size;
    const int rows = G * (u->t1 - u->t0);
    state_reset(m, l, acc, rows, hd);
    int32_t lo, hi;
    unit_range(p, c->b, u->seq, u->t0, u->t1, &lo, &hi);
    const int32_t pt = c->pl->part_tokens;
    int32_t kstart = part * pt > lo ? part * pt : lo,
            kend = (part + 1) * pt < hi + 1 ? (part + 1) * pt : hi + 1;
    if (kstart >= kend) return;
    const int32_t pos0 = hi - (u->t1 - u->t0) + 1;
    const int32_t sb = c->pl->sb_tokens;
    const size_t tile = (size_t)bs * (size_t)hd * (kv->dtype == PG_F32 ? 4 : 2);
    const int32_t *table = c->b->block_tables[u->seq];
    const void *kt[SUPERBLOCK_MIN / PG_KV_MIN_BLOCK_SIZE],
        *vt[SUPERBLOCK_MIN / PG_KV_MIN_BLOCK_SIZE];
    for (int32_t si = kstart / sb; si <= (kend - 1) / sb; si++) {
        const int32_t b0 = si * sb;
        const int nk = kend - b0 < sb ? kend - b0 : sb;
        /* blocks wholly before kstart (a sliding window's start inside the
         * super-block) may be null in the block table and are not read: the
         * micro-kernels start at the first visible tile (column `skip` of the
         * score rows). Reading them with a zero weight would not do: a
         * never-written slot may hold a NaN, and 0 * NaN poisons the sum. */
        const int first = kstart > b0 ? (kstart - b0) / bs : 0, skip = first * bs;
        for (int t = first; t * bs < nk; t++) {
            const size_t off =
                ((size_t)table[b0 / bs + t] * (size_t)kv->num_kv_heads + (size_t)u->kvh) * tile;
            kt[t] = (const char *)kv->k + off;
            vt[t] = (const char *)kv->v + off;
        }
        float *s = w->s + skip; /* scores of keys b0 + skip ... b0 + nk - 1 */
        c->uk->qk(w->q, hd, rows, kt + first, bs, nk - skip, hd, p->scale, s, sb);
        if (p->softcap > 0)
            for (int r = 0; r < rows; r++)
                for (int j = skip; j < nk; j++) {
                    float *x = &w->s[(size_t)r * sb + j];
                    *x = p->softcap * tanhf(*x / p->softcap);
                }
        /* causal / window masks, only where the super-block crosses a row's bounds
         * (non-causal: every row sees every key of [kstart, kend), no mask) */
        if (!p->non_causal &&
            (b0 + nk - 1 > pos0 || (p->sliding_window > 0 && b0 < hi - p->sliding_window + 1)))
            for (int r = 0; r < rows; r++) {
                int32_t pos = pos0 + r / G;
                float *sr = w->s + (size_t)r * sb;
                for (int j = pos + 1 - b0 > skip ? pos + 1 - b0 : skip; j < nk; j++)
                    sr[j] = -INFINITY;
                if (p->sliding_window > 0)
                    for (int j = skip; j < nk && b0 + j <= pos - p->sliding_window; j++)
                        sr[j] = -INFINITY;
            }
        c->uk->softmax(s, sb, rows, nk - skip, m, l, acc, hd, hd);
        c->uk->pv(s, sb, rows, vt + first, bs, nk - skip, hd, acc, hd);
    }
}

static void load_q(const ctx *c, const unit *u, float *qbuf) {
    const int hd = c->p->head_dim, G = c->pl->group;
    const int32_t q0 = c->b->cu_seqlens_q[u->seq];
    for (int32_t tt = 0; tt < u->t1 - u->t0; tt++)
        memcpy(qbuf + (size_t)tt * G * hd,
               c->q + (size_t)(q0 + u->t0 + tt) * c->q_stride + (size_t)u->kvh * G * hd,
               (size_t)G * hd * sizeof *qbuf);
}

static void phase1(void *arg, int tid, int nthreads) {
    (void)nthreads;
    ctx *c = arg;
    wsp w = thread_ws(c, tid);
    const int hd = c->p->head_dim;
    for (;;) {
        long long i = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (i >= c->pl->n_items) break;
        const item *it = &c->items[i];
        const unit *u = &c->units[it->unit];
        const int rows = c->pl->group * (u->t1 - u->t0);
        load_q(c, u, w.q);
        if (it->part >= 0) { /* one partition of a split unit -> partials */
            float *dst = c->partials + u->partial_off +
                         (size_t)(it->part - u->part0) * (size_t)rows * (size_t)(hd + 2);
            run_partition(c, u, it->part, &w, dst, dst + rows, dst + 2 * rows);
            continue;
        }
        state_reset(w.sm, w.sl, w.sacc, rows, hd);
        for (int32_t k = u->part0; k < u->part0 + u->nparts; k++) {
            run_partition(c, u, k, &w, w.tm, w.tl, w.tacc);
            merge_rows(w.sm, w.sl, w.sacc, w.tm, w.tl, w.tacc, rows, hd);
        }
        finalize(c, u, w.sm, w.sl, w.sacc);
    }
}

static void phase2(void *arg, int tid, int nthreads) {
    (void)nthreads;
    ctx *c = arg;
    wsp w = thread_ws(c, tid);
    const int hd = c->p->head_dim;
    for (;;) {
        long long i = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (i >= c->n_split_units) break;
        const unit *u = &c->units[c->split_units[i]];
        const int rows = c->pl->group * (u->t1 - u->t0);
        state_reset(w.sm, w.sl, w.sacc, rows, hd);
        for (int32_t k = 0; k < u->nparts; k++) {
            const float *src = c->partials + u->partial_off + (size_t)k * rows * (size_t)(hd + 2);
            merge_rows(w.sm, w.sl, w.sacc, src, src + rows, src + 2 * rows, rows, hd);
        }
        finalize(c, u, w.sm, w.sl, w.sacc);
    }
}

static void run_region(pg_pool *pool, void (*fn)(void *, int, int), ctx *c) {
    atomic_store(&c->next, 0);
    if (pool)
        pg_pool_run(pool, fn, c);
    else
        fn(c, 0, 1);
}

pagoda_status pg_attention(const pg_attn_params *p, const pg_attn_batch *b, const pg_paged_kv *kv,
                           const float *q, size_t q_stride, float *out, size_t out_stride,
                           void *scratch, size_t scratch_bytes, pg_pool *pool,
                           const pg_attn_ukernels *uk) {
    pagoda_status st = pg_attn_check(p, b, kv, q_stride, out_stride);
    if (st != PAGODA_OK) return st;
    if (!uk) {
        const pg_kernel_table *t = pg_kernels();
        uk = kv->dtype == PG_BF16 ? t->attn_bf16kv : t->attn_f32kv;
    }
    if (uk->kv_dtype != kv->dtype)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "attention: micro-kernels '%s' are for %s, cache is %s", uk->name,
                        pg_dtype_name(uk->kv_dtype), pg_dtype_name(kv->dtype));
    const int nt = pool ? pg_pool_size(pool) : 1;
    plan pl;
    make_plan(p, b, kv, nt, true, &pl, NULL, NULL);
    if (pl.bytes > scratch_bytes) make_plan(p, b, kv, nt, false, &pl, NULL, NULL);
    if (pl.bytes > scratch_bytes || !scratch)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "attention: scratch of %zu bytes, this step needs %zu "
                        "(pg_attention_scratch_bytes)",
                        scratch_bytes, pl.bytes);
    if (pl.n_items == 0) return PAGODA_OK;
    /* carve the scratch: units, items, split-unit list, partials, per-thread tiles */
    uintptr_t at = ((uintptr_t)scratch + 63) & ~(uintptr_t)63;
    unit *units = (unit *)at;
    at += (size_t)pl.n_units * sizeof(unit);
    item *items = (item *)at;
    at += (size_t)pl.n_items * sizeof(item);
    at = (at + 63) & ~(uintptr_t)63;
    float *partials = (float *)at;
    float *ws = partials + up16(pl.partial_floats);
    make_plan(p, b, kv, nt, pl.split, &pl, units, items);
    ctx c = {.p = p,
             .b = b,
             .kv = kv,
             .uk = uk,
             .q = q,
             .q_stride = q_stride,
             .out = out,
             .out_stride = out_stride,
             .pl = &pl,
             .units = units,
             .items = items,
             .partials = partials,
             .ws = ws};
    /* a call below the pool's serial threshold (pool.h pg_pool_serial_macs:
     * q.k and p.v multiply-adds over the visible keys) runs the same plan on
     * the caller: the same partitions and merges, so the same bits */
    if (pool && nt > 1) {
        int64_t macs = 0;
        for (int64_t u = 0; u < pl.n_units; u++) {
            int32_t lo, hi;
            unit_range(p, b, units[u].seq, units[u].t0, units[u].t1, &lo, &hi);
            macs +=
                (int64_t)pl.group * (units[u].t1 - units[u].t0) * (hi - lo + 1) * 2 * p->head_dim;
        }
        if (macs < pg_pool_serial_macs()) pool = NULL;
    }
    run_region(pool, phase1, &c);
    if (pl.partial_floats) {
        /* the split units' indices go where the items were: items are done */
        int64_t *list = (int64_t *)items, n = 0;
        for (int64_t u = 0; u < pl.n_units; u++)
            if (units[u].partial_off >= 0) n++;
        if ((size_t)n * sizeof(int64_t) > (size_t)pl.n_items * sizeof(item)) {
            /* never: a split unit has >= 2 items of 8 bytes each */
            return pg_error(PAGODA_ERR_INTERNAL, "attention: split list does not fit");
        }
        n = 0;
        for (int64_t u = 0; u < pl.n_units; u++)
            if (units[u].partial_off >= 0) list[n++] = u;
        c.split_units = list;
        c.n_split_units = n;
        run_region(pool, phase2, &c);
    }
    return PAGODA_OK;
}
