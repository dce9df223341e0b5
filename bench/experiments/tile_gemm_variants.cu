// An experiment kept for its figures (bench/NOTES.md, fourth session). Two questions:
//  1. `first`: where a new process's first cuBLASLt matmul spends its ~85 ms (handle, heuristic,
//     the first launch, a second shape), against the first launch of a kernel of our own.
//     Run it in a new process each time: `tile_gemm_variants first`.
//  2. `gemm`: a tiled fp32 GEMM of our own (split-K with the slices summed over a thread-block
//     cluster's shared memory, in a fixed order) against cuBLASLt's first heuristic choice on
//     the seed MLP's products, µs per launch back to back (CUDA events, median of 7 repeats of
//     200 launches, random inputs), and the largest error against a float64 product.
// Not part of the build:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o tile_gemm_variants \
//     bench/experiments/tile_gemm_variants.cu -lcublasLt
#include <cublasLt.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "check_cuda.h"

namespace cg = cooperative_groups;
#define CL(x)                                                                          \
  do {                                                                                 \
    cublasStatus_t s_ = (x);                                                           \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      std::printf("%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)s_);                  \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// C[m][n] = sum_k A(m,k) B(k,n), A(m,k) = a[m*sam + k*sak], B(k,n) = b[k*sbk + n*sbn].
// AK: A's k is contiguous (sak == 1), else its m is. BK: B's k is contiguous, else its n is.
// The block computes a BM x BN tile over the k slice z of S (S = gridDim.z = cluster size);
// the S partial tiles are summed in slice order by the cluster, rows split among its blocks.
constexpr int KC = 32;  // k per shared-memory chunk
template <int BM, int BN, int S, bool AK, bool BK, bool RELU>
__global__ void __launch_bounds__(256) tile_gemm(const float* __restrict__ a, long long sam,
                                                 long long sak, const float* __restrict__ b,
                                                 long long sbk, long long sbn,
                                                 const float* __restrict__ bias, float* c,
                                                 long long ldc, int M, int N, int K) {
  constexpr int TM = BM / 16, TN = BN / 16;  // 16 x 16 threads, TM x TN outputs each
  __shared__ float As[KC][BM + 1];
  __shared__ float Bs[KC][BN + 1];
  __shared__ float P[S > 1 ? BM : 1][S > 1 ? BN : 1];
  const int t = threadIdx.x, tx = t % 16, ty = t / 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int slice = ((K + S - 1) / S + KC - 1) / KC * KC;
  const int k_begin = blockIdx.z * slice, k_end = min(K, k_begin + slice);
  float acc[TM][TN] = {};
  for (int k0 = k_begin; k0 < k_end; k0 += KC) {
    // A chunk: BM x KC. AK: threads run along k (coalesced rows), else along m.
#pragma unroll
    for (int i = t; i < BM * KC; i += 256) {
      const int mm = AK ? i / KC : i % BM, kk = AK ? i % KC : i / BM;
      const int gm = m0 + mm, gk = k0 + kk;
      As[kk][mm] = (gm < M && gk < k_end) ? a[gm * sam + gk * sak] : 0.f;
    }
#pragma unroll
    for (int i = t; i < BN * KC; i += 256) {
      const int nn = BK ? i / KC : i % BN, kk = BK ? i % KC : i / BN;
      const int gn = n0 + nn, gk = k0 + kk;
      Bs[kk][nn] = (gn < N && gk < k_end) ? b[gk * sbk + gn * sbn] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < KC; ++kk) {
      float av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  auto finish = [&](int gm, int gn, float v) {
    if (bias) v = __fadd_rn(v, bias[gn]);
    if (RELU) v = fmaxf(v, 0.f);
    c[gm * ldc + gn] = v;
  };
  if constexpr (S == 1) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
        if (gm < M && gn < N) finish(gm, gn, acc[i][j]);
      }
  } else {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) P[ty + 16 * i][tx + 16 * j] = acc[i][j];
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    constexpr int ROWS = BM / S;  // this block's rows of the tile
    const int r0 = static_cast<int>(cl.block_rank()) * ROWS;
    for (int i = t; i < ROWS * BN; i += 256) {
      const int mm = r0 + i / BN, nn = i % BN;
      float v = 0.f;
#pragma unroll
      for (int q = 0; q < S; ++q) v += cl.map_shared_rank(&P[0][0], q)[mm * BN + nn];
      const int gm = m0 + mm, gn = n0 + nn;
      if (gm < M && gn < N) finish(gm, gn, v);
    }
    cl.sync();  // keep this block's P alive until every block has read it
  }
}

template <int BM, int BN, int S, bool AK, bool BK, bool RELU>
void launch(const float* a, long long sam, long long sak, const float* b, long long sbk,
            long long sbn, const float* bias, float* c, long long ldc, int M, int N, int K,
            cudaStream_t st) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3((N + BN - 1) / BN, (M + BM - 1) / BM, S);
  cfg.blockDim = dim3(256);
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = S;
  cfg.attrs = attr;
  cfg.numAttrs = S > 1 ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, tile_gemm<BM, BN, S, AK, BK, RELU>, a, sam, sak, b, sbk, sbn, bias,
                        c, ldc, M, N, K));
}


