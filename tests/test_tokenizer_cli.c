/* `pagoda tokenize` / `pagoda detokenize`: output format, --add-special,
 * --json, and one-line errors with exit codes 1 (runtime) / 2 (usage).
 * Runs the built binary ($PAGODA_BUILD_DIR/pagoda; through qemu-aarch64
 * when this test itself is the aarch64 build). */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static int run(const char *args, char *out, size_t cap) {
    const char *bd = getenv("PAGODA_BUILD_DIR");
    assert_non_null(bd);
    char cmd[4096];
#if defined(__aarch64__)
    const char *pre = "qemu-aarch64 -cpu max ";
#else
    const char *pre = "";
#endif
    snprintf(cmd, sizeof cmd, "%s%s/pagoda %s 2>&1", pre, bd, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_tokenize_commands(void **state) {
    (void)state;
    char out[8192], args[4096];
    const char *hf = pg_test_asset("llm/stories260K-hf");
    snprintf(args, sizeof args, "tokenize '%s' --text 'Once upon a time' --add-special", hf);
    assert_int_equal(run(args, out, sizeof out), 0);
    assert_string_equal(out, "1 403 407 261 378\n");
    snprintf(args, sizeof args, "tokenize '%s' --text 'Once upon a time' --json", hf);
    assert_int_equal(run(args, out, sizeof out), 0);
    assert_string_equal(out, "{\"token_ids\":[403,407,261,378]}\n");
    snprintf(args, sizeof args, "detokenize '%s' --ids 403,407,261,378", hf);
    assert_int_equal(run(args, out, sizeof out), 0);
    assert_string_equal(out, "Once upon a time\n");
    /* GGUF vocab gives the same ids */
    snprintf(args, sizeof args, "tokenize '%s' --text 'Once upon a time' --add-special",
             pg_test_asset("llm/llama2c/stories260K.gguf"));
    assert_int_equal(run(args, out, sizeof out), 0);
    assert_string_equal(out, "1 403 407 261 378\n");
}

static void test_tokenize_errors(void **state) {
    (void)state;
    char out[8192], args[4096];
    const char *hf = pg_test_asset("llm/stories260K-hf");
    assert_int_equal(run("tokenize /no/such/model --text hi", out, sizeof out), 1);
    assert_non_null(strstr(out, "/no/such/model"));
    assert_ptr_equal(strchr(out, '\n'), out + strlen(out) - 1); /* exactly one line */
    snprintf(args, sizeof args, "detokenize '%s' --ids 1,x", hf);
    assert_int_equal(run(args, out, sizeof out), 2);
    snprintf(args, sizeof args, "detokenize '%s' --ids 1,999999", hf);
    assert_int_equal(run(args, out, sizeof out), 1);
    assert_non_null(strstr(out, "999999"));
    snprintf(args, sizeof args, "tokenize '%s'", hf);
    assert_int_equal(run(args, out, sizeof out), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokenize_commands),
        cmocka_unit_test(test_tokenize_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
