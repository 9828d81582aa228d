/* A stand-in for the engine (include/pagoda.h) used ONLY while the real
 * engine + runner have not landed: CMake links it into `pagoda` when no
 * source under src/ defines pagoda_engine_create. It lets `pagoda serve`
 * run end to end: byte-level "tokenizer" (ids 0..255 = bytes, 256 = BOS,
 * 257 = EOS), one deterministic pseudo-random token per request per step,
 * stop strings with hold-back, abort, stats with 16-token KV blocks.
 * Not a model: it exists so the HTTP layer can be exercised. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "pagoda.h"

#define VOCAB 258
#define BOS 256
#define EOS 257
#define BLOCK 16
#define NUM_BLOCKS 4096
#define MAX_TOP 20

const char *pg_engine_model_path(const pagoda_engine *e);

typedef struct freq {
    uint64_t id;
    int32_t *toks;
    size_t n_prompt, n, cap;
    pagoda_sampling s;
    char **stop;
    size_t n_stop;
    char *text; /* generated text so far */
    size_t text_len, sent;
    bool aborted, running, done;
    uint64_t rng;
    double arrival, first_sched, first_tok;
    /* this step's output storage */
    int32_t new_tok;
    pagoda_token_logprobs lp;
    pagoda_top_logprob top[MAX_TOP];
    char *stop_hit;
    struct freq *next;
} freq;

struct pagoda_engine {
    char *path, *name;
    int32_t max_model_len, max_num_seqs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    freq *reqs; /* unfinished, arrival order */
    freq *dead; /* finished last step, freed at the next */
    uint64_t next_id;
    pagoda_output *outs;
    size_t n_outs, cap_outs;
    pagoda_stats st;
};

const char *pagoda_last_error(void) {
    return pg_last_error();
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void pagoda_engine_options_default(pagoda_engine_options *o) {
    memset(o, 0, sizeof *o);
    o->enable_prefix_caching = true;
}

pagoda_status pagoda_engine_create(const char *model, const pagoda_engine_options *opt,
                                   pagoda_engine **out) {
    pagoda_engine *e = calloc(1, sizeof *e);
    if (!e) return pg_error(PAGODA_ERR_NOMEM, "fake engine: out of memory");
    e->path = strdup(model);
    const char *b = strrchr(model, '/');
    while (b && !b[1] && b > model) { /* trailing slash */
        const char *p = b - 1;
        while (p > model && *p != '/')
            p--;
        b = p;
    }
    e->name = strdup(b ? b + 1 : model);
    char *slash = strchr(e->name, '/');
    if (slash) *slash = 0;
    e->max_model_len = opt->max_model_len > 0 ? opt->max_model_len : 512;
    e->max_num_seqs = opt->max_num_seqs > 0 ? opt->max_num_seqs : 256;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->st.num_kv_blocks = NUM_BLOCKS;
    e->st.num_free_kv_blocks = NUM_BLOCKS;
    fprintf(stderr, "pagoda: WARNING: built without the engine; serving a FAKE engine "
                    "(byte tokenizer, pseudo-random text)\n");
    *out = e;
    return PAGODA_OK;
}

static void freq_free(freq *r) {
    free(r->toks);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->text);
    free(r->stop_hit);
    free((void *)r->s.stop_token_ids);
    free(r);
}

void pagoda_engine_free(pagoda_engine *e) {
    if (!e) return;
    for (freq *r = e->reqs, *n; r; r = n)
        n = r->next, freq_free(r);
    for (freq *r = e->dead, *n; r; r = n)
        n = r->next, freq_free(r);
    free(e->outs);
    free(e->path);
    free(e->name);
    free(e);
}

int32_t pagoda_engine_max_model_len(const pagoda_engine *e) {
    return e->max_model_len;
}
int32_t pagoda_engine_vocab_size(const pagoda_engine *e) {
    return VOCAB;
}
const char *pagoda_engine_model_name(const pagoda_engine *e) {
    return e->name;
}
const char *pg_engine_model_path(const pagoda_engine *e) {
    return e->path;
}

void pagoda_sampling_defaults(const pagoda_engine *e, pagoda_sampling *s) {
    memset(s, 0, sizeof *s);
    s->temperature = 1.0f;
    s->top_p = 1.0f;
    s->top_k = 0;
    s->repetition_penalty = 1.0f;
    s->seed = -1;
    s->skip_special_tokens = true;
    s->logprobs = -1;
}

