// The store of cuBLASLt algorithm choices (kernels/cuda/gemm_algo_store.h), CUDA builds only.
//  - Host-only (no GPU needed: cuBLASLt's descriptors are host objects): a problem's key is
//    stable, and every part of the problem the heuristic sees (shapes, leading dimensions,
//    transposes, types, batch, epilogue, pointer alignments, workspace, algorithms asked for) and
//    of the environment (library versions, device) changes it; a bias pointer of the same
//    alignment does not. Stored answers round-trip, and anything else is rejected with a reason.
//  - [cuda], with an in-memory store: mm, bmm and gemm_epilogue store one answer per problem;
//    after the plan caches are dropped the next plan is served from the store, bit for bit the
//    same product; a truncated, garbage, foreign or unusable entry is ignored, recomputed and
//    rewritten, and the product is still right (against float64 on the CPU).
//  - [cuda], through the JIT in new processes (this binary run again on a temporary
//    EMBER_CACHE_DIR): the second process's compiled training step asks the heuristic for
//    nothing, serving every plan from the disk cache, and computes the first's losses bit for
//    bit; with the disk cache disabled nothing is looked up.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/sgd.h"
#include "test_util.h"
#if defined(EMBER_WITH_CUDA)
#include "kernels/cuda/gemm_algo_store.h"
#include "kernels/cuda/gemm_epilogue.h"
#include "memory_binary_store.h"
#endif

#if defined(EMBER_WITH_CUDA)

extern char** environ;

using namespace ember;
namespace kc = ember::kernels::cuda;
namespace fs = std::filesystem;

