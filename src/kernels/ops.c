/* Entry points of the transformer ops (see ops.h). The element-wise ops and
 * norms call their scalar references for now; the linear layer uses the
 * dispatch table's dot products and splits N across the thread pool. */
#include "kernels/ops.h"

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/pool.h"

#include "kernels/dispatch.h"
#include "kernels/ref/ops_ref.h"

void pg_rmsnorm(float *out, const float *x, const float *w, size_t m, size_t n, float eps) {
    pg_ref_rmsnorm(out, x, w, m, n, eps);
}

void pg_rope(float *x, size_t n_heads, size_t head_dim, int pos, const float *inv_freq,
             bool interleaved) {
    pg_ref_rope(x, n_heads, head_dim, pos, inv_freq, interleaved);
}

void pg_softmax(float *x, size_t n) {
    pg_ref_softmax(x, n);
}

void pg_silu(float *out, const float *x, size_t n) {
    pg_ref_silu(out, x, n);
}

void pg_swiglu(float *out, const float *gate, const float *up, size_t n) {
    pg_ref_swiglu(out, gate, up, n);
}

pagoda_status pg_rope_inv_freq(const pg_rope_freq_params *p, float *inv_freq) {
    int d = p->head_dim;
    if (d <= 0 || d % 2 != 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "rope: head_dim %d must be even and > 0", d);
    if (!(p->theta > 0.0))
        return pg_error(PAGODA_ERR_INVALID_ARG, "rope: theta %g must be > 0", p->theta);
    if (p->scaling != PG_ROPE_FREQ_NONE && !(p->factor > 0.0))
        return pg_error(PAGODA_ERR_INVALID_ARG, "rope: scaling factor %g must be > 0", p->factor);
    if (p->scaling == PG_ROPE_FREQ_LLAMA3 &&
        (!(p->high_freq_factor > p->low_freq_factor) || !(p->low_freq_factor > 0.0) ||
         !(p->original_max_position > 0.0)))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "rope: llama3 scaling needs 0 < low_freq_factor (%g) < high_freq_factor "
                        "(%g) and original_max_position_embeddings > 0 (%g)",
                        p->low_freq_factor, p->high_freq_factor, p->original_max_position);
    const double two_pi = 6.283185307179586476925286766559;
    double lo = 0.0, hi = 0.0;
    if (p->scaling == PG_ROPE_FREQ_YARN) {
        if (!(p->original_max_position > 0.0) || !(p->beta_fast > 0.0) || !(p->beta_slow > 0.0))
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "rope: yarn needs original_max_position_embeddings (%g), beta_fast "
                            "(%g) and beta_slow (%g) > 0",
                            p->original_max_position, p->beta_fast, p->beta_slow);
        lo = (double)d * log(p->original_max_position / (p->beta_fast * two_pi)) /
             (2.0 * log(p->theta));
        hi = (double)d * log(p->original_max_position / (p->beta_slow * two_pi)) /
             (2.0 * log(p->theta));
        if (p->truncate) {
            lo = floor(lo);
            hi = ceil(hi);
        }
        if (lo < 0.0) lo = 0.0;
        if (hi > (double)(d - 1)) hi = (double)(d - 1);
        if (lo == hi) hi += 0.001;
    }
    for (int i = 0; i < d / 2; i++) {
        double f = pow(p->theta, -(double)(2 * i) / (double)d);
        if (p->scaling == PG_ROPE_FREQ_LINEAR) {
            f /= p->factor;
        } else if (p->scaling == PG_ROPE_FREQ_LLAMA3) {
            double low_wavelen = p->original_max_position / p->low_freq_factor;
            double high_wavelen = p->original_max_position / p->high_freq_factor;
            double wavelen = two_pi / f;
            if (wavelen > low_wavelen) {
                f /= p->factor; /* low frequencies: interpolate fully */
            } else if (wavelen >= high_wavelen) {
                double smooth = (p->original_max_position / wavelen - p->low_freq_factor) /
                                (p->high_freq_factor - p->low_freq_factor);
                f = (1.0 - smooth) * f / p->factor + smooth * f;
            } /* high frequencies: unchanged */
        } else if (p->scaling == PG_ROPE_FREQ_YARN) {
            double ramp = ((double)i - lo) / (hi - lo);
            ramp = ramp < 0.0 ? 0.0 : (ramp > 1.0 ? 1.0 : ramp);
            /* transformers: interpolation * (1 - extrapolation_factor) +
             * extrapolation * extrapolation_factor, extrapolation_factor = 1 - ramp */
            f = (f / p->factor) * ramp + f * (1.0 - ramp);
        }
        inv_freq[i] = (float)f;
    }
    return PAGODA_OK;
}

