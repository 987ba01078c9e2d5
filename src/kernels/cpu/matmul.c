/*
 * matmul.c - the driver behind kernels.h: matrix checks, activation
 * preparation (once per call, shared by every matrix of a multi call), the
 * split of output rows over the thread pool, and the Hadamard / fused-site
 * entry points. The arithmetic itself lives in the kernel table (ref.c and
 * the ISA files); this file only routes.
 */
#include "kernels/cpu/internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

tern_status tern_qmat_check(const tern_qmat *w, const char *name) {
    if (!name) name = "(matrix)";
    if (!w) return tern_fail(TERN_ERR_INVALID_ARG, "matrix %s: NULL", name);
    if (w->n < 0 || w->k <= 0)
        return tern_fail(TERN_ERR_SHAPE, "matrix %s: bad shape n=%lld k=%lld", name,
                         (long long)w->n, (long long)w->k);
    size_t be, bb;
    switch (w->type) {
    case TERN_DT_PQ2_0: case TERN_DT_Q2_0: be = TERN_QK128; bb = TERN_PQ2_0_BYTES; break;
    case TERN_DT_Q2_0_G64: be = TERN_QK64; bb = TERN_Q2_0_G64_BYTES; break;
    case TERN_DT_Q1_0: be = TERN_QK128; bb = TERN_Q1_0_BYTES; break;
    case TERN_DT_F32: be = 1; bb = 4; break;
    case TERN_DT_F16: case TERN_DT_BF16: be = 1; bb = 2; break;
    default:
        return tern_fail(TERN_ERR_UNSUPPORTED, "matrix %s: type %s has no CPU kernel", name,
                         tern_dtype_name(w->type));
    }
    if ((size_t)w->k % be)
        return tern_fail(TERN_ERR_SHAPE, "matrix %s: k=%lld is not a multiple of the %s block (%zu)",
                         name, (long long)w->k, tern_dtype_name(w->type), be);
    size_t need = (size_t)w->k / be * bb;
    if (w->row_bytes < need)
        return tern_fail(TERN_ERR_SHAPE, "matrix %s: row_bytes %zu < %zu needed for k=%lld %s",
                         name, w->row_bytes, need, (long long)w->k, tern_dtype_name(w->type));
    if (w->n > 0 && !w->data)
        return tern_fail(TERN_ERR_INVALID_ARG, "matrix %s: NULL data", name);
    if (w->layout != TERN_LAYOUT_ROWS) {
        if (w->layout != TERN_LAYOUT_R16)
            return tern_fail(TERN_ERR_INVALID_ARG, "matrix %s: unknown layout %d", name, w->layout);
        if (w->type != TERN_DT_PQ2_0 && w->type != TERN_DT_Q2_0 && w->type != TERN_DT_Q1_0)
            return tern_fail(TERN_ERR_UNSUPPORTED, "matrix %s: the 16-row layout holds PQ2_0/Q2_0/Q1_0, not %s",
                             name, tern_dtype_name(w->type));
        if (w->row_bytes != need)
            return tern_fail(TERN_ERR_SHAPE, "matrix %s: 16-row layout needs row_bytes %zu, got %zu", name,
                             need, w->row_bytes);
    }
    return TERN_OK;
}

tern_status tern_qmat_repack(const tern_qmat *w, tern_qmat *out) {
    tern_status st = tern_qmat_check(w, "repack");
    if (st) return st;
    if (w->layout != TERN_LAYOUT_ROWS ||
        (w->type != TERN_DT_PQ2_0 && w->type != TERN_DT_Q2_0 && w->type != TERN_DT_Q1_0))
        return tern_fail(TERN_ERR_UNSUPPORTED, "tern_qmat_repack: only PQ2_0/Q2_0/Q1_0 in the file layout (got %s)",
                         tern_dtype_name(w->type));
    if (tern_kernels_isa() != TERN_ISA_AVX512)
        return tern_fail(TERN_ERR_UNSUPPORTED, "tern_qmat_repack: the 16-row layout only helps the AVX-512 "
                         "kernels (active: %s)", tern_isa_name(tern_kernels_isa()));
    size_t rb = (size_t)w->k / 128 * (w->type == TERN_DT_Q1_0 ? TERN_Q1_0_BYTES : TERN_PQ2_0_BYTES);
    size_t groups = ((size_t)w->n + 15) / 16, total;
    if (!tern_mul_ok(groups * 16, rb, &total))
        return tern_fail(TERN_ERR_SHAPE, "tern_qmat_repack: matrix too large");
    /* large copies on huge pages (the GEMV streams them: measured ~5% faster cold) */
    uint8_t *buf = total >= ((size_t)4 << 20) ? tern_alloc_huge(total) : tern_alloc_aligned(total ? total : 64);
    if (!buf) return tern_fail(TERN_ERR_NOMEM, "tern_qmat_repack: out of memory for %zu bytes", total);
    tern_kern_get()->repack_r16(w, buf, 0, (int64_t)groups);
    *out = *w;
    out->data = buf;
    out->row_bytes = rb;
    out->layout = TERN_LAYOUT_R16;
    return TERN_OK;
}

