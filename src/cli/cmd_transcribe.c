/* `pagoda transcribe MODEL FILE [options]`: speech to text with a Whisper
 * model (src/speech/transcribe.h over the engine, stepped on this thread),
 * printing the transcript in one of the OpenAI audio API's response formats
 * to stdout. Errors go to stderr: usage errors exit 2, everything else 1. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audio/audio.h"
#include "base/status.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "pagoda.h"
#include "speech/transcribe.h"
#include "tokenizer/whisper_lang.h"

#define CMD "pagoda transcribe"

static const char USAGE[] =
    "usage: pagoda transcribe MODEL FILE [options]\n"
    "\n"
    "Speech to text with a Whisper model (openai/whisper's transcribe(): 30-second\n"
    "windows, timestamps, previous-text conditioning, temperature fallback).\n"
    "MODEL is a Hugging Face Whisper directory; FILE an audio file (wav, flac, mp3,\n"
    "m4a, ogg, webm, ...). The transcript goes to stdout.\n"
    "\n"
    "options:\n"
    "  --language L         spoken language, code or name (en, german, ...);\n"
    "                       default: detected from the first 30 seconds\n"
    "  --task T             transcribe (default) | translate (to English)\n"
    "  --response-format F  json (default) | text | srt | vtt | verbose_json\n"
    "  --prompt TEXT        initial prompt (previous-text conditioning of the first window)\n"
    "  --temperature T      0 (default): greedy with openai's fallback to 0.2 ... 1.0;\n"
    "                       > 0: sample at T only\n"
    "  --seed N             random seed for sampling (default: random)\n"
    "  --max-audio-seconds S  refuse longer audio (default 10800)\n"
    "\n" PG_ENGINE_ARGS_HELP;

typedef struct tr_options {
    const char *model, *file;
    pg_transcribe_options t;
    pg_transcript_format format;
    double max_seconds;
    pagoda_engine_options eng;
} tr_options;

static const char *const VALUED[] = {"--language", "--task",      "--response-format",  "--prompt",
                                     "--temperature", "--seed", "--max-audio-seconds"};

/* 0 ok, 2 usage error, -1 --help */
static int parse_args(int argc, char **argv, tr_options *o) {
    memset(o, 0, sizeof *o);
    pg_transcribe_options_default(&o->t);
    o->format = PG_TFMT_JSON;
    o->max_seconds = PG_AUDIO_DEFAULT_MAX_SECONDS;
    pagoda_engine_options_default(&o->eng);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return -1;
        }
        bool known = false;
        for (size_t k = 0; k < sizeof VALUED / sizeof VALUED[0]; k++) known |= !strcmp(a, VALUED[k]);
        if (!known) {
            int e = pg_engine_args_parse(CMD, argc, argv, &i, &o->eng);
            if (e < 0) return 2;
            if (e > 0) continue;
            if (!pg_args_is_option(a)) {
                if (!o->model)
                    o->model = a;
                else if (!o->file)
                    o->file = a;
                else
                    return pg_args_unexpected(CMD, a);
                continue;
            }
            return pg_args_unknown(CMD, a);
        }
        const char *v = pg_args_value(CMD, argc, argv, &i);
        if (!v) return 2;
        bool ok = true;
        const char *want = NULL;
        double d;
        long long ll;
        if (!strcmp(a, "--language")) {
            ok = pg_whisper_language_index(v) >= 0, want = "a Whisper language code or name (en, de, german, ...)";
            o->t.language = v;
        } else if (!strcmp(a, "--task")) {
            ok = !strcmp(v, "transcribe") || !strcmp(v, "translate"), want = "transcribe or translate";
            o->t.task = !strcmp(v, "translate") ? PG_SPEECH_TRANSLATE : PG_SPEECH_TRANSCRIBE;
        } else if (!strcmp(a, "--response-format")) {
            ok = pg_transcript_format_parse(v, &o->format) == PAGODA_OK,
            want = "json, text, srt, vtt or verbose_json";
        } else if (!strcmp(a, "--prompt")) {
            o->t.prompt = v;
        } else if (!strcmp(a, "--temperature")) {
            ok = pg_args_double(v, &d) && d >= 0 && d <= 2, want = "a number in [0, 2]";
            o->t.temperature = (float)d;
        } else if (!strcmp(a, "--seed")) {
            ok = pg_args_long(v, 0, INT64_MAX, &ll), want = "an integer >= 0";
            o->t.seed = ll;
        } else if (!strcmp(a, "--max-audio-seconds")) {
            ok = pg_args_double(v, &d) && d > 0, want = "a number > 0";
            o->max_seconds = d;
        }
        if (!ok) return pg_args_bad_value(CMD, a, v, want);
    }
    if (!o->model || !o->file) {
        fprintf(stderr, CMD ": %s is required\n\n", !o->model ? "MODEL" : "FILE");
        fputs(USAGE, stderr);
        return 2;
    }
    return pg_engine_args_check(CMD, &o->eng);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, CMD ": cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    bool err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, CMD ": cannot read %s%s\n", path, buf ? "" : ": out of memory");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

int pg_cmd_transcribe(int argc, char **argv) {
    tr_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;

    size_t n_bytes = 0;
    char *bytes = read_file(o.file, &n_bytes);
    if (!bytes) return 1;
    if (n_bytes == 0) {
        fprintf(stderr, CMD ": %s is empty\n", o.file);
        free(bytes);
        return 1;
    }
    pg_audio audio = {0};
    pagoda_status st = pg_audio_decode(bytes, n_bytes, o.file, o.max_seconds, &audio);
    free(bytes);
    if (st) {
        fprintf(stderr, CMD ": %s\n", pagoda_last_error());
        return 1;
    }
    pagoda_engine *e = NULL;
    if ((st = pagoda_engine_create(o.model, &o.eng, &e))) {
        fprintf(stderr, CMD ": %s\n", pagoda_last_error());
        pg_audio_free(&audio);
        return 1;
    }
    if (!pagoda_engine_encoder_input_shape(e, NULL, NULL)) {
        fprintf(stderr, CMD ": %s is a %s model, not a Whisper (speech) model\n", o.model,
                pagoda_engine_architecture(e));
        pagoda_engine_free(e);
        pg_audio_free(&audio);
        return 1;
    }
    pg_speech_backend be = pg_speech_backend_direct(e);
    pg_transcript *t = NULL;
    st = pg_transcribe(e, &be, audio.samples, (size_t)audio.n_samples, &o.t, NULL, NULL, &t);
    pg_audio_free(&audio);
    char *text = NULL;
    size_t len = 0;
    if (!st) st = pg_transcript_render(t, o.format, o.t.task, &text, &len);
    if (st) {
        fprintf(stderr, CMD ": %s\n", pagoda_last_error());
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
        if (o.format == PG_TFMT_JSON || o.format == PG_TFMT_VERBOSE_JSON) fputc('\n', stdout);
        rc = fflush(stdout) ? 1 : 0;
    }
    free(text);
    pg_transcript_free(t);
    pagoda_engine_free(e);
    return rc;
}