// V2: each block stages a whole chunk of up to KCH k (all of its k slice, for the small
// problems) with every load issued before the first use, float4 along the contiguous dimension.
template <int BM, int BN>
struct V2Cfg {
  static constexpr int KCH = (BM + BN) <= 64 ? 128 : 64;
  static constexpr int AS = KCH * (BM + 1), BS = KCH * (BN + 1);
  static constexpr int SMEM = (AS + BS) > BM * BN ? (AS + BS) : BM * BN;
};
template <int BM, int BN, bool AK, bool BK, bool RELU, bool VEC>
__global__ void __launch_bounds__(256) tile_gemm_v2(const float* __restrict__ a, long long sam,
                                                    long long sak, const float* __restrict__ b,
                                                    long long sbk, long long sbn,
                                                    const float* __restrict__ bias, float* c,
                                                    long long ldc, int M, int N, int K, int slice) {
  using C = V2Cfg<BM, BN>;
  constexpr int TM = BM / 16, TN = BN / 16;
  __shared__ float smem[C::SMEM];
  float(*As)[BM + 1] = reinterpret_cast<float(*)[BM + 1]>(smem);
  float(*Bs)[BN + 1] = reinterpret_cast<float(*)[BN + 1]>(smem + C::AS);
  const int t = threadIdx.x, tx = t % 16, ty = t / 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int k_begin = blockIdx.z * slice, k_end = min(K, k_begin + slice);
  float acc[TM][TN] = {};
  for (int k0 = k_begin; k0 < k_end; k0 += C::KCH) {
    const int kn = min(C::KCH, k_end - k0);
    // float4 units: along k (AK) or along m.
    constexpr int AQ = BM * C::KCH / 4, BQ = BN * C::KCH / 4;
    constexpr int AI = (AQ + 255) / 256, BI = (BQ + 255) / 256;
    float4 ra[AI], rb[BI];
#pragma unroll
    for (int r = 0; r < AI; ++r) {
      const int q = t + 256 * r;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (q < AQ) {
        const int mm = AK ? q / (C::KCH / 4) : (q % (BM / 4)) * 4;
        const int kk = AK ? (q % (C::KCH / 4)) * 4 : q / (BM / 4);
        const int gm = m0 + mm, gk = k0 + kk;
        if (AK) {
          if (VEC && gm < M && kk + 3 < kn)
            v = *reinterpret_cast<const float4*>(a + gm * sam + gk);
          else if (gm < M) {
            float* e = &v.x;
            for (int j = 0; j < 4; ++j) e[j] = kk + j < kn ? a[gm * sam + gk + j] : 0.f;
          }
        } else {
          if (VEC && kk < kn && gm + 3 < M)
            v = *reinterpret_cast<const float4*>(a + gk * sak + gm);
          else if (kk < kn) {
            float* e = &v.x;
            for (int j = 0; j < 4; ++j) e[j] = gm + j < M ? a[gk * sak + gm + j] : 0.f;
          }
        }
      }
      ra[r] = v;
    }
#pragma unroll
    for (int r = 0; r < BI; ++r) {
      const int q = t + 256 * r;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (q < BQ) {
        const int nn = BK ? q / (C::KCH / 4) : (q % (BN / 4)) * 4;
        const int kk = BK ? (q % (C::KCH / 4)) * 4 : q / (BN / 4);
        const int gn = n0 + nn, gk = k0 + kk;
        if (BK) {
          if (VEC && gn < N && kk + 3 < kn)
            v = *reinterpret_cast<const float4*>(b + gn * sbn + gk);
          else if (gn < N) {
            float* e = &v.x;
            for (int j = 0; j < 4; ++j) e[j] = kk + j < kn ? b[gn * sbn + gk + j] : 0.f;
          }
        } else {
          if (VEC && kk < kn && gn + 3 < N)
            v = *reinterpret_cast<const float4*>(b + gk * sbk + gn);
          else if (kk < kn) {
            float* e = &v.x;
            for (int j = 0; j < 4; ++j) e[j] = gn + j < N ? b[gk * sbk + gn + j] : 0.f;
          }
        }
      }
      rb[r] = v;
    }
#pragma unroll
    for (int r = 0; r < AI; ++r) {
      const int q = t + 256 * r;
      if (q < AQ) {
        const float* e = &ra[r].x;
        if (AK) {
          const int mm = q / (C::KCH / 4), kk = (q % (C::KCH / 4)) * 4;
          for (int j = 0; j < 4; ++j) As[kk + j][mm] = e[j];
        } else {
          const int mm = (q % (BM / 4)) * 4, kk = q / (BM / 4);
          for (int j = 0; j < 4; ++j) As[kk][mm + j] = e[j];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < BI; ++r) {
      const int q = t + 256 * r;
      if (q < BQ) {
        const float* e = &rb[r].x;
        if (BK) {
          const int nn = q / (C::KCH / 4), kk = (q % (C::KCH / 4)) * 4;
          for (int j = 0; j < 4; ++j) Bs[kk + j][nn] = e[j];
        } else {
          const int nn = (q % (BN / 4)) * 4, kk = q / (BN / 4);
          for (int j = 0; j < 4; ++j) Bs[kk][nn + j] = e[j];
        }
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < kn; ++kk) {
      float av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  auto finish = [&](int gm, int gn, float v) {
    if (bias) v = __fadd_rn(v, bias[gn]);
    if (RELU) v = fmaxf(v, 0.f);
    c[gm * ldc + gn] = v;
  };
  cg::cluster_group cl = cg::this_cluster();
  const int S = static_cast<int>(cl.num_blocks());
  if (S == 1) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
        if (gm < M && gn < N) finish(gm, gn, acc[i][j]);
      }
    return;
  }
  float* P = smem;  // the staging buffers are free after the last __syncthreads
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) P[(ty + 16 * i) * BN + tx + 16 * j] = acc[i][j];
  cl.sync();
  const int rows = (BM + S - 1) / S;
  const int r0 = static_cast<int>(cl.block_rank()) * rows;
  for (int i = t; i < rows * BN; i += 256) {
    const int mm = r0 + i / BN, nn = i % BN;
    if (mm >= BM) break;
    float v = 0.f;
    for (int q = 0; q < S; ++q) v += cl.map_shared_rank(P, q)[mm * BN + nn];
    const int gm = m0 + mm, gn = n0 + nn;
    if (gm < M && gn < N) finish(gm, gn, v);
  }
  cl.sync();
}

template <int BM, int BN, bool AK, bool BK, bool RELU>
void launch_v2(const float* a, long long sam, long long sak, const float* b, long long sbk,
               long long sbn, const float* bias, float* c, long long ldc, int M, int N, int K,
               int S, cudaStream_t st) {
  const int slice = ((K + S - 1) / S + 3) / 4 * 4;
  S = (K + slice - 1) / slice;  // no empty slices
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3((N + BN - 1) / BN, (M + BM - 1) / BM, S);
  cfg.blockDim = dim3(256);
  cfg.stream = st;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = S;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  // float4 along the contiguous dimension when every row start is 16-byte aligned.
  const long long lda = AK ? sam : sak, ldb = BK ? sbn : sbk;
  const bool vec = lda % 4 == 0 && ldb % 4 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(b) % 16 == 0;
  if (vec)
    CK(cudaLaunchKernelEx(&cfg, tile_gemm_v2<BM, BN, AK, BK, RELU, true>, a, sam, sak, b, sbk,
                          sbn, bias, c, ldc, M, N, K, slice));
  else
    CK(cudaLaunchKernelEx(&cfg, tile_gemm_v2<BM, BN, AK, BK, RELU, false>, a, sam, sak, b, sbk,
                          sbn, bias, c, ldc, M, N, K, slice));
}

__global__ void fill(float* p, long long n, unsigned seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    p[i] = (x & 0xffffff) / float(0x1000000) * 2.f - 1.f;
  }
}
__global__ void ref_gemm(const float* a, long long sam, long long sak, const float* b,
                         long long sbk, long long sbn, const float* bias, bool relu, double* c,
                         int M, int N, int K) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * N) return;
  int m = i / N, n = i % N;
  double s = 0;
  for (int k = 0; k < K; ++k) s += (double)a[m * sam + k * sak] * (double)b[k * sbk + n * sbn];
  if (bias) s += bias[n];
  if (relu) s = s > 0 ? s : 0;
  c[i] = s;
}
__global__ void empty_kernel() {}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Shape {
  const char* name;
  int M, N, K;
  bool a_k, b_k, relu_bias;  // A k-contiguous, B k-contiguous, bias + ReLU epilogue
};

