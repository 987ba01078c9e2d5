/*
 * tc_gemv.cu - the decode GEMV (batch 1..8) on the tiled ternary layout
 * (TC_TERN128T, gemv_tiled.h) with integer tensor-core products.
 *
 * One warp owns a 16-row strip and a contiguous run of its 256-input tiles; a
 * CTA holds SPC strips x KS warps (KS warps split one strip's tiles, summed in
 * shared memory at the end). Per tile a lane loads 16 + 16 code bytes (rows g and
 * 8+g; two 512-byte coalesced warp loads, L1 bypassed) and 8 scale bytes; U tiles
 * are in flight per warp (the next tile's loads are issued as soon as a slot is
 * consumed). Per 128-input group: the lane's words are expanded to u8 codes by
 * shift/mask (0..2; one 32-bit register = 4 weights) straight into the A fragment
 * of mma.sync.m16n8k32.u8.s8 (tct_a_frag), the activation's permuted int8 planes
 * are the B fragment as loaded (two 16-byte loads per plane, L1-resident), four
 * mmas give the group's integer sums, and the epilogue applies
 *   sum (code-1) x_q = 128 * (codes . hi) + (codes . lo) - corr,   times d * sx,
 * in float per (row, column). Batch 1..4 (NB4) puts the hi planes in mma columns
 * 0..3 and the lo planes in 4..7 (one mma per k step; the hi and lo partial sums
 * meet by one shuffle at the end); batch 5..8 (NB8) runs two mmas per k step
 * (hi, lo) on the same A fragment. Exact integers up to the float epilogue.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gemv_tiled.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ repack */

/* One thread per (row of the padded strips, group, code byte): byte loads from the
 * file layout (any alignment; load time only). Pads stay zero (tc_malloc zeroes). */
__global__ void k_repack_tiled(const uint8_t *__restrict__ src, size_t rb, int64_t n, int K,
                               uint8_t *__restrict__ dst) {
    const int G = K >> 7;
    const int64_t kt = tct_ktiles(K);
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)n * (size_t)G * 32) return;
    const int cb = (int)(id & 31);
    const size_t rg = id >> 5;
    const int64_t r = (int64_t)(rg / (size_t)G);
    const int grp = (int)(rg % (size_t)G);
    const uint8_t *b = src + (size_t)r * rb + (size_t)grp * TERN_PQ2_0_BYTES;
    dst[tct_code_byte(r, (int64_t)grp * 128 + 4 * cb, kt)] = b[TERN_BLOCK_QS + cb];
    if (cb < 2) dst[tct_scale_byte(r, grp, kt) + cb] = b[cb];
}

extern "C" size_t tc_tiled_bytes(int64_t n, int64_t k) { return tct_bytes(n, k); }

extern "C" int tc_repack_tiled(const tc_mat *src, tc_mat *dst) {
    TC_PROF(TC_FAM_REPACK);
    memset(dst, 0, sizeof *dst);
    if (src->kind != TC_TERN128 || src->k <= 0 || src->k % 128 || src->k > (1 << 30) ||
        src->n <= 0 || src->n > ((int64_t)1 << 31) - 16)
        return TC_ERR_UNSUPPORTED;
    size_t bytes = tct_bytes(src->n, src->k);
    uint8_t *d = (uint8_t *)tc_malloc(bytes);
    if (!d) return (int)cudaErrorMemoryAllocation;
    size_t total = (size_t)src->n * (size_t)(src->k / 128) * 32;
    k_repack_tiled<<<tc_blocks(total, 256), 256, 0, tc_stream>>>(src->data, src->row_bytes, src->n,
                                                                (int)src->k, d);
    tc_check_launch();
    int e = (int)cudaStreamSynchronize(tc_stream);
    if (!e) e = (int)cudaGetLastError();
    if (e) {
        tc_free(d, bytes);
        return e;
    }
    dst->kind = TC_TERN128T;
    dst->data = d;
    dst->n = src->n;
    dst->k = src->k;
    dst->row_bytes = (size_t)tct_ktiles(src->k) * TCT_TILE; /* bytes per 16-row strip */
    return 0;
}

/* ------------------------------------------------------------------- embed */

__global__ void k_embed_tiled(const uint8_t *__restrict__ W, int64_t K,
                              const int32_t *__restrict__ ids, float *__restrict__ out) {
    const int64_t r = ids[blockIdx.y], kt = tct_ktiles(K);
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < K;
         j += (int64_t)gridDim.x * blockDim.x) {
        int c = (W[tct_code_byte(r, j, kt)] >> (2 * (j & 3))) & 3;
        float d = __half2float(__ushort_as_half(*(const unsigned short *)(W + tct_scale_byte(r, j >> 7, kt))));
        out[(size_t)blockIdx.y * K + j] = (float)(c - 1) * d;
    }
}

extern "C" void tc_embed_tiled(const tc_mat *emb, const int32_t *ids_host, size_t n, float *out,
                               size_t block, const float *signs) {
    TC_PROF(TC_FAM_EMBED);
    if (!n) return;
    if (emb->kind != TC_TERN128T) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int32_t *ids = tc_dyn_ids; /* capturing a step graph: the token is a device word */
    if (!ids || n != 1) {
        int32_t *dids = (int32_t *)tc_workspace(1, n * sizeof(int32_t));
        int32_t *pin = tc_pinned_ids(n);
        if (!dids || !pin) return;
        memcpy(pin, ids_host, n * sizeof(int32_t));
        tc_launch_count++;
        tc_note((int)cudaMemcpyAsync(dids, pin, n * sizeof(int32_t), cudaMemcpyHostToDevice,
                                     tc_stream));
        ids = dids;
    }
    for (size_t i0 = 0; i0 < n; i0 += 65535) {
        unsigned m = (unsigned)(n - i0 < 65535 ? n - i0 : 65535);
        unsigned bx = tc_blocks((size_t)emb->k, 256);
        dim3 grid(bx < 64 ? bx : 64, m);
        k_embed_tiled<<<grid, 256, 0, tc_stream>>>(emb->data, emb->k, ids + i0,
                                                   out + i0 * (size_t)emb->k);
        tc_check_launch();
    }
    if (signs) tc_hadamard(out, n, (size_t)emb->k, block, signs, 1);
}

/* -------------------------------------------------------------------- GEMV */

__device__ __forceinline__ void tct_mma(int d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint4 tct_ld_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 tct_ld_stream2(const void *p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(p));
    return v;
}

/* Activation words: volatile so that the loads of one group are not hoisted above
 * the previous group's arithmetic (register pressure). L1-cached (shared by all the
 * warps of an SM that work on the same inputs). */
__device__ __forceinline__ int4 tct_ld_act(const void *p) {
    int4 v;
    asm volatile("ld.global.nc.v4.s32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ float tct_ld_f(const float *p) {
    float v;
    asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

/* The refill loads of the branch-free loop (SA 2): predicated in the instruction, so
 * that no branch splits the unrolled tiles (ptxas schedules within a basic block:
 * the groups' mma chains interleave only if nothing branches between them). The
 * registers keep their value when p is 0. */
__device__ __forceinline__ void tct_ld_stream_p(uint4 &v, const void *p, int pr) {
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %5, 0;\n\t"
                 "@q ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
                 : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
                 : "l"(p), "r"(pr));
}
__device__ __forceinline__ void tct_ld_stream2_p(uint2 &v, const void *p, int pr) {
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %3, 0;\n\t"
                 "@q ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n\t}"
                 : "+r"(v.x), "+r"(v.y)
                 : "l"(p), "r"(pr));
}