void tern_qmat_free_repacked(tern_qmat *w) {
    if (!w || w->layout != TERN_LAYOUT_R16 || !w->data) return;
    size_t total = ((size_t)w->n + 15) / 16 * 16 * w->row_bytes;
    tern_free_aligned((void *)w->data, total ? total : 64);
    w->data = NULL;
}

/* ---------------------------------------------------------- scratch memory
 * One growing buffer per calling thread for prepared activations, so the token
 * loop does not allocate after the first call of each size. A thread-specific
 * key frees it when a thread that used it exits (a server's worker threads). */
static _Thread_local uint8_t *g_scratch;
static _Thread_local size_t g_scratch_size;
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static bool g_scratch_key_ok;

static void scratch_release(void *unused) {
    (void)unused;
    if (g_scratch) tern_free_aligned(g_scratch, g_scratch_size);
    g_scratch = NULL;
    g_scratch_size = 0;
}
static void scratch_key_init(void) { g_scratch_key_ok = pthread_key_create(&g_scratch_key, scratch_release) == 0; }

static void *scratch_get(size_t n) {
    if (n <= g_scratch_size) return g_scratch;
    if (g_scratch) tern_free_aligned(g_scratch, g_scratch_size);
    size_t sz = n + n / 4 + 4096;
    g_scratch = tern_alloc_aligned(sz);
    g_scratch_size = g_scratch ? sz : 0;
    pthread_once(&g_scratch_once, scratch_key_init);
    /* the value only has to be non-NULL for the destructor to run */
    if (g_scratch && g_scratch_key_ok) pthread_setspecific(g_scratch_key, g_scratch);
    return g_scratch;
}

/* ------------------------------------------------------------------ prep */
typedef struct prep_job {
    tern_act_prep_fn prep;          /* per-row prep, or */
    const tern_mm_ops *gemm;        /* batch-wide gemm prep */
    const float *x;
    size_t x_stride, act_stride, batch;
    int64_t k;
    uint8_t *act;
} prep_job;

static void prep_task(void *vctx, int task, int n_tasks) {
    prep_job *j = vctx;
    size_t b0 = j->batch * (size_t)task / (size_t)n_tasks;
    size_t b1 = j->batch * (size_t)(task + 1) / (size_t)n_tasks;
    if (j->gemm) {
        j->gemm->gemm_prep(j->x, j->x_stride, j->batch, j->k, j->act, b0, b1);
        return;
    }
    for (size_t b = b0; b < b1; b++) j->prep(j->x + b * j->x_stride, j->k, j->act + b * j->act_stride);
}

/* ------------------------------------------------------------------ rows */
#define MAX_MULTI 8

typedef struct mm_job {
    int n_mats;
    const tern_qmat *w[MAX_MULTI];
    const tern_mm_ops *ops[MAX_MULTI];
    tern_rows_fn rows[MAX_MULTI];
    const void *act[MAX_MULTI];
    size_t act_stride[MAX_MULTI];
    float *y[MAX_MULTI];
    size_t y_stride[MAX_MULTI];
    int64_t row_start[MAX_MULTI + 1];   /* prefix sums of row counts (in tiles) */
    int64_t tile;                       /* rows per unit */
    int64_t n_units;
    size_t batch;
} mm_job;

