/*
 * bench_cuda.c - `tern bench kernels --device cuda`: the ternary GEMV on the
 * GPU for each Bonsai shape (K, N), in four rows per shape and batch:
 *   tiled   the decode GEMV on the tiled layout (tc_repack_tiled, the default), the
 *           activation quantised beforehand (as the model's fused norm sites give it:
 *           no quantise launch in the timed call);
 *   tiled+q the same with its own quantise launch (the sites without a fused norm);
 *   file    the file layout (the split-K kernel; TERN_CUDA_GEMV=old), with quantise;
 *   rows    the older row repack (tc_repack), with quantise;
 * batch 1, 2, 3, 4, 6, 8, in GB/s of weight bytes read (the file's 34 B per 128) and
 * as a share of the device read ceiling measured in the same run
 * (tc_read_ceiling_gbps). Each timing rotates among copies of the matrix totalling
 * more than 256 MB, so the weights come from HBM, not from the 60 MB L2. The error
 * of sampled rows against float64 is printed and must stay below 1e-3.
 * --layout tiled|file|rows|all (default all), --batch N (one batch size). Then the
 * tensor-core GEMM (prefill, file layout) at M = 512 on the same shapes: bench_gemm_tc.
 */
#include "cli/cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(TERN_HAVE_CUDA)
#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"


