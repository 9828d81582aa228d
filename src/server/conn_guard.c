/* Connection guard: request-read and keep-alive deadlines over MHD
 * connections, enforced by a watchdog thread (see conn_guard.h). */
#define _GNU_SOURCE
#include "server/conn_guard.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/status.h"

typedef enum phase {
    PH_READING, /* waiting for a request's line, headers or body */
    PH_HANDLING,
    PH_IDLE, /* kept alive between requests */
    PH_CLOSING,
} phase;

typedef struct gconn {
    pg_guard *g;
    struct gconn *prev, *next;
    int fd; /* our dup of the connection's socket; -1 if dup failed */
    phase ph;
    double deadline; /* CLOCK_MONOTONIC seconds; INFINITY = none */
    char peer[64];
} gconn;

struct pg_guard {
    double request_timeout, keepalive_timeout;
    int sndbuf;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    gconn *conns;
    double next_wake; /* when the watchdog wakes up next (under mu) */
    bool stop;
    uint64_t closed;
    pthread_t thread;
};

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Set a deadline (mu held) and wake the watchdog if it sleeps past it. */
static void set_deadline(gconn *gc, phase ph, double deadline) {
    gc->ph = ph;
    gc->deadline = deadline;
    if (deadline < gc->g->next_wake) pthread_cond_signal(&gc->g->cv);
}

/* Shut a connection down (mu held). The first few closings of one scan are
 * logged one by one, the rest counted (a flood must not flood the log). */
static void expire(pg_guard *g, gconn *gc, int *n_logged) {
    if (gc->ph == PH_READING) {
        if ((*n_logged)++ < 3)
            PG_INFO("http: closing the connection from %s: request not received within %.0f s "
                    "(--request-timeout)",
                    gc->peer, g->request_timeout);
    } else {
        PG_DEBUG("http: closing the idle keep-alive connection from %s after %.0f s", gc->peer,
                 g->keepalive_timeout);
    }
    if (gc->fd >= 0) shutdown(gc->fd, SHUT_RDWR);
    gc->ph = PH_CLOSING;
    gc->deadline = INFINITY;
    g->closed++;
}

static void *watchdog(void *arg) {
    pg_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double now = mono(), next = now + 1.0;
        int n_logged = 0;
        for (gconn *gc = g->conns; gc; gc = gc->next) {
            if (gc->deadline <= now)
                expire(g, gc, &n_logged);
            else if (gc->deadline < next)
                next = gc->deadline;
        }
        if (n_logged > 3)
            PG_INFO("http: closed %d more connections that sent no complete request within %.0f s",
                    n_logged - 3, g->request_timeout);
        g->next_wake = next;
        /* the condition variable runs on CLOCK_MONOTONIC (see pg_guard_create) */
        struct timespec ts;
        double whole = floor(next);
        ts.tv_sec = (time_t)whole;
        ts.tv_nsec = (long)((next - whole) * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

pagoda_status pg_guard_create(double request_timeout, double keepalive_timeout, int sndbuf,
                              pg_guard **out) {
    *out = NULL;
    pg_guard *g = calloc(1, sizeof *g);
    if (!g) return pg_error(PAGODA_ERR_NOMEM, "conn_guard: out of memory");
    g->request_timeout = request_timeout;
    g->keepalive_timeout = keepalive_timeout;
    g->sndbuf = sndbuf;
    g->next_wake = INFINITY;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&g->thread, NULL, watchdog, g)) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return pg_error(PAGODA_ERR_NOMEM, "conn_guard: cannot start the watchdog thread");
    }
    *out = g;
    return PAGODA_OK;
}

void pg_guard_free(pg_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    /* MHD_stop_daemon has closed (and notified) every connection; free any
     * left over defensively. */
    while (g->conns) {
        gconn *gc = g->conns;
        g->conns = gc->next;
        if (gc->fd >= 0) close(gc->fd);
        free(gc);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static void peer_name(struct MHD_Connection *c, char *buf, size_t cap) {
    snprintf(buf, cap, "?");
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return;
    const struct sockaddr *sa = ci->client_addr;
    char ip[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        snprintf(buf, cap, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        snprintf(buf, cap, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
    }
}

void pg_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode toe) {
    pg_guard *g = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        gconn *gc = calloc(1, sizeof *gc);
        *socket_context = gc;
        if (!gc) return; /* unguarded: MHD's idle timeout still applies */
        gc->g = g;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        gc->fd = ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
        if (ci && g->sndbuf > 0)
            setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &g->sndbuf, sizeof g->sndbuf);
        peer_name(c, gc->peer, sizeof gc->peer);
        pthread_mutex_lock(&g->mu);
        gc->next = g->conns;
        if (g->conns) g->conns->prev = gc;
        g->conns = gc;
        set_deadline(gc, PH_READING, mono() + g->request_timeout);
        pthread_mutex_unlock(&g->mu);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        gconn *gc = *socket_context;
        if (!gc) return;
        pthread_mutex_lock(&g->mu);
        if (gc->prev)
            gc->prev->next = gc->next;
        else
            g->conns = gc->next;
        if (gc->next) gc->next->prev = gc->prev;
        pthread_mutex_unlock(&g->mu);
        if (gc->fd >= 0) close(gc->fd);
        free(gc);
        *socket_context = NULL;
    }
}

static gconn *guard_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void *pg_guard_uri_log(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)cls;
    (void)uri;
    gconn *gc = guard_of(c);
    if (!gc) return NULL;
    pthread_mutex_lock(&gc->g->mu);
    /* The first request keeps the deadline set when the connection opened. */
    if (gc->ph == PH_IDLE || gc->ph == PH_HANDLING)
        set_deadline(gc, PH_READING, mono() + gc->g->request_timeout);
    pthread_mutex_unlock(&gc->g->mu);
    return NULL;
}

void pg_guard_request_read(struct MHD_Connection *c) {
    gconn *gc = guard_of(c);
    if (!gc) return;
    pthread_mutex_lock(&gc->g->mu);
    if (gc->ph != PH_CLOSING) set_deadline(gc, PH_HANDLING, INFINITY);
    pthread_mutex_unlock(&gc->g->mu);
}

void pg_guard_request_done(struct MHD_Connection *c, bool closing) {
    gconn *gc = guard_of(c);
    if (!gc) return;
    pthread_mutex_lock(&gc->g->mu);
    if (closing) {
        if (gc->fd >= 0) shutdown(gc->fd, SHUT_RDWR);
        gc->ph = PH_CLOSING;
        gc->deadline = INFINITY;
    } else if (gc->ph != PH_CLOSING) {
        set_deadline(gc, PH_IDLE, mono() + gc->g->keepalive_timeout);
    }
    pthread_mutex_unlock(&gc->g->mu);
}

uint64_t pg_guard_closed_count(pg_guard *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->closed;
    pthread_mutex_unlock(&g->mu);
    return n;
}

uint64_t pg_guard_raise_nofile(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return 1024;
    if (rl.rlim_cur != rl.rlim_max) {
        struct rlimit want = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) {
            PG_DEBUG("http: RLIMIT_NOFILE raised from %llu to %llu",
                     (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
            rl.rlim_cur = rl.rlim_max;
        }
    }
    return rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
}

uint64_t pg_guard_open_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 64;
    uint64_t n = 0;
    for (struct dirent *de; (de = readdir(d));)
        if (de->d_name[0] != '.') n++;
    closedir(d);
    return n;
}
