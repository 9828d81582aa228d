/* Download progress: see hub_progress.h. */
#include "model/hub_progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

#define BAR_WIDTH 24

struct pg_hub_progress {
    const char *task;
    char name[64];
    int index, count;
    long long total, done, first; /* first: bytes on disk at start (a resume) */
    double t0, last_draw;
    double interval; /* seconds between plain lines */
    bool bar, periodic, drawn;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pg_hub_format_bytes(long long n, char *out, unsigned cap) {
    static const char *const UNITS[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%lld B", n);
    else
        snprintf(out, cap, "%.1f %s", v, UNITS[u]);
}

static bool env_true(const char *name) {
    const char *v = getenv(name);
    return v && (!strcasecmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") ||
                 !strcasecmp(v, "true"));
}

pg_hub_progress *pg_hub_progress_start(const char *name, int index, int count, long long total) {
    return pg_hub_progress_start_task("download", name, index, count, total);
}

pg_hub_progress *pg_hub_progress_start_task(const char *task, const char *name, int index,
                                            int count, long long total) {
    pg_hub_progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->task = task;
    size_t n = strlen(name);
    /* keep the end of a long name: it tells the shards apart */
    snprintf(p->name, sizeof p->name, "%s%s", n >= sizeof p->name ? "..." : "",
             n >= sizeof p->name ? name + n - (sizeof p->name - 4) : name);
    p->index = index;
    p->count = count;
    p->total = total;
    p->first = -1;
    p->t0 = p->last_draw = now_s();
    const char *term = getenv("TERM");
    bool quiet = env_true("HF_HUB_DISABLE_PROGRESS_BARS");
    p->bar = !quiet && pg_log_get_level() <= PG_LOG_INFO && isatty(STDERR_FILENO) &&
             !(term && !strcmp(term, "dumb"));
    p->periodic = !quiet && !p->bar;
    const char *iv = getenv("PAGODA_PROGRESS_INTERVAL");
    char *end = NULL;
    p->interval = iv && *iv ? strtod(iv, &end) : PG_HUB_PROGRESS_INTERVAL_S;
    if (!(p->interval > 0 && p->interval < 1e6) || (end && *end))
        p->interval = PG_HUB_PROGRESS_INTERVAL_S;
    return p;
}

static void draw(pg_hub_progress *p, double t) {
    char done[32], total[32], rate[32];
    double el = t - p->t0;
    long long got = p->done - (p->first > 0 ? p->first : 0);
    pg_hub_format_bytes(p->done, done, sizeof done);
    pg_hub_format_bytes(p->total, total, sizeof total);
    pg_hub_format_bytes(el > 0 ? (long long)((double)got / el) : 0, rate, sizeof rate);
    int pct = p->total > 0 ? (int)(100.0 * (double)p->done / (double)p->total) : 0;
    if (pct > 100) pct = 100;
    if (p->bar) {
        char bar[BAR_WIDTH + 1];
        int fill = p->total > 0 ? pct * BAR_WIDTH / 100 : 0;
        for (int i = 0; i < BAR_WIDTH; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[BAR_WIDTH] = 0;
        if (p->total > 0)
            fprintf(stderr, "\r[%d/%d] %-30s [%s] %3d%% %s / %s  %s/s\033[K", p->index, p->count,
                    p->name, bar, pct, done, total, rate);
        else
            fprintf(stderr, "\r[%d/%d] %-30s %s  %s/s\033[K", p->index, p->count, p->name, done,
                    rate);
        fflush(stderr);
        p->drawn = true;
    } else if (p->total > 0) {
        PG_INFO("%s: [%d/%d] %s: %d%% (%s of %s, %s/s)", p->task, p->index, p->count, p->name,
                pct, done, total, rate);
    } else {
        PG_INFO("%s: [%d/%d] %s: %s (%s/s)", p->task, p->index, p->count, p->name, done, rate);
    }
}

void pg_hub_progress_update(pg_hub_progress *p, long long done, long long total) {
    if (!p) return;
    if (total > 0) p->total = total;
    if (p->first < 0) p->first = done;
    p->done = done;
    if (!p->bar && !p->periodic) return;
    double t = now_s();
    if (t - p->last_draw < (p->bar ? 0.1 : p->interval)) return;
    p->last_draw = t;
    draw(p, t);
}

void pg_hub_progress_end(pg_hub_progress *p, bool ok) {
    if (!p) return;
    if (p->bar && (ok || p->drawn)) { /* the full bar stays on screen */
        if (ok) draw(p, now_s());
        fputc('\n', stderr);
    }
    if (ok) {
        char size[32], rate[32];
        double el = now_s() - p->t0;
        long long got = p->done - (p->first > 0 ? p->first : 0);
        pg_hub_format_bytes(p->total > 0 ? p->total : p->done, size, sizeof size);
        pg_hub_format_bytes(el > 0 ? (long long)((double)got / el) : 0, rate, sizeof rate);
        PG_INFO("%s: [%d/%d] %s: %s in %.1f s (%s/s)", p->task, p->index, p->count, p->name, size,
                el, rate);
    }
    free(p);
}
