/*
 * bench_model.c - `tern bench model`: decode (tg) and prefill (pp) speed of a
 * model, with the machine's memory read ceiling measured in the same run.
 *
 *   ceiling   tern_read_ceiling_gbps(): a 2 GiB buffer read by N threads with
 *             the widest loads, with and without prefetch, best of 4 (GB/s),
 *             measured after the model runs (peak RSS is read before it)
 *   warm-up   one token through the model (touches every mapped weight page)
 *   pp        a prompt of P ids (deterministic pseudo-random, chunked prefill),
 *             reps times from a reset session: median tok/s
 *   tg        N single-token steps after the prompt (greedy): median per-step time
 *   depth     with --depth D (llama-bench's -d): D tokens of context are prefilled once
 *             (untimed) before the measurements; the pp reps then follow one another
 *             (rep r evaluates positions D + r*P ..: the session cannot be rewound, the
 *             GDN state is recurrent) and tg starts after them; --depth-fill random
 *             instead fills the D positions of the KV cache (in its stored type) and the
 *             GDN conv/recurrent states with deterministic pseudo-random values
 *             (tm_session_fill_random, internal: the CLI links the static library) -
 *             the cost of a step at depth D depends on the cache length, not its
 *             contents, and a real 32k prefill of the 27B takes hours on a small CPU
 *   bytes/token  weight bytes read per decoded token (all but the embedding table) plus
 *             the KV cache read at the tg steps' middle position (every key and value row
 *             of every attention layer once, in the cache's stored type)
 *   roofline  ceiling / bytes per token; ratio = tg / roofline
 *   batch     with --batch B[,B2,...]: max(B) more sessions, copies of the prefilled
 *             prompt's session; after each tg step, for each B of the list, one step that
 *             advances the first B of them together (tern_session_eval_batch), so all
 *             see the same machine: median batch step time -> aggregate tok/s (B tokens
 *             per step) and per-sequence tok/s; speedup = aggregate / tg. The batch
 *             roofline: the ceiling over the bytes a step must move: the weights once,
 *             plus per sequence its GDN states read and written (2 x the snapshot's
 *             state bytes) and its KV cache rows read; share = aggregate / roofline.
 *             With --profile on a GPU: the time per kernel family of 4 more batch
 *             steps per B (batch steps are never graph-recorded)
 * --json prints one JSON object: tg_tok_s, pp_tok_s, bytes_per_token,
 * ceiling_gbps, tg_gbps, roofline_ratio, peak_rss_bytes, session_bytes, ... (and with
 * --batch: batch, batch_tok_s, batch_seq_tok_s, batch_speedup of the list's first B,
 * and "batches": one object per B: batch, tok_s, seq_tok_s, step_ms, bytes_per_step,
 * roofline_tok_s, roofline_ratio, profile)
 */
