// What programmatic dependent launch (PDL, Hopper's griddepcontrol) saves on a chain of small
// dependent kernels like the batch-64 training step: ten kernels of 8-64 blocks, each reading the
// previous one's output. Variants: plain launches; PDL where each kernel waits for its
// predecessor at the top (griddepcontrol.wait) and lets its successor launch at once
// (griddepcontrol.launch_dependents); both on a stream and captured as a CUDA graph; a
// cluster-launched kernel in the PDL chain; and the bench's loop (chain, 4-byte copy back, sync).
//
//   nvcc -O3 -std=c++20 -arch=sm_90 bench/experiments/pdl_chain.cu -o pdl_chain && ./pdl_chain
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check_cuda.h"

// `work` multiply-adds per element stand in for a kernel's arithmetic.
template <bool kPdl>
__global__ void step_kernel(const float* in, float* out, int n, int work) {
  if constexpr (kPdl) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float v = in[i];
    for (int k = 0; k < work; ++k) v = v * 0.999f + 0.001f;
    out[i] = v + 1.0f;
  }
}

struct Chain {
  int kernels = 10;
  int n = 64 * 512;
  int blocks = 32;
  int work = 8;
  bool cluster = false;  // launch every other kernel as clusters of 2
};

void launch_chain(const Chain& c, bool pdl, float* a, float* b, cudaStream_t s) {
  for (int k = 0; k < c.kernels; ++k) {
    const float* in = (k % 2 == 0) ? a : b;
    float* out = (k % 2 == 0) ? b : a;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(c.blocks);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    int na = 0;
    if (pdl) {
      attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[na].val.programmaticStreamSerializationAllowed = 1;
      ++na;
    }
    if (c.cluster && k % 2 == 1) {
      attr[na].id = cudaLaunchAttributeClusterDimension;
      attr[na].val.clusterDim.x = 2;
      attr[na].val.clusterDim.y = 1;
      attr[na].val.clusterDim.z = 1;
      ++na;
    }
    cfg.attrs = attr;
    cfg.numAttrs = na;
    if (pdl)
      CK(cudaLaunchKernelEx(&cfg, step_kernel<true>, in, out, c.n, c.work));
    else
      CK(cudaLaunchKernelEx(&cfg, step_kernel<false>, in, out, c.n, c.work));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device µs per chain, back to back (events around `reps` chains), median of 7.
double device_us(const Chain& c, bool pdl, bool graph, float* a, float* b, cudaStream_t s) {
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch_chain(c, pdl, a, b, s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphDestroy(g));
  }
  auto one = [&] {
    if (graph)
      CK(cudaGraphLaunch(exec, s));
    else
      launch_chain(c, pdl, a, b, s);
  };
  for (int i = 0; i < 20; ++i) one();
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> samples;
  const int reps = 200;
  for (int r = 0; r < 7; ++r) {
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; ++i) one();
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    samples.push_back(1e3 * ms / reps);
  }
  if (exec) CK(cudaGraphExecDestroy(exec));
  return median(samples);
}

// The bench's loop: the chain, a 4-byte copy back and a synchronize; host µs per step.
double loop_us(const Chain& c, bool pdl, bool graph, float* a, float* b, cudaStream_t s) {
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    launch_chain(c, pdl, a, b, s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&exec, g, 0));
    CK(cudaGraphDestroy(g));
  }
  float* host;
  CK(cudaMallocHost(&host, 4));
  auto one = [&] {
    if (graph)
      CK(cudaGraphLaunch(exec, s));
    else
      launch_chain(c, pdl, a, b, s);
    CK(cudaMemcpyAsync(host, a, 4, cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
  };
  for (int i = 0; i < 50; ++i) one();
  std::vector<double> samples;
  for (int r = 0; r < 7; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) one();
    samples.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        200);
  }
  if (exec) CK(cudaGraphExecDestroy(exec));
  CK(cudaFreeHost(host));
  return median(samples);
}

int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *a, *b;
  const int n_max = 8192 * 512;
  CK(cudaMalloc(&a, n_max * sizeof(float)));
  CK(cudaMalloc(&b, n_max * sizeof(float)));
  {
    std::vector<float> h(n_max);
    for (int i = 0; i < n_max; ++i) h[i] = static_cast<float>(rand()) / RAND_MAX;
    CK(cudaMemcpy(a, h.data(), n_max * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, h.data(), n_max * sizeof(float), cudaMemcpyHostToDevice));
  }
  struct Case {
    const char* name;
    Chain c;
  };
  std::vector<Case> cases = {
      {"10 kernels x 32 blocks, light", {10, 64 * 512, 32, 8, false}},
      {"10 kernels x 8 blocks, light", {10, 64 * 512, 8, 8, false}},
      {"10 kernels x 64 blocks, heavier", {10, 64 * 512, 64, 200, false}},
      {"10 kernels x 32 blocks, clusters", {10, 64 * 512, 32, 8, true}},
      {"10 kernels x 264 blocks, [8192,512]", {10, 8192 * 512, 264, 8, false}},
      {"1 kernel x 32 blocks", {1, 64 * 512, 32, 8, false}},
  };
  std::printf("%-40s %10s %10s %10s %10s | %10s %10s %10s %10s\n", "device us/chain", "stream",
              "stream+pdl", "graph", "graph+pdl", "loop", "loop+pdl", "gloop", "gloop+pdl");
  for (const Case& k : cases) {
    std::printf("%-40s", k.name);
    for (bool graph : {false, true})
      for (bool pdl : {false, true}) std::printf(" %10.2f", device_us(k.c, pdl, graph, a, b, s));
    std::printf(" |");
    for (bool graph : {false, true})
      for (bool pdl : {false, true}) std::printf(" %10.2f", loop_us(k.c, pdl, graph, a, b, s));
    std::printf("\n");
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
