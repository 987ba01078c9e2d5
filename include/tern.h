/*
 * tern.h - the only public header of libtern, a C inference engine and kernel
 * library for ternary LLMs (weights in {-1,0,+1} with one fp16 scale per group
 * of 64 or 128, optionally with a blockwise Hadamard rotation folded in).
 *
 * Conventions
 *  - Every call that can fail returns a tern_status; TERN_OK is 0.
 *  - On failure the library stores a human-readable message (naming the file,
 *    key or tensor and the byte offset where that applies) in thread-local
 *    storage: read it with tern_last_error() on the same thread.
 *  - The library never exits and never prints unless a log callback is set.
 *  - Handles are opaque; each has a _free function that accepts NULL.
 *  - Weights stay packed and mmapped read-only; the library reports the bytes it
 *    allocates (tern_model_memory()).
 *
 * Sections: core, formats, kernels (ternary linear layers), model, text.
 *
 * A first program: open a model and its tokenizer (a GGUF file holds both), make
 * a session, evaluate a prompt, then sample greedily and evaluate each sampled
 * token (tern_generate does this loop with stop rules and streaming). The tests
 * compile and run this exact text.
 *
 *     #include <stdio.h>
 *     #include <string.h>
 *     #include "tern.h"
 *
 *     int main(int argc, char **argv) {
 *         const char *path = argc > 1 ? argv[1] : "model.gguf";
 *         const char *prompt = "The capital of France is";
 *         tern_model *m = NULL;
 *         tern_tokenizer *tok = NULL;
 *         tern_session *s = NULL;
 *         tern_sampler *smp = NULL;
 *         tern_tokens ids = {0};
 *         tern_str text = {0};
 *         tern_model_params mp;
 *         tern_model_params_default(&mp);
 *         tern_sampler_params sp;
 *         tern_sampler_params_default(&sp);
 *         sp.temperature = 0;                                  // greedy
 *         tern_status st = tern_model_load(path, &mp, &m);
 *         if (st == TERN_OK) st = tern_tokenizer_load(path, &tok);
 *         if (st == TERN_OK) st = tern_session_new(m, NULL, &s);  // NULL: default params
 *         if (st == TERN_OK) st = tern_sampler_new(&sp, tern_model_get_info(m)->n_vocab, &smp);
 *         if (st == TERN_OK) st = tern_tokenize(tok, prompt, strlen(prompt), false, &ids);
 *         if (st == TERN_OK) st = tern_session_eval(s, ids.ids, ids.n, NULL);
 *         for (int i = 0; st == TERN_OK && i < 16; i++) {
 *             int32_t id = tern_sampler_sample(smp, tern_session_logits(s));
 *             if (tern_token_is_eog(tok, id)) break;
 *             st = tern_detokenize(tok, &id, 1, &text);
 *             if (st == TERN_OK) st = tern_session_eval(s, &id, 1, NULL);
 *         }
 *         if (st == TERN_OK) printf("%s%s\n", prompt, text.data ? text.data : "");
 *         else fprintf(stderr, "%s: %s\n", tern_status_str(st), tern_last_error());
 *         tern_str_free(&text);
 *         tern_tokens_free(&ids);
 *         tern_sampler_free(smp);
 *         tern_session_free(s);
 *         tern_tokenizer_free(tok);
 *         tern_model_free(m);
 *         return st == TERN_OK ? 0 : 1;
 *     }
 */
#ifndef TERN_H
#define TERN_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* A flag one thread (or a signal handler) sets and the library polls: C11 atomic_int
 * (std::atomic<int> in C++, the same object). */
#ifdef __cplusplus
#include <atomic>
typedef std::atomic<int> tern_atomic_int;
#else
#include <stdatomic.h>
typedef atomic_int tern_atomic_int;
#endif

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TERN_BUILDING_LIB) && defined(__GNUC__)
#define TERN_API __attribute__((visibility("default")))
#else
#define TERN_API
#endif

/* ===================================================================== core */

typedef enum tern_status {
    TERN_OK = 0,
    TERN_ERR_INVALID_ARG = 1,   /* a bad argument from the caller (NULL, bad flag value) */
    TERN_ERR_IO = 2,            /* open/read/write/mmap failed */
    TERN_ERR_FORMAT = 3,        /* a file is malformed or breaks a contract */
    TERN_ERR_UNSUPPORTED = 4,   /* valid but not supported (unknown arch, type) */
    TERN_ERR_NOMEM = 5,         /* allocation failed */
    TERN_ERR_SHAPE = 6,         /* shapes or strides do not match */
    TERN_ERR_RANGE = 7,         /* an index (token id, position) out of range */
    TERN_ERR_CONTEXT_FULL = 8,  /* the context (KV cache) is full */
    TERN_ERR_INTERNAL = 9,      /* a bug: please report */
    TERN_ERR_CANCELLED = 10,    /* stopped by the caller (callback returned false) */
    TERN_ERR_NOT_FOUND = 11     /* a looked-up item (a metadata key) is absent */
} tern_status;

/* Short constant name of a status ("TERN_ERR_FORMAT"). */
TERN_API const char *tern_status_str(tern_status s);
/* Message of the last failure on this thread ("" when none). */
TERN_API const char *tern_last_error(void);
/* "MAJOR.MINOR.PATCH", from CMakeLists.txt project(VERSION) (the one place it is set). */
TERN_API const char *tern_version(void);

typedef enum tern_log_level {
    TERN_LOG_ERROR = 0, TERN_LOG_WARN = 1, TERN_LOG_INFO = 2, TERN_LOG_DEBUG = 3
} tern_log_level;
typedef void (*tern_log_fn)(tern_log_level level, const char *msg, void *user);
/* Set the log callback (NULL: silent, the default). Process-wide. */
TERN_API void tern_set_log(tern_log_fn fn, void *user, tern_log_level max_level);

/* Progress of long work (loading, converting, synthesizing): done/total units.
 * Return false to cancel (the call then fails with TERN_ERR_CANCELLED). */
typedef bool (*tern_progress_fn)(uint64_t done, uint64_t total, void *user);

/* ================================================================== formats */

/* Tensor element types. Values are tern's own; ggml ids are in the comments. */
typedef enum tern_dtype {
    TERN_DT_F32 = 0,        /* ggml 0 */
    TERN_DT_F16 = 1,        /* ggml 1 */
    TERN_DT_BF16 = 2,       /* ggml 30 */
    TERN_DT_Q8_0 = 3,       /* ggml 8: 32 per block, fp16 d + 32 x int8 (34 B) */
    TERN_DT_PQ2_0 = 4,      /* ggml 142: 128 per block, fp16 d + 32 B codes (34 B) */
    TERN_DT_PTQ1_0 = 5,     /* ggml 143: 128 per block, 24+2 B base-3 trits + fp16 d last (28 B) */
    TERN_DT_Q1_0 = 6,       /* ggml 41: 1-bit, 128 per block, fp16 d + 16 B signs (18 B) */
    TERN_DT_Q2_0 = 7,       /* ggml 42, PrismML fork layout: 128 per block, 34 B (same bytes as PQ2_0) */
    TERN_DT_Q2_0_G64 = 8,   /* ggml 42, mainline layout: 64 per block, fp16 d + 16 B (18 B) */
    TERN_DT_I8 = 9,         /* ggml 24 */
    TERN_DT_I16 = 10,       /* ggml 25 */
    TERN_DT_I32 = 11,       /* ggml 26 */
    TERN_DT_U32 = 12,       /* safetensors U32 (MLX words) */
    TERN_DT_F64 = 13,       /* ggml 28 */
    TERN_DT_COUNT
} tern_dtype;