namespace {

// ---- host-only ------------------------------------------------------------------------------

kc::GemmAlgoTestProblem base_problem() {
  kc::GemmAlgoTestProblem p;
  p.m = 512;
  p.n = 64;
  p.k = 784;
  p.lda = 512;
  p.ldb = 784;
  p.ldd = 512;
  p.workspace = 32 << 20;
  p.requested = 8;
  return p;
}

kc::GemmAlgoEnv base_env() {
  kc::GemmAlgoEnv e;
  e.cublaslt_version = 130100;
  e.runtime_version = 13000;
  e.driver_version = 13000;
  e.device_name = "NVIDIA H200";
  e.arch = 90;
  e.sm_count = 132;
  return e;
}

bool is_hex(const std::string& s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

const void* address(uintptr_t a) { return reinterpret_cast<const void*>(a); }

}  // namespace

TEST_CASE("gemm algo store: a problem's key is stable and separates what the heuristic sees",
          "[kernels][cache]") {
  const kc::GemmAlgoTestProblem base = base_problem();
  const std::string fp = kc::gemm_algo_fingerprint_for_testing(base);
  REQUIRE_FALSE(fp.empty());
  CHECK(fp == kc::gemm_algo_fingerprint_for_testing(base));
  const std::string key = kc::gemm_algo_key(fp, base_env());
  INFO(key);
  REQUIRE(key.size() == 7 + 32);
  CHECK(key.rfind("ltalgo-", 0) == 0);
  CHECK(is_hex(key.substr(7)));
  CHECK(key == kc::gemm_algo_key(fp, base_env()));

  // Every variation of the problem: a key of its own.
  using Change = void (*)(kc::GemmAlgoTestProblem&);
  const std::vector<std::pair<std::string, Change>> changes = {
      {"m", [](kc::GemmAlgoTestProblem& p) { p.m = 256; }},
      {"n", [](kc::GemmAlgoTestProblem& p) { p.n = 65; }},
      {"k", [](kc::GemmAlgoTestProblem& p) { p.k = 783; }},
      {"lda", [](kc::GemmAlgoTestProblem& p) { p.lda = 520; }},
      {"ldb", [](kc::GemmAlgoTestProblem& p) { p.ldb = 800; }},
      {"ldd", [](kc::GemmAlgoTestProblem& p) { p.ldd = 528; }},
      {"trans_a",
       [](kc::GemmAlgoTestProblem& p) {
         p.trans_a = true;
         p.lda = 784;
       }},
      {"trans_b",
       [](kc::GemmAlgoTestProblem& p) {
         p.trans_b = true;
         p.ldb = 64;
       }},
      {"float64", [](kc::GemmAlgoTestProblem& p) { p.f64 = true; }},
      {"tf32", [](kc::GemmAlgoTestProblem& p) { p.tf32 = true; }},
      {"batch",
       [](kc::GemmAlgoTestProblem& p) {
         p.batch = 3;
         p.stride_a = 512 * 784;
         p.stride_b = 784 * 64;
         p.stride_d = 512 * 64;
       }},
      {"batch stride",
       [](kc::GemmAlgoTestProblem& p) {
         p.batch = 3;
         p.stride_a = 0;
         p.stride_b = 784 * 64;
         p.stride_d = 512 * 64;
       }},
      {"epilogue", [](kc::GemmAlgoTestProblem& p) { p.epilogue = 2; }},
      {"bias aligned 256",
       [](kc::GemmAlgoTestProblem& p) {
         p.epilogue = 4;
         p.bias = address(0x7f0000001000);
       }},
      {"bias aligned 16",
       [](kc::GemmAlgoTestProblem& p) {
         p.epilogue = 4;
         p.bias = address(0x7f0000001010);
       }},
      {"align_a", [](kc::GemmAlgoTestProblem& p) { p.align_a = 16; }},
      {"align_b", [](kc::GemmAlgoTestProblem& p) { p.align_b = 4; }},
      {"align_d", [](kc::GemmAlgoTestProblem& p) { p.align_d = 8; }},
      {"workspace", [](kc::GemmAlgoTestProblem& p) { p.workspace = 4 << 20; }},
      {"algorithms asked for", [](kc::GemmAlgoTestProblem& p) { p.requested = 1; }},
  };
  std::map<std::string, std::string> seen = {{key, "base"}};
  for (const auto& [name, change] : changes) {
    kc::GemmAlgoTestProblem p = base;
    change(p);
    const std::string f = kc::gemm_algo_fingerprint_for_testing(p);
    REQUIRE_FALSE(f.empty());
    const std::string k = kc::gemm_algo_key(f, base_env());
    INFO(name << " gives the key of " << (seen.count(k) ? seen[k] : "nothing else"));
    CHECK(seen.emplace(k, name).second);
  }

  // The bias pointer counts by its alignment only: a plan serves every pointer aligned alike.
  kc::GemmAlgoTestProblem p1 = base, p2 = base;
  p1.epilogue = p2.epilogue = 4;
  p1.bias = address(0x7f0000001000);
  p2.bias = address(0x7f00abcdef00);
  CHECK(kc::gemm_algo_fingerprint_for_testing(p1) == kc::gemm_algo_fingerprint_for_testing(p2));

  // Every part of the environment.
  using EnvChange = void (*)(kc::GemmAlgoEnv&);
  const std::vector<std::pair<std::string, EnvChange>> env_changes = {
      {"cuBLASLt version", [](kc::GemmAlgoEnv& e) { e.cublaslt_version = 130001; }},
      {"runtime version", [](kc::GemmAlgoEnv& e) { e.runtime_version = 12090; }},
      {"driver version", [](kc::GemmAlgoEnv& e) { e.driver_version = 13010; }},
      {"device name", [](kc::GemmAlgoEnv& e) { e.device_name = "NVIDIA H100 80GB HBM3"; }},
      {"architecture", [](kc::GemmAlgoEnv& e) { e.arch = 100; }},
      {"SM count", [](kc::GemmAlgoEnv& e) { e.sm_count = 66; }},
      {"cuBLAS environment",
       [](kc::GemmAlgoEnv& e) { e.environment = "CUBLAS_EMULATION_STRATEGY=eager\n"; }},
  };
  for (const auto& [name, change] : env_changes) {
    kc::GemmAlgoEnv e = base_env();
    change(e);
    const std::string k = kc::gemm_algo_key(fp, e);
    INFO(name << " gives the key of " << (seen.count(k) ? seen[k] : "nothing else"));
    CHECK(seen.emplace(k, name).second);
  }
}

TEST_CASE("gemm algo store: answers round-trip, anything malformed is rejected with a reason",
          "[kernels][cache]") {
  kc::StoredGemmAnswer ans;
  ans.status = 0;
  ans.fingerprint = "v1 requested=8 M0=44000000";
  for (int i = 0; i < 3; ++i) {
    kc::StoredGemmAlgo a;
    for (int w = 0; w < 8; ++w) a.algo[w] = 0x0102030405060708ull * (i + 1) + w;
    a.workspace = 1024u * i;
    a.state = 0;
    a.waves = 0.25f * (i + 1);
    ans.algos.push_back(a);
  }
  const std::string bytes = kc::encode_gemm_answer(ans);
  std::string why;
  const std::optional<kc::StoredGemmAnswer> back = kc::decode_gemm_answer(bytes, &why);
  INFO(why);
  REQUIRE(back.has_value());
  CHECK(back->status == ans.status);
  CHECK(back->fingerprint == ans.fingerprint);
  REQUIRE(back->algos.size() == ans.algos.size());
  for (size_t i = 0; i < ans.algos.size(); ++i) {
    CHECK(back->algos[i].algo == ans.algos[i].algo);
    CHECK(back->algos[i].workspace == ans.algos[i].workspace);
    CHECK(back->algos[i].state == ans.algos[i].state);
    CHECK(back->algos[i].waves == ans.algos[i].waves);
  }

  // "No algorithm" (CUBLAS_STATUS_NOT_SUPPORTED = 15) is an answer too.
  kc::StoredGemmAnswer none;
  none.status = 15;
  none.fingerprint = "x";
  const std::optional<kc::StoredGemmAnswer> none_back =
      kc::decode_gemm_answer(kc::encode_gemm_answer(none), &why);
  REQUIRE(none_back.has_value());
  CHECK(none_back->status == 15);
  CHECK(none_back->algos.empty());

  auto rejected = [](const std::string& b, const std::string& reason) {
    std::string w;
    INFO("expected: " << reason);
    CHECK_FALSE(kc::decode_gemm_answer(b, &w).has_value());
    INFO("got: " << w);
    CHECK(w.find(reason) != std::string::npos);
  };
  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, bytes.size() / 2, bytes.size() - 1})
    rejected(bytes.substr(0, cut), "truncated");
  rejected(bytes + "x", "trailing bytes");
  rejected("garbage, not an answer at all", "magic");
  std::string b = bytes;
  b[0] = 'X';
  rejected(b, "magic");
  b = bytes;
  b[8] = 7;  // format version
  rejected(b, "format version");
  b = bytes;
  b[12] = 32;  // bytes per algorithm
  rejected(b, "-byte algorithms");
  b = bytes;
  const uint32_t huge = 100000;
  std::memcpy(b.data() + 24, &huge, sizeof huge);  // the result count
  rejected(b, "implausible");
}

