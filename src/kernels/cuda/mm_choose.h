/*
 * mm_choose.h - the one matmul chooser of the CUDA back-end: which kernel family (and
 * which build of it) runs a product, and whether a matrix is repacked at load.
 * Plain C, header only (static inline): compiled into the .cu launchers, the back-end
 * (backend_cuda.c) and tests/unit/test_mm_choose.c, which checks the table without a
 * GPU (also in a build without CUDA). docs/kernels.md has the table in words.
 *
 * The rules (measured on the H200, docs/performance.md):
 *   a TERN128 matrix (PQ2_0, fork Q2_0) is repacked at load into the tiled layout
 *   (TC_TERN128T), unless a file-layout family is forced (t128k, t128, generic);
 *   tiled, batch 1..8 (decode): k_gemv_tiled, every tiled matrix of a call in one
 *     grid (TC_MM_TILED_MULTI: 27B 204.7 vs 193.5 tok/s, 2026-12-03) — one matrix
 *     alone is the same kernel (TC_MM_TILED);
 *   tiled or TERN128, batch > 8 (prefill): the tensor-core GEMM (TC_MM_GEMM) in the
 *     prefill mode of the model parameters (exact or int8; exact on a tiled matrix runs
 *     the wgmma GEMM, TC_GEMM_WG, where the GPU has it); a shape it refuses falls
 *     back to the GEMV in chunks of 8 (tiled) or k_gemv_t128 (file layout);
 *   TERN128 in the file layout, batch 1..8: k_gemv_t128k (split K per row);
 *   other kinds (TERN64, Q1, F32, F16, BF16): the fp32-input generic kernels, split
 *     K per row when the matrix has fewer than 4096 rows (TC_MM_GENERIC_SK).
 * Batch-invariant products (caps.invariant, the model parameter batch_invariant): the GEMM
 *   at every batch wherever it takes the shape, with K splits fixed by the matrix's shape.
 * The tiled GEMV's build: batch 1..4 NB4 with the branch-free staged loop at <= 96
 * registers (stage 2), batch 5..8 NB8 with the same loop at 106 registers (stage 4);
 * an activation too large to stage in 100 KiB of shared memory (batch 3+ at K 17408)
 * reads it from global memory (stage 0). The launch shape (warps per strip, strips per
 * CTA) is chosen from the kernel's occupancy in tc_gemv.cu.
 * One override for A/B runs: tc_mm_caps.force (a family by name, tc_mm_family_of; the
 * back-end logs it once): tiled / tiled_multi keep the GEMV at every batch (no GEMM),
 * gemm takes the GEMM at every batch, t128k / t128 / generic_sk / generic keep the file
 * layout (no repack) and run that kernel; mma is the default choice with the mma.sync
 * GEMM (tc_gemm_tc.cu) where the default runs the Hopper wgmma GEMM (tc_gemm_wg.cu: tiled
 * matrices, batch > 8, exact mode; the model parameter cuda_matmul = "mma", CLI
 * TERN_CUDA_GEMM=mma; "wgmma" names the default; "wgmma2" the default with the wgmma GEMM's
 * stream-K in 2-CTA clusters, lab.h TC_WG_PAIRS, for its A/B); a family the shape cannot take falls
 * back as above.
 */