TERN_API const char *tern_dtype_name(tern_dtype t);
/* Elements per block and bytes per block (1 and the element size for plain types). */
TERN_API size_t tern_dtype_block_elems(tern_dtype t);
TERN_API size_t tern_dtype_block_bytes(tern_dtype t);
/* True for the ternary/binary packed types (PQ2_0, PTQ1_0, Q2_0, Q2_0_G64, Q1_0). */
TERN_API bool tern_dtype_is_packed_ternary(tern_dtype t);

/* Lossless conversion of a ternary model (`tern convert`): IN and OUT are GGUF
 * files or MLX pack directories; to is "pq2_0", "ptq1_0", "q2_0" (fork g128),
 * "q2_0_g64" (mainline) or "mlx"; name sets general.name (NULL: keep). */
TERN_API tern_status tern_convert_model(const char *in, const char *out, const char *to,
                                        const char *name, tern_progress_fn progress, void *user);
/* Hugging Face checkpoint (qwen35 / qwen3 safetensors) to a ternary GGUF
 * (`tern quantize`): Hadamard signs from signs_path (GGUF or JSON), else drawn
 * from hadamard_seed when >= 0, else no rotation; name NULL: the dir name. */
TERN_API tern_status tern_quantize_model(const char *hf_dir, const char *out_gguf,
                                         const char *signs_path, int64_t hadamard_seed,
                                         const char *name, tern_progress_fn progress, void *user);
/* Random-weight model with real shapes (`tern synth`); n_layers 0: the preset's. */
TERN_API tern_status tern_synth_model(const char *preset, uint64_t seed, int n_layers,
                                      const char *out_gguf, tern_progress_fn progress, void *user);

/* ================================================================== kernels */

/* A ternary linear layer y = x W^T + b, W [n_out, n_in] with one fp16 scale per
 * group of 64 or 128 inputs (W[i,j] = trit * scale). The layer keeps its own
 * packed copy (PQ2_0 bytes for group 128, mainline Q2_0 for group 64; Q1_0 for
 * 1-bit rows), so the caller's buffers may be freed after creation. Scales are
 * stored in fp16 (as every ternary file format does): float scales are rounded. */
typedef struct tern_linear tern_linear;

/* trits: int8 [n_out, n_in] in {-1, 0, +1}; scales: float [n_out, n_in/group];
 * bias: float [n_out] or NULL. n_in must be a positive multiple of group (64|128).
 * Errors: TERN_ERR_SHAPE (bad sizes), TERN_ERR_INVALID_ARG (NULL, a trit out of range). */
TERN_API tern_status tern_linear_from_trits(const int8_t *trits, const float *scales,
                                            const float *bias, int64_t n_out, int64_t n_in,
                                            int group, tern_linear **out);
/* MLX affine 2-bit (mx.quantize bits=2): words uint32 [n_out, n_in/16], element j of a
 * word at bits 2j; scales and biases fp16 bits [n_out, n_in/group]. Refused with
 * TERN_ERR_FORMAT unless every code is in {0,1,2} and every bias == -scale exactly. */
TERN_API tern_status tern_linear_from_mlx_2bit(const uint32_t *words, const uint16_t *scales_f16,
                                               const uint16_t *biases_f16, const float *bias,
                                               int64_t n_out, int64_t n_in, int group,
                                               tern_linear **out);
/* Packed rows of a GGUF tensor: type PQ2_0, Q2_0 (128), Q2_0_G64 or Q1_0; `data` holds
 * n_out rows of n_in elements back to back (size bytes, checked). Ternary codes are
 * checked (code 3 is refused with TERN_ERR_FORMAT). */
TERN_API tern_status tern_linear_from_packed(tern_dtype type, const void *data, size_t size,
                                             const float *bias, int64_t n_out, int64_t n_in,
                                             tern_linear **out);
TERN_API void tern_linear_free(tern_linear *l);
TERN_API int64_t tern_linear_n_in(const tern_linear *l);
TERN_API int64_t tern_linear_n_out(const tern_linear *l);
/* y[b*y_stride + i] = sum_j W[i,j] x[b*x_stride + j] + bias[i], for b < batch.
 * x_stride >= n_in and y_stride >= n_out (elements), else TERN_ERR_SHAPE; batch 0
 * returns TERN_OK without touching x or y. Thread-safe for distinct y; runs on the
 * library's kernel threads (tern_set_threads). */
TERN_API tern_status tern_linear_forward(const tern_linear *l, const float *x, size_t batch,
                                         size_t x_stride, float *y, size_t y_stride);
/* W as float [n_out, n_in] (for checks); out must hold n_out*n_in floats. */
TERN_API tern_status tern_linear_dequantize(const tern_linear *l, float *out);

/* Threads used by tern_linear_forward (default 1; 0 = all online cores). */
TERN_API tern_status tern_set_threads(int n_threads);
TERN_API int tern_get_threads(void);
/* The kernel instruction set in use ("scalar", "avx2", "avx512", "neon", "i8mm"):
 * the best this CPU and OS support unless tern_set_kernel_isa chose another. */
TERN_API const char *tern_kernel_isa(void);
/* Process-wide: run the kernels of the named level (the names above; NULL or "" =
 * the best). TERN_ERR_INVALID_ARG for an unknown name, TERN_ERR_UNSUPPORTED (naming
 * what this machine has; the level in use unchanged) for a level this CPU or OS
 * lacks. Call it before loading models or creating layers, never while any kernel
 * runs. The CLI maps the environment variable TERN_ISA onto it. */
TERN_API tern_status tern_set_kernel_isa(const char *name);
/* Process-wide: how long (microseconds, 0..1000000; default 100) a kernel thread
 * spins waiting for work, and a caller for its helpers, before sleeping. 0 sleeps
 * at once (least CPU burnt, a wake-up per kernel). Applies to the thread pools made
 * afterwards (models loaded later, tern_set_threads to a new count). The CLI maps
 * the environment variable TERN_SPIN_US onto it. */
TERN_API tern_status tern_set_spin_us(int us);
/* One ternary tensor of a GGUF file (PQ2_0, PTQ1_0, Q2_0 g128/g64, Q1_0; 2-D,
 * ne[0] = n_in) as a layer, the matrix as stored (a Hadamard-rotated model's
 * matrices stay rotated); bias float [n_out] or NULL. The file is closed on return.
 * Errors: the GGUF reader's, TERN_ERR_FORMAT (no such tensor), TERN_ERR_UNSUPPORTED
 * (a type that is not ternary/binary), TERN_ERR_SHAPE. */
TERN_API tern_status tern_linear_from_gguf(const char *path, const char *tensor, const float *bias,
                                           tern_linear **out);

/* ==================================================================== model */

typedef struct tern_model tern_model;
typedef struct tern_session tern_session;

