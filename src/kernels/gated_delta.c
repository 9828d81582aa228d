/* Gated DeltaNet driver (kernels/gated_delta.h): the piece decomposition,
 * the chunked (WY / UT) form around the mm micro-kernel, the recurrent form
 * through the recurrent micro-kernel, the thread split, and the conv, gate
 * and gated-norm row ops.
 *
 * Chunked form for one piece of L rows (16 <= L <= 64) of one (sequence,
 * value head), columns [c0, c0 + nc) of dv, state S0 at the piece start
 * (Yang et al. 2024 section 3; transformers torch_chunk_gated_delta_rule):
 *   gc_i = g_0 + ... + g_i, Gam_i = exp(gc_i),
 *   Dec_ij = exp(g_{j+1} + ... + g_i) for j <= i (summed per pair, so a large
 *            |gc| costs no precision),
 *   Aqk_ij = (q_i . k_j) Dec_ij for j <= i, else 0,
 *   NL_ij  = -beta_i (k_i . k_j) Dec_ij for j < i, else 0,
 *   R_i    = beta_i (v_i - Gam_i S0^T k_i),
 *   D      = (I - NL)^-1 R  (forward substitution: the per-token deltas),
 *   o_i    = Gam_i S0^T q_i + sum_j Aqk_ij D_j,
 *   S      = Gam_{L-1} S0 + sum_j Dec_{L-1,j} k_j D_j^T.
 * Expanding the recurrence over the piece gives exactly these (the delta of
 * token i reads the state decayed by Gam_i plus the earlier deltas' decayed
 * writes), so the two forms differ only by rounding. Every matrix product
 * goes through uk->mm (one fmaf chain per element in a fixed order); the
 * row blocks of the solve and of the output are fixed (ROW_BLOCK), so a
 * piece's result depends on its inputs only. */
#include "kernels/gated_delta.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/dispatch.h"

enum {
    CH = PG_GDN_CHUNK,
    ROW_BLOCK = 8, /* rows per mm call in the solve and the output */
    COL_MIN = 32,  /* narrowest column block when heads are split over threads */
    ITEMS_PER_THREAD = 2,
    GROUP_MAX = 8 /* value heads per work item at most */
};

/* ---- argument checks ---------------------------------------------------------- */

static pagoda_status check_batch(const pg_gdn_batch *b, const char *what, bool need_states) {
    if (!b || b->n_seqs < 0 || (b->n_seqs > 0 && !b->cu_seqlens))
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: bad batch", what);
    if (b->n_seqs > 0 && b->cu_seqlens[0] != 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: cu_seqlens[0] is %d, not 0", what,
                        b->cu_seqlens[0]);
    if (need_states && b->n_seqs > 0 && !b->states)
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: states is NULL", what);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const int32_t len = b->cu_seqlens[s + 1] - b->cu_seqlens[s];
        if (len < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG, "%s: cu_seqlens decreases at sequence %d", what,
                            s);
        if (need_states && !b->states[s])
            return pg_error(PAGODA_ERR_INVALID_ARG, "%s: state of sequence %d is NULL", what, s);
        if (b->start_pos && b->start_pos[s] < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG, "%s: start_pos[%d] = %d is negative", what, s,
                            b->start_pos[s]);
        const int32_t snap = b->snap_len ? b->snap_len[s] : 0;
        if (snap < 0 || snap > len)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "%s: snap_len[%d] = %d outside [0, %d] (the sequence's length)", what,
                            s, snap, len);
        if (snap > 0 && (!b->snap_states || !b->snap_states[s]))
            return pg_error(PAGODA_ERR_INVALID_ARG, "%s: snapshot of sequence %d is NULL", what, s);
        const int32_t rows = b->row_snaps ? b->row_snaps[s] : 0;
        if (rows < 0 || rows > len)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "%s: row_snaps[%d] = %d outside [0, %d] (the sequence's length)", what,
                            s, rows, len);
        if (rows > 0 && need_states && (!b->row_snap_states || !b->row_snap_states[s]))
            return pg_error(PAGODA_ERR_INVALID_ARG, "%s: row snapshots of sequence %d are NULL",
                            what, s);
    }
    return PAGODA_OK;
}

