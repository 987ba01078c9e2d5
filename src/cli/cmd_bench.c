/*
 * cmd_bench.c - `tern bench kernels` (this file), `tern bench model`
 * (tern_bench_model, in bench_model.c) and `tern bench gdn` (bench_gdn.c).
 *
 * bench kernels measures, in one run:
 *   - the machine's memory read ceiling (GB/s): tern_read_ceiling_gbps() on a
 *     2 GiB buffer (8x the 260 MB L3 of the reference machine), widest loads,
 *     with and without prefetch, 1..T threads, best of several passes;
 *   - ternary GEMV (batch 1) and GEMM (batch 128; --batch picks the sizes) on the
 *     Bonsai shapes and mlx_ternary's shapes, PQ2_0 weights in the file layout and
 *     (AVX-512) the 16-row layout, 1 and 2 threads: interleaved medians
 *     (every configuration runs once per round, rounds repeat), each call on
 *     another window of a 768 MB weight arena so no call is served from the L3; GB/s = weight bytes / time, and its ratio to the ceiling;
 *     GFLOP/s = 2*batch*K*N / time;
 *     Multi-thread calls are timed with the pool awake (a no-op run first),
 *     as in a decode loop where kernels follow each other;
 *   - the Hadamard transform and the fused sites (GB/s = bytes read+written);
 *   - the error bound: max|y - ref| / max|ref| against float64 of the
 *     dequantized matrix on sampled rows of every measured product; a value
 *     >= 1e-3 fails the command (exit 1).
 * --json prints one JSON object per measurement (one per line) with op, K, N,
 * batch, threads, ms, gbps, gflops, ceiling_gbps, max_rel_err (+ ratio, isa).
 */
#include "cli/cli.h"
#include "core/blocks.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void bench_kernels_usage(FILE *f) {
    fprintf(f,
            "usage: tern bench kernels [--json] [--threads N] [--quick] [--reps N] [--batch B,...]\n"
            "  Kernel throughput on the Bonsai and mlx_ternary shapes with the memory\n"
            "  read ceiling measured in the same run. Exit 1 if an error bound breaks.\n"
            "  --threads N   only N threads (default: 1 and 2)\n"
            "  --quick       fewer rounds, smaller ceiling buffer, no head-shape GEMM\n"
            "  --reps N      rounds of the interleaved loop (default 9, quick 5)\n"
            "  --only X      only gemv (batch 1), gemm (batch > 1) or transform\n"
            "  --batch LIST  batch sizes of the products (default 1,128; 1..128), each in\n"
            "                the file layout (gemv, gemm) and, on AVX-512, the 16-row layout\n"
            "                of tern_qmat_repack (gemv_r16, gemm_r16)\n"
            "  --hot         no weight rotation (small shapes then run from cache:\n"
            "                the kernels' compute-bound speed, not a memory figure)\n"
            "  TERN_ISA=scalar|avx2|avx512 selects the kernels (default: best; tern --help)\n"
            "  --device cuda  the GPU kernels instead (GEMV per layout and batch, then the\n"
            "                tensor-core GEMM, then the decode-step ops: norm sites, GDN\n"
            "                step, SwiGLU, Hadamard, attention, current vs fallback\n"
            "                kernels, plain launches and graph replay; decode attention at\n"
            "                positions 1023 and 32767, f16 and q8_0, GQA vs old kernels;\n"
            "                then the GDN prefill\n"
            "                call, scan vs walk), with [--quick] [--reps N] [--json]\n"
            "                [--layout tiled|file|all] [--batch 1..8] [--no-gemm] (no\n"
            "                GEMM, no ops, no GDN) [--ops] (only the ops) [--gdn] (only GDN)\n"
            "                [--gemm] (only the GEMM: M 16, 32, 64, 512, split-K and unsplit;\n"
            "                on sm_90a the wgmma GEMM and its 2-CTA cluster form, wgmma2)\n"
            "                [--gemm-m M] [--gemm-shape SITE] (with --gemm: one M, 1..512; one site, e.g. 'ffn down')\n"
            "usage: tern bench model ...   (see tern bench model --help)\n"
            "usage: tern bench gdn ...     (the CPU GDN scans; see tern bench gdn --help)\n"
            "usage: tern bench sampler ... (choosing a token on the host; see tern bench sampler --help)\n");
}

