/*
 * test_model.c - parity of the qwen35 / qwen3 forward passes with the reference
 * logits of the fixtures (transformers in float64, read from reference.json and
 * logits-*.f32), plus chunked prefill vs token-by-token, session state (reset,
 * context overflow, token bounds) and loader refusals.
 *
 * Parity criteria (issue 4): max|logit - ref| < 0.02 at every position, argmax
 * equal wherever the reference top-2 margin > 0.02, and the 24-token greedy
 * continuation identical. Under TERN_SANITIZED only the first sequence of each
 * model file is checked (ASan makes the forward ~20x slower).
 */
#include "check.h"
#include "model_check.h"
#include "tern.h"
#include "formats/gguf.h"
#include "kernels/kernels.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <unistd.h>

static bool sanitized(void) {
    const char *s = getenv("TERN_SANITIZED");
    return s && *s && strcmp(s, "0");
}

static cJSON *load_ref(const char *fixture) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/reference.json", fixture);
    const char *p = fixture_path(rel);
    if (!p) return NULL;
    char *t = check_slurp(p, NULL);
    if (!t) return NULL;
    cJSON *j = cJSON_Parse(t);
    free(t);
    return j;
}

static int g_threads = 1; /* the pq2_0 parity test runs with 2 (threaded path) */
static bool g_repack;     /* load with tern_model_params.repack */
static tern_cache_type g_cache; /* KV cache type of the sessions (0: the default, f16) */

static tern_model *load_model(const char *fixture, const char *file) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    const char *p = fixture_path(rel);
    if (!p) return NULL;
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = g_threads;
    mp.repack = g_repack;
    tern_model *m = NULL;
    tern_status st = tern_model_load(p, &mp, &m);
    CHECK_MSG(st == TERN_OK, "load %s: %s", p, tern_last_error());
    return m;
}

/* Parity of one model file against one reference model's logits entries. */
static void parity_n(const char *fixture, const char *file, const char *model_key, int max_seq) {
    cJSON *ref = load_ref(fixture);
    if (!ref) {
        SKIP("fixture %s missing", fixture);
    }
    tern_model *m = load_model(fixture, file);
    if (!m) {
        cJSON_Delete(ref);
        return;
    }
    const cJSON *seqs = cJSON_GetObjectItem(ref, "sequences");
    const cJSON *logits = model_key
        ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "models"), model_key), "logits")
        : cJSON_GetObjectItem(ref, "logits");
    CHECK(seqs && logits && cJSON_GetArraySize(seqs) == cJSON_GetArraySize(logits));
    int V = tern_model_get_info(m)->n_vocab;
    int n_seq = cJSON_GetArraySize(seqs);
    if (sanitized() && n_seq > 1) n_seq = 1;
    if (max_seq > 0 && n_seq > max_seq) n_seq = max_seq;
    for (int si = 0; si < n_seq; si++) {
        const cJSON *seq = cJSON_GetArrayItem(seqs, si), *ent = cJSON_GetArrayItem(logits, si);
        size_t T;
        int32_t *ids = json_ids(cJSON_GetObjectItem(seq, "ids"), &T);
        char rel[256];
        snprintf(rel, sizeof rel, "%s/%s", fixture,
                 cJSON_GetObjectItem(ent, "logits_file")->valuestring);
        size_t nb = 0;
        float *rl = (float *)check_slurp(fixture_path(rel), &nb);
        CHECK(rl && nb == T * (size_t)V * 4);
        tern_session_params sp;
        tern_session_params_default(&sp);
        sp.n_ctx = (int)T + 24;
        sp.cache_type_k = sp.cache_type_v = g_cache;
        tern_session *s = NULL;
        CHECK(tern_session_new(m, &sp, &s) == TERN_OK);
        float *got = malloc(T * (size_t)V * sizeof(float));
        tern_status st = tern_session_eval(s, ids, T, got);
        CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
        double maxd = 0;
        int bad_argmax = 0, checked = 0;
        for (size_t t = 0; t < T && rl; t++) {
            const float *g = got + t * V, *r = rl + t * V;
            for (int i = 0; i < V; i++) {
                double d = fabs((double)g[i] - r[i]);
                if (!(d <= maxd)) maxd = d; /* NaN propagates as failure */
            }
            if (check_top2_margin(r, V) > 0.02f) {
                checked++;
                if (check_argmax(g, V) != check_argmax(r, V)) bad_argmax++;
            }
        }
        CHECK_MSG(maxd < 0.02, "%s %s seq %d: max|diff| %g", fixture, file, si, maxd);
        CHECK_MSG(bad_argmax == 0, "%s %s seq %d: %d/%d argmax differ", fixture, file, si,
                  bad_argmax, checked);
        /* greedy continuation */
        const cJSON *cont = cJSON_GetObjectItem(ent, "greedy_continuation");
        size_t nc;
        int32_t *want = json_ids(cont, &nc);
        int same = check_greedy_steps(s, want, nc, V);
        CHECK_MSG(same == (int)nc, "%s %s seq %d: continuation diverges at step %d", fixture, file,
                  si, same);
        fprintf(stderr, "  %s/%s seq %d: T %zu, max|diff| %.2e, argmax ok on %d margin>0.02 rows, "
                        "continuation %d/%zu\n", fixture, file, si, T, maxd, checked, same, nc);
        free(want);
        free(got);
        free(rl);
        free(ids);
        tern_session_free(s);
    }
    tern_model_free(m);
    cJSON_Delete(ref);
}

