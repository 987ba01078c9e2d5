/*
 * tc_ops.cu - everything in the forward pass that is not a product: Hadamard
 * (FWHT per block in shared memory), RMSNorm + residual, SwiGLU, embedding
 * gather, per-head RMSNorm, NEOX RoPE, causal attention (online softmax, one
 * CTA per query row and head), the GDN block (conv + SiLU, L2 norms, fp32 delta
 * rule with the state column of each thread in registers, gated RMSNorm) and
 * the small data movers. Math mirrors src/model/backend_cpu.c.
 */
#include "kernels/cuda/internal.cuh"

#include <math.h>
#include <string.h>

/* -------------------------------------------------------------- Hadamard */

/* One CTA per (row, block): load (with signs on the forward side), log2(block)
 * butterfly stages in shared memory, scale (signs on the inverse side), store. */
/* src may equal dst (in place); up: SwiGLU fused into the load (v = silu(src)*up). */
__global__ void k_fwht(const float *src, const float *__restrict__ up, float *dst, size_t n,
                       int block, const float *__restrict__ signs, int inverse, float scale,
                       tc_act act) {
    extern __shared__ float sh[];
    const size_t nbr = n / (size_t)block;
    const size_t row = blockIdx.x / nbr, off = (blockIdx.x % nbr) * (size_t)block;
    const float *sp = src + row * n + off;
    float *xp = dst + row * n + off;
    for (int i = threadIdx.x; i < block; i += blockDim.x) {
        float v = sp[i];
        if (up) v = v / (1.0f + expf(-v)) * up[row * n + off + i];
        sh[i] = !inverse && signs ? v * signs[off + i] : v;
    }
    __syncthreads();
    for (int h = 1; h < block; h <<= 1) {
        for (int t = threadIdx.x; t < block / 2; t += blockDim.x) {
            int i = (t / h) * 2 * h + (t % h);
            float a = sh[i], b = sh[i + h];
            sh[i] = a + b;
            sh[i + h] = a - b;
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < block; i += blockDim.x) {
        float v = sh[i] * scale;
        xp[i] = inverse && signs ? v * signs[off + i] : v;
    }
    if (act.q) { /* forward only: quantise the block's 128-input sub-blocks, a warp each */
        const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
        const int nb = (int)(n >> 7);
        for (int w = threadIdx.x >> 5; w < block / 128; w += nw) {
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = sh[w * 128 + lane * 4 + e] * scale;
            tc_actq_block(v, lane, act.q + row * n * 2, act.sx + row * (size_t)nb,
                          act.corr + row * (size_t)(n >> 5), (int)(off / 128) + w);
        }
    }
}

static void fwht2(const float *src, const float *up, float *x, size_t rows, size_t n,
                  size_t block, const float *signs, int inverse, const tc_act *act) {
    if (!rows || !n) return;
    if (block < 2 || block > 8192 || n % block) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    size_t ctas = rows * (n / block);
    int threads = block >= 1024 ? 512 : (int)(block / 2 < 32 ? 32 : block / 2);
    size_t smem = block * sizeof(float);
    static bool attr;
    if (!attr) {
        cudaFuncSetAttribute(k_fwht, cudaFuncAttributeMaxDynamicSharedMemorySize, 8192 * 4);
        attr = true;
    }
    for (size_t c0 = 0; c0 < ctas; c0 += 1u << 30) {
        /* rows are whole in each launch when ctas < 2^30 (always, in practice) */
        tc_act none = {};
        k_fwht<<<(unsigned)ctas, threads, smem, tc_stream>>>(src, up, x, n, (int)block, signs, inverse,
                                                            1.0f / sqrtf((float)block),
                                                            act ? *act : none);
        tc_check_launch();
        break;
    }
}

static void fwht(float *x, size_t rows, size_t n, size_t block, const float *signs, int inverse,
                 const tc_act *act = NULL) {
    fwht2(x, NULL, x, rows, n, block, signs, inverse, act);
}

extern "C" void tc_hadamard(float *x, size_t rows, size_t n, size_t block, const float *signs,
                            int inverse) {
    TC_PROF(TC_FAM_HADAMARD);
    if (signs) fwht(x, rows, n, block, signs, inverse);
}

/* ---------------------------------------------------------- norms, SwiGLU */

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

/* act usable from the FWHT kernel: forward, rows x n, block a multiple of 128 */
static bool act_in_fwht(const tc_act *act, size_t rows, size_t n, size_t block, const float *signs) {
    return act && signs && block % 128 == 0 && (size_t)act->k == n && act->batch == rows;
}

static bool act_ok(const tc_act *act, size_t rows, size_t n) {
    if (!act) return true;
    if ((size_t)act->k != n || act->batch != rows || n % 128) {
        tc_note(TC_ERR_UNSUPPORTED);
        return false;
    }
    return true;
}

static void add_rmsnorm_hadamard(float *r, const float *d, const float *gain, float eps,
                                 float *normed, float *rotated, size_t rows, size_t n,
                                 size_t block, const float *signs, const tc_act *act) {
    if (!rows || !act_ok(act, rows, n)) return;
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
        bool fused = act_in_fwht(act, rows, n, block, signs);
        fwht(rotated, rows, n, block, signs, 0, fused ? act : NULL);
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
    if (!total || !act_ok(act, rows, n)) return;
    bool fused = act_in_fwht(act, rows, n, block, signs);
    if (signs) { /* one kernel: SwiGLU in the FWHT's load (and the quantisation after it) */
        fwht2(gate, up, out, rows, n, block, signs, 0, fused ? act : NULL);
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

/* ------------------------------------------------------------- embedding */

__global__ void k_embed(int kind, const uint8_t *__restrict__ emb, size_t rb, int64_t K,
                        const int32_t *__restrict__ ids, float *__restrict__ out) {
    const uint8_t *row = emb + (size_t)ids[blockIdx.y] * rb;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < K;
         j += (int64_t)gridDim.x * blockDim.x)
        out[(size_t)blockIdx.y * K + j] = tc_elem(kind, row, j);
}

/* TC_TERN128R rows: codes [n][K/4], then fp16 scales [n][K/128]. */
__global__ void k_embed_r(const uint8_t *__restrict__ codes, const unsigned short *__restrict__ sc,
                          int64_t K, const int32_t *__restrict__ ids, float *__restrict__ out) {
    const size_t row = (size_t)ids[blockIdx.y];
    const uint8_t *cr = codes + row * (size_t)(K >> 2);
    const unsigned short *sr = sc + row * (size_t)(K >> 7);
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < K;
         j += (int64_t)gridDim.x * blockDim.x) {
        int c = (cr[j >> 2] >> (2 * (j & 3))) & 3;
        out[(size_t)blockIdx.y * K + j] = (float)(c - 1) * __half2float(__ushort_as_half(sr[j >> 7]));
    }
}

extern "C" void tc_embed(const tc_mat *emb, const int32_t *ids_host, size_t n, float *out,
                         size_t block, const float *signs) {
    TC_PROF(TC_FAM_EMBED);
    if (!n) return;
    const int32_t *ids = tc_dyn_ids; /* capturing a step graph: the token is a device word */
    if (!ids || n != 1) {
        int32_t *dids = (int32_t *)tc_workspace(1, n * sizeof(int32_t));
        int32_t *pin = tc_pinned_ids(n);
        if (!dids || !pin) return;
        /* the previous chunk ended with a sync: nothing still reads the pinned ids */
        memcpy(pin, ids_host, n * sizeof(int32_t));
        tc_launch_count++;
        tc_note((int)cudaMemcpyAsync(dids, pin, n * sizeof(int32_t), cudaMemcpyHostToDevice,
                                     tc_stream));
        ids = dids;
    }
    for (size_t i0 = 0; i0 < n; i0 += 65535) {
        unsigned m = (unsigned)(n - i0 < 65535 ? n - i0 : 65535);
        dim3 grid(tc_blocks((size_t)emb->k, 256) < 64 ? tc_blocks((size_t)emb->k, 256) : 64, m);
        if (emb->kind == TC_TERN128R)
            k_embed_r<<<grid, 256, 0, tc_stream>>>(
                emb->data, (const unsigned short *)(emb->data + (size_t)emb->n * (size_t)(emb->k / 4)),
                emb->k, ids + i0, out + i0 * (size_t)emb->k);
        else
            k_embed<<<grid, 256, 0, tc_stream>>>(emb->kind, emb->data, emb->row_bytes, emb->k,
                                                 ids + i0, out + i0 * (size_t)emb->k);
        tc_check_launch();
    }
    if (signs) fwht(out, n, (size_t)emb->k, block, signs, 1);
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

__global__ void k_rope(float *__restrict__ x, size_t rows, size_t stride, int nh, int hd, int rot,
                       int pos0, const int *__restrict__ dpos, float theta) {
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
    k_rope<<<tc_blocks(total, 128), 128, 0, tc_stream>>>(x, rows, stride, n_heads, hd, rot, pos0,
                                                         tc_dyn_pos, theta);
    tc_check_launch();
}

/* ------------------------------------------------------------- attention */

#define ATT_WARPS 4
#define ATT_EPL 8 /* head_dim <= 256 */

/* One CTA per (query row, head): each warp walks positions w, w+4, ... with an
 * online softmax (running max, sum, weighted V in registers), then the warps'
 * partial states are merged. */
__global__ void __launch_bounds__(ATT_WARPS * 32) k_attention(const float *__restrict__ q, size_t qs,
                            const float *__restrict__ kc, const float *__restrict__ vc,
                            float *__restrict__ out, int pos0, const int *__restrict__ dpos,
                            int nh, int nkv, int hd, float scale) {
    if (dpos) pos0 = *dpos;
    __shared__ float s_m[ATT_WARPS], s_l[ATT_WARPS];
    __shared__ float s_acc[ATT_WARPS][ATT_EPL * 32];
    const int i = blockIdx.x, h = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kvh = h / (nh / nkv);
    const size_t kvw = (size_t)nkv * hd;
    const float *qp = q + (size_t)i * qs + (size_t)h * hd;
    float qv[ATT_EPL], acc[ATT_EPL];
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) {
        int j = lane + 32 * e;
        qv[e] = j < hd ? qp[j] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int np = pos0 + i + 1;
    for (int p = warp; p < np; p += ATT_WARPS) {
        const float *kp = kc + (size_t)p * kvw + (size_t)kvh * hd;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < ATT_EPL; e++) {
            int j = lane + 32 * e;
            if (j < hd) s = fmaf(qv[e], kp[j], s);
        }
        s = tc_warp_sum(s) * scale;
        float mn = fmaxf(m, s);
        float c = expf(m - mn), pw = expf(s - mn);
        l = l * c + pw;
        const float *vp = vc + (size_t)p * kvw + (size_t)kvh * hd;
#pragma unroll
        for (int e = 0; e < ATT_EPL; e++) {
            int j = lane + 32 * e;
            if (j < hd) acc[e] = acc[e] * c + pw * vp[j];
        }
        m = mn;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) s_acc[warp][lane + 32 * e] = acc[e];
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, s_m[w]);
    float L = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++)
        if (s_l[w] > 0) L += s_l[w] * expf(s_m[w] - M);
    float *op = out + (size_t)i * nh * hd + (size_t)h * hd;
    for (int j = threadIdx.x; j < hd; j += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (s_l[w] > 0) v += s_acc[w][j] * expf(s_m[w] - M);
        op[j] = v / L;
    }
}

