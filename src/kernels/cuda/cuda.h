/*
 * cuda.h - the C boundary of the CUDA kernels (src/kernels/cuda, sm_90): the
 * launchers the back-end (backend_cuda.c) calls. Plain C types only; nothing here
 * includes the library's C headers. Tests and benches also use lab.h.
 *
 * Every launcher queues work on its context's stream and returns at once;
 * pointers are device memory unless named _host. A launch or copy that fails
 * records the first error (sticky), which tc_sync() returns and clears.
 * Return codes: 0 = OK, otherwise a cudaError_t value (or TC_ERR_UNSUPPORTED);
 * tc_error_string() names it.
 */
#ifndef TERN_KERNELS_CUDA_H
#define TERN_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/mm_choose.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TC_ERR_UNSUPPORTED 100000 /* a shape the kernels do not handle */
#define TC_ERR_OLD_GPU 100001     /* tc_ctx_new: the GPU is older than sm_90 */

/* Matrix kinds (the loader's dtypes, as the kernels see them). */
typedef enum tc_kind {
    TC_TERN128 = 0, /* PQ2_0 / fork Q2_0: 34 B per 128: fp16 d, 2-bit codes, (code-1)*d */
    TC_TERN64 = 1,  /* mainline Q2_0: 18 B per 64, same rule */
    TC_Q1 = 2,      /* Q1_0: 18 B per 128: fp16 d, bits: 1 -> +d, 0 -> -d */
    TC_F32 = 3,
    TC_F16 = 4,
    TC_BF16 = 5,
    /* 6: the row repack (TC_TERN128R), deleted: slower than the tiled layout */
    TC_TERN128T = 7  /* TERN128 tiled on the device (tc_repack_tiled): the decode GEMV's layout */
} tc_kind;

typedef struct tc_mat {
    int kind;               /* tc_kind */
    const uint8_t *data;    /* device; the allocation has >= 16 bytes after the last row */
    int64_t n, k;           /* rows (outputs), columns (inputs) */
    size_t row_bytes;
} tc_mat;

/* ---------------------------------------------------------------- device
 * A context per device (tc_ctx: the device, its stream, sticky error, workspaces,
 * step-graph words, switches, occupancy and launch-shape caches, profile), made by
 * the back-end and passed to every launcher that touches the device. A context is
 * driven by one thread at a time; contexts are independent (two models on one GPU
 * from two threads, or one model per GPU). */
typedef struct tc_ctx tc_ctx;
int tc_device_count(void);          /* 0 when there is no driver or no device */
/* "NAME (sm_XY, N SMs, G GiB)" of device i into buf; 0, TC_ERR_OLD_GPU (older than
 * sm_90) or a cudaError_t. */
int tc_device_describe(int device, char *buf, size_t n);
/* A context on device (0..tc_device_count()-1): the device set, a non-blocking stream.
 * cudaErrorInvalidDevice for another index, TC_ERR_OLD_GPU before sm_90. */
int tc_ctx_new(int device, tc_ctx **out);
void tc_ctx_free(tc_ctx *cx);      /* waits for its stream, frees what it holds */
int tc_device(tc_ctx *cx);          /* its device index */
/* Workspace slot (0: the matmul's activation, 1: embed's ids, 2: attention partials)
 * grown now to at least bytes, outside any capture, so that later steps do not move it
 * (a move makes recorded step graphs stale). 0 or a cudaError_t. */
int tc_ctx_reserve(tc_ctx *cx, int slot, size_t bytes);
/* The pinned host buffer of token ids (embedding) for n ids, sized now (a step recorded
 * into a graph must not allocate it). 0 or a CUDA error. */
int tc_ctx_reserve_ids(tc_ctx *cx, size_t n);
/* Bytes of the decode attention's partials workspace (slot 2) for one sequence over a cache
 * of max_len positions (reserve them with tc_ctx_reserve(cx, 2, ..)). */
size_t tc_attention_decode_ws_bytes(tc_ctx *cx, int k_type, int v_type, int max_len, int n_head, int n_head_kv,
                                    int head_dim);
