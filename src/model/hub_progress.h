/* Progress of one file download (model/hub.c), and of a model's loading
 * (packing, load-time quantization: model/linear.c, the same code under
 * another task name): a bar redrawn in place on a terminal (stderr a tty,
 * TERM not "dumb", log level info or lower), otherwise a log line every
 * PAGODA_PROGRESS_INTERVAL seconds (default PG_HUB_PROGRESS_INTERVAL_S);
 * both end with one line giving the
 * size and the mean rate. HF_HUB_DISABLE_PROGRESS_BARS (1/ON/YES/TRUE)
 * turns the bar and the periodic lines off (the final line stays). Lines
 * are info-level logs (none under --quiet / PAGODA_LOG=warn). */
#ifndef PAGODA_MODEL_HUB_PROGRESS_H
#define PAGODA_MODEL_HUB_PROGRESS_H

#include <stdbool.h>

#define PG_HUB_PROGRESS_INTERVAL_S 5.0

typedef struct pg_hub_progress pg_hub_progress;

/* Start reporting file NAME, number INDEX of COUNT, TOTAL bytes (-1 when
 * unknown). Returns NULL on allocation failure (the calls below then do
 * nothing). */
pg_hub_progress *pg_hub_progress_start(const char *name, int index, int count, long long total);
/* The same for task TASK ("download" for the above; "load"): the word that
 * starts the log lines. TASK must outlive P. */
pg_hub_progress *pg_hub_progress_start_task(const char *task, const char *name, int index,
                                            int count, long long total);
/* DONE bytes of TOTAL (-1: keep the total given so far) are on disk. Cheap:
 * redraws at most ten times a second. */
void pg_hub_progress_update(pg_hub_progress *p, long long done, long long total);
/* The transfer ended (OK: complete and verified); frees P. */
void pg_hub_progress_end(pg_hub_progress *p, bool ok);

/* "12.3 MiB"-style size of N bytes into OUT. */
void pg_hub_format_bytes(long long n, char *out, unsigned cap);

#endif
