/* CPU lists, the process's allowed CPUs, physical-core selection and thread
 * pinning (Linux: sched_getaffinity / pthread_setaffinity_np and the sysfs
 * topology files).
 *
 * A CPU list is the Linux "cpulist" syntax (see cpuset(7), "List format"),
 * also used by taskset -c and PAGODA_CPUS:
 *     list  := item ("," item)*
 *     item  := N | N "-" M | N "-" M ":" S      (S = stride >= 1)
 * N, M are decimal logical CPU ids, N <= M, each < PG_CPU_MAX. Spaces around
 * items are allowed. "0-3,8,10-11" = {0,1,2,3,8,10,11}; "0-7:2" = {0,2,4,6}.
 * Parsed lists are sorted ascending without duplicates. */
#ifndef PAGODA_BASE_AFFINITY_H
#define PAGODA_BASE_AFFINITY_H

#include <stddef.h>

#include "base/status.h"

/* Highest CPU id + 1 we handle: glibc's CPU_SETSIZE. */
#define PG_CPU_MAX 1024

/* Parse the CPU list `s` into `cpus` (room for `cap` ids), sorted ascending,
 * duplicates removed; *n gets the count (>= 1). `what` names the source in
 * error messages (e.g. "PAGODA_CPUS"). Errors: PAGODA_ERR_INVALID_ARG with a
 * message naming the offending text and its byte offset, e.g.
 * "PAGODA_CPUS: '3-1' at offset 0: range end 1 is below its start 3";
 * PAGODA_ERR_LIMIT if more than `cap` CPUs. */
pagoda_status pg_cpulist_parse(const char *what, const char *s, int *cpus, int cap, int *n);

/* Write `cpus[0..n)` (ascending) as a compact list ("0-3,8,10-11") into buf
 * (always NUL-terminated; truncated with "..." if `cap` is too small).
 * Returns buf. n == 0 gives "". */
char *pg_cpulist_format(const int *cpus, int n, char *buf, size_t cap);

/* The logical CPUs the process may run on, ascending, into cpus (room for
 * `cap`); *n gets the count. This is the main thread's sched_getaffinity
 * mask captured when the library is loaded (a constructor), so it is not
 * narrowed by later pinning of the calling thread (pg_cpu_pin_self, the
 * pool's caller pinning); falls back to the calling thread's mask.
 * Errors: PAGODA_ERR_INTERNAL if the syscall fails. */
pagoda_status pg_cpu_allowed(int *cpus, int cap, int *n);

/* Keep one logical CPU per physical core: of `cpus[0..n)` (ascending) keep
 * the lowest-numbered CPU of each (physical_package_id, core_id) pair read
 * from <sysfs>/cpu<N>/topology/, sysfs = "/sys/devices/system/cpu" when NULL
 * (tests pass a fake tree). Writes the kept CPUs to `out` (room for n; may
 * alias cpus) in ascending order and returns their count. A CPU whose
 * topology files cannot be read counts as its own core. */
int pg_cpu_physical_cores(const char *sysfs, const int *cpus, int n, int *out);

/* Restrict the calling thread to cpus[0..n) (sched_setaffinity; threads it
 * creates later inherit the mask) and make that set what pg_cpu_allowed
 * returns from now on, so thread pools created afterwards place their
 * workers inside it. Used to bind a tensor-parallel rank to its NUMA node
 * (base/numa.h); call it before creating pools. Errors: PAGODA_ERR_INVALID_ARG
 * (n < 1 or a CPU id out of range), PAGODA_ERR_INTERNAL if the kernel refuses
 * (no CPU of the set is online and allowed). */
pagoda_status pg_cpu_restrict(const int *cpus, int n);

/* Pin the calling thread to logical CPU `cpu`. Errors: PAGODA_ERR_INVALID_ARG
 * if cpu is out of range; PAGODA_ERR_INTERNAL if the kernel refuses (the CPU
 * is offline or outside the allowed set). */
pagoda_status pg_cpu_pin_self(int cpu);

#endif
