/*
 * test_kernels_model.c - the kernel library's model ops other than the GDN
 * (test_kernels_gdn): tern_attention, tern_rope, tern_head_rmsnorm, each against a
 * float64 reference written here, for every ISA table this CPU has, against the
 * reference build of the per-head loops (model_ops.c), and for thread counts 1..3
 * (each head is one task, so results must be bit-identical whatever the pool).
 *
 * Shapes are awkward on purpose: head_dim 1, 7, 16, 33, 128 (16-wide vector steps with
 * and without tails), GQA groups 1..4, rows 1..17 with pos0 0..40 (causal lengths),
 * q rows with a stride wider than the heads, partial rotary (rot < hd: the dims past rot
 * must be untouched) and positions up to 262,143 (the qwen35 trained context).
 *
 * Error budget (max|x - ref| / max|ref| over a call): fp32 with expf and dot products of
 * <= 128 terms measures ~1e-7 .. 1e-6; the bounds (attention 2e-5, RoPE and head norm
 * 1e-6) keep ~10x head room; a wrong GQA map, a causal length off by one, a missing
 * max subtraction or the rotation's sign all give > 1e-2.
 */
#include "check.h"
#include "kernels/kernels.h"
#include "kernels/cpu/internal.h"

#include <stdint.h>

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static double urand(void) { /* [0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static float srand1(float s) { return (float)((2.0 * urand() - 1.0) * s); }

static double rel_err(const float *x, const double *ref, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - ref[i]);
        if (!(d <= e)) e = d; /* NaN-sticky */
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return m > 0 ? e / m : e;
}

static double rel_err_f(const float *x, const float *y, size_t n) {
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - y[i]);
        if (!(d <= e)) e = d;
        if (fabs(y[i]) > m) m = fabs(y[i]);
    }
    return m > 0 ? e / m : e;
}

static const tern_isa g_isas[4] = {TERN_ISA_SCALAR, TERN_ISA_AVX2, TERN_ISA_AVX512, TERN_ISA_NEON};

/* ---------------------------------------------------------------- attention */

typedef struct { int rows, pos0, n_head, n_kv, hd; } acase;

/* The test's own reading of a stored cache row (kernels.h's layouts), independent of
 * the kernels' converters: f16 through tern_f16_to_f32 (core), bf16 by the bit shift,
 * q8_0 block by block. */
