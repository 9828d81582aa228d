/* Audio decoding for speech-to-text: any file OpenAI's transcription API
 * accepts (flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav, webm) from memory to
 * mono float32 PCM at 16 kHz, the input of the log-mel front end (mel.h).
 *
 * Backends (Debian libraries, found at configure time, see CMakeLists.txt):
 *   libsndfile (virtual I/O over the bytes): WAV/RF64/W64, AIFF, FLAC, CAF,
 *     AU and the other uncompressed/lossless formats it knows;
 *   FFmpeg libavformat + libavcodec (a custom AVIOContext over the bytes):
 *     MP3/MP2 (mp3, mpga), Ogg (Vorbis, Opus), MP4/M4A/MOV (AAC, ALAC, MP3),
 *     WebM/Matroska (Opus, Vorbis), MPEG program/transport streams (mpeg),
 *     ADTS AAC, and everything libsndfile refuses;
 *   libsoxr: resampling to 16 kHz (SOXR_HQ, 1 thread).
 * The container is sniffed from the first bytes (the filename is only a hint
 * used in messages and when the bytes say nothing): MPEG audio and Ogg go to
 * FFmpeg only (libsndfile's mpg123 prints to stderr and its Vorbis path leaks
 * on corrupt input); MP4 ("ftyp"), EBML (WebM/Matroska), MPEG-PS/TS, ADTS,
 * AMR, ASF go to FFmpeg first; everything else tries libsndfile first and
 * FFmpeg second.
 *
 * Conversion: samples are read as float (integer PCM scaled by 1 / 2^(bits-1),
 * so 16-bit WAV gives exactly int16 / 32768 like whisper's loader), channels
 * are averaged into one (a plain mean, as `ffmpeg -ac 1` does for stereo), then
 * resampled to 16 kHz when the file's rate differs. NaN/Inf samples (corrupt
 * float files) become 0.
 *
 * Built without the libraries (e.g. a cross build whose sysroot lacks them),
 * pg_audio_decode returns PAGODA_ERR_UNSUPPORTED and pg_audio_backends() NULL. */
#ifndef PAGODA_AUDIO_AUDIO_H
#define PAGODA_AUDIO_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define PG_AUDIO_SAMPLE_RATE 16000
/* A sensible max_seconds for servers: 3 hours (173 M samples, 690 MB). */
#define PG_AUDIO_DEFAULT_MAX_SECONDS (3.0 * 3600.0)

typedef struct pg_audio {
    float *samples;    /* [n_samples] mono, 16 kHz, nominally [-1, 1]; free with pg_audio_free */
    int64_t n_samples; /* >= 1 after a successful decode */
    int source_rate;   /* the file's sample rate, Hz */
    int source_channels;
    /* what decoded it: "<container>/libsndfile" ("wav/libsndfile") or
     * "<container> <decoder>/ffmpeg" ("mp4 aac/ffmpeg", "ogg vorbis/ffmpeg") */
    char format[48];
} pg_audio;

/* Decode `n` bytes of an audio file into *out (zeroed first).
 * filename_hint: the upload's name or NULL; prefixes every error message and
 * breaks ties when the bytes are ambiguous.
 * max_seconds > 0: longer audio is refused while decoding (memory stays
 * bounded by the limit, whatever the compression ratio).
 * Errors (message names the file and the problem):
 *   PAGODA_ERR_INVALID_ARG  empty input (n == 0), bytes NULL, max_seconds <= 0;
 *   PAGODA_ERR_FORMAT       not an audio file either backend recognises, a
 *                           corrupt stream no frame of which decodes, a file
 *                           truncated before its declared end (WAV data
 *                           chunk, FLAC sample count, MP4 track duration;
 *                           MP3, Ogg and WebM declare none, so a cut file
 *                           decodes to the part present), no audio stream,
 *                           zero samples (an empty but valid file);
 *   PAGODA_ERR_UNSUPPORTED  recognised container whose codec has no decoder,
 *                           sample rate changing mid-stream, or built without
 *                           decoding libraries;
 *   PAGODA_ERR_LIMIT        longer than max_seconds;
 *   PAGODA_ERR_NOMEM        allocation failed.
 * Thread-safe: concurrent calls share nothing. The first FFmpeg use installs
 * a process-wide av_log callback that sends FFmpeg's warnings to pagoda's debug
 * log (PAGODA_LOG=debug) instead of stderr. */
pagoda_status pg_audio_decode(const void *bytes, size_t n, const char *filename_hint,
                              double max_seconds, pg_audio *out);

/* Free the samples and zero *a. NULL and zeroed structs are fine. */
void pg_audio_free(pg_audio *a);

/* The decoding libraries and their versions, e.g. "libsndfile-1.2.0,
 * libavformat 59.27.100, libavcodec 59.37.100, libsoxr 0.1.3"; NULL when
 * pagoda was built without them. Static string. */
const char *pg_audio_backends(void);

#endif
