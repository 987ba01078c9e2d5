/*
 * tc_attention.cu - the attention mixer's position-dependent ops: NEOX RoPE, the
 * KV-cache store, causal attention (one CTA per query row and head, online
 * softmax) and split-K decode attention (flash-decoding, merge + sigmoid gate).
 * The cache is f32, f16, bf16 or q8_0 (K and V each; TC_KV_*), read in its stored
 * type and converted to float in registers; the layouts and rounding are the CPU's
 * (docs/formats.md "KV cache storage", src/kernels/cpu/model_ops.c tern_kv_store).
 */
#include "kernels/cuda/internal.cuh"

#include <cuda_bf16.h>
#include <limits.h>
#include <math.h>

#include <type_traits>

__global__ void k_rope(float *__restrict__ x, size_t rows, size_t stride, int nh, int hd, int rot,
                       int pos0, const int *__restrict__ dpos, float theta) {
    tc_pdl_trigger();
    tc_pdl_wait();
    const int half = rot / 2;
    if (dpos) pos0 = *dpos;
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= rows * (size_t)half) return;
    size_t r = id / half;
    int i = (int)(id % half);
    double inv = pow((double)theta, -2.0 * i / rot);
    double ang = (double)(pos0 + (int)r) * inv;
    float cs = (float)cos(ang), sn = (float)sin(ang);
    for (int h = 0; h < nh; h++) {
        float *v = x + r * stride + (size_t)h * hd;
        float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * cs - x1 * sn;
        v[i + half] = x1 * cs + x0 * sn;
    }
}

