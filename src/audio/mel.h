/* Whisper's log-mel spectrogram: the audio front end of the encoder.
 *
 * Reference: openai/whisper whisper/audio.py (c0d2f62) `log_mel_spectrogram`,
 * `pad_or_trim` and `mel_filters`, reproduced step by step:
 *   1. optional padding (see pg_mel_pad);
 *   2. torch.stft(audio, n_fft=400, hop_length=160, window=hann_window(400),
 *      center=True, pad_mode="reflect"): frame t covers samples
 *      [t*160 - 200, t*160 + 200) of the signal reflected at both ends
 *      (x[-j] = x[j], x[L-1+j] = x[L-1-j]), times the periodic Hann window
 *      w[i] = 0.5 - 0.5 cos(2 pi i / 400);
 *   3. power |X[k]|^2 of the 201 bins; the last STFT frame is dropped, so a
 *      signal of L samples gives L / 160 frames (integer division);
 *   4. mel = filters @ power, filters = librosa.filters.mel(sr=16000,
 *      n_fft=400, n_mels) (Slaney mel scale, Slaney area normalisation: what
 *      whisper/assets/mel_filters.npz holds), computed here (pg_mel_filters);
 *   5. log10(max(mel, 1e-10)); then max(x, max_over_all(x) - 8); then
 *      (x + 4) / 4.
 * The FFT, the filter products and the logs are computed in double and the
 * result rounded to float32 (PyTorch computes in float32: the two agree to
 * ~2e-5, see docs/ARCHITECTURE.md "Audio front end").
 *
 * Units: input PCM is mono float32 at 16 kHz, full scale [-1, 1] (int16 / 32768
 * as whisper's load_audio gives); one output frame is 10 ms. */
#ifndef PAGODA_AUDIO_MEL_H
#define PAGODA_AUDIO_MEL_H

#include <stdint.h>

#include "base/pool.h"
#include "base/status.h"

#define PG_WHISPER_SAMPLE_RATE 16000
#define PG_WHISPER_N_FFT 400
#define PG_WHISPER_HOP 160
#define PG_WHISPER_N_BINS (PG_WHISPER_N_FFT / 2 + 1) /* 201 */
#define PG_WHISPER_CHUNK_SECONDS 30
#define PG_WHISPER_N_SAMPLES 480000 /* 30 s: one encoder window */
#define PG_WHISPER_N_FRAMES 3000    /* mel frames in one encoder window */
#define PG_MEL_MAX_MELS 256

/* What happens to the audio before the STFT. */
typedef enum pg_mel_pad {
    /* log_mel_spectrogram(audio): n_frames = n_samples / 160. The reflect
     * padding needs n_samples > 200 (PyTorch refuses shorter input). */
    PG_MEL_PAD_NONE = 0,
    /* log_mel_spectrogram(pad_or_trim(audio)): the audio zero-padded or cut
     * to 480000 samples, n_frames = 3000: one encoder input (whisper's
     * README `pad_or_trim` usage, Hugging Face's WhisperFeatureExtractor).
     * For audio of at most 30 s this equals the first 3000 frames of
     * PG_MEL_PAD_APPEND_30S (whisper's transcribe). */
    PG_MEL_PAD_30S = 1,
    /* log_mel_spectrogram(audio, padding=480000): 30 s of zeros appended,
     * n_frames = n_samples / 160 + 3000; whisper's transcribe() computes this
     * once for the whole file and slides 3000-frame windows over it
     * (pg_mel_window). The -8 clamp uses the maximum over the whole file. */
    PG_MEL_PAD_APPEND_30S = 2,
} pg_mel_pad;

/* Slaney mel filterbank for 16 kHz, n_fft 400: out[n_mels][201] float32,
 * bit-exact to librosa.filters.mel(sr=16000, n_fft=400, n_mels=n_mels)
 * (float64 triangles rounded to float32, then scaled by the float64 Slaney
 * norm 2 / (f[m+2] - f[m]) and rounded again, as librosa does).
 * mel_80 / mel_128 of whisper's mel_filters.npz are n_mels 80 / 128.
 * Errors: PAGODA_ERR_INVALID_ARG for n_mels outside [1, PG_MEL_MAX_MELS]. */
pagoda_status pg_mel_filters(int n_mels, float *out);

/* Log-mel spectrogram of n_samples mono 16 kHz PCM (see the header comment
 * for the steps and pg_mel_pad for the frame count).
 * *out: malloc'ed float32 [n_mels][*n_frames], row-major (a mel bin's frames
 * are contiguous, as whisper's (n_mels, n_frames) tensor); free() it.
 * pool: frames are split over it (pg_pool_parallel_for); NULL computes on the
 * calling thread. The result does not depend on the thread count.
 * Errors: PAGODA_ERR_INVALID_ARG (n_mels outside [1, PG_MEL_MAX_MELS],
 * n_samples < 0, pcm NULL with n_samples > 0, PG_MEL_PAD_NONE with
 * n_samples <= 200, or more than 2^31 frames), PAGODA_ERR_NOMEM. */
pagoda_status pg_log_mel(const float *pcm, int64_t n_samples, int n_mels, pg_mel_pad pad,
                         pg_pool *pool, float **out, int64_t *n_frames);

/* whisper's pad_or_trim on a mel: copy frames [start, start + 3000) of
 * mel[n_mels][n_frames] into dst[n_mels][3000], zero-filling frames past
 * n_frames (transcribe's `mel_segment = pad_or_trim(mel[:, seek:seek +
 * N_FRAMES], N_FRAMES)`). start must be in [0, n_frames]. */
void pg_mel_window(const float *mel, int n_mels, int64_t n_frames, int64_t start, float *dst);

/* whisper's pad_or_trim on audio: dst[0..length) = src[0..n) cut or
 * zero-padded to `length` samples. */
void pg_audio_pad_or_trim(const float *src, int64_t n, int64_t length, float *dst);

#endif
