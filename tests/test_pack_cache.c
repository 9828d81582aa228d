/* The packed-weight cache (model/pack_cache.h) and the serialized packed
 * weights under it (kernels/gemm.h pg_gemm_describe / pg_gemm_adopt):
 *   - a first load writes the file, a second maps it and computes bitwise
 *     the logits of a load without the cache, for every weight format
 *     (F32 / BF16 HF, GGUF Q8_0, Q4_0, Q4_K + Q6_K, Q5_K, IQ4_XS, IQ4_NL, MXFP4, W8A8 / W4A8
 *     quantization at load), each file holding the expected formats;
 *   - every key component (source identity, options, lm_head policy, kernel
 *     table, tensor-parallel shard) changes the key; a changed option or a
 *     regenerated model misses end to end;
 *   - a damaged, truncated or foreign file is rewritten (never trusted), with
 *     the same logits; an unwritable directory only warns; disabled by
 *     PAGODA_PACK_CACHE=0 and pg_model_options.no_pack_cache;
 *   - pg_gemm_adopt's checks.
 * Every directory is under a pg_test_tmpdir (never ~/.cache). */
#define _GNU_SOURCE /* utimensat */
#include "testutil.h"
#include "model_run.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/pool.h"
#include "gen/gen_model.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "model/model.h"
#include "model/pack_cache.h"
#include "model/source.h"

static char g_base[4096];

/* Format indices of the file's table (kernels/gemm.c SERIAL_FORMATS). */
enum {
    F_BF16,
    F_F32,
    F_W8A8,
    F_W4A8,
    F_MXFP4,
    F_Q4K,
    F_Q5K,
    F_Q6K,
    F_Q2K,
    F_Q3K,
    F_IQ4XS,
    F_IQ4NL
};

static const int32_t TOKENS[] = {1, 17, 42, 5, 99, 3, 250, 7};
enum { T = 8 };

static char *path_in(const char *dir, const char *name) {
    static char buf[4][4200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* A fresh cache directory, made current through PAGODA_CACHE_DIR. */
static const char *fresh_cache(const char *name) {
    static char buf[4200];
    snprintf(buf, sizeof buf, "%s/cache-%s", g_base, name);
    pg_test_mkdirs(buf);
    setenv("PAGODA_CACHE_DIR", buf, 1);
    return buf;
}

/* The one *.pgpack file of dir into out (fails unless exactly `want`). */
static int count_files(const char *dir, char *out, size_t cap) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 7 && !strcmp(e->d_name + l - 7, ".pgpack")) {
            if (out) snprintf(out, cap, "%s/%s", dir, e->d_name);
            n++;
        }
    }
    closedir(d);
    return n;
}

/* Bit set of the formats in the file's table (layout: pack_cache.h). */
static unsigned file_formats(const char *file) {
    size_t len;
    uint8_t *b = (uint8_t *)pg_test_read_file(file, &len);
    assert_non_null(b);
    uint64_t n, table_off;
    memcpy(&n, b + 16, 8);
    memcpy(&table_off, b + 24, 8);
    unsigned set = 0;
    for (uint64_t i = 0; i < n; i++) {
        int64_t fmt;
        memcpy(&fmt, b + table_off + i * (PG_GEMM_DESC_WORDS + 3) * 8, 8);
        assert_true(fmt >= 0 && fmt <= F_IQ4NL);
        set |= 1u << fmt;
    }
    free(b);
    return set;
}

/* Load path under o, check the outcome, return the logits [T, vocab]. */
static float *load_logits(const char *path, const pg_model_options *o, pg_pack_cache_outcome want) {
    pg_model_source *src;
    pg_model *m = pg_test_load(path, o, &src);
    assert_int_equal(pg_pack_cache_last_outcome(), want);
    const int32_t V = pg_model_get_config(m)->vocab_size;
    float *lg = malloc((size_t)T * (size_t)V * sizeof(float));
    assert_non_null(lg);
    pg_test_prefill_logits(m, TOKENS, T, lg);
    pg_model_free(m);
    pg_model_source_free(src);
    return lg;
}

static size_t vocab_of(const char *path) {
    pg_model_source *src;
    assert_int_equal(pg_model_source_open(path, &src), PAGODA_OK);
    size_t v = (size_t)pg_model_source_config(src)->vocab_size;
    pg_model_source_free(src);
    return v;
}

