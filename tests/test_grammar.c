/* Grammar engine (src/grammar/): the pushdown automaton against a
 * reference matcher, JSON-schema outputs against a reference schema
 * validator, token masks on real tokenizers, errors naming the feature,
 * and constrained requests through the engine (batch invariance). */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/grammars.h"
#include "grammar/gram.h"
#include "grammar/gram_ir.h"
#include "grammar/token_mask.h"
#include "pagoda.h"
#include "tokenizer/tokenizer.h"

/* Deterministic test data (xorshift64*), independent of the code under test. */
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)(((g_rng * 0x2545F4914F6CDD1Dull) >> 33) % n);
}

/* ------------------------------------------------------------------
 * Reference matcher: a direct recursive interpretation of the grammar IR
 * (sets of end positions per expression, memoised per rule and start),
 * sharing nothing with the automaton (no NFA, no DFA, no stacks).
 * eof: some derivation ran out of input inside the expression, i.e. the
 * input is a proper prefix of something the expression derives. */
#define REF_MAX 512
typedef struct ends {
    uint64_t w[REF_MAX / 64 + 1];
    bool eof;
} ends;

typedef struct ref {
    const gx_builder *b;
    const uint8_t *s;
    int n;
    ends *memo;
    uint8_t *state; /* per (rule, pos): 0 todo, 1 busy, 2 done */
} ref;

static void e_set(ends *e, int p) {
    e->w[p >> 6] |= 1ull << (p & 63);
}
static bool e_has(const ends *e, int p) {
    return e->w[p >> 6] >> (p & 63) & 1;
}
static bool e_empty(const ends *e) {
    for (size_t i = 0; i < sizeof e->w / 8; i++)
        if (e->w[i]) return false;
    return true;
}

static void m_expr(ref *r, int32_t x, int pos, ends *out);

static void m_from(ref *r, int32_t x, const ends *starts, ends *out) {
    memset(out, 0, sizeof *out);
    for (int p = 0; p <= r->n; p++) {
        if (!e_has(starts, p)) continue;
        ends t;
        m_expr(r, x, p, &t);
        for (size_t i = 0; i < sizeof t.w / 8; i++)
            out->w[i] |= t.w[i];
        out->eof |= t.eof;
    }
}

static void m_expr(ref *r, int32_t x, int pos, ends *out) {
    const gx_node *nd = &r->b->nodes[x];
    memset(out, 0, sizeof *out);
    switch (nd->kind) {
    case GX_EMPTY:
        e_set(out, pos);
        return;
    case GX_CLASS:
        if (pos == r->n)
            out->eof = true;
        else if (r->b->cls[nd->a][r->s[pos] >> 6] >> (r->s[pos] & 63) & 1)
            e_set(out, pos + 1);
        return;
    case GX_SEQ: {
        ends cur = {0};
        e_set(&cur, pos);
        bool eof = false;
        for (int32_t i = 0; i < nd->n; i++) {
            ends nx;
            m_from(r, r->b->kids[nd->a + i], &cur, &nx);
            eof |= nx.eof;
            cur = nx;
            cur.eof = false;
        }
        *out = cur;
        out->eof = eof;
        return;
    }
    case GX_ALT:
        for (int32_t i = 0; i < nd->n; i++) {
            ends t;
            m_expr(r, r->b->kids[nd->a + i], pos, &t);
            for (size_t k = 0; k < sizeof t.w / 8; k++)
                out->w[k] |= t.w[k];
            out->eof |= t.eof;
        }
        return;
    case GX_REP: {
        ends cur = {0}, seen = {0};
        e_set(&cur, pos);
        if (nd->n == 0) e_set(out, pos);
        for (int32_t i = 1; nd->max < 0 || i <= nd->max; i++) {
            ends nx;
            m_from(r, nd->a, &cur, &nx);
            out->eof |= nx.eof;
            if (i >= nd->n) {
                if (nd->max < 0)
                    for (size_t k = 0; k < sizeof nx.w / 8; k++)
                        nx.w[k] &= ~seen.w[k];
                for (size_t k = 0; k < sizeof nx.w / 8; k++) {
                    seen.w[k] |= nx.w[k];
                    out->w[k] |= nx.w[k];
                }
            }
            nx.eof = false;
            if (e_empty(&nx)) break;
            cur = nx;
        }
        return;
    }
    case GX_REF: {
        size_t k = (size_t)nd->a * (size_t)(r->n + 1) + (size_t)pos;
        if (r->state[k] == 2) {
            *out = r->memo[k];
            return;
        }
        assert_int_not_equal(r->state[k], 1); /* left recursion: compile refuses it */
        r->state[k] = 1;
        ends t;
        m_expr(r, r->b->rules[nd->a].expr, pos, &t);
        r->memo[k] = t;
        r->state[k] = 2;
        *out = t;
        return;
    }
    }
}

/* Reference verdicts for s[0..n): *prefix (valid prefix), *complete. */
static void ref_check(const gx_builder *b, const uint8_t *s, int n, bool *prefix, bool *complete) {
    assert_true(n < REF_MAX);
    int32_t root = -1;
    for (int32_t i = 0; i < b->n_rules; i++)
        if (!strcmp(b->rules[i].name, "root")) root = b->rules[i].expr;
    assert_true(root >= 0);
    ref r = {.b = b, .s = s, .n = n};
    r.memo = malloc((size_t)b->n_rules * (size_t)(n + 1) * sizeof *r.memo);
    r.state = calloc((size_t)b->n_rules * (size_t)(n + 1), 1);
    assert_non_null(r.memo);
    assert_non_null(r.state);
    ends e;
    m_expr(&r, root, 0, &e);
    *complete = e_has(&e, n);
    *prefix = *complete || e.eof;
    free(r.memo);
    free(r.state);
}

/* A random string the automaton accepts (random allowed bytes; after
 * `soft` bytes it stops as soon as the input is complete). */
static int random_sentence(const pg_gram *g, uint8_t *out, int cap, int soft) {
    pg_gstate *m;
    assert_int_equal(pg_gstate_create(g, &m), PAGODA_OK);
    int n = 0;
    while (n < cap - 1) {
        if (pg_gstate_accepting(m) && (n >= soft || rnd(8) == 0)) break;
        uint64_t allow[4];
        pg_gstate_allowed(m, allow);
        int cnt = 0;
        for (int c = 0; c < 256; c++)
            cnt += (int)(allow[c >> 6] >> (c & 63) & 1);
        if (!cnt) break;
        int pick = (int)rnd((uint32_t)cnt), c = 0;
        for (;; c++)
            if (allow[c >> 6] >> (c & 63) & 1 && pick-- == 0) break;
        uint8_t b = (uint8_t)c;
        assert_true(pg_gstate_feed(m, &b, 1));
        out[n++] = b;
    }
    pg_gstate_free(m);
    return n;
}

/* Compare the automaton with the reference on every prefix of s. */
static void agree(const pg_gram *g, const gx_builder *b, const uint8_t *s, int n) {
    pg_gstate *m;
    assert_int_equal(pg_gstate_create(g, &m), PAGODA_OK);
    bool alive = true;
    for (int k = 0; k <= n; k++) {
        if (k > 0 && alive) alive = pg_gstate_feed(m, s + k - 1, 1);
        bool rp, rc;
        ref_check(b, s, k, &rp, &rc);
        if (rp != alive || (alive && rc != pg_gstate_accepting(m))) {
            fprintf(stderr,
                    "disagree at %d of '%.*s': automaton prefix %d complete %d, reference %d %d\n",
                    k, n, (const char *)s, alive, alive && pg_gstate_accepting(m), rp, rc);
            fail();
        }
        if (!alive && !rp) break; /* both dead: longer prefixes stay dead */
    }
    pg_gstate_free(m);
}

