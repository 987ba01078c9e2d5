/*
 * cmd_serve.c - `tern serve`: the OpenAI-compatible HTTP server (src/server/).
 * Loads the model (the embedded default model when -m is absent), creates the
 * slots, listens, prints the URL on stdout, then runs the scheduler loop on
 * the main thread until SIGINT / SIGTERM (taken by a signal thread): it stops
 * accepting, ends the requests in flight, joins every thread and frees
 * everything before exiting 0.
 */
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "server/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: tern serve [-m MODEL] [options]\n"
            "OpenAI-compatible HTTP server: GET /health, GET /v1/models, POST /v1/chat/completions,\n"
            "POST /v1/completions (stream with \"stream\": true). See docs/server.md.\n\n"
            "  -m, --model PATH     GGUF file or MLX pack folder (default: the embedded model / $TERN_MODEL)\n"
            "  --host ADDR          address to listen on (default 127.0.0.1)\n"
            "  --port N             port (default 8080; 0 = any free port, printed)\n"
            "  --parallel N         slots: requests generated at once, each with its own context\n"
            "                       (default 4, or 2 when --ctx is above 4096)\n"
            "  --ctx N              context per slot in tokens (default: min(4096, trained))\n"
            "  --cache-type T       KV cache type: f32, f16 (default), bf16 or q8_0; --cache-type-k/-ctk,\n"
            "                       --cache-type-v/-ctv: keys or values only\n"
            "  --gdn-state f32|bf16 qwen35 GDN recurrent states in bf16: half their bytes per slot on\n"
            "                       cuda, so more --parallel slots fit (default f32; docs/kernels.md)\n"
            "  --queue N            requests waiting for a slot before 503 (default 16)\n"
            "  --threads N          worker threads for the model (default: all cores)\n"
            "  --device cpu|cuda[:N] where the model runs (default cpu; `tern --version` lists them);\n"
            "                       on a GPU the slots decode together in one batched step\n"
            "  --alias NAME         model id shown by /v1/models and in responses (default: the file name)\n"
            "  --api-key KEY        require 'Authorization: Bearer KEY' (not on /health)\n"
            "  --max-body BYTES     largest request body (default 8388608); larger: 413\n"
            "  --grace-s N          on SIGINT/SIGTERM, let running requests finish for up to N s (default 10)\n"
            "  --max-conns N        open connections at most (default 256)\n"
            "  --per-ip N           open connections per client address (default 0 = no limit)\n"
            "  --header-timeout-s N headers must arrive within N s of connecting / of the last reply (default 10)\n"
            "  --idle-timeout-s N  a connection with nothing to read or write for N s is closed (a stream\n"
            "                      waiting for tokens is kept open by --sse-ping-s) (default 120)\n"
            "  --sse-ping-s S      a stream with nothing to send for S s gets an SSE comment line (\": ping\"),\n"
            "                      so a request waiting long for its first token keeps its connection (default 15; 0: off)\n"
            "  --body-timeout-s N   the body must arrive within N s of the headers (default 60)\n"
            "  --cors ORIGIN        send Access-Control-Allow-Origin: ORIGIN (and answer OPTIONS preflights)\n"
            "  --ssl-key-file F, --ssl-cert-file F\n"
            "                       serve HTTPS with this PEM key and certificate (both needed)\n"
            "  --max-tokens N       max_tokens of a request that gives none (default 512; 0 = until the end\n"
            "                       of generation or a full context)\n"
            "  --think | --no-think thinking on / off by default (default: the model's tern.chat.thinking key,\n"
            "                       false in the embedded raw-text model; else on for qwen35 templates,\n"
            "                       off for qwen3)\n"
            "  --temp T, --top-k N, --top-p P, --min-p P, --repeat-penalty X\n"
            "                       sampling of requests that give none (default: the model's\n"
            "                       general.sampling.* keys, else temp 0.7 / 0.6 thinking, top-p 0.8 / 0.95,\n"
            "                       top-k 20, min-p 0, repeat-penalty 1)\n"
            "  --no-prefix-cache    evaluate every prompt whole (default: a request continues the slot whose\n"
            "                       session holds the longest prefix of its prompt)\n"
            "  --prefix-cache-mib N memory for the prefix cache's snapshots of recurrent (GDN) state (device\n"
            "                       memory on a GPU), all slots together, least recently used dropped first\n"
            "                       (default 1024; 0 = none: a qwen35 request then reuses only a slot's\n"
            "                       whole sequence)\n"
            "  --admit-free-mib N   admit a request only while the back-end has N MiB free, else 503 with\n"
            "                       Retry-After (default 0 = 256 on a GPU, no check on the CPU)\n"
            "  --spec ngram|draft:PATH  speculative decoding for every request: prompt lookup, or a draft\n"
            "                       model with the same tokenizer (a draft session per slot); a request\n"
            "                       opts out with \"speculative\": false; greedy replies are the same\n"
            "                       bytes; --spec-k N drafts a pass at most (default 8). /metrics: tern_spec_*\n"
            "  --prefill-budget N   prompt tokens evaluated per scheduler round while any slot decodes\n"
            "                       (default 0 = one prefill chunk: 64 on the CPU, 512 on CUDA); longer\n"
            "                       prompts wait their turn in chunks, so the streams keep flowing\n"
            "  --prefill-chunk N    prompt tokens per prefill pass (default 0 = the back-end's: 64 on the\n"
            "                       CPU, 512 on CUDA); every prompt is split the same way whatever else\n"
            "                       runs (replies do not depend on the load); smaller: shorter stalls for\n"
            "                       the decoding streams when a prompt arrives, slower prefill\n"
            "  --decode-batch N     decoding slots per batched pass (default 0 = the back-end's batch hint:\n"
            "                       5 on the CPU, 64 on CUDA; at most one prefill chunk)\n"
            "  --batch-invariant    a request's greedy reply is the same bytes whatever else runs beside it\n"
            "                       (CUDA: every product on the tensor-core GEMM with K splits fixed by the\n"
            "                       matrix's shape, slower at low load; the CPU: --decode-batch at most 5,\n"
            "                       its default; docs/server.md)\n"
            "  --sample-threads N   threads choosing the decoding slots' next tokens each round on\n"
            "                       vocabularies of 32768+ tokens (default 0 = the CPUs, at most 8 and at\n"
            "                       most --parallel; 1 = the scheduler thread alone)\n"
            "  --no-embedding       do not serve embeddings. By default POST /v1/embeddings (OpenAI) and\n"
            "                       /embedding (llama-server's shape) give the final hidden state after the\n"
            "                       output norm, pooled and L2-normalised, from one more session of --ctx\n"
            "                       tokens made at the first such request (none is made until then; with\n"
            "                       --no-embedding those paths answer 501). --embedding / --embeddings\n"
            "                       (llama-server's flag) are accepted and change nothing\n"
            "  --pooling mean|last|cls\n"
            "                       how a text's per-token states become one vector: their mean, the last\n"
            "                       token's, or the first token's (default: the model's <arch>.pooling_type\n"
            "                       key where it says one of these, else mean)\n"
            "  --quiet              no load line and no per-request log lines on stderr\n" CLI_ENV_SEE);
}

