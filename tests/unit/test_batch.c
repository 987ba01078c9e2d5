/*
 * test_batch.c - batched decode (tern_session_eval_batch): n sessions at different
 * positions advanced by one token each in one pass must give each session the
 * logits it gets when advanced alone with tern_session_eval.
 *
 * Every fixture model (qwen35 PQ2_0 + Hadamard, PTQ1_0, fork Q2_0 without rotation,
 * MLX pack; qwen3 Q2_0 g128 and g64) and the embedded default model: sessions are
 * prefilled with prompts of different lengths (twins: one copy stepped in batches,
 * one alone), then stepped greedily. Bound: max|batch - alone| <= TOL_REL *
 * max|alone| per row, where the kernels' batch path differs from the single-row
 * one (AVX-512 GEMM from 6 rows: another activation quantisation); batches that
 * stay on the single-row kernels (every ISA below 6 rows) must be bit-identical.
 * Plus: one-member batches, errors with no state change (duplicate session, two
 * models, one member's context full, bad token id, NULL), batch sizes 1..33 across
 * the lead's n_chunk (pieces), and the caller's logits rows.
 * TERN_TEST_DEVICE=cuda runs the models on the CUDA back-end (the batched GEMV
 * there accumulates in another order: the relative bound at every size; the tests
 * skip when the build or the machine has no CUDA).
 */
#include "check.h"
#include "tern.h"

#include <stdint.h>

/* Relative bound where rows go through a different kernel path than alone (the
 * AVX-512 GEMM's activation quantisation differs from the GEMV's, and the cache
 * built in batches carries it into later steps): twice the kernels' accuracy
 * contract (1e-3 per product vs float64). Measured worst: see docs/performance.md. */
#define TOL_REL 2e-3
/* Below this many rows every ISA's matmul computes each row exactly as alone. */
#define EXACT_ROWS 6

static int g_threads = 2;
static bool g_repack;
static const char *g_device; /* NULL: cpu */
static bool g_no_device;     /* the device was asked for and is absent */
static bool g_invariant;     /* load with batch_invariant: every batch bit-identical to alone */

static const char *default_model_path(void) {
    static char p[1024];
    const char *src = getenv("TERN_SOURCE_DIR");
    if (!src || !*src) return NULL;
    snprintf(p, sizeof p, "%s/models/tern-default.gguf", src);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fclose(f);
    return p;
}

static tern_model *load(const char *path) {
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = g_threads;
    mp.repack = g_repack;
    mp.device = g_device;
    mp.batch_invariant = g_invariant;
    tern_model *m = NULL;
    tern_status st = tern_model_load(path, &mp, &m);
    if (st == TERN_ERR_UNSUPPORTED && g_device) {
        g_no_device = true;
        return NULL;
    }
    CHECK_MSG(st == TERN_OK, "load %s: %s", path, tern_last_error());
    return st ? NULL : m;
}

static tern_session *new_session(tern_model *m, int n_ctx, int n_chunk) {
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.n_chunk = n_chunk;
    tern_session *s = NULL;
    tern_status st = tern_session_new(m, &sp, &s);
    CHECK_MSG(st == TERN_OK, "session: %s", tern_last_error());
    return s;
}

/* max|a - b| / max|b|; *same = bit-identical. */
static double rel_diff(const float *a, const float *b, int n, bool *same) {
    double d = 0, mx = 0;
    *same = memcmp(a, b, (size_t)n * sizeof(float)) == 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (e > d || e != e) d = e != e ? INFINITY : e;
        if (fabs(b[i]) > mx) mx = fabs(b[i]);
    }
    return mx > 0 ? d / mx : d;
}

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static int32_t rand_id(int V) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (int32_t)(g_rng % (uint64_t)V);
}

static double g_worst_rel;   /* over every test: the measured worst relative difference */
static double g_test_worst;  /* in the current test */

/* Twins: a[i] is stepped in batches, b[i] alone; same prompts. Compares after each
 * batched step. Returns false (and fails) on the first mismatch beyond the bound. */
typedef struct twins {
    tern_model *m;
    int n, V;
    tern_session **a, **b;
} twins;

