/*
 * test_embed.c - embeddings (tern_session_eval_hidden, tern_session_embed) on the
 * fixtures, on the CPU and, where a CUDA device is present, on "cuda":
 *
 *  - hidden rows against the independent reference: qwen3-tiny's head is tied
 *    (logits = token_embd . h), so token_embd (read from the file as a layer) times each
 *    hidden row must give the reference logits (transformers, float64) within the
 *    parity bound 0.02;
 *  - the session state a hidden step leaves: the next token's logits, evaluated
 *    normally, equal the reference's next row (qwen3 and qwen35, KV cache and GDN state);
 *  - pooling computed here from the per-token rows (mean in double, last, first) equals
 *    tern_session_embed's; normalised output has norm 1 and the direction of the pooled
 *    vector; chunk sizes agree; errors (ids, context, NULL, no tokens) change nothing;
 *  - cuda vs cpu hidden rows agree (the device test).
 */
#include "check.h"
#include "model_check.h"
#include "tern.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>

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

static tern_model *load_on(const char *fixture, const char *file, const char *device) {
    char rel[256];
    snprintf(rel, sizeof rel, "%s/%s", fixture, file);
    const char *p = fixture_path(rel);
    if (!p) return NULL;
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    mp.device = device;
    tern_model *m = NULL;
    tern_status st = tern_model_load(p, &mp, &m);
    CHECK_MSG(st == TERN_OK, "load %s on %s: %s", p, device ? device : "cpu", tern_last_error());
    return m;
}

static bool have_cuda(void) {
    for (int i = 0; i < tern_backend_count(); i++) {
        const char *name, *what;
        bool compiled, present;
        if (tern_backend_describe(i, &name, &compiled, &present, &what) == TERN_OK && !strcmp(name, "cuda"))
            return compiled && present;
    }
    return false;
}

static tern_session *new_session(tern_model *m, int n_ctx, int n_chunk) {
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.n_chunk = n_chunk;
    sp.cache_type_k = sp.cache_type_v = TERN_CACHE_F32;
    tern_session *s = NULL;
    tern_status st = tern_session_new(m, &sp, &s);
    CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
    return s;
}

/* Sequence si of a fixture: ids and the reference logits rows. */
static int32_t *seq_of(const cJSON *ref, const char *fixture, const char *model_key, int si, size_t *T,
                       float **rl) {
    const cJSON *seqs = cJSON_GetObjectItem(ref, "sequences");
    const cJSON *logits = model_key
        ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "models"), model_key), "logits")
        : cJSON_GetObjectItem(ref, "logits");
    const cJSON *seq = cJSON_GetArrayItem(seqs, si), *ent = cJSON_GetArrayItem(logits, si);
    int32_t *ids = json_ids(cJSON_GetObjectItem(seq, "ids"), T);
    char rel[256];
    snprintf(rel, sizeof rel, "%s/%s", fixture, cJSON_GetObjectItem(ent, "logits_file")->valuestring);
    *rl = (float *)check_slurp(fixture_path(rel), NULL);
    return ids;
}

