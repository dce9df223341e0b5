// all_reduce through a stand-in communicator: three virtual ranks that hold x, 2x and 3x of the
// tensor, so Sum gives 6x, Avg 2x and Max 3x (x >= 0) or x (x < 0). The real groups are tested
// across processes (tests/multiprocess); this checks the row itself on every dtype and device.
#include <map>
#include <mutex>

#include "core/collective.h"
#include "core/dispatch.h"
#include "core/ops.h"
#include "op_table_harness.h"

namespace ember::test::optable {
namespace {

class ThreeRanks final : public Communicator {
 public:
  explicit ThreeRanks(Device d) : device_(d) {}
  void all_reduce(const Tensor& t, ReduceOp op) override {
    Tensor out = t;
    switch (op) {
      case ReduceOp::Sum:
        out.mul_(6);
        break;
      case ReduceOp::Avg:
        out.mul_(2);
        break;
      case ReduceOp::Max:
        out.copy_(where(t >= 0, t * 3, t));
        break;
    }
  }
  Device device() const override { return device_; }
  std::string describe() const override { return "three test ranks"; }
  int rank() const override { return 0; }
  int size() const override { return 3; }
  std::vector<uint64_t> all_gather_words(const std::vector<uint64_t>& mine) override {
    std::vector<uint64_t> all;
    for (int r = 0; r < 3; ++r) all.insert(all.end(), mine.begin(), mine.end());
    return all;
  }

 private:
  Device device_;
};

int64_t group_on(Device d) {
  static std::mutex mu;
  static std::map<std::string, int64_t> ids;
  std::lock_guard lock(mu);
  auto it = ids.find(d.str());
  if (it == ids.end())
    it = ids.emplace(d.str(), register_communicator(std::make_shared<ThreeRanks>(d))).first;
  return it->second;
}

}  // namespace

void all_reduce_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  for (const Shape& shape : {Shape{}, Shape{7}, Shape{3, 5}}) {
    for (const ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      if (op == ReduceOp::Avg && !is_floating(dt)) continue;  // refused, as NCCL's users expect
      Trial t;
      Vec x;
      t.inputs.push_back(make_input(shape, Layout::Contiguous, dt, c.domain, r, x));
      const char* name = op == ReduceOp::Sum ? "sum" : op == ReduceOp::Avg ? "avg" : "max";
      t.what = std::string("all_reduce(") + t.inputs[0].str() + ", " + name + ")";
      t.call = [op](const std::vector<Tensor>& in, Device dev) {
        Tensor y = in[0].clone();
        Attrs a;
        a.group = group_on(dev);
        a.reduce_op = op;
        dispatch(OpId::all_reduce, {y}, a, &y);
        return y;
      };
      t.expect.shape = shape;
      t.expect.dtype = dt;
      for (double v : x)
        t.expect.v.push_back(op == ReduceOp::Sum   ? 6 * v
                             : op == ReduceOp::Avg ? 2 * v
                                                   : (v >= 0 ? 3 * v : v));
      out.push_back(std::move(t));
    }
  }
}

}  // namespace ember::test::optable
