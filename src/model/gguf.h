/* GGUF reader (versions 2 and 3) and streaming writer.
 *
 * Format (llama.cpp docs/gguf.md, ggml/src/gguf.cpp), little-endian:
 *   u32 magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 value_type, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type,
 *                 u64 offset (relative to the data section) },
 *   padding to general.alignment (u32, default 32), then the data section.
 *   string = u64 length + bytes (no NUL); array = u32 elem_type, u64 n,
 *   n elements (arrays of arrays are refused).
 * ne[0] is the fastest (row) dimension: a [rows, cols] PyTorch weight has
 * ne = {cols, rows}. Tensor data offsets must be multiples of the alignment.
 *
 * The reader maps the file once and validates everything before returning:
 * counts and string lengths against the bytes left, known value types,
 * known ggml type ids, ne[0] a multiple of the type's block size, every
 * tensor inside the data section, aligned, and no two tensors overlapping.
 * Values stay in the mapping (numeric arrays may be unaligned: use the
 * element getters). Keys and tensor names are NUL-terminated copies. */
#ifndef PAGODA_MODEL_GGUF_H
#define PAGODA_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"
#include "base/status.h"

typedef enum pg_gguf_type {
    PG_GGUF_U8 = 0,
    PG_GGUF_I8 = 1,
    PG_GGUF_U16 = 2,
    PG_GGUF_I16 = 3,
    PG_GGUF_U32 = 4,
    PG_GGUF_I32 = 5,
    PG_GGUF_F32 = 6,
    PG_GGUF_BOOL = 7,
    PG_GGUF_STRING = 8,
    PG_GGUF_ARRAY = 9,
    PG_GGUF_U64 = 10,
    PG_GGUF_I64 = 11,
    PG_GGUF_F64 = 12,
    PG_GGUF_TYPE_COUNT
} pg_gguf_type;

/* GGML tensor type ids (ggml.h enum ggml_type) that pagoda maps to pg_dtype. */
#define PG_GGML_F32 0
#define PG_GGML_F16 1
#define PG_GGML_Q4_0 2
#define PG_GGML_Q8_0 8
#define PG_GGML_BF16 30

#define PG_GGUF_DEFAULT_ALIGNMENT 32
#define PG_GGUF_MAX_DIMS 4

/* "Q4_K", "IQ2_XS", ... for any ggml type id ever defined; NULL if unknown. */
const char *pg_ggml_type_name(uint32_t ggml_type);
/* The pg_dtype of a ggml type, or PG_DTYPE_COUNT if pagoda cannot load it
 * (F32, F16, BF16, Q8_0, Q4_0, I8, I16, I32, I64, F64 map). */
pg_dtype pg_ggml_type_to_dtype(uint32_t ggml_type);
/* The ggml type id of a pg_dtype, or UINT32_MAX if there is none. */
uint32_t pg_dtype_to_ggml_type(pg_dtype t);
/* "u32", "string", "array", ... ("?" if unknown). */
const char *pg_gguf_type_name(pg_gguf_type t);

typedef struct pg_gguf_tensor {
    const char *name;   /* GGUF name, e.g. "blk.0.attn_q.weight" */
    uint32_t ggml_type; /* ggml type id (may be one pagoda cannot load) */
    pg_dtype dtype;     /* PG_DTYPE_COUNT when unsupported */
    int n_dims;
    int64_t ne[PG_GGUF_MAX_DIMS]; /* GGUF order: ne[0] fastest; unused = 1 */
    uint64_t offset;              /* relative to the data section */
    const void *data;             /* into the mapping */
    size_t nbytes;
} pg_gguf_tensor;

/* An array value: elements live in the mapping. */
typedef struct pg_gguf_array {
    pg_gguf_type type;   /* element type */
    uint64_t n;          /* element count */
    const uint8_t *data; /* first element */
    const uint64_t
        *str_offs; /* STRING arrays: byte offset of element i's length prefix from data */
} pg_gguf_array;

typedef struct pg_gguf pg_gguf;

/* Open and validate a GGUF file (v2 or v3).
 * Errors (one line naming the file): PAGODA_ERR_NOT_FOUND / IO (cannot
 * open), PAGODA_ERR_FORMAT (bad magic, truncated, absurd counts or string
 * lengths, unknown value or tensor type, misaligned / out-of-file /
 * overlapping tensors, duplicate keys or names), PAGODA_ERR_UNSUPPORTED
 * (version 1 or > 3), PAGODA_ERR_NOMEM. */
pagoda_status pg_gguf_open(const char *path, pg_gguf **out);
void pg_gguf_close(pg_gguf *g);

const char *pg_gguf_path(const pg_gguf *g);
uint32_t pg_gguf_version(const pg_gguf *g);
uint32_t pg_gguf_alignment(const pg_gguf *g);
/* Byte offset of the data section in the file. */
uint64_t pg_gguf_data_offset(const pg_gguf *g);

/* ---- metadata */
size_t pg_gguf_n_kv(const pg_gguf *g);
const char *pg_gguf_key_at(const pg_gguf *g, size_t i);
/* Index of `key`, or -1. */
int64_t pg_gguf_find_key(const pg_gguf *g, const char *key);
pg_gguf_type pg_gguf_kv_type(const pg_gguf *g, size_t i);
/* The serialized bytes of kv i (key through value) inside the mapping, so a
 * writer can copy it verbatim (pg_gguf_writer_add_raw_kv). */
const uint8_t *pg_gguf_kv_raw(const pg_gguf *g, size_t i, size_t *len);

