/* `pagoda download org/name[@REVISION][:QUANT] [--revision R] [--include
 * PATTERN]... [--gguf-file NAME]`: fetch a model from the Hugging Face hub
 * into the shared HF cache (model/hub.h) and print the local path. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/hub.h"

#define CMD "pagoda download"
#define MAX_INCLUDE 64

static void usage(FILE *f) {
    fprintf(f, "usage: pagoda download org/name[:QUANT] [--revision R] [--include PATTERN]...\n"
               "                       [--gguf-file NAME]\n"
               "Download a model from the Hugging Face hub into the HF cache shared with\n"
               "huggingface_hub (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)\n"
               "and print its local path (the snapshot directory, or the GGUF file in it).\n"
               "  org/name            the repo; \":QUANT\" (e.g. :Q4_0) picks the one .gguf file\n"
               "                      whose name has that quant, \":FILE.gguf\" a file by name\n"
               "  --revision R        branch, tag or commit (default main)\n"
               "  --include PATTERN   the repo files matching a shell pattern ('*' also matches\n"
               "                      '/'; repeatable) instead of the files a model needs:\n"
               "                      config.json, generation_config.json, tokenizer files, chat\n"
               "                      template, *.safetensors (+ index)\n"
               "  --gguf-file NAME    the .gguf file to download (a repo of GGUF files)\n"
               "Files already in the cache are not downloaded again; an interrupted download\n"
               "resumes where it stopped. LFS files are checked against their sha256, others\n"
               "against their git sha1. Environment: HF_ENDPOINT, HF_TOKEN (gated and private\n"
               "repos), HF_HOME, HF_HUB_CACHE, HF_HUB_OFFLINE=1 (cache only),\n"
               "HF_HUB_DISABLE_PROGRESS_BARS=1.\n");
}

int pg_cmd_download(int argc, char **argv) {
    const char *model = NULL, *revision = NULL, *gguf_file = NULL;
    const char *include[MAX_INCLUDE];
    size_t n_include = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--revision") || !strcmp(a, "--include") || !strcmp(a, "--gguf-file")) {
            const char *v = pg_args_value(CMD, argc, argv, &i);
            if (!v) return 2;
            if (!*v) return pg_args_bad_value(CMD, a, v, "a non-empty value");
            if (!strcmp(a, "--revision")) {
                revision = v;
            } else if (!strcmp(a, "--gguf-file")) {
                gguf_file = v;
            } else {
                if (n_include == MAX_INCLUDE)
                    return pg_args_bad_value(CMD, a, v, "at most 64 --include patterns");
                include[n_include++] = v;
            }
            continue;
        }
        if (pg_args_is_option(a)) return pg_args_unknown(CMD, a);
        if (model) return pg_args_unexpected(CMD, a);
        model = a;
    }
    if (!model) {
        usage(stderr);
        return 2;
    }
    char spec[1024];
    pg_hub_ref ref;
    if (pg_hub_fold_options(model, revision, gguf_file, spec, sizeof spec) != PAGODA_OK) {
        fprintf(stderr, "%s: %s\n", CMD, pg_last_error());
        return 2;
    }
    if (!pg_hub_parse_ref(spec, &ref)) {
        fprintf(stderr, "%s: '%s' is not a Hugging Face repo id (org/name[:QUANT])\n", CMD, model);
        return 2;
    }
    if (n_include && ref.tag[0]) {
        fprintf(stderr, "%s: --include and a GGUF file (:%s) exclude each other\n", CMD, ref.tag);
        return 2;
    }
    pg_hub_options opt = {.include = include, .n_include = n_include, .refresh = true};
    char path[4096];
    if (pg_hub_resolve(&ref, &opt, path, sizeof path, NULL) != PAGODA_OK) {
        fprintf(stderr, "%s: %s\n", CMD, pg_last_error());
        return 1;
    }
    printf("%s\n", path);
    return 0;
}
