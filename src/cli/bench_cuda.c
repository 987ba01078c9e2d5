/*
 * bench_cuda.c - `tern bench kernels --device cuda`: the ternary GEMV on the
 * GPU for each Bonsai shape (K, N), in three rows per shape and batch:
 *   tiled   the decode GEMV on the tiled layout (tc_repack_tiled, the default), the
 *           activation quantised beforehand (as the model's fused norm sites give it:
 *           no quantise launch in the timed call);
 *   tiled+q the same with its own quantise launch (the sites without a fused norm);
 *   file    the file layout (the split-K kernel; TERN_CUDA_GEMV=t128k), with quantise;
 * (the older row repack, tc_repack, measured slower and is gone: docs/performance.md);
 * batch 1, 2, 3, 4, 6, 8, in GB/s of weight bytes read (the file's 34 B per 128) and
 * as a share of the device read ceiling measured in the same run
 * (tc_read_ceiling_gbps). Each timing rotates among copies of the matrix totalling
 * more than 256 MB, so the weights come from HBM, not from the 60 MB L2. The error
 * of sampled rows against float64 is printed and must stay below 1e-3.
 * --layout tiled|file|all (default all), --batch N (one batch size). Then the
 * tensor-core GEMM (tiled layout) at M = 16, 32, 64 and 512 on the same shapes, with
 * split-K and without, and the wgmma GEMM (tc_gemm_wg.cu, exact) beside them (or alone with
 * --gemm): bench_gemm_tc.
 * Then (or alone with --ops) the decode step's other ops at the 27B shapes, batch 1
 * and 8: bench_ops, and decode attention at positions 1,023 and 32,767 (f16, q8_0;
 * the GQA kernel vs the old ones): bench_attn_depth, and the batch step's decode attention
 * at 16 and 64 sequences: bench_attn_batch.
 * Then (or alone with --gdn) the GDN prefill call at the 27B head shape, scan vs walk:
 * bench_gdn.
 */
#include "cli/cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(TERN_HAVE_CUDA)
#include "kernels/cuda/lab.h"
#include "kernels/kernels.h"

static tc_ctx *g_tc; /* the bench's context on device 0 */


