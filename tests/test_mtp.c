/* Qwen3.5's multi-token-prediction (MTP) head (model/model.h
 * pg_model_mtp_create) against a reference written here straight from the
 * equations (vLLM qwen3_5_mtp.py Qwen3_5MultiTokenPredictor.forward +
 * Qwen3_5DecoderLayer with a full-attention layer), in double precision,
 * reading the BF16 tensors of the oracle's model.safetensors itself (raw HF
 * names, norms stored zero-centred: x * (1 + w)). The target's hidden states
 * are pagoda's own (pg_batch.hidden_out), checked first to be the lm_head's
 * input: their product with the (tied) embedding gives the target's logits.
 * Both checkpoint forms (HF directory, llama.cpp GGUF with the nextn block)
 * must give the same head. A model without MTP weights is refused. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_run.h"
#include "model_run.h"
#include "testutil.h"

#include "engine/mtp.h"
#include "engine/spec.h"
#include "model/model.h"
#include "model/source.h"
#include "pagoda.h"

enum { T = 24 }; /* prompt tokens; the head runs at positions 0 .. T - 2 */

/* ---- the safetensors file, read here ---- */

typedef struct st_file {
    char *data;
    size_t len, base;
    cJSON *hdr;
} st_file;

static void st_open(st_file *f, const char *path) {
    f->data = pg_test_read_file(path, &f->len);
    assert_non_null(f->data);
    uint64_t n;
    memcpy(&n, f->data, 8);
    char *json = malloc(n + 1);
    assert_non_null(json);
    memcpy(json, f->data + 8, n);
    json[n] = 0;
    f->hdr = cJSON_Parse(json);
    free(json);
    assert_non_null(f->hdr);
    f->base = 8 + n;
}

/* Tensor `name` as doubles (BF16 in this file), its element count in *n. */
static double *st_get(const st_file *f, const char *name, size_t *n) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(f->hdr, name);
    if (!t) fail_msg("no tensor %s", name);
    assert_string_equal(cJSON_GetObjectItem(t, "dtype")->valuestring, "BF16");
    const cJSON *off = cJSON_GetObjectItem(t, "data_offsets");
    size_t a = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
    size_t b = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    *n = (b - a) / 2;
    double *out = malloc(*n * sizeof *out);
    assert_non_null(out);
    for (size_t i = 0; i < *n; i++) {
        uint16_t h;
        memcpy(&h, f->data + f->base + a + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        float x;
        memcpy(&x, &u, 4);
        out[i] = x;
    }
    return out;
}

static void st_close(st_file *f) {
    cJSON_Delete(f->hdr);
    free(f->data);
}

/* ---- reference math ---- */

/* out = x / rms(x) * (1 + w), n elements */
static void rmsnorm1p(double *out, const double *x, const double *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * r * (1.0 + w[i]);
}

