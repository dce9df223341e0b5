#pragma once
// Device lowerings of fused groups: a group the executor can hand to a device-specific unit (a
// kernel generated with NVRTC, a cuBLASLt GEMM with an epilogue, a fused cross-entropy kernel)
// runs as that unit, once, at its last member's position in the replay.
//
// A lowering reads and writes tensors through the executor's slots at run() time, never through
// pointers cached at construction: arguments and returned tensors move between calls (and a
// CUDA-graph capture records whatever the slots hold when it runs).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "jit/graph.h"
#include "jit/passes.h"

namespace ember::jit {

class LoweredGroup {
 public:
  virtual ~LoweredGroup() = default;
  virtual void run() = 0;
  virtual int32_t kernels() const = 0;       // launches per run
  virtual std::string describe() const = 0;  // one line for logs and explain
};

struct LoweringContext {
  const Graph& graph;
  const Group& group;
  const std::vector<std::shared_ptr<TensorImpl>>& slots;  // per value id
  const MemoryPlan& plan;
};

// Whether `group` (on CUDA) has a lowering, and then what memory it needs (decided before the
// memory plan exists, from the graph alone).
std::optional<GroupStorage> cuda_lowering_storage(const Graph& g, const Group& group);
// Builds the lowering; null if, after all, there is none (the executor then runs the members
// one by one, which needs GroupStorage::Materialize: only return null where storage allows).
std::unique_ptr<LoweredGroup> lower_cuda_group(const LoweringContext& ctx);

}  // namespace ember::jit
