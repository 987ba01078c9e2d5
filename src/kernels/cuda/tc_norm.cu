/*
 * tc_norm.cu - RMSNorm sites: residual add + RMSNorm (+ the forward Hadamard
 * transform and the activation quantisation in the same kernel), and the
 * per-head RMSNorm (q/k norms). Math mirrors src/model/backend_cpu.c.
 */
#include "kernels/cuda/internal.cuh"

#include <math.h>

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

static void add_rmsnorm_hadamard(float *r, const float *d, const float *gain, float eps,
                                 float *normed, float *rotated, size_t rows, size_t n,
                                 size_t block, const float *signs, const tc_act *act) {
    if (!rows || !tc_act_ok(act, rows, n)) return;
    bool rot = rotated && signs;
    float *out = normed ? normed : (rot ? rotated : NULL);
    if (!out) {
        if (d) { /* only the residual add */
            k_add<<<tc_blocks(rows * n, 256), 256, 0, tc_stream>>>(r, d, rows * n);
            tc_check_launch();
        }
        return;
    }
    if (rot && n <= ARH_MAX_N && block >= 2 && block <= 8192 && n % block == 0 &&
        (block & (block - 1)) == 0 && rows <= 0x7fffffff) {
        /* one kernel for the whole site */
        static bool attr;
        if (!attr) {
            cudaFuncSetAttribute(k_add_rmsnorm_fwht, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 ARH_MAX_N * 4);
            attr = true;
        }
        bool fused = act && n % 128 == 0;
        tc_act none = {};
        k_add_rmsnorm_fwht<<<(unsigned)rows, 1024, n * sizeof(float), tc_stream>>>(
            r, d, gain, eps, normed, rotated, n, (int)block, signs, 1.0f / sqrtf((float)block),
            fused ? *act : none);
        tc_check_launch();
        if (act && !fused) tc_quantize(rotated, n, act);
        return;
    }
    k_add_rmsnorm<<<(unsigned)rows, 256, 0, tc_stream>>>(r, d, gain, eps, out, n);
    tc_check_launch();
    if (rot) {
        if (rotated != out) {
            cudaMemcpyAsync(rotated, out, rows * n * sizeof(float), cudaMemcpyDeviceToDevice,
                            tc_stream);
            tc_check_launch();
        }
        bool fused = tc_act_in_fwht(act, rows, n, block, signs);
        tc_fwht(rotated, NULL, rotated, rows, n, block, signs, 0, fused ? act : NULL);
        if (act && !fused) tc_quantize(rotated, n, act);
    } else if (act) tc_quantize(out, n, act);
}

extern "C" void tc_add_rmsnorm_hadamard(float *r, const float *d, const float *gain, float eps,
                                        float *normed, float *rotated, size_t rows, size_t n,
                                        size_t block, const float *signs) {
    TC_PROF(TC_FAM_NORM);
    add_rmsnorm_hadamard(r, d, gain, eps, normed, rotated, rows, n, block, signs, NULL);
}

extern "C" void tc_add_rmsnorm_hadamard_q(float *r, const float *d, const float *gain, float eps,
                                          float *normed, float *rotated, size_t rows, size_t n,
                                          size_t block, const float *signs, const tc_act *act) {
    TC_PROF(TC_FAM_NORM);
    add_rmsnorm_hadamard(r, d, gain, eps, normed, rotated, rows, n, block, signs, act);
}

/* --------------------------------------------------------- per-head ops */

/* One warp per (row, head). */
__global__ void k_head_rmsnorm(float *__restrict__ x, size_t rows, size_t stride, int nh, int hd,
                               const float *__restrict__ gain, float eps) {
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

extern "C" void tc_head_rmsnorm(float *x, size_t rows, size_t stride, int n_heads, int hd,
                                const float *gain, float eps) {
    TC_PROF(TC_FAM_NORM);
    size_t warps = rows * (size_t)n_heads;
    if (!warps) return;
    k_head_rmsnorm<<<tc_blocks(warps * 32, 64), 64, 0, tc_stream>>>(x, rows, stride, n_heads, hd,
                                                                      gain, eps);
    tc_check_launch();
}
