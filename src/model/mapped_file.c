#include "model/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static pagoda_status open_regular(const char *path, int *fd_out, size_t *size_out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return pg_error(e == ENOENT ? PAGODA_ERR_NOT_FOUND : PAGODA_ERR_IO, "%s: cannot open: %s",
                        path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pg_error(PAGODA_ERR_IO, "%s: not a regular file", path);
    }
    *fd_out = fd;
    *size_out = (size_t)st.st_size;
    return PAGODA_OK;
}

pagoda_status pg_mapped_file_open(const char *path, pg_mapped_file *out) {
    memset(out, 0, sizeof *out);
    int fd = -1;
    size_t size = 0;
    pagoda_status s = open_regular(path, &fd, &size);
    if (s) return s;
    out->path = strdup(path);
    if (!out->path) {
        close(fd);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    if (size > 0) {
        void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(out->path);
            out->path = NULL;
            return pg_error(PAGODA_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
        out->data = p;
    }
    out->size = size;
    close(fd);
    return PAGODA_OK;
}

void pg_mapped_file_close(pg_mapped_file *f) {
    if (!f) return;
    if (f->data && f->size) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

pagoda_status pg_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len) {
    *out = NULL;
    int fd = -1;
    size_t size = 0;
    pagoda_status s = open_regular(path, &fd, &size);
    if (s) return s;
    if (size > max_bytes) {
        close(fd);
        return pg_error(PAGODA_ERR_LIMIT, "%s: file is %zu bytes, more than the %zu allowed", path,
                        size, max_bytes);
    }
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            close(fd);
            return pg_error(PAGODA_ERR_IO, "%s: read failed", path);
        }
        got += (size_t)r;
    }
    close(fd);
    buf[size] = 0;
    *out = buf;
    if (len) *len = size;
    return PAGODA_OK;
}

void pg_mapped_release(const void *p, size_t n) {
    long ps = sysconf(_SC_PAGESIZE);
    if (!p || ps <= 0) return;
    uintptr_t a = (uintptr_t)p, e = a + n, page = (uintptr_t)ps;
    uintptr_t a0 = (a + page - 1) / page * page, e0 = e / page * page;
    if (e0 > a0) (void)madvise((void *)a0, e0 - a0, MADV_DONTNEED);
}

bool pg_path_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool pg_path_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
