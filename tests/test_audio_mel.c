/* Whisper log-mel front end (src/audio/mel.c, fft.c) against openai/whisper:
 *   - the Slaney filterbank computed in C vs whisper's mel_filters.npz
 *     (mel_80, mel_128: librosa.filters.mel);
 *   - jfk.wav (int16 / 32768, read here without a decoder) unpadded vs
 *     whisper/jfk_log_mel_80.npy (80 x 1100), and transcribe-style (30 s of
 *     zeros appended, first 3000 frames) vs
 *     oracles/whisper-tiny-random/expected_mel.npy (80 x 3000), both within
 *     1e-4 max abs (the two references agree with each other to 2.3e-5);
 *   - the FFT vs a direct double-precision DFT, padding modes, threads,
 *     short/silent input and argument errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "npy.h"
#include "testutil.h"

#include "audio/audio.h"
#include "audio/fft.h"
#include "audio/mel.h"
#include "base/pool.h"

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        m = d > m ? d : m;
    }
    return m;
}

static float *load_jfk(int64_t *n) {
    int rate, ch;
    float *x = pg_test_wav_load_s16(pg_test_asset("whisper/jfk.wav"), n, &rate, &ch);
    assert_int_equal(rate, 16000);
    assert_int_equal(ch, 1);
    assert_int_equal(*n, 176000);
    return x;
}

static void test_filters_match_npz(void **state) {
    const char *dir = pg_test_tmpdir();
    const int sizes[] = {80, 128};
    for (int s = 0; s < 2; s++) {
        char member[32];
        snprintf(member, sizeof member, "mel_%d.npy", sizes[s]);
        pg_npy ref;
        pg_test_npy_load(pg_test_npz_extract(pg_test_asset("whisper/mel_filters.npz"), member, dir),
                         &ref);
        assert_int_equal(ref.ndim, 2);
        assert_int_equal(ref.shape[0], sizes[s]);
        assert_int_equal(ref.shape[1], PG_WHISPER_N_BINS);
        float *f = malloc((size_t)ref.count * sizeof(float));
        assert_non_null(f);
        assert_int_equal(pg_mel_filters(sizes[s], f), PAGODA_OK);
        double d = max_abs_diff(f, ref.data, (size_t)ref.count), peak = 0;
        int64_t differ = 0;
        for (int64_t i = 0; i < ref.count; i++) {
            differ += f[i] != ref.data[i];
            peak = fmax(peak, ref.data[i]);
        }
        printf("mel_%d: max abs diff %.3g (peak weight %.4g), %lld of %lld values not bit-equal\n",
               sizes[s], d, peak, (long long)differ, (long long)ref.count);
        assert_true(d <= 1e-9);
        free(f);
        pg_test_npy_free(&ref);
    }
    float f[PG_WHISPER_N_BINS];
    assert_int_equal(pg_mel_filters(0, f), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_mel_filters(PG_MEL_MAX_MELS + 1, f), PAGODA_ERR_INVALID_ARG);
}

static void test_jfk_unpadded(void **state) {
    int64_t n;
    float *x = load_jfk(&n);
    pg_npy ref;
    pg_test_npy_load(pg_test_asset("whisper/jfk_log_mel_80.npy"), &ref);
    assert_int_equal(ref.shape[0], 80);
    assert_int_equal(ref.shape[1], 1100);
    float *mel;
    int64_t frames;
    assert_int_equal(pg_log_mel(x, n, 80, PG_MEL_PAD_NONE, NULL, &mel, &frames), PAGODA_OK);
    assert_int_equal(frames, 1100);
    double d = max_abs_diff(mel, ref.data, (size_t)ref.count);
    printf("jfk unpadded vs jfk_log_mel_80.npy: max abs diff %.3g\n", d);
    assert_true(d <= 1e-4);
    free(mel);
    pg_test_npy_free(&ref);
    free(x);
}

static void test_jfk_transcribe_style(void **state) {
    int64_t n;
    float *x = load_jfk(&n);
    pg_npy ref;
    pg_test_npy_load(pg_test_asset("oracles/whisper-tiny-random/expected_mel.npy"), &ref);
    assert_int_equal(ref.shape[0], 80);
    assert_int_equal(ref.shape[1], 3000);

    /* transcribe.py: log_mel_spectrogram(audio, padding=N_SAMPLES), then the
     * first window pad_or_trim(mel[:, 0:3000], 3000) */
    float *mel, *win = malloc(80 * 3000 * sizeof(float));
    assert_non_null(win);
    int64_t frames;
    assert_int_equal(pg_log_mel(x, n, 80, PG_MEL_PAD_APPEND_30S, NULL, &mel, &frames), PAGODA_OK);
    assert_int_equal(frames, 1100 + 3000);
    pg_mel_window(mel, 80, frames, 0, win);
    double d = max_abs_diff(win, ref.data, (size_t)ref.count);
    printf("jfk transcribe-style vs expected_mel.npy: max abs diff %.3g\n", d);
    assert_true(d <= 1e-4);

    /* README style pad_or_trim(audio) gives the same 3000 frames, bit for bit */
    float *mel30;
    int64_t f30;
    assert_int_equal(pg_log_mel(x, n, 80, PG_MEL_PAD_30S, NULL, &mel30, &f30), PAGODA_OK);
    assert_int_equal(f30, 3000);
    assert_memory_equal(mel30, win, 80 * 3000 * sizeof(float));
    /* ... and so does padding the audio by hand */
    float *padded = malloc(PG_WHISPER_N_SAMPLES * sizeof(float)), *melp;
    assert_non_null(padded);
    pg_audio_pad_or_trim(x, n, PG_WHISPER_N_SAMPLES, padded);
    int64_t fp;
    assert_int_equal(
        pg_log_mel(padded, PG_WHISPER_N_SAMPLES, 80, PG_MEL_PAD_NONE, NULL, &melp, &fp), PAGODA_OK);
    assert_int_equal(fp, 3000);
    assert_memory_equal(melp, win, 80 * 3000 * sizeof(float));

    /* the window past the end pads with zeros (whisper pads the log-mel with 0) */
    pg_mel_window(mel, 80, frames, frames - 10, win);
    for (int m = 0; m < 80; m++) {
        assert_memory_equal(win + m * 3000, mel + (size_t)m * frames + frames - 10,
                            10 * sizeof(float));
        for (int t = 10; t < 3000; t++)
            assert_true(win[m * 3000 + t] == 0.0f);
    }
    free(melp);
    free(padded);
    free(mel30);
    free(mel);
    free(win);
    pg_test_npy_free(&ref);
    free(x);
}

