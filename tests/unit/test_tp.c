/*
 * test_tp.c - tensor parallel (tern_model_params.tp; src/backends/tp/backend_tp.c): the
 * CPU simulation of the sharding must give the unsharded model's logits.
 *
 * Every fixture model (qwen35 PQ2_0 + Hadamard, PTQ1_0, fork Q2_0 without rotation,
 * MLX pack; qwen3 Q2_0 g128 / g64, Q1_0 with a Q1_0 or Q2_0 head) with N = 2 and 4:
 * a random prompt prefilled in chunks, then greedy decode steps; every logits row
 * within TOL_REL * max|row| of the unsharded run and the greedy ids identical. The
 * fixtures' 2 kv heads are split at N = 2 and replicated at N = 4; qwen35's 1536-wide
 * attention / GDN slices at N = 2 and 512-wide FFN slices at N = 4 straddle the
 * 1024-wide Hadamard blocks (the padded-hull path).
 * Plus: batched decode and a session reset through the shards, and refusals that name
 * the dimension (heads that do not split, a bad N). The bound can fail: the same
 * comparison of two different models is far above it (tp_detects_difference).
 */
#include "check.h"
#include "tern.h"

#include <stdint.h>

#define TOL_REL 1e-3
#define N_PROMPT 29
#define N_STEPS 12

static double g_worst;

static tern_model *load(const char *path, int tp, tern_status *st_out) {
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    mp.tp = tp;
    tern_model *m = NULL;
    tern_status st = tern_model_load(path, &mp, &m);
    if (st_out) *st_out = st;
    else if (st) fprintf(stderr, "  load %s --tp %d: %s\n", path, tp, tern_last_error());
    return m;
}

static double rel_diff(const float *a, const float *b, size_t n) {
    double mx = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs(a[i]) > mx) mx = fabs(a[i]);
        if (fabs((double)a[i] - b[i]) > d) d = fabs((double)a[i] - b[i]);
    }
    return mx > 0 ? d / mx : d;
}

static void prompt(int32_t *ids, int n, int vocab, unsigned seed) {
    uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
    for (int i = 0; i < n; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        ids[i] = (int32_t)((x * 0x2545f4914f6cdd1dull) >> 33) % vocab;
    }
}

/* Prefill + greedy steps on the unsharded model and on N shards. */
static void parity(const char *rel, int N) {
    const char *path = fixture_path(rel);
    if (!path) SKIP("no fixture %s", rel);
    tern_model *m1 = load(path, 1, NULL), *mN = load(path, N, NULL);
    CHECK(m1 && mN);
    if (!m1 || !mN) goto out;
    const int V = tern_model_get_info(m1)->n_vocab;
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = 128;
    sp.n_chunk = 8; /* several chunks, the last one partial */
    tern_session *s1 = NULL, *sN = NULL;
    CHECK(!tern_session_new(m1, &sp, &s1) && !tern_session_new(mN, &sp, &sN));
    float *l1 = malloc(sizeof(float) * V * N_PROMPT), *lN = malloc(sizeof(float) * V * N_PROMPT);
    int32_t ids[N_PROMPT];
    prompt(ids, N_PROMPT, V, (unsigned)N);
    CHECK(!tern_session_eval(s1, ids, N_PROMPT, l1));
    CHECK(!tern_session_eval(sN, ids, N_PROMPT, lN));
    for (int t = 0; t < N_PROMPT; t++) {
        double d = rel_diff(l1 + (size_t)t * V, lN + (size_t)t * V, (size_t)V);
        if (d > g_worst) g_worst = d;
        CHECK_MSG(d <= TOL_REL, "%s --tp %d prompt row %d: relative %.3g", rel, N, t, d);
    }
    for (int k = 0; k < N_STEPS; k++) {
        const float *a = tern_session_logits(s1), *b = tern_session_logits(sN);
        double d = rel_diff(a, b, (size_t)V);
        if (d > g_worst) g_worst = d;
        CHECK_MSG(d <= TOL_REL, "%s --tp %d step %d: relative %.3g", rel, N, k, d);
        int32_t i1 = check_argmax(a, V), iN = check_argmax(b, V);
        CHECK_MSG(i1 == iN, "%s --tp %d step %d: greedy %d vs %d", rel, N, k, i1, iN);
        CHECK(!tern_session_eval(s1, &i1, 1, NULL));
        CHECK(!tern_session_eval(sN, &i1, 1, NULL));
    }
    free(l1);
    free(lN);
    tern_session_free(s1);
    tern_session_free(sN);
out:
    tern_model_free(m1);
    tern_model_free(mN);
}

