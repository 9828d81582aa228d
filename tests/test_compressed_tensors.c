/* compressed-tensors checkpoints end to end (model/compressed_tensors.h):
 * pg_model_source_open accepts them, pg_model_load (model/linear.h) puts
 * their int8 / packed int4 weights straight into the W8A8 / W4A8 kernels'
 * layout, and
 *  - logits equal, bit for bit, those of load-time quantization of the same
 *    dequantized weights (checkpoints written with gen_model's "rtn" rule,
 *    whose q and scales --quantization reproduces exactly);
 *  - the engine is batch invariant on them (and on load-time W8A8 / W4A8
 *    with per-(token, group) activation scales) and `pagoda generate` runs
 *    them;
 *  - stories260K converted to pack-quantized / int-quantized stays close to
 *    the f32 model (KL divergence, top-1 agreement, teacher-forced);
 *  - every corrupt or unsupported checkpoint fails with one line naming the
 *    tensor or field. */
#include "testutil.h"
#include "engine_run.h"
#include "model_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "kernels/attention.h"
#include "model/compressed_tensors.h"
#include "gen/gen_model.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/source.h"
#include "pagoda.h"

static char g_tok[4200]; /* stories260K-hf: tokenizer and the model to convert */

static int setup(void **state) {
    (void)state;
    if (pg_er_one_thread_under_qemu()) return -1;
    snprintf(g_tok, sizeof g_tok, "%s", pg_test_asset("llm/stories260K-hf"));
    return 0;
}

/* A small random model with sharp logits; K = 64 (hidden) and 96 (ffn:
 * group 64 leaves a short last group). */
static void tiny_options(pg_gen_model_options *o, const char *dir) {
    pg_gen_model_defaults(o);
    o->hidden = 64;
    o->heads = 4;
    o->kv_heads = 2;
    o->head_dim = 16;
    o->ffn = 96;
    o->vocab = 512;
    o->max_position = 256;
    o->init_std = 0.25f;
    o->tie = false;
    o->tokenizer_dir = g_tok;
    o->hf_dir = dir;
}

static void write_model(const pg_gen_model_options *o) {
    if (pg_gen_model_write(o) != PAGODA_OK) fail_msg("gen_model: %s", pg_last_error());
}

/* ---- one prefill through the batched forward, logits of every row ---- */

typedef struct loaded {
    pg_model_source *src;
    pg_model *m;
} loaded;

/* Open and load `dir` (compute auto), quantizing float linear weights at
 * load to W`bits` with `group` when bits is not 0 (--quantization). */
static pagoda_status load(const char *dir, int bits, int64_t group, loaded *l) {
    memset(l, 0, sizeof *l);
    pg_model_options o;
    pg_model_options_default(&o);
    o.quant_bits = bits;
    o.quant_group = group;
    pagoda_status st = pg_model_source_open(dir, &l->src);
    if (!st) st = pg_model_load(l->src, &o, &l->m);
    return st;
}

static void unload(loaded *l) {
    pg_model_free(l->m);
    pg_model_source_free(l->src);
}

/* ---- (a) bitwise equal to load-time quantization ---- */

