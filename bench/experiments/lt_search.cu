// Is there a faster cuBLASLt algorithm for the batch-8192 MLP's two large fp32 GEMMs than its
// heuristic's top candidates (which MaxAutotune times)? Times the heuristic's top 32, then an
// enumeration of algorithm ids x tile shapes x split-K factors x reduction schemes, each
// checked with cublasLtMatmulAlgoCheck. µs per call: median of 5 groups of 10 back-to-back
// calls (CUDA events), random inputs. Column-major formulations of the row-major products:
//   forward  D[8192,512] = X[8192,784] W1^T   ->  D^T = W1 X^T     (op T, op N)
//   dW1      G[512,784]  = dH^T X             ->  G^T = X^T dH     (op N, op T)
//   nvcc -O3 -std=c++17 -arch=sm_90 bench/experiments/lt_search.cu -lcublasLt -o lt_search
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "check_cuda.h"

#define LK(x)                                                               \
  do {                                                                      \
    cublasStatus_t s_ = (x);                                                \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                      \
      std::printf("%s:%d %s: status %d\n", __FILE__, __LINE__, #x, (int)s_); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

struct Problem {
  const char* name;
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
};

struct Result {
  double us;
  int id, tile, splitk, red, stages;
};

int main() {
  cublasLtHandle_t lt;
  LK(cublasLtCreate(&lt));
  const size_t ws_bytes = 32u << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  const Problem problems[] = {
      {"forward [8192,784]x[784,512]", CUBLAS_OP_T, CUBLAS_OP_N, 512, 8192, 784, 784, 784, 512},
      {"dW1 [512,8192]x[8192,784]", CUBLAS_OP_N, CUBLAS_OP_T, 784, 512, 8192, 784, 512, 784},
  };
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (const Problem& p : problems) {
    const size_t a_n = size_t(p.ta == CUBLAS_OP_N ? p.k : p.m) * p.lda;
    const size_t b_n = size_t(p.tb == CUBLAS_OP_N ? p.n : p.k) * p.ldb;
    const size_t c_n = size_t(p.n) * p.ldc;
    float *a, *b, *c;
    CK(cudaMalloc(&a, a_n * 4));
    CK(cudaMalloc(&b, b_n * 4));
    CK(cudaMalloc(&c, c_n * 4));
    {
      std::vector<float> h(std::max(a_n, b_n));
      for (float& v : h) v = nd(rng);
      CK(cudaMemcpy(a, h.data(), a_n * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(b, h.data(), b_n * 4, cudaMemcpyHostToDevice));
    }
    cublasLtMatmulDesc_t desc;
    LK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof p.ta));
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof p.tb));
    cublasLtMatrixLayout_t la, lb, lc;
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, p.ta == CUBLAS_OP_N ? p.m : p.k,
                                  p.ta == CUBLAS_OP_N ? p.k : p.m, p.lda));
    LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, p.tb == CUBLAS_OP_N ? p.k : p.n,
                                  p.tb == CUBLAS_OP_N ? p.n : p.k, p.ldb));
    LK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, p.m, p.n, p.ldc));
    const float alpha = 1, beta = 0;
    auto time_algo = [&](const cublasLtMatmulAlgo_t& algo) -> double {
      for (int i = 0; i < 3; ++i)
        if (cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &algo, ws,
                           ws_bytes, s) != CUBLAS_STATUS_SUCCESS)
          return -1;
      std::vector<double> v;
      for (int r = 0; r < 5; ++r) {
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < 10; ++i)
          cublasLtMatmul(lt, desc, &alpha, a, la, b, lb, &beta, c, lc, c, lc, &algo, ws, ws_bytes,
                         s);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        v.push_back(ms * 100.0);
      }
      std::sort(v.begin(), v.end());
      return v[2];
    };
    auto describe = [&](const cublasLtMatmulAlgo_t& algo) {
      Result r{};
      size_t w;
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &r.id, sizeof r.id, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &r.tile,
                                           sizeof r.tile, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &r.splitk,
                                           sizeof r.splitk, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &r.red,
                                           sizeof r.red, &w);
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &r.stages,
                                           sizeof r.stages, &w);
      return r;
    };
    std::printf("== %s: %.2f GFLOP\n", p.name, 2.0 * p.m * p.n * p.k / 1e9);
    // The heuristic's candidates.
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t heur[32];
    int found = 0;
    LK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 32, heur, &found));
    std::vector<Result> hres;
    for (int i = 0; i < found; ++i) {
      Result r = describe(heur[i].algo);
      r.us = time_algo(heur[i].algo);
      hres.push_back(r);
      if (i < 8)
        std::printf("  heuristic #%d: %8.2f us  id %d tile %d splitk %d red %d stages %d\n", i,
                    r.us, r.id, r.tile, r.splitk, r.red, r.stages);
    }
    // Enumeration.
    int ids[128], nid = 0;
    LK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                CUDA_R_32F, CUDA_R_32F, 128, ids, &nid));
    std::vector<Result> eres;
    int tried = 0;
    for (int q = 0; q < nid; ++q) {
      cublasLtMatmulAlgo_t algo;
      if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F, CUDA_R_32F,
                                 CUDA_R_32F, CUDA_R_32F, ids[q], &algo) != CUBLAS_STATUS_SUCCESS)
        continue;
      size_t sz = 0;
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, nullptr, 0, &sz);
      std::vector<int> tiles(std::max<size_t>(1, sz / sizeof(int)), 0);
      if (sz) cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_TILE_IDS, tiles.data(), sz, &sz);
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, nullptr, 0, &sz);
      std::vector<int> stages(std::max<size_t>(1, sz / sizeof(int)), 0);
      if (sz)
        cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_STAGES_IDS, stages.data(), sz, &sz);
      int splitk_ok = 0, red_mask = 0;
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok,
                                        sizeof splitk_ok, &sz);
      cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &red_mask,
                                        sizeof red_mask, &sz);
      for (int tile : tiles)
        for (int st : stages)
          for (int sk : {1, 2, 3, 4, 6, 8, 12, 16}) {
            if (sk > 1 && !splitk_ok) continue;
            for (int red : {0, 1, 2, 4}) {
              if ((sk == 1) != (red == 0)) continue;
              if (red && !(red & red_mask)) continue;
              cublasLtMatmulAlgo_t x = algo;
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                                   sizeof tile);
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st,
                                                   sizeof st);
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk,
                                                   sizeof sk);
              cublasLtMatmulAlgoConfigSetAttribute(&x, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                   &red, sizeof red);
              cublasLtMatmulHeuristicResult_t chk;
              if (cublasLtMatmulAlgoCheck(lt, desc, la, lb, lc, lc, &x, &chk) !=
                      CUBLAS_STATUS_SUCCESS ||
                  chk.workspaceSize > ws_bytes)
                continue;
              if (++tried > 1500) break;
              Result r = describe(x);
              r.us = time_algo(x);
              if (r.us > 0) eres.push_back(r);
            }
          }
    }
    std::sort(eres.begin(), eres.end(), [](const Result& x, const Result& y) { return x.us < y.us; });
    std::printf("  enumerated %d configurations (%zu ran)\n", tried, eres.size());
    for (size_t i = 0; i < std::min<size_t>(8, eres.size()); ++i)
      std::printf("  enumerated best #%zu: %8.2f us  id %d tile %d splitk %d red %d stages %d\n",
                  i, eres[i].us, eres[i].id, eres[i].tile, eres[i].splitk, eres[i].red,
                  eres[i].stages);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
  }
  return 0;
}
