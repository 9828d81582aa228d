/* Kernel microbenchmarks: see kernels.h. */
#include "bench/kernels.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/cpu.h"
#include "base/pool.h"
#include "bench/harness.h"
#include "engine/kv_cache_spec.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/qgemm.h"
#include "model/hf_config.h"
#include "model/mapped_file.h"
#include "model/source.h"

/* ------------------------------------------------------------ shapes */

void pg_bench_shape_llama_1b(pg_bench_model_shape *s) {
    *s = (pg_bench_model_shape){.hidden = 2048,
                                .layers = 16,
                                .heads = 32,
                                .kv_heads = 8,
                                .head_dim = 64,
                                .ffn = 8192,
                                .vocab = 128256};
    snprintf(s->source, sizeof s->source, "Llama-3.2-1B shape (built in)");
}

pagoda_status pg_bench_shape_from_model(const char *model, pg_bench_model_shape *s) {
    char path[PATH_MAX];
    bool is_gguf = false;
    size_t n = strlen(model);
    struct stat mb;
    pagoda_status st = PAGODA_OK;
    if (n >= 5 && !strcmp(model + n - 5, ".json") && stat(model, &mb) == 0 && S_ISREG(mb.st_mode))
        snprintf(path, sizeof path, "%s", model); /* a config.json file given as is */
    else if ((st = pg_model_resolve(model, path, sizeof path, &is_gguf)))
        return st;
    pg_model_config cfg;
    if (is_gguf) {
        pg_model_source *src;
        if ((st = pg_model_source_open(path, &src))) return st;
        cfg = *pg_model_source_config(src);
        pg_model_source_free(src);
    } else {
        /* a HF directory's config.json, or a config.json file given as is */
        char file[PATH_MAX + 16];
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            snprintf(file, sizeof file, "%s/config.json", path);
        else
            snprintf(file, sizeof file, "%s", path);
        char *json;
        size_t len;
        if ((st = pg_read_small_file(file, 16u << 20, &json, &len))) return st;
        pg_model_config_init(&cfg);
        st = pg_hf_config_parse(json, len, file, &cfg);
        free(json);
        if (st) return st;
    }
    *s = (pg_bench_model_shape){.hidden = cfg.hidden_size,
                                .layers = cfg.num_hidden_layers,
                                .heads = cfg.num_attention_heads,
                                .kv_heads = cfg.num_key_value_heads,
                                .head_dim = cfg.head_dim,
                                .ffn = cfg.intermediate_size,
                                .vocab = cfg.vocab_size};
    snprintf(s->source, sizeof s->source, "%s", model);
    return PAGODA_OK;
}

void pg_bench_kernels_defaults(pg_bench_kernels_opts *o) {
    memset(o, 0, sizeof *o);
    pg_bench_shape_llama_1b(&o->shape);
    o->kernels = PG_BENCH_KERNEL_GEMM | PG_BENCH_KERNEL_QGEMM | PG_BENCH_KERNEL_ATTENTION;
    o->m[0] = 512, o->m[1] = 32, o->m[2] = 1, o->n_m = 3;
    o->rounds = 3;
    o->gemm_dtype = PG_BF16;
    o->quant_bits = 8;
    o->context = 2048;
    o->block_size = PG_KV_DEFAULT_BLOCK_SIZE;
    o->kv_dtypes[0] = PG_BF16, o->n_kv_dtypes = 1;
}

/* ------------------------------------------------------------ common */

typedef struct bench {
    const pg_bench_kernels_opts *o;
    pg_pool *pool;
    int nth;
    char *bwbuf; /* read-bandwidth buffer, pages faulted in */
    size_t bw_bytes;
    FILE *out;
} bench;

static void say(const bench *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const bench *b, const char *fmt, ...) {
    if (!b->out) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(b->out, fmt, ap);
    va_end(ap);
    fflush(b->out);
}

/* The peak a GEMM is compared to: -1 when this CPU has no loop for it. */
static int gemm_peak_kind(pg_dtype dt, bool quant) {
    if (quant) return pg_bench_have(PG_BENCH_PEAK_INT8) ? PG_BENCH_PEAK_INT8 : -1;
    if (dt == PG_BF16 && pg_bench_have(PG_BENCH_PEAK_BF16)) return PG_BENCH_PEAK_BF16;
    /* no BF16 instruction: the BF16 GEMM widens to f32 and FMAs */
    return pg_bench_have(PG_BENCH_PEAK_F32) ? PG_BENCH_PEAK_F32 : -1;
}

static const char *const KIND_KEYS[PG_BENCH_N_KINDS] = {"bf16", "int8", "f32", "read_bandwidth"};

/* Peaks and bandwidth, median of the rounds, into json "peaks". */
static void run_peaks(const bench *b, cJSON *root) {
    cJSON *peaks = cJSON_AddObjectToObject(root, "peaks");
    say(b, "peaks (16 accumulators on each of %d threads; median of %d):\n", b->nth, b->o->rounds);
    for (int k = 0; k < PG_BENCH_N_KINDS; k++) {
        cJSON *j = cJSON_AddObjectToObject(peaks, KIND_KEYS[k]);
        int have = pg_bench_have((pg_bench_kind)k);
        if (k != PG_BENCH_READ_BW) {
            cJSON_AddStringToObject(j, "instruction", pg_bench_kind_name((pg_bench_kind)k));
            cJSON_AddBoolToObject(j, "available", have);
        }
        if (!have) {
            say(b, "  %-15s %-14s not on this CPU\n", KIND_KEYS[k],
                pg_bench_kind_name((pg_bench_kind)k));
            continue;
        }
        double v[PG_BENCH_MAX_ROUNDS], c[PG_BENCH_MAX_ROUNDS];
        pg_bench_peak pc = {.kind = (pg_bench_kind)k, .buf = b->bwbuf, .bytes = b->bw_bytes};
        for (int r = 0; r < b->o->rounds; r++)
            v[r] = pg_bench_run_peak(b->pool, &pc, &c[r]);
        double mv = pg_bench_median(v, b->o->rounds), mc = pg_bench_median(c, b->o->rounds);
        const char *unit = k == PG_BENCH_READ_BW     ? "GB/s"
                           : k == PG_BENCH_PEAK_INT8 ? "GOP/s"
                                                     : "GFLOP/s";
        say(b, "  %-15s %-14s %9.1f %-7s [per CPU second %9.1f]\n", KIND_KEYS[k],
            pg_bench_kind_name((pg_bench_kind)k), mv, unit, mc);
        cJSON_AddNumberToObject(j, k == PG_BENCH_READ_BW ? "gbs" : "gflops", mv);
        cJSON_AddNumberToObject(j, k == PG_BENCH_READ_BW ? "gbs_per_cpu_s" : "gflops_per_cpu_s",
                                mc);
    }
}

