/*
 * tc_gemm_tc.cu - tensor-core ternary GEMM for prefill (batch of tokens > 8).
 *
 * Y[t][r] = sum_k W[r][k] X[t][k] for a TC_TERN128 matrix (file layout, 34-byte
 * blocks: fp16 d, 32 code bytes, value (code-1)*d) and the integer path's
 * activation (tc_act: x_q = 128*hi + lo, |x_q| <= 16256, one scale sx per 128).
 *
 * mma.sync.m16n8k32 s8 x s8 -> s32 (A = weights, 16 rows; B = activations,
 * 8 tokens). Two modes (template PL):
 *   PL = 2 "exact": both activation planes: per 128-group the integer sum
 *     S = 128*sum(w*hi) + sum(w*lo) = sum(w*x_q) is formed exactly (the hi pass,
 *     times 128, is the C of the lo pass), i.e. the same integers as the GEMV,
 *     so the result equals the GEMV's up to the fp32 order of the per-group sum.
 *   PL = 1 "int8": the hi plane only: x ~ 128*hi*sx, an 8-bit activation (step
 *     max|x|/127 per 128 inputs, |error| <= max|x|/254): half the MMAs and half
 *     the activation traffic; ~0.5% (Gaussian data) relative error of a product.
 * Per group the s32 result is rescaled into the fp32 accumulators without an
 * int->float conversion: the sum is formed on top of C = 0x4B400000 (the bits of
 * 1.5*2^23), so for |S| < 2^22 the s32 bits read as the float 1.5*2^23 + S, and
 * fma(bits, d, -1.5*2^23*d) = round(S*d) exactly (1.5*2^23*d is exact: d is an
 * fp16); then acc = fma(that, s_token, acc). |S| <= 128*2*16256 < 2^22.
 *
 * CTA: 128 weight rows x TOK tokens (TOK = 16*NT: 16, 32, 64 or 128); its 8 warps at
 * TOK <= 64 all along the rows (16 rows x TOK tokens each: every weight is decoded once
 * per CTA; as 4 x 2 below, the two token warps decoded each weight twice, and the
 * decode's integer work bound batched decode: ncu at M 16 showed the ALU pipe the
 * busiest, issue slots 44% busy, 3.7 warps per scheduler, H200 2026-12-03), at TOK 128
 * as 4 (32 rows each) x 2 (64 tokens each); K in stages of 256 (two groups), a
 * 3-stage cp.async pipeline (4 stages and 2 CTAs per SM at TOK 16, batched decode:
 * more bytes in flight per SM). Shared memory per stage:
 *   weights: 128 rows x 72 bytes, the raw file bytes of the stage (68) copied
 *            with 4-byte cp.async from the word boundary below (the file's blocks
 *            are 2-byte aligned: `mis` = 0 or 2 bytes before the stage start);
 *            the row stride of 18 words puts 8 rows in 8 distinct banks;
 *   activations: TOK rows x 256*PL bytes (hi, or hi+lo as in global memory),
 *            16-byte chunks XOR-swizzled by (token & 7) for conflict-free ldmatrix;
 *   sx: TOK x 2 floats.
 * Weight fragments are decoded in registers straight from the code bytes: the
 * activation layout permutes each 32-input unit so that field s of code word i
 * meets the 4 activation bytes at positions 16i+4s..+3; lane (g, t) of the MMA
 * needs exactly positions 4t.. and 16+4t.. of rows g and g+8, i.e. field t of
 * words 0 and 1 of the unit: shift, mask, and (c + 0x7F) ^ 0x80 per byte = c-1.
 * The grid runs token tiles fastest, so the CTAs that share a weight tile run
 * together and the weights come from HBM once per call (L2 after the first).
 *
 * Split-K (grid z, mm_choose.h tc_mm_gemm_splits): CTA z of nsp walks stages
 * [z*nst/nsp, (z+1)*nst/nsp) only, so that a grid of few output tiles (batched
 * decode: 40 tiles of 16 tokens on a 5,120-row matrix) still puts a CTA on every SM.
 * Each CTA then stores its accumulators as they lie in its registers (float i of
 * thread tid at i*256 + tid of its tile's slot [z][tile] of the context's workspace),
 * fences, and counts itself in the tile's counter; the CTA that finds the count
 * complete adds the nsp partials in the order z = 0, 1, ... (its own from registers:
 * the same bits it stored), resets the counter to 0 and writes y as the unsplit
 * kernel does. The sum's order does not depend on which CTA comes last, so the
 * output is the same bits run to run and in a graph or not; it differs from the
 * unsplit one by the fp32 order of the group sums only (the integers are the same).
 *
 * TL = 1: the same kernel on the tiled layout (TC_TERN128T, gemv_tiled.h), the
 * default at load: a stage of 256 inputs is tile `st` of the CTA's 8 strips
 * (8 x 1088 bytes, copied with 16-byte cp.async). The 16 code bytes of (row g of
 * a half-strip, unit u) land at 16-byte slot 4g + (u ^ ((g >> 1) & 3)) of the
 * half (a swizzle: the 8 rows g that a warp's lanes read for one unit hit 8
 * distinct bank pairs); the 64 scale bytes as they are. The decoded fragments,
 * the MMAs and the epilogue are the file layout's, operation for operation, so
 * the two layouts give the same floats.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/ptx.cuh"

#include <stdlib.h>
#include <string.h>

namespace {

constexpr int kRows = 128;       /* weight rows per CTA */
constexpr int kStageK = 256;     /* inputs per stage */
constexpr int kStages = 3;
constexpr int kWStride = 72;     /* smem bytes per weight row per stage */
constexpr int kTile = 1088;      /* TL: bytes of one tiled 16x256 tile (TCT_TILE) */
constexpr int kTChunks = 8 * (kTile / 16); /* TL: 16-byte chunks per stage (544) */
constexpr uint32_t kMagic = 0x4B400000u; /* 1.5 * 2^23 */
constexpr float kMagicF = 12582912.0f;