#ifndef TERN_KERNELS_CUDA_MM_CHOOSE_H
#define TERN_KERNELS_CUDA_MM_CHOOSE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum tc_mm_family {
    TC_MM_NONE = 0,       /* no kernel takes it (the call notes TC_ERR_UNSUPPORTED) */
    TC_MM_TILED_MULTI,    /* k_gemv_tiled, the call's tiled matrices in one grid (decode) */
    TC_MM_TILED,          /* k_gemv_tiled, one matrix per launch (chunks of 8 batch rows) */
    TC_MM_GEMM,           /* tensor-core GEMM (tc_gemm_tc.cu; prefill) */
    TC_MM_T128K,          /* file-layout TERN128, split K per row (batch 1..8) */
    TC_MM_T128,           /* file-layout TERN128, one warp per rows (any batch) */
    TC_MM_GENERIC_SK,     /* fp32 input, any kind, split K per row (few rows) */
    TC_MM_GENERIC,        /* fp32 input, any kind, one warp per row */
    TC_MM_GEMM_NOSPLIT,   /* force only: the default choice, the GEMM without split-K and its
                             earlier token tiles (32..128; caps.gemm_splits = 1), for A/B runs */
    TC_MM_WGMMA,          /* force only: the default choice (the Hopper wgmma GEMM, tc_gemm_wg.cu,
                             gemm_mode TC_GEMM_WG, where the GEMM runs in exact mode) */
    TC_MM_GEMM_MMA,       /* force only: the default choice with the mma.sync GEMM (tc_gemm_tc.cu)
                             in place of wgmma, for A/B runs */
    TC_MM_WGMMA2,         /* force only: the default choice, the wgmma GEMM's stream-K launched
                             in 2-CTA clusters (lab.h TC_WG_PAIRS: the activation multicast to
                             row-tile pairs), for A/B runs */
    TC_MM_N
} tc_mm_family;

/* Prefill modes of the tensor-core GEMM (the model parameter cuda_prefill). */
#define TC_GEMM_EXACT 1 /* both activation planes: the GEMV's integers */
#define TC_GEMM_INT8 2  /* the hi plane only (8-bit activations; about half the time) */
#define TC_GEMM_WG 3    /* exact, on the wgmma GEMM (tc_gemm_wg.cu; tiled matrices, sm_90a): the
                           default for tiled matrices in exact mode since 2026-12-04 (H200: 1.7-2.1x
                           the mma.sync GEMM at M 64..512); tc_gemm_tc exact where it refuses */

/* What the chooser knows of the device and the model's parameters. */
typedef struct tc_mm_caps {
    int sms;         /* streaming multiprocessors (0: unknown) */
    int gemm_mode;   /* TC_GEMM_EXACT or TC_GEMM_INT8 */
    int force;       /* a tc_mm_family forced for A/B runs, or TC_MM_NONE */
    int gemm_splits; /* the GEMM's K splits: 0 the split rule (tc_mm_gemm_splits), 1 none
                        and the token tiles before split-K (the A/B reference), n > 1 n
                        splits where the shape and the workspace allow */
    int invariant;   /* batch-invariant products (the model parameter batch_invariant): every
                        TERN128 / tiled matrix with K % 256 == 0 takes the GEMM at every batch,
                        its K splits fixed by the matrix's shape (tc_mm_gemm_split_force), so a
                        row's bits do not depend on the other rows of the call (up to
                        TC_MM_INVARIANT_M rows) */
} tc_mm_caps;

/* The choice for one matrix of a call. */
typedef struct tc_mm_choice {
    int family;      /* tc_mm_family */
    int nb;          /* the kernel build's batch rows per pass: tiled 4 (NB4) or 8 (NB8);
                        t128k 1, 2, 3, 4, 6 or 8; t128 1 or 4; 0 otherwise */
    int rows;        /* rows per warp of the file-layout kernels (t128k, t128), else 0 */
    int stage;       /* tiled: 2 or 4 (staged loop at <= 96 / 106 registers), 0 unstaged */
    int gemm_mode;   /* TC_MM_GEMM: TC_GEMM_EXACT, TC_GEMM_INT8 or TC_GEMM_WG */
} tc_mm_choice;

/* Kinds as cuda.h numbers them (tc_kind); repeated here so that this header stands
 * alone (cuda.h checks that they agree). */
enum { TC_MMK_TERN128 = 0, TC_MMK_TERN64 = 1, TC_MMK_Q1 = 2, TC_MMK_F32 = 3, TC_MMK_F16 = 4,
       TC_MMK_BF16 = 5, TC_MMK_TERN128T = 7 };

/* The staged activation's shared-memory budget and bytes (nbr batch rows of K:
 * q at row stride 2K + 16, corr, sx). */
