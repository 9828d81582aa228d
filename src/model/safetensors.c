/* safetensors reader/writer. Format facts from huggingface/safetensors
 * README (read for the format only). */
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mapped_file.h"

static const struct {
    const char *name;
    pg_dtype dtype;
} ST_DTYPES[] = {
    {"F32", PG_F32}, {"F16", PG_F16}, {"BF16", PG_BF16}, {"I8", PG_I8},   {"U8", PG_U8},
    {"I16", PG_I16}, {"I32", PG_I32}, {"I64", PG_I64},   {"F64", PG_F64}, {"BOOL", PG_BOOL},
};

pg_dtype pg_safetensors_parse_dtype(const char *s) {
    for (size_t i = 0; i < sizeof ST_DTYPES / sizeof ST_DTYPES[0]; i++)
        if (!strcmp(s, ST_DTYPES[i].name)) return ST_DTYPES[i].dtype;
    return PG_DTYPE_COUNT;
}
const char *pg_safetensors_dtype_name(pg_dtype t) {
    for (size_t i = 0; i < sizeof ST_DTYPES / sizeof ST_DTYPES[0]; i++)
        if (ST_DTYPES[i].dtype == t) return ST_DTYPES[i].name;
    return NULL;
}

struct pg_safetensors {
    pg_mapped_file f;
    pg_tensor *tensors;
    size_t n;
    const pg_tensor **by_name;
};

static int cmp_by_name(const void *a, const void *b) {
    return strcmp((*(const pg_tensor *const *)a)->name, (*(const pg_tensor *const *)b)->name);
}
static int cmp_by_data(const void *a, const void *b) {
    const uint8_t *x = (*(const pg_tensor *const *)a)->data,
                  *y = (*(const pg_tensor *const *)b)->data;
    return x < y ? -1 : x > y;
}

/* A JSON number that is a non-negative integer below 2^53. */
static bool json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d) return false;
    *out = (uint64_t)d;
    return true;
}

static pagoda_status parse_entry(pg_safetensors *st, const cJSON *e, pg_tensor *t,
                                 uint64_t buf_size) {
    const char *path = st->f.path;
    const char *name = t->name;
    if (!cJSON_IsObject(e))
        return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s': entry is not an object", path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of))
        return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s': needs dtype, shape and data_offsets",
                        path, name);
    t->dtype = pg_safetensors_parse_dtype(dt->valuestring);
    if (t->dtype == PG_DTYPE_COUNT)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: tensor '%s' has unknown dtype '%.32s'", path,
                        name, dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > PG_MAX_DIMS)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (max %d)", path,
                        name, nd, PG_MAX_DIMS);
    t->ndim = nd;
    uint64_t nel = 1;
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        uint64_t v;
        if (!json_uint(d, &v))
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: tensor '%s': shape holds a non-integer or negative", path, name);
        if (v && nel > UINT64_MAX / 2 / v)
            return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s': absurd shape", path, name);
        t->shape[i++] = (int64_t)v;
        nel *= v;
    }
    for (; i < PG_MAX_DIMS; i++)
        t->shape[i] = 1;
    uint64_t b, en;
    if (cJSON_GetArraySize(of) != 2 || !json_uint(cJSON_GetArrayItem(of, 0), &b) ||
        !json_uint(cJSON_GetArrayItem(of, 1), &en) || en < b)
        return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s': bad data_offsets", path, name);
    uint64_t want;
    if (__builtin_mul_overflow(nel, (uint64_t)pg_dtype_block_bytes(t->dtype), &want))
        return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s': absurd shape", path, name);
    if (want != en - b)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: tensor '%s': shape needs %llu bytes of %s but data_offsets span %llu",
                        path, name, (unsigned long long)want, pg_dtype_name(t->dtype),
                        (unsigned long long)(en - b));
    if (en > buf_size)
        return pg_error(
            PAGODA_ERR_FORMAT,
            "%s: tensor '%s' ends at data byte %llu, past the end of the file (data is %llu bytes)",
            path, name, (unsigned long long)en, (unsigned long long)buf_size);
    t->nbytes = (size_t)(en - b);
    return PAGODA_OK;
}

