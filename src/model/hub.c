/* Hugging Face hub client and cache: see hub.h. */
#include "model/hub.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <nettle/sha1.h>
#include <nettle/sha2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "model/hub_parse.h"
#include "model/hub_progress.h"
#include "model/mapped_file.h"

#define DEFAULT_ENDPOINT "https://huggingface.co"
#define MAX_API_BYTES (64u << 20)
#define TRANSFER_ATTEMPTS 3 /* per file and run: a cut transfer resumes with Range */

/* snprintf for paths and URLs: false when OUT was too small (truncated). */
static bool pathf(char *out, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool pathf(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < cap;
}

/* ------------------------------------------------------------ names */

static bool repo_part_ok(const char *s, size_t n) {
    if (n == 0 || n > 96 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.')
            return false;
    return true;
}

bool pg_hub_parse_ref(const char *model, pg_hub_ref *out) {
    memset(out, 0, sizeof *out);
    if (!model) return false;
    const char *slash = strchr(model, '/');
    if (!slash || !repo_part_ok(model, (size_t)(slash - model))) return false;
    const char *name = slash + 1;
    size_t n = strcspn(name, "@:");
    if (!repo_part_ok(name, n)) return false;
    const char *rest = name + n;
    const char *rev = NULL, *tag = NULL;
    size_t rev_len = 0;
    if (*rest == '@') {
        rev = rest + 1;
        rev_len = strcspn(rev, ":");
        if (!rev_len) return false;
        rest = rev + rev_len;
    }
    if (*rest == ':') {
        tag = rest + 1;
        if (!*tag || strchr(tag, ':') || strchr(tag, '@')) return false;
    }
    size_t repo_len = (size_t)(name + n - model);
    if (repo_len >= sizeof out->repo || rev_len >= sizeof out->revision ||
        (tag && strlen(tag) >= sizeof out->tag))
        return false;
    memcpy(out->repo, model, repo_len);
    if (rev) {
        memcpy(out->revision, rev, rev_len);
        for (size_t i = 0; i < rev_len; i++)
            if ((unsigned char)rev[i] < 0x20 || rev[i] == '@' || rev[i] == ' ') return false;
        /* it names a file under refs/: no way out of it (git refuses these too) */
        if (rev[0] == '/' || strstr(out->revision, "..") || rev[rev_len - 1] == '/') return false;
    } else {
        strcpy(out->revision, "main");
    }
    if (tag) {
        strcpy(out->tag, tag);
        if (!pg_hub_safe_filename(tag)) return false;
    }
    return true;
}

pagoda_status pg_hub_fold_options(const char *model, const char *revision, const char *gguf_file,
                                  char *out, size_t cap) {
    bool rev_given = revision && *revision, file_given = gguf_file && *gguf_file;
    struct stat st;
    pg_hub_ref ref;
    if ((!rev_given && !file_given) || stat(model, &st) == 0) {
        if (rev_given || file_given)
            PG_WARN("%s is a local path: --revision / --gguf-file do not apply", model);
        if ((size_t)snprintf(out, cap, "%s", model) >= cap)
            return pg_error(PAGODA_ERR_INVALID_ARG, "%s: name too long", model);
        return PAGODA_OK;
    }
    if (!pg_hub_parse_ref(model, &ref))
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "%s: --revision / --gguf-file need a Hugging Face repo id (org/name)",
                        model);
    bool had_rev = strchr(model, '@') != NULL;
    if (rev_given && had_rev && strcmp(ref.revision, revision))
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: --revision %s names another revision", model,
                        revision);
    if (file_given && ref.tag[0] && strcmp(ref.tag, gguf_file))
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: --gguf-file %s names another file", model,
                        gguf_file);
    int k = snprintf(out, cap, "%s@%s%s%s", ref.repo, rev_given ? revision : ref.revision,
                     (file_given || ref.tag[0]) ? ":" : "", file_given ? gguf_file : ref.tag);
    if (k < 0 || (size_t)k >= cap)
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: name too long", model);
    pg_hub_ref check;
    if (!pg_hub_parse_ref(out, &check))
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: bad --revision or --gguf-file", out);
    return PAGODA_OK;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

bool pg_hub_wanted_file(const char *name) {
    static const char *const FILES[] = {
        "config.json",           "generation_config.json",  "tokenizer.json",
        "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
        "chat_template.json",    "preprocessor_config.json"};
    if (strchr(name, '/')) return false; /* the model is the repo's top level */
    for (size_t i = 0; i < sizeof FILES / sizeof FILES[0]; i++)
        if (!strcmp(name, FILES[i])) return true;
    return ends_with(name, ".safetensors") || ends_with(name, ".safetensors.index.json");
}

bool pg_hub_gguf_matches(const char *name, const char *tag) {
    if (!ends_with(name, ".gguf")) return false;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (ends_with(tag, ".gguf")) return !strcmp(name, tag) || !strcmp(base, tag);
    size_t k = strlen(tag);
    if (!k) return false;
    for (const char *p = base; *p; p++) {
        if (strncasecmp(p, tag, k)) continue;
        bool before = p == base || strchr("-._", p[-1]);
        bool after = p[k] == '.' || p[k] == '-';
        if (before && after) return true;
    }
    return false;
}

/* ------------------------------------------------------------ environment */

static bool env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcasecmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") ||
                 !strcasecmp(v, "true"));
}

