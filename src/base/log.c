#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int g_level = -1;
static pg_log_sink g_sink;
static void *g_sink_ctx;

void pg_log_set_sink(pg_log_sink fn, void *ctx) {
    g_sink_ctx = ctx;
    g_sink = fn;
}

int pg_log_parse_level(const char *s) {
    if (!s) return -1;
    static const char *const names[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i < 5; i++)
        if (strcmp(s, names[i]) == 0) return i;
    if (strcmp(s, "warning") == 0) return PG_LOG_WARN;
    return -1;
}

pg_log_level pg_log_get_level(void) {
    int l = atomic_load_explicit(&g_level, memory_order_relaxed);
    if (l < 0) {
        l = pg_log_parse_level(getenv("PAGODA_LOG"));
        if (l < 0) l = PG_LOG_INFO;
        atomic_store(&g_level, l);
    }
    return (pg_log_level)l;
}

void pg_log_set_level(pg_log_level level) {
    atomic_store(&g_level, (int)level);
}

void pg_log(pg_log_level level, const char *fmt, ...) {
    if (level < pg_log_get_level()) return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "pagoda %c %02d:%02d:%02d.%03ld ", "DIWE"[level & 3],
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (g_sink) {
        g_sink(g_sink_ctx, level, line + n);
        return;
    }
    size_t len = strlen(line);
    line[len] = '\n';
    line[len + 1] = 0;
    fputs(line, stderr);
}
