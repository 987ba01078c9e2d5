/*
 * gdn_state.cuh - loads and stores of the GDN recurrent state S [n_v][dk][dv], fp32 or
 * bf16 (tc_gdn_args / tc_gdn_step_args .state_bf16; the model parameter gdn_state). The
 * kernels read S once into fp32 registers and write it once: bf16 rounds to nearest even
 * (__float2bfloat16_rn, as tern_f32_to_bf16 on the CPU). Element e of the state is at
 * byte e*4 (fp32) or e*2 (bf16) of the same base. Also the prefill kernels' conv-state
 * shift (the scan's and the chunked form's). Include after internal.cuh.
 */
#ifndef TERN_KERNELS_CUDA_GDN_STATE_CUH
#define TERN_KERNELS_CUDA_GDN_STATE_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* bytes per state element */
__device__ __forceinline__ size_t gdn_ses(bool bf) { return bf ? 2 : 4; }
/* one element at byte address p */
__device__ __forceinline__ float gdn_ldb(const uint8_t *p, bool bf) {
    if (bf) return __uint_as_float((uint32_t)*(const uint16_t *)p << 16);
    return *(const float *)p;
}
__device__ __forceinline__ void gdn_stb(uint8_t *p, float v, bool bf) {
    if (bf) *(__nv_bfloat16 *)p = __float2bfloat16_rn(v);
    else *(float *)p = v;
}
/* four consecutive elements at p (8-byte aligned for bf16, 16-byte for fp32) */
__device__ __forceinline__ float4 gdn_ld4b(const uint8_t *p, bool bf) {
    if (bf) {
        const uint2 u = *(const uint2 *)p;
        return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                           __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
    }
    return *(const float4 *)p;
}
__device__ __forceinline__ void gdn_st4b(uint8_t *p, float4 v, bool bf) {
    if (bf) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        uint2 u;
        u.x = *(const uint32_t *)&lo;
        u.y = *(const uint32_t *)&hi;
        *(uint2 *)p = u;
    } else {
        *(float4 *)p = v;
    }
}

/* four values as a bf16 store and load would give them back */
__device__ __forceinline__ float4 gdn_rnd4b(float4 v) {
    return make_float4(__bfloat162float(__float2bfloat16_rn(v.x)), __bfloat162float(__float2bfloat16_rn(v.y)),
                       __bfloat162float(__float2bfloat16_rn(v.z)), __bfloat162float(__float2bfloat16_rn(v.w)));
}

/* The prefill call's conv-state shift: conv state <- the last K-1 inputs of (state ++ the
 * call's qkv rows), the channels split over all CTAs of the grid, each CTA its share
 * (ascending i: a slot read from the old state lies at or above i). After the conv
 * kernel that reads the old state has completed (tc_pdl_wait). */
__device__ __forceinline__ void gdn_conv_shift(const tc_gdn_args &a, int C) {
    if (a.conv_k <= 1) return;
    const int K = a.conv_k, T = a.rows, nb = (int)(gridDim.x * gridDim.y);
    const int bi = (int)(blockIdx.y * gridDim.x + blockIdx.x);
    const int c0 = (int)((long long)C * bi / nb), c1 = (int)((long long)C * (bi + 1) / nb);
    for (int ch = c0 + (int)threadIdx.x; ch < c1; ch += (int)blockDim.x)
        for (int i = 0; i < K - 1; i++) {
            const int src = T - (K - 1) + i;
            a.conv_state[(size_t)i * C + ch] =
                src >= 0 ? a.qkv[(size_t)src * C + ch] : a.conv_state[(size_t)(K - 1 + src) * C + ch];
        }
}

#endif