/* ------------------------------------------------------------ GEMM */

enum { MAX_COPIES = 64, MAX_LAYERS = 10 };

/* One linear layer as the forward runs it. */
typedef struct layer {
    const char *name;
    int64_t N, K;
    pg_gemm_epilogue ep;
    int bits;      /* 0: float; 8 or 4: quantized */
    int64_t group; /* quantized: 0 per channel, else the group size */
    int act_group; /* quantized, group-wise: per-(token, group) activation scales */
    int mxfp4;     /* MXFP4 weights (random GGUF blocks) */
} layer;

typedef struct packed_set {
    pg_packed_weight *w[MAX_COPIES];
    int copies, next;
} packed_set;

/* The layers of one decoder block plus the lm_head (src/model/llama.c:
 * fused qkv, o and down with the residual add, gate+up with SwiGLU). */
static int model_layers(const pg_bench_kernels_opts *o, bool quant, layer *L) {
    const pg_bench_model_shape *s = &o->shape;
    int64_t q = (int64_t)s->heads * s->head_dim, kv = (int64_t)s->kv_heads * s->head_dim;
    L[0] = (layer){"qkv", q + 2 * kv, s->hidden, PG_GEMM_STORE, 0, 0, 0, 0};
    L[1] = (layer){"o", s->hidden, q, PG_GEMM_RESIDUAL, 0, 0, 0, 0};
    L[2] = (layer){"gate+up SwiGLU", s->ffn, s->hidden, PG_GEMM_SWIGLU, 0, 0, 0, 0};
    L[3] = (layer){"down", s->hidden, s->ffn, PG_GEMM_RESIDUAL, 0, 0, 0, 0};
    L[4] = (layer){"lm_head", s->vocab, s->hidden, PG_GEMM_STORE, 0, 0, 0, 0};
    for (int i = 0; quant && i < 5; i++)
        L[i].bits = o->quant_bits, L[i].group = o->quant_group, L[i].act_group = o->act_group;
    /* the engine's lm_head policy (pg_linear_policy_init): W4 with the
     * layers' group for group-wise W4A8, else W8 per channel */
    if (quant && !(o->quant_bits == 4 && o->quant_group > 0))
        L[4].bits = 8, L[4].group = 0, L[4].act_group = 0;
    const int n = o->quick ? 4 : 5;
    if (quant && o->mxfp4) { /* the same layers again as MXFP4, after the W4A8 baseline */
        static const char *const MX[5] = {"mxfp4 qkv", "mxfp4 o", "mxfp4 gate+up SwiGLU",
                                          "mxfp4 down", "mxfp4 lm_head"};
        for (int i = 0; i < n; i++) {
            L[n + i] = L[i];
            L[n + i].name = MX[i];
            L[n + i].mxfp4 = 1;
        }
        return 2 * n;
    }
    return n;
}

/* Deterministic random GGUF MXFP4 rows (E around 2^-6 .. 2^0). */
static void fill_mxfp4(uint8_t *w, size_t blocks) {
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t b = 0; b < blocks * 17; b++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        const uint8_t r = (uint8_t)((x * 0x2545f4914f6cdd1dull) >> 56);
        w[b] = b % 17 ? r : (uint8_t)(121 + r % 7);
    }
}

/* Deterministic weights in [-1, 1). */
static void fill_weights(pg_dtype dt, void *w, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = (float)((i * 2654435761u) % 2001) * 1e-3f - 1.0f;
        if (dt == PG_F32)
            ((float *)w)[i] = v;
        else
            ((uint16_t *)w)[i] = pg_f32_to_bf16(v);
    }
}

typedef struct quant_job {
    const uint16_t *src;
    const layer *l;
    int8_t *q;
    float *scale;
} quant_job;

static void quant_rows(void *ctx, size_t n0, size_t n1, int tid) {
    (void)tid;
    const quant_job *j = ctx;
    pg_qgemm_quantize_weight(PG_BF16, j->src, j->l->K, j->l->bits, j->l->group, (int64_t)n0,
                             (int64_t)n1, j->q, j->scale);
}

/* Pack `copies` copies of layer l (dtype dt for a float layer) so that at
 * least stream_bytes of packed weights are cycled through. */
static pagoda_status pack_layer(const bench *b, const layer *l, pg_dtype dt, size_t stream_bytes,
                                packed_set *ps) {
    size_t elems = (size_t)l->N * (size_t)l->K, esz = l->bits || dt == PG_BF16 ? 2 : 4;
    const int swiglu = l->ep == PG_GEMM_SWIGLU;
    void *src = malloc(elems * esz);
    int8_t *q = NULL;
    float *sc = NULL;
    pagoda_status st = PAGODA_OK;
    if (!src) return pg_error(PAGODA_ERR_NOMEM, "bench kernels: out of memory (%s)", l->name);
    if (l->mxfp4)
        fill_mxfp4(src, elems / 32); /* 17 bytes per 32 weights < 2 bytes per weight */
    else
        fill_weights(l->bits ? PG_BF16 : dt, src, elems);
    pg_qweight qw = {0};
    if (l->bits && !l->mxfp4) {
        q = malloc(elems);
        sc = malloc((size_t)(l->N * pg_qweight_ngroups(l->K, l->group)) * sizeof(float));
        if (!q || !sc) {
            st = pg_error(PAGODA_ERR_NOMEM, "bench kernels: out of memory (%s)", l->name);
            goto done;
        }
        quant_job job = {src, l, q, sc};
        pg_pool_parallel_for(b->pool, (size_t)l->N, 16, quant_rows, &job);
        qw = (pg_qweight){l->bits, l->group, l->N, l->K, q, sc, l->act_group};
    }
    size_t bytes = (l->bits ? elems * (size_t)l->bits / 8 : elems * esz) * (swiglu ? 2 : 1);
    int copies = (int)((stream_bytes + bytes - 1) / bytes);
    copies = copies < 1 ? 1 : copies > MAX_COPIES ? MAX_COPIES : copies;
    for (ps->copies = 0; ps->copies < copies; ps->copies++) {
        pg_packed_weight **w = &ps->w[ps->copies];
        if (l->mxfp4 && swiglu)
            st = pg_gemm_pack_swiglu(PG_MXFP4, src, src, l->N, l->K, NULL, w);
        else if (l->mxfp4)
            st = pg_gemm_pack(PG_MXFP4, src, l->N, l->K, NULL, w);
        else if (l->bits)
            st = pg_gemm_pack_qweight(&qw, swiglu ? &qw : NULL, NULL, w);
        else if (swiglu)
            st = pg_gemm_pack_swiglu(dt, src, src, l->N, l->K, NULL, w);
        else
            st = pg_gemm_pack(dt, src, l->N, l->K, NULL, w);
        if (st) break;
    }
done:
    free(src);
    free(q);
    free(sc);
    return st;
}

