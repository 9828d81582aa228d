/* Speech to text with a Whisper engine: openai/whisper's transcribe() over
 * a pagoda engine (the engine runs the encoder and the batched decoder; this
 * module decides what to decode).
 *
 * Reference: openai/whisper whisper/transcribe.py (transcribe: 30-second
 * windows, seek, timestamp segments, previous-text conditioning,
 * temperature fallback on compression ratio / average log-probability,
 * no-speech skipping), whisper/decoding.py (DecodingTask: SOT sequence,
 * SuppressBlank, SuppressTokens, ApplyTimestampRules, detect_language,
 * sum_logprob, no_speech_prob), whisper/tokenizer.py (special tokens,
 * languages, non_speech_tokens), whisper/utils.py (srt / vtt writers).
 *
 * One transcription decodes its windows one after another (each window's
 * seek depends on the previous one); many transcriptions run at once from
 * different threads and the engine batches their windows. A window is run
 * through a backend (`pg_speech_backend`): the server's submits the request
 * to its engine thread and waits, the CLI's steps the engine itself. */
#ifndef PAGODA_SPEECH_TRANSCRIBE_H
#define PAGODA_SPEECH_TRANSCRIBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "pagoda.h"
#include "tokenizer/whisper_lang.h"

/* Runs one engine request to completion: `req` (encoder features, decoder
 * prompt, sampling, logits_fn) in; the generated token ids (at most cap,
 * the final EOT included when it stopped on it) and the finish reason out.
 * Errors: those of pagoda_engine_add_request, or the request's error. */
typedef struct pg_speech_backend {
    pagoda_status (*run)(void *ctx, const pagoda_request *req, int32_t *tokens, int32_t cap,
                         int32_t *n_tokens, pagoda_finish_reason *finish);
    void *ctx;
} pg_speech_backend;

/* A backend that steps `e` on the calling thread (no other thread may step
 * it): for the CLI and tests. */
pg_speech_backend pg_speech_backend_direct(pagoda_engine *e);

typedef enum pg_speech_task { PG_SPEECH_TRANSCRIBE = 0, PG_SPEECH_TRANSLATE } pg_speech_task;

typedef struct pg_transcribe_options {
    pg_speech_task task;
    const char *language; /* ISO code ("en") or name ("english"); NULL = detect */
    const char *prompt;   /* initial_prompt text (previous-text conditioning), or NULL */
    /* 0 (the OpenAI API's default): openai's fallback schedule 0, 0.2, ...,
     * 1.0 (greedy first, hotter retries while a window fails the thresholds);
     * > 0: that temperature only, one try per window. */
    float temperature;
    float compression_ratio_threshold; /* 2.4; <= 0: off */
    float logprob_threshold;           /* -1.0; NAN: off */
    float no_speech_threshold;         /* 0.6; NAN: off */
    bool condition_on_previous_text;   /* true */
    bool without_timestamps;           /* false: timestamp tokens and segments */
    int64_t seed;                      /* sampling at temperature > 0; -1 = random */
    int32_t max_tokens_per_window;     /* 0 = n_text_ctx / 2 (224) */
    /* decoding.py DecodingOptions: */
    bool suppress_blank;         /* true: SuppressBlank */
    const char *suppress_tokens; /* "-1" (non_speech_tokens); "" or NULL: no SuppressTokens */
    float max_initial_timestamp; /* 1.0 s; <= 0: none */
} pg_transcribe_options;

/* The defaults of the comments above (openai's transcribe() and
 * DecodingOptions defaults). */
void pg_transcribe_options_default(pg_transcribe_options *o);

typedef struct pg_speech_segment {
    int32_t id;
    int32_t seek;              /* mel frame where its window started */
    double start, end;         /* seconds */
    char *text;                /* UTF-8 */
    int32_t *tokens;           /* text and timestamp tokens */
    int32_t n_tokens;
    float temperature, avg_logprob, compression_ratio, no_speech_prob;
} pg_speech_segment;

typedef struct pg_transcript {
    char *text;        /* all segments' text */
    char language[16]; /* ISO code: given or detected */
    double duration;   /* seconds of audio */
    pg_speech_segment *segments;
    int32_t n_segments;
} pg_transcript;

void pg_transcript_free(pg_transcript *t);