static bool twins_new(twins *t, tern_model *m, int n, const int *prompt_len, const int *n_chunk,
                      int n_ctx) {
    t->m = m;
    t->n = n;
    t->V = tern_model_get_info(m)->n_vocab;
    t->a = calloc((size_t)n, sizeof *t->a);
    t->b = calloc((size_t)n, sizeof *t->b);
    if (!t->a || !t->b) return false;
    for (int i = 0; i < n; i++) {
        t->a[i] = new_session(m, n_ctx, n_chunk ? n_chunk[i] : 0);
        t->b[i] = new_session(m, n_ctx, n_chunk ? n_chunk[i] : 0);
        if (!t->a[i] || !t->b[i]) return false;
        int L = prompt_len[i];
        int32_t ids[256];
        for (int j = 0; j < L; j++) ids[j] = rand_id(t->V);
        if (L) {
            CHECK(tern_session_eval(t->a[i], ids, (size_t)L, NULL) == TERN_OK);
            CHECK(tern_session_eval(t->b[i], ids, (size_t)L, NULL) == TERN_OK);
        }
    }
    return true;
}

static void twins_free(twins *t) {
    for (int i = 0; i < t->n; i++) {
        if (t->a) tern_session_free(t->a[i]);
        if (t->b) tern_session_free(t->b[i]);
    }
    free(t->a);
    free(t->b);
}

/* One batched step of the members idx[0..k) (greedy next tokens from the alone twin,
 * or a random id when the twin has not run yet); rows: caller's logits or NULL. */
static bool twins_step(twins *t, const int *idx, int k, bool give_rows, const char *label) {
    tern_session **sa = malloc((size_t)k * sizeof *sa);
    int32_t *tok = malloc((size_t)k * sizeof *tok);
    float *rows = give_rows ? malloc((size_t)k * t->V * sizeof *rows) : NULL;
    bool ok = sa && tok && (rows || !give_rows);
    for (int j = 0; ok && j < k; j++) {
        int i = idx[j];
        sa[j] = t->a[i];
        tok[j] = tern_session_pos(t->b[i]) ? (int32_t)check_argmax(tern_session_logits(t->b[i]), t->V)
                                           : rand_id(t->V);
    }
    int pos_before[64];
    for (int j = 0; ok && j < k && j < 64; j++) pos_before[j] = tern_session_pos(sa[j]);
    tern_status st = ok ? tern_session_eval_batch(sa, tok, (size_t)k, rows) : TERN_ERR_NOMEM;
    CHECK_MSG(st == TERN_OK, "%s: batch of %d: %s", label, k, tern_last_error());
    ok = ok && st == TERN_OK;
    for (int j = 0; ok && j < k; j++) {
        int i = idx[j];
        if (j < 64) CHECK_EQ_INT(tern_session_pos(sa[j]), pos_before[j] + 1);
        st = tern_session_eval(t->b[i], &tok[j], 1, NULL);
        CHECK_MSG(st == TERN_OK, "%s: alone after a batch of %d, member %d: %s", label, k, j, tern_last_error());
        CHECK_EQ_INT(tern_session_pos(t->a[i]), tern_session_pos(t->b[i]));
        bool same;
        double r = rel_diff(tern_session_logits(t->a[i]), tern_session_logits(t->b[i]), t->V, &same);
        if (r > g_worst_rel) g_worst_rel = r;
        if (r > g_test_worst) g_test_worst = r;
        bool exact_needed = (k < EXACT_ROWS && !g_device) || g_invariant;
        if (exact_needed) {
            CHECK_MSG(same, "%s: batch of %d, member %d (pos %d): not bit-identical to alone "
                      "(rel %.3g)", label, k, j, tern_session_pos(t->b[i]) - 1, r);
        } else {
            CHECK_MSG(r <= TOL_REL, "%s: batch of %d, member %d (pos %d): rel %.3g > %g", label,
                      k, j, tern_session_pos(t->b[i]) - 1, r, TOL_REL);
        }
        if (rows)
            CHECK_MSG(!memcmp(rows + (size_t)j * t->V, tern_session_logits(t->a[i]),
                              (size_t)t->V * sizeof(float)),
                      "%s: logits row %d differs from tern_session_logits", label, j);
        if (!same && (exact_needed || r > TOL_REL)) ok = false;
    }
    free(sa);
    free(tok);
    free(rows);
    return ok;
}

/* 4 sessions at different positions, a few batched steps (all members, a permuted
 * subset, one member alone, with and without the caller's rows). */