// cuBLASLt, row-major C[M,N] = A B as the column-major C^T = B^T A^T.
struct Lt {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  void* ws;
  size_t ws_size = 32 << 20;
  bool ok = false;
  void init(cublasLtHandle_t handle, const Shape& s, const float* bias) {
    h = handle;
    CL(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // column-major view: C^T[N,M] = B^T[N,K] A^T[K,M]. "first" operand = B^T.
    // B(k,n): b_k => b[n*K + k] => B^T row-major? In column-major, B^T[N,K] with element (n,k)
    // at n*K + k is a K x N column-major matrix transposed: op T, ld K. Else (n-contig) element
    // (n,k) at k*N + n: N x K column-major, op N, ld N.
    cublasOperation_t opb = s.b_k ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opa = s.a_k ? CUBLAS_OP_N : CUBLAS_OP_T;
    CL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof(opb)));
    CL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof(opa)));
    if (s.relu_bias) {
      cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_RELU_BIAS;
      CL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
      CL(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof(bias)));
    }
    if (s.b_k)
      CL(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, s.K, s.N, s.K));
    else
      CL(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, s.N, s.K, s.N));
    if (s.a_k)
      CL(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, s.K, s.M, s.K));
    else
      CL(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, s.M, s.K, s.M));
    CL(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, s.N, s.M, s.N));
    cublasLtMatmulPreference_t pref;
    CL(cublasLtMatmulPreferenceCreate(&pref));
    CL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &ws_size, sizeof(ws_size)));
    cublasLtMatmulHeuristicResult_t r{};
    int n = 0;
    CL(cublasLtMatmulAlgoGetHeuristic(h, desc, lb, la, lc, lc, pref, 1, &r, &n));
    cublasLtMatmulPreferenceDestroy(pref);
    algo = r.algo;
    CK(cudaMalloc(&ws, ws_size));
    ok = n > 0;
  }
  void run(const float* a, const float* b, float* c, cudaStream_t st) {
    const float one = 1, zero = 0;
    CL(cublasLtMatmul(h, desc, &one, b, lb, a, la, &zero, c, lc, c, lc, &algo, ws, ws_size, st));
  }
};