static void hf_home(char *out, size_t cap) {
    const char *home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"), *uhome = getenv("HOME");
    if (home && *home)
        snprintf(out, cap, "%s", home);
    else if (xdg && *xdg)
        snprintf(out, cap, "%s/huggingface", xdg);
    else
        snprintf(out, cap, "%s/.cache/huggingface", uhome && *uhome ? uhome : ".");
}

void pg_hub_cache_dir(char *out, size_t cap) {
    const char *hub = getenv("HF_HUB_CACHE");
    if (!hub || !*hub) hub = getenv("HUGGINGFACE_HUB_CACHE"); /* the older name */
    if (hub && *hub) {
        snprintf(out, cap, "%s", hub);
        return;
    }
    char home[PATH_MAX];
    hf_home(home, sizeof home);
    snprintf(out, cap, "%s/hub", home);
}

/* The token: HF_TOKEN, else the file HF_TOKEN_PATH, else $HF_HOME/token. */
static void read_token(char *out, size_t cap) {
    out[0] = 0;
    const char *t = getenv("HF_TOKEN");
    if (t && *t) {
        snprintf(out, cap, "%s", t);
    } else {
        char path[PATH_MAX];
        const char *tp = getenv("HF_TOKEN_PATH");
        if (tp && *tp) {
            snprintf(path, sizeof path, "%s", tp);
        } else {
            char home[PATH_MAX - 8];
            hf_home(home, sizeof home);
            snprintf(path, sizeof path, "%s/token", home);
        }
        FILE *f = fopen(path, "r");
        if (!f) return;
        size_t n = fread(out, 1, cap - 1, f);
        fclose(f);
        out[n] = 0;
    }
    size_t n = strlen(out);
    while (n && isspace((unsigned char)out[n - 1]))
        out[--n] = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)out[i] < 0x21) out[0] = 0; /* not a header value */
}

/* ------------------------------------------------------------ files */

/* mkdir -p of the directory part of PATH (everything before the last '/'). */
static pagoda_status mkdirs_for(const char *path) {
    char buf[PATH_MAX];
    if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf)
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: path too long", path);
    char *end = strrchr(buf, '/');
    if (!end || end == buf) return PAGODA_OK;
    *end = 0;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST)
            return pg_error(PAGODA_ERR_IO, "cannot create %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST)
        return pg_error(PAGODA_ERR_IO, "cannot create %s: %s", buf, strerror(errno));
    return PAGODA_OK;
}

static pagoda_status write_text(const char *path, const char *text) {
    pagoda_status s = mkdirs_for(path);
    if (s) return s;
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return pg_error(PAGODA_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    bool ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path)) {
        unlink(tmp);
        return pg_error(PAGODA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    }
    return PAGODA_OK;
}

static void read_line_file(const char *path, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(out, 1, cap - 1, f);
    fclose(f);
    out[n] = 0;
    while (n && isspace((unsigned char)out[n - 1]))
        out[--n] = 0;
}

static bool is_hex(const char *s, size_t n) {
    if (strlen(s) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i])) return false;
    return true;
}

/* ------------------------------------------------------------ the cache */

typedef struct hub_ctx {
    const pg_hub_ref *ref;
    char cache[PATH_MAX - 512];    /* $HF_HUB_CACHE */
    char repo_dir[PATH_MAX - 256]; /* .../models--org--name */
    char endpoint[512];
    char token[512];
    CURL *curl;
    char errbuf[CURL_ERROR_SIZE];
} hub_ctx;

/* The repo's *.gguf files below DIR (depth <= 2) matching TAG, or every
 * one when TAG is "": count and the first match's path. */
static int find_gguf_in(const char *dir, const char *rel, const char *tag, char *first, size_t cap,
                        int depth) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[PATH_MAX], r[PATH_MAX];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p) continue;
        snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
        if (pg_path_is_dir(p)) {
            if (depth < 2) count += find_gguf_in(p, r, tag, count ? NULL : first, cap, depth + 1);
            continue;
        }
        if (!ends_with(e->d_name, ".gguf") || !pg_path_is_file(p)) continue;
        if (*tag && !pg_hub_gguf_matches(r, tag)) continue;
        if (!count && first) snprintf(first, cap, "%s", p);
        count++;
    }
    closedir(d);
    return count;
}

/* A cached snapshot holds what a model needs: config.json and its weights
 * (every shard of the index, or a *.safetensors), or for a GGUF reference
 * exactly one matching .gguf (*gguf_path set). */
static bool snapshot_complete(const char *snap, const char *tag, char *gguf_path, size_t cap) {
    gguf_path[0] = 0;
    char p[PATH_MAX];
    if (*tag) return find_gguf_in(snap, "", tag, gguf_path, cap, 0) == 1;
    pathf(p, sizeof p, "%s/config.json", snap);
    if (!pg_path_is_file(p)) { /* a repo of one GGUF */
        return find_gguf_in(snap, "", "", gguf_path, cap, 0) == 1;
    }
    pathf(p, sizeof p, "%s/model.safetensors.index.json", snap);
    char *buf = NULL;
    if (pg_path_is_file(p)) {
        if (pg_read_small_file(p, MAX_API_BYTES, &buf, NULL)) {
            pg_clear_error();
            return false;
        }
        cJSON *j = cJSON_Parse(buf);
        free(buf);
        cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map");
        bool all = cJSON_IsObject(map) && map->child;
        for (cJSON *e = map ? map->child : NULL; all && e; e = e->next) {
            if (!cJSON_IsString(e) || !pg_hub_safe_filename(e->valuestring)) {
                all = false;
                break;
            }
            pathf(p, sizeof p, "%s/%s", snap, e->valuestring);
            all = pg_path_is_file(p);
        }
        cJSON_Delete(j);
        return all;
    }
    DIR *d = opendir(snap);
    if (!d) return false;
    bool any = false;
    struct dirent *e;
    while (!any && (e = readdir(d))) {
        pathf(p, sizeof p, "%s/%s", snap, e->d_name);
        any = ends_with(e->d_name, ".safetensors") && pg_path_is_file(p);
    }
    closedir(d);
    return any;
}

