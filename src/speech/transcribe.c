/* pg_transcribe: openai/whisper transcribe() over a pagoda engine (see
 * transcribe.h). One window = one engine request (DecodingTask.run with
 * the greedy / sampling decoder); the rules of decoding.py run in the
 * request's logits_fn (speech/filters.h), which also keeps what
 * sum_logprob and no_speech_prob need. */
#include "speech/transcribe.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/mel.h"
#include "speech/filters.h"
#include "speech/whisper_vocab.h"

#define N_FRAMES PG_WHISPER_N_FRAMES
#define HOP PG_WHISPER_HOP
#define SR PG_WHISPER_SAMPLE_RATE

void pg_transcribe_options_default(pg_transcribe_options *o) {
    memset(o, 0, sizeof *o);
    o->task = PG_SPEECH_TRANSCRIBE;
    o->temperature = 0.0f;
    o->compression_ratio_threshold = 2.4f;
    o->logprob_threshold = -1.0f;
    o->no_speech_threshold = 0.6f;
    o->condition_on_previous_text = true;
    o->without_timestamps = false;
    o->seed = -1;
    o->max_tokens_per_window = 0;
    o->suppress_blank = true;
    o->suppress_tokens = "-1";
    o->max_initial_timestamp = 1.0f;
}

/* ---- the direct backend ------------------------------------------------------------ */

static pagoda_status direct_run(void *ctx, const pagoda_request *req, int32_t *tokens, int32_t cap,
                                int32_t *n_tokens, pagoda_finish_reason *finish) {
    pagoda_engine *e = ctx;
    uint64_t id;
    *n_tokens = 0;
    *finish = PAGODA_FINISH_NONE;
    pagoda_status st = pagoda_engine_add_request(e, req, &id, NULL);
    if (st) return st;
    for (;;) {
        size_t n_out = 0;
        if ((st = pagoda_engine_step(e, &n_out))) {
            pagoda_engine_abort(e, id);
            return st;
        }
        size_t n;
        const pagoda_output *outs = pagoda_engine_outputs(e, &n);
        for (size_t i = 0; i < n; i++) {
            const pagoda_output *o = &outs[i];
            if (o->id != id) continue;
            for (size_t k = 0; k < o->n_new_tokens; k++)
                if (*n_tokens < cap) tokens[(*n_tokens)++] = o->new_token_ids[k];
            if (o->finish_reason != PAGODA_FINISH_NONE) {
                *finish = o->finish_reason;
                if (o->finish_reason == PAGODA_FINISH_ERROR)
                    return pg_error(PAGODA_ERR_INTERNAL, "speech: request failed: %s",
                                    o->error ? o->error : "unknown error");
                if (o->finish_reason == PAGODA_FINISH_ABORT)
                    return pg_error(PAGODA_ERR_INTERNAL, "speech: request was aborted");
                return PAGODA_OK;
            }
        }
        if (!pagoda_engine_has_unfinished(e))
            return pg_error(PAGODA_ERR_INTERNAL, "speech: the engine lost request %llu",
                            (unsigned long long)id);
    }
}

pg_speech_backend pg_speech_backend_direct(pagoda_engine *e) {
    return (pg_speech_backend){.run = direct_run, .ctx = e};
}

/* ---- one window's decode (decoding.py DecodingTask) -------------------------------- */

/* What a window's logits_fn keeps: the filters, the last filtered row (to
 * add the log-probability of the token sampled from it once it is known),
 * and the no-speech probability at the SOT row. */
typedef struct win_ctx {
    pg_whisper_filter f;
    int32_t vocab;
    float *row;     /* [vocab] filtered logits of the last sampling row */
    double row_lse; /* its logsumexp */
    int64_t row_n;  /* n_tokens of that row (-1: none yet) */
    double sum_logprob;
    int64_t sot_index;
    double no_speech_prob;
    /* language detection (prompt [sot], one row) */
    bool detect;
    double lang_probs[PG_WHISPER_MAX_LANGUAGES];
    bool detected;
} win_ctx;

