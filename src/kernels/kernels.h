/*
 * kernels.h - the CPU kernel contract. Model code calls only what is declared
 * here (through the CPU back-end); ISA variants live in src/kernels/cpu/cpu_<isa>.c
 * and are chosen once at start (tern_kernels_init), with the scalar reference in
 * src/kernels/cpu/ref.c always compiled as fallback and test oracle.
 *
 * Weight matrices (tern_qmat) are row-major [n rows (outputs), k columns (inputs)]
 * in a file layout, used in place (mmapped):
 *   PQ2_0 / Q2_0 (fork): per row k/128 blocks of 34 B: fp16 d, 32 B codes,
 *        element j at byte j/4 bits 2*(j%4), value (code-1)*d, code 3 never valid.
 *   Q2_0_G64 (mainline): per row k/64 blocks of 18 B: fp16 d, 16 B codes, same rule.
 *   Q1_0: per row k/128 blocks of 18 B: fp16 d, 16 B bits, element j = bit j%8 of
 *        byte j/8, value bit ? +d : -d.
 *   F32 / F16 / BF16: dense rows (small matrices: GDN a/b projections).
 *   PTQ1_0 is not a kernel layout: the loader transcodes it to PQ2_0 at load.
 * Row stride is row_bytes (normally k/block*block_bytes).
 *
 * Accuracy contract: max|y - ref| / max|ref| < 1e-3 against float64 of the
 * dequantized matrix, for every ISA and thread count.
 */
#ifndef TERN_KERNELS_H
#define TERN_KERNELS_H

#include "core/common.h"

/* ------------------------------------------------------------ thread pool */
typedef struct tern_pool tern_pool;
/* n_threads >= 1 (the caller's thread counts as one worker). Waits spin for
 * tern_set_spin_us() microseconds (tern.h; the value at creation), then sleep. */
tern_status tern_pool_new(int n_threads, tern_pool **out);
void tern_pool_free(tern_pool *p);
int tern_pool_size(const tern_pool *p);
/* Run fn(ctx, task, n_tasks) for task in [0, n_tasks), spread over the workers,
 * and return when all are done. pool may be NULL (runs inline). Not reentrant. */
typedef void (*tern_task_fn)(void *ctx, int task, int n_tasks);
void tern_pool_run(tern_pool *p, tern_task_fn fn, void *ctx, int n_tasks);
/* Solo mode (on by default): when the helpers
 * have not been paying for their wake-ups and waits (a shared CPU), runs stay on
 * the caller's thread for a while. Off: every run is shared (benchmarks of the
 * kernels, the read ceiling). Returns the previous setting; NULL pool: false. */
bool tern_pool_set_adaptive(tern_pool *p, bool on);

/* ---------------------------------------------------------------- matrices */
typedef struct tern_qmat {
    tern_dtype type;
    int64_t n, k;            /* rows (outputs), columns (inputs) */
    const uint8_t *data;     /* first row */
    size_t row_bytes;        /* bytes from one row to the next */
    int layout;              /* TERN_LAYOUT_ROWS (0: the file layout above) or TERN_LAYOUT_R16 */
} tern_qmat;

/* TERN_LAYOUT_R16 (PQ2_0 / Q2_0 only; made by tern_qmat_repack): rows in groups
 * of 16 (the last group padded with zero rows); group g starts at
 * data + g*16*row_bytes and holds, per 128-input block b (544 bytes): the 16
 * rows' fp16 scales (32 B, row order), then 8 vectors of 64 bytes; lane L
 * (bytes 4L..4L+3) of vector v holds row L's elements 16v + 4s + j in bits
 * 2s..2s+1 of byte j (j, s = 0..3). Same bytes per weight as the file layout;
 * the AVX-512 kernels mask the fields in place (no shifts), 16 rows per vector,
 * one scale epilogue per 16 rows, at every batch size.
 * Q1_0 in TERN_LAYOUT_R16: per block (288 bytes) the 16 scales, then 4 vectors of
 * 64 bytes; lane L of vector v holds row L's elements 32v + 4t + j in bit t of
 * byte j (t = 0..7, j = 0..3). */
#define TERN_LAYOUT_ROWS 0
#define TERN_LAYOUT_R16 1

/* Validate type/shape/row_bytes/layout (k multiple of the block; supported type). */
tern_status tern_qmat_check(const tern_qmat *w, const char *name);

/* Repack a PQ2_0 / Q2_0 / Q1_0 matrix (file layout) into TERN_LAYOUT_R16 in a new
 * 64-byte aligned buffer (*out describes it; free with tern_qmat_free_repacked).
 * Worth it only for the AVX-512 kernels: returns TERN_ERR_UNSUPPORTED when the
 * active ISA is not AVX-512 or the type is not PQ2_0 / Q2_0 / Q1_0. Costs a copy of the
 * weights (the mapping can then be dropped for that tensor). */
