/*
 * tc_hadamard.cu - the blockwise Hadamard transform: one CTA per (row, block);
 * SwiGLU can be fused into its load and the activation quantisation into its
 * store (tc_fwht, used by the norm, SwiGLU and embedding sites too). Blocks of
 * 256..2048 (the models' 1024) take k_fwht_reg, the block in registers
 * (fwht_reg.cuh); other sizes (and tc_set_ops_old, for tests) k_fwht, the block in shared
 * memory. Both give the same floats. Math mirrors src/backends/cpu/backend_cpu.c.
 */
#include "kernels/cuda/fwht_reg.cuh"

#include <math.h>

/* One CTA per (row, block): load (with signs on the forward side), log2(block)
 * butterfly stages in shared memory, scale (signs on the inverse side), store. */
/* src may equal dst (in place); up: SwiGLU fused into the load (v = silu(src)*up). */
__global__ void k_fwht(const float *src, const float *__restrict__ up, float *dst, size_t n,
                       int block, const float *__restrict__ signs, int inverse, float scale,
                       tc_act act) {
    tc_pdl_trigger();
    tc_pdl_wait();
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

/* One CTA of B/8 threads per (row, block), B = 256 << M: thread t loads inputs
 * 8t..8t+7 of its block (16-byte loads: src, up, forward signs; the inverse signs in
 * the high layout), SwiGLU and the forward signs, the transform in registers
 * (fr_transform: warp shuffles, one trip through shared memory when B > 256), the
 * scale and inverse signs, stored from the high layout (vectors of 8 >> M floats,
 * consecutive threads at consecutive addresses). With act.q (forward only) the final
 * floats go back to shared memory (the thread's own high-layout slots) and each warp
 * quantises whole 128-blocks (fr_quant). Shared memory: the block (B floats). Same
 * floats as k_fwht. src may equal dst: every read of the block happens before the
 * barrier inside fr_transform (M > 0) or by the writing thread itself (M = 0). */
template <int M>
__global__ void __launch_bounds__(32 << M) k_fwht_reg(const float *src, const float *__restrict__ up,
        float *dst, size_t n, const float *__restrict__ signs, int inverse, float scale, tc_act act) {
    tc_pdl_trigger();
    tc_pdl_wait();
    constexpr int B = 256 << M;
    __shared__ __align__(16) float sh[B];
    const int t = threadIdx.x;
    const size_t nbr = n / B;
    const size_t row = blockIdx.x / nbr, off = (blockIdx.x % nbr) * (size_t)B;
    float v[8], w8[8], s8[8], si[8];
    fr_ld8(v, src + row * n + off + 8 * t);
    if (up) fr_ld8(w8, up + row * n + off + 8 * t);
    if (signs && !inverse) fr_ld8(s8, signs + off + 8 * t);
    if (signs && inverse) fr_ld_high<M>(si, signs + off, t);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        if (up) v[k] = v[k] / (1.0f + expf(-v[k])) * w8[k];
        if (signs && !inverse) v[k] = v[k] * s8[k];
    }
    float u[8];
    fr_transform<M>(v, u, sh, t);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        u[k] = u[k] * scale;
        if (signs && inverse) u[k] = u[k] * si[k];
    }
    fr_st_high<M>(dst + row * n + off, u, t);
    if (act.q) {
        fr_st_high<M>(sh, u, t); /* the thread's own slots: no barrier needed before */
        __syncthreads();
        fr_quant(sh, B, act, row, n, (int)(off / 128));
    }
}

template <int M>
static void launch_fwht_reg(const float *src, const float *up, float *x, size_t ctas, size_t n,
                            const float *signs, int inverse, float scale, const tc_act &act) {
    tc_launch(k_fwht_reg<M>, dim3((unsigned)ctas), dim3(32u << M), 0, 1, src, up, x, n, signs,
              inverse, scale, act);
}

void tc_fwht(const float *src, const float *up, float *x, size_t rows, size_t n, size_t block,
             const float *signs, int inverse, const tc_act *act) {
    if (!rows || !n) return;
    size_t ctas = rows * (n / block);
    if (block < 2 || block > 8192 || n % block || ctas > 0x7fffffffu) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    tc_act none = {};
    const float scale = 1.0f / sqrtf((float)block);
    const int M = fr_m_of(block);
    if (M >= 0 && !tc_ops_old(tc_cur) && fr_al16(src) && fr_al16(up) && fr_al16(x) && fr_al16(signs)) {
        const tc_act &a = act ? *act : none;
        switch (M) {
        case 0: launch_fwht_reg<0>(src, up, x, ctas, n, signs, inverse, scale, a); break;
        case 1: launch_fwht_reg<1>(src, up, x, ctas, n, signs, inverse, scale, a); break;
        case 2: launch_fwht_reg<2>(src, up, x, ctas, n, signs, inverse, scale, a); break;
        default: launch_fwht_reg<3>(src, up, x, ctas, n, signs, inverse, scale, a); break;
        }
        return;
    }
    int threads = block >= 1024 ? 512 : (int)(block / 2 < 32 ? 32 : block / 2);
    size_t smem = block * sizeof(float);
    if (tc_attr_once((const void *)k_fwht, 8192 * 4))
        cudaFuncSetAttribute(k_fwht, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192 * 4);
    tc_launch(k_fwht, dim3((unsigned)ctas), dim3((unsigned)threads), smem, 1, src, up, x, n,
              (int)block, signs, inverse, scale, act ? *act : none);
}

extern "C" void tc_hadamard(tc_ctx *cx, float *x, size_t rows, size_t n, size_t block, const float *signs,
                            int inverse) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_HADAMARD);
    if (signs) tc_fwht(x, NULL, x, rows, n, block, signs, inverse, NULL);
}

extern "C" void tc_hadamard_q(tc_ctx *cx, float *x, size_t rows, size_t n, size_t block, const float *signs,
                              const tc_act *act) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_HADAMARD);
    if (!rows || !tc_act_ok(act, rows, n)) return;
    const bool fused = tc_act_in_fwht(act, rows, n, block, signs);
    if (signs) tc_fwht(x, NULL, x, rows, n, block, signs, 0, fused ? act : NULL);
    if (act && !fused) tc_quantize(tc_cur, x, n, act);
}
