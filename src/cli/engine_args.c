/* Engine options shared by the CLI commands (see engine_args.h). */
#include "cli/engine_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "engine/kv_cache_spec.h"

static bool parse_i32(const char *s, long lo, long hi, int32_t *out) {
    long long v;
    if (!pg_args_long(s, lo, hi, &v)) return false;
    *out = (int32_t)v;
    return true;
}

bool pg_engine_args_parse_dtype(const char *v, pagoda_dtype *out) {
    static const struct {
        const char *name;
        pagoda_dtype d;
    } names[] = {{"auto", PAGODA_DTYPE_AUTO},   {"bfloat16", PAGODA_DTYPE_BF16},
                 {"float16", PAGODA_DTYPE_F16}, {"half", PAGODA_DTYPE_F16},
                 {"float32", PAGODA_DTYPE_F32}, {"float", PAGODA_DTYPE_F32}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(v, names[k].name)) {
            *out = names[k].d;
            return true;
        }
    return false;
}

int pg_engine_args_parse(const char *cmd, int argc, char **argv, int *i, pagoda_engine_options *o) {
    const char *a = argv[*i];
    if (!strcmp(a, "--no-prefix-caching")) {
        o->enable_prefix_caching = false;
        return 1;
    }
    if (!strcmp(a, "--no-pack-cache")) {
        o->no_pack_cache = true;
        return 1;
    }
    static const char *const with_value[] = {
        "--max-model-len",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--kv-cache-memory",
        "--kv-cache-dtype",
        "--block-size",
        "--threads",
        "--tensor-parallel-size",
        "-tp",
        "--quantization",
        "--quant-group-size",
        "--quant-act-group",
        "--dtype",
        "--state-cache-memory",
        "--tokenizer",
        "--max-num-encoder-tokens",
        "--prefix-caching-hash-algo",
        "--speculative-config",
        "--revision",
        "--gguf-file",
    };
    bool known = false;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
        known |= !strcmp(a, with_value[k]);
    if (!known) return 0;
    const char *v = pg_args_value(cmd, argc, argv, i);
    if (!v) return -1;
    bool ok = true;
    const char *want = NULL;
    if (!strcmp(a, "--speculative-config")) {
        if (pagoda_speculative_config_parse(v, &o->speculative) != PAGODA_OK) {
            fprintf(stderr, "%s: --speculative-config: %s\n", cmd, pagoda_last_error());
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--max-model-len"))
        ok = parse_i32(v, 2, 1L << 30, &o->max_model_len), want = "an integer in [2, 2^30]";
    else if (!strcmp(a, "--max-num-seqs"))
        ok = parse_i32(v, 1, 1L << 20, &o->max_num_seqs), want = "an integer in [1, 2^20]";
    else if (!strcmp(a, "--max-num-batched-tokens"))
        ok = parse_i32(v, 1, 1L << 24, &o->max_num_batched_tokens),
        want = "an integer in [1, 2^24]";
    else if (!strcmp(a, "--block-size"))
        ok = parse_i32(v, 16, 1024, &o->block_size) && o->block_size % 16 == 0,
        want = "a multiple of 16 in [16, 1024]";
    else if (!strcmp(a, "--quant-group-size"))
        ok = parse_i32(v, 0, 1L << 20, &o->quant_group_size) && o->quant_group_size % 32 == 0,
        want = "0 or a multiple of 32";
    else if (!strcmp(a, "--quant-act-group"))
        ok = parse_i32(v, 0, 4096, &o->quant_act_group) && o->quant_act_group % 32 == 0,
        want = "0 (per token) or a multiple of 32 up to 4096";
    else if (!strcmp(a, "--quantization")) {
        want = "w8a8, w4a8 or none";
        if (!strcmp(v, "w8a8"))
            o->quantization = 8;
        else if (!strcmp(v, "w4a8"))
            o->quantization = 4;
        else if (!strcmp(v, "none"))
            o->quantization = 0;
        else
            ok = false;
    } else if (!strcmp(a, "--dtype")) {
        ok = pg_engine_args_parse_dtype(v, &o->dtype);
        want = "auto, bfloat16, float16 (= half) or float32 (= float)";
    } else if (!strcmp(a, "--tokenizer")) {
        ok = *v != 0, want = "a tokenizer.json, a directory holding one, or a .tiktoken file";
        o->tokenizer = v;
    } else if (!strcmp(a, "--revision")) {
        ok = *v != 0, want = "a branch, tag or commit of the hub repo";
        o->revision = v;
    } else if (!strcmp(a, "--gguf-file")) {
        ok = *v != 0, want = "a .gguf file name in the hub repo";
        o->gguf_file = v;
    } else if (!strcmp(a, "--max-num-encoder-tokens")) {
        ok = parse_i32(v, 1, 1L << 24, &o->max_num_encoder_tokens),
        want = "an integer in [1, 2^24]";
    } else if (!strcmp(a, "--threads"))
        ok = parse_i32(v, 1, 1024, &o->num_threads), want = "an integer in [1, 1024]";
    else if (!strcmp(a, "--tensor-parallel-size") || !strcmp(a, "-tp"))
        ok = parse_i32(v, 1, 64, &o->tensor_parallel_size), want = "an integer in [1, 64]";
    else if (!strcmp(a, "--prefix-caching-hash-algo")) {
        /* vLLM's option and values (its *_cbor variants serialize a Python
         * tuple and mean nothing here) */
        want = "sha256 (default) or xxhash";
        if (!strcmp(v, "sha256"))
            o->prefix_caching_hash_algo = PAGODA_PREFIX_HASH_SHA256;
        else if (!strcmp(v, "xxhash"))
            o->prefix_caching_hash_algo = PAGODA_PREFIX_HASH_XXHASH;
        else
            ok = false;
    } else if (!strcmp(a, "--kv-cache-memory")) {
        ok = pg_parse_size(v, &o->kv_cache_memory) == PAGODA_OK && o->kv_cache_memory > 0;
        pg_clear_error();
        want = "a positive size such as 4GiB or 512MiB";
    } else if (!strcmp(a, "--state-cache-memory")) {
        ok = pg_parse_size(v, &o->state_cache_memory) == PAGODA_OK && o->state_cache_memory > 0;
        pg_clear_error();
        want = "a positive size such as 1GiB or 256MiB";
    } else if (!strcmp(a, "--kv-cache-dtype")) {
        want = "auto, bfloat16 or float32";
        if (!strcmp(v, "auto"))
            o->kv_cache_dtype = PAGODA_KV_AUTO;
        else if (!strcmp(v, "bfloat16") || !strcmp(v, "bf16"))
            o->kv_cache_dtype = PAGODA_KV_BF16;
        else if (!strcmp(v, "float32") || !strcmp(v, "f32") || !strcmp(v, "float"))
            o->kv_cache_dtype = PAGODA_KV_F32;
        else
            ok = false;
    }
    if (!ok) {
        pg_args_bad_value(cmd, a, v, want);
        return -1;
    }
    return 1;
}

int pg_engine_args_check(const char *cmd, const pagoda_engine_options *o) {
    if (o->quant_act_group && !o->quantization) {
        /* GGUF Q8_0 / Q4_0 weights carry their own scales and already run
         * with activation groups of 32 (their blocks): nothing to ask for */
        fprintf(stderr,
                "%s: --quant-act-group applies to load-time quantization (--quantization w8a8 "
                "or w4a8); GGUF Q8_0/Q4_0 already use activation groups of 32\n",
                cmd);
        return 2;
    }
    if (o->quant_act_group && o->quant_group_size && o->quant_group_size != o->quant_act_group) {
        fprintf(stderr,
                "%s: --quant-act-group %d needs --quant-group-size %d or 0 (activation groups "
                "are the weight groups), got %d\n",
                cmd, o->quant_act_group, o->quant_act_group, o->quant_group_size);
        return 2;
    }
    return 0;
}
