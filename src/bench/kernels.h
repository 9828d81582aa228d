/* Kernel microbenchmarks (`pagoda bench kernels`, like llama.cpp's
 * test-backend-ops perf mode / vLLM's benchmarks/kernels): in one run, on one
 * thread pool,
 *   peaks      BF16 (VDPBF16PS / BFMMLA), int8 (VPDPBUSD / SMMLA / SDOT) and
 *              F32 FMA throughput with 16 independent accumulators on every
 *              pool thread, and the read bandwidth (src/bench/harness.h);
 *   gemm       the prepacked BF16 (or F32) GEMM (kernels/gemm.h) on the
 *              model's linear layers as src/model/llama.c runs them: fused
 *              qkv [(heads + 2 kv_heads) * head_dim, hidden], o (residual
 *              epilogue), the gate+up SwiGLU pair, down (residual), lm_head;
 *              at each M: time, GFLOP/s, % of the peak, GB/s of packed
 *              weight bytes, % of the read bandwidth;
 *   qgemm      the same for W8A8 / W4A8 (kernels/qgemm.h; the lm_head
 *              quantized by the engine's policy, docs/QUANTIZATION.md);
 *   attention  paged attention (kernels/attention.h) decode and prefill at
 *              a context length against the straightforward reference
 *              pg_ref_attention, in the same run (speed-up ratio);
 *   quk        (only when asked) the table's quantized microkernels alone,
 *              one full tile over K = 2048 on L1-resident buffers, on the
 *              calling thread: % of the int8 peak per CPU second for W8 and
 *              W4, per channel, group 32 and group 128 (the kernel's own
 *              ceiling: no driver, no memory traffic; docs/PERFORMANCE.md).
 * Method (the one docs/PERFORMANCE.md's GEMM sections describe): each GEMM
 * timing is paired with its baselines (read bandwidth, peak) measured right
 * before it, the ratio is taken per pair and the median over --rounds is
 * reported, plus the same ratio per CPU second ("cpu" columns: robust to
 * other jobs taking the cores). For M <= 32 a shape cycles through enough
 * packed copies (>= 256 MiB, 64 MiB with quick) that its weights come from
 * DRAM, as in a decode step. Weights are random (never loaded): only the
 * model's shapes are used. */
#ifndef PAGODA_BENCH_KERNELS_H
#define PAGODA_BENCH_KERNELS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/dtype.h"
#include "base/status.h"

/* The shapes of a Llama-family decoder that the kernels see. */
typedef struct pg_bench_model_shape {
    char source[256]; /* the MODEL argument, or "Llama-3.2-1B shape (built in)" */
    int hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
} pg_bench_model_shape;

/* Llama-3.2-1B: hidden 2048, 16 layers, 32/8 heads of 64, ffn 8192, vocab
 * 128256 (meta-llama/Llama-3.2-1B config.json). */
void pg_bench_shape_llama_1b(pg_bench_model_shape *s);

/* Shapes of MODEL from its config only (no weights are read): a Hugging Face
 * directory's config.json (pg_hf_config_parse), a config.json file itself,
 * a GGUF file's metadata (pg_model_source_open: mmap, nothing copied), or an
 * "org/name" repo id (HF cache, downloaded when missing). Errors: those of
 * pg_model_resolve, pg_read_small_file, pg_hf_config_parse and
 * pg_model_source_open (one line naming the file). */
pagoda_status pg_bench_shape_from_model(const char *model, pg_bench_model_shape *s);

enum {
    PG_BENCH_KERNEL_GEMM = 1,
    PG_BENCH_KERNEL_QGEMM = 2,
    PG_BENCH_KERNEL_ATTENTION = 4,
    PG_BENCH_KERNEL_QUK = 8,
    PG_BENCH_MAX_M = 8,
    PG_BENCH_MAX_ROUNDS = 15,
    PG_BENCH_MAX_GEMM_M = 4096,
};

typedef struct pg_bench_kernels_opts {
    pg_bench_model_shape shape;
    unsigned kernels;          /* PG_BENCH_KERNEL_* bits */
    int64_t m[PG_BENCH_MAX_M]; /* GEMM row counts (tokens of a step) */
    int n_m;                   /* default 3: 512, 32, 1 */
    int threads;               /* pool threads; 0: one per physical core */
    int rounds;                /* 1..PG_BENCH_MAX_ROUNDS, default 3 */
    bool quick;                /* 64 MiB of copies, 64 MiB bandwidth buffer, no lm_head,
                                  attention: decode b1 and prefill over a prefix only */
    pg_dtype gemm_dtype;       /* PG_BF16 (default) or PG_F32 */
    int quant_bits;            /* 8 (W8A8, default) or 4 (W4A8) */
    int64_t quant_group;       /* 0: per channel (default); else a multiple of 32 */
    bool act_group;            /* group-wise: activation scales per token and group
                                  (the GGUF Q8_0 / Q4_0 path, pg_qweight.act_group) */
    bool mxfp4;                /* qgemm: MXFP4 layers (kernels/gemm.h "MXFP4") measured
                                  beside W4A8 group 32 with activation groups (the
                                  baseline, same rounds); implies W4, group 32, act_group */
    int context;               /* attention context in tokens (default 2048) */
    int block_size;            /* KV block size (default PG_KV_DEFAULT_BLOCK_SIZE) */
    pg_dtype kv_dtypes[2];     /* KV cache dtypes measured (default BF16) */
    int n_kv_dtypes;
} pg_bench_kernels_opts;

/* Defaults as above, shape Llama-3.2-1B, gemm, qgemm and attention. */
void pg_bench_kernels_defaults(pg_bench_kernels_opts *o);

/* Run the selected benchmarks, print the report to `out` (NULL: silent) and
 * return the results as a cJSON object in *json (NULL: not built; free
 * with cJSON_Delete). Keys: "cpu", "threads", "rounds", "quick", "model"
 * {source, hidden_size, ...}, "peaks" {bf16, int8, f32: {instruction,
 * available, gflops, gflops_per_cpu_s}, read_bandwidth: {gbs,
 * gbs_per_cpu_s}}, "gemm" / "qgemm" {dtype or scheme, variant, peak,
 * results: [{m, layer, n, k, swiglu, ms, gflops, pct_peak, pct_peak_cpu,
 * gbs, pct_read_bw, pct_read_bw_cpu}], weights_partly_cached: an M = 1 row
 * above 100% of the read bandwidth} (pct_peak* absent when this CPU has
 * no loop for that peak), "attention" {context, block_size, heads,
 * kv_heads, head_dim, threads, results: [{scenario, kv_dtype, n_seqs,
 * q_len, kv_len, ref_ms, fast_1t_ms, speedup_1t, fast_ms, speedup,
 * gflops}]}, "quk" {peak_int8_per_cpu_s, results: [{bits, variant, mr, nr,
 * group, gops_per_cpu_s, pct_peak_cpu}]} (pct_peak_cpu absent without an int8
 * peak loop). Medians over the rounds; ratios are medians of per-round
 * ratios. Errors: PAGODA_ERR_INVALID_ARG (shape or option out of range,
 * one line naming it), PAGODA_ERR_NOMEM (also before anything is
 * allocated when the estimated bytes of the GEMM suites plus the
 * bandwidth buffer exceed the available memory, MemAvailable: the message
 * names both), and those of the kernels. */
struct cJSON;
pagoda_status pg_bench_kernels_run(const pg_bench_kernels_opts *o, FILE *out, struct cJSON **json);

#endif
