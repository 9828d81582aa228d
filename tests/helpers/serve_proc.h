/* Start and stop a `pagoda serve` child for end-to-end tests. */
#ifndef PAGODA_TESTS_SERVE_PROC_H
#define PAGODA_TESTS_SERVE_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* Start `pagoda serve ARGS --port 0` (through PAGODA_EXEC_WRAPPER) with its
 * stdout in out_path and stderr in out_path.err, and wait (polling, up to
 * 300 s for a slow or emulated machine) for its PORT= line. Returns the
 * pid; *port gets the port it bound. Fails the test (the child killed) when
 * the server exits first or never prints the line. */
pid_t pg_test_serve_start(const char *args, const char *out_path, int *port);

/* SIGTERM the server and reap it (SIGKILL after 60 s); returns its exit
 * status as waitpid reports it. */
int pg_test_serve_stop(pid_t pid);

#endif
