/* safetensors reader/writer: round trip, sharded index through
 * pg_model_source, and corrupt files that must fail with one clear line. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"
#include "model/source.h"

static void test_real_file(void **state) {
    (void)state;
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors", pg_test_asset("llm/stories260K-hf-bf16"));
    pg_safetensors *st;
    assert_int_equal(pg_safetensors_open(p, &st), PAGODA_OK);
    assert_int_equal(pg_safetensors_n_tensors(st), 47);
    const pg_tensor *t = pg_safetensors_find(st, "model.embed_tokens.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, PG_BF16);
    assert_int_equal(t->shape[0], 512);
    assert_int_equal(t->shape[1], 64);
    assert_int_equal(t->nbytes, 512 * 64 * 2);
    assert_null(pg_safetensors_find(st, "__metadata__"));
    pg_safetensors_close(st);
}

static char g_path[4200];
static void write_small(const char *dir, const char *name) {
    pg_safetensors_writer *w;
    assert_int_equal(pg_safetensors_writer_create(&w), PAGODA_OK);
    int64_t s1[2] = {2, 3}, s2[1] = {4}, s3[1] = {0};
    assert_int_equal(pg_safetensors_writer_add(w, "a.weight", PG_F32, 2, s1), PAGODA_OK);
    assert_int_equal(pg_safetensors_writer_add(w, "b\"q", PG_BF16, 1, s2), PAGODA_OK);
    assert_int_equal(pg_safetensors_writer_add(w, "empty", PG_I32, 1, s3), PAGODA_OK);
    assert_int_equal(pg_safetensors_writer_data_bytes(w), 24 + 8);
    snprintf(g_path, sizeof g_path, "%s/%s", dir, name);
    assert_int_equal(pg_safetensors_writer_begin(w, g_path), PAGODA_OK);
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[4] = {0x3f80, 0x4000, 0xbf80, 0};
    assert_int_equal(pg_safetensors_writer_write(w, a, sizeof a), PAGODA_OK);
    assert_int_equal(pg_safetensors_writer_write(w, b, sizeof b), PAGODA_OK);
    assert_int_equal(pg_safetensors_writer_write(w, b, 1), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_safetensors_writer_finish(w), PAGODA_OK);
    pg_safetensors_writer_free(w);
}

static void test_writer_roundtrip(void **state) {
    (void)state;
    write_small(pg_test_tmpdir(), "x.safetensors");
    pg_safetensors *st;
    assert_int_equal(pg_safetensors_open(g_path, &st), PAGODA_OK);
    assert_int_equal(pg_safetensors_n_tensors(st), 3);
    const pg_tensor *t = pg_safetensors_tensor_at(st, 0);
    assert_string_equal(t->name, "a.weight");
    assert_int_equal(t->shape[1], 3);
    float a[6];
    memcpy(a, t->data, 24);
    assert_true(a[5] == 6.0f);
    assert_int_equal(((uintptr_t)t->data - 8) % 8, 0); /* header padded to 8 */
    t = pg_safetensors_find(st, "b\"q");
    assert_non_null(t);
    assert_int_equal(t->dtype, PG_BF16);
    t = pg_safetensors_find(st, "empty");
    assert_int_equal(t->nbytes, 0);
    pg_safetensors_close(st);
}

/* ---- corrupt files: hand-written headers */

static char g_dir[4096];
static void expect_fail_raw(const void *data, size_t len, pagoda_status want, const char *substr) {
    char path[4200];
    snprintf(path, sizeof path, "%s/bad.safetensors", g_dir);
    pg_test_write_file(path, data, len);
    pg_safetensors *st = (pg_safetensors *)1;
    pagoda_status s = pg_safetensors_open(path, &st);
    if (s != want || !strstr(pg_last_error(), substr))
        fail_msg("want %d '%s', got %d: %s", want, substr, s, pg_last_error());
    assert_null(st);
    assert_non_null(strstr(pg_last_error(), "bad.safetensors"));
}
/* header JSON + `data_len` zero bytes of data */
static void expect_fail(const char *header, size_t data_len, pagoda_status want,
                        const char *substr) {
    size_t hl = strlen(header);
    uint8_t *b = calloc(1, 8 + hl + data_len);
    uint64_t n = hl;
    memcpy(b, &n, 8);
    memcpy(b + 8, header, hl);
    expect_fail_raw(b, 8 + hl + data_len, want, substr);
    free(b);
}

