/* Token sampler; the order of operations and the semantics are documented in
 * sampler.h (they follow vLLM v1's Sampler). */
#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "kernels/dispatch.h"

/* hist[] layout: zero between calls; during a call, for a history token:
 * bits 0..29 its output count, bit 30 "in the prompt", bit 31 "penalised". */
#define HIST_COUNT_MASK 0x3fffffffu
#define HIST_PROMPT 0x40000000u
#define HIST_DONE 0x80000000u

/* Top-p without top-k buckets tokens by y = (x - max) / T in bins of width
 * 1/TOPP_BINS_PER_UNIT (bin 0 holds the most likely); only the bin where the
 * cumulative mass crosses top_p needs sorting. */
#define TOPP_BINS 512
#define TOPP_BINS_PER_UNIT 4.0f

/* The full-vocabulary draw sums probabilities per block of DRAW_BLOCK ids
 * (eight independent double partial sums per block, added in a fixed
 * order: no serial add chain over the vocabulary), finds the block where
 * the cumulative mass passes u * total, and walks only that block. */
enum { DRAW_BLOCK = 256 };

typedef struct cand {
    float x;    /* logit (never NaN) */
    int32_t id; /* token id */
} cand;

struct pg_sampler {
    int32_t vocab;
    float *raw;     /* [V] raw logits, kept for logprobs */
    float *prob;    /* [V] unnormalised probabilities exp((x - max) / T), by token id */
    uint32_t *hist; /* [V] history counts and flags, see HIST_* */
    cand *cand;     /* [V] candidate tokens */
    double *bins;   /* [TOPP_BINS] probability mass per bin (top-p) */
    double *bsum;   /* [ceil(vocab / DRAW_BLOCK)] probability mass per id block (the draw) */
};

pg_sampling_params pg_sampling_params_default(void) {
    pg_sampling_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repetition_penalty = 1.0f;
    p.seed = -1;
    return p;
}

#define BAD(...) pg_error(PAGODA_ERR_INVALID_ARG, "sampling params: " __VA_ARGS__)

pagoda_status pg_sampling_params_validate(const pg_sampling_params *p, int32_t vocab_size) {
    if (!p) return BAD("NULL params");
    /* Comparisons are written so that NaN fails them. */
    if (!(p->temperature >= 0.0f && p->temperature <= FLT_MAX))
        return BAD("temperature must be a finite number >= 0, got %g", (double)p->temperature);
    if (p->top_k < -1) return BAD("top_k must be -1, 0 (off) or >= 1, got %d", p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return BAD("top_p must be in (0, 1], got %g", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return BAD("min_p must be in [0, 1], got %g", (double)p->min_p);
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= FLT_MAX))
        return BAD("repetition_penalty must be a finite number > 0, got %g",
                   (double)p->repetition_penalty);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return BAD("presence_penalty must be in [-2, 2], got %g", (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return BAD("frequency_penalty must be in [-2, 2], got %g", (double)p->frequency_penalty);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return BAD("logit_bias is NULL but n_logit_bias is %zu", p->n_logit_bias);
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        const pg_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= vocab_size)
            return BAD("logit_bias token %d outside the vocabulary [0, %d)", b->token, vocab_size);
        if (isnan(b->bias) || b->bias == INFINITY)
            return BAD("logit_bias for token %d must be finite or -inf, got %g", b->token,
                       (double)b->bias);
    }
    if (p->n_logprobs < 0 || p->n_logprobs > vocab_size)
        return BAD("n_logprobs must be in [0, %d], got %d", vocab_size, p->n_logprobs);
    return PAGODA_OK;
}

