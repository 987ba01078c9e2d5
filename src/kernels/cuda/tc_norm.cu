/*
 * tc_norm.cu - RMSNorm sites: residual add + RMSNorm (+ the forward Hadamard
 * transform and the activation quantisation in the same kernel), and the
 * per-head RMSNorm (q/k norms). Math mirrors src/backends/cpu/backend_cpu.c.
 * Decode (rows <= 64): k_site_reg (the row over a cluster of CTAs, the transform in
 * registers); shapes it does not take (and tc_set_ops_old, for the tests): k_site_cluster;
 * then the one-CTA-per-row kernels; more rows: k_add_rmsnorm_fwht.
 */
#include "kernels/cuda/fwht_reg.cuh"

#include <cooperative_groups.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

namespace cg = cooperative_groups;

__device__ __forceinline__ double tc_block_sum_d(double v, double *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    double s = 0;
    for (int i = 0; i < nw; i++) s += red[i];
    return s;
}

__global__ void k_add_rmsnorm(float *__restrict__ r, const float *__restrict__ d,
                              const float *__restrict__ gain, float eps, float *__restrict__ out,
                              size_t n) {
    tc_pdl_trigger();
    tc_pdl_wait();
    __shared__ double red[32];
    float *rr = r + blockIdx.x * n;
    const float *dd = d ? d + blockIdx.x * n : NULL;
    double ss = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = rr[i];
        if (dd) {
            v += dd[i];
            rr[i] = v;
        }
        ss += (double)v * v;
    }
    ss = tc_block_sum_d(ss, red);
    float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    float *o = out + blockIdx.x * n;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) o[i] = rr[i] * inv * (gain ? gain[i] : 1.0f);
}

__global__ void k_add(float *__restrict__ r, const float *__restrict__ d, size_t total) {
    tc_pdl_trigger();
    tc_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) r[i] += d[i];
}

/* One CTA per row, the whole row in shared memory: r += d, rmsnorm (float64
 * sum of squares), normed written if asked, then the forward transform of every
 * block of the row at once (a butterfly stage over all blocks per step), rotated
 * written, and the quantised activation when act.q. */
#define ARH_MAX_N 16384
__global__ void __launch_bounds__(1024) k_add_rmsnorm_fwht(float *__restrict__ r,
        const float *__restrict__ d, const float *__restrict__ gain, float eps,
        float *__restrict__ normed, float *__restrict__ rotated, size_t n, int block,
        const float *__restrict__ signs, float scale, tc_act act) {
    tc_pdl_trigger();
    tc_pdl_wait();
    extern __shared__ float sh[];
    __shared__ double red[32];
    const size_t row = blockIdx.x;
    float *rr = r + row * n;
    const float *dd = d ? d + row * n : NULL;
    double ss = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = rr[i];
        if (dd) {
            v += dd[i];
            rr[i] = v;
        }
        sh[i] = v;
        ss += (double)v * v;
    }
    ss = tc_block_sum_d(ss, red);
    const float inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
    /* stages h < 32 within the warp (element i on lane i % 32: n % 32 == 0 and whole
     * warps per pass), the rest through shared memory; block is a power of two, so
     * pair t of stage h is at i = (t / h) * 2h + t % h. Same sums as a plain butterfly. */
    const int hw = n % 32 == 0 ? (block < 32 ? block : 32) : 1;
    const int lane = threadIdx.x & 31;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        float v = sh[i] * inv * (gain ? gain[i] : 1.0f);
        if (normed) normed[row * n + i] = v;
        v *= signs[i];
        for (int h = 1; h < hw; h <<= 1) {
            float o = __shfl_xor_sync(0xffffffffu, v, h);
            v = (lane & h) ? o - v : v + o;
        }
        sh[i] = v;
    }
    __syncthreads();
    const int pairs = (int)(n / 2);
    int lh = 0;
    while ((1 << lh) < hw) lh++;
    for (int h = hw; h < block; h <<= 1, lh++) {
        for (int t = threadIdx.x; t < pairs; t += blockDim.x) {
            int i = ((t >> lh) << (lh + 1)) + (t & (h - 1));
            float x0 = sh[i], x1 = sh[i + h];
            sh[i] = x0 + x1;
            sh[i + h] = x0 - x1;
        }
        __syncthreads();
    }
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) rotated[row * n + i] = sh[i] * scale;
    if (act.q) {
        const int nw = blockDim.x >> 5, nb = (int)(n >> 7);
        for (int w = threadIdx.x >> 5; w < nb; w += nw) {
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = sh[w * 128 + lane * 4 + e] * scale;
            tc_actq_block(v, lane, act.q + row * n * 2, act.sx + row * (size_t)nb,
                          act.corr + row * (size_t)(n >> 5), w);
        }
    }
}

