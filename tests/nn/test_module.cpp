// nn::Module: registration, naming and order, holders, train/eval, to(dtype), zero_grad,
// Sequential and ModuleList, printing, and the errors of bad registrations.
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "nn/module_list.h"
#include "nn/sequential.h"
#include "nn_test_util.h"

using namespace ember;
using Catch::Matchers::Contains;
using nntest::error_of;

namespace {

struct BlockImpl : nn::Module {
  nn::Linear lin{nullptr};
  Tensor scale;
  BlockImpl() {
    lin = register_module("lin", nn::Linear(3, 2));
    scale = register_parameter("scale", ones({2}));
    register_buffer("count", zeros({1}, kInt64));
    register_buffer("running", zeros({2}));
  }
  Tensor forward(const Tensor& x) { return lin(x) * scale; }
};
EMBER_MODULE(Block);

struct NetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  Block block{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", nn::Linear(4, 3));
    block = register_module("block", Block());
    fc2 = register_module("fc2", nn::Linear(2, 5));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(block(relu(fc1(x))))); }
};
EMBER_MODULE(Net);

std::vector<std::string> names_of(const nn::NamedList<Tensor>& list) {
  std::vector<std::string> out;
  for (const auto& [n, t] : list) out.push_back(n);
  return out;
}

// A module registered by a user, with a constructor argument.
struct ScaleImpl : nn::Module {
  Tensor factor;
  explicit ScaleImpl(double f) { factor = register_parameter("factor", full({1}, f)); }
  Tensor forward(const Tensor& x) { return x * factor; }
};
EMBER_MODULE(Scale);

}  // namespace

TEST_CASE("parameters are named with dotted paths in registration order", "[nn][module]") {
  Net net;
  const std::vector<std::string> expected = {"fc1.weight",       "fc1.bias",       "block.scale",
                                             "block.lin.weight", "block.lin.bias", "fc2.weight",
                                             "fc2.bias"};
  CHECK(names_of(net->named_parameters()) == expected);

  // parameters() lists the very tensors the members hold, as leaves that require grad.
  const std::vector<Tensor> params = net->parameters();
  REQUIRE(params.size() == 7);
  CHECK(params[0].is_same(net->fc1->weight));
  CHECK(params[1].is_same(net->fc1->bias));
  CHECK(params[2].is_same(net->block->scale));
  CHECK(params[3].is_same(net->block->lin->weight));
  CHECK(params[6].is_same(net->fc2->bias));
  for (const Tensor& p : params) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  CHECK(net->parameters(/*recurse=*/false).empty());
  REQUIRE(net->block->parameters(false).size() == 1);
  CHECK(net->block->parameters(false)[0].is_same(net->block->scale));

  CHECK(names_of(net->named_buffers()) == std::vector<std::string>{"block.count", "block.running"});
  CHECK(net->buffers().size() == 2);
  CHECK_FALSE(net->buffers()[0].requires_grad());

  const auto kids = net->named_children();
  REQUIRE(kids.size() == 3);
  CHECK(kids[0].first == "fc1");
  CHECK(kids[1].first == "block");
  CHECK(kids[2].first == "fc2");
  CHECK(kids[1].second.get() == net->block.get());
  CHECK(net->children().size() == 3);

  std::vector<std::string> module_names;
  for (const auto& [n, m] : net->named_modules()) module_names.push_back(n);
  CHECK(module_names == std::vector<std::string>{"", "fc1", "block", "block.lin", "fc2"});
  CHECK(net->modules().front().get() == net.get());
  CHECK(net->modules(/*include_self=*/false).size() == 4);

  CHECK(net->name() == "Net");
  CHECK(net->fc1->name() == "Linear");
}

TEST_CASE("the user-facing example of DESIGN.md builds and runs", "[nn][module]") {
  Net model;
  model->to(Device::cpu());
  const Tensor y = model(randn({6, 4}));
  CHECK(y.sizes() == Shape{6, 5});
  CHECK(y.requires_grad());
  y.sum().backward();
  for (const auto& [n, p] : model->named_parameters()) {
    INFO(n);
    CHECK(p.grad().defined());
    CHECK(p.grad().sizes() == p.sizes());
  }
}