extern "C" void tc_attention(const float *q, size_t q_stride, const float *kcache,
                             const float *vcache, float *out, int rows, int pos0, int n_head,
                             int n_head_kv, int head_dim, float scale) {
    TC_PROF(TC_FAM_ATTENTION);
    if (rows <= 0) return;
    if (head_dim > ATT_EPL * 32 || n_head > 65535) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    dim3 grid((unsigned)rows, (unsigned)n_head);
    k_attention<<<grid, ATT_WARPS * 32, 0, tc_stream>>>(q, q_stride, kcache, vcache, out, pos0,
                                                        tc_dyn_pos, n_head, n_head_kv, head_dim,
                                                        scale);
    tc_check_launch();
}

/* ------------------------------------------------ split-K decode attention */

#define ATT_SPLIT 256

__global__ void __launch_bounds__(ATT_WARPS * 32) k_attn_split(const float *__restrict__ q,
        const float *__restrict__ kc, const float *__restrict__ vc, float *__restrict__ part,
        int pos0, const int *__restrict__ dpos, int nh, int nkv, int hd, float scale, int splits) {
    if (dpos) pos0 = *dpos;
    __shared__ float s_m[ATT_WARPS], s_l[ATT_WARPS];
    __shared__ float s_acc[ATT_WARPS][ATT_EPL * 32];
    const int h = blockIdx.x, sp = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int np = pos0 + 1, p0 = sp * ATT_SPLIT, p1 = min(np, p0 + ATT_SPLIT);
    float *pp = part + ((size_t)h * splits + sp) * (size_t)(hd + 2);
    if (p0 >= np) {
        if (threadIdx.x == 0) pp[1] = 0.0f; /* l = 0: nothing here */
        return;
    }
    const int kvh = h / (nh / nkv);
    const size_t kvw = (size_t)nkv * hd;
    const float *qp = q + (size_t)h * hd;
    float qv[ATT_EPL], acc[ATT_EPL];
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) {
        int j = lane + 32 * e;
        qv[e] = j < hd ? qp[j] : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int p = p0 + warp; p < p1; p += ATT_WARPS) {
        const float *kp = kc + (size_t)p * kvw + (size_t)kvh * hd;
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < ATT_EPL; e++) {
            int j = lane + 32 * e;
            if (j < hd) s = fmaf(qv[e], kp[j], s);
        }
        s = tc_warp_sum(s) * scale;
        float mn = fmaxf(m, s);
        float c = expf(m - mn), pw = expf(s - mn);
        l = l * c + pw;
        const float *vp = vc + (size_t)p * kvw + (size_t)kvh * hd;
