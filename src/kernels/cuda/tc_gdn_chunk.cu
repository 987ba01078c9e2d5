/*
 * tc_gdn_chunk.cu - the GDN prefill call in the chunked (WY / UT) form on tensor cores
 * (tc_gdn_config(2, ..); a lab path until measured, the scan stays the default). After
 * k_gdn_conv_l2 (tc_gdn_scan.cu: conv + SiLU, q/k L2 norms into `work`):
 *
 *   k_gdn_chunk  grid (ceil(dv/GC_CS), n_v): CTA (64 value columns, value head p) of 8
 *                warps, the state slice S [dk][64] in shared memory, walks the call's
 *                tokens in chunks of GC_L = 64. In a chunk of n tokens with incoming S0,
 *                E_ij = prod_{j<s<=i} decay_s (running products, never a quotient),
 *                e_i = prod_{s<=i} decay_s:
 *                  A_ij = beta_i (k_i.k_j) E_ij (j < i),  M_ij = (q_i.k_j) E_ij (j <= i)
 *                  (I + A) W = diag(beta e) K,  (I + A) U = diag(beta) V   (forward
 *                      substitution in fp32 on CUDA cores, a thread per column)
 *                  V' = U - W S0                  (V'_i is the token's delta of the walk)
 *                  O  = diag(e) Q S0 + M V'       (un-normed, to `out`)
 *                  S  = e_{n-1} S0 + K^T diag(E_{n-1,j}) V'
 *                the products (K K^T, Q K^T, W S0, Q S0, M V', K^T V') by mma.sync
 *                m16n8k8 TF32 in three passes (hi*hi + hi*lo + lo*hi of the operands split
 *                into two TF32 halves): fp32-level results (a model of it in float64 with
 *                the roundings measured 1-3e-7 of the largest output against the exact
 *                recurrence, as the fp32 walk; one TF32 pass 4-8e-4, bf16 3-5e-3:
 *                docs/kernels.md). Also the conv-state shift (as k_gdn_scan).
 *   k_gdn_onorm  CTA (token, value head): out = rmsnorm(o) * norm * silu(z).
 *
 * The recurrent state is read once at the start and written once at the end (fp32 or
 * bf16: .state_bf16). Shapes: dk <= 128 (zero-padded to 128), any dv, n_v % n_k == 0.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gdn_state.cuh"

#include <math.h>
#include <stdint.h>

#define GC_L 64    /* tokens per chunk */
#define GC_DK 128  /* key rows (dk zero-padded) */
#define GC_CS 64   /* value columns per CTA */
#define GC_T 256   /* threads of k_gdn_chunk (8 warps) */
#define GC_LDK 132 /* row stride of Q, K, W (conflict-free fragment loads) */
#define GC_LDC 72  /* row stride of V / U / V' and S (conflict-free fragment loads) */
#define GC_LDA 68  /* row stride of A and M */

/* shared memory in floats: Q, K, W [GC_L][GC_LDK]; V [GC_L][GC_LDC]; S [GC_DK][GC_LDC];
 * A, M [GC_L][GC_LDA]; decay, beta, e, ecol [GC_L] */
#define GC_SMEM_FLOATS (3 * GC_L * GC_LDK + GC_L * GC_LDC + GC_DK * GC_LDC + 2 * GC_L * GC_LDA + 4 * GC_L)

__device__ __forceinline__ uint32_t gc_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
/* x = hi + lo, both TF32 */
__device__ __forceinline__ void gc_split(float x, uint32_t &hi, uint32_t &lo) {
    hi = gc_tf32(x);
    lo = gc_tf32(x - __uint_as_float(hi));
}
__device__ __forceinline__ void gc_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* acc[mt][nt] += A[r0 + 16 mt .., 0..8*K8) B[0..8*K8, c0 + 8 nt ..] for one warp, in three
 * TF32 passes; fa(row, k) and fb(k, col) read the operands (shared memory). Fragment
 * layout of m16n8k8 (g = lane / 4, t = lane % 4): a = A[g][t], A[g+8][t], A[g][t+4],
 * A[g+8][t+4]; b = B[t][g], B[t+4][g]; acc q at row g + 8 (q / 2), column 2t + q % 2. */