static void batch_vs_alone(const char *path, const char *label) {
    if (!path) SKIP("%s: model absent", label);
    tern_model *m = load(path);
    if (!m && g_no_device) SKIP("no %s device", g_device);
    if (!m) return;
    g_test_worst = 0;
    twins t = {0};
    const int plen[5] = {5, 13, 1, 29, 0};
    const int chunk[5] = {4, 64, 1, 8, 16};
    if (!twins_new(&t, m, 5, plen, chunk, 96)) {
        CHECK(!"twins");
        goto done;
    }
    int all[5] = {0, 1, 2, 3, 4}, perm[3] = {3, 0, 2}, one[1] = {1}, four[4] = {4, 2, 1, 3};
    for (int step = 0; step < 4; step++)
        if (!twins_step(&t, all, 5, step & 1, label)) goto done;
    if (!twins_step(&t, perm, 3, true, label)) goto done;
    if (!twins_step(&t, one, 1, false, label)) goto done;
    if (!twins_step(&t, one, 1, true, label)) goto done;
    if (!twins_step(&t, four, 4, false, label)) goto done;
    for (int step = 0; step < 2; step++)
        if (!twins_step(&t, all, 5, false, label)) goto done;
done:
    fprintf(stderr, "  %s: worst relative difference %.3g (batches of 1..5 bit-identical)\n",
            label, g_test_worst);
    twins_free(&t);
    tern_model_free(m);
}

static const char *fx(const char *rel) { return fixture_path(rel); }

TEST(batch_qwen35_pq2_0) { batch_vs_alone(fx("qwen35-tiny/model-pq2_0.gguf"), "qwen35 pq2_0"); }
TEST(batch_qwen35_ptq1_0) { batch_vs_alone(fx("qwen35-tiny/model-ptq1_0.gguf"), "qwen35 ptq1_0"); }
TEST(batch_qwen35_q2_0_nohadamard) {
    batch_vs_alone(fx("qwen35-tiny/model-q2_0-nohadamard.gguf"), "qwen35 q2_0");
}
TEST(batch_qwen35_mlx_pack) { batch_vs_alone(fx("qwen35-tiny/mlx-pack"), "qwen35 mlx"); }
TEST(batch_qwen3_q2_0) { batch_vs_alone(fx("qwen3-tiny/model-q2_0.gguf"), "qwen3 q2_0"); }
TEST(batch_qwen3_q2_0_g64) { batch_vs_alone(fx("qwen3-tiny/model-q2_0_g64.gguf"), "qwen3 g64"); }
TEST(batch_default_model) { batch_vs_alone(default_model_path(), "default model"); }

/* The 16-row decode layout (AVX-512 only; the load ignores repack elsewhere). */
TEST(batch_repacked) {
    g_repack = true;
    batch_vs_alone(fx("qwen35-tiny/model-pq2_0.gguf"), "qwen35 pq2_0 repacked");
    g_repack = false;
}

/* Batch sizes 1..33 with the lead's n_chunk 16: 17.. run in pieces of 16. */
static void sizes(const char *path, const char *label) {
    if (!path) SKIP("%s: model absent", label);
    tern_model *m = load(path);
    if (!m && g_no_device) SKIP("no %s device", g_device);
    if (!m) return;
    g_test_worst = 0;
    enum { N = 33 };
    twins t = {0};
    int plen[N], chunk[N];
    for (int i = 0; i < N; i++) {
        plen[i] = i % 7;
        chunk[i] = i == 5 ? 16 : 1 + i % 9; /* lead: member 5 (the largest n_chunk) */
    }
    if (!twins_new(&t, m, N, plen, chunk, 48)) {
        CHECK(!"twins");
        goto done;
    }
    int idx[N];
    for (int k = 1; k <= N; k++) {
        /* members rotate; the lead (member 5) is in some batches, not in others */
        for (int j = 0; j < k; j++) idx[j] = (j + k) % N;
        if (!twins_step(&t, idx, k, k % 2 == 0, label)) break;
    }
done:
    fprintf(stderr, "  %s: worst relative difference %.3g\n", label, g_test_worst);
    twins_free(&t);
    tern_model_free(m);
}

TEST(batch_sizes_qwen35) { sizes(fx("qwen35-tiny/model-pq2_0.gguf"), "qwen35 sizes"); }
TEST(batch_sizes_qwen3) { sizes(fx("qwen3-tiny/model-q2_0.gguf"), "qwen3 sizes"); }

/* batch_invariant (CUDA): 64 sessions at mixed positions stepped in batches of 1..64 (the
 * sizes a server's decode pass takes as requests come and go), every member bit-identical
 * to its twin stepped alone, at every step; and the fixture's batch_vs_alone steps. The CPU
 * back-end ignores the parameter (its batches from 6 rows round otherwise): skipped there. */
