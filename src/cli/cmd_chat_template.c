/* `pagoda chat-template`: render a conversation with a model's chat template
 * (transformers apply_chat_template(tokenize=False)) and print the prompt
 * text; see src/tokenizer/chat_template.h. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/status.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "tokenizer/chat_template.h"

static void help(void) {
    printf(
        "usage: pagoda chat-template MODEL_OR_TEMPLATE --messages JSON [options]\n\n"
        "Renders a conversation with a chat template and prints the prompt text.\n"
        "MODEL_OR_TEMPLATE is a model directory (its chat_template.jinja or the\n"
        "chat_template of tokenizer_config.json), a tokenizer_config.json, a .gguf\n"
        "file (tokenizer.chat_template), or a Jinja template file.\n\n"
        "options:\n"
        "  --messages JSON|@FILE     the messages array, e.g. '[{\"role\":\"user\",\"content\":\"Hi\"}]'\n"
        "  --tools JSON|@FILE        a tools array (OpenAI function schemas)\n"
        "  --kwargs JSON|@FILE       chat_template_kwargs object, e.g. '{\"enable_thinking\":false}'\n"
        "  --add-generation-prompt   end with the assistant turn header\n"
        "  --continue-final-message  end inside the last message (to continue it)\n"
        "  --chat-template FILE      use this template instead of the model's\n"
        "  --date YYYY-MM-DD         the date strftime_now() sees (default: today)\n"
        "  --prepare                 prepare messages as the server does for an OpenAI\n"
        "                            request (content parts joined or wrapped to suit the\n"
        "                            template, tool call arguments parsed from JSON)\n");
}

/* Parse JSON given inline or as @FILE. Returns NULL (message printed) on error. */
static cJSON *json_arg(const char *opt, const char *v) {
    char *buf = NULL;
    if (v[0] == '@') {
        FILE *f = fopen(v + 1, "rb");
        if (!f) {
            fprintf(stderr, "pagoda chat-template: %s: cannot open %s\n", opt, v + 1);
            return NULL;
        }
        size_t cap = 4096, n = 0;
        buf = malloc(cap);
        size_t got;
        while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
            n += got;
            if (n + 1 == cap) {
                char *nb = realloc(buf, cap * 2);
                if (!nb) {
                    free(buf);
                    buf = NULL;
                    break;
                }
                buf = nb;
                cap *= 2;
            }
        }
        fclose(f);
        if (!buf) {
            fprintf(stderr, "pagoda chat-template: out of memory\n");
            return NULL;
        }
        buf[n] = 0;
        v = buf;
    }
    cJSON *j = cJSON_Parse(v);
    if (!j) fprintf(stderr, "pagoda chat-template: %s: invalid JSON\n", opt);
    free(buf);
    return j;
}

static bool is_template_file(const char *p) {
    struct stat s;
    if (stat(p, &s) != 0 || S_ISDIR(s.st_mode)) return false;
    size_t n = strlen(p);
    return !(n >= 5 && strcmp(p + n - 5, ".json") == 0) && !(n >= 5 && strcmp(p + n - 5, ".gguf") == 0);
}

int pg_cmd_chat_template(int argc, char **argv) {
    const char *model = NULL, *messages = NULL, *tools = NULL, *kwargs = NULL, *tpl = NULL;
    const char *date = NULL;
    bool agp = false, prepare = false, cont = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return 0;
        }
        if (!strcmp(a, "--add-generation-prompt")) {
            agp = true;
            continue;
        }
        if (!strcmp(a, "--continue-final-message")) {
            cont = true;
            continue;
        }
        if (!strcmp(a, "--prepare")) {
            prepare = true;
            continue;
        }
        const char **slot = !strcmp(a, "--messages") ? &messages
                          : !strcmp(a, "--tools") ? &tools
                          : !strcmp(a, "--kwargs") ? &kwargs
                          : !strcmp(a, "--chat-template") ? &tpl
                          : !strcmp(a, "--date") ? &date
                          : NULL;
        if (slot) {
            if (!(*slot = pg_args_value("pagoda chat-template", argc, argv, &i))) return 2;
            continue;
        }
        if (pg_args_is_option(a)) return pg_args_unknown("pagoda chat-template", a);
        if (model) return pg_args_unexpected("pagoda chat-template", a);
        model = a;
    }
    if (!model && !tpl) {
        fprintf(stderr, "pagoda chat-template: give a model or a template file (see --help)\n");
        return 2;
    }
    if (agp && cont) {
        fprintf(stderr, "pagoda chat-template: --add-generation-prompt and "
                        "--continue-final-message exclude each other\n");
        return 2;
    }
    if (!messages) {
        fprintf(stderr, "pagoda chat-template: --messages is required (see --help)\n");
        return 2;
    }
    struct tm now_tm = {0}, *now = NULL;
    if (date) {
        int y, m, d;
        char extra;
        if (sscanf(date, "%d-%d-%d%c", &y, &m, &d, &extra) != 3 || m < 1 || m > 12 || d < 1 ||
            d > 31) {
            fprintf(stderr, "pagoda chat-template: --date '%s': expected YYYY-MM-DD\n", date);
            return 2;
        }
        now_tm.tm_year = y - 1900;
        now_tm.tm_mon = m - 1;
        now_tm.tm_mday = d;
        now_tm.tm_isdst = -1;
        time_t tt = timegm(&now_tm); /* normalise and fill wday / yday */
        gmtime_r(&tt, &now_tm);
        now = &now_tm;
    }
    if (model && !tpl && is_template_file(model)) {
        tpl = model;
        model = NULL;
    }
    cJSON *jm = json_arg("--messages", messages);
    cJSON *jt = tools ? json_arg("--tools", tools) : NULL;
    cJSON *jk = kwargs ? json_arg("--kwargs", kwargs) : NULL;
    int rc = 2;
    pg_chat_config cfg = {0};
    pg_chat_template *t = NULL;
    char *out = NULL;
    if (!jm || (tools && !jt) || (kwargs && !jk)) goto done;
    rc = 1;
    if (pg_chat_config_load(model, tpl, &cfg) != PAGODA_OK ||
        pg_chat_template_compile(cfg.source, &t) != PAGODA_OK) {
        fprintf(stderr, "pagoda chat-template: %s\n", pg_last_error());
        goto done;
    }
    if (prepare) {
        cJSON *pm = NULL;
        if (pg_chat_messages_prepare(jm, pg_chat_template_iterates_content(t), &pm) != PAGODA_OK) {
            fprintf(stderr, "pagoda chat-template: %s\n", pg_last_error());
            goto done;
        }
        cJSON_Delete(jm);
        jm = pm;
    }
    pg_chat_special_tokens sp = pg_chat_config_tokens(&cfg);
    if (pg_chat_template_render_at(t, jm, jt, jk, agp, &sp, now, &out) != PAGODA_OK) {
        fprintf(stderr, "pagoda chat-template: %s\n", pg_last_error());
        goto done;
    }
    if (cont && pg_chat_continue_final_message(out, jm) != PAGODA_OK) {
        fprintf(stderr, "pagoda chat-template: %s\n", pg_last_error());
        goto done;
    }
    fputs(out, stdout);
    rc = 0;
done:
    free(out);
    pg_chat_template_free(t);
    pg_chat_config_free(&cfg);
    cJSON_Delete(jm);
    cJSON_Delete(jt);
    cJSON_Delete(jk);
    return rc;
}
