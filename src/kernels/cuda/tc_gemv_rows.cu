/*
 * tc_gemv_rows.cu - the exact R-row decode GEMV of a speculative verify (issue 24):
 * y = W x for R rows of one sequence on a tiled matrix (TC_TERN128T), the weights read
 * once for up to TCR_MAX_ROWS rows, and every row's floats bit-identical to the decode
 * GEMV at batch 1 (tc_gemv.cu, k_gemv_tiled NB4), so a verify pass gives the logits of
 * stepping the tokens one by one.
 *
 * Why the bits agree: at batch 1 the NB4 build puts the row's hi plane in mma column 0
 * and its lo plane in column 4; a lane accumulates its columns over its warp's run of
 * tiles, group by group, f += (float)(H - corr) * (d * sx) (corr only on the lo
 * columns), then f *= 128 on the hi columns, hi + lo by one shuffle, and the KS warps of
 * a strip are summed in warp order. Here batch row b of group i (4 rows per group, NG
 * groups per pass) sits in the same roles (hi column b & 3, lo column 4 + (b & 3) of its
 * group's mma), with its own accumulators, the same integer products (exact) and the same
 * float operations in the same order, over the same tile ranges: KS is the one batch 1
 * launches with (tc_gemv_tiled_ks1: the launch shape decides nothing else a row sees).
 * The activation is read from global memory through L1 (the SA 0 loop of tc_gemv.cu:
 * the same bits as its staged loop), U tiles of weights in flight per warp.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gemv_tiled.h"
#include "kernels/cuda/lab.h"
#include "kernels/cuda/mm_choose.h"
#include "kernels/cuda/ptx.cuh"

#define TCR_U 4
#define TCR_MAX_WARPS 16
#define TCR_MAX_ROWS 12 /* rows per pass: NG <= 3 groups of 4 */

__device__ __forceinline__ float tcr_h(uint32_t v, int hi) {
    return __half2float(__ushort_as_half((unsigned short)(hi ? v >> 16 : v & 0xffffu)));
}