static void assert_same(const float *a, const float *b, const char *path) {
    size_t n = (size_t)T * vocab_of(path);
    if (memcmp(a, b, n * sizeof(float)) != 0) fail_msg("%s: logits differ", path);
}

/* The logits without the cache. */
static float *reference(const char *path, const pg_model_options *o) {
    setenv("PAGODA_PACK_CACHE", "0", 1);
    float *r = load_logits(path, o, PG_PACK_CACHE_OFF);
    unsetenv("PAGODA_PACK_CACHE");
    return r;
}

/* First load writes, second maps; both equal the reference bitwise; the
 * file holds the formats `fmts` (and only those). */
static void roundtrip(const char *name, const char *path, const pg_model_options *o,
                      unsigned fmts) {
    float *ref = reference(path, o);
    const char *dir = fresh_cache(name);
    float *a = load_logits(path, o, PG_PACK_CACHE_WRITTEN);
    char file[4400];
    assert_int_equal(count_files(dir, file, sizeof file), 1);
    assert_int_equal(file_formats(file), fmts);
    float *b = load_logits(path, o, PG_PACK_CACHE_HIT);
    float *c = load_logits(path, o, PG_PACK_CACHE_HIT);
    assert_same(ref, a, path);
    assert_same(ref, b, path);
    assert_same(ref, c, path);
    assert_int_equal(count_files(dir, NULL, 0), 1);
    free(ref);
    free(a);
    free(b);
    free(c);
}

/* ---- models ------------------------------------------------------------------ */

static char g_f32[4200], g_bf16[4200], g_q8[4200], g_q4[4200], g_q4k[4200], g_q5k[4200],
    g_iq4xs[4200], g_iq4nl[4200];

static void gen(const char *hf, const char *gguf, pg_dtype hf_dtype, pg_dtype gguf_dtype,
                int hidden, bool kmix, uint64_t seed) {
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    o.hidden = hidden;
    o.ffn = 2 * hidden;
    o.seed = seed;
    o.hf_dtype = hf_dtype;
    o.gguf_dtype = gguf_dtype;
    o.gguf_kmix = kmix;
    o.hf_dir = hf;
    o.gguf_path = gguf;
    if (pg_gen_model_write(&o) != PAGODA_OK) fail_msg("gen: %s", pg_last_error());
}

static int setup(void **state) {
    (void)state;
    snprintf(g_base, sizeof g_base, "%s", pg_test_tmpdir());
    snprintf(g_f32, sizeof g_f32, "%s/f32", g_base);
    snprintf(g_bf16, sizeof g_bf16, "%s/bf16", g_base);
    snprintf(g_q8, sizeof g_q8, "%s/q8.gguf", g_base);
    snprintf(g_q4, sizeof g_q4, "%s/q4.gguf", g_base);
    snprintf(g_q4k, sizeof g_q4k, "%s/q4k.gguf", g_base);
    snprintf(g_q5k, sizeof g_q5k, "%s/q5k.gguf", g_base);
    snprintf(g_iq4xs, sizeof g_iq4xs, "%s/iq4xs.gguf", g_base);
    snprintf(g_iq4nl, sizeof g_iq4nl, "%s/iq4nl.gguf", g_base);
    gen(g_f32, g_q8, PG_F32, PG_Q8_0, 64, false, 1);
    gen(g_bf16, g_q4, PG_BF16, PG_Q4_0, 64, false, 2);
    gen(NULL, g_q4k, PG_F32, PG_Q4_K, 256, true, 3);
    gen(NULL, g_q5k, PG_F32, PG_Q5_K, 256, false, 4);
    gen(NULL, g_iq4xs, PG_F32, PG_IQ4_XS, 256, false, 5);
    gen(NULL, g_iq4nl, PG_F32, PG_IQ4_NL, 256, false, 6);
    unsetenv("PAGODA_PACK_CACHE");
    unsetenv("PAGODA_QUANT_LM_HEAD");
    return 0;
}

/* ---- round trips of every format ------------------------------------------------ */

static void test_roundtrip_hf(void **state) {
    (void)state;
    roundtrip("f32", g_f32, NULL, 1u << F_F32);
    roundtrip("bf16", g_bf16, NULL, 1u << F_BF16);
}

