/*
 * tc_gemm_wg.cu - the ternary GEMM on Hopper's warpgroup MMA (wgmma, sm_90a): the same
 * product, inputs and integers as tc_gemm_tc.cu's exact mode on a TC_TERN128T (tiled)
 * matrix, for batched decode and prefill (batch > 8) under the wgmma force (mm_choose.h
 * TC_MM_WGMMA; the model parameter cuda_matmul = "wgmma").
 *
 * Y[t][r] = sum_k W[r][k] X[t][k]; W tiled (gemv_tiled.h: 16-row strips of 256-input
 * tiles of 1088 bytes), X the integer path's activation (act.cuh: x_q = 128*hi + lo,
 * |x_q| <= 16256, one fp32 scale sx per 128 inputs, planes as 32 hi then 32 lo bytes per
 * 32-input unit). Per 128-group the integer S = 128*sum(w*hi) + sum(w*lo) = sum(w*x_q)
 * is formed exactly and rescaled into fp32 accumulators with tc_gemm_tc's magic-number
 * trick (its header says why it is exact): acc = fma(fma(bits(S + 1.5*2^23), d,
 * -1.5*2^23*d), sx, acc), per group in K order, so with the same K splits the floats are
 * tc_gemm_tc's bit for bit.
 *
 * CTA: 128 weight rows (two consumer warpgroups of 64 rows, the M of wgmma) x TOK tokens
 * (TOK = 16, 32 or 64; wgmma's N = 2*TOK: both planes), plus one producer warp; 288 threads. K in stages of 256
 * inputs (two groups), NS stages in shared memory, each filled by the producer warp and
 * consumed by both warpgroups, with a full and an empty mbarrier per stage:
 *   activations: 16 TMA boxes (cp.async.bulk.tensor.2d, a tensor map over q: rows of 2K
 *     bytes, M rows; box 32 bytes x TOK tokens, 32-byte swizzle; tokens past M read as
 *     zeros), one per (unit u, plane p) of the stage, at row p*TOK of unit u's block of
 *     2*TOK rows x 32 bytes: the B operand of one wgmma with both planes as columns;
 *   weights: the CTA's 8 strips' tiles of the stage, 8 x 1088 contiguous bytes
 *     (cp.async.bulk, one per strip; strips past the matrix repeat the last: dropped);
 *   per (token, group): sx and 1.5*2^23 - corr (corr = the group's sum of x_q, from the
 *     activation's per-32 sums), stored by the producer's lanes (loaded before they wait
 *     for the slot to be free, so the loads' latency hides behind the wait).
 * The full barrier expects 33 arrivals (lane 0's arrive.expect_tx for the bulk bytes and
 * each producer lane's arrive after its stores); the empty barrier 8 (lane 0 of each
 * consumer warp once its wgmmas of the stage have completed).
 * Consumer warp w (0..3) of warpgroup wg holds rows 16w..16w+15 of its 64 (strip 4wg+w of
 * the CTA); lane (g, t) reads, per unit u of the stage, the 16 bytes of (row g, unit u)
 * and (row 8+g, unit u) of the strip's tile (both groups' two code words: lds.128) and
 * decodes the A fragment of wgmma m64nNk32 in registers (A from registers: rows g and 8+g,
 * k slots 4t..4t+3 and 16+4t..16+4t+3 = field t of the unit's code words 0 and 1, as
 * tc_gemm_tc), shift and mask: the codes c = w + 1 (0..2) as unsigned bytes (wgmma
 * .u8.s8), so the MMA forms sum(c*x) = S + sum(x) and the epilogue takes the group's
 * sum(x_q) off (two integer ops per weight register saved). The B operand (2*TOK x 32
 * bytes: unit u's hi plane of the TOK tokens, then its lo plane, K-major) is read by wgmma
 * from the unit's block through a shared-memory descriptor (32-byte swizzle, 8-row
 * groups 256 bytes apart). (One wgmma of N = 2*TOK rather than two of TOK: at small N a
 * wgmma costs more than its arithmetic; H200 2026-12-04, M 16: 24-29 us per FFN matrix
 * with two.)
 * Per group: 4 wgmmas (a chain, the first with scale-d = 0) into I, whose columns
 * j < TOK are I_hi of token j and TOK + j I_lo; S = 128*I_hi + I_lo - corr (|128*I_hi + I_lo| <=
 * 2*128*16256 < 2^22, |S| <= 128*16256); with TOK <= 32 both groups of the
 * stage are issued together (two accumulator sets), at 64 one group at a time (two sets
 * of 64 registers do not fit beside a producer warp's share). (An overlapped variant, the
 * two groups in two commit groups with group 0's rescale and the next stage's fragments
 * under group 1's wgmmas, was measured no faster on the H200 and gave wrong results in
 * some modes; deleted 2026-12-04.)
 * Split-K exactly as tc_gemm_tc (mm_choose.h tc_mm_gemm_splits, the context's workspace and
 * counters, the partials summed in split order by the tile's last CTA: deterministic).
 * The kernel body exists in the sm_90a image only (the file is built for sm_90a alone,
 * CMakeLists.txt); tc_gemm_wg refuses where that image cannot load.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gemv_tiled.h"
#include "kernels/cuda/ptx.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <stdlib.h>
#include <string.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TC_WG_BODY 1
#else
#define TC_WG_BODY 0
#endif

namespace {

constexpr int kRows = 128;     /* weight rows per CTA (two warpgroups of 64) */
constexpr int kStageK = 256;   /* inputs per stage: one tile of each strip */
constexpr int kTile = TCT_TILE; /* 1088 */
constexpr int kThreads = 288;  /* 2 consumer warpgroups + 1 producer warp */
constexpr uint32_t kMagic = 0x4B400000u; /* 1.5 * 2^23 */
constexpr float kMagicF = 12582912.0f;
static_assert(kRows == TC_GEMM_ROWS && kStageK == TC_GEMM_STAGE_K, "mm_choose.h's GEMM tile");

