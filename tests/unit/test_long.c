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
 * Bounds (logits up to ~3 here; measured 2026-05 on AVX-512): the fp32 paths agree to
 * 1.9e-4 (chunks) and 1.3e-4 (walk vs prefill past 8k), f16 vs f32 1.5e-4, q8_0 vs f32
 * 2.3e-3; the bounds 2e-3 / 2e-3 / 2e-2 leave ~10x room, while a wrong position (RoPE
 * offset, causal length, a chunk boundary bug) moves logits by O(0.1..1).
 */
#include "check.h"
#include "tern.h"

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

int main(void) {
    RUN(chunk_sizes_agree);
    RUN(past_8k_prefill_walk_and_types);
    tern_model_free(g_m);
    if (g_path[0]) unlink(g_path);
    return check_summary();
}
