/*
 * cpu_avx512.c - the avx512 kernels (placeholder: the reference is used until
 * the optimised kernels land).
 */
#include "kernels/cpu/internal.h"

void tern_avx512_fill(tern_kern_table *t) { (void)t; }