pagoda_status pg_gdn_check(const pg_gdn_params *p, const pg_gdn_batch *b, int64_t ldq, int64_t ldk,
                           int64_t ldv, int64_t ldo) {
    if (!p) return pg_error(PAGODA_ERR_INVALID_ARG, "gated delta: params are NULL");
    if (p->n_k_heads < 1 || p->n_v_heads < 1 || p->n_v_heads % p->n_k_heads != 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "gated delta: %d value heads is not a multiple of %d key heads",
                        p->n_v_heads, p->n_k_heads);
    if (p->dk < 1 || p->dk > PG_GDN_MAX_HEAD_DIM || p->dv < 1 || p->dv > PG_GDN_MAX_HEAD_DIM)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "gated delta: head dims dk %d / dv %d outside [1, %d]", p->dk, p->dv,
                        PG_GDN_MAX_HEAD_DIM);
    const int64_t qk = (int64_t)p->n_k_heads * p->dk, vo = (int64_t)p->n_v_heads * p->dv;
    if (ldq < qk || ldk < qk || ldv < vo || ldo < vo)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "gated delta: strides q %lld k %lld v %lld out %lld below the heads' "
                        "%lld / %lld floats",
                        (long long)ldq, (long long)ldk, (long long)ldv, (long long)ldo,
                        (long long)qk, (long long)vo);
    return check_batch(b, "gated delta", true);
}

pagoda_status pg_gdn_conv_check(int32_t C, int32_t K, const float *w, const pg_gdn_batch *b,
                                float *const *conv_states, float *const *snap_conv_states,
                                const float *x, int64_t ldx, const float *y, int64_t ldy) {
    if (C < 1 || K < 1 || K > PG_GDN_MAX_CONV_KERNEL || !w)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "gdn conv1d: %d channels, kernel %d (want >= 1 and [1, %d], weights)", C, K,
                        PG_GDN_MAX_CONV_KERNEL);
    if (ldx < C || ldy < C)
        return pg_error(PAGODA_ERR_INVALID_ARG, "gdn conv1d: strides %lld / %lld below %d",
                        (long long)ldx, (long long)ldy, C);
    pagoda_status st = check_batch(b, "gdn conv1d", false);
    if (st != PAGODA_OK) return st;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        const int32_t len = b->cu_seqlens[s + 1] - b->cu_seqlens[s];
        if (len > 0 && (!x || !y))
            return pg_error(PAGODA_ERR_INVALID_ARG, "gdn conv1d: x or y is NULL");
        if (len > 0 && K > 1 && (!conv_states || !conv_states[s]))
            return pg_error(PAGODA_ERR_INVALID_ARG, "gdn conv1d: conv state %d is NULL", s);
        if (b->snap_len && b->snap_len[s] > 0 && K > 1 &&
            (!snap_conv_states || !snap_conv_states[s]))
            return pg_error(PAGODA_ERR_INVALID_ARG, "gdn conv1d: conv snapshot %d is NULL", s);
        if (b->row_snaps && b->row_snaps[s] > 0 && K > 1 &&
            (!b->row_snap_conv || !b->row_snap_conv[s] ||
             b->row_snap_stride < (int64_t)(K - 1) * C))
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "gdn conv1d: row snapshots of sequence %d are NULL or closer than a "
                            "conv state",
                            s);
    }
    return PAGODA_OK;
}

/* ---- per-thread workspace ------------------------------------------------------- */

/* Offsets (floats) of one thread's buffers, each a multiple of 16. */
typedef struct ws_layout {
    size_t qk;   /* [2*CH][dk]: normalized q rows (scaled) then k rows of the piece */
    size_t kt;   /* [dk][CH]: k transposed, later scaled by Dec_{L-1, j} */
    size_t gm;   /* [2*CH][CH]: q.k then k.k; then Aqk and NL */
    size_t dec;  /* [CH][CH]: Dec */
    size_t y;    /* [2*CH][nc]: S0^T q rows, then S0^T k -> R -> D */
    size_t vec;  /* [6][CH]: g, beta, gc, Gam, exp(g), the running log-decay row */
    size_t size; /* total */
} ws_layout;

static size_t up16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

static ws_layout layout(int dk, int dv) {
    ws_layout l;
    size_t at = 0;
    l.qk = at, at += up16((size_t)2 * CH * dk);
    l.kt = at, at += up16((size_t)dk * CH);
    l.gm = at, at += up16((size_t)2 * CH * CH);
    l.dec = at, at += up16((size_t)CH * CH);
    l.y = at, at += up16((size_t)2 * CH * dv);
    l.vec = at, at += up16((size_t)6 * CH);
    l.size = at;
    return l;
}