static void parity(const char *fixture, const char *file, const char *model_key) {
    parity_n(fixture, file, model_key, 0);
}

/* The first sequence of each architecture under every ISA this CPU has. */
TEST(parity_every_isa) {
    if (!fixtures_dir()) SKIP("fixtures missing");
    tern_kernels_init();
    tern_isa best = tern_kernels_isa();
    tern_isa isas[4] = {TERN_ISA_SCALAR, TERN_ISA_AVX2, TERN_ISA_AVX512, TERN_ISA_NEON};
    for (int i = 0; i < 4; i++) {
        if (!tern_kernels_force(isas[i])) continue;
        fprintf(stderr, "  isa %s\n", tern_isa_name(isas[i]));
        parity_n("qwen35-tiny", "model-pq2_0.gguf", "A", 1);
        parity_n("qwen3-tiny", "model-q2_0.gguf", NULL, 1);
    }
    tern_kernels_force(best);
}

/* Weights copied into the kernels' layout at load (a no-op without AVX-512). */
TEST(parity_repacked) {
    g_repack = true;
    parity_n("qwen35-tiny", "model-pq2_0.gguf", "A", 1);
    parity_n("qwen35-tiny", "mlx-pack", "A", 1);
    parity_n("qwen3-tiny", "model-q2_0.gguf", NULL, 1);
    parity_n("qwen3-q1-tiny", "model-q1_0.gguf", NULL, 0); /* Q1_0 in the 16-row layout */
    g_repack = false;
}

TEST(parity_qwen35_pq2_0) {
    g_threads = 2;
    parity("qwen35-tiny", "model-pq2_0.gguf", "A");
    g_threads = 1;
}
TEST(parity_qwen35_ptq1_0) { parity("qwen35-tiny", "model-ptq1_0.gguf", "A"); }
TEST(parity_qwen35_mlx_pack) { parity("qwen35-tiny", "mlx-pack", "A"); }
TEST(parity_qwen35_q2_0_nohadamard) { parity("qwen35-tiny", "model-q2_0-nohadamard.gguf", "C"); }
TEST(parity_qwen3_q2_0) { parity("qwen3-tiny", "model-q2_0.gguf", NULL); }
TEST(parity_qwen3_q2_0_g64) { parity("qwen3-tiny", "model-q2_0_g64.gguf", NULL); }
TEST(parity_qwen3_q1_0) { parity("qwen3-q1-tiny", "model-q1_0.gguf", NULL); }

/* Chunked prefill (chunk 7, 64) vs the token-by-token walk (chunk 1), on the
 * concatenation of every reference sequence (a longer prompt: 165 / 240 ids). */
