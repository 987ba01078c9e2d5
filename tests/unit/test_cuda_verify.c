/*
 * test_cuda_verify.c - the verify step's multi-row kernels (a speculative draft of R
 * tokens checked in one step of one sequence) against the decode step's kernels run
 * once per row, bit for bit:
 *  - attention: tc_attn_prep_rows + tc_attention_decode_rows (one launch per op for the R
 *    rows at positions pos0..pos0+R-1) vs tc_attn_prep + tc_attention_decode per row:
 *    q, gate, both caches and the outputs; f32 / f16 / q8_0 caches, the 27B's heads
 *    (GQA kernel, gated) and a head size the GQA kernel does not take (the old kernels);
 *  - GDN: tc_gdn_step with .rows = R vs R calls of one row (the state advanced by each):
 *    outputs, the quantised activation's bytes, the recurrent state (fp32 and bf16) and
 *    the conv state; the 27B's heads with the a/b projections, the output transform
 *    across a cluster and the quantised activation in the kernel, and awkward shapes
 *    (conv 2 and 3, dk 36, dv 52, a shape the one-kernel step does not take).
 * Bitwise, because a verify row must give the logits the decode step gives (greedy
 * speculation accepts a token only where the decode step would have chosen it). The
 * decode kernels themselves are checked against float64 in test_cuda_kernels.c,
 * test_cuda_gdn.c and test_cuda_attn.c. Without a CUDA build or device: skipped.
 */
#include "check.h"
#include "core/common.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(TERN_HAVE_CUDA)
#include "kernels/cuda/lab.h"

static int g_gpu;
static tc_ctx *g_tc;
#define NEED_GPU() do { if (!g_gpu) SKIP("no CUDA device"); } while (0)

static void *dup_dev(const void *h, size_t n) {
    void *d = tc_malloc(g_tc, n);
    CHECK(d != NULL);
    if (d) CHECK(tc_upload(g_tc, d, h, n) == 0);
    return d;
}
static float *dev_rand(float *h, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) h[i] = check_rand_normal() * scale;
    return dup_dev(h, n * 4);
}
/* n bytes at device a and b equal? */
static int dev_same(const void *a, const void *b, size_t n) {
    uint8_t *x = malloc(n), *y = malloc(n);
    CHECK(tc_download(g_tc, x, a, n) == 0 && tc_download(g_tc, y, b, n) == 0);
    const int same = memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return same;
}

/* R query rows of one sequence at pos0.. over a cache of ctx positions (positions below
 * pos0 filled): the rows' prologue and attention in one launch each vs row by row. */