/* The signal thread: SIGINT / SIGTERM stop accepting and end the scheduler's
 * loop, which runs on the main thread (see srv_sched_run). */
typedef struct sig_ctx {
    sigset_t set;
    srv_sched *sched;
    srv_http *http;
    bool quiet;
    double grace_ms;
} sig_ctx;

static void *sig_main(void *arg) {
    sig_ctx *c = arg;
    int sig = 0;
    sigwait(&c->set, &sig);
    if (!c->quiet) fprintf(stderr, "tern serve: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_http_quiesce(c->http);      /* no new connections */
    /* waiting requests get 503 now; running ones may finish within the grace
     * period, then the loop ends them (a stream gets an error event and [DONE]) */
    srv_sched_drain(c->sched, c->grace_ms);
    return NULL;
}

/* A whole (small) text file, NUL-terminated; NULL with errno set. */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            char *b = realloc(buf, cap = cap ? cap * 2 : 8192);
            if (!b || cap > (1u << 24)) { free(b ? b : buf); fclose(f); errno = b ? EFBIG : ENOMEM; return NULL; }
            buf = b;
        }
        size_t r = fread(buf + n, 1, 4096, f);
        n += r;
        if (r < 4096) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); errno = EIO; return NULL; }
    buf[n] = 0;
    return buf;
}