static void invariant(const char *path, const char *label) {
    if (!path) SKIP("%s: model absent", label);
    if (!g_device) SKIP_OPTIONAL("%s: batch_invariant is a CUDA parameter (TERN_TEST_DEVICE=cuda)", label);
    g_invariant = true;
    tern_model *m = load(path);
    g_invariant = false;
    if (!m && g_no_device) SKIP("no %s device", g_device);
    if (!m) return;
    g_invariant = true;
    g_test_worst = 0;
    enum { N = 64 };
    twins t = {0};
    int plen[N], chunk[N];
    for (int i = 0; i < N; i++) {
        plen[i] = (i * 5) % 23;
        chunk[i] = 64;
    }
    static const int ks[] = {64, 1, 9, 64, 2, 17, 33, 8, 5, 64, 16, 40, 3, 64, 1, 63, 12, 64};
    int steps = 0;
    /* a context of 1,024: the decode attention's splits follow the cache's size and, in a
     * batch, the batch's (the invariant mode fixes them); at 64 positions both give 4 */
    if (!twins_new(&t, m, N, plen, chunk, 1024)) {
        CHECK(!"twins");
        goto done;
    }
    int idx[N];
    for (size_t si = 0; si < sizeof ks / sizeof ks[0]; si++) {
        const int k = ks[si];
        for (int j = 0; j < k; j++) idx[j] = (int)((j * 7 + si * 11) % N); /* 7 and 64: distinct */
        if (!twins_step(&t, idx, k, si % 3 == 0, label)) break;
        steps++;
    }
    CHECK_EQ_INT(steps, (int)(sizeof ks / sizeof ks[0]));
done:
    fprintf(stderr, "  %s: %d batched steps of 1..64 members, each bit-identical to alone (worst rel %.3g)\n",
            label, steps, g_test_worst);
    twins_free(&t);
    tern_model_free(m);
    g_invariant = false;
}

TEST(batch_invariant_qwen35) { invariant(fx("qwen35-tiny/model-pq2_0.gguf"), "qwen35 pq2_0 invariant"); }
TEST(batch_invariant_qwen3) { invariant(fx("qwen3-tiny/model-q2_0.gguf"), "qwen3 q2_0 invariant"); }
/* the persistent kernel's products are its own: the two together are refused at load */
TEST(batch_invariant_not_persistent) {
    const char *path = fx("qwen3-tiny/model-q2_0.gguf");
    if (!path) SKIP("fixtures absent");
    if (!g_device) SKIP_OPTIONAL("a CUDA parameter (TERN_TEST_DEVICE=cuda)");
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.device = g_device;
    mp.batch_invariant = true;
    mp.cuda_persistent = true;
    tern_model *m = NULL;
    tern_status st = tern_model_load(path, &mp, &m);
    if (st == TERN_ERR_UNSUPPORTED) SKIP("no %s device", g_device);
    CHECK_EQ_INT(st, TERN_ERR_INVALID_ARG);
    CHECK(m == NULL);
    CHECK_MSG(strstr(tern_last_error(), "batch_invariant") != NULL, "message: %s", tern_last_error());
    tern_model_free(m);
}

/* Every error is raised before any work: positions and logits unchanged, and the
 * sessions still step exactly like their twins afterwards. */