/* Units [u0, u1) of the job (row tiles, across the matrices of a multi call). */
static void mm_units(const mm_job *j, int64_t u0, int64_t u1) {
    for (int m = 0; m < j->n_mats && u0 < u1; m++) {
        int64_t s = j->row_start[m], e = j->row_start[m + 1];
        int64_t a = u0 > s ? u0 : s, b = u1 < e ? u1 : e;
        if (a >= b) continue;
        int64_t r0 = (a - s) * j->tile, r1 = (b - s) * j->tile;
        if (r1 > j->w[m]->n) r1 = j->w[m]->n;
        j->rows[m](j->w[m], j->act[m], j->act_stride[m], j->batch, j->y[m], j->y_stride[m], r0, r1);
    }
}

/* Work distribution (issue 11: a shared CPU must not collapse the pool).
 * The units are cut into nr contiguous ranges, one per thread, each in chunks
 * of `chunk` units. A range's chunks are claimed from its front by its owner
 * and from its back by the others once their own range is empty (one 64-bit
 * word per range: front and back chunk index, claimed by CAS). So on a quiet
 * machine every thread streams through its own contiguous rows (measured
 * 10-25% faster than interleaved chunks), and a thread that runs late - a
 * helper sharing its core with another process, or still waking up - only
 * does what is left: the others eat its range from the back, and nobody
 * waits for more than the one chunk it is running. Pool tasks nr..2nr-1 are
 * thieves from the start (a helper that wakes after the caller has claimed
 * every home range can still help). */
#define MM_MAX_RANGES 64
typedef struct mm_sched {
    mm_job *job;
    int nr;
    int64_t chunk;                          /* units per chunk */
    int64_t start[MM_MAX_RANGES + 1];       /* first unit of each range */
    struct { _Alignas(64) atomic_uint_least64_t fb; } r[MM_MAX_RANGES]; /* front << 32 | back (chunks) */
} mm_sched;

static inline int64_t rng_chunks(const mm_sched *s, int i) {
    return (s->start[i + 1] - s->start[i] + s->chunk - 1) / s->chunk;
}
/* Claim a chunk of range i from the front (own) or the back (steal); -1 when empty. */
static int64_t rng_claim(mm_sched *s, int i, bool back) {
    uint64_t v = atomic_load_explicit(&s->r[i].fb, memory_order_relaxed);
    for (;;) {
        uint32_t f = (uint32_t)(v >> 32), b = (uint32_t)v;
        if (f >= b) return -1;
        uint64_t nv = back ? (v - 1) : (v + ((uint64_t)1 << 32));
        if (atomic_compare_exchange_weak_explicit(&s->r[i].fb, &v, nv, memory_order_relaxed,
                                                  memory_order_relaxed))
            return back ? (int64_t)b - 1 : (int64_t)f;
    }
}
static void rng_run(mm_sched *s, int i, int64_t c) {
    int64_t u0 = s->start[i] + c * s->chunk, u1 = u0 + s->chunk;
    if (u1 > s->start[i + 1]) u1 = s->start[i + 1];
    mm_units(s->job, u0, u1);
}

static void mm_task(void *vctx, int task, int n_tasks) {
    (void)n_tasks;
    mm_sched *s = vctx;
    if (task < s->nr)
        for (int64_t c; (c = rng_claim(s, task, false)) >= 0;) rng_run(s, task, c);
    for (;;) { /* steal from the back of the range with the most left */
        int best = -1;
        int64_t most = 0;
        for (int i = 0; i < s->nr; i++) {
            uint64_t v = atomic_load_explicit(&s->r[i].fb, memory_order_relaxed);
            int64_t left = (int64_t)(uint32_t)v - (int64_t)(uint32_t)(v >> 32);
            if (left > most) { most = left; best = i; }
        }
        if (best < 0) return;
        int64_t c = rng_claim(s, best, true);
        if (c >= 0) rng_run(s, best, c);
    }
}

