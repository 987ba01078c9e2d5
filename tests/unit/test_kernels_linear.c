/*
 * test_kernels_linear.c - the public ternary linear layer (tern.h, kernels
 * section): every constructor against a float64 oracle built here from the
 * same trits and scales, the refusals (code 3, bias != -scale, bad shapes,
 * wrong sizes), empty batches, strides and the threads setting.
 */
#include "check.h"
#include "tern.h"
#include "core/common.h"

#include <stdint.h>

static double fwd_err(const tern_linear *l, const int8_t *trits, const float *scales, const float *bias,
                      int64_t n, int64_t k, int group, size_t batch, size_t xs, size_t ys) {
    float *x = malloc((batch * xs + 1) * sizeof(float));
    float *y = malloc((batch * ys + 1) * sizeof(float));
    for (size_t i = 0; i < batch * xs + 1; i++) x[i] = check_rand_normal();
    if (tern_linear_forward(l, x, batch, xs, y, ys) != TERN_OK) { free(x); free(y); return 1e9; }
    double maxd = 0, maxr = 0;
    for (size_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < n; i++) {
            double s = bias ? bias[i] : 0;
            for (int64_t j = 0; j < k; j++)
                s += (double)trits[i * k + j] * tern_f16_to_f32(tern_f32_to_f16(scales[i * (k / group) + j / group])) *
                     (double)x[b * xs + (size_t)j];
            maxd = fmax(maxd, fabs(s - y[b * ys + (size_t)i]));
            maxr = fmax(maxr, fabs(s));
        }
    free(x); free(y);
    return maxd / maxr;
}

static void rand_layer(int64_t n, int64_t k, int group, int8_t **t, float **s, float **b) {
    *t = malloc((size_t)(n * k));
    *s = malloc((size_t)(n * (k / group)) * sizeof(float));
    *b = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n * k; i++) (*t)[i] = (int8_t)((int)(check_rand_u64() >> 35) % 3 - 1);
    for (int64_t i = 0; i < n * (k / group); i++) (*s)[i] = 0.003f + 0.03f * (float)check_rand_unit();
    for (int64_t i = 0; i < n; i++) (*b)[i] = check_rand_normal();
}

TEST(from_trits_forward_matches_f64) {
    int groups[] = {64, 128};
    for (int gi = 0; gi < 2; gi++)
        for (int th = 1; th <= 3; th++) {
            CHECK(tern_set_threads(th) == TERN_OK);
            CHECK_EQ_INT(tern_get_threads(), th);
            int g = groups[gi];
            int64_t n = 45, k = (int64_t)g * 3;
            int8_t *t; float *s, *b;
            rand_layer(n, k, g, &t, &s, &b);
            tern_linear *l = NULL;
            CHECK(tern_linear_from_trits(t, s, b, n, k, g, &l) == TERN_OK);
            CHECK_EQ_INT(tern_linear_n_in(l), k);
            CHECK_EQ_INT(tern_linear_n_out(l), n);
            size_t batches[] = {1, 4, 33, 70};
            for (int bi = 0; bi < 4; bi++) {
                double e = fwd_err(l, t, s, b, n, k, g, batches[bi], (size_t)k + 7 * (bi & 1), (size_t)n + 2);
                CHECK_MSG(e < 1e-3, "group %d threads %d batch %zu: max_rel_err %g", g, th, batches[bi], e);
            }
            /* dequantize gives the trits times the fp16 scales */
            float *w = malloc((size_t)(n * k) * sizeof(float));
            CHECK(tern_linear_dequantize(l, w) == TERN_OK);
            int bad = 0;
            for (int64_t i = 0; i < n * k; i++)
                bad += w[i] != (float)t[i] * tern_f16_to_f32(tern_f32_to_f16(s[(i / k) * (k / g) + (i % k) / g]));
            CHECK_EQ_INT(bad, 0);
            free(w);
            tern_linear_free(l);
            free(t); free(s); free(b);
        }
    tern_set_threads(1);
}