TEST(tp2_qwen35_pq2_0) { parity("qwen35-tiny/model-pq2_0.gguf", 2); }
TEST(tp4_qwen35_pq2_0) { parity("qwen35-tiny/model-pq2_0.gguf", 4); }
TEST(tp2_qwen35_ptq1_0) { parity("qwen35-tiny/model-ptq1_0.gguf", 2); }
TEST(tp4_qwen35_ptq1_0) { parity("qwen35-tiny/model-ptq1_0.gguf", 4); }
TEST(tp2_qwen35_nohadamard) { parity("qwen35-tiny/model-q2_0-nohadamard.gguf", 2); }
TEST(tp4_qwen35_nohadamard) { parity("qwen35-tiny/model-q2_0-nohadamard.gguf", 4); }
TEST(tp2_qwen35_mlx_pack) { parity("qwen35-tiny/mlx-pack", 2); }
TEST(tp4_qwen35_mlx_pack) { parity("qwen35-tiny/mlx-pack", 4); }
TEST(tp2_qwen3_q2_0) { parity("qwen3-tiny/model-q2_0.gguf", 2); }
TEST(tp4_qwen3_q2_0) { parity("qwen3-tiny/model-q2_0.gguf", 4); }
TEST(tp2_qwen3_q2_0_g64) { parity("qwen3-tiny/model-q2_0_g64.gguf", 2); }
TEST(tp4_qwen3_q2_0_g64) { parity("qwen3-tiny/model-q2_0_g64.gguf", 4); }
TEST(tp2_qwen3_q1_0) { parity("qwen3-q1-tiny/model-q1_0.gguf", 2); }
TEST(tp4_qwen3_q1_0) { parity("qwen3-q1-tiny/model-q1_0.gguf", 4); }
TEST(tp2_qwen3_q1_0_q2out) { parity("qwen3-q1-tiny/model-q1_0_q2out.gguf", 2); }
TEST(tp4_qwen3_q1_0_q2out) { parity("qwen3-q1-tiny/model-q1_0_q2out.gguf", 4); }

/* Three sessions at different positions stepped together, then one reset and
 * re-evaluated: the shard sessions follow (batched rows and reset states). */
TEST(tp_batch_and_reset) {
    const char *path = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!path) SKIP("no fixture");
    tern_model *m[2] = {load(path, 1, NULL), load(path, 2, NULL)};
    CHECK(m[0] && m[1]);
    if (!m[0] || !m[1]) goto out;
    const int V = tern_model_get_info(m[0])->n_vocab;
    tern_session *s[2][3] = {{0}};
    float *rows[2] = {malloc(sizeof(float) * V * 3), malloc(sizeof(float) * V * 3)};
    float *fresh = malloc(sizeof(float) * V);
    int32_t ids[20];
    prompt(ids, 20, V, 7);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) {
            CHECK(!tern_session_new(m[k], NULL, &s[k][i]));
            CHECK(!tern_session_eval(s[k][i], ids, (size_t)(5 + 6 * i), NULL));
        }
    for (int step = 0; step < 3; step++) {
        int32_t tok[3] = {ids[step], ids[step + 3], ids[step + 7]};
        for (int k = 0; k < 2; k++) CHECK(!tern_session_eval_batch(s[k], tok, 3, rows[k]));
        for (int i = 0; i < 3; i++) {
            double d = rel_diff(rows[0] + (size_t)i * V, rows[1] + (size_t)i * V, (size_t)V);
            CHECK_MSG(d <= TOL_REL, "batch step %d row %d: relative %.3g", step, i, d);
            d = rel_diff(rows[1] + (size_t)i * V, tern_session_logits(s[1][i]), (size_t)V);
            CHECK_MSG(d == 0, "batch step %d row %d: session logits differ from the row", step, i);
        }
    }
    /* reset session 1 of the sharded model: the same prompt gives a fresh session's logits */
    tern_session_reset(s[1][1]);
    CHECK_EQ_INT(tern_session_pos(s[1][1]), 0);
    CHECK(!tern_session_eval(s[1][1], ids, 9, NULL));
    memcpy(fresh, tern_session_logits(s[1][1]), sizeof(float) * V);
    tern_session *f = NULL;
    CHECK(!tern_session_new(m[1], NULL, &f));
    CHECK(!tern_session_eval(f, ids, 9, NULL));
    CHECK_MSG(rel_diff(fresh, tern_session_logits(f), (size_t)V) == 0,
              "a reset session differs from a fresh one (shard states not reset)");
    tern_session_free(f);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 3; i++) tern_session_free(s[k][i]);
    free(rows[0]);
    free(rows[1]);
    free(fresh);