/* The same site split over a thread-block cluster of CS CTAs per row (grid (CS,
 * rows)), CTA `rank` owning the chunk [rank*chunk, (rank+1)*chunk) of the row in
 * shared memory: r += d, the chunk's float64 sum of squares, the CS partial sums
 * read from every CTA's shared memory (distributed shared memory; summed in rank
 * order, so every CTA gets the same total), then normed, the transform of the
 * chunk's blocks (chunk % block == 0) and the quantised activation as in
 * k_add_rmsnorm_fwht. Without signs the normalised chunk is written to out (and
 * quantised). One CTA per row is too little parallelism at batch 1. */

#define SITE_THREADS 256
#define SITE_MAX_CHUNK 8192
__global__ void __launch_bounds__(SITE_THREADS) k_site_cluster(float *__restrict__ r,
        const float *__restrict__ d, const float *__restrict__ gain, float eps,
        float *__restrict__ normed, float *__restrict__ rotated, size_t n, int chunk, int block,
        const float *__restrict__ signs, float scale, tc_act act) {
    tc_pdl_trigger();
    tc_pdl_wait();
    extern __shared__ float sh[];
    __shared__ double red[32];
    __shared__ double part;
    cg::cluster_group cl = cg::this_cluster();
    const int rank = (int)cl.block_rank(), cs = (int)cl.num_blocks();
    const size_t row = blockIdx.y, off = (size_t)rank * chunk;
    float *rr = r + row * n + off;
    const float *dd = d ? d + row * n + off : NULL;
    double ss = 0;
    for (int i = threadIdx.x; i < chunk; i += blockDim.x) {
        float v = rr[i];
        if (dd) {
            v += dd[i];
            rr[i] = v;
        }
        sh[i] = v;
        ss += (double)v * v;
    }
    ss = tc_block_sum_d(ss, red);
    if (threadIdx.x == 0) part = ss;
    cl.sync();
    double tot = 0;
    for (int c = 0; c < cs; c++) tot += *cl.map_shared_rank(&part, c);
    cl.sync(); /* every CTA has read every partial: the CTAs may go on and exit */
    const float inv = (float)(1.0 / sqrt(tot / (double)n + (double)eps));
    const int lane = threadIdx.x & 31;
    const int nb = (int)(n >> 7);
    if (!signs) { /* out = normed: written and quantised */
        for (int i = threadIdx.x; i < chunk; i += blockDim.x) {
            float v = sh[i] * inv * (gain ? gain[off + i] : 1.0f);
            normed[row * n + off + i] = v;
            sh[i] = v;
        }
        __syncthreads();
    } else {
        const int hw = chunk % 32 == 0 ? (block < 32 ? block : 32) : 1;
        for (int i = threadIdx.x; i < chunk; i += blockDim.x) {
            float v = sh[i] * inv * (gain ? gain[off + i] : 1.0f);
            if (normed) normed[row * n + off + i] = v;
            v *= signs[off + i];
            for (int h = 1; h < hw; h <<= 1) {
                float o = __shfl_xor_sync(0xffffffffu, v, h);
                v = (lane & h) ? o - v : v + o;
            }
            sh[i] = v;
        }
        __syncthreads();
        const int pairs = chunk / 2;
        int lh = 0;
        while ((1 << lh) < hw) lh++;
        for (int h = hw; h < block; h <<= 1, lh++) {
            for (int t = threadIdx.x; t < pairs; t += blockDim.x) {
                int i = ((t >> lh) << (lh + 1)) + (t & (h - 1));
                float x0 = sh[i], x1 = sh[i + h];
                sh[i] = x0 + x1;
                sh[i + h] = x0 - x1;
            }
            __syncthreads();
        }
        for (int i = threadIdx.x; i < chunk; i += blockDim.x) {
            float v = sh[i] * scale;
            rotated[row * n + off + i] = v;
            sh[i] = v;
        }
        __syncthreads();
    }
    if (act.q) {
        const int nw = blockDim.x >> 5;
        for (int w = threadIdx.x >> 5; w < chunk / 128; w += nw) {
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = sh[w * 128 + lane * 4 + e];
            tc_actq_block(v, lane, act.q + row * n * 2, act.sx + row * (size_t)nb,
                          act.corr + row * (size_t)(n >> 5), (int)(off / 128) + w);
        }
    }
}

