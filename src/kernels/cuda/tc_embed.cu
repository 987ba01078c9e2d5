/*
 * tc_embed.cu - embedding gather (any matrix kind in the file layout, and the tiled
 * layout: tc_embed_tiled), then the inverse Hadamard transform when the model is rotated.
 */
#include "kernels/cuda/internal.cuh"
#include "kernels/cuda/gemv_tiled.h"

#include <math.h>

#include <string.h>

__global__ void k_embed(int kind, const uint8_t *__restrict__ emb, size_t rb, int64_t K,
                        const int32_t *__restrict__ ids, float *__restrict__ out) {
    tc_pdl_trigger();
    tc_pdl_wait();
    const uint8_t *row = emb + (size_t)ids[blockIdx.y] * rb;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < K;
         j += (int64_t)gridDim.x * blockDim.x)
        out[(size_t)blockIdx.y * K + j] = tc_elem(kind, row, j);
}

/* The ids on the device: while capturing a step graph, the graph's token word (n 1);
 * else staged through pinned memory into workspace 1 (the previous chunk ended with a
 * sync: nothing still reads the pinned ids). NULL on failure (error noted). */
static const int32_t *embed_ids(const int32_t *ids_host, size_t n) {
    const int32_t *ids = tc_cur->dyn_ids;
    if (ids && n == (size_t)tc_cur->dyn_n) return ids;
    int32_t *dids = (int32_t *)tc_workspace(1, n * sizeof(int32_t));
    int32_t *pin = tc_pinned_ids(n);
    if (!dids || !pin) return NULL;
    memcpy(pin, ids_host, n * sizeof(int32_t));
    tc_cur->launches++;
    tc_note((int)cudaMemcpyAsync(dids, pin, n * sizeof(int32_t), cudaMemcpyHostToDevice, tc_cur->stream));
    return dids;
}

extern "C" void tc_embed(tc_ctx *cx, const tc_mat *emb, const int32_t *ids_host, size_t n, float *out,
                         size_t block, const float *signs) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_EMBED);
    if (!n) return;
    const int32_t *ids = embed_ids(ids_host, n);
    if (!ids) return;
    for (size_t i0 = 0; i0 < n; i0 += 65535) {
        unsigned m = (unsigned)(n - i0 < 65535 ? n - i0 : 65535);
        dim3 grid(tc_blocks((size_t)emb->k, 256) < 64 ? tc_blocks((size_t)emb->k, 256) : 64, m);
        tc_launch(k_embed, grid, dim3(256), 0, 1, emb->kind, emb->data, emb->row_bytes, emb->k, ids + i0,
                  out + i0 * (size_t)emb->k);
    }
    if (signs) tc_fwht(out, NULL, out, n, (size_t)emb->k, block, signs, 1, NULL);
}

/* ------------------------------------------------------------ tiled rows */

__global__ void k_embed_tiled(const uint8_t *__restrict__ W, int64_t K,
                              const int32_t *__restrict__ ids, float *__restrict__ out) {
    const int64_t r = ids[blockIdx.y], kt = tct_ktiles(K);
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < K;
         j += (int64_t)gridDim.x * blockDim.x) {
        int c = (W[tct_code_byte(r, j, kt)] >> (2 * (j & 3))) & 3;
        float d = __half2float(__ushort_as_half(*(const unsigned short *)(W + tct_scale_byte(r, j >> 7, kt))));
        out[(size_t)blockIdx.y * K + j] = (float)(c - 1) * d;
    }
}

extern "C" void tc_embed_tiled(tc_ctx *cx, const tc_mat *emb, const int32_t *ids_host, size_t n, float *out,
                               size_t block, const float *signs) {
    TC_CTX(cx);
    TC_PROF(TC_FAM_EMBED);
    if (!n) return;
    if (emb->kind != TC_TERN128T) {
        tc_note(TC_ERR_UNSUPPORTED);
        return;
    }
    const int32_t *ids = embed_ids(ids_host, n);
    if (!ids) return;
    for (size_t i0 = 0; i0 < n; i0 += 65535) {
        unsigned m = (unsigned)(n - i0 < 65535 ? n - i0 : 65535);
        unsigned bx = tc_blocks((size_t)emb->k, 256);
        dim3 grid(bx < 64 ? bx : 64, m);
        k_embed_tiled<<<grid, 256, 0, tc_cur->stream>>>(emb->data, emb->k, ids + i0,
                                                   out + i0 * (size_t)emb->k);
        tc_check_launch();
    }
    if (signs) tc_hadamard(tc_cur, out, n, (size_t)emb->k, block, signs, 1);
}
