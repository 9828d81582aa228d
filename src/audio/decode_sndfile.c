/* libsndfile backend: sf_open_virtual over the bytes in memory, frames read
 * as float (integers scaled by 1 / 2^(bits-1)), downmixed into the sink. */
#include <ctype.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/decode_internal.h"

typedef struct memfile {
    const uint8_t *b;
    sf_count_t n, pos;
} memfile;

static sf_count_t vio_len(void *u) {
    return ((memfile *)u)->n;
}

static sf_count_t vio_seek(sf_count_t off, int whence, void *u) {
    memfile *m = u;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->n;
    if ((off > 0 && base > INT64_MAX - off) || base + off < 0) return -1;
    m->pos = base + off;
    return m->pos;
}

static sf_count_t vio_read(void *ptr, sf_count_t count, void *u) {
    memfile *m = u;
    if (count <= 0 || m->pos >= m->n) return 0;
    sf_count_t k = m->n - m->pos < count ? m->n - m->pos : count;
    memcpy(ptr, m->b + m->pos, (size_t)k);
    m->pos += k;
    return k;
}

static sf_count_t vio_write(const void *ptr, sf_count_t count, void *u) {
    return 0;
}

static sf_count_t vio_tell(void *u) {
    return ((memfile *)u)->pos;
}

/* Formats whose header gives the exact frame count: fewer frames on reading
 * means the file was cut short. */
static bool exact_length(int major) {
    switch (major) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX:
    case SF_FORMAT_RF64:
    case SF_FORMAT_W64:
    case SF_FORMAT_AIFF:
    case SF_FORMAT_FLAC:
        return true;
    default:
        return false;
    }
}

const char *pg_audio_sndfile_version(void) {
    return sf_version_string();
}

/* libsndfile shortens a WAV whose data chunk runs past the end of the bytes
 * to what is there; find the declared size to tell the caller instead.
 * Returns the declared data size in bytes (-1: no data chunk found, or a
 * streaming writer's 0 / 0xFFFFFFFF) and *present the bytes after its header. */
static int64_t riff_data_size(const uint8_t *b, size_t n, int64_t *present) {
    if (n < 12 || (memcmp(b, "RIFF", 4) != 0 && memcmp(b, "RIFX", 4) != 0)) return -1;
    const bool be = b[3] == 'X';
    size_t pos = 12;
    while (pos + 8 <= n) {
        const uint8_t *p = b + pos + 4;
        uint32_t size =
            be ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
               : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
        if (memcmp(b + pos, "data", 4) == 0) {
            *present = (int64_t)(n - pos - 8);
            return size == 0 || size == 0xFFFFFFFFu ? -1 : (int64_t)size;
        }
        pos += 8 + (size_t)size + (size & 1);
    }
    return -1;
}

/* The 32-bit size at p, big-endian for RIFX (be), else little-endian. */
static uint32_t riff_u32(const uint8_t *p, bool be) {
    return be ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
              : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* Walk the chunks of a RIFF/RIFX/RF64/BW64 WAVE file before libsndfile sees
 * it: every chunk must lie inside the n bytes. libsndfile 1.2.0 (Debian 12)
 * trusts the sizes: a LIST chunk declaring 0xffffff1a bytes in a 155-byte
 * file sends its sub-chunk parser into a loop that runs for minutes without
 * calling our I/O callbacks (fuzz_audio_decode, issue 21), so a read budget
 * cannot stop it; a LIST that fits bounds that loop by the file size. Only
 * "data" may run past the end (a cut upload, which riff_data_size reports
 * later) and then ends the walk. A last chunk may miss its pad byte; fewer
 * than 8 bytes after the last chunk are ignored, as libsndfile does.
 * b, n: the file (bytes). Returns true, `why` untouched, for a well-formed
 * or non-RIFF file; false with `why` (a NUL-terminated string of at most
 * `cap` bytes) naming the chunk, its offset and the sizes for a corrupt one.
 * Reference: the RIFF chunk layout (Microsoft/IBM Multimedia Programming
 * Interface 1.0, 1991; EBU Tech 3306 for RF64). */
static bool riff_chunks_fit(const uint8_t *b, size_t n, char *why, size_t cap) {
    if (n < 12 || memcmp(b + 8, "WAVE", 4) != 0) return true;
    bool be;
    if (memcmp(b, "RIFF", 4) == 0 || memcmp(b, "RF64", 4) == 0 || memcmp(b, "BW64", 4) == 0)
        be = false;
    else if (memcmp(b, "RIFX", 4) == 0)
        be = true;
    else
        return true;
    size_t pos = 12;
    while (n - pos >= 8) {
        const uint8_t *id = b + pos;
        const uint32_t size = riff_u32(b + pos + 4, be);
        const size_t left = n - pos - 8;
        /* libsndfile skips the samples and parses the chunks after them: a
         * data chunk that fits is walked over; one that runs past the end
         * (cut, or RF64's 0xFFFFFFFF), or a writer's unfinished 0 with a
         * RIFF size of 8, holds the rest of the file */
        if (memcmp(id, "data", 4) == 0 &&
            (size > left || (size == 0 && n >= 8 && riff_u32(b + 4, be) == 8)))
            return true;
        if (size > left) {
            snprintf(why, cap,
                     "corrupt wav file: the '%c%c%c%c' chunk at byte %zu declares %u bytes, only "
                     "%zu follow it",
                     isprint(id[0]) ? id[0] : '?', isprint(id[1]) ? id[1] : '?',
                     isprint(id[2]) ? id[2] : '?', isprint(id[3]) ? id[3] : '?', pos, size, left);
            return false;
        }
        pos += 8 + (size_t)size;
        if ((size & 1) && pos < n) pos++;
    }
    return true;
}

/* A short name for pg_audio.format. */
static const char *format_name(int format, const char *fallback) {
    switch (format & SF_FORMAT_TYPEMASK) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX:
        return "wav";
    case SF_FORMAT_RF64:
        return "rf64";
    case SF_FORMAT_W64:
        return "w64";
    case SF_FORMAT_AIFF:
        return "aiff";
    case SF_FORMAT_FLAC:
        return "flac";
    case SF_FORMAT_CAF:
        return "caf";
    case SF_FORMAT_AU:
        return "au";
    case SF_FORMAT_OGG:
        switch (format & SF_FORMAT_SUBMASK) {
        case SF_FORMAT_VORBIS:
            return "ogg vorbis";
        case SF_FORMAT_OPUS:
            return "ogg opus";
        default:
            return "ogg";
        }
    default:
        return fallback;
    }
}

