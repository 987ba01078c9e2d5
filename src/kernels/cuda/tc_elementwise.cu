/*
 * tc_elementwise.cu - SwiGLU (+ Hadamard, + the activation quantisation), and the
 * small data movers: row copies, gated-q split, sigmoid gate, the tiled->grouped
 * value-head permute.
 */
#include "kernels/cuda/internal.cuh"

#include <math.h>

__global__ void k_swiglu(const float *__restrict__ g, const float *__restrict__ u,
                         float *__restrict__ o, size_t total) {
    tc_pdl_trigger();
    tc_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    float a = g[i];
    o[i] = a / (1.0f + expf(-a)) * u[i];
}

/* SwiGLU without a transform, quantised in the same kernel: one warp per (row,
 * 128-block), lane l the inputs 4l..4l+3 (16-byte loads and store), then
 * tc_actq_block of the written floats (= tc_quantize's bytes). n % 128 == 0. */
__global__ void __launch_bounds__(256) k_swiglu_q(const float *__restrict__ g,
        const float *__restrict__ u, float *__restrict__ o, size_t rows, size_t n, tc_act act) {
    tc_pdl_trigger();
    tc_pdl_wait();
    const size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31, nb = (int)(n >> 7);
    if (warp >= rows * (size_t)nb) return;
    const size_t row = warp / nb, i = row * n + (warp % nb) * 128 + 4 * lane;
    const float4 a = *(const float4 *)(g + i), b = *(const float4 *)(u + i);
    float v[4] = {a.x, a.y, a.z, a.w};
    const float w[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = v[k] / (1.0f + expf(-v[k])) * w[k];
    *(float4 *)(o + i) = make_float4(v[0], v[1], v[2], v[3]);
    tc_actq_block(v, lane, act.q + row * n * 2, act.sx + row * (size_t)nb,
                  act.corr + row * (size_t)(n >> 5), (int)(warp % nb));
}

static bool al16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static void swiglu_hadamard(const float *gate, const float *up, float *out, size_t rows,
                            size_t n, size_t block, const float *signs, const tc_act *act) {
    size_t total = rows * n;
    if (!total || !tc_act_ok(act, rows, n)) return;
    bool fused = tc_act_in_fwht(act, rows, n, block, signs);
    if (signs) { /* one kernel: SwiGLU in the FWHT's load (and the quantisation after it) */
        tc_fwht(gate, up, out, rows, n, block, signs, 0, fused ? act : NULL);
    } else if (act && !tc_ops_old(tc_cur) && al16(gate) && al16(up) && al16(out)) {
        /* one kernel: SwiGLU and the quantisation (tc_act_ok: n % 128 == 0) */
        tc_launch(k_swiglu_q, dim3(tc_blocks(rows * (n / 128) * 32, 256)), dim3(256), 0, 1, gate,
                  up, out, rows, n, *act);
        fused = true;
    } else {
        tc_launch(k_swiglu, dim3(tc_blocks(total, 256)), dim3(256), 0, 1, gate, up, out, total);
    }
    if (act && !fused) tc_quantize(tc_cur, out, n, act);
}

extern "C" void tc_swiglu_hadamard(tc_ctx *cx, const float *gate, const float *up, float *out, size_t rows,
                                   size_t n, size_t block, const float *signs) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_SWIGLU);
    swiglu_hadamard(gate, up, out, rows, n, block, signs, NULL);
}

extern "C" void tc_swiglu_hadamard_q(tc_ctx *cx, const float *gate, const float *up, float *out, size_t rows,
                                     size_t n, size_t block, const float *signs,
                                     const tc_act *act) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_SWIGLU);
    swiglu_hadamard(gate, up, out, rows, n, block, signs, act);
}

/* ------------------------------------------------------------ data movers */

extern "C" void tc_copy_rows(tc_ctx *cx, float *dst, size_t ds, const float *src, size_t ss, size_t rows,
                             size_t n) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_MOVERS);
    if (!rows || !n) return;
    tc_cur->launches++;
    tc_note((int)cudaMemcpy2DAsync(dst, ds * sizeof(float), src, ss * sizeof(float),
                                   n * sizeof(float), rows, cudaMemcpyDeviceToDevice, tc_cur->stream));
}

__global__ void k_split_heads(const float *__restrict__ src, size_t total, int hd,
                              float *__restrict__ a, float *__restrict__ b) {
    tc_pdl_trigger();
    tc_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* over rows*n_heads*hd */
    if (i >= total) return;
    size_t rh = i / hd, j = i % hd;
    const float *s = src + rh * 2 * hd;
    a[i] = s[j];
    b[i] = s[hd + j];
}

extern "C" void tc_split_heads(tc_ctx *cx, const float *src, size_t rows, int n_heads, int hd, float *a,
                               float *b) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_MOVERS);
    size_t total = rows * (size_t)n_heads * hd;
    if (!total) return;
    tc_launch(k_split_heads, dim3(tc_blocks(total, 256)), dim3(256), 0, 1, src, total, hd, a, b);
}

__global__ void k_mul_sigmoid(float *__restrict__ x, const float *__restrict__ g, size_t total) {
    tc_pdl_trigger();
    tc_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) x[i] *= 1.0f / (1.0f + expf(-g[i]));
}

extern "C" void tc_mul_sigmoid(tc_ctx *cx, float *x, const float *g, size_t rows, size_t n) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_MOVERS);
    size_t total = rows * n;
    if (!total) return;
    tc_launch(k_mul_sigmoid, dim3(tc_blocks(total, 256)), dim3(256), 0, 1, x, g, total);
}

__global__ void k_permute_tg(const float *__restrict__ src, float *__restrict__ dst, size_t total,
                             int nk, int nv, int dv) {
    tc_pdl_trigger();
    tc_pdl_wait();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* over rows*nv*dv (dst order) */
    if (i >= total) return;
    int r = nv / nk;
    size_t t = i / ((size_t)nv * dv);
    int rem = (int)(i % ((size_t)nv * dv));
    int g = rem / dv, e = rem % dv;
    int k = g / r, j = g % r;
    dst[i] = src[(t * nv + (size_t)j * nk + k) * dv + e];
}

extern "C" void tc_permute_tiled_grouped(tc_ctx *cx, const float *src, float *dst, size_t rows, int n_k,
                                         int n_v, int dv) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_MOVERS);
    size_t total = rows * (size_t)n_v * dv;
    if (!total) return;
    tc_launch(k_permute_tg, dim3(tc_blocks(total, 256)), dim3(256), 0, 1, src, dst, total, n_k, n_v,
              dv);
}
