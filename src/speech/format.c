/* Transcript response formats of OpenAI's audio API (json, text, srt, vtt,
 * verbose_json). srt / vtt follow openai/whisper whisper/utils.py WriteSRT /
 * WriteVTT (segment-level cues: text stripped, "-->" replaced by "->";
 * timestamps by format_timestamp). JSON is built with cJSON. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "speech/filters.h"
#include "speech/transcribe.h"

static const struct {
    const char *name;
    pg_transcript_format f;
    const char *mime;
} FORMATS[] = {
    {"json", PG_TFMT_JSON, "application/json"},
    {"text", PG_TFMT_TEXT, "text/plain; charset=utf-8"},
    {"srt", PG_TFMT_SRT, "text/plain; charset=utf-8"},
    {"vtt", PG_TFMT_VTT, "text/vtt; charset=utf-8"},
    {"verbose_json", PG_TFMT_VERBOSE_JSON, "application/json"},
};
#define N_FORMATS (sizeof FORMATS / sizeof FORMATS[0])

pagoda_status pg_transcript_format_parse(const char *s, pg_transcript_format *f) {
    for (size_t i = 0; s && i < N_FORMATS; i++)
        if (!strcmp(s, FORMATS[i].name)) {
            *f = FORMATS[i].f;
            return PAGODA_OK;
        }
    return pg_error(PAGODA_ERR_INVALID_ARG,
                    "response_format '%s' is not one of json, text, srt, verbose_json, vtt", s ? s : "(null)");
}

const char *pg_transcript_format_mime(pg_transcript_format f) {
    for (size_t i = 0; i < N_FORMATS; i++)
        if (FORMATS[i].f == f) return FORMATS[i].mime;
    return "application/octet-stream";
}

/* ---- a growing string ---------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

/* segment["text"].strip().replace("-->", "->") */
static void sb_cue_text(sbuf *b, const char *text) {
    size_t n = text ? strlen(text) : 0, i = 0;
    while (i < n && isspace((unsigned char)text[i])) i++;
    while (n > i && isspace((unsigned char)text[n - 1])) n--;
    while (i < n) {
        if (i + 3 <= n && !memcmp(text + i, "-->", 3)) {
            sb_put(b, "->", 2);
            i += 3;
        } else {
            sb_put(b, text + i, 1);
            i++;
        }
    }
}

static char *stripped(const char *s) {
    size_t n = s ? strlen(s) : 0, i = 0;
    while (i < n && isspace((unsigned char)s[i])) i++;
    while (n > i && isspace((unsigned char)s[n - 1])) n--;
    char *r = malloc(n - i + 1);
    if (r) {
        memcpy(r, s + i, n - i);
        r[n - i] = 0;
    }
    return r;
}

/* A number as the API prints it: `digits` significant digits, so a float's
 * rounding noise does not show (-0.28, not -0.2800000011920929; 0.92, not
 * 0.9200000000000000399). Times keep 10 digits (milliseconds past 27 hours). */
static double tidy(double x, int digits) {
    if (!isfinite(x)) return x;
    char buf[40];
    snprintf(buf, sizeof buf, "%.*g", digits, x);
    return strtod(buf, NULL);
}

static cJSON *add_num(cJSON *o, const char *k, double v) {
    if (!isfinite(v)) return cJSON_AddNullToObject(o, k); /* JSON has no NaN */
    return cJSON_AddNumberToObject(o, k, v);
}

