/*
 * test_gemv_layout.c - the CUDA decode GEMV's data layout checked on the CPU (no GPU
 * needed): the tiled weight layout and the activation permutation of
 * src/kernels/cuda/gemv_tiled.h (the same index functions the kernels use), and
 * the kernel's fragment construction (tct_a_frag, the column mapping) run through
 * a CPU model of mma.sync.m16n8k32 as the PTX ISA defines its fragments. The
 * oracles are the file-layout trits and an independent integer sum; the float
 * result is also held to the kernel library's bound against float64.
 */
#include "check.h"
#include "kern_check.h"
#include "kernels/cuda/gemv_tiled.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The host copy of k_repack_tiled (tc_gemv.cu): byte by byte through the index rules. */
static uint8_t *repack_host(const tmat *t) {
    const int64_t n = t->q.n, k = t->q.k, G = k / 128, kt = tct_ktiles(k);
    uint8_t *d = calloc(tct_bytes(n, k), 1);
    for (int64_t r = 0; r < n; r++)
        for (int64_t g = 0; g < G; g++) {
            const uint8_t *b = t->buf + (size_t)r * t->q.row_bytes + (size_t)g * 34;
            for (int cb = 0; cb < 32; cb++) d[tct_code_byte(r, g * 128 + 4 * cb, kt)] = b[2 + cb];
            d[tct_scale_byte(r, g, kt)] = b[0];
            d[tct_scale_byte(r, g, kt) + 1] = b[1];
        }
    return d;
}

/* The activation as tc_actq_block writes it (round to nearest even, 14 bits). */
typedef struct hact {
    int8_t *q;
    float *sx;
    int *corr;
    int *xq; /* the integers themselves, for the oracle */
} hact;
static hact quant_host(const float *x, size_t batch, int64_t k) {
    hact a;
    a.q = calloc(batch * (size_t)k * 2, 1);
    a.sx = calloc(batch * (size_t)(k / 128), sizeof(float));
    a.corr = calloc(batch * (size_t)(k / 32), sizeof(int));
    a.xq = calloc(batch * (size_t)k, sizeof(int));
    for (size_t b = 0; b < batch; b++)
        for (int64_t g = 0; g < k / 128; g++) {
            const float *v = x + b * (size_t)k + g * 128;
            float amax = 0;
            for (int j = 0; j < 128; j++) amax = fmaxf(amax, fabsf(v[j]));
            float inv = amax > 0 ? 16256.0f / amax : 0.0f;
            a.sx[b * (size_t)(k / 128) + (size_t)g] = amax / 16256.0f;
            for (int j = 0; j < 128; j++) {
                int xq = (int)lrintf(v[j] * inv);
                int hi = (xq + 64) >> 7, lo = xq - 128 * hi;
                int64_t jj = g * 128 + j;
                a.q[b * (size_t)k * 2 + tcq_byte(jj, 0)] = (int8_t)hi;
                a.q[b * (size_t)k * 2 + tcq_byte(jj, 1)] = (int8_t)lo;
                a.corr[b * (size_t)(k / 32) + (size_t)(jj / 32)] += xq;
                a.xq[b * (size_t)k + (size_t)jj] = xq;
            }
        }
    return a;
}

static uint32_t rd32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* mma.m16n8k32 (u8 A row-major, s8 B col-major, s32): the fragments of the 32
 * lanes as the PTX ISA lays them out. a[lane][4], b[lane][2], d[lane][4] += A.B */
static void mma_model(uint32_t a[32][4], uint32_t b[32][2], int d[32][4]) {
    int D[16][8] = {{0}};
    for (int row = 0; row < 16; row++)
        for (int col = 0; col < 8; col++)
            for (int kk = 0; kk < 32; kk++) {
                int t = (kk % 16) / 4, hiK = kk >= 16, byte = kk % 4;
                int la = 4 * (row % 8) + t, ra = (row >= 8) + 2 * hiK;
                int lb = 4 * col + t;
                int av = (int)((a[la][ra] >> (8 * byte)) & 0xff);
                int bv = (int)(int8_t)((b[lb][hiK] >> (8 * byte)) & 0xff);
                D[row][col] += av * bv;
            }
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4, t = lane % 4;
        d[lane][0] += D[g][2 * t];
        d[lane][1] += D[g][2 * t + 1];
        d[lane][2] += D[g + 8][2 * t];
        d[lane][3] += D[g + 8][2 * t + 1];
    }
}

