/* GGUF reader and writer. Facts from llama.cpp docs/gguf.md and
 * ggml/src/gguf.cpp (read for the format only; this is our own code). */
#include "model/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mapped_file.h"

/* ---------------------------------------------------------------- types */

static const struct {
    const char *name;
    uint32_t block_elems, block_bytes;
} GGML_TYPES[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
};
#define N_GGML_TYPES (sizeof GGML_TYPES / sizeof GGML_TYPES[0])

const char *pg_ggml_type_name(uint32_t t) {
    return t < N_GGML_TYPES ? GGML_TYPES[t].name : NULL;
}

pg_dtype pg_ggml_type_to_dtype(uint32_t t) {
    switch (t) {
    case 0:
        return PG_F32;
    case 1:
        return PG_F16;
    case 2:
        return PG_Q4_0;
    case 8:
        return PG_Q8_0;
    case 10:
        return PG_Q2_K;
    case 11:
        return PG_Q3_K;
    case 12:
        return PG_Q4_K;
    case 13:
        return PG_Q5_K;
    case 14:
        return PG_Q6_K;
    case 20:
        return PG_IQ4_NL;
    case 23:
        return PG_IQ4_XS;
    case 24:
        return PG_I8;
    case 25:
        return PG_I16;
    case 26:
        return PG_I32;
    case 27:
        return PG_I64;
    case 28:
        return PG_F64;
    case 30:
        return PG_BF16;
    case 39:
        return PG_MXFP4;
    default:
        return PG_DTYPE_COUNT;
    }
}

uint32_t pg_dtype_to_ggml_type(pg_dtype t) {
    for (uint32_t i = 0; i < N_GGML_TYPES; i++)
        if (GGML_TYPES[i].name && pg_ggml_type_to_dtype(i) == t) return i;
    return UINT32_MAX;
}

