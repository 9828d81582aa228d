/* Chat template rendering time (one thread): a 128-message conversation
 * (system + 63 user/assistant turns + a final user turn, ~40 KB of text)
 * rendered with real templates from chat-templates/, compile excluded.
 * Baseline measured in the same run: a hand-written C ChatML formatter
 * (what the Qwen template computes, without the interpreter); the ratio says
 * what the Jinja interpreter costs on top. Median of 21 renders.
 *
 *   make bench            # or: build/bench/bench_chat_template [ASSETS_DIR]
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/chat_template.h"

static const char *assets = "../shared/assets";

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(b);
        return NULL;
    }
    fclose(f);
    b[n] = 0;
    return b;
}

static cJSON *conversation(void) {
    cJSON *m = cJSON_CreateArray();
    char text[512];
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "role", "system");
    cJSON_AddStringToObject(s, "content", "You are a helpful assistant.");
    cJSON_AddItemToArray(m, s);
    for (int i = 0; i < 127; i++) {
        cJSON *o = cJSON_CreateObject();
        bool user = i % 2 == 0;
        snprintf(text, sizeof text,
                 "%s message %d: the quick brown fox jumps over the lazy dog, then asks about "
                 "the weather in Paris, the price of bread and the meaning of a few words in "
                 "French and German. Gr\xc3\xbc\xc3\x9f""e!",
                 user ? "User" : "Assistant", i);
        cJSON_AddStringToObject(o, "role", user ? "user" : "assistant");
        cJSON_AddStringToObject(o, "content", text);
        cJSON_AddItemToArray(m, o);
    }
    return m;
}

/* the baseline: ChatML written directly */
static size_t chatml(const cJSON *msgs, char *out, size_t cap) {
    size_t n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, msgs) {
        const char *r = cJSON_GetObjectItem(e, "role")->valuestring;
        const char *c = cJSON_GetObjectItem(e, "content")->valuestring;
        n += (size_t)snprintf(out + n, cap - n, "<|im_start|>%s\n%s<|im_end|>\n", r, c);
    }
    n += (size_t)snprintf(out + n, cap - n, "<|im_start|>assistant\n");
    return n;
}

int main(int argc, char **argv) {
    if (argc > 1) assets = argv[1];
    else if (getenv("PAGODA_ASSETS")) assets = getenv("PAGODA_ASSETS");
    static const char *const names[] = {
        "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja",
        "meta-llama-Llama-3.1-8B-Instruct.jinja", "openai-gpt-oss-120b.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja", "google-gemma-4-31B-it-interleaved.jinja",
    };
    enum { RUNS = 21 };
    cJSON *msgs = conversation();
    pg_chat_special_tokens sp = {"<s>", "</s>", NULL, NULL};
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    double t[RUNS];
    size_t base_len = 0;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now();
        base_len = chatml(msgs, buf, cap);
        t[r] = now() - t0;
    }
    qsort(t, RUNS, sizeof t[0], cmp_d);
    double base = t[RUNS / 2];
    printf("128-message conversation; baseline hand-written ChatML: %.1f us (%zu bytes)\n",
           base * 1e6, base_len);
    printf("%-44s %10s %10s %12s\n", "template", "us/render", "KB out", "vs baseline");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[2048];
        snprintf(p, sizeof p, "%s/chat-templates/%s", assets, names[i]);
        char *src = slurp(p);
        pg_chat_template *tpl = NULL;
        if (!src || pg_chat_template_compile(src, &tpl) != PAGODA_OK) {
            printf("%-44s skipped: %s\n", names[i], src ? pg_last_error() : "cannot read");
            free(src);
            continue;
        }
        size_t out_len = 0;
        bool ok = true;
        for (int r = 0; r < RUNS && ok; r++) {
            char *out = NULL;
            double t0 = now();
            ok = pg_chat_template_render(tpl, msgs, NULL, NULL, true, &sp, &out) == PAGODA_OK;
            t[r] = now() - t0;
            if (ok) out_len = strlen(out);
            free(out);
        }
        if (!ok) {
            printf("%-44s failed: %s\n", names[i], pg_last_error());
        } else {
            qsort(t, RUNS, sizeof t[0], cmp_d);
            printf("%-44s %10.1f %10.1f %11.0fx\n", names[i], t[RUNS / 2] * 1e6,
                   (double)out_len / 1024.0, t[RUNS / 2] / base);
        }
        pg_chat_template_free(tpl);
        free(src);
    }
    free(buf);
    cJSON_Delete(msgs);
    return 0;
}