pagoda_status pg_sampler_create(int32_t vocab_size, pg_sampler **out) {
    *out = NULL;
    if (vocab_size <= 0)
        return pg_error(PAGODA_ERR_INVALID_ARG, "sampler: vocab_size must be > 0, got %d",
                        vocab_size);
    pg_sampler *s = calloc(1, sizeof *s);
    if (!s) return pg_error(PAGODA_ERR_NOMEM, "sampler: out of memory");
    size_t v = (size_t)vocab_size;
    s->vocab = vocab_size;
    s->raw = pg_malloc_aligned(v * sizeof(float));
    s->prob = pg_malloc_aligned(v * sizeof(float));
    s->hist = pg_calloc_aligned(v, sizeof(uint32_t));
    s->cand = pg_malloc_aligned(v * sizeof(cand));
    s->bins = pg_malloc_aligned(TOPP_BINS * sizeof(double));
    s->bsum = pg_malloc_aligned((v / DRAW_BLOCK + 1) * sizeof(double));
    if (!s->raw || !s->prob || !s->hist || !s->cand || !s->bins || !s->bsum) {
        pg_sampler_free(s);
        return pg_error(PAGODA_ERR_NOMEM, "sampler: out of memory for vocab %d", vocab_size);
    }
    *out = s;
    return PAGODA_OK;
}

void pg_sampler_free(pg_sampler *s) {
    if (!s) return;
    pg_free(s->raw);
    pg_free(s->prob);
    pg_free(s->hist);
    pg_free(s->cand);
    pg_free(s->bins);
    pg_free(s->bsum);
    free(s);
}

int32_t pg_sampler_vocab_size(const pg_sampler *s) {
    return s->vocab;
}

/* ---- ordering: larger logit first, then lower id (a total order) */

static inline bool better(cand a, cand b) {
    return a.x > b.x || (a.x == b.x && a.id < b.id);
}

static int cmp_better_first(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    if (better(*a, *b)) return -1;
    if (better(*b, *a)) return 1;
    return 0;
}

static void sort_desc(cand *a, size_t n) {
    if (n > 1) qsort(a, n, sizeof *a, cmp_better_first);
}

/* Min-heap on `better` (the root is the worst kept candidate). */
static void heap_sift_down(cand *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(h[w], h[l])) w = l;
        if (r < n && better(h[w], h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void heap_sift_up(cand *h, size_t i) {
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!better(h[parent], h[i])) return;
        cand t = h[i];
        h[i] = h[parent];
        h[parent] = t;
        i = parent;
    }
}

/* The k best of x[0..n) (by logit, ties to the lower id) into out[0..k'),
 * sorted best first; k' = min(k, n). O(n + r log k) for r replacements of
 * the root (about k ln(n / k) for logits in random order). */
static size_t top_k_heap(const float *x, size_t n, size_t k, cand *out) {
    if (k > n) k = n;
    if (k == 0) return 0;
    size_t sz = 0;
    size_t i = 0;
    for (; i < n && sz < k; i++) {
        out[sz] = (cand){x[i], (int32_t)i};
        heap_sift_up(out, sz);
        sz++;
    }
    float worst = out[0].x;
    for (; i < n; i++) {
        /* ids grow with i, so a tie with the root never beats it */
        if (x[i] > worst) {
            out[0] = (cand){x[i], (int32_t)i};
            heap_sift_down(out, sz, 0);
            worst = out[0].x;
        }
    }
    sort_desc(out, sz);
    return sz;
}

/* NaN -> -inf (never sampled), +inf -> FLT_MAX (finite, so x - max never
 * gives NaN). */
static inline float clean(float x) {
    if (x != x) return -INFINITY;
    if (x > FLT_MAX) return FLT_MAX;
    return x;
}

/* Maximum of x[0..n) (NaN ignored; -inf if none). *bad is set when some
 * element is NaN or +inf (then the caller cleans and rescans). Eight
 * independent running maxima keep the loop off the compare latency. */
static float max_scan(const float *x, size_t n, bool *bad) {
    float m[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                  -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    int any_bad = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; j++) {
            float v = x[i + (size_t)j];
            any_bad |= !(v <= FLT_MAX); /* NaN or +inf */
            m[j] = v > m[j] ? v : m[j];
        }
    }
    for (; i < n; i++) {
        any_bad |= !(x[i] <= FLT_MAX);
        m[0] = x[i] > m[0] ? x[i] : m[0];
    }
    float r = m[0];
    for (int j = 1; j < 8; j++)
        r = m[j] > r ? m[j] : r;
    if (bad) *bad = any_bad != 0;
    return r;
}

