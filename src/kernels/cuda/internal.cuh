/*
 * internal.cuh - shared by the CUDA kernel files: the library's stream, the
 * sticky error, a grow-only device workspace, and small device helpers.
 */
#ifndef TERN_KERNELS_CUDA_INTERNAL_CUH
#define TERN_KERNELS_CUDA_INTERNAL_CUH

#include "kernels/cuda/cuda.h"
#include "formats/blocks.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern cudaStream_t tc_stream;
/* Record err (first one wins) when it is not cudaSuccess. */
void tc_note(int err);
/* Check the last launch. */
static inline void tc_check_launch(void) { tc_note((int)cudaGetLastError()); }
/* Scratch of at least n bytes for the stream's current work (slot 0..3, grow-only;
 * growing waits for the stream first). NULL on failure (error noted). */
void *tc_workspace(int slot, size_t n);
/* Step values while capturing a decode graph (NULL otherwise): device words the
 * graph fills at each replay. */
extern const int *tc_dyn_pos;
extern const int32_t *tc_dyn_ids;
/* Pinned host staging for embed's ids (grow-only; NULL on failure, error noted). */
int32_t *tc_pinned_ids(size_t n);

static inline unsigned tc_blocks(size_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

__device__ __forceinline__ float tc_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float tc_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float tc_ld_f16(const uint8_t *p) {
    return __half2float(__ushort_as_half(*(const unsigned short *)p));
}
__device__ __forceinline__ float tc_ld_bf16(const uint8_t *p) {
    return __uint_as_float((uint32_t)(*(const unsigned short *)p) << 16);
}
/* Element j of one row of a matrix of kind `kind` (any kind; slow path). */
__device__ __forceinline__ float tc_elem(int kind, const uint8_t *row, int64_t j) {
    switch (kind) {
    case TC_TERN128: {
        const uint8_t *b = row + (j >> 7) * TERN_PQ2_0_BYTES;
        int c = (b[TERN_BLOCK_QS + ((j & 127) >> 2)] >> (2 * (j & 3))) & 3;
        return (float)(c - 1) * tc_ld_f16(b);
    }
    case TC_TERN64: {
        const uint8_t *b = row + (j >> 6) * TERN_Q2_0_G64_BYTES;
        int c = (b[TERN_BLOCK_QS + ((j & 63) >> 2)] >> (2 * (j & 3))) & 3;
        return (float)(c - 1) * tc_ld_f16(b);
    }
    case TC_Q1: {
        const uint8_t *b = row + (j >> 7) * TERN_Q1_0_BYTES;
        int bit = (b[TERN_BLOCK_QS + ((j & 127) >> 3)] >> (j & 7)) & 1;
        float d = tc_ld_f16(b);
        return bit ? d : -d;
    }
    case TC_F32: return ((const float *)row)[j];
    case TC_F16: return tc_ld_f16(row + 2 * j);
    default: return tc_ld_bf16(row + 2 * j);
    }
}

#endif
