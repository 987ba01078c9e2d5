/* cpu_ops_avx2.c - the CPU back-end's hot loops (cpu_ops.h) compiled with avx2 flags. */
#define TM_SFX _avx2
#include "model/cpu_ops.h"
