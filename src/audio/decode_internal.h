/* Shared by the decoding backends (decode_sndfile.c, decode_ffmpeg.c) and
 * the front door (decode.c): the mono accumulator every backend writes into,
 * at the file's own sample rate. Not a public interface. */
#ifndef PAGODA_AUDIO_DECODE_INTERNAL_H
#define PAGODA_AUDIO_DECODE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define PG_AUDIO_MAX_RATE 1536000 /* Hz; DXD/DSD-as-PCM tops out at 768 kHz */
#define PG_AUDIO_MAX_CHANNELS 1024

typedef struct pg_audio_sink {
    const char *name;   /* file name for messages ("audio" when no hint) */
    double max_seconds; /* the caller's limit */
    int rate;           /* source sample rate, 0 until started */
    int channels;
    int64_t max_frames; /* max_seconds * rate */
    float *mono;        /* [n] source-rate mono samples */
    int64_t n, cap;
} pg_audio_sink;

/* Fix the source format (first call) or check it is unchanged (later calls).
 * Errors: FORMAT (rate or channels out of range), UNSUPPORTED (a change). */
pagoda_status pg_audio_sink_start(pg_audio_sink *s, int rate, int channels);

/* Room for `frames` more mono samples, to be filled then committed with
 * pg_audio_sink_commit. Errors: LIMIT (past max_seconds), NOMEM. */
pagoda_status pg_audio_sink_reserve(pg_audio_sink *s, int64_t frames, float **dst);
static inline void pg_audio_sink_commit(pg_audio_sink *s, int64_t frames) {
    s->n += frames;
}

/* Average `channels` interleaved float channels of `frames` frames into the sink. */
pagoda_status pg_audio_sink_push_interleaved(pg_audio_sink *s, const float *x, int64_t frames);

/* Backend result: `recognised` says the backend understood the container
 * (its status is then final); when false, the next backend is tried and
 * `why` (a short reason, e.g. libsndfile's "Format not recognised") goes
 * into the combined message. */
typedef struct pg_audio_try {
    bool recognised;
    char why[256];
    char format[48];
} pg_audio_try;

pagoda_status pg_audio_decode_sndfile(const uint8_t *bytes, size_t n, pg_audio_sink *s,
                                      pg_audio_try *t);
pagoda_status pg_audio_decode_ffmpeg(const uint8_t *bytes, size_t n, pg_audio_sink *s,
                                     pg_audio_try *t);
const char *pg_audio_sndfile_version(void);
const char *pg_audio_ffmpeg_version(void);

#endif