/* A bulk prefetch of [p, p + bytes) into L2 (sm_90; p and bytes multiples of 16). */
__device__ __forceinline__ void tct_prefetch_l2(const void *p, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

/* SA: the activation staged in shared memory (32-bit shared addresses). */
__device__ __forceinline__ int4 tct_lds4(uint32_t a) {
    int4 v;
    asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(a));
    return v;
}
__device__ __forceinline__ int2 tct_lds2(uint32_t a) {
    int2 v;
    asm volatile("ld.shared.v2.s32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
    return v;
}
__device__ __forceinline__ void tct_sts4(uint32_t a, int4 v) {
    asm volatile("st.shared.v4.s32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ float tct_ldsf(uint32_t a) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ void tct_cp16(uint32_t dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void tct_cp4(uint32_t dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}

/* Shared-memory image of the activation rows a CTA reads (SA): nbr batch rows of
 * q at row stride 2K + 16 (the 16 bytes put batch rows b and b+1 of a warp's B
 * loads in different bank groups), then corr [nbr][K/32], then sx [nbr][K/128]. */
TCT_HD size_t tct_sa_bytes(int nbr, int64_t K) {
    return (size_t)nbr * ((size_t)(2 * K + 16) + (size_t)(K / 32) * 4 + (size_t)(K / 128) * 4);
}

__device__ __forceinline__ float tct_h(uint32_t v, int hi) {
    return __half2float(__ushort_as_half((unsigned short)(hi ? v >> 16 : v & 0xffffu)));
}

#define TCT_MAX_WARPS 16
/* SA 2 (the staged branch-free loop) is compiled for two CTAs of up to 10 warps per
 * SM (<= 96 registers: 20 resident warps per SM instead of 16 at 106), so that the
 * launch shape can be one wave more often; SA 4 is the same loop at CTAs of up to 16
 * warps (106 registers; TERN_CUDA_TILED_V=4, an A/B), the others too. */
#define TCT_LB_THREADS(sa) ((sa) == 2 ? 320 : 512)
#define TCT_LB_BLOCKS(sa) ((sa) == 2 ? 2 : 1)
#define TCT_STAGED2(sa) ((sa) == 2 || (sa) == 4)

/* Where the branch-free loop reads the activation of one tile: B words at byte
 * offset off (group e at 256 e), and X(c, e) = {sx bits, corr of group e} of the
 * lane's output column c (0: 2t, 1: 2t + 1; corr summed over the group's four
 * 32-input units, 0 for the hi columns of NB4).
 * tct_src_smem (SA 2, 4): the CTA's staged image (s_c holds the {sx, corr} pairs).
 * (Reading it from global memory through L1 instead, with no staging and no barrier,
 * measured slower: 27B decode 163.2 vs 182.3 tok/s, run q.) */
struct tct_src_smem {
    uint32_t q, x0, x1;
    __device__ __forceinline__ int4 B(uint32_t off) const { return tct_lds4(q + off); }
    __device__ __forceinline__ int2 X(int c, int e) const { return tct_lds2((c ? x1 : x0) + 16u * (uint32_t)e); }
};

/* The float epilogue of one group: v = (NB8: 128 hi + lo, else the column's plane
 * sum) - corr, times the row scale d and the column scale sx. The same operations in
 * the same order as the SA 0/1 loop body (the same bits). */
template <int NB8>
__device__ __forceinline__ void tct_epi(const int H[4], const int L[4], int2 c0, int2 c1, uint2 s2,
                                        int e, float f[4]) {
    const float dg = tct_h(s2.x, e), dh = tct_h(s2.y, e);
    const float s0 = __int_as_float(c0.x), s1 = __int_as_float(c1.x);
    int v[4];
#pragma unroll
    for (int i = 0; i < 4; i++) v[i] = (NB8 ? H[i] * 128 + L[i] : H[i]) - ((i & 1) ? c1.y : c0.y);
    f[0] = fmaf((float)v[0], dg * s0, f[0]);
    f[1] = fmaf((float)v[1], dg * s1, f[1]);
    f[2] = fmaf((float)v[2], dh * s0, f[2]);
    f[3] = fmaf((float)v[3], dh * s1, f[3]);
}

/* Both groups of a whole tile, their mma chains interleaved in the source (ptxas
 * keeps them apart otherwise: two dependent chains of four instead of one of eight
 * per tile). NB4 only: at NB8 the interleaving spills (the hi and lo mmas are two
 * chains per group already). */
template <int NB8, class Src>
__device__ __forceinline__ void tct_tile2(const uint32_t wg[4], const uint32_t wh[4], uint2 s2,
                                          const Src &sr, float f[4]) {
    int4 h[2][2], l[2][2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        h[e][0] = sr.B(256u * e);
        h[e][1] = sr.B(256u * e + 16);
        l[e][0] = l[e][1] = make_int4(0, 0, 0, 0);
        if (NB8) {
            l[e][0] = sr.B(256u * e + 32);
            l[e][1] = sr.B(256u * e + 48);
        }
    }
    int H[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}}, L[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
    for (int m = 0; m < 4; m++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            uint32_t a[4];
            tct_a_frag(wg, wh, e, m, a);
            const int4 hb = h[e][m >> 1], lb = l[e][m >> 1];
            tct_mma(H[e], a, (m & 1) ? hb.z : hb.x, (m & 1) ? hb.w : hb.y);
            if (NB8) tct_mma(L[e], a, (m & 1) ? lb.z : lb.x, (m & 1) ? lb.w : lb.y);
        }
    }
#pragma unroll
    for (int e = 0; e < 2; e++) tct_epi<NB8>(H[e], L[e], sr.X(0, e), sr.X(1, e), s2, e, f);
}

/* One group e of a tile (the tail, and NB8). */
template <int NB8, class Src>
__device__ __forceinline__ void tct_group2(const uint32_t wg[4], const uint32_t wh[4], uint2 s2,
                                           int e, const Src &sr, float f[4]) {
    const uint32_t o = 256u * (uint32_t)e;
    const int4 h0 = sr.B(o), h1 = sr.B(o + 16);
    int4 l0 = make_int4(0, 0, 0, 0), l1 = l0;
    if (NB8) {
        l0 = sr.B(o + 32);
        l1 = sr.B(o + 48);
    }
    int H[4] = {0, 0, 0, 0}, L[4] = {0, 0, 0, 0};
    uint32_t a[4];
    tct_a_frag(wg, wh, e, 0, a);
    tct_mma(H, a, h0.x, h0.y);
    if (NB8) tct_mma(L, a, l0.x, l0.y);
    tct_a_frag(wg, wh, e, 1, a);
    tct_mma(H, a, h0.z, h0.w);
    if (NB8) tct_mma(L, a, l0.z, l0.w);
    tct_a_frag(wg, wh, e, 2, a);
    tct_mma(H, a, h1.x, h1.y);
    if (NB8) tct_mma(L, a, l1.x, l1.y);
    tct_a_frag(wg, wh, e, 3, a);
    tct_mma(H, a, h1.z, h1.w);
    if (NB8) tct_mma(L, a, l1.z, l1.w);
    tct_epi<NB8>(H, L, sr.X(0, e), sr.X(1, e), s2, e, f);
}

/* tsk_mats, tsk_mat_of, tct_mat: gemv_tiled.h (shared with the CPU test of the index
 * rules); the reference form for the stream-K kernels below */
__device__ __forceinline__ int tsk_mat_of(const tsk_mats &M, int64_t S) { return tsk_mat_of(&M, S); }

/* M: the matrices (MM 0: M.w[0] alone, as one launch per matrix always was; MM 1: all
 * M.nm of them in one grid, a CTA's strips possibly in two matrices). */
template <int NB8, int U, int SA, int MM>
__global__ void __launch_bounds__(TCT_LB_THREADS(SA), TCT_LB_BLOCKS(SA))
    k_gemv_tiled(const __grid_constant__ tsk_mats M, int K, int KS, const int8_t *__restrict__ q,
                 const float *__restrict__ sx, const int *__restrict__ corr, int batch, int PF) {
    __shared__ float red[TCT_MAX_WARPS][16][8];
    extern __shared__ __align__(16) uint8_t tsa[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int spc = (int)(blockDim.x >> 5) / KS;
    const int sl = warp / KS, ks = warp - sl * KS;
    const int gstrip = blockIdx.x * spc + sl;
    const int mi = MM ? tsk_mat_of(&M, gstrip) : 0;
    const tct_one mo = tct_mat(&M, mi);
    const uint8_t *__restrict__ W = mo.w;
    const int n = mo.n;
    const int strip = gstrip - mo.s0; /* within matrix mi (past the last: not live) */
    const int G = K >> 7, KT = (G + 1) >> 1, nu = K >> 5;
    const bool live = strip * 16 < n;
    const int j0 = ks * KT / KS, j1 = (ks + 1) * KT / KS;
    const int nt = live ? j1 - j0 : 0;
    const bool odd = G & 1; /* the last tile's second group is padding */

    /* This lane's streams, advanced tile by tile (constant offsets within a tile):
     * weights (its 16 + 16 + 8 bytes of each tile), the B fragment source (column g:
     * batch row bc, plane bp, unit t; a column past the batch reads row 0 and its
     * output is dropped), and the scale / corr of its output columns 2t, 2t+1. */
    const uint8_t *pw = W + ((size_t)strip * KT + j0) * TCT_TILE + 16 * lane;
    const uint8_t *ps = W + ((size_t)strip * KT + j0) * TCT_TILE + 1024 + 8 * g;
    const int bc = tct_col_batch(NB8, g), bp = tct_col_plane(NB8, g);
    const int8_t *pq = q + (size_t)(bc < batch ? bc : 0) * (size_t)K * 2 + (size_t)bp * 32 +
                       (size_t)t * 64 + (size_t)j0 * 512;
    const int ob0 = tct_col_batch(NB8, 2 * t), ob1 = ob0 + 1, op = tct_col_plane(NB8, 2 * t);
    const bool wantc = NB8 || op; /* the lo columns carry the -corr term */
    const float *px0 = sx + (size_t)(ob0 < batch ? ob0 : 0) * G + 2 * j0;
    const float *px1 = sx + (size_t)(ob1 < batch ? ob1 : 0) * G + 2 * j0;
    const int *pc0 = corr + (size_t)(ob0 < batch ? ob0 : 0) * nu + 8 * j0;
    const int *pc1 = corr + (size_t)(ob1 < batch ? ob1 : 0) * nu + 8 * j0;

    float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint4 wa[U], wb[U];
    uint2 sc[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (u < nt) {
            wa[u] = tct_ld_stream(pw + u * TCT_TILE);
            wb[u] = tct_ld_stream(pw + u * TCT_TILE + 512);
            sc[u] = tct_ld_stream2(ps + u * TCT_TILE);
        }
    }
    /* PF > 0: the warp's first PF tiles requested into L2 at once by one bulk
     * prefetch (and, in the SA 2 loop, U more each block): the register loads then
     * wait on L2, not on HBM, and HBM sees the whole window at the start */
    if (PF > 0 && lane == 0 && nt > 0) tct_prefetch_l2(pw, (uint32_t)((nt < PF ? nt : PF) * TCT_TILE));
    /* PDL: the weights above depend on no kernel; the activation below does */
    tc_pdl_trigger();
    tc_pdl_wait();
    /* SA: the CTA's activation (every batch row it reads, all of K) copied once into
     * shared memory while the first weight tiles are in flight: the loop's B, corr and
     * sx loads are then shared-memory hits, not a chain of L1/L2 round trips. */
    const int nbr = batch < (NB8 ? 8 : 4) ? batch : (NB8 ? 8 : 4);
    const int RS = 2 * K + 16;
    const uint32_t s_q = (uint32_t)__cvta_generic_to_shared(tsa);
    const uint32_t s_c = s_q + (uint32_t)(nbr * RS), s_x = s_c + (uint32_t)(nbr * nu * 4);
    uint32_t sq = 0, sx0 = 0, sx1 = 0, sc0 = 0, sc1 = 0;
    if (SA == 1 || TCT_STAGED2(SA)) {
        const int qc = K >> 3; /* 16-byte chunks per batch row of q */
        for (int i = threadIdx.x; i < nbr * qc; i += blockDim.x) {
            const int b = i / qc, c = i - b * qc;
            tct_cp16(s_q + (uint32_t)(b * RS + 16 * c), q + (size_t)b * (size_t)K * 2 + 16 * (size_t)c);
        }
        if (TCT_STAGED2(SA)) {
            /* per (batch row, group) 16 bytes: {sx, 0} (the hi columns of NB4) then
             * {sx, corr summed over the group's 4 units}, at s_c (the corr region,
             * which is larger) */
            for (int i = threadIdx.x; i < nbr * G; i += blockDim.x) {
                const int4 c4 = *(const int4 *)(corr + 4 * (size_t)i);
                const int xs = __float_as_int(sx[i]);
                tct_sts4(s_c + 16u * (uint32_t)i, make_int4(xs, 0, xs, (c4.x + c4.y) + (c4.z + c4.w)));
            }
        } else {
            for (int i = threadIdx.x; i < nbr * G; i += blockDim.x) { /* corr: G chunks per row */
                tct_cp16(s_c + 16u * (uint32_t)i, corr + 4 * (size_t)i);
                tct_cp4(s_x + 4u * (uint32_t)i, sx + i);
            }
        }
        asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        sq = s_q + (uint32_t)((bc < batch ? bc : 0) * RS + bp * 32 + t * 64 + j0 * 512);
        sx0 = s_x + (uint32_t)(((ob0 < batch ? ob0 : 0) * G + 2 * j0) * 4);
        sx1 = s_x + (uint32_t)(((ob1 < batch ? ob1 : 0) * G + 2 * j0) * 4);
        sc0 = s_c + (uint32_t)(((ob0 < batch ? ob0 : 0) * nu + 8 * j0) * 4);
        sc1 = s_c + (uint32_t)(((ob1 < batch ? ob1 : 0) * nu + 8 * j0) * 4);
    }
    int jj = 0;
    if (SA >= 2) {
        /* SA 2: the lane's {sx, corr} pairs in the staged image: entry (row, group, wantc) */
        const uint32_t x0 = s_c + (uint32_t)((((ob0 < batch ? ob0 : 0) * G + 2 * j0) * 2 + (wantc ? 1 : 0)) * 8);
        const uint32_t x1 = s_c + (uint32_t)((((ob1 < batch ? ob1 : 0) * G + 2 * j0) * 2 + (wantc ? 1 : 0)) * 8);
        /* tile i of the warp's run (i = jj + u) */
#define TCT_SRC(i)                                                                                 \
    [&]() {                                                                                        \
        return tct_src_smem{sq + (uint32_t)((i) * 512), x0 + (uint32_t)((i) * 32),                 \
                            x1 + (uint32_t)((i) * 32)};                                            \
    }()
        /* the whole blocks of U tiles with both groups real: no branch inside */
        const int nfull = nt - (odd && j1 == KT ? 1 : 0);
#pragma unroll 1
        for (; jj + U <= nfull; jj += U) {
            if (PF > 0 && lane == 0 && jj + PF < nt) {
                const int pe = jj + PF + U < nt ? jj + PF + U : nt;
                tct_prefetch_l2(pw + (size_t)(jj + PF) * TCT_TILE, (uint32_t)((pe - jj - PF) * TCT_TILE));
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const uint32_t wg[4] = {wa[u].x, wa[u].y, wa[u].z, wa[u].w};
                const uint32_t wh[4] = {wb[u].x, wb[u].y, wb[u].z, wb[u].w};
                const uint2 s2 = sc[u];
                const auto sr = TCT_SRC(jj + u);
                if (NB8) {
#pragma unroll
                    for (int e = 0; e < 2; e++) tct_group2<NB8>(wg, wh, s2, e, sr, f);
                } else {
                    tct_tile2<NB8>(wg, wh, s2, sr, f);
                }
                const int more = jj + u + U < nt;
                tct_ld_stream_p(wa[u], pw + (size_t)(jj + u + U) * TCT_TILE, more);
                tct_ld_stream_p(wb[u], pw + (size_t)(jj + u + U) * TCT_TILE + 512, more);
                tct_ld_stream2_p(sc[u], ps + (size_t)(jj + u + U) * TCT_TILE, more);
            }
        }
        /* the rest (< U whole tiles, and the last tile whose second group is padding):
         * already loaded, slot u holds tile jj + u */
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (jj + u < nt) {
                const uint32_t wg[4] = {wa[u].x, wa[u].y, wa[u].z, wa[u].w};
                const uint32_t wh[4] = {wb[u].x, wb[u].y, wb[u].z, wb[u].w};
                const auto sr = TCT_SRC(jj + u);
                tct_group2<NB8>(wg, wh, sc[u], 0, sr, f);
                if (jj + u < nfull) tct_group2<NB8>(wg, wh, sc[u], 1, sr, f);
            }
        }
#undef TCT_SRC
        jj = nt;
    }
#pragma unroll 1
    for (; SA < 2 && jj < nt; jj += U) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (jj + u < nt) {
                const uint32_t wg[4] = {wa[u].x, wa[u].y, wa[u].z, wa[u].w};
                const uint32_t wh[4] = {wb[u].x, wb[u].y, wb[u].z, wb[u].w};
                const uint2 s2 = sc[u];
                const bool last = jj + u == nt - 1;
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    if (e == 1 && odd && last && j1 == KT) break;
                    const int4 *qp = (const int4 *)(pq + u * 512 + e * 256);
                    const uint32_t qs = sq + (uint32_t)(u * 512 + e * 256);
                    const int4 h0 = SA ? tct_lds4(qs) : tct_ld_act(qp);
                    const int4 h1 = SA ? tct_lds4(qs + 16) : tct_ld_act(qp + 1);
                    int4 l0 = make_int4(0, 0, 0, 0), l1 = l0;
                    if (NB8) {
                        l0 = SA ? tct_lds4(qs + 32) : tct_ld_act(qp + 2);
                        l1 = SA ? tct_lds4(qs + 48) : tct_ld_act(qp + 3);
                    }
                    int H[4] = {0, 0, 0, 0}, L[4] = {0, 0, 0, 0};
                    uint32_t a[4];
                    tct_a_frag(wg, wh, e, 0, a);
                    tct_mma(H, a, h0.x, h0.y);
                    if (NB8) tct_mma(L, a, l0.x, l0.y);
                    tct_a_frag(wg, wh, e, 1, a);
                    tct_mma(H, a, h0.z, h0.w);
                    if (NB8) tct_mma(L, a, l0.z, l0.w);
                    tct_a_frag(wg, wh, e, 2, a);
                    tct_mma(H, a, h1.x, h1.y);
                    if (NB8) tct_mma(L, a, l1.x, l1.y);
                    tct_a_frag(wg, wh, e, 3, a);
                    tct_mma(H, a, h1.z, h1.w);
                    if (NB8) tct_mma(L, a, l1.z, l1.w);
                    int c0 = 0, c1 = 0;
                    if (wantc) {
                        const uint32_t co = (uint32_t)((8 * u + 4 * e) * 4);
                        const int4 ca = SA ? tct_lds4(sc0 + co) : tct_ld_act(pc0 + 8 * u + 4 * e);
                        const int4 cb = SA ? tct_lds4(sc1 + co) : tct_ld_act(pc1 + 8 * u + 4 * e);
                        c0 = (ca.x + ca.y) + (ca.z + ca.w);
                        c1 = (cb.x + cb.y) + (cb.z + cb.w);
                    }
                    const float dg = tct_h(s2.x, e), dh = tct_h(s2.y, e);
                    const uint32_t xo = (uint32_t)((2 * u + e) * 4);
                    const float s0 = SA ? tct_ldsf(sx0 + xo) : tct_ld_f(px0 + 2 * u + e);
                    const float s1 = SA ? tct_ldsf(sx1 + xo) : tct_ld_f(px1 + 2 * u + e);
                    int v[4];
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        v[i] = (NB8 ? H[i] * 128 + L[i] : H[i]) - ((i & 1) ? c1 : c0);
                    f[0] = fmaf((float)v[0], dg * s0, f[0]);
                    f[1] = fmaf((float)v[1], dg * s1, f[1]);
                    f[2] = fmaf((float)v[2], dh * s0, f[2]);
                    f[3] = fmaf((float)v[3], dh * s1, f[3]);
                }
                if (jj + u + U < nt) { /* refill the slot: U - 1 tiles stay in flight */
                    wa[u] = tct_ld_stream(pw + (u + U) * TCT_TILE);
                    wb[u] = tct_ld_stream(pw + (u + U) * TCT_TILE + 512);
                    sc[u] = tct_ld_stream2(ps + (u + U) * TCT_TILE);
                }
            }
        }
        pw += U * TCT_TILE;
        ps += U * TCT_TILE;
        pq += U * 512;
        px0 += 2 * U;
        px1 += 2 * U;
        pc0 += 8 * U;
        pc1 += 8 * U;
        sq += U * 512;
        sx0 += 8 * U;
        sx1 += 8 * U;
        sc0 += 32 * U;
        sc1 += 32 * U;
    }
    /* the plane factor (128 for the hi columns of NB4) and dropped columns */
    const float m0 = ob0 < batch ? (NB8 || op ? 1.0f : 128.0f) : 0.0f;
    const float m1 = ob1 < batch ? (NB8 || op ? 1.0f : 128.0f) : 0.0f;
    f[0] *= m0;
    f[1] *= m1;
    f[2] *= m0;
    f[3] *= m1;
    if (!NB8) /* hi (t 0, 1) + lo (t 2, 3) of the same batch rows */