#pragma unroll
        for (int e = 0; e < ATT_EPL; e++) {
            int j = lane + 32 * e;
            if (j < hd) acc[e] = acc[e] * c + pw * vp[j];
        }
        m = mn;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) s_acc[warp][lane + 32 * e] = acc[e];
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++)
        if (s_l[w] > 0) M = fmaxf(M, s_m[w]);
    float L = 0.0f;
    for (int w = 0; w < ATT_WARPS; w++)
        if (s_l[w] > 0) L += s_l[w] * expf(s_m[w] - M);
    for (int j = threadIdx.x; j < hd; j += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (s_l[w] > 0) v += s_acc[w][j] * expf(s_m[w] - M);
        pp[2 + j] = v;
    }
    if (threadIdx.x == 0) {
        pp[0] = M;
        pp[1] = L;
    }
}

/* CTA per head: merge the splits' (m, l, acc), then the sigmoid gate. */
__global__ void k_attn_merge(const float *__restrict__ part, const float *__restrict__ gate,
                             float *__restrict__ out, int pos0, const int *__restrict__ dpos,
                             int hd, int splits) {
    if (dpos) pos0 = *dpos;
    const int h = blockIdx.x;
    const int used = min(splits, pos0 / ATT_SPLIT + 1);
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
        if (gate) v *= 1.0f / (1.0f + expf(-gate[(size_t)h * hd + j]));
        out[(size_t)h * hd + j] = v;
    }
}

