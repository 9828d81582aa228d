/* A library user's program, built by tests/install/install_test.sh against
 * the *installed* header and library (pkg-config --cflags --libs pagoda):
 * load MODEL, generate greedily from PROMPT, print the completion text.
 * Only <pagoda.h> is included, so the test proves the installed headers
 * are self-contained (pagoda.h + pagoda/status.h) and the library exports
 * the API.
 *
 * usage: hello_pagoda MODEL PROMPT MAX_TOKENS
 * Output: the completion text on stdout (no newline added), the finish
 * reason on stderr. Exit 0, 1 on an engine error, 2 on bad arguments. */
#include <pagoda.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 4 || atoi(argv[3]) < 1) {
        fprintf(stderr, "usage: hello_pagoda MODEL PROMPT MAX_TOKENS\n");
        return 2;
    }
    pagoda_engine_options opt;
    pagoda_engine_options_default(&opt);
    opt.kv_cache_memory = 64u << 20;
    pagoda_engine *e = NULL;
    if (pagoda_engine_create(argv[1], &opt, &e) != PAGODA_OK) {
        fprintf(stderr, "hello_pagoda: %s\n", pagoda_last_error());
        return 1;
    }
    pagoda_request r;
    pagoda_request_defaults(e, &r);
    r.prompt = argv[2];
    r.sampling.temperature = 0.0f;
    r.sampling.max_tokens = atoi(argv[3]);
    uint64_t id = 0;
    if (pagoda_engine_add_request(e, &r, &id, NULL) != PAGODA_OK) {
        fprintf(stderr, "hello_pagoda: %s\n", pagoda_last_error());
        pagoda_engine_free(e);
        return 1;
    }
    int rc = 1;
    while (pagoda_engine_has_unfinished(e)) {
        size_t n = 0;
        if (pagoda_engine_step(e, &n) != PAGODA_OK) {
            fprintf(stderr, "hello_pagoda: %s\n", pagoda_last_error());
            break;
        }
        const pagoda_output *out = pagoda_engine_outputs(e, &n);
        for (size_t i = 0; i < n; i++) {
            if (out[i].id != id) continue;
            fwrite(out[i].text_delta, 1, out[i].text_delta_len, stdout);
            if (out[i].finish_reason == PAGODA_FINISH_ERROR)
                fprintf(stderr, "hello_pagoda: %s\n", out[i].error);
            else if (out[i].finish_reason != PAGODA_FINISH_NONE)
                rc = 0;
            if (out[i].finish_reason != PAGODA_FINISH_NONE)
                fprintf(stderr, "finish_reason %s\n",
                        pagoda_finish_reason_name(out[i].finish_reason));
        }
    }
    pagoda_engine_free(e);
    return rc;
}