/* The kernel's per-warp computation for one strip (all tiles, KS = 1), on the CPU.
 * Also checks every group's integer sums against the trits directly. */
static void strip_model(const uint8_t *W, const hact *a, const tmat *t, int64_t k, int batch,
                        int64_t strip, float *y, size_t ys, int *int_bad) {
    const int G = (int)(k / 128), KT = (int)tct_ktiles(k), nu = (int)(k / 32);
    const int nb8 = batch > 4;
    const int64_t n = t->q.n;
    float f[32][4] = {{0}};
    for (int j = 0; j < KT; j++) {
        const uint8_t *tile = W + ((size_t)strip * KT + (size_t)j) * TCT_TILE;
        for (int e = 0; e < 2; e++) {
            int gi = 2 * j + e;
            if (gi >= G) break;
            uint32_t A[4][32][4], BH[4][32][2], BL[4][32][2];
            for (int lane = 0; lane < 32; lane++) {
                int g = lane / 4, tt = lane % 4;
                uint32_t wg[4], wh[4];
                for (int i = 0; i < 4; i++) {
                    wg[i] = rd32(tile + 16 * lane + 4 * i);
                    wh[i] = rd32(tile + 512 + 16 * lane + 4 * i);
                }
                int bc = tct_col_batch(nb8, g), bp = tct_col_plane(nb8, g);
                int bval = bc < batch;
                const int8_t *qp = a->q + (size_t)(bval ? bc : 0) * (size_t)k * 2 + (size_t)bp * 32 +
                                   (size_t)tt * 64 + (size_t)gi * 256;
                for (int m = 0; m < 4; m++) {
                    tct_a_frag(wg, wh, e, m, A[m][lane]);
                    for (int h = 0; h < 2; h++) {
                        BH[m][lane][h] = bval ? rd32(qp + 4 * (2 * m + h)) : 0;
                        BL[m][lane][h] = bval && nb8 ? rd32(qp + 32 + 4 * (2 * m + h)) : 0;
                    }
                }
            }
            int H[32][4] = {{0}}, L[32][4] = {{0}};
            for (int m = 0; m < 4; m++) {
                mma_model(A[m], BH[m], H);
                if (nb8) mma_model(A[m], BL[m], L);
            }
            for (int lane = 0; lane < 32; lane++) {
                int g = lane / 4, tt = lane % 4;
                const uint8_t *sp = tile + 1024 + 8 * g;
                uint16_t dgh, dhh;
                memcpy(&dgh, sp + 2 * e, 2);
                memcpy(&dhh, sp + 4 + 2 * e, 2);
                float dg = tern_f16_to_f32(dgh), dh = tern_f16_to_f32(dhh);
                int ob0 = tct_col_batch(nb8, 2 * tt), ob1 = ob0 + 1, op = tct_col_plane(nb8, 2 * tt);
                float m0 = ob0 < batch ? (nb8 || op ? 1.0f : 128.0f) : 0.0f;
                float m1 = ob1 < batch ? (nb8 || op ? 1.0f : 128.0f) : 0.0f;
                int c0 = 0, c1 = 0;
                if (nb8 || op) {
                    for (int u = 0; u < 4; u++) {
                        c0 += a->corr[(size_t)(ob0 < batch ? ob0 : 0) * nu + 4 * gi + u];
                        c1 += a->corr[(size_t)(ob1 < batch ? ob1 : 0) * nu + 4 * gi + u];
                    }
                }
                float s0 = a->sx[(size_t)(ob0 < batch ? ob0 : 0) * G + gi] * m0;
                float s1 = a->sx[(size_t)(ob1 < batch ? ob1 : 0) * G + gi] * m1;
                int v[4];
                for (int i = 0; i < 4; i++) {
                    int ci = (i & 1) ? c1 : c0;
                    v[i] = nb8 ? H[lane][i] * 128 + L[lane][i] - ci : H[lane][i] - ci;
                }
                f[lane][0] = fmaf((float)v[0], dg * s0, f[lane][0]);
                f[lane][1] = fmaf((float)v[1], dg * s1, f[lane][1]);
                f[lane][2] = fmaf((float)v[2], dh * s0, f[lane][2]);
                f[lane][3] = fmaf((float)v[3], dh * s1, f[lane][3]);
                /* integer oracle: NB8 lanes hold sum (c-1) xq of (row, batch) exactly;
                 * NB4: hi lanes 128 * (c . hi), lo lanes (c . lo) - corr, which add up */
                for (int i = 0; i < 4; i++) {
                    int64_t row = strip * 16 + g + 8 * (i >> 1);
                    int ob = (i & 1) ? ob1 : ob0;
                    if (row >= n || ob >= batch || (!nb8 && op)) continue;
                    long want = 0;
                    for (int jj = 0; jj < 128; jj++) {
                        int64_t col = (int64_t)gi * 128 + jj;
                        const uint8_t *blk = t->buf + (size_t)row * t->q.row_bytes + (size_t)gi * 34;
                        int c = (blk[2 + jj / 4] >> (2 * (jj % 4))) & 3;
                        want += (long)(c - 1) * a->xq[(size_t)ob * (size_t)k + (size_t)col];
                    }
                    long cg = 0;
                    for (int u = 0; u < 4; u++) cg += a->corr[(size_t)ob * nu + 4 * gi + u];
                    long got = nb8 ? v[i] : 128L * H[lane][i] + H[lane ^ 2][i] - cg;
                    if (got != want) (*int_bad)++;
                }
            }
        }
    }
    for (int lane = 0; lane < 32; lane++) {
        int g = lane / 4, tt = lane % 4;
        float v[4];
        for (int i = 0; i < 4; i++) v[i] = nb8 ? f[lane][i] : f[lane][i] + f[lane ^ 2][i];
        if (!nb8 && tt >= 2) continue;
        int ob0 = tct_col_batch(nb8, 2 * tt), ob1 = ob0 + 1;
        int64_t r0 = strip * 16 + g, r1 = r0 + 8;
        if (r0 < n && ob0 < batch) y[(size_t)ob0 * ys + (size_t)r0] = v[0];
        if (r0 < n && ob1 < batch) y[(size_t)ob1 * ys + (size_t)r0] = v[1];
        if (r1 < n && ob0 < batch) y[(size_t)ob0 * ys + (size_t)r1] = v[2];
        if (r1 < n && ob1 < batch) y[(size_t)ob1 * ys + (size_t)r1] = v[3];
    }
}