static pagoda_status parse(pg_safetensors *st) {
    const char *path = st->f.path;
    if (st->f.size < 8)
        return pg_error(PAGODA_ERR_FORMAT, "%s: truncated file (%zu bytes, no header)", path,
                        st->f.size);
    uint64_t hlen;
    memcpy(&hlen, st->f.data, 8);
    if (hlen > PG_SAFETENSORS_MAX_HEADER)
        return pg_error(PAGODA_ERR_FORMAT, "%s: absurd header length %llu", path,
                        (unsigned long long)hlen);
    if (hlen > st->f.size - 8)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: header length %llu runs past the end of the file (%zu bytes)", path,
                        (unsigned long long)hlen, st->f.size);
    const uint8_t *buf = st->f.data + 8 + hlen;
    uint64_t buf_size = st->f.size - 8 - hlen;
    cJSON *root = cJSON_ParseWithLength((const char *)st->f.data + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pg_error(PAGODA_ERR_FORMAT, "%s: header is not a JSON object", path);
    }
    size_t n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") != 0) n++;
    }
    /* The format's __metadata__ is a map of strings to strings: the
     * reference reader (the safetensors crate behind safe_open /
     * transformers) refuses anything else ("invalid type ... expected a
     * string"), so pagoda does too instead of ignoring it. */
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    if (meta) {
        const cJSON *bad = NULL;
        if (cJSON_IsObject(meta)) {
            const cJSON *m;
            cJSON_ArrayForEach(m, meta) {
                if (!cJSON_IsString(m)) {
                    bad = m;
                    break;
                }
            }
        }
        if (!cJSON_IsObject(meta) || bad) {
            const cJSON *v = bad ? bad : meta;
            const char *what = cJSON_IsNumber(v)   ? "a number"
                               : cJSON_IsBool(v)   ? "a boolean"
                               : cJSON_IsNull(v)   ? "null"
                               : cJSON_IsArray(v)  ? "a list"
                               : cJSON_IsObject(v) ? "an object"
                                                   : "a string";
            pagoda_status es = pg_error(
                PAGODA_ERR_FORMAT,
                "%s: __metadata__%s%.64s%s is %s, but safetensors metadata must map strings to "
                "strings (the safetensors library refuses this header too); fix: re-save with "
                "string values, e.g. safetensors.torch.save_file(tensors, path, "
                "metadata={\"format\": \"pt\"})",
                path, bad ? "['" : "", bad ? bad->string : "", bad ? "']" : "", what);
            cJSON_Delete(root);
            return es;
        }
    }
    st->tensors = calloc(n ? n : 1, sizeof(pg_tensor));
    st->by_name = calloc(n ? n : 1, sizeof(const pg_tensor *));
    if (!st->tensors || !st->by_name) {
        cJSON_Delete(root);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    pagoda_status s = PAGODA_OK;
    cJSON_ArrayForEach(e, root) {
        if (s) break;
        if (!strcmp(e->string, "__metadata__")) continue;
        pg_tensor *t = &st->tensors[st->n];
        t->name = strdup(e->string);
        if (!t->name) {
            s = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        st->n++;
        s = parse_entry(st, e, t, buf_size);
        if (!s) {
            uint64_t b =
                (uint64_t)cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), 0)
                    ->valuedouble;
            t->data = buf + b;
        }
    }
    cJSON_Delete(root);
    if (s) return s;
    for (size_t i = 0; i < st->n; i++)
        st->by_name[i] = &st->tensors[i];
    qsort(st->by_name, st->n, sizeof(const pg_tensor *), cmp_by_name);
    for (size_t i = 1; i < st->n; i++)
        if (!strcmp(st->by_name[i]->name, st->by_name[i - 1]->name))
            return pg_error(PAGODA_ERR_FORMAT, "%s: duplicate tensor name '%s'", path,
                            st->by_name[i]->name);
    const pg_tensor **by_data = malloc((st->n ? st->n : 1) * sizeof(const pg_tensor *));
    if (!by_data) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    memcpy(by_data, st->by_name, st->n * sizeof(const pg_tensor *));
    qsort(by_data, st->n, sizeof(const pg_tensor *), cmp_by_data);
    const pg_tensor *prev = NULL;
    for (size_t i = 0; i < st->n && !s; i++) {
        if (!by_data[i]->nbytes) continue;
        if (prev && (const uint8_t *)prev->data + prev->nbytes > (const uint8_t *)by_data[i]->data)
            s = pg_error(PAGODA_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", path, prev->name,
                         by_data[i]->name);
        prev = by_data[i];
    }
    free(by_data);
    return s;
}

