/* Linear layers (see linear.h): binding, policy, packing, forward. */
#include "model/linear.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/qgemm.h"
#include "model/hub_progress.h"
#include "model/mapped_file.h"
#include "model/pack_cache.h"

/* ---- binding ------------------------------------------------------------------ */

static const char *SUPPORTED_DTYPES =
    "F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS";

void pg_weights_init(pg_weights *w, const pg_model_source *src) {
    memset(w, 0, sizeof *w);
    w->src = src;
    w->ct = pg_model_source_ct(src);
}

void pg_weights_release(pg_weights *w) {
    for (int i = 0; i < w->n_owned; i++)
        pg_free(w->owned[i]);
    free(w->owned);
    w->owned = NULL;
    w->n_owned = w->cap_owned = 0;
}

/* The tensor name of the printf format, after w->prefix. */
static void vname(const pg_weights *w, char *buf, size_t cap, const char *fmt, va_list ap) {
    size_t off = 0;
    if (w->prefix) off = (size_t)snprintf(buf, cap, "%s", w->prefix);
    if (off < cap) vsnprintf(buf + off, cap - off, fmt, ap);
}

static void shape_str(const pg_tensor *t, char *buf, size_t cap) {
    size_t off = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < t->ndim && off < cap; i++)
        off +=
            (size_t)snprintf(buf + off, cap - off, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (off < cap) snprintf(buf + off, cap - off, "]");
}

static pagoda_status get_tensor(pg_weights *w, const char *name, int64_t d0, int64_t d1,
                                bool optional, const pg_tensor **out) {
    *out = NULL;
    const char *path = pg_model_source_path(w->src);
    const pg_tensor *t = pg_model_source_tensor(w->src, name);
    if (!t) {
        if (optional) return PAGODA_OK;
        return pg_error(PAGODA_ERR_NOT_FOUND, "%s: missing tensor '%s'", path, name);
    }
    int want_ndim = d1 < 0 ? 1 : 2;
    if (t->ndim != want_ndim || t->shape[0] != d0 || (d1 >= 0 && t->shape[1] != d1)) {
        char got[96];
        shape_str(t, got, sizeof got);
        if (d1 < 0)
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: tensor '%s' has shape %s, config expects [%lld]", path, name, got,
                            (long long)d0);
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: tensor '%s' has shape %s, config expects [%lld, %lld]", path, name,
                        got, (long long)d0, (long long)d1);
    }
    if (!pg_matmul_supports(t->dtype))
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s; pagoda supports %s",
                        path, name, pg_dtype_name(t->dtype), SUPPORTED_DTYPES);
    size_t inner = (size_t)(d1 < 0 ? d0 : d1);
    if (pg_dtype_row_bytes(t->dtype, inner) == 0)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: tensor '%s' is %s but its rows of %zu are not whole blocks", path,
                        name, pg_dtype_name(t->dtype), inner);
    *out = t;
    return PAGODA_OK;
}

pagoda_status pg_weights_tensor(pg_weights *w, int64_t d0, int64_t d1, bool optional,
                                const pg_tensor **out, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vname(w, name, sizeof name, fmt, ap);
    va_end(ap);
    return get_tensor(w, name, d0, d1, optional, out);
}

static pagoda_status own_f32(pg_weights *w, const pg_tensor *t, const float **out) {
    size_t n = (size_t)t->shape[0] * (t->ndim > 1 ? (size_t)t->shape[1] : 1);
    float *buf = pg_malloc_aligned(n * sizeof(float));
    if (!buf) return pg_error(PAGODA_ERR_NOMEM, "model: out of memory copying '%s'", t->name);
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? 2 * w->cap_owned : 64;
        float **grown = realloc(w->owned, (size_t)cap * sizeof *grown);
        if (!grown) {
            pg_free(buf);
            return pg_error(PAGODA_ERR_NOMEM, "model: out of memory");
        }
        w->owned = grown;
        w->cap_owned = cap;
    }
    w->owned[w->n_owned++] = buf;
    pg_dequant_row(t->dtype, t->data, buf, n);
    *out = buf;
    return PAGODA_OK;
}