template <int NT> struct wcfg {
    static constexpr int TOK = 16 * NT;                 /* wgmma N */
    static constexpr int NR = TOK / 2;                  /* accumulator registers per thread */
    static constexpr int NS = NT == 1 ? 5 : 4;          /* pipeline stages */
    static constexpr int MINB = NT == 1 ? 2 : 1;        /* CTAs per SM (launch bounds) */
    static constexpr int DB = NT <= 2;                  /* both groups of a stage in flight */
    static constexpr int UBYTES = TOK * 64;             /* a unit's block: 2*TOK rows of 32 bytes */
    static constexpr int ABYTES = 8 * UBYTES;           /* the stage's 8 units */
    static constexpr int WOFF = ABYTES;                 /* 8 strips' tiles */
    static constexpr int SOFF = WOFF + 8 * kTile;       /* [TOK][2 groups] x (sx, 1.5*2^23 - corr) */
    static constexpr int STAGE = (SOFF + TOK * 16 + 1023) / 1024 * 1024;
    static constexpr int SMEM = NS * STAGE + 1024;      /* + alignment slack (1024: the swizzle atom) */
    static constexpr uint32_t TX = ABYTES + 8 * kTile;  /* bulk bytes per stage */
};

/* 4 codes (one 2-bit field per byte, already shifted down) -> 4 unsigned bytes c (0..2);
 * the MMA forms sum(c*x) = sum((c-1)*x) + sum(x), and the group's sum(x) (the activation's
 * corr) is taken off in the epilogue */
__device__ __forceinline__ uint32_t dec4(uint32_t x) { return x & 0x03030303u; }

/* ---- mbarriers, bulk copies, wgmma (PTX) */
__device__ __forceinline__ void mbar_init(uint32_t a, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t a, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t a) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(a) : "memory");
}
/* Waits for the phase of the given parity to complete. A watchdog: a wait of more than
 * ~2^32 cycles (seconds; a stage takes microseconds) is a pipeline bug: trapped (the
 * launch fails with a CUDA error) rather than hanging the device. */
__device__ __forceinline__ uint32_t mbar_try(uint32_t a, uint32_t parity) {
    uint32_t ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(a), "r"(parity)
                 : "memory");
    return ok;
}
__device__ __noinline__ void mbar_wait_slow(uint32_t a, uint32_t parity) {
    const long long t0 = clock64();
    while (!mbar_try(a, parity))
        if (clock64() - t0 > (1ll << 32)) __trap();
}
__device__ __forceinline__ void mbar_wait(uint32_t a, uint32_t parity) {
    if (!mbar_try(a, parity)) mbar_wait_slow(a, parity);
}
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void tma_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(
            dst),
        "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void tma_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
            dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}
/* ---- the 2-CTA cluster (k_gemm_wg<NT, 2>): the activation tile multicast to both CTAs */
/* tma_3d / tma_2d into the same offset of every CTA of mask, each CTA's barrier at bar's offset */
__device__ __forceinline__ void tma_3d_mc(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint32_t bar,
                                          uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(mask)
                 : "memory");
}
__device__ __forceinline__ void tma_2d_mc(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar,
                                          uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                 : "memory");
}
/* arrive on the barrier at local address a in CTA rank of the cluster */
__device__ __forceinline__ void mbar_arrive_rank(uint32_t a, uint32_t rank) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [ra];\n}\n" ::"r"(a),
                 "r"(rank)
                 : "memory");
}
/* mbar_wait with cluster scope: what the peer CTA's consumers did before their arrive is seen */
__device__ __forceinline__ uint32_t mbar_try_cl(uint32_t a, uint32_t parity) {
    uint32_t ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(a), "r"(parity)
                 : "memory");
    return ok;
}
__device__ __noinline__ void mbar_wait_cl(uint32_t a, uint32_t parity) {
    const long long t0 = clock64();
    while (!mbar_try_cl(a, parity))
        if (clock64() - t0 > (1ll << 32)) __trap();
}
/* every thread of both CTAs: the peer's barriers are made / the peer no longer touches ours */
__device__ __forceinline__ void cluster_sync_all() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
/* keeps the compiler from moving accumulator reads and writes across wgmma fences */
template <int R> __device__ __forceinline__ void wg_reg_fence(int (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+r"(d[i])::"memory");
}
/* B descriptor: K-major, 32-byte swizzle (rows of 32 bytes = one k32 step), 8-row groups
 * 256 bytes apart (LBO unused: 1) */
__device__ __forceinline__ uint64_t desc_sw32(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(256 >> 4) << 32) |
           ((uint64_t)3 << 62);
}

/* D (s32, 64 x N per warpgroup) += A (u8, registers) . B (s8, descriptor); acc = 0: D = A.B */
__device__ __forceinline__ void wg_mma_n32(int (&d)[16], const uint32_t (&a)[4], uint64_t desc, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.s32.u8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
}
__device__ __forceinline__ void wg_mma_n64(int (&d)[32], const uint32_t (&a)[4], uint64_t desc, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k32.s32.u8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
}
__device__ __forceinline__ void wg_mma_n128(int (&d)[64], const uint32_t (&a)[4], uint64_t desc, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.s32.u8.s8 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p;\n}\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]), "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
}

template <int R> __device__ __forceinline__ void wg_mma(int (&d)[R], const uint32_t (&a)[4], uint64_t desc, int acc);
template <> __device__ __forceinline__ void wg_mma<16>(int (&d)[16], const uint32_t (&a)[4], uint64_t desc, int acc) {
    wg_mma_n32(d, a, desc, acc);
}
template <> __device__ __forceinline__ void wg_mma<32>(int (&d)[32], const uint32_t (&a)[4], uint64_t desc, int acc) {
    wg_mma_n64(d, a, desc, acc);
}
template <> __device__ __forceinline__ void wg_mma<64>(int (&d)[64], const uint32_t (&a)[4], uint64_t desc, int acc) {
    wg_mma_n128(d, a, desc, acc);
}

/* The A fragments of group e of a stage: w[h][u] = the 16 bytes of (row g + 8h, unit u) */
__device__ __forceinline__ void decode_group(const uint4 (&w)[2][4], int e, int sh, uint32_t (&a)[4][4]) {
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const uint32_t x0 = e ? w[0][u].z : w[0][u].x, x1 = e ? w[0][u].w : w[0][u].y;
        const uint32_t y0 = e ? w[1][u].z : w[1][u].x, y1 = e ? w[1][u].w : w[1][u].y;
        a[u][0] = dec4(x0 >> sh);
        a[u][1] = dec4(y0 >> sh);
        a[u][2] = dec4(x1 >> sh);
        a[u][3] = dec4(y1 >> sh);
    }
}

/* The 4 wgmmas of group e (units 4e..4e+3) of the stage whose descriptor base is dbase into
 * ia (hi columns, then lo). */