/* Called after each finished segment (streaming): seg is valid during the call. */
typedef void (*pg_segment_fn)(void *ctx, const pg_speech_segment *seg);

/* Transcribe (or translate) 16 kHz mono float PCM in [-1, 1] (audio/audio.h
 * decodes files to it) with the Whisper engine `e` through `be`.
 * Errors: PAGODA_ERR_INVALID_ARG (not a Whisper engine, unknown language,
 * translate on an English-only model, empty audio), errors of the backend
 * and the tokenizer, PAGODA_ERR_NOMEM. */
pagoda_status pg_transcribe(pagoda_engine *e, const pg_speech_backend *be, const float *pcm,
                            size_t n_samples, const pg_transcribe_options *o, pg_segment_fn on_seg,
                            void *seg_ctx, pg_transcript **out);

/* One 30-second window decoded once (decoding.py DecodingTask.run with
 * the greedy decoder at o->temperature, sampling when > 0; no fallback):
 * the sampled tokens up to the first EOT (excluded), decode(tokens).strip(),
 * avg_logprob = sum_logprob / (n_tokens + 1), no_speech_prob and the
 * compression ratio of the text. */
typedef struct pg_speech_decode_result {
    int32_t *tokens; /* malloc'ed */
    int32_t n_tokens;
    char *text; /* malloc'ed */
    char language[16];
    float temperature, avg_logprob, no_speech_prob, compression_ratio;
} pg_speech_decode_result;

/* Decode mel_window [n_mels][3000] with the options of o that DecodingOptions
 * has (task, language: NULL = detect on this window, temperature, seed,
 * without_timestamps, max_tokens_per_window = sample_len, suppress_blank,
 * suppress_tokens, max_initial_timestamp). prompt[0..n_prompt): previous
 * text tokens (DecodingOptions.prompt as ids; the last n_text_ctx/2 - 1
 * are kept) or NULL. Errors: as pg_transcribe. */
pagoda_status pg_speech_decode(pagoda_engine *e, const pg_speech_backend *be, const float *mel_window,
                               int32_t n_mels, const pg_transcribe_options *o, const int32_t *prompt,
                               int32_t n_prompt, pg_speech_decode_result *out);
void pg_speech_decode_result_free(pg_speech_decode_result *r);

/* decoding.py detect_language on one encoder window (mel_window
 * [n_mels][3000], transcribe.py: the first 3000 frames of the padded
 * whole-file mel): one request with the prompt [<|startoftranscript|>] whose
 * logits are softmaxed over the model's language tokens. *lang_index gets
 * the most probable index into PG_WHISPER_LANGUAGES; probs (optional,
 * [PG_WHISPER_MAX_LANGUAGES]) every language's probability (0 for those
 * the model lacks). Errors: PAGODA_ERR_INVALID_ARG (not a multilingual
 * Whisper engine), backend errors. */
pagoda_status pg_speech_detect_language(pagoda_engine *e, const pg_speech_backend *be,
                                        const float *mel_window, int32_t n_mels, int *lang_index,
                                        float *probs);

/* ---- response formats (OpenAI audio API: json, text, srt, vtt, verbose_json) ---- */

typedef enum pg_transcript_format {
    PG_TFMT_JSON = 0,     /* {"text": ...} */
    PG_TFMT_TEXT,         /* text + "\n" */
    PG_TFMT_SRT,          /* SubRip: "1\n00:00:00,000 --> 00:00:02,500\ntext\n\n" */
    PG_TFMT_VTT,          /* WebVTT: "WEBVTT\n\n00:00.000 --> 00:02.500\ntext\n\n" */
    PG_TFMT_VERBOSE_JSON, /* {"task","language","duration","text","segments":[...]} */
} pg_transcript_format;

/* Parse "json" / "text" / "srt" / "vtt" / "verbose_json". Errors:
 * PAGODA_ERR_INVALID_ARG naming the value. */
pagoda_status pg_transcript_format_parse(const char *s, pg_transcript_format *f);
/* Content-Type of a format ("application/json", "text/plain; charset=utf-8",
 * "text/vtt", ...). */
const char *pg_transcript_format_mime(pg_transcript_format f);
/* Render t (malloc'ed, NUL-terminated). task names verbose_json's "task". */
pagoda_status pg_transcript_render(const pg_transcript *t, pg_transcript_format f,
                                   pg_speech_task task, char **out, size_t *len);

#endif