extern "C" void tc_rope(float *x, size_t rows, size_t stride, int n_heads, int hd, int rot,
                        int pos0, float theta) {
    TC_PROF(TC_FAM_ROPE);
    size_t total = rows * (size_t)(rot / 2);
    if (!total) return;
    tc_launch(k_rope, dim3(tc_blocks(total, 128)), dim3(128), 0, 1, x, rows, stride, n_heads, hd, rot,
              pos0, tc_dyn_pos, theta);
}

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
template <typename KT, typename L> static bool att_dispatch_v(int vt, L &&l) {
    switch (vt) {
    case TC_KV_F32: l((KT *)0, (float *)0); return true;
    case TC_KV_F16: l((KT *)0, (__half *)0); return true;
    case TC_KV_BF16: l((KT *)0, (__nv_bfloat16 *)0); return true;
    case TC_KV_Q8_0: l((KT *)0, (att_q8 *)0); return true;
    default: return false;
    }
}
template <typename L> static bool att_dispatch(int kt, int vt, L &&l) {
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
static bool att_type_ok(int t, int hd) {
    return t == TC_KV_F32 || t == TC_KV_F16 || t == TC_KV_BF16 ||
           (t == TC_KV_Q8_0 && hd > 0 && hd % TC_KV_Q8_BLOCK == 0);
}
static bool att_types_ok(int kt, int vt, int hd) { return att_type_ok(kt, hd) && att_type_ok(vt, hd); }

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

/* One CTA per (query row, head): each warp walks positions w, w+4, ... with an
 * online softmax, then the warps' partial states are merged. */
template <typename KT, typename VT>
__global__ void __launch_bounds__(ATT_WARPS * 32) k_attention(const float *__restrict__ q, size_t qs,
                            const KT *__restrict__ kc, const VT *__restrict__ vc,
                            float *__restrict__ out, int pos0, const int *__restrict__ dpos,
                            int nh, int nkv, int hd, float scale) {
    tc_pdl_trigger();
    tc_pdl_wait();
    if (dpos) pos0 = *dpos;
    const int i = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    att_warp w;
    att_begin(w, q + (size_t)i * qs + (size_t)h * hd, hd, lane);
    att_walk(w, kc, vc, warp, pos0 + i + 1, (size_t)nkv * hd, h / (nh / nkv), hd, scale, lane);
    att_merge_warps(w, hd, out + (size_t)i * nh * hd + (size_t)h * hd, true, NULL, NULL);
}

extern "C" void tc_attention(const float *q, size_t q_stride, const void *kcache,
                             const void *vcache, int k_type, int v_type, float *out, int rows,
                             int pos0, int n_head, int n_head_kv, int head_dim, float scale) {
    TC_PROF(TC_FAM_ATTENTION);
    if (rows <= 0) return;
    if (head_dim > ATT_EPL * 32 || n_head > 65535 || !att_types_ok(k_type, v_type, head_dim)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    dim3 grid((unsigned)rows, (unsigned)n_head);
    att_dispatch(k_type, v_type, [&](auto *k0, auto *v0) {
        using KT = typename std::remove_pointer<decltype(k0)>::type;
        using VT = typename std::remove_pointer<decltype(v0)>::type;
        tc_launch(k_attention<KT, VT>, grid, dim3(ATT_WARPS * 32), 0, 1,
            q, q_stride, (const KT *)kcache, (const VT *)vcache, out, pos0, tc_dyn_pos, n_head,
            n_head_kv, head_dim, scale);
    });
}

/* ------------------------------------------------ split-K decode attention */

/* Positions per split: ATT_SPAN_MIN (each of the 4 warps walks 8 positions, so a short
 * cache still spreads over many CTAs; with 256 a 640-position step took 135 us for 24
 * heads on the H200), growing with the cache so there are at most ~ATT_MAX_SPLITS splits
 * (the partials' workspace and the merge stay bounded at 262,144 positions). */
#define ATT_SPAN_MIN 32
#define ATT_MAX_SPLITS 2048

/* CTA (head, split): the split's span positions, its merged (M, L, acc)
 * written to part[h][split] as hd + 2 floats (l = 0: nothing there). */
template <typename KT, typename VT>
__global__ void __launch_bounds__(ATT_WARPS * 32) k_attn_split(const float *__restrict__ q,
        const KT *__restrict__ kc, const VT *__restrict__ vc, float *__restrict__ part,
        int pos0, const int *__restrict__ dpos, int nh, int nkv, int hd, float scale, int splits, int span) {
    tc_pdl_trigger();
    tc_pdl_wait();
    if (dpos) pos0 = *dpos;
    const int h = blockIdx.x, sp = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int np = pos0 + 1, p0 = sp * span, p1 = min(np, p0 + span);
    float *pp = part + ((size_t)h * splits + sp) * (size_t)(hd + 2);
    if (p0 >= np) {
        if (threadIdx.x == 0) pp[1] = 0.0f; /* l = 0: nothing here */
        return;
    }
    att_warp w;
    att_begin(w, q + (size_t)h * hd, hd, lane);
    att_walk(w, kc, vc, p0 + warp, p1, (size_t)nkv * hd, h / (nh / nkv), hd, scale, lane);
    att_merge_warps(w, hd, pp + 2, false, pp, pp + 1);
}

/* CTA per head: merge the splits' (m, l, acc), then the sigmoid gate. */
__global__ void k_attn_merge(const float *__restrict__ part, const float *__restrict__ gate,
                             float *__restrict__ out, int pos0, const int *__restrict__ dpos,
                             int hd, int splits, int span) {
    tc_pdl_trigger();
    tc_pdl_wait();
    if (dpos) pos0 = *dpos;
    const int h = blockIdx.x;
    const int used = min(splits, pos0 / span + 1);
    const float *pp = part + (size_t)h * splits * (size_t)(hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < used; s++)
        if (pp[(size_t)s * (hd + 2) + 1] > 0) M = fmaxf(M, pp[(size_t)s * (hd + 2)]);
    float L = 0.0f;
    for (int s = 0; s < used; s++) {
        const float *e = pp + (size_t)s * (hd + 2);
        if (e[1] > 0) L += e[1] * expf(e[0] - M);
    }
    for (int j = threadIdx.x; j < hd; j += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < used; s++) {
            const float *e = pp + (size_t)s * (hd + 2);
            if (e[1] > 0) v += e[2 + j] * expf(e[0] - M);
        }
        v /= L;
        if (gate) v *= tc_sigmoid(gate[(size_t)h * hd + j]);
        out[(size_t)h * hd + j] = v;
    }
}

extern "C" void tc_attention_decode(const float *q, const void *kcache, const void *vcache,
                                    int k_type, int v_type, const float *gate, float *out,
                                    int pos0, int max_len, int n_head, int n_head_kv,
                                    int head_dim, float scale) {
    TC_PROF(TC_FAM_ATTENTION);
    if (head_dim > ATT_EPL * 32 || head_dim < 1 || n_head < 1 || n_head_kv < 1 ||
        !att_types_ok(k_type, v_type, head_dim) ||
        n_head % n_head_kv || max_len < 1 || (!tc_dyn_pos && (pos0 < 0 || pos0 >= max_len))) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    int span = ATT_SPAN_MIN;
    while ((max_len + span - 1) / span > ATT_MAX_SPLITS) span *= 2;
    const int splits = (max_len + span - 1) / span;
    if (splits > 65535) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    float *part = (float *)tc_workspace(2, (size_t)n_head * splits * (head_dim + 2) * sizeof(float));
    if (!part) return;
    dim3 grid((unsigned)n_head, (unsigned)splits);
    att_dispatch(k_type, v_type, [&](auto *k0, auto *v0) {
        using KT = typename std::remove_pointer<decltype(k0)>::type;
        using VT = typename std::remove_pointer<decltype(v0)>::type;
        tc_launch(k_attn_split<KT, VT>, grid, dim3(ATT_WARPS * 32), 0, 1,
            q, (const KT *)kcache, (const VT *)vcache, part, pos0, tc_dyn_pos, n_head, n_head_kv,
            head_dim, scale, splits, span);
    });
    tc_launch(k_attn_merge, dim3((unsigned)n_head), dim3((head_dim + 31) / 32 * 32), 0, 1,
        part, gate, out, pos0, tc_dyn_pos, head_dim, splits, span);
}

__global__ void k_kv_store(void *__restrict__ kc, void *__restrict__ vc, int kt, int vt,
                           const float *__restrict__ k, const float *__restrict__ v, size_t kvw,
                           size_t total, int pos0, const int *__restrict__ dpos) {
    tc_pdl_trigger();
    tc_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* over rows*kvw */
    if (i >= total) return;
    if (dpos) pos0 = *dpos;
    size_t o = (size_t)pos0 * kvw + i; /* q8_0: kvw % 32 == 0, so a warp is one block */
    att_store(kc, kt, o, k[i]);
    att_store(vc, vt, o, v[i]);
}

extern "C" void tc_kv_store(void *kc, void *vc, int k_type, int v_type, const float *k,
                            const float *v, size_t kvw, size_t rows, int pos0) {
    TC_PROF(TC_FAM_MOVERS);
    size_t total = rows * kvw;
    if (!total) return;
    /* whole warps per 32 values (256-thread blocks, total a multiple of 32): the q8_0
     * store's warp is one block of the row */
    if (!att_types_ok(k_type, v_type, kvw > (size_t)INT_MAX ? 0 : (int)kvw)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    tc_launch(k_kv_store, dim3(tc_blocks(total, 256)), dim3(256), 0, 1, kc, vc, k_type, v_type, k, v,
              kvw, total, pos0, tc_dyn_pos);
}

/* ------------------------------------------------- decode prologue (fused) */

/* Warp h < nh: q head h; else kv head h - nh (k normed and roped into the cache,
 * v copied). The head sits in registers (ATT_EPL per lane) for the norm and in
 * shared memory for RoPE's pairs (i, i + rot/2). */
__global__ void __launch_bounds__(32) k_attn_prep(tc_attn_prep_args a, const int *__restrict__ dpos) {
    tc_pdl_trigger();
    tc_pdl_wait();
    __shared__ float sh[ATT_EPL * 32];
    const int pos = dpos ? *dpos : a.pos0;
    const int h = blockIdx.x, lane = threadIdx.x, hd = a.head_dim;
    const bool isq = h < a.n_head;
    const int kh = h - a.n_head;
    const size_t kvw = (size_t)a.n_head_kv * hd;
    const float *src = isq ? a.qg + (size_t)h * (a.gated ? 2 * hd : hd) : a.k + (size_t)kh * hd;
    const float *gain = isq ? a.q_norm : a.k_norm;
    float c[ATT_EPL], g[ATT_EPL];
    float ss = 0;
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) {
        int j = lane + 32 * e;
        c[e] = j < hd ? src[j] : 0.0f;
        g[e] = j < hd ? gain[j] : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) ss += c[e] * c[e];
    ss = tc_warp_sum(ss);
    const float inv = (float)(1.0 / sqrt((double)ss / hd + (double)a.eps));
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) {
        int j = lane + 32 * e;
        if (j < hd) sh[j] = c[e] * inv * g[e];
    }
    if (isq && a.gated)
        for (int j = lane; j < hd; j += 32) a.gate_out[(size_t)h * hd + j] = src[hd + j];
    __syncwarp();
    const int rot = a.rope_dims, half = rot / 2;
    for (int i = lane; i < half; i += 32) {
        double iv = pow((double)a.theta, -2.0 * i / rot);
        double ang = (double)pos * iv;
        float cs = (float)cos(ang), sn = (float)sin(ang);
        float x0 = sh[i], x1 = sh[i + half];
        sh[i] = x0 * cs - x1 * sn;
        sh[i + half] = x1 * cs + x0 * sn;
    }
    __syncwarp();
    if (isq) {
        float *dst = a.q_out + (size_t)h * hd;
        for (int j = lane; j < hd; j += 32) dst[j] = sh[j];
    } else {
        const size_t o = (size_t)pos * kvw + (size_t)kh * hd;
        const float *vs = a.v + (size_t)kh * hd;
        /* q8_0 (hd % 32 == 0): every lane runs every iteration, block j / 32 */
        for (int j = lane; j < hd; j += 32) {
            att_store(a.kcache, a.k_type, o + j, sh[j]);
            att_store(a.vcache, a.v_type, o + j, vs[j]);
        }
    }
}

extern "C" void tc_attn_prep(const tc_attn_prep_args *a) {
    TC_PROF(TC_FAM_ROPE);
    if (a->head_dim < 1 || a->head_dim > ATT_EPL * 32 || a->n_head < 1 || a->n_head_kv < 1 ||
        a->rope_dims < 0 || a->rope_dims > a->head_dim || a->rope_dims % 2 ||
        !att_types_ok(a->k_type, a->v_type, a->head_dim) ||
        (!tc_dyn_pos && a->pos0 < 0)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    tc_launch(k_attn_prep, dim3((unsigned)(a->n_head + a->n_head_kv)), dim3(32), 0, 1, *a, tc_dyn_pos);
}
