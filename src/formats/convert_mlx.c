/*
 * convert_mlx.c - GGUF <-> MLX pack directions of `tern convert` (placeholder).
 */
#include "formats/convert.h"
#include "formats/gguf.h"

tern_status tern_convert_gguf_to_mlx(const tern_gguf *g, const char *out_dir,
                                     const tern_convert_opts *o);
tern_status tern_convert_mlx_to_gguf(const char *in_dir, const char *out,
                                     const tern_convert_opts *o);

tern_status tern_convert_gguf_to_mlx(const tern_gguf *g, const char *out_dir,
                                     const tern_convert_opts *o) {
    (void)g; (void)o;
    return tern_fail(TERN_ERR_UNSUPPORTED, "convert: writing an MLX pack (%s) is not implemented yet", out_dir);
}
tern_status tern_convert_mlx_to_gguf(const char *in_dir, const char *out,
                                     const tern_convert_opts *o) {
    (void)out; (void)o;
    return tern_fail(TERN_ERR_UNSUPPORTED, "convert: reading an MLX pack (%s) is not implemented yet", in_dir);
}