static const char *const GGUF_TYPE_NAMES[PG_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
static const uint8_t GGUF_TYPE_SIZE[PG_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *pg_gguf_type_name(pg_gguf_type t) {
    return (unsigned)t < PG_GGUF_TYPE_COUNT ? GGUF_TYPE_NAMES[t] : "?";
}

/* ---------------------------------------------------------------- reader */

typedef struct kv {
    char *key;
    pg_gguf_type type;
    size_t raw_start, raw_end; /* serialized kv in the file */
    const uint8_t *val;        /* scalar value / string bytes */
    char *str;                 /* STRING: NUL-terminated copy */
    size_t str_len;
    pg_gguf_array arr;  /* ARRAY */
    uint64_t *str_offs; /* owned: arr.str_offs */
} kv;

typedef struct name_idx {
    const char *name;
    size_t idx;
} name_idx;

struct pg_gguf {
    pg_mapped_file f;
    uint32_t version, alignment;
    uint64_t data_offset;
    size_t n_kv, n_tensors;
    kv *kvs;
    pg_gguf_tensor *tensors;
    name_idx *kv_sorted, *tensor_sorted; /* sorted by name */
};

typedef struct cursor {
    const uint8_t *base;
    size_t pos, size;
    const char *path;
} cursor;

static bool take(cursor *c, size_t n, const char *what) {
    if (n > c->size - c->pos) {
        pg_error(PAGODA_ERR_FORMAT,
                 "%s: truncated file: %s needs %zu bytes at offset %zu, file has %zu", c->path,
                 what, n, c->pos, c->size);
        return false;
    }
    return true;
}
static bool rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (!take(c, 4, what)) return false;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return true;
}
static bool rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (!take(c, 8, what)) return false;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return true;
}
/* A string: checks the length against the bytes left. */
static bool rd_str(cursor *c, const uint8_t **s, uint64_t *len, const char *what) {
    if (!rd_u64(c, len, what)) return false;
    if (*len > c->size - c->pos) {
        pg_error(PAGODA_ERR_FORMAT,
                 "%s: %s has length %llu at offset %zu but only %zu bytes remain", c->path, what,
                 (unsigned long long)*len, c->pos - 8, c->size - c->pos);
        return false;
    }
    *s = c->base + c->pos;
    c->pos += (size_t)*len;
    return true;
}
static char *dup_n(const uint8_t *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

static const kv *find_kv(const pg_gguf *g, const char *key);

static pagoda_status parse_value(cursor *c, kv *k) {
    uint32_t t;
    if (!rd_u32(c, &t, "value type")) return PAGODA_ERR_FORMAT;
    if (t >= PG_GGUF_TYPE_COUNT)
        return pg_error(PAGODA_ERR_FORMAT, "%s: key '%s' has unknown value type %u", c->path,
                        k->key, t);
    k->type = (pg_gguf_type)t;
    if (t == PG_GGUF_STRING) {
        const uint8_t *s;
        uint64_t n;
        if (!rd_str(c, &s, &n, "string value")) return PAGODA_ERR_FORMAT;
        k->val = s;
        k->str_len = (size_t)n;
        k->str = dup_n(s, (size_t)n);
        if (!k->str) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", c->path);
        return PAGODA_OK;
    }
    if (t != PG_GGUF_ARRAY) {
        if (!take(c, GGUF_TYPE_SIZE[t], "value")) return PAGODA_ERR_FORMAT;
        k->val = c->base + c->pos;
        c->pos += GGUF_TYPE_SIZE[t];
        return PAGODA_OK;
    }
    uint32_t et;
    uint64_t n;
    if (!rd_u32(c, &et, "array type") || !rd_u64(c, &n, "array length")) return PAGODA_ERR_FORMAT;
    if (et >= PG_GGUF_TYPE_COUNT)
        return pg_error(PAGODA_ERR_FORMAT, "%s: array '%s' has unknown element type %u", c->path,
                        k->key, et);
    if (et == PG_GGUF_ARRAY)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: array '%s' holds arrays (nested arrays unsupported)", c->path, k->key);
    k->arr.type = (pg_gguf_type)et;
    k->arr.n = n;
    k->arr.data = c->base + c->pos;
    size_t left = c->size - c->pos;
    if (et != PG_GGUF_STRING) {
        if (n > left / GGUF_TYPE_SIZE[et])
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: array '%s' claims %llu elements of %s but only %zu bytes remain",
                            c->path, k->key, (unsigned long long)n, GGUF_TYPE_NAMES[et], left);
        c->pos += (size_t)n * GGUF_TYPE_SIZE[et];
        return PAGODA_OK;
    }
    if (n > left / 8)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: string array '%s' claims %llu elements but only %zu bytes remain",
                        c->path, k->key, (unsigned long long)n, left);
    k->str_offs = malloc((n ? (size_t)n : 1) * sizeof(uint64_t));
    if (!k->str_offs) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", c->path);
    size_t start = c->pos;
    for (uint64_t i = 0; i < n; i++) {
        k->str_offs[i] = c->pos - start;
        const uint8_t *s;
        uint64_t len;
        if (!rd_str(c, &s, &len, "array string")) {
            char why[512];
            snprintf(why, sizeof why, "%s", pg_last_error() + strlen(c->path) + 2);
            return pg_error(PAGODA_ERR_FORMAT, "%s: string array '%s' element %llu: %s", c->path,
                            k->key, (unsigned long long)i, why);
        }
    }
    k->arr.str_offs = k->str_offs;
    return PAGODA_OK;
}

static int cmp_name_idx(const void *a, const void *b) {
    return strcmp(((const name_idx *)a)->name, ((const name_idx *)b)->name);
}
static int cmp_tensor_ptr_off(const void *a, const void *b) {
    const pg_gguf_tensor *x = *(const pg_gguf_tensor *const *)a;
    const pg_gguf_tensor *y = *(const pg_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static pagoda_status parse_tensor_info(cursor *c, pg_gguf_tensor *t) {
    const uint8_t *s;
    uint64_t len;
    if (!rd_str(c, &s, &len, "tensor name")) return PAGODA_ERR_FORMAT;
    t->name = dup_n(s, (size_t)len);
    if (!t->name) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", c->path);
    uint32_t nd;
    if (!rd_u32(c, &nd, "tensor n_dims")) return PAGODA_ERR_FORMAT;
    if (nd < 1 || nd > PG_GGUF_MAX_DIMS)
        return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (1..%d allowed)",
                        c->path, t->name, nd, PG_GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t nel = 1;
    for (int i = 0; i < PG_GGUF_MAX_DIMS; i++)
        t->ne[i] = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t ne;
        if (!rd_u64(c, &ne, "tensor shape")) return PAGODA_ERR_FORMAT;
        if (ne > (uint64_t)INT64_MAX || (ne && nel > (uint64_t)INT64_MAX / ne))
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: tensor '%s' has an absurd shape (dim %u = %llu)", c->path, t->name,
                            i, (unsigned long long)ne);
        t->ne[i] = (int64_t)ne;
        nel *= ne;
    }
    uint32_t type;
    if (!rd_u32(c, &type, "tensor type") || !rd_u64(c, &t->offset, "tensor offset"))
        return PAGODA_ERR_FORMAT;
    t->ggml_type = type;
    if (!pg_ggml_type_name(type))
        return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' has unknown ggml type id %u", c->path,
                        t->name, type);
    t->dtype = pg_ggml_type_to_dtype(type);
    uint64_t be = GGML_TYPES[type].block_elems, bb = GGML_TYPES[type].block_bytes;
    if ((uint64_t)t->ne[0] % be)
        return pg_error(
            PAGODA_ERR_FORMAT,
            "%s: tensor '%s' row length %lld is not a multiple of the %s block size %llu", c->path,
            t->name, (long long)t->ne[0], GGML_TYPES[type].name, (unsigned long long)be);
    uint64_t nbytes;
    if (__builtin_mul_overflow(nel / be, bb, &nbytes) || nbytes > SIZE_MAX)
        return pg_error(PAGODA_ERR_FORMAT, "%s: tensor '%s' byte size overflows", c->path, t->name);
    t->nbytes = (size_t)nbytes;
    return PAGODA_OK;
}