#pragma unroll
        for (int i = 0; i < 4; i++) f[i] += __shfl_xor_sync(0xffffffffu, f[i], 2);
    const bool wr = NB8 || t < 2;
    const int row0 = strip * 16 + g, row1 = row0 + 8;
    float *__restrict__ y = mo.y;
    const size_t ys = mo.ys;
    if (KS == 1) {
        if (wr) {
            if (row0 < n && ob0 < batch) y[(size_t)ob0 * ys + row0] = f[0];
            if (row0 < n && ob1 < batch) y[(size_t)ob1 * ys + row0] = f[1];
            if (row1 < n && ob0 < batch) y[(size_t)ob0 * ys + row1] = f[2];
            if (row1 < n && ob1 < batch) y[(size_t)ob1 * ys + row1] = f[3];
        }
        return;
    }
    if (wr) {
        red[warp][g][ob0] = f[0];
        red[warp][g][ob1] = f[1];
        red[warp][g + 8][ob0] = f[2];
        red[warp][g + 8][ob1] = f[3];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < spc * 128; idx += blockDim.x) {
        const int s = idx >> 7, rr = (idx >> 3) & 15, b = idx & 7;
        const int gs = blockIdx.x * spc + s;
        const tct_one o = MM ? tct_mat(&M, tsk_mat_of(&M, gs)) : mo;
        const int row = (gs - o.s0) * 16 + rr;
        if (row >= o.n || b >= batch) continue;
        float v = 0.0f;
        for (int w = 0; w < KS; w++) v += red[s * KS + w][rr][b];
        o.y[(size_t)b * o.ys + row] = v;
    }
}

static int g_sms;
static int tct_variant(void);

/* Shared-memory budget of the staged activation (SA); past it (K x batch rows
 * too large: batch 3+ at K 17408) the loop reads the activation from global/L1. */
