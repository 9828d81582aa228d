/* The engine behind include/pagoda.h: request queue, step loop (schedule ->
 * runner -> sample -> scheduler update -> detokenize/stop), outputs, stats.
 *
 * Shape of vLLM v1's EngineCore (vllm/v1/engine/core.py: add_request,
 * abort_requests, step) with the output processor's detokenizer and stop
 * checks (vllm/v1/engine/output_processor.py, detokenizer.py) in the same
 * thread. Adds and aborts from other threads go through a mutex-protected
 * queue applied at the start of a step. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/affinity.h"
#include "base/alloc.h"
#include "base/cpu.h"
#include "base/log.h"
#include "base/numa.h"
#include "base/pool.h"
#include "dist/comm.h"
#include "engine/grammars.h"
#include "engine/chat.h"
#include "engine/detokenizer.h"
#include "engine/draft.h"
#include "engine/mtp.h"
#include "engine/kv_cache_spec.h"
#include "engine/rng.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/hub.h"
#include "engine/spec.h"
#include "model/model.h"
#include "model/source.h"
#include "pagoda.h"
#include "tokenizer/tokenizer.h"

#define DEFAULT_MAX_NUM_SEQS 256
#define DEFAULT_MAX_NUM_BATCHED_TOKENS 4096
/* encoder-decoder models: requests between their first and last encoder
 * piece at once (each holds an encoder state: Whisper large 29 MiB) */
#define DEFAULT_MAX_NUM_ENCODING 4
#define DEFAULT_MAX_NUM_ENCODER_TOKENS 1024

/* One request as the engine sees it: sr, the one request struct (prompt
 * and outputs, finish conditions, salt, block hashes), built by
 * pagoda_engine_add_request on the caller's thread, queued, and borrowed by
 * the scheduler while it is queued or running; freed with the ereq. Beside
 * it the engine keeps only what is not the scheduler's: sampling state,
 * structured output, logprobs, detokenizer, timings, the outputs emitted. */
typedef struct ereq {
    uint64_t id;
    struct ereq *next; /* pending queue / reap list */
    pg_request *sr;
    /* outputs emitted: sr's outputs while it runs (a stop string the engine
     * matched cuts the rest and aborts it) */
    int32_t n_out;
    bool in_sched, finished;
    bool no_detok; /* pagoda_request.no_detokenize: dt stays empty, no text */
    pg_sampling_params sp;
    pg_logit_bias *bias;
    pg_rng rng;
    int32_t n_logprobs; /* -1: none */
    pg_detok dt;
    double arrival, first_sched, first_token;
    int32_t n_cached;
    /* this step: up to num_speculative_tokens + 1 new tokens, their logprobs
     * (lp_ids / lp_vals / top: lp_cap entries per token) */
    int32_t new_tokens[PG_MAX_SPEC_TOKENS + 1];
    int n_new;
    int32_t lp_cap;
    int32_t *lp_ids;
    float *lp_vals;
    pagoda_top_logprob *top;
    pagoda_token_logprobs tlp[PG_MAX_SPEC_TOKENS + 1];
    char *error;
    /* encoder-decoder models: the encoder input, [rows][cols] f32 */
    float *enc_in;
    /* the logits processor (its probe: sr->probe_len) */
    pagoda_logits_fn lfn;
    void *lctx;
    /* structured output: the matcher and how many outputs it has consumed */
    pg_tmatch *gm;
    int32_t gm_fed;
    /* grammar_after_reasoning: the phase (gm_phase), how many outputs were
     * scanned for the reasoning tokens (gm_scan), and those tokens' ids;
     * GM_GRAMMAR without it (gm_fed then starts at 0) */
    int8_t gm_phase;
    int32_t gm_scan;
    int32_t rs_id, re_id;
    /* reasoning_end_ids: the sequence that ends the reasoning (n_re_seq 0:
     * re_id alone) */
    int32_t re_seq[PAGODA_MAX_REASONING_END_IDS];
    int32_t n_re_seq;
} ereq;

/* Where a constrained request's output stands (pagoda_request's
 * grammar_after_reasoning): the first token may open the reasoning, inside
 * the reasoning (nothing masked), or under the grammar from gm_fed on. */
enum { GM_MAY_OPEN = 0, GM_REASONING, GM_GRAMMAR };

struct pagoda_engine {
    pg_model_source *src;
    pg_model *model;
    pg_comm *comm; /* tensor parallelism (rank 0), or NULL */
    pg_tokenizer *tok;
    pg_scheduler *sched;
    pg_runner *runner;
    pg_draft *draft;       /* speculative decoding's draft model (NULL: none) */
    pg_mtp *mtp;           /* speculative decoding's MTP head (NULL: none) */
    const pg_request **mtp_reqs; /* [max_num_seqs] a step's requests after it (pg_mtp_observe) */
    pg_sampler **samplers; /* one per pool thread: requests sample in parallel */
    int n_samplers;
    char name[256];
    int32_t vocab, max_model_len, block_size, num_kv_blocks, max_num_seqs;
    int32_t kv_max_seq_len; /* min(max_model_len, tokens one sequence's KV fits in) */
    /* prefix caching: requests' block hashes (the scheduler's algorithm),
     * computed on the caller's thread in pagoda_engine_add_request */
    bool hash_blocks;
    pg_block_hash_algo hash_algo;
    uint64_t seed;
    int32_t eos_ids[8];
    int n_eos;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next_id;
    ereq *pending_head, *pending_tail; /* adds, FIFO */
    int32_t n_pending;
    uint64_t *aborts;
    size_t n_aborts, cap_aborts;
    ereq **live; /* every queued/running request (by the engine: pending included) */
    size_t n_live, cap_live;
    pagoda_stats stats; /* snapshot after each step, under mu */

    ereq *reap; /* finished in the last step: freed at the next one */
    pagoda_output *outs;
    size_t n_outs, cap_outs;
    int32_t *sampled;          /* [max_num_seqs][spec_stride]: tokens of each scheduled request */
    int32_t *n_sampled;        /* [max_num_seqs]: how many (speculative decoding: > 1) */
    int32_t spec_stride;       /* 1 + num_speculative_tokens */
    int32_t spec_k;            /* num_speculative_tokens; 0 = off */
    int32_t *row_of;           /* [max_num_seqs] */
    int32_t *sample_idx;       /* [max_num_seqs] scheduled index of each request that samples */
    int32_t *probe_of;         /* [max_num_seqs] logits row of each request's probe, -1: none */
    /* encoder-decoder models: encoder pieces per request, input shape, and
     * this step's encoder inputs [max_num_encoding] */
    int32_t enc_steps, enc_rows, enc_cols, max_num_encoding;
    const float **enc_inputs;
    struct ereq **sample_req;  /* [max_num_seqs] that request */
    uint64_t prompt_tokens, generation_tokens;
    pg_grammars *grammars; /* structured outputs: vocab trie + compiled constraints */
    pg_chat_cache *chat;   /* chat template compiled on first use (chat.c), under mu */
};

const char *pagoda_last_error(void) {
    return pg_last_error();
}

const char *pagoda_finish_reason_name(pagoda_finish_reason r) {
    switch (r) {
    case PAGODA_FINISH_STOP:
        return "stop";
    case PAGODA_FINISH_LENGTH:
        return "length";
    case PAGODA_FINISH_ABORT:
        return "abort";
    case PAGODA_FINISH_ERROR:
        return "error";
    default:
        return NULL;
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pagoda_engine_options_default(pagoda_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->kv_cache_dtype = PAGODA_KV_AUTO;
    o->enable_prefix_caching = true;
}

/* ---- create / free ---------------------------------------------------------- */

/* KV cache dtype: as asked, else the compute dtype's, else (dtype auto)
 * F32 for F32 checkpoints and BF16 for the rest. */
/* The KV cache must fit in this machine: an asked kv_cache_memory above
 * MemTotal is refused (whatever part of it the engine would use), and so is
 * a cache whose pages (`need` bytes, after capping to what max_num_seqs can
 * use) exceed MemAvailable now, after the weights are loaded: its pages are
 * touched lazily, so it would start and then be OOM-killed under load.
 * 0 = not checked. Errors: PAGODA_ERR_LIMIT with the numbers. */
static pagoda_status check_kv_fits(uint64_t asked, uint64_t need) {
    uint64_t total = 0, avail = 0;
    pg_mem_info(&total, &avail);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if (total && asked > total)
        return pg_error(PAGODA_ERR_LIMIT,
                        "engine: kv_cache_memory %.2f GiB is more than this machine's memory "
                        "(MemTotal %.2f GiB, MemAvailable %.2f GiB): lower --kv-cache-memory",
                        (double)asked / gib, (double)total / gib, (double)avail / gib);
    if (avail && need > avail)
        return pg_error(PAGODA_ERR_LIMIT,
                        "engine: the KV cache needs %.2f GiB but only %.2f GiB are available "
                        "(MemAvailable after loading the weights; MemTotal %.2f GiB): lower "
                        "--kv-cache-memory or --max-num-seqs",
                        (double)need / gib, (double)avail / gib, (double)total / gib);
    return PAGODA_OK;
}

static pg_dtype kv_dtype_for(const pagoda_engine_options *o, const pg_model *m) {
    if (o->kv_cache_dtype == PAGODA_KV_F32) return PG_F32;
    if (o->kv_cache_dtype == PAGODA_KV_BF16) return PG_BF16;
    if (o->dtype == PAGODA_DTYPE_F32) return PG_F32;
    if (o->dtype != PAGODA_DTYPE_AUTO) return PG_BF16;
    const pg_model_config *c = pg_model_get_config(m);
    return c->torch_dtype == PG_F32 ? PG_F32 : PG_BF16;
}

/* The model's compute dtype for option dtype (pg_model_options.compute). */
static pg_dtype compute_dtype(const pagoda_engine_options *o) {
    switch (o->dtype) {
    case PAGODA_DTYPE_F32:
        return PG_F32;
    case PAGODA_DTYPE_F16:
        PG_WARN("engine: dtype float16: pagoda has no F16 GEMM; running the bfloat16 path "
                "(F16 weights rounded to BF16, activations rounded to BF16 per GEMM)");
        return PG_BF16;
    case PAGODA_DTYPE_BF16:
        return PG_BF16;
    default:
        return PG_DTYPE_COUNT;
    }
}

static const char *dtype_option_name(pagoda_dtype d) {
    static const char *const names[] = {"auto", "bfloat16", "float16", "float32"};
    return (unsigned)d <= PAGODA_DTYPE_F32 ? names[d] : "?";
}

static pagoda_status check_options(const pagoda_engine_options *o) {
    if (o->max_model_len < 0 || o->max_num_seqs < 0 || o->max_num_batched_tokens < 0 ||
        o->block_size < 0 || o->num_threads < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: negative option (max_model_len %d, max_num_seqs %d, "
                        "max_num_batched_tokens %d, block_size %d, threads %d)",
                        o->max_model_len, o->max_num_seqs, o->max_num_batched_tokens, o->block_size,
                        o->num_threads);
    if (o->block_size && (o->block_size % 16 || o->block_size > PG_KV_MAX_BLOCK_SIZE))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: block_size %d must be a multiple of 16 in [16, %d]", o->block_size,
                        PG_KV_MAX_BLOCK_SIZE);
    if ((unsigned)o->kv_cache_dtype > PAGODA_KV_F32)
        return pg_error(PAGODA_ERR_INVALID_ARG, "engine: unknown kv_cache_dtype %d",
                        (int)o->kv_cache_dtype);
    if ((unsigned)o->dtype > PAGODA_DTYPE_F32)
        return pg_error(PAGODA_ERR_INVALID_ARG, "engine: unknown dtype %d", (int)o->dtype);
    if (o->quantization != 0 && o->quantization != 8 && o->quantization != 4)
        return pg_error(PAGODA_ERR_INVALID_ARG, "engine: quantization %d (0, 8 = W8A8, 4 = W4A8)",
                        o->quantization);
    if (o->quant_group_size < 0 || o->quant_group_size % 32)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: quant_group_size %d must be 0 (per channel) or a multiple of 32",
                        o->quant_group_size);
    if (o->quant_act_group < 0 || o->quant_act_group % 32 || o->quant_act_group > 4096)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: quant_act_group %d must be 0 (per token) or a multiple of 32 up "
                        "to 4096",
                        o->quant_act_group);
    if (o->quant_act_group && !o->quantization)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: quant_act_group %d needs quantization (w8a8 or w4a8)",
                        o->quant_act_group);
    if (o->quant_act_group && o->quant_group_size && o->quant_group_size != o->quant_act_group)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: quant_act_group %d needs quant_group_size %d or 0 (activation "
                        "groups are the weight groups), got %d",
                        o->quant_act_group, o->quant_act_group, o->quant_group_size);
    if (o->prefix_caching_hash_algo != PAGODA_PREFIX_HASH_SHA256 &&
        o->prefix_caching_hash_algo != PAGODA_PREFIX_HASH_XXHASH)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: prefix_caching_hash_algo %d is neither SHA256 (%d) nor XXHASH (%d)",
                        (int)o->prefix_caching_hash_algo, (int)PAGODA_PREFIX_HASH_SHA256,
                        (int)PAGODA_PREFIX_HASH_XXHASH);
    const pagoda_speculative_config *sp = &o->speculative;
    if (sp->method == PAGODA_SPEC_DRAFT_MODEL && !memchr(sp->model, 0, sizeof sp->model))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: speculative config: the draft model path is not terminated");
    if (sp->method == PAGODA_SPEC_DRAFT_MODEL && !sp->model[0])
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: speculative config: method draft_model needs the draft model's "
                        "path (\"model\")");
    const bool ngram = sp->method == PAGODA_SPEC_NGRAM;
    if (sp->method != PAGODA_SPEC_NONE &&
        ((!ngram && sp->method != PAGODA_SPEC_DRAFT_MODEL && sp->method != PAGODA_SPEC_MTP) || sp->num_speculative_tokens < 1 ||
         sp->num_speculative_tokens > PG_MAX_SPEC_TOKENS ||
         (ngram && (sp->prompt_lookup_min < 1 || sp->prompt_lookup_max < sp->prompt_lookup_min)) ||
         sp->max_batch_tokens < 0 || sp->disable_by_batch_size < 0))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "engine: speculative config: method %d (1 = ngram, 2 = draft_model, 3 = mtp), "
                        "num_speculative_tokens %d (1..%d), prompt_lookup_min %d (>= 1), "
                        "prompt_lookup_max %d (>= min), max_batch_tokens %d, "
                        "disable_by_batch_size %d (>= 0)",
                        (int)sp->method, sp->num_speculative_tokens, PG_MAX_SPEC_TOKENS,
                        sp->prompt_lookup_min, sp->prompt_lookup_max, sp->max_batch_tokens,
                        sp->disable_by_batch_size);
    return PAGODA_OK;
}

