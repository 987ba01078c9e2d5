/*
 * test_quantize.c - numerics of `tern quantize` (src/formats/quantize.h) and the
 * V-head row-streaming map (vorder.h): the blockwise fold against an explicit
 * Sylvester Hadamard matrix, the fold's inverse property, ternarisation (scale =
 * group max, rounding at +-0.5, zero groups), seeded signs, size labels.
 */
#include "check.h"
#include "formats/hf_meta.h"
#include "formats/quantize.h"
#include "formats/vorder.h"

#include <stdlib.h>
#include <stdio.h>
#include <unistd.h>

static int popcount(unsigned x) { int n = 0; while (x) { n += x & 1; x >>= 1; } return n; }

TEST(fold_matches_matrix) {
    /* x' = H (S x) / sqrt(n) per block, H[i][j] = (-1)^popcount(i&j), n = 64, K = 192 */
    enum { n = 64, K = 192 };
    float s[K];
    double x[K], y[K], ref[K];
    for (int i = 0; i < K; i++) {
        s[i] = (check_rand_u64() & 1) ? 1.0f : -1.0f;
        x[i] = y[i] = check_rand_normal();
    }
    for (int b = 0; b < K; b += n)
        for (int i = 0; i < n; i++) {
            double acc = 0;
            for (int j = 0; j < n; j++) acc += ((popcount(i & j) & 1) ? -1.0 : 1.0) * s[b + j] * x[b + j];
            ref[b + i] = acc / 8.0;
        }
    tern_fold_row(y, s, K, n);
    double err = 0;
    for (int i = 0; i < K; i++) err = fmax(err, fabs(y[i] - ref[i]));
    CHECK(err < 1e-12);
    /* unfold: W = S * FWHT(W') / sqrt(n); FWHT is its own inverse up to n */
    float ones[K];
    for (int i = 0; i < K; i++) ones[i] = 1.0f;
    tern_fold_row(y, ones, K, n);
    for (int i = 0; i < K; i++) y[i] *= s[i];
    err = 0;
    for (int i = 0; i < K; i++) err = fmax(err, fabs(y[i] - x[i]));
    CHECK(err < 1e-12);
}

TEST(ternarize_rules) {
    float w[256];
    uint8_t c[256];
    uint16_t d[2];
    for (int i = 0; i < 256; i++) w[i] = 0.0f;
    /* group 0: max |w| = 0.5 (exact fp16); w/d = 1, 0.5 -> +1 (half away from zero),
       0.4999 -> 0, -0.5 -> -1, -1 -> -1 */
    w[0] = 0.5f; w[1] = 0.25f; w[2] = 0.2499f; w[3] = -0.25f; w[4] = -0.5f; w[5] = 0.1f;
    tern_ternarize_row(w, 256, c, d);
    CHECK_EQ_INT(d[0], 0x3800);
    CHECK_EQ_INT(c[0], 2); CHECK_EQ_INT(c[1], 2); CHECK_EQ_INT(c[2], 1);
    CHECK_EQ_INT(c[3], 0); CHECK_EQ_INT(c[4], 0); CHECK_EQ_INT(c[5], 1);
    CHECK_EQ_INT(c[6], 1);
    /* group 1 all zero: scale 0, codes 1 */
    CHECK_EQ_INT(d[1], 0);
    for (int i = 128; i < 256; i++) CHECK_EQ_INT(c[i], 1);
    /* exact ternary input t*d comes back exactly */
    for (int i = 0; i < 128; i++) w[i] = (float)((int)(check_rand_u64() % 3) - 1) * 0.0185546875f;
    w[7] = 0.0185546875f;
    tern_ternarize_row(w, 128, c, d);
    CHECK(tern_f16_to_f32(d[0]) == 0.0185546875f);
    for (int i = 0; i < 128; i++) CHECK(((int)c[i] - 1) * 0.0185546875f == w[i]);
}

TEST(seeded_signs) {
    int32_t a[3072], b[3072], c[3072];
    tern_signs_from_seed(42, 3072, a);
    tern_signs_from_seed(42, 3072, b);
    tern_signs_from_seed(43, 3072, c);
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(memcmp(a, c, sizeof a) != 0);
    int neg = 0;
    for (int i = 0; i < 3072; i++) {
        CHECK(a[i] == 1 || a[i] == -1);
        neg += a[i] < 0;
    }
    CHECK(neg > 1400 && neg < 1672);
}

