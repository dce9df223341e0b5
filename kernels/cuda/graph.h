#pragma once
// CUDA-graph capture for the JIT's ReduceOverhead replays, and the concurrent branches of a
// capture. Free of CUDA toolkit headers, so jit/ can include it in any build; implemented in
// kernels/cuda/graph.cpp (or by kernels/cuda_stub.cc, where every call is an error).
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ember::cuda {

// Whole-replay capture: everything queued on the device's stream between begin_capture and
// end_capture becomes one instantiated graph that launch_graph replays on that stream. Nothing
// queued during capture may allocate.
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
// What is queued after this (on the stream launches go to now) waits for every copy queued
// beside so far: before a step reuses bytes such a copy reads. Nothing when none was queued.
void join_early_branch(int device);
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

}  // namespace ember::cuda
