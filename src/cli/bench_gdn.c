/*
 * bench_gdn.c - `tern bench gdn`: the CPU GDN call (kernels.h tern_gdn: conv + SiLU,
 * L2 norms, delta-rule recurrence, gated norm) by its two scans, the token walk and
 * the block scan, on the value-head shapes of the embedded model (8 heads) and of
 * Bonsai 27B (48), dk = dv = 128, 1 thread.
 *
 *   call:  one tern_gdn_with call of R rows per scan, R = 2..512, best of --reps
 *          interleaved pairs (walk, blocks), and the per-token-head time;
 *   heads: the per-head loops alone (no conv / L2 norms) on 64 rows of the 27B
 *          shape, for every ISA level this machine has.
 * The correctness check: the two scans' outputs of every timed call agree within
 * 1e-3 of max|out| (test_kernels_gdn bounds each against float64 at 1e-4); a
 * larger difference fails the command (exit 1). Moved here from test_kernels_gdn
 * (where TERN_GDN_BENCH=1 printed it); docs/performance.md has the measurement.
 */
#include "cli/cli.h"
#include "kernels/cpu/internal.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static float srand1(float s) { return (float)((2.0 * urand() - 1.0) * s); }

/* One call's inputs (rows T, heads nk/nv, dk = dv = D, conv width 4), decays mixed
 * per head (weak ~0.99, strong down to e^-40 per token), a nonempty incoming state. */
typedef struct {
    int T, nk, nv, D, C, K;
    float *qkv, *z, *a, *b, *conv_w, *ssm_a, *dt_bias, *norm, *conv_state, *state, *pending;
    float *cs, *st, *pe, *work, *out; /* per-call copies and outputs */
} gdn_in;

static float *falloc(size_t n) { return malloc(sizeof(float) * (n ? n : 1)); }

static bool gdn_in_new(gdn_in *in, int T, int nk, int nv, int D) {
    memset(in, 0, sizeof *in);
    in->T = T, in->nk = nk, in->nv = nv, in->D = D, in->K = 4;
    in->C = 2 * nk * D + nv * D;
    const size_t C = (size_t)in->C, K = (size_t)in->K, st = (size_t)nv * D * D, pe = (size_t)nv * (1 + 2 * D);
    in->qkv = falloc((size_t)T * C), in->z = falloc((size_t)T * nv * D);
    in->a = falloc((size_t)T * nv), in->b = falloc((size_t)T * nv);
    in->conv_w = falloc(C * K), in->ssm_a = falloc(nv), in->dt_bias = falloc(nv), in->norm = falloc(D);
    in->conv_state = falloc((K - 1) * C), in->state = falloc(st), in->pending = falloc(pe);
    in->cs = falloc((K - 1) * C), in->st = falloc(st), in->pe = falloc(pe);
    in->work = falloc((size_t)T * C), in->out = falloc((size_t)T * nv * D);
    if (!in->qkv || !in->z || !in->a || !in->b || !in->conv_w || !in->ssm_a || !in->dt_bias ||
        !in->norm || !in->conv_state || !in->state || !in->pending || !in->cs || !in->st ||
        !in->pe || !in->work || !in->out)
        return false;
    for (size_t i = 0; i < (size_t)T * C; i++) in->qkv[i] = srand1(1.0f);
    for (size_t i = 0; i < (size_t)T * nv * D; i++) in->z[i] = srand1(6.0f);
    for (size_t i = 0; i < (size_t)T * nv; i++) in->a[i] = srand1(2.0f), in->b[i] = srand1(3.0f);
    for (size_t i = 0; i < C * K; i++) in->conv_w[i] = srand1(0.8f);
    for (int p = 0; p < nv; p++) {
        in->ssm_a[p] = p % 2 ? -(float)exp(0.5 + 2.8 * urand()) : -(float)exp(-5.0 + 2.0 * urand());
        in->dt_bias[p] = srand1(1.0f);
    }
    for (int j = 0; j < D; j++) in->norm[j] = 1.0f + srand1(0.3f);
    for (size_t i = 0; i < (K - 1) * C; i++) in->conv_state[i] = srand1(1.0f);
    for (size_t i = 0; i < st; i++) in->state[i] = srand1(0.5f);
    for (int p = 0; p < nv; p++) {
        float *q = in->pending + (size_t)p * (1 + 2 * D);
        q[0] = 0.3f + 0.7f * (float)urand();
        for (int i = 1; i < 1 + 2 * D; i++) q[i] = srand1(0.3f);
    }
    return true;
}