template <int PL, int NT> struct cfg {
    static constexpr int TOK = 16 * NT;
    static constexpr int NS = NT == 1 ? 4 : kStages;          /* pipeline stages */
    static constexpr int MINB = NT == 1 ? 2 : 1;              /* CTAs per SM (launch bounds) */
    static constexpr int FR = 8 * NT;                         /* accumulators per thread */
    /* the 8 warps: TOK <= 64, all along the rows (16 each: every weight decoded once per
     * CTA); TOK = 128, 4 along the rows (32 each) x 2 along the tokens (the registers of
     * 16 n8 tiles per warp would not fit) */
    static constexpr int WTN = NT <= 4 ? 1 : 2;               /* warps along the tokens */
    static constexpr int WR = 8 / WTN;                        /* warps along the rows */
    static constexpr int MI = WTN;                            /* 16-row fragments per warp */
    static constexpr int NJ = 2 * NT / WTN;                   /* n8 token tiles per warp */
    static constexpr int AROW = 256 * PL;                   /* activation bytes per token per stage */
    static constexpr int WBYTES = kRows * kWStride;
    static constexpr int ABYTES = TOK * AROW;
    static constexpr int SBYTES = TOK * 2 * 4;
    static constexpr int STAGE = WBYTES + ABYTES + SBYTES;
    static constexpr int SMEM = NS * STAGE;
};
static_assert(kRows == TC_GEMM_ROWS && kStageK == TC_GEMM_STAGE_K, "mm_choose.h's GEMM tile");

/* 4 codes (one 2-bit field per byte, already shifted down) -> 4 signed bytes c-1 */
__device__ __forceinline__ uint32_t dec4(uint32_t x) {
    return ((x & 0x03030303u) + 0x7F7F7F7Fu) ^ 0x80808080u;
}

/* W: the matrix data rounded down to 4 bytes (mis = data - W, 0 or 2); rb % 4 == 0;
 * K % 256 == 0; q 16-byte aligned, sx 8-byte aligned. nsp = gridDim.z K splits
 * (1 <= nsp <= K/256); nsp > 1: part holds gridDim.x*gridDim.y*nsp tiles of TOK*128
 * floats and cnt gridDim.x*gridDim.y zeroed counters (left zero). */