#include "backends/backends.h"
#include "cli/cli.h"
#if defined(TERN_HAVE_CUDA)
#include "kernels/cuda/lab.h"
#endif
#include "kernels/kernels.h"
#include "lab.h" /* tern_device_read_ceiling_gbps */
#include "model/session.h" /* tm_session_fill_random (not in tern.h: a benchmark aid) */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: tern bench model -m MODEL [--threads N] [-p N[,N...]] [-n N] [--reps N]\n"
            "                        [--chunk N] [--batch B[,B...]] [--depth D] [--depth-fill real|random]\n"
            "                        [--cache-type T] [--gdn-state f32|bf16] [--no-repack]\n"
            "                        [--device cpu|cuda[:N]] [--tp N] [--profile] [--persistent [--persistent-qwen35]]\n"
            "                        [--batch-invariant] [--json]\n"
            "  Prefill (-p prompt tokens, default 64) and decode (-n steps, default 16)\n"
            "  speed, medians over --reps (default 3) prefills and the decode steps;\n"
            "  -p 512,2048,8192: each prompt length prefilled --reps times (the first one\n"
            "  before the decode steps), with the projections' int8 operations per second\n"
            "  (2 x the matrix weights a prompt token multiplies) and, on a GPU, their share\n"
            "  of the int8 tensor-core rate measured in the same run;\n"
            "  the memory read ceiling is measured in the same run. --batch B: also B\n"
            "  sequences decoding together (one pass per step; aggregate and per-sequence\n"
            "  tok/s, and the share of the batch roofline: weights once plus each sequence's\n"
            "  GDN states read and written and KV rows read, over the ceiling); a comma list\n"
            "  (--batch 1,8,16,32,64) measures each (with --profile on a GPU: per B, the time\n"
            "  per kernel family of 4 batch steps). --persistent: --device cuda's single-token steps\n"
            "  as one persistent kernel (qwen3 at batch 1; docs/persistent.md); --persistent-qwen35 lets it\n"
            "  take a qwen35 model too (its stages are new and not yet checked on a GPU: a lab switch). --batch-invariant: the\n"
            "  model parameter batch_invariant (CUDA: every batch's rows the same bits as alone; the\n"
            "  cost of it at each --batch). --gdn-state bf16: qwen35's\n"
            "  GDN states stored in bf16 (half their bytes; docs/kernels.md). --no-repack: weights used in the file layout (default: copied into\n"
            "  the kernels' fastest layout at load where there is one, file pages dropped;\n"
            "  TERN_REPACK=0 does the same; --repack: the default). --device cuda:\n"
            "  the model runs on GPU 0 and the ceiling is the GPU memory's read rate; it also\n"
            "  counts kernel launches per decode token and, with --profile, times each kernel\n"
            "  family over the prompt's prefill and 8 decode steps run op by op, and the gap\n"
            "  between kernels (the decode step's time less the kernels', per launch). --chunk N:\n"
            "  the prefill chunk (default: the back-end's, 64 on the CPU, 512 on a GPU).\n"
            "  --verify-k K: speculative decoding's verify pass over k + 1 positions against one\n"
            "  decode step, k = 1..K, after -p tokens (with -n, --reps, --threads, --device,\n"
            "  --depth-fill random, --json, --profile: the kernel families of a pass on CUDA;\n"
            "  the host side of a pass apart: snapshot retake, host copy of the rows;\n"
            "  src/cli/bench_verify.c).\n"
            "  --depth D: pp and tg measured after D\n"
            "  tokens of context (prefilled once, untimed; bytes/token then counts the KV cache\n"
            "  read too). --depth-fill random: the D positions of the KV cache and the GDN\n"
            "  states are filled with deterministic pseudo-random values instead of evaluating\n"
            "  D tokens (seconds instead of hours at 32k on a CPU; a step's cost depends on the\n"
            "  cache length, not its contents); default real. --cache-type\n"
            "  f32|f16|bf16|q8_0 (-ctk/-ctv): the KV cache type.\n"
            "  --tp N: N tensor-parallel"
            "  shards of --device in this process (docs/multi-gpu.md).\n" CLI_ENV_SEE);
}

/* ------------------------------------------------------------ read ceiling */
/* ,"key":"text" with the text's newlines, quotes and backslashes escaped (nothing when empty) */
/* A comma list of 1..hi values, at most maxn: out[], *n and the largest *maxv; false
 * when a value is bad, there are too many or none. */
static bool parse_list(const char *v, int64_t hi, int64_t *out, int maxn, int *n, int64_t *maxv) {
    char tmp[256];
    if (strlen(v) >= sizeof tmp) return false;
    strcpy(tmp, v);
    *n = 0;
    *maxv = 0;
    for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == maxn || !cli_parse_i64(t, 1, hi, &out[*n])) return false;
        if (out[*n] > *maxv) *maxv = out[*n];
        ++*n;
    }
    return *n > 0;
}

static void json_text_field(const char *key, const char *text) {
    if (!text[0]) return;
    printf(",\"%s\":\"", key);
    for (const char *q = text; *q; q++) {
        if (*q == '\n') printf("\\n");
        else if (*q == '"' || *q == '\\') printf("\\%c", *q);
        else putchar(*q);
    }
    printf("\"");
}