typedef struct tern_model_params {
    int n_threads;                  /* worker threads for kernels; 0 = all online cores */
    tern_progress_fn progress;      /* load progress (may be NULL) */
    void *progress_user;
    bool repack;                    /* copy ternary matrices into the kernels' fastest
                                       layout when one exists (on AVX-512 CPUs) and use
                                       it for every product; the file's pages of those
                                       matrices are then dropped from the mapping, so RAM
                                       stays about the weights' size (counted in alloc_bytes).
                                       Default (tern_model_params_default): true. The CLI
                                       maps TERN_REPACK=0 onto false */
    const char *device;             /* "cpu" (NULL: cpu) or "cuda": where the weights live and
                                       the forward pass runs. "cuda" uploads the weights (same
                                       packed bytes) to GPU 0 at load; sessions then keep their
                                       caches and states there. TERN_ERR_UNSUPPORTED when the
                                       library has no CUDA back-end or there is no device;
                                       repack is ignored on "cuda" */
    int tp;                         /* tensor parallel: 0 or 1 = off; N = N shards of `device`
                                       in this process (heads, FFN and vocabulary split, two
                                       all-reduces per layer; docs/multi-gpu.md). Host
                                       back-ends only for now; repack is ignored.
                                       TERN_ERR_UNSUPPORTED names a dimension that does not
                                       split N ways */
    int gdn_state;                  /* TERN_GDN_STATE_F32 (0, default): the GDN layers' recurrent
                                       states (qwen35) in fp32; TERN_GDN_STATE_BF16: stored in
                                       bf16 (rounded to nearest even after every call; updated in
                                       fp32), half the state bytes per session on cuda (more
                                       sessions fit); the CPU rounds the same way but keeps fp32
                                       slots (for measuring the error). docs/kernels.md */
    /* CUDA back-end (ignored by the others) */
    int cuda_prefill;               /* TERN_CUDA_PREFILL_EXACT (0, default): the prefill GEMM
                                       on both activation planes (the GEMV's integers);
                                       TERN_CUDA_PREFILL_INT8: 8-bit activations (the hi
                                       plane only; about half the GEMM time, less exact) */
    bool cuda_graphs;               /* default true: single-token steps recorded and replayed
                                       as CUDA graphs; false: every step op by op (debug) */
    bool cuda_pdl;                  /* default true: programmatic dependent launch; false:
                                       plain stream order (debug) */
    bool cuda_profile;              /* default false: per-op timing (bench --profile) */
    const char *cuda_matmul;        /* NULL: the matmul chooser decides; else a kernel family
                                       forced for A/B runs ("tiled_multi", "tiled", "gemm",
                                       "t128k", "t128", "generic_sk", "generic", or
                                       "gemm_nosplit": the default with the GEMM unsplit, "wgmma" the
                                       default, "mma" it with the mma.sync GEMM, "wgmma2" it with the
                                       wgmma GEMM in 2-CTA clusters; logged once;
                                       another name is TERN_ERR_INVALID_ARG at load) */
    bool cuda_persistent;           /* default false (for now): single-token steps of a qwen3
                                       model run as one persistent kernel (docs/persistent.md);
                                       other models and steps take the per-op path */
    bool cuda_gdn_chunk;            /* default true: GDN prefill calls (qwen35) of 16 rows or more
                                       by the chunked form on tensor cores (tc_gdn_chunk.cu);
                                       false: the token scan (docs/kernels.md). The CLI maps
                                       TERN_CUDA_GDN=scan|chunk onto it */
    bool batch_invariant;           /* default false. CUDA: a session's logits are the same bits
                                       whatever other sessions share its batched decode pass
                                       (tern_session_eval_batch, up to 64) and alone: every
                                       ternary product takes the tensor-core GEMM at every
                                       batch, its K splits fixed by the matrix's shape (greedy
                                       replies under load then equal the same requests alone).
                                       Costs decode speed at small batches (docs/kernels.md).
                                       Not with cuda_persistent (TERN_ERR_INVALID_ARG). The CPU
                                       back-end ignores it */
} tern_model_params;
#define TERN_GDN_STATE_F32 0
#define TERN_GDN_STATE_BF16 1
#define TERN_CUDA_PREFILL_EXACT 0
#define TERN_CUDA_PREFILL_INT8 1
TERN_API void tern_model_params_default(tern_model_params *p);

/* Load a model: a GGUF file (qwen35 / qwen3; PQ2_0, PTQ1_0, Q2_0 g128/g64, Q1_0)
 * or an MLX pack directory (config.json + hadamard.json + model.safetensors).
 * Ternary weights stay in the read-only mapping where the layout allows. */
TERN_API tern_status tern_model_load(const char *path, const tern_model_params *p, tern_model **out);
TERN_API void tern_model_free(tern_model *m);

typedef struct tern_model_info {
    const char *arch;               /* "qwen35" or "qwen3" */
    const char *name;               /* general.name or "" */
    int n_layers, n_embd, n_ff, n_vocab;
    int n_head, n_head_kv, head_dim;
    int n_ctx_train;                /* context_length from the file (0 if absent) */
    bool has_hadamard;
    uint64_t weight_bytes;          /* bytes of weights used at decode (mapped or repacked) */
    uint64_t decode_bytes_per_token;/* weight bytes read per decoded token (all but the embedding) */
    uint64_t matmul_weights;        /* matrix elements multiplied per decoded token (all matrices but
                                       the embedding table's lookup; the head counted) */
    uint64_t alloc_bytes;           /* bytes the model allocated (repacks, converted tensors) */
    const char *device;             /* "cpu" or "cuda" */
    const char *device_name;        /* the GPU's description ("" on the CPU) */
    uint64_t device_bytes;          /* bytes the model holds in GPU memory (0 on the CPU) */
    const char *format;             /* the container: "gguf" or "mlx" (an MLX pack directory) */
    const char *weight_type;        /* type of the ternary matrices as loaded (layer 0's FFN
                                       gate: "PQ2_0", "Q2_0_G64", "Q1_0", ...) */
} tern_model_info;
/* The back-ends this library knows, i in [0, tern_backend_count()): its name (the
 * `device` of tern_model_params, "cuda" also as "cuda:N"), whether it is compiled in,
 * whether it is present on this machine, and a description ("avx512", "NVIDIA H200",
 * "no CUDA device"...). TERN_ERR_RANGE for an i out of range. */
TERN_API int tern_backend_count(void);
TERN_API tern_status tern_backend_describe(int i, const char **name, bool *compiled,
                                           bool *present, const char **what);
TERN_API const tern_model_info *tern_model_get_info(const tern_model *m);
/* How many sessions one tern_session_eval_batch() call should advance on this
 * model's back-end (a server's decode group): 5 on the CPU (the largest batch that
 * stays bit-identical to stepping alone), 64 on CUDA; 1 for NULL. */
TERN_API int tern_model_batch_hint(const tern_model *m);
/* The model file's metadata (GGUF key/value pairs; an MLX pack has none), e.g. the
 * recommended sampling of llama.cpp's general.sampling.* keys. TERN_ERR_NOT_FOUND
 * when the key is absent, TERN_ERR_FORMAT (naming the key and its type) when its
 * value has another type; *out is set only on TERN_OK. _f32 takes a float or an
 * integer value, _i64 an integer that fits, _str a string (appended to *out). */
TERN_API tern_status tern_model_meta_f32(const tern_model *m, const char *key, float *out);
TERN_API tern_status tern_model_meta_i64(const tern_model *m, const char *key, int64_t *out);
/* _bool: a BOOL value, e.g. tern.chat.thinking (whether a chat turns the template's
 * thinking on when the caller does not say). */
TERN_API tern_status tern_model_meta_bool(const tern_model *m, const char *key, bool *out);
struct tern_str;                    /* below (text) */
TERN_API tern_status tern_model_meta_str(const tern_model *m, const char *key, struct tern_str *out);

/* KV cache storage type (keys and values chosen separately). f16/bf16 halve the
 * cache of f32, q8_0 (blocks of 32 int8 with an fp16 scale, 34 bytes) takes 0.53 of
 * f16 (head_dim must be a multiple of 32); the attention reads the stored type
 * directly. DEFAULT: f16 where the back-end reads it (CPU and CUDA both read all four),
 * else f32. The GDN recurrent state is always f32. */
