/* CPU lists, allowed set, physical cores, pinning. See affinity.h. */
#define _GNU_SOURCE
#include "base/affinity.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
static bool is_space(char c) {
    return c == ' ' || c == '\t';
}

/* Read a decimal number at s[*i]; advances *i. Returns -1 (with error set)
 * if there is no digit there or the value reaches PG_CPU_MAX. */
static long parse_num(const char *what, const char *s, size_t *i, const char *role) {
    size_t start = *i;
    if (!is_digit(s[start])) {
        if (s[start] == '\0')
            pg_error(PAGODA_ERR_INVALID_ARG, "%s: '%s' ends at offset %zu where %s was expected",
                     what, s, start, role);
        else
            pg_error(PAGODA_ERR_INVALID_ARG, "%s: '%s' at offset %zu: expected %s, found '%c'",
                     what, s, start, role, s[start]);
        return -1;
    }
    long v = 0;
    while (is_digit(s[*i])) {
        if (v < 100000000) v = v * 10 + (s[*i] - '0');
        (*i)++;
    }
    if (v >= PG_CPU_MAX && strcmp(role, "a stride") != 0) {
        pg_error(PAGODA_ERR_INVALID_ARG, "%s: '%s' at offset %zu: CPU %ld is out of range (max %d)",
                 what, s, start, v, PG_CPU_MAX - 1);
        return -1;
    }
    return v;
}

pagoda_status pg_cpulist_parse(const char *what, const char *s, int *cpus, int cap, int *n) {
    if (!what) what = "cpu list";
    *n = 0;
    if (!s) return pg_error(PAGODA_ERR_INVALID_ARG, "%s: empty CPU list", what);
    bool seen[PG_CPU_MAX];
    memset(seen, 0, sizeof seen);
    size_t i = 0;
    bool any = false;
    for (;;) {
        while (is_space(s[i]))
            i++;
        size_t item = i;
        if (s[i] == ',' || s[i] == '\0') {
            if (s[i] == '\0' && !any)
                return pg_error(PAGODA_ERR_INVALID_ARG, "%s: empty CPU list", what);
            return pg_error(PAGODA_ERR_INVALID_ARG, "%s: '%s' at offset %zu: empty item", what, s,
                            item);
        }
        long lo = parse_num(what, s, &i, "a CPU number");
        if (lo < 0) return PAGODA_ERR_INVALID_ARG;
        long hi = lo, stride = 1;
        if (s[i] == '-') {
            i++;
            hi = parse_num(what, s, &i, "a range end");
            if (hi < 0) return PAGODA_ERR_INVALID_ARG;
            if (hi < lo)
                return pg_error(PAGODA_ERR_INVALID_ARG,
                                "%s: '%s' at offset %zu: range end %ld is below its start %ld",
                                what, s, item, hi, lo);
            if (s[i] == ':') {
                i++;
                stride = parse_num(what, s, &i, "a stride");
                if (stride < 0) return PAGODA_ERR_INVALID_ARG;
                if (stride == 0)
                    return pg_error(PAGODA_ERR_INVALID_ARG,
                                    "%s: '%s' at offset %zu: stride must be at least 1", what, s,
                                    item);
            }
        }
        for (long c = lo; c <= hi; c += stride)
            seen[c] = true;
        any = true;
        while (is_space(s[i]))
            i++;
        if (s[i] == '\0') break;
        if (s[i] != ',')
            return pg_error(PAGODA_ERR_INVALID_ARG,
                            "%s: '%s' at offset %zu: expected ',' or end of list, found '%c'", what,
                            s, i, s[i]);
        i++;
    }
    int count = 0;
    for (int c = 0; c < PG_CPU_MAX; c++) {
        if (!seen[c]) continue;
        if (count == cap)
            return pg_error(PAGODA_ERR_LIMIT, "%s: '%s' lists more than %d CPUs", what, s, cap);
        cpus[count++] = c;
    }
    *n = count;
    return PAGODA_OK;
}