template <int MT, int NT, typename FA, typename FB>
__device__ __forceinline__ void gc_gemm(float (&acc)[MT][NT][4], int K8, int r0, int c0, FA fa, FB fb) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int kk = 0; kk < K8; kk++) {
        const int k = kk * 8 + t;
        uint32_t ah[MT][4], al[MT][4], bh[NT][2], bl[NT][2];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int r = r0 + 16 * mt + g;
            gc_split(fa(r, k), ah[mt][0], al[mt][0]);
            gc_split(fa(r + 8, k), ah[mt][1], al[mt][1]);
            gc_split(fa(r, k + 4), ah[mt][2], al[mt][2]);
            gc_split(fa(r + 8, k + 4), ah[mt][3], al[mt][3]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int c = c0 + 8 * nt + g;
            gc_split(fb(k, c), bh[nt][0], bl[nt][0]);
            gc_split(fb(k + 4, c), bh[nt][1], bl[nt][1]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                gc_mma(acc[mt][nt], al[mt], bh[nt][0], bh[nt][1]);
                gc_mma(acc[mt][nt], ah[mt], bl[nt][0], bl[nt][1]);
                gc_mma(acc[mt][nt], ah[mt], bh[nt][0], bh[nt][1]);
            }
    }
}

/* f(row, column, element) for each accumulator element of the warp's tile at (r0, c0) */
template <int MT, int NT, typename F>
__device__ __forceinline__ void gc_each(float (&acc)[MT][NT][4], int r0, int c0, F f) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                f(r0 + 16 * mt + g + 8 * (q >> 1), c0 + 8 * nt + 2 * t + (q & 1), acc[mt][nt][q]);
}
template <int MT, int NT>
__device__ __forceinline__ void gc_zero(float (&acc)[MT][NT][4]) {
    gc_each(acc, 0, 0, [](int, int, float &x) { x = 0.0f; });
}

/* (I + A) x = b for one column X[i * ld] (i < GC_L), in registers: x_i = b_i - sum_{j<i}
 * A_ij x_j, four partial sums per row, A's rows read as float4 (A_ij = 0 for j >= i, so
 * the last group's extra terms add zeros; padding rows have b = 0 and stay 0). */
__device__ __forceinline__ void gc_subst(float *X, int ld, const float *As) {
    float x[GC_L];
#pragma unroll
    for (int i = 0; i < GC_L; i++) x[i] = X[i * ld];
#pragma unroll
    for (int i = 1; i < GC_L; i++) {
        const float4 *A4 = (const float4 *)(As + i * GC_LDA);
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll
        for (int j4 = 0; j4 < (i + 3) / 4; j4++) {
            const float4 v = A4[j4];
            s0 = fmaf(v.x, x[4 * j4], s0);
            s1 = fmaf(v.y, x[4 * j4 + 1], s1);
            s2 = fmaf(v.z, x[4 * j4 + 2], s2);
            s3 = fmaf(v.w, x[4 * j4 + 3], s3);
        }
        x[i] -= (s0 + s1) + (s2 + s3);
    }
#pragma unroll
    for (int i = 1; i < GC_L; i++) X[i * ld] = x[i];
}

/* q, k of key head kh for tokens t0 .. t0+n-1 into Qs, Ks [GC_L][GC_LDK], zero-padded
 * (rows >= n, columns >= dk); vec: 16-byte loads (work 16-byte aligned, C, dk % 4 == 0) */
