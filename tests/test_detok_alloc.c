/* The incremental detokenizer (engine/detokenizer.h) allocates nothing per
 * token once its buffers have grown: the server runs one per choice on the
 * connection's thread (pagoda_detokenizer_*), the engine one per request,
 * and each token decodes its window twice. This executable is linked with
 * --wrap=malloc,calloc,realloc (cmake/tests.cmake), so every allocation of
 * the library is counted here. Over ~2000 tokens of a story after a warm-up,
 * only the geometric growth of the text and id buffers may allocate (10
 * times); before the decodes kept their buffers (pg_decode_scratch) it was
 * eight allocations a token (two decodes of four buffers: 28442). */
#include "testutil.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/detokenizer.h"
#include "tokenizer/tokenizer.h"

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);

static long g_allocs; /* allocations since the count was reset (one thread) */

void *__wrap_malloc(size_t n) {
    g_allocs++;
    return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size) {
    g_allocs++;
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n) {
    g_allocs++;
    return __real_realloc(p, n);
}

static void test_no_allocation_per_token(void **state) {
    (void)state;
    pg_tokenizer *tok;
    assert_int_equal(pg_tokenizer_load(pg_test_asset("llm/stories260K-hf"), &tok), PAGODA_OK);
    static const char STORY[] =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in "
        "the sunshine with her dog, Max. One day, they found a big red ball in the park. ";
    enum { REPEAT = 60, CAP = 8192, WARM = 100 };
    char *text = malloc(sizeof STORY * REPEAT);
    int32_t *ids = malloc(CAP * sizeof *ids);
    assert_true(text && ids);
    text[0] = 0;
    for (int r = 0; r < REPEAT; r++)
        strcat(text, STORY);
    size_t n;
    assert_int_equal(pg_tokenizer_encode(tok, text, strlen(text), true, ids, CAP, &n), PAGODA_OK);
    assert_true(n > 1000);
    /* a stop string that never matches: its hold-back check runs every token */
    const char *stop[] = {"THE END"};
    pg_detok d;
    assert_int_equal(pg_detok_init(&d, tok, ids, 8, true, stop, 1, false), PAGODA_OK);
    size_t out = 0;
    long during = 0;
    for (size_t i = 8; i < n; i++) {
        if (i == 8 + WARM) g_allocs = 0;
        assert_int_equal(pg_detok_add(&d, ids[i], true), PAGODA_OK);
        const char *delta;
        size_t len;
        assert_int_equal(pg_detok_take(&d, false, &delta, &len), PAGODA_OK);
        out += len;
    }
    during = g_allocs;
    const size_t counted = n - 8 - WARM;
    print_message("%zu tokens, %zu bytes of text: %ld allocations\n", counted, out, during);
    assert_true(out > (size_t)REPEAT * 100);
    assert_false(d.stopped);
    /* geometric growth: a handful of doublings of the text and the ids */
    assert_true(during <= 16);
    pg_detok_free(&d);
    pg_tokenizer_free(tok);
    free(ids);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_allocation_per_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
