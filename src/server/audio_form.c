/* The audio endpoints' multipart form (see audio_form.h). */
#include "server/audio_form.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct field {
    char *key;
    char *val;
    size_t len;
} field;

struct pg_audio_form {
    size_t max_file;
    unsigned char *file;
    size_t file_len, file_cap;
    char *filename;
    bool has_file;
    bool file_done; /* a part with another key came after the file */
    field fields[PG_AUDIO_FORM_MAX_FIELDS];
    int n_fields;
    int open_field; /* index of the text part being received, or -1 */
};

pg_audio_form *pg_audio_form_create(size_t max_file_bytes) {
    pg_audio_form *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->max_file = max_file_bytes;
    f->open_field = -1;
    return f;
}

void pg_audio_form_free(pg_audio_form *f) {
    if (!f) return;
    for (int i = 0; i < f->n_fields; i++) {
        free(f->fields[i].key);
        free(f->fields[i].val);
    }
    free(f->file);
    free(f->filename);
    free(f);
}

static bool is_list_key(const char *key) {
    return !strcmp(key, "timestamp_granularities[]") || !strcmp(key, "timestamp_granularities");
}

static pagoda_status add_file(pg_audio_form *f, const char *filename, const char *data,
                              uint64_t off, size_t size, pg_api_error *err) {
    /* MHD may hand over a part's first bytes as more than one call at offset 0
     * (an empty call first): only data after data, or after another part, is
     * a second file */
    if (off == 0 && f->has_file && (f->file_len > 0 || f->file_done))
        return pg_api_fail(err, 400, "file", "the form has more than one 'file' part");
    if (off == 0 && !f->has_file) {
        f->has_file = true;
        f->filename = strdup(filename ? filename : "");
        if (!f->filename) return pg_api_fail(err, 500, NULL, "out of memory");
    }
    if (size > f->max_file - f->file_len || f->file_len > f->max_file)
        return pg_api_fail(err, 413, "file",
                           "the audio file is larger than the limit of %zu bytes "
                           "(--max-audio-bytes)",
                           f->max_file);
    if (f->file_len + size > f->file_cap) {
        size_t cap = f->file_cap ? f->file_cap : 65536;
        while (cap < f->file_len + size)
            cap *= 2;
        if (cap > f->max_file) cap = f->max_file;
        unsigned char *b = realloc(f->file, cap);
        if (!b) return pg_api_fail(err, 500, NULL, "out of memory");
        f->file = b;
        f->file_cap = cap;
    }
    if (size) memcpy(f->file + f->file_len, data, size);
    f->file_len += size;
    return PAGODA_OK;
}

pagoda_status pg_audio_form_add(pg_audio_form *f, const char *key, const char *filename,
                                const char *data, uint64_t off, size_t size, pg_api_error *err) {
    if (!key) key = "";
    if (!strcmp(key, "file")) {
        f->open_field = -1;
        return add_file(f, filename, data, off, size, err);
    }
    if (f->has_file) f->file_done = true;
    char shown[72];
    snprintf(shown, sizeof shown, "%.64s", key);
    bool same_open = f->open_field >= 0 && !strcmp(f->fields[f->open_field].key, key) &&
                     f->fields[f->open_field].len == 0;
    if (off == 0 && !same_open) {
        for (int i = 0; i < f->n_fields; i++)
            if (!strcmp(f->fields[i].key, key) && !is_list_key(key))
                return pg_api_fail(err, 400, shown, "the form has field '%s' more than once",
                                   shown);
        if (f->n_fields == PG_AUDIO_FORM_MAX_FIELDS)
            return pg_api_fail(err, 400, NULL, "the form has more than %d fields",
                               PG_AUDIO_FORM_MAX_FIELDS);
        field *fd = &f->fields[f->n_fields];
        fd->key = strdup(key);
        fd->val = calloc(1, 1);
        if (!fd->key || !fd->val) {
            free(fd->key);
            free(fd->val);
            fd->key = fd->val = NULL;
            return pg_api_fail(err, 500, NULL, "out of memory");
        }
        f->open_field = f->n_fields++;
    }
    if (f->open_field < 0) return pg_api_fail(err, 400, shown, "malformed form part '%s'", shown);
    field *fd = &f->fields[f->open_field];
    if (size > PG_AUDIO_FORM_MAX_FIELD - fd->len)
        return pg_api_fail(err, 400, shown, "form field '%s' is longer than %u bytes", shown,
                           PG_AUDIO_FORM_MAX_FIELD);
    if (size && memchr(data, 0, size))
        return pg_api_fail(err, 400, shown, "form field '%s' contains a NUL byte", shown);
    char *v = realloc(fd->val, fd->len + size + 1);
    if (!v) return pg_api_fail(err, 500, NULL, "out of memory");
    memcpy(v + fd->len, data, size);
    fd->len += size;
    v[fd->len] = 0;
    fd->val = v;
    return PAGODA_OK;
}

static const field *find(const pg_audio_form *f, const char *key) {
    for (int i = 0; i < f->n_fields; i++)
        if (!strcmp(f->fields[i].key, key)) return &f->fields[i];
    return NULL;
}

