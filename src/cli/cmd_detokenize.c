/*
 * cmd_detokenize.c - `tern detokenize`: token ids to text, byte-exact (the
 * tokens' bytes are written as they are, no newline added).
 */
#include "cli/cli.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: tern detokenize [-m MODEL] --ids 1,2,3\n"
            "  -m, --model PATH   GGUF file, MLX pack folder or tokenizer.json (default: the embedded model)\n"
            "  --ids LIST         token ids separated by commas or spaces\n"
            "The decoded bytes go to stdout exactly, with no newline added.\n");
}

int tern_cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *ids_s = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) { usage(stdout); return 0; }
        if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--ids")) {
            if (i + 1 >= argc) return cli_usage_error("detokenize", "%s needs a value", a);
            if (!strcmp(a, "--ids")) ids_s = argv[++i];
            else model = argv[++i];
        } else {
            return cli_usage_error("detokenize", "unknown option '%s'", a);
        }
    }
    if (!ids_s) return cli_usage_error("detokenize", "--ids is required");
    int32_t *ids = NULL;
    size_t n = 0;
    if (!cli_parse_ids(ids_s, &ids, &n)) return cli_usage_error("detokenize", "bad --ids value '%s'", ids_s);
    if (!model) model = cli_default_model();
    if (!model) { free(ids); return cli_usage_error("detokenize", "no model: use -m MODEL or set TERN_MODEL"); }
    tern_tokenizer *tok = NULL;
    tern_status st = tern_tokenizer_load(model, &tok);
    if (st) { free(ids); return cli_lib_error("detokenize", st); }
    tern_str out = {0};
    st = tern_detokenize(tok, ids, n, &out);
    free(ids);
    tern_tokenizer_free(tok);
    if (st) { tern_str_free(&out); return cli_lib_error("detokenize", st); }
    fwrite(out.data, 1, out.len, stdout);
    tern_str_free(&out);
    return 0;
}
