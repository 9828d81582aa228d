/* A whole file mapped read-only (mmap, PROT_READ, MAP_PRIVATE). Model files
 * are never read with read(): parsers walk the mapping once and tensors
 * point straight into it. An empty file maps to data == NULL, size == 0. */
#ifndef PAGODA_MODEL_MAPPED_FILE_H
#define PAGODA_MODEL_MAPPED_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct pg_mapped_file {
    char *path;          /* malloc'ed copy of the path given */
    const uint8_t *data; /* the mapping (NULL when size == 0) */
    size_t size;         /* bytes */
} pg_mapped_file;

/* Map `path`. Errors: PAGODA_ERR_NOT_FOUND (no such file),
 * PAGODA_ERR_IO (not a regular file, open/mmap failed), PAGODA_ERR_NOMEM. */
pagoda_status pg_mapped_file_open(const char *path, pg_mapped_file *out);
/* Unmap and free; safe on a zeroed struct. */
void pg_mapped_file_close(pg_mapped_file *f);

/* Exit status of a process stopped by pg_mapped_fault_handler_install's
 * handler (EX_IOERR of sysexits.h). */
#define PG_MAPPED_FAULT_EXIT 74

/* A mapped model file that is truncated (or rewritten in place) after
 * pg_mapped_file_open makes the next read of a page past its new end raise
 * SIGBUS (mmap(2)): the process would die with a core dump and no word on
 * why. Installed once by the `pagoda` command (a library sets no signal
 * handlers of its own), this SIGBUS handler checks whether the faulting
 * address lies in a mapping opened by pg_mapped_file_open: if so it writes
 * "pagoda: fatal: model file PATH changed while in use: ..." with the
 * offset and the size mapped to stderr and exits with PG_MAPPED_FAULT_EXIT
 * (_exit: no core dump, no atexit handlers); any other SIGBUS gets the
 * default action. Replacing a file by rename (a download, `cp` to a new
 * file then `mv`) never faults: the mapping keeps the old inode. A file
 * rewritten in place with the same size is not detected (the pages change
 * under the mapping). At most 256 files are watched at once; mappings past
 * that are not (their SIGBUS keeps the default action). Returns 0, or -1 when
 * sigaction failed. */
int pg_mapped_fault_handler_install(void);

/* Drop the resident pages wholly inside [p, p + n) of a mapping
 * (madvise MADV_DONTNEED): for weights that were repacked and will not be
 * read again. Reading them later still works (the file is paged in again).
 * Only ranges inside a file mapping watched by pg_mapped_file_open are
 * released (never heap memory, which MADV_DONTNEED would zero). Best
 * effort: errors are ignored. */
void pg_mapped_release(const void *p, size_t n);

/* Read a small whole file (JSON configs) into a malloc'ed NUL-terminated
 * buffer; *len gets the size (may be NULL). Files above max_bytes are
 * refused with PAGODA_ERR_LIMIT. Errors as pg_mapped_file_open. */
pagoda_status pg_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len);

/* True when PATH exists (links followed) and is a directory / a regular file. */
bool pg_path_is_dir(const char *path);
bool pg_path_is_file(const char *path);

#endif