/* Random sentences, their mutations and random strings over the bytes the
 * sentences use: automaton == reference on every prefix. */
static void fuzz_agree(const pg_gram *g, const gx_builder *b, int rounds, int soft) {
    uint8_t s[REF_MAX], t[REF_MAX];
    for (int round = 0; round < rounds; round++) {
        int n = random_sentence(g, s, 200, soft);
        agree(g, b, s, n);
        for (int k = 0; k < 4; k++) { /* mutations */
            memcpy(t, s, (size_t)n);
            int m = n, at = m ? (int)rnd((uint32_t)m) : 0;
            uint8_t c = m && rnd(2) ? s[rnd((uint32_t)m)] : (uint8_t)(' ' + rnd(95));
            switch (rnd(3)) {
            case 0:
                if (m) t[at] = c;
                break;
            case 1:
                memmove(t + at + 1, t + at, (size_t)(m - at));
                t[at] = c;
                m++;
                break;
            default:
                if (m) {
                    memmove(t + at, t + at + 1, (size_t)(m - at - 1));
                    m--;
                }
            }
            agree(g, b, t, m);
        }
        int m = (int)rnd(12);
        for (int k = 0; k < m; k++)
            t[k] = n ? s[rnd((uint32_t)n)] : (uint8_t)rnd(256);
        agree(g, b, t, m);
    }
}

static const char *const EBNF[] = {
    /* arithmetic, right recursion through parentheses */
    "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= factor ((\"*\" | \"/\") "
    "factor)*\n"
    "factor ::= [0-9]+ | \"(\" expr \")\" | \"-\" factor",
    /* nullable rules inside loops, shared prefixes, tail recursion */
    "root ::= a* \"x\" list\na ::= \"y\"? | \"ab\" | \"abc\"\nlist ::= \"[\" (\"]\" | item)\n"
    "item ::= [a-c] (\"]\" | \",\" item)",
    /* UTF-8 classes, negation, bounded repetition, any char */
    "root ::= [^a-z\\n]{1,3} \"-\" [\\u00e9-\\u0101ж] . \"!\"{0,2}",
    /* deep nesting and alternation of the same rule */
    "root ::= v\nv ::= \"{\" (v (\",\" v)*)? \"}\" | \"n\"",
};

static void test_ebnf_vs_reference(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof EBNF / sizeof *EBNF; i++) {
        gx_builder b;
        gx_init(&b);
        assert_int_equal(gx_parse_ebnf(&b, EBNF[i], strlen(EBNF[i])), PAGODA_OK);
        pg_gram *g;
        assert_int_equal(pg_gram_from_ebnf(EBNF[i], strlen(EBNF[i]), &g), PAGODA_OK);
        fuzz_agree(g, &b, 60, 20);
        pg_gram_free(g);
        gx_free(&b);
    }
}

static const char *const REGEX[] = {
    "[a-c]+(x|yz){2}",
    "(ab|a)(bc|c)?d*",
    "\\d{3}-\\w{1,4}\\s?[^\\d]",
    "(a|b)*abb(a|b){0,3}",
    "é?.ж",
};

static void test_regex_vs_reference(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof REGEX / sizeof *REGEX; i++) {
        gx_builder b;
        gx_init(&b);
        int32_t x;
        assert_int_equal(gx_parse_regex(&b, REGEX[i], strlen(REGEX[i]), false, &x), PAGODA_OK);
        assert_int_equal(gx_define(&b, "root", 4, x), PAGODA_OK);
        pg_gram *g;
        assert_int_equal(pg_gram_from_regex(REGEX[i], strlen(REGEX[i]), &g), PAGODA_OK);
        fuzz_agree(g, &b, 60, 10);
        pg_gram_free(g);
        gx_free(&b);
    }
    /* a regex automaton vs PCRE2 on its own random strings and mutations */
    for (size_t i = 0; i < sizeof REGEX / sizeof *REGEX; i++) {
        int err;
        PCRE2_SIZE off;
        char anchored[128];
        snprintf(anchored, sizeof anchored, "^(?:%s)$", REGEX[i]);
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)anchored, PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP * 0, &err, &off, NULL);
        assert_non_null(re);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        pg_gram *g;
        assert_int_equal(pg_gram_from_regex(REGEX[i], strlen(REGEX[i]), &g), PAGODA_OK);
        for (int k = 0; k < 200; k++) {
            uint8_t s[256];
            int n = random_sentence(g, s, 64, 6);
            if (k & 1 && n) s[rnd((uint32_t)n)] = (uint8_t)('a' + rnd(6));
            pg_gstate *m;
            assert_int_equal(pg_gstate_create(g, &m), PAGODA_OK);
            bool ours = pg_gstate_feed(m, s, (size_t)n) && pg_gstate_accepting(m);
            int rc = pcre2_match(re, s, (PCRE2_SIZE)n, 0, PCRE2_NO_UTF_CHECK * 0, md, NULL);
            if (rc == PCRE2_ERROR_BADUTFOFFSET || rc <= PCRE2_ERROR_UTF8_ERR1) rc = -1;
            assert_int_equal(ours, rc >= 0);
            pg_gstate_free(m);
        }
        pg_gram_free(g);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
    }
}

/* ------------------------------------------------------------------
 * Reference JSON Schema validator (the keywords the converter supports),
 * written from the JSON Schema 2020-12 validation spec. */
static const cJSON *g_root;

static bool valid(const cJSON *v, const cJSON *s);

static size_t cp_len(const char *s) {
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static bool match_re(const char *pattern, const char *subject) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off, NULL);
    assert_non_null(re);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)subject, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static bool leap(int y) {
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static bool valid_date(const char *s) {
    int y, m, d;
    char tail;
    if (strlen(s) != 10 || sscanf(s, "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3) return false;
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1) return false;
    return d <= days[m - 1] + (m == 2 && leap(y));
}

static bool valid_format(const char *f, const char *s) {
    if (!strcmp(f, "date")) return valid_date(s);
    if (!strcmp(f, "time"))
        return match_re("^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2["
                        "0-3]):[0-5][0-9])$",
                        s);
    if (!strcmp(f, "date-time")) {
        char d[11];
        if (strlen(s) < 11 || s[10] != 'T') return false;
        memcpy(d, s, 10);
        d[10] = 0;
        return valid_date(d) && valid_format("time", s + 11);
    }
    if (!strcmp(f, "uuid"))
        return match_re(
            "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", s);
    if (!strcmp(f, "email"))
        return match_re("^[a-zA-Z0-9.!#$%&'*+/"
                        "=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\\.[a-zA-Z0-"
                        "9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$",
                        s);
    if (!strcmp(f, "ipv4"))
        return match_re("^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]"
                        "|1[0-9][0-9]|[1-9]?[0-9])$",
                        s);
    fail_msg("format %s", f);
    return false;
}

static const cJSON *deref(const char *r) {
    const cJSON *cur = g_root;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", r + 1);
    for (char *tok = strtok(buf, "/"); tok; tok = strtok(NULL, "/"))
        cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
    assert_non_null(cur);
    return cur;
}

static bool type_ok(const cJSON *v, const char *t) {
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    return false;
}

static bool valid(const cJSON *v, const cJSON *s) {
    if (cJSON_IsTrue(s)) return true;
    const cJSON *k;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) return valid(v, deref(k->valuestring));
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")) && !cJSON_Compare(v, k, true))
        return false;
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
        bool any = false;
        for (const cJSON *e = k->child; e; e = e->next)
            any |= cJSON_Compare(v, e, true);
        if (!any) return false;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "anyOf")) ||
        (k = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) {
        bool any = false;
        for (const cJSON *e = k->child; e; e = e->next)
            any |= valid(v, e);
        if (!any) return false;
    }
    if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
        bool any = false;
        if (cJSON_IsString(k)) any = type_ok(v, k->valuestring);
        for (const cJSON *e = cJSON_IsArray(k) ? k->child : NULL; e; e = e->next)
            any |= type_ok(v, e->valuestring);
        if (!any) return false;
    }
    if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minimum")) && x < k->valuedouble)
            return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maximum")) && x > k->valuedouble)
            return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum")) && x <= k->valuedouble)
            return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum")) && x >= k->valuedouble)
            return false;
    }
    if (cJSON_IsString(v)) {
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minLength")) &&
            cp_len(v->valuestring) < (size_t)k->valueint)
            return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxLength")) &&
            cp_len(v->valuestring) > (size_t)k->valueint)
            return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "pattern")) &&
            !match_re(k->valuestring, v->valuestring))
            return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "format")) &&
            !valid_format(k->valuestring, v->valuestring))
            return false;
    }
    if (cJSON_IsObject(v)) {
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
        const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        for (const cJSON *r = (k = cJSON_GetObjectItemCaseSensitive(s, "required")) ? k->child
                                                                                    : NULL;
             r; r = r->next)
            if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) return false;
        for (const cJSON *m = v->child; m; m = m->next) {
            const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, m->string) : NULL;
            if (ps) {
                if (!valid(m, ps)) return false;
            } else if (addl && !valid(m, addl)) {
                return false;
            }
        }
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v), i = 0;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "minItems")) && n < k->valueint) return false;
        if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxItems")) && n > k->valueint) return false;
        const cJSON *pre = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        int np = pre ? cJSON_GetArraySize(pre) : 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            const cJSON *es = i < np ? cJSON_GetArrayItem(pre, i) : items;
            if (es && !valid(e, es)) return false;
        }
    }
    return true;
}

