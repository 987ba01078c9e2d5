/*
 * tc_attn_decode.cu - split-K decode attention (flash-decoding, merge + sigmoid gate):
 * the GQA kernel (default), the old per-query-head kernels (shapes the GQA kernel
 * refuses, and the tests' reference: tc_set_attn_old), and the batched form of a batch
 * step (one launch per op for all its sequences).
 */
#include "kernels/cuda/attn.cuh"

/* ------------------------------------------------ split-K decode attention */

/* Positions per split: ATT_SPAN_MIN (each of the 4 warps walks 8 positions, so a short
 * cache still spreads over many CTAs; with 256 a 640-position step took 135 us for 24
 * heads on the H200), growing with the cache so there are at most ~ATT_MAX_SPLITS splits
 * (the partials' workspace and the merge stay bounded at 262,144 positions). */
#define ATT_SPAN_MIN 32
#define ATT_MAX_SPLITS 2048

/* CTA (head, split): the split's span positions, its merged (M, L, acc)
 * written to part[h][split] as hd + 2 floats (l = 0: nothing there). */
template <typename KT, typename VT>
__global__ void __launch_bounds__(ATT_WARPS * 32) k_attn_split(const float *__restrict__ q,
        const KT *__restrict__ kc, const VT *__restrict__ vc, float *__restrict__ part,
        int pos0, const int *__restrict__ dpos, int nh, int nkv, int hd, float scale, int splits, int span) {
    tc_pdl_trigger();
    tc_pdl_wait();
    if (dpos) pos0 = *dpos;
    const int h = blockIdx.x, sp = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int np = pos0 + 1, p0 = sp * span, p1 = min(np, p0 + span);
    float *pp = part + ((size_t)h * splits + sp) * (size_t)(hd + 2);
    if (p0 >= np) {
        if (threadIdx.x == 0) pp[1] = 0.0f; /* l = 0: nothing here */
        return;
    }
    att_warp w;
    att_begin(w, q + (size_t)h * hd, hd, lane);
    att_walk(w, kc, vc, p0 + warp, p1, (size_t)nkv * hd, h / (nh / nkv), hd, scale, lane);
    att_merge_warps(w, hd, pp + 2, false, pp, pp + 1);
}

/* CTA per head: merge the splits' (m, l, acc), then the sigmoid gate. */
__global__ void k_attn_merge(const float *__restrict__ part, const float *__restrict__ gate,
                             float *__restrict__ out, int pos0, const int *__restrict__ dpos,
                             int hd, int splits, int span) {
    tc_pdl_trigger();
    tc_pdl_wait();
    if (dpos) pos0 = *dpos;
    const int h = blockIdx.x;
    const int used = min(splits, pos0 / span + 1);
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
        if (gate) v *= tc_sigmoid(gate[(size_t)h * hd + j]);
        out[(size_t)h * hd + j] = v;
    }
}

/* ------------------------------------- GQA split-K decode attention (default)
 *
 * CTA (kv head kvh, chunk of its query heads, span of positions): the CTA streams the
 * span's K and V rows of head kvh once and folds them into the online-softmax states of
 * all the chunk's query heads (GC <= AG_GMAX of them; a group of G = n_head / n_head_kv
 * heads is cut into hch = ceil(G / AG_GMAX) chunks of ceil(G / hch)), so each row is read
 * once per group instead of once per query head. Lane layout: a row of one head is
 * hd / AG_VEC lanes of AG_VEC (8) consecutive values (one 16-byte load for f16 / bf16,
 * two for f32; q8_0: the lane's 8 bytes and its block's scale), so a warp holds
 * 32 * 8 / hd rows at once; each such lane group ("walker") keeps its own (m, l, acc)
 * per query head and walks ag_unroll consecutive positions per step (the loads of all
 * its K and V rows issued before any arithmetic). At hd 256 (f16 / bf16 / q8_0: the 27B)
 * the prefetching walk instead: 2 positions per step, the next step's rows loading during
 * this step's arithmetic, the scores summed by a transposing butterfly (ag_fold2),
 * compiled for 3-4 CTAs per SM. The walkers' states are merged in shared memory and
 * written as the old kernel's partials (M, L, acc[hd]) per (query head, split).
 *
 * The span depends on the position only, not on the grid: span = ceil(np / splits)
 * rounded up to a multiple of AG_SPAN_MIN (np = pos0 + 1 positions), so every split
 * below ceil(np / span) has positions and the others exit; the merge recomputes it from
 * the same device word. The grid (splits) is fixed by max_len and the shape, so a
 * captured graph replays at any position. */
#define AG_WARPS 4
#define AG_VEC 8
#define AG_GMAX 8
#define AG_SPAN_MIN 16
#define AG_MAX_SPLITS 1024
#define AG_MERGE_THREADS 256

__host__ __device__ __forceinline__ int ag_span(int np, int splits) {
    int per = (np + splits - 1) / splits;
    per = (per + AG_SPAN_MIN - 1) / AG_SPAN_MIN * AG_SPAN_MIN;
    return per < AG_SPAN_MIN ? AG_SPAN_MIN : per;
}

/* AG_VEC values of one head's row held by a lane: load(c, i) reads values i .. i + 7
 * (i a multiple of 8; 16-byte aligned for f32 / f16 / bf16), get(f) converts them, d()
 * is the factor they are multiplied by (the q8_0 block's scale; 1 for the others). */