TEST_CASE("register_parameter: grads, non-leaves, tied weights", "[nn][module]") {
  struct TiedImpl : nn::Module {
    Tensor w, v;
    TiedImpl() {
      w = register_parameter("w", randn({3}));
      v = register_parameter("v", zeros({2}), /*requires_grad=*/false);
    }
  };
  auto tied = std::make_shared<TiedImpl>();
  CHECK(tied->w.requires_grad());
  CHECK_FALSE(tied->v.requires_grad());

  // A non-leaf is detached into a fresh leaf, like nn.Parameter(t).
  Tensor a = randn({3});
  a.requires_grad_(true);
  struct HoldImpl : nn::Module {};
  auto hold = std::make_shared<HoldImpl>();
  Tensor p = hold->register_parameter("p", a * 2.0);
  CHECK(p.is_leaf());
  CHECK(p.requires_grad());

  // One tensor registered under two names (tied weights) is listed once.
  hold->register_parameter("q", tied->w);
  auto outer = std::make_shared<HoldImpl>();
  outer->register_module("tied", tied);
  outer->register_module("hold", hold);
  CHECK(names_of(outer->named_parameters()) ==
        std::vector<std::string>{"tied.w", "tied.v", "hold.p"});

  // An undefined parameter (an absent bias) is registered but never listed.
  hold->register_parameter("absent", Tensor());
  CHECK(hold->parameters().size() == 2);
}

TEST_CASE("bad registrations raise errors naming the module and the name", "[nn][module][errors]") {
  struct EmptyImpl : nn::Module {};
  auto m = std::make_shared<EmptyImpl>();
  m->register_parameter("w", zeros({2}));
  CHECK_ERROR(m->register_parameter("w", zeros({2})),
              Contains("Empty") && Contains("'w'") && Contains("already registered"));
  CHECK_ERROR(m->register_buffer("w", zeros({2})), Contains("'w'") && Contains("parameter"));
  CHECK_ERROR(m->register_module("w", nn::Linear(2, 2)), Contains("'w'"));
  CHECK_ERROR(m->register_parameter("a.b", zeros({2})), Contains("'a.b'") && Contains("'.'"));
  CHECK_ERROR(m->register_parameter("", zeros({2})), Contains("empty"));
  CHECK_ERROR(m->register_parameter("i", zeros({2}, kInt64)),
              Contains("'i'") && Contains("int64") && Contains("floating"));
  CHECK_ERROR(m->register_module("lin", nn::Linear(nullptr)),
              Contains("'lin'") && Contains("empty"));
  // A module cannot contain itself (directly or through a child).
  auto child = std::make_shared<EmptyImpl>();
  m->register_module("child", child);
  CHECK_ERROR(child->register_module("parent", m), Contains("own descendant"));
  CHECK_ERROR(m->register_module("self", m), Contains("own descendant"));

  // Using an empty holder is an error, not a crash.
  nn::Linear empty{nullptr};
  CHECK(empty.is_empty());
  CHECK_FALSE(static_cast<bool>(empty));
  CHECK_ERROR(empty(zeros({1, 2})), Contains("Linear") && Contains("empty"));
  CHECK_ERROR(empty->weight, Contains("Linear") && Contains("empty"));

  // A module not owned by a shared_ptr cannot list itself.
  EmptyImpl on_stack;
  CHECK_ERROR(on_stack.modules(), Contains("shared_ptr"));
  CHECK(on_stack.modules(/*include_self=*/false).empty());
}

TEST_CASE("train and eval reach every descendant", "[nn][module]") {
  Net net;
  CHECK(net->is_training());
  net->eval();
  for (const auto& m : net->modules()) CHECK_FALSE(m->is_training());
  net->train();
  for (const auto& m : net->modules()) CHECK(m->is_training());
  net->block->train(false);
  CHECK(net->is_training());
  CHECK_FALSE(net->block->lin->is_training());
}

TEST_CASE("to(dtype) converts in place: holders, members and parameter lists keep working",
          "[nn][module]") {
  Net net;
  const std::vector<Tensor> before = net->parameters();
  net(randn({2, 4})).sum().backward();  // gradients exist and must follow
  net->to(kFloat64);

  const std::vector<Tensor> after = net->parameters();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].is_same(before[i]));  // same handles: an optimizer's list stays valid
    CHECK(before[i].dtype() == kFloat64);
    CHECK(before[i].requires_grad());
    CHECK(before[i].is_leaf());
    REQUIRE(before[i].grad().defined());
    CHECK(before[i].grad().dtype() == kFloat64);
  }
  CHECK(net->fc1->weight.dtype() == kFloat64);
  // Integer buffers keep their dtype; floating ones follow.
  const auto buffers = net->named_buffers();
  CHECK(buffers[0].second.dtype() == kInt64);
  CHECK(buffers[1].second.dtype() == kFloat64);

  // The converted model trains in float64 and gradients land in the same tensors.
  net->zero_grad();
  for (const Tensor& p : before) CHECK_FALSE(p.grad().defined());
  const Tensor x = randn({3, 4}, kFloat64);
  const Tensor y = net(x);
  CHECK(y.dtype() == kFloat64);
  y.sum().backward();
  for (const Tensor& p : before) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == kFloat64);
  }

  // Values survive a round trip float64 -> float32 exactly (they started as float32).
  const std::vector<double> w64 = test::read(net->fc1->weight);
  net->to(kFloat32);
  CHECK(test::read(net->fc1->weight) == w64);
  net->to(Device::cpu(), kFloat64);
  CHECK(net->fc1->weight.dtype() == kFloat64);

  CHECK_ERROR(net->to(kInt64), Contains("Net") && Contains("int64") && Contains("floating"));
}