static void gdn_in_free(gdn_in *in) {
    float *all[] = {in->qkv, in->z, in->a, in->b, in->conv_w, in->ssm_a, in->dt_bias, in->norm,
                    in->conv_state, in->state, in->pending, in->cs, in->st, in->pe, in->work, in->out};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

/* The state copies back to the incoming state, and the call's arguments. */
static tern_gdn_args gdn_args(gdn_in *in, int rows) {
    memcpy(in->st, in->state, sizeof(float) * in->nv * in->D * in->D);
    memcpy(in->pe, in->pending, sizeof(float) * in->nv * (1 + 2 * in->D));
    memcpy(in->cs, in->conv_state, sizeof(float) * (in->K - 1) * in->C);
    tern_gdn_args a = {.qkv = in->qkv, .z = in->z, .a = in->a, .b = in->b, .conv_w = in->conv_w,
                       .ssm_a = in->ssm_a, .dt_bias = in->dt_bias, .norm = in->norm,
                       .conv_state = in->cs, .state = in->st, .pending = in->pe, .out = in->out,
                       .work = in->work, .rows = rows, .n_k = in->nk, .n_v = in->nv, .dk = in->D,
                       .dv = in->D, .conv_k = in->K, .v_tiled = true, .eps = 1e-6f};
    return a;
}

static void usage(FILE *f) {
    fprintf(f, "usage: tern bench gdn [--json] [--reps N] [--quick]\n"
               "  The CPU GDN call by its two scans (token walk, block scan) on the embedded\n"
               "  model's and Bonsai 27B's head shapes, 1 thread, best of N interleaved pairs\n"
               "  (default 7, quick 3: rows 8, 64), then the per-head loops alone for every\n"
               "  ISA level here. Exit 1 if the scans' outputs differ by more than 1e-3.\n"
               "  TERN_ISA (tern --help) picks the level of the whole-call figures.\n");
}

int tern_bench_gdn(int argc, char **argv) {
    bool json = false, quick = false;
    int64_t reps = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--quick")) quick = true;
        else if (!strcmp(a, "--reps")) {
            if (i + 1 >= argc || !cli_parse_i64(argv[++i], 1, 1000, &reps))
                return cli_usage_error("bench gdn", "--reps takes 1..1000");
        } else return cli_usage_error("bench gdn", "unknown option '%s'", a);
    }
    if (!reps) reps = quick ? 3 : 7;
    tern_kernels_init();
    const tern_isa isa0 = tern_kernels_isa();
    const struct { const char *name; int nk, nv; } models[] = {{"embedded", 4, 8}, {"27B", 16, 48}};
    const int all_rows[] = {2, 4, 8, 16, 32, 64, 128, 512}, quick_rows[] = {8, 64};
    const int *rows = quick ? quick_rows : all_rows;
    const int n_rows = quick ? 2 : 8;
    double worst = 0;
    int rc = 0;
    if (!json) printf("tern bench gdn, isa %s, 1 thread, best of %d\n", tern_isa_name(isa0), (int)reps);
    for (int m = 0; m < 2 && !rc; m++) {
        gdn_in in;
        if (!gdn_in_new(&in, rows[n_rows - 1], models[m].nk, models[m].nv, 128)) {
            gdn_in_free(&in);
            fprintf(stderr, "tern bench gdn: out of memory\n");
            return 1;
        }
        const size_t on = (size_t)rows[n_rows - 1] * in.nv * in.D;
        float *walk_out = falloc(on);
        for (int r = 0; r < n_rows && walk_out; r++) {
            double best[2] = {1e9, 1e9};
            for (int rep = 0; rep < reps; rep++)
                for (int v = 0; v < 2; v++) { /* interleaved: walk, blocks */
                    tern_gdn_args a = gdn_args(&in, rows[r]);
                    double t0 = tern_now_s();
                    tern_gdn_with(&a, v ? TERN_GDN_BLOCKS : TERN_GDN_WALK, NULL);
                    double t = tern_now_s() - t0;
                    if (t < best[v]) best[v] = t;
                    if (!v) memcpy(walk_out, in.out, sizeof(float) * rows[r] * in.nv * in.D);
                }
            double e = 0, mx = 0;
            for (size_t i = 0; i < (size_t)rows[r] * in.nv * in.D; i++) {
                double d = fabs((double)in.out[i] - walk_out[i]);
                if (!(d <= e)) e = d; /* NaN-sticky */
                if (fabs(walk_out[i]) > mx) mx = fabs(walk_out[i]);
            }
            double rel = mx > 0 ? e / mx : e;
            if (!(rel <= worst)) worst = rel;
            double per_w = best[0] * 1e6 / rows[r] / in.nv, per_b = best[1] * 1e6 / rows[r] / in.nv;
            if (json)
                printf("{\"op\":\"gdn_call\",\"model\":\"%s\",\"isa\":\"%s\",\"rows\":%d,\"heads\":%d,"
                       "\"walk_us\":%.2f,\"blocks_us\":%.2f,\"walk_us_per_token_head\":%.3f,"
                       "\"blocks_us_per_token_head\":%.3f,\"max_rel_diff\":%.3g}\n",
                       models[m].name, tern_isa_name(isa0), rows[r], in.nv, best[0] * 1e6,
                       best[1] * 1e6, per_w, per_b, rel);
            else
                printf("  %-8s (nv %2d) rows %4d: walk %9.1f us, blocks %9.1f us (%.2fx), "
                       "%.2f / %.2f us per token-head, diff %.2g\n",
                       models[m].name, in.nv, rows[r], best[0] * 1e6, best[1] * 1e6,
                       best[0] / best[1], per_w, per_b, rel);
        }
        if (!walk_out) rc = 1;
        free(walk_out);
        gdn_in_free(&in);
    }
    /* the per-head loops alone on work rows prepared once (conv + L2 norms) */
    const int hr = 64;
    gdn_in in;
    memset(&in, 0, sizeof in);
    float *work0 = NULL;
    if (!rc && gdn_in_new(&in, hr, 16, 48, 128) && (work0 = falloc((size_t)hr * in.C))) {
        tern_gdn_args a = gdn_args(&in, hr);
        tern_gdn_with(&a, TERN_GDN_WALK, NULL);
        memcpy(work0, in.work, sizeof(float) * hr * in.C);
        for (int i = 0; i < TERN_ISA_COUNT; i++) {
            if (!tern_kernels_force((tern_isa)i)) continue;
            const tern_gdn_head_fn walk = tern_kern_get()->gdn_head, blocks = tern_kern_get()->gdn_blocks;
            double bt[2] = {1e9, 1e9};
            for (int rep = 0; rep < reps + 2; rep++)
                for (int k = 0; k < 2; k++) {
                    a = gdn_args(&in, hr);
                    memcpy(in.work, work0, sizeof(float) * hr * in.C);
                    double t0 = tern_now_s();
                    for (int p = 0; p < in.nv; p++) (k ? blocks : walk)(&a, in.C, p);
                    double t = tern_now_s() - t0;
                    if (t < bt[k]) bt[k] = t;
                }
            double pw = bt[0] * 1e6 / hr / in.nv, pb = bt[1] * 1e6 / hr / in.nv;
            if (json)
                printf("{\"op\":\"gdn_heads\",\"isa\":\"%s\",\"rows\":%d,\"heads\":%d,"
                       "\"walk_us_per_token_head\":%.3f,\"blocks_us_per_token_head\":%.3f}\n",
                       tern_isa_name((tern_isa)i), hr, in.nv, pw, pb);
            else
                printf("  heads only, %-6s 48 heads x %d rows: walk %.2f, blocks %.2f us per "
                       "token-head (%.2fx)\n", tern_isa_name((tern_isa)i), hr, pw, pb, pw / pb);
        }
        tern_kernels_force(isa0);
    } else if (!rc) {
        fprintf(stderr, "tern bench gdn: out of memory\n");
        rc = 1;
    }
    free(work0);
    gdn_in_free(&in);
    if (!rc && !(worst <= 1e-3)) {
        fprintf(stderr, "tern bench gdn: walk and block scan differ by %.3g of max|out| (bound 1e-3)\n", worst);
        rc = 1;
    }
    return rc;
}