void first_calls() {
  double t0 = now_ms();
  CK(cudaFree(nullptr));
  double t1 = now_ms();
  std::printf("context (cudaFree(0))               %9.3f ms\n", t1 - t0);
  float *a, *b, *c, *bias;
  CK(cudaMalloc(&a, 64 * 784 * 4));
  CK(cudaMalloc(&b, 512 * 784 * 4));
  CK(cudaMalloc(&c, 64 * 784 * 4));
  CK(cudaMalloc(&bias, 512 * 4));
  t0 = now_ms();
  fill<<<64, 256>>>(a, 64 * 784, 1);
  CK(cudaDeviceSynchronize());
  std::printf("first launch of our own kernel      %9.3f ms\n", now_ms() - t0);
  t0 = now_ms();
  empty_kernel<<<1, 32>>>();
  CK(cudaDeviceSynchronize());
  std::printf("first launch of a second own kernel %9.3f ms\n", now_ms() - t0);
  fill<<<64, 256>>>(b, 512 * 784, 2);
  t0 = now_ms();
  launch<64, 32, 8, true, true, true>(a, 784, 1, b, 1, 784, bias, c, 512, 64, 512, 784, 0);
  CK(cudaDeviceSynchronize());
  std::printf("first tile_gemm (cluster launch)    %9.3f ms\n", now_ms() - t0);
  t0 = now_ms();
  cublasLtHandle_t h;
  CL(cublasLtCreate(&h));
  std::printf("cublasLtCreate                      %9.3f ms\n", now_ms() - t0);
  Shape s1{"fc1", 64, 512, 784, true, true, true};
  Lt l1;
  t0 = now_ms();
  l1.init(h, s1, bias);
  std::printf("first heuristic (+ 32 MiB malloc)   %9.3f ms\n", now_ms() - t0);
  t0 = now_ms();
  l1.run(a, b, c, 0);
  std::printf("first cublasLtMatmul (host return)  %9.3f ms\n", now_ms() - t0);
  CK(cudaDeviceSynchronize());
  std::printf("  ... and synchronize               %9.3f ms\n", now_ms() - t0);
  t0 = now_ms();
  l1.run(a, b, c, 0);
  CK(cudaDeviceSynchronize());
  std::printf("second cublasLtMatmul + sync        %9.3f ms\n", now_ms() - t0);
  Shape s2{"dW1", 512, 784, 64, false, false, false};
  Lt l2;
  t0 = now_ms();
  l2.init(h, s2, nullptr);
  std::printf("second shape's heuristic            %9.3f ms\n", now_ms() - t0);
  t0 = now_ms();
  l2.run(a, b, c, 0);
  CK(cudaDeviceSynchronize());
  std::printf("second shape's first matmul + sync  %9.3f ms\n", now_ms() - t0);
}