out:
    tern_model_free(m[0]);
    tern_model_free(m[1]);
}

static void refuse(const char *rel, int N, tern_status want, const char *needle) {
    const char *path = fixture_path(rel);
    if (!path) SKIP("no fixture %s", rel);
    tern_status st = TERN_OK;
    tern_model *m = load(path, N, &st);
    CHECK_MSG(!m && st == want, "%s --tp %d: status %d, want %d", rel, N, (int)st, (int)want);
    CHECK_MSG(strstr(tern_last_error(), needle), "%s --tp %d: message '%s' lacks '%s'", rel, N,
              tern_last_error(), needle);
    tern_model_free(m);
}

TEST(tp_refusals) {
    refuse("qwen3-tiny/model-q2_0.gguf", 3, TERN_ERR_UNSUPPORTED, "(n_head)");
    refuse("qwen35-tiny/model-pq2_0.gguf", 8, TERN_ERR_UNSUPPORTED, "(n_head)");
    refuse("qwen35-tiny/model-pq2_0.gguf", 6, TERN_ERR_UNSUPPORTED, "(ssm.group_count)");
    refuse("qwen3-tiny/model-q2_0.gguf", 16, TERN_ERR_UNSUPPORTED, "(n_head)");
    refuse("qwen3-tiny/model-q2_0.gguf", -2, TERN_ERR_INVALID_ARG, "--tp -2");
    refuse("qwen3-tiny/model-q2_0.gguf", 65, TERN_ERR_INVALID_ARG, "--tp 65");
}

/* The comparison catches a wrong model: qwen35 A (Hadamard) vs C on one prompt. */
TEST(tp_detects_difference) {
    const char *a = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    const char *c = fixture_path("qwen35-tiny/model-q2_0-nohadamard.gguf");
    if (!a || !c) SKIP("no fixture");
    tern_model *ma = load(a, 2, NULL), *mc = load(c, 1, NULL);
    CHECK(ma && mc);
    if (ma && mc) {
        tern_session *sa = NULL, *sc = NULL;
        CHECK(!tern_session_new(ma, NULL, &sa) && !tern_session_new(mc, NULL, &sc));
        int32_t ids[8];
        prompt(ids, 8, 4096, 3);
        CHECK(!tern_session_eval(sa, ids, 8, NULL) && !tern_session_eval(sc, ids, 8, NULL));
        double d = rel_diff(tern_session_logits(sc), tern_session_logits(sa), 4096);
        CHECK_MSG(d > 100 * TOL_REL, "different models compare as equal (%.3g)", d);
        tern_session_free(sa);
        tern_session_free(sc);
    }
    tern_model_free(ma);
    tern_model_free(mc);
}

int main(void) {
    RUN(tp2_qwen35_pq2_0);
    RUN(tp4_qwen35_pq2_0);
    RUN(tp2_qwen35_ptq1_0);
    RUN(tp4_qwen35_ptq1_0);
    RUN(tp2_qwen35_nohadamard);
    RUN(tp4_qwen35_nohadamard);
    RUN(tp2_qwen35_mlx_pack);
    RUN(tp4_qwen35_mlx_pack);
    RUN(tp2_qwen3_q2_0);
    RUN(tp4_qwen3_q2_0);
    RUN(tp2_qwen3_q2_0_g64);
    RUN(tp4_qwen3_q2_0_g64);
    RUN(tp2_qwen3_q1_0);
    RUN(tp4_qwen3_q1_0);
    RUN(tp2_qwen3_q1_0_q2out);
    RUN(tp4_qwen3_q1_0_q2out);
    RUN(tp_batch_and_reset);
    RUN(tp_refusals);
    RUN(tp_detects_difference);
    fprintf(stderr, "worst relative difference --tp N vs unsharded: %.3g (bound %g)\n", g_worst,
            TOL_REL);
    return check_summary();
}