#define TCT_SA_MAX (100 * 1024)
#define TCT_PF_DEFAULT 0

/* The launch shape of the decode GEMV: KS warps split a strip's tiles, SPC strips per
 * CTA (KS x SPC <= 16 warps). Chosen per matrix shape and kernel instance from the
 * kernel's real occupancy (registers and shared memory as compiled), so that the grid
 * is one wave where it can be: a grid one CTA larger than the resident slots runs a
 * second wave as long as the first (the 106-register kernel at 4 warps per CTA fits
 * 4 CTAs per SM: 528 slots, and the FFN gate/up grid had 544 CTAs). Estimated cost,
 * in tile times: waves x (tiles per warp x max(1, W0 / resident warps per SM) + S x
 * resident CTAs per SM), W0 = 16 warps per SM to cover the HBM latency
 * (TERN_CUDA_TILED_WARPS), S the activation staging of one CTA (TERN_CUDA_TILED_S,
 * tile units, default 1). TERN_CUDA_TILED_SHAPE=old: the earlier fixed rule. */
static int g_tct_shape_old; /* tc_gemv_tiled_config: the fixed rule (tests) */
struct tct_shape {
    int ks, spc;
};
struct tct_occ_entry {
    int threads, occ;
    size_t smem;
};
static tct_shape tct_shape_old(int64_t strips, int64_t kt, int wps) {
    int64_t want = (int64_t)g_sms * wps;
    int ks = (int)((want + strips - 1) / strips);
    if (ks > 10) ks = 10; /* every instance takes CTAs of 10 warps (SA 2's bound) */
    if (ks > kt) ks = (int)kt;
    if (ks < 1) ks = 1;
    return tct_shape{ks, ks >= 4 ? 1 : 4 / ks};
}

template <int NB8, int U, int SA, int MM>
static tct_shape tct_pick(int64_t strips, int64_t kt, size_t smem) {
    static int wps = 0, old = 0;
    static double S = 4.0;
    if (!wps) {
        const char *e = getenv("TERN_CUDA_TILED_WARPS");
        wps = e && atoi(e) >= 4 && atoi(e) <= 64 ? atoi(e) : 16;
        e = getenv("TERN_CUDA_TILED_S");
        if (e && atof(e) >= 0 && atof(e) <= 64) S = atof(e);
        e = getenv("TERN_CUDA_TILED_SHAPE");
        old = e && !strcmp(e, "old");
    }
    if (old || g_tct_shape_old) return tct_shape_old(strips, kt, wps);
    static tct_occ_entry oc[96];
    static int noc = 0;
    static struct { int64_t strips, kt; size_t smem; tct_shape sh; } memo[16];
    static int nmemo = 0;
    for (int i = 0; i < nmemo; i++)
        if (memo[i].strips == strips && memo[i].kt == kt && memo[i].smem == smem) return memo[i].sh;
    tct_shape best = tct_shape_old(strips, kt, wps);
    double bc = 1e300;
    auto occ_of = [&](int threads) {
        int occ = -1;
        for (int i = 0; i < noc; i++)
            if (oc[i].threads == threads && oc[i].smem == smem) occ = oc[i].occ;
        if (occ < 0) {
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_gemv_tiled<NB8, U, SA, MM>, threads,
                                                              SA ? smem : 0) != cudaSuccess)
                occ = 0;
            if (noc < 96) oc[noc++] = tct_occ_entry{threads, occ, smem};
        }
        return occ;
    };
    /* a grid of many waves (the 248,320-row head): the CTA scheduler keeps the SMs
     * full as CTAs end, and the fixed rule measured best (84% vs 75% of the ceiling) */
    const int oo = occ_of(32 * best.ks * best.spc);
    const bool many = oo > 0 && (strips + best.spc - 1) / best.spc >= 3 * (int64_t)oo * g_sms;
    if (many) bc = -1;
    const int maxw = TCT_LB_THREADS(SA) / 32;
    for (int ks = 1; ks <= maxw && ks <= kt; ks++)
        for (int spc = 1; ks * spc <= maxw && spc <= strips; spc++) {
            if (many) break;
            const int occ = occ_of(32 * ks * spc);
            if (occ <= 0) continue;
            const int64_t blocks = (strips + spc - 1) / spc, slots = (int64_t)occ * g_sms;
            const int64_t waves = (blocks + slots - 1) / slots;
            const double res_ctas = (double)(blocks < slots ? blocks : slots) / g_sms;
            const double res_warps = res_ctas * ks * spc;
            const double tiles = (double)((kt + ks - 1) / ks);
            const double c = (double)waves * (tiles * (res_warps < wps ? wps / res_warps : 1.0) + S * res_ctas);
            if (c < bc * (1 - 1e-9)) {
                bc = c;
                best = tct_shape{ks, spc};
            }
        }
    memo[nmemo < 16 ? nmemo++ : (int)(strips % 16)] = {strips, kt, smem, best};
    if (getenv("TERN_CUDA_TILED_LOG")) /* asked for: the choice, once per shape */
        fprintf(stderr, "tc_gemv_tiled<%d,%d,%d,%d>: strips %lld tiles %lld smem %zu -> ks %d spc %d (cost %.1f)\n",
                NB8, U, SA, MM, (long long)strips, (long long)kt, smem, best.ks, best.spc, bc);
    return best;
}

/* M's y pointers already offset to the batch chunk; strips = M.strip_end[M.nm - 1]. */
template <int NB8, int U, int SA, int MM>
static void launch_tiled_k(const tsk_mats &M, int64_t strips, int K, const int8_t *q, const float *sx,
                           const int *corr, int batch, size_t smem) {
    static int attr = 0; /* 1 set, -1 failed */
    if (SA && !attr) {
        cudaError_t e = cudaFuncSetAttribute(k_gemv_tiled<NB8, U, SA, MM>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, TCT_SA_MAX);
        attr = e == cudaSuccess ? 1 : -1;
        if (e != cudaSuccess) tc_note((int)e);
    }
    if (SA && attr < 0) return;
    static int pf = -1; /* TERN_CUDA_TILED_PF: tiles per warp prefetched into L2 (0 off) */
    if (pf < 0) {
        const char *e = getenv("TERN_CUDA_TILED_PF");
        pf = e && atoi(e) >= 0 && atoi(e) <= 256 ? atoi(e) : TCT_PF_DEFAULT;
    }
    const int64_t kt = tct_ktiles(K);
    const tct_shape sh = tct_pick<NB8, U, SA, MM>(strips, kt, SA ? smem : 0);
    const unsigned grid = (unsigned)((strips + sh.spc - 1) / sh.spc);
    tc_launch(k_gemv_tiled<NB8, U, SA, MM>, dim3(grid), dim3(32 * sh.ks * sh.spc), SA ? smem : 0, 1, M,
              K, sh.ks, q, sx, corr, batch, pf);
}

static void tct_sms(void) {
    if (!g_sms) {
        int v = 0;
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0);
        g_sms = v > 0 ? v : 132;
    }
}
static size_t tct_smem_of(int batch, int64_t K) {
    const int nb8 = batch > 4, nbr = batch < (nb8 ? 8 : 4) ? batch : (nb8 ? 8 : 4);
    return tct_sa_bytes(nbr, K);
}
static bool tct_aligned(const int8_t *q, const float *sx, const int *corr) {
    return !((uintptr_t)q & 15) && !((uintptr_t)corr & 15) && !((uintptr_t)sx & 3);
}

/* One matrix (M.nm == 1). */
template <int NB8, int U>
static void launch_tiled(const tsk_mats &M, int K, const int8_t *q, const float *sx, const int *corr,
                         int batch) {
    tct_sms();
    const size_t smem = tct_smem_of(batch, K);
    const int64_t strips = tct_strips(M.n[0]);
    if (smem <= TCT_SA_MAX && tct_aligned(q, sx, corr)) {
        if (tct_variant() == 1 || U != 4) launch_tiled_k<NB8, U, 1, 0>(M, strips, K, q, sx, corr, batch, smem);
        else if constexpr (NB8 || U != 4) /* batch 5..8: the 106-register build only */
            launch_tiled_k<NB8, U, U == 4 ? 4 : 1, 0>(M, strips, K, q, sx, corr, batch, smem);
        else if (tct_variant() == 4) launch_tiled_k<NB8, U, 4, 0>(M, strips, K, q, sx, corr, batch, smem);
        else launch_tiled_k<NB8, U, 2, 0>(M, strips, K, q, sx, corr, batch, smem);
    } else launch_tiled_k<NB8, U, 0, 0>(M, strips, K, q, sx, corr, batch, 0);
}

/* The staged-activation loop: 2 (default) the branch-free one (whole blocks of U
 * tiles, the corr summed per group at staging), 1 the earlier loop with a branch per
 * tile (TERN_CUDA_TILED_V=1; an A/B, and the tests' reference: both give the same
 * bits at the same launch shape), 4 the same loop as 2 compiled for CTAs of 16 warps
 * (106 registers; TERN_CUDA_TILED_V=4), 5 (the default) 2 at batch 1..4 and 4 at 5..8
 * (run s: the 96-register build gave 27B decode 195.0 vs 183.5 tok/s, the
 * 106-register one batch 8 552 vs 533). Batch 5..8 always takes 4 (2 spills there). */
static int g_tct_v;
static int tct_variant(void) {
    if (!g_tct_v) {
        const char *e = getenv("TERN_CUDA_TILED_V");
        g_tct_v = e && (atoi(e) == 1 || atoi(e) == 2 || atoi(e) == 4) ? atoi(e) : 5;
    }
    return g_tct_v;
}
extern "C" int tc_gemv_tiled_config(int variant, int shape_old) {
    const int old = tct_variant();
    if (variant == 1 || variant == 2 || variant == 4 || variant == 5) g_tct_v = variant;
    if (shape_old >= 0) g_tct_shape_old = shape_old;
    return old;
}

/* M over the nm matrices w (ys: their output strides, or NULL; the y pointers are set
 * per batch chunk); returns their strips. */
static int64_t tsk_fill(tsk_mats *M, int nm, const tc_mat *const *w, const size_t *ys) {
    memset(M, 0, sizeof *M);
    M->nm = nm;
    int64_t strips = 0;
    for (int i = 0; i < nm; i++) {
        M->w[i] = w[i]->data;
        M->n[i] = (int)w[i]->n;
        M->ys[i] = ys ? ys[i] : 0;
        strips += tct_strips(w[i]->n);
        M->strip_end[i] = (int)strips;
    }
    return strips;
}