template <int NT>
__device__ __forceinline__ void issue_group(int (&ia)[wcfg<NT>::TOK], const uint32_t (&a)[4][4], uint64_t dbase, int e) {
    typedef wcfg<NT> C;
#pragma unroll
    for (int uu = 0; uu < 4; uu++) {
        const int u = 4 * e + uu;
        /* unit u's block (2*TOK rows of 32 bytes: hi then lo); the start address field
         * (bits 0-13, 16-byte units) moves by the block's offset */
        const uint64_t d = dbase + (uint64_t)((u * C::UBYTES) >> 4);
        wg_mma<C::TOK>(ia, a[uu], d, uu > 0);
    }
}

/* Group e's integers into the fp32 accumulators: ws = the strip's tile in shared memory
 * (scales at 1024 + 8g), sx = the stage's [TOK][2] scales. */
template <int NT>
__device__ __forceinline__ void rescale(float (&acc)[wcfg<NT>::NR], const int (&ia)[wcfg<NT>::TOK], const uint8_t *ws,
                                        const uint8_t *sc, int g, int t, int e) {
    typedef wcfg<NT> C;
    const float da = tc_ld_f16(ws + 1024 + 8 * g + 2 * e), db = tc_ld_f16(ws + 1024 + 8 * g + 4 + 2 * e);
    const float ma = -kMagicF * da, mb = -kMagicF * db;
#pragma unroll
    for (int j = 0; j < C::NR / 4; j++) {
        const int tk = 8 * j + 2 * t;
        /* (sx, 1.5*2^23 - corr) of tokens tk and tk + 1, group e */
        const uint2 p0 = *(const uint2 *)(sc + (tk * 2 + e) * 8), p1 = *(const uint2 *)(sc + (tk * 2 + 2 + e) * 8);
        const float s0 = __uint_as_float(p0.x), s1 = __uint_as_float(p1.x);
        int b[4];
#pragma unroll
        for (int q = 0; q < 4; q++)
            b[q] = (int)((uint32_t)ia[4 * j + q] * 128u + (uint32_t)ia[C::NR + 4 * j + q] + ((q & 1) ? p1.y : p0.y));
        acc[4 * j + 0] = fmaf(fmaf(__int_as_float(b[0]), da, ma), s0, acc[4 * j + 0]);
        acc[4 * j + 1] = fmaf(fmaf(__int_as_float(b[1]), da, ma), s1, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(fmaf(__int_as_float(b[2]), db, mb), s0, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(fmaf(__int_as_float(b[3]), db, mb), s1, acc[4 * j + 3]);
    }
}

/* W: the tiled matrix (16-byte aligned), n rows, K % 256 == 0; amap: the tensor map of the
 * activation's q, lmode & TC_WG_ACT_2D: 2D (2K bytes x M rows, box 32 x TOK: 16 loads per
 * stage), else 3D (32 bytes x M tokens x K/16 plane-units, box 32 x TOK x 16: one load);
 * wmap: the tiled matrix as 8-byte words x K/256 tiles x strips (box 136 x 1 x 8: the
 * CTA's 8 strips' tiles of a stage, one load; strips past the matrix read as zeros) unless
 * lmode & TC_WG_W_BULK (8 bulk copies per stage); sx [M][K/128], corr [M][K/32]; nsp =
 * gridDim.z K splits; part / cnt as tc_gemm_tc's.
 * CL 2 (stream-K only; launched as clusters of 2 CTAs along x): the two CTAs of a cluster
 * take the same stages of two adjacent row tiles (the pair 2p, 2p+1; the second past the
 * matrix when the row tiles are odd: its loads repeat the last tile, nothing is written)
 * and the same tokens; each loads its own weights and half of the stage's activation
 * (plane-units 8r..8r+7, amap's box then 32 x TOK x 8, or units 4r..4r+3 in 2D) multicast
 * into both CTAs' slots, so the activation is read from L2 once per pair. A slot is free
 * when both CTAs' consumers have released it (empty barriers of 16 arrivals: every
 * consumer warp arrives on both CTAs'). Stream-K shares the pairs' stages among clusters. */
template <int NT, int CL>
__global__ void __launch_bounds__(kThreads, wcfg<NT>::MINB)
    k_gemm_wg(const __grid_constant__ CUtensorMap amap, const __grid_constant__ CUtensorMap wmap, int lmode,
              const uint8_t *__restrict__ W, int n, int K,
              const float *__restrict__ sx, const int *__restrict__ corr, int M, float *__restrict__ y, size_t ys, int nsp,
              int tok_tiles, int ntiles, float *__restrict__ part, int *__restrict__ cnt) {
#if TC_WG_BODY
    typedef wcfg<NT> C;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    __shared__ __align__(8) uint64_t full[C::NS], empty[C::NS];
    __shared__ int s_last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t sraw = smem_u32(smem_raw);
    const uint32_t sbase = (sraw + 1023u) & ~1023u; /* stages 1024-aligned (the swizzle atom) */
    uint8_t *const smem = smem_raw + (sbase - sraw);
    const int nb = K >> 7, NST = K / kStageK;
    /* this CTA's range [g0, g1) of the global stage index g = tile * NST + stage (tile =
     * row tile * tok_tiles + token tile): stream-K (nsp == 0) an even share of all of
     * them, else split z of tile (blockIdx.x, blockIdx.y) */
    const bool sk = nsp == 0;
    /* ranges are taken per cluster (vid of nv) over units: tiles, or with CL 2 row-tile
     * pairs x token tiles; unit pt of rank r is tile real_tile(pt) */
    /* (recomputed where used from the launch's constants: fewer live registers) */
#define WG_RANK ((int)blockIdx.x % CL)
#define WG_NV ((int)gridDim.x / CL)
#define WG_ROW_TILES (ntiles / tok_tiles)
#define WG_WST ((CL == 2 ? (ntiles / tok_tiles + 1) / 2 * tok_tiles : ntiles) * NST) /* < 2^30 (the launcher checks) */
    auto real_row = [&](int pt) { return CL == 2 ? 2 * (pt / tok_tiles) + WG_RANK : pt / tok_tiles; };
    int g0, g1;
    if (sk) {
        const int vid = (int)blockIdx.x / CL;
        g0 = (int)((int64_t)vid * WG_WST / WG_NV);
        g1 = (int)((int64_t)(vid + 1) * WG_WST / WG_NV);
    } else {
        const int tile = (int)(blockIdx.y * gridDim.x + blockIdx.x), z = (int)blockIdx.z;
        g0 = tile * NST + z * NST / nsp;
        g1 = tile * NST + (z + 1) * NST / nsp;
    }

    if (tid == 256) { /* the tensor maps' descriptors fetched while the barriers are made */
        asm volatile("prefetch.tensormap [%0];" ::"l"(&amap) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(&wmap) : "memory");
    }
    if (tid == 0) {
        for (int s = 0; s < C::NS; s++) {
            mbar_init(smem_u32(&full[s]), 33);
            mbar_init(smem_u32(&empty[s]), 8 * CL);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (CL == 2) cluster_sync_all(); /* the peer's barriers exist before anything reaches them */

    if (warp == 8) {
        /* the producer warp */
        const int64_t nstrips = ((int64_t)n + 15) >> 4, kt = K >> 8;
        constexpr int PPL = (2 * C::TOK + 31) / 32; /* (token, group) pairs per lane */
        int ks = 0;
        for (int gg = g0; gg < g1; gg++, ks++) {
            const int slot = ks % C::NS;
            const int pt = gg / NST, st = gg - pt * NST;
            int rt = real_row(pt);
            if (CL == 2) rt = rt < WG_ROW_TILES ? rt : WG_ROW_TILES - 1; /* the odd pair's second: the last tile again */
            const int tok0 = (pt % tok_tiles) * C::TOK, row0 = rt * kRows;
            /* the pairs' sx and unit corrs, loaded before the wait (their latency hidden by it) */
            float ps[PPL];
            int4 pc[PPL];
#pragma unroll
            for (int i = 0; i < PPL; i++) {
                const int pr = lane + 32 * i, tk = pr >> 1, e = pr & 1;
                int gt = tok0 + tk;
                gt = gt < M ? gt : M - 1;
                if (pr < 2 * C::TOK) {
                    ps[i] = __ldg(sx + (size_t)gt * nb + 2 * st + e);
                    pc[i] = __ldg((const int4 *)(corr + (size_t)gt * (size_t)(K >> 5) + 8 * st + 4 * e));
                }
            }
            if (ks >= C::NS) {
                if (CL == 2) mbar_wait_cl(smem_u32(&empty[slot]), (uint32_t)(((ks / C::NS) & 1) ^ 1));
                else mbar_wait(smem_u32(&empty[slot]), (uint32_t)(((ks / C::NS) & 1) ^ 1));
            }
            const uint32_t sb = sbase + (uint32_t)(slot * C::STAGE), fb = smem_u32(&full[slot]);
            if (lane == 0) {
                mbar_expect_tx(fb, C::TX);
                if (CL == 2) { /* our half, into both CTAs */
                    if (lmode & TC_WG_ACT_2D) {
#pragma unroll
                        for (int uu = 0; uu < 4; uu++)
#pragma unroll
                            for (int p = 0; p < 2; p++) {
                                const int u = 4 * WG_RANK + uu;
                                tma_2d_mc(sb + (uint32_t)(u * C::UBYTES + p * C::TOK * 32), &amap,
                                          st * 512 + 64 * u + 32 * p, tok0, fb, (uint16_t)3);
                            }
                    } else {
                        tma_3d_mc(sb + (uint32_t)(WG_RANK * 4 * C::UBYTES), &amap, 0, tok0, 16 * st + 8 * WG_RANK, fb,
                                  (uint16_t)3);
                    }
                } else if (lmode & TC_WG_ACT_2D) {
#pragma unroll
                    for (int u = 0; u < 8; u++)
#pragma unroll
                        for (int p = 0; p < 2; p++)
                            tma_2d(sb + (uint32_t)(u * C::UBYTES + p * C::TOK * 32), &amap, st * 512 + 64 * u + 32 * p,
                                   tok0, fb);
                } else {
                    tma_3d(sb, &amap, 0, tok0, 16 * st, fb);
                }
                if (lmode & TC_WG_W_BULK) {
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        int64_t sp = (int64_t)(row0 >> 4) + i;
                        sp = sp < nstrips ? sp : nstrips - 1;
                        bulk_g2s(sb + (uint32_t)(C::WOFF + i * kTile),
                                 W + ((size_t)sp * (size_t)kt + (size_t)st) * kTile, (uint32_t)kTile, fb);
                    }
                } else {
                    tma_3d(sb + (uint32_t)C::WOFF, &wmap, 0, st, row0 >> 4, fb);
                }
            }
            uint8_t *sp = smem + slot * C::STAGE + C::SOFF;
#pragma unroll
            for (int i = 0; i < PPL; i++) {
                const int pr = lane + 32 * i;
                if (pr < 2 * C::TOK) {
                    const int c = pc[i].x + pc[i].y + pc[i].z + pc[i].w;
                    *(uint2 *)(sp + 8 * pr) = make_uint2(__float_as_uint(ps[i]), kMagic - (uint32_t)c);
                }
            }
            mbar_arrive(fb); /* release: the stores above are seen by the consumers' wait */
        }
    } else {
    /* the consumers: warpgroup wg, warp w of it, lane (g, t) */
    const int wg = warp >> 2, w = warp & 3, g = lane >> 2, t = lane & 3, sh = 2 * t;
    const int strip = wg * 4 + w;
    float acc[C::NR];
#pragma unroll
    for (int i = 0; i < C::NR; i++) acc[i] = 0.0f;
    int i0[C::TOK], i1[C::TOK]; /* per group: columns 0..TOK-1 the hi plane, TOK..2TOK-1 the lo plane */
#pragma unroll
    for (int i = 0; i < C::TOK; i++) i0[i] = i1[i] = 0;
    uint32_t a0[4][4], a1[4][4];

    /* the stage's A fragments: wait for the stage, read the strip's 8 slots, decode */
    auto load_decode = [&](int ks) {
        const int slot = ks % C::NS;
        mbar_wait(smem_u32(&full[slot]), (uint32_t)((ks / C::NS) & 1));
        const uint8_t *ws = smem + slot * C::STAGE + C::WOFF + strip * kTile;
        uint4 wv[2][4];
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int u = 0; u < 4; u++) wv[h][u] = *(const uint4 *)(ws + h * 512 + 16 * (4 * g + u));
        decode_group(wv, 0, sh, a0);
        decode_group(wv, 1, sh, a1);
    };

    int ks = 0; /* the global stage counter (slots and phases) */
    if (g0 < g1) load_decode(0);
#pragma unroll 1
    for (int gp = g0; gp < g1;) {
        /* one piece: stages [a, b) of unit pt (the tile this CTA computes: row tile rt) */
        const int pt = gp / NST, a = gp - pt * NST;
        const int rt = real_row(pt), tile = CL == 1 ? pt : rt * tok_tiles + pt % tok_tiles;
        const int b = a + (g1 - gp) < NST ? a + (g1 - gp) : NST;
#pragma unroll
        for (int i = 0; i < C::NR; i++) acc[i] = 0.0f;
#pragma unroll 1
        for (int st = a; st < b; st++, ks++) {
            const int slot = ks % C::NS;
            const uint8_t *sb = smem + slot * C::STAGE;
            const uint64_t dbase = desc_sw32(sbase + (uint32_t)(slot * C::STAGE));
            const uint8_t *ws = sb + C::WOFF + strip * kTile;
            const uint8_t *ssx = sb + C::SOFF;
            if (C::DB) {
                wg_fence();
                wg_reg_fence<C::TOK>(i0);
                wg_reg_fence<C::TOK>(i1);
                issue_group<NT>(i0, a0, dbase, 0);
                issue_group<NT>(i1, a1, dbase, 1);
                wg_commit();
                wg_wait0();
                wg_reg_fence<C::TOK>(i0);
                wg_reg_fence<C::TOK>(i1);
                rescale<NT>(acc, i0, ws, ssx, g, t, 0);
                rescale<NT>(acc, i1, ws, ssx, g, t, 1);
            } else {
                wg_fence();
                wg_reg_fence<C::TOK>(i0);
                issue_group<NT>(i0, a0, dbase, 0);
                wg_commit();
                wg_wait0();
                wg_reg_fence<C::TOK>(i0);
                rescale<NT>(acc, i0, ws, ssx, g, t, 0);
                wg_fence();
                wg_reg_fence<C::TOK>(i0);
                issue_group<NT>(i0, a1, dbase, 1);
                wg_commit();
                wg_wait0();
                wg_reg_fence<C::TOK>(i0);
                rescale<NT>(acc, i0, ws, ssx, g, t, 1);
            }
            /* the stage is consumed by this warp (its wgmmas have completed): release it */
            __syncwarp();
            if (lane == 0) {
                mbar_arrive(smem_u32(&empty[slot]));
                if (CL == 2) mbar_arrive_rank(smem_u32(&empty[slot]), (uint32_t)(WG_RANK ^ 1));
            }
            if (st + 1 < b) load_decode(ks + 1); /* the piece's next stage */
        }

        const int ctid = tid; /* 0..255 */
        bool write = CL == 1 || rt < WG_ROW_TILES; /* the odd pair's second computes nothing of its own */
        if (write && (a != 0 || b != NST)) {
            /* a partial tile: store it, count it; the tile's last piece to arrive sums the
             * pieces in order (split z = 0, 1, ... or, stream-K, their CTAs in order) */
            int slotidx, c0 = 0, c1 = 0, expect;
            if (sk) {
                /* the CTAs owning the tile's first and last stage */
                /* the clusters owning the unit's first and last stage; a piece's slot is
                 * its CTA's (cluster c, this rank) first or second */
                const int nv = WG_NV, Wst = WG_WST;
                auto start = [&](int c) { return (int)((int64_t)c * Wst / nv); };
                auto owner = [&](int gs) {
                    int c = (int)((int64_t)gs * nv / Wst);
                    while (c + 1 < nv && start(c + 1) <= gs) c++;
                    while (c > 0 && start(c) > gs) c--;
                    return c;
                };
                c0 = owner(pt * NST);
                c1 = owner(pt * NST + NST - 1);
                expect = c1 - c0 + 1;
                slotidx = 2 * (int)blockIdx.x + (gp == g0 ? 0 : 1);
            } else {
                expect = nsp;
                slotidx = (int)blockIdx.z * ntiles + tile;
            }
            float *mine = part + (size_t)slotidx * (size_t)(C::NR * 256) + ctid;
#pragma unroll
            for (int i = 0; i < C::NR; i++) __stcg(mine + (size_t)i * 256, acc[i]);
            __threadfence();
            asm volatile("bar.sync 1, 256;" ::: "memory");
            if (ctid == 0) s_last = atomicAdd(&cnt[tile], 1) == expect - 1;
            asm volatile("bar.sync 1, 256;" ::: "memory");
            write = s_last != 0;
            if (write) {
                /* all pieces from the workspace, this CTA's too (the bits it stored) */
                __threadfence();
                const int np = sk ? c1 - c0 + 1 : nsp;
#pragma unroll 1
                for (int q = 0; q < np; q++) {
                    int sq;
                    if (sk) {
                        const int cq = c0 + q;
                        /* the piece is cq's first (slot 0) unless cq's range starts in an earlier unit */
                        sq = 2 * (cq * CL + WG_RANK) + ((int)((int64_t)cq * WG_WST / WG_NV) / NST == pt ? 0 : 1);
                    } else {
                        sq = q * ntiles + tile;
                    }
                    const float *ps = part + (size_t)sq * (size_t)(C::NR * 256) + ctid;
#pragma unroll
                    for (int i = 0; i < C::NR; i++) {
                        const float v = __ldcg(ps + (size_t)i * 256);
                        acc[i] = q == 0 ? v : acc[i] + v;
                    }
                }
                if (ctid == 0) cnt[tile] = 0; /* every piece has counted: ready for the next launch */
            }
        }
        if (write) {
            const int tok0 = (pt % tok_tiles) * C::TOK, row0 = rt * kRows;
            const int ra = row0 + wg * 64 + w * 16 + g, rb = ra + 8;
#pragma unroll
            for (int j = 0; j < C::NR / 4; j++) {
                const int tk = tok0 + 8 * j + 2 * t;
                if (tk < M) {
                    if (ra < n) y[(size_t)tk * ys + ra] = acc[4 * j + 0];
                    if (rb < n) y[(size_t)tk * ys + rb] = acc[4 * j + 2];
                }
                if (tk + 1 < M) {
                    if (ra < n) y[(size_t)(tk + 1) * ys + ra] = acc[4 * j + 1];
                    if (rb < n) y[(size_t)(tk + 1) * ys + rb] = acc[4 * j + 3];
                }
            }
        }
        gp += b - a;
        if (gp < g1) load_decode(ks); /* the next piece's first stage */
    }
    }
    if (CL == 2) {
        __syncwarp();
        cluster_sync_all(); /* no remote arrive or multicast reaches an exited CTA */
    }
#undef WG_RANK
#undef WG_NV
#undef WG_ROW_TILES
#undef WG_WST
#else
    __trap();
#endif
}

/* ------------------------------------------------------------------ host */

/* CTAs of k_gemm_wg<NT> resident per SM, memoised per context (as tc_gemm_tc's). */
int wg_occ(const void *fn, size_t smem) {
    tc_ctx *cx = tc_cur;
    for (int i = 0; i < cx->n_occ; i++)
        if (cx->occ[i].fn == fn && cx->occ[i].threads == kThreads && cx->occ[i].smem == smem) return cx->occ[i].occ;
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, kThreads, smem) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    if (occ < 1) occ = 1;
    if (cx->n_occ < 4 * TC_MEMO) {
        cx->occ[cx->n_occ].fn = fn;
        cx->occ[cx->n_occ].threads = kThreads;
        cx->occ[cx->n_occ].smem = smem;
        cx->occ[cx->n_occ].occ = occ;
        cx->n_occ++;
    }
    return occ;
}

/* The split-K workspace (tc_gemm_tc's, shared: launches on one stream do not overlap),
 * allocated here unless the stream is being captured. */
bool wg_ws(void) {
    tc_ctx *c = tc_cur;
    if (c->gemm_part && c->gemm_cnt) return true;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
        cudaGetLastError();
        return false;
    }
    if (!c->gemm_cnt) c->gemm_cnt = (int *)tc_malloc(c, TC_GEMM_MAX_TILES * sizeof(int));
    if (!c->gemm_part) c->gemm_part = (float *)tc_malloc(c, TC_GEMM_WS_FLOATS * sizeof(float));
    return c->gemm_part && c->gemm_cnt;
}

