/*
 * tc_attn_prefill.cu - causal attention over the cache (prefill chunks): the tensor-core
 * kernel (f16 caches, head dims 64/128/256; k_attn_flash below) and the plain one (one
 * CTA per query row and head, each warp walks positions with an online softmax, then the
 * warps' partial states are merged): the reference and the fallback.
 */
#include "kernels/cuda/attn.cuh"
#include "kernels/cuda/ptx.cuh"

#include <type_traits>

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

/* ------------------------------------------ tensor-core causal attention (prefill)
 *
 * k_attn_flash<HD>: f16 K/V caches (the default type), head dims 64 / 128 / 256. CTA =
 * (64 query rows, one query head), 4 warps of 16 rows each; the query tile is converted
 * to f16 once into shared memory; K and V rows stream in tiles of 32 positions through
 * a 2-stage cp.async ring. Per tile: S = Q K^T with mma.sync m16n8k16 (f16 in, f32
 * accumulators), the causal mask, the online softmax in base 2 (scale * log2 e folded
 * into the scores), P (f16, from the S accumulators: the C layout of two n8 tiles is the
 * A layout of one k16 step) times V (ldmatrix .trans). Shared rows are HD*2 bytes with
 * their 16-byte chunks XOR-swizzled by (row & 7), so ldmatrix's 8 rows hit distinct
 * banks. The scalar kernel above reads every K and V row once per (query row, head):
 * at 8,192 tokens that is ~1 KB x 33.5M pairs x the heads per layer from L2; here
 * once per 64 query rows. k_attn_flash<HD, true> takes q8_0 caches: each K / V chunk of
 * 8 values is read from its block (8 int8 and the block's fp16 d), dequantised as
 * att_kv does (q * d in fp32) and stored as f16 into the same swizzled tiles, by plain
 * loads (all of a tile's issued before its stores) instead of cp.async; the rest is the
 * f16 kernel. (Before, q8_0 caches took the scalar kernel: 20.9 ms per 27B attention
 * layer and 512-token chunk at 8K context against 0.32 ms for f16; H100, 2026-12-05.)
 * The old kernel stays the reference (tc_set_attn_old) and takes the shapes this one
 * does not (f32 / bf16 caches, other head dims). */
