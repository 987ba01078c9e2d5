/*
 * tc_gdn_scan.cu - the GDN chunk path (tc_gdn, prefill: rows >= 1) in two launches,
 * the default since 2026-12 (tc_gdn_config(0, ..), a lab function, runs the walk of
 * tc_gdn_walk.cu, the reference):
 *
 *   k_gdn_conv_l2   causal depthwise conv over (conv state ++ rows) + SiLU, parallel
 *                   over tokens (CTA = one q head, one k head or 128 value channels,
 *                   times 16 tokens), the q/k heads L2-normalised in the same CTA (q
 *                   also by 1/sqrt(dk)). The same float operations in the same order
 *                   as k_gdn_conv + k_gdn_l2 (the test holds the two `work`s within
 *                   1e-6). It only READS the conv state: its CTAs of later tokens run
 *                   beside those of the first.
 *   k_gdn_scan      the delta rule, the gated RMSNorm, the conv-state shift.
 *
 * The recurrence (k_gdn_rec's notation; per value head p and token t of the chunk, S the
 * dk x dv fp32 state of head p, k, q its key head's L2-normed rows, v its dv values):
 *   decay = exp(ssm_a[p] * softplus(a[t,p] + dt_bias[p])),  beta = sigmoid(b[t,p])
 *   S *= decay;  kv = S^T k;  d = (v - kv) beta;  S += k d^T;  o = S^T q
 *   (o = sq + (k.q) d, sq = (decayed S)^T q), out = rmsnorm(o) * norm * silu(z).
 * Why a walk and not the chunked WY / UT form (K S0, Q S0, the within-chunk triangular
 * solve, K^T V'): in fp32 on CUDA cores both cost ~4 M operations per head and 64
 * tokens at dk = dv = 128 (the walk: S*decay, two dots and the rank-1 update, 4 per
 * state element and token); the chunked form only wins on tensor cores (tf32/bf16),
 * which would break the parity bounds. So this keeps the walk's arithmetic and hides
 * its latency instead.
 * Column j of S evolves on its own (kv_j, d_j, o_j read only column j), so the walk
 * is split over columns, and each column over L lanes of a warp:
 *   CTA (x = column slice, y = value head p): CPC = 32/L * warps columns j0..j0+CPC-1;
 *   thread (lane sub = lane % L, column jc): rows 4*(sub + L*m) + e (m < RPT/4, e < 4)
 *   of column j0 + jc in registers (RPT of them; rows >= dk are zero);
 *   per token: s = S*decay (stored), partial kv and sq over its rows (4 chains), xor-
 *   shuffle sums over the L lanes (all lanes get the same bits), d, S += k d, o.
 * fp32 throughout, as the walk of tc_gdn_walk.cu: only the summation order of kv, sq and k.q
 * differs (rounding level; test_cuda_kernels gdn_chunk_vs_f64_and_walk bounds it).
 * Latency: no global access inside the token loop. The chunk's rows are staged in
 * sub-chunks of GS_TS tokens by cp.async into a double buffer (q, k of the key head,
 * v and z of the CTA's columns, a, b), the next sub-chunk's copy in flight during the
 * current one's walk; per sub-chunk two CTA barriers, and decay, beta and k.q computed
 * once per token by the CTA (not per column). Inside the walk the next token's q, k
 * are read from shared memory while the current token's lanes sum kv.
 * The gated RMSNorm sums o^2 over all dv columns of a token, across the CTAs of a head:
 * those CTAs form a thread-block cluster (cs = ceil(dv / CPC) <= 8); every GS_SEG tokens
 * each CTA sums its columns' o^2 per token, reads the other CTAs' sums through
 * distributed shared memory (rank order: every CTA gets the same bits), and writes
 * out = o * inv * norm * silu(z) for its columns.
 * The recurrent state is read at the start and written at the end (fully applied;
 * `pending` is not used on the GPU); the conv state becomes the last conv_k-1 inputs of
 * (state ++ qkv rows), written here (k_gdn_conv_l2 is complete: tc_pdl_wait).
 * Both kernels are launched with programmatic dependent launch (tc_launch) and begin
 * with tc_pdl_trigger(); tc_pdl_wait().
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gdn_state.cuh"

#include <cooperative_groups.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace cg = cooperative_groups;

#define GS_TS 16  /* tokens per staged sub-chunk */
#define GS_SEG 64 /* tokens per gated-norm segment (a multiple of GS_TS) */
#define GS_TT 16  /* tokens per conv CTA */
#define GS_VS 128 /* value channels per conv CTA */

