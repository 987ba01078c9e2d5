/*
 * attn.cuh - shared by the attention files (tc_attn_prefill.cu, tc_attn_decode.cu,
 * tc_attn_prep.cu, tc_kv_store.cu): the KV cache element types (f32, f16, bf16, q8_0;
 * TC_KV_*) read in their stored type and converted to float in registers, written
 * with the CPU's layouts and rounding (docs/formats.md "KV cache storage",
 * src/kernels/cpu/model_ops.c tern_kv_store), the type dispatch, and the online-softmax
 * walk of one warp that the causal and the old split-K kernels share.
 */
#ifndef TERN_KERNELS_CUDA_ATTN_CUH
#define TERN_KERNELS_CUDA_ATTN_CUH

#include "kernels/cuda/internal.cuh"

#include <cuda_bf16.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

/* ------------------------------------------------------------- attention */

#define ATT_WARPS 4
#define ATT_EPL 8 /* head_dim <= 256 */

/* Cache elements (float, __half, __nv_bfloat16, att_q8: TC_KV_F32/F16/BF16/Q8_0).
 *
 * Every reader and writer addresses the cache by element index: value i of a layer's
 * cache [n_ctx][kvw] is i = p * kvw + head * hd + j (att_kv_index). att_kv(cache, i)
 * reads it as a float, att_store(cache, t, i, x) writes it in type t. */

/* One q8_0 block (formats.md): fp16 scale d, then 32 int8 q; value = q * d. 34 bytes,
 * 2-byte aligned, so a row of kvw values is kvw / 32 blocks (blocks never straddle
 * heads: q8_0 needs hd % 32 == 0, checked by att_types_ok). */
struct att_q8 {
    unsigned short d; /* fp16 bits */
    int8_t q[TC_KV_Q8_BLOCK];
};
static_assert(sizeof(att_q8) == 34 && alignof(att_q8) == 2, "q8_0 block is 34 bytes");

/* The one place q8_0 element arithmetic lives: the block of element i and its
 * position in it. Value i of a q8_0 array = blk[i / 32].q[i % 32] * blk[i / 32].d. */
template <typename B> __device__ __forceinline__ B &att_q8_block(B *blk, size_t i) {
    return blk[i / TC_KV_Q8_BLOCK]; /* B: att_q8 or const att_q8 */
}
__device__ __forceinline__ int att_q8_slot(size_t i) { return (int)(i % TC_KV_Q8_BLOCK); }

__device__ __forceinline__ float att_f(float x) { return x; }
__device__ __forceinline__ float att_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float att_f(__nv_bfloat16 x) { return __bfloat162float(x); }

/* element i of a cache of element type T, as a float */
template <typename T> __device__ __forceinline__ float att_kv(const T *__restrict__ c, size_t i) {
    return att_f(c[i]);
}
__device__ __forceinline__ float att_kv(const att_q8 *__restrict__ c, size_t i) {
    const att_q8 &b = att_q8_block(c, i);
    return __half2float(__ushort_as_half(b.d)) * (float)b.q[att_q8_slot(i)];
}

/* Index of value 0 of head kvh at position p (rows of kvw values). */
__device__ __forceinline__ size_t att_kv_index(int p, size_t kvw, int kvh, int hd) {
    return (size_t)p * kvw + (size_t)kvh * hd;
}

/* x stored as element i of a cache of type t (TC_KV_*; t is uniform per launch).
 * f16 / bf16 round to nearest even. q8_0: called by all 32 lanes of a warp together,
 * lane l with element i0 + l, i0 a multiple of 32 (the warp holds one block): the
 * CPU's q8_block exactly - d = amax / 127 rounded to fp16, q = rint(x * (1 / d)) with
 * that stored d (0 when d is 0), clamped to [-127, 127]; every step correctly rounded
 * (__fdiv_rn, __frcp_rn, __fmul_rn, rintf: ties to even like nearbyintf). */
__device__ __forceinline__ void att_store(void *__restrict__ cache, int t, size_t i, float x) {
    if (t == TC_KV_Q8_0) {
        const float amax = tc_warp_max(fabsf(x));
        const __half dh = __float2half_rn(__fdiv_rn(amax, 127.0f));
        const float d = __half2float(dh);
        const float id = d > 0.0f ? __frcp_rn(d) : 0.0f;
        const float r = fminf(fmaxf(rintf(__fmul_rn(x, id)), -127.0f), 127.0f);
        att_q8 &b = att_q8_block((att_q8 *)cache, i);
        if (att_q8_slot(i) == 0) b.d = __half_as_ushort(dh);
        b.q[att_q8_slot(i)] = (int8_t)__float2int_rn(r);
    } else if (t == TC_KV_F16) {
        ((__half *)cache)[i] = __float2half_rn(x);
    } else if (t == TC_KV_BF16) {
        ((__nv_bfloat16 *)cache)[i] = __float2bfloat16_rn(x);
    } else {
        ((float *)cache)[i] = x;
    }
}

