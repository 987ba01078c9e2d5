/*
 * cmd_synth.c - `tern synth --preset NAME --seed S OUT.gguf [--layers N]`: random
 * ternary models with real shapes (library part: src/formats/synth.h).
 */
#include "cli/cli.h"
#include "formats/codecs.h"
#include "formats/synth.h"

#include <string.h>
#include <unistd.h>

static void usage(void) {
    printf("usage: tern synth --preset NAME [--seed S] [--layers N] [--to pq2_0|ptq1_0|q2_0|q2_0_g64] [--quiet] OUT.gguf\n"
           "\n"
           "Write a random-weight ternary model with the exact shapes of a real one (for\n"
           "benchmarks), streamed to disk. Presets:");
    for (const char *const *p = tern_synth_presets(); *p; p++) printf(" %s", *p);
    printf("\n  --seed S     random seed (default 0); the output is a function of (preset, seed, layers, type)\n"
           "  --layers N   override the number of layers\n"
           "  --to T       ternary layout (default: pq2_0 for bonsai2-27b, q2_0 otherwise)\n");
}

int tern_cmd_synth(int argc, char **argv) {
    tern_synth_opts o = {0};
    o.out_type = TERN_DT_COUNT;
    const char *out = NULL;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) { usage(); return 0; }
        if (!strcmp(a, "--preset")) {
            if (++i >= argc) return cli_usage_error("synth", "--preset needs a name");
            o.preset = argv[i];
        } else if (!strcmp(a, "--seed")) {
            int64_t v;
            if (++i >= argc || !cli_parse_i64(argv[i], 0, INT64_MAX, &v))
                return cli_usage_error("synth", "--seed needs a non-negative integer");
            o.seed = (uint64_t)v;
        } else if (!strcmp(a, "--layers")) {
            int64_t v;
            if (++i >= argc || !cli_parse_i64(argv[i], 1, 1024, &v))
                return cli_usage_error("synth", "--layers needs an integer in 1..1024");
            o.n_layers = (int)v;
        } else if (!strcmp(a, "--to")) {
            if (++i >= argc) return cli_usage_error("synth", "--to needs a value");
            if (!tern_codec_type_parse(argv[i], &o.out_type))
                return cli_usage_error("synth", "unknown --to '%s'", argv[i]);
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("synth", "unknown option '%s'", a);
        } else {
            if (out) return cli_usage_error("synth", "unexpected argument '%s'", a);
            out = a;
        }
    }
    if (!o.preset) return cli_usage_error("synth", "--preset is required");
    if (!out) return cli_usage_error("synth", "need OUT.gguf");
    bool known = false;
    for (const char *const *p = tern_synth_presets(); *p; p++) known |= !strcmp(*p, o.preset);
    if (!known) return cli_usage_error("synth", "unknown preset '%s'", o.preset);
    cli_progress p;
    cli_progress_init(&p, "synth", quiet || !isatty(2));
    o.progress = cli_progress_cb;
    o.progress_user = &p;
    tern_status st = tern_synth(out, &o);
    cli_progress_done(&p);
    if (st) return cli_lib_error("synth", st);
    if (!quiet) fprintf(stderr, "wrote %s\n", out);
    return 0;
}
