/*
 * lab.h - the CUDA kernel layer's launchers and switches for tests, benchmarks and the
 * kernels' own dispatch (the .cu files of src/kernels/cuda, tests/unit/test_cuda_kernels.c,
 * src/cli/bench_cuda.c, src/cli/bench_model.c): single kernels below the matmul
 * chooser, the references (the old attention, the GDN walk) and the fallbacks forced,
 * launch counts, profile reports, event timing. The back-end calls cuda.h only.
 */
#ifndef TERN_KERNELS_CUDA_LAB_H
#define TERN_KERNELS_CUDA_LAB_H

#include "kernels/cuda/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t tc_bytes_in_use(tc_ctx *cx); /* bytes held through tc_malloc */

/* The activation of rows of x (stride xs) quantised into out (out->k % 128 == 0). */
void tc_quantize(tc_ctx *cx, const float *x, size_t xs, const tc_act *out);

/* The decode GEMV on a TC_TERN128T matrix: y[b*ys + i] = sum_j W[i,j] x_b[j] for
 * the act->batch rows of the quantised activation (tensor-core integer products;
 * batch 1..8 in one pass over the weights, more in chunks of 8). tc_matmul_multi(_q)
 * call it for TC_TERN128T matrices as the chooser says (mm_choose.h). */
void tc_gemv_tiled(tc_ctx *cx, const tc_mat *m, const tc_act *act, float *y, size_t ys);

/* tc_gemv_tiled over nm <= 4 TC_TERN128T matrices of act->k columns in one launch per
 * 8 batch rows (one grid over the strips of all of them: y[i][b*ys[i] + r]), at batch
 * 1..8 with the staged loops of the default variants; otherwise one tc_gemv_tiled per
 * matrix. Each output equals tc_gemv_tiled's integers; its float order depends on the
 * launch shape, chosen for the whole grid. tc_matmul_multi(_q) use it for the tiled
 * matrices of a decode call (TC_MM_TILED_MULTI). */
void tc_gemv_tiled_multi(tc_ctx *cx, int nm, const tc_mat *const *w, const tc_act *act, float *const *y,
                         const size_t *ys);

/* The exact R-row GEMV of a speculative verify (tc_gemv_rows.cu): tc_gemv_tiled_multi's
 * product for every batch row of act, each row bit-identical to the same call with that
 * row alone (batch 1), the weights read once per 8 rows. tc_matmul_multi_exact uses it. */
void tc_gemv_tiled_rows(tc_ctx *cx, int nm, const tc_mat *const *w, const tc_act *act, float *const *y,
                        const size_t *ys);
/* The KS (warps per strip) each matrix's launch takes at batch 1 in tc_gemv_tiled_multi
 * (nm > 1) or tc_gemv_tiled (nm 1), with act's buffer (tc_gemv.cu); returns 1 when batch
 * 1 runs the nm matrices as one grid. */
int tc_gemv_tiled_ks1(tc_ctx *cx, int nm, const tc_mat *const *w, const tc_act *act, int *ks);
/* nm <= 4 matrices of one input, batch 1..8 (act), with KS forced to ks[i] through the
 * decode GEMV's exact builds (NB4 for 1..4 rows, NB8 2 for 5..8; tc_gemv.cu), as one grid
 * when one is set and the rows stage; 0 when no build takes it (nothing launched). */
int tc_gemv_tiled_exact_ks(tc_ctx *cx, int nm, const tc_mat *const *w, const tc_act *act, float *const *y,
                           const size_t *ys, const int *ks, int one);

/* Tensor-core GEMM for prefill and batched decode (tc_gemm_tc.cu; split-K when the
 * output tiles are too few to fill the SMs): y[t*ys + r] = W[r,:] . x_t for the
 * act->batch tokens of act, W a TC_TERN128 matrix (file layout, 2-byte aligned,
 * k % 256 == 0) or a TC_TERN128T one (tiled, k % 256 == 0: same results). mode TC_GEMM_EXACT: both activation planes, the same integers
 * as the GEMV (equal up to fp32 summation order); TC_GEMM_INT8: the hi plane only
 * (8-bit activations, step max|x|/127 per 128 inputs; about half the time).
 * Returns 1 when launched, 0 when the shape is not handled (the caller falls
 * back). The matmul chooser takes it for batch > 8 in the model's prefill mode
 * (TC_GEMM_EXACT, TC_GEMM_INT8: mm_choose.h). */
