/*
 * cli.h - shared pieces of the `tern` command line: the subcommand table,
 * argument helpers and the progress bar. The CLI is a thin layer over libtern;
 * this folder (and src/server) is the only place that prints or exits.
 *
 * Exit codes: 0 success, 1 runtime failure (message on stderr), 2 usage error
 * (one clear line on stderr).
 */
#ifndef TERN_CLI_H
#define TERN_CLI_H

#include "tern.h"
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Each subcommand: argv[0] is the subcommand name. Returns the exit code. */
int tern_cmd_inspect(int argc, char **argv);
int tern_cmd_convert(int argc, char **argv);
int tern_cmd_quantize(int argc, char **argv);
int tern_cmd_synth(int argc, char **argv);
int tern_cmd_bench(int argc, char **argv);
int tern_bench_kernels_cuda(int argc, char **argv); /* bench_cuda.c: bench kernels --device cuda */
int tern_cmd_eval(int argc, char **argv);
int tern_cmd_run(int argc, char **argv);
int tern_cmd_chat(int argc, char **argv);
int tern_cmd_tokenize(int argc, char **argv);
int tern_cmd_detokenize(int argc, char **argv);
int tern_cmd_perplexity(int argc, char **argv);
/* `tern bench model ...` (src/cli/bench_model.c); argv[0] is "model".
 * `tern bench` dispatches `bench kernels` itself (cmd_bench.c). */
int tern_bench_model(int argc, char **argv);
/* `tern bench model --verify-k K ...` (src/cli/bench_verify.c): the speculative verify
 * pass over k + 1 positions against one decode step, k = 1..K. */
int tern_bench_verify(int argc, char **argv);
/* `tern bench gdn ...` (src/cli/bench_gdn.c); argv[0] is "gdn". */
int tern_bench_gdn(int argc, char **argv);
int tern_bench_sampler(int argc, char **argv);

/* Usage error: prints "tern <cmd>: <message>" and "try 'tern <cmd> --help'", returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...);
/* Runtime error from the library: prints "tern <cmd>: <tern_last_error()>", returns 1. */
int cli_lib_error(const char *cmd, tern_status st);
/* Strict number parsing: whole string, range-checked. false on error. */
bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* The median of v[0..n) (sorts v in place; n >= 1). */
double cli_median(double *v, int n);
bool cli_parse_f64(const char *s, double lo, double hi, double *out);
/* Parse "1,2,3" (also spaces/newlines) into a malloc'd int32 array. false on error. */
bool cli_parse_ids(const char *s, int32_t **out, size_t *n);
/* Read a whole stream into a NUL-terminated malloc'd buffer (free()); the
 * length (without the NUL) in *len when len != NULL. NULL when out of memory. */
char *cli_read_stream(FILE *f, size_t *len);
/* Index of the largest of v[0..n) (the first on ties): greedy decoding. */
int cli_argmax(const float *v, int n);
/* Is `a` one of the space-separated words in `list`? (option tables) */
bool cli_is_one_of(const char *a, const char *list);
/* Is this argument -h/--help? */
bool cli_is_help(const char *a);
/* KV cache type options: --cache-type T (keys and values), --cache-type-k / -ctk T,
 * --cache-type-v / -ctv T, T one of f32 f16 bf16 q8_0. argv[*i] is the option; on a
 * match the value is consumed. Returns 1 if taken, 0 if not such an option, 2 after
 * printing a usage error (exit code 2). */
int cli_parse_cache_type(const char *cmd, int argc, char **argv, int *i, tern_cache_type *k,
                         tern_cache_type *v);
/* --gdn-state f32|bf16 (tern_model_params.gdn_state): as cli_parse_cache_type. */
int cli_parse_gdn_state(const char *cmd, int argc, char **argv, int *i, int *gdn_state);
#define CLI_GDN_STATE_HELP \
    "  --gdn-state f32|bf16     qwen35 GDN recurrent states in bf16: half the state bytes\n" \
    "                           per session on cuda (default f32; docs/kernels.md)\n"
#define CLI_CACHE_TYPE_HELP                                                                       \
    "  --cache-type T           KV cache type: f32, f16 (default), bf16 or q8_0 (CPU and\n"      \
    "                           CUDA); --cache-type-k/-ctk, --cache-type-v/-ctv: one of them\n"
/* "KV cache f16: 1.2 MiB now, 512.0 MiB at ctx 32768" for stderr lines. */
void cli_cache_line(const tern_session *s, char *buf, size_t n);

/* Progress bar on stderr (only when stderr is a TTY or force is set);
 * quiet silences it. Usable as a tern_progress_fn with a cli_progress as user. */
typedef struct cli_progress {
    const char *label;
    bool quiet;
    double t0;
    int last_pct;
} cli_progress;
void cli_progress_init(cli_progress *p, const char *label, bool quiet);
bool cli_progress_cb(uint64_t done, uint64_t total, void *user);
void cli_progress_done(cli_progress *p);

/* The environment variables the CLI maps onto library parameters (cli_env.c; the
 * library reads none): cli_env_apply (main, before any subcommand) applies the
 * process-wide ones; cli_model_params_from_env = tern_model_params_default, then
 * cli_env_model_params, which maps the model's (TERN_REPACK, TERN_CUDA_*) onto params
 * already defaulted, before the command's options. */
void cli_env_apply(void);
void cli_env_model_params(tern_model_params *p);
void cli_model_params_from_env(tern_model_params *p);
#define CLI_ENV_HELP                                                                              \
    "environment (the CLI maps these onto library parameters; the library reads none):\n"       \
    "  TERN_MODEL=PATH     the model when -m is not given\n"                                    \
    "  TERN_ISA=LEVEL      kernels of a lower level: scalar, avx2, avx512, neon, i8mm\n"        \
    "  TERN_REPACK=0       keep ternary matrices in the file layout (as --no-repack)\n"         \
    "  TERN_SPIN_US=N      microseconds kernel threads spin before sleeping (default 100)\n"    \
    "  TERN_NEON_FP32=1    NEON fp32 products instead of int8 (Arm A/B runs)\n"                 \
    "  TERN_CUDA_GRAPH=0   CUDA: no step graphs (every step op by op; debug)\n"                 \
    "  TERN_CUDA_PDL=0     CUDA: no programmatic dependent launch (debug)\n"                    \
    "  TERN_CUDA_PROFILE=1 CUDA: per-op timing\n"                                               \
    "  TERN_CUDA_TC=int8   CUDA: prefill GEMM with 8-bit activations (default exact)\n"         \
    "  TERN_CUDA_GEMV=NAME CUDA: force a matmul family for A/B runs (tiled_multi, tiled, gemm,\n" \
    "                      t128k, t128, generic_sk, generic; old = t128)\n"                 \
    "  TERN_CUDA_GEMM=mma  CUDA: the mma.sync GEMM for batches > 8 (A/B; default wgmma);\n"   \
    "                      wgmma2: the wgmma GEMM in 2-CTA clusters (A/B, lab)\n"

/* The line subcommands that load a model end their help with. */
#define CLI_ENV_SEE "  environment: TERN_ISA, TERN_REPACK=0, TERN_SPIN_US, TERN_CUDA_* (see tern --help)\n"

/* The model used when -m is not given: $TERN_MODEL, else the embedded default
 * model installed next to the binary / in the source tree, else NULL. */
const char *cli_default_model(void);

#endif