static void detect_row(win_ctx *w, float *logits, int32_t vocab) {
    const pg_whisper_tokens *t = w->f.t;
    double m = -INFINITY;
    for (int i = 0; i < t->n_languages; i++) {
        int32_t id = t->lang[i];
        if (id >= 0 && id < vocab && logits[id] > m) m = logits[id];
    }
    double s = 0;
    for (int i = 0; i < t->n_languages; i++) {
        int32_t id = t->lang[i];
        w->lang_probs[i] = id >= 0 && id < vocab ? exp((double)logits[id] - m) : 0.0;
        s += w->lang_probs[i];
    }
    for (int i = 0; i < t->n_languages; i++) w->lang_probs[i] = s > 0 ? w->lang_probs[i] / s : 0.0;
    /* the sampled token is the most likely language (nothing else is left) */
    for (int32_t id = 0; id < vocab; id++) {
        bool keep = false;
        for (int i = 0; i < t->n_languages && !keep; i++) keep = t->lang[i] == id;
        if (!keep) logits[id] = -INFINITY;
    }
    w->detected = m > -INFINITY;
}

static void win_logits(void *ctx, const int32_t *tokens, size_t n_tokens, size_t n_prompt, bool is_prompt,
                       float *logits, int32_t vocab) {
    win_ctx *w = ctx;
    if (vocab > w->vocab) vocab = w->vocab;
    if ((int64_t)n_tokens - 1 == w->sot_index && isnan(w->no_speech_prob) && w->f.t->no_speech >= 0 &&
        (is_prompt || n_tokens == n_prompt))
        w->no_speech_prob = pg_whisper_prob(logits, vocab, w->f.t->no_speech); /* raw logits */
    if (is_prompt) return;
    if (w->detect) {
        detect_row(w, logits, vocab);
        return;
    }
    /* GreedyDecoder.update: sum_logprobs += log_softmax(filtered row)[sampled] */
    if (w->row_n >= 0 && (int64_t)n_tokens == w->row_n + 1 && n_tokens > n_prompt) {
        int32_t tok = tokens[n_tokens - 1];
        if (tok >= 0 && tok < vocab) w->sum_logprob += (double)w->row[tok] - w->row_lse;
    }
    pg_whisper_filter_apply(&w->f, tokens, n_tokens, logits, vocab);
    memcpy(w->row, logits, (size_t)vocab * sizeof *logits);
    w->row_lse = pg_whisper_logsumexp(logits, vocab);
    w->row_n = (int64_t)n_tokens;
}

typedef struct win_result {
    int32_t *tokens; /* sampled, up to the first EOT (excluded) */
    int32_t n_tokens;
    double avg_logprob, no_speech_prob, compression_ratio, temperature;
} win_result;

static void win_result_free(win_result *r) {
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

/* Shared state of one pg_transcribe call. */
typedef struct tctx {
    pagoda_engine *e;
    const pg_speech_backend *be;
    const pg_transcribe_options *o;
    pg_speech_tok tok;
    pg_whisper_tokens t;
    int32_t *suppress;
    int32_t n_suppress;
    int32_t n_mels, n_ctx, vocab;
    int lang_index;
    float *row; /* [vocab] for win_ctx */
} tctx;

/* tokenizer.decode: drop ids >= timestamp_begin (and those below `below`), decode. */
static pagoda_status decode_text(const tctx *c, const int32_t *ids, int32_t n, int32_t below, char **text,
                                 size_t *len) {
    int32_t *keep = malloc((size_t)(n > 0 ? n : 1) * sizeof *keep);
    if (!keep) return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < below && ids[i] < c->t.timestamp_begin) keep[k++] = ids[i];
    pagoda_status st;
    if (k == 0) {
        st = (*text = calloc(1, 1)) ? PAGODA_OK : pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
        *len = 0;
    } else {
        st = c->tok.decode(c->tok.ctx, keep, (size_t)k, text, len);
    }
    free(keep);
    return st;
}

static void strip_span(const char *s, size_t len, size_t *b, size_t *e) {
    size_t i = 0, j = len;
    while (i < j && isspace((unsigned char)s[i])) i++;
    while (j > i && isspace((unsigned char)s[j - 1])) j--;
    *b = i;
    *e = j;
}

