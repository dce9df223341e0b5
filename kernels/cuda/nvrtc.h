#pragma once
// Runtime compilation of generated CUDA C++ (the JIT's fused kernels) with NVRTC, and loading
// and launching the result through the CUDA runtime's library API (cudaLibraryLoadData,
// cudaLibraryGetKernel, cudaLaunchKernel). Nothing here calls the driver API, so nothing links
// libcuda directly and a CUDA build still starts on a machine without a driver.
//
// Sources include the embedded headers (kernels/cuda/embedded_headers.h) by their usual names.
// They are compiled for the device's exact architecture (a cubin) with the floating-point
// settings nvcc builds the eager kernels with (no fast math; FMA contraction on, nvcc's default,
// which generated code confines to one member: see fused_pointwise.cuh), so a generated kernel
// computes what the eager kernels compute.
//
// This header needs no CUDA headers (kernel handles are opaque), so host-only code and tests can
// use it; its definitions exist in CUDA builds only.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ember::kernels::cuda::nvrtc {

// NVRTC's version as major * 1000 + minor * 10 (13.0 -> 13000).
int version();
// The compute capability of `dev` as major * 10 + minor (90 for an H100/H200).
int device_arch(int dev);
// Multiprocessors of `dev`, for sizing grids.
int sm_count(int dev);

// What compile() made: a cubin for sm_<arch>, or PTX (NUL-free text) for the newest virtual
// architecture NVRTC knows when it cannot target `arch` itself (the driver finishes it).
struct Binary {
  std::string bytes;
  bool ptx = false;
};
// Whether compile() makes PTX for `arch` (an architecture newer than this NVRTC) rather than a
// cubin; an ember::Error where it can make neither.
bool compiles_to_ptx(int arch);
// The options compile() passes NVRTC for `arch` (they are part of the cache key).
std::vector<std::string> compile_options(int arch);
// Compiles `source` for `arch`; throws ember::Error carrying NVRTC's log when it does not
// compile. `name` labels the program in that log. Needs no GPU.
Binary compile(std::string_view source, int arch, std::string_view name = "ember_jit.cu");

// The cache key of compiling `source` for `arch`: 32 hex digits hashing the source, the embedded
// headers' digests, NVRTC's version, the architecture, the options and `tag` (the generator
// and its version).
std::string cache_key(std::string_view source, int arch, std::string_view tag);

// Somewhere compiled binaries persist between processes (the JIT's disk cache), by cache_key().
class BinaryStore {
 public:
  virtual ~BinaryStore() = default;
  virtual std::optional<std::string> load(const std::string& key) = 0;
  virtual void store(const std::string& key, std::string_view bytes) = 0;
};

enum class Origin : uint8_t { Memory, Store, Compiled };
const char* origin_name(Origin o);  // "memory", "disk", "nvrtc"

// The binary for (source, arch, tag): from `store` when it has it, else compiled (and put in
// `store`). Needs no GPU.
Binary fetch_or_compile(std::string_view source, int arch, std::string_view tag, BinaryStore* store,
                        Origin* origin = nullptr);

// A generated source and its cache tag (the generator and its version), as get_module takes them.
struct KernelSource {
  std::string source;
  std::string tag;
};
// Compiles precompile() runs at once when not told: EMBER_COMPILE_THREADS (1 compiles each
// kernel in its get_module call, as without precompile), else one per hardware thread. A
// malformed value is an ember::Error naming it.
unsigned default_compile_threads();
// Reads from `store`, or else compiles (and puts in `store`), up to `threads` at once (0:
// default_compile_threads()), the binaries of the sources for `dev` not loaded in this process,
// and keeps them for the get_module calls that follow: a compiled step's generated kernels are
// compiled side by side instead of one by one as its lowerings are built, and a stored binary is
// read once. The compiles run in worker processes where the worker program is found
// (kernels/cuda/nvrtc_workers.h), else on threads of this process. A source that does not
// compile is skipped here (its get_module call reports the error). Needs no GPU beyond asking
// `dev`'s architecture.
void precompile(std::span<const KernelSource> sources, int dev, BinaryStore* store,
                unsigned threads = 0);
// Drops what precompile() kept and no get_module call took (a lowering that generated another
// source after all).
void drop_precompiled();
// Process-wide counts, for logs and tests: binaries precompile() compiled, those it read from
// the store, those (of either) a get_module / fetch_or_compile call then took, those
// drop_precompiled() discarded.
struct PrecompileStats {
  int64_t compiled = 0, from_store = 0, taken = 0, dropped = 0;
  int64_t in_workers = 0;  // of `compiled`, those compiled in worker processes
};
PrecompileStats precompile_stats();

// Kernels of a loaded module, as opaque handles (cudaKernel_t) for launch().
struct Module {
  std::string key;
  std::vector<const void*> kernels;  // in the order of the names asked for
  Origin origin = Origin::Compiled;
  double milliseconds = 0;  // spent getting it (compiling and loading, or loading)
};
// The module of `source` for device `dev`, with the named extern "C" kernels: from the
// process-wide cache of loaded modules (keyed by cache_key), else through fetch_or_compile.
// Loaded modules live as long as the process.
Module get_module(std::string_view source, std::string_view tag,
                  std::span<const char* const> kernel_names, int dev, BinaryStore* store);

// Modules loaded in this process so far (one per distinct source and architecture), for tests.
size_t loaded_module_count();

// Launches `kernel` on Ember's stream of `dev` with one by-value parameter whose bytes are at
// `params` (a struct of the kernel's parameter type). `what` names the kernel in errors.
void launch(const void* kernel, unsigned grid, unsigned block, void* params, int dev,
            const char* what);

}  // namespace ember::kernels::cuda::nvrtc