/* Per (M, layer): the rounds' seconds and paired ratios. */
typedef struct gemm_stats {
    double t[PG_BENCH_MAX_ROUNDS];
    double peak[PG_BENCH_MAX_ROUNDS], peak_cpu[PG_BENCH_MAX_ROUNDS];
    double bw[PG_BENCH_MAX_ROUNDS], bw_cpu[PG_BENCH_MAX_ROUNDS];
} gemm_stats;

typedef struct gemm_run {
    const layer *l;
    packed_set *ps;
    const float *A;
    float *C;
    void *scratch;
} gemm_run;

static double gemm_flops(const layer *l, int64_t M) {
    return 2.0 * (double)M * (double)l->N * (double)l->K * (l->ep == PG_GEMM_SWIGLU ? 2 : 1);
}

/* One paired measurement: bandwidth and peak right before the GEMM. */
static pagoda_status measure(const bench *b, const gemm_run *g, int64_t M, int peak_kind, int r,
                             gemm_stats *s) {
    const layer *l = g->l;
    packed_set *ps = g->ps;
    double flops = gemm_flops(l, M);
    /* enough calls to cycle through the copies twice when weights stream
     * (small M), two when compute-bound; at most ~2e11 flops a timing */
    int reps = M >= 256 ? 2 : ps->copies * 2;
    while (reps > 1 && reps * flops > 2e11)
        reps--;
    pg_bench_peak pc = {.kind = PG_BENCH_READ_BW, .buf = b->bwbuf, .bytes = b->bw_bytes};
    double bwc, pk = 0, pkc = 0;
    double bw = pg_bench_run_peak(b->pool, &pc, &bwc);
    if (peak_kind >= 0) {
        pc.kind = (pg_bench_kind)peak_kind;
        pk = pg_bench_run_peak(b->pool, &pc, &pkc);
    }
    pagoda_status st = PAGODA_OK;
    double t0 = 0, c0 = 0;
    for (int i = -1; i < reps && !st; i++) { /* i = -1: warm-up (first touch, pool wake) */
        if (i == 0) t0 = pg_bench_now(), c0 = pg_bench_cpu_now();
        st = pg_gemm(ps->w[ps->next], g->A, M, l->K, g->C, l->N, NULL, l->ep, b->pool, g->scratch);
        ps->next = (ps->next + 1) % ps->copies;
    }
    if (st) return st;
    double t = (pg_bench_now() - t0) / reps;
    double tc = (pg_bench_cpu_now() - c0) / reps / b->nth; /* CPU s per thread */
    double bytes = (double)pg_gemm_packed_bytes(ps->w[0]);
    s->t[r] = t;
    s->peak[r] = pk > 0 ? flops / t * 1e-9 / pk : 0;
    s->peak_cpu[r] = pkc > 0 && tc > 0 ? flops / tc * 1e-9 / pkc : 0;
    s->bw[r] = bytes / t * 1e-9 / bw;
    s->bw_cpu[r] = bwc > 0 && tc > 0 ? bytes / tc * 1e-9 / bwc : 0;
    return PAGODA_OK;
}

/* Median row of one (M, layer) into the report and json; returns the
 * median % of the read bandwidth. */
static double report_row(const bench *b, const layer *l, const packed_set *ps, int64_t M,
                       int peak_kind, bool quant, gemm_stats *s, cJSON *results) {
    int R = b->o->rounds;
    double t = pg_bench_median(s->t, R), flops = gemm_flops(l, M);
    double gbs = (double)pg_gemm_packed_bytes(ps->w[0]) / t * 1e-9;
    double pk = 100.0 * pg_bench_median(s->peak, R), pkc = 100.0 * pg_bench_median(s->peak_cpu, R);
    double bw = 100.0 * pg_bench_median(s->bw, R), bwc = 100.0 * pg_bench_median(s->bw_cpu, R);
    char name[64];
    snprintf(name, sizeof name, "%s %lldx%lld", l->name, (long long)l->N, (long long)l->K);
    say(b, "    %-30s %9.3f ms %8.1f %s", name, t * 1e3, flops / t * 1e-9,
        quant ? "GOP/s  " : "GFLOP/s");
    if (peak_kind >= 0) say(b, " (%5.1f%% of peak) [cpu %5.1f%%]", pk, pkc);
    say(b, " %7.1f GB/s (%5.1f%% of read bw) [cpu %5.1f%%]\n", gbs, bw, bwc);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "m", (double)M);
    cJSON_AddStringToObject(j, "layer", l->name);
    cJSON_AddNumberToObject(j, "n", (double)l->N);
    cJSON_AddNumberToObject(j, "k", (double)l->K);
    cJSON_AddBoolToObject(j, "swiglu", l->ep == PG_GEMM_SWIGLU);
    if (l->bits) {
        cJSON_AddNumberToObject(j, "bits", l->bits);
        cJSON_AddNumberToObject(j, "group", (double)l->group);
    }
    cJSON_AddStringToObject(j, "format", pg_gemm_format_name(ps->w[0]));
    cJSON_AddNumberToObject(j, "packed_bytes", (double)pg_gemm_packed_bytes(ps->w[0]));
    cJSON_AddNumberToObject(j, "copies", ps->copies);
    cJSON_AddNumberToObject(j, "ms", t * 1e3);
    cJSON_AddNumberToObject(j, "gflops", flops / t * 1e-9);
    if (peak_kind >= 0) {
        cJSON_AddNumberToObject(j, "pct_peak", pk);
        cJSON_AddNumberToObject(j, "pct_peak_cpu", pkc);
    }
    cJSON_AddNumberToObject(j, "gbs", gbs);
    cJSON_AddNumberToObject(j, "pct_read_bw", bw);
    cJSON_AddNumberToObject(j, "pct_read_bw_cpu", bwc);
    cJSON_AddItemToArray(results, j);
    return bw;
}