/* The tensor-core GEMM's split-K workspace (mm_choose.h: TC_GEMM_WS_FLOATS partial
 * floats and TC_GEMM_MAX_TILES counters, about 32 MiB, fixed: it does not grow with the
 * batch), allocated now, outside any capture; otherwise the first split launch that is
 * not being captured allocates it, and one captured before that runs unsplit.
 * Idempotent; 0 or a cudaError_t. */
int tc_gemm_reserve(tc_ctx *cx);
const char *tc_device_name(tc_ctx *cx);
const char *tc_error_string(int err);
void *tc_malloc(tc_ctx *cx, size_t n);          /* device memory (zeroed); NULL on failure */
void tc_free(tc_ctx *cx, void *p, size_t n);   /* n: the size given to tc_malloc */
int tc_upload(tc_ctx *cx, void *dst, const void *src_host, size_t n);
int tc_download(tc_ctx *cx, void *dst_host, const void *src, size_t n);
/* n rows of row_floats floats, src row i into dst_host[i], then one wait for the stream. */
int tc_download_rows(tc_ctx *cx, float *const *dst_host, const float *src, size_t row_floats, int n);
/* Page-lock host memory so copies into it are direct DMA (cudaHostRegister); nonzero when the
 * driver refuses (the memory then stays pageable: copies still work, staged). */
int tc_host_pin(tc_ctx *cx, void *p, size_t n);
void tc_host_unpin(tc_ctx *cx, void *p);
int tc_zero(tc_ctx *cx, void *p, size_t n);
int tc_copy(tc_ctx *cx, void *dst, const void *src, size_t n); /* device to device, queued on the stream */
int tc_sync(tc_ctx *cx);                  /* waits for the stream; first error since the last sync */
size_t tc_mem_free(tc_ctx *cx);           /* free device memory now (cudaMemGetInfo; 0 on error) */

/* ---------------------------------------------------------------- products */
/* y[b*ys + i] = sum_j W[i,j] x[b*xs + j] for each of the nm matrices (same k). */
void tc_matmul_multi(tc_ctx *cx, int nm, const tc_mat *w, const float *x, size_t batch, size_t xs,
                     float *const *y, const size_t *ys);

/* A quantised activation (the integer path's input: 14-bit hi/lo planes, one
 * scale per 128 inputs, per-32 sums), for `batch` rows of k inputs (k % 128 == 0)
 * in a caller-owned device buffer of tc_act_bytes(batch, k) bytes. A producer
 * can write it (tc_quantize, or the _q variants of the fused sites below, which
 * quantise inside the Hadamard kernel: no extra launch) and any number of
 * matmuls with that input read it (tc_matmul_multi_q: no quantise launch). */
typedef struct tc_act {
    int8_t *q;   /* [batch][k/32][64] */
    float *sx;   /* [batch][k/128] */
    int *corr;   /* [batch][k/32] */
    int64_t k;
    size_t batch;
} tc_act;
size_t tc_act_bytes(size_t batch, int64_t k);
tc_act tc_act_view(void *buf, size_t batch, int64_t k); /* buf: device, tc_act_bytes */
/* tc_matmul_multi with the integer path's activation given: x (fp32 rows, for
 * non-integer matrices only; may be NULL when every matrix is TERN128/TERN128R). */
void tc_matmul_multi_q(tc_ctx *cx, int nm, const tc_mat *w, const tc_act *act, const float *x, size_t xs,
                       float *const *y, const size_t *ys);
/* The same products for the rows of a speculative verify: every row bit-identical to
 * the call with that row alone (batch 1: the decode step's kernels and launch shapes),
 * the tiled matrices' weights read once per 8 rows (tc_gemv_rows.cu), other
 * kinds row by row. _q: the activation given (as tc_matmul_multi_q). */
void tc_matmul_multi_exact(tc_ctx *cx, int nm, const tc_mat *w, const float *x, size_t batch, size_t xs,
                           float *const *y, const size_t *ys);
void tc_matmul_multi_q_exact(tc_ctx *cx, int nm, const tc_mat *w, const tc_act *act, const float *x, size_t xs,
                             float *const *y, const size_t *ys);