/* 128 bins (large-v3): no reference array here; the filterbank is checked
 * against the npz above, so check the shape and the clamp invariants. */
static void test_jfk_128(void **state) {
    int64_t n;
    float *x = load_jfk(&n);
    float *mel;
    int64_t frames;
    assert_int_equal(pg_log_mel(x, n, 128, PG_MEL_PAD_30S, NULL, &mel, &frames), PAGODA_OK);
    assert_int_equal(frames, 3000);
    float lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < 128 * 3000; i++) {
        lo = fminf(lo, mel[i]);
        hi = fmaxf(hi, mel[i]);
    }
    /* values lie in [max - 2, max] after max(x, max - 8) and (x + 4) / 4 */
    assert_true(hi - lo <= 2.0f + 1e-6f);
    assert_true(hi - lo >= 1.9f);
    free(mel);
    free(x);
}

static void test_threads_same_bits(void **state) {
    int64_t n;
    float *x = load_jfk(&n);
    pg_pool_options o = pg_pool_options_default();
    o.n_threads = 3;
    o.pin = 0;
    pg_pool *pool;
    assert_int_equal(pg_pool_create(&o, &pool), PAGODA_OK);
    float *a, *b;
    int64_t fa, fb;
    assert_int_equal(pg_log_mel(x, n, 80, PG_MEL_PAD_APPEND_30S, NULL, &a, &fa), PAGODA_OK);
    assert_int_equal(pg_log_mel(x, n, 80, PG_MEL_PAD_APPEND_30S, pool, &b, &fb), PAGODA_OK);
    assert_int_equal(fa, fb);
    assert_memory_equal(a, b, (size_t)fa * 80 * sizeof(float));
    free(a);
    free(b);
    pg_pool_free(pool);
    free(x);
}

