/* bench_model.c - `tern bench model` (placeholder: the model module replaces
 * this file with the real benchmark; cmd_bench.c dispatches to it). */
#include "cli/cli.h"

int tern_bench_model(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern bench model: not implemented yet\n");
    return 1;
}
