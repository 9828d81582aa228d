/* Command-line checks of every `pagoda` subcommand, table-driven: unknown
 * options, missing values, non-numeric and out-of-range numbers, negative
 * counts, trailing junk ("12abc"), empty strings and stray arguments give
 * one clear message and exit code 2 before any model is loaded. The model
 * path in the table does not exist, so an argument list that is wrongly
 * accepted gets as far as loading it and exits 1 instead (the rows that
 * expect 1 check exactly that: valid options pass). Runs the built binary
 * through PAGODA_EXEC_WRAPPER (qemu in the aarch64 cross build). */
#include "testutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* `pagoda <args>` with stderr merged into stdout; exit code, output in out. */
static int run(const char *args, char *out, size_t cap) {
    const char *bd = getenv("PAGODA_BUILD_DIR");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s '%s/pagoda' %s 2>&1 </dev/null", pg_test_exec_wrapper(),
             bd && *bd ? bd : ".", args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = 0, k;
    while (n + 1 < cap && (k = fread(out + n, 1, cap - 1 - n, p)) > 0)
        n += k;
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define M "/nonexistent/m"
#define DEAD "--base-url http://127.0.0.1:1 --model m --ready-check-timeout-sec 0 --disable-tqdm"

typedef struct row {
    const char *args;
    int exit_code;
    const char *says; /* substring of the first output line */
} row;

static const row ROWS[] = {
    /* generate */
    {"transcribe " M " a.wav --bogus", 2, "unknown option '--bogus'"},
    {"transcribe " M, 2, "FILE is required"},
    {"transcribe " M " a.wav b.wav", 2, "unexpected"},
    {"transcribe " M " a.wav --language", 2, "--language needs a value"},
    {"transcribe " M " a.wav --language xx", 2, "bad value 'xx' for --language"},
    {"transcribe " M " a.wav --task summarize", 2, "bad value 'summarize' for --task"},
    {"transcribe " M " a.wav --response-format xml", 2, "bad value 'xml' for --response-format"},
    {"transcribe " M " a.wav --temperature -1", 2, "bad value '-1' for --temperature"},
    {"transcribe " M " a.wav --seed 1x", 2, "bad value '1x' for --seed"},
    {"transcribe " M " a.wav --threads 0", 2, "bad value '0' for --threads"},
    {"transcribe " M " /nonexistent/a.wav --language German --task translate", 1, "cannot open"},
    {"generate " M " --prompt hi --bogus", 2, "unknown option '--bogus'"},
    {"generate " M " --bogus --prompt hi", 2, "unknown option '--bogus'"},
    {"generate " M " -p hi", 2, "unknown option '-p'"},
    {"generate " M " --prompt", 2, "--prompt needs a value"},
    {"generate " M " --prompt ''", 2, "--prompt is empty"},
    {"generate " M " --prompt -", 2, "--prompt -: standard input is empty"}, /* </dev/null */
    /* chat */
    {"chat", 2, "MODEL or --url is required"},
    {"chat " M " --url http://h:1", 2, "give MODEL or --url, not both"},
    {"chat --url ftp://h", 2, "bad value 'ftp://h' for --url"},
    {"chat --url http://127.0.0.1:1 --chat-template t.jinja", 2, "--chat-template is for a local MODEL"},
    {"chat " M " --model x", 2, "--model names a model of the --url server"},
    {"chat " M " --bogus", 2, "unknown option '--bogus'"},
    {"chat " M " --top-p 0", 2, "bad value '0' for --top-p"},
    {"chat " M " --max-tokens 0", 2, "bad value '0' for --max-tokens"},
    {"chat " M " --temperature", 2, "--temperature needs a value"},
    {"chat " M, 1, M},
    {"chat --url http://127.0.0.1:1", 1, "cannot reach http://127.0.0.1:1/v1"},
    {"generate " M " --prompt hi --max-num-encoder-tokens 0", 2, "bad value '0' for --max-num-encoder-tokens"},
    {"generate " M " --prompt hi --tokenizer ''", 2, "for --tokenizer"},
    {"generate " M " --prompt hi --max-tokens 12abc", 2, "bad value '12abc' for --max-tokens"},
    {"generate " M " --prompt hi --max-tokens -3", 2, "bad value '-3' for --max-tokens"},
    {"generate " M " --prompt hi --max-tokens ''", 2, "bad value '' for --max-tokens"},
    {"generate " M " --prompt hi --max-tokens 99999999999999999999", 2, "for --max-tokens"},
    {"generate " M " --prompt hi --temperature warm", 2, "bad value 'warm' for --temperature"},
    {"generate " M " --prompt hi --temperature nan", 2, "bad value 'nan' for --temperature"},
    {"generate " M " --prompt hi --temperature -0.5", 2, "for --temperature"},
    {"generate " M " --prompt hi --top-k 1.5", 2, "bad value '1.5' for --top-k"},
    {"generate " M " --prompt hi --seed -1", 2, "bad value '-1' for --seed"},
    {"generate " M " --prompt hi --min-tokens -1", 2, "for --min-tokens"},
    {"generate " M " --prompt hi --stop ''", 2, "--stop is an empty string"},
    {"generate " M " --prompt hi --max-num-seqs 0", 2, "bad value '0' for --max-num-seqs"},
    {"generate " M " --prompt hi --max-num-seqs", 2, "--max-num-seqs needs a value"},
    {"generate " M " --prompt hi --threads 4x", 2, "bad value '4x' for --threads"},
    {"generate " M " --prompt hi --kv-cache-memory lots", 2, "for --kv-cache-memory"},
    {"generate " M " --prompt hi --quant-act-group 48", 2, "bad value '48' for --quant-act-group"},
    {"generate " M " --prompt hi --quant-act-group 32", 2,
     "--quant-act-group applies to load-time quantization (--quantization"},
    {"generate " M " --prompt hi --quantization w8a8 --quant-group-size 64 --quant-act-group 32", 2,
     "--quant-act-group 32 needs --quant-group-size 32 or 0"},
    {"generate " M " extra --prompt hi", 2, "unexpected argument 'extra'"},
    {"generate " M " --prompt hi --prompts-file x.jsonl", 2, "not both"},
    {"generate --prompt hi", 2, "MODEL is required"},
    {"generate " M, 2, "--prompt is required"},
    {"generate " M " --prompt hi --max-tokens 3 --temperature 0.5 --top-k -1 --seed 7 --stop x "
     "--max-num-seqs 4 --threads 1 --json",
     1, M},
    /* serve */
    {"serve " M " --bogus", 2, "unknown option '--bogus'"},
    {"serve " M " --bogus 1", 2, "unknown option '--bogus'"},
    {"serve " M " --port", 2, "--port needs a value"},
    {"serve " M " --port 80x", 2, "bad value '80x' for --port"},
    {"serve " M " --port -1", 2, "bad value '-1' for --port"},
    {"serve " M " --port 65536", 2, "for --port"},
    {"serve " M " --max-queue -5", 2, "bad value '-5' for --max-queue"},
    {"serve " M " --max-request-bytes 0", 2, "for --max-request-bytes"},
    {"serve " M " --block-size 20", 2, "bad value '20' for --block-size"},
    {"serve " M " --max-num-seqs -2", 2, "bad value '-2' for --max-num-seqs"},
    {"serve " M " --seed x", 2, "bad value 'x' for --seed"},
    {"serve " M " --served-model-name ''", 2, "for --served-model-name"},
    {"serve " M " other", 1, "no such file or directory"}, /* several models: both are paths */
    /* with several MODELs --served-model-name has no single model to name */
    {"serve " M " other --served-model-name x", 2, "--served-model-name names one model"},
    {"serve --port 0", 2, "MODEL is required"},
    {"serve " M " --quant-act-group 32", 2, "GGUF Q8_0/Q4_0 already use activation groups of 32"},
    {"serve " M " --quantization w4a8 --quant-group-size 128 --quant-act-group 64", 2,
     "--quant-act-group 64 needs --quant-group-size 64 or 0"},
    {"serve " M " --port 0 --max-queue 5 --threads 1 --seed 3 --kv-cache-dtype bf16", 1, M},
    {"serve " M " --prefix-caching-hash-algo xxh64", 2,
     "bad value 'xxh64' for --prefix-caching-hash-algo"},
    {"serve " M " --prefix-caching-hash-algo", 2, "--prefix-caching-hash-algo needs a value"},
    {"serve " M " --port 0 --prefix-caching-hash-algo xxhash", 1, M},
    {"serve " M " --port 0 --prefix-caching-hash-algo sha256", 1, M},
    /* bench serve */
    {"bench serve --bogus", 2, "unknown option '--bogus'"},
    {"bench serve --num-prompts", 2, "--num-prompts needs a value"},
    {"bench serve --num-prompts 12abc", 2, "bad value '12abc' for --num-prompts"},
    {"bench serve --num-prompts -4", 2, "bad value '-4' for --num-prompts"},
    {"bench serve --num-prompts=0", 2, "bad value '0' for --num-prompts"},
    {"bench serve --max-concurrency 0", 2, "bad value '0' for --max-concurrency"},
    {"bench serve --request-rate fast", 2, "bad value 'fast' for --request-rate"},
    {"bench serve --random-range-ratio 1", 2, "bad value '1' for --random-range-ratio"},
    {"bench serve --random-input-len 1e3", 2, "bad value '1e3' for --random-input-len"},
    {"bench serve --port 99999", 2, "bad value '99999' for --port"},
    {"bench serve --seed -1", 2, "bad value '-1' for --seed"},
    {"bench serve --ignore-eos=1", 2, "--ignore-eos takes no value"},
    {"bench serve --percentiles 50,x", 2, "percentiles"},
    {"bench serve --goodput", 2, "--goodput needs KEY:MS values"},
    {"bench serve --goodput ttft:fast", 2, "ttft:fast"},
    {"bench serve --dataset sharegpt", 2, "only 'random'"},
    {"bench serve --endpoint v1/completions", 2, "want a path"},
    {"bench serve --base-url 127.0.0.1:8000", 2, "want http://"},
    {"bench serve extra", 2, "unexpected argument 'extra'"},
    {"bench serve " DEAD " --prompt-as-ids --vocab-size 100 --random-input-len 0", 2,
     "--random-input-len 0 is too small"},
    {"bench serve " DEAD " --prompt-as-ids --vocab-size 100 --num-prompts 2 --random-input-len 4 "
     "--random-output-len 2 --request-rate inf --max-concurrency 1",
     1, "Failed requests"},
    /* bench throughput / latency */
    {"bench throughput " M " --bogus", 2, "unknown option '--bogus'"},
    {"bench throughput " M " --num-prompts 0", 2, "bad value '0' for --num-prompts"},
    {"bench throughput " M " --input-len 5x", 2, "bad value '5x' for --input-len"},
    {"bench throughput " M " --range-ratio -0.1", 2, "for --range-ratio"},
    {"bench throughput " M " --batch-size 2", 2, "unknown option '--batch-size'"},
    {"bench latency " M " --num-prompts 3", 2, "unknown option '--num-prompts'"},
    {"bench latency " M " --batch-size", 2, "--batch-size needs a value"},
    {"bench latency " M " --num-iters -1", 2, "bad value '-1' for --num-iters"},
    {"bench latency " M " --max-model-len 1", 2, "bad value '1' for --max-model-len"},
    {"bench latency " M " two", 2, "unexpected argument 'two'"},
    {"bench latency " M " --copy-repeat-len 4", 2, "--copy-repeat-len needs --dataset-name copy"},
    {"bench latency " M " --dataset-name copy --copy-repeat-len 0", 2,
     "bad value '0' for --copy-repeat-len"},
    {"bench latency " M " --dataset-name copy --input-len 16 --copy-repeat-len 16", 2,
     "--copy-repeat-len 16 leaves no passage"},
    {"bench throughput " M " --dataset-name copy --copy-repeat-len 8 --input-len 16", 1, M},
    /* engine options that only go together: usage errors in every command */
    {"bench latency " M " --quant-act-group 32", 2,
     "--quant-act-group applies to load-time quantization (--quantization"},
    {"bench throughput " M " --quant-act-group 32", 2,
     "GGUF Q8_0/Q4_0 already use activation groups of 32"},
    {"bench latency " M " --quantization w8a8 --quant-group-size 64 --quant-act-group 32", 2,
     "--quant-act-group 32 needs --quant-group-size 32 or 0"},
    /* an output file that cannot be created: exit 1 before the model is
     * loaded (the message names the file, not the missing model) */
    {"bench latency " M " --output-json /nonexistent/dir/x.json", 1,
     "pagoda bench latency: cannot write /nonexistent/dir/x.json: "},
    {"bench throughput " M " --output-json /nonexistent/dir/x.json", 1,
     "pagoda bench throughput: cannot write /nonexistent/dir/x.json: "},
    {"bench serve " DEAD " --prompt-as-ids --vocab-size 100 --output-json /nonexistent/dir/x.json",
     1, "pagoda bench serve: cannot write /nonexistent/dir/x.json: "},
    {"bench nope", 2, "unknown benchmark 'nope'"},
    {"bench throughput " M " --num-prompts 2 --input-len 4 --seed 1", 1, M},
    /* tokenize / detokenize */
    {"tokenize " M " --bogus", 2, "unknown option '--bogus'"},
    {"tokenize " M " --text", 2, "--text needs a value"},
    {"tokenize " M " two --text x", 2, "unexpected argument 'two'"},
    {"detokenize " M " --ids", 2, "--ids needs a value"},
    {"detokenize " M " --ids 1,2x", 2, "bad token id"},
    {"detokenize " M " --ids -3", 2, "bad token id"},
    {"detokenize " M " --skip", 2, "unknown option '--skip'"},
    {"tokenize " M " --text hi --add-special --json", 1, M},
    /* chat-template, env, the command itself */
    {"chat-template " M " --bogus", 2, "unknown option '--bogus'"},
    {"chat-template " M " --messages", 2, "--messages needs a value"},
    {"chat-template " M " other --messages '[]'", 2, "unexpected argument 'other'"},
    {"chat-template " M " --messages '[]' --date 2024-13-01", 2, "expected YYYY-MM-DD"},
    {"env --bogus", 2, "unknown option '--bogus'"},
    {"env extra", 2, "unexpected argument 'extra'"},
    {"frobnicate", 2, "unknown command 'frobnicate'"},
};

static void test_every_command_checks_its_arguments(void **state) {
    (void)state;
    static char out[1 << 16];
    int failures = 0;
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const row *r = &ROWS[i];
        int rc = run(r->args, out, sizeof out);
        /* the message is on the first line that mentions it (bench serve
         * prints progress lines before its table) */
        const char *hit = strstr(out, r->says);
        bool first_line = hit && (r->exit_code != 2 || hit < out + strcspn(out, "\n"));
        if (rc != r->exit_code || !first_line) {
            print_error("pagoda %s\n  exit %d (want %d), output:\n%s\n  (want '%s'%s)\n", r->args,
                        rc, r->exit_code, out, r->says,
                        r->exit_code == 2 ? " on the first line" : "");
            failures++;
        }
        /* usage errors: a one-line message naming the command */
        if (rc == 2 && r->exit_code == 2 && strncmp(out, "pagoda", 6) != 0) {
            print_error("pagoda %s: the message does not start with 'pagoda':\n%s\n", r->args, out);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

/* The early --output-json check leaves the file system as it was: an
 * existing file keeps its content (the model then fails to load: exit 1
 * naming the model), a file it created is removed again. */
static void test_output_json_check_leaves_files(void **state) {
    (void)state;
    static char out[1 << 16];
    const char *d = pg_test_tmpdir();
    char kept[4200], fresh[4200], args[9000];
    snprintf(kept, sizeof kept, "%s/kept.json", d);
    snprintf(fresh, sizeof fresh, "%s/fresh.json", d);
    pg_test_write_file(kept, "old", 3);
    static const char *const CMDS[] = {"bench latency", "bench throughput"};
    for (int c = 0; c < 2; c++) {
        const char *paths[2] = {kept, fresh};
        for (int k = 0; k < 2; k++) {
            snprintf(args, sizeof args, "%s " M " --output-json '%s'", CMDS[c], paths[k]);
            int rc = run(args, out, sizeof out);
            if (rc != 1 || !strstr(out, M) || strstr(out, "cannot write"))
                fail_msg("pagoda %s: exit %d, output:\n%s\n(want exit 1 naming " M ")", args, rc,
                         out);
        }
        size_t len;
        char *text = pg_test_read_file(kept, &len);
        assert_int_equal(len, 3);
        assert_memory_equal(text, "old", 3);
        free(text);
        FILE *f = fopen(fresh, "r");
        if (f) fclose(f);
        assert_null(f);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_command_checks_its_arguments),
        cmocka_unit_test(test_output_json_check_leaves_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