static void test_matches_load_time_quantization(void **state) {
    (void)state;
    const int cases[][2] = {{8, 0}, {8, 32}, {4, 32}, {4, 0}, {4, 64}};
    enum { T = 24 };
    int32_t toks[T];
    for (int i = 0; i < T; i++)
        toks[i] = 3 + (i * 37) % 500;
    /* the checkpoint keeps its lm_head dense (`ignore`): so must --quantization,
     * which otherwise gives the lm_head a quantized copy (model/linear.h) */
    setenv("PAGODA_QUANT_LM_HEAD", "none", 1);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char ct[1024], dense[1024];
        snprintf(ct, sizeof ct, "%s/rtn-ct-%zu", pg_test_tmpdir(), ci);
        snprintf(dense, sizeof dense, "%s/rtn-dense-%zu", pg_test_tmpdir(), ci);
        pg_gen_model_options o;
        tiny_options(&o, ct);
        o.seed = 11 + ci;
        o.ct_bits = cases[ci][0];
        o.ct_group = cases[ci][1];
        o.ct_rtn = true;
        write_model(&o);
        o.hf_dir = dense;
        o.ct_dense = true;
        write_model(&o);

        loaded a, b, f;
        if (load(ct, 0, 0, &a) != PAGODA_OK) fail_msg("%s", pg_last_error());
        if (load(dense, o.ct_bits, o.ct_group, &b) != PAGODA_OK) fail_msg("%s", pg_last_error());
        if (load(dense, 0, 0, &f) != PAGODA_OK) fail_msg("%s", pg_last_error());
        const size_t n = (size_t)T * 512;
        float *la = malloc(n * 4), *lb = malloc(n * 4), *lf = malloc(n * 4);
        assert_true(la && lb && lf);
        pg_test_prefill_logits(a.m, toks, T, la);
        pg_test_prefill_logits(b.m, toks, T, lb);
        pg_test_prefill_logits(f.m, toks, T, lf);
        if (memcmp(la, lb, n * 4)) {
            size_t i = 0;
            while (la[i] == lb[i])
                i++;
            fail_msg("W%d group %d: logit %zu: compressed-tensors %.9g, --quantization %.9g",
                     o.ct_bits, o.ct_group, i, (double)la[i], (double)lb[i]);
        }
        /* and the integer path ran: float weights give other logits */
        assert_true(memcmp(la, lf, n * 4) != 0);
        for (size_t i = 0; i < n; i++)
            assert_true(isfinite(la[i]));
        free(la);
        free(lb);
        free(lf);
        unload(&a);
        unload(&b);
        unload(&f);
    }
    unsetenv("PAGODA_QUANT_LM_HEAD");
}

/* ---- (b) the engine and the CLI ---- */

/* Load-time quantization for the engines opened below (0: none). */
static int g_quant_bits, g_quant_act_group;

static pagoda_engine *open_engine(const char *model, bool prefix_caching) {
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.quantization = g_quant_bits;
    o.quant_act_group = g_quant_act_group;
    o.enable_prefix_caching = prefix_caching;
    return pg_er_open(model, &o);
}

/* Request 0 alone equals request 0 among 11 others (greedy tokens and
 * logprobs, bit for bit). */
static void check_batch_invariance(const char *model) {
    enum { N = 12 };
    int32_t prompts[N][48];
    int lens[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 3 + (i * 7) % 40;
        for (int j = 0; j < lens[i]; j++)
            prompts[i][j] = 3 + (i * 131 + j * 29) % 500;
    }
    static pg_er_result alone, batch[N];
    pagoda_engine *e = open_engine(model, true);
    uint64_t id, ids[N];
    pagoda_request r = pg_er_greedy(e, prompts[0], (size_t)lens[0], 16);
    r.sampling.logprobs = 1;
    assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_OK);
    pg_er_run(e, &id, &alone, 1);
    pagoda_engine_free(e);
    e = open_engine(model, false);
    for (int i = N - 1; i >= 0; i--) {
        r = pg_er_greedy(e, prompts[i], (size_t)lens[i], 16 + i);
        r.sampling.logprobs = 1;
        assert_int_equal(pagoda_engine_add_request(e, &r, &ids[i], NULL), PAGODA_OK);
    }
    pg_er_run(e, ids, batch, N);
    pagoda_engine_free(e);
    assert_int_equal(alone.n, 16);
    assert_int_equal(batch[0].n, 16);
    assert_memory_equal(alone.ids, batch[0].ids, sizeof alone.ids[0] * 16);
    assert_memory_equal(alone.lp, batch[0].lp, sizeof alone.lp[0] * 16);
    bool differ = false;
    for (int i = 1; i < N; i++)
        differ |= memcmp(batch[i].ids, batch[0].ids, 4 * sizeof batch[0].ids[0]) != 0;
    assert_true(differ);
}

