/* Subcommands of the `pagoda` CLI. Each takes argv starting at its own name
 * (argv[0] == "generate", ...) and returns a process exit code:
 * 0 success, 1 runtime failure (message printed), 2 usage error. */
#ifndef PAGODA_CLI_COMMANDS_H
#define PAGODA_CLI_COMMANDS_H

int pg_cmd_env(int argc, char **argv);
int pg_cmd_bench(int argc, char **argv);
/* `pagoda bench throughput|latency` (cmd_bench_offline.c), dispatched by pg_cmd_bench. */
int pg_cmd_bench_throughput(int argc, char **argv);
int pg_cmd_bench_latency(int argc, char **argv);
/* `pagoda bench kernels` (cmd_bench_kernels.c), dispatched by pg_cmd_bench. */
int pg_cmd_bench_kernels(int argc, char **argv);
/* `pagoda bench grammar` (cmd_bench_grammar.c): structured-output mask cost. */
int pg_cmd_bench_grammar(int argc, char **argv);
/* `pagoda bench allreduce` (cmd_bench_allreduce.c): tensor-parallel all-reduce latency. */
int pg_cmd_bench_allreduce(int argc, char **argv);
int pg_cmd_chat_template(int argc, char **argv);
int pg_cmd_tokenize(int argc, char **argv);
int pg_cmd_detokenize(int argc, char **argv);
int pg_cmd_generate(int argc, char **argv);
/* `pagoda chat MODEL | --url URL` (cmd_chat.c): interactive terminal chat. */
int pg_cmd_chat(int argc, char **argv);
int pg_cmd_serve(int argc, char **argv);
/* `pagoda download org/name` (cmd_download.c): fetch a model from the HF hub. */
int pg_cmd_download(int argc, char **argv);
/* `pagoda transcribe MODEL FILE` (cmd_transcribe.c): Whisper speech to text. */
int pg_cmd_transcribe(int argc, char **argv);

#endif
