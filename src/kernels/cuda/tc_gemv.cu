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
#include "kernels/cuda/mm_choose.h"
#include "kernels/cuda/ptx.cuh"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shared-memory image of the activation rows a CTA reads (SA): nbr batch rows of
 * q at row stride 2K + 16 (the 16 bytes put batch rows b and b+1 of a warp's B
 * loads in different bank groups), then corr [nbr][K/32], then sx [nbr][K/128]:
 * tc_mm_stage_bytes (mm_choose.h) bytes. */

__device__ __forceinline__ float tct_h(uint32_t v, int hi) {
    return __half2float(__ushort_as_half((unsigned short)(hi ? v >> 16 : v & 0xffffu)));
}

#define TCT_MAX_WARPS 16
/* SA 2 (the staged branch-free loop) is compiled for two CTAs of up to 10 warps per
 * SM (<= 96 registers: 20 resident warps per SM instead of 16 at 106), so that the
 * launch shape can be one wave more often; SA 4 is the same loop at CTAs of up to 16
 * warps (106 registers; batch 5..8, where SA 2 would spill), SA 0 (unstaged) too. */
/* NB8 2 (the exact 8-row build of a verify: two float accumulators per column) is
 * bounded at CTAs of 12 warps (<= 168 registers: it needs ~130 and spilled at 128). */
#define TCT_LB_THREADS(nb8, sa) ((nb8) == 2 ? 384 : (sa) == 2 ? 320 : 512)
#define TCT_LB_BLOCKS(nb8, sa) ((nb8) != 2 && (sa) == 2 ? 2 : 1)
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

/* The float epilogue of one group: v = (NB8 1: 128 hi + lo, else the column's plane
 * sum) - corr, times the row scale d and the column scale sx. The same operations in
 * the same order as the SA 0 loop body (the same bits). NB8 2 (exact rows): column c is
 * batch row c as in NB8 1, but hi and lo keep NB4's two accumulators, f += H (d sx) and
 * fl += (L - corr)(d sx), each the float operation NB4 does in that row's hi and lo
 * column, so a row's sum has batch 1's bits (tct_fin joins them as NB4 does). */
template <int NB8>
__device__ __forceinline__ void tct_fma4(const int v[4], float dg, float dh, float s0, float s1, float f[4]) {
    f[0] = fmaf((float)v[0], dg * s0, f[0]);
    f[1] = fmaf((float)v[1], dg * s1, f[1]);
    f[2] = fmaf((float)v[2], dh * s0, f[2]);
    f[3] = fmaf((float)v[3], dh * s1, f[3]);
}
template <int NB8>
__device__ __forceinline__ void tct_epi(const int H[4], const int L[4], int2 c0, int2 c1, uint2 s2,
                                        int e, float f[4], float fl[4]) {
    const float dg = tct_h(s2.x, e), dh = tct_h(s2.y, e);
    const float s0 = __int_as_float(c0.x), s1 = __int_as_float(c1.x);
    int v[4];
    if constexpr (NB8 == 2) {
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = H[i]; /* NB4's hi column: corr 0 */
        tct_fma4<NB8>(v, dg, dh, s0, s1, f);
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = L[i] - ((i & 1) ? c1.y : c0.y);
        tct_fma4<NB8>(v, dg, dh, s0, s1, fl);
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) v[i] = (NB8 ? H[i] * 128 + L[i] : H[i]) - ((i & 1) ? c1.y : c0.y);
        tct_fma4<NB8>(v, dg, dh, s0, s1, f);
    }
}

/* Both groups of a whole tile, their mma chains interleaved in the source (ptxas
 * keeps them apart otherwise: two dependent chains of four instead of one of eight
 * per tile). NB4 only: at NB8 the interleaving spills (the hi and lo mmas are two
 * chains per group already). */
template <int NB8, class Src>
__device__ __forceinline__ void tct_tile2(const uint32_t wg[4], const uint32_t wh[4], uint2 s2,
                                          const Src &sr, float f[4], float fl[4]) {
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
    for (int e = 0; e < 2; e++) tct_epi<NB8>(H[e], L[e], sr.X(0, e), sr.X(1, e), s2, e, f, fl);
}