/* DecodingTask.run for one window at one temperature. prompt: the previous
 * text tokens (transcribe's all_tokens[prompt_reset_since:]). */
static pagoda_status decode_window(tctx *c, const float *mel, const int32_t *prompt, int32_t n_prompt_text,
                                   float temperature, int64_t seed, win_result *r) {
    memset(r, 0, sizeof *r);
    const pg_transcribe_options *o = c->o;
    int32_t n_init = 0, keep_max = c->n_ctx / 2 - 1;
    int32_t *init = malloc((size_t)(keep_max + 8) * sizeof *init);
    if (!init) return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
    if (n_prompt_text > 0) {
        init[n_init++] = c->t.sot_prev;
        int32_t from = n_prompt_text > keep_max ? n_prompt_text - keep_max : 0;
        for (int32_t i = from; i < n_prompt_text; i++) init[n_init++] = prompt[i];
    }
    int64_t sot_index = n_init;
    int32_t sot_seq[4];
    int n_sot = pg_whisper_sot_sequence(&c->t, c->lang_index, o->task == PG_SPEECH_TRANSLATE,
                                        o->without_timestamps, sot_seq);
    for (int i = 0; i < n_sot; i++) init[n_init++] = sot_seq[i];

    int32_t sample_len = o->max_tokens_per_window > 0 ? o->max_tokens_per_window : c->n_ctx / 2;
    int32_t max_tokens = sample_len < c->n_ctx - n_init ? sample_len : c->n_ctx - n_init;
    if (max_tokens < 1) {
        free(init);
        return pg_error(PAGODA_ERR_INVALID_ARG, "speech: a %d-token prompt leaves no room in %d positions",
                        (int)n_init, (int)c->n_ctx);
    }

    win_ctx w = {.vocab = c->vocab, .row = c->row, .row_n = -1, .sot_index = sot_index,
                 .no_speech_prob = NAN};
    w.f = (pg_whisper_filter){.t = &c->t,
                              .sample_begin = n_init,
                              .suppress_blank = o->suppress_blank,
                              .suppress = c->suppress,
                              .n_suppress = c->n_suppress,
                              .timestamps = !o->without_timestamps,
                              .max_initial_timestamp_index = -1};
    if (o->max_initial_timestamp > 0) /* precision CHUNK_LENGTH / n_audio_ctx = 0.02 s */
        w.f.max_initial_timestamp_index = (int32_t)nearbyint((double)o->max_initial_timestamp / 0.02);

    pagoda_request req;
    pagoda_request_defaults(c->e, &req);
    req.prompt_token_ids = init;
    req.n_prompt_token_ids = (size_t)n_init;
    req.add_special_tokens = false;
    req.sampling.temperature = temperature;
    req.sampling.top_p = 1.0f;
    req.sampling.top_k = 0;
    req.sampling.min_p = 0.0f;
    req.sampling.repetition_penalty = 1.0f;
    req.sampling.presence_penalty = 0.0f;
    req.sampling.frequency_penalty = 0.0f;
    req.sampling.logit_bias = NULL;
    req.sampling.n_logit_bias = 0;
    req.sampling.seed = seed;
    req.sampling.max_tokens = max_tokens;
    req.sampling.min_tokens = 0;
    req.sampling.ignore_eos = false;
    req.sampling.stop_token_ids = &c->t.eot;
    req.sampling.n_stop_token_ids = 1;
    req.sampling.stop = NULL;
    req.sampling.n_stop = 0;
    req.sampling.logprobs = -1;
    req.logits_fn = win_logits;
    req.logits_ctx = &w;
    req.prompt_logits_pos = (int32_t)sot_index;
    req.encoder_features = mel;
    req.encoder_n_mels = c->n_mels;
    req.encoder_n_frames = N_FRAMES;

    int32_t cap = max_tokens + 1, n_out = 0;
    int32_t *out = malloc((size_t)cap * sizeof *out);
    if (!out) {
        free(init);
        return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
    }
    pagoda_finish_reason fin;
    pagoda_status st = c->be->run(c->be->ctx, &req, out, cap, &n_out, &fin);
    free(init);
    if (st) {
        free(out);
        return st;
    }
    /* the last sampled token's log-probability: its row is the last one seen */
    if (n_out > 0 && w.row_n == (int64_t)n_init + n_out - 1) {
        int32_t tok = out[n_out - 1];
        if (tok >= 0 && tok < c->vocab) w.sum_logprob += (double)w.row[tok] - w.row_lse;
    }
    int32_t n_text = 0;
    while (n_text < n_out && out[n_text] != c->t.eot) n_text++;
    r->tokens = out;
    r->n_tokens = n_text;
    r->temperature = temperature;
    r->no_speech_prob = w.no_speech_prob;
    r->avg_logprob = w.sum_logprob / (double)(n_text + 1);
    char *text;
    size_t len;
    if ((st = decode_text(c, out, n_text, INT32_MAX, &text, &len))) {
        win_result_free(r);
        return st;
    }
    size_t b, e;
    strip_span(text, len, &b, &e);
    r->compression_ratio = pg_whisper_compression_ratio(text + b, e - b);
    free(text);
    return PAGODA_OK;
}