int tern_bench_model(int argc, char **argv) {
    const char *model = NULL;
    int64_t threads = 0, np = 64, ng = 16, reps = 3, chunk = 0, batch = 0, depth = 0, tp = 0;
    enum { MAXB = 16 };
    int64_t blist[MAXB]; /* --batch's list; batch = its largest */
    enum { MAXP = 8 };
    int64_t plist[MAXP] = {64}, np_max = 64; /* -p's list; np = its first */
    int npl = 1;
    int nbl = 0;
    tern_cache_type cache_k = TERN_CACHE_DEFAULT, cache_v = TERN_CACHE_DEFAULT;
    bool json = false, profile = false, fill_random = false, persistent = false, invariant = false;
    bool persistent_q35 = false;
    int gdn_state = TERN_GDN_STATE_F32;
    int repack = -1; /* -1: the library's default */
    const char *device = NULL;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--verify-k")) return tern_bench_verify(argc, argv); /* bench_verify.c */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) { json = true; continue; }
        if (!strcmp(a, "--repack")) { repack = 1; continue; }
        if (!strcmp(a, "--no-repack")) { repack = 0; continue; }
        if (!strcmp(a, "--profile")) { profile = true; continue; }
        if (!strcmp(a, "--persistent")) { persistent = true; continue; }
        if (!strcmp(a, "--persistent-qwen35")) { persistent = persistent_q35 = true; continue; }
        if (!strcmp(a, "--batch-invariant")) { invariant = true; continue; }
        int cr = cli_parse_cache_type("bench model", argc, argv, &i, &cache_k, &cache_v);
        if (cr == 2) return 2;
        if (cr == 1) continue;
        cr = cli_parse_gdn_state("bench model", argc, argv, &i, &gdn_state);
        if (cr == 2) return 2;
        if (cr == 1) continue;
        if (!cli_is_one_of(a, "-m --model --threads -t -p -n --reps --chunk --batch --device --depth -d --tp "
                              "--depth-fill"))
            return cli_usage_error("bench model", "unknown option '%s'", a);
        if (i + 1 >= argc) return cli_usage_error("bench model", "option %s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--device")) device = v;
        else if (!strcmp(a, "--depth-fill")) {
            if (!strcmp(v, "random")) fill_random = true;
            else if (!strcmp(v, "real")) fill_random = false;
            else return cli_usage_error("bench model", "bad --depth-fill '%s' (real or random)", v);
        }
        else if (!strcmp(a, "--tp")) {
            if (!cli_parse_i64(v, 1, 64, &tp)) return cli_usage_error("bench model", "bad --tp '%s' (1..64 shards)", v);
        }
        else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            if (!cli_parse_i64(v, 1, 256, &threads)) return cli_usage_error("bench model", "bad --threads '%s'", v);
        } else if (!strcmp(a, "-p")) {
            if (!parse_list(v, 65536, plist, MAXP, &npl, &np_max))
                return cli_usage_error("bench model", "bad -p '%s' (1..65536, at most %d comma-separated)", v, (int)MAXP);
            np = plist[0];
        } else if (!strcmp(a, "-n")) {
            if (!cli_parse_i64(v, 1, 65536, &ng)) return cli_usage_error("bench model", "bad -n '%s'", v);
        } else if (!strcmp(a, "--reps")) {
            if (!cli_parse_i64(v, 1, 1000, &reps)) return cli_usage_error("bench model", "bad --reps '%s'", v);
        } else if (!strcmp(a, "--batch")) {
            if (!parse_list(v, 256, blist, MAXB, &nbl, &batch))
                return cli_usage_error("bench model", "bad --batch '%s' (1..256, at most %d comma-separated)", v,
                                       (int)MAXB);
        } else if (!strcmp(a, "--depth") || !strcmp(a, "-d")) {
            if (!cli_parse_i64(v, 0, 1 << 22, &depth)) return cli_usage_error("bench model", "bad --depth '%s'", v);
        } else if (!strcmp(a, "--chunk")) {
            if (!cli_parse_i64(v, 1, 4096, &chunk)) return cli_usage_error("bench model", "bad --chunk '%s'", v);
        } else return cli_usage_error("bench model", "unknown option '%s'", a);
    }
    if (!model) model = cli_default_model();
    if (!model) return cli_usage_error("bench model", "no model: pass -m MODEL");
    if (npl > 1 && depth) return cli_usage_error("bench model", "a -p list needs --depth 0 (one prompt length after a depth)");

    tern_model_params mp;
    cli_model_params_from_env(&mp);
    mp.n_threads = (int)threads;
    if (repack >= 0) mp.repack = repack;
    mp.device = device;
    mp.tp = (int)tp;
    mp.cuda_persistent = persistent;
#if defined(TERN_HAVE_CUDA)
    if (persistent_q35) tc_persist_allow_qwen35(1);
#else
    (void)persistent_q35;