TEST_CASE("gemm algo store: autotune winners round-trip, anything malformed is rejected",
          "[kernels][cache]") {
  kc::StoredGemmTune t;
  t.fingerprint = "v1 requested=8 M0=44000000";
  t.index = 2;
  t.times_us = {12.5f, 11.0f, 9.75f, std::numeric_limits<float>::infinity()};
  const std::string bytes = kc::encode_gemm_tune(t);
  std::string why;
  const std::optional<kc::StoredGemmTune> back = kc::decode_gemm_tune(bytes, &why);
  INFO(why);
  REQUIRE(back.has_value());
  CHECK(back->fingerprint == t.fingerprint);
  CHECK(back->index == 2);
  CHECK(back->times_us == t.times_us);

  auto rejected = [](const std::string& b, const std::string& reason) {
    std::string w;
    INFO("expected: " << reason);
    CHECK_FALSE(kc::decode_gemm_tune(b, &w).has_value());
    INFO("got: " << w);
    CHECK(w.find(reason) != std::string::npos);
  };
  for (size_t cut : {size_t{0}, size_t{9}, size_t{20}, bytes.size() - 1})
    rejected(bytes.substr(0, cut), cut + 1 == bytes.size() ? "bytes of times" : "truncated");
  rejected(bytes + "x", "bytes of times");
  rejected("garbage, not a winner at all", "magic");
  std::string b = bytes;
  b[8] = 9;  // format version
  rejected(b, "format version");
  kc::StoredGemmTune bad = t;
  bad.index = 4;  // past the candidates
  rejected(kc::encode_gemm_tune(bad), "winner 4 of 4");
  bad.index = 3;  // the candidate that has no time
  rejected(kc::encode_gemm_tune(bad), "without a time");
  bad.index = 0;  // slower than candidate 2
  rejected(kc::encode_gemm_tune(bad), "slower");
  // Its key is the algorithms' key's companion: distinct, and as stable.
  kc::GemmAlgoEnv env;
  env.cublaslt_version = 130001;
  env.device_name = "NVIDIA H200";
  env.arch = 90;
  env.sm_count = 132;
  const std::string k = kc::gemm_tune_key(t.fingerprint, env);
  CHECK(k.rfind("lttune-", 0) == 0);
  CHECK(k.size() == 7 + 32);
  CHECK(k == kc::gemm_tune_key(t.fingerprint, env));
  CHECK(k != kc::gemm_tune_key(t.fingerprint + " ", env));
  CHECK(k.substr(7) != kc::gemm_algo_key(t.fingerprint, env).substr(7));
}