pagoda_status pg_safetensors_open(const char *path, pg_safetensors **out) {
    *out = NULL;
    pg_safetensors *st = calloc(1, sizeof *st);
    if (!st) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    pagoda_status s = pg_mapped_file_open(path, &st->f);
    if (!s) s = parse(st);
    if (s) {
        pg_safetensors_close(st);
        return s;
    }
    *out = st;
    return PAGODA_OK;
}

void pg_safetensors_close(pg_safetensors *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n; i++)
        free((char *)st->tensors[i].name);
    free(st->tensors);
    free(st->by_name);
    pg_mapped_file_close(&st->f);
    free(st);
}

const char *pg_safetensors_path(const pg_safetensors *st) {
    return st->f.path;
}
size_t pg_safetensors_n_tensors(const pg_safetensors *st) {
    return st->n;
}
const pg_tensor *pg_safetensors_tensor_at(const pg_safetensors *st, size_t i) {
    return i < st->n ? &st->tensors[i] : NULL;
}
const pg_tensor *pg_safetensors_find(const pg_safetensors *st, const char *name) {
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(st->by_name[mid]->name, name);
        if (!c) return st->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---------------------------------------------------------------- writer */

typedef struct st_wt {
    char *name;
    pg_dtype dtype;
    int ndim;
    int64_t shape[PG_MAX_DIMS];
    uint64_t nbytes;
} st_wt;

struct pg_safetensors_writer {
    st_wt *t;
    size_t n, cap;
    uint64_t total;
    FILE *fp;
    char *path;
    uint64_t written;
};

pagoda_status pg_safetensors_writer_create(pg_safetensors_writer **out) {
    *out = calloc(1, sizeof **out);
    return *out ? PAGODA_OK : pg_error(PAGODA_ERR_NOMEM, "safetensors writer: out of memory");
}

void pg_safetensors_writer_free(pg_safetensors_writer *w) {
    if (!w) return;
    if (w->fp) fclose(w->fp);
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->path);
    free(w);
}

pagoda_status pg_safetensors_writer_add(pg_safetensors_writer *w, const char *name, pg_dtype dtype,
                                        int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > PG_MAX_DIMS || !pg_safetensors_dtype_name(dtype))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "safetensors writer: tensor '%s': bad dims or dtype", name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        st_wt *t = realloc(w->t, cap * sizeof *t);
        if (!t) return pg_error(PAGODA_ERR_NOMEM, "safetensors writer: out of memory");
        w->t = t;
        w->cap = cap;
    }
    st_wt *t = &w->t[w->n];
    t->name = strdup(name);
    if (!t->name) return pg_error(PAGODA_ERR_NOMEM, "safetensors writer: out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    uint64_t nel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            free(t->name);
            return pg_error(PAGODA_ERR_INVALID_ARG, "safetensors writer: tensor '%s': negative dim",
                            name);
        }
        t->shape[i] = shape[i];
        nel *= (uint64_t)shape[i];
    }
    t->nbytes = nel * pg_dtype_block_bytes(dtype);
    w->total += t->nbytes;
    w->n++;
    return PAGODA_OK;
}

uint64_t pg_safetensors_writer_data_bytes(const pg_safetensors_writer *w) {
    return w->total;
}

