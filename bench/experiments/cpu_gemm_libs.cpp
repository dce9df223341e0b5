// The CPU GEMM libraries on the seed MLP step's five products (forward, and backward's
// transposed-operand products), single-threaded, microseconds per call (median of 21 after 3
// warm-up calls), plus OpenBLAS cut into two column slabs on two threads (what
// kernels/cpu/matmul.cpp does). Not built by CMake; on a Debian machine with libeigen3-dev,
// libopenblas-dev and libdnnl-dev:
//   g++ -O3 -std=c++20 bench/experiments/cpu_gemm_libs.cpp -I/usr/include/eigen3 \
//       -lopenblas -ldnnl -lpthread -o /tmp/cpu_gemm_libs
//   OMP_NUM_THREADS=1 /tmp/cpu_gemm_libs 64; OMP_NUM_THREADS=1 /tmp/cpu_gemm_libs 1024
// Eigen is as the library builds it (baseline x86-64, no -march), as Ember's fallback runs.
#include <Eigen/Core>
#include <cblas.h>
#include <dnnl.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <random>
#include <thread>
extern "C" void openblas_set_num_threads(int);
using RowMat = Eigen::Matrix<float, -1, -1, Eigen::RowMajor>;
struct Shape { const char* name; int M, N, K; bool ta, tb; };
template <class F> double time_us(F f) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int r = 0; r < 21; ++r) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[10];
}
int main(int argc, char** argv) {
  int B = argc > 1 ? atoi(argv[1]) : 64;
  openblas_set_num_threads(1);
  Shape shapes[] = {
      {"fwd1 x*W1^T", B, 512, 784, false, true}, {"fwd2 h*W2^T", B, 10, 512, false, true},
      {"dW2 g^T*h", 10, 512, B, true, false},   {"dh g*W2", B, 512, 10, false, false},
      {"dW1 dh^T*x", 512, 784, B, true, false}};
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  printf("B=%d  (us; GFLOP/s)\n%-14s %10s %10s %10s %12s\n", B, "shape", "eigen", "openblas", "dnnl", "oblas 2x N");
  for (auto& s : shapes) {
    std::vector<float> A((size_t)s.M * s.K), Bm((size_t)s.K * s.N), C((size_t)s.M * s.N);
    for (auto& v : A) v = nd(rng);
    for (auto& v : Bm) v = nd(rng);
    int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    // Eigen
    double te = time_us([&] {
      Eigen::Map<RowMat> Cm(C.data(), s.M, s.N);
      using CM = Eigen::Matrix<float, -1, -1, Eigen::ColMajor>;
      if (!s.ta && !s.tb) Cm.noalias() = Eigen::Map<RowMat>(A.data(), s.M, s.K) * Eigen::Map<RowMat>(Bm.data(), s.K, s.N);
      else if (!s.ta && s.tb) Cm.noalias() = Eigen::Map<RowMat>(A.data(), s.M, s.K) * Eigen::Map<CM>(Bm.data(), s.K, s.N);
      else Cm.noalias() = Eigen::Map<CM>(A.data(), s.M, s.K) * Eigen::Map<RowMat>(Bm.data(), s.K, s.N);
    });
    double tb = time_us([&] {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, s.N, s.K, 1.f, A.data(), lda, Bm.data(), ldb, 0.f, C.data(), s.N);
    });
    double td = time_us([&] {
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.f, A.data(), lda, Bm.data(), ldb, 0.f, C.data(), s.N);
    });
    // two threads, each a half of C's columns
    double t2 = time_us([&] {
      int h = (s.N / 2 + 15) / 16 * 16; if (h >= s.N) h = s.N;
      auto part = [&](int n0, int n1) {
        if (n1 <= n0) return;
        const float* bp = s.tb ? Bm.data() + (size_t)n0 * ldb : Bm.data() + n0;
        cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.M, n1 - n0, s.K, 1.f, A.data(), lda, bp, ldb, 0.f, C.data() + n0, s.N);
      };
      std::thread t([&] { part(h, s.N); });
      part(0, h);
      t.join();
    });
    double fl = 2.0 * s.M * s.N * s.K / 1e3;
    printf("%-14s %6.0f %4.0f %6.0f %4.0f %6.0f %4.0f %6.0f %4.0f\n", s.name, te, fl / te, tb, fl / tb, td, fl / td, t2, fl / t2);
  }
}
