/*
 * tc_matmul.cu - ternary and dense products on the GPU: the dispatch.
 * PQ2_0 / Q2_0 g128 take the integer path (the activation format: act.cuh).
 * The products of a call are dispatched as the matmul chooser says (mm_choose.h):
 * the tiled GEMV (tc_gemv.cu), the tensor-core GEMM (tc_gemm_tc.cu, or tc_gemm_wg.cu
 * under the wgmma force), the file-layout
 * and fp32 kernels (tc_gemv_file.cu); the activation is quantised once per call
 * (tc_actq.cu). Everything else (Q2_0 g64, Q1_0, F32/F16/BF16) takes the fp32 path.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gemv_tiled.h"
#include "kernels/cuda/mm_choose.h"
#include "kernels/cuda/lab.h"

/* One matrix of a call, the family c (tc_mm_choose) with its fallbacks: a GEMM the
 * tensor-core kernel refuses runs the GEMV (tiled: in chunks of 8; file layout:
 * k_gemv_t128); a file-layout matrix that is not 2-byte aligned, the fp32 path. */
static void products_one(const tc_mat *m, const tc_mm_choice &c, const tc_act *act, const float *x,
                         size_t batch, size_t xs, float *y, size_t ys) {
    if (c.family == TC_MM_NONE) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    if (c.family == TC_MM_GENERIC || c.family == TC_MM_GENERIC_SK) {
        tc_gemv_fp32(m, c.family, x, batch, xs, y, ys);
        return;
    }
    if (!act) { /* the integer families read the quantised activation */
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    if (c.family == TC_MM_GEMM && c.gemm_mode == TC_GEMM_WG &&
        tc_gemm_wg_ex(tc_cur, m, act, y, ys, tc_cur->mm.force == TC_MM_WGMMA2 ? TC_WG_PAIRS : 0))
        return;
    if (c.family == TC_MM_GEMM &&
        tc_gemm_tc(tc_cur, m, act, y, ys, c.gemm_mode == TC_GEMM_WG ? TC_GEMM_EXACT : c.gemm_mode))
        return;
    if (m->kind == TC_TERN128T) {
        tc_gemv_tiled(tc_cur, m, act, y, ys);
        return;
    }
    if ((m->row_bytes & 1) || ((uintptr_t)m->data & 1)) {
        tc_gemv_fp32(m, m->n < 4096 ? TC_MM_GENERIC_SK : TC_MM_GENERIC, x, batch, xs, y, ys);
        return;
    }
    tc_mm_choice f = c;
    if (f.family == TC_MM_GEMM) { /* refused: the one-warp kernel at any batch */
        f.family = TC_MM_T128;
        f.nb = batch == 1 ? 1 : 4;
    }
    tc_gemv_file(m, f, act->q, act->sx, act->corr, batch, y, ys);
}

static void products(int nm, const tc_mat *w, const tc_act *act, const float *x, size_t batch,
                     size_t xs, float *const *y, const size_t *ys) {
    TC_PROF(TC_FAM_MATMUL);
    const tc_mm_caps caps = tc_mm_caps_now();
    tc_mm_choice c[8];
    /* decode: the call's tiled matrices in one grid (TC_MM_TILED_MULTI), the others
     * one by one */
    bool done[8] = {false};
    const tc_mat *tw[TSK_MAXM];
    float *ty[TSK_MAXM];
    size_t tys[TSK_MAXM];
    int nt = 0, idx[TSK_MAXM];
    for (int i = 0; i < nm; i++) {
        c[i] = tc_mm_choose(w[i].kind, w[i].n, w[i].k, batch, &caps);
        if (c[i].family == TC_MM_TILED_MULTI && act && nt < TSK_MAXM) {
            idx[nt] = i;
            tw[nt] = &w[i];
            ty[nt] = y[i];
            tys[nt] = ys[i];
            nt++;
        }
    }
    if (nt > 1) {
        tc_gemv_tiled_multi(tc_cur, nt, tw, act, ty, tys);
        for (int i = 0; i < nt; i++) done[idx[i]] = true;
    }
    for (int i = 0; i < nm; i++)
        if (!done[i]) products_one(&w[i], c[i], act, x, batch, xs, y[i], ys[i]);
}

extern "C" void tc_matmul_multi(tc_ctx *cx, int nm, const tc_mat *w, const float *x, size_t batch, size_t xs,
                                float *const *y, const size_t *ys) {
    TC_CTX(cx);
    if (!batch || nm <= 0) return;
    if (nm > 8) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int64_t K = w[0].k;
    const tc_mm_caps caps = tc_mm_caps_now();
    bool any_int = false;
    for (int i = 0; i < nm; i++) {
        const int f = tc_mm_choose(w[i].kind, w[i].n, w[i].k, batch, &caps).family;
        any_int |= f != TC_MM_GENERIC && f != TC_MM_GENERIC_SK && f != TC_MM_NONE;
    }
    tc_act act;
    if (any_int) { /* one quantisation for every integer-path matrix of the call */
        TC_PROF(TC_FAM_ACTQ);
        void *ws = tc_workspace(0, tc_act_bytes(batch, K));
        if (!ws) return;
        act = tc_act_view(ws, batch, K);
        tc_quantize_rows(x, xs, &act);
    }
    products(nm, w, any_int ? &act : NULL, x, batch, xs, y, ys);
}

extern "C" void tc_matmul_multi_q(tc_ctx *cx, int nm, const tc_mat *w, const tc_act *act, const float *x,
                                  size_t xs, float *const *y, const size_t *ys) {
    TC_CTX(cx);
    if (!act || !act->batch || nm <= 0) return;
    if (nm > 8) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    for (int i = 0; i < nm; i++)
        if (w[i].k != act->k) {
            tc_note(TC_ERR_UNSUPPORTED);
            return;
        }
    products(nm, w, act, x, act->batch, xs, y, ys);
}

/* ------------------------------------------------ exact rows (a speculative verify)
 * Each matrix as the call at batch 1 would run it (its family chosen for one row): the
 * tiled matrices of the decode's one grid through tc_gemv_tiled_rows (the weights read
 * once, each row with batch 1's bits), every other matrix row by row through the batch-1
 * kernel itself. */
static tc_act act_row(const tc_act *a, size_t r) {
    tc_act o = {a->q + r * (size_t)a->k * 2, a->sx + r * (size_t)(a->k / 128), a->corr + r * (size_t)(a->k / 32),
                a->k, 1};
    return o;
}

static void products_exact(int nm, const tc_mat *w, const tc_act *act, const float *x, size_t batch, size_t xs,
                           float *const *y, const size_t *ys) {
    TC_PROF(TC_FAM_MATMUL);
    const tc_mm_caps caps = tc_mm_caps_now();
    tc_mm_choice c[8];
    bool done[8] = {false};
    const tc_mat *tw[TSK_MAXM];
    float *ty[TSK_MAXM];
    size_t tys[TSK_MAXM];
    int nt = 0;
    for (int i = 0; i < nm; i++) {
        c[i] = tc_mm_choose(w[i].kind, w[i].n, w[i].k, 1, &caps);
        if (c[i].family == TC_MM_TILED_MULTI && act && nt < TSK_MAXM) {
            tw[nt] = &w[i];
            ty[nt] = y[i];
            tys[nt] = ys[i];
            done[i] = true;
            nt++;
        }
    }
    if (nt) tc_gemv_tiled_rows(tc_cur, nt, tw, act, ty, tys);
    for (int i = 0; i < nm; i++)
        if (!done[i])
            for (size_t r = 0; r < batch; r++) {
                tc_act ar;
                if (act) ar = act_row(act, r);
                products_one(&w[i], c[i], act ? &ar : NULL, x ? x + r * xs : NULL, 1, xs, y[i] + r * ys[i], ys[i]);
            }
}

extern "C" void tc_matmul_multi_exact(tc_ctx *cx, int nm, const tc_mat *w, const float *x, size_t batch, size_t xs,
                                      float *const *y, const size_t *ys) {
    TC_CTX(cx);
    if (!batch || nm <= 0) return;
    if (nm > 8) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int64_t K = w[0].k;
    const tc_mm_caps caps = tc_mm_caps_now();
    bool any_int = false;
    for (int i = 0; i < nm; i++) {
        const int f = tc_mm_choose(w[i].kind, w[i].n, w[i].k, 1, &caps).family;
        any_int |= f != TC_MM_GENERIC && f != TC_MM_GENERIC_SK && f != TC_MM_NONE;
    }
    tc_act act;
    if (any_int) { /* the quantiser is per row: the rows of batch 1 */
        TC_PROF(TC_FAM_ACTQ);
        void *ws = tc_workspace(0, tc_act_bytes(batch, K));
        if (!ws) return;
        act = tc_act_view(ws, batch, K);
        tc_quantize_rows(x, xs, &act);
    }
    products_exact(nm, w, any_int ? &act : NULL, x, batch, xs, y, ys);
}

extern "C" void tc_matmul_multi_q_exact(tc_ctx *cx, int nm, const tc_mat *w, const tc_act *act, const float *x,
                                        size_t xs, float *const *y, const size_t *ys) {
    TC_CTX(cx);
    if (!act || !act->batch || nm <= 0) return;
    if (nm > 8) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    for (int i = 0; i < nm; i++)
        if (w[i].k != act->k) {
            tc_note(TC_ERR_UNSUPPORTED);
            return;
        }
    products_exact(nm, w, act, x, act->batch, xs, y, ys);
}
