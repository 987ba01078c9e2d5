/*
 * convert.h - lossless conversion between ternary model files (`tern convert`).
 *
 * IN and OUT are each a GGUF file or an MLX pack directory (config.json +
 * hadamard.json + model.safetensors). Ternary tensors are transcoded with the
 * codecs of codecs.h (PQ2_0, PTQ1_0, fork Q2_0, mainline Q2_0 g64, MLX affine
 * words); nothing is requantised. GGUF -> GGUF keeps every metadata key in order
 * and the tensor order, and only rewrites general.file_type (PQ2_0 141, PTQ1_0 143,
 * Q2_0/g64 41) and, when asked, general.name and the --set keys; so pq2_0 -> ptq1_0 -> pq2_0 is
 * byte-identical. GGUF <-> MLX applies the GDN V-head conventions (vorder.h) and
 * the name, norm, A_log and conv1d mappings documented in docs/formats.md.
 */
#ifndef TERN_FORMATS_CONVERT_H
#define TERN_FORMATS_CONVERT_H

#include "core/common.h"

typedef enum tern_convert_target {
    TERN_CONV_PQ2_0 = 0,
    TERN_CONV_PTQ1_0,
    TERN_CONV_Q2_0,
    TERN_CONV_Q2_0_G64,
    TERN_CONV_MLX
} tern_convert_target;

typedef struct tern_convert_opts {
    tern_convert_target to;
    const char *name;            /* general.name to write (NULL: keep the input's) */
    const char *const *set;      /* metadata to write, each "KEY=TYPE:VALUE" with TYPE f32,
                                    i32, u32, bool (true|false) or str; an existing key is
                                    replaced in place, a new one appended (GGUF output only) */
    size_t n_set;
    tern_progress_fn progress;   /* bytes written / total (may be NULL) */
    void *progress_user;
} tern_convert_opts;

/* Parse "pq2_0|ptq1_0|q2_0|q2_0_g64|mlx". false when unknown. */
bool tern_convert_target_parse(const char *s, tern_convert_target *out);

tern_status tern_convert(const char *in, const char *out, const tern_convert_opts *o);

/* Check one "KEY=TYPE:VALUE" assignment (as tern_convert applies it); writes it to w
 * when w is not NULL. TERN_ERR_INVALID_ARG names what is wrong. */
struct tern_gguf_writer;
tern_status tern_convert_set_apply(struct tern_gguf_writer *w, const char *assignment);

#endif