static void test_corrupt(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s", pg_test_tmpdir());
    expect_fail_raw("abc", 3, PAGODA_ERR_FORMAT, "truncated");
    uint64_t huge = 1ull << 62;
    expect_fail_raw(&huge, 8, PAGODA_ERR_FORMAT, "absurd header length");
    uint8_t b[16] = {100};
    expect_fail_raw(b, 16, PAGODA_ERR_FORMAT, "runs past the end");
    expect_fail("[1,2]", 0, PAGODA_ERR_FORMAT, "not a JSON object");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]", 8,
                PAGODA_ERR_FORMAT, "not a JSON object");
    expect_fail("{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2,
                PAGODA_ERR_UNSUPPORTED, "tensor 'a' has unknown dtype 'F8_E4M3'");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                PAGODA_ERR_FORMAT, "shape needs 12 bytes of F32 but data_offsets span 8");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4,
                PAGODA_ERR_FORMAT, "tensor 'a' ends at data byte 8, past the end of the file");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                12, PAGODA_ERR_FORMAT, "overlap");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                PAGODA_ERR_FORMAT, "non-integer or negative");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
                PAGODA_ERR_UNSUPPORTED, "5 dimensions");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_"
                "offsets\":[0,4]}}",
                4, PAGODA_ERR_FORMAT, "absurd shape");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                PAGODA_ERR_FORMAT, "bad data_offsets");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, PAGODA_ERR_FORMAT, "needs dtype");
    expect_fail("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, PAGODA_ERR_FORMAT, "duplicate tensor name 'a'");
}

static void test_every_truncation(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "%s", pg_test_tmpdir());
    write_small(g_dir, "ok.safetensors");
    size_t len;
    char *buf = pg_test_read_file(g_path, &len);
    char path[4200];
    snprintf(path, sizeof path, "%s/cut.safetensors", g_dir);
    for (size_t n = 0; n < len; n++) {
        pg_test_write_file(path, buf, n);
        pg_safetensors *st = NULL;
        pagoda_status s = pg_safetensors_open(path, &st);
        if (s != PAGODA_ERR_FORMAT) fail_msg("prefix %zu: status %d (%s)", n, s, pg_last_error());
        assert_null(st);
    }
    free(buf);
}

/* ---- sharded HF directory built from the stories260K tensors */

static void write_shards(const char *dir, const pg_model_source *src, int n_shards,
                         bool bad_index) {
    size_t n = pg_model_source_n_tensors(src);
    const char **names = calloc(n, sizeof *names), **files = calloc(n, sizeof *files);
    static char fnames[4][64];
    uint64_t total = 0;
    for (int s = 0; s < n_shards; s++) {
        snprintf(fnames[s], sizeof fnames[s], "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        pg_safetensors_writer *w;
        assert_int_equal(pg_safetensors_writer_create(&w), PAGODA_OK);
        for (size_t i = (size_t)s; i < n; i += (size_t)n_shards) {
            const pg_tensor *t = pg_model_source_tensor_at(src, i);
            assert_int_equal(pg_safetensors_writer_add(w, t->name, t->dtype, t->ndim, t->shape),
                             PAGODA_OK);
            names[i] = t->name;
            files[i] = fnames[(bad_index && i == 3) ? (s + 1) % n_shards : s];
        }
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, fnames[s]);
        assert_int_equal(pg_safetensors_writer_begin(w, p), PAGODA_OK);
        for (size_t i = (size_t)s; i < n; i += (size_t)n_shards) {
            const pg_tensor *t = pg_model_source_tensor_at(src, i);
            assert_int_equal(pg_safetensors_writer_write(w, t->data, t->nbytes), PAGODA_OK);
            total += t->nbytes;
        }
        assert_int_equal(pg_safetensors_writer_finish(w), PAGODA_OK);
        pg_safetensors_writer_free(w);
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    assert_int_equal(pg_safetensors_write_index(p, total, names, files, n), PAGODA_OK);
    size_t len;
    char from[4200];
    snprintf(from, sizeof from, "%s/config.json", pg_test_asset("llm/stories260K-hf"));
    char *cfg = pg_test_read_file(from, &len);
    snprintf(p, sizeof p, "%s/config.json", dir);
    pg_test_write_file(p, cfg, len);
    free(cfg);
    free(names);
    free(files);
}

static void test_sharded_source(void **state) {
    (void)state;
    pg_model_source *ref, *sh;
    assert_int_equal(pg_model_source_open(pg_test_asset("llm/stories260K-hf"), &ref), PAGODA_OK);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", pg_test_tmpdir());
    write_shards(dir, ref, 3, false);
    assert_int_equal(pg_model_source_open(dir, &sh), PAGODA_OK);
    assert_int_equal(pg_model_source_n_tensors(sh), pg_model_source_n_tensors(ref));
    for (size_t i = 0; i < pg_model_source_n_tensors(ref); i++) {
        const pg_tensor *a = pg_model_source_tensor_at(ref, i);
        const pg_tensor *b = pg_model_source_tensor(sh, a->name);
        assert_non_null(b);
        assert_int_equal(a->nbytes, b->nbytes);
        assert_memory_equal(a->data, b->data, a->nbytes);
    }
    pg_model_source_free(sh);

    snprintf(dir, sizeof dir, "%s", pg_test_tmpdir());
    write_shards(dir, ref, 2, true);
    assert_int_equal(pg_model_source_open(dir, &sh), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(pg_last_error(), "does not hold it"));
    assert_non_null(strstr(pg_last_error(), "model.safetensors.index.json"));
    pg_model_source_free(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_file),      cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_corrupt),        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_sharded_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
