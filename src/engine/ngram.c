/* n-gram proposer (see ngram.h). */
#include "engine/ngram.h"

#include <string.h>

int32_t pg_ngram_propose(const int32_t *tokens, int32_t n, int32_t min_n, int32_t max_n, int32_t k,
                         int32_t *out) {
    if (!tokens || k <= 0 || min_n < 1 || max_n < min_n || n <= min_n) return 0;
    if (max_n > n - 1) max_n = n - 1; /* an earlier occurrence needs one token before the suffix */
    for (int32_t len = max_n; len >= min_n; len--) {
        const int32_t *suffix = tokens + (n - len);
        for (int32_t j = 0; j + len < n; j++) {
            if (tokens[j] != suffix[0] || memcmp(tokens + j, suffix, (size_t)len * sizeof *tokens))
                continue;
            int32_t start = j + len, m = n - start < k ? n - start : k;
            memcpy(out, tokens + start, (size_t)m * sizeof *out);
            return m;
        }
    }
    return 0;
}