typedef enum tern_cache_type {
    TERN_CACHE_DEFAULT = 0, TERN_CACHE_F32 = 1, TERN_CACHE_F16 = 2, TERN_CACHE_BF16 = 3,
    TERN_CACHE_Q8_0 = 4
} tern_cache_type;
/* "f32", "f16", "bf16", "q8_0" ("default" for DEFAULT; NULL when out of range). */
TERN_API const char *tern_cache_type_name(tern_cache_type t);
/* The inverse (exact names above); TERN_ERR_INVALID_ARG naming the choices otherwise. */
TERN_API tern_status tern_cache_type_parse(const char *name, tern_cache_type *out);

typedef struct tern_session_params {
    int n_ctx;                      /* KV cache positions (0 = min(4096, n_ctx_train)) */
    int n_chunk;                    /* prefill chunk size (0 = the back-end's: 64 on the CPU,
                                     * 512 on a GPU); 1 = token-by-token */
    tern_cache_type cache_type_k;   /* key cache type (0 = TERN_CACHE_DEFAULT) */
    tern_cache_type cache_type_v;   /* value cache type (0 = TERN_CACHE_DEFAULT) */
} tern_session_params;
TERN_API void tern_session_params_default(tern_session_params *p);
TERN_API tern_status tern_session_new(tern_model *m, const tern_session_params *p, tern_session **out);
TERN_API void tern_session_free(tern_session *s);
/* Forget all tokens (KV cache and GDN states back to empty). */
TERN_API void tern_session_reset(tern_session *s);
/* Number of tokens evaluated so far, and the capacity. */
TERN_API int tern_session_pos(const tern_session *s);
/* The prefill chunk size the session uses (n_chunk resolved; 0 for NULL). */
TERN_API int tern_session_chunk(const tern_session *s);
TERN_API int tern_session_n_ctx(const tern_session *s);
/* Forget every token after the first n_pos (0 <= n_pos <= pos): the KV cache is
 * rewound, so evaluation continues at position n_pos. Only for models without
 * recurrent state (attention only, e.g. qwen3): a GDN state cannot be rewound, and
 * TERN_ERR_UNSUPPORTED is returned (session unchanged) unless n_pos == pos.
 * TERN_ERR_RANGE for n_pos outside [0, pos]. The logits are not restored: evaluate
 * at least one token before reading them. */
TERN_API tern_status tern_session_truncate(tern_session *s, int n_pos);
/* Whether the model keeps recurrent (GDN) state, i.e. tern_session_truncate works
 * only at the current position. */
TERN_API bool tern_session_can_truncate(const tern_session *s);
/* Snapshots: going back to an earlier position on any model, recurrent state included
 * (a server's prefix cache on qwen35). A snapshot holds, in host memory (or the
 * back-end's: tern_session_snapshot_take_in below), what the session keeps beside its
 * KV cache rows: the GDN conv and recurrent states of every layer, the position and the
 * last logits row (tern_session_snapshot_bytes). The KV
 * cache is not copied: the snapshot restores only onto the session it was taken from,
 * and only while that session's tokens before the snapshot's position are still the
 * ones evaluated then (rewinding to an earlier snapshot and evaluating other tokens
 * over that position voids it). Restoring sets the position, the states and the
 * logits back to what they were when taken: the following evaluation gives exactly
 * what it gave then. Errors: TERN_ERR_UNSUPPORTED on a tensor-parallel model,
 * TERN_ERR_NOMEM; restore: TERN_ERR_RANGE when the snapshot's position is beyond the
 * session's, TERN_ERR_INVALID_ARG when it is of another session or void (the session
 * is unchanged on these); a device error while copying leaves the session reset. */
typedef struct tern_session_snapshot tern_session_snapshot;
TERN_API tern_status tern_session_snapshot_take(const tern_session *s, tern_session_snapshot **out);
TERN_API tern_status tern_session_snapshot_restore(tern_session *s, const tern_session_snapshot *snap);
TERN_API void tern_session_snapshot_free(tern_session_snapshot *snap);
/* The position the snapshot was taken at, and the bytes it holds, host and back-end
 * memory together (0 for NULL). */
TERN_API int tern_session_snapshot_pos(const tern_session_snapshot *snap);
TERN_API uint64_t tern_session_snapshot_bytes(const tern_session_snapshot *snap);
/* Where a snapshot keeps the GDN states. HOST: host memory (tern_session_snapshot_take;
 * on a GPU a download over PCIe to take, an upload to restore). BACKEND: the back-end's
 * own memory: on CUDA device memory (the back-end's allocator) filled by a
 * device-to-device copy queued on the session's stream, so taking and restoring move
 * nothing over PCIe but the logits row, which stays on the host; on the CPU the host
 * copy as HOST. A BACKEND snapshot must be freed before its model. Otherwise as
 * tern_session_snapshot_take (TERN_ERR_NOMEM also when the device memory is short;
 * TERN_ERR_INVALID_ARG for another value of where). */
typedef enum tern_snapshot_memory { TERN_SNAPSHOT_HOST = 0, TERN_SNAPSHOT_BACKEND = 1 } tern_snapshot_memory;
TERN_API tern_status tern_session_snapshot_take_in(const tern_session *s, tern_snapshot_memory where,
                                                   tern_session_snapshot **out);
/* The part of tern_session_snapshot_bytes in the back-end's device memory (0: all on
 * the host, as every snapshot on the CPU). */
TERN_API uint64_t tern_session_snapshot_backend_bytes(const tern_session_snapshot *snap);
/* Take a snapshot of s into snap, reusing its storage (the same memory, nothing allocated
 * or freed: on a GPU no allocation and no device-wide sync of a free); snap may have been
 * taken from any session of s's model and is replaced. TERN_ERR_INVALID_ARG for a
 * snapshot of another model (unchanged); after another error snap is void (restore
 * refuses it; free it). */
TERN_API tern_status tern_session_snapshot_retake(const tern_session *s, tern_session_snapshot *snap);
/* Make dst hold what src holds: position, KV cache rows [0, pos), GDN states and the
 * last logits row (n > 1 choices sharing one evaluated prompt). Both sessions must be
 * of the same model with the same KV cache types (TERN_ERR_INVALID_ARG), src's
 * position must fit dst's context (TERN_ERR_CONTEXT_FULL); dst's snapshots are void
 * afterwards. TERN_ERR_UNSUPPORTED on a tensor-parallel model. A device error while
 * copying leaves dst reset. Evaluating dst afterwards gives exactly what evaluating src
 * would. */
TERN_API tern_status tern_session_copy(tern_session *dst, const tern_session *src);
/* Evaluate n tokens after the current position. all_logits, when not NULL,
 * receives n x n_vocab floats (row t = logits after token t). The last row is
 * always available afterwards through tern_session_logits(). Token ids are
 * bounds-checked (TERN_ERR_RANGE); a batch that does not fit the context fails
 * with TERN_ERR_CONTEXT_FULL before any work is done. Sessions of one model may
 * be evaluated from several threads; the calls are serialised per model (each
 * uses all the model's kernel threads). One session must not be used by two
 * threads at once. */
TERN_API tern_status tern_session_eval(tern_session *s, const int32_t *tokens, size_t n,
                                       float *all_logits);
/* Batched decode: advance n sessions by one token each in one forward pass, so the
 * weights are read once for all of them (continuous batching). s[i] gets tokens[i]
 * at its own position; the sessions must be distinct and of the same model. Every
 * session pointer, model, token id (TERN_ERR_RANGE) and context (TERN_ERR_CONTEXT_FULL
 * when any member is full) is checked before any work: on such an error no session
 * changes. logits, when not NULL, receives n x n_vocab floats (row i = session i);
 * in any case tern_session_logits(s[i]) holds row i afterwards. n == 1 is exactly
 * tern_session_eval(s[0], tokens, 1, logits). The pass borrows the scratch of the
 * member with the largest n_chunk (default 64) and runs in pieces of at most that
 * many sessions; a device error in a later piece leaves the earlier pieces advanced.
 * Results match each session evaluated alone within the kernels' batch-size effects
 * (docs/architecture.md). Thread-safety as tern_session_eval: serialised per model,
 * and no member may be used by another thread during the call. */