/* cuTensorMapEncodeTiled from the driver (no link to libcuda); NULL when missing */
PFN_cuTensorMapEncodeTiled_v12000 wg_encoder(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            cudaGetLastError();
            p = NULL;
        }
        return (PFN_cuTensorMapEncodeTiled_v12000)p;
    }();
    return fn;
}

/* The kernel's attributes set (once per context) and its image loadable here: false on a
 * device without the sm_90a image (the error cleared, not noted: the caller falls back). */
template <int NT, int CL> bool wg_ready(void) {
    typedef wcfg<NT> C;
    const void *fn = (const void *)k_gemm_wg<NT, CL>;
    if (tc_attr_once(fn, C::SMEM)) {
        cudaError_t e = cudaFuncSetAttribute(k_gemm_wg<NT, CL>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM);
        if (e != cudaSuccess) {
            cudaGetLastError();
            /* forget the memo so that every call refuses (and falls back) */
            tc_ctx *c = tc_cur;
            for (int i = 0; i < c->n_attr; i++)
                if (c->attr[i].fn == fn) c->attr[i].v = -1;
            return false;
        }
    } else {
        tc_ctx *c = tc_cur;
        for (int i = 0; i < c->n_attr; i++)
            if (c->attr[i].fn == fn && c->attr[i].v < 0) return false;
    }
    return true;
}