TEST(from_trits_rejects) {
    int8_t t[256] = {0};
    float s[4] = {1, 1, 1, 1};
    tern_linear *l = (tern_linear *)1;
    CHECK(tern_linear_from_trits(t, s, NULL, 1, 100, 64, &l) == TERN_ERR_SHAPE);
    CHECK(l == NULL);
    CHECK(tern_linear_from_trits(t, s, NULL, 1, 128, 32, &l) == TERN_ERR_SHAPE);
    CHECK(tern_linear_from_trits(t, s, NULL, 0, 128, 64, &l) == TERN_ERR_SHAPE);
    CHECK(tern_linear_from_trits(t, s, NULL, 1, -128, 64, &l) == TERN_ERR_SHAPE);
    CHECK(tern_linear_from_trits(NULL, s, NULL, 1, 128, 64, &l) == TERN_ERR_INVALID_ARG);
    t[77] = 2;
    CHECK(tern_linear_from_trits(t, s, NULL, 1, 128, 64, &l) == TERN_ERR_INVALID_ARG);
    CHECK(strstr(tern_last_error(), "77") != NULL);
    t[77] = 0;
    CHECK(tern_linear_from_trits(t, s, NULL, 1, 128, 64, &l) == TERN_OK);
    tern_linear_free(l);
    tern_linear_free(NULL);
}

/* Pack trits into MLX words: element j of a word at bits 2j, code = trit + 1. */
static uint32_t *mlx_words(const int8_t *t, int64_t n, int64_t k) {
    uint32_t *w = calloc((size_t)(n * k / 16), 4);
    for (int64_t i = 0; i < n * k; i++) w[i / 16] |= (uint32_t)(t[i] + 1) << (2 * (i % 16));
    return w;
}

TEST(from_mlx_2bit) {
    int groups[] = {64, 128};
    for (int gi = 0; gi < 2; gi++) {
        int g = groups[gi];
        int64_t n = 20, k = (int64_t)g * 2;
        int8_t *t; float *s, *b;
        rand_layer(n, k, g, &t, &s, &b);
        uint32_t *w = mlx_words(t, n, k);
        size_t ng = (size_t)(n * (k / g));
        uint16_t *sh = malloc(ng * 2), *bh = malloc(ng * 2);
        for (size_t i = 0; i < ng; i++) { sh[i] = tern_f32_to_f16(s[i]); bh[i] = tern_f32_to_f16(-s[i]); }
        tern_linear *l = NULL;
        CHECK(tern_linear_from_mlx_2bit(w, sh, bh, b, n, k, g, &l) == TERN_OK);
        double e = fwd_err(l, t, s, b, n, k, g, 3, (size_t)k, (size_t)n);
        CHECK_MSG(e < 1e-3, "mlx group %d: %g", g, e);
        tern_linear_free(l);
        /* bias != -scale in one group */
        bh[ng - 1] = tern_f32_to_f16(-s[ng - 1] * 1.001f + 0.001f);
        l = NULL;
        CHECK(tern_linear_from_mlx_2bit(w, sh, bh, b, n, k, g, &l) == TERN_ERR_FORMAT);
        CHECK(l == NULL);
        bh[ng - 1] = tern_f32_to_f16(-s[ng - 1]);
        bh[0] = sh[0];   /* bias == +scale */
        CHECK(tern_linear_from_mlx_2bit(w, sh, bh, b, n, k, g, &l) == TERN_ERR_FORMAT);
        bh[0] = tern_f32_to_f16(-s[0]);
        /* code 3 */
        w[5] |= 3u << 8;
        CHECK(tern_linear_from_mlx_2bit(w, sh, bh, b, n, k, g, &l) == TERN_ERR_FORMAT);
        CHECK(strstr(tern_last_error(), "code 3") != NULL);
        CHECK(tern_linear_from_mlx_2bit(w, sh, bh, b, n, k + 1, g, &l) == TERN_ERR_SHAPE);
        free(w); free(sh); free(bh); free(t); free(s); free(b);
    }
}

