/* cmd_run.c - `tern run` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_run(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern run: not implemented yet\n");
    return 1;
}