/* The commit a revision names in the cache: refs/<revision>, the revision
 * itself when a snapshot has that name, else (for "main" without refs, as
 * older caches were filled) the newest snapshot. "" when none. */
static void cached_commit(const hub_ctx *c, char *out, size_t cap) {
    const char *rev = c->ref->revision;
    char p[PATH_MAX];
    out[0] = 0;
    if (!strstr(rev, "..")) {
        pathf(p, sizeof p, "%s/refs/%s", c->repo_dir, rev);
        read_line_file(p, out, cap);
        if (strchr(out, '/') || !strcmp(out, ".") || !strcmp(out, "..")) out[0] = 0;
        if (out[0]) return;
    }
    if (!strchr(rev, '/') && strcmp(rev, ".") && strcmp(rev, "..")) {
        pathf(p, sizeof p, "%s/snapshots/%s", c->repo_dir, rev);
        if (pg_path_is_dir(p)) {
            snprintf(out, cap, "%s", rev);
            return;
        }
    }
    if (strcmp(rev, "main")) return;
    snprintf(p, sizeof p, "%s/snapshots", c->repo_dir);
    DIR *d = opendir(p);
    if (!d) return;
    time_t best = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char q[PATH_MAX + 300];
        snprintf(q, sizeof q, "%s/%s", p, e->d_name);
        struct stat st;
        if (stat(q, &st) == 0 && S_ISDIR(st.st_mode) && (!out[0] || st.st_mtime > best) &&
            strlen(e->d_name) < cap) {
            best = st.st_mtime;
            snprintf(out, cap, "%s", e->d_name);
        }
    }
    closedir(d);
}

static pagoda_status result_path(const pg_hub_ref *ref, const char *snap, const char *gguf,
                                 char *out, size_t cap, bool *is_gguf) {
    const char *path = gguf[0] ? gguf : snap;
    if (is_gguf) *is_gguf = gguf[0] != 0;
    if ((size_t)snprintf(out, cap, "%s", path) >= cap)
        return pg_error(PAGODA_ERR_INVALID_ARG, "model '%s': cache path too long", ref->repo);
    return PAGODA_OK;
}