size_t pg_gdn_scratch_bytes(const pg_gdn_params *p, int32_t max_tokens, int nthreads) {
    (void)max_tokens;
    if (!p || p->dk < 1 || p->dk > PG_GDN_MAX_HEAD_DIM || p->dv < 1 || p->dv > PG_GDN_MAX_HEAD_DIM)
        return 0;
    const size_t nt = nthreads > 0 ? (size_t)nthreads : 1;
    return 64 + layout(p->dk, p->dv).size * sizeof(float) * nt;
}

/* ---- the pieces of one work item --------------------------------------------------- */

typedef struct ctx {
    const pg_gdn_params *p;
    const pg_gdn_batch *b;
    const pg_gdn_ukernels *uk;
    const float *q, *k, *v, *g, *beta;
    int64_t ldq, ldk, ldv, ldo;
    float *out;
    float *ws;
    ws_layout wl;
    int32_t group, ngroups; /* value heads per work item, items per sequence */
    int32_t ncb, cb_width;  /* column blocks per head and their width */
    int64_t n_items;
    atomic_int_fast64_t next;
} ctx;

/* The element loops below vectorize only with GCC's -O3 cost model (the
 * -O2 one leaves loops of unknown trip count scalar); as in kernels/qgemm.c
 * the attribute asks for it on this function only. */
#if defined(__GNUC__) && !defined(__clang__)
#define VEC_LOOPS __attribute__((optimize("vect-cost-model=dynamic")))
#else
#define VEC_LOOPS
#endif

/* The chunked form over one piece (see the top of the file). Inputs already
 * in the workspace: q/k rows (qk), g and beta (vec). v and o point at the
 * piece's first row, column c0; S at row 0, column c0 (row stride dv). */
VEC_LOOPS static void chunk_piece(const ctx *c, float *ws, int L, int nc, float *S, const float *v,
                                  float *o) {
    const pg_gdn_ukernels *uk = c->uk;
    const int dk = c->p->dk, dv = c->p->dv;
    const ws_layout *wl = &c->wl;
    float *qk = ws + wl->qk, *kt = ws + wl->kt, *gm = ws + wl->gm, *dec = ws + wl->dec;
    float *y = ws + wl->y, *vec = ws + wl->vec;
    const float *gl = vec, *bl = vec + CH;
    float *gc = vec + 2 * CH, *gam = vec + 3 * CH, *diff = vec + 5 * CH;
    const float *kn = qk + (size_t)L * dk;

    /* log decays: the cumulative sum and, row by row, the pairwise sums */
    gc[0] = gl[0];
    for (int i = 1; i < L; i++)
        gc[i] = gc[i - 1] + gl[i];
    uk->vexp(gc, gam, (size_t)L);
    for (int i = 0; i < L; i++) {
        for (int j = 0; j < i; j++)
            diff[j] += gl[i];
        diff[i] = 0.0f;
        uk->vexp(diff, dec + (size_t)i * CH, (size_t)i + 1);
    }

    /* Gram matrices [q; k] k^T, masked and decayed into Aqk and NL */
    for (int d = 0; d < dk; d++)
        for (int j = 0; j < L; j++)
            kt[(size_t)d * CH + j] = kn[(size_t)j * dk + d];
    uk->mm(2 * L, L, dk, qk, dk, kt, CH, gm, CH, 0.0f);
    for (int i = 0; i < L; i++) {
        float *aq = gm + (size_t)i * CH, *nl = gm + (size_t)(L + i) * CH;
        const float *de = dec + (size_t)i * CH;
        const float nb = -bl[i];
        for (int j = 0; j <= i; j++)
            aq[j] *= de[j];
        for (int j = i + 1; j < L; j++)
            aq[j] = 0.0f;
        for (int j = 0; j < i; j++)
            nl[j] = nl[j] * de[j] * nb;
        for (int j = i; j < L; j++)
            nl[j] = 0.0f;
    }

    /* [S0^T q; S0^T k] for all rows at once, then R = beta (v - Gam S0^T k) */
    uk->mm(2 * L, nc, dk, qk, dk, S, dv, y, nc, 0.0f);
    float *D = y + (size_t)L * nc;
    for (int i = 0; i < L; i++) {
        const float *vi = v + (int64_t)i * c->ldv;
        float *ri = D + (size_t)i * nc;
        const float ng = -gam[i], bi = bl[i];
        for (int j = 0; j < nc; j++)
            ri[j] = (vi[j] + ng * ri[j]) * bi;
    }

    /* forward substitution D_i = R_i + sum_{j<i} NL_ij D_j: each element one
     * fmaf chain over j increasing, a row block's earlier rows first */
    const float *nlr = gm + (size_t)L * CH;
    for (int i0 = 0; i0 < L; i0 += ROW_BLOCK) {
        const int i1 = i0 + ROW_BLOCK < L ? i0 + ROW_BLOCK : L;
        if (i0 > 0)
            uk->mm(i1 - i0, nc, i0, nlr + (size_t)i0 * CH, CH, D, nc, D + (size_t)i0 * nc, nc,
                   1.0f);
        for (int i = i0 + 1; i < i1; i++)
            uk->mm(1, nc, i - i0, nlr + (size_t)i * CH + i0, CH, D + (size_t)i0 * nc, nc,
                   D + (size_t)i * nc, nc, 1.0f);
    }

    /* o_i = Gam_i S0^T q_i + sum_{j<=i} Aqk_ij D_j, built in place of S0^T q
     * (contiguous rows: output rows far apart alias in the caches), then
     * copied out */
    for (int i = 0; i < L; i++) {
        float *yq = y + (size_t)i * nc;
        const float gi = gam[i];
        for (int j = 0; j < nc; j++)
            yq[j] = gi * yq[j];
    }
    for (int i0 = 0; i0 < L; i0 += ROW_BLOCK) {
        const int i1 = i0 + ROW_BLOCK < L ? i0 + ROW_BLOCK : L;
        uk->mm(i1 - i0, nc, i1, gm + (size_t)i0 * CH, CH, D, nc, y + (size_t)i0 * nc, nc, 1.0f);
    }
    for (int i = 0; i < L; i++)
        memcpy(o + (int64_t)i * c->ldo, y + (size_t)i * nc, (size_t)nc * sizeof(float));

    /* S = Gam_{L-1} S0 + (k Dec_{L-1})^T D */
    const float *dl = dec + (size_t)(L - 1) * CH;
    for (int d = 0; d < dk; d++) {
        float *kr = kt + (size_t)d * CH;
        for (int j = 0; j < L; j++)
            kr[j] *= dl[j];
    }
    uk->mm(dk, nc, L, kt, CH, D, nc, S, dv, gam[L - 1]);
}

