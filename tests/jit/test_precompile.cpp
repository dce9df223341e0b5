// A compiled step's generated kernels are compiled side by side before its lowerings are built
// (kernels/cuda/nvrtc.h precompile, jit/lower.h precompile_cuda_lowerings): what is compiled
// ahead must be what compile() makes, be taken by the get_module call that asks for it, and a
// step's lowerings must ask for exactly the sources compiled for them (none compiled twice, none
// left over); a source that does not compile is left to get_module to report.
#if defined(EMBER_WITH_CUDA)
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "kernels/cuda/nvrtc.h"
#include "memory_binary_store.h"
#include "test_util.h"

using namespace ember;
namespace rtc = ember::kernels::cuda::nvrtc;

namespace {

// Text no other test (or earlier run sharing a disk cache) compiles.
std::string nonce() {
  return std::to_string(getpid()) + "_" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

TEST_CASE("nvrtc precompile: compiled side by side, then taken by get_module",
          "[jit][cuda][nvrtc]") {
  EMBER_REQUIRE_CUDA();
  const int dev = 0, arch = rtc::device_arch(dev);
  const std::string tag = "precompile_test_v1", n = nonce();
  std::vector<rtc::KernelSource> src;
  for (int i = 0; i < 6; ++i)
    src.push_back({"extern \"C\" __global__ void k(float* o) { o[threadIdx.x] = " +
                       std::to_string(i) + ".0f + threadIdx.x; }  // " + n,
                   tag});
  const rtc::PrecompileStats s0 = rtc::precompile_stats();
  rtc::precompile(src, dev, nullptr, 3);
  const rtc::PrecompileStats s1 = rtc::precompile_stats();
  CHECK(s1.compiled - s0.compiled == 6);

  // What was compiled ahead is the binary compile() makes.
  rtc::Origin origin = rtc::Origin::Memory;
  const rtc::Binary ahead = rtc::fetch_or_compile(src[0].source, arch, tag, nullptr, &origin);
  CHECK(origin == rtc::Origin::Compiled);
  CHECK(rtc::precompile_stats().taken - s0.taken == 1);
  CHECK(ahead.bytes == rtc::compile(src[0].source, arch, tag + ".cu").bytes);

  // The others through get_module: taken, loaded, and they compute what their source says.
  const char* names[1] = {"k"};
  for (int i = 1; i < 6; ++i) {
    const rtc::Module m = rtc::get_module(src[i].source, tag, names, dev, nullptr);
    CHECK(m.origin == rtc::Origin::Compiled);
    Tensor out = zeros({32}, Device::cuda(dev));
    void* p = out.raw_data();
    rtc::launch(m.kernels[0], 1, 32, &p, dev, "precompile test kernel");
    const std::vector<double> got = test::read(out);
    for (int t = 0; t < 32; ++t) CHECK(got[t] == i + t);
  }
  CHECK(rtc::precompile_stats().taken - s0.taken == 6);

  // Loaded already: nothing to compile.
  rtc::precompile(std::span<const rtc::KernelSource>(src).subspan(1), dev, nullptr);
  CHECK(rtc::precompile_stats().compiled == s1.compiled);

  // Sources that do not compile: skipped here, reported by get_module.
  const std::vector<rtc::KernelSource> bad = {{"this is not CUDA // " + n, tag},
                                              {"nor this // " + n, tag}};
  CHECK_NOTHROW(rtc::precompile(bad, dev, nullptr));
  CHECK(rtc::precompile_stats().compiled == s1.compiled);
  CHECK_THROWS_WITH(rtc::get_module(bad[0].source, tag, names, dev, nullptr),
                    Catch::Contains("does not compile"));

  // A binary the store holds is read once, by precompile, and get_module takes what it read.
  test::MemoryBinaryStore store;
  const rtc::KernelSource stored = {
      "extern \"C\" __global__ void k(float* o) { o[threadIdx.x] = 9.0f; }  // s " + n, tag};
  const rtc::KernelSource fresh = {
      "extern \"C\" __global__ void k(float* o) { o[threadIdx.x] = 10.0f; }  // f " + n, tag};
  store.map[rtc::cache_key(stored.source, arch, tag)] =
      rtc::compile(stored.source, arch, "s.cu").bytes;
  const rtc::PrecompileStats s2 = rtc::precompile_stats();
  rtc::precompile(std::vector<rtc::KernelSource>{stored, fresh}, dev, &store, 2);
  const rtc::PrecompileStats s3 = rtc::precompile_stats();
  CHECK(s3.from_store - s2.from_store == 1);
  CHECK(s3.compiled - s2.compiled == 1);
  CHECK(store.stores == 1);  // the fresh one; the stored one is not written back
  const int loads = store.loads;
  CHECK(rtc::get_module(stored.source, tag, names, dev, &store).origin == rtc::Origin::Store);
  CHECK(rtc::get_module(fresh.source, tag, names, dev, &store).origin == rtc::Origin::Compiled);
  CHECK(store.loads == loads);  // get_module read nothing again
  CHECK(rtc::precompile_stats().taken - s3.taken == 2);

  // Kept and never asked for: dropped.
  const std::vector<rtc::KernelSource> spare = {
      {"extern \"C\" __global__ void k(float* o) { o[0] = 7.0f; }  // a " + n, tag},
      {"extern \"C\" __global__ void k(float* o) { o[0] = 8.0f; }  // b " + n, tag}};
  rtc::precompile(spare, dev, nullptr);
  const int64_t dropped = rtc::precompile_stats().dropped;
  rtc::drop_precompiled();
  CHECK(rtc::precompile_stats().dropped - dropped == 2);
}

TEST_CASE("a compiled step's generated kernels are compiled ahead, each taken by its lowering",
          "[jit][cuda][nvrtc]") {
  EMBER_REQUIRE_CUDA();
  if (rtc::default_compile_threads() < 2) {
    std::cout << "EMBER_SKIP: one compile thread (EMBER_COMPILE_THREADS or one core)" << std::endl;
    return;
  }
  const Device dev = Device::cuda(0);
  // Shapes no other test uses, so the kernels are new to this process and to the disk cache.
  const int64_t rows = 1000 + getpid() % 4000, cols = 37 + getpid() % 11;
  auto f = [](const Tensor& x, const Tensor& y) {
    const Tensor r = sum(mul(relu(add(x, y)), y), {1});  // pointwise members + a row sum
    const Tensor c = sum(mul(exp(neg(x)), x), {0});      // and a column sum
    return add(mul(r, 2.0), sum(c));
  };
  auto compiled = jit::compile(f);
  manual_seed(7);
  const Tensor x = randn({rows, cols}, dev), y = randn({rows, cols}, dev);
  const rtc::PrecompileStats s0 = rtc::precompile_stats();
  std::vector<double> got;
  for (int i = 0; i < 3; ++i) got = test::read(compiled(x, y));
  const rtc::PrecompileStats s1 = rtc::precompile_stats();
  INFO("compiled ahead " << s1.compiled - s0.compiled << ", taken " << s1.taken - s0.taken
                         << ", dropped " << s1.dropped - s0.dropped);
  CHECK(s1.compiled - s0.compiled >= 2);
  CHECK(s1.taken - s0.taken == (s1.compiled - s0.compiled) + (s1.from_store - s0.from_store));
  CHECK(s1.dropped == s0.dropped);
  CHECK(compiled.stats().replays >= 1);
  const std::vector<double> want = test::read(f(x, y));
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == want[i]);
}

TEST_CASE("repeated layers share their generated kernels: as many modules for 5 layers as for 2",
          "[jit][cuda][nvrtc]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  // Each layer's scale-and-exp runs as a generated kernel (the first on its own, the others as
  // the tail of the previous layer's product); a deeper stack of the same layer must need no
  // more distinct kernels. Shapes no other test uses, distinct per depth, so every kernel is new.
  auto modules_for = [&](size_t layers, int64_t rows, int64_t width) {
    manual_seed(11);
    const Tensor x = randn({rows, width}, dev);
    std::vector<Tensor> s, w;  // state the function reads, as a model's parameters
    for (size_t i = 0; i < layers; ++i) {
      s.push_back(mul(randn({width}, dev), 0.1));
      w.push_back(mul(randn({width, width}, dev), 0.05));
    }
    auto f = [&s, &w](const Tensor& in) {
      Tensor h = in;
      for (size_t i = 0; i < s.size(); ++i) h = mm(exp(mul(h, s[i])), w[i]);
      return h;
    };
    auto compiled = jit::compile(f);
    const size_t m0 = rtc::loaded_module_count();
    std::vector<double> got;
    for (int i = 0; i < 3; ++i) got = test::read(compiled(x));
    CHECK(compiled.stats().replays >= 1);
    const std::vector<double> want = test::read(f(x));
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == want[i]);
    return rtc::loaded_module_count() - m0;
  };
  const int64_t rows = 64 + getpid() % 500, width = 40 + getpid() % 7;
  const size_t two = modules_for(2, rows, width), five = modules_for(5, rows + 1, width + 8);
  INFO("modules loaded: 2 layers " << two << ", 5 layers " << five);
  CHECK(two >= 1);
  CHECK(five == two);
}

#endif  // EMBER_WITH_CUDA
