/*
 * cmd_perplexity.c - `tern perplexity`: perplexity of a model on a text file.
 *
 * The file is tokenized as plain text (no added/control tokens are produced, no
 * BOS), cut into consecutive chunks of --ctx tokens (a final partial chunk is
 * dropped), and every chunk is evaluated from an empty state (KV cache and GDN
 * states reset). Within a chunk every position after the first is scored:
 * NLL = -log softmax(logits[t])[tok[t+1]] in double precision, so a chunk of
 * ctx tokens contributes ctx-1 predictions. perplexity = exp(sum NLL / count).
 * (tools/train_default/train.py computes the same number in PyTorch.)
 *
 * Output: one line "perplexity: P over N predictions (C chunks of CTX tokens)"
 * plus speed on stderr, or one JSON object with --json:
 *   {"model", "file", "ctx", "chunks", "predictions", "nll", "ppl",
 *    "seconds", "tokens_per_s", "threads"}
 */
#include "cli/cli.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: tern perplexity [-m MODEL] -f TEXT_FILE [options]\n"
            "Perplexity of MODEL on TEXT_FILE: consecutive chunks of --ctx tokens, each from an\n"
            "empty state, every position after the first of a chunk scored.\n\n"
            "  -m, --model PATH   GGUF file or MLX pack (default: the embedded model)\n"
            "  -f, --file PATH    the text (UTF-8), tokenized as plain text\n"
            "  --ctx N            tokens per chunk (default 512, 2..65536)\n"
            "  --chunk N          prefill batch size inside a chunk (default 64; 1 = token by token)\n"
            "  --cache-type T     KV cache type: f32, f16 (default), bf16 or q8_0 (-ctk / -ctv: one of them)\n"
            "  --max-chunks N     evaluate at most N chunks (default all)\n"
            "  --threads N        worker threads (default: all online cores)\n"
            "  --device cpu|cuda  where the model runs (default cpu)\n"
            "  --json             print one JSON object\n"
            "  -q, --quiet        no progress on stderr\n" CLI_ENV_SEE);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        if (n + 1 >= cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) { free(b); b = NULL; break; }
            b = nb;
            cap *= 2;
        }
        size_t r = fread(b + n, 1, cap - 1 - n, f);
        n += r;
        if (!r) break;
    }
    fclose(f);
    if (b) { b[n] = 0; *len = n; }
    return b;
}

/* -log softmax(logits)[target], in double. */
static double nll_of(const float *logits, int n_vocab, int32_t target) {
    double mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return (mx + log(sum)) - (double)logits[target];
}