static bool tct_takes(const tc_mat *m, const tc_act *act) {
    return m->kind == TC_TERN128T && act && act->k == m->k && m->k % 128 == 0 && m->n > 0 &&
           m->n <= ((int64_t)1 << 31) - 16 && m->k <= (1 << 24) && !((uintptr_t)m->data & 15);
}
/* tiles in flight per lane: 4, or TERN_CUDA_TILED_U=6 (A/B) */
static int tct_u(void) {
    static int u = 0;
    if (!u) {
        const char *e = getenv("TERN_CUDA_TILED_U");
        u = e && atoi(e) == 6 ? 6 : 4;
    }
    return u;
}

/* Batch 1..4: NB4; 5..8: NB8; more: chunks of 8 (weights read once per chunk). */
extern "C" void tc_gemv_tiled(const tc_mat *m, const tc_act *act, float *y, size_t ys) {
    if (!tct_takes(m, act)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int64_t K = m->k;
    tsk_mats M;
    tsk_fill(&M, 1, &m, &ys);
    const int u = tct_u();
    for (size_t b0 = 0; b0 < act->batch; b0 += 8) {
        int nb = (int)(act->batch - b0 < 8 ? act->batch - b0 : 8);
        const int8_t *q = act->q + b0 * (size_t)K * 2;
        const float *sx = act->sx + b0 * (size_t)(K / 128);
        const int *corr = act->corr + b0 * (size_t)(K / 32);
        M.y[0] = y + b0 * ys;
        if (nb <= 4) {
            if (u == 6) launch_tiled<0, 6>(M, (int)K, q, sx, corr, nb);
            else launch_tiled<0, 4>(M, (int)K, q, sx, corr, nb);
        } else {
            if (u == 6) launch_tiled<1, 6>(M, (int)K, q, sx, corr, nb);
            else launch_tiled<1, 4>(M, (int)K, q, sx, corr, nb);
        }
    }
}

/* TERN_CUDA_TILED_MULTI=1: the tiled matrices of a tc_matmul_multi(_q) call in one
 * launch (read once; off by default until measured on the GPU). */
extern "C" int tc_gemv_tiled_multi_on(void) {
    static int on = -1;
    return tc_env_is(&on, "TERN_CUDA_TILED_MULTI", "1");
}

extern "C" void tc_gemv_tiled_multi(int nm, const tc_mat *const *w, const tc_act *act, float *const *y,
                                    const size_t *ys) {
    if (nm < 1 || nm > TSK_MAXM || !act) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    int64_t strips = 0;
    for (int i = 0; i < nm; i++) {
        if (!tct_takes(w[i], act)) {
            tc_note(TC_ERR_UNSUPPORTED);
            return;
        }
        strips += tct_strips(w[i]->n);
    }
    const int64_t K = act->k;
    /* the one-grid build exists for the default loops (U 4, staged activation); the
     * A/B variants and activations too large to stage go matrix by matrix */
    bool one = nm > 1 && strips <= INT32_MAX / 2 && tct_u() == 4 && tct_variant() != 1;
    for (size_t b0 = 0; one && b0 < act->batch; b0 += 8) {
        const int nb = (int)(act->batch - b0 < 8 ? act->batch - b0 : 8);
        one = tct_smem_of(nb, K) <= TCT_SA_MAX &&
              tct_aligned(act->q + b0 * (size_t)K * 2, act->sx + b0 * (size_t)(K / 128),
                          act->corr + b0 * (size_t)(K / 32));
    }
    if (!one) {
        for (int i = 0; i < nm; i++) tc_gemv_tiled(w[i], act, y[i], ys[i]);
        return;
    }
    tct_sms();
    tsk_mats M;
    tsk_fill(&M, nm, w, ys);
    for (size_t b0 = 0; b0 < act->batch; b0 += 8) {
        const int nb = (int)(act->batch - b0 < 8 ? act->batch - b0 : 8);
        const int8_t *q = act->q + b0 * (size_t)K * 2;
        const float *sx = act->sx + b0 * (size_t)(K / 128);
        const int *corr = act->corr + b0 * (size_t)(K / 32);
        for (int i = 0; i < nm; i++) M.y[i] = y[i] + b0 * ys[i];
        const size_t smem = tct_smem_of(nb, K);
        if (nb > 4) launch_tiled_k<1, 4, 4, 1>(M, strips, (int)K, q, sx, corr, nb, smem);
        else if (tct_variant() == 4) launch_tiled_k<0, 4, 4, 1>(M, strips, (int)K, q, sx, corr, nb, smem);
        else launch_tiled_k<0, 4, 2, 1>(M, strips, (int)K, q, sx, corr, nb, smem);
    }
}

/* ------------------------------------------------ stream-K bulk-copy GEMV
 *
 * k_gemv_sk: the decode GEMV (batch 1..8) over up to TSK_MAXM tiled matrices of the
 * same K in one launch, at the HBM rate. One CTA per SM (W warps). The tiles of all
 * the matrices are split evenly over the grid's warps (gemv_tiled.h: tsk_*), so every
 * warp streams the same number of bytes whatever the shapes, and the grid is one
 * wave. Each warp is its own pipeline: lane 0 keeps NS chunks of CH tiles in flight
 * with 1-D bulk copies (cp.async.bulk, completion on one mbarrier per stage) into the
 * warp's ring in shared memory; the weights are queued before tc_pdl_wait, so under
 * programmatic dependent launch they stream while the previous kernel finishes. The
 * CTA's activation rows are staged in shared memory after the wait (when they fit).
 * The arithmetic per tile is k_gemv_tiled's (mma.m16n8k32, exact integers, float
 * epilogue per group). A strip that one warp covers is written by it; a strip split
 * between warps is summed in a fixed order by the last to arrive (gemv_tiled.h).
 */

__device__ __forceinline__ uint32_t tsk_smem(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void tsk_bar_init(uint32_t bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void tsk_bar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ bool tsk_bar_try(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok != 0;
}
__device__ __forceinline__ void tsk_bar_wait(uint32_t bar, uint32_t parity) {
    while (!tsk_bar_try(bar, parity)) {
    }
}
/* bytes (a multiple of 16) from global src (16-byte aligned) to shared dst, counted
 * on bar; the weights are read once: evict them from L2 first */
__device__ __forceinline__ void tsk_bulk(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar,
                                         uint64_t pol) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ uint64_t tsk_evict_first(void) {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}


/* Lane 0: queue chunk c (tiles [a + c*CH, min(a + (c+1)*CH, b))) into the stage at
 * dst, one bulk copy per run of tiles within one matrix, all counted on bar. */
__device__ __forceinline__ void tsk_issue(const tsk_mats &M, int KT, int64_t a, int64_t b, int c,
                                          int CH, uint32_t dst, uint32_t bar, uint64_t pol) {
    int64_t u = a + (int64_t)c * CH;
    const int64_t e = u + CH < b ? u + CH : b;
    tsk_bar_expect(bar, (uint32_t)((e - u) * TCT_TILE));
    while (u < e) {
        const int i = tsk_mat_of(M, u / KT);
        const int64_t first = (int64_t)(i ? M.strip_end[i - 1] : 0) * KT; /* matrix i's tile 0 */
        const int64_t last = (int64_t)M.strip_end[i] * KT;
        const int64_t r = (e < last ? e : last) - u;
        tsk_bulk(dst, M.w[i] + (size_t)(u - first) * TCT_TILE, (uint32_t)(r * TCT_TILE), bar, pol);
        dst += (uint32_t)(r * TCT_TILE);
        u += r;
    }
}

/* The warp's sums of strip S: the plane factor and the hi/lo merge (NB4), then the
 * strip's rows written (whole strip in this warp's range) or the partial filed. */
/* The warp's sums of strip S: the plane factor and the hi/lo merge (NB4), then the
 * strip's rows written (whole strip in this warp's range) or the partial filed.
 * Partials are [8 columns][16 rows]; the warps of a split strip are w0..w1 (every one
 * after w0 starts inside S, so its slot is 0: only w0's slot is computed). Release:
 * the partial's stores, fence.acq_rel, the counter's atomic; the last one in: fence,
 * then its lanes load every partial of their element at once and add them in order. */
template <int NB8>
__device__ __noinline__ void tsk_flush(const tsk_mats &M, int S, float f0, float f1, float f2, float f3,
                                       int a, int b, int KT, int64_t T, int64_t NW, int gw, int batch,
                                       float *__restrict__ part, int *__restrict__ cnt) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ob0 = tct_col_batch(NB8, 2 * t), ob1 = ob0 + 1, op = tct_col_plane(NB8, 2 * t);
    const float m0 = ob0 < batch ? (NB8 || op ? 1.0f : 128.0f) : 0.0f;
    const float m1 = ob1 < batch ? (NB8 || op ? 1.0f : 128.0f) : 0.0f;
    float v[4] = {f0 * m0, f1 * m1, f2 * m0, f3 * m1};
    if (!NB8)
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] += __shfl_xor_sync(0xffffffffu, v[i], 2);
    const bool wr = NB8 || t < 2;
    const int i = tsk_mat_of(M, S);
    const int ls = S - (i ? M.strip_end[i - 1] : 0);
    const int n = M.n[i];
    float *y = M.y[i];
    const size_t ys = M.ys[i];
    const int row0 = ls * 16 + g, row1 = row0 + 8;
    if (a <= S * KT && (S + 1) * KT <= b) { /* the whole strip is this warp's */
        if (wr) {
            if (row0 < n && ob0 < batch) y[(size_t)ob0 * ys + row0] = v[0];
            if (row0 < n && ob1 < batch) y[(size_t)ob1 * ys + row0] = v[1];
            if (row1 < n && ob0 < batch) y[(size_t)ob0 * ys + row1] = v[2];
            if (row1 < n && ob1 < batch) y[(size_t)ob1 * ys + row1] = v[3];
        }
        return;
    }
    float *p = part + ((size_t)gw * 2 + (size_t)(S == a / KT ? 0 : 1)) * 128;
    if (wr) {
        p[ob0 * 16 + g] = v[0];
        p[ob1 * 16 + g] = v[1];
        p[ob0 * 16 + g + 8] = v[2];
        p[ob1 * 16 + g + 8] = v[3];
    }
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    __syncwarp();
    int prev = 0;
    if (lane == 0) prev = atomicAdd(&cnt[S], 1);
    prev = __shfl_sync(0xffffffffu, prev, 0);
    const int w0 = (int)tsk_owner((int64_t)S * KT, T, NW), w1 = (int)tsk_owner((int64_t)(S + 1) * KT - 1, T, NW);
    if (prev != w1 - w0) return;
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    const int s0 = tsk_slot(w0, S, KT, T, NW);
    for (int e = lane; e < batch * 16; e += 32) { /* element e: column e / 16, row e % 16 */
        const int row = ls * 16 + (e & 15);
        float acc = __ldcg(part + ((size_t)w0 * 2 + (size_t)s0) * 128 + e);
        int w = w0 + 1;
        for (; w + 3 <= w1; w += 4) { /* four loads in flight */
            const float x0 = __ldcg(part + (size_t)w * 256 + e), x1 = __ldcg(part + (size_t)(w + 1) * 256 + e);
            const float x2 = __ldcg(part + (size_t)(w + 2) * 256 + e), x3 = __ldcg(part + (size_t)(w + 3) * 256 + e);
            acc += x0;
            acc += x1;
            acc += x2;
            acc += x3;
        }
        for (; w <= w1; w++) acc += __ldcg(part + (size_t)w * 256 + e);
        if (row < n) y[(size_t)(e >> 4) * ys + row] = acc;
    }
    if (lane == 0) cnt[S] = 0; /* ready for the next launch */
}

/* One lane's view of the activation: its B-fragment column (batch row, plane) and its
 * two output columns' sx / corr, in shared memory (SA) or global memory. */
struct tsk_actv {
    uint32_t sq0, sx0, sx1, sc0, sc1;
    const int8_t *pq0;
    const float *px0, *px1;
    const int *pc0, *pc1;
    bool wantc; /* the lo columns carry the -corr term */
};
template <int NB8>
__device__ __forceinline__ tsk_actv tsk_act_lane(int lane, int batch, int K, uint32_t s_q, uint32_t s_c,
                                                 uint32_t s_x, const int8_t *q, const float *sx,
                                                 const int *corr) {
    const int g = lane >> 2, t = lane & 3, G = K >> 7, nu = K >> 5, RS = 2 * K + 16;
    const int bc = tct_col_batch(NB8, g), bp = tct_col_plane(NB8, g);
    const int ob0 = tct_col_batch(NB8, 2 * t), ob1 = ob0 + 1, op = tct_col_plane(NB8, 2 * t);
    const int cb = bc < batch ? bc : 0, c0b = ob0 < batch ? ob0 : 0, c1b = ob1 < batch ? ob1 : 0;
    tsk_actv A;
    A.wantc = NB8 || op;
    A.sq0 = s_q + (uint32_t)(cb * RS + bp * 32 + t * 64);
    A.sx0 = s_x + (uint32_t)(c0b * G * 4);
    A.sx1 = s_x + (uint32_t)(c1b * G * 4);
    A.sc0 = s_c + (uint32_t)(c0b * nu * 4);
    A.sc1 = s_c + (uint32_t)(c1b * nu * 4);
    A.pq0 = q + (size_t)cb * (size_t)K * 2 + (size_t)bp * 32 + (size_t)t * 64;
    A.px0 = sx + (size_t)c0b * G;
    A.px1 = sx + (size_t)c1b * G;
    A.pc0 = corr + (size_t)c0b * nu;
    A.pc1 = corr + (size_t)c1b * nu;
    return A;
}

/* One 16 x 256 tile (tile j of its strip) into the lane's sums f (k_gemv_tiled's
 * arithmetic); pad: its second group is the zero padding of an odd group count. */
template <int NB8, int SA>
__device__ __forceinline__ void tsk_tile(const uint32_t wg[4], const uint32_t wh[4], uint2 s2, int j,
                                         bool pad, const tsk_actv &A, float f[4]) {
    const uint32_t sq0 = A.sq0, sx0 = A.sx0, sx1 = A.sx1, sc0 = A.sc0, sc1 = A.sc1;
    const int8_t *pq0 = A.pq0;
    const float *px0 = A.px0, *px1 = A.px1;
    const int *pc0 = A.pc0, *pc1 = A.pc1;
    const bool wantc = A.wantc;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                if (e == 1 && pad) break; /* the padding group */
                const uint32_t qs = sq0 + (uint32_t)(j * 512 + e * 256);
                const int4 *qp = (const int4 *)(pq0 + (size_t)j * 512 + e * 256);
                const int4 h0 = SA ? tct_lds4(qs) : tct_ld_act(qp);
                const int4 h1 = SA ? tct_lds4(qs + 16) : tct_ld_act(qp + 1);
                int4 l0 = make_int4(0, 0, 0, 0), l1 = l0;
                if (NB8) {
                    l0 = SA ? tct_lds4(qs + 32) : tct_ld_act(qp + 2);
                    l1 = SA ? tct_lds4(qs + 48) : tct_ld_act(qp + 3);
                }
                int H[4] = {0, 0, 0, 0}, L[4] = {0, 0, 0, 0};
                uint32_t af[4];
                tct_a_frag(wg, wh, e, 0, af);
                tct_mma(H, af, h0.x, h0.y);
                if (NB8) tct_mma(L, af, l0.x, l0.y);
                tct_a_frag(wg, wh, e, 1, af);
                tct_mma(H, af, h0.z, h0.w);
                if (NB8) tct_mma(L, af, l0.z, l0.w);
                tct_a_frag(wg, wh, e, 2, af);
                tct_mma(H, af, h1.x, h1.y);
                if (NB8) tct_mma(L, af, l1.x, l1.y);
                tct_a_frag(wg, wh, e, 3, af);
                tct_mma(H, af, h1.z, h1.w);
                if (NB8) tct_mma(L, af, l1.z, l1.w);
                int cs0 = 0, cs1 = 0;
                const int un = 8 * j + 4 * e; /* the group's first unit */
                if (wantc) {
                    const int4 ca = SA ? tct_lds4(sc0 + (uint32_t)(un * 4)) : tct_ld_act(pc0 + un);
                    const int4 cb4 = SA ? tct_lds4(sc1 + (uint32_t)(un * 4)) : tct_ld_act(pc1 + un);
                    cs0 = (ca.x + ca.y) + (ca.z + ca.w);
                    cs1 = (cb4.x + cb4.y) + (cb4.z + cb4.w);
                }
                const float dg = tct_h(s2.x, e), dh = tct_h(s2.y, e);
                const int gi = 2 * j + e;
                const float x0 = SA ? tct_ldsf(sx0 + (uint32_t)(gi * 4)) : tct_ld_f(px0 + gi);
                const float x1 = SA ? tct_ldsf(sx1 + (uint32_t)(gi * 4)) : tct_ld_f(px1 + gi);
                int v[4];
#pragma unroll
                for (int i = 0; i < 4; i++)
                    v[i] = (NB8 ? H[i] * 128 + L[i] : H[i]) - ((i & 1) ? cs1 : cs0);
                f[0] = fmaf((float)v[0], dg * x0, f[0]);
                f[1] = fmaf((float)v[1], dg * x1, f[1]);
                f[2] = fmaf((float)v[2], dh * x0, f[2]);
                f[3] = fmaf((float)v[3], dh * x1, f[3]);
            }
}

