/* Parsing of the Hugging Face hub's answers: see hub_parse.h. */
#include "model/hub_parse.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_INFO_BYTES (64u << 20)

static bool is_hex_n(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return s[n] == 0;
}

bool pg_hub_is_commit(const char *s) {
    return s && is_hex_n(s, PG_HUB_COMMIT_LEN);
}

bool pg_hub_normalize_etag(const char *value, char *out, size_t cap) {
    while (*value == ' ' || *value == '\t')
        value++;
    if ((value[0] == 'W' || value[0] == 'w') && value[1] == '/') value += 2;
    size_t n = strlen(value);
    while (n && (value[n - 1] == ' ' || value[n - 1] == '\t' || value[n - 1] == '\r' ||
                 value[n - 1] == '\n'))
        n--;
    if (n >= 2 && value[0] == '"' && value[n - 1] == '"') {
        value++;
        n -= 2;
    }
    if (!n || n >= cap || (n <= 2 && value[0] == '.')) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)value[i] < 0x21 || (unsigned char)value[i] == 0x7f || value[i] == '/' ||
            value[i] == '\\' || value[i] == '"')
            return false;
    memcpy(out, value, n);
    out[n] = 0;
    return true;
}

bool pg_hub_safe_filename(const char *name) {
    if (!name || !*name || name[0] == '/' || strlen(name) >= 1024) return false;
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f || *p == '\\') return false;
    const char *c = name;
    while (*c) {
        size_t n = strcspn(c, "/");
        if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
            return false;
        c += n;
        if (*c == '/') c++;
    }
    return name[strlen(name) - 1] != '/';
}

/* ------------------------------------------------------------ revision info */

void pg_hub_info_free(pg_hub_info *info) {
    if (!info) return;
    for (int i = 0; i < info->n_files; i++)
        free(info->files[i]);
    free(info->files);
    memset(info, 0, sizeof *info);
}

pagoda_status pg_hub_parse_info(const char *body, size_t len, pg_hub_info *out) {
    memset(out, 0, sizeof *out);
    if (!body || len > MAX_INFO_BYTES)
        return pg_error(PAGODA_ERR_FORMAT, "the revision info is empty or larger than 64 MiB");
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return pg_error(PAGODA_ERR_FORMAT, "the revision info is not a JSON object");
    }
    pagoda_status st = PAGODA_OK;
    cJSON *sha = cJSON_GetObjectItemCaseSensitive(j, "sha");
    cJSON *sib = cJSON_GetObjectItemCaseSensitive(j, "siblings");
    if (!cJSON_IsString(sha) || !pg_hub_is_commit(sha->valuestring)) {
        st =
            pg_error(PAGODA_ERR_FORMAT, "the revision info has no commit \"sha\" of 40 hex digits");
        goto done;
    }
    if (!cJSON_IsArray(sib)) {
        st = pg_error(PAGODA_ERR_FORMAT, "the revision info has no \"siblings\" array");
        goto done;
    }
    memcpy(out->commit, sha->valuestring, PG_HUB_COMMIT_LEN + 1);
    int n = cJSON_GetArraySize(sib);
    out->files = calloc((size_t)n + 1, sizeof *out->files);
    if (!out->files) {
        st = pg_error(PAGODA_ERR_NOMEM, "out of memory");
        goto done;
    }
    int i = 0;
    for (cJSON *e = sib->child; e; e = e->next, i++) {
        if (!cJSON_IsObject(e)) {
            st =
                pg_error(PAGODA_ERR_FORMAT, "the revision info's siblings[%d] is not an object", i);
            goto done;
        }
        cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "rfilename");
        if (!cJSON_IsString(r) || !pg_hub_safe_filename(r->valuestring)) {
            out->n_unsafe++;
            continue;
        }
        if (!(out->files[out->n_files] = strdup(r->valuestring))) {
            st = pg_error(PAGODA_ERR_NOMEM, "out of memory");
            goto done;
        }
        out->n_files++;
    }
done:
    cJSON_Delete(j);
    if (st) pg_hub_info_free(out);
    return st;
}

