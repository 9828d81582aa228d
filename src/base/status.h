/* pagoda_status: error codes and one-line error messages.
 *
 * Every fallible function returns a pagoda_status. On failure it records a
 * one-line, human-readable message (thread-local) naming the object and the
 * problem, e.g. "model.safetensors: tensor 'x' ends at byte 900 past end of file
 * (800 bytes)". Callers propagate the status; the outermost layer prints
 * pg_last_error(). Messages never contain newlines. */
#ifndef PAGODA_BASE_STATUS_H
#define PAGODA_BASE_STATUS_H

#include <stddef.h>

#include "pagoda/status.h" /* pagoda_status, PAGODA_OK, PAGODA_ERR_* (public) */

/* Short name of a status code, e.g. "format error". Never NULL. */
const char *pg_status_name(pagoda_status s);

/* Record a printf-style message for the calling thread and return `s`, so
 * code reads `return pg_error(PAGODA_ERR_FORMAT, "%s: ...", path);`.
 * Newlines in the message are replaced by spaces. Max 1023 bytes kept. */
pagoda_status pg_error(pagoda_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The calling thread's last message ("" if none). Valid until the next pg_error. */
const char *pg_last_error(void);

/* Forget the calling thread's last message. */
void pg_clear_error(void);

#endif
