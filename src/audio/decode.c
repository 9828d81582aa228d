/* pg_audio_decode: sniff the container, run the backends, downmix (in the
 * backends, through the sink), resample to 16 kHz with libsoxr. See audio.h. */
#include "audio/audio.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "audio/decode_internal.h"

#ifdef PAGODA_HAVE_AUDIO_DECODE
#include <soxr.h>
#endif

/* ---- the mono sink */

pagoda_status pg_audio_sink_start(pg_audio_sink *s, int rate, int channels) {
    if (s->rate != 0) {
        if (rate != s->rate)
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "%s: the sample rate changes mid-stream (%d Hz, then %d Hz)", s->name,
                            s->rate, rate);
        if (channels != s->channels)
            return pg_error(PAGODA_ERR_UNSUPPORTED,
                            "%s: the channel count changes mid-stream (%d, then %d)", s->name,
                            s->channels, channels);
        return PAGODA_OK;
    }
    if (rate < 1 || rate > PG_AUDIO_MAX_RATE)
        return pg_error(PAGODA_ERR_FORMAT, "%s: sample rate %d Hz is outside [1, %d]", s->name,
                        rate, PG_AUDIO_MAX_RATE);
    if (channels < 1 || channels > PG_AUDIO_MAX_CHANNELS)
        return pg_error(PAGODA_ERR_FORMAT, "%s: %d channels is outside [1, %d]", s->name, channels,
                        PG_AUDIO_MAX_CHANNELS);
    s->rate = rate;
    s->channels = channels;
    const double max_frames = floor(s->max_seconds * (double)rate);
    s->max_frames = max_frames < (double)(INT64_MAX / 8) ? (int64_t)max_frames : INT64_MAX / 8;
    return PAGODA_OK;
}

pagoda_status pg_audio_sink_reserve(pg_audio_sink *s, int64_t frames, float **dst) {
    *dst = NULL;
    if (frames < 0 || s->n + frames > s->max_frames)
        return pg_error(PAGODA_ERR_LIMIT, "%s: the audio is longer than the %g s limit", s->name,
                        s->max_seconds);
    if (s->n + frames > s->cap) {
        int64_t cap = s->cap ? s->cap : 1 << 16;
        while (cap < s->n + frames)
            cap *= 2;
        if (cap > s->max_frames) cap = s->max_frames;
        float *p = realloc(s->mono, (size_t)cap * sizeof(float));
        if (!p)
            return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory for %lld samples", s->name,
                            (long long)cap);
        s->mono = p;
        s->cap = cap;
    }
    *dst = s->mono + s->n;
    return PAGODA_OK;
}

pagoda_status pg_audio_sink_push_interleaved(pg_audio_sink *s, const float *x, int64_t frames) {
    float *d = NULL;
    pagoda_status st = pg_audio_sink_reserve(s, frames, &d);
    if (st != PAGODA_OK || !d) return st;
    const int c = s->channels;
    if (c == 1) {
        memcpy(d, x, (size_t)frames * sizeof(float));
    } else {
        const float inv = 1.0f / (float)c;
        for (int64_t i = 0; i < frames; i++) {
            float acc = 0.0f;
            for (int k = 0; k < c; k++)
                acc += x[i * c + k];
            d[i] = acc * inv;
        }
    }
    pg_audio_sink_commit(s, frames);
    return PAGODA_OK;
}

/* ---- the front door */

static const char *file_ext(const char *name) {
    const char *dot = name ? strrchr(name, '.') : NULL;
    return dot ? dot + 1 : "";
}

/* Streams libsndfile could read but FFmpeg reads better, so FFmpeg only:
 * MPEG audio (MP3, MP2: an ID3v2 tag or a layer I-III frame sync), whose
 * mpg123 decoder inside libsndfile writes diagnostics to stderr, and Ogg,
 * whose Vorbis path in libsndfile 1.2 leaks a vorbis_info on corrupt input
 * (found by test_audio_decode's fuzz loop under LeakSanitizer). */
static bool ffmpeg_only(const uint8_t *b, size_t n) {
    if (n >= 4 && memcmp(b, "OggS", 4) == 0) return true;
    if (n >= 3 && memcmp(b, "ID3", 3) == 0) return true;
    return n >= 2 && b[0] == 0xFF && (b[1] & 0xE0) == 0xE0 && (b[1] & 0x06) != 0;
}