static void test_engine_batch_invariance(void **state) {
    (void)state;
    /* the last one keeps every down_proj dense through `ignore` */
    const char *schemes[][2] = {{"w8a8", "0"}, {"w4a8", "32"}, {"w4a16", "0"}, {"w4a8", "64"}};
    for (int i = 0; i < 4; i++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/bi-%s-g%s", pg_test_tmpdir(), schemes[i][0], schemes[i][1]);
        pg_gen_model_options o;
        tiny_options(&o, dir);
        o.ct_bits = schemes[i][0][1] - '0';
        o.ct_group = atoi(schemes[i][1]);
        o.ct_weight_only = strstr(schemes[i][0], "a16") != NULL;
        if (i == 3) o.ct_ignore = "re:.*mlp\\.down_proj$";
        write_model(&o);
        if (i == 3) {
            pg_model_source *src;
            if (pg_model_source_open(dir, &src) != PAGODA_OK) fail_msg("%s", pg_last_error());
            const pg_ct_config *c = pg_model_source_ct(src);
            assert_non_null(c);
            assert_false(pg_ct_quantized(c, "model.layers.1.mlp.down_proj"));
            assert_true(pg_ct_quantized(c, "model.layers.1.mlp.up_proj"));
            assert_non_null(pg_model_source_tensor(src, "model.layers.1.mlp.down_proj.weight"));
            pg_model_source_free(src);
        }
        check_batch_invariance(dir);
    }
    /* load-time quantization of a dense model with activation scales per
     * (token, group of 32) (--quant-act-group 32) */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/bi-dense", pg_test_tmpdir());
    pg_gen_model_options o;
    tiny_options(&o, dir);
    write_model(&o);
    for (g_quant_bits = 8; g_quant_bits >= 4; g_quant_bits -= 4) {
        g_quant_act_group = 32;
        check_batch_invariance(dir);
    }
    g_quant_bits = g_quant_act_group = 0;
}

/* Run the built `pagoda` with ARGS; returns stdout+stderr (malloc'ed) and
 * the exit status in *rc. */
static char *run_pagoda(const char *args, int *rc) {
    const char *bdir = getenv("PAGODA_BUILD_DIR");
    assert_non_null(bdir);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s '%s/pagoda' %s 2>&1", pg_test_exec_wrapper(), bdir, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *out = calloc(cap, 1);
    assert_non_null(out);
    while (n + 1 < cap && fgets(out + n, (int)(cap - n), p))
        n += strlen(out + n);
    *rc = pclose(p);
    return out;
}

/* stories260K converted (gen_model --from) to pack-quantized int4 g32 and
 * int-quantized int8 per channel tells the f32 model's story start through
 * `pagoda generate`; --quantization on such a checkpoint is refused. */
static void test_generate_stories_compressed_tensors(void **state) {
    (void)state;
    pg_model_source *src;
    if (pg_model_source_open(g_tok, &src) != PAGODA_OK) fail_msg("%s", pg_last_error());
    const int cases[][3] = {{4, 32, 1}, {8, 0, 0}};
    for (int ci = 0; ci < 2; ci++) {
        char dir[1024], args[2048];
        snprintf(dir, sizeof dir, "%s/stories-ct-%d", pg_test_tmpdir(), ci);
        pg_gen_model_options o;
        pg_gen_model_defaults(&o);
        assert_int_equal(pg_gen_model_options_from(&o, src), PAGODA_OK);
        o.ct_bits = cases[ci][0];
        o.ct_group = cases[ci][1];
        o.ct_weight_only = cases[ci][2];
        o.tokenizer_dir = g_tok;
        o.hf_dir = dir;
        write_model(&o);
        snprintf(args, sizeof args,
                 "generate '%s' --prompt 'Once upon a time' --max-tokens 12 --temperature 0", dir);
        int rc;
        char *out = run_pagoda(args, &rc);
        if (rc != 0 || !strstr(out, "Once upon a time, there was a little girl")) {
            fprintf(stderr, "W%d: %s\n", o.ct_bits, out);
            fail();
        }
        free(out);
        snprintf(args, sizeof args, "generate '%s' --prompt x --quantization w8a8", dir);
        out = run_pagoda(args, &rc);
        assert_true(rc != 0);
        assert_non_null(strstr(out, "already quantized (compressed-tensors"));
        free(out);
    }
    pg_model_source_free(src);
}

/* ---- stories260K accuracy vs f32 ---- */

static int read_tokens(int32_t *toks, int cap) {
    size_t len;
    char *txt = pg_test_read_file(
        pg_test_asset("llm/llama2c/expected/stories260K_greedy_n256.tokens.txt"), &len);
    int n = 0;
    for (char *p = txt; *p && n < cap;) {
        if (*p >= '0' && *p <= '9') {
            toks[n++] = (int32_t)strtol(p, &p, 10);
        } else {
            p++;
        }
    }
    free(txt);
    return n;
}