extern "C" void tc_attention_decode(const float *q, const float *kcache, const float *vcache,
                                    const float *gate, float *out, int pos0, int max_len,
                                    int n_head, int n_head_kv, int head_dim, float scale) {
    TC_PROF(TC_FAM_ATTENTION);
    if (head_dim > ATT_EPL * 32 || head_dim < 1 || n_head < 1 || n_head_kv < 1 ||
        n_head % n_head_kv || max_len < 1 || (!tc_dyn_pos && (pos0 < 0 || pos0 >= max_len))) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int splits = (max_len + ATT_SPLIT - 1) / ATT_SPLIT;
    if (splits > 65535) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    float *part = (float *)tc_workspace(2, (size_t)n_head * splits * (head_dim + 2) * sizeof(float));
    if (!part) return;
    dim3 grid((unsigned)n_head, (unsigned)splits);
    k_attn_split<<<grid, ATT_WARPS * 32, 0, tc_stream>>>(q, kcache, vcache, part, pos0, tc_dyn_pos,
                                                         n_head, n_head_kv, head_dim, scale,
                                                         splits);
    tc_check_launch();
    k_attn_merge<<<(unsigned)n_head, (head_dim + 31) / 32 * 32, 0, tc_stream>>>(
        part, gate, out, pos0, tc_dyn_pos, head_dim, splits);
    tc_check_launch();
}

/* ------------------------------------------------------------------- GDN */

__device__ __forceinline__ float tc_silu(float x) { return x / (1.0f + expf(-x)); }

/* One thread per channel: causal depthwise conv over (state ++ rows), SiLU,
 * then the state keeps the last K-1 inputs. */
