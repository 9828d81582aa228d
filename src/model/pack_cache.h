/* The packed-weight cache: the first load of a model writes the packed
 * GEMM weights (kernels/gemm.h) of every linear layer to one file; a repeat
 * load with the same key maps that file read-only and adopts the weights
 * from it instead of converting, quantizing and packing again.
 *
 * Location: $PAGODA_CACHE_DIR, else $XDG_CACHE_HOME/pagoda, else
 * $HOME/.cache/pagoda; file <key hash, 16 hex>.pgpack. Disabled by
 * PAGODA_PACK_CACHE=0 or pg_model_options.no_pack_cache (`--no-pack-cache`).
 *
 * Key (a text, stored whole in the file and compared byte for byte; its
 * XXH3-64 names the file): the cache format version and
 * PG_PACK_CACHE_CODE_VERSION (bumped whenever a packed layout or a packing
 * rule changes), the pagoda version; the source (its path, the size and
 * mtime of the path or of every *.safetensors / *.gguf / *.json file of a
 * model directory, an XXH3-64 over the tensor table: names, dtypes, shapes,
 * sizes and the first and last 64 bytes of each tensor); the kernel table
 * (ISA, and name and tile shape of every GEMM microkernel); every option
 * that changes packing (compute dtype, quantization bits / group /
 * activation group, PAGODA_QUANT_LM_HEAD); the tensor-parallel shard
 * (rank / size: 0 / 1).
 *
 * File (little-endian, host layout; docs/ARCHITECTURE.md "Packed-weight
 * cache"): a 64-byte header (magic "PGPACK1\0", version, key length, weight
 * count, table offset, file size, XXH3-64 of the key + table, XXH3-64 of
 * the header), the key text, a table with per weight the
 * PG_GEMM_DESC_WORDS layout words, data offset, bytes and XXH3-64 of the
 * data; then the data, each weight at a 4096-byte boundary. Written to a
 * temporary file in the directory and renamed (atomic). On load the header,
 * key, table and every weight's checksum are verified; a damaged, truncated
 * or mismatching file is never used: the weights are packed again and the
 * file rewritten, with a warning. A directory that cannot be written only
 * warns. */
#ifndef PAGODA_MODEL_PACK_CACHE_H
#define PAGODA_MODEL_PACK_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/gemm.h"
#include "model/model.h"
#include "model/source.h"

/* Bump when a packed layout, a packing rule or the load order changes. */
#define PG_PACK_CACHE_CODE_VERSION 2
#define PG_PACK_CACHE_FORMAT 1

typedef struct pg_pack_cache pg_pack_cache;

/* What the last load on this thread did with the cache. */
typedef enum pg_pack_cache_outcome {
    PG_PACK_CACHE_OFF = 0,     /* disabled, or no load ran */
    PG_PACK_CACHE_HIT,         /* every weight adopted from the file */
    PG_PACK_CACHE_WRITTEN,     /* no file: packed and written */
    PG_PACK_CACHE_REWRITTEN,   /* a bad or mismatching file: packed and rewritten (warned) */
    PG_PACK_CACHE_WRITE_FAILED /* packed; the file could not be written (warned) */
} pg_pack_cache_outcome;

/* The cache directory into buf (cap bytes): see above. Returns false when
 * none can be formed (no HOME) or it does not fit. */
bool pg_pack_cache_dir(char *buf, size_t cap);

/* The key text of (src, o, kt, tp_rank, tp_size) into a malloc'ed string
 * (NULL: out of memory). kt NULL = pg_kernels(). */
char *pg_pack_cache_key(const pg_model_source *src, const pg_model_options *o,
                        const pg_kernel_table *kt, int tp_rank, int tp_size);

/* Start the cache session of one model load on this thread: computes the
 * key, maps and verifies an existing file. NULL when disabled (or out of
 * memory: the load then just packs). While a session is current
 * (pg_pack_cache_current), model/linear.c takes each packed weight from it
 * in load order (pg_pack_cache_take) or records the weight it packed
 * (pg_pack_cache_put). */
pg_pack_cache *pg_pack_cache_begin(const pg_model_source *src, const pg_model_options *o);
/* The session of this thread, or NULL. */
pg_pack_cache *pg_pack_cache_current(void);
/* The next weight of the file when it has the expected shape (n, k,
 * swiglu): true and *out (its data borrowed from the mapping, which lives
 * until the last such weight is freed). false: pack it (a shape mismatch
 * stops taking: the file is rewritten at the end). */
bool pg_pack_cache_take(pg_pack_cache *c, int64_t n, int64_t k, bool swiglu,
                        pg_packed_weight **out);
/* Record the next weight (packed or taken) for writing; w must live until
 * pg_pack_cache_end. */
void pg_pack_cache_put(pg_pack_cache *c, pg_packed_weight *w);
/* End the session: when the load succeeded (ok) and the file was missing or
 * not wholly used, write it (atomically). Frees c (NULL: no-op). */
void pg_pack_cache_end(pg_pack_cache *c, bool ok);

/* The outcome of this thread's last session (tests, reports). */
pg_pack_cache_outcome pg_pack_cache_last_outcome(void);

#endif