/* The GEMM (quant false) or quantized GEMM suite over every M and layer. */
static pagoda_status run_gemm_suite(const bench *b, bool quant, cJSON *root) {
    const pg_bench_kernels_opts *o = b->o;
    layer L[MAX_LAYERS];
    const int nl = model_layers(o, quant, L);
    const pg_dtype dt = o->gemm_dtype;
    const size_t stream_bytes = o->quick ? (64u << 20) : (256u << 20);
    packed_set *sets = calloc(MAX_LAYERS, sizeof *sets);
    gemm_stats *stats = calloc((size_t)o->n_m * (size_t)nl, sizeof *stats);
    float *A = NULL, *C = NULL;
    void *scratch = NULL;
    pagoda_status st = PAGODA_OK;
    if (!sets || !stats) {
        st = pg_error(PAGODA_ERR_NOMEM, "bench kernels: out of memory");
        goto done;
    }
    int64_t max_m = 1, max_n = 1, max_k = 1;
    for (int i = 0; i < o->n_m; i++)
        max_m = o->m[i] > max_m ? o->m[i] : max_m;
    size_t scratch_bytes = 64;
    for (int li = 0; li < nl && !st; li++) {
        st = pack_layer(b, &L[li], dt, stream_bytes, &sets[li]);
        if (st) break;
        max_n = L[li].N > max_n ? L[li].N : max_n;
        max_k = L[li].K > max_k ? L[li].K : max_k;
        size_t sb = pg_gemm_scratch_size(sets[li].w[0], max_m, b->nth);
        scratch_bytes = sb > scratch_bytes ? sb : scratch_bytes;
    }
    if (st) goto done;
    scratch = pg_malloc_aligned(scratch_bytes);
    A = pg_malloc_aligned((size_t)(max_m * max_k) * sizeof(float));
    C = pg_malloc_aligned((size_t)(max_m * max_n) * sizeof(float));
    if (!scratch || !A || !C) {
        st = pg_error(PAGODA_ERR_NOMEM, "bench kernels: out of memory (GEMM buffers)");
        goto done;
    }
    for (size_t i = 0; i < (size_t)(max_m * max_k); i++)
        A[i] = (float)(i % 97) * 0.01f - 0.5f;
    memset(C, 0, (size_t)(max_m * max_n) * sizeof(float)); /* residual epilogues read C */
    const int peak_kind = gemm_peak_kind(dt, quant);
    /* rounds alternate over everything, so slow phases of a shared machine
     * spread over all rows instead of hitting one */
    for (int r = 0; r < o->rounds && !st; r++)
        for (int mi = 0; mi < o->n_m && !st; mi++)
            for (int li = 0; li < nl && !st; li++) {
                gemm_run g = {&L[li], &sets[li], A, C, scratch};
                st = measure(b, &g, o->m[mi], peak_kind, r, &stats[mi * nl + li]);
            }
    if (st) goto done;

    cJSON *j = cJSON_AddObjectToObject(root, quant ? "qgemm" : "gemm");
    if (quant) {
        char scheme[8];
        snprintf(scheme, sizeof scheme, o->mxfp4 ? "mxfp4" : "w%da8", o->quant_bits);
        cJSON_AddStringToObject(j, "scheme", scheme);
        cJSON_AddNumberToObject(j, "group", (double)o->quant_group);
        cJSON_AddBoolToObject(j, "act_group", o->act_group);
        say(b,
            "\nquantized GEMM %sW%dA8 group %lld%s (lm_head%s W%d group %lld, the engine's policy)",
            o->mxfp4 ? "MXFP4 and the baseline " : "", o->quant_bits, (long long)o->quant_group,
            o->act_group ? ", activation scales per group" : "",
            o->quick ? " skipped; would be" : "", L[4].bits, (long long)L[4].group);
    } else {
        cJSON_AddStringToObject(j, "dtype", pg_dtype_name(dt));
        say(b, "\nGEMM %s weights", pg_dtype_name(dt));
    }
    cJSON_AddStringToObject(j, "variant", pg_gemm_variant(sets[0].w[0]));
    cJSON_AddStringToObject(j, "peak", peak_kind >= 0 ? KIND_KEYS[peak_kind] : "none");
    say(b,
        ", variant %s; %% of the %s peak and of the read bandwidth measured right before "
        "each call, median of the per-round ratios [cpu: the same per CPU second]\n",
        pg_gemm_variant(sets[0].w[0]), peak_kind >= 0 ? KIND_KEYS[peak_kind] : "(no)");
    cJSON *results = cJSON_AddArrayToObject(j, "results");
    bool cached = false; /* an M = 1 row above 100% of the DRAM read bandwidth */
    for (int mi = 0; mi < o->n_m; mi++) {
        say(b, "  M=%lld\n", (long long)o->m[mi]);
        for (int li = 0; li < nl; li++) {
            double bw = report_row(b, &L[li], &sets[li], o->m[mi], peak_kind, quant,
                                   &stats[mi * nl + li], results);
            cached |= o->m[mi] == 1 && bw > 100.0;
        }
    }
    /* small layers: even the cycled copies fit in the caches */
    if (cached) say(b, "  note: weights partly cached: ratios above 100%% of DRAM bandwidth\n");
    if (quant && o->mxfp4) {
        /* the paired ratio per round (same round, same M), median */
        say(b, "  MXFP4 speed-up over W4A8 group 32 act-group (time ratio, median of rounds)\n");
        cJSON *sp = cJSON_AddArrayToObject(j, "mxfp4_speedup");
        const int half = nl / 2;
        for (int mi = 0; mi < o->n_m; mi++)
            for (int li = 0; li < half; li++) {
                double r[PG_BENCH_MAX_ROUNDS];
                const gemm_stats *w4 = &stats[mi * nl + li], *mx = &stats[mi * nl + half + li];
                for (int k = 0; k < o->rounds; k++)
                    r[k] = w4->t[k] / mx->t[k];
                const double med = pg_bench_median(r, o->rounds);
                say(b, "    M=%-4lld %-30s %6.3fx\n", (long long)o->m[mi], L[li].name, med);
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "m", (double)o->m[mi]);
                cJSON_AddStringToObject(e, "layer", L[li].name);
                cJSON_AddNumberToObject(e, "speedup", med);
                cJSON_AddItemToArray(sp, e);
            }
    }
    cJSON_AddBoolToObject(j, "weights_partly_cached", cached);
done:
    for (int li = 0; sets && li < MAX_LAYERS; li++)
        for (int c = 0; c < sets[li].copies; c++)
            pg_gemm_free(sets[li].w[c]);
    free(sets);
    free(stats);
    pg_free(scratch);
    pg_free(A);
    pg_free(C);
    return st;
}

/* ------------------------------------------------------------ attention */

typedef struct attn_case {
    char name[48];
    int n_seqs, q_len, kv_len;
} attn_case;

