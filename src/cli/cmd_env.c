/* `pagoda env`: environment report (CPU, ISA features, chosen kernels,
 * memory, threads, environment check findings); see src/kernels/env_report.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/status.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "kernels/env_report.h"
#include "model/model.h"

int pg_cmd_env(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf(
                "usage: pagoda env\n\nPrints the detected CPU, ISA features, the kernel variants "
                "chosen (PAGODA_ISA may force a lower level), memory, huge pages, thread "
                "settings, the findings of the environment check (what in this setup costs "
                "speed, how much, and the fix; README \"Troubleshooting performance\") and the "
                "model architectures pagoda runs.\n");
            return 0;
        }
        if (pg_args_is_option(argv[i])) return pg_args_unknown("pagoda env", argv[i]);
        return pg_args_unexpected("pagoda env", argv[i]);
    }
    /* An unknown PAGODA_ISA is a usage error here (the library would only
     * log it and fall back to the best level). */
    pg_isa level;
    if (pg_isa_resolve(pg_cpu(), getenv("PAGODA_ISA"), &level, NULL) != PAGODA_OK) {
        fprintf(stderr, "pagoda env: %s\n", pg_last_error());
        return 2;
    }
    pg_env_report(stdout);
    char archs[1024];
    printf("\nmodel architectures: %s\n", pg_model_supported(archs, sizeof archs));
    return 0;
}
