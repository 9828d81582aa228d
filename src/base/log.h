/* Levelled logging to stderr. The level comes from PAGODA_LOG
 * (debug|info|warn|error; default info), read once on first use; tests and
 * the CLI may override it with pg_log_set_level. Lines look like
 * "pagoda I 12:34:56.789 loaded 48 tensors". Thread-safe (one fputs/line). */
#ifndef PAGODA_BASE_LOG_H
#define PAGODA_BASE_LOG_H

typedef enum pg_log_level {
    PG_LOG_DEBUG = 0,
    PG_LOG_INFO = 1,
    PG_LOG_WARN = 2,
    PG_LOG_ERROR = 3,
    PG_LOG_OFF = 4
} pg_log_level;

pg_log_level pg_log_get_level(void);
void pg_log_set_level(pg_log_level level);
/* Parse "debug"/"info"/"warn"/"error"/"off"; returns -1 if unknown. */
int pg_log_parse_level(const char *s);
void pg_log(pg_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Send lines (without the "pagoda W hh:mm:ss.mmm " prefix and newline) that
 * pass the level to fn instead of stderr; NULL restores stderr. For tests
 * that check a warning was given. Not synchronized with concurrent pg_log
 * calls: set it while no other thread logs. */
typedef void (*pg_log_sink)(void *ctx, pg_log_level level, const char *msg);
void pg_log_set_sink(pg_log_sink fn, void *ctx);

#define PG_DEBUG(...) pg_log(PG_LOG_DEBUG, __VA_ARGS__)
#define PG_INFO(...) pg_log(PG_LOG_INFO, __VA_ARGS__)
#define PG_WARN(...) pg_log(PG_LOG_WARN, __VA_ARGS__)
#define PG_ERROR(...) pg_log(PG_LOG_ERROR, __VA_ARGS__)

#endif