static pagoda_status get_vector(pg_weights *w, const char *name, int64_t n, bool optional,
                                const float **out) {
    const pg_tensor *t;
    *out = NULL;
    pagoda_status st = get_tensor(w, name, n, -1, optional, &t);
    if (st != PAGODA_OK || !t) return st;
    return own_f32(w, t, out);
}

pagoda_status pg_weights_vector(pg_weights *w, int64_t n, bool optional, const float **out,
                                const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vname(w, name, sizeof name, fmt, ap);
    va_end(ap);
    return get_vector(w, name, n, optional, out);
}

pagoda_status pg_weights_matrix(pg_weights *w, int64_t d0, int64_t d1, const float **out,
                                const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vname(w, name, sizeof name, fmt, ap);
    va_end(ap);
    const pg_tensor *t;
    *out = NULL;
    pagoda_status st = get_tensor(w, name, d0, d1, false, &t);
    if (st != PAGODA_OK) return st;
    return own_f32(w, t, out);
}

pagoda_status pg_weights_linear(pg_weights *w, int64_t n_out, int64_t n_in, bool with_bias,
                                pg_linear_src *out, const char *fmt, ...) {
    char prefix[200], name[256];
    va_list ap;
    va_start(ap, fmt);
    vname(w, prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    pagoda_status st;
    if (w->ct && pg_ct_quantized(w->ct, prefix)) {
        *out = (pg_linear_src){.n_out = n_out, .n_in = n_in, .ct = true};
        st = pg_ct_find_layer(w->ct, w->src, prefix, n_out, n_in, &out->ct_w);
        if (st != PAGODA_OK) return st;
        out->dtype = out->ct_w.weight->dtype;
    } else {
        const pg_tensor *t;
        snprintf(name, sizeof name, "%s.weight", prefix);
        if ((st = get_tensor(w, name, n_out, n_in, false, &t)) != PAGODA_OK) return st;
        *out = (pg_linear_src){.w = t->data, .dtype = t->dtype, .n_out = n_out, .n_in = n_in};
    }
    if (!with_bias) return PAGODA_OK;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return get_vector(w, name, n_out, false, &out->bias);
}

/* ---- policy ----------------------------------------------------------------------- */

pagoda_status pg_linear_policy_init(pg_linear_policy *p, pg_dtype compute, int bits, int64_t group,
                                    int64_t act_group, const pg_ct_config *ct) {
    memset(p, 0, sizeof *p);
    if (compute != PG_DTYPE_COUNT && compute != PG_F32 && compute != PG_BF16)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: compute dtype %s (need auto, F32 or BF16)",
                        pg_dtype_name(compute));
    if (bits != 0 && bits != 8 && bits != 4)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: quantization bits %d (need 8 or 4)", bits);
    if (group < 0 || group % 32)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "model: quantization group size %lld (need 0 or a multiple of 32)",
                        (long long)group);
    if (act_group < 0 || act_group % 32 || act_group > 4096)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "model: activation group size %lld (need 0 = per token or a multiple of 32 "
                        "up to 4096)",
                        (long long)act_group);
    if (act_group && !group) group = act_group;
    if (act_group && (!bits || group != act_group))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "model: activation groups of %lld need group-wise weights of the same size "
                        "(got %s group %lld)",
                        (long long)act_group, bits ? "quantization" : "no quantization,",
                        (long long)group);
    if (bits && ct)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "model: the checkpoint is already quantized (compressed-tensors "
                        "quantization_config): load it without --quantization");
    p->compute = compute;
    p->bits = bits;
    p->group = group;
    p->act_group = act_group;
    p->ct = ct;
    /* lm_head (docs/QUANTIZATION.md): W8 per channel for W8A8, W4 with the
     * layers' group for group-wise W4A8 (llama.cpp's Q4_0 files keep it at
     * ~6.6 bits, Q6_K; vLLM keeps it dense); per-channel W4A8 keeps W8.
     * With activation groups its weights use those groups too and its
     * activations are scaled per group (llama.cpp's Q8_0 output tensor). */
    p->lm_head_bits = bits == 4 && group > 0 ? 4 : bits;
    p->lm_head_group = bits == 4 && group > 0 ? group : 0;
    p->lm_head_act = act_group != 0;
    if (p->lm_head_act) p->lm_head_group = act_group;
    const char *env = getenv("PAGODA_QUANT_LM_HEAD");
    if (bits && env && *env) {
        if (strcmp(env, "none") == 0)
            p->lm_head_bits = 0;
        else if (strcmp(env, "w8") == 0)
            p->lm_head_bits = 8, p->lm_head_group = 0, p->lm_head_act = false;
        else if (strcmp(env, "w4") == 0)
            p->lm_head_bits = 4, p->lm_head_group = group > 0 ? group : 32;
        else
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "model: PAGODA_QUANT_LM_HEAD=%s (need none, w8 or w4)", env);
    }
    return PAGODA_OK;
}

