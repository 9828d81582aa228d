/* GGUF reader/writer: the real llama2.c stories260K files, a writer round
 * trip over every value type, and corrupt files that must fail cleanly. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

static void test_real_stories260k(void **state) {
    (void)state;
    pg_gguf *g = NULL;
    assert_int_equal(pg_gguf_open(pg_test_asset("llm/llama2c/stories260K.gguf"), &g), PAGODA_OK);
    assert_int_equal(pg_gguf_version(g), 3);
    assert_int_equal(pg_gguf_alignment(g), 32);
    assert_int_equal(pg_gguf_data_offset(g) % 32, 0);
    const char *arch;
    assert_int_equal(pg_gguf_get_str(g, "general.architecture", &arch, NULL), PAGODA_OK);
    assert_string_equal(arch, "llama");
    int64_t v;
    assert_int_equal(pg_gguf_get_int(g, "llama.embedding_length", &v), PAGODA_OK);
    assert_int_equal(v, 64);
    assert_int_equal(pg_gguf_get_int(g, "llama.block_count", &v), PAGODA_OK);
    assert_int_equal(v, 5);
    double eps;
    assert_int_equal(pg_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps),
                     PAGODA_OK);
    assert_true(fabs(eps - 1e-5) < 1e-9);
    /* wrong type and missing key */
    assert_int_equal(pg_gguf_get_str(g, "llama.block_count", &arch, NULL), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(pg_last_error(), "has type u32, expected string"));
    assert_int_equal(pg_gguf_get_int(g, "no.such.key", &v), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "no.such.key"));
    assert_int_equal(pg_gguf_get_int_or(g, "no.such.key", 7, &v), PAGODA_OK);
    assert_int_equal(v, 7);

    pg_gguf_array toks, scores, types;
    assert_int_equal(pg_gguf_get_array(g, "tokenizer.ggml.tokens", &toks), PAGODA_OK);
    assert_int_equal(toks.type, PG_GGUF_STRING);
    assert_int_equal(toks.n, 512);
    size_t len;
    const char *s = pg_gguf_array_str(&toks, 1, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "<s>", 3);
    s = pg_gguf_array_str(&toks, 3, &len);
    assert_int_equal(len, 6);
    assert_memory_equal(s, "<0x00>", 6);
    assert_null(pg_gguf_array_str(&toks, 512, &len));
    assert_int_equal(pg_gguf_get_array(g, "tokenizer.ggml.scores", &scores), PAGODA_OK);
    assert_int_equal(scores.type, PG_GGUF_F32);
    assert_int_equal(scores.n, 512);
    assert_int_equal(pg_gguf_get_array(g, "tokenizer.ggml.token_type", &types), PAGODA_OK);
    assert_int_equal(pg_gguf_array_int(&types, 0), 2); /* unknown */
    assert_int_equal(pg_gguf_array_int(&types, 1), 3); /* control */
    assert_int_equal(pg_gguf_array_int(&types, 3), 6); /* byte */

    assert_int_equal(pg_gguf_n_tensors(g), 48);
    const pg_gguf_tensor *t = pg_gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, PG_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 512);
    assert_int_equal(t->nbytes, 64 * 512 * 4);
    t = pg_gguf_find_tensor(g, "blk.4.ffn_down.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 172);
    assert_null(pg_gguf_find_tensor(g, "blk.5.ffn_down.weight"));
    pg_gguf_close(g);
}

static void test_real_quantized(void **state) {
    (void)state;
    pg_gguf *g = NULL;
    assert_int_equal(pg_gguf_open(pg_test_asset("llm/llama2c/stories260K-q8_0.gguf"), &g),
                     PAGODA_OK);
    const pg_gguf_tensor *t = pg_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_int_equal(t->dtype, PG_Q8_0);
    assert_int_equal(t->nbytes, 64 / 32 * 34 * 64);
    pg_gguf_close(g);
    assert_int_equal(pg_gguf_open(pg_test_asset("llm/llama2c/stories260K-q4_0.gguf"), &g),
                     PAGODA_OK);
    t = pg_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_int_equal(t->dtype, PG_Q4_0);
    assert_string_equal(pg_ggml_type_name(t->ggml_type), "Q4_0");
    pg_gguf_close(g);
}