pagoda_status pg_audio_decode_sndfile(const uint8_t *bytes, size_t n, pg_audio_sink *s,
                                      pg_audio_try *t) {
    if (!riff_chunks_fit(bytes, n, t->why, sizeof t->why)) {
        /* a WAV, but one libsndfile must not parse: refuse it here rather
         * than let FFmpeg try (the caller tries the other backend only for
         * files this one does not recognise) */
        t->recognised = true;
        snprintf(t->format, sizeof t->format, "wav/libsndfile");
        return pg_error(PAGODA_ERR_FORMAT, "%s: %s", s->name, t->why);
    }
    SF_VIRTUAL_IO vio = {vio_len, vio_seek, vio_read, vio_write, vio_tell};
    memfile m = {bytes, (sf_count_t)n, 0};
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *f = sf_open_virtual(&vio, SFM_READ, &info, &m);
    if (!f) {
        snprintf(t->why, sizeof t->why, "%s", sf_strerror(NULL));
        return PAGODA_ERR_FORMAT;
    }
    t->recognised = true;
    const int major = info.format & SF_FORMAT_TYPEMASK;
    SF_FORMAT_INFO fi = {.format = major};
    const char *ext = sf_command(f, SFC_GET_FORMAT_INFO, &fi, sizeof fi) == 0 && fi.extension
                          ? fi.extension
                          : "sndfile";
    ext = format_name(info.format, ext);
    snprintf(t->format, sizeof t->format, "%s/libsndfile", ext);

    float *buf = NULL;
    pagoda_status st = pg_audio_sink_start(s, info.samplerate, info.channels);
    if (st != PAGODA_OK) goto done;
    const sf_count_t chunk = info.channels >= 16384 ? 1 : 16384 / info.channels;
    buf = malloc((size_t)chunk * (size_t)info.channels * sizeof(float));
    if (!buf) {
        st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->name);
        goto done;
    }
    sf_count_t total = 0, got;
    while ((got = sf_readf_float(f, buf, chunk)) > 0) {
        if ((st = pg_audio_sink_push_interleaved(s, buf, got)) != PAGODA_OK) goto done;
        total += got;
    }
    if (sf_error(f) != SF_ERR_NO_ERROR && total == 0) {
        st = pg_error(PAGODA_ERR_FORMAT, "%s: corrupt %s audio: %s", s->name, ext, sf_strerror(f));
        goto done;
    }
    int64_t present = 0, declared = major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX
                                        ? riff_data_size(bytes, n, &present)
                                        : -1;
    const int64_t frame_bytes = (int64_t)info.channels * 2; /* at least 16-bit samples */
    if (declared > present && declared - present >= frame_bytes) {
        st = pg_error(PAGODA_ERR_FORMAT,
                      "%s: truncated wav file: the data chunk declares %lld bytes, only %lld are "
                      "present (%.3f s decoded)",
                      s->name, (long long)declared, (long long)present,
                      (double)total / info.samplerate);
        goto done;
    }
    if (exact_length(major) && info.frames > total && info.frames != SF_COUNT_MAX) {
        st = pg_error(PAGODA_ERR_FORMAT,
                      "%s: truncated %s file: the header declares %lld samples (%.3f s), only "
                      "%lld are present",
                      s->name, ext, (long long)info.frames, (double)info.frames / info.samplerate,
                      (long long)total);
        goto done;
    }
done:
    free(buf);
    sf_close(f);
    return st;
}
