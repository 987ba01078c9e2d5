/*
 * tc_persist.cu - the persistent decode step (docs/persistent.md): one cooperative
 * kernel of one CTA per SM runs a whole single-token step of a qwen3 model from the
 * program of persist.h (made on the host by src/backends/cuda/persist_build.c). The
 * qwen35 stages (Hadamard transforms in the reading stage, gated attention with heads of
 * up to 256, the GDN's conv in the qkv matmul, the GDN task) are written but run only
 * behind the lab switch tc_persist_allow_qwen35 until a device run has checked them.
 *
 * Each CTA walks its task list in stage order. A task waits for the counter of the
 * stage it depends on (thread 0: ld.acquire.gpu, __nanosleep back-off, a clock64
 * budget: the watchdog), runs, and signals its own stage's counter (bar.sync, then
 * thread 0: fence + red.release.gpu). Activations written by other CTAs in this launch
 * are read with ld.global.cg (L2), never through the non-coherent paths.
 *
 * Matmuls read the tiled ternary layout (gemv_tiled.h) with integer tensor-core
 * products against the input quantised once per task in shared memory, their first
 * weight loads issued before the task's wait (tc_persist_mm.cuh); the lab variant
 * (RING) adds a loader warp that streams the tiles into a shared-memory ring.
 */
#include "kernels/cuda/attn.cuh"
#include "kernels/cuda/act.cuh" /* after attn.cuh: it needs internal.cuh */
#include "kernels/cuda/gdn_state.cuh"
#include "kernels/cuda/gemv_tiled.h"
#include "kernels/cuda/persist.h"
#include "kernels/cuda/ptx.cuh"

#include <cuda_awbarrier_primitives.h>

#include <math.h>
#include <stdio.h>

struct tp_args {
    const tp_stage *stages;
    const tp_task *tasks;
    const int32_t *cta_off;
    float *scratch;
    float *part_f;      /* per task slot: a sum of squares, or the max of a head task */
    int *part_i;        /* per task slot: the argmax of a head task */
    unsigned *cnt;      /* [n_stages + 1]: per stage, tasks done; the last never signalled */
    int *status;        /* [0] 0, or the stage that timed out + 1; [1] the argmax token */
    int n_stages;
    int token, pos, n_ctx;
    int kv_type;
    void *kcache, *vcache; /* the session's caches (all layers) */
    size_t k_row, v_row;
    long long budget;   /* clock64 cycles a wait may spin */
    int hang_stage;     /* tests: this stage waits for the never-signalled counter (-1: none) */
    unsigned long long *prof; /* NULL, or per task slot TP_PS stamps (ns): wait start, run start,
                               * input done, products done, end (signalled) */
    long long prefetch; /* bytes of a matmul task's weights (per matrix) asked into L2 before its wait */
    int ring_slots;     /* the ring variant: R, and the ring's byte offset in shared memory */
    size_t ring_off;
    size_t buf_off[TP_BUF_COUNT];
    /* GDN layers: the session's states (tc_persist_seq), a layer's conv state in floats and
     * recurrent state in bytes */
    float *conv_state;
    uint8_t *gdn_state;
    size_t conv_n, st_bytes;
    int gdn_bf16;
};

__device__ __forceinline__ unsigned long long tp_now(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#define TP_PS 5 /* profile stamps a task */

/* ------------------------------------------------------------ synchronisation */

/* the CTA's barrier among the TP_THREADS compute threads (named barrier 1: the ring
 * variant's loader warp is not in it) */
__device__ __forceinline__ void tp_sync(void) { asm volatile("bar.sync 1, %0;" ::"n"(TP_THREADS) : "memory"); }

__device__ __forceinline__ unsigned tp_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void tp_red_release(unsigned *p) {
    asm volatile("fence.acq_rel.gpu;\n\tred.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

/* Wait until stage dep has signalled all its tasks; false when the CTA must leave (the
 * budget ran out: the status names stage s; or another CTA already failed). Every
 * thread of the CTA gets the same answer. */
__device__ bool tp_wait(const tp_args &a, int s, int dep, int *flag) {
    if (threadIdx.x == 0) {
        int abort = 0;
        const bool hang = s == a.hang_stage;
        if (dep >= 0 || hang) {
            const unsigned *c = hang ? a.cnt + a.n_stages : a.cnt + dep;
            const unsigned target = hang ? 1u : (unsigned)a.stages[dep].n_tasks;
            /* the injected wait runs out first (a quarter of the budget), so that the
             * stages waiting behind it do not name themselves */
            const long long budget = hang ? a.budget / 4 : a.budget;
            const long long t0 = clock64();
            unsigned ns = 32;
            while (tp_ld_acquire(c) < target) {
                if (*(volatile int *)a.status != 0) {
                    abort = 1;
                    break;
                }
                if (clock64() - t0 > budget) {
                    atomicCAS(a.status, 0, s + 1);
                    abort = 1;
                    break;
                }
                __nanosleep(ns);
                if (ns < 128) ns <<= 1; /* short: every stage boundary pays the wake-up */
            }
        }
        *flag = abort;
    }
    tp_sync();
    const bool ok = !*flag;
    tp_sync(); /* the flag is read before thread 0 writes it again */
    return ok;
}

/* the CTA's writes, then the counter (CUTLASS's semaphore: an acq_rel fence at gpu scope
 * after the barrier, then a relaxed add; lighter than a sequentially consistent fence) */
__device__ __forceinline__ void tp_signal(const tp_args &a, int s) {
    tp_sync();
    if (threadIdx.x == 0) tp_red_release(a.cnt + s);
}

/* the sum of v over the CTA, the same in every thread (fixed order) */
__device__ float tp_block_sum(float v, float *red) {
    v = tc_warp_sum(v);
    const int w = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) red[w] = v;
    tp_sync();
    float s = 0;
#pragma unroll
    for (int i = 0; i < TP_WARPS; i++) s += red[i];
    tp_sync();
    return s;
}

/* (max, lowest index of the max) over the CTA into *bv, *bi of thread 0 */
__device__ void tp_block_argmax(float v, int i, float *redf, int *redi, float *bv, int *bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (ov > v || (ov == v && oi >= 0 && (i < 0 || oi < i))) {
            v = ov;
            i = oi;
        }
    }
    const int w = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) {
        redf[w] = v;
        redi[w] = i;
    }
    tp_sync();
    if (threadIdx.x == 0) {
        float m = redf[0];
        int mi = redi[0];
        for (int k = 1; k < TP_WARPS; k++)
            if (redf[k] > m || (redf[k] == m && redi[k] >= 0 && (mi < 0 || redi[k] < mi))) {
                m = redf[k];
                mi = redi[k];
            }
        *bv = m;
        *bi = mi;
    }
    tp_sync();
}

/* A matmul task's weights do not depend on the stage it waits for: before the wait, ask
 * L2 for its strips (contiguous in each matrix: strip s at w + s * KT * 1088), up to
 * `cap` bytes per matrix, one 128-byte line per thread and step. */
