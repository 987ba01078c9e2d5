/*
 * convert_internal.h - the MLX pack directions of `tern convert` (convert_mlx.c),
 * which convert.c dispatches to. Not for use outside src/formats.
 *
 * The converters call downward only: convert.c -> convert_mlx.c -> hf_meta.c
 * (metadata keys, file type, size label); quantize.c and synth.c -> hf_meta.c;
 * nothing calls back up into convert.c.
 */
#ifndef TERN_FORMATS_CONVERT_INTERNAL_H
#define TERN_FORMATS_CONVERT_INTERNAL_H

#include "formats/convert.h"
#include "formats/gguf.h"

/* GGUF g (ternary weights) -> MLX pack directory out_dir (created). */
tern_status tern_convert_gguf_to_mlx(const tern_gguf *g, const char *out_dir, const tern_convert_opts *o);
/* MLX pack directory in_dir -> GGUF file out (o->to picks the ternary layout). */
tern_status tern_convert_mlx_to_gguf(const char *in_dir, const char *out, const tern_convert_opts *o);

#endif
