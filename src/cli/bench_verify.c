/*
 * bench_verify.c - `tern bench model --verify-k K` (issue 24's figure): the cost of one
 * speculative verify pass (tern_session_verify over k + 1 positions of one sequence,
 * the GDN-state snapshot included) against one decode step, for k = 1 .. K.
 *
 *   context   -p P tokens first (a real prefill, or with --depth-fill random the KV
 *             cache and GDN states filled with pseudo-random values: the cost of a step
 *             depends on the cache length, not its contents)
 *   decode    -n N single-token steps: the median step time
 *   verify    for each k, two untimed warm-up passes (CUDA records its verify graph of
 *             k + 1 rows at the second), then --reps R passes over k + 1 tokens (the rows
 *             left in the session, tern_session_verify_rows, as tern_gen reads them), each followed by
 *             tern_session_verify_keep(0) (the rollback, timed apart): median times;
 *             chunk: the same k + 1 tokens as a plain chunk (tern_session_eval, every row's
 *             logits; not exact: the back-end's multi-row kernels, the GDN block scan),
 *             rewound by a snapshot (the back-end's multi-row kernels, not exact);
 *             ratio = verify / decode step; tokens/s at acceptance a (expected tokens a
 *             pass: (1 - a^(k+1)) / (1 - a)) is printed for a = 0.5, 0.8
 *             retake / copy: the host side of a pass apart (the snapshot retaken; k + 2 rows of
 *             logits copied on the host)
 * --json: one object with decode_ms and "verify": [{k, verify_ms, ratio, keep0_ms, chunk_ms,
 *             chunk_ratio, retake_ms, host_copy_ms}].
 * --profile (CUDA): afterwards, op by op (no graphs), the launches and the time per kernel
 *             family of 3 decode steps and of 3 verify passes of K + 1 rows, per pass.
 */
#include "backends/backends.h" /* tm_backend_cuda_ctx, tm_backend_cuda_session_no_graph */
#include "cli/cli.h"
#include "kernels/cuda/lab.h"      /* the launch counter and the kernel-family profile */
#include "model/session.h" /* tm_session_fill_random: a benchmark aid (not in tern.h) */

#include <math.h>
#include <stdlib.h>
#include <string.h>