/* The quantiser's lane formula (tc_actq_block: lane holds inputs 4*lane + s of a
 * block, writes hi at unit*64 + 16i + 4s + k) against tcq_byte, and the tiled byte
 * rules cover the buffer exactly once. */
TEST(index_rules) {
    for (int64_t j = 0; j < 1024; j++) {
        int blk = (int)(j / 128), lane = (int)(j % 128) / 4, s = (int)(j % 4);
        int u = lane >> 3, l8 = lane & 7, i = l8 >> 2, k = l8 & 3;
        size_t p = ((size_t)blk * 4 + (size_t)u) * 64 + (size_t)(i * 16 + s * 4 + k);
        CHECK_EQ_INT((long)tcq_byte(j, 0), (long)p);
        CHECK_EQ_INT((long)tcq_byte(j, 1), (long)p + 32);
    }
    const int64_t shapes[][2] = {{16, 256}, {33, 384}, {5, 128}};
    for (int s = 0; s < 3; s++) {
        int64_t n = shapes[s][0], k = shapes[s][1], kt = tct_ktiles(k);
        size_t nb = tct_bytes(n, k);
        CHECK_EQ_INT((long)nb, (long)(tct_strips(n) * kt * TCT_TILE));
        uint8_t *hit = calloc(nb, 1);
        for (int64_t r = 0; r < tct_strips(n) * 16; r++)
            for (int64_t g = 0; g < 2 * kt; g++) {
                for (int cb = 0; cb < 32; cb++) hit[tct_code_byte(r, g * 128 + 4 * cb, kt)]++;
                hit[tct_scale_byte(r, g, kt)]++;
                hit[tct_scale_byte(r, g, kt) + 1]++;
            }
        int bad = 0;
        for (size_t i = 0; i < nb; i++) bad += hit[i] != 1;
        CHECK_MSG(bad == 0, "n %lld k %lld: %d bytes not covered exactly once", (long long)n,
                  (long long)k, bad);
        free(hit);
    }
}

