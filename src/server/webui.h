/* The web chat page served at "/" by `pagoda serve` (issue 20): static
 * HTML/CSS/JS from src/server/webui/, compiled into the binary by
 * cmake/embed_webui.cmake (a generated webui_assets.c in the build tree).
 * See docs/ARCHITECTURE.md "Web chat page". */
#ifndef PAGODA_SERVER_WEBUI_H
#define PAGODA_SERVER_WEBUI_H

#include <stdbool.h>
#include <stddef.h>

#include <microhttpd.h>

typedef struct pg_webui_asset {
    const char *path;          /* URL path: "/" (index.html) or "/webui/NAME" */
    const char *content_type;  /* e.g. "text/javascript; charset=utf-8" */
    const unsigned char *data; /* the file's bytes (followed by a NUL not counted) */
    size_t size;               /* bytes */
    const char *etag;          /* quoted strong ETag: the file's SHA-256, 16 hex digits */
} pg_webui_asset;

/* Every asset, generated at build time (pg_webui_n_assets entries). */
extern const pg_webui_asset pg_webui_assets[];
extern const size_t pg_webui_n_assets;

/* The Content-Security-Policy every asset is sent with: scripts, styles,
 * images and fetches from the page's own origin only; no inline script, no
 * plugins, no framing, no form posts, no <base>. */
#define PG_WEBUI_CSP                                                                               \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "                 \
    "frame-ancestors 'none'"

/* The asset at URL path `url` (exact match, query string already removed
 * by MHD), or NULL. */
const pg_webui_asset *pg_webui_find(const char *url);

/* Answer GET/HEAD of asset `a`: 200 with the body, or 304 without one when
 * the request's If-None-Match carries the asset's ETag. Headers:
 * Content-Type, Content-Security-Policy (PG_WEBUI_CSP),
 * X-Content-Type-Options: nosniff, Referrer-Policy: no-referrer,
 * X-Frame-Options: DENY, Cache-Control: no-cache (the browser keeps a copy
 * and revalidates it: a new build's page is never stale) and ETag. Returns
 * MHD_NO only when MHD cannot build or queue the response. */
enum MHD_Result pg_webui_send(struct MHD_Connection *c, const pg_webui_asset *a);

#endif