/* ------------------------------------------------------------ HTTP */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_OK;
static void curl_init(void) {
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

typedef pg_hub_headers http_headers;

static size_t on_header(char *line, size_t size, size_t nitems, void *ud) {
    size_t n = size * nitems;
    pg_hub_header_line(ud, line, n);
    return n;
}

/* Common setup of one request on the context's handle. */
static struct curl_slist *setup(hub_ctx *c, const char *url, http_headers *h, bool follow) {
    CURL *k = c->curl;
    curl_easy_reset(k);
    pg_hub_headers_reset(h);
    c->errbuf[0] = 0;
    curl_easy_setopt(k, CURLOPT_URL, url);
    curl_easy_setopt(k, CURLOPT_ERRORBUFFER, c->errbuf);
    curl_easy_setopt(k, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(k, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(k, CURLOPT_FOLLOWLOCATION, follow ? 1L : 0L);
    curl_easy_setopt(k, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(k, CURLOPT_CONNECTTIMEOUT, 20L);
    curl_easy_setopt(k, CURLOPT_LOW_SPEED_LIMIT, 1L); /* stalled for a minute: give up */
    curl_easy_setopt(k, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(k, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(k, CURLOPT_USERAGENT, "pagoda/" PAGODA_VERSION);
    curl_easy_setopt(k, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(k, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    struct curl_slist *hdr = curl_slist_append(NULL, "Accept-Encoding: identity");
    if (hdr && c->token[0]) {
        /* a custom Authorization header is not sent to another host on a
         * redirect (curl >= 7.58 without CURLOPT_UNRESTRICTED_AUTH): the
         * CDN never sees the token */
        char line[600];
        snprintf(line, sizeof line, "Authorization: Bearer %s", c->token);
        struct curl_slist *t = curl_slist_append(hdr, line);
        if (t) hdr = t;
    }
    curl_easy_setopt(k, CURLOPT_HTTPHEADER, hdr);
    return hdr;
}

static pagoda_status net_error(hub_ctx *c, CURLcode rc, const char *url) {
    return pg_error(PAGODA_ERR_IO,
                    "model '%s': %s: %s (set HF_HUB_OFFLINE=1 to use the cache only)", c->ref->repo,
                    url, c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc));
}

/* One line for an HTTP error answer of the hub. */
static pagoda_status http_error(hub_ctx *c, const http_headers *h, const char *file) {
    const char *repo = c->ref->repo;
    const char *msg = h->error_message[0] ? h->error_message : NULL;
    char hub_says[300] = "";
    if (msg) snprintf(hub_says, sizeof hub_says, " (hub: %s)", msg);
    if (h->status == 401 || h->status == 403) {
        if (c->token[0])
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "model '%s': HTTP %ld: the token (HF_TOKEN) was refused or has no "
                            "access to this repo; a gated repo needs its terms accepted on the "
                            "hub%s",
                            repo, h->status, hub_says);
        return pg_error(PAGODA_ERR_INVALID_ARG,
                        "model '%s': HTTP %ld: the repo is gated or private (or does not "
                        "exist): set HF_TOKEN to a token with access%s",
                        repo, h->status, hub_says);
    }
    if (h->status == 404) {
        if (!strcmp(h->error_code, "RevisionNotFound"))
            return pg_error(PAGODA_ERR_NOT_FOUND, "model '%s': revision '%s' not found on %s%s",
                            repo, c->ref->revision, c->endpoint, hub_says);
        if (file && strcmp(h->error_code, "RepoNotFound"))
            return pg_error(PAGODA_ERR_NOT_FOUND,
                            "model '%s': file '%s' not found at revision "
                            "'%s'%s",
                            repo, file, c->ref->revision, hub_says);
        return pg_error(PAGODA_ERR_NOT_FOUND, "model '%s': repository not found on %s%s", repo,
                        c->endpoint, hub_says);
    }
    return pg_error(PAGODA_ERR_IO, "model '%s': %s%sHTTP %ld from the hub%s", repo,
                    file ? file : "", file ? ": " : "", h->status, hub_says);
}

/* GET the revision info: commit and file list (hub_parse.h). */
static pagoda_status api_revision(hub_ctx *c, pg_hub_info *info) {
    memset(info, 0, sizeof *info);
    char *rev = curl_easy_escape(c->curl, c->ref->revision, 0);
    char url[2048];
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s", c->endpoint, c->ref->repo,
             rev ? rev : "main");
    curl_free(rev);
    http_headers h;
    char *body = NULL;
    size_t body_len = 0;
    FILE *mem = open_memstream(&body, &body_len);
    if (!mem) return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    struct curl_slist *hdr = setup(c, url, &h, true);
    curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, mem); /* libcurl's default: fwrite */
    curl_easy_setopt(c->curl, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)MAX_API_BYTES);
    curl_easy_setopt(c->curl, CURLOPT_TIMEOUT, 120L);
    CURLcode rc = curl_easy_perform(c->curl);
    curl_slist_free_all(hdr);
    bool mem_ok = fclose(mem) == 0;
    if (rc != CURLE_OK || !mem_ok) {
        free(body);
        return rc != CURLE_OK ? net_error(c, rc, url)
                              : pg_error(PAGODA_ERR_NOMEM, "%s: out of memory", url);
    }
    curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &h.status);
    if (h.status != 200) {
        if (!h.error_message[0]) /* the hub's JSON {"error": "..."} */
            pg_hub_parse_error_body(body, body_len, h.error_message, sizeof h.error_message);
        free(body);
        return http_error(c, &h, NULL);
    }
    pagoda_status s = pg_hub_parse_info(body, body_len, info);
    free(body);
    if (s) {
        char why[256];
        snprintf(why, sizeof why, "%s", pg_last_error());
        return pg_error(s, "model '%s': %s: bad answer from the hub: %s", c->ref->repo, url, why);
    }
    if (info->n_unsafe)
        PG_WARN("model '%s': skipped %d file name%s of the revision info that are not safe "
                "relative paths",
                c->ref->repo, info->n_unsafe, info->n_unsafe == 1 ? "" : "s");
    return PAGODA_OK;
}

/* The resolve URL of FILE at COMMIT (each path segment escaped). */
static void resolve_url(hub_ctx *c, const char *commit, const char *file, char *url, size_t cap) {
    int n = snprintf(url, cap, "%s/%s/resolve/%s/", c->endpoint, c->ref->repo, commit);
    const char *s = file;
    while (*s && n > 0 && (size_t)n < cap) {
        size_t k = strcspn(s, "/");
        char *e = curl_easy_escape(c->curl, s, (int)k);
        n += snprintf(url + n, cap - (size_t)n, "%s%s", e ? e : "", s[k] == '/' ? "/" : "");
        curl_free(e);
        s += k + (s[k] == '/');
    }
}

/* HEAD of FILE: etag (normalized), expected size (-1 unknown). Relative
 * redirects (a renamed repo) are followed; the absolute one (LFS CDN) not. */
static pagoda_status head_file(hub_ctx *c, const char *commit, const char *file, char *etag,
                               size_t cap, long long *size) {
    char url[4096];
    resolve_url(c, commit, file, url, sizeof url);
    http_headers h;
    for (int hop = 0;; hop++) {
        struct curl_slist *hdr = setup(c, url, &h, false);
        curl_easy_setopt(c->curl, CURLOPT_NOBODY, 1L);
        curl_easy_setopt(c->curl, CURLOPT_TIMEOUT, 60L);
        CURLcode rc = curl_easy_perform(c->curl);
        curl_slist_free_all(hdr);
        if (rc != CURLE_OK) return net_error(c, rc, url);
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &h.status);
        if (h.status >= 300 && h.status < 400 && pg_hub_relative_location(h.location) && hop < 5) {
            char *slash = strstr(url, "://");
            slash = slash ? strchr(slash + 3, '/') : NULL;
            if (!slash) break;
            *slash = 0;
            char next[4096];
            pathf(next, sizeof next, "%s%s", url, h.location);
            snprintf(url, sizeof url, "%s", next);
            continue;
        }
        break;
    }
    if (h.status >= 400 || h.status < 200) return http_error(c, &h, file);
    char why[300];
    if (!pg_hub_head_result(&h, commit, etag, cap, size, why, sizeof why))
        return pg_error(PAGODA_ERR_FORMAT, "model '%s': %s: bad answer from the hub: %s",
                        c->ref->repo, file, why);
    return PAGODA_OK;
}

/* ------------------------------------------------------------ one file */

/* The running checksum of a blob as it is written: the sha256 an LFS etag
 * is, or the git blob sha1 of a small file (sha1("blob <size>\0" + data),
 * so the size must be known up front); none for other etags. */
typedef struct blob_digest {
    enum { DIGEST_NONE, DIGEST_SHA256, DIGEST_GIT_SHA1 } kind;
    long long size;
    struct sha256_ctx s256;
    struct sha1_ctx s1;
} blob_digest;

static void digest_reset(blob_digest *d) {
    if (d->kind == DIGEST_SHA256) {
        sha256_init(&d->s256);
    } else if (d->kind == DIGEST_GIT_SHA1) {
        char head[48];
        int k = snprintf(head, sizeof head, "blob %lld", d->size);
        sha1_init(&d->s1);
        sha1_update(&d->s1, (size_t)k + 1, (const uint8_t *)head); /* with the NUL */
    }
}

/* ETAG (normalized, any case) and SIZE (-1 unknown) choose the checksum. */
static void digest_init(blob_digest *d, const char *etag, long long size) {
    memset(d, 0, sizeof *d);
    d->size = size;
    if (is_hex(etag, 64))
        d->kind = DIGEST_SHA256;
    else if (is_hex(etag, 40) && size >= 0)
        d->kind = DIGEST_GIT_SHA1;
    digest_reset(d);
}

static void digest_update(blob_digest *d, const void *p, size_t n) {
    if (d->kind == DIGEST_SHA256)
        sha256_update(&d->s256, n, p);
    else if (d->kind == DIGEST_GIT_SHA1)
        sha1_update(&d->s1, n, p);
}

/* Lower-case hex of the digest so far (it resets the context). */
static void digest_hex(blob_digest *d, char *hex, size_t cap) {
    uint8_t b[SHA256_DIGEST_SIZE];
    size_t n = d->kind == DIGEST_SHA256 ? SHA256_DIGEST_SIZE : SHA1_DIGEST_SIZE;
    if (d->kind == DIGEST_SHA256)
        sha256_digest(&d->s256, SHA256_DIGEST_SIZE, b);
    else
        sha1_digest(&d->s1, SHA1_DIGEST_SIZE, b);
    for (size_t i = 0; i < n && 2 * i + 2 < cap; i++)
        snprintf(hex + 2 * i, 3, "%02x", b[i]);
}

/* Restart D over the bytes already in PATH (a partial download; none when
 * it does not exist). */
static pagoda_status digest_existing(blob_digest *d, const char *path) {
    digest_reset(d);
    if (d->kind == DIGEST_NONE) return PAGODA_OK;
    FILE *f = fopen(path, "rb");
    if (!f) return PAGODA_OK;
    enum { BUF = 1 << 20 };
    uint8_t *buf = malloc(BUF);
    if (!buf) {
        fclose(f);
        return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    size_t n;
    while ((n = fread(buf, 1, BUF, f)) > 0)
        digest_update(d, buf, n);
    bool err = ferror(f);
    fclose(f);
    free(buf);
    return err ? pg_error(PAGODA_ERR_IO, "%s: read error", path) : PAGODA_OK;
}

typedef struct transfer {
    FILE *f;
    long long offset; /* bytes already on disk when this attempt started */
    long long written;
    bool restarted; /* a 200 answered our Range: start over */
    hub_ctx *c;
    pg_hub_progress *progress;
    blob_digest *digest;   /* of every byte in the file */
    const http_headers *h; /* of the answer (Content-Range of a 206) */
    long long size;        /* the file's size announced by HEAD, -1 unknown */
    char bad_range[300];   /* why a 206 was refused ("" none) */
} transfer;

static size_t on_body_file(char *p, size_t size, size_t nitems, void *ud) {
    transfer *t = ud;
    size_t n = size * nitems;
    if (t->written == 0 && t->offset > 0 && !t->restarted) {
        long code = 0;
        curl_easy_getinfo(t->c->curl, CURLINFO_RESPONSE_CODE, &code);
        if (code == 200) { /* Range ignored: the whole file follows */
            if (fflush(t->f) || ftruncate(fileno(t->f), 0) || fseek(t->f, 0, SEEK_SET)) return 0;
            digest_reset(t->digest);
            t->offset = 0;
            t->restarted = true;
        } else if (code != 206) {
            return n; /* an error page: not written, the status is checked after */
        } else if (!pg_hub_check_partial(t->h, t->offset, t->size, t->bad_range,
                                         sizeof t->bad_range)) {
            return 0; /* not the rest of our file: stop (CURLE_WRITE_ERROR) */
        }
    } else if (t->written == 0 && t->offset == 0) {
        long code = 0;
        curl_easy_getinfo(t->c->curl, CURLINFO_RESPONSE_CODE, &code);
        if (code != 200) return n;
    }
    if (fwrite(p, 1, n, t->f) != n) return 0;
    digest_update(t->digest, p, n);
    t->written += (long long)n;
    return n;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    (void)ultotal;
    (void)ulnow;
    transfer *t = ud;
    long long total = dltotal > 0 ? t->offset + (long long)dltotal : -1;
    pg_hub_progress_update(t->progress, t->offset + (long long)dlnow, total);
    return 0;
}

/* Check a finished download against the size and, when the etag is one, the
 * checksum D computed while it was written; remove it if it does not match. */
static pagoda_status verify_blob(hub_ctx *c, const char *file, const char *tmp, long long size,
                                 const char *etag, blob_digest *d) {
    struct stat st;
    if (stat(tmp, &st)) return pg_error(PAGODA_ERR_IO, "%s: %s", tmp, strerror(errno));
    if (size >= 0 && (long long)st.st_size != size) {
        unlink(tmp);
        return pg_error(PAGODA_ERR_FORMAT,
                        "model '%s': %s: downloaded %lld bytes, the hub announced %lld; the "
                        "download was removed",
                        c->ref->repo, file, (long long)st.st_size, size);
    }
    if (d->kind == DIGEST_NONE) return PAGODA_OK; /* an opaque etag: the size was checked */
    char want[160], hex[2 * SHA256_DIGEST_SIZE + 1] = "";
    size_t n = strlen(etag);
    for (size_t i = 0; i <= n && i < sizeof want; i++)
        want[i] = (char)tolower((unsigned char)etag[i]);
    digest_hex(d, hex, sizeof hex);
    if (strcmp(hex, want)) {
        unlink(tmp);
        return pg_error(PAGODA_ERR_FORMAT,
                        "model '%s': %s: checksum mismatch (%s %s expected, got %s); the "
                        "download was removed, nothing was added to the snapshot",
                        c->ref->repo, file, d->kind == DIGEST_SHA256 ? "sha256" : "git sha1", want,
                        hex);
    }
    return PAGODA_OK;
}

/* GET FILE into TMP (appending from its current size), following redirects. */
static pagoda_status get_file(hub_ctx *c, const char *commit, const char *file, const char *tmp,
                              long long size, blob_digest *d, pg_hub_progress *pr) {
    char url[4096];
    resolve_url(c, commit, file, url, sizeof url);
    pagoda_status s = digest_existing(d, tmp); /* a partial file from an earlier run */
    if (s) return s;
    for (int attempt = 0; attempt < TRANSFER_ATTEMPTS; attempt++) {
        FILE *f = fopen(tmp, "ab");
        if (!f) return pg_error(PAGODA_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
        http_headers h;
        transfer t = {.f = f, .c = c, .progress = pr, .digest = d, .h = &h, .size = size};
        fseek(f, 0, SEEK_END);
        t.offset = ftell(f);
        if (size >= 0 && t.offset >= size) { /* all there: only the checks remain */
            fclose(f);
            return PAGODA_OK;
        }
        struct curl_slist *hdr = setup(c, url, &h, true);
        char range[64];
        if (t.offset > 0) {
            snprintf(range, sizeof range, "%lld-", t.offset);
            curl_easy_setopt(c->curl, CURLOPT_RANGE, range);
            PG_INFO("download: %s: resuming at byte %lld (%s)", file, t.offset, tmp);
        }
        curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body_file);
        curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &t);
        curl_easy_setopt(c->curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c->curl, CURLOPT_XFERINFODATA, &t);
        CURLcode rc = curl_easy_perform(c->curl);
        curl_slist_free_all(hdr);
        bool wrote_ok = fclose(f) == 0;
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &h.status);
        if (rc == CURLE_OK && h.status == 416 && t.offset > 0) {
            /* our partial file is not a prefix of this blob: start over */
            if (truncate(tmp, 0)) unlink(tmp);
            digest_reset(d);
            s = pg_error(PAGODA_ERR_IO, "model '%s': %s: HTTP 416", c->ref->repo, file);
            continue;
        }
        if (t.bad_range[0]) { /* a partial answer that does not continue our file */
            if (truncate(tmp, 0)) unlink(tmp);
            return pg_error(PAGODA_ERR_FORMAT,
                            "model '%s': %s: bad answer from the hub to a resumed download: %s; "
                            "the partial file was removed",
                            c->ref->repo, file, t.bad_range);
        }
        if (rc == CURLE_OK && h.status != 200 && h.status != 206) return http_error(c, &h, file);
        if (rc == CURLE_OK && wrote_ok) return PAGODA_OK;
        if (rc == CURLE_WRITE_ERROR || !wrote_ok)
            return pg_error(PAGODA_ERR_IO, "model '%s': cannot write %s: %s", c->ref->repo, tmp,
                            strerror(errno));
        struct stat st;
        long long have = stat(tmp, &st) == 0 ? (long long)st.st_size : 0;
        const char *why = c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc);
        if (attempt + 1 < TRANSFER_ATTEMPTS) {
            PG_WARN("download: %s: transfer stopped at byte %lld of %lld (%s); resuming", file,
                    have, size, why);
            continue;
        }
        s = pg_error(PAGODA_ERR_IO,
                     "model '%s': %s: transfer stopped at byte %lld of %lld (%s), %d times; the "
                     "partial file is kept: run again to resume from there",
                     c->ref->repo, file, have, size, why, TRANSFER_ATTEMPTS);
    }
    return s;
}