static void kv_deq(tern_kv_type t, const uint8_t *row, size_t n, float *out) {
    for (size_t j = 0; j < n; j++) {
        uint16_t h;
        if (t == TERN_KV_F32) {
            memcpy(&out[j], row + 4 * j, 4);
        } else if (t == TERN_KV_F16) {
            memcpy(&h, row + 2 * j, 2);
            out[j] = tern_f16_to_f32(h);
        } else if (t == TERN_KV_BF16) {
            memcpy(&h, row + 2 * j, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(&out[j], &u, 4);
        } else {
            const uint8_t *b = row + j / 32 * 34;
            memcpy(&h, b, 2);
            out[j] = tern_f16_to_f32(h) * (float)(int8_t)b[2 + j % 32];
        }
    }
}

/* float64 attention over float caches kc/vc [n][kvw] */
static void attn_reference(const tern_attn_args *a, const float *kc, const float *vc, double *out) {
    const int group = a->n_head / a->n_head_kv, hd = a->head_dim, n = a->pos0 + a->rows;
    const size_t kvw = (size_t)a->n_head_kv * hd;
    double *s = malloc(sizeof(double) * n);
    for (int i = 0; i < a->rows; i++)
        for (int h = 0; h < a->n_head; h++) {
            const float *q = a->q + i * a->q_stride + (size_t)h * hd;
            const int kvh = h / group, np = a->pos0 + i + 1;
            double mx = -INFINITY, sum = 0;
            for (int p = 0; p < np; p++) {
                double d = 0;
                for (int j = 0; j < hd; j++) d += (double)q[j] * kc[p * kvw + (size_t)kvh * hd + j];
                s[p] = d * a->scale;
                if (s[p] > mx) mx = s[p];
            }
            for (int p = 0; p < np; p++) sum += (s[p] = exp(s[p] - mx));
            double *o = out + ((size_t)i * a->n_head + h) * hd;
            for (int j = 0; j < hd; j++) {
                double y = 0;
                for (int p = 0; p < np; p++) y += s[p] * vc[p * kvw + (size_t)kvh * hd + j];
                o[j] = y / sum;
            }
        }
    free(s);
}

static const char *const g_kv_names[4] = {"f32", "f16", "bf16", "q8_0"};

/* Every ISA and thread count, every key x value cache type (q8_0 where head_dim is a
 * multiple of 32): against float64 over the dequantised stored values (the kernel must
 * compute on exactly what was stored: bound as for f32), and against the reference
 * build. */
TEST(attention_matches_reference) {
    tern_kernels_init();
    const tern_isa best = tern_kernels_isa();
    const acase cases[] = {{1, 0, 1, 1, 1},   {3, 5, 4, 2, 7},    {17, 0, 6, 3, 16},
                           {2, 40, 8, 2, 33}, {5, 11, 8, 8, 128}, {1, 40, 16, 4, 128},
                           {9, 3, 2, 1, 48},  {4, 37, 4, 2, 32},  {2, 90, 6, 1, 256},
                           {1, 200, 2, 2, 64}};
    tern_pool *pools[3] = {NULL, NULL, NULL};
    CHECK(tern_pool_new(2, &pools[1]) == TERN_OK && tern_pool_new(3, &pools[2]) == TERN_OK);
    tern_pool_set_adaptive(pools[1], false); /* every run shared: the parallel paths under test */
    tern_pool_set_adaptive(pools[2], false);
    double worst = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const acase g = cases[c];
        const int n = g.pos0 + g.rows, w = g.n_head * g.hd, kvw = g.n_kv * g.hd;
        const size_t qs = (size_t)w + 5, on = (size_t)g.rows * w;
        float *q = malloc(sizeof(float) * g.rows * qs), *kc = malloc(sizeof(float) * n * kvw);
        float *vc = malloc(sizeof(float) * n * kvw), *sc = malloc(sizeof(float) * g.n_head * n);
        float *kd = malloc(sizeof(float) * n * kvw), *vd = malloc(sizeof(float) * n * kvw);
        uint8_t *ks = malloc((size_t)n * kvw * 4), *vs = malloc((size_t)n * kvw * 4);
        float *ref_out = malloc(sizeof(float) * on), *out = malloc(sizeof(float) * on);
        double *r = malloc(sizeof(double) * on);
        for (size_t i = 0; i < g.rows * qs; i++) q[i] = srand1(2.0f);
        for (int i = 0; i < n * kvw; i++) kc[i] = srand1(2.0f), vc[i] = srand1(1.0f);
        for (int kt = 0; kt < 4; kt++)
            for (int vt = 0; vt < 4; vt++) {
                if ((kt == TERN_KV_Q8_0 || vt == TERN_KV_Q8_0) && g.hd % 32) continue;
                const size_t kr = tern_kv_row_bytes(kt, kvw), vr = tern_kv_row_bytes(vt, kvw);
                tern_kv_store(kt, ks, kr, kc, kvw, n, kvw);
                tern_kv_store(vt, vs, vr, vc, kvw, n, kvw);
                for (int p = 0; p < n; p++) {
                    kv_deq(kt, ks + p * kr, kvw, kd + (size_t)p * kvw);
                    kv_deq(vt, vs + p * vr, kvw, vd + (size_t)p * kvw);
                }
                tern_attn_args a = {.q = q, .q_stride = qs, .kcache = ks, .vcache = vs,
                                    .k_type = kt, .v_type = vt, .out = out,
                                    .rows = g.rows, .pos0 = g.pos0, .n_head = g.n_head,
                                    .n_head_kv = g.n_kv, .head_dim = g.hd,
                                    .scale = 1.0f / sqrtf((float)g.hd), .scratch = sc};
                attn_reference(&a, kd, vd, r);
                /* the reference build of the per-head loop, every head */
                tern_attn_args ar = a;
                ar.out = ref_out;
                for (int h = 0; h < g.n_head; h++) tern_attn_head_ref(&ar, h);
                CHECK_MSG(rel_err(ref_out, r, on) < 2e-5, "reference loop, case %zu %s/%s: %.3g", c,
                          g_kv_names[kt], g_kv_names[vt], rel_err(ref_out, r, on));
                for (int ii = 0; ii < 4; ii++) {
                    if (!tern_kernels_force(g_isas[ii])) continue;
                    float *first = NULL;
                    for (int pi = 0; pi < 3; pi++) {
                        memset(out, 0xff, sizeof(float) * on); /* NaN: every output must be written */
                        tern_attention(&a, pools[pi]);
                        double e = rel_err(out, r, on), er = rel_err_f(out, ref_out, on);
                        if (e > worst) worst = e;
                        CHECK_MSG(e < 2e-5 && er < 1e-5,
                                  "%s threads %d case %zu %s/%s: vs f64 %.3g, vs ref %.3g",
                                  tern_isa_name(g_isas[ii]), pi + 1, c, g_kv_names[kt],
                                  g_kv_names[vt], e, er);
                        if (!first) {
                            first = malloc(sizeof(float) * on);
                            memcpy(first, out, sizeof(float) * on);
                        } else {
                            CHECK_MSG(!memcmp(first, out, sizeof(float) * on), "%s: threads %d differ",
                                      tern_isa_name(g_isas[ii]), pi + 1);
                        }
                    }
                    free(first);
                }
            }
        free(q), free(kc), free(vc), free(sc), free(ref_out), free(out), free(r);
        free(kd), free(vd), free(ks), free(vs);
    }
    fprintf(stderr, "  attention: worst rel err %.2g\n", worst);
    tern_kernels_force(best);
    tern_pool_free(pools[1]);
    tern_pool_free(pools[2]);
}