template <int PL, int NT, int TL>
__global__ void __launch_bounds__(256, cfg<PL, NT>::MINB)
    k_gemm_t128_tc(const uint8_t *__restrict__ W, int mis, size_t rb, int n, int K,
                   const int8_t *__restrict__ q, const float *__restrict__ sx, int M,
                   float *__restrict__ y, size_t ys, int nsp, float *__restrict__ part,
                   int *__restrict__ cnt) {
    typedef cfg<PL, NT> C;
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int s_last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wr = warp % C::WR, wt = warp / C::WR;
    const int row0 = blockIdx.y * kRows, tok0 = blockIdx.x * C::TOK;
    const int nb = K >> 7;
    /* this CTA's stages [st0, st0 + nst) of the K/256 */
    const int z = (int)blockIdx.z;
    const int st0 = (int)((int64_t)z * (K / kStageK) / nsp);
    const int nst = (int)((int64_t)(z + 1) * (K / kStageK) / nsp) - st0;
    const size_t qrow = (size_t)K * 2;

    /* Each thread copies a fixed piece of every stage (one source pointer each):
     * weights: row tid/2, words 9*(tid&1)..+8; activations: token tid/TPT, chunks
     * CPT*(tid%TPT)..+CPT-1; scales: token tid (tid < TOK). */
    constexpr int CH = 16 * PL, TPT = 256 / C::TOK, CPT = CH / TPT;
    const uint8_t *wsrc, *asrc;
    uint32_t wdst, adst;
    int aL0, ax7;
    {
        int gr = row0 + (tid >> 1);
        gr = gr < n ? gr : n - 1;
        wsrc = W + (size_t)gr * rb + 36 * (tid & 1);
        wdst = (uint32_t)((tid >> 1) * kWStride + 36 * (tid & 1));
        const int tk = tid / TPT;
        int gt = tok0 + tk;
        gt = gt < M ? gt : M - 1;
        aL0 = CPT * (tid % TPT);
        ax7 = tk & 7;
        asrc = (const uint8_t *)q + (size_t)gt * qrow;
        adst = (uint32_t)(C::WBYTES + tk * C::AROW);
    }
    const float *ssrc = NULL;
    if (tid < C::TOK) {
        int gt = tok0 + tid;
        gt = gt < M ? gt : M - 1;
        ssrc = sx + (size_t)gt * nb;
    }
    const uint32_t sbase = smem_u32(smem);
    /* TL: chunks tid, tid + 256, tid + 512 (< 544) of the stage's 8 tiles; the
     * source of chunk c of stage st is tile st of strip (row0/16 + c/68, clamped
     * to the last strip: its rows are dropped), the tiles of a strip kTile apart. */
    const uint8_t *tsrc[3];
    uint32_t tdst[3];
    if (TL) {
        const int64_t nstrips = ((int64_t)n + 15) >> 4, kt = K >> 8;
#pragma unroll
        for (int j = 0; j < 3; j++) {
            const int c = tid + 256 * j, c2 = c < kTChunks ? c : 0;
            const int tl = c2 / 68, w = c2 - tl * 68;
            int64_t sp = (int64_t)(row0 >> 4) + tl;
            sp = sp < nstrips ? sp : nstrips - 1;
            tsrc[j] = W + (size_t)sp * (size_t)kt * kTile + 16 * w;
            uint32_t o;
            if (w < 64) {
                const int half = w >> 5, gg = (w >> 2) & 7, u = w & 3;
                o = (uint32_t)(half * 512 + (4 * gg + (u ^ ((gg >> 1) & 3))) * 16);
            } else o = (uint32_t)(1024 + 16 * (w - 64));
            tdst[j] = c < kTChunks ? (uint32_t)(tl * kTile) + o : 0xffffffffu;
        }
    }

    auto load = [&](int buf, int st) {
        const uint32_t sb = sbase + buf * C::STAGE;
        if (TL) {
#pragma unroll
            for (int j = 0; j < 3; j++)
                if (tdst[j] != 0xffffffffu) cp_async16(sb + tdst[j], tsrc[j] + (size_t)st * kTile);
        } else {
            const uint8_t *ws = wsrc + (size_t)st * 68;
#pragma unroll
            for (int j = 0; j < 9; j++) cp_async4(sb + wdst + 4 * j, ws + 4 * j);
        }
        const uint8_t *as = asrc + (size_t)st * 512;
#pragma unroll
        for (int j = 0; j < CPT; j++) {
            const int L = aL0 + j;
            /* PL 1: chunk L = 2*unit + half from unit*64 + half*16 (hi only);
             * PL 2: the stage's 512 bytes as they are */
            const int src = PL == 1 ? (L >> 1) * 64 + (L & 1) * 16 : L * 16;
            cp_async16(sb + adst + ((L ^ ax7) << 4), as + src);
        }
        if (tid < C::TOK) cp_async8(sb + C::WBYTES + C::ABYTES + tid * 8, ssrc + (size_t)st * 2);
    };

    float acc[C::MI][C::NJ][4];
#pragma unroll
    for (int i = 0; i < C::MI; i++)
#pragma unroll
        for (int j = 0; j < C::NJ; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < C::NS - 1; s++) {
        if (s < nst) load(s, st0 + s);
        cp_commit();
    }

    /* per-lane ldmatrix offsets: matrix m = lane >> 3 covers tokens (m >> 1)*8 + (lane & 7)
     * of a 16-token pair of n8 tiles, half (m & 1) of the unit's 32 bytes */
    const int ltok = ((lane >> 4) << 3) + (lane & 7), lhalf = (lane >> 3) & 1;
    const int shift = 2 * t;

#pragma unroll 1
    for (int ks = 0; ks < nst; ks++) {
        cp_wait<C::NS - 2>();
        __syncthreads();
        {
            const int nx = ks + C::NS - 1;
            if (nx < nst) load(nx % C::NS, st0 + nx);
            cp_commit();
        }
        const uint8_t *sb = smem + (ks % C::NS) * C::STAGE;
        const uint32_t *sw = (const uint32_t *)sb;
        const uint32_t sa = smem_u32(sb + C::WBYTES);
        const float *ss = (const float *)(sb + C::WBYTES + C::ABYTES);
#pragma unroll 1
        for (int gk = 0; gk < 2; gk++) {
            int ia[C::MI][C::NJ][4];
            uint32_t a[4][C::MI][4]; /* [unit][mi][reg] */
#pragma unroll
            for (int p = 0; p < PL; p++) {
#pragma unroll
                for (int qq = 0; qq < 4; qq++) {
                    if (p == 0 && TL) {
                        /* slot of (row g, unit qq) in the swizzled half-strip; words
                         * 2*gk, 2*gk+1 of its 16 bytes are the unit's two code words */
                        const int slot = 4 * g + (qq ^ ((g >> 1) & 3));
#pragma unroll
                        for (int mi = 0; mi < C::MI; mi++) {
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                const uint2 c = *(const uint2 *)(sb + (wr * C::MI + mi) * kTile + h * 512 +
                                                                 slot * 16 + 8 * gk);
                                a[qq][mi][h] = dec4(c.x >> shift);
                                a[qq][mi][2 + h] = dec4(c.y >> shift);
                            }
                        }
                    } else if (p == 0) {
                        const int o = mis + 34 * gk + 2 + 8 * qq, wo = o >> 2, sh = (o & 2) * 8;
#pragma unroll
                        for (int mi = 0; mi < C::MI; mi++) {
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                const uint32_t *pw = sw + (wr * 16 * C::MI + mi * 16 + h * 8 + g) * (kWStride / 4) + wo;
                                const uint32_t x0 = pw[0], x1 = pw[1], x2 = pw[2];
                                const uint32_t c0 = __funnelshift_r(x0, x1, sh);
                                const uint32_t c1 = __funnelshift_r(x1, x2, sh);
                                a[qq][mi][h] = dec4(c0 >> shift);
                                a[qq][mi][2 + h] = dec4(c1 >> shift);
                            }
                        }
                    }
                    const int unit = gk * 4 + qq;
                    if (C::NJ == 1) {
                        /* 8 tokens per warp: matrices 0 and 1 of the x4 case (lanes 0-15) */
                        const int tk = wt * 8 + (lane & 7);
                        const int L = PL == 1 ? 2 * unit + lhalf : 4 * unit + 2 * p + lhalf;
                        uint32_t b0, b1;
                        ldsm_x2(sa + tk * C::AROW + ((L ^ (tk & 7)) << 4), b0, b1);
#pragma unroll
                        for (int mi = 0; mi < C::MI; mi++) {
                            int(&d)[4] = ia[mi][0];
                            if (qq == 0 && p == 0) {
                                const int c = PL == 1 ? (int)kMagic : 0;
                                mma_s8(d, a[qq][mi], b0, b1, c, c, c, c);
                            } else {
                                mma_s8(d, a[qq][mi], b0, b1, d[0], d[1], d[2], d[3]);
                            }
                        }
                    }
#pragma unroll
                    for (int jp = 0; jp < C::NJ / 2; jp++) {
                        const int tk = wt * 8 * C::NJ + jp * 16 + ltok;
                        const int L = PL == 1 ? 2 * unit + lhalf : 4 * unit + 2 * p + lhalf;
                        uint32_t b0, b1, b2, b3;
                        ldsm_x4(sa + tk * C::AROW + ((L ^ (tk & 7)) << 4), b0, b1, b2, b3);
#pragma unroll
                        for (int mi = 0; mi < C::MI; mi++) {
#pragma unroll
                            for (int h = 0; h < 2; h++) {
                                int(&d)[4] = ia[mi][2 * jp + h];
                                const uint32_t bb0 = h ? b2 : b0, bb1 = h ? b3 : b1;
                                if (qq == 0 && p == 0) {
                                    const int c = PL == 1 ? (int)kMagic : 0;
                                    mma_s8(d, a[qq][mi], bb0, bb1, c, c, c, c);
                                } else {
                                    mma_s8(d, a[qq][mi], bb0, bb1, d[0], d[1], d[2], d[3]);
                                }
                            }
                        }
                    }
                }
                if (PL == 2 && p == 0) {
#pragma unroll
                    for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
                        for (int j = 0; j < C::NJ; j++)
#pragma unroll
                            for (int e = 0; e < 4; e++)
                                ia[mi][j][e] = (int)((uint32_t)ia[mi][j][e] * 128u + kMagic);
                }
            }
            /* rescale the group into the fp32 accumulators */
            const float sm = PL == 1 ? 128.0f : 1.0f;
            float s0[C::NJ], s1[C::NJ];
#pragma unroll
            for (int j = 0; j < C::NJ; j++) {
                const int tk = wt * 8 * C::NJ + j * 8 + 2 * t;
                s0[j] = ss[tk * 2 + gk] * sm;
                s1[j] = ss[tk * 2 + 2 + gk] * sm;
            }
#pragma unroll
            for (int mi = 0; mi < C::MI; mi++) {
                const int ra = wr * 16 * C::MI + mi * 16 + g;
                /* TL: scales of (row g, group gk) and (row 8+g, gk) at 1024 + 8g of the tile */
                const float da = TL ? tc_ld_f16(sb + (wr * C::MI + mi) * kTile + 1024 + 8 * g + 2 * gk)
                                    : tc_ld_f16(sb + ra * kWStride + mis + 34 * gk);
                const float db = TL ? tc_ld_f16(sb + (wr * C::MI + mi) * kTile + 1024 + 8 * g + 4 + 2 * gk)
                                    : tc_ld_f16(sb + (ra + 8) * kWStride + mis + 34 * gk);
                const float ma = -kMagicF * da, mb = -kMagicF * db;
#pragma unroll
                for (int j = 0; j < C::NJ; j++) {
                    const int(&d)[4] = ia[mi][j];
                    acc[mi][j][0] = fmaf(fmaf(__int_as_float(d[0]), da, ma), s0[j], acc[mi][j][0]);
                    acc[mi][j][1] = fmaf(fmaf(__int_as_float(d[1]), da, ma), s1[j], acc[mi][j][1]);
                    acc[mi][j][2] = fmaf(fmaf(__int_as_float(d[2]), db, mb), s0[j], acc[mi][j][2]);
                    acc[mi][j][3] = fmaf(fmaf(__int_as_float(d[3]), db, mb), s1[j], acc[mi][j][3]);
                }
            }
        }
    }
    cp_wait<0>();

    if (nsp > 1) {
        /* split-K: store the partial, count it; the tile's last CTA sums them in order */
        const int tile = (int)(blockIdx.y * gridDim.x + blockIdx.x), ntiles = (int)(gridDim.x * gridDim.y);
        float *mine = part + ((size_t)z * (size_t)ntiles + (size_t)tile) * (size_t)(C::FR * 256) + tid;
#pragma unroll
        for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
            for (int j = 0; j < C::NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) __stcg(mine + (size_t)(((mi * C::NJ + j) * 4 + e) * 256), acc[mi][j][e]);
        __threadfence();
        __syncthreads();
        if (tid == 0) s_last = atomicAdd(&cnt[tile], 1) == nsp - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        float r[C::MI][C::NJ][4];
#pragma unroll 1
        for (int s = 0; s < nsp; s++) {
            const float *ps = part + ((size_t)s * (size_t)ntiles + (size_t)tile) * (size_t)(C::FR * 256) + tid;
#pragma unroll
            for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
                for (int j = 0; j < C::NJ; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float v = s == z ? acc[mi][j][e] : __ldcg(ps + (size_t)(((mi * C::NJ + j) * 4 + e) * 256));
                        r[mi][j][e] = s == 0 ? v : r[mi][j][e] + v;
                    }
        }
#pragma unroll
        for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
            for (int j = 0; j < C::NJ; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mi][j][e] = r[mi][j][e];
        if (tid == 0) cnt[tile] = 0; /* every CTA of the tile has counted: ready for the next launch */
    }

