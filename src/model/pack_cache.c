/* The packed-weight cache (see pack_cache.h). */
#define _GNU_SOURCE /* mkostemp */
#include "model/pack_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/log.h"
#include "base/pool.h"
#include "kernels/dispatch.h"

#define PC_MAGIC "PGPACK1"
#define PC_HEADER 64
#define PC_ALIGN 4096
#define PC_ENTRY_WORDS (PG_GEMM_DESC_WORDS + 3)

static _Thread_local pg_pack_cache *t_current;
static _Thread_local pg_pack_cache_outcome t_outcome;

/* ---- a text buffer ---------------------------------------------------------------- */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

__attribute__((format(printf, 2, 3))) static void sb_add(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *g = realloc(b->s, cap);
        if (!g) {
            b->oom = true;
            return;
        }
        b->s = g;
        b->cap = cap;
    }
}

/* ---- location and key ----------------------------------------------------------------- */

bool pg_pack_cache_dir(char *buf, size_t cap) {
    const char *d = getenv("PAGODA_CACHE_DIR");
    int n;
    if (d && *d) {
        n = snprintf(buf, cap, "%s", d);
    } else if ((d = getenv("XDG_CACHE_HOME")) && *d) {
        n = snprintf(buf, cap, "%s/pagoda", d);
    } else if ((d = getenv("HOME")) && *d) {
        n = snprintf(buf, cap, "%s/.cache/pagoda", d);
    } else {
        return false;
    }
    return n > 0 && (size_t)n < cap;
}

static bool has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void key_stat(sbuf *b, const char *label, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        sb_add(b, "%s %s missing\n", label, path);
        return;
    }
    sb_add(b, "%s %s size %lld mtime %lld.%09ld\n", label, path, (long long)st.st_size,
           (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
}

/* The size and mtime of the source's path, or of the weight and config
 * files of a model directory (sorted by name). */
static void key_files(sbuf *b, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        key_stat(b, "file", path);
        return;
    }
    DIR *d = opendir(path);
    if (!d) {
        sb_add(b, "dir %s unreadable\n", path);
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!has_suffix(e->d_name, ".safetensors") && !has_suffix(e->d_name, ".gguf") &&
            !has_suffix(e->d_name, ".json"))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **g = realloc(names, cap * sizeof *g);
            if (!g) {
                b->oom = true;
                break;
            }
            names = g;
        }
        if (!(names[n] = strdup(e->d_name))) {
            b->oom = true;
            break;
        }
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        sbuf p = {0};
        sb_add(&p, "%s/%s", path, names[i]);
        if (p.oom) b->oom = true;
        else key_stat(b, "file", p.s);
        free(p.s);
        free(names[i]);
    }
    free(names);
}

static void key_fuk(sbuf *b, const char *what, const pg_gemm_ukernel *u) {
    sb_add(b, "uk %s %s mr %d nr %d kg %d ar %d\n", what, u->name ? u->name : "-", u->mr, u->nr,
           u->kg, u->ar);
}

static void key_quk(sbuf *b, const char *what, const pg_qgemm_ukernel *u) {
    sb_add(b, "uk %s %s mr %d nr %d kg %d ar %d vw %d a_u8 %d w_u8 %d bits %d hs %d\n", what,
           u->name ? u->name : "-", u->mr, u->nr, u->kg, u->ar, u->vw, u->a_u8, u->w_u8, u->bits,
           u->run_hs != NULL);
}