static void test_type_table(void **state) {
    (void)state;
    assert_string_equal(pg_ggml_type_name(12), "Q4_K");
    assert_string_equal(pg_ggml_type_name(30), "BF16");
    assert_null(pg_ggml_type_name(4));
    assert_null(pg_ggml_type_name(1000));
    assert_int_equal(pg_ggml_type_to_dtype(12), PG_Q4_K);
    assert_int_equal(pg_ggml_type_to_dtype(23), PG_IQ4_XS);
    assert_int_equal(pg_ggml_type_to_dtype(21), PG_DTYPE_COUNT); /* IQ3_S */
    assert_int_equal(pg_dtype_to_ggml_type(PG_Q8_0), 8);
    assert_int_equal(pg_dtype_to_ggml_type(PG_BF16), 30);
    assert_int_equal(pg_dtype_to_ggml_type(PG_BOOL), UINT32_MAX);
}

/* A small file with every value type, two tensors (F32 [3,4] then Q8_0 [32]). */
static char g_path[4096];
static const char *write_small(const char *dir, uint32_t alignment) {
    pg_gguf_writer *w;
    assert_int_equal(pg_gguf_writer_create(&w), PAGODA_OK);
    pg_gguf_writer_set_str(w, "general.architecture", "llama");
    pg_gguf_writer_set_u32(w, "a.u32", 4000000000u);
    pg_gguf_writer_set_i32(w, "a.i32", -5);
    pg_gguf_writer_set_u64(w, "a.u64", 1ull << 40);
    pg_gguf_writer_set_f32(w, "a.f32", 0.25f);
    pg_gguf_writer_set_bool(w, "a.bool", true);
    const char *strs[3] = {"x", "", "h\xc3\xa9llo"};
    pg_gguf_writer_set_str_array(w, "a.strs", strs, 3);
    int32_t ints[4] = {1, -2, 3, -4};
    pg_gguf_writer_set_array(w, "a.ints", PG_GGUF_I32, ints, 4);
    uint8_t u8s[3] = {7, 8, 9};
    pg_gguf_writer_set_array(w, "a.u8s", PG_GGUF_U8, u8s, 3);
    double f64s[2] = {1.5, -2.5};
    pg_gguf_writer_set_array(w, "a.f64s", PG_GGUF_F64, f64s, 2);
    if (alignment) pg_gguf_writer_set_alignment(w, alignment);
    int64_t ne1[2] = {4, 3}, ne2[1] = {32};
    assert_int_equal(pg_gguf_writer_add_tensor(w, "w", PG_GGML_F32, 2, ne1), PAGODA_OK);
    assert_int_equal(pg_gguf_writer_add_tensor(w, "q", PG_GGML_Q8_0, 1, ne2), PAGODA_OK);
    snprintf(g_path, sizeof g_path, "%s/small.gguf", dir);
    assert_int_equal(pg_gguf_writer_begin(w, g_path), PAGODA_OK);
    float wdata[12];
    for (int i = 0; i < 12; i++)
        wdata[i] = (float)i;
    uint8_t q[34];
    for (int i = 0; i < 34; i++)
        q[i] = (uint8_t)i;
    assert_int_equal(pg_gguf_writer_write(w, wdata, 20), PAGODA_OK); /* split writes */
    assert_int_equal(pg_gguf_writer_write(w, (uint8_t *)wdata + 20, 28), PAGODA_OK);
    assert_int_equal(pg_gguf_writer_write(w, q, 34), PAGODA_OK);
    assert_int_equal(pg_gguf_writer_write(w, q, 1), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_gguf_writer_finish(w), PAGODA_OK);
    pg_gguf_writer_free(w);
    return g_path;
}