TEST_CASE("zero_grad clears to none or to zeros", "[nn][module]") {
  nn::Linear lin(3, 2);
  lin(randn({4, 3})).sum().backward();
  REQUIRE(lin->weight.grad().defined());
  lin->zero_grad(/*set_to_none=*/false);
  REQUIRE(lin->weight.grad().defined());
  for (double g : test::read(lin->weight.grad())) CHECK(g == 0);
  for (double g : test::read(lin->bias.grad())) CHECK(g == 0);
  lin->zero_grad();
  CHECK_FALSE(lin->weight.grad().defined());
  CHECK_FALSE(lin->bias.grad().defined());
}

TEST_CASE("Sequential chains any tensor-to-tensor modules", "[nn][module][sequential]") {
  nn::Sequential seq(nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 2), Scale(2.0));
  CHECK(seq->size() == 4);
  CHECK(names_of(seq->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "3.factor"});
  nn::LinearImpl& first = seq->at<nn::LinearImpl>(0);
  nn::LinearImpl& third = seq->at<nn::LinearImpl>(2);
  CHECK(seq[1]->name() == "ReLU");

  const Tensor x = randn({5, 4});
  const Tensor expected = third.forward(relu(first.forward(x))) * 2.0;
  CHECK(allclose(seq(x), expected, 1e-6, 1e-7));

  CHECK_ERROR(seq->at<nn::LinearImpl>(1), Contains("Sequential") && Contains("ReLU"));
  CHECK_ERROR(seq[7], Contains("Sequential") && Contains("7"));

  // Nesting and push_back; an empty Sequential is the identity.
  nn::Sequential outer(seq, nn::Dropout(0.5));
  outer->push_back(nn::Sequential());
  CHECK(outer->size() == 3);
  CHECK(names_of(outer->named_parameters()).front() == "0.0.weight");
  outer->eval();  // Dropout becomes the identity
  CHECK(allclose(outer(x), expected, 1e-6, 1e-7));
  CHECK(equal(nn::Sequential()(x), x));

  // Moving a Sequential converts its entries' parameters in place.
  outer->to(kFloat64);
  CHECK(first.weight.dtype() == kFloat64);
  CHECK(outer(x.to(kFloat64)).dtype() == kFloat64);
}

TEST_CASE("ModuleList holds modules of any kind as children", "[nn][module]") {
  struct TowerImpl : nn::Module {
    nn::ModuleList layers;
    TowerImpl() {
      layers = register_module("layers", nn::ModuleList(nn::Linear(3, 3), nn::Tanh()));
      layers->push_back(nn::Linear(3, 1));
    }
    Tensor forward(Tensor x) {
      x = layers->at<nn::LinearImpl>(0).forward(x);
      x = layers->at<nn::TanhImpl>(1).forward(x);
      return layers->at<nn::LinearImpl>(2).forward(x);
    }
  };
  auto tower = std::make_shared<TowerImpl>();
  CHECK(tower->layers->size() == 3);
  CHECK(names_of(tower->named_parameters()) ==
        std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight",
                                 "layers.2.bias"});
  size_t n = 0;
  for (const auto& m : *tower->layers) n += m != nullptr;
  CHECK(n == 3);
  CHECK(tower->forward(randn({2, 3})).sizes() == Shape{2, 1});
  CHECK_ERROR(tower->layers[3], Contains("ModuleList") && Contains("3"));
  CHECK_ERROR(tower->layers->at<nn::LinearImpl>(1), Contains("ModuleList") && Contains("Tanh"));
}

TEST_CASE("modules print as a tree", "[nn][module]") {
  Net net;
  std::ostringstream os;
  os << *net;
  const std::string s = os.str();
  CHECK_THAT(s, Contains("Net(\n"));
  CHECK_THAT(s, Contains("  (fc1): Linear(in_features=4, out_features=3, bias=true)\n"));
  CHECK_THAT(s, Contains("  (block): Block(\n    (lin): Linear(in_features=3, out_features=2"));
  std::ostringstream seq;
  seq << nn::Sequential(nn::ReLU(), nn::Dropout(0.25));
  CHECK(seq.str() == "Sequential(\n  (0): ReLU()\n  (1): Dropout(p=0.25)\n)");
}
