/* KV cache spec validation, block counts and memory size parsing. */
#include "engine/kv_cache_spec.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *pg_kv_cache_kind_name(pg_kv_cache_kind kind) {
    switch (kind) {
    case PG_KV_FULL_ATTENTION:
        return "full_attention";
    case PG_KV_SLIDING_WINDOW:
        return "sliding_window";
    case PG_KV_MAMBA:
        return "mamba";
    case PG_KV_CROSS_ATTENTION:
        return "cross_attention";
    default:
        return "unknown";
    }
}

pagoda_status pg_kv_cache_spec_check(const pg_kv_cache_spec *spec) {
    if (!spec) return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache spec: NULL");
    if ((unsigned)spec->kind >= PG_KV_KIND_COUNT_)
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache spec: unknown kind %d", (int)spec->kind);
    const char *k = pg_kv_cache_kind_name(spec->kind);
    if (spec->block_size <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache spec (%s): block_size %d must be > 0", k,
                        spec->block_size);
    if (spec->num_layers <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache spec (%s): num_layers %d must be > 0", k,
                        spec->num_layers);
    if (spec->kind == PG_KV_MAMBA) {
        if (spec->u.mamba.state_bytes <= 0)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "kv cache spec (mamba): state_bytes %lld must be > 0",
                            (long long)spec->u.mamba.state_bytes);
        return PAGODA_OK;
    }
    if (spec->num_kv_heads <= 0 || spec->head_size <= 0 || spec->dtype_bytes <= 0)
        return pg_error(
            PAGODA_ERR_INVALID_ARG,
            "kv cache spec (%s): num_kv_heads %d, head_size %d, dtype_bytes %d must be > 0", k,
            spec->num_kv_heads, spec->head_size, spec->dtype_bytes);
    if (spec->kind == PG_KV_SLIDING_WINDOW && spec->u.sliding.window <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "kv cache spec (sliding_window): window %d must be > 0",
                        spec->u.sliding.window);
    if (spec->kind == PG_KV_CROSS_ATTENTION && spec->u.cross.max_encoder_len <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "kv cache spec (cross_attention): max_encoder_len %d must be > 0",
                        spec->u.cross.max_encoder_len);
    return PAGODA_OK;
}

uint64_t pg_kv_cache_spec_page_bytes(const pg_kv_cache_spec *spec) {
    if (spec->kind == PG_KV_MAMBA) return (uint64_t)spec->u.mamba.state_bytes;
    return 2ULL * (uint64_t)spec->block_size * (uint64_t)spec->num_kv_heads *
           (uint64_t)spec->head_size * (uint64_t)spec->dtype_bytes;
}

static pagoda_status blocks_from_bytes(uint64_t mem_bytes, uint64_t bytes_per_block,
                                       int32_t *num_blocks) {
    if (bytes_per_block == 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache: a block of 0 bytes");
    uint64_t n = mem_bytes / bytes_per_block;
    if (n < 2)
        return pg_error(PAGODA_ERR_LIMIT,
                        "kv cache: %llu bytes hold %llu blocks of %llu bytes; need at least 2 "
                        "(block 0 is the reserved null block)",
                        (unsigned long long)mem_bytes, (unsigned long long)n,
                        (unsigned long long)bytes_per_block);
    if (n > INT32_MAX)
        return pg_error(PAGODA_ERR_LIMIT, "kv cache: %llu blocks exceed the limit of %d blocks",
                        (unsigned long long)n, INT32_MAX);
    *num_blocks = (int32_t)n;
    return PAGODA_OK;
}

pagoda_status pg_kv_num_blocks(uint64_t mem_bytes, int32_t block_size, uint64_t kv_bytes_per_token,
                               int32_t *num_blocks) {
    if (block_size <= 0 || kv_bytes_per_token == 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "kv cache: block_size %d and kv_bytes_per_token %llu must be > 0",
                        block_size, (unsigned long long)kv_bytes_per_token);
    if (kv_bytes_per_token > UINT64_MAX / (uint64_t)block_size)
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache: block bytes overflow (%d x %llu)",
                        block_size, (unsigned long long)kv_bytes_per_token);
    return blocks_from_bytes(mem_bytes, (uint64_t)block_size * kv_bytes_per_token, num_blocks);
}