TEST(emulated_gemv_vs_f64) {
    const int64_t shapes[][2] = {{1, 2560}, {17, 128}, {17, 384}, {33, 1280}, {16, 256}, {40, 5120}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t n = shapes[s][0], k = shapes[s][1];
        tmat t = make_mat(TERN_DT_PQ2_0, n, k, 0);
        uint8_t *W = repack_host(&t);
        for (int B = 1; B <= 8; B++) {
            if (k >= 5120 && B != 1 && B != 4 && B != 8) continue; /* time */
            size_t ys = (size_t)n + 1;
            float *x = rand_x((size_t)B * (size_t)k, 1.0f);
            if (B == 3) x[k / 3] = 300.0f;
            hact a = quant_host(x, (size_t)B, k);
            float *y = calloc((size_t)B * ys, sizeof(float));
            int bad = 0;
            for (int64_t st = 0; st < tct_strips(n); st++) strip_model(W, &a, &t, k, B, st, y, ys, &bad);
            CHECK_MSG(bad == 0, "n %lld k %lld batch %d: %d integer group sums differ",
                      (long long)n, (long long)k, B, bad);
            double e = rel_err_vs_f64(&t, x, (size_t)B, (size_t)k, y, ys);
            CHECK_MSG(e < 1e-3, "n %lld k %lld batch %d: rel err %g", (long long)n, (long long)k,
                      B, e);
            double eq = qerr_ratio_vs_f64(&t, x, (size_t)B, (size_t)k, y, ys);
            CHECK_MSG(eq < 1.0, "n %lld k %lld batch %d: err / bound %g", (long long)n,
                      (long long)k, B, eq);
            for (int b = 0; b < B; b++) CHECK(y[(size_t)b * ys + (size_t)n] == 0.0f);
            free(x); free(y); free(a.q); free(a.sx); free(a.corr); free(a.xq);
        }
        free(W);
        free_mat(&t);
    }
}

/* The H200 run failed max|err|/max|ref| < 1e-3 on n 1 with the outlier x = 500
 * (file layout k 128 batch 4: 0.021; tiled k 2560 batch 5: 0.0016; repacked k 128
 * batch 5: 0.0032). This model computes the kernel's exact integer group sums, and
 * it fails that ratio just as often on the same cases: the quantiser's error in the
 * outlier's block (step 500/16256) against one cancelling output is ill-posed, not
 * a kernel bug. The per-output bound qerr_ratio_vs_f64 (kern_check.h) holds. */
TEST(outlier_bound_well_posed) {
    const int64_t ks[] = {128, 2560};
    int over = 0, trials = 0;
    for (int tr = 0; tr < 40; tr++) {
        int64_t k = ks[tr & 1];
        const int B = 4 + (tr >> 1 & 1);
        tmat t = make_mat(TERN_DT_PQ2_0, 1, k, 0);
        uint8_t *W = repack_host(&t);
        float *x = rand_x((size_t)B * (size_t)k, 1.0f);
        x[k / 3] = 500.0f;
        hact a = quant_host(x, (size_t)B, k);
        float *y = calloc((size_t)B * 2, sizeof(float));
        int bad = 0;
        strip_model(W, &a, &t, k, B, 0, y, 2, &bad);
        CHECK_EQ_INT(bad, 0);
        double e = rel_err_vs_f64(&t, x, (size_t)B, (size_t)k, y, 2);
        double eq = qerr_ratio_vs_f64(&t, x, (size_t)B, (size_t)k, y, 2);
        CHECK_MSG(eq < 1.0, "k %lld batch %d: err / bound %g", (long long)k, B, eq);
        over += e >= 1e-3;
        trials++;
        free(x); free(y); free(a.q); free(a.sx); free(a.corr); free(a.xq);
        free(W);
        free_mat(&t);
    }
    fprintf(stderr, "  n 1 + outlier: exact-integer model over the old 1e-3 ratio in %d of %d trials\n",
            over, trials);
}