static pagoda_status parse(pg_gguf *g) {
    cursor c = {g->f.data, 0, g->f.size, g->f.path};
    uint32_t magic;
    if (g->f.size < 4 || (memcpy(&magic, g->f.data, 4), magic != 0x46554747u)) /* "GGUF" */
        return pg_error(PAGODA_ERR_FORMAT, "%s: not a GGUF file (bad magic)", c.path);
    c.pos = 4;
    if (!rd_u32(&c, &g->version, "version")) return PAGODA_ERR_FORMAT;
    if (g->version == 1)
        return pg_error(PAGODA_ERR_UNSUPPORTED,
                        "%s: GGUF version 1 is not supported (re-convert the model)", c.path);
    if (g->version < 1 || g->version > 3)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: unsupported GGUF version %u", c.path,
                        g->version);
    uint64_t nt, nkv;
    if (!rd_u64(&c, &nt, "tensor count") || !rd_u64(&c, &nkv, "metadata count"))
        return PAGODA_ERR_FORMAT;
    size_t left = c.size - c.pos;
    /* a kv needs >= 8 (key len) + 4 (type) + 1 bytes; a tensor info >= 8+4+8+4+8 */
    if (nkv > left / 13)
        return pg_error(PAGODA_ERR_FORMAT, "%s: absurd metadata count %llu for a %zu-byte file",
                        c.path, (unsigned long long)nkv, c.size);
    if (nt > left / 32)
        return pg_error(PAGODA_ERR_FORMAT, "%s: absurd tensor count %llu for a %zu-byte file",
                        c.path, (unsigned long long)nt, c.size);
    g->kvs = calloc(nkv ? (size_t)nkv : 1, sizeof(kv));
    g->tensors = calloc(nt ? (size_t)nt : 1, sizeof(pg_gguf_tensor));
    g->kv_sorted = malloc((nkv ? (size_t)nkv : 1) * sizeof(name_idx));
    g->tensor_sorted = malloc((nt ? (size_t)nt : 1) * sizeof(name_idx));
    if (!g->kvs || !g->tensors || !g->kv_sorted || !g->tensor_sorted)
        return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", c.path);

    for (uint64_t i = 0; i < nkv; i++) {
        kv *k = &g->kvs[i];
        k->raw_start = c.pos;
        const uint8_t *s;
        uint64_t len;
        if (!rd_str(&c, &s, &len, "metadata key")) return PAGODA_ERR_FORMAT;
        k->key = dup_n(s, (size_t)len);
        g->n_kv = (size_t)i + 1;
        if (!k->key) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", c.path);
        pagoda_status st = parse_value(&c, k);
        if (st) return st;
        k->raw_end = c.pos;
    }
    for (size_t i = 0; i < g->n_kv; i++)
        g->kv_sorted[i] = (name_idx){g->kvs[i].key, i};
    qsort(g->kv_sorted, g->n_kv, sizeof(name_idx), cmp_name_idx);
    for (size_t i = 1; i < g->n_kv; i++)
        if (!strcmp(g->kv_sorted[i].name, g->kv_sorted[i - 1].name))
            return pg_error(PAGODA_ERR_FORMAT, "%s: duplicate metadata key '%s'", c.path,
                            g->kv_sorted[i].name);

    g->alignment = PG_GGUF_DEFAULT_ALIGNMENT;
    const kv *al = find_kv(g, "general.alignment");
    if (al) {
        uint32_t a = 0;
        if (al->type == PG_GGUF_U32) memcpy(&a, al->val, 4);
        if (al->type != PG_GGUF_U32 || a == 0 || (a & (a - 1)))
            return pg_error(PAGODA_ERR_FORMAT, "%s: general.alignment must be a power-of-two u32",
                            c.path);
        g->alignment = a;
    }

    for (uint64_t i = 0; i < nt; i++) {
        g->n_tensors = (size_t)i + 1;
        pagoda_status st = parse_tensor_info(&c, &g->tensors[i]);
        if (st) return st;
    }
    for (size_t i = 0; i < g->n_tensors; i++)
        g->tensor_sorted[i] = (name_idx){g->tensors[i].name, i};
    qsort(g->tensor_sorted, g->n_tensors, sizeof(name_idx), cmp_name_idx);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->tensor_sorted[i].name, g->tensor_sorted[i - 1].name))
            return pg_error(PAGODA_ERR_FORMAT, "%s: duplicate tensor name '%s'", c.path,
                            g->tensor_sorted[i].name);

    uint64_t data_off = ((uint64_t)c.pos + g->alignment - 1) / g->alignment * g->alignment;
    g->data_offset = data_off;
    uint64_t data_size = data_off <= c.size ? c.size - data_off : 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        pg_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: tensor '%s' offset %llu is not a multiple of the alignment %u",
                            c.path, t->name, (unsigned long long)t->offset, g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return pg_error(PAGODA_ERR_FORMAT,
                            "%s: tensor '%s' (%zu bytes at data offset %llu) ends past the end of "
                            "the file (data section is %llu bytes)",
                            c.path, t->name, t->nbytes, (unsigned long long)t->offset,
                            (unsigned long long)data_size);
        t->data = g->f.data + data_off + t->offset;
    }
    /* overlaps: sort a scratch index by offset */
    const pg_gguf_tensor **by_off =
        malloc((g->n_tensors ? g->n_tensors : 1) * sizeof(const pg_gguf_tensor *));
    if (!by_off) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", c.path);
    for (size_t i = 0; i < g->n_tensors; i++)
        by_off[i] = &g->tensors[i];
    qsort(by_off, g->n_tensors, sizeof(const pg_gguf_tensor *), cmp_tensor_ptr_off);
    const pg_gguf_tensor *prev = NULL;
    for (size_t i = 0; i < g->n_tensors; i++) {
        const pg_gguf_tensor *t = by_off[i];
        if (!t->nbytes) continue;
        if (prev && prev->offset + prev->nbytes > t->offset) {
            pg_error(PAGODA_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", c.path, prev->name,
                     t->name);
            free(by_off);
            return PAGODA_ERR_FORMAT;
        }
        prev = t;
    }
    free(by_off);
    return PAGODA_OK;
}

