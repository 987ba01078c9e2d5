/*
 * tc_actq.cu - activation quantisation, the integer path's input (layout in
 * act.cuh): one warp per (batch row, 128-block), tc_act_bytes / tc_act_view for the
 * caller's buffer.
 */
#include "kernels/cuda/internal.cuh"

/* One warp per (batch row, 128-block). */
__global__ void k_actq128(const float *__restrict__ x, size_t xs, int K, size_t batch,
                          int8_t *__restrict__ q, float *__restrict__ sx, int *__restrict__ corr) {
    const int nb = K >> 7;
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (warp >= batch * (size_t)nb) return;
    size_t b = warp / nb;
    int blk = (int)(warp % nb);
    const float *xb = x + b * xs + (size_t)blk * 128 + lane * 4;
    float v[4] = {xb[0], xb[1], xb[2], xb[3]};
    tc_actq_block(v, lane, q + b * (size_t)K * 2, sx + b * (size_t)nb, corr + b * (size_t)(K >> 5),
                  blk);
}

/* q (16-byte loads), then sx, then corr at a 16-byte boundary (the GEMV reads
 * corr pairs as int2). */
extern "C" size_t tc_act_bytes(size_t batch, int64_t k) {
    size_t sn = (batch * (size_t)(k / 128) * 4 + 15) & ~(size_t)15;
    return batch * (size_t)k * 2 + sn + batch * (size_t)(k / 32) * 4 + 64;
}

extern "C" tc_act tc_act_view(void *buf, size_t batch, int64_t k) {
    uint8_t *ws = (uint8_t *)buf;
    size_t qn = batch * (size_t)k * 2, sn = (batch * (size_t)(k / 128) * 4 + 15) & ~(size_t)15;
    tc_act a = {(int8_t *)ws, (float *)(ws + qn), (int *)(ws + qn + sn), k, batch};
    return a;
}

void tc_quantize_rows(const float *x, size_t xs, const tc_act *o) {
    size_t warps = o->batch * (size_t)(o->k / 128);
    if (!warps) return;
    k_actq128<<<tc_blocks(warps * 32, 256), 256, 0, tc_cur->stream>>>(x, xs, (int)o->k, o->batch, o->q,
                                                                 o->sx, o->corr);
    tc_check_launch();
}

extern "C" void tc_quantize(tc_ctx *cx, const float *x, size_t xs, const tc_act *out) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_ACTQ);
    if (out->k % 128) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    tc_quantize_rows(x, xs, out);
}