#define TC_MM_STAGE_MAX (100 * 1024)
static inline size_t tc_mm_stage_bytes(int nbr, int64_t K) {
    return (size_t)nbr * ((size_t)(2 * K + 16) + (size_t)(K / 32) * 4 + (size_t)(K / 128) * 4);
}

static const char *const tc_mm_names[TC_MM_N] = {"none", "tiled_multi", "tiled", "gemm", "t128k",
                                                 "t128", "generic_sk", "generic", "gemm_nosplit", "wgmma", "mma",
                                                 "wgmma2"};

/* The family named s (tc_mm_names), or -1. */
static inline int tc_mm_family_of(const char *s) {
    if (!s) return -1;
    for (int i = 1; i < TC_MM_N; i++)
        if (!strcmp(s, tc_mm_names[i])) return i;
    return -1;
}
static inline const char *tc_mm_name(int family) {
    return family >= 0 && family < TC_MM_N ? tc_mm_names[family] : "?";
}

/* Whether a TERN128 matrix of rows x cols is repacked into the tiled layout at load. */
static inline int tc_mm_repack_tiled(int kind, int64_t rows, int64_t cols, const tc_mm_caps *caps) {
    if (kind != TC_MMK_TERN128 || cols % 128 || rows <= 0) return 0;
    const int f = caps ? caps->force : TC_MM_NONE;
    return !(f == TC_MM_T128K || f == TC_MM_T128 || f == TC_MM_GENERIC_SK || f == TC_MM_GENERIC);
}

/* The tiled GEMV's build for a chunk of nb <= 8 batch rows of K inputs. */
static inline void tc_mm_tiled_build(int64_t cols, size_t batch, tc_mm_choice *c) {
    const int nbc = batch < 8 ? (int)batch : 8; /* the first chunk's rows decide */
    c->nb = nbc > 4 ? 8 : 4;
    const int nbr = nbc < c->nb ? nbc : c->nb;
    c->stage = tc_mm_stage_bytes(nbr, cols) <= TC_MM_STAGE_MAX ? (c->nb == 8 ? 4 : 2) : 0;
}

/* ------------------------------------------------ the tensor-core GEMM's launch
 * A CTA of the GEMM (tc_gemm_tc.cu) computes TC_GEMM_ROWS weight rows x tok tokens over
 * a range of K in stages of TC_GEMM_STAGE_K inputs; the grid is (token tiles, row
 * tiles, K splits). Without split-K a 5,120-row matrix at 16 tokens is 40 CTAs on 132
 * SMs, each walking all of K: batched decode streamed the weights from a third of the
 * SMs. With splits > 1 each CTA walks stages [z*nst/splits, (z+1)*nst/splits) of the
 * nst = K/256 stages and writes its fp32 partial tile to a workspace; the last CTA of
 * a tile to arrive (a counter per tile) adds the partials in split order 0, 1, ... and
 * writes y, so the result does not depend on timing (bitwise run to run). The
 * workspace is fixed (TC_GEMM_WS_FLOATS partial floats, TC_GEMM_MAX_TILES counters),
 * reserved once per context (tc_gemm_reserve), so no capture allocates: a launch
 * whose partials would not fit takes fewer splits. */
#define TC_GEMM_ROWS 128
#define TC_GEMM_STAGE_K 256
#define TC_GEMM_MAX_SPLITS 32
#define TC_GEMM_WS_FLOATS ((size_t)8 << 20) /* 32 MiB of partials */
#define TC_GEMM_MAX_TILES 8192              /* counters: output tiles of a split launch */
#define TC_GEMM_REDUCE_COST 1               /* a split launch's reduction, in stage times */


/* Tokens per CTA for a batch of M rows: 16 up to 16 rows (no 2-8x padding at batch
 * 9..16), 32 up to 32, 64 up to 64 (and in exact mode beyond: its two activation
 * planes fill shared memory at 128), else 128. old (the split force 1): the tiles
 * before split-K (no 16). */