char *pg_pack_cache_key(const pg_model_source *src, const pg_model_options *o,
                        const pg_kernel_table *kt, int tp_rank, int tp_size) {
    if (!kt) kt = pg_kernels();
    sbuf b = {0};
    sb_add(&b, "pagoda packed-weight cache format %d code %d version %s\n", PG_PACK_CACHE_FORMAT,
           PG_PACK_CACHE_CODE_VERSION, PAGODA_VERSION);
    sb_add(&b, "source %s\n", pg_model_source_path(src));
    key_files(&b, pg_model_source_path(src));
    sb_add(&b, "tensors %zu xxh3 %016llx\n", pg_model_source_n_tensors(src),
           (unsigned long long)pg_model_source_tensor_hash(src));
    sb_add(&b, "isa %s\n", kt->isa);
    key_fuk(&b, "bf16", &kt->gemm_bf16);
    key_fuk(&b, "f32", &kt->gemm_f32);
    key_quk(&b, "w8", &kt->qgemm_w8);
    key_quk(&b, "w4", &kt->qgemm_w4);
    key_quk(&b, "mxfp4", &kt->mxfp4);
    key_quk(&b, "q4_k", &kt->q4_k);
    key_quk(&b, "q5_k", &kt->q5_k);
    key_quk(&b, "q6_k", &kt->q6_k);
    key_quk(&b, "q2_k", &kt->q2_k);
    key_quk(&b, "q3_k", &kt->q3_k);
    key_quk(&b, "iq4_xs", &kt->iq4_xs);
    key_quk(&b, "iq4_nl", &kt->iq4_nl);
    const char *lm = getenv("PAGODA_QUANT_LM_HEAD");
    sb_add(&b, "compute %d bits %d group %lld act_group %lld lm_head %s\n", (int)o->compute,
           o->quant_bits, (long long)o->quant_group, (long long)o->quant_act_group,
           lm && *lm ? lm : "-");
    sb_add(&b, "tp %d/%d\n", tp_rank, tp_size);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- the mapped file -------------------------------------------------------------------- */

typedef struct pc_map {
    atomic_int refs;
    void *base;
    size_t size;
} pc_map;

static void map_unref(void *ctx) {
    pc_map *m = ctx;
    if (atomic_fetch_sub(&m->refs, 1) == 1) {
        munmap(m->base, m->size);
        free(m);
    }
}

typedef struct pc_header {
    char magic[8];
    uint32_t format, key_len;
    uint64_t n, table_off, file_size, meta_hash, reserved, header_hash;
} pc_header;
_Static_assert(sizeof(pc_header) == PC_HEADER, "pack cache header is 64 bytes");

struct pg_pack_cache {
    char *key;
    char path[4096];
    pc_map *map;             /* the verified file, or NULL */
    const int64_t *table;    /* its n entries of PC_ENTRY_WORDS */
    size_t n, next;          /* entries, next to take */
    bool taking;             /* false after a mismatch */
    bool bad;                /* a file existed but was rejected */
    pg_packed_weight **recs; /* every weight of the load, in order */
    size_t n_recs, cap_recs;
    bool oom;
};

static size_t align_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

typedef struct verify_job {
    const uint8_t *base;
    const int64_t *table;
    atomic_int bad;
} verify_job;

static void verify_rows(void *ctx, size_t begin, size_t end, int tid) {
    (void)tid;
    verify_job *j = ctx;
    for (size_t i = begin; i < end; i++) {
        const int64_t *e = j->table + i * PC_ENTRY_WORDS;
        const uint64_t off = (uint64_t)e[PG_GEMM_DESC_WORDS], bytes = (uint64_t)e[PG_GEMM_DESC_WORDS + 1];
        if (XXH3_64bits(j->base + off, bytes) != (uint64_t)e[PG_GEMM_DESC_WORDS + 2])
            atomic_store(&j->bad, 1);
    }
}

/* Map and verify the file; NULL with *why set when it is unusable (why
 * NULL: there is none). */
static pc_map *open_file(const pg_pack_cache *c, const char **why, size_t *n_out,
                         const int64_t **table_out) {
    *why = NULL;
    int fd = open(c->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT && errno != ENOTDIR) *why = "cannot be opened";
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        *why = "is not a regular file";
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    if (size < PC_HEADER) {
        close(fd);
        *why = "is truncated";
        return NULL;
    }
    void *base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED) {
        *why = "cannot be mapped";
        return NULL;
    }
    /* best effort: huge pages where the file system has them (fewer TLB
     * misses when decode streams the weights), read-ahead for the check */
    (void)madvise(base, size, MADV_HUGEPAGE);
    (void)madvise(base, size, MADV_WILLNEED);
    const uint8_t *p = base;
    pc_header h;
    memcpy(&h, p, sizeof h);
    const size_t klen = strlen(c->key);
    const char *bad = NULL;
    if (memcmp(h.magic, PC_MAGIC, 8) != 0)
        bad = "is not a pagoda pack-cache file";
    else if (XXH3_64bits(&h, offsetof(pc_header, header_hash)) != h.header_hash)
        bad = "has a damaged header";
    else if (h.format != PG_PACK_CACHE_FORMAT)
        bad = "has another format version";
    else if (h.file_size != size)
        bad = "is truncated";
    else if (h.key_len != klen || PC_HEADER + klen > size || memcmp(p + PC_HEADER, c->key, klen))
        bad = "has another key";
    else if (h.table_off != align_up(PC_HEADER + klen, 8) || h.n > (1u << 24) ||
             h.table_off + h.n * PC_ENTRY_WORDS * 8 > size)
        bad = "has a damaged table";
    if (!bad) {
        XXH3_state_t *hs = XXH3_createState();
        if (!hs) {
            bad = "cannot be verified (out of memory)";
        } else {
            XXH3_64bits_reset(hs);
            XXH3_64bits_update(hs, p + PC_HEADER, klen);
            XXH3_64bits_update(hs, p + h.table_off, h.n * PC_ENTRY_WORDS * 8);
            if (XXH3_64bits_digest(hs) != h.meta_hash) bad = "has a damaged table";
            XXH3_freeState(hs);
        }
    }
    const int64_t *table = (const int64_t *)(p + h.table_off);
    for (size_t i = 0; !bad && i < h.n; i++) {
        const int64_t *e = table + i * PC_ENTRY_WORDS;
        const uint64_t off = (uint64_t)e[PG_GEMM_DESC_WORDS];
        const uint64_t bytes = (uint64_t)e[PG_GEMM_DESC_WORDS + 1];
        if (off % PC_ALIGN || off > size || bytes > size - off) bad = "has a damaged table";
    }
    if (!bad) {
        verify_job j = {p, table, 0};
        pg_pool *pool = pg_pool_default();
        if (pool && h.n > 1)
            pg_pool_parallel_for(pool, (size_t)h.n, 1, verify_rows, &j);
        else
            verify_rows(&j, 0, (size_t)h.n, 0);
        if (atomic_load(&j.bad)) bad = "has damaged weight data";
    }
    pc_map *m = bad ? NULL : malloc(sizeof *m);
    if (!m) {
        munmap(base, size);
        *why = bad ? bad : "cannot be used (out of memory)";
        return NULL;
    }
    atomic_init(&m->refs, 1);
    m->base = base;
    m->size = size;
    *n_out = (size_t)h.n;
    *table_out = table;
    return m;
}

