/* cmd_tokenize.c - `tern tokenize` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern tokenize: not implemented yet\n");
    return 1;
}
