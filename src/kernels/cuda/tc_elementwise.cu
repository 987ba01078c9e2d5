/*
 * tc_elementwise.cu - SwiGLU (+ Hadamard), and the small data movers: row copies,
 * gated-q split, sigmoid gate, the tiled->grouped value-head permute.
 */
#include "kernels/cuda/internal.cuh"

#include <math.h>

__global__ void k_swiglu(const float *__restrict__ g, const float *__restrict__ u,
                         float *__restrict__ o, size_t total) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    float a = g[i];
    o[i] = a / (1.0f + expf(-a)) * u[i];
}

static void swiglu_hadamard(const float *gate, const float *up, float *out, size_t rows,
                            size_t n, size_t block, const float *signs, const tc_act *act) {
    size_t total = rows * n;
    if (!total || !tc_act_ok(act, rows, n)) return;
    bool fused = tc_act_in_fwht(act, rows, n, block, signs);
    if (signs) { /* one kernel: SwiGLU in the FWHT's load (and the quantisation after it) */
        tc_fwht(gate, up, out, rows, n, block, signs, 0, fused ? act : NULL);
    } else {
        k_swiglu<<<tc_blocks(total, 256), 256, 0, tc_stream>>>(gate, up, out, total);
        tc_check_launch();
    }
    if (act && !fused) tc_quantize(out, n, act);
}

extern "C" void tc_swiglu_hadamard(const float *gate, const float *up, float *out, size_t rows,
                                   size_t n, size_t block, const float *signs) {
    TC_PROF(TC_FAM_SWIGLU);
    swiglu_hadamard(gate, up, out, rows, n, block, signs, NULL);
}

extern "C" void tc_swiglu_hadamard_q(const float *gate, const float *up, float *out, size_t rows,
                                     size_t n, size_t block, const float *signs,
                                     const tc_act *act) {
    TC_PROF(TC_FAM_SWIGLU);
    swiglu_hadamard(gate, up, out, rows, n, block, signs, act);
}

/* ------------------------------------------------------------ data movers */

extern "C" void tc_copy_rows(float *dst, size_t ds, const float *src, size_t ss, size_t rows,
                             size_t n) {
    TC_PROF(TC_FAM_MOVERS);
    if (!rows || !n) return;
    tc_launch_count++;
    tc_note((int)cudaMemcpy2DAsync(dst, ds * sizeof(float), src, ss * sizeof(float),
                                   n * sizeof(float), rows, cudaMemcpyDeviceToDevice, tc_stream));
}

__global__ void k_split_heads(const float *__restrict__ src, size_t total, int hd,
                              float *__restrict__ a, float *__restrict__ b) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* over rows*n_heads*hd */
    if (i >= total) return;
    size_t rh = i / hd, j = i % hd;
    const float *s = src + rh * 2 * hd;
    a[i] = s[j];
    b[i] = s[hd + j];
}

extern "C" void tc_split_heads(const float *src, size_t rows, int n_heads, int hd, float *a,
                               float *b) {
    TC_PROF(TC_FAM_MOVERS);
    size_t total = rows * (size_t)n_heads * hd;
    if (!total) return;
    k_split_heads<<<tc_blocks(total, 256), 256, 0, tc_stream>>>(src, total, hd, a, b);
    tc_check_launch();
}

__global__ void k_mul_sigmoid(float *__restrict__ x, const float *__restrict__ g, size_t total) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) x[i] *= 1.0f / (1.0f + expf(-g[i]));
}

extern "C" void tc_mul_sigmoid(float *x, const float *g, size_t rows, size_t n) {
    TC_PROF(TC_FAM_MOVERS);
    size_t total = rows * n;
    if (!total) return;
    k_mul_sigmoid<<<tc_blocks(total, 256), 256, 0, tc_stream>>>(x, g, total);
    tc_check_launch();
}

__global__ void k_permute_tg(const float *__restrict__ src, float *__restrict__ dst, size_t total,
                             int nk, int nv, int dv) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* over rows*nv*dv (dst order) */
    if (i >= total) return;
    int r = nv / nk;
    size_t t = i / ((size_t)nv * dv);
    int rem = (int)(i % ((size_t)nv * dv));
    int g = rem / dv, e = rem % dv;
    int k = g / r, j = g % r;
    dst[i] = src[(t * nv + (size_t)j * nk + k) * dv + e];
}

extern "C" void tc_permute_tiled_grouped(const float *src, float *dst, size_t rows, int n_k,
                                         int n_v, int dv) {
    TC_PROF(TC_FAM_MOVERS);
    size_t total = rows * (size_t)n_v * dv;
    if (!total) return;
    k_permute_tg<<<tc_blocks(total, 256), 256, 0, tc_stream>>>(src, dst, total, n_k, n_v, dv);
    tc_check_launch();
}
