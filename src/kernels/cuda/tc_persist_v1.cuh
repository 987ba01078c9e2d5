/*
 * tc_persist_v1.cuh - the first version's matmul task of the persistent step (fp32
 * throughout), kept as a lab variant for the A/B against the tensor-core task
 * (tc_persist_mm.cuh): tc_persist_set_pipeline(ps, 1) runs it (tp_matmul<false>, v1's
 * default; the pipelined form, tp_matmul<true>, spills beside the new task).
 * Included by tc_persist.cu after tp_args and the synchronisation helpers.
 *
 * Lane (g, t) of a warp decodes its 16 bytes of rows g and 8+g of a 256-input tile
 * against the normed input in shared memory; the warps of a CTA split the tiles of a
 * strip (or the strips of a round when the rows are short), summed in a fixed order.
 */

/* Sum over the 16 inputs of code word w of (code - 1) * x[input]. The word's input
 * 4b + s sits at bits 8b + 2s; in each 16-bit half, input 8h + i at bits 2i, so
 * float(0x4B000000 | (half & 3 << 2i)) - 2^23 = code * 4^i exactly (no int-to-float
 * conversion: one LOP3, one FADD, one FFMA a weight). x holds the inputs pre-scaled by
 * 4^-(i % 8) (tp_matmul's prologue; exact), xsum the 16 unscaled inputs' sum. */
__device__ __forceinline__ float tp_wdot(uint32_t w, const float *x, float xsum) {
    const uint32_t hi = w >> 16;
    const float4 a0 = *(const float4 *)x, a1 = *(const float4 *)(x + 4);
    const float4 b0 = *(const float4 *)(x + 8), b1 = *(const float4 *)(x + 12);
    const float xa[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
    const float xb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
    /* the exponent in a register the compiler cannot fold, so that (w & mask) | magic is
     * one LOP3 (both as immediates it takes two) */
    uint32_t magic;
    asm volatile("mov.b32 %0, 0x4B000000;" : "=r"(magic));
    float s = 0, u = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        uint32_t a0, b0;
        asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(a0) : "r"(w), "r"(3u << (2 * i)), "r"(magic));
        asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(b0) : "r"(hi), "r"(3u << (2 * i)), "r"(magic));
        s = fmaf(__uint_as_float(a0) - 8388608.0f, xa[i], s);
        u = fmaf(__uint_as_float(b0) - 8388608.0f, xb[i], u);
    }
    return (s + u) - xsum;
}

/* A lane's share of one tile (lane = 4g + t): its 16 code bytes of rows g and 8+g, and
 * the four scales of rows g, 8+g (gemv_tiled.h). */
struct tp_tl {
    uint4 wg, wh;
    uint2 sc;
};
#define TP_INFLIGHT 4  /* tiles a warp loads before it computes them */
#define TP_PF_ROUNDS 4 /* rounds of strips a matmul task asks L2 for ahead (with prefetch on) */

__device__ __forceinline__ tp_tl tp_tile_load(const uint8_t *tile, int lane) {
    tp_tl l;
    l.wg = __ldg((const uint4 *)(tile + 16 * lane));
    l.wh = __ldg((const uint4 *)(tile + 512 + 16 * lane));
    l.sc = __ldg((const uint2 *)(tile + 1024 + 8 * (lane >> 2)));
    return l;
}

/* rows g and 8+g of one tile against xt (the tile's 256 inputs, scaled as tp_wdot says)
 * and st (their 16-input sums) */
__device__ __forceinline__ void tp_tile(const tp_tl &l, const float *xt, const float *st, int lane, float &ag,
                                        float &ah) {
    const int t = lane & 3;
    const uint4 wg = l.wg, wh = l.wh;
    const uint2 sc = l.sc;
    const float *x0 = xt + 32 * t, *x1 = xt + 128 + 32 * t;
    const float *s0 = st + 2 * t, *s1 = st + 8 + 2 * t;
    const float g0 = tp_wdot(wg.x, x0, s0[0]) + tp_wdot(wg.y, x0 + 16, s0[1]);
    const float g1 = tp_wdot(wg.z, x1, s1[0]) + tp_wdot(wg.w, x1 + 16, s1[1]);
    const float h0 = tp_wdot(wh.x, x0, s0[0]) + tp_wdot(wh.y, x0 + 16, s0[1]);
    const float h1 = tp_wdot(wh.z, x1, s1[0]) + tp_wdot(wh.w, x1 + 16, s1[1]);
    const float2 dg = __half22float2(*(const __half2 *)&sc.x); /* (row g, group 2j), (row g, 2j+1) */
    const float2 dh = __half22float2(*(const __half2 *)&sc.y); /* rows 8+g */
    ag = fmaf(dg.x, g0, fmaf(dg.y, g1, ag));
    ah = fmaf(dh.x, h0, fmaf(dh.y, h1, ah));
}