/* ---- tensor parallelism (docs/ARCHITECTURE.md "Tensor parallelism") ------------------ */

/* FNV-1a over what every rank must agree on: the model's shape and the
 * options that shape the shards, KV cache and steps. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t tp_hash(const pg_model_source *src, const pagoda_engine_options *o) {
    const pg_model_config *c = pg_model_source_config(src);
    uint64_t h = 1469598103934665603ull;
    h = fnv(h, PAGODA_VERSION, strlen(PAGODA_VERSION));
    h = fnv(h, c->architecture, strlen(c->architecture));
    /* the weights themselves: two checkpoints of one shape (a model and its
     * fine-tune) would each give the ranks a slice of another model */
    const uint64_t w = pg_model_source_tensor_hash(src);
    h = fnv(h, &w, sizeof w);
    const int32_t v[] = {c->vocab_size,
                         c->hidden_size,
                         c->intermediate_size,
                         c->num_hidden_layers,
                         c->num_attention_heads,
                         c->num_key_value_heads,
                         c->head_dim,
                         c->num_experts,
                         c->num_experts_per_tok,
                         c->moe_intermediate_size,
                         c->max_position_embeddings,
                         (int32_t)c->torch_dtype,
                         o->max_model_len,
                         o->max_num_seqs,
                         o->max_num_batched_tokens,
                         (int32_t)o->kv_cache_dtype,
                         o->block_size,
                         o->quantization,
                         o->quant_group_size,
                         o->quant_act_group,
                         (int32_t)o->dtype,
                         o->tensor_parallel_size,
                         (int32_t)o->speculative.method,
                         o->speculative.num_speculative_tokens};
    h = fnv(h, v, sizeof v);
    return fnv(h, &o->kv_cache_memory, sizeof o->kv_cache_memory);
}

/* Every rank's hash against rank 0's: a rank started with another model
 * (shape or weights), config, options or pagoda version is a clear error on
 * every rank. */
static pagoda_status tp_check_ranks(pg_comm *c, const pg_model_source *src,
                                    const pagoda_engine_options *o) {
    const int n = pg_comm_size(c);
    uint64_t mine = tp_hash(src, o), *all = calloc((size_t)n, sizeof *all);
    if (!all) return pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
    pagoda_status st = pg_comm_allgather(c, &mine, sizeof mine, all);
    for (int r = 1; st == PAGODA_OK && r < n; r++)
        if (all[r] != all[0])
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "engine: tensor-parallel rank %d was started with a different model, "
                          "config or options than rank 0 (hash %016llx vs %016llx): start every "
                          "rank with the same command",
                          r, (unsigned long long)all[r], (unsigned long long)all[0]);
    free(all);
    return st;
}

/* The communicator of o->tensor_parallel_size ranks: the MPI processes under
 * mpirun, else forked processes on this host (before the thread pool
 * exists: a fork keeps only the calling thread). Returns in every rank. */
static pagoda_status tp_comm_create(const pagoda_engine_options *o, const pg_model_config *c,
                                    pg_comm **out) {
    *out = NULL;
    const int n = o->tensor_parallel_size;
    pagoda_status st;
    if (pg_comm_under_mpi()) {
        if ((st = pg_comm_create_mpi(out)) != PAGODA_OK) return st;
        if (pg_comm_size(*out) != n) {
            int got = pg_comm_size(*out);
            pg_comm_free(*out);
            *out = NULL;
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "engine: --tensor-parallel-size %d but mpirun started %d processes", n,
                            got);
        }
        return PAGODA_OK;
    }
    const int64_t T =
        o->max_num_batched_tokens ? o->max_num_batched_tokens : DEFAULT_MAX_NUM_BATCHED_TOKENS;
    pg_pool_default_shutdown();
    return pg_comm_create_shm(n, (size_t)T * (size_t)c->hidden_size, PG_RUNNER_TP_CHUNK_BYTES, out);
}

/* A rank > 0: load this rank's shard, take rank 0's runner config, run its
 * steps until rank 0 stops; then leave the process (status 0 on rank 0's
 * stop, 1 with the error logged otherwise). */
static void tp_worker(pg_model_source *src, const pg_model_options *mo, pg_comm *c) {
    const int rank = pg_comm_rank(c);
    pg_model *m = NULL;
    pg_runner *r = NULL;
    pg_runner_config rc;
    pagoda_status st = pg_model_load(src, mo, &m);
    if (st == PAGODA_OK) st = pg_comm_broadcast(c, &rc, sizeof rc, 0);
    if (st == PAGODA_OK) {
        rc.comm = c;
        st = pg_runner_create(m, &rc, &r);
    }
    if (st == PAGODA_OK) st = pg_runner_follow(r);
    if (st != PAGODA_OK)
        PG_ERROR("engine: tensor-parallel rank %d: %s", rank, pg_last_error());
    else
        pg_runner_free(r);
    pg_model_free(m);
    pg_model_source_free(src);
    pg_comm_free(c);
    fflush(NULL);
    _exit(st == PAGODA_OK ? 0 : 1);
}

/* Rank r of n: its share of the CPUs the pool would use (PAGODA_CPUS, else
 * one per physical core): `threads` CPUs from r * threads (threads 0: the
 * list divided by n), as a cpulist in buf for pg_pool_options.cpus; false
 * (unpinned, the pool's own choice) when the ranks' shares do not fit. */
static bool tp_rank_cpus(int r, int n, int *threads, char *buf, size_t cap) {
    static int allowed[PG_CPU_MAX], list[PG_CPU_MAX];
    int n_allowed = 0, n_list = 0;
    if (pg_cpu_allowed(allowed, PG_CPU_MAX, &n_allowed) != PAGODA_OK) return false;
    const char *env = getenv("PAGODA_CPUS");
    if (env && *env) {
        if (pg_cpulist_parse("PAGODA_CPUS", env, list, PG_CPU_MAX, &n_list) != PAGODA_OK)
            return false;
    } else {
        n_list = pg_cpu_physical_cores(NULL, allowed, n_allowed, list);
    }
    int k = *threads > 0 ? *threads : n_list / n;
    if (k < 1 || (int64_t)k * n > n_list) return false;
    *threads = k;
    pg_cpulist_format(list + (size_t)r * (size_t)k, k, buf, cap);
    return true;
}

/* This process's rank among the ranks on its host, and their number: the
 * communicator's (forked ranks), or Open MPI's local rank under mpirun. */
static void tp_local_rank(const pg_comm *c, int *r, int *n) {
    *r = pg_comm_rank(c);
    *n = pg_comm_size(c);
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK"),
               *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (pg_comm_get_kind(c) == PG_COMM_MPI && lr && ls && atoi(ls) > 0) {
        *r = atoi(lr);
        *n = atoi(ls);
    }
}

/* True when mpirun bound this process to its own CPUs at launch (Open MPI
 * sets OMPI_MCA_orte_bound_at_launch=1; by default it binds each rank to a
 * core when -np <= 2, to a package above): the allowed set is then this
 * rank's share already, not the host's to split between the local ranks.
 * Warns once when the local ranks together get fewer CPUs than the process
 * may see on the host (online CPUs), with the mpirun options that fix it. */
static bool tp_mpi_bound(const pg_comm *c, int local_size) {
    const char *b = getenv("OMPI_MCA_orte_bound_at_launch");
    if (pg_comm_get_kind(c) != PG_COMM_MPI || !b || strcmp(b, "1") != 0) return false;
    static int allowed[PG_CPU_MAX];
    int n_allowed = 0;
    if (pg_cpu_allowed(allowed, PG_CPU_MAX, &n_allowed) != PAGODA_OK || n_allowed < 1) return false;
    const int online = pg_cpu()->online_cpus;
    if (pg_comm_rank(c) == 0 && (int64_t)n_allowed * local_size < online)
        PG_WARN("engine: mpirun bound each tensor-parallel rank to %d CPU%s of this host's %d "
                "(Open MPI binds a rank to one core when -np <= 2): %d CPUs stay idle. Fix: "
                "mpirun --bind-to none (pagoda gives each local rank an equal share of the "
                "cores) or --map-by numa --bind-to numa",
                n_allowed, n_allowed == 1 ? "" : "s", online, online - n_allowed * local_size);
    return true;
}

/* One rank per NUMA node when the host has at least as many nodes with CPUs
 * as local ranks: bind this rank's threads and memory to its node
 * (preferred policy) and return true; false on a machine with fewer nodes
 * (then the ranks share the node's cores, tp_rank_cpus). */
static bool tp_bind_numa(int r, int n) {
    static pg_numa_topology t;
    if (pg_numa_read(NULL, &t) != PAGODA_OK) return false;
    int with_cpus = 0;
    for (int i = 0; i < t.n_nodes; i++)
        with_cpus += t.nodes[i].n_cpus > 0;
    if (with_cpus < n || n < 2) return false;
    const int idx = pg_numa_node_for_rank(&t, r, n);
    int set = 0;
    if (idx < 0 || pg_numa_bind_rank(&t, idx, 0, &set) != PAGODA_OK) {
        PG_WARN("engine: tensor-parallel rank %d: NUMA binding failed: %s", r, pg_last_error());
        return false;
    }
    PG_INFO("engine: tensor-parallel local rank %d on NUMA node %d (%d CPUs, memory policy %s)", r,
            t.nodes[idx].id, t.nodes[idx].n_cpus, set ? "preferred" : "unavailable");
    return true;
}

/* Rank 0 lost a rank mid-run: say so and end the process (requests cannot
 * complete, and the server must not hang). */
static void tp_fatal(const char *err) {
    PG_ERROR("engine: tensor parallelism failed: %s; exiting", err);
    fflush(NULL);
    _exit(1);
}

static void base_name(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    size_t len = n - b < cap - 1 ? n - b : cap - 1;
    memcpy(out, path + b, len);
    out[len] = 0;
}