__device__ void tp_prefetch(const tp_stage &st, int64_t a, int64_t b, long long cap) {
    if (st.kind != TP_MATMUL || cap <= 0 || b <= a) return;
    const bool swiglu = st.out_mode == TP_OUT_SWIGLU;
    const size_t sb = (size_t)st.kt[0] * TCT_TILE;
    for (int q = 0; q < (swiglu ? 2 : st.n_mat); q++) {
        /* the strips [a, b) of matrix q: [max(a, strip0[q]), min(b, strip0[q+1])) */
        const int64_t lo = swiglu ? a : (a > st.strip0[q] ? a : st.strip0[q]);
        const int64_t hi = swiglu ? b : (b < st.strip0[q + 1] ? b : st.strip0[q + 1]);
        if (hi <= lo) continue;
        const int64_t s0 = swiglu ? 0 : st.strip0[q];
        const uint8_t *p = (const uint8_t *)st.w[q] + (size_t)(lo - s0) * sb;
        size_t n = (size_t)(hi - lo) * sb;
        if (n > (size_t)cap) n = (size_t)cap;
        for (size_t o = (size_t)threadIdx.x * 128; o < n; o += (size_t)TP_THREADS * 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + o));
    }
}

/* ------------------------------------------------------------ embed */

__device__ __forceinline__ float tp_tiled_elem(const uint8_t *w, int64_t kt, int64_t r, int64_t j) {
    const int c = (w[tct_code_byte(r, j, kt)] >> (2 * (j & 3))) & 3;
    const float d = tc_ld_f16(w + tct_scale_byte(r, j >> 7, kt));
    return (float)(c - 1) * d;
}

/* The transform of one 1024-block by one warp: lane l holds elements sb*128 + 4l + e
 * (sb 0..7, e 0..3) in v[sb][e] (so each 128-block sb is in tc_actq_block's layout). The
 * butterflies in increasing h, pairs (i, i + h) -> (x0 + x1, x0 - x1): the per-op
 * kernels' float operations. h = 1, 2 within a lane, 4..64 across lanes, 128..512 within
 * a lane again. */
__device__ __forceinline__ void tp_fwht1024(float (&v)[8][4], int lane) {
#pragma unroll
    for (int sb = 0; sb < 8; sb++) {
        const float b0 = v[sb][0] + v[sb][1], b1 = v[sb][0] - v[sb][1];
        const float b2 = v[sb][2] + v[sb][3], b3 = v[sb][2] - v[sb][3];
        v[sb][0] = b0 + b2;
        v[sb][1] = b1 + b3;
        v[sb][2] = b0 - b2;
        v[sb][3] = b1 - b3;
    }
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) { /* h = 4 m */
        const bool up = (lane & m) != 0;
#pragma unroll
        for (int sb = 0; sb < 8; sb++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float o = __shfl_xor_sync(0xffffffffu, v[sb][e], m);
                v[sb][e] = up ? o - v[sb][e] : v[sb][e] + o;
            }
    }
#pragma unroll
    for (int hs = 1; hs < 8; hs <<= 1) /* h = 128 hs */
#pragma unroll
        for (int sb = 0; sb < 8; sb++)
            if (!(sb & hs)) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float x0 = v[sb][e], x1 = v[sb + hs][e];
                    v[sb][e] = x0 + x1;
                    v[sb + hs][e] = x0 - x1;
                }
            }
}

