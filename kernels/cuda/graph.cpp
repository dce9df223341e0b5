// CUDA-graph capture and replay of everything queued on Ember's stream (kernels/cuda/graph.h).
// Thread-local capture mode: another thread's unrelated CUDA calls neither join nor break it.
#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/side_branch.h"

namespace ember::cuda {

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int64_t nodes = 0;
  std::vector<cudaGraphNode_t> copies;  // capture_copy's nodes, by index
  struct Ends {
    void* dst;
    const void* src;
    size_t n;
  };
  std::vector<Ends> ends;  // where each copy points now (set_graph_copy skips a no-op)
  ~Graph() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
  }
};

void GraphDeleter::operator()(Graph* g) const { delete g; }

namespace {
// The copy nodes of the capture under way on this thread (captures are thread-local).
thread_local std::vector<cudaGraphNode_t> pending_copies;
thread_local std::vector<Graph::Ends> pending_ends;

// The side branch of this thread's captures on one device: early reads are queued on `stream`
// after waiting for the main stream (fork), and end_capture joins it back.
struct Side {
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  bool used = false;
};
constexpr int kMaxSideDevices = 64;
thread_local Side sides[kMaxSideDevices];

Side& side(int device) {
  EMBER_CHECK(device >= 0 && device < kMaxSideDevices, "cuda: device ", device, " out of range");
  Side& s = sides[device];
  if (!s.stream) {
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&s.fork, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&s.join, cudaEventDisableTiming));
  }
  return s;
}
// The concurrent branches of this thread's capture on one device (prepare_capture_branches).
struct Branches {
  cudaStream_t main = nullptr;
  std::vector<cudaStream_t> sides;
  std::vector<cudaEvent_t> joins;  // one per side, for end_capture
  std::vector<cudaEvent_t> events;
  cudaEvent_t fork = nullptr;
  int active = 0;  // sides of the capture under way
};
thread_local Branches branches[kMaxSideDevices];

Branches& branches_of(int device) {
  EMBER_CHECK(device >= 0 && device < kMaxSideDevices, "cuda: device ", device, " out of range");
  return branches[device];
}

cudaStream_t branch_stream(Branches& b, int branch) {
  EMBER_CHECK(branch >= 0 && branch <= b.active, "cuda: capture branch ", branch, " of ", b.active);
  return branch == 0 ? b.main : b.sides[static_cast<size_t>(branch - 1)];
}
}  // namespace

void prepare_capture_branches(int device, int sides, int events) {
  kernels::cuda::DeviceGuard guard(device);
  Branches& b = branches_of(device);
  b.main = kernels::cuda::stream(device);
  if (!b.fork) EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&b.fork, cudaEventDisableTiming));
  while (static_cast<int>(b.sides.size()) < sides) {
    cudaStream_t st = nullptr;
    cudaEvent_t j = nullptr;
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&j, cudaEventDisableTiming));
    b.sides.push_back(st);
    b.joins.push_back(j);
  }
  while (static_cast<int>(b.events.size()) < events) {
    cudaEvent_t e = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    b.events.push_back(e);
  }
  b.active = sides;
}

void use_capture_branch(int device, int branch) {
  Branches& b = branches_of(device);
  kernels::cuda::set_launch_stream(device, branch == 0 ? nullptr : branch_stream(b, branch));
}

void capture_signal(int device, int branch, int event) {
  Branches& b = branches_of(device);
  EMBER_CHECK(event >= 0 && event < static_cast<int>(b.events.size()), "cuda: capture event ",
              event, " of ", b.events.size());
  EMBER_CUDA_CHECK(cudaEventRecord(b.events[static_cast<size_t>(event)], branch_stream(b, branch)));
}

void capture_wait(int device, int branch, int event) {
  Branches& b = branches_of(device);
  EMBER_CHECK(event >= 0 && event < static_cast<int>(b.events.size()), "cuda: capture event ",
              event, " of ", b.events.size());
  EMBER_CUDA_CHECK(
      cudaStreamWaitEvent(branch_stream(b, branch), b.events[static_cast<size_t>(event)], 0));
}

// Forks the early reads' side branch from the stream of the step just queued: what is queued
// on the returned stream runs after that step, beside the steps after it (end_capture joins).
cudaStream_t fork_early_branch(int device) {
  cudaStream_t from = kernels::cuda::stream(device);
  Side& sd = side(device);
  EMBER_CUDA_CHECK(cudaEventRecord(sd.fork, from));
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(sd.stream, sd.fork, 0));
  sd.used = true;
  return sd.stream;
}

