/* Whisper's decoding rules on one row of logits, and the numbers a
 * window's result is judged by.
 *
 * Reference: openai/whisper whisper/decoding.py (c0d2f62): SuppressBlank,
 * SuppressTokens, ApplyTimestampRules (incl. max_initial_timestamp),
 * GreedyDecoder.update (sum_logprobs from log_softmax of the filtered
 * logits), DecodingTask.run (avg_logprob = sum_logprob / (len(tokens) + 1));
 * whisper/utils.py compression_ratio and format_timestamp.
 *
 * Shapes: logits[vocab] f32, changed in place (banned tokens -> -INFINITY).
 * tokens[0..n_tokens) are the whole context of the row (decoding.py's
 * `tokens`: the initial tokens, then those sampled so far), so the row
 * predicts token n_tokens; sample_begin = number of initial tokens. */
#ifndef PAGODA_SPEECH_FILTERS_H
#define PAGODA_SPEECH_FILTERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "speech/whisper_vocab.h"

/* SuppressBlank: at the first sampled step (n_tokens == sample_begin) ban
 * blank[] (encode(" ") + [eot]). */
void pg_whisper_suppress_blank(const pg_whisper_tokens *t, int32_t sample_begin, const int32_t *tokens,
                               size_t n_tokens, float *logits, int32_t vocab);

/* SuppressTokens: ban ids[0..n) at every step. */
void pg_whisper_suppress_ids(const int32_t *ids, int32_t n, float *logits, int32_t vocab);

/* ApplyTimestampRules (timestamp_begin = t->timestamp_begin):
 *  - ban <|notimestamps|>;
 *  - after a timestamp: if the one before it was a timestamp too (or there is
 *    none: fewer than 2 sampled), ban timestamps, else ban text (ids < eot);
 *  - timestamps never decrease and segments are not empty: with L the last
 *    sampled timestamp, ban timestamps below L when the last token is a
 *    timestamp that follows text (it may be repeated to close the pair),
 *    else below L + 1;
 *  - at the first sampled step ban every non-timestamp and, with
 *    max_initial_timestamp_index >= 0, timestamps after
 *    timestamp_begin + max_initial_timestamp_index;
 *  - if the total probability of the timestamps exceeds that of the most
 *    likely text token, ban text (ids < timestamp_begin).
 * max_initial_timestamp_index: round(max_initial_timestamp / 0.02) (50 for
 * openai's 1.0 s); -1 = none. */
void pg_whisper_timestamp_rules(const pg_whisper_tokens *t, int32_t sample_begin,
                                int32_t max_initial_timestamp_index, const int32_t *tokens,
                                size_t n_tokens, float *logits, int32_t vocab);

/* The filter set DecodingTask builds for one decode. */
typedef struct pg_whisper_filter {
    const pg_whisper_tokens *t;
    int32_t sample_begin;
    bool suppress_blank;
    const int32_t *suppress; /* pg_whisper_suppress_tokens, or NULL: no SuppressTokens */
    int32_t n_suppress;
    bool timestamps;                      /* !without_timestamps: ApplyTimestampRules */
    int32_t max_initial_timestamp_index; /* -1 = none */
} pg_whisper_filter;

/* The filters in decoding.py's order: SuppressBlank, SuppressTokens,
 * ApplyTimestampRules. */
void pg_whisper_filter_apply(const pg_whisper_filter *f, const int32_t *tokens, size_t n_tokens,
                             float *logits, int32_t vocab);

/* log(sum(exp(logits))) over [0, vocab) in double (-INFINITY if all are). */
double pg_whisper_logsumexp(const float *logits, int32_t vocab);

/* softmax(logits)[id] in double. */
double pg_whisper_prob(const float *logits, int32_t vocab, int32_t id);

/* utils.py compression_ratio: len(text) / len(zlib.compress(text)) (level
 * Z_DEFAULT_COMPRESSION, as Python's zlib.compress). Empty text: 0.
 * Returns NAN if zlib fails (out of memory). */
double pg_whisper_compression_ratio(const char *text, size_t len);

/* utils.py format_timestamp: "[HH:]MM:SS<marker>mmm" (hours when
 * always_hours or > 0; milliseconds = round-half-even(seconds * 1000)).
 * Negative seconds are clamped to 0. Writes at most 32 bytes; returns the length. */
int pg_whisper_format_timestamp(double seconds, bool always_hours, char marker, char out[32]);

#endif
