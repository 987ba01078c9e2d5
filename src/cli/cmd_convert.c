/*
 * cmd_convert.c - `tern convert IN OUT --to pq2_0|ptq1_0|q2_0|q2_0_g64|mlx`:
 * lossless conversion between ternary GGUF layouts and MLX packs
 * (library part: src/formats/convert.h).
 */
#include "cli/cli.h"
#include "formats/convert.h"

#include <string.h>
#include <unistd.h>

static void usage(void) {
    printf("usage: tern convert IN OUT --to pq2_0|ptq1_0|q2_0|q2_0_g64|mlx [--name NAME]\n"
           "                    [--set KEY=TYPE:VALUE ...] [--quiet]\n"
           "\n"
           "Losslessly transcode a ternary model. IN and OUT are GGUF files or MLX pack\n"
           "directories (config.json + hadamard.json + model.safetensors).\n"
           "  --to T       target layout: pq2_0 (type 142), ptq1_0 (143, 1.75 bpw), q2_0 (fork\n"
           "               g128, type 42), q2_0_g64 (mainline llama.cpp g64, type 42), mlx\n"
           "  --name NAME  write general.name NAME (default: keep the input's)\n"
           "  --set KEY=TYPE:VALUE\n"
           "               write a metadata key (GGUF to GGUF; repeatable), TYPE f32, i32, u32,\n"
           "               bool (true|false) or str; replaces an existing key in place, e.g.\n"
           "               --set general.sampling.temp=f32:0.8. Tensor bytes are unchanged\n"
           "               when --to is the input's own layout\n"
           "  --quiet      no progress bar\n");
}

int tern_cmd_convert(int argc, char **argv) {
    const char *pos[2] = {0};
    int npos = 0;
    const char *to = NULL, *name = NULL;
    bool quiet = false;
    const char *set[64];
    size_t n_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) { usage(); return 0; }
        if (!strcmp(a, "--to")) {
            if (++i >= argc) return cli_usage_error("convert", "--to needs a value");
            to = argv[i];
        } else if (!strcmp(a, "--name")) {
            if (++i >= argc) return cli_usage_error("convert", "--name needs a value");
            name = argv[i];
        } else if (!strcmp(a, "--set")) {
            if (++i >= argc) return cli_usage_error("convert", "--set needs KEY=TYPE:VALUE");
            if (n_set == sizeof set / sizeof *set) return cli_usage_error("convert", "more than 64 --set");
            set[n_set++] = argv[i];
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("convert", "unknown option '%s'", a);
        } else {
            if (npos == 2) return cli_usage_error("convert", "unexpected argument '%s'", a);
            pos[npos++] = a;
        }
    }
    if (npos != 2) return cli_usage_error("convert", "need IN and OUT");
    if (!to) return cli_usage_error("convert", "--to is required");
    tern_convert_opts o = {0};
    if (!tern_convert_target_parse(to, &o.to))
        return cli_usage_error("convert", "unknown --to '%s' (pq2_0, ptq1_0, q2_0, q2_0_g64, mlx)", to);
    if (!strcmp(pos[0], pos[1])) return cli_usage_error("convert", "IN and OUT are the same path");
    cli_progress p;
    cli_progress_init(&p, "convert", quiet || !isatty(2));
    o.name = name;
    o.set = set;
    o.n_set = n_set;
    o.progress = cli_progress_cb;
    o.progress_user = &p;
    tern_status st = tern_convert(pos[0], pos[1], &o);
    cli_progress_done(&p);
    if (st) return cli_lib_error("convert", st);
    if (!quiet) fprintf(stderr, "wrote %s\n", pos[1]);
    return 0;
}
