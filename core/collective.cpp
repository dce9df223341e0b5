#include "core/collective.h"

#include <mutex>
#include <vector>

#include "core/dispatch.h"
#include "core/error.h"
#include "core/tensor.h"

namespace ember {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<Communicator>> slots;  // index = id; null once unregistered
};

Registry& registry() {
  static Registry* r = new Registry;  // outlives static destructors that may unregister
  return *r;
}

}  // namespace

int64_t register_communicator(std::shared_ptr<Communicator> c) {
  EMBER_CHECK(c != nullptr, "register_communicator: null communicator");
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.slots.push_back(std::move(c));
  return static_cast<int64_t>(r.slots.size()) - 1;
}

void unregister_communicator(int64_t id) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (id >= 0 && id < static_cast<int64_t>(r.slots.size())) r.slots[id].reset();
}

std::shared_ptr<Communicator> find_communicator(std::string_view op, int64_t id) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  EMBER_CHECK(id >= 0 && id < static_cast<int64_t>(r.slots.size()) && r.slots[id], op,
              ": no process group with id ", id,
              " (call distributed::init_process_group first; a destroyed group cannot be used)");
  return r.slots[id];
}

void check_communicator(std::string_view op, int64_t id, Device device) {
  const std::shared_ptr<Communicator> c = find_communicator(op, id);
  EMBER_CHECK(c->device() == device, op, ": the tensor is on ", device.str(), " but ",
              c->describe(), " communicates tensors on ", c->device().str());
}

namespace {
// FNV-1a over the fingerprint from two bases: 128 bits, so two different traces collide only by
// astronomically bad luck (the fingerprint itself may be megabytes; only the hash travels).
uint64_t fnv1a(std::string_view s, uint64_t h) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}
}  // namespace

TraceVerdict agree_on_trace(int64_t group, bool broken, std::string_view fingerprint) {
  const std::shared_ptr<Communicator> c = find_communicator("jit::compile", group);
  const std::vector<uint64_t> mine = {broken ? 1u : 0u, fnv1a(fingerprint, 0xcbf29ce484222325ull),
                                      fnv1a(fingerprint, 0x84222325cbf29ce4ull)};
  const std::vector<uint64_t> all = c->all_gather_words(mine);
  TraceVerdict v;
  for (int r = 0; r < c->size(); ++r) {
    const uint64_t* w = &all[static_cast<size_t>(r) * mine.size()];
    if (w[0]) {
      if (v.broken_rank < 0) v.broken_rank = r;
      continue;
    }
    if (v.reference_rank < 0) {
      v.reference_rank = r;
    } else if (v.different_rank < 0) {
      const uint64_t* ref = &all[static_cast<size_t>(v.reference_rank) * mine.size()];
      if (w[1] != ref[1] || w[2] != ref[2]) v.different_rank = r;
    }
  }
  return v;
}

namespace {
struct FinishedWork final : CollectiveWork {
  void wait() override {}
};

std::shared_ptr<Communicator> communicator_of(const KernelCall& call) {
  std::shared_ptr<Communicator> c = find_communicator(op_name(call.op), call.attrs.group);
  const Tensor& in = call.inputs[0];
  // In place only, as torch.distributed's collectives are: a copy here would be a second op the
  // tracer does not see.
  EMBER_CHECK(call.out.defined() && in.impl()->storage == call.out.impl()->storage &&
                  in.storage_offset() == call.out.storage_offset(),
              op_name(call.op), ": reduces its tensor in place; give the input as the output");
  return c;
}
}  // namespace

std::shared_ptr<CollectiveWork> Communicator::start_all_reduce(const Tensor& t, ReduceOp op) {
  all_reduce(t, op);
  return std::make_shared<FinishedWork>();
}

void run_collective(const KernelCall& call) {
  communicator_of(call)->all_reduce(call.out, call.attrs.reduce_op);
}

std::shared_ptr<CollectiveWork> start_collective(const KernelCall& call) {
  return communicator_of(call)->start_all_reduce(call.out, call.attrs.reduce_op);
}

}  // namespace ember