TEST(from_packed_and_errors) {
    int64_t n = 9, k = 256;
    int8_t *t; float *s, *b;
    rand_layer(n, k, 128, &t, &s, &b);
    /* PQ2_0 bytes by hand: fp16 d, then codes element j at byte j/4 bits 2*(j%4) */
    size_t rb = 2 * 34;
    uint8_t *buf = calloc(n * rb, 1);
    for (int64_t r = 0; r < n; r++)
        for (int64_t j = 0; j < k; j++) {
            uint8_t *blk = buf + r * rb + (j / 128) * 34;
            uint16_t d = tern_f32_to_f16(s[r * 2 + j / 128]);
            memcpy(blk, &d, 2);
            blk[2 + (j % 128) / 4] |= (uint8_t)((t[r * k + j] + 1) << (2 * (j % 4)));
        }
    tern_linear *l = NULL;
    CHECK(tern_linear_from_packed(TERN_DT_PQ2_0, buf, n * rb, NULL, n, k, &l) == TERN_OK);
    double e = fwd_err(l, t, s, NULL, n, k, 128, 2, (size_t)k, (size_t)n);
    CHECK_MSG(e < 1e-3, "packed PQ2_0: %g", e);
    /* strides smaller than the shape */
    float x[512] = {0}, y[32];
    CHECK(tern_linear_forward(l, x, 1, (size_t)k - 1, y, (size_t)n) == TERN_ERR_SHAPE);
    CHECK(tern_linear_forward(l, x, 1, (size_t)k, y, (size_t)n - 1) == TERN_ERR_SHAPE);
    /* empty batch: no work, no access */
    CHECK(tern_linear_forward(l, NULL, 0, (size_t)k, NULL, (size_t)n) == TERN_OK);
    CHECK(tern_linear_forward(NULL, x, 1, (size_t)k, y, (size_t)n) == TERN_ERR_INVALID_ARG);
    tern_linear_free(l);
    CHECK(tern_linear_from_packed(TERN_DT_Q2_0, buf, n * rb, NULL, n, k, &l) == TERN_OK);
    tern_linear_free(l);
    CHECK(tern_linear_from_packed(TERN_DT_PQ2_0, buf, n * rb - 1, NULL, n, k, &l) == TERN_ERR_SHAPE);
    CHECK(tern_linear_from_packed(TERN_DT_PQ2_0, buf, n * rb, NULL, n, k + 64, &l) == TERN_ERR_SHAPE);
    CHECK(tern_linear_from_packed(TERN_DT_F32, buf, n * rb, NULL, n, k, &l) == TERN_ERR_UNSUPPORTED);
    buf[rb * 3 + 40] |= 0xC0;   /* a code 3 in row 3 */
    CHECK(tern_linear_from_packed(TERN_DT_PQ2_0, buf, n * rb, NULL, n, k, &l) == TERN_ERR_FORMAT);
    CHECK(l == NULL);
    /* Q1_0: any bits are valid */
    CHECK(tern_linear_from_packed(TERN_DT_Q1_0, buf, n * 2 * 18, NULL, n, k, &l) == TERN_OK);
    float *w = malloc(n * k * sizeof(float));
    CHECK(tern_linear_dequantize(l, w) == TERN_OK);
    /* element 9 of row 1 block 0: bit 1 of byte 2+1 */
    uint8_t *blk = buf + 36;
    float d = tern_f16_to_f32(tern_rd16(blk));
    CHECK(w[k + 9] == (((blk[3] >> 1) & 1) ? d : -d));
    free(w);
    tern_linear_free(l);
    free(buf); free(t); free(s); free(b);
}

TEST(threads_setting) {
    CHECK(tern_set_threads(-1) == TERN_ERR_INVALID_ARG);
    CHECK(tern_set_threads(0) == TERN_OK);
    CHECK(tern_get_threads() >= 1);
    CHECK(tern_set_threads(1) == TERN_OK);
    CHECK_EQ_INT(tern_get_threads(), 1);
    CHECK(tern_kernel_isa() != NULL && *tern_kernel_isa());
}

int main(void) {
    check_seed();
    RUN(from_trits_forward_matches_f64);
    RUN(from_trits_rejects);
    RUN(from_mlx_2bit);
    RUN(from_packed_and_errors);
    RUN(threads_setting);
    tern_set_threads(1);
    return check_summary();
}
