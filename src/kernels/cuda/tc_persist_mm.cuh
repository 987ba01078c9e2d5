/*
 * tc_persist_mm.cuh - the matmul task of the persistent step with integer tensor-core
 * products, and the ring lab variant's loader (below). Included by tc_persist.cu after
 * tp_args and the synchronisation helpers.
 *
 * The task's work is a list of items: its strips [a, b) in order, each strip KT tiles
 * (SwiGLU: the gate's KT tiles, then the up matrix's). Warp w of NW takes the
 * contiguous items [tsk_begin(w), tsk_begin(w + 1)) (gemv_tiled.h's stream-K split),
 * with TP_U tiles in flight in registers (a slot is refilled as soon as its tile is
 * multiplied); its first TP_U loads are issued before the task waits for its
 * dependency (the weights do not depend on it, only the activation does). A strip
 * inside one warp's range is finished by that warp; a strip split between warps gets
 * one partial per warp (slot 0: the warp's first strip, 1: its last), added in warp
 * order after a barrier. Deterministic: the same sums in the same order every step.
 *
 * The input (the norm site's output, or a buffer) is quantised once per task into
 * shared memory in the integer path's activation layout (act.cuh, tc_actq_block: 14-bit
 * x_q = 128 hi + lo per input, one scale per 128 inputs, the unit sums `corr`), and a
 * tile is 8 mma.m16n8k32 (u8 codes x s8 activation, tct_a_frag) as in tc_gemv.cu at
 * batch 1: column 0 of the mma is the hi plane, column 4 the lo plane (lanes t = 0 and
 * t = 2 hold them); per group the float epilogue adds (sum - corr [lo only]) * d * sx;
 * at the end of a strip 128 hi + lo meet by one shuffle.
 */

#define TP_U 8  /* tiles in flight per warp (registers) */
#define TP_D 20 /* tiles in flight per warp (TP_M_CPA: shared memory) */
enum { TP_M_REGS = 0, TP_M_RING = 1, TP_M_CPA = 2 }; /* where a matmul task's tiles wait (tp_mm) */

struct tp_slot {
    uint4 wa, wb; /* rows g, 8+g: the lane's 16 code bytes */
    uint2 sc;     /* the four scales of rows g, 8+g */
};

__device__ __forceinline__ float tp_h(uint32_t v, int hi) {
    return __half2float(__ushort_as_half((unsigned short)(hi ? v >> 16 : v & 0xffffu)));
}

/* the address of item n (0 .. T-1) of global strip S */
__device__ __forceinline__ const uint8_t *tp_item_ptr(const tp_stage &st, bool swiglu, int64_t S, int n, int KT) {
    if (swiglu) {
        const int q = n >= KT;
        return (const uint8_t *)(q ? st.w[1] : st.w[0]) + ((size_t)S * KT + (size_t)(n - q * KT)) * TCT_TILE;
    }
    int mi = 0;
    while (mi + 1 < st.n_mat && S >= st.strip0[mi + 1]) mi++;
    return (const uint8_t *)st.w[mi] + ((size_t)(S - st.strip0[mi]) * KT + (size_t)n) * TCT_TILE;
}

__device__ __forceinline__ void tp_slot_load(tp_slot &s, const uint8_t *p, int lane) {
    s.wa = tct_ld_stream(p + 16 * lane);
    s.wb = tct_ld_stream(p + 512 + 16 * lane);
    s.sc = tct_ld_stream2(p + 1024 + 8 * (lane >> 2));
}

/* One tile: qa = the lane's B source of the tile's group 0 in shared memory (column g:
 * plane g >> 2, unit t), ca = the tile's {sx, corr of the group} pairs; fg, fh: rows g,
 * 8+g of the lane's column 2t (hi for t = 0, lo for t = 2, the rest unused). */