double pg_rope_yarn_attention_factor(double factor) {
    return factor <= 1.0 ? 1.0 : 0.1 * log(factor) + 1.0;
}

bool pg_matmul_supports(pg_dtype wtype) {
    return wtype == PG_F32 || wtype == PG_F16 || wtype == PG_BF16 || wtype == PG_Q8_0 ||
           wtype == PG_Q4_0 || wtype == PG_MXFP4 || wtype == PG_Q4_K || wtype == PG_Q5_K ||
           wtype == PG_Q6_K || wtype == PG_Q2_K || wtype == PG_Q3_K || wtype == PG_IQ4_NL ||
           wtype == PG_IQ4_XS;
}

typedef struct matmul_job {
    float *out;
    const float *x;
    const uint8_t *w;
    pg_dtype wtype;
    const float *bias;
    size_t M, N, K, row_bytes;
    const pg_kernel_table *kt;
    atomic_int failed; /* a thread could not allocate its scratch row */
} matmul_job;

/* Output columns [n0, n1) of the job: one dot over K per element. */
static void matmul_range(void *ctx, size_t n0, size_t n1, int tid) {
    (void)tid;
    matmul_job *job = ctx;
    const pg_kernel_table *kt = job->kt;
    size_t K = job->K, N = job->N;
    float *scratch = NULL;
    if (job->wtype != PG_F32 && job->wtype != PG_F16 && job->wtype != PG_BF16) {
        scratch = malloc(K * sizeof(float));
        if (!scratch) {
            atomic_store(&job->failed, 1);
            return;
        }
    }
    for (size_t n = n0; n < n1; n++) {
        const void *wr = job->w + n * job->row_bytes;
        float b = job->bias ? job->bias[n] : 0.0f;
        if (scratch) pg_dequant_row(job->wtype, wr, scratch, K);
        for (size_t m = 0; m < job->M; m++) {
            const float *xm = job->x + m * K;
            float s;
            switch (job->wtype) {
            case PG_F32:
                s = kt->dot_f32(wr, xm, K);
                break;
            case PG_BF16:
                s = kt->dot_bf16_f32(wr, xm, K);
                break;
            case PG_F16:
                s = kt->dot_f16_f32(wr, xm, K);
                break;
            default:
                s = kt->dot_f32(scratch, xm, K);
                break;
            }
            job->out[m * N + n] = s + b;
        }
    }
    free(scratch);
}

pagoda_status pg_matmul(float *out, const float *x, const void *w, pg_dtype wtype,
                        const float *bias, size_t M, size_t N, size_t K) {
    if (!pg_matmul_supports(wtype))
        return pg_error(PAGODA_ERR_UNSUPPORTED, "matmul: weight dtype %s not supported",
                        pg_dtype_name(wtype));
    size_t row_bytes = pg_dtype_row_bytes(wtype, K);
    if (row_bytes == 0)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "matmul: K=%zu is not a multiple of the %s block size (%zu)", K,
                        pg_dtype_name(wtype), pg_dtype_block_elems(wtype));
    if (M == 0 || N == 0) return PAGODA_OK;
    matmul_job job = {.out = out,
                      .x = x,
                      .w = w,
                      .wtype = wtype,
                      .bias = bias,
                      .M = M,
                      .N = N,
                      .K = K,
                      .row_bytes = row_bytes,
                      .kt = pg_kernels()};
    atomic_init(&job.failed, 0);
    /* Split N in multiples of 16 columns (no two threads write one cache
     * line of an output row) with at least ~32K multiply-adds per chunk, so
     * tiny layers stay on the calling thread. */
    size_t grain = 32768 / (M * K) + 1;
    grain = (grain + 15) / 16 * 16;
    pg_pool *pool = pg_pool_default();
    if (pool && N > grain)
        pg_pool_parallel_for(pool, N, grain, matmul_range, &job);
    else
        matmul_range(&job, 0, N, 0);
    if (atomic_load(&job.failed))
        return pg_error(PAGODA_ERR_NOMEM, "matmul: out of memory for a %zu-float scratch row", K);
    return PAGODA_OK;
}