/* transcribe.py decode_with_fallback */
static pagoda_status decode_with_fallback(tctx *c, const float *mel, const int32_t *prompt, int32_t n_prompt,
                                          int32_t window_index, win_result *r) {
    const pg_transcribe_options *o = c->o;
    float temps[6];
    int n_temps = 0;
    if (o->temperature > 0) {
        temps[n_temps++] = o->temperature;
    } else {
        for (int i = 0; i <= 5; i++) temps[n_temps++] = 0.2f * (float)i;
    }
    memset(r, 0, sizeof *r);
    for (int k = 0; k < n_temps; k++) {
        win_result cur;
        int64_t seed = o->seed >= 0 ? o->seed + (int64_t)window_index * 8 + k : -1;
        pagoda_status st = decode_window(c, mel, prompt, n_prompt, temps[k], seed, &cur);
        if (st) {
            win_result_free(r);
            return st;
        }
        win_result_free(r);
        *r = cur;
        bool needs_fallback = false;
        if (o->compression_ratio_threshold > 0 && r->compression_ratio > o->compression_ratio_threshold)
            needs_fallback = true; /* too repetitive */
        if (!isnan(o->logprob_threshold) && r->avg_logprob < o->logprob_threshold)
            needs_fallback = true; /* average log probability too low */
        if (!isnan(o->no_speech_threshold) && r->no_speech_prob > o->no_speech_threshold &&
            !isnan(o->logprob_threshold) && r->avg_logprob < o->logprob_threshold)
            needs_fallback = false; /* silence */
        if (!needs_fallback) break;
    }
    return PAGODA_OK;
}

/* ---- language detection ------------------------------------------------------------ */

static pagoda_status detect(tctx *c, const float *mel_window, int *lang_index, float *probs) {
    win_ctx w = {.vocab = c->vocab, .row = c->row, .row_n = -1, .sot_index = -1, .no_speech_prob = NAN,
                 .detect = true};
    w.f.t = &c->t;
    pagoda_request req;
    pagoda_request_defaults(c->e, &req);
    req.prompt_token_ids = &c->t.sot;
    req.n_prompt_token_ids = 1;
    req.add_special_tokens = false;
    req.sampling.temperature = 0.0f;
    req.sampling.max_tokens = 1;
    req.sampling.logprobs = -1;
    req.logits_fn = win_logits;
    req.logits_ctx = &w;
    req.prompt_logits_pos = -1;
    req.encoder_features = mel_window;
    req.encoder_n_mels = c->n_mels;
    req.encoder_n_frames = N_FRAMES;
    int32_t out[2], n_out = 0;
    pagoda_finish_reason fin;
    pagoda_status st = c->be->run(c->be->ctx, &req, out, 2, &n_out, &fin);
    if (st) return st;
    if (!w.detected) return pg_error(PAGODA_ERR_INTERNAL, "speech: language detection saw no logits");
    int best = 0;
    for (int i = 1; i < c->t.n_languages; i++)
        if (w.lang_probs[i] > w.lang_probs[best]) best = i;
    *lang_index = best;
    if (probs)
        for (int i = 0; i < PG_WHISPER_MAX_LANGUAGES; i++)
            probs[i] = i < c->t.n_languages ? (float)w.lang_probs[i] : 0.0f;
    return PAGODA_OK;
}