/* ------------------------------------------------------------ conv + L2 */

/* CTA (segment g, token tile y): g < 2*n_k: q head g (g < n_k) or k head g - n_k, dk
 * channels; else value channels 2*n_k*dk + (g - 2*n_k)*GS_VS ... (+GS_VS). Thread per
 * channel over the tile's tokens. q/k: the SiLU outputs in shared memory, then a warp
 * per token: L2 norm exactly as k_gdn_l2 (lane-strided float sums, warp tree, double
 * sqrt). The conv state is read, never written (k_gdn_scan shifts it). */
__global__ void __launch_bounds__(256) k_gdn_conv_l2(const float *__restrict__ qkv,
                                                     const float *__restrict__ w,
                                                     const float *__restrict__ state,
                                                     float *__restrict__ work, int C, int K,
                                                     int T, int nk, int dk) {
    extern __shared__ __align__(16) float gc_sm[]; /* [GS_TT][dk] for a q/k head */
    tc_pdl_trigger();
    tc_pdl_wait();
    const int g = blockIdx.x, t0 = blockIdx.y * GS_TT, tid = threadIdx.x;
    const int nt = min(GS_TT, T - t0);
    const bool qk = g < 2 * nk;
    const int cb = qk ? g * dk : 2 * nk * dk + (g - 2 * nk) * GS_VS;
    const int width = qk ? dk : min(GS_VS, C - cb);
    for (int c = tid; c < width; c += blockDim.x) {
        const int ch = cb + c;
        const float *wc = w + (size_t)ch * K;
#pragma unroll 4
        for (int i = 0; i < nt; i++) {
            const int t = t0 + i;
            float s = 0;
            for (int e = 0; e < K; e++) {
                const int src = t - (K - 1) + e;
                const float x =
                    src >= 0 ? qkv[(size_t)src * C + ch] : state[(size_t)(K - 1 + src) * C + ch];
                s += wc[e] * x;
            }
            const float y = tc_silu(s);
            if (qk) gc_sm[i * dk + c] = y;
            else work[(size_t)t * C + ch] = y;
        }
    }
    if (!qk) return; /* uniform per CTA */
    __syncthreads();
    const int lane = tid & 31, nw = (int)(blockDim.x >> 5);
    for (int i = tid >> 5; i < nt; i += nw) {
        const float *v = gc_sm + i * dk;
        float ss = 0;
        for (int j = lane; j < dk; j += 32) ss += v[j] * v[j];
        ss = tc_warp_sum(ss);
        float inv = (float)(1.0 / sqrt((double)ss + 1e-6));
        if (g < nk) inv *= 1.0f / sqrtf((float)dk);
        float *o = work + (size_t)(t0 + i) * C + cb;
        for (int j = lane; j < dk; j += 32) o[j] = v[j] * inv;
    }
}

/* ----------------------------------------------------------------- scan */

__device__ __forceinline__ void gs_cp16(void *dst, const float *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(__cvta_generic_to_global(src))
                 : "memory");
}
__device__ __forceinline__ void gs_cp4(void *dst, const float *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(__cvta_generic_to_global(src))
                 : "memory");
}
__device__ __forceinline__ void gs_cp_wait(void) { asm volatile("cp.async.wait_all;" ::: "memory"); }

