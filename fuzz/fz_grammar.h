/* The driver shared by the grammar-compiler targets (fuzz_json_schema,
 * fuzz_regex, fuzz_ebnf). */
#ifndef PAGODA_FZ_GRAMMAR_H
#define PAGODA_FZ_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "pagoda.h"

/* The input is a spec of `kind` (JSON Schema text, regex, GBNF grammar),
 * optionally followed by a NUL byte and a sample output. The spec is
 * compiled with pg_grammar_build (as pagoda_grammar_compile does) and bound
 * to a small vocabulary (the 256 single bytes, then a few multi-byte
 * tokens); then, for at most 64 bytes of the sample, the byte matcher's
 * allowed set (pg_gstate_allowed), the token mask of the single-byte tokens
 * (pg_tmatch_fill_mask) and whether feeding the byte succeeds must agree
 * (abort otherwise: the mask would let the model leave the grammar, or
 * forbid a valid byte), and the byte is fed to both matchers. */
void fz_grammar(pagoda_grammar_kind kind, const uint8_t *data, size_t size);

#endif
