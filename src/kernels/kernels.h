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
/* n_threads >= 1 (the caller's thread counts as one worker). */
tern_status tern_pool_new(int n_threads, tern_pool **out);
void tern_pool_free(tern_pool *p);
int tern_pool_size(const tern_pool *p);
/* Run fn(ctx, task, n_tasks) for task in [0, n_tasks), spread over the workers,
 * and return when all are done. pool may be NULL (runs inline). Not reentrant. */
typedef void (*tern_task_fn)(void *ctx, int task, int n_tasks);
void tern_pool_run(tern_pool *p, tern_task_fn fn, void *ctx, int n_tasks);

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
 * rows' fp16 scales (32 B, row order), then 32 chunks of 16 bytes; chunk q
 * holds byte q of each row's block (its elements 4q..4q+3), row L at byte
 * 8*((L/2)%2) + 2*(L/4) + L%2. Same bytes per weight as the file layout; the
 * AVX-512 GEMV then shares one scale epilogue among 16 rows. */
#define TERN_LAYOUT_ROWS 0
#define TERN_LAYOUT_R16 1

/* Validate type/shape/row_bytes/layout (k multiple of the block; supported type). */
tern_status tern_qmat_check(const tern_qmat *w, const char *name);

/* Repack a PQ2_0 / Q2_0 matrix (file layout) into TERN_LAYOUT_R16 in a new
 * 64-byte aligned buffer (*out describes it; free with tern_qmat_free_repacked).
 * Worth it only for the AVX-512 kernels: returns TERN_ERR_UNSUPPORTED when the
 * active ISA is not AVX-512 or the type is not PQ2_0 / Q2_0. Costs a copy of the
 * weights (the mapping can then be dropped for that tensor). */
tern_status tern_qmat_repack(const tern_qmat *w, tern_qmat *out);
void tern_qmat_free_repacked(tern_qmat *w);

/* y[b*y_stride + i] = sum_j W[i,j] * x[b*x_stride + j]   for b < batch, i < n.
 * Any batch >= 0 (0: no work); GEMV path for batch < 32, GEMM for larger. */
void tern_matmul(const tern_qmat *w, const float *x, size_t batch, size_t x_stride,
                 float *y, size_t y_stride, tern_pool *pool);

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
    TERN_ISA_SCALAR = 0, TERN_ISA_AVX2 = 1, TERN_ISA_AVX512 = 2, TERN_ISA_NEON = 3
} tern_isa;
/* Detect once (thread-safe); TERN_ISA=scalar|avx2|avx512|neon forces a lower or
 * equal level (an unsupported request falls back, with a log line). */
void tern_kernels_init(void);
tern_isa tern_kernels_isa(void);
const char *tern_isa_name(tern_isa isa);
/* Tests/benchmarks: force an ISA (returns false if the CPU lacks it). */
bool tern_kernels_force(tern_isa isa);

#endif