/* Load-time repack of a TC_TERN128 matrix (k % 128 == 0) into TC_TERN128T: 16-row
 * strips of 256-input tiles in the order the tensor-core GEMV's lanes load them
 * (src/kernels/cuda/gemv_tiled.h says byte by byte), a new device buffer of
 * tc_tiled_bytes(n, k) bytes from tc_malloc (= the file's 34 B per 128 inputs,
 * plus zero rows up to a multiple of 16 and a zero group when k/128 is odd);
 * dst->row_bytes = bytes per strip. Free with tc_free(dst->data, tc_tiled_bytes()).
 * Synchronous; TC_ERR_UNSUPPORTED for another kind or shape, cudaErrorMemoryAllocation. */
size_t tc_tiled_bytes(int64_t n, int64_t k);
int tc_repack_tiled(tc_ctx *cx, const tc_mat *src, tc_mat *dst);
/* tc_embed for a TC_TERN128T matrix (same semantics). */
void tc_embed_tiled(tc_ctx *cx, const tc_mat *emb, const int32_t *ids_host, size_t n, float *out,
                    size_t block, const float *signs);

/* ------------------------------------------------------------- row ops */
/* Hadamard per block: forward x <- FWHT(x*signs)/sqrt(block); inverse
 * x <- signs*FWHT(x)/sqrt(block). rows of n contiguous floats. */
void tc_hadamard(tc_ctx *cx, float *x, size_t rows, size_t n, size_t block, const float *signs, int inverse);
/* r += d (d may be NULL); out = rmsnorm(r)*gain, where out is normed (or rotated if
 * normed is NULL); rotated = H(out) when rotated && signs. */
void tc_add_rmsnorm_hadamard(tc_ctx *cx, float *r, const float *d, const float *gain, float eps,
                             float *normed, float *rotated, size_t rows, size_t n,
                             size_t block, const float *signs);
void tc_swiglu_hadamard(tc_ctx *cx, const float *gate, const float *up, float *out, size_t rows, size_t n,
                        size_t block, const float *signs);
/* The same, also writing act (rows x n) = quantised final output (rotated, or
 * out / normed without signs); quantised in the FWHT kernel when block % 128 == 0,
 * else by one tc_quantize launch. act may be NULL (= the plain launcher). */
void tc_add_rmsnorm_hadamard_q(tc_ctx *cx, float *r, const float *d, const float *gain, float eps,
                               float *normed, float *rotated, size_t rows, size_t n,
                               size_t block, const float *signs, const tc_act *act);
void tc_swiglu_hadamard_q(tc_ctx *cx, const float *gate, const float *up, float *out, size_t rows, size_t n,
                          size_t block, const float *signs, const tc_act *act);
/* out[i] = row ids_host[i] of emb (ids already range-checked), then the inverse
 * transform when signs. */
void tc_embed(tc_ctx *cx, const tc_mat *emb, const int32_t *ids_host, size_t n, float *out, size_t block,
              const float *signs);
void tc_head_rmsnorm(tc_ctx *cx, float *x, size_t rows, size_t stride, int n_heads, int hd,
                     const float *gain, float eps);
void tc_rope(tc_ctx *cx, float *x, size_t rows, size_t stride, int n_heads, int hd, int rot, int pos0,
             float theta);
/* KV cache element types (k_type / v_type arguments below): the numbering of
 * kernels.h tern_kv_type; all four are read and written here (rows of
 * n_head_kv*head_dim values, dense; Q8_0 rows are head_dim/32 34-byte blocks per head,
 * the CPU's layout and rounding, and need head_dim % 32 == 0), other numbers give
 * TC_ERR_UNSUPPORTED. */
enum { TC_KV_F32 = 0, TC_KV_F16 = 1, TC_KV_BF16 = 2, TC_KV_Q8_0 = 3, TC_KV_Q8_BLOCK = 32 };
void tc_attention(tc_ctx *cx, const float *q, size_t q_stride, const void *kcache, const void *vcache,
                  int k_type, int v_type, float *out, int rows, int pos0, int n_head,
                  int n_head_kv, int head_dim, float scale);

