/* The environment report behind `pagoda env`: detected CPU and topology, ISA
 * features, the ISA level and kernel variants the dispatch table chose,
 * memory and huge pages, thread settings, and performance warnings. Lives in
 * the library (not the CLI) so tests can check it. */
#ifndef PAGODA_KERNELS_ENV_REPORT_H
#define PAGODA_KERNELS_ENV_REPORT_H

#include <stdio.h>

#include "base/cpu.h"
#include "kernels/dispatch.h"

/* Print the full report for this process (pg_cpu(), pg_kernels()) to f.
 * Plain text, one "  key  value" per line under section headers
 * ("cpu", "isa features", "isa level", "kernels", "memory", "threads",
 * "warnings"); each feature line reads "  <name> yes|no". */
void pg_env_report(FILE *f);

/* Print the performance warnings for `cpu` running kernel table `t`
 * ("  - <text>" lines) to f; returns how many were printed. Pure function of
 * its inputs, so tests can pass synthetic machines. */
int pg_env_warnings(const pg_cpu_info *cpu, const pg_kernel_table *t, FILE *f);

#endif
