/*
 * cpu_neon.c - the neon kernels (placeholder: the reference is used until
 * the optimised kernels land).
 */
#include "kernels/cpu/internal.h"

void tern_neon_fill(tern_kern_table *t) { (void)t; }