/* The tied head on the hidden rows equals the reference logits (qwen3-tiny). */
static void tied_head_vs_reference(const char *device) {
    cJSON *ref = load_ref("qwen3-tiny");
    if (!ref) SKIP("fixture qwen3-tiny missing");
    tern_model *m = load_on("qwen3-tiny", "model-q2_0.gguf", device);
    tern_linear *head = NULL;
    CHECK(tern_linear_from_gguf(fixture_path("qwen3-tiny/model-q2_0.gguf"), "token_embd.weight", NULL, &head) ==
          TERN_OK);
    if (!m || !head) goto out;
    const int E = tern_model_get_info(m)->n_embd, V = tern_model_get_info(m)->n_vocab;
    CHECK_EQ_INT(tern_linear_n_in(head), E);
    CHECK_EQ_INT(tern_linear_n_out(head), V);
    for (int si = 0; si < 3; si++) {
        size_t T;
        float *rl = NULL;
        int32_t *ids = seq_of(ref, "qwen3-tiny", NULL, si, &T, &rl);
        CHECK(rl != NULL);
        tern_session *s = new_session(m, (int)T + 8, si == 1 ? 7 : 0);
        float *h = malloc(T * (size_t)E * sizeof *h), *lg = malloc(T * (size_t)V * sizeof *lg);
        tern_status st = tern_session_eval_hidden(s, ids, T, h);
        CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
        CHECK_EQ_INT(tern_session_pos(s), (int)T);
        CHECK(tern_linear_forward(head, h, T, (size_t)E, lg, (size_t)V) == TERN_OK);
        double maxd = 0;
        for (size_t i = 0; rl && i < T * (size_t)V; i++) {
            double d = fabs((double)lg[i] - rl[i]);
            if (!(d <= maxd)) maxd = d;
        }
        CHECK_MSG(maxd < 0.02, "%s seq %d: max|E.h - ref| %g", device ? device : "cpu", si, maxd);
        fprintf(stderr, "  qwen3-tiny seq %d on %s: T %zu, max|token_embd . hidden - reference logits| %.2e\n", si,
                device ? device : "cpu", T, maxd);
        free(h);
        free(lg);
        free(rl);
        free(ids);
        tern_session_free(s);
    }
out:
    tern_linear_free(head);
    tern_model_free(m);
    cJSON_Delete(ref);
}

TEST(tied_head_hidden_vs_reference_cpu) { tied_head_vs_reference(NULL); }
TEST(tied_head_hidden_vs_reference_cuda) {
    if (!have_cuda()) SKIP_OPTIONAL("no CUDA device");
    tied_head_vs_reference("cuda");
}

/* Hidden steps over ids[0..T-1), then the last id evaluated normally: its logits are the
 * reference's last row (the caches and recurrent states the hidden steps left are right). */
static void state_after_hidden(const char *fixture, const char *file, const char *model_key, const char *device) {
    cJSON *ref = load_ref(fixture);
    if (!ref) SKIP("fixture %s missing", fixture);
    tern_model *m = load_on(fixture, file, device);
    if (!m) goto out;
    const int E = tern_model_get_info(m)->n_embd, V = tern_model_get_info(m)->n_vocab;
    size_t T;
    float *rl = NULL;
    int32_t *ids = seq_of(ref, fixture, model_key, 0, &T, &rl);
    tern_session *s = new_session(m, (int)T, 5);
    float *h = malloc(T * (size_t)E * sizeof *h);
    CHECK(tern_session_eval_hidden(s, ids, T - 1, h) == TERN_OK);
    CHECK(tern_session_eval(s, ids + T - 1, 1, NULL) == TERN_OK);
    const float *g = tern_session_logits(s), *r = rl + (T - 1) * (size_t)V;
    double maxd = 0;
    for (int i = 0; rl && i < V; i++) {
        double d = fabs((double)g[i] - r[i]);
        if (!(d <= maxd)) maxd = d;
    }
    CHECK_MSG(maxd < 0.02, "%s %s on %s: last row after hidden steps: max|diff| %g", fixture, file,
              device ? device : "cpu", maxd);
    fprintf(stderr, "  %s/%s on %s: logits after %zu hidden steps vs reference: %.2e\n", fixture, file,
            device ? device : "cpu", T - 1, maxd);
    free(h);
    free(rl);
    free(ids);
    tern_session_free(s);
out:
    tern_model_free(m);
    cJSON_Delete(ref);
}

