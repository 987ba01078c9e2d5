/*
 * cmd_eval.c - `tern eval`: run token ids through a model and write the logits
 * of every position as float32 little-endian, row-major [T, n_vocab]; with
 * --continue N, then greedily continue N tokens (argmax, lowest id on ties) and
 * print the ids on stdout, one line, space-separated. Used by parity tests.
 */
#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: tern eval -m MODEL (--ids 1,2,3 | --ids-file F) --logits-out OUT.f32\n"
            "                 [--chunk N] [--threads N] [--ctx N] [--continue N] [--no-repack]\n"
            "                 [--device cpu|cuda[:N]] [--tp N] [--quiet]\n"
            "  Evaluates the ids (prefill in chunks of N, default 64; 1 = token by token),\n"
            "  writes float32 LE logits [T, vocab] to OUT.f32 ('-' skips writing), then with\n"
            "  --continue N prints N greedy continuation ids on stdout. --no-repack keeps the\n"
            "  weights in the file layout (default: the kernels' fastest layout where there\n"
            "  is one, as --repack; TERN_REPACK=0 = --no-repack). --tp N splits the model\n"
            "  into N tensor-parallel shards of --device in this process (heads, FFN and\n"
            "  vocabulary; docs/multi-gpu.md); a dimension that does not split is an error.\n" CLI_ENV_SEE);
}

int tern_cmd_eval(int argc, char **argv) {
    const char *model = NULL, *ids_s = NULL, *ids_file = NULL, *out = NULL, *device = NULL;
    int64_t chunk = 0, threads = 0, ctx = 0, cont = 0, tp = 0;
    bool quiet = false;
    int repack = -1; /* -1: the library's default */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            usage(stdout);
            return 0;
        }
        bool has = i + 1 < argc;
        if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) quiet = true;
        else if (!strcmp(a, "--repack")) repack = 1;
        else if (!strcmp(a, "--no-repack")) repack = 0;
        else if (!cli_is_one_of(a, "-m --model --ids --ids-file --logits-out --chunk --threads -t --ctx --continue --device --tp"))
            return cli_usage_error("eval", "unknown option '%s'", a);
        else if (!has) return cli_usage_error("eval", "option %s needs a value", a);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = argv[++i];
        else if (!strcmp(a, "--ids")) ids_s = argv[++i];
        else if (!strcmp(a, "--device")) device = argv[++i];
        else if (!strcmp(a, "--ids-file")) ids_file = argv[++i];
        else if (!strcmp(a, "--logits-out")) out = argv[++i];
        else if (!strcmp(a, "--chunk")) {
            if (!cli_parse_i64(argv[++i], 1, 4096, &chunk)) return cli_usage_error("eval", "bad --chunk '%s' (1..4096)", argv[i]);
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!cli_parse_i64(argv[++i], 1, 256, &threads)) return cli_usage_error("eval", "bad --threads '%s' (1..256)", argv[i]);
        } else if (!strcmp(a, "--ctx")) {
            if (!cli_parse_i64(argv[++i], 1, 1 << 24, &ctx)) return cli_usage_error("eval", "bad --ctx '%s'", argv[i]);
        } else if (!strcmp(a, "--continue")) {
            if (!cli_parse_i64(argv[++i], 0, 1 << 20, &cont)) return cli_usage_error("eval", "bad --continue '%s'", argv[i]);
        } else if (!strcmp(a, "--tp")) {
            if (!cli_parse_i64(argv[++i], 1, 64, &tp)) return cli_usage_error("eval", "bad --tp '%s' (1..64 shards)", argv[i]);
        } else return cli_usage_error("eval", "unknown option '%s'", a);
    }
    if (!model) model = cli_default_model();
    if (!model) return cli_usage_error("eval", "no model: pass -m MODEL");
    if (!!ids_s == !!ids_file) return cli_usage_error("eval", "give exactly one of --ids or --ids-file");
    if (!out) return cli_usage_error("eval", "--logits-out is required ('-' to skip)");

    char *text = NULL;
    if (ids_file) {
        FILE *f = fopen(ids_file, "rb");
        if (!f) return cli_usage_error("eval", "cannot open --ids-file '%s'", ids_file);
        size_t cap = 4096, len = 0;
        text = malloc(cap);
        size_t r;
        while (text && (r = fread(text + len, 1, cap - len - 1, f)) > 0) {
            len += r;
            if (len + 1 == cap) text = realloc(text, cap *= 2);
        }
        fclose(f);
        if (!text) return cli_usage_error("eval", "out of memory");
        text[len] = 0;
        ids_s = text;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    bool okp = cli_parse_ids(ids_s, &ids, &n);
    free(text);
    if (!okp || n == 0) {
        free(ids);
        return cli_usage_error("eval", "bad or empty id list");
    }

    tern_model_params mp;
    cli_model_params_from_env(&mp);
    mp.n_threads = (int)threads;
    if (repack >= 0) mp.repack = repack;
    mp.device = device;
    mp.tp = (int)tp;
    tern_model *m = NULL;
    tern_status st = tern_model_load(model, &mp, &m);
    if (st) {
        free(ids);
        return cli_lib_error("eval", st);
    }
    const tern_model_info *info = tern_model_get_info(m);
    if (!quiet && info->device_bytes)
        fprintf(stderr, "tern eval: %s: %s, %.1f MiB of weights on the GPU\n", info->device,
                info->device_name, info->device_bytes / 1048576.0);
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = ctx ? (int)ctx : (int)(n + cont);
    sp.n_chunk = (int)chunk;
    tern_session *s = NULL;
    int rc = 0;
    float *logits = NULL;
    FILE *fo = NULL;
    st = tern_session_new(m, &sp, &s);
    if (st) {
        rc = cli_lib_error("eval", st);
        goto done;
    }
    size_t V = (size_t)info->n_vocab;
    logits = malloc(n * V * sizeof(float));
    if (!logits) {
        fprintf(stderr, "tern eval: out of memory for %zu x %zu logits\n", n, V);
        rc = 1;
        goto done;
    }
    st = tern_session_eval(s, ids, n, logits);
    if (st) {
        rc = cli_lib_error("eval", st);
        goto done;
    }
    if (strcmp(out, "-") != 0) {
        fo = fopen(out, "wb");
        if (!fo || fwrite(logits, sizeof(float), n * V, fo) != n * V || fclose(fo) != 0) {
            fprintf(stderr, "tern eval: cannot write '%s'\n", out);
            fo = NULL;
            rc = 1;
            goto done;
        }
        fo = NULL;
    }
    if (cont > 0) {
        int32_t tok = cli_argmax(tern_session_logits(s), (int)V);
        for (int64_t i = 0; i < cont; i++) {
            printf(i ? " %d" : "%d", (int)tok);
            if (i + 1 == cont) break;
            st = tern_session_eval(s, &tok, 1, NULL);
            if (st) {
                printf("\n");
                rc = cli_lib_error("eval", st);
                goto done;
            }
            tok = cli_argmax(tern_session_logits(s), (int)V);
        }
        printf("\n");
    }
    if (!quiet)
        fprintf(stderr, "tern eval: %zu tokens, vocab %zu, session %.1f MiB, model alloc %.1f MiB\n",
                n, V, tern_session_memory(s) / 1048576.0, info->alloc_bytes / 1048576.0);
done:
    free(logits);
    free(ids);
    tern_session_free(s);
    tern_model_free(m);
    return rc;
}
