/* libFuzzer target: a JSON Schema (response_format json_schema, structured_outputs.json,
 * guided_json)
 * compiled by src/grammar and matched byte by byte and token by token
 * (fz_grammar.h: the input is the spec, optionally followed by a NUL byte
 * and a sample output). Seeds: scripts/fuzz.sh.
 * Dictionary: fuzz/json_schema.dict
 */
#include "fz_grammar.h"
#include "fz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_grammar(PAGODA_GRAMMAR_JSON_SCHEMA, data, size);
    return 0;
}
