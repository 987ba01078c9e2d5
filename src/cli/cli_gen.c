/*
 * cli_gen.c - shared option parsing and setup for `tern run` and `tern chat`.
 */
#include "cli/cli_gen.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

tern_atomic_int gen_cancel;

static double tern_now_s_cli(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void gen_opts_default(gen_opts *o) {
    memset(o, 0, sizeof *o);
    tern_sampler_params_default(&o->sp);
    /* Qwen3 model-card settings (non-thinking): temperature 0.7, top-p 0.8, top-k 20, min-p 0 */
    o->sp.temperature = 0.7f;
    o->sp.top_k = 20;
    o->sp.top_p = 0.8f;
    o->sp.min_p = 0.0f;
    o->n_predict = 512;
    o->think = -1;
}

void gen_opts_help(FILE *f) {
    fprintf(f,
            "  -m, --model PATH         GGUF file or MLX pack folder (default: the embedded model / $TERN_MODEL)\n"
            "  -n, --n-predict N        most tokens to generate (default 512; 0 = until end or full context)\n"
            "  --temp T                 temperature (default 0.7, 0.6 when thinking; 0 = greedy)\n"
            "                           (sampling flags left out: the model's general.sampling.* keys, if any)\n"
            "  --top-k K                keep the K most likely tokens (default 20; 0 = off)\n"
            "  --top-p P                nucleus sampling mass (default 0.8, 0.95 when thinking; 1 = off)\n"
            "  --min-p P                drop tokens below P x the top probability (default 0 = off)\n"
            "  --repeat-penalty X       repetition penalty over the last 64 tokens (or the model's\n"
            "                           general.sampling.penalty_last_n; default 1 = off)\n"
            "  --presence-penalty X     presence penalty (default 0)\n"
            "  --frequency-penalty X    frequency penalty (default 0)\n"
            "  --typical P, --min-keep N, --top-nsigma N, --xtc-probability P, --xtc-threshold P,\n"
            "  --dry-multiplier X, --dry-base X, --dry-allowed-length N, --dry-penalty-last-n N,\n"
            "  --samplers 'top_k;typ_p;top_p;min_p;xtc;temperature'\n"
            "                           llama.cpp's sampler stages (all off by default; docs/server.md)\n"
            "  --seed S                 sampling seed (default: random, printed); same seed, same output\n"
            "  --think | --no-think     thinking on / off (default: the model's tern.chat.thinking key,\n"
            "                           else on for qwen35, off for qwen3)\n"
            "  --system TEXT            system prompt\n"
            "  --threads N              worker threads (default: all cores)\n"
            "  --device cpu|cuda[:N]    where the model runs (default cpu; `tern --version` lists them)\n"
            "  --tp N                   N tensor-parallel shards of --device (default 1; docs/multi-gpu.md)\n"
            "  --persistent             --device cuda: single-token steps as one persistent kernel (qwen3;\n"
            "                           docs/persistent.md; off by default)\n"
            "  --batch-invariant        --device cuda: the products of a batch-invariant server (the same\n"
            "                           tokens as `tern serve --batch-invariant`; slower; docs/server.md)\n"
            "  --ctx N                  context size in tokens (default: min(4096, trained))\n"
            CLI_CACHE_TYPE_HELP
            CLI_GDN_STATE_HELP
            "  --spec ngram|draft:PATH  speculative decoding: drafts from prompt lookup (n-grams of the\n"
            "                           prompt and reply) or a draft model with the same tokenizer, checked\n"
            "                           k at a time in one pass; the same text (greedy: byte for byte)\n"
            "  --spec-k N               most drafted tokens per pass (default 8, adapted to the hits)\n"
            "  --quiet                  no load/speed lines on stderr\n" CLI_ENV_SEE);
}

static bool take(const char *cmd, int argc, char **argv, int *i, const char **v) {
    if (*i + 1 >= argc) { cli_usage_error(cmd, "%s needs a value", argv[*i]); return false; }
    *v = argv[++*i];
    return true;
}

int gen_opts_parse(const char *cmd, gen_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    int64_t iv;
    double dv;
#define NUM_I(lo, hi, dst)                                                                            \
    do {                                                                                              \
        if (!take(cmd, argc, argv, i, &v)) return 2;                                                  \
        if (!cli_parse_i64(v, lo, hi, &iv)) {                                                         \
            cli_usage_error(cmd, "bad value '%s' for %s (integer %lld..%lld)", v, a, (long long)(lo), \
                            (long long)(hi));                                                         \
            return 2;                                                                                 \
        }                                                                                             \
        dst = iv;                                                                                     \
        return 1;                                                                                     \
    } while (0)
#define NUM_F(lo, hi, dst)                                                                         \
    do {                                                                                           \
        if (!take(cmd, argc, argv, i, &v)) return 2;                                               \
        if (!cli_parse_f64(v, lo, hi, &dv)) {                                                      \
            cli_usage_error(cmd, "bad value '%s' for %s (number %g..%g)", v, a, (double)(lo), (double)(hi)); \
            return 2;                                                                              \
        }                                                                                          \
        dst = (float)dv;                                                                           \
        return 1;                                                                                  \
    } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!take(cmd, argc, argv, i, &v)) return 2; o->model = v; return 1; }
    if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) NUM_I(0, 1 << 24, o->n_predict);
    if (!strcmp(a, "--temp")) { o->temp_set = true; NUM_F(0.0, 100.0, o->sp.temperature); }
    if (!strcmp(a, "--top-k")) { o->top_k_set = true; NUM_I(0, 1 << 24, o->sp.top_k); }
    if (!strcmp(a, "--top-p")) { o->top_p_set = true; NUM_F(1e-6, 1.0, o->sp.top_p); }
    if (!strcmp(a, "--min-p")) { o->min_p_set = true; NUM_F(0.0, 1.0, o->sp.min_p); }
    if (!strcmp(a, "--repeat-penalty")) { o->repeat_set = true; NUM_F(1e-3, 100.0, o->sp.repeat_penalty); }
    if (!strcmp(a, "--presence-penalty")) { o->presence_set = true; NUM_F(-100.0, 100.0, o->sp.presence_penalty); }
    if (!strcmp(a, "--frequency-penalty")) { o->freq_set = true; NUM_F(-100.0, 100.0, o->sp.frequency_penalty); }
    if (!strcmp(a, "--typical")) NUM_F(1e-6, 1.0, o->sp.typical_p);
    if (!strcmp(a, "--min-keep")) NUM_I(0, 1 << 20, o->sp.min_keep);
    if (!strcmp(a, "--top-nsigma")) NUM_F(-1.0, 1000.0, o->sp.top_n_sigma);
    if (!strcmp(a, "--xtc-probability")) NUM_F(0.0, 1.0, o->sp.xtc_probability);
    if (!strcmp(a, "--xtc-threshold")) NUM_F(0.0, 1.0, o->sp.xtc_threshold);
    if (!strcmp(a, "--dry-multiplier")) NUM_F(0.0, 1000.0, o->sp.dry_multiplier);
    if (!strcmp(a, "--dry-base")) NUM_F(1.0, 100.0, o->sp.dry_base);
    if (!strcmp(a, "--dry-allowed-length")) NUM_I(0, 1 << 16, o->sp.dry_allowed_length);
    if (!strcmp(a, "--dry-penalty-last-n")) NUM_I(0, 1 << 16, o->sp.dry_penalty_last_n);
    if (!strcmp(a, "--samplers")) { if (!take(cmd, argc, argv, i, &v)) return 2; o->sp.samplers = v; return 1; }
    if (!strcmp(a, "--threads")) NUM_I(1, 1024, o->threads);
    if (!strcmp(a, "--ctx")) NUM_I(16, 1 << 22, o->ctx);
    { int r = cli_parse_cache_type(cmd, argc, argv, i, &o->cache_k, &o->cache_v); if (r) return r; }
    { int r = cli_parse_gdn_state(cmd, argc, argv, i, &o->gdn_state); if (r) return r; }
    if (!strcmp(a, "--tp")) NUM_I(1, 64, o->tp);
    if (!strcmp(a, "--device")) { if (!take(cmd, argc, argv, i, &v)) return 2; o->device = v; return 1; }
    if (!strcmp(a, "--persistent")) { o->persistent = true; return 1; }
    if (!strcmp(a, "--batch-invariant")) { o->batch_invariant = true; return 1; }
    if (!strcmp(a, "--seed")) {
        if (!take(cmd, argc, argv, i, &v)) return 2;
        char *end;
        unsigned long long s = strtoull(v, &end, 10);
        if (!*v || *end || *v == '-') { cli_usage_error(cmd, "bad value '%s' for --seed (unsigned integer)", v); return 2; }
        o->sp.seed = s;
        o->seed_set = true;
        return 1;
    }
    if (!strcmp(a, "--think")) { o->think = 1; return 1; }
    if (!strcmp(a, "--no-think")) { o->think = 0; return 1; }
    if (!strcmp(a, "--system")) { if (!take(cmd, argc, argv, i, &v)) return 2; o->system = v; return 1; }
    if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) { o->quiet = true; return 1; }
    if (!strcmp(a, "--spec")) {
        if (!take(cmd, argc, argv, i, &v)) return 2;
        if (strcmp(v, "ngram") && (strncmp(v, "draft:", 6) || !v[6])) {
            cli_usage_error(cmd, "bad value '%s' for --spec (ngram or draft:PATH)", v);
            return 2;
        }
        o->spec = v;
        return 1;
    }
    if (!strcmp(a, "--spec-k")) NUM_I(1, 16, o->spec_k);
    return 0;
