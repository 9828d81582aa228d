#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char g_msg[1024];

const char *pg_status_name(pagoda_status s) {
    static const char *const names[PAGODA_ERR_COUNT_] = {
        [PAGODA_OK] = "ok",
        [PAGODA_ERR_NOMEM] = "out of memory",
        [PAGODA_ERR_IO] = "I/O error",
        [PAGODA_ERR_FORMAT] = "format error",
        [PAGODA_ERR_UNSUPPORTED] = "unsupported",
        [PAGODA_ERR_INVALID_ARG] = "invalid argument",
        [PAGODA_ERR_NOT_FOUND] = "not found",
        [PAGODA_ERR_LIMIT] = "limit exceeded",
        [PAGODA_ERR_INTERNAL] = "internal error",
    };
    if ((unsigned)s >= PAGODA_ERR_COUNT_) return "unknown error";
    return names[s];
}

pagoda_status pg_error(pagoda_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg, sizeof g_msg, fmt, ap);
    va_end(ap);
    for (char *p = g_msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    return s;
}

const char *pg_last_error(void) { return g_msg; }

void pg_clear_error(void) { g_msg[0] = 0; }