void join_early_branch(int device) {
  if (device < 0 || device >= kMaxSideDevices || !sides[device].used) return;
  kernels::cuda::DeviceGuard guard(device);
  Side& sd = sides[device];
  EMBER_CUDA_CHECK(cudaEventRecord(sd.join, sd.stream));
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(kernels::cuda::stream(device), sd.join, 0));
}

void begin_capture(int device) {
  kernels::cuda::DeviceGuard guard(device);
  pending_copies.clear();
  pending_ends.clear();
  // The side branch's stream and events exist before the capture begins (creating them inside
  // it is not a capturable call).
  side(device).used = false;
  EMBER_CUDA_CHECK(
      cudaStreamBeginCapture(kernels::cuda::stream(device), cudaStreamCaptureModeThreadLocal));
  // Prepared side branches join the capture by waiting for its start.
  Branches& b = branches_of(device);
  if (b.active > 0) {
    EMBER_CUDA_CHECK(cudaEventRecord(b.fork, b.main));
    for (int i = 0; i < b.active; ++i)
      EMBER_CUDA_CHECK(cudaStreamWaitEvent(b.sides[static_cast<size_t>(i)], b.fork, 0));
  }
}

GraphPtr end_capture(int device) {
  kernels::cuda::DeviceGuard guard(device);
  GraphPtr g(new Graph);
  kernels::cuda::set_launch_stream(device, nullptr);
  cudaStream_t main = kernels::cuda::stream(device);
  Branches& br = branches_of(device);
  for (int i = 0; i < br.active; ++i) {  // join every side branch (ignored errors: see below)
    const auto k = static_cast<size_t>(i);
    if (cudaEventRecord(br.joins[k], br.sides[k]) == cudaSuccess)
      (void)cudaStreamWaitEvent(main, br.joins[k], 0);
  }
  br.active = 0;
  if (device >= 0 && device < kMaxSideDevices && sides[device].used) {
    // Join the early reads' branch (a capture must end on the stream that began it with every
    // forked stream joined); if that fails, the end below still ends the capture.
    Side& sd = sides[device];
    sd.used = false;
    if (cudaEventRecord(sd.join, sd.stream) == cudaSuccess)
      (void)cudaStreamWaitEvent(main, sd.join, 0);
  }
  // Ends the capture even when something inside it failed, so the stream is usable again.
  EMBER_CUDA_CHECK(cudaStreamEndCapture(main, &g->graph));
  EMBER_CHECK(g->graph != nullptr, "cuda::end_capture: the capture produced no graph");
  size_t n = 0;
  EMBER_CUDA_CHECK(cudaGraphGetNodes(g->graph, nullptr, &n));
  g->nodes = static_cast<int64_t>(n);
  EMBER_CUDA_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0));
  g->copies = std::move(pending_copies);
  g->ends = std::move(pending_ends);
  pending_copies.clear();
  pending_ends.clear();
  return g;
}

int capture_copy(void* dst, const void* src, size_t n, int device, bool beside) {
  EMBER_CHECK(n > 0, "cuda::capture_copy: a graph cannot hold a copy of 0 bytes");
  kernels::cuda::DeviceGuard guard(device);
  cudaStream_t s = beside ? fork_early_branch(device) : kernels::cuda::stream(device);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
  // Right after it is queued, the copy is the capture's only frontier node.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  EMBER_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &deps, nullptr, &ndeps));
  EMBER_CHECK(status == cudaStreamCaptureStatusActive && ndeps == 1,
              "cuda::capture_copy: called outside a capture of device ", device);
  pending_copies.push_back(deps[0]);
  pending_ends.push_back({dst, src, n});
  return static_cast<int>(pending_copies.size()) - 1;
}

void set_graph_copy(Graph& graph, int index, void* dst, const void* src, size_t n) {
  EMBER_CHECK(index >= 0 && static_cast<size_t>(index) < graph.copies.size(),
              "cuda::set_graph_copy: no copy ", index, " in this graph (", graph.copies.size(),
              " copies)");
  // A loop that frees each step's tensors before the next gets the same blocks back: then the
  // copy already points there, and the update (about a microsecond of host time) is skipped.
  Graph::Ends& e = graph.ends[static_cast<size_t>(index)];
  if (e.dst == dst && e.src == src && e.n == n) return;
  EMBER_CUDA_CHECK(cudaGraphExecMemcpyNodeSetParams1D(graph.exec, graph.copies[index], dst, src, n,
                                                      cudaMemcpyDeviceToDevice));
  e = {dst, src, n};
}

void launch_graph(Graph& graph, int device) {
  kernels::cuda::DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaGraphLaunch(graph.exec, kernels::cuda::stream(device)));
}

int64_t graph_node_count(const Graph& graph) { return graph.nodes; }

}  // namespace ember::cuda
