/*
 * tc_gemv_rows.cu - the exact R-row decode GEMV of a speculative verify (issue 24):
 * y = W x for R rows of one sequence on tiled matrices (TC_TERN128T), the weights read
 * once per 4 rows, every row's floats bit-identical to the decode GEMV at batch 1
 * (tc_gemv.cu, k_gemv_tiled NB4), so a verify pass gives the logits of stepping the
 * tokens one by one.
 *
 * Why the bits agree: at batch 1 the NB4 build puts the row's hi plane in mma column 0
 * and its lo plane in column 4; a lane accumulates its columns over its warp's run of
 * tiles, group by group, f += (float)(H - corr) * (d * sx) (corr only on the lo
 * columns), then f *= 128 on the hi columns, hi + lo by one shuffle, and the KS warps of
 * a strip are summed in warp order. At batch b <= 4 row r sits in columns r and 4 + r with
 * its own accumulators, the same integer products (exact) and the same float operations
 * in the same order over the same tile ranges, staged or not (the same bits): only KS,
 * the warps splitting a strip's tiles, changes a row's sum, so the chunks of 4 rows run
 * the NB4 build with KS forced to batch 1's (tc_gemv_tiled_ks1, tc_gemv_tiled_nb4_ks).
 * A build with up to 12 rows a pass (3 groups of 4 sharing each weight tile's registers,
 * the activation through L1) gave the same bits but cost 3.2x the batch-1 GEMV per call
 * at 5 rows on the H200 (128 registers, spills; 2026-12-04), about 2x at 2 rows: deleted.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gemv_tiled.h"
#include "kernels/cuda/lab.h"
#include "kernels/cuda/mm_choose.h"
#include "kernels/cuda/ptx.cuh"

extern "C" void tc_gemv_tiled_rows(tc_ctx *cx, int nm, const tc_mat *const *w, const tc_act *act, float *const *y,
                                   const size_t *ys) {
    TC_CTX(cx);
    if (nm < 1 || nm > TSK_MAXM || !act || !act->batch) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int64_t K = act->k;
    for (int i = 0; i < nm; i++)
        if (w[i]->kind != TC_TERN128T || w[i]->k != K || K % 128 || w[i]->n <= 0 ||
            w[i]->n > ((int64_t)1 << 31) - 16 || K > (1 << 24) || ((uintptr_t)w[i]->data & 15)) {
            tc_note(TC_ERR_UNSUPPORTED);
            return;
        }
    int ks[TSK_MAXM];
    tc_gemv_tiled_ks1(tc_cur, nm, w, act, ks);
    for (int i = 0; i < nm; i++) {
        /* chunks of 4 rows through the decode kernel itself (its NB4 build, batch 1's KS) */
        for (size_t b0 = 0; b0 < act->batch; b0 += 4) {
            const int nb = (int)(act->batch - b0 < 4 ? act->batch - b0 : 4);
            const int8_t *q = act->q + b0 * (size_t)K * 2;
            const float *sx = act->sx + b0 * (size_t)(K / 128);
            const int *corr = act->corr + b0 * (size_t)(K / 32);
            float *yb = y[i] + b0 * ys[i];
            const tc_act ca = {(int8_t *)q, (float *)sx, (int *)corr, K, (size_t)nb};
            if (!tc_gemv_tiled_nb4_ks(tc_cur, w[i], &ca, yb, ys[i], ks[i])) {
                tc_note(TC_ERR_UNSUPPORTED);
                return;
            }
        }
    }
}