/* tern_kv_store: f16 / bf16 are the nearest representable value (checked against the
 * neighbours in float64, ties aside), q8_0 blocks have d = fp16(amax/127) and every
 * value within d/2 of x (plus the clamp at +-127 d), on awkward data: zeros, tiny
 * values (f16 subnormals), a block of one outlier, large magnitudes. */
TEST(kv_store_rounds_correctly) {
    enum { N = 32 * 9 };
    float x[N], y[N];
    uint8_t buf[N * 4];
    for (int i = 0; i < N; i++) {
        int b = i / 32;
        x[i] = b == 0 ? 0.0f : b == 1 ? srand1(1e-6f) : b == 2 ? (i == 70 ? 300.0f : srand1(1e-3f))
               : b == 3 ? srand1(60000.0f) : srand1(3.0f);
    }
    /* f16 / bf16: |x - y| <= |x - any neighbour of y| */
    for (int t = 1; t <= 2; t++) {
        tern_kv_store(t, buf, 0, x, 0, 1, N);
        kv_deq(t, buf, N, y);
        for (int i = 0; i < N; i++) {
            uint16_t h;
            memcpy(&h, buf + 2 * i, 2);
            float lo, hi;
            uint8_t nb[2];
            uint16_t hl = (uint16_t)(h - 1), hh = (uint16_t)(h + 1);
            memcpy(nb, &hl, 2), kv_deq(t, nb, 1, &lo);
            memcpy(nb, &hh, 2), kv_deq(t, nb, 1, &hi);
            double e = fabs((double)x[i] - y[i]);
            bool ok = (e <= fabs((double)x[i] - lo) || !isfinite(lo)) &&
                      (e <= fabs((double)x[i] - hi) || !isfinite(hi));
            CHECK_MSG(ok, "%s value %d: %.9g stored as %.9g", g_kv_names[t], i, x[i], y[i]);
        }
    }
    tern_kv_store(TERN_KV_Q8_0, buf, 0, x, 0, 1, N);
    CHECK(tern_kv_row_bytes(TERN_KV_Q8_0, N) == N / 32 * 34 && tern_kv_row_bytes(TERN_KV_Q8_0, 33) == 0);
    kv_deq(TERN_KV_Q8_0, buf, N, y);
    for (int b = 0; b < N / 32; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        uint16_t h;
        memcpy(&h, buf + b * 34, 2);
        float d = tern_f16_to_f32(h);
        CHECK_MSG(h == tern_f32_to_f16(amax / 127.0f), "q8_0 block %d: scale %g for amax %g", b, d, amax);
        for (int j = 0; j < 32; j++) {
            double xi = x[b * 32 + j], e = fabs(xi - y[b * 32 + j]);
            double lim = fabs(xi) > 127.0 * d ? fabs(xi) - 127.0 * d + 1e-7 : 0.5 * d * (1 + 1e-6);
            CHECK_MSG(e <= lim, "q8_0 block %d value %d: %.9g stored as %.9g (d %g)", b, j, xi,
                      y[b * 32 + j], d);
        }
    }
    /* tern_kv_load reads what the test reads */
    float z[N];
    for (int t = 0; t < 4; t++) {
        tern_kv_store(t, buf, 0, x, 0, 1, N);
        kv_deq(t, buf, N, y);
        tern_kv_load(t, buf, N, z);
        CHECK_MSG(!memcmp(y, z, sizeof y), "tern_kv_load %s", g_kv_names[t]);
    }
}