tern_status tern_qmat_repack(const tern_qmat *w, tern_qmat *out);
void tern_qmat_free_repacked(tern_qmat *w);

/* y[b*y_stride + i] = sum_j W[i,j] * x[b*x_stride + j]   for b < batch, i < n.
 * Any batch >= 0 (0: no work). Kernel choice (cpu_*.c): on AVX-512 the R16 layout
 * takes its GEMV at every batch; the file-layout ternary types (PQ2_0, Q2_0 g128 /
 * g64) the GEMV path for batch < GEMM_MIN (cpu_avx512.c) and the VNNI GEMM from
 * there; F32/F16/BF16 (k a multiple
 * of 16) and Q1_0 use the AVX-512 GEMM kernel at every batch. AVX2, NEON and the
 * scalar reference have no GEMM: the GEMV row kernel at every batch. */
void tern_matmul(const tern_qmat *w, const float *x, size_t batch, size_t x_stride,
                 float *y, size_t y_stride, tern_pool *pool);

/* The largest batch for which tern_matmul computes every row exactly (bit for bit) as a
 * batch of one, 0 for any: the GEMV at every batch, or the GEMM at every batch (its rows do
 * not depend on each other); GEMM_MIN - 1 for the file-layout AVX-512 ternary types, which
 * switch kernels there. Speculative verification splits its batches by it. */
size_t tern_matmul_exact_batch(const tern_qmat *w);

/* Several matrices with the same k sharing one activation (q+k+v, gate+up,
 * qkv+z): one pass over x preparation, one dispatch; results identical to the
 * separate calls. */
void tern_matmul_multi(int n_mats, const tern_qmat *const *w, const float *x, size_t batch,
                       size_t x_stride, float *const *y, const size_t *y_stride,
                       tern_pool *pool);

/* ------------------------------------------------------------- Hadamard
 * signs: float +-1 of length n (the sign vector of this K width). block: power
 * of two dividing n (1024 for Bonsai). normalized transform = H_block / sqrt(block).
 *   forward (activation site):  x <- FWHT_block(x * signs) / sqrt(block)
 *   inverse (embedding rows):   x <- signs * FWHT_block(x) / sqrt(block)
 * Applied to `rows` rows of n contiguous floats each (row stride = n). */
void tern_hadamard(float *x, size_t rows, size_t n, size_t block, const float *signs);
void tern_hadamard_inv(float *x, size_t rows, size_t n, size_t block, const float *signs);

/* ------------------------------------------------------------ fused sites
 * (section 8.7 of the design doc), per row, `rows` rows of n:
 *   add_rmsnorm_hadamard: r <- r + d (if d != NULL); normed = rmsnorm(r) * gain;
 *       rotated = hadamard(normed) (if signs != NULL, else rotated untouched).
 *       rmsnorm(v) = v / sqrt(mean(v^2) + eps). gain is the stored (already +1) gain.
 *   swiglu_hadamard: out = silu(gate) * up, then hadamard(out) if signs != NULL.
 * normed may be NULL when not needed. */
void tern_add_rmsnorm_hadamard(float *r, const float *d, const float *gain, float eps,
                               float *normed, float *rotated, size_t rows, size_t n,
                               size_t block, const float *signs);
void tern_swiglu_hadamard(const float *gate, const float *up, float *out, size_t rows,
                          size_t n, size_t block, const float *signs);

/* ------------------------------------------------------------- model ops
 * The per-head steps of the qwen35 / qwen3 layers, in fp32, split over `pool` (NULL:
 * inline). Math follows transformers' modeling_qwen3_5.py / modeling_qwen3.py. The
 * per-head loops are in the kernel table (model_ops.h, one build per ISA); the
 * arithmetic is the same for every thread count (each head is one task).
 *
 * tern_head_rmsnorm: in place, for r < rows, h < n_heads, v = x + r*stride + h*hd:
 *     v[j] <- v[j] * (float)(1 / sqrt(sum_j v[j]^2 / hd + eps)) * gain[j]
 *     (the sum in double). Any rows >= 0, n_heads >= 1, hd >= 1.
 * tern_rope: NEOX rotation of the first rot dims (rot even, <= hd) of each head, pairs
 *     (i, i + rot/2), row r at position pos0 + r: angle = pos * theta^(-2i/rot) in
 *     double, then cos/sin rounded to float and the rotation in float. */
void tern_head_rmsnorm(float *x, size_t rows, size_t stride, int n_heads, int hd,
                       const float *gain, float eps, tern_pool *pool);
void tern_rope(float *x, size_t rows, size_t stride, int n_heads, int hd, int rot, int pos0,
               float theta, tern_pool *pool);

