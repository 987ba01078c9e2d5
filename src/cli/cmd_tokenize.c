/*
 * cmd_tokenize.c - `tern tokenize`: text to token ids, exactly as the model's
 * tokenizer encodes it (no BOS; added tokens matched as Hugging Face does unless
 * --no-special). Output: ids separated by spaces, or a JSON array with --json.
 */
#include "cli/cli.h"

#include <cjson/cJSON.h>

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: tern tokenize [-m MODEL] [--json] [--no-special] (--text TEXT | --file F | --batch F)\n"
            "  -m, --model PATH   GGUF file, MLX pack folder or tokenizer.json (default: the embedded model)\n"
            "  --text TEXT        text to encode (exactly as given)\n"
            "  --file F           read the text from a file ('-' = stdin), byte-exact\n"
            "  --batch F          F holds one JSON string per line; print one JSON array of ids per line\n"
            "  --json             print a JSON array of ids\n"
            "  --no-special       treat the text as plain text: never produce added/control tokens\n");
}

static void print_ids(const tern_tokens *ids) {
    putchar('[');
    for (size_t i = 0; i < ids->n; i++) printf(i ? ", %d" : "%d", ids->ids[i]);
    printf("]\n");
}

/* One JSON string per input line -> one JSON array per output line. */
static int run_batch(const char *model, const char *path, bool special) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) { fprintf(stderr, "tern tokenize: cannot open %s\n", path); return 1; }
    size_t len;
    char *all = cli_read_stream(f, &len);
    if (f != stdin) fclose(f);
    if (!all) { fprintf(stderr, "tern tokenize: out of memory\n"); return 1; }
    tern_tokenizer *tok = NULL;
    tern_status st = tern_tokenizer_load(model, &tok);
    if (st) { free(all); return cli_lib_error("tokenize", st); }
    int rc = 0, line = 0;
    for (char *p = all; *p && !rc;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        line++;
        cJSON *j = cJSON_Parse(p);
        if (!cJSON_IsString(j)) {
            fprintf(stderr, "tern tokenize: %s line %d is not a JSON string\n", path, line);
            rc = 1;
        } else {
            tern_tokens ids = {0};
            st = tern_tokenize(tok, j->valuestring, strlen(j->valuestring), special, &ids);
            if (st) rc = cli_lib_error("tokenize", st);
            else print_ids(&ids);
            tern_tokens_free(&ids);
        }
        cJSON_Delete(j);
        if (!nl) break;
        p = nl + 1;
    }
    tern_tokenizer_free(tok);
    free(all);
    return rc;
}

int tern_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL, *batch = NULL;
    bool json = false, special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) { usage(stdout); return 0; }
        if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--text") || !strcmp(a, "--file") ||
            !strcmp(a, "--batch")) {
            if (i + 1 >= argc) return cli_usage_error("tokenize", "%s needs a value", a);
            const char *v = argv[++i];
            if (a[1] == 'm' || !strcmp(a, "--model")) model = v;
            else if (!strcmp(a, "--text")) text = v;
            else if (!strcmp(a, "--batch")) batch = v;
            else file = v;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--no-special")) {
            special = false;
        } else {
            return cli_usage_error("tokenize", "unknown option '%s'", a);
        }
    }
    if (!!text + !!file + !!batch != 1) return cli_usage_error("tokenize", "give exactly one of --text, --file or --batch");
    if (!model) model = cli_default_model();
    if (!model) return cli_usage_error("tokenize", "no model: use -m MODEL or set TERN_MODEL");
    size_t len = 0;
    char *buf = NULL;
    if (batch) return run_batch(model, batch, special);
    if (file) {
        FILE *f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
        if (!f) { fprintf(stderr, "tern tokenize: cannot open %s\n", file); return 1; }
        buf = cli_read_stream(f, &len);
        if (f != stdin) fclose(f);
        if (!buf) { fprintf(stderr, "tern tokenize: out of memory\n"); return 1; }
        text = buf;
    } else {
        len = strlen(text);
    }
    tern_tokenizer *tok = NULL;
    tern_status st = tern_tokenizer_load(model, &tok);
    if (st) { free(buf); return cli_lib_error("tokenize", st); }
    tern_tokens ids = {0};
    st = tern_tokenize(tok, text, len, special, &ids);
    if (st) { free(buf); tern_tokenizer_free(tok); return cli_lib_error("tokenize", st); }
    if (json) putchar('[');
    for (size_t i = 0; i < ids.n; i++) printf(i ? (json ? ", %d" : " %d") : "%d", ids.ids[i]);
    printf(json ? "]\n" : "\n");
    tern_tokens_free(&ids);
    tern_tokenizer_free(tok);
    free(buf);
    return 0;
}
