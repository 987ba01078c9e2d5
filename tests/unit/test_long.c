/*
 * test_long.c - long contexts on a synthetic model made here (tern_synth_model preset
 * long-tiny: qwen3, one layer, 2 heads / 1 KV head of 64, trained context 262,144), no
 * fixtures needed. tern's own f32 cache is the reference throughout:
 *   - a random prompt of 1100 tokens through chunk sizes 1 (the token walk), 64 and 512:
 *     the same logits at every position (f32 cache; GEMV vs GEMM rounding only);
 *   - past 8k: two sessions prefill the same 8192 tokens (chunk 512), then the next 40
 *     tokens go through one as a 40-row prefill and through the other one token at a
 *     time (the walk): the same logits at positions 8192..8231; and the same 40 tokens
 *     after an f16 and a q8_0 cache (prefilled the same way) within the cache types'
 *     bounds.
 *   - the random depth fill of `tern bench model --depth-fill random`
 *     (tm_session_fill_random, internal): on qwen3-tiny and qwen35-tiny synth models
 *     (4 attention layers; 3 GDN + 1 attention) in f32, f16, bf16 and q8_0 caches, every
 *     attention layer's key and value rows below the depth hold finite unit-variance
 *     values that are valid encodings of the stored type (stored again they give the
 *     same bytes), rows from the depth on are zero, the position is the depth; the GDN
 *     conv states have unit variance, S a standard deviation of 0.1, the CPU's pending
 *     update is empty; decode then runs with finite logits that depend on the seed (the
 *     filled rows are read) and equal for equal seeds.
 * Bounds (logits up to ~3 here; measured 2026-05 on AVX-512): the fp32 paths agree to
 * 1.9e-4 (chunks) and 1.3e-4 (walk vs prefill past 8k), f16 vs f32 1.5e-4, q8_0 vs f32
 * 2.3e-3; the bounds 2e-3 / 2e-3 / 2e-2 leave ~10x room, while a wrong position (RoPE
 * offset, causal length, a chunk boundary bug) moves logits by O(0.1..1).
 */
#include "check.h"
#include "tern.h"
#include "model/session.h" /* tm_session_fill_random, the session's buffers */

#include <stdint.h>
#include <unistd.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

static char g_path[256];
static tern_model *g_m;

static tern_model *model(void) {
    if (g_m) return g_m;
    snprintf(g_path, sizeof g_path, "%s/tern-long-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    CHECK_MSG(tern_synth_model("long-tiny", 1, 0, g_path, NULL, NULL) == TERN_OK, "%s", tern_last_error());
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    CHECK_MSG(tern_model_load(g_path, &mp, &g_m) == TERN_OK, "%s", tern_last_error());
    return g_m;
}

static tern_session *session(int n_ctx, int n_chunk, tern_cache_type ct) {
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = n_ctx;
    sp.n_chunk = n_chunk;
    sp.cache_type_k = sp.cache_type_v = ct;
    tern_session *s = NULL;
    CHECK_MSG(tern_session_new(model(), &sp, &s) == TERN_OK, "%s", tern_last_error());
    return s;
}

static double max_diff(const float *a, const float *b, size_t n, double *scale) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= d)) d = e;
        if (fabs(a[i]) > m) m = fabs(a[i]);
    }
    if (scale) *scale = m;
    return d;
}

