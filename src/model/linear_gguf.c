/*
 * linear_gguf.c - tern_linear_from_gguf: one ternary tensor of a GGUF file as a
 * tern_linear (the Python package's TernaryLinear.from_gguf). PQ2_0, Q2_0 (both
 * layouts) and Q1_0 rows go to tern_linear_from_packed as they are; PTQ1_0 rows
 * are transcoded to PQ2_0 first (lossless). The matrix is used as stored: for a
 * Hadamard-rotated model that is the rotated matrix. It lives in model/, the first
 * layer above both the readers (formats/) and the kernels' linear layer, which sit
 * side by side on core and never call each other.
 */
#include "formats/gguf.h"
#include "formats/codecs.h"

#include <stdlib.h>

tern_status tern_linear_from_gguf(const char *path, const char *tensor, const float *bias,
                                  tern_linear **out) {
    if (!out) return tern_fail(TERN_ERR_INVALID_ARG, "tern_linear_from_gguf: out is NULL");
    *out = NULL;
    if (!path || !tensor) return tern_fail(TERN_ERR_INVALID_ARG, "tern_linear_from_gguf: NULL path or tensor name");
    tern_gguf *g = NULL;
    tern_status st = tern_gguf_open(path, &g);
    if (st) return st;
    const tern_gguf_tensor *t = tern_gguf_find_tensor(g, tensor);
    if (!t) {
        st = tern_fail(TERN_ERR_FORMAT, "%s: no tensor '%s'", path, tensor);
    } else if (t->n_dims != 2) {
        st = tern_fail(TERN_ERR_SHAPE, "%s: tensor '%s' has %u dimensions (a linear layer needs 2)", path,
                       tensor, t->n_dims);
    } else if (t->type == TERN_DT_PTQ1_0) {
        size_t rb = tern_codec_row_bytes(TERN_DT_PQ2_0, t->ne[0]), n = rb * (size_t)t->ne[1];
        void *tmp = malloc(n ? n : 1);
        if (!tmp) {
            st = tern_fail(TERN_ERR_NOMEM, "%s: out of memory for tensor '%s'", path, tensor);
        } else {
            st = tern_transcode_rows(TERN_DT_PTQ1_0, t->data, TERN_DT_PQ2_0, tmp, t->ne[0], t->ne[1], tensor);
            if (!st)
                st = tern_linear_from_packed(TERN_DT_PQ2_0, tmp, n, bias, (int64_t)t->ne[1], (int64_t)t->ne[0], out);
            free(tmp);
            if (st) st = tern_fail_prefix(st, "%s", path);
        }
    } else if (t->type == TERN_DT_PQ2_0 || t->type == TERN_DT_Q2_0 || t->type == TERN_DT_Q2_0_G64 ||
               t->type == TERN_DT_Q1_0) {
        st = tern_linear_from_packed(t->type, t->data, (size_t)t->nbytes, bias, (int64_t)t->ne[1],
                                     (int64_t)t->ne[0], out);
        if (st) st = tern_fail_prefix(st, "%s: tensor '%s'", path, tensor);
    } else {
        st = tern_fail(TERN_ERR_UNSUPPORTED, "%s: tensor '%s' is %s (need PQ2_0, PTQ1_0, Q2_0, Q2_0_G64 or Q1_0)",
                       path, tensor, tern_dtype_name(t->type));
    }
    tern_gguf_close(g);
    return st;
}