TERN_API tern_status tern_session_eval_batch(tern_session *const *s, const int32_t *tokens,
                                             size_t n, float *logits);
TERN_API const float *tern_session_logits(const tern_session *s);
/* Speculative decoding, the target's side. tern_session_verify evaluates n tokens of the
 * session's sequence (the pending token and k drafts: n = k + 1) in one pass, so the
 * weights are read once, and writes every row's logits into logits (n x n_vocab, row t =
 * the logits after token t; tern_session_logits() holds the last). Each row is
 * bit-identical to evaluating the tokens one at a time with tern_session_eval (the CPU
 * pass walks the GDN recurrence token by token instead of the block scan; a back-end that
 * cannot promise that, CUDA for now, runs the rows as single-token steps), so
 * greedy text with speculation equals plain greedy text. Then, before any other call on
 * the session, tern_session_verify_keep keeps the first n_keep (0 <= n_keep <= n) of
 * them: the position becomes pos0 + n_keep and the logits those after the last kept
 * token (with n_keep == 0 those before the verify). Models without recurrent state just
 * move the position back (keep reads the kept row from the logits buffer given to the
 * verify: leave it unchanged in between). On qwen35 (GDN layers) the verify first copies the GDN conv and
 * recurrent states into one snapshot kept with the session (the back-end's memory:
 * device memory on CUDA; retaken into the same storage every verify), and keeping fewer
 * than n restores it and evaluates the kept tokens again: one set of states
 * (tern_session_verify_bytes: 151 MB on the 27B in fp32) instead of one per drafted
 * position. Errors as tern_session_eval (checked before any work); keep:
 * TERN_ERR_INVALID_ARG when the session was not just verified, TERN_ERR_RANGE for
 * n_keep outside [0, n]. TERN_ERR_UNSUPPORTED on a tensor-parallel model.
 * logits may be NULL: the rows stay in the session (on CUDA in the page-locked buffer the
 * device wrote them to: no host copy) and tern_session_verify_rows() points at them. */
TERN_API tern_status tern_session_verify(tern_session *s, const int32_t *tokens, size_t n, float *logits);
TERN_API tern_status tern_session_verify_keep(tern_session *s, int n_keep);
/* The rows of the verify just made (n x n_vocab: the buffer given to it, or the session's
 * own when it was given NULL); NULL once it is kept (tern_session_verify_keep) or when
 * there is none. Valid until the next call on the session. */
TERN_API const float *tern_session_verify_rows(const tern_session *s);
/* Bytes of the rollback snapshot a verify keeps (0 on models without GDN layers). */
TERN_API uint64_t tern_session_verify_bytes(const tern_session *s);
/* Bytes this session allocated (KV cache, recurrent states, scratch). */
TERN_API uint64_t tern_session_memory(const tern_session *s);
/* Bytes the model's back-end can still give now, the figure tern_session_new's fit check
 * compares a session with: on a GPU the device's free memory; on the host MemAvailable
 * less the mapped weights and the full size of this model's sessions (their pages are
 * backed as positions fill). 0 when unknown (no check is possible). For a server's
 * admission and start-up checks. */
TERN_API uint64_t tern_model_memory_free(const tern_model *m);
/* Bytes of the session's KV cache holding n_pos positions (clamped to [0, n_ctx]):
 * n_pos = tern_session_pos() is what is in use (on the CPU the pages behind it),
 * n_pos = tern_session_n_ctx() what the full context takes. */
TERN_API uint64_t tern_session_cache_bytes(const tern_session *s, int n_pos);
/* The session's resolved key (value = false) or value (value = true) cache type. */
TERN_API tern_cache_type tern_session_cache_type(const tern_session *s, bool value);

/* ---- embeddings: the final hidden state, after the output norm and before the LM head
 * (the rows the head multiplies), per token or pooled over the tokens of one call. */
typedef enum tern_pooling {
    TERN_POOLING_NONE = 0,          /* every token's row */
    TERN_POOLING_MEAN = 1,          /* the mean of the rows (summed in double) */
    TERN_POOLING_LAST = 2,          /* the last token's row */
    TERN_POOLING_CLS = 3            /* the first token's row */
} tern_pooling;
/* "none", "mean", "last", "cls" (NULL when out of range); _parse: the inverse
 * (TERN_ERR_INVALID_ARG naming the choices otherwise). */
TERN_API const char *tern_pooling_name(tern_pooling p);
TERN_API tern_status tern_pooling_parse(const char *name, tern_pooling *out);
/* Evaluate n tokens after the current position as tern_session_eval does (same checks,
 * chunks, locking; the session advances by n), but the step stops before the head:
 * hidden receives n x n_embd floats, row t the output norm's result at token t. No
 * logits are computed: tern_session_logits() keeps its earlier row (evaluate a token with
 * tern_session_eval before reading it). CPU and CUDA; TERN_ERR_UNSUPPORTED on a
 * tensor-parallel model. */
TERN_API tern_status tern_session_eval_hidden(tern_session *s, const int32_t *tokens, size_t n,
                                              float *hidden);
/* An embedding: tern_session_eval_hidden over the n tokens (n >= 1, after what the session
 * holds: reset it first for a text alone), pooled over those n rows; normalize: divided
 * by its Euclidean norm (a zero vector stays zero). out: n_embd floats (n x n_embd for
 * TERN_POOLING_NONE, each row normalised). Needs chunk x n_embd floats of host memory. */
TERN_API tern_status tern_session_embed(tern_session *s, const int32_t *tokens, size_t n,
                                        tern_pooling pooling, bool normalize, float *out);

/* ===================================================================== text */

/* A growable byte string (always NUL-terminated when data != NULL) and a growable
 * token array. The text API appends to them; zero-initialise before first use,
 * release with the _free functions. */
typedef struct tern_str { char *data; size_t len, cap; } tern_str;
typedef struct tern_tokens { int32_t *ids; size_t n, cap; } tern_tokens;
TERN_API void tern_str_free(tern_str *s);
TERN_API void tern_tokens_free(tern_tokens *t);
TERN_API tern_status tern_str_append(tern_str *s, const char *data, size_t len);
TERN_API tern_status tern_tokens_push(tern_tokens *t, int32_t id);
/* Append s[0..n) to out with each byte that does not start a valid UTF-8
 * sequence (overlong, surrogate, above U+10FFFF, truncated, stray continuation)
 * and each NUL byte replaced by U+FFFD, so the result is valid UTF-8 for JSON
 * and C strings. Valid sequences are copied unchanged. */
TERN_API tern_status tern_utf8_sanitize(const char *s, size_t n, tern_str *out);

/* Byte-level BPE tokenizer (GPT-2 byte mapping, merges by rank, NFC, the Qwen2 /
 * Qwen3.5 split regexes), as Hugging Face `tokenizers` encodes. */
typedef struct tern_tokenizer tern_tokenizer;

/* token types (GGUF tokenizer.ggml.token_type values) */
typedef enum tern_token_type {
    TERN_TOKEN_UNDEFINED = 0, TERN_TOKEN_NORMAL = 1, TERN_TOKEN_UNKNOWN = 2,
    TERN_TOKEN_CONTROL = 3, TERN_TOKEN_USER_DEFINED = 4, TERN_TOKEN_UNUSED = 5,
    TERN_TOKEN_BYTE = 6
} tern_token_type;