TEST(chunk_sizes_agree) {
    tern_model *m = model();
    const int V = tern_model_get_info(m)->n_vocab, T = 1100;
    int32_t *ids = malloc(T * sizeof *ids);
    for (int i = 0; i < T; i++) ids[i] = (int32_t)(rnd() % (uint32_t)V);
    const int sizes[3] = {1, 64, 512};
    float *lg[3];
    for (int c = 0; c < 3; c++) {
        tern_session *s = session(T, sizes[c], TERN_CACHE_F32);
        lg[c] = malloc((size_t)T * V * sizeof(float));
        CHECK(tern_session_eval(s, ids, T, lg[c]) == TERN_OK);
        tern_session_free(s);
    }
    for (int c = 1; c < 3; c++) {
        double sc, d = max_diff(lg[0], lg[c], (size_t)T * V, &sc);
        CHECK_MSG(d < 2e-3, "chunk %d vs 1: max|diff| %g", sizes[c], d);
        fprintf(stderr, "  %d tokens, chunk %d vs 1: max|diff| %.2e (logits up to %.2f)\n", T, sizes[c], d, sc);
    }
    for (int c = 0; c < 3; c++) free(lg[c]);
    free(ids);
}

TEST(past_8k_prefill_walk_and_types) {
    tern_model *m = model();
    const int V = tern_model_get_info(m)->n_vocab, P = 8192, N = 40;
    int32_t *ids = malloc((P + N) * sizeof *ids);
    for (int i = 0; i < P + N; i++) ids[i] = (int32_t)(rnd() % (uint32_t)V);
    /* 0: f32 prefill of the tail, 1: f32 walk, 2: f16 prefill, 3: q8_0 prefill */
    const tern_cache_type ct[4] = {TERN_CACHE_F32, TERN_CACHE_F32, TERN_CACHE_F16, TERN_CACHE_Q8_0};
    float *lg[4];
    for (int k = 0; k < 4; k++) {
        tern_session *s = session(P + N, 512, ct[k]);
        CHECK(tern_session_eval(s, ids, P, NULL) == TERN_OK);
        lg[k] = malloc((size_t)N * V * sizeof(float));
        if (k == 1) {
            for (int i = 0; i < N; i++) CHECK(tern_session_eval(s, ids + P + i, 1, lg[k] + (size_t)i * V) == TERN_OK);
        } else {
            CHECK(tern_session_eval(s, ids + P, N, lg[k]) == TERN_OK);
        }
        CHECK(tern_session_pos(s) == P + N);
        if (k == 3) {
            /* the cache bytes: 1 layer x (keys + values) x 64 values as q8_0 (2 blocks of 34) */
            CHECK(tern_session_cache_bytes(s, P + N) == (uint64_t)(P + N) * 2 * 68);
            CHECK(tern_session_cache_bytes(s, 1 << 30) == tern_session_cache_bytes(s, P + N));
        }
        tern_session_free(s);
    }
    const char *what[4] = {"", "walk vs prefill (f32)", "f16 vs f32", "q8_0 vs f32"};
    const double bound[4] = {0, 2e-3, 2e-3, 2e-2};
    for (int k = 1; k < 4; k++) {
        double sc, d = max_diff(lg[0], lg[k], (size_t)N * V, &sc);
        CHECK_MSG(d < bound[k], "positions %d..%d, %s: max|diff| %g", P, P + N - 1, what[k], d);
        fprintf(stderr, "  positions %d..%d, %s: max|diff| %.2e (logits up to %.2f)\n", P, P + N - 1, what[k],
                d, sc);
    }
    for (int k = 0; k < 4; k++) free(lg[k]);
    free(ids);
}

/* mean and standard deviation of n floats; false if one is not finite */
static bool stats(const float *x, size_t n, double *mean, double *sd) {
    double s1 = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return false;
        s1 += x[i];
        s2 += (double)x[i] * x[i];
    }
    *mean = s1 / (double)n;
    *sd = sqrt(s2 / (double)n - *mean * *mean);
    return true;
}

