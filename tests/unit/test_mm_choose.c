/*
 * test_mm_choose.c - the CUDA back-end's matmul chooser (src/kernels/cuda/mm_choose.h),
 * table-driven, with no GPU and in builds without CUDA: for each (kind, rows, cols,
 * batch, prefill mode, forced family) the family and kernel build it must pick, the
 * load-time repack decision, the override's names, and refusals.
 */
#include "check.h"

#include "kernels/cuda/mm_choose.h"

typedef struct mm_case {
    int kind;
    int64_t rows, cols;
    size_t batch;
    int mode, force;  /* caps: TC_GEMM_*, forced family */
    int family, nb, stage, gemm_mode;
} mm_case;

enum { T = TC_MMK_TERN128T, F = TC_MMK_TERN128, G64 = TC_MMK_TERN64, Q1 = TC_MMK_Q1, F32 = TC_MMK_F32,
       F16 = TC_MMK_F16, BF = TC_MMK_BF16, EX = TC_GEMM_EXACT, I8 = TC_GEMM_INT8 };

static const mm_case g_cases[] = {
    /* tiled, decode: one grid for the call's tiled matrices; NB4 stage 2 at 1..4, NB8 stage 4 at 5..8 */
    {T, 5120, 5120, 1, EX, 0, TC_MM_TILED_MULTI, 4, 2, 0},
    {T, 17408, 5120, 4, EX, 0, TC_MM_TILED_MULTI, 4, 2, 0},
    {T, 5120, 5120, 5, EX, 0, TC_MM_TILED_MULTI, 8, 4, 0},
    {T, 5120, 5120, 8, EX, 0, TC_MM_TILED_MULTI, 8, 4, 0},
    /* the activation too large to stage (batch 3+ at K 17408): unstaged */
    {T, 5120, 17408, 2, EX, 0, TC_MM_TILED_MULTI, 4, 2, 0},
    {T, 5120, 17408, 3, EX, 0, TC_MM_TILED_MULTI, 4, 0, 0},
    {T, 5120, 17408, 8, EX, 0, TC_MM_TILED_MULTI, 8, 0, 0},
    /* tiled, prefill: the tensor-core GEMM in the model's mode */
    {T, 5120, 5120, 9, EX, 0, TC_MM_GEMM, 0, 0, TC_GEMM_WG},
    {T, 5120, 5120, 512, I8, 0, TC_MM_GEMM, 0, 0, I8},
    /* K not in 256-tiles: the GEMV in chunks of 8 */
    {T, 512, 384, 64, EX, 0, TC_MM_TILED, 8, 4, 0},
    /* forced: tiled keeps the GEMV (one matrix per launch), gemm at any batch */
    {T, 5120, 5120, 1, EX, TC_MM_TILED, TC_MM_TILED, 4, 2, 0},
    {T, 5120, 5120, 512, EX, TC_MM_TILED, TC_MM_TILED, 8, 4, 0},
    {T, 5120, 5120, 512, EX, TC_MM_TILED_MULTI, TC_MM_TILED, 8, 4, 0},
    {T, 5120, 5120, 1, I8, TC_MM_GEMM, TC_MM_GEMM, 0, 0, I8},
    /* file layout TERN128: split K per row at 1..8 (build by batch), GEMM past 8 */
    {F, 4096, 4096, 1, EX, 0, TC_MM_T128K, 1, 0, 0},
    {F, 4096, 4096, 3, EX, 0, TC_MM_T128K, 3, 0, 0},
    {F, 4096, 4096, 5, EX, 0, TC_MM_T128K, 6, 0, 0},
    {F, 4096, 4096, 7, EX, 0, TC_MM_T128K, 8, 0, 0},
    {F, 4096, 4096, 9, EX, 0, TC_MM_GEMM, 0, 0, EX},
    {F, 4096, 384, 9, EX, 0, TC_MM_T128, 4, 0, 0},
    {F, 4096, 4096, 1, EX, TC_MM_T128, TC_MM_T128, 1, 0, 0},
    {F, 4096, 4096, 64, EX, TC_MM_T128, TC_MM_T128, 4, 0, 0},
    {F, 4096, 4096, 64, EX, TC_MM_T128K, TC_MM_T128, 4, 0, 0},
    {F, 100, 4096, 1, EX, TC_MM_GENERIC, TC_MM_GENERIC, 0, 0, 0},
    {F, 100, 4096, 1, EX, TC_MM_GENERIC_SK, TC_MM_GENERIC_SK, 0, 0, 0},
    /* other kinds: the fp32-input kernels, split K when few rows */
    {G64, 100, 4096, 1, EX, 0, TC_MM_GENERIC_SK, 0, 0, 0},
    {Q1, 8192, 4096, 4, EX, 0, TC_MM_GENERIC, 0, 0, 0},
    {F32, 48, 5120, 8, EX, 0, TC_MM_GENERIC_SK, 0, 0, 0},
    {F16, 4095, 64, 1, EX, 0, TC_MM_GENERIC_SK, 0, 0, 0},
    {BF, 4096, 64, 1, EX, 0, TC_MM_GENERIC, 0, 0, 0},
    {F16, 100, 64, 1, EX, TC_MM_TILED, TC_MM_GENERIC_SK, 0, 0, 0},
    /* gemm_nosplit: the default families (the GEMM past 8 without split-K) */
    {T, 5120, 5120, 1, EX, TC_MM_GEMM_NOSPLIT, TC_MM_TILED_MULTI, 4, 2, 0},
    {T, 5120, 5120, 16, I8, TC_MM_GEMM_NOSPLIT, TC_MM_GEMM, 0, 0, I8},
    {F, 4096, 4096, 3, EX, TC_MM_GEMM_NOSPLIT, TC_MM_T128K, 3, 0, 0},
    {F, 4096, 4096, 64, EX, TC_MM_GEMM_NOSPLIT, TC_MM_GEMM, 0, 0, EX},
    /* wgmma: the default (tiled, exact: the wgmma GEMM past 8; int8 stays on tc_gemm_tc);
     * mma: the default with tc_gemm_tc in exact mode */
    {T, 5120, 5120, 8, EX, TC_MM_WGMMA, TC_MM_TILED_MULTI, 8, 4, 0},
    {T, 5120, 5120, 16, EX, TC_MM_WGMMA, TC_MM_GEMM, 0, 0, TC_GEMM_WG},
    {T, 5120, 5120, 512, I8, TC_MM_WGMMA, TC_MM_GEMM, 0, 0, I8},
    {T, 512, 384, 64, EX, TC_MM_WGMMA, TC_MM_TILED, 8, 4, 0},
    {T, 5120, 5120, 16, EX, TC_MM_GEMM_MMA, TC_MM_GEMM, 0, 0, EX},
    {T, 5120, 5120, 512, I8, TC_MM_GEMM_MMA, TC_MM_GEMM, 0, 0, I8},
    {T, 5120, 5120, 4, EX, TC_MM_GEMM_MMA, TC_MM_TILED_MULTI, 4, 2, 0},
    /* refusals: empty shapes, a kind the kernels do not know, tiled K off 128 */
    {T, 0, 5120, 1, EX, 0, TC_MM_NONE, 0, 0, 0},
    {T, 16, 5120, 0, EX, 0, TC_MM_NONE, 0, 0, 0},
    {T, 16, 200, 1, EX, 0, TC_MM_NONE, 0, 0, 0},
    {6, 16, 256, 1, EX, 0, TC_MM_NONE, 0, 0, 0},
    {99, 16, 256, 1, EX, 0, TC_MM_NONE, 0, 0, 0},
};