template <typename F>
float time_us(F&& f, int reps = 200) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> v;
  for (int r = 0; r < 7; ++r) {
    CK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    v.push_back(ms * 1000 / reps);
  }
  std::sort(v.begin(), v.end());
  return v[3];
}

template <int BM, int BN, int S>
void variant(const Shape& s, const float* a, long long sam, long long sak, const float* b,
             long long sbk, long long sbn, const float* bias, float* c, const double* ref) {
  auto go = [&] {
    if (s.a_k && s.b_k) {
      if (s.relu_bias)
        launch<BM, BN, S, true, true, true>(a, sam, sak, b, sbk, sbn, bias, c, s.N, s.M, s.N,
                                            s.K, 0);
      else
        launch<BM, BN, S, true, true, false>(a, sam, sak, b, sbk, sbn, nullptr, c, s.N, s.M,
                                             s.N, s.K, 0);
    } else if (!s.a_k && !s.b_k) {
      launch<BM, BN, S, false, false, false>(a, sam, sak, b, sbk, sbn, nullptr, c, s.N, s.M,
                                             s.N, s.K, 0);
    } else {
      std::printf("layout not in this experiment\n");
    }
  };
  go();
  CK(cudaDeviceSynchronize());
  std::vector<float> h(static_cast<size_t>(s.M) * s.N);
  std::vector<double> r(h.size());
  CK(cudaMemcpy(h.data(), c, h.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.data(), ref, r.size() * 8, cudaMemcpyDeviceToHost));
  double err = 0;
  for (size_t i = 0; i < h.size(); ++i) err = std::max(err, std::fabs(h[i] - r[i]));
  const int blocks = ((s.N + BN - 1) / BN) * ((s.M + BM - 1) / BM) * S;
  std::printf("  tile %3dx%-3d split %d (%4d blocks): %8.2f us  max err %.2e\n", BM, BN, S,
              blocks, time_us(go), err);
}