/* ----------------------------------------------------------- test weights */
static uint64_t g_rng = 0x243F6A8885A308D3ull;
static inline uint64_t rnd(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return g_rng;
}
static float rnd_normal(void) {
    double u1 = ((double)(rnd() >> 11) + 1.0) / 9007199254740993.0, u2 = (double)(rnd() >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* PQ2_0 rows: fp16 scale in [0.004, 0.03], codes uniform over {0,1,2}. */
static void fill_pq2(uint8_t *buf, int64_t n, int64_t k) {
    static uint8_t valid[81];
    int nv = 0;
    for (int b = 0; b < 256; b++)
        if (!(b & (b >> 1) & 0x55)) valid[nv++] = (uint8_t)b;
    size_t nb = (size_t)n * (size_t)(k / 128);
    for (size_t i = 0; i < nb; i++) {
        uint8_t *blk = buf + i * TERN_PQ2_0_BYTES;
        uint16_t d = tern_f32_to_f16(0.004f + 0.026f * (float)((rnd() >> 40) & 0xffff) / 65536.0f);
        memcpy(blk, &d, 2);
        for (int j = 0; j < 32; j += 8) {
            uint64_t r = rnd();
            for (int q = 0; q < 8; q++) blk[TERN_BLOCK_QS + j + q] = valid[((r >> (8 * q)) & 0xff) % 81];
        }
    }
}

/* max |y - ref| / max |ref| over sampled rows, ref in float64 from the bytes. */
static double sample_err(const tern_qmat *w, const float *x, size_t batch, const float *y) {
    double maxd = 0, maxr = 0;
    int64_t nrows = w->n < 48 ? w->n : 48;
    size_t nb = batch < 4 ? batch : 4;
    for (int64_t s = 0; s < nrows; s++) {
        int64_t r = s < 16 ? s : (int64_t)(rnd() % (uint64_t)w->n);
        const uint8_t *row = w->data + (size_t)r * w->row_bytes;
        for (size_t bi = 0; bi < nb; bi++) {
            size_t b = bi == nb - 1 ? batch - 1 : bi;
            double acc = 0;
            for (int64_t j = 0; j < w->k; j++) {
                int code;
                uint16_t d;
                if (w->layout == TERN_LAYOUT_R16) { /* kernels.h: 544-byte blocks of 16 rows */
                    int L = (int)(r % 16), e = (int)(j % 128);
                    const uint8_t *blk = w->data + (size_t)(r / 16) * 16 * w->row_bytes + (size_t)(j / 128) * TERN_R16_BLOCK_BYTES;
                    d = tern_rd16(blk + 2 * L);
                    code = (blk[TERN_R16_SCALES + 64 * (e / 16) + 4 * L + e % 4] >> (2 * ((e % 16) / 4))) & 3;
                } else {
                    const uint8_t *blk = row + (size_t)(j / 128) * TERN_PQ2_0_BYTES;
                    d = tern_rd16(blk);
                    code = (blk[TERN_BLOCK_QS + (j % 128) / 4] >> (2 * (j % 4))) & 3;
                }
                acc += (double)(code - 1) * tern_f16_to_f32(d) * x[b * (size_t)w->k + (size_t)j];
            }
            double dlt = fabs(acc - y[b * (size_t)w->n + (size_t)r]);
            if (!(dlt <= maxd)) maxd = dlt;
            if (fabs(acc) > maxr) maxr = fabs(acc);
        }
    }
    return maxr > 0 ? maxd / maxr : maxd;
}

/* ---------------------------------------------------------- measurements */
typedef struct shape { const char *name; int64_t k, n; bool bonsai; } shape;
static const shape g_shapes[] = {
    {"gate/up", 5120, 17408, true},  {"down", 17408, 5120, true},   {"z", 5120, 6144, true},
    {"o/out", 6144, 5120, true},     {"head", 5120, 248320, true},
    {"mlx gate", 2560, 640, false},  {"mlx down", 640, 2560, false}, {"mlx in_proj_a", 2048, 16, false},
    {"mlx mlp.gate", 2048, 6144, false},
};
#define N_SHAPES (sizeof g_shapes / sizeof g_shapes[0])

typedef struct config {
    int shape, batch, threads;
    int layout;           /* TERN_LAYOUT_ROWS, or TERN_LAYOUT_R16 (gemv_r16 rows) */
    int n_copies;
    uint8_t **copies;     /* shared per shape */
    double *times;
    int n_times;
    double err;
} config;

static void noop_task(void *ctx, int t, int n) {
    (void)ctx;
    (void)t;
    (void)n;
}


static void emit(bool json, const char *op, const char *name, int64_t k, int64_t n, int batch, int threads,
                 double ms, double gbps, double gflops, double ceiling, double err) {
    if (json) {
        printf("{\"op\":\"%s\",\"shape\":\"%s\",\"K\":%lld,\"N\":%lld,\"batch\":%d,\"threads\":%d,"
               "\"ms\":%.4f,\"gbps\":%.3f,\"gflops\":%.2f,\"ceiling_gbps\":%.3f,\"ratio\":%.3f,"
               "\"max_rel_err\":%.3g,\"isa\":\"%s\"}\n",
               op, name, (long long)k, (long long)n, batch, threads, ms, gbps, gflops, ceiling,
               ceiling > 0 ? gbps / ceiling : 0.0, err, tern_isa_name(tern_kernels_isa()));
    } else {
        printf("%-10s %-14s K=%-6lld N=%-7lld b=%-4d t=%d  %9.3f ms  %7.2f GB/s (%5.1f%% of %5.1f)  %8.2f GFLOP/s  err %.2g\n",
               op, name, (long long)k, (long long)n, batch, threads, ms, gbps,
               ceiling > 0 ? 100.0 * gbps / ceiling : 0.0, ceiling, gflops, err);
    }
    fflush(stdout);
}

static int bench_kernels(int argc, char **argv) {
    bool json = false, quick = false, hot = false;
    const char *only = NULL;
    int only_threads = 0, reps = 0;
    int batches[16] = {1, 128}, n_batches = 2;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) { bench_kernels_usage(stdout); return 0; }
        else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--hot")) hot = true;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
            if (strcmp(only, "gemv") && strcmp(only, "gemm") && strcmp(only, "transform"))
                return cli_usage_error("bench", "--only takes gemv, gemm or transform, not '%s'", only);
        }
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            int64_t v;
            if (!cli_parse_i64(argv[++i], 1, 256, &v)) return cli_usage_error("bench", "bad --threads '%s'", argv[i]);
            only_threads = (int)v;
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            const char *v = argv[++i];
            n_batches = 0;
            for (const char *q = v; *q;) {
                char *end;
                long b = strtol(q, &end, 10);
                if (end == q || b < 1 || b > 128 || n_batches == 16 || (*end && *end != ','))
                    return cli_usage_error("bench", "bad --batch '%s' (up to 16 sizes of 1..128, comma-separated)", v);
                batches[n_batches++] = (int)b;
                q = *end ? end + 1 : end;
            }
            if (!n_batches) return cli_usage_error("bench", "bad --batch '%s'", v);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            int64_t v;
            if (!cli_parse_i64(argv[++i], 1, 1000, &v)) return cli_usage_error("bench", "bad --reps '%s'", argv[i]);
            reps = (int)v;
        } else return cli_usage_error("bench", "unknown option '%s'", argv[i]);
    }
    if (!reps) reps = quick ? 5 : 9;
    tern_kernels_init();
    int thr[2] = {1, 2}, n_thr = 2;
    if (only_threads) { thr[0] = only_threads; n_thr = 1; }
    int max_t = thr[n_thr - 1];
    tern_pool *pool = NULL;
    if (tern_pool_new(max_t, &pool) != TERN_OK) return cli_lib_error("bench", TERN_ERR_INTERNAL);
    tern_pool_set_adaptive(pool, false); /* the kernels' speed on every thread, not the pool's policy */
    if (!json)
        printf("tern bench kernels: isa %s, %d round(s), interleaved medians\n",
               tern_isa_name(tern_kernels_isa()), reps);

    /* Read ceiling, per thread count. */
    size_t bw_n = quick ? ((size_t)512 << 20) : ((size_t)2 << 30);
    double ceiling[257] = {0};
    for (int ti = 0; ti < n_thr; ti++) {
        ceiling[thr[ti]] = tern_read_ceiling_gbps(pool, thr[ti], bw_n, quick ? 3 : 5);
        if (!(ceiling[thr[ti]] > 0))
            return cli_usage_error("bench", "cannot allocate %zu bytes for the bandwidth buffer", bw_n);
        emit(json, "read_bw", quick ? "512MiB" : "2GiB", 0, 0, 0, thr[ti], (double)bw_n / ceiling[thr[ti]] / 1e6,
             ceiling[thr[ti]], 0, ceiling[thr[ti]], 0);
    }

    /* Weights: one 768 MB arena of random PQ2_0 blocks (3x the L3); each shape
     * rotates over as many disjoint windows of it as fit, so consecutive calls
     * on a shape never find their weights in the cache. */
    bool products = !only || strcmp(only, "transform");
    size_t arena_blocks = (products ? ((size_t)768 << 20) : 4 * ((size_t)1 << 20)) / TERN_PQ2_0_BYTES, arena_n = arena_blocks * TERN_PQ2_0_BYTES;
    uint8_t *arena = tern_alloc_aligned(arena_n);
    if (!arena) return cli_usage_error("bench", "out of memory for the %zu-byte weight arena", arena_n);
    fill_pq2(arena, (int64_t)arena_blocks, 128);
    uint8_t **copies[N_SHAPES];
    int n_copies[N_SHAPES];
    size_t wbytes[N_SHAPES];
    for (size_t s = 0; s < N_SHAPES; s++) {
        wbytes[s] = (size_t)g_shapes[s].n * (size_t)(g_shapes[s].k / 128) * TERN_PQ2_0_BYTES;
        n_copies[s] = hot || !products ? 1 : (int)(arena_n / wbytes[s]);
        if (n_copies[s] > 4096) n_copies[s] = 4096;
        copies[s] = calloc((size_t)n_copies[s], sizeof(uint8_t *));
        for (int c = 0; c < n_copies[s] && products; c++) copies[s][c] = arena + (size_t)c * wbytes[s];
    }
    /* Activations: batch 128 x max K. */
    size_t xmax = (size_t)128 * 17408, ymax = products ? (size_t)128 * 248320 : 16;
    float *x = tern_alloc_aligned(xmax * sizeof(float));
    float *y = tern_alloc_aligned(ymax * sizeof(float));
    if (!x || !y) return cli_usage_error("bench", "out of memory for activations");
    for (size_t i = 0; i < xmax; i++) x[i] = rnd_normal();

    /* Configurations. */
    /* each batch size in the file layout and (AVX-512 only) in the 16-row layout
     * of tern_qmat_repack, which reads the same bytes per weight */
    config *cfg = calloc(N_SHAPES * 16 * 2 * 2, sizeof *cfg);
    if (!cfg) return cli_usage_error("bench", "out of memory");
    int nc = 0;
    bool r16_ok = tern_kernels_isa() == TERN_ISA_AVX512;
    for (size_t s = 0; s < N_SHAPES; s++)
        for (int bi = 0; bi < n_batches; bi++)
            for (int li = 0; li < 2; li++)
                for (int ti = 0; ti < n_thr; ti++) {
                    int b = batches[bi];
                    if (li == 1 && !r16_ok) continue;
                    if (quick && b > 16 && g_shapes[s].n > 100000) continue;
                    if (only && (!strcmp(only, "transform") || (b == 1) != !strcmp(only, "gemv"))) continue;
                    config *c = &cfg[nc++];
                    memset(c, 0, sizeof *c);
                    c->shape = (int)s; c->batch = b; c->threads = thr[ti];
                    c->layout = li == 1 ? TERN_LAYOUT_R16 : TERN_LAYOUT_ROWS;
                    c->times = calloc((size_t)reps, sizeof(double));
                }

    /* Interleaved rounds; the first round of each config also checks the error. */
    int rot = 0;
    double worst = 0;
    for (int r = 0; r < reps; r++) {
        for (int ci = 0; ci < nc; ci++) {
            config *c = &cfg[ci];
            const shape *sh = &g_shapes[c->shape];
            if (c->batch > 16 && r >= (quick ? 2 : 3) && sh->n > 100000) continue; /* head GEMM: ~1 s each */
            /* the arena's random blocks read as a 16-row-layout matrix are just
             * another random matrix (all scales finite; see sample_err) */
            tern_qmat w = {TERN_DT_PQ2_0, sh->n, sh->k, copies[c->shape][rot++ % n_copies[c->shape]],
                           (size_t)(sh->k / 128) * TERN_PQ2_0_BYTES, c->layout};
            /* wake the workers first: in a decode loop kernels follow each other
             * and the pool is awake; here other configurations ran in between */
            if (c->threads > 1) tern_pool_run(pool, noop_task, NULL, c->threads);
            double t0 = tern_now_s();
            tern_matmul(&w, x, (size_t)c->batch, (size_t)sh->k, y, (size_t)sh->n, c->threads > 1 ? pool : NULL);
            c->times[c->n_times++] = tern_now_s() - t0;
            if (r == 0) {
                c->err = sample_err(&w, x, (size_t)c->batch, y);
                if (!(c->err <= worst)) worst = c->err;
            }
        }
    }
    for (int ci = 0; ci < nc; ci++) {
        config *c = &cfg[ci];
        const shape *sh = &g_shapes[c->shape];
        double t = cli_median(c->times, c->n_times);
        double gb = (double)wbytes[c->shape] / t / 1e9;
        double gf = 2.0 * c->batch * (double)sh->k * (double)sh->n / t / 1e9;
        bool r16 = c->layout == TERN_LAYOUT_R16;
        emit(json, c->batch > 1 ? (r16 ? "gemm_r16" : "gemm") : r16 ? "gemv_r16" : "gemv", sh->name, sh->k, sh->n, c->batch, c->threads, t * 1e3, gb, gf,
             ceiling[c->threads], c->err);
        free(c->times);
    }

    /* Hadamard and fused sites, one row (decode), single thread. */
    int64_t hk[3] = {5120, 6144, 17408};
    float *sg = tern_alloc_aligned(17408 * sizeof(float));
    float *a = tern_alloc_aligned(17408 * 4 * sizeof(float)), *bb = a + 17408, *cc = bb + 17408, *dd = cc + 17408;
    for (int i = 0; i < 17408; i++) { sg[i] = (rnd() & 1) ? 1.0f : -1.0f; a[i] = rnd_normal(); bb[i] = rnd_normal(); }
    float *gain = tern_alloc_aligned(17408 * sizeof(float));
    for (int i = 0; i < 17408; i++) gain[i] = 1.0f + 0.1f * rnd_normal();
    int hreps = only && strcmp(only, "transform") ? 0 : quick ? 201 : 1001;
    double *ht = calloc((size_t)hreps + 1, sizeof(double));
    for (int hi = 0; hi < 3 && hreps > 0; hi++) {
        size_t n = (size_t)hk[hi];
        for (int op = 0; op < 3; op++) {
            for (int r = 0; r < hreps; r++) {
                double t0 = tern_now_s();
                if (op == 0) tern_hadamard(a, 1, n, 1024, sg);
                else if (op == 1) tern_add_rmsnorm_hadamard(a, bb, gain, 1e-6f, cc, dd, 1, n, 1024, sg);
                else tern_swiglu_hadamard(a, bb, cc, 1, n, 1024, sg);
                ht[r] = tern_now_s() - t0;
                if (op == 1) for (size_t i = 0; i < n; i++) a[i] = cc[i]; /* keep values bounded */
            }
            double t = cli_median(ht, hreps);
            /* bytes: hadamard r+w n; addnorm r: 2n + gain, w: r, normed, rotated; swiglu r 2n, w n */
            double bytes = 4.0 * (double)n * (op == 0 ? 2 : op == 1 ? 6 : 3);
            const char *ops[3] = {"hadamard", "add_rmsnorm_had", "swiglu_had"};
            emit(json, ops[op], "1 row", (int64_t)n, 0, 1, 1, t * 1e3, bytes / t / 1e9, 0, ceiling[thr[0]], 0);
        }
    }
    free(ht);
    tern_free_aligned(sg, 17408 * sizeof(float));
    tern_free_aligned(a, 17408 * 4 * sizeof(float));
    tern_free_aligned(gain, 17408 * sizeof(float));
    for (size_t s = 0; s < N_SHAPES; s++) free(copies[s]);
    free(cfg);
    tern_free_aligned(arena, arena_n);
    tern_free_aligned(x, xmax * sizeof(float));
    tern_free_aligned(y, ymax * sizeof(float));
    tern_pool_free(pool);
    if (!(worst < 1e-3)) {
        fprintf(stderr, "tern bench: error bound broken: max_rel_err %.3g >= 1e-3\n", worst);
        return 1;
    }
    if (!json) printf("error bound ok: worst max_rel_err %.3g < 1e-3\n", worst);
    return 0;
}

int tern_cmd_bench(int argc, char **argv) {
    if (argc < 2 || cli_is_help(argv[1])) {
        bench_kernels_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "kernels")) {
        for (int i = 2; i + 1 < argc; i++) /* --device cuda: the GPU kernels (bench_cuda.c) */
            if (!strcmp(argv[i], "--device") && !strcmp(argv[i + 1], "cuda"))
                return tern_bench_kernels_cuda(argc - 1, argv + 1);
        return bench_kernels(argc - 1, argv + 1);
    }
    if (!strcmp(argv[1], "model")) return tern_bench_model(argc - 1, argv + 1);
    if (!strcmp(argv[1], "gdn")) return tern_bench_gdn(argc - 1, argv + 1);
    if (!strcmp(argv[1], "sampler")) return tern_bench_sampler(argc - 1, argv + 1);
    return cli_usage_error("bench", "unknown benchmark '%s' (kernels, model, gdn or sampler)", argv[1]);
}
