/*
 * test_safetensors.c - safetensors reader and writer.
 *
 * Oracles: the qwen35-tiny README (pack tensor names, dtypes, shapes), hand
 * written headers, and the Python `safetensors` package (reference loader) for
 * files this writer produces. Hostile headers and truncations must fail with an
 * error naming the file, never crash.
 */
#include "check.h"
#include "formats/safetensors.h"

#include <unistd.h>

static uint8_t *mk(const char *json, size_t data_bytes, size_t *n) {
    size_t jl = strlen(json);
    uint8_t *b = calloc(1, 8 + jl + data_bytes + 1);
    uint64_t l = jl;
    memcpy(b, &l, 8);
    memcpy(b + 8, json, jl);
    for (size_t i = 0; i < data_bytes; i++) b[8 + jl + i] = (uint8_t)(i * 13 + 5);
    *n = 8 + jl + data_bytes;
    return b;
}

static void expect_fail(const char *json, size_t data_bytes, const char *name, const char *must) {
    size_t n;
    uint8_t *b = mk(json, data_bytes, &n);
    tern_st *st = NULL;
    tern_status s = tern_st_open_mem(b, n, name, &st);
    CHECK_MSG(s != TERN_OK, "%s parsed: %s", name, json);
    CHECK(st == NULL);
    CHECK_MSG(strstr(tern_last_error(), name) != NULL, "%s: error does not name the file: %s", name, tern_last_error());
    if (must) CHECK_MSG(strstr(tern_last_error(), must) != NULL, "%s: error lacks '%s': %s", name, must, tern_last_error());
    if (s == TERN_OK) tern_st_close(st);
    free(b);
}

TEST(handbuilt_valid) {
    const char *js = "{\"__metadata__\":{\"format\":\"pt\"},\"b\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
                     "\"a\":{\"dtype\":\"U32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                     "\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[28,28]},"
                     "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[28,36]}}";
    size_t n;
    uint8_t *b = mk(js, 36, &n);
    tern_st *st = NULL;
    CHECK_EQ_INT(tern_st_open_mem(b, n, "ok.safetensors", &st), TERN_OK);
    if (st) {
        CHECK_EQ_INT(st->n_tensors, 4);
        CHECK_STR(tern_st_meta(st, "format"), "pt");
        CHECK(tern_st_meta(st, "nope") == NULL);
        const tern_st_tensor *t = tern_st_find(st, "b");
        CHECK(t && t->type == TERN_DT_F16 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->nbytes == 12);
        CHECK(t && t->data == b + 8 + strlen(js) + 16);
        t = tern_st_find(st, "a");
        CHECK(t && t->type == TERN_DT_U32 && t->elem_size == 4 && t->data[0] == 5);
        t = tern_st_find(st, "s");
        CHECK(t && t->n_dims == 0 && t->n_elems == 1 && t->type == TERN_DT_COUNT);
        t = tern_st_find(st, "e");
        CHECK(t && t->n_elems == 0 && t->nbytes == 0);
        uint64_t shp[2] = {2, 3};
        CHECK_EQ_INT(tern_st_expect(st, tern_st_find(st, "b"), "F16", 2, shp), TERN_OK);
        uint64_t bad[2] = {3, 2};
        CHECK_EQ_INT(tern_st_expect(st, tern_st_find(st, "b"), "F16", 2, bad), TERN_ERR_SHAPE);
        CHECK(strstr(tern_last_error(), "'b'") && strstr(tern_last_error(), "[2, 3]"));
        tern_st_close(st);
    }
    free(b);
}