/* The launch's K splits: > 0 classic split-K (tc_mm_gemm_splits: forced splits, or the
 * rule where stream-K cannot run), 0 stream-K over *ctas CTAs (the default: every
 * resident slot takes an even share of all tiles' stages, so no CTA starts more than once
 * and none idles; the partials of the tiles split between CTAs, at most two per CTA, are
 * summed in CTA order by the tile's last piece: deterministic). ws: the workspace is there. */
/* Clusters of 2 CTAs of k_gemm_wg<NT, 2> resident at once on the device (0: none can run),
 * memoised with wg_occ's (threads -2). */
template <int NT> int wg_pairs(void) {
    typedef wcfg<NT> C;
    tc_ctx *cx = tc_cur;
    if (!wg_ready<NT, 2>()) return 0;
    const void *fn = (const void *)k_gemm_wg<NT, 2>;
    for (int i = 0; i < cx->n_occ; i++)
        if (cx->occ[i].fn == fn && cx->occ[i].threads == -2 && cx->occ[i].smem == (size_t)C::SMEM) return cx->occ[i].occ;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(2 * tc_sm_count()), 1, 1);
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = C::SMEM;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 2;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, k_gemm_wg<NT, 2>, &cfg) != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    if (cx->n_occ < 4 * TC_MEMO) {
        cx->occ[cx->n_occ].fn = fn;
        cx->occ[cx->n_occ].threads = -2;
        cx->occ[cx->n_occ].smem = C::SMEM;
        cx->occ[cx->n_occ].occ = n;
        cx->n_occ++;
    }
    return n;
}