void tern_matmul_multi(int n_mats, const tern_qmat *const *w, const float *x, size_t batch,
                       size_t x_stride, float *const *y, const size_t *y_stride,
                       tern_pool *pool) {
    TERN_ASSERT(n_mats >= 1);
    if (batch == 0) return;
    if (n_mats > MAX_MULTI) {
        for (int m = 0; m < n_mats; m += MAX_MULTI) {
            int c = n_mats - m < MAX_MULTI ? n_mats - m : MAX_MULTI;
            tern_matmul_multi(c, w + m, x, batch, x_stride, y + m, y_stride + m, pool);
        }
        return;
    }
    const tern_kern_table *kt = tern_kern_get();
    mm_job j;
    memset(&j, 0, sizeof j);
    j.n_mats = n_mats;
    j.batch = batch;
    int64_t k = w[0]->k;
    /* Pick each matrix's path, then prepare the activation once per distinct
     * preparation (matrices of one multi call share it). */
    size_t total = 0, offs[MAX_MULTI];
    const void *key[MAX_MULTI];
    bool gemm[MAX_MULTI];
    for (int m = 0; m < n_mats; m++) {
        TERN_ASSERT(w[m]->k == k && (unsigned)w[m]->type < TERN_DT_COUNT &&
                    (w[m]->layout == TERN_LAYOUT_ROWS || w[m]->layout == TERN_LAYOUT_R16));
        const tern_mm_ops *o = w[m]->layout != TERN_LAYOUT_R16 ? &kt->mm[w[m]->type]
                               : w[m]->type == TERN_DT_Q1_0 ? &kt->mm_r16q1 : &kt->mm_r16;
        j.w[m] = w[m];
        j.ops[m] = o;
        j.y[m] = y[m];
        j.y_stride[m] = y_stride[m];
        gemm[m] = o->gemm_rows && batch >= (size_t)o->gemm_min_batch && k % o->gemm_k_align == 0;
        key[m] = gemm[m] ? (const void *)o->gemm_prep : (const void *)o->act_prep;
        offs[m] = SIZE_MAX;
        if (!key[m]) continue;
        int same = -1;
        for (int q = 0; q < m; q++)
            if (key[q] == key[m] && gemm[q] == gemm[m]) same = q;
        if (same >= 0) { offs[m] = offs[same]; j.act_stride[m] = j.act_stride[same]; continue; }
        size_t bytes;
        if (gemm[m]) {
            bytes = (o->gemm_act_bytes(k, batch) + 63) & ~(size_t)63;
            j.act_stride[m] = 0;
        } else {
            size_t st = (o->act_bytes(k) + 63) & ~(size_t)63;
            j.act_stride[m] = st;
            bytes = st * batch;
        }
        offs[m] = total;
        total += bytes;
    }
    uint8_t *scr = total ? scratch_get(total) : NULL;
    bool use_ref = total && !scr; /* out of memory: the reference needs no scratch */
    for (int m = 0; m < n_mats; m++) {
        if (use_ref || offs[m] == SIZE_MAX) {
            j.rows[m] = use_ref ? tern_ref_rows : gemm[m] ? j.ops[m]->gemm_rows : j.ops[m]->rows;
            j.act[m] = x;
            j.act_stride[m] = x_stride * sizeof(float);
            continue;
        }
        j.rows[m] = gemm[m] ? j.ops[m]->gemm_rows : j.ops[m]->rows;
        bool done = false;
        for (int q = 0; q < m; q++)
            if (offs[q] == offs[m]) done = true;
        j.act[m] = scr + offs[m];
        if (done) continue;
        prep_job pj = {gemm[m] ? NULL : j.ops[m]->act_prep, gemm[m] ? j.ops[m] : NULL, x, x_stride,
                       j.act_stride[m], batch, k, scr + offs[m]};
        int pt = batch >= 8 && pool ? tern_pool_size(pool) * 2 : 1;
        if ((size_t)pt > batch) pt = (int)batch;
        tern_pool_run(pt > 1 ? pool : NULL, prep_task, &pj, pt);
    }
    /* Split rows in tiles over the workers. */
    int64_t tile = 1;
    for (int m = 0; m < n_mats; m++)
        if (j.ops[m]->row_tile > tile) tile = j.ops[m]->row_tile;
    j.tile = tile;
    j.row_start[0] = 0;
    for (int m = 0; m < n_mats; m++) j.row_start[m + 1] = j.row_start[m] + (w[m]->n + tile - 1) / tile;
    j.n_units = j.row_start[n_mats];
    if (j.n_units == 0) return;
    int nt = tern_pool_size(pool);
    if (nt > MM_MAX_RANGES) nt = MM_MAX_RANGES;
    /* Small jobs are not worth waking workers for. */
    double work = (double)j.n_units * (double)tile * (double)k * (double)batch;
    if (nt == 1 || work < 65536.0) {
        mm_units(&j, 0, j.n_units);
        return;
    }
    mm_sched s;
    s.job = &j;
    s.nr = nt < j.n_units ? nt : (int)j.n_units;
    for (int i = 0; i <= s.nr; i++) s.start[i] = j.n_units * i / s.nr;
    /* Chunks of about 2^18 multiply-adds (a few microseconds), at least 4 per
     * range so a late thread's range can be shared. */
    int64_t per_unit = tile * k * (int64_t)batch, range = (j.n_units + s.nr - 1) / s.nr;
    int64_t chunk = ((int64_t)1 << 18) / (per_unit > 0 ? per_unit : 1);
    if (chunk > (range + 3) / 4) chunk = (range + 3) / 4;
    if (chunk < 1) chunk = 1;
    s.chunk = chunk;
    for (int i = 0; i < s.nr; i++)
        atomic_init(&s.r[i].fb, (uint64_t)0 << 32 | (uint64_t)rng_chunks(&s, i));
    tern_pool_run(pool, mm_task, &s, 2 * s.nr);
}