pagoda_status pg_gguf_open(const char *path, pg_gguf **out) {
    *out = NULL;
    pg_gguf *g = calloc(1, sizeof *g);
    if (!g) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    pagoda_status s = pg_mapped_file_open(path, &g->f);
    if (!s) s = parse(g);
    if (s) {
        pg_gguf_close(g);
        return s;
    }
    *out = g;
    return PAGODA_OK;
}

void pg_gguf_close(pg_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) {
        free(g->kvs[i].key);
        free(g->kvs[i].str);
        free(g->kvs[i].str_offs);
    }
    for (size_t i = 0; i < g->n_tensors; i++)
        free((char *)g->tensors[i].name);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_sorted);
    free(g->tensor_sorted);
    pg_mapped_file_close(&g->f);
    free(g);
}

const char *pg_gguf_path(const pg_gguf *g) {
    return g->f.path;
}
uint32_t pg_gguf_version(const pg_gguf *g) {
    return g->version;
}
uint32_t pg_gguf_alignment(const pg_gguf *g) {
    return g->alignment;
}
uint64_t pg_gguf_data_offset(const pg_gguf *g) {
    return g->data_offset;
}
size_t pg_gguf_n_kv(const pg_gguf *g) {
    return g->n_kv;
}
const char *pg_gguf_key_at(const pg_gguf *g, size_t i) {
    return i < g->n_kv ? g->kvs[i].key : NULL;
}
pg_gguf_type pg_gguf_kv_type(const pg_gguf *g, size_t i) {
    return i < g->n_kv ? g->kvs[i].type : PG_GGUF_TYPE_COUNT;
}
const uint8_t *pg_gguf_kv_raw(const pg_gguf *g, size_t i, size_t *len) {
    if (i >= g->n_kv) return NULL;
    *len = g->kvs[i].raw_end - g->kvs[i].raw_start;
    return g->f.data + g->kvs[i].raw_start;
}