/* One piece (rows [r, r + L) of sequence s) of value head h, columns
 * [c0, c0 + nc): normalize its q / k rows, then the recurrent or chunked form. */
static void run_piece(const ctx *c, float *ws, int32_t s, int32_t h, int32_t r, int L, int32_t c0,
                      int32_t nc) {
    const pg_gdn_params *p = c->p;
    const int dk = p->dk, dv = p->dv, nv = p->n_v_heads;
    const int32_t kh = pg_gdn_k_head(p, h);
    float *S = c->b->states[s] + (size_t)h * dk * dv + c0;
    float *qk = ws + c->wl.qk, *vec = ws + c->wl.vec;
    float *gl = vec, *bl = vec + CH, *eg = vec + 4 * CH;
    const int64_t row0 = (int64_t)c->b->cu_seqlens[s] + r;
    for (int t = 0; t < L; t++) {
        const int64_t row = row0 + t;
        pg_gdn_l2norm(c->q + row * c->ldq + (int64_t)kh * dk, dk, p->scale, qk + (size_t)t * dk);
        pg_gdn_l2norm(c->k + row * c->ldk + (int64_t)kh * dk, dk, 1.0f, qk + (size_t)(L + t) * dk);
        gl[t] = c->g[row * nv + h];
        bl[t] = c->beta[row * nv + h];
    }
    const float *v = c->v + row0 * c->ldv + (int64_t)h * dv + c0;
    float *o = c->out + row0 * c->ldo + (int64_t)h * dv + c0;
    /* the v rows are read only after the matrix products: fetch them
     * meanwhile (rows far apart defeat the hardware prefetchers) */
    if (L >= PG_GDN_MIN_CHUNK)
        for (int t = 0; t < L; t++)
            for (int j = 0; j < nc; j += 16)
                __builtin_prefetch(v + t * c->ldv + j, 0, 2);
    if (L < PG_GDN_MIN_CHUNK) {
        for (int t = 0; t < L; t++)
            eg[t] = expf(gl[t]);
        c->uk->recurrent(L, dk, nc, S, dv, qk, qk + (size_t)L * dk, dk, v, c->ldv, eg, bl, o,
                         c->ldo);
    } else {
        chunk_piece(c, ws, L, nc, S, v, o);
    }
}