/* KV cache storage types. A cache row (one position) holds n_head_kv*head_dim values:
 *   F32, F16 (IEEE half), BF16: dense, head h at value h*head_dim;
 *   Q8_0: blocks of 32 values, 34 bytes each: fp16 scale d, then 32 int8 q, value = q*d
 *         (d = amax/127 rounded to fp16, q = round(x/d) clamped to [-127, 127]); a
 *         head is head_dim/32 whole blocks (head_dim a multiple of 32).
 * Rows are tern_kv_row_bytes(type, n_head_kv*head_dim) bytes apart. */
typedef enum tern_kv_type { TERN_KV_F32 = 0, TERN_KV_F16 = 1, TERN_KV_BF16 = 2, TERN_KV_Q8_0 = 3 } tern_kv_type;
#define TERN_KV_N_TYPES 4
#define TERN_KV_Q8_BLOCK 32
/* Bytes of n values of type t (Q8_0: n a multiple of 32, else 0). */
size_t tern_kv_row_bytes(tern_kv_type t, size_t n);
/* Values per block: 32 for Q8_0, 1 for the others. */
int tern_kv_block(tern_kv_type t);
/* Write rows of n floats (src rows src_stride floats apart) as type t into dst rows
 * dst_stride bytes apart (scalar; correctly rounded f16/bf16, nearest even). */
void tern_kv_store(tern_kv_type t, void *dst, size_t dst_stride, const float *src,
                   size_t src_stride, size_t rows, size_t n);
/* Read n values of type t back as floats (tests, tools). */
void tern_kv_load(tern_kv_type t, const void *src, size_t n, float *out);

/* Causal softmax attention with grouped KV heads (query head h reads KV head
 * h / (n_head / n_head_kv); n_head a multiple of n_head_kv): for query row i (position
 * pos0 + i) and head h, out = sum_{p <= pos0+i} softmax_p(scale * q.k_p) v_p, scores in
 * float with the row max subtracted before expf. Any head_dim >= 1 (16-wide vector
 * steps, scalar tail); Q8_0 caches need head_dim a multiple of 32. The caches are read
 * in their stored type (k_type, v_type; 0 = F32), converted 16 values at a time in
 * registers (no converted copy). One task per query head. */
typedef struct tern_attn_args {
    const float *q;        /* [rows][n_head*head_dim] (after norm + RoPE), row stride q_stride */
    size_t q_stride;
    const void *kcache;    /* [n_ctx] rows of n_head_kv*head_dim values of k_type, positions
                              0..pos0+rows-1 filled */
    const void *vcache;    /* the same in v_type */
    tern_kv_type k_type, v_type;
    float *out;            /* [rows][n_head*head_dim] */
    int rows, pos0;        /* query i is at position pos0 + i; causal */
    int n_head, n_head_kv, head_dim;
    float scale;
    float *scratch;        /* >= n_head * (pos0 + rows) floats */
} tern_attn_args;
void tern_attention(const tern_attn_args *a, tern_pool *pool);

/* Gated DeltaNet (qwen35 linear attention) over a chunk of `rows` tokens, all fp32:
 *   1. causal depthwise conv1d (kernel conv_k, state = the last conv_k-1 inputs) + SiLU
 *      of each of conv_ch = 2*n_k*dk + n_v*dv channels into work; conv_state advances;
 *   2. q, k heads L2-normalised (x * 1/sqrt(sum x^2 + 1e-6), the sum in double), q also
 *      times 1/sqrt(dk);
 *   3. per value head p (key head p % n_k when v_tiled, else p / (n_v/n_k)), per token:
 *      g = ssm_a * softplus(a + dt_bias), decay = exp(g), beta = sigmoid(b);
 *      S = S*decay; delta = (v - S^T k)*beta; S += k delta^T; o = S^T q;
 *   4. out = rmsnorm(o, eps) * norm * silu(z) per value head.
 * The state is kept as S_true = pd*state + pk pdl^T, the last token's rank-1 update
 * `pending` (pd, pk, pdl) not yet folded in (so a decode step reads and writes the state
 * once); all zeros is the empty state. Two scans of step 3, the same recurrence:
 *   token walk: one token at a time; leaves the last token's update pending;
 *   block scan: blocks of <= 64 tokens in the WY form (GEMMs), folds the pending update
 *      first and leaves it empty (pd = 1, pk = pdl = 0); rounding differs from the walk
 *      at fp32 level (~1e-6 relative here; test_kernels_gdn bounds both at 1e-4 against
 *      float64).
 * tern_gdn takes the block scan for calls of >= tern_gdn_block_min() rows (8 with the
 * AVX2 / AVX-512 tables, never with the reference, where blocks measured slower:
 * docs/performance.md; tern_gdn_with chooses a scan for tests and benches).
 * Limits: dv <= 512 (the walk's stack rows); the block scan needs dk, dv <= 512 and
 * falls back to the walk otherwise. One task per value head (conv and norms are split
 * too for > 4 rows). */
