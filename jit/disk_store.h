#pragma once
// The JIT's disk cache (DiskCache::global(), jit/disk_cache.h) as the kernels layer's binary
// store: for NVRTC's compiled kernels (kernels/cuda/nvrtc.h) and, in CUDA builds, for cuBLASLt's
// algorithm choices (kernels/cuda/gemm_algo_store.h). Host-only; usable in CPU builds.
#include "kernels/cuda/nvrtc.h"

namespace ember::jit {

// The process's one store over DiskCache::global() (which reads EMBER_CACHE_DIR on first use; an
// empty directory disables it: every load misses, every store is dropped).
kernels::cuda::nvrtc::BinaryStore* disk_store();

// Once per process, before a compiled function's first traced call (so the traced call's eager
// GEMMs already benefit): installs disk_store() as cuBLASLt's algorithm store, reporting on the
// `cache` log, unless a store is installed already (a test's). Nothing when the disk cache is
// disabled, and nothing in CPU builds.
void install_kernel_stores();

}  // namespace ember::jit