template <typename T> struct ag_row;
template <> struct ag_row<float> {
    float4 a, b;
    __device__ __forceinline__ void load(const float *__restrict__ c, size_t i) {
        a = __ldg((const float4 *)(c + i));
        b = __ldg((const float4 *)(c + i + 4));
    }
    __device__ __forceinline__ void zero() { a = b = make_float4(0.f, 0.f, 0.f, 0.f); }
    __device__ __forceinline__ void get(float f[AG_VEC]) const {
        f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
        f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
    }
    static constexpr bool scaled = false;
    __device__ __forceinline__ float d() const { return 1.0f; }
};
template <> struct ag_row<__half> {
    uint4 r;
    __device__ __forceinline__ void load(const __half *__restrict__ c, size_t i) {
        r = __ldg((const uint4 *)(c + i));
    }
    __device__ __forceinline__ void zero() { r = make_uint4(0u, 0u, 0u, 0u); }
    __device__ __forceinline__ void get(float f[AG_VEC]) const {
        const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 t = __half22float2(*(const __half2 *)&w[k]);
            f[2 * k] = t.x;
            f[2 * k + 1] = t.y;
        }
    }
    static constexpr bool scaled = false;
    __device__ __forceinline__ float d() const { return 1.0f; }
};
template <> struct ag_row<__nv_bfloat16> {
    uint4 r;
    __device__ __forceinline__ void load(const __nv_bfloat16 *__restrict__ c, size_t i) {
        r = __ldg((const uint4 *)(c + i));
    }
    __device__ __forceinline__ void zero() { r = make_uint4(0u, 0u, 0u, 0u); }
    __device__ __forceinline__ void get(float f[AG_VEC]) const {
        const unsigned w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int k = 0; k < 4; k++) { /* bf16 -> f32 is exact: the bits shifted up */
            f[2 * k] = __uint_as_float(w[k] << 16);
            f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
        }
    }
    static constexpr bool scaled = false;
    __device__ __forceinline__ float d() const { return 1.0f; }
};
template <> struct ag_row<att_q8> {
    unsigned short s;  /* the block's fp16 scale bits */
    unsigned short w[4]; /* the 8 int8 q, two per 16-bit word (little-endian) */
    __device__ __forceinline__ void load(const att_q8 *__restrict__ c, size_t i) {
        const att_q8 *b = &att_q8_block(c, i);
        s = __ldg(&b->d);
        const unsigned short *qs = (const unsigned short *)(b->q + att_q8_slot(i)); /* even slot */
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = __ldg(qs + k);
    }
    __device__ __forceinline__ void zero() { s = w[0] = w[1] = w[2] = w[3] = 0; }
    __device__ __forceinline__ void get(float f[AG_VEC]) const {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            f[2 * k] = (float)(int8_t)(w[k] & 0xff);
            f[2 * k + 1] = (float)(int8_t)(w[k] >> 8);
        }
    }
    static constexpr bool scaled = true;
    __device__ __forceinline__ float d() const { return __half2float(__ushort_as_half(s)); }
};

template <typename T> struct ag_unroll { static constexpr int u = 4; };
template <> struct ag_unroll<float> { static constexpr int u = 2; };
/* CTAs per SM the prefetching kernel (PF: hd 256, f16 / bf16 / q8_0) is compiled for (its
 * register cap, 65,536 / (128 n)): the other walk takes 186-226 registers at GC 6 (2 CTAs,
 * 8 warps per SM: too few loads in flight for a batch step's CTAs); ptxas -v: 168 at GC 6
 * (16-44 bytes spilled), GC 8 at 3 CTAs spilled 100-312 bytes */
template <typename T, int GC> struct ag_minb { static constexpr int n = GC >= 8 ? 2 : GC <= 4 ? 4 : 3; };
template <int GC> struct ag_minb<att_q8, GC> { static constexpr int n = GC >= 8 ? 2 : 3; };

/* Rows of positions pb .. pb + U - 1 of the lane's AG_VEC columns (zeros past p1). */
template <typename T, int U>
__device__ __forceinline__ void ag_load(ag_row<T> (&kr)[U], ag_row<T> (&vr)[U], const T *__restrict__ kc,
                                        const T *__restrict__ vc, int pb, int p1, size_t kvw, size_t col) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (pb + u < p1) {
            const size_t i = (size_t)(pb + u) * kvw + col;
            kr[u].load(kc, i);
            vr[u].load(vc, i);
        } else {
            kr[u].zero();
            vr[u].zero();
        }
    }
}

/* The loaded rows of positions pb .. pb + U - 1 (< p1) folded into the walker's states:
 * scores (the lane group's partial dot products summed by shuffles: every lane of the
 * warp calls it), the running max, the weighted V. */
template <typename T, int GC, int U>
__device__ __forceinline__ void ag_fold(const ag_row<T> (&kr)[U], const ag_row<T> (&vr)[U], int pb, int p1,
                                        int lpr, float scale, const float (&qr)[GC][AG_VEC],
                                        float (&acc)[GC][AG_VEC], float (&m)[GC], float (&l)[GC]) {
    float s[U][GC];
#pragma unroll
    for (int u = 0; u < U; u++) {
        float f[AG_VEC];
        kr[u].get(f);
        const float kd = kr[u].d();
#pragma unroll
        for (int g = 0; g < GC; g++) {
            float t = 0.0f;
#pragma unroll
            for (int e = 0; e < AG_VEC; e++) t = fmaf(qr[g][e], f[e], t);
            s[u][g] = ag_row<T>::scaled ? t * kd : t;
        }
    }
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int g = 0; g < GC; g++)
            for (int o = lpr >> 1; o > 0; o >>= 1)
                s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], o);
    if (pb < p1) { /* lane-group-uniform; position pb is real, so the max is finite */
#pragma unroll
        for (int g = 0; g < GC; g++) {
            float mt = -INFINITY;
#pragma unroll
            for (int u = 0; u < U; u++) {
                s[u][g] = pb + u < p1 ? s[u][g] * scale : -INFINITY;
                mt = fmaxf(mt, s[u][g]);
            }
            if (mt > m[g]) {
                const float c = expf(m[g] - mt); /* 0 on the first step (m = -inf) */
                l[g] *= c;
#pragma unroll
                for (int e = 0; e < AG_VEC; e++) acc[g][e] *= c;
                m[g] = mt;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float f[AG_VEC];
            vr[u].get(f);
            const float vd = vr[u].d();
#pragma unroll
            for (int g = 0; g < GC; g++) {
                const float p = expf(s[u][g] - m[g]); /* 0 for positions past p1 */
                l[g] += p;
                const float pv = ag_row<T>::scaled ? p * vd : p;
#pragma unroll
                for (int e = 0; e < AG_VEC; e++) acc[g][e] = fmaf(pv, f[e], acc[g][e]);
            }
        }
    }
}

