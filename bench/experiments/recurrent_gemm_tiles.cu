// An experiment kept for its figures (bench/NOTES.md, twenty-sixth session): the Tiled small
// GEMM's tile and k-split (kernels/cuda/tile_gemm.cuh) swept over the products a recurrent
// layer runs once per time step at batch 64, and over the seed MLP's, to choose tile_plan's rule.
// An LSTM step's chain is product -> gate kernel -> product, so a product's latency, not its
// throughput, is the step's time: each configuration is timed as a CUDA graph of 100 launches
// (what a reduce-overhead replay runs), median of 7 replays, fresh random inputs, and checked
// against a float64 product.
// Not part of the build (from the repository root):
//   nvcc -O3 -arch=sm_90 -std=c++20 --expt-relaxed-constexpr -I. \
//     -o /tmp/recurrent_gemm_tiles bench/experiments/recurrent_gemm_tiles.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cuda/tile_gemm.cuh"

#include "check_cuda.h"

namespace dev = ember::kernels::cuda::dev;

struct Problem {
  const char* name;
  int m, n, k;
  bool a_k, b_k;  // A's k contiguous (else its m); B's k contiguous (else its n)
};

template <int BM, int BN, bool AK, bool BK>
void launch(const dev::SmallGemmArgs<float>& p, int slices, cudaStream_t s) {
  const int slice = ((p.k + slices - 1) / slices + 3) / 4 * 4;
  const int used = (p.k + slice - 1) / slice;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3((p.n + BN - 1) / BN, (p.m + BM - 1) / BM, used);
  cfg.blockDim = dim3(dev::kTileThreads);
  cfg.stream = s;
  cudaLaunchAttribute cl[1];
  cl[0].id = cudaLaunchAttributeClusterDimension;
  cl[0].val.clusterDim.x = 1;
  cl[0].val.clusterDim.y = 1;
  cl[0].val.clusterDim.z = used;
  cfg.attrs = cl;
  cfg.numAttrs = used > 1 ? 1 : 0;
  if (used > 8)
    CK(cudaFuncSetAttribute(dev::tile_gemm_kernel<BM, BN, AK, BK>,
                            cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  // float4 loads only where every row start along the contiguous dimension is 16-byte aligned.
  const bool vec = (AK ? p.a_rs : p.a_cs) % 4 == 0 && (BK ? p.b_cs : p.b_rs) % 4 == 0;
  CK(cudaLaunchKernelEx(&cfg, dev::tile_gemm_kernel<BM, BN, AK, BK>, p, slice, vec));
}

template <int BM, int BN>
void launch_any(const Problem& pr, const dev::SmallGemmArgs<float>& p, int slices, cudaStream_t s) {
  if (pr.a_k && pr.b_k) launch<BM, BN, true, true>(p, slices, s);
  if (pr.a_k && !pr.b_k) launch<BM, BN, true, false>(p, slices, s);
  if (!pr.a_k && pr.b_k) launch<BM, BN, false, true>(p, slices, s);
  if (!pr.a_k && !pr.b_k) launch<BM, BN, false, false>(p, slices, s);
}

using Launcher = void (*)(const Problem&, const dev::SmallGemmArgs<float>&, int, cudaStream_t);
struct Tile {
  int bm, bn;
  Launcher go;
};

int main() {
  const Problem problems[] = {
      {"lstm h W_hh^T  [64,256]x[256,1024]", 64, 1024, 256, true, true},
      {"lstm dG W_hh   [64,1024]x[1024,256]", 64, 256, 1024, true, false},
      {"gru h W_hh^T   [64,256]x[256,768]", 64, 768, 256, true, true},
      {"gru dG W_hh    [64,768]x[768,256]", 64, 256, 768, true, false},
      {"mlp x W1^T     [64,784]x[784,512]", 64, 512, 784, true, true},
      {"mlp dh^T x     [512,64]x[64,784]", 512, 784, 64, false, false},
      {"mlp dlogits W2 [64,10]x[10,512]", 64, 512, 10, true, false},
      {"cnn fc1 x W^T  [64,12544]x[12544,128]", 64, 128, 12544, true, true},
      {"cnn fc1 dY W   [64,128]x[128,12544]", 64, 12544, 128, true, false},
      {"cnn fc1 dY^T x [128,64]x[64,12544]", 128, 12544, 64, false, false},
  };
  const Tile tiles[] = {
      {16, 16, launch_any<16, 16>}, {16, 32, launch_any<16, 32>}, {32, 16, launch_any<32, 16>},
      {32, 32, launch_any<32, 32>}, {64, 16, launch_any<64, 16>}, {16, 64, launch_any<16, 64>},
      {32, 64, launch_any<32, 64>}, {64, 32, launch_any<64, 32>}, {64, 64, launch_any<64, 64>},
  };
  const int splits[] = {1, 2, 4, 8, 16};  // 16: a non-portable cluster size (sm_90 allows it)
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  constexpr int kLaunches = 100, kReplays = 7;
  for (const Problem& pr : problems) {
    const size_t na = size_t(pr.m) * pr.k, nb = size_t(pr.k) * pr.n, nd_ = size_t(pr.m) * pr.n;
    std::vector<float> ha(na), hb(nb), hd(nd_);
    for (auto& v : ha) v = nd(rng);
    for (auto& v : hb) v = nd(rng);
    float *a, *b, *d;
    CK(cudaMalloc(&a, na * 4));
    CK(cudaMalloc(&b, nb * 4));
    CK(cudaMalloc(&d, nd_ * 4));
    CK(cudaMemcpy(a, ha.data(), na * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, hb.data(), nb * 4, cudaMemcpyHostToDevice));
    dev::SmallGemmArgs<float> p{};
    p.a = a;
    p.a_rs = pr.a_k ? pr.k : 1;
    p.a_cs = pr.a_k ? 1 : pr.m;
    p.b = b;
    p.b_rs = pr.b_k ? 1 : pr.n;
    p.b_cs = pr.b_k ? pr.k : 1;
    p.d = d;
    p.ld_d = pr.n;
    p.m = pr.m;
    p.n = pr.n;
    p.k = pr.k;
    // float64 reference
    std::vector<double> ref(nd_, 0.0);
    for (int i = 0; i < pr.m; ++i)
      for (int kk = 0; kk < pr.k; ++kk) {
        const double av = ha[size_t(i) * p.a_rs + size_t(kk) * p.a_cs];
        for (int j = 0; j < pr.n; ++j)
          ref[size_t(i) * pr.n + j] += av * hb[size_t(kk) * p.b_rs + size_t(j) * p.b_cs];
      }
    std::printf("== %s\n", pr.name);
    for (const Tile& t : tiles) {
      std::printf("  tile %2dx%-2d", t.bm, t.bn);
      for (int sp : splits) {
        if (sp > 1 && pr.k / sp < 32) {
          std::printf("   s%d     -   ", sp);
          continue;
        }
        CK(cudaMemset(d, 0, nd_ * 4));
        t.go(pr, p, sp, s);
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(hd.data(), d, nd_ * 4, cudaMemcpyDeviceToHost));
        double err = 0, scale = 0;
        for (size_t i = 0; i < nd_; ++i) {
          err = std::max(err, std::fabs(hd[i] - ref[i]));
          scale = std::max(scale, std::fabs(ref[i]));
        }
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < kLaunches; ++i) t.go(pr, p, sp, s);
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, s));  // warm-up
        std::vector<float> us;
        for (int r = 0; r < kReplays; ++r) {
          CK(cudaEventRecord(e0, s));
          CK(cudaGraphLaunch(ge, s));
          CK(cudaEventRecord(e1, s));
          CK(cudaEventSynchronize(e1));
          float ms = 0;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          us.push_back(ms * 1000.f / kLaunches);
        }
        std::sort(us.begin(), us.end());
        std::printf("   s%d %6.2f%s", sp, us[kReplays / 2], err > 1e-5 * scale * 4 ? "!" : " ");
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
      }
      std::printf("\n");
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(d));
  }
  std::printf(
      "(µs per launch in a graph of %d; '!' marks an error above 4e-5 of the largest "
      "|reference|)\n",
      kLaunches);
  return 0;
}
