/* Start and stop a `pagoda serve` child for end-to-end tests. */
#include "serve_proc.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

pid_t pg_test_serve_start(const char *args, const char *out_path, int *port) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "exec %s '%s' serve %s --port 0 >'%s' 2>'%s.err'",
             pg_test_exec_wrapper(), pg_test_pagoda_bin(), args, out_path, out_path);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 3000; i++) { /* 300 s */
        FILE *f = fopen(out_path, "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f))
            if (sscanf(line, "PORT=%d", port) == 1) {
                fclose(f);
                return pid;
            }
        if (f) fclose(f);
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            char err[4400];
            snprintf(err, sizeof err, "%s.err", out_path);
            char *text = pg_test_read_file(err, NULL);
            fail_msg("pagoda serve exited early: %s", text);
        }
        nap_ms(100);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fail_msg("pagoda serve printed no PORT= line within 300 s");
    return -1;
}

int pg_test_serve_stop(pid_t pid) {
    int st = 0;
    kill(pid, SIGTERM);
    for (int i = 0; i < 600; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid) return st;
        nap_ms(100);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return st;
}
