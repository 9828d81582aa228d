/* Helpers shared by the cmocka tests. */
#ifndef PAGODA_TESTS_TESTUTIL_H
#define PAGODA_TESTS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Absolute path of the shared assets folder (PAGODA_ASSETS, default
 * ../shared/assets relative to the source tree) joined with `rel`.
 * Returns a pointer to a static buffer (one per call site is not needed:
 * copy it if you need two at once). */
const char *pg_test_asset(const char *rel);

/* Command prefix for starting the built `pagoda` binary: "" natively, the
 * qemu command line in the aarch64 cross build (env PAGODA_EXEC_WRAPPER). */
const char *pg_test_exec_wrapper(void);

/* Path of the built `pagoda` binary: $PAGODA_BUILD_DIR/pagoda (./pagoda
 * when unset). Static buffer. */
const char *pg_test_pagoda_bin(void);

/* Run the shell command `cmd` (popen), capture its stdout into a malloc'ed,
 * NUL-terminated *out (append " 2>&1" to cmd for stderr too) and return its
 * exit code (-1 if it did not exit normally). */
int pg_test_run_command(const char *cmd, char **out);

/* A fresh temporary directory for the calling test (mkdtemp under $TMPDIR). */
const char *pg_test_tmpdir(void);

/* Read a whole file into a malloc'ed, NUL-terminated buffer; *len gets the
 * size. Fails the test if the file cannot be read. */
char *pg_test_read_file(const char *path, size_t *len);

/* mkdir -p `path`, failing the test if it cannot be made. */
void pg_test_mkdirs(const char *path);

/* Write `len` bytes to `path`, failing the test on error. */
void pg_test_write_file(const char *path, const void *data, size_t len);

/* POST `body` (JSON) to `path` on the HTTP server at 127.0.0.1:port as
 * HTTP/1.0 (no chunked encoding: the server closes the connection at the
 * end) and read the whole reply. Returns the status code; *out gets the
 * reply body (malloc'ed, NUL-terminated; an SSE stream as sent). Fails the
 * test when the connection fails or no complete reply came within 600 s (a
 * guard against a hung server, far above any reply's time; the reply is
 * read by polling in 100 ms slices). */
int pg_test_http_post(int port, const char *path, const char *body, char **out);

/* Deterministic xorshift64* stream shared by the kernel tests (one global
 * state, seeded at start): uniform u64, and floats in [-1, 1). */
uint64_t pg_test_rnd_u64(void);
float pg_test_rnd(void);

/* A thread pool of n unpinned threads with block time 0 (asserts it was
 * created); release with pg_pool_free. */
struct pg_pool *pg_test_pool(int n);

#endif
