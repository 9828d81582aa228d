/* libFuzzer target: an uploaded audio file (the `file` part of
 * /v1/audio/transcriptions), decoded by pg_audio_decode through libsndfile
 * or FFmpeg and resampled to 16 kHz mono by libsoxr. The first input byte
 * picks the upload's file name (its extension breaks format ties), the rest
 * is the file. Only pagoda's code is instrumented: the libraries come from
 * Debian, so this target looks for mistakes at their boundary (lengths,
 * channel layouts, rates, sample counts) rather than inside them. Built
 * only with the decoding libraries (PAGODA_HAVE_AUDIO_DECODE). Seeds: short
 * cuts of the asset WAVs, converted by ffmpeg to other formats
 * (scripts/fuzz.sh). */
#include <stdlib.h>

#include "audio/audio.h"
#include "fz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const names[] = {"a.wav", "a.mp3",  "a.flac", "a.ogg", "a.webm",
                                        "a.m4a", "a.opus", "a",      NULL};
    if (size < 1) return 0;
    const char *name = names[data[0] % (sizeof names / sizeof *names)];
    pg_audio a = {0};
    /* 60 s: the limit keeps a tiny input that declares hours of audio from
     * spending the whole run on one decode */
    if (pg_audio_decode(data + 1, size - 1, name, 60.0, &a) == PAGODA_OK) pg_audio_free(&a);
    return 0;
}