static bool parse_float(const char *s, double *out) {
    if (!*s) return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

static bool parse_int(const char *s, long long lo, long long hi, long long *out) {
    if (!*s) return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* A float field in [lo, hi] (lo_open: lo itself excluded). */
static pagoda_status float_field(const pg_audio_form *f, const char *key, double lo, bool lo_open,
                                 double hi, bool *set, float *out, pg_api_error *err) {
    const field *fd = find(f, key);
    if (!fd) return PAGODA_OK;
    double v = 0;
    if (!parse_float(fd->val, &v) || v > hi || v < lo || (lo_open && v == lo))
        return pg_api_fail(err, 400, key, "'%s' must be a number in %s%g, %g] (got '%.40s')", key,
                           lo_open ? "(" : "[", lo, hi, fd->val);
    *out = (float)v;
    if (set) *set = true;
    return PAGODA_OK;
}

static const struct {
    const char *name;
    pg_transcript_format f;
} FORMATS[] = {
    {"json", PG_TFMT_JSON},
    {"text", PG_TFMT_TEXT},
    {"srt", PG_TFMT_SRT},
    {"vtt", PG_TFMT_VTT},
    {"verbose_json", PG_TFMT_VERBOSE_JSON},
};

pagoda_status pg_audio_form_finish(pg_audio_form *f, pg_audio_params *out, pg_api_error *err) {
    memset(out, 0, sizeof *out);
    out->format = PG_TFMT_JSON;
    out->seed = -1;
    for (int i = 0; i < f->n_fields; i++) {
        char *safe = pg_api_utf8_dup(f->fields[i].val, f->fields[i].len);
        bool ok = safe && !strcmp(safe, f->fields[i].val);
        free(safe);
        if (!ok)
            return pg_api_fail(err, 400, f->fields[i].key, "form field '%.64s' is not valid UTF-8",
                               f->fields[i].key);
    }
    if (!f->has_file)
        return pg_api_fail(err, 400, "file",
                           "the form has no 'file' part (send the audio as multipart/form-data "
                           "field 'file')");
    if (f->file_len == 0)
        return pg_api_fail(err, 400, "file", "the audio file%s%s%s is empty",
                           f->filename[0] ? " '" : "", f->filename, f->filename[0] ? "'" : "");
    out->file = f->file;
    out->file_len = f->file_len;
    out->filename = f->filename;
    const field *fd;
    if ((fd = find(f, "model")) && fd->len) out->model = fd->val;
    if ((fd = find(f, "language")) && fd->len) out->language = fd->val;
    if ((fd = find(f, "prompt")) && fd->len) out->prompt = fd->val;
    if ((fd = find(f, "response_format")) && fd->len) {
        size_t k = 0, nf = sizeof FORMATS / sizeof FORMATS[0];
        while (k < nf && strcmp(FORMATS[k].name, fd->val))
            k++;
        if (k == nf)
            return pg_api_fail(err, 400, "response_format",
                               "'response_format' must be one of json, text, srt, vtt, "
                               "verbose_json (got '%.40s')",
                               fd->val);
        out->format = FORMATS[k].f;
    }
    pagoda_status st;
    if ((st = float_field(f, "temperature", 0, false, 1, NULL, &out->temperature, err)) ||
        (st = float_field(f, "top_p", 0, true, 1, &out->top_p_set, &out->top_p, err)) ||
        (st = float_field(f, "min_p", 0, false, 1, &out->min_p_set, &out->min_p, err)) ||
        (st = float_field(f, "frequency_penalty", -2, false, 2, &out->frequency_penalty_set,
                          &out->frequency_penalty, err)) ||
        (st = float_field(f, "presence_penalty", -2, false, 2, &out->presence_penalty_set,
                          &out->presence_penalty, err)))
        return st;
    if ((fd = find(f, "repetition_penalty"))) {
        double v = 0;
        if (!parse_float(fd->val, &v) || !(v > 0))
            return pg_api_fail(err, 400, "repetition_penalty",
                               "'repetition_penalty' must be a number > 0 (got '%.40s')", fd->val);
        out->repetition_penalty = (float)v;
        out->repetition_penalty_set = true;
    }
    long long x = 0;
    if ((fd = find(f, "top_k"))) {
        if (!parse_int(fd->val, -1, INT32_MAX, &x))
            return pg_api_fail(err, 400, "top_k", "'top_k' must be an integer >= -1 (got '%.40s')",
                               fd->val);
        out->top_k = (int32_t)x;
        out->top_k_set = true;
    }
    if ((fd = find(f, "seed"))) {
        if (!parse_int(fd->val, LLONG_MIN, LLONG_MAX, &x))
            return pg_api_fail(err, 400, "seed", "'seed' must be an integer (got '%.40s')",
                               fd->val);
        out->seed = (int64_t)((uint64_t)x & INT64_MAX);
    }
    if ((fd = find(f, "max_completion_tokens"))) {
        if (!parse_int(fd->val, 1, INT32_MAX, &x))
            return pg_api_fail(err, 400, "max_completion_tokens",
                               "'max_completion_tokens' must be an integer >= 1 (got '%.40s')",
                               fd->val);
        out->max_tokens = (int32_t)x;
    }
    if ((fd = find(f, "stream"))) {
        if (!strcmp(fd->val, "true") || !strcmp(fd->val, "True") || !strcmp(fd->val, "1"))
            out->stream = true;
        else if (strcmp(fd->val, "false") && strcmp(fd->val, "False") && strcmp(fd->val, "0"))
            return pg_api_fail(err, 400, "stream", "'stream' must be true or false (got '%.40s')",
                               fd->val);
    }
    for (int i = 0; i < f->n_fields; i++) {
        if (!is_list_key(f->fields[i].key)) continue;
        const char *v = f->fields[i].val;
        if (!strcmp(v, "segment")) continue;
        if (!strcmp(v, "word"))
            return pg_api_fail(err, 400, "timestamp_granularities[]",
                               "timestamp_granularities 'word' is not supported (only "
                               "'segment')");
        return pg_api_fail(err, 400, "timestamp_granularities[]",
                           "'timestamp_granularities[]' must be 'segment' (got '%.40s')", v);
    }
    return PAGODA_OK;
}