TEST(choose_table) {
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) {
        const mm_case *c = &g_cases[i];
        tc_mm_caps caps = {.sms = 132, .gemm_mode = c->mode, .force = c->force};
        tc_mm_choice ch = tc_mm_choose(c->kind, c->rows, c->cols, c->batch, &caps);
        CHECK_MSG(ch.family == c->family && ch.nb == c->nb && ch.stage == c->stage &&
                      ch.gemm_mode == c->gemm_mode,
                  "case %zu (kind %d %lldx%lld batch %zu force %s): got %s nb %d stage %d mode %d, want %s nb %d "
                  "stage %d mode %d",
                  i, c->kind, (long long)c->rows, (long long)c->cols, c->batch, tc_mm_name(c->force),
                  tc_mm_name(ch.family), ch.nb, ch.stage, ch.gemm_mode, tc_mm_name(c->family), c->nb, c->stage,
                  c->gemm_mode);
    }
    /* no caps: the defaults (exact GEMM on wgmma for tiled matrices, nothing forced) */
    CHECK_EQ_INT(tc_mm_choose(T, 16, 256, 1, NULL).family, TC_MM_TILED_MULTI);
    CHECK_EQ_INT(tc_mm_choose(T, 16, 256, 16, NULL).gemm_mode, TC_GEMM_WG);
    CHECK_EQ_INT(tc_mm_choose(F, 16, 256, 16, NULL).gemm_mode, TC_GEMM_EXACT);
}

