/*
 * bench_main.c - a stand-alone driver for `tern bench kernels` that needs only
 * libc and pthreads (no cJSON/utf8proc/PCRE2), for machines without the CLI's
 * dependencies. Build with bench/build.sh; arguments as `tern bench kernels`.
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
    args[n++] = "kernels";
    for (int i = 1; i < argc && n < 63; i++) args[n++] = argv[i];
    args[n] = NULL;
    return tern_cmd_bench(n, args);
}
int tern_bench_kernels_cuda(int argc, char **argv) { (void)argc; (void)argv; return 2; }