void pg_hub_parse_error_body(const char *body, size_t len, char *out, size_t cap) {
    out[0] = 0;
    if (!body || !len || len > MAX_INFO_BYTES) return;
    cJSON *j = cJSON_ParseWithLength(body, len);
    cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsString(e)) {
        snprintf(out, cap, "%s", e->valuestring);
        for (char *p = out; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f) *p = ' ';
    }
    cJSON_Delete(j);
}

/* ------------------------------------------------------------ headers */

void pg_hub_headers_reset(pg_hub_headers *h) {
    memset(h, 0, sizeof *h);
    h->linked_size = h->content_length = -1;
}

bool pg_hub_parse_size(const char *s, long long *out) {
    size_t n = strlen(s);
    if (n == 0 || n > 18) return false;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static void mark_bad(pg_hub_headers *h, const char *name) {
    if (!h->bad[0]) snprintf(h->bad, sizeof h->bad, "%s", name);
}

/* Header value LINE[k..n) without the surrounding blanks and CR LF into
 * OUT[cap]; false when it does not fit or holds a NUL or control byte. */
static bool header_value(const char *line, size_t n, size_t k, char *out, size_t cap) {
    const char *v = line + k;
    size_t m = n - k;
    while (m && (*v == ' ' || *v == '\t')) {
        v++;
        m--;
    }
    while (m && (v[m - 1] == '\r' || v[m - 1] == '\n' || v[m - 1] == ' ' || v[m - 1] == '\t'))
        m--;
    out[0] = 0;
    if (m >= cap) return false;
    for (size_t i = 0; i < m; i++)
        if ((unsigned char)v[i] < 0x20 && v[i] != '\t') return false;
    memcpy(out, v, m);
    out[m] = 0;
    return true;
}

enum { F_TEXT, F_SIZE, F_COMMIT };

#define FIELD(f) offsetof(pg_hub_headers, f), sizeof(((pg_hub_headers *)0)->f)
static const struct {
    const char *name; /* lower case, with the colon */
    size_t off, cap;
    int kind;
} HEADERS[] = {
    {"x-linked-etag:", FIELD(linked_etag), F_TEXT},
    {"etag:", FIELD(etag), F_TEXT},
    {"x-repo-commit:", FIELD(repo_commit), F_COMMIT},
    {"location:", FIELD(location), F_TEXT},
    {"content-range:", FIELD(content_range), F_TEXT},
    {"x-error-code:", FIELD(error_code), F_TEXT},
    {"x-error-message:", FIELD(error_message), F_TEXT},
    {"x-linked-size:", FIELD(linked_size), F_SIZE},
    {"content-length:", FIELD(content_length), F_SIZE},
};
#undef FIELD

/* "HTTP/1.1 206 Partial Content", "HTTP/2 200": the three-digit status. */
static long status_of(const char *line, size_t n) {
    size_t i = 5;
    while (i < n && line[i] != ' ')
        i++;
    if (i + 4 > n || line[i] != ' ') return 0;
    long s = 0;
    for (size_t k = i + 1; k < i + 4; k++) {
        if (line[k] < '0' || line[k] > '9') return 0;
        s = s * 10 + (line[k] - '0');
    }
    if (i + 4 < n && line[i + 4] != ' ' && line[i + 4] != '\r' && line[i + 4] != '\n') return 0;
    return s >= 100 ? s : 0;
}

void pg_hub_header_line(pg_hub_headers *h, const char *line, size_t n) {
    if (n > 5 && !strncmp(line, "HTTP/", 5)) { /* a new response (after a redirect) */
        pg_hub_headers_reset(h);
        h->status = status_of(line, n);
        if (!h->status) mark_bad(h, "status line");
        return;
    }
    for (size_t i = 0; i < sizeof HEADERS / sizeof HEADERS[0]; i++) {
        size_t k = strlen(HEADERS[i].name);
        if (n < k || strncasecmp(line, HEADERS[i].name, k)) continue;
        char *field = (char *)h + HEADERS[i].off;
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(k - 1), HEADERS[i].name);
        if (HEADERS[i].kind == F_SIZE) {
            char num[32];
            long long v;
            if (!header_value(line, n, k, num, sizeof num) || !pg_hub_parse_size(num, &v)) {
                mark_bad(h, name);
                v = -1;
            }
            memcpy(field, &v, sizeof v);
        } else if (!header_value(line, n, k, field, HEADERS[i].cap) ||
                   (HEADERS[i].kind == F_COMMIT && !pg_hub_is_commit(field))) {
            field[0] = 0;
            mark_bad(h, name);
        }
        return;
    }
}