template <int NB8, int SA, int W>
__global__ void __launch_bounds__(W * 32, 1) k_gemv_sk(tsk_mats M, int K, int64_t T, int CH, int NS,
                                                    const int8_t *__restrict__ q,
                                                    const float *__restrict__ sx,
                                                    const int *__restrict__ corr, int batch,
                                                    float *__restrict__ part, int *__restrict__ cnt) {
    extern __shared__ __align__(128) uint8_t tsm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2;
    const int G = K >> 7, KT = (G + 1) >> 1, nu = K >> 5;
    const bool odd = G & 1;
    const int64_t NW = (int64_t)gridDim.x * W, gw = (int64_t)blockIdx.x * W + warp;
    const int64_t a = tsk_begin(gw, T, NW), b = tsk_begin(gw + 1, T, NW);
    const int nch = (int)((b - a + CH - 1) / CH);
    const uint32_t base = tsk_smem(tsm);
    const uint32_t ring = base + (uint32_t)(warp * NS * CH * TCT_TILE);
    const uint32_t bars = base + (uint32_t)(W * NS * CH * TCT_TILE + warp * NS * 8);
    const uint64_t pol = tsk_evict_first();
    /* 1. the first NS chunks of weights (they depend on no earlier kernel) */
    if (lane == 0) {
        for (int s = 0; s < NS; s++) tsk_bar_init(bars + 8 * s);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        for (int c = 0; c < NS && c < nch; c++)
            tsk_issue(M, KT, a, b, c, CH, ring + (uint32_t)(c * CH * TCT_TILE), bars + 8 * c, pol);
    }
    __syncwarp();
    tc_pdl_trigger();
    tc_pdl_wait();
    /* 2. SA: the activation rows this call reads, in shared memory (the layout of
     * k_gemv_tiled: nbr rows of q at stride 2K + 16, then corr, then sx) */
    const int nbr = batch < (NB8 ? 8 : 4) ? batch : (NB8 ? 8 : 4);
    const int RS = 2 * K + 16;
    const uint32_t s_q = base + (uint32_t)(W * NS * (CH * TCT_TILE + 8));
    const uint32_t s_c = s_q + (uint32_t)(nbr * RS), s_x = s_c + (uint32_t)(nbr * nu * 4);
    if (SA) {
        const int qc = K >> 3;
        for (int i = threadIdx.x; i < nbr * qc; i += blockDim.x) {
            const int bb = i / qc, c = i - bb * qc;
            tct_cp16(s_q + (uint32_t)(bb * RS + 16 * c), q + (size_t)bb * (size_t)K * 2 + 16 * (size_t)c);
        }
        for (int i = threadIdx.x; i < nbr * G; i += blockDim.x) {
            tct_cp16(s_c + 16u * (uint32_t)i, corr + 4 * (size_t)i);
            tct_cp4(s_x + 4u * (uint32_t)i, sx + i);
        }
        asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
        __syncthreads();
    }
    const tsk_actv A = tsk_act_lane<NB8>(lane, batch, K, s_q, s_c, s_x, q, sx, corr);

    float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t cur = a / KT;
    int s = 0;
    uint32_t phase = 0;
    for (int c = 0; c < nch; c++) {
        tsk_bar_wait(bars + 8 * s, phase);
        const int64_t u0 = a + (int64_t)c * CH;
        const int ntl = (int)(b - u0 < CH ? b - u0 : CH);
        const uint32_t stage = ring + (uint32_t)(s * CH * TCT_TILE);
        for (int k = 0; k < ntl; k++) {
            const int64_t u = u0 + k, S = u / KT;
            const int j = (int)(u - S * KT);
            if (S != cur) {
                tsk_flush<NB8>(M, (int)cur, f[0], f[1], f[2], f[3], (int)a, (int)b, KT, T, NW, (int)gw, batch, part, cnt);
                f[0] = f[1] = f[2] = f[3] = 0.0f;
                cur = S;
            }
            const uint32_t tile = stage + (uint32_t)(k * TCT_TILE);
            const int4 wa4 = tct_lds4(tile + 16 * lane), wb4 = tct_lds4(tile + 512 + 16 * lane);
            uint2 s2;
            asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(s2.x), "=r"(s2.y) : "r"(tile + 1024 + 8 * g));
            const uint32_t wg[4] = {(uint32_t)wa4.x, (uint32_t)wa4.y, (uint32_t)wa4.z, (uint32_t)wa4.w};
            const uint32_t wh[4] = {(uint32_t)wb4.x, (uint32_t)wb4.y, (uint32_t)wb4.z, (uint32_t)wb4.w};
            tsk_tile<NB8, SA>(wg, wh, s2, j, odd && j == KT - 1, A, f);
        }
        __syncwarp(); /* every lane is done with the stage: refill it */
        if (lane == 0 && c + NS < nch) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            tsk_issue(M, KT, a, b, c + NS, CH, stage, bars + 8 * s, pol);
        }
        if (++s == NS) {
            s = 0;
            phase ^= 1;
        }
    }
    tsk_flush<NB8>(M, (int)cur, f[0], f[1], f[2], f[3], (int)a, (int)b, KT, T, NW, (int)gw, batch, part, cnt);
}

