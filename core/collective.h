#pragma once
/// @file
/// The seam between the op table's collective row (`all_reduce`) and the process groups of
/// `distributed/`: a communicator registered here under an id is what the row's kernel calls,
/// so eager code, autograd and the JIT's replays reach NCCL or Gloo through one op while `core/`
/// depends on neither.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/op.h"

namespace ember {

class Tensor;
struct KernelCall;

/// A collective in flight (Communicator::start_all_reduce).
class CollectiveWork {
 public:
  virtual ~CollectiveWork() = default;
  /// Returns once the result may be used: on the CPU when it is in the tensor; on a GPU once
  /// work queued on the current CUDA stream after this call will see it. Raises the
  /// collective's error, if it had one.
  virtual void wait() = 0;
};

/// What a collective op calls: one communicator per process group.
class Communicator {
 public:
  virtual ~Communicator() = default;
  /// Combines `t` (contiguous, on device()) across every rank by `op`, in place, before returning
  /// on the host's side: on a CUDA device, when the reduction is enqueued on the current stream.
  virtual void all_reduce(const Tensor& t, ReduceOp op) = 0;
  /// all_reduce that returns before it is done, so the caller can go on computing: `t` must not
  /// be read or written until the work's wait() returned. Collectives run in the order they
  /// were called, these included. By default a blocking all_reduce and a finished work.
  virtual std::shared_ptr<CollectiveWork> start_all_reduce(const Tensor& t, ReduceOp op);
  /// The device the communicator's tensors live on (the CPU for Gloo, a GPU for NCCL).
  virtual Device device() const = 0;
  /// "gloo rank 1 of 4", for errors.
  virtual std::string describe() const = 0;
  /// This rank's index, 0..size()-1.
  virtual int rank() const = 0;
  /// The number of ranks.
  virtual int size() const = 0;
  /// Every rank's `mine` (the same length on each), rank by rank, through host memory and without
  /// dispatching ops (the JIT calls it while a tracer is installed).
  virtual std::vector<uint64_t> all_gather_words(const std::vector<uint64_t>& mine) = 0;
};

/// What the ranks found when they compared their traces of one call (agree_on_trace).
struct TraceVerdict {
  int broken_rank = -1;     ///< the lowest rank whose trace broke, or -1
  int different_rank = -1;  ///< the lowest unbroken rank whose trace differs from another's, or -1
  int reference_rank = -1;  ///< the unbroken rank it was compared with
};
/// Every rank of communicator `group` states whether its trace broke and, if not, the trace's
/// fingerprint; all get the same verdict back (a collective: every rank must call it).
TraceVerdict agree_on_trace(int64_t group, bool broken, std::string_view fingerprint);

/// Registers `c` and returns its id (ids count up from 0 in registration order, so groups
/// created in the same order on every rank get the same ids). Thread-safe.
int64_t register_communicator(std::shared_ptr<Communicator> c);
/// Removes the communicator `id`; later calls naming it raise ember::Error.
void unregister_communicator(int64_t id);
/// The communicator `id`, or an ember::Error naming `op` when there is none.
std::shared_ptr<Communicator> find_communicator(std::string_view op, int64_t id);
/// Raises ember::Error naming `op` unless communicator `id` exists and works on `device`.
void check_communicator(std::string_view op, int64_t id, Device device);

/// The kernel of the collective rows, on every device: reduces its input in place (the output
/// must be the input).
void run_collective(const KernelCall& call);
/// run_collective, started: a compiled step's replay waits for it before the first step that
/// touches the tensor, running the steps in between meanwhile.
std::shared_ptr<CollectiveWork> start_collective(const KernelCall& call);

}  // namespace ember
