/* The environment report behind `pagoda env`: detected CPU and topology, ISA
 * features, the ISA level and kernel variants the dispatch table chose,
 * memory and huge pages, thread settings, and the environment check's
 * findings (what costs speed, how much, and the fix). Lives in
 * the library (not the CLI) so tests can check it. */
#ifndef PAGODA_KERNELS_ENV_REPORT_H
#define PAGODA_KERNELS_ENV_REPORT_H

#include <stdio.h>

#include <stdbool.h>
#include <stdint.h>

#include "base/cpu.h"
#include "base/env_check.h"
#include "kernels/dispatch.h"

/* Print the full report for this process (pg_cpu(), pg_kernels()) to f.
 * Plain text, one "  key  value" per line under section headers
 * ("cpu", "isa features", "isa level", "kernels", "memory", "threads",
 * "findings"); each feature line reads "  <name> yes|no". The findings are
 * pg_env_findings(0, false) printed by pg_envchk_print. */
void pg_env_report(FILE *f);

/* Run the environment check (base/env_check.h) on this process: pg_cpu(),
 * the level of pg_kernels(), the default pool's threads, CPUs and block
 * time (creating the pool if nothing has yet), the affinity mask captured
 * at load (pg_cpu_allowed), files under $PAGODA_SYSFS_ROOT /
 * $PAGODA_PROCFS_ROOT (default /sys, /proc). model_bytes: weights + KV
 * cache + workspace resident (pagoda_engine_resident_bytes summed over the
 * engines; 0 without a model: no NUMA memory check). speculation: whether
 * speculative decoding is on. Writes up to cap findings, returns the count. */
int pg_env_findings(uint64_t model_bytes, bool speculation, pg_envchk_finding *out, int cap);

/* pg_env_findings, each logged as a warning (pg_envchk_log): what `serve`
 * and `generate` call once at start, after the engines are created.
 * Returns the count. */
int pg_env_log_findings(uint64_t model_bytes, bool speculation);

#endif