/* ---- session ---------------------------------------------------------------------- */

static bool disabled_by_env(void) {
    const char *e = getenv("PAGODA_PACK_CACHE");
    return e && (!strcmp(e, "0") || !strcmp(e, "off") || !strcmp(e, "false") || !strcmp(e, "no"));
}

pg_pack_cache *pg_pack_cache_begin(const pg_model_source *src, const pg_model_options *o) {
    t_outcome = PG_PACK_CACHE_OFF;
    if (o->no_pack_cache || disabled_by_env()) return NULL;
    char dir[3072];
    if (!pg_pack_cache_dir(dir, sizeof dir)) {
        PG_WARN("pack cache: no cache directory (set PAGODA_CACHE_DIR or HOME): not used");
        return NULL;
    }
    pg_pack_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->key = pg_pack_cache_key(src, o, NULL, o->tp_size > 1 ? o->tp_rank : 0, o->tp_size > 1 ? o->tp_size : 1);
    if (!c->key) {
        free(c);
        return NULL;
    }
    snprintf(c->path, sizeof c->path, "%s/%016llx.pgpack", dir,
             (unsigned long long)XXH3_64bits(c->key, strlen(c->key)));
    const char *why;
    c->map = open_file(c, &why, &c->n, &c->table);
    c->taking = c->map != NULL;
    if (why) {
        c->bad = true;
        PG_WARN("pack cache: %s %s: packing again and rewriting it", c->path, why);
    } else if (c->map) {
        PG_DEBUG("pack cache: %s: %zu packed weights", c->path, c->n);
    }
    t_current = c;
    return c;
}