static void chunks(const char *fixture, const char *file) {
    cJSON *ref = load_ref(fixture);
    if (!ref) SKIP("fixture %s missing", fixture);
    tern_model *m = load_model(fixture, file);
    if (!m) {
        cJSON_Delete(ref);
        return;
    }
    size_t T = 0;
    int32_t *ids = malloc(4096 * sizeof *ids);
    for (const cJSON *seq = cJSON_GetObjectItem(ref, "sequences")->child; seq; seq = seq->next) {
        size_t n;
        int32_t *part = json_ids(cJSON_GetObjectItem(seq, "ids"), &n);
        for (size_t i = 0; i < n && T < 4096; i++) ids[T++] = part[i];
        free(part);
    }
    if (sanitized() && T > 24) T = 24;
    int V = tern_model_get_info(m)->n_vocab;
    int sizes[3] = {1, 7, 64};
    float *out[3];
    for (int c = 0; c < 3; c++) {
        tern_session_params sp;
        tern_session_params_default(&sp);
        sp.n_ctx = (int)T;
        sp.n_chunk = sizes[c];
        sp.cache_type_k = sp.cache_type_v = TERN_CACHE_F32; /* the forward's own agreement */
        tern_session *s = NULL;
        CHECK(tern_session_new(m, &sp, &s) == TERN_OK);
        out[c] = malloc(T * (size_t)V * sizeof(float));
        CHECK(tern_session_eval(s, ids, T, out[c]) == TERN_OK);
        CHECK_EQ_INT(tern_session_pos(s), T);
        tern_session_free(s);
    }
    for (int c = 1; c < 3; c++) {
        int agree = 0, near_tie_miss = 0;
        double maxd = 0;
        for (size_t t = 0; t < T; t++) {
            const float *a = out[0] + t * V, *b = out[c] + t * V;
            for (int i = 0; i < V; i++) {
                double d = fabs((double)a[i] - b[i]);
                if (!(d <= maxd)) maxd = d;
            }
            if (check_argmax(a, V) == check_argmax(b, V)) agree++;
            else if (check_top2_margin(a, V) < 0.01f) near_tie_miss++;
        }
        if (T >= 100)
            CHECK_MSG(agree * 100 >= 99 * (int)T, "chunk %d: argmax agree %d/%zu", sizes[c], agree, T);
        CHECK_MSG(agree + near_tie_miss == (int)T, "chunk %d: a non-tie argmax differs", sizes[c]);
        CHECK_MSG(maxd < 1e-2, "chunk %d vs 1: max|diff| %g", sizes[c], maxd);
        fprintf(stderr, "  %s/%s chunk %d vs 1: argmax %d/%zu, max|diff| %.2e\n", fixture, file,
                sizes[c], agree, T, maxd);
    }
    for (int c = 0; c < 3; c++) free(out[c]);
    free(ids);
    tern_model_free(m);
    cJSON_Delete(ref);
}

/* KV cache types against the f32 cache on every reference sequence (the f32 run is the
 * reference: what the stored type changes): all-position logits within `bound`, argmax
 * equal wherever the f32 top-2 margin exceeds `margin`, and the 24-token greedy
 * continuation after the prompt identical to the f32 one. */
static void cache_vs_f32(const char *fixture, const char *file, tern_cache_type ct, double bound,
                         float margin) {
    cJSON *ref = load_ref(fixture);
    if (!ref) SKIP("fixture %s missing", fixture);
    tern_model *m = load_model(fixture, file);
    if (!m) {
        cJSON_Delete(ref);
        return;
    }
    const int V = tern_model_get_info(m)->n_vocab, NC = 24;
    int n_seq = cJSON_GetArraySize(cJSON_GetObjectItem(ref, "sequences"));
    if (sanitized() && n_seq > 1) n_seq = 1;
    for (int si = 0; si < n_seq; si++) {
        size_t T;
        int32_t *ids = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(ref, "sequences"), si), "ids"), &T);
        float *lg[2], cmargin[24];
        int32_t cont[2][24];
        tern_cache_type types[2] = {TERN_CACHE_F32, ct};
        for (int k = 0; k < 2; k++) {
            tern_session_params sp;
            tern_session_params_default(&sp);
            sp.n_ctx = (int)T + NC;
            sp.cache_type_k = sp.cache_type_v = types[k];
            tern_session *s = NULL;
            CHECK_MSG(tern_session_new(m, &sp, &s) == TERN_OK, "%s", tern_last_error());
            CHECK(tern_session_cache_type(s, false) == types[k] && tern_session_cache_type(s, true) == types[k]);
            lg[k] = malloc(T * (size_t)V * sizeof(float));
            CHECK(tern_session_eval(s, ids, T, lg[k]) == TERN_OK);
            for (int i = 0; i < NC; i++) {
                cont[k][i] = (int32_t)check_argmax(tern_session_logits(s), V);
                if (k == 0) cmargin[i] = check_top2_margin(tern_session_logits(s), V);
                if (i + 1 < NC) CHECK(tern_session_eval(s, &cont[k][i], 1, NULL) == TERN_OK);
            }
            tern_session_free(s);
        }
        double maxd = 0;
        int checked = 0, bad = 0, same = 0;
        for (size_t t = 0; t < T; t++) {
            const float *a = lg[0] + t * V, *b = lg[1] + t * V;
            for (int i = 0; i < V; i++) {
                double d = fabs((double)a[i] - b[i]);
                if (!(d <= maxd)) maxd = d;
            }
            if (check_top2_margin(a, V) > margin) {
                checked++;
                if (check_argmax(a, V) != check_argmax(b, V)) bad++;
            }
        }
        while (same < NC && cont[0][same] == cont[1][same]) same++;
        CHECK_MSG(maxd < bound, "%s %s seq %d: max|diff| %g (bound %g)", fixture,
                  tern_cache_type_name(ct), si, maxd, bound);
        CHECK_MSG(bad == 0, "%s %s seq %d: %d/%d argmax differ", fixture, tern_cache_type_name(ct), si,
                  bad, checked);
        /* a divergence only where the f32 path itself was nearly tied */
        CHECK_MSG(same == NC || cmargin[same] < 2 * bound,
                  "%s %s seq %d: continuation diverges at step %d (f32 margin %.3f)", fixture,
                  tern_cache_type_name(ct), si, same, same < NC ? cmargin[same] : 0.0f);
        fprintf(stderr, "  %s %s vs f32 seq %d: T %zu, max|diff| %.2e, argmax ok on %d margin>%.2f rows, "
                        "continuation %d/%d\n", fixture, tern_cache_type_name(ct), si, T, maxd, checked,
                margin, same, NC);
        free(lg[0]), free(lg[1]), free(ids);
    }
    tern_model_free(m);
    cJSON_Delete(ref);
}