// ---- [cuda]: through mm, bmm and gemm_epilogue --------------------------------------------------

namespace {

using MemoryStore = test::MemoryBinaryStore;

std::vector<std::string>& store_log() {
  static std::vector<std::string> l;
  return l;
}
void keep_store_line(std::string_view s) { store_log().emplace_back(s); }
std::string store_log_text() {
  std::string s;
  for (const std::string& l : store_log()) s += l + "\n";
  return s;
}

// `store` as the algorithm store for the object's lifetime, starting from no cached plans and
// zeroed counters; puts back what was installed before.
class StoreScope {
 public:
  explicit StoreScope(kc::nvrtc::BinaryStore* store) : prev_store_(kc::gemm_algo_store()) {
    kc::set_gemm_algo_store(store);
    prev_log_ = kc::set_gemm_algo_log(&keep_store_line);
    store_log().clear();
    restart();
  }
  ~StoreScope() {
    kc::set_gemm_algo_store(prev_store_);
    kc::set_gemm_algo_log(prev_log_);
    kc::drop_gemm_plans_for_testing();
  }
  StoreScope(const StoreScope&) = delete;
  StoreScope& operator=(const StoreScope&) = delete;
  // As a new process would start: no plans, nothing counted.
  static void restart() {
    kc::drop_gemm_plans_for_testing();
    kc::reset_gemm_algo_store_stats();
  }

 private:
  kc::nvrtc::BinaryStore* prev_store_;
  kc::GemmAlgoLogSink prev_log_ = nullptr;
};

std::vector<double> host(const Tensor& t) {
  return t.detach().cpu().to(kFloat64).contiguous().to_vector<double>();
}

bool same_bits(const Tensor& x, const Tensor& y) {
  const Tensor a = x.cpu().contiguous(), b = y.cpu().contiguous();
  return a.sizes() == b.sizes() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())) == 0;
}

// C = A B (+ bias per column) in float64 from the operands' values, with a tolerance per element
// of 1e-5 of sum_k |a_ik b_kj| (fp32 summation in any order) plus 1e-5 relative.
struct Reference {
  std::vector<double> value, tol;
};
Reference reference_mm(const Tensor& a, const Tensor& b, const Tensor& bias = {}) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  const std::vector<double> av = host(a), bv = host(b);
  const std::vector<double> biasv = bias.defined() ? host(bias) : std::vector<double>();
  Reference r;
  r.value.assign(static_cast<size_t>(M * N), 0);
  r.tol.assign(static_cast<size_t>(M * N), 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = biasv.empty() ? 0 : biasv[static_cast<size_t>(j)], mag = std::abs(s);
      for (int64_t k = 0; k < K; ++k) {
        const double p = av[static_cast<size_t>(i * K + k)] * bv[static_cast<size_t>(k * N + j)];
        s += p;
        mag += std::abs(p);
      }
      r.value[static_cast<size_t>(i * N + j)] = s;
      r.tol[static_cast<size_t>(i * N + j)] = 1e-5 * mag + 1e-5 * std::abs(s);
    }
  return r;
}

void check_against(const Tensor& got, const Reference& ref, const std::string& what) {
  INFO(what);
  const std::vector<double> g = host(got);
  REQUIRE(g.size() == ref.value.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - ref.value[i]) <= ref.tol[i])) {
      if (bad == 0) first = i;
      ++bad;
    }
  INFO(bad << " elements off; first at " << first << ": " << (bad ? g[first] : 0.0) << " vs "
           << (bad ? ref.value[first] : 0.0));
  CHECK(bad == 0);
}

