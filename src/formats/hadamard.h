/*
 * hadamard.h - the PrismML blockwise-Hadamard contract (seed 000, section 4.1):
 * parse and validate the `prism.hadamard.*` GGUF keys or an MLX pack's
 * hadamard.json (the same keys as plain JSON values).
 *
 *   R = (1/sqrt(n)) H_n S, n = block_size; a folded matrix stores W' = W R^T and
 *   the runtime computes y = W' (R x): x' = x * signs(K), then a normalized
 *   Sylvester FWHT over each n-block of K. The embedding table
 *   (inverse_weight_names) stores R e: after the gather e = S (H z / sqrt(n)).
 *
 * Keys (GGUF type / JSON type):
 *   version              UINT32 / int        must be 1
 *   block_size           UINT32 / int        power of two (1024 in Bonsai)
 *   transform            STRING              exactly "normalized-sylvester-walsh-hadamard"
 *   axis                 STRING              exactly "input-last-dimension"
 *   sign_mode            STRING              exactly "explicit"
 *   sign_widths          INT32[] / int[]     K widths; each a multiple of block_size, no repeats
 *   sign_values          INT32[] / int[]     exactly +1/-1, sum(sign_widths) entries, concatenated in order
 *   weight_names         STRING[]            folded matrices (the source's tensor names)
 *   inverse_weight_names STRING[]            embedding tables stored rotated
 *   gdn_v_grouped        BOOL / bool         ssm_out columns in grouped V order
 * Every failure names the key that is wrong (and the file).
 *
 * Cross-checks against the tensors (tern_hadamard_validate): every listed name
 * present and ternary, a sign vector for every folded K (ne[0] / last dim), the
 * block size divides every folded K.
 */
#ifndef TERN_FORMATS_HADAMARD_H
#define TERN_FORMATS_HADAMARD_H

#include "core/common.h"
#include "formats/gguf.h"

#define TERN_HADAMARD_TRANSFORM "normalized-sylvester-walsh-hadamard"
#define TERN_HADAMARD_AXIS "input-last-dimension"

typedef struct tern_hadamard_meta {
    uint32_t version;           /* 1 */
    uint32_t block_size;        /* n, e.g. 1024 */
    uint32_t n_widths;
    uint32_t *widths;           /* [n_widths] in file order */
    float **signs;              /* [n_widths][widths[i]], each exactly +1.0f or -1.0f */
    uint32_t n_weights;
    char **weight_names;        /* [n_weights] folded matrices */
    uint32_t n_inverse;
    char **inverse_names;       /* [n_inverse] rotated embedding tables */
    bool gdn_v_grouped;
    void *index;                /* private: name set */
} tern_hadamard_meta;

/* From GGUF keys. Returns TERN_OK with *out = NULL when the file has no
 * prism.hadamard.* key at all; any partial/invalid contract is an error. */
tern_status tern_hadamard_from_gguf(const tern_gguf *g, tern_hadamard_meta **out);
/* From hadamard.json text / file (keys with the "prism.hadamard." prefix, as in
 * the pack; unprefixed keys are accepted too). */
tern_status tern_hadamard_from_json(const char *text, size_t len, const char *src, tern_hadamard_meta **out);
tern_status tern_hadamard_from_json_file(const char *path, tern_hadamard_meta **out);
/* Only the sign vectors (block_size, sign_widths, sign_values; no names, no
 * scalars but block_size, which defaults to 1024), from a GGUF with those
 * prism.hadamard.* keys or a JSON object: `tern quantize --signs FILE`. The same
 * limits as the whole contract. */
tern_status tern_hadamard_signs_from_file(const char *path, tern_hadamard_meta **out);
void tern_hadamard_free(tern_hadamard_meta *h);

/* Sign vector (+-1.0f) for a K width, NULL if the contract has none. */
const float *tern_hadamard_signs_for_width(const tern_hadamard_meta *h, uint64_t K);
bool tern_hadamard_is_folded(const tern_hadamard_meta *h, const char *name);
bool tern_hadamard_is_inverse(const tern_hadamard_meta *h, const char *name);

/* Tensor lookup for validation: set *K (reduction width) and *ternary and
 * return true when `name` exists. */
typedef bool (*tern_hadamard_lookup_fn)(const char *name, uint64_t *K, bool *ternary, void *user);
tern_status tern_hadamard_validate(const tern_hadamard_meta *h, tern_hadamard_lookup_fn lookup, void *user,
                                   const char *src);
/* The same against a GGUF's tensors (K = ne[0], ternary = packed ternary type). */
tern_status tern_hadamard_validate_gguf(const tern_hadamard_meta *h, const tern_gguf *g);

/* Copy with every weight/inverse name passed through rename (NULL: keep).
 * rename returns a malloc'd string or NULL to keep the name. For converters
 * that move the contract between the GGUF and MLX namespaces. */
tern_status tern_hadamard_clone(const tern_hadamard_meta *h, char *(*rename)(const char *name, void *u), void *u,
                                tern_hadamard_meta **out);
/* Write the contract as prism.hadamard.* keys / as hadamard.json text
 * (malloc'd, free()). */
tern_status tern_hadamard_to_gguf(const tern_hadamard_meta *h, tern_gguf_writer *w);
tern_status tern_hadamard_to_json(const tern_hadamard_meta *h, char **out);

#endif