/* The stream-K split of k_gemv_sk (gemv_tiled.h tsk_*), run as the kernel runs it: each
 * warp walks its tile range, flushes a strip when it leaves it (written whole, or a
 * partial filed at tsk_slot and counted), and the warp that counts a split strip's
 * last contribution sums w0..w1 at their slots. Checked: every tile is summed exactly
 * once, every strip is written exactly once with the right total (integer tile values
 * stand in for the tile sums, so the check is exact), no two live partials share a
 * (warp, slot), and the reducer reads exactly the partials filed for its strip. */
TEST(stream_k_split) {
    uint64_t rng = 0x2545F4914F6CDD1Dull;
    int cases = 0;
    for (int tr = 0; tr < 4000; tr++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        const int64_t KT = 1 + (int64_t)(rng % 70);              /* 1..70 tiles per strip */
        const int64_t strips = 1 + (int64_t)((rng >> 8) % 300);  /* all matrices together */
        const int64_t T = strips * KT;
        int64_t NW = 1 + (int64_t)((rng >> 20) % 2112);
        if (NW > T) NW = T;
        /* the strip's true total: sum of its tile values u + 1 */
        int64_t *got = calloc((size_t)strips, sizeof *got);
        int *writes = calloc((size_t)strips, sizeof *writes);
        int *count = calloc((size_t)strips, sizeof *count);
        int64_t *part = calloc((size_t)NW * 2, sizeof *part);
        int64_t *part_strip = malloc((size_t)NW * 2 * sizeof *part_strip);
        for (int64_t i = 0; i < NW * 2; i++) part_strip[i] = -1;
        int bad = 0;
        /* warps in a shuffled order: any arrival order must give the same result */
        int64_t *order = malloc((size_t)NW * sizeof *order);
        for (int64_t w = 0; w < NW; w++) order[w] = w;
        for (int64_t w = NW - 1; w > 0; w--) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            int64_t j = (int64_t)(rng % (uint64_t)(w + 1)), tmp = order[w];
            order[w] = order[j];
            order[j] = tmp;
        }
        /* first pass: every warp files its partials; second: arrivals in `order` */
        for (int64_t oi = 0; oi < NW; oi++) {
            const int64_t w = order[oi];
            const int64_t a = tsk_begin(w, T, NW), b = tsk_begin(w + 1, T, NW);
            if (b <= a) { bad++; continue; } /* NW <= T: never empty */
            int64_t cur = a / KT, acc = 0;
            for (int64_t u = a; u <= b; u++) {
                const int64_t S = u < b ? u / KT : -1;
                if (S != cur) { /* flush cur */
                    if (a <= cur * KT && (cur + 1) * KT <= b) {
                        got[cur] = acc;
                        writes[cur]++;
                    } else {
                        const int sl = tsk_slot(w, cur, KT, T, NW);
                        if (part_strip[w * 2 + sl] != -1) bad++; /* slot reused */
                        part_strip[w * 2 + sl] = cur;
                        part[w * 2 + sl] = acc;
                        const int64_t w0 = tsk_owner(cur * KT, T, NW), w1 = tsk_owner((cur + 1) * KT - 1, T, NW);
                        if (w < w0 || w > w1) bad++;
                        if (count[cur]++ == (int)(w1 - w0)) { /* the last one in reduces */
                            int64_t sum = 0;
                            for (int64_t v = w0; v <= w1; v++) {
                                const int vs = tsk_slot(v, cur, KT, T, NW);
                                if (v > w0 && vs != 0) bad++; /* the kernel assumes it */
                                if (part_strip[v * 2 + vs] != cur) bad++;
                                sum += part[v * 2 + vs];
                            }
                            got[cur] = sum;
                            writes[cur]++;
                        }
                    }
                    acc = 0;
                    cur = S;
                }
                if (u < b) acc += u + 1;
            }
        }
        for (int64_t S = 0; S < strips; S++) {
            const int64_t want = KT * (S * KT + 1) + KT * (KT - 1) / 2;
            bad += writes[S] != 1 || got[S] != want;
        }
        CHECK_MSG(bad == 0, "T %lld (KT %lld) over %lld warps: %d faults", (long long)T, (long long)KT,
                  (long long)NW, bad);
        cases++;
        free(got); free(writes); free(count); free(part); free(part_strip); free(order);
        if (bad) break;
    }
    CHECK(cases > 0);
}