/* Append to a growable string. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;
static void sb_add(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    for (;;) {
        va_list aq;
        va_copy(aq, ap);
        /* va_copy'd just above; the analyzer does not follow va_copy in loops */
        // NOLINTNEXTLINE(clang-analyzer-valist.Uninitialized)
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, aq);
        va_end(aq);
        if (n < 0) {
            b->oom = true;
            break;
        }
        if (b->p && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            break;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            break;
        }
        b->p = q;
        b->cap = cap;
    }
    va_end(ap);
}
/* JSON string literal (names are ASCII in practice; escape the few specials). */
static void sb_json_str(sbuf *b, const char *s) {
    sb_add(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sb_add(b, "\\%c", c);
        else if (c < 0x20)
            sb_add(b, "\\u%04x", c);
        else
            sb_add(b, "%c", c);
    }
    sb_add(b, "\"");
}

pagoda_status pg_safetensors_writer_begin(pg_safetensors_writer *w, const char *path) {
    sbuf b = {0};
    sb_add(&b, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const st_wt *t = &w->t[i];
        sb_add(&b, ",");
        sb_json_str(&b, t->name);
        sb_add(&b, ":{\"dtype\":\"%s\",\"shape\":[", pg_safetensors_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            sb_add(&b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        unsigned long long begin = off, end = off + t->nbytes;
        sb_add(&b, "],\"data_offsets\":[%llu,%llu]}", begin, end);
        off += t->nbytes;
    }
    sb_add(&b, "}");
    while (!b.oom && b.len % 8)
        sb_add(&b, " ");
    if (b.oom) {
        free(b.p);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    free(w->path);
    w->path = strdup(path);
    w->fp = fopen(path, "wb");
    if (!w->fp || !w->path) {
        free(b.p);
        return pg_error(PAGODA_ERR_IO, "%s: cannot create file", path);
    }
    setvbuf(w->fp, NULL, _IOFBF, 1 << 22);
    uint64_t hlen = b.len;
    bool ok = fwrite(&hlen, 8, 1, w->fp) == 1 && fwrite(b.p, 1, b.len, w->fp) == b.len;
    free(b.p);
    w->written = 0;
    return ok ? PAGODA_OK : pg_error(PAGODA_ERR_IO, "%s: write failed", path);
}

pagoda_status pg_safetensors_writer_write(pg_safetensors_writer *w, const void *data, size_t n) {
    if (!w->fp) return pg_error(PAGODA_ERR_INVALID_ARG, "safetensors writer: write before begin");
    if (n > w->total - w->written)
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: more tensor data than declared", w->path);
    if (n && fwrite(data, 1, n, w->fp) != n)
        return pg_error(PAGODA_ERR_IO, "%s: write failed (disk full?)", w->path);
    w->written += n;
    return PAGODA_OK;
}

pagoda_status pg_safetensors_writer_finish(pg_safetensors_writer *w) {
    if (!w->fp) return pg_error(PAGODA_ERR_INVALID_ARG, "safetensors writer: finish before begin");
    pagoda_status s = PAGODA_OK;
    if (w->written != w->total)
        s = pg_error(PAGODA_ERR_INVALID_ARG, "%s: %llu of %llu data bytes written", w->path,
                     (unsigned long long)w->written, (unsigned long long)w->total);
    if (fclose(w->fp) != 0 && !s) s = pg_error(PAGODA_ERR_IO, "%s: write failed on close", w->path);
    w->fp = NULL;
    return s;
}

pagoda_status pg_safetensors_write_index(const char *path, uint64_t total_size,
                                         const char *const *names, const char *const *files,
                                         size_t n) {
    sbuf b = {0};
    sb_add(&b, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {",
           (unsigned long long)total_size);
    for (size_t i = 0; i < n; i++) {
        sb_add(&b, "%s\n    ", i ? "," : "");
        sb_json_str(&b, names[i]);
        sb_add(&b, ": ");
        sb_json_str(&b, files[i]);
    }
    sb_add(&b, "\n  }\n}\n");
    if (b.oom) {
        free(b.p);
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    }
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(b.p, 1, b.len, f) == b.len;
    if (f && fclose(f) != 0) ok = false;
    free(b.p);
    return ok ? PAGODA_OK : pg_error(PAGODA_ERR_IO, "%s: cannot write", path);
}
