/* cmd_bench.c - `tern bench` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern bench: not implemented yet\n");
    return 1;
}
