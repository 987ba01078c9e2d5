/*
 * tc_gemv_file.cu - products on matrices in the file layout: the ternary GEMV on
 * PQ2_0 / Q2_0 g128 rows (k_gemv_t128k: split K per row, batch 1..8; k_gemv_t128: one
 * warp per rows, any batch), and the fp32-input path of every kind (k_gemv_generic,
 * k_gemv_generic_sk for few rows). The matmul chooser (mm_choose.h) picks them.
 *
 * The weights stay in the file layout (34-byte blocks, 2-byte aligned): a lane
 * reads the 8 code bytes of its unit as two or three aligned 32-bit words and
 * funnel-shifts them; lanes of a warp walk consecutive units, so each warp load
 * covers one contiguous stretch of a row. One warp computes R rows at once (the
 * activation words are loaded once for the R rows) for NB batch rows.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/ptx.cuh"

template <int R, int NB>
__global__ void __launch_bounds__(128) k_gemv_t128(const uint8_t *__restrict__ W, int64_t n, int K, size_t rb,
                            const int8_t *__restrict__ q, const float *__restrict__ sx,
                            const int *__restrict__ corr, int batch, float *__restrict__ y,
                            size_t ys) {
    const int lane = threadIdx.x & 31;
    const int64_t r0 = ((int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (r0 >= n) return;
    const int nu = K >> 5, nb = K >> 7;
    for (int b0 = 0; b0 < batch; b0 += NB) {
        float acc[R][NB];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int j = 0; j < NB; j++) acc[r][j] = 0.0f;
        for (int u = lane; u < nu; u += 32) {
            const int blk = u >> 2, qq = u & 3;
            int4 h0[NB], h1[NB], l0[NB], l1[NB];
            float s[NB];
            int cr[NB];
#pragma unroll
            for (int j = 0; j < NB; j++) {
                int b = b0 + j < batch ? b0 + j : b0;
                const int4 *qp = (const int4 *)(q + (size_t)b * K * 2 + (size_t)u * 64);
                h0[j] = __ldg(qp);
                h1[j] = __ldg(qp + 1);
                l0[j] = __ldg(qp + 2);
                l1[j] = __ldg(qp + 3);
                s[j] = __ldg(sx + (size_t)b * nb + blk);
                cr[j] = __ldg(corr + (size_t)b * nu + u);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                int64_t row = r0 + r < n ? r0 + r : r0;
                const uint8_t *bp = W + (size_t)row * rb + (size_t)blk * TERN_PQ2_0_BYTES;
                float dw = __half2float(__ushort_as_half(__ldg((const unsigned short *)bp)));
                uintptr_t a = (uintptr_t)(bp + TERN_BLOCK_QS + 8 * qq);
                const uint32_t *wp = (const uint32_t *)(a & ~(uintptr_t)3);
                uint32_t w0 = __ldg(wp), w1 = __ldg(wp + 1), c0 = w0, c1 = w1;
                if (a & 2) {
                    uint32_t w2 = __ldg(wp + 2);
                    c0 = __funnelshift_r(w0, w1, 16);
                    c1 = __funnelshift_r(w1, w2, 16);
                }
                const uint32_t M = 0x03030303u;
                int t00 = (int)(c0 & M), t01 = (int)((c0 >> 2) & M), t02 = (int)((c0 >> 4) & M),
                    t03 = (int)((c0 >> 6) & M);
                int t10 = (int)(c1 & M), t11 = (int)((c1 >> 2) & M), t12 = (int)((c1 >> 4) & M),
                    t13 = (int)((c1 >> 6) & M);
#pragma unroll
                for (int j = 0; j < NB; j++) {
                    int ih = 0, il = 0;
                    ih = __dp4a(t00, h0[j].x, ih); il = __dp4a(t00, l0[j].x, il);
                    ih = __dp4a(t01, h0[j].y, ih); il = __dp4a(t01, l0[j].y, il);
                    ih = __dp4a(t02, h0[j].z, ih); il = __dp4a(t02, l0[j].z, il);
                    ih = __dp4a(t03, h0[j].w, ih); il = __dp4a(t03, l0[j].w, il);
                    ih = __dp4a(t10, h1[j].x, ih); il = __dp4a(t10, l1[j].x, il);
                    ih = __dp4a(t11, h1[j].y, ih); il = __dp4a(t11, l1[j].y, il);
                    ih = __dp4a(t12, h1[j].z, ih); il = __dp4a(t12, l1[j].z, il);
                    ih = __dp4a(t13, h1[j].w, ih); il = __dp4a(t13, l1[j].w, il);
                    acc[r][j] = fmaf(dw * s[j], (float)(ih * 128 + il - cr[j]), acc[r][j]);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int j = 0; j < NB; j++) {
                float v = tc_warp_sum(acc[r][j]);
                if (lane == 0 && r0 + r < n && b0 + j < batch)
                    y[(size_t)(b0 + j) * ys + (size_t)(r0 + r)] = v;
            }
    }
}

/* Plain fp32 path: one warp per row, every batch row. */
__global__ void k_gemv_generic(int kind, const uint8_t *__restrict__ W, int64_t n, int64_t K,
                               size_t rb, const float *__restrict__ x, size_t xs, int batch,
                               float *__restrict__ y, size_t ys) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= n) return;
    const uint8_t *row = W + (size_t)r * rb;
    for (int b = 0; b < batch; b++) {
        const float *xb = x + (size_t)b * xs;
        float acc = 0.0f;
        for (int64_t j = lane; j < K; j += 32) acc = fmaf(tc_elem(kind, row, j), xb[j], acc);
        acc = tc_warp_sum(acc);
        if (lane == 0) y[(size_t)b * ys + (size_t)r] = acc;
    }
}