/* One group e of a tile (the tail, and NB8). */
template <int NB8, class Src>
__device__ __forceinline__ void tct_group2(const uint32_t wg[4], const uint32_t wh[4], uint2 s2,
                                           int e, const Src &sr, float f[4], float fl[4]) {
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
    tct_epi<NB8>(H, L, sr.X(0, e), sr.X(1, e), s2, e, f, fl);
}

/* tsk_mats, tsk_mat_of, tct_mat: gemv_tiled.h (shared with the CPU test of the index
 * rules); the reference form for the stream-K kernels below */
__device__ __forceinline__ int tsk_mat_of(const tsk_mats &M, int64_t S) { return tsk_mat_of(&M, S); }

/* M: the matrices (MM 0: M.w[0] alone, as one launch per matrix always was; MM 1: all
 * M.nm of them in one grid, a CTA's strips possibly in two matrices). */
template <int NB8, int U, int SA, int MM>
__global__ void __launch_bounds__(TCT_LB_THREADS(NB8, SA), TCT_LB_BLOCKS(NB8, SA))
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
    float fl[4] = {0.0f, 0.0f, 0.0f, 0.0f}; /* NB8 2: the lo accumulators */
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
    const uint32_t s_c = s_q + (uint32_t)(nbr * RS);
    uint32_t sq = 0;
    if (TCT_STAGED2(SA)) {
        const int qc = K >> 3; /* 16-byte chunks per batch row of q */
        for (int i = threadIdx.x; i < nbr * qc; i += blockDim.x) {
            const int b = i / qc, c = i - b * qc;
            cp_async16(s_q + (uint32_t)(b * RS + 16 * c), q + (size_t)b * (size_t)K * 2 + 16 * (size_t)c);
        }
        /* per (batch row, group) 16 bytes: {sx, 0} (the hi columns of NB4) then
         * {sx, corr summed over the group's 4 units}, at s_c */
        for (int i = threadIdx.x; i < nbr * G; i += blockDim.x) {
            const int4 c4 = *(const int4 *)(corr + 4 * (size_t)i);
            const int xs = __float_as_int(sx[i]);
            tct_sts4(s_c + 16u * (uint32_t)i, make_int4(xs, 0, xs, (c4.x + c4.y) + (c4.z + c4.w)));
        }
        asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        sq = s_q + (uint32_t)((bc < batch ? bc : 0) * RS + bp * 32 + t * 64 + j0 * 512);
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
                    for (int e = 0; e < 2; e++) tct_group2<NB8>(wg, wh, s2, e, sr, f, fl);
                } else {
                    tct_tile2<NB8>(wg, wh, s2, sr, f, fl);
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
                tct_group2<NB8>(wg, wh, sc[u], 0, sr, f, fl);
                if (jj + u < nfull) tct_group2<NB8>(wg, wh, sc[u], 1, sr, f, fl);
            }
        }
#undef TCT_SRC
        jj = nt;
    }
#pragma unroll 1
    for (; SA == 0 && jj < nt; jj += U) { /* SA 0: the activation from global memory (L1) */
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
                    const int4 h0 = tc_ld_act(qp);
                    const int4 h1 = tc_ld_act(qp + 1);
                    int4 l0 = make_int4(0, 0, 0, 0), l1 = l0;
                    if (NB8) {
                        l0 = tc_ld_act(qp + 2);
                        l1 = tc_ld_act(qp + 3);
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
                        const int4 ca = tc_ld_act(pc0 + 8 * u + 4 * e);
                        const int4 cb = tc_ld_act(pc1 + 8 * u + 4 * e);
                        c0 = (ca.x + ca.y) + (ca.z + ca.w);
                        c1 = (cb.x + cb.y) + (cb.z + cb.w);
                    }
                    const float s0 = tct_ld_f(px0 + 2 * u + e);
                    const float s1 = tct_ld_f(px1 + 2 * u + e);
                    tct_epi<NB8>(H, L, make_int2(__float_as_int(s0), c0), make_int2(__float_as_int(s1), c1), s2,
                                 e, f, fl);
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
    }
    /* the plane factor (128 for the hi columns of NB4) and dropped columns */
    const float m0 = ob0 < batch ? (NB8 == 1 || op ? 1.0f : 128.0f) : 0.0f;
    const float m1 = ob1 < batch ? (NB8 == 1 || op ? 1.0f : 128.0f) : 0.0f;
    f[0] *= m0;
    f[1] *= m1;
    f[2] *= m0;
    f[3] *= m1;
    if (NB8 == 2) /* 128 hi + lo, NB4's hi-lane sum after its shuffle (same operands, same bits) */