static const char *const SCHEMAS[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},\"age\":{"
    "\"type\":\"integer\",\"minimum\":-3,\"maximum\":120},"
    "\"score\":{\"type\":\"number\",\"minimum\":-5,\"exclusiveMaximum\":5},\"ok\":{\"type\":"
    "\"boolean\"},\"nil\":{\"type\":\"null\"},"
    "\"nick\":{\"type\":[\"string\",\"null\"],\"minLength\":2,\"maxLength\":4}},\"required\":["
    "\"name\",\"ok\"],\"additionalProperties\":false}",
    "{\"type\":\"object\",\"properties\":{\"c\":{\"enum\":[\"red\",\"gr\\\"een\",3,null,{\"a\":[1]}"
    "]},\"v\":{\"const\":\"v1\"}},\"required\":[\"c\"]}",
    "{\"anyOf\":[{\"type\":\"integer\",\"exclusiveMinimum\":5,\"exclusiveMaximum\":900},{\"type\":"
    "\"string\",\"pattern\":\"^x[0-9]+$\"},"
    "{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":1,\"maxItems\":3}]}",
    "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\",\"minimum\":0,\"maximum\":3},{"
    "\"type\":\"string\",\"format\":\"date\"}],"
    "\"items\":{\"type\":\"string\",\"format\":\"uuid\"},\"minItems\":1,\"maxItems\":4}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\","
    "\"minimum\":10,\"maximum\":20},\"kids\":{\"type\":\"array\","
    "\"items\":{\"$ref\":\"#/$defs/node\"},\"maxItems\":2}},\"required\":[\"v\"]}},\"$ref\":\"#/"
    "$defs/node\"}",
    "{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"string\",\"format\":\"time\"},\"dt\":{"
    "\"type\":\"string\",\"format\":\"date-time\"},"
    "\"e\":{\"type\":\"string\",\"format\":\"email\"},\"ip\":{\"type\":\"string\",\"format\":"
    "\"ipv4\"},\"p\":{\"type\":\"string\",\"pattern\":\"a.c|[\\\"\\\\\\\\]\"}},"
    "\"required\":[\"t\",\"dt\",\"e\",\"ip\",\"p\"]}",
    "{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"number\",\"minimum\":-2,\"maximum\":3}}"
    ",\"additionalProperties\":{\"type\":\"integer\",\"maximum\":0}}",
    "{\"type\":\"number\",\"exclusiveMinimum\":-1,\"exclusiveMaximum\":1}",
};

static void test_json_schema_vs_reference(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof SCHEMAS / sizeof *SCHEMAS; i++) {
        cJSON *schema = cJSON_Parse(SCHEMAS[i]);
        assert_non_null(schema);
        g_root = schema;
        pg_gram *g;
        if (pg_gram_from_json_schema(SCHEMAS[i], strlen(SCHEMAS[i]), &g) != PAGODA_OK)
            fail_msg("schema %zu: %s", i, pg_last_error());
        gx_builder b;
        gx_init(&b);
        assert_int_equal(gx_json_schema(&b, SCHEMAS[i], strlen(SCHEMAS[i])), PAGODA_OK);
        /* the automaton == the reference matcher of its own IR */
        fuzz_agree(g, &b, 12, 40);
        /* every complete sentence is JSON valid under the schema */
        for (int k = 0; k < 150; k++) {
            uint8_t s[REF_MAX + 1];
            int n = random_sentence(g, s, REF_MAX, 30);
            pg_gstate *m;
            assert_int_equal(pg_gstate_create(g, &m), PAGODA_OK);
            assert_true(pg_gstate_feed(m, s, (size_t)n));
            bool done = pg_gstate_accepting(m);
            pg_gstate_free(m);
            if (!done) continue; /* ran out of room */
            s[n] = 0;
            cJSON *v = cJSON_ParseWithLength((const char *)s, (size_t)n);
            if (!v || !valid(v, schema)) fail_msg("schema %zu: output '%s' is not valid", i, s);
            cJSON_Delete(v);
        }
        gx_free(&b);
        pg_gram_free(g);
        cJSON_Delete(schema);
    }
}

/* Hand-written documents: valid ones in canonical form are accepted,
 * invalid ones are not. */
static bool accepts(const char *schema, const char *doc) {
    pg_gram *g;
    if (pg_gram_from_json_schema(schema, strlen(schema), &g) != PAGODA_OK)
        fail_msg("%s", pg_last_error());
    pg_gstate *m;
    assert_int_equal(pg_gstate_create(g, &m), PAGODA_OK);
    bool ok = pg_gstate_feed(m, (const uint8_t *)doc, strlen(doc)) && pg_gstate_accepting(m);
    pg_gstate_free(m);
    pg_gram_free(g);
    return ok;
}

