/* Engine options shared by `pagoda generate` and `pagoda bench
 * throughput|latency`: --max-model-len, --max-num-seqs,
 * --max-num-batched-tokens, --kv-cache-memory, --kv-cache-dtype,
 * --block-size, --no-prefix-caching, --prefix-caching-hash-algo, --no-pack-cache, --threads,
 * --quantization,
 * --quant-group-size, --quant-act-group, --dtype, --tokenizer,
 * --max-num-encoder-tokens, --speculative-config, and --revision / --gguf-file
 * for a hub MODEL. */
#ifndef PAGODA_CLI_ENGINE_ARGS_H
#define PAGODA_CLI_ENGINE_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "pagoda.h"

#define PG_ENGINE_ARGS_HELP                                                                        \
    "engine:\n"                                                                                    \
    "  --dtype D                   auto | bfloat16 | float16 (= half) | float32 (= float):\n"      \
    "                              compute dtype of the linear layers; auto: F32 weights in\n"     \
    "                              f32, F16/BF16 weights in bfloat16; float32 widens 16-bit\n"     \
    "                              weights (reproduces an f32 reference); float16 runs as\n"       \
    "                              bfloat16\n"                                                     \
    "  --max-model-len N           context limit in tokens (default: the model's maximum)\n"       \
    "  --max-num-seqs N            requests per step (default 256)\n"                              \
    "  --max-num-batched-tokens N  token budget per step (default 4096)\n"                         \
    "  --kv-cache-memory SIZE      KV cache bytes, e.g. 4GiB, 512MiB (default 4 GiB, at most\n"    \
    "                              half the available memory)\n"                                   \
    "  --kv-cache-dtype D          auto | bfloat16 | float32 (auto: follows --dtype; with\n"       \
    "                              --dtype auto, F32 models keep F32)\n"                           \
    "  --block-size N              tokens per KV block, multiple of 16 (default 16)\n"             \
    "  --no-prefix-caching         turn automatic prefix caching off\n"                            \
    "  --no-pack-cache             neither read nor write the packed-weight cache\n"               \
    "                              ($PAGODA_CACHE_DIR, else ~/.cache/pagoda)\n"                    \
    "  --prefix-caching-hash-algo A  sha256 (default) | xxhash: block hash of the prefix\n"        \
    "                              cache; xxhash is cheaper but clients can forge collisions\n"    \
    "                              (trusted clients only; logs a warning)\n"                       \
    "  --state-cache-memory SIZE   hybrid models (Qwen3.5): recurrent-state snapshots for\n"       \
    "                              prefix caching, out of --kv-cache-memory (default a quarter)\n" \
    "  --threads N                 compute threads (default: one per physical core; with -tp,\n"    \
    "                              per rank: the cores divided by the ranks)\n"                    \
    "  -tp, --tensor-parallel-size N  split the model over N ranks (forked on this host, or\n"    \
    "                              the MPI processes under mpirun); default 1\n"                   \
    "  --quantization Q            w8a8 | w4a8: quantize F32/F16/BF16 linear weights at load\n"    \
    "  --quant-group-size N        scale group for --quantization (0 = per channel, default;\n"    \
    "                              32, 64, 128, ...)\n"                                            \
    "  --quant-act-group N         activation scales per token and group of N (0 = per token,\n"   \
    "                              default; 32 = llama.cpp Q8_0's blocks: closer to the\n"         \
    "                              unquantized model); weights then use groups of N too\n"       \
    "  --max-num-encoder-tokens N  encoder-decoder models: encoder rows per step (default\n"     \
    "                              1024)\n"                                                     \
    "  --revision R                MODEL is a hub repo id: its branch, tag or commit (main)\n"  \
    "  --gguf-file NAME            MODEL is a hub repo id: the .gguf file to use from it\n" \
    "  --speculative-config JSON   speculative decoding, vLLM's: '{\"method\": \"ngram\",\n"       \
    "                              \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4,\n"     \
    "                              \"prompt_lookup_min\": 2}' (also disable_by_batch_size,\n"      \
    "                              max_batch_tokens: drafts while decodes + drafts <= it, 16),\n" \
    "                              or '{\"method\": \"draft_model\", \"model\": PATH,\n"           \
    "                              \"num_speculative_tokens\": 4}' (a draft model of the same\n"   \
    "                              tokenizer; its KV cache on top of --kv-cache-memory),\n"       \
    "                              or '{\"method\": \"mtp\", \"num_speculative_tokens\": 2}'\n"    \
    "                              (the checkpoint's MTP head: Qwen3.5)\n"

/* If argv[*i] is an engine option, consume it (and its value) into o and
 * return 1; 0 if it is not one; -1 on a bad value (message printed with
 * `cmd` as prefix). */
/* --dtype value: auto, bfloat16, float16, half, float32, float (vLLM's
 * names); false for anything else. */
bool pg_engine_args_parse_dtype(const char *v, pagoda_dtype *out);

int pg_engine_args_parse(const char *cmd, int argc, char **argv, int *i, pagoda_engine_options *o);

/* After the whole command line is parsed: the options that only make sense
 * together (--quant-act-group needs --quantization and a matching
 * --quant-group-size). Returns 0, or prints one line with `cmd` as prefix
 * and returns 2 (a usage error, in every command that takes engine
 * options, before any model is loaded). */
int pg_engine_args_check(const char *cmd, const pagoda_engine_options *o);

#endif