/* Teacher-forced over the 257-token reference transcript: mean
 * KL(P_f32 || P_ct) and the share of positions with the same top-1, for
 * stories260K converted to int-quantized W8 per channel and pack-quantized
 * W4 g32 (compressed-tensors' own scale rule): as close as the load-time
 * schemes (tests/test_quant_formats.c bounds). */
static void test_stories_accuracy(void **state) {
    (void)state;
    int32_t toks[300];
    const int n = read_tokens(toks, 300);
    assert_true(n >= 200);
    const int T = n - 1;
    pg_model_source *src;
    if (pg_model_source_open(g_tok, &src) != PAGODA_OK) fail_msg("%s", pg_last_error());
    loaded f;
    if (load(g_tok, 0, 0, &f) != PAGODA_OK) fail_msg("%s", pg_last_error());
    const int V = pg_model_get_config(f.m)->vocab_size;
    float *lf = malloc((size_t)T * V * 4), *lq = malloc((size_t)T * V * 4);
    assert_true(lf && lq);
    pg_test_prefill_logits(f.m, toks, T, lf);
    const int cases[][2] = {{8, 0}, {4, 32}};
    for (int ci = 0; ci < 2; ci++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/acc-%d", pg_test_tmpdir(), ci);
        pg_gen_model_options o;
        pg_gen_model_defaults(&o);
        assert_int_equal(pg_gen_model_options_from(&o, src), PAGODA_OK);
        o.ct_bits = cases[ci][0];
        o.ct_group = cases[ci][1];
        o.hf_dir = dir;
        write_model(&o);
        loaded q;
        if (load(dir, 0, 0, &q) != PAGODA_OK) fail_msg("%s", pg_last_error());
        pg_test_prefill_logits(q.m, toks, T, lq);
        double top1;
        double kl = pg_test_mean_kl(lf, lq, T, V, &top1);
        fprintf(stderr, "stories260K compressed-tensors W%d %s: mean KL %.6f, same top-1 %.2f%%\n",
                o.ct_bits, o.ct_group ? "g32" : "per-channel", kl, top1);
        if (o.ct_bits == 8)
            assert_true(kl < 0.002 && top1 >= 97.0);
        else
            assert_true(kl < 0.1 && top1 >= 85.0);
        unload(&q);
        /* tools/quant_kl --ct measures the same checkpoint the same way (its
         * own full-sequence forward: equal up to float summation order) */
        double tkl = -1, tmax, ttop = -1;
        char cmd[16384], line[512];
        snprintf(cmd, sizeof cmd, "%s '%s/quant_kl' '%s' '%s' --ct-only --threads 1 --ct '%s' 2>&1",
                 pg_test_exec_wrapper(), getenv("PAGODA_BUILD_DIR"), g_tok,
                 pg_test_asset("llm/llama2c/expected/stories260K_greedy_n256.tokens.txt"), dir);
        FILE *p = popen(cmd, "r");
        assert_non_null(p);
        char label[64];
        snprintf(label, sizeof label, "acc-%d ", ci);
        while (fgets(line, sizeof line, p))
            if (!strncmp(line, label, strlen(label)))
                assert_int_equal(sscanf(line + strlen(label), "%lf %lf %lf", &tkl, &tmax, &ttop),
                                 3);
        assert_int_equal(pclose(p), 0);
        assert_true(fabs(tkl - kl) <= 0.05 * kl && fabs(ttop - top1) <= 1.0);
    }
    free(lf);
    free(lq);
    unload(&f);
    pg_model_source_free(src);
}

/* ---- (c) corrupt and unsupported checkpoints ---- */

/* An edit of model.safetensors: drop `name`, or replace / add it. */
typedef struct edit {
    const char *name;
    bool drop;
    pg_dtype dtype;
    int ndim;
    int64_t shape[2];
    const void *data;
    size_t nbytes;
} edit;

static void copy_text(const char *from, const char *to, const char *find, const char *repl) {
    size_t len;
    char *s = pg_test_read_file(from, &len);
    char *at = find ? strstr(s, find) : NULL;
    if (find) assert_non_null(at);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    if (at) {
        fwrite(s, 1, (size_t)(at - s), f);
        fputs(repl, f);
        fputs(at + strlen(find), f);
    } else {
        fwrite(s, 1, len, f);
    }
    fclose(f);
    free(s);
}

