/*
 * cpu_avx2.c - the avx2 kernels (placeholder: the reference is used until
 * the optimised kernels land).
 */
#include "kernels/cpu/internal.h"

void tern_avx2_fill(tern_kern_table *t) { (void)t; }