static uint64_t g_s = 0x9E3779B97F4A7C15ull;
static uint64_t rnd64(void) {
    g_s ^= g_s << 13;
    g_s ^= g_s >> 7;
    g_s ^= g_s << 17;
    return g_s;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* file-layout PQ2_0 rows: fp16 scale 0.004..0.03, codes 0..2 */
static void fill(uint8_t *buf, int64_t n, int64_t k) {
    size_t rb = (size_t)k / 128 * 34;
    for (int64_t r = 0; r < n; r++)
        for (int64_t b = 0; b < k / 128; b++) {
            uint8_t *p = buf + (size_t)r * rb + (size_t)b * 34;
            uint16_t d = tern_f32_to_f16(0.004f + 0.026f * (float)(rnd64() >> 11) * 0x1p-53f);
            memcpy(p, &d, 2);
            for (int i = 0; i < 32; i++) {
                uint64_t v = rnd64();
                uint8_t c = 0;
                for (int j = 0; j < 4; j++) c |= (uint8_t)(((v >> (16 * j)) % 3) << (2 * j));
                p[2 + i] = c;
            }
        }
}

static double row_ref(const uint8_t *buf, int64_t k, int64_t r, const float *x) {
    size_t rb = (size_t)k / 128 * 34;
    double s = 0;
    for (int64_t b = 0; b < k / 128; b++) {
        const uint8_t *p = buf + (size_t)r * rb + (size_t)b * 34;
        uint16_t dh;
        memcpy(&dh, p, 2);
        double d = tern_f16_to_f32(dh);
        for (int j = 0; j < 128; j++)
            s += (double)(((p[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d * x[b * 128 + j];
    }
    return s;
}

typedef struct { int64_t k, n; const char *what; } shape;
static const shape g_shapes[] = {
    {5120, 17408, "ffn gate/up"}, {17408, 5120, "ffn down"},  {5120, 6144, "attn q / gdn"},
    {6144, 5120, "attn/gdn out"}, {5120, 10240, "gdn qkv"},   {5120, 12288, "attn q+gate"},
    {5120, 1024, "attn k / v"}, {5120, 248320, "head"},
};

/* The tensor-core GEMM (tc_gemm_tc) at M = 512 tokens on each Bonsai shape, both
 * modes: time per call (median of reps, the activation quantised once before),
 * TFLOP/s-equivalent 2*M*N*K / s, GB/s of weight bytes (read once per call from
 * HBM, shared by the token tiles through L2), max rel err of sampled outputs
 * against float64 (exact mode must stay < 1e-3). Text mode only; 0 = ok. */
static int bench_gemm_tc(int reps) {
    const size_t M = 512;
    int bad = 0;
    printf("\ntensor-core GEMM (tc_gemm_tc), M = %zu tokens\n%-6s %-14s %6s %7s %10s %9s %8s %9s\n",
           M, "mode", "site", "k", "n", "us/call", "TFLOP/s", "GB/s", "max_err");
    for (size_t s = 0; s < sizeof g_shapes / sizeof g_shapes[0] && !bad; s++) {
        const int64_t k = g_shapes[s].k, n = g_shapes[s].n;
        const size_t fb = (size_t)n * (size_t)(k / 128) * 34, yb = M * (size_t)n * 4;
        uint8_t *h = malloc(fb);
        float *x = malloc(M * (size_t)k * 4), *y = malloc(yb);
        fill(h, n, k);
        for (size_t i = 0; i < M * (size_t)k; i++) x[i] = (float)((double)(rnd64() >> 11) * 0x1p-52 - 1.0);
        uint8_t *d = tc_malloc(fb + 16);
        float *dx = tc_malloc(M * (size_t)k * 4), *dy = tc_malloc(yb);
        void *ab = tc_malloc(tc_act_bytes(M, k));
        if (!d || !dx || !dy || !ab || tc_upload(d, h, fb) || tc_upload(dx, x, M * (size_t)k * 4)) bad = 1;
        tc_mat m = {.kind = TC_TERN128, .data = d, .n = n, .k = k, .row_bytes = fb / (size_t)n};
        tc_act act = tc_act_view(ab, M, k);
        if (!bad) tc_quantize(dx, (size_t)k, &act);
        for (int mode = TC_GEMM_EXACT; mode <= TC_GEMM_INT8 && !bad; mode++) {
            double ts[64];
            int nr = reps < 64 ? reps : 64;
            if (!tc_gemm_tc(&m, &act, dy, (size_t)n, mode) || tc_sync()) { bad = 1; break; }
            for (int r = 0; r < nr; r++) {
                double t0 = now_s();
                tc_gemm_tc(&m, &act, dy, (size_t)n, mode);
                if (tc_sync()) { bad = 1; break; }
                ts[r] = now_s() - t0;
            }
            if (bad) break;
            for (int i = 1; i < nr; i++) /* median */
                for (int j = i; j > 0 && ts[j] < ts[j - 1]; j--) { double v = ts[j]; ts[j] = ts[j - 1]; ts[j - 1] = v; }
            double dt = ts[nr / 2];
            tc_download(y, dy, yb);
            double md = 0, mr = 0;
            for (int i = 0; i < 48; i++) {
                size_t b = (size_t)(rnd64() % M);
                int64_t r = (int64_t)(rnd64() % (uint64_t)n);
                double ref = row_ref(h, k, r, x + b * (size_t)k);
                double dd = fabs(ref - y[b * (size_t)n + (size_t)r]);
                if (!(dd <= md)) md = isnan(dd) ? INFINITY : dd;
                if (fabs(ref) > mr) mr = fabs(ref);
            }
            double err = mr > 0 ? md / mr : md;
            if (mode == TC_GEMM_EXACT && !(err < 1e-3)) bad = 2;
            printf("%-6s %-14s %6lld %7lld %10.1f %9.1f %8.0f %9.2e\n",
                   mode == TC_GEMM_EXACT ? "exact" : "int8", g_shapes[s].what, (long long)k,
                   (long long)n, dt * 1e6, 2.0 * (double)M * (double)n * (double)k / dt / 1e12,
                   fb / dt / 1e9, err);
        }
        tc_free(d, fb + 16); tc_free(dx, M * (size_t)k * 4); tc_free(dy, yb);
        tc_free(ab, tc_act_bytes(M, k));
        free(h); free(x); free(y);
    }
    if (bad) fprintf(stderr, "tern bench: tensor-core GEMM %s\n", bad == 2 ? "error bound broken (>= 1e-3)" : "failed (CUDA error)");
    return bad;
}

int tern_bench_kernels_cuda(int argc, char **argv) {
    bool json = false, quick = false, no_gemm = false;
    int reps = 0, only_b = 0;
    const char *lay_sel = "all";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (strcmp(argv[++i], "cuda"))
                return cli_usage_error("bench", "--device takes cpu or cuda, not '%s'", argv[i]);
        } else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--quick")) quick = true;
        else if (!strcmp(argv[i], "--no-gemm")) no_gemm = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            int64_t v;
            if (!cli_parse_i64(argv[++i], 1, 1000, &v))
                return cli_usage_error("bench", "bad --reps '%s'", argv[i]);
            reps = (int)v;
        } else if (!strcmp(argv[i], "--layout") && i + 1 < argc) {
            lay_sel = argv[++i];
            if (strcmp(lay_sel, "all") && strcmp(lay_sel, "tiled") && strcmp(lay_sel, "file") &&
                strcmp(lay_sel, "rows"))
                return cli_usage_error("bench", "--layout takes tiled, file, rows or all");
        } else if (!strcmp(argv[i], "--batch") && i + 1 < argc) {
            int64_t v;
            if (!cli_parse_i64(argv[++i], 1, 8, &v))
                return cli_usage_error("bench", "bad --batch '%s' (1..8)", argv[i]);
            only_b = (int)v;
        } else return cli_usage_error("bench", "unknown option '%s' with --device cuda", argv[i]);
    }
    if (!reps) reps = quick ? 3 : 10;
    if (tc_device_count() <= 0 || tc_init()) {
        fprintf(stderr, "tern bench: no CUDA device\n");
        return 1;
    }
    double ceil_gbps = tc_read_ceiling_gbps((size_t)1 << 30, 5);
    if (!json)
        printf("tern bench kernels --device cuda: %s, read ceiling %.0f GB/s (same run), "
               "%d round(s) over > 256 MB of copies\n"
               "%-8s %-14s %6s %7s %5s %9s %8s %7s %9s\n",
               tc_device_name(), ceil_gbps, reps, "layout", "site", "k", "n", "batch", "us/call",
               "GB/s", "ceil%", "max_err");
    else printf("{\"device\":\"%s\",\"read_ceiling_gbps\":%.1f,\"results\":[", tc_device_name(), ceil_gbps);
    const size_t batches[] = {1, 2, 3, 4, 6, 8};
    double worst = 0;
    int first = 1, failed = 0;
    for (size_t s = 0; s < sizeof g_shapes / sizeof g_shapes[0] && !failed; s++) {
        const int64_t k = g_shapes[s].k, n = g_shapes[s].n;
        const size_t fb = (size_t)n * (size_t)(k / 128) * 34; /* bytes read per call (both layouts) */
        int copies = (int)(((size_t)256 << 20) / fb) + 1;
        if (copies < 2) copies = 2;
        uint8_t *h = malloc(fb);
        fill(h, n, k);
        tc_mat *fm = calloc((size_t)copies, sizeof *fm), *rm = calloc((size_t)copies, sizeof *rm);
        tc_mat *tm = calloc((size_t)copies, sizeof *tm);
        const bool want_f = !strcmp(lay_sel, "all") || !strcmp(lay_sel, "file");
        const bool want_r = !strcmp(lay_sel, "all") || !strcmp(lay_sel, "rows");
        const bool want_t = !strcmp(lay_sel, "all") || !strcmp(lay_sel, "tiled");
        for (int c = 0; c < copies && !failed; c++) {
            uint8_t *d = tc_malloc(fb);
            if (!d || tc_upload(d, h, fb)) { failed = 1; break; }
            fm[c] = (tc_mat){.kind = TC_TERN128, .data = d, .n = n, .k = k, .row_bytes = (size_t)k / 128 * 34};
            if (want_r && tc_repack(&fm[c], &rm[c])) failed = 1;
            if (want_t && tc_repack_tiled(&fm[c], &tm[c])) failed = 1;
            if (!want_f) { /* only the file copies the timing needs */
                tc_free(d, fb);
                fm[c].data = NULL;
            }
        }
        if (failed) {
            fprintf(stderr, "tern bench: out of device memory at k %lld n %lld\n", (long long)k,
                    (long long)n);
        }
        const size_t maxb = 8;
        float *x = malloc(maxb * (size_t)k * 4), *y = malloc(maxb * (size_t)n * 4);
        for (size_t i = 0; i < maxb * (size_t)k; i++) x[i] = (float)((double)(rnd64() >> 11) * 0x1p-52 - 1.0);
        float *dx = tc_malloc(maxb * (size_t)k * 4), *dy = tc_malloc(maxb * (size_t)n * 4);
        if (!failed && (!dx || !dy || tc_upload(dx, x, maxb * (size_t)k * 4))) failed = 1;
        void *abuf = tc_malloc(tc_act_bytes(maxb, k));
        if (!abuf) failed = 1;
        /* lay 0 tiled (prequantised), 1 tiled+q, 2 file, 3 rows */
        for (int lay = 0; lay < 4 && !failed; lay++) {
            if ((lay < 2 && !want_t) || (lay == 2 && !want_f) || (lay == 3 && !want_r)) continue;
            tc_mat *mm = lay < 2 ? tm : lay == 2 ? fm : rm;
            for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
                size_t B = batches[bi], ys = (size_t)n;
                if (only_b && B != (size_t)only_b) continue;
                tc_act act = tc_act_view(abuf, B, k);
                if (lay == 0) tc_quantize(dx, (size_t)k, &act);
#define CALL(c)                                                                    \
    do {                                                                           \
        if (lay == 0) tc_matmul_multi_q(1, &mm[c], &act, NULL, 0, &dy, &ys);       \
        else tc_matmul_multi(1, &mm[c], dx, B, (size_t)k, &dy, &ys);               \
    } while (0)
                for (int c = 0; c < copies; c++) CALL(c);
                if (tc_sync()) { failed = 1; break; }
                double t0 = now_s();
                for (int r = 0; r < reps; r++)
                    for (int c = 0; c < copies; c++) CALL(c);
#undef CALL
                if (tc_sync()) { failed = 1; break; }
                double dt = (now_s() - t0) / (reps * copies);
                double gbps = fb / dt / 1e9;
                /* sampled rows vs float64 */
                tc_download(y, dy, B * (size_t)n * 4);
                double md = 0, mr = 0;
                for (size_t b = 0; b < B; b++)
                    for (int i = 0; i < 24; i++) {
                        int64_t r = (int64_t)(rnd64() % (uint64_t)n);
                        double ref = row_ref(h, k, r, x + b * (size_t)k);
                        double dd = fabs(ref - y[b * (size_t)n + (size_t)r]);
                        if (!(dd <= md)) md = isnan(dd) ? INFINITY : dd;
                        if (fabs(ref) > mr) mr = fabs(ref);
                    }
                double err = mr > 0 ? md / mr : md;
                if (!(err <= worst)) worst = err;
                const char *ln = lay == 0 ? "tiled" : lay == 1 ? "tiled+q" : lay == 2 ? "file" : "rows";
                if (json)
                    printf("%s{\"layout\":\"%s\",\"site\":\"%s\",\"k\":%lld,\"n\":%lld,\"batch\":%zu,"
                           "\"us\":%.2f,\"gbps\":%.1f,\"ceiling_share\":%.3f,\"max_rel_err\":%.3g}",
                           first ? "" : ",", ln, g_shapes[s].what, (long long)k, (long long)n, B,
                           dt * 1e6, gbps, ceil_gbps > 0 ? gbps / ceil_gbps : 0.0, err);
                else
                    printf("%-8s %-14s %6lld %7lld %5zu %9.2f %8.0f %6.1f%% %9.2e\n", ln,
                           g_shapes[s].what, (long long)k, (long long)n, B, dt * 1e6, gbps,
                           ceil_gbps > 0 ? 100 * gbps / ceil_gbps : 0.0, err);
                first = 0;
            }
        }
        for (int c = 0; c < copies; c++) {
            if (fm[c].data) tc_free((void *)fm[c].data, fb);
            if (rm[c].data) tc_free((void *)rm[c].data, tc_repacked_bytes(n, k));
            if (tm[c].data) tc_free((void *)tm[c].data, tc_tiled_bytes(n, k));
        }
        if (abuf) tc_free(abuf, tc_act_bytes(maxb, k));
        free(tm);
        tc_free(dx, maxb * (size_t)k * 4);
        tc_free(dy, maxb * (size_t)n * 4);
        free(fm); free(rm); free(h); free(x); free(y);
    }
    if (!json && !failed && !no_gemm && bench_gemm_tc(reps)) failed = 1;
    if (json) printf("],\"worst_rel_err\":%.3g}\n", worst);
    if (failed) {
        fprintf(stderr, "tern bench: CUDA error\n");
        return 1;
    }
    if (!(worst < 1e-3)) {
        fprintf(stderr, "tern bench: error bound broken: max_rel_err %.3g >= 1e-3\n", worst);
        return 1;
    }
    if (!json) printf("error bound ok: worst max_rel_err %.3g < 1e-3\n", worst);
    return 0;
}
#else
int tern_bench_kernels_cuda(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "tern bench: this build has no CUDA back-end (-DTERN_CUDA=ON)\n");
    return 1;
}
#endif