pg_pack_cache *pg_pack_cache_current(void) {
    return t_current;
}

pg_pack_cache_outcome pg_pack_cache_last_outcome(void) {
    return t_outcome;
}

static void stop_taking(pg_pack_cache *c, const char *why) {
    if (!c->taking) return;
    c->taking = false;
    c->bad = true;
    PG_WARN("pack cache: %s: %s at weight %zu: packing the rest and rewriting it", c->path, why,
            c->next);
}

bool pg_pack_cache_take(pg_pack_cache *c, int64_t n, int64_t k, bool swiglu,
                        pg_packed_weight **out) {
    *out = NULL;
    if (!c || !c->taking) return false;
    if (c->next >= c->n) {
        stop_taking(c, "more weights than the file holds");
        return false;
    }
    const int64_t *e = c->table + c->next * PC_ENTRY_WORDS;
    int64_t d[PG_GEMM_DESC_WORDS];
    memcpy(d, e, sizeof d);
    pg_packed_weight *w = NULL;
    atomic_fetch_add(&c->map->refs, 1); /* the weight's; dropped by pg_gemm_free */
    pagoda_status st = pg_gemm_adopt(d, (const uint8_t *)c->map->base + e[PG_GEMM_DESC_WORDS],
                                     (size_t)e[PG_GEMM_DESC_WORDS + 1], NULL, map_unref, c->map, &w);
    if (st != PAGODA_OK) {
        atomic_fetch_sub(&c->map->refs, 1); /* the session still holds one */
        pg_clear_error();
        stop_taking(c, "a weight does not fit this build's kernels");
        return false;
    }
    if (pg_gemm_n(w) != n || pg_gemm_k(w) != k || (pg_gemm_is_swiglu(w) != 0) != swiglu) {
        pg_gemm_free(w);
        stop_taking(c, "another weight shape");
        return false;
    }
    c->next++;
    *out = w;
    return true;
}

void pg_pack_cache_put(pg_pack_cache *c, pg_packed_weight *w) {
    if (!c || c->oom) return;
    if (c->n_recs == c->cap_recs) {
        size_t cap = c->cap_recs ? 2 * c->cap_recs : 256;
        pg_packed_weight **g = realloc(c->recs, cap * sizeof *g);
        if (!g) {
            c->oom = true;
            return;
        }
        c->recs = g;
        c->cap_recs = cap;
    }
    c->recs[c->n_recs++] = w;
}

static bool write_all(int fd, const void *p, size_t n) {
    const char *s = p;
    while (n) {
        ssize_t w = write(fd, s, n < (1u << 30) ? n : (1u << 30));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        s += w;
        n -= (size_t)w;
    }
    return true;
}

static bool pad_to(int fd, size_t *at, size_t to) {
    static const char zeros[PC_ALIGN];
    while (*at < to) {
        size_t n = to - *at < sizeof zeros ? to - *at : sizeof zeros;
        if (!write_all(fd, zeros, n)) return false;
        *at += n;
    }
    return true;
}

/* mkdir -p of the directory holding path. */
static void make_parents(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf) return;
    *slash = 0;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        (void)mkdir(buf, 0755);
        *p = '/';
    }
    (void)mkdir(buf, 0755);
}

/* Write the recorded weights to c->path through a temporary file. Returns
 * NULL or what failed. */