TEST(handbuilt_hostile) {
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,6]}}", 8, "short.st", "'a'");
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 4, "range.st", "outside");
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[8,0]}}", 8, "rev.st", "'a'");
    expect_fail("{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8, "dtype.st", "dtype");
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[-4],\"data_offsets\":[0,8]}}", 8, "neg.st", "shape");
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, "frac.st", "shape");
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
                "ovf.st", "'a'");
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,2]}}", 8, "dims.st", "dims");
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                "\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[4,12]}}", 16, "overlap.st", "overlap");
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]},"
                "\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[8,16]}}", 16, "dup.st", "duplicate");
    expect_fail("{\"__metadata__\":{\"k\":1}}", 0, "meta.st", "__metadata__");
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[4]}}", 8, "nooffs.st", "data_offsets");
    expect_fail("{\"a\":[1,2]}", 8, "notobj.st", "'a'");
    expect_fail("[1,2]", 0, "arr.st", NULL);
    expect_fail("{\"a\":", 0, "badjson.st", "JSON");
    expect_fail("{} trailing", 0, "trail.st", NULL);
    expect_fail("{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,1e400]}}", 8, "inf.st", NULL);
    /* header length beyond the file, and every truncation of a valid file */
    const char *js = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";
    size_t n;
    uint8_t *b = mk(js, 16, &n);
    uint8_t *c = malloc(n);
    memcpy(c, b, n);
    c[5] = 1;
    tern_st *st = NULL;
    CHECK(tern_st_open_mem(c, n, "hlen.st", &st) != TERN_OK && strstr(tern_last_error(), "hlen.st"));
    for (size_t k = 0; k < n; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "trunc%zu.st", k);
        CHECK_MSG(tern_st_open_mem(b, k, nm, &st) != TERN_OK, "truncation at %zu parsed", k);
        CHECK(strstr(tern_last_error(), nm) != NULL);
    }
    /* random byte flips anywhere in the header: no crash, errors name the file */
    check_seed();
    int refused = 0;
    for (int it = 0; it < 2000; it++) {
        memcpy(c, b, n);
        size_t at = 8 + check_rand_u64() % strlen(js);
        c[at] = (uint8_t)check_rand_u64();
        tern_status s = tern_st_open_mem(c, n, "flip.st", &st);
        if (s == TERN_OK) tern_st_close(st);
        else { refused++; CHECK(strstr(tern_last_error(), "flip.st") != NULL); }
    }
    CHECK(refused > 0);
    CHECK_EQ_INT(tern_st_open("/nonexistent/m.safetensors", &st), TERN_ERR_IO);
    free(b);
    free(c);
}

TEST(fixture_pack_safetensors) {
    const char *p = fixture_path("qwen35-tiny/mlx-pack/model.safetensors");
    if (!p) SKIP("fixtures missing");
    tern_st *st = NULL;
    CHECK_EQ_INT(tern_st_open(p, &st), TERN_OK);
    if (!st) { fprintf(stderr, "%s\n", tern_last_error()); return; }
    CHECK_STR(tern_st_meta(st, "format"), "mlx");
    /* README: 27 ternary modules x {weight, scales, biases, signs} + the plain tensors */
    int u32 = 0;
    for (size_t i = 0; i < st->n_tensors; i++) u32 += !strcmp(st->tensors[i].dtype, "U32");
    CHECK_EQ_INT(u32, 27);
    const tern_st_tensor *t = tern_st_find(st, "language_model.lm_head.weight");
    uint64_t w[2] = {4096, 1024 / 16}, s[2] = {4096, 1024 / 128}, k[1] = {1024};
    CHECK_EQ_INT(tern_st_expect(st, t, "U32", 2, w), TERN_OK);
    CHECK_EQ_INT(tern_st_expect(st, tern_st_find(st, "language_model.lm_head.scales"), "F16", 2, s), TERN_OK);
    CHECK_EQ_INT(tern_st_expect(st, tern_st_find(st, "language_model.lm_head.biases"), "F16", 2, s), TERN_OK);
    CHECK_EQ_INT(tern_st_expect(st, tern_st_find(st, "language_model.lm_head.signs"), "F16", 1, k), TERN_OK);
    uint64_t conv[3] = {5120, 4, 1};
    CHECK_EQ_INT(tern_st_expect(st, tern_st_find(st, "language_model.model.layers.0.linear_attn.conv1d.weight"), "F32", 3, conv), TERN_OK);
    uint64_t ab[2] = {24, 1024};
    CHECK_EQ_INT(tern_st_expect(st, tern_st_find(st, "language_model.model.layers.0.linear_attn.in_proj_a.weight"), "BF16", 2, ab), TERN_OK);
    uint64_t dw[2] = {1024, 3072 / 16};
    CHECK_EQ_INT(tern_st_expect(st, tern_st_find(st, "language_model.model.layers.3.self_attn.o_proj.weight"), "U32", 2, dw), TERN_OK);
    tern_st_close(st);
}

