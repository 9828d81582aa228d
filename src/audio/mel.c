/* Whisper log-mel spectrogram. See mel.h for the steps and the reference. */
#include "audio/mel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "audio/fft.h"

/* ---- librosa's Slaney mel scale (librosa.core.convert.hz_to_mel /
 * mel_to_hz with htk=False): linear below 1 kHz, logarithmic above. */
#define SLANEY_F_SP (200.0 / 3.0)
#define SLANEY_MIN_LOG_HZ 1000.0

static double slaney_min_log_mel(void) {
    return (SLANEY_MIN_LOG_HZ - 0.0) / SLANEY_F_SP;
}
static double slaney_logstep(void) {
    return log(6.4) / 27.0;
}

static double hz_to_mel(double f) {
    if (f >= SLANEY_MIN_LOG_HZ)
        return slaney_min_log_mel() + log(f / SLANEY_MIN_LOG_HZ) / slaney_logstep();
    return (f - 0.0) / SLANEY_F_SP;
}

static double mel_to_hz(double m) {
    if (m >= slaney_min_log_mel())
        return SLANEY_MIN_LOG_HZ * exp(slaney_logstep() * (m - slaney_min_log_mel()));
    return 0.0 + SLANEY_F_SP * m;
}

pagoda_status pg_mel_filters(int n_mels, float *out) {
    if (n_mels < 1 || n_mels > PG_MEL_MAX_MELS)
        return pg_error(PAGODA_ERR_INVALID_ARG, "mel filters: n_mels %d outside [1, %d]", n_mels,
                        PG_MEL_MAX_MELS);
    const int n_bins = PG_WHISPER_N_BINS;
    const double sr = PG_WHISPER_SAMPLE_RATE;
    /* mel_frequencies(n_mels + 2, fmin=0, fmax=sr/2): np.linspace in mel
     * (start + i * step, the last point exactly the end), back to Hz. */
    double mel_f[PG_MEL_MAX_MELS + 2] = {0};
    const int n_pts = n_mels + 2;
    const double min_mel = hz_to_mel(0.0), max_mel = hz_to_mel(sr / 2.0);
    const double step = (max_mel - min_mel) / (double)(n_pts - 1);
    for (int i = 0; i < n_pts; i++) {
        double m = i == n_pts - 1 ? max_mel : (double)i * step + min_mel;
        mel_f[i] = mel_to_hz(m);
    }
    for (int i = 0; i < n_mels; i++) {
        const double fdiff_lo = mel_f[i + 1] - mel_f[i], fdiff_hi = mel_f[i + 2] - mel_f[i + 1];
        const double enorm = 2.0 / (mel_f[i + 2] - mel_f[i]);
        for (int k = 0; k < n_bins; k++) {
            const double fft_f = (double)k * (sr / PG_WHISPER_N_FFT); /* linspace(0, sr/2, 201) */
            const double lower = -(mel_f[i] - fft_f) / fdiff_lo;
            const double upper = (mel_f[i + 2] - fft_f) / fdiff_hi;
            double w = fmin(lower, upper);
            w = w > 0.0 ? w : 0.0;
            /* librosa stores the triangle in a float32 array, then scales it
             * in place by the float64 norm (rounded to float32 again) */
            out[(size_t)i * n_bins + k] = (float)((double)(float)w * enorm);
        }
    }
    return PAGODA_OK;
}

/* ---- the spectrogram */

typedef struct mel_job {
    const float *pcm;
    int64_t n_in; /* samples of pcm used (after trimming) */
    int64_t len;  /* length of the (padded) signal the STFT sees */
    int64_t n_frames;
    int n_mels;
    const pg_fft_plan *fft;
    const float *filters; /* [n_mels][201] */
    const int *lo, *hi;   /* non-zero bin range of each filter */
    const double *window; /* [400] */
    float *out;           /* [n_mels][n_frames] log10 values */
    float *thread_max;    /* one per thread */
} mel_job;

/* Sample j of the padded signal, reflected at both ends (torch.stft
 * center=True, pad_mode="reflect"); needs len > n_fft / 2. */