#pragma unroll
    for (int mi = 0; mi < C::MI; mi++) {
        const int ra = row0 + wr * 16 * C::MI + mi * 16 + g, rb2 = ra + 8;
#pragma unroll
        for (int j = 0; j < C::NJ; j++) {
            const int tk = tok0 + wt * 8 * C::NJ + j * 8 + 2 * t;
            if (tk < M) {
                if (ra < n) y[(size_t)tk * ys + ra] = acc[mi][j][0];
                if (rb2 < n) y[(size_t)tk * ys + rb2] = acc[mi][j][2];
            }
            if (tk + 1 < M) {
                if (ra < n) y[(size_t)(tk + 1) * ys + ra] = acc[mi][j][1];
                if (rb2 < n) y[(size_t)(tk + 1) * ys + rb2] = acc[mi][j][3];
            }
        }
    }
}

/* CTAs of the kernel resident per SM (256 threads, smem bytes), memoised per context. */
int gemm_occ(const void *fn, size_t smem) {
    tc_ctx *cx = tc_cur;
    for (int i = 0; i < cx->n_occ; i++)
        if (cx->occ[i].fn == fn && cx->occ[i].threads == 256 && cx->occ[i].smem == smem) return cx->occ[i].occ;
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, 256, smem) != cudaSuccess) {
        cudaGetLastError();
        return 1; /* not memoised: asked again next time */
    }
    if (occ < 1) occ = 1;
    if (cx->n_occ < 4 * TC_MEMO) {
        cx->occ[cx->n_occ].fn = fn;
        cx->occ[cx->n_occ].threads = 256;
        cx->occ[cx->n_occ].smem = smem;
        cx->occ[cx->n_occ].occ = occ;
        cx->n_occ++;
    }
    return occ;
}