__global__ void k_gdn_conv(const float *__restrict__ qkv, const float *__restrict__ w,
                           float *__restrict__ state, float *__restrict__ work, int C, int K,
                           int T) {
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    const float *wc = w + (size_t)ch * K;
    for (int t = 0; t < T; t++) {
        float s = 0;
        for (int i = 0; i < K; i++) {
            int src = t - (K - 1) + i;
            float x = src >= 0 ? qkv[(size_t)src * C + ch] : state[(size_t)(K - 1 + src) * C + ch];
            s += wc[i] * x;
        }
        work[(size_t)t * C + ch] = tc_silu(s);
    }
    for (int i = 0; i < K - 1; i++) {
        int src = T - (K - 1) + i;
        float x = src >= 0 ? qkv[(size_t)src * C + ch] : state[(size_t)(K - 1 + src) * C + ch];
        state[(size_t)i * C + ch] = x;
    }
}

/* One warp per (row, q/k head): L2 norm (q heads also scaled by 1/sqrt(dk)). */
__global__ void k_gdn_l2(float *__restrict__ work, int C, int T, int nk, int dk) {
    size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (w >= (size_t)T * 2 * nk) return;
    size_t t = w / (2 * nk), hk = w % (2 * nk);
    float *v = work + t * C + hk * dk;
    float ss = 0;
    for (int j = lane; j < dk; j += 32) ss += v[j] * v[j];
    ss = tc_warp_sum(ss);
    float inv = (float)(1.0 / sqrt((double)ss + 1e-6));
    if (hk < (size_t)nk) inv *= 1.0f / sqrtf((float)dk);
    for (int j = lane; j < dk; j += 32) v[j] *= inv;
}

/* One CTA per value head p, thread j owns state column S[:, j] (KMAX >= dk, in
 * registers; dv <= 256 threads) over the chunk's rows:
 *   S *= decay; kv = S^T k; d = (v - kv)*beta; S += k d^T; o = S^T q
 *   (o = sq + (k.q) d with sq = (decayed S)^T q), out = rmsnorm(o)*norm*silu(z). */