/* l((KT *)0, (VT *)0) for the element types of TC_KV_* kt, vt; false (nothing
 * called) for another type. */
template <typename KT, typename L> static inline bool att_dispatch_v(int vt, L &&l) {
    switch (vt) {
    case TC_KV_F32: l((KT *)0, (float *)0); return true;
    case TC_KV_F16: l((KT *)0, (__half *)0); return true;
    case TC_KV_BF16: l((KT *)0, (__nv_bfloat16 *)0); return true;
    case TC_KV_Q8_0: l((KT *)0, (att_q8 *)0); return true;
    default: return false;
    }
}
template <typename L> static inline bool att_dispatch(int kt, int vt, L &&l) {
    switch (kt) {
    case TC_KV_F32: return att_dispatch_v<float>(vt, l);
    case TC_KV_F16: return att_dispatch_v<__half>(vt, l);
    case TC_KV_BF16: return att_dispatch_v<__nv_bfloat16>(vt, l);
    case TC_KV_Q8_0: return att_dispatch_v<att_q8>(vt, l);
    default: return false;
    }
}
/* t is a type the kernels read and write, for rows whose heads are hd values
 * (q8_0: hd a multiple of 32, so a block never straddles heads) */
static inline bool att_type_ok(int t, int hd) {
    return t == TC_KV_F32 || t == TC_KV_F16 || t == TC_KV_BF16 ||
           (t == TC_KV_Q8_0 && hd > 0 && hd % TC_KV_Q8_BLOCK == 0);
}
static inline bool att_types_ok(int kt, int vt, int hd) { return att_type_ok(kt, hd) && att_type_ok(vt, hd); }

/* One warp's online-softmax state: running max m, sum l, weighted V (element
 * lane + 32e of the head in acc[e]), and its copy of q. */
struct att_warp {
    float q[ATT_EPL], acc[ATT_EPL];
    float m, l;
};

__device__ __forceinline__ void att_begin(att_warp &w, const float *__restrict__ qp, int hd,
                                          int lane) {
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) {
        int j = lane + 32 * e;
        w.q[e] = j < hd ? qp[j] : 0.0f;
        w.acc[e] = 0.0f;
    }
    w.m = -INFINITY;
    w.l = 0.0f;
}

/* Positions p0, p0 + ATT_WARPS, ... < p1 of head kvh folded into the warp's state. */
template <typename KT, typename VT>
__device__ __forceinline__ void att_walk(att_warp &w, const KT *__restrict__ kc,
                                         const VT *__restrict__ vc, int p0, int p1, size_t kvw,
                                         int kvh, int hd, float scale, int lane) {
    for (int p = p0; p < p1; p += ATT_WARPS) {
        const size_t i0 = att_kv_index(p, kvw, kvh, hd);
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < ATT_EPL; e++) {
            int j = lane + 32 * e;
            if (j < hd) s = fmaf(w.q[e], att_kv(kc, i0 + j), s);
        }
        s = tc_warp_sum(s) * scale;
        float mn = fmaxf(w.m, s);
        float c = expf(w.m - mn), pw = expf(s - mn);
        w.l = w.l * c + pw;
#pragma unroll
        for (int e = 0; e < ATT_EPL; e++) {
            int j = lane + 32 * e;
            if (j < hd) w.acc[e] = w.acc[e] * c + pw * att_kv(vc, i0 + j);
        }
        w.m = mn;
    }
}

/* The CTA's ATT_WARPS warp states merged: dst[j] = sum_w acc_w[j] e^(m_w - M),
 * divided by L when normalise; *M_out, *L_out (when not NULL) get M and L =
 * sum_w l_w e^(m_w - M). Warps that saw no position (l = 0) are left out. One
 * __syncthreads; every thread of the CTA calls it. */
__device__ __forceinline__ void att_merge_warps(const att_warp &w, int hd, float *__restrict__ dst,
                                                bool normalise, float *M_out, float *L_out) {
    __shared__ float s_m[ATT_WARPS], s_l[ATT_WARPS];
    __shared__ float s_acc[ATT_WARPS][ATT_EPL * 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) {
        s_m[warp] = w.m;
        s_l[warp] = w.l;
    }
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) s_acc[warp][lane + 32 * e] = w.acc[e];
    __syncthreads();
    float M = -INFINITY;
    for (int k = 0; k < ATT_WARPS; k++)
        if (s_l[k] > 0) M = fmaxf(M, s_m[k]);
    float L = 0.0f;
    for (int k = 0; k < ATT_WARPS; k++)
        if (s_l[k] > 0) L += s_l[k] * expf(s_m[k] - M);
    for (int j = threadIdx.x; j < hd; j += blockDim.x) {
        float v = 0.0f;
        for (int k = 0; k < ATT_WARPS; k++)
            if (s_l[k] > 0) v += s_acc[k][j] * expf(s_m[k] - M);
        dst[j] = normalise ? v / L : v;
    }
    if (threadIdx.x == 0) {
        if (M_out) *M_out = M;
        if (L_out) *L_out = L;
    }
}

#endif