static void test_fft_vs_dft(void **state) {
    const int sizes[] = {2, 4, 6, 10, 14, 22, 50, 400, 512, 2 * 3 * 5 * 7, 2 * 61, 1024};
    srand(7);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int n = sizes[s], h = n / 2;
        pg_fft_plan *p;
        assert_int_equal(pg_fft_plan_create(n, &p), PAGODA_OK);
        double *x = malloc(n * sizeof(double)), *re = malloc((h + 1) * sizeof(double));
        double *im = malloc((h + 1) * sizeof(double)), *c = malloc(n * sizeof(double));
        double *sn = malloc(n * sizeof(double));
        double *scratch = malloc(pg_fft_scratch_len(p) * sizeof(double));
        assert_true(x && re && im && c && sn && scratch);
        double scale = 0;
        for (int i = 0; i < n; i++) {
            x[i] = (double)rand() / RAND_MAX - 0.5;
            scale += fabs(x[i]);
            c[i] = cos(-2.0 * M_PI * i / n);
            sn[i] = sin(-2.0 * M_PI * i / n);
        }
        pg_fft_real(p, x, re, im, scratch);
        /* direct DFT, angles reduced exactly (k t mod n) */
        double err = 0;
        for (int k = 0; k <= h; k++) {
            double r = 0, q = 0;
            for (int t = 0; t < n; t++) {
                const int e = (int)((int64_t)k * t % n);
                r += x[t] * c[e];
                q += x[t] * sn[e];
            }
            err = fmax(err, fabs(re[k] - r) + fabs(im[k] - q));
        }
        assert_true(err <= 1e-13 * scale);
        free(x);
        free(re);
        free(im);
        free(c);
        free(sn);
        free(scratch);
        pg_fft_plan_free(p);
    }
    pg_fft_plan *p;
    assert_int_equal(pg_fft_plan_create(401, &p), PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_fft_plan_create(2 * 67, &p), PAGODA_ERR_INVALID_ARG); /* prime 67 > 64 */
    assert_int_equal(pg_fft_plan_create(0, &p), PAGODA_ERR_INVALID_ARG);
}

static void test_short_and_silent(void **state) {
    float *mel;
    int64_t frames;
    /* 30 s of nothing: log10(1e-10) = -10 everywhere -> (-10 + 4) / 4 = -1.5 */
    assert_int_equal(pg_log_mel(NULL, 0, 80, PG_MEL_PAD_30S, NULL, &mel, &frames), PAGODA_OK);
    assert_int_equal(frames, 3000);
    for (size_t i = 0; i < 80 * 3000; i++)
        assert_true(mel[i] == -1.5f);
    free(mel);
    assert_int_equal(pg_log_mel(NULL, 0, 80, PG_MEL_PAD_APPEND_30S, NULL, &mel, &frames),
                     PAGODA_OK);
    assert_int_equal(frames, 3000);
    free(mel);

    /* reflect padding needs more than 200 samples */
    float x[1601];
    for (int i = 0; i < 1601; i++)
        x[i] = 0.1f * sinf(0.05f * i);
    assert_int_equal(pg_log_mel(x, 200, 80, PG_MEL_PAD_NONE, NULL, &mel, &frames),
                     PAGODA_ERR_INVALID_ARG);
    assert_null(mel);
    assert_non_null(strstr(pg_last_error(), "too short"));
    assert_int_equal(pg_log_mel(x, 201, 80, PG_MEL_PAD_NONE, NULL, &mel, &frames), PAGODA_OK);
    assert_int_equal(frames, 1);
    free(mel);
    /* 0.1 s: 10 frames; 1601 samples still 10 (the last STFT frame is dropped) */
    assert_int_equal(pg_log_mel(x, 1600, 80, PG_MEL_PAD_NONE, NULL, &mel, &frames), PAGODA_OK);
    assert_int_equal(frames, 10);
    free(mel);
    assert_int_equal(pg_log_mel(x, 1601, 80, PG_MEL_PAD_NONE, NULL, &mel, &frames), PAGODA_OK);
    assert_int_equal(frames, 10);
    for (int i = 0; i < 80 * 10; i++)
        assert_true(isfinite(mel[i]));
    free(mel);

    assert_int_equal(pg_log_mel(x, 1600, 0, PG_MEL_PAD_NONE, NULL, &mel, &frames),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_log_mel(x, -1, 80, PG_MEL_PAD_NONE, NULL, &mel, &frames),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_log_mel(NULL, 10, 80, PG_MEL_PAD_30S, NULL, &mel, &frames),
                     PAGODA_ERR_INVALID_ARG);
    assert_int_equal(pg_log_mel(x, 1600, 80, (pg_mel_pad)7, NULL, &mel, &frames),
                     PAGODA_ERR_INVALID_ARG);
}