/* Decode attention for one query row (position pos0, attending 0..pos0) split
 * over the cache (flash-decoding), then a merge that multiplies by
 * sigmoid(gate[h*hd + j]) when gate is not NULL (the attention output gate).
 * Default (GQA kernel; k_type == v_type, head_dim 32/64/128/256, 16-byte aligned
 * f32/f16/bf16 caches): one CTA per (kv head, up to 8 of its query heads, span of
 * positions) reads each K/V row of the span once for all those query heads; the span
 * is ceil((pos0 + 1) / splits) rounded up to 16, the splits (<= 1024, ~8 CTAs per SM)
 * fixed by max_len and the shape. Otherwise, or after tc_set_attn_old(1) (the
 * reference for tests and benches), the old kernels: per query head, one CTA per span of 32
 * positions (doubled until there are at most 2048). CTAs past pos0 exit. max_len (the
 * cache capacity) fixes the grid, so a captured graph serves every position (pos0 read
 * from the graph's device word when capturing). Two launches; head_dim <= 256. */
void tc_attention_decode(tc_ctx *cx, const float *q, const void *kcache, const void *vcache, int k_type,
                         int v_type, const float *gate, float *out, int pos0, int max_len,
                         int n_head, int n_head_kv, int head_dim, float scale);

/* The attention mixer's decode prologue for one query row in one launch (a warp
 * per q head and per kv head): q heads split from the gated projection (gated:
 * [n_head][2*hd], q then gate per head; else [n_head][hd]) and the gate copied to
 * gate_out, per-head RMSNorm of q (q_norm) and k (k_norm), NEOX RoPE of the first
 * rope_dims at position pos0 (the graph's device word when capturing), q to q_out
 * [n_head][hd], k and v stored at row pos0 of the layer's caches [n_ctx][nkv*hd]
 * (types k_type / v_type, TC_KV_*; 0 = f32).
 * Same math as tc_split_heads, tc_head_rmsnorm, tc_rope and tc_kv_store; hd <= 256,
 * rope_dims even and <= hd (else TC_ERR_UNSUPPORTED). */
typedef struct tc_attn_prep_args {
    const float *qg, *k, *v;
    int gated;
    const float *q_norm, *k_norm;
    float eps, theta;
    float *q_out, *gate_out;
    void *kcache, *vcache;
    int pos0, n_head, n_head_kv, head_dim, rope_dims;
    int k_type, v_type; /* TC_KV_* */
} tc_attn_prep_args;
void tc_attn_prep(tc_ctx *cx, const tc_attn_prep_args *a);

/* The decode attention of n sequences in one launch per op (a batch step): sequence i
 * has its q / gate / output rows at i * q_stride, its projection rows at i * qg_stride
 * (qg) and i * kv_stride (k, v), and its position and layer-0 caches in the device
 * table seqs[i]; the layer's cache is kcache + kv_index * n_ctx * k_row (bytes; v the
 * same with v_row). The caller keeps every cache base and layer stride 16-byte aligned
 * (f32 / f16 / bf16) and the types the same for all the sequences. part_stride is set
 * by tc_attention_decode_batch. The default for batch steps since 2026-12-03 (H200:
 * batch 8 577 vs 530 tok/s, parity passed); tc_attention_decode_batch_ok says whether the GQA
 * kernels take the shape (max_ctx: the largest n_ctx of the batch). Same kernels and
 * arithmetic as tc_attn_prep / tc_attention_decode per sequence (q, gate and the cache
 * bytes bitwise equal); the attention's splits are sized for the whole batch (~4 CTAs
 * per SM), so its spans of positions, and so the fp32 summation order, may differ from a
 * lone sequence's (equal bits where the spans agree). */
typedef struct tc_attn_seq {
    void *kcache, *vcache;
    int pos0, n_ctx;
} tc_attn_seq;
typedef struct tc_attn_bat {
    const tc_attn_seq *seqs; /* device memory, [n] */
    int kv_index;
    size_t k_row, v_row;
    size_t qg_stride, kv_stride, q_stride, part_stride;
} tc_attn_bat;
void tc_attn_prep_batch(tc_ctx *cx, const tc_attn_prep_args *a, int n, const tc_attn_bat *bt);
/* One sequence's rows in one launch per op (a verify step): row r at position pos0 + r
 * (the graph's device word + r when capturing), its projection rows at r * qg_stride (qg)
 * and r * kv_stride (k, v), its q / gate / output rows at r * q_stride (strides from st,
 * its other fields unused); caches as tc_attn_prep / tc_attention_decode. The prologue
 * stores every row's k/v before the attention reads the cache; row r's attention reads
 * positions <= pos0 + r with the splits of a lone row (max_len), so each row's bits are
 * those of tc_attn_prep + tc_attention_decode for it alone. */
