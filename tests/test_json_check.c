/* The strict RFC 8259 validator of request bodies (src/server/json_check.h):
 * y_ texts (must pass) and n_ texts (must fail, at the right byte, with the
 * right reason), written after the case families of JSONTestSuite; the
 * member lookup and the exact int64 parse used for seeds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_check.h"
#include "testutil.h"

typedef struct jcase {
    const char *text;
    size_t len; /* 0 = strlen(text) */
} jcase;

/* A literal with embedded NUL bytes keeps its full size. */
#define BYTES(s)                                                                                   \
    { s, sizeof(s) - 1 }

static const jcase YES[] = {
    {"{}", 0},
    {"[]", 0},
    {" \t\r\n{ \"a\" : [ 1 , 2 ] } \n", 0},
    {"0", 0},
    {"-0", 0},
    {"-0.0e+0", 0},
    {"123", 0},
    {"1.5", 0},
    {"1E10", 0},
    {"1e-7", 0},
    {"-12.34E+56", 0},
    {"true", 0},
    {"false", 0},
    {"null", 0},
    {"\"\"", 0},
    {"\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"", 0},
    {"\"\\u0041\\u00e9\\u20AC\"", 0},
    {"\"\\ud83d\\ude00\"", 0},                            /* a surrogate pair (U+1F600) */
    {"\"\\uDBFF\\uDFFF\"", 0},                            /* U+10FFFF */
    {"\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"", 0}, /* raw 2/3/4-byte UTF-8 */
    {"\"\xef\xbf\xbf\"", 0},     /* U+FFFF is a noncharacter, still valid */
    {"\"\xf4\x8f\xbf\xbf\"", 0}, /* U+10FFFF raw */
    {"\"\x7f\"", 0},             /* DEL is not a control character in JSON */
    {"\"\\u0000\"", 0},          /* valid JSON; reported as has_nul */
    {"[[[[[[[[[[1]]]]]]]]]]", 0},
    {"{\"a\":{\"b\":{\"c\":[true,false,null,{}]}}}", 0},
    {"{\"a\":1,\"a\":2}", 0}, /* duplicate names are allowed by the grammar */
    {"[1,\"x\",{\"y\":[]},-2.5e3]", 0},
};

typedef struct ncase {
    jcase t;
    size_t offset;      /* expected byte offset of the problem */
    const char *needle; /* expected in the message */
} ncase;

static const ncase NO[] = {
    {{"", 0}, 0, "empty"},
    {{"   ", 0}, 3, "empty"},
    {{"{\"prompt\": \"a\"", 0}, 0, "unterminated object"},
    {{"[1, 2", 0}, 0, "unterminated array"},
    {{"[1,]", 0}, 3, "unexpected character ']'"},
    {{"{\"a\":1,}", 0}, 7, "member name"},
    {{"{a:1}", 0}, 1, "member name"},
    {{"{'a':1}", 0}, 1, "member name"},
    {{"{\"a\" 1}", 0}, 5, "':'"},
    {{"[1 2]", 0}, 3, "expected ','"},
    {{"{} x", 0}, 3, "after the JSON value"},
    {{"{}{}", 0}, 2, "after the JSON value"},
    {{"[1]]", 0}, 3, "after the JSON value"},
    {{"01", 0}, 0, "leading zero"},
    {{"-01", 0}, 0, "leading zero"},
    {{"1.", 0}, 0, "digits after '.'"},
    {{"1.e3", 0}, 0, "digits after '.'"},
    {{".5", 0}, 0, "unexpected character '.'"},
    {{"+1", 0}, 0, "unexpected character '+'"},
    {{"-", 0}, 0, "digit after '-'"},
    {{"1e", 0}, 0, "exponent"},
    {{"1e+", 0}, 0, "exponent"},
    {{"0x10", 0}, 1, "after the JSON value"},
    {{"NaN", 0}, 0, "unexpected character 'N'"},
    {{"[Infinity]", 0}, 1, "unexpected character 'I'"},
    {{"[-Infinity]", 0}, 1, "digit after '-'"},
    {{"tru", 0}, 0, "expected true"},
    {{"nul", 0}, 0, "expected null"},
    {{"True", 0}, 0, "unexpected character 'T'"},
    {{"\"abc", 0}, 0, "unterminated string"},
    {{"\"a\\", 0}, 0, "unterminated string"},
    {{"\"a\tb\"", 0}, 2, "control character 0x09"},
    {{"\"a\nb\"", 0}, 2, "control character 0x0a"},
    {BYTES("\"a\0b\""), 2, "control character 0x00"},
    {{"\"\\x41\"", 0}, 1, "invalid escape \\x"},
    {{"\"\\'\"", 0}, 1, "invalid escape \\'"},
    {{"\"\\U0041\"", 0}, 1, "invalid escape \\U"},
    {{"\"Once\\uZZZZ upon\"", 0}, 5, "4 hex digits"},
    {{"\"\\u12\"", 0}, 1, "4 hex digits"},
    {{"\"\\ud800\"", 0}, 1, "lone high surrogate"},
    {{"\"\\ud800x\"", 0}, 1, "lone high surrogate"},
    {{"\"\\ud800\\u0041\"", 0}, 1, "lone high surrogate"},
    {{"\"\\ud800\\ud800\"", 0}, 1, "lone high surrogate"},
    {{"\"\\udc00\"", 0}, 1, "lone low surrogate"},
    {{"\"\\ude00\\ud83d\"", 0}, 1, "lone low surrogate"},
    {{"\"\xff\"", 0}, 1, "UTF-8 byte 0xff"},
    {{"\"\x80\"", 0}, 1, "UTF-8 byte 0x80"}, /* lone continuation byte */
    {{"\"\xc3\"", 0}, 1, "UTF-8 byte 0xc3"}, /* truncated 2-byte sequence */
    {{"\"\xc3(\"", 0}, 1, "UTF-8 byte 0xc3"},
    {{"\"\xc0\xaf\"", 0}, 1, "UTF-8 byte 0xc0"},         /* overlong '/' */
    {{"\"\xc1\xbf\"", 0}, 1, "UTF-8 byte 0xc1"},         /* overlong */
    {{"\"\xe0\x80\xaf\"", 0}, 1, "UTF-8 byte 0xe0"},     /* overlong 3-byte */
    {{"\"\xf0\x80\x80\xaf\"", 0}, 1, "UTF-8 byte 0xf0"}, /* overlong 4-byte */
    {{"\"\xed\xa0\x80\"", 0}, 1, "UTF-8 byte 0xed"},     /* encoded surrogate U+D800 */
    {{"\"\xf4\x90\x80\x80\"", 0}, 1, "UTF-8 byte 0xf4"}, /* U+110000 */
    {{"\"\xf5\x80\x80\x80\"", 0}, 1, "UTF-8 byte 0xf5"},
    {{"\"\xe2\x82\"", 0}, 1, "UTF-8 byte 0xe2"},        /* truncated by the quote */
    {{"\xef\xbb\xbf{}", 0}, 0, "unexpected byte 0xef"}, /* a BOM */
    {{"\xc3\xa9", 0}, 0, "unexpected byte 0xc3"},
    {BYTES("{}\0"), 2, "after the JSON value"},
    {{"[\"a\"\x0b]", 0}, 4, "expected ','"}, /* vertical tab is not whitespace */
    {{"/* c */ {}", 0}, 0, "unexpected character '/'"},
};

static void test_valid_texts(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof YES / sizeof YES[0]; i++) {
        const jcase *c = &YES[i];
        size_t len = c->len ? c->len : strlen(c->text);
        pg_json_check_result r;
        if (pg_json_check(c->text, len, 0, &r) != PAGODA_OK)
            fail_msg("y_%zu rejected: %s (%s at %zu)", i, c->text, r.message, r.offset);
    }
}

static void test_invalid_texts(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof NO / sizeof NO[0]; i++) {
        const ncase *c = &NO[i];
        size_t len = c->t.len ? c->t.len : strlen(c->t.text);
        pg_json_check_result r;
        if (pg_json_check(c->t.text, len, 0, &r) != PAGODA_ERR_FORMAT)
            fail_msg("n_%zu accepted: %s", i, c->t.text);
        if (!strstr(r.message, c->needle))
            fail_msg("n_%zu '%s': message '%s' lacks '%s'", i, c->t.text, r.message, c->needle);
        if (r.offset != c->offset)
            fail_msg("n_%zu '%s': offset %zu, expected %zu", i, c->t.text, r.offset, c->offset);
    }
}