/* ---- tensor-parallel shards ------------------------------------------------------ */

static bool is_float(pg_dtype t);

static pagoda_status shard_check(const pg_linear_src *s, int64_t a, int64_t n, int64_t dim,
                                 const char *what) {
    if (s->ct)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "model: %s: compressed-tensors checkpoints are not supported under tensor "
                        "parallelism",
                        what);
    if (a < 0 || n < 1 || a + n > dim)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: %s: shard [%lld, %lld) outside [0, %lld)",
                        what, (long long)a, (long long)(a + n), (long long)dim);
    return PAGODA_OK;
}

pagoda_status pg_linear_src_rows(pg_linear_src *s, int64_t r0, int64_t n, const char *what) {
    pagoda_status st = shard_check(s, r0, n, s->n_out, what);
    if (st != PAGODA_OK) return st;
    const size_t row = pg_dtype_row_bytes(s->dtype, (size_t)s->n_in);
    s->w = (const uint8_t *)s->w + (size_t)r0 * row;
    if (s->bias) s->bias += r0;
    s->n_out = n;
    return PAGODA_OK;
}

pagoda_status pg_linear_src_cols(const pg_linear_policy *p, pg_linear_src *s, int64_t c0, int64_t n,
                                 bool drop_bias, const char *what) {
    pagoda_status st = shard_check(s, c0, n, s->n_in, what);
    if (st != PAGODA_OK) return st;
    const int64_t blk = (int64_t)pg_dtype_block_elems(s->dtype);
    if (c0 % blk || n % blk)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "model: %s: the row-parallel split at columns [%lld, %lld) is not on a %s "
                        "block boundary (%lld): choose a tensor-parallel size that divides the "
                        "blocks",
                        what, (long long)c0, (long long)(c0 + n), pg_dtype_name(s->dtype),
                        (long long)blk);
    const int64_t g = p->group > p->act_group ? p->group : p->act_group;
    if (p->bits && g > 0 && is_float(s->dtype) && (c0 % g || n % g))
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "model: %s: the row-parallel split at columns [%lld, %lld) is not on a "
                        "quantization group boundary (group %lld): choose a tensor-parallel size "
                        "or group that divides them",
                        what, (long long)c0, (long long)(c0 + n), (long long)g);
    const size_t src_row = pg_dtype_row_bytes(s->dtype, (size_t)s->n_in);
    const size_t off = pg_dtype_row_bytes(s->dtype, (size_t)c0);
    const size_t row = pg_dtype_row_bytes(s->dtype, (size_t)n);
    uint8_t *buf = malloc((size_t)s->n_out * row);
    if (!buf) return pg_error(PAGODA_ERR_NOMEM, "model: %s: out of memory for its shard", what);
    for (int64_t r = 0; r < s->n_out; r++)
        memcpy(buf + (size_t)r * row, (const uint8_t *)s->w + (size_t)r * src_row + off, row);
    pg_linear_src_release(s);
    s->owned = buf;
    s->w = buf;
    s->n_in = n;
    if (drop_bias) s->bias = NULL;
    return PAGODA_OK;
}

