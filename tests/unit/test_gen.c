/*
 * test_gen.c - the generation step API (tern_gen_*) against an independent greedy
 * loop written here (tern_session_eval + argmax), on the embedded default model:
 * chunked prefill, batched advance over three sessions, stop strings (cut text,
 * streamed pieces), cancel, misuse and a prompt that does not fit.
 */
#include "check.h"
#include "tern.h"

#include <stdatomic.h>
#include <unistd.h>

static tern_model *M;
static tern_tokenizer *T;

static bool load_default(void) {
    if (M) return true;
    const char *src = getenv("TERN_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tern-default.gguf", src ? src : ".");
    if (access(path, R_OK)) return false;
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    return !tern_tokenizer_load(path, &T) && !tern_model_load(path, &mp, &M);
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

/* The oracle: greedy ids after the prompt, stepping one token at a time. */
static void greedy_manual(const tern_tokens *p, int n, int32_t *out) {
    tern_session *s = NULL;
    CHECK(tern_session_new(M, NULL, &s) == TERN_OK);
    CHECK(tern_session_eval(s, p->ids, p->n, NULL) == TERN_OK);
    int nv = tern_model_get_info(M)->n_vocab;
    for (int i = 0; i < n; i++) {
        out[i] = argmax(tern_session_logits(s), nv);
        CHECK(tern_session_eval(s, &out[i], 1, NULL) == TERN_OK);
    }
    tern_session_free(s);
}

static void tok(const char *text, tern_tokens *t) { CHECK(tern_tokenize(T, text, strlen(text), true, t) == TERN_OK); }

#define NT 16
static const char *prompts[3] = {"The Linux kernel provides", "import os\nimport sys\n\ndef main",
                                 "Once upon a time, in a small village by the sea, there lived"};

TEST(batched_steps_match_greedy_loop) {
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    sp.temperature = 0;
    tern_session *s[3] = {0};
    tern_sampler *smp[3] = {0};
    tern_gen *g[3] = {0};
    tern_tokens p[3] = {{0}};
    int32_t want[3][NT];
    tern_gen_params gp = {0};
    gp.max_tokens = NT;
    gp.ignore_eos = true;        /* all NT tokens (the oracle's argmax may hit eog: compare the prefix) */
    for (int k = 0; k < 3; k++) {
        tok(prompts[k], &p[k]);
        greedy_manual(&p[k], NT, want[k]);
        CHECK(tern_session_new(M, NULL, &s[k]) == TERN_OK);
        CHECK(tern_sampler_new(&sp, tern_model_get_info(M)->n_vocab, &smp[k]) == TERN_OK);
        CHECK(tern_gen_new(s[k], T, smp[k], &gp, &g[k]) == TERN_OK);
        for (size_t a = 0; a < p[k].n; a += 5) /* chunked prefill */
            CHECK(tern_gen_prefill(g[k], p[k].ids + a, p[k].n - a < 5 ? p[k].n - a : 5) == TERN_OK);
    }
    bool live[3] = {true, true, true};
    for (int round = 0; round <= NT; round++) {
        tern_gen *batch[3];
        size_t nb = 0;
        for (int k = 0; k < 3; k++) {
            if (!live[k]) continue;
            int32_t id;
            tern_stop_reason why;
            CHECK(tern_gen_choose(g[k], &id, &why) == TERN_OK);
            if (why != TERN_STOP_NONE) { CHECK_EQ_INT(why, TERN_STOP_MAX_TOKENS); live[k] = false; continue; }
            batch[nb++] = g[k];
        }
        if (nb) CHECK(tern_gen_advance_batch(batch, nb) == TERN_OK);
    }
    for (int k = 0; k < 3; k++) {
        size_t n;
        const int32_t *ids = tern_gen_tokens(g[k], &n);
        CHECK_EQ_INT(n, NT);
        int eog_free = 0; /* masking eog changes nothing until the oracle picks one */
        while (eog_free < NT && !tern_token_is_eog(T, want[k][eog_free])) eog_free++;
        for (int i = 0; i < eog_free && i < (int)n; i++) CHECK_EQ_INT(ids[i], want[k][i]);
        CHECK(eog_free > 4);
        CHECK(tern_gen_finish(g[k]) == TERN_OK);
        tern_gen_free(g[k]);
        tern_sampler_free(smp[k]);
        tern_session_free(s[k]);
        tern_tokens_free(&p[k]);
    }
}

static bool collect(const char *t, size_t n, void *user) { return tern_str_append(user, t, n) == TERN_OK; }

TEST(stop_string_cuts_and_streams) {
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    tern_tokens p = {0};
    tok(prompts[2], &p);
    int32_t want[NT];
    greedy_manual(&p, NT, want);
    int n_ok = 0;
    while (n_ok < NT && !tern_token_is_eog(T, want[n_ok])) n_ok++;
    tern_str full = {0};
    CHECK(tern_detokenize(T, want, (size_t)n_ok, &full) == TERN_OK);
    CHECK(full.len > 12);
    if (full.len <= 12) { tern_tokens_free(&p); tern_str_free(&full); return; }
    char stop[5];
    memcpy(stop, full.data + 8, 4);
    stop[4] = 0;
    size_t cut = (size_t)(strstr(full.data, stop) - full.data);
    const char *stops[1] = {stop};
    tern_session *s = NULL;
    tern_sampler *smp = NULL;
    tern_gen *g = NULL;
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    sp.temperature = 0;
    tern_str streamed = {0};
    tern_gen_params gp = {NT, stops, 1, collect, &streamed, NULL};
    CHECK(tern_session_new(M, NULL, &s) == TERN_OK);
    CHECK(tern_sampler_new(&sp, tern_model_get_info(M)->n_vocab, &smp) == TERN_OK);
    CHECK(tern_gen_new(s, T, smp, &gp, &g) == TERN_OK);
    CHECK(tern_gen_prefill(g, p.ids, p.n) == TERN_OK);
    int32_t id;
    tern_stop_reason why = TERN_STOP_NONE;
    while (!tern_gen_step(g, &id, &why) && why == TERN_STOP_NONE) {}
    CHECK_EQ_INT(why, TERN_STOP_STRING);
    CHECK(tern_gen_finish(g) == TERN_OK);
    size_t len, safe;
    const char *text = tern_gen_text(g, &len, &safe);
    CHECK_EQ_INT(len, cut);
    CHECK(text && !memcmp(text, full.data, cut));
    CHECK_EQ_INT(streamed.len, cut);
    CHECK(streamed.data && !memcmp(streamed.data, full.data, cut));
    CHECK_EQ_INT(tern_gen_reason(g), TERN_STOP_STRING);
    tern_gen_free(g);
    tern_sampler_free(smp);
    tern_session_free(s);
    tern_tokens_free(&p);
    tern_str_free(&full);
    tern_str_free(&streamed);
}

TEST(cancel_misuse_and_full_context) {
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    tern_tokens p = {0};
    tok(prompts[2], &p);
    tern_session_params spp;
    tern_session_params_default(&spp);
    spp.n_ctx = 16;
    tern_session *s = NULL;
    tern_sampler *smp = NULL;
    tern_gen *g = NULL;
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    CHECK(p.n > 16);
    CHECK(tern_session_new(M, &spp, &s) == TERN_OK);
    CHECK(tern_sampler_new(&sp, tern_model_get_info(M)->n_vocab, &smp) == TERN_OK);
    tern_atomic_int cancel;
    atomic_init(&cancel, 0);
    tern_gen_params gp = {0};
    gp.cancel = &cancel;
    CHECK(tern_gen_new(s, T, smp, &gp, &g) == TERN_OK);
    CHECK(tern_gen_prefill(g, p.ids, p.n) == TERN_ERR_CONTEXT_FULL);
    CHECK_EQ_INT(tern_session_pos(s), 0);   /* refused before any work */
    CHECK(tern_gen_prefill(g, p.ids, 4) == TERN_OK);
    int32_t id;
    tern_stop_reason why;
    CHECK(tern_gen_choose(g, &id, &why) == TERN_OK);
    CHECK_EQ_INT(why, TERN_STOP_NONE);
    CHECK(tern_gen_choose(g, &id, &why) == TERN_ERR_INVALID_ARG); /* the pending token was not evaluated */
    CHECK(tern_gen_advance(g) == TERN_OK);
    CHECK_EQ_INT(tern_session_pos(s), 5);
    atomic_store(&cancel, 1);
    CHECK(tern_gen_choose(g, &id, &why) == TERN_OK);
    CHECK_EQ_INT(why, TERN_STOP_CANCELLED);
    size_t n;
    tern_gen_tokens(g, &n);
    CHECK_EQ_INT(n, 1);
    tern_gen_free(g);
    /* full context: stops with context_full once the session is full */
    tern_session_reset(s);
    gp.cancel = NULL;
    gp.ignore_eos = true;
    CHECK(tern_gen_new(s, T, smp, &gp, &g) == TERN_OK);
    CHECK(tern_gen_prefill(g, p.ids, 12) == TERN_OK);
    why = TERN_STOP_NONE;
    while (!tern_gen_step(g, &id, &why) && why == TERN_STOP_NONE) {}
    CHECK_EQ_INT(why, TERN_STOP_CONTEXT_FULL);
    CHECK_EQ_INT(tern_session_pos(s), 16);
    tern_gen_tokens(g, &n);
    CHECK_EQ_INT(n, 5);  /* 4 evaluated + the one that no longer fits */
    tern_gen_free(g);
    CHECK(tern_gen_new(NULL, T, smp, &gp, &g) == TERN_ERR_INVALID_ARG);
    CHECK(g == NULL);
    tern_sampler_free(smp);
    tern_session_free(s);
    tern_tokens_free(&p);
}

int main(void) {
    RUN(batched_steps_match_greedy_loop);
    RUN(stop_string_cuts_and_streams);
    RUN(cancel_misuse_and_full_context);
    tern_model_free(M);
    tern_tokenizer_free(T);
    return check_summary();
}