/* Few rows (the GDN a/b gates: 48 rows of 5120): one block of 256 threads per (row,
 * 8 batch rows) splits K, so the call is not 48 warps walking 5120 inputs each (109 us
 * on the H200 at batch 1; 8.9 ms at a 512-row prefill chunk). blockIdx.y: the group
 * of 8 batch rows. */
#define TC_GEN_SK_MAXB 8
__global__ void __launch_bounds__(256) k_gemv_generic_sk(int kind, const uint8_t *__restrict__ W, int64_t K,
                                                         size_t rb, const float *__restrict__ x, size_t xs,
                                                         int batch, float *__restrict__ y, size_t ys) {
    __shared__ float red[TC_GEN_SK_MAXB][8];
    const int64_t r = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint8_t *row = W + (size_t)r * rb;
    x += (size_t)blockIdx.y * TC_GEN_SK_MAXB * xs;
    y += (size_t)blockIdx.y * TC_GEN_SK_MAXB * ys;
    batch -= (int)blockIdx.y * TC_GEN_SK_MAXB;
    if (batch > TC_GEN_SK_MAXB) batch = TC_GEN_SK_MAXB;
    float acc[TC_GEN_SK_MAXB];
#pragma unroll
    for (int b = 0; b < TC_GEN_SK_MAXB; b++) acc[b] = 0.0f;
    for (int64_t j = threadIdx.x; j < K; j += blockDim.x) {
        const float w = tc_elem(kind, row, j);
#pragma unroll
        for (int b = 0; b < TC_GEN_SK_MAXB; b++)
            if (b < batch) acc[b] = fmaf(w, x[(size_t)b * xs + (size_t)j], acc[b]);
    }
#pragma unroll
    for (int b = 0; b < TC_GEN_SK_MAXB; b++) {
        float v = tc_warp_sum(acc[b]);
        if (lane == 0) red[b][warp] = v;
    }
    __syncthreads();
    if (threadIdx.x < (unsigned)batch) {
        float v = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) v += red[threadIdx.x][w];
        y[(size_t)threadIdx.x * ys + (size_t)r] = v;
    }
}

template <int R, int NB>
static void launch_t128(const tc_mat *w, const int8_t *q, const float *sx, const int *corr,
                        int batch, float *y, size_t ys) {
    const int warps = 4;
    int64_t rows_per_cta = (int64_t)warps * R;
    unsigned grid = (unsigned)((w->n + rows_per_cta - 1) / rows_per_cta);
    k_gemv_t128<R, NB><<<grid, warps * 32, 0, tc_cur->stream>>>(w->data, w->n, (int)w->k, w->row_bytes,
                                                          q, sx, corr, batch, y, ys);
    tc_check_launch();
}

