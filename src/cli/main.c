/* pagoda: LLM inference and serving engine for CPU servers. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "model/mapped_file.h"
#include "model/model.h"

typedef struct pg_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} pg_command;

static const pg_command COMMANDS[] = {
    {"env", pg_cmd_env, "print the CPU, ISA features, chosen kernels, memory and thread settings"},
    {"chat-template", pg_cmd_chat_template, "render a conversation with a model's chat template"},
    {"tokenize", pg_cmd_tokenize, "print the token ids of a text (TOKENIZER --text TEXT)"},
    {"detokenize", pg_cmd_detokenize, "print the text of token ids (TOKENIZER --ids 1,2,3)"},
    {"chat", pg_cmd_chat, "interactive chat in the terminal (MODEL, or --url of a server)"},
    {"generate", pg_cmd_generate, "generate text for one prompt (offline, batch of one)"},
    {"transcribe", pg_cmd_transcribe, "speech to text with a Whisper model (MODEL FILE [--language L] ...)"},
    {"serve", pg_cmd_serve, "OpenAI-compatible HTTP server (MODEL [--port 8000] ...)"},
    {"download", pg_cmd_download, "download a model from the Hugging Face hub (org/name[:QUANT])"},
    {"bench", pg_cmd_bench, "benchmarks: `bench serve` measures an OpenAI-compatible server"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: pagoda <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    char archs[1024];
    fprintf(f,
            "\nMODEL: a Hugging Face directory, a GGUF file or a hub repo id org/name[:QUANT]\n"
            "(from the HF cache, downloaded first if missing) of one of these\n"
            "architectures: %s\n",
            pg_model_supported(archs, sizeof archs));
    fprintf(f, "\n`pagoda <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("pagoda %s\n", PAGODA_VERSION);
        return 0;
    }
    /* a model file truncated while mapped: a clear message and exit 74, not
     * a SIGBUS core dump (model/mapped_file.h) */
    pg_mapped_fault_handler_install();
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "pagoda: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
