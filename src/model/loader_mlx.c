/*
 * loader_mlx.c - MLX pack directories (config.json + hadamard.json +
 * model.safetensors): placeholder until the pack reader is wired in.
 */
#include "model/model.h"

tern_status tm_load_mlx(tern_model *m, const char *dir) {
    (void)m;
    return tern_fail(TERN_ERR_UNSUPPORTED, "%s: MLX packs are not supported yet", dir);
}