template <int NT> int wg_splits(const tc_mat *m, int M, int force, bool ws, int *ctas) {
    typedef wcfg<NT> C;
    const int occ = wg_occ((const void *)k_gemm_wg<NT, 1>, C::SMEM);
    const int64_t tiles = (int64_t)((M + C::TOK - 1) / C::TOK) * ((m->n + kRows - 1) / kRows);
    const int64_t stages = tiles * (m->k / kStageK), slots = (int64_t)tc_sm_count() * occ;
    *ctas = 0;
    if (force == 0 && ws && tiles <= TC_GEMM_MAX_TILES && 2 * slots * C::TOK * kRows <= (int64_t)TC_GEMM_WS_FLOATS) {
        *ctas = (int)(stages < slots ? stages : slots);
        return 0;
    }
    const int s = tc_mm_gemm_splits(m->n, m->k, (size_t)M, C::TOK, tc_sm_count(), occ, force);
    return s > 1 && !ws ? 1 : s;
}

/* wg_splits, and the CTAs per cluster *ncl: 2 (the activation multicast to row-tile pairs)
 * where stream-K runs and lmode & TC_WG_PAIRS, unless no cluster of 2 fits; then *ctas
 * is twice the clusters (each an even share of the pairs' stages). */
template <int NT> int wg_grid(const tc_mat *m, int M, int force, bool ws, int lmode, int *ctas, int *ncl) {
    typedef wcfg<NT> C;
    const int nsp = wg_splits<NT>(m, M, force, ws, ctas);
    *ncl = 1;
    if (nsp != 0 || !(lmode & TC_WG_PAIRS)) return nsp;
    const int pairs = wg_pairs<NT>();
    const int64_t tok_tiles = (M + C::TOK - 1) / C::TOK, row_tiles = (m->n + kRows - 1) / kRows;
    const int64_t ust = (row_tiles + 1) / 2 * tok_tiles * (m->k / kStageK);
    const int64_t ncls = ust < pairs ? ust : pairs;
    if (ncls < 1 || 2 * 2 * ncls * C::TOK * kRows > (int64_t)TC_GEMM_WS_FLOATS) return nsp;
    *ncl = 2;
    *ctas = (int)(2 * ncls);
    return nsp;
}