static const char *base_name(const char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;   /* a pack folder given with a trailing slash */
    static char buf[256];
    size_t e = n;
    while (n && p[n - 1] != '/') n--;
    snprintf(buf, sizeof buf, "%.*s", (int)(e - n), p + n);
    return buf;
}


/* --spec ngram|draft:PATH / --spec-k N: 0 taken (i moved past the value), else the usage
 * error's exit code. */
static int serve_spec_opt(int argc, char **argv, int *i, const char **spec, int64_t *k) {
    const char *a = argv[*i];
    if (*i + 1 >= argc) return cli_usage_error("serve", "%s needs a value", a);
    const char *v = argv[++*i];
    if (!strcmp(a, "--spec-k")) {
        if (!cli_parse_i64(v, 1, 16, k)) return cli_usage_error("serve", "bad --spec-k '%s' (1..16)", v);
        return 0;
    }
    if (strcmp(v, "ngram") && (strncmp(v, "draft:", 6) || !v[6]))
        return cli_usage_error("serve", "bad value '%s' for --spec (ngram or draft:PATH)", v);
    *spec = v;
    return 0;
}


/* --spec: the drafter, and for draft:PATH the draft model and its tokenizer (loaded once;
 * srv_sched_new gives each slot a draft session on it). */
typedef struct serve_spec {
    tern_drafter *drafter;
    tern_model *dm;
    tern_tokenizer *dtok;
} serve_spec;

static void serve_spec_free(serve_spec *x) {
    tern_drafter_free(x->drafter);
    tern_model_free(x->dm);
    tern_tokenizer_free(x->dtok);
    memset(x, 0, sizeof *x);
}

/* 0, or 1 after printing why (nothing left allocated). */
static int serve_spec_open(const char *spec, const tern_model_params *mp, const tern_tokenizer *tok, serve_spec *x) {
    tern_status st;
    if (!strcmp(spec, "ngram")) {
        st = tern_drafter_ngram_new(0, 0, &x->drafter);
    } else {
        tern_model_params dmp = *mp;
        dmp.tp = 0;
        if (!(st = tern_tokenizer_load(spec + 6, &x->dtok))) st = tern_model_load(spec + 6, &dmp, &x->dm);
        if (!st && (st = tern_tokenizer_compare(tok, x->dtok))) {
            fprintf(stderr, "tern serve: --spec %s: %s (first: the model's, second: the draft's)\n", spec,
                    tern_last_error());
            serve_spec_free(x);
            return 1;
        }
    }
    if (st) {
        serve_spec_free(x);
        return cli_lib_error("serve", st);
    }
    return 0;
}


/* The end of tern serve, whichever way: everything it made, freed; returns rc. */
static int serve_end(char *key_pem, char *cert_pem, srv_embedder *e, srv_sched *sched, tern_model *m,
                     tern_tokenizer *tok, int rc) {
    free(key_pem);
    free(cert_pem);
    srv_embedder_free(e);
    srv_sched_free(sched);
    tern_model_free(m);
    tern_tokenizer_free(tok);
    return rc;
}

