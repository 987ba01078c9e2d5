/* cmd_perplexity.c - `tern perplexity` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_perplexity(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern perplexity: not implemented yet\n");
    return 1;
}