#undef NUM_I
#undef NUM_F
}

bool cli_model_thinking(const char *cmd, const tern_model *m, tern_chat_format fmt, bool quiet) {
    bool v = false;
    tern_status st = tern_model_meta_bool(m, "tern.chat.thinking", &v);
    if (st == TERN_OK) return v;
    if (st != TERN_ERR_NOT_FOUND && !quiet) /* e.g. a string where a BOOL belongs */
        fprintf(stderr, "tern %s: warning: ignoring tern.chat.thinking (%s)\n", cmd, tern_last_error());
    return fmt == TERN_CHAT_QWEN35;
}

int cli_model_sampling_read(const char *cmd, const tern_model *m, bool quiet, cli_model_sampling *out) {
    out->temp = out->top_p = out->min_p = out->repeat_penalty = -1.0f;
    out->top_k = out->penalty_last_n = -1;
    out->freq = out->present = 0;
    out->has_freq = out->has_present = false;
    static const struct { const char *key; double lo, hi; int kind; } keys[] = {
        {"general.sampling.temp", 0, 100, 0},          {"general.sampling.top_p", 1e-6, 1, 1},
        {"general.sampling.min_p", 0, 1, 2},           {"general.sampling.penalty_repeat", 1e-3, 100, 3},
        {"general.sampling.top_k", 0, 1 << 24, 4},     {"general.sampling.penalty_last_n", 0, 1 << 24, 5},
        {"general.sampling.penalty_freq", -2, 2, 6},   {"general.sampling.penalty_present", -2, 2, 7},
    };
    int n = 0;
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        float f = 0;
        int64_t i = 0;
        bool is_f = keys[k].kind < 4 || keys[k].kind >= 6;
        tern_status st = is_f ? tern_model_meta_f32(m, keys[k].key, &f) : tern_model_meta_i64(m, keys[k].key, &i);
        if (st == TERN_ERR_NOT_FOUND) continue;
        double v = is_f ? f : (double)i;
        if (st || !(v >= keys[k].lo && v <= keys[k].hi)) {
            if (!quiet)
                fprintf(stderr, "tern %s: warning: ignoring %s (%s)\n", cmd, keys[k].key,
                        st ? tern_last_error() : "out of range");
            continue;
        }
        switch (keys[k].kind) {
        case 0: out->temp = f; break;
        case 1: out->top_p = f; break;
        case 2: out->min_p = f; break;
        case 3: out->repeat_penalty = f; break;
        case 4: out->top_k = (int)i; break;
        case 5: out->penalty_last_n = (int)i; break;
        case 6: out->freq = f; out->has_freq = true; break;
        default: out->present = f; out->has_present = true; break;
        }
        n++;
    }
    return n;
}