static void test_json_schema_documents(void **state) {
    (void)state;
    const char *s0 = SCHEMAS[0];
    assert_true(accepts(s0, "{\"name\":\"Ann\",\"ok\":true}"));
    assert_true(accepts(s0, "{ \"name\" : \"Ann\" , \"age\" : -3, \"ok\": false, \"nick\": null}"));
    assert_true(accepts(s0, "{\"name\":\"\\u00e9\\n\",\"age\":120,\"score\":4.99,\"ok\":true,"
                            "\"nil\":null,\"nick\":\"ab\"}"));
    assert_false(accepts(s0, "{\"name\":\"Ann\"}"));                         /* required ok */
    assert_false(accepts(s0, "{\"name\":\"Ann\",\"ok\":true,\"x\":1}"));     /* additional */
    assert_false(accepts(s0, "{\"name\":\"Ann\",\"age\":121,\"ok\":true}")); /* maximum */
    assert_false(accepts(s0, "{\"name\":\"Ann\",\"age\":-4,\"ok\":true}"));
    assert_false(accepts(s0, "{\"name\":\"Ann\",\"score\":5,\"ok\":true}")); /* exclusive */
    assert_true(accepts(s0, "{\"name\":\"Ann\",\"score\":-5.0,\"ok\":true}"));
    assert_false(accepts(s0, "{\"name\":\"Annabel\",\"ok\":true}"));          /* maxLength 6 */
    assert_false(accepts(s0, "{\"name\":\"A\",\"ok\":true,\"nick\":\"a\"}")); /* minLength 2 */
    assert_true(accepts(SCHEMAS[1], "{\"c\":{\"a\":[1]},\"v\":\"v1\"}"));
    assert_true(accepts(SCHEMAS[1], "{\"c\":\"gr\\\"een\"}"));
    assert_false(accepts(SCHEMAS[1], "{\"c\":\"blue\"}"));
    assert_true(accepts(SCHEMAS[2], "899"));
    assert_false(accepts(SCHEMAS[2], "900"));
    assert_false(accepts(SCHEMAS[2], "5"));
    assert_true(accepts(SCHEMAS[2], "\"x12\""));
    assert_true(accepts(SCHEMAS[2], "[true,false]"));
    assert_false(accepts(SCHEMAS[2], "[]"));
    assert_true(accepts(SCHEMAS[3], "[3,\"2024-02-29\",\"123e4567-e89b-12d3-a456-426614174000\"]"));
    assert_false(accepts(SCHEMAS[3], "[3,\"2023-02-29\"]")); /* not a leap year */
    assert_true(accepts(SCHEMAS[3], "[3,\"2000-02-29\"]"));
    assert_false(accepts(SCHEMAS[3], "[3,\"1900-02-29\"]"));
    assert_false(accepts(SCHEMAS[3], "[3,\"2023-04-31\"]"));
    assert_true(accepts(SCHEMAS[4], "{\"v\":10,\"kids\":[{\"v\":11},{\"v\":20,\"kids\":[]}]}"));
    assert_false(accepts(SCHEMAS[4], "{\"v\":10,\"kids\":[{\"v\":9}]}"));
    assert_true(accepts(SCHEMAS[5],
                        "{\"t\":\"23:59:59.5Z\",\"dt\":\"2020-01-31T00:00:00+05:30\",\"e\":\"a."
                        "b@c-d.example.org\",\"ip\":\"255.0.10.1\",\"p\":\"xx\\\\yy\"}"));
    assert_false(accepts(SCHEMAS[5], "{\"t\":\"24:00:00Z\",\"dt\":\"2020-01-31T00:00:00Z\",\"e\":"
                                     "\"a@b.org\",\"ip\":\"1.1.1.1\",\"p\":\"abc\"}"));
    assert_false(accepts(SCHEMAS[5], "{\"t\":\"23:00:00Z\",\"dt\":\"2020-01-31T00:00:00Z\",\"e\":"
                                     "\"a@b.org\",\"ip\":\"256.1.1.1\",\"p\":\"abc\"}"));
    assert_true(accepts(SCHEMAS[6], "{\"k\":2.5,\"x\":-7,\"y\":0}"));
    assert_false(accepts(SCHEMAS[6], "{\"k\":3.5}"));
    assert_false(accepts(SCHEMAS[6], "{\"k\":1,\"x\":1}"));
    /* an additional key never repeats a declared name (JSON.parse keeps the last) */
    assert_false(accepts(SCHEMAS[6], "{\"k\":1,\"k\":0}"));
    assert_false(accepts(SCHEMAS[6], "{\"k\":1,\"\\u006b\":0}"));
    assert_true(accepts(SCHEMAS[6], "{\"k\":1,\"kk\":0,\"\":-1,\"K\":0}"));
    assert_true(accepts(SCHEMAS[7], "-0.5"));
    assert_true(accepts(SCHEMAS[7], "0"));
    assert_false(accepts(SCHEMAS[7], "-1"));
    assert_false(accepts(SCHEMAS[7], "1.0"));
    assert_true(accepts(SCHEMAS[7], "0.999"));
}

/* A '{' that does not start {n}, {n,} or {n,m} is a literal (ECMAScript's
 * Annex B, Python's re): "a{b" was refused with "nothing to repeat". */
