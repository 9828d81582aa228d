/* `pagoda env`: environment report. Filled in by the CPU-detection work. */
#include <stdio.h>

#include "cli/commands.h"

int pg_cmd_env(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("pagoda %s\n", PAGODA_VERSION);
    return 0;
}