/* Bounds: about twice the largest max|diff| measured on the fixtures (2026-05, AVX-512):
 * f16 1.7e-2, bf16 1.1e-1, q8_0 3.1e-1, all on qwen3-tiny (every layer attention; the
 * qwen35 hybrid measures 1.4e-3 / 9.4e-3 / 3.5e-2). A cache read as the wrong type, a
 * wrong q8_0 scale or a misplaced head gives O(1..10) differences. The f16 default also
 * passes the fp64 parity tests above (they run with the default cache). Argmax is
 * compared where the f32 margin is clear (0.05; 0.25 for q8_0, whose errors reach 0.3). */
TEST(cache_types_vs_f32) {
    const tern_cache_type types[3] = {TERN_CACHE_F16, TERN_CACHE_BF16, TERN_CACHE_Q8_0};
    const double bounds[3] = {0.04, 0.25, 0.6};
    const float margins[3] = {0.05f, 0.05f, 0.25f};
    for (int i = 0; i < 3; i++) {
        cache_vs_f32("qwen35-tiny", "model-pq2_0.gguf", types[i], bounds[i], margins[i]);
        cache_vs_f32("qwen3-tiny", "model-q2_0.gguf", types[i], bounds[i], margins[i]);
    }
}

TEST(chunked_prefill_qwen35) { chunks("qwen35-tiny", "model-pq2_0.gguf"); }
TEST(chunked_prefill_qwen3) { chunks("qwen3-tiny", "model-q2_0.gguf"); }

/* Session state: overflow, token bounds, reset reproduces, decode == prefill. */
TEST(session_state) {
    if (!fixtures_dir()) SKIP("fixtures missing");
    tern_model *m = load_model("qwen35-tiny", "model-pq2_0.gguf");
    if (!m) return;
    int V = tern_model_get_info(m)->n_vocab;
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = 8;
    tern_session *s = NULL;
    CHECK(tern_session_new(m, &sp, &s) == TERN_OK);
    CHECK_EQ_INT(tern_session_n_ctx(s), 8);
    CHECK(tern_session_memory(s) > 0);
    int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK_EQ_INT(tern_session_eval(s, ids, 9, NULL), TERN_ERR_CONTEXT_FULL);
    CHECK(strstr(tern_last_error(), "context") != NULL);
    CHECK_EQ_INT(tern_session_pos(s), 0);
    int32_t bad[2] = {5, -1};
    CHECK_EQ_INT(tern_session_eval(s, bad, 2, NULL), TERN_ERR_RANGE);
    bad[1] = V;
    CHECK_EQ_INT(tern_session_eval(s, bad, 2, NULL), TERN_ERR_RANGE);
    CHECK_EQ_INT(tern_session_pos(s), 0);
    float *first = malloc(8 * (size_t)V * sizeof(float));
    CHECK(tern_session_eval(s, ids, 5, first) == TERN_OK);
    CHECK(tern_session_eval(s, ids + 5, 3, first + 5 * (size_t)V) == TERN_OK);
    CHECK_EQ_INT(tern_session_pos(s), 8);
    CHECK_EQ_INT(tern_session_eval(s, ids, 1, NULL), TERN_ERR_CONTEXT_FULL);
    /* the last row is also available through tern_session_logits */
    CHECK(memcmp(tern_session_logits(s), first + 7 * (size_t)V, V * sizeof(float)) == 0);
    tern_session_reset(s);
    CHECK_EQ_INT(tern_session_pos(s), 0);
    float *again = malloc(8 * (size_t)V * sizeof(float));
    CHECK(tern_session_eval(s, ids, 5, again) == TERN_OK);
    CHECK(tern_session_eval(s, ids + 5, 3, again + 5 * (size_t)V) == TERN_OK);
    CHECK_MSG(memcmp(first, again, 8 * (size_t)V * sizeof(float)) == 0,
              "after reset the same calls give different logits");
    /* one batch of 8 from a reset session: the same up to kernel rounding */
    tern_session_reset(s);
    CHECK(tern_session_eval(s, ids, 8, again) == TERN_OK);
    double maxd = 0;
    for (size_t i = 0; i < 8 * (size_t)V; i++) {
        double d = fabs((double)first[i] - again[i]);
        if (!(d <= maxd)) maxd = d;
    }
    CHECK_MSG(maxd < 1e-2, "5+3 vs 8 tokens: max|diff| %g", maxd);
    free(first);
    free(again);
    tern_session_free(s);
    const tern_model_info *in = tern_model_get_info(m);
    CHECK_STR(in->arch, "qwen35");
    CHECK_EQ_INT(in->n_layers, 4);
    CHECK(in->has_hadamard);
    CHECK(in->decode_bytes_per_token > 0 && in->decode_bytes_per_token < in->weight_bytes);
    tern_model_free(m);
}