static void test_roundtrip_gguf(void **state) {
    (void)state;
    roundtrip("q8", g_q8, NULL, 1u << F_W8A8);
    roundtrip("q4", g_q4, NULL, 1u << F_W4A8);
    /* *_K_M: Q4_K layers, Q6_K attn_v / ffn_down / output */
    roundtrip("q4k", g_q4k, NULL, 1u << F_Q4K | 1u << F_Q6K);
    /* Q5_K layers; the 512-row embedding's rows of 256 are Q5_K too */
    roundtrip("q5k", g_q5k, NULL, 1u << F_Q5K);
    /* IQ4_XS, IQ4_NL: the codebook K-quant rows */
    roundtrip("iq4xs", g_iq4xs, NULL, 1u << F_IQ4XS);
    roundtrip("iq4nl", g_iq4nl, NULL, 1u << F_IQ4NL);
}

/* gpt-oss's mixture of experts (grouped expert GEMMs, router) */
static void test_roundtrip_moe(void **state) {
    (void)state;
    const char *gg = pg_test_asset("oracles/gpt-oss-tiny/model.gguf");
    float *ref = reference(gg, NULL);
    const char *dir = fresh_cache("moe");
    float *a = load_logits(gg, NULL, PG_PACK_CACHE_WRITTEN);
    char file[4400];
    assert_int_equal(count_files(dir, file, sizeof file), 1);
    assert_true(file_formats(file) != 0);
    float *b = load_logits(gg, NULL, PG_PACK_CACHE_HIT);
    assert_same(ref, a, gg);
    assert_same(ref, b, gg);
    free(ref);
    free(a);
    free(b);
}

static void test_roundtrip_load_time_quant(void **state) {
    (void)state;
    pg_model_options o;
    pg_model_options_default(&o);
    o.quant_bits = 8;
    roundtrip("w8a8", g_f32, &o, 1u << F_W8A8);
    o.quant_bits = 4;
    o.quant_group = 32;
    o.quant_act_group = 32;
    roundtrip("w4a8", g_bf16, &o, 1u << F_W4A8);
}

/* ---- the key ------------------------------------------------------------------ */

/* A kernel table of another ISA level than the process's (every machine
 * has scalar and at least one SIMD level). */
static const pg_kernel_table *other_table(void) {
    static const char *const levels[] = {"scalar", "avx2", "avx512", "avx512bf16", "neon", "sve"};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        const pg_kernel_table *kt = pg_kernels_for_isa(levels[i]);
        if (kt && strcmp(kt->isa, pg_kernels()->isa) != 0) return kt;
    }
    fail_msg("no second ISA level on this machine");
    return NULL;
}

static void test_key_components(void **state) {
    (void)state;
    pg_model_source *src;
    assert_int_equal(pg_model_source_open(g_f32, &src), PAGODA_OK);
    pg_model_options o;
    pg_model_options_default(&o);
    char *k0 = pg_pack_cache_key(src, &o, NULL, 0, 1);
    char *k1 = pg_pack_cache_key(src, &o, pg_kernels(), 0, 1);
    assert_non_null(k0);
    assert_string_equal(k0, k1); /* deterministic */
    free(k1);
    char *ks[16];
    int n = 0;
    pg_model_options v = o;
    v.compute = PG_BF16;
    ks[n++] = pg_pack_cache_key(src, &v, NULL, 0, 1);
    v = o;
    v.compute = PG_F32;
    ks[n++] = pg_pack_cache_key(src, &v, NULL, 0, 1);
    v = o;
    v.quant_bits = 8;
    ks[n++] = pg_pack_cache_key(src, &v, NULL, 0, 1);
    v.quant_group = 32;
    ks[n++] = pg_pack_cache_key(src, &v, NULL, 0, 1);
    v.quant_act_group = 32;
    ks[n++] = pg_pack_cache_key(src, &v, NULL, 0, 1);
    v = o;
    v.quant_bits = 8;
    setenv("PAGODA_QUANT_LM_HEAD", "none", 1);
    ks[n++] = pg_pack_cache_key(src, &v, NULL, 0, 1);
    unsetenv("PAGODA_QUANT_LM_HEAD");
    ks[n++] = pg_pack_cache_key(src, &o, other_table(), 0, 1); /* the ISA */
    ks[n++] = pg_pack_cache_key(src, &o, NULL, 0, 2);          /* tensor-parallel size */
    ks[n++] = pg_pack_cache_key(src, &o, NULL, 1, 2);          /* and rank */
    pg_model_source_free(src);
    /* the source: another model of the same shapes and sizes */
    assert_int_equal(pg_model_source_open(g_bf16, &src), PAGODA_OK);
    ks[n++] = pg_pack_cache_key(src, &o, NULL, 0, 1);
    pg_model_source_free(src);
    for (int i = 0; i < n; i++) {
        assert_non_null(ks[i]);
        if (!strcmp(ks[i], k0)) fail_msg("key variant %d equals the base key", i);
        for (int j = 0; j < i; j++)
            if (!strcmp(ks[i], ks[j])) fail_msg("key variants %d and %d are equal", i, j);
    }
    for (int i = 0; i < n; i++)
        free(ks[i]);
    /* the source file's mtime */
    char file[4400];
    snprintf(file, sizeof file, "%s", g_q8);
    assert_int_equal(pg_model_source_open(file, &src), PAGODA_OK);
    char *a = pg_pack_cache_key(src, &o, NULL, 0, 1);
    struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 0},
                             {.tv_sec = 1000000000, .tv_nsec = 0}};
    assert_int_equal(utimensat(AT_FDCWD, file, ts, 0), 0);
    char *b = pg_pack_cache_key(src, &o, NULL, 0, 1);
    assert_string_not_equal(a, b);
    free(a);
    free(b);
    pg_model_source_free(src);
    free(k0);
}