static void test_writer_roundtrip(void **state) {
    (void)state;
    uint32_t aligns[2] = {0, 64};
    for (int a = 0; a < 2; a++) {
        const char *path = write_small(pg_test_tmpdir(), aligns[a]);
        pg_gguf *g;
        assert_int_equal(pg_gguf_open(path, &g), PAGODA_OK);
        assert_int_equal(pg_gguf_alignment(g), aligns[a] ? aligns[a] : 32);
        int64_t v;
        double d;
        bool b;
        assert_int_equal(pg_gguf_get_int(g, "a.u32", &v), PAGODA_OK);
        assert_int_equal(v, 4000000000ll);
        assert_int_equal(pg_gguf_get_int(g, "a.i32", &v), PAGODA_OK);
        assert_int_equal(v, -5);
        assert_int_equal(pg_gguf_get_int(g, "a.u64", &v), PAGODA_OK);
        assert_int_equal(v, 1ll << 40);
        assert_int_equal(pg_gguf_get_float(g, "a.f32", &d), PAGODA_OK);
        assert_true(d == 0.25);
        assert_int_equal(pg_gguf_get_bool(g, "a.bool", &b), PAGODA_OK);
        assert_true(b);
        pg_gguf_array arr;
        assert_int_equal(pg_gguf_get_array(g, "a.strs", &arr), PAGODA_OK);
        size_t len;
        assert_int_equal(arr.n, 3);
        assert_memory_equal(pg_gguf_array_str(&arr, 0, &len), "x", 1);
        pg_gguf_array_str(&arr, 1, &len);
        assert_int_equal(len, 0);
        const char *s = pg_gguf_array_str(&arr, 2, &len);
        assert_int_equal(len, 6);
        assert_memory_equal(s, "h\xc3\xa9llo", 6);
        assert_int_equal(pg_gguf_get_array(g, "a.ints", &arr), PAGODA_OK);
        assert_int_equal(pg_gguf_array_int(&arr, 3), -4);
        assert_true(pg_gguf_array_float(&arr, 1) == -2.0);
        assert_int_equal(pg_gguf_get_array(g, "a.u8s", &arr), PAGODA_OK);
        assert_int_equal(pg_gguf_array_int(&arr, 2), 9);
        assert_int_equal(pg_gguf_get_array(g, "a.f64s", &arr), PAGODA_OK);
        assert_true(pg_gguf_array_float(&arr, 1) == -2.5);
        assert_int_equal(pg_gguf_get_array(g, "a.u32", &arr), PAGODA_ERR_FORMAT);

        const pg_gguf_tensor *t = pg_gguf_find_tensor(g, "w");
        assert_non_null(t);
        assert_int_equal(t->ne[0], 4);
        assert_int_equal(t->ne[1], 3);
        float f[12];
        memcpy(f, t->data, 48);
        for (int i = 0; i < 12; i++)
            assert_true(f[i] == (float)i);
        t = pg_gguf_find_tensor(g, "q");
        assert_int_equal(t->dtype, PG_Q8_0);
        assert_int_equal(t->offset % pg_gguf_alignment(g), 0);
        assert_int_equal(((const uint8_t *)t->data)[33], 33);
        /* raw kv copy into a new file */
        pg_gguf_writer *w;
        assert_int_equal(pg_gguf_writer_create(&w), PAGODA_OK);
        for (size_t i = 0; i < pg_gguf_n_kv(g); i++) {
            const uint8_t *raw = pg_gguf_kv_raw(g, i, &len);
            pg_gguf_writer_add_raw_kv(w, raw, len);
        }
        char p2[4200];
        snprintf(p2, sizeof p2, "%s.copy", path);
        assert_int_equal(pg_gguf_writer_begin(w, p2), PAGODA_OK);
        assert_int_equal(pg_gguf_writer_finish(w), PAGODA_OK);
        pg_gguf_writer_free(w);
        pg_gguf *g2;
        assert_int_equal(pg_gguf_open(p2, &g2), PAGODA_OK);
        assert_int_equal(pg_gguf_n_kv(g2), pg_gguf_n_kv(g));
        assert_int_equal(pg_gguf_get_array(g2, "a.strs", &arr), PAGODA_OK);
        assert_memory_equal(pg_gguf_array_str(&arr, 2, &len), "h\xc3\xa9llo", 6);
        pg_gguf_close(g2);
        pg_gguf_close(g);
    }
}