/* CTAs per row for k_site_cluster (0: it does not fit): the most, up to 8, that
 * split n into chunks of whole transform blocks (rot), whole 128-blocks (act),
 * whole warps, at most SITE_MAX_CHUNK floats. */
static int site_split(size_t rows, size_t n, size_t block, bool rot, bool act, int *chunk) {
    if (rows > 65535 || (rot && (block < 2 || (block & (block - 1))))) return 0;
    for (int cs = 8; cs >= 2; cs--) {
        if (n % cs) continue;
        size_t ch = n / cs;
        if ((rot && ch % block) || (act && ch % 128) || ch % 32 || ch > SITE_MAX_CHUNK) continue;
        *chunk = (int)ch;
        return cs;
    }
    return 0;
}

static bool site_cluster(float *r, const float *d, const float *gain, float eps, float *normed,
                         float *rotated, size_t rows, size_t n, size_t block, const float *signs,
                         const tc_act *act) {
    int chunk = 0;
    const int cs = site_split(rows, n, block, signs != NULL, act != NULL, &chunk);
    if (!cs) return false;
    if (tc_attr_once((const void *)k_site_cluster, SITE_MAX_CHUNK * 4))
        cudaFuncSetAttribute(k_site_cluster, cudaFuncAttributeMaxDynamicSharedMemorySize, SITE_MAX_CHUNK * 4);
    tc_act none = {};
    tc_launch(k_site_cluster, dim3((unsigned)cs, (unsigned)rows), dim3(SITE_THREADS),
              (size_t)chunk * sizeof(float), (unsigned)cs, r, d, gain, eps, normed,
              signs ? rotated : NULL, n, chunk, (int)block, signs,
              signs ? 1.0f / sqrtf((float)block) : 1.0f, act ? *act : none);
    return true;
}

/* ------------------------------------------------ decode site, registers
 * k_site_reg<M, ROT>: grid (cs, rows), a cluster of the cs CTAs of a row (none when
 * cs = 1), CTA `rank` owning the chunk [rank*CH, (rank+1)*CH) of the row, CH = 256 << M,
 * with CH/8 threads: thread t owns the 8 inputs rank*CH + 8t .. + 7 (16-byte loads of
 * r, d, gain, signs, all issued at once after the PDL wait).
 *   r += d (written back), the chunk's float64 sum of squares (each thread over its 8,
 *   warp shuffles, then the warps' sums in warp order from shared memory).
 *   ROT (a transform block = the chunk): x*gain*signs transformed at once (fr_transform;
 *   the norm's scalar 1/rms is applied after the transform, which is linear, so the
 *   transform overlaps the cluster's exchange of the partial sums: arrive, transform,
 *   wait), then y = H * (inv * scale) written to rotated, normed = x*inv*gain if asked.
 *   !ROT: normed = x*inv*gain (the output).
 *   act.q: the final floats to shared memory, each warp quantising whole 128-blocks.
 * Cluster exchange: thread 0 puts the CTA's partial in `part`; every thread arrives
 * (release), the CTAs wait (acquire) and read the cs partials from the cluster's shared
 * memory in rank order (every CTA gets the same total), arrive again (relaxed) and wait
 * for that second barrier just before exiting, so no CTA leaves while another still
 * reads its `part`. Shared memory: the chunk (CH floats; the transform's exchange and
 * the quantisation), the warps' sums, `part`. Same math as k_site_cluster up to float
 * rounding order (the transform of x*gain*signs scaled once by inv*scale, rather than
 * the transform of x*inv*gain*signs scaled by scale). */