pagoda_status pg_kv_num_blocks_for_groups(uint64_t mem_bytes, const pg_kv_cache_spec *specs,
                                          int32_t num_groups, int32_t *num_blocks) {
    if (!specs || num_groups <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "kv cache: %d groups; need at least one",
                        num_groups);
    uint64_t page = 0;
    int32_t max_layers = 0;
    for (int32_t g = 0; g < num_groups; g++) {
        pagoda_status st = pg_kv_cache_spec_check(&specs[g]);
        if (st) return st;
        uint64_t pb = pg_kv_cache_spec_page_bytes(&specs[g]);
        if (g == 0) page = pb;
        if (pb != page || specs[g].block_size != specs[0].block_size)
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "kv cache: group %d (%s) has page %llu bytes / block size %d, group 0 "
                            "has %llu / %d; groups must share both",
                            g, pg_kv_cache_kind_name(specs[g].kind), (unsigned long long)pb,
                            specs[g].block_size, (unsigned long long)page, specs[0].block_size);
        if (specs[g].num_layers > max_layers) max_layers = specs[g].num_layers;
    }
    return blocks_from_bytes(mem_bytes, page * (uint64_t)max_layers, num_blocks);
}

pagoda_status pg_parse_size(const char *text, uint64_t *bytes) {
    if (!text) return pg_error(PAGODA_ERR_INVALID_ARG, "size: missing value");
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (*p == '-') return pg_error(PAGODA_ERR_INVALID_ARG, "size '%s': must not be negative", text);
    if (*p == '+') p++;
    /* integer and fraction parts, parsed by hand (no locale, no hex/exponent) */
    uint64_t ip = 0;
    double frac = 0.0, scale = 0.1;
    int digits = 0;
    bool overflow = false;
    while (isdigit((unsigned char)*p)) {
        unsigned d = (unsigned)(*p - '0');
        if (ip > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            ip = ip * 10 + d;
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            frac += scale * (*p - '0');
            scale *= 0.1;
            p++;
            digits++;
        }
    }
    if (digits == 0)
        return pg_error(
            PAGODA_ERR_INVALID_ARG,
            "size '%s': expected a number with an optional unit, e.g. 4GiB, 512MiB, 1.5G", text);
    while (isspace((unsigned char)*p))
        p++;
    const char *unit = p;
    size_t ulen = 0;
    while (isalpha((unsigned char)unit[ulen]))
        ulen++;
    const char *rest = unit + ulen;
    while (isspace((unsigned char)*rest))
        rest++;
    if (*rest)
        return pg_error(PAGODA_ERR_INVALID_ARG, "size '%s': unexpected '%s' after the unit", text,
                        rest);
    static const struct {
        const char *name;
        uint64_t mult;
    } UNITS[] = {
        {"", 1},
        {"b", 1},
        {"k", 1ULL << 10},
        {"kib", 1ULL << 10},
        {"kb", 1000ULL},
        {"m", 1ULL << 20},
        {"mib", 1ULL << 20},
        {"mb", 1000000ULL},
        {"g", 1ULL << 30},
        {"gib", 1ULL << 30},
        {"gb", 1000000000ULL},
        {"t", 1ULL << 40},
        {"tib", 1ULL << 40},
        {"tb", 1000000000000ULL},
    };
    uint64_t mult = 0;
    for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++)
        if (strlen(UNITS[i].name) == ulen && strncasecmp(unit, UNITS[i].name, ulen) == 0)
            mult = UNITS[i].mult;
    if (!mult)
        return pg_error(
            PAGODA_ERR_INVALID_ARG,
            "size '%s': unknown unit '%.*s' (use B, KiB, MiB, GiB, TiB, K, M, G, T, KB, "
            "MB, GB, TB)",
            text, (int)ulen, unit);
    const uint64_t limit = 1ULL << 63;
    if (overflow || ip > limit / mult)
        return pg_error(PAGODA_ERR_INVALID_ARG, "size '%s': too large (limit 2^63 bytes)", text);
    uint64_t whole = ip * mult;
    double extra = floor(frac * (double)mult);
    if ((double)whole + extra > (double)limit)
        return pg_error(PAGODA_ERR_INVALID_ARG, "size '%s': too large (limit 2^63 bytes)", text);
    *bytes = whole + (uint64_t)extra;
    return PAGODA_OK;
}

uint64_t pg_kv_default_memory_bytes(uint64_t available_bytes) {
    if (available_bytes == 0) return PG_KV_DEFAULT_MEMORY_BYTES;
    uint64_t half = available_bytes / 2;
    return half < PG_KV_DEFAULT_MEMORY_BYTES ? half : PG_KV_DEFAULT_MEMORY_BYTES;
}