bool pg_hub_parse_content_range(const char *v, long long *start, long long *end, long long *total) {
    if (strncasecmp(v, "bytes ", 6)) return false;
    v += 6;
    char a[24], b[24], c[24];
    size_t na = strspn(v, "0123456789");
    if (!na || na >= sizeof a || v[na] != '-') return false;
    memcpy(a, v, na);
    a[na] = 0;
    v += na + 1;
    size_t nb = strspn(v, "0123456789");
    if (!nb || nb >= sizeof b || v[nb] != '/') return false;
    memcpy(b, v, nb);
    b[nb] = 0;
    v += nb + 1;
    if (!pg_hub_parse_size(a, start) || !pg_hub_parse_size(b, end) || *start > *end) return false;
    if (!strcmp(v, "*")) {
        *total = -1;
        return true;
    }
    size_t nc = strspn(v, "0123456789");
    if (!nc || nc >= sizeof c || v[nc]) return false;
    memcpy(c, v, nc);
    c[nc] = 0;
    return pg_hub_parse_size(c, total) && *end < *total;
}

bool pg_hub_check_partial(const pg_hub_headers *h, long long offset, long long size, char *why,
                          size_t cap) {
    long long start, end, total;
    if (h->bad[0]) {
        snprintf(why, cap, "malformed %s header", h->bad);
        return false;
    }
    if (!h->content_range[0]) {
        snprintf(why, cap, "a partial answer (206) without Content-Range");
        return false;
    }
    if (!pg_hub_parse_content_range(h->content_range, &start, &end, &total)) {
        snprintf(why, cap, "malformed Content-Range '%s'", h->content_range);
        return false;
    }
    if (start != offset) {
        snprintf(why, cap, "Content-Range '%s' does not start at byte %lld, which was asked for",
                 h->content_range, offset);
        return false;
    }
    if (total >= 0 && end + 1 != total) {
        snprintf(why, cap, "Content-Range '%s' stops before the end of the file", h->content_range);
        return false;
    }
    if (size >= 0 && ((total >= 0 && total != size) || end + 1 != size)) {
        snprintf(why, cap, "Content-Range '%s' disagrees with the file size %lld announced",
                 h->content_range, size);
        return false;
    }
    if (h->content_length >= 0 && h->content_length != end - start + 1) {
        snprintf(why, cap, "Content-Length %lld disagrees with Content-Range '%s'",
                 h->content_length, h->content_range);
        return false;
    }
    return true;
}

bool pg_hub_relative_location(const char *loc) {
    if (!loc || loc[0] != '/' || loc[1] == '/' || loc[1] == '\\') return false;
    size_t n = 0;
    for (const char *p = loc; *p; p++, n++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f) return false;
    return n < 2048;
}

bool pg_hub_head_result(const pg_hub_headers *h, const char *commit, char *etag, size_t cap,
                        long long *size, char *why, size_t why_cap) {
    if (h->bad[0]) {
        snprintf(why, why_cap, "malformed %s header", h->bad);
        return false;
    }
    if (h->repo_commit[0] && (!commit || strcasecmp(h->repo_commit, commit))) {
        snprintf(why, why_cap, "the hub answered for commit %s, not %s", h->repo_commit,
                 commit ? commit : "(none)");
        return false;
    }
    const char *raw = h->linked_etag[0] ? h->linked_etag : h->etag;
    if (!pg_hub_normalize_etag(raw, etag, cap)) {
        snprintf(why, why_cap, "the hub sent no usable ETag ('%.100s')", raw);
        return false;
    }
    *size = h->linked_size >= 0 ? h->linked_size : (h->status == 200 ? h->content_length : -1);
    return true;
}