/* Shared memory of k_gdn_scan in floats (every part a multiple of 4 floats):
 *   kq  [2][GS_TS][2][KP]  staged q then k of each token (rows >= dk stay zero)
 *   vs  [2][GS_TS][CPC]    staged v (columns past dv stay zero)
 *   ab  [2][GS_TS][2]      staged a, b of head p   (4*GS_TS floats)
 *   sc  [GS_TS] float4     decay, beta, k.q of each token of the sub-chunk
 *   ob  [GS_SEG][CPC+1]    o of the segment's tokens (padded: column sums per token)
 *   zb  [GS_SEG][CPC]      staged z
 *   ssq [2][GS_SEG]        the CTA's sum of o^2 per token (by segment parity: DSMEM)
 *   inv [GS_SEG]           1/rms per token */
__host__ __device__ __forceinline__ int gs_smem_floats(int KP, int CPC) {
    return 4 * GS_TS * KP + 2 * GS_TS * CPC + 4 * GS_TS + 4 * GS_TS + GS_SEG * (CPC + 1) +
           GS_SEG * CPC + 3 * GS_SEG;
}

template <int RPT, int L>
__device__ __forceinline__ void gs_ld(float (&q)[RPT], float (&k)[RPT], const float *tok, int sub) {
    constexpr int KP = L * RPT;
#pragma unroll
    for (int m = 0; m < RPT / 4; m++) {
        const float4 x = *(const float4 *)(tok + 4 * (sub + L * m));
        const float4 y = *(const float4 *)(tok + KP + 4 * (sub + L * m));
        q[4 * m] = x.x, q[4 * m + 1] = x.y, q[4 * m + 2] = x.z, q[4 * m + 3] = x.w;
        k[4 * m] = y.x, k[4 * m + 1] = y.y, k[4 * m + 2] = y.z, k[4 * m + 3] = y.w;
    }
}

/* Token i of the sub-chunk for this thread's rows (kc, q: its k and q); the next
 * token's q, k are loaded into q, kn while the lanes sum kv and sq. o goes to ocol. */
template <int RPT, int L>
__device__ __forceinline__ void gs_token(float (&S)[RPT], const float (&kc)[RPT], float (&kn)[RPT],
                                         float (&q)[RPT], const float *kqb, const float4 *sc,
                                         const float *vcol, float *ocol, int i, int n, int sub,
                                         int CPC) {
    constexpr int KP = L * RPT;
    const float4 s4 = sc[i]; /* decay, beta, k.q */
    const float v = vcol[i * CPC];
    float kv0 = 0, kv1 = 0, kv2 = 0, kv3 = 0, sq0 = 0, sq1 = 0, sq2 = 0, sq3 = 0;
#pragma unroll
    for (int m = 0; m < RPT / 4; m++) {
        float s;
        s = S[4 * m] * s4.x, S[4 * m] = s, kv0 = fmaf(s, kc[4 * m], kv0), sq0 = fmaf(s, q[4 * m], sq0);
        s = S[4 * m + 1] * s4.x, S[4 * m + 1] = s, kv1 = fmaf(s, kc[4 * m + 1], kv1),
        sq1 = fmaf(s, q[4 * m + 1], sq1);
        s = S[4 * m + 2] * s4.x, S[4 * m + 2] = s, kv2 = fmaf(s, kc[4 * m + 2], kv2),
        sq2 = fmaf(s, q[4 * m + 2], sq2);
        s = S[4 * m + 3] * s4.x, S[4 * m + 3] = s, kv3 = fmaf(s, kc[4 * m + 3], kv3),
        sq3 = fmaf(s, q[4 * m + 3], sq3);
    }
    if (i + 1 < n) gs_ld<RPT, L>(q, kn, kqb + (i + 1) * 2 * KP, sub);
    float kv = (kv0 + kv1) + (kv2 + kv3), sq = (sq0 + sq1) + (sq2 + sq3);
#pragma unroll
    for (int o = 1; o < 8; o <<= 1)
        if (o < L) {
            kv += __shfl_xor_sync(0xffffffffu, kv, o);
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
        }
    const float d = (v - kv) * s4.y;
#pragma unroll
    for (int e = 0; e < RPT; e++) S[e] = fmaf(kc[e], d, S[e]);
    if (sub == 0) ocol[i * (CPC + 1)] = sq + s4.z * d;
}