static void test_regex_literal_brace(void **state) {
    (void)state;
    static const struct {
        const char *re, *s;
        bool ok;
    } cases[] = {
        {"a{b", "a{b", true},   {"{", "{", true},       {"x{,5}", "x{,5}", true},
        {"a{2}{", "aa{", true}, {"a{2}", "a{2}", false}, {"a{2}", "aa", true},
        {"\\{\\}", "{}", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        pg_gram *g;
        if (pg_gram_from_regex(cases[i].re, strlen(cases[i].re), &g) != PAGODA_OK)
            fail_msg("%s: %s", cases[i].re, pg_last_error());
        pg_gstate *m;
        assert_int_equal(pg_gstate_create(g, &m), PAGODA_OK);
        bool ok = pg_gstate_feed(m, (const uint8_t *)cases[i].s, strlen(cases[i].s)) &&
                  pg_gstate_accepting(m);
        if (ok != cases[i].ok) fail_msg("regex '%s' on '%s': %d", cases[i].re, cases[i].s, ok);
        pg_gstate_free(m);
        pg_gram_free(g);
    }
}

/* Errors name the rule / keyword / construct. */
static void expect_error(pagoda_status st, pagoda_status code, const char *word) {
    assert_int_equal(st, code);
    if (!strstr(pg_last_error(), word)) fail_msg("'%s' does not name '%s'", pg_last_error(), word);
}

static void test_errors(void **state) {
    (void)state;
    pg_gram *g = NULL;
#define EB(text, code, word) expect_error(pg_gram_from_ebnf(text, strlen(text), &g), code, word)
    EB("root ::= root \"a\" | \"b\"", PAGODA_ERR_INVALID_ARG, "left-recursive");
    EB("root ::= x? root \"a\" | \"b\"\nx ::= \"y\"", PAGODA_ERR_INVALID_ARG, "left-recursive");
    EB("root ::= foo", PAGODA_ERR_INVALID_ARG, "'foo'");
    EB("root ::= \"a\" root", PAGODA_ERR_INVALID_ARG, "never complete");
    EB("root ::= \"a\" | \"b\" bad\nbad ::= \"c\" bad", PAGODA_ERR_INVALID_ARG, "'bad'");
    EB("root ::= (\"a\"", PAGODA_ERR_INVALID_ARG, "')'");
    EB("root ::= \"a\"{3,2}", PAGODA_ERR_INVALID_ARG, "n < m");
    EB("start ::= \"a\"", PAGODA_ERR_INVALID_ARG, "'root'");
    EB("root ::= [a-", PAGODA_ERR_INVALID_ARG, "line 1");
    /* found by fuzz_ebnf (CI's run): eight hex digits overflowed int32 before
     * the range check (UBSan: signed integer overflow) */
    EB("root ::= \"\\UFFFFFFFF\"", PAGODA_ERR_INVALID_ARG, "U+10FFFF");
    EB("root ::= [\\U9999999A]", PAGODA_ERR_INVALID_ARG, "U+10FFFF");
#define RX(text, code, word) expect_error(pg_gram_from_regex(text, strlen(text), &g), code, word)
    RX("(a)\\1", PAGODA_ERR_UNSUPPORTED, "backreferences");
    RX("a(?=b)", PAGODA_ERR_UNSUPPORTED, "lookaround");
    RX("\\bword", PAGODA_ERR_UNSUPPORTED, "\\b");
    RX("a^b", PAGODA_ERR_UNSUPPORTED, "anchors");
    RX("a{2,1}", PAGODA_ERR_INVALID_ARG, "n < m");
    RX("[z-a]", PAGODA_ERR_INVALID_ARG, "range");
    /* a bound above the limit was taken for a literal '{' and reported as
     * "nothing to repeat" (a request's guided_regex "a{99999999}") */
    RX("a{99999999}", PAGODA_ERR_LIMIT, "repetition bound above 10000");
    RX("a{2,10001}", PAGODA_ERR_LIMIT, "repetition bound above 10000");
    RX("{3}", PAGODA_ERR_INVALID_ARG, "nothing to repeat");
    /* found by fuzz_request (tests/data/fuzz/request_regex_compile_slow): 151k
     * automaton nodes and 5 s of CPU below the node limit; now the work budget
     * stops it with a clear error */
    RX(".*a.{12}", PAGODA_ERR_LIMIT, "too complex");
    RX(".*a.{16}", PAGODA_ERR_LIMIT, "too complex");
#define JS(text, code, word)                                                                       \
    expect_error(pg_gram_from_json_schema(text, strlen(text), &g), code, word)
    JS("{\"not\":{}}", PAGODA_ERR_UNSUPPORTED, "'not'");
    JS("{\"type\":\"array\",\"uniqueItems\":true}", PAGODA_ERR_UNSUPPORTED, "'uniqueItems'");
    JS("{\"type\":\"string\",\"format\":\"hostname\"}", PAGODA_ERR_UNSUPPORTED, "'hostname'");
    JS("{\"type\":\"integer\",\"multipleOf\":2}", PAGODA_ERR_UNSUPPORTED, "'multipleOf'");
    JS("{\"type\":\"number\",\"maximum\":2.5}", PAGODA_ERR_UNSUPPORTED, "'maximum'");
    JS("{\"type\":\"integer\",\"pattern\":\"a\"}", PAGODA_ERR_UNSUPPORTED, "'pattern'");
    JS("{\"allOf\":[{},{}]}", PAGODA_ERR_UNSUPPORTED, "'allOf'");
    JS("{\"$ref\":\"http://x/y\"}", PAGODA_ERR_UNSUPPORTED, "$ref");
    JS("{\"$ref\":\"#/$defs/nope\"}", PAGODA_ERR_INVALID_ARG, "does not resolve");
    JS("{\"type\":\"object\",\"required\":[\"a\"]}", PAGODA_ERR_UNSUPPORTED, "'a'");
    JS("{\"type\":\"string\",\"pattern\":\"(?<=a)b\"}", PAGODA_ERR_UNSUPPORTED, "lookaround");
    JS("{\"type\":\"strin\"}", PAGODA_ERR_INVALID_ARG, "'strin'");
    JS("false", PAGODA_ERR_UNSUPPORTED, "false");
    JS("{\"type\":\"object\",\"minProperties\":1}", PAGODA_ERR_UNSUPPORTED, "'minProperties'");
    assert_null(g);
}

/* ------------------------------------------------------------------ masks */

typedef struct vocab {
    pg_tokenizer *tok;
    pg_vocab_trie *trie;
    int32_t n;
} vocab;

static bool load_vocab(const char *rel, vocab *v) {
    const char *path = pg_test_asset(rel);
    if (pg_tokenizer_load(path, &v->tok) != PAGODA_OK) return false;
    v->n = pg_tokenizer_vocab_size(v->tok);
    assert_int_equal(pg_grammars_vocab_trie(v->tok, v->n, &v->trie), PAGODA_OK);
    return true;
}

static void free_vocab(vocab *v) {
    pg_vocab_trie_free(v->trie);
    pg_tokenizer_free(v->tok);
}

/* Is prefix + token bytes a valid prefix? (a fresh byte matcher) */
static bool extends(const pg_gram *g, const uint8_t *pre, size_t n, const char *tb, size_t tl) {
    pg_gstate *m;
    assert_int_equal(pg_gstate_create(g, &m), PAGODA_OK);
    bool ok = pg_gstate_feed(m, pre, n) && pg_gstate_feed(m, (const uint8_t *)tb, tl);
    pg_gstate_free(m);
    return ok;
}

/* Walk a random sentence's tokens; at each step the mask allows the next
 * token, sampled allowed tokens extend a valid prefix, sampled banned ones
 * do not, and the stop token is allowed exactly when complete. */
static void check_masks(vocab *v, pagoda_grammar_kind kind, const char *spec) {
    pg_gram *g;
    if (pg_grammar_build(kind, spec, strlen(spec), &g) != PAGODA_OK)
        fail_msg("%s", pg_last_error());
    pg_tgram *t;
    assert_int_equal(pg_tgram_create(g, v->trie, &t), PAGODA_OK);
    int32_t eos = pg_tokenizer_eos(v->tok);
    uint64_t *bits = calloc((size_t)(v->n + 63) / 64, 8);
    for (int round = 0; round < 6; round++) {
        uint8_t doc[REF_MAX];
        int n = random_sentence(g, doc, 300, 40);
        bool whole;
        {
            pg_gstate *b;
            assert_int_equal(pg_gstate_create(g, &b), PAGODA_OK);
            whole = pg_gstate_feed(b, doc, (size_t)n) && pg_gstate_accepting(b);
            pg_gstate_free(b);
        }
        /* tokens of "x" + doc without those of "x": SentencePiece's dummy
         * space prefix stays on the x */
        int32_t ids[2048], xid[8];
        size_t nid, nx;
        char buf[REF_MAX + 2];
        buf[0] = 'x';
        memcpy(buf + 1, doc, (size_t)n);
        assert_int_equal(pg_tokenizer_encode(v->tok, "x", 1, false, xid, 8, &nx), PAGODA_OK);
        assert_int_equal(pg_tokenizer_encode(v->tok, buf, (size_t)n + 1, false, ids, 2048, &nid),
                         PAGODA_OK);
        if (nid < nx || memcmp(ids, xid, nx * sizeof *ids) != 0)
            continue; /* x merged with the doc */
        memmove(ids, ids + nx, (nid - nx) * sizeof *ids);
        nid -= nx;
        pg_tmatch *m;
        assert_int_equal(pg_tmatch_create(t, &eos, 1, &m), PAGODA_OK);
        size_t at = 0; /* bytes consumed */
        for (size_t k = 0; k <= nid; k++) {
            int32_t allowed = pg_tmatch_fill_mask(m, bits);
            assert_true(allowed > 0);
            int32_t want = k < nid ? ids[k] : whole ? eos : -1;
            if (want >= 0 && !(bits[want >> 6] >> (want & 63) & 1))
                fail_msg("step %zu: token %d of a valid output banned", k, want);
            if (k % 5 == 0) { /* apply == the bits (and padding ids past the vocab banned) */
                float *lg = malloc((size_t)(v->n + 70) * sizeof *lg);
                for (int32_t i = 0; i < v->n + 70; i++)
                    lg[i] = (float)(i % 13);
                assert_int_equal(pg_tmatch_apply(m, lg, v->n + 70), allowed);
                for (int32_t i = 0; i < v->n + 70; i++) {
                    bool on = i < v->n && (bits[i >> 6] >> (i & 63) & 1);
                    if (on != (lg[i] == (float)(i % 13))) fail_msg("apply: token %d", i);
                    if (!on) assert_true(isinf(lg[i]) && lg[i] < 0);
                }
                free(lg);
            }
            bool complete = pg_tmatch_complete(m);
            assert_int_equal((int)(bits[eos >> 6] >> (eos & 63) & 1), (int)complete);
            for (int s = 0; s < 150; s++) {
                int32_t id = (int32_t)rnd((uint32_t)v->n);
                if (id == eos || pg_tokenizer_is_special(v->tok, id)) continue;
                size_t tl;
                const char *tb = pg_tokenizer_token_bytes(v->tok, id, &tl);
                bool on = bits[id >> 6] >> (id & 63) & 1;
                if (on != extends(g, doc, at, tb, tl))
                    fail_msg("step %zu: token %d ('%.*s') mask %d, reference %d", k, id, (int)tl,
                             tb, on, !on);
            }
            if (k == nid) break;
            size_t tl;
            pg_tokenizer_token_bytes(v->tok, ids[k], &tl);
            assert_true(pg_tmatch_accept(m, ids[k]));
            at += tl;
        }
        assert_int_equal(pg_tmatch_complete(m), whole);
        assert_int_equal(pg_tmatch_accept(m, eos), whole);
        pg_tmatch_free(m);
    }
    free(bits);
    pg_tgram_release(t);
}

static void test_masks_llama3(void **state) {
    (void)state;
    vocab v;
    if (!load_vocab("tokenizers/llama3", &v)) fail_msg("cannot load tokenizers/llama3 (PAGODA_ASSETS)");
    assert_true(v.n >= 128000);
    for (size_t i = 0; i < sizeof SCHEMAS / sizeof *SCHEMAS; i++)
        check_masks(&v, PAGODA_GRAMMAR_JSON_SCHEMA, SCHEMAS[i]);
    check_masks(&v, PAGODA_GRAMMAR_JSON_OBJECT, "");
    check_masks(&v, PAGODA_GRAMMAR_REGEX, "[0-9]{3}-[a-zé]{2,5}( ok)?");
    check_masks(&v, PAGODA_GRAMMAR_CHOICE, "[\"yes\",\"no\",\"not sure\"]");
    check_masks(&v, PAGODA_GRAMMAR_EBNF, EBNF[0]);
    free_vocab(&v);
}

static void test_masks_sentencepiece(void **state) {
    (void)state;
    vocab v;
    if (!load_vocab("llm/stories260K-hf", &v)) fail_msg("cannot load llm/stories260K-hf (PAGODA_ASSETS)");
    check_masks(&v, PAGODA_GRAMMAR_JSON_SCHEMA, SCHEMAS[0]);
    check_masks(&v, PAGODA_GRAMMAR_JSON_OBJECT, "");
    check_masks(&v, PAGODA_GRAMMAR_EBNF, EBNF[1]);
    free_vocab(&v);
}

/* ------------------------------------------------------------------ engine */

/* Constrained greedy and sampled requests: outputs valid; a request's
 * tokens are the same alone and among others (batch invariance). */
static void run_engine(pagoda_engine *e, pagoda_grammar *g, int n_req, int first, char **texts) {
    uint64_t ids[16];
    for (int i = 0; i < n_req; i++) {
        pagoda_request r;
        pagoda_request_defaults(e, &r);
        r.prompt = (first + i) % 2 ? "Once upon a time" : "The cat";
        r.sampling.max_tokens = 200;
        r.sampling.temperature = 1.0f;
        r.sampling.seed = 100 + first + i;
        r.grammar = g;
        assert_int_equal(pagoda_engine_add_request(e, &r, &ids[i], NULL), PAGODA_OK);
        texts[i] = calloc(1, 1);
    }
    size_t lens[16] = {0};
    while (pagoda_engine_has_unfinished(e)) {
        size_t n;
        assert_int_equal(pagoda_engine_step(e, &n), PAGODA_OK);
        const pagoda_output *out = pagoda_engine_outputs(e, &n);
        for (size_t k = 0; k < n; k++) {
            int i = 0;
            while (ids[i] != out[k].id)
                i++;
            assert_int_not_equal(out[k].finish_reason, PAGODA_FINISH_ERROR);
            texts[i] = realloc(texts[i], lens[i] + out[k].text_delta_len + 1);
            memcpy(texts[i] + lens[i], out[k].text_delta, out[k].text_delta_len);
            lens[i] += out[k].text_delta_len;
            texts[i][lens[i]] = 0;
        }
    }
}

static void test_engine_constrained(void **state) {
    (void)state;
    pagoda_engine_options opt;
    pagoda_engine_options_default(&opt);
    opt.num_threads = 2;
    pagoda_engine *e;
    if (pagoda_engine_create(pg_test_asset("llm/stories260K-hf"), &opt, &e) != PAGODA_OK) fail_msg("%s", pagoda_last_error());
    const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\","
                         "\"minimum\":0,\"maximum\":99},"
                         "\"b\":{\"enum\":[\"x\",\"y\"]},\"c\":{\"type\":\"string\",\"maxLength\":"
                         "5}},\"required\":[\"a\",\"b\",\"c\"]}";
    pagoda_grammar *g;
    assert_int_equal(pagoda_grammar_compile(e, PAGODA_GRAMMAR_JSON_SCHEMA, schema, 0, &g),
                     PAGODA_OK);
    pagoda_grammar *g2;
    assert_int_equal(pagoda_grammar_compile(e, PAGODA_GRAMMAR_JSON_SCHEMA, schema, 0, &g2),
                     PAGODA_OK);
    assert_ptr_equal(g, g2); /* cached: the token caches are shared */
    pagoda_grammar_free(g2);
    assert_int_equal(pagoda_grammar_compile(e, PAGODA_GRAMMAR_JSON_SCHEMA, "{\"not\":{}}", 0, &g2),
                     PAGODA_ERR_UNSUPPORTED);
    { /* a grammar of another engine (vocabulary) is refused */
        pagoda_engine *e2;
        assert_int_equal(pagoda_engine_create(pg_test_asset("llm/stories260K-hf"), &opt, &e2),
                         PAGODA_OK);
        pagoda_grammar *other;
        assert_int_equal(pagoda_grammar_compile(e2, PAGODA_GRAMMAR_JSON_OBJECT, NULL, 0, &other),
                         PAGODA_OK);
        pagoda_request r;
        pagoda_request_defaults(e, &r);
        r.prompt = "x";
        r.grammar = other;
        uint64_t id;
        assert_int_equal(pagoda_engine_add_request(e, &r, &id, NULL), PAGODA_ERR_INVALID_ARG);
        assert_non_null(strstr(pagoda_last_error(), "another engine"));
        pagoda_grammar_free(other);
        pagoda_engine_free(e2);
    }
    char *alone[16], *batch[16];
    cJSON *sc = cJSON_Parse(schema);
    g_root = sc;
    for (int i = 0; i < 8; i++) {
        run_engine(e, g, 1, i, &alone[i]);
    }
    run_engine(e, g, 8, 0, batch);
    for (int i = 0; i < 8; i++) {
        assert_string_equal(alone[i], batch[i]);
        cJSON *v = cJSON_Parse(batch[i]);
        if (!v || !valid(v, sc)) fail_msg("not valid: %s", batch[i]);
        cJSON_Delete(v);
        free(alone[i]);
        free(batch[i]);
    }
    cJSON_Delete(sc);
    pagoda_grammar_free(g);
    pagoda_engine_free(e);
}

/* ---- grammar_after_reasoning: the phases seen by a logits processor */

/* A logits processor (called after the grammar's mask) that records, per
 * output position, how many logits are finite and whether the reasoning
 * tokens are, and forces the scripted token at that position (-1: none). */
typedef struct phase_probe {
    int32_t think, end; /* <think>, </think> */
    int32_t script[8];  /* forced tokens at output positions 0..7 */
    int32_t finite[64]; /* per output position (the first 64) */
    bool think_ok[64], end_ok[64];
    int32_t n; /* positions seen */
} phase_probe;

static void phase_fn(void *ctx, const int32_t *ids, size_t n_tokens, size_t n_prompt,
                     bool is_prompt, float *logits, int32_t n_vocab) {
    (void)ids;
    phase_probe *p = ctx;
    if (is_prompt) return;
    size_t pos = n_tokens - n_prompt;
    if (pos < 64) {
        int32_t f = 0;
        for (int32_t i = 0; i < n_vocab; i++)
            f += isfinite(logits[i]) != 0;
        p->finite[pos] = f;
        p->think_ok[pos] = isfinite(logits[p->think]);
        p->end_ok[pos] = isfinite(logits[p->end]);
        if ((int32_t)pos + 1 > p->n) p->n = (int32_t)pos + 1;
    }
    if (pos < 8 && p->script[pos] >= 0) {
        int32_t t = p->script[pos];
        if (!isfinite(logits[t])) fail_msg("scripted token %d is masked at position %zu", t, pos);
        for (int32_t i = 0; i < n_vocab; i++)
            if (i != t) logits[i] = -INFINITY;
    }
}

static int32_t one_token(pagoda_engine *e, const char *text) {
    int32_t *ids;
    size_t n;
    assert_int_equal(
        pagoda_tokenize_flags(e, text, strlen(text), PAGODA_TOKENIZE_PARSE_SPECIAL, &ids, &n),
        PAGODA_OK);
    if (n != 1) fail_msg("\"%s\" is %zu tokens, want 1", text, n);
    int32_t t = ids[0];
    pagoda_free(ids);
    return t;
}

/* Run requests r[0..n) together (greedy) and return their texts. */
static void run_requests(pagoda_engine *e, pagoda_request *r, int n, char **texts) {
    uint64_t ids[8];
    size_t lens[8] = {0};
    for (int i = 0; i < n; i++) {
        assert_int_equal(pagoda_engine_add_request(e, &r[i], &ids[i], NULL), PAGODA_OK);
        texts[i] = calloc(1, 1);
    }
    while (pagoda_engine_has_unfinished(e)) {
        size_t k;
        assert_int_equal(pagoda_engine_step(e, &k), PAGODA_OK);
        const pagoda_output *out = pagoda_engine_outputs(e, &k);
        for (size_t o = 0; o < k; o++) {
            int i = 0;
            while (ids[i] != out[o].id)
                i++;
            if (out[o].finish_reason == PAGODA_FINISH_ERROR) fail_msg("%s", out[o].error);
            if (out[o].finish_reason == PAGODA_FINISH_LENGTH)
                fail_msg("request %d hit max_tokens: %s", i, texts[i]);
            texts[i] = realloc(texts[i], lens[i] + out[o].text_delta_len + 1);
            memcpy(texts[i] + lens[i], out[o].text_delta, out[o].text_delta_len);
            lens[i] += out[o].text_delta_len;
            texts[i][lens[i]] = 0;
        }
    }
}

/* text = expect_prefix + a JSON object {"n": integer} (the grammar's output). */
static void check_after(const char *text, const char *expect_prefix) {
    size_t n = strlen(expect_prefix);
    if (strncmp(text, expect_prefix, n))
        fail_msg("\"%s\" does not start with \"%s\"", text, expect_prefix);
    cJSON *v = cJSON_Parse(text + n);
    if (!v || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(v, "n")))
        fail_msg("not the schema's JSON after \"%s\": \"%s\"", expect_prefix, text + n);
    cJSON_Delete(v);
}

