/*
 * test_cuda_persist.c - the persistent decode step (docs/persistent.md) on the GPU:
 *   parity_*       the qwen3 fixtures token by token (n_chunk 1: every prompt position and
 *                  every greedy step is one persistent launch) against the per-op path on
 *                  the same device (max|diff| < 0.02, argmax equal, at every position) and
 *                  against the fixture's float64 reference at the CPU criteria (max|logit -
 *                  ref| < 0.02, argmax equal where the reference margin > 0.02, the greedy
 *                  continuation identical); the device's argmax equals the host's; a reset
 *                  session gives bit-identical logits (fixed summation orders);
 *   watchdog_*     a stage made to wait for a counter nothing signals (lab.h
 *                  tc_persist_debug) ends the step with TERN_ERR_INTERNAL naming the stage
 *                  and its plan op, and the next step runs (the GPU is not hung);
 *   *_qwen35       the qwen35 stages (lab switch tc_persist_allow_qwen35): token-by-token parity
 *                  on qwen35-tiny, and persistent steps after a per-op prefill;
 *   fallback_*     a qwen35 model with the model switch on but the lab switch off runs the
 *                  per-op path.
 * Without a CUDA build or device: "SKIP: no CUDA device", exit 77.
 * `--quick` (or TERN_PERSIST_QUICK=1): the first sequence's first 6 positions, f16 cache,
 * and the attention stage's watchdog only (for compute-sanitizer).
 */
#include "check.h"
#include "model_check.h"
#include "backends/backends.h"
#include "model/model.h"
#include "model/session.h"
#include "kernels/cuda/lab.h"

#include <cjson/cJSON.h>
#include <math.h>

#if defined(TERN_HAVE_CUDA) /* the persistent step exists only in a CUDA build */

static bool g_gpu, g_quick;

#define NEED_GPU() do { if (!g_gpu) SKIP("no CUDA device"); } while (0)

static tern_model *load(const char *path, bool persistent) {
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.device = "cuda";
    mp.n_threads = 1;
    mp.cuda_persistent = persistent;
    tern_model *m = NULL;
    CHECK_MSG(tern_model_load(path, &mp, &m) == TERN_OK, "load %s: %s", path, tern_last_error());
    return m;
}

static tern_session *session_chunk(tern_model *m, int n_ctx, tern_cache_type ct, int chunk) {
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.n_chunk = chunk;
    sp.cache_type_k = sp.cache_type_v = ct;
    tern_session *s = NULL;
    CHECK_MSG(tern_session_new(m, &sp, &s) == TERN_OK, "%s", tern_last_error());
    return s;
}
static tern_session *session(tern_model *m, int n_ctx, tern_cache_type ct) { return session_chunk(m, n_ctx, ct, 1); }

static double max_diff(const float *a, const float *b, int n) {
    double md = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = isnan(d) ? INFINITY : d;
    }
    return md;
}