void tc_attn_prep_rows(tc_ctx *cx, const tc_attn_prep_args *a, int rows, const tc_attn_bat *st);
void tc_attention_decode_rows(tc_ctx *cx, const float *q, const void *kcache, const void *vcache, int k_type,
                              int v_type, const float *gate, float *out, int rows, size_t q_stride, int pos0,
                              int max_len, int n_head, int n_head_kv, int head_dim, float scale);
int tc_attention_decode_batch_ok(tc_ctx *cx, int k_type, int v_type, int max_ctx, int n_head, int n_head_kv, int head_dim);
void tc_attention_decode_batch(tc_ctx *cx, const float *q, int k_type, int v_type, const float *gate, float *out, int n,
                               const tc_attn_bat *bt, int max_ctx, int n_head, int n_head_kv, int head_dim,
                               float scale);

typedef struct tc_gdn_args {
    const float *qkv, *z, *a, *b, *conv_w, *ssm_a, *dt_bias, *norm;
    float *conv_state, *state, *out, *work;
    int rows, n_k, n_v, dk, dv, conv_k;
    int v_tiled;
    float eps;
    int state_bf16; /* state holds n_v*dk*dv bf16 values (read once, updated in fp32,
                       written once rounded to nearest even) at the same address */
} tc_gdn_args;
/* Conv + SiLU, L2 norms, delta rule (state [n_v][dk][dv], fully applied), gated norm.
 * Two launches (tc_gdn_scan.cu: conv + L2 parallel over tokens, then the walk split
 * over value columns with the rows staged in shared memory), or after tc_gdn_config(0, ..)
 * (the reference) the older three (tc_gdn_walk.cu: conv serial per channel, one CTA per value head). */
void tc_gdn(tc_ctx *cx, const tc_gdn_args *a);
/* on != 0: tc_gdn takes the chunked form on tensor cores (tc_gdn_chunk.cu: conv + L2,
 * 64-token chunks with TF32 x3 products, gated norm; dk <= 128, else the scan); 0: the
 * scan (the default). The model parameter cuda_gdn_chunk. */
void tc_gdn_use_chunk(tc_ctx *cx, int on);

/* GDN decode step for n sessions, one token each, in one launch for all of them
 * (dk <= 128, dv <= 128, dv % 4 == 0, conv_k <= 4: k_gdn_step_fused) or else two:
 * causal conv over (conv state ++ the token's qkv row) + SiLU, conv state shifted,
 * q/k L2-normalised (q also by 1/sqrt(dk)); per (value head, session): decay
 * exp(ssm_a*softplus(a+dt_bias)), beta = sigmoid(b), S *= decay, delta rule,
 * o = S^T q, out = rmsnorm(o)*norm*silu(z). Same math as tc_gdn with rows = 1
 * (state fully applied, [n_v][dk][dv] fp32). conv_state and state are DEVICE
 * arrays of n device pointers (one per session, [conv_k-1][C] and
 * [n_v][dk][dv]); row i of qkv/z/a/b/out/work belongs to session i. work: n*C
 * floats of scratch (the two-kernel path's). dk <= 128, dv <= 256 (else
 * TC_ERR_UNSUPPORTED). */