/* Work item: value heads [h0, h1) of sequence s, columns [c0, c0 + nc).
 * Pieces outermost, heads inside: the piece's rows stay in cache (and TLB)
 * for all the heads; each head's arithmetic is the same either way. */
static void run_item(const ctx *c, float *ws, int32_t s, int32_t h0, int32_t h1, int32_t c0,
                     int32_t nc) {
    const pg_gdn_batch *b = c->b;
    const int dk = c->p->dk, dv = c->p->dv;
    const int32_t len = b->cu_seqlens[s + 1] - b->cu_seqlens[s];
    const int64_t pos0 = b->start_pos ? b->start_pos[s] : 0;
    const int32_t snap = b->snap_len ? b->snap_len[s] : 0;
    const int32_t rows = b->row_snaps ? b->row_snaps[s] : 0;
    for (int32_t r = 0; r < len;) {
        /* the piece: up to the next multiple of CH positions, the end, the
         * snapshot; one row while row snapshots are asked */
        int32_t end = r + (int32_t)(CH - (pos0 + r) % CH);
        if (end > len) end = len;
        if (snap > r && snap < end) end = snap;
        if (rows > 0) end = r + 1;
        for (int32_t h = h0; h < h1; h++)
            run_piece(c, ws, s, h, r, end - r, c0, nc);
        r = end;
        if (r <= rows)
            for (int32_t h = h0; h < h1; h++) {
                const float *S = b->states[s] + (size_t)h * dk * dv + c0;
                float *dst = b->row_snap_states[s] + (size_t)(r - 1) * (size_t)b->row_snap_stride +
                             (size_t)h * dk * dv + c0;
                for (int i = 0; i < dk; i++)
                    memcpy(dst + (size_t)i * dv, S + (size_t)i * dv, (size_t)nc * sizeof(float));
            }
        if (snap > 0 && r == snap)
            for (int32_t h = h0; h < h1; h++) {
                const float *S = b->states[s] + (size_t)h * dk * dv + c0;
                float *dst = b->snap_states[s] + (size_t)h * dk * dv + c0;
                for (int i = 0; i < dk; i++)
                    memcpy(dst + (size_t)i * dv, S + (size_t)i * dv, (size_t)nc * sizeof(float));
            }
    }
}

static void worker(void *vc, int tid, int nthreads) {
    (void)nthreads;
    ctx *c = vc;
    float *ws = c->ws + (size_t)tid * c->wl.size;
    const int32_t nv = c->p->n_v_heads, dv = c->p->dv;
    for (;;) {
        const int64_t it = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
        if (it >= c->n_items) break;
        const int32_t cb = (int32_t)(it % c->ncb);
        const int64_t sg = it / c->ncb;
        const int32_t s = (int32_t)(sg / c->ngroups), grp = (int32_t)(sg % c->ngroups);
        const int32_t h0 = grp * c->group, h1 = h0 + c->group < nv ? h0 + c->group : nv;
        const int32_t c0 = cb * c->cb_width;
        if (c0 >= dv || h0 >= h1) continue;
        const int32_t nc = c0 + c->cb_width <= dv ? c->cb_width : dv - c0;
        run_item(c, ws, s, h0, h1, c0, nc);
    }
}

