/* Structured-output registry (grammars.h). */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammars.h"

#define CACHE_SIZE 64

typedef struct entry {
    pagoda_grammar_kind kind;
    char *spec;
    size_t len;
    pg_tgram *t;
    uint64_t last_use;
} entry;

struct pg_grammars {
    const pg_tokenizer *tok;
    int32_t model_vocab;
    pthread_mutex_t mu;
    pg_vocab_trie *trie;
    entry cache[CACHE_SIZE];
    uint64_t clock;
};

pg_grammars *pg_grammars_create(const pg_tokenizer *tok, int32_t model_vocab) {
    pg_grammars *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->tok = tok;
    r->model_vocab = model_vocab;
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void pg_grammars_free(pg_grammars *r) {
    if (!r) return;
    for (int i = 0; i < CACHE_SIZE; i++) {
        free(r->cache[i].spec);
        if (r->cache[i].t) pg_tgram_release(r->cache[i].t);
    }
    pg_vocab_trie_free(r->trie);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

pagoda_status pg_grammars_vocab_trie(const pg_tokenizer *tok, int32_t model_vocab,
                                     pg_vocab_trie **out) {
    int32_t tv = pg_tokenizer_vocab_size(tok);
    int32_t n = model_vocab > tv ? model_vocab : tv;
    const char **b = calloc((size_t)n, sizeof *b);
    size_t *l = calloc((size_t)n, sizeof *l);
    if (!b || !l) {
        free(b);
        free(l);
        return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    }
    for (int32_t i = 0; i < tv; i++) {
        if (pg_tokenizer_is_special(tok, i)) continue;
        b[i] = pg_tokenizer_token_bytes(tok, i, &l[i]);
        if (!b[i]) l[i] = 0;
    }
    pagoda_status st = pg_vocab_trie_create(b, l, n, out);
    free(b);
    free(l);
    return st;
}

pagoda_status pg_grammar_build(pagoda_grammar_kind kind, const char *spec, size_t len,
                               pg_gram **out) {
    *out = NULL;
    switch (kind) {
    case PAGODA_GRAMMAR_JSON_SCHEMA:
        return pg_gram_from_json_schema(spec, len, out);
    case PAGODA_GRAMMAR_JSON_OBJECT:
        return pg_gram_json_object(out);
    case PAGODA_GRAMMAR_REGEX:
        return pg_gram_from_regex(spec, len, out);
    case PAGODA_GRAMMAR_EBNF:
        return pg_gram_from_ebnf(spec, len, out);
    case PAGODA_GRAMMAR_EBNF_SCHEMAS: {
        cJSON *o = cJSON_ParseWithLength(spec, len);
        const cJSON *eb = cJSON_GetObjectItemCaseSensitive(o, "ebnf");
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(o, "schemas");
        pagoda_status st;
        if (!cJSON_IsString(eb) || !cJSON_IsArray(sc)) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "ebnf+schemas: expected {\"ebnf\": text, \"schemas\": [schemas]}");
        } else {
            char *sct = cJSON_PrintUnformatted(sc);
            st = sct ? pg_gram_from_ebnf_schemas(eb->valuestring, strlen(eb->valuestring), sct,
                                                 strlen(sct), out)
                     : pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
            cJSON_free(sct);
        }
        cJSON_Delete(o);
        return st;
    }
    case PAGODA_GRAMMAR_CHOICE: {
        cJSON *a = cJSON_ParseWithLength(spec, len);
        if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) == 0) {
            cJSON_Delete(a);
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "choice: expected a non-empty array of strings");
        }
        int n = cJSON_GetArraySize(a), i = 0;
        const char **items = malloc((size_t)n * sizeof *items);
        if (!items) {
            cJSON_Delete(a);
            return pg_error(PAGODA_ERR_NOMEM, "choice: out of memory");
        }
        for (const cJSON *x = a->child; x; x = x->next) {
            if (!cJSON_IsString(x)) {
                free(items);
                cJSON_Delete(a);
                return pg_error(PAGODA_ERR_INVALID_ARG, "choice: item %d is not a string", i);
            }
            items[i++] = x->valuestring;
        }
        pagoda_status st = pg_gram_from_choice(items, NULL, (size_t)n, out);
        free(items);
        cJSON_Delete(a);
        return st;
    }
    }
    return pg_error(PAGODA_ERR_INVALID_ARG, "grammar: unknown kind %d", (int)kind);
}

pagoda_status pg_grammars_get(pg_grammars *r, pagoda_grammar_kind kind, const char *spec,
                              size_t len, pg_tgram **out) {
    *out = NULL;
    if (!spec) spec = "";
    if (kind == PAGODA_GRAMMAR_JSON_OBJECT) len = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < CACHE_SIZE; i++) {
        entry *c = &r->cache[i];
        if (c->t && c->kind == kind && c->len == len && memcmp(c->spec, spec, len) == 0) {
            c->last_use = ++r->clock;
            pg_tgram_retain(c->t);
            *out = c->t;
            pthread_mutex_unlock(&r->mu);
            return PAGODA_OK;
        }
    }
    pagoda_status st = PAGODA_OK;
    if (!r->trie) st = pg_grammars_vocab_trie(r->tok, r->model_vocab, &r->trie);
    pthread_mutex_unlock(&r->mu);
    if (st != PAGODA_OK) return st;
    /* compile outside the lock */
    pg_gram *g;
    if ((st = pg_grammar_build(kind, spec, len, &g)) != PAGODA_OK) return st;
    pg_tgram *t;
    if ((st = pg_tgram_create(g, r->trie, &t)) != PAGODA_OK) return st;
    char *copy = malloc(len + 1);
    if (!copy) {
        pg_tgram_release(t);
        return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    }
    memcpy(copy, spec, len);
    copy[len] = 0;
    pthread_mutex_lock(&r->mu);
    int victim = 0;
    for (int i = 0; i < CACHE_SIZE; i++) {
        if (!r->cache[i].t) {
            victim = i;
            break;
        }
        if (r->cache[i].last_use < r->cache[victim].last_use) victim = i;
    }
    entry *c = &r->cache[victim];
    free(c->spec);
    if (c->t) pg_tgram_release(c->t);
    *c = (entry){.kind = kind, .spec = copy, .len = len, .t = t, .last_use = ++r->clock};
    pg_tgram_retain(t);
    pthread_mutex_unlock(&r->mu);
    *out = t;
    return PAGODA_OK;
}

bool pg_grammars_owns(pg_grammars *r, const pg_tgram *t) {
    pthread_mutex_lock(&r->mu);
    bool own = r->trie && pg_tgram_trie(t) == r->trie;
    pthread_mutex_unlock(&r->mu);
    return own;
}