template <int BM, int BN>
void variant2(const Shape& s, int S, const float* a, long long sam, long long sak, const float* b,
              long long sbk, long long sbn, const float* bias, float* c, const double* ref) {
  auto go = [&] {
    if (s.a_k && s.b_k) {
      if (s.relu_bias)
        launch_v2<BM, BN, true, true, true>(a, sam, sak, b, sbk, sbn, bias, c, s.N, s.M, s.N, s.K,
                                            S, 0);
      else
        launch_v2<BM, BN, true, true, false>(a, sam, sak, b, sbk, sbn, nullptr, c, s.N, s.M, s.N,
                                             s.K, S, 0);
    } else {
      launch_v2<BM, BN, false, false, false>(a, sam, sak, b, sbk, sbn, nullptr, c, s.N, s.M, s.N,
                                             s.K, S, 0);
    }
  };
  go();
  CK(cudaDeviceSynchronize());
  std::vector<float> h(static_cast<size_t>(s.M) * s.N);
  std::vector<double> r(h.size());
  CK(cudaMemcpy(h.data(), c, h.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(r.data(), ref, r.size() * 8, cudaMemcpyDeviceToHost));
  double err = 0;
  for (size_t i = 0; i < h.size(); ++i) err = std::max(err, std::fabs(h[i] - r[i]));
  const int blocks = ((s.N + BN - 1) / BN) * ((s.M + BM - 1) / BM) * S;
  std::printf("  v2 tile %3dx%-3d split %d (%4d blocks): %8.2f us  max err %.2e\n", BM, BN, S,
              blocks, time_us(go), err);
}

void gemms() {
  cublasLtHandle_t h;
  CL(cublasLtCreate(&h));
  const Shape shapes[] = {
      {"fc1  [64,784]x[784,512] +relu+bias", 64, 512, 784, true, true, true},
      {"dW1  [512,64]x[64,784] (A^T, B rows)", 512, 784, 64, false, false, false},
      {"dW2  [10,64]x[64,512]", 10, 512, 64, false, false, false},
      {"dW2  [10,8192]x[8192,512]", 10, 512, 8192, false, false, false},
      {"fc1  [1024,784]x[784,512] +relu+bias", 1024, 512, 784, true, true, true},
      {"dW1  [512,1024]x[1024,784]", 512, 784, 1024, false, false, false},
      {"dW1  [512,8192]x[8192,784]", 512, 784, 8192, false, false, false},
      {"fc1  [8192,784]x[784,512] +relu+bias", 8192, 512, 784, true, true, true},
  };
  float *a, *b, *c, *bias;
  double* ref;
  CK(cudaMalloc(&a, 8192ll * 784 * 4));
  CK(cudaMalloc(&b, 8192ll * 784 * 4));
  CK(cudaMalloc(&c, 8192ll * 784 * 4));
  CK(cudaMalloc(&ref, 8192ll * 784 * 8));
  CK(cudaMalloc(&bias, 1024 * 4));
  fill<<<1024, 256>>>(a, 8192ll * 784, 11);
  fill<<<1024, 256>>>(b, 8192ll * 784, 12);
  fill<<<4, 256>>>(bias, 1024, 13);
  for (const Shape& s : shapes) {
    // A k-contig: a[m*K + k]; else a[k*M + m]. B k-contig: b[n*K + k]; else b[k*N + n].
    const long long sam = s.a_k ? s.K : 1, sak = s.a_k ? 1 : s.M;
    const long long sbk = s.b_k ? 1 : s.N, sbn = s.b_k ? s.K : 1;
    std::printf("%s\n", s.name);
    ref_gemm<<<(s.M * s.N + 255) / 256, 256>>>(a, sam, sak, b, sbk, sbn,
                                                s.relu_bias ? bias : nullptr, s.relu_bias, ref,
                                                s.M, s.N, s.K);
    Lt lt;
    lt.init(h, s, bias);
    if (lt.ok) {
      lt.run(a, b, c, 0);
      CK(cudaDeviceSynchronize());
      std::vector<float> hv(static_cast<size_t>(s.M) * s.N);
      std::vector<double> r(hv.size());
      CK(cudaMemcpy(hv.data(), c, hv.size() * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(r.data(), ref, r.size() * 8, cudaMemcpyDeviceToHost));
      double err = 0;
      for (size_t i = 0; i < hv.size(); ++i) err = std::max(err, std::fabs(hv[i] - r[i]));
      std::printf("  cuBLASLt heuristic #1:                %8.2f us  max err %.2e\n",
                  time_us([&] { lt.run(a, b, c, 0); }), err);
    }
    if (s.M * (long long)s.N * s.K <= 64ll * 784 * 1024) {
      for (int S : {1, 2, 4, 8}) {
        variant2<32, 32>(s, S, a, sam, sak, b, sbk, sbn, bias, c, ref);
        variant2<16, 32>(s, S, a, sam, sak, b, sbk, sbn, bias, c, ref);
        variant2<32, 64>(s, S, a, sam, sak, b, sbk, sbn, bias, c, ref);
        variant2<64, 64>(s, S, a, sam, sak, b, sbk, sbn, bias, c, ref);
        variant2<16, 64>(s, S, a, sam, sak, b, sbk, sbn, bias, c, ref);
      }
    }
    if (s.M <= 64) {
      variant<64, 32, 1>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<64, 32, 4>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<64, 32, 8>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<64, 64, 8>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<32, 32, 8>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<16, 32, 8>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<16, 64, 8>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<64, 16, 8>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
    } else {
      variant<64, 64, 1>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<32, 64, 1>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<32, 32, 1>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<64, 64, 2>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<64, 64, 4>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<64, 64, 8>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<128, 64, 1>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
      variant<128, 128, 1>(s, a, sam, sak, b, sbk, sbn, bias, c, ref);
    }
  }
  std::printf("empty kernel back to back: %.2f us\n", time_us([] { empty_kernel<<<1, 32>>>(); }));
}


// `save FILE` stores the heuristic's algorithm for fc1; `load FILE` (a new process) runs fc1 with
// the stored algorithm and no heuristic query, timing each step.
void persist(bool save, const char* path) {
  CK(cudaFree(nullptr));
  float *a, *b, *c, *bias;
  CK(cudaMalloc(&a, 64 * 784 * 4));
  CK(cudaMalloc(&b, 512 * 784 * 4));
  CK(cudaMalloc(&c, 64 * 512 * 4));
  CK(cudaMalloc(&bias, 512 * 4));
  fill<<<64, 256>>>(a, 64 * 784, 1);
  fill<<<64, 256>>>(b, 512 * 784, 2);
  CK(cudaDeviceSynchronize());
  double t0 = now_ms();
  cublasLtHandle_t h;
  CL(cublasLtCreate(&h));
  std::printf("cublasLtCreate                      %9.3f ms\n", now_ms() - t0);
  Shape s1{"fc1", 64, 512, 784, true, true, true};
  if (save) {
    Lt l;
    l.init(h, s1, bias);
    FILE* f = std::fopen(path, "wb");
    std::fwrite(&l.algo, sizeof l.algo, 1, f);
    std::fclose(f);
    std::printf("saved %zu bytes\n", sizeof l.algo);
    return;
  }
  // The same descriptors as Lt::init, without the heuristic.
  Lt l;
  l.h = h;
  t0 = now_ms();
  CL(cublasLtMatmulDescCreate(&l.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opb = CUBLAS_OP_T, opa = CUBLAS_OP_N;
  CL(cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opb, sizeof(opb)));
  CL(cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opa, sizeof(opa)));
  cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_RELU_BIAS;
  CL(cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof(ep)));
  CL(cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                    sizeof(bias)));
  CL(cublasLtMatrixLayoutCreate(&l.lb, CUDA_R_32F, 784, 512, 784));
  CL(cublasLtMatrixLayoutCreate(&l.la, CUDA_R_32F, 784, 64, 784));
  CL(cublasLtMatrixLayoutCreate(&l.lc, CUDA_R_32F, 512, 64, 512));
  CK(cudaMalloc(&l.ws, l.ws_size));
  std::printf("descriptors + workspace             %9.3f ms\n", now_ms() - t0);
  FILE* f = std::fopen(path, "rb");
  if (!f || std::fread(&l.algo, sizeof l.algo, 1, f) != 1) {
    std::printf("no stored algorithm\n");
    return;
  }
  std::fclose(f);
  t0 = now_ms();
  cublasLtMatmulHeuristicResult_t chk{};
  const cublasStatus_t st = cublasLtMatmulAlgoCheck(h, l.desc, l.lb, l.la, l.lc, l.lc, &l.algo, &chk);
  std::printf("cublasLtMatmulAlgoCheck (status %d)  %9.3f ms\n", (int)st, now_ms() - t0);
  t0 = now_ms();
  l.run(a, b, c, 0);
  CK(cudaDeviceSynchronize());
  std::printf("first matmul with the stored algo   %9.3f ms\n", now_ms() - t0);
  t0 = now_ms();
  l.run(a, b, c, 0);
  CK(cudaDeviceSynchronize());
  std::printf("second matmul                       %9.3f ms\n", now_ms() - t0);
  t0 = now_ms();
  Lt l2;
  l2.init(h, s1, bias);
  std::printf("a heuristic query after that        %9.3f ms (same algo: %d)\n", now_ms() - t0,
              (int)!std::memcmp(&l2.algo, &l.algo, sizeof l.algo));
}

int main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "first"))
    first_calls();
  else if (argc > 2 && (!std::strcmp(argv[1], "save") || !std::strcmp(argv[1], "load")))
    persist(!std::strcmp(argv[1], "save"), argv[2]);
  else
    gemms();
  return 0;
}