/* ---- corrupt files */

static uint8_t *g_buf;
static size_t g_len;
static char g_dir[4096];

static void load_small(void) {
    snprintf(g_dir, sizeof g_dir, "%s", pg_test_tmpdir());
    const char *p = write_small(g_dir, 0);
    free(g_buf);
    g_buf = (uint8_t *)pg_test_read_file(p, &g_len);
}

static size_t find_bytes(const void *needle, size_t n) {
    for (size_t i = 0; i + n <= g_len; i++)
        if (!memcmp(g_buf + i, needle, n)) return i;
    fail_msg("pattern not found");
    return 0;
}

/* Offset of the tensor info of `name` (just after its name bytes). */
static size_t tensor_info(const char *name) {
    uint8_t pat[9 + 8];
    uint64_t n = strlen(name);
    memcpy(pat, &n, 8);
    memcpy(pat + 8, name, n);
    size_t at = find_bytes(pat, 8 + n);
    return at + 8 + n; /* u32 n_dims follows */
}

static void expect_fail(const uint8_t *data, size_t len, pagoda_status want, const char *substr) {
    char path[4200];
    snprintf(path, sizeof path, "%s/bad.gguf", g_dir);
    pg_test_write_file(path, data, len);
    pg_gguf *g = (pg_gguf *)1;
    pagoda_status s = pg_gguf_open(path, &g);
    if (s != want || !strstr(pg_last_error(), substr))
        fail_msg("want status %d with '%s', got %d: %s", want, substr, s, pg_last_error());
    assert_null(g);
    assert_non_null(strstr(pg_last_error(), "bad.gguf"));
}

static void patch_u64(uint8_t *b, size_t at, uint64_t v) {
    memcpy(b + at, &v, 8);
}
static void patch_u32(uint8_t *b, size_t at, uint32_t v) {
    memcpy(b + at, &v, 4);
}

static void test_corrupt_header(void **state) {
    (void)state;
    load_small();
    uint8_t *b = malloc(g_len);
    memcpy(b, g_buf, g_len);
    b[0] = 'X';
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "bad magic");
    memcpy(b, g_buf, g_len);
    patch_u32(b, 4, 1);
    expect_fail(b, g_len, PAGODA_ERR_UNSUPPORTED, "version 1");
    patch_u32(b, 4, 9);
    expect_fail(b, g_len, PAGODA_ERR_UNSUPPORTED, "version 9");
    memcpy(b, g_buf, g_len);
    patch_u64(b, 16, 1ull << 50);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "absurd metadata count");
    memcpy(b, g_buf, g_len);
    patch_u64(b, 8, 1ull << 40);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "absurd tensor count");
    memcpy(b, g_buf, g_len);
    patch_u64(b, 24, 1ull << 60); /* first key's length */
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "has length");
    expect_fail(b, 0, PAGODA_ERR_FORMAT, "bad magic");
    free(b);
}

static void test_version2_accepted(void **state) {
    (void)state;
    load_small();
    uint8_t *b = malloc(g_len);
    memcpy(b, g_buf, g_len);
    patch_u32(b, 4, 2);
    char path[4200];
    snprintf(path, sizeof path, "%s/v2.gguf", g_dir);
    pg_test_write_file(path, b, g_len);
    pg_gguf *g;
    assert_int_equal(pg_gguf_open(path, &g), PAGODA_OK);
    assert_int_equal(pg_gguf_version(g), 2);
    assert_non_null(pg_gguf_find_tensor(g, "q"));
    pg_gguf_close(g);
    free(b);
}

