/* Real-input FFT of any even length whose half factors into small primes,
 * in double precision: what the log-mel front end needs for Whisper's
 * n_fft = 400 (not a power of two), without an FFT library.
 *
 * Method: the n real samples are packed into n/2 complex values
 * z[m] = x[2m] + i x[2m+1]; a mixed-radix decimation-in-time Cooley-Tukey
 * FFT of length n/2 (radices in the order 4, 2, 3, 5, then any prime up to
 * PG_FFT_MAX_RADIX) transforms them, and the standard split step recovers the
 * n/2 + 1 non-redundant bins of the real transform
 *     X[k] = sum_{t<n} x[t] exp(-2 pi i k t / n),  k = 0..n/2.
 * Twiddles are tabulated in double at plan time, so the error is a few ulps
 * of double per bin (far below the float32 the results are rounded to).
 * A plan is immutable after creation: one plan may serve many threads. */
#ifndef PAGODA_AUDIO_FFT_H
#define PAGODA_AUDIO_FFT_H

#include <stddef.h>

#include "base/status.h"

#define PG_FFT_MAX_RADIX 64
#define PG_FFT_MAX_FACTORS 32

typedef struct pg_fft_plan pg_fft_plan;

/* Plan a real FFT of length n: n even, 2 <= n <= 1 << 20, and every prime
 * factor of n/2 at most PG_FFT_MAX_RADIX. Errors: PAGODA_ERR_INVALID_ARG
 * (bad n), PAGODA_ERR_NOMEM. */
pagoda_status pg_fft_plan_create(int n, pg_fft_plan **out);
void pg_fft_plan_free(pg_fft_plan *p);

/* Doubles of scratch pg_fft_real needs (caller-owned, one per thread). */
size_t pg_fft_scratch_len(const pg_fft_plan *p);

/* Transform x[0..n) into re[0..n/2] and im[0..n/2] (n/2 + 1 bins each).
 * scratch: pg_fft_scratch_len(p) doubles. No allocation; thread-safe with
 * distinct scratch. */
void pg_fft_real(const pg_fft_plan *p, const double *x, double *re, double *im, double *scratch);

#endif
