/*
 * tc_repack.cu - the load-time repack of a TC_TERN128 matrix into the tiled layout of
 * the decode GEMV (TC_TERN128T; index rules in gemv_tiled.h).
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gemv_tiled.h"

/* One thread per (row of the padded strips, group, code byte): byte loads from the
 * file layout (any alignment; load time only). Pads stay zero (tc_malloc zeroes). */
__global__ void k_repack_tiled(const uint8_t *__restrict__ src, size_t rb, int64_t n, int K,
                               uint8_t *__restrict__ dst) {
    const int G = K >> 7;
    const int64_t kt = tct_ktiles(K);
    size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (size_t)n * (size_t)G * 32) return;
    const int cb = (int)(id & 31);
    const size_t rg = id >> 5;
    const int64_t r = (int64_t)(rg / (size_t)G);
    const int grp = (int)(rg % (size_t)G);
    const uint8_t *b = src + (size_t)r * rb + (size_t)grp * TERN_PQ2_0_BYTES;
    dst[tct_code_byte(r, (int64_t)grp * 128 + 4 * cb, kt)] = b[TERN_BLOCK_QS + cb];
    if (cb < 2) dst[tct_scale_byte(r, grp, kt) + cb] = b[cb];
}

extern "C" size_t tc_tiled_bytes(int64_t n, int64_t k) { return tct_bytes(n, k); }

extern "C" int tc_repack_tiled(tc_ctx *cx, const tc_mat *src, tc_mat *dst) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_REPACK);
    memset(dst, 0, sizeof *dst);
    if (src->kind != TC_TERN128 || src->k <= 0 || src->k % 128 || src->k > (1 << 30) ||
        src->n <= 0 || src->n > ((int64_t)1 << 31) - 16)
        return TC_ERR_UNSUPPORTED;
    size_t bytes = tct_bytes(src->n, src->k);
    uint8_t *d = (uint8_t *)tc_malloc(tc_cur, bytes);
    if (!d) return (int)cudaErrorMemoryAllocation;
    size_t total = (size_t)src->n * (size_t)(src->k / 128) * 32;
    k_repack_tiled<<<tc_blocks(total, 256), 256, 0, tc_cur->stream>>>(src->data, src->row_bytes, src->n,
                                                                (int)src->k, d);
    tc_check_launch();
    int e = (int)cudaStreamSynchronize(tc_cur->stream);
    if (!e) e = (int)cudaGetLastError();
    if (e) {
        tc_free(tc_cur, d, bytes);
        return e;
    }
    dst->kind = TC_TERN128T;
    dst->data = d;
    dst->n = src->n;
    dst->k = src->k;
    dst->row_bytes = (size_t)tct_ktiles(src->k) * TCT_TILE; /* bytes per 16-row strip */
    return 0;
}