int gen_ctx_open(const char *cmd, const gen_opts *o, gen_ctx *g) {
    memset(g, 0, sizeof *g);
    const char *path = o->model ? o->model : cli_default_model();
    if (!path) return cli_usage_error(cmd, "no model: use -m MODEL or set TERN_MODEL");
    double t0 = tern_now_s_cli();
    tern_status st = tern_tokenizer_load(path, &g->tok);
    if (st) return cli_lib_error(cmd, st);
    tern_model_params mp;
    cli_model_params_from_env(&mp);
    mp.n_threads = o->threads;
    mp.device = o->device;
    mp.tp = o->tp;
    mp.cuda_persistent = o->persistent;
    mp.batch_invariant = o->batch_invariant;
    mp.gdn_state = o->gdn_state;
    if ((st = tern_model_load(path, &mp, &g->model))) { gen_ctx_close(g); return cli_lib_error(cmd, st); }
    const tern_model_info *info = tern_model_get_info(g->model);
    tern_session_params spp;
    tern_session_params_default(&spp);
    spp.n_ctx = o->ctx;
    spp.cache_type_k = o->cache_k;
    spp.cache_type_v = o->cache_v;
    if ((st = tern_session_new(g->model, &spp, &g->sess))) { gen_ctx_close(g); return cli_lib_error(cmd, st); }
    g->fmt = tern_chat_format_for(g->tok);
    g->think = o->think < 0 ? cli_model_thinking(cmd, g->model, g->fmt, o->quiet) : o->think == 1;
    tern_sampler_params sp = o->sp;
    if (!o->seed_set) sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    /* a flag > the model's general.sampling.* key > the Qwen3 model card (thinking
     * mode: temperature 0.6, top-p 0.95) */
    cli_model_sampling ms;
    int n_ms = cli_model_sampling_read(cmd, g->model, o->quiet, &ms);
    if (g->think && !o->temp_set) sp.temperature = 0.6f;
    if (g->think && !o->top_p_set) sp.top_p = 0.95f;
    if (!o->temp_set && ms.temp >= 0) sp.temperature = ms.temp;
    if (!o->top_p_set && ms.top_p >= 0) sp.top_p = ms.top_p;
    if (!o->top_k_set && ms.top_k >= 0) sp.top_k = ms.top_k;
    if (!o->min_p_set && ms.min_p >= 0) sp.min_p = ms.min_p;
    if (!o->repeat_set && ms.repeat_penalty > 0) sp.repeat_penalty = ms.repeat_penalty;
    if (ms.penalty_last_n > 0) sp.penalty_last_n = ms.penalty_last_n;
    if (!o->freq_set && ms.has_freq) sp.frequency_penalty = ms.freq;
    if (!o->presence_set && ms.has_present) sp.presence_penalty = ms.present;
    if ((st = tern_sampler_new(&sp, info->n_vocab, &g->smp))) { gen_ctx_close(g); return cli_lib_error(cmd, st); }
    if (o->spec && !strcmp(o->spec, "ngram")) {
        st = tern_drafter_ngram_new(0, 0, &g->drafter);
    } else if (o->spec) {
        const char *dp = o->spec + 6;
        st = tern_tokenizer_load(dp, &g->draft_tok);
        tern_model_params dmp = mp;
        dmp.tp = 0;
        if (!st) st = tern_model_load(dp, &dmp, &g->draft_model);
        if (!st) st = tern_drafter_model_new(g->draft_model, g->draft_tok, g->tok, tern_session_n_ctx(g->sess), &g->drafter);
    }
    if (st) { gen_ctx_close(g); return cli_lib_error(cmd, st); }
    g->has_template = tern_tokenizer_chat_template(g->tok) != NULL;
    g->load_s = tern_now_s_cli() - t0;
    if (!o->quiet)
        fprintf(stderr, "tern %s: %s (%s, %d layers, vocab %d, ctx %d) loaded in %.2f s, seed %llu, thinking %s, "
                        "temp %.2f top-k %d top-p %.2f min-p %.2f repeat-penalty %.2f (last %d) frequency-penalty %.2f "
                        "presence-penalty %.2f%s\n", cmd, path, info->arch,
                info->n_layers, info->n_vocab, tern_session_n_ctx(g->sess), g->load_s, (unsigned long long)sp.seed,
                g->think ? "on" : "off", sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.repeat_penalty,
                sp.penalty_last_n > 0 ? sp.penalty_last_n : 64, sp.frequency_penalty, sp.presence_penalty,
                n_ms ? " (defaults from the model's general.sampling keys)" : "");
    if (!o->quiet) {
        char line[160];
        cli_cache_line(g->sess, line, sizeof line);
        fprintf(stderr, "tern %s: %s\n", cmd, line);
    }
    return 0;
}

