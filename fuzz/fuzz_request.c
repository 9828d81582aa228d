/* libFuzzer target: the JSON bodies of pagoda serve's endpoints, driven
 * through the functions src/server/server.c calls for them. The first input
 * byte picks the endpoint (low 2 bits: POST /v1/completions,
 * /v1/chat/completions, /tokenize, /detokenize) and whether a chat is
 * rendered as harmony (bit 2, gpt-oss models) or with a Jinja template; the
 * rest is the body. After pg_api_parse / pg_api_parse_tokenize /
 * pg_api_parse_detokenize, a valid request goes on as in the server: chat
 * messages rendered (pagoda_apply_chat_template or pg_harmony_render,
 * continue_final_message cut), prompts tokenized and checked against the
 * context, structured-output fields compiled (pg_structured_from_body, the
 * grammar compiled against the model's vocabulary), ids detokenized, and
 * every error turned into its JSON. The engine is stories260K from
 * ../shared/assets with Qwen3's chat template, made once per process.
 * Seeds: tiny bodies written by scripts/fuzz.sh.
 * Dictionary: fuzz/openai.dict
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fz_util.h"
#include "model/mapped_file.h"
#include "pagoda.h"
#include "server/openai.h"
#include "server/structured.h"
#include "tokenizer/harmony.h"

static pagoda_engine *g_engine;
static char *g_template;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    char *model = fz_asset("llm/stories260K-hf");
    char *tmpl = fz_asset("chat-templates/Qwen-Qwen3-0.6B.jinja");
    pagoda_engine_options o;
    pagoda_engine_options_default(&o);
    o.num_threads = 1;
    o.kv_cache_memory = 4u << 20;
    o.max_num_seqs = 4;
    o.max_num_batched_tokens = 256;
    size_t len;
    if (pagoda_engine_create(model, &o, &g_engine) != PAGODA_OK ||
        pg_read_small_file(tmpl, 1 << 20, &g_template, &len) != PAGODA_OK) {
        fprintf(stderr, "fuzz_request: %s\n", pagoda_last_error());
        abort();
    }
    free(model);
    free(tmpl);
    return 0;
}

static void fail_json(const pg_api_error *err) {
    free(pg_api_error_json(err));
}

static void render_chat(const pg_api_request *r, bool harmony, pg_api_error *err) {
    char *text = NULL;
    if (harmony) {
        cJSON *messages = cJSON_Parse(r->messages_json);
        cJSON *tools = r->tools_json ? cJSON_Parse(r->tools_json) : NULL;
        pg_harmony_render_opts o = {.reasoning_effort = r->reasoning_effort,
                                    .date = "2026-12-02",
                                    .add_generation_prompt = r->add_generation_prompt};
        if (messages && pg_harmony_render(messages, tools, &o, &text) != PAGODA_OK) text = NULL;
        cJSON_Delete(messages);
        cJSON_Delete(tools);
    } else if (pagoda_apply_chat_template(g_engine, r->messages_json, r->tools_json, r->kwargs_json,
                                          r->add_generation_prompt, g_template,
                                          &text) == PAGODA_OK) {
        size_t keep = strlen(text);
        if (r->continue_final_message &&
            pg_api_continue_final(text, keep, r->final_text, &keep, err) != PAGODA_OK)
            fail_json(err);
    }
    if (!text) return;
    int32_t *ids = NULL;
    size_t n = 0;
    if (pagoda_tokenize(g_engine, text, strlen(text), true, &ids, &n) == PAGODA_OK) {
        if (pg_api_check_length((int32_t)n, r->engine_req.sampling.max_tokens,
                                pagoda_engine_max_model_len(g_engine), err) != PAGODA_OK)
            fail_json(err);
        pagoda_free(ids);
    }
    free(text); /* both renderers return malloc'ed text */
}

static void tokenize_prompts(const pg_api_request *r, pg_api_error *err) {
    int32_t vocab = pagoda_engine_vocab_size(g_engine);
    for (size_t p = 0; p < r->n_prompts; p++) {
        const pg_api_prompt *pr = &r->prompts[p];
        int32_t n = (int32_t)pr->n_ids;
        if (pr->text) {
            int32_t *ids = NULL;
            size_t k = 0;
            if (pagoda_tokenize(g_engine, pr->text, pr->text_len, r->engine_req.add_special_tokens,
                                &ids, &k) != PAGODA_OK)
                continue;
            pagoda_free(ids);
            n = (int32_t)k;
        } else {
            char *text = NULL;
            size_t len = 0;
            bool in_vocab = true;
            for (size_t i = 0; i < pr->n_ids; i++)
                in_vocab &= pr->ids[i] < vocab;
            if (in_vocab &&
                pagoda_detokenize(g_engine, pr->ids, pr->n_ids, false, &text, &len) == PAGODA_OK)
                pagoda_free(text);
        }
        if (pg_api_check_length(n, r->engine_req.sampling.max_tokens,
                                pagoda_engine_max_model_len(g_engine), err) != PAGODA_OK)
            fail_json(err);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int endpoint = data[0] & 3;
    bool harmony = (data[0] & 4) != 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    pg_api_request r;
    pg_api_error err;
    memset(&r, 0, sizeof r);
    memset(&err, 0, sizeof err);
    pagoda_status st;
    if (endpoint <= 1) {
        pagoda_sampling defaults;
        pagoda_sampling_defaults(g_engine, &defaults);
        st = pg_api_parse(endpoint == 0 ? PG_API_COMPLETION : PG_API_CHAT, body, len, &defaults, &r,
                          &err);
    } else if (endpoint == 2) {
        st = pg_api_parse_tokenize(body, len, &r, &err);
    } else {
        st = pg_api_parse_detokenize(body, len, &r, &err);
    }
    if (st != PAGODA_OK) {
        fail_json(&err);
        return 0;
    }
    if (pg_api_check_model(r.model, "stories260K", &err) != PAGODA_OK) fail_json(&err);
    if (r.kind == PG_API_CHAT && r.messages_json)
        render_chat(&r, harmony, &err);
    else
        tokenize_prompts(&r, &err);
    if (endpoint <= 1) {
        pagoda_grammar *g = NULL;
        if (pg_structured_from_body(g_engine, body, len, harmony, &g, &err) != PAGODA_OK)
            fail_json(&err);
        pagoda_grammar_free(g);
    }
    pg_api_request_free(&r);
    return 0;
}