/* key: the model entry of reference.json whose logits belong to `file` (NULL: the top-level list) */
static void parity(const char *fixture, const char *file, const char *key, tern_cache_type ct) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/reference.json", fixture);
    const char *rp = fixture_path(rel);
    char *txt = rp ? check_slurp(rp, NULL) : NULL;
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    char mpath[1024];
    snprintf(mpath, sizeof mpath, "%s", fixture_path(rel) ? fixture_path(rel) : "");
    FILE *probe = fopen(mpath, "rb");
    if (!txt || !probe) {
        free(txt);
        if (probe) fclose(probe);
        SKIP("fixture %s/%s missing", fixture, file);
    }
    fclose(probe);
    cJSON *ref = cJSON_Parse(txt);
    free(txt);
    tern_model *mp = load(mpath, true), *mo = load(mpath, false);
    if (!mp || !mo) {
        if (mp) tern_model_free(mp);
        if (mo) tern_model_free(mo);
        cJSON_Delete(ref);
        return;
    }
    const int V = tern_model_get_info(mp)->n_vocab;
    const cJSON *seqs = cJSON_GetObjectItem(ref, "sequences");
    const cJSON *logits = key ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "models"), key), "logits")
                              : cJSON_GetObjectItem(ref, "logits");
    const int n_seq = g_quick ? 1 : cJSON_GetArraySize(seqs);
    float *lp = malloc((size_t)V * sizeof(float)), *lo = malloc((size_t)V * sizeof(float));
    for (int si = 0; si < n_seq; si++) {
        const cJSON *seq = cJSON_GetArrayItem(seqs, si), *ent = cJSON_GetArrayItem(logits, si);
        size_t T, nc;
        int32_t *ids = json_ids(cJSON_GetObjectItem(seq, "ids"), &T);
        int32_t *want = json_ids(cJSON_GetObjectItem(ent, "greedy_continuation"), &nc);
        snprintf(rel, sizeof rel, "%s/%s", fixture, cJSON_GetObjectItem(ent, "logits_file")->valuestring);
        size_t nb = 0;
        float *rl = check_slurp(fixture_path(rel), &nb);
        CHECK(rl && nb == T * (size_t)V * 4);
        if (g_quick) {
            T = T < 6 ? T : 6;
            nc = 0;
        }
        tern_session *sp = session(mp, (int)(T + nc + 1), ct), *so = session(mo, (int)(T + nc + 1), ct);
        if (!sp || !so || !rl) {
            if (sp) tern_session_free(sp);
            if (so) tern_session_free(so);
            free(rl); free(ids); free(want);
            break;
        }
        double vs_op = 0, vs_ref = 0;
        int bad_op = 0, bad_ref = 0, checked = 0, dev_bad = 0, same = 0;
        bool diverged = false;
        int32_t tok = 0;
        for (size_t t = 0; t < T + nc; t++) {
            const bool prompt = t < T;
            if (prompt) tok = ids[t];
            tern_status a = tern_session_eval(sp, &tok, 1, lp), b = tern_session_eval(so, &tok, 1, lo);
            CHECK_MSG(a == TERN_OK && b == TERN_OK, "position %zu: %s", t, tern_last_error());
            if (a || b) break;
            if (t == 0) {
                CHECK_MSG(tm_backend_cuda_persist(mp->be) != NULL, "the persistent path did not run");
                /* under compute-sanitizer a wait may take far longer than the default budget */
                if (g_quick) tc_persist_debug(tm_backend_cuda_persist(mp->be), -1, 1LL << 42);
                /* the f32 runs with the ring variant's loader warp (lab switch), the f16 ones with the
                 * default (each warp's cp.async slots) */
                tc_persist_set_pipeline(tm_backend_cuda_persist(mp->be), ct == TERN_CACHE_F32);
            }
            CHECK(max_diff(tern_session_logits(sp), lp, V) == 0);
            double d = max_diff(lp, lo, V);
            if (!(d <= vs_op)) vs_op = d;
            const int am = check_argmax(lp, V);
            /* where the per-op path's top two are 0.02 apart (the fixture's near ties, down
             * to 0.0003, flip between any two float orders) */
            if (am != check_argmax(lo, V) && check_top2_margin(lo, V) > 0.02f) bad_op++;
            if (tm_backend_cuda_persist_token(mp->be) != am) dev_bad++;
            if (prompt) {
                const float *r = rl + t * V;
                d = max_diff(lp, r, V);
                if (!(d <= vs_ref)) vs_ref = d;
                if (check_top2_margin(r, V) > 0.02f) {
                    checked++;
                    if (am != check_argmax(r, V)) bad_ref++;
                }
            }
            /* the next token: the greedy path (the last prompt row starts it) */
            if (t + 1 >= T) {
                if (t + 1 - T < nc && !diverged) {
                    if (am == want[t + 1 - T]) same++;
                    else diverged = true;
                }
                tok = am;
            }
        }
        CHECK_MSG(vs_op < 0.02, "%s seq %d cache %s: persistent vs per-op max|diff| %g", fixture, si,
                  tern_cache_type_name(ct), vs_op);
        CHECK_MSG(bad_op == 0, "%s seq %d: %d argmax differ from the per-op path", fixture, si, bad_op);
        CHECK_MSG(dev_bad == 0, "%s seq %d: the device argmax differs from the host's at %d steps", fixture, si,
                  dev_bad);
        CHECK_MSG(vs_ref < 0.02, "%s seq %d cache %s: max|logit - ref| %g", fixture, si, tern_cache_type_name(ct),
                  vs_ref);
        CHECK_MSG(bad_ref == 0, "%s seq %d: %d/%d argmax differ from the reference", fixture, si, bad_ref, checked);
        CHECK_MSG(same == (int)nc, "%s seq %d: continuation diverges at step %d", fixture, si, same);
        fprintf(stderr, "  %s seq %d cache %s%s: %zu positions + %zu greedy, vs per-op %.2e, vs ref %.2e, "
                "argmax ok on %d rows, continuation %d/%zu\n", fixture, si, tern_cache_type_name(ct),
                ct == TERN_CACHE_F32 ? " (ring variant)" : "", T, nc, vs_op,
                vs_ref, checked, same, nc);
        /* reset: the same logits bit for bit (fixed summation orders) */
        if (si == 0 && !g_quick) {
            tern_session_reset(sp);
            float *again = malloc((size_t)V * sizeof(float));
            size_t n2 = T < 6 ? T : 6;
            for (size_t t = 0; t < n2; t++) CHECK(tern_session_eval(sp, &ids[t], 1, again) == TERN_OK);
            tern_session_reset(sp);
            for (size_t t = 0; t < n2; t++) CHECK(tern_session_eval(sp, &ids[t], 1, lp) == TERN_OK);
            CHECK_MSG(max_diff(again, lp, V) == 0, "a repeated step differs by %g", max_diff(again, lp, V));
            free(again);
        }
        tern_session_free(sp);
        tern_session_free(so);
        free(rl); free(ids); free(want);
    }
    free(lp);
    free(lo);
    tern_model_free(mp);
    tern_model_free(mo);
    cJSON_Delete(ref);
}

