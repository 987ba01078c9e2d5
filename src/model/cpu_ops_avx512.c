/* cpu_ops_avx512.c - the CPU back-end's hot loops (cpu_ops.h) compiled with avx512 flags. */
#define TM_SFX _avx512
#include "model/cpu_ops.h"