TEST(repack_decision) {
    tc_mm_caps caps = {.sms = 132, .gemm_mode = TC_GEMM_EXACT, .force = TC_MM_NONE};
    CHECK(tc_mm_repack_tiled(F, 5120, 5120, &caps));
    CHECK(tc_mm_repack_tiled(F, 5120, 5120, NULL));
    CHECK(!tc_mm_repack_tiled(F, 5120, 5000, &caps)); /* not whole 128-blocks */
    CHECK(!tc_mm_repack_tiled(G64, 5120, 5120, &caps));
    CHECK(!tc_mm_repack_tiled(F16, 5120, 5120, &caps));
    const int keep[] = {TC_MM_T128K, TC_MM_T128, TC_MM_GENERIC_SK, TC_MM_GENERIC};
    for (size_t i = 0; i < 4; i++) {
        caps.force = keep[i];
        CHECK_MSG(!tc_mm_repack_tiled(F, 5120, 5120, &caps), "forced %s repacks", tc_mm_name(keep[i]));
    }
    const int tile[] = {TC_MM_TILED_MULTI, TC_MM_TILED, TC_MM_GEMM, TC_MM_GEMM_NOSPLIT};
    for (size_t i = 0; i < 4; i++) {
        caps.force = tile[i];
        CHECK_MSG(tc_mm_repack_tiled(F, 5120, 5120, &caps), "forced %s keeps the file layout", tc_mm_name(tile[i]));
    }
}

TEST(names_and_stage_bytes) {
    for (int f = 1; f < TC_MM_N; f++) CHECK_EQ_INT(tc_mm_family_of(tc_mm_name(f)), f);
    CHECK_EQ_INT(tc_mm_family_of("none"), -1);
    CHECK_EQ_INT(tc_mm_family_of("old"), -1);
    CHECK_EQ_INT(tc_mm_family_of(NULL), -1);
    CHECK_STR(tc_mm_name(99), "?");
    /* the staged image: rows of 2K + 16 q bytes, K/32 corr words, K/128 scales */
    CHECK(tc_mm_stage_bytes(1, 128) == 256 + 16 + 16 + 4);
    CHECK(tc_mm_stage_bytes(2, 17408) <= TC_MM_STAGE_MAX);
    CHECK(tc_mm_stage_bytes(3, 17408) > TC_MM_STAGE_MAX);
    CHECK(tc_mm_stage_bytes(8, 5120) <= TC_MM_STAGE_MAX);
}

/* The GEMM's token tiles and K splits (mm_choose.h tc_mm_gemm_tok, tc_mm_gemm_splits).
 * Expected values worked by hand from the rule's estimate
 *   waves(s) x (nst/s + 1) + (s > 1), waves(s) = ceil(tiles*s / (sms*occ)),
 * s > 1 only when 1.1x faster than s = 1, within min(nst, 32) and the workspace
 * (8M partial floats, 8192 tiles); the arithmetic is in the comments. */