char *pg_cpulist_format(const int *cpus, int n, char *buf, size_t cap) {
    if (cap == 0) return buf;
    buf[0] = '\0';
    size_t len = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && cpus[j + 1] == cpus[j] + 1)
            j++;
        char item[32];
        if (j == i)
            snprintf(item, sizeof item, "%s%d", i ? "," : "", cpus[i]);
        else
            snprintf(item, sizeof item, "%s%d-%d", i ? "," : "", cpus[i], cpus[j]);
        size_t il = strlen(item);
        if (len + il + 1 > cap) {
            /* Truncate: end with "..." if it fits. */
            if (cap >= 4) {
                size_t at = len + 3 < cap ? len : cap - 4;
                memcpy(buf + at, "...", 4);
            }
            return buf;
        }
        memcpy(buf + len, item, il + 1);
        len += il;
        i = j + 1;
    }
    return buf;
}

/* The process's mask at load time (before anything pins threads). */
static cpu_set_t g_startup_set;
static int g_startup_ok;

__attribute__((constructor)) static void capture_startup_affinity(void) {
    CPU_ZERO(&g_startup_set);
    g_startup_ok = sched_getaffinity(0, sizeof g_startup_set, &g_startup_set) == 0 &&
                   CPU_COUNT(&g_startup_set) > 0;
}

pagoda_status pg_cpu_allowed(int *cpus, int cap, int *n) {
    *n = 0;
    cpu_set_t set = g_startup_set;
    if (!g_startup_ok) {
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof set, &set) != 0)
            return pg_error(PAGODA_ERR_INTERNAL, "sched_getaffinity: %s", strerror(errno));
    }
    int count = 0;
    for (int c = 0; c < PG_CPU_MAX && c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        if (count == cap)
            return pg_error(PAGODA_ERR_LIMIT, "allowed CPU set has more than %d CPUs", cap);
        cpus[count++] = c;
    }
    *n = count;
    return PAGODA_OK;
}

/* Read one small integer file; -1 if missing or unreadable. */
static long read_topology(const char *sysfs, int cpu, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/cpu%d/topology/%s", sysfs, cpu, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long v = -1;
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

int pg_cpu_physical_cores(const char *sysfs, const int *cpus, int n, int *out) {
    if (!sysfs) sysfs = "/sys/devices/system/cpu";
    /* (package, core) of each kept CPU; n is at most PG_CPU_MAX. */
    long pkg[PG_CPU_MAX], core[PG_CPU_MAX];
    int kept = 0;
    for (int i = 0; i < n && i < PG_CPU_MAX; i++) {
        int c = cpus[i];
        long p = read_topology(sysfs, c, "physical_package_id");
        long k = read_topology(sysfs, c, "core_id");
        bool dup = false;
        if (p >= 0 && k >= 0)
            for (int j = 0; j < kept && !dup; j++)
                dup = pkg[j] == p && core[j] == k;
        if (dup) continue;
        pkg[kept] = p;
        core[kept] = k;
        out[kept++] = c; /* kept <= i, so writing in place is safe */
    }
    return kept;
}

pagoda_status pg_cpu_restrict(const int *cpus, int n) {
    if (n < 1) return pg_error(PAGODA_ERR_INVALID_ARG, "restrict: empty CPU set");
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++) {
        if (cpus[i] < 0 || cpus[i] >= PG_CPU_MAX || cpus[i] >= CPU_SETSIZE)
            return pg_error(PAGODA_ERR_INVALID_ARG, "restrict: CPU %d is out of range (max %d)",
                            cpus[i], PG_CPU_MAX - 1);
        CPU_SET(cpus[i], &set);
    }
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        char list[256];
        return pg_error(PAGODA_ERR_INTERNAL, "restrict: cannot bind to CPUs %s: %s",
                        pg_cpulist_format(cpus, n, list, sizeof list), strerror(errno));
    }
    /* the kernel drops offline / disallowed CPUs: keep what it applied */
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        g_startup_set = set;
        g_startup_ok = 1;
    }
    return PAGODA_OK;
}

pagoda_status pg_cpu_pin_self(int cpu) {
    if (cpu < 0 || cpu >= PG_CPU_MAX || cpu >= CPU_SETSIZE)
        return pg_error(PAGODA_ERR_INVALID_ARG, "pin: CPU %d is out of range (max %d)", cpu,
                        PG_CPU_MAX - 1);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (rc != 0)
        return pg_error(PAGODA_ERR_INTERNAL, "pin: cannot bind thread to CPU %d: %s", cpu,
                        strerror(rc));
    return PAGODA_OK;
}