template <bool Q35>
__device__ void tp_embed(const tp_args &a, const tp_stage &st, const tp_task &t, float *red) {
    float *x = a.scratch + a.buf_off[TP_BUF_X];
    float ss = 0;
    if (Q35 && st.signs) { /* the inverse transform (whole 1024-blocks a task): signs * FWHT(row) / 32 */
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        const float sc = 1.0f / sqrtf(1024.0f);
        for (int64_t b0 = t.a + 1024 * (int64_t)warp; b0 < t.b; b0 += 1024 * (int64_t)TP_WARPS) {
            float v[8][4];
#pragma unroll
            for (int sb = 0; sb < 8; sb++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    v[sb][e] = tp_tiled_elem((const uint8_t *)st.w[0], st.kt[0], a.token, b0 + sb * 128 + 4 * lane + e);
            tp_fwht1024(v, lane);
#pragma unroll
            for (int sb = 0; sb < 8; sb++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int64_t j = b0 + sb * 128 + 4 * lane + e;
                    const float y = v[sb][e] * sc * __ldg(st.signs + j);
                    x[j] = y;
                    ss += y * y;
                }
        }
    } else {
        for (int64_t j = t.a + threadIdx.x; j < t.b; j += TP_THREADS) {
            const float v = tp_tiled_elem((const uint8_t *)st.w[0], st.kt[0], a.token, j);
            x[j] = v;
            ss += v * v;
        }
    }
    ss = tp_block_sum(ss, red);
    if (threadIdx.x == 0) a.part_f[st.task0 + t.idx] = ss;
    if (t.idx == 0) { /* the position's RoPE angles, once a step (k_attn_prep's math) */
        float *rt = a.scratch + a.buf_off[TP_BUF_ROPE];
        const int rot = st.rope_dims, half = rot / 2;
        for (int i = threadIdx.x; i < half; i += TP_THREADS) {
            const double ang = (double)a.pos * pow((double)st.theta, -2.0 * i / rot);
            rt[i] = (float)cos(ang);
            rt[half + i] = (float)sin(ang);
        }
    }
}

#include "kernels/cuda/tc_persist_mm.cuh"

/* ------------------------------------------------------------ attention */

#define TP_APOS 8 /* positions a warp loads before it scores them */
/* tp_head_prep: EPL head dims per lane, head_dim <= 32 EPL (4: 128, 8: 256; tc_persist_new checks) */

/* one warp: dst = RoPE(rmsnorm(src) * gain) over a head of hd (k_attn_prep's math; the
 * angles' cos and sin from the step's table rt) */
template <int EPL>
__device__ void tp_head_prep(const float *src, const float *gain, float eps, int hd, int rot, const float *rt,
                             float *dst) {
    const int lane = threadIdx.x & 31;
    float v[EPL], ss = 0; /* lane's inputs lane + 32 e: read once */
#pragma unroll
    for (int e = 0; e < EPL; e++) {
        const int j = lane + 32 * e;
        v[e] = j < hd ? __ldcg(src + j) : 0.0f;
        ss += v[e] * v[e];
    }
    ss = tc_warp_sum(ss);
    const float inv = (float)(1.0 / sqrt((double)ss / hd + (double)eps));
#pragma unroll
    for (int e = 0; e < EPL; e++) {
        const int j = lane + 32 * e;
        if (j < hd) dst[j] = v[e] * inv * gain[j];
    }
    __syncwarp();
    const int half = rot / 2;
    for (int i = lane; i < half; i += 32) {
        const float cs = __ldcg(rt + i), sn = __ldcg(rt + half + i);
        float x0 = dst[i], x1 = dst[i + half];
        dst[i] = x0 * cs - x1 * sn;
        dst[i + half] = x1 * cs + x0 * sn;
    }
    __syncwarp();
}

/* x as the cache stores it (what the per-op path reads back at the current position) */
__device__ __forceinline__ float tp_round(float x, const float *) { return x; }
__device__ __forceinline__ float tp_round(float x, const __half *) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ float tp_round(float x, const __nv_bfloat16 *) {
    return __bfloat162float(__float2bfloat16_rn(x));
}


/* 4 consecutive cache entries as floats, one vector load (the non-coherent path: the
 * positions read this way were written by earlier launches) */
__device__ __forceinline__ float4 tp_kv4(const float *p) { return __ldg((const float4 *)p); }
__device__ __forceinline__ float4 tp_kv4(const __half *p) {
    const uint2 u = __ldg((const uint2 *)p);
    const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ float4 tp_kv4(const __nv_bfloat16 *p) {
    const uint2 u = __ldg((const uint2 *)p);
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}

/* the cached positions p0, p0 + TP_WARPS, .. (TP_APOS / NV of them, those < pos; the rest
 * zero) of kv head kh, lane l holding dims 128 c + 4l .. +3 (c < NV: NV = 1 for heads of
 * up to 128, 2 up to 256): they do not depend on this step */
template <typename KV, int NV>
__device__ __forceinline__ void tp_attn_load(const KV *kc, const KV *vc, int p0, int pos, size_t kvw, int kh, int HD,
                                             int lane, float4 (&kv)[TP_APOS / NV][NV],
                                             float4 (&vv)[TP_APOS / NV][NV]) {
#pragma unroll
    for (int u = 0; u < TP_APOS / NV; u++) {
        const int p = p0 + u * TP_WARPS;
#pragma unroll
        for (int c = 0; c < NV; c++) {
            const size_t base = att_kv_index(p, kvw, kh, HD) + 128 * c + 4 * lane;
            const bool in = 128 * c + 4 * lane < HD && p < pos;
            kv[u][c] = in ? tp_kv4(kc + base) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            vv[u][c] = in ? tp_kv4(vc + base) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
}

/* The attention task: the first batch of cached positions loaded, the wait (false: the
 * CTA must leave), q and the position's k, v made, the scores. Gated (qwen35): the q rows
 * are q|gate per head and the output is multiplied by sigmoid(gate). */
template <typename KV, int NV>
__device__ bool tp_attn(const tp_args &a, const tp_stage &st, const tp_task &t, float *sm, int *flag,
                        unsigned long long *pr) {
    constexpr int AP = TP_APOS / NV;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int HD = st.head_dim, NH = st.n_head, NKV = st.n_head_kv, grp = NH / NKV;
    const int h = (int)t.a, kh = h / grp, pos = a.pos;
    const int qs = st.gated ? 2 * HD : HD; /* q rows a head */
    const size_t qw = (size_t)NH * qs, kvw = (size_t)NKV * HD;
    KV *kc = (KV *)((uint8_t *)a.kcache + (size_t)st.kv_index * a.n_ctx * a.k_row);
    KV *vc = (KV *)((uint8_t *)a.vcache + (size_t)st.kv_index * a.n_ctx * a.v_row);
    float4 kv[AP][NV], vv[AP][NV];
    tp_attn_load<KV, NV>(kc, vc, warp, pos, kvw, kh, HD, lane, kv, vv);
    if (!tp_wait(a, t.stage, st.dep, flag)) return false;
    if (pr && tid == 0) pr[1] = tp_now();
    const float *qkv = a.scratch + a.buf_off[TP_BUF_QKV];
    const float scale = st.scale;
    float *sq = sm, *sk = sm + HD, *sv = sm + 2 * HD, *wacc = sm + 3 * HD; /* 16-byte aligned: HD % 32 == 0 */
    float *wm = wacc + TP_WARPS * HD, *wl = wm + TP_WARPS;
    const float *rt = a.scratch + a.buf_off[TP_BUF_ROPE];
    if (warp == 0) tp_head_prep<4 * NV>(qkv + (size_t)h * qs, st.q_norm, st.eps, HD, st.rope_dims, rt, sq);
    if (warp == 1) {
        tp_head_prep<4 * NV>(qkv + qw + (size_t)kh * HD, st.k_norm, st.eps, HD, st.rope_dims, rt, sk);
        for (int j = lane; j < HD; j += 32) sk[j] = tp_round(sk[j], (const KV *)0);
    }
    if (warp == 2)
        for (int j = lane; j < HD; j += 32) sv[j] = tp_round(__ldcg(qkv + qw + kvw + (size_t)kh * HD + j), (const KV *)0);
    tp_sync();
    if (pr && tid == 0) pr[2] = tp_now();
    if (h % grp == 0) /* the group's first query head stores the position's k and v */
        for (int j = tid; j < HD; j += TP_THREADS) {
            att_store(kc, a.kv_type, att_kv_index(pos, kvw, kh, HD) + j, sk[j]);
            att_store(vc, a.kv_type, att_kv_index(pos, kvw, kh, HD) + j, sv[j]);
        }
    bool act[NV];
    float4 q[NV], acc[NV];
#pragma unroll
    for (int c = 0; c < NV; c++) { /* lane l: dims 128 c + 4l .. +3 */
        act[c] = 128 * c + 4 * lane < HD;
        q[c] = act[c] ? *(const float4 *)(sq + 128 * c + 4 * lane) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float m = -INFINITY, l = 0.0f;
    /* positions warp, warp + 8, ...: AP of them a step, their k and v loaded before the
     * products (the same order as one at a time: the same result); the current
     * position's from shared memory */
    for (int p0 = warp; p0 <= pos; p0 += AP * TP_WARPS) {
        if (p0 != warp) tp_attn_load<KV, NV>(kc, vc, p0, pos, kvw, kh, HD, lane, kv, vv);
#pragma unroll
        for (int u = 0; u < AP; u++)
            if (p0 + u * TP_WARPS == pos) /* the position's k, v from shared memory */
#pragma unroll
                for (int c = 0; c < NV; c++)
                    if (act[c]) {
                        kv[u][c] = *(const float4 *)(sk + 128 * c + 4 * lane);
                        vv[u][c] = *(const float4 *)(sv + 128 * c + 4 * lane);
                    }
#pragma unroll
        for (int u = 0; u < AP; u++) {
            if (p0 + u * TP_WARPS > pos) break; /* uniform across the warp */
            float d = 0.0f;
#pragma unroll
            for (int c = 0; c < NV; c++)
                d += q[c].x * kv[u][c].x + q[c].y * kv[u][c].y + q[c].z * kv[u][c].z + q[c].w * kv[u][c].w;
            d = tc_warp_sum(d) * scale;
            const float mn = fmaxf(m, d);
            const float corr = expf(m - mn), pe = expf(d - mn);
            l = l * corr + pe;
#pragma unroll
            for (int c = 0; c < NV; c++) {
                acc[c].x = acc[c].x * corr + pe * vv[u][c].x;
                acc[c].y = acc[c].y * corr + pe * vv[u][c].y;
                acc[c].z = acc[c].z * corr + pe * vv[u][c].z;
                acc[c].w = acc[c].w * corr + pe * vv[u][c].w;
            }
            m = mn;
        }
    }
    if (pr && tid == 0) pr[3] = tp_now(); /* (warp 0's positions) */
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
#pragma unroll
    for (int c = 0; c < NV; c++)
        if (act[c]) *(float4 *)(wacc + warp * HD + 128 * c + 4 * lane) = acc[c];
    tp_sync();
    float *out = a.scratch + a.buf_off[TP_BUF_ATT] + (size_t)h * HD;
    const float *gate = qkv + (size_t)h * qs + HD;
    for (int j = tid; j < HD; j += TP_THREADS) {
        float M = -INFINITY;
        for (int w = 0; w < TP_WARPS; w++) M = fmaxf(M, wm[w]);
        float L = 0, o = 0;
        for (int w = 0; w < TP_WARPS; w++) {
            const float f = wm[w] == -INFINITY ? 0.0f : expf(wm[w] - M);
            L += wl[w] * f;
            o += wacc[w * HD + j] * f;
        }
        float y = o / L;
        if (st.gated) y *= 1.0f / (1.0f + expf(-__ldcg(gate + j)));
        out[j] = y;
    }
    return true;
}

/* ------------------------------------------------------------ GDN */

/* a row element of the GDN's a/b projections in shared memory (TP_AB_*) */
__device__ __forceinline__ float tp_ab_elem(const uint8_t *w, int kind, int j) {
    if (kind == TP_AB_F32) return ((const float *)w)[j];
    const uint16_t u = ((const uint16_t *)w)[j];
    return kind == TP_AB_F16 ? __half2float(__ushort_as_half(u)) : __uint_as_float((uint32_t)u << 16);
}

/* q and k of the task in shared memory: row e at (e / 16) * 17 + e % 16 (the 8 row groups
 * of a warp read 8 different banks) */
#define TP_GQ(e) (((e) >> 4) * 17 + ((e) & 15))
#define TP_GQN (8 * 17)

/* The GDN task: value head p = t.a of the layer for this token (kernels.h's GDN step;
 * persist_ref.c gdn()). Thread t owns columns 4 cg .. 4 cg + 3 (cg = t / 8) of rows
 * 16 rg .. 16 rg + 15 (rg = t % 8) of the head's state in registers, loaded before the wait
 * (only this task writes them, in earlier launches), and the a, b rows are copied into
 * shared memory before it too. After the wait: the normed x (the norm site's sum of
 * squares from its source's partial slots) dotted with the a, b rows; q, k of the key head
 * (conv'd by the stage before) L2-normalised; decay, beta; the delta rule; the gated norm;
 * the head's dv outputs to its slot (grouped order when out_grouped). dk, dv <= 128. */
__device__ bool tp_gdn(const tp_args &a, const tp_stage &st, const tp_task &t, float *sm, float *red, int *flag,
                       unsigned long long *pr) {
    const int tid = threadIdx.x;
    const int nk = st.n_k, nv = st.n_v, dk = st.dk, dv = st.dv, r = nv / nk, E = st.in_k;
    const int p = (int)t.a, kh = st.v_tiled ? p % nk : p / r;
    const int cg = tid >> 3, rg = tid & 7;
    constexpr int RPT = 16;
    const bool colok = 4 * cg < dv, bf = a.gdn_bf16 != 0;
    const size_t es = bf ? 2 : 4, rs = (size_t)dv * es;
    uint8_t *Sb = a.gdn_state + (size_t)st.gdn_index * a.st_bytes +
                  ((size_t)p * dk * dv + (size_t)rg * RPT * dv + 4 * (size_t)cg) * es;
    asm volatile("" : "+l"(Sb)); /* one base address, not RPT live ones */
    float4 S[RPT];
#pragma unroll
    for (int e = 0; e < RPT; e++)
        S[e] = colok && rg * RPT + e < dk ? gdn_ld4b(Sb + e * rs, bf) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float *sq = sm, *sk = sm + TP_GQN;
    uint8_t *wab = (uint8_t *)(sm + 2 * TP_GQN); /* 16-byte aligned */
    const size_t rowb = (size_t)E * (st.ab_kind == TP_AB_F32 ? 4 : 2);
    {
        const uint32_t wa_s = (uint32_t)__cvta_generic_to_shared(wab);
        const uint8_t *ga = (const uint8_t *)st.wab[0] + (size_t)p * (size_t)st.ab_rb;
        const uint8_t *gb = (const uint8_t *)st.wab[1] + (size_t)p * (size_t)st.ab_rb;
        for (size_t o = (size_t)tid * 16; o < rowb; o += (size_t)TP_THREADS * 16) {
            cp_async16(wa_s + (uint32_t)o, ga + o);
            cp_async16(wa_s + (uint32_t)(rowb + o), gb + o);
        }
        cp_commit();
    }
    if (!tp_wait(a, t.stage, st.dep, flag)) {
        cp_wait<0>(); /* no copy in flight when the CTA leaves */
        return false;
    }
    if (pr && tid == 0) pr[1] = tp_now();
    /* the normed x and the a, b dots */
    const tp_stage &ns = a.stages[st.norm_src];
    if (tid < 32) {
        float ss = 0;
        for (int i = tid; i < ns.n_tasks; i += 32) ss += __ldcg(a.part_f + ns.task0 + i);
        ss = tc_warp_sum(ss);
        if (tid == 0) red[0] = ss;
    }
    cp_wait<0>();
    tp_sync();
    const float inv = (float)(1.0 / sqrt((double)red[0] / E + (double)st.eps));
    tp_sync(); /* red[0] read before the block sums reuse red */
    const float *x = a.scratch + a.buf_off[TP_BUF_X];
    float pa = 0.0f, pb = 0.0f;
    for (int j = tid; j < E; j += TP_THREADS) {
        const float xn = __ldcg(x + j) * inv * __ldg(st.gain + j);
        pa = fmaf(tp_ab_elem(wab, st.ab_kind, j), xn, pa);
        pb = fmaf(tp_ab_elem(wab + rowb, st.ab_kind, j), xn, pb);
    }
    pa = tp_block_sum(pa, red);
    pb = tp_block_sum(pb, red);
    /* q, k of the key head; v of the thread's columns; z of its output column */
    const float *w = a.scratch + a.buf_off[TP_BUF_QKV];
    const float qv = tid < dk ? __ldcg(w + (size_t)kh * dk + tid) : 0.0f;
    const float kx = tid < dk ? __ldcg(w + (size_t)nk * dk + (size_t)kh * dk + tid) : 0.0f;
    float v4[4];
#pragma unroll
    for (int c = 0; c < 4; c++) v4[c] = colok ? __ldcg(w + (size_t)2 * nk * dk + (size_t)p * dv + 4 * cg + c) : 0.0f;
    const int oc = 4 * cg + (rg & 3); /* threads rg < 4 give column oc */
    const bool own = rg < 4 && oc < dv;
    const float zz = own ? __ldcg(a.scratch + a.buf_off[TP_BUF_Z] + (size_t)p * dv + oc) : 0.0f;
    const float sq2 = tp_block_sum(qv * qv, red), sk2 = tp_block_sum(kx * kx, red);
    const float iq = (float)(1.0 / sqrt((double)sq2 + 1e-6)) * (1.0f / sqrtf((float)dk));
    const float ik = (float)(1.0 / sqrt((double)sk2 + 1e-6));
    if (tid < 128) {
        sq[TP_GQ(tid)] = qv * iq;
        sk[TP_GQ(tid)] = kx * ik;
    }
    const float xa = pa + st.dt_bias[p];
    const float sp = xa > 20.0f ? xa : log1pf(expf(xa));
    const float decay = expf(st.ssm_a[p] * sp), beta = 1.0f / (1.0f + expf(-pb));
    tp_sync(); /* q, k in shared memory */
    if (pr && tid == 0) pr[2] = tp_now();
    float kv[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sv[4] = {0.0f, 0.0f, 0.0f, 0.0f}, kq = 0.0f;
#pragma unroll
    for (int e = 0; e < RPT; e++) {
        const float kk = sk[TP_GQ(rg * RPT + e)], qq = sq[TP_GQ(rg * RPT + e)];
        float *s4 = &S[e].x;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const float s = s4[c] * decay;
            s4[c] = s;
            kv[c] = fmaf(s, kk, kv[c]);
            sv[c] = fmaf(s, qq, sv[c]);
        }
        kq = fmaf(kk, qq, kq);
    }
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) { /* over the 8 row groups (lanes t % 8) */
#pragma unroll
        for (int c = 0; c < 4; c++) {
            kv[c] += __shfl_xor_sync(0xffffffffu, kv[c], o);
            sv[c] += __shfl_xor_sync(0xffffffffu, sv[c], o);
        }
        kq += __shfl_xor_sync(0xffffffffu, kq, o);
    }
    float d[4], oj = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; c++) {
        d[c] = (v4[c] - kv[c]) * beta;
        const float oc_ = sv[c] + kq * d[c];
        if (c == (rg & 3)) oj = oc_;
    }
#pragma unroll
    for (int e = 0; e < RPT; e++) {
        const float kk = sk[TP_GQ(rg * RPT + e)];
        float *s4 = &S[e].x;
#pragma unroll
        for (int c = 0; c < 4; c++) s4[c] = fmaf(kk, d[c], s4[c]);
        if (colok && rg * RPT + e < dk) gdn_st4b(Sb + e * rs, S[e], bf);
    }
    if (pr && tid == 0) pr[3] = tp_now();
    /* the gated norm over the dv columns */
    if (!own) oj = 0.0f;
    const float ss = tp_block_sum(oj * oj, red);
    if (own) {
        const float invo = 1.0f / sqrtf(ss / (float)dv + st.eps);
        const int slot = st.out_grouped ? (p % nk) * r + p / nk : p;
        a.scratch[a.buf_off[st.out_buf[0]] + (size_t)slot * dv + oc] = oj * invo * st.gdn_norm[oc] * tc_silu(zz);
    }
    return true;
}

/* ------------------------------------------------------------ the kernel */

/* MODE (tc_persist_mm.cuh): TP_M_REGS, TP_M_RING (a loader warp: TP_THREADS + 32
 * threads), TP_M_CPA */
/* Q35: with the qwen35 stages (a separate build, so that qwen3's keeps its registers) */
template <typename KV, int MODE, bool Q35>
__global__ void __launch_bounds__(TP_THREADS + (MODE == TP_M_RING ? 32 : 0), 1) k_persist(const tp_args a) {
    constexpr bool RING = MODE == TP_M_RING;
    extern __shared__ float4 tp_smem4[];
    float *sm = (float *)tp_smem4;
    __shared__ float red[TP_WARPS];
    __shared__ int redi[TP_WARPS];
    __shared__ int flag;
    __shared__ int quit; /* RING: the compute threads left early (the loader stops) */
    const int c = blockIdx.x;
    tp_ring rg = {0, 0, 0, 1, &quit};
    uint32_t nbase = 0; /* RING: the CTA's tiles before this task's */
    if (RING) {
        rg.R = (uint32_t)a.ring_slots;
        rg.buf = (uint32_t)__cvta_generic_to_shared(sm) + (uint32_t)a.ring_off;
        rg.full = rg.buf + rg.R * TCT_TILE;
        rg.empty = rg.full + 8u * rg.R;
        if (threadIdx.x == 0) {
            quit = 0;
            for (uint32_t k = 0; k < rg.R; k++) {
                tp_mbar_init(rg.full + 8u * k, 1);
                tp_mbar_init(rg.empty + 8u * k, 1);
            }
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads(); /* all TP_THREADS + 32 */
        if (threadIdx.x >= TP_THREADS) {
            if (threadIdx.x == TP_THREADS) tp_loader(a, c, rg);
            return;
        }
    }
    for (int i = a.cta_off[c]; i < a.cta_off[c + 1]; i++) {
        const tp_task t = a.tasks[i];
        const tp_stage &st = a.stages[t.stage];
        unsigned long long *pr = a.prof ? a.prof + TP_PS * (size_t)(st.task0 + t.idx) : NULL;
        if (pr && threadIdx.x == 0) pr[0] = tp_now();
        if (st.kind == TP_MATMUL) { /* the matmul task waits inside */
            if (!tp_mm<MODE, Q35>(a, st, t, (uint8_t *)sm, red, redi, &flag, pr, rg, nbase)) break;
            tp_signal(a, t.stage);
            if (pr && threadIdx.x == 0) pr[4] = tp_now();
            nbase += (uint32_t)((t.b - t.a) * (st.out_mode == TP_OUT_SWIGLU ? 2 : 1) * st.kt[0]);
            continue;
        }
        if (st.kind == TP_ATTN) { /* so does attention (its cached positions first) */
            if (!(Q35 && st.head_dim > 128 ? tp_attn<KV, Q35 ? 2 : 1>(a, st, t, sm, &flag, pr)
                                           : tp_attn<KV, 1>(a, st, t, sm, &flag, pr)))
                break;
            tp_signal(a, t.stage);
            if (pr && threadIdx.x == 0) pr[4] = tp_now();
            continue;
        }
        if (Q35 && st.kind == TP_GDN) { /* and the GDN step (its state first) */
            if (!tp_gdn(a, st, t, sm, red, &flag, pr)) break;
            tp_signal(a, t.stage);
            if (pr && threadIdx.x == 0) pr[4] = tp_now();
            continue;
        }
        tp_prefetch(st, t.a, t.b, a.prefetch);
        if (!tp_wait(a, t.stage, st.dep, &flag)) break;
        if (pr && threadIdx.x == 0) pr[1] = pr[2] = pr[3] = tp_now();
        switch (st.kind) {
        case TP_EMBED: tp_embed<Q35>(a, st, t, red); break;
        default: { /* TP_ARGMAX over the head's partial slots */
            const tp_stage &hs = a.stages[st.norm_src];
            float v = -INFINITY;
            int vi = -1;
            for (int k = threadIdx.x; k < hs.n_tasks; k += TP_THREADS) {
                const float f = __ldcg(a.part_f + hs.task0 + k);
                const int fi = __ldcg(a.part_i + hs.task0 + k);
                if (fi >= 0 && (vi < 0 || f > v || (f == v && fi < vi))) {
                    v = f;
                    vi = fi;
                }
            }
            float bv;
            int bi;
            tp_block_argmax(v, vi, red, redi, &bv, &bi);
            if (threadIdx.x == 0) a.status[1] = bi;
            break;
        }
        }
        tp_signal(a, t.stage);
        if (pr && threadIdx.x == 0) pr[4] = tp_now();
    }
    if (RING && threadIdx.x == 0) *(volatile int *)&quit = 1; /* (after the last task: nothing left to load) */
}

/* ------------------------------------------------------------ host side */

/* families of stages in the profile */
enum { TP_F_EMBED, TP_F_QKV, TP_F_ATTN, TP_F_O, TP_F_GATEUP, TP_F_DOWN, TP_F_HEAD, TP_F_ARGMAX, TP_F_CONV,
       TP_F_GDN, TP_FAMS };
static const char *const tp_fam_name[TP_FAMS] = {"embed", "matmul q,k,v (+norm)", "attention", "matmul o (+resid)",
                                                 "matmul gate,up+swiglu", "matmul down (+resid)", "matmul head",
                                                 "argmax", "matmul qkv,z (+conv)", "GDN step"};
static int tp_family(const tp_stage *s) {
    switch (s->kind) {
    case TP_EMBED: return TP_F_EMBED;
    case TP_ATTN: return TP_F_ATTN;
    case TP_ARGMAX: return TP_F_ARGMAX;
    case TP_GDN: return TP_F_GDN;
    default:
        switch (s->out_mode) {
        case TP_OUT_ROWS: return TP_F_QKV;
        case TP_OUT_CONV: return TP_F_CONV;
        case TP_OUT_SWIGLU: return TP_F_GATEUP;
        case TP_OUT_LOGITS: return TP_F_HEAD;
        default: return s->in_buf == TP_BUF_ATT ? TP_F_O : TP_F_DOWN;
        }
    }
}

/* bytes per matrix of a matmul task asked into L2 before its wait: off (on the 8B, 128 KiB
 * made the step 3.73 ms, off 3.09: H200, 2026-12-04, docs/persistent.md) */
#define TP_PREFETCH_DEFAULT 0

struct tc_persist {
    tc_ctx *cx;
    int n_gdn;             /* GDN layers: the step needs the session's states */
    bool q35;              /* the program has qwen35 stages: k_persist<.., true> */
    size_t conv_n, st_elems; /* a layer's conv state (floats) and recurrent state (elements) */
    tp_stage *stages;
    tp_task *tasks;
    int32_t *cta_off;
    float *scratch, *part_f;
    int *part_i;
    unsigned *words; /* [2] status, then [n_stages + 1] counters */
    size_t n_stages_b, n_tasks_b, n_off_b, scratch_b, part_b, words_b;
    int n_stages, n_cta, V, logits_stage;
    size_t smem;
    size_t buf_off[TP_BUF_COUNT];
    long long budget;
    int hang_stage;
    long long prefetch; /* tp_args.prefetch (tc_persist_set_prefetch) */
    int mode;           /* TP_M_* (tc_persist_set_pipeline) */
    int ring_slots;     /* 0: the ring variant does not fit */
    int cpa_ok;         /* the TP_M_CPA variant fits */
    size_t ring_off, smem_ring, smem_cpa;
    /* the in-kernel profile (tc_persist_profile): per task slot 3 timestamps, and per
     * family of stages the sums over the profiled steps */
    unsigned long long *prof, *prof_host;
    size_t prof_b;
    tp_stage *st_host;   /* the stages (families, task slots) */
    double fam_wait[TP_FAMS], fam_run[TP_FAMS], fam_in[TP_FAMS], fam_prod[TP_FAMS], span, work;
    long long fam_tasks[TP_FAMS], steps;
};

template <typename KV, int MODE, bool Q35> static int tp_prepare(size_t smem) {
    if (smem > 48 * 1024 && cudaFuncSetAttribute(k_persist<KV, MODE, Q35>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return TC_ERR_UNSUPPORTED;
    }
    int nb = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k_persist<KV, MODE, Q35>, TP_THREADS + (MODE == TP_M_RING ? 32 : 0),
                                                      smem) != cudaSuccess ||
        nb < 1) {
        (void)cudaGetLastError();
        return TC_ERR_UNSUPPORTED;
    }
    return 0;
}
template <int MODE, bool Q35> static int tp_prepare_kv(size_t smem) {
    int e = tp_prepare<float, MODE, Q35>(smem);
    if (!e) e = tp_prepare<__half, MODE, Q35>(smem);
    if (!e) e = tp_prepare<__nv_bfloat16, MODE, Q35>(smem);
    return e;
}
template <int MODE> static int tp_prepare_all(size_t smem, bool q35) {
    return q35 ? tp_prepare_kv<MODE, true>(smem) : tp_prepare_kv<MODE, false>(smem);
}

#define TP_RING_MAX 192 /* tile slots of the ring variant at most */

/* the qwen35 stages, not yet run on a device: off unless a test turns them on (lab.h) */
static int tp_allow_q35 = 0;
extern "C" void tc_persist_allow_qwen35(int on) { tp_allow_q35 = on != 0; }
/* where the matmul tiles wait by default (tc_persist_mm.cuh; tc_persist_set_pipeline) */
#define TP_MODE_DEFAULT TP_M_CPA

extern "C" int tc_persist_sms(tc_ctx *cx) {
    TC_CTX(cx);
    int coop = 0;
    if (cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, cx->device) != cudaSuccess || !coop) {
        (void)cudaGetLastError();
        return 0;
    }
    return tc_sm_count();
}

extern "C" void tc_persist_free(tc_persist *ps) {
    if (!ps) return;
    tc_ctx *cx = ps->cx;
    if (ps->stages) tc_free(cx, ps->stages, ps->n_stages_b);
    if (ps->tasks) tc_free(cx, ps->tasks, ps->n_tasks_b);
    if (ps->cta_off) tc_free(cx, ps->cta_off, ps->n_off_b);
    if (ps->scratch) tc_free(cx, ps->scratch, ps->scratch_b);
    if (ps->part_f) tc_free(cx, ps->part_f, ps->part_b);
    if (ps->part_i) tc_free(cx, ps->part_i, ps->part_b);
    if (ps->words) tc_free(cx, ps->words, ps->words_b);
    if (ps->prof) tc_free(cx, ps->prof, ps->prof_b);
    free(ps->prof_host);
    free(ps->st_host);
    free(ps);
}

extern "C" int tc_persist_new(tc_ctx *cx, const tp_prog *p, tc_persist **out) {
    TC_CTX(cx);
    *out = NULL;
    if (!p || p->n_cta < 1 || p->n_cta > tc_sm_count() || p->n_stages < 1) return TC_ERR_UNSUPPORTED;
    /* what this kernel runs: transforms in blocks of 1024, heads of up to 256 (a multiple of
     * 32), GDN heads of up to 128 (dv a multiple of 4), conv widths up to 4, dense a/b rows
     * of f32/f16/bf16 with 16-byte aligned rows; the qwen35 stages only behind the lab
     * switch until a device run has checked them (tc_persist_allow_qwen35) */
    size_t conv_n = 0, st_elems = 0;
    bool q35 = p->n_gdn > 0;
    for (int s = 0; s < p->n_stages; s++) {
        const tp_stage *st = &p->stages[s];
        q35 = q35 || st->signs || st->gated;
        if (st->signs && (st->had_block != 1024 || st->in_k % 1024)) return TC_ERR_UNSUPPORTED;
        if (st->kind == TP_ATTN && (st->head_dim > 256 || st->head_dim % 32)) return TC_ERR_UNSUPPORTED;
        if (st->out_mode == TP_OUT_CONV) {
            if (st->conv_k < 1 || st->conv_k > 4 || !st->conv_w) return TC_ERR_UNSUPPORTED;
            conv_n = (size_t)(st->conv_k - 1) * (size_t)st->n[0];
        }
        if (st->kind == TP_GDN) {
            const size_t rowb = (size_t)st->in_k * (st->ab_kind == TP_AB_F32 ? 4 : 2);
            if (st->dk < 1 || st->dk > 128 || st->dv < 4 || st->dv > 128 || st->dv % 4 || st->ab_kind < 0 ||
                st->ab_rb % 16 || rowb % 16 || ((uintptr_t)st->wab[0] & 15) || ((uintptr_t)st->wab[1] & 15) ||
                st->n_v % st->n_k)
                return TC_ERR_UNSUPPORTED;
            st_elems = (size_t)st->n_v * st->dk * st->dv;
        }
    }
    if (q35 && !tp_allow_q35) return TC_ERR_UNSUPPORTED;
    const size_t smem = tp_smem_bytes(p);
    int e = tp_prepare_all<TP_M_REGS>(smem, q35);
    if (e) return e;
    tc_persist *ps = (tc_persist *)calloc(1, sizeof *ps);
    if (!ps) return (int)cudaErrorMemoryAllocation;
    ps->cx = cx;
    /* the ring variant: as many tile slots (and their two mbarriers) as fit beside */
    int optin = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, cx->device) != cudaSuccess) {
        (void)cudaGetLastError();
        optin = 0;
    }
    ps->ring_off = (smem + 127) & ~(size_t)127;
    const size_t room = (size_t)optin > ps->ring_off + 1024 ? (size_t)optin - ps->ring_off - 1024 : 0;
    size_t R = room / (TCT_TILE + 16);
    if (R > TP_RING_MAX) R = TP_RING_MAX;
    ps->smem_ring = ps->ring_off + R * (TCT_TILE + 16);
    ps->ring_slots = R >= 16 && !tp_prepare_all<TP_M_RING>(ps->smem_ring, q35) ? (int)R : 0;
    ps->smem_cpa = ps->ring_off + (size_t)TP_WARPS * TP_D * TCT_TILE;
    ps->cpa_ok = ps->smem_cpa + 1024 <= (size_t)optin && !tp_prepare_all<TP_M_CPA>(ps->smem_cpa, q35);
    ps->mode = TP_MODE_DEFAULT;
    if (ps->mode == TP_M_CPA && !ps->cpa_ok) ps->mode = TP_M_REGS;
    ps->n_stages = p->n_stages;
    ps->n_gdn = p->n_gdn;
    ps->q35 = q35;
    ps->conv_n = conv_n;
    ps->st_elems = st_elems;
    ps->n_cta = p->n_cta;
    ps->V = p->n_vocab;
    ps->logits_stage = p->logits_stage;
    ps->smem = smem;
    memcpy(ps->buf_off, p->buf_off, sizeof ps->buf_off);
    ps->budget = 1LL << 33;
    ps->hang_stage = -1;
    ps->prefetch = TP_PREFETCH_DEFAULT;
    ps->n_stages_b = (size_t)p->n_stages * sizeof(tp_stage);
    ps->n_tasks_b = (size_t)p->n_tasks * sizeof(tp_task);
    ps->n_off_b = ((size_t)p->n_cta + 1) * sizeof(int32_t);
    ps->scratch_b = p->scratch_floats * sizeof(float);
    ps->part_b = (size_t)p->n_tasks * 4;
    ps->words_b = (2 + (size_t)p->n_stages + 1) * sizeof(unsigned);
    ps->stages = (tp_stage *)tc_malloc(cx, ps->n_stages_b);
    ps->tasks = (tp_task *)tc_malloc(cx, ps->n_tasks_b);
    ps->cta_off = (int32_t *)tc_malloc(cx, ps->n_off_b);
    ps->scratch = (float *)tc_malloc(cx, ps->scratch_b);
    ps->part_f = (float *)tc_malloc(cx, ps->part_b);
    ps->part_i = (int *)tc_malloc(cx, ps->part_b);
    ps->words = (unsigned *)tc_malloc(cx, ps->words_b);
    ps->st_host = (tp_stage *)malloc(ps->n_stages_b);
    if (ps->st_host) memcpy(ps->st_host, p->stages, ps->n_stages_b);
    ps->prof_b = (size_t)p->n_tasks * TP_PS * sizeof(unsigned long long);
    if (!ps->stages || !ps->tasks || !ps->cta_off || !ps->scratch || !ps->part_f || !ps->part_i || !ps->words ||
        !ps->st_host) {
        tc_persist_free(ps);
        return (int)cudaErrorMemoryAllocation;
    }
    e = tc_upload(cx, ps->stages, p->stages, ps->n_stages_b);
    if (!e) e = tc_upload(cx, ps->tasks, p->tasks, ps->n_tasks_b);
    if (!e) e = tc_upload(cx, ps->cta_off, p->cta_off, ps->n_off_b);
    if (e) {
        tc_persist_free(ps);
        return e;
    }
    *out = ps;
    return 0;
}

