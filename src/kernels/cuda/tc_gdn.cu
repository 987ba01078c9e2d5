/*
 * tc_gdn.cu - the Gated DeltaNet block: chunk path (conv + SiLU, L2 norms, fp32
 * delta rule with the state column of each thread in registers, gated RMSNorm)
 * and the fused decode step for n sessions.
 */
#include "kernels/cuda/internal.cuh"

#include <cooperative_groups.h>
#include <math.h>

namespace cg = cooperative_groups;

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

/* The output stage of the decode step for CTA g (the row's output slot g: value
 * head p = g, or with out_grouped the head whose grouped-order slot g is), after
 * the gated norm: y is output j of the slot (0 for j >= dv). XF: the forward
 * Hadamard of the row in blocks of a.block: stages below min(block, dv) inside the
 * CTA (warp shuffles, then shared memory), the stages across the block/dv CTAs of
 * a cluster through distributed shared memory (each thread reads its index from
 * every CTA of the cluster, then the same butterflies in registers): the same
 * float operations in the same order as tc_fwht. Then the row is written and, when
 * a.act.q, its 128-blocks quantised (as tc_quantize of the written floats). */
template <bool XF>
__device__ __forceinline__ void gdn_step_out(const tc_gdn_step_args &a, int g, int i, int j,
                                             float y, float *xo) {
    const int dv = a.dv;
    const bool act = j < dv;
    if (XF) {
        const int B = a.block, lb = B < dv ? B : dv;
        if (act) y *= a.signs[(size_t)g * dv + j];
        int h = 1;
        if (dv % 32 == 0)
            for (; h < lb && h < 32; h <<= 1) {
                float o = __shfl_xor_sync(0xffffffffu, y, h);
                y = (j & h) ? o - y : y + o;
            }
        if (act) xo[j] = y;
        __syncthreads();
        for (; h < lb; h <<= 1) {
            if (j < dv / 2) {
                int t = ((j / h) * 2 * h) + (j % h);
                float x0 = xo[t], x1 = xo[t + h];
                xo[t] = x0 + x1;
                xo[t + h] = x0 - x1;
            }
            __syncthreads();
        }
        y = act ? xo[j] : 0.0f;
        const int cs = B > dv ? B / dv : 1;
        if (cs > 1) {
            cg::cluster_group cl = cg::this_cluster();
            const int rank = (int)cl.block_rank();
            float x[8];
            cl.sync(); /* every CTA's local stages are in its xo */
#pragma unroll
            for (int c = 0; c < 8; c++) x[c] = c < cs && act ? *cl.map_shared_rank(xo + j, c) : 0.0f;
            cl.sync(); /* every read done: xo may change, CTAs may exit */
#pragma unroll
            for (int hh = 1; hh < 8; hh <<= 1)
                if (hh < cs) {
#pragma unroll
                    for (int c = 0; c < 8; c++)
                        if (!(c & hh) && c + hh < 8) {
                            float x0 = x[c], x1 = x[c + hh];
                            x[c] = x0 + x1;
                            x[c + hh] = x0 - x1;
                        }
                }
#pragma unroll
            for (int c = 0; c < 8; c++)
                if (c == rank) y = x[c];
        }
        y *= 1.0f / sqrtf((float)B);
    }
    if (act) a.out[(size_t)i * a.out_stride + (size_t)g * dv + j] = y;
    if (a.act.q && dv % 128 == 0) {
        __syncthreads(); /* the transform's reads of xo are done */
        if (act) xo[j] = y;
        __syncthreads();
        const int lane = j & 31, VW = a.n_v * dv, nb = VW >> 7;
        for (int w = j >> 5; w < dv / 128; w += (int)(blockDim.x >> 5)) {
            float v[4];
#pragma unroll
            for (int e = 0; e < 4; e++) v[e] = xo[w * 128 + lane * 4 + e];
            tc_actq_block(v, lane, a.act.q + (size_t)i * VW * 2, a.act.sx + (size_t)i * nb,
                          a.act.corr + (size_t)i * (VW >> 5), (g * dv) / 128 + w);
        }
    }
}