/* The weight stream of a warp without divisions: the address of tile u's bytes (a
 * matrix's tiles are contiguous; at a matrix's end the next one's first tile). */
struct tsk_ldc {
    int u, end, i; /* end: the first tile of the next matrix (T < 2^31: TSK_MAX_STRIPS) */
    const uint8_t *p;
};
__device__ __forceinline__ tsk_ldc tsk_ld_at(const tsk_mats &M, int KT, int u) {
    tsk_ldc c;
    c.u = u;
    c.i = tsk_mat_of(M, u / KT);
    const int first = (c.i ? M.strip_end[c.i - 1] : 0) * KT;
    c.end = M.strip_end[c.i] * KT;
    c.p = M.w[c.i] + (size_t)(u - first) * TCT_TILE;
    return c;
}
__device__ __forceinline__ void tsk_ld_next(const tsk_mats &M, int KT, tsk_ldc &c) {
    c.p += TCT_TILE;
    if (++c.u == c.end && c.i + 1 < M.nm) {
        c.i++;
        c.p = M.w[c.i];
        c.end = M.strip_end[c.i] * KT;
    }
}

/* k_gemv_skr: the stream-K split of k_gemv_sk with k_gemv_tiled's register streaming:
 * CTAs of 4 warps, as many per SM as fit (the grid is one wave), each lane keeps U
 * tiles in flight in registers (16 + 16 + 8 bytes each); the first U are loaded
 * before the PDL wait. */
template <int NB8, int SA, int U>
__global__ void __launch_bounds__(128) k_gemv_skr(tsk_mats M, int K, int64_t T,
                                                  const int8_t *__restrict__ q,
                                                  const float *__restrict__ sx,
                                                  const int *__restrict__ corr, int batch,
                                                  float *__restrict__ part, int *__restrict__ cnt) {
    extern __shared__ __align__(16) uint8_t tsa[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2;
    const int G = K >> 7, KT = (G + 1) >> 1, nu = K >> 5;
    const bool odd = G & 1;
    const int64_t NW = (int64_t)gridDim.x * 4, gw = (int64_t)blockIdx.x * 4 + warp;
    const int a = (int)tsk_begin(gw, T, NW), b = (int)tsk_begin(gw + 1, T, NW);
    tsk_ldc ld = tsk_ld_at(M, KT, a);
    uint4 wa[U], wb[U];
    uint2 sc[U];
#pragma unroll
    for (int k = 0; k < U; k++) {
        if (a + k < b) {
            wa[k] = tct_ld_stream(ld.p + 16 * lane);
            wb[k] = tct_ld_stream(ld.p + 512 + 16 * lane);
            sc[k] = tct_ld_stream2(ld.p + 1024 + 8 * g);
            tsk_ld_next(M, KT, ld);
        }
    }
    tc_pdl_trigger();
    tc_pdl_wait();
    const int nbr = batch < (NB8 ? 8 : 4) ? batch : (NB8 ? 8 : 4);
    const int RS = 2 * K + 16;
    const uint32_t s_q = tsk_smem(tsa);
    const uint32_t s_c = s_q + (uint32_t)(nbr * RS), s_x = s_c + (uint32_t)(nbr * nu * 4);
    if (SA) {
        const int qc = K >> 3;
        for (int i = threadIdx.x; i < nbr * qc; i += blockDim.x) {
            const int bb = i / qc, c = i - bb * qc;
            tct_cp16(s_q + (uint32_t)(bb * RS + 16 * c), q + (size_t)bb * (size_t)K * 2 + 16 * (size_t)c);
        }
        for (int i = threadIdx.x; i < nbr * G; i += blockDim.x) {
            tct_cp16(s_c + 16u * (uint32_t)i, corr + 4 * (size_t)i);
            tct_cp4(s_x + 4u * (uint32_t)i, sx + i);
        }
        asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
        __syncthreads();
    }
    const tsk_actv A = tsk_act_lane<NB8>(lane, batch, K, s_q, s_c, s_x, q, sx, corr);
    float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int cur = a / KT, j = a - cur * KT; /* the tile being summed: strip cur, place j */
    int S = cur;
#pragma unroll 1
    for (int u0 = a; u0 < b; u0 += U) {
#pragma unroll
        for (int k = 0; k < U; k++) {
            if (u0 + k < b) {
                if (S != cur) {
                    tsk_flush<NB8>(M, (int)cur, f[0], f[1], f[2], f[3], (int)a, (int)b, KT, T, NW, (int)gw, batch, part, cnt);
                    f[0] = f[1] = f[2] = f[3] = 0.0f;
                    cur = S;
                }
                const uint32_t wg[4] = {wa[k].x, wa[k].y, wa[k].z, wa[k].w};
                const uint32_t wh[4] = {wb[k].x, wb[k].y, wb[k].z, wb[k].w};
                tsk_tile<NB8, SA>(wg, wh, sc[k], j, odd && j == KT - 1, A, f);
                if (ld.u < b) { /* refill the slot: U - 1 tiles stay in flight */
                    wa[k] = tct_ld_stream(ld.p + 16 * lane);
                    wb[k] = tct_ld_stream(ld.p + 512 + 16 * lane);
                    sc[k] = tct_ld_stream2(ld.p + 1024 + 8 * g);
                    tsk_ld_next(M, KT, ld);
                }
                if (++j == KT) {
                    j = 0;
                    S++;
                }
            }
        }
    }
    tsk_flush<NB8>(M, (int)cur, f[0], f[1], f[2], f[3], (int)a, (int)b, KT, T, NW, (int)gw, batch, part, cnt);
}

/* The split's scratch: partials [SMs * TSK_MAXW warps][2][16][8] and one counter per
 * strip (zero between launches: the last warp of a strip resets it). Allocated once,
 * outside any capture (a step graph keeps the addresses). */
#define TSK_MAXW 64 /* warps per SM at most (2048 threads) */
#define TSK_MAX_STRIPS (1 << 20)
#define TSK_SMEM_MAX (200 * 1024)
static float *g_sk_part;
static int *g_sk_cnt;
static int g_sk_w = 8, g_sk_ns = 4, g_sk_ch = 2, g_sk_cfg; /* TERN_CUDA_SK="W,NS,CH" */
static int g_sk_bulk = -1;                /* TERN_CUDA_GEMV=bulk: k_gemv_sk, else k_gemv_skr */
static int g_sk_on = -1;                  /* TERN_CUDA_GEMV=skr or bulk: the stream-K kernels
                                           * take batch <= 8 calls; else k_gemv_tiled */
static int g_skr_u = 4, g_skr_drop = 0;   /* TERN_CUDA_SKR="U,DROP": tiles in flight per lane
                                           * (2 or 4), CTAs per SM left free (for PDL) */

static int tsk_setup(void) {
    if (!g_sms) {
        int v = 0;
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0);
        g_sms = v > 0 ? v : 132;
    }
    if (!g_sk_cfg) {
        g_sk_cfg = 1;
        const char *e = getenv("TERN_CUDA_SK");
        int w = 0, ns = 0, ch = 0;
        if (e && sscanf(e, "%d,%d,%d", &w, &ns, &ch) == 3 && (w == 8 || w == 16) && ns >= 1 &&
            ns <= 8 && ch >= 1 && ch <= 8) {
            g_sk_w = w;
            g_sk_ns = ns;
            g_sk_ch = ch;
        }
    }
    if (g_sk_bulk < 0) {
        const char *e = getenv("TERN_CUDA_GEMV");
        g_sk_bulk = e && !strcmp(e, "bulk");
        g_sk_on = e && (!strcmp(e, "bulk") || !strcmp(e, "skr"));
        const char *r = getenv("TERN_CUDA_SKR");
        int u = 0, d = -1;
        if (r && sscanf(r, "%d,%d", &u, &d) == 2 && (u == 2 || u == 4) && d >= 0 && d <= 8) {
            g_skr_u = u;
            g_skr_drop = d;
        }
    }
    if (g_sk_part) return 0;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(tc_stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
        return -1; /* cannot allocate while a graph is being recorded */
    g_sk_part = (float *)tc_malloc((size_t)g_sms * TSK_MAXW * 2 * 128 * sizeof(float));
    g_sk_cnt = (int *)tc_malloc((size_t)TSK_MAX_STRIPS * sizeof(int));
    if (!g_sk_part || !g_sk_cnt) {
        if (g_sk_part) tc_free(g_sk_part, (size_t)g_sms * TSK_MAXW * 2 * 128 * sizeof(float));
        if (g_sk_cnt) tc_free(g_sk_cnt, (size_t)TSK_MAX_STRIPS * sizeof(int));
        g_sk_part = NULL;
        g_sk_cnt = NULL;
        return -1;
    }
    return 0;
}



extern "C" int tc_gemv_sk_config(int bulk, int p0, int p1, int p2) {
    tsk_setup(); /* the environment is read first, so that this wins */
    if (bulk < 0) { /* back to k_gemv_tiled */
        g_sk_on = 0;
        return 0;
    }
    g_sk_on = 1;
    if (bulk) {
        if (!(p0 == 8 || p0 == 16) || p1 < 1 || p1 > 8 || p2 < 1 || p2 > 8) return TC_ERR_UNSUPPORTED;
        g_sk_w = p0;
        g_sk_ns = p1;
        g_sk_ch = p2;
    } else if (!(p0 == 2 || p0 == 4) || p1 < 0 || p1 > 8) {
        return TC_ERR_UNSUPPORTED;
    } else {
        g_skr_u = p0;
        g_skr_drop = p1;
    }
    g_sk_bulk = bulk ? 1 : 0;
    return 0;
}

template <int NB8, int SA, int W>
static void launch_sk(const tsk_mats &M, int K, int64_t T, unsigned grid, int CH, int NS,
                      size_t smem, const int8_t *q, const float *sx, const int *corr, int batch) {
    static int attr = 0; /* 1 set, -1 failed */
    if (!attr) {
        cudaError_t e = cudaFuncSetAttribute(k_gemv_sk<NB8, SA, W>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
        attr = e == cudaSuccess ? 1 : -1;
        if (e != cudaSuccess) tc_note((int)e);
    }
    if (attr < 0) return;
    tc_launch(k_gemv_sk<NB8, SA, W>, dim3(grid), dim3(W * 32), smem, 1, M, K, T, CH, NS, q, sx, corr,
              batch, g_sk_part, g_sk_cnt);
}

/* The grid of k_gemv_skr: SMs x the CTAs of its SA instantiation that fit per SM at
 * the shared memory of the batch group's largest activation (minus g_skr_drop, for
 * PDL), so that every batch size of a group (1..4, 5..8), SA or not, gets the same
 * split (the same sums in the same order). At least 2 tiles per warp. */
template <int NB8, int U>
static int64_t skr_grid(int K, int64_t T) {
    static size_t occ_smem = (size_t)-1;
    static int occ = 0;
    size_t sm = tct_sa_bytes(NB8 ? 8 : 4, K);
    if (sm > TCT_SA_MAX) sm = TCT_SA_MAX;
    if (occ_smem != sm) {
        int n = 0;
        cudaFuncSetAttribute(k_gemv_skr<NB8, 1, U>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             227 * 1024);
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k_gemv_skr<NB8, 1, U>, 128, sm) !=
            cudaSuccess) {
            cudaGetLastError();
            n = 1;
        }
        occ = n > 1 + g_skr_drop ? n - g_skr_drop : 1;
        if (occ > TSK_MAXW / 4) occ = TSK_MAXW / 4;
        occ_smem = sm;
    }
    int64_t P = (int64_t)g_sms * occ;
    if (P * 4 * 2 > T) P = T / 8;
    return P < 1 ? 1 : P;
}