TEST(parity_qwen3_f16_cache) { NEED_GPU(); parity("qwen3-tiny", "model-q2_0.gguf", NULL, TERN_CACHE_F16); }
TEST(parity_qwen3_f32_cache) {
    NEED_GPU();
    if (g_quick) SKIP_OPTIONAL("--quick");
    parity("qwen3-tiny", "model-q2_0.gguf", NULL, TERN_CACHE_F32);
}
/* qwen35 (Hadamard transforms in the reading stages, gated attention with heads of 256,
 * partial RoPE, the GDN conv and step): the stages behind the lab switch */
TEST(parity_qwen35_f16_cache) {
    NEED_GPU();
    tc_persist_allow_qwen35(1);
    parity("qwen35-tiny", "model-pq2_0.gguf", "A", TERN_CACHE_F16);
    tc_persist_allow_qwen35(0);
}

/* What `tern run --persistent` does: the prompt prefilled in one chunk by the per-op path
 * (the KV cache it writes is what the persistent steps read), then the greedy
 * continuation as persistent steps: the reference's 24 tokens, the logits within 0.02 of
 * the per-op path's at every step. */
static void prefill_then_steps(const char *fixture, const char *file, const char *key) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/reference.json", fixture);
    const char *rp = fixture_path(rel);
    char *txt = rp ? check_slurp(rp, NULL) : NULL;
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    const char *path = fixture_path(rel);
    char mpath[1024];
    snprintf(mpath, sizeof mpath, "%s", path ? path : "");
    FILE *f = fopen(mpath, "rb");
    if (!txt || !f) {
        free(txt);
        if (f) fclose(f);
        SKIP("fixture %s missing", fixture);
    }
    fclose(f);
    cJSON *ref = cJSON_Parse(txt);
    free(txt);
    tern_model *mp = load(mpath, true), *mo = load(mpath, false);
    const cJSON *seqs = cJSON_GetObjectItem(ref, "sequences");
    const cJSON *logits = key ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "models"), key), "logits")
                              : cJSON_GetObjectItem(ref, "logits");
    for (int si = 0; mp && mo && si < cJSON_GetArraySize(seqs); si++) {
        size_t T, nc;
        int32_t *ids = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(seqs, si), "ids"), &T);
        int32_t *want = json_ids(cJSON_GetObjectItem(cJSON_GetArrayItem(logits, si), "greedy_continuation"), &nc);
        const int V = mp->hp.n_vocab;
        tern_session *sp = session_chunk(mp, (int)(T + nc), TERN_CACHE_F16, 64);
        tern_session *so = session_chunk(mo, (int)(T + nc), TERN_CACHE_F16, 64);
        if (sp && so) {
            CHECK(tern_session_eval(sp, ids, T, NULL) == TERN_OK && tern_session_eval(so, ids, T, NULL) == TERN_OK);
            int same = 0;
            double worst = 0;
            for (size_t i = 0; i < nc; i++) {
                int32_t tok = (int32_t)check_argmax(tern_session_logits(sp), V);
                if (tok != want[i]) break;
                same++;
                if (i + 1 == nc) break;
                CHECK(tern_session_eval(sp, &tok, 1, NULL) == TERN_OK);
                CHECK(tern_session_eval(so, &tok, 1, NULL) == TERN_OK);
                /* the steps after the first with the tiles in registers (lab switch) */
                if (i == 0 && tm_backend_cuda_persist(mp->be)) tc_persist_set_pipeline(tm_backend_cuda_persist(mp->be), 3);
                double d = max_diff(tern_session_logits(sp), tern_session_logits(so), V);
                if (!(d <= worst)) worst = d;
            }
            CHECK_MSG(same == (int)nc, "seq %d: continuation diverges at step %d", si, same);
            CHECK_MSG(worst < 0.02, "seq %d: persistent steps vs per-op max|diff| %g", si, worst);
            CHECK(tm_backend_cuda_persist(mp->be) != NULL);
            fprintf(stderr, "  %s seq %d: prompt of %zu in one chunk, then %d/%zu persistent greedy steps (tiles in "
                    "registers), vs per-op %.2e\n",
                    fixture, si, T, same, nc, worst);
        }
        if (sp) tern_session_free(sp);
        if (so) tern_session_free(so);
        free(ids);
        free(want);
    }
    if (mp) tern_model_free(mp);
    if (mo) tern_model_free(mo);
    cJSON_Delete(ref);
}
TEST(prefill_chunk_then_persistent_steps) {
    NEED_GPU();
    if (g_quick) SKIP_OPTIONAL("--quick");
    prefill_then_steps("qwen3-tiny", "model-q2_0.gguf", NULL);
}
/* qwen35: the per-op prefill's GDN and conv states, then the persistent steps on them */
TEST(prefill_chunk_then_persistent_steps_qwen35) {
    NEED_GPU();
    if (g_quick) SKIP_OPTIONAL("--quick");
    tc_persist_allow_qwen35(1);
    prefill_then_steps("qwen35-tiny", "model-pq2_0.gguf", "A");
    tc_persist_allow_qwen35(0);
}

