// Stands in for kernels/cuda when Ember is built without CUDA: CUDA is reported unavailable and
// every use of it is an ember::Error, so CPU-only builds link and fail politely.
#include "core/allocator.h"
#include "core/cuda_runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "kernels/cuda/early_read.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/timeline.h"

namespace ember {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  EMBER_FAIL(what, ": CUDA is not available: Ember was built without CUDA");
}
}  // namespace

namespace cuda {
bool is_available() { return false; }
int device_count() { return 0; }
bool has_cudnn() { return false; }
void synchronize(int) { no_cuda("cuda::synchronize"); }
void copy_host_to_device(void*, const void*, size_t, int) { no_cuda("cuda::copy_host_to_device"); }
void copy_device_to_host(void*, const void*, size_t, int) { no_cuda("cuda::copy_device_to_host"); }
void copy_device_to_device(void*, const void*, size_t, int) {
  no_cuda("cuda::copy_device_to_device");
}
void* alloc_pinned(size_t) { no_cuda("cuda::alloc_pinned"); }
void free_pinned(void*) {}
struct CopyEvent {};
CopyEvent* copy_pinned_to_device(void*, const void*, size_t, int) {
  no_cuda("cuda::copy_pinned_to_device");
}
void wait_copy(CopyEvent* e) { delete e; }
AllocatorStats memory_stats(int) { no_cuda("cuda::memory_stats"); }
void reset_peak_memory_stats(int) { no_cuda("cuda::reset_peak_memory_stats"); }
void empty_cache() { no_cuda("cuda::empty_cache"); }
DeviceMemoryInfo memory_info(int) { no_cuda("cuda::memory_info"); }
struct Graph {};
void GraphDeleter::operator()(Graph* g) const { delete g; }
void begin_capture(int) { no_cuda("cuda::begin_capture"); }
GraphPtr end_capture(int) { no_cuda("cuda::end_capture"); }
void launch_graph(Graph&, int) { no_cuda("cuda::launch_graph"); }
int64_t graph_node_count(const Graph&) { return 0; }
int capture_copy(void*, const void*, size_t, int, bool) { no_cuda("cuda::capture_copy"); }
void join_early_branch(int) { no_cuda("cuda::join_early_branch"); }
void set_graph_copy(Graph&, int, void*, const void*, size_t) { no_cuda("cuda::set_graph_copy"); }
void prepare_capture_branches(int, int, int) { no_cuda("cuda::prepare_capture_branches"); }
void use_capture_branch(int, int) { no_cuda("cuda::use_capture_branch"); }
void capture_signal(int, int, int) { no_cuda("cuda::capture_signal"); }
void capture_wait(int, int, int) { no_cuda("cuda::capture_wait"); }
std::shared_ptr<EarlyRead> EarlyRead::make(size_t, int) { no_cuda("cuda::EarlyRead"); }
EarlyRead::~EarlyRead() = default;
void EarlyRead::capture(const void*) { no_cuda("cuda::EarlyRead::capture"); }
bool EarlyRead::read(uint64_t, void*, size_t) { return false; }
int64_t early_reads_served() { return 0; }
struct Timeline::Impl {};
Timeline::Timeline(int, int) { no_cuda("cuda::Timeline"); }
Timeline::~Timeline() = default;
void Timeline::hold(double) {}
void Timeline::mark(int) {}
std::vector<double> Timeline::elapsed_us() { return {}; }
bool Timeline::held_through() const { return false; }
double Timeline::queued_us() const { return 0; }
}  // namespace cuda

Allocator* cuda_allocator(int) { no_cuda("cuda_allocator"); }

namespace kernels {
void run_cuda(const KernelCall& call) { no_cuda(op_name(call.op).data()); }
}  // namespace kernels

}  // namespace ember