/* ---------------------------------------------- file layout, split-K GEMV
 * Batch 1..8 (k_gemv_t128k): one block of T threads (T a multiple of 32, <= 256,
 * sized from K) computes R rows for all NB batch rows in one pass, so each
 * weight byte is read once per call. Thread t walks units u = t, t+T, ... U units
 * at a time: the code words and scales of U units x R rows are loaded before any
 * arithmetic (memory-level parallelism), then the activation words of each batch
 * row are loaded once and met with the R rows. Same arithmetic as k_gemv_t128
 * (per unit: 128*dp4a(codes, hi) + dp4a(codes, lo) - corr, times d*sx); partial
 * sums are reduced per warp by shuffles, then across the warps through shared
 * memory. One block per R rows: N/R blocks fill the 132 SMs many times over. */
template <int R, int NB, int U>
__global__ void __launch_bounds__(256, NB == 1 ? 3 : 2) k_gemv_t128k(const uint8_t *__restrict__ W, int64_t n, int K,
                                                    size_t rb, const int8_t *__restrict__ q,
                                                    const float *__restrict__ sx,
                                                    const int *__restrict__ corr, int batch,
                                                    float *__restrict__ y, size_t ys) {
    __shared__ float part[8][R * NB];
    const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
    const int64_t r0 = (int64_t)blockIdx.x * R;
    const int nu = K >> 5, nb = K >> 7;
    const uint8_t *wrow[R];
#pragma unroll
    for (int r = 0; r < R; r++) wrow[r] = W + (size_t)(r0 + r < n ? r0 + r : n - 1) * rb;
    float acc[R][NB];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NB; j++) acc[r][j] = 0.0f;
    const uint32_t M = 0x03030303u;
#pragma unroll 1
    for (int u0 = tid; u0 < nu; u0 += U * nt) {
        uint32_t c0[U][R], c1[U][R];
        float dw[U][R];
#pragma unroll
        for (int v = 0; v < U; v++) {
            const int u = u0 + v * nt;
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (u < nu) {
                    const uint8_t *bp = wrow[r] + (size_t)(u >> 2) * TERN_PQ2_0_BYTES;
                    dw[v][r] = __half2float(__ushort_as_half(__ldg((const unsigned short *)bp)));
                    uintptr_t a = (uintptr_t)(bp + TERN_BLOCK_QS + 8 * (u & 3));
                    const uint32_t *wp = (const uint32_t *)(a & ~(uintptr_t)3);
                    uint32_t w0 = __ldg(wp), w1 = __ldg(wp + 1);
                    if (a & 2) {
                        uint32_t w2 = __ldg(wp + 2);
                        w0 = __funnelshift_r(w0, w1, 16);
                        w1 = __funnelshift_r(w1, w2, 16);
                    }
                    c0[v][r] = w0;
                    c1[v][r] = w1;
                } else {
                    c0[v][r] = c1[v][r] = 0;
                    dw[v][r] = 0.0f;
                }
            }
        }