void pg_linear_src_release(pg_linear_src *s) {
    free(s->owned);
    s->owned = NULL;
}

/* ---- packing ---------------------------------------------------------------------- */

static bool is_float(pg_dtype t) {
    return t == PG_F32 || t == PG_F16 || t == PG_BF16;
}

/* The dtype a float weight of source dtype t is packed from under the
 * compute dtype. */
static pg_dtype pack_dtype(const pg_linear_policy *p, pg_dtype t) {
    if (!is_float(t) || p->compute == PG_DTYPE_COUNT) return t;
    if (p->compute == PG_F32) return PG_F32;
    return t == PG_F32 ? PG_BF16 : t; /* BF16 compute: F16 already packs to BF16 panels */
}

/* W [N, K] of dtype t converted to `to` (F32 or BF16) in a new buffer. */
static void *convert_rows(pg_dtype t, const void *W, int64_t N, int64_t K, pg_dtype to) {
    size_t n = (size_t)N * (size_t)K;
    void *dst = malloc(n * (to == PG_F32 ? 4 : 2));
    if (!dst) return NULL;
    if (to == PG_F32) {
        pg_dequant_row(t, W, dst, n);
    } else {
        const float *src = W; /* only F32 -> BF16 is asked for */
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++)
            d[i] = pg_f32_to_bf16(src[i]);
    }
    return dst;
}

/* Pack W (and W_up for a SwiGLU pair) of dtype t: quantized at load when
 * (bits), else converted to the compute dtype's pack dtype. */
static pagoda_status pack_w(const pg_linear_policy *p, int bits, int64_t group, bool act,
                            pg_dtype t, const void *W, const void *W_up, int64_t N, int64_t K,
                            pg_packed_weight **out) {
    if (bits && is_float(t))
        return pg_gemm_pack_quantize(t, W, W_up, N, K, bits, group, act, NULL, pg_pool_default(),
                                     out);
    pg_dtype to = pack_dtype(p, t);
    void *cw = NULL, *cu = NULL;
    if (to != t) {
        cw = convert_rows(t, W, N, K, to);
        cu = W_up ? convert_rows(t, W_up, N, K, to) : NULL;
        if (!cw || (W_up && !cu)) {
            free(cw);
            free(cu);
            return pg_error(PAGODA_ERR_NOMEM, "model: out of memory converting a %s weight to %s",
                            pg_dtype_name(t), pg_dtype_name(to));
        }
        W = cw;
        W_up = cu;
    }
    pagoda_status st = W_up ? pg_gemm_pack_swiglu(to, W, W_up, N, K, NULL, out)
                            : pg_gemm_pack(to, W, N, K, NULL, out);
    free(cw);
    free(cu);
    return st;
}

/* ---- compressed-tensors layers: unpacked once into int8 + f32 scales and
 * packed straight for the W8A8 / W4A8 kernels (no float detour); the
 * mapped pages of the source tensors are dropped afterwards. */

typedef struct ct_buf {
    int8_t *q;
    float *s;
    pg_qweight w;
} ct_buf;

static void ct_buf_free(ct_buf *b) {
    pg_free(b->q);
    pg_free(b->s);
    b->q = NULL;
    b->s = NULL;
}

