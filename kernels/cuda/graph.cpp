// CUDA-graph capture and replay of everything queued on Ember's stream (core/cuda_runtime.h).
// Thread-local capture mode: another thread's unrelated CUDA calls neither join nor break it.
#include <cuda_runtime.h>

#include <vector>

#include "core/cuda_runtime.h"
#include "core/error.h"
#include "kernels/cuda/runtime.h"

namespace ember::cuda {

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int64_t nodes = 0;
  std::vector<cudaGraphNode_t> copies;  // capture_copy's nodes, by index
  ~Graph() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
  }
};

void GraphDeleter::operator()(Graph* g) const { delete g; }

namespace {
// The copy nodes of the capture under way on this thread (captures are thread-local).
thread_local std::vector<cudaGraphNode_t> pending_copies;
}  // namespace

void begin_capture(int device) {
  kernels::cuda::DeviceGuard guard(device);
  pending_copies.clear();
  EMBER_CUDA_CHECK(
      cudaStreamBeginCapture(kernels::cuda::stream(device), cudaStreamCaptureModeThreadLocal));
}

GraphPtr end_capture(int device) {
  kernels::cuda::DeviceGuard guard(device);
  GraphPtr g(new Graph);
  // Ends the capture even when something inside it failed, so the stream is usable again.
  EMBER_CUDA_CHECK(cudaStreamEndCapture(kernels::cuda::stream(device), &g->graph));
  EMBER_CHECK(g->graph != nullptr, "cuda::end_capture: the capture produced no graph");
  size_t n = 0;
  EMBER_CUDA_CHECK(cudaGraphGetNodes(g->graph, nullptr, &n));
  g->nodes = static_cast<int64_t>(n);
  EMBER_CUDA_CHECK(cudaGraphInstantiate(&g->exec, g->graph, 0));
  g->copies = std::move(pending_copies);
  pending_copies.clear();
  return g;
}

int capture_copy(void* dst, const void* src, size_t n, int device) {
  EMBER_CHECK(n > 0, "cuda::capture_copy: a graph cannot hold a copy of 0 bytes");
  kernels::cuda::DeviceGuard guard(device);
  cudaStream_t s = kernels::cuda::stream(device);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s));
  // Right after it is queued, the copy is the capture's only frontier node.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  EMBER_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, &deps, nullptr, &ndeps));
  EMBER_CHECK(status == cudaStreamCaptureStatusActive && ndeps == 1,
              "cuda::capture_copy: called outside a capture of device ", device);
  pending_copies.push_back(deps[0]);
  return static_cast<int>(pending_copies.size()) - 1;
}

void set_graph_copy(Graph& graph, int index, void* dst, const void* src, size_t n) {
  EMBER_CHECK(index >= 0 && static_cast<size_t>(index) < graph.copies.size(),
              "cuda::set_graph_copy: no copy ", index, " in this graph (", graph.copies.size(),
              " copies)");
  EMBER_CUDA_CHECK(cudaGraphExecMemcpyNodeSetParams1D(graph.exec, graph.copies[index], dst, src, n,
                                                      cudaMemcpyDeviceToDevice));
}

void launch_graph(Graph& graph, int device) {
  kernels::cuda::DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaGraphLaunch(graph.exec, kernels::cuda::stream(device)));
}

int64_t graph_node_count(const Graph& graph) { return graph.nodes; }

}  // namespace ember::cuda