static inline double sample_at(const mel_job *j, int64_t i) {
    if (i < 0) i = -i;
    if (i >= j->len) i = 2 * (j->len - 1) - i;
    return i < j->n_in ? (double)j->pcm[i] : 0.0;
}

static void mel_frames(void *ctx, size_t begin, size_t end, int tid) {
    const mel_job *j = ctx;
    double x[PG_WHISPER_N_FFT], re[PG_WHISPER_N_BINS], im[PG_WHISPER_N_BINS];
    double power[PG_WHISPER_N_BINS], scratch[2 * PG_WHISPER_N_FFT];
    float vmax = -INFINITY;
    for (size_t t = begin; t < end; t++) {
        const int64_t start = (int64_t)t * PG_WHISPER_HOP - PG_WHISPER_N_FFT / 2;
        if (start >= 0 && start + PG_WHISPER_N_FFT <= j->n_in) {
            const float *src = j->pcm + start;
            for (int i = 0; i < PG_WHISPER_N_FFT; i++)
                x[i] = (double)src[i] * j->window[i];
        } else {
            for (int i = 0; i < PG_WHISPER_N_FFT; i++)
                x[i] = sample_at(j, start + i) * j->window[i];
        }
        pg_fft_real(j->fft, x, re, im, scratch);
        for (int k = 0; k < PG_WHISPER_N_BINS; k++)
            power[k] = re[k] * re[k] + im[k] * im[k];
        for (int m = 0; m < j->n_mels; m++) {
            const float *f = j->filters + (size_t)m * PG_WHISPER_N_BINS;
            double acc = 0.0;
            for (int k = j->lo[m]; k < j->hi[m]; k++)
                acc += (double)f[k] * power[k];
            float v = (float)log10(acc > 1e-10 ? acc : 1e-10);
            j->out[(size_t)m * (size_t)j->n_frames + t] = v;
            vmax = v > vmax ? v : vmax;
        }
    }
    j->thread_max[tid] = vmax;
}