/* End to end: another option or a regenerated model (same shapes, same
 * sizes) misses and writes a file of its own; the ISA's key differs (above),
 * so PAGODA_ISA=avx2 and default runs never share a file. */
static void test_miss_end_to_end(void **state) {
    (void)state;
    char hf[4200];
    snprintf(hf, sizeof hf, "%s/regen", g_base);
    gen(hf, NULL, PG_F32, PG_F32, 64, false, 11);
    const char *dir = fresh_cache("miss");
    float *a = load_logits(hf, NULL, PG_PACK_CACHE_WRITTEN);
    free(load_logits(hf, NULL, PG_PACK_CACHE_HIT));
    pg_model_options o;
    pg_model_options_default(&o);
    o.quant_bits = 8;
    free(load_logits(hf, &o, PG_PACK_CACHE_WRITTEN));
    assert_int_equal(count_files(dir, NULL, 0), 2);
    free(load_logits(hf, &o, PG_PACK_CACHE_HIT));
    setenv("PAGODA_QUANT_LM_HEAD", "none", 1);
    free(load_logits(hf, &o, PG_PACK_CACHE_WRITTEN));
    unsetenv("PAGODA_QUANT_LM_HEAD");
    assert_int_equal(count_files(dir, NULL, 0), 3);
    /* the same path rewritten with other weights */
    gen(hf, NULL, PG_F32, PG_F32, 64, false, 12);
    float *ref = reference(hf, NULL);
    float *b = load_logits(hf, NULL, PG_PACK_CACHE_WRITTEN);
    assert_same(ref, b, hf);
    assert_memory_not_equal(a, b, (size_t)T * vocab_of(hf) * sizeof(float));
    free(a);
    free(b);
    free(ref);
}

/* ---- damaged files --------------------------------------------------------------- */

static void damage(const char *file, long at, int truncate_to_half) {
    size_t len;
    char *b = pg_test_read_file(file, &len);
    assert_non_null(b);
    if (truncate_to_half) {
        len /= 2;
    } else {
        size_t i = at >= 0 ? (size_t)at : len - (size_t)(-at);
        b[i] ^= 0x40;
    }
    pg_test_write_file(file, b, len);
    free(b);
}