namespace {
constexpr int FA_BM = 64, FA_BN = 32, FA_WARPS = 4;

__device__ __forceinline__ uint32_t fa_swz(int row, int chunk, int rowb) {
    return (uint32_t)(row * rowb + ((chunk ^ (row & 7)) << 4));
}
__device__ __forceinline__ void fa_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void fa_ldsm_t(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                          uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ uint32_t fa_pack(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *(uint32_t *)&h;
}
} // namespace

/* 8 values of a q8_0 cache from element e (a multiple of 8) as 4 f16 pairs */
__device__ __forceinline__ uint4 fa_q8_chunk(const att_q8 *__restrict__ c, size_t e) {
    const att_q8 &b = att_q8_block(c, e);
    const float d = __half2float(__ushort_as_half(b.d));
    const uint16_t *w = (const uint16_t *)(b.q + att_q8_slot(e)); /* 2-byte aligned */
    float f[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint16_t x = w[i];
        f[2 * i] = d * (float)(int8_t)(x & 0xFF);
        f[2 * i + 1] = d * (float)(int8_t)(x >> 8);
    }
    return make_uint4(fa_pack(f[0], f[1]), fa_pack(f[2], f[3]), fa_pack(f[4], f[5]), fa_pack(f[6], f[7]));
}

/* the q8_0 kernel's tile load: PER chunks of 8 values per thread, all loads before the stores */
template <int HD>
__device__ __forceinline__ void fa_load_q8(const att_q8 *__restrict__ kc, const att_q8 *__restrict__ vc, uint8_t *sk,
                                           uint8_t *sv, int kt, int last, size_t kvs, int kvh, int tid) {
    constexpr int CH = HD / 8, ROWB = HD * 2;
    constexpr int PER = FA_BN * CH / (FA_WARPS * 32); /* chunks per thread and tile */
    static_assert(FA_BN * CH % (FA_WARPS * 32) == 0, "whole chunks per thread");
    uint4 kv[PER], vv[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int idx = tid + j * FA_WARPS * 32, r = idx / CH, c = idx % CH, p = kt * FA_BN + r;
        kv[j] = vv[j] = make_uint4(0u, 0u, 0u, 0u); /* past the causal edge: zeros */
        if (p <= last) {
            const size_t e = (size_t)p * kvs + (size_t)kvh * HD + (size_t)c * 8;
            kv[j] = fa_q8_chunk(kc, e);
            vv[j] = fa_q8_chunk(vc, e);
        }
    }
#pragma unroll
    for (int j = 0; j < PER; j++) {
        const int idx = tid + j * FA_WARPS * 32, r = idx / CH, c = idx % CH;
        const uint32_t o = fa_swz(r, c, ROWB);
        *(uint4 *)(sk + o) = kv[j];
        *(uint4 *)(sv + o) = vv[j];
    }
}

template <bool Q8> using fa_kv_t = typename std::conditional<Q8, att_q8, __half>::type;

template <int HD, bool Q8>
__global__ void __launch_bounds__(FA_WARPS * 32) k_attn_flash(const float *__restrict__ q, size_t qs,
        const fa_kv_t<Q8> *__restrict__ kc, const fa_kv_t<Q8> *__restrict__ vc, float *__restrict__ out, int rows,
        int pos0, const int *__restrict__ dpos, int nh, int nkv, float scale_log2) {
    constexpr int CH = HD / 8, ROWB = HD * 2;
    extern __shared__ __align__(16) uint8_t fa_sm[];
    uint8_t *sq = fa_sm, *skv = fa_sm + FA_BM * ROWB; /* stage s: K at skv + s*2*BN*ROWB, V after it */
    tc_pdl_trigger();
    tc_pdl_wait();
    if (dpos) pos0 = *dpos;
    const int tile = (int)(gridDim.x - 1 - blockIdx.x); /* the longest tiles first */
    const int h = blockIdx.y, kvh = h / (nh / nkv);
    const int i0 = tile * FA_BM;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
    /* the query tile, f16, swizzled; rows past `rows` are zeros (never written out) */
    for (int idx = tid; idx < FA_BM * CH; idx += FA_WARPS * 32) {
        const int r = idx / CH, c = idx % CH, i = i0 + r;
        uint4 v = make_uint4(0u, 0u, 0u, 0u);
        if (i < rows) {
            const float *src = q + (size_t)i * qs + (size_t)h * HD + c * 8;
            v.x = fa_pack(src[0], src[1]);
            v.y = fa_pack(src[2], src[3]);
            v.z = fa_pack(src[4], src[5]);
            v.w = fa_pack(src[6], src[7]);
        }
        *(uint4 *)(sq + fa_swz(r, c, ROWB)) = v;
    }
    const size_t kvs = (size_t)nkv * HD;
    const __half *kb = (const __half *)kc + (size_t)kvh * HD, *vb = (const __half *)vc + (size_t)kvh * HD;
    const int last = pos0 + min(i0 + FA_BM, rows) - 1; /* the last position a row of the tile sees */
    const int ntiles = last / FA_BN + 1;
    auto load = [&](int kt, int stage) {
        uint8_t *sk = skv + stage * 2 * FA_BN * ROWB, *sv = sk + FA_BN * ROWB;
        if constexpr (Q8) {
            fa_load_q8<HD>((const att_q8 *)kc, (const att_q8 *)vc, sk, sv, kt, last, kvs, kvh, tid);
        } else {
            for (int idx = tid; idx < FA_BN * CH; idx += FA_WARPS * 32) {
                const int r = idx / CH, c = idx % CH, p = kt * FA_BN + r;
                const uint32_t o = fa_swz(r, c, ROWB);
                if (p <= last) {
                    cp_async16(smem_u32(sk + o), kb + (size_t)p * kvs + c * 8);
                    cp_async16(smem_u32(sv + o), vb + (size_t)p * kvs + c * 8);
                } else { /* past the causal edge: zeros (masked anyway; V must not hold NaN) */
                    *(uint4 *)(sk + o) = make_uint4(0u, 0u, 0u, 0u);
                    *(uint4 *)(sv + o) = make_uint4(0u, 0u, 0u, 0u);
                }
            }
        }
        cp_commit();
    };
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    const int ra = i0 + warp * 16 + g, rb = ra + 8; /* this thread's two query rows */
    const int qa = pos0 + ra, qb = pos0 + rb;       /* their positions */
    load(0, 0);
    for (int kt = 0; kt < ntiles; kt++) {
        if (kt + 1 < ntiles) {
            load(kt + 1, (kt + 1) & 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const uint8_t *sk = skv + (kt & 1) * 2 * FA_BN * ROWB, *sv = sk + FA_BN * ROWB;
        const int p0 = kt * FA_BN;
        float s[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t a[4];
            ldsm_x4(smem_u32(sq + fa_swz(warp * 16 + (lane & 15), kk * 2 + (lane >> 4), ROWB)), a[0], a[1], a[2],
                    a[3]);
#pragma unroll
            for (int jp = 0; jp < 2; jp++) {
                uint32_t b0, b1, b2, b3;
                ldsm_x4(smem_u32(sk + fa_swz(jp * 16 + (lane >> 4) * 8 + (lane & 7), kk * 2 + ((lane >> 3) & 1),
                                             ROWB)),
                        b0, b1, b2, b3);
                fa_mma(s[2 * jp], a, b0, b1);
                fa_mma(s[2 * jp + 1], a, b2, b3);
            }
        }
        /* scale, causal mask, the rows' maxima over the quad */
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int p = p0 + j * 8 + 2 * t4;
            s[j][0] = p <= qa ? s[j][0] * scale_log2 : -INFINITY;
            s[j][1] = p + 1 <= qa ? s[j][1] * scale_log2 : -INFINITY;
            s[j][2] = p <= qb ? s[j][2] * scale_log2 : -INFINITY;
            s[j][3] = p + 1 <= qb ? s[j][3] * scale_log2 : -INFINITY;
            mx0 = fmaxf(mx0, fmaxf(s[j][0], s[j][1]));
            mx1 = fmaxf(mx1, fmaxf(s[j][2], s[j][3]));
        }
#pragma unroll
        for (int o2 = 1; o2 < 4; o2 <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
        }
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float b0m = n0 == -INFINITY ? 0.0f : n0, b1m = n1 == -INFINITY ? 0.0f : n1;
        const float al0 = exp2f(m0 - b0m), al1 = exp2f(m1 - b1m); /* m = -inf: 0 (nothing yet) */
        m0 = n0;
        m1 = n1;
        float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            s[j][0] = exp2f(s[j][0] - b0m);
            s[j][1] = exp2f(s[j][1] - b0m);
            s[j][2] = exp2f(s[j][2] - b1m);
            s[j][3] = exp2f(s[j][3] - b1m);
            ps0 += s[j][0] + s[j][1];
            ps1 += s[j][2] + s[j][3];
        }
        l0 = l0 * al0 + ps0;
        l1 = l1 * al1 + ps1;
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            o[j][0] *= al0;
            o[j][1] *= al0;
            o[j][2] *= al1;
            o[j][3] *= al1;
        }
        /* O += P V, k = the tile's 32 positions in two steps of 16 */
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t a[4];
            a[0] = fa_pack(s[2 * ks][0], s[2 * ks][1]);
            a[1] = fa_pack(s[2 * ks][2], s[2 * ks][3]);
            a[2] = fa_pack(s[2 * ks + 1][0], s[2 * ks + 1][1]);
            a[3] = fa_pack(s[2 * ks + 1][2], s[2 * ks + 1][3]);
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t b0, b1, b2, b3;
                fa_ldsm_t(smem_u32(sv + fa_swz(ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), dp * 2 + (lane >> 4),
                                               ROWB)),
                          b0, b1, b2, b3);
                fa_mma(o[2 * dp], a, b0, b1);
                fa_mma(o[2 * dp + 1], a, b2, b3);
            }
        }
        __syncthreads(); /* the stage is refilled by the next iteration's load */
    }
