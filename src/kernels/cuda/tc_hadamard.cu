/*
 * tc_hadamard.cu - the blockwise Hadamard transform: one CTA per (row, block),
 * the block in shared memory, log2(block) butterfly stages; SwiGLU can be fused
 * into its load and the activation quantisation into its store (tc_fwht, used by
 * the norm, SwiGLU and embedding sites too). Math mirrors src/model/backend_cpu.c.
 */
#include "kernels/cuda/internal.cuh"

#include <math.h>

/* One CTA per (row, block): load (with signs on the forward side), log2(block)
 * butterfly stages in shared memory, scale (signs on the inverse side), store. */
/* src may equal dst (in place); up: SwiGLU fused into the load (v = silu(src)*up). */
__global__ void k_fwht(const float *src, const float *__restrict__ up, float *dst, size_t n,
                       int block, const float *__restrict__ signs, int inverse, float scale,
                       tc_act act) {
    extern __shared__ float sh[];
    const size_t nbr = n / (size_t)block;
    const size_t row = blockIdx.x / nbr, off = (blockIdx.x % nbr) * (size_t)block;
    const float *sp = src + row * n + off;
    float *xp = dst + row * n + off;
    for (int i = threadIdx.x; i < block; i += blockDim.x) {
        float v = sp[i];
        if (up) v = v / (1.0f + expf(-v)) * up[row * n + off + i];
        sh[i] = !inverse && signs ? v * signs[off + i] : v;
    }
    __syncthreads();
    for (int h = 1; h < block; h <<= 1) {
        for (int t = threadIdx.x; t < block / 2; t += blockDim.x) {
            int i = (t / h) * 2 * h + (t % h);
            float a = sh[i], b = sh[i + h];
            sh[i] = a + b;
            sh[i + h] = a - b;
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < block; i += blockDim.x) {
        float v = sh[i] * scale;
        xp[i] = inverse && signs ? v * signs[off + i] : v;
    }
    if (act.q) { /* forward only: quantise the block's 128-input sub-blocks, a warp each */
        const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        const int nb = (int)(n >> 7);
        for (int w = threadIdx.x >> 5; w < block / 128; w += nw) {
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = sh[w * 128 + lane * 4 + e] * scale;
            tc_actq_block(v, lane, act.q + row * n * 2, act.sx + row * (size_t)nb,
                          act.corr + row * (size_t)(n >> 5), (int)(off / 128) + w);
        }
    }
}

void tc_fwht(const float *src, const float *up, float *x, size_t rows, size_t n, size_t block,
             const float *signs, int inverse, const tc_act *act) {
    if (!rows || !n) return;
    size_t ctas = rows * (n / block);
    if (block < 2 || block > 8192 || n % block || ctas > 0x7fffffffu) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    int threads = block >= 1024 ? 512 : (int)(block / 2 < 32 ? 32 : block / 2);
    size_t smem = block * sizeof(float);
    static bool attr;
    if (!attr) {
        cudaFuncSetAttribute(k_fwht, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192 * 4);
        attr = true;
    }
    tc_act none = {};
    k_fwht<<<(unsigned)ctas, threads, smem, tc_stream>>>(src, up, x, n, (int)block, signs, inverse,
                                                        1.0f / sqrtf((float)block),
                                                        act ? *act : none);
    tc_check_launch();
}

extern "C" void tc_hadamard(float *x, size_t rows, size_t n, size_t block, const float *signs,
                            int inverse) {
    TC_PROF(TC_FAM_HADAMARD);
    if (signs) tc_fwht(x, NULL, x, rows, n, block, signs, inverse, NULL);
}
