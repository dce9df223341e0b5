// The fallback of the generated-kernel lowerings: a group whose kernel could not be built runs
// its members one by one on the eager kernels. Memory was planned as if the group were one
// kernel (its internals unstored), so the internals get buffers of their own here.
#include <algorithm>

#include "core/dispatch.h"
#include "jit/lower.h"

namespace ember::jit {
namespace {

class MemberByMember final : public LoweredGroup {
 public:
  MemberByMember(const LoweringContext& ctx, std::string why) : why_(std::move(why)) {
    const Graph& g = ctx.graph;
    auto member = [&](ValueId v) {
      for (int32_t ni : ctx.group.nodes)
        if (g.nodes[ni].out == v) return true;
      return false;
    };
    auto tensor_of = [&](ValueId v) {
      const auto& outs = ctx.group.outputs;
      if (std::find(outs.begin(), outs.end(), v) != outs.end() || !member(v))
        return Tensor(ctx.slots[v]);  // follows the executor's slot
      for (const auto& [id, t] : scratch_)
        if (id == v) return t;
      const Value& val = g.values[v];
      scratch_.emplace_back(v, make_empty(val.shape, val.dtype, val.device));
      return scratch_.back().second;
    };
    for (int32_t ni : ctx.group.nodes) {
      const Node& n = g.nodes[ni];
      Step s;
      s.op = n.op;
      s.attrs = n.attrs;
      for (ValueId in : n.inputs) s.args.push_back(tensor_of(in));
      s.out = tensor_of(n.out);
      s.device = g.values[n.out].device;
      steps_.push_back(std::move(s));
    }
  }
  void run() override {
    for (const Step& s : steps_) run_kernel({s.op, s.args, s.attrs, s.out}, s.device);
  }
  int32_t kernels() const override { return static_cast<int32_t>(steps_.size()); }
  std::string describe() const override { return "member by member (" + why_ + ")"; }

 private:
  struct Step {
    OpId op = OpId::neg;
    Attrs attrs;
    std::vector<Tensor> args;
    Tensor out;
    Device device;
  };
  std::string why_;
  std::vector<std::pair<ValueId, Tensor>> scratch_;
  std::vector<Step> steps_;
};

}  // namespace

std::unique_ptr<LoweredGroup> lower_member_by_member(const LoweringContext& ctx, std::string why) {
  return std::make_unique<MemberByMember>(ctx, std::move(why));
}

}  // namespace ember::jit