/* Unpack the n layers ls[] (same K) stacked row-wise into one weight. */
static pagoda_status ct_stack(const pg_ct_config *ct, const pg_linear_src *const *ls, int n,
                              ct_buf *b) {
    int64_t N = 0, K = ls[0]->n_in;
    for (int i = 0; i < n; i++)
        N += ls[i]->n_out;
    const int64_t ng = pg_qweight_ngroups(K, ct->group);
    b->q = pg_malloc_aligned((size_t)(N * K));
    b->s = pg_malloc_aligned((size_t)(N * ng) * sizeof(float));
    if (!b->q || !b->s) {
        ct_buf_free(b);
        return pg_error(PAGODA_ERR_NOMEM, "model: out of memory unpacking compressed-tensors");
    }
    int64_t row = 0;
    for (int i = 0; i < n; i++) {
        const pg_ct_layer *t = &ls[i]->ct_w;
        pagoda_status st =
            pg_ct_unpack(ct, t->weight, t->shape, t->scale, b->q + row * K, b->s + row * ng, &b->w);
        if (st != PAGODA_OK) {
            ct_buf_free(b);
            return st;
        }
        row += ls[i]->n_out;
    }
    b->w = (pg_qweight){ct->bits, ct->group, N, K, b->q, b->s, 0};
    return PAGODA_OK;
}

static void ct_release(const pg_linear_src *l) {
    pg_mapped_release(l->ct_w.weight->data, l->ct_w.weight->nbytes);
    pg_mapped_release(l->ct_w.scale->data, l->ct_w.scale->nbytes);
}

/* ls[0..n) stacked, or a SwiGLU pair (ls[0], up) when up is given. */
static pagoda_status ct_pack(const pg_ct_config *ct, const pg_linear_src *const *ls, int n,
                             const pg_linear_src *up, pg_packed_weight **out) {
    ct_buf b = {0}, bu = {0};
    pagoda_status st = ct_stack(ct, ls, n, &b);
    if (st == PAGODA_OK && up) st = ct_stack(ct, &up, 1, &bu);
    if (st == PAGODA_OK)
        st = pg_gemm_pack_qweight_pool(&b.w, up ? &bu.w : NULL, NULL, pg_pool_default(), out);
    ct_buf_free(&b);
    ct_buf_free(&bu);
    if (st != PAGODA_OK) return st;
    for (int i = 0; i < n; i++)
        ct_release(ls[i]);
    if (up) ct_release(up);
    return PAGODA_OK;
}

static pagoda_status ct_mixed(const char *what) {
    return pg_error(PAGODA_ERR_UNSUPPORTED,
                    "model: %s: mixes compressed-tensors quantized and ignored (float) weights "
                    "in one fused GEMM: not supported",
                    what);
}

/* ---- the packed-weight cache (model/pack_cache.h): every packed weight of
 * a load is taken from the session's file in load order, or packed and
 * recorded for writing. */

static _Thread_local pg_hub_progress *t_progress;
static _Thread_local long long t_progress_done;

void pg_linear_progress_begin(const char *name, long long total_bytes) {
    pg_hub_progress_end(t_progress, false);
    const char *slash = strrchr(name, '/');
    if (slash && slash[1]) name = slash + 1;
    t_progress = pg_hub_progress_start_task("load", name, 1, 1, total_bytes);
    t_progress_done = 0;
    pg_hub_progress_update(t_progress, 0, -1);
}

void pg_linear_progress_end(bool ok) {
    if (ok && t_progress) pg_hub_progress_update(t_progress, t_progress_done, t_progress_done);
    pg_hub_progress_end(t_progress, ok);
    t_progress = NULL;
}

/* The source bytes of ls[0..n) are packed (or taken from the cache). */
static void progress(const pg_linear_src *const *ls, int n) {
    if (!t_progress) return;
    for (int i = 0; i < n; i++)
        t_progress_done += (long long)ls[i]->n_out *
                           (long long)pg_dtype_row_bytes(ls[i]->dtype, (size_t)ls[i]->n_in);
    pg_hub_progress_update(t_progress, t_progress_done, -1);
}