pagoda_status pg_gdn_forward(const pg_gdn_params *p, const pg_gdn_batch *b, const float *q,
                             int64_t ldq, const float *k, int64_t ldk, const float *v, int64_t ldv,
                             const float *g, const float *beta, float *out, int64_t ldo,
                             void *scratch, size_t scratch_bytes, pg_pool *pool) {
    pagoda_status st = pg_gdn_check(p, b, ldq, ldk, ldv, ldo);
    if (st != PAGODA_OK) return st;
    const int nt = pool ? pg_pool_size(pool) : 1;
    const size_t need = pg_gdn_scratch_bytes(p, 0, nt);
    if (!scratch || scratch_bytes < need)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "gated delta: scratch of %zu bytes, %d threads need %zu "
                        "(pg_gdn_scratch_bytes)",
                        scratch ? scratch_bytes : 0, nt, need);
    int64_t busy = 0; /* (sequence, head) pairs with rows */
    for (int32_t s = 0; s < b->n_seqs; s++)
        if (b->cu_seqlens[s + 1] > b->cu_seqlens[s]) busy += p->n_v_heads;
    if (busy == 0) return PAGODA_OK;
    /* Work items: groups of value heads (a piece's rows are read once from
     * memory for the group), as large as the thread count allows; heads are
     * split into column blocks only when single heads are too few (any split
     * gives the same bits: heads and columns are independent). */
    const int64_t want = (int64_t)ITEMS_PER_THREAD * nt;
    int32_t group = GROUP_MAX;
    while (group > 1 && busy / group < want)
        group /= 2;
    if (group > p->n_v_heads) group = p->n_v_heads;
    int32_t ncb = 1;
    while (group == 1 && busy * ncb < want && p->dv / (ncb * 2) >= COL_MIN)
        ncb *= 2;
    int32_t width = (p->dv + ncb - 1) / ncb;
    width = (width + 15) & ~15;
    const int32_t ngroups = (p->n_v_heads + group - 1) / group;
    ctx c = {.p = p,
             .b = b,
             .uk = p->uk ? p->uk : pg_kernels()->gdn,
             .q = q,
             .k = k,
             .v = v,
             .g = g,
             .beta = beta,
             .ldq = ldq,
             .ldk = ldk,
             .ldv = ldv,
             .ldo = ldo,
             .out = out,
             .ws = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63),
             .wl = layout(p->dk, p->dv),
             .group = group,
             .ngroups = ngroups,
             .ncb = ncb,
             .cb_width = width,
             .n_items = (int64_t)b->n_seqs * ngroups * ncb};
    atomic_init(&c.next, 0);
    if (pool && nt > 1)
        pg_pool_run(pool, worker, &c);
    else
        worker(&c, 0, 1);
    return PAGODA_OK;
}

/* ---- conv1d ------------------------------------------------------------------------ */

enum { CONV_BLOCK = 256 }; /* channels per conv work item */

typedef struct conv_ctx {
    int32_t C, K;
    const float *w;
    const pg_gdn_batch *b;
    float *const *states, *const *snaps;
    const float *x;
    float *y;
    int64_t ldx, ldy;
    int32_t nblk;
    void (*silu)(float *out, const float *x, size_t n);
} conv_ctx;

/* Input row t of sequence s (t < 0: its conv state), channel c0. */
static const float *conv_in(const conv_ctx *c, int32_t s, int32_t t, int32_t c0) {
    const int32_t H = c->K - 1;
    if (t < 0) return c->states[s] + (size_t)(H + t) * c->C + c0;
    return c->x + (int64_t)(c->b->cu_seqlens[s] + t) * c->ldx + c0;
}

VEC_LOOPS static void conv_item(const conv_ctx *c, int32_t s, int32_t c0, int32_t nc) {
    const int32_t K = c->K, H = K - 1, C = c->C;
    const int32_t r0 = c->b->cu_seqlens[s], len = c->b->cu_seqlens[s + 1] - r0;
    const int32_t snap = c->b->snap_len ? c->b->snap_len[s] : 0;
    if (len == 0) return;
    float wt[PG_GDN_MAX_CONV_KERNEL][CONV_BLOCK]; /* w transposed: tap-major */
    float hist[PG_GDN_MAX_CONV_KERNEL - 1][CONV_BLOCK];
    for (int32_t j = 0; j < K; j++)
        for (int32_t i = 0; i < nc; i++)
            wt[j][i] = c->w[(size_t)(c0 + i) * K + j];
    /* the states read the inputs before y (possibly x itself) overwrites them */
    if (snap > 0)
        for (int32_t m = 0; m < H; m++)
            memcpy(c->snaps[s] + (size_t)m * C + c0, conv_in(c, s, snap - H + m, c0),
                   (size_t)nc * sizeof(float));
    const int32_t rows = c->b->row_snaps ? c->b->row_snaps[s] : 0;
    for (int32_t r = 1; r <= rows; r++) /* the conv state after row r: rows r-H .. r-1 */
        for (int32_t m = 0; m < H; m++)
            memcpy(c->b->row_snap_conv[s] + (size_t)(r - 1) * (size_t)c->b->row_snap_stride +
                       (size_t)m * C + c0,
                   conv_in(c, s, r - H + m, c0), (size_t)nc * sizeof(float));
    for (int32_t m = 0; m < H; m++)
        memcpy(hist[m], conv_in(c, s, len - H + m, c0), (size_t)nc * sizeof(float));
    /* outputs last row first: row t reads rows <= t only */
    for (int32_t t = len - 1; t >= 0; t--) {
        float acc[CONV_BLOCK];
        for (int32_t i = 0; i < nc; i++)
            acc[i] = 0.0f;
        for (int32_t j = 0; j < K; j++) {
            const float *xi = conv_in(c, s, t - H + j, c0), *wj = wt[j];
            for (int32_t i = 0; i < nc; i++)
                acc[i] = acc[i] + wj[i] * xi[i];
        }
        float *yr = c->y + (int64_t)(r0 + t) * c->ldy + c0;
        c->silu(yr, acc, (size_t)nc);
    }
    for (int32_t m = 0; m < H; m++)
        memcpy(c->states[s] + (size_t)m * C + c0, hist[m], (size_t)nc * sizeof(float));
}