pagoda_status pagoda_engine_create(const char *model, const pagoda_engine_options *opt,
                                   pagoda_engine **out) {
    *out = NULL;
    pagoda_engine_options o;
    if (opt)
        o = *opt;
    else
        pagoda_engine_options_default(&o);
    pagoda_status st = check_options(&o);
    if (st != PAGODA_OK) return st;
    pg_model_source *tp_src = NULL;
    pg_comm *comm = NULL;
    char tp_cpus[1024] = "", tp_where[1100] = "unpinned CPUs";
    if (o.tensor_parallel_size <= 1 && pg_comm_under_mpi()) {
        /* `mpirun -np N pagoda serve MODEL` without -tp: N whole copies */
        const char *ws = getenv("OMPI_COMM_WORLD_SIZE");
        if (!ws || !*ws) ws = getenv("PMI_SIZE");
        const long n = strtol(ws, NULL, 10);
        if (n > 1)
            PG_WARN("engine: started by mpirun with %ld processes but --tensor-parallel-size 1: "
                    "every process runs its own whole copy of the model (pass -tp %ld to split "
                    "it over them)",
                    n, n);
    }
    if (o.tensor_parallel_size > 1) {
        /* fork (or join the MPI ranks) before any thread starts; each rank
         * opens the source and packs only its shard */
        char tspec[1024];
        if ((st = pg_hub_fold_options(model, o.revision, o.gguf_file, tspec, sizeof tspec)) ||
            (st = pg_model_source_open(tspec, &tp_src)))
            return st;
        if ((st = tp_comm_create(&o, pg_model_source_config(tp_src), &comm))) {
            pg_model_source_free(tp_src);
            return st;
        }
        /* each rank's threads on its own NUMA node, else its own share of
         * the node's cores */
        int k = o.num_threads, lr, ln;
        tp_local_rank(comm, &lr, &ln);
        if (tp_bind_numa(lr, ln)) { /* the pool then takes the node's CPUs */
            snprintf(tp_where, sizeof tp_where, "its NUMA node");
        } else if (tp_mpi_bound(comm, ln) && tp_rank_cpus(0, 1, &k, tp_cpus, sizeof tp_cpus)) {
            /* mpirun's binding: this rank's CPUs are all it may use */
            o.num_threads = k;
            snprintf(tp_where, sizeof tp_where, "CPUs %s (bound by mpirun)", tp_cpus);
        } else if (tp_rank_cpus(lr, ln, &k, tp_cpus, sizeof tp_cpus)) {
            o.num_threads = k;
            snprintf(tp_where, sizeof tp_where, "CPUs %s", tp_cpus);
        } else {
            tp_cpus[0] = 0;
            if (o.num_threads == 0) {
                int cores = pg_cpu()->physical_cores > 0 ? pg_cpu()->physical_cores : 1;
                o.num_threads =
                    cores / o.tensor_parallel_size > 0 ? cores / o.tensor_parallel_size : 1;
            }
            PG_WARN("engine: %d ranks x %d threads do not fit the CPUs one per core: threads "
                    "not pinned",
                    o.tensor_parallel_size, o.num_threads);
        }
        if ((st = tp_check_ranks(comm, tp_src, &o)) != PAGODA_OK) {
            if (pg_comm_rank(comm) != 0) {
                PG_ERROR("%s", pg_last_error());
                fflush(NULL);
                _exit(1);
            }
            pg_model_source_free(tp_src);
            pg_comm_free(comm);
            return st;
        }
    }
    if (o.num_threads > 0) {
        pg_pool_options po = pg_pool_options_default();
        po.n_threads = o.num_threads;
        if (tp_cpus[0]) po.cpus = tp_cpus; /* this rank's share */
        if (pg_pool_default_configure(&po) != PAGODA_OK)
            PG_WARN("engine: --threads %d not applied (%s)", o.num_threads, pg_last_error());
    }
    pagoda_engine *e = calloc(1, sizeof *e);
    if (!e) return pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->next_id = 1;
    e->comm = comm;
    e->src = tp_src;
    /* a repo id is served under its name (vLLM's), a path under its base name */
    pg_hub_ref ref;
    struct stat mst;
    if (stat(model, &mst) != 0 && pg_hub_parse_ref(model, &ref))
        snprintf(e->name, sizeof e->name, "%s", model);
    else
        base_name(model, e->name, sizeof e->name);

    char spec[1024];
    if ((st = pg_hub_fold_options(model, o.revision, o.gguf_file, spec, sizeof spec)) != PAGODA_OK)
        goto fail;
    if (!e->src && (st = pg_model_source_open(spec, &e->src)) != PAGODA_OK) goto fail;
    pg_model_options mo;
    pg_model_options_default(&mo);
    mo.max_context = o.max_model_len;
    mo.compute = compute_dtype(&o);
    mo.quant_bits = o.quantization;
    mo.quant_group = o.quant_group_size;
    mo.quant_act_group = o.quant_act_group;
    mo.no_pack_cache = o.no_pack_cache;
    if (comm) {
        mo.tp_rank = pg_comm_rank(comm);
        mo.tp_size = pg_comm_size(comm);
        mo.comm = comm;
        if (mo.tp_rank != 0) { /* never returns */
            pg_model_source *wsrc = e->src;
            e->src = NULL;
            e->comm = NULL;
            pagoda_engine_free(e);
            tp_worker(wsrc, &mo, comm);
        }
    }
    if ((st = pg_model_load(e->src, &mo, &e->model)) != PAGODA_OK) goto fail;
    /* a tiktoken file gets the model's number of Whisper languages (large-v3: 100) */
    if ((st = pg_tokenizer_load_for_vocab(o.tokenizer && *o.tokenizer ? o.tokenizer
                                                                       : pg_model_source_path(e->src),
                                          pg_model_get_config(e->model)->vocab_size, &e->tok)) != PAGODA_OK)
        goto fail;
    e->enc_steps = pg_model_encoder_steps(e->model);
    if (e->enc_steps > 0) {
        pg_model_encoder_input_shape(e->model, &e->enc_rows, &e->enc_cols);
        /* decoder prompts are short and the cross K/V depends on the audio,
         * not on the tokens a block hash covers: no prefix caching */
        o.enable_prefix_caching = false;
        e->max_num_encoding = DEFAULT_MAX_NUM_ENCODING;
    }
    const pg_model_config *c = pg_model_get_config(e->model);
    e->vocab = c->vocab_size;
    e->max_model_len = pg_model_max_context(e->model);
    for (int i = 0; i < 8 && c->eos_token_ids[i] >= 0; i++)
        if (c->eos_token_ids[i] < e->vocab) /* the loaders warned about the others */
            e->eos_ids[e->n_eos++] = c->eos_token_ids[i];
    /* the tokenizer against the model's vocabulary (embedding rows) */
    const int32_t n_tok = pg_tokenizer_vocab_size(e->tok);
    const char *tok_path = o.tokenizer && *o.tokenizer ? o.tokenizer : pg_model_source_path(e->src);
    if (n_tok > e->vocab) {
        size_t len = 0;
        const char *last = pg_tokenizer_token_text(e->tok, n_tok - 1, &len);
        PG_WARN("engine: the tokenizer (%s) has %d tokens but the model's vocab_size is %d "
                "(embedding rows): ids %d..%d (e.g. '%.*s' = %d) have no embedding, and prompts "
                "holding them are refused with a 400 (as vLLM refuses out-of-vocabulary ids). "
                "Fix: use the model's own tokenizer (--tokenizer) or a checkpoint whose "
                "embedding covers it",
                tok_path, n_tok, e->vocab, e->vocab, n_tok - 1, (int)(len > 40 ? 40 : len),
                last ? last : "", n_tok - 1);
    } else if (e->vocab - n_tok > 1024 && e->vocab - n_tok > e->vocab / 32) {
        PG_WARN("engine: the tokenizer (%s) has %d tokens but the model's vocab_size is %d: "
                "pagoda assumes ids %d..%d are padding rows (they decode to nothing). So large a "
                "gap suggests the tokenizer of another model: check --tokenizer",
                tok_path, n_tok, e->vocab, n_tok, e->vocab - 1);
    }
    int32_t teos = pg_tokenizer_eos(e->tok);
    if (teos >= e->vocab) {
        PG_WARN("engine: the tokenizer's EOS id %d is outside the model's vocabulary (%d): not a "
                "stop token (the model cannot generate it)",
                teos, e->vocab);
        teos = -1;
    }
    bool have = false;
    for (int i = 0; i < e->n_eos; i++)
        have |= e->eos_ids[i] == teos;
    if (teos >= 0 && !have && e->n_eos < 8) e->eos_ids[e->n_eos++] = teos;
    e->seed = o.seed;

    /* budgets */
    int32_t mnbt =
        o.max_num_batched_tokens ? o.max_num_batched_tokens : DEFAULT_MAX_NUM_BATCHED_TOKENS;
    int32_t mns = o.max_num_seqs ? o.max_num_seqs : DEFAULT_MAX_NUM_SEQS;
    if (!o.max_num_seqs && mns > mnbt) mns = mnbt;
    e->max_num_seqs = mns;
    e->block_size = o.block_size ? o.block_size : PG_KV_DEFAULT_BLOCK_SIZE;

    /* KV cache: memory -> blocks */
    pg_dtype kvt = kv_dtype_for(&o, e->model);
    uint64_t mem =
        o.kv_cache_memory ? o.kv_cache_memory : pg_kv_default_memory_bytes(pg_cpu()->mem_available);
    pg_kv_plan plan;
    if ((st = check_kv_fits(o.kv_cache_memory, 0)) != PAGODA_OK) goto fail;
    if ((st = pg_runner_plan_kv(e->model, kvt, e->block_size, &plan)) != PAGODA_OK) goto fail;
    /* recurrent states: max_num_seqs slots come off the top; the rest is paged K/V */
    uint64_t state_mem = plan.state_bytes_per_seq * (uint64_t)mns;
    if (state_mem >= mem) {
        st = pg_error(PAGODA_ERR_LIMIT,
                      "engine: the recurrent state of %d requests (%.1f MiB) does not fit in the "
                      "KV cache memory (%.1f MiB): lower max_num_seqs or raise kv_cache_memory",
                      mns, (double)state_mem / 1048576.0, (double)mem / 1048576.0);
        goto fail;
    }
    /* prefix-cache snapshots of the states (hybrid models): a quarter of the
     * rest by default, whole snapshots */
    int32_t n_snap = 0;
    uint64_t snap_mem = 0;
    if (plan.state_bytes_per_seq > 0 && o.enable_prefix_caching) {
        uint64_t budget = o.state_cache_memory ? o.state_cache_memory : (mem - state_mem) / 4;
        uint64_t n = budget / plan.state_bytes_per_seq;
        n_snap = n > 65536 ? 65536 : (int32_t)n; /* more would only cost bookkeeping */
        snap_mem = (uint64_t)n_snap * plan.state_bytes_per_seq;
        if (snap_mem >= mem - state_mem) {
            st = pg_error(PAGODA_ERR_LIMIT,
                          "engine: %d state snapshots (%.1f MiB) leave no KV cache memory (%.1f "
                          "MiB after the states): lower state_cache_memory or raise "
                          "kv_cache_memory",
                          n_snap, (double)snap_mem / 1048576.0,
                          (double)(mem - state_mem) / 1048576.0);
            goto fail;
        }
        if (n_snap == 0)
            PG_WARN("engine: one state snapshot (%.1f MiB) exceeds the state cache memory (%.1f "
                    "MiB): no prefix caching for this hybrid model",
                    (double)plan.state_bytes_per_seq / 1048576.0, (double)budget / 1048576.0);
        else
            PG_INFO("engine: %d recurrent-state snapshots of %.2f MiB for prefix caching", n_snap,
                    (double)plan.state_bytes_per_seq / 1048576.0);
    }
    int32_t num_blocks;
    if ((st = pg_kv_num_blocks(mem - state_mem - snap_mem, e->block_size,
                               plan.kv_bytes_per_token ? plan.kv_bytes_per_token : 1,
                               &num_blocks)) != PAGODA_OK)
        goto fail;
    /* never more blocks than max_num_seqs full-length requests can use (+ the null block) */
    int64_t useful = 1;
    for (int32_t g = 0; g < plan.num_groups; g++) {
        int32_t len = plan.groups[g].kind == PG_KV_CROSS_ATTENTION
                          ? plan.groups[g].u.cross.max_encoder_len
                          : e->max_model_len;
        useful += (int64_t)mns * ((len + e->block_size - 1) / e->block_size);
    }
    if (num_blocks > useful) num_blocks = (int32_t)useful;
    e->num_kv_blocks = num_blocks - 1;
    if ((st = check_kv_fits(0, (uint64_t)num_blocks * (uint64_t)e->block_size *
                                    (plan.kv_bytes_per_token ? plan.kv_bytes_per_token : 1) +
                                state_mem + snap_mem)) != PAGODA_OK)
        goto fail;

    pg_sched_config sc;
    pg_sched_config_default(&sc);
    sc.max_num_batched_tokens = mnbt;
    sc.max_num_seqs = mns;
    sc.max_model_len = e->max_model_len;
    sc.kv.num_blocks = num_blocks;
    sc.kv.block_size = e->block_size;
    sc.kv.enable_prefix_caching = o.enable_prefix_caching;
    sc.kv.hash_algo = o.prefix_caching_hash_algo == PAGODA_PREFIX_HASH_XXHASH
                          ? PG_BLOCK_HASH_XXHASH
                          : PG_BLOCK_HASH_SHA256;
    if (o.enable_prefix_caching && sc.kv.hash_algo == PG_BLOCK_HASH_XXHASH)
        PG_WARN("engine: prefix-cache block hash xxhash (XXH3-128) is not collision resistant: "
                "a client that chooses prompts can forge a block hash equal to another "
                "request's and be served its KV cache. Use it only when every client is "
                "trusted; the default sha256 costs ~0.13 us per 16-token block, ~0.4 ms per "
                "50k-token prompt (docs/PERFORMANCE.md)");
    e->hash_blocks = sc.kv.enable_prefix_caching;
    e->hash_algo = sc.kv.hash_algo;
    sc.kv.num_groups = plan.num_groups;
    sc.kv.num_state_snapshots = n_snap;
    sc.prefill_align = plan.state_align; /* prefill chunks on the state layers' grid */
    { /* snapshots where the state layers' results do not depend on the step split */
        int32_t a = plan.state_align > 0 ? plan.state_align : e->block_size, b = e->block_size;
        int32_t x = a, y = b;
        while (y) {
            int32_t t = x % y;
            x = y;
            y = t;
        }
        sc.kv.state_snapshot_align = a / x * b;
    }
    memcpy(sc.kv.groups, plan.groups, sizeof plan.groups);
    if (e->enc_steps > 0) { /* one encoder piece costs the rows it computes */
        sc.encoder_step_tokens = pg_model_encoder_step_tokens(e->model);
        sc.max_num_encoder_tokens = o.max_num_encoder_tokens > 0 ? o.max_num_encoder_tokens
                                                                 : DEFAULT_MAX_NUM_ENCODER_TOKENS;
        sc.max_num_encoding = e->max_num_encoding;
    }
    if (o.speculative.method != PAGODA_SPEC_NONE) {
        const pagoda_speculative_config *sp = &o.speculative;
        sc.spec.num_speculative_tokens = sp->num_speculative_tokens;
        sc.spec.prompt_lookup_min = sp->prompt_lookup_min;
        sc.spec.prompt_lookup_max = sp->prompt_lookup_max;
        sc.spec.max_batch_tokens =
            sp->max_batch_tokens > 0 ? sp->max_batch_tokens : PAGODA_SPEC_DEFAULT_MAX_BATCH_TOKENS;
        sc.spec.disable_by_batch_size = sp->disable_by_batch_size;
        sc.spec.min_draft_gain = sp->min_draft_gain;
        sc.spec.states_roll_back = true; /* pg_runner_spec_keep after each step */
        /* recurrent states roll back through the runner's per-row
         * snapshots (pg_runner_spec_keep); a cross-attention cache cannot */
        if (e->enc_steps > 0) {
            PG_WARN("engine: speculative decoding is off for %s: its cross-attention cache "
                    "cannot be rolled back past rejected draft tokens",
                    e->name);
            sc.spec.num_speculative_tokens = 0;
        }
    }
    e->spec_k = sc.spec.num_speculative_tokens;
    e->spec_stride = 1 + e->spec_k;
    int32_t draft_blocks = 0;
    if (e->spec_k > 0 && o.speculative.method == PAGODA_SPEC_DRAFT_MODEL) {
        /* the draft's own paged KV: as many tokens as the target's pool plus
         * one block per request for the drafts past the accepted length,
         * never more than max_num_seqs full-length requests use */
        if ((st = pg_draft_load(o.speculative.model, &mo, e->tok, e->vocab, kvt, e->block_size,
                                &e->draft)) != PAGODA_OK)
            goto fail;
        int64_t dn = (int64_t)num_blocks + mns;
        int64_t duse = 1 + (int64_t)mns * ((e->max_model_len + e->block_size - 1) / e->block_size);
        if (dn > duse) dn = duse;
        draft_blocks = (int32_t)dn;
        const uint64_t dbytes = (uint64_t)draft_blocks * (uint64_t)e->block_size *
                                pg_draft_kv_bytes_per_token(e->draft);
        if ((st = check_kv_fits(0, (uint64_t)num_blocks * (uint64_t)e->block_size *
                                           (plan.kv_bytes_per_token ? plan.kv_bytes_per_token : 1) +
                                       state_mem + snap_mem + dbytes)) != PAGODA_OK)
            goto fail;
        if ((st = pg_draft_start(e->draft, draft_blocks, mns, e->max_model_len, mnbt, e->spec_k)) !=
            PAGODA_OK)
            goto fail;
        sc.spec.propose = pg_draft_propose;
        sc.spec.propose_ctx = e->draft;
        sc.spec.prepare = pg_draft_prepare;
    }
    if (e->spec_k > 0 && o.speculative.method == PAGODA_SPEC_MTP) {
        /* the head's own paged KV, sized as a draft model's */
        if (e->comm) {
            st = pg_error(PAGODA_ERR_UNSUPPORTED,
                          "engine: speculative method mtp does not run under tensor parallelism");
            goto fail;
        }
        if ((st = pg_mtp_create(e->model, e->src, &mo, kvt, e->block_size, &e->mtp)) != PAGODA_OK)
            goto fail;
        int64_t dn = (int64_t)num_blocks + mns;
        int64_t duse = 1 + (int64_t)mns * ((e->max_model_len + e->block_size - 1) / e->block_size);
        if (dn > duse) dn = duse;
        draft_blocks = (int32_t)dn;
        const uint64_t dbytes = (uint64_t)draft_blocks * (uint64_t)e->block_size *
                                pg_mtp_kv_bytes_per_token(e->mtp);
        if ((st = check_kv_fits(0, (uint64_t)num_blocks * (uint64_t)e->block_size *
                                           (plan.kv_bytes_per_token ? plan.kv_bytes_per_token : 1) +
                                       state_mem + snap_mem + dbytes)) != PAGODA_OK)
            goto fail;
        if ((st = pg_mtp_start(e->mtp, draft_blocks, mns, e->max_model_len, mnbt, e->spec_k)) !=
            PAGODA_OK)
            goto fail;
        e->mtp_reqs = calloc((size_t)mns, sizeof *e->mtp_reqs);
        if (!e->mtp_reqs) {
            st = pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
            goto fail;
        }
        sc.spec.propose = pg_mtp_propose;
        sc.spec.propose_ctx = e->mtp;
        sc.spec.prepare = pg_mtp_prepare;
    }
    if ((st = pg_scheduler_create(&sc, &e->sched)) != PAGODA_OK) goto fail;
    { /* the longest sequence the KV cache holds (caps max_tokens 0 = null) */
        pg_kvm *kvm = pg_scheduler_kvm(e->sched);
        int32_t usable = pg_kvm_num_usable_blocks(kvm), lo = 0, hi = e->max_model_len;
        while (lo < hi) {
            int32_t mid = lo + (hi - lo + 1) / 2;
            if (pg_kvm_blocks_for_tokens(kvm, mid) <= usable)
                lo = mid;
            else
                hi = mid - 1;
        }
        e->kv_max_seq_len = lo;
    }
    pg_runner_config rc = {.num_blocks = num_blocks,
                           .block_size = e->block_size,
                           .kv_dtype = kvt,
                           .max_num_batched_tokens = mnbt,
                           .max_num_seqs = mns,
                           .max_model_len = e->max_model_len,
                           .num_state_snapshots = n_snap,
                           .max_num_encoding = e->max_num_encoding,
                           .max_num_spec_rows = e->spec_k > 0 ? sc.spec.max_batch_tokens : 0};
    if (e->comm) { /* the other ranks' runners get this config (num_blocks included) */
        if ((st = pg_comm_broadcast(e->comm, &rc, sizeof rc, 0)) != PAGODA_OK) goto fail;
        rc.comm = e->comm;
        PG_INFO("engine: tensor parallelism over %d ranks (%s), %d threads each (rank 0 on %s)",
                pg_comm_size(e->comm), pg_comm_kind_name(pg_comm_get_kind(e->comm)),
                pg_pool_size(pg_pool_default()), tp_where);
    }
    if ((st = pg_runner_create(e->model, &rc, &e->runner)) != PAGODA_OK) goto fail;
    if (e->mtp) pg_runner_set_hidden(e->runner, NULL, pg_mtp_hidden(e->mtp));
    e->n_samplers = pg_pool_size(pg_pool_default());
    if (e->n_samplers < 1) e->n_samplers = 1;
    e->samplers = calloc((size_t)e->n_samplers, sizeof *e->samplers);
    if (!e->samplers) {
        st = pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    for (int i = 0; i < e->n_samplers; i++)
        if ((st = pg_sampler_create(e->vocab, &e->samplers[i])) != PAGODA_OK) goto fail;
    e->sampled = malloc((size_t)mns * (size_t)e->spec_stride * sizeof(int32_t));
    e->n_sampled = malloc((size_t)mns * sizeof(int32_t));
    e->row_of = malloc((size_t)mns * sizeof(int32_t));
    e->sample_idx = malloc((size_t)mns * sizeof(int32_t));
    e->sample_req = malloc((size_t)mns * sizeof(*e->sample_req));
    e->probe_of = malloc((size_t)mns * sizeof(int32_t));
    e->enc_inputs = calloc((size_t)(e->max_num_encoding > 0 ? e->max_num_encoding : 1),
                           sizeof *e->enc_inputs);
    if (!e->sampled || !e->n_sampled || !e->row_of || !e->sample_idx || !e->sample_req ||
        !e->probe_of || !e->enc_inputs) {
        st = pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
        goto fail;
    }
    e->stats.num_kv_blocks = e->num_kv_blocks;
    e->stats.num_free_kv_blocks = e->num_kv_blocks;
    PG_INFO("engine: %s, dtype %s, max_model_len %d, %d seqs x %d tokens per step, KV %s %d "
            "blocks x %d tokens (%.1f MiB), workspace %.1f MiB, prefix caching %s%s",
            e->name, dtype_option_name(o.dtype), e->max_model_len, mns, mnbt, pg_dtype_name(kvt),
            e->num_kv_blocks, e->block_size, (double)pg_runner_kv_bytes(e->runner) / 1048576.0,
            (double)pg_runner_workspace_bytes(e->runner) / 1048576.0,
            o.enable_prefix_caching ? "on, " : "off",
            o.enable_prefix_caching ? pg_block_hash_algo_name(sc.kv.hash_algo) : "");
    if (e->draft)
        PG_INFO("engine: speculative decoding: draft model %s (%s), %d tokens, greedy drafts; "
                "draft KV %d blocks x %d tokens (%.1f MiB, on top of the target's), workspace "
                "%.1f MiB; drafts while a step's decode tokens + drafts <= %d%s",
                o.speculative.model, pg_draft_arch_name(e->draft), e->spec_k,
                pg_draft_num_blocks(e->draft), e->block_size,
                (double)pg_draft_kv_bytes(e->draft) / 1048576.0,
                (double)pg_draft_workspace_bytes(e->draft) / 1048576.0, sc.spec.max_batch_tokens,
                sc.spec.disable_by_batch_size > 0 ? ", off at disable_by_batch_size" : "");
    else if (e->mtp)
        PG_INFO("engine: speculative decoding: the checkpoint's MTP head, %d tokens, greedy "
                "drafts; its KV %d blocks x %d tokens (%.1f MiB, on top of the target's), "
                "workspace %.1f MiB; drafts while a step's decode tokens + drafts <= %d%s",
                e->spec_k, pg_mtp_num_blocks(e->mtp), e->block_size,
                (double)pg_mtp_kv_bytes(e->mtp) / 1048576.0,
                (double)pg_mtp_workspace_bytes(e->mtp) / 1048576.0, sc.spec.max_batch_tokens,
                sc.spec.disable_by_batch_size > 0 ? ", off at disable_by_batch_size" : "");
    else if (e->spec_k > 0)
        PG_INFO(
            "engine: speculative decoding: ngram, %d tokens, prompt_lookup %d..%d, drafts while "
            "a step's decode tokens + drafts <= %d%s",
            e->spec_k, sc.spec.prompt_lookup_min, sc.spec.prompt_lookup_max,
            sc.spec.max_batch_tokens,
            sc.spec.disable_by_batch_size > 0 ? ", off at disable_by_batch_size" : "");
    *out = e;
    return PAGODA_OK;
fail:
    pagoda_engine_free(e);
    return st;
}

static void ereq_free(ereq *r) {
    if (!r) return;
    pg_request_destroy(r->sr); /* the scheduler no longer holds it */
    free(r->bias);
    pg_detok_free(&r->dt);
    free(r->lp_ids);
    free(r->lp_vals);
    free(r->top);
    free(r->error);
    free(r->enc_in);
    pg_tmatch_free(r->gm);
    free(r);
}

void pagoda_engine_free(pagoda_engine *e) {
    if (!e) return;
    free(e->aborts);
    free(e->outs);
    free(e->sampled);
    free(e->n_sampled);
    free(e->row_of);
    free(e->sample_idx);
    free(e->sample_req);
    free(e->probe_of);
    free(e->enc_inputs);
    for (int i = 0; e->samplers && i < e->n_samplers; i++)
        pg_sampler_free(e->samplers[i]);
    free(e->samplers);
    pg_runner_free(e->runner);
    if (e->comm) { /* keeps the caller's error message (a failed create's) */
        char saved[512];
        snprintf(saved, sizeof saved, "%s", pg_last_error());
        if (pg_comm_free(e->comm) != PAGODA_OK) {
            PG_WARN("engine: tensor-parallel ranks: %s", pg_last_error());
            pg_error(PAGODA_ERR_IO, "%s", saved);
        }
    }
    pg_scheduler_destroy(e->sched);
    /* after the scheduler, which borrows their pg_requests */
    for (ereq *r = e->reap, *n; r; r = n) {
        n = r->next;
        ereq_free(r);
    }
    for (size_t i = 0; i < e->n_live; i++)
        ereq_free(e->live[i]);
    free(e->live);
    pg_draft_free(e->draft);
    pg_mtp_free(e->mtp);
    free(e->mtp_reqs);
    pg_grammars_free(e->grammars);
    pg_chat_cache_free(e->chat);
    pg_tokenizer_free(e->tok);
    pg_model_free(e->model);
    pg_model_source_free(e->src);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

int32_t pagoda_engine_max_model_len(const pagoda_engine *e) {
    return e->max_model_len;
}
int32_t pagoda_engine_vocab_size(const pagoda_engine *e) {
    return e->vocab;
}
size_t pagoda_engine_weight_bytes_per_step(const pagoda_engine *e) {
    return pg_model_weight_bytes_per_step(e->model);
}
uint64_t pagoda_engine_resident_bytes(const pagoda_engine *e) {
    return (uint64_t)pg_model_weight_bytes_per_step(e->model) + pg_runner_kv_bytes(e->runner) +
           pg_runner_workspace_bytes(e->runner);
}
bool pagoda_engine_encoder_input_shape(const pagoda_engine *e, int32_t *n_mels,
                                       int32_t *n_frames) {
    if (n_mels) *n_mels = e->enc_rows;
    if (n_frames) *n_frames = e->enc_cols;
    return e->enc_steps > 0;
}

const char *pagoda_engine_model_name(const pagoda_engine *e) {
    return e->name;
}
const char *pagoda_engine_architecture(const pagoda_engine *e) {
    return pg_model_arch_name(e->model);
}

/* For pagoda_apply_chat_template (src/engine/chat.h): where the template and
 * the special tokens are looked up. */
pagoda_status pagoda_grammar_compile(pagoda_engine *e, pagoda_grammar_kind kind,
                                     const char *spec, size_t len, pagoda_grammar **out) {
    *out = NULL;
    if (!spec && kind != PAGODA_GRAMMAR_JSON_OBJECT)
        return pg_error(PAGODA_ERR_INVALID_ARG, "grammar: no spec");
    if (spec && !len) len = strlen(spec);
    pthread_mutex_lock(&e->mu);
    if (!e->grammars) e->grammars = pg_grammars_create(e->tok, e->vocab);
    pg_grammars *gr = e->grammars;
    pthread_mutex_unlock(&e->mu);
    if (!gr) return pg_error(PAGODA_ERR_NOMEM, "grammar: out of memory");
    pg_tgram *t;
    pagoda_status st = pg_grammars_get(gr, kind, spec, len, &t);
    if (st == PAGODA_OK) *out = (pagoda_grammar *)t;
    return st;
}

void pagoda_grammar_free(pagoda_grammar *g) {
    if (g) pg_tgram_release((pg_tgram *)g);
}

bool pagoda_grammar_allows_prefix(const pagoda_grammar *g, const char *text, size_t len) {
    if (!g || !text) return false;
    if (!len) len = strlen(text);
    pg_gstate *m;
    if (pg_gstate_create(pg_tgram_gram((const pg_tgram *)g), &m) != PAGODA_OK) return false;
    bool ok = pg_gstate_feed(m, (const uint8_t *)text, len);
    pg_gstate_free(m);
    return ok;
}

const char *pg_engine_model_path(const pagoda_engine *e) {
    return pg_model_source_path(e->src);
}

pg_chat_cache *pg_engine_chat_cache(const pagoda_engine *e, pg_chat_cache *install) {
    pagoda_engine *m = (pagoda_engine *)e; /* the cache is filled once, then read-only */
    pthread_mutex_lock(&m->mu);
    if (!m->chat) m->chat = install;
    pg_chat_cache *c = m->chat;
    pthread_mutex_unlock(&m->mu);
    return c;
}

/* ---- requests ----------------------------------------------------------------- */

void pagoda_sampling_defaults(const pagoda_engine *e, pagoda_sampling *s) {
    memset(s, 0, sizeof *s);
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->repetition_penalty = 1.0f;
    s->seed = -1;
    s->skip_special_tokens = true;
    s->logprobs = -1;
    const pg_generation_defaults *g = e ? pg_model_source_generation(e->src) : NULL;
    if (!g) return;
    if (!isnan(g->temperature) && g->temperature >= 0) s->temperature = g->temperature;
    if (!isnan(g->top_p) && g->top_p > 0 && g->top_p <= 1) s->top_p = g->top_p;
    if (!isnan(g->min_p) && g->min_p >= 0 && g->min_p <= 1) s->min_p = g->min_p;
    if (!isnan(g->repetition_penalty) && g->repetition_penalty > 0)
        s->repetition_penalty = g->repetition_penalty;
    if (g->top_k > 0) s->top_k = g->top_k;
}

void pagoda_request_defaults(const pagoda_engine *e, pagoda_request *r) {
    memset(r, 0, sizeof *r);
    r->add_special_tokens = true;
    r->prompt_logits_pos = -1;
    r->reasoning_start_id = -1;
    r->reasoning_end_id = -1;
    pagoda_sampling_defaults(e, &r->sampling);
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Build the engine request (validated), its pg_request included (prompt
 * tokenized, finish conditions, salt, block hashes), without touching shared
 * state: on the caller's thread. */
static pagoda_status build_request(pagoda_engine *e, const pagoda_request *q, ereq **out) {
    *out = NULL;
    const pagoda_sampling *s = &q->sampling;
    ereq *r = calloc(1, sizeof *r);
    if (!r) return pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
    pagoda_status st = PAGODA_OK;
    /* prompt: the caller's ids, or the text's (tokenized into `owned`) */
    const int32_t *prompt = NULL;
    int32_t *owned = NULL;
    int32_t n_prompt = 0;
    if (q->prompt_token_ids && q->n_prompt_token_ids) {
        if (q->n_prompt_token_ids > (size_t)INT32_MAX / 2) {
            st = pg_error(PAGODA_ERR_LIMIT, "request: prompt of %zu tokens is too long",
                          q->n_prompt_token_ids);
            goto fail;
        }
        prompt = q->prompt_token_ids;
        n_prompt = (int32_t)q->n_prompt_token_ids;
        for (int32_t i = 0; i < n_prompt; i++)
            if (prompt[i] < 0 || prompt[i] >= e->vocab) {
                st = pg_error(PAGODA_ERR_INVALID_ARG,
                              "request: prompt token %d at index %d is outside the vocab [0, %d)",
                              prompt[i], i, e->vocab);
                goto fail;
            }
    } else if (q->prompt) {
        size_t len = q->prompt_len ? q->prompt_len : strlen(q->prompt);
        size_t cap = len + 16, n = 0;
        owned = malloc(cap * sizeof(int32_t));
        if (!owned) goto nomem;
        if ((st = pg_tokenizer_encode(e->tok, q->prompt, len, q->add_special_tokens, owned, cap,
                                      &n)) != PAGODA_OK)
            goto fail;
        if (n > cap) { /* more ids than bytes + 16 (byte fallback): the full count, again */
            int32_t *bigger = realloc(owned, n * sizeof(int32_t));
            if (!bigger) goto nomem;
            owned = bigger;
            cap = n;
            if ((st = pg_tokenizer_encode(e->tok, q->prompt, len, q->add_special_tokens, owned, cap,
                                          &n)) != PAGODA_OK)
                goto fail;
            if (n > cap) {
                st = pg_error(PAGODA_ERR_INTERNAL, "request: the prompt's id count changed");
                goto fail;
            }
        }
        if (n > (size_t)INT32_MAX / 2) {
            st = pg_error(PAGODA_ERR_LIMIT, "request: prompt of %zu tokens is too long", n);
            goto fail;
        }
        prompt = owned;
        n_prompt = (int32_t)n;
    }
    if (n_prompt < 1) {
        st = pg_error(PAGODA_ERR_INVALID_ARG, "request: the prompt is empty");
        goto fail;
    }
    if (n_prompt >= e->max_model_len) {
        st = pg_error(PAGODA_ERR_LIMIT,
                      "request: the prompt is %d tokens; max_model_len is %d (room for at least "
                      "one output token is needed)",
                      n_prompt, e->max_model_len);
        goto fail;
    }
    /* encoder input and logits processor */
    if (e->enc_steps > 0) {
        if (!q->encoder_features) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "request: %s is an encoder-decoder model: the request needs its encoder "
                          "input (%d x %d features, e.g. a log-mel window)",
                          e->name, e->enc_rows, e->enc_cols);
            goto fail;
        }
        if (q->encoder_n_mels != e->enc_rows || q->encoder_n_frames != e->enc_cols) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "request: encoder input of %d x %d features; %s takes %d x %d",
                          q->encoder_n_mels, q->encoder_n_frames, e->name, e->enc_rows,
                          e->enc_cols);
            goto fail;
        }
        size_t nf = (size_t)e->enc_rows * (size_t)e->enc_cols;
        r->enc_in = malloc(nf * sizeof(float));
        if (!r->enc_in) goto nomem;
        memcpy(r->enc_in, q->encoder_features, nf * sizeof(float));
        for (size_t i = 0; i < nf; i++)
            if (!isfinite(r->enc_in[i])) {
                st = pg_error(PAGODA_ERR_INVALID_ARG,
                              "request: encoder input value %zu is not finite", i);
                goto fail;
            }
    } else if (q->encoder_features) {
        st = pg_error(PAGODA_ERR_INVALID_ARG,
                      "request: %s is a decoder-only model: it takes no encoder input", e->name);
        goto fail;
    }
    r->lfn = q->logits_fn;
    r->lctx = q->logits_ctx;
    if (q->logits_fn && q->prompt_logits_pos >= n_prompt) {
        st = pg_error(PAGODA_ERR_INVALID_ARG,
                      "request: prompt_logits_pos %d is outside the prompt of %d tokens",
                      q->prompt_logits_pos, n_prompt);
        goto fail;
    }
    /* lengths */
    if (s->max_tokens < 0 || s->min_tokens < 0) {
        st = pg_error(PAGODA_ERR_INVALID_ARG, "request: max_tokens %d / min_tokens %d must be >= 0",
                      s->max_tokens, s->min_tokens);
        goto fail;
    }
    if (s->max_tokens > 0 && (int64_t)n_prompt + s->max_tokens > e->max_model_len) {
        st = pg_error(PAGODA_ERR_LIMIT,
                      "request: prompt (%d tokens) + max_tokens (%d) = %lld exceeds max_model_len "
                      "%d",
                      n_prompt, s->max_tokens, (long long)n_prompt + s->max_tokens,
                      e->max_model_len);
        goto fail;
    }
    /* max_tokens 0 (null): up to the context, or up to what the KV cache can
     * hold when it is smaller than max_model_len */
    if (s->max_tokens == 0 && n_prompt >= e->kv_max_seq_len) {
        st = pg_error(PAGODA_ERR_LIMIT,
                      "request: the prompt is %d tokens; the KV cache holds sequences of at most "
                      "%d tokens (%d blocks of %d), which leaves no room for output",
                      n_prompt, e->kv_max_seq_len, e->num_kv_blocks, e->block_size);
        goto fail;
    }
    const int32_t max_tokens = s->max_tokens > 0 ? s->max_tokens : e->kv_max_seq_len - n_prompt;
    if (s->min_tokens > max_tokens) {
        st = pg_error(PAGODA_ERR_INVALID_ARG, "request: min_tokens %d exceeds max_tokens %d",
                      s->min_tokens, max_tokens);
        goto fail;
    }
    int64_t total = (int64_t)n_prompt + max_tokens;
    int64_t blocks = (total + e->block_size - 1) / e->block_size;
    if (blocks > e->num_kv_blocks) {
        st = pg_error(PAGODA_ERR_LIMIT,
                      "request: prompt + max_tokens = %lld tokens need %lld KV blocks; the cache "
                      "has %d blocks of %d tokens",
                      (long long)total, (long long)blocks, e->num_kv_blocks, e->block_size);
        goto fail;
    }
    /* the request itself: the prompt's one copy (the id comes under the lock) */
    if ((st = pg_request_create(0, prompt, n_prompt, max_tokens, e->max_model_len, &r->sr)) !=
        PAGODA_OK)
        goto fail;
    free(owned);
    owned = NULL;
    pg_request *sr = r->sr;
    sr->min_tokens = s->min_tokens;
    sr->eos_token_id = e->n_eos ? e->eos_ids[0] : -1;
    sr->ignore_eos = s->ignore_eos;
    sr->probe_len = q->logits_fn && q->prompt_logits_pos >= 0 ? q->prompt_logits_pos + 1 : 0;
    sr->encoder_steps = r->enc_in ? e->enc_steps : 0;
    /* stop tokens: the user's, then the model's extra EOS ids */
    if (s->n_stop_token_ids > 0 && !s->stop_token_ids) {
        st = pg_error(PAGODA_ERR_INVALID_ARG, "request: stop_token_ids is NULL");
        goto fail;
    }
    for (size_t i = 0; i < s->n_stop_token_ids; i++) {
        int32_t t = s->stop_token_ids[i];
        if (sr->num_stop_token_ids == PG_MAX_STOP_TOKENS) {
            st = pg_error(PAGODA_ERR_INVALID_ARG, "request: %zu stop_token_ids, at most %d",
                          s->n_stop_token_ids, PG_MAX_STOP_TOKENS);
            goto fail;
        }
        if (t < 0 || t >= e->vocab) {
            st = pg_error(PAGODA_ERR_INVALID_ARG,
                          "request: stop_token_ids: token id %d is outside the vocabulary [0, %d)",
                          t, e->vocab);
            goto fail;
        }
        sr->stop_token_ids[sr->num_stop_token_ids++] = t;
    }
    for (int i = 1; !sr->ignore_eos && i < e->n_eos && sr->num_stop_token_ids < PG_MAX_STOP_TOKENS;
         i++)
        sr->stop_token_ids[sr->num_stop_token_ids++] = e->eos_ids[i];
    if (q->grammar && (!e->grammars || !pg_grammars_owns(e->grammars, (const pg_tgram *)q->grammar))) {
        st = pg_error(PAGODA_ERR_INVALID_ARG,
                      "request: the grammar was compiled by another engine (another vocabulary)");
        goto fail;
    }
    if (q->grammar) { /* allowed when complete: EOS and the stop token ids */
        int32_t stops[PG_MAX_STOP_TOKENS + 1];
        int32_t ns = 0;
        if (!sr->ignore_eos && sr->eos_token_id >= 0) stops[ns++] = sr->eos_token_id;
        for (int32_t i = 0; i < sr->num_stop_token_ids; i++)
            stops[ns++] = sr->stop_token_ids[i];
        if ((st = pg_tmatch_create((pg_tgram *)q->grammar, stops, ns, &r->gm)) != PAGODA_OK)
            goto fail;
        r->gm_phase = GM_GRAMMAR;
        if (q->grammar_after_reasoning) {
            const int32_t rs = q->reasoning_start_id, re = q->reasoning_end_id;
            const size_t nq = q->reasoning_end_ids ? q->n_reasoning_end_ids : 0;
            if (nq > PAGODA_MAX_REASONING_END_IDS || (nq && !q->reasoning_open)) {
                st = pg_error(PAGODA_ERR_INVALID_ARG,
                              "request: grammar_after_reasoning: reasoning_end_ids: %zu ids "
                              "(1..%d, and only with reasoning_open)",
                              nq, PAGODA_MAX_REASONING_END_IDS);
                goto fail;
            }
            for (size_t i = 0; i < nq; i++) {
                const int32_t t = q->reasoning_end_ids[i];
                if (t < 0 || t >= e->vocab) {
                    st = pg_error(PAGODA_ERR_INVALID_ARG,
                                  "request: grammar_after_reasoning: reasoning_end_ids[%zu] = %d "
                                  "is outside the vocabulary [0, %d)",
                                  i, t, e->vocab);
                    goto fail;
                }
                r->re_seq[i] = t;
            }
            r->n_re_seq = (int32_t)nq;
            if ((!nq && (re < 0 || re >= e->vocab)) ||
                (!q->reasoning_open && (rs < 0 || rs >= e->vocab))) {
                st = pg_error(PAGODA_ERR_INVALID_ARG,
                              "request: grammar_after_reasoning: reasoning_%s_id %d is outside "
                              "the vocabulary [0, %d)",
                              re < 0 || re >= e->vocab ? "end" : "start",
                              re < 0 || re >= e->vocab ? re : rs, e->vocab);
                goto fail;
            }
            r->gm_phase = q->reasoning_open ? GM_REASONING : GM_MAY_OPEN;
            r->rs_id = rs;
            r->re_id = re;
        }
    }
    /* one position at a time: no draft tokens */
    sr->no_spec = r->gm != NULL || r->lfn != NULL;
    /* sampling */
    pg_sampling_params *sp = &r->sp;
    *sp = pg_sampling_params_default();
    sp->temperature = s->temperature;
    sp->top_p = s->top_p;
    sp->top_k = s->top_k;
    sp->min_p = s->min_p;
    sp->repetition_penalty = s->repetition_penalty;
    sp->presence_penalty = s->presence_penalty;
    sp->frequency_penalty = s->frequency_penalty;
    if (s->n_logit_bias) {
        if (!s->logit_bias) {
            st = pg_error(PAGODA_ERR_INVALID_ARG, "request: logit_bias is NULL");
            goto fail;
        }
        r->bias = malloc(s->n_logit_bias * sizeof *r->bias);
        if (!r->bias) goto nomem;
        for (size_t i = 0; i < s->n_logit_bias; i++)
            r->bias[i] = (pg_logit_bias){s->logit_bias[i].token, s->logit_bias[i].bias};
        sp->logit_bias = r->bias;
        sp->n_logit_bias = s->n_logit_bias;
    }
    r->n_logprobs = s->logprobs < 0 ? -1 : s->logprobs;
    sp->n_logprobs = r->n_logprobs < 0 ? 0 : r->n_logprobs;
    sp->seed = s->seed;
    if ((st = pg_sampling_params_validate(sp, e->vocab)) != PAGODA_OK) goto fail;
    if (r->n_logprobs >= 0) { /* one set per token a step may produce */
        int32_t cap = r->lp_cap = r->n_logprobs > 0 ? r->n_logprobs : 1;
        size_t n = (size_t)cap * (size_t)e->spec_stride;
        r->lp_ids = malloc(n * sizeof(int32_t));
        r->lp_vals = malloc(n * sizeof(float));
        r->top = malloc(n * sizeof *r->top);
        if (!r->lp_ids || !r->lp_vals || !r->top) goto nomem;
    }
    if (s->n_stop && !s->stop) {
        st = pg_error(PAGODA_ERR_INVALID_ARG, "request: stop is NULL");
        goto fail;
    }
    r->no_detok = q->no_detokenize;
    if (r->no_detok && s->n_stop) {
        st = pg_error(PAGODA_ERR_INVALID_ARG,
                      "request: %zu stop strings with no_detokenize (the caller detokenizes: it "
                      "matches its stop strings itself, pagoda_detokenizer_add)",
                      s->n_stop);
        goto fail;
    }
    if (!r->no_detok &&
        (st = pg_detok_init(&r->dt, e->tok, sr->tokens, (size_t)n_prompt, s->skip_special_tokens,
                            s->stop, s->n_stop, s->include_stop_str_in_output)) != PAGODA_OK)
        goto fail;
    /* the salt, then the block hashes the scheduler would compute: here, off
     * the engine thread */
    if ((q->cache_salt && *q->cache_salt &&
         (st = pg_request_set_salt(sr, q->cache_salt, strlen(q->cache_salt))) != PAGODA_OK) ||
        (st = pg_request_hash_blocks(sr, e->block_size, e->hash_blocks ? &e->hash_algo : NULL)) !=
            PAGODA_OK)
        goto fail;
    r->arrival = now_s();
    *out = r;
    return PAGODA_OK;