#endif
    mp.batch_invariant = invariant;
    mp.gdn_state = gdn_state;
    double t0 = tern_now_s();
    tern_model *m = NULL;
    tern_status st = tern_model_load(model, &mp, &m);
    if (st) return cli_lib_error("bench model", st);
    double t_load = tern_now_s() - t0;
    const tern_model_info *info = tern_model_get_info(m);
    int nt = threads ? (int)threads : 0;
    if (nt <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        nt = c > 0 ? (int)c : 1;
    }

    tern_session_params sp;
    tern_session_params_default(&sp);
    sp.n_ctx = (int)(depth + (depth ? reps : 1) * np + (ng > 8 ? ng : 8) + 1); /* the profile runs 8 steps */
    if (sp.n_ctx < np_max + 1) sp.n_ctx = (int)np_max + 1; /* -p's other lengths */
    tern_session_params bsp = sp; /* the batch sessions: every B of the list advances the first B */
    bsp.n_ctx = sp.n_ctx + (int)(ng * nbl + 4 * nbl);
    sp.n_chunk = (int)chunk;
    sp.cache_type_k = cache_k;
    sp.cache_type_v = cache_v;
    tern_session *s = NULL;
    st = tern_session_new(m, &sp, &s);
    if (st) {
        tern_model_free(m);
        return cli_lib_error("bench model", st);
    }
    int V = info->n_vocab;
    const int64_t nids = np_max > depth ? np_max : depth;
    int32_t *ids = malloc((size_t)nids * sizeof *ids);
    double *pp = malloc((size_t)reps * sizeof *pp), *tg = malloc((size_t)ng * sizeof *tg);
    double ppl[MAXP] = {0}; /* -p's lengths: median tok/s each (ppl[0] = pp_med) */
    double *bt = malloc((size_t)ng * MAXB * sizeof *bt); /* [b][step] */
    double bmed[MAXB] = {0}, gdn_bytes = 0; /* gdn_bytes: one sequence's GDN states */
    char bprof[MAXB][1024];
    memset(bprof, 0, sizeof bprof);
    tern_session **bs = batch ? calloc((size_t)batch, sizeof *bs) : NULL;
    int32_t *btok = batch ? malloc((size_t)batch * sizeof *btok) : NULL;
    double bt_med = 0, depth_s = 0;
    int rc = 0;
    if (!ids || !pp || !tg || !bt || (batch && (!bs || !btok))) {
        fprintf(stderr, "tern bench model: out of memory\n");
        rc = 1;
        goto done;
    }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int64_t i = 0; i < nids; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)V);
    }
    /* warm-up: one token touches every weight page */
    if ((st = tern_session_eval(s, ids, 1, NULL))) goto lib_err;
    if (depth) {
        tern_session_reset(s);
        double a = tern_now_s();
        if (fill_random) st = tm_session_fill_random(s, (int)depth, 0x5EED);
        else st = tern_session_eval(s, ids, (size_t)depth, NULL);
        if (st) goto lib_err;
        depth_s = tern_now_s() - a;
        if (!json)
            fprintf(stderr, "  depth %lld %s in %.1f s\n", (long long)depth,
                    fill_random ? "filled with random values" : "prefilled", depth_s);
    }
    for (int64_t r = 0; r < reps; r++) {
        if (!depth) tern_session_reset(s);
        double a = tern_now_s();
        if ((st = tern_session_eval(s, ids, (size_t)np, NULL))) goto lib_err;
        pp[r] = (double)np / (tern_now_s() - a);
        if (!json)
            fprintf(stderr, "  pp rep %lld: %.2f tok/s\n", (long long)r, pp[r]);
    }
    /* batch: max(B) sessions holding the prefilled prompt (copies of s); their steps
     * interleave with the single-token steps, so all medians see the same machine */
    for (int64_t b = 0; b < batch; b++) {
        if ((st = tern_session_new(m, &bsp, &bs[b]))) goto lib_err;
        if ((st = tern_session_copy(bs[b], s))) goto lib_err;
        btok[b] = (int32_t)cli_argmax(tern_session_logits(bs[b]), V);
    }
    if (batch) { /* one sequence's recurrent (GDN) state bytes: a snapshot less its logits row */
        tern_session_snapshot *snap = NULL;
        if (tern_session_snapshot_take(s, &snap) == TERN_OK) {
            double sb = (double)tern_session_snapshot_bytes(snap) - (double)V * sizeof(float);
            gdn_bytes = sb > 0 ? sb : 0;
        }
        tern_session_snapshot_free(snap);
    }
    int32_t tok = (int32_t)cli_argmax(tern_session_logits(s), V);
    const int tg_pos = tern_session_pos(s) + (int)(ng / 2); /* the tg steps' middle position */
    for (int64_t i = 0; i < ng; i++) {
        double a = tern_now_s();
        if ((st = tern_session_eval(s, &tok, 1, NULL))) goto lib_err;
        tg[i] = tern_now_s() - a;
        tok = (int32_t)cli_argmax(tern_session_logits(s), V);
        for (int k = 0; k < nbl; k++) {
            a = tern_now_s();
            if ((st = tern_session_eval_batch(bs, btok, (size_t)blist[k], NULL))) goto lib_err;
            bt[k * ng + i] = tern_now_s() - a;
            for (int64_t b = 0; b < blist[k]; b++) btok[b] = (int32_t)cli_argmax(tern_session_logits(bs[b]), V);
        }
    }
    for (int k = 0; k < nbl; k++) bmed[k] = 1.0 / cli_median(bt + k * ng, (int)ng); /* steps per second */
    if (nbl) bt_med = bmed[0];
    /* GPU: launches (= graph nodes) per decode token, counted op by op, and with
     * --profile the time per kernel family over the same steps */
    double launches = 0, kernel_ms = 0; /* kernel_ms: the profile's GPU time per decode token */
    char prof[6144] = "", pprof[2048] = "";
    (void)profile;
    (void)pprof;