/* --------------------------------------------------------------------- RoPE */

TEST(rope_matches_reference) {
    tern_kernels_init();
    const tern_isa best = tern_kernels_isa();
    const struct { int rows, n_heads, hd, rot, pos0; float theta; } cases[] = {
        {1, 1, 2, 2, 0, 10000.0f},   {3, 4, 7, 6, 5, 10000.0f},     {9, 2, 64, 64, 100, 1e6f},
        {2, 8, 256, 64, 30000, 1e7f}, {5, 3, 33, 16, 1, 500000.0f},
        /* the trained context of the qwen35 models (262,144): head 256, 64 rotary dims,
         * theta 1e7, the last positions; and a full-rotary head at 1e6 */
        {3, 4, 256, 64, 262141, 1e7f}, {2, 2, 128, 128, 262142, 1e6f}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int rows = cases[c].rows, nh = cases[c].n_heads, hd = cases[c].hd,
                  rot = cases[c].rot, half = rot / 2;
        const size_t stride = (size_t)nh * hd + 3, n = rows * stride;
        float *x0 = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n);
        double *r = malloc(sizeof(double) * n);
        for (size_t i = 0; i < n; i++) r[i] = x0[i] = srand1(3.0f);
        for (int t = 0; t < rows; t++)
            for (int h = 0; h < nh; h++) {
                double *v = r + t * stride + (size_t)h * hd;
                for (int i = 0; i < half; i++) {
                    /* qwen35's multimodal sections ([11, 11, 10] pairs for t/h/w) each take
                     * their own position id; text tokens have all three equal, so every
                     * pair turns by the token position: the plain rotation below */
                    const int sec = rot == 64 ? (i < 11 ? 0 : i < 22 ? 1 : 2) : 0;
                    const double pos_sec[3] = {cases[c].pos0 + t, cases[c].pos0 + t, cases[c].pos0 + t};
                    double ang = pos_sec[sec] * pow(cases[c].theta, -2.0 * i / rot);
                    double a0 = v[i], a1 = v[i + half];
                    v[i] = a0 * cos(ang) - a1 * sin(ang);
                    v[i + half] = a1 * cos(ang) + a0 * sin(ang);
                }
            }
        for (int ii = 0; ii < 4; ii++) {
            if (!tern_kernels_force(g_isas[ii])) continue;
            memcpy(x, x0, sizeof(float) * n);
            tern_rope(x, rows, stride, nh, hd, rot, cases[c].pos0, cases[c].theta, NULL);
            double e = rel_err(x, r, n);
            CHECK_MSG(e < 1e-6, "%s case %zu: %.3g", tern_isa_name(g_isas[ii]), c, e);
            /* dims past rot and the stride's gap are untouched */
            bool same = true;
            for (int t = 0; t < rows; t++) {
                for (int h = 0; h < nh; h++)
                    for (int j = rot; j < hd; j++) {
                        size_t o = t * stride + (size_t)h * hd + j;
                        same = same && !memcmp(&x[o], &x0[o], 4);
                    }
                for (size_t o = t * stride + (size_t)nh * hd; o < (t + 1) * stride; o++)
                    same = same && !memcmp(&x[o], &x0[o], 4);
            }
            CHECK_MSG(same, "%s case %zu: wrote outside the rotary dims", tern_isa_name(g_isas[ii]), c);
        }
        free(x0), free(x), free(r);
    }
    tern_kernels_force(best);
}

