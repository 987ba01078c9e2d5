/*
 * act.cuh - the integer path's activation format, shared by its producers (tc_actq.cu,
 * the fused norm / transform / SwiGLU / GDN kernels) and its readers (the GEMVs, the GEMM).
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
 */
#ifndef TERN_KERNELS_CUDA_ACT_CUH
#define TERN_KERNELS_CUDA_ACT_CUH

/* Quantise one 128-input block held 4 per lane (v[s] = input 4*lane + s of the
 * block) into the activation layout above (row base q, block blk). */
#define TC_QMAX 16256.0f
__device__ __forceinline__ void tc_actq_block(const float v[4], int lane, int8_t *qrow,
                                              float *sx_row, int *corr_row, int blk) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    amax = tc_warp_max(amax);
    float inv = amax > 0 ? TC_QMAX / amax : 0.0f;
    int u = lane >> 3, l8 = lane & 7;
    int i = l8 >> 2, k = l8 & 3;
    int8_t *ub = qrow + ((size_t)blk * 4 + u) * 64;
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
    if (l8 == 0) corr_row[(size_t)blk * 4 + u] = sum;
    if (lane == 0) sx_row[blk] = amax / TC_QMAX;
}

#endif