#pragma unroll
        for (int i = 0; i < 4; i++) f[i] = __fadd_rn(f[i], fl[i]);
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

/* The launch shape of the decode GEMV: KS warps split a strip's tiles, SPC strips per
 * CTA (KS x SPC <= the build's warps). Chosen per matrix shape and kernel build from the
 * kernel's real occupancy (registers and shared memory as compiled), so that the grid
 * is one wave where it can be: a grid one CTA larger than the resident slots runs a
 * second wave as long as the first (the 106-register kernel at 4 warps per CTA fits
 * 4 CTAs per SM: 528 slots, and the FFN gate/up grid had 544 CTAs). Estimated cost,
 * in tile times: waves x (tiles per warp x max(1, W0 / resident warps per SM) + S x
 * resident CTAs per SM), W0 = 16 warps per SM to cover the HBM latency, S = 4 the
 * activation staging of one CTA in tile units (other W0 and S, and the earlier fixed
 * rule as the only rule, measured no better: docs/performance.md). A grid of many
 * waves takes the fixed rule (tct_shape_fixed). */
#define TCT_W0 16
#define TCT_S 4.0
struct tct_shape {
    int ks, spc;
};
static tct_shape tct_shape_fixed(int sms, int64_t strips, int64_t kt) {
    int64_t want = (int64_t)sms * TCT_W0;
    int ks = (int)((want + strips - 1) / strips);
    if (ks > 10) ks = 10; /* every build takes CTAs of 10 warps (SA 2's bound) */
    if (ks > kt) ks = (int)kt;
    if (ks < 1) ks = 1;
    return tct_shape{ks, ks >= 4 ? 1 : 4 / ks};
}

/* ksf > 0: KS forced to ksf (the exact rows of a verify: batch 1's KS), SPC chosen by the
 * same cost for it */
template <int NB8, int U, int SA, int MM>
static tct_shape tct_pick(int64_t strips, int64_t kt, size_t smem, int ksf = 0) {
    const int sms = tc_sm_count();
    tc_ctx *cx = tc_cur; /* the launch shapes and occupancies are cached per context (device) */
    const void *fn = (const void *)k_gemv_tiled<NB8, U, SA, MM>;
    const int64_t key = kt + ((int64_t)ksf << 40); /* a forced KS is its own entry */
    for (int i = 0; i < cx->n_shape; i++)
        if (cx->shape[i].fn == fn && cx->shape[i].a == strips && cx->shape[i].b == key && cx->shape[i].smem == smem)
            return tct_shape{cx->shape[i].x, cx->shape[i].y};
    tct_shape best = tct_shape_fixed(sms, strips, kt);
    if (ksf > 0) best = tct_shape{ksf, ksf >= 4 ? 1 : 4 / ksf};
    double bc = 1e300;
    auto occ_of = [&](int threads) {
        int occ = -1;
        for (int i = 0; i < cx->n_occ; i++)
            if (cx->occ[i].fn == fn && cx->occ[i].threads == threads && cx->occ[i].smem == smem) occ = cx->occ[i].occ;
        if (occ < 0) {
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_gemv_tiled<NB8, U, SA, MM>, threads,
                                                              SA ? smem : 0) != cudaSuccess)
                occ = 0;
            if (cx->n_occ < 4 * TC_MEMO) {
                cx->occ[cx->n_occ].fn = fn;
                cx->occ[cx->n_occ].threads = threads;
                cx->occ[cx->n_occ].smem = smem;
                cx->occ[cx->n_occ].occ = occ;
                cx->n_occ++;
            }
        }
        return occ;
    };
    /* a grid of many waves (the 248,320-row head): the CTA scheduler keeps the SMs
     * full as CTAs end, and the fixed rule measured best (84% vs 75% of the ceiling) */
    const int oo = occ_of(32 * best.ks * best.spc);
    const bool many = oo > 0 && (strips + best.spc - 1) / best.spc >= 3 * (int64_t)oo * sms;
    if (many) bc = -1;
    const int maxw = TCT_LB_THREADS(NB8, SA) / 32;
    for (int ks = 1; ks <= maxw && ks <= kt; ks++) {
        if (ksf > 0 && ks != ksf) continue;
        for (int spc = 1; ks * spc <= maxw && spc <= strips; spc++) {
            if (many) break;
            const int occ = occ_of(32 * ks * spc);
            if (occ <= 0) continue;
            const int64_t blocks = (strips + spc - 1) / spc, slots = (int64_t)occ * sms;
            const int64_t waves = (blocks + slots - 1) / slots;
            const double res_ctas = (double)(blocks < slots ? blocks : slots) / sms;
            const double res_warps = res_ctas * ks * spc;
            const double tiles = (double)((kt + ks - 1) / ks);
            const double c =
                (double)waves * (tiles * (res_warps < TCT_W0 ? TCT_W0 / res_warps : 1.0) + TCT_S * res_ctas);
            if (c < bc * (1 - 1e-9)) {
                bc = c;
                best = tct_shape{ks, spc};
            }
        }
    }
    const int slot = cx->n_shape < TC_MEMO ? cx->n_shape++ : (int)(strips % TC_MEMO);
    cx->shape[slot].fn = fn;
    cx->shape[slot].a = strips;
    cx->shape[slot].b = key;
    cx->shape[slot].smem = smem;
    cx->shape[slot].x = best.ks;
    cx->shape[slot].y = best.spc;
    return best;
}

