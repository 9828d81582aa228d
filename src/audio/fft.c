/* Real FFT: n/2-point mixed-radix complex FFT + split step. See fft.h. */
#include "audio/fft.h"

#include <math.h>
#include <stdlib.h>

typedef struct cplx {
    double re, im;
} cplx;

struct pg_fft_plan {
    int n; /* real length */
    int h; /* complex length n / 2 */
    int n_factors;
    int factors[PG_FFT_MAX_FACTORS]; /* radices, product h */
    cplx *tw;                        /* tw[t] = exp(-2 pi i t / h), t < h */
    cplx *post;                      /* post[k] = exp(-2 pi i k / n), k <= h */
};

static int factorize(int h, int *factors) {
    int nf = 0;
    static const int small[] = {4, 2, 3, 5};
    for (int i = 0; i < 4; i++)
        while (h % small[i] == 0 && nf < PG_FFT_MAX_FACTORS) {
            factors[nf++] = small[i];
            h /= small[i];
        }
    for (int r = 7; h > 1 && r <= PG_FFT_MAX_RADIX && nf < PG_FFT_MAX_FACTORS; r += 2)
        while (h % r == 0 && nf < PG_FFT_MAX_FACTORS) {
            factors[nf++] = r;
            h /= r;
        }
    return h == 1 ? nf : -1;
}

pagoda_status pg_fft_plan_create(int n, pg_fft_plan **out) {
    *out = NULL;
    if (n < 2 || n > (1 << 20) || n % 2 != 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "fft: length %d must be even and in [2, 2^20]", n);
    pg_fft_plan *p = calloc(1, sizeof *p);
    if (!p) return pg_error(PAGODA_ERR_NOMEM, "fft: out of memory");
    p->n = n;
    p->h = n / 2;
    p->n_factors = p->h == 1 ? 0 : factorize(p->h, p->factors);
    if (p->n_factors < 0) {
        free(p);
        return pg_error(PAGODA_ERR_INVALID_ARG, "fft: length %d: n/2 has a prime factor above %d",
                        n, PG_FFT_MAX_RADIX);
    }
    p->tw = malloc((size_t)p->h * sizeof(cplx));
    p->post = malloc(((size_t)p->h + 1) * sizeof(cplx));
    if (!p->tw || !p->post) {
        pg_fft_plan_free(p);
        return pg_error(PAGODA_ERR_NOMEM, "fft: out of memory");
    }
    for (int t = 0; t < p->h; t++) {
        double a = -2.0 * M_PI * (double)t / (double)p->h;
        p->tw[t] = (cplx){cos(a), sin(a)};
    }
    for (int k = 0; k <= p->h; k++) {
        double a = -2.0 * M_PI * (double)k / (double)n;
        p->post[k] = (cplx){cos(a), sin(a)};
    }
    *out = p;
    return PAGODA_OK;
}

void pg_fft_plan_free(pg_fft_plan *p) {
    if (!p) return;
    free(p->tw);
    free(p->post);
    free(p);
}

size_t pg_fft_scratch_len(const pg_fft_plan *p) {
    return 4 * (size_t)p->h;
}

/* Decimation in time: out[0..len) = DFT_len of in[0], in[stride], ...
 * The radix r = factors[f] splits the input into r interleaved
 * subsequences, transformed recursively into out[j*m .. (j+1)*m), then
 * combined: X[k + q m] = sum_j W_len^{j k} Y_j[k] W_r^{j q}. */
static void dit(const pg_fft_plan *p, const cplx *in, size_t stride, cplx *out, int len, int f) {
    if (len == 1) {
        out[0] = in[0];
        return;
    }
    const int r = p->factors[f], m = len / r;
    for (int j = 0; j < r; j++)
        dit(p, in + (size_t)j * stride, stride * (size_t)r, out + j * m, m, f + 1);
    const int s = p->h / len; /* W_len^e = tw[e * s] */
    cplx t[PG_FFT_MAX_RADIX];
    for (int k = 0; k < m; k++) {
        t[0] = out[k];
        for (int j = 1; j < r; j++) {
            cplx y = out[j * m + k], w = p->tw[j * k * s]; /* j*k < len: index < h */
            t[j] = (cplx){y.re * w.re - y.im * w.im, y.re * w.im + y.im * w.re};
        }
        if (r == 2) {
            out[k] = (cplx){t[0].re + t[1].re, t[0].im + t[1].im};
            out[k + m] = (cplx){t[0].re - t[1].re, t[0].im - t[1].im};
        } else if (r == 4) {
            /* W_4 = -i: X0 = a+b+c+d, X1 = a - i b - c + i d, X2 = a-b+c-d, X3 = a + i b - c - i d
             */
            cplx a = t[0], b = t[1], c = t[2], d = t[3];
            cplx ac = {a.re + c.re, a.im + c.im}, amc = {a.re - c.re, a.im - c.im};
            cplx bd = {b.re + d.re, b.im + d.im}, bmd = {b.re - d.re, b.im - d.im};
            out[k] = (cplx){ac.re + bd.re, ac.im + bd.im};
            out[k + m] = (cplx){amc.re + bmd.im, amc.im - bmd.re};
            out[k + 2 * m] = (cplx){ac.re - bd.re, ac.im - bd.im};
            out[k + 3 * m] = (cplx){amc.re - bmd.im, amc.im + bmd.re};
        } else {
            const int ws = m * s; /* W_r = tw[ws] */
            for (int q = 0; q < r; q++) {
                double re = t[0].re, im = t[0].im;
                for (int j = 1; j < r; j++) {
                    cplx w = p->tw[((j * q) % r) * ws];
                    re += t[j].re * w.re - t[j].im * w.im;
                    im += t[j].re * w.im + t[j].im * w.re;
                }
                out[k + q * m] = (cplx){re, im};
            }
        }
    }
}

void pg_fft_real(const pg_fft_plan *p, const double *x, double *re, double *im, double *scratch) {
    const int h = p->h;
    if (h < 1) return; /* plans have n >= 2 */
    cplx *z = (cplx *)scratch, *Z = z + h;
    for (int m = 0; m < h; m++)
        z[m] = (cplx){x[2 * m], x[2 * m + 1]};
    dit(p, z, 1, Z, h, 0);
    /* Z = E + i O, E/O the transforms of the even/odd samples:
     * E[k] = (Z[k] + conj Z[h-k]) / 2, O[k] = (Z[k] - conj Z[h-k]) / (2i),
     * X[k] = E[k] + W_n^k O[k] for k = 0..h (indices mod h). */
    for (int k = 0; k <= h; k++) {
        cplx a = Z[k % h], b = Z[(h - k) % h];
        double er = 0.5 * (a.re + b.re), ei = 0.5 * (a.im - b.im);
        double or_ = 0.5 * (a.im + b.im), oi = -0.5 * (a.re - b.re);
        cplx w = p->post[k];
        re[k] = er + w.re * or_ - w.im * oi;
        im[k] = ei + w.re * oi + w.im * or_;
    }
}