static void test_corrupt_values(void **state) {
    (void)state;
    load_small();
    uint8_t *b = malloc(g_len);
    /* a.strs: key then u32 type(9) u32 elem type(8) u64 n */
    size_t k = find_bytes("a.strs", 6) + 6;
    memcpy(b, g_buf, g_len);
    patch_u64(b, k + 8, 1ull << 59);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "string array 'a.strs' claims");
    memcpy(b, g_buf, g_len);
    patch_u64(b, k + 16, 1ull << 50); /* length of element 0 */
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "element 0");
    memcpy(b, g_buf, g_len);
    patch_u32(b, k + 4, 9); /* array of arrays */
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "nested arrays");
    memcpy(b, g_buf, g_len);
    patch_u32(b, k, 13); /* unknown value type */
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "unknown value type 13");
    size_t ki = find_bytes("a.ints", 6) + 6;
    memcpy(b, g_buf, g_len);
    patch_u64(b, ki + 8, 1ull << 62);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "array 'a.ints' claims");
    memcpy(b, g_buf, g_len);
    memcpy(b + find_bytes("a.i32", 5), "a.u32", 5);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "duplicate metadata key 'a.u32'");
    free(b);
}

static void test_corrupt_tensors(void **state) {
    (void)state;
    load_small();
    uint8_t *b = malloc(g_len);
    size_t tw = tensor_info("w"), tq = tensor_info("q");
    /* w: u32 nd=2, ne 4, 3, u32 type, u64 offset */
    size_t w_type = tw + 4 + 16, w_off = w_type + 4;
    size_t q_type = tq + 4 + 8, q_off = q_type + 4;
    memcpy(b, g_buf, g_len);
    patch_u32(b, w_type, 77);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "unknown ggml type id 77");
    memcpy(b, g_buf, g_len);
    patch_u32(b, w_type, PG_GGML_Q8_0); /* 4 is not a multiple of 32 */
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "not a multiple of the Q8_0 block size");
    memcpy(b, g_buf, g_len);
    patch_u64(b, w_off, 4);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "not a multiple of the alignment");
    memcpy(b, g_buf, g_len);
    patch_u64(b, q_off, 0);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "overlap");
    memcpy(b, g_buf, g_len);
    patch_u64(b, q_off, 1ull << 40);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "tensor 'q'");
    memcpy(b, g_buf, g_len);
    patch_u32(b, tw, 7);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "7 dimensions");
    memcpy(b, g_buf, g_len);
    patch_u64(b, tw + 4, 1ull << 62);
    patch_u64(b, tw + 12, 1ull << 62);
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "absurd shape");
    memcpy(b, g_buf, g_len);
    b[tq - 1] = 'w'; /* rename q -> w */
    expect_fail(b, g_len, PAGODA_ERR_FORMAT, "duplicate tensor name 'w'");
    /* data section cut short */
    expect_fail(g_buf, g_len - 1, PAGODA_ERR_FORMAT, "past the end of the file");
    free(b);
}

/* Every prefix of a valid file must fail cleanly (ASan proves no OOB reads). */
static void test_every_truncation(void **state) {
    (void)state;
    load_small();
    char path[4200];
    snprintf(path, sizeof path, "%s/cut.gguf", g_dir);
    for (size_t n = 0; n < g_len; n++) {
        pg_test_write_file(path, g_buf, n);
        pg_gguf *g = NULL;
        pagoda_status s = pg_gguf_open(path, &g);
        if (s == PAGODA_OK) fail_msg("prefix of %zu bytes opened", n);
        assert_int_equal(s, PAGODA_ERR_FORMAT);
        assert_null(g);
    }
}

static void test_missing_file(void **state) {
    (void)state;
    pg_gguf *g;
    assert_int_equal(pg_gguf_open("/nonexistent/x.gguf", &g), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "/nonexistent/x.gguf"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_stories260k), cmocka_unit_test(test_real_quantized),
        cmocka_unit_test(test_type_table),       cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_corrupt_header),   cmocka_unit_test(test_corrupt_values),
        cmocka_unit_test(test_corrupt_tensors),  cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_missing_file),     cmocka_unit_test(test_version2_accepted),
    };
    int r = cmocka_run_group_tests(tests, NULL, NULL);
    free(g_buf);
    return r;
}