nomem:
    st = pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
fail:
    free(owned);
    ereq_free(r);
    return st;
}

static pagoda_status live_push(pagoda_engine *e, ereq *r) {
    if (e->n_live == e->cap_live) {
        size_t cap = e->cap_live ? 2 * e->cap_live : 64;
        ereq **g = realloc(e->live, cap * sizeof *g);
        if (!g) return pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
        e->live = g;
        e->cap_live = cap;
    }
    e->live[e->n_live++] = r;
    return PAGODA_OK;
}

/* Index of id in live (caller holds mu), or -1. */
static long live_find(const pagoda_engine *e, uint64_t id) {
    for (size_t i = 0; i < e->n_live; i++)
        if (e->live[i]->id == id) return (long)i;
    return -1;
}

pagoda_status pagoda_engine_add_request(pagoda_engine *e, const pagoda_request *req,
                                        uint64_t *id_out, int32_t *n_prompt_tokens_out) {
    if (!e || !req) return pg_error(PAGODA_ERR_INVALID_ARG, "request: NULL argument");
    ereq *r;
    pagoda_status st = build_request(e, req, &r);
    if (st != PAGODA_OK) return st;
    pthread_mutex_lock(&e->mu);
    r->id = r->sr->id = e->next_id++;
    if (r->sp.seed < 0)
        r->sp.seed =
            (int64_t)((e->seed ? mix64(e->seed ^ mix64(r->id)) : pg_rng_random_seed()) >> 1);
    r->rng = pg_rng_from_seed(r->sp.seed);
    st = live_push(e, r);
    if (st == PAGODA_OK) {
        if (e->pending_tail)
            e->pending_tail->next = r;
        else
            e->pending_head = r;
        e->pending_tail = r;
        e->n_pending++;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (st != PAGODA_OK) {
        ereq_free(r);
        return st;
    }
    if (id_out) *id_out = r->id;
    if (n_prompt_tokens_out) *n_prompt_tokens_out = r->sr->num_prompt_tokens;
    return PAGODA_OK;
}

pagoda_status pagoda_engine_abort(pagoda_engine *e, uint64_t id) {
    pagoda_status st = PAGODA_OK;
    pthread_mutex_lock(&e->mu);
    if (live_find(e, id) < 0) {
        st = pg_error(PAGODA_ERR_NOT_FOUND, "abort: no live request %llu", (unsigned long long)id);
    } else {
        if (e->n_aborts == e->cap_aborts) {
            size_t cap = e->cap_aborts ? 2 * e->cap_aborts : 16;
            uint64_t *g = realloc(e->aborts, cap * sizeof *g);
            if (!g)
                st = pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
            else {
                e->aborts = g;
                e->cap_aborts = cap;
            }
        }
        if (st == PAGODA_OK) e->aborts[e->n_aborts++] = id;
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- stepping ------------------------------------------------------------------- */

static pagoda_output *new_output(pagoda_engine *e, ereq *r) {
    if (e->n_outs == e->cap_outs) {
        size_t cap = e->cap_outs ? 2 * e->cap_outs : 64;
        pagoda_output *g = realloc(e->outs, cap * sizeof *g);
        if (!g) return NULL;
        e->outs = g;
        e->cap_outs = cap;
    }
    pagoda_output *o = &e->outs[e->n_outs++];
    memset(o, 0, sizeof *o);
    o->id = r->id;
    o->stop_token = -1;
    o->n_prompt_tokens = r->sr->num_prompt_tokens;
    o->n_output_tokens = r->n_out;
    o->n_cached_tokens = r->n_cached;
    o->arrival_time = r->arrival;
    o->first_scheduled_time = r->first_sched;
    o->first_token_time = r->first_token;
    o->text_delta = "";
    return o;
}

/* Remove r from live (it finished); freed at the next step. */
static void retire(pagoda_engine *e, ereq *r) {
    r->finished = true;
    pthread_mutex_lock(&e->mu);
    long i = live_find(e, r->id);
    if (i >= 0) e->live[i] = e->live[--e->n_live];
    pthread_mutex_unlock(&e->mu);
    r->next = e->reap;
    e->reap = r;
}

/* Report r (this step's token, text, finish) and retire it if finished. */
static pagoda_status emit(pagoda_engine *e, ereq *r, pagoda_finish_reason fin, int32_t stop_token,
                          const char *error) {
    pagoda_output *o = new_output(e, r);
    if (!o) return pg_error(PAGODA_ERR_NOMEM, "engine: out of memory");
    if (r->n_new) {
        o->new_token_ids = r->new_tokens;
        o->n_new_tokens = (size_t)r->n_new;
        if (r->n_logprobs >= 0) o->logprobs = r->tlp;
    }
    const char *d;
    size_t n;
    pagoda_status st = pg_detok_take(&r->dt, fin != PAGODA_FINISH_NONE, &d, &n);
    if (st != PAGODA_OK) return st;
    o->text_delta = d;
    o->text_delta_len = n;
    o->finish_reason = fin;
    o->stop_token = stop_token;
    if (r->dt.stopped) o->stop_reason = r->dt.stop[r->dt.stop_index];
    if (fin == PAGODA_FINISH_ERROR) {
        free(r->error);
        r->error = strdup(error ? error : "error");
        o->error = r->error;
    }
    if (fin != PAGODA_FINISH_NONE) retire(e, r);
    return PAGODA_OK;
}

static ereq *find_locked(pagoda_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    long i = live_find(e, id);
    ereq *r = i >= 0 ? e->live[i] : NULL;
    pthread_mutex_unlock(&e->mu);
    return r;
}

/* Apply the queued adds and aborts. */
static pagoda_status apply_queue(pagoda_engine *e) {
    pthread_mutex_lock(&e->mu);
    ereq *head = e->pending_head;
    e->pending_head = e->pending_tail = NULL;
    e->n_pending = 0;
    size_t na = e->n_aborts;
    uint64_t *ab = NULL;
    if (na) {
        ab = malloc(na * sizeof *ab);
        if (ab) memcpy(ab, e->aborts, na * sizeof *ab);
        e->n_aborts = 0;
    }
    pthread_mutex_unlock(&e->mu);
    pagoda_status st = PAGODA_OK;
    for (ereq *r = head, *n; r; r = n) {
        n = r->next;
        r->next = NULL;
        if (pg_scheduler_add_request(e->sched, r->sr) == PAGODA_OK) { /* borrowed */
            r->in_sched = true;
        } else if ((st = emit(e, r, PAGODA_FINISH_ERROR, -1, pg_last_error())) != PAGODA_OK) {
            break;
        }
    }
    for (size_t i = 0; i < na && ab && st == PAGODA_OK; i++) {
        ereq *r = find_locked(e, ab[i]);
        if (!r || r->finished) continue;
        if (r->in_sched) pg_scheduler_abort(e->sched, r->id);
        r->in_sched = false;
        st = emit(e, r, PAGODA_FINISH_ABORT, -1, NULL);
    }
    free(ab);
    return st;
}

/* Before min_tokens outputs, EOS (unless ignore_eos) and the stop token ids
 * cannot be sampled (vLLM's MinTokensLogitsProcessor). */
static void mask_min_tokens(const ereq *r, int32_t n_out, float *logits) {
    const pg_request *q = r->sr;
    if (n_out >= q->min_tokens) return;
    if (r->gm && r->gm_phase != GM_REASONING && pg_tmatch_complete(r->gm))
        return; /* the grammar allows only the end */
    if (!q->ignore_eos && q->eos_token_id >= 0) logits[q->eos_token_id] = -INFINITY;
    for (int32_t i = 0; i < q->num_stop_token_ids; i++)
        logits[q->stop_token_ids[i]] = -INFINITY;
}

/* r's outputs so far (its pg_request's tokens after the prompt; while it
 * samples, n_out of them, then the drafts being verified) */
static inline int32_t *out_ids(const ereq *r) {
    return r->sr->tokens + r->sr->num_prompt_tokens;
}

static pagoda_status sample_one(pagoda_engine *e, pg_sampler *smp, ereq *r, float *logits,
                                int32_t pos, int32_t draft, int32_t *tok);

/* The requests of one step that sample (engine arrays sample_req/idx). */
typedef struct sample_job {
    pagoda_engine *e;
    const pg_sched_output *so;
    float *logits;
    int32_t n;
} sample_job;

/* Request r's tokens of this step into toks[], their count returned: one
 * per logits row from `rows` while the model agrees with the drafts
 * (greedy: the argmax equals the draft; sampled: pg_sampler_verify accepts
 * it), the accepted drafts then the token after them (a correction or,
 * when all D were accepted, the bonus token). The drafts sit in r's output
 * history while later rows are sampled (penalties, draw positions), as
 * they will if accepted. */
static pagoda_status sample_request(pagoda_engine *e, pg_sampler *smp, ereq *r, float *rows,
                                    int32_t D, const int32_t *drafts, int32_t *toks, int32_t *cnt) {
    *cnt = 0;
    for (int32_t j = 0; j <= D; j++) {
        const int32_t draft = j < D ? drafts[j] : -1;
        pagoda_status st =
            sample_one(e, smp, r, rows + (size_t)j * (size_t)e->vocab, j, draft, &toks[j]);
        if (st != PAGODA_OK) return st;
        *cnt = j + 1;
        if (toks[j] != draft) break;
        /* the history of the next row, in the request's scratch tokens (the
         * scheduler leaves room: drafts <= max_total_tokens - num_tokens - 1) */
        if (r->sr->num_tokens + j >= r->sr->max_total_tokens)
            return pg_error(PAGODA_ERR_INTERNAL, "engine: request %llu: no room for draft %d",
                            (unsigned long long)r->id, j);
        out_ids(r)[r->n_out + j] = draft;
    }
    return PAGODA_OK;
}

/* Sample requests [begin, end) of the job with pool thread tid's sampler;
 * a failure is kept on the request (its error), never returned. */
static void sample_range(void *ctx, size_t begin, size_t end, int tid) {
    sample_job *j = ctx;
    pagoda_engine *e = j->e;
    pg_sampler *smp = e->samplers[tid];
    for (size_t k = begin; k < end; k++) {
        ereq *r = e->sample_req[k];
        int32_t i = e->sample_idx[k];
        float *row = j->logits + (size_t)e->row_of[i] * (size_t)e->vocab;
        const int32_t D = j->so->num_spec_tokens[i];
        int32_t *toks = e->sampled + (size_t)i * (size_t)e->spec_stride;
        if (sample_request(e, smp, r, row, D,
                           j->so->spec_token_ids + (size_t)i * PG_MAX_SPEC_TOKENS, toks,
                           &e->n_sampled[i]) != PAGODA_OK) {
            toks[0] = 0;
            e->n_sampled[i] = 1;
            r->error = strdup(pg_last_error());
        }
    }
}

/* The first n outputs of r end with its reasoning_end_ids sequence. */
static bool ends_with_seq(const ereq *r, int32_t n) {
    if (n < r->n_re_seq) return false;
    for (int32_t i = 0; i < r->n_re_seq; i++)
        if (out_ids(r)[n - r->n_re_seq + i] != r->re_seq[i]) return false;
    return true;
}

/* grammar_after_reasoning: advance r's phase over the outputs not yet
 * scanned. The first output decides between the reasoning (reasoning_start
 * id) and the grammar (anything else, fed from position 0); the first
 * reasoning_end id (or the end of the first reasoning_end_ids sequence)
 * closes the reasoning and the grammar is fed from the token after it. Outputs survive preemption, so this is a pure function of
 * the request's tokens. */
static void advance_phase(ereq *r) {
    for (; r->gm_phase != GM_GRAMMAR && r->gm_scan < r->n_out; r->gm_scan++) {
        const int32_t t = out_ids(r)[r->gm_scan];
        if (r->gm_phase == GM_MAY_OPEN) {
            r->gm_phase = t == r->rs_id ? GM_REASONING : GM_GRAMMAR;
            r->gm_fed = r->gm_scan; /* the grammar's output starts with t */
        } else if (r->n_re_seq ? ends_with_seq(r, r->gm_scan + 1) : t == r->re_id) {
            r->gm_phase = GM_GRAMMAR;
            r->gm_fed = r->gm_scan + 1;
        }
    }
}

/* Structured output: feed the matcher the outputs it has not seen (they
 * survive preemption, so this is a pure function of the request's tokens)
 * and mask the logits to the tokens that keep the output a valid prefix.
 * With grammar_after_reasoning: nothing is masked inside the reasoning, and
 * the first token may also be reasoning_start_id (GM_MAY_OPEN). */
static pagoda_status apply_grammar(pagoda_engine *e, ereq *r, float *logits) {
    advance_phase(r);
    if (r->gm_phase == GM_REASONING) return PAGODA_OK;
    const bool may_open = r->gm_phase == GM_MAY_OPEN;
    const float open_logit = may_open ? logits[r->rs_id] : 0.0f;
    for (; !may_open && r->gm_fed < r->n_out; r->gm_fed++)
        if (!pg_tmatch_accept(r->gm, out_ids(r)[r->gm_fed])) {
            if (pg_tmatch_status(r->gm)) return pg_tmatch_status(r->gm); /* NOMEM, LIMIT */
            return pg_error(PAGODA_ERR_INTERNAL,
                            "grammar: output token %d at position %d does not continue a valid "
                            "prefix",
                            out_ids(r)[r->gm_fed], r->gm_fed);
        }
    pg_clear_error();
    int32_t allowed = pg_tmatch_apply(r->gm, logits, e->vocab);
    if (may_open && !pg_tmatch_status(r->gm)) { /* or open the reasoning */
        allowed += logits[r->rs_id] == -INFINITY;
        logits[r->rs_id] = open_logit;
    }
    if (allowed == 0)
        return pg_tmatch_status(r->gm) ? pg_tmatch_status(r->gm)
                                  : pg_error(PAGODA_ERR_INVALID_ARG,
                                             "grammar: no token of the vocabulary continues the "
                                             "output after %d tokens", r->n_out);
    return PAGODA_OK;
}

/* Sample (verify `draft`, -1: none) r's token at output position
 * n_out + pos from its logits row; its logprobs go to slot pos. */
static pagoda_status sample_one(pagoda_engine *e, pg_sampler *smp, ereq *r, float *logits,
                                int32_t pos, int32_t draft, int32_t *tok) {
    if (r->gm) {
        pagoda_status gst = apply_grammar(e, r, logits);
        if (gst != PAGODA_OK) return gst;
    }
    const pg_request *q = r->sr;
    if (r->lfn) /* the tokens so far: prompt and outputs (no drafts: no_spec) */
        r->lfn(r->lctx, q->tokens, (size_t)q->num_tokens, (size_t)q->num_prompt_tokens, false,
               logits, e->vocab);
    mask_min_tokens(r, r->n_out + pos, logits);
    pg_logprob_out lp = {0}, *lpp = NULL;
    const size_t lo = (size_t)pos * (size_t)r->lp_cap;
    if (r->n_logprobs >= 0) {
        lp = (pg_logprob_out){
            .top_ids = r->lp_ids + lo, .top_logprobs = r->lp_vals + lo, .cap = r->lp_cap};
        lpp = &lp;
    }
    pagoda_status st =
        pg_sampler_verify(smp, &r->sp, &r->rng, logits, q->tokens, (size_t)q->num_prompt_tokens,
                          out_ids(r), (size_t)(r->n_out + pos), draft, lpp, tok);
    if (st != PAGODA_OK || !lpp) return st;
    for (int32_t i = 0; i < lp.n_top; i++)
        r->top[lo + (size_t)i] = (pagoda_top_logprob){r->lp_ids[lo + i], r->lp_vals[lo + i]};
    r->tlp[pos] = (pagoda_token_logprobs){
        .token = *tok, .logprob = lp.sampled_logprob, .top = r->top + lo, .n_top = lp.n_top};
    return PAGODA_OK;
}

static pagoda_finish_reason map_finish(pg_finish_reason f) {
    switch (f) {
    case PG_FINISH_STOP:
        return PAGODA_FINISH_STOP;
    case PG_FINISH_LENGTH:
        return PAGODA_FINISH_LENGTH;
    case PG_FINISH_ABORT:
        return PAGODA_FINISH_ABORT;
    default:
        return PAGODA_FINISH_NONE;
    }
}

static void update_stats(pagoda_engine *e) {
    pg_sched_stats ss;
    pg_scheduler_get_stats(e->sched, &ss);
    pthread_mutex_lock(&e->mu);
    pagoda_stats *s = &e->stats;
    s->num_requests_running = ss.num_running;
    s->num_requests_waiting = ss.num_waiting;
    s->kv_cache_usage = ss.kv.usage;
    s->num_preemptions = ss.num_preemptions;
    s->prompt_tokens = e->prompt_tokens;
    s->generation_tokens = e->generation_tokens;
    s->prefix_cache_queries = ss.kv.prefix_queries_tokens;
    s->prefix_cache_hits = ss.kv.prefix_hits_tokens;
    s->num_kv_blocks = e->num_kv_blocks;
    s->num_free_kv_blocks = ss.kv.num_free_blocks;
    s->spec_num_positions = e->spec_k;
    s->spec_num_drafts = ss.spec.num_drafts;
    s->spec_num_draft_tokens = ss.spec.num_draft_tokens;
    s->spec_num_accepted_tokens = ss.spec.num_accepted_tokens;
    for (int p = 0; p < 16 && p < PG_MAX_SPEC_TOKENS; p++)
        s->spec_accepted_per_pos[p] = ss.spec.accepted_per_pos[p];
    pthread_mutex_unlock(&e->mu);
}

pagoda_status pagoda_engine_step(pagoda_engine *e, size_t *n_outputs) {
    if (n_outputs) *n_outputs = 0;
    for (ereq *r = e->reap, *n; r; r = n) {
        n = r->next;
        ereq_free(r);
    }
    e->reap = NULL;
    e->n_outs = 0;
    pagoda_status st = apply_queue(e);
    if (st != PAGODA_OK) return st;

    pg_sched_output so;
    if ((st = pg_scheduler_schedule(e->sched, &so)) != PAGODA_OK) return st;
    if (e->draft) pg_draft_release(e->draft, so.finished_ids, so.num_finished);
    if (e->mtp) pg_mtp_release(e->mtp, so.finished_ids, so.num_finished);
    if (so.num_reqs == 0 && so.num_enc == 0) {
        update_stats(e);
        if (n_outputs) *n_outputs = e->n_outs;
        return PAGODA_OK;
    }
    double t = now_s();
    for (int32_t i = 0; i < so.num_reqs; i++) {
        ereq *r = find_locked(e, so.req_ids[i]);
        if (!r) return pg_error(PAGODA_ERR_INTERNAL, "engine: scheduled unknown request");
        if (r->first_sched == 0) r->first_sched = t;
        if (so.is_new[i] && r->n_out == 0) r->n_cached = r->sr->num_cached_tokens;
        const int32_t np = r->sr->num_prompt_tokens;
        if (so.num_computed_tokens[i] < np) {
            int32_t end = so.num_computed_tokens[i] + so.num_scheduled_tokens[i];
            e->prompt_tokens += (uint64_t)((end < np ? end : np) - so.num_computed_tokens[i]);
        }
    }

    for (int32_t j = 0; j < so.num_enc; j++) {
        ereq *r = find_locked(e, so.enc_req_ids[j]);
        if (!r) return pg_error(PAGODA_ERR_INTERNAL, "engine: encoder job of an unknown request");
        if (r->first_sched == 0) r->first_sched = t;
        e->enc_inputs[j] = r->enc_in;
    }

    /* model + sampling */
    float *logits;
    pagoda_status fst =
        pg_runner_execute(e->runner, &so, e->enc_inputs, &logits, e->row_of, e->probe_of);
    char ferr[256] = "";
    if (fst != PAGODA_OK) snprintf(ferr, sizeof ferr, "%s", pg_last_error());
    if (fst != PAGODA_OK && e->comm && pg_runner_comm_failed(e->runner)) tp_fatal(ferr);
    sample_job sj = {.e = e, .so = &so, .logits = logits, .n = 0};
    for (int32_t i = 0; i < so.num_reqs; i++) {
        e->sampled[(size_t)i * (size_t)e->spec_stride] = 0;
        e->n_sampled[i] = 1;
        if (fst != PAGODA_OK) continue;
        ereq *r = NULL;
        if (e->probe_of[i] >= 0 && (r = find_locked(e, so.req_ids[i])) && r->lfn)
            /* logits after the prompt's first probe_len tokens: for inspection */
            r->lfn(r->lctx, r->sr->tokens, (size_t)r->sr->probe_len,
                   (size_t)r->sr->num_prompt_tokens, true,
                   logits + (size_t)e->probe_of[i] * (size_t)e->vocab, e->vocab);
        if (!so.samples[i]) continue;
        if (!r) r = find_locked(e, so.req_ids[i]);
        r->n_new = 0;
        if (r->sr->num_tokens - r->sr->num_prompt_tokens != r->n_out)
            return pg_error(
                PAGODA_ERR_INTERNAL, "engine: request %llu samples after %d outputs, %d emitted",
                (unsigned long long)r->id, r->sr->num_tokens - r->sr->num_prompt_tokens, r->n_out);
        e->sample_req[sj.n] = r;
        e->sample_idx[sj.n++] = i;
    }
    /* each request samples from its own logits row with its own RNG stream,
     * so splitting the requests over the pool changes no token */
    pg_pool *pool = pg_pool_default();
    if (sj.n > 1 && e->n_samplers > 1 && pg_pool_size(pool) <= e->n_samplers)
        pg_pool_parallel_for(pool, (size_t)sj.n, 1, sample_range, &sj);
    else
        sample_range(&sj, 0, (size_t)sj.n, 0);
    /* recurrent states: back to the last kept row of each verification */
    for (int32_t i = 0; i < so.num_reqs && fst == PAGODA_OK; i++)
        if (so.samples[i] && so.num_spec_tokens[i] > 0 &&
            (st = pg_runner_spec_keep(e->runner, i, e->n_sampled[i])) != PAGODA_OK)
            return st;
    pg_step_result res;
    if ((st = pg_scheduler_update_from_output_spec(e->sched, &so, e->sampled, e->n_sampled,
                                                   e->spec_stride, &res)) != PAGODA_OK)
        return st;
    if (e->mtp && fst == PAGODA_OK) { /* the MTP head over the kept positions: draft 1 */
        for (int32_t i = 0; i < so.num_reqs; i++)
            e->mtp_reqs[i] = pg_scheduler_get_request(e->sched, so.req_ids[i]);
        if ((st = pg_mtp_observe(e->mtp, &so, e->mtp_reqs)) != PAGODA_OK) return st;
    }
    if (fst != PAGODA_OK) { /* every scheduled request fails, the engine goes on */
        PG_ERROR("engine: step failed: %s", ferr);
        for (int32_t i = 0; i < so.num_reqs + so.num_enc; i++) {
            ereq *r = find_locked(e, i < so.num_reqs ? so.req_ids[i] : so.enc_req_ids[i - so.num_reqs]);
            if (!r || r->finished) continue;
            pg_scheduler_abort(e->sched, r->id);
            r->n_new = 0;
            if ((st = emit(e, r, PAGODA_FINISH_ERROR, -1, ferr)) != PAGODA_OK) return st;
        }
        update_stats(e);
        if (n_outputs) *n_outputs = e->n_outs;
        return PAGODA_OK;
    }

    /* detokenize, stop strings, outputs */
    t = now_s();
    for (int32_t k = 0; k < res.num_events; k++) {
        const pg_step_event *ev = &res.events[k];
        ereq *r = find_locked(e, ev->req_id);
        if (!r || r->finished) continue;
        pagoda_finish_reason fin = map_finish(ev->finish);
        if (r->error) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", r->error);
            if (fin == PAGODA_FINISH_NONE) pg_scheduler_abort(e->sched, r->id);
            r->n_new = 0;
            if ((st = emit(e, r, PAGODA_FINISH_ERROR, -1, msg)) != PAGODA_OK) return st;
            continue;
        }
        r->n_new = 0;
        /* speculative decoding may bring several tokens: each is detokenized
         * and checked for stop strings in turn; a stop string ends the
         * request at the token that completes it (the later ones are
         * dropped: the request is aborted in the scheduler below). The stop
         * token that ends a request is not part of the text. Requests whose
         * caller detokenizes (no_detokenize) take every token: the caller
         * applies the same rules (pagoda_detokenizer_add). */
        size_t n_take = (size_t)ev->num_tokens;
        if (!r->no_detok &&
            (st = pg_detok_add_run(&r->dt, ev->tokens, (size_t)ev->num_tokens,
                                   fin == PAGODA_FINISH_STOP && ev->stop_token >= 0, r->n_out,
                                   r->sr->min_tokens, &n_take)) != PAGODA_OK)
            return st;
        if (r->dt.stopped && n_take < (size_t)ev->num_tokens) fin = PAGODA_FINISH_NONE; /* cut */
        for (size_t j = 0; j < n_take; j++) { /* (the outputs themselves are in r->sr) */
            r->n_out++;
            r->new_tokens[r->n_new++] = ev->tokens[j];
            e->generation_tokens++;
            if (r->first_token == 0) r->first_token = t;
        }
        int32_t stop_token = fin == PAGODA_FINISH_STOP ? ev->stop_token : -1;
        if (fin == PAGODA_FINISH_NONE && r->dt.stopped) {
            pg_scheduler_abort(e->sched, r->id); /* ends by a stop string */
            fin = PAGODA_FINISH_STOP;
        }
        if ((st = emit(e, r, fin, stop_token, NULL)) != PAGODA_OK) return st;
    }
    update_stats(e);
    if (n_outputs) *n_outputs = e->n_outs;
    return PAGODA_OK;
}

pagoda_status pg_engine_set_proposer(pagoda_engine *e, pg_spec_propose_fn fn, void *ctx) {
    pagoda_status st = pg_scheduler_set_proposer(e->sched, fn, ctx);
    if (!st) st = pg_scheduler_set_prepare(e->sched, NULL); /* the draft model's, if any */
    return st;
}

struct pg_draft *pg_engine_draft(pagoda_engine *e) {
    return e->draft;
}

struct pg_mtp *pg_engine_mtp(pagoda_engine *e) {
    return e->mtp;
}

const pagoda_output *pagoda_engine_outputs(const pagoda_engine *e, size_t *n) {
    if (n) *n = e->n_outs;
    return e->outs;
}

bool pagoda_engine_has_unfinished(const pagoda_engine *e) {
    pagoda_engine *m = (pagoda_engine *)e;
    pthread_mutex_lock(&m->mu);
    bool any = m->n_live > 0 || m->n_aborts > 0;
    pthread_mutex_unlock(&m->mu);
    return any;
}

bool pagoda_engine_wait_for_work(pagoda_engine *e, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&e->mu);
    while (e->n_live == 0 && e->n_aborts == 0) {
        if (timeout_ms <= 0 || pthread_cond_timedwait(&e->cv, &e->mu, &ts) != 0) break;
    }
    bool any = e->n_live > 0 || e->n_aborts > 0;
    pthread_mutex_unlock(&e->mu);
    return any;
}

pagoda_status pagoda_engine_check_ranks(pagoda_engine *e) {
    if (!e->comm) return PAGODA_OK;
    if (pg_comm_check_peers(e->comm) != PAGODA_OK) tp_fatal(pg_last_error());
    return PAGODA_OK;
}

void pagoda_engine_get_stats(pagoda_engine *e, pagoda_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    out->num_requests_waiting += e->n_pending;
    pthread_mutex_unlock(&e->mu);
}

/* ---- tokenizer ---------------------------------------------------------------------- */

pagoda_status pagoda_tokenize(const pagoda_engine *e, const char *text, size_t len,
                              bool add_special, int32_t **ids, size_t *n) {
    return pagoda_tokenize_flags(
        e, text, len, add_special ? PAGODA_TOKENIZE_ADD_SPECIAL | PAGODA_TOKENIZE_PARSE_SPECIAL : 0,
        ids, n);
}

pagoda_status pagoda_tokenize_flags(const pagoda_engine *e, const char *text, size_t len,
                                    unsigned flags, int32_t **ids, size_t *n) {
    _Static_assert(PAGODA_TOKENIZE_ADD_SPECIAL == PG_ENCODE_ADD_SPECIAL &&
                       PAGODA_TOKENIZE_PARSE_SPECIAL == PG_ENCODE_PARSE_SPECIAL,
                   "tokenize flags");
    *ids = NULL;
    *n = 0;
    /* usually fewer ids than bytes, but not always (SentencePiece byte
     * fallback: a space becomes the 3 bytes of U+2581, 3 ids): the encoder
     * reports the full count, then a second pass fills a buffer that fits */
    size_t cap = len + 16;
    for (int pass = 0; pass < 2; pass++) {
        int32_t *buf = malloc(cap * sizeof *buf);
        if (!buf) return pg_error(PAGODA_ERR_NOMEM, "tokenize: out of memory");
        pagoda_status st = pg_tokenizer_encode_flags(e->tok, text, len, flags, buf, cap, n);
        if (st != PAGODA_OK) {
            free(buf);
            *n = 0;
            return st;
        }
        if (*n <= cap) {
            *ids = buf;
            return PAGODA_OK;
        }
        free(buf);
        cap = *n;
    }
    *n = 0;
    return pg_error(PAGODA_ERR_INTERNAL, "tokenize: the id count changed between passes");
}

const char *pagoda_token_piece(const pagoda_engine *e, int32_t id, size_t *len) {
    return pg_tokenizer_token_text(e->tok, id, len);
}

pagoda_status pagoda_detokenize(const pagoda_engine *e, const int32_t *ids, size_t n,
                                bool skip_special, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->vocab)
            return pg_error(PAGODA_ERR_INVALID_ARG, "detokenize: id %d outside [0, %d)", ids[i],
                            e->vocab);
    int32_t *known = malloc((n ? n : 1) * sizeof *known);
    if (!known) return pg_error(PAGODA_ERR_NOMEM, "detokenize: out of memory");
    size_t nk = 0;
    for (size_t i = 0; i < n; i++)
        if (!pg_tokenizer_is_padding(e->tok, ids[i], e->vocab)) known[nk++] = ids[i];
    size_t cap = 64 + 16 * n;
    for (;;) {
        char *buf = malloc(cap);
        pagoda_status st = buf ? pg_tokenizer_decode(e->tok, known, nk, skip_special, buf, cap, len)
                               : pg_error(PAGODA_ERR_NOMEM, "detokenize: out of memory");
        if (st != PAGODA_OK) {
            free(buf);
            free(known);
            return st;
        }
        if (*len < cap) {
            free(known);
            *text = buf;
            return PAGODA_OK;
        }
        free(buf);
        cap = *len + 1;
    }
}

