/* pagoda.h — the public C API of the pagoda inference engine.
 *
 * An engine owns one model, its tokenizer, a paged KV cache, a scheduler
 * (continuous batching, chunked prefill, prefix caching, preemption) and a
 * thread pool. Callers add requests, call pagoda_engine_step() in a loop,
 * and read each step's outputs. The design follows vLLM's v1 engine
 * (EngineCore.add_request / step / abort).
 *
 * Threading: pagoda_engine_add_request(), pagoda_engine_abort() and
 * pagoda_engine_get_stats() may be called from any thread at any time (they
 * are queued and applied at the start of the next step). pagoda_engine_step()
 * and pagoda_engine_outputs() must be called from one thread at a time (the
 * "engine thread"). Tokenizer helpers are thread-safe.
 *
 * Errors: functions return a pagoda_status; on failure
 * pagoda_last_error() gives a one-line message for the calling thread.
 *
 * Memory: strings and arrays passed in are copied; pointers handed out are
 * owned by the engine and valid until the next pagoda_engine_step() on the
 * engine thread (outputs) or until pagoda_engine_free(). */
#ifndef PAGODA_H
#define PAGODA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagoda/status.h" /* pagoda_status, PAGODA_OK, PAGODA_ERR_* */

#ifdef __cplusplus
extern "C" {
#endif

/* One-line message of the calling thread's last error ("" if none). */
const char *pagoda_last_error(void);

/* ------------------------------------------------------------------ engine */

typedef enum pagoda_kv_dtype {
    PAGODA_KV_AUTO = 0, /* follows dtype; dtype auto: F32 checkpoints -> F32, else BF16 */
    PAGODA_KV_BF16,
    PAGODA_KV_F32,
} pagoda_kv_dtype;

/* The compute precision of the model's linear layers (vLLM's --dtype). */
typedef enum pagoda_dtype {
    PAGODA_DTYPE_AUTO = 0, /* each weight its own: F32 -> f32 GEMM, F16/BF16 -> BF16 GEMM */
    PAGODA_DTYPE_BF16,     /* BF16 GEMM (activations rounded to BF16); F32 weights packed BF16 */
    PAGODA_DTYPE_F16,      /* no F16 GEMM on CPU: runs as PAGODA_DTYPE_BF16 (logged) */
    PAGODA_DTYPE_F32,      /* f32 activations everywhere; F16/BF16 weights widened at load */
} pagoda_dtype;

/* The prefix cache's block hash (vLLM's --prefix-caching-hash-algo). */
typedef enum pagoda_prefix_hash_algo {
    PAGODA_PREFIX_HASH_SHA256 = 0, /* default: collision resistant (safe with tenants) */
    PAGODA_PREFIX_HASH_XXHASH,     /* XXH3-128: cheaper, but a client choosing prompts can
                                      forge collisions; single-tenant only (logs a warning) */
} pagoda_prefix_hash_algo;

/* Speculative decoding (vLLM's --speculative-config; docs/ARCHITECTURE.md
 * "Speculative decoding"): a proposer guesses up to num_speculative_tokens
 * tokens ahead, the model scores them all in the next step's batched
 * forward, and the longest prefix the model agrees with is kept (greedy:
 * exactly the tokens it would have produced; sampled: exact rejection
 * sampling, so the output distribution is the model's). */
typedef enum pagoda_spec_method {
    PAGODA_SPEC_NONE = 0,
    PAGODA_SPEC_NGRAM, /* prompt lookup over the request's own tokens (vLLM's "ngram") */
    /* a smaller model of the same vocabulary proposes greedily (vLLM's
     * "draft_model"; engine/draft.h): its own paged KV cache */
    PAGODA_SPEC_DRAFT_MODEL,
    /* the checkpoint's multi-token-prediction head (Qwen3.5's mtp.*; vLLM's
     * "mtp", also "qwen3_next_mtp" / "qwen3_5_mtp"; engine/mtp.h): its own
     * paged KV cache, the target's hidden states as input */
    PAGODA_SPEC_MTP,
} pagoda_spec_method;

typedef struct pagoda_speculative_config {
    pagoda_spec_method method;
    int32_t num_speculative_tokens; /* drafts per request and step, 1..16 */
    int32_t prompt_lookup_min;      /* ngram: shortest suffix n-gram matched, >= 1 */
    int32_t prompt_lookup_max;      /* ngram: longest, >= prompt_lookup_min */
    /* The adaptive rule: a step gets draft tokens only while its decode
     * tokens plus drafts stay within this many (small steps stream the
     * weights once whatever their size; large ones are compute-bound, where
     * drafts only cost); 0 = the default, PAGODA_SPEC_DEFAULT_MAX_BATCH_TOKENS. */
    int32_t max_batch_tokens;
    int32_t disable_by_batch_size; /* vLLM's: no drafts while this many requests run; 0 = none */
    /* Acceptance-adaptive K (engine/scheduler.h): a request gets its k-th
     * draft only while a^k >= min_draft_gain, a its recent per-token
     * acceptance rate, and none (but a probe now and then) once its drafts
     * stop agreeing; 0 = the default (0.2), < 0 = off (always
     * num_speculative_tokens). JSON "min_draft_gain" in [0, 1], 0 = off. */
    float min_draft_gain;
    /* draft_model: the draft's path (HF directory or GGUF file; any
     * registered architecture whose tokenizer is the target's) */
    char model[1024];
} pagoda_speculative_config;

#define PAGODA_SPEC_DEFAULT_MAX_BATCH_TOKENS 16

/* Parse vLLM's --speculative-config JSON object into *out:
 * {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
 *  "prompt_lookup_min": 2} (also "model": "ngram" / "[ngram]", vLLM's older
 * spelling; "disable_by_batch_size"; pagoda's "max_batch_tokens" and
 * "min_draft_gain"), or
 * {"method": "draft_model", "model": PATH, "num_speculative_tokens": 4}
 * ("method" absent with a "model" path: draft_model, as vLLM infers it).
 * As vLLM: prompt_lookup_min / max default to each other, both absent to 5.
 * Errors: PAGODA_ERR_INVALID_ARG naming the key and the bad value (not
 * JSON, unknown key, unknown method, out of range, draft_model without a
 * "model" path or with prompt_lookup keys). */
pagoda_status pagoda_speculative_config_parse(const char *json, pagoda_speculative_config *out);

typedef struct pagoda_engine_options {
    int32_t max_model_len;          /* 0 = the model's max_position_embeddings */
    int32_t max_num_seqs;           /* running requests per step; 0 = default (256) */
    int32_t max_num_batched_tokens; /* token budget per step; 0 = default (4096) */
    uint64_t kv_cache_memory;       /* bytes for the KV cache; 0 = default (see docs) */
    pagoda_kv_dtype kv_cache_dtype; /* default PAGODA_KV_AUTO */
    int32_t block_size;             /* tokens per KV block; 0 = default */
    bool enable_prefix_caching;     /* default true */
    pagoda_prefix_hash_algo prefix_caching_hash_algo; /* default SHA256 (docs/ARCHITECTURE.md
                                                         "Prefix cache") */
    int32_t num_threads;            /* 0 = one per physical core allowed */
    uint64_t seed;                  /* base for requests without a seed; 0 = random */
    /* Load-time quantization of F32/F16/BF16 linear weights (not the
     * lm_head): 0 = none, 8 = W8A8, 4 = W4A8, with dynamic per-token int8
     * activations (docs/QUANTIZATION.md). GGUF Q8_0/Q4_0 weights always run
     * on the W8A8/W4A8 kernels. */
    int32_t quantization;
    int32_t quant_group_size; /* 0 = per output channel; else a multiple of 32 */
    /* Activation scales of the quantized layers: 0 = one per token (vLLM's
     * W8A8); G = one per token and group of G input features (llama.cpp's
     * Q8_0 activation blocks for G = 32; about half the KL divergence of
     * per-token scales, docs/QUANTIZATION.md). Needs quantization and
     * weight groups of the same size; quant_group_size 0 then becomes G. */
    int32_t quant_act_group;
    /* Compute dtype of the float linear weights (lm_head included);
     * quantized linears stay quantized. PAGODA_KV_AUTO follows it: F32
     * compute -> F32 KV cache, BF16/F16 -> BF16. Default PAGODA_DTYPE_AUTO. */
    pagoda_dtype dtype;
    /* Hybrid models (recurrent-state layers: Qwen3.5): bytes of the prefix
     * cache's state snapshots, taken out of kv_cache_memory; 0 = default (a
     * quarter of what the per-request states leave of it). Each snapshot
     * holds one request's states at a block boundary (docs/ARCHITECTURE.md
     * "Prefix caching on hybrid models"). */
    uint64_t state_cache_memory;
    /* Tokenizer to use instead of the model's (vLLM's --tokenizer): a
     * tokenizer.json, a directory holding one, or a tiktoken BPE file
     * (`*.tiktoken`, e.g. openai/whisper's multilingual.tiktoken); NULL = the
     * model's own. */
    const char *tokenizer;
    /* Encoder-decoder models: encoder work per step, in the rows the
     * encoder pieces compute (vLLM's max_num_encoder_input_tokens; Whisper
     * pieces are 512 rows); 0 = default 1024 (two pieces, ~a tenth of
     * whisper-base's encoder), so transcriptions never stall the decodes
     * they are batched with for long. At least one piece runs per step. */
    int32_t max_num_encoder_tokens;
    /* MODEL is a Hugging Face repo id ("org/name"): the branch, tag or commit
     * to use (vLLM's --revision; NULL = "main" or MODEL's "@REVISION"), and
     * the .gguf file of the repo to load (NULL = MODEL's ":QUANT" tag or the
     * safetensors model). Ignored, with a warning, for a local path. */
    const char *revision;
    const char *gguf_file;
    /* Speculative decoding; method PAGODA_SPEC_NONE (the default) = off. */
    pagoda_speculative_config speculative;
    /* Tensor parallelism (vLLM's --tensor-parallel-size; docs/ARCHITECTURE.md
     * "Tensor parallelism"): the model's heads and MLP columns split over
     * this many ranks, each keeping the KV cache of its heads; 0 / 1 = off.
     * Under mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set) the ranks are the
     * MPI processes (their number must equal it); otherwise
     * pagoda_engine_create forks the other ranks on this host (shared-memory
     * all-reduce). The calling process is rank 0 and runs the scheduler,
     * sampler and server; on MPI ranks other than 0 pagoda_engine_create
     * serves as a worker and exits the process when rank 0 stops. A rank
     * that dies makes the engine log the error and exit the process with
     * status 1. */
    int32_t tensor_parallel_size;
    /* true: neither read nor write the packed-weight cache (default false:
     * the first load writes the packed weights to $PAGODA_CACHE_DIR, else
     * $XDG_CACHE_HOME/pagoda, else ~/.cache/pagoda, and a repeat load maps
     * them; PAGODA_PACK_CACHE=0 also disables it; docs/ARCHITECTURE.md
     * "Packed-weight cache"). */
    bool no_pack_cache;
} pagoda_engine_options;

typedef struct pagoda_engine pagoda_engine;

/* Fill `opt` with the defaults above. */
void pagoda_engine_options_default(pagoda_engine_options *opt);

/* Load MODEL (HF directory, GGUF file, or a Hugging Face repo id
 * "org/name[@REVISION][:QUANT]" taken from the local HF cache or downloaded
 * into it; an existing path wins) and
 * its tokenizer, size the KV cache and workspace, start the thread pool.
 * Errors: IO / NOT_FOUND / FORMAT / UNSUPPORTED (model), INVALID_ARG
 * (options), NOMEM (KV cache). */
pagoda_status pagoda_engine_create(const char *model, const pagoda_engine_options *opt,
                                   pagoda_engine **out);
void pagoda_engine_free(pagoda_engine *e);

/* The effective limits after defaults were applied. */
int32_t pagoda_engine_max_model_len(const pagoda_engine *e);
int32_t pagoda_engine_vocab_size(const pagoda_engine *e);
/* Weight bytes one model step streams from memory, whatever its batch
 * (packed/quantized linear layers, lm_head, norms; not the KV cache): read
 * bandwidth / this = the decode bandwidth bound in steps per second. */
size_t pagoda_engine_weight_bytes_per_step(const pagoda_engine *e);
/* Bytes the engine keeps resident: the weights a step streams (as above),
 * the KV cache (paged K/V and recurrent-state slots) and the
 * workspace. The environment check compares it with the memory of the NUMA
 * node(s) the threads run on. */
uint64_t pagoda_engine_resident_bytes(const pagoda_engine *e);

/* ---------------------------------------------------------------- requests */

typedef struct pagoda_logit_bias {
    int32_t token;
    float bias;
} pagoda_logit_bias;

/* Per-request sampling and stopping parameters (OpenAI / vLLM names).
 * pagoda_sampling_defaults() gives the model's generation_config.json
 * values where it has them, else the OpenAI defaults. */
typedef struct pagoda_sampling {
    float temperature;        /* >= 0; 0 = greedy */
    float top_p;              /* (0, 1] */
    int32_t top_k;            /* 0 or -1 = off */
    float min_p;              /* [0, 1] */
    float repetition_penalty; /* > 0; 1 = off */
    float presence_penalty;   /* [-2, 2] */
    float frequency_penalty;  /* [-2, 2] */
    const pagoda_logit_bias *logit_bias;
    size_t n_logit_bias;
    int64_t seed;          /* -1 = random */
    int32_t max_tokens;    /* >= 1; 0 = up to the context (max_model_len - prompt),
                              capped by the longest sequence the KV cache holds */
    int32_t min_tokens;    /* EOS/stop are ignored before this many tokens */
    bool ignore_eos;
    const int32_t *stop_token_ids;
    size_t n_stop_token_ids;
    const char *const *stop; /* stop strings; generation ends before them */
    size_t n_stop;
    bool include_stop_str_in_output;
    bool skip_special_tokens; /* default true: drop special tokens from text */
    int32_t logprobs;         /* -1 = none; N >= 0: sampled token + top-N per position */
} pagoda_sampling;

void pagoda_sampling_defaults(const pagoda_engine *e, pagoda_sampling *s);

/* A per-request logits processor (vLLM's logits processors; openai/whisper's
 * LogitFilter), called on the engine thread before sampling with the
 * request's next-token logits [vocab] f32 (raw model output; logit_bias and
 * penalties are applied after it). token_ids[0..n_tokens) are the tokens the
 * row follows: the prompt and the outputs so far, so the row predicts token
 * n_tokens. It may change the logits in place (e.g. set banned tokens to
 * -INFINITY; at least one must stay finite). With is_prompt true the row is
 * the request's prompt_logits_pos row (n_tokens = prompt_logits_pos + 1),
 * handed over for inspection only: changes are ignored and nothing is
 * sampled from it. Must not call into the engine. */
typedef void (*pagoda_logits_fn)(void *ctx, const int32_t *token_ids, size_t n_tokens,
                                 size_t n_prompt, bool is_prompt, float *logits, int32_t vocab);

/* A compiled output constraint (structured outputs: vLLM's guided decoding,
 * OpenAI's response_format): a grammar bound to the engine's vocabulary,
 * with per-automaton-node token caches shared by every request that uses
 * it. Reference counted; thread-safe. See docs/ARCHITECTURE.md "Grammar
 * engine". */
typedef struct pagoda_grammar pagoda_grammar;

typedef enum pagoda_grammar_kind {
    PAGODA_GRAMMAR_JSON_SCHEMA = 0, /* spec: a JSON Schema (JSON text) */
    PAGODA_GRAMMAR_JSON_OBJECT,     /* any JSON object; spec ignored */
    PAGODA_GRAMMAR_REGEX,           /* spec: a regex the whole output matches */
    PAGODA_GRAMMAR_CHOICE,          /* spec: a JSON array of strings; output is one of them */
    PAGODA_GRAMMAR_EBNF,            /* spec: GBNF-style EBNF with a rule named root */
    PAGODA_GRAMMAR_EBNF_SCHEMAS,    /* spec: {"ebnf": EBNF text, "schemas": [JSON Schema, ...]}:
                                       the EBNF's rules may use `schema-0`, `schema-1`, ...,
                                       a JSON value of schema i (tool calls in a model's
                                       call syntax) */
} pagoda_grammar_kind;

/* Compile (or find in the engine's cache of the last 64 distinct specs) a
 * constraint. spec[0..len) (len 0 = strlen). Errors: INVALID_ARG (the spec
 * is malformed), UNSUPPORTED (a feature pagoda does not implement; the
 * message names the keyword / construct), LIMIT (too large), NOMEM. Any
 * thread. Release with pagoda_grammar_free. */
pagoda_status pagoda_grammar_compile(pagoda_engine *e, pagoda_grammar_kind kind,
                                     const char *spec, size_t len, pagoda_grammar **out);
/* Drop the caller's reference (requests hold their own). NULL is a no-op. */
void pagoda_grammar_free(pagoda_grammar *g);
/* True when some output the grammar accepts starts with the bytes
 * text[0..len) (len 0 = strlen), e.g. whether a grammar itself writes a
 * "<think>" block (the server then leaves the reasoning to the grammar).
 * Byte-level: independent of how the vocabulary splits the text. False for
 * NULL g or when out of memory. Any thread. */
bool pagoda_grammar_allows_prefix(const pagoda_grammar *g, const char *text, size_t len);

typedef struct pagoda_request {
    const char *prompt;         /* UTF-8 text, or NULL when prompt_token_ids is given */
    size_t prompt_len;          /* bytes of prompt; 0 = strlen */
    const int32_t *prompt_token_ids;
    size_t n_prompt_token_ids;
    bool add_special_tokens;    /* text prompts: add BOS etc. like HF encode (default true) */
    pagoda_sampling sampling;
    /* Optional (vLLM's cache_salt): NUL-terminated bytes hashed into the
     * first KV block's hash, so requests share prefix-cache blocks only with
     * requests of the same salt (tenants that must not share cache; defence
     * against prefix-cache timing probes). NULL or "" = the shared cache. */
    const char *cache_salt;
    /* Optional logits processor (see pagoda_logits_fn): ctx must stay valid
     * until the request's final output (any finish reason) was returned. */
    pagoda_logits_fn logits_fn;
    void *logits_ctx;
    /* With logits_fn: a prompt position (0 <= p < prompt length) whose logits
     * are also handed to logits_fn (is_prompt true), e.g. Whisper's
     * no-speech probability at the start-of-transcript token; -1 = none
     * (pagoda_request_defaults). */
    int32_t prompt_logits_pos;
    /* Encoder-decoder models (pagoda_engine_encoder_input_shape true:
     * Whisper) need, and other models refuse, the encoder input of the
     * request: features [n_mels][n_frames] f32 row-major (Whisper: one
     * 30-second log-mel window, audio/mel.h), copied. The prompt is then the
     * decoder's (e.g. <|startoftranscript|><|en|><|transcribe|>). The engine
     * schedules the encoder in budgeted pieces like a prefill and keeps its
     * cross-attention K/V in the paged KV cache until the request ends. */
    const float *encoder_features;
    int32_t encoder_n_mels, encoder_n_frames;
    /* Optional output constraint (pagoda_grammar_compile on this engine;
     * the request takes its own reference). Each step the engine masks the
     * logits to the tokens that keep the output a valid prefix (before
     * logits_fn, min_tokens, logit_bias, penalties and sampling); EOS and
     * stop_token_ids are allowed exactly when the output is complete, and
     * min_tokens never bans them then. */
    const pagoda_grammar *grammar;
    /* Reasoning models (<think>...</think>; vLLM's structured outputs with a
     * reasoning parser): with grammar_after_reasoning and a grammar, the
     * grammar constrains only the output after the reasoning. Token ids in
     * [0, vocab): reasoning_start_id (e.g. <think>) and reasoning_end_id
     * (</think>). Phases, a pure function of the output tokens so far:
     *  - reasoning_open (the prompt already ends inside the reasoning, or
     *    the format has the output start as reasoning: DeepSeek-R1): the
     *    output starts in the reasoning;
     *  - else the model may open it: the first token is one the grammar
     *    allows or reasoning_start_id, which opens the reasoning (any other
     *    first token starts the grammar's output: no reasoning then);
     *  - inside the reasoning nothing is masked (EOS and stop tokens
     *    included, min_tokens as usual); the first reasoning_end_id closes
     *    it and the grammar applies from the next token on.
     * Only the single ids are recognised (reasoning text spelled in other
     * tokens is reasoning text). reasoning_start_id is unused (may be -1)
     * with reasoning_open. Without a grammar these fields are ignored.
     * Errors (pagoda_engine_add_request): INVALID_ARG for an id outside the
     * vocabulary. */
    bool grammar_after_reasoning;
    bool reasoning_open;
    int32_t reasoning_start_id;
    int32_t reasoning_end_id;
    /* With grammar_after_reasoning and reasoning_open: the reasoning ends
     * after the first occurrence of this token sequence in the output
     * (copied; 1..PAGODA_MAX_REASONING_END_IDS ids in [0, vocab)) instead of
     * at reasoning_end_id, which is then unused (may be -1). For harmony
     * (gpt-oss) chats: the tokens of "<|channel|>final<|message|>", so the
     * analysis and commentary channels stay free and the grammar constrains
     * the final message. NULL / 0 = reasoning_end_id. Errors
     * (pagoda_engine_add_request): INVALID_ARG for a longer sequence, an id
     * outside the vocabulary, or a sequence without reasoning_open. */
    const int32_t *reasoning_end_ids;
    size_t n_reasoning_end_ids;
    /* true: the caller turns the output tokens into text itself, off the
     * engine thread (vLLM's front-end detokenizer: `pagoda serve` runs one
     * pagoda_detokenizer per choice on the connection's thread). The engine
     * then only emits token ids (and logprobs): text_delta stays empty and
     * stop_reason NULL, and the request must have no stop strings
     * (sampling.n_stop 0, else INVALID_ARG): the caller matches them with
     * pagoda_detokenizer_add and ends the request with pagoda_engine_abort.
     * Default false (the engine detokenizes and matches stop strings). */
    bool no_detokenize;
} pagoda_request;

#define PAGODA_MAX_REASONING_END_IDS 8

/* Zero `r`, then add_special_tokens = true, prompt_logits_pos and the
 * reasoning ids -1, and pagoda_sampling_defaults(e).
 * (Added by the engine work: a zeroed pagoda_request has
 * add_special_tokens false.) */
void pagoda_request_defaults(const pagoda_engine *e, pagoda_request *r);

/* Queue a request. Validates everything it can up front (parameters, token
 * ids in range, prompt non-empty, prompt + max_tokens within max_model_len)
 * and returns INVALID_ARG / LIMIT with a message giving the numbers; nothing
 * is queued then. The work of building the request (tokenizing a text
 * prompt, copying the prompt, prefix-cache block hashes) runs on the
 * calling thread; req and what it points to may be reused once it returns
 * (the grammar is referenced, logits_ctx must live on: see them). On
 * success *id_out is the engine-wide request id and *n_prompt_tokens_out
 * (optional) the prompt length in tokens. */
pagoda_status pagoda_engine_add_request(pagoda_engine *e, const pagoda_request *req,
                                        uint64_t *id_out, int32_t *n_prompt_tokens_out);

/* Abort a request (queued, running or waiting); its KV blocks are freed at
 * the next step, which reports it with PAGODA_FINISH_ABORT. Unknown or
 * finished ids: PAGODA_ERR_NOT_FOUND. */
pagoda_status pagoda_engine_abort(pagoda_engine *e, uint64_t id);

/* ----------------------------------------------------------------- stepping */

typedef enum pagoda_finish_reason {
    PAGODA_FINISH_NONE = 0, /* still running */
    PAGODA_FINISH_STOP,     /* EOS, a stop token id or a stop string */
    PAGODA_FINISH_LENGTH,   /* max_tokens or the context limit */
    PAGODA_FINISH_ABORT,    /* pagoda_engine_abort */
    PAGODA_FINISH_ERROR,    /* failed during execution; see `error` */
} pagoda_finish_reason;

/* "stop", "length", "abort", "error", or NULL for NONE. */
const char *pagoda_finish_reason_name(pagoda_finish_reason r);

typedef struct pagoda_top_logprob {
    int32_t token;
    float logprob;
} pagoda_top_logprob;

/* Logprobs of one generated position. */
typedef struct pagoda_token_logprobs {
    int32_t token;                  /* the sampled token */
    float logprob;                  /* its log-probability (raw logits) */
    const pagoda_top_logprob *top;  /* n_top entries, descending */
    int32_t n_top;
} pagoda_token_logprobs;

/* What one step produced for one request. */
typedef struct pagoda_output {
    uint64_t id;
    const int32_t *new_token_ids;     /* tokens generated this step */
    size_t n_new_tokens;
    const pagoda_token_logprobs *logprobs; /* n_new_tokens entries, or NULL */
    const char *text_delta;           /* new text: never a partial UTF-8 sequence and
                                         never part of a stop string; may be empty
                                         (always with no_detokenize) */
    size_t text_delta_len;
    pagoda_finish_reason finish_reason;
    const char *stop_reason;          /* matched stop string, or NULL */
    int32_t stop_token;               /* matched stop token id / EOS, or -1 */
    int32_t n_prompt_tokens;
    int32_t n_output_tokens;          /* total so far */
    int32_t n_cached_tokens;          /* prompt tokens served from the prefix cache */
    double arrival_time;              /* seconds, CLOCK_MONOTONIC */
    double first_scheduled_time;      /* 0 until scheduled */
    double first_token_time;          /* 0 until the first token */
    const char *error;                /* FINISH_ERROR only */
} pagoda_output;

/* Run one engine step: apply queued adds/aborts, schedule, run the model over
 * the flattened batch, sample, detokenize, check stop conditions.
 * *n_outputs gets the number of requests with news this step (see
 * pagoda_engine_outputs). A step with nothing to do returns at once with
 * *n_outputs == 0. Errors: INTERNAL (a bug) — requests that failed are
 * reported as FINISH_ERROR outputs instead, and the engine stays usable. */
pagoda_status pagoda_engine_step(pagoda_engine *e, size_t *n_outputs);

/* The outputs of the last step, valid until the next step. */
const pagoda_output *pagoda_engine_outputs(const pagoda_engine *e, size_t *n);

/* True while any request is queued, waiting or running. */
bool pagoda_engine_has_unfinished(const pagoda_engine *e);

/* Block the calling (engine) thread until work arrives or `timeout_ms`
 * passes; returns true if there is work. Lets a server loop sleep when idle. */
bool pagoda_engine_wait_for_work(pagoda_engine *e, int timeout_ms);

/* Tensor parallelism (tensor_parallel_size > 1): check, without
 * communicating, that every rank is alive; call it from the engine thread
 * between steps, e.g. while idle. A rank known to be gone (a forked rank
 * that exited or was killed) ends the process with status 1 after logging
 * "tensor parallelism failed: comm: rank N exited; exiting", as a step that
 * loses a rank does: a server must not go on answering /health with a
 * replica that cannot serve. Returns PAGODA_OK otherwise (always without
 * tensor parallelism, and under mpirun, which ends the job itself). */
pagoda_status pagoda_engine_check_ranks(pagoda_engine *e);

/* ----------------------------------------------------------------- metrics */

typedef struct pagoda_stats {
    int32_t num_requests_running;
    int32_t num_requests_waiting;
    double kv_cache_usage;       /* fraction of KV blocks in use, 0..1 */
    uint64_t num_preemptions;
    uint64_t prompt_tokens;      /* totals since start */
    uint64_t generation_tokens;
    uint64_t prefix_cache_queries; /* tokens */
    uint64_t prefix_cache_hits;    /* tokens */
    int32_t num_kv_blocks;
    int32_t num_free_kv_blocks;
    /* speculative decoding (vLLM's vllm:spec_decode_* counters) */
    int32_t spec_num_positions;         /* num_speculative_tokens; 0 = off */
    uint64_t spec_num_drafts;           /* request-steps that verified draft tokens */
    uint64_t spec_num_draft_tokens;     /* draft tokens verified */
    uint64_t spec_num_accepted_tokens;  /* of those, accepted */
    uint64_t spec_accepted_per_pos[16]; /* accepted at draft position p < spec_num_positions */
} pagoda_stats;

void pagoda_engine_get_stats(pagoda_engine *e, pagoda_stats *out);

/* --------------------------------------------------------------- tokenizer */

/* Encode / decode with the engine's tokenizer (same semantics as
 * pg_tokenizer_encode / decode in src/tokenizer/tokenizer.h). The returned
 * buffers are malloc'ed; free with pagoda_free. */
pagoda_status pagoda_tokenize(const pagoda_engine *e, const char *text, size_t len,
                              bool add_special, int32_t **ids, size_t *n);
/* pagoda_tokenize with the two jobs of add_special apart (pg_tokenizer_encode_flags):
 * PAGODA_TOKENIZE_ADD_SPECIAL adds BOS/EOS, PAGODA_TOKENIZE_PARSE_SPECIAL
 * turns special-token text into its token. add_special = both. A rendered
 * chat prompt is tokenized with PARSE_SPECIAL alone (vLLM's
 * add_special_tokens=False: the template already wrote BOS). */
#define PAGODA_TOKENIZE_ADD_SPECIAL 1u
#define PAGODA_TOKENIZE_PARSE_SPECIAL 2u
pagoda_status pagoda_tokenize_flags(const pagoda_engine *e, const char *text, size_t len,
                                    unsigned flags, int32_t **ids, size_t *n);
pagoda_status pagoda_detokenize(const pagoda_engine *e, const int32_t *ids, size_t n,
                                bool skip_special, char **text, size_t *len);
void pagoda_free(void *p);

/* An incremental detokenizer with stop strings: the engine's own (vLLM's
 * incremental detokenizer, engine/detokenizer.h), for a caller that
 * detokenizes off the engine thread (pagoda_request.no_detokenize). Text
 * comes out as the engine's text_delta would: the same decode window, never
 * a partial UTF-8 character, text that could still become a stop string
 * held back, cut before a matched stop string (after it with
 * include_stop_str_in_output). One per request; not shared between threads
 * (different detokenizers may run on different threads at once). */
typedef struct pagoda_detokenizer pagoda_detokenizer;

/* Start one for a request of prompt[0..n_prompt) (the ids the engine was
 * given) with its sampling's skip_special_tokens, stop / n_stop (copied;
 * empty strings ignored), include_stop_str_in_output and min_tokens.
 * Errors: INVALID_ARG (NULL arguments, an id outside the vocabulary),
 * NOMEM. Free with pagoda_detokenizer_free. */
pagoda_status pagoda_detokenizer_create(const pagoda_engine *e, const int32_t *prompt,
                                        size_t n_prompt, const pagoda_sampling *s,
                                        pagoda_detokenizer **out);
/* Add one output's new_token_ids[0..n) in order. skip_last: that output
 * finished the request with PAGODA_FINISH_STOP and stop_token >= 0 (EOS or
 * a stop token id, never text). *n_used gets how many ids were taken: n,
 * or fewer when one completed a stop string (the ids up to and including
 * it; pagoda_detokenizer_stop_reason is then set, later ids are not part
 * of the output, and the caller aborts the request: the engine would have
 * ended it at that token with PAGODA_FINISH_STOP and n_output_tokens
 * counting up to it). Stop strings count from output min_tokens + 1 on,
 * as in the engine. After a match further calls take nothing. Errors:
 * NOMEM, INVALID_ARG (an id outside the vocabulary). */
pagoda_status pagoda_detokenizer_add(pagoda_detokenizer *d, const int32_t *ids, size_t n,
                                     bool skip_last, size_t *n_used);
/* The text that may be handed out now (*text owned by d, valid until the
 * next call on d; *len bytes, may be 0). final: the request ended: flush
 * a held-back stop-string prefix and an unfinished UTF-8 tail (U+FFFD per
 * byte). Errors: NOMEM. */
pagoda_status pagoda_detokenizer_take(pagoda_detokenizer *d, bool final, const char **text,
                                      size_t *len);
/* The matched stop string (owned by d), or NULL. */
const char *pagoda_detokenizer_stop_reason(const pagoda_detokenizer *d);
/* NULL is a no-op. */
void pagoda_detokenizer_free(pagoda_detokenizer *d);

/* The vocabulary entry of token `id` as the tokenizer stores it (HF
 * convert_ids_to_tokens: e.g. "\u2581Once" for SentencePiece, "\u0120the" for
 * byte-level BPE, "<0x0A>" for a byte-fallback token); *len gets its size.
 * Owned by the engine. NULL for an id outside the vocabulary. */
const char *pagoda_token_piece(const pagoda_engine *e, int32_t id, size_t *len);

/* Render a chat (messages as a JSON array text in OpenAI format, optional
 * tools JSON array text, optional extra template kwargs JSON object text)
 * with the model's chat template (or `template_override` if not NULL).
 * Result malloc'ed; NOT_FOUND when the model has no template. */
pagoda_status pagoda_apply_chat_template(const pagoda_engine *e, const char *messages_json,
                                         const char *tools_json, const char *kwargs_json,
                                         bool add_generation_prompt,
                                         const char *template_override, char **out);

/* Model name for /v1/models (the directory or file base name). */
const char *pagoda_engine_model_name(const pagoda_engine *e);

/* Encoder-decoder models (Whisper): true, with the encoder input shape a
 * request must carry (*n_mels x *n_frames: 80 or 128 x 3000); false for
 * decoder-only models. Outputs may be NULL. */
bool pagoda_engine_encoder_input_shape(const pagoda_engine *e, int32_t *n_mels,
                                       int32_t *n_frames);

/* Registry name of the model's architecture: "llama", "qwen3", "qwen3_moe",
 * "gpt_oss", ... (the server answers gpt_oss chats in the harmony format). */
const char *pagoda_engine_architecture(const pagoda_engine *e);

/* The chat template `pagoda_apply_chat_template` would use: a copy of
 * `template_override` if not NULL, else the model's (malloc'ed; free with
 * pagoda_free). NOT_FOUND when the model has none. */
pagoda_status pagoda_chat_template_source(const pagoda_engine *e, const char *template_override,
                                          char **out);

#ifdef __cplusplus
}
#endif
#endif
