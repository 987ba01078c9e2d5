/* cmd_eval.c - `tern eval` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_eval(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern eval: not implemented yet\n");
    return 1;
}