static void conv_range(void *vc, size_t begin, size_t end, int tid) {
    (void)tid;
    const conv_ctx *c = vc;
    for (size_t it = begin; it < end; it++) {
        const int32_t s = (int32_t)(it / (size_t)c->nblk), blk = (int32_t)(it % (size_t)c->nblk);
        const int32_t c0 = blk * CONV_BLOCK;
        const int32_t nc = c0 + CONV_BLOCK <= c->C ? CONV_BLOCK : c->C - c0;
        conv_item(c, s, c0, nc);
    }
}

pagoda_status pg_gdn_conv1d(int32_t C, int32_t K, const float *w, const pg_gdn_batch *b,
                            float *const *conv_states, float *const *snap_conv_states,
                            const float *x, int64_t ldx, float *y, int64_t ldy, pg_pool *pool) {
    pagoda_status st = pg_gdn_conv_check(C, K, w, b, conv_states, snap_conv_states, x, ldx, y, ldy);
    if (st != PAGODA_OK) return st;
    conv_ctx c = {.C = C,
                  .K = K,
                  .w = w,
                  .b = b,
                  .states = conv_states,
                  .snaps = snap_conv_states,
                  .x = x,
                  .y = y,
                  .ldx = ldx,
                  .ldy = ldy,
                  .nblk = (C + CONV_BLOCK - 1) / CONV_BLOCK,
                  .silu = pg_kernels()->silu_f32};
    const size_t n = (size_t)b->n_seqs * (size_t)c.nblk;
    if (pool)
        pg_pool_parallel_for(pool, n, 1, conv_range, &c);
    else
        conv_range(&c, 0, n, 0);
    return PAGODA_OK;
}

/* ---- gates and the gated norm -------------------------------------------------------- */

void pg_gdn_gates(int64_t T, int32_t n_v_heads, const float *a, int64_t lda, const float *bb,
                  int64_t ldb, const float *a_neg, const float *dt_bias, float *g, float *beta) {
    for (int64_t t = 0; t < T; t++)
        for (int32_t h = 0; h < n_v_heads; h++) {
            const float x = a[t * lda + h] + dt_bias[h];
            const float sp = x > 20.0f ? x : log1pf(expf(x));
            g[t * n_v_heads + h] = a_neg[h] * sp;
            beta[t * n_v_heads + h] = 1.0f / (1.0f + expf(-bb[t * ldb + h]));
        }
}

void pg_gdn_gated_rmsnorm(int64_t T, int32_t n_heads, int32_t dv, const float *x, int64_t ldx,
                          const float *z, int64_t ldz, const float *w, float eps, float *out,
                          int64_t ldo) {
    const pg_kernel_table *kt = pg_kernels();
    enum { PART = 256 };
    float sz[PART];
    for (int64_t t = 0; t < T; t++) {
        float *orow = out + t * ldo;
        kt->rmsnorm_f32(orow, x + t * ldx, w, (size_t)n_heads, (size_t)dv, eps);
        const float *zrow = z + t * ldz;
        const int64_t n = (int64_t)n_heads * dv;
        for (int64_t i0 = 0; i0 < n; i0 += PART) {
            const int64_t m = n - i0 < PART ? n - i0 : PART;
            kt->silu_f32(sz, zrow + i0, (size_t)m);
            for (int64_t i = 0; i < m; i++)
                orow[i0 + i] *= sz[i];
        }
    }
}