TEST(gemm_split_rule) {
    /* tokens per CTA: 16 to 16 rows, 32, 64, then 128 in int8 mode only; old: no 16 */
    CHECK_EQ_INT(tc_mm_gemm_tok(9, EX, 0), 16);
    CHECK_EQ_INT(tc_mm_gemm_tok(16, I8, 0), 16);
    CHECK_EQ_INT(tc_mm_gemm_tok(17, EX, 0), 32);
    CHECK_EQ_INT(tc_mm_gemm_tok(32, EX, 0), 32);
    CHECK_EQ_INT(tc_mm_gemm_tok(33, EX, 0), 64);
    CHECK_EQ_INT(tc_mm_gemm_tok(64, I8, 0), 64);
    CHECK_EQ_INT(tc_mm_gemm_tok(65, EX, 0), 64);
    CHECK_EQ_INT(tc_mm_gemm_tok(65, I8, 0), 128);
    CHECK_EQ_INT(tc_mm_gemm_tok(512, EX, 0), 64);
    CHECK_EQ_INT(tc_mm_gemm_tok(512, I8, 0), 128);
    CHECK_EQ_INT(tc_mm_gemm_tok(9, EX, 1), 32);
    CHECK_EQ_INT(tc_mm_gemm_tok(16, I8, 1), 32);
    /* 5120 x 5120, 16 tokens, 2 CTAs per SM on 132: 40 tiles, 20 stages, 264 slots;
     * s=1: 21; s=6: 240 CTAs, one wave, 20/6 + 1 + 1 = 5.33; s=7: two waves, 8.71;
     * s=13: 6.08 (the best two-wave one) -> 6 */
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 16, 16, 132, 2, 0), 6);
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 9, 16, 132, 2, 0), 6);
    /* K 17408 (68 stages): s=6 13.33 beats s=13 13.46 (two waves) -> 6 */
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 17408, 9, 16, 132, 2, 0), 6);
    /* 1024 x 5120, 64 tokens, 1 per SM: 8 tiles; one wave up to s=16 (20/16 + 2 = 3.25),
     * two from 17 (>= 5) -> 16 */
    CHECK_EQ_INT(tc_mm_gemm_splits(1024, 5120, 64, 64, 132, 1, 0), 16);
    /* the head (248320 rows), 16 tokens: 1940 tiles; the workspace allows 2 (8M / (1940 *
     * 2048)); s=1: 8 waves x 21 = 168, s=2: 15 x 11 + 1 = 166, not 1.1x -> 1 */
    CHECK_EQ_INT(tc_mm_gemm_splits(248320, 5120, 16, 16, 132, 2, 0), 1);
    /* a 512-token prefill chunk, 5120 rows, 64 tokens: 320 tiles, workspace 3;
     * s=1: 3 waves x 21 = 63; s=2: 5 x 11 + 1 = 56 (< 63/1.1); s=3: 8 x 7.67 + 1 = 62.3 -> 2 */
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 512, 64, 132, 1, 0), 2);
    /* 6144 rows: 384 tiles, workspace 2; s=1: 3 x 21 = 63, s=2: 6 x 11 + 1 = 67 -> 1 */
    CHECK_EQ_INT(tc_mm_gemm_splits(6144, 5120, 512, 64, 132, 1, 0), 1);
    /* partials that never fit (2048 tokens: 1280 tiles of 8192 floats) or too many tiles */
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 2048, 64, 132, 1, 0), 1);
    CHECK_EQ_INT(tc_mm_gemm_splits((int64_t)128 * 8193, 5120, 16, 16, 132, 1, 5), 1);
    /* forced: 1 none, n capped by the stages and the workspace */
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 16, 16, 132, 2, 1), 1);
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 16, 16, 132, 2, 5), 5);
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 16, 16, 132, 2, 64), 20);
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 256, 16, 16, 132, 2, 3), 1);
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 512, 16, 16, 132, 2, 3), 2);
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 512, 64, 132, 1, 8), 3); /* workspace: 3 */
    /* unknown SM count: 132; empty shapes: 1 */
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 16, 16, 0, 2, 0), 6);
    CHECK_EQ_INT(tc_mm_gemm_splits(0, 5120, 16, 16, 132, 2, 0), 1);
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 128, 16, 16, 132, 2, 0), 1);
    CHECK_EQ_INT(tc_mm_gemm_splits(5120, 5120, 0, 16, 132, 2, 0), 1);
    /* the override: caps.gemm_splits, 1 under gemm_nosplit */
    tc_mm_caps caps = {.sms = 132, .gemm_mode = EX, .force = TC_MM_NONE, .gemm_splits = 0};
    CHECK_EQ_INT(tc_mm_gemm_split_force(NULL, 5120, 5120, 16), 0);
    CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, 5120, 5120, 16), 0);
    caps.gemm_splits = 4;
    CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, 5120, 5120, 16), 4);
    caps.gemm_splits = -3;
    CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, 5120, 5120, 16), 0);
    caps.force = TC_MM_GEMM_NOSPLIT;
    CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, 5120, 5120, 16), 1);
    CHECK_EQ_INT(tc_mm_family_of("gemm_nosplit"), TC_MM_GEMM_NOSPLIT);
    /* wgmma2 (the wgmma GEMM in 2-CTA clusters, an A/B force): the default choice, the
     * wgmma GEMM in exact mode, its splits the rule's */
    CHECK_EQ_INT(tc_mm_family_of("wgmma2"), TC_MM_WGMMA2);
    CHECK(!strcmp(tc_mm_name(TC_MM_WGMMA2), "wgmma2"));
    caps.force = TC_MM_WGMMA2;
    caps.gemm_splits = 0;
    const tc_mm_choice w2 = tc_mm_choose(TC_MMK_TERN128T, 5120, 5120, 64, &caps);
    CHECK_EQ_INT(w2.family, TC_MM_GEMM);
    CHECK_EQ_INT(w2.gemm_mode, TC_GEMM_WG);
    CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, 5120, 5120, 16), 0);
}

