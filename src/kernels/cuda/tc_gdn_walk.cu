/*
 * tc_gdn_walk.cu - the Gated DeltaNet prefill call (tc_gdn): the two-launch scan of
 * tc_gdn_scan.cu where it takes the shape, else (and after tc_gdn_config(0, ..), the
 * reference for tests) the older walk here: conv + SiLU serial per channel, L2 norms,
 * the fp32 delta rule with the state column of each thread in registers, gated RMSNorm.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gdn_state.cuh"

#include <cooperative_groups.h>
#include <math.h>

namespace cg = cooperative_groups;

/* One thread per channel: causal depthwise conv over (state ++ rows), SiLU,
 * then the state keeps the last K-1 inputs. */
__global__ void k_gdn_conv(const float *__restrict__ qkv, const float *__restrict__ w,
                           float *__restrict__ state, float *__restrict__ work, int C, int K,
                           int T) {
    tc_pdl_trigger();
    tc_pdl_wait();
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
    tc_pdl_trigger();
    tc_pdl_wait();
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
template <int KMAX, bool BF>
__global__ void __launch_bounds__(256) k_gdn_rec(tc_gdn_args a, int C) {
    tc_pdl_trigger();
    tc_pdl_wait();
    extern __shared__ float sm[];
    float *sq_ = sm, *sk = sm + KMAX, *red = sm + 2 * KMAX;
    const int p = blockIdx.x, j = threadIdx.x;
    const int dk = a.dk, dv = a.dv, nk = a.n_k, nv = a.n_v, r = nv / nk;
    const int kh = a.v_tiled ? p % nk : p / r;
    const bool act = j < dv;
    float S[KMAX];
    constexpr bool bf = BF; /* the state stored in bf16 (a.state_bf16) */
    const size_t rs = (size_t)dv * gdn_ses(bf);
    uint8_t *Sg = (uint8_t *)a.state + ((size_t)p * dk * dv + (act ? j : 0)) * gdn_ses(bf);
#pragma unroll
    for (int i = 0; i < KMAX; i++) S[i] = act && i < dk ? gdn_ldb(Sg + i * rs, bf) : 0.0f;
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
        if (act && i < dk) gdn_stb(Sg + i * rs, S[i], bf);
}

template <int KMAX>
static void gdn_rec(const tc_gdn_args *a, int C) {
    int threads = (a->dv + 31) / 32 * 32;
    size_t smem = (2 * KMAX + 32) * sizeof(float);
    if (a->state_bf16) tc_launch(k_gdn_rec<KMAX, true>, dim3((unsigned)a->n_v), dim3((unsigned)threads), smem, 1, *a, C);
    else tc_launch(k_gdn_rec<KMAX, false>, dim3((unsigned)a->n_v), dim3((unsigned)threads), smem, 1, *a, C);
}

extern "C" void tc_gdn(tc_ctx *cx, const tc_gdn_args *a) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_GDN);
    if (a->rows <= 0) return;
    if (tc_gdn_scan(tc_cur, a)) return; /* tc_gdn_scan.cu; tc_gdn_config(0, ..): the walk below */
    const int C = 2 * a->n_k * a->dk + a->n_v * a->dv;
    if (a->dk > 128 || a->dv > 256) { /* state column in registers: <= 256 threads of ~170 */
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    tc_launch(k_gdn_conv, dim3(tc_blocks((size_t)C, 128)), dim3(128), 0, 1, a->qkv, a->conv_w,
              a->conv_state, a->work, C, a->conv_k, a->rows);
    size_t warps = (size_t)a->rows * 2 * a->n_k;
    tc_launch(k_gdn_l2, dim3(tc_blocks(warps * 32, 256)), dim3(256), 0, 1, a->work, C, a->rows,
              a->n_k, a->dk);
    tc_gdn_args b = *a;
    if (a->dk <= 32) gdn_rec<32>(&b, C);
    else if (a->dk <= 64) gdn_rec<64>(&b, C);
    else gdn_rec<128>(&b, C);
}
