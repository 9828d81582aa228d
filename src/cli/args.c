/* Command-line checks shared by the subcommands: see args.h. */
#include "cli/args.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool pg_args_is_option(const char *a) {
    return a[0] == '-' && a[1] != 0;
}

int pg_args_unknown(const char *cmd, const char *opt) {
    fprintf(stderr, "%s: unknown option '%s' (see %s --help)\n", cmd, opt, cmd);
    return 2;
}

int pg_args_missing(const char *cmd, const char *opt) {
    fprintf(stderr, "%s: %s needs a value (see %s --help)\n", cmd, opt, cmd);
    return 2;
}

int pg_args_unexpected(const char *cmd, const char *arg) {
    fprintf(stderr, "%s: unexpected argument '%s' (see %s --help)\n", cmd, arg, cmd);
    return 2;
}

int pg_args_bad_value(const char *cmd, const char *opt, const char *value, const char *want) {
    if (want)
        fprintf(stderr, "%s: bad value '%s' for %s (want %s)\n", cmd, value, opt, want);
    else
        fprintf(stderr, "%s: bad value '%s' for %s\n", cmd, value, opt);
    return 2;
}

const char *pg_args_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        pg_args_missing(cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

const char *pg_args_valued(const char *cmd, int argc, char **argv, int *i,
                           const char *const *valued, size_t n) {
    bool known = false;
    for (size_t k = 0; k < n && !known; k++)
        known = !strcmp(argv[*i], valued[k]);
    if (!known) {
        pg_args_unknown(cmd, argv[*i]);
        return NULL;
    }
    return pg_args_value(cmd, argc, argv, i);
}

bool pg_args_long(const char *s, long long lo, long long hi, long long *out) {
    if (!*s || isspace((unsigned char)*s)) return false;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool pg_args_double(const char *s, double *out) {
    if (!*s || isspace((unsigned char)*s)) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

int pg_args_check_writable(const char *cmd, const char *path) {
    bool created = true;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) {
        created = false;
        fd = open(path, O_WRONLY | O_CLOEXEC); /* no O_TRUNC: keep what is there */
    }
    if (fd < 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", cmd, path, strerror(errno));
        return 1;
    }
    close(fd);
    if (created) unlink(path);
    return 0;
}