static void test_damaged_files_rewritten(void **state) {
    (void)state;
    float *ref = reference(g_q8, NULL);
    const char *dir = fresh_cache("damage");
    free(load_logits(g_q8, NULL, PG_PACK_CACHE_WRITTEN));
    char file[4400];
    assert_int_equal(count_files(dir, file, sizeof file), 1);
    size_t len;
    char *good = pg_test_read_file(file, &len);
    /* the last weight's data, the header, the key, a table word, truncated,
     * and a file of another kind */
    uint64_t n, toff, last_off;
    memcpy(&n, good + 16, 8);
    memcpy(&toff, good + 24, 8);
    memcpy(&last_off, good + toff + ((n - 1) * (PG_GEMM_DESC_WORDS + 3) + PG_GEMM_DESC_WORDS) * 8,
           8);
    const long at[] = {(long)last_off + 5, 9, 70, (long)toff + 8, 0, 0};
    for (int k = 0; k < 6; k++) {
        pg_test_write_file(file, good, len);
        if (k == 3) { /* the table's second word (swiglu of weight 0) */
            damage(file, at[k], 0);
        } else if (k == 4) {
            damage(file, 0, 1);
        } else if (k == 5) {
            pg_test_write_file(file, "not a cache file", 16);
        } else {
            damage(file, at[k], 0);
        }
        float *g = load_logits(g_q8, NULL, PG_PACK_CACHE_REWRITTEN);
        assert_same(ref, g, g_q8);
        free(g);
        /* rewritten whole: the next start maps it */
        size_t l2;
        char *now = pg_test_read_file(file, &l2);
        assert_int_equal(l2, len);
        assert_memory_equal(now, good, len);
        free(now);
        free(load_logits(g_q8, NULL, PG_PACK_CACHE_HIT));
    }
    free(good);
    free(ref);
}

/* A cache directory that cannot be made (its parent is a file: fails even
 * for root): the load packs, warns and works. */
static void test_unwritable_dir(void **state) {
    (void)state;
    float *ref = reference(g_q4, NULL);
    char *f = path_in(g_base, "a-file");
    pg_test_write_file(f, "x", 1);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/sub", f);
    setenv("PAGODA_CACHE_DIR", dir, 1);
    float *a = load_logits(g_q4, NULL, PG_PACK_CACHE_WRITE_FAILED);
    float *b = load_logits(g_q4, NULL, PG_PACK_CACHE_WRITE_FAILED);
    assert_same(ref, a, g_q4);
    assert_same(ref, b, g_q4);
    free(a);
    free(b);
    free(ref);
}

static void test_disabled(void **state) {
    (void)state;
    const char *dir = fresh_cache("off");
    setenv("PAGODA_PACK_CACHE", "0", 1);
    free(load_logits(g_q8, NULL, PG_PACK_CACHE_OFF));
    unsetenv("PAGODA_PACK_CACHE");
    pg_model_options o;
    pg_model_options_default(&o);
    o.no_pack_cache = true;
    free(load_logits(g_q8, &o, PG_PACK_CACHE_OFF));
    assert_int_equal(count_files(dir, NULL, 0), 0);
    free(load_logits(g_q8, NULL, PG_PACK_CACHE_WRITTEN));
    assert_int_equal(count_files(dir, NULL, 0), 1);
}

/* The cache directory: PAGODA_CACHE_DIR, else XDG_CACHE_HOME/pagoda, else
 * HOME/.cache/pagoda. */
static void test_cache_dir(void **state) {
    (void)state;
    char *saved = getenv("PAGODA_CACHE_DIR") ? strdup(getenv("PAGODA_CACHE_DIR")) : NULL;
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    char buf[4096];
    setenv("PAGODA_CACHE_DIR", "/x/y", 1);
    assert_true(pg_pack_cache_dir(buf, sizeof buf));
    assert_string_equal(buf, "/x/y");
    unsetenv("PAGODA_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/c", 1);
    assert_true(pg_pack_cache_dir(buf, sizeof buf));
    assert_string_equal(buf, "/c/pagoda");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/h", 1);
    assert_true(pg_pack_cache_dir(buf, sizeof buf));
    assert_string_equal(buf, "/h/.cache/pagoda");
    assert_false(pg_pack_cache_dir(buf, 4));
    if (saved) setenv("PAGODA_CACHE_DIR", saved, 1);
    if (home) setenv("HOME", home, 1);
    free(saved);
    free(home);
}

/* ---- pg_gemm_adopt -------------------------------------------------------------- */

static int g_released;
static void on_release(void *ctx) {
    (void)ctx;
    g_released++;
}

/* w packed, then adopted over a copy of its data: the same results bit for
 * bit (plain and SwiGLU), one release on free. */