/* M's y pointers already offset to the batch chunk; strips = M.strip_end[M.nm - 1]. */
/* A staged build's shared-memory limit, set once per context; false (noted) on failure. */
template <int NB8, int U, int SA, int MM>
static bool tct_stage_attr() {
    if (SA && tc_attr_once((const void *)k_gemv_tiled<NB8, U, SA, MM>, TC_MM_STAGE_MAX)) {
        cudaError_t e = cudaFuncSetAttribute(k_gemv_tiled<NB8, U, SA, MM>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, TC_MM_STAGE_MAX);
        if (e != cudaSuccess) {
            tc_note((int)e);
            return false;
        }
    }
    return true;
}

template <int NB8, int U, int SA, int MM>
static void launch_tiled_k(const tsk_mats &M, int64_t strips, int K, const int8_t *q, const float *sx,
                           const int *corr, int batch, size_t smem) {
    if (!tct_stage_attr<NB8, U, SA, MM>()) return;
    const int64_t kt = tct_ktiles(K);
    const tct_shape sh = tct_pick<NB8, U, SA, MM>(strips, kt, SA ? smem : 0);
    const unsigned grid = (unsigned)((strips + sh.spc - 1) / sh.spc);
    /* PF 0: no bulk L2 prefetch (it measured slower: 160.7 vs 169.3 tok/s) */
    tc_launch(k_gemv_tiled<NB8, U, SA, MM>, dim3(grid), dim3(32 * sh.ks * sh.spc), SA ? smem : 0, 1, M,
              K, sh.ks, q, sx, corr, batch, 0);
}

static bool tct_aligned(const int8_t *q, const float *sx, const int *corr) {
    return !((uintptr_t)q & 15) && !((uintptr_t)corr & 15) && !((uintptr_t)sx & 3);
}

/* One chunk of nb <= 8 batch rows, the build as tc_mm_tiled_build says (stage 0 also
 * when the activation is not aligned for the staging copies). */