#if defined(TERN_HAVE_CUDA)
    if (info->device_bytes > 0 && tm_backend_cuda_ctx(m->be)) {
        tern_session *ps = NULL;
        const int steps = 8;
        tc_ctx *tc = tm_backend_cuda_ctx(m->be); /* the model's device context */
        if ((st = tern_session_new(m, &sp, &ps))) goto lib_err;
        tm_backend_cuda_session_no_graph(ps); /* op by op (no step graph): launches counted, profiled */
        if (profile) tc_profile_enable(tc, 1); /* the prefill of the prompt, op by op */
        st = tern_session_eval(ps, ids, (size_t)np, NULL);
        if (profile) {
            if (!st) tc_profile_text(tc, pprof, sizeof pprof);
            tc_profile_enable(tc, 0);
        }
        if (!st) {
            int32_t pt = (int32_t)cli_argmax(tern_session_logits(ps), V);
            if (profile) tc_profile_enable(tc, 1);
            /* the persistent step (when it runs these steps): its in-kernel profile instead */
            struct tc_persist *pk = persistent && profile ? tm_backend_cuda_persist(m->be) : NULL;
            if (pk && tc_persist_profile(pk, 1)) pk = NULL;
            tc_launches_reset(tc);
            for (int i = 0; i < steps && !st; i++) {
                st = tern_session_eval(ps, &pt, 1, NULL);
                pt = (int32_t)cli_argmax(tern_session_logits(ps), V);
            }
            launches = (double)tc_launches(tc) / steps;
            if (profile) {
                tc_profile_entry pe[TC_FAM_N];
                const int ne = tc_profile_report(tc, pe, TC_FAM_N);
                for (int i = 0; i < ne; i++) kernel_ms += pe[i].ms / steps;
                tc_profile_text(tc, prof, sizeof prof);
                tc_profile_enable(tc, 0);
            }
            if (pk) { /* and the same steps with the tiles in registers (an A/B in one run) */
                int w = tc_persist_profile_text(pk, prof, sizeof prof);
                tc_persist_profile(pk, 1);
                tc_persist_set_pipeline(pk, 3);
                for (int i = 0; i < steps && !st; i++) {
                    st = tern_session_eval(ps, &pt, 1, NULL);
                    pt = (int32_t)cli_argmax(tern_session_logits(ps), V);
                }
                if (w > 0 && (size_t)w < sizeof prof)
                    w += tc_persist_profile_text(pk, prof + w, sizeof prof - (size_t)w);
                tc_persist_set_pipeline(pk, 0);
                /* and with the persistent step's lab variant (tc_persist_set_pipeline) */
                tc_persist_profile(pk, 1);
                tc_persist_set_pipeline(pk, 1);
                for (int i = 0; i < steps && !st; i++) {
                    st = tern_session_eval(ps, &pt, 1, NULL);
                    pt = (int32_t)cli_argmax(tern_session_logits(ps), V);
                }
                if (w > 0 && (size_t)w < sizeof prof)
                    tc_persist_profile_text(pk, prof + w, sizeof prof - (size_t)w);
                tc_persist_set_pipeline(pk, 0);
                tc_persist_profile(pk, 0);
            }
        }
        tern_session_free(ps);
        if (st) goto lib_err;
        /* the batch steps' kernels, per B (op by op: batch steps are never recorded) */
        for (int k = 0; profile && k < nbl; k++) {
            tc_profile_enable(tc, 1);
            for (int i = 0; i < 4 && !st; i++) {
                st = tern_session_eval_batch(bs, btok, (size_t)blist[k], NULL);
                for (int64_t b = 0; b < blist[k]; b++) btok[b] = (int32_t)cli_argmax(tern_session_logits(bs[b]), V);
            }
            if (!st) tc_profile_text(tc, bprof[k], sizeof bprof[k]);
            tc_profile_enable(tc, 0);
            if (st) goto lib_err;
        }
    }
