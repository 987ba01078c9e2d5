/*
 * cmd_quantize.c - `tern quantize HF_DIR OUT.gguf [--hadamard SIGNS|--hadamard-seed N|--no-hadamard]`:
 * a Hugging Face qwen35/qwen3 checkpoint to a ternary GGUF (library part:
 * src/formats/quantize.h, which documents every convention).
 */
#include "cli/cli.h"
#include "formats/codecs.h"
#include "formats/quantize.h"

#include <string.h>
#include <unistd.h>

static void usage(void) {
    printf("usage: tern quantize HF_DIR OUT.gguf [--hadamard SIGNS | --hadamard-seed N | --no-hadamard]\n"
           "                     [--to pq2_0|ptq1_0|q2_0|q2_0_g64] [--name NAME] [--ternary-alpha-beta] [--quiet]\n"
           "\n"
           "Quantize a Hugging Face checkpoint (config.json + *.safetensors, F32/F16/BF16) of a\n"
           "qwen35 (Qwen3.5 / Bonsai) or qwen3 model to ternary g128 weights.\n"
           "  --hadamard SIGNS     fold the blockwise Hadamard rotation with these signs: a GGUF with\n"
           "                       prism.hadamard.* keys, or JSON {\"block_size\":1024,\"sign_widths\":[..],\n"
           "                       \"sign_values\":[..]} (an MLX pack's hadamard.json works too)\n"
           "  --hadamard-seed N    fold with signs drawn deterministically from seed N\n"
           "  --no-hadamard        no rotation (the default)\n"
           "  --to T               output layout (default pq2_0 with Hadamard, q2_0 without)\n"
           "  --name NAME          general.name (default: the directory name)\n"
           "  --ternary-alpha-beta GDN alpha/beta projections ternary, like the fork's converter (default BF16)\n"
           "  --quiet              no progress bar\n");
}

int tern_cmd_quantize(int argc, char **argv) {
    const char *pos[2] = {0};
    int npos = 0, nh = 0;
    bool quiet = false;
    tern_quantize_opts o = {0};
    o.out_type = TERN_DT_COUNT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) { usage(); return 0; }
        if (!strcmp(a, "--hadamard")) {
            if (++i >= argc) return cli_usage_error("quantize", "--hadamard needs a SIGNS file");
            o.hadamard = TERN_QH_FILE;
            o.signs_path = argv[i];
            nh++;
        } else if (!strcmp(a, "--hadamard-seed")) {
            int64_t s;
            if (++i >= argc || !cli_parse_i64(argv[i], 0, INT64_MAX, &s))
                return cli_usage_error("quantize", "--hadamard-seed needs a non-negative integer");
            o.hadamard = TERN_QH_SEED;
            o.seed = (uint64_t)s;
            nh++;
        } else if (!strcmp(a, "--no-hadamard")) {
            o.hadamard = TERN_QH_NONE;
            nh++;
        } else if (!strcmp(a, "--to")) {
            if (++i >= argc) return cli_usage_error("quantize", "--to needs a value");
            if (!tern_codec_type_parse(argv[i], &o.out_type))
                return cli_usage_error("quantize", "unknown --to '%s'", argv[i]);
        } else if (!strcmp(a, "--name")) {
            if (++i >= argc) return cli_usage_error("quantize", "--name needs a value");
            o.name = argv[i];
        } else if (!strcmp(a, "--ternary-alpha-beta")) {
            o.alpha_beta_ternary = true;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            quiet = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("quantize", "unknown option '%s'", a);
        } else {
            if (npos == 2) return cli_usage_error("quantize", "unexpected argument '%s'", a);
            pos[npos++] = a;
        }
    }
    if (npos != 2) return cli_usage_error("quantize", "need HF_DIR and OUT.gguf");
    if (nh > 1) return cli_usage_error("quantize", "give at most one of --hadamard, --hadamard-seed, --no-hadamard");
    cli_progress p;
    cli_progress_init(&p, "quantize", quiet || !isatty(2));
    o.progress = cli_progress_cb;
    o.progress_user = &p;
    tern_status st = tern_quantize_hf(pos[0], pos[1], &o);
    cli_progress_done(&p);
    if (st) return cli_lib_error("quantize", st);
    if (!quiet) fprintf(stderr, "wrote %s\n", pos[1]);
    return 0;
}
