/* Command-line checks shared by the `pagoda` subcommands, so every command
 * reports the same usage errors the same way (one line on stderr, exit 2):
 *   pagoda generate: unknown option '--bogus' (see pagoda generate --help)
 *   pagoda generate: --max-tokens needs a value
 *   pagoda generate: bad value '12abc' for --max-tokens (want an integer in [0, 1073741824])
 * An option is known or unknown before its value is looked at, so a
 * misspelled option is never reported as "needs a value". */
#ifndef PAGODA_CLI_ARGS_H
#define PAGODA_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>

/* True when `a` looks like an option ("-x", "--x"); "-" alone (stdin) is not. */
bool pg_args_is_option(const char *a);

/* Print the usage error and return 2 (the exit code for usage errors). */
int pg_args_unknown(const char *cmd, const char *opt);
int pg_args_missing(const char *cmd, const char *opt);
int pg_args_unexpected(const char *cmd, const char *arg);
/* `want` describes valid values, e.g. "an integer in [1, 1024]"; may be NULL. */
int pg_args_bad_value(const char *cmd, const char *opt, const char *value, const char *want);

/* The value of option argv[*i] (advancing *i), or NULL after printing
 * "needs a value" when it is the last argument. */
const char *pg_args_value(const char *cmd, int argc, char **argv, int *i);

/* For a command's option loop once its flags are handled: option argv[*i]
 * must be one of the n names in `valued` (the options that take a value).
 * Returns its value (advancing *i), or NULL after printing "unknown option"
 * (not in `valued`) or "needs a value" (the last argument); the command then
 * exits 2. */
const char *pg_args_valued(const char *cmd, int argc, char **argv, int *i,
                           const char *const *valued, size_t n);

/* Whole-string decimal integer in [lo, hi]: no sign tricks, no trailing
 * junk ("12abc"), no empty string, no overflow. */
bool pg_args_long(const char *s, long long lo, long long hi, long long *out);
/* Whole-string finite decimal number (no "nan", no "inf"). */
bool pg_args_double(const char *s, double *out);

/* An output file given on the command line (--output-json FILE) must be
 * creatable before minutes of work: opens `path` for writing without
 * truncating it (an existing file is left as it was; one created here is
 * removed again). Returns 0, or prints "<cmd>: cannot write <path>:
 * <strerror>" and returns 1 (a runtime error, not a usage error). */
int pg_args_check_writable(const char *cmd, const char *path);

#endif