static inline int tc_mm_gemm_tok(size_t M, int mode, int old) {
    if (M <= 16 && !old) return 16;
    if (M <= 32) return 32;
    if (M <= 64 || mode != TC_GEMM_INT8) return 64;
    return 128;
}

/* The K splits of one launch: rows x cols (cols % 256 == 0), M tokens in tiles of tok,
 * on sms SMs holding occ CTAs each; force = tc_mm_gemm_split_force (0: the rule).
 * The rule: with T output tiles and nst stages, the estimated time of s splits is
 *   waves(s) x (nst / s + TC_GEMM_CTA_COST) + (s > 1 ? TC_GEMM_REDUCE_COST : 0)
 * stage times, waves(s) = ceil(T*s / (sms*occ)), TC_GEMM_CTA_COST a CTA's fixed cost
 * (pipeline fill, epilogue); the least s wins (ties: fewer; s > 1 only when it is
 * TC_GEMM_SPLIT_GAIN times faster than no split: the partials' traffic is not in the
 * estimate), s <= min(nst,
 * TC_GEMM_MAX_SPLITS) and within the workspace (T*s*tok*128 partial floats, T
 * counters). So a grid short of one wave is split until it fills the resident slots,
 * and a grid of a few waves is split when that trims its last wave. Always >= 1. */
#define TC_GEMM_CTA_COST 1.0
#define TC_GEMM_SPLIT_GAIN 1.1
static inline int tc_mm_gemm_splits(int64_t rows, int64_t cols, size_t M, int tok, int sms, int occ,
                                    int force) {
    if (rows <= 0 || cols < TC_GEMM_STAGE_K || M == 0 || tok <= 0) return 1;
    const int64_t nst = cols / TC_GEMM_STAGE_K;
    const int64_t tiles = (int64_t)((M + (size_t)tok - 1) / (size_t)tok) * ((rows + TC_GEMM_ROWS - 1) / TC_GEMM_ROWS);
    const int64_t tile_floats = (int64_t)tok * TC_GEMM_ROWS;
    int64_t smax = nst < TC_GEMM_MAX_SPLITS ? nst : TC_GEMM_MAX_SPLITS;
    if (tiles > TC_GEMM_MAX_TILES) return 1;
    const int64_t fit = (int64_t)TC_GEMM_WS_FLOATS / (tiles * tile_floats);
    if (smax > fit) smax = fit;
    if (force == 1 || smax < 2) return 1;
    if (force > 1) return (int)(force < smax ? force : smax);
    const int64_t slots = (int64_t)(sms > 0 ? sms : 132) * (occ > 0 ? occ : 1);
    int best = 1;
    double bc = 1e300;
    for (int64_t s = 1; s <= smax; s++) {
        const int64_t waves = (tiles * s + slots - 1) / slots;
        const double c = (double)waves * ((double)nst / (double)s + TC_GEMM_CTA_COST) +
                         (s > 1 ? TC_GEMM_REDUCE_COST : 0);
        if (s == 1) bc = c / TC_GEMM_SPLIT_GAIN; /* a split must gain TC_GEMM_SPLIT_GAIN */
        else if (c < bc - 1e-9) {
            bc = c;
            best = (int)s;
        }
    }
    return best;
}

/* Batch-invariant products (caps->invariant): the K splits of a rows x cols matrix are the
 * rule's at TC_MM_INVARIANT_M tokens in tiles of 64 and one CTA per SM, whatever the call's
 * M: the same partition of K (and the same order of the partials' sum) for every M up to
 * TC_MM_INVARIANT_M, where the workspace holds them (the tiles at M 64 are the most), so a
 * row's result is the same bits at any batch. The tensor-core GEMMs (mma.sync and wgmma)
 * give the same integers and the same float operations per output at every token tile,
 * so the split partition is the only part of the launch a row's bits depend on. */
#define TC_MM_INVARIANT_M 64
static inline int tc_mm_gemm_splits_invariant(int64_t rows, int64_t cols, int sms) {
    return tc_mm_gemm_splits(rows, cols, TC_MM_INVARIANT_M, 64, sms, 1, 0);
}