/* Audio longer than 30 s: PAD_30S keeps the first 30 s only (README style),
 * APPEND_30S covers everything; both agree on the first window when the
 * loudest part is inside it. */
static void test_long_audio(void **state) {
    const int64_t n = 16000 * 75 + 123; /* 75 s */
    float *x = malloc((size_t)n * sizeof(float));
    assert_non_null(x);
    for (int64_t i = 0; i < n; i++)
        x[i] = (i < 16000 * 10 ? 0.5f : 0.1f) *
               sinf((float)(i % 16000) * 0.3f + 1e-5f * (float)i * (float)(i % 977));
    pg_pool *pool = pg_pool_default();
    float *all, *first;
    int64_t fa, ff;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(pg_log_mel(x, n, 80, PG_MEL_PAD_APPEND_30S, pool, &all, &fa), PAGODA_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("75 s log-mel (%d threads): %.1f ms\n", pg_pool_size(pool),
           (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    assert_int_equal(fa, n / 160 + 3000);
    assert_int_equal(pg_log_mel(x, n, 80, PG_MEL_PAD_30S, pool, &first, &ff), PAGODA_OK);
    assert_int_equal(ff, 3000);
    /* frame 2999 sees samples past 30 s in the full signal but zeros / the
     * reflection in the trimmed one: compare the frames before it */
    for (int m = 0; m < 80; m++)
        assert_memory_equal(first + (size_t)m * 3000, all + (size_t)m * fa, 2998 * sizeof(float));
    free(all);
    free(first);
    free(x);
}

/* Built without the decoding libraries, pg_audio_decode says so instead of
 * failing obscurely (test_audio_decode covers the decoders themselves). */
static void test_decode_availability(void **state) {
    const char *b = pg_audio_backends();
    printf("audio decoding backends: %s\n", b ? b : "(none: built without them)");
    pg_audio a;
    const char riff[] = "RIFF";
    assert_int_equal(pg_audio_decode(riff, 0, "x.wav", 60.0, &a), PAGODA_ERR_INVALID_ARG);
    if (!b) {
        assert_int_equal(pg_audio_decode(riff, 4, "x.wav", 60.0, &a), PAGODA_ERR_UNSUPPORTED);
        assert_non_null(strstr(pg_last_error(), "built without audio decoding"));
    } else {
        assert_int_equal(pg_audio_decode(riff, 4, "x.wav", 60.0, &a), PAGODA_ERR_FORMAT);
    }
    assert_null(a.samples);
    pg_audio_free(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filters_match_npz),    cmocka_unit_test(test_jfk_unpadded),
        cmocka_unit_test(test_jfk_transcribe_style), cmocka_unit_test(test_jfk_128),
        cmocka_unit_test(test_threads_same_bits),    cmocka_unit_test(test_fft_vs_dft),
        cmocka_unit_test(test_short_and_silent),     cmocka_unit_test(test_long_audio),
        cmocka_unit_test(test_decode_availability),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pg_pool_default_shutdown();
    return rc;
}