// The stored answer of `bytes` changed by `edit`, encoded again.
template <class Edit>
std::string edited(const std::string& bytes, Edit edit) {
  std::optional<kc::StoredGemmAnswer> ans = kc::decode_gemm_answer(bytes, nullptr);
  REQUIRE(ans.has_value());
  edit(*ans);
  return kc::encode_gemm_answer(*ans);
}

// Runs `product` with each bad version of the stored entry `key` (whose good bytes are `good`):
// it must be ignored, the heuristic asked, the entry rewritten with the good bytes, and the
// product the same bits as `want`.
template <class Product>
void check_bad_entries_rebuilt(MemoryStore& store, const std::string& key, const std::string& good,
                               Product product, const Tensor& want, const Reference& ref) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"truncated", good.substr(0, good.size() / 2)},
      {"one byte short", good.substr(0, good.size() - 1)},
      {"garbage", "garbage that is not an answer"},
      {"empty", ""},
      {"another problem's answer",
       edited(good, [](kc::StoredGemmAnswer& a) { a.fingerprint += " (another problem)"; })},
      {"a result count the request cannot have", edited(good,
                                                        [](kc::StoredGemmAnswer& a) {
                                                          while (a.algos.size() <= 8)
                                                            a.algos.push_back(a.algos.front());
                                                        })},
  };
  for (const auto& [name, bytes] : bad) {
    INFO("stored entry: " << name);
    store.map[key] = bytes;
    StoreScope::restart();
    store_log().clear();
    const Tensor got = product();
    const kc::GemmAlgoStoreStats s = kc::gemm_algo_store_stats();
    INFO("log:\n" << store_log_text());
    CHECK(s.hits == 0);
    CHECK(s.misses == 1);
    CHECK(s.bad_entries == 1);
    CHECK(store.map.at(key) == good);  // rewritten with the heuristic's answer
    CHECK(same_bits(got, want));
    check_against(got, ref, name);
  }
  // An algorithm the check refuses (here: more workspace than the preference allows) is not
  // run: the heuristic is asked and the entry rewritten.
  store.map[key] = edited(good, [](kc::StoredGemmAnswer& a) { a.algos[0].workspace = ~0ull; });
  StoreScope::restart();
  store_log().clear();
  const Tensor got = product();
  const kc::GemmAlgoStoreStats s = kc::gemm_algo_store_stats();
  INFO("log:\n" << store_log_text());
  CHECK(s.hits == 0);
  CHECK(s.check_failures == 1);
  CHECK(store.map.at(key) == good);
  CHECK(same_bits(got, want));
}

}  // namespace

TEST_CASE("gemm algo store: mm stores its algorithm, reuses it bit for bit, rebuilds bad entries",
          "[kernels][cuda][cache]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(7);
  // Above the handwritten Tiled kernel's 2^25 multiply-adds (small_gemm.h): cuBLASLt runs it.
  const Tensor a = randn({256, 400}, dev), b = randn({400, 330}, dev);
  const Reference ref = reference_mm(a, b);
  MemoryStore store;
  StoreScope scope(&store);

  const Tensor first = mm(a, b);
  kc::GemmAlgoStoreStats s = kc::gemm_algo_store_stats();
  INFO("log:\n" << store_log_text());
  REQUIRE(store.map.size() == 1);
  const std::string key = store.map.begin()->first;
  CHECK(key.rfind("ltalgo-", 0) == 0);
  CHECK(s.lookups == 1);
  CHECK(s.misses == 1);
  CHECK(s.hits == 0);
  CHECK(s.stores == 1);
  check_against(first, ref, "first mm");
  // The same problem again in this process: the cached plan, no lookup.
  CHECK(same_bits(mm(a, b), first));
  CHECK(kc::gemm_algo_store_stats().lookups == 1);

  // As a new process: the plan is built from the stored answer.
  const std::string good = store.map.at(key);
  StoreScope::restart();
  const int loads = store.loads;
  const Tensor second = mm(a, b);
  s = kc::gemm_algo_store_stats();
  CHECK(store.loads == loads + 1);
  CHECK(s.hits == 1);
  CHECK(s.misses == 0);
  CHECK(store.stores == 1);  // nothing written again
  CHECK(same_bits(second, first));
  CHECK(store.map.at(key) == good);

  // A different problem is a different entry.
  const Tensor c = randn({330, 400}, dev);
  const Tensor other = mm(first, c);
  CHECK(store.map.size() == 2);
  check_against(other, reference_mm(first, c), "second problem");

  check_bad_entries_rebuilt(
      store, key, good, [&] { return mm(a, b); }, first, ref);
}

