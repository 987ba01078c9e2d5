/* cmd_synth.c - `tern synth` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_synth(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern synth: not implemented yet\n");
    return 1;
}
