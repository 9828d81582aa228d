/* Test helpers for reference arrays and audio: a minimal NumPy .npy reader
 * (format versions 1-3, little-endian float32 '<f4', C order: what the shared
 * oracles hold), .npz members extracted with python3's zipfile, and a 16-bit
 * PCM WAV reader (so the log-mel tests need no decoding library). */
#ifndef PAGODA_TESTS_NPY_H
#define PAGODA_TESTS_NPY_H

#include <stdint.h>

#define PG_NPY_MAX_DIMS 8

typedef struct pg_npy {
    float *data; /* [count], malloc'ed */
    int ndim;
    int64_t shape[PG_NPY_MAX_DIMS];
    int64_t count;
} pg_npy;

/* Load a float32 .npy file; fails the test on any error (bad magic, other
 * dtype, Fortran order, short data). */
void pg_test_npy_load(const char *path, pg_npy *out);
void pg_test_npy_free(pg_npy *a);

/* Extract `member` (e.g. "mel_80.npy") of the .npz file `npz` into `dir`
 * (python3 zipfile: savez_compressed uses deflate) and return its path
 * (static buffer). Fails the test if python3 or the member is missing. */
const char *pg_test_npz_extract(const char *npz, const char *member, const char *dir);

/* Read a canonical RIFF/WAVE file of 16-bit integer PCM (any channel count;
 * chunks other than fmt and data skipped): returns malloc'ed interleaved
 * samples as int16 / 32768 (whisper's scaling); *frames, *rate, *channels set.
 * Fails the test on anything else. */
float *pg_test_wav_load_s16(const char *path, int64_t *frames, int *rate, int *channels);

/* Write mono or interleaved float samples in [-1, 1] as a 16-bit PCM WAV
 * (rounded, clipped). */
void pg_test_wav_write_s16(const char *path, const float *x, int64_t frames, int rate,
                           int channels);

#endif