TEST_CASE("gemm algo store: bmm reuses its stored algorithm bit for bit",
          "[kernels][cuda][cache]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(8);
  const Tensor a = randn({3, 40, 50}, dev), b = randn({3, 50, 60}, dev);
  MemoryStore store;
  StoreScope scope(&store);
  const Tensor first = bmm(a, b);
  REQUIRE(store.map.size() == 1);
  StoreScope::restart();
  const Tensor second = bmm(a, b);
  CHECK(kc::gemm_algo_store_stats().hits == 1);
  CHECK(same_bits(second, first));
  for (int64_t i = 0; i < 3; ++i) {
    // Each batch against float64 (the batch's slice as a matrix of its own).
    const Tensor ai = a.cpu().contiguous(), bi = b.cpu().contiguous();
    const std::vector<double> av = host(ai), bv = host(bi), got = host(second);
    double worst = 0;
    for (int64_t r = 0; r < 40; ++r)
      for (int64_t col = 0; col < 60; ++col) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < 50; ++k) {
          const double p = av[static_cast<size_t>((i * 40 + r) * 50 + k)] *
                           bv[static_cast<size_t>((i * 50 + k) * 60 + col)];
          sum += p;
          mag += std::abs(p);
        }
        const double err = std::abs(got[static_cast<size_t>((i * 40 + r) * 60 + col)] - sum);
        worst = std::max(worst, err / (1e-5 * mag + 1e-5 * std::abs(sum)));
      }
    INFO("batch " << i << ": worst error / tolerance " << worst);
    CHECK(worst <= 1.0);
  }
}

namespace {

// gemm_epilogue's D = A B + bias for row-major float32 operands on device 0, into `d`.
kc::GemmCall bias_call(const Tensor& a, const Tensor& b, const Tensor& bias, Tensor& d) {
  kc::GemmCall call;
  call.device = 0;
  call.dtype = kFloat32;
  call.a = {a.raw_data(), a.size(0), a.size(1), a.stride(0), a.stride(1)};
  call.b = {b.raw_data(), b.size(0), b.size(1), b.stride(0), b.stride(1)};
  call.d = d.raw_data();
  call.ld_d = d.stride(0);
  call.epilogue = kc::GemmEpilogue::Bias;
  call.bias = bias.raw_data();
  return call;
}

}  // namespace

TEST_CASE("gemm algo store: gemm_epilogue's top algorithms come back from the store unchanged",
          "[kernels][cuda][cache]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(9);
  const Tensor a = randn({64, 100}, dev), b = randn({100, 48}, dev), bias = randn({48}, dev);
  const Reference ref = reference_mm(a, b, bias);
  Tensor d = full({64, 48}, std::nan(""), dev);  // every element must be written
  const kc::GemmCall call = bias_call(a, b, bias, d);
  MemoryStore store;
  StoreScope scope(&store);

  auto describe = [&] {
    std::vector<std::string> out;
    for (const kc::GemmAlgorithm& g : kc::top_algorithms(call, 8))
      out.push_back(std::to_string(g.index) + ": " + g.describe);
    return out;
  };
  const std::vector<std::string> asked = describe();
  REQUIRE_FALSE(asked.empty());
  REQUIRE(store.map.size() == 1);
  const std::string key = store.map.begin()->first;
  kc::gemm_epilogue(call);
  const Tensor first = d.clone();
  check_against(first, ref, "BIAS epilogue");

  StoreScope::restart();
  const std::vector<std::string> stored = describe();
  CHECK(kc::gemm_algo_store_stats().hits == 1);
  CHECK(stored == asked);  // every algorithm, its workspace and waves, in the heuristic's order
  d.fill_(std::nan(""));
  kc::gemm_epilogue(call);
  CHECK(same_bits(d, first));

  check_bad_entries_rebuilt(
      store, key, store.map.at(key),
      [&] {
        d.fill_(std::nan(""));
        kc::gemm_epilogue(call);
        return d.clone();
      },
      first, ref);
}

