#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *pg_test_asset(const char *rel) {
    static char buf[PATH_MAX];
    const char *root = getenv("PAGODA_ASSETS");
    if (!root || !*root) root = "../shared/assets";
    snprintf(buf, sizeof buf, "%s/%s", root, rel);
    return buf;
}

const char *pg_test_tmpdir(void) {
    static char buf[PATH_MAX];
    const char *t = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/pagoda-test-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(buf)) fail_msg("mkdtemp failed");
    return buf;
}

char *pg_test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) fail_msg("short read on %s", path);
    fclose(f);
    buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

void pg_test_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot create %s", path);
    if (fwrite(data, 1, len, f) != len) fail_msg("short write on %s", path);
    fclose(f);
}
