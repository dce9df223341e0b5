#pragma once
// The headers NVRTC needs to compile Ember's fused kernels, embedded in the library at build
// time (cmake/embed_headers.cmake writes the definition into the build tree): the same
// templates nvcc compiles for the eager kernels, so both paths run the same functors, plus the
// CUDA toolkit's fp16/bf16 headers they include. Host-only; CUDA builds only.
#include <cstddef>
#include <cstdint>
#include <span>

namespace ember::kernels::cuda {

struct EmbeddedHeader {
  const char* name;      // the include name, e.g. "kernels/cuda/pointwise.cuh"
  const char* text;      // NUL-terminated
  std::size_t size;      // bytes, without the NUL
  std::uint64_t digest;  // first 64 bits of the SHA-256 of `text`, computed at build time
};

std::span<const EmbeddedHeader> embedded_headers();

}  // namespace ember::kernels::cuda