/* the in-kernel profile: every family of a qwen3 step there, busy share in (0, 100] */
TEST(profile_text) {
    NEED_GPU();
    const char *path = fixture_path("qwen3-tiny/model-q2_0.gguf");
    FILE *probe = path ? fopen(path, "rb") : NULL;
    if (!probe) SKIP("fixture qwen3-tiny/model-q2_0.gguf missing");
    fclose(probe);
    tern_model *m = load(path, true);
    if (!m) return;
    tern_session *s = session(m, 16, TERN_CACHE_F16);
    int32_t ids[4] = {21, 22, 23, 24};
    CHECK(s && tern_session_eval(s, &ids[0], 1, NULL) == TERN_OK);
    struct tc_persist *ps = tm_backend_cuda_persist(m->be);
    CHECK(ps != NULL);
    if (s && ps) {
        CHECK(tc_persist_profile(ps, 1) == 0);
        for (int i = 1; i < 4; i++) CHECK(tern_session_eval(s, &ids[i], 1, NULL) == TERN_OK);
        char txt[2048];
        tc_persist_profile_text(ps, txt, sizeof txt);
        fprintf(stderr, "%s", txt);
        CHECK(strstr(txt, "matmul q,k,v") && strstr(txt, "attention") && strstr(txt, "matmul head") &&
              strstr(txt, "of 3)"));
        const char *b = strstr(txt, "busy ");
        double busy = b ? atof(b + 5) : -1;
        CHECK_MSG(busy > 0 && busy <= 100, "busy %g", busy);
        CHECK(tc_persist_profile(ps, 0) == 0);
    }
    if (s) tern_session_free(s);
    tern_model_free(m);
}

/* stage `hang` waits for a counter nothing signals: the step fails naming it, the next runs */
static void watchdog(int which) {
    const char *path = fixture_path("qwen3-tiny/model-q2_0.gguf");
    FILE *probe = path ? fopen(path, "rb") : NULL;
    if (!probe) SKIP("fixture qwen3-tiny/model-q2_0.gguf missing");
    fclose(probe);
    tern_model *m = load(path, true);
    if (!m) return;
    tern_session *s = session(m, 64, TERN_CACHE_F16);
    if (!s) { tern_model_free(m); return; }
    int32_t ids[3] = {11, 12, 13};
    CHECK(tern_session_eval(s, &ids[0], 1, NULL) == TERN_OK);
    struct tc_persist *ps = tm_backend_cuda_persist(m->be);
    CHECK_MSG(ps != NULL, "the persistent path did not run");
    if (!ps) { tern_session_free(s); tern_model_free(m); return; }
    /* stage: 0 (the embed, nothing before it), 7 (layer 1's attention: 1 + 5 + 1), the last (argmax) */
    const int n_stages = 1 + 5 * m->hp.n_layer + 2;
    const int hang = which == 0 ? 0 : which == 1 ? 7 : n_stages - 1;
    /* about 10 ms (1 s under --quick: a sanitizer slows the waits that do end) */
    tc_persist_debug(ps, hang, g_quick ? 2000LL * 1000 * 1000 : 20LL * 1000 * 1000);
    tern_status st = tern_session_eval(s, &ids[1], 1, NULL);
    CHECK_MSG(st == TERN_ERR_INTERNAL, "status %d", st);
    const char *msg = tern_last_error();
    char want[64];
    snprintf(want, sizeof want, "stage %d (plan op", hang);
    CHECK_MSG(strstr(msg, "watchdog") && strstr(msg, want), "message: %s", msg);
    fprintf(stderr, "  watchdog on stage %d: %s\n", hang, msg);
    tern_clear_error();
    /* the GPU is free: the next steps run */
    tc_persist_debug(ps, -1, 0);
    tern_session_reset(s);
    for (int i = 0; i < 3; i++) CHECK_MSG(tern_session_eval(s, &ids[i], 1, NULL) == TERN_OK, "%s", tern_last_error());
    const float *l = tern_session_logits(s);
    bool finite = true;
    for (int i = 0; i < m->hp.n_vocab; i++) finite = finite && isfinite(l[i]);
    CHECK(finite);
    tern_session_free(s);
    tern_model_free(m);
}