static pagoda_status render_json(const pg_transcript *t, bool verbose, pg_speech_task task, char **out,
                                 size_t *len) {
    cJSON *root = cJSON_CreateObject();
    char *text = stripped(t->text);
    bool ok = root && text;
    if (ok && verbose) {
        int li = pg_whisper_language_index(t->language);
        ok = cJSON_AddStringToObject(root, "task", task == PG_SPEECH_TRANSLATE ? "translate" : "transcribe") &&
             cJSON_AddStringToObject(root, "language", li >= 0 ? PG_WHISPER_LANGUAGES[li].name : t->language) &&
             add_num(root, "duration", tidy(t->duration, 10));
    }
    if (ok) ok = cJSON_AddStringToObject(root, "text", text) != NULL;
    if (ok && verbose) {
        cJSON *segs = cJSON_AddArrayToObject(root, "segments");
        ok = segs != NULL;
        for (int32_t i = 0; ok && i < t->n_segments; i++) {
            const pg_speech_segment *s = &t->segments[i];
            cJSON *o = cJSON_CreateObject();
            ok = o && cJSON_AddItemToArray(segs, o);
            if (!ok) {
                cJSON_Delete(o);
                break;
            }
            static const int no_tokens[1] = {0};
            cJSON *toks = cJSON_CreateIntArray(s->n_tokens ? (const int *)s->tokens : no_tokens, s->n_tokens);
            ok = add_num(o, "id", s->id) && add_num(o, "seek", s->seek) && add_num(o, "start", tidy(s->start, 10)) &&
                 add_num(o, "end", tidy(s->end, 10)) && cJSON_AddStringToObject(o, "text", s->text ? s->text : "") &&
                 toks && cJSON_AddItemToObject(o, "tokens", toks) && add_num(o, "temperature", tidy(s->temperature, 6)) &&
                 add_num(o, "avg_logprob", tidy(s->avg_logprob, 6)) &&
                 add_num(o, "compression_ratio", tidy(s->compression_ratio, 6)) &&
                 add_num(o, "no_speech_prob", tidy(s->no_speech_prob, 6));
        }
    }
    char *js = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    free(text);
    if (!js) return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory rendering JSON");
    *len = strlen(js);
    /* cJSON's buffer comes from its allocator (malloc by default): hand over a malloc'ed copy */
    char *copy = malloc(*len + 1);
    if (copy) memcpy(copy, js, *len + 1);
    cJSON_free(js);
    if (!copy) return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory rendering JSON");
    *out = copy;
    return PAGODA_OK;
}

pagoda_status pg_transcript_render(const pg_transcript *t, pg_transcript_format f, pg_speech_task task,
                                   char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (!t) return pg_error(PAGODA_ERR_INVALID_ARG, "speech: no transcript");
    if (f == PG_TFMT_JSON || f == PG_TFMT_VERBOSE_JSON) return render_json(t, f == PG_TFMT_VERBOSE_JSON, task, out, len);
    sbuf b = {0};
    char t0[32], t1[32], num[24];
    switch (f) {
    case PG_TFMT_TEXT: {
        char *s = stripped(t->text);
        if (!s) return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
        sb_str(&b, s);
        sb_str(&b, "\n");
        free(s);
        break;
    }
    case PG_TFMT_SRT:
        sb_put(&b, "", 0);
        for (int32_t i = 0; i < t->n_segments; i++) {
            const pg_speech_segment *s = &t->segments[i];
            pg_whisper_format_timestamp(s->start, true, ',', t0);
            pg_whisper_format_timestamp(s->end, true, ',', t1);
            snprintf(num, sizeof num, "%d\n", (int)i + 1);
            sb_str(&b, num);
            sb_str(&b, t0);
            sb_str(&b, " --> ");
            sb_str(&b, t1);
            sb_str(&b, "\n");
            sb_cue_text(&b, s->text);
            sb_str(&b, "\n\n");
        }
        break;
    case PG_TFMT_VTT:
        sb_str(&b, "WEBVTT\n\n");
        for (int32_t i = 0; i < t->n_segments; i++) {
            const pg_speech_segment *s = &t->segments[i];
            pg_whisper_format_timestamp(s->start, false, '.', t0);
            pg_whisper_format_timestamp(s->end, false, '.', t1);
            sb_str(&b, t0);
            sb_str(&b, " --> ");
            sb_str(&b, t1);
            sb_str(&b, "\n");
            sb_cue_text(&b, s->text);
            sb_str(&b, "\n\n");
        }
        break;
    default:
        return pg_error(PAGODA_ERR_INVALID_ARG, "speech: unknown transcript format %d", (int)f);
    }
    if (b.oom || !b.p) {
        free(b.p);
        return pg_error(PAGODA_ERR_NOMEM, "speech: out of memory");
    }
    *out = b.p;
    *len = b.n;
    return PAGODA_OK;
}