/* The split-K workspace of the context: allocated (zeroed) here unless the stream is
 * being captured into a graph (no allocation there: the caller runs unsplit). */
bool gemm_ws(void) {
    tc_ctx *c = tc_cur;
    if (c->gemm_part && c->gemm_cnt) return true;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        return false;
    }
    if (!c->gemm_cnt) c->gemm_cnt = (int *)tc_malloc(c, TC_GEMM_MAX_TILES * sizeof(int)); /* zeroed */
    if (!c->gemm_part) c->gemm_part = (float *)tc_malloc(c, TC_GEMM_WS_FLOATS * sizeof(float));
    return c->gemm_part && c->gemm_cnt;
}

/* The splits of one launch of build <PL, NT, TL> (force: tc_mm_gemm_split_force). */
template <int PL, int NT, int TL>
int splits_of(const tc_mat *m, int M, int force) {
    typedef cfg<PL, NT> C;
    const void *fn = (const void *)k_gemm_t128_tc<PL, NT, TL>;
    if (tc_attr_once(fn, C::SMEM)) {
        cudaError_t e = cudaFuncSetAttribute(k_gemm_t128_tc<PL, NT, TL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             C::SMEM);
        if (e != cudaSuccess) {
            tc_note((int)e);
            return 0;
        }
    }
    return tc_mm_gemm_splits(m->n, m->k, (size_t)M, C::TOK, tc_sm_count(), gemm_occ(fn, C::SMEM), force);
}