/* CTA (output slot g, session i); thread j owns state column S[:, j] of value head p. */
template <int KMAX, bool XF>
__global__ void __launch_bounds__(256) k_gdn_step_rec(tc_gdn_step_args a, int C) {
    __shared__ float sq_[KMAX], sk[KMAX], red[8], xo[256];
    const int g = blockIdx.x, i = blockIdx.y, j = threadIdx.x;
    const int dk = a.dk, dv = a.dv, nk = a.n_k, nv = a.n_v, r = nv / nk;
    const int p = a.out_grouped ? (g % r) * nk + g / r : g;
    const int kh = a.v_tiled ? p % nk : p / r;
    const bool act = j < dv;
    const float *row = a.work + (size_t)i * C;
    for (int e = j; e < dk; e += blockDim.x) {
        sq_[e] = row[(size_t)kh * dk + e];
        sk[e] = row[(size_t)nk * dk + (size_t)kh * dk + e];
    }
    float *Sj = a.state[i] + (size_t)p * dk * dv + j; /* this thread's column: Sj[e * dv] */
    asm volatile("" : "+l"(Sj)); /* opaque: else ptxas keeps every element's address live (spills) */
    float S[KMAX];
#pragma unroll
    for (int e = 0; e < KMAX; e++) S[e] = act && e < dk ? Sj[(size_t)e * dv] : 0.0f;
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
    if (act) {
#pragma unroll
        for (int e = 0; e < KMAX; e++)
            if (e < dk) Sj[(size_t)e * dv] = S[e];
    }
    float ss = tc_warp_sum(o * o);
    if ((j & 31) == 0) red[j >> 5] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += red[w];
    float y = 0.0f;
    if (act) {
        const float inv = 1.0f / sqrtf(tot / (float)dv + a.eps);
        const float zz = a.z[(size_t)i * a.z_stride + (size_t)p * dv + j];
        y = o * inv * a.norm[j] * tc_silu(zz);
    }
    gdn_step_out<XF>(a, g, i, j, y, xo);
}

/* the output stage fits the rec kernel: blocks within a CTA or across <= 8 CTAs */
static int xf_cluster(const tc_gdn_step_args *a) {
    const int B = a->block, dv = a->dv;
    if (!a->signs || B < 2 || (B & (B - 1)) || (a->n_v * dv) % B) return 0;
    if (B <= dv) return dv % B == 0 ? 1 : 0;
    if (B % dv || B / dv > 8 || a->n_v % (B / dv)) return 0;
    return B / dv;
}

template <int KMAX>
static void launch_rec(const tc_gdn_step_args *a, int C, int cs) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)a->n_v, (unsigned)a->n);
    cfg.blockDim = dim3((unsigned)((a->dv + 31) / 32 * 32));
    cfg.stream = tc_stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)(cs > 0 ? cs : 1);
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = cs > 1 ? 1 : 0;
    if (cs > 0) tc_note((int)cudaLaunchKernelEx(&cfg, k_gdn_step_rec<KMAX, true>, *a, C));
    else tc_note((int)cudaLaunchKernelEx(&cfg, k_gdn_step_rec<KMAX, false>, *a, C));
    tc_check_launch();
}

extern "C" void tc_gdn_step(const tc_gdn_step_args *a) {
    TC_PROF(TC_FAM_GDN);
    if (a->n <= 0) return;
    const int VW = a->n_v * a->dv;
    if (a->dk > 128 || a->dv > 256 || a->dk < 1 || a->dv < 1 || a->conv_k < 1 || a->n > 65535 ||
        a->n_k < 1 || a->n_v % a->n_k ||
        (a->act.q && (a->act.k != VW || a->act.batch != (size_t)a->n || VW % 128)) ||
        (a->signs && !xf_cluster(a) && a->out_stride != (size_t)VW)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int C = 2 * a->n_k * a->dk + VW;
    const int w = a->dk > a->dv ? a->dk : a->dv;
    dim3 g1((unsigned)(2 * a->n_k + a->n_v), (unsigned)a->n);
    k_gdn_step_conv<<<g1, (w + 31) / 32 * 32, 0, tc_stream>>>(*a, C);
    tc_check_launch();
    const int cs = xf_cluster(a);
    tc_gdn_step_args b = *a;
    const bool act_in = a->act.q && a->dv % 128 == 0 && (!a->signs || cs);
    if (!act_in) b.act.q = NULL;
    if (a->signs && !cs) b.signs = NULL; /* the transform after the kernel */
    if (a->dk <= 32) launch_rec<32>(&b, C, b.signs ? cs : 0);
    else if (a->dk <= 64) launch_rec<64>(&b, C, b.signs ? cs : 0);
    else launch_rec<128>(&b, C, b.signs ? cs : 0);
    if (a->signs && !cs) {
        bool fused = tc_act_in_fwht(a->act.q ? &a->act : NULL, (size_t)a->n, (size_t)VW,
                                    (size_t)a->block, a->signs);
        tc_fwht(a->out, NULL, a->out, (size_t)a->n, (size_t)VW, (size_t)a->block, a->signs, 0,
                fused ? &a->act : NULL);
        if (a->act.q && !fused) tc_quantize(a->out, (size_t)VW, &a->act);
    } else if (a->act.q && !act_in) {
        tc_quantize(a->out, a->out_stride, &a->act);
    }
}
