/* Whisper's logit filters and result measures (see filters.h). */
#include "speech/filters.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

static void ban_range(float *logits, int32_t vocab, int32_t lo, int32_t hi) {
    if (lo < 0) lo = 0;
    if (hi > vocab) hi = vocab;
    for (int32_t i = lo; i < hi; i++) logits[i] = -INFINITY;
}

void pg_whisper_suppress_blank(const pg_whisper_tokens *t, int32_t sample_begin, const int32_t *tokens,
                               size_t n_tokens, float *logits, int32_t vocab) {
    (void)tokens;
    if (n_tokens != (size_t)sample_begin) return;
    pg_whisper_suppress_ids(t->blank, t->n_blank, logits, vocab);
}

void pg_whisper_suppress_ids(const int32_t *ids, int32_t n, float *logits, int32_t vocab) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < vocab) logits[ids[i]] = -INFINITY;
}

double pg_whisper_logsumexp(const float *logits, int32_t vocab) {
    double m = -INFINITY;
    for (int32_t i = 0; i < vocab; i++)
        if (logits[i] > m) m = logits[i];
    if (m == -INFINITY) return -INFINITY;
    double s = 0;
    for (int32_t i = 0; i < vocab; i++) s += exp((double)logits[i] - m);
    return m + log(s);
}

double pg_whisper_prob(const float *logits, int32_t vocab, int32_t id) {
    if (id < 0 || id >= vocab) return 0.0;
    double lse = pg_whisper_logsumexp(logits, vocab);
    if (lse == -INFINITY) return 0.0;
    return exp((double)logits[id] - lse);
}

void pg_whisper_timestamp_rules(const pg_whisper_tokens *t, int32_t sample_begin,
                                int32_t max_initial_timestamp_index, const int32_t *tokens,
                                size_t n_tokens, float *logits, int32_t vocab) {
    const int32_t tb = t->timestamp_begin;
    if (t->no_timestamps >= 0 && t->no_timestamps < vocab) logits[t->no_timestamps] = -INFINITY;

    /* timestamps come in pairs, except directly before EOT */
    const int32_t *seq = tokens + (n_tokens >= (size_t)sample_begin ? (size_t)sample_begin : n_tokens);
    size_t n_seq = n_tokens >= (size_t)sample_begin ? n_tokens - (size_t)sample_begin : 0;
    bool last_ts = n_seq >= 1 && seq[n_seq - 1] >= tb;
    bool penultimate_ts = n_seq < 2 || seq[n_seq - 2] >= tb;
    if (last_ts) {
        if (penultimate_ts)
            ban_range(logits, vocab, tb, vocab); /* has to be text (or EOT) */
        else
            ban_range(logits, vocab, 0, t->eot); /* cannot be text */
    }
    /* timestamps never decrease; a segment has a nonzero length */
    int32_t last_timestamp = -1;
    for (size_t i = n_seq; i-- > 0;)
        if (seq[i] >= tb) {
            last_timestamp = seq[i];
            break;
        }
    if (last_timestamp >= 0) {
        int32_t upto = last_ts && !penultimate_ts ? last_timestamp : last_timestamp + 1;
        ban_range(logits, vocab, tb, upto);
    }

    if (n_tokens == (size_t)sample_begin) {
        ban_range(logits, vocab, 0, tb); /* the first sampled token is a timestamp */
        if (max_initial_timestamp_index >= 0)
            ban_range(logits, vocab, tb + max_initial_timestamp_index + 1, vocab);
    }

    /* if the timestamps together are likelier than any single text token, sample a timestamp */
    if (tb >= vocab) return;
    double ts_lse = pg_whisper_logsumexp(logits + tb, vocab - tb);
    double max_text = -INFINITY;
    for (int32_t i = 0; i < tb; i++)
        if (logits[i] > max_text) max_text = logits[i];
    if (ts_lse > max_text) ban_range(logits, vocab, 0, tb);
}

void pg_whisper_filter_apply(const pg_whisper_filter *f, const int32_t *tokens, size_t n_tokens,
                             float *logits, int32_t vocab) {
    if (f->suppress_blank) pg_whisper_suppress_blank(f->t, f->sample_begin, tokens, n_tokens, logits, vocab);
    if (f->suppress) pg_whisper_suppress_ids(f->suppress, f->n_suppress, logits, vocab);
    if (f->timestamps)
        pg_whisper_timestamp_rules(f->t, f->sample_begin, f->max_initial_timestamp_index, tokens, n_tokens,
                                   logits, vocab);
}

double pg_whisper_compression_ratio(const char *text, size_t len) {
    if (!len) return 0.0; /* zlib.compress(b"") is 8 bytes: 0 / 8 */
    uLongf cap = compressBound((uLong)len);
    Bytef *buf = malloc(cap);
    if (!buf) return NAN;
    int rc = compress2(buf, &cap, (const Bytef *)text, (uLong)len, Z_DEFAULT_COMPRESSION);
    free(buf);
    if (rc != Z_OK || cap == 0) return NAN;
    return (double)len / (double)cap;
}

int pg_whisper_format_timestamp(double seconds, bool always_hours, char marker, char out[32]) {
    if (!(seconds > 0)) seconds = 0;
    /* Python's round(): half to even, which nearbyint does in the default rounding mode */
    long long ms = (long long)nearbyint(seconds * 1000.0);
    long long h = ms / 3600000;
    ms -= h * 3600000;
    long long m = ms / 60000;
    ms -= m * 60000;
    long long s = ms / 1000;
    ms -= s * 1000;
    if (always_hours || h > 0)
        return snprintf(out, 32, "%02lld:%02lld:%02lld%c%03lld", h, m, s, marker, ms);
    return snprintf(out, 32, "%02lld:%02lld%c%03lld", m, s, marker, ms);
}