const char *pagoda_finish_reason_name(pagoda_finish_reason r) {
    static const char *const n[] = {NULL, "stop", "length", "abort", "error"};
    return (unsigned)r < 5 ? n[r] : NULL;
}

pagoda_status pagoda_tokenize(const pagoda_engine *e, const char *text, size_t len,
                              bool add_special, int32_t **ids, size_t *n) {
    int32_t *v = malloc((len + 2) * sizeof *v);
    if (!v) return pg_error(PAGODA_ERR_NOMEM, "fake engine: out of memory");
    size_t k = 0;
    if (add_special) v[k++] = BOS;
    for (size_t i = 0; i < len; i++) {
        /* like HF encode(add_special_tokens=True): special-token text matches */
        if (add_special && i + 3 <= len && !memcmp(text + i, "<s>", 3)) {
            v[k++] = BOS;
            i += 2;
            continue;
        }
        v[k++] = (unsigned char)text[i];
    }
    *ids = v;
    *n = k;
    return PAGODA_OK;
}

pagoda_status pagoda_detokenize(const pagoda_engine *e, const int32_t *ids, size_t n,
                                bool skip_special, char **text, size_t *len) {
    char *t = malloc(n * 4 + 1);
    if (!t) return pg_error(PAGODA_ERR_NOMEM, "fake engine: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= VOCAB) {
            free(t);
            return pg_error(PAGODA_ERR_INVALID_ARG, "fake engine: token id %d out of range",
                            ids[i]);
        }
        if (ids[i] < 256)
            t[k++] = (char)ids[i];
        else if (!skip_special)
            memcpy(t + k, ids[i] == BOS ? "<s>" : "</s>", ids[i] == BOS ? 3 : 4),
                k += ids[i] == BOS ? 3 : 4;
    }
    t[k] = 0;
    *text = t;
    *len = k;
    return PAGODA_OK;
}

void pagoda_free(void *p) {
    free(p);
}

pagoda_status pagoda_engine_add_request(pagoda_engine *e, const pagoda_request *req,
                                        uint64_t *id_out, int32_t *n_prompt_out) {
    freq *r = calloc(1, sizeof *r);
    if (!r) return pg_error(PAGODA_ERR_NOMEM, "fake engine: out of memory");
    if (req->prompt) {
        size_t len = req->prompt_len ? req->prompt_len : strlen(req->prompt);
        int32_t *ids;
        size_t n;
        pagoda_tokenize(e, req->prompt, len, req->add_special_tokens, &ids, &n);
        r->toks = ids;
        r->n = r->n_prompt = n;
    } else {
        r->toks = malloc((req->n_prompt_token_ids + 1) * sizeof(int32_t));
        memcpy(r->toks, req->prompt_token_ids, req->n_prompt_token_ids * sizeof(int32_t));
        r->n = r->n_prompt = req->n_prompt_token_ids;
    }
    r->cap = r->n;
    pagoda_status st = PAGODA_OK;
    if (r->n_prompt == 0) st = pg_error(PAGODA_ERR_INVALID_ARG, "prompt is empty");
    for (size_t i = 0; i < r->n_prompt && !st; i++)
        if (r->toks[i] < 0 || r->toks[i] >= VOCAB)
            st = pg_error(PAGODA_ERR_INVALID_ARG, "token id %d out of range", r->toks[i]);
    if (!st && (int64_t)r->n_prompt + req->sampling.max_tokens > e->max_model_len)
        st = pg_error(PAGODA_ERR_LIMIT, "prompt (%zu) + max_tokens (%d) > max_model_len (%d)",
                      r->n_prompt, req->sampling.max_tokens, e->max_model_len);
    if (st) {
        free(r->toks);
        free(r);
        return st;
    }
    r->s = req->sampling;
    r->s.logit_bias = NULL;
    r->s.n_logit_bias = 0;
    r->s.stop = NULL;
    if (req->sampling.n_stop_token_ids) {
        int32_t *v = malloc(req->sampling.n_stop_token_ids * sizeof *v);
        memcpy(v, req->sampling.stop_token_ids, req->sampling.n_stop_token_ids * sizeof *v);
        r->s.stop_token_ids = v;
    } else {
        r->s.stop_token_ids = NULL;
    }
    r->n_stop = req->sampling.n_stop;
    r->stop = calloc(r->n_stop + 1, sizeof *r->stop);
    for (size_t i = 0; i < r->n_stop; i++)
        r->stop[i] = strdup(req->sampling.stop[i]);
    r->rng = req->sampling.seed >= 0 ? (uint64_t)req->sampling.seed * 0x9E3779B97F4A7C15ull + 1
                                     : (uint64_t)rand() << 20 ^ (uint64_t)rand();
    r->arrival = now_s();
    pthread_mutex_lock(&e->mu);
    r->id = e->next_id++;
    freq **tail = &e->reqs;
    while (*tail)
        tail = &(*tail)->next;
    *tail = r;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    *id_out = r->id;
    if (n_prompt_out) *n_prompt_out = (int32_t)r->n_prompt;
    return PAGODA_OK;
}