/* ---- setup ------------------------------------------------------------------------- */

static pagoda_status tctx_init(tctx *c, pagoda_engine *e, const pg_speech_backend *be,
                               const pg_transcribe_options *o) {
    memset(c, 0, sizeof *c);
    c->e = e;
    c->be = be;
    c->o = o;
    int32_t n_frames = 0;
    if (!e || !pagoda_engine_encoder_input_shape(e, &c->n_mels, &n_frames))
        return pg_error(PAGODA_ERR_INVALID_ARG, "speech: the model is not a Whisper (encoder-decoder) model");
    if (n_frames != N_FRAMES)
        return pg_error(PAGODA_ERR_INVALID_ARG, "speech: the encoder takes %d frames, Whisper windows are %d",
                        (int)n_frames, N_FRAMES);
    c->n_ctx = pagoda_engine_max_model_len(e);
    c->vocab = pagoda_engine_vocab_size(e);
    c->tok = pg_speech_tok_engine(e);
    pagoda_status st = pg_whisper_tokens_init(&c->t, &c->tok);
    if (st) return st;
    if (!(c->row = malloc((size_t)c->vocab * sizeof *c->row)))
        return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
    return PAGODA_OK;
}

static void tctx_free(tctx *c) {
    pg_whisper_tokens_free(&c->t);
    free(c->suppress);
    free(c->row);
}

pagoda_status pg_speech_detect_language(pagoda_engine *e, const pg_speech_backend *be,
                                        const float *mel_window, int32_t n_mels, int *lang_index,
                                        float *probs) {
    pg_transcribe_options o;
    pg_transcribe_options_default(&o);
    tctx c;
    pagoda_status st = tctx_init(&c, e, be, &o);
    if (!st && n_mels != c.n_mels)
        st = pg_error(PAGODA_ERR_INVALID_ARG, "speech: %d mel bins given, the model takes %d", (int)n_mels,
                      (int)c.n_mels);
    if (!st && !c.t.multilingual)
        st = pg_error(PAGODA_ERR_INVALID_ARG, "speech: an English-only model has no language tokens");
    if (!st) st = detect(&c, mel_window, lang_index, probs);
    tctx_free(&c);
    return st;
}

/* The language of a decode: given, English on English-only models, else detected on mel. */
static pagoda_status pick_language(tctx *c, const char *language, const float *mel_for_detect) {
    if (!c->t.multilingual) {
        c->lang_index = 0;
        return PAGODA_OK;
    }
    if (language && *language) {
        int li = pg_whisper_language_index(language);
        if (li < 0) return pg_error(PAGODA_ERR_INVALID_ARG, "speech: unsupported language '%s'", language);
        if (pg_whisper_language_token(&c->t, li) < 0)
            return pg_error(PAGODA_ERR_INVALID_ARG, "speech: this model has no language '%s'",
                            PG_WHISPER_LANGUAGES[li].code);
        c->lang_index = li;
        return PAGODA_OK;
    }
    return detect(c, mel_for_detect, &c->lang_index, NULL);
}

void pg_speech_decode_result_free(pg_speech_decode_result *r) {
    if (!r) return;
    free(r->tokens);
    free(r->text);
    memset(r, 0, sizeof *r);
}

