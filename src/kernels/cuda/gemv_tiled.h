/*
 * gemv_tiled.h - index rules of the tiled ternary layout (TC_TERN128T) and of the
 * integer activation, shared by the CUDA kernels (tc_gemv.cu) and a CPU test that
 * emulates the kernel's mma fragments (tests/unit/test_gemv_layout.c). Plain C;
 * TCT_HD marks the functions __host__ __device__ under nvcc.
 *
 * TC_TERN128T (made on the device by tc_repack_tiled from TC_TERN128, k % 128 == 0):
 * rows in strips of 16 (the last strip padded with zero rows), each strip
 * KT = ceil(k/256) tiles of TCT_TILE bytes, strip s tile j at data + (s*KT + j)*1088;
 * tile j covers groups (128-input blocks) 2j and 2j+1 (a missing odd group is zero):
 *   [0, 512)     rows 0..7 of the strip:  lane L = 4g + t holds 16 bytes at 16L,
 *   [512, 1024)  rows 8..15: the same, row 8 + g,
 *                the 16 bytes = words (group 2j: unit t word 0, word 1,
 *                                      group 2j+1: unit t word 0, word 1),
 *                unit t = inputs 32t..32t+31 of the group; word i = the file's code
 *                bytes 8t+4i..8t+4i+3 of the block (same bit order: byte b holds
 *                inputs 4b..4b+3 of the block, input 4b+s in bits 2s, 2s+1);
 *   [1024, 1088) scales, fp16: at 1024 + 8g: (row g, group 2j), (row g, 2j+1),
 *                (row 8+g, 2j), (row 8+g, 2j+1).
 * Same bytes per weight as the file (34 per 128); one warp reads a tile with two
 * fully coalesced 512-byte loads (16 B per lane) and one 8-byte load per lane, and
 * the 16 B of lane (g, t) are exactly its A-fragment words of mma.m16n8k32 (row g
 * and g+8, k slots of thread t; see tc_gemv.cu).
 *
 * The activation (tc_act, written by tc_actq_block): per batch row, q[k/32][64]:
 * unit u = inputs 32u..32u+31, 32 hi bytes then 32 lo bytes; byte 16i + 4s + k
 * of a plane holds input 32u + 16i + 4k + s, so 32-bit word 4i + s of a plane is
 * the activation that meets field s of code word i ((w >> 2s) & 0x03030303).
 */
#ifndef TERN_KERNELS_CUDA_GEMV_TILED_H
#define TERN_KERNELS_CUDA_GEMV_TILED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TCT_HD static __host__ __device__ __forceinline__
#else
#define TCT_HD static inline
#endif

#define TCT_TILE 1088 /* 16 rows x 256 inputs: 1024 code bytes + 64 scale bytes */

TCT_HD int64_t tct_strips(int64_t n) { return (n + 15) / 16; }
TCT_HD int64_t tct_ktiles(int64_t k) { return (k / 128 + 1) / 2; }
TCT_HD size_t tct_bytes(int64_t n, int64_t k) {
    return (size_t)tct_strips(n) * (size_t)tct_ktiles(k) * TCT_TILE;
}
/* Byte of the tiled buffer holding the code of input j of row r (field j % 4). */
TCT_HD size_t tct_code_byte(int64_t r, int64_t j, int64_t kt) {
    int64_t grp = j >> 7, jj = j & 127;
    int t = (int)(jj >> 5), i = (int)((jj >> 4) & 1), k = (int)((jj >> 2) & 3);
    int rr = (int)(r & 15), half = rr >> 3, g = rr & 7, e = (int)(grp & 1);
    size_t tile = ((size_t)(r >> 4) * (size_t)kt + (size_t)(grp >> 1)) * TCT_TILE;
    return tile + (size_t)half * 512 + (size_t)(4 * g + t) * 16 + (size_t)(2 * e + i) * 4 + (size_t)k;
}
/* Byte of the fp16 scale of group grp of row r. */
TCT_HD size_t tct_scale_byte(int64_t r, int64_t grp, int64_t kt) {
    int rr = (int)(r & 15), half = rr >> 3, g = rr & 7, e = (int)(grp & 1);
    size_t tile = ((size_t)(r >> 4) * (size_t)kt + (size_t)(grp >> 1)) * TCT_TILE;
    return tile + 1024 + (size_t)g * 8 + (size_t)(2 * half + e) * 2;
}
/* Byte of one batch row's q (2k bytes) holding plane p (0 hi, 1 lo) of input j. */
TCT_HD size_t tcq_byte(int64_t j, int p) {
    int64_t u = j >> 5;
    int jj = (int)(j & 31), i = jj >> 4, k = (jj >> 2) & 3, s = jj & 3;
    return (size_t)u * 64 + (size_t)p * 32 + (size_t)(16 * i + 4 * s + k);
}