typedef struct tc_gdn_step_args {
    int n;
    const float *qkv, *z, *a, *b; /* [n][C], [n][n_v*dv], [n][n_v], [n][n_v] (strides below) */
    size_t qkv_stride, z_stride, ab_stride, out_stride;
    const float *conv_w, *ssm_a, *dt_bias, *norm;
    float *const *conv_state, *const *state; /* device arrays of n pointers */
    float *out, *work;
    int n_k, n_v, dk, dv, conv_k, v_tiled;
    float eps;
    /* The output's transform, in the same launch when it fits (all zero: none).
     * out_grouped: value head p written at its grouped-order slot (the tiled->grouped
     * permute of tc_permute_tiled_grouped). signs: then the forward Hadamard of each
     * n_v*dv output row in blocks of `block` (inside the kernel when block divides dv,
     * or spans 2..8 whole heads and n_v is a multiple of block/dv: a thread-block
     * cluster; else one tc_hadamard launch after it, which needs out_stride = n_v*dv).
     * act.q: the final rows quantised into act (n rows of n_v*dv; in the kernel when
     * dv % 128 == 0, else one tc_quantize launch). Same floats and bytes as running
     * the permute, tc_hadamard and tc_quantize after the plain step. */
    int out_grouped;
    const float *signs;
    int block;
    tc_act act;
    /* The a/b gate projections in the step (optional; ab_w[0].data NULL: a and b are
     * inputs): a[i][p] = sum_j ab_w[0][p, j] ab_x[i*ab_x_stride + j], b likewise with
     * ab_w[1] (n_v rows of k each). Dense matrices (TC_F32, F16 or BF16, one kind,
     * rows 16-byte aligned, k % 8 == 0) are read inside the one-kernel step; other
     * kinds and shapes, and the two-kernel path, run tc_matmul_multi first into a and
     * b, which must then be writable device rows. */
    tc_mat ab_w[2];
    const float *ab_x;
    size_t ab_x_stride;
    /* each state[i] holds n_v*dk*dv bf16 values (the model parameter gdn_state): read
     * once, updated in fp32 registers, written once rounded to nearest even */
    int state_bf16;
    /* rows > 1 (n must be 1): the session's next `rows` tokens (a verify step), row r of
     * qkv/z/a/b/out/ab_x/act at r times its stride; the state advanced row after row
     * (in one launch where the one-kernel step takes the shape, the state and the conv
     * window in registers between rows), each row's output bitwise that of a step of
     * its own. 0 or 1: one row per session. */
    int rows;
} tc_gdn_step_args;
void tc_gdn_step(tc_ctx *cx, const tc_gdn_step_args *a);

void tc_copy_rows(tc_ctx *cx, float *dst, size_t ds, const float *src, size_t ss, size_t rows, size_t n);
/* KV cache store: kc/vc are the layer's caches [n_ctx][kvw] of types k_type /
 * v_type (TC_KV_*; f16/bf16 rounded to nearest even, q8_0 quantised per 32 values
 * like the CPU's tern_kv_store, kvw % 32 == 0); float rows k/v go to
 * positions pos0.. (the device position in a step graph). */
void tc_kv_store(tc_ctx *cx, void *kc, void *vc, int k_type, int v_type, const float *k, const float *v,
                 size_t kvw, size_t rows, int pos0);
void tc_split_heads(tc_ctx *cx, const float *src, size_t rows, int n_heads, int hd, float *a, float *b);
void tc_mul_sigmoid(tc_ctx *cx, float *x, const float *g, size_t rows, size_t n);
void tc_permute_tiled_grouped(tc_ctx *cx, const float *src, float *dst, size_t rows, int n_k, int n_v,
                              int dv);

/* The forward tc_hadamard that also writes act (rows x n): the quantised output, in
 * the transform's kernel when block % 128 == 0 (else one tc_quantize launch). act NULL:
 * tc_hadamard. Lets the matmul after it take the activation (tc_matmul_multi_q). */
void tc_hadamard_q(tc_ctx *cx, float *x, size_t rows, size_t n, size_t block, const float *signs,
                   const tc_act *act);

/* ------------------------------------------------------------- switches
 * tc_set_pdl(1 | 0): programmatic dependent launch (the model parameter cuda_pdl);
 * from the next launch (a recorded graph keeps what it recorded). tc_mm_set_caps: the
 * matmul chooser's prefill mode (TC_GEMM_EXACT, TC_GEMM_INT8: the model parameter
 * cuda_prefill) and forced family (TC_MM_NONE: the chooser decides; cuda_matmul).
 * Tests and benches have more (lab.h). */
void tc_set_pdl(tc_ctx *cx, int on);
void tc_mm_set_caps(tc_ctx *cx, int gemm_mode, int force);
/* Batch-invariant products (the model parameter batch_invariant; mm_choose.h): on = a row's
 * product is the same bits whatever other rows its call carries (up to TC_MM_INVARIANT_M). */
void tc_mm_set_invariant(tc_ctx *cx, int on);

