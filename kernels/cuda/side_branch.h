#pragma once
// The side branch of a capture that early reads and output copies go on (kernels/cuda/graph.cpp
// makes and joins it; kernels/cuda/early_read.cu queues on it).
#include <cuda_runtime.h>

namespace ember::cuda {
// During a capture: a stream whose work runs after everything queued so far on Ember's stream
// of `device` (the step just captured), beside what is queued there next.
cudaStream_t fork_early_branch(int device);
}  // namespace ember::cuda
