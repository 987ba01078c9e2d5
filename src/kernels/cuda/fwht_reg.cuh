/*
 * fwht_reg.cuh - the blockwise Hadamard transform with the block in registers, for
 * the decode-sized kernels (tc_hadamard.cu k_fwht_reg, tc_norm.cu k_site_reg), and
 * small helpers they share (8-float loads and stores, the cluster barrier halves,
 * the quantisation of a chunk held in shared memory).
 *
 * A block of B = 256 << M inputs (M = 0..3) is held by T = B / 8 threads (1..8 warps),
 * 8 inputs per thread, in one of two layouts:
 *   low:  thread t holds v[s] = element 8t + s (s < 8): the butterfly stages h = 1, 2, 4
 *         are inside the thread, h = 8 .. 128 across the lanes of its warp (lane bit
 *         h / 8; a warp holds 256 consecutive elements): fr_low;
 *   high: (M > 0, after one trip through shared memory: fr_to_high) thread t holds
 *         u[w * FC + c] = element 256 w + FC t + c for w < 2^M, c < FC = 8 >> M, so the
 *         stages h = 256 .. B/2 (the bits of w) are inside the thread again: fr_high.
 *         For M = 0 the high layout is the low one (FC = 8).
 * Every stage runs in increasing h on the pairs (x0 at the lower index, x1 at the
 * upper): x0 + x1 to the lower, x0 - x1 to the upper. These are the float operations,
 * in the same order, of the plain shared-memory butterfly (k_fwht), so the results
 * are bit-identical to it (gdn_step_out's cluster transform too).
 */
#ifndef TERN_KERNELS_CUDA_FWHT_REG_CUH
#define TERN_KERNELS_CUDA_FWHT_REG_CUH

#include "kernels/cuda/internal.cuh"

/* 8 consecutive floats (16-byte aligned) to / from registers */
__device__ __forceinline__ void fr_ld8(float v[8], const float *p) {
    const float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void fr_st8(float *p, const float v[8]) {
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

/* Stages h = 1 .. 128 on the low layout (every lane of the warp takes part). */
__device__ __forceinline__ void fr_low(float v[8], int lane) {
#pragma unroll
    for (int h = 1; h < 8; h <<= 1)
#pragma unroll
        for (int s = 0; s < 8; s++)
            if (!(s & h)) {
                const float x0 = v[s], x1 = v[s + h];
                v[s] = x0 + x1;
                v[s + h] = x0 - x1;
            }
#pragma unroll
    for (int hl = 1; hl < 32; hl <<= 1)
#pragma unroll
        for (int s = 0; s < 8; s++) {
            /* lower lane (bit clear): x0 = v, x1 = o; upper: x0 = o, x1 = v */
            const float o = __shfl_xor_sync(0xffffffffu, v[s], hl);
            v[s] = (lane & hl) ? o - v[s] : v[s] + o;
        }
}

/* The 8 floats of thread t in the high layout of a block at p (shared or global
 * memory, 16-byte aligned), loaded / stored with FC-float vectors. */
template <int M>
__device__ __forceinline__ void fr_ld_high(float u[8], const float *p, int t) {
    constexpr int FC = 8 >> M;
#pragma unroll
    for (int w = 0; w < (1 << M); w++) {
        const float *q = p + 256 * w + FC * t;
        if (FC == 8) {
            fr_ld8(u, q);
        } else if (FC == 4) {
            const float4 a = *(const float4 *)q;
            u[4 * w] = a.x; u[4 * w + 1] = a.y; u[4 * w + 2] = a.z; u[4 * w + 3] = a.w;
        } else if (FC == 2) {
            const float2 a = *(const float2 *)q;
            u[2 * w] = a.x; u[2 * w + 1] = a.y;
        } else {
            u[w] = q[0];
        }
    }
}
template <int M>
__device__ __forceinline__ void fr_st_high(float *p, const float u[8], int t) {
    constexpr int FC = 8 >> M;
#pragma unroll
    for (int w = 0; w < (1 << M); w++) {
        float *q = p + 256 * w + FC * t;
        if (FC == 8) fr_st8(q, u);
        else if (FC == 4) *(float4 *)q = make_float4(u[4 * w], u[4 * w + 1], u[4 * w + 2], u[4 * w + 3]);
        else if (FC == 2) *(float2 *)q = make_float2(u[2 * w], u[2 * w + 1]);
        else q[0] = u[w];
    }
}

/* Stages h = 256 .. B/2 on the high layout (nothing for M = 0). */
template <int M>
__device__ __forceinline__ void fr_high(float u[8]) {
    constexpr int FC = 8 >> M;
#pragma unroll
    for (int hh = 1; hh < (1 << M); hh <<= 1)
#pragma unroll
        for (int w = 0; w < (1 << M); w++)
            if (!(w & hh))
#pragma unroll
                for (int c = 0; c < FC; c++) {
                    const float x0 = u[w * FC + c], x1 = u[(w + hh) * FC + c];
                    u[w * FC + c] = x0 + x1;
                    u[(w + hh) * FC + c] = x0 - x1;
                }
}

/* The whole transform of the block (no scale): v in the low layout in, u in the
 * high layout out. sh: the block's B floats of shared memory (M > 0; unused for
 * M = 0). Every thread of the CTA calls it (one __syncthreads when M > 0). Each
 * thread's high-layout positions are read only by itself, so the caller may write
 * its results back there without another barrier. */
template <int M>
__device__ __forceinline__ void fr_transform(float v[8], float u[8], float *sh, int t) {
    fr_low(v, t & 31);
    if (M == 0) {
#pragma unroll
        for (int k = 0; k < 8; k++) u[k] = v[k];
        return;
    }
    fr_st8(sh + 8 * t, v);
    __syncthreads();
    fr_ld_high<M>(u, sh, t);
    fr_high<M>(u);
}

/* Quantise the len floats (len % 128 == 0) at sh (shared memory, final values) into
 * act's row `row` (n inputs), 128-blocks blk0, blk0 + 1, ...: warp w takes the
 * 128-blocks w, w + warps, ..., lane l inputs 4l..4l+3 (tc_actq_block's layout), so
 * the bytes are tc_quantize's of the same floats. */
__device__ __forceinline__ void fr_quant(const float *sh, int len, const tc_act &act, size_t row,
                                         size_t n, int blk0) {
    const int lane = threadIdx.x & 31, nw = (int)(blockDim.x >> 5), nb = (int)(n >> 7);
    for (int w = (int)(threadIdx.x >> 5); w < len / 128; w += nw) {
        const float4 q = *(const float4 *)(sh + w * 128 + lane * 4);
        float v[4] = {q.x, q.y, q.z, q.w};
        tc_actq_block(v, lane, act.q + row * n * 2, act.sx + row * (size_t)nb,
                      act.corr + row * (size_t)(n >> 5), blk0 + w);
    }
}

/* The two halves of the thread-block cluster barrier (sm_90), every thread of every
 * CTA of the cluster calling each in turn: arrive (release: this thread's earlier
 * shared-memory writes become visible to the cluster's CTAs that wait), then wait
 * (acquire). Work between the two overlaps the barrier. */
__device__ __forceinline__ void fr_cluster_arrive(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void fr_cluster_arrive_relaxed(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void fr_cluster_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

/* M for a block of b floats (256 << M, M = 0..3), -1 otherwise */
static inline int fr_m_of(size_t b) {
    return b == 256 ? 0 : b == 512 ? 1 : b == 1024 ? 2 : b == 2048 ? 3 : -1;
}
static inline bool fr_al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

#endif
