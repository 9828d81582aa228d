/* Serving the web chat page (server/webui.h). */
#include "server/webui.h"

#include <string.h>

const pg_webui_asset *pg_webui_find(const char *url) {
    if (!url) return NULL;
    for (size_t i = 0; i < pg_webui_n_assets; i++)
        if (!strcmp(url, pg_webui_assets[i].path)) return &pg_webui_assets[i];
    return NULL;
}

/* True when an If-None-Match header value lists `etag` (or is "*"). */
static bool etag_matches(const char *inm, const char *etag) {
    if (!inm) return false;
    size_t n = strlen(etag);
    for (const char *p = inm; *p;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p) break;
        if (*p == '*') return true;
        if (!strncmp(p, "W/", 2)) p += 2; /* weak comparison, as RFC 9110 13.1.2 asks */
        if (!strncmp(p, etag, n) && (p[n] == 0 || p[n] == ',' || p[n] == ' ')) return true;
        while (*p && *p != ',')
            p++;
    }
    return false;
}

enum MHD_Result pg_webui_send(struct MHD_Connection *c, const pg_webui_asset *a) {
    const char *inm =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    bool fresh = etag_matches(inm, a->etag);
    struct MHD_Response *r = MHD_create_response_from_buffer(
        fresh ? 0 : a->size, fresh ? NULL : (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    if (!fresh) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, a->etag);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "Content-Security-Policy", PG_WEBUI_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "X-Frame-Options", "DENY");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    enum MHD_Result ret = MHD_queue_response(c, fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}
