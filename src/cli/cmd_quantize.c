/* cmd_quantize.c - `tern quantize` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_quantize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern quantize: not implemented yet\n");
    return 1;
}
