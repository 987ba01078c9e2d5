/*
 * tc_gdn_step.cu - the Gated DeltaNet decode step for n sessions: one kernel
 * (k_gdn_step_fused) where the shape allows, else (and with tc_set_ops_old, for tests)
 * two (k_gdn_step_conv + k_gdn_step_rec).
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gdn_state.cuh"

#include <cooperative_groups.h>
#include <math.h>

namespace cg = cooperative_groups;

/* ------------------------------------------------ GDN decode step (fused) */

/* CTA (segment g, session i), thread t = channel within the segment: segments
 * 0..nk-1 are q heads, nk..2nk-1 k heads (dk channels each), then the nv value
 * heads (dv channels each). Each channel's conv state is owned by one thread. */
__global__ void __launch_bounds__(256) k_gdn_step_conv(tc_gdn_step_args a, int C) {
    tc_pdl_trigger();
    tc_pdl_wait();
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
 * the gated norm: y is output j of the slot (0 for j >= dv), sgn its sign
 * (a.signs[g*dv + j], loaded by the caller early; XF only). XF: the forward
 * Hadamard of the row in blocks of a.block: stages below min(block, dv) inside the
 * CTA (warp shuffles, then shared memory), the stages across the block/dv CTAs of
 * a cluster through distributed shared memory (each thread reads its index from
 * every CTA of the cluster, then the same butterflies in registers): the same
 * float operations in the same order as tc_fwht. Then the row is written and, when
 * a.act.q, its 128-blocks quantised (as tc_quantize of the written floats). */
template <bool XF>
__device__ __forceinline__ void gdn_step_out(const tc_gdn_step_args &a, int g, int i, int j,
                                             float y, float sgn, float *xo) {
    const int dv = a.dv;
    const bool act = j < dv;
    if (XF) {
        const int B = a.block, lb = B < dv ? B : dv;
        if (act) y *= sgn;
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

/* CTA (output slot g, session i); thread j owns state column S[:, j] of value head p.
 * BF: the state stored in bf16 (a.state_bf16). */
template <int KMAX, bool XF, bool BF>
__global__ void __launch_bounds__(256) k_gdn_step_rec(tc_gdn_step_args a, int C) {
    tc_pdl_trigger();
    tc_pdl_wait();
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
    constexpr bool bf = BF;
    const size_t rs = (size_t)dv * gdn_ses(bf); /* bytes between rows */
    /* this thread's column: element e at Sj + e * rs */
    uint8_t *Sj = (uint8_t *)a.state[i] + ((size_t)p * dk * dv + j) * gdn_ses(bf);
    asm volatile("" : "+l"(Sj)); /* opaque: else ptxas keeps every element's address live (spills) */
    float S[KMAX];
#pragma unroll
    for (int e = 0; e < KMAX; e++) S[e] = act && e < dk ? gdn_ldb(Sj + e * rs, bf) : 0.0f;
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
            if (e < dk) gdn_stb(Sj + e * rs, S[e], bf);
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
    gdn_step_out<XF>(a, g, i, j, y, XF && act ? a.signs[(size_t)g * dv + j] : 1.0f, xo);
}

template <int KMAX>
static void launch_rec(const tc_gdn_step_args *a, int C, int cs) {
    const dim3 grid((unsigned)a->n_v, (unsigned)a->n), block((unsigned)((a->dv + 31) / 32 * 32));
    if (a->state_bf16) {
        if (cs > 0) tc_launch(k_gdn_step_rec<KMAX, true, true>, grid, block, 0, (unsigned)cs, *a, C);
        else tc_launch(k_gdn_step_rec<KMAX, false, true>, grid, block, 0, 1, *a, C);
    } else {
        if (cs > 0) tc_launch(k_gdn_step_rec<KMAX, true, false>, grid, block, 0, (unsigned)cs, *a, C);
        else tc_launch(k_gdn_step_rec<KMAX, false, false>, grid, block, 0, 1, *a, C);
    }
}

/* ------------------------------------------------ GDN decode step, one kernel
 * k_gdn_step_fused: CTA (output slot g, session i) of 128 threads does the whole step
 * of value head p (the math of k_gdn_step_conv + k_gdn_step_rec; the state sums in
 * another order):
 *  - Loads, all issued right after the PDL wait: the thread's block of the state,
 *    the conv inputs, states and weights of its channels, a, b, dt_bias, ssm_a, z,
 *    norm and (XF) its output sign.
 *  - Conv + SiLU: thread t owns channel t of the key head's q and k (t < dk) and of
 *    the value head's v (t < dv). q and k are L2-normalised (q also by 1/sqrt(dk)) as
 *    in k_gdn_step_conv (same warps, same sums: the same floats) and kept in shared
 *    memory; v goes to the column's threads by shuffles. The r = nv/nk value heads
 *    of a key head each compute its q and k (cheap), so no CTA waits for another.
 *  - Conv state: the v channels' rows are shifted by this CTA (it alone reads them).
 *    The q/k channels' rows are read by the r CTAs of the key head, so only the last
 *    of them to finish reading shifts them: each CTA, after its reads were consumed
 *    (__syncthreads), has thread 0 fence and atomicAdd cnt[i][kh]; the one that gets
 *    r - 1 (no CTA ever waits for another) resets it to 0 and, after a fence,
 *    writes the shifted rows at its end. The counters (a zeroed device buffer of
 *    GDN_CNT ints, allocated once) are 0 again after every step.
 *  - State update: thread t = 4 cg + rg owns columns 4cg..4cg+3 (cg = t / 4) of rows
 *    rg*RPT .. rg*RPT + RPT-1 (rg = t % 4, RPT = KMAX/4) in registers: 16-byte loads
 *    (a warp instruction reads 4 rows x 128 contiguous bytes); decay, then kv and sq
 *    for its 4 columns and kq over its rows, summed over the quad's 4 row groups with
 *    two xor-shuffles (the same sums in all 4 lanes); d = (v - kv) * beta; S += k d^T
 *    stored back; o = sq + kq * d. Thread t's output column is j = t (its rg-th).
 *  - Gated RMSNorm over the dv columns, then gdn_step_out (grouped slot, the
 *    Hadamard in the CTA or across the cluster, the quantised activation) as the
 *    two-kernel path.
 * Shared memory: q and k as 4 groups of RPT rows, each group padded by 4 floats
 * (the quad's 4 lanes read 4 different 16-byte bank groups), the warps' sums, xo (the
 * output stage), the last-CTA flag. dk <= 128, dv <= 128 with dv % 4 == 0, conv_k <= 4.
 */
#define GDN_CNT 16384 /* sessions x key heads the counter buffer covers */
/* the counters: the context's gdn_cnt (GDN_CNT ints, zeroed, allocated at the first
 * step that is not being captured, kept with the context) */

/* conv of one channel: K-1 state values st and their weights wt (K <= 4), the
 * input x and its weight wl, then SiLU; the sums of k_gdn_step_conv in the same order */
__device__ __forceinline__ float gdn_conv1(const float st[3], const float wt[3], float wl, float x,
                                           int K) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 3; j++)
        if (j < K - 1) s += wt[j] * st[j];
    s += wl * x;
    return s / (1.0f + expf(-s));
}

/* the K-1 conv-state values of channel ch (state rows [K-1][C]), their weights, and
 * the input's weight (the last of the channel's K) */
__device__ __forceinline__ void gdn_conv_ld(const float *cs, const float *w, size_t C, int ch,
                                            int K, bool on, float st[3], float wt[3], float *wl) {
#pragma unroll
    for (int j = 0; j < 3; j++) {
        st[j] = on && j < K - 1 ? cs[(size_t)j * C + ch] : 0.0f;
        wt[j] = on && j < K - 1 ? w[(size_t)ch * K + j] : 0.0f;
    }
    *wl = on ? w[(size_t)ch * K + K - 1] : 0.0f;
}

/* the window after a row: row j <- row j+1 (j + 1 < K-1), row K-2 <- the row's x */
__device__ __forceinline__ void gdn_conv_next(float st[3], int K, float x) {
#pragma unroll
    for (int j = 0; j < 3; j++) st[j] = j + 1 < K - 1 ? st[j + 1] : (j == K - 2 ? x : st[j]);
}

/* gdn_conv_ld with the window from shared memory (w: [3][128], the thread's column t) */
__device__ __forceinline__ void gdn_conv_ld2(const float (*w)[128], const float *cw, int ch, int t, int K,
                                             bool on, float st[3], float wt[3], float *wl) {
#pragma unroll
    for (int j = 0; j < 3; j++) {
        st[j] = on && j < K - 1 ? w[j][t] : 0.0f;
        wt[j] = on && j < K - 1 ? cw[(size_t)ch * K + j] : 0.0f;
    }
    *wl = on ? cw[(size_t)ch * K + K - 1] : 0.0f;
}

/* channel ch's K-1 conv-state rows from the window st */
__device__ __forceinline__ void gdn_conv_put(float *cs, size_t C, int ch, int K, const float st[3]) {
#pragma unroll
    for (int j = 0; j < 3; j++)
        if (j < K - 1) cs[(size_t)j * C + ch] = st[j];
}

/* one 16-byte asynchronous copy global -> shared (cp.async, no registers held) */
__device__ __forceinline__ void gdn_cp16(void *dst, const void *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}

/* sum over j = t, t + 128, ... < k of w[j] x[j] (w: k elements of a dense kind) */
__device__ __forceinline__ float gdn_dot(const uint8_t *w, int kind, const float *x, int k, int t) {
    float s = 0.0f;
    if (kind == TC_F32) {
        for (int j = t; j < k; j += 128) s = fmaf(((const float *)w)[j], x[j], s);
    } else if (kind == TC_F16) {
        for (int j = t; j < k; j += 128) s = fmaf(tc_ld_f16(w + 2 * j), x[j], s);
    } else {
        for (int j = t; j < k; j += 128) s = fmaf(tc_ld_bf16(w + 2 * j), x[j], s);
    }
    return s;
}

/* AB: the a/b projections in the kernel. Dynamic shared memory: the session's x row
 * (k floats), then row p of ab_w[0] and of ab_w[1] (k elements each), copied with
 * cp.async right after the state loads (registers stay free for the state); each
 * thread sums j = t, t+128, ..., then the warps as for the norms. */
template <int KMAX, bool XF, bool AB, bool BF, bool MR>
__global__ void __launch_bounds__(128, KMAX > 64 ? 2 : 3) k_gdn_step_fused(tc_gdn_step_args a, int C,
                                                           int *__restrict__ cnt) {
    tc_pdl_trigger();
    tc_pdl_wait();
    constexpr int RPT = KMAX / 4, RS = RPT + 4;
    extern __shared__ __align__(16) uint8_t abs_[]; /* AB: x, row p of W_a, of W_b */
    __shared__ __align__(16) float sqk[2][4 * RS]; /* q, k: row e at (e / RPT) * RS + e % RPT */
    __shared__ float red[5][4]; /* per warp: |q|^2, |k|^2, |o|^2, a, b partial sums */
    __shared__ float xo[128];
    __shared__ float qkn[MR ? 3 : 2][3][128]; /* q, k (MR: and v): the windows after the row */
    __shared__ int last;
    const int g = blockIdx.x, i = blockIdx.y, t = threadIdx.x, lane = t & 31, w = t >> 5;
    const int dk = a.dk, dv = a.dv, nk = a.n_k, nv = a.n_v, r = nv / nk, K = a.conv_k;
    const int p = a.out_grouped ? (g % r) * nk + g / r : g;
    const int kh = a.v_tiled ? p % nk : p / r;
    const int cg = t >> 2, rg = t & 3;
    const bool colok = 4 * cg < dv, tq = t < dk, tv = t < dv;

    /* the state block first (the longest wait): S[e] = row rg*RPT + e, columns 4cg.. */
    constexpr bool bf = BF; /* bf16 storage (a.state_bf16): 8-byte loads of 4 columns */
    const size_t rs = (size_t)dv * gdn_ses(bf); /* bytes between rows */
    uint8_t *Sb = (uint8_t *)a.state[i] + ((size_t)p * dk * dv + (size_t)rg * RPT * dv + 4 * cg) * gdn_ses(bf);
    asm volatile("" : "+l"(Sb)); /* opaque: one base address, not RPT live ones */
    float4 S[RPT];
#pragma unroll
    for (int e = 0; e < RPT; e++)
        S[e] = colok && rg * RPT + e < dk ? gdn_ld4b(Sb + e * rs, bf) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    /* AB: x and the two weight rows to shared memory, asynchronously */
    const int kab = AB ? (int)a.ab_w[0].k : 0, kind = a.ab_w[0].kind;
    const int es = kind == TC_F32 ? 4 : 2;
    float *xs = (float *)abs_;
    uint8_t *was = abs_ + (size_t)kab * 4, *wbs = was + (size_t)kab * es;
    if (AB) {
        const uint8_t *xg = (const uint8_t *)(a.ab_x + (size_t)i * a.ab_x_stride);
        const uint8_t *wag = a.ab_w[0].data + (size_t)p * a.ab_w[0].row_bytes;
        const uint8_t *wbg = a.ab_w[1].data + (size_t)p * a.ab_w[1].row_bytes;
        for (int c = t; c < kab / 4; c += 128) gdn_cp16(xs + 4 * c, xg + 16 * c);
        for (int c = t; c < kab * es / 16; c += 128) {
            gdn_cp16(was + 16 * c, wag + 16 * c);
            gdn_cp16(wbs + 16 * c, wbg + 16 * c);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    const int chq = kh * dk + t, chk = nk * dk + kh * dk + t, chv = 2 * nk * dk + p * dv + t;
    float *cst = a.conv_state[i];
    const float dtb = a.dt_bias[p], sa = a.ssm_a[p];
    const float nm = tv ? a.norm[t] : 0.0f;
    const float sgn = XF && tv ? a.signs[(size_t)g * dv + t] : 1.0f;
    const int R = MR ? a.rows : 1;
    int old = 0;
    for (int rr = 0; rr < R; rr++) {
    /* row ri: session i's, or (MR) row rr of the one session's rows (n = 1); the state
     * stays in registers from row to row, the conv windows in qkn */
    const size_t ri = (size_t)i + (size_t)rr;
    /* the thread's q, k, v channels: their conv windows (the conv state; MR: after the
     * first row the window the last row left) and weights */
    float stq[3], stk[3], stv[3], wq[3], wk[3], wv[3], lq, lk, lv;
    if (!MR || rr == 0) {
        gdn_conv_ld(cst, a.conv_w, (size_t)C, chq, K, tq, stq, wq, &lq);
        gdn_conv_ld(cst, a.conv_w, (size_t)C, chk, K, tq, stk, wk, &lk);
        gdn_conv_ld(cst, a.conv_w, (size_t)C, chv, K, tv, stv, wv, &lv);
    } else {
        gdn_conv_ld2(qkn[0], a.conv_w, chq, t, K, tq, stq, wq, &lq);
        gdn_conv_ld2(qkn[1], a.conv_w, chk, t, K, tq, stk, wk, &lk);
        gdn_conv_ld2(qkn[2 % (MR ? 3 : 2)], a.conv_w, chv, t, K, tv, stv, wv, &lv);
    }
    const float *xr = a.qkv + ri * a.qkv_stride;
    const float xq = tq ? xr[chq] : 0.0f, xk = tq ? xr[chk] : 0.0f, xv = tv ? xr[chv] : 0.0f;
    float ax = AB ? 0.0f : a.a[ri * a.ab_stride + p];
    float bx = AB ? 0.0f : a.b[ri * a.ab_stride + p];
    const float zz = tv ? a.z[ri * a.z_stride + (size_t)p * dv + t] : 0.0f;
    if (AB && rr > 0) { /* the row's x (the weight rows stay; the last row's reads are done) */
        const uint8_t *xg = (const uint8_t *)(a.ab_x + ri * a.ab_x_stride);
        for (int c = t; c < kab / 4; c += 128) gdn_cp16(xs + 4 * c, xg + 16 * c);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    /* conv + SiLU; q and k L2 norms as k_gdn_step_conv; the windows moved on by the row */
    float cq = tq ? gdn_conv1(stq, wq, lq, xq, K) : 0.0f;
    float ck = tq ? gdn_conv1(stk, wk, lk, xk, K) : 0.0f;
    const float cv = tv ? gdn_conv1(stv, wv, lv, xv, K) : 0.0f;
    gdn_conv_next(stq, K, xq);
    gdn_conv_next(stk, K, xk);
    gdn_conv_next(stv, K, xv);
    if (rr == R - 1 && tv) gdn_conv_put(cst, (size_t)C, chv, K, stv); /* the v channels: ours alone */
    if (tq) { /* the q/k windows, for the last CTA's write (registers stay free) and the next row */
#pragma unroll
        for (int j = 0; j < 3; j++) {
            qkn[0][j][t] = stq[j];
            qkn[1][j][t] = stk[j];
        }
    }
    if (MR && rr < R - 1 && tv) {
#pragma unroll
        for (int j = 0; j < 3; j++) qkn[2 % (MR ? 3 : 2)][j][t] = stv[j];
    }
    float pa = 0.0f, pb = 0.0f;
    if (AB) { /* the copies landed (this thread's; the barrier: everyone's) */
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        pa = tc_warp_sum(gdn_dot(was, kind, xs, kab, t));
        pb = tc_warp_sum(gdn_dot(wbs, kind, xs, kab, t));
    }
    {
        const float ssq = tc_warp_sum(cq * cq), ssk = tc_warp_sum(ck * ck);
        if (lane == 0) {
            red[0][w] = ssq;
            red[1][w] = ssk;
            red[3][w] = pa;
            red[4][w] = pb;
        }
    }
    __syncthreads(); /* also: every conv-state value this CTA reads has been consumed */
    {
        float tq2 = 0.0f, tk2 = 0.0f;
        for (int u = 0; u < 4; u++) {
            tq2 += red[0][u];
            tk2 += red[1][u];
        }
        if (AB) {
            for (int u = 0; u < 4; u++) {
                ax += red[3][u];
                bx += red[4][u];
            }
        }
        const float iq = (float)(1.0 / sqrt((double)tq2 + 1e-6)) * (1.0f / sqrtf((float)dk));
        const float ik = (float)(1.0 / sqrt((double)tk2 + 1e-6));
        cq *= iq;
        ck *= ik;
    }
    if (t < KMAX) {
        const int e = (t / RPT) * RS + t % RPT;
        sqk[0][e] = tq ? cq : 0.0f;
        sqk[1][e] = tq ? ck : 0.0f;
    }
    /* v of the thread's 4 columns from the quad that computed them */
    float v4[4];
#pragma unroll
    for (int c = 0; c < 4; c++) v4[c] = __shfl_sync(0xffffffffu, cv, (lane & ~3) | c);
    ax += dtb;
    const float sp = ax > 20.0f ? ax : log1pf(expf(ax));
    const float decay = expf(sa * sp);
    const float beta = 1.0f / (1.0f + expf(-bx));
    if (t == 0 && rr == 0) { /* release: this CTA's conv-state reads come before its count */
        __threadfence();
        old = atomicAdd(cnt + (size_t)i * nk + kh, 1); /* used only at the end */
    }
    __syncthreads(); /* q, k in shared memory */

    /* state update */
    float kv[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sq[4] = {0.0f, 0.0f, 0.0f, 0.0f}, kq = 0.0f;
    const float *qs = sqk[0] + rg * RS, *ks = sqk[1] + rg * RS;
#pragma unroll
    for (int e = 0; e < RPT; e++) {
        const float kk = ks[e], qq = qs[e];
        float *s4 = &S[e].x;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const float s = s4[c] * decay;
            s4[c] = s;
            kv[c] = fmaf(s, kk, kv[c]);
            sq[c] = fmaf(s, qq, sq[c]);
        }
        kq = fmaf(kk, qq, kq);
    }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
#pragma unroll
        for (int c = 0; c < 4; c++) {
            kv[c] += __shfl_xor_sync(0xffffffffu, kv[c], o);
            sq[c] += __shfl_xor_sync(0xffffffffu, sq[c], o);
        }
        kq += __shfl_xor_sync(0xffffffffu, kq, o);
    }
    float d[4], oj = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        d[c] = (v4[c] - kv[c]) * beta;
        const float oc = sq[c] + kq * d[c];
        if (c == rg) oj = oc;
    }
    const bool fin = rr == R - 1; /* the state written once, after the last row */
#pragma unroll
    for (int e = 0; e < RPT; e++) {
        const float kk = ks[e];
        float *s4 = &S[e].x;
#pragma unroll
        for (int c = 0; c < 4; c++) s4[c] = fmaf(kk, d[c], s4[c]);
        if (fin) {
            if (colok && rg * RPT + e < dk) gdn_st4b(Sb + e * rs, S[e], bf);
        } else if (bf) {
            S[e] = gdn_rnd4b(S[e]); /* as stored and read back by the next row's step */
        }
    }

    /* gated RMSNorm over the dv columns (thread t = column t) */
    if (!tv) oj = 0.0f;
    {
        const float ss = tc_warp_sum(oj * oj);
        if (lane == 0) red[2][w] = ss;
    }
    __syncthreads();
    float tot = 0.0f;
    for (int u = 0; u < 4; u++) tot += red[2][u];
    float y = 0.0f;
    if (tv) {
        const float inv = 1.0f / sqrtf(tot / (float)dv + a.eps);
        y = oj * inv * nm * tc_silu(zz);
    }
    gdn_step_out<XF>(a, g, (int)ri, t, y, sgn, xo);
    } /* rows */

    /* the q/k conv-state rows, by the last of the key head's r CTAs */
    if (t == 0) {
        last = old == r - 1;
        if (last) {
            cnt[(size_t)i * nk + kh] = 0;
            __threadfence(); /* acquire: the writes below come after every CTA's count */
        }
    }
    __syncthreads();
    if (last && tq) {
        const float nq[3] = {qkn[0][0][t], qkn[0][1][t], qkn[0][2][t]};
        const float nk_[3] = {qkn[1][0][t], qkn[1][1][t], qkn[1][2][t]};
        gdn_conv_put(cst, (size_t)C, chq, K, nq);
        gdn_conv_put(cst, (size_t)C, chk, K, nk_);
    }
}

#define GDN_AB_SMEM (96 * 1024) /* the AB kernels' dynamic shared memory limit */

template <int KMAX, bool XF, bool AB, bool BF, bool MR>
static void launch_fused5(const tc_gdn_step_args *a, int C, unsigned cs, size_t smem) {
    if (AB) {
        if (tc_attr_once((const void *)k_gdn_step_fused<KMAX, XF, AB, BF, MR>, GDN_AB_SMEM))
            cudaFuncSetAttribute(k_gdn_step_fused<KMAX, XF, AB, BF, MR>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 GDN_AB_SMEM);
    }
    tc_launch(k_gdn_step_fused<KMAX, XF, AB, BF, MR>, dim3((unsigned)a->n_v, (unsigned)a->n), dim3(128),
              smem, cs, *a, C, tc_cur->gdn_cnt);
}
template <int KMAX, bool XF, bool AB, bool BF>
static void launch_fused4(const tc_gdn_step_args *a, int C, unsigned cs, size_t smem) {
    if (a->rows > 1) launch_fused5<KMAX, XF, AB, BF, true>(a, C, cs, smem);
    else launch_fused5<KMAX, XF, AB, BF, false>(a, C, cs, smem);
}
template <int KMAX, bool XF, bool AB>
static void launch_fused3(const tc_gdn_step_args *a, int C, unsigned cs, size_t smem) {
    if (a->state_bf16) launch_fused4<KMAX, XF, AB, true>(a, C, cs, smem);
    else launch_fused4<KMAX, XF, AB, false>(a, C, cs, smem);
}

/* cs > 0: the output transform in the kernel (cluster of cs CTAs when > 1); ab: the
 * a/b projections in it (smem bytes of x and the two weight rows) */
template <int KMAX>
static void launch_fused(const tc_gdn_step_args *a, int C, int cs, bool ab) {
    const size_t smem = ab ? (size_t)a->ab_w[0].k * (4 + 2 * (a->ab_w[0].kind == TC_F32 ? 4 : 2)) : 0;
    const unsigned cl = cs > 1 ? (unsigned)cs : 1;
    if (cs > 0) {
        if (ab) launch_fused3<KMAX, true, true>(a, C, cl, smem);
        else launch_fused3<KMAX, true, false>(a, C, cl, smem);
    } else {
        if (ab) launch_fused3<KMAX, false, true>(a, C, cl, smem);
        else launch_fused3<KMAX, false, false>(a, C, cl, smem);
    }
}

/* the one-kernel step takes the shape, and its counters exist (allocated, zeroed, at
 * the first call that is not being captured into a graph) */
static bool fused_ok(const tc_gdn_step_args *a) {
    if (tc_ops_old(tc_cur) || a->dk > 128 || a->dv > 128 || a->dv % 4 || a->conv_k > 4 ||
        (size_t)a->n * (size_t)a->n_k > GDN_CNT)
        return false;
    if (!tc_cur->gdn_cnt) {
        cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(tc_cur->stream, &cap) != cudaSuccess ||
            cap != cudaStreamCaptureStatusNone) {
            cudaGetLastError();
            return false;
        }
        tc_cur->gdn_cnt = (int *)tc_malloc(tc_cur, GDN_CNT * sizeof(int)); /* zeroed; freed with the context */
        if (!tc_cur->gdn_cnt) return false;
    }
    return true;
}

/* the a/b projections fit the one-kernel step: both matrices dense of one kind,
 * rows (and x) 16-byte aligned, k % 8 == 0, x and the two rows in GDN_AB_SMEM */
static bool ab_kernel_ok(const tc_gdn_step_args *a) {
    const tc_mat *w = a->ab_w;
    const int kind = w[0].kind;
    if ((kind != TC_F32 && kind != TC_F16 && kind != TC_BF16) || w[1].kind != kind) return false;
    const size_t es = kind == TC_F32 ? 4 : 2, k = (size_t)w[0].k;
    return k > 0 && k % 8 == 0 && k * (4 + 2 * es) <= GDN_AB_SMEM &&
           ((uintptr_t)w[0].data & 15) == 0 && ((uintptr_t)w[1].data & 15) == 0 &&
           w[0].row_bytes % 16 == 0 && w[1].row_bytes % 16 == 0 && ((uintptr_t)a->ab_x & 15) == 0 &&
           a->ab_x_stride % 4 == 0;
}

/* the output stage fits the rec kernel: blocks within a CTA or across <= 8 CTAs */
static int xf_cluster(const tc_gdn_step_args *a) {
    const int B = a->block, dv = a->dv;
    if (!a->signs || B < 2 || (B & (B - 1)) || (a->n_v * dv) % B) return 0;
    if (B <= dv) return dv % B == 0 ? 1 : 0;
    if (B % dv || B / dv > 8 || a->n_v % (B / dv)) return 0;
    return B / dv;
}

extern "C" void tc_gdn_step(tc_ctx *cx, const tc_gdn_step_args *a) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_GDN);
    if (a->n <= 0) return;
    const int VW = a->n_v * a->dv, R = a->rows > 1 ? a->rows : 1;
    if (a->dk > 128 || a->dv > 256 || a->dk < 1 || a->dv < 1 || a->conv_k < 1 || a->n > 65535 ||
        a->n_k < 1 || a->n_v % a->n_k ||
        (a->ab_w[0].data && (!a->ab_w[1].data || !a->ab_x || a->ab_w[0].n != a->n_v ||
                             a->ab_w[1].n != a->n_v || a->ab_w[0].k != a->ab_w[1].k)) ||
        (R > 1 && a->n != 1) ||
        (a->act.q && (a->act.k != VW || a->act.batch != (size_t)a->n * R || VW % 128)) ||
        (a->signs && !xf_cluster(a) && a->out_stride != (size_t)VW)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int C = 2 * a->n_k * a->dk + VW;
    const int cs = xf_cluster(a);
    tc_gdn_step_args b = *a;
    const bool act_in = a->act.q && a->dv % 128 == 0 && (!a->signs || cs);
    if (!act_in) b.act.q = NULL;
    if (a->signs && !cs) b.signs = NULL; /* the transform after the kernel */
    const bool fused = fused_ok(a);
    const bool ab_in = a->ab_w[0].data != NULL;
    const bool ab_k = ab_in && fused && ab_kernel_ok(a);
    if (R > 1 && (!fused || (ab_in && !ab_k) || (a->signs && !cs) || (a->act.q && !act_in))) {
        /* the rows one step after another (the state advanced by each) */
        for (int r = 0; r < R; r++) {
            tc_gdn_step_args o = *a;
            o.rows = 1;
            o.qkv += (size_t)r * a->qkv_stride;
            o.z += (size_t)r * a->z_stride;
            o.a += (size_t)r * a->ab_stride;
            o.b += (size_t)r * a->ab_stride;
            o.out += (size_t)r * a->out_stride;
            o.work += (size_t)r * C;
            if (ab_in) o.ab_x += (size_t)r * a->ab_x_stride;
            if (a->act.q) {
                o.act.q += (size_t)r * VW * 2;
                o.act.sx += (size_t)r * (VW / 128);
                o.act.corr += (size_t)r * (VW / 32);
                o.act.batch = 1;
            }
            tc_gdn_step(cx, &o);
        }
        return;
    }
    if (ab_in && !ab_k) { /* the projections first, into a and b */
        float *y[2] = {(float *)a->a, (float *)a->b};
        const size_t ys[2] = {a->ab_stride, a->ab_stride};
        tc_matmul_multi(tc_cur, 2, a->ab_w, a->ab_x, (size_t)a->n, a->ab_x_stride, y, ys);
    }
    if (fused) {
        if (a->dk <= 32) launch_fused<32>(&b, C, b.signs ? cs : 0, ab_k);
        else if (a->dk <= 64) launch_fused<64>(&b, C, b.signs ? cs : 0, ab_k);
        else launch_fused<128>(&b, C, b.signs ? cs : 0, ab_k);
    } else {
        const int w = a->dk > a->dv ? a->dk : a->dv;
        tc_launch(k_gdn_step_conv, dim3((unsigned)(2 * a->n_k + a->n_v), (unsigned)a->n),
                  dim3((unsigned)((w + 31) / 32 * 32)), 0, 1, *a, C);
        if (a->dk <= 32) launch_rec<32>(&b, C, b.signs ? cs : 0);
        else if (a->dk <= 64) launch_rec<64>(&b, C, b.signs ? cs : 0);
        else launch_rec<128>(&b, C, b.signs ? cs : 0);
    }
    if (a->signs && !cs) {
        const bool fq = tc_act_in_fwht(a->act.q ? &a->act : NULL, (size_t)a->n, (size_t)VW,
                                       (size_t)a->block, a->signs);
        tc_fwht(a->out, NULL, a->out, (size_t)a->n, (size_t)VW, (size_t)a->block, a->signs, 0,
                fq ? &a->act : NULL);
        if (a->act.q && !fq) tc_quantize(tc_cur, a->out, (size_t)VW, &a->act);
    } else if (a->act.q && !act_in) {
        tc_quantize(tc_cur, a->out, a->out_stride, &a->act);
    }
}