template <int PL, int NT, int TL>
void launch(const uint8_t *W, int mis, const tc_mat *m, const tc_act *act, int M, float *y, size_t ys,
            int force) {
    typedef cfg<PL, NT> C;
    int nsp = splits_of<PL, NT, TL>(m, M, force);
    if (nsp < 1) return; /* the attribute failed (noted) */
    if (nsp > 1 && !gemm_ws()) nsp = 1;
    dim3 grid((unsigned)((M + C::TOK - 1) / C::TOK), (unsigned)((m->n + kRows - 1) / kRows), (unsigned)nsp);
    k_gemm_t128_tc<PL, NT, TL><<<grid, 256, C::SMEM, tc_cur->stream>>>(
        W, mis, m->row_bytes, (int)m->n, (int)m->k, act->q, act->sx, M, y, ys, nsp, tc_cur->gemm_part,
        tc_cur->gemm_cnt);
    tc_check_launch();
}

/* The build for M tokens (mm_choose.h tc_mm_gemm_tok): TOK 16, 32, 64 or (int8) 128. */
template <int PL, int TL>
void launch_pl(const uint8_t *W, int mis, const tc_mat *m, const tc_act *act, int M, float *y,
               size_t ys, int force) {
    const int tok = tc_mm_gemm_tok((size_t)M, PL == 1 ? TC_GEMM_INT8 : TC_GEMM_EXACT, force == 1);
    if (tok == 16) launch<PL, 1, TL>(W, mis, m, act, M, y, ys, force);
    else if (tok == 32) launch<PL, 2, TL>(W, mis, m, act, M, y, ys, force);
    else if (tok == 64 || PL == 2) launch<PL, 4, TL>(W, mis, m, act, M, y, ys, force);
    else launch<PL, PL == 2 ? 4 : 8, TL>(W, mis, m, act, M, y, ys, force);
}