/* dst = src with config.json text `find` replaced by `repl` (NULL: as is)
 * and the tensor edits applied. */
static void make_variant(const char *src, const char *dst, const char *find, const char *repl,
                         const edit *ed, int ned) {
    char a[1200], b[1200];
    assert_true(mkdir(dst, 0755) == 0);
    snprintf(a, sizeof a, "%s/config.json", src);
    snprintf(b, sizeof b, "%s/config.json", dst);
    copy_text(a, b, find, repl);
    snprintf(a, sizeof a, "%s/model.safetensors", src);
    snprintf(b, sizeof b, "%s/model.safetensors", dst);
    pg_safetensors *st;
    assert_int_equal(pg_safetensors_open(a, &st), PAGODA_OK);
    pg_safetensors_writer *w;
    assert_int_equal(pg_safetensors_writer_create(&w), PAGODA_OK);
    const size_t nt = pg_safetensors_n_tensors(st);
    bool *used = calloc((size_t)ned + 1, 1);
    for (int pass = 0; pass < 2; pass++) {
        if (pass) assert_int_equal(pg_safetensors_writer_begin(w, b), PAGODA_OK);
        for (size_t i = 0; i < nt; i++) {
            const pg_tensor *t = pg_safetensors_tensor_at(st, i);
            const edit *e = NULL;
            for (int j = 0; j < ned; j++)
                if (!strcmp(ed[j].name, t->name)) e = &ed[j], used[j] = true;
            if (e && e->drop) continue;
            if (!pass)
                assert_int_equal(pg_safetensors_writer_add(w, t->name, e ? e->dtype : t->dtype,
                                                           e ? e->ndim : t->ndim,
                                                           e ? e->shape : t->shape),
                                 PAGODA_OK);
            else
                assert_int_equal(pg_safetensors_writer_write(w, e ? e->data : t->data,
                                                             e ? e->nbytes : t->nbytes),
                                 PAGODA_OK);
        }
        for (int j = 0; j < ned; j++) {
            if (used[j] || ed[j].drop) continue;
            if (!pass)
                assert_int_equal(
                    pg_safetensors_writer_add(w, ed[j].name, ed[j].dtype, ed[j].ndim, ed[j].shape),
                    PAGODA_OK);
            else
                assert_int_equal(pg_safetensors_writer_write(w, ed[j].data, ed[j].nbytes),
                                 PAGODA_OK);
        }
    }
    assert_int_equal(pg_safetensors_writer_finish(w), PAGODA_OK);
    pg_safetensors_writer_free(w);
    pg_safetensors_close(st);
    free(used);
}

static void expect_open_error(const char *dir, pagoda_status want, const char *msg1,
                              const char *msg2) {
    pg_model_source *src = NULL;
    pagoda_status st = pg_model_source_open(dir, &src);
    const char *e = pg_last_error();
    if (st != want || !strstr(e, msg1) || (msg2 && !strstr(e, msg2)) || strchr(e, '\n')) {
        fprintf(stderr, "%s: status %d, message: %s\n", dir, st, e);
        pg_model_source_free(src);
        fail();
    }
}

