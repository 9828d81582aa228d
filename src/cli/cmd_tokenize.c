/* `pagoda tokenize` and `pagoda detokenize`: text <-> token ids with a
 * model's tokenizer (HF directory with tokenizer.json, or a GGUF file). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/mapped_file.h"
#include "tokenizer/tokenizer.h"

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: pagoda tokenize TOKENIZER --text TEXT [--add-special] [--json]\n"
            "  TOKENIZER      model directory (tokenizer.json [+ tokenizer_config.json]) or .gguf file\n"
            "  --text TEXT    text to encode ('-' reads standard input)\n"
            "  --add-special  add BOS/EOS and match special-token text, as HF encode() does;\n"
            "                 without it special-token text is plain text\n"
            "  --json         print {\"token_ids\": [...]} instead of space-separated ids\n");
}

static void detokenize_usage(FILE *f) {
    fprintf(f,
            "usage: pagoda detokenize TOKENIZER --ids 1,2,3 [--skip-special]\n"
            "  TOKENIZER       model directory or .gguf file\n"
            "  --ids LIST      token ids separated by commas or spaces\n"
            "  --skip-special  drop special/control tokens\n"
            "Ids a model directory's config.json vocab_size has beyond the tokenizer's\n"
            "(padding) decode to nothing, as in generation.\n");
}

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b) return NULL;
    size_t r;
    while ((r = fread(b + n, 1, cap - n, stdin)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
        }
    }
    *len = n;
    return b;
}

int pg_cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL;
    bool add_special = false, json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            tokenize_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--text")) {
            if (!(text = pg_args_value("pagoda tokenize", argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--add-special")) {
            add_special = true;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (pg_args_is_option(argv[i])) {
            return pg_args_unknown("pagoda tokenize", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            return pg_args_unexpected("pagoda tokenize", argv[i]);
        }
    }
    if (!path || !text) {
        fprintf(stderr, "pagoda tokenize: %s is required\n", !path ? "TOKENIZER" : "--text");
        tokenize_usage(stderr);
        return 2;
    }
    char *owned = NULL;
    size_t len = strlen(text);
    if (!strcmp(text, "-")) {
        owned = read_stdin(&len);
        if (!owned) {
            fprintf(stderr, "pagoda tokenize: cannot read standard input\n");
            return 1;
        }
        text = owned;
    }
    pg_tokenizer *tok = NULL;
    if (pg_tokenizer_load(path, &tok)) {
        fprintf(stderr, "pagoda tokenize: %s\n", pg_last_error());
        free(owned);
        return 1;
    }
    size_t n = 0, cap = len + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    int rc = 0;
    if (!ids || pg_tokenizer_encode(tok, text, len, add_special, ids, cap, &n)) {
        fprintf(stderr, "pagoda tokenize: %s\n", ids ? pg_last_error() : "out of memory");
        rc = 1;
    } else if (n > cap) { /* cannot happen (at most one id per byte + specials), but be safe */
        int32_t *bigger = realloc(ids, n * sizeof *ids);
        if (!bigger || pg_tokenizer_encode(tok, text, len, add_special, bigger, n, &n)) {
            fprintf(stderr, "pagoda tokenize: out of memory\n");
            rc = 1;
        }
        if (bigger) ids = bigger;
    }
    if (!rc) {
        if (json) {
            cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "token_ids");
            for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            char *s = cJSON_PrintUnformatted(o);
            printf("%s\n", s ? s : "{}");
            cJSON_free(s);
            cJSON_Delete(o);
        } else {
            for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
            printf("\n");
        }
    }
    free(ids);
    free(owned);
    pg_tokenizer_free(tok);
    return rc;
}

int pg_cmd_detokenize(int argc, char **argv) {
    const char *path = NULL, *list = NULL;
    bool skip = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            detokenize_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--ids")) {
            if (!(list = pg_args_value("pagoda detokenize", argc, argv, &i))) return 2;
        } else if (!strcmp(argv[i], "--skip-special")) {
            skip = true;
        } else if (pg_args_is_option(argv[i])) {
            return pg_args_unknown("pagoda detokenize", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            return pg_args_unexpected("pagoda detokenize", argv[i]);
        }
    }
    if (!path || !list) {
        fprintf(stderr, "pagoda detokenize: %s is required\n", !path ? "TOKENIZER" : "--ids");
        detokenize_usage(stderr);
        return 2;
    }
    size_t cap = strlen(list) / 2 + 1, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "pagoda detokenize: out of memory\n");
        return 1;
    }
    const char *p = list;
    while (*p) {
        if (*p == ',' || *p == ' ' || *p == '[' || *p == ']' || *p == '\n' || *p == '\t') {
            p++;
            continue;
        }
        char *e;
        errno = 0;
        long v = strtol(p, &e, 10);
        if (e == p || errno || v < 0 || v > INT32_MAX || (*e && !strchr(", ]\n\t", *e))) {
            fprintf(stderr, "pagoda detokenize: bad token id near '%.20s'\n", p);
            free(ids);
            return 2;
        }
        ids[n++] = (int32_t)v;
        p = e;
    }
    pg_tokenizer *tok = NULL;
    if (pg_tokenizer_load(path, &tok)) {
        fprintf(stderr, "pagoda detokenize: %s\n", pg_last_error());
        free(ids);
        return 1;
    }
    /* a model directory whose config.json vocab_size pads the tokenizer's
     * vocabulary (to a multiple of 64, ...): the padding ids, which the
     * model can generate, decode to nothing, as in the engine */
    char cfg_path[4200], *cfg = NULL;
    size_t cfg_len;
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", path);
    if (pg_read_small_file(cfg_path, 1 << 20, &cfg, &cfg_len) == PAGODA_OK) {
        cJSON *root = cJSON_ParseWithLength(cfg, cfg_len);
        const cJSON *vs = root ? cJSON_GetObjectItemCaseSensitive(root, "vocab_size") : NULL;
        if (cJSON_IsNumber(vs) && vs->valuedouble >= 0 && vs->valuedouble <= INT32_MAX) {
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                if (!pg_tokenizer_is_padding(tok, ids[i], (int32_t)vs->valuedouble))
                    ids[k++] = ids[i];
            n = k;
        }
        cJSON_Delete(root);
        free(cfg);
    }
    pg_clear_error();
    int rc = 0;
    size_t len = 0;
    if (pg_tokenizer_decode(tok, ids, n, skip, NULL, 0, &len)) {
        fprintf(stderr, "pagoda detokenize: %s\n", pg_last_error());
        rc = 1;
    } else {
        char *out = malloc(len + 1);
        if (!out || pg_tokenizer_decode(tok, ids, n, skip, out, len + 1, &len)) {
            fprintf(stderr, "pagoda detokenize: %s\n", out ? pg_last_error() : "out of memory");
            rc = 1;
        } else {
            fwrite(out, 1, len, stdout);
            printf("\n");
        }
        free(out);
    }
    free(ids);
    pg_tokenizer_free(tok);
    return rc;
}
