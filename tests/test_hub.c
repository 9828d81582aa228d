/* The Hugging Face hub client's pure parts (model/hub.h): repo references,
 * option folding, etag and file-name checks, the file selection rules, and
 * cache resolution with HF_HUB_OFFLINE (no network). The downloads
 * themselves are tested against a mock hub by tests/hub/e2e_hub.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/hub.h"
#include "model/source.h"
#include "testutil.h"

static void test_parse_ref(void **state) {
    (void)state;
    pg_hub_ref r;
    assert_true(pg_hub_parse_ref("meta-llama/Llama-3.2-1B", &r));
    assert_string_equal(r.repo, "meta-llama/Llama-3.2-1B");
    assert_string_equal(r.revision, "main");
    assert_string_equal(r.tag, "");
    assert_true(pg_hub_parse_ref("org/name.v2_x:Q4_K_M", &r));
    assert_string_equal(r.repo, "org/name.v2_x");
    assert_string_equal(r.tag, "Q4_K_M");
    assert_true(pg_hub_parse_ref("org/name@refs/pr/1:sub/m.gguf", &r));
    assert_string_equal(r.revision, "refs/pr/1");
    assert_string_equal(r.tag, "sub/m.gguf");
    assert_true(pg_hub_parse_ref("org/name@0123456789abcdef0123456789abcdef01234567", &r));
    assert_string_equal(r.revision, "0123456789abcdef0123456789abcdef01234567");
    static const char *const bad[] = {"",
                                      "name",
                                      "/org/name",
                                      "org/",
                                      "/name",
                                      "org/a/b",
                                      "org/..",
                                      "../name",
                                      "o rg/n",
                                      "org/name:",
                                      "org/name@",
                                      "org/name@:x",
                                      "org/n:a:b",
                                      "org/n:../x.gguf",
                                      "org/n:/x.gguf",
                                      "./x",
                                      "org/n@r@s",
                                      "org/n@../x",
                                      "org/n@/x",
                                      "org/n@a/"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (pg_hub_parse_ref(bad[i], &r)) fail_msg("'%s' parsed as a repo id", bad[i]);
    }
}

static void test_fold_options(void **state) {
    (void)state;
    char out[512];
    assert_int_equal(pg_hub_fold_options("a/b", NULL, NULL, out, sizeof out), PAGODA_OK);
    assert_string_equal(out, "a/b");
    assert_int_equal(pg_hub_fold_options("a/b:Q4_0", "", "", out, sizeof out), PAGODA_OK);
    assert_string_equal(out, "a/b:Q4_0");
    assert_int_equal(pg_hub_fold_options("a/b", "v1", NULL, out, sizeof out), PAGODA_OK);
    assert_string_equal(out, "a/b@v1");
    assert_int_equal(pg_hub_fold_options("a/b", NULL, "m.gguf", out, sizeof out), PAGODA_OK);
    assert_string_equal(out, "a/b@main:m.gguf");
    assert_int_equal(pg_hub_fold_options("a/b@v1:Q8_0", "v1", NULL, out, sizeof out), PAGODA_OK);
    assert_string_equal(out, "a/b@v1:Q8_0");
    assert_int_equal(pg_hub_fold_options("a/b@v1", "v2", NULL, out, sizeof out),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "another revision"));
    assert_int_equal(pg_hub_fold_options("a/b:Q4_0", NULL, "x.gguf", out, sizeof out),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_hub_fold_options("/no/such/model", "v1", NULL, out, sizeof out),
                     PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pg_last_error(), "repo id"));
    /* a path that exists is used as is, options or not */
    const char *dir = pg_test_tmpdir();
    assert_int_equal(pg_hub_fold_options(dir, "v1", NULL, out, sizeof out), PAGODA_OK);
    assert_string_equal(out, dir);
    assert_int_equal(pg_hub_fold_options("a/b", "v1", NULL, out, 6), PAGODA_ERR_INVALID_ARG);
}