template <int PL, int TL>
int plan_pl(const tc_mat *m, int M, int force, int *tok_out) {
    const int tok = tc_mm_gemm_tok((size_t)M, PL == 1 ? TC_GEMM_INT8 : TC_GEMM_EXACT, force == 1);
    *tok_out = tok;
    if (tok == 16) return splits_of<PL, 1, TL>(m, M, force);
    if (tok == 32) return splits_of<PL, 2, TL>(m, M, force);
    if (tok == 64 || PL == 2) return splits_of<PL, 4, TL>(m, M, force);
    return splits_of<PL, PL == 2 ? 4 : 8, TL>(m, M, force);
}

} // namespace

extern "C" int tc_gemm_tc_supported(const tc_mat *m, const tc_act *act) {
    if (m->kind == TC_TERN128T) /* tiled: 16-byte aligned strips of k/256 whole tiles */
        return act && act->k == m->k && m->k > 0 && m->k % kStageK == 0 && m->k <= (1 << 24) &&
               m->n > 0 && m->n <= ((int64_t)65535 * kRows) && act->batch > 0 &&
               act->batch <= (size_t)1 << 30 && ((uintptr_t)m->data & 15) == 0 &&
               m->row_bytes == (size_t)(m->k / kStageK) * kTile && ((uintptr_t)act->q & 15) == 0 &&
               ((uintptr_t)act->sx & 7) == 0;
    return m->kind == TC_TERN128 && act && act->k == m->k && m->k > 0 && m->k % kStageK == 0 &&
           m->k <= (1 << 24) && m->n > 0 && m->n <= ((int64_t)65535 * kRows) && act->batch > 0 &&
           act->batch <= (size_t)1 << 30 && ((uintptr_t)m->data & 1) == 0 &&
           m->row_bytes >= (size_t)(m->k / 128) * TERN_PQ2_0_BYTES && m->row_bytes % 4 == 0 &&
           ((uintptr_t)act->q & 15) == 0 && ((uintptr_t)act->sx & 7) == 0;
}