/* ---------------------------------------------------------------- head norm */

TEST(head_rmsnorm_matches_reference) {
    tern_kernels_init();
    const tern_isa best = tern_kernels_isa();
    tern_pool *pools[3] = {NULL, NULL, NULL};
    CHECK(tern_pool_new(2, &pools[1]) == TERN_OK && tern_pool_new(3, &pools[2]) == TERN_OK);
    tern_pool_set_adaptive(pools[1], false); /* every run shared: the parallel paths under test */
    tern_pool_set_adaptive(pools[2], false);
    const struct { int rows, n_heads, hd; } cases[] = {{1, 1, 1}, {1, 3, 7}, {4, 2, 128},
                                                       {17, 5, 33}, {2, 16, 256}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int rows = cases[c].rows, nh = cases[c].n_heads, hd = cases[c].hd;
        const size_t stride = (size_t)nh * hd + 9, n = rows * stride;
        const float eps = 1e-6f;
        float *x0 = malloc(sizeof(float) * n), *x = malloc(sizeof(float) * n);
        float *first = malloc(sizeof(float) * n), *gain = malloc(sizeof(float) * hd);
        double *r = malloc(sizeof(double) * n);
        for (size_t i = 0; i < n; i++) r[i] = x0[i] = srand1(4.0f) * (i % 5 ? 1.0f : 30.0f);
        for (int j = 0; j < hd; j++) gain[j] = 1.0f + srand1(0.5f);
        for (int t = 0; t < rows; t++)
            for (int h = 0; h < nh; h++) {
                double *v = r + t * stride + (size_t)h * hd, ss = 0;
                for (int j = 0; j < hd; j++) ss += v[j] * v[j];
                double inv = 1.0 / sqrt(ss / hd + eps);
                for (int j = 0; j < hd; j++) v[j] *= inv * gain[j];
            }
        for (int ii = 0; ii < 4; ii++) {
            if (!tern_kernels_force(g_isas[ii])) continue;
            for (int pi = 0; pi < 3; pi++) {
                memcpy(x, x0, sizeof(float) * n);
                tern_head_rmsnorm(x, rows, stride, nh, hd, gain, eps, pools[pi]);
                double e = rel_err(x, r, n);
                CHECK_MSG(e < 1e-6, "%s threads %d case %zu: %.3g", tern_isa_name(g_isas[ii]),
                          pi + 1, c, e);
                if (pi == 0) memcpy(first, x, sizeof(float) * n);
                else CHECK_MSG(!memcmp(first, x, sizeof(float) * n), "threads %d differ", pi + 1);
            }
        }
        free(x0), free(x), free(first), free(gain), free(r);
    }
    tern_kernels_force(best);
    tern_pool_free(pools[1]);
    tern_pool_free(pools[2]);
}

/* The table: the GDN block-scan threshold per ISA. */
TEST(gdn_block_threshold_per_isa) {
    tern_kernels_init();
    const tern_isa best = tern_kernels_isa();
    for (int ii = 0; ii < 4; ii++) {
        if (!tern_kernels_force(g_isas[ii])) continue;
        const bool fma = g_isas[ii] == TERN_ISA_AVX2 || g_isas[ii] == TERN_ISA_AVX512;
        CHECK_EQ_INT(tern_gdn_block_min(), fma ? TERN_GDN_BLOCK_MIN_FMA : 0);
    }
    tern_kernels_force(best);
}

int main(void) {
    RUN(attention_matches_reference);
    RUN(kv_store_rounds_correctly);
    RUN(rope_matches_reference);
    RUN(head_rmsnorm_matches_reference);
    RUN(gdn_block_threshold_per_isa);
    return check_summary();
}