/* The tensor maps of a launch (lmode may gain TC_WG_ACT_2D / TC_WG_W_BULK where the
 * driver refuses the 3D maps); false when none can be made. */
template <int NT>
bool wg_maps(const tc_mat *m, const tc_act *act, int *lmode, CUtensorMap *amap, CUtensorMap *wmap, int ncl) {
    typedef wcfg<NT> C;
    PFN_cuTensorMapEncodeTiled_v12000 enc = wg_encoder();
    if (!enc) return false;
    const cuuint64_t K = (cuuint64_t)m->k, M = (cuuint64_t)act->batch;
    memset(amap, 0, sizeof *amap);
    memset(wmap, 0, sizeof *wmap);
    if (!(*lmode & TC_WG_ACT_2D)) {
        /* (byte of a plane-unit, token, plane-unit): strides 2K and 32 bytes */
        const cuuint64_t gdim[3] = {32, M, K / 16}, gstride[2] = {2 * K, 32};
        /* ncl 2: each CTA of a pair loads half of a stage's 16 plane-units */
        const cuuint32_t box[3] = {32, (cuuint32_t)C::TOK, ncl == 2 ? 8u : 16u}, es[3] = {1, 1, 1};
        if (enc(amap, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, (void *)act->q, gdim, gstride, box, es,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
            *lmode |= TC_WG_ACT_2D;
    }
    if (*lmode & TC_WG_ACT_2D) {
        const cuuint64_t gdim[2] = {2 * K, M}, gstride[1] = {2 * K};
        const cuuint32_t box[2] = {32, (cuuint32_t)C::TOK}, es[2] = {1, 1};
        if (enc(amap, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)act->q, gdim, gstride, box, es,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_32B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
            return false;
    }
    if (!(*lmode & TC_WG_W_BULK)) {
        /* (8-byte word of a tile, tile along K, strip): strides 1088 and K/256 * 1088 bytes */
        const cuuint64_t kt = K / kStageK, strips = (cuuint64_t)((m->n + 15) / 16);
        const cuuint64_t gdim[3] = {kTile / 8, kt, strips}, gstride[2] = {(cuuint64_t)kTile, kt * kTile};
        const cuuint32_t box[3] = {kTile / 8, 1, 8}, es[3] = {1, 1, 1};
        if (enc(wmap, CU_TENSOR_MAP_DATA_TYPE_UINT64, 3, (void *)m->data, gdim, gstride, box, es,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
            *lmode |= TC_WG_W_BULK;
    }
    return true;
}

template <int NT> int wg_launch(const tc_mat *m, const tc_act *act, float *y, size_t ys, int force, int lmode) {
    typedef wcfg<NT> C;
    if (!wg_ready<NT, 1>()) return 0;
    const int M = (int)act->batch;
    const int tok_tiles = (M + C::TOK - 1) / C::TOK, row_tiles = (int)((m->n + kRows - 1) / kRows);
    if ((int64_t)tok_tiles * (row_tiles + 1) * (m->k / kStageK) >= ((int64_t)1 << 30)) return 0; /* the kernel's 32-bit stage index */
    int ctas = 0, ncl = 1;
    const int nsp = wg_grid<NT>(m, M, force, wg_ws(), lmode, &ctas, &ncl);
    CUtensorMap amap, wmap;
    if (!wg_maps<NT>(m, act, &lmode, &amap, &wmap, ncl)) return 0;
    const dim3 grid = nsp == 0 ? dim3((unsigned)ctas, 1, 1) : dim3((unsigned)tok_tiles, (unsigned)row_tiles, (unsigned)nsp);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kThreads, 1, 1);
    cfg.dynamicSmemBytes = C::SMEM;
    cfg.stream = tc_cur->stream;
    cudaLaunchAttribute at[1];
    if (ncl == 2) {
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = 2;
        at[0].val.clusterDim.y = 1;
        at[0].val.clusterDim.z = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
    }
    const uint8_t *wd = m->data;
    const float *sxp = act->sx;
    const int *cp = act->corr;
    int n = (int)m->n, k = (int)m->k, ntl = tok_tiles * row_tiles;
    void (*const kern)(CUtensorMap, CUtensorMap, int, const uint8_t *, int, int, const float *, const int *, int,
                       float *, size_t, int, int, int, float *, int *) = ncl == 2 ? k_gemm_wg<NT, 2> : k_gemm_wg<NT, 1>;
    tc_note((int)cudaLaunchKernelEx(&cfg, kern, amap, wmap, lmode, wd, n, k, sxp, cp, M, y, ys, nsp, tok_tiles, ntl,
                                    tc_cur->gemm_part, tc_cur->gemm_cnt));
    tc_check_launch();
    return 1;
}

/* tokens per CTA: tc_gemm_tc's exact-mode rule (16, 32, else 64) */
int wg_tok(size_t M, int force) { return tc_mm_gemm_tok(M, TC_GEMM_EXACT, force == 1); }

bool wg_shape_ok(const tc_mat *m, const tc_act *act) {
    return m->kind == TC_TERN128T && act && act->k == m->k && m->k > 0 && m->k % kStageK == 0 &&
           m->k <= (1 << 24) && m->n > 0 && m->n <= ((int64_t)65535 * kRows) && act->batch > 0 &&
           act->batch <= (size_t)1 << 30 && ((uintptr_t)m->data & 15) == 0 &&
           m->row_bytes == (size_t)(m->k / kStageK) * kTile && ((uintptr_t)act->q & 15) == 0 &&
           ((uintptr_t)act->sx & 7) == 0 && act->corr && ((uintptr_t)act->corr & 15) == 0;
}

/* ---- the int8 tensor-core ceiling (bench model's prefill share): two warpgroups an SM
 * issue chains of wgmma m64n128k32 (u8 x s8 -> s32) on operands already in registers and
 * shared memory, nothing loaded from DRAM; the rate is the device's int8 MMA ceiling as
 * this file's kernels can use it (A from registers, B from a 32-byte-swizzled tile). */
constexpr int kPeakChain = 32;  /* wgmmas per commit */
__global__ void __launch_bounds__(256, 1) k_wg_peak(int iters, int *sink) {
#if TC_WG_BODY
    __shared__ __align__(1024) uint8_t sb[128 * 32];
    for (int i = threadIdx.x; i < 128 * 32 / 4; i += blockDim.x)
        ((uint32_t *)sb)[i] = (uint32_t)(i * 2654435761u) & 0x7F7F7F7Fu;
    __syncthreads();
    const uint64_t desc = desc_sw32((uint32_t)__cvta_generic_to_shared(sb));
    uint32_t a[4];
#pragma unroll
    for (int i = 0; i < 4; i++) a[i] = ((threadIdx.x * 4 + i) * 0x9E3779B9u) & 0x02020202u;
    int d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0;
    for (int it = 0; it < iters; it++) {
        wg_fence();
#pragma unroll
        for (int c = 0; c < kPeakChain; c++) wg_mma_n128(d, a, desc, 1);
        wg_commit();
        wg_wait0();
        wg_reg_fence(d);
    }
    int x = 0;
#pragma unroll
    for (int i = 0; i < 64; i++) x ^= d[i];
    if (x == 0x7FFFFFF1) *sink = x; /* practically never: keeps the products */
#else
    (void)iters;
    (void)sink;
#endif
}

} // namespace

/* the K splits' override for m (tc_mm_gemm_split_force; after TC_CTX) */
static int split_force(const tc_mat *m, size_t M) {
    const tc_mm_caps c = tc_mm_caps_now();
    return tc_mm_gemm_split_force(&c, m->n, m->k, M);
}

extern "C" int tc_gemm_wg_supported(tc_ctx *cx, const tc_mat *m, const tc_act *act) {
    TC_CTX(cx);
    if (!wg_shape_ok(m, act) || !wg_encoder()) return 0;
    const int tok = wg_tok(act->batch, split_force(m, act->batch));
    return tok == 16 ? wg_ready<1, 1>() : tok == 32 ? wg_ready<2, 1>() : wg_ready<4, 1>();
}

extern "C" int tc_gemm_wg_plan(tc_ctx *cx, const tc_mat *m, const tc_act *act, int *tok, int *splits) {
    return tc_gemm_wg_plan_ex(cx, m, act, 0, tok, splits) ? 1 : 0;
}

extern "C" int tc_gemm_wg_plan_ex(tc_ctx *cx, const tc_mat *m, const tc_act *act, int lmode, int *tok, int *splits) {
    TC_CTX(cx);
    *tok = 0;
    *splits = 0;
    if (!tc_gemm_wg_supported(cx, m, act)) return 0;
    const tc_mm_caps caps = tc_mm_caps_now();
    const int force = tc_mm_gemm_split_force(&caps, m->n, m->k, act->batch), M = (int)act->batch;
    *tok = wg_tok(act->batch, force);
    int ctas = 0, ncl = 1;
    lmode &= TC_WG_PAIRS;
    const int s = *tok == 16   ? wg_grid<1>(m, M, force, true, lmode, &ctas, &ncl)
                  : *tok == 32 ? wg_grid<2>(m, M, force, true, lmode, &ctas, &ncl)
                               : wg_grid<4>(m, M, force, true, lmode, &ctas, &ncl);
    *splits = s > 0 ? s : -ctas;
    return ncl;
}

extern "C" int tc_gemm_wg_ex(tc_ctx *cx, const tc_mat *m, const tc_act *act, float *y, size_t ys, int lmode) {
    TC_CTX(cx);
    if (!wg_shape_ok(m, act)) return 0;
    TC_PROF(TC_FAM_MATMUL);
    const tc_mm_caps caps = tc_mm_caps_now();
    const int force = tc_mm_gemm_split_force(&caps, m->n, m->k, act->batch);
    const int tok = wg_tok(act->batch, force);
    lmode &= TC_WG_ACT_2D | TC_WG_W_BULK | TC_WG_PAIRS;
    if (tok == 16) return wg_launch<1>(m, act, y, ys, force, lmode);
    if (tok == 32) return wg_launch<2>(m, act, y, ys, force, lmode);
    return wg_launch<4>(m, act, y, ys, force, lmode);
}

extern "C" int tc_gemm_wg(tc_ctx *cx, const tc_mat *m, const tc_act *act, float *y, size_t ys) {
    return tc_gemm_wg_ex(cx, m, act, y, ys, 0);
}

extern "C" int tc_gemm_wg_lmode(tc_ctx *cx, const tc_mat *m, const tc_act *act, int lmode) {
    TC_CTX(cx);
    if (!wg_shape_ok(m, act)) return -1;
    CUtensorMap a, w;
    lmode &= TC_WG_ACT_2D | TC_WG_W_BULK;
    const int tok = wg_tok(act->batch, split_force(m, act->batch));
    const bool ok = tok == 16 ? wg_maps<1>(m, act, &lmode, &a, &w, 1)
                    : tok == 32 ? wg_maps<2>(m, act, &lmode, &a, &w, 1) : wg_maps<4>(m, act, &lmode, &a, &w, 1);
    return ok ? lmode : -1;
}

/* The int8 tensor-core rate in TOPS (2 ops a multiply-add), from the median of `passes`
 * timed launches after a warm-up (tc_bench_us); 0 where wgmma is not available (not
 * sm_90a) or a launch fails. */
struct wg_peak_ctx {
    int sms, iters, *sink;
};
static void wg_peak_launch(void *p) {
    const wg_peak_ctx *c = (const wg_peak_ctx *)p;
    k_wg_peak<<<c->sms, 256, 0, tc_cur->stream>>>(c->iters, c->sink);
}
extern "C" double tc_int8_mma_tops(tc_ctx *cx, int passes) {
    TC_CTX(cx);
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, k_wg_peak) != cudaSuccess || fa.ptxVersion < 90 || fa.binaryVersion < 90) {
        cudaGetLastError();
        return 0;
    }
    wg_peak_ctx c = {tc_sm_count(), 200 /* ~0.5 s a launch on an H200 */, NULL};
    if (cudaMalloc((void **)&c.sink, sizeof *c.sink) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    const double us = tc_bench_us(cx, wg_peak_launch, &c, 1, passes, 0);
    cudaFree(c.sink);
    /* per CTA: 2 warpgroups x iters x chain wgmmas of 64 x 128 x 32 multiply-adds */
    const double ops = 2.0 * c.sms * 2.0 * c.iters * kPeakChain * 64.0 * 128.0 * 32.0;
    return us > 0 ? ops / (us * 1e-6) / 1e12 : 0;
}
