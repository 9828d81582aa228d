/* pg_strbuf (src/base/strbuf.c): appends keep the text NUL-terminated,
 * appending a piece of the buffer to itself survives the reallocation,
 * consume drops a prefix, an empty buffer reads as "". */
#include <string.h>

#include "base/strbuf.h"
#include "testutil.h"

static void test_strbuf(void **state) {
    (void)state;
    pg_strbuf b = {0};
    assert_string_equal(pg_strbuf_cstr(&b), "");
    pg_strbuf_consume(&b, 0);
    assert_true(pg_strbuf_puts(&b, "hello"));
    assert_int_equal(b.len, 5);
    /* grow by appending itself many times: the source moves with the buffer */
    for (int i = 0; i < 6; i++)
        assert_true(pg_strbuf_add(&b, b.p, b.len));
    assert_int_equal(b.len, 5 * 64);
    for (size_t i = 0; i < b.len; i += 5)
        assert_memory_equal(b.p + i, "hello", 5);
    assert_int_equal(b.p[b.len], 0);
    pg_strbuf_consume(&b, b.len - 3);
    assert_string_equal(pg_strbuf_cstr(&b), "llo");
    assert_true(pg_strbuf_add(&b, "x\0y", 3)); /* bytes, NUL included */
    assert_int_equal(b.len, 6);
    assert_memory_equal(b.p, "llox\0y", 6);
    pg_strbuf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_strbuf)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
