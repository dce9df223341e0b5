#include "jit/disk_store.h"

#include <mutex>

#include "jit/disk_cache.h"
#include "jit/log.h"

#if defined(EMBER_WITH_CUDA)
#include "kernels/cuda/gemm_algo_store.h"
#endif

namespace ember::jit {
namespace {

class DiskStore final : public kernels::cuda::nvrtc::BinaryStore {
 public:
  std::optional<std::string> load(const std::string& key) override {
    return DiskCache::global().load(key);
  }
  void store(const std::string& key, std::string_view bytes) override {
    DiskCache::global().store(key, bytes);
  }
};

#if defined(EMBER_WITH_CUDA)
void log_to_cache(std::string_view line) { log(Log::cache, line); }
#endif

}  // namespace

kernels::cuda::nvrtc::BinaryStore* disk_store() {
  static DiskStore store;
  return &store;
}

void install_kernel_stores() {
#if defined(EMBER_WITH_CUDA)
  static std::once_flag once;
  std::call_once(once, [] {
    namespace kc = kernels::cuda;
    if (!DiskCache::global().enabled() || kc::gemm_algo_store() != nullptr) return;
    kc::set_gemm_algo_log(&log_to_cache);
    kc::set_gemm_algo_store(disk_store());
  });
#endif
}

}  // namespace ember::jit