/* The K splits of a caps' override for a rows x cols matrix at M rows: caps->gemm_splits,
 * 1 under the gemm_nosplit force, the shape's fixed splits when invariant and M <=
 * TC_MM_INVARIANT_M (>= 1; a longer call is one session's prompt chunk, the same M alone
 * or under load: the rule's splits), else 0 (the rule, or stream-K on the wgmma GEMM). */
static inline int tc_mm_gemm_split_force(const tc_mm_caps *caps, int64_t rows, int64_t cols, size_t M) {
    if (!caps) return 0;
    if (caps->force == TC_MM_GEMM_NOSPLIT) return 1;
    if (caps->gemm_splits > 0) return caps->gemm_splits;
    if (caps->invariant && M <= TC_MM_INVARIANT_M) return tc_mm_gemm_splits_invariant(rows, cols, caps->sms);
    return 0;
}

/* The family for one matrix: kind (tc_kind), rows x cols, batch rows, whether the
 * call has a quantised activation (the integer path: TERN128 and tiled) and how many
 * tiled matrices the call holds (multi). */
static inline tc_mm_choice tc_mm_choose(int kind, int64_t rows, int64_t cols, size_t batch,
                                        const tc_mm_caps *caps) {
    tc_mm_choice c = {0, 0, 0, 0, 0};
    const int f = caps ? caps->force : TC_MM_NONE;
    const int mode = caps && caps->gemm_mode == TC_GEMM_INT8 ? TC_GEMM_INT8 : TC_GEMM_EXACT;
    const int inv = caps && caps->invariant;
    if (rows <= 0 || cols <= 0 || batch == 0) return c;
    if (kind == TC_MMK_TERN128T) {
        if (cols % 128) return c;
        if ((batch > 8 || f == TC_MM_GEMM || inv) && cols % 256 == 0 && f != TC_MM_TILED && f != TC_MM_TILED_MULTI) {
            c.family = TC_MM_GEMM;
            /* exact mode on the wgmma GEMM (tc_gemm_tc exact where it refuses: not sm_90a),
             * unless the mma.sync GEMM is forced (mma, gemm_nosplit) */
            c.gemm_mode = mode == TC_GEMM_EXACT && f != TC_MM_GEMM_MMA && f != TC_MM_GEMM_NOSPLIT ? TC_GEMM_WG : mode;
            return c;
        }
        c.family = batch <= 8 && f != TC_MM_TILED ? TC_MM_TILED_MULTI : TC_MM_TILED;
        tc_mm_tiled_build(cols, batch, &c);
        return c;
    }
    if (kind == TC_MMK_TERN128 && cols % 128 == 0) {
        if ((batch > 8 || f == TC_MM_GEMM || inv) && cols % 256 == 0 && f != TC_MM_T128 && f != TC_MM_T128K &&
            f != TC_MM_GENERIC && f != TC_MM_GENERIC_SK) {
            c.family = TC_MM_GEMM;
            c.gemm_mode = mode;
            return c;
        }
        if (f == TC_MM_GENERIC || f == TC_MM_GENERIC_SK) goto generic;
        if (batch <= 8 && f != TC_MM_T128) {
            static const signed char nbs[9] = {0, 1, 2, 3, 4, 6, 6, 8, 8};
            c.family = TC_MM_T128K;
            c.nb = nbs[batch];
            c.rows = batch <= 3 ? 4 : 2;
            return c;
        }
        c.family = TC_MM_T128;
        c.nb = batch == 1 ? 1 : 4;
        c.rows = batch == 1 ? 4 : 2;
        return c;
    }
    if (kind < TC_MMK_TERN128 || kind > TC_MMK_BF16) return c;
generic:
    c.family = rows < 4096 && f != TC_MM_GENERIC ? TC_MM_GENERIC_SK : TC_MM_GENERIC;
    return c;
}

#endif