static void test_engine_after_reasoning(void **state) {
    (void)state;
    pagoda_engine_options opt;
    pagoda_engine_options_default(&opt);
    opt.num_threads = 2;
    opt.kv_cache_memory = 16u << 20;
    opt.max_model_len = 512;
    pagoda_engine *e;
    /* a random-weight Qwen3 whose tokenizer has <think> / </think> */
    if (pagoda_engine_create(pg_test_asset("oracles/qwen3-dense-tiny/hf"), &opt, &e) != PAGODA_OK)
        fail_msg("%s", pagoda_last_error());
    const int32_t V = pagoda_engine_vocab_size(e);
    const int32_t think = one_token(e, "<think>"), end = one_token(e, "</think>");
    const int32_t tx = one_token(e, "x"), ty = one_token(e, "y"), tbrace = one_token(e, "{");
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                         "\"required\":[\"n\"]}";
    pagoda_grammar *g;
    assert_int_equal(pagoda_grammar_compile(e, PAGODA_GRAMMAR_JSON_SCHEMA, schema, 0, &g),
                     PAGODA_OK);
    assert_false(pagoda_grammar_allows_prefix(g, "<think>", 0));
    assert_true(pagoda_grammar_allows_prefix(g, "{\"n\": 1", 0));
    pagoda_grammar *rg;
    assert_int_equal(
        pagoda_grammar_compile(e, PAGODA_GRAMMAR_REGEX, "<think>[a-z]+</think>[0-9]", 0, &rg),
        PAGODA_OK);
    assert_true(pagoda_grammar_allows_prefix(rg, "<think>", 0));
    assert_false(pagoda_grammar_allows_prefix(rg, "</think>", 0));
    pagoda_grammar_free(rg);

    enum { PLAIN, OPENS, NO_OPEN, OPEN, N };
    phase_probe pr[N];
    pagoda_request r[N];
    for (int i = 0; i < N; i++) {
        memset(&pr[i], 0, sizeof pr[i]);
        pr[i].think = think;
        pr[i].end = end;
        for (int k = 0; k < 8; k++)
            pr[i].script[k] = -1;
        pagoda_request_defaults(e, &r[i]);
        r[i].prompt = "Give me a number.";
        r[i].sampling.temperature = 0.0f;
        r[i].sampling.max_tokens = 256;
        r[i].grammar = g;
        r[i].logits_fn = phase_fn;
        r[i].logits_ctx = &pr[i];
        r[i].grammar_after_reasoning = i != PLAIN;
        r[i].reasoning_open = i == OPEN;
        r[i].reasoning_start_id = think;
        r[i].reasoning_end_id = end;
    }
    /* the model opens the reasoning, writes "xy" (not JSON), closes it */
    memcpy(pr[OPENS].script, (int32_t[4]){think, tx, ty, end}, sizeof(int32_t[4]));
    /* the model starts the grammar's output at once: no reasoning after */
    pr[NO_OPEN].script[0] = tbrace;
    /* the prompt ended inside <think>: "<think>x" is reasoning text, then </think> */
    memcpy(pr[OPEN].script, (int32_t[3]){think, tx, end}, sizeof(int32_t[3]));

    char *alone[N], *batch[N];
    for (int i = 0; i < N; i++)
        run_requests(e, &r[i], 1, &alone[i]);
    phase_probe first[N];
    memcpy(first, pr, sizeof pr);
    run_requests(e, r, N, batch); /* the same together: batch-invariant */
    for (int i = 0; i < N; i++) {
        assert_string_equal(alone[i], batch[i]);
        assert_memory_equal(first[i].finite, pr[i].finite, sizeof pr[i].finite);
        free(batch[i]);
    }

    /* the grammar alone: its first mask (a JSON object starts with "{") */
    const int32_t m0 = pr[PLAIN].finite[0];
    assert_true(m0 > 0 && m0 < V);
    assert_false(pr[PLAIN].think_ok[0]);
    check_after(alone[PLAIN], "");

    /* may open: the grammar's first tokens and <think>; inside the
     * reasoning nothing is masked; after </think> the grammar's first mask */
    assert_int_equal(pr[OPENS].finite[0], m0 + 1);
    assert_true(pr[OPENS].think_ok[0]);
    assert_false(pr[OPENS].end_ok[0]);
    for (int k = 1; k <= 3; k++)
        assert_int_equal(pr[OPENS].finite[k], V);
    assert_int_equal(pr[OPENS].finite[4], m0);
    for (int k = 4; k < pr[OPENS].n && k < 64; k++) {
        assert_true(pr[OPENS].finite[k] < V);
        assert_false(pr[OPENS].think_ok[k]);
        assert_false(pr[OPENS].end_ok[k]);
    }
    check_after(alone[OPENS], "<think>xy</think>");

    /* may open, but the first token is the grammar's: constrained from then on */
    assert_int_equal(pr[NO_OPEN].finite[0], m0 + 1);
    for (int k = 1; k < pr[NO_OPEN].n && k < 64; k++) {
        assert_true(pr[NO_OPEN].finite[k] < V);
        assert_false(pr[NO_OPEN].think_ok[k]);
    }
    check_after(alone[NO_OPEN], "");

    /* reasoning_open: unconstrained from the first token (<think> is text
     * there) to </think>, the grammar from the token after it */
    for (int k = 0; k <= 2; k++)
        assert_int_equal(pr[OPEN].finite[k], V);
    assert_int_equal(pr[OPEN].finite[3], m0);
    check_after(alone[OPEN], "<think>x</think>");
    for (int i = 0; i < N; i++)
        free(alone[i]);

    /* errors: the reasoning ids must be in the vocabulary (the start id
     * only when the model may open the reasoning) */
    pagoda_request bad;
    pagoda_request_defaults(e, &bad);
    bad.prompt = "x";
    bad.grammar = g;
    bad.grammar_after_reasoning = true;
    bad.reasoning_start_id = think;
    uint64_t id;
    assert_int_equal(pagoda_engine_add_request(e, &bad, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "reasoning_end_id -1"));
    bad.reasoning_end_id = end;
    bad.reasoning_start_id = V;
    assert_int_equal(pagoda_engine_add_request(e, &bad, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "reasoning_start_id"));
    bad.reasoning_open = true; /* the start id is not used then */
    bad.sampling.max_tokens = 1;
    assert_int_equal(pagoda_engine_add_request(e, &bad, &id, NULL), PAGODA_OK);
    while (pagoda_engine_has_unfinished(e)) {
        size_t k;
        assert_int_equal(pagoda_engine_step(e, &k), PAGODA_OK);
    }
    pagoda_grammar_free(g);
    pagoda_engine_free(e);
}

