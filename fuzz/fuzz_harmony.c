/* libFuzzer target: the harmony output parser (gpt-oss; what the model
 * generates is steered by whoever writes the prompt). The first input byte
 * gives a chunk size (1..256), the rest is model output. It is fed to two
 * pg_hchat mappers, once whole and once in chunks of that size, each
 * finished and asked for its deltas, message and finish reason. The
 * parser promises that any split of the output gives the same result, so
 * the two messages' JSON must be equal (abort otherwise). Seeds:
 * tests/data/harmony and hand-written outputs (scripts/fuzz.sh).
 * Dictionary: fuzz/harmony.dict
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_util.h"
#include "server/harmony_chat.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

/* Feed text in chunks of `chunk` bytes (taking deltas after each); returns
 * the final message's JSON (malloc'ed) or NULL when out of memory. */
static char *run(const char *text, size_t len, size_t chunk) {
    pg_hchat *h = NULL;
    if (pg_hchat_create(42, &h) != PAGODA_OK) return NULL;
    char *json = NULL;
    pagoda_status st = PAGODA_OK;
    for (size_t off = 0; off < len && !st; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        st = pg_hchat_feed(h, text + off, n);
        cJSON_Delete(pg_hchat_take_deltas(h));
    }
    if (!st) st = pg_hchat_finish(h);
    if (!st) {
        cJSON_Delete(pg_hchat_take_deltas(h));
        cJSON *m = pg_hchat_message(h);
        json = m ? cJSON_PrintUnformatted(m) : NULL;
        cJSON_Delete(m);
        pg_hchat_finish_name(h, PAGODA_FINISH_STOP);
        pg_hchat_num_calls(h);
        pg_hchat_issues(h);
    }
    pg_hchat_free(h);
    return json;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t chunk = (size_t)data[0] + 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    pg_hchat_is_end_token(text, len);
    char *whole = run(text, len, len ? len : 1);
    char *split = run(text, len, chunk);
    if (whole && split && strcmp(whole, split) != 0) {
        fprintf(stderr,
                "harmony: split at %zu bytes changes the message:\n  whole: %s\n  split: %s\n",
                chunk, whole, split);
        abort();
    }
    free(whole);
    free(split);
    return 0;
}
