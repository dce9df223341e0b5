#pragma once
// Early reads of a CUDA graph's returned scalar (core/cuda_runtime.h): the graph's side-branch
// stream (kernels/cuda/graph.cpp) and the copy kernel (kernels/cuda/early_read.cu).
#include <cuda_runtime.h>

namespace ember::cuda {
// During a capture: a stream whose work runs after everything queued so far on Ember's stream
// of `device` (the step just captured), beside what is queued there next.
cudaStream_t fork_early_branch(int device);
}  // namespace ember::cuda