template <int MM>
static void launch_tiled(const tsk_mats &M, int64_t strips, int K, const int8_t *q, const float *sx,
                         const int *corr, int nb) {
    tc_mm_choice c = {};
    tc_mm_tiled_build(K, (size_t)nb, &c);
    const size_t smem = tc_mm_stage_bytes(nb, K);
    const int stage = tct_aligned(q, sx, corr) ? c.stage : 0;
    if (c.nb == 8) {
        if (stage) launch_tiled_k<1, 4, 4, MM>(M, strips, K, q, sx, corr, nb, smem);
        else if constexpr (!MM) launch_tiled_k<1, 4, 0, 0>(M, strips, K, q, sx, corr, nb, 0);
    } else {
        if (stage) launch_tiled_k<0, 4, 2, MM>(M, strips, K, q, sx, corr, nb, smem);
        else if constexpr (!MM) launch_tiled_k<0, 4, 0, 0>(M, strips, K, q, sx, corr, nb, 0);
    }
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

/* Batch 1..4: NB4; 5..8: NB8; more: chunks of 8 (weights read once per chunk). */
extern "C" void tc_gemv_tiled(tc_ctx *cx, const tc_mat *m, const tc_act *act, float *y, size_t ys) {
    TC_CTX(cx);
    if (!tct_takes(m, act)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int64_t K = m->k;
    tsk_mats M;
    const int64_t strips = tsk_fill(&M, 1, &m, &ys);
    for (size_t b0 = 0; b0 < act->batch; b0 += 8) {
        int nb = (int)(act->batch - b0 < 8 ? act->batch - b0 : 8);
        M.y[0] = y + b0 * ys;
        launch_tiled<0>(M, strips, (int)K, act->q + b0 * (size_t)K * 2, act->sx + b0 * (size_t)(K / 128),
                        act->corr + b0 * (size_t)(K / 32), nb);
    }
}

extern "C" void tc_gemv_tiled_multi(tc_ctx *cx, int nm, const tc_mat *const *w, const tc_act *act, float *const *y,
                                    const size_t *ys) {
    TC_CTX(cx);
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
    /* the one-grid build exists for the staged loops; activations too large to stage
     * (or not aligned for the staging copies) go matrix by matrix */
    const int64_t K = act->k;
    bool one = nm > 1 && strips <= INT32_MAX / 2;
    for (size_t b0 = 0; one && b0 < act->batch; b0 += 8) {
        const int nb = (int)(act->batch - b0 < 8 ? act->batch - b0 : 8);
        tc_mm_choice c = {};
        tc_mm_tiled_build(K, (size_t)nb, &c);
        one = c.stage && tct_aligned(act->q + b0 * (size_t)K * 2, act->sx + b0 * (size_t)(K / 128),
                                     act->corr + b0 * (size_t)(K / 32));
    }
    if (!one) {
        for (int i = 0; i < nm; i++) tc_gemv_tiled(tc_cur, w[i], act, y[i], ys[i]);
        return;
    }
    tsk_mats M;
    tsk_fill(&M, nm, w, ys);
    for (size_t b0 = 0; b0 < act->batch; b0 += 8) {
        const int nb = (int)(act->batch - b0 < 8 ? act->batch - b0 : 8);
        for (int i = 0; i < nm; i++) M.y[i] = y[i] + b0 * ys[i];
        launch_tiled<1>(M, strips, (int)K, act->q + b0 * (size_t)K * 2, act->sx + b0 * (size_t)(K / 128),
                        act->corr + b0 * (size_t)(K / 32), nb);
    }
}

/* The KS (warps splitting a strip's tiles) of each matrix's launch at batch 1, exactly as
 * tc_gemv_tiled_multi (nm > 1) or tc_gemv_tiled (nm 1) would launch it with a one-row
 * activation of the same buffer: a row's float sum is fixed by KS alone (the warps' tile
 * ranges and their order in the reduction), so tc_gemv_tiled_rows (tc_gemv_rows.cu)
 * launched with these KS gives every row the bits of a batch of one. Returns 1 when batch
 * 1 runs the nm matrices as one grid (one KS for all), else 0. */
extern "C" int tc_gemv_tiled_ks1(tc_ctx *cx, int nm, const tc_mat *const *w, const tc_act *act, int *ks) {
    TC_CTX(cx);
    const int64_t K = act->k, kt = tct_ktiles(K);
    tc_mm_choice c = {};
    tc_mm_tiled_build(K, 1, &c);
    const size_t smem = tc_mm_stage_bytes(1, K);
    const bool al = tct_aligned(act->q, act->sx, act->corr);
    int64_t strips = 0;
    for (int i = 0; i < nm; i++) strips += tct_strips(w[i]->n);
    if (nm > 1 && strips <= INT32_MAX / 2 && c.stage && al) {
        const int k1 = tct_pick<0, 4, 2, 1>(strips, kt, smem).ks;
        for (int i = 0; i < nm; i++) ks[i] = k1;
        return 1;
    }
    for (int i = 0; i < nm; i++)
        ks[i] = c.stage && al ? tct_pick<0, 4, 2, 0>(tct_strips(w[i]->n), kt, smem).ks
                              : tct_pick<0, 4, 0, 0>(tct_strips(w[i]->n), kt, 0).ks;
    return 0;
}

/* One launch of build <NB8, 4, SA, MM> with KS forced to ks (SPC by the shape rule's
 * cost for that KS: strips per CTA do not touch a row's sum). */
template <int NB8, int SA, int MM>
static void launch_ks(const tsk_mats &M, int64_t strips, int K, const tc_act *act, int ks, size_t smem) {
    if (ks > TCT_LB_THREADS(NB8, SA) / 32) return; /* the caller checked the caps */
    if (!tct_stage_attr<NB8, 4, SA, MM>()) return;
    const tct_shape sh = tct_pick<NB8, 4, SA, MM>(strips, tct_ktiles(K), SA ? smem : 0, ks);
    tc_launch(k_gemv_tiled<NB8, 4, SA, MM>, dim3((unsigned)((strips + sh.spc - 1) / sh.spc)),
              dim3(32 * ks * sh.spc), SA ? smem : 0, 1, M, K, ks, act->q, act->sx, act->corr, (int)act->batch, 0);
}

/* The exact rows of a verify, batch 1..8 (one chunk): the nm matrices of one input with
 * KS forced to ks[i] (tc_gemv_tiled_ks1: batch 1's, so every row gets batch 1's bits).
 * Batch 1..4 take the decode's NB4 build (row b in columns b and 4 + b: its own
 * accumulators, the same float operations in the same order), 5..8 the NB8 2 build (the
 * same per-row arithmetic, tct_epi); staged when the rows' activation fits the staging
 * image, else the unstaged loop (the same bits); one grid for all nm (MM 1) when one is
 * set (batch 1 ran them as one grid, all ks equal) and the chunk stages, else one launch
 * per matrix. Returns 0 (nothing launched) when a forced KS exceeds the build's warps. */
extern "C" int tc_gemv_tiled_exact_ks(tc_ctx *cx, int nm, const tc_mat *const *w, const tc_act *act,
                                      float *const *y, const size_t *ys, const int *ks, int one) {
    TC_CTX(cx);
    const int nb = (int)act->batch;
    const int64_t K = act->k, kt = tct_ktiles(K);
    if (nb < 1 || nb > 8 || nm < 1 || nm > TSK_MAXM) return 0;
    for (int i = 0; i < nm; i++)
        if (ks[i] < 1 || ks[i] > kt || !tct_takes(w[i], act)) return 0;
    const bool n8 = nb > 4;
    const size_t smem = tc_mm_stage_bytes(nb, K);
    bool staged = smem <= TC_MM_STAGE_MAX && tct_aligned(act->q, act->sx, act->corr);
    for (int i = 0; i < nm; i++) {
        if (ks[i] > (n8 ? TCT_LB_THREADS(2, 4) : TCT_LB_THREADS(0, 2)) / 32) staged = false;
        if (ks[i] > (n8 ? TCT_LB_THREADS(2, 0) : TCT_LB_THREADS(0, 0)) / 32) return 0;
    }
    tsk_mats M;
    if (one && nm > 1 && staged) {
        const int64_t strips = tsk_fill(&M, nm, w, ys);
        for (int i = 0; i < nm; i++) M.y[i] = y[i];
        if (strips <= INT32_MAX / 2) {
            if (n8) launch_ks<2, 4, 1>(M, strips, (int)K, act, ks[0], smem);
            else launch_ks<0, 2, 1>(M, strips, (int)K, act, ks[0], smem);
            return 1;
        }
    }
    for (int i = 0; i < nm; i++) {
        const int64_t strips = tsk_fill(&M, 1, &w[i], &ys[i]);
        M.y[0] = y[i];
        if (n8) {
            if (staged) launch_ks<2, 4, 0>(M, strips, (int)K, act, ks[i], smem);
            else launch_ks<2, 0, 0>(M, strips, (int)K, act, ks[i], 0);
        } else {
            if (staged) launch_ks<0, 2, 0>(M, strips, (int)K, act, ks[i], smem);
            else launch_ks<0, 0, 0>(M, strips, (int)K, act, ks[i], 0);
        }
    }
    return 1;
}