int tc_gemm_tc_supported(const tc_mat *m, const tc_act *act);
int tc_gemm_tc(tc_ctx *cx, const tc_mat *m, const tc_act *act, float *y, size_t ys, int mode);
/* The GEMM's K splits from the next launch (the caps' gemm_splits): 0 the split rule
 * (mm_choose.h tc_mm_gemm_splits, the default), 1 none and the token tiles before
 * split-K (the A/B reference; also the model parameter cuda_matmul = "gemm_nosplit"),
 * n > 1 n splits where the shape and the workspace allow (at most TC_GEMM_MAX_SPLITS). */
void tc_gemm_set_splits(tc_ctx *cx, int splits);
/* What tc_gemm_tc would launch for (m, act, mode) now: tokens per CTA and K splits
 * (the workspace assumed there: a launch that cannot allocate it runs unsplit).
 * 1, or 0 when tc_gemm_tc would refuse the shape. For tests and benches. */
int tc_gemm_plan(tc_ctx *cx, const tc_mat *m, const tc_act *act, int mode, int *tok, int *splits);

/* The Hopper wgmma GEMM (tc_gemm_wg.cu, built for sm_90a): the same product and the same
 * integers per 128-group as tc_gemm_tc in TC_GEMM_EXACT mode on a TC_TERN128T matrix
 * (k % 256 == 0), the same split rule and workspace: equal to tc_gemm_tc's floats up to the
 * fp32 order (the same order when both take the same splits). Returns 1 when launched, 0
 * when refused (another kind or shape, a GPU without the sm_90a image, no tensor-map entry
 * point): the caller falls back. tc_gemm_wg_plan: tokens per CTA and K splits it would
 * launch with (1), or 0 when it would refuse; splits < 0: stream-K over -splits CTAs (the
 * split rule's default when the workspace is there; forced splits run classic split-K). */
int tc_gemm_wg_supported(tc_ctx *cx, const tc_mat *m, const tc_act *act);
int tc_gemm_wg(tc_ctx *cx, const tc_mat *m, const tc_act *act, float *y, size_t ys);
int tc_gemm_wg_plan(tc_ctx *cx, const tc_mat *m, const tc_act *act, int *tok, int *splits);
/* tc_gemm_wg_plan for a launch with lmode (TC_WG_PAIRS counts): 2 when stream-K runs in
 * clusters of 2 CTAs (the activation multicast to row-tile pairs), 1 otherwise, 0 refused */
int tc_gemm_wg_plan_ex(tc_ctx *cx, const tc_mat *m, const tc_act *act, int lmode, int *tok, int *splits);
/* tc_gemm_wg with its loads chosen (A/B runs): lmode 0 = one 3D TMA per stage for the
 * activation and one for the weights (the default; where the driver refuses a 3D map the
 * launch takes the other way); TC_WG_ACT_2D: the activation as 16 2D boxes per stage;
 * TC_WG_W_BULK: the weights as 8 bulk copies per stage. Same results bit for bit.
 * TC_WG_PAIRS: stream-K launches in clusters of 2 CTAs, the activation tile multicast to
 * the pair's two row tiles (each CTA loads half); stream-K's shares differ from the
 * default's, so the floats differ in fp32 order. Not yet measured on a GPU: the default
 * stays one CTA per cluster until its A/B (docs/kernels.md, the wgmma GEMM).
 * tc_gemm_wg_lmode: the lmode a launch would take for lmode (or -1: refused). */
#define TC_WG_ACT_2D 1
#define TC_WG_W_BULK 2
#define TC_WG_PAIRS 4
int tc_gemm_wg_ex(tc_ctx *cx, const tc_mat *m, const tc_act *act, float *y, size_t ys, int lmode);
int tc_gemm_wg_lmode(tc_ctx *cx, const tc_mat *m, const tc_act *act, int lmode);

/* 1 when tc_attention_decode runs the old per-query-head kernels (tc_set_attn_old(1):
 * the oracle for tests and benches; 0 or -1: the default). Applies from the next
 * launch (a recorded graph keeps what it recorded). */
int tc_attn_old(tc_ctx *cx);
void tc_set_attn_old(tc_ctx *cx, int old);


/* 1 when tc_attention_decode would run the GQA kernel for these arguments now (valid
 * arguments, not old, k_type == v_type, head_dim 32/64/128/256, f32/f16/bf16 caches
 * 16-byte aligned); 0 when it would run the old kernels or refuse. For tests. */
int tc_attn_decode_gqa(tc_ctx *cx, int k_type, int v_type, const void *kcache, const void *vcache,
                       int max_len, int n_head, int n_head_kv, int head_dim);

/* The two-launch path alone: 1 when it took the call (queued), 0 when the walk is
 * selected or the shape is not one it handles (dk <= 256, n_v a multiple of n_k, at
 * most 8 CTAs of <= 256 threads per value head: dv <= 512 for dk <= 128). */
int tc_gdn_scan(tc_ctx *cx, const tc_gdn_args *a);