__device__ __forceinline__ void tp_mma_tile(const tp_slot &sl, uint32_t qa, uint32_t ca, bool lo, float &fg,
                                            float &fh) {
    const uint32_t wg[4] = {sl.wa.x, sl.wa.y, sl.wa.z, sl.wa.w};
    const uint32_t wh[4] = {sl.wb.x, sl.wb.y, sl.wb.z, sl.wb.w};
    int4 h[2][2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        h[e][0] = tct_lds4(qa + 256u * e);
        h[e][1] = tct_lds4(qa + 256u * e + 16);
    }
    int H[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
    for (int m = 0; m < 4; m++) {
#pragma unroll
        for (int e = 0; e < 2; e++) { /* the two groups' chains interleaved */
            uint32_t af[4];
            tct_a_frag(wg, wh, e, m, af);
            const int4 hb = h[e][m >> 1];
            tct_mma(H[e], af, (m & 1) ? hb.z : hb.x, (m & 1) ? hb.w : hb.y);
        }
    }
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int2 c = tct_lds2(ca + 8u * e);
        const float sx = __int_as_float(c.x);
        const int cr = lo ? c.y : 0;
        fg = fmaf((float)(H[e][0] - cr), tp_h(sl.sc.x, e) * sx, fg);
        fh = fmaf((float)(H[e][2] - cr), tp_h(sl.sc.y, e) * sx, fh);
    }
}

