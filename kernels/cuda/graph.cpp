// CUDA-graph capture and replay of everything queued on Ember's stream (core/cuda_runtime.h).
// Thread-local capture mode: another thread's unrelated CUDA calls neither join nor break it.
#include <cuda_runtime.h>

#include "core/cuda_runtime.h"
#include "core/error.h"
#include "kernels/cuda/runtime.h"

namespace ember::cuda {

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  int64_t nodes = 0;
  ~Graph() {
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
  }
};

void GraphDeleter::operator()(Graph* g) const { delete g; }

void begin_capture(int device) {
  kernels::cuda::DeviceGuard guard(device);
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
  return g;
}

void launch_graph(Graph& graph, int device) {
  kernels::cuda::DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaGraphLaunch(graph.exec, kernels::cuda::stream(device)));
}

int64_t graph_node_count(const Graph& graph) { return graph.nodes; }

}  // namespace ember::cuda