/* y[r] = sum_c W[r][c] x[c], W [rows][cols] */
static void matvec(double *y, const double *W, const double *x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++)
            s += W[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

/* NeoX RoPE over the first rd dims of one head at position p (theta). */
static void rope(double *v, int rd, int p, double theta) {
    for (int i = 0; i < rd / 2; i++) {
        double f = pow(theta, -2.0 * i / rd), a = p * f, c = cos(a), s = sin(a);
        double x0 = v[i], x1 = v[i + rd / 2];
        v[i] = x0 * c - x1 * s;
        v[i + rd / 2] = x0 * s + x1 * c;
    }
}

/* The MTP head's logits [T-1][V] and hidden states [T-1][H] for
 * (hid[p], tokens[p + 1]) at positions p = 0 .. T-2, from the safetensors. */
static void reference(const char *st_path, const float *hid, const int32_t *tokens, double *logits,
                      double *hout) {
    /* the oracle's config (hf/config.json text_config) */
    const int H = 64, NH = 4, NKV = 2, HD = 32, FF = 128, V = 320, RD = 8;
    const double eps = 1e-6, theta = 1e7;
    st_file f;
    st_open(&f, st_path);
    size_t n;
    double *emb = st_get(&f, "model.language_model.embed_tokens.weight", &n);
    assert_int_equal(n, (size_t)V * H);
    double *wen = st_get(&f, "mtp.pre_fc_norm_embedding.weight", &n);
    double *whn = st_get(&f, "mtp.pre_fc_norm_hidden.weight", &n);
    double *fc = st_get(&f, "mtp.fc.weight", &n);
    assert_int_equal(n, (size_t)H * 2 * H);
    double *win = st_get(&f, "mtp.layers.0.input_layernorm.weight", &n);
    double *wq = st_get(&f, "mtp.layers.0.self_attn.q_proj.weight", &n);
    assert_int_equal(n, (size_t)NH * 2 * HD * H);
    double *wk = st_get(&f, "mtp.layers.0.self_attn.k_proj.weight", &n);
    double *wv = st_get(&f, "mtp.layers.0.self_attn.v_proj.weight", &n);
    double *wo = st_get(&f, "mtp.layers.0.self_attn.o_proj.weight", &n);
    double *wqn = st_get(&f, "mtp.layers.0.self_attn.q_norm.weight", &n);
    double *wkn = st_get(&f, "mtp.layers.0.self_attn.k_norm.weight", &n);
    double *wpost = st_get(&f, "mtp.layers.0.post_attention_layernorm.weight", &n);
    double *wg = st_get(&f, "mtp.layers.0.mlp.gate_proj.weight", &n);
    double *wu = st_get(&f, "mtp.layers.0.mlp.up_proj.weight", &n);
    double *wd = st_get(&f, "mtp.layers.0.mlp.down_proj.weight", &n);
    double *wnorm = st_get(&f, "mtp.norm.weight", &n);
    const int P = T - 1;
    double *K = calloc((size_t)P * NKV * HD, sizeof(double));
    double *Vv = calloc((size_t)P * NKV * HD, sizeof(double));
    assert_true(K && Vv);
    for (int p = 0; p < P; p++) {
        double cat[128], x[64], res[64], a[64], q[256], k[64], v[64], o[128], g[128], u[128];
        double e[64], h[64];
        for (int i = 0; i < H; i++) {
            e[i] = emb[(size_t)tokens[p + 1] * H + i];
            h[i] = hid[(size_t)p * H + i];
        }
        rmsnorm1p(cat, e, wen, H, eps); /* [embedding | hidden] */
        rmsnorm1p(cat + H, h, whn, H, eps);
        matvec(x, fc, cat, H, 2 * H);
        memcpy(res, x, sizeof res);
        rmsnorm1p(a, x, win, H, eps);
        matvec(q, wq, a, NH * 2 * HD, H); /* per head: HD query rows, HD gate rows */
        matvec(k, wk, a, NKV * HD, H);
        matvec(v, wv, a, NKV * HD, H);
        for (int j = 0; j < NKV; j++) {
            rmsnorm1p(&K[((size_t)p * NKV + j) * HD], k + j * HD, wkn, HD, eps);
            rope(&K[((size_t)p * NKV + j) * HD], RD, p, theta);
            memcpy(&Vv[((size_t)p * NKV + j) * HD], v + j * HD, HD * sizeof(double));
        }
        for (int hh = 0; hh < NH; hh++) {
            double qh[32], sc[T];
            rmsnorm1p(qh, q + hh * 2 * HD, wqn, HD, eps);
            rope(qh, RD, p, theta);
            const int j = hh / (NH / NKV);
            double mx = -1e300, sum = 0;
            for (int t = 0; t <= p; t++) {
                double d = 0;
                for (int i = 0; i < HD; i++)
                    d += qh[i] * K[((size_t)t * NKV + j) * HD + i];
                sc[t] = d / sqrt((double)HD);
                if (sc[t] > mx) mx = sc[t];
            }
            for (int t = 0; t <= p; t++)
                sum += (sc[t] = exp(sc[t] - mx));
            for (int i = 0; i < HD; i++) {
                double acc = 0;
                for (int t = 0; t <= p; t++)
                    acc += sc[t] / sum * Vv[((size_t)t * NKV + j) * HD + i];
                const double gate = q[hh * 2 * HD + HD + i];
                o[hh * HD + i] = acc / (1.0 + exp(-gate));
            }
        }
        matvec(x, wo, o, H, NH * HD);
        for (int i = 0; i < H; i++)
            res[i] += x[i];
        rmsnorm1p(a, res, wpost, H, eps);
        matvec(g, wg, a, FF, H);
        matvec(u, wu, a, FF, H);
        for (int i = 0; i < FF; i++)
            g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
        matvec(x, wd, g, H, FF);
        for (int i = 0; i < H; i++)
            res[i] += x[i];
        rmsnorm1p(hout + (size_t)p * H, res, wnorm, H, eps);
        matvec(logits + (size_t)p * V, emb, hout + (size_t)p * H, V, H); /* tied lm_head */
    }
    double *all[] = {emb, wen, whn, fc, win, wq, wk, wv, wo, wqn, wkn, wpost, wg, wu, wd, wnorm, K,
                     Vv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    st_close(&f);
}

/* ---- pagoda ---- */

static void prompt(int32_t *tok) {
    for (int i = 0; i < T; i++)
        tok[i] = (int32_t)((i * 37 + 11) % 256); /* byte tokens */
}

/* pagoda's target hidden states / logits and MTP logits / hidden of the
 * model at path (F32 compute), into the given buffers. */
static void run_pagoda(const char *path, float *hid, float *tlog, float *mlog, float *mhid) {
    pg_model_options opt;
    pg_model_options_default(&opt);
    opt.compute = PG_F32;
    pg_model_source *src;
    pg_model *m = pg_test_load(path, &opt, &src);
    assert_int_equal(pg_model_mtp_layers(m), 1);
    assert_true(pg_model_has_hidden_out(m));
    pg_model *mtp = NULL;
    if (pg_model_mtp_create(m, src, &opt, &mtp) != PAGODA_OK) fail_msg("%s", pg_last_error());
    assert_int_equal(pg_model_num_layers(mtp), 1);
    assert_int_equal(pg_model_layer_cache(mtp, 0)->kind, PG_LAYER_CACHE_FULL);
    int32_t tok[T];
    prompt(tok);
    pg_test_seq *s = pg_test_seq_create(m, T, T, PG_F32);
    assert_int_equal(pg_test_seq_step(s, tok, T, NULL, hid, tlog), PAGODA_OK);
    pg_test_seq_free(s);
    /* the head at positions 0 .. T-2: (h_p, token p + 1), in two steps (its
     * own KV carries the first step's positions into the second) */
    pg_test_seq *q = pg_test_seq_create(mtp, T, T, PG_F32);
    const int a = 10, H = 64, V = 320;
    assert_int_equal(pg_test_seq_step(q, tok + 1, a, hid, mhid, mlog), PAGODA_OK);
    assert_int_equal(pg_test_seq_step(q, tok + 1 + a, T - 1 - a, hid + (size_t)a * H,
                                      mhid + (size_t)a * H, mlog + (size_t)a * V),
                     PAGODA_OK);
    /* no hidden_in: refused, not read */
    pg_test_seq_reset(q);
    assert_int_equal(pg_test_seq_step(q, tok + 1, 2, NULL, NULL, NULL), PAGODA_ERR_INVALID_ARG);
    pg_test_seq_free(q);
    pg_model_free(mtp);
    pg_model_free(m);
    pg_model_source_free(src);
}

static void check_form(const char *asset, float *mlog_out) {
    enum { H = 64, V = 320 };
    char path[1024]; /* (pg_test_asset's buffer is reused below) */
    snprintf(path, sizeof path, "%s", asset);
    float *hid = malloc((size_t)T * H * 4), *tlog = malloc((size_t)T * V * 4);
    float *mlog = malloc((size_t)T * V * 4), *mhid = malloc((size_t)T * H * 4);
    double *rl = malloc((size_t)T * V * 8), *rh = malloc((size_t)T * H * 8);
    assert_true(hid && tlog && mlog && mhid && rl && rh);
    run_pagoda(path, hid, tlog, mlog, mhid);
    int32_t tok[T];
    prompt(tok);
    reference(pg_test_asset("oracles/qwen35-tiny/hf/model.safetensors"), hid, tok, rl, rh);
    /* hidden_out is the lm_head's input: with the tied embedding it gives
     * the target's logits */
    {
        st_file f;
        st_open(&f, pg_test_asset("oracles/qwen35-tiny/hf/model.safetensors"));
        size_t n;
        double *emb = st_get(&f, "model.language_model.embed_tokens.weight", &n);
        double md = 0, mx = 0;
        for (int t = 0; t < T; t++)
            for (int v = 0; v < V; v++) {
                double d = 0;
                for (int i = 0; i < H; i++)
                    d += emb[(size_t)v * H + i] * hid[(size_t)t * H + i];
                const double e = fabs(d - tlog[(size_t)t * V + v]);
                if (e > md) md = e;
                if (fabs(d) > mx) mx = fabs(d);
            }
        print_message("%s: target logits from hidden_out: max |diff| %.3g (max |logit| %.3g)\n",
                      path, md, mx);
        assert_true(md <= 1e-4 * fmax(1.0, mx));
        free(emb);
        st_close(&f);
    }
    double ml = 0, mh = 0, mx = 0;
    int agree = 0;
    for (int p = 0; p < T - 1; p++) {
        int am = 0, ar = 0;
        for (int v = 0; v < V; v++) {
            const size_t i = (size_t)p * V + v;
            const double e = fabs(rl[i] - mlog[i]);
            if (e > ml) ml = e;
            if (fabs(rl[i]) > mx) mx = fabs(rl[i]);
            if (mlog[i] > mlog[(size_t)p * V + am]) am = v;
            if (rl[i] > rl[(size_t)p * V + ar]) ar = v;
        }
        agree += am == ar;
        for (int i = 0; i < H; i++) {
            const double e = fabs(rh[(size_t)p * H + i] - mhid[(size_t)p * H + i]);
            if (e > mh) mh = e;
        }
    }
    print_message("%s: MTP logits vs reference: max |diff| %.3g (max |logit| %.3g), hidden %.3g, "
                  "argmax %d/%d\n",
                  path, ml, mx, mh, agree, T - 1);
    assert_true(mx > 1.0); /* the head computes something */
    assert_true(ml <= 1e-3 * fmax(1.0, mx));
    assert_true(mh <= 1e-3);
    assert_int_equal(agree, T - 1);
    if (mlog_out) memcpy(mlog_out, mlog, (size_t)(T - 1) * V * 4);
    free(hid);
    free(tlog);
    free(mlog);
    free(mhid);
    free(rl);
    free(rh);
}

static void test_mtp_head_matches_reference(void **state) {
    (void)state;
    enum { V = 320 };
    float *a = malloc((size_t)T * V * 4), *b = malloc((size_t)T * V * 4);
    assert_true(a && b);
    check_form(pg_test_asset("oracles/qwen35-tiny/hf"), a);
    check_form(pg_test_asset("oracles/qwen35-tiny/model.gguf"), b);
    double d = 0; /* GGUF = exact F32 upcast of the same BF16 weights */
    for (size_t i = 0; i < (size_t)(T - 1) * V; i++) {
        const double e = fabs((double)a[i] - (double)b[i]);
        if (e > d) d = e;
    }
    print_message("MTP logits HF vs GGUF: max |diff| %.3g\n", d);
    assert_true(d <= 1e-3);
    free(a);
    free(b);
}

static void test_mtp_refused_without_weights(void **state) {
    (void)state;
    pg_model_source *src;
    pg_model *m = pg_test_load(pg_test_asset("oracles/qwen3-dense-tiny/hf"), NULL, &src);
    assert_int_equal(pg_model_mtp_layers(m), 0);
    pg_model *mtp = (pg_model *)1;
    assert_int_equal(pg_model_mtp_create(m, src, NULL, &mtp), PAGODA_ERR_UNSUPPORTED);
    assert_null(mtp);
    assert_non_null(strstr(pg_last_error(), "multi-token-prediction"));
    pg_model_free(m);
    pg_model_source_free(src);
}

/* ---- the proposer inside the engine ---- */

enum { PLEN = 40 };

/* Prompt i: byte tokens with a repeated span (test_mtp_engine.c's too). */
static void spec_prompt(int i, int32_t *p) {
    for (int t = 0; t < PLEN; t++)
        p[t] = (int32_t)(32 + ((t % (7 + i)) * (5 + 3 * i) + i) % 90);
}

/* The proposer's wiring: every draft the engine's MTP proposer made is the
 * argmax of the head run here by hand over the same sequence (test seqs,
 * one token per decode step as the engine runs it): draft 1 from the
 * target's hidden state h_{L-2} and token L-1 of the request's L tokens at
 * position L-2; with K = 2, draft 2 from the head's own hidden state there
 * and draft 1 at position L-1 (checked for the first few). A pairing off
 * by one (h_t with token t, position t + 1, ...) or a stale hidden state
 * fails it. */
typedef struct wire_rec {
    pg_mtp *mtp;
    int32_t k;
    int n;
    int32_t len[256], draft[256][2], nd[256];
} wire_rec;

static int32_t wire_propose(void *ctx, const pg_request *r, int32_t max_drafts, int32_t *out) {
    wire_rec *w = ctx;
    pg_request *rr = (pg_request *)r;
    int32_t want = max_drafts < w->k ? max_drafts : w->k;
    if (pg_mtp_prepare(w->mtp, &rr, &want, 1) != PAGODA_OK) return 0;
    int32_t n = pg_mtp_propose(w->mtp, r, max_drafts, out);
    if (n > 0 && w->n < 256) {
        w->len[w->n] = r->num_tokens;
        w->nd[w->n] = n;
        w->draft[w->n][0] = out[0];
        w->draft[w->n++][1] = n > 1 ? out[1] : -1;
    }
    return n;
}

enum { WG = 24, WH = 64, WV = 320, WN = PLEN + WG };

/* row's argmax, and a check that `got` is it up to a near tie */
static int check_argmax(const float *row, int32_t got) {
    int best = 0;
    for (int v = 1; v < WV; v++)
        if (row[v] > row[best]) best = v;
    assert_true(got >= 0 && got < WV);
    assert_true(row[got] >= row[best] - 1e-4f * fmaxf(1.0f, fabsf(row[best])));
    return best == got;
}

static void wire_check(int32_t k) {
    char model[1024], json[128];
    snprintf(model, sizeof model, "%s", pg_test_asset("oracles/qwen35-tiny/hf"));
    snprintf(json, sizeof json, "{\"method\": \"mtp\", \"num_speculative_tokens\": %d}", k);
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.dtype = PAGODA_DTYPE_F32;
    o.max_model_len = 512;
    assert_int_equal(pagoda_speculative_config_parse(json, &o.speculative), PAGODA_OK);
    pagoda_engine *e = pg_er_open(model, &o);
    static wire_rec w;
    memset(&w, 0, sizeof w);
    w.k = k;
    w.mtp = pg_engine_mtp(e);
    assert_non_null(w.mtp);
    assert_int_equal(pg_engine_set_proposer(e, wire_propose, &w), PAGODA_OK);
    static int32_t tok[WN];
    spec_prompt(0, tok);
    pagoda_request req = pg_er_greedy(e, tok, PLEN, WG);
    uint64_t id;
    static pg_er_result res;
    pg_er_run_requests(e, &req, 1, &id, &res);
    assert_int_equal(res.n, WG);
    assert_int_equal(pg_mtp_check(w.mtp), PAGODA_OK);
    pagoda_engine_free(e);
    memcpy(tok + PLEN, res.ids, WG * sizeof(int32_t));
    assert_true(w.n >= WG / 3);
    /* by hand: the target step by step with its hidden states, then the head */
    pg_model_options mo;
    pg_model_options_default(&mo);
    mo.compute = PG_F32;
    pg_model_source *src;
    pg_model *m = pg_test_load(model, &mo, &src), *mtp = NULL;
    if (pg_model_mtp_create(m, src, &mo, &mtp) != PAGODA_OK) fail_msg("%s", pg_last_error());
    static float hid[WN * WH], mlog[WN * WV], mh[WN * WH], l2[WV];
    pg_test_seq *s = pg_test_seq_create(m, WN, WN, PG_F32);
    assert_int_equal(pg_test_seq_step(s, tok, PLEN, NULL, hid, NULL), PAGODA_OK);
    for (int t = PLEN; t < WN - 1; t++)
        assert_int_equal(pg_test_seq_step(s, tok + t, 1, NULL, hid + (size_t)t * WH, NULL),
                         PAGODA_OK);
    int same = 0, same2 = 0, n2 = 0;
    for (int i = 0; i < w.n; i++) {
        const int p = w.len[i] - 2; /* the head's position behind draft 1 */
        assert_true(p >= PLEN - 2 && p < WN - 2);
        /* the head over positions 0 .. p (prompt rows in one step, then one
         * a step), then (k = 2, first few) the chained step at p + 1 */
        pg_test_seq *q = pg_test_seq_create(mtp, WN, WN, PG_F32);
        assert_int_equal(pg_test_seq_step(q, tok + 1, PLEN - 1, hid, mh, mlog), PAGODA_OK);
        for (int t = PLEN - 1; t <= p; t++)
            assert_int_equal(pg_test_seq_step(q, tok + t + 1, 1, hid + (size_t)t * WH,
                                              mh + (size_t)t * WH, mlog + (size_t)t * WV),
                             PAGODA_OK);
        same += check_argmax(mlog + (size_t)p * WV, w.draft[i][0]);
        if (w.nd[i] > 1 && n2 < 4) {
            assert_int_equal(pg_test_seq_step(q, &w.draft[i][0], 1, mh + (size_t)p * WH, NULL, l2),
                             PAGODA_OK);
            same2 += check_argmax(l2, w.draft[i][1]);
            n2++;
        }
        pg_test_seq_free(q);
    }
    print_message("k %d: %d proposals, draft 1 the hand-run head's argmax in %d; draft 2 in %d of "
                  "%d\n",
                  k, w.n, same, same2, n2);
    if (k > 1) assert_true(n2 > 0);
    pg_test_seq_free(s);
    pg_model_free(mtp);
    pg_model_free(m);
    pg_model_source_free(src);
}

static void test_mtp_drafts_are_the_heads_argmax(void **state) {
    (void)state;
    wire_check(1);
    wire_check(2);
}

static void test_mtp_config(void **state) {
    (void)state;
    pagoda_speculative_config c;
    assert_int_equal(
        pagoda_speculative_config_parse("{\"method\": \"mtp\", \"num_speculative_tokens\": 2}", &c),
        PAGODA_OK);
    assert_int_equal(c.method, PAGODA_SPEC_MTP);
    assert_int_equal(c.num_speculative_tokens, 2);
    assert_int_equal(pagoda_speculative_config_parse(
                         "{\"method\": \"qwen3_5_mtp\", \"num_speculative_tokens\": 1}", &c),
                     PAGODA_OK);
    assert_int_equal(c.method, PAGODA_SPEC_MTP);
    assert_int_equal(pagoda_speculative_config_parse(
                         "{\"method\": \"mtp\", \"model\": \"x\", \"num_speculative_tokens\": 1}", &c),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "takes no \"model\""));
    /* a model without MTP weights: the engine refuses, naming why */
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.max_model_len = 256;
    o.kv_cache_memory = 8u << 20;
    assert_int_equal(
        pagoda_speculative_config_parse("{\"method\": \"mtp\", \"num_speculative_tokens\": 2}",
                                        &o.speculative),
        PAGODA_OK);
    pagoda_engine *e = NULL;
    assert_int_equal(pagoda_engine_create(pg_test_asset("oracles/qwen3-dense-tiny/hf"), &o, &e),
                     PAGODA_ERR_UNSUPPORTED);
    assert_null(e);
    assert_non_null(strstr(pagoda_last_error(), "multi-token-prediction"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mtp_head_matches_reference),
        cmocka_unit_test(test_mtp_refused_without_weights),
        cmocka_unit_test(test_mtp_config),
        cmocka_unit_test(test_mtp_drafts_are_the_heads_argmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