/* Containers libsndfile cannot read: go to FFmpeg first. */
static bool ffmpeg_first(const uint8_t *b, size_t n, const char *hint) {
    if (n >= 12 && memcmp(b + 4, "ftyp", 4) == 0) return true; /* MP4, M4A, MOV, 3GP */
    if (n >= 8 && memcmp(b + 4, "moov", 4) == 0) return true;
    if (n >= 4 && b[0] == 0x1A && b[1] == 0x45 && b[2] == 0xDF && b[3] == 0xA3)
        return true; /* EBML: WebM, Matroska */
    if (n >= 4 && b[0] == 0 && b[1] == 0 && b[2] == 1 && (b[3] == 0xBA || b[3] == 0xB3))
        return true;                                                  /* MPEG program stream */
    if (n >= 189 && b[0] == 0x47 && b[188] == 0x47) return true;      /* MPEG transport stream */
    if (n >= 2 && b[0] == 0xFF && (b[1] & 0xF6) == 0xF0) return true; /* ADTS AAC */
    if (n >= 5 && memcmp(b, "#!AMR", 5) == 0) return true;
    if (n >= 8 && memcmp(b, "\x30\x26\xB2\x75\x8E\x66\xCF\x11", 8) == 0) return true; /* ASF/WMA */
    /* nothing recognisable in the first bytes: trust the name */
    static const char *const by_name[] = {"mp4", "m4a",  "m4b", "mov", "3gp", "webm", "mkv",
                                          "mka", "mpeg", "mpg", "ts",  "aac", "wma",  "amr"};
    const char *ext = file_ext(hint);
    for (size_t i = 0; i < sizeof by_name / sizeof by_name[0]; i++)
        if (strcasecmp(ext, by_name[i]) == 0) return true;
    return false;
}

#ifdef PAGODA_HAVE_AUDIO_DECODE
/* Sink (source rate, mono) -> out (16 kHz). Takes s->mono. */
static pagoda_status to_16k(pg_audio_sink *s, pg_audio *out) {
    if (s->rate == PG_AUDIO_SAMPLE_RATE) {
        float *p = realloc(s->mono, (size_t)(s->n > 0 ? s->n : 1) * sizeof(float)); /* shrink */
        if (p) s->mono = p;
        out->samples = s->mono;
        out->n_samples = s->n;
        s->mono = NULL;
        return PAGODA_OK;
    }
    const double ratio = (double)PG_AUDIO_SAMPLE_RATE / (double)s->rate;
    const size_t olen = (size_t)floor((double)s->n * ratio + 0.5);
    if (olen == 0)
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: %lld samples at %d Hz is shorter than one sample at 16 kHz", s->name,
                        (long long)s->n, s->rate);
    float *dst = malloc(olen * sizeof(float));
    if (!dst) return pg_error(PAGODA_ERR_NOMEM, "%s: out of memory for %zu samples", s->name, olen);
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    soxr_runtime_spec_t rt = soxr_runtime_spec(1);
    soxr_error_t e = NULL;
    soxr_t so = soxr_create((double)s->rate, PG_AUDIO_SAMPLE_RATE, 1, &e, &io, &q, &rt);
    /* fed in blocks: one soxr_process over the whole input copies it through
     * soxr's FIFO in a way that grows quadratically when realloc moves */
    size_t in_pos = 0, out_pos = 0, idone = 0, odone = 0;
    while (!e && in_pos < (size_t)s->n && out_pos < olen) {
        const size_t ilen = (size_t)s->n - in_pos < 65536 ? (size_t)s->n - in_pos : 65536;
        e = soxr_process(so, s->mono + in_pos, ilen, &idone, dst + out_pos, olen - out_pos, &odone);
        in_pos += idone;
        out_pos += odone;
        if (idone == 0 && odone == 0) break; /* no progress: cannot happen, never spin */
    }
    do { /* end of input: drain the filter */
        odone = 0;
        if (!e && out_pos < olen)
            e = soxr_process(so, NULL, 0, NULL, dst + out_pos, olen - out_pos, &odone);
        out_pos += odone;
    } while (!e && odone > 0 && out_pos < olen);
    soxr_delete(so);
    if (e) {
        free(dst);
        return pg_error(PAGODA_ERR_NOMEM, "%s: resampling %d Hz -> 16 kHz failed: %s", s->name,
                        s->rate, e);
    }
    if (out_pos == 0) {
        free(dst);
        return pg_error(PAGODA_ERR_FORMAT, "%s: no samples left after resampling to 16 kHz",
                        s->name);
    }
    out->samples = dst;
    out->n_samples = (int64_t)out_pos;
    return PAGODA_OK;
}