/* The prefetching kernel's fold (hd 256: a row of a head is the whole warp, 32 lanes x
 * 8 values): ag_fold for U = 2 positions with the scores summed by a transposing butterfly - the 2 GC
 * partial dot products (slot k = u GC + g, padded to P = 2^LG slots) halved across the
 * lanes at each of the first LG levels (lanes with bit 4 - lev set keep the upper half of
 * the slots and send the lower), so lane l ends with the whole sum of slot l >> (5 - LG):
 * P - 1 + 5 - LG shuffles instead of 5 per slot (16 instead of 60 at GC 6). The lane
 * of slot (u, g) then does that score's softmax step alone (two expf instead of 2 GC + GC),
 * and every lane takes the weights, the rescale factor and the new max of each head from
 * the lanes of its slots (4 GC shuffles). Same arithmetic as ag_fold but the dot products'
 * summation order. */
template <int P> struct ag_lg { static constexpr int v = 1 + ag_lg<P / 2>::v; };
template <> struct ag_lg<1> { static constexpr int v = 0; };
template <int GC> struct ag_slots { static constexpr int p = 2 * GC <= 2 ? 2 : 2 * GC <= 4 ? 4 : 2 * GC <= 8 ? 8 : 16; };

/* t[P] partial sums per lane -> the total over the warp of slot lane >> (5 - LG). */
template <int P>
__device__ __forceinline__ float ag_transpose_sum(float (&t)[P], int lane) {
    constexpr int LG = ag_lg<P>::v;
#pragma unroll
    for (int lev = 0; lev < LG; lev++) {
        const int o = 16 >> lev, half = P >> (lev + 1);
        const bool hi = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < half; i++) {
            const float send = hi ? t[i] : t[i + half];
            const float keep = hi ? t[i + half] : t[i];
            t[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
    float r = t[0];
#pragma unroll
    for (int o = 16 >> LG; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    return r;
}

template <typename T, int GC>
__device__ __forceinline__ void ag_fold2(const ag_row<T> (&kr)[2], const ag_row<T> (&vr)[2], int pb, int p1,
                                         float scale, const float (&qr)[GC][AG_VEC], float (&acc)[GC][AG_VEC],
                                         float (&m)[GC], float (&l)[GC], int lane) {
    constexpr int P = ag_slots<GC>::p, SH = 5 - ag_lg<P>::v;
    float t[P];
#pragma unroll
    for (int u = 0; u < 2; u++) {
        float f[AG_VEC];
        kr[u].get(f);
        const float kd = kr[u].d();
#pragma unroll
        for (int g = 0; g < GC; g++) {
            float d = 0.0f;
#pragma unroll
            for (int e = 0; e < AG_VEC; e++) d = fmaf(qr[g][e], f[e], d);
            t[u * GC + g] = ag_row<T>::scaled ? d * kd : d;
        }
    }
#pragma unroll
    for (int k = 2 * GC; k < P; k++) t[k] = 0.0f;
    const float sum = ag_transpose_sum<P>(t, lane);
    if (pb >= p1) return; /* warp-uniform (one walker per warp) */
    const int k = lane >> SH, u = k >= GC ? 1 : 0, g = k - u * GC; /* this lane's slot; k >= 2 GC: padding */
    const bool real = k < 2 * GC && pb + u < p1;
    const float sc = real ? sum * scale : -INFINITY;
    const int kp = u ? k - GC : k + GC; /* the slot of the other position, same head */
    const float so = __shfl_sync(0xffffffffu, sc, (kp << SH) & 31);
    float mg = m[0];
#pragma unroll
    for (int gg = 1; gg < GC; gg++)
        if (g == gg) mg = m[gg];
    const float mn = fmaxf(mg, fmaxf(sc, so)); /* finite on real slots: position pb is real */
    const float c = expf(mg - mn);             /* 0 on the first step (m = -inf) */
    const float pw = expf(sc - mn);            /* 0 for a position past p1 */
#pragma unroll
    for (int gg = 0; gg < GC; gg++) {
        const float cg = __shfl_sync(0xffffffffu, c, gg << SH);
        const float mng = __shfl_sync(0xffffffffu, mn, gg << SH);
        if (mng > m[gg]) {
            l[gg] *= cg;
#pragma unroll
            for (int e = 0; e < AG_VEC; e++) acc[gg][e] *= cg;
            m[gg] = mng;
        }
    }
#pragma unroll
    for (int u = 0; u < 2; u++) {
        float f[AG_VEC];
        vr[u].get(f);
        const float vd = vr[u].d();
#pragma unroll
        for (int gg = 0; gg < GC; gg++) {
            const float p = __shfl_sync(0xffffffffu, pw, (u * GC + gg) << SH);
            l[gg] += p;
            const float pv = ag_row<T>::scaled ? p * vd : p;
#pragma unroll
            for (int e = 0; e < AG_VEC; e++) acc[gg][e] = fmaf(pv, f[e], acc[gg][e]);
        }
    }
}

/* part[(h * splits + split) * (hd + 2)]: M, L, acc[hd] (unnormalised), as k_attn_split. */
/* B: sequence blockIdx.z of a batch (bt): its position and caches from the device
 * table, its q and partials at the batch strides (B false: bt unused, the code as it
 * was). PF (hd 256, not f32; since 2026-12-04): the prefetching walk - 2 positions per
 * step, the next step's rows loaded before this step's arithmetic (ag_fold2), compiled for
 * ag_minb CTAs per SM; else the walk of ag_unroll positions per step with ag_fold. */
template <typename T, int GC, bool B, bool PF>
__global__ void __launch_bounds__(AG_WARPS * 32, PF ? ag_minb<T, GC>::n : 1) k_attn_gqa(const float *__restrict__ q,
        const T *__restrict__ kc, const T *__restrict__ vc, float *__restrict__ part, int pos0,
        const int *__restrict__ dpos, int nh, int nkv, int hd, float scale, int splits, int hch,
        const tc_attn_bat bt) {
    constexpr int U = PF ? 2 : ag_unroll<T>::u;
    constexpr int NWALK_MAX = AG_WARPS * 32 / 4; /* hd >= 32: at least 4 lanes per row */
    __shared__ float s_acc[GC][AG_WARPS * 32 * AG_VEC];
    __shared__ float s_m[GC][NWALK_MAX], s_l[GC][NWALK_MAX];
    __shared__ float s_w[GC][NWALK_MAX], s_L[GC], s_M[GC];
    tc_pdl_trigger();
    tc_pdl_wait();
    if (B) {
        const tc_attn_seq sq = bt.seqs[blockIdx.z];
        pos0 = sq.pos0;
        kc = (const T *)((const uint8_t *)sq.kcache + (size_t)bt.kv_index * (size_t)sq.n_ctx * bt.k_row);
        vc = (const T *)((const uint8_t *)sq.vcache + (size_t)bt.kv_index * (size_t)sq.n_ctx * bt.v_row);
        q += (size_t)blockIdx.z * bt.q_stride;
        part += (size_t)blockIdx.z * bt.part_stride;
    } else { /* row blockIdx.z of one sequence's rows (bt's strides; zero for one row) */
        if (dpos) pos0 = *dpos;
        pos0 += (int)blockIdx.z;
        q += (size_t)blockIdx.z * bt.q_stride;
        part += (size_t)blockIdx.z * bt.part_stride;
    }
    const int np = pos0 + 1, span = ag_span(np, splits), sp = blockIdx.y;
    const int p0 = sp * span;
    if (p0 >= np) return; /* CTA-uniform: past the position */
    const int p1 = min(np, p0 + span);
    const int kvh = blockIdx.x / hch, ch = blockIdx.x % hch;
    const int G = nh / nkv, gc = (G + hch - 1) / hch;
    const int h0 = kvh * G + ch * gc;
    const int ng = min(gc, (kvh + 1) * G - h0); /* query heads here, <= GC */
    const int lpr = hd / AG_VEC, rpw = 32 / lpr, nwalk = AG_WARPS * rpw;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int lg = lane / lpr, li = lane % lpr;
    const int walker = warp * rpw + lg;
    const size_t kvw = (size_t)nkv * hd;
    const size_t col = (size_t)kvh * hd + (size_t)li * AG_VEC;

    float qr[GC][AG_VEC], acc[GC][AG_VEC], m[GC], l[GC];
#pragma unroll
    for (int g = 0; g < GC; g++) {
#pragma unroll
        for (int e = 0; e < AG_VEC; e++) {
            qr[g][e] = g < ng ? q[(size_t)(h0 + g) * hd + li * AG_VEC + e] : 0.0f;
            acc[g][e] = 0.0f;
        }
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    /* warp-uniform trip count (the shuffles need every lane); a walker whose first
     * position is past p1 only shuffles */
    if constexpr (PF) {
        int pw = p0 + warp * rpw * U;
        ag_row<T> kr[U], vr[U];
        ag_load<T, U>(kr, vr, kc, vc, pw + lg * U, p1, kvw, col);
        for (; pw < p1; pw += nwalk * U) {
            ag_row<T> kn[U], vn[U];
            ag_load<T, U>(kn, vn, kc, vc, pw + nwalk * U + lg * U, p1, kvw, col); /* the next step's */
            ag_fold2<T, GC>(kr, vr, pw + lg * U, p1, scale, qr, acc, m, l, lane);
#pragma unroll
            for (int u = 0; u < U; u++) {
                kr[u] = kn[u];
                vr[u] = vn[u];
            }
        }
    } else {
        for (int pw = p0 + warp * rpw * U; pw < p1; pw += nwalk * U) {
            ag_row<T> kr[U], vr[U];
            ag_load<T, U>(kr, vr, kc, vc, pw + lg * U, p1, kvw, col);
            ag_fold<T, GC, U>(kr, vr, pw + lg * U, p1, lpr, scale, qr, acc, m, l);
        }
    }
    /* the walkers' states merged: value e of lane li of walker w sits at
     * s_acc[g][w * hd + li * 8 + e] = s_acc[g][threadIdx.x * 8 + e] */
#pragma unroll
    for (int g = 0; g < GC; g++) {
#pragma unroll
        for (int e = 0; e < AG_VEC; e++) s_acc[g][threadIdx.x * AG_VEC + e] = acc[g][e];
        if (li == 0) {
            s_m[g][walker] = m[g];
            s_l[g][walker] = l[g];
        }
    }
    __syncthreads();
    if (threadIdx.x < (unsigned)ng) {
        const int g = threadIdx.x;
        float M = -INFINITY, L = 0.0f;
        for (int w = 0; w < nwalk; w++)
            if (s_l[g][w] > 0) M = fmaxf(M, s_m[g][w]);
        for (int w = 0; w < nwalk; w++) {
            const float x = s_l[g][w] > 0 ? expf(s_m[g][w] - M) : 0.0f;
            s_w[g][w] = x;
            L += s_l[g][w] * x;
        }
        s_M[g] = M;
        s_L[g] = L;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < ng * hd; idx += blockDim.x) {
        const int g = idx / hd, j = idx - g * hd;
        float v = 0.0f;
        for (int w = 0; w < nwalk; w++)
            if (s_w[g][w] != 0.0f) v += s_acc[g][w * hd + j] * s_w[g][w];
        float *pp = part + ((size_t)(h0 + g) * splits + sp) * (size_t)(hd + 2);
        pp[2 + j] = v;
        if (j == 0) {
            pp[0] = s_M[g];
            pp[1] = s_L[g];
        }
    }
}

__device__ __forceinline__ float ag_block_max(float v, float *red) {
    v = tc_warp_max(v);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads(); /* red may still be read from a previous call */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = -INFINITY;
    for (int k = 0; k < nw; k++) r = fmaxf(r, red[k]);
    return r;
}
__device__ __forceinline__ float ag_block_sum(float v, float *red) {
    v = tc_warp_sum(v);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float r = 0.0f;
    for (int k = 0; k < nw; k++) r += red[k];
    return r;
}

/* CTA (query head h, 32 columns): the used splits' (M, L, acc) merged, divided by L,
 * times sigmoid(gate) when gate. 8 warps share the splits, warp r taking r, r + 8, ... */
template <bool B>
__global__ void __launch_bounds__(AG_MERGE_THREADS) k_attn_gqa_merge(const float *__restrict__ part,
        const float *__restrict__ gate, float *__restrict__ out, int pos0,
        const int *__restrict__ dpos, int hd, int splits, const tc_attn_bat bt) {
    constexpr int NW = AG_MERGE_THREADS / 32;
    __shared__ float s_w[AG_MAX_SPLITS];
    __shared__ float s_red[NW];
    __shared__ float s_v[NW][33];
    tc_pdl_trigger();
    tc_pdl_wait();
    if (B) { /* sequence blockIdx.z of the batch */
        pos0 = bt.seqs[blockIdx.z].pos0;
        part += (size_t)blockIdx.z * bt.part_stride;
        if (gate) gate += (size_t)blockIdx.z * bt.q_stride;
        out += (size_t)blockIdx.z * bt.q_stride;
    } else { /* row blockIdx.z of one sequence's rows (as k_attn_gqa) */
        if (dpos) pos0 = *dpos;
        pos0 += (int)blockIdx.z;
        part += (size_t)blockIdx.z * bt.part_stride;
        if (gate) gate += (size_t)blockIdx.z * bt.q_stride;
        out += (size_t)blockIdx.z * bt.q_stride;
    }
    const int np = pos0 + 1, span = ag_span(np, splits);
    const int used = min(splits, (np + span - 1) / span);
    const int h = blockIdx.x, j = blockIdx.y * 32 + (threadIdx.x & 31), r = threadIdx.x >> 5;
    const size_t st = (size_t)hd + 2;
    const float *pp = part + (size_t)h * splits * st;
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < used; s += blockDim.x)
        if (pp[s * st + 1] > 0) mx = fmaxf(mx, pp[s * st]);
    const float M = ag_block_max(mx, s_red);
    float ls = 0.0f;
    for (int s = threadIdx.x; s < used; s += blockDim.x) {
        const float *e = pp + s * st;
        const float w = e[1] > 0 ? expf(e[0] - M) : 0.0f;
        s_w[s] = w;
        ls += e[1] * w;
    }
    const float L = ag_block_sum(ls, s_red); /* its __syncthreads publish s_w */
    float v = 0.0f;
    if (j < hd)
        for (int s = r; s < used; s += NW)
            if (s_w[s] != 0.0f) v += pp[s * st + 2 + j] * s_w[s];
    s_v[r][threadIdx.x & 31] = v;
    __syncthreads();
    if (r == 0 && j < hd) {
        float t = 0.0f;
        for (int k = 0; k < NW; k++) t += s_v[k][threadIdx.x & 31];
        t /= L;
        if (gate) t *= tc_sigmoid(gate[(size_t)h * hd + j]);
        out[(size_t)h * hd + j] = t;
    }
}

/* The merge of k_attn_gqa_merge with one CTA per query head (all its hd <= 256 columns,
 * thread j column j) for at most AG_MERGE_H_SPLITS splits: the splits' (M, L) in the
 * lanes of every warp, the same operations in the same order as k_attn_gqa_merge (M the
 * exact max; L the warp's butterfly sum of L_s w_s; column j's 8 partial sums over
 * s = r, r + 8, ... added in order r = 0..7), so the same bits with 1/8 of its CTAs
 * (a batch-64 step of the 27B: 1,536 CTAs instead of 12,288). */
#define AG_MERGE_H_SPLITS 32
template <bool B>
__global__ void __launch_bounds__(256) k_attn_gqa_merge_h(const float *__restrict__ part,
        const float *__restrict__ gate, float *__restrict__ out, int pos0,
        const int *__restrict__ dpos, int hd, int splits, const tc_attn_bat bt) {
    constexpr int NW = AG_MERGE_THREADS / 32; /* k_attn_gqa_merge's warps: its sum order */
    tc_pdl_trigger();
    tc_pdl_wait();
    if (B) {
        pos0 = bt.seqs[blockIdx.z].pos0;
        part += (size_t)blockIdx.z * bt.part_stride;
        if (gate) gate += (size_t)blockIdx.z * bt.q_stride;
        out += (size_t)blockIdx.z * bt.q_stride;
    } else { /* row blockIdx.z of one sequence's rows (as k_attn_gqa) */
        if (dpos) pos0 = *dpos;
        pos0 += (int)blockIdx.z;
        part += (size_t)blockIdx.z * bt.part_stride;
        if (gate) gate += (size_t)blockIdx.z * bt.q_stride;
        out += (size_t)blockIdx.z * bt.q_stride;
    }
    const int np = pos0 + 1, span = ag_span(np, splits);
    const int used = min(splits, (np + span - 1) / span); /* <= AG_MERGE_H_SPLITS */
    const int h = blockIdx.x, j = threadIdx.x, lane = threadIdx.x & 31;
    const size_t st = (size_t)hd + 2;
    const float *pp = part + (size_t)h * splits * st;
    float ms = -INFINITY, ls = 0.0f;
    if (lane < used) {
        ms = pp[lane * st];
        ls = pp[lane * st + 1];
    }
    const float M = tc_warp_max(ls > 0 ? ms : -INFINITY);
    const float w = ls > 0 ? expf(ms - M) : 0.0f;
    float lw = 0.0f;
    lw += ls * w;
    const float L = tc_warp_sum(lw);
    if (j >= hd) return; /* warp-uniform: hd is a multiple of 32 */
    float t = 0.0f;
#pragma unroll
    for (int r = 0; r < NW; r++) {
        float v = 0.0f;
        for (int s = r; s < used; s += NW) {
            const float ws = __shfl_sync(0xffffffffu, w, s);
            if (ws != 0.0f) v += pp[s * st + 2 + j] * ws;
        }
        t += v;
    }
    t /= L;
    if (gate) t *= tc_sigmoid(gate[(size_t)h * hd + j]);
    out[(size_t)h * hd + j] = t;
}

/* tc_set_attn_old: the old kernels as the oracle (tests, benches); per context */
extern "C" int tc_attn_old(tc_ctx *cx) { return cx->attn_old; }
extern "C" void tc_set_attn_old(tc_ctx *cx, int old) { cx->attn_old = old > 0; }

/* The GQA kernel's shape: query heads per CTA (*gc, its template size *GC) and chunks
 * per group (*hch), the splits. 0 when it does not take the call (the old kernels do). */
static int ag_plan(int k_type, int v_type, const void *kc, const void *vc, int max_len, int n_head,
                   int n_head_kv, int hd, int *GC, int *hch, int *splits) {
    if (tc_attn_old(tc_cur) || k_type != v_type) return 0;
    if (hd != 32 && hd != 64 && hd != 128 && hd != 256) return 0;
    if (k_type != TC_KV_Q8_0 && (((uintptr_t)kc | (uintptr_t)vc) & 15)) return 0;
    const int G = n_head / n_head_kv;
    const int ch = (G + AG_GMAX - 1) / AG_GMAX, gc = (G + ch - 1) / ch;
    const int gcs[] = {1, 2, 4, 6, 8};
    int t = 0;
    while (gcs[t] < gc) t++;
    if ((long long)n_head_kv * ch > 65535) return 0;
    const long long ctas = (long long)n_head_kv * ch;
    long long s = (8LL * tc_sm_count() + ctas - 1) / ctas; /* ~8 CTAs per SM when all spans are used */
    const long long need = ((long long)max_len + AG_SPAN_MIN - 1) / AG_SPAN_MIN;
    if (s > need) s = need;
    if (s > AG_MAX_SPLITS) s = AG_MAX_SPLITS;
    if (s < 1) s = 1;
    *GC = gcs[t];
    *hch = ch;
    *splits = (int)s;
    return 1;
}

/* The old path: k_attn_split per (query head, span of 32 positions doubling up to 2048
 * splits) + k_attn_merge per head (tc_set_attn_old, the reference for tests). */
static void attn_decode_old(const float *q, const void *kcache, const void *vcache, int k_type,
                            int v_type, const float *gate, float *out, int pos0, int max_len,
                            int n_head, int n_head_kv, int head_dim, float scale) {
    int span = ATT_SPAN_MIN;
    while ((max_len + span - 1) / span > ATT_MAX_SPLITS) span *= 2;
    const int splits = (max_len + span - 1) / span;
    if (splits > 65535) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    float *part = (float *)tc_workspace(2, (size_t)n_head * splits * (head_dim + 2) * sizeof(float));
    if (!part) return;
    dim3 grid((unsigned)n_head, (unsigned)splits);
    att_dispatch(k_type, v_type, [&](auto *k0, auto *v0) {
        using KT = typename std::remove_pointer<decltype(k0)>::type;
        using VT = typename std::remove_pointer<decltype(v0)>::type;
        tc_launch(k_attn_split<KT, VT>, grid, dim3(ATT_WARPS * 32), 0, 1,
            q, (const KT *)kcache, (const VT *)vcache, part, pos0, tc_cur->dyn_pos, n_head, n_head_kv,
            head_dim, scale, splits, span);
    });
    tc_launch(k_attn_merge, dim3((unsigned)n_head), dim3((head_dim + 31) / 32 * 32), 0, 1,
        part, gate, out, pos0, tc_cur->dyn_pos, head_dim, splits, span);
}

/* ag_plan after the arguments' checks (0 for arguments the kernels do not take). */
static int ag_plan_checked(int k_type, int v_type, const void *kcache, const void *vcache, int max_len,
                           int n_head, int n_head_kv, int head_dim, int *GC, int *hch, int *splits) {
    if (head_dim < 1 || head_dim > ATT_EPL * 32 || n_head < 1 || n_head_kv < 1 || max_len < 1 ||
        n_head % n_head_kv || !att_types_ok(k_type, v_type, head_dim))
        return 0;
    return ag_plan(k_type, v_type, kcache, vcache, max_len, n_head, n_head_kv, head_dim, GC, hch, splits);
}

extern "C" int tc_attn_decode_gqa(tc_ctx *cx, int k_type, int v_type, const void *kcache, const void *vcache,
                                  int max_len, int n_head, int n_head_kv, int head_dim) {
    TC_CTX(cx);
    int GC, hch, splits;
    return ag_plan_checked(k_type, v_type, kcache, vcache, max_len, n_head, n_head_kv, head_dim, &GC, &hch,
                           &splits);
}

template <typename T, bool B, bool PF>
static void ag_launch(int GC, dim3 grid, const float *q, const void *kc, const void *vc,
                      float *part, int pos0, int nh, int nkv, int hd, float scale, int splits,
                      int hch, const tc_attn_bat &bt) {
#define AG_L(n)                                                                                      \
    tc_launch(k_attn_gqa<T, n, B, PF>, grid, dim3(AG_WARPS * 32), 0, 1, q, (const T *)kc, (const T *)vc, \
              part, pos0, B ? (const int *)NULL : tc_cur->dyn_pos, nh, nkv, hd, scale, splits, hch, bt)
    switch (GC) {
    case 1: AG_L(1); break;
    case 2: AG_L(2); break;
    case 4: AG_L(4); break;
    case 6: AG_L(6); break;
    default: AG_L(8); break;
    }
#undef AG_L
}

template <typename T, bool B>
static void ag_launch_walk(int GC, dim3 grid, const float *q, const void *kc, const void *vc,
                           float *part, int pos0, int nh, int nkv, int hd, float scale, int splits,
                           int hch, const tc_attn_bat &bt) {
    if constexpr (!std::is_same<T, float>::value) { /* f32 rows: no registers for two sets */
        if (hd == 256) {
            ag_launch<T, B, true>(GC, grid, q, kc, vc, part, pos0, nh, nkv, hd, scale, splits, hch, bt);
            return;
        }
    }
    ag_launch<T, B, false>(GC, grid, q, kc, vc, part, pos0, nh, nkv, hd, scale, splits, hch, bt);
}

/* The GQA kernel and its merge over n sequences (B: blockIdx.z, bt; else n = 1). The
 * merge: one CTA per query head for <= AG_MERGE_H_SPLITS splits (the same bits), else
 * one per 32 columns of it. */
template <bool B>
static void ag_run(int k_type, int GC, int hch, int splits, int n, const float *q, const void *kcache,
                   const void *vcache, const float *gate, float *out, float *part, int pos0, int n_head,
                   int n_head_kv, int head_dim, float scale, const tc_attn_bat &bt) {
    const dim3 grid((unsigned)(n_head_kv * hch), (unsigned)splits, (unsigned)n);
    switch (k_type) {
    case TC_KV_F32: ag_launch_walk<float, B>(GC, grid, q, kcache, vcache, part, pos0, n_head, n_head_kv, head_dim, scale, splits, hch, bt); break;
    case TC_KV_F16: ag_launch_walk<__half, B>(GC, grid, q, kcache, vcache, part, pos0, n_head, n_head_kv, head_dim, scale, splits, hch, bt); break;
    case TC_KV_BF16: ag_launch_walk<__nv_bfloat16, B>(GC, grid, q, kcache, vcache, part, pos0, n_head, n_head_kv, head_dim, scale, splits, hch, bt); break;
    default: ag_launch_walk<att_q8, B>(GC, grid, q, kcache, vcache, part, pos0, n_head, n_head_kv, head_dim, scale, splits, hch, bt); break;
    }
    const int *dp = B ? (const int *)NULL : tc_cur->dyn_pos;
    if (splits <= AG_MERGE_H_SPLITS)
        tc_launch(k_attn_gqa_merge_h<B>, dim3((unsigned)n_head, 1u, (unsigned)n),
                  dim3((unsigned)((head_dim + 31) / 32 * 32)), 0, 1, part, gate, out, pos0, dp, head_dim, splits, bt);
    else
        tc_launch(k_attn_gqa_merge<B>, dim3((unsigned)n_head, (unsigned)((head_dim + 31) / 32), (unsigned)n),
                  dim3(AG_MERGE_THREADS), 0, 1, part, gate, out, pos0, dp, head_dim, splits, bt);
}

/* The CTAs per SM the batch step's split rule aims at: 4 (H200, 2026-12-04, 27B shape, 64
 * sequences at ~530 positions: 107.5 us per call against 123.8 at 8 and 138.6 at 16). */
#define AG_BAT_CTAS_PER_SM 4
/* Batch-invariant products (tc_mm_set_invariant): one sequence alone and every batch take the
 * splits of a batch of AG_INVARIANT_N (a row's partials, and so its bits, follow the splits),
 * whatever the batch's size; the batch rule's at 8 sequences. */
#define AG_INVARIANT_N 8
static int ag_batch_splits(int splits, int n_head_kv, int hch, int n) {
    const long long ctas = (long long)n_head_kv * hch * n;
    long long sb = ((long long)AG_BAT_CTAS_PER_SM * tc_sm_count() + ctas - 1) / ctas;
    if (sb < 1) sb = 1;
    return sb < splits ? (int)sb : splits;
}

extern "C" void tc_attention_decode_rows(tc_ctx *cx, const float *q, const void *kcache, const void *vcache,
                                         int k_type, int v_type, const float *gate, float *out, int rows,
                                         size_t q_stride, int pos0, int max_len, int n_head, int n_head_kv,
                                         int head_dim, float scale) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_ATTENTION);
    if (rows < 1 || rows > 65535 || q_stride < (size_t)n_head * head_dim || head_dim > ATT_EPL * 32 ||
        head_dim < 1 || n_head < 1 || n_head_kv < 1 || !att_types_ok(k_type, v_type, head_dim) ||
        n_head % n_head_kv || max_len < 1 || (!tc_cur->dyn_pos && (pos0 < 0 || pos0 + rows > max_len))) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    int GC, hch, splits;
    if (!ag_plan(k_type, v_type, kcache, vcache, max_len, n_head, n_head_kv, head_dim, &GC, &hch, &splits)) {
        /* the old kernels, a row at a time (its position word: the graph's next one) */
        const int *dp = tc_cur->dyn_pos;
        for (int r = 0; r < rows; r++) {
            tc_cur->dyn_pos = dp ? dp + r : NULL;
            attn_decode_old(q + (size_t)r * q_stride, kcache, vcache, k_type, v_type,
                            gate ? gate + (size_t)r * q_stride : NULL, out + (size_t)r * q_stride, pos0 + r,
                            max_len, n_head, n_head_kv, head_dim, scale);
        }
        tc_cur->dyn_pos = dp;
        return;
    }
    if (tc_cur->mm.invariant) splits = ag_batch_splits(splits, n_head_kv, hch, AG_INVARIANT_N);
    const size_t per = (size_t)n_head * splits * (head_dim + 2);
    float *part = (float *)tc_workspace(2, (size_t)rows * per * sizeof(float));
    if (!part) return;
    tc_attn_bat b = {};
    b.q_stride = q_stride;
    b.part_stride = per;
    ag_run<false>(k_type, GC, hch, splits, rows, q, kcache, vcache, gate, out, part, pos0, n_head, n_head_kv,
                  head_dim, scale, b);
}

extern "C" void tc_attention_decode(tc_ctx *cx, const float *q, const void *kcache, const void *vcache,
                                    int k_type, int v_type, const float *gate, float *out,
                                    int pos0, int max_len, int n_head, int n_head_kv,
                                    int head_dim, float scale) {
    tc_attention_decode_rows(cx, q, kcache, vcache, k_type, v_type, gate, out, 1, (size_t)n_head * head_dim, pos0,
                             max_len, n_head, n_head_kv, head_dim, scale);
}

/* The batch's caches are in the device table: the caller checks their alignment
 * (tc_attention_decode_batch_ok's contract); the plan sees an aligned stand-in. */
alignas(16) static const uint8_t g_ag_aligned[16] = {0};

/* Bytes of the partials workspace (slot 2) one sequence's decode attention over a cache of
 * max_len positions takes: the back-end reserves them when a session is made, so no step
 * (the first, recorded into a graph, among them) grows the workspace. */
extern "C" size_t tc_attention_decode_ws_bytes(tc_ctx *cx, int k_type, int v_type, int max_len, int n_head,
                                               int n_head_kv, int head_dim) {
    TC_CTX(cx);
    int GC, hch, splits;
    if (!ag_plan_checked(k_type, v_type, g_ag_aligned, g_ag_aligned, max_len, n_head, n_head_kv, head_dim, &GC,
                         &hch, &splits)) { /* the old kernels' splits (attn_decode_old) */
        int span = ATT_SPAN_MIN;
        while ((max_len + span - 1) / span > ATT_MAX_SPLITS) span *= 2;
        splits = (max_len + span - 1) / span;
    }
    return (size_t)n_head * (size_t)splits * (size_t)(head_dim + 2) * sizeof(float);
}

extern "C" int tc_attention_decode_batch_ok(tc_ctx *cx, int k_type, int v_type, int max_ctx, int n_head, int n_head_kv,
                                            int head_dim) {
    TC_CTX(cx);
    return tc_attn_decode_gqa(tc_cur, k_type, v_type, g_ag_aligned, g_ag_aligned, max_ctx, n_head, n_head_kv, head_dim);
}

extern "C" void tc_attention_decode_batch(tc_ctx *cx, const float *q, int k_type, int v_type, const float *gate, float *out,
                                          int n, const tc_attn_bat *bt, int max_ctx, int n_head,
                                          int n_head_kv, int head_dim, float scale) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_ATTENTION);
    int GC, hch, splits;
    if (n < 1 || n > 65535 || !bt || !bt->seqs || bt->q_stride < (size_t)n_head * head_dim ||
        !ag_plan_checked(k_type, v_type, g_ag_aligned, g_ag_aligned, max_ctx, n_head, n_head_kv, head_dim, &GC,
                         &hch, &splits)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    /* ag_plan sizes the splits for one sequence (~8 CTAs per SM); n sequences share the
     * SMs (AG_BAT_CTAS_PER_SM), so each takes its share (at least 1 split): 64 sequences at ~530 positions
     * launched 67,584 CTAs of 16 positions, most of them empty, 471 us per layer on the
     * H200 (2026-12-03). The span follows from the position and the splits in the kernel
     * and the merge alike, so any split count is exact. */
    splits = ag_batch_splits(splits, n_head_kv, hch, tc_cur->mm.invariant ? AG_INVARIANT_N : n);
    const size_t per = (size_t)n_head * splits * (head_dim + 2);
    float *part = (float *)tc_workspace(2, (size_t)n * per * sizeof(float));
    if (!part) return;
    tc_attn_bat b = *bt;
    b.part_stride = per;
    ag_run<true>(k_type, GC, hch, splits, n, q, NULL, NULL, gate, out, part, 0, n_head, n_head_kv, head_dim,
                 scale, b);
}
