/*
 * tc_attn_prep.cu - the attention mixer's decode prologue in one launch: q/gate split,
 * q/k head RMSNorm, NEOX RoPE, k/v stored in the caches (one session, or a batch step's
 * sessions from a device table).
 */
#include "kernels/cuda/attn.cuh"

/* ------------------------------------------------- decode prologue (fused) */

/* Warp h < nh: q head h; else kv head h - nh (k normed and roped into the cache,
 * v copied). The head sits in registers (ATT_EPL per lane) for the norm and in
 * shared memory for RoPE's pairs (i, i + rot/2). */
template <bool B>
__global__ void __launch_bounds__(32) k_attn_prep(tc_attn_prep_args a, const int *__restrict__ dpos,
                                                  const tc_attn_bat bt) {
    tc_pdl_trigger();
    tc_pdl_wait();
    __shared__ float sh[ATT_EPL * 32];
    int pos;
    if (B) { /* sequence blockIdx.y of the batch */
        const tc_attn_seq sq = bt.seqs[blockIdx.y];
        const size_t z = blockIdx.y;
        pos = sq.pos0;
        a.kcache = (uint8_t *)sq.kcache + (size_t)bt.kv_index * (size_t)sq.n_ctx * bt.k_row;
        a.vcache = (uint8_t *)sq.vcache + (size_t)bt.kv_index * (size_t)sq.n_ctx * bt.v_row;
        a.qg += z * bt.qg_stride;
        a.k += z * bt.kv_stride;
        a.v += z * bt.kv_stride;
        a.q_out += z * bt.q_stride;
        if (a.gate_out) a.gate_out += z * bt.q_stride;
    } else { /* row blockIdx.y of one sequence's rows (bt's strides; zero for one row) */
        const size_t z = blockIdx.y;
        pos = (dpos ? *dpos : a.pos0) + (int)z;
        a.qg += z * bt.qg_stride;
        a.k += z * bt.kv_stride;
        a.v += z * bt.kv_stride;
        a.q_out += z * bt.q_stride;
        if (a.gate_out) a.gate_out += z * bt.q_stride;
    }
    const int h = blockIdx.x, lane = threadIdx.x, hd = a.head_dim;
    const bool isq = h < a.n_head;
    const int kh = h - a.n_head;
    const size_t kvw = (size_t)a.n_head_kv * hd;
    const float *src = isq ? a.qg + (size_t)h * (a.gated ? 2 * hd : hd) : a.k + (size_t)kh * hd;
    const float *gain = isq ? a.q_norm : a.k_norm;
    float c[ATT_EPL], g[ATT_EPL];
    float ss = 0;
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) {
        int j = lane + 32 * e;
        c[e] = j < hd ? src[j] : 0.0f;
        g[e] = j < hd ? gain[j] : 0.0f;
    }
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) ss += c[e] * c[e];
    ss = tc_warp_sum(ss);
    const float inv = (float)(1.0 / sqrt((double)ss / hd + (double)a.eps));
#pragma unroll
    for (int e = 0; e < ATT_EPL; e++) {
        int j = lane + 32 * e;
        if (j < hd) sh[j] = c[e] * inv * g[e];
    }
    if (isq && a.gated)
        for (int j = lane; j < hd; j += 32) a.gate_out[(size_t)h * hd + j] = src[hd + j];
    __syncwarp();
    const int rot = a.rope_dims, half = rot / 2;
    for (int i = lane; i < half; i += 32) {
        double iv = pow((double)a.theta, -2.0 * i / rot);
        double ang = (double)pos * iv;
        float cs = (float)cos(ang), sn = (float)sin(ang);
        float x0 = sh[i], x1 = sh[i + half];
        sh[i] = x0 * cs - x1 * sn;
        sh[i + half] = x1 * cs + x0 * sn;
    }
    __syncwarp();
    if (isq) {
        float *dst = a.q_out + (size_t)h * hd;
        for (int j = lane; j < hd; j += 32) dst[j] = sh[j];
    } else {
        const size_t o = (size_t)pos * kvw + (size_t)kh * hd;
        const float *vs = a.v + (size_t)kh * hd;
        /* q8_0 (hd % 32 == 0): every lane runs every iteration, block j / 32 */
        for (int j = lane; j < hd; j += 32) {
            att_store(a.kcache, a.k_type, o + j, sh[j]);
            att_store(a.vcache, a.v_type, o + j, vs[j]);
        }
    }
}

extern "C" void tc_attn_prep_rows(tc_ctx *cx, const tc_attn_prep_args *a, int rows, const tc_attn_bat *st) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_ROPE);
    if (rows < 1 || rows > 65535 || !st || a->head_dim < 1 || a->head_dim > ATT_EPL * 32 || a->n_head < 1 ||
        a->n_head_kv < 1 || a->rope_dims < 0 || a->rope_dims > a->head_dim || a->rope_dims % 2 ||
        !att_types_ok(a->k_type, a->v_type, a->head_dim) || (!tc_cur->dyn_pos && a->pos0 < 0)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    tc_attn_bat b = {};
    b.qg_stride = st->qg_stride;
    b.kv_stride = st->kv_stride;
    b.q_stride = st->q_stride;
    tc_launch(k_attn_prep<false>, dim3((unsigned)(a->n_head + a->n_head_kv), (unsigned)rows), dim3(32), 0, 1, *a,
              tc_cur->dyn_pos, b);
}

extern "C" void tc_attn_prep(tc_ctx *cx, const tc_attn_prep_args *a) {
    const tc_attn_bat none = {};
    tc_attn_prep_rows(cx, a, 1, &none);
}

extern "C" void tc_attn_prep_batch(tc_ctx *cx, const tc_attn_prep_args *a, int n, const tc_attn_bat *bt) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_ROPE);
    if (n < 1 || n > 65535 || !bt || !bt->seqs || a->head_dim < 1 || a->head_dim > ATT_EPL * 32 ||
        a->n_head < 1 || a->n_head_kv < 1 || a->rope_dims < 0 || a->rope_dims > a->head_dim ||
        a->rope_dims % 2 || !att_types_ok(a->k_type, a->v_type, a->head_dim)) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    tc_launch(k_attn_prep<true>, dim3((unsigned)(a->n_head + a->n_head_kv), (unsigned)n), dim3(32), 0, 1, *a,
              (const int *)NULL, *bt);
}