static pthread_once_t g_backends_once = PTHREAD_ONCE_INIT;
static char g_backends[256];

static void backends_init(void) {
    snprintf(g_backends, sizeof g_backends, "%s, %s, %s", pg_audio_sndfile_version(),
             pg_audio_ffmpeg_version(), soxr_version());
}

const char *pg_audio_backends(void) {
    pthread_once(&g_backends_once, backends_init);
    return g_backends;
}
#else
const char *pg_audio_backends(void) {
    return NULL;
}
#endif

void pg_audio_free(pg_audio *a) {
    if (!a) return;
    free(a->samples);
    memset(a, 0, sizeof *a);
}

pagoda_status pg_audio_decode(const void *bytes, size_t n, const char *filename_hint,
                              double max_seconds, pg_audio *out) {
    memset(out, 0, sizeof *out);
    const char *name = filename_hint && *filename_hint ? filename_hint : "audio";
    if (!bytes && n > 0) return pg_error(PAGODA_ERR_INVALID_ARG, "%s: no buffer", name);
    if (n == 0) return pg_error(PAGODA_ERR_INVALID_ARG, "%s: empty input (0 bytes)", name);
    if (!(max_seconds > 0.0))
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: max_seconds must be positive", name);
#ifndef PAGODA_HAVE_AUDIO_DECODE
    (void)ffmpeg_first;
    (void)ffmpeg_only;
    return pg_error(PAGODA_ERR_UNSUPPORTED,
                    "%s: pagoda was built without audio decoding (libsndfile, FFmpeg and libsoxr "
                    "were not found at configure time)",
                    name);
#else
    const uint8_t *b = bytes;
    pg_audio_sink s = {.name = name, .max_seconds = max_seconds};
    pg_audio_try t1 = {0}, t2 = {0};
    pagoda_status st;
    const bool only = ffmpeg_only(b, n);
    const bool ff = only || ffmpeg_first(b, n, filename_hint);
    if (ff) {
        st = pg_audio_decode_ffmpeg(b, n, &s, &t1);
        if (!t1.recognised && only) {
            snprintf(t2.why, sizeof t2.why, "not tried for MPEG audio or Ogg");
        } else if (!t1.recognised) {
            pg_audio_sink reset = {.name = name, .max_seconds = max_seconds};
            free(s.mono);
            s = reset;
            st = pg_audio_decode_sndfile(b, n, &s, &t2);
        }
    } else {
        st = pg_audio_decode_sndfile(b, n, &s, &t1);
        if (!t1.recognised) {
            pg_audio_sink reset = {.name = name, .max_seconds = max_seconds};
            free(s.mono);
            s = reset;
            st = pg_audio_decode_ffmpeg(b, n, &s, &t2);
        }
    }
    if (!t1.recognised && !t2.recognised) {
        free(s.mono);
        return pg_error(PAGODA_ERR_FORMAT,
                        "%s: not a recognised audio file, or corrupt (%s: %s; %s: %s)", name,
                        ff ? "FFmpeg" : "libsndfile", t1.why, ff ? "libsndfile" : "FFmpeg", t2.why);
    }
    if (st == PAGODA_OK && s.n == 0)
        st = pg_error(PAGODA_ERR_FORMAT, "%s: the file holds no audio samples (0 s)", name);
    if (st != PAGODA_OK) {
        free(s.mono);
        return st;
    }
    for (int64_t i = 0; i < s.n; i++)
        if (!isfinite(s.mono[i])) s.mono[i] = 0.0f;
    st = to_16k(&s, out);
    free(s.mono);
    if (st != PAGODA_OK) return st;
    out->source_rate = s.rate;
    out->source_channels = s.channels;
    snprintf(out->format, sizeof out->format, "%s", t1.recognised ? t1.format : t2.format);
    return PAGODA_OK;
#endif
}