TEST_CASE("gemm algo store: an autotune winner is timed once, then reused by a new process",
          "[kernels][cuda][cache]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(10);
  const Tensor a = randn({96, 600}, dev), b = randn({600, 640}, dev), bias = randn({640}, dev);
  const Reference ref = reference_mm(a, b, bias);
  Tensor d = full({96, 640}, std::nan(""), dev);
  const kc::GemmCall call = bias_call(a, b, bias, d);
  MemoryStore store;
  StoreScope scope(&store);
  auto tune_keys = [&] {
    std::vector<std::string> k;
    for (const auto& [key, bytes] : store.map)
      if (key.rfind("lttune-", 0) == 0) k.push_back(key);
    return k;
  };

  const kc::GemmAutotuneResult timed = kc::autotune_gemm(call, 8, 3, 100.0);
  INFO("log:\n" << store_log_text());
  REQUIRE(timed.index >= 0);
  CHECK_FALSE(timed.from_store);
  check_against(d, ref, "autotuned");
  const Tensor first = d.clone();
  REQUIRE(tune_keys().size() == 1);
  const std::string key = tune_keys()[0];
  CHECK(kc::gemm_algo_store_stats().tune_stores == 1);

  // A new process: the same winner and times from the store, nothing timed, the same bits.
  StoreScope::restart();
  d.fill_(std::nan(""));
  const kc::GemmAutotuneResult again = kc::autotune_gemm(call, 8, 3, 100.0);
  CHECK(again.from_store);
  CHECK(again.index == timed.index);
  CHECK(again.times == timed.times);
  CHECK(again.describe == timed.describe);
  CHECK(kc::gemm_algo_store_stats().tune_hits == 1);
  CHECK(kc::gemm_algo_store_stats().tune_stores == 0);
  CHECK(same_bits(d, first));
  d.fill_(std::nan(""));
  kc::gemm_epilogue(call);  // the winner is the problem's default now
  CHECK(same_bits(d, first));

  // Asked for fewer candidates than were timed: another question, timed afresh.
  StoreScope::restart();
  const kc::GemmAutotuneResult fewer = kc::autotune_gemm(call, 2, 3, 100.0);
  CHECK_FALSE(fewer.from_store);
  CHECK(fewer.times.size() == 2);

  // A broken entry is reported, ignored, timed again and rewritten.
  store.map[key] = "EMBLTTUN garbage";
  StoreScope::restart();
  store_log().clear();
  const kc::GemmAutotuneResult rebuilt = kc::autotune_gemm(call, 8, 3, 100.0);
  CHECK_FALSE(rebuilt.from_store);
  CHECK(rebuilt.index >= 0);
  CHECK(store_log_text().find("ignoring it") != std::string::npos);
  std::string why;
  CHECK(kc::decode_gemm_tune(store.map.at(key), &why).has_value());
  check_against(d, ref, "re-tuned");
}

// ---- [cuda]: through the JIT, in new processes ------------------------------------------------