static uint64_t g_s = 0x9E3779B97F4A7C15ull;
static uint64_t rnd64(void) {
    g_s ^= g_s << 13;
    g_s ^= g_s >> 7;
    g_s ^= g_s << 17;
    return g_s;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* file-layout PQ2_0 rows: fp16 scale 0.004..0.03, codes 0..2 */
static void fill(uint8_t *buf, int64_t n, int64_t k) {
    size_t rb = (size_t)k / 128 * 34;
    for (int64_t r = 0; r < n; r++)
        for (int64_t b = 0; b < k / 128; b++) {
            uint8_t *p = buf + (size_t)r * rb + (size_t)b * 34;
            uint16_t d = tern_f32_to_f16(0.004f + 0.026f * (float)(rnd64() >> 11) * 0x1p-53f);
            memcpy(p, &d, 2);
            for (int i = 0; i < 32; i++) {
                uint64_t v = rnd64();
                uint8_t c = 0;
                for (int j = 0; j < 4; j++) c |= (uint8_t)(((v >> (16 * j)) % 3) << (2 * j));
                p[2 + i] = c;
            }
        }
}

static double row_ref(const uint8_t *buf, int64_t k, int64_t r, const float *x) {
    size_t rb = (size_t)k / 128 * 34;
    double s = 0;
    for (int64_t b = 0; b < k / 128; b++) {
        const uint8_t *p = buf + (size_t)r * rb + (size_t)b * 34;
        uint16_t dh;
        memcpy(&dh, p, 2);
        double d = tern_f16_to_f32(dh);
        for (int j = 0; j < 128; j++)
            s += (double)(((p[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d * x[b * 128 + j];
    }
    return s;
}

typedef struct { int64_t k, n; const char *what; } shape;
static const shape g_shapes[] = {
    {5120, 17408, "ffn gate/up"}, {17408, 5120, "ffn down"},  {5120, 6144, "attn q / gdn"},
    {6144, 5120, "attn/gdn out"}, {5120, 10240, "gdn qkv"},   {5120, 12288, "attn q+gate"},
    {5120, 1024, "attn k / v"}, {5120, 248320, "head"},
};

/* The tensor-core GEMM (tc_gemm_tc) on the tiled layout (the default at load) at
 * M = 16, 32, 64 (batched decode) and 512 (a prefill chunk) tokens on each Bonsai
 * shape, both modes, each twice: the split rule (mm_choose.h tc_mm_gemm_splits, the
 * default) and unsplit with the token tiles before split-K (tc_gemm_set_splits(1),
 * the model parameter cuda_matmul = "gemm_nosplit"): the before/after in one run; then
 * rows "wgmma": the Hopper kernel (tc_gemm_wg, exact mode, the split rule) on the same data.
 * Per row: the plan (tokens per CTA x K splits), time per call (rotating among copies
 * of the matrix totalling more than 256 MB, so the weights come from HBM as in a
 * step; the activation quantised once before), TOPS = 2*M*N*K / s, GB/s of weight
 * bytes (the file's 34 B per 128, read once per call), its share of the read ceiling,
 * max rel err of sampled outputs against float64 (exact mode must stay < 1e-3).
 * Text mode only; 0 = ok. */
/* one GEMM call of a bench row, rotating among the copies (for tc_bench_us's graph) */
typedef struct gemm_call {
    const tc_mat *tm;
    const tc_act *act;
    float *dy;
    int64_t n;
    int copies, next, mode, wg, lm;
} gemm_call;
static void gemm_call_fn(void *p) {
    gemm_call *g = p;
    const tc_mat *m = &g->tm[g->next];
    g->next = (g->next + 1) % g->copies;
    if (g->wg) tc_gemm_wg_ex(g_tc, m, g->act, g->dy, (size_t)g->n, g->lm);
    else tc_gemm_tc(g_tc, m, g->act, g->dy, (size_t)g->n, g->mode);
}

static int bench_gemm_tc(int reps, double ceil_gbps, size_t only_m, int only_shape) {
    static const size_t Ms_all[] = {16, 32, 64, 512};
    const size_t *Ms = only_m ? &only_m : Ms_all;
    const size_t nMs = only_m ? 1 : sizeof Ms_all / sizeof Ms_all[0];
    const size_t MM = 512;
    int bad = 0;
    printf("\ntensor-core GEMM (tc_gemm_tc), tiled layout; split = the rule, unsplit = before split-K;\n"
           "wgmma = tc_gemm_wg (exact mode: the default GEMM for tiled matrices; exact = tc_gemm_tc)\n"
           "graph_us: the same calls replayed from one CUDA graph (GPU time, no launch cost), g_ceil%%: its share;\n"
           "plan TOKxS: S K splits, TOKxskG: stream-K over G CTAs (TOKxpkG: in 2-CTA clusters;\n"
           "wgmma2 = wgmma in the clusters, lab.h TC_WG_PAIRS)\n"
           "%-6s %-14s %6s %7s %4s %-8s %-7s %9s %8s %8s %6s %9s %9s %7s\n",
           "mode", "site", "k", "n", "M", "plan", "K-split", "us/call", "TOPS", "GB/s", "ceil%", "max_err", "graph_us",
           "g_ceil%");
    for (size_t s = 0; s < sizeof g_shapes / sizeof g_shapes[0] && !bad; s++) {
        if (only_shape >= 0 && (int)s != only_shape) continue;
        const int64_t k = g_shapes[s].k, n = g_shapes[s].n;
        const size_t fb = (size_t)n * (size_t)(k / 128) * 34, yb = MM * (size_t)n * 4;
        int copies = (int)(((size_t)256 << 20) / fb) + 1;
        if (copies < 2) copies = 2;
        uint8_t *h = malloc(fb);
        float *x = malloc(MM * (size_t)k * 4), *y = malloc(yb);
        fill(h, n, k);
        for (size_t i = 0; i < MM * (size_t)k; i++) x[i] = (float)((double)(rnd64() >> 11) * 0x1p-52 - 1.0);
        tc_mat *tm = calloc((size_t)copies, sizeof *tm);
        uint8_t *d = tc_malloc(g_tc, fb + 16);
        float *dx = tc_malloc(g_tc, MM * (size_t)k * 4), *dy = tc_malloc(g_tc, yb);
        void *ab = tc_malloc(g_tc, tc_act_bytes(MM, k));
        if (!tm || !d || !dx || !dy || !ab || tc_upload(g_tc, d, h, fb) || tc_upload(g_tc, dx, x, MM * (size_t)k * 4))
            bad = 1;
        tc_mat fm = {.kind = TC_TERN128, .data = d, .n = n, .k = k, .row_bytes = fb / (size_t)n};
        for (int c = 0; c < copies && !bad; c++)
            if (tc_repack_tiled(g_tc, &fm, &tm[c])) bad = 1;
        for (size_t mi = 0; mi < nMs && !bad; mi++) {
            const size_t M = Ms[mi];
            tc_act act = tc_act_view(ab, M, k);
            tc_quantize(g_tc, dx, (size_t)k, &act);
            for (int mode = TC_GEMM_EXACT; mode <= TC_GEMM_INT8 && !bad; mode++)
                for (int old = 0; old < 4 && !bad; old++) {
                    /* old 2: the wgmma GEMM (exact mode only), its default launch (lab.h
                     * tc_gemm_wg_ex's other load modes measured the same on the H200,
                     * 2026-12-04 15:33); old 3: wgmma2, its stream-K in 2-CTA clusters
                     * (TC_WG_PAIRS: the activation multicast to row-tile pairs) */
                    const int wg = old >= 2, lm = old == 3 ? TC_WG_PAIRS : 0;
                    if (wg && mode != TC_GEMM_EXACT) continue;
                    if (wg && lm == 0 && mi == 0 && (int)s == (only_shape >= 0 ? only_shape : 0))
                        printf("(wgmma's default loads here: lmode %d = %s activation, %s weights)\n",
                               tc_gemm_wg_lmode(g_tc, &tm[0], &act, 0),
                               tc_gemm_wg_lmode(g_tc, &tm[0], &act, 0) & TC_WG_ACT_2D ? "2D-box" : "3D-TMA",
                               tc_gemm_wg_lmode(g_tc, &tm[0], &act, 0) & TC_WG_W_BULK ? "bulk-copy" : "3D-TMA");
                    tc_gemm_set_splits(g_tc, old == 1 ? 1 : 0);
                    int tok = 0, sp = 0;
                    if (wg && !tc_gemm_wg_plan(g_tc, &tm[0], &act, &tok, &sp)) {
                        if (old == 3) continue;
                        printf("%-6s %-14s %6lld %7lld %4zu refused by tc_gemm_wg (no sm_90a image?)\n", "wgmma",
                               g_shapes[s].what, (long long)k, (long long)n, M);
                        continue;
                    }
                    if (!wg) tc_gemm_plan(g_tc, &tm[0], &act, mode, &tok, &sp);
                    int pairs = 0; /* stream-K in 2-CTA clusters */
                    if (wg) pairs = tc_gemm_wg_plan_ex(g_tc, &tm[0], &act, lm, &tok, &sp) == 2;
                    for (int c = 0; c < copies; c++)
                        if (!(wg ? tc_gemm_wg_ex(g_tc, &tm[c], &act, dy, (size_t)n, lm)
                                 : tc_gemm_tc(g_tc, &tm[c], &act, dy, (size_t)n, mode)))
                            bad = 1;
                    if (bad || tc_sync(g_tc)) { bad = 1; break; }
                    double t0 = now_s();
                    for (int r = 0; r < reps; r++)
                        for (int c = 0; c < copies; c++)
                            if (wg) tc_gemm_wg_ex(g_tc, &tm[c], &act, dy, (size_t)n, lm);
                            else tc_gemm_tc(g_tc, &tm[c], &act, dy, (size_t)n, mode);
                    if (tc_sync(g_tc)) { bad = 1; break; }
                    const double dt = (now_s() - t0) / (reps * copies);
                    tc_download(g_tc, y, dy, M * (size_t)n * 4);
                    double md = 0, mr = 0;
                    for (int i = 0; i < 48; i++) {
                        size_t b = (size_t)(rnd64() % M);
                        int64_t r = (int64_t)(rnd64() % (uint64_t)n);
                        double ref = row_ref(h, k, r, x + b * (size_t)k);
                        double dd = fabs(ref - y[b * (size_t)n + (size_t)r]);
                        if (!(dd <= md)) md = isnan(dd) ? INFINITY : dd;
                        if (fabs(ref) > mr) mr = fabs(ref);
                    }
                    double err = mr > 0 ? md / mr : md;
                    if (mode == TC_GEMM_EXACT && !(err < 1e-3)) bad = 2;
                    gemm_call gc = {tm, &act, dy, n, copies, 0, mode, wg, lm};
                    const double gus = tc_bench_us(g_tc, gemm_call_fn, &gc, copies, reps < 3 ? 3 : reps, 1);
                    if (gus <= 0) tc_sync(g_tc); /* a failed capture: noted, cleared; the column reads -1 */
                    char plan[24];
                    if (sp < 0) snprintf(plan, sizeof plan, "%dx%s%d", tok, pairs ? "pk" : "sk", -sp); /* stream-K over -sp CTAs (pk: in pairs) */
                    else snprintf(plan, sizeof plan, "%dx%d", tok, sp);
                    const double gbps = fb / dt / 1e9;
                    printf("%-6s %-14s %6lld %7lld %4zu %-8s %-7s %9.1f %8.1f %8.0f %5.1f%% %9.2e %9.1f %6.1f%%\n",
                           old == 3 ? "wgmma2" : wg ? "wgmma"
                              : mode == TC_GEMM_EXACT ? "exact" : "int8",
                           g_shapes[s].what, (long long)k, (long long)n, M, plan, old == 1 ? "unsplit" : "split", dt * 1e6,
                           2.0 * (double)M * (double)n * (double)k / dt / 1e12, gbps,
                           ceil_gbps > 0 ? 100 * gbps / ceil_gbps : 0.0, err, gus,
                           gus > 0 && ceil_gbps > 0 ? 100 * (fb / (gus * 1e-6) / 1e9) / ceil_gbps : 0.0);
                }
        }
        tc_gemm_set_splits(g_tc, 0);
        for (int c = 0; c < copies; c++)
            if (tm && tm[c].data) tc_free(g_tc, (void *)tm[c].data, tc_tiled_bytes(n, k));
        tc_free(g_tc, d, fb + 16); tc_free(g_tc, dx, MM * (size_t)k * 4); tc_free(g_tc, dy, yb);
        tc_free(g_tc, ab, tc_act_bytes(MM, k));
        free(tm); free(h); free(x); free(y);
    }
    if (bad) fprintf(stderr, "tern bench: tensor-core GEMM %s\n", bad == 2 ? "error bound broken (>= 1e-3)" : "failed (CUDA error)");
    return bad;
}

/* ------------------------------------------------------- decode-step ops
 * bench_ops: the decode step's ops other than the GEMV at the 27B shapes (bonsai2-27b:
 * hidden 5120, FFN 17408, GDN 16 key / 48 value heads of 128, conv 4, attention 24 q /
 * 4 kv heads of 256, Hadamard blocks of 1024), batch 1 and 8, each timed three ways
 * (tc_bench_us: median of `reps` rounds of 48 calls): plain launches, the 48 calls
 * replayed as one CUDA graph (what a decode step sees), and the same graph without
 * programmatic dependent launch; for the current kernels and for the fallbacks (tc_set_ops_old)
 * (the A/B in one run). Each of the 48 calls of a round uses its own buffers where the
 * model has one per layer (GDN states: 48 x 3.1 MB per session, from HBM as in a
 * step). Text only; 0 = ok. */
enum { OP_SITE, OP_SITE_NOROT, OP_GDN, OP_SWIGLU, OP_SWIGLU_NOROT, OP_HAD, OP_PREP, OP_ATTN, OP_N };
static const char *const g_op_name[OP_N] = {
    "norm site (add+rms+had+q)", "norm site, no signs", "gdn step + a/b gates", "swiglu+had+q",
    "swiglu+q, no signs", "hadamard+q (attn out)", "attn prep (q/k norm, rope, kv)",
    "attn decode (pos 1023)"};
#define OPS_L 48 /* calls per round = layers */

typedef struct ops_bufs {
    size_t rows;
    int op, k; /* k: calls so far (the layer a call uses) */
    float *r, *d, *gain, *signs, *normed, *rot, *gate, *up, *out;
    void *abuf;
    size_t abytes;
    tc_act act_e, act_f, act_v; /* 5120, 17408, 6144 wide */
    /* GDN */
    float *qkv, *z, *ab, *convw, *ssm_a, *dtb, *gnorm, *work;
    float *cs[OPS_L][8], *st[OPS_L][8];
    float **pcs[OPS_L], **pst[OPS_L];
    uint8_t *wab[OPS_L]; /* bf16 a/b gate rows, [2][48][5120] per layer */
    /* attention */
    float *qg, *kk, *vv, *qn, *kn, *q, *g;
    void *kc, *vc;
} ops_bufs;

#define E27 5120
#define F27 17408
#define NK27 16
#define NV27 48
#define D27 128
#define C27 (2 * NK27 * D27 + NV27 * D27)
#define VW27 (NV27 * D27)
#define QW27 (24 * 256)
#define KVW27 (4 * 256)
#define CTX27 4096

static void op_call(void *p) {
    ops_bufs *b = p;
    const int l = b->k++ % OPS_L;
    const size_t R = b->rows;
    switch (b->op) {
    case OP_SITE:
        tc_add_rmsnorm_hadamard_q(g_tc, b->r, b->d, b->gain, 1e-6f, b->normed, b->rot, R, E27, 1024,
                                  b->signs, &b->act_e);
        break;
    case OP_SITE_NOROT:
        tc_add_rmsnorm_hadamard_q(g_tc, b->r, b->d, b->gain, 1e-6f, b->normed, NULL, R, E27, 1024, NULL,
                                  &b->act_e);
        break;
    case OP_GDN: {
        tc_gdn_step_args g = {.n = (int)R, .qkv = b->qkv, .z = b->z, .a = b->ab, .b = b->ab + R * NV27,
                              .qkv_stride = C27, .z_stride = VW27, .ab_stride = NV27,
                              .out_stride = VW27, .conv_w = b->convw, .ssm_a = b->ssm_a,
                              .dt_bias = b->dtb, .norm = b->gnorm, .conv_state = b->pcs[l],
                              .state = b->pst[l], .out = b->out, .work = b->work, .n_k = NK27,
                              .n_v = NV27, .dk = D27, .dv = D27, .conv_k = 4, .v_tiled = 1,
                              .eps = 1e-6f, .out_grouped = 1, .signs = b->signs, .block = 1024,
                              .act = b->act_v, .ab_x = b->normed, .ab_x_stride = E27};
        for (int m = 0; m < 2; m++)
            g.ab_w[m] = (tc_mat){.kind = TC_BF16, .data = b->wab[l] + (size_t)m * NV27 * E27 * 2,
                                 .n = NV27, .k = E27, .row_bytes = (size_t)E27 * 2};
        tc_gdn_step(g_tc, &g);
        break;
    }
    case OP_SWIGLU:
        tc_swiglu_hadamard_q(g_tc, b->gate, b->up, b->out, R, F27, 1024, b->signs, &b->act_f);
        break;
    case OP_SWIGLU_NOROT:
        tc_swiglu_hadamard_q(g_tc, b->gate, b->up, b->out, R, F27, 1024, NULL, &b->act_f);
        break;
    case OP_HAD:
        tc_hadamard_q(g_tc, b->out, R, VW27, 1024, b->signs, &b->act_v);
        break;
    case OP_PREP: {
        tc_attn_prep_args a = {.qg = b->qg, .k = b->kk, .v = b->vv, .gated = 1, .q_norm = b->qn,
                               .k_norm = b->kn, .eps = 1e-6f, .theta = 1e7f, .q_out = b->q,
                               .gate_out = b->g, .kcache = b->kc, .vcache = b->vc, .pos0 = 1023,
                               .n_head = 24, .n_head_kv = 4, .head_dim = 256, .rope_dims = 64,
                               .k_type = TC_KV_F16, .v_type = TC_KV_F16};
        tc_attn_prep(g_tc, &a);
        break;
    }
    case OP_ATTN:
        tc_attention_decode(g_tc, b->q, b->kc, b->vc, TC_KV_F16, TC_KV_F16, b->g, b->out, 1023, CTX27, 24,
                            4, 256, 1.0f / 16.0f);
        break;
    }
}

static float *ops_dev(size_t n, float scale, int sign_only) {
    float *h = malloc(n * 4), *d = tc_malloc(g_tc, n * 4);
    if (!h || !d) {
        free(h);
        if (d) tc_free(g_tc, d, n * 4);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        double u = (double)(rnd64() >> 11) * 0x1p-53;
        h[i] = sign_only ? (u < 0.5 ? -1.0f : 1.0f) : (float)((2 * u - 1) * scale);
    }
    if (tc_upload(g_tc, d, h, n * 4)) {
        tc_free(g_tc, d, n * 4);
        d = NULL;
    }
    free(h);
    return d;
}

/* every buffer of every op for `rows` (1..8) rows; 0 on success */
static int ops_alloc(ops_bufs *b, size_t rows) {
    memset(b, 0, sizeof *b);
    b->rows = rows;
    const size_t R = rows;
    int bad = 0;
#define A(p, n, sc, sg) do { if (!bad && !((p) = ops_dev((n), (sc), (sg)))) bad = 1; } while (0)
    A(b->r, R * E27, 2.0f, 0); A(b->d, R * E27, 0.05f, 0); A(b->gain, E27, 1.0f, 0);
    A(b->signs, F27, 1.0f, 1); A(b->normed, R * E27, 1.0f, 0); A(b->rot, R * E27, 1.0f, 0);
    A(b->gate, R * F27, 2.0f, 0); A(b->up, R * F27, 2.0f, 0); A(b->out, R * F27, 1.0f, 0);
    A(b->qkv, R * C27, 1.0f, 0); A(b->z, R * VW27, 1.0f, 0); A(b->ab, 2 * R * NV27, 1.0f, 0);
    A(b->convw, (size_t)C27 * 4, 0.5f, 0); A(b->ssm_a, NV27, 0.5f, 0); A(b->dtb, NV27, 0.5f, 0);
    A(b->gnorm, D27, 1.0f, 0); A(b->work, R * C27, 1.0f, 0);
    A(b->qg, 2 * QW27, 1.0f, 0); A(b->kk, KVW27, 1.0f, 0); A(b->vv, KVW27, 1.0f, 0);
    A(b->qn, 256, 1.0f, 0); A(b->kn, 256, 1.0f, 0); A(b->q, QW27, 1.0f, 0); A(b->g, QW27, 1.0f, 0);
#undef A
    if (!bad) { /* ssm_a < 0 (decay < 1) */
        float h[NV27];
        for (int i = 0; i < NV27; i++) h[i] = -0.1f - (float)(rnd64() % 1000) * 1e-3f;
        if (tc_upload(g_tc, b->ssm_a, h, sizeof h)) bad = 1;
    }
    b->abytes = tc_act_bytes(R, F27);
    if (!bad && !(b->abuf = tc_malloc(g_tc, b->abytes))) bad = 1;
    if (!bad) {
        b->act_e = tc_act_view(b->abuf, R, E27);
        b->act_f = tc_act_view(b->abuf, R, F27);
        b->act_v = tc_act_view(b->abuf, R, VW27);
    }
    if (!bad) { /* f16 caches of 4096 positions, small random values */
        const size_t cb = (size_t)CTX27 * KVW27 * 2;
        uint16_t *h = malloc(cb);
        b->kc = tc_malloc(g_tc, cb);
        b->vc = tc_malloc(g_tc, cb);
        if (!h || !b->kc || !b->vc) bad = 1;
        for (size_t i = 0; h && i < cb / 2; i++)
            h[i] = tern_f32_to_f16((float)((double)(rnd64() >> 11) * 0x1p-53 - 0.5));
        if (!bad && (tc_upload(g_tc, b->kc, h, cb) || tc_upload(g_tc, b->vc, h, cb))) bad = 1;
        free(h);
    }
    const size_t csn = (size_t)3 * C27, stn = (size_t)NV27 * D27 * D27;
    for (int l = 0; l < OPS_L && !bad; l++) {
        for (size_t i = 0; i < R && !bad; i++) {
            b->cs[l][i] = tc_malloc(g_tc, csn * 4); /* zeroed: a fresh session */
            b->st[l][i] = tc_malloc(g_tc, stn * 4);
            if (!b->cs[l][i] || !b->st[l][i]) bad = 1;
        }
        const size_t wb = (size_t)2 * NV27 * E27 * 2;
        uint16_t *hw = malloc(wb);
        for (size_t e = 0; hw && e < wb / 2; e++)
            hw[e] = tern_f32_to_bf16((float)((double)(rnd64() >> 11) * 0x1p-53 - 0.5) * 0.05f);
        b->wab[l] = tc_malloc(g_tc, wb);
        if (!hw || !b->wab[l] || tc_upload(g_tc, b->wab[l], hw, wb)) bad = 1;
        free(hw);
        b->pcs[l] = tc_malloc(g_tc, R * sizeof(float *));
        b->pst[l] = tc_malloc(g_tc, R * sizeof(float *));
        if (!bad && (!b->pcs[l] || !b->pst[l] || tc_upload(g_tc, b->pcs[l], b->cs[l], R * sizeof(float *)) ||
                     tc_upload(g_tc, b->pst[l], b->st[l], R * sizeof(float *))))
            bad = 1;
    }
    return bad;
}

static void ops_free(ops_bufs *b) {
    const size_t R = b->rows;
    float **f[] = {&b->r, &b->d, &b->normed, &b->rot, &b->gate, &b->up, &b->out, &b->qkv, &b->z,
                   &b->ab, &b->work, &b->gain, &b->signs, &b->convw, &b->ssm_a, &b->dtb,
                   &b->gnorm, &b->qg, &b->kk, &b->vv, &b->qn, &b->kn, &b->q, &b->g};
    const size_t fn[] = {R * E27, R * E27, R * E27, R * E27, R * F27, R * F27, R * F27, R * C27,
                         R * VW27, 2 * R * NV27, R * C27, E27, F27, (size_t)C27 * 4, NV27, NV27,
                         D27, 2 * QW27, KVW27, KVW27, 256, 256, QW27, QW27};
    for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++)
        if (*f[i]) tc_free(g_tc, *f[i], fn[i] * 4);
    if (b->abuf) tc_free(g_tc, b->abuf, b->abytes);
    if (b->kc) tc_free(g_tc, b->kc, (size_t)CTX27 * KVW27 * 2);
    if (b->vc) tc_free(g_tc, b->vc, (size_t)CTX27 * KVW27 * 2);
    for (int l = 0; l < OPS_L; l++) {
        for (size_t i = 0; i < R; i++) {
            if (b->cs[l][i]) tc_free(g_tc, b->cs[l][i], (size_t)3 * C27 * 4);
            if (b->st[l][i]) tc_free(g_tc, b->st[l][i], (size_t)NV27 * D27 * D27 * 4);
        }
        if (b->wab[l]) tc_free(g_tc, b->wab[l], (size_t)2 * NV27 * E27 * 2);
        if (b->pcs[l]) tc_free(g_tc, b->pcs[l], R * sizeof(float *));
        if (b->pst[l]) tc_free(g_tc, b->pst[l], R * sizeof(float *));
    }
}

/* Decode attention at the 27B shape (24 q / 4 kv heads of 256, gated) at positions
 * 1,023 and 32,767, f16 and q8_0 caches, the GQA kernel (default) and the old
 * per-query-head kernels (tc_set_attn_old(1)): us per call (tc_bench_us, median of
 * `reps` rounds of 16 calls, one per layer's cache, like the model's 16 attention
 * layers: 16 caches of 32,768 positions, 2.1 GB f16 / 1.1 GB q8_0, so the K/V rows
 * come from HBM, not from L2), plain launches and as one graph, and the graph's K/V
 * bytes read per second against the read ceiling of the same run. Text only; 0 = ok. */
#define ATT_L 16
#define ATT_CTX 32768
typedef struct attn_bench {
    int k, type, pos;
    float *q, *g, *out;
    void *kc[ATT_L], *vc[ATT_L];
} attn_bench;

static void attn_call(void *p) {
    attn_bench *a = p;
    const int l = a->k++ % ATT_L;
    tc_attention_decode(g_tc, a->q, a->kc[l], a->vc[l], a->type, a->type, a->g, a->out, a->pos, ATT_CTX, 24,
                        4, 256, 1.0f / 16.0f);
}

static int bench_attn_depth(int reps) {
    const int types[2] = {TC_KV_F16, TC_KV_Q8_0}, posv[2] = {1023, 32767};
    const size_t rb[2] = {(size_t)KVW27 * 2, (size_t)KVW27 / 32 * 34}; /* bytes per row */
    const double ceil_gbps = tc_read_ceiling_gbps(g_tc, (size_t)1 << 30, 3);
    printf("\ndecode attention at the 27B shape (24 q / 4 kv heads of 256, gate), %d layers' caches of "
           "%d positions: us per call, median of %d rounds of %d calls; GB/s of K/V rows read (graph), "
           "read ceiling %.0f GB/s\n%-8s %-5s %-4s %9s %9s %9s %6s\n",
           ATT_L, ATT_CTX, reps, ATT_L, ceil_gbps, "pos", "cache", "kern", "stream", "graph", "GB/s",
           "ceil%");
    int failed = 0;
    for (int t = 0; t < 2 && !failed; t++) {
        attn_bench a;
        memset(&a, 0, sizeof a);
        a.type = types[t];
        const size_t bytes = (size_t)ATT_CTX * rb[t];
        uint8_t *h = malloc(bytes);
        a.q = ops_dev(QW27, 1.0f, 0);
        a.g = ops_dev(QW27, 1.0f, 0);
        a.out = ops_dev(QW27, 1.0f, 0);
        int bad = !h || !a.q || !a.g || !a.out;
        if (h && types[t] == TC_KV_F16) {
            uint16_t *hh = (uint16_t *)h;
            for (size_t i = 0; i < bytes / 2; i++)
                hh[i] = tern_f32_to_f16((float)((double)(rnd64() >> 11) * 0x1p-53 - 0.5));
        } else if (h) { /* q8_0 blocks: d in [0.002, 0.006), q in [-127, 127] */
            for (size_t o = 0; o < bytes; o += 34) {
                uint16_t d = tern_f32_to_f16(0.002f + (float)(rnd64() % 1000) * 4e-6f);
                memcpy(h + o, &d, 2);
                for (int i = 0; i < 32; i++) h[o + 2 + i] = (uint8_t)(int8_t)((int)(rnd64() % 255) - 127);
            }
        }
        for (int l = 0; l < ATT_L && !bad; l++) {
            a.kc[l] = tc_malloc(g_tc, bytes);
            a.vc[l] = tc_malloc(g_tc, bytes);
            if (!a.kc[l] || !a.vc[l] || tc_upload(g_tc, a.kc[l], h, bytes) || tc_upload(g_tc, a.vc[l], h, bytes))
                bad = 1;
        }
        free(h);
        if (bad || tc_sync(g_tc)) {
            fprintf(stderr, "tern bench: out of device memory for the attention caches\n");
            failed = 1;
        }
        for (int pi = 0; pi < 2 && !failed; pi++)
            for (int old = 0; old < 2 && !failed; old++) {
                double us[2];
                tc_set_attn_old(g_tc, old);
                a.pos = posv[pi];
                for (int m = 0; m < 2; m++) {
                    us[m] = tc_bench_us(g_tc, attn_call, &a, ATT_L, reps, m);
                    if (us[m] < 0 || tc_sync(g_tc)) failed = 1;
                }
                const double gbps = 2.0 * (double)(a.pos + 1) * (double)rb[t] / (us[1] * 1e3);
                printf("%-8d %-5s %-4s %9.2f %9.2f %9.1f %6.1f\n", a.pos, t ? "q8_0" : "f16",
                       old ? "old" : "gqa", us[0], us[1], gbps,
                       ceil_gbps > 0 ? 100.0 * gbps / ceil_gbps : 0.0);
            }
        tc_set_attn_old(g_tc, -1);
        for (int l = 0; l < ATT_L; l++) {
            if (a.kc[l]) tc_free(g_tc, a.kc[l], bytes);
            if (a.vc[l]) tc_free(g_tc, a.vc[l], bytes);
        }
        if (a.q) tc_free(g_tc, a.q, QW27 * 4);
        if (a.g) tc_free(g_tc, a.g, QW27 * 4);
        if (a.out) tc_free(g_tc, a.out, QW27 * 4);
    }
    if (failed) fprintf(stderr, "tern bench: decode attention: CUDA error\n");
    return failed;
}

/* The batch step's decode attention (tc_attention_decode_batch: one GQA launch and one
 * merge for all the sequences) at the 27B shape, gated: n = 16 and 64 sequences at
 * positions 460..600 (mean ~530, as `bench model -p 512`), each with its own cache of
 * ATT_L layers x ATTB_CTX positions (f16: 1.3 GB for 64 sequences per K and V), the
 * calls walking the layers like a step; f16 and q8_0 (the walks and split targets this
 * replaced: docs/performance.md, 2026-12-04). us per call
 * (stream, graph) and the graph's K/V bytes read per second against the same run's read
 * ceiling. Text only; 0 = ok. */
#define ATTB_CTX 640
#define ATTB_MAXN 64
typedef struct attnb_bench {
    int k, type, n;
    float *q, *g, *out;
    tc_attn_seq *dtab;
    size_t rb;
} attnb_bench;

static void attnb_call(void *p) {
    attnb_bench *a = p;
    tc_attn_bat bt = {.seqs = a->dtab, .kv_index = a->k++ % ATT_L, .k_row = a->rb, .v_row = a->rb,
                      .qg_stride = 2 * (size_t)QW27, .kv_stride = KVW27, .q_stride = QW27};
    tc_attention_decode_batch(g_tc, a->q, a->type, a->type, a->g, a->out, a->n, &bt, ATTB_CTX, 24, 4, 256,
                              1.0f / 16.0f);
}

static int bench_attn_batch(int reps) {
    const int types[2] = {TC_KV_F16, TC_KV_Q8_0}, ns[2] = {16, 64};
    const size_t rbs[2] = {(size_t)KVW27 * 2, (size_t)KVW27 / 32 * 34};
    const double ceil_gbps = tc_read_ceiling_gbps(g_tc, (size_t)1 << 30, 3);
    printf("\nbatched decode attention at the 27B shape (24 q / 4 kv heads of 256, gate), n sequences at "
           "positions 460..600, %d layers' caches of %d positions each: us per call, median of %d rounds of "
           "%d calls; GB/s of K/V rows read (graph), read ceiling %.0f GB/s\n%-5s %-5s %9s %9s %9s %6s\n",
           ATT_L, ATTB_CTX, reps, ATT_L, ceil_gbps, "n", "cache", "stream", "graph", "GB/s", "ceil%");
    int pos[ATTB_MAXN];
    for (int i = 0; i < ATTB_MAXN; i++) pos[i] = 460 + (i * 53) % 141;
    int failed = 0;
    for (int t = 0; t < 2 && !failed; t++) {
        attnb_bench a;
        memset(&a, 0, sizeof a);
        a.type = types[t];
        a.rb = rbs[t];
        const size_t bytes = (size_t)ATT_L * ATTB_CTX * a.rb; /* one sequence's K (or V) cache */
        void *kc[ATTB_MAXN] = {0}, *vc[ATTB_MAXN] = {0};
        tc_attn_seq tab[ATTB_MAXN];
        uint8_t *h = malloc(bytes);
        a.q = ops_dev((size_t)ATTB_MAXN * QW27, 1.0f, 0);
        a.g = ops_dev((size_t)ATTB_MAXN * QW27, 1.0f, 0);
        a.out = ops_dev((size_t)ATTB_MAXN * QW27, 1.0f, 0);
        a.dtab = tc_malloc(g_tc, sizeof tab);
        int bad = !h || !a.q || !a.g || !a.out || !a.dtab;
        if (h && types[t] == TC_KV_F16) {
            uint16_t *hh = (uint16_t *)h;
            for (size_t i = 0; i < bytes / 2; i++)
                hh[i] = tern_f32_to_f16((float)((double)(rnd64() >> 11) * 0x1p-53 - 0.5));
        } else if (h) { /* q8_0 blocks: d in [0.002, 0.006), q in [-127, 127] */
            for (size_t o = 0; o + 34 <= bytes; o += 34) {
                uint16_t d = tern_f32_to_f16(0.002f + (float)(rnd64() % 1000) * 4e-6f);
                memcpy(h + o, &d, 2);
                for (int i = 0; i < 32; i++) h[o + 2 + i] = (uint8_t)(int8_t)((int)(rnd64() % 255) - 127);
            }
        }
        for (int i = 0; i < ATTB_MAXN && !bad; i++) {
            kc[i] = tc_malloc(g_tc, bytes);
            vc[i] = tc_malloc(g_tc, bytes);
            if (!kc[i] || !vc[i] || tc_upload(g_tc, kc[i], h, bytes) || tc_upload(g_tc, vc[i], h, bytes)) bad = 1;
            tab[i] = (tc_attn_seq){.kcache = kc[i], .vcache = vc[i], .pos0 = pos[i], .n_ctx = ATTB_CTX};
        }
        free(h);
        if (!bad && tc_upload(g_tc, a.dtab, tab, sizeof tab)) bad = 1;
        if (bad || tc_sync(g_tc)) {
            fprintf(stderr, "tern bench: out of device memory for the batched attention caches\n");
            failed = 1;
        }
        for (int ni = 0; ni < 2 && !failed; ni++) {
            double us[2], kv = 0;
            a.n = ns[ni];
            for (int i = 0; i < a.n; i++) kv += 2.0 * (double)(pos[i] + 1) * (double)a.rb;
            for (int m = 0; m < 2; m++) {
                us[m] = tc_bench_us(g_tc, attnb_call, &a, ATT_L, reps, m);
                if (us[m] < 0 || tc_sync(g_tc)) failed = 1;
            }
            const double gbps = kv / (us[1] * 1e3);
            printf("%-5d %-5s %9.2f %9.2f %9.1f %6.1f\n", a.n, t ? "q8_0" : "f16", us[0], us[1], gbps,
                   ceil_gbps > 0 ? 100.0 * gbps / ceil_gbps : 0.0);
        }
        for (int i = 0; i < ATTB_MAXN; i++) {
            if (kc[i]) tc_free(g_tc, kc[i], bytes);
            if (vc[i]) tc_free(g_tc, vc[i], bytes);
        }
        if (a.dtab) tc_free(g_tc, a.dtab, sizeof tab);
        if (a.q) tc_free(g_tc, a.q, (size_t)ATTB_MAXN * QW27 * 4);
        if (a.g) tc_free(g_tc, a.g, (size_t)ATTB_MAXN * QW27 * 4);
        if (a.out) tc_free(g_tc, a.out, (size_t)ATTB_MAXN * QW27 * 4);
    }
    if (failed) fprintf(stderr, "tern bench: batched decode attention: CUDA error\n");
    return failed;
}

static int bench_ops(int reps) {
    printf("\ndecode-step ops at the 27B shapes: us per call, median of %d rounds of %d calls "
           "(stream: plain launches; graph: the calls replayed as one CUDA graph; no-pdl: that graph "
           "without programmatic dependent launch)\n%-32s %5s %-4s %9s %9s %9s\n",
           reps, OPS_L, "op", "batch", "set", "stream", "graph", "no-pdl");
    const size_t batches[2] = {1, 8};
    int failed = 0;
    for (int bi = 0; bi < 2 && !failed; bi++) {
        ops_bufs b;
        if (ops_alloc(&b, batches[bi]) || tc_sync(g_tc)) {
            fprintf(stderr, "tern bench: out of device memory for the ops at batch %zu\n", batches[bi]);
            ops_free(&b);
            return 1;
        }
        for (int op = 0; op < OP_N && !failed; op++) {
            if ((op == OP_PREP || op == OP_ATTN) && b.rows != 1) continue; /* per session */
            for (int old = 0; old < 2 && !failed; old++) {
                double us[3];
                tc_set_ops_old(g_tc, old);
                tc_set_attn_old(g_tc, op == OP_ATTN ? old : -1); /* attn decode: GQA vs old kernels */
                b.op = op;
                for (int m = 0; m < 3; m++) {
                    tc_set_pdl(g_tc, m == 2 ? 0 : 1);
                    us[m] = tc_bench_us(g_tc, op_call, &b, OPS_L, reps, m > 0);
                    if (us[m] < 0 || tc_sync(g_tc)) failed = 1;
                }
                tc_set_pdl(g_tc, 1);
                printf("%-32s %5zu %-4s %9.2f %9.2f %9.2f\n", g_op_name[op], b.rows, old ? "old" : "new",
                       us[0], us[1], us[2]);
            }
        }
        tc_set_ops_old(g_tc, -1);
        tc_set_attn_old(g_tc, -1);
        ops_free(&b);
    }
    if (failed) fprintf(stderr, "tern bench: decode ops: CUDA error\n");
    if (!failed) failed = bench_attn_depth(reps);
    if (!failed) failed = bench_attn_batch(reps);
    return failed;
}

/* tc_gdn, the GDN prefill call (conv + L2, the delta rule, gated norm), at the 27B head
 * shape (16 k / 48 v heads of 128, conv 4) for 64 and 512 rows: the older walk
 * (tc_gdn_config(0, ..)), the scan (tc_gdn_scan.cu) in its default shape and in three
 * others (rows per thread x warps per CTA), and the chunked form on tensor cores
 * (tc_gdn_config(2, ..), tc_gdn_chunk.cu). us per call: calls queued back to back (the
 * state carries over), mean of 8*reps after a first call. max_diff: the scan's output
 * against the walk's from the same state, relative to the largest (bound 1e-3; the test
 * gdn_chunk_vs_f64_and_walk holds both to 1e-4 of float64). Text mode only; 0 = ok. */
static int bench_gdn(int reps) {
    const int nk = 16, nv = 48, dk = 128, dv = 128, K = 4, TM = 512;
    const int C = 2 * nk * dk + nv * dv, VW = nv * dv;
    const size_t csn = (size_t)(K - 1) * C, stn = (size_t)nv * dk * dv;
    static const struct { int path, rpt, wpc; const char *what; } var[] = {
        {0, 0, 0, "walk"}, {1, 0, 0, "scan"}, {1, 32, 4, "scan 32x4"}, {1, 32, 8, "scan 32x8"},
        {1, 16, 0, "scan 16x4"}, {2, 0, 0, "chunk tc"}};
    const size_t nvar = sizeof var / sizeof var[0];
    const size_t nq = (size_t)TM * C, nz = (size_t)TM * VW, nab = (size_t)TM * nv;
    const size_t big = nq > stn ? nq : stn;
    float *h = malloc(big * 4), *ref = malloc(nz * 4), *got = malloc(nz * 4);
    /* 0 qkv, 1 z, 2 a, 3 b, 4 conv_w, 5 ssm_a, 6 dt_bias, 7 norm, 8/9 the conv and
     * recurrent states, 10/11 their starting copies */
    float *d[12] = {0};
    const size_t n[12] = {nq, nz, nab, nab, (size_t)C * K, (size_t)nv, (size_t)nv, (size_t)dv,
                          csn, stn, csn, stn};
    int bad = !h || !ref || !got;
    for (int i = 0; i < 12 && !bad; i++) {
        for (size_t e = 0; e < n[i]; e++) {
            const double u = (double)(rnd64() >> 11) * 0x1p-53 * 2.0 - 1.0;
            h[e] = (float)(i == 5 ? -0.1 - 2.0 * fabs(u) : i == 9 || i == 11 ? 0.1 * u : u);
        }
        d[i] = tc_malloc(g_tc, n[i] * 4);
        if (!d[i] || tc_upload(g_tc, d[i], h, n[i] * 4)) bad = 1;
    }
    float *work = tc_malloc(g_tc, nq * 4), *out = tc_malloc(g_tc, nz * 4);
    if (!work || !out) bad = 1;
    if (!bad)
        printf("\nGDN prefill (tc_gdn), 27B heads: %d k / %d v heads of %d, conv %d\n"
               "%-10s %5s %10s %10s %10s\n",
               nk, nv, dk, K, "path", "rows", "us/call", "us/token", "max_diff");
    const int rows[2] = {64, 512};
    for (int ri = 0; ri < 2 && !bad; ri++) {
        const int T = rows[ri];
        tc_gdn_args g = {.qkv = d[0], .z = d[1], .a = d[2], .b = d[3], .conv_w = d[4],
                         .ssm_a = d[5], .dt_bias = d[6], .norm = d[7], .conv_state = d[8],
                         .state = d[9], .out = out, .work = work, .rows = T, .n_k = nk,
                         .n_v = nv, .dk = dk, .dv = dv, .conv_k = K, .v_tiled = 1, .eps = 1e-6f};
        for (size_t v = 0; v < nvar && !bad; v++) {
            if (tc_gdn_config(g_tc, var[v].path, var[v].rpt, var[v].wpc)) {
                bad = 1;
                break;
            }
            /* one call from the starting states: its output against the walk's */
            tc_copy_rows(g_tc, d[8], csn, d[10], csn, 1, csn);
            tc_copy_rows(g_tc, d[9], stn, d[11], stn, 1, stn);
            tc_gdn(g_tc, &g);
            if (tc_sync(g_tc) || tc_download(g_tc, v ? got : ref, out, (size_t)T * VW * 4)) {
                bad = 1;
                break;
            }
            double md = 0, mr = 0;
            for (size_t e = 0; v && e < (size_t)T * VW; e++) {
                const double dd = fabs((double)got[e] - ref[e]);
                if (!(dd <= md)) md = isnan(dd) ? INFINITY : dd;
                if (fabs(ref[e]) > mr) mr = fabs(ref[e]);
            }
            const double err = mr > 0 ? md / mr : md;
            if (v && !(err < 1e-3)) bad = 2;
            const int nc = 8 * reps;
            const double t0 = now_s();
            for (int r = 0; r < nc; r++) tc_gdn(g_tc, &g);
            if (tc_sync(g_tc)) {
                bad = 1;
                break;
            }
            const double us = (now_s() - t0) / nc * 1e6;
            if (v) printf("%-10s %5d %10.1f %10.3f %10.2e\n", var[v].what, T, us, us / T, err);
            else printf("%-10s %5d %10.1f %10.3f %10s\n", var[v].what, T, us, us / T, "-");
        }
    }
    tc_gdn_config(g_tc, -1, 0, 0);
    for (int i = 0; i < 12; i++)
        if (d[i]) tc_free(g_tc, d[i], n[i] * 4);
    if (work) tc_free(g_tc, work, nq * 4);
    if (out) tc_free(g_tc, out, nz * 4);
    free(h);
    free(ref);
    free(got);
    if (bad)
        fprintf(stderr, "tern bench: GDN prefill %s\n",
                bad == 2 ? "scan differs from the walk (>= 1e-3)" : "failed (CUDA error)");
    return bad;
}

int tern_bench_kernels_cuda(int argc, char **argv) {
    bool json = false, quick = false, no_gemm = false, ops_only = false, gdn_only = false, gemm_only = false;
    int reps = 0, only_b = 0, gemm_shape = -1;
    size_t gemm_m = 0;
    const char *lay_sel = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (strcmp(argv[++i], "cuda"))
                return cli_usage_error("bench", "--device takes cpu or cuda, not '%s'", argv[i]);
        } else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--no-gemm")) no_gemm = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            int64_t v;
            if (!cli_parse_i64(argv[++i], 1, 1000, &v))
                return cli_usage_error("bench", "bad --reps '%s'", argv[i]);
            reps = (int)v;
        } else if (!strcmp(argv[i], "--layout") && i + 1 < argc) {
            lay_sel = argv[++i];
            if (strcmp(lay_sel, "all") && strcmp(lay_sel, "tiled") && strcmp(lay_sel, "file"))
                return cli_usage_error("bench", "--layout takes tiled, file or all");
        } else if (!strcmp(argv[i], "--ops")) ops_only = true;
        else if (!strcmp(argv[i], "--gdn")) gdn_only = true;
        else if (!strcmp(argv[i], "--gemm")) gemm_only = true;
        else if (!strcmp(argv[i], "--gemm-m") && i + 1 < argc) {
            int64_t v;
            if (!cli_parse_i64(argv[++i], 1, 512, &v))
                return cli_usage_error("bench", "bad --gemm-m '%s' (1..512)", argv[i]);
            gemm_m = (size_t)v;
        } else if (!strcmp(argv[i], "--gemm-shape") && i + 1 < argc) {
            const char *w = argv[++i];
            gemm_shape = -2;
            for (size_t s = 0; s < sizeof g_shapes / sizeof g_shapes[0]; s++)
                if (!strcmp(w, g_shapes[s].what)) gemm_shape = (int)s;
            if (gemm_shape < 0)
                return cli_usage_error("bench", "bad --gemm-shape '%s' (a site name of the GEMM table, e.g. 'ffn gate/up')",
                                       w);
        }
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            int64_t v;
            if (!cli_parse_i64(argv[++i], 1, 8, &v))
                return cli_usage_error("bench", "bad --batch '%s' (1..8)", argv[i]);
            only_b = (int)v;
        } else return cli_usage_error("bench", "unknown option '%s' with --device cuda", argv[i]);
    }
    if (!reps) reps = quick ? 3 : 10;
    if (tc_device_count() <= 0 || tc_ctx_new(0, &g_tc)) {
        fprintf(stderr, "tern bench: no CUDA device\n");
        return 1;
    }
    { /* the kernels called directly: the environment's model parameters applied here */
        tern_model_params mp;
        cli_model_params_from_env(&mp);
        tc_mm_set_caps(g_tc, mp.cuda_prefill == TERN_CUDA_PREFILL_INT8 ? TC_GEMM_INT8 : TC_GEMM_EXACT,
                       mp.cuda_matmul ? tc_mm_family_of(mp.cuda_matmul) : TC_MM_NONE);
        tc_set_pdl(g_tc, mp.cuda_pdl);
    }
    if (ops_only) {
        printf("tern bench kernels --device cuda --ops: %s\n", tc_device_name(g_tc));
        return bench_ops(reps < 5 ? 5 : reps * 2) ? 1 : 0;
    }
    if (gdn_only) {
        printf("tern bench kernels --device cuda --gdn: %s\n", tc_device_name(g_tc));
        return bench_gdn(reps) ? 1 : 0;
    }
    double ceil_gbps = tc_read_ceiling_gbps(g_tc, (size_t)1 << 30, 5);
    if (gemm_only) {
        printf("tern bench kernels --device cuda --gemm: %s, read ceiling %.0f GB/s (same run)\n",
               tc_device_name(g_tc), ceil_gbps);
        return bench_gemm_tc(reps, ceil_gbps, gemm_m, gemm_shape) ? 1 : 0;
    }
    if (!json)
        printf("tern bench kernels --device cuda: %s, read ceiling %.0f GB/s (same run), "
               "%d round(s) over > 256 MB of copies\n"
               "%-8s %-14s %6s %7s %5s %9s %8s %7s %9s\n",
               tc_device_name(g_tc), ceil_gbps, reps, "layout", "site", "k", "n", "batch", "us/call",
               "GB/s", "ceil%", "max_err");
    else printf("{\"device\":\"%s\",\"read_ceiling_gbps\":%.1f,\"results\":[", tc_device_name(g_tc), ceil_gbps);
    const size_t batches[] = {1, 2, 3, 4, 6, 8};
    double worst = 0;
    int first = 1, failed = 0;
    for (size_t s = 0; s < sizeof g_shapes / sizeof g_shapes[0] && !failed; s++) {
        const int64_t k = g_shapes[s].k, n = g_shapes[s].n;
        const size_t fb = (size_t)n * (size_t)(k / 128) * 34; /* bytes read per call (both layouts) */
        int copies = (int)(((size_t)256 << 20) / fb) + 1;
        if (copies < 2) copies = 2;
        uint8_t *h = malloc(fb);
        fill(h, n, k);
        tc_mat *fm = calloc((size_t)copies, sizeof *fm);
        tc_mat *tm = calloc((size_t)copies, sizeof *tm);
        const bool want_f = !strcmp(lay_sel, "all") || !strcmp(lay_sel, "file");
        const bool want_t = !strcmp(lay_sel, "all") || !strcmp(lay_sel, "tiled");
        for (int c = 0; c < copies && !failed; c++) {
            uint8_t *d = tc_malloc(g_tc, fb);
            if (!d || tc_upload(g_tc, d, h, fb)) { failed = 1; break; }
            fm[c] = (tc_mat){.kind = TC_TERN128, .data = d, .n = n, .k = k, .row_bytes = (size_t)k / 128 * 34};
            if (want_t && tc_repack_tiled(g_tc, &fm[c], &tm[c])) failed = 1;
            if (!want_f) { /* only the file copies the timing needs */
                tc_free(g_tc, d, fb);
                fm[c].data = NULL;
            }
        }
        if (failed) {
            fprintf(stderr, "tern bench: out of device memory at k %lld n %lld\n", (long long)k,
                    (long long)n);
        }
        const size_t maxb = 8;
        float *x = malloc(maxb * (size_t)k * 4), *y = malloc(maxb * (size_t)n * 4);
        for (size_t i = 0; i < maxb * (size_t)k; i++) x[i] = (float)((double)(rnd64() >> 11) * 0x1p-52 - 1.0);
        float *dx = tc_malloc(g_tc, maxb * (size_t)k * 4), *dy = tc_malloc(g_tc, maxb * (size_t)n * 4);
        if (!failed && (!dx || !dy || tc_upload(g_tc, dx, x, maxb * (size_t)k * 4))) failed = 1;
        void *abuf = tc_malloc(g_tc, tc_act_bytes(maxb, k));
        if (!abuf) failed = 1;
        /* lay 0 tiled (prequantised), 1 tiled+q, 2 file */
        for (int lay = 0; lay < 3 && !failed; lay++) {
            if ((lay < 2 && !want_t) || (lay == 2 && !want_f)) continue;
            tc_mat *mm = lay < 2 ? tm : fm;
            for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                size_t B = batches[bi], ys = (size_t)n;
                if (only_b && B != (size_t)only_b) continue;
                tc_act act = tc_act_view(abuf, B, k);
                if (lay == 0) tc_quantize(g_tc, dx, (size_t)k, &act);
#define CALL(c)                                                                    \
    do {                                                                           \
        if (lay == 0) tc_matmul_multi_q(g_tc, 1, &mm[c], &act, NULL, 0, &dy, &ys);       \
        else tc_matmul_multi(g_tc, 1, &mm[c], dx, B, (size_t)k, &dy, &ys);               \
    } while (0)
                for (int c = 0; c < copies; c++) CALL(c);
                if (tc_sync(g_tc)) { failed = 1; break; }
                double t0 = now_s();
                for (int r = 0; r < reps; r++)
                    for (int c = 0; c < copies; c++) CALL(c);
#undef CALL
                if (tc_sync(g_tc)) { failed = 1; break; }
                double dt = (now_s() - t0) / (reps * copies);
                double gbps = fb / dt / 1e9;
                /* sampled rows vs float64 */
                tc_download(g_tc, y, dy, B * (size_t)n * 4);
                double md = 0, mr = 0;
                for (size_t b = 0; b < B; b++)
                    for (int i = 0; i < 24; i++) {
                        int64_t r = (int64_t)(rnd64() % (uint64_t)n);
                        double ref = row_ref(h, k, r, x + b * (size_t)k);
                        double dd = fabs(ref - y[b * (size_t)n + (size_t)r]);
                        if (!(dd <= md)) md = isnan(dd) ? INFINITY : dd;
                        if (fabs(ref) > mr) mr = fabs(ref);
                    }
                double err = mr > 0 ? md / mr : md;
                if (!(err <= worst)) worst = err;
                const char *ln = lay == 0 ? "tiled" : lay == 1 ? "tiled+q" : "file";
                if (json)
                    printf("%s{\"layout\":\"%s\",\"site\":\"%s\",\"k\":%lld,\"n\":%lld,\"batch\":%zu,"
                           "\"us\":%.2f,\"gbps\":%.1f,\"ceiling_share\":%.3f,\"max_rel_err\":%.3g}",
                           first ? "" : ",", ln, g_shapes[s].what, (long long)k, (long long)n, B,
                           dt * 1e6, gbps, ceil_gbps > 0 ? gbps / ceil_gbps : 0.0, err);
                else
                    printf("%-8s %-14s %6lld %7lld %5zu %9.2f %8.0f %6.1f%% %9.2e\n", ln,
                           g_shapes[s].what, (long long)k, (long long)n, B, dt * 1e6, gbps,
                           ceil_gbps > 0 ? 100 * gbps / ceil_gbps : 0.0, err);
                first = 0;
            }
        }
        for (int c = 0; c < copies; c++) {
            if (fm[c].data) tc_free(g_tc, (void *)fm[c].data, fb);
            if (tm[c].data) tc_free(g_tc, (void *)tm[c].data, tc_tiled_bytes(n, k));
        }
        if (abuf) tc_free(g_tc, abuf, tc_act_bytes(maxb, k));
        free(tm);
        tc_free(g_tc, dx, maxb * (size_t)k * 4);
        tc_free(g_tc, dy, maxb * (size_t)n * 4);
        free(fm); free(h); free(x); free(y);
    }
    if (!json && !failed && !no_gemm && bench_gemm_tc(reps, ceil_gbps, gemm_m, gemm_shape)) failed = 1;
    if (!json && !failed && !no_gemm && bench_ops(reps < 5 ? 5 : reps * 2)) failed = 1;
    if (!json && !failed && !no_gemm && bench_gdn(reps)) failed = 1;
    if (json) printf("],\"worst_rel_err\":%.3g}\n", worst);
    if (failed) {
        fprintf(stderr, "tern bench: CUDA error\n");
        return 1;
    }
    if (!(worst < 1e-3)) {
        fprintf(stderr, "tern bench: error bound broken: max_rel_err %.3g >= 1e-3\n", worst);
        return 1;
    }
    if (!json) printf("error bound ok: worst max_rel_err %.3g < 1e-3\n", worst);
    return 0;
}
#else
int tern_bench_kernels_cuda(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern bench: this build has no CUDA back-end (-DTERN_CUDA=ON)\n");
    return 1;
}
#endif