#pragma unroll
    for (int o2 = 1; o2 < 4; o2 <<= 1) {
        l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
    }
    const float i0l = 1.0f / l0, i1l = 1.0f / l1;
    const size_t os = (size_t)nh * HD;
#pragma unroll
    for (int j = 0; j < HD / 8; j++) {
        const int d = j * 8 + 2 * t4;
        if (ra < rows) *(float2 *)(out + (size_t)ra * os + (size_t)h * HD + d) = make_float2(o[j][0] * i0l, o[j][1] * i0l);
        if (rb < rows) *(float2 *)(out + (size_t)rb * os + (size_t)h * HD + d) = make_float2(o[j][2] * i1l, o[j][3] * i1l);
    }
}

/* The tensor-core kernel when it takes the call (1), else 0. */
template <int HD, bool Q8>
static int flash_launch(const float *q, size_t qs, const void *kc, const void *vc, float *out, int rows, int pos0,
                        int nh, int nkv, float scale) {
    constexpr size_t SMEM = (size_t)(FA_BM + 4 * FA_BN) * HD * 2;
    if (tc_attr_once((const void *)k_attn_flash<HD, Q8>, (int)SMEM)) {
        cudaError_t e =
            cudaFuncSetAttribute(k_attn_flash<HD, Q8>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM);
        if (e != cudaSuccess) {
            tc_note((int)e);
            return 1;
        }
    }
    const dim3 grid((unsigned)((rows + FA_BM - 1) / FA_BM), (unsigned)nh);
    tc_launch(k_attn_flash<HD, Q8>, grid, dim3(FA_WARPS * 32), SMEM, 1, q, qs, (const fa_kv_t<Q8> *)kc,
              (const fa_kv_t<Q8> *)vc, out, rows, pos0, tc_cur->dyn_pos, nh, nkv, scale * 1.4426950408889634f);
    return 1;
}