/* k_gemv_tiled's MM build (tc_gemv_tiled_multi): the grid's strips mapped to up to
 * four matrices by tsk_mat_of / tct_mat, emulated for both epilogues (KS 1: each warp
 * writes its strip's rows; KS > 1: the CTA's reduction loop over its strips): every
 * row of every matrix written exactly once, into that matrix's output, from that
 * matrix's weights; nothing past a matrix's rows. Random row counts (16-row strips
 * met anywhere in a CTA), 1..4 matrices, 1..5 strips per CTA. */
TEST(multi_strip_map) {
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int cases = 0, bad = 0;
    for (int tr = 0; tr < 3000 && !bad; tr++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        tsk_mats M;
        memset(&M, 0, sizeof M);
        M.nm = 1 + (int)(rng % TSK_MAXM);
        int *hits[TSK_MAXM] = {0};
        int64_t total = 0;
        for (int i = 0; i < M.nm; i++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            M.n[i] = 1 + (int)(rng % (i & 1 ? 70 : 1100));
            M.w[i] = (const uint8_t *)(uintptr_t)(0x100000u * (unsigned)(i + 1));
            hits[i] = calloc((size_t)M.n[i], sizeof(int));
            M.y[i] = (float *)(uintptr_t)(0x900000u * (unsigned)(i + 1)); /* identifies the matrix */
            M.ys[i] = (size_t)M.n[i];
            total += tct_strips(M.n[i]);
            M.strip_end[i] = (int)total;
        }
        const int spc = 1 + (int)((rng >> 17) % 5), KS = 1 + (int)((rng >> 29) % 3);
        const int64_t grid = (total + spc - 1) / spc;
        for (int64_t blk = 0; blk < grid; blk++) {
            for (int sl = 0; sl < spc; sl++) { /* the warps of strip slot sl (their prologue) */
                const int64_t gstrip = blk * spc + sl;
                const int mi = tsk_mat_of(&M, gstrip);
                const tct_one mo = tct_mat(&M, mi);
                const int64_t strip = gstrip - mo.s0;
                const bool live = strip * 16 < mo.n;
                if (live && (gstrip >= total || strip < 0 || mo.w != M.w[mi] ||
                             (mi && gstrip < M.strip_end[mi - 1]) || gstrip >= M.strip_end[mi]))
                    bad++;
                if (KS == 1)
                    for (int g = 0; g < 16; g++) { /* rows row0 = strip*16 + g, row1 = row0 + 8 */
                        const int64_t row = strip * 16 + g;
                        if (row < mo.n) {
                            if (mo.y != M.y[mi]) bad++;
                            hits[mi][row]++;
                        }
                    }
            }
            if (KS > 1)
                for (int idx = 0; idx < spc * 128; idx++) { /* the reduction loop, batch column 0 */
                    const int s = idx >> 7, rr = (idx >> 3) & 15, b = idx & 7;
                    if (b) continue;
                    const int64_t gs = blk * spc + s;
                    const int mi = tsk_mat_of(&M, gs);
                    const tct_one o = tct_mat(&M, mi);
                    const int64_t row = (gs - o.s0) * 16 + rr;
                    if (row >= o.n) continue;
                    if (o.y != M.y[mi] || o.ys != M.ys[mi]) bad++;
                    hits[mi][row]++;
                }
        }
        for (int i = 0; i < M.nm; i++) {
            for (int r = 0; r < M.n[i]; r++) bad += hits[i][r] != 1;
            free(hits[i]);
        }
        CHECK_MSG(bad == 0, "nm %d spc %d KS %d: %d faults", M.nm, spc, KS, bad);
        cases++;
    }
    CHECK(cases > 100);
}

int main(void) {
    RUN(index_rules);
    RUN(emulated_gemv_vs_f64);
    RUN(outlier_bound_well_posed);
    RUN(stream_k_split);
    RUN(multi_strip_map);
    return check_summary();
}