/* Load from a GGUF file (tokenizer.ggml.* keys), a tokenizer.json file, or a
 * directory holding tokenizer.json (an MLX pack). */
TERN_API tern_status tern_tokenizer_load(const char *path, tern_tokenizer **out);
/* Same, from tokenizer.json text in memory (name is used in messages). */
TERN_API tern_status tern_tokenizer_load_json(const char *json, size_t len, const char *name,
                                              tern_tokenizer **out);
TERN_API void tern_tokenizer_free(tern_tokenizer *t);

/* Encode `len` bytes of text, appending ids to *out. No BOS is added.
 * parse_special = true: added tokens (control and user-defined, e.g. <|im_start|>,
 *   <think>) are matched in the raw text leftmost-longest, as HF does.
 * parse_special = false: the text is plain text; no added token is ever produced
 *   (use it for user input so control tokens cannot be injected). */
TERN_API tern_status tern_tokenize(const tern_tokenizer *t, const char *text, size_t len,
                                   bool parse_special, tern_tokens *out);
/* Decode ids to bytes, appended to *out (byte-exact: every token's bytes). */
TERN_API tern_status tern_detokenize(const tern_tokenizer *t, const int32_t *ids, size_t n,
                                     tern_str *out);
/* The raw bytes of one token (NULL if id is out of range). */
TERN_API const char *tern_token_bytes(const tern_tokenizer *t, int32_t id, size_t *len);
/* Id of an exact token string (mapped form for BPE tokens, e.g. "Ġthe"; literal
 * text for added tokens), or -1. */
TERN_API int32_t tern_token_lookup(const tern_tokenizer *t, const char *s, size_t len);
TERN_API tern_token_type tern_token_get_type(const tern_tokenizer *t, int32_t id);
TERN_API int32_t tern_tokenizer_n_vocab(const tern_tokenizer *t);
TERN_API int32_t tern_tokenizer_bos(const tern_tokenizer *t);   /* -1 if none */
TERN_API int32_t tern_tokenizer_eos(const tern_tokenizer *t);   /* -1 if none */
/* End of generation: eos, <|im_end|>, <|endoftext|> and other end markers. */
TERN_API bool tern_token_is_eog(const tern_tokenizer *t, int32_t id);
/* "qwen2" or "qwen35" (the split regex in use). */
TERN_API const char *tern_tokenizer_pre(const tern_tokenizer *t);
/* TERN_OK when a and b tokenize and detokenize alike: the same vocabulary (every token's
 * text and type), merges (pairs and ranks), end-of-generation set, bos / eos / pad and
 * pre-tokenizer; otherwise TERN_ERR_INVALID_ARG whose message (tern_last_error) names the
 * first difference ("the tokenizers differ: token 151643 is ... vs ..."). */
TERN_API tern_status tern_tokenizer_compare(const tern_tokenizer *a, const tern_tokenizer *b);
/* The chat template text from the file (NULL if none). */
TERN_API const char *tern_tokenizer_chat_template(const tern_tokenizer *t);

/* Streaming detokenizer: feeds token bytes and emits only complete UTF-8
 * sequences; an incomplete one is held back until a later token completes it.
 * Zero-initialise; flush at the end emits whatever is still held. */
typedef struct tern_detok_stream { unsigned char held[8]; int n_held; } tern_detok_stream;
TERN_API tern_status tern_detok_stream_push(tern_detok_stream *st, const tern_tokenizer *t,
                                            int32_t id, tern_str *out);
TERN_API tern_status tern_detok_stream_push_bytes(tern_detok_stream *st, const char *b, size_t n,
                                                  tern_str *out);
TERN_API tern_status tern_detok_stream_flush(tern_detok_stream *st, tern_str *out);

/* ---- chat (Qwen ChatML). Renders what the official Jinja templates render. */
typedef enum tern_chat_format {
    TERN_CHAT_QWEN3 = 0,    /* Qwen3: Hermes JSON tool calls */
    TERN_CHAT_QWEN35 = 1    /* Qwen3.5: XML function tool calls, <think>\n prompt */
} tern_chat_format;
/* The format for a tokenizer: qwen35 pre-tokenizer -> QWEN35, else QWEN3. */
TERN_API tern_chat_format tern_chat_format_for(const tern_tokenizer *t);

typedef struct tern_tool_call {
    const char *name;
    const char *arguments;          /* a JSON object, as text; rendered as the templates render
                                     * a mapping (Python json.dumps style / XML parameters) */
} tern_tool_call;
typedef struct tern_chat_msg {
    const char *role;               /* "system", "user", "assistant", "tool" */
    const char *content;            /* NULL = empty */
    const char *reasoning_content;  /* assistant only; NULL = none (then <think> in content is parsed) */
    const tern_tool_call *tool_calls; /* assistant only */
    size_t n_tool_calls;
} tern_chat_msg;
typedef struct tern_chat_opts {
    const char *tools_json;         /* JSON array of tool definitions, or NULL */
    bool add_generation_prompt;
    bool enable_thinking;           /* false: the prompt ends with an empty think block */
} tern_chat_opts;
/* Render messages to prompt text (append to *out). Fails with INVALID_ARG on
 * what the template rejects (unknown role, bad JSON, no user query for Qwen3.5). */
TERN_API tern_status tern_chat_render(tern_chat_format fmt, const tern_chat_msg *msgs, size_t n,
                                      const tern_chat_opts *opts, tern_str *out);

/* Render and tokenize in one step, the safe way for untrusted message text:
 * added tokens (<|im_start|>, <think>, ...) are produced only by the template's
 * own markup; inside contents, reasoning, names and JSON they are plain text.
 * Otherwise the ids equal tern_tokenize(render(...), parse_special = true). */
TERN_API tern_status tern_chat_tokenize(const tern_tokenizer *t, tern_chat_format fmt, const tern_chat_msg *msgs,
                                        size_t n, const tern_chat_opts *opts, tern_tokens *out);

/* A parsed assistant reply. Strings are owned by the struct. */
typedef struct tern_chat_reply {
    char *reasoning;                /* text inside <think>...</think> ("" if none) */
    char *content;                  /* the visible answer (tool call markup removed) */
    tern_tool_call *tool_calls;     /* name/arguments (arguments as compact JSON) */
    size_t n_tool_calls;
} tern_chat_reply;
/* Parse generated text (what follows the generation prompt). thinking_open:
 * the prompt ended inside <think> (Qwen3.5 thinking mode), so text before
 * </think> is reasoning even without an opening tag. */
TERN_API tern_status tern_chat_parse(tern_chat_format fmt, const char *text, size_t len,
                                     bool thinking_open, tern_chat_reply *out);
TERN_API void tern_chat_reply_free(tern_chat_reply *r);