struct pagoda_detokenizer {
    pg_detok dt;
    int32_t min_tokens, vocab;
    int64_t n_out; /* output ids taken so far */
};

pagoda_status pagoda_detokenizer_create(const pagoda_engine *e, const int32_t *prompt,
                                        size_t n_prompt, const pagoda_sampling *s,
                                        pagoda_detokenizer **out) {
    if (out) *out = NULL;
    if (!e || !s || !out || (n_prompt && !prompt) || (s->n_stop && !s->stop))
        return pg_error(PAGODA_ERR_INVALID_ARG, "detokenizer: NULL argument");
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->vocab)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "detokenizer: prompt id %d at index %zu is outside the vocabulary "
                            "[0, %d)",
                            prompt[i], i, e->vocab);
    pagoda_detokenizer *d = calloc(1, sizeof *d);
    if (!d) return pg_error(PAGODA_ERR_NOMEM, "detokenizer: out of memory");
    pagoda_status st = pg_detok_init(&d->dt, e->tok, prompt, n_prompt, s->skip_special_tokens,
                                     s->stop, s->n_stop, s->include_stop_str_in_output);
    if (st != PAGODA_OK) {
        free(d);
        return st;
    }
    d->min_tokens = s->min_tokens;
    d->vocab = e->vocab;
    *out = d;
    return PAGODA_OK;
}