static void test_corrupt_checkpoints(void **state) {
    (void)state;
    char base[1024];
    snprintf(base, sizeof base, "%s/good", pg_test_tmpdir());
    pg_gen_model_options o;
    tiny_options(&o, base);
    o.layers = 2;
    o.ct_bits = 4;
    o.ct_group = 32;
    write_model(&o);
    pg_model_source *src;
    if (pg_model_source_open(base, &src) != PAGODA_OK) fail_msg("%s", pg_last_error());
    assert_non_null(pg_model_source_ct(src));
    /* it loads as it is; --quantization (pg_model_options.quant_bits) on it
     * is refused at load */
    pg_model *m = NULL;
    assert_int_equal(pg_model_load(src, NULL, &m), PAGODA_OK);
    pg_model_free(m);
    m = NULL;
    const int qbits[2] = {8, 4};
    for (int i = 0; i < 2; i++) {
        pg_model_options mo;
        pg_model_options_default(&mo);
        mo.quant_bits = qbits[i];
        mo.quant_group = 32;
        assert_int_equal(pg_model_load(src, &mo, &m), PAGODA_ERR_UNSUPPORTED);
        assert_null(m);
        assert_non_null(strstr(pg_last_error(), "already quantized"));
    }
    const pg_tensor *packed =
        pg_model_source_tensor(src, "model.layers.1.mlp.up_proj.weight_packed");
    assert_non_null(packed);
    const pg_tensor *scale =
        pg_model_source_tensor(src, "model.layers.0.self_attn.o_proj.weight_scale");
    assert_non_null(scale);

    const char *Q = "model.layers.0.self_attn.q_proj";
    char qs[200], qp[200], qh[200], qz[200], qg[200];
    snprintf(qs, sizeof qs, "%s.weight_scale", Q);
    snprintf(qp, sizeof qp, "%s.weight_packed", Q);
    snprintf(qh, sizeof qh, "%s.weight_shape", Q);
    snprintf(qz, sizeof qz, "%s.weight_zero_point", Q);
    snprintf(qg, sizeof qg, "%s.weight_g_idx", Q);
    static const int64_t bad_shape[2] = {64, 72};
    static const int32_t i32_shape[2] = {64, 64};
    static uint16_t zeros[64 * 64];
    int32_t gidx[64] = {0};
    struct {
        const char *name, *find, *repl;
        edit e;
        pagoda_status st;
        const char *msg1, *msg2;
    } cases[] = {
        {"no-scale",
         NULL,
         NULL,
         {.name = qs, .drop = true},
         PAGODA_ERR_FORMAT,
         "missing tensor",
         qs},
        {"no-packed",
         NULL,
         NULL,
         {.name = "model.layers.1.mlp.up_proj.weight_packed", .drop = true},
         PAGODA_ERR_FORMAT,
         "missing tensor 'model.layers.1.mlp.up_proj.weight_packed'",
         NULL},
        {"no-shape",
         NULL,
         NULL,
         {.name = qh, .drop = true},
         PAGODA_ERR_FORMAT,
         "missing tensor",
         qh},
        {"bad-shape",
         NULL,
         NULL,
         {qh, false, PG_I64, 1, {2}, bad_shape, sizeof bad_shape},
         PAGODA_ERR_FORMAT,
         "weight_shape [64, 72] does not match",
         qp},
        {"scale-per-channel",
         NULL,
         NULL,
         {qs, false, PG_BF16, 2, {64, 1}, zeros, 64 * 2},
         PAGODA_ERR_FORMAT,
         "weight_scale must be F32/F16/BF16 [64, 2]",
         qp},
        {"scale-int",
         NULL,
         NULL,
         {qs, false, PG_I16, 2, {64, 2}, zeros, 64 * 2 * 2},
         PAGODA_ERR_UNSUPPORTED,
         "unsupported dtype",
         qs},
        {"packed-i8",
         NULL,
         NULL,
         {qp, false, PG_I8, 2, {64, 32}, zeros, 64 * 32},
         PAGODA_ERR_FORMAT,
         "dtype I8 (need I32",
         qp},
        {"zero-point",
         NULL,
         NULL,
         {qz, false, PG_I32, 2, {8, 2}, zeros, 8 * 2 * 4},
         PAGODA_ERR_UNSUPPORTED,
         "zero points",
         qz},
        {"g-idx",
         NULL,
         NULL,
         {qg, false, PG_I32, 1, {64}, gidx, sizeof gidx},
         PAGODA_ERR_UNSUPPORTED,
         "g_idx",
         qg},
        {"lm-head-not-ignored",
         "\"ignore\": [\"lm_head\"]",
         "\"ignore\": []",
         {.name = "none", .drop = true},
         PAGODA_ERR_FORMAT,
         "missing tensor 'lm_head.weight_packed'",
         NULL},
        {"asymmetric",
         "\"symmetric\": true, \"strategy\": \"group\"",
         "\"symmetric\": false, \"strategy\": \"group\"",
         {.name = "none", .drop = true},
         PAGODA_ERR_UNSUPPORTED,
         "asymmetric",
         "config.json"},
        {"actorder",
         "\"actorder\": null",
         "\"actorder\": \"group\"",
         {.name = "none", .drop = true},
         PAGODA_ERR_UNSUPPORTED,
         "actorder 'group'",
         "config.json"},
        {"bits",
         "\"num_bits\": 4",
         "\"num_bits\": 2",
         {.name = "none", .drop = true},
         PAGODA_ERR_UNSUPPORTED,
         "num_bits 2",
         NULL},
        {"fp8",
         "\"type\": \"int\"",
         "\"type\": \"float\"",
         {.name = "none", .drop = true},
         PAGODA_ERR_UNSUPPORTED,
         "type 'float'",
         NULL},
        {"static-act",
         "\"strategy\": \"token\", \"dynamic\": true",
         "\"strategy\": \"tensor\", \"dynamic\": false",
         {.name = "none", .drop = true},
         PAGODA_ERR_UNSUPPORTED,
         "dynamic per-token",
         NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/%s", pg_test_tmpdir(), cases[i].name);
        make_variant(base, dir, cases[i].find, cases[i].repl, &cases[i].e, 1);
        expect_open_error(dir, cases[i].st, cases[i].msg1, cases[i].msg2);
    }
    /* q/k/v_proj (one fused GEMM) with only k_proj ignored: refused at load,
     * naming the layer. */
    {
        char mixed[1200];
        snprintf(mixed, sizeof mixed, "%s/mixed-qkv", pg_test_tmpdir());
        pg_gen_model_options om;
        tiny_options(&om, mixed);
        om.ct_bits = 8;
        om.ct_ignore = "re:.*k_proj$";
        write_model(&om);
        loaded lm;
        assert_int_equal(load(mixed, 0, 0, &lm), PAGODA_ERR_UNSUPPORTED);
        assert_null(lm.m);
        if (!strstr(pg_last_error(), "layer 0 q/k/v_proj: mixes compressed-tensors quantized "
                                     "and ignored") ||
            strchr(pg_last_error(), '\n'))
            fail_msg("unexpected error: %s", pg_last_error());
        unload(&lm);
    }
    /* an int32 weight_shape (compression_param_info's dtype) is read too */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/shape-i32", pg_test_tmpdir());
    edit e32 = {qh, false, PG_I32, 1, {2}, i32_shape, sizeof i32_shape};
    make_variant(base, dir, NULL, NULL, &e32, 1);
    loaded l;
    if (load(dir, 0, 0, &l) != PAGODA_OK) fail_msg("%s", pg_last_error());
    unload(&l);
    pg_model_source_free(src);

    /* naive-/int-quantized int4 (int8 storage): values outside [-8, 7] */
    const char *js = "{\"quantization_config\": {\"quant_method\": \"compressed-tensors\", "
                     "\"format\": \"naive-quantized\", \"config_groups\": {\"g\": {\"weights\": "
                     "{\"num_bits\": 4, \"type\": \"int\", \"symmetric\": true, \"strategy\": "
                     "\"channel\"}}}}}";
    pg_ct_config c;
    assert_int_equal(pg_ct_config_parse(js, strlen(js), "config.json", &c), PAGODA_OK);
    assert_int_equal(c.format, PG_CT_INT_QUANTIZED);
    int8_t w4[2 * 32], q[2 * 32];
    float sc[2] = {0.5f, 0.25f}, s2[2];
    for (int i = 0; i < 64; i++)
        w4[i] = (int8_t)(i % 16 - 8);
    pg_tensor tw = {"z.weight", PG_I8, 2, {2, 32}, w4, sizeof w4};
    pg_tensor ts = {"z.weight_scale", PG_F32, 2, {2, 1}, sc, sizeof sc};
    pg_qweight qw;
    assert_int_equal(pg_ct_unpack(&c, &tw, NULL, &ts, q, s2, &qw), PAGODA_OK);
    assert_memory_equal(q, w4, sizeof w4);
    assert_int_equal(qw.bits, 4);
    w4[37] = 8;
    assert_int_equal(pg_ct_unpack(&c, &tw, NULL, &ts, q, s2, &qw), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(pg_last_error(), "z.weight: value 8 at [1, 5]"));
    pg_ct_config_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_load_time_quantization),
        cmocka_unit_test(test_engine_batch_invariance),
        cmocka_unit_test(test_generate_stories_compressed_tensors),
        cmocka_unit_test(test_stories_accuracy),
        cmocka_unit_test(test_corrupt_checkpoints),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