TEST(attention_rows_vs_rows_alone) {
    NEED_GPU();
    /* nh nkv hd rope gated */
    const int shapes[][5] = {{24, 4, 256, 64, 1}, {8, 2, 128, 128, 0}, {6, 3, 96, 32, 1}};
    const int types[] = {TC_KV_F32, TC_KV_F16, TC_KV_Q8_0};
    const int rows_pos[][2] = {{1, 0}, {2, 37}, {5, 290}, {8, 1000}};
    const int ctx = 1024 + 16;
    for (int s = 0; s < 3; s++)
        for (int ti = 0; ti < 3; ti++)
            for (int rp = 0; rp < 4; rp++) {
                const int nh = shapes[s][0], nkv = shapes[s][1], hd = shapes[s][2], rot = shapes[s][3];
                const int gated = shapes[s][4], t = types[ti], R = rows_pos[rp][0], pos0 = rows_pos[rp][1];
                const size_t qw = (size_t)nh * hd, kvw = (size_t)nkv * hd, qgw = gated ? 2 * qw : qw;
                const size_t rb = tern_kv_row_bytes((tern_kv_type)t, kvw), cb = (size_t)ctx * rb;
                float *h = malloc(((size_t)ctx * kvw > (size_t)R * qgw ? (size_t)ctx * kvw : (size_t)R * qgw) * 4);
                /* the caches: positions 0..ctx-1 stored from random rows, then copied */
                float *fk = dev_rand(h, (size_t)ctx * kvw, 1.0f), *fv = dev_rand(h, (size_t)ctx * kvw, 1.0f);
                void *kc[2], *vc[2];
                for (int c = 0; c < 2; c++) {
                    kc[c] = tc_malloc(g_tc, cb);
                    vc[c] = tc_malloc(g_tc, cb);
                }
                tc_kv_store(g_tc, kc[0], vc[0], t, t, fk, fv, kvw, (size_t)ctx, 0);
                tc_kv_store(g_tc, kc[1], vc[1], t, t, fk, fv, kvw, (size_t)ctx, 0);
                float *qg = dev_rand(h, (size_t)R * qgw, 1.0f), *dk = dev_rand(h, (size_t)R * kvw, 1.0f);
                float *dv = dev_rand(h, (size_t)R * kvw, 1.0f);
                float *qn = dev_rand(h, (size_t)hd, 1.0f), *kn = dev_rand(h, (size_t)hd, 1.0f);
                float *q[2], *g[2], *o[2];
                for (int c = 0; c < 2; c++) {
                    q[c] = tc_malloc(g_tc, (size_t)R * qw * 4);
                    g[c] = tc_malloc(g_tc, (size_t)R * qw * 4);
                    o[c] = tc_malloc(g_tc, (size_t)R * qw * 4);
                }
                const float scale = 1.0f / sqrtf((float)hd);
                tc_attn_prep_args a = {.qg = qg, .k = dk, .v = dv, .gated = gated, .q_norm = qn, .k_norm = kn,
                                       .eps = 1e-6f, .theta = 1e7f, .q_out = q[0], .gate_out = gated ? g[0] : NULL,
                                       .kcache = kc[0], .vcache = vc[0], .pos0 = pos0, .n_head = nh,
                                       .n_head_kv = nkv, .head_dim = hd, .rope_dims = rot, .k_type = t, .v_type = t};
                const tc_attn_bat st = {.qg_stride = qgw, .kv_stride = kvw, .q_stride = qw};
                tc_launches_reset(g_tc);
                tc_attn_prep_rows(g_tc, &a, R, &st);
                tc_attention_decode_rows(g_tc, q[0], kc[0], vc[0], t, t, gated ? g[0] : NULL, o[0], R, qw, pos0,
                                         ctx, nh, nkv, hd, scale);
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                const int gqa = tc_attn_decode_gqa(g_tc, t, t, kc[0], vc[0], ctx, nh, nkv, hd);
                if (gqa) /* the prologue, the attention, its merge: one launch each for all the rows */
                    CHECK_MSG(tc_launches(g_tc) == 3, "shape %d type %d R %d: %llu launches", s, t, R,
                              (unsigned long long)tc_launches(g_tc));
                for (int r = 0; r < R; r++) {
                    tc_attn_prep_args b = a;
                    b.qg = qg + (size_t)r * qgw;
                    b.k = dk + (size_t)r * kvw;
                    b.v = dv + (size_t)r * kvw;
                    b.q_out = q[1] + (size_t)r * qw;
                    b.gate_out = gated ? g[1] + (size_t)r * qw : NULL;
                    b.kcache = kc[1];
                    b.vcache = vc[1];
                    b.pos0 = pos0 + r;
                    tc_attn_prep(g_tc, &b);
                    tc_attention_decode(g_tc, b.q_out, kc[1], vc[1], t, t, b.gate_out, o[1] + (size_t)r * qw,
                                        pos0 + r, ctx, nh, nkv, hd, scale);
                }
                CHECK_EQ_INT(tc_sync(g_tc), 0);
                CHECK_MSG(dev_same(q[0], q[1], (size_t)R * qw * 4), "shape %d type %d R %d pos %d: q differs", s,
                          t, R, pos0);
                if (gated)
                    CHECK_MSG(dev_same(g[0], g[1], (size_t)R * qw * 4), "shape %d type %d R %d: gate differs", s,
                              t, R);
                CHECK_MSG(dev_same(kc[0], kc[1], cb) && dev_same(vc[0], vc[1], cb),
                          "shape %d type %d R %d pos %d: caches differ", s, t, R, pos0);
                CHECK_MSG(dev_same(o[0], o[1], (size_t)R * qw * 4),
                          "shape %d type %d R %d pos %d (gqa %d): attention differs", s, t, R, pos0, gqa);
                /* the output is not all zeros (a kernel that wrote nothing would pass the above
                 * only if both did; this catches both) */
                float *ho = malloc((size_t)R * qw * 4);
                CHECK(tc_download(g_tc, ho, o[0], (size_t)R * qw * 4) == 0);
                double mx = 0;
                for (size_t i = 0; i < (size_t)R * qw; i++) mx = fmax(mx, fabs(ho[i]));
                CHECK_MSG(mx > 1e-3 && isfinite(mx), "shape %d type %d R %d: output max %g", s, t, R, mx);
                free(ho);
                for (int c = 0; c < 2; c++) {
                    tc_free(g_tc, kc[c], cb); tc_free(g_tc, vc[c], cb);
                    tc_free(g_tc, q[c], (size_t)R * qw * 4); tc_free(g_tc, g[c], (size_t)R * qw * 4);
                    tc_free(g_tc, o[c], (size_t)R * qw * 4);
                }
                tc_free(g_tc, fk, (size_t)ctx * kvw * 4); tc_free(g_tc, fv, (size_t)ctx * kvw * 4);
                tc_free(g_tc, qg, (size_t)R * qgw * 4); tc_free(g_tc, dk, (size_t)R * kvw * 4);
                tc_free(g_tc, dv, (size_t)R * kvw * 4); tc_free(g_tc, qn, (size_t)hd * 4);
                tc_free(g_tc, kn, (size_t)hd * 4);
                free(h);
            }
    /* the rows past the cache and a bad stride are refused */
    tc_attention_decode_rows(g_tc, NULL, NULL, NULL, TC_KV_F32, TC_KV_F32, NULL, NULL, 4, 64, 62, 64, 1, 1, 64,
                             1.0f);
    CHECK_EQ_INT(tc_sync(g_tc), TC_ERR_UNSUPPORTED);
    tc_attention_decode_rows(g_tc, NULL, NULL, NULL, TC_KV_F32, TC_KV_F32, NULL, NULL, 2, 63, 0, 64, 1, 1, 64,
                             1.0f);
    CHECK_EQ_INT(tc_sync(g_tc), TC_ERR_UNSUPPORTED);
}