static bool cache_take(int64_t N, int64_t K, bool swiglu, pg_packed_weight **out) {
    pg_pack_cache *c = pg_pack_cache_current();
    if (!pg_pack_cache_take(c, N, K, swiglu, out)) return false;
    pg_pack_cache_put(c, *out);
    return true;
}

/* After packing: record w, and drop the source's pages of the layers it
 * was packed from (they are not read again; a tied embedding's rows are
 * paged in again when looked up). */
static void packed(pg_packed_weight *w, const pg_linear_src *const *ls, int n) {
    pg_pack_cache_put(pg_pack_cache_current(), w);
    for (int i = 0; i < n; i++)
        if (!ls[i]->ct && ls[i]->w)
            pg_mapped_release(ls[i]->w, (size_t)ls[i]->n_out *
                                            pg_dtype_row_bytes(ls[i]->dtype, (size_t)ls[i]->n_in));
}

/* Stacked float / GGUF rows of parts[a..b) (same dtype) in one buffer. */
static pagoda_status pack_run(const pg_linear_policy *p, const pg_linear_src *const *parts, int a,
                              int b, bool quantize, pg_packed_weight **out) {
    if (parts[a]->ct) return ct_pack(p->ct, parts + a, b - a, NULL, out);
    const pg_dtype t = parts[a]->dtype;
    const int64_t K = parts[a]->n_in;
    int bits = quantize ? p->bits : 0;
    if (b - a == 1)
        return pack_w(p, bits, p->group, p->act_group != 0, t, parts[a]->w, NULL, parts[a]->n_out,
                      K, out);
    const size_t row = pg_dtype_row_bytes(t, (size_t)K);
    int64_t N = 0;
    for (int i = a; i < b; i++)
        N += parts[i]->n_out;
    uint8_t *tmp = malloc((size_t)N * row);
    if (!tmp) return pg_error(PAGODA_ERR_NOMEM, "model: out of memory stacking a linear layer");
    size_t off = 0;
    for (int i = a; i < b; i++) {
        memcpy(tmp + off, parts[i]->w, (size_t)parts[i]->n_out * row);
        off += (size_t)parts[i]->n_out * row;
    }
    pagoda_status st = pack_w(p, bits, p->group, p->act_group != 0, t, tmp, NULL, N, K, out);
    free(tmp);
    return st;
}

pagoda_status pg_linear_pack(const pg_linear_policy *p, const pg_linear_src *const *parts, int n,
                             bool quantize, const char *what, pg_linear *out) {
    memset(out, 0, sizeof *out);
    if (n < 1 || n > PG_LINEAR_MAX_PARTS)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model: %s: %d parts in one linear layer", what, n);
    bool any_ct = false, all_ct = true, bias = false;
    for (int i = 0; i < n; i++) {
        if (parts[i]->n_in != parts[0]->n_in)
            return pg_error(PAGODA_ERR_INVALID_ARG, "model: %s: stacked parts differ in n_in",
                            what);
        any_ct |= parts[i]->ct;
        all_ct &= parts[i]->ct;
        bias |= parts[i]->bias != NULL;
        out->n_out += parts[i]->n_out;
    }
    if (any_ct && !all_ct) return ct_mixed(what);
    out->n_in = parts[0]->n_in;
    pagoda_status st = PAGODA_OK;
    /* runs of equal dtype pack together */
    int64_t col = 0;
    for (int a = 0; a < n && st == PAGODA_OK;) {
        int b = a + 1;
        while (b < n && (all_ct || parts[b]->dtype == parts[a]->dtype))
            b++;
        out->col[out->n_parts] = col;
        int64_t rows = 0;
        for (int i = a; i < b; i++)
            rows += parts[i]->n_out;
        pg_packed_weight **pw = &out->part[out->n_parts];
        if (!cache_take(rows, out->n_in, false, pw)) {
            st = pack_run(p, parts, a, b, quantize, pw);
            if (st == PAGODA_OK) packed(*pw, parts + a, b - a);
        }
        if (st == PAGODA_OK) progress(parts + a, b - a);
        out->n_parts++;
        for (int i = a; i < b; i++)
            col += parts[i]->n_out;
        a = b;
    }
    out->col[out->n_parts] = col;
    if (st == PAGODA_OK && bias) {
        out->bias = pg_malloc_aligned((size_t)out->n_out * sizeof(float));
        if (!out->bias) st = pg_error(PAGODA_ERR_NOMEM, "model: out of memory");
        for (int i = 0, c = 0; st == PAGODA_OK && i < n; c += (int)parts[i]->n_out, i++) {
            if (parts[i]->bias)
                memcpy(out->bias + c, parts[i]->bias, (size_t)parts[i]->n_out * sizeof(float));
            else
                memset(out->bias + c, 0, (size_t)parts[i]->n_out * sizeof(float));
        }
    }
    if (st != PAGODA_OK) pg_linear_free(out);
    return st;
}