namespace {

struct AlgoNetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  AlgoNetImpl() {
    // Layer 1's products (forward and weight gradient, 256 x 400 x 400) are above the Tiled
    // kernel's 2^25 multiply-adds (small_gemm.h), so cuBLASLt runs them; layer 2's are small.
    fc1 = register_module("fc1", nn::Linear(400, 400));
    fc2 = register_module("fc2", nn::Linear(400, 32));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(AlgoNet);

using TempDir = ember::test::TempDir;

struct ChildRun {
  int exit_code = -1;
  std::string log;
  std::map<std::string, int64_t> stats;
  std::vector<std::string> losses;  // hex bits of each step's loss
};

// Runs this test binary's hidden child case in a new process with EMBER_CACHE_DIR = `cache_dir`.
ChildRun run_child(const std::string& cache_dir, const fs::path& work, const std::string& name) {
  const fs::path out = work / (name + ".out"), log = work / (name + ".log");
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view v(*e);
    if (v.rfind("EMBER_CACHE_DIR=", 0) == 0 || v.rfind("EMBER_ALGO_STORE_OUT=", 0) == 0 ||
        v.rfind("EMBER_LOGS=", 0) == 0)
      continue;
    env.emplace_back(v);
  }
  env.push_back("EMBER_CACHE_DIR=" + cache_dir);
  env.push_back("EMBER_ALGO_STORE_OUT=" + out.string());
  env.push_back("EMBER_LOGS=cache");
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string(), spec = "[algo_store_child]";
  char* argv[] = {exe.data(), spec.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ChildRun r;
  if (rc != 0) return r;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream lf(log);
  r.log.assign(std::istreambuf_iterator<char>(lf), {});
  std::ifstream of(out);
  std::string word;
  while (of >> word) {
    const size_t eq = word.find('=');
    if (word.rfind("loss=", 0) == 0)
      r.losses.push_back(word.substr(5));
    else if (eq != std::string::npos)
      r.stats[word.substr(0, eq)] = std::stoll(word.substr(eq + 1));
  }
  return r;
}

}  // namespace

// Run by the next test in a new process: a compiled training step on CUDA, five steps (the first
// three traced and run eagerly, then replays through the GEMM lowerings), then the store's
// counters and the losses' bits to $EMBER_ALGO_STORE_OUT.
TEST_CASE("gemm algo store: (child process of the JIT test)", "[.][algo_store_child]") {
  const char* out = std::getenv("EMBER_ALGO_STORE_OUT");
  if (out == nullptr) return;
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(21);
  AlgoNet net;
  net->to(dev);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss crit;
  auto step = jit::compile(
      [&](const Tensor& x, const Tensor& y) {
        opt.zero_grad();
        Tensor loss = crit(net(x), y);
        loss.backward();
        opt.step();
        return loss;
      },
      {.fullgraph = true});
  manual_seed(22);
  std::ostringstream os;
  for (int i = 0; i < 5; ++i) {
    const Tensor x = randn({256, 400}, dev), y = randint(0, 32, {256}, dev);
    const float loss = step(x, y).item<float>();
    uint32_t bits = 0;
    std::memcpy(&bits, &loss, sizeof bits);
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", bits);
    os << "loss=" << hex << "\n";
  }
  CHECK(step.stats().replays >= 1);
  const kc::GemmAlgoStoreStats s = kc::gemm_algo_store_stats();
  os << "lookups=" << s.lookups << "\nhits=" << s.hits << "\nmisses=" << s.misses
     << "\nstores=" << s.stores << "\nbad=" << s.bad_entries << "\nchecks=" << s.check_failures
     << "\nuncacheable=" << s.uncacheable << "\nhit_us=" << static_cast<int64_t>(s.hit_us)
     << "\nheuristic_us=" << static_cast<int64_t>(s.heuristic_us) << "\n";
  std::ofstream(out) << os.str();
}

TEST_CASE("gemm algo store: a new process's compiled step takes every algorithm from the disk",
          "[jit][cuda][cache]") {
  EMBER_REQUIRE_CUDA();
  TempDir work;
  const std::string cache = (work.path() / "cache").string();
  const ChildRun first = run_child(cache, work.path(), "first");
  INFO("first process:\n" << first.log);
  REQUIRE(first.exit_code == 0);
  REQUIRE(first.losses.size() == 5);
  CHECK(first.stats.at("hits") == 0);
  CHECK(first.stats.at("stores") >= 2);  // eager mm plans and the lowerings' epilogue plans
  CHECK(first.stats.at("stores") == first.stats.at("misses"));

  const ChildRun second = run_child(cache, work.path(), "second");
  INFO("second process:\n" << second.log);
  REQUIRE(second.exit_code == 0);
  CHECK(second.stats.at("misses") == 0);  // the heuristic was never asked
  CHECK(second.stats.at("hits") == first.stats.at("stores"));
  CHECK(second.stats.at("stores") == 0);
  CHECK(second.stats.at("bad") == 0);
  CHECK(second.stats.at("checks") == 0);
  CHECK(second.losses == first.losses);                                         // bit for bit
  CHECK(second.log.find("gemm algorithms: hit ltalgo-") != std::string::npos);  // EMBER_LOGS=cache

  // EMBER_CACHE_DIR set but empty disables the disk cache: no store, nothing looked up.
  const ChildRun off = run_child("", work.path(), "off");
  INFO("process without a disk cache:\n" << off.log);
  REQUIRE(off.exit_code == 0);
  CHECK(off.stats.at("lookups") == 0);
  CHECK(off.losses == first.losses);
}

#endif  // EMBER_WITH_CUDA
