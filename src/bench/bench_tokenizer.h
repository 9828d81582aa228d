/* The project's tokenizer (src/tokenizer/tokenizer.h) seen through the
 * benchmark's pg_bench_tokenizer interface (bench_dataset.h): encode adds no
 * special tokens (HF add_special_tokens=False, as vLLM's benchmark), decode
 * keeps special tokens' text, is_special and vocab_size come from the
 * tokenizer, num_special_to_add is the number of ids encoding "" with
 * special tokens gives (BOS/EOS). */
#ifndef PAGODA_SERVER_BENCH_TOKENIZER_H
#define PAGODA_SERVER_BENCH_TOKENIZER_H

#include "bench/bench_dataset.h"
#include "tokenizer/tokenizer.h"

/* A view of `tok` (borrowed: it must outlive the returned value). */
pg_bench_tokenizer pg_bench_tokenizer_wrap(pg_tokenizer *tok);

#endif