extern "C" void tc_persist_set_pipeline(tc_persist *ps, int on) {
    if (!ps) return;
    int m = on == 1 ? TP_M_RING : on == 2 ? TP_M_CPA : on == 3 ? TP_M_REGS : TP_MODE_DEFAULT;
    if ((m == TP_M_RING && !ps->ring_slots) || (m == TP_M_CPA && !ps->cpa_ok)) m = TP_M_REGS;
    ps->mode = m;
}

extern "C" void tc_persist_set_prefetch(tc_persist *ps, long long bytes) {
    if (ps) ps->prefetch = bytes < 0 ? TP_PREFETCH_DEFAULT : bytes;
}

extern "C" void tc_persist_debug(tc_persist *ps, int hang_stage, long long budget_cycles) {
    if (!ps) return;
    ps->hang_stage = hang_stage;
    ps->budget = budget_cycles > 0 ? budget_cycles : 1LL << 33;
}

template <typename KV, bool Q35> static int tp_launch_q(tc_persist *ps, tp_args *a) {
    void *args[] = {(void *)a};
    if (ps->mode == TP_M_RING)
        return (int)cudaLaunchCooperativeKernel((const void *)k_persist<KV, TP_M_RING, Q35>, dim3((unsigned)ps->n_cta),
                                                dim3(TP_THREADS + 32), args, ps->smem_ring, tc_cur->stream);
    if (ps->mode == TP_M_CPA)
        return (int)cudaLaunchCooperativeKernel((const void *)k_persist<KV, TP_M_CPA, Q35>, dim3((unsigned)ps->n_cta),
                                                dim3(TP_THREADS), args, ps->smem_cpa, tc_cur->stream);
    return (int)cudaLaunchCooperativeKernel((const void *)k_persist<KV, TP_M_REGS, Q35>, dim3((unsigned)ps->n_cta),
                                            dim3(TP_THREADS), args, ps->smem, tc_cur->stream);
}
template <typename KV> static int tp_launch(tc_persist *ps, tp_args *a) {
    return ps->q35 ? tp_launch_q<KV, true>(ps, a) : tp_launch_q<KV, false>(ps, a);
}