template <int M, bool ROT>
__global__ void __launch_bounds__(32 << M) k_site_reg(float *__restrict__ r,
        const float *__restrict__ d, const float *__restrict__ gain, float eps,
        float *__restrict__ normed, float *__restrict__ rotated, size_t n,
        const float *__restrict__ signs, float scale, tc_act act) {
    tc_pdl_trigger();
    tc_pdl_wait();
    constexpr int CH = 256 << M, NW = 1 << M;
    __shared__ __align__(16) float sh[CH];
    __shared__ double red[NW];
    __shared__ double part;
    const int t = threadIdx.x, lane = t & 31;
    const int cs = (int)gridDim.x, rank = (int)blockIdx.x;
    const size_t row = blockIdx.y, c0 = (size_t)rank * CH; /* the chunk's first input */
    float *rr = r + row * n + c0 + 8 * t;
    float x[8], dd[8], g[8], sg[8];
    fr_ld8(x, rr);
    if (d) fr_ld8(dd, d + row * n + c0 + 8 * t);
    if (gain) fr_ld8(g, gain + c0 + 8 * t);
    if (ROT) fr_ld8(sg, signs + c0 + 8 * t);
    double ss = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        if (d) x[k] += dd[k];
        if (!gain) g[k] = 1.0f;
        ss += (double)x[k] * x[k];
    }
    if (d) fr_st8(rr, x);
    float v[8], u[8];
    if (ROT) {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = x[k] * g[k] * sg[k];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) red[t >> 5] = ss;
    __syncthreads();
    double tot = 0;
#pragma unroll
    for (int w = 0; w < NW; w++) tot += red[w];
    cg::cluster_group cl = cg::this_cluster();
    if (cs > 1) {
        if (t == 0) part = tot;
        fr_cluster_arrive(); /* part published */
    }
    if (ROT) fr_transform<M>(v, u, sh, t); /* overlaps the cluster barrier */
    if (cs > 1) {
        fr_cluster_wait();
        tot = 0;
        for (int c = 0; c < cs; c++) tot += *cl.map_shared_rank(&part, c);
        fr_cluster_arrive_relaxed(); /* done reading the others' part (wait before exit) */
    }
    const float inv = (float)(1.0 / sqrt(tot / (double)n + (double)eps));
    if (ROT) {
        const float k2 = inv * scale;
#pragma unroll
        for (int k = 0; k < 8; k++) u[k] = u[k] * k2;
        fr_st_high<M>(rotated + row * n + c0, u, t);
        if (normed) {
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = x[k] * inv * g[k];
            fr_st8(normed + row * n + c0 + 8 * t, v);
        }
        if (act.q) fr_st_high<M>(sh, u, t); /* the thread's own slots */
    } else {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = x[k] * inv * g[k];
        fr_st8(normed + row * n + c0 + 8 * t, v);
        if (act.q) fr_st8(sh + 8 * t, v);
    }
    if (act.q) {
        __syncthreads();
        fr_quant(sh, CH, act, row, n, (int)(c0 / 128));
    }
    if (cs > 1) fr_cluster_wait();
}

/* CTAs per row for k_site_reg (0: it does not take the shape), *m its M: with a
 * transform, chunk = block = 256 << M (M 0..3) and n / block <= 8; without, the
 * smallest chunk 256 << M dividing n into <= 8 chunks. 16-byte aligned rows. */