static tern_status fill_seq(void *dst, uint64_t n, void *u) {
    (void)u;
    for (uint64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = (uint8_t)(i ^ 0x5a);
    return TERN_OK;
}

TEST(writer_round_trip_and_python) {
    char out[256];
    snprintf(out, sizeof out, "/tmp/tern_test_st_%d.safetensors", (int)getpid());
    tern_st_writer *w = NULL;
    CHECK_EQ_INT(tern_st_writer_new(&w), TERN_OK);
    CHECK_EQ_INT(tern_st_w_set_meta(w, "format", "mlx"), TERN_OK);
    static float f[6] = {1.5f, -2, 3, 0.25f, 5, 6};
    uint64_t s23[2] = {2, 3};
    CHECK_EQ_INT(tern_st_w_add(w, "x.f32", "F32", 2, s23, f, NULL, NULL), TERN_OK);
    uint64_t s5[1] = {5};
    CHECK_EQ_INT(tern_st_w_add(w, "x.u16", "U16", 1, s5, NULL, fill_seq, NULL), TERN_OK);
    uint64_t s3[2] = {3, 1};
    CHECK_EQ_INT(tern_st_w_add(w, "x.u32", "U32", 2, s3, NULL, fill_seq, NULL), TERN_OK);
    CHECK_EQ_INT(tern_st_w_add(w, "x.u32", "U32", 2, s3, NULL, fill_seq, NULL), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_st_w_add(w, "bad", "Q2", 2, s3, NULL, fill_seq, NULL), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_st_w_write(w, out, NULL, NULL), TERN_OK);
    tern_st_writer_free(w);
    tern_st *st = NULL;
    CHECK_EQ_INT(tern_st_open(out, &st), TERN_OK);
    if (st) {
        CHECK_EQ_INT(st->data_offset % 8, 0);
        CHECK_STR(tern_st_meta(st, "format"), "mlx");
        const tern_st_tensor *t = tern_st_find(st, "x.f32");
        CHECK(t && t->nbytes == 24 && !memcmp(t->data, f, 24));
        t = tern_st_find(st, "x.u16");
        CHECK(t && t->nbytes == 10 && t->data[1] == (1 ^ 0x5a));
        tern_st_close(st);
    }
    if (system("python3 -c 'import safetensors, numpy' 2>/dev/null") != 0) {
        unlink(out);
        SKIP_OPTIONAL("python3 safetensors package missing: Python oracle skipped");
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 - <<'EOF'\n"
             "import sys, numpy as np\n"
             "from safetensors import safe_open\n"
             "from safetensors.numpy import load_file\n"
             "d = load_file('%s')\n"
             "ok = np.array_equal(d['x.f32'], np.array([[1.5, -2, 3], [0.25, 5, 6]], dtype=np.float32))\n"
             "ok = ok and d['x.u16'].dtype == np.uint16 and d['x.u16'].shape == (5,)\n"
             "ok = ok and d['x.u16'].tobytes() == bytes(i ^ 0x5a for i in range(10))\n"
             "ok = ok and d['x.u32'].shape == (3, 1) and d['x.u32'].tobytes() == bytes(i ^ 0x5a for i in range(12))\n"
             "with safe_open('%s', 'np') as f: ok = ok and f.metadata() == {'format': 'mlx'}\n"
             "sys.exit(0 if ok else 1)\n"
             "EOF",
             out, out);
    CHECK_MSG(system(cmd) == 0, "python safetensors disagrees with %s", out);
    unlink(out);
}

int main(void) {
    RUN(handbuilt_valid);
    RUN(handbuilt_hostile);
    RUN(fixture_pack_safetensors);
    RUN(writer_round_trip_and_python);
    return check_summary();
}