#pragma unroll
        for (int v = 0; v < U; v++) {
            const int u = u0 + v * nt;
            if (u >= nu) break;
#pragma unroll
            for (int j = 0; j < NB; j++) {
                const int b = j < batch ? j : 0;
                const int4 *qp = (const int4 *)(q + (size_t)b * K * 2 + (size_t)u * 64);
                const int4 h0 = tc_ld_act(qp), h1 = tc_ld_act(qp + 1), l0 = tc_ld_act(qp + 2),
                           l1 = tc_ld_act(qp + 3);
                const float s = __ldg(sx + (size_t)b * nb + (u >> 2));
                const int cr = __ldg(corr + (size_t)b * nu + u);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint32_t a0 = c0[v][r], a1 = c1[v][r];
                    const int t00 = (int)(a0 & M), t01 = (int)((a0 >> 2) & M),
                              t02 = (int)((a0 >> 4) & M), t03 = (int)((a0 >> 6) & M);
                    const int t10 = (int)(a1 & M), t11 = (int)((a1 >> 2) & M),
                              t12 = (int)((a1 >> 4) & M), t13 = (int)((a1 >> 6) & M);
                    int ih = 0, il = 0;
                    ih = __dp4a(t00, h0.x, ih); il = __dp4a(t00, l0.x, il);
                    ih = __dp4a(t01, h0.y, ih); il = __dp4a(t01, l0.y, il);
                    ih = __dp4a(t02, h0.z, ih); il = __dp4a(t02, l0.z, il);
                    ih = __dp4a(t03, h0.w, ih); il = __dp4a(t03, l0.w, il);
                    ih = __dp4a(t10, h1.x, ih); il = __dp4a(t10, l1.x, il);
                    ih = __dp4a(t11, h1.y, ih); il = __dp4a(t11, l1.y, il);
                    ih = __dp4a(t12, h1.z, ih); il = __dp4a(t12, l1.z, il);
                    ih = __dp4a(t13, h1.w, ih); il = __dp4a(t13, l1.w, il);
                    acc[r][j] = fmaf(dw[v][r] * s, (float)(ih * 128 + il - cr), acc[r][j]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NB; j++) {
            float v = tc_warp_sum(acc[r][j]);
            if (lane == 0) part[warp][r * NB + j] = v;
        }
    __syncthreads();
    if (tid < R * NB) {
        const int r = tid / NB, j = tid % NB;
        float v = 0.0f;
        for (int w = 0; w < (nt >> 5); w++) v += part[w][tid];
        if (r0 + r < n && j < batch) y[(size_t)j * ys + (size_t)(r0 + r)] = v;
    }
}

template <int R, int NB>
static void launch_t128k(const tc_mat *w, const int8_t *q, const float *sx, const int *corr,
                         int batch, float *y, size_t ys) {
    const int U = NB >= 4 ? 1 : 2;
    const int nu = (int)(w->k / 32);
    /* it passes of U units per thread, at most 256 threads; the threads split the passes
     * evenly (K 17408: 160 threads x 2 passes rather than 256 x 1 + a 32-unit tail) */
    int it = (nu + U * 256 - 1) / (U * 256);
    int per = (nu + U * it - 1) / (U * it);
    int threads = ((per + 31) / 32) * 32;
    unsigned grid = (unsigned)((w->n + R - 1) / R);
    k_gemv_t128k<R, NB, U><<<grid, threads, 0, tc_cur->stream>>>(w->data, w->n, (int)w->k, w->row_bytes,
                                                            q, sx, corr, batch, y, ys);
    tc_check_launch();
}

/* File-layout TERN128 (c: t128k or t128, the build as the chooser says). */
void tc_gemv_file(const tc_mat *m, const tc_mm_choice &c, const int8_t *q, const float *sx,
                      const int *corr, size_t batch, float *y, size_t ys) {
    if (c.family == TC_MM_T128K) {
        switch (c.nb) {
        case 1: launch_t128k<4, 1>(m, q, sx, corr, 1, y, ys); return;
        case 2: launch_t128k<4, 2>(m, q, sx, corr, 2, y, ys); return;
        case 3: launch_t128k<4, 3>(m, q, sx, corr, 3, y, ys); return;
        case 4: launch_t128k<2, 4>(m, q, sx, corr, 4, y, ys); return;
        case 6: launch_t128k<2, 6>(m, q, sx, corr, (int)batch, y, ys); return;
        default: launch_t128k<2, 8>(m, q, sx, corr, (int)batch, y, ys); return;
        }
    }
    if (c.nb == 1) launch_t128<4, 1>(m, q, sx, corr, 1, y, ys);
    else launch_t128<2, 4>(m, q, sx, corr, (int)batch, y, ys);
}

/* The fp32-input kernels (any kind). */
void tc_gemv_fp32(const tc_mat *m, int family, const float *x, size_t batch, size_t xs, float *y,
                         size_t ys) {
    if (!x) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    if (family == TC_MM_GENERIC_SK && batch <= (size_t)65535 * TC_GEN_SK_MAXB) { /* few rows: split K per row */
        const unsigned gy = (unsigned)((batch + TC_GEN_SK_MAXB - 1) / TC_GEN_SK_MAXB);
        k_gemv_generic_sk<<<dim3((unsigned)m->n, gy), 256, 0, tc_cur->stream>>>(m->kind, m->data, m->k, m->row_bytes,
                                                                          x, xs, (int)batch, y, ys);
        tc_check_launch();
        return;
    }
    const int warps = 8;
    for (size_t b0 = 0; b0 < batch; b0 += 65535) {
        int nbat = (int)(batch - b0 < 65535 ? batch - b0 : 65535);
        k_gemv_generic<<<tc_blocks((size_t)m->n, warps), warps * 32, 0, tc_cur->stream>>>(
            m->kind, m->data, m->n, m->k, m->row_bytes, x + b0 * xs, xs, nbat, y + b0 * ys, ys);
        tc_check_launch();
    }
}