template <int NB8, int SA, int U>
static void launch_skr(const tsk_mats &M, int K, int64_t T, size_t smem, const int8_t *q,
                       const float *sx, const int *corr, int batch) {
    static int attr = 0;
    if (!attr) {
        cudaError_t e = cudaFuncSetAttribute(k_gemv_skr<NB8, SA, U>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024);
        attr = e == cudaSuccess ? 1 : -1;
        if (e != cudaSuccess) tc_note((int)e);
    }
    if (attr < 0) return;
    const int64_t P = skr_grid<NB8, U>(K, T);
    tc_launch(k_gemv_skr<NB8, SA, U>, dim3((unsigned)P), dim3(128), smem, 1, M, K, T, q, sx, corr,
              batch, g_sk_part, g_sk_cnt);
}

template <int NB8, int SA>
static void launch_skr_u(const tsk_mats &M, int K, int64_t T, size_t smem, const int8_t *q,
                         const float *sx, const int *corr, int batch) {
    if (g_skr_u == 2) launch_skr<NB8, SA, 2>(M, K, T, smem, q, sx, corr, batch);
    else launch_skr<NB8, SA, 4>(M, K, T, smem, q, sx, corr, batch);
}

template <int NB8, int SA>
static void launch_sk_w(int W, const tsk_mats &M, int K, int64_t T, unsigned grid, int CH, int NS,
                        size_t smem, const int8_t *q, const float *sx, const int *corr, int batch) {
    if (W == 16) launch_sk<NB8, SA, 16>(M, K, T, grid, CH, NS, smem, q, sx, corr, batch);
    else launch_sk<NB8, SA, 8>(M, K, T, grid, CH, NS, smem, q, sx, corr, batch);
}

/* 1 when k_gemv_sk takes these matrices (TC_TERN128T, same k as act, 16-byte aligned,
 * at most TSK_MAXM, strips within the counters); 0: the caller uses tc_gemv_tiled. */
extern "C" int tc_gemv_sk_ok(int nm, const tc_mat *const *w, const tc_act *act) {
    if (tsk_setup() || !g_sk_on) return 0;
    if (nm < 1 || nm > TSK_MAXM || !act || act->k % 128 || act->k > (1 << 24)) return 0;
    int64_t strips = 0;
    for (int i = 0; i < nm; i++) {
        const tc_mat *m = w[i];
        if (m->kind != TC_TERN128T || m->k != act->k || m->n <= 0 ||
            m->n > ((int64_t)1 << 31) - 16 || ((uintptr_t)m->data & 15))
            return 0;
        strips += tct_strips(m->n);
    }
    return strips <= TSK_MAX_STRIPS;
}

extern "C" void tc_gemv_sk(int nm, const tc_mat *const *w, const tc_act *act, float *const *y,
                           const size_t *ys) {
    if (!tc_gemv_sk_ok(nm, w, act)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int64_t K = act->k, KT = tct_ktiles(K);
    tsk_mats M;
    const int64_t strips = tsk_fill(&M, nm, w, ys);
    const int64_t T = strips * KT;
    if (!g_sk_bulk) { /* k_gemv_skr */
        if (T < 8) {
            for (int i = 0; i < nm; i++) tc_gemv_tiled(w[i], act, y[i], ys[i]);
            return;
        }
        for (size_t b0 = 0; b0 < act->batch; b0 += 8) {
            const int nb = (int)(act->batch - b0 < 8 ? act->batch - b0 : 8);
            const int8_t *q = act->q + b0 * (size_t)K * 2;
            const float *sx = act->sx + b0 * (size_t)(K / 128);
            const int *corr = act->corr + b0 * (size_t)(K / 32);
            for (int i = 0; i < nm; i++) {
                M.y[i] = y[i] + b0 * ys[i];
                M.ys[i] = ys[i];
            }
            const int nb8 = nb > 4;
            const int nbr = nb < (nb8 ? 8 : 4) ? nb : (nb8 ? 8 : 4);
            const size_t sab = tct_sa_bytes(nbr, K);
            const bool sa = sab <= TCT_SA_MAX && !((uintptr_t)q & 15) && !((uintptr_t)corr & 15) &&
                            !((uintptr_t)sx & 3);
            if (nb8) {
                if (sa) launch_skr_u<1, 1>(M, (int)K, T, sab, q, sx, corr, nb);
                else launch_skr_u<1, 0>(M, (int)K, T, 0, q, sx, corr, nb);
            } else {
                if (sa) launch_skr_u<0, 1>(M, (int)K, T, sab, q, sx, corr, nb);
                else launch_skr_u<0, 0>(M, (int)K, T, 0, q, sx, corr, nb);
            }
        }
        return;
    }
    const int W = g_sk_w, CH = g_sk_ch, NS = g_sk_ns;
    /* one CTA per SM, at least 2 tiles per warp */
    int64_t P = T / ((int64_t)W * 2);
    if (P > g_sms) P = g_sms;
    if (P < 1) P = 1;
    if (P * W > T) { /* fewer tiles than one CTA's warps: the per-matrix kernel */
        for (int i = 0; i < nm; i++) tc_gemv_tiled(w[i], act, y[i], ys[i]);
        return;
    }
    const size_t ring = (size_t)W * NS * ((size_t)CH * TCT_TILE + 8);
    for (size_t b0 = 0; b0 < act->batch; b0 += 8) {
        const int nb = (int)(act->batch - b0 < 8 ? act->batch - b0 : 8);
        const int8_t *q = act->q + b0 * (size_t)K * 2;
        const float *sx = act->sx + b0 * (size_t)(K / 128);
        const int *corr = act->corr + b0 * (size_t)(K / 32);
        for (int i = 0; i < nm; i++) {
            M.y[i] = y[i] + b0 * ys[i];
            M.ys[i] = ys[i];
        }
        const int nb8 = nb > 4;
        const int nbr = nb < (nb8 ? 8 : 4) ? nb : (nb8 ? 8 : 4);
        const size_t sab = tct_sa_bytes(nbr, K);
        const bool sa = ring + sab <= TSK_SMEM_MAX && !((uintptr_t)q & 15) &&
                        !((uintptr_t)corr & 15) && !((uintptr_t)sx & 3);
        const size_t smem = ring + (sa ? sab : 0);
        if (nb8) {
            if (sa) launch_sk_w<1, 1>(W, M, (int)K, T, (unsigned)P, CH, NS, smem, q, sx, corr, nb);
            else launch_sk_w<1, 0>(W, M, (int)K, T, (unsigned)P, CH, NS, smem, q, sx, corr, nb);
        } else {
            if (sa) launch_sk_w<0, 1>(W, M, (int)K, T, (unsigned)P, CH, NS, smem, q, sx, corr, nb);
            else launch_sk_w<0, 0>(W, M, (int)K, T, (unsigned)P, CH, NS, smem, q, sx, corr, nb);
        }
    }
}
