/* Connection guard of `pagoda serve`: deadlines that libmicrohttpd (MHD)
 * does not enforce by itself, and the file-descriptor budget.
 *
 * MHD's MHD_OPTION_CONNECTION_TIMEOUT is an IDLE timeout (seconds since the
 * last byte moved), so a client that trickles its headers or body one byte
 * at a time (slowloris) keeps its connection and thread forever. The guard
 * adds per-connection deadlines, checked by one watchdog thread:
 *   - reading a request: headers + body must all arrive within
 *     request_timeout seconds of the connection opening (first request) or
 *     of the request line arriving (a later request on a kept-alive one);
 *   - idle keep-alive: a connection with no request in progress is closed
 *     keepalive_timeout seconds after its last response;
 *   - handling a request (generation, streaming): no guard deadline; the
 *     server's own code and MHD's idle timeout cover that phase.
 * A deadline that passes shuts the socket down (shutdown(2) on a dup of the
 * connection's descriptor, so the number can never be reused under us);
 * MHD's connection thread then sees EOF and closes the connection.
 *
 * Wiring (server.c): pg_guard_notify as MHD_OPTION_NOTIFY_CONNECTION,
 * pg_guard_uri_log as MHD_OPTION_URI_LOG_CALLBACK (it returns NULL, so the
 * access handler still sees *con_cls == NULL on its first call), and
 * pg_guard_request_read / pg_guard_request_done from the access handler and
 * the request-completed callback. All functions are thread-safe. */
#ifndef PAGODA_SERVER_CONN_GUARD_H
#define PAGODA_SERVER_CONN_GUARD_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "pagoda.h"

typedef struct pg_guard pg_guard;

/* Start the watchdog thread. Timeouts in seconds (> 0); sndbuf > 0 sets
 * SO_SNDBUF (bytes) of every connection's socket (0: the kernel's
 * autotuning, up to net.ipv4.tcp_wmem's maximum). Errors: NOMEM. */
pagoda_status pg_guard_create(double request_timeout, double keepalive_timeout, int sndbuf,
                              pg_guard **out);

/* Stop the watchdog. Call after MHD_stop_daemon (every connection closed). */
void pg_guard_free(pg_guard *g);

/* MHD_NotifyConnectionCallback (cls = the guard): registers a started
 * connection (reading deadline from now) and forgets a closed one. */
void pg_guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode toe);

/* MHD URI log callback (cls = the guard): a request line arrived. On a
 * kept-alive connection this starts the next request's reading deadline.
 * Returns NULL (the initial *con_cls). */
void *pg_guard_uri_log(void *cls, const char *uri, struct MHD_Connection *c);

/* The request's headers and body have all arrived: no deadline while it is
 * handled. */
void pg_guard_request_read(struct MHD_Connection *c);

/* The request is over: the response was sent (the idle keep-alive deadline
 * starts now), or MHD is closing the connection (closing: timeout, error,
 * client gone, shutdown). A closing connection is shut down at once: the
 * guard's dup of the socket must not keep it open (no FIN) until MHD's
 * close notification. */
void pg_guard_request_done(struct MHD_Connection *c, bool closing);

/* Connections closed by a guard deadline since pg_guard_create. */
uint64_t pg_guard_closed_count(pg_guard *g);

/* Raise the RLIMIT_NOFILE soft limit to the hard limit and return the
 * resulting soft limit (the unchanged one when raising fails). */
uint64_t pg_guard_raise_nofile(void);

/* Descriptors open in this process now (counts /proc/self/fd; 64 if that
 * cannot be read). */
uint64_t pg_guard_open_fds(void);

#endif