/* Make snapshots/<commit>/<file> a relative link to blobs/<etag>. */
static pagoda_status link_snapshot(hub_ctx *c, const char *commit, const char *file,
                                   const char *etag) {
    char link[PATH_MAX], target[PATH_MAX];
    if ((size_t)snprintf(link, sizeof link, "%s/snapshots/%s/%s", c->repo_dir, commit, file) >=
        sizeof link)
        return pg_error(PAGODA_ERR_INVALID_ARG, "%s: path too long", file);
    pagoda_status s = mkdirs_for(link);
    if (s) return s;
    size_t n = 0;
    target[0] = 0;
    for (const char *p = file; *p; p++) /* one "../" per directory of FILE */
        if (*p == '/') n += (size_t)snprintf(target + n, sizeof target - n, "../");
    snprintf(target + n, sizeof target - n, "../../blobs/%s", etag);
    unlink(link);
    if (symlink(target, link))
        return pg_error(PAGODA_ERR_IO, "cannot link %s: %s", link, strerror(errno));
    return PAGODA_OK;
}

static pagoda_status fetch_file(hub_ctx *c, const char *commit, const char *file, int index,
                                int count) {
    char snap_file[PATH_MAX];
    snprintf(snap_file, sizeof snap_file, "%s/snapshots/%s/%s", c->repo_dir, commit, file);
    if (pg_path_is_file(snap_file)) return PAGODA_OK; /* a commit's files never change */
    char etag[160];
    long long size = -1;
    pagoda_status s = head_file(c, commit, file, etag, sizeof etag, &size);
    if (s) return s;
    char blob[PATH_MAX], tmp[PATH_MAX + 16], lock[PATH_MAX];
    snprintf(blob, sizeof blob, "%s/blobs/%s", c->repo_dir, etag);
    snprintf(tmp, sizeof tmp, "%s.incomplete", blob);
    const char *base = strrchr(c->repo_dir, '/');
    pathf(lock, sizeof lock, "%s/.locks/%s/%s.lock", c->cache, base ? base + 1 : c->repo_dir, etag);
    if ((s = mkdirs_for(blob)) || (s = mkdirs_for(lock))) return s;
    /* huggingface_hub's FileLock takes the same flock on the same file */
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lfd < 0) return pg_error(PAGODA_ERR_IO, "cannot open %s: %s", lock, strerror(errno));
    if (flock(lfd, LOCK_EX | LOCK_NB)) {
        PG_INFO("download: %s: waiting for another process downloading it", file);
        flock(lfd, LOCK_EX);
    }
    if (!pg_path_is_file(blob)) {
        pg_hub_progress *pr = pg_hub_progress_start(file, index, count, size);
        blob_digest d;
        digest_init(&d, etag, size);
        s = get_file(c, commit, file, tmp, size, &d, pr);
        if (!s) s = verify_blob(c, file, tmp, size, etag, &d);
        if (!s && rename(tmp, blob))
            s = pg_error(PAGODA_ERR_IO, "cannot rename %s: %s", tmp, strerror(errno));
        pg_hub_progress_end(pr, s == PAGODA_OK);
    }
    if (!s) s = link_snapshot(c, commit, file, etag);
    close(lfd);
    return s;
}