__device__ __forceinline__ void gc_stage_qk(const tc_gdn_args &a, int C, int kh, int t0, int n, float *Qs,
                                            float *Ks, bool vec) {
    const int dk = a.dk, nk = a.n_k, tid = threadIdx.x, nth = blockDim.x;
    if (vec) {
        for (int e = tid; e < GC_L * GC_DK / 4; e += nth) {
            const int i = e / (GC_DK / 4), d = 4 * (e % (GC_DK / 4));
            const bool ok = i < n && d < dk;
            const float *row = a.work + (size_t)(t0 + i) * C;
            const float4 z = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            *(float4 *)(Qs + i * GC_LDK + d) = ok ? *(const float4 *)(row + (size_t)kh * dk + d) : z;
            *(float4 *)(Ks + i * GC_LDK + d) = ok ? *(const float4 *)(row + (size_t)(nk + kh) * dk + d) : z;
        }
    } else {
        for (int e = tid; e < GC_L * GC_DK; e += nth) {
            const int i = e / GC_DK, d = e % GC_DK;
            const bool ok = i < n && d < dk;
            const float *row = a.work + (size_t)(t0 + i) * C;
            Qs[i * GC_LDK + d] = ok ? row[(size_t)kh * dk + d] : 0.0f;
            Ks[i * GC_LDK + d] = ok ? row[(size_t)(nk + kh) * dk + d] : 0.0f;
        }
    }
}

/* K K^T and Q K^T of one chunk of one key head (they serve its n_v/n_k value heads and
 * every column slice): grid (chunks, n_k); kq[(kh * chunks + c)][2][GC_L][GC_L]. */
__global__ void __launch_bounds__(128) k_gdn_kk(tc_gdn_args a, int C, float *__restrict__ kq, int vec) {
    extern __shared__ __align__(16) float gk_sm[];
    tc_pdl_trigger();
    tc_pdl_wait();
    float *Qs = gk_sm, *Ks = Qs + GC_L * GC_LDK;
    const int tid = threadIdx.x, w = tid >> 5;
    const int c = blockIdx.x, kh = blockIdx.y, t0 = c * GC_L, n = min(GC_L, a.rows - t0);
    gc_stage_qk(a, C, kh, t0, n, Qs, Ks, vec);
    __syncthreads();
    float kk[1][8][4], qk[1][8][4];
    gc_zero(kk);
    gc_zero(qk);
    auto fK = [&](int r, int k) { return Ks[r * GC_LDK + k]; };
    auto fQ = [&](int r, int k) { return Qs[r * GC_LDK + k]; };
    auto fKt = [&](int k, int col) { return Ks[col * GC_LDK + k]; };
    gc_gemm(kk, GC_DK / 8, 16 * w, 0, fK, fKt);
    gc_gemm(qk, GC_DK / 8, 16 * w, 0, fQ, fKt);
    float *o = kq + (size_t)(kh * gridDim.x + c) * 2 * GC_L * GC_L;
    gc_each(kk, 16 * w, 0, [&](int r, int col, float &x) { o[r * GC_L + col] = x; });
    gc_each(qk, 16 * w, 0, [&](int r, int col, float &x) { o[GC_L * GC_L + r * GC_L + col] = x; });
}

