#include "kernels/cuda/nvrtc.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "kernels/cuda/nvrtc_workers.h"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda::nvrtc {
namespace {

// Modules loaded in this process, by cache key. Never unloaded: kernels handed out stay valid
// for the life of the process (and at exit the driver may already be gone).
struct Loaded {
  std::string source;  // compared on a hit, so a key collision can never run the wrong code
  cudaLibrary_t library = nullptr;
  std::vector<std::pair<std::string, cudaKernel_t>> kernels;
};
std::mutex& modules_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<std::string, Loaded>& modules() {
  static auto* m = new std::unordered_map<std::string, Loaded>();
  return *m;
}

// Binaries precompile() made or read from the store, by cache key, until fetch_or_compile takes
// them.
struct Ahead {
  std::string source;  // compared on a hit, as for loaded modules
  Binary binary;
  Origin origin = Origin::Compiled;
};
std::mutex& ahead_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<std::string, Ahead>& ahead() {
  static auto* m = new std::unordered_map<std::string, Ahead>();
  return *m;
}
std::atomic<int64_t> g_ahead_compiled{0}, g_ahead_from_store{0}, g_ahead_taken{0},
    g_ahead_dropped{0}, g_ahead_in_workers{0};
std::optional<Ahead> take_ahead(const std::string& key, std::string_view source) {
  std::lock_guard<std::mutex> lock(ahead_mutex());
  auto it = ahead().find(key);
  if (it == ahead().end() || it->second.source != source) return std::nullopt;
  Ahead a = std::move(it->second);
  ahead().erase(it);
  ++g_ahead_taken;
  return a;
}

cudaError_t load_library(cudaLibrary_t* lib, const Binary& b) {
  // A cubin is read as an ELF image; PTX must be NUL-terminated, which std::string guarantees.
  return cudaLibraryLoadData(lib, b.bytes.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
}

cudaKernel_t kernel_of(Loaded& m, const char* name) {
  for (const auto& [n, k] : m.kernels)
    if (n == name) return k;
  cudaKernel_t k = nullptr;
  const cudaError_t err = cudaLibraryGetKernel(&k, m.library, name);
  if (err != cudaSuccess)
    throw_cuda_error(err, (std::string("cudaLibraryGetKernel(") + name + ")").c_str(), __FILE__,
                     __LINE__);
  m.kernels.emplace_back(name, k);
  return k;
}

}  // namespace


int device_arch(int dev) {
  int major = 0, minor = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return major * 10 + minor;
}

int sm_count(int dev) { return cuda::sm_count(dev); }





const char* origin_name(Origin o) {
  switch (o) {
    case Origin::Memory:
      return "memory";
    case Origin::Store:
      return "disk";
    case Origin::Compiled:
      return "nvrtc";
  }
  return "?";
}

Binary fetch_or_compile(std::string_view source, int arch, std::string_view tag, BinaryStore* store,
                        Origin* origin) {
  const std::string key = cache_key(source, arch, tag);
  if (std::optional<Ahead> a = take_ahead(key, source)) {  // from precompile()
    if (origin) *origin = a->origin;
    return std::move(a->binary);
  }
  if (store) {
    if (std::optional<std::string> bytes = store->load(key)) {
      if (origin) *origin = Origin::Store;
      return {std::move(*bytes), compiles_to_ptx(arch)};
    }
  }
  Binary b = compile(source, arch, std::string(tag) + ".cu");
  if (store) store->store(key, b.bytes);
  if (origin) *origin = Origin::Compiled;
  return b;
}

unsigned default_compile_threads() {
  static const unsigned n = [] {
    if (const char* env = std::getenv("EMBER_COMPILE_THREADS")) {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      EMBER_CHECK(end != env && *end == '\0' && v >= 1 && v <= 1024,
                  "EMBER_COMPILE_THREADS: expected a count of threads from 1 to 1024, got \"", env,
                  "\"");
      return static_cast<unsigned>(v);
    }
    return std::max(1u, std::thread::hardware_concurrency());
  }();
  return n;
}

void precompile(std::span<const KernelSource> sources, int dev, BinaryStore* store,
                unsigned threads) {
  const int arch = device_arch(dev);
  struct Job {
    const KernelSource* src;
    std::string key;
    Binary binary;
    bool ok = false;
    bool from_store = false;
    bool tried = false;  // by a worker process
  };
  std::vector<Job> jobs;
  {
    std::lock_guard<std::mutex> lock(modules_mutex());
    std::lock_guard<std::mutex> lock_ahead(ahead_mutex());
    for (const KernelSource& s : sources) {
      std::string key = cache_key(s.source, arch, s.tag);
      if (modules().count(key) || ahead().count(key)) continue;
      if (std::any_of(jobs.begin(), jobs.end(), [&](const Job& j) { return j.key == key; }))
        continue;
      jobs.push_back({&s, std::move(key), {}, false, false, false});
    }
  }
  if (threads == 0) threads = default_compile_threads();
  // One thread gains nothing over compiling in get_module.
  if (std::min<size_t>(threads, jobs.size()) < 2) return;
  // What the store holds is read here, on this thread (a store, and the log sink its reads may
  // write to, need not take concurrent calls), and kept: get_module takes it instead of reading
  // it again.
  size_t to_compile = jobs.size();
  if (store)
    for (Job& j : jobs)
      if (std::optional<std::string> bytes = store->load(j.key)) {
        j.binary = {std::move(*bytes), compiles_to_ptx(arch)};
        j.ok = j.from_store = true;
        --to_compile;
      }
  // In worker processes where there is a worker program: NVRTC serializes the threads of one
  // process. If none of them compiled anything (no worker started), the threads below do it all;
  // otherwise what a worker could not compile is left to get_module, which reports the error.
  const std::string& worker = worker_path();
  if (!worker.empty() && threads >= 2 && to_compile >= 2) {
    std::vector<WorkerJob> wjobs;
    std::vector<Job*> which;
    for (Job& j : jobs)
      if (!j.ok) {
        wjobs.push_back({j.src->source, j.src->tag + ".cu"});
        which.push_back(&j);
      }
    std::vector<std::optional<Binary>> bins = compile_in_workers(wjobs, arch, threads, worker);
    size_t got = 0;
    for (size_t i = 0; i < bins.size(); ++i)
      if (bins[i]) {
        which[i]->binary = std::move(*bins[i]);
        which[i]->ok = true;
        ++got;
      }
    if (got > 0) {
      g_ahead_in_workers += static_cast<int64_t>(got);
      to_compile = 0;
      for (Job& j : jobs) j.tried = true;
    }
  }
  threads = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(threads, to_compile)));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < jobs.size();) {
      Job& j = jobs[i];
      if (j.ok || j.tried) continue;  // read from the store, or a worker's
      try {
        j.binary = compile(j.src->source, arch, j.src->tag + ".cu");
        j.ok = true;
      } catch (const std::exception&) {
        // Left to get_module, which compiles it again and reports the error where it belongs.
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads to be had: the ones running (and this one) do the rest
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  for (Job& j : jobs) {
    if (!j.ok) continue;
    if (store && !j.from_store) store->store(j.key, j.binary.bytes);
    std::lock_guard<std::mutex> lock(ahead_mutex());
    ahead().insert_or_assign(j.key, Ahead{j.src->source, std::move(j.binary),
                                          j.from_store ? Origin::Store : Origin::Compiled});
    ++(j.from_store ? g_ahead_from_store : g_ahead_compiled);
  }
}

void drop_precompiled() {
  std::lock_guard<std::mutex> lock(ahead_mutex());
  g_ahead_dropped += static_cast<int64_t>(ahead().size());
  ahead().clear();
}

PrecompileStats precompile_stats() {
  return {g_ahead_compiled.load(), g_ahead_from_store.load(), g_ahead_taken.load(),
          g_ahead_dropped.load(), g_ahead_in_workers.load()};
}

Module get_module(std::string_view source, std::string_view tag,
                  std::span<const char* const> kernel_names, int dev, BinaryStore* store) {
  const auto t0 = std::chrono::steady_clock::now();
  const int arch = device_arch(dev);
  Module m;
  m.key = cache_key(source, arch, tag);
  std::lock_guard<std::mutex> lock(modules_mutex());
  auto it = modules().find(m.key);
  if (it != modules().end() && it->second.source == source) {
    m.origin = Origin::Memory;
  } else {
    DeviceGuard load_guard(dev);
    Binary bin = fetch_or_compile(source, arch, tag, store, &m.origin);
    Loaded loaded;
    loaded.source = std::string(source);
    cudaError_t err = load_library(&loaded.library, bin);
    if (err != cudaSuccess && m.origin == Origin::Store) {
      // A stored binary this driver does not take: build it afresh and replace it.
      (void)cudaGetLastError();
      bin = compile(source, arch, std::string(tag) + ".cu");
      if (store) store->store(m.key, bin.bytes);
      m.origin = Origin::Compiled;
      err = load_library(&loaded.library, bin);
    }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaLibraryLoadData", __FILE__, __LINE__);
    it = modules().insert_or_assign(m.key, std::move(loaded)).first;
  }
  DeviceGuard guard(dev);
  for (const char* name : kernel_names) {
    const void* k = reinterpret_cast<const void*>(kernel_of(it->second, name));
    // Querying the kernel loads it into this device's context now: with lazy loading (CUDA's
    // default) its first launch would, and that launch may be inside a CUDA-graph capture.
    cudaFuncAttributes attr{};
    const cudaError_t err = cudaFuncGetAttributes(&attr, k);
    if (err != cudaSuccess)
      throw_cuda_error(err, (std::string("cudaFuncGetAttributes(") + name + ")").c_str(), __FILE__,
                       __LINE__);
    m.kernels.push_back(k);
  }
  m.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

size_t loaded_module_count() {
  std::lock_guard<std::mutex> lock(modules_mutex());
  return modules().size();
}

void launch(const void* kernel, unsigned grid, unsigned block, void* params, int dev,
            const char* what) {
  DeviceGuard guard(dev);
  void* args[] = {params};
  const cudaError_t err =
      cudaLaunchKernel(kernel, dim3(grid), dim3(block), args, 0, cuda::stream(dev));
  if (err != cudaSuccess) throw_cuda_error(err, what, __FILE__, __LINE__);
}

}  // namespace ember::kernels::cuda::nvrtc