static int site_reg_split(size_t rows, size_t n, size_t block, bool rot, int *m) {
    if (rows < 1 || rows > 65535) return 0;
    if (rot) {
        const int M = fr_m_of(block);
        if (M < 0 || n % block || n / block > 8) return 0;
        *m = M;
        return (int)(n / block);
    }
    for (int M = 0; M < 4; M++) {
        const size_t ch = (size_t)256 << M;
        if (n % ch == 0 && n / ch <= 8) {
            *m = M;
            return (int)(n / ch);
        }
    }
    return 0;
}

template <int M, bool ROT>
static void launch_site_reg(int cs, float *r, const float *d, const float *gain, float eps,
                            float *normed, float *rotated, size_t rows, size_t n, size_t block,
                            const float *signs, const tc_act &act) {
    tc_launch(k_site_reg<M, ROT>, dim3((unsigned)cs, (unsigned)rows), dim3(32u << M), 0,
              (unsigned)cs, r, d, gain, eps, normed, rotated, n, signs,
              ROT ? 1.0f / sqrtf((float)block) : 1.0f, act);
}

static bool site_reg(float *r, const float *d, const float *gain, float eps, float *normed,
                     float *rotated, size_t rows, size_t n, size_t block, const float *signs,
                     const tc_act *act) {
    if (tc_ops_old(tc_cur)) return false;
    int M = 0;
    const bool rot = signs != NULL;
    const int cs = site_reg_split(rows, n, block, rot, &M);
    if (!cs || !fr_al16(r) || !fr_al16(d) || !fr_al16(gain) || !fr_al16(normed) ||
        !fr_al16(rotated) || !fr_al16(signs) || (!rot && !normed))
        return false;
    tc_act none = {};
    const tc_act &a = act ? *act : none;
#define SITE_REG(MM)                                                                             \
    case MM:                                                                                     \
        if (rot) launch_site_reg<MM, true>(cs, r, d, gain, eps, normed, rotated, rows, n, block, \
                                           signs, a);                                            \
        else launch_site_reg<MM, false>(cs, r, d, gain, eps, normed, NULL, rows, n, block, NULL, \
                                        a);                                                      \
        break;
    switch (M) {
        SITE_REG(0)
        SITE_REG(1)
        SITE_REG(2)
        SITE_REG(3)
    }
#undef SITE_REG
    return true;
}

static void add_rmsnorm_hadamard(float *r, const float *d, const float *gain, float eps,
                                 float *normed, float *rotated, size_t rows, size_t n,
                                 size_t block, const float *signs, const tc_act *act) {
    if (!rows || !tc_act_ok(act, rows, n)) return;
    bool rot = rotated && signs;
    float *out = normed ? normed : (rot ? rotated : NULL);
    if (!out) {
        if (d) /* only the residual add */
            tc_launch(k_add, dim3(tc_blocks(rows * n, 256)), dim3(256), 0, 1, r, d, rows * n);
        return;
    }
    /* batch 1..64 (decode): the row over a cluster of CTAs (out is normed when it is not
     * rotated); beyond 16 rows the one-CTA-per-row kernels below left most SMs idle
     * (22 us per site at 32 and 64 rows against 6.5 at 8, H200 2026-12-03) */
    if (rows <= 64 && site_reg(r, d, gain, eps, rot ? normed : out, rotated, rows, n, block,
                               rot ? signs : NULL, act))
        return;
    if (rows <= 16 && site_cluster(r, d, gain, eps, rot ? normed : out, rotated, rows, n, block,
                                   rot ? signs : NULL, act))
        return;
    if (rot && n <= ARH_MAX_N && block >= 2 && block <= 8192 && n % block == 0 &&
        (block & (block - 1)) == 0 && rows <= 0x7fffffff) {
        /* one kernel for the whole site */
        if (tc_attr_once((const void *)k_add_rmsnorm_fwht, ARH_MAX_N * 4))
            cudaFuncSetAttribute(k_add_rmsnorm_fwht, cudaFuncAttributeMaxDynamicSharedMemorySize, ARH_MAX_N * 4);
        bool fused = act && n % 128 == 0;
        tc_act none = {};
        tc_launch(k_add_rmsnorm_fwht, dim3((unsigned)rows), dim3(1024), n * sizeof(float), 1, r,
                  d, gain, eps, normed, rotated, n, (int)block, signs, 1.0f / sqrtf((float)block),
                  fused ? *act : none);
        if (act && !fused) tc_quantize(tc_cur, rotated, n, act);
        return;
    }
    tc_launch(k_add_rmsnorm, dim3((unsigned)rows), dim3(256), 0, 1, r, d, gain, eps, out, n);
    if (rot) {
        if (rotated != out) {
            cudaMemcpyAsync(rotated, out, rows * n * sizeof(float), cudaMemcpyDeviceToDevice,
                            tc_cur->stream);
            tc_check_launch();
        }
        bool fused = tc_act_in_fwht(act, rows, n, block, signs);
        tc_fwht(rotated, NULL, rotated, rows, n, block, signs, 0, fused ? act : NULL);
        if (act && !fused) tc_quantize(tc_cur, rotated, n, act);
    } else if (act) tc_quantize(tc_cur, out, n, act);
}