pagoda_status pg_log_mel(const float *pcm, int64_t n_samples, int n_mels, pg_mel_pad pad,
                         pg_pool *pool, float **out, int64_t *n_frames) {
    *out = NULL;
    *n_frames = 0;
    if (n_mels < 1 || n_mels > PG_MEL_MAX_MELS)
        return pg_error(PAGODA_ERR_INVALID_ARG, "log-mel: n_mels %d outside [1, %d]", n_mels,
                        PG_MEL_MAX_MELS);
    if (n_samples < 0 || (!pcm && n_samples > 0))
        return pg_error(PAGODA_ERR_INVALID_ARG, "log-mel: bad input (%lld samples, pcm %s)",
                        (long long)n_samples, pcm ? "set" : "NULL");
    mel_job j = {.pcm = pcm, .n_mels = n_mels};
    switch (pad) {
    case PG_MEL_PAD_NONE:
        j.len = n_samples;
        break;
    case PG_MEL_PAD_30S:
        j.len = PG_WHISPER_N_SAMPLES;
        break;
    case PG_MEL_PAD_APPEND_30S:
        if (n_samples > INT64_MAX / 2)
            return pg_error(PAGODA_ERR_INVALID_ARG, "log-mel: %lld samples is too many",
                            (long long)n_samples);
        j.len = n_samples + PG_WHISPER_N_SAMPLES;
        break;
    default:
        return pg_error(PAGODA_ERR_INVALID_ARG, "log-mel: unknown padding mode %d", (int)pad);
    }
    if (j.len <= PG_WHISPER_N_FFT / 2)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "log-mel: %lld samples is too short for the STFT's reflect padding "
                        "(needs more than %d; pad to 30 s instead)",
                        (long long)n_samples, PG_WHISPER_N_FFT / 2);
    j.n_in = n_samples < j.len ? n_samples : j.len;
    j.n_frames = j.len / PG_WHISPER_HOP; /* 1 + len / hop STFT frames, the last dropped */
    if (j.n_frames > INT32_MAX)
        return pg_error(PAGODA_ERR_INVALID_ARG, "log-mel: %lld frames is too many",
                        (long long)j.n_frames);

    pagoda_status st = PAGODA_OK;
    pg_fft_plan *fft = NULL;
    const int nthreads = pool ? pg_pool_size(pool) : 1;
    float *filters = malloc((size_t)n_mels * PG_WHISPER_N_BINS * sizeof(float));
    int *lo = malloc((size_t)n_mels * 2 * sizeof(int));
    double *window = malloc(PG_WHISPER_N_FFT * sizeof(double));
    float *thread_max = malloc((size_t)nthreads * sizeof(float));
    float *res = malloc((size_t)n_mels * (size_t)j.n_frames * sizeof(float));
    if (!filters || !lo || !window || !thread_max || !res) {
        st = pg_error(PAGODA_ERR_NOMEM, "log-mel: out of memory for %d x %lld frames", n_mels,
                      (long long)j.n_frames);
        goto done;
    }
    if ((st = pg_mel_filters(n_mels, filters)) != PAGODA_OK) goto done;
    if ((st = pg_fft_plan_create(PG_WHISPER_N_FFT, &fft)) != PAGODA_OK) goto done;
    int *hi = lo + n_mels;
    for (int m = 0; m < n_mels; m++) {
        const float *f = filters + (size_t)m * PG_WHISPER_N_BINS;
        int a = 0, b = PG_WHISPER_N_BINS;
        while (a < b && f[a] == 0.0f)
            a++;
        while (b > a && f[b - 1] == 0.0f)
            b--;
        lo[m] = a;
        hi[m] = b;
    }
    /* torch.hann_window(400) (periodic) */
    for (int i = 0; i < PG_WHISPER_N_FFT; i++)
        window[i] = 0.5 - 0.5 * cos(2.0 * M_PI * (double)i / PG_WHISPER_N_FFT);
    for (int t = 0; t < nthreads; t++)
        thread_max[t] = -INFINITY;
    j.fft = fft;
    j.filters = filters;
    j.lo = lo;
    j.hi = hi;
    j.window = window;
    j.out = res;
    j.thread_max = thread_max;
    if (pool)
        pg_pool_parallel_for(pool, (size_t)j.n_frames, 64, mel_frames, &j);
    else
        mel_frames(&j, 0, (size_t)j.n_frames, 0);

    /* log_spec = max(log_spec, log_spec.max() - 8); (log_spec + 4) / 4 (float32, as torch) */
    float vmax = -INFINITY;
    for (int t = 0; t < nthreads; t++)
        vmax = thread_max[t] > vmax ? thread_max[t] : vmax;
    const float floor_v = vmax - 8.0f;
    const size_t total = (size_t)n_mels * (size_t)j.n_frames;
    for (size_t i = 0; i < total; i++) {
        float v = res[i] > floor_v ? res[i] : floor_v;
        res[i] = (v + 4.0f) / 4.0f;
    }
    *out = res;
    *n_frames = j.n_frames;
    res = NULL;
done:
    pg_fft_plan_free(fft);
    free(filters);
    free(lo);
    free(window);
    free(thread_max);
    free(res);
    return st;
}

void pg_mel_window(const float *mel, int n_mels, int64_t n_frames, int64_t start, float *dst) {
    int64_t avail = n_frames - start;
    if (avail < 0) avail = 0;
    if (avail > PG_WHISPER_N_FRAMES) avail = PG_WHISPER_N_FRAMES;
    for (int m = 0; m < n_mels; m++) {
        float *d = dst + (size_t)m * PG_WHISPER_N_FRAMES;
        if (avail > 0)
            memcpy(d, mel + (size_t)m * (size_t)n_frames + start, (size_t)avail * sizeof(float));
        memset(d + avail, 0, (size_t)(PG_WHISPER_N_FRAMES - avail) * sizeof(float));
    }
}

void pg_audio_pad_or_trim(const float *src, int64_t n, int64_t length, float *dst) {
    int64_t c = n < length ? n : length;
    if (c > 0) memcpy(dst, src, (size_t)c * sizeof(float));
    if (length > c) memset(dst + c, 0, (size_t)(length - c) * sizeof(float));
}