pagoda_status pagoda_engine_abort(pagoda_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    for (freq *r = e->reqs; r; r = r->next)
        if (r->id == id && !r->done) {
            r->aborted = true;
            pthread_mutex_unlock(&e->mu);
            return PAGODA_OK;
        }
    pthread_mutex_unlock(&e->mu);
    return pg_error(PAGODA_ERR_NOT_FOUND, "request %llu not found", (unsigned long long)id);
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int32_t next_token(freq *r) {
    uint64_t h;
    if (r->s.temperature == 0) {
        h = mix(r->n * 1315423911ull ^ (uint64_t)r->toks[r->n - 1]);
    } else {
        r->rng = mix(r->rng + 0x9E3779B97F4A7C15ull);
        h = r->rng;
    }
    size_t gen = r->n - r->n_prompt;
    if (!r->s.ignore_eos && (int32_t)gen >= r->s.min_tokens && h % 61 == 0) return EOS;
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz       .";
    return (unsigned char)alphabet[(h >> 8) % (sizeof alphabet - 1)];
}

static size_t blocks_of(const freq *r) {
    return (r->n + BLOCK - 1) / BLOCK;
}

pagoda_status pagoda_engine_step(pagoda_engine *e, size_t *n_outputs) {
    pthread_mutex_lock(&e->mu);
    for (freq *r = e->dead, *n; r; r = n)
        n = r->next, freq_free(r);
    e->dead = NULL;
    e->n_outs = 0;
    size_t count = 0;
    for (freq *r = e->reqs; r; r = r->next)
        count++;
    if (count > e->cap_outs) {
        e->outs = realloc(e->outs, count * sizeof *e->outs);
        e->cap_outs = count;
    }
    double t = now_s();
    int running = 0, alive = 0, remaining = 0;
    size_t used_blocks = 0;
    for (freq **pp = &e->reqs; *pp;) {
        freq *r = *pp;
        pagoda_output *o = &e->outs[e->n_outs];
        memset(o, 0, sizeof *o);
        o->id = r->id;
        o->stop_token = -1;
        pagoda_finish_reason fin = PAGODA_FINISH_NONE;
        size_t delta_from = r->sent, delta_to = r->sent;
        if (r->aborted) {
            fin = PAGODA_FINISH_ABORT;
        } else if (running < e->max_num_seqs) {
            running++;
            if (!r->first_sched) {
                r->first_sched = t;
                e->st.prompt_tokens += r->n_prompt;
            }
            int32_t tok = next_token(r);
            if (r->n == r->cap) {
                r->cap = r->cap * 2 + 8;
                r->toks = realloc(r->toks, r->cap * sizeof *r->toks);
            }
            r->toks[r->n++] = tok;
            e->st.generation_tokens++;
            if (!r->first_tok) r->first_tok = t;
            r->new_tok = tok;
            o->new_token_ids = &r->new_tok;
            o->n_new_tokens = 1;
            if (r->s.logprobs >= 0) {
                r->lp.token = tok;
                r->lp.logprob = -0.25f;
                int32_t nt = r->s.logprobs < MAX_TOP ? r->s.logprobs : MAX_TOP;
                for (int32_t k = 0; k < nt; k++)
                    r->top[k] = (pagoda_top_logprob){'a' + k, -1.0f - k};
                r->lp.top = r->top;
                r->lp.n_top = nt;
                o->logprobs = &r->lp;
            }
            size_t gen = r->n - r->n_prompt;
            bool stop_tok = false;
            for (size_t k = 0; k < r->s.n_stop_token_ids; k++)
                stop_tok |= r->s.stop_token_ids[k] == tok;
            if ((tok == EOS && !r->s.ignore_eos) || (stop_tok && (int32_t)gen >= r->s.min_tokens)) {
                fin = PAGODA_FINISH_STOP;
                o->stop_token = tok;
            } else {
                if (tok < 256) {
                    r->text = realloc(r->text, r->text_len + 2);
                    r->text[r->text_len++] = (char)tok;
                    r->text[r->text_len] = 0;
                }
                for (size_t k = 0; k < r->n_stop && fin == PAGODA_FINISH_NONE; k++) {
                    char *hit = r->text ? strstr(r->text + (r->sent > strlen(r->stop[k])
                                                                ? r->sent - strlen(r->stop[k])
                                                                : 0),
                                                 r->stop[k])
                                        : NULL;
                    if (hit) {
                        fin = PAGODA_FINISH_STOP;
                        r->stop_hit = strdup(r->stop[k]);
                        o->stop_reason = r->stop_hit;
                        r->text_len = (size_t)(hit - r->text) +
                                      (r->s.include_stop_str_in_output ? strlen(r->stop[k]) : 0);
                    }
                }
                if (fin == PAGODA_FINISH_NONE &&
                    ((r->s.max_tokens > 0 && (int32_t)gen >= r->s.max_tokens) ||
                     (int32_t)r->n >= e->max_model_len))
                    fin = PAGODA_FINISH_LENGTH;
            }
            /* hold back a possible stop-string prefix unless finished */
            size_t hold = 0;
            if (fin == PAGODA_FINISH_NONE)
                for (size_t k = 0; k < r->n_stop; k++) {
                    size_t sl = strlen(r->stop[k]);
                    for (size_t p = sl - 1; p > 0; p--)
                        if (p <= r->text_len - r->sent && p > hold &&
                            !memcmp(r->text + r->text_len - p, r->stop[k], p)) {
                            hold = p;
                            break;
                        }
                }
            delta_to = r->text_len - hold;
            if (delta_to < r->sent) delta_to = r->sent;
        }
        o->text_delta = r->text ? r->text + delta_from : "";
        o->text_delta_len = delta_to - delta_from;
        r->sent = delta_to;
        o->finish_reason = fin;
        o->n_prompt_tokens = (int32_t)r->n_prompt;
        o->n_output_tokens = (int32_t)(r->n - r->n_prompt);
        o->arrival_time = r->arrival;
        o->first_scheduled_time = r->first_sched;
        o->first_token_time = r->first_tok;
        if (o->n_new_tokens || fin != PAGODA_FINISH_NONE || o->text_delta_len) e->n_outs++;
        if (fin != PAGODA_FINISH_NONE) {
            r->done = true;
            *pp = r->next;
            r->next = e->dead;
            e->dead = r;
        } else {
            if (r->first_sched) used_blocks += blocks_of(r);
            if (o->n_new_tokens) alive++;
            remaining++;
            pp = &r->next;
        }
    }
    e->st.num_requests_running = alive;
    e->st.num_requests_waiting = remaining - alive;
    e->st.num_free_kv_blocks = NUM_BLOCKS - (int32_t)used_blocks;
    e->st.kv_cache_usage = (double)used_blocks / NUM_BLOCKS;
    pthread_mutex_unlock(&e->mu);
    if (count) {
        struct timespec ts = {0, 2000000L};
        nanosleep(&ts, NULL);
    }
    *n_outputs = e->n_outs;
    return PAGODA_OK;
}

const pagoda_output *pagoda_engine_outputs(const pagoda_engine *e, size_t *n) {
    *n = e->n_outs;
    return e->outs;
}

bool pagoda_engine_has_unfinished(const pagoda_engine *e) {
    return e->reqs != NULL;
}

bool pagoda_engine_wait_for_work(pagoda_engine *e, int timeout_ms) {
    pthread_mutex_lock(&e->mu);
    if (!e->reqs) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
    bool work = e->reqs != NULL;
    pthread_mutex_unlock(&e->mu);
    return work;
}

void pagoda_engine_get_stats(pagoda_engine *e, pagoda_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    pthread_mutex_unlock(&e->mu);
}
