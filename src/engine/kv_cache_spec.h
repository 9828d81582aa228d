/* KV cache specs and sizing: what one group of layers keeps per token, how
 * many blocks fit in the KV memory, and parsing of memory sizes.
 *
 * Ideas from vLLM v1: vllm/v1/kv_cache_interface.py (FullAttentionSpec,
 * SlidingWindowSpec, MambaSpec, CrossAttentionSpec: one spec per "KV cache
 * group" of layers) and vllm/v1/core/kv_cache_utils.py
 * (get_num_blocks: available memory / (page size * layers)); the CPU
 * backend's KV space defaults to 4 GiB (VLLM_CPU_KVCACHE_SPACE). */
#ifndef PAGODA_ENGINE_KV_CACHE_SPEC_H
#define PAGODA_ENGINE_KV_CACHE_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

/* Default KV block size in tokens (the attention work will pick it by
 * measurement; vLLM's CPU backend uses 128). */
#define PG_KV_DEFAULT_BLOCK_SIZE 16
/* Default KV cache memory: 4 GiB, like vLLM's VLLM_CPU_KVCACHE_SPACE. */
#define PG_KV_DEFAULT_MEMORY_BYTES (4ULL << 30)

typedef enum pg_kv_cache_kind {
    PG_KV_FULL_ATTENTION = 0, /* every token's K/V kept for the whole request */
    PG_KV_SLIDING_WINDOW,     /* only the last `window` tokens are attended */
    PG_KV_MAMBA,              /* fixed-size recurrent state per request (linear attention) */
    PG_KV_CROSS_ATTENTION,    /* encoder K/V computed once per request (Whisper) */
    PG_KV_KIND_COUNT_
} pg_kv_cache_kind;

/* One KV cache group: layers that share a cache layout and a block table. */
typedef struct pg_kv_cache_spec {
    pg_kv_cache_kind kind;
    int32_t block_size;   /* tokens per block (all groups share it for now) */
    int32_t num_layers;   /* layers in this group */
    int32_t num_kv_heads; /* per layer */
    int32_t head_size;    /* elements per head (K and V alike) */
    int32_t dtype_bytes;  /* bytes per element: 2 for bf16/f16, 1 for int8/fp8 */
    union {
        struct {
            int32_t window; /* tokens; a query at position p sees keys (p-window, p] */
        } sliding;
        struct {
            int64_t state_bytes; /* recurrent + conv state bytes per layer per request */
        } mamba;
        struct {
            int32_t max_encoder_len; /* encoder positions cached per request */
        } cross;
    } u;
} pg_kv_cache_spec;

/* Short name of a kind, e.g. "full_attention". Never NULL. */
const char *pg_kv_cache_kind_name(pg_kv_cache_kind kind);

/* Validate a spec (positive sizes, known kind, window >= 1 ...).
 * Errors: PAGODA_ERR_INVALID_ARG naming the field. */
pagoda_status pg_kv_cache_spec_check(const pg_kv_cache_spec *spec);

/* Bytes of one block of one layer (a "page"): K and V, i.e.
 * 2 * block_size * num_kv_heads * head_size * dtype_bytes; for a mamba group
 * the state bytes. */
uint64_t pg_kv_cache_spec_page_bytes(const pg_kv_cache_spec *spec);

/* Blocks that fit in `mem_bytes` of KV memory when each block stores
 * `block_size` tokens and each token needs `kv_bytes_per_token` bytes summed
 * over all layers (e.g. 2 * layers * kv_heads * head_size * dtype_bytes):
 *   num_blocks = floor(mem_bytes / (block_size * kv_bytes_per_token)).
 * Errors: PAGODA_ERR_INVALID_ARG (zero sizes), PAGODA_ERR_LIMIT (fewer than
 * 2 blocks fit: block 0 is reserved as the null block) or more than INT32_MAX. */
pagoda_status pg_kv_num_blocks(uint64_t mem_bytes, int32_t block_size, uint64_t kv_bytes_per_token,
                               int32_t *num_blocks);

/* Blocks for several groups sharing one pool, vLLM's hybrid layout
 * (kv_cache_utils.py: _get_kv_cache_config_uniform_page_size): one block id
 * addresses one page in each layer of its group, every group has the same
 * page size, and the layers of all groups share max(num_layers) tensors, so
 *   num_blocks = floor(mem_bytes / (page_bytes * max_g num_layers)).
 * Errors: PAGODA_ERR_INVALID_ARG (bad spec, no groups),
 * PAGODA_ERR_UNSUPPORTED (groups with different page sizes or block sizes),
 * PAGODA_ERR_LIMIT as pg_kv_num_blocks. */
pagoda_status pg_kv_num_blocks_for_groups(uint64_t mem_bytes, const pg_kv_cache_spec *specs,
                                          int32_t num_groups, int32_t *num_blocks);

/* Parse a memory size: a decimal number (fraction allowed) and an optional
 * unit, case-insensitive, spaces allowed between: "4GiB", "512MiB", "1.5G",
 * "100000", "2 GB". Units: B; K/KiB, M/MiB, G/GiB, T/TiB are powers of 1024;
 * KB, MB, GB, TB are powers of 1000. The result is rounded down to whole bytes.
 * Errors: PAGODA_ERR_INVALID_ARG with the text and the reason (empty, no
 * digits, negative, unknown unit, trailing characters, overflow past 2^63). */
pagoda_status pg_parse_size(const char *text, uint64_t *bytes);

/* The default `--kv-cache-memory` given the memory available for it
 * (MemAvailable after the weights are loaded, e.g. pg_cpu()->mem_available
 * from base/cpu.h), in bytes: 4 GiB like vLLM's
 * VLLM_CPU_KVCACHE_SPACE, but never more than half of what is available
 * (0 available -> the 4 GiB default, for callers that do not know). */
uint64_t pg_kv_default_memory_bytes(uint64_t available_bytes);

#endif