void gen_ctx_close(gen_ctx *g) {
    tern_drafter_free(g->drafter);
    tern_model_free(g->draft_model);
    tern_tokenizer_free(g->draft_tok);
    tern_sampler_free(g->smp);
    tern_session_free(g->sess);
    tern_model_free(g->model);
    tern_tokenizer_free(g->tok);
    memset(g, 0, sizeof *g);
}

void gen_ctx_spec(const gen_ctx *g, const gen_opts *o, tern_gen_params *gp) {
    gp->drafter = g->drafter;
    gp->spec_k = o->spec_k;
}

void gen_spec_report(const char *cmd, const gen_ctx *g, const tern_gen_result *r, bool quiet) {
    if (quiet || !g->drafter) return;
    fprintf(stderr, "tern %s: speculation (%s): %zu drafted, %zu accepted (%.0f%%), %zu verify passes, %.2f tokens a pass\n",
            cmd, tern_drafter_kind(g->drafter), r->spec_drafted, r->spec_accepted,
            r->spec_drafted ? 100.0 * (double)r->spec_accepted / (double)r->spec_drafted : 0.0, r->spec_steps,
            r->spec_steps ? (double)(r->spec_accepted + r->spec_steps) / (double)r->spec_steps : 0.0);
}

static struct sigaction g_old_int;
static void on_sigint(int sig) { (void)sig; atomic_store(&gen_cancel, 1); } /* lock-free: signal-safe */

void gen_sigint_arm(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    atomic_store(&gen_cancel, 0);
    sigaction(SIGINT, &sa, &g_old_int);
}

void gen_sigint_disarm(void) { sigaction(SIGINT, &g_old_int, NULL); }