static void check_adopt(pg_packed_weight *w, const float *A, int64_t M) {
    const int64_t N = pg_gemm_n(w), K = pg_gemm_k(w);
    int64_t d[PG_GEMM_DESC_WORDS];
    pg_gemm_describe(w, d);
    const size_t bytes = pg_gemm_packed_bytes(w);
    void *copy = pg_malloc_aligned(bytes);
    memcpy(copy, pg_gemm_data(w), bytes);
    pg_packed_weight *a;
    assert_int_equal(pg_gemm_adopt(d, copy, bytes, NULL, on_release, NULL, &a), PAGODA_OK);
    assert_string_equal(pg_gemm_format_name(a), pg_gemm_format_name(w));
    void *scratch = pg_malloc_aligned(pg_gemm_scratch_size(w, M, 1));
    float *c1 = malloc((size_t)(M * N) * sizeof(float)),
          *c2 = malloc((size_t)(M * N) * sizeof(float));
    const pg_gemm_epilogue ep = pg_gemm_is_swiglu(w) ? PG_GEMM_SWIGLU : PG_GEMM_STORE;
    assert_int_equal(pg_gemm(w, A, M, K, c1, N, NULL, ep, NULL, scratch), PAGODA_OK);
    assert_int_equal(pg_gemm(a, A, M, K, c2, N, NULL, ep, NULL, scratch), PAGODA_OK);
    assert_memory_equal(c1, c2, (size_t)(M * N) * sizeof(float));
    g_released = 0;
    pg_gemm_free(a);
    assert_int_equal(g_released, 1);
    free(c1);
    free(c2);
    pg_free(scratch);
    pg_free(copy);
}

/* Every driver format the generator's models do not reach here (MXFP4) and
 * the float / int8 ones directly; K-quants through the model round trips. */
static void test_adopt_formats(void **state) {
    (void)state;
    enum { N = 40, K = 64, M = 3 };
    float *W = malloc(N * K * sizeof(float)), *U = malloc(N * K * sizeof(float));
    float *A = malloc(M * K * sizeof(float));
    uint16_t *Wb = malloc(N * K * 2);
    for (int i = 0; i < N * K; i++) {
        W[i] = pg_test_rnd() - 0.5f;
        U[i] = pg_test_rnd() - 0.5f;
        Wb[i] = pg_f32_to_bf16(W[i]);
    }
    for (int i = 0; i < M * K; i++)
        A[i] = pg_test_rnd() - 0.5f;
    pg_packed_weight *w;
    assert_int_equal(pg_gemm_pack(PG_F32, W, N, K, NULL, &w), PAGODA_OK);
    check_adopt(w, A, M);
    pg_gemm_free(w);
    assert_int_equal(pg_gemm_pack(PG_BF16, Wb, N, K, NULL, &w), PAGODA_OK);
    check_adopt(w, A, M);
    pg_gemm_free(w);
    assert_int_equal(pg_gemm_pack_swiglu(PG_F32, W, U, N, K, NULL, &w), PAGODA_OK);
    check_adopt(w, A, M);
    pg_gemm_free(w);
    assert_int_equal(pg_gemm_pack_quantize(PG_F32, W, U, N, K, 8, 0, 0, NULL, NULL, &w), PAGODA_OK);
    check_adopt(w, A, M);
    pg_gemm_free(w);
    assert_int_equal(pg_gemm_pack_quantize(PG_F32, W, NULL, N, K, 4, 32, 1, NULL, NULL, &w),
                     PAGODA_OK);
    check_adopt(w, A, M);
    pg_gemm_free(w);
    /* MXFP4 (Hugging Face blocks/scales): random codes, scales near 1 */
    uint8_t *blocks = malloc(N * K / 2), *scales = malloc(N * K / 32);
    for (int i = 0; i < N * K / 2; i++)
        blocks[i] = (uint8_t)pg_test_rnd_u64();
    for (int i = 0; i < N * K / 32; i++)
        scales[i] = (uint8_t)(122 + pg_test_rnd_u64() % 8);
    assert_int_equal(pg_gemm_pack_mxfp4(blocks, scales, NULL, NULL, N, K, NULL, NULL, &w),
                     PAGODA_OK);
    assert_string_equal(pg_gemm_format_name(w), "mxfp4");
    check_adopt(w, A, M);
    pg_gemm_free(w);
    assert_int_equal(pg_gemm_pack_mxfp4(blocks, scales, blocks, scales, N, K, NULL, NULL, &w),
                     PAGODA_OK);
    check_adopt(w, A, M);
    pg_gemm_free(w);
    free(blocks);
    free(scales);
    free(W);
    free(U);
    free(A);
    free(Wb);
}

