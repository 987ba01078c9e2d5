/* cmd_convert.c - `tern convert` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_convert(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern convert: not implemented yet\n");
    return 1;
}
