/* `pagoda transcribe` end to end: the built binary on jfk.wav with the
 * whisper-tiny-random oracle and openai/whisper's multilingual.tiktoken, in
 * every response format (random weights: the formats must agree with each
 * other: json text = text = verbose_json text, one srt / vtt cue per
 * verbose_json segment), and its usage / runtime errors. Under qemu (the
 * aarch64 build) through PAGODA_EXEC_WRAPPER. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ORACLE "oracles/whisper-tiny-random/"

/* pg_test_asset returns a static buffer: copy before the next call */
static char *asset(const char *rel) {
    return strdup(pg_test_asset(rel));
}

static char *run_cli(const char *args, int *rc) {
    char cmd[8192];
    char *model = asset(ORACLE "hf"), *wav = asset("whisper/jfk.wav"), *tok = asset("whisper/multilingual.tiktoken");
    snprintf(cmd, sizeof cmd, "%s %s transcribe %s %s --tokenizer %s --dtype float32 --kv-cache-memory 8MiB %s",
             pg_test_exec_wrapper(), pg_test_pagoda_bin(), model, wav, tok, args);
    free(model);
    free(wav);
    free(tok);
    char *out = NULL;
    *rc = pg_test_run_command(cmd, &out);
    return out;
}

static void test_cli(void **state) {
    (void)state;
#ifndef PAGODA_HAVE_AUDIO_DECODE
    skip(); /* built without the audio decoding libraries */
#endif
    static const char *const COMMON = "--language en --temperature 0.4 --seed 7";
    char args[512];
    int rc;
    /* json */
    snprintf(args, sizeof args, "%s --response-format json", COMMON);
    char *out = run_cli(args, &rc);
    assert_int_equal(rc, 0);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("not JSON: %s", out);
    const cJSON *text = cJSON_GetObjectItem(j, "text");
    assert_true(cJSON_IsString(text));
    char *json_text = strdup(text->valuestring);
    cJSON_Delete(j);
    free(out);
    /* under qemu (a minute a run) text and vtt are left to the CTest runs
     * of cmake/tests.cmake */
    bool emulated = *pg_test_exec_wrapper() != 0;
    /* text: the same text and a newline */
    if (!emulated) {
        snprintf(args, sizeof args, "%s --response-format text", COMMON);
        out = run_cli(args, &rc);
        assert_int_equal(rc, 0);
        size_t n = strlen(out);
        assert_true(n >= 1 && out[n - 1] == '\n');
        out[n - 1] = 0;
        assert_string_equal(out, json_text);
        free(out);
    }
    /* verbose_json: segments */
    snprintf(args, sizeof args, "%s --response-format verbose_json", COMMON);
    out = run_cli(args, &rc);
    assert_int_equal(rc, 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "task")->valuestring, "transcribe");
    assert_string_equal(cJSON_GetObjectItem(j, "language")->valuestring, "english");
    assert_true(fabs(cJSON_GetObjectItem(j, "duration")->valuedouble - 11.0) < 1e-9);
    assert_string_equal(cJSON_GetObjectItem(j, "text")->valuestring, json_text);
    int n_seg = cJSON_GetArraySize(cJSON_GetObjectItem(j, "segments"));
    cJSON_Delete(j);
    free(out);
    /* srt and vtt: one cue per segment */
    snprintf(args, sizeof args, "%s --response-format srt", COMMON);
    out = run_cli(args, &rc);
    assert_int_equal(rc, 0);
    int cues = 0;
    for (const char *p = out; (p = strstr(p, " --> ")); p += 5) cues++;
    assert_int_equal(cues, n_seg);
    if (n_seg) assert_true(!strncmp(out, "1\n00:00:", 8));
    free(out);
    if (!emulated) {
        snprintf(args, sizeof args, "%s --response-format vtt", COMMON);
        out = run_cli(args, &rc);
        assert_int_equal(rc, 0);
        assert_true(!strncmp(out, "WEBVTT\n\n", 8));
        cues = 0;
        for (const char *p = out; (p = strstr(p, " --> ")); p += 5) cues++;
        assert_int_equal(cues, n_seg);
        free(out);
    }
    free(json_text);
    /* errors: usage (2) and runtime (1), messages on stderr */
    out = run_cli("--response-format xml 2>&1", &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "pagoda transcribe: bad value 'xml' for --response-format"));
    free(out);
    out = run_cli("--language klingon 2>&1", &rc);
    assert_int_equal(rc, 2);
    free(out);
    out = run_cli("--task translate --bogus 2>&1", &rc);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "unknown option '--bogus'"));
    free(out);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s transcribe %s /nonexistent.wav 2>&1", pg_test_exec_wrapper(), pg_test_pagoda_bin(),
             pg_test_asset(ORACLE "hf"));
    rc = pg_test_run_command(cmd, &out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "cannot open /nonexistent.wav"));
    free(out);
    char *llm = asset("llm/stories260K-hf"), *wav = asset("whisper/jfk.wav");
    snprintf(cmd, sizeof cmd, "%s %s transcribe %s %s 2>&1", pg_test_exec_wrapper(), pg_test_pagoda_bin(), llm,
             wav);
    free(llm);
    free(wav);
    rc = pg_test_run_command(cmd, &out);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "not a Whisper"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