#endif
    /* -p's other prompt lengths, each --reps times from an empty context (after the
     * decode steps: the first length's state is theirs) */
    ppl[0] = cli_median(pp, (int)reps);
    for (int j = 1; j < npl; j++) {
        for (int64_t r = 0; r < reps; r++) {
            tern_session_reset(s);
            double a = tern_now_s();
            if ((st = tern_session_eval(s, ids, (size_t)plist[j], NULL))) goto lib_err;
            pp[r] = (double)plist[j] / (tern_now_s() - a);
            if (!json) fprintf(stderr, "  pp %lld rep %lld: %.2f tok/s\n", (long long)plist[j], (long long)r, pp[r]);
        }
        ppl[j] = cli_median(pp, (int)reps);
    }
    /* peak RSS before the ceiling buffer exists; then the ceiling, same threads */
    size_t rss = tern_peak_rss_bytes();
    tern_pool *pool = NULL;
    double ceiling = 0;
    bool gpu = info->device_bytes > 0;
    if (gpu) {
        ceiling = tern_device_read_ceiling_gbps(info->device, (size_t)4 << 30, 8);
    } else if (tern_pool_new(nt, &pool) == TERN_OK) {
        ceiling = tern_read_ceiling_gbps(pool, nt, (size_t)2 << 30, 4);
        tern_pool_free(pool);
    }
    double pp_med = ppl[0];
    /* the projections' int8 operations per prompt token: 2 x the matrix weights, less the
     * head (a prompt's logits are made for its last position only); the GPU's int8
     * tensor-core rate, measured like the read ceiling */
    const double ops_tok = 2.0 * ((double)info->matmul_weights - (double)info->n_vocab * info->n_embd);
    const double tops = gpu ? tern_device_int8_tops(info->device, 3) : 0;
    double tg_med = 1.0 / cli_median(tg, (int)ng);
    double wbpt = (double)info->decode_bytes_per_token;
    double kvbpt = (double)tern_session_cache_bytes(s, tg_pos);
    double bpt = wbpt + kvbpt;
    const char *ctk = tern_cache_type_name(tern_session_cache_type(s, false));
    const char *ctv = tern_cache_type_name(tern_session_cache_type(s, true));
    double tg_gbps = bpt * tg_med / 1e9;
    double roof = ceiling > 0 ? ceiling * 1e9 / bpt : 0;
    double ratio = roof > 0 ? tg_med / roof : 0;
    /* the decode step's time outside kernels (--profile on a GPU): the graph step's wall
     * time less the kernels' time measured op by op, per launch */
    const double step_ms = tg_med > 0 ? 1e3 / tg_med : 0;
    const double gap_us = kernel_ms > 0 && launches > 0 ? (step_ms - kernel_ms) * 1e3 / launches : 0;
    /* the batch roofline of B sequences: weights once, each sequence's GDN states read and
     * written, its KV rows read (at the tg steps' middle position) */
    double broof[MAXB] = {0}, bbytes[MAXB] = {0};
    for (int k = 0; k < nbl; k++) {
        bbytes[k] = wbpt + (double)blist[k] * (2 * gdn_bytes + kvbpt);
        broof[k] = ceiling > 0 ? ceiling * 1e9 / bbytes[k] * (double)blist[k] : 0;
    }
    if (json) {
        printf("{\"model\":\"%s\",\"arch\":\"%s\",\"threads\":%d,\"isa\":\"%s\",\"prompt_tokens\":%lld,"
               "\"chunk\":%d,\"gen_tokens\":%lld,\"tg_tok_s\":%.4f,\"pp_tok_s\":%.4f,\"bytes_per_token\":%.0f,"
               "\"ceiling_gbps\":%.3f,\"tg_gbps\":%.3f,\"roofline_tok_s\":%.4f,\"roofline_ratio\":%.4f,"
               "\"peak_rss_bytes\":%zu,\"weight_bytes\":%llu,\"model_alloc_bytes\":%llu,"
               "\"session_bytes\":%llu,\"load_s\":%.3f,\"repack\":%s,\"device\":\"%s\","
               "\"device_bytes\":%llu,\"launches_per_token\":%.0f,\"depth\":%lld,\"tg_pos\":%d,"
               "\"cache_type_k\":\"%s\",\"cache_type_v\":\"%s\",\"weight_bytes_per_token\":%.0f,"
               "\"kv_bytes_per_token\":%.0f,\"depth_fill\":\"%s\",\"depth_s\":%.3f",
               model, info->arch, nt, tern_isa_name(tern_kernels_isa()), (long long)np,
               tern_session_chunk(s), (long long)ng, tg_med, pp_med, bpt, ceiling, tg_gbps, roof, ratio, rss,
               (unsigned long long)info->weight_bytes, (unsigned long long)info->alloc_bytes,
               (unsigned long long)tern_session_memory(s), t_load, mp.repack ? "true" : "false",
               info->device, (unsigned long long)info->device_bytes, launches, (long long)depth, tg_pos,
               ctk, ctv, wbpt, kvbpt, fill_random ? "random" : "real", depth_s);
        printf(",\"int8_tops\":%.1f,\"prompt_ops_per_token\":%.0f,\"prompts\":[", tops, ops_tok);
        for (int j = 0; j < npl; j++)
            printf("%s{\"tokens\":%lld,\"tok_s\":%.4f,\"tops\":%.3f,\"int8_share\":%.4f}", j ? "," : "",
                   (long long)plist[j], ppl[j], ppl[j] * ops_tok / 1e12, tops > 0 ? ppl[j] * ops_tok / 1e12 / tops : 0);
        printf("]");
        printf(",\"persistent\":%s", !persistent ? "false" : tm_backend_cuda_persist(m->be) ? "true" : "\"not taken\"");
        if (nbl)
            printf(",\"batch\":%lld,\"batch_tok_s\":%.4f,\"batch_seq_tok_s\":%.4f,"
                   "\"batch_speedup\":%.4f",
                   (long long)blist[0], bt_med * (double)blist[0], bt_med, bt_med * (double)blist[0] / tg_med);
        if (kernel_ms > 0)
            printf(",\"step_ms\":%.4f,\"kernel_ms_per_token\":%.4f,\"gap_us_per_launch\":%.3f", step_ms,
                   kernel_ms, gap_us);
        json_text_field("profile", prof);
        json_text_field("prefill_profile", pprof);
        if (nbl) {
            printf(",\"gdn_state_bytes\":%.0f,\"batches\":[", gdn_bytes);
            for (int k = 0; k < nbl; k++) {
                printf("%s{\"batch\":%lld,\"tok_s\":%.4f,\"seq_tok_s\":%.4f,\"step_ms\":%.4f,"
                       "\"bytes_per_step\":%.0f,\"roofline_tok_s\":%.4f,\"roofline_ratio\":%.4f",
                       k ? "," : "", (long long)blist[k], bmed[k] * (double)blist[k], bmed[k], 1e3 / bmed[k],
                       bbytes[k], broof[k], broof[k] > 0 ? bmed[k] * (double)blist[k] / broof[k] : 0);
                json_text_field("profile", bprof[k]);
                printf("}");
            }
            printf("]");
        }
        printf("}\n");
    } else {
        printf("model          %s (%s, %d layers, vocab %d)\n", model, info->arch, info->n_layers, V);
        if (gpu) {
            printf("device         %s (%.1f MiB of weights on the GPU)\n", info->device_name,
                   info->device_bytes / 1048576.0);
            printf("read ceiling   %.2f GB/s (GPU memory, 4 GiB buffer, best of 8)\n", ceiling);
            if (persistent)
                printf("persistent     %s\n", tm_backend_cuda_persist(m->be)
                                                   ? "on: one launch per decode step (docs/persistent.md)"
                                                   : "requested, not taken (the model or device: per-op path; "
                                                     "docs/persistent.md)");
        } else {
            printf("threads        %d (%s)\n", nt, tern_isa_name(tern_kernels_isa()));
            printf("read ceiling   %.2f GB/s (2 GiB buffer, best of 4)\n", ceiling);
        }
        printf("depth          %lld%s (tg at positions around %d; KV cache %s/%s)\n", (long long)depth,
               depth && fill_random ? " filled with random values" : "", tg_pos, ctk, ctv);
        printf("bytes/token    %.3f GB (weights %.3f GB + KV cache %.3f GB read per decode token)\n",
               bpt / 1e9, wbpt / 1e9, kvbpt / 1e9);
        printf("roofline       %.3f tok/s\n", roof);
        printf("tg             %.3f tok/s (median of %lld steps) = %.2f GB/s, %.1f%% of roofline\n",
               tg_med, (long long)ng, tg_gbps, 100 * ratio);
        for (int k = 0; k < nbl; k++)
            printf("batch %-8lld %.3f tok/s aggregate, %.3f tok/s per sequence (median of %lld "
                   "steps) = %.2fx tg; batch roofline %.1f tok/s (%.3f GB per step), %.1f%% of it\n",
                   (long long)blist[k], bmed[k] * (double)blist[k], bmed[k], (long long)ng,
                   bmed[k] * (double)blist[k] / tg_med, broof[k], bbytes[k] / 1e9,
                   broof[k] > 0 ? 100 * bmed[k] * (double)blist[k] / broof[k] : 0);
        printf("pp             %.3f tok/s (median of %lld prefills of %lld tokens, chunk %lld%s)\n",
               pp_med, (long long)reps, (long long)np, (long long)tern_session_chunk(s), depth ? ", after the depth" : "");
        if (tops > 0) printf("int8 TC rate   %.1f TOPS (wgmma chains on operands on chip, best of 3)\n", tops);
        for (int j = 0; j < npl; j++) {
            printf("pp %-11lld %.3f tok/s%s = %.3g TOPS of projections (int8 ops: %.2f G a token)", (long long)plist[j],
                   ppl[j], j ? "" : " (above)", ppl[j] * ops_tok / 1e12, ops_tok / 1e9);
            if (tops > 0) printf(", %.1f%% of the int8 TC rate", 100 * ppl[j] * ops_tok / 1e12 / tops);
            printf("\n");
        }
        printf("memory         peak RSS %.1f MiB (weights mapped %.1f MiB, model alloc %.1f MiB, "
               "session %.1f MiB)\n",
               rss / 1048576.0, info->weight_bytes / 1048576.0, info->alloc_bytes / 1048576.0,
               tern_session_memory(s) / 1048576.0);
        printf("load           %.2f s\n", t_load);
        if (gpu) printf("launches       %.0f per decode token (graph nodes; op by op)\n", launches);
        if (prof[0]) printf("profile (8 decode steps, op by op):\n%s", prof);
        if (kernel_ms > 0)
            printf("kernel gap     %.3f us per launch (decode step %.3f ms at tg, kernels %.3f ms of it "
                   "op by op, %.0f launches)\n",
                   gap_us, step_ms, kernel_ms, launches);
        if (pprof[0])
            printf("profile (prefill of %lld tokens, chunk %d, op by op):\n%s", (long long)np,
                   tern_session_chunk(s), pprof);
        for (int k = 0; k < nbl; k++)
            if (bprof[k][0]) printf("profile (4 batch steps of %lld sequences):\n%s", (long long)blist[k], bprof[k]);
    }
    goto done;
lib_err:
    rc = cli_lib_error("bench model", st);
done:
    free(ids);
    free(pp);
    free(tg);
    free(bt);
    for (int64_t b = 0; bs && b < batch; b++) tern_session_free(bs[b]);
    free(bs);
    free(btok);
    tern_session_free(s);
    tern_model_free(m);
    return rc;
}