/* Only len bytes are read: a valid prefix followed by junk passes. */
static void test_length_bounds(void **state) {
    (void)state;
    pg_json_check_result r;
    const char *t = "[1,2]garbage";
    assert_int_equal(pg_json_check(t, 5, 0, &r), PAGODA_OK);
    assert_int_equal(pg_json_check(t, 4, 0, &r), PAGODA_ERR_FORMAT);
    assert_int_equal(pg_json_check(t, strlen(t), 0, &r), PAGODA_ERR_FORMAT);
    assert_int_equal(pg_json_check(NULL, 0, 0, &r), PAGODA_ERR_FORMAT);
    /* a surrogate escape cut off by len */
    const char *s = "\"\\ud83d\\ude00\"";
    assert_int_equal(pg_json_check(s, strlen(s), 0, &r), PAGODA_OK);
    char cut[16];
    memcpy(cut, s, 9);
    cut[9] = '"';
    assert_int_equal(pg_json_check(cut, 10, 0, &r), PAGODA_ERR_FORMAT);
}

static void test_depth_limit(void **state) {
    (void)state;
    char buf[2 * 200 + 1];
    for (int depth = 1; depth <= 200; depth += 199) {
        for (int i = 0; i < depth; i++)
            buf[i] = '[', buf[2 * depth - 1 - i] = ']';
        pg_json_check_result r;
        pagoda_status want = depth <= PG_JSON_MAX_DEPTH ? PAGODA_OK : PAGODA_ERR_FORMAT;
        assert_int_equal(pg_json_check(buf, (size_t)(2 * depth), 0, &r), want);
    }
    /* exactly at and one over an explicit limit */
    pg_json_check_result r;
    assert_int_equal(pg_json_check("[[{\"a\":[]}]]", 12, 4, &r), PAGODA_OK);
    assert_int_equal(pg_json_check("[[{\"a\":[[]]}]]", 14, 4, &r), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(r.message, "deeper than 4"));
    assert_int_equal(r.offset, 8);
    /* deep nesting far past the limit must not recurse without bound */
    size_t n = 1 << 20;
    char *deep = malloc(n);
    assert_non_null(deep);
    memset(deep, '[', n);
    assert_int_equal(pg_json_check(deep, n, 0, &r), PAGODA_ERR_FORMAT);
    assert_non_null(strstr(r.message, "deeper than"));
    free(deep);
}