/* The A fragment of mma m (0..3) of group e (0, 1) of a tile, for lane (g, t):
 * wg / wh = the lane's 16 bytes of rows g / 8+g as words w[0..3]. a[0] (row g, k
 * slots 4t..4t+3) and a[1] (row 8+g) take field 2(m&1) of word 2e + (m>>1), a[2]
 * and a[3] (k slots 16+4t..) field 2(m&1)+1; so the B fragment of mma m is words
 * 2m, 2m+1 of the unit's activation plane (b[0], b[1]). */
TCT_HD void tct_a_frag(const uint32_t wg[4], const uint32_t wh[4], int e, int m, uint32_t a[4]) {
    const uint32_t M = 0x03030303u;
    const uint32_t x = wg[2 * e + (m >> 1)], y = wh[2 * e + (m >> 1)];
    const int s = 4 * (m & 1);
    a[0] = (x >> s) & M;
    a[1] = (y >> s) & M;
    a[2] = (x >> (s + 2)) & M;
    a[3] = (y >> (s + 2)) & M;
}

/* Columns of the 8-wide mma: batch <= 4 (NB4): column c < 4 = hi plane of batch
 * row c, c >= 4 = lo plane of batch row c - 4; batch 5..8 (NB8): two mmas per k
 * step, column c = batch row c, one with the hi and one with the lo plane. */
TCT_HD int tct_col_batch(int nb8, int c) { return nb8 ? c : (c & 3); }
TCT_HD int tct_col_plane(int nb8, int c) { return nb8 ? 0 : (c >> 2); }

/* ---- the stream-K split of the decode GEMV (k_gemv_sk, tc_gemv.cu) ----
 * The tiles of up to TSK_MAXM matrices of the same K are numbered strip-major, matrix
 * after matrix (tile u = strip S, tile j of the strip: u = S*KT + j, S counting the
 * strips of all matrices in order); T tiles in all. Warp w of NW takes the contiguous
 * range [tsk_begin(w), tsk_begin(w + 1)) (NW <= T: no range is empty). A strip that
 * lies inside one warp's range is written by that warp; a strip split among warps
 * w0..w1 (tsk_owner of its first and last tile) gets one partial from each: warp w
 * writes the partial of its first strip to slot 0, of its last strip (when it differs)
 * to slot 1, and the warp that arrives last (a per-strip counter) adds the partials
 * in order w0..w1 and writes y: the same sum in the same order at every batch size
 * and on every run. */
#define TSK_MAXM 4
/* Up to TSK_MAXM tiled matrices of the same K (one input), for one launch: the
 * stream-K kernels and k_gemv_tiled's MM build. Strips are numbered matrix after
 * matrix: global strip S is strip S - s0 of the matrix tsk_mat_of gives. */
typedef struct tsk_mats {
    const uint8_t *w[TSK_MAXM];
    float *y[TSK_MAXM];
    size_t ys[TSK_MAXM];
    int n[TSK_MAXM];         /* rows */
    int strip_end[TSK_MAXM]; /* strips of matrices 0..i (prefix sums) */
    int nm;
} tsk_mats;
/* The matrix holding global strip S (S < strip_end[nm - 1]; a strip past the last
 * gives nm - 1, where its local strip is past n). Constant indices only: a dynamic
 * index into a kernel parameter would copy the struct to local memory. */
TCT_HD int tsk_mat_of(const tsk_mats *M, int64_t S) {
    int i = 0;
    for (int m = 0; m < TSK_MAXM - 1; m++)
        if (m < M->nm - 1 && S >= M->strip_end[m]) i = m + 1;
    return i;
}
/* Matrix mi of M (mi < TSK_MAXM), s0 its first global strip. */
typedef struct tct_one {
    const uint8_t *w;
    float *y;
    size_t ys;
    int n, s0;
} tct_one;
TCT_HD tct_one tct_mat(const tsk_mats *M, int mi) {
    tct_one o;
    o.w = M->w[0];
    o.y = M->y[0];
    o.ys = M->ys[0];
    o.n = M->n[0];
    o.s0 = 0;
    for (int m = 1; m < TSK_MAXM; m++)
        if (m == mi) {
            o.w = M->w[m];
            o.y = M->y[m];
            o.ys = M->ys[m];
            o.n = M->n[m];
            o.s0 = M->strip_end[m - 1];
        }
    return o;
}
TCT_HD int64_t tsk_begin(int64_t w, int64_t T, int64_t NW) { return w * T / NW; }
/* The warp whose range holds tile u (0 <= u < T). */
TCT_HD int64_t tsk_owner(int64_t u, int64_t T, int64_t NW) {
    int64_t w = u * NW / T;
    while (w + 1 < NW && tsk_begin(w + 1, T, NW) <= u) w++;
    while (w > 0 && tsk_begin(w, T, NW) > u) w--;
    return w;
}
/* The partial slot warp w uses for strip S (which its range meets). */
TCT_HD int tsk_slot(int64_t w, int64_t S, int64_t KT, int64_t T, int64_t NW) {
    return S == tsk_begin(w, T, NW) / KT ? 0 : 1;
}

#endif