/* pg_gemm_adopt refuses descriptions that do not fit. */
static void test_adopt_errors(void **state) {
    (void)state;
    enum { N = 40, K = 64 };
    float *W = malloc(N * K * sizeof(float));
    for (int i = 0; i < N * K; i++)
        W[i] = pg_test_rnd() - 0.5f;
    pg_packed_weight *w;
    assert_int_equal(pg_gemm_pack_quantize(PG_F32, W, NULL, N, K, 8, 32, 1, NULL, NULL, &w),
                     PAGODA_OK);
    int64_t d[PG_GEMM_DESC_WORDS];
    pg_gemm_describe(w, d);
    size_t bytes = pg_gemm_packed_bytes(w);
    void *copy = pg_malloc_aligned(bytes);
    memcpy(copy, pg_gemm_data(w), bytes);
    pg_packed_weight *bad = (pg_packed_weight *)1;
    int64_t e[PG_GEMM_DESC_WORDS];
    memcpy(e, d, sizeof e);
    e[0] = 99; /* the format */
    assert_int_equal(pg_gemm_adopt(e, copy, bytes, NULL, NULL, NULL, &bad), PAGODA_ERR_FORMAT);
    assert_null(bad);
    memcpy(e, d, sizeof e);
    e[2] += 64; /* N: the panel count no longer fits */
    assert_int_equal(pg_gemm_adopt(e, copy, bytes, NULL, NULL, NULL, &bad), PAGODA_ERR_FORMAT);
    assert_int_equal(pg_gemm_adopt(d, copy, bytes - 1, NULL, NULL, NULL, &bad), PAGODA_ERR_FORMAT);
    assert_int_equal(pg_gemm_adopt(d, (char *)copy + 1, bytes, NULL, NULL, NULL, &bad),
                     PAGODA_ERR_FORMAT);
    memcpy(e, d, sizeof e);
    e[6] += 1; /* the microkernel's rows: another kernel than the table's */
    assert_int_equal(pg_gemm_adopt(e, copy, bytes, NULL, NULL, NULL, &bad), PAGODA_ERR_UNSUPPORTED);
    assert_null(bad);
    pg_free(copy);
    pg_gemm_free(w);
    free(W);
    /* a K-quant row's description must name its own type and super-block
     * bytes: an IQ4_XS weight adopted as Q4_K (description word 18, the
     * type) or with other group bytes (word 9, and the sizes after it) */
    enum { KN = 40, KB = 136 };
    uint8_t *rows = malloc(KN * KB);
    for (int i = 0; i < KN * KB; i++)
        rows[i] = (uint8_t)pg_test_rnd_u64();
    for (int r = 0; r < KN; r++) {
        const uint16_t h = pg_f32_to_f16(0.001f);
        memcpy(rows + r * KB, &h, 2);
    }
    assert_int_equal(pg_gemm_pack(PG_IQ4_XS, rows, KN, 256, NULL, &w), PAGODA_OK);
    assert_string_equal(pg_gemm_format_name(w), "iq4_xs");
    pg_gemm_describe(w, d);
    bytes = pg_gemm_packed_bytes(w);
    copy = pg_malloc_aligned(bytes);
    memcpy(copy, pg_gemm_data(w), bytes);
    memcpy(e, d, sizeof e);
    e[18] = PG_Q4_K;
    assert_int_equal(pg_gemm_adopt(e, copy, bytes, NULL, NULL, NULL, &bad), PAGODA_ERR_UNSUPPORTED);
    assert_null(bad);
    memcpy(e, d, sizeof e);
    e[9] -= 64; /* group bytes, panel bytes and total kept consistent */
    e[10] = e[4] * e[9];
    e[11] = e[5] * e[10];
    assert_int_equal(pg_gemm_adopt(e, copy, (size_t)e[11], NULL, NULL, NULL, &bad),
                     PAGODA_ERR_UNSUPPORTED);
    assert_null(bad);
    pg_packed_weight *good = NULL;
    assert_int_equal(pg_gemm_adopt(d, copy, bytes, NULL, NULL, NULL, &good), PAGODA_OK);
    pg_gemm_free(good);
    pg_free(copy);
    pg_gemm_free(w);
    free(rows);
}