int64_t pg_gguf_find_key(const pg_gguf *g, const char *key) {
    size_t lo = 0, hi = g->n_kv;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(g->kv_sorted[mid].name, key);
        if (!c) return (int64_t)g->kv_sorted[mid].idx;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}
static const kv *find_kv(const pg_gguf *g, const char *key) {
    int64_t i = pg_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kvs[i];
}

/* Scalar of a numeric type at p, as int64 / double. */
static bool scalar_int(pg_gguf_type t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case PG_GGUF_U8:
        *out = p[0];
        return true;
    case PG_GGUF_BOOL:
        *out = p[0] != 0;
        return true;
    case PG_GGUF_I8:
        *out = p[0] < 128 ? (int64_t)p[0] : (int64_t)p[0] - 256;
        return true;
    case PG_GGUF_U16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return true;
    }
    case PG_GGUF_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return true;
    }
    case PG_GGUF_U32: {
        uint32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return true;
    }
    case PG_GGUF_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return true;
    }
    case PG_GGUF_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        *out = v;
        return true;
    }
    case PG_GGUF_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    default:
        return false;
    }
}
static bool scalar_float(pg_gguf_type t, const uint8_t *p, double *out) {
    if (t == PG_GGUF_F32) {
        float v;
        memcpy(&v, p, 4);
        *out = v;
        return true;
    }
    if (t == PG_GGUF_F64) {
        double v;
        memcpy(&v, p, 8);
        *out = v;
        return true;
    }
    if (t == PG_GGUF_U64) {
        uint64_t v;
        memcpy(&v, p, 8);
        *out = (double)v;
        return true;
    }
    int64_t i;
    if (!scalar_int(t, p, &i)) return false;
    *out = (double)i;
    return true;
}

static pagoda_status lookup(const pg_gguf *g, const char *key, const kv **k) {
    *k = find_kv(g, key);
    if (!*k)
        return pg_error(PAGODA_ERR_NOT_FOUND, "%s: metadata key '%s' not found", g->f.path, key);
    return PAGODA_OK;
}
static pagoda_status wrong_type(const pg_gguf *g, const kv *k, const char *want) {
    return pg_error(PAGODA_ERR_FORMAT, "%s: metadata key '%s' has type %s, expected %s", g->f.path,
                    k->key, GGUF_TYPE_NAMES[k->type], want);
}

pagoda_status pg_gguf_get_int(const pg_gguf *g, const char *key, int64_t *out) {
    const kv *k;
    pagoda_status s = lookup(g, key, &k);
    if (s) return s;
    if (k->type == PG_GGUF_STRING || k->type == PG_GGUF_ARRAY || !scalar_int(k->type, k->val, out))
        return wrong_type(g, k, "an integer");
    return PAGODA_OK;
}
pagoda_status pg_gguf_get_float(const pg_gguf *g, const char *key, double *out) {
    const kv *k;
    pagoda_status s = lookup(g, key, &k);
    if (s) return s;
    if (k->type == PG_GGUF_STRING || k->type == PG_GGUF_ARRAY || k->type == PG_GGUF_BOOL ||
        !scalar_float(k->type, k->val, out))
        return wrong_type(g, k, "a number");
    return PAGODA_OK;
}
pagoda_status pg_gguf_get_bool(const pg_gguf *g, const char *key, bool *out) {
    const kv *k;
    pagoda_status s = lookup(g, key, &k);
    if (s) return s;
    int64_t v;
    if (k->type == PG_GGUF_STRING || k->type == PG_GGUF_ARRAY || k->type == PG_GGUF_F32 ||
        k->type == PG_GGUF_F64 || !scalar_int(k->type, k->val, &v))
        return wrong_type(g, k, "bool");
    *out = v != 0;
    return PAGODA_OK;
}
pagoda_status pg_gguf_get_str(const pg_gguf *g, const char *key, const char **out, size_t *len) {
    const kv *k;
    pagoda_status s = lookup(g, key, &k);
    if (s) return s;
    if (k->type != PG_GGUF_STRING) return wrong_type(g, k, "string");
    *out = k->str;
    if (len) *len = k->str_len;
    return PAGODA_OK;
}
pagoda_status pg_gguf_get_int_or(const pg_gguf *g, const char *key, int64_t def, int64_t *out) {
    if (!find_kv(g, key)) {
        *out = def;
        return PAGODA_OK;
    }
    return pg_gguf_get_int(g, key, out);
}
pagoda_status pg_gguf_get_ints(const pg_gguf *g, const char *const *keys, int *const *out, int n,
                               int64_t lo, int64_t hi) {
    for (int i = 0; i < n; i++) {
        int64_t v;
        pagoda_status s = pg_gguf_get_int(g, keys[i], &v);
        if (s) return s;
        if (v < lo || v > hi)
            return pg_error(PAGODA_ERR_FORMAT, "%s: %s = %lld is out of range [%lld, %lld]",
                            pg_gguf_path(g), keys[i], (long long)v, (long long)lo, (long long)hi);
        *out[i] = (int)v;
    }
    return PAGODA_OK;
}

