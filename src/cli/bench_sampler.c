/*
 * bench_sampler.c - `tern bench sampler`: the host's time to choose one token from a
 * vocabulary's logits (tern_sampler_sample), per setting, against one read of the logits
 * (memcpy of n_vocab floats) measured in the same run. A server chooses for every decoding
 * sequence at every step while the device waits, so on a 248,320-token vocabulary (the 27B)
 * this is part of each step's time.
 * Logits: normal with a standard deviation of 3 (the spread of a trained model's logits,
 * most tokens within 40 / T of the maximum: the worst case for the candidate sets), a fresh
 * draw per repetition; the median over --reps.
 */
#include "cli/cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double ms_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int tern_bench_sampler(int argc, char **argv) {
    int64_t vocab = 248320, reps = 31;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            printf("usage: tern bench sampler [--vocab N] [--reps N] [--json]\n"
                   "  Time to choose one token (tern_sampler_sample) from N logits (default 248320,\n"
                   "  the 27B's vocabulary) per setting: greedy, the default sampling (T 0.8, top-k 40,\n"
                   "  top-p 0.95, min-p 0.05), top-p alone, penalties; median of --reps (default 31)\n"
                   "  fresh draws, beside one read of the logits (memcpy) measured in the same run.\n");
            return 0;
        } else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--vocab") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 2, 1 << 24, &vocab)) return cli_usage_error("bench", "bad --vocab '%s'", argv[i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            if (!cli_parse_i64(argv[++i], 1, 10000, &reps)) return cli_usage_error("bench", "bad --reps '%s'", argv[i]);
        } else return cli_usage_error("bench", "unknown option '%s' (tern bench sampler --help)", argv[i]);
    }
    const int n = (int)vocab;
    float *l = malloc((size_t)n * sizeof *l), *cp = malloc((size_t)n * sizeof *cp);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!l || !cp || !t) { free(l); free(cp); free(t); return cli_usage_error("bench", "out of memory"); }
    uint64_t r = 0x9E3779B97F4A7C15ull;
    struct { const char *name; float temp; int top_k; float top_p, min_p, rep; } set[] = {
        {"greedy", 0.0f, 0, 1.0f, 0.0f, 1.0f},
        {"default (T 0.8, top-k 40, top-p 0.95, min-p 0.05)", 0.8f, 40, 0.95f, 0.05f, 1.0f},
        {"top-p 0.95 alone (T 0.8)", 0.8f, 0, 0.95f, 0.0f, 1.0f},
        {"default + repeat penalty 1.1", 0.8f, 40, 0.95f, 0.05f, 1.1f},
    };
    double read_ms = 0;
    int rc = 0;
    for (int si = -1; si < (int)(sizeof set / sizeof set[0]); si++) {
        tern_sampler *s = NULL;
        if (si >= 0) {
            tern_sampler_params p;
            tern_sampler_params_default(&p);
            p.temperature = set[si].temp; p.top_k = set[si].top_k; p.top_p = set[si].top_p;
            p.min_p = set[si].min_p; p.repeat_penalty = set[si].rep; p.seed = 7;
            if (tern_sampler_new(&p, n, &s)) { fprintf(stderr, "tern bench: %s\n", tern_last_error()); rc = 1; break; }
            for (int k = 0; k < 64; k++) tern_sampler_accept(s, (int32_t)((k * 7919) % n));
        }
        int32_t sink = 0;
        for (int64_t k = 0; k < reps; k++) {
            for (int i = 0; i < n; i += 2) { /* Box-Muller pairs, sd 3 */
                r ^= r << 13; r ^= r >> 7; r ^= r << 17;
                double u1 = ((double)(r >> 11) + 1.0) / 9007199254740993.0;
                r ^= r << 13; r ^= r >> 7; r ^= r << 17;
                double u2 = (double)(r >> 11) / 9007199254740992.0, g = 3.0 * sqrt(-2.0 * log(u1));
                l[i] = (float)(g * cos(6.283185307179586 * u2));
                if (i + 1 < n) l[i + 1] = (float)(g * sin(6.283185307179586 * u2));
            }
            double t0 = ms_now();
            if (s) sink += tern_sampler_sample(s, l);
            else memcpy(cp, l, (size_t)n * sizeof *l);
            t[k] = ms_now() - t0;
            if (s) tern_sampler_accept(s, sink % n);
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_d);
        double med = t[reps / 2];
        if (si < 0) read_ms = med;
        const char *name = si < 0 ? "one read of the logits (memcpy)" : set[si].name;
        if (json)
            printf("{\"op\":\"sampler\",\"setting\":\"%s\",\"vocab\":%d,\"ms\":%.4f,\"read_ms\":%.4f,\"reps\":%d}\n", name, n,
                   med, read_ms, (int)reps);
        else
            printf("%-52s %8.3f ms  (%5.1fx one read)\n", name, med, read_ms > 0 ? med / read_ms : 1.0);
        tern_sampler_free(s);
        if (sink == -1) printf("\n"); /* keeps the draws */
    }
    free(l); free(cp); free(t);
    return rc;
}
