#pragma once
// Which steps of a captured CUDA graph may run side by side (jit/capture_branches.cpp).
#include <cstdint>
#include <memory>
#include <vector>

#include "jit/graph.h"
#include "jit/steps.h"

namespace ember::jit {

struct BranchPlan {
  static constexpr int kSideBranches = 2;
  std::vector<int8_t> branch;               // per step: 0 the main stream, else a side branch
  std::vector<std::vector<int32_t>> waits;  // per step: the steps whose events it waits for
  std::vector<char> signals;                // per step: whether a later step waits for it
  int32_t sides = 0;                        // side branches the plan uses (0: one stream)
  // Per step: whether it first joins the early-read branch (kernels/cuda/graph.h), because it
  // writes bytes a copy queued there still reads.
  std::vector<char> join_early;
};

// A copy the capture queues on the early-read branch after step `after_step`, reading
// [data, data + bytes): every later step writing any of those bytes waits for it.
struct BesideRead {
  int32_t after_step = 0;
  const void* data = nullptr;
  size_t bytes = 0;
};

// From the address ranges the slots hold now (as bound for the capture about to be made).
BranchPlan plan_branches(const Graph& g, const StepList& steps,
                         const std::vector<std::shared_ptr<TensorImpl>>& slots,
                         const std::vector<BesideRead>& beside = {});

}  // namespace ember::jit
