/* safetensors reader and streaming writer (huggingface/safetensors format).
 *
 * Format: u64 little-endian N, then N bytes of UTF-8 JSON
 *   {"__metadata__": {str: str}, "name": {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the data buffer; offsets are relative to its start (byte 8 + N).
 * Shapes are PyTorch order (row-major, last dim fastest).
 *
 * The reader maps the file and checks: header length sane (<= 100 MB and
 * inside the file), valid JSON object, known dtype (F32 F16 BF16 I8 U8 I16
 * I32 I64 F64 BOOL; F8_* and others are refused as unsupported), shape
 * non-negative with <= 4 dims, byte size = product(shape) * dtype size,
 * data inside the buffer, no overlaps, no duplicate names. */
#ifndef PAGODA_MODEL_SAFETENSORS_H
#define PAGODA_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/source.h"

#define PG_SAFETENSORS_MAX_HEADER (100u << 20)

typedef struct pg_safetensors pg_safetensors;

/* Errors: PAGODA_ERR_NOT_FOUND / IO (cannot open), PAGODA_ERR_FORMAT
 * (corrupt: message names the file and the tensor), PAGODA_ERR_UNSUPPORTED
 * (unknown dtype, > 4 dims), PAGODA_ERR_NOMEM. */
pagoda_status pg_safetensors_open(const char *path, pg_safetensors **out);
void pg_safetensors_close(pg_safetensors *st);

const char *pg_safetensors_path(const pg_safetensors *st);
size_t pg_safetensors_n_tensors(const pg_safetensors *st);
/* Tensors in header order; names as in the file; data points into the map. */
const pg_tensor *pg_safetensors_tensor_at(const pg_safetensors *st, size_t i);
const pg_tensor *pg_safetensors_find(const pg_safetensors *st, const char *name);

/* safetensors dtype string <-> pg_dtype ("F32", "BF16", ...); PG_DTYPE_COUNT
 * / NULL when unknown. */
pg_dtype pg_safetensors_parse_dtype(const char *s);
const char *pg_safetensors_dtype_name(pg_dtype t);

/* ---- writer: declare tensors, begin (writes the header), stream data in
 * declaration order, finish. The header is padded with spaces to a multiple
 * of 8 bytes, as the reference implementation does. */
typedef struct pg_safetensors_writer pg_safetensors_writer;

pagoda_status pg_safetensors_writer_create(pg_safetensors_writer **out);
void pg_safetensors_writer_free(pg_safetensors_writer *w);
/* Errors: PAGODA_ERR_INVALID_ARG (bad dims / dtype), PAGODA_ERR_NOMEM. */
pagoda_status pg_safetensors_writer_add(pg_safetensors_writer *w, const char *name, pg_dtype dtype,
                                        int ndim, const int64_t *shape);
/* Total data bytes declared so far. */
uint64_t pg_safetensors_writer_data_bytes(const pg_safetensors_writer *w);
pagoda_status pg_safetensors_writer_begin(pg_safetensors_writer *w, const char *path);
pagoda_status pg_safetensors_writer_write(pg_safetensors_writer *w, const void *data, size_t n);
/* Errors: PAGODA_ERR_INVALID_ARG (fewer bytes than declared), PAGODA_ERR_IO. */
pagoda_status pg_safetensors_writer_finish(pg_safetensors_writer *w);

/* Write model.safetensors.index.json: {"metadata": {"total_size": N},
 * "weight_map": {names[i]: files[i]}}. Errors: PAGODA_ERR_IO. */
pagoda_status pg_safetensors_write_index(const char *path, uint64_t total_size,
                                         const char *const *names, const char *const *files,
                                         size_t n);

#endif