/* Lowest index holding the value m (which occurs in x). */
static size_t first_index_of(const float *x, size_t n, float m) {
    for (size_t i = 0; i < n; i++)
        if (x[i] == m) return i;
    return 0;
}

static pagoda_status check_ids(const int32_t *ids, size_t n, int32_t vocab, const char *what) {
    if (n > 0 && !ids) return pg_error(PAGODA_ERR_INVALID_ARG, "sampler: %s ids are NULL", what);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "sampler: %s token %zu is %d, outside the vocabulary [0, %d)", what, i,
                            ids[i], vocab);
    return PAGODA_OK;
}

/* Steps 4-5: repetition (prompt + output), frequency and presence (output). */
static pagoda_status apply_penalties(pg_sampler *s, const pg_sampling_params *p, float *logits,
                                     const int32_t *prompt, size_t n_prompt, const int32_t *output,
                                     size_t n_output) {
    const float rep = p->repetition_penalty, freq = p->frequency_penalty,
                pres = p->presence_penalty;
    const bool use_rep = rep != 1.0f;
    if (!use_rep && freq == 0.0f && pres == 0.0f) return PAGODA_OK;
    if (!use_rep) n_prompt = 0; /* only the repetition penalty looks at the prompt */
    pagoda_status st = check_ids(output, n_output, s->vocab, "output");
    if (st == PAGODA_OK) st = check_ids(prompt, n_prompt, s->vocab, "prompt");
    if (st != PAGODA_OK) return st;

    uint32_t *h = s->hist;
    for (size_t i = 0; i < n_output; i++)
        if ((h[output[i]] & HIST_COUNT_MASK) != HIST_COUNT_MASK) h[output[i]]++;
    for (size_t i = 0; i < n_prompt; i++)
        h[prompt[i]] |= HIST_PROMPT;

    for (int pass = 0; pass < 2; pass++) {
        const int32_t *ids = pass == 0 ? output : prompt;
        size_t n = pass == 0 ? n_output : n_prompt;
        for (size_t i = 0; i < n; i++) {
            int32_t id = ids[i];
            uint32_t v = h[id];
            if (v & HIST_DONE) continue;
            h[id] = v | HIST_DONE;
            float x = logits[id];
            if (use_rep) x = x > 0.0f ? x / rep : x * rep;
            uint32_t count = v & HIST_COUNT_MASK;
            if (count > 0) {
                x -= freq * (float)count;
                x -= pres;
            }
            logits[id] = clean(x);
        }
    }
    for (size_t i = 0; i < n_output; i++)
        h[output[i]] = 0;
    for (size_t i = 0; i < n_prompt; i++)
        h[prompt[i]] = 0;
    return PAGODA_OK;
}

/* Step 2: top-N raw logprobs; returns log-sum-exp of the raw logits. */
static double raw_logprobs(pg_sampler *s, const float *raw, float raw_max, int32_t n_top,
                           pg_logprob_out *lp) {
    size_t v = (size_t)s->vocab;
    /* exp over the vocabulary with the vector exp (kernels/dispatch.h: within
     * 2 ulp of expf); s->prob is free scratch until step 7 */
    float *e = s->prob;
    for (size_t i = 0; i < v; i++)
        e[i] = raw[i] - raw_max;
    pg_kernels()->vexp_f32(e, e, v);
    double sum = 0.0;
    for (size_t i = 0; i < v; i++)
        sum += (double)e[i];
    /* sum >= 1: the maximum contributes expf(0) */
    // cppcheck-suppress invalidFunctionArg
    double lse = (double)raw_max + log(sum);
    size_t n = top_k_heap(raw, v, (size_t)n_top, s->cand);
    for (size_t j = 0; j < n; j++) {
        lp->top_ids[j] = s->cand[j].id;
        lp->top_logprobs[j] = (float)((double)s->cand[j].x - lse);
    }
    lp->n_top = (int32_t)n;
    return lse;
}

static inline int topp_bin(float y) {
    float b = -y * TOPP_BINS_PER_UNIT; /* y <= 0 */
    return b < (float)(TOPP_BINS - 1) ? (int)b : TOPP_BINS - 1;
}