extern "C" int tc_persist_step(tc_persist *ps, const tc_persist_seq *sq, float *logits_host, int *token_out,
                               int *failed_stage) {
    TC_CTX(ps->cx);
    *failed_stage = -1;
    if (sq->kv_type != TC_KV_F32 && sq->kv_type != TC_KV_F16 && sq->kv_type != TC_KV_BF16) return TC_ERR_UNSUPPORTED;
    if (ps->n_gdn && (!sq->conv_state || !sq->gdn_state)) return TC_ERR_UNSUPPORTED;
    tp_args a;
    memset(&a, 0, sizeof a);
    a.stages = ps->stages;
    a.tasks = ps->tasks;
    a.cta_off = ps->cta_off;
    a.scratch = ps->scratch;
    a.part_f = ps->part_f;
    a.part_i = ps->part_i;
    a.status = (int *)ps->words;
    a.cnt = ps->words + 2;
    a.n_stages = ps->n_stages;
    a.token = sq->token;
    a.pos = sq->pos;
    a.n_ctx = sq->n_ctx;
    a.kv_type = sq->kv_type;
    a.kcache = sq->kcache;
    a.vcache = sq->vcache;
    a.k_row = sq->k_row;
    a.v_row = sq->v_row;
    a.budget = ps->budget;
    a.hang_stage = ps->hang_stage;
    a.prof = ps->prof_host ? ps->prof : NULL;
    a.prefetch = ps->prefetch;
    a.ring_slots = ps->ring_slots;
    a.ring_off = ps->ring_off;
    memcpy(a.buf_off, ps->buf_off, sizeof a.buf_off);
    a.conv_state = sq->conv_state;
    a.gdn_state = (uint8_t *)sq->gdn_state;
    a.gdn_bf16 = sq->gdn_bf16 != 0;
    a.conv_n = ps->conv_n;
    /* a layer's recurrent state: bf16 elements packed two a float (the session's layout) */
    a.st_bytes = sq->gdn_bf16 ? (ps->st_elems + 1) / 2 * 4 : ps->st_elems * 4;
    cudaStream_t s = tc_cur->stream;
    int e = (int)cudaMemsetAsync(ps->words, 0, ps->words_b, s);
    if (!e) {
        switch (sq->kv_type) {
        case TC_KV_F32: e = tp_launch<float>(ps, &a); break;
        case TC_KV_F16: e = tp_launch<__half>(ps, &a); break;
        default: e = tp_launch<__nv_bfloat16>(ps, &a); break;
        }
        tc_cur->launches++;
        if (e == (int)cudaErrorCooperativeLaunchTooLarge) { /* not this device now: the caller falls back */
            (void)cudaGetLastError();
            return TC_ERR_UNSUPPORTED;
        }
    }
    int words[2] = {0, -1};
    if (!e) e = (int)cudaMemcpyAsync(words, ps->words, sizeof words, cudaMemcpyDeviceToHost, s);
    if (!e) e = (int)cudaStreamSynchronize(s);
    if (!e && words[0]) {
        *failed_stage = words[0] - 1;
        return TC_PERSIST_WATCHDOG;
    }
    if (!e && logits_host)
        e = (int)cudaMemcpyAsync(logits_host, ps->scratch + ps->buf_off[TP_BUF_LOGITS], (size_t)ps->V * sizeof(float),
                                 cudaMemcpyDeviceToHost, s);
    if (!e) e = (int)cudaStreamSynchronize(s);
    if (e) {
        (void)cudaGetLastError();
        tc_note(e);
        return e;
    }
    if (token_out) *token_out = words[1];
    if (a.prof && !cudaMemcpy(ps->prof_host, ps->prof, ps->prof_b, cudaMemcpyDeviceToHost)) {
        unsigned long long t0 = ~0ull, t1 = 0;
        for (int s = 0; s < ps->n_stages; s++) {
            const tp_stage *st = &ps->st_host[s];
            const int f = tp_family(st);
            for (int i = 0; i < st->n_tasks; i++) {
                const unsigned long long *r = ps->prof_host + TP_PS * (size_t)(st->task0 + i);
                if (r[0] < t0) t0 = r[0];
                if (r[4] > t1) t1 = r[4];
                ps->fam_wait[f] += (double)(r[1] - r[0]);
                ps->fam_run[f] += (double)(r[4] - r[1]);
                ps->fam_in[f] += (double)(r[2] - r[1]);
                ps->fam_prod[f] += (double)(r[3] - r[2]);
                ps->fam_tasks[f]++;
            }
        }
        ps->span += (double)(t1 - t0);
        ps->steps++;
    }
    return 0;
}