TEST(watchdog_first_stage) {
    NEED_GPU();
    if (g_quick) SKIP_OPTIONAL("--quick");
    watchdog(0);
}
TEST(watchdog_attention_stage) { NEED_GPU(); watchdog(1); }
TEST(watchdog_last_stage) {
    NEED_GPU();
    if (g_quick) SKIP_OPTIONAL("--quick");
    watchdog(2);
}

/* qwen35 with the model switch on but the stages' lab switch off: the per-op path runs */
TEST(fallback_qwen35) {
    NEED_GPU();
    if (g_quick) SKIP_OPTIONAL("--quick");
    const char *path = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    FILE *probe = path ? fopen(path, "rb") : NULL;
    if (!probe) SKIP("fixture qwen35-tiny/model-pq2_0.gguf missing");
    fclose(probe);
    char p2[1024];
    snprintf(p2, sizeof p2, "%s", path);
    tern_model *a = load(p2, true), *b = load(p2, false);
    if (a && b) {
        tern_session *sa = session(a, 16, TERN_CACHE_F16), *sb = session(b, 16, TERN_CACHE_F16);
        int32_t ids[4] = {5, 6, 7, 8};
        for (int i = 0; i < 4 && sa && sb; i++) {
            CHECK(tern_session_eval(sa, &ids[i], 1, NULL) == TERN_OK);
            CHECK(tern_session_eval(sb, &ids[i], 1, NULL) == TERN_OK);
        }
        CHECK(tm_backend_cuda_persist(a->be) == NULL);
        if (sa && sb)
            CHECK(max_diff(tern_session_logits(sa), tern_session_logits(sb), tern_model_get_info(a)->n_vocab) < 1e-3);
        if (sa) tern_session_free(sa);
        if (sb) tern_session_free(sb);
    }
    if (a) tern_model_free(a);
    if (b) tern_model_free(b);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--quick")) g_quick = true;
    const char *q = getenv("TERN_PERSIST_QUICK"); /* the same, for runners that take no arguments */
    if (q && *q && strcmp(q, "0")) g_quick = true;
    tern_kernels_init();
    tm_backend *g = NULL;
    if (tm_backend_create("cuda", NULL, &g) == TERN_OK) {
        fprintf(stderr, "CUDA device: %s\n", tm_backend_cuda_device());
        tm_backend_destroy(g);
        g_gpu = true;
    } else {
        fprintf(stderr, "\n*** SKIP: no CUDA device (%s): the persistent step is NOT tested here ***\n\n",
                tern_last_error());
        tern_clear_error();
    }
    RUN(parity_qwen3_f16_cache);
    RUN(parity_qwen3_f32_cache);
    RUN(parity_qwen35_f16_cache);
    RUN(prefill_chunk_then_persistent_steps);
    RUN(prefill_chunk_then_persistent_steps_qwen35);
    RUN(profile_text);
    RUN(watchdog_first_stage);
    RUN(watchdog_attention_stage);
    RUN(watchdog_last_stage);
    RUN(fallback_qwen35);
    return check_summary();
}
#else
int main(void) {
    fprintf(stderr, "\n*** SKIP: built without CUDA: the persistent step is NOT tested here ***\n\n");
    printf("SKIPPED: built without CUDA\n");
    return 77;
}
#endif