/* row r of global strip S of the stage gets y0 (and the up row's y1 for SwiGLU) */
template <bool Q35>
__device__ __forceinline__ void tp_emit(const tp_args &a, const tp_stage &st, bool swiglu, int64_t S, int r, float y0,
                                        float y1, float &ss, float &best, int &besti) {
    int mi = 0;
    int64_t ls = S;
    if (!swiglu) {
        while (mi + 1 < st.n_mat && S >= st.strip0[mi + 1]) mi++;
        ls = S - st.strip0[mi];
    }
    const int64_t row = ls * 16 + r;
    if (row >= st.n[mi]) return;
    switch (st.out_mode) {
    case TP_OUT_ROWS: a.scratch[a.buf_off[st.out_buf[mi]] + st.out_off[mi] + row] = y0; break;
    case TP_OUT_RESID: {
        float *x = a.scratch + a.buf_off[TP_BUF_X];
        const float v = __ldcg(x + row) + y0;
        x[row] = v;
        ss += v * v;
        break;
    }
    case TP_OUT_SWIGLU: a.scratch[a.buf_off[st.out_buf[0]] + row] = tc_silu(y0) * y1; break;
    case TP_OUT_CONV:
        if (!Q35) break;
        if (mi == 0) { /* channel `row` of the GDN's q|k|v: the causal conv over its state and y0,
                        * SiLU; the state shifted (each channel's state is this task's alone) */
            const int Kc = st.conv_k;
            const size_t C = (size_t)st.n[0];
            float *cs = a.conv_state + (size_t)st.gdn_index * a.conv_n + row;
            const float *wc = st.conv_w + (size_t)row * Kc;
            float old[3] = {0.0f, 0.0f, 0.0f}, sc = 0.0f;
#pragma unroll
            for (int j = 0; j < 3; j++)
                if (j < Kc - 1) {
                    old[j] = cs[(size_t)j * C];
                    sc += wc[j] * old[j];
                }
            sc += wc[Kc - 1] * y0;
#pragma unroll
            for (int j = 0; j < 3; j++)
                if (j < Kc - 1) cs[(size_t)j * C] = j + 1 < Kc - 1 ? old[j + 1] : y0;
            a.scratch[a.buf_off[st.out_buf[0]] + row] = tc_silu(sc);
        } else { /* z */
            a.scratch[a.buf_off[st.out_buf[1]] + row] = y0;
        }
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

/* The input's 128-blocks c0, c0 + TP_WARPS, .. (TP_INB of them) of one warp: lane l
 * holds inputs 4l .. 4l+3 of each (tc_actq_block's layout) and their gains. */
#define TP_INB 4
struct tp_inb {
    float4 x[TP_INB], gn[TP_INB];
};
__device__ __forceinline__ void tp_in_load(const tp_stage &st, const float *src, bool norm, int G, int c0, int lane,
                                           tp_inb &d) {
#pragma unroll
    for (int k = 0; k < TP_INB; k++) {
        const int blk = c0 + k * TP_WARPS, j = blk * 128 + 4 * lane;
        d.x[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        d.gn[k] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        if (blk < G) {
            d.x[k] = __ldcg((const float4 *)(src + j)); /* the buffers are 64-float aligned, K % 128 == 0 */
            if (norm) d.gn[k] = make_float4(__ldg(st.gain + j), __ldg(st.gain + j + 1), __ldg(st.gain + j + 2),
                                            __ldg(st.gain + j + 3));
        }
    }
}
/* x * inv * gain (the per-op norm's order), quantised into shared memory */
__device__ __forceinline__ void tp_in_quant(int GP, int c0, float inv, const tp_inb &d, int lane, int8_t *qs,
                                            float *sxs, int *crs, int2 *pairs) {
#pragma unroll
    for (int k = 0; k < TP_INB; k++) {
        const int blk = c0 + k * TP_WARPS;
        if (blk < GP) { /* warp-uniform */
            const float v[4] = {d.x[k].x * inv * d.gn[k].x, d.x[k].y * inv * d.gn[k].y, d.x[k].z * inv * d.gn[k].z,
                                d.x[k].w * inv * d.gn[k].w};
            tc_actq_block(v, lane, qs, sxs, crs, blk);
            __syncwarp();
            if (lane == 0) /* the block's {sx, corr sum} pair, read by every lane of a tile */
                pairs[blk] = make_int2(__float_as_int(sxs[blk]),
                                       (crs[4 * blk] + crs[4 * blk + 1]) + (crs[4 * blk + 2] + crs[4 * blk + 3]));
        }
    }
}

/* One 128-block quantised (lane l: inputs 4l .. 4l+3) and its {sx, corr sum} pair */
__device__ __forceinline__ void tp_q_block(const float v[4], int lane, int blk, int8_t *qs, float *sxs, int *crs,
                                           int2 *pairs) {
    tc_actq_block(v, lane, qs, sxs, crs, blk);
    __syncwarp();
    if (lane == 0)
        pairs[blk] = make_int2(__float_as_int(sxs[blk]),
                               (crs[4 * blk] + crs[4 * blk + 1]) + (crs[4 * blk + 2] + crs[4 * blk + 3]));
}

/* The input with its transform (st.signs; blocks of 1024, K % 1024 == 0: tc_persist_new
 * checks): warp w takes the 1024-blocks w, w + TP_WARPS, ..; lane l loads inputs
 * sb*128 + 4l .. +3 of each of the 8 128-blocks, x * inv * gain (a norm site), times the
 * signs, the butterflies (tp_fwht1024), / 32, and quantises the 8 blocks. */
__device__ void tp_in_xf(const tp_stage &st, const float *src, bool norm, float inv, int K, int lane, int warp,
                         int8_t *qs, float *sxs, int *crs, int2 *pairs) {
    const float sc = 1.0f / sqrtf(1024.0f);
    for (int b = warp; b < K / 1024; b += TP_WARPS) {
        float v[8][4];
#pragma unroll
        for (int sb = 0; sb < 8; sb++) {
            const int j = b * 1024 + sb * 128 + 4 * lane;
            const float4 x = __ldcg((const float4 *)(src + j)); /* 64-float aligned buffers */
            float xe[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (norm) xe[e] = xe[e] * inv * __ldg(st.gain + j + e);
                v[sb][e] = xe[e] * __ldg(st.signs + j + e);
            }
        }
        tp_fwht1024(v, lane);
#pragma unroll
        for (int sb = 0; sb < 8; sb++) {
            const float q[4] = {v[sb][0] * sc, v[sb][1] * sc, v[sb][2] * sc, v[sb][3] * sc};
            tp_q_block(q, lane, b * 8 + sb, qs, sxs, crs, pairs);
        }
    }
}

/* ---- the ring (lab variant, tc_persist_set_pipeline(ps, 1)): a loader warp streams the
 * CTA's matmul tiles, task after task in its list, into a ring of R tile slots of shared
 * memory (cp.async.bulk, one 1088-byte tile a copy, L2 evict-first), as soon as slots free
 * up, whatever stage the consumer warps wait for; tile n of the CTA's step (counting the
 * items of its matmul tasks in order) goes to slot n % R. Per slot a full mbarrier (the
 * copy's bytes) and an empty one (the consuming warp's arrival). */
struct tp_ring {
    uint32_t buf, full, empty; /* shared addresses: R x TCT_TILE, R x 8, R x 8 */
    uint32_t R;
    volatile int *quit; /* set when the compute threads leave early (a wait failed) */
};
/* the mbarrier primitives of cuda_awbarrier_primitives.h on shared addresses; the test is
 * the non-blocking one (the polling loops check their quit and budget conditions between
 * tests) */
__device__ __forceinline__ __mbarrier_t *tp_mbar(uint32_t a) { return (__mbarrier_t *)__cvta_shared_to_generic(a); }
__device__ __forceinline__ void tp_mbar_init(uint32_t a, uint32_t count) { __mbarrier_init(tp_mbar(a), count); }
__device__ __forceinline__ uint32_t tp_mbar_try(uint32_t a, uint32_t parity) {
    return __mbarrier_test_wait_parity(tp_mbar(a), parity != 0) ? 1u : 0u;
}
__device__ __forceinline__ void tp_mbar_arrive(uint32_t a) { (void)__mbarrier_arrive(tp_mbar(a)); }
/* consumer: a wait for the loader's copy can only fail by a bug (the loader never waits
 * for another CTA): past the watchdog's budget the status names the stage (the step
 * ends with the watchdog's error at the next wait) and the tile is taken as it is */
__device__ __noinline__ void tp_mbar_wait_slow(long long budget, int *status, int s, uint32_t m, uint32_t parity) {
    const long long t0 = clock64();
    while (!tp_mbar_try(m, parity))
        if (clock64() - t0 > budget) {
            atomicCAS(status, 0, s + 1);
            return;
        }
}
/* the lane's share of the tile at shared address b (the tile's own layout) */
__device__ __forceinline__ void tp_slot_lds(tp_slot &sl, uint32_t b, int lane) {
    const int4 x = tct_lds4(b + 16u * lane), y = tct_lds4(b + 512u + 16u * lane);
    const int2 z = tct_lds2(b + 1024u + 8u * (lane >> 2));
    sl.wa = make_uint4(x.x, x.y, x.z, x.w);
    sl.wb = make_uint4(y.x, y.y, y.z, y.w);
    sl.sc = make_uint2(z.x, z.y);
}
/* tile n of the CTA's stream (task stage s) into the lane's slot registers; the slot is
 * given back */
__device__ __forceinline__ void tp_ring_get(const tp_args &a, int s, const tp_ring &rg, uint32_t n, int lane,
                                            tp_slot &sl) {
    const uint32_t k = n % rg.R, par = (n / rg.R) & 1u;
    if (!tp_mbar_try(rg.full + 8u * k, par)) tp_mbar_wait_slow(a.budget, a.status, s, rg.full + 8u * k, par);
    tp_slot_lds(sl, rg.buf + k * TCT_TILE, lane);
    __syncwarp();
    if (lane == 0) tp_mbar_arrive(rg.empty + 8u * k);
}

/* The loader (one lane of the extra warp): every matmul task's items in the CTA's order.
 * If the compute threads leave early (a wait failed: rg.quit), it stops issuing, waits for
 * the copies in flight and returns. */
__device__ void tp_loader(const tp_args &a, int c, const tp_ring &rg) {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    uint32_t n = 0;
    bool stop = false;
    for (int i = a.cta_off[c]; i < a.cta_off[c + 1] && !stop; i++) {
        const tp_task t = a.tasks[i];
        const tp_stage &st = a.stages[t.stage];
        if (st.kind != TP_MATMUL) continue;
        const bool swiglu = st.out_mode == TP_OUT_SWIGLU;
        const int KT = (int)st.kt[0], T = swiglu ? 2 * KT : KT;
        for (int64_t S = t.a; S < t.b && !stop; S++) {
            const uint8_t *p = NULL;
            for (int k = 0; k < T; k++, n++) {
                p = k == 0 || (swiglu && k == KT) ? tp_item_ptr(st, swiglu, S, k, KT) : p + TCT_TILE;
                const uint32_t slot = n % rg.R;
                if (n >= rg.R) { /* the slot's previous tile consumed */
                    const uint32_t e = rg.empty + 8u * slot, par = ((n / rg.R) - 1u) & 1u;
                    unsigned spins = 0;
                    while (!tp_mbar_try(e, par))
                        if ((++spins & 255u) == 0 && *rg.quit) {
                            stop = true;
                            break;
                        }
                    if (stop) break;
                }
                const uint32_t f = rg.full + 8u * slot;
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(f), "r"((uint32_t)TCT_TILE)
                             : "memory");
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
                             "[%1], %2, [%3], %4;" ::"r"(rg.buf + slot * TCT_TILE),
                             "l"(p), "r"((uint32_t)TCT_TILE), "r"(f), "l"(pol)
                             : "memory");
            }
        }
    }
    /* the copies in flight land before the CTA may end (consumed or not) */
    for (uint32_t m = n > rg.R ? n - rg.R : 0; m < n; m++)
        while (!tp_mbar_try(rg.full + 8u * (m % rg.R), (m / rg.R) & 1u)) {
        }
}

/* The task: (register variant) first loads, the wait (false: the CTA must leave), the
 * input, the products. pr: the profile's stamps (NULL: off). MODE TP_M_CPA: each warp
 * copies its next TP_D tiles into its own shared-memory slots (cp.async) instead of
 * registers, the first TP_D before the wait. MODE TP_M_RING: the tiles come from
 * the ring, tile nbase of the CTA's stream being the task's first item. */
template <int MODE, bool Q35>
__device__ bool tp_mm(const tp_args &a, const tp_stage &st, const tp_task &t, uint8_t *sm, float *red, int *redi,
                      int *flag, unsigned long long *pr, const tp_ring &rg, uint32_t nbase) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
    const int K = st.in_k, KT = (int)st.kt[0], KP = KT * 256, G = K >> 7, GP = 2 * KT;
    const bool swiglu = st.out_mode == TP_OUT_SWIGLU;
    const int T = swiglu ? 2 * KT : KT;
    const int64_t N = (t.b - t.a) * T;
    const int64_t NW = N < TP_WARPS ? N : TP_WARPS;
    const int64_t i0 = warp < NW ? tsk_begin(warp, N, NW) : 0, i1 = warp < NW ? tsk_begin(warp + 1, N, NW) : 0;
    /* shared memory: q [KP][2] bytes, sx [GP], corr [GP][4], {sx, corr sum} [GP], part */
    int8_t *qs = (int8_t *)sm;
    float *sxs = (float *)(sm + 2 * KP);
    int *crs = (int *)(sxs + GP);
    int2 *pairs = (int2 *)(crs + 4 * GP);
    float *part = (float *)(pairs + GP); /* [TP_WARPS][2 slots][32]: rows 0..15 matrix 0, 16..31 up */

    /* the first TP_U tiles of the warp's range, and L2 for the rest, before the wait */
    constexpr bool RING = MODE == TP_M_RING, CPA = MODE == TP_M_CPA;
    tp_slot sl[MODE == TP_M_REGS ? TP_U : 1];
    int64_t ls = i0 / T; /* load cursor: local strip, item, address */
    int ln = (int)(i0 - ls * T);
    const uint8_t *lp = NULL;
    /* TP_M_CPA: this warp's TP_D tile slots */
    const uint32_t wslots = (uint32_t)__cvta_generic_to_shared(sm) + (uint32_t)a.ring_off + (uint32_t)(warp * TP_D * TCT_TILE);
    auto cp_tile = [&](uint32_t k) { /* the load cursor's tile into slot k, then the cursor on */
        const uint32_t dst = wslots + k * TCT_TILE;
        cp_async16(dst + 16u * lane, lp + 16 * lane);
        cp_async16(dst + 512u + 16u * lane, lp + 512 + 16 * lane);
        if (lane < 4) cp_async16(dst + 1024u + 16u * lane, lp + 1024 + 16 * lane);
    };
    auto advance = [&](int64_t next) { /* next: the item the cursor moves to */
        if (++ln == T) {
            ln = 0;
            ls++;
            if (next < i1) lp = tp_item_ptr(st, swiglu, t.a + ls, 0, KT);
        } else if (swiglu && ln == KT) {
            lp = tp_item_ptr(st, swiglu, t.a + ls, ln, KT);
        } else {
            lp += TCT_TILE;
        }
    };
    if (CPA) {
        lp = i0 < i1 ? tp_item_ptr(st, swiglu, t.a + ls, ln, KT) : NULL;
#pragma unroll 1
        for (int u = 0; u < TP_D; u++) {
            if (i0 + u < i1) {
                cp_tile((uint32_t)u);
                advance(i0 + u + 1);
            }
            cp_commit(); /* one group a slot, empty or not */
        }
    }
    if (MODE == TP_M_REGS) {
        lp = i0 < i1 ? tp_item_ptr(st, swiglu, t.a + ls, ln, KT) : NULL;
#pragma unroll
        for (int u = 0; u < TP_U; u++) {
            if (i0 + u < i1) {
                tp_slot_load(sl[u], lp, lane);
                advance(i0 + u + 1);
            }
        }
    }
    tp_prefetch(st, t.a, t.b, a.prefetch);
    if (!tp_wait(a, t.stage, st.dep, flag)) return false;
    if (pr && tid == 0) pr[1] = tp_now();

    /* the input, quantised: warp w takes the 128-blocks w, w + TP_WARPS, ..., TP_INB of
     * them loaded before they are quantised (the first batch's loads beside the norm's
     * partial sums: one L2 round trip, not one a block); padding blocks past K are zero
     * (the tile's padding group has zero codes and scales) */
    const bool norm = st.in_mode == TP_IN_NORM, xf = Q35 && st.signs != NULL;
    const float *src = a.scratch + (norm ? a.buf_off[TP_BUF_X] : a.buf_off[st.in_buf]);
    tp_inb d;
    if (!xf) tp_in_load(st, src, norm, G, warp, lane, d);
    float inv = 1.0f;
    if (norm) {
        const tp_stage &ns = a.stages[st.norm_src];
        if (warp == 0) {
            float ss = 0;
            for (int i = lane; i < ns.n_tasks; i += 32) ss += __ldcg(a.part_f + ns.task0 + i);
            ss = tc_warp_sum(ss);
            if (lane == 0) red[0] = ss;
        }
        tp_sync();
        inv = (float)(1.0 / sqrt((double)red[0] / K + (double)st.eps));
    }
    if (xf) {
        tp_in_xf(st, src, norm, inv, K, lane, warp, qs, sxs, crs, pairs);
    } else {
        tp_in_quant(GP, warp, inv, d, lane, qs, sxs, crs, pairs);
        for (int c0 = warp + TP_INB * TP_WARPS; c0 < GP; c0 += TP_INB * TP_WARPS) {
            tp_in_load(st, src, norm, G, c0, lane, d);
            tp_in_quant(GP, c0, inv, d, lane, qs, sxs, crs, pairs);
        }
    }
    tp_sync();
    if (pr && tid == 0) pr[2] = tp_now();

    /* the products: compute cursor (local strip cs, item cn) */
    const uint32_t s_q = (uint32_t)__cvta_generic_to_shared(qs) + (uint32_t)((g >> 2) * 32 + tq * 64);
    const uint32_t s_c = (uint32_t)__cvta_generic_to_shared(pairs);
    const bool lo = tq >= 2;
    const float mult = tq == 0 ? 128.0f : tq == 2 ? 1.0f : 0.0f; /* hi, lo, unused columns */
    int64_t cs = i0 / T;
    int cn = (int)(i0 - cs * T);
    float f0g = 0, f0h = 0, f1g = 0, f1h = 0;
    float ss = 0, best = -INFINITY;
    int besti = -1;
    /* after item ii: the strip's end for this warp (its own strip: out; a split one: a partial) */
    auto strip_end = [&](int64_t ii) {
        if (++cn == T || ii + 1 == i1) {
            float v[4] = {f0g * mult, f0h * mult, f1g * mult, f1h * mult};
#pragma unroll
            for (int k = 0; k < 4; k++) v[k] += __shfl_xor_sync(0xffffffffu, v[k], 2);
            const int64_t sb = cs * T;
            if (sb >= i0 && sb + T <= i1) { /* the whole strip is this warp's */
                if (tq == 0) {
                    tp_emit<Q35>(a, st, swiglu, t.a + cs, g, v[0], v[2], ss, best, besti);
                    tp_emit<Q35>(a, st, swiglu, t.a + cs, 8 + g, v[1], v[3], ss, best, besti);
                }
            } else if (tq == 0) {
                float *pp = part + (warp * 2 + (cs == i0 / T ? 0 : 1)) * 32;
                pp[g] = v[0];
                pp[8 + g] = v[1];
                pp[16 + g] = v[2];
                pp[24 + g] = v[3];
            }
            f0g = f0h = f1g = f1h = 0;
            cn = 0;
            cs++;
        }
    };
    if (CPA) {
#pragma unroll 1
        for (int64_t ii = i0; ii < i1; ii++) {
            cp_wait<TP_D - 1>(); /* the oldest group: item ii */
            __syncwarp();        /* (the scales came by lanes 0..3) */
            const uint32_t k = (uint32_t)((ii - i0) % TP_D);
            tp_slot_lds(sl[0], wslots + k * TCT_TILE, lane);
            __syncwarp(); /* the slot read by every lane before its refill */
            if (ii + TP_D < i1) {
                cp_tile(k);
                advance(ii + TP_D + 1);
            }
            cp_commit();
            const int q = swiglu && cn >= KT, j = cn - q * KT;
            if (q) tp_mma_tile(sl[0], s_q + 512u * j, s_c + 16u * j, lo, f1g, f1h);
            else tp_mma_tile(sl[0], s_q + 512u * j, s_c + 16u * j, lo, f0g, f0h);
            strip_end(ii);
        }
    } else if (RING) {
        tp_slot nx;
        if (i0 < i1) tp_ring_get(a, t.stage, rg, nbase + (uint32_t)i0, lane, sl[0]);
#pragma unroll 1
        for (int64_t ii = i0; ii < i1; ii++) {
            if (ii + 1 < i1) tp_ring_get(a, t.stage, rg, nbase + (uint32_t)(ii + 1), lane, nx);
            const int q = swiglu && cn >= KT, j = cn - q * KT;
            if (q) tp_mma_tile(sl[0], s_q + 512u * j, s_c + 16u * j, lo, f1g, f1h);
            else tp_mma_tile(sl[0], s_q + 512u * j, s_c + 16u * j, lo, f0g, f0h);
            strip_end(ii);
            sl[0] = nx;
        }
    } else {
#pragma unroll 1
        for (int64_t i = i0; i < i1; i += TP_U) {
#pragma unroll
            for (int u = 0; u < (MODE == TP_M_REGS ? TP_U : 1); u++) {
                const int64_t ii = i + u;
                if (ii < i1) { /* warp-uniform */
                    const int q = swiglu && cn >= KT, j = cn - q * KT;
                    if (q) tp_mma_tile(sl[u], s_q + 512u * j, s_c + 16u * j, lo, f1g, f1h);
                    else tp_mma_tile(sl[u], s_q + 512u * j, s_c + 16u * j, lo, f0g, f0h);
                    if (ii + TP_U < i1) { /* refill the slot with item ii + TP_U */
                        tp_slot_load(sl[u], lp, lane);
                        advance(ii + TP_U + 1);
                    }
                    strip_end(ii);
                }
            }
        }
    }
    tp_sync();
    if (pr && tid == 0) pr[3] = tp_now();
    /* the strips split between warps: boundary w (1 .. NW-1) inside a strip, the first
     * such boundary of its strip adds the partials of the strip's warps in order */
    if (tid < (NW - 1) * 16) {
        const int64_t w = tid / 16 + 1, r = tid & 15, u = tsk_begin(w, N, NW), s = u / T;
        if (u % T != 0 && (w == 1 || tsk_begin(w - 1, N, NW) <= s * T)) {
            const int64_t e = (s + 1) * T < N ? (s + 1) * T : N;
            const int64_t w0 = tsk_owner(s * T, N, NW), w1 = tsk_owner(e - 1, N, NW);
            float y0 = 0, y1 = 0;
            for (int64_t ws = w0; ws <= w1; ws++) {
                const float *pp = part + (ws * 2 + (s == tsk_begin(ws, N, NW) / T ? 0 : 1)) * 32;
                y0 += pp[r];
                y1 += pp[16 + r];
            }
            tp_emit<Q35>(a, st, swiglu, t.a + s, (int)r, y0, y1, ss, best, besti);
        }
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
    return true;
}