template <bool BF>
__global__ void __launch_bounds__(GC_T, 1) k_gdn_chunk(tc_gdn_args a, int C, const float *__restrict__ kq, int vec) {
    extern __shared__ __align__(16) float gc_sm[];
    tc_pdl_trigger();
    tc_pdl_wait();
    float *Qs = gc_sm, *Ks = Qs + GC_L * GC_LDK, *Ws = Ks + GC_L * GC_LDK;
    float *Vs = Ws + GC_L * GC_LDK, *Ss = Vs + GC_L * GC_LDC, *As = Ss + GC_DK * GC_LDC;
    float *Ms = As + GC_L * GC_LDA, *dec = Ms + GC_L * GC_LDA, *bet = dec + GC_L, *ev = bet + GC_L;
    float *ecol = ev + GC_L;
    /* warp w: rows 16 (w % 4) .. of the 64-row products, columns 32 (w / 4) .. */
    const int tid = threadIdx.x, w = tid >> 5, wr = w & 3, wc = 32 * (w >> 2);
    const int dk = a.dk, dv = a.dv, nk = a.n_k, nv = a.n_v, T = a.rows;
    const int p = blockIdx.y, kh = a.v_tiled ? p % nk : p / (nv / nk);
    const int j0 = blockIdx.x * GC_CS, cols = min(GC_CS, dv - j0);
    const size_t VW = (size_t)nv * dv;

    gdn_conv_shift(a, C); /* gdn_state.cuh */

    /* S slice: rows d < dk, columns j0 .. j0+cols (zero padding elsewhere) */
    const uint8_t *Sg = (const uint8_t *)a.state + (size_t)p * dk * dv * gdn_ses(BF);
    for (int e = tid; e < GC_DK * GC_CS; e += GC_T) {
        const int d = e / GC_CS, c = e % GC_CS;
        Ss[d * GC_LDC + c] = d < dk && c < cols ? gdn_ldb(Sg + ((size_t)d * dv + j0 + c) * gdn_ses(BF), BF) : 0.0f;
    }
    const float dtb = a.dt_bias[p], sa = a.ssm_a[p];

    for (int t0 = 0; t0 < T; t0 += GC_L) {
        const int n = min(GC_L, T - t0);
        __syncthreads(); /* the previous chunk is done with every buffer */
        /* q, k rows of the key head, v columns of the slice, zero-padded (vec: dv % 4 == 0
         * too, so the slice's columns come in whole float4) */
        gc_stage_qk(a, C, kh, t0, n, Qs, Ks, vec);
        const float *vsrc = a.work + (size_t)t0 * C + (size_t)2 * nk * dk + (size_t)p * dv + j0;
        if (vec) {
            for (int e = tid; e < GC_L * GC_CS / 4; e += GC_T) {
                const int i = e / (GC_CS / 4), c = 4 * (e % (GC_CS / 4));
                *(float4 *)(Vs + i * GC_LDC + c) = i < n && c < cols ? *(const float4 *)(vsrc + (size_t)i * C + c)
                                                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        } else {
            for (int e = tid; e < GC_L * GC_CS; e += GC_T) {
                const int i = e / GC_CS, c = e % GC_CS;
                Vs[i * GC_LDC + c] = i < n && c < cols ? vsrc[(size_t)i * C + c] : 0.0f;
            }
        }
        if (tid < GC_L) { /* padding tokens: decay 1, beta 0 (no effect on S or e) */
            const int i = tid;
            float dc = 1.0f, bt = 0.0f;
            if (i < n) {
                const float x = a.a[(size_t)(t0 + i) * nv + p] + dtb;
                const float sp = x > 20.0f ? x : log1pf(expf(x));
                dc = expf(sa * sp);
                bt = 1.0f / (1.0f + expf(-a.b[(size_t)(t0 + i) * nv + p]));
            }
            dec[i] = dc;
            bet[i] = bt;
        }
        __syncthreads();
        { /* K K^T into A, Q K^T into M (k_gdn_kk) */
            const float4 *src = (const float4 *)(kq + (size_t)(kh * ((T + GC_L - 1) / GC_L) + t0 / GC_L) * 2 * GC_L * GC_L);
            for (int e = tid; e < 2 * GC_L * GC_L / 4; e += GC_T) {
                const float4 v = src[e];
                const int m = e / (GC_L * GC_L / 4), r = (e / (GC_L / 4)) % GC_L, c4 = e % (GC_L / 4);
                *(float4 *)((m ? Ms : As) + r * GC_LDA + 4 * c4) = v;
            }
        }
        __syncthreads();
        if (tid < GC_L) { /* row i: the decay weights, the masks, e_i, ecol; then the
                           * right-hand sides beta_i e_i k_i (into W) and beta_i v_i */
            const int i = tid;
            float wgt = 1.0f; /* E_ij, walking j down from i */
            for (int j = GC_L - 1; j > i; j--) {
                As[i * GC_LDA + j] = 0.0f;
                Ms[i * GC_LDA + j] = 0.0f;
            }
            for (int j = i; j >= 0; j--) {
                As[i * GC_LDA + j] = j < i ? As[i * GC_LDA + j] * bet[i] * wgt : 0.0f;
                Ms[i * GC_LDA + j] *= wgt;
                if (i == n - 1) ecol[j] = wgt;
                wgt *= dec[j];
                if (wgt < 1e-30f) wgt = 0.0f; /* no denormals: nothing of S0 is left */
            }
            if (i >= n) ecol[i] = 0.0f; /* padding tokens add nothing to S */
            ev[i] = wgt;                /* e_i */
        }
        __syncthreads();
        for (int e = tid; e < GC_L * GC_DK; e += GC_T) { /* the right-hand sides, spread */
            const int i = e / GC_DK, d = e % GC_DK;
            Ws[i * GC_LDK + d] = bet[i] * ev[i] * Ks[i * GC_LDK + d];
        }
        for (int e = tid; e < GC_L * GC_CS; e += GC_T) Vs[(e / GC_CS) * GC_LDC + e % GC_CS] *= bet[e / GC_CS];
        __syncthreads();
        /* forward substitution (I + A) X = B, a thread per column: W's 128, then V's 64 */
        for (int col = tid; col < GC_DK + GC_CS; col += GC_T)
            gc_subst(col < GC_DK ? Ws + col : Vs + (col - GC_DK), col < GC_DK ? GC_LDK : GC_LDC, As);
        __syncthreads();
        float o[1][4][4];
        { /* V' = U - W S0 (into V), O = diag(e) Q S0: warp w a 16 x 32 tile */
            float ws[1][4][4];
            gc_zero(ws);
            gc_zero(o);
            auto fW = [&](int r, int k) { return Ws[r * GC_LDK + k]; };
            auto fQ = [&](int r, int k) { return Qs[r * GC_LDK + k]; };
            auto fS = [&](int k, int c) { return Ss[k * GC_LDC + c]; };
            gc_gemm(ws, GC_DK / 8, 16 * wr, wc, fW, fS);
            gc_gemm(o, GC_DK / 8, 16 * wr, wc, fQ, fS);
            gc_each(ws, 16 * wr, wc, [&](int r, int c, float &x) { Vs[r * GC_LDC + c] -= x; }); /* own tile */
            gc_each(o, 16 * wr, wc, [&](int r, int, float &x) { x *= ev[r]; });
        }
        __syncthreads(); /* V' complete */
        { /* O += M V', to out (un-normed) */
            auto fM = [&](int r, int k) { return Ms[r * GC_LDA + k]; };
            auto fV = [&](int k, int c) { return Vs[k * GC_LDC + c]; };
            gc_gemm(o, GC_L / 8, 16 * wr, wc, fM, fV);
            gc_each(o, 16 * wr, wc, [&](int r, int c, float &x) {
                if (r < n && c < cols) a.out[(size_t)(t0 + r) * VW + (size_t)p * dv + j0 + c] = x;
            });
        }
        { /* S = e_{n-1} S0 + (diag(ecol) K)^T V': warp w rows 32 (w % 4).. of S, 32 columns */
            float s[2][4][4];
            const float el = ev[n - 1];
            gc_each(s, 32 * wr, wc, [&](int r, int c, float &x) { x = el * Ss[r * GC_LDC + c]; });
            auto fKe = [&](int r, int k) { return ecol[k] * Ks[k * GC_LDK + r]; };
            auto fV = [&](int k, int c) { return Vs[k * GC_LDC + c]; };
            gc_gemm(s, GC_L / 8, 32 * wr, wc, fKe, fV);
            /* every warp's reads of S0 (the V' / O products above) ended at the barrier
             * before M V'; these rows are this warp's alone */
            gc_each(s, 32 * wr, wc, [&](int r, int c, float &x) { Ss[r * GC_LDC + c] = x; });
        }
    }
    __syncthreads();
    uint8_t *Sw = (uint8_t *)a.state + (size_t)p * dk * dv * gdn_ses(BF);
    for (int e = tid; e < GC_DK * GC_CS; e += GC_T) {
        const int d = e / GC_CS, c = e % GC_CS;
        if (d < dk && c < cols) gdn_stb(Sw + ((size_t)d * dv + j0 + c) * gdn_ses(BF), Ss[d * GC_LDC + c], BF);
    }
}

/* CTA (token t, value head p): the gated RMSNorm of the head's dv outputs in place */
__global__ void __launch_bounds__(128) k_gdn_onorm(tc_gdn_args a) {
    tc_pdl_trigger();
    tc_pdl_wait();
    __shared__ float red[4];
    const int t = blockIdx.x, p = blockIdx.y, tid = threadIdx.x, dv = a.dv;
    const size_t base = (size_t)t * a.n_v * dv + (size_t)p * dv;
    float ss = 0.0f;
    for (int j = tid; j < dv; j += 128) ss = fmaf(a.out[base + j], a.out[base + j], ss);
    ss = tc_warp_sum(ss);
    if ((tid & 31) == 0) red[tid >> 5] = ss;
    __syncthreads();
    const float inv = 1.0f / sqrtf((red[0] + red[1] + red[2] + red[3]) / (float)dv + a.eps);
    for (int j = tid; j < dv; j += 128) a.out[base + j] = a.out[base + j] * inv * a.norm[j] * tc_silu(a.z[base + j]);
}

/* the chunked path takes the call: dk <= 128 (the rows a CTA holds), at least GC_MIN_ROWS
 * rows (fewer: the scan; a single-token step may be recorded into a graph, where the
 * K K^T workspace must not grow) */
#define GC_MIN_ROWS 16
extern "C" int tc_gdn_chunk_ok(const tc_gdn_args *a) {
    return a->dk >= 1 && a->dk <= GC_DK && a->dv >= 1 && a->n_k >= 1 && a->n_v % a->n_k == 0 &&
           a->n_v <= 65535 && a->rows >= GC_MIN_ROWS && a->rows <= 65535 && a->conv_k >= 1;
}

/* k_gdn_kk + k_gdn_chunk + k_gdn_onorm after the caller's k_gdn_conv_l2 */
extern "C" void tc_gdn_chunk_launch(const tc_gdn_args *a, int C) {
    const int nch = (a->rows + GC_L - 1) / GC_L;
    /* sized for at least 512 rows (the back-end's prefill chunk) at once: a workspace that
     * grows makes recorded step graphs stale, so it should grow once, not per call size */
    const int nres = nch > 512 / GC_L ? nch : 512 / GC_L;
    float *kq = (float *)tc_workspace(3, (size_t)a->n_k * nres * 2 * GC_L * GC_L * sizeof(float));
    if (!kq) return; /* noted */
    const size_t ksmem = (size_t)2 * GC_L * GC_LDK * sizeof(float);
    if (tc_attr_once((const void *)k_gdn_kk, (long long)ksmem)) {
        int e = (int)cudaFuncSetAttribute(k_gdn_kk, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ksmem);
        if (e) {
            tc_note(e);
            return;
        }
    }
    const int vec = (uintptr_t)a->work % 16 == 0 && C % 4 == 0 && a->dk % 4 == 0 && a->dv % 4 == 0;
    tc_launch(k_gdn_kk, dim3((unsigned)nch, (unsigned)a->n_k), dim3(128), ksmem, 1u, *a, C, kq, vec);
    const size_t smem = (size_t)GC_SMEM_FLOATS * sizeof(float);
    const void *fn = a->state_bf16 ? (const void *)k_gdn_chunk<true> : (const void *)k_gdn_chunk<false>;
    if (tc_attr_once(fn, (long long)smem)) {
        int e = (int)cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e) {
            tc_note(e);
            return;
        }
    }
    const dim3 grid((unsigned)((a->dv + GC_CS - 1) / GC_CS), (unsigned)a->n_v);
    if (a->state_bf16) tc_launch(k_gdn_chunk<true>, grid, dim3(GC_T), smem, 1u, *a, C, (const float *)kq, vec);
    else tc_launch(k_gdn_chunk<false>, grid, dim3(GC_T), smem, 1u, *a, C, (const float *)kq, vec);
    tc_launch(k_gdn_onorm, dim3((unsigned)a->rows, (unsigned)a->n_v), dim3(128), 0, 1u, *a);
}
