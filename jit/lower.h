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
#include <utility>
#include <vector>

#include "jit/graph.h"
#include "jit/passes.h"

namespace ember::jit {

// Bytes of an arena that a group may use as scratch while it runs (the memory plan's workspace
// of the group, MemoryPlan::workspace_*): `bytes` from byte `offset` of `storage`, an arena whose
// memory comes at the first call and moves when shared arenas grow, so read data() when running.
struct GroupWorkspace {
  StoragePtr storage;  // null: none was planned
  int64_t offset = 0;
  int64_t bytes = 0;
  void* data() const {
    return storage && storage->data ? static_cast<char*>(storage->data) + offset : nullptr;
  }
};

class LoweredGroup {
 public:
  virtual ~LoweredGroup() = default;
  virtual void run() = 0;
  virtual int32_t kernels() const = 0;       // launches per run
  virtual std::string describe() const = 0;  // one line for logs and explain
  // Whether its launches touch nothing but the group's own operands and scratch of its own, so
  // a CUDA graph may run it beside unrelated steps. False for anything using a device's shared
  // scratch (the cuBLAS workspace, the finish scratch) or the cuBLAS handle's fixed stream.
  virtual bool self_contained() const { return false; }
  // The workspace bytes its launches write, as they lie now ({nullptr, 0}: none). Scratch of its
  // own is not listed; arena bytes are, since other steps' values use them at other times.
  virtual std::pair<void*, int64_t> workspace_range() const { return {nullptr, 0}; }
};

struct LoweringContext {
  const Graph& graph;
  const Group& group;
  const std::vector<std::shared_ptr<TensorImpl>>& slots;  // per value id
  const MemoryPlan& plan;
  GroupWorkspace workspace = {};  // at least cuda_lowering_workspace() bytes, when it asked
};

// Whether `group` (on CUDA) has a lowering, and then what memory it needs (decided before the
// memory plan exists, from the graph alone).
std::optional<GroupStorage> cuda_lowering_storage(const Graph& g, const Group& group);
// The scratch bytes the lowering of `group` needs while it runs (a split reduction's partial
// states), which the memory plan places in bytes that are dead then; 0 for none.
int64_t cuda_lowering_workspace(const Graph& g, const Group& group);
// Builds the lowering; null if, after all, there is none (the executor then runs the members
// one by one, which needs GroupStorage::Materialize: only return null where storage allows).
std::unique_ptr<LoweredGroup> lower_cuda_group(const LoweringContext& ctx);
// The generated-kernel lowerings' fallback when a kernel cannot be built: the members run one
// by one on the eager kernels, internals in buffers of their own (jit/lower_members.cpp).
std::unique_ptr<LoweredGroup> lower_member_by_member(const LoweringContext& ctx, std::string why);

// Fused pointwise groups (GroupKind::Pointwise) as one kernel generated from the members'
// functors and compiled with NVRTC (jit/lower_pointwise_cuda.cpp, jit/pointwise_codegen.h).
// Storage: GroupStorage::None when every member is an elementwise op and dtype combination the
// generator handles (internals stay in registers), nullopt otherwise (and in CPU-only builds).
std::optional<GroupStorage> pointwise_lowering_storage(const Graph& g, const Group& group);
// Compiles (or fetches from the in-memory / on-disk kernel caches) at construction; run() only
// binds the slots' current addresses into the argument block and launches on stream(dev).
std::unique_ptr<LoweredGroup> lower_pointwise_cuda(const LoweringContext& ctx);
// Process-wide counts, for logs and tests.
struct PointwiseLoweringStats {
  int64_t groups = 0;       // lowerings built
  int64_t compiled = 0;     // kernels compiled with NVRTC
  int64_t from_disk = 0;    // loaded from the disk cache
  int64_t from_memory = 0;  // already loaded in this process
  // Groups run member by member on the eager kernels because the generated kernel could not be
  // compiled or loaded (logged on `perf` with the reason).
  int64_t fallbacks = 0;
};
PointwiseLoweringStats pointwise_lowering_stats();
// For tests: while set, building a lowering fails as if NVRTC had refused the kernel, so the
// member-by-member fallback runs.
void set_pointwise_kernel_failure_for_testing(bool fail);

// Fused Reduction groups (pointwise members, then one sum / mean / amax / amin of a member's
// result) as one kernel generated with NVRTC (jit/lower_reduction_cuda.cpp,
// jit/reduction_codegen.h): the members computed in registers at the elements each thread
// folds, the members' results the group returns written by the same kernel, long reductions
// split over blocks and finished in the same launch in a fixed order: eager's cut and order, so
// the result equals the eager reduction of the members' output bit for bit, kernels/cuda/
// fused_reduce.cuh). Storage: None when reduction_codegen_supports() holds, nullopt otherwise (and
// in CPU-only builds).
std::optional<GroupStorage> reduction_lowering_storage(const Graph& g, const Group& group);
// The bytes of partial states a split reduction's kernel needs while it runs (0: no split).
int64_t reduction_lowering_workspace(const Graph& g, const Group& group);
// Compiles (or fetches from the caches) and allocates a split's tickets at construction (its
// partial states go in ctx.workspace); run() binds the slots' addresses and launches once on
// stream(dev), allocating nothing.
std::unique_ptr<LoweredGroup> lower_reduction_cuda(const LoweringContext& ctx);
struct ReductionLoweringStats {
  int64_t groups = 0;       // lowerings built (kernels had)
  int64_t compiled = 0;     // compiled with NVRTC
  int64_t from_disk = 0;    // loaded from the disk cache
  int64_t from_memory = 0;  // already loaded in this process
  int64_t fallbacks = 0;    // groups run member by member (kernel unavailable; `perf` log)
};
ReductionLoweringStats reduction_lowering_stats();
// For tests: while set, building a lowering fails as if NVRTC had refused the kernel.
void set_reduction_kernel_failure_for_testing(bool fail);

// ---- contractions and cross entropy on CUDA (jit/lower_gemm_cuda.cpp,
// lower_cross_entropy_cuda.cpp) A GemmEpilogue group (a float32 2-D product, then any pointwise
// tail of its result, optionally closed by one reduction) runs as one GEMM call folding a row bias
// [+ relu] into its epilogue (cuBLASLt BIAS / RELU_BIAS, or the handwritten small-GEMM kernels),
// then one generated kernel for the rest of the tail. Storage None: only what the GEMM writes is
// stored (an output, or listed in Group::stored). A CrossEntropy pair runs as one fused
// forward+backward kernel (storage Materialize, so a null lowering is always safe). Anything else,
// and every group in a build without CUDA: nullopt / null.
std::optional<GroupStorage> gemm_lowering_storage(const Graph& g, const Group& group);
// Its tail's workspace (a reduction closing the tail), else 0.
int64_t gemm_lowering_workspace(const Graph& g, const Group& group);
std::unique_ptr<LoweredGroup> lower_gemm_cuda(const LoweringContext& ctx);
std::optional<GroupStorage> cross_entropy_lowering_storage(const Graph& g, const Group& group);
std::unique_ptr<LoweredGroup> lower_cross_entropy_cuda(const LoweringContext& ctx);
// A Casts group (independent dtype casts of dense tensors) runs as one multi-tensor launch
// (jit/lower_casts_cuda.cpp, kernels/cuda/multi_cast.h): storage None (every member's result is
// a group output, written where the plan put it).
bool casts_group_lowerable(const Graph& g, const Group& group, std::string* why = nullptr);
std::optional<GroupStorage> casts_lowering_storage(const Graph& g, const Group& group);
std::unique_ptr<LoweredGroup> lower_casts_cuda(const LoweringContext& ctx);
// The host-side analysis behind them, in every build (for fusion, tests and explain): the
// epilogue a GemmEpilogue group's GEMM call uses ("NONE", "BIAS", "RELU_BIAS"), or nullopt with
// the reason in `why`; whether a CrossEntropy group fits the fused kernel.
std::optional<std::string> gemm_group_epilogue(const Graph& g, const Group& group,
                                               std::string* why = nullptr);
bool cross_entropy_group_fusable(const Graph& g, const Group& group, std::string* why = nullptr);
// Whether a contraction group has a lowering; `stored` gets the internal value its GEMM writes.
bool contraction_group_lowerable(const Graph& g, const Group& group, std::vector<ValueId>* stored,
                                 std::string* why = nullptr);

// ---- compiling a step's generated kernels side by side ------------------------------------------
// The source (and kernel-cache tag) of the kernel a group's generated-kernel lowering compiles:
// the pointwise and reduction kernels, and a contraction's tail kernel. Empty where it compiles
// none (and in builds without CUDA). The lowerings build their kernels from the same functions,
// so these are exactly the sources they will ask for.
struct GeneratedSource {
  std::string source;
  std::string tag;
};
std::optional<GeneratedSource> pointwise_generated_source(const Graph& g, const Group& group);
std::optional<GeneratedSource> reduction_generated_source(const Graph& g, const Group& group);
std::optional<Group> gemm_tail_group(const Graph& g, const Group& group);  // the tail, if any
// Compiles the generated kernels of the CUDA lowerings of `groups` (indices into g.groups) with
// NVRTC on up to one thread per hardware thread, keeping the binaries for the lowerings that
// are built next, one by one (jit/steps.cpp); then drop_precompiled_kernels() lets go of any a
// lowering did not ask for. The first step of a model with many fused groups compiles in about
// the time of its slowest kernels instead of their sum. No-ops without CUDA.
void precompile_cuda_lowerings(const Graph& g, const std::vector<int32_t>& groups);
void drop_precompiled_kernels();

// ---- what fusion asks -------------------------------------------------------------------------
// Whether the lowering of the group's device runs `group` as fused (jit/lower_cuda.cpp): the
// fusion pass forms a group only when this holds, so no group runs worse than its members would.
// CUDA: the generated pointwise / reduction kernels, the contraction lowering, the fused
// cross-entropy kernel. CPU: chunked pointwise and pointwise + reduction groups, a contraction
// followed by its chunked tail. `stored` (may be null) gets internal values the lowering keeps
// in memory (Group::stored).
bool lowering_accepts(const Graph& g, const Group& group, std::vector<ValueId>* stored,
                      std::string* why = nullptr);

// MaxAutotune for GEMM lowerings built from now on: on its first replay outside a CUDA-graph
// capture, each times the top (<= 8) cuBLASLt algorithms on its real operands (a few runs each,
// at most ~100 ms per call site) and keeps the fastest; choices go to EMBER_LOGS=autotune.
void set_gemm_autotune(bool on);
bool gemm_autotune();
struct GemmAutotuneInfo {
  bool tuned = false;       // false: not asked for, not run yet, or nothing could be timed
  int32_t algorithm = -1;   // the winner's index in the heuristic's order
  double microseconds = 0;  // its mean time per run
  int32_t candidates = 0;   // algorithms timed
  std::string algo;         // "algo 21 tile 15 splitK 1 ..."
};
// The autotune outcome of a lowering made by lower_gemm_cuda (nullopt for any other).
std::optional<GemmAutotuneInfo> gemm_autotune_info(const LoweredGroup& lowered);

}  // namespace ember::jit