/* ------------------------------------------------------------ selection */

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The repo files to fetch, into a NULL-terminated array of names owned by
 * INFO (`*gguf` set to the GGUF when the model is one). */
static pagoda_status select_files(hub_ctx *c, const pg_hub_options *opt, const pg_hub_info *info,
                                  const char ***out, const char **gguf) {
    *gguf = NULL;
    int n = info->n_files;
    const char **all = calloc((size_t)n + 1, sizeof *all);
    const char **sel = calloc((size_t)n + 1, sizeof *sel);
    if (!all || !sel) {
        free(all);
        free(sel);
        return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    }
    int n_all = 0, n_sel = 0, n_st = 0, n_gguf = 0, n_match = 0;
    const char *match = NULL, *only_gguf = NULL;
    for (int i = 0; i < n; i++) {
        const char *name = info->files[i]; /* safe names only (pg_hub_parse_info) */
        all[n_all++] = name;
        if (ends_with(name, ".safetensors") && !strchr(name, '/')) n_st++;
        if (ends_with(name, ".gguf")) {
            n_gguf++;
            only_gguf = name;
            if (c->ref->tag[0] && pg_hub_gguf_matches(name, c->ref->tag)) {
                n_match++;
                match = name;
            }
        }
    }
    qsort(all, (size_t)n_all, sizeof *all, cmp_str);
    pagoda_status s = PAGODA_OK;
    char list[700] = "";
    if (opt && opt->n_include) {
        for (int i = 0; i < n_all; i++)
            for (size_t k = 0; k < opt->n_include; k++)
                if (!fnmatch(opt->include[k], all[i], 0)) {
                    sel[n_sel++] = all[i];
                    break;
                }
        if (!n_sel)
            s = pg_error(PAGODA_ERR_NOT_FOUND,
                         "model '%s': no file at revision '%s' matches "
                         "--include %s%s",
                         c->ref->repo, c->ref->revision, opt->include[0],
                         opt->n_include > 1 ? " ..." : "");
    } else if (c->ref->tag[0] || (!n_st && n_gguf)) {
        if (c->ref->tag[0] && n_match == 1) {
            *gguf = match;
        } else if (!c->ref->tag[0] && n_gguf == 1) {
            *gguf = only_gguf;
        } else {
            size_t used = 0;
            for (int i = 0; i < n_all && used + 4 < sizeof list; i++)
                if (ends_with(all[i], ".gguf") &&
                    (!c->ref->tag[0] || n_match < 2 || pg_hub_gguf_matches(all[i], c->ref->tag)))
                    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                             used ? ", " : "", all[i]);
            if (!n_gguf)
                s = pg_error(PAGODA_ERR_NOT_FOUND,
                             "model '%s': no .gguf file in the repo for "
                             "'%s'",
                             c->ref->repo, c->ref->tag);
            else if (c->ref->tag[0] && !n_match)
                s = pg_error(PAGODA_ERR_NOT_FOUND,
                             "model '%s': no .gguf file matches '%s' (the repo has: %s)",
                             c->ref->repo, c->ref->tag, list);
            else
                s = pg_error(PAGODA_ERR_INVALID_ARG,
                             "model '%s': several .gguf files%s%s: pick one with org/name:FILE "
                             "or --gguf-file FILE (%s)",
                             c->ref->repo, c->ref->tag[0] ? " match " : "", c->ref->tag, list);
        }
        if (*gguf) sel[n_sel++] = *gguf;
    } else {
        for (int i = 0; i < n_all; i++)
            if (pg_hub_wanted_file(all[i])) sel[n_sel++] = all[i];
        bool has_config = false;
        for (int i = 0; i < n_sel; i++)
            has_config |= !strcmp(sel[i], "config.json");
        if (!n_st || !has_config)
            s = pg_error(PAGODA_ERR_NOT_FOUND,
                         "model '%s': the repo has no %s at revision '%s' (use --include to "
                         "download other files)",
                         c->ref->repo,
                         has_config ? "*.safetensors or *.gguf weights" : "config.json",
                         c->ref->revision);
    }
    free(all);
    if (s) {
        free(sel);
        return s;
    }
    *out = sel;
    return PAGODA_OK;
}