pagoda_status pg_speech_decode(pagoda_engine *e, const pg_speech_backend *be, const float *mel_window,
                               int32_t n_mels, const pg_transcribe_options *o, const int32_t *prompt,
                               int32_t n_prompt, pg_speech_decode_result *out) {
    memset(out, 0, sizeof *out);
    pg_transcribe_options defaults;
    if (!o) {
        pg_transcribe_options_default(&defaults);
        o = &defaults;
    }
    if (!be || !be->run || !mel_window) return pg_error(PAGODA_ERR_INVALID_ARG, "speech: no backend or mel");
    tctx c;
    win_result r = {0};
    pagoda_status st = tctx_init(&c, e, be, o);
    if (!st && n_mels != c.n_mels)
        st = pg_error(PAGODA_ERR_INVALID_ARG, "speech: %d mel bins given, the model takes %d", (int)n_mels,
                      (int)c.n_mels);
    if (!st && o->task == PG_SPEECH_TRANSLATE && !c.t.multilingual)
        st = pg_error(PAGODA_ERR_INVALID_ARG, "speech: an English-only model cannot translate");
    if (!st) st = pg_whisper_suppress_tokens(&c.t, o->suppress_tokens, &c.suppress, &c.n_suppress);
    if (!st) st = pick_language(&c, o->language, mel_window);
    if (!st) st = decode_window(&c, mel_window, prompt, prompt ? n_prompt : 0, o->temperature, o->seed, &r);
    char *text = NULL;
    size_t len = 0;
    if (!st) st = decode_text(&c, r.tokens, r.n_tokens, INT32_MAX, &text, &len);
    if (!st) {
        size_t b, en;
        strip_span(text, len, &b, &en);
        memmove(text, text + b, en - b);
        text[en - b] = 0;
        out->tokens = r.tokens;
        out->n_tokens = r.n_tokens;
        r.tokens = NULL;
        out->text = text;
        snprintf(out->language, sizeof out->language, "%s", PG_WHISPER_LANGUAGES[c.lang_index].code);
        out->temperature = (float)r.temperature;
        out->avg_logprob = (float)r.avg_logprob;
        out->no_speech_prob = (float)r.no_speech_prob;
        out->compression_ratio = (float)r.compression_ratio;
    }
    win_result_free(&r);
    tctx_free(&c);
    return st;
}

/* ---- transcribe() ------------------------------------------------------------------ */

typedef struct i32vec {
    int32_t *v;
    int32_t n, cap;
} i32vec;

static bool vec_push(i32vec *a, const int32_t *x, int32_t n) {
    if (a->n + n > a->cap) {
        int32_t nc = a->cap ? a->cap : 256;
        while (nc < a->n + n) nc *= 2;
        int32_t *nv = realloc(a->v, (size_t)nc * sizeof *nv);
        if (!nv) return false;
        a->v = nv;
        a->cap = nc;
    }
    if (n) memcpy(a->v + a->n, x, (size_t)n * sizeof *x);
    a->n += n;
    return true;
}

static void segment_free(pg_speech_segment *s) {
    free(s->text);
    free(s->tokens);
}

void pg_transcript_free(pg_transcript *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_segments; i++) segment_free(&t->segments[i]);
    free(t->segments);
    free(t->text);
    free(t);
}

/* transcribe.py new_segment + the "instantaneous or empty" clearing, appended to tr. */
static pagoda_status add_segment(tctx *c, pg_transcript *tr, int32_t *cap, int32_t seek, double start,
                                 double end, const int32_t *tokens, int32_t n, const win_result *r) {
    if (tr->n_segments == *cap) {
        int32_t nc = *cap ? *cap * 2 : 16;
        pg_speech_segment *ns = realloc(tr->segments, (size_t)nc * sizeof *ns);
        if (!ns) return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
        tr->segments = ns;
        *cap = nc;
    }
    pg_speech_segment s = {.id = tr->n_segments,
                           .seek = seek,
                           .start = start,
                           .end = end,
                           .temperature = (float)r->temperature,
                           .avg_logprob = (float)r->avg_logprob,
                           .compression_ratio = (float)r->compression_ratio,
                           .no_speech_prob = (float)r->no_speech_prob};
    size_t len;
    pagoda_status st = decode_text(c, tokens, n, c->t.eot, &s.text, &len);
    if (st) return st;
    size_t b, e;
    strip_span(s.text, len, &b, &e);
    if (start == end || b == e) { /* instantaneous or no text: cleared */
        s.text[0] = 0;
        n = 0;
    }
    if (n > 0) {
        if (!(s.tokens = malloc((size_t)n * sizeof *s.tokens))) {
            free(s.text);
            return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
        }
        memcpy(s.tokens, tokens, (size_t)n * sizeof *tokens);
    }
    s.n_tokens = n;
    tr->segments[tr->n_segments++] = s;
    return PAGODA_OK;
}