pagoda_status pg_gguf_get_float_or(const pg_gguf *g, const char *key, double def, double *out) {
    if (!find_kv(g, key)) {
        *out = def;
        return PAGODA_OK;
    }
    return pg_gguf_get_float(g, key, out);
}
pagoda_status pg_gguf_get_bool_or(const pg_gguf *g, const char *key, bool def, bool *out) {
    if (!find_kv(g, key)) {
        *out = def;
        return PAGODA_OK;
    }
    return pg_gguf_get_bool(g, key, out);
}
pagoda_status pg_gguf_get_array(const pg_gguf *g, const char *key, pg_gguf_array *out) {
    const kv *k;
    pagoda_status s = lookup(g, key, &k);
    if (s) return s;
    if (k->type != PG_GGUF_ARRAY) return wrong_type(g, k, "array");
    *out = k->arr;
    return PAGODA_OK;
}

int64_t pg_gguf_array_int(const pg_gguf_array *a, uint64_t i) {
    int64_t v = 0;
    if (i >= a->n || a->type == PG_GGUF_STRING) return 0;
    if (a->type == PG_GGUF_F32 || a->type == PG_GGUF_F64) {
        double d = pg_gguf_array_float(a, i);
        return d > -9.2e18 && d < 9.2e18 ? (int64_t)d : 0; /* NaN / out of range -> 0 */
    }
    if (!scalar_int(a->type, a->data + i * GGUF_TYPE_SIZE[a->type], &v)) return 0;
    return v;
}
double pg_gguf_array_float(const pg_gguf_array *a, uint64_t i) {
    double v = 0;
    if (i >= a->n || a->type == PG_GGUF_STRING) return 0;
    if (!scalar_float(a->type, a->data + i * GGUF_TYPE_SIZE[a->type], &v)) return 0;
    return v;
}
const char *pg_gguf_array_str(const pg_gguf_array *a, uint64_t i, size_t *len) {
    if (i >= a->n || a->type != PG_GGUF_STRING || !a->str_offs) {
        if (len) *len = 0;
        return NULL;
    }
    const uint8_t *p = a->data + a->str_offs[i];
    uint64_t n;
    memcpy(&n, p, 8);
    if (len) *len = (size_t)n;
    return (const char *)p + 8;
}

size_t pg_gguf_n_tensors(const pg_gguf *g) {
    return g->n_tensors;
}
const pg_gguf_tensor *pg_gguf_tensor_at(const pg_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}
const pg_gguf_tensor *pg_gguf_find_tensor(const pg_gguf *g, const char *name) {
    size_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(g->tensor_sorted[mid].name, name);
        if (!c) return &g->tensors[g->tensor_sorted[mid].idx];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---------------------------------------------------------------- writer */

typedef struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[PG_GGUF_MAX_DIMS];
    uint64_t offset, nbytes;
} wtensor;

struct pg_gguf_writer {
    uint8_t *kv_buf;
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint32_t alignment;
    bool oom;
    FILE *fp;
    char *path;
    size_t cur;        /* tensor being written */
    uint64_t cur_done; /* bytes of it written */
    uint64_t file_pos;
};

pagoda_status pg_gguf_writer_create(pg_gguf_writer **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return pg_error(PAGODA_ERR_NOMEM, "gguf writer: out of memory");
    (*out)->alignment = PG_GGUF_DEFAULT_ALIGNMENT;
    return PAGODA_OK;
}

void pg_gguf_writer_free(pg_gguf_writer *w) {
    if (!w) return;
    if (w->fp) fclose(w->fp);
    for (size_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv_buf);
    free(w->path);
    free(w);
}