/* grid (cs, n_v), cluster (cs, 1, 1) when cs > 1; blockDim 32*warps (1, 2, 4 or 8);
 * L lanes per column (a power of two <= 8, L*RPT >= dk); vec: 16-byte copies. */
template <int RPT, int L>
__global__ void __launch_bounds__(256, 1) k_gdn_scan(tc_gdn_args a, int C, int cs, int vec) {
    extern __shared__ __align__(16) float gs_sm[];
    tc_pdl_trigger();
    tc_pdl_wait();
    const int nth = (int)blockDim.x, tid = (int)threadIdx.x, lane = tid & 31;
    constexpr int CW = 32 / L, KP = L * RPT;
    const int CPC = CW * (nth >> 5);
    const int dk = a.dk, dv = a.dv, nk = a.n_k, nv = a.n_v, T = a.rows;
    const int p = (int)blockIdx.y, kh = a.v_tiled ? p % nk : p / (nv / nk);
    const int j0 = (int)blockIdx.x * CPC, cols = min(CPC, dv - j0);
    const int sub = lane % L, jc = (tid >> 5) * CW + lane / L;
    const bool act = jc < cols;
    float *kqs = gs_sm;
    float *vs = kqs + 4 * GS_TS * KP;
    float *abs_ = vs + 2 * GS_TS * CPC;
    float4 *sc = (float4 *)(abs_ + 4 * GS_TS);
    float *ob = (float *)(sc + GS_TS);
    float *zb = ob + GS_SEG * (CPC + 1);
    float *ssq = zb + GS_SEG * CPC;
    float *inv_s = ssq + 2 * GS_SEG;
    const size_t VW = (size_t)nv * dv;

    gdn_conv_shift(a, C); /* gdn_state.cuh */

    /* this thread's rows of state column j0 + jc (fp32 or bf16 storage) */
    const bool bf = a.state_bf16;
    const size_t rs = (size_t)dv * gdn_ses(bf);
    float S[RPT];
    {
        const uint8_t *Sg = (const uint8_t *)a.state + ((size_t)p * dk * dv + j0 + (act ? jc : 0)) * gdn_ses(bf);
        asm volatile("" : "+l"(Sg)); /* opaque: one base, not an address per element */
#pragma unroll
        for (int m = 0; m < RPT / 4; m++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = 4 * (sub + L * m) + e;
                S[4 * m + e] = act && row < dk ? gdn_ldb(Sg + row * rs, bf) : 0.0f;
            }
    }
    for (int e = tid; e < 4 * GS_TS * KP + 2 * GS_TS * CPC; e += nth) gs_sm[e] = 0.0f;
    __syncthreads();

    /* copies of sub-chunk c (q, k, v, a, b) into buffer c & 1, and of its z into zb */
    auto stage = [&](int c) {
        const int t0 = c * GS_TS, n = min(GS_TS, T - t0), b = c & 1;
        float *kd = kqs + b * GS_TS * 2 * KP, *vd = vs + b * GS_TS * CPC;
        const float *row = a.work + (size_t)t0 * C;
        const float *qsrc = row + (size_t)kh * dk, *vsrc = row + (size_t)2 * nk * dk + (size_t)p * dv + j0;
        if (vec) {
            const int q4 = dk >> 2, c4 = cols >> 2;
            for (int e = tid; e < n * 2 * q4; e += nth) {
                const int i = e / (2 * q4), r = e - i * 2 * q4, h = r >= q4, f = r - h * q4;
                gs_cp16(kd + (i * 2 + h) * KP + 4 * f, qsrc + (size_t)i * C + (size_t)h * nk * dk + 4 * f);
            }
            for (int e = tid; e < n * c4; e += nth) {
                const int i = e / c4, f = e - i * c4;
                gs_cp16(vd + i * CPC + 4 * f, vsrc + (size_t)i * C + 4 * f);
            }
        } else {
            for (int e = tid; e < n * 2 * dk; e += nth) {
                const int i = e / (2 * dk), r = e - i * 2 * dk, h = r >= dk, f = r - h * dk;
                gs_cp4(kd + (i * 2 + h) * KP + f, qsrc + (size_t)i * C + (size_t)h * nk * dk + f);
            }
            for (int e = tid; e < n * cols; e += nth) {
                const int i = e / cols, f = e - i * cols;
                gs_cp4(vd + i * CPC + f, vsrc + (size_t)i * C + f);
            }
        }
        for (int e = tid; e < 2 * n; e += nth) {
            const int i = e >> 1;
            gs_cp4(abs_ + (b * GS_TS + i) * 2 + (e & 1),
                   ((e & 1) ? a.b : a.a) + (size_t)(t0 + i) * nv + p);
        }
    };
    auto stage_z = [&](int c) {
        const int t0 = c * GS_TS, n = min(GS_TS, T - t0), zr = t0 % GS_SEG;
        const float *zsrc = a.z + (size_t)t0 * VW + (size_t)p * dv + j0;
        if (vec) {
            const int c4 = cols >> 2;
            for (int e = tid; e < n * c4; e += nth) {
                const int i = e / c4, f = e - i * c4;
                gs_cp16(zb + (zr + i) * CPC + 4 * f, zsrc + (size_t)i * VW + 4 * f);
            }
        } else {
            for (int e = tid; e < n * cols; e += nth) {
                const int i = e / cols, f = e - i * cols;
                gs_cp4(zb + (zr + i) * CPC + f, zsrc + (size_t)i * VW + f);
            }
        }
    };

    stage(0);
    const int nsub = (T + GS_TS - 1) / GS_TS, SPS = GS_SEG / GS_TS;
    const float dtb = a.dt_bias[p], sa = a.ssm_a[p];
    for (int c = 0; c < nsub; c++) {
        const int t0 = c * GS_TS, n = min(GS_TS, T - t0), b = c & 1;
        const float *kqb = kqs + b * GS_TS * 2 * KP;
        gs_cp_wait();
        __syncthreads(); /* sub-chunk c landed; every thread is past the walk of c-1 */
        if (c + 1 < nsub) stage(c + 1);
        stage_z(c);
        { /* decay, beta, k.q of each token: nth/GS_TS threads per token */
            const int parts = nth / GS_TS, i = tid / parts, part = tid % parts;
            const float4 *q4 = (const float4 *)(kqb + i * 2 * KP), *k4 = q4 + KP / 4;
            float acc = 0.0f;
            for (int f = part; f < KP / 4; f += parts) {
                const float4 x = q4[f], y = k4[f];
                acc = fmaf(x.x, y.x, acc);
                acc = fmaf(x.y, y.y, acc);
                acc = fmaf(x.z, y.z, acc);
                acc = fmaf(x.w, y.w, acc);
            }
            for (int o = 1; o < parts; o <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
            if (part == 0 && i < n) {
                const float *abb = abs_ + b * GS_TS * 2;
                const float x = abb[2 * i] + dtb;
                const float sp = x > 20.0f ? x : log1pf(expf(x));
                sc[i] = make_float4(expf(sa * sp), 1.0f / (1.0f + expf(-abb[2 * i + 1])), acc, 0.0f);
            }
        }
        __syncthreads(); /* sc ready */
        {
            const float *vcol = vs + b * GS_TS * CPC + jc;
            float *ocol = ob + (t0 % GS_SEG) * (CPC + 1) + jc;
            float q[RPT], ka[RPT], kb[RPT];
            gs_ld<RPT, L>(q, ka, kqb, sub);
            for (int i = 0; i < n; i += 2) {
                gs_token<RPT, L>(S, ka, kb, q, kqb, sc, vcol, ocol, i, n, sub, CPC);
                if (i + 1 >= n) break;
                gs_token<RPT, L>(S, kb, ka, q, kqb, sc, vcol, ocol, i + 1, n, sub, CPC);
            }
        }
        if ((c + 1) % SPS && c + 1 < nsub) continue;
        /* gated RMSNorm of the segment's tokens */
        const int s0 = (c / SPS) * GS_SEG, ns = t0 + n - s0;
        float *my = ssq + ((c / SPS) & 1) * GS_SEG;
        gs_cp_wait();
        __syncthreads(); /* ob complete, z landed */
        for (int t = tid; t < ns; t += nth) {
            float s = 0.0f;
            for (int e = 0; e < cols; e++) {
                const float o = ob[t * (CPC + 1) + e];
                s = fmaf(o, o, s);
            }
            my[t] = s;
        }
        if (cs > 1) {
            cg::cluster_group cl = cg::this_cluster();
            cl.sync(); /* every CTA's sums are in its ssq */
            for (int t = tid; t < ns; t += nth) {
                float tot = 0.0f;
                for (int r = 0; r < cs; r++) tot += *cl.map_shared_rank(my + t, r);
                inv_s[t] = 1.0f / sqrtf(tot / (float)dv + a.eps);
            }
        } else {
            for (int t = tid; t < ns; t += nth) inv_s[t] = 1.0f / sqrtf(my[t] / (float)dv + a.eps);
        }
        __syncthreads();
        for (int e = tid; e < ns * cols; e += nth) {
            const int t = e / cols, f = e - t * cols;
            const size_t oi = (size_t)(s0 + t) * VW + (size_t)p * dv + j0 + f;
            a.out[oi] = ob[t * (CPC + 1) + f] * inv_s[t] * a.norm[j0 + f] * tc_silu(zb[t * CPC + f]);
        }
    }
    if (cs > 1) cg::this_cluster().sync(); /* no CTA leaves while another reads its ssq */
    if (act) {
        uint8_t *Sw = (uint8_t *)a.state + ((size_t)p * dk * dv + j0 + jc) * gdn_ses(bf);
        asm volatile("" : "+l"(Sw));
#pragma unroll
        for (int m = 0; m < RPT / 4; m++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = 4 * (sub + L * m) + e;
                if (row < dk) gdn_stb(Sw + row * rs, S[4 * m + e], bf);
            }
    }
}

/* ------------------------------------------------------------------ host */

/* tc_gdn_chunk.cu: the chunked form on tensor cores (tc_gdn_config(2, ..)) */
extern "C" int tc_gdn_chunk_ok(const tc_gdn_args *a);
extern "C" void tc_gdn_chunk_launch(const tc_gdn_args *a, int C);

/* the context's gdn_path: 0 the walk (tc_gdn_walk.cu, the oracle); 1 the scan
 * (tc_gdn_config); gdn_rpt, gdn_wpc: its shape (0: by dk) */

static bool gs_valid(int rpt, int wpc) {
    return (rpt == 0 || rpt == 8 || rpt == 16 || rpt == 32) &&
           (wpc == 0 || wpc == 1 || wpc == 2 || wpc == 4 || wpc == 8);
}

extern "C" int tc_gdn_config(tc_ctx *cx, int path, int rpt, int warps) {
    TC_CTX(cx);
    if (path < -1 || path > 2 || !gs_valid(rpt, warps)) return -1;
    cx->gdn_path = path < 0 ? 1 : path; /* -1: the default, the scan */
    cx->gdn_rpt = rpt;
    cx->gdn_wpc = warps;
    return 0;
}

extern "C" void tc_gdn_use_chunk(tc_ctx *cx, int on) { tc_gdn_config(cx, on ? 2 : -1, 0, 0); }

/* RPT rows per thread, L lanes per column, warps per CTA, cs CTAs per head; false: not
 * taken. L: the least power of two with L*RPT >= dk, at least 4 for RPT 16 and 32 (the
 * kernels built; more lanes than needed only add zero rows), at most 8. */
static bool gs_plan(const tc_gdn_args *a, int *rpt, int *L, int *wpc, int *cs) {
    const int dk = a->dk, dv = a->dv;
    if (dk < 1 || dk > 256 || dv < 1 || a->n_k < 1 || a->n_v < a->n_k || a->n_v % a->n_k ||
        a->n_v > 65535 || a->conv_k < 1 || a->rows < 1)
        return false;
    const int r = tc_cur->gdn_rpt ? tc_cur->gdn_rpt : dk <= 32 ? 8 : dk <= 64 ? 16 : 32;
    int l = r == 8 ? 1 : 4;
    while (l * r < dk) l <<= 1;
    if (l > 8) return false;
    /* default: the most CTAs per head that a cluster takes (27B: 8 CTAs of 2 warps, 16
     * columns each: 384 CTAs, 2.9 per SM; at 206 registers 4 fit an SM) */
    int w = tc_cur->gdn_wpc ? tc_cur->gdn_wpc : 1;
    int c = (dv + 32 / l * w - 1) / (32 / l * w);
    while (c > 8 && !tc_cur->gdn_wpc && w < 8) {
        w <<= 1;
        c = (dv + 32 / l * w - 1) / (32 / l * w);
    }
    if (c > 8) return false;
    *rpt = r, *L = l, *wpc = w, *cs = c;
    return true;
}

template <int RPT, int L>
static void gs_launch(const tc_gdn_args *a, int C, int wpc, int cs, int vec) {
    const int CPC = 32 / L * wpc;
    const size_t smem = (size_t)gs_smem_floats(L * RPT, CPC) * sizeof(float);
    if (smem > 48 * 1024 && tc_attr_once((const void *)k_gdn_scan<RPT, L>, (long long)smem)) {
        int e = (int)cudaFuncSetAttribute(k_gdn_scan<RPT, L>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e) {
            tc_note(e);
            return;
        }
    }
    tc_launch(k_gdn_scan<RPT, L>, dim3((unsigned)cs, (unsigned)a->n_v), dim3((unsigned)(32 * wpc)),
              smem, (unsigned)cs, *a, C, cs, vec);
}

extern "C" int tc_gdn_scan(tc_ctx *cx, const tc_gdn_args *a) {
    TC_CTX(cx);
    int rpt, L, wpc, cs;
    const bool chunk = tc_cur->gdn_path == 2 && tc_gdn_chunk_ok(a); /* tc_gdn_chunk.cu */
    if (!tc_cur->gdn_path || (!chunk && !gs_plan(a, &rpt, &L, &wpc, &cs))) return 0;
    const int nk = a->n_k, dk = a->dk, T = a->rows;
    const int VW = a->n_v * a->dv, C = 2 * nk * dk + VW;
    const int vec = ((uintptr_t)a->work % 16 == 0 && (uintptr_t)a->z % 16 == 0 && C % 4 == 0 &&
                     dk % 4 == 0 && a->dv % 4 == 0);
    const int nseg = 2 * nk + (VW + GS_VS - 1) / GS_VS;
    const int cth = dk > 128 ? (dk + 31) / 32 * 32 : 128;
    tc_launch(k_gdn_conv_l2, dim3((unsigned)nseg, (unsigned)((T + GS_TT - 1) / GS_TT)),
              dim3((unsigned)cth), (size_t)GS_TT * dk * sizeof(float), 1u, a->qkv, a->conv_w,
              (const float *)a->conv_state, a->work, C, a->conv_k, T, nk, dk);
    if (chunk) {
        tc_gdn_chunk_launch(a, C);
        return 1;
    }
    switch (rpt * 16 + L) {
    case 8 * 16 + 1: gs_launch<8, 1>(a, C, wpc, cs, vec); break;
    case 8 * 16 + 2: gs_launch<8, 2>(a, C, wpc, cs, vec); break;
    case 8 * 16 + 4: gs_launch<8, 4>(a, C, wpc, cs, vec); break;
    case 8 * 16 + 8: gs_launch<8, 8>(a, C, wpc, cs, vec); break;
    case 16 * 16 + 4: gs_launch<16, 4>(a, C, wpc, cs, vec); break;
    case 16 * 16 + 8: gs_launch<16, 8>(a, C, wpc, cs, vec); break;
    case 32 * 16 + 4: gs_launch<32, 4>(a, C, wpc, cs, vec); break;
    default: gs_launch<32, 8>(a, C, wpc, cs, vec); break;
    }
    return 1;
}