pagoda_status pg_transcribe(pagoda_engine *e, const pg_speech_backend *be, const float *pcm, size_t n_samples,
                            const pg_transcribe_options *opts, pg_segment_fn on_seg, void *seg_ctx,
                            pg_transcript **out) {
    *out = NULL;
    pg_transcribe_options defaults;
    if (!opts) {
        pg_transcribe_options_default(&defaults);
        opts = &defaults;
    }
    if (!be || !be->run) return pg_error(PAGODA_ERR_INVALID_ARG, "speech: no backend");
    if (!pcm || n_samples == 0) return pg_error(PAGODA_ERR_INVALID_ARG, "speech: empty audio");
    if (opts->language && *opts->language && pg_whisper_language_index(opts->language) < 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "speech: unsupported language '%s'", opts->language);
    tctx c;
    pagoda_status st = tctx_init(&c, e, be, opts);
    float *mel = NULL, *window = NULL;
    pg_transcript *tr = NULL;
    i32vec all = {0};
    win_result r = {0};
    if (st) goto done;
    if (opts->task == PG_SPEECH_TRANSLATE && !c.t.multilingual) {
        st = pg_error(PAGODA_ERR_INVALID_ARG, "speech: an English-only model cannot translate");
        goto done;
    }
    if ((st = pg_whisper_suppress_tokens(&c.t, opts->suppress_tokens, &c.suppress, &c.n_suppress))) goto done;

    /* mel = log_mel_spectrogram(audio, padding=N_SAMPLES) */
    int64_t n_frames = 0;
    if ((st = pg_log_mel(pcm, (int64_t)n_samples, (int)c.n_mels, PG_MEL_PAD_APPEND_30S, NULL, &mel, &n_frames)))
        goto done;
    int64_t content_frames = n_frames - N_FRAMES;
    window = malloc((size_t)c.n_mels * N_FRAMES * sizeof *window);
    tr = calloc(1, sizeof *tr);
    if (!window || !tr) {
        st = pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
        goto done;
    }
    tr->duration = (double)content_frames * HOP / SR;

    /* language: given, English for English-only models, else detected on
     * pad_or_trim(mel, N_FRAMES): the first 30 s of the padded mel */
    pg_mel_window(mel, (int)c.n_mels, n_frames, 0, window);
    if ((st = pick_language(&c, opts->language, window))) goto done;
    snprintf(tr->language, sizeof tr->language, "%s", PG_WHISPER_LANGUAGES[c.lang_index].code);

    /* initial_prompt: encode(" " + prompt.strip()) */
    int32_t n_initial = 0;
    if (opts->prompt) {
        size_t b, en, pl = strlen(opts->prompt);
        strip_span(opts->prompt, pl, &b, &en);
        char *p = malloc(en - b + 2);
        if (!p) {
            st = pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
            goto done;
        }
        p[0] = ' ';
        memcpy(p + 1, opts->prompt + b, en - b);
        int32_t *ids = NULL;
        size_t n = 0;
        st = c.tok.encode(c.tok.ctx, p, en - b + 1, &ids, &n);
        free(p);
        if (st) goto done;
        bool ok = vec_push(&all, ids, (int32_t)n);
        free(ids);
        if (!ok) {
            st = pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
            goto done;
        }
        n_initial = (int32_t)n;
    }

    const int input_stride = 2;               /* mel frames per output token (N_FRAMES / n_audio_ctx) */
    const double time_precision = 0.02;       /* seconds per output token */
    int32_t seg_cap = 0, prompt_reset_since = 0, window_index = 0;
    int64_t seek = 0;
    while (seek < content_frames) {
        double time_offset = (double)seek * HOP / SR;
        int64_t segment_size = content_frames - seek < N_FRAMES ? content_frames - seek : N_FRAMES;
        double segment_duration = (double)segment_size * HOP / SR;
        /* pad_or_trim(mel[:, seek:seek + segment_size], N_FRAMES): zeros after the segment */
        for (int32_t m = 0; m < c.n_mels; m++) {
            float *dst = window + (size_t)m * N_FRAMES;
            memcpy(dst, mel + (size_t)m * (size_t)n_frames + (size_t)seek, (size_t)segment_size * sizeof *dst);
            memset(dst + segment_size, 0, (size_t)(N_FRAMES - segment_size) * sizeof *dst);
        }
        if ((st = decode_with_fallback(&c, window, all.v + prompt_reset_since, all.n - prompt_reset_since,
                                       window_index++, &r)))
            goto done;

        if (!isnan(opts->no_speech_threshold)) { /* no voice activity check */
            bool skip = r.no_speech_prob > opts->no_speech_threshold;
            if (!isnan(opts->logprob_threshold) && r.avg_logprob > opts->logprob_threshold) skip = false;
            if (skip) {
                seek += segment_size;
                win_result_free(&r);
                continue;
            }
        }
        int32_t first_new = tr->n_segments;
        const int32_t *tok = r.tokens;
        int32_t n = r.n_tokens;
        const int32_t tb = c.t.timestamp_begin;
        /* timestamp_tokens[-2:] == [False, True] */
        bool single_timestamp_ending = n >= 2 && tok[n - 2] < tb && tok[n - 1] >= tb;
        /* slices end after each consecutive timestamp pair */
        int32_t n_consecutive = 0;
        for (int32_t i = 1; i < n; i++)
            if (tok[i - 1] >= tb && tok[i] >= tb) n_consecutive++;
        if (n_consecutive > 0) {
            int32_t last_slice = 0;
            for (int32_t i = 1; i <= n && !st; i++) {
                bool cut = (i < n && tok[i - 1] >= tb && tok[i] >= tb) || (i == n && single_timestamp_ending);
                if (!cut) continue;
                const int32_t *sl = tok + last_slice;
                int32_t sn = i - last_slice;
                double start = time_offset + (double)(sl[0] - tb) * time_precision;
                double end = time_offset + (double)(sl[sn - 1] - tb) * time_precision;
                st = add_segment(&c, tr, &seg_cap, (int32_t)seek, start, end, sl, sn, &r);
                last_slice = i;
            }
            if (st) goto done;
            if (single_timestamp_ending)
                seek += segment_size; /* no speech after the last timestamp */
            else                      /* ignore the unfinished segment, seek to the last timestamp */
                seek += (int64_t)(tok[last_slice - 1] - tb) * input_stride;
        } else {
            double duration = segment_duration;
            int32_t last_ts = -1;
            for (int32_t i = n; i-- > 0;)
                if (tok[i] >= tb) {
                    last_ts = tok[i];
                    break;
                }
            if (last_ts >= 0 && last_ts != tb) duration = (double)(last_ts - tb) * time_precision;
            if ((st = add_segment(&c, tr, &seg_cap, (int32_t)seek, time_offset, time_offset + duration, tok, n,
                                  &r)))
                goto done;
            seek += segment_size;
        }
        for (int32_t i = first_new; i < tr->n_segments; i++) {
            if (!vec_push(&all, tr->segments[i].tokens, tr->segments[i].n_tokens)) {
                st = pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
                goto done;
            }
            if (on_seg) on_seg(seg_ctx, &tr->segments[i]);
        }
        if (!opts->condition_on_previous_text || r.temperature > 0.5)
            prompt_reset_since = all.n; /* no prompt after a high-temperature window */
        win_result_free(&r);
    }
    size_t len;
    if ((st = decode_text(&c, all.v + n_initial, all.n - n_initial, INT32_MAX, &tr->text, &len))) goto done;
done:
    win_result_free(&r);
    free(all.v);
    free(window);
    free(mel);
    tctx_free(&c);
    if (st) {
        pg_transcript_free(tr);
        return st;
    }
    *out = tr;
    return PAGODA_OK;
}