typedef struct attn_setup {
    pg_attn_params p;
    pg_paged_kv kv;
    size_t kv_bytes;
    int32_t cu[33], lens[32];
    int32_t *tables[32];
    const int32_t *ctables[32];
    pg_attn_batch batch;
    float *q, *out;
    void *scratch;
    size_t scratch_bytes;
} attn_setup;

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rnd(uint64_t *s) {
    return (float)(xorshift(s) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

static void attn_free(attn_setup *s) {
    pg_free_huge(s->kv.k, s->kv_bytes);
    pg_free_huge(s->kv.v, s->kv_bytes);
    for (int r = 0; r < 32; r++)
        free(s->tables[r]);
    pg_free(s->q);
    pg_free(s->out);
    pg_free(s->scratch);
}

/* Random K/V/q; block ids a random permutation (a fragmented cache). */
static pagoda_status attn_make(const bench *b, const attn_case *c, pg_dtype dt, attn_setup *s) {
    const pg_bench_model_shape *m = &b->o->shape;
    const int bs = b->o->block_size, nkv = m->kv_heads, hd = m->head_dim;
    memset(s, 0, sizeof *s);
    s->p = (pg_attn_params){m->heads, nkv, hd, 1.0f / sqrtf((float)hd), 0, NULL, 0, false};
    int per = (c->kv_len + bs - 1) / bs, nb = per * c->n_seqs + 1;
    s->kv = (pg_paged_kv){NULL, NULL, dt, nb, nkv, bs, hd};
    s->kv_bytes = pg_paged_kv_bytes(dt, nb, nkv, bs, hd);
    size_t nq = (size_t)c->n_seqs * (size_t)c->q_len * (size_t)m->heads * (size_t)hd;
    if (s->kv_bytes > (4ull << 30))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench kernels: %s needs %.1f GiB of KV cache; use a smaller --context",
                        c->name, 2.0 * (double)s->kv_bytes / (1u << 30));
    s->kv.k = pg_alloc_huge(s->kv_bytes);
    s->kv.v = pg_alloc_huge(s->kv_bytes);
    s->q = pg_malloc_aligned(nq * sizeof(float));
    s->out = pg_malloc_aligned(nq * sizeof(float));
    int32_t *perm = malloc((size_t)nb * sizeof *perm);
    bool ok = s->kv.k && s->kv.v && s->q && s->out && perm;
    for (int r = 0; ok && r < c->n_seqs; r++)
        ok = (s->tables[r] = malloc((size_t)per * sizeof(int32_t))) != NULL;
    if (!ok) {
        free(perm);
        return pg_error(PAGODA_ERR_NOMEM, "bench kernels: out of memory (%s)", c->name);
    }
    uint64_t rng = 88172645463325252ull;
    size_t n = s->kv_bytes / (dt == PG_F32 ? 4 : 2);
    for (size_t i = 0; i < n; i++) {
        float a = rnd(&rng), v = rnd(&rng);
        if (dt == PG_F32)
            ((float *)s->kv.k)[i] = a, ((float *)s->kv.v)[i] = v;
        else
            ((uint16_t *)s->kv.k)[i] = pg_f32_to_bf16(a),
                       ((uint16_t *)s->kv.v)[i] = pg_f32_to_bf16(v);
    }
    for (int i = 0; i < nb - 1; i++)
        perm[i] = i + 1;
    for (int i = nb - 2; i > 0; i--) {
        int j = (int)(xorshift(&rng) % (uint64_t)(i + 1));
        int32_t x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    for (int r = 0; r < c->n_seqs; r++) {
        s->cu[r + 1] = s->cu[r] + c->q_len;
        s->lens[r] = c->kv_len;
        memcpy(s->tables[r], perm + (size_t)r * (size_t)per, (size_t)per * sizeof(int32_t));
        s->ctables[r] = s->tables[r];
    }
    free(perm);
    s->batch = (pg_attn_batch){c->n_seqs, s->cu, s->lens, s->ctables};
    for (size_t i = 0; i < nq; i++)
        s->q[i] = rnd(&rng);
    return PAGODA_OK;
}

/* Seconds of one call: the reference (1 thread) or the fast kernel on
 * `pool` (NULL: the calling thread). */
static pagoda_status attn_time(attn_setup *s, bool ref, pg_pool *pool, double *secs) {
    size_t ld = (size_t)s->p.n_heads * (size_t)s->p.head_dim;
    if (!ref) {
        size_t need =
            pg_attention_scratch_bytes(&s->p, &s->batch, &s->kv, pool ? pg_pool_size(pool) : 1);
        if (need > s->scratch_bytes) {
            pg_free(s->scratch);
            s->scratch = pg_malloc_aligned(need);
            s->scratch_bytes = s->scratch ? need : 0;
            if (!s->scratch) return pg_error(PAGODA_ERR_NOMEM, "bench kernels: out of memory");
        }
    }
    double t0 = pg_bench_now();
    pagoda_status st = ref ? pg_ref_attention(&s->p, &s->batch, &s->kv, s->q, ld, s->out, ld)
                           : pg_attention(&s->p, &s->batch, &s->kv, s->q, ld, s->out, ld,
                                          s->scratch, s->scratch_bytes, pool, NULL);
    *secs = pg_bench_now() - t0;
    return st;
}

/* Attention FLOPs (2 per multiply-add, QK and PV, causal). */
static double attn_flops(const attn_case *c, const pg_attn_params *p) {
    double pairs = 0;
    for (int i = 0; i < c->q_len; i++)
        pairs += c->kv_len - c->q_len + i + 1;
    return pairs * c->n_seqs * p->n_heads * p->head_dim * 4.0;
}

/* The scenarios at context C: decode of 1 and 32 sequences, prefill of P =
 * min(512, C) tokens alone and over a C - P token cached prefix. quick:
 * decode b1 and the longest prefill only. */
static int attn_cases(const pg_bench_kernels_opts *o, attn_case *c) {
    const int C = o->context, P = C < 512 ? C : 512;
    int n = 0;
    c[n] = (attn_case){"", 1, 1, C};
    snprintf(c[n++].name, sizeof c->name, "decode b1");
    if (!o->quick) {
        c[n] = (attn_case){"", 32, 1, C};
        snprintf(c[n++].name, sizeof c->name, "decode b32");
    }
    if (!o->quick || P == C) {
        c[n] = (attn_case){"", 1, P, P};
        snprintf(c[n++].name, sizeof c->name, "prefill %d", P);
    }
    if (P < C) {
        c[n] = (attn_case){"", 1, P, C};
        snprintf(c[n++].name, sizeof c->name, "prefill %d+%d", P, C - P);
    }
    return n;
}

static pagoda_status run_attention(const bench *b, cJSON *root) {
    const pg_bench_kernels_opts *o = b->o;
    const pg_kernel_table *kt = pg_kernels();
    const int R = o->rounds;
    attn_case cases[4];
    int nc = attn_cases(o, cases);
    cJSON *j = cJSON_AddObjectToObject(root, "attention");
    cJSON_AddNumberToObject(j, "context", o->context);
    cJSON_AddNumberToObject(j, "block_size", o->block_size);
    cJSON_AddNumberToObject(j, "heads", o->shape.heads);
    cJSON_AddNumberToObject(j, "kv_heads", o->shape.kv_heads);
    cJSON_AddNumberToObject(j, "head_dim", o->shape.head_dim);
    cJSON_AddNumberToObject(j, "threads", b->nth);
    cJSON *results = cJSON_AddArrayToObject(j, "results");
    say(b,
        "\npaged attention, context %d, block size %d, %d q / %d kv heads of %d; "
        "micro-kernels %s (F32 KV) / %s (BF16 KV); ms per call (median), speed-up = median "
        "of per-round ratios to the reference\n",
        o->context, o->block_size, o->shape.heads, o->shape.kv_heads, o->shape.head_dim,
        kt->variant.attn_f32kv, kt->variant.attn_bf16kv);
    say(b, "    %-20s %-5s | %9s | %9s %7s | %9s %7s (%d threads) | %8s\n", "scenario", "kv",
        "ref 1t", "fast 1t", "x ref", "fast", "x ref", b->nth, "GFLOP/s");
    for (int di = 0; di < o->n_kv_dtypes; di++)
        for (int ci = 0; ci < nc; ci++) {
            const attn_case *c = &cases[ci];
            pg_dtype dt = o->kv_dtypes[di];
            attn_setup s;
            double tr[PG_BENCH_MAX_ROUNDS], t1[PG_BENCH_MAX_ROUNDS], tp[PG_BENCH_MAX_ROUNDS],
                x1[PG_BENCH_MAX_ROUNDS], xp[PG_BENCH_MAX_ROUNDS], warm;
            pagoda_status st = attn_make(b, c, dt, &s);
            if (!st) st = attn_time(&s, false, b->pool, &warm); /* warm-up */
            for (int r = 0; r < R && !st; r++) {
                st = attn_time(&s, true, NULL, &tr[r]);
                if (!st) st = attn_time(&s, false, NULL, &t1[r]);
                if (!st) st = attn_time(&s, false, b->pool, &tp[r]);
                if (!st) x1[r] = tr[r] / t1[r], xp[r] = tr[r] / tp[r];
            }
            attn_free(&s);
            if (st) return st;
            double mr = pg_bench_median(tr, R), m1 = pg_bench_median(t1, R),
                   mp = pg_bench_median(tp, R), s1 = pg_bench_median(x1, R),
                   sp = pg_bench_median(xp, R), gf = attn_flops(c, &s.p) / mp * 1e-9;
            say(b, "    %-20s %-5s | %9.3f | %9.3f %6.1fx | %9.3f %6.1fx %*s | %8.1f\n", c->name,
                pg_dtype_name(dt), mr * 1e3, m1 * 1e3, s1, mp * 1e3, sp, b->nth >= 10 ? 13 : 12, "",
                gf);
            cJSON *row = cJSON_CreateObject();
            cJSON_AddStringToObject(row, "scenario", c->name);
            cJSON_AddStringToObject(row, "kv_dtype", pg_dtype_name(dt));
            cJSON_AddNumberToObject(row, "n_seqs", c->n_seqs);
            cJSON_AddNumberToObject(row, "q_len", c->q_len);
            cJSON_AddNumberToObject(row, "kv_len", c->kv_len);
            cJSON_AddNumberToObject(row, "ref_ms", mr * 1e3);
            cJSON_AddNumberToObject(row, "fast_1t_ms", m1 * 1e3);
            cJSON_AddNumberToObject(row, "speedup_1t", s1);
            cJSON_AddNumberToObject(row, "fast_ms", mp * 1e3);
            cJSON_AddNumberToObject(row, "speedup", sp);
            cJSON_AddNumberToObject(row, "gflops", gf);
            cJSON_AddItemToArray(results, row);
        }
    return PAGODA_OK;
}

/* ------------------------------------------------------------ driver */

/* ------------------------------------------------------------ quk */

/* CPU seconds of the calling thread (the microkernel runs on it alone). */
static double thread_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One full mr x nr tile of microkernel uk over K = 2048 (group 0: per
 * channel with f32 scales; else F16 scales, the run_hs form when the kernel
 * has it) on buffers small enough for L1/L2; the values do not matter for
 * the timing. Int8 ops (2 per multiply-add) per thread CPU second, in G. */
static double quk_rate(const pg_qgemm_ukernel *uk, int64_t group, bool act, long reps,
                       pagoda_status *st) {
    const int64_t K = 2048, gk = group ? group : K, ng = K / gk;
    const bool hs = group && uk->run_hs;
    const size_t gbytes = (size_t)uk->nr * (hs ? 2 : 4) + (size_t)(gk * uk->nr * uk->bits / 8);
    int8_t *a = pg_malloc_aligned((size_t)(uk->mr * K));
    char *w = pg_malloc_aligned((size_t)ng * gbytes);
    int32_t *ac = pg_malloc_aligned((size_t)(uk->mr * ng * 2) * sizeof(int32_t));
    float *c = pg_malloc_aligned((size_t)(uk->mr * uk->nr) * sizeof(float));
    float *as = pg_malloc_aligned((size_t)(uk->mr * ng) * sizeof(float));
    double rate = 0;
    if (!a || !w || !ac || !c || !as) {
        *st = pg_error(PAGODA_ERR_NOMEM, "bench kernels: out of memory");
        goto out;
    }
    for (int64_t i = 0; i < uk->mr * K; i++)
        a[i] = (int8_t)(i * 7 % 255 - 127);
    for (size_t i = 0; i < (size_t)ng * gbytes; i++)
        w[i] = (char)((i * 13 % 251) & 0x3F); /* small F16 / f32 scales, any weights */
    memset(ac, 0, (size_t)(uk->mr * ng * 2) * sizeof(int32_t));
    for (int64_t i = 0; i < uk->mr * ng; i++)
        as[i] = 0.001f * (float)(1 + i % 7);
    const float *asp = act ? as : NULL; /* act: per-(row, group) activation scales */
    __typeof__(uk->run) run = hs ? uk->run_hs : uk->run;
    const int64_t a_stride = K * uk->ar;
    run(ng, gk, a, a_stride, asp, ng, ac, ng * 2, w, c, uk->nr, uk->mr, 0);
    double c0 = thread_cpu_now();
    for (long r = 0; r < reps; r++)
        run(ng, gk, a, a_stride, asp, ng, ac, ng * 2, w, c, uk->nr, uk->mr, 0);
    double t = thread_cpu_now() - c0;
    pg_bench_sink += c[0];
    rate = t > 0 ? 2.0 * (double)(uk->mr * uk->nr) * (double)K * (double)reps / t * 1e-9 : 0;
out:
    pg_free(a);
    pg_free(w);
    pg_free(ac);
    pg_free(c);
    pg_free(as);
    return rate;
}

static pagoda_status run_quk(const bench *b, cJSON *root) {
    const pg_kernel_table *kt = pg_kernels();
    /* per channel, g32, g32 with per-(row, group) activation scales, g128 */
    const int64_t groups[4] = {0, 32, 32, 128};
    const bool acts[4] = {false, false, true, false};
    const long reps = b->o->quick ? 200 : 40000;
    const bool have = pg_bench_have(PG_BENCH_PEAK_INT8);
    double pk[PG_BENCH_MAX_ROUNDS], res[2][4][PG_BENCH_MAX_ROUNDS];
    pagoda_status st = PAGODA_OK;
    for (int r = 0; r < b->o->rounds && !st; r++) {
        pg_bench_peak pc = {.kind = PG_BENCH_PEAK_INT8, .buf = b->bwbuf, .bytes = b->bw_bytes};
        pk[r] = 0;
        if (have) (void)pg_bench_run_peak(b->pool, &pc, &pk[r]);
        for (int bi = 0; bi < 2 && !st; bi++)
            for (int gi = 0; gi < 4 && !st; gi++)
                res[bi][gi][r] =
                    quk_rate(bi ? &kt->qgemm_w4 : &kt->qgemm_w8, groups[gi], acts[gi], reps, &st);
    }
    if (st) return st;
    const double peak = have ? pg_bench_median(pk, b->o->rounds) : 0;
    cJSON *j = cJSON_AddObjectToObject(root, "quk");
    if (have) cJSON_AddNumberToObject(j, "peak_int8_per_cpu_s", peak);
    cJSON *arr = cJSON_AddArrayToObject(j, "results");
    say(b,
        "\nquantized microkernels alone (one tile over K 2048, L1, calling thread; median of "
        "%d)%s:\n",
        b->o->rounds, have ? ", % of the int8 peak per CPU second" : ", GOP/s per CPU second");
    for (int bi = 0; bi < 2; bi++) {
        const pg_qgemm_ukernel *uk = bi ? &kt->qgemm_w4 : &kt->qgemm_w8;
        say(b, "  W%dA8 %-10s %dx%-3d", uk->bits, uk->name, uk->mr, uk->nr);
        for (int gi = 0; gi < 4; gi++) {
            const double g = pg_bench_median(res[bi][gi], b->o->rounds);
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "bits", uk->bits);
            cJSON_AddStringToObject(e, "variant", uk->name);
            cJSON_AddNumberToObject(e, "mr", uk->mr);
            cJSON_AddNumberToObject(e, "nr", uk->nr);
            cJSON_AddNumberToObject(e, "group", (double)groups[gi]);
            cJSON_AddBoolToObject(e, "act_group", acts[gi]);
            cJSON_AddNumberToObject(e, "gops_per_cpu_s", g);
            const char *gnames[4] = {"per channel", "g32", "g32 act", "g128"};
            const char *gname = gnames[gi];
            if (have && peak > 0) {
                cJSON_AddNumberToObject(e, "pct_peak_cpu", 100.0 * g / peak);
                say(b, "  %s %5.1f%%", gname, 100.0 * g / peak);
            } else {
                say(b, "  %s %7.1f", gname, g);
            }
            cJSON_AddItemToArray(arr, e);
        }
        say(b, "\n");
    }
    return PAGODA_OK;
}

static pagoda_status check_opts(const pg_bench_kernels_opts *o) {
    const pg_bench_model_shape *s = &o->shape;
    if (s->hidden < 1 || s->heads < 1 || s->kv_heads < 1 || s->head_dim < 1 || s->ffn < 1 ||
        s->vocab < 1 || s->heads % s->kv_heads)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench kernels: %s: bad shape (hidden %d, heads %d/%d, head_dim %d, "
                        "ffn %d, vocab %d)",
                        s->source, s->hidden, s->heads, s->kv_heads, s->head_dim, s->ffn, s->vocab);
    if (!o->kernels || o->kernels & ~15u)
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench kernels: no kernels selected");
    if (o->rounds < 1 || o->rounds > PG_BENCH_MAX_ROUNDS)
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench kernels: rounds %d (need 1..%d)", o->rounds,
                        PG_BENCH_MAX_ROUNDS);
    if (o->n_m < 1 || o->n_m > PG_BENCH_MAX_M)
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench kernels: %d GEMM row counts (need 1..%d)",
                        o->n_m, PG_BENCH_MAX_M);
    for (int i = 0; i < o->n_m; i++)
        if (o->m[i] < 1 || o->m[i] > PG_BENCH_MAX_GEMM_M)
            return pg_error(PAGODA_ERR_INVALID_ARG, "bench kernels: M %lld (need 1..%d)",
                            (long long)o->m[i], PG_BENCH_MAX_GEMM_M);
    if (o->gemm_dtype != PG_BF16 && o->gemm_dtype != PG_F32)
        return pg_error(PAGODA_ERR_INVALID_ARG, "bench kernels: GEMM dtype %s (need BF16, F32)",
                        pg_dtype_name(o->gemm_dtype));
    if (o->act_group && o->quant_group == 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench kernels: activation scales per group need a group size "
                        "(--quant-group-size 32, ...)");
    if ((o->quant_bits != 8 && o->quant_bits != 4) || o->quant_group < 0 || o->quant_group % 32)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench kernels: quantization W%dA8 group %lld (need W8/W4, group 0 or a "
                        "multiple of 32)",
                        o->quant_bits, (long long)o->quant_group);
    if (o->context < 1 || o->context > (1 << 20) || o->block_size < PG_KV_MIN_BLOCK_SIZE ||
        o->block_size > PG_KV_MAX_BLOCK_SIZE || o->block_size % 16 ||
        s->head_dim > PG_KV_MAX_HEAD_DIM || o->n_kv_dtypes < 1 || o->n_kv_dtypes > 2)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "bench kernels: attention context %d, block size %d, head_dim %d "
                        "(need context 1..2^20, block size a multiple of 16 in [%d, %d], "
                        "head_dim <= %d)",
                        o->context, o->block_size, s->head_dim, PG_KV_MIN_BLOCK_SIZE,
                        PG_KV_MAX_BLOCK_SIZE, PG_KV_MAX_HEAD_DIM);
    return PAGODA_OK;
}

