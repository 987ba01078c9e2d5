/*
 * internal.cuh - shared by the CUDA kernel files: the library's stream, the
 * sticky error, a grow-only device workspace, and small device helpers.
 */
#ifndef TERN_KERNELS_CUDA_INTERNAL_CUH
#define TERN_KERNELS_CUDA_INTERNAL_CUH

#include "kernels/cuda/cuda.h"
#include "core/blocks.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern cudaStream_t tc_stream;
/* Record err (first one wins) when it is not cudaSuccess. */
void tc_note(int err);
/* Launches (and async copies) queued: tc_launches(). */
extern uint64_t tc_launch_count;
/* Check the last launch (and count it). */
static inline void tc_check_launch(void) {
    tc_launch_count++;
    tc_note((int)cudaGetLastError());
}
/* Profiling: TC_PROF(TC_FAM_x) at the top of a launcher brackets the rest of the
 * function with an event pair (only when enabled, at nesting depth 0, not capturing). */
extern int tc_prof_on;
int tc_prof_start(int fam); /* slot >= 0, or -1: nested / capturing (depth counted) */
void tc_prof_stop(int slot);
struct tc_prof_guard {
    int slot; /* -2: profiling was off at entry */
    explicit tc_prof_guard(int fam) : slot(tc_prof_on ? tc_prof_start(fam) : -2) {}
    ~tc_prof_guard() {
        if (slot != -2) tc_prof_stop(slot);
    }
};
#define TC_PROF(fam) tc_prof_guard tc_prof_g_(fam)
/* Scratch of at least n bytes for the stream's current work (slot 0..3, grow-only;
 * growing waits for the stream first). NULL on failure (error noted). */
void *tc_workspace(int slot, size_t n);
/* Step values while capturing a decode graph (NULL otherwise): device words the
 * graph fills at each replay. */
extern const int *tc_dyn_pos;
extern const int32_t *tc_dyn_ids;
/* Pinned host staging for embed's ids (grow-only; NULL on failure, error noted). */
int32_t *tc_pinned_ids(size_t n);

/* A switch read from the environment once: *cached (-1 = not read yet) becomes 1 when
 * the variable name equals want, else 0. The tc_set_* overrides write *cached. */
static inline int tc_env_is(int *cached, const char *name, const char *want) {
    if (*cached < 0) {
        const char *e = getenv(name);
        *cached = e && !strcmp(e, want);
    }
    return *cached;
}

static inline unsigned tc_blocks(size_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

/* Programmatic dependent launch (PDL, sm_90). A kernel launched by tc_launch may start
 * while the kernel before it in the stream is still running (TERN_CUDA_PDL=0 turns
 * this off: plain stream order). Such a kernel must call tc_pdl_wait() before it
 * reads anything an earlier kernel wrote and before it writes anything at all; what
 * comes before the wait may only read data that no kernel of the step writes (the
 * weights) or touch its own shared memory. tc_pdl_trigger() lets the next kernel be
 * scheduled (call it early: the next kernel waits for this one's completion anyway).
 * Both are no-ops in a kernel launched without the attribute. */
__device__ __forceinline__ void tc_pdl_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void tc_pdl_trigger(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
/* 1 when PDL launches are on (TERN_CUDA_PDL unset or not "0"; read once). */
int tc_pdl_on(void);
/* Launch kern<<<grid, block, smem, tc_stream>>>(args...) with the PDL attribute when
 * tc_pdl_on() (and, when cluster > 1, a cluster of that many CTAs along x); counted
 * and checked like tc_check_launch. The kernel must follow the tc_pdl_wait rule. */
template <typename... KArgs, typename... Args>
static inline void tc_launch(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             unsigned cluster, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = tc_stream;
    cudaLaunchAttribute at[2];
    unsigned n = 0;
    if (tc_pdl_on()) {
        at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[n].val.programmaticStreamSerializationAllowed = 1;
        n++;
    }
    if (cluster > 1) {
        at[n].id = cudaLaunchAttributeClusterDimension;
        at[n].val.clusterDim.x = cluster;
        at[n].val.clusterDim.y = 1;
        at[n].val.clusterDim.z = 1;
        n++;
    }
    cfg.attrs = at;
    cfg.numAttrs = n;
    tc_note((int)cudaLaunchKernelEx(&cfg, kern, ((KArgs)args)...));
    tc_check_launch();
}

/* Blockwise Hadamard of rows x n (tc_hadamard.cu): dst = H(src*signs) forward or
 * signs*H(src) inverse, scaled by 1/sqrt(block); up: SwiGLU in the load (silu(src)*up);
 * act: the forward output quantised in the same kernel (block % 128 == 0). src may
 * equal dst. TC_ERR_UNSUPPORTED unless 2 <= block <= 8192 and n % block == 0. */
void tc_fwht(const float *src, const float *up, float *dst, size_t rows, size_t n, size_t block,
             const float *signs, int inverse, const tc_act *act);
/* act can be written by tc_fwht's kernel: forward, rows x n, block a multiple of 128 */
static inline bool tc_act_in_fwht(const tc_act *act, size_t rows, size_t n, size_t block,
                                  const float *signs) {
    return act && signs && block % 128 == 0 && (size_t)act->k == n && act->batch == rows;
}
/* act (may be NULL) matches rows x n; else the error is noted */
static inline bool tc_act_ok(const tc_act *act, size_t rows, size_t n) {
    if (!act) return true;
    if ((size_t)act->k != n || act->batch != rows || n % 128) {
        tc_note(TC_ERR_UNSUPPORTED);
        return false;
    }
    return true;
}

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
__device__ __forceinline__ float tc_silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float tc_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
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

/* Quantise one 128-input block held 4 per lane (v[s] = input 4*lane + s of the
 * block) into the activation layout of tc_matmul.cu (row base q, block blk). */
#define TC_QMAX 16256.0f
__device__ __forceinline__ void tc_actq_block(const float v[4], int lane, int8_t *qrow,
                                              float *sx_row, int *corr_row, int blk) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
    amax = tc_warp_max(amax);
    float inv = amax > 0 ? TC_QMAX / amax : 0.0f;
    int u = lane >> 3, l8 = lane & 7;
    int i = l8 >> 2, k = l8 & 3;
    int8_t *ub = qrow + ((size_t)blk * 4 + u) * 64;
    int sum = 0;
#pragma unroll
    for (int s = 0; s < 4; s++) {
        int xq = __float2int_rn(v[s] * inv);
        int hi = (xq + 64) >> 7, lo = xq - 128 * hi;
        int p = i * 16 + s * 4 + k;
        ub[p] = (int8_t)hi;
        ub[32 + p] = (int8_t)lo;
        sum += xq;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sum += __shfl_xor_sync(0xffffffffu, sum, 4);
    if (l8 == 0) corr_row[(size_t)blk * 4 + u] = sum;
    if (lane == 0) sx_row[blk] = amax / TC_QMAX;
}

#endif