TEST(state_after_hidden_qwen3) { state_after_hidden("qwen3-tiny", "model-q2_0.gguf", NULL, NULL); }
TEST(state_after_hidden_qwen35) { state_after_hidden("qwen35-tiny", "model-pq2_0.gguf", "A", NULL); }
TEST(state_after_hidden_cuda) {
    if (!have_cuda()) SKIP_OPTIONAL("no CUDA device");
    state_after_hidden("qwen3-tiny", "model-q2_0.gguf", NULL, "cuda");
    state_after_hidden("qwen35-tiny", "model-pq2_0.gguf", "A", "cuda");
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* Pooling from the rows, computed here, equals tern_session_embed's. */
static void pooling_on(const char *fixture, const char *file, const char *model_key) {
    cJSON *ref = load_ref(fixture);
    if (!ref) SKIP("fixture %s missing", fixture);
    tern_model *m = load_on(fixture, file, NULL);
    if (!m) goto out;
    const size_t E = (size_t)tern_model_get_info(m)->n_embd;
    size_t T;
    float *rl = NULL;
    int32_t *ids = seq_of(ref, fixture, model_key, 2, &T, &rl);
    free(rl);
    tern_session *s = new_session(m, 256, 16);
    float *rows = malloc(T * E * sizeof *rows), *got = malloc(T * E * sizeof *got);
    double *mean = calloc(E, sizeof *mean);
    CHECK(tern_session_eval_hidden(s, ids, T, rows) == TERN_OK);
    for (size_t t = 0; t < T; t++)
        for (size_t k = 0; k < E; k++) mean[k] += rows[t * E + k];
    float *meanf = malloc(E * sizeof *meanf);
    double mn = 0;
    for (size_t k = 0; k < E; k++) {
        meanf[k] = (float)(mean[k] / (double)T);
        mn += (double)meanf[k] * meanf[k];
    }
    mn = sqrt(mn);
    /* the rows are not trivially alike: mean, first and last differ */
    CHECK(max_abs_diff(rows, rows + (T - 1) * E, E) > 0.1);
    CHECK(max_abs_diff(meanf, rows, E) > 0.1);
    struct { tern_pooling p; const float *want; } cases[] = {
        {TERN_POOLING_MEAN, meanf}, {TERN_POOLING_LAST, rows + (T - 1) * E}, {TERN_POOLING_CLS, rows}};
    for (size_t c = 0; c < 3; c++) {
        for (int norm = 0; norm < 2; norm++) {
            tern_session_reset(s);
            tern_status st = tern_session_embed(s, ids, T, cases[c].p, norm, got);
            CHECK_MSG(st == TERN_OK, "%s", tern_last_error());
            CHECK_EQ_INT(tern_session_pos(s), (int)T);
            double nrm = 0, wn = 0;
            for (size_t k = 0; k < E; k++) {
                nrm += (double)got[k] * got[k];
                wn += (double)cases[c].want[k] * cases[c].want[k];
            }
            wn = sqrt(wn);
            double maxd = 0;
            for (size_t k = 0; k < E; k++) {
                double w = norm ? cases[c].want[k] / wn : cases[c].want[k];
                double d = fabs(got[k] - w);
                if (!(d <= maxd)) maxd = d;
            }
            CHECK_MSG(maxd < (norm ? 1e-6 : 1e-4), "%s pooling %s normalise %d: max|diff| %g", fixture,
                      tern_pooling_name(cases[c].p), norm, maxd);
            if (norm) CHECK_NEAR(sqrt(nrm), 1.0, 1e-5);
        }
    }
    (void)mn;
    /* NONE: every row, each normalised */
    tern_session_reset(s);
    CHECK(tern_session_embed(s, ids, T, TERN_POOLING_NONE, true, got) == TERN_OK);
    for (size_t t = 0; t < T; t++) {
        double n2 = 0, r2 = 0;
        for (size_t k = 0; k < E; k++) {
            n2 += (double)got[t * E + k] * got[t * E + k];
            r2 += (double)rows[t * E + k] * rows[t * E + k];
        }
        CHECK_NEAR(sqrt(n2), 1.0, 1e-5);
        CHECK_NEAR(got[t * E + 3], rows[t * E + 3] / sqrt(r2), 1e-6);
    }
    /* other chunk sizes give the same rows; a session that held tokens embeds after them */
    tern_session *s1 = new_session(m, 256, 1);
    CHECK(tern_session_eval_hidden(s1, ids, T, got) == TERN_OK);
    double dc = max_abs_diff(rows, got, T * E);
    CHECK_MSG(dc < 1e-3, "%s chunk 1 vs 16: %g", fixture, dc);
    float *after = malloc(E * sizeof *after);
    CHECK(tern_session_embed(s1, ids, 4, TERN_POOLING_MEAN, false, after) == TERN_OK);
    CHECK_EQ_INT(tern_session_pos(s1), (int)T + 4);
    tern_session_reset(s1);
    CHECK(tern_session_embed(s1, ids, 4, TERN_POOLING_MEAN, false, got) == TERN_OK);
    CHECK(max_abs_diff(after, got, E) > 1e-3); /* the context changed it */
    tern_session_free(s1);
    free(after);
    free(meanf);
    free(mean);
    free(rows);
    free(got);
    free(ids);
    tern_session_free(s);
out:
    tern_model_free(m);
    cJSON_Delete(ref);
}

TEST(pooling_qwen3) { pooling_on("qwen3-tiny", "model-q2_0.gguf", NULL); }
TEST(pooling_qwen35) { pooling_on("qwen35-tiny", "model-pq2_0.gguf", "A"); }

TEST(errors_change_nothing) {
    tern_model *m = load_on("qwen3-tiny", "model-q2_0.gguf", NULL);
    if (!m) SKIP("fixture qwen3-tiny missing");
    const size_t E = (size_t)tern_model_get_info(m)->n_embd;
    tern_session *s = new_session(m, 16, 0);
    float *out = malloc(32 * E * sizeof *out);
    int32_t ids[20] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    int32_t bad[3] = {5, 99999, 6};
    CHECK_EQ_INT(tern_session_eval_hidden(s, bad, 3, out), TERN_ERR_RANGE);
    CHECK_EQ_INT(tern_session_embed(s, bad, 3, TERN_POOLING_MEAN, true, out), TERN_ERR_RANGE);
    CHECK_EQ_INT(tern_session_pos(s), 0);
    CHECK_EQ_INT(tern_session_eval_hidden(s, ids, 17, out), TERN_ERR_CONTEXT_FULL);
    CHECK_EQ_INT(tern_session_embed(s, ids, 17, TERN_POOLING_LAST, false, out), TERN_ERR_CONTEXT_FULL);
    CHECK_EQ_INT(tern_session_pos(s), 0);
    CHECK_EQ_INT(tern_session_embed(s, ids, 0, TERN_POOLING_MEAN, false, out), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_embed(s, ids, 2, (tern_pooling)9, false, out), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_eval_hidden(s, ids, 2, NULL), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_eval_hidden(NULL, ids, 2, out), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_session_eval_hidden(s, ids, 0, NULL), TERN_OK);
    CHECK_EQ_INT(tern_session_pos(s), 0);
    tern_pooling p = TERN_POOLING_NONE;
    CHECK(tern_pooling_parse("cls", &p) == TERN_OK && p == TERN_POOLING_CLS);
    CHECK(tern_pooling_parse("mean", &p) == TERN_OK && p == TERN_POOLING_MEAN);
    CHECK(tern_pooling_parse("last", &p) == TERN_OK && p == TERN_POOLING_LAST);
    CHECK_EQ_INT(tern_pooling_parse("max", &p), TERN_ERR_INVALID_ARG);
    CHECK(strstr(tern_last_error(), "mean") != NULL);
    CHECK_STR(tern_pooling_name(TERN_POOLING_NONE), "none");
    CHECK(tern_pooling_name((tern_pooling)4) == NULL);
    free(out);
    tern_session_free(s);
    tern_model_free(m);
}

/* Tensor parallel: the shards hold slices, not the normed rows: refused, nothing changed. */
TEST(tensor_parallel_refused) {
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    mp.tp = 2;
    tern_model *m = NULL;
    const char *p = fixture_path("qwen3-tiny/model-q2_0.gguf");
    if (!p) SKIP("fixture qwen3-tiny missing");
    if (tern_model_load(p, &mp, &m) != TERN_OK) SKIP_OPTIONAL("tp 2: %s", tern_last_error());
    tern_session *s = new_session(m, 16, 0);
    float out[2 * 512];
    int32_t ids[2] = {5, 6};
    CHECK_EQ_INT(tern_session_eval_hidden(s, ids, 2, out), TERN_ERR_UNSUPPORTED);
    CHECK(strstr(tern_last_error(), "tensor-parallel") != NULL);
    CHECK_EQ_INT(tern_session_pos(s), 0);
    CHECK(tern_session_eval(s, ids, 2, NULL) == TERN_OK); /* the session still works */
    tern_session_free(s);
    tern_model_free(m);
}

/* cuda vs cpu: the same rows within the back-ends' parity (the device test). */
TEST(cuda_vs_cpu_rows) {
    if (!have_cuda()) SKIP_OPTIONAL("no CUDA device");
    const char *fx[2][3] = {{"qwen3-tiny", "model-q2_0.gguf", NULL}, {"qwen35-tiny", "model-pq2_0.gguf", "A"}};
    for (int f = 0; f < 2; f++) {
        cJSON *ref = load_ref(fx[f][0]);
        tern_model *mc = load_on(fx[f][0], fx[f][1], NULL), *mg = load_on(fx[f][0], fx[f][1], "cuda");
        if (!ref || !mc || !mg) {
            tern_model_free(mc);
            tern_model_free(mg);
            cJSON_Delete(ref);
            continue;
        }
        const size_t E = (size_t)tern_model_get_info(mc)->n_embd;
        size_t T;
        float *rl = NULL;
        int32_t *ids = seq_of(ref, fx[f][0], fx[f][2], 1, &T, &rl);
        free(rl);
        tern_session *sc = new_session(mc, (int)T, 0), *sg = new_session(mg, (int)T, 0);
        float *a = malloc(T * E * sizeof *a), *b = malloc(T * E * sizeof *b);
        CHECK(tern_session_eval_hidden(sc, ids, T, a) == TERN_OK);
        CHECK(tern_session_eval_hidden(sg, ids, T, b) == TERN_OK);
        double d = max_abs_diff(a, b, T * E);
        CHECK_MSG(d < 5e-3, "%s: cuda vs cpu hidden rows: %g", fx[f][0], d);
        tern_session_reset(sg);
        CHECK(tern_session_embed(sg, ids, 1, TERN_POOLING_LAST, false, b) == TERN_OK); /* one row: T == 1 */
        CHECK(max_abs_diff(a, b, E) < 5e-3);
        fprintf(stderr, "  %s: cuda vs cpu hidden rows max|diff| %.2e\n", fx[f][0], d);
        free(a);
        free(b);
        free(ids);
        tern_session_free(sc);
        tern_session_free(sg);
        tern_model_free(mc);
        tern_model_free(mg);
        cJSON_Delete(ref);
    }
}

int main(void) {
    if (!fixtures_dir()) {
        fprintf(stderr, "SKIP: fixtures missing\n");
        return 77;
    }
    RUN(tied_head_hidden_vs_reference_cpu);
    RUN(state_after_hidden_qwen3);
    RUN(state_after_hidden_qwen35);
    RUN(pooling_qwen3);
    RUN(pooling_qwen35);
    RUN(errors_change_nothing);
    RUN(tensor_parallel_refused);
    RUN(tied_head_hidden_vs_reference_cuda);
    RUN(state_after_hidden_cuda);
    RUN(cuda_vs_cpu_rows);
    return check_summary();
}