/* Peak bytes one GEMM suite holds (as pack_layer and run_gemm_suite
 * allocate them): every layer's packed copies, the largest layer's source
 * weights (+ int8 copy and scales when quantized) while it is packed, and
 * the A / C activations at the largest M. In double: a huge config must
 * not overflow. *largest names the layer with the most packed bytes. */
static double suite_bytes(const pg_bench_kernels_opts *o, bool quant, const char **largest) {
    layer L[MAX_LAYERS];
    const int nl = model_layers(o, quant, L);
    const double stream = o->quick ? (double)(64u << 20) : (double)(256u << 20);
    double packed = 0, transient = 0, big = -1, max_n = 1, max_k = 1, max_m = 1;
    for (int i = 0; i < o->n_m; i++)
        max_m = (double)o->m[i] > max_m ? (double)o->m[i] : max_m;
    for (int li = 0; li < nl; li++) {
        const layer *l = &L[li];
        double elems = (double)l->N * (double)l->K, swiglu = l->ep == PG_GEMM_SWIGLU ? 2 : 1;
        double esz = l->bits || o->gemm_dtype == PG_BF16 ? 2 : 4;
        double groups = l->bits ? (double)pg_qweight_ngroups(l->K, l->group) : 0;
        double one = (l->bits ? elems * l->bits / 8 + (double)l->N * groups * 4 : elems * esz) *
                     swiglu;
        double copies = ceil(stream / one);
        copies = copies < 1 ? 1 : copies > MAX_COPIES ? MAX_COPIES : copies;
        packed += copies * one;
        double tr = elems * esz + (l->bits ? elems + (double)l->N * groups * 4 : 0);
        transient = tr > transient ? tr : transient;
        if (one > big) big = one, *largest = l->name;
        max_n = (double)l->N > max_n ? (double)l->N : max_n;
        max_k = (double)l->K > max_k ? (double)l->K : max_k;
    }
    return packed + transient + max_m * (max_k + max_n) * sizeof(float);
}