int tern_cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *file = NULL;
    int64_t ctx = 512, chunk = 64, max_chunks = -1, threads = 0;
    bool json = false, quiet = false;
    const char *device = NULL;
    tern_cache_type cache_k = TERN_CACHE_DEFAULT, cache_v = TERN_CACHE_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        int cr;
        if (cli_is_help(a)) { usage(stdout); return 0; }
        else if ((cr = cli_parse_cache_type("perplexity", argc, argv, &i, &cache_k, &cache_v))) {
            if (cr == 2) return 2;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) model_path = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has) file = argv[++i];
        else if (!strcmp(a, "--ctx") && has) {
            if (!cli_parse_i64(argv[++i], 2, 65536, &ctx)) return cli_usage_error("perplexity", "bad --ctx '%s'", argv[i]);
        } else if (!strcmp(a, "--chunk") && has) {
            if (!cli_parse_i64(argv[++i], 1, 65536, &chunk)) return cli_usage_error("perplexity", "bad --chunk '%s'", argv[i]);
        } else if (!strcmp(a, "--max-chunks") && has) {
            if (!cli_parse_i64(argv[++i], 1, INT32_MAX, &max_chunks))
                return cli_usage_error("perplexity", "bad --max-chunks '%s'", argv[i]);
        } else if (!strcmp(a, "--threads") && has) {
            if (!cli_parse_i64(argv[++i], 1, 1024, &threads)) return cli_usage_error("perplexity", "bad --threads '%s'", argv[i]);
        } else if (!strcmp(a, "--device") && has) device = argv[++i];
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = true;
        else return cli_usage_error("perplexity", "unknown or incomplete argument '%s'", a);
    }
    if (!file) return cli_usage_error("perplexity", "-f TEXT_FILE is required");
    if (!model_path) model_path = cli_default_model();
    if (!model_path) return cli_usage_error("perplexity", "no -m MODEL and no default model found");

    size_t text_len = 0;
    char *text = read_file(file, &text_len);
    if (!text) {
        fprintf(stderr, "tern perplexity: cannot read %s\n", file);
        return 1;
    }
    int rc = 1;
    tern_tokenizer *tok = NULL;
    tern_model *model = NULL;
    tern_session *sess = NULL;
    tern_tokens ids = {0};
    float *logits = NULL;
    tern_status st = tern_tokenizer_load(model_path, &tok);
    if (st) { rc = cli_lib_error("perplexity", st); goto done; }
    st = tern_tokenize(tok, text, text_len, false, &ids);
    if (st) { rc = cli_lib_error("perplexity", st); goto done; }

    tern_model_params mp;
    cli_model_params_from_env(&mp);
    mp.n_threads = (int)threads;
    mp.device = device;
    st = tern_model_load(model_path, &mp, &model);
    if (st) { rc = cli_lib_error("perplexity", st); goto done; }
    const tern_model_info *info = tern_model_get_info(model);
    int n_vocab = info->n_vocab;
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = (int)ctx;
    sp.n_chunk = (int)chunk;
    sp.cache_type_k = cache_k;
    sp.cache_type_v = cache_v;
    st = tern_session_new(model, &sp, &sess);
    if (st) { rc = cli_lib_error("perplexity", st); goto done; }

    int64_t n_chunks = (int64_t)(ids.n / (size_t)ctx);
    if (max_chunks > 0 && n_chunks > max_chunks) n_chunks = max_chunks;
    if (n_chunks < 1) {
        fprintf(stderr, "tern perplexity: %s has %zu tokens, fewer than --ctx %lld\n", file, ids.n, (long long)ctx);
        goto done;
    }
    logits = malloc((size_t)ctx * (size_t)n_vocab * sizeof(float));
    if (!logits) { fprintf(stderr, "tern perplexity: out of memory\n"); goto done; }

    double nll = 0.0, t0 = now_s();
    int64_t count = 0;
    for (int64_t c = 0; c < n_chunks; c++) {
        const int32_t *x = ids.ids + c * ctx;
        tern_session_reset(sess);
        st = tern_session_eval(sess, x, (size_t)ctx, logits);
        if (st) { rc = cli_lib_error("perplexity", st); goto done; }
        for (int64_t t = 0; t + 1 < ctx; t++) nll += nll_of(logits + t * n_vocab, n_vocab, x[t + 1]);
        count += ctx - 1;
        if (!quiet && !json)
            fprintf(stderr, "\r[%lld/%lld] ppl %.4f", (long long)(c + 1), (long long)n_chunks, exp(nll / count));
    }
    double secs = now_s() - t0;
    double ppl = exp(nll / count);
    if (!quiet && !json) fprintf(stderr, "\n");
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", model_path);
        cJSON_AddStringToObject(j, "file", file);
        cJSON_AddNumberToObject(j, "ctx", (double)ctx);
        cJSON_AddNumberToObject(j, "chunks", (double)n_chunks);
        cJSON_AddNumberToObject(j, "predictions", (double)count);
        cJSON_AddNumberToObject(j, "nll", nll / count);
        cJSON_AddNumberToObject(j, "ppl", ppl);
        cJSON_AddNumberToObject(j, "seconds", secs);
        cJSON_AddNumberToObject(j, "tokens_per_s", (double)(n_chunks * ctx) / secs);
        cJSON_AddNumberToObject(j, "threads", (double)threads);
        char *s = cJSON_PrintUnformatted(j);
        if (s) printf("%s\n", s);
        free(s);
        cJSON_Delete(j);
    } else {
        printf("perplexity: %.4f over %lld predictions (%lld chunks of %lld tokens)\n", ppl, (long long)count,
               (long long)n_chunks, (long long)ctx);
        if (!quiet)
            fprintf(stderr, "%.1f s, %.1f tokens/s\n", secs, (double)(n_chunks * ctx) / secs);
    }
    rc = 0;
done:
    free(logits);
    tern_session_free(sess);
    tern_model_free(model);
    tern_tokens_free(&ids);
    tern_tokenizer_free(tok);
    free(text);
    return rc;
}