int tern_bench_verify(int argc, char **argv) {
    const char *model = NULL, *device = NULL;
    int64_t threads = 0, np = 64, ng = 8, reps = 3, kmax = 8;
    bool json = false, fill_random = false, profile = false;
    /* the numeric options: name, alias, range, where */
    const struct { const char *name, *alias; int64_t lo, hi; int64_t *dst; } num[] = {
        {"--threads", "-t", 1, 256, &threads}, {"-p", NULL, 1, 1 << 20, &np}, {"-n", NULL, 1, 4096, &ng},
        {"--reps", NULL, 1, 1000, &reps}, {"--verify-k", NULL, 1, 16, &kmax}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) { json = true; continue; }
        if (!strcmp(a, "--profile")) { profile = true; continue; }
        if (!cli_is_one_of(a, "-m --model --threads -t -p -n --reps --device --verify-k --depth-fill"))
            return cli_usage_error("bench model", "--verify-k: option '%s' not taken with it (-m, --threads, -p, -n, "
                                   "--reps, --device, --depth-fill, --json, --profile)", a);
        if (i + 1 >= argc) return cli_usage_error("bench model", "option %s needs a value", a);
        const char *v = argv[++i];
        bool taken = false;
        for (size_t o = 0; o < sizeof num / sizeof num[0] && !taken; o++) {
            if (strcmp(a, num[o].name) && (!num[o].alias || strcmp(a, num[o].alias))) continue;
            if (!cli_parse_i64(v, num[o].lo, num[o].hi, num[o].dst))
                return cli_usage_error("bench model", "bad %s '%s' (%lld..%lld)", a, v, (long long)num[o].lo,
                                       (long long)num[o].hi);
            taken = true;
        }
        if (taken) continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(v, "random") || !strcmp(v, "real")) fill_random = !strcmp(v, "random"); /* --depth-fill */
        else return cli_usage_error("bench model", "bad --depth-fill '%s' (real or random)", v);
    }
    if (!model) return cli_usage_error("bench model", "no model: pass -m MODEL");
    tern_model_params mp;
    cli_model_params_from_env(&mp);
    mp.n_threads = (int)threads;
    mp.device = device;
    tern_model *m = NULL;
    tern_status st = tern_model_load(model, &mp, &m);
    if (st) return cli_lib_error("bench model", st);
    const int V = tern_model_get_info(m)->n_vocab;
    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = (int)(np + ng + kmax + 5); /* + 3 decode steps of --profile */
    tern_session *s = NULL;
    if ((st = tern_session_new(m, &sp, &s))) {
        tern_model_free(m);
        return cli_lib_error("bench model", st);
    }
    int32_t *ids = malloc((size_t)(np + ng + kmax + 1) * sizeof *ids);
    float *rows = malloc((size_t)(kmax + 1) * V * sizeof(float));
    double *t = malloc((size_t)(ng > reps ? ng : reps) * sizeof *t), *t2 = malloc((size_t)reps * sizeof *t2);
    double dec_ms = 0, ver_ms[17] = {0}, keep_ms[17] = {0}, chunk_ms[17] = {0}, retake_ms[17] = {0}, hcopy_ms[17] = {0};
    tern_session_snapshot *snap = NULL;
    if (!ids || !rows || !t || !t2) st = tern_fail(TERN_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; !st && i < np + ng + kmax + 1; i++) ids[i] = (int32_t)((i * 2654435761u + 7) % (uint32_t)V);
    if (!st) st = fill_random ? tm_session_fill_random(s, (int)np, 1) : tern_session_eval(s, ids, (size_t)np, NULL);
    if (!st) st = tern_session_eval(s, ids + np, 1, NULL); /* warm-up */
    for (int64_t i = 1; !st && i < ng; i++) {
        double t0 = tern_now_s();
        st = tern_session_eval(s, ids + np + i, 1, NULL);
        t[i - 1] = tern_now_s() - t0;
    }
    if (!st) dec_ms = 1e3 * cli_median(t, (int)(ng > 1 ? ng - 1 : 1));
    for (int k = 1; !st && k <= kmax; k++) {
        /* warm-up, untimed: two passes of k + 1 rows (a back-end may run the first of a row
         * count op by op and record the second into a graph: CUDA; the decode step's
         * warm-up above does the same for one row) */
        for (int r = 0; !st && r < 2; r++) {
            st = tern_session_verify(s, ids + np, (size_t)k + 1, NULL);
            if (!st) st = tern_session_verify_keep(s, 0);
        }
        for (int r = 0; !st && r < reps; r++) {
            double t0 = tern_now_s();
            st = tern_session_verify(s, ids + np, (size_t)k + 1, NULL); /* rows read in place, as tern_gen */
            double t1 = tern_now_s();
            if (!st) st = tern_session_verify_keep(s, 0);
            t[r] = t1 - t0;
            t2[r] = tern_now_s() - t1;
        }
        if (!st) {
            ver_ms[k] = 1e3 * cli_median(t, (int)reps);
            keep_ms[k] = 1e3 * cli_median(t2, (int)reps);
        }
        for (int r = 0; !st && r < reps; r++) {
            st = snap ? tern_session_snapshot_retake(s, snap) : tern_session_snapshot_take_in(s, TERN_SNAPSHOT_BACKEND, &snap);
            double t0 = tern_now_s();
            if (!st) st = tern_session_eval(s, ids + np, (size_t)k + 1, rows);
            t[r] = tern_now_s() - t0;
            if (!st) st = tern_session_snapshot_restore(s, snap);
        }
        if (!st) chunk_ms[k] = 1e3 * cli_median(t, (int)reps);
        /* the host side of a pass, apart: the rollback snapshot retaken (what the verify
         * does first) and a host copy of k + 2 rows of logits (a back-end returning rows
         * from a staging buffer copies k + 1 of them, and the last again as the session's) */
        for (int r = 0; !st && r < reps; r++) {
            double t0 = tern_now_s();
            st = tern_session_snapshot_retake(s, snap);
            t[r] = tern_now_s() - t0;
            float *cp = malloc((size_t)(k + 2) * V * sizeof(float));
            if (!cp) {
                st = tern_fail(TERN_ERR_NOMEM, "out of memory");
                break;
            }
            memset(cp, 0, (size_t)(k + 2) * V * sizeof(float)); /* first touch outside the timing */
            t0 = tern_now_s();
            memcpy(cp, rows, (size_t)(k + 1) * V * sizeof(float));
            memcpy(cp + (size_t)(k + 1) * V, rows + (size_t)k * V, (size_t)V * sizeof(float));
            t2[r] = tern_now_s() - t0;
            volatile float sink = cp[(size_t)(k + 1) * V] + cp[(size_t)k * V]; /* the copies are used */
            (void)sink;
            free(cp);
        }
        if (!st) {
            retake_ms[k] = 1e3 * cli_median(t, (int)reps);
            hcopy_ms[k] = 1e3 * cli_median(t2, (int)reps);
        }
    }
    tern_session_snapshot_free(snap);
    char prof[2][6144] = {"", ""};
    double launches[2] = {0, 0};
    (void)profile;
