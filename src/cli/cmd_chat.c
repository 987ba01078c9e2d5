/* cmd_chat.c - `tern chat` (placeholder until implemented). */
#include "cli/cli.h"

int tern_cmd_chat(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern chat: not implemented yet\n");
    return 1;
}