template <int NG>
__global__ void __launch_bounds__(512)
    k_gemv_rows(const uint8_t *__restrict__ W, int n, float *__restrict__ y, size_t ys, int K, int KS,
                const int8_t *__restrict__ q, const float *__restrict__ sx, const int *__restrict__ corr, int rows) {
    __shared__ float red[TCR_MAX_WARPS][16][4 * NG];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int spc = (int)(blockDim.x >> 5) / KS;
    const int sl = warp / KS, ks = warp - sl * KS;
    const int strip = blockIdx.x * spc + sl;
    const int G = K >> 7, KT = (G + 1) >> 1, nu = K >> 5;
    const bool live = strip * 16 < n;
    const int j0 = ks * KT / KS, j1 = (ks + 1) * KT / KS;
    const int nt = live ? j1 - j0 : 0;
    const bool odd = G & 1;
    const uint8_t *pw = W + ((size_t)strip * KT + j0) * TCT_TILE + 16 * lane;
    const uint8_t *ps = W + ((size_t)strip * KT + j0) * TCT_TILE + 1024 + 8 * g;
    /* group i: B column g = batch row 4i + (g & 3), plane g >> 2; output columns 2t, 2t+1
     * = rows 4i + ((2t) & 3) (+1), the lo plane when t >= 2 (those carry -corr) */
    const int bp = g >> 2, ol = (2 * t) & 3;
    const bool lo = t >= 2;
    int rb[NG], r0[NG], r1[NG];
#pragma unroll
    for (int i = 0; i < NG; i++) {
        const int b = 4 * i + (g & 3), o0 = 4 * i + ol;
        rb[i] = b < rows ? b : 0;
        r0[i] = o0 < rows ? o0 : 0;
        r1[i] = o0 + 1 < rows ? o0 + 1 : 0;
    }
    const int8_t *pq = q + (size_t)bp * 32 + (size_t)t * 64 + (size_t)j0 * 512;

    float f[NG][4];
#pragma unroll
    for (int i = 0; i < NG; i++) f[i][0] = f[i][1] = f[i][2] = f[i][3] = 0.0f;
    uint4 wa[TCR_U], wb[TCR_U];
    uint2 sc[TCR_U];
#pragma unroll
    for (int u = 0; u < TCR_U; u++) {
        if (u < nt) {
            wa[u] = tct_ld_stream(pw + u * TCT_TILE);
            wb[u] = tct_ld_stream(pw + u * TCT_TILE + 512);
            sc[u] = tct_ld_stream2(ps + u * TCT_TILE);
        }
    }
    tc_pdl_trigger(); /* the weights above depend on no kernel; the activation below does */
    tc_pdl_wait();
#pragma unroll 1
    for (int jj = 0; jj < nt; jj += TCR_U) {
#pragma unroll
        for (int u = 0; u < TCR_U; u++) {
            if (jj + u < nt) {
                const int j = jj + u; /* tile index within the warp's run */
                const uint32_t wg[4] = {wa[u].x, wa[u].y, wa[u].z, wa[u].w};
                const uint32_t wh[4] = {wb[u].x, wb[u].y, wb[u].z, wb[u].w};
                const uint2 s2 = sc[u];
                const bool last = j == nt - 1;
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    if (e == 1 && odd && last && j1 == KT) break;
                    const float dg = tcr_h(s2.x, e), dh = tcr_h(s2.y, e);
#pragma unroll
                    for (int i = 0; i < NG; i++) {
                        const int4 *qp = (const int4 *)(pq + (size_t)rb[i] * (size_t)K * 2 + j * 512 + e * 256);
                        const int4 h0 = tc_ld_act(qp);
                        const int4 h1 = tc_ld_act(qp + 1);
                        int H[4] = {0, 0, 0, 0};
                        uint32_t a[4];
                        tct_a_frag(wg, wh, e, 0, a);
                        tct_mma(H, a, h0.x, h0.y);
                        tct_a_frag(wg, wh, e, 1, a);
                        tct_mma(H, a, h0.z, h0.w);
                        tct_a_frag(wg, wh, e, 2, a);
                        tct_mma(H, a, h1.x, h1.y);
                        tct_a_frag(wg, wh, e, 3, a);
                        tct_mma(H, a, h1.z, h1.w);
                        int c0 = 0, c1 = 0;
                        const int gi = 2 * (j0 + j) + e; /* the 128-group */
                        if (lo) {
                            const int4 ca = tc_ld_act(corr + (size_t)r0[i] * nu + 4 * gi);
                            const int4 cb = tc_ld_act(corr + (size_t)r1[i] * nu + 4 * gi);
                            c0 = (ca.x + ca.y) + (ca.z + ca.w);
                            c1 = (cb.x + cb.y) + (cb.z + cb.w);
                        }
                        const float s0 = tct_ld_f(sx + (size_t)r0[i] * G + gi);
                        const float s1 = tct_ld_f(sx + (size_t)r1[i] * G + gi);
                        int v[4];
#pragma unroll
                        for (int k = 0; k < 4; k++) v[k] = H[k] - ((k & 1) ? c1 : c0);
                        f[i][0] = fmaf((float)v[0], dg * s0, f[i][0]);
                        f[i][1] = fmaf((float)v[1], dg * s1, f[i][1]);
                        f[i][2] = fmaf((float)v[2], dh * s0, f[i][2]);
                        f[i][3] = fmaf((float)v[3], dh * s1, f[i][3]);
                    }
                }
                if (j + TCR_U < nt) { /* refill the slot: U - 1 tiles stay in flight */
                    wa[u] = tct_ld_stream(pw + (size_t)(j + TCR_U) * TCT_TILE);
                    wb[u] = tct_ld_stream(pw + (size_t)(j + TCR_U) * TCT_TILE + 512);
                    sc[u] = tct_ld_stream2(ps + (size_t)(j + TCR_U) * TCT_TILE);
                }
            }
        }
    }
    /* the plane factor (128 on the hi columns) and dropped columns; hi + lo */