/* ---- sampling */
typedef struct tern_sampler_params {
    float temperature;              /* <= 0: greedy (argmax) */
    int top_k;                      /* 0: off */
    float top_p;                    /* 1: off */
    float min_p;                    /* 0: off */
    float repeat_penalty;           /* 1: off (llama.cpp style: logit/p if > 0 else logit*p) */
    float presence_penalty;         /* 0: off (OpenAI style) */
    float frequency_penalty;        /* 0: off */
    int penalty_last_n;             /* window for the penalties (0 = 64) */
    uint64_t seed;
    /* llama.cpp's samplers (defaults: off). min_keep: top_p, min_p, typical_p and XTC keep at
     * least this many candidates (0 = 1). */
    int min_keep;
    float typical_p;                /* 1: off; locally typical: the tokens whose -log p is closest to
                                     * the entropy, smallest set with mass >= typical_p */
    float top_n_sigma;              /* <= 0: off; keep logits >= max - n * (their standard deviation) */
    float xtc_probability;          /* 0: off; with this probability, of the tokens with p >= */
    float xtc_threshold;            /* xtc_threshold (when two or more) all but the least likely go */
    float dry_multiplier;           /* 0: off; DRY: a token that would extend a repeat of n >= */
    float dry_base;                 /* dry_allowed_length tokens loses dry_multiplier * */
    int dry_allowed_length;         /* dry_base^(n - dry_allowed_length) from its logit */
    int dry_penalty_last_n;         /* tokens DRY looks back over (0: 1024) */
    const int32_t *dry_breakers;    /* token ids a repeat cannot extend across (copied by */
    int n_dry_breakers;             /* tern_sampler_new; NULL: none) */
    const char *samplers;           /* NULL: the default order; else the stages to run, in order,
                                     * separated by ';' (llama.cpp's names: dry, top_k, typ_p, top_p,
                                     * min_p, xtc, top_n_sigma, temperature; copied). Penalties come
                                     * first; temperature <= 0 is greedy after the penalties and DRY */
} tern_sampler_params;
TERN_API void tern_sampler_params_default(tern_sampler_params *p);
typedef struct tern_sampler tern_sampler;
TERN_API tern_status tern_sampler_new(const tern_sampler_params *p, int n_vocab, tern_sampler **out);
TERN_API void tern_sampler_free(tern_sampler *s);
/* Choose the next token from logits[n_vocab] (not modified). */
TERN_API int32_t tern_sampler_sample(tern_sampler *s, const float *logits);
/* Speculative decoding: the same choice with a drafted id in hand (a drafter that proposes
 * one id with certainty: prompt lookup, a greedy draft model). At temperature > 0 the
 * standard rejection rule for such a drafter: the draft is returned with probability p(draft)
 * under this sampler's final distribution (penalties, top-k / top-p / min-p / ... and the
 * temperature applied exactly as tern_sampler_sample applies them), otherwise an id drawn
 * from that distribution with the draft removed (renormalised); so the result has the
 * distribution of tern_sampler_sample. Greedy: the argmax, as tern_sampler_sample. The
 * draft was accepted when the result equals it. draft < 0: tern_sampler_sample. */
TERN_API int32_t tern_sampler_sample_draft(tern_sampler *s, const float *logits, int32_t draft);
/* Record a token for the penalties (prompt tokens too, if wanted). */
TERN_API void tern_sampler_accept(tern_sampler *s, int32_t id);
TERN_API void tern_sampler_reset(tern_sampler *s);   /* history cleared, rng reseeded */

/* ---- constrained output: GBNF grammars (llama.cpp's grammar format) applied
 * as a token mask at sampling time. */
typedef struct tern_grammar tern_grammar;
/* Parse grammar text; root: the start rule (NULL: "root"). TERN_ERR_FORMAT names
 * the line of the first error; left recursion is refused. */
TERN_API tern_status tern_grammar_parse(const char *text, size_t len, const char *root, tern_grammar **out);
TERN_API void tern_grammar_free(tern_grammar *g);
/* JSON Schema (a subset: type, properties, required, additionalProperties, enum,
 * const, items, prefixItems, min/maxItems, min/maxLength, anyOf/oneOf, $ref to
 * #/$defs or #/definitions) -> GBNF text appended to *gbnf.
 * root (NULL: "root") names the start rule and prefixes every other rule, so
 * several conversions can share one grammar. Empty schema text: any JSON value.
 * TERN_ERR_UNSUPPORTED names the first keyword that is not supported. */
TERN_API tern_status tern_json_schema_to_grammar(const char *schema, size_t len, const char *root, tern_str *gbnf);
/* The vocabulary's byte strings in a trie (built once per tokenizer; n_vocab:
 * the model's logits length, 0: the tokenizer's). Control tokens are left out. */
typedef struct tern_token_trie tern_token_trie;
TERN_API tern_status tern_token_trie_new(const tern_tokenizer *t, int n_vocab, tern_token_trie **out);
TERN_API void tern_token_trie_free(tern_token_trie *v);
/* A grammar's match state over generated bytes (g and v borrowed; v may be NULL
 * for byte-level use only). */
typedef struct tern_grammar_matcher tern_grammar_matcher;
TERN_API tern_status tern_grammar_matcher_new(const tern_grammar *g, const tern_token_trie *v,
                                              tern_grammar_matcher **out);
TERN_API void tern_grammar_matcher_free(tern_grammar_matcher *m);
TERN_API void tern_grammar_matcher_reset(tern_grammar_matcher *m);
/* Set logits[i] = -inf for every token the grammar does not allow next (end-of-
 * generation ids are allowed only once the grammar is complete); *n_allowed (may
 * be NULL) counts the rest. TERN_ERR_INVALID_ARG when no token is allowed. */
TERN_API tern_status tern_grammar_matcher_mask(tern_grammar_matcher *m, float *logits, int n_vocab, int *n_allowed);
/* Advance by a sampled token (an end-of-generation id: only when complete). */
TERN_API tern_status tern_grammar_matcher_accept_token(tern_grammar_matcher *m, const tern_tokenizer *t, int32_t id);
/* Advance by raw bytes; false (state unchanged) when the grammar rejects them. */
TERN_API bool tern_grammar_matcher_accept_bytes(tern_grammar_matcher *m, const char *s, size_t n);
/* The bytes so far form a complete sentence of the grammar. */
TERN_API bool tern_grammar_matcher_is_done(const tern_grammar_matcher *m);

/* ---- speculative decoding: drafters propose the next tokens; the target model checks
 * them in one pass (tern_session_verify) and keeps the longest prefix it agrees with
 * (greedy), or by rejection sampling (tern_sampler_sample_draft) at temperature > 0: the
 * text has the same distribution as without (greedy: the same bytes). */
typedef struct tern_drafter tern_drafter;
/* Prompt lookup: the last n_max .. n_min tokens (longest first; 0: 4 and 2) looked up in
 * the prompt and the text generated so far; the tokens that followed their latest earlier
 * occurrence are the draft. No model, no memory beyond the history. */
TERN_API tern_status tern_drafter_ngram_new(int n_max, int n_min, tern_drafter **out);
/* A draft model: draft (any model tern loads; borrowed, must outlive the drafter) runs
 * greedily on a session of its own (n_ctx: 0 = 4096). Its tokenizer draft_tok must equal
 * the target's target_tok (tern_tokenizer_compare: a difference is TERN_ERR_INVALID_ARG
 * naming it). */
TERN_API tern_status tern_drafter_model_new(tern_model *draft, const tern_tokenizer *draft_tok,
                                            const tern_tokenizer *target_tok, int n_ctx, tern_drafter **out);
TERN_API void tern_drafter_free(tern_drafter *d);
/* Up to k (<= 64) drafted ids following history[0 .. n) (the prompt and every token
 * chosen so far) into out; returns how many (0: no draft). A draft model evaluates the
 * history it has not seen (rewinding to the longest prefix it shares with what it saw)
 * and then k - 1 of its own drafts; on an error it returns -1 (tern_last_error). */
TERN_API int tern_drafter_draft(tern_drafter *d, const int32_t *history, size_t n, int k, int32_t *out);
/* "ngram" or "draft". */
TERN_API const char *tern_drafter_kind(const tern_drafter *d);