static void test_etag_and_names(void **state) {
    (void)state;
    char e[80];
    assert_true(pg_hub_normalize_etag("\"abc123\"", e, sizeof e));
    assert_string_equal(e, "abc123");
    assert_true(pg_hub_normalize_etag("W/\"abc\"\r\n", e, sizeof e));
    assert_string_equal(e, "abc");
    assert_true(pg_hub_normalize_etag(" plain", e, sizeof e));
    assert_string_equal(e, "plain");
    assert_false(pg_hub_normalize_etag("\"\"", e, sizeof e));
    assert_false(pg_hub_normalize_etag("\"a/b\"", e, sizeof e));
    assert_false(pg_hub_normalize_etag("\"..\"", e, sizeof e));
    assert_false(pg_hub_normalize_etag("a b", e, sizeof e));
    assert_false(pg_hub_normalize_etag("0123456789", e, 4));

    assert_true(pg_hub_safe_filename("config.json"));
    assert_true(pg_hub_safe_filename("sub/dir/m.gguf"));
    assert_true(pg_hub_safe_filename(".gitattributes"));
    static const char *const unsafe[] = {"",   "/etc/passwd", "../x", "a/../b", "a/./b", "a//b",
                                         "a/", "a\\b",        "a\nb", "..",     "."};
    for (size_t i = 0; i < sizeof unsafe / sizeof unsafe[0]; i++)
        if (pg_hub_safe_filename(unsafe[i])) fail_msg("'%s' taken as safe", unsafe[i]);

    assert_true(pg_hub_wanted_file("config.json"));
    assert_true(pg_hub_wanted_file("tokenizer.json"));
    assert_true(pg_hub_wanted_file("chat_template.jinja"));
    assert_true(pg_hub_wanted_file("model-00001-of-00002.safetensors"));
    assert_true(pg_hub_wanted_file("model.safetensors.index.json"));
    assert_false(pg_hub_wanted_file("README.md"));
    assert_false(pg_hub_wanted_file("pytorch_model.bin"));
    assert_false(pg_hub_wanted_file("original/model.safetensors"));
    assert_false(pg_hub_wanted_file("model-Q4_0.gguf"));

    static const struct {
        const char *name, *tag;
        bool match;
    } GGUF[] = {
        {"Llama-3.2-1B-Q4_0.gguf", "q4_0", true},
        {"m.Q8_0.gguf", "Q8_0", true},
        {"sub/m-Q4_K_M.gguf", "Q4_K_M", true},
        {"Q4_0.gguf", "Q4_0", true},
        {"m-q4_0-00001-of-00002.gguf", "Q4_0", true},
        {"m-Q4_0_4_4.gguf", "Q4_0", false},
        {"m-IQ4_XS.gguf", "Q4_XS", false},
        {"m-Q4_0.bin", "Q4_0", false},
        {"m-Q4_0.gguf", "", false},
        {"sub/m.gguf", "m.gguf", true},
        {"sub/m.gguf", "sub/m.gguf", true},
        {"sub/m.gguf", "x.gguf", false},
    };
    for (size_t i = 0; i < sizeof GGUF / sizeof GGUF[0]; i++)
        if (pg_hub_gguf_matches(GGUF[i].name, GGUF[i].tag) != GGUF[i].match)
            fail_msg("gguf '%s' vs tag '%s': expected %s", GGUF[i].name, GGUF[i].tag,
                     GGUF[i].match ? "a match" : "no match");
}

/* ---- the cache, offline */

/* Write TEXT to ROOT/REL, creating the directories. */
static void put(const char *root, const char *rel, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    char *slash = strrchr(p, '/');
    *slash = 0;
    pg_test_mkdirs(p);
    *slash = '/';
    pg_test_write_file(p, text, strlen(text));
}

/* put() of models--REPO/snapshots/COMMIT/FILE. */
static void put_snap(const char *hub, const char *repo, const char *commit, const char *file,
                     const char *text) {
    char rel[1024];
    snprintf(rel, sizeof rel, "models--%s/snapshots/%s/%s", repo, commit, file);
    put(hub, rel, text);
}

static char *saved[6];
static const char *const ENV_NAMES[6] = {"HF_HUB_CACHE",   "HF_HOME", "XDG_CACHE_HOME",
                                         "HF_HUB_OFFLINE", "HOME",    "HUGGINGFACE_HUB_CACHE"};
static void env_save(void) {
    for (int i = 0; i < 6; i++)
        saved[i] = getenv(ENV_NAMES[i]) ? strdup(getenv(ENV_NAMES[i])) : NULL;
}
static void env_restore(void) {
    for (int i = 0; i < 6; i++) {
        if (saved[i])
            setenv(ENV_NAMES[i], saved[i], 1);
        else
            unsetenv(ENV_NAMES[i]);
        free(saved[i]);
        saved[i] = NULL;
    }
}

static pagoda_status resolve(const char *model, char *out, size_t cap, bool *is_gguf) {
    pg_hub_ref ref;
    assert_true(pg_hub_parse_ref(model, &ref));
    return pg_hub_resolve(&ref, NULL, out, cap, is_gguf);
}

static void test_cache_dir_env(void **state) {
    (void)state;
    env_save();
    char d[4096];
    unsetenv("HUGGINGFACE_HUB_CACHE");
    setenv("HF_HUB_CACHE", "/c/hub", 1);
    setenv("HF_HOME", "/h", 1);
    setenv("XDG_CACHE_HOME", "/x", 1);
    setenv("HOME", "/u", 1);
    pg_hub_cache_dir(d, sizeof d);
    assert_string_equal(d, "/c/hub");
    unsetenv("HF_HUB_CACHE");
    pg_hub_cache_dir(d, sizeof d);
    assert_string_equal(d, "/h/hub");
    unsetenv("HF_HOME");
    pg_hub_cache_dir(d, sizeof d);
    assert_string_equal(d, "/x/huggingface/hub");
    unsetenv("XDG_CACHE_HOME");
    pg_hub_cache_dir(d, sizeof d);
    assert_string_equal(d, "/u/.cache/huggingface/hub");
    setenv("HUGGINGFACE_HUB_CACHE", "/old", 1);
    pg_hub_cache_dir(d, sizeof d);
    assert_string_equal(d, "/old");
    env_restore();
}

