/*
 * internal.cuh - shared by the CUDA kernel files: the context (stream, sticky error,
 * grow-only workspaces, caches), launch helpers, and small device helpers.
 */
#ifndef TERN_KERNELS_CUDA_INTERNAL_CUH
#define TERN_KERNELS_CUDA_INTERNAL_CUH

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/lab.h"
#include "kernels/cuda/mm_choose.h"
#include "core/blocks.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the context
 * tc_ctx (cuda.h: opaque): everything the kernels keep per device, owned by the
 * back-end that made it (tc_ctx_new) and passed to every launcher. A launcher makes it
 * the thread's current context for its duration (TC_CTX: tc_cur, thread-local, the
 * previous one restored on return), so the internal helpers below (tc_note,
 * tc_workspace, tc_launch...) need no argument. One context is driven by one thread
 * at a time (the model's evaluation lock); two contexts, on one device or two, by two
 * threads at once. Nothing of it is process-global. */
#define TC_PROF_SLOTS 4096
#define TC_MEMO 64
struct tc_ctx {
    int device;
    cudaStream_t stream;
    int err;                     /* the first error since the last tc_sync */
    char name[256];              /* "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)" */
    int sms;
    size_t bytes;                /* bytes held through tc_malloc */
    void *ws[4];                 /* tc_workspace slots (grow-only) */
    size_t ws_n[4];
    unsigned ws_gen;             /* bumped when a workspace moves: graphs are then stale */
    int32_t *pin_ids;            /* pinned staging for embed's ids */
    size_t pin_ids_n;
    int *step_dev, *step_pin;    /* a graph's step words: [0] position, [1] token */
    const int *dyn_pos;          /* while capturing a step graph: the device words */
    const int32_t *dyn_ids;
    int dyn_n;                   /* ids at dyn_ids (1 in a decode-step graph, R in a verify graph) */
    int *rows_dev, *rows_pin;    /* a verify graph's words: [0, R) positions, [R, 2R) tokens */
    int pdl;                     /* programmatic dependent launch (tc_set_pdl) */
    tc_mm_caps mm;               /* the matmul chooser's caps (tc_mm_set_caps) */
    int ops_old, attn_old;       /* lab switches (tc_set_ops_old, tc_set_attn_old) */
    int gdn_path, gdn_rpt, gdn_wpc; /* tc_gdn_config */
    int *gdn_cnt;                /* the GDN step's cluster counters (tc_gdn_step.cu) */
    float *gemm_part;            /* the GEMM's split-K partials, TC_GEMM_WS_FLOATS (tc_gemm_reserve) */
    int *gemm_cnt;               /* its per-tile arrival counters, TC_GEMM_MAX_TILES, zero between launches */
    uint64_t launches;           /* launches and async copies queued (tc_launches) */
    /* per-device caches: kernels whose attributes are set, occupancy and launch shapes */
    struct { const void *fn; long long v; } attr[TC_MEMO];
    int n_attr;
    struct { const void *fn; int threads; size_t smem; int occ; } occ[4 * TC_MEMO];
    int n_occ;
    struct { const void *fn; long long a, b; size_t smem; int x, y; } shape[TC_MEMO];
    int n_shape;
    /* profiling (tc_profile_*) */
    int prof_on, prof_depth, pn, pmade;
    cudaEvent_t pev[TC_PROF_SLOTS][2];
    int pfam[TC_PROF_SLOTS];
    double pms[TC_FAM_N];
    uint64_t pcalls[TC_FAM_N];
};
extern thread_local tc_ctx *tc_cur;
struct tc_ctx_scope {
    tc_ctx *prev;
    explicit tc_ctx_scope(tc_ctx *c) : prev(tc_cur) {
        tc_cur = c;
        int d = -1;
        if (c && prev != c && (cudaGetDevice(&d) != cudaSuccess || d != c->device)) cudaSetDevice(c->device);
    }
    ~tc_ctx_scope() { tc_cur = prev; }
};
#define TC_CTX(cx) tc_ctx_scope tc_ctx_s_(cx)
/* The context's memo of kernel attributes: 1 the first time fn is asked with value v
 * (the caller then sets it), 0 after (cudaFuncSetAttribute is per device). */
static inline bool tc_attr_once(const void *fn, long long v) {
    tc_ctx *c = tc_cur;
    for (int i = 0; i < c->n_attr; i++)
        if (c->attr[i].fn == fn && c->attr[i].v >= v) return false;
    if (c->n_attr < TC_MEMO) {
        c->attr[c->n_attr].fn = fn;
        c->attr[c->n_attr].v = v;
        c->n_attr++;
    }
    return true;
}

/* Record err (first one wins) when it is not cudaSuccess. */
void tc_note(int err);
/* Check the last launch (and count it). */
static inline void tc_check_launch(void) {
    tc_cur->launches++;
    tc_note((int)cudaGetLastError());
}
/* Profiling: TC_PROF(TC_FAM_x) at the top of a launcher brackets the rest of the
 * function with an event pair (only when enabled, at nesting depth 0, not capturing). */
int tc_prof_start(int fam); /* slot >= 0, or -1: nested / capturing (depth counted) */
void tc_prof_stop(int slot);
struct tc_prof_guard {
    int slot; /* -2: profiling was off at entry */
    explicit tc_prof_guard(int fam) : slot(tc_cur->prof_on ? tc_prof_start(fam) : -2) {}
    ~tc_prof_guard() {
        if (slot != -2) tc_prof_stop(slot);
    }
};
#define TC_PROF(fam) tc_prof_guard tc_prof_g_(fam)
/* Scratch of at least n bytes for the stream's current work (slot 0..3, grow-only;
 * growing waits for the stream first). NULL on failure (error noted). */
void *tc_workspace(int slot, size_t n);
/* Pinned host staging for embed's ids (grow-only; NULL on failure, error noted). */
int32_t *tc_pinned_ids(size_t n);

static inline unsigned tc_blocks(size_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

/* Programmatic dependent launch (PDL, sm_90). A kernel launched by tc_launch may start
 * while the kernel before it in the stream is still running (the model parameter
 * cuda_pdl = false turns this off: plain stream order). Such a kernel must call tc_pdl_wait() before it
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
/* 1 when PDL launches are on (tc_set_pdl: the model parameter cuda_pdl, default on). */
static inline int tc_pdl_on(void) { return tc_cur->pdl; }
/* Streaming multiprocessors of the context's device. */
static inline int tc_sm_count(void) { return tc_cur->sms > 0 ? tc_cur->sms : 132; }
/* The matmul chooser's caps now (tc_mm_set_caps and the SM count). */
static inline tc_mm_caps tc_mm_caps_now(void) {
    tc_mm_caps c = tc_cur->mm;
    c.sms = tc_sm_count();
    return c;
}
/* Launch kern<<<grid, block, smem, tc_cur->stream>>>(args...) with the PDL attribute when
 * tc_pdl_on() (and, when cluster > 1, a cluster of that many CTAs along x); counted
 * and checked like tc_check_launch. The kernel must follow the tc_pdl_wait rule. */
template <typename... KArgs, typename... Args>
static inline void tc_launch(void (*kern)(KArgs...), dim3 grid, dim3 block, size_t smem,
                             unsigned cluster, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = tc_cur->stream;
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

/* The matmul's pieces in their own files (tc_actq.cu, tc_gemv_file.cu): the quantised
 * activation of rows x (o->k) (no checks; tc_quantize checks), the file-layout
 * ternary GEMV in the chooser's build (c.family TC_MM_T128K or TC_MM_T128; q, sx, corr
 * the activation's planes), and the fp32-input kernels (family TC_MM_GENERIC_SK or
 * TC_MM_GENERIC; x NULL: TC_ERR_UNSUPPORTED noted). */
void tc_quantize_rows(const float *x, size_t xs, const tc_act *o);
void tc_gemv_file(const tc_mat *m, const tc_mm_choice &c, const int8_t *q, const float *sx, const int *corr,
                  size_t batch, float *y, size_t ys);
void tc_gemv_fp32(const tc_mat *m, int family, const float *x, size_t batch, size_t xs, float *y, size_t ys);

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

#include "kernels/cuda/act.cuh"

#endif