/* a dense matrix of n x k in kind (bf16 here) from h (rounded in place) */
static tc_mat dense_bf16(float *h, int64_t n, int64_t k) {
    uint16_t *b = malloc((size_t)(n * k) * 2 + 16);
    for (int64_t i = 0; i < n * k; i++) {
        b[i] = tern_f32_to_bf16(h[i]);
        h[i] = tern_bf16_to_f32(b[i]);
    }
    tc_mat m = {.kind = TC_BF16, .data = dup_dev(b, (size_t)(n * k) * 2 + 16), .n = n, .k = k,
                .row_bytes = (size_t)k * 2};
    free(b);
    return m;
}

/* One session's R rows through the GDN step in one call vs R calls of one row, from the
 * same states: every output, activation byte, state and conv-state value equal. */
TEST(gdn_rows_vs_steps) {
    NEED_GPU();
    static const struct {
        int nk, nv, dk, dv, K, tiled, grouped, block, act, ab, bf, old, R;
    } cfg[] = {
        {16, 48, 128, 128, 4, 1, 1, 1024, 1, 1, 0, 0, 5}, /* the 27B: cluster transform, act, a/b */
        {16, 48, 128, 128, 4, 1, 1, 1024, 1, 1, 1, 0, 3}, /* bf16 state */
        {16, 48, 128, 128, 4, 1, 0, 128, 1, 0, 1, 0, 8},  /* transform in the CTA, a/b given */
        {16, 48, 128, 128, 4, 1, 1, 1024, 1, 1, 0, 1, 4}, /* the two-kernel step (row after row) */
        {2, 4, 36, 52, 3, 0, 0, 0, 0, 0, 0, 0, 4},        /* awkward heads, conv 3 */
        {1, 2, 20, 8, 2, 1, 0, 0, 0, 0, 1, 0, 7},         /* conv 2, bf16 */
        {2, 4, 64, 50, 4, 0, 0, 0, 0, 0, 0, 0, 3},        /* dv % 4: not the one-kernel step */
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const int nk = cfg[c].nk, nv = cfg[c].nv, dk = cfg[c].dk, dv = cfg[c].dv, K = cfg[c].K, R = cfg[c].R;
        const int C = 2 * nk * dk + nv * dv, VW = nv * dv, E = 320, bf = cfg[c].bf;
        const size_t csn = (size_t)(K - 1) * C, stn = (size_t)nv * dk * dv, sb = stn * (bf ? 2 : 4);
        tc_set_ops_old(g_tc, cfg[c].old);
        size_t hn = stn; /* the host scratch: the largest of the arrays drawn through it */
        const size_t need[] = {(size_t)R * C, (size_t)R * E, (size_t)2 * nv * E, (size_t)C * K, csn, (size_t)VW};
        for (int k = 0; k < 6; k++) hn = need[k] > hn ? need[k] : hn;
        float *h = malloc(hn * 4);
        float *cw = dev_rand(h, (size_t)C * K, 0.5f), *sa = dev_rand(h, (size_t)nv, 1.0f);
        for (int i = 0; i < nv; i++) h[i] = -fabsf(h[i]) - 0.1f;
        CHECK(tc_upload(g_tc, sa, h, (size_t)nv * 4) == 0);
        float *dt = dev_rand(h, (size_t)nv, 0.5f), *nm = dev_rand(h, (size_t)dv, 1.0f);
        for (int i = 0; i < VW; i++) h[i] = (check_rand_u64() >> 20) & 1 ? 1.0f : -1.0f;
        float *sg = dup_dev(h, (size_t)VW * 4);
        float *dq = dev_rand(h, (size_t)R * C, 1.0f), *dz = dev_rand(h, (size_t)R * VW, 1.0f);
        float *dx = dev_rand(h, (size_t)R * E, 1.0f);
        tc_mat wab[2] = {{0}, {0}};
        if (cfg[c].ab) {
            for (size_t e = 0; e < (size_t)2 * nv * E; e++) h[e] = check_rand_normal() * 0.05f;
            wab[0] = dense_bf16(h, nv, E);
            wab[1] = dense_bf16(h + (size_t)nv * E, nv, E);
        }
        float *ab[2][2], *cs[2], *st[2], *out[2];
        void *abuf[2];
        const size_t actb = tc_act_bytes((size_t)R, VW);
        /* the initial states: random (bf16: random bits of small values), copied */
        for (size_t e = 0; e < stn; e++) h[e] = check_rand_normal() * 0.1f;
        if (bf) {
            uint16_t *hb = (uint16_t *)h; /* in place: element e's bf16 below element e's float */
            for (size_t e = 0; e < stn; e++) hb[e] = tern_f32_to_bf16(h[e]);
        }
        st[0] = dup_dev(h, sb);
        st[1] = dup_dev(h, sb);
        cs[0] = dev_rand(h, csn ? csn : 1, 1.0f);
        cs[1] = dup_dev(h, (csn ? csn : 1) * 4);
        float *ha = malloc((size_t)2 * R * nv * 4); /* a and b: given, or written by the matmul */
        for (int i = 0; i < 2 * R * nv; i++) ha[i] = check_rand_normal();
        for (int k = 0; k < 2; k++) {
            ab[k][0] = dup_dev(ha, (size_t)R * nv * 4);
            ab[k][1] = dup_dev(ha + (size_t)R * nv, (size_t)R * nv * 4);
            out[k] = tc_malloc(g_tc, (size_t)R * VW * 4);
            abuf[k] = tc_malloc(g_tc, actb);
            CHECK(tc_zero(g_tc, abuf[k], actb) == 0);
        }
        float *const *pcs[2] = {dup_dev(&cs[0], sizeof(float *)), dup_dev(&cs[1], sizeof(float *))};
        float *const *pst[2] = {dup_dev(&st[0], sizeof(float *)), dup_dev(&st[1], sizeof(float *))};
        float *work = tc_malloc(g_tc, (size_t)R * C * 4);
        for (int k = 0; k < 2; k++) {
            tc_gdn_step_args g = {.n = 1, .qkv = dq, .z = dz, .a = ab[k][0], .b = ab[k][1],
                                  .qkv_stride = (size_t)C, .z_stride = (size_t)VW, .ab_stride = (size_t)nv,
                                  .out_stride = (size_t)VW, .conv_w = cw, .ssm_a = sa, .dt_bias = dt, .norm = nm,
                                  .conv_state = pcs[k], .state = pst[k], .out = out[k], .work = work,
                                  .n_k = nk, .n_v = nv, .dk = dk, .dv = dv, .conv_k = K,
                                  .v_tiled = cfg[c].tiled, .eps = 1e-6f, .out_grouped = cfg[c].grouped,
                                  .signs = cfg[c].block ? sg : NULL, .block = cfg[c].block,
                                  .state_bf16 = bf};
            if (cfg[c].act) g.act = tc_act_view(abuf[k], (size_t)R, VW);
            if (cfg[c].ab) {
                g.ab_w[0] = wab[0];
                g.ab_w[1] = wab[1];
                g.ab_x = dx;
                g.ab_x_stride = (size_t)E;
            }
            tc_launches_reset(g_tc);
            if (k == 0) {
                g.rows = R;
                tc_gdn_step(g_tc, &g);
            } else {
                for (int r = 0; r < R; r++) {
                    tc_gdn_step_args o = g;
                    o.qkv += (size_t)r * C;
                    o.z += (size_t)r * VW;
                    o.a += (size_t)r * nv;
                    o.b += (size_t)r * nv;
                    o.out += (size_t)r * VW;
                    if (cfg[c].ab) o.ab_x += (size_t)r * E;
                    if (cfg[c].act) {
                        o.act = tc_act_view(abuf[k], (size_t)R, VW);
                        o.act.q += (size_t)r * VW * 2;
                        o.act.sx += (size_t)r * (VW / 128);
                        o.act.corr += (size_t)r * (VW / 32);
                        o.act.batch = 1;
                    }
                    tc_gdn_step(g_tc, &o);
                }
            }
            CHECK_EQ_INT(tc_sync(g_tc), 0);
            if (k == 0 && !cfg[c].old && dv % 4 == 0) /* the one-kernel step: one launch for the rows */
                CHECK_MSG(tc_launches(g_tc) == 1, "cfg %zu: %llu launches for %d rows", c,
                          (unsigned long long)tc_launches(g_tc), R);
        }
        CHECK_MSG(dev_same(out[0], out[1], (size_t)R * VW * 4), "cfg %zu: outputs differ", c);
        if (cfg[c].act) CHECK_MSG(dev_same(abuf[0], abuf[1], actb), "cfg %zu: activations differ", c);
        CHECK_MSG(dev_same(st[0], st[1], sb), "cfg %zu: states differ", c);
        if (csn) CHECK_MSG(dev_same(cs[0], cs[1], csn * 4), "cfg %zu: conv states differ", c);
        /* the rows moved the state (a call that did nothing fails here) */
        float *ho = malloc((size_t)R * VW * 4);
        CHECK(tc_download(g_tc, ho, out[0] + (size_t)(R - 1) * VW, (size_t)VW * 4) == 0);
        double mx = 0;
        for (int i = 0; i < VW; i++) mx = fmax(mx, fabs(ho[i]));
        CHECK_MSG(mx > 1e-3 && isfinite(mx), "cfg %zu: last row's output max %g", c, mx);
        free(ho);
        for (int k = 0; k < 2; k++) {
            tc_free(g_tc, st[k], sb); tc_free(g_tc, cs[k], (csn ? csn : 1) * 4);
            tc_free(g_tc, ab[k][0], (size_t)R * nv * 4); tc_free(g_tc, ab[k][1], (size_t)R * nv * 4);
            tc_free(g_tc, out[k], (size_t)R * VW * 4); tc_free(g_tc, abuf[k], actb);
            tc_free(g_tc, (void *)pcs[k], sizeof(float *)); tc_free(g_tc, (void *)pst[k], sizeof(float *));
        }
        if (cfg[c].ab)
            for (int m = 0; m < 2; m++) tc_free(g_tc, (void *)wab[m].data, (size_t)nv * E * 2 + 16);
        tc_free(g_tc, work, (size_t)R * C * 4); tc_free(g_tc, dq, (size_t)R * C * 4);
        tc_free(g_tc, dz, (size_t)R * VW * 4); tc_free(g_tc, dx, (size_t)R * E * 4);
        tc_free(g_tc, sg, (size_t)VW * 4); tc_free(g_tc, cw, (size_t)C * K * 4);
        tc_free(g_tc, sa, (size_t)nv * 4); tc_free(g_tc, dt, (size_t)nv * 4); tc_free(g_tc, nm, (size_t)dv * 4);
        free(h); free(ha);
    }
    tc_set_ops_old(g_tc, -1);
    /* rows > 1 for more than one session is refused */
    tc_gdn_step_args bad = {.n = 2, .rows = 2, .n_k = 1, .n_v = 1, .dk = 16, .dv = 16, .conv_k = 4};
    tc_gdn_step(g_tc, &bad);
    CHECK_EQ_INT(tc_sync(g_tc), TC_ERR_UNSUPPORTED);
}

int main(void) {
    check_seed();
    if (tc_device_count() > 0 && tc_ctx_new(0, &g_tc) == 0) {
        g_gpu = 1;
        fprintf(stderr, "CUDA device: %s\n", tc_device_name(g_tc));
    } else {
        fprintf(stderr, "SKIP: no CUDA device\n");
    }
    RUN(attention_rows_vs_rows_alone);
    RUN(gdn_rows_vs_steps);
    if (g_tc) tc_ctx_free(g_tc);
    return check_summary();
}
#else
int main(void) {
    fprintf(stderr, "SKIP: no CUDA device (built without CUDA)\n");
    printf("SKIPPED: built without CUDA\n");
    return 77;
}
#endif