extern "C" void tc_add_rmsnorm_hadamard(tc_ctx *cx, float *r, const float *d, const float *gain, float eps,
                                        float *normed, float *rotated, size_t rows, size_t n,
                                        size_t block, const float *signs) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_NORM);
    add_rmsnorm_hadamard(r, d, gain, eps, normed, rotated, rows, n, block, signs, NULL);
}

extern "C" void tc_add_rmsnorm_hadamard_q(tc_ctx *cx, float *r, const float *d, const float *gain, float eps,
                                          float *normed, float *rotated, size_t rows, size_t n,
                                          size_t block, const float *signs, const tc_act *act) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_NORM);
    add_rmsnorm_hadamard(r, d, gain, eps, normed, rotated, rows, n, block, signs, act);
}

/* --------------------------------------------------------- per-head ops */

/* One warp per (row, head). */
__global__ void k_head_rmsnorm(float *__restrict__ x, size_t rows, size_t stride, int nh, int hd,
                               const float *__restrict__ gain, float eps) {
    tc_pdl_trigger();
    tc_pdl_wait();
    size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (w >= rows * (size_t)nh) return;
    float *v = x + (w / nh) * stride + (w % nh) * (size_t)hd;
    if (hd <= 256) { /* the head in registers: all loads issued at once, one pass */
        float c[8], g[8];
        float ss = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int j = lane + 32 * k;
            c[k] = j < hd ? v[j] : 0.0f;
            g[k] = j < hd ? gain[j] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < 8; k++) ss += c[k] * c[k];
        ss = tc_warp_sum(ss);
        float inv = (float)(1.0 / sqrt((double)ss / hd + (double)eps));
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int j = lane + 32 * k;
            if (j < hd) v[j] = c[k] * inv * g[k];
        }
        return;
    }
    float ss = 0;
    for (int j = lane; j < hd; j += 32) ss += v[j] * v[j];
    ss = tc_warp_sum(ss);
    float inv = (float)(1.0 / sqrt((double)ss / hd + (double)eps));
    for (int j = lane; j < hd; j += 32) v[j] = v[j] * inv * gain[j];
}

extern "C" void tc_head_rmsnorm(tc_ctx *cx, float *x, size_t rows, size_t stride, int n_heads, int hd,
                                const float *gain, float eps) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_NORM);
    size_t warps = rows * (size_t)n_heads;
    if (!warps) return;
    tc_launch(k_head_rmsnorm, dim3(tc_blocks(warps * 32, 64)), dim3(64), 0, 1, x, rows, stride,
              n_heads, hd, gain, eps);
}