size_t tern_matmul_exact_batch(const tern_qmat *w) {
    const tern_kern_table *kt = tern_kern_get();
    if ((unsigned)w->type >= TERN_DT_COUNT) return 1;
    const tern_mm_ops *o = w->layout != TERN_LAYOUT_R16 ? &kt->mm[w->type]
                           : w->type == TERN_DT_Q1_0 ? &kt->mm_r16q1 : &kt->mm_r16;
    if (!o->gemm_rows || o->gemm_min_batch <= 1) return 0;
    if (w->k % o->gemm_k_align) return 0; /* never the GEMM */
    return (size_t)o->gemm_min_batch - 1;
}

void tern_matmul(const tern_qmat *w, const float *x, size_t batch, size_t x_stride, float *y,
                 size_t y_stride, tern_pool *pool) {
    tern_matmul_multi(1, &w, x, batch, x_stride, &y, &y_stride, pool);
}

/* ------------------------------------------------------- Hadamard, fused */
void tern_hadamard(float *x, size_t rows, size_t n, size_t block, const float *signs) {
    TERN_ASSERT(block >= 1 && (block & (block - 1)) == 0 && n % block == 0);
    const tern_kern_table *kt = tern_kern_get();
    for (size_t r = 0; r < rows; r++) kt->fwht(x + r * n, n, block, signs, false);
}

void tern_hadamard_inv(float *x, size_t rows, size_t n, size_t block, const float *signs) {
    TERN_ASSERT(block >= 1 && (block & (block - 1)) == 0 && n % block == 0);
    const tern_kern_table *kt = tern_kern_get();
    for (size_t r = 0; r < rows; r++) kt->fwht(x + r * n, n, block, signs, true);
}

void tern_add_rmsnorm_hadamard(float *r, const float *d, const float *gain, float eps,
                               float *normed, float *rotated, size_t rows, size_t n,
                               size_t block, const float *signs) {
    TERN_ASSERT(!signs || (block >= 1 && (block & (block - 1)) == 0 && n % block == 0));
    const tern_kern_table *kt = tern_kern_get();
    for (size_t i = 0; i < rows; i++)
        kt->addnorm(r + i * n, d ? d + i * n : NULL, gain, eps, normed ? normed + i * n : NULL,
                    rotated ? rotated + i * n : NULL, n, block, signs);
}

void tern_swiglu_hadamard(const float *gate, const float *up, float *out, size_t rows, size_t n,
                          size_t block, const float *signs) {
    TERN_ASSERT(!signs || (block >= 1 && (block & (block - 1)) == 0 && n % block == 0));
    const tern_kern_table *kt = tern_kern_get();
    for (size_t i = 0; i < rows; i++)
        kt->swiglu(gate + i * n, up + i * n, out + i * n, n, block, signs);
}