static int cmp_id(const void *pa, const void *pb) {
    const cand *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

/* Inverse CDF over c[0..n) in ascending id order (c is reordered). */
static int32_t draw_from(cand *c, size_t n, const float *prob, double u) {
    qsort(c, n, sizeof *c, cmp_id);
    double total = 0.0;
    for (size_t j = 0; j < n; j++)
        total += (double)prob[c[j].id];
    double target = u * total, cum = 0.0;
    for (size_t j = 0; j < n; j++) {
        cum += (double)prob[c[j].id];
        if (cum > target) return c[j].id;
    }
    return c[n - 1].id; /* u * total rounded up to total */
}

/* Steps 7-8 with top-k: the k best by heap, then min-p and top-p on that
 * best-first list. Returns the sampled id. */
static int32_t sample_top_k(pg_sampler *s, const pg_sampling_params *p, const float *x, float m,
                            size_t k, double u, int32_t draft, double ua) {
    const float inv_t = 1.0f / p->temperature;
    float *prob = s->prob;
    cand *c = s->cand;
    size_t n = top_k_heap(x, (size_t)s->vocab, k, c);
    double total = 0.0;
    for (size_t j = 0; j < n; j++) {
        float e = expf((c[j].x - m) * inv_t);
        if (e < p->min_p || e == 0.0f) { /* best-first: all later ones are smaller */
            n = j;
            break;
        }
        prob[c[j].id] = e;
        total += (double)e;
    }
    if (p->top_p < 1.0f) {
        double need = (double)p->top_p * total, cum = 0.0;
        for (size_t j = 0; j < n; j++) {
            cum += (double)prob[c[j].id];
            if (cum >= need) {
                n = j + 1;
                break;
            }
        }
    }
    if (draft >= 0) { /* rejection sampling against a one-hot draft (sampler.h) */
        double kept = 0.0;
        size_t at = n;
        for (size_t j = 0; j < n; j++) {
            kept += (double)prob[c[j].id];
            if (c[j].id == draft) at = j;
        }
        if (at < n && ua * kept < (double)prob[draft]) return draft;
        if (at < n) c[at] = c[--n]; /* the residual: the kept tokens but the draft */
    }
    return draw_from(c, n, prob, u); /* n >= 1: the maximum has prob 1 (or was the draft) */
}

/* bsum[b] = sum of p[b * DRAW_BLOCK ...] (eight partial sums in a fixed
 * order); returns the sum of the bsum in block order. */
static double block_sums(const float *p, size_t v, double *bsum) {
    double total = 0.0;
    for (size_t b0 = 0, b = 0; b0 < v; b0 += DRAW_BLOCK, b++) {
        size_t end = b0 + DRAW_BLOCK < v ? b0 + DRAW_BLOCK : v, i = b0;
        double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (; i + 8 <= end; i += 8)
            for (int j = 0; j < 8; j++)
                a[j] += (double)p[i + (size_t)j];
        for (; i < end; i++)
            a[0] += (double)p[i];
        bsum[b] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
        total += bsum[b];
    }
    return total;
}

/* Inverse CDF in id order: the first id whose cumulative mass exceeds
 * target, found through the block sums. When rounding leaves the walk short
 * (target within rounding of a block's end or of the total), the last id
 * with mass before that point. */
static int32_t draw_blocked(const float *p, size_t v, const double *bsum, double target) {
    double cum = 0.0;
    size_t last = 0, b0 = 0;
    for (size_t b = 0; b0 < v; b0 += DRAW_BLOCK, b++) {
        if (cum + bsum[b] > target) break;
        cum += bsum[b];
    }
    if (b0 >= v) b0 = v - (v % DRAW_BLOCK ? v % DRAW_BLOCK : DRAW_BLOCK); /* the last block */
    size_t end = b0 + DRAW_BLOCK < v ? b0 + DRAW_BLOCK : v;
    bool any = false;
    for (size_t i = b0; i < end; i++) {
        if (p[i] == 0.0f) continue;
        cum += (double)p[i];
        last = i;
        any = true;
        if (cum > target) return (int32_t)i;
    }
    if (any) return (int32_t)last;
    for (size_t i = b0; i-- > 0;) /* the block had no mass: the last id before it that has */
        if (p[i] > 0.0f) return (int32_t)i;
    return 0;
}

/* Steps 7-8 over the whole vocabulary (no top-k). */
static int32_t sample_full(pg_sampler *s, const pg_sampling_params *p, const float *x, float m,
                           double u, int32_t draft, double ua) {
    const size_t v = (size_t)s->vocab;
    const float inv_t = 1.0f / p->temperature;
    const float min_p = p->min_p;
    const bool use_top_p = p->top_p < 1.0f;
    float *prob = s->prob;
    double *bins = s->bins;
    if (use_top_p) memset(bins, 0, TOPP_BINS * sizeof(double));

    /* Probabilities by id; min-p zeroes the small ones. Below `skip`, exp
     * is surely < min_p (or 0), so it counts as 0: the vector exp
     * (kernels/dispatch.h, within 2 ulp of expf) is far inside the 0.01
     * margin. One vector exp pass over the vocabulary, then the scalar
     * bookkeeping. */
    float skip = -104.0f; /* expf(-104) rounds to 0 */
    if (min_p > 0.0f && logf(min_p) - 0.01f > skip) skip = logf(min_p) - 0.01f;
    for (size_t i = 0; i < v; i++)
        prob[i] = (x[i] - m) * inv_t;
    pg_kernels()->vexp_f32(prob, prob, v);
    double total;
    if (use_top_p) {
        total = 0.0;
        for (size_t i = 0; i < v; i++) {
            float y = (x[i] - m) * inv_t;
            float e = y < skip ? 0.0f : prob[i];
            if (e < min_p) e = 0.0f;
            prob[i] = e;
            total += (double)e;
            if (e > 0.0f) bins[topp_bin(y)] += (double)e;
        }
    } else {
        /* branch-free selects: the compiler vectorizes this loop */
        for (size_t i = 0; i < v; i++) {
            float y = (x[i] - m) * inv_t;
            float e = y < skip ? 0.0f : prob[i];
            prob[i] = e < min_p ? 0.0f : e;
        }
        total = block_sums(prob, v, s->bsum);
    }

    if (use_top_p) {
        /* the bin where the best-first cumulative mass reaches top_p */
        double need = (double)p->top_p * total, cum = 0.0;
        int cross = -1;
        for (int b = 0; b < TOPP_BINS; b++) {
            if (cum + bins[b] >= need) {
                cross = b;
                break;
            }
            cum += bins[b];
        }
        if (cross < 0) goto draw; /* rounding left the sum short of need: keep all */
        /* sort that bin; the crossing token is the cut */
        cand *c = s->cand;
        size_t n = 0;
        for (size_t i = 0; i < v; i++)
            if (prob[i] > 0.0f && topp_bin((x[i] - m) * inv_t) == cross)
                c[n++] = (cand){x[i], (int32_t)i};
        sort_desc(c, n);
        cand cut = c[n - 1]; /* n >= 1 (bins[cross] > 0); rounding: the whole bin */
        for (size_t j = 0; j < n; j++) {
            cum += (double)prob[c[j].id];
            if (cum >= need) {
                cut = c[j];
                break;
            }
        }
        /* drop what is worse than the cut */
        for (size_t i = 0; i < v; i++)
            if (prob[i] > 0.0f && better(cut, (cand){x[i], (int32_t)i})) prob[i] = 0.0f;
    }
draw:
    if (use_top_p) total = block_sums(prob, v, s->bsum);
    if (draft >= 0) { /* rejection sampling against a one-hot draft (sampler.h) */
        if (ua * total < (double)prob[draft]) return draft;
        prob[draft] = 0.0f; /* the residual max(p - q, 0), renormalised by the draw */
        total = block_sums(prob, v, s->bsum);
    }
    return draw_blocked(prob, v, s->bsum, u * total);
}

pagoda_status pg_sampler_sample(pg_sampler *s, const pg_sampling_params *p, const pg_rng *rng,
                                float *logits, const int32_t *prompt_ids, size_t n_prompt,
                                const int32_t *output_ids, size_t n_output, pg_logprob_out *lp,
                                int32_t *token_out) {
    return pg_sampler_verify(s, p, rng, logits, prompt_ids, n_prompt, output_ids, n_output, -1, lp,
                             token_out);
}

pagoda_status pg_sampler_verify(pg_sampler *s, const pg_sampling_params *p, const pg_rng *rng,
                                float *logits, const int32_t *prompt_ids, size_t n_prompt,
                                const int32_t *output_ids, size_t n_output, int32_t draft,
                                pg_logprob_out *lp, int32_t *token_out) {
    pagoda_status st = pg_sampling_params_validate(p, s->vocab);
    if (st != PAGODA_OK) return st;
    if (!logits || !rng || !token_out)
        return pg_error(PAGODA_ERR_INVALID_ARG, "sampler: NULL logits, rng or token_out");
    if (lp && lp->cap < p->n_logprobs)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "sampler: logprobs buffer holds %d entries, n_logprobs is %d", lp->cap,
                        p->n_logprobs);
    if (lp && p->n_logprobs > 0 && (!lp->top_ids || !lp->top_logprobs))
        return pg_error(PAGODA_ERR_INVALID_ARG, "sampler: logprobs arrays are NULL");
    const size_t v = (size_t)s->vocab;
    if (draft >= (int32_t)v)
        return pg_error(PAGODA_ERR_INVALID_ARG, "sampler: draft token %d outside [0, %zu)", draft,
                        v);

    /* 1. sanitise (a read-only scan; the fix-up pass only when needed) */
    bool bad = false;
    float raw_max = max_scan(logits, v, &bad);
    if (bad) {
        for (size_t i = 0; i < v; i++)
            logits[i] = clean(logits[i]);
        raw_max = max_scan(logits, v, NULL);
    }
    if (raw_max == -INFINITY)
        return pg_error(PAGODA_ERR_INVALID_ARG, "sampler: every logit is -inf or NaN");

    /* 2. raw logprobs */
    double lse = 0.0;
    if (lp) {
        memcpy(s->raw, logits, v * sizeof(float));
        lse = raw_logprobs(s, s->raw, raw_max, p->n_logprobs, lp);
    }

    /* 3. logit bias */
    for (size_t i = 0; i < p->n_logit_bias; i++) {
        int32_t id = p->logit_bias[i].token;
        logits[id] = clean(logits[id] + p->logit_bias[i].bias);
    }

    /* 4-5. penalties */
    st = apply_penalties(s, p, logits, prompt_ids, n_prompt, output_ids, n_output);
    if (st != PAGODA_OK) return st;

    /* 6-8. greedy or random; the maximum changed only if a logit did */
    const bool touched = p->n_logit_bias > 0 || p->repetition_penalty != 1.0f ||
                         p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f;
    const float m = touched ? max_scan(logits, v, NULL) : raw_max;
    if (m == -INFINITY)
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "sampler: every token is banned (all logits -inf after logit_bias)");
    int32_t tok;
    if (p->temperature < PG_SAMPLER_GREEDY_EPS)
        tok = (int32_t)first_index_of(logits, v, m);
    else {
        const double u = pg_rng_uniform(rng, (uint64_t)n_output, PG_RNG_STREAM_SAMPLE);
        const double ua =
            draft >= 0 ? pg_rng_uniform(rng, (uint64_t)n_output, PG_RNG_STREAM_SPEC) : 0.0;
        if (p->top_k > 0 && p->top_k < s->vocab)
            tok = sample_top_k(s, p, logits, m, (size_t)p->top_k, u, draft, ua);
        else
            tok = sample_full(s, p, logits, m, u, draft, ua);
    }

    if (lp) {
        float xs = s->raw[tok];
        lp->sampled_logprob = (float)((double)xs - lse);
        int32_t rank = 0;
        for (size_t i = 0; i < v; i++)
            rank += s->raw[i] >= xs;
        lp->sampled_rank = rank;
    }
    *token_out = tok;
    return PAGODA_OK;
}