#pragma unroll
    for (int i = 0; i < NG; i++) {
        const int o0 = 4 * i + ol;
        const float m0 = o0 < rows ? (lo ? 1.0f : 128.0f) : 0.0f;
        const float m1 = o0 + 1 < rows ? (lo ? 1.0f : 128.0f) : 0.0f;
        f[i][0] *= m0;
        f[i][1] *= m1;
        f[i][2] *= m0;
        f[i][3] *= m1;
#pragma unroll
        for (int k = 0; k < 4; k++) f[i][k] += __shfl_xor_sync(0xffffffffu, f[i][k], 2);
    }
    const int row0 = strip * 16 + g, row1 = row0 + 8;
    if (KS == 1) {
        if (!lo)
#pragma unroll
            for (int i = 0; i < NG; i++) {
                const int o0 = 4 * i + ol, o1 = o0 + 1;
                if (row0 < n && o0 < rows) y[(size_t)o0 * ys + row0] = f[i][0];
                if (row0 < n && o1 < rows) y[(size_t)o1 * ys + row0] = f[i][1];
                if (row1 < n && o0 < rows) y[(size_t)o0 * ys + row1] = f[i][2];
                if (row1 < n && o1 < rows) y[(size_t)o1 * ys + row1] = f[i][3];
            }
        return;
    }
    if (!lo)
#pragma unroll
        for (int i = 0; i < NG; i++) {
            const int o0 = 4 * i + ol;
            red[warp][g][o0] = f[i][0];
            red[warp][g][o0 + 1] = f[i][1];
            red[warp][g + 8][o0] = f[i][2];
            red[warp][g + 8][o0 + 1] = f[i][3];
        }
    __syncthreads();
    const int per = 16 * 4 * NG;
    for (int idx = threadIdx.x; idx < spc * per; idx += blockDim.x) {
        const int s = idx / per, rr = (idx % per) / (4 * NG), b = idx % (4 * NG);
        const int row = (blockIdx.x * spc + s) * 16 + rr;
        if (row >= n || b >= rows) continue;
        float v = 0.0f;
        for (int w = 0; w < KS; w++) v += red[s * KS + w][rr][b];
        y[(size_t)b * ys + row] = v;
    }
}

template <int NG>
static void launch_rows(const tc_mat *m, float *y, size_t ys, int ks, const int8_t *q, const float *sx,
                        const int *corr, int rows) {
    const int64_t strips = tct_strips(m->n);
    int spc = ks >= 4 ? 1 : 4 / ks;
    if (spc > strips) spc = (int)strips;
    const unsigned grid = (unsigned)((strips + spc - 1) / spc);
    tc_launch(k_gemv_rows<NG>, dim3(grid), dim3(32 * ks * spc), 0, 1, (const uint8_t *)m->data, (int)m->n, y, ys,
              (int)m->k, ks, q, sx, corr, rows);
}

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
        if (ks[i] < 1 || ks[i] > TCR_MAX_WARPS) {
            tc_note(TC_ERR_UNSUPPORTED);
            return;
        }
        for (size_t b0 = 0; b0 < act->batch; b0 += TCR_MAX_ROWS) {
            const int nb = (int)(act->batch - b0 < TCR_MAX_ROWS ? act->batch - b0 : TCR_MAX_ROWS);
            const int8_t *q = act->q + b0 * (size_t)K * 2;
            const float *sx = act->sx + b0 * (size_t)(K / 128);
            const int *corr = act->corr + b0 * (size_t)(K / 32);
            float *yb = y[i] + b0 * ys[i];
            if (nb <= 4) launch_rows<1>(w[i], yb, ys[i], ks[i], q, sx, corr, nb);
            else if (nb <= 8) launch_rows<2>(w[i], yb, ys[i], ks[i], q, sx, corr, nb);
            else launch_rows<3>(w[i], yb, ys[i], ks[i], q, sx, corr, nb);
        }
    }
}