/* Typed getters by key. Each returns PAGODA_ERR_NOT_FOUND (message set) when
 * the key is absent and PAGODA_ERR_FORMAT when its type does not fit:
 *  get_int:   any integer type or bool (u64 values above INT64_MAX refused)
 *  get_float: f32, f64 or any integer type
 *  get_bool:  bool (or an integer: nonzero = true)
 *  get_str:   string; *out is NUL-terminated, owned by g, *len may be NULL */
pagoda_status pg_gguf_get_int(const pg_gguf *g, const char *key, int64_t *out);
pagoda_status pg_gguf_get_float(const pg_gguf *g, const char *key, double *out);
pagoda_status pg_gguf_get_bool(const pg_gguf *g, const char *key, bool *out);
pagoda_status pg_gguf_get_str(const pg_gguf *g, const char *key, const char **out, size_t *len);
/* Same, returning `def` (and no error) when the key is absent; a key of the
 * wrong type still fails with PAGODA_ERR_FORMAT. */
pagoda_status pg_gguf_get_int_or(const pg_gguf *g, const char *key, int64_t def, int64_t *out);
pagoda_status pg_gguf_get_float_or(const pg_gguf *g, const char *key, double def, double *out);
pagoda_status pg_gguf_get_bool_or(const pg_gguf *g, const char *key, bool def, bool *out);

/* Required integer keys keys[0..n) into out[i] (an int each), each in
 * [lo, hi]; PAGODA_ERR_FORMAT names the key and value otherwise (errors of
 * pg_gguf_get_int as above). */
pagoda_status pg_gguf_get_ints(const pg_gguf *g, const char *const *keys, int *const *out, int n,
                               int64_t lo, int64_t hi);

/* Array by key (PAGODA_ERR_NOT_FOUND / FORMAT as above). */
pagoda_status pg_gguf_get_array(const pg_gguf *g, const char *key, pg_gguf_array *out);
/* Element i of an array (i < a->n, unchecked beyond an assert-like clamp:
 * out-of-range i returns 0 / NULL). Numeric getters convert from any
 * numeric element type; the string getter returns a pointer into the
 * mapping (NOT NUL-terminated) and its length. */
int64_t pg_gguf_array_int(const pg_gguf_array *a, uint64_t i);
double pg_gguf_array_float(const pg_gguf_array *a, uint64_t i);
const char *pg_gguf_array_str(const pg_gguf_array *a, uint64_t i, size_t *len);

/* ---- tensors (in file order) */
size_t pg_gguf_n_tensors(const pg_gguf *g);
const pg_gguf_tensor *pg_gguf_tensor_at(const pg_gguf *g, size_t i);
/* Tensor by GGUF name, or NULL. */
const pg_gguf_tensor *pg_gguf_find_tensor(const pg_gguf *g, const char *name);

/* ---- writer: metadata and tensor infos first, then tensor data streamed in
 * the order the tensors were added (each padded to the alignment). Nothing
 * the size of the weights is buffered. */
typedef struct pg_gguf_writer pg_gguf_writer;

/* Errors: PAGODA_ERR_NOMEM. version is 3. */
pagoda_status pg_gguf_writer_create(pg_gguf_writer **out);
void pg_gguf_writer_free(pg_gguf_writer *w);
/* Metadata setters (append; keys must be unique, not checked here). */
void pg_gguf_writer_set_u32(pg_gguf_writer *w, const char *key, uint32_t v);
void pg_gguf_writer_set_i32(pg_gguf_writer *w, const char *key, int32_t v);
void pg_gguf_writer_set_u64(pg_gguf_writer *w, const char *key, uint64_t v);
void pg_gguf_writer_set_f32(pg_gguf_writer *w, const char *key, float v);
void pg_gguf_writer_set_bool(pg_gguf_writer *w, const char *key, bool v);
void pg_gguf_writer_set_str(pg_gguf_writer *w, const char *key, const char *v);
/* Array of n numeric elements of `type` (raw little-endian bytes at data). */
void pg_gguf_writer_set_array(pg_gguf_writer *w, const char *key, pg_gguf_type type,
                              const void *data, uint64_t n);
void pg_gguf_writer_set_str_array(pg_gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t n);
/* Append a serialized kv (from pg_gguf_kv_raw). */
void pg_gguf_writer_add_raw_kv(pg_gguf_writer *w, const uint8_t *raw, size_t len);
/* Sets general.alignment too (power of two). Call before begin. */
void pg_gguf_writer_set_alignment(pg_gguf_writer *w, uint32_t alignment);
/* Declare a tensor: ne in GGUF order (ne[0] fastest), n_dims 1..4.
 * Errors: PAGODA_ERR_INVALID_ARG (bad dims, ne[0] not a block multiple). */
pagoda_status pg_gguf_writer_add_tensor(pg_gguf_writer *w, const char *name, uint32_t ggml_type,
                                        int n_dims, const int64_t *ne);
/* Write header, metadata and tensor infos to `path` (created/truncated).
 * Errors: PAGODA_ERR_IO, PAGODA_ERR_NOMEM (a setter failed earlier). */
pagoda_status pg_gguf_writer_begin(pg_gguf_writer *w, const char *path);
/* Append tensor data; calls may split or span tensors freely as long as the
 * bytes come in declaration order. Errors: PAGODA_ERR_IO, INVALID_ARG (more
 * bytes than declared). */
pagoda_status pg_gguf_writer_write(pg_gguf_writer *w, const void *data, size_t n);
/* Check every declared byte was written, flush, close.
 * Errors: PAGODA_ERR_IO, PAGODA_ERR_INVALID_ARG (data missing). */
pagoda_status pg_gguf_writer_finish(pg_gguf_writer *w);

/* GGUF <-> Hugging Face tensor names: each architecture's table
 * (model/arch.h, pg_arch_gguf_to_hf / pg_arch_hf_to_gguf). */

#endif
