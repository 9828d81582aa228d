/* FFmpeg backend: libavformat demuxes the bytes through a custom AVIOContext
 * (no file, no URL: nested opens are refused and only audio containers are
 * whitelisted, so a playlist or concat file cannot make pagoda read other
 * files or the network), libavcodec decodes the best audio stream on one
 * thread, and each frame's channels are averaged into the sink. */
#include <errno.h>
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "audio/decode_internal.h"
#include "base/log.h"

/* Demuxers allowed to open an upload (names as in `ffmpeg -demuxers`; a
 * demuxer matches if any of its comma-separated names is listed). */
#define FORMAT_WHITELIST                                                                           \
    "mov,mp4,m4a,matroska,webm,mpeg,mpegts,mp3,aac,ogg,flac,wav,w64,aiff,caf,amr,amrnb,amrwb,au,"  \
    "asf,avi,flv,ac3,eac3,loas,wv,ape,tta,mpc,mpc8,dts,truehd,mlp,opus,spdif,voc,xwma"
#define IO_BUFFER 65536

typedef struct membuf {
    const uint8_t *b;
    size_t n, pos;
} membuf;

static int io_read(void *u, uint8_t *buf, int size) {
    membuf *m = u;
    if (m->pos >= m->n || size <= 0) return AVERROR_EOF;
    size_t k = m->n - m->pos < (size_t)size ? m->n - m->pos : (size_t)size;
    memcpy(buf, m->b + m->pos, k);
    m->pos += k;
    return (int)k;
}

static int64_t io_seek(void *u, int64_t off, int whence) {
    membuf *m = u;
    if (whence & AVSEEK_SIZE) return (int64_t)m->n;
    whence &= ~AVSEEK_FORCE;
    int64_t base = whence == SEEK_SET   ? 0
                   : whence == SEEK_CUR ? (int64_t)m->pos
                   : whence == SEEK_END ? (int64_t)m->n
                                        : -1;
    if (base < 0 || (off > 0 && base > INT64_MAX - off) || base + off < 0 ||
        base + off > (int64_t)m->n)
        return AVERROR(EINVAL);
    m->pos = (size_t)(base + off);
    return (int64_t)m->pos;
}

static int refuse_open(struct AVFormatContext *s, AVIOContext **pb, const char *url, int flags,
                       AVDictionary **options) {
    return AVERROR(EPERM);
}

/* FFmpeg's log: warnings and errors go to pagoda's debug log; the calling
 * thread's last error line is kept for the error message. */
static _Thread_local char g_last_line[200];
static pthread_once_t g_log_once = PTHREAD_ONCE_INIT;

static void ff_log(void *avcl, int level, const char *fmt, va_list vl) {
    if (level > AV_LOG_WARNING) return;
    char line[256];
    int prefix = 0; /* no "[mov,mp4,... @ 0x55...]": messages reach API clients */
    av_log_format_line2(avcl, level, fmt, vl, line, sizeof line, &prefix);
    size_t len = strlen(line);
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
        line[--len] = 0;
    if (level <= AV_LOG_ERROR)
        snprintf(g_last_line, sizeof g_last_line, "%.*s", (int)sizeof g_last_line - 1, line);
    PG_DEBUG("ffmpeg: %s", line);
}

static void log_init(void) {
    av_log_set_callback(ff_log);
}