/* tc_gdn's path: 0 the older walk (the reference), 1 the two-launch scan, 2 the
 * chunked form on tensor cores (tc_gdn_chunk.cu: conv + L2, the chunk kernel, the gated
 * norm; dk <= 128, else the scan), -1 the default (the scan); rpt = state rows per thread
 * (8, 16, 32; 0 = by dk: 8 for dk <= 32, 16 for <= 64, else 32), warps per CTA (1, 2,
 * 4, 8; 0 = the fewest that give at most 8 CTAs per value head). Returns 0, or -1 for
 * other values (nothing changed). */
int tc_gdn_config(tc_ctx *cx, int path, int rpt, int warps);

/* tc_set_ops_old(1) runs the decode-step ops' fallback kernels (norm sites:
 * k_site_cluster; GDN step: conv + recurrence in two kernels; Hadamard and SwiGLU:
 * k_fwht in shared memory; SwiGLU without signs: k_swiglu + tc_quantize), which serve
 * the shapes the fast ones refuse (0 or -1: the default). Applies from the next launch. */
int tc_ops_old(tc_ctx *cx);
void tc_set_ops_old(tc_ctx *cx, int old);

/* GPU time per call of fn(ctx) (a function that queues work on the library's stream),
 * in microseconds: the median over `reps` rounds of (a cudaEvent pair around `calls`
 * calls) / calls. graph != 0: the `calls` calls are captured once into a CUDA graph
 * and each round replays it, so launch costs are those of a decode-step graph.
 * -1 on a CUDA error (noted for tc_sync). Not while a graph is being captured. */
typedef void (*tc_bench_fn)(void *ctx);
double tc_bench_us(tc_ctx *cx, tc_bench_fn fn, void *ctx, int calls, int reps, int graph);

typedef struct tc_profile_entry {
    const char *family;  /* static name */
    double ms;           /* GPU time between the pair's events, summed */
    uint64_t calls;
} tc_profile_entry;

/* Kernel launches and async copies queued since the last tc_launches_reset() (always
 * counted; one add per launch). While a decode graph is captured, the nodes are
 * counted too (so a captured step reports its node count). */
uint64_t tc_launches(tc_ctx *cx);
void tc_launches_reset(tc_ctx *cx);

int tc_profile_enabled(tc_ctx *cx);
void tc_profile_reset(tc_ctx *cx);

/* Fills out[0..TC_FAM_N) (families in enum order, zero calls included); returns the
 * number written (min(max, TC_FAM_N)) or -1 on a CUDA error. */
int tc_profile_report(tc_ctx *cx, tc_profile_entry *out, int max);

/* The same as text, one "family calls ms us/call share" line per family with calls,
 * then a total; returns the length it wanted (snprintf rules). */
int tc_profile_text(tc_ctx *cx, char *buf, size_t n);

/* The persistent decode step (tc_persist.cu), tests only: stage hang_stage (-1: none)
 * waits for a counter nothing signals, and a wait may spin budget_cycles clock64 cycles
 * (<= 0: the default, 2^33) before the kernel leaves with TC_PERSIST_WATCHDOG (the
 * injected wait a quarter of it, so that it is the one named). */
struct tc_persist;
void tc_persist_debug(struct tc_persist *ps, int hang_stage, long long budget_cycles);
/* The persistent step's in-kernel profile (globaltimer stamps per task: wait start, run
 * start, end), summed per family of stages over the steps run while on (on resets the
 * sums; off frees the host side). 0, or -1 without memory. */
int tc_persist_profile(struct tc_persist *ps, int on);
/* The profile as text (per family: tasks, run and wait us per step, share of CTA time;
 * the busy share); snprintf rules. */
int tc_persist_profile_text(struct tc_persist *ps, char *buf, size_t n);
/* Bytes of each matmul task's weights (per matrix) asked into L2 before its wait (0: off;
 * < 0: the default, off). For A/B runs (tern bench model --persistent --profile). */
void tc_persist_set_prefetch(struct tc_persist *ps, long long bytes);
/* Where the matmul tasks' tiles wait (tc_persist_mm.cuh), where the variant fits: 1 the
 * ring (a loader warp streams them into shared memory across stages), 2 each warp's
 * cp.async slots, 3 registers; 0 the default (2). For A/B runs and tests. */
void tc_persist_set_pipeline(struct tc_persist *ps, int on);
/* The persistent step's qwen35 stages (transforms, gated attention with heads of up to
 * 256, the GDN conv and step) written but not yet run on a device: tc_persist_new refuses
 * programs with them (the per-op path runs) unless this is on. Process-wide; tests only. */
void tc_persist_allow_qwen35(int on);

#ifdef __cplusplus
}
#endif

#endif