extern "C" int tc_persist_profile(tc_persist *ps, int on) {
    if (!ps) return -1;
    memset(ps->fam_wait, 0, sizeof ps->fam_wait);
    memset(ps->fam_run, 0, sizeof ps->fam_run);
    memset(ps->fam_in, 0, sizeof ps->fam_in);
    memset(ps->fam_prod, 0, sizeof ps->fam_prod);
    memset(ps->fam_tasks, 0, sizeof ps->fam_tasks);
    ps->span = 0;
    ps->steps = 0;
    if (!on) {
        free(ps->prof_host);
        ps->prof_host = NULL;
        return 0;
    }
    TC_CTX(ps->cx);
    if (!ps->prof) ps->prof = (unsigned long long *)tc_malloc(ps->cx, ps->prof_b);
    if (!ps->prof_host) ps->prof_host = (unsigned long long *)malloc(ps->prof_b);
    return ps->prof && ps->prof_host ? 0 : -1;
}

extern "C" int tc_persist_profile_text(tc_persist *ps, char *buf, size_t n) {
    if (!ps || !ps->steps) return snprintf(buf, n, "persistent step: no profiled steps\n");
    const double steps = (double)ps->steps, cta_ns = ps->span * ps->n_cta;
    size_t o = 0;
    int w = snprintf(buf, n, "persistent step: %.1f us a step (first wait to last signal, mean of %lld), %d CTAs, "
                     "L2 prefetch %lld KiB a matrix, matmul %s\n  %-24s %8s %12s %12s %8s  %s\n",
                     ps->span / steps / 1e3, ps->steps, ps->n_cta, ps->prefetch / 1024,
                     ps->mode == TP_M_RING  ? "tiles via the loader warp's ring"
                     : ps->mode == TP_M_CPA ? "tiles via cp.async into each warp's slots"
                                            : "tiles in registers",
                     "family", "tasks",
                     "run us/step", "wait us/step", "run %", "a task, us: run = input + products + rest");
    double run = 0;
    for (int f = 0; f < TP_FAMS; f++) {
        o = w > 0 ? (size_t)w : 0;
        if (!ps->fam_tasks[f]) continue;
        run += ps->fam_run[f];
        const double nt = (double)ps->fam_tasks[f] * 1e3;
        w += snprintf(o < n ? buf + o : NULL, o < n ? n - o : 0,
                      "  %-24s %8.0f %12.1f %12.1f %7.1f%%  %.2f = %.2f + %.2f + %.2f\n", tp_fam_name[f],
                      ps->fam_tasks[f] / steps, ps->fam_run[f] / steps / 1e3, ps->fam_wait[f] / steps / 1e3,
                      100.0 * ps->fam_run[f] / cta_ns, ps->fam_run[f] / nt, ps->fam_in[f] / nt, ps->fam_prod[f] / nt,
                      (ps->fam_run[f] - ps->fam_in[f] - ps->fam_prod[f]) / nt);
    }
    o = w > 0 ? (size_t)w : 0;
    w += snprintf(o < n ? buf + o : NULL, o < n ? n - o : 0,
                  "  busy %.1f%% of CTA time (run / (CTAs x step)); the rest waits or idles\n", 100.0 * run / cta_ns);
    return w;
}