static void test_cache_offline(void **state) {
    (void)state;
    env_save();
    const char *hub = pg_test_tmpdir();
    setenv("HF_HUB_CACHE", hub, 1);
    setenv("HF_HUB_OFFLINE", "yes", 1);
    unsetenv("HUGGINGFACE_HUB_CACHE");
    char out[4096], want[4200];
    bool gguf = true;
    const char *c1 = "1111111111111111111111111111111111111111";
    const char *c2 = "2222222222222222222222222222222222222222";

    /* not cached at all */
    assert_int_equal(resolve("a/b", out, sizeof out, &gguf), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "'a/b'"));
    assert_non_null(strstr(pg_last_error(), "HF_HUB_OFFLINE"));

    /* refs/main -> a snapshot holding config.json only: incomplete */
    char rel[512];
    put(hub, "models--a--b/refs/main", "1111111111111111111111111111111111111111\n");
    put_snap(hub, "a--b", c1, "config.json", "{}");
    assert_int_equal(resolve("a/b", out, sizeof out, &gguf), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "incomplete"));
    /* sharded weights: complete once every shard of the index is there */
    put_snap(hub, "a--b", c1, "model.safetensors.index.json",
             "{\"weight_map\": {\"x\": \"model-00001-of-00002.safetensors\", "
             "\"y\": \"model-00002-of-00002.safetensors\"}}");
    put_snap(hub, "a--b", c1, "model-00001-of-00002.safetensors", "");
    assert_int_equal(resolve("a/b", out, sizeof out, &gguf), PAGODA_ERR_NOT_FOUND);
    put_snap(hub, "a--b", c1, "model-00002-of-00002.safetensors", "");
    assert_int_equal(resolve("a/b", out, sizeof out, &gguf), PAGODA_OK);
    snprintf(want, sizeof want, "%s/models--a--b/snapshots/%s", hub, c1);
    assert_string_equal(out, want);
    assert_false(gguf);

    /* another revision: by its ref, and by the commit itself */
    put(hub, "models--a--b/refs/v1", c2);
    put_snap(hub, "a--b", c2, "config.json", "{}");
    put_snap(hub, "a--b", c2, "model.safetensors", "");
    assert_int_equal(resolve("a/b@v1", out, sizeof out, &gguf), PAGODA_OK);
    snprintf(want, sizeof want, "%s/models--a--b/snapshots/%s", hub, c2);
    assert_string_equal(out, want);
    snprintf(rel, sizeof rel, "a/b@%s", c2);
    assert_int_equal(resolve(rel, out, sizeof out, &gguf), PAGODA_OK);
    assert_string_equal(out, want);
    assert_int_equal(resolve("a/b@v2", out, sizeof out, &gguf), PAGODA_ERR_NOT_FOUND);

    /* GGUF files: by quant tag, by name; no tag and two files: ambiguous */
    put(hub, "models--a--g/refs/main", c1);
    put_snap(hub, "a--g", c1, "m-Q4_0.gguf", "GGUF");
    put_snap(hub, "a--g", c1, "sub/m-Q8_0.gguf", "GGUF");
    assert_int_equal(resolve("a/g:q4_0", out, sizeof out, &gguf), PAGODA_OK);
    snprintf(want, sizeof want, "%s/models--a--g/snapshots/%s/m-Q4_0.gguf", hub, c1);
    assert_string_equal(out, want);
    assert_true(gguf);
    assert_int_equal(resolve("a/g:Q8_0", out, sizeof out, &gguf), PAGODA_OK);
    snprintf(want, sizeof want, "%s/models--a--g/snapshots/%s/sub/m-Q8_0.gguf", hub, c1);
    assert_string_equal(out, want);
    assert_int_equal(resolve("a/g:sub/m-Q8_0.gguf", out, sizeof out, &gguf), PAGODA_OK);
    assert_string_equal(out, want);
    assert_int_equal(resolve("a/g:Q5_K", out, sizeof out, &gguf), PAGODA_ERR_NOT_FOUND);
    assert_int_equal(resolve("a/g", out, sizeof out, &gguf), PAGODA_ERR_NOT_FOUND);

    /* pg_model_resolve: the same through the one place paths are resolved */
    assert_int_equal(pg_model_resolve("a/g:Q4_0", out, sizeof out, &gguf), PAGODA_OK);
    assert_true(gguf);
    assert_int_equal(pg_model_resolve("a/../b", out, sizeof out, &gguf), PAGODA_ERR_NOT_FOUND);
    assert_non_null(strstr(pg_last_error(), "no such file or directory"));
    env_restore();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ref),      cmocka_unit_test(test_fold_options),
        cmocka_unit_test(test_etag_and_names), cmocka_unit_test(test_cache_dir_env),
        cmocka_unit_test(test_cache_offline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