/* Batch-invariant products: the GEMM at every batch where it takes the shape, and K splits
 * that depend on the matrix's shape alone and fit the workspace at every M up to
 * TC_MM_INVARIANT_M. */
static void choose_invariant(void) {
    tc_mm_caps caps = {.sms = 132, .gemm_mode = EX, .force = TC_MM_NONE, .gemm_splits = 0, .invariant = 1};
    for (size_t b = 1; b <= 80; b += (b < 10 ? 1 : 7)) {
        tc_mm_choice c = tc_mm_choose(TC_MMK_TERN128T, 5120, 17408, b, &caps);
        CHECK_EQ_INT(c.family, TC_MM_GEMM);
        CHECK_EQ_INT(c.gemm_mode, TC_GEMM_WG);
        c = tc_mm_choose(TC_MMK_TERN128, 1000, 1024, b, &caps);
        CHECK_EQ_INT(c.family, TC_MM_GEMM);
        /* K % 256 != 0: the GEMV as before (its rows do not depend on the batch either) */
        c = tc_mm_choose(TC_MMK_TERN128T, 5120, 640, b, &caps);
        CHECK(c.family == TC_MM_TILED_MULTI || c.family == TC_MM_TILED);
        /* other kinds: unchanged */
        c = tc_mm_choose(TC_MMK_BF16, 48, 5120, b, &caps);
        CHECK_EQ_INT(c.family, TC_MM_GENERIC_SK);
    }
    /* a forced GEMV family still wins (A/B runs) */
    caps.force = TC_MM_TILED;
    CHECK_EQ_INT(tc_mm_choose(TC_MMK_TERN128T, 5120, 5120, 1, &caps).family, TC_MM_TILED);
    caps.force = TC_MM_NONE;
    /* the splits: the shape's alone, >= 1, and the same at every M <= TC_MM_INVARIANT_M
     * (what a launch at M then takes: tc_mm_gemm_splits with that force) */
    static const int64_t shapes[][2] = {{5120, 5120}, {34816, 5120}, {5120, 17408}, {10240, 5120},
                                        {1000, 1024}, {248320, 5120}, {384, 256}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t r = shapes[i][0], k = shapes[i][1];
        const int s = tc_mm_gemm_split_force(&caps, r, k, 1);
        CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, r, k, TC_MM_INVARIANT_M), s);
        CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, r, k, TC_MM_INVARIANT_M + 1), 0); /* a prompt chunk: the rule */
        CHECK(s >= 1 && s <= TC_GEMM_MAX_SPLITS);
        CHECK_EQ_INT(s, tc_mm_gemm_splits_invariant(r, k, 132));
        for (size_t M = 1; M <= TC_MM_INVARIANT_M; M++)
            for (int mode = TC_GEMM_EXACT; mode <= TC_GEMM_INT8; mode++) {
                const int tok = tc_mm_gemm_tok(M, mode, s == 1);
                CHECK_EQ_INT(tc_mm_gemm_splits(r, k, M, tok, 132, 2, s), s);
            }
    }
    /* the explicit overrides come first */
    caps.gemm_splits = 4;
    CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, 5120, 5120, 16), 4);
    caps.gemm_splits = 0;
    caps.force = TC_MM_GEMM_NOSPLIT;
    CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, 5120, 5120, 16), 1);
    /* not invariant: the rule (0) */
    caps.force = TC_MM_NONE;
    caps.invariant = 0;
    CHECK_EQ_INT(tc_mm_gemm_split_force(&caps, 5120, 5120, 16), 0);
    CHECK_EQ_INT(tc_mm_choose(TC_MMK_TERN128T, 5120, 5120, 1, &caps).family, TC_MM_TILED_MULTI);
}

int main(void) {
    RUN(choose_table);
    RUN(choose_invariant);
    RUN(repack_decision);
    RUN(names_and_stage_bytes);
    RUN(gemm_split_rule);
    return check_summary();
}