static void describe(int err, char *dst, size_t cap) {
    char e[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(err, e, sizeof e);
    if (g_last_line[0])
        snprintf(dst, cap, "%s (%s)", e, g_last_line);
    else
        snprintf(dst, cap, "%s", e);
}

/* The container's common name for messages: FFmpeg's demuxer names list
 * aliases ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm"). */
static void container_name(const AVInputFormat *f, char *dst, size_t cap) {
    if (strncmp(f->name, "mov,", 4) == 0)
        snprintf(dst, cap, "mp4");
    else if (strcmp(f->name, "matroska,webm") == 0)
        snprintf(dst, cap, "webm/matroska");
    else
        snprintf(dst, cap, "%.*s", (int)strcspn(f->name, ","), f->name);
}

static int frame_channels(const AVFrame *fr) {
#if LIBAVUTIL_VERSION_INT >= AV_VERSION_INT(57, 24, 100)
    return fr->ch_layout.nb_channels;
#else
    return fr->channels;
#endif
}

/* Sample k of one plane as a double in [-1, 1) (memcpy: the plane is bytes). */
static inline double sample_at(const uint8_t *p, size_t k, enum AVSampleFormat f) {
    switch (f) {
    case AV_SAMPLE_FMT_U8:
        return ((int)p[k] - 128) / 128.0;
    case AV_SAMPLE_FMT_S16: {
        int16_t v;
        memcpy(&v, p + 2 * k, sizeof v);
        return v / 32768.0;
    }
    case AV_SAMPLE_FMT_S32: {
        int32_t v;
        memcpy(&v, p + 4 * k, sizeof v);
        return v / 2147483648.0;
    }
    case AV_SAMPLE_FMT_S64: {
        int64_t v;
        memcpy(&v, p + 8 * k, sizeof v);
        return (double)v / 9223372036854775808.0;
    }
    case AV_SAMPLE_FMT_FLT: {
        float v;
        memcpy(&v, p + 4 * k, sizeof v);
        return v;
    }
    default: { /* AV_SAMPLE_FMT_DBL, checked by the caller */
        double v;
        memcpy(&v, p + 8 * k, sizeof v);
        return v;
    }
    }
}

/* One decoded frame, any sample format, averaged into mono. */
static pagoda_status push_frame(pg_audio_sink *s, const AVFrame *fr) {
    const int ch = frame_channels(fr), n = fr->nb_samples;
    pagoda_status st = pg_audio_sink_start(s, fr->sample_rate, ch);
    if (st != PAGODA_OK || n <= 0) return st;
    const bool planar = av_sample_fmt_is_planar(fr->format);
    const enum AVSampleFormat f = av_get_packed_sample_fmt(fr->format);
    if (f != AV_SAMPLE_FMT_U8 && f != AV_SAMPLE_FMT_S16 && f != AV_SAMPLE_FMT_S32 &&
        f != AV_SAMPLE_FMT_S64 && f != AV_SAMPLE_FMT_FLT && f != AV_SAMPLE_FMT_DBL)
        return pg_error(PAGODA_ERR_UNSUPPORTED, "%s: FFmpeg sample format %s", s->name,
                        av_get_sample_fmt_name(fr->format));
    float *d = NULL;
    if ((st = pg_audio_sink_reserve(s, n, &d)) != PAGODA_OK || !d) return st;
    const double inv = 1.0 / ch;
    for (int i = 0; i < n; i++) {
        double acc = 0.0;
        for (int c = 0; c < ch; c++) {
            const uint8_t *p = fr->extended_data[planar ? c : 0];
            acc += sample_at(p, planar ? (size_t)i : (size_t)i * (size_t)ch + (size_t)c, f);
        }
        d[i] = (float)(acc * inv);
    }
    pg_audio_sink_commit(s, n);
    return PAGODA_OK;
}

/* Receive every frame the decoder has ready; counts frames that decoded and
 * decoding errors. */
static pagoda_status drain(AVCodecContext *cc, AVFrame *fr, pg_audio_sink *s, int64_t *good,
                           int *errors) {
    for (;;) {
        int r = avcodec_receive_frame(cc, fr);
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return PAGODA_OK;
        if (r < 0) {
            (*errors)++;
            return PAGODA_OK;
        }
        pagoda_status st = push_frame(s, fr);
        av_frame_unref(fr);
        if (st != PAGODA_OK) return st;
        (*good)++;
    }
}

static char g_version[96];
static pthread_once_t g_version_once = PTHREAD_ONCE_INIT;

static void version_init(void) {
    unsigned f = avformat_version(), c = avcodec_version();
    snprintf(g_version, sizeof g_version, "libavformat %u.%u.%u, libavcodec %u.%u.%u", f >> 16,
             (f >> 8) & 255, f & 255, c >> 16, (c >> 8) & 255, c & 255);
}

const char *pg_audio_ffmpeg_version(void) {
    pthread_once(&g_version_once, version_init);
    return g_version;
}

pagoda_status pg_audio_decode_ffmpeg(const uint8_t *bytes, size_t n, pg_audio_sink *s,
                                     pg_audio_try *t) {
    pthread_once(&g_log_once, log_init);
    g_last_line[0] = 0;
    membuf m = {bytes, n, 0};
    pagoda_status st = PAGODA_OK;
    AVFormatContext *fmt = avformat_alloc_context();
    uint8_t *iobuf = av_malloc(IO_BUFFER);
    AVIOContext *pb =
        iobuf ? avio_alloc_context(iobuf, IO_BUFFER, 0, &m, io_read, NULL, io_seek) : NULL;
    AVCodecContext *cc = NULL;
    AVPacket *pkt = NULL;
    AVFrame *fr = NULL;
    if (!fmt || !pb) {
        if (!pb) av_free(iobuf);
        st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->name);
        t->recognised = true; /* final */
        goto done;
    }
    fmt->pb = pb;
    fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    fmt->io_open = refuse_open;
    AVDictionary *opts = NULL;
    av_dict_set(&opts, "format_whitelist", FORMAT_WHITELIST, 0);
    int r = avformat_open_input(&fmt, "", NULL, &opts); /* frees fmt on failure */
    av_dict_free(&opts);
    if (r < 0) {
        describe(r, t->why, sizeof t->why);
        st = PAGODA_ERR_FORMAT;
        goto done;
    }
    t->recognised = true;
    char cname[32];
    container_name(fmt->iformat, cname, sizeof cname);
    if ((r = avformat_find_stream_info(fmt, NULL)) < 0) {
        char why[256];
        describe(r, why, sizeof why);
        st = pg_error(PAGODA_ERR_FORMAT, "%s: corrupt %s file: %s", s->name, cname, why);
        goto done;
    }
    const AVCodec *dec = NULL;
    const int si = av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, &dec, 0);
    if (si == AVERROR_DECODER_NOT_FOUND || (si >= 0 && !dec)) {
        int idx = si >= 0 ? si : av_find_best_stream(fmt, AVMEDIA_TYPE_AUDIO, -1, -1, NULL, 0);
        const char *codec =
            idx >= 0 ? avcodec_get_name(fmt->streams[idx]->codecpar->codec_id) : "?";
        st = pg_error(PAGODA_ERR_UNSUPPORTED,
                      "%s: no decoder for the %s audio codec in this %s file", s->name, codec,
                      cname);
        goto done;
    }
    if (si < 0) {
        st = pg_error(PAGODA_ERR_FORMAT, "%s: the %s file has no audio stream", s->name, cname);
        goto done;
    }
    for (unsigned i = 0; i < fmt->nb_streams; i++)
        if ((int)i != si) fmt->streams[i]->discard = AVDISCARD_ALL;
    snprintf(t->format, sizeof t->format, "%s %s/ffmpeg", cname, dec->name);
    cc = avcodec_alloc_context3(dec);
    pkt = av_packet_alloc();
    fr = av_frame_alloc();
    if (!cc || !pkt || !fr) {
        st = pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", s->name);
        goto done;
    }
    if ((r = avcodec_parameters_to_context(cc, fmt->streams[si]->codecpar)) < 0 ||
        (cc->thread_count = 1, cc->pkt_timebase = fmt->streams[si]->time_base,
         r = avcodec_open2(cc, dec, NULL)) < 0) {
        char why[256];
        describe(r, why, sizeof why);
        st = pg_error(PAGODA_ERR_FORMAT, "%s: cannot decode the %s stream: %s", s->name, dec->name,
                      why);
        goto done;
    }
    int64_t good = 0;
    int errors = 0;
    while ((r = av_read_frame(fmt, pkt)) >= 0) {
        if (pkt->stream_index == si) {
            int sr = avcodec_send_packet(cc, pkt);
            if (sr < 0 && sr != AVERROR(EAGAIN)) errors++;
            st = drain(cc, fr, s, &good, &errors);
        }
        av_packet_unref(pkt);
        if (st != PAGODA_OK) goto done;
    }
    const int read_err = r == AVERROR_EOF ? 0 : r;
    avcodec_send_packet(cc, NULL); /* flush */
    if ((st = drain(cc, fr, s, &good, &errors)) != PAGODA_OK) goto done;
    if (good == 0 && (errors > 0 || read_err)) {
        char why[256];
        describe(read_err ? read_err : AVERROR_INVALIDDATA, why, sizeof why);
        st = pg_error(PAGODA_ERR_FORMAT, "%s: corrupt %s audio: no frame decodes: %s", s->name,
                      dec->name, why);
        goto done;
    }
    if (read_err) {
        char why[256];
        describe(read_err, why, sizeof why);
        st = pg_error(PAGODA_ERR_FORMAT, "%s: truncated or corrupt %s file after %.3f s: %s",
                      s->name, cname, s->rate ? (double)s->n / s->rate : 0.0, why);
        goto done;
    }
    /* MP4/MOV tracks declare their exact duration (the sample tables and the
     * edit list); a file cut inside its media data ends early without an
     * error from the demuxer. Other containers either have no per-track
     * duration or an estimate (MP3 bitrate, WebM segment). */
    const AVStream *as = fmt->streams[si];
    if (strcmp(cname, "mp4") == 0 && as->duration > 0 && as->duration != AV_NOPTS_VALUE &&
        s->rate > 0) {
        const double declared = (double)as->duration * av_q2d(as->time_base);
        const double got = (double)s->n / s->rate;
        if (got < declared - 0.1) {
            st = pg_error(PAGODA_ERR_FORMAT,
                          "%s: truncated %s file: the audio track declares %.3f s, only %.3f s "
                          "decode",
                          s->name, cname, declared, got);
            goto done;
        }
    }
done:
    av_frame_free(&fr);
    av_packet_free(&pkt);
    avcodec_free_context(&cc);
    avformat_close_input(&fmt); /* NULL-safe; leaves the custom pb alone */
    if (pb) {
        av_freep(&pb->buffer);
        avio_context_free(&pb);
    }
    return st;
}