pagoda_status pagoda_detokenizer_add(pagoda_detokenizer *d, const int32_t *ids, size_t n,
                                     bool skip_last, size_t *n_used) {
    if (n_used) *n_used = 0;
    if (!d || !n_used || (n && !ids))
        return pg_error(PAGODA_ERR_INVALID_ARG, "detokenizer: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= d->vocab)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "detokenizer: id %d outside the vocabulary [0, %d)", ids[i], d->vocab);
    pagoda_status st = pg_detok_add_run(&d->dt, ids, n, skip_last, d->n_out, d->min_tokens, n_used);
    d->n_out += (int64_t)*n_used;
    return st;
}

pagoda_status pagoda_detokenizer_take(pagoda_detokenizer *d, bool final, const char **text,
                                      size_t *len) {
    if (!d || !text || !len) return pg_error(PAGODA_ERR_INVALID_ARG, "detokenizer: NULL argument");
    return pg_detok_take(&d->dt, final, text, len);
}

const char *pagoda_detokenizer_stop_reason(const pagoda_detokenizer *d) {
    return d && d->dt.stopped ? d->dt.stop[d->dt.stop_index] : NULL;
}

void pagoda_detokenizer_free(pagoda_detokenizer *d) {
    if (!d) return;
    pg_detok_free(&d->dt);
    free(d);
}

void pagoda_free(void *p) {
    free(p);
}
