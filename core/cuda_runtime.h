#pragma once
// The narrow interface core needs from the CUDA runtime. Implemented in kernels/cuda (or by a
// stub that reports CUDA as unavailable when Ember is built without it).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ember::cuda {

bool is_available();  // built with CUDA and at least one device visible
int device_count();
void synchronize(int device = 0);  // also raises errors flagged by kernels (bad indices)
// Copies on the device's stream. Host-to-device from pageable memory and device-to-host return
// once the data is safe to reuse / read.
void copy_host_to_device(void* dst, const void* src, size_t n, int device);
void copy_device_to_host(void* dst, const void* src, size_t n, int device);
void copy_device_to_device(void* dst, const void* src, size_t n, int device);

struct AllocatorStats {
  int64_t allocated = 0;           // bytes in live blocks handed out
  int64_t reserved = 0;            // bytes obtained from cudaMalloc
  int64_t peak_allocated = 0;      // high-water mark of `allocated`
  int64_t num_allocs = 0;          // allocate() calls
  int64_t num_device_mallocs = 0;  // cudaMalloc calls (cache misses)
};
AllocatorStats memory_stats(int device = 0);
void reset_peak_memory_stats(int device = 0);
void empty_cache();  // returns cached free blocks to the driver
// What the driver reports for the whole device (cudaMemGetInfo): memory outside Ember's cache
// counts as used, blocks cached by the allocator too.
struct DeviceMemoryInfo {
  int64_t free = 0;   // bytes the driver could still hand out
  int64_t total = 0;  // bytes on the device
};
DeviceMemoryInfo memory_info(int device = 0);

// Whole-replay capture (the JIT's ReduceOverhead mode): everything queued on the device's
// stream between begin_capture and end_capture becomes one instantiated graph that
// launch_graph replays on that stream. Nothing queued during capture may allocate.
struct Graph;
struct GraphDeleter {
  void operator()(Graph* g) const;
};
using GraphPtr = std::unique_ptr<Graph, GraphDeleter>;
void begin_capture(int device);
GraphPtr end_capture(int device);  // also ends a capture that failed, then throws
void launch_graph(Graph& graph, int device);
int64_t graph_node_count(const Graph& graph);
// Copies inside a graph whose ends change from replay to replay (a replay's arguments in, its
// returned tensors out): capture_copy queues a device-to-device copy during a capture and
// returns its index in the graph end_capture makes; set_graph_copy points that copy at other
// memory of the same size for the following launches (launches already queued keep theirs).
// No stream operation of its own per replay, and the copies run as graph nodes. n > 0.
// beside: the copy goes on a side branch forked after what is queued so far (the step that
// wrote `src`), so the steps queued after it do not wait for it (joined by end_capture).
int capture_copy(void* dst, const void* src, size_t n, int device, bool beside = false);
void set_graph_copy(Graph& graph, int index, void* dst, const void* src, size_t n);

// Concurrent branches of a capture: steps that do not depend on each other are queued on
// different streams, so the graph holds them as parallel branches (a bias gradient beside the
// weight gradient). Branch 0 is the main stream; branches 1..n are side streams forked from it
// when the capture begins; end_capture joins them all. Events are numbered per capture.
//  - prepare_capture_branches: before begin_capture, makes n side streams and `events` events.
//  - use_capture_branch: launches on this thread for `device` go to branch b from now on
//    (cuBLAS handle calls excepted: only launches that fetch Ember's stream per call move).
//  - capture_signal / capture_wait: event e recorded after branch b's work so far / branch b
//    waits for event e.
void prepare_capture_branches(int device, int sides, int events);
void use_capture_branch(int device, int branch);
void capture_signal(int device, int branch, int event);
void capture_wait(int device, int branch, int event);

// Early reads: a small value (a loss) that a captured graph copies into pinned host memory as
// soon as the step producing it has run, on a branch of the graph beside the kernels after it.
// item() on the tensor a replay returns then waits for that copy alone, not for the rest of the
// step (the backward and the update keep the device busy while the host goes on).
//  - make_early_read: the pinned slot of `bytes` (<= 8) and its completion event.
//  - capture_early_read: during a capture, queues the copy of the slot's bytes from `src`
//    after everything queued so far, off the main line of the graph (end_capture joins it).
//  - note_early_launch: the replay's sequence number, after the launch of a graph holding it.
//  - read_early: if `seq` is still the latest launch, waits for that copy, writes the value to
//    `dst` and returns true (device errors flagged so far are raised as by a copy); false if a
//    later launch has overwritten the slot (the caller reads the device memory instead).
// One thread at a time per slot, like the executables that own them.
struct EarlyRead;
std::shared_ptr<EarlyRead> make_early_read(size_t bytes, int device);
void capture_early_read(EarlyRead& r, const void* src, int device);
uint64_t note_early_launch(EarlyRead& r);
bool read_early(EarlyRead& r, uint64_t seq, void* dst, size_t bytes);
int64_t early_reads_served();  // read_early calls that returned true, in this process

// Device time of each part of a queued sequence, for profiles (EMBER_LOGS=perf). hold() queues
// a kernel that keeps the stream busy for `ms`, so what is queued behind it runs back to back
// once it ends: the time between two marks is then device time, not the host's launch gaps.
class Timeline {
 public:
  Timeline(int device, int marks);  // marks 0..marks-1, recorded on the device's stream
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  void hold(double ms);
  void mark(int i);
  // Waits for the stream; microseconds from mark i-1 to mark i (element 0 is 0).
  std::vector<double> elapsed_us();
  // Whether the host queued every mark before the hold ended (if not, gaps are included).
  bool held_through() const;
  // Host time from the hold to the last mark: how long queuing the sequence took.
  double queued_us() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::cuda