static void fill_model(const char *preset) {
    char path[256];
    snprintf(path, sizeof path, "%s/tern-long-fill-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    CHECK_MSG(tern_synth_model(preset, 3, 0, path, NULL, NULL) == TERN_OK, "%s", tern_last_error());
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    tern_model *m = NULL;
    CHECK_MSG(tern_model_load(path, &mp, &m) == TERN_OK, "%s", tern_last_error());
    unlink(path);
    if (!m) return;
    const tm_hparams *hp = &m->hp;
    const int V = hp->n_vocab, D = 1000, N = 6, ctx = D + N + 50;
    const size_t kvw = (size_t)hp->n_head_kv * hp->head_dim;
    const tern_cache_type types[4] = {TERN_CACHE_F32, TERN_CACHE_F16, TERN_CACHE_BF16, TERN_CACHE_Q8_0};
    float *row = malloc(kvw * sizeof(float)), *all = malloc((size_t)D * kvw * sizeof(float));
    uint8_t *again = malloc(kvw * 4);
    float *lg[3];
    for (int k = 0; k < 3; k++) lg[k] = malloc((size_t)V * sizeof(float));
    for (int ti = 0; ti < 4; ti++) {
        tern_session *ss[3] = {NULL, NULL, NULL};
        for (int k = 0; k < 3; k++) {
            tern_session_params sp;
            tern_session_params_default(&sp);
            sp.n_ctx = ctx;
            sp.cache_type_k = sp.cache_type_v = types[ti];
            CHECK_MSG(tern_session_new(m, &sp, &ss[k]) == TERN_OK, "%s", tern_last_error());
        }
        if (!ss[0] || !ss[1] || !ss[2]) break;
        tern_session *s = ss[0];
        /* a used session: the fill starts from empty (rows past the depth zero) */
        int32_t warm[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        CHECK(tern_session_eval(s, warm, 8, NULL) == TERN_OK);
        CHECK_EQ_INT(tm_session_fill_random(s, ctx + 1, 7), TERN_ERR_RANGE);
        CHECK_EQ_INT(tm_session_fill_random(s, -1, 7), TERN_ERR_RANGE);
        CHECK_EQ_INT(tm_session_fill_random(s, D, 7), TERN_OK);
        CHECK_EQ_INT(tm_session_fill_random(ss[1], D, 7), TERN_OK);
        CHECK_EQ_INT(tm_session_fill_random(ss[2], D, 8), TERN_OK);
        CHECK_EQ_INT(tern_session_pos(s), D);
        CHECK(tern_session_cache_bytes(s, tern_session_pos(s)) ==
              (uint64_t)D * hp->n_attn_layers * (s->k_row + s->v_row));
        /* every attention layer's rows: below D unit-variance values in the stored
         * encoding, from D on zero bytes */
        for (int l = 0; l < hp->n_attn_layers; l++) {
            for (int c = 0; c < 2; c++) {
                const tern_kv_type t = c ? s->v_type : s->k_type;
                const size_t rb = c ? s->v_row : s->k_row;
                const uint8_t *base = (const uint8_t *)(c ? s->vcache : s->kcache) + (size_t)l * ctx * rb;
                int bad_enc = 0, nonzero_tail = 0;
                for (int p = 0; p < D; p++) {
                    tern_kv_load(t, base + (size_t)p * rb, kvw, all + (size_t)p * kvw);
                    tern_kv_store(t, again, rb, all + (size_t)p * kvw, kvw, 1, kvw);
                    if (memcmp(again, base + (size_t)p * rb, rb)) bad_enc++;
                }
                for (size_t b = (size_t)D * rb; b < (size_t)ctx * rb; b++) nonzero_tail += base[b] != 0;
                double mean, sd;
                bool fin = stats(all, (size_t)D * kvw, &mean, &sd);
                CHECK_MSG(fin && fabs(mean) < 0.02 && sd > 0.95 && sd < 1.05,
                          "%s cache %s layer %d %s: finite %d, mean %g, sd %g", preset,
                          tern_cache_type_name(types[ti]), l, c ? "values" : "keys", fin, mean, sd);
                CHECK_MSG(bad_enc == 0 && nonzero_tail == 0, "%s %s layer %d %s: %d rows not in the type's "
                          "encoding, %d nonzero bytes past the depth", preset, tern_cache_type_name(types[ti]),
                          l, c ? "values" : "keys", bad_enc, nonzero_tail);
                /* rows differ from each other and keys from values */
                CHECK(memcmp(all, all + kvw, kvw * sizeof(float)) != 0);
                if (c == 0) memcpy(row, all, kvw * sizeof(float));
                else CHECK(memcmp(row, all, kvw * sizeof(float)) != 0);
            }
        }
        /* GDN layers: conv states unit variance, S sd 0.1, the pending update empty */
        if (hp->n_gdn_layers) {
            const size_t C = 2 * (size_t)hp->ssm_n_k * hp->ssm_dk + (size_t)hp->ssm_n_v * hp->ssm_dv;
            const size_t CS = (size_t)(hp->conv_k - 1) * C, SN = (size_t)hp->ssm_n_v * hp->ssm_dk * hp->ssm_dv;
            const size_t GF = m->be->vt->gdn_state_floats(m->be, hp), per = 1 + (size_t)hp->ssm_dk + hp->ssm_dv;
            CHECK(GF == SN + (size_t)hp->ssm_n_v * per);
            for (int l = 0; l < hp->n_gdn_layers; l++) {
                double mean, sd;
                bool fin = stats(s->conv_state + (size_t)l * CS, CS, &mean, &sd);
                CHECK_MSG(fin && fabs(mean) < 0.05 && sd > 0.9 && sd < 1.1, "%s gdn %d conv: mean %g sd %g",
                          preset, l, mean, sd);
                const float *st = s->ssm_state + (size_t)l * GF;
                fin = stats(st, SN, &mean, &sd);
                CHECK_MSG(fin && fabs(mean) < 0.005 && sd > 0.09 && sd < 0.11, "%s gdn %d S: mean %g sd %g",
                          preset, l, mean, sd);
                int bad = 0;
                for (size_t i = 0; i < (size_t)hp->ssm_n_v * per; i++)
                    bad += st[SN + i] != (i % per == 0 ? 1.0f : 0.0f);
                CHECK_MSG(bad == 0, "%s gdn %d: %d pending floats not empty", preset, l, bad);
            }
        }
        /* decode runs from there; equal seeds equal logits, another seed others */
        for (int k = 0; k < 3; k++) {
            for (int i = 0; i < N; i++) {
                int32_t tok = (int32_t)(11 + 7 * i);
                CHECK(tern_session_eval(ss[k], &tok, 1, NULL) == TERN_OK);
            }
            CHECK_EQ_INT(tern_session_pos(ss[k]), D + N);
            memcpy(lg[k], tern_session_logits(ss[k]), (size_t)V * sizeof(float));
        }
        double mean, sd;
        CHECK(stats(lg[0], (size_t)V, &mean, &sd) && sd > 0);
        double same = max_diff(lg[0], lg[1], (size_t)V, NULL), other = max_diff(lg[0], lg[2], (size_t)V, NULL);
        CHECK_MSG(same == 0 && other > 1e-4, "%s %s: same seed max|diff| %g, other seed %g", preset,
                  tern_cache_type_name(types[ti]), same, other);
        fprintf(stderr, "  %s %s: depth %d filled, %d decode steps, logits sd %.2f, other seed max|diff| %.2e\n",
                preset, tern_cache_type_name(types[ti]), D, N, sd, other);
        for (int k = 0; k < 3; k++) tern_session_free(ss[k]);
    }
    for (int k = 0; k < 3; k++) free(lg[k]);
    free(row); free(all); free(again);
    tern_model_free(m);
}

TEST(random_fill_qwen3) { fill_model("qwen3-tiny"); }
TEST(random_fill_qwen35) { fill_model("qwen35-tiny"); }

int main(void) {
    RUN(chunk_sizes_agree);
    RUN(past_8k_prefill_walk_and_types);
    RUN(random_fill_qwen3);
    RUN(random_fill_qwen35);
    tern_model_free(g_m);
    if (g_path[0]) unlink(g_path);
    return check_summary();
}