extern "C" int tc_gemm_reserve(tc_ctx *cx) {
    TC_CTX(cx);
    if (gemm_ws()) return 0;
    const int e = cx->err ? cx->err : (int)cudaErrorMemoryAllocation;
    cx->err = 0;
    return e;
}

extern "C" void tc_gemm_set_splits(tc_ctx *cx, int splits) {
    cx->mm.gemm_splits = splits > 0 ? (splits < TC_GEMM_MAX_SPLITS ? splits : TC_GEMM_MAX_SPLITS) : 0;
}

extern "C" int tc_gemm_plan(tc_ctx *cx, const tc_mat *m, const tc_act *act, int mode, int *tok, int *splits) {
    TC_CTX(cx);
    *tok = 0;
    *splits = 0;
    if (mode != TC_GEMM_EXACT && mode != TC_GEMM_INT8) return 0;
    if (!tc_gemm_tc_supported(m, act)) return 0;
    const tc_mm_caps caps = tc_mm_caps_now();
    const int force = tc_mm_gemm_split_force(&caps, m->n, m->k, act->batch), M = (int)act->batch;
    const int tl = m->kind == TC_TERN128T;
    int s;
    if (mode == TC_GEMM_EXACT) s = tl ? plan_pl<2, 1>(m, M, force, tok) : plan_pl<2, 0>(m, M, force, tok);
    else s = tl ? plan_pl<1, 1>(m, M, force, tok) : plan_pl<1, 0>(m, M, force, tok);
    *splits = s;
    return s > 0;
}

extern "C" int tc_gemm_tc(tc_ctx *cx, const tc_mat *m, const tc_act *act, float *y, size_t ys, int mode) {
    TC_CTX(cx);
    if (mode != TC_GEMM_EXACT && mode != TC_GEMM_INT8) return 0;
    if (!tc_gemm_tc_supported(m, act)) return 0;
    TC_PROF(TC_FAM_MATMUL);
    const tc_mm_caps caps = tc_mm_caps_now();
    const int force = tc_mm_gemm_split_force(&caps, m->n, m->k, act->batch), M = (int)act->batch;
    if (m->kind == TC_TERN128T) {
        if (mode == TC_GEMM_EXACT) launch_pl<2, 1>(m->data, 0, m, act, M, y, ys, force);
        else launch_pl<1, 1>(m->data, 0, m, act, M, y, ys, force);
        return 1;
    }
    const int mis = (int)((uintptr_t)m->data & 3);
    const uint8_t *W = m->data - mis;
    if (mode == TC_GEMM_EXACT) launch_pl<2, 0>(W, mis, m, act, M, y, ys, force);
    else launch_pl<1, 0>(W, mis, m, act, M, y, ys, force);
    return 1;
}
