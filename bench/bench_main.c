/*
 * bench_main.c - a stand-alone driver for `tern bench kernels` that needs only
 * libc and pthreads (no cJSON/utf8proc/PCRE2), for machines without the CLI's
 * dependencies. Build with bench/build.sh; arguments as `tern bench kernels`, or
 * `gdn ...` first for `tern bench gdn`. The environment as for `tern` (cli_env.c).
 */
#include "cli/cli.h"

#include <string.h>

int tern_bench_model(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "bench model is not part of the stand-alone kernel bench\n");
    return 2;
}

int main(int argc, char **argv) {
    char *args[64];
    int n = 0;
    args[n++] = "bench";
    int i = 1;
    if (argc > 1 && !strcmp(argv[1], "gdn")) args[n++] = argv[i++];
    else args[n++] = "kernels";
    for (; i < argc && n < 63; i++) args[n++] = argv[i];
    args[n] = NULL;
    cli_env_apply();
    return tern_cmd_bench(n, args);
}
int tern_bench_kernels_cuda(int argc, char **argv) { (void)argc; (void)argv; return 2; }
