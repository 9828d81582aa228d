/* A model file truncated while mapped (model/mapped_file.h): reading a page
 * past the file's new end raises SIGBUS; with the handler installed the
 * process writes a message naming the file and the offset and exits with
 * PG_MAPPED_FAULT_EXIT instead of dying with a core dump. Each case runs in
 * a forked child whose stderr goes to a file. */
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/mapped_file.h"

#define FILE_BYTES (64 * 4096)

static char g_path[512], g_err[512];

static void write_pattern(void) {
    snprintf(g_path, sizeof g_path, "%s/mapped_fault.bin", pg_test_tmpdir());
    snprintf(g_err, sizeof g_err, "%s/mapped_fault.err", pg_test_tmpdir());
    unsigned char *b = malloc(FILE_BYTES);
    assert_non_null(b);
    for (int i = 0; i < FILE_BYTES; i++)
        b[i] = (unsigned char)(i * 7);
    pg_test_write_file(g_path, b, FILE_BYTES);
    free(b);
}

/* In a child: a crash must not leave a core file behind, and SIGBUS starts
 * with its default action. */
static void no_core(void) {
    struct rlimit rl = {0, 0};
    setrlimit(RLIMIT_CORE, &rl);
    signal(SIGBUS, SIG_DFL);
}

/* Fork: map the file, truncate it to `keep` bytes, read byte `at`; the
 * child's wait status is returned and its stderr left in g_err. */
static int child_reads_after_truncate(bool install, size_t keep, size_t at) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(g_err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(90);
        dup2(fd, STDERR_FILENO);
        close(fd);
        no_core();
        if (install && pg_mapped_fault_handler_install() != 0) _exit(91);
        pg_mapped_file f;
        if (pg_mapped_file_open(g_path, &f) != PAGODA_OK || f.size != FILE_BYTES) _exit(92);
        if (truncate(g_path, (off_t)keep) != 0) _exit(93);
        volatile unsigned char v = f.data[at];
        /* still within the file: the data must be intact */
        _exit(v == (unsigned char)(at * 7) ? 0 : 94);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void test_truncated_after_mapping_exits_cleanly(void **state) {
    (void)state;
    write_pattern();
    int st = child_reads_after_truncate(true, 4096, 10 * 4096 + 5);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), PG_MAPPED_FAULT_EXIT);
    char *err = pg_test_read_file(g_err, NULL);
    assert_non_null(err);
    char want[700];
    snprintf(want, sizeof want,
             "pagoda: fatal: model file %s changed while in use: byte 40965 of the 262144 bytes "
             "mapped at load is gone",
             g_path);
    if (!strstr(err, want)) fail_msg("stderr: %s", err);
    free(err);
    unlink(g_path);
}

/* Reading what is still in the file works with the handler installed. */
static void test_bytes_before_the_new_end_still_read(void **state) {
    (void)state;
    write_pattern();
    int st = child_reads_after_truncate(true, 8 * 4096, 3 * 4096 + 1);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    unlink(g_path);
}

/* Without the handler the same read is the SIGBUS death the handler
 * replaces (so the first test measures the handler, not a platform that
 * never faults). */
static void test_without_handler_sigbus(void **state) {
    (void)state;
    write_pattern();
    int st = child_reads_after_truncate(false, 4096, 10 * 4096 + 5);
    assert_true(WIFSIGNALED(st));
    assert_int_equal(WTERMSIG(st), SIGBUS);
    unlink(g_path);
}

/* A SIGBUS outside any watched mapping keeps the default action. */
static void test_foreign_sigbus_keeps_default(void **state) {
    (void)state;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        no_core();
        if (pg_mapped_fault_handler_install() != 0) _exit(91);
        write_pattern();
        int fd = open(g_path, O_RDONLY);
        if (fd < 0) _exit(92);
        const volatile unsigned char *p = mmap(NULL, FILE_BYTES, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) _exit(93);
        if (ftruncate(open(g_path, O_WRONLY), 0) != 0) _exit(94);
        (void)p[5 * 4096];
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGBUS);
    unlink(g_path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncated_after_mapping_exits_cleanly),
        cmocka_unit_test(test_bytes_before_the_new_end_still_read),
        cmocka_unit_test(test_without_handler_sigbus),
        cmocka_unit_test(test_foreign_sigbus_keeps_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