/* ------------------------------------------------------ decode-step graphs
 * One single-token forward pass of a session is captured once and replayed for
 * every later step. While capturing, the position-dependent launchers (rope,
 * attention, kv_store) read the position, and embed the token id, from device
 * words that the graph's first nodes copy from pinned host memory, so the same
 * graph serves every position. The graph's last node copies the logits row to a
 * pinned buffer. A graph is stale once the workspace was reallocated. The back-end
 * records them unless the model parameter cuda_graphs is false. */
typedef struct tc_graph tc_graph;
/* Allocate the graph's pinned buffers, set the step's values, begin capturing. */
int tc_graph_begin(tc_ctx *cx, int pos0, int32_t token, size_t n_vocab, tc_graph **out);
/* Queue the logits copy, end capturing, instantiate. On error the graph is freed. */
int tc_graph_end(tc_ctx *cx, tc_graph *g, const float *dlogits);
/* Mark every recorded graph stale (a buffer they read was reallocated). */
void tc_graphs_invalidate(tc_ctx *cx);
/* Run one step: 0 and *ran = 1 when replayed (logits_host filled); *ran = 0 when the
 * graph is stale (the caller captures again). */
int tc_graph_run(tc_ctx *cx, tc_graph *g, int pos0, int32_t token, float *logits_host, int *ran);
void tc_graph_free(tc_graph *g);
/* A verify graph (issue 24): rows <= TC_GRAPH_ROWS rows of one sequence at positions
 * pos0.., tokens and positions in the graph's words; tc_graph_end as above (it copies
 * the rows x n_vocab logits). While capturing, tc_graph_row(r) points the kernels'
 * position word at row r's (per-row kernels: the attention prologue and decode
 * attention); outside a verify capture it does nothing. tc_graph_run_rows: replay at
 * pos0 with these tokens, the rows' logits into logits_host ([rows][n_vocab]; NULL: left
 * in the graph's page-locked buffer, tc_graph_logits, until its next replay). */
#define TC_GRAPH_ROWS 16
int tc_graph_begin_rows(tc_ctx *cx, int pos0, const int32_t *tokens, int rows, size_t n_vocab, tc_graph **out);
void tc_graph_row(tc_ctx *cx, int r);
int tc_graph_run_rows(tc_ctx *cx, tc_graph *g, int pos0, const int32_t *tokens, float *logits_host, int *ran);
const float *tc_graph_logits(const tc_graph *g);

/* ------------------------------------------------------------- profiling
 * Profiling (off by default; the model parameter cuda_profile turns it on): every
 * top-level launcher is bracketed by a cudaEvent pair keyed by its family; nested
 * launches count toward the outer family; nothing is recorded while capturing a
 * graph. tc_profile_report (lab.h) syncs the stream and folds the pending pairs.
 * Disabled cost: one branch per launcher. */
typedef enum tc_family {
    TC_FAM_MATMUL = 0,   /* the ternary / dense products (GEMV and GEMM kernels) */
    TC_FAM_ACTQ,         /* activation quantisation (its own launch) */
    TC_FAM_HADAMARD,
    TC_FAM_NORM,         /* add+rmsnorm(+hadamard), head rmsnorm */
    TC_FAM_SWIGLU,       /* swiglu(+hadamard) */
    TC_FAM_ATTENTION,
    TC_FAM_GDN,
    TC_FAM_ROPE,
    TC_FAM_EMBED,
    TC_FAM_MOVERS,       /* copy rows, kv store, split heads, sigmoid gate, permutes */
    TC_FAM_REPACK,       /* load-time weight repacks */
    TC_FAM_N
} tc_family;
void tc_profile_enable(tc_ctx *cx, int on);  /* also resets the accumulated figures */

/* Device memory read bandwidth (GB/s): `bytes` read with 16-byte loads, best of
 * `passes` (timed with events). 0 on failure. */
double tc_read_ceiling_gbps(tc_ctx *cx, size_t bytes, int passes);
/* The int8 tensor-core rate (TOPS, wgmma chains on operands on chip; tc_gemm_wg.cu), best of
 * passes; 0 without sm_90a. */
double tc_int8_mma_tops(tc_ctx *cx, int passes);

#ifdef __cplusplus
}
#endif

#endif