static void put(pg_gguf_writer *w, const void *p, size_t n) {
    if (w->oom) return;
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap : 4096;
        while (cap < w->kv_len + n)
            cap *= 2;
        uint8_t *b = realloc(w->kv_buf, cap);
        if (!b) {
            w->oom = true;
            return;
        }
        w->kv_buf = b;
        w->kv_cap = cap;
    }
    memcpy(w->kv_buf + w->kv_len, p, n);
    w->kv_len += n;
}
static void put_u32(pg_gguf_writer *w, uint32_t v) {
    put(w, &v, 4);
}
static void put_u64(pg_gguf_writer *w, uint64_t v) {
    put(w, &v, 8);
}
static void put_str(pg_gguf_writer *w, const char *s) {
    size_t n = strlen(s);
    put_u64(w, n);
    put(w, s, n);
}
static void put_key(pg_gguf_writer *w, const char *key, pg_gguf_type t) {
    put_str(w, key);
    put_u32(w, (uint32_t)t);
    w->n_kv++;
}

void pg_gguf_writer_set_u32(pg_gguf_writer *w, const char *key, uint32_t v) {
    put_key(w, key, PG_GGUF_U32);
    put_u32(w, v);
}
void pg_gguf_writer_set_i32(pg_gguf_writer *w, const char *key, int32_t v) {
    put_key(w, key, PG_GGUF_I32);
    put(w, &v, 4);
}
void pg_gguf_writer_set_u64(pg_gguf_writer *w, const char *key, uint64_t v) {
    put_key(w, key, PG_GGUF_U64);
    put_u64(w, v);
}
void pg_gguf_writer_set_f32(pg_gguf_writer *w, const char *key, float v) {
    put_key(w, key, PG_GGUF_F32);
    put(w, &v, 4);
}
void pg_gguf_writer_set_bool(pg_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v;
    put_key(w, key, PG_GGUF_BOOL);
    put(w, &b, 1);
}
void pg_gguf_writer_set_str(pg_gguf_writer *w, const char *key, const char *v) {
    put_key(w, key, PG_GGUF_STRING);
    put_str(w, v);
}
void pg_gguf_writer_set_array(pg_gguf_writer *w, const char *key, pg_gguf_type type,
                              const void *data, uint64_t n) {
    if ((unsigned)type >= PG_GGUF_TYPE_COUNT || !GGUF_TYPE_SIZE[type]) {
        w->oom = true; /* misuse: make begin fail */
        return;
    }
    put_key(w, key, PG_GGUF_ARRAY);
    put_u32(w, (uint32_t)type);
    put_u64(w, n);
    put(w, data, (size_t)n * GGUF_TYPE_SIZE[type]);
}
void pg_gguf_writer_set_str_array(pg_gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t n) {
    put_key(w, key, PG_GGUF_ARRAY);
    put_u32(w, PG_GGUF_STRING);
    put_u64(w, n);
    for (uint64_t i = 0; i < n; i++)
        put_str(w, v[i]);
}
void pg_gguf_writer_add_raw_kv(pg_gguf_writer *w, const uint8_t *raw, size_t len) {
    put(w, raw, len);
    w->n_kv++;
}
void pg_gguf_writer_set_alignment(pg_gguf_writer *w, uint32_t alignment) {
    w->alignment = alignment;
    pg_gguf_writer_set_u32(w, "general.alignment", alignment);
}

pagoda_status pg_gguf_writer_add_tensor(pg_gguf_writer *w, const char *name, uint32_t ggml_type,
                                        int n_dims, const int64_t *ne) {
    if (n_dims < 1 || n_dims > PG_GGUF_MAX_DIMS || !pg_ggml_type_name(ggml_type))
        return pg_error(PAGODA_ERR_INVALID_ARG, "gguf writer: tensor '%s': bad dims or type", name);
    uint64_t be = GGML_TYPES[ggml_type].block_elems, nel = 1;
    for (int i = 0; i < n_dims; i++) {
        if (ne[i] < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG, "gguf writer: tensor '%s': negative dim", name);
        nel *= (uint64_t)ne[i];
    }
    if ((uint64_t)ne[0] % be)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "gguf writer: tensor '%s': row length %lld not a multiple of %llu", name,
                        (long long)ne[0], (unsigned long long)be);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) return pg_error(PAGODA_ERR_NOMEM, "gguf writer: out of memory");
        w->tensors = t;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return pg_error(PAGODA_ERR_NOMEM, "gguf writer: out of memory");
    t->type = ggml_type;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++)
        t->ne[i] = ne[i];
    t->nbytes = nel / be * GGML_TYPES[ggml_type].block_bytes;
    uint64_t off = 0;
    if (w->n_tensors) {
        const wtensor *p = &w->tensors[w->n_tensors - 1];
        off = (p->offset + p->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    t->offset = off;
    w->n_tensors++;
    return PAGODA_OK;
}

static pagoda_status wr(pg_gguf_writer *w, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, w->fp) != n)
        return pg_error(PAGODA_ERR_IO, "%s: write failed (disk full?)", w->path);
    w->file_pos += n;
    return PAGODA_OK;
}
static pagoda_status pad_to(pg_gguf_writer *w, uint64_t pos) {
    static const uint8_t zeros[256];
    while (w->file_pos < pos) {
        uint64_t n = pos - w->file_pos;
        pagoda_status s = wr(w, zeros, n > sizeof zeros ? sizeof zeros : (size_t)n);
        if (s) return s;
    }
    return PAGODA_OK;
}