pagoda_status pg_linear_pack_swiglu(const pg_linear_policy *p, const pg_linear_src *gate,
                                    const pg_linear_src *up, const char *what, pg_linear *out) {
    memset(out, 0, sizeof *out);
    if (gate->ct != up->ct) return ct_mixed(what);
    if (gate->n_out != up->n_out || gate->n_in != up->n_in || gate->dtype != up->dtype ||
        (gate->bias == NULL) != (up->bias == NULL))
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "model: %s: gate and up differ (%lldx%lld %s vs %lldx%lld %s, or one "
                        "has a bias): not supported",
                        what, (long long)gate->n_out, (long long)gate->n_in,
                        pg_dtype_name(gate->dtype), (long long)up->n_out, (long long)up->n_in,
                        pg_dtype_name(up->dtype));
    out->n_out = gate->n_out;
    out->n_in = gate->n_in;
    out->swiglu = true;
    out->n_parts = 1;
    out->col[1] = gate->n_out;
    pagoda_status st = PAGODA_OK;
    const pg_linear_src *both[2] = {gate, up};
    if (!cache_take(gate->n_out, gate->n_in, true, &out->part[0])) {
        st = gate->ct ? ct_pack(p->ct, &gate, 1, up, &out->part[0])
                      : pack_w(p, p->bits, p->group, p->act_group != 0, gate->dtype, gate->w,
                               up->w, gate->n_out, gate->n_in, &out->part[0]);
        if (st == PAGODA_OK) packed(out->part[0], both, 2);
    }
    if (st == PAGODA_OK) progress(both, 2);
    if (st == PAGODA_OK && gate->bias) { /* [2 n_out]: the gate's, then the up's (gemm.h) */
        out->bias = pg_malloc_aligned((size_t)(2 * out->n_out) * sizeof(float));
        if (!out->bias) st = pg_error(PAGODA_ERR_NOMEM, "model: out of memory");
        if (out->bias) {
            memcpy(out->bias, gate->bias, (size_t)out->n_out * sizeof(float));
            memcpy(out->bias + out->n_out, up->bias, (size_t)out->n_out * sizeof(float));
        }
    }
    if (st != PAGODA_OK) pg_linear_free(out);
    return st;
}

pagoda_status pg_linear_pack_lm_head(const pg_linear_policy *p, const pg_linear_src *h,
                                     pg_linear *out) {
    if (!(p->lm_head_bits && !h->ct && is_float(h->dtype)))
        return pg_linear_pack(p, &h, 1, false, "lm_head", out);
    memset(out, 0, sizeof *out);
    out->n_out = h->n_out;
    out->n_in = h->n_in;
    out->n_parts = 1;
    out->col[1] = h->n_out;
    pagoda_status st = PAGODA_OK;
    if (!cache_take(h->n_out, h->n_in, false, &out->part[0])) {
        st = pack_w(p, p->lm_head_bits, p->lm_head_group, p->lm_head_act, h->dtype, h->w, NULL,
                    h->n_out, h->n_in, &out->part[0]);
        if (st == PAGODA_OK) packed(out->part[0], &h, 1);
    }
    if (st == PAGODA_OK) progress(&h, 1);
    if (st != PAGODA_OK) pg_linear_free(out);
    return st;
}

