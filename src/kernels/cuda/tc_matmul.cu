/*
 * tc_matmul.cu - ternary and dense products on the GPU.
 *
 * PQ2_0 / Q2_0 (128 per block) take the integer path, as the AVX-512 GEMV does:
 * the activation is quantised once per call to 14-bit integers with one scale
 * per 128 inputs (x_q = round(x/sx), |x_q| <= 16256, sx = max|x|/16256), split
 * as x_q = 128*hi + lo (hi, lo signed bytes) and permuted so that one 32-bit
 * word of codes, shifted by 2s and masked with 0x03030303, meets its four
 * activations as one dp4a operand. Per 32 weights (a "unit", a quarter block):
 *   sum (code-1) x_q = 128*dp4a(codes, hi) + dp4a(codes, lo) - sum x_q
 * (the last term, `corr`, is stored with the activation), times d*sx.
 * Activation layout per row (K inputs): q[K/32][64] (32 hi then 32 lo bytes,
 * position 16i + 4s + k holds input 16i + 4k + s of the unit), sx[K/128],
 * corr[K/32].
 *
 * The weights stay in the file layout (34-byte blocks, 2-byte aligned): a lane
 * reads the 8 code bytes of its unit as two or three aligned 32-bit words and
 * funnel-shifts them; lanes of a warp walk consecutive units, so each warp load
 * covers one contiguous stretch of a row. One warp computes R rows at once (the
 * activation words are loaded once for the R rows) for NB batch rows.
 * Everything else (Q2_0 g64, Q1_0, F32/F16/BF16) takes a plain fp32 path.
 */
#include "kernels/cuda/internal.cuh"

#define QMAX 16256.0f

/* One warp per (batch row, 128-block). */
__global__ void k_actq128(const float *__restrict__ x, size_t xs, int K, size_t batch,
                          int8_t *__restrict__ q, float *__restrict__ sx, int *__restrict__ corr) {
    const int nb = K >> 7;
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= batch * (size_t)nb) return;
    size_t b = warp / nb;
    int blk = (int)(warp % nb);
    const float *xb = x + b * xs + (size_t)blk * 128 + lane * 4;
    float v[4] = {xb[0], xb[1], xb[2], xb[3]};
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    amax = tc_warp_max(amax);
    float inv = amax > 0 ? QMAX / amax : 0.0f;
    int u = lane >> 3, l8 = lane & 7;
    int i = l8 >> 2, k = l8 & 3;
    int8_t *ub = q + b * (size_t)K * 2 + ((size_t)blk * 4 + u) * 64;
    int sum = 0;
#pragma unroll
    for (int s = 0; s < 4; s++) {
        int xq = __float2int_rn(v[s] * inv);
        int hi = (xq + 64) >> 7, lo = xq - 128 * hi;
        int p = i * 16 + s * 4 + k;
        ub[p] = (int8_t)hi;
        ub[32 + p] = (int8_t)lo;
        sum += xq;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    if (l8 == 0) corr[b * (size_t)(K >> 5) + (size_t)blk * 4 + u] = sum;
    if (lane == 0) sx[b * (size_t)nb + blk] = amax / QMAX;
}

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

template <int R, int NB>
static void launch_t128(const tc_mat *w, const int8_t *q, const float *sx, const int *corr,
                        int batch, float *y, size_t ys) {
    const int warps = 4;
    int64_t rows_per_cta = (int64_t)warps * R;
    unsigned grid = (unsigned)((w->n + rows_per_cta - 1) / rows_per_cta);
    k_gemv_t128<R, NB><<<grid, warps * 32, 0, tc_stream>>>(w->data, w->n, (int)w->k, w->row_bytes,
                                                          q, sx, corr, batch, y, ys);
    tc_check_launch();
}

extern "C" void tc_matmul_multi(int nm, const tc_mat *w, const float *x, size_t batch, size_t xs,
                                float *const *y, const size_t *ys) {
    if (!batch || nm <= 0) return;
    const int64_t K = w[0].k;
    bool any_t128 = false;
    for (int i = 0; i < nm; i++) any_t128 |= w[i].kind == TC_TERN128;
    int8_t *q = NULL;
    float *sx = NULL;
    int *corr = NULL;
    if (any_t128) {
        size_t qn = batch * (size_t)K * 2, sn = batch * (size_t)(K / 128) * 4,
               cn = batch * (size_t)(K / 32) * 4;
        uint8_t *ws = (uint8_t *)tc_workspace(0, qn + sn + cn + 64);
        if (!ws) return;
        q = (int8_t *)ws;
        sx = (float *)(ws + qn);
        corr = (int *)(ws + qn + sn);
        size_t warps = batch * (size_t)(K / 128);
        k_actq128<<<tc_blocks(warps * 32, 256), 256, 0, tc_stream>>>(x, xs, (int)K, batch, q, sx,
                                                                     corr);
        tc_check_launch();
    }
    for (int i = 0; i < nm; i++) {
        const tc_mat *m = &w[i];
        if (m->kind == TC_TERN128 && (m->row_bytes & 1) == 0 && ((uintptr_t)m->data & 1) == 0) {
            if (batch == 1) launch_t128<4, 1>(m, q, sx, corr, 1, y[i], ys[i]);
            else launch_t128<2, 4>(m, q, sx, corr, (int)batch, y[i], ys[i]);
        } else {
            const int warps = 8;
            for (size_t b0 = 0; b0 < batch; b0 += 65535) {
                int nbat = (int)(batch - b0 < 65535 ? batch - b0 : 65535);
                k_gemv_generic<<<tc_blocks((size_t)m->n, warps), warps * 32, 0, tc_stream>>>(
                    m->kind, m->data, m->n, m->k, m->row_bytes, x + b0 * xs, xs, nbat,
                    y[i] + b0 * ys[i], ys[i]);
                tc_check_launch();
            }
        }
    }
}