#if defined(TERN_HAVE_CUDA)
    tc_ctx *tc = tm_backend_cuda_ctx(m->be);
    if (!st && profile && tc) { /* op by op: graphs are not profiled */
        tm_backend_cuda_session_no_graph(s);
        for (int w = 0; w < 2 && !st; w++) {
            tc_profile_enable(tc, 1);
            tc_launches_reset(tc);
            for (int r = 0; r < 3 && !st; r++) {
                st = w ? tern_session_verify(s, ids + np, (size_t)kmax + 1, rows)
                       : tern_session_eval(s, ids + np + r, 1, NULL);
                if (!st && w) st = tern_session_verify_keep(s, 0);
            }
            launches[w] = (double)tc_launches(tc) / 3;
            tc_profile_text(tc, prof[w], sizeof prof[w]);
            tc_profile_enable(tc, 0);
        }
    }
#endif
    if (st) {
        free(ids), free(rows), free(t), free(t2);
        tern_session_free(s);
        tern_model_free(m);
        return cli_lib_error("bench model", st);
    }
    const tern_model_info *info = tern_model_get_info(m);
    if (json) {
        printf("{\"model\":\"%s\",\"arch\":\"%s\",\"device\":\"%s\",\"context\":%lld,\"decode_ms\":%.4f,"
               "\"snapshot_bytes\":%llu,\"verify\":[",
               model, info->arch, device ? device : "cpu", (long long)np, dec_ms,
               (unsigned long long)tern_session_verify_bytes(s));
        for (int k = 1; k <= kmax; k++)
            printf("%s{\"k\":%d,\"verify_ms\":%.4f,\"ratio\":%.4f,\"keep0_ms\":%.4f,\"chunk_ms\":%.4f,"
                   "\"chunk_ratio\":%.4f,\"retake_ms\":%.4f,\"host_copy_ms\":%.4f}",
                   k > 1 ? "," : "", k, ver_ms[k], dec_ms > 0 ? ver_ms[k] / dec_ms : 0, keep_ms[k], chunk_ms[k],
                   dec_ms > 0 ? chunk_ms[k] / dec_ms : 0, retake_ms[k], hcopy_ms[k]);
        printf("]}\n");
    } else {
        printf("tern bench model --verify-k: %s (%s, %s), context %lld%s, rollback snapshot %.1f MiB\n", model,
               info->arch, device ? device : "cpu", (long long)np, fill_random ? " (random fill)" : "",
               tern_session_verify_bytes(s) / 1048576.0);
        printf("decode step: %.3f ms (median of %lld)\n", dec_ms, (long long)(ng > 1 ? ng - 1 : 1));
        printf("%3s %10s %9s %9s %10s %9s %15s %15s %10s %10s\n", "k", "verify ms", "x decode", "keep0 ms", "chunk ms",
               "x decode", "tok/s at a=0.5", "tok/s at a=0.8", "retake ms", "copy ms");
        for (int k = 1; k <= kmax; k++) {
            double e5 = (1 - pow(0.5, k + 1)) / 0.5, e8 = (1 - pow(0.8, k + 1)) / 0.2;
            double per = ver_ms[k] + keep_ms[k];
            printf("%3d %10.3f %9.2f %9.3f %10.3f %9.2f %15.1f %15.1f %10.3f %10.3f\n", k, ver_ms[k],
                   dec_ms > 0 ? ver_ms[k] / dec_ms : 0, keep_ms[k], chunk_ms[k], dec_ms > 0 ? chunk_ms[k] / dec_ms : 0,
                   per > 0 ? 1e3 * e5 / per : 0, per > 0 ? 1e3 * e8 / per : 0, retake_ms[k], hcopy_ms[k]);
        }
        printf("(plain decode: %.1f tok/s; a = acceptance rate of each drafted token; tok/s from verify + keep0;\n"
               " chunk: the k + 1 tokens as a plain, not bit-exact chunk; retake: the rollback snapshot taken again,\n"
               " the verify's first part; copy: k + 2 rows of logits copied on the host, as a back-end returning\n"
               " rows from a staging buffer does)\n", dec_ms > 0 ? 1e3 / dec_ms : 0);
        for (int w = 0; w < 2; w++)
            if (prof[w][0])
                printf("\n%s, op by op, 3 of them (%.0f launches each):\n%s", w ? "verify passes" : "decode steps",
                       launches[w], prof[w]);
    }
    free(ids), free(rows), free(t), free(t2);
    tern_session_free(s);
    tern_model_free(m);
    return 0;
}