/* Snapshots: restoring gives back exactly the logits and the continuation of the
 * moment it was taken (bit for bit, same evaluation splits); void and foreign
 * snapshots are refused. Copies: a copied session continues exactly as its source. */
static bool same_rows(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

static void snapshot_on(const char *fixture, const char *file) {
    tern_model *m = load_model(fixture, file);
    if (!m) return;
    const int V = tern_model_get_info(m)->n_vocab;
    const bool recurrent = !strcmp(tern_model_get_info(m)->arch, "qwen35");
    tern_session *a = NULL, *b = NULL, *c = NULL, *small = NULL, *f32 = NULL;
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = 64;
    CHECK(tern_session_new(m, &sp, &a) == TERN_OK && tern_session_new(m, &sp, &b) == TERN_OK &&
          tern_session_new(m, &sp, &c) == TERN_OK);
    sp.n_ctx = 16;
    CHECK(tern_session_new(m, &sp, &small) == TERN_OK);
    sp.n_ctx = 64;
    sp.cache_type_k = sp.cache_type_v = TERN_CACHE_F32;
    CHECK(tern_session_new(m, &sp, &f32) == TERN_OK);
    float *ra = malloc(40 * (size_t)V * sizeof(float)), *rb = malloc(40 * (size_t)V * sizeof(float));
    tern_session_snapshot *s0 = NULL, *s16 = NULL, *s24 = NULL, *s30 = NULL, *t = NULL;
    if (!a || !b || !c || !small || !f32 || !ra || !rb) goto done;
    int32_t p[40], q[12];
    for (int i = 0; i < 40; i++) p[i] = (int32_t)(check_rand_u64() % (unsigned)V);
    for (int i = 0; i < 12; i++) q[i] = (int32_t)(check_rand_u64() % (unsigned)V);
    /* the reference: 16 + 8 + 16 tokens */
    CHECK(tern_session_eval(a, p, 16, ra) == TERN_OK && tern_session_eval(a, p + 16, 8, ra + 16 * (size_t)V) == TERN_OK &&
          tern_session_eval(a, p + 24, 16, ra + 24 * (size_t)V) == TERN_OK);
    CHECK_EQ_INT(tern_session_snapshot_take(b, &s0), TERN_OK);
    CHECK(tern_session_eval(b, p, 16, NULL) == TERN_OK);
    CHECK_EQ_INT(tern_session_snapshot_take(b, &s16), TERN_OK);
    CHECK(tern_session_eval(b, p + 16, 8, NULL) == TERN_OK);
    CHECK_EQ_INT(tern_session_snapshot_take(b, &s24), TERN_OK);
    if (!s0 || !s16 || !s24) goto done;
    float *l24 = rb + 39 * (size_t)V; /* the last row when taken (a head of one row: not ra's rows) */
    memcpy(l24, tern_session_logits(b), (size_t)V * sizeof(float));
    CHECK_EQ_INT(tern_session_snapshot_pos(s24), 24);
    /* one in the back-end's memory: on the CPU that is the host copy (nothing on a device) */
    tern_session_snapshot *s24b = NULL;
    CHECK_EQ_INT(tern_session_snapshot_take_in(b, TERN_SNAPSHOT_BACKEND, &s24b), TERN_OK);
    CHECK(tern_session_snapshot_bytes(s24b) == tern_session_snapshot_bytes(s24));
    CHECK(tern_session_snapshot_backend_bytes(s24b) == 0 && tern_session_snapshot_backend_bytes(s24) == 0);
    CHECK_EQ_INT(tern_session_snapshot_take_in(b, (tern_snapshot_memory)7, &t), TERN_ERR_INVALID_ARG);
    CHECK(t == NULL);
    CHECK(tern_model_memory_free(m) > 0 && tern_model_memory_free(NULL) == 0); /* Linux: MemAvailable */
    CHECK(tern_session_snapshot_bytes(s24) >= (uint64_t)V * sizeof(float));
    CHECK(tern_session_snapshot_bytes(s24) > (recurrent ? 4u * V + 4096u : 0u)); /* + GDN states */
    /* another branch, then back to 24: the logits and what follows are the reference's */
    CHECK(tern_session_eval(b, q, 12, NULL) == TERN_OK);
    CHECK_EQ_INT(tern_session_snapshot_restore(b, s24), TERN_OK);
    CHECK_EQ_INT(tern_session_pos(b), 24);
    CHECK_MSG(same_rows(tern_session_logits(b), l24, (size_t)V), "%s: logits after restore", file);
    CHECK(tern_session_eval(b, p + 24, 16, rb) == TERN_OK);
    CHECK_MSG(same_rows(rb, ra + 24 * (size_t)V, 16 * (size_t)V), "%s: continuation after restore differs", file);
    /* the same from the back-end-memory snapshot */
    if (s24b) {
        CHECK_EQ_INT(tern_session_snapshot_restore(b, s24b), TERN_OK);
        CHECK_MSG(same_rows(tern_session_logits(b), l24, (size_t)V), "%s: logits after a backend restore", file);
        CHECK(tern_session_eval(b, p + 24, 16, rb) == TERN_OK);
        CHECK_MSG(same_rows(rb, ra + 24 * (size_t)V, 16 * (size_t)V), "%s: continuation after a backend restore", file);
    }
    /* taken again into the storage of another (retake): the snapshot of the new moment */
    if (s24b) {
        CHECK_EQ_INT(tern_session_snapshot_restore(b, s24), TERN_OK);
        CHECK(tern_session_eval(b, p + 24, 8, NULL) == TERN_OK);          /* at 32 */
        CHECK_EQ_INT(tern_session_snapshot_retake(b, s24b), TERN_OK);
        CHECK_EQ_INT(tern_session_snapshot_pos(s24b), 32);
        memcpy(rb + 38 * (size_t)V, tern_session_logits(b), (size_t)V * sizeof(float));
        CHECK(tern_session_eval(b, p + 32, 4, rb) == TERN_OK);             /* what follows 32 */
        CHECK_EQ_INT(tern_session_snapshot_restore(b, s24b), TERN_OK);
        CHECK_EQ_INT(tern_session_pos(b), 32);
        CHECK(same_rows(tern_session_logits(b), rb + 38 * (size_t)V, (size_t)V));
        CHECK(tern_session_eval(b, p + 32, 4, rb + 4 * (size_t)V) == TERN_OK);
        CHECK_MSG(same_rows(rb + 4 * (size_t)V, rb, 4 * (size_t)V), "%s: continuation after a retake", file);
        CHECK_EQ_INT(tern_session_snapshot_retake(NULL, s24b), TERN_ERR_INVALID_ARG);
        CHECK_EQ_INT(tern_session_snapshot_retake(b, NULL), TERN_ERR_INVALID_ARG);
    }
    tern_session_snapshot_free(s24b);
    CHECK_EQ_INT(tern_session_snapshot_take(b, &s30), TERN_OK); /* at 40 */
    /* back to 16 from 40, and the same 8 tokens again */
    CHECK_EQ_INT(tern_session_snapshot_restore(b, s16), TERN_OK);
    CHECK(tern_session_eval(b, p + 16, 8, rb) == TERN_OK);
    CHECK(same_rows(rb, ra + 16 * (size_t)V, 8 * (size_t)V));
    /* s24 and s30 were taken over rows evaluated again since: void (session unchanged) */
    CHECK_EQ_INT(tern_session_snapshot_restore(b, s24), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_pos(b), 24);
    CHECK_EQ_INT(tern_session_snapshot_restore(b, s30), TERN_ERR_RANGE);   /* beyond position 24 */
    CHECK(tern_session_eval(b, p + 24, 16, NULL) == TERN_OK);
    CHECK_EQ_INT(tern_session_snapshot_restore(b, s30), TERN_ERR_INVALID_ARG);
    /* batched steps stamp their rows too */
    CHECK_EQ_INT(tern_session_snapshot_restore(b, s16), TERN_OK);
    CHECK_EQ_INT(tern_session_snapshot_take(b, &t), TERN_OK);
    {
        tern_session *pair[2] = {b, c};
        int32_t two[2] = {p[16], p[0]};
        CHECK(tern_session_eval_batch(pair, two, 2, NULL) == TERN_OK);
        CHECK_EQ_INT(tern_session_snapshot_restore(b, t), TERN_OK);   /* 16 <= 17: fine */
        CHECK(tern_session_eval_batch(pair, two, 2, NULL) == TERN_OK);
        tern_session_snapshot_free(t);
        t = NULL;
        CHECK_EQ_INT(tern_session_snapshot_take(b, &t), TERN_OK);     /* at 17 */
        CHECK_EQ_INT(tern_session_snapshot_restore(b, s16), TERN_OK);
        CHECK(tern_session_eval_batch(pair, two, 2, NULL) == TERN_OK); /* row 16 written again */
        CHECK_EQ_INT(tern_session_snapshot_restore(b, t), TERN_ERR_INVALID_ARG);
    }
    /* the empty state: as a fresh session */
    CHECK_EQ_INT(tern_session_snapshot_restore(b, s0), TERN_OK);
    CHECK_EQ_INT(tern_session_pos(b), 0);
    CHECK(tern_session_eval(b, p, 16, rb) == TERN_OK);
    CHECK(same_rows(rb, ra, 16 * (size_t)V));
    /* foreign and NULL */
    CHECK_EQ_INT(tern_session_snapshot_restore(a, s16), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_pos(a), 40);
    CHECK_EQ_INT(tern_session_snapshot_restore(NULL, s16), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_snapshot_restore(b, NULL), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_snapshot_take(NULL, &t), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_snapshot_pos(NULL), 0);
    CHECK(tern_session_snapshot_bytes(NULL) == 0);
    tern_session_snapshot_free(NULL);
    /* copies: c continues as a would; c's own snapshots are void afterwards */
    tern_session_reset(c);
    CHECK(tern_session_eval(c, q, 5, NULL) == TERN_OK);
    tern_session_snapshot_free(t);
    t = NULL;
    CHECK_EQ_INT(tern_session_snapshot_take(c, &t), TERN_OK);
    tern_session_reset(a);
    CHECK(tern_session_eval(a, p, 16, NULL) == TERN_OK && tern_session_eval(a, p + 16, 8, NULL) == TERN_OK);
    CHECK_EQ_INT(tern_session_copy(c, a), TERN_OK);
    CHECK_EQ_INT(tern_session_pos(c), 24);
    CHECK(same_rows(tern_session_logits(c), tern_session_logits(a), (size_t)V));
    CHECK(tern_session_eval(c, p + 24, 16, rb) == TERN_OK);
    CHECK_MSG(same_rows(rb, ra + 24 * (size_t)V, 16 * (size_t)V), "%s: a copied session continues differently", file);
    CHECK_EQ_INT(tern_session_snapshot_restore(c, t), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_copy(small, a), TERN_ERR_CONTEXT_FULL);  /* 24 positions, context 16 */
    CHECK_EQ_INT(tern_session_copy(f32, a), TERN_ERR_INVALID_ARG);     /* f32 cache vs the default f16 */
    CHECK_EQ_INT(tern_session_copy(a, a), TERN_OK);
    CHECK_EQ_INT(tern_session_copy(NULL, a), TERN_ERR_INVALID_ARG);
done:
    tern_session_snapshot_free(s0);
    tern_session_snapshot_free(s16);
    tern_session_snapshot_free(s24);
    tern_session_snapshot_free(s30);
    tern_session_snapshot_free(t);
    free(ra);
    free(rb);
    tern_session_free(a);
    tern_session_free(b);
    tern_session_free(c);
    tern_session_free(small);
    tern_session_free(f32);
    tern_model_free(m);
}

TEST(session_snapshot) {
    if (!fixtures_dir()) SKIP("fixtures missing");
    snapshot_on("qwen35-tiny", "model-pq2_0.gguf");
    snapshot_on("qwen3-tiny", "model-q2_0.gguf");
}

/* A GGUF with the given architecture and a few keys (written with the writer). */
static const char *write_gguf(const char *arch, int heads, int heads_kv) {
    static char path[256];
    snprintf(path, sizeof path, "/tmp/tern_test_model_%d_%s.gguf", (int)getpid(), arch);
    tern_gguf_writer *w = NULL;
    if (tern_gguf_writer_new(&w)) return NULL;
    char k[64];
    tern_gguf_w_set_str(w, "general.architecture", arch);
    snprintf(k, sizeof k, "%s.block_count", arch);
    tern_gguf_w_set_u32(w, k, 1);
    snprintf(k, sizeof k, "%s.embedding_length", arch);
    tern_gguf_w_set_u32(w, k, 128);
    snprintf(k, sizeof k, "%s.feed_forward_length", arch);
    tern_gguf_w_set_u32(w, k, 128);
    snprintf(k, sizeof k, "%s.attention.head_count", arch);
    tern_gguf_w_set_u32(w, k, (uint32_t)heads);
    snprintf(k, sizeof k, "%s.attention.head_count_kv", arch);
    tern_gguf_w_set_u32(w, k, (uint32_t)heads_kv);
    float one[128];
    for (int i = 0; i < 128; i++) one[i] = 1;
    uint64_t ne[1] = {128};
    tern_gguf_w_add_tensor(w, "output_norm.weight", 1, ne, TERN_DT_F32, one, NULL, NULL);
    tern_status st = tern_gguf_w_write(w, path, NULL, NULL);
    tern_gguf_writer_free(w);
    return st ? NULL : path;
}

TEST(loader_refusals) {
    tern_model *m = NULL;
    CHECK_EQ_INT(tern_model_load("/nonexistent/model.gguf", NULL, &m), TERN_ERR_IO);
    CHECK(m == NULL);
    const char *p = write_gguf("llama", 4, 2);
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_INT(tern_model_load(p, NULL, &m), TERN_ERR_UNSUPPORTED);
        CHECK(strstr(tern_last_error(), "llama") != NULL);
        remove(p);
    }
    p = write_gguf("qwen3", 3, 2); /* 3 heads over 2 KV heads: inconsistent */
    CHECK(p != NULL);
    if (p) {
        tern_status st = tern_model_load(p, NULL, &m);
        CHECK_EQ_INT(st, TERN_ERR_FORMAT);
        CHECK(strstr(tern_last_error(), "inconsistent") != NULL);
        remove(p);
    }
    p = write_gguf("qwen3", 4, 2); /* consistent keys, but no tensors */
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_INT(tern_model_load(p, NULL, &m), TERN_ERR_FORMAT);
        CHECK(strstr(tern_last_error(), "token_embd.weight") != NULL);
        remove(p);
    }
    CHECK(m == NULL);
}