/* Why generation stopped. */
typedef enum tern_stop_reason {
    TERN_STOP_NONE = 0, TERN_STOP_EOG = 1, TERN_STOP_STRING = 2, TERN_STOP_MAX_TOKENS = 3,
    TERN_STOP_CONTEXT_FULL = 4, TERN_STOP_CANCELLED = 5
} tern_stop_reason;
TERN_API const char *tern_stop_reason_str(tern_stop_reason r);  /* "eog", "stop_string", ... */

/* ---- generation: prompt -> streamed reply, with the stop rules above. */
typedef bool (*tern_text_fn)(const char *text, size_t len, void *user);
/* A logits processor: changes the row (n_vocab floats, a copy) before sampling. */
typedef void (*tern_logits_fn)(float *logits, int n_vocab, void *user);
/* Sees each sampled id (not an end-of-generation id) with the row it was sampled from;
 * return false to stop with an error (e.g. out of memory). */
typedef bool (*tern_token_fn)(const float *logits, int n_vocab, int32_t id, void *user);
typedef struct tern_gen_params {
    int max_tokens;                 /* <= 0: no limit (until end of generation or a full context) */
    const char *const *stop;        /* stop strings: generation ends before them (not in the text) */
    size_t n_stop;
    tern_text_fn on_text;           /* streamed text: complete UTF-8 only, a possible stop-string
                                     * prefix held back; return false to cancel. May be NULL. */
    void *user;
    const tern_atomic_int *cancel;  /* polled before each token (set from another thread or a
                                     * SIGINT handler); may be NULL */
    bool ignore_eos;                /* end-of-generation ids are masked out before sampling */
    tern_logits_fn process;         /* may be NULL: applied after the ignore_eos mask */
    void *process_user;
    tern_token_fn on_token;         /* may be NULL */
    void *token_user;
    tern_grammar_matcher *grammar;  /* may be NULL: constrained output (masked after process,
                                     * advanced by each sampled token; borrowed) */
    tern_drafter *drafter;          /* may be NULL: speculative decoding (borrowed; one
                                     * generation at a time): each step drafts up to spec_k
                                     * tokens after the chosen one and verifies them in one pass */
    int spec_k;                     /* the most drafted tokens per step (<= 0: 8; at most 16);
                                     * adapted to the acceptance rate between 1 and this */
    bool spec_always;               /* draft at every step: no backing off to plain steps while
                                     * verify passes cost more per token than plain steps do
                                     * (measured as it goes; tests, benchmarks) */
    const int32_t *spec_history;    /* may be NULL: the n_spec_history tokens the session holds */
    size_t n_spec_history;          /* before `prompt` (a chat's earlier turns): the drafter looks
                                     * them up too */
} tern_gen_params;
typedef struct tern_gen_result {
    tern_tokens tokens;             /* sampled ids (the end-of-generation id included when it ended so) */
    tern_str text;                  /* the reply text (a matched stop string removed) */
    tern_stop_reason reason;
    size_t n_prompt;                /* prompt tokens evaluated by this call */
    double prompt_s, gen_s;         /* seconds: prompt evaluation, generation loop */
    size_t spec_drafted;            /* speculation: tokens drafted, */
    size_t spec_accepted;           /* of which accepted, */
    size_t spec_steps;              /* verify passes */
} tern_gen_result;
/* Evaluate `prompt` after what the session already holds, then sample until a
 * stop rule fires. Fails (nothing generated) if the prompt does not fit. */
TERN_API tern_status tern_generate(tern_session *s, const tern_tokenizer *t, tern_sampler *smp,
                                   const int32_t *prompt, size_t n_prompt, const tern_gen_params *p,
                                   tern_gen_result *r);
TERN_API void tern_gen_result_free(tern_gen_result *r);

/* ---- the generation step: the token loop of tern_generate, one step at a time,
 * for callers that drive several sessions (a server: choose for every slot, then
 * advance them all in one batched pass). A tern_gen holds one reply's state on one
 * session: sampler (borrowed), stop strings (copied), held-back text, UTF-8 stream,
 * counters. Usage:
 *     tern_gen_new(s, t, smp, p, &g);
 *     tern_gen_prefill(g, prompt, n);              (any number of pieces)
 *     while (!tern_gen_choose(g, &id, &why) && why == TERN_STOP_NONE)
 *         tern_gen_advance(g);                     (or tern_gen_advance_batch)
 *     tern_gen_finish(g);                          (after any stop: the held text)
 * Text is streamed through p->on_text exactly as tern_generate streams it. */
typedef struct tern_gen tern_gen;
/* s, t and smp must outlive the tern_gen; p (NULL: defaults) is copied. */
TERN_API tern_status tern_gen_new(tern_session *s, const tern_tokenizer *t, tern_sampler *smp,
                                  const tern_gen_params *p, tern_gen **out);
TERN_API void tern_gen_free(tern_gen *g);
/* Evaluate n prompt tokens after what the session holds (and record them for the
 * sampler's penalties). TERN_ERR_CONTEXT_FULL, before any work, if they do not fit.
 * Call it per chunk to interleave a long prompt with other work. */
TERN_API tern_status tern_gen_prefill(tern_gen *g, const int32_t *ids, size_t n);
/* Apply the stop rules and choose the next token from the session's current logits
 * (cancel, max_tokens, sample, end of generation, stop strings, on_text, full context,
 * in that order). *reason = TERN_STOP_NONE: *id is pending and must be evaluated
 * (tern_gen_advance / tern_gen_advance_batch) before the next choose; otherwise the
 * reply is over (*id is the last sampled id, or -1 when none was sampled). */
TERN_API tern_status tern_gen_choose(tern_gen *g, int32_t *id, tern_stop_reason *reason);
/* Evaluate the pending token (no-op when none). */
TERN_API tern_status tern_gen_advance(tern_gen *g);
/* Evaluate the pending tokens of n generators (distinct sessions of one model) in
 * one tern_session_eval_batch() pass. On an error none is marked advanced (a refused
 * batch changes nothing): tern_gen_advance() each to find which one fails. */
TERN_API tern_status tern_gen_advance_batch(tern_gen *const *g, size_t n);
/* choose + advance: one step of tern_generate. */
TERN_API tern_status tern_gen_step(tern_gen *g, int32_t *id, tern_stop_reason *reason);
/* After a stop (not an error): emit what the UTF-8 stream still holds (nothing after
 * a stop string: the cut text is final). Idempotent. */
TERN_API tern_status tern_gen_finish(tern_gen *g);
/* The reply so far: text (a matched stop string cut; NUL-terminated), how much of
 * it is safe to show (the rest may still begin a stop string), sampled ids. */
TERN_API const char *tern_gen_text(const tern_gen *g, size_t *len, size_t *safe);
TERN_API const int32_t *tern_gen_tokens(const tern_gen *g, size_t *n);
TERN_API tern_stop_reason tern_gen_reason(const tern_gen *g);
/* Speculation so far (tern_gen_params.drafter): tokens drafted, accepted, verify passes. */
TERN_API void tern_gen_spec_stats(const tern_gen *g, size_t *drafted, size_t *accepted, size_t *steps);
/* The stop-string rule of tern_generate, for callers with their own loop (a
 * server): text[0..len) has just grown from `before` bytes. If a stop string
 * now occurs where a new match can start, returns the offset of the earliest
 * such match and sets *matched (the reply ends there). Otherwise clears
 * *matched and returns how much of the text is safe to show: len minus the
 * longest tail that is a proper prefix of a stop string. Empty strings never match. */
TERN_API size_t tern_stop_scan(const char *text, size_t len, size_t before, const char *const *stop,
                               size_t n_stop, bool *matched);

#ifdef __cplusplus
}
#endif
#endif /* TERN_H */