/* ---- the command line ------------------------------------------------------------ */

/* `pagoda generate` with PAGODA_CACHE_DIR=dir (and extra args); returns the
 * stdout (greedy text). */
static char *run_generate(const char *dir, const char *extra) {
    char cmd[16384], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "PAGODA_CACHE_DIR='%s' %s '%s' generate '%s' --prompt 'Once upon a time' "
             "--temperature 0 --max-tokens 12 %s 2>/dev/null",
             dir, pg_test_exec_wrapper(), pg_test_pagoda_bin(), pg_test_asset("llm/stories260K-hf"),
             extra);
    assert_int_equal(pg_test_run_command(cmd, &out), 0);
    return out;
}

/* The CLI writes the cache where PAGODA_CACHE_DIR says, maps it on the next
 * start (same text), and --no-pack-cache writes nothing. */
static void test_cli(void **state) {
    (void)state;
    const char *dir = fresh_cache("cli");
    char *a = run_generate(dir, "");
    assert_int_equal(count_files(dir, NULL, 0), 1);
    char *b = run_generate(dir, "");
    assert_int_equal(count_files(dir, NULL, 0), 1);
    assert_string_equal(a, b);
    const char *off = fresh_cache("cli-off");
    char *c = run_generate(off, "--no-pack-cache");
    assert_int_equal(count_files(off, NULL, 0), 0);
    assert_string_equal(a, c);
    assert_true(strlen(a) > 0);
    free(a);
    free(b);
    free(c);
}

/* ---- threaded packing ------------------------------------------------------------ */

/* The packed bytes of the q8 model's weights and of float / GGUF weights
 * packed over a default pool of `threads` threads (unpinned). */
static void use_default_pool(int threads) {
    pg_pool_default_shutdown();
    pg_pool_options po = pg_pool_options_default();
    po.n_threads = threads;
    po.pin = 0;
    assert_int_equal(pg_pool_default_configure(&po), PAGODA_OK);
    assert_int_equal(pg_pool_size(pg_pool_default()), threads);
}

/* A cache file written with packing over 1 thread equals, byte for byte,
 * one written over 4 (every format's packing splits rows or panels over
 * the default pool), for float, GGUF and load-time quantized models. */
static void test_threaded_packing_identical(void **state) {
    (void)state;
    const char *paths[] = {g_f32, g_bf16, g_q8, g_q4, g_q4k, g_q5k, g_f32};
    for (int i = 0; i < 7; i++) {
        pg_model_options o;
        pg_model_options_default(&o);
        if (i == 6) o.quant_bits = 8, o.quant_group = 32;
        char *files[2];
        size_t lens[2];
        for (int k = 0; k < 2; k++) {
            use_default_pool(k ? 4 : 1);
            char name[32];
            snprintf(name, sizeof name, "threads-%d-%d", i, k);
            const char *dir = fresh_cache(name);
            free(load_logits(paths[i], &o, PG_PACK_CACHE_WRITTEN));
            char file[4400];
            assert_int_equal(count_files(dir, file, sizeof file), 1);
            files[k] = pg_test_read_file(file, &lens[k]);
        }
        assert_int_equal(lens[0], lens[1]);
        if (memcmp(files[0], files[1], lens[0]) != 0)
            fail_msg("%s (%d): packing over 4 threads differs from 1", paths[i], i);
        free(files[0]);
        free(files[1]);
    }
    pg_pool_default_shutdown();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adopt_formats),
        cmocka_unit_test(test_adopt_errors),
        cmocka_unit_test(test_cache_dir),
        cmocka_unit_test(test_roundtrip_hf),
        cmocka_unit_test(test_roundtrip_gguf),
        cmocka_unit_test(test_roundtrip_moe),
        cmocka_unit_test(test_roundtrip_load_time_quant),
        cmocka_unit_test(test_key_components),
        cmocka_unit_test(test_miss_end_to_end),
        cmocka_unit_test(test_damaged_files_rewritten),
        cmocka_unit_test(test_unwritable_dir),
        cmocka_unit_test(test_disabled),
        cmocka_unit_test(test_threaded_packing_identical),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