static bool stop_at_2(uint64_t done, uint64_t total, void *u) {
    int *calls = u;
    ++*calls;
    return !(done >= 2 && total == 4);
}

/* Load progress is reported per layer; returning false cancels cleanly. */
TEST(load_progress_cancel) {
    const char *p = fixture_path("qwen35-tiny/model-ptq1_0.gguf");
    if (!p) SKIP("fixtures missing");
    tern_model_params mp;
    tern_model_params_default(&mp);
    int calls = 0;
    mp.progress = stop_at_2;
    mp.progress_user = &calls;
    tern_model *m = NULL;
    CHECK_EQ_INT(tern_model_load(p, &mp, &m), TERN_ERR_CANCELLED);
    CHECK(m == NULL);
    CHECK_EQ_INT(calls, 2);
}

int main(void) {
    RUN(loader_refusals);
    RUN(load_progress_cancel);
    RUN(parity_qwen3_q2_0);
    RUN(parity_qwen3_q2_0_g64);
    RUN(parity_qwen3_q1_0);
    RUN(parity_qwen35_pq2_0);
    RUN(parity_qwen35_ptq1_0);
    RUN(parity_qwen35_mlx_pack);
    RUN(parity_qwen35_q2_0_nohadamard);
    RUN(parity_every_isa);
    RUN(parity_repacked);
    RUN(cache_types_vs_f32);
    RUN(chunked_prefill_qwen35);
    RUN(chunked_prefill_qwen3);
    RUN(session_state);
    RUN(session_snapshot);
    return check_summary();
}