typedef struct tern_gdn_args {
    const float *qkv;      /* [rows][conv_ch] projected (pre-conv) q|k|v */
    const float *z;        /* [rows][n_v*dv] output gate */
    const float *a, *b;    /* [rows][n_v] un-activated alpha and beta */
    const float *conv_w;   /* [conv_ch][conv_k] */
    const float *ssm_a;    /* [n_v] */
    const float *dt_bias;  /* [n_v] */
    const float *norm;     /* [dv] */
    float *conv_state;     /* [conv_k-1][conv_ch]: the last conv_k-1 inputs, oldest first */
    float *state;          /* [n_v][dk][dv] (see pending) */
    float *pending;        /* [n_v][1 + dk + dv]: the last token's rank-1 update, not yet in
                              state: S_true = pd*state + pk pdl^T (zeros: empty) */
    float *out;            /* [rows][n_v*dv] gated-normed output, in run order */
    float *work;           /* [rows][conv_ch] scratch */
    int rows;
    int n_k, n_v, dk, dv, conv_k;
    bool v_tiled;          /* value head p reads key head p % n_k (else p / (n_v/n_k)) */
    float eps;
    bool state_bf16;       /* after the call: pending folded in, S rounded to bf16 (nearest
                              even) in its fp32 slots: the floats of a bf16-stored state
                              (tern_gdn_state_round_bf16; the model parameter gdn_state) */
} tern_gdn_args;
void tern_gdn(const tern_gdn_args *a, tern_pool *pool);
/* Tests and benchmarks: a chosen scan (AUTO = what tern_gdn does). */
typedef enum tern_gdn_scan { TERN_GDN_AUTO = 0, TERN_GDN_WALK = 1, TERN_GDN_BLOCKS = 2 } tern_gdn_scan;
void tern_gdn_with(const tern_gdn_args *a, tern_gdn_scan scan, tern_pool *pool);
/* Rows from which tern_gdn takes the block scan (0: never). */
int tern_gdn_block_min(void);
/* S_true = pd*S + pk pdl^T of every value head, rounded to bf16 into S; pending emptied
 * (pd = 1, pk = pdl = 0). Scalar (gdn_bf16.c). */
void tern_gdn_state_round_bf16(float *state, float *pending, int n_v, int dk, int dv);

/* ------------------------------------------------------------ read ceiling
 * Memory read bandwidth in GB/s: `bytes` (use >> the LLC; 0 -> 1 MiB minimum)
 * read by `threads` workers of `pool` (NULL: one), widest loads available,
 * with and without prefetch, best of `passes` each. 0 when out of memory.
 * The same function backs every benchmark's "ceiling". */
double tern_read_ceiling_gbps(tern_pool *pool, int threads, size_t bytes, int passes);
/* The same on the tern_set_threads pool of tern_linear (linear.c): the "cpu" case of
 * tern_device_read_ceiling_gbps. */
double tern_linear_pool_read_ceiling_gbps(size_t bytes, int passes);

/* ------------------------------------------------------------ ISA dispatch */
typedef enum tern_isa {
    TERN_ISA_SCALAR = 0, TERN_ISA_AVX2 = 1, TERN_ISA_AVX512 = 2, TERN_ISA_NEON = 3,
    TERN_ISA_I8MM = 4   /* aarch64: neon + FEAT_I8MM (SMMLA) products */
} tern_isa;
#define TERN_ISA_COUNT 5
/* Detect once (thread-safe) and fill the table for the best level the CPU and OS
 * have; tern_set_kernel_isa (tern.h) lowers it. No AMX level: the VNNI kernels run
 * on AMX machines too (docs/kernels.md). */
void tern_kernels_init(void);
tern_isa tern_kernels_isa(void);
const char *tern_isa_name(tern_isa isa);
/* The inverse of tern_isa_name (case-insensitive); false for an unknown name. */
bool tern_isa_parse(const char *name, tern_isa *out);
/* The best level this machine has. */
tern_isa tern_kernels_best(void);
/* Lab knob (A/B on an Arm machine): the NEON levels' products in fp32 (the AVX2
 * scheme) instead of int8 SDOT. Refills the table at the current level; like
 * tern_kernels_force, not while kernels run. No effect off aarch64. */
void tern_kernels_set_neon_fp32(bool on);
/* Tests/benchmarks: force an ISA (returns false if the CPU lacks it). Refills the
 * table: never call it while kernels run in another thread. */
bool tern_kernels_force(tern_isa isa);

#endif