/* the tiles of strip g of a stage: matrix 0's (b0) and, for SwiGLU, the up matrix's (b1) */
__device__ __forceinline__ void tp_strip_bases(const tp_stage &st, bool swiglu, int64_t g, int KT, const uint8_t *&b0,
                                               const uint8_t *&b1) {
    if (swiglu) {
        b0 = (const uint8_t *)st.w[0] + (size_t)g * KT * TCT_TILE;
        b1 = (const uint8_t *)st.w[1] + (size_t)g * KT * TCT_TILE;
    } else {
        int mi = 0;
        while (mi + 1 < st.n_mat && g >= st.strip0[mi + 1]) mi++;
        b0 = b1 = (const uint8_t *)st.w[mi] + (size_t)(g - st.strip0[mi]) * KT * TCT_TILE;
    }
}

/* PIPE: each warp loads the first TP_INFLIGHT tiles of its next round's strip into
 * registers before it computes the last batch of the current one (the loads of a round
 * overlap the products of the one before; lab.h tc_persist_set_pipeline) */
template <bool PIPE>
__device__ void tp_matmul(const tp_args &a, const tp_stage &st, const tp_task &t, float *sm, float *red,
                          int *redi) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int K = st.in_k;
    const int KT = (int)st.kt[0];
    const int KP = KT * 256;
    float *xs = sm;               /* [KP] the input, input j scaled by 4^-(j % 8) (tp_wdot) */
    float *xsum = sm + KP;        /* [KP / 16] sums of 16 unscaled inputs */
    float *part = xsum + KP / 16; /* [TP_WARPS][32]: per warp, 16 rows x (one or two matrices) */
    /* the input row into shared memory: the norm site's (x normed with the partial sums
     * of the stage that wrote x, in slot order) or a buffer as is */
    const float *src = a.scratch + (st.in_mode == TP_IN_NORM ? a.buf_off[TP_BUF_X] : a.buf_off[st.in_buf]);
    if (st.in_mode == TP_IN_NORM) {
        const tp_stage &ns = a.stages[st.norm_src];
        float ss = 0;
        if (warp == 0) {
            for (int i = lane; i < ns.n_tasks; i += 32) ss += __ldcg(a.part_f + ns.task0 + i);
            ss = tc_warp_sum(ss);
            if (lane == 0) red[0] = ss;
        }
        __syncthreads();
        const float inv = (float)(1.0 / sqrt((double)red[0] / K + (double)st.eps));
        for (int j = tid; j < KP; j += TP_THREADS) xs[j] = j < K ? __ldcg(src + j) * inv * st.gain[j] : 0.0f;
    } else {
        for (int j = tid; j < KP; j += TP_THREADS) xs[j] = j < K ? __ldcg(src + j) : 0.0f;
    }
    __syncthreads();
    for (int b = tid; b < KP / 16; b += TP_THREADS) { /* sums, then the scaling (exact) */
        float s = 0;
#pragma unroll
        for (int i = 0; i < 16; i++) s += xs[16 * b + i];
        xsum[b] = s;
    }
    __syncthreads();
    for (int j = tid; j < KP; j += TP_THREADS) xs[j] = ldexpf(xs[j], -2 * (j & 7));
    __syncthreads();
    const bool swiglu = st.out_mode == TP_OUT_SWIGLU;
    const int spr = KT >= 8 ? 1 : KT >= 4 ? 2 : KT >= 2 ? 4 : 8; /* strips per round */
    const int wps = TP_WARPS / spr;                               /* warps per strip */
    const int so = warp % spr, t0 = warp / spr;
    float ss = 0, best = -INFINITY;
    int besti = -1;
    float *x = a.scratch + a.buf_off[TP_BUF_X];
    const int ntile = t0 < KT ? (KT - t0 + wps - 1) / wps : 0; /* this warp's tiles of a strip */
    const int total = ntile * (swiglu ? 2 : 1);
    tp_tl nx[TP_INFLIGHT]; /* PIPE: the first batch of this warp's next strip */
    if (PIPE && t.a + so < t.b) {
        const uint8_t *c0, *c1;
        tp_strip_bases(st, swiglu, t.a + so, KT, c0, c1);
#pragma unroll
        for (int u = 0; u < TP_INFLIGHT; u++) {
            const int q = u >= ntile, j = t0 + (u - q * ntile) * wps;
            if (u < total) nx[u] = tp_tile_load((q ? c1 : c0) + (size_t)j * TCT_TILE, lane);
        }
    }
    for (int64_t g0 = t.a; g0 < t.b; g0 += spr) {
        /* the strips TP_PF_ROUNDS rounds ahead into L2 (one round's loads keep too few
         * bytes in flight; the wait's prefetch covered the first rounds) */
        if (a.prefetch > 0) {
            const int64_t pa = g0 + (int64_t)TP_PF_ROUNDS * spr, pb = pa + spr;
            tp_prefetch(st, pa, pb < t.b ? pb : t.b, 1LL << 30);
        }
        const int64_t g = g0 + so;
        float a00 = 0, a01 = 0, a10 = 0, a11 = 0; /* [matrix q][row g, 8+g] */
        if (g < t.b) {
            /* this warp's tiles of strip g: j = t0, t0 + wps, .. of matrix 0 (and of the
             * up matrix for SwiGLU), TP_INFLIGHT loads issued before their products */
            const uint8_t *b0, *b1;
            tp_strip_bases(st, swiglu, g, KT, b0, b1);
            for (int n0 = 0; n0 < total; n0 += TP_INFLIGHT) {
                tp_tl tl[TP_INFLIGHT];
                if (PIPE && n0 == 0) {
#pragma unroll
                    for (int u = 0; u < TP_INFLIGHT; u++) tl[u] = nx[u];
                } else {
#pragma unroll
                    for (int u = 0; u < TP_INFLIGHT; u++) {
                        const int n = n0 + u, q = n >= ntile, j = t0 + (n - q * ntile) * wps;
                        if (n < total) tl[u] = tp_tile_load((q ? b1 : b0) + (size_t)j * TCT_TILE, lane);
                    }
                }
                if (PIPE && n0 + TP_INFLIGHT >= total && g + spr < t.b) { /* the next round's first batch */
                    const uint8_t *c0, *c1;
                    tp_strip_bases(st, swiglu, g + spr, KT, c0, c1);
#pragma unroll
                    for (int u = 0; u < TP_INFLIGHT; u++) {
                        const int q = u >= ntile, j = t0 + (u - q * ntile) * wps;
                        if (u < total) nx[u] = tp_tile_load((q ? c1 : c0) + (size_t)j * TCT_TILE, lane);
                    }
                }
#pragma unroll
                for (int u = 0; u < TP_INFLIGHT; u++) {
                    const int n = n0 + u, q = n >= ntile, j = t0 + (n - q * ntile) * wps;
                    if (n < total) {
                        float ag = 0, ah = 0;
                        tp_tile(tl[u], xs + j * 256, xsum + j * 16, lane, ag, ah);
                        if (q) {
                            a10 += ag;
                            a11 += ah;
                        } else {
                            a00 += ag;
                            a01 += ah;
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int o = 1; o <= 2; o <<= 1) {
            a00 += __shfl_xor_sync(0xffffffffu, a00, o);
            a01 += __shfl_xor_sync(0xffffffffu, a01, o);
            a10 += __shfl_xor_sync(0xffffffffu, a10, o);
            a11 += __shfl_xor_sync(0xffffffffu, a11, o);
        }
        if ((lane & 3) == 0) {
            const int gi = lane >> 2;
            part[warp * 32 + gi] = a00;
            part[warp * 32 + 8 + gi] = a01;
            part[warp * 32 + 16 + gi] = a10;
            part[warp * 32 + 24 + gi] = a11;
        }
        __syncthreads();
        if (tid < spr * 16) {
            const int s2 = tid >> 4, r = tid & 15;
            const int64_t g2 = g0 + s2;
            if (g2 < t.b) {
                float y0 = 0, y1 = 0;
                for (int w = s2; w < TP_WARPS; w += spr) {
                    y0 += part[w * 32 + r];
                    y1 += part[w * 32 + 16 + r];
                }
                int mi = 0;
                int64_t ls = g2;
                if (!swiglu) {
                    while (mi + 1 < st.n_mat && g2 >= st.strip0[mi + 1]) mi++;
                    ls = g2 - st.strip0[mi];
                }
                const int64_t row = ls * 16 + r;
                if (row < st.n[mi]) {
                    switch (st.out_mode) {
                    case TP_OUT_ROWS:
                        a.scratch[a.buf_off[st.out_buf[mi]] + st.out_off[mi] + row] = y0;
                        break;
                    case TP_OUT_RESID: {
                        const float v = __ldcg(x + row) + y0;
                        x[row] = v;
                        ss += v * v;
                        break;
                    }
                    case TP_OUT_SWIGLU:
                        a.scratch[a.buf_off[st.out_buf[0]] + row] = tc_silu(y0) * y1;
                        break;
                    default: /* TP_OUT_LOGITS */
                        a.scratch[a.buf_off[st.out_buf[0]] + row] = y0;
                        if (y0 > best) {
                            best = y0;
                            besti = (int)row;
                        }
                        break;
                    }
                }
            }
        }
        __syncthreads();
    }
    if (st.out_mode == TP_OUT_RESID) {
        ss = tp_block_sum(ss, red);
        if (tid == 0) a.part_f[st.task0 + t.idx] = ss;
    } else if (st.out_mode == TP_OUT_LOGITS) {
        float bv;
        int bi;
        tp_block_argmax(best, besti, red, redi, &bv, &bi);
        if (tid == 0) {
            a.part_f[st.task0 + t.idx] = bv;
            a.part_i[st.task0 + t.idx] = bi;
        }
    }
}

