/* The form of POST /v1/audio/transcriptions and /v1/audio/translations
 * (multipart/form-data): the uploaded file and the text fields, collected
 * part by part as libmicrohttpd's post processor hands them over, then
 * validated into typed parameters. Pure: no engine, no HTTP, unit-tested in
 * tests/test_server_audio.c.
 *
 * Reference: the OpenAI API reference (Audio: createTranscription,
 * createTranslation: file, model, language, prompt, response_format,
 * temperature, timestamp_granularities[], stream) and vLLM's
 * TranscriptionRequest / TranslationRequest (protocol.py: seed, top_p,
 * top_k, min_p, frequency_penalty, presence_penalty, repetition_penalty,
 * max_completion_tokens). Unknown fields are ignored, as both servers do. */
#ifndef PAGODA_SERVER_AUDIO_FORM_H
#define PAGODA_SERVER_AUDIO_FORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/openai.h"
#include "speech/transcribe.h"

#define PG_AUDIO_FORM_MAX_FIELD (64u << 10) /* bytes of one text field */
#define PG_AUDIO_FORM_MAX_FIELDS 64         /* text parts per request */

typedef struct pg_audio_form pg_audio_form;

/* The validated request. Strings and the file bytes are owned by the form
 * and live until pg_audio_form_free. */
typedef struct pg_audio_params {
    const unsigned char *file; /* the `file` part's bytes */
    size_t file_len;
    const char *filename;        /* its filename (may be "") */
    const char *model;           /* NULL when absent */
    const char *language;        /* NULL = detect */
    const char *prompt;          /* NULL = none */
    pg_transcript_format format; /* default json */
    float temperature;           /* [0, 1]; default 0 (with fallback) */
    bool stream;
    int64_t seed; /* -1 = none */
    /* vLLM's extra sampling fields, applied to every window's request:
     * *_set tells which were given. */
    bool top_p_set, top_k_set, min_p_set;
    float top_p, min_p;
    int32_t top_k;
    bool frequency_penalty_set, presence_penalty_set, repetition_penalty_set;
    float frequency_penalty, presence_penalty, repetition_penalty;
    int32_t max_tokens; /* max_completion_tokens: tokens per 30-second window; 0 = model's */
} pg_audio_params;

/* A form whose `file` part may hold at most max_file_bytes (> 0) bytes.
 * NULL when out of memory. */
pg_audio_form *pg_audio_form_create(size_t max_file_bytes);
void pg_audio_form_free(pg_audio_form *f);

/* Add `size` bytes at offset `off` of part `key` (filename: the part's
 * filename, NULL for a text field), as MHD's post iterator delivers them:
 * one part's chunks arrive in order, off counting from 0. Errors (the
 * request is answered with err, later chunks may be ignored):
 *   413  the file is larger than max_file_bytes (message gives the limit);
 *   400  a second `file` part, a text field over PG_AUDIO_FORM_MAX_FIELD
 *        bytes, more than PG_AUDIO_FORM_MAX_FIELDS text fields, a repeated
 *        field (other than timestamp_granularities[]), a NUL byte in a text
 *        field. */
pagoda_status pg_audio_form_add(pg_audio_form *f, const char *key, const char *filename,
                                const char *data, uint64_t off, size_t size, pg_api_error *err);

/* Validate the collected parts into *out. Errors: 400 naming the field:
 * no `file` part, an empty file, response_format not one of json / text /
 * srt / vtt / verbose_json, temperature not a number in [0, 1],
 * timestamp_granularities[] other than "segment" ("word" is not supported),
 * stream not true/false, seed not an integer, top_p not in (0, 1], top_k not
 * an integer >= -1, min_p not in [0, 1], penalties out of range
 * (frequency/presence [-2, 2], repetition > 0), max_completion_tokens not an
 * integer >= 1, a text field that is not UTF-8. */
pagoda_status pg_audio_form_finish(pg_audio_form *f, pg_audio_params *out, pg_api_error *err);

#endif
