/* pagoda/status.h — the status codes of the public API (include/pagoda.h).
 *
 * Every fallible function of the library returns a pagoda_status; on
 * failure pagoda_last_error() (pagoda.h) gives a one-line message naming the
 * object and the problem. Installed beside pagoda.h as <pagoda/status.h>;
 * the library's own code gets it through src/base/status.h. */
#ifndef PAGODA_STATUS_H
#define PAGODA_STATUS_H

typedef enum pagoda_status {
    PAGODA_OK = 0,
    PAGODA_ERR_NOMEM,       /* allocation failed */
    PAGODA_ERR_IO,          /* open/read/mmap failed */
    PAGODA_ERR_FORMAT,      /* corrupt or malformed file / input */
    PAGODA_ERR_UNSUPPORTED, /* valid but not supported (dtype, architecture, ...) */
    PAGODA_ERR_INVALID_ARG, /* bad argument or option value */
    PAGODA_ERR_NOT_FOUND,   /* missing file, tensor, key, ... */
    PAGODA_ERR_LIMIT,       /* a configured limit exceeded (context, queue, ...) */
    PAGODA_ERR_INTERNAL,    /* a bug: invariant broken */
    PAGODA_ERR_COUNT_
} pagoda_status;

#endif
