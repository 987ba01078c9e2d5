/* model_ops_avx512.c - the model ops' per-head loops (model_ops.h) compiled with avx512 flags. */
#define TK_SFX _avx512
#include "kernels/cpu/model_ops.h"

void tern_model_avx512_fill(tern_kern_table *t) {
    t->gdn_head = tern_gdn_head_avx512;
    t->gdn_blocks = tern_gdn_head_blocks_avx512;
    t->attn_head = tern_attn_head_avx512;
    t->gdn_block_min = TERN_GDN_BLOCK_MIN_FMA;
}