/* ------------------------------------------------------------ resolve */

static pagoda_status download(hub_ctx *c, const pg_hub_options *opt, char *snap, size_t snap_cap,
                              char *gguf_path, size_t gguf_cap) {
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return pg_error(PAGODA_ERR_INTERNAL, "curl_global_init: %s",
                        curl_easy_strerror(curl_init_rc));
    if (!(c->curl = curl_easy_init())) return pg_error(PAGODA_ERR_NOMEM, "curl_easy_init failed");
    pg_hub_info info;
    const char **files = NULL, *gguf = NULL;
    pagoda_status s = api_revision(c, &info);
    const char *commit = info.commit;
    if (!s) s = select_files(c, opt, &info, &files, &gguf);
    int count = 0;
    while (!s && files[count])
        count++;
    if (!s)
        PG_INFO("download: %s@%s (commit %.12s): %d file%s from %s", c->ref->repo, c->ref->revision,
                commit, count, count == 1 ? "" : "s", c->endpoint);
    for (int i = 0; !s && i < count; i++)
        s = fetch_file(c, commit, files[i], i + 1, count);
    if (!s && strcmp(c->ref->revision, commit)) {
        char ref[PATH_MAX];
        pathf(ref, sizeof ref, "%s/refs/%s", c->repo_dir, c->ref->revision); /* no "..": parse */
        s = write_text(ref, commit);
    }
    if (!s) {
        snprintf(snap, snap_cap, "%s/snapshots/%s", c->repo_dir, commit);
        gguf_path[0] = 0;
        if (gguf) pathf(gguf_path, gguf_cap, "%s/%s", snap, gguf);
    }
    free(files);
    pg_hub_info_free(&info);
    curl_easy_cleanup(c->curl);
    c->curl = NULL;
    return s;
}