/* reasoning_end_ids (harmony's "<|channel|>final<|message|>"): with the
 * output starting free (reasoning_open), the grammar applies after the
 * first occurrence of the whole sequence; its tokens alone, or a part of
 * it, change nothing. Here the sequence is "y" "</think>" on the Qwen3
 * tokenizer (the engine knows only ids). */
static void test_engine_after_sequence(void **state) {
    (void)state;
    pagoda_engine_options opt;
    pagoda_engine_options_default(&opt);
    opt.num_threads = 2;
    opt.kv_cache_memory = 16u << 20;
    opt.max_model_len = 512;
    pagoda_engine *e;
    if (pagoda_engine_create(pg_test_asset("oracles/qwen3-dense-tiny/hf"), &opt, &e) != PAGODA_OK)
        fail_msg("%s", pagoda_last_error());
    const int32_t V = pagoda_engine_vocab_size(e);
    const int32_t think = one_token(e, "<think>"), end = one_token(e, "</think>");
    const int32_t tx = one_token(e, "x"), ty = one_token(e, "y");
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                         "\"required\":[\"n\"]}";
    pagoda_grammar *g;
    assert_int_equal(pagoda_grammar_compile(e, PAGODA_GRAMMAR_JSON_SCHEMA, schema, 0, &g),
                     PAGODA_OK);
    const int32_t seq[2] = {ty, end};
    enum { PLAIN, SEQ, N };
    phase_probe pr[N];
    pagoda_request r[N];
    for (int i = 0; i < N; i++) {
        memset(&pr[i], 0, sizeof pr[i]);
        pr[i].think = think;
        pr[i].end = end;
        for (int k = 0; k < 8; k++)
            pr[i].script[k] = -1;
        pagoda_request_defaults(e, &r[i]);
        r[i].prompt = "Give me a number.";
        r[i].sampling.temperature = 0.0f;
        r[i].sampling.max_tokens = 256;
        r[i].grammar = g;
        r[i].logits_fn = phase_fn;
        r[i].logits_ctx = &pr[i];
    }
    r[SEQ].grammar_after_reasoning = true;
    r[SEQ].reasoning_open = true;
    r[SEQ].reasoning_start_id = -1;
    r[SEQ].reasoning_end_id = -1; /* unused with a sequence */
    r[SEQ].reasoning_end_ids = seq;
    r[SEQ].n_reasoning_end_ids = 2;
    /* "</think>" alone, "y" then "x": not the sequence; "y" "</think>" is */
    memcpy(pr[SEQ].script, (int32_t[6]){tx, end, ty, tx, ty, end}, sizeof(int32_t[6]));
    char *alone[N], *batch[N];
    for (int i = 0; i < N; i++)
        run_requests(e, &r[i], 1, &alone[i]);
    phase_probe first[N];
    memcpy(first, pr, sizeof pr);
    run_requests(e, r, N, batch); /* batch-invariant */
    for (int i = 0; i < N; i++) {
        assert_string_equal(alone[i], batch[i]);
        assert_memory_equal(first[i].finite, pr[i].finite, sizeof pr[i].finite);
        free(batch[i]);
    }
    const int32_t m0 = pr[PLAIN].finite[0];
    assert_true(m0 > 0 && m0 < V);
    check_after(alone[PLAIN], "");
    for (int k = 0; k < 6; k++)
        assert_int_equal(pr[SEQ].finite[k], V);
    assert_int_equal(pr[SEQ].finite[6], m0);
    for (int k = 6; k < pr[SEQ].n && k < 64; k++)
        assert_true(pr[SEQ].finite[k] < V);
    check_after(alone[SEQ], "x</think>yxy</think>");
    for (int i = 0; i < N; i++)
        free(alone[i]);

    /* errors: too long, outside the vocabulary, without reasoning_open */
    pagoda_request bad = r[SEQ];
    bad.logits_fn = NULL;
    bad.logits_ctx = NULL;
    const int32_t nine[9] = {tx, tx, tx, tx, tx, tx, tx, tx, tx};
    bad.reasoning_end_ids = nine;
    bad.n_reasoning_end_ids = 9;
    uint64_t id;
    assert_int_equal(pagoda_engine_add_request(e, &bad, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "reasoning_end_ids: 9 ids"));
    const int32_t out_of[2] = {ty, V};
    bad.reasoning_end_ids = out_of;
    bad.n_reasoning_end_ids = 2;
    assert_int_equal(pagoda_engine_add_request(e, &bad, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "reasoning_end_ids[1]"));
    bad.reasoning_end_ids = seq;
    bad.reasoning_open = false;
    bad.reasoning_start_id = think;
    assert_int_equal(pagoda_engine_add_request(e, &bad, &id, NULL), PAGODA_ERR_INVALID_ARG);
    assert_non_null(strstr(pagoda_last_error(), "only with reasoning_open"));
    pagoda_grammar_free(g);
    pagoda_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ebnf_vs_reference),
        cmocka_unit_test(test_regex_vs_reference),
        cmocka_unit_test(test_json_schema_vs_reference),
        cmocka_unit_test(test_json_schema_documents),
        cmocka_unit_test(test_regex_literal_brace),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_masks_llama3),
        cmocka_unit_test(test_masks_sentencepiece),
        cmocka_unit_test(test_engine_constrained),
        cmocka_unit_test(test_engine_after_reasoning),
        cmocka_unit_test(test_engine_after_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
