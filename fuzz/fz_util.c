/* Helpers shared by the libFuzzer targets (fz_util.h). */
#define _GNU_SOURCE
#include "fz_util.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "tokenizer/tokenizer.h"

#ifndef PAGODA_FUZZ_ASSETS
#define PAGODA_FUZZ_ASSETS "../shared/assets"
#endif

static char g_dir[64];

static void discard(void *ctx, pg_log_level level, const char *msg) {
    (void)ctx, (void)level, (void)msg;
}

static void remove_dir(void) {
    if (!g_dir[0]) return;
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char *p = fz_path(e->d_name);
            unlink(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(g_dir);
}

void fz_init(void) {
    if (g_dir[0]) return;
    pg_log_set_sink(discard, NULL);
    pg_log_set_level(PG_LOG_DEBUG);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%.40s/pagoda-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(remove_dir);
}

char *fz_path(const char *name) {
    char *p = NULL;
    if (asprintf(&p, "%s/%s", g_dir, name) < 0) abort();
    return p;
}

char *fz_write(const char *name, const void *data, size_t n) {
    char *p = fz_path(name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(p);
        abort();
    }
    return p;
}

char *fz_link(const char *name, const char *target) {
    char *p = fz_path(name);
    unlink(p);
    if (symlink(target, p) != 0) {
        perror(p);
        abort();
    }
    return p;
}

char *fz_asset(const char *rel) {
    const char *root = getenv("PAGODA_ASSETS");
    char *p = NULL;
    if (asprintf(&p, "%s/%s", root && *root ? root : PAGODA_FUZZ_ASSETS, rel) < 0) abort();
    return p;
}

char *fz_strndup(const void *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, data, n);
    s[n] = 0;
    return s;
}

void fz_split(const uint8_t *data, size_t size, const uint8_t **rest, size_t *rest_len,
              size_t *first_len) {
    const uint8_t *z = size ? memchr(data, 0, size) : NULL;
    *first_len = z ? (size_t)(z - data) : size;
    *rest = z ? z + 1 : NULL;
    *rest_len = z ? size - *first_len - 1 : 0;
}

static void encode_decode(const pg_tokenizer *tok, const char *text, size_t len, bool special) {
    int32_t ids[512];
    size_t n = 0;
    if (pg_tokenizer_encode(tok, text, len, special, ids, 512, &n) != PAGODA_OK) return;
    if (n > 512) n = 512;
    char out[2048];
    size_t out_len;
    pg_tokenizer_decode(tok, ids, n, false, out, sizeof out, &out_len);
    pg_tokenizer_decode(tok, ids, n, true, out, sizeof out, &out_len);
}

void fz_use_tokenizer(const pg_tokenizer *tok, const char *text, size_t len) {
    static const char fixed[] = "Hello world! <s></s><|endoftext|> \xe4\xbd\xa0\xe5\xa5\xbd "
                                "\xf0\x9f\x98\x80 caf\xc3\xa9 123  \t\n";
    encode_decode(tok, fixed, sizeof fixed - 1, false);
    encode_decode(tok, fixed, sizeof fixed - 1, true);
    if (text) {
        encode_decode(tok, text, len, false);
        encode_decode(tok, text, len, true);
    }
    int32_t v = pg_tokenizer_vocab_size(tok);
    int32_t some[] = {-1, 0, 1, 2, 3, v - 1, v, pg_tokenizer_bos(tok), pg_tokenizer_eos(tok)};
    char out[256];
    size_t out_len;
    pg_tokenizer_decode(tok, some, sizeof some / sizeof *some, false, out, sizeof out, &out_len);
    for (int32_t id = -1; id <= v && id < 300; id++) {
        size_t l;
        pg_tokenizer_token_bytes(tok, id, &l);
        const char *t = pg_tokenizer_token_text(tok, id, &l);
        if (t) pg_tokenizer_token_to_id(tok, t, l);
        pg_tokenizer_is_special(tok, id);
    }
    pg_tokenizer_chat_template(tok);
}