static const char *write_file(pg_pack_cache *c) {
    if (c->oom) return "out of memory";
    const size_t n = c->n_recs, klen = strlen(c->key);
    const size_t table_off = align_up(PC_HEADER + klen, 8);
    const size_t table_bytes = n * PC_ENTRY_WORDS * 8;
    int64_t *table = calloc(n ? n : 1, PC_ENTRY_WORDS * 8);
    if (!table) return "out of memory";
    size_t at = align_up(table_off + table_bytes, PC_ALIGN);
    for (size_t i = 0; i < n; i++) {
        int64_t *e = table + i * PC_ENTRY_WORDS;
        pg_gemm_describe(c->recs[i], e);
        if (e[0] < 0) { /* a driver format pg_gemm_describe does not know */
            free(table);
            return "a weight format the cache cannot store";
        }
        const size_t bytes = pg_gemm_packed_bytes(c->recs[i]);
        e[PG_GEMM_DESC_WORDS] = (int64_t)at;
        e[PG_GEMM_DESC_WORDS + 1] = (int64_t)bytes;
        e[PG_GEMM_DESC_WORDS + 2] = (int64_t)XXH3_64bits(pg_gemm_data(c->recs[i]), bytes);
        at = align_up(at + bytes, PC_ALIGN);
    }
    pc_header h = {.format = PG_PACK_CACHE_FORMAT,
                   .key_len = (uint32_t)klen,
                   .n = n,
                   .table_off = table_off,
                   .file_size = at};
    memcpy(h.magic, PC_MAGIC, 8);
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) {
        free(table);
        return "out of memory";
    }
    XXH3_64bits_reset(hs);
    XXH3_64bits_update(hs, c->key, klen);
    XXH3_64bits_update(hs, table, table_bytes);
    h.meta_hash = XXH3_64bits_digest(hs);
    XXH3_freeState(hs);
    h.header_hash = XXH3_64bits(&h, offsetof(pc_header, header_hash));

    make_parents(c->path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", c->path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        free(table);
        return strerror(errno);
    }
    size_t pos = 0;
    bool ok = write_all(fd, &h, sizeof h) && (pos = sizeof h, write_all(fd, c->key, klen)) &&
              (pos += klen, pad_to(fd, &pos, table_off)) && write_all(fd, table, table_bytes);
    pos += table_bytes;
    for (size_t i = 0; ok && i < n; i++) {
        ok = pad_to(fd, &pos, (size_t)table[i * PC_ENTRY_WORDS + PG_GEMM_DESC_WORDS]) &&
             write_all(fd, pg_gemm_data(c->recs[i]), pg_gemm_packed_bytes(c->recs[i]));
        pos += pg_gemm_packed_bytes(c->recs[i]);
    }
    ok = ok && pad_to(fd, &pos, at);
    const char *why = ok ? NULL : strerror(errno ? errno : EIO);
    if (close(fd) != 0 && !why) why = strerror(errno);
    if (!why && rename(tmp, c->path) != 0) why = strerror(errno);
    if (why) unlink(tmp);
    free(table);
    return why;
}

void pg_pack_cache_end(pg_pack_cache *c, bool ok) {
    if (!c) return;
    if (t_current == c) t_current = NULL;
    if (!ok) {
        t_outcome = PG_PACK_CACHE_OFF;
    } else if (c->map && c->taking && c->next == c->n && c->n_recs == c->n) {
        t_outcome = PG_PACK_CACHE_HIT;
    } else {
        if (c->map && c->taking) {
            c->bad = true;
            PG_WARN("pack cache: %s: the load used %zu of its %zu weights: rewriting it", c->path,
                    c->next, c->n);
        }
        const char *why = write_file(c);
        if (why) {
            PG_WARN("pack cache: cannot write %s (%s): the next start packs again", c->path, why);
            t_outcome = PG_PACK_CACHE_WRITE_FAILED;
        } else {
            PG_DEBUG("pack cache: wrote %s (%zu weights)", c->path, c->n_recs);
            t_outcome = c->bad ? PG_PACK_CACHE_REWRITTEN : PG_PACK_CACHE_WRITTEN;
        }
    }
    if (c->map) map_unref(c->map);
    free(c->recs);
    free(c->key);
    free(c);
}