TEST(size_labels) {
    char b[32];
    tern_hf_size_label(78862352, b, sizeof b); CHECK_STR(b, "79M");   /* qwen35-tiny fixture */
    tern_hf_size_label(16782848, b, sizeof b); CHECK_STR(b, "17M");   /* qwen3-tiny fixture */
    tern_hf_size_label(1720574976, b, sizeof b); CHECK_STR(b, "1.7B");
    tern_hf_size_label(8190735360ull, b, sizeof b); CHECK_STR(b, "8.2B");
    tern_hf_size_label(26895998464ull, b, sizeof b); CHECK_STR(b, "27B");
}

TEST(vorder_src_row_matches_tensor) {
    tern_gdn_dims g = {4, 12, 3, 5};
    const tern_vorder_kind kinds[] = {TERN_VO_QKV, TERN_VO_ROWS, TERN_VO_ROWS, TERN_VO_ELEMS, TERN_VO_CONV};
    const uint64_t rows[] = {2 * 12 + 60, 60, 12, 12, 2 * 12 + 60};
    for (int k = 0; k < 5; k++) {
        uint64_t n = rows[k];
        uint32_t *src = malloc(n * 4), *dst = malloc(n * 4);
        for (uint64_t i = 0; i < n; i++) src[i] = (uint32_t)i * 7 + 1;
        for (int dir = 0; dir < 2; dir++) {
            uint64_t nr = kinds[k] == TERN_VO_ELEMS ? 1 : n, rb = kinds[k] == TERN_VO_ELEMS ? n * 4 : 4;
            CHECK(tern_vorder_tensor(kinds[k], &g, src, dst, nr, rb, (tern_vorder_dir)dir, "t") == TERN_OK);
            for (uint64_t r = 0; r < n; r++)
                CHECK(dst[r] == src[tern_vorder_src_row(kinds[k], &g, n, r, (tern_vorder_dir)dir)]);
        }
        free(src);
        free(dst);
    }
}

/* The public API: synth a tiny model, convert it through PTQ1_0, g64 and an MLX pack
 * and back; every round trip gives the same bytes. */
TEST(public_api_round_trip) {
    char dir[] = "/tmp/tern_test_q_XXXXXX";
    if (!mkdtemp(dir)) SKIP("no temp dir");
    char a[256], b[256], c[256], d[256], pk[256], e[256];
    snprintf(a, sizeof a, "%s/a.gguf", dir);
    snprintf(b, sizeof b, "%s/b.gguf", dir);
    snprintf(c, sizeof c, "%s/c.gguf", dir);
    snprintf(d, sizeof d, "%s/d.gguf", dir);
    snprintf(pk, sizeof pk, "%s/pack", dir);
    snprintf(e, sizeof e, "%s/e.gguf", dir);
    CHECK(tern_synth_model("qwen35-tiny", 9, 4, a, NULL, NULL) == TERN_OK);
    CHECK(tern_convert_model(a, b, "ptq1_0", NULL, NULL, NULL) == TERN_OK);
    CHECK(tern_convert_model(b, c, "q2_0_g64", NULL, NULL, NULL) == TERN_OK);
    CHECK(tern_convert_model(c, d, "pq2_0", NULL, NULL, NULL) == TERN_OK);
    CHECK(tern_convert_model(d, pk, "mlx", NULL, NULL, NULL) == TERN_OK);
    CHECK(tern_convert_model(pk, e, "pq2_0", NULL, NULL, NULL) == TERN_OK);
    size_t na = 0, nd = 0, ne = 0;
    unsigned char *x = check_slurp(a, &na), *y = check_slurp(d, &nd), *z = check_slurp(e, &ne);
    CHECK(x && y && z && na == nd && na == ne && na > 1000000);
    CHECK(x && y && !memcmp(x, y, na));
    CHECK(x && z && !memcmp(x, z, na));
    free(x); free(y); free(z);
    CHECK(tern_convert_model(a, b, "q3_k", NULL, NULL, NULL) == TERN_ERR_INVALID_ARG);
    CHECK(tern_synth_model("no-such-preset", 1, 0, b, NULL, NULL) == TERN_ERR_INVALID_ARG);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void) {
    check_seed();
    RUN(fold_matches_matrix);
    RUN(ternarize_rules);
    RUN(seeded_signs);
    RUN(size_labels);
    RUN(vorder_src_row_matches_tensor);
    RUN(public_api_round_trip);
    return check_summary();
}