void pg_linear_free(pg_linear *l) {
    if (!l) return;
    for (int i = 0; i < l->n_parts; i++)
        pg_gemm_free(l->part[i]);
    pg_free(l->bias);
    memset(l, 0, sizeof *l);
}

void pg_linear_chain(pg_linear *const *ls, int n) {
    pg_packed_weight *first = NULL, *prev = NULL;
    for (int i = 0; i < n; i++) {
        if (!ls[i]) continue;
        for (int j = 0; j < ls[i]->n_parts; j++) {
            pg_packed_weight *w = ls[i]->part[j];
            if (!w) continue;
            if (prev) pg_gemm_set_next(prev, w);
            if (!first) first = w;
            prev = w;
        }
    }
    if (prev && prev != first) pg_gemm_set_next(prev, first);
}

size_t pg_linear_scratch_bytes(const pg_linear *l, int64_t M, int nt) {
    size_t need = 0;
    for (int i = 0; i < l->n_parts; i++) {
        size_t s = pg_gemm_scratch_size(l->part[i], M, nt);
        if (s > need) need = s;
    }
    return need;
}

size_t pg_linear_bytes(const pg_linear *l) {
    size_t b = 0;
    for (int i = 0; i < l->n_parts; i++)
        b += pg_gemm_packed_bytes(l->part[i]);
    return b;
}

bool pg_linear_is_quantized(const pg_linear *l) {
    return l->n_parts > 0 && pg_gemm_qpacked(l->part[0]) != NULL;
}

/* ---- forward ---------------------------------------------------------------------- */

pagoda_status pg_linear_forward(const pg_linear *l, const float *x, int64_t T, float *out,
                                int64_t ldc, pg_gemm_epilogue ep, pg_pool *pool, void *scratch) {
    pagoda_status st = PAGODA_OK;
    for (int i = 0; i < l->n_parts && st == PAGODA_OK; i++)
        st = pg_gemm(l->part[i], x, T, l->n_in, out + l->col[i], ldc,
                     l->bias ? l->bias + l->col[i] : NULL, ep, pool, scratch);
    return st;
}

typedef struct norm_job {
    float *out;
    const float *x, *w;
    size_t n;
    float eps;
    const pg_kernel_table *kt;
} norm_job;

static void norm_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    const norm_job *j = ctx;
    j->kt->rmsnorm_f32(j->out + begin * j->n, j->x + begin * j->n, j->w, end - begin, j->n, j->eps);
}

void pg_rmsnorm_rows(float *out, const float *x, const float *w, int64_t T, size_t n, float eps,
                     pg_pool *pool) {
    norm_job j = {out, x, w, n, eps, pg_kernels()};
    if (pool && (size_t)T * n >= 65536)
        pg_pool_parallel_for(pool, (size_t)T, 16, norm_rows, &j);
    else
        norm_rows(&j, 0, (size_t)T, 0);
}

pagoda_status pg_linear_forward_rmsnorm(const pg_linear *l, const float *x, int64_t T,
                                        const float *norm_w, float eps, float *xb, float *out,
                                        int64_t ldc, pg_gemm_epilogue ep, pg_pool *pool,
                                        void *scratch) {
    const pg_qpacked *qw = l->n_parts == 1 ? pg_gemm_qpacked(l->part[0]) : NULL;
    if (qw)
        return pg_qgemm_rmsnorm(qw, x, T, l->n_in, norm_w, eps, out, ldc, l->bias, ep, pool,
                                scratch);
    pg_rmsnorm_rows(xb, x, norm_w, T, (size_t)l->n_in, eps, pool);
    return pg_linear_forward(l, xb, T, out, ldc, ep, pool, scratch);
}