template <bool Q8>
static int flash_hd(const float *q, size_t qs, const void *kc, const void *vc, float *out, int rows, int pos0, int nh,
                    int nkv, int hd, float scale) {
    switch (hd) {
    case 64: return flash_launch<64, Q8>(q, qs, kc, vc, out, rows, pos0, nh, nkv, scale);
    case 128: return flash_launch<128, Q8>(q, qs, kc, vc, out, rows, pos0, nh, nkv, scale);
    case 256: return flash_launch<256, Q8>(q, qs, kc, vc, out, rows, pos0, nh, nkv, scale);
    default: return 0;
    }
}

static int attention_flash(const float *q, size_t qs, const void *kc, const void *vc, int k_type, int v_type,
                           float *out, int rows, int pos0, int nh, int nkv, int hd, float scale) {
    if (tc_attn_old(tc_cur) || k_type != v_type || rows < 2 || nh % nkv) return 0;
    /* f16: 16-byte rows for cp.async; q8_0: 2-byte aligned blocks */
    const uintptr_t al = (uintptr_t)kc | (uintptr_t)vc;
    if (k_type == TC_KV_F16 && !(al & 15)) return flash_hd<false>(q, qs, kc, vc, out, rows, pos0, nh, nkv, hd, scale);
    if (k_type == TC_KV_Q8_0 && !(al & 1)) return flash_hd<true>(q, qs, kc, vc, out, rows, pos0, nh, nkv, hd, scale);
    return 0;
}

extern "C" void tc_attention(tc_ctx *cx, const float *q, size_t q_stride, const void *kcache,
                             const void *vcache, int k_type, int v_type, float *out, int rows,
                             int pos0, int n_head, int n_head_kv, int head_dim, float scale) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_ATTENTION);
    if (rows <= 0) return;
    if (head_dim > ATT_EPL * 32 || n_head > 65535 || !att_types_ok(k_type, v_type, head_dim)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    if (attention_flash(q, q_stride, kcache, vcache, k_type, v_type, out, rows, pos0, n_head, n_head_kv, head_dim,
                        scale))
        return;
    dim3 grid((unsigned)rows, (unsigned)n_head);
    att_dispatch(k_type, v_type, [&](auto *k0, auto *v0) {
        using KT = typename std::remove_pointer<decltype(k0)>::type;
        using VT = typename std::remove_pointer<decltype(v0)>::type;
        tc_launch(k_attention<KT, VT>, grid, dim3(ATT_WARPS * 32), 0, 1,
            q, q_stride, (const KT *)kcache, (const VT *)vcache, out, pos0, tc_cur->dyn_pos, n_head,
            n_head_kv, head_dim, scale);
    });
}