int tern_cmd_serve(int argc, char **argv) {
    const char *model = NULL, *host = "127.0.0.1", *alias = NULL, *api_key = NULL, *cors = NULL;
    const char *ssl_key = NULL, *ssl_cert = NULL;
    const char *device = NULL;
    int gdn_state = TERN_GDN_STATE_F32;
    int64_t port = 8080, parallel = 0, ctx = 0, queue = 16, threads = 0, max_body = 8 << 20;
    int64_t max_tokens = 512, top_k = -1, snap_mib = 1024, prefill_budget = 0, decode_batch = 0, admit_mib = 0,
            sample_threads = 0, prefill_chunk = 0;
    double f_temp = -1, f_top_p = -1, f_min_p = -1, f_repeat = -1;
    int think = -1;
    int64_t grace = 10, max_conns = 256, per_ip = 0, hdr_to = 10, body_to = 60, idle_to = 120;
    double sse_ping = 15;
    bool quiet = false, no_prefix_cache = false, embedding = true, batch_invariant = false;
    const char *spec = NULL;
    int64_t spec_k = 0;
    const char *pooling = NULL;
    tern_cache_type cache_k = TERN_CACHE_DEFAULT, cache_v = TERN_CACHE_DEFAULT;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) { usage(stdout); return 0; }
        if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) { quiet = true; continue; }
        if (!strcmp(a, "--think")) { think = 1; continue; }
        if (!strcmp(a, "--no-think")) { think = 0; continue; }
        if (!strcmp(a, "--no-prefix-cache")) { no_prefix_cache = true; continue; }
        if (!strcmp(a, "--batch-invariant")) { batch_invariant = true; continue; }
        if (!strcmp(a, "--spec") || !strcmp(a, "--spec-k")) {
            int r = serve_spec_opt(argc, argv, &i, &spec, &spec_k);
            if (r) return r;
            continue;
        }
        if (!strcmp(a, "--embedding") || !strcmp(a, "--embeddings")) { embedding = true; continue; }
        if (!strcmp(a, "--no-embedding") || !strcmp(a, "--no-embeddings")) { embedding = false; continue; }
        {
            int r = cli_parse_cache_type("serve", argc, argv, &i, &cache_k, &cache_v);
            if (r == 2) return 2;
            if (r == 1) continue;
            r = cli_parse_gdn_state("serve", argc, argv, &i, &gdn_state);
            if (r == 2) return 2;
            if (r == 1) continue;
        }
        if (i + 1 >= argc) {
            if (cli_is_one_of(a, "-m --model --host --port --parallel --ctx --queue --threads --device --alias --api-key --max-body "
                                 "--grace-s --max-conns --per-ip --header-timeout-s --body-timeout-s --sse-ping-s --idle-timeout-s --cors --max-tokens "
                                 "--temp --top-k --top-p --min-p --repeat-penalty --prefix-cache-mib --prefill-budget --prefill-chunk --decode-batch --sample-threads --pooling --admit-free-mib"))
                return cli_usage_error("serve", "%s needs a value", a);
            return cli_usage_error("serve", "unknown option '%s'", a);
        }
        const char *v = argv[i + 1];
        int64_t *num = NULL, lo = 0, hi = 0;
        /* sampling defaults of requests that give none (above the model's keys) */
        double *fnum = NULL, flo = 0, fhi = 0;
        if (!strcmp(a, "--temp")) { fnum = &f_temp; flo = 0; fhi = 100; }
        else if (!strcmp(a, "--top-p")) { fnum = &f_top_p; flo = 1e-6; fhi = 1; }
        else if (!strcmp(a, "--min-p")) { fnum = &f_min_p; flo = 0; fhi = 1; }
        else if (!strcmp(a, "--repeat-penalty")) { fnum = &f_repeat; flo = 1e-3; fhi = 100; }
        else if (!strcmp(a, "--sse-ping-s")) { fnum = &sse_ping; flo = 0; fhi = 86400; }
        if (fnum) {
            char *end;
            double d = strtod(v, &end);
            if (!*v || *end || !(d >= flo && d <= fhi))
                return cli_usage_error("serve", "bad value '%s' for %s (number %g..%g)", v, a, flo, fhi);
            *fnum = d;
            i++;
            continue;
        }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--host")) host = v;
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--alias")) alias = v;
        else if (!strcmp(a, "--api-key")) api_key = v;
        else if (!strcmp(a, "--cors")) cors = v;
        else if (!strcmp(a, "--ssl-key-file")) ssl_key = v;
        else if (!strcmp(a, "--ssl-cert-file")) ssl_cert = v;
        else if (!strcmp(a, "--pooling")) {
            if (strcmp(v, "mean") && strcmp(v, "last") && strcmp(v, "cls"))
                return cli_usage_error("serve", "bad value '%s' for --pooling (mean, last or cls)", v);
            pooling = v;
        }
        else if (!strcmp(a, "--max-tokens")) { num = &max_tokens; lo = 0; hi = 1 << 24; }
        else if (!strcmp(a, "--top-k")) { num = &top_k; lo = 0; hi = 1 << 24; }
        else if (!strcmp(a, "--prefix-cache-mib")) { num = &snap_mib; lo = 0; hi = (int64_t)1 << 30; }
        else if (!strcmp(a, "--prefill-budget")) { num = &prefill_budget; lo = 0; hi = 1 << 22; }
        else if (!strcmp(a, "--decode-batch")) { num = &decode_batch; lo = 0; hi = 4096; }
        else if (!strcmp(a, "--sample-threads")) { num = &sample_threads; lo = 0; hi = 256; }
        else if (!strcmp(a, "--prefill-chunk")) { num = &prefill_chunk; lo = 0; hi = 65536; }
        else if (!strcmp(a, "--admit-free-mib")) { num = &admit_mib; lo = 0; hi = (int64_t)1 << 30; }
        else if (!strcmp(a, "--grace-s")) { num = &grace; lo = 0; hi = 86400; }
        else if (!strcmp(a, "--max-conns")) { num = &max_conns; lo = 4; hi = 65536; }
        else if (!strcmp(a, "--per-ip")) { num = &per_ip; lo = 0; hi = 65536; }
        else if (!strcmp(a, "--header-timeout-s")) { num = &hdr_to; lo = 1; hi = 86400; }
        else if (!strcmp(a, "--body-timeout-s")) { num = &body_to; lo = 1; hi = 86400; }
        else if (!strcmp(a, "--idle-timeout-s")) { num = &idle_to; lo = 1; hi = 86400; }
        else if (!strcmp(a, "--port")) { num = &port; lo = 0; hi = 65535; }
        else if (!strcmp(a, "--parallel")) { num = &parallel; lo = 1; hi = 256; }
        else if (!strcmp(a, "--ctx")) { num = &ctx; lo = 16; hi = 1 << 22; }
        else if (!strcmp(a, "--queue")) { num = &queue; lo = 1; hi = 1 << 16; }
        else if (!strcmp(a, "--threads")) { num = &threads; lo = 1; hi = 1024; }
        else if (!strcmp(a, "--max-body")) { num = &max_body; lo = 1024; hi = (int64_t)1 << 32; }
        else return cli_usage_error("serve", "unknown option '%s'", a);
        if (num && !cli_parse_i64(v, lo, hi, num))
            return cli_usage_error("serve", "bad value '%s' for %s (integer %lld..%lld)", v, a, (long long)lo, (long long)hi);
        if (!*v && (v == host || v == alias || v == api_key || v == model || v == cors))
            return cli_usage_error("serve", "%s needs a non-empty value", a);
        i++;
    }
    if (!ssl_key != !ssl_cert) return cli_usage_error("serve", "--ssl-key-file and --ssl-cert-file go together");
    if (pooling && !embedding) return cli_usage_error("serve", "--pooling with --no-embedding: no embeddings to pool");
    if (!model) model = cli_default_model();
    if (!model) return cli_usage_error("serve", "no model: use -m MODEL or set TERN_MODEL");
    if (!parallel) parallel = ctx > 4096 ? 2 : 4;
    const bool on_cpu = !device || !strcmp(device, "cpu");
    if (batch_invariant && on_cpu && decode_batch > 5)
        return cli_usage_error("serve", "--batch-invariant on the CPU: --decode-batch %lld is above 5 (the CPU's batches "
                                        "of up to 5 rows are the same bits as alone; larger ones are not)",
                               (long long)decode_batch);
    if (batch_invariant && !on_cpu && decode_batch > 64)
        return cli_usage_error("serve", "--batch-invariant: --decode-batch %lld is above 64 (the fixed K splits hold "
                                        "the same bits up to 64 rows a pass)", (long long)decode_batch);

    /* Signals: every thread created from here on inherits the block; the main
     * thread takes SIGINT / SIGTERM with sigwait. Writes to closed sockets must
     * not kill the process. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tern_tokenizer *tok = NULL;
    tern_model *m = NULL;
    tern_status st = tern_tokenizer_load(model, &tok);
    if (st) return cli_lib_error("serve", st);
    tern_model_params mp;
    cli_model_params_from_env(&mp);
    mp.n_threads = (int)threads;
    mp.device = device;
    mp.gdn_state = gdn_state;
    mp.batch_invariant = batch_invariant;
    if ((st = tern_model_load(model, &mp, &m))) { tern_tokenizer_free(tok); return cli_lib_error("serve", st); }
    srv_sched_params sp = {(int)parallel, (int)ctx, (int)queue, cache_k, cache_v, no_prefix_cache,
                           (uint64_t)snap_mib << 20, (int)prefill_budget, (int)decode_batch,
                           (int)sample_threads, (uint64_t)admit_mib << 20};
    serve_spec sx = {0};
    if (spec && serve_spec_open(spec, &mp, tok, &sx)) {
        tern_model_free(m);
        tern_tokenizer_free(tok);
        return 1;
    }
    sp.drafter = sx.drafter;
    sp.draft_model = sx.dm;
    sp.draft_tok = sx.dtok;
    sp.spec_k = (int)spec_k;
    sp.prefill_chunk = (int)prefill_chunk;
    srv_sched *sched = NULL;
    if ((st = srv_sched_new(m, tok, &sp, &sched))) {
        fprintf(stderr, "tern serve: %s\n", srv_sched_error());
        serve_spec_free(&sx); /* the scheduler's once made */
        int rc = 1;
        tern_model_free(m);
        tern_tokenizer_free(tok);
        return rc;
    }
    int n_ctx = 0;
    srv_sched_stats(sched, NULL, NULL, NULL, &n_ctx);
    srv_embedder *embedder = NULL;
    if (embedding) {
        /* pooling: the flag > the model's <arch>.pooling_type (llama.cpp's values: 1 mean,
         * 2 cls, 3 last) > mean */
        tern_pooling pool = TERN_POOLING_MEAN;
        int64_t pt = 0;
        char key[96];
        snprintf(key, sizeof key, "%s.pooling_type", tern_model_get_info(m)->arch);
        if (pooling) tern_pooling_parse(pooling, &pool);
        else if (tern_model_meta_i64(m, key, &pt) == TERN_OK && pt >= 1 && pt <= 3)
            pool = pt == 1 ? TERN_POOLING_MEAN : pt == 2 ? TERN_POOLING_CLS : TERN_POOLING_LAST;
        if ((st = srv_embedder_new(m, n_ctx, cache_k, cache_v, pool, &embedder))) {
            fprintf(stderr, "tern serve: the embedding session: %s\n", tern_last_error());
            return serve_end(NULL, NULL, NULL, sched, m, tok, 1);
        }
        if (!quiet)
            fprintf(stderr, "tern serve: embeddings on (/v1/embeddings, /embedding): %d dimensions, %s pooling, "
                            "normalised, ctx %d (its session made at the first request)\n", srv_embedder_dim(embedder),
                    tern_pooling_name(pool),
                    srv_embedder_n_ctx(embedder));
    }
    /* thinking by default: the flag > the model's tern.chat.thinking key (the embedded
     * raw-text model says false: its template's thinking branch only makes it spend the
     * reply inside <think>, docs/default-model.md) > the chat format */
    if (think < 0) think = cli_model_thinking("serve", m, tern_chat_format_for(tok), quiet) ? 1 : 0;
    char *key_pem = NULL, *cert_pem = NULL;     /* HTTPS: read now, valid while the server runs */
    if (ssl_key && (!(key_pem = read_text(ssl_key)) || !(cert_pem = read_text(ssl_cert)))) {
        fprintf(stderr, "tern serve: cannot read %s: %s\n", key_pem ? ssl_cert : ssl_key, strerror(errno));
        return serve_end(key_pem, NULL, embedder, sched, m, tok, 1);
    }
    srv_config c = {host, (int)port, alias ? alias : base_name(model), api_key, (size_t)max_body, quiet,
                    (int)max_conns, (int)per_ip, (double)hdr_to, (double)body_to, sse_ping, (double)idle_to, cors, think,
                    (int)max_tokens};
    /* sampling defaults: a flag > the model's general.sampling.* keys > built-in
     * (the Qwen3 model card, applied per request in http.c) */
    cli_model_sampling ms;
    int n_ms = cli_model_sampling_read("serve", m, quiet, &ms);
    bool flags = f_temp >= 0 || f_top_p >= 0 || f_min_p >= 0 || f_repeat > 0 || top_k >= 0;
    c.default_temp = f_temp >= 0 ? (float)f_temp : ms.temp;
    c.default_top_p = f_top_p >= 0 ? (float)f_top_p : ms.top_p;
    c.default_min_p = f_min_p >= 0 ? (float)f_min_p : ms.min_p;
    c.default_repeat_penalty = f_repeat > 0 ? (float)f_repeat : ms.repeat_penalty;
    c.default_top_k = top_k >= 0 ? (int)top_k : ms.top_k;
    c.batch_invariant = batch_invariant;
    c.default_penalty_last_n = ms.penalty_last_n;
    c.default_freq = ms.freq;
    c.has_default_freq = ms.has_freq;
    c.default_presence = ms.present;
    c.has_default_presence = ms.has_present;
    c.sampling_source = n_ms && flags ? "model+flags" : n_ms ? "model" : flags ? "flags" : "built-in";
    c.tls_key_pem = key_pem;
    c.tls_cert_pem = cert_pem;
    c.embedder = embedder;
    srv_http *http = NULL;
    char err[256];
    int bound = 0;
    if (srv_http_start(&c, sched, tok, &http, &bound, err, sizeof err)) {
        fprintf(stderr, "tern serve: %s\n", err);
        return serve_end(key_pem, cert_pem, embedder, sched, m, tok, 1);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const tern_model_info *info = tern_model_get_info(m);
    if (!quiet)
        fprintf(stderr, "tern serve: %s (%s, %d layers, vocab %d) loaded in %.2f s; %d slots x ctx %d, queue %d, "
                        "thinking %s by default\n", model, info->arch, info->n_layers, info->n_vocab,
                (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, (int)parallel, n_ctx, (int)queue,
                think == 1 ? "on" : "off");
    if (!quiet) {
        uint64_t now = 0, max = 0;
        const tern_session *s0 = NULL;
        srv_sched_cache(sched, &now, &max, &s0);
        char line[160];
        cli_cache_line(s0, line, sizeof line);
        fprintf(stderr, "tern serve: %s per slot; all %d slots: %.1f MiB now, %.1f MiB at full context\n", line,
                (int)parallel, now / 1048576.0, max / 1048576.0);
        srv_step_stats sst;
        srv_sched_step_stats(sched, &sst);
        if (sst.admit_free && sst.mem_free && sst.mem_free < sst.admit_free)
            fprintf(stderr, "tern serve: warning: %.0f MiB free, under the admission floor of %.0f MiB "
                            "(--admit-free-mib): requests get 503 until memory is freed\n",
                    sst.mem_free / 1048576.0, sst.admit_free / 1048576.0);
        srv_snap_stats ss;
        srv_sched_snap_stats(sched, &ss);
        if (no_prefix_cache)
            fprintf(stderr, "tern serve: prefix cache off\n");
        else if (!tern_session_can_truncate(s0) && !ss.budget)
            fprintf(stderr, "tern serve: prefix cache: no snapshots (--prefix-cache-mib 0): a request reuses a "
                            "slot's state only when it extends the slot's whole sequence\n");
        else if (!tern_session_can_truncate(s0))
            fprintf(stderr, "tern serve: prefix cache: recurrent-state snapshots at chat message ends, prompt and "
                            "reply ends, %.2f MiB each in %s memory, up to %.0f MiB (%llu snapshots; --prefix-cache-mib)\n",
                    ss.each / 1048576.0, strcmp(info->device, "cpu") ? "device" : "host", ss.budget / 1048576.0,
                    (unsigned long long)(ss.each ? ss.budget / ss.each : 0));
        else
            fprintf(stderr, "tern serve: prefix cache: the KV cache is rewound to the longest common prefix\n");
    }
    bool v6 = strchr(host, ':') != NULL;
    printf("tern serve: listening on %s://%s%s%s:%d\n", key_pem ? "https" : "http", v6 ? "[" : "", host, v6 ? "]" : "", bound);
    fflush(stdout);

    sig_ctx sc = {set, sched, http, quiet, (double)grace * 1e3};
    pthread_t sig_th;
    if (pthread_create(&sig_th, NULL, sig_main, &sc)) {
        fprintf(stderr, "tern serve: cannot start the signal thread\n");
        srv_http_stop(http);
        return serve_end(key_pem, cert_pem, embedder, sched, m, tok, 1);
    }
    srv_sched_run(sched);           /* until SIGINT / SIGTERM */
    pthread_kill(sig_th, SIGTERM);  /* in case the loop ended on its own */
    pthread_join(sig_th, NULL);
    /* every job has ended: let the handlers write their last bytes (the error
     * event and [DONE] of a stream, a 503) before the connections close */
    srv_http_wait_idle(http, 5000);
    srv_http_stop(http);
    return serve_end(key_pem, cert_pem, embedder, sched, m, tok, 0);
}
