/* cmd_detokenize.c - `tern detokenize` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_detokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern detokenize: not implemented yet\n");
    return 1;
}