template <int KMAX>
__global__ void __launch_bounds__(256) k_gdn_rec(tc_gdn_args a, int C) {
    extern __shared__ float sm[];
    float *sq_ = sm, *sk = sm + KMAX, *red = sm + 2 * KMAX;
    const int p = blockIdx.x, j = threadIdx.x;
    const int dk = a.dk, dv = a.dv, nk = a.n_k, nv = a.n_v, r = nv / nk;
    const int kh = a.v_tiled ? p % nk : p / r;
    const bool act = j < dv;
    float S[KMAX];
    float *Sg = a.state + (size_t)p * dk * dv;
#pragma unroll
    for (int i = 0; i < KMAX; i++) S[i] = act && i < dk ? Sg[(size_t)i * dv + j] : 0.0f;
    const int nw = (blockDim.x + 31) >> 5;
    for (int t = 0; t < a.rows; t++) {
        const float *row = a.work + (size_t)t * C;
        for (int i = j; i < dk; i += blockDim.x) {
            sq_[i] = row[(size_t)kh * dk + i];
            sk[i] = row[(size_t)nk * dk + (size_t)kh * dk + i];
        }
        __syncthreads();
        float x = a.a[(size_t)t * nv + p] + a.dt_bias[p];
        float sp = x > 20.0f ? x : log1pf(expf(x));
        float decay = expf(a.ssm_a[p] * sp);
        float beta = 1.0f / (1.0f + expf(-a.b[(size_t)t * nv + p]));
        float kv = 0, sq = 0, kq = 0;
#pragma unroll
        for (int i = 0; i < KMAX; i++) {
            if (i < dk) {
                float s = S[i] * decay;
                S[i] = s;
                kv = fmaf(s, sk[i], kv);
                sq = fmaf(s, sq_[i], sq);
                kq = fmaf(sk[i], sq_[i], kq);
            }
        }
        float v = act ? row[(size_t)2 * nk * dk + (size_t)p * dv + j] : 0.0f;
        float d = (v - kv) * beta;
#pragma unroll
        for (int i = 0; i < KMAX; i++)
            if (i < dk) S[i] = fmaf(sk[i], d, S[i]);
        float o = act ? sq + kq * d : 0.0f;
        /* gated RMSNorm over the dv outputs */
        float ss = tc_warp_sum(o * o);
        if ((j & 31) == 0) red[j >> 5] = ss;
        __syncthreads();
        float tot = 0;
        for (int w = 0; w < nw; w++) tot += red[w];
        if (act) {
            float inv = 1.0f / sqrtf(tot / (float)dv + a.eps);
            size_t oi = (size_t)t * nv * dv + (size_t)p * dv + j;
            a.out[oi] = o * inv * a.norm[j] * tc_silu(a.z[oi]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < KMAX; i++)
        if (act && i < dk) Sg[(size_t)i * dv + j] = S[i];
}

template <int KMAX>
static void gdn_rec(const tc_gdn_args *a, int C) {
    int threads = (a->dv + 31) / 32 * 32;
    size_t smem = (2 * KMAX + 32) * sizeof(float);
    k_gdn_rec<KMAX><<<a->n_v, threads, smem, tc_stream>>>(*a, C);
    tc_check_launch();
}

extern "C" void tc_gdn(const tc_gdn_args *a) {
    TC_PROF(TC_FAM_GDN);
    if (a->rows <= 0) return;
    const int C = 2 * a->n_k * a->dk + a->n_v * a->dv;
    if (a->dk > 128 || a->dv > 256) { /* state column in registers: <= 256 threads of ~170 */
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    k_gdn_conv<<<tc_blocks((size_t)C, 128), 128, 0, tc_stream>>>(a->qkv, a->conv_w, a->conv_state,
                                                                 a->work, C, a->conv_k, a->rows);
    tc_check_launch();
    size_t warps = (size_t)a->rows * 2 * a->n_k;
    k_gdn_l2<<<tc_blocks(warps * 32, 256), 256, 0, tc_stream>>>(a->work, C, a->rows, a->n_k, a->dk);
    tc_check_launch();
    tc_gdn_args b = *a;
    if (a->dk <= 32) gdn_rec<32>(&b, C);
    else if (a->dk <= 64) gdn_rec<64>(&b, C);
    else gdn_rec<128>(&b, C);
}

/* ------------------------------------------------ GDN decode step (fused) */

/* CTA (segment g, session i), thread t = channel within the segment: segments
 * 0..nk-1 are q heads, nk..2nk-1 k heads (dk channels each), then the nv value
 * heads (dv channels each). Each channel's conv state is owned by one thread. */
__global__ void __launch_bounds__(256) k_gdn_step_conv(tc_gdn_step_args a, int C) {
    __shared__ float red[8];
    const int g = blockIdx.x, i = blockIdx.y, t = threadIdx.x;
    const int nk = a.n_k, dk = a.dk, K = a.conv_k;
    const bool qk = g < 2 * nk;
    const int width = qk ? dk : a.dv;
    const int ch = qk ? g * dk + t : 2 * nk * dk + (g - 2 * nk) * a.dv + t;
    const bool act = t < width;
    float v = 0.0f;
    if (act) {
        float *cs = a.conv_state[i];
        const float *wc = a.conv_w + (size_t)ch * K;
        const float xin = a.qkv[(size_t)i * a.qkv_stride + ch];
        float s = 0.0f;
        for (int j = 0; j < K - 1; j++) s += wc[j] * cs[(size_t)j * C + ch];
        s += wc[K - 1] * xin;
        for (int j = 0; j + 1 < K - 1; j++) cs[(size_t)j * C + ch] = cs[(size_t)(j + 1) * C + ch];
        if (K > 1) cs[(size_t)(K - 2) * C + ch] = xin;
        v = s / (1.0f + expf(-s));
    }
    if (qk) {
        float ss = tc_warp_sum(v * v);
        if ((t & 31) == 0) red[t >> 5] = ss;
        __syncthreads();
        float tot = 0.0f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += red[w];
        float inv = (float)(1.0 / sqrt((double)tot + 1e-6));
        if (g < nk) inv *= 1.0f / sqrtf((float)dk);
        v *= inv;
    }
    if (act) a.work[(size_t)i * C + ch] = v;
}

/* CTA (value head p, session i); thread j owns state column S[:, j]. */
template <int KMAX>
__global__ void __launch_bounds__(256) k_gdn_step_rec(tc_gdn_step_args a, int C) {
    __shared__ float sq_[KMAX], sk[KMAX], red[8];
    const int p = blockIdx.x, i = blockIdx.y, j = threadIdx.x;
    const int dk = a.dk, dv = a.dv, nk = a.n_k, nv = a.n_v, r = nv / nk;
    const int kh = a.v_tiled ? p % nk : p / r;
    const bool act = j < dv;
    const float *row = a.work + (size_t)i * C;
    for (int e = j; e < dk; e += blockDim.x) {
        sq_[e] = row[(size_t)kh * dk + e];
        sk[e] = row[(size_t)nk * dk + (size_t)kh * dk + e];
    }
    float *Sg = a.state[i] + (size_t)p * dk * dv;
    float S[KMAX];
#pragma unroll
    for (int e = 0; e < KMAX; e++) S[e] = act && e < dk ? Sg[(size_t)e * dv + j] : 0.0f;
    __syncthreads();
    const float x = a.a[(size_t)i * a.ab_stride + p] + a.dt_bias[p];
    const float sp = x > 20.0f ? x : log1pf(expf(x));
    const float decay = expf(a.ssm_a[p] * sp);
    const float beta = 1.0f / (1.0f + expf(-a.b[(size_t)i * a.ab_stride + p]));
    float kv = 0.0f, sq = 0.0f, kq = 0.0f;
#pragma unroll
    for (int e = 0; e < KMAX; e++)
        if (e < dk) {
            float s = S[e] * decay;
            S[e] = s;
            kv = fmaf(s, sk[e], kv);
            sq = fmaf(s, sq_[e], sq);
            kq = fmaf(sk[e], sq_[e], kq);
        }
    const float vv = act ? row[(size_t)2 * nk * dk + (size_t)p * dv + j] : 0.0f;
    const float d = (vv - kv) * beta;
#pragma unroll
    for (int e = 0; e < KMAX; e++)
        if (e < dk) S[e] = fmaf(sk[e], d, S[e]);
    const float o = act ? sq + kq * d : 0.0f;
    float ss = tc_warp_sum(o * o);
    if ((j & 31) == 0) red[j >> 5] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += red[w];
    if (act) {
        const float inv = 1.0f / sqrtf(tot / (float)dv + a.eps);
        const float zz = a.z[(size_t)i * a.z_stride + (size_t)p * dv + j];
        a.out[(size_t)i * a.out_stride + (size_t)p * dv + j] = o * inv * a.norm[j] * tc_silu(zz);
#pragma unroll
        for (int e = 0; e < KMAX; e++)
            if (e < dk) Sg[(size_t)e * dv + j] = S[e];
    }
}

extern "C" void tc_gdn_step(const tc_gdn_step_args *a) {
    TC_PROF(TC_FAM_GDN);
    if (a->n <= 0) return;
    if (a->dk > 128 || a->dv > 256 || a->dk < 1 || a->dv < 1 || a->conv_k < 1 || a->n > 65535 ||
        a->n_k < 1 || a->n_v % a->n_k) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int C = 2 * a->n_k * a->dk + a->n_v * a->dv;
    const int w = a->dk > a->dv ? a->dk : a->dv;
    dim3 g1((unsigned)(2 * a->n_k + a->n_v), (unsigned)a->n);
    k_gdn_step_conv<<<g1, (w + 31) / 32 * 32, 0, tc_stream>>>(*a, C);
    tc_check_launch();
    dim3 g2((unsigned)a->n_v, (unsigned)a->n);
    const int th = (a->dv + 31) / 32 * 32;
    if (a->dk <= 32) k_gdn_step_rec<32><<<g2, th, 0, tc_stream>>>(*a, C);
    else if (a->dk <= 64) k_gdn_step_rec<64><<<g2, th, 0, tc_stream>>>(*a, C);
    else k_gdn_step_rec<128><<<g2, th, 0, tc_stream>>>(*a, C);
    tc_check_launch();
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

__global__ void k_kv_store(float *__restrict__ kc, float *__restrict__ vc,
                           const float *__restrict__ k, const float *__restrict__ v, size_t kvw,
                           size_t total, int pos0, const int *__restrict__ dpos) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; /* over rows*kvw */
    if (i >= total) return;
    if (dpos) pos0 = *dpos;
    size_t o = (size_t)pos0 * kvw + i;
    kc[o] = k[i];
    vc[o] = v[i];
}

extern "C" void tc_kv_store(float *kc, float *vc, const float *k, const float *v, size_t kvw,
                            size_t rows, int pos0) {
    TC_PROF(TC_FAM_MOVERS);
    size_t total = rows * kvw;
    if (!total) return;
    k_kv_store<<<tc_blocks(total, 256), 256, 0, tc_stream>>>(kc, vc, k, v, kvw, total, pos0,
                                                             tc_dyn_pos);
    tc_check_launch();
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
