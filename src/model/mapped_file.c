#include "model/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- mappings watched by the SIGBUS handler (lock-free: the handler only
 * reads; a slot is published by storing its start last) */
#define WATCH_SLOTS 256
static struct {
    _Atomic(uintptr_t) start; /* 0 = free */
    _Atomic(size_t) size;
    _Atomic(const char *) path;
} g_watch[WATCH_SLOTS];

static void watch_add(const pg_mapped_file *f) {
    for (int i = 0; i < WATCH_SLOTS; i++) {
        uintptr_t zero = 0;
        if (atomic_load(&g_watch[i].start) != 0) continue;
        /* claim with a placeholder so two threads never share a slot */
        if (!atomic_compare_exchange_strong(&g_watch[i].start, &zero, UINTPTR_MAX)) continue;
        atomic_store(&g_watch[i].size, f->size);
        atomic_store(&g_watch[i].path, f->path);
        atomic_store(&g_watch[i].start, (uintptr_t)f->data);
        return;
    }
}

static void watch_remove(const pg_mapped_file *f) {
    for (int i = 0; i < WATCH_SLOTS; i++)
        if (atomic_load(&g_watch[i].start) == (uintptr_t)f->data) {
            atomic_store(&g_watch[i].start, 0);
            return;
        }
}

/* async-signal-safe output: write(2) of a string / an unsigned number */
static void put_str(const char *t) {
    size_t n = strlen(t);
    while (n) {
        ssize_t w = write(STDERR_FILENO, t, n);
        if (w <= 0) return;
        t += w;
        n -= (size_t)w;
    }
}

static void put_u64(uint64_t v) {
    char b[24];
    int i = (int)sizeof b;
    b[--i] = 0;
    do {
        b[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i > 0);
    put_str(b + i);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < WATCH_SLOTS; i++) {
        uintptr_t st = atomic_load(&g_watch[i].start);
        size_t sz = atomic_load(&g_watch[i].size);
        if (st == 0 || st == UINTPTR_MAX || a < st || a - st >= sz) continue;
        const char *path = atomic_load(&g_watch[i].path);
        put_str("pagoda: fatal: model file ");
        put_str(path ? path : "?");
        put_str(" changed while in use: byte ");
        put_u64(a - st);
        put_str(" of the ");
        put_u64(sz);
        put_str(" bytes mapped at load is gone (the file was truncated or rewritten in place); "
                "restart with an intact file, and replace model files by renaming a new copy "
                "over them, never in place\n");
        _exit(PG_MAPPED_FAULT_EXIT);
    }
    /* not ours: the default action (the fault repeats on return) */
    signal(sig, SIG_DFL);
}

int pg_mapped_fault_handler_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    return sigaction(SIGBUS, &sa, NULL) == 0 ? 0 : -1;
}

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
    if (size > 0) watch_add(out);
    return PAGODA_OK;
}

void pg_mapped_file_close(pg_mapped_file *f) {
    if (!f) return;
    if (f->data && f->size) {
        watch_remove(f);
        munmap((void *)f->data, f->size);
    }
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

/* True when [a, e) lies inside one watched file mapping. */
static bool in_mapping(uintptr_t a, uintptr_t e) {
    for (int i = 0; i < WATCH_SLOTS; i++) {
        uintptr_t st = atomic_load(&g_watch[i].start);
        size_t sz = atomic_load(&g_watch[i].size);
        if (st != 0 && st != UINTPTR_MAX && a >= st && e <= st + sz) return true;
    }
    return false;
}

void pg_mapped_release(const void *p, size_t n) {
    long ps = sysconf(_SC_PAGESIZE);
    if (!p || ps <= 0) return;
    uintptr_t a = (uintptr_t)p, e = a + n, page = (uintptr_t)ps;
    if (!in_mapping(a, e)) return; /* heap memory (derived tensors): MADV_DONTNEED would zero it */
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