/* Refuse a run that cannot fit: the read-bandwidth buffer plus the larger
 * GEMM suite against the memory available now (MemAvailable, else
 * sysconf(_SC_AVPHYS_PAGES)), instead of being OOM-killed while packing. */
static pagoda_status check_memory(const pg_bench_kernels_opts *o) {
    double need = o->quick ? (double)(64u << 20) : (double)(512u << 20), gemm = 0;
    const char *largest = "", *name = "";
    if (o->kernels & PG_BENCH_KERNEL_GEMM) gemm = suite_bytes(o, false, &largest);
    if (o->kernels & PG_BENCH_KERNEL_QGEMM) {
        double q = suite_bytes(o, true, &name);
        if (q > gemm) gemm = q, largest = name;
    }
    need += gemm;
    double avail = (double)pg_cpu()->mem_available;
    if (avail <= 0) {
        long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        avail = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    }
    if (avail > 0 && need > avail)
        return pg_error(PAGODA_ERR_NOMEM,
                        "bench kernels: %s needs about %.1f GiB (packed GEMM weights, largest "
                        "layer %s, plus buffers) but %.1f GiB of memory is available; use a "
                        "smaller model or --kernels attention",
                        o->shape.source, need / (1u << 30), largest, avail / (1u << 30));
    return PAGODA_OK;
}