pagoda_status pg_hub_resolve(const pg_hub_ref *ref, const pg_hub_options *opt, char *out,
                             size_t cap, bool *is_gguf) {
    hub_ctx *c = calloc(1, sizeof *c);
    if (!c) return pg_error(PAGODA_ERR_NOMEM, "out of memory");
    c->ref = ref;
    pg_hub_cache_dir(c->cache, sizeof c->cache);
    const char *slash = strchr(ref->repo, '/');
    snprintf(c->repo_dir, sizeof c->repo_dir, "%s/models--%.*s--%s", c->cache,
             (int)(slash - ref->repo), ref->repo, slash + 1);
    bool offline = env_true("HF_HUB_OFFLINE");
    char commit[256], snap[PATH_MAX], gguf[PATH_MAX];
    pagoda_status s = PAGODA_OK;
    cached_commit(c, commit, sizeof commit);
    bool cached = false, includes = opt && opt->n_include;
    gguf[0] = 0;
    if (commit[0]) {
        int w = snprintf(snap, sizeof snap, "%s/snapshots/%s", c->repo_dir, commit);
        cached = w > 0 && (size_t)w < sizeof snap && pg_path_is_dir(snap) &&
                 (includes || snapshot_complete(snap, ref->tag, gguf, sizeof gguf));
    }
    if (cached && (offline || !opt || !opt->refresh)) {
        s = result_path(ref, snap, gguf, out, cap, is_gguf);
    } else if (offline) {
        s = pg_error(PAGODA_ERR_NOT_FOUND,
                     "model '%s': not a path and %s in the Hugging Face cache (%s); HF_HUB_OFFLINE "
                     "is set, so nothing is downloaded",
                     ref->repo, commit[0] ? "incomplete" : "not", c->repo_dir);
    } else {
        const char *ep = getenv("HF_ENDPOINT");
        snprintf(c->endpoint, sizeof c->endpoint, "%s", ep && *ep ? ep : DEFAULT_ENDPOINT);
        size_t n = strlen(c->endpoint);
        while (n && c->endpoint[n - 1] == '/')
            c->endpoint[--n] = 0;
        read_token(c->token, sizeof c->token);
        s = download(c, opt, snap, sizeof snap, gguf, sizeof gguf);
        if (!s) s = result_path(ref, snap, gguf, out, cap, is_gguf);
    }
    free(c);
    return s;
}
