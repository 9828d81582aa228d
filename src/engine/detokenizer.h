/* Incremental detokenizer with stop strings.
 *
 * Text of the output tokens is produced the way vLLM v1's incremental
 * detokenizer does (vllm/v1/engine/detokenizer.py, prefix_offset /
 * read_offset from HF text-generation-inference): the new text of a token
 * is decode(ids[prefix:]) minus decode(ids[prefix:read]), where the window
 * starts a few tokens back so SentencePiece's leading-space rule and
 * multi-token UTF-8 characters come out right. A window whose decode ends in
 * an unfinished UTF-8 sequence is held until the character completes, so
 * text never contains a partial character; bytes that form no character
 * (byte-fallback tokens in a bad order) become U+FFFD each, as in HF
 * tokenizers' ByteFallback decoder, so the text is always valid UTF-8.
 *
 * Stop strings (OpenAI `stop`): after each token the new text is searched
 * for every stop string; on a match the text is cut before it (or after it
 * with include_stop_str_in_output) and generation must end. Text that could
 * still become a stop string (a suffix that is a proper prefix of one) is
 * held back from the deltas until it cannot, and flushed when generation ends
 * without a match. */
#ifndef PAGODA_ENGINE_DETOKENIZER_H
#define PAGODA_ENGINE_DETOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

typedef struct pg_detok {
    const pg_tokenizer *tok;
    bool skip_special, include_stop;
    int32_t *ids; /* prompt then outputs */
    size_t n_ids, cap_ids;
    size_t prefix_off, read_off;
    char *text; /* output text so far (complete UTF-8; cut at a matched stop) */
    size_t len, cap;
    size_t emitted; /* bytes of text already handed out */
    char **stop;    /* owned copies */
    size_t *stop_len;
    size_t n_stop, max_stop_len;
    bool stopped;   /* a stop string matched */
    int stop_index; /* which one, -1 */
    char *buf_a, *buf_b;
    size_t cap_a, cap_b;
    pg_decode_scratch scratch; /* the decodes' buffers: no allocation per token */
} pg_detok;

/* Start with the prompt's ids (the decode window needs its tail) and copies
 * of the stop strings (empty ones are ignored). Errors: PAGODA_ERR_NOMEM. */
pagoda_status pg_detok_init(pg_detok *d, const pg_tokenizer *tok, const int32_t *prompt,
                            size_t n_prompt, bool skip_special, const char *const *stop,
                            size_t n_stop, bool include_stop);
void pg_detok_free(pg_detok *d);

/* Add one output token; check_stop: search stop strings in the new text
 * (false before min_tokens outputs). Sets d->stopped on a match. Ids at or
 * above the tokenizer's vocabulary (a model vocabulary padded past it, e.g.
 * to a multiple of 64) add no text, as Hugging Face's decode skips them; so
 * do such ids in the prompt.
 * Errors: PAGODA_ERR_NOMEM, tokenizer errors. */
pagoda_status pg_detok_add(pg_detok *d, int32_t id, bool check_stop);

/* Add one step's output tokens ids[0..n) in order, with the engine's stop
 * rules (the one place they are written; the engine and
 * pagoda_detokenizer_add both call it): n_out_before outputs came before
 * them, and stop strings are searched only from output number
 * min_tokens + 1 on; skip_last: the last id ended the request as EOS or a
 * stop token id and adds no text. Stops at the token that completes a
 * stop string: *n_used gets how many ids were taken (n, or up to and
 * including that token; the rest are dropped: the request ends there).
 * Errors: as pg_detok_add. */
pagoda_status pg_detok_add_run(pg_detok *d, const int32_t *ids, size_t n, bool skip_last,
                               int64_t n_out_before, int32_t min_tokens, size_t *n_used);

/* The text that may be handed out now, [*delta, *delta + *len), and mark it
 * emitted. final: generation ended: flush everything, including a held-back
 * stop-string prefix and an unfinished UTF-8 tail (a U+FFFD per byte). */
pagoda_status pg_detok_take(pg_detok *d, bool final, const char **delta, size_t *len);

/* Length of the longest prefix of s[0..n) that does not end inside an
 * unfinished UTF-8 sequence (invalid bytes count as complete). */
size_t pg_utf8_complete_prefix(const char *s, size_t n);

#endif