pagoda_status pg_bench_kernels_run(const pg_bench_kernels_opts *o, FILE *out, cJSON **json) {
    if (json) *json = NULL;
    pagoda_status st = check_opts(o);
    if (st) return st;
    if ((st = check_memory(o))) return st;
    bench b = {.o = o, .out = out};
    pg_pool_options po = pg_pool_options_default();
    po.n_threads = o->threads;
    if ((st = pg_pool_create(&po, &b.pool))) return st;
    b.nth = pg_pool_size(b.pool);
    b.bw_bytes = o->quick ? (64u << 20) : (512u << 20);
    b.bwbuf = pg_alloc_huge(b.bw_bytes);
    cJSON *root = cJSON_CreateObject();
    if (!b.bwbuf || !root) {
        st = pg_error(PAGODA_ERR_NOMEM, "bench kernels: out of memory");
        goto done;
    }
    for (size_t i = 0; i < b.bw_bytes; i += 4096)
        b.bwbuf[i] = 1; /* fault the pages in */
    const pg_bench_model_shape *s = &o->shape;
    say(&b,
        "pagoda bench kernels: %s, %d threads, %d round%s (median)%s\n"
        "model %s: hidden %d, %d layers, %d/%d heads of %d, ffn %d, vocab %d\n\n",
        pg_cpu()->model, b.nth, o->rounds, o->rounds > 1 ? "s" : "", o->quick ? ", quick" : "",
        s->source, s->hidden, s->layers, s->heads, s->kv_heads, s->head_dim, s->ffn, s->vocab);
    cJSON_AddStringToObject(root, "cpu", pg_cpu()->model);
    cJSON_AddStringToObject(root, "arch", pg_cpu()->arch);
    cJSON_AddNumberToObject(root, "threads", b.nth);
    cJSON_AddNumberToObject(root, "rounds", o->rounds);
    cJSON_AddBoolToObject(root, "quick", o->quick);
    cJSON *m = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(m, "source", s->source);
    cJSON_AddNumberToObject(m, "hidden_size", s->hidden);
    cJSON_AddNumberToObject(m, "num_hidden_layers", s->layers);
    cJSON_AddNumberToObject(m, "num_attention_heads", s->heads);
    cJSON_AddNumberToObject(m, "num_key_value_heads", s->kv_heads);
    cJSON_AddNumberToObject(m, "head_dim", s->head_dim);
    cJSON_AddNumberToObject(m, "intermediate_size", s->ffn);
    cJSON_AddNumberToObject(m, "vocab_size", s->vocab);
    run_peaks(&b, root);
    if (o->kernels & PG_BENCH_KERNEL_QUK) st = run_quk(&b, root);
    if (!st && o->kernels & PG_BENCH_KERNEL_GEMM) st = run_gemm_suite(&b, false, root);
    if (!st && o->kernels & PG_BENCH_KERNEL_QGEMM) st = run_gemm_suite(&b, true, root);
    if (!st && o->kernels & PG_BENCH_KERNEL_ATTENTION) st = run_attention(&b, root);
done:
    pg_free_huge(b.bwbuf, b.bw_bytes);
    pg_pool_free(b.pool);
    if (st || !json)
        cJSON_Delete(root);
    else
        *json = root;
    return st;
}
