/* cmd_inspect.c - `tern inspect` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_inspect(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern inspect: not implemented yet\n");
    return 1;
}