TEST(batch_errors) {
    const char *path = fx("qwen35-tiny/model-pq2_0.gguf");
    if (!path) SKIP("fixtures absent");
    tern_model *m = load(path), *m2 = m ? load(path) : NULL;
    if (g_no_device) SKIP("no %s device", g_device);
    if (!m || !m2) {
        tern_model_free(m);
        tern_model_free(m2);
        return;
    }
    twins t = {0};
    const int plen[3] = {3, 6, 9};
    tern_session *other = new_session(m2, 32, 0);
    tern_session *full = new_session(m, 4, 0);
    if (!other || !full || !twins_new(&t, m, 3, plen, NULL, 64)) {
        CHECK(!"setup");
        goto done;
    }
    int V = t.V;
    int32_t ids4[4] = {1, 2, 3, 4};
    CHECK(tern_session_eval(full, ids4, 4, NULL) == TERN_OK); /* full: pos 4 of 4 */
    float before[3][8];
    int pos[3];
    for (int i = 0; i < 3; i++) {
        memcpy(before[i], tern_session_logits(t.a[i]), sizeof before[i]);
        pos[i] = tern_session_pos(t.a[i]);
    }
    tern_session *dup[3] = {t.a[0], t.a[1], t.a[0]};
    tern_session *mixed[3] = {t.a[0], other, t.a[1]};
    tern_session *withfull[4] = {t.a[0], t.a[1], full, t.a[2]};
    tern_session *three[3] = {t.a[0], t.a[1], t.a[2]};
    tern_session *withnull[3] = {t.a[0], NULL, t.a[2]};
    int32_t tok[4] = {7, 8, 9, 10};
    int32_t bad_hi[3] = {7, (int32_t)V, 9}, bad_lo[3] = {-1, 8, 9};
    CHECK_EQ_INT(tern_session_eval_batch(dup, tok, 3, NULL), TERN_ERR_INVALID_ARG);
    CHECK(strstr(tern_last_error(), "twice") != NULL);
    CHECK_EQ_INT(tern_session_eval_batch(mixed, tok, 3, NULL), TERN_ERR_INVALID_ARG);
    CHECK(strstr(tern_last_error(), "different models") != NULL);
    CHECK_EQ_INT(tern_session_eval_batch(withfull, tok, 4, NULL), TERN_ERR_CONTEXT_FULL);
    CHECK_EQ_INT(tern_session_eval_batch(three, bad_hi, 3, NULL), TERN_ERR_RANGE);
    CHECK_EQ_INT(tern_session_eval_batch(three, bad_lo, 3, NULL), TERN_ERR_RANGE);
    CHECK_EQ_INT(tern_session_eval_batch(withnull, tok, 3, NULL), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_eval_batch(NULL, tok, 3, NULL), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_eval_batch(three, NULL, 3, NULL), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_eval_batch(NULL, NULL, 0, NULL), TERN_OK);
    /* a one-member batch that is full fails too */
    CHECK_EQ_INT(tern_session_eval_batch(&full, tok, 1, NULL), TERN_ERR_CONTEXT_FULL);
    CHECK_EQ_INT(tern_session_pos(full), 4);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(tern_session_pos(t.a[i]), pos[i]);
        CHECK(!memcmp(before[i], tern_session_logits(t.a[i]), sizeof before[i]));
    }
    /* nothing was advanced: the twins still agree step by step */
    int all[3] = {0, 1, 2};
    for (int step = 0; step < 3; step++)
        if (!twins_step(&t, all, 3, false, "after errors")) break;
done:
    twins_free(&t);
    tern_session_free(other);
    tern_session_free(full);
    tern_model_free(m);
    tern_model_free(m2);
}

/* The test can fail: a batch whose member got another token must differ. */
TEST(batch_detects_difference) {
    const char *path = fx("qwen3-tiny/model-q2_0.gguf");
    if (!path) SKIP("fixtures absent");
    tern_model *m = load(path);
    if (!m && g_no_device) SKIP("no %s device", g_device);
    if (!m) return;
    tern_session *a = new_session(m, 16, 0), *b = new_session(m, 16, 0), *c = new_session(m, 16, 0);
    if (a && b && c) {
        int32_t p[2] = {11, 12}, tok[2] = {40, 41}, alone = 42;
        CHECK(tern_session_eval(a, p, 2, NULL) == TERN_OK);
        CHECK(tern_session_eval(c, p, 2, NULL) == TERN_OK);
        tern_session *ab[2] = {a, b};
        CHECK(tern_session_eval_batch(ab, tok, 2, NULL) == TERN_OK);
        CHECK(tern_session_eval(c, &alone, 1, NULL) == TERN_OK);
        bool same;
        double r = rel_diff(tern_session_logits(a), tern_session_logits(c),
                            tern_model_get_info(m)->n_vocab, &same);
        CHECK_MSG(!same && r > TOL_REL, "rel %.3g", r);
    }
    tern_session_free(a);
    tern_session_free(b);
    tern_session_free(c);
    tern_model_free(m);
}

int main(void) {
    g_device = getenv("TERN_TEST_DEVICE");
    if (g_device && (!*g_device || !strcmp(g_device, "cpu"))) g_device = NULL;
    RUN(batch_errors);
    RUN(batch_detects_difference);
    RUN(batch_qwen35_pq2_0);
    RUN(batch_qwen35_ptq1_0);
    RUN(batch_qwen35_q2_0_nohadamard);
    RUN(batch_qwen35_mlx_pack);
    RUN(batch_qwen3_q2_0);
    RUN(batch_qwen3_q2_0_g64);
    RUN(batch_default_model);
    RUN(batch_repacked);
    RUN(batch_sizes_qwen35);
    RUN(batch_sizes_qwen3);
    RUN(batch_invariant_qwen35);
    RUN(batch_invariant_qwen3);
    RUN(batch_invariant_not_persistent);
    fprintf(stderr, "worst relative difference batch vs alone: %.3g (bound %g from %d rows, "
            "bit-identical below)\n", g_worst_rel, TOL_REL, EXACT_ROWS);
    return check_summary();
}
