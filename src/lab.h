/*
 * lab.h - libtern's bench and A/B helpers: in the static library, for the CLI's
 * benches, the tests and the Python package's bench, but not public API (not in
 * tern.h, so not exported from libtern.so: tests/check_exports.sh). The kernel
 * lab knobs (tern_kernels_force, tern_pool_set_adaptive, the NEON fp32 switch)
 * are in kernels/kernels.h.
 */
#ifndef TERN_LAB_H
#define TERN_LAB_H

#include "tern.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Memory read bandwidth of the device's own memory in GB/s ("cuda": GPU 0, a
 * `bytes` buffer read with 16-byte loads, best of `passes`; "cpu": host memory
 * read by the tern_set_threads kernel threads, as `tern bench` measures it); 0
 * when there is no such device or the build lacks it. */
double tern_device_read_ceiling_gbps(const char *device, size_t bytes, int passes);
/* The device's int8 tensor-core rate in TOPS ("cuda": GPU 0, wgmma chains on operands
 * held on chip, best of `passes`); 0 on the CPU, without the device or without sm_90a. */
double tern_device_int8_tops(const char *device, int passes);

#ifdef __cplusplus
}
#endif
#endif /* TERN_LAB_H */