/* An escaped NUL is valid JSON; the result names where it is. */
static void test_nul_reported(void **state) {
    (void)state;
    pg_json_check_result r;
    const char *t = "{\"model\": \"m\", \"prompt\": \"a\\u0000b\", \"stop\": [\"\\u0000\"]}";
    assert_int_equal(pg_json_check(t, strlen(t), 0, &r), PAGODA_OK);
    assert_true(r.has_nul);
    assert_string_equal(r.nul_member, "prompt");
    assert_int_equal(r.nul_offset, 25);
    const char *u = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\\u0000\"}]}";
    assert_int_equal(pg_json_check(u, strlen(u), 0, &r), PAGODA_OK);
    assert_true(r.has_nul);
    assert_string_equal(r.nul_member, "messages");
    const char *v = "{\"prompt\": \"\\u00000\"}"; /* U+0000 then '0' */
    assert_int_equal(pg_json_check(v, strlen(v), 0, &r), PAGODA_OK);
    assert_true(r.has_nul);
    const char *w = "{\"prompt\": \"\\u0100 \\\\u0000\"}"; /* an escaped backslash, no NUL */
    assert_int_equal(pg_json_check(w, strlen(w), 0, &r), PAGODA_OK);
    assert_false(r.has_nul);
}

static void test_member_raw(void **state) {
    (void)state;
    const char *t = "{ \"a\" : {\"seed\": 1}, \"s\\u0065ed\" : -9223372036854775808 ,"
                    " \"seed\": 5, \"x\": [1, {\"y\": \"}\"}] }";
    const char *v = NULL;
    size_t n = 0;
    assert_true(pg_json_member_raw(t, strlen(t), "seed", &v, &n));
    assert_int_equal(n, 20);
    assert_memory_equal(v, "-9223372036854775808", 20);
    assert_true(pg_json_member_raw(t, strlen(t), "x", &v, &n));
    assert_memory_equal(v, "[1, {\"y\": \"}\"}]", n);
    assert_true(pg_json_member_raw(t, strlen(t), "a", &v, &n));
    assert_memory_equal(v, "{\"seed\": 1}", n);
    assert_false(pg_json_member_raw(t, strlen(t), "y", &v, &n));
    assert_false(pg_json_member_raw("[1]", 3, "a", &v, &n));
    assert_false(pg_json_member_raw("{}", 2, "a", &v, &n));
}

static void test_parse_int64(void **state) {
    (void)state;
    static const struct {
        const char *raw;
        bool ok;
        long long want;
    } C[] = {
        {"0", true, 0},
        {"-0", true, 0},
        {"42", true, 42},
        {"-1", true, -1},
        {"9223372036854775807", true, INT64_MAX},
        {"-9223372036854775808", true, INT64_MIN},
        {"9223372036854775808", false, 0},
        {"-9223372036854775809", false, 0},
        {"18446744073709551615", false, 0},
        {"99999999999999999999999", false, 0},
        {"42.0", true, 42},
        {"1e3", true, 1000},
        {"-2E+2", true, -200},
        {"9007199254740992.0", true, 9007199254740992LL},
        {"9007199254740994.0", false, 0}, /* beyond 2^53: not exact as a double */
        {"1.5", false, 0},
        {"1e-1", false, 0},
        {"1e400", false, 0},
        {"", false, 0},
        {"-", false, 0},
        {"\"5\"", false, 0},
        {"true", false, 0},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        long long v = 12345;
        bool ok = pg_json_parse_int64(C[i].raw, strlen(C[i].raw), &v);
        if (ok != C[i].ok) fail_msg("'%s': %s", C[i].raw, ok ? "accepted" : "rejected");
        if (ok && v != C[i].want) fail_msg("'%s' -> %lld, expected %lld", C[i].raw, v, C[i].want);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_texts),   cmocka_unit_test(test_invalid_texts),
        cmocka_unit_test(test_length_bounds), cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_nul_reported),  cmocka_unit_test(test_member_raw),
        cmocka_unit_test(test_parse_int64),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