pagoda_status pg_gguf_writer_begin(pg_gguf_writer *w, const char *path) {
    if (w->oom) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory building GGUF metadata", path);
    free(w->path);
    w->path = strdup(path);
    if (!w->path) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", path);
    w->fp = fopen(path, "wb");
    if (!w->fp) return pg_error(PAGODA_ERR_IO, "%s: cannot create file", path);
    setvbuf(w->fp, NULL, _IOFBF, 1 << 22);
    w->file_pos = 0;
    uint32_t hdr[2] = {0x46554747u, 3};
    uint64_t counts[2] = {w->n_tensors, w->n_kv};
    pagoda_status s = wr(w, hdr, 8);
    if (!s) s = wr(w, counts, 16);
    if (!s) s = wr(w, w->kv_buf, w->kv_len);
    for (size_t i = 0; !s && i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        uint64_t len = strlen(t->name);
        uint32_t nd = (uint32_t)t->n_dims;
        s = wr(w, &len, 8);
        if (!s) s = wr(w, t->name, (size_t)len);
        if (!s) s = wr(w, &nd, 4);
        for (int d = 0; !s && d < t->n_dims; d++)
            s = wr(w, &t->ne[d], 8);
        if (!s) s = wr(w, &t->type, 4);
        if (!s) s = wr(w, &t->offset, 8);
    }
    if (s) return s;
    s = pad_to(w, (w->file_pos + w->alignment - 1) / w->alignment * w->alignment);
    /* from here file_pos counts data-section bytes */
    w->file_pos = 0;
    w->cur = 0;
    w->cur_done = 0;
    return s;
}

pagoda_status pg_gguf_writer_write(pg_gguf_writer *w, const void *data, size_t n) {
    const uint8_t *p = data;
    if (!w->fp) return pg_error(PAGODA_ERR_INVALID_ARG, "gguf writer: write before begin");
    while (n) {
        while (w->cur < w->n_tensors && w->cur_done == w->tensors[w->cur].nbytes) {
            w->cur++;
            w->cur_done = 0;
        }
        if (w->cur >= w->n_tensors)
            return pg_error(PAGODA_ERR_INVALID_ARG, "%s: more tensor data than declared", w->path);
        wtensor *t = &w->tensors[w->cur];
        if (w->cur_done == 0) {
            pagoda_status s = pad_to(w, t->offset);
            if (s) return s;
        }
        uint64_t k = t->nbytes - w->cur_done;
        if (k > n) k = n;
        pagoda_status s = wr(w, p, (size_t)k);
        if (s) return s;
        p += k;
        n -= (size_t)k;
        w->cur_done += k;
    }
    return PAGODA_OK;
}

pagoda_status pg_gguf_writer_finish(pg_gguf_writer *w) {
    if (!w->fp) return pg_error(PAGODA_ERR_INVALID_ARG, "gguf writer: finish before begin");
    while (w->cur < w->n_tensors && w->cur_done == w->tensors[w->cur].nbytes) {
        w->cur++;
        w->cur_done = 0;
    }
    pagoda_status s = PAGODA_OK;
    if (w->cur < w->n_tensors)
        s = pg_error(PAGODA_ERR_INVALID_ARG, "%s: tensor '%s' data incomplete", w->path,
                     w->tensors[w->cur].name);
    if (fclose(w->fp) != 0 && !s) s = pg_error(PAGODA_ERR_IO, "%s: write failed on close", w->path);
    w->fp = NULL;
    return s;
}
