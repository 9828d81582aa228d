/* libFuzzer target: a regular expression (structured_outputs.regex, guided_regex)
 * compiled by src/grammar and matched byte by byte and token by token
 * (fz_grammar.h: the input is the spec, optionally followed by a NUL byte
 * and a sample output). Seeds: scripts/fuzz.sh.
 * Dictionary: fuzz/regex.dict
 */
#include "fz_grammar.h"
#include "fz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_grammar(PAGODA_GRAMMAR_REGEX, data, size);
    return 0;
}
