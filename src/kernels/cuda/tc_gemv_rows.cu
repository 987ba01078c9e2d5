/*
 * tc_gemv_rows.cu - the exact R-row decode GEMV of a speculative verify (issue 24):
 * y = W x for R rows of one sequence on tiled matrices (TC_TERN128T), the weights read
 * once per 8 rows, every row's floats bit-identical to the decode GEMV at batch 1
 * (tc_gemv.cu, k_gemv_tiled NB4), so a verify pass gives the logits of stepping the
 * tokens one by one.
 *
 * Why the bits agree: at batch 1 the NB4 build puts the row's hi plane in mma column 0
 * and its lo plane in column 4; a lane accumulates its columns over its warp's run of
 * tiles, group by group, f += (float)(H - corr) * (d * sx) (corr only on the lo
 * columns), then f *= 128 on the hi columns, hi + lo by one shuffle, and the KS warps of
 * a strip are summed in warp order. At batch b <= 4 row r sits in columns r and 4 + r with
 * its own accumulators; the NB8 2 build (5..8 rows) puts row r in column r of two mmas
 * (hi, lo) and keeps the two accumulators NB4 keeps in its two columns. Either way the
 * same integer products (exact) and the same float operations in the same order over
 * the same tile ranges, staged or not, one grid for the matrices of one input or one
 * launch each: only KS, the warps splitting a strip's tiles, changes a row's sum, so the
 * chunks of 8 rows run with KS forced to batch 1's (tc_gemv_tiled_ks1), and as one grid
 * where batch 1 runs one (tc_gemv_tiled_exact_ks).
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
    const int one = tc_gemv_tiled_ks1(tc_cur, nm, w, act, ks);
    /* chunks of 8 rows; of 4 when a forced KS is past the 8-row build's warps (12: batch 1
     * ran unstaged with more) */
    size_t cw = 8;
    for (int i = 0; i < nm; i++)
        if (ks[i] > 12) cw = 4;
    for (size_t b0 = 0; b0 < act->batch; b0 += cw) {
        const size_t nb = act->batch - b0 < cw ? act->batch - b0 : cw;
        float *yb[TSK_MAXM];
        for (int i = 0; i < nm; i++) yb[i] = y[i] + b0 * ys[i];
        const tc_act ca = {act->q + b0 * (size_t)K * 2, act->sx + b0 * (size_t)(K / 128),
                           act->corr + b0 * (size_t)(K / 32), K, nb};
        if (!tc_gemv_tiled_exact_ks(tc_cur, nm, w, &ca, yb, ys, ks, one)) {
            tc_note(TC_ERR_UNSUPPORTED);
            return;
        }
    }
}
