// Tensor handles: views and their strides (expected values written from PyTorch's semantics),
// in-place writes through views, conversions and copies, item/allclose/equal, type promotion
// and printing (PyTorch's format with `ember.` in place of `torch.`).
#include <numeric>
#include <sstream>
#include <vector>

#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "test_util.h"

using namespace ember;

namespace {

using Vec = std::vector<double>;

Vec iota(int64_t n, double start = 0) {
  Vec v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// 0, 1, ..., numel-1 in `shape`.
Tensor seq(const Shape& shape, DType dt = kFloat32) {
  return test::make(iota(numel_of(shape)), shape, dt);
}

bool shares(const Tensor& a, const Tensor& b) {
  return a.impl()->storage.get() == b.impl()->storage.get();
}

void check_geometry(const Tensor& t, const Shape& sizes, const Strides& strides, int64_t offset) {
  CHECK(t.sizes() == sizes);
  CHECK(t.strides() == strides);
  CHECK(t.storage_offset() == offset);
}

}  // namespace

TEST_CASE("views share storage and have PyTorch's strides and offsets", "[tensor]") {
  const Tensor x = seq({2, 3, 4});
  check_geometry(x, {2, 3, 4}, {12, 4, 1}, 0);
  CHECK(x.is_contiguous());

  SECTION("view / reshape / flatten") {
    const Tensor v = x.view({6, 4});
    CHECK(shares(v, x));
    check_geometry(v, {6, 4}, {4, 1}, 0);
    check_geometry(x.view({4, -1}), {4, 6}, {6, 1}, 0);
    check_geometry(x.reshape({24}), {24}, {1}, 0);
    CHECK(shares(x.reshape({24}), x));
    check_geometry(x.flatten(), {24}, {1}, 0);
    check_geometry(x.flatten(1), {2, 12}, {12, 1}, 0);
    check_geometry(x.flatten(0, 1), {6, 4}, {4, 1}, 0);
    CHECK(shares(x.flatten(1), x));
    check_geometry(test::make({5}, {}, kFloat32).flatten(), {1}, {1}, 0);
  }
  SECTION("transpose / permute / t") {
    const Tensor t = x.transpose(0, 2);
    CHECK(shares(t, x));
    check_geometry(t, {4, 3, 2}, {1, 4, 12}, 0);
    CHECK_FALSE(t.is_contiguous());
    check_geometry(x.transpose(-1, 1), {2, 4, 3}, {12, 1, 4}, 0);
    check_geometry(x.permute({1, 2, 0}), {3, 4, 2}, {4, 1, 12}, 0);
    check_geometry(x.permute({-1, 0, 1}), {4, 2, 3}, {1, 12, 4}, 0);
    const Tensor m = seq({3, 5});
    check_geometry(m.t(), {5, 3}, {1, 5}, 0);
    CHECK(test::read(m.t()) == Vec({0, 5, 10, 1, 6, 11, 2, 7, 12, 3, 8, 13, 4, 9, 14}));
  }
  SECTION("slice / narrow / select") {
    const Tensor s = x.slice(2, 1, 4, 2);
    CHECK(shares(s, x));
    check_geometry(s, {2, 3, 2}, {12, 4, 2}, 1);
    CHECK(test::read(s) == Vec({1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}));
    check_geometry(x.slice(1, -2, 100), {2, 2, 4}, {12, 4, 1},
                   4);  // bounds clamp like x[:, -2:100]
    check_geometry(x.slice(0, 1, 2).slice(2, 0, 4, 3), {1, 3, 2}, {12, 4, 3}, 12);
    check_geometry(x.narrow(1, 1, 2), {2, 2, 4}, {12, 4, 1}, 4);
    check_geometry(x.narrow(-1, 3, 1), {2, 3, 1}, {12, 4, 1}, 3);
    const Tensor sel = x.select(1, 2);
    CHECK(shares(sel, x));
    check_geometry(sel, {2, 4}, {12, 1}, 8);
    check_geometry(x.select(-1, -1), {2, 3}, {12, 4}, 3);
    check_geometry(x.select(0, 1), {3, 4}, {4, 1}, 12);
    CHECK(test::read(x.select(0, 1).select(0, 2)) == Vec({20, 21, 22, 23}));
    check_geometry(x.select(0, 1).select(0, 2).select(0, 3), {}, {}, 23);
  }
  SECTION("expand / squeeze / unsqueeze") {
    const Tensor c = seq({3, 1});
    const Tensor e = c.expand({2, 3, 4});
    CHECK(shares(e, c));
    check_geometry(e, {2, 3, 4}, {0, 1, 0}, 0);
    CHECK(test::read(e.select(0, 1).select(0, 2)) == Vec({2, 2, 2, 2}));
    check_geometry(c.expand({-1, 5}), {3, 5}, {1, 0}, 0);
    check_geometry(test::make({7}, {}, kFloat32).expand({2, 2}), {2, 2}, {0, 0}, 0);
    check_geometry(x.unsqueeze(0), {1, 2, 3, 4}, {24, 12, 4, 1}, 0);
    check_geometry(x.unsqueeze(1), {2, 1, 3, 4}, {12, 12, 4, 1}, 0);
    check_geometry(x.unsqueeze(-1), {2, 3, 4, 1}, {12, 4, 1, 1}, 0);
    CHECK(shares(x.unsqueeze(1), x));
    const Tensor sq = seq({2, 1, 3, 1});
    check_geometry(sq.squeeze(), {2, 3}, {3, 1}, 0);
    check_geometry(sq.squeeze(1), {2, 3, 1}, {3, 1, 1}, 0);
    check_geometry(sq.squeeze(0), {2, 1, 3, 1}, {3, 3, 1, 1}, 0);  // size 2: unchanged
    check_geometry(sq.squeeze(-1), {2, 1, 3}, {3, 3, 1}, 0);
    CHECK(shares(sq.squeeze(), sq));
  }
  SECTION("contiguous and clone") {
    CHECK(x.contiguous().is_same(x));  // already contiguous: the same tensor, like PyTorch
    const Tensor t = x.transpose(0, 1);
    const Tensor c = t.contiguous();
    CHECK_FALSE(shares(c, x));
    check_geometry(c, {3, 2, 4}, {8, 4, 1}, 0);
    CHECK(test::read(c) == test::read(t));
    const Tensor k = x.clone();
    CHECK_FALSE(shares(k, x));
    CHECK(test::read(k) == test::read(x));
  }
}

TEST_CASE("writes through a view are visible in the base", "[tensor]") {
  Tensor base = zeros({3, 4});
  base.select(1, 2).fill_(5);        // column 2
  base.slice(0, 0, 3, 2).add_(1.0);  // rows 0 and 2
  base.t().select(0, 0).mul_(3.0);   // column 0 through a transpose
  base.view({12}).narrow(0, 4, 2).add_(test::make({10, 20}, {2}, kFloat32));  // row 1, cols 0-1
  CHECK(test::read(base) == Vec({3, 1, 6, 1,                                  //
                                 10, 20, 5, 0,                                //
                                 3, 1, 6, 1}));
  // zero_ on a strided view clears only the viewed elements.
  base.slice(1, 1, 4, 2).zero_();
  CHECK(test::read(base) == Vec({3, 0, 6, 0, 10, 0, 5, 0, 3, 0, 6, 0}));
  // In place ops return *this and bump the shared storage's version (autograd relies on it).
  const uint32_t v0 = base.impl()->storage->version;
  Tensor col = base.select(1, 0);
  CHECK(&col.add_(1.0) == &col);
  CHECK(&col.mul_(col) == &col);
  CHECK(base.impl()->storage->version > v0);
  CHECK(test::read(base.select(1, 0)) == Vec({16, 121, 16}));
}

TEST_CASE("reshape copies only when a view is impossible", "[tensor]") {
  const Tensor x = seq({2, 3, 4});
  CHECK(shares(x.reshape({4, 6}), x));
  // [2, 3, 2] with strides [12, 4, 2] merges its first two dims: still a view.
  const Tensor s = x.slice(2, 0, 4, 2);
  const Tensor rs = s.reshape({6, 2});
  CHECK(shares(rs, x));
  check_geometry(rs, {6, 2}, {4, 2}, 0);
  // A transpose cannot be flattened in place: reshape copies, view refuses.
  const Tensor t = x.transpose(1, 2);
  const Tensor rt = t.reshape({24});
  CHECK_FALSE(shares(rt, x));
  CHECK(rt.is_contiguous());
  CHECK(test::read(rt) == test::read(t));
  CHECK_THROWS_AS(t.view({24}), Error);
  // But splitting a dim of a transpose is a view.
  const Tensor tv = x.transpose(0, 2).view({2, 2, 3, 2});
  CHECK(shares(tv, x));
  check_geometry(tv, {2, 2, 3, 2}, {2, 1, 4, 12}, 0);
  // A 0-dim tensor reshapes to any one-element shape and back.
  const Tensor z = test::make({4}, {}, kFloat32);
  check_geometry(z.reshape({1, 1}), {1, 1}, {1, 1}, 0);
  CHECK(z.reshape({1, 1}).reshape({}).dim() == 0);
}

TEST_CASE("to(dtype), to(device) and copy_", "[tensor]") {
  const Tensor f = test::make({-2.75, -0.5, 0, 0.5, 2.75, 7}, {2, 3}, kFloat32);
  SECTION("casts follow C++/PyTorch conversion") {
    CHECK(f.to(kFloat32).is_same(f));  // no-op conversions return the tensor itself
    CHECK(test::read(f.to(kInt32)) == Vec({-2, 0, 0, 0, 2, 7}));  // toward zero
    CHECK(test::read(f.to(kInt64)) == Vec({-2, 0, 0, 0, 2, 7}));
    CHECK(test::read(f.to(kBool)) == Vec({1, 1, 0, 1, 1, 1}));
    CHECK(test::read(f.to(kFloat16)) == test::read(f));
    CHECK(test::read(f.to(kBFloat16)) == test::read(f));
    CHECK(test::read(test::make({0.1}, {1}, kFloat64).to(kFloat16)) ==
          Vec({test::decode_f16(test::encode_f16(0.1))}));
    CHECK(f.to(kFloat64).dtype() == kFloat64);
    CHECK(test::read(test::make({1, 0, 1}, {3}, kBool).to(kFloat32)) == Vec({1, 0, 1}));
    // Casting a non-contiguous tensor keeps its logical order.
    CHECK(test::read(f.t().to(kInt64)) == Vec({-2, 0, 0, 2, 0, 7}));
  }
  SECTION("to(device) on the host") {
    CHECK(f.to(Device::cpu()).is_same(f));
    CHECK(f.cpu().is_same(f));
  }
  SECTION("copy_ casts, into views and from strided sources") {
    Tensor idst = zeros({2, 3}, kInt64);
    idst.copy_(f);  // float into int truncates, as PyTorch's copy_ does
    CHECK(test::read(idst) == Vec({-2, 0, 0, 0, 2, 7}));
    // Into a transposed view: the base receives the transpose.
    Tensor base = zeros({3, 2});
    base.t().copy_(f);
    CHECK(test::read(base) == Vec({-2.75, 0.5, -0.5, 2.75, 0, 7}));
    // From a strided source.
    Tensor d2 = zeros({3});
    d2.copy_(seq({7}).slice(0, 1, 7, 2));
    CHECK(test::read(d2) == Vec({1, 3, 5}));
  }
  SECTION("copy_ broadcasts the source") {
    Tensor dst = zeros({2, 3});
    dst.copy_(test::make({1, 2, 3}, {3}, kInt32));
    CHECK(dst.dtype() == kFloat32);
    CHECK(test::read(dst) == Vec({1, 2, 3, 1, 2, 3}));
    // A 0-dim source fills everything.
    Tensor d2 = zeros({3});
    d2.copy_(test::make({9}, {}, kFloat64));
    CHECK(test::read(d2) == Vec({9, 9, 9}));
  }
}

TEST_CASE("device round trips", "[tensor][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Tensor f = test::make({-2.75, -0.5, 0, 0.5, 2.75, 7}, {2, 3}, kFloat32);
  const Tensor g = f.cuda();
  CHECK(g.is_cuda());
  CHECK(g.device() == Device::cuda(0));
  CHECK(g.to(Device::cuda(0)).is_same(g));
  CHECK(test::read(g.cpu()) == test::read(f));
  CHECK(test::read(g.t().cpu()) == test::read(f.t()));  // strided device tensor to the host
  CHECK(test::read(g.to(kInt32)) == Vec({-2, 0, 0, 0, 2, 7}));
  Tensor dst = zeros({3, 2}, TensorOptions().device(Device::cuda()));
  dst.t().copy_(f);  // host source into a device view
  CHECK(test::read(dst) == Vec({-2.75, 0.5, -0.5, 2.75, 0, 7}));
  Tensor host = zeros({2, 3});
  host.copy_(g);  // device source into a host tensor
  CHECK(test::read(host) == test::read(f));
  CHECK(g.select(0, 1).select(0, 2).item<float>() == 7.0f);
  CHECK(test::read(f.to(kBFloat16).cuda().to(kFloat32)) == test::read(f));
}

TEST_CASE("fill_, zero_, add_, mul_ on whole tensors", "[tensor]") {
  Tensor i = zeros({4}, kInt32);
  i.fill_(7);
  CHECK(test::read(i) == Vec({7, 7, 7, 7}));
  i.add_(test::make({1, 2, 3, 4}, {4}, kInt32));
  CHECK(test::read(i) == Vec({8, 9, 10, 11}));
  i.mul_(int64_t{-2});
  CHECK(test::read(i) == Vec({-16, -18, -20, -22}));
  CHECK(i.dtype() == kInt32);  // an int scalar does not widen an int32 tensor
  i.zero_();
  CHECK(test::read(i) == Vec({0, 0, 0, 0}));
  Tensor h = ones({3}, kFloat16);
  h.add_(0.5);  // float scalar into a float16 tensor keeps float16
  CHECK(h.dtype() == kFloat16);
  CHECK(test::read(h) == Vec({1.5, 1.5, 1.5}));
  h.mul_(test::make({2, 4, 8}, {3}, kInt64));  // int tensor into float: allowed
  CHECK(test::read(h) == Vec({3, 6, 12}));
  Tensor b = zeros({2}, kBool);
  b.fill_(true);
  CHECK(test::read(b) == Vec({1, 1}));
  Tensor f = zeros({2, 2});
  f.add_(test::make({1, 2}, {2}, kFloat32));  // broadcast other
  CHECK(test::read(f) == Vec({1, 2, 1, 2}));
}

TEST_CASE("item<T>", "[tensor]") {
  CHECK(test::make({2.5}, {}, kFloat32).item<float>() == 2.5f);
  CHECK(test::make({2.5}, {1}, kFloat32).item<double>() == 2.5);
  CHECK(test::make({-3}, {1, 1}, kInt64).item<int64_t>() == -3);
  CHECK(test::make({-3}, {}, kInt32).item<int32_t>() == -3);
  CHECK(test::make({1}, {}, kBool).item<bool>());
  CHECK(test::make({0.25}, {}, kFloat16).item<float>() == 0.25f);
  CHECK(test::make({3}, {}, kBFloat16).item<double>() == 3.0);
  CHECK(test::make({2.75}, {}, kFloat32).item<int64_t>() == 2);
  // The untyped form keeps the category.
  CHECK(test::make({1.5}, {}, kFloat64).item().is_floating());
  CHECK(test::make({4}, {}, kInt32).item().to_int() == 4);
  CHECK(test::make({1}, {}, kBool).item().kind() == Scalar::Kind::Bool);
  // item of a view reads the viewed element.
  CHECK(seq({3, 4}).select(0, 2).select(0, 1).item<float>() == 9.0f);
}

TEST_CASE("allclose and equal", "[tensor]") {
  const Tensor a = test::make({1, 2, 3}, {3}, kFloat32);
  CHECK(allclose(a, test::make({1, 2, 3.00001}, {3}, kFloat32)));
  CHECK_FALSE(allclose(a, test::make({1, 2, 3.001}, {3}, kFloat32)));
  CHECK(allclose(a, test::make({1, 2, 3.001}, {3}, kFloat32), 1e-3));
  CHECK(allclose(a, test::make({1.01, 2, 3}, {3}, kFloat32), 0, 0.011));
  CHECK_FALSE(allclose(a, test::make({1.01, 2, 3}, {3}, kFloat32), 0, 0.009));
  CHECK_FALSE(allclose(a, test::make({1, NAN, 3}, {3}, kFloat32)));
  CHECK(allclose(a, test::make({1, 2, 3}, {1, 3}, kFloat32)));  // broadcasts, like PyTorch
  CHECK(allclose(a.t(), a));
  CHECK(equal(a, test::make({1, 2, 3}, {3}, kFloat32)));
  CHECK_FALSE(equal(a, test::make({1, 2, 4}, {3}, kFloat32)));
  CHECK_FALSE(equal(a, test::make({1, 2, 3}, {1, 3}, kFloat32)));  // shapes differ
  CHECK(equal(seq({2, 3}).t().contiguous(), seq({2, 3}).t()));
}

TEST_CASE("result_type follows PyTorch's promotion", "[tensor][promotion]") {
  const auto rt = [](std::initializer_list<Tensor> ts) {
    return result_type(std::span<const Tensor>(ts.begin(), ts.size()));
  };
  const auto dim = [](DType t) { return zeros({2, 3}, t); };
  const auto zero_dim = [](DType t) { return zeros({}, t); };
  const auto number = [](const Scalar& s) {
    return wrap_scalar(s, s.is_floating() ? kFloat64 : s.natural_dtype());
  };
  CHECK(rt({dim(kInt32), dim(kInt64)}) == kInt64);
  CHECK(rt({dim(kInt64), dim(kFloat16)}) == kFloat16);
  CHECK(rt({dim(kFloat16), dim(kBFloat16)}) == kFloat32);
  CHECK(rt({dim(kBool), dim(kInt32)}) == kInt32);
  CHECK(rt({dim(kBool), dim(kBool)}) == kBool);
  CHECK(rt({dim(kFloat32), dim(kFloat64)}) == kFloat64);
  CHECK(rt({dim(kBFloat16), dim(kInt32)}) == kBFloat16);
  // 0-dim tensors only matter when they are of a higher category.
  CHECK(rt({zero_dim(kFloat64), dim(kFloat32)}) == kFloat32);
  CHECK(rt({zero_dim(kInt64), dim(kInt32)}) == kInt32);
  CHECK(rt({zero_dim(kFloat64), dim(kInt32)}) == kFloat64);
  CHECK(rt({zero_dim(kFloat32), dim(kFloat16)}) == kFloat16);
  CHECK(rt({zero_dim(kInt32), dim(kBool)}) == kInt32);
  CHECK(rt({zero_dim(kFloat16), zero_dim(kFloat64)}) == kFloat64);
  // Python-style numbers: a float number is the default dtype unless a float tensor is present.
  CHECK(rt({dim(kFloat16), number(2.5)}) == kFloat16);
  CHECK(rt({dim(kInt32), number(2.5)}) == kFloat32);
  CHECK(rt({dim(kInt64), number(2.5)}) == kFloat32);
  CHECK(rt({dim(kInt32), number(int64_t{5})}) == kInt32);
  CHECK(rt({dim(kBool), number(int64_t{5})}) == kInt64);
  CHECK(rt({dim(kBool), number(true)}) == kBool);
  CHECK(rt({dim(kFloat64), number(2.5)}) == kFloat64);
  CHECK(rt({zero_dim(kInt32), number(2.5)}) == kFloat32);
  // The same through the ops with scalars.
  CHECK(add(dim(kFloat16), 2.5).dtype() == kFloat16);
  CHECK(add(dim(kInt32), 2.5).dtype() == kFloat32);
  CHECK(mul(dim(kInt32), int64_t{3}).dtype() == kInt32);
  CHECK(sub(1.5, dim(kBFloat16)).dtype() == kBFloat16);
  CHECK(add(dim(kFloat32), zero_dim(kFloat64)).dtype() == kFloat32);
  CHECK(add(dim(kInt32), zero_dim(kFloat64)).dtype() == kFloat64);
  CHECK((dim(kInt64) * 0.5).dtype() == kFloat32);
  CHECK(gt(dim(kInt32), 0.5).dtype() == kBool);
}

TEST_CASE("printing matches PyTorch", "[tensor][print]") {
  const auto p = [](const Tensor& t) { return t.str(); };
  CHECK(p(test::make({1, 2, 3}, {3}, kFloat32)) == "tensor([1., 2., 3.])");
  CHECK(p(test::make({0.5, 1.25, 3, 4}, {2, 2}, kFloat32)) ==
        "tensor([[0.5000, 1.2500],\n        [3.0000, 4.0000]])");
  CHECK(p(test::make({-1.5, 2}, {2}, kFloat32)) == "tensor([-1.5000,  2.0000])");
  CHECK(p(test::make({-1, 2}, {2}, kFloat32)) == "tensor([-1.,  2.])");
  CHECK(p(test::make({1, 2, 3}, {3}, kInt64)) == "tensor([1, 2, 3])");
  CHECK(p(test::make({-1, 2, 10}, {3}, kInt64)) == "tensor([-1,  2, 10])");
  CHECK(p(test::make({1, 2, 3}, {3}, kInt32)) == "tensor([1, 2, 3], dtype=ember.int32)");
  CHECK(p(test::make({1, 0}, {2}, kBool)) == "tensor([ True, False])");
  CHECK(p(test::make({1, 0, 0, 1}, {2, 2}, kBool)) ==
        "tensor([[ True, False],\n        [False,  True]])");
  CHECK(p(test::make({1, 2}, {2}, kFloat64)) == "tensor([1., 2.], dtype=ember.float64)");
  CHECK(p(test::make({1, 2}, {2}, kFloat16)) == "tensor([1., 2.], dtype=ember.float16)");
  CHECK(p(test::make({0.1}, {1}, kFloat16)) == "tensor([0.1000], dtype=ember.float16)");
  CHECK(p(test::make({1.5}, {1}, kBFloat16)) == "tensor([1.5000], dtype=ember.bfloat16)");
  CHECK(p(test::make({3.5}, {}, kFloat32)) == "tensor(3.5000)");
  CHECK(p(test::make({3}, {}, kInt64)) == "tensor(3)");
  CHECK(p(test::make({1}, {}, kBool)) == "tensor(True)");
  CHECK(p(test::make({2.5}, {}, kFloat64)) == "tensor(2.5000, dtype=ember.float64)");
  CHECK(p(test::make(iota(8, 1), {2, 2, 2}, kInt64)) ==
        "tensor([[[1, 2],\n         [3, 4]],\n\n        [[5, 6],\n         [7, 8]]])");
  CHECK(p(seq({2, 3}).t()) == "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]])");
  // Scientific notation when magnitudes span more than 1000x or are tiny.
  CHECK(p(test::make({1e-5, 1}, {2}, kFloat32)) == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(p(test::make({1e10, 1}, {2}, kFloat64)) ==
        "tensor([1.0000e+10, 1.0000e+00], dtype=ember.float64)");
  CHECK(p(test::make({0.001, 1}, {2}, kFloat32)) == "tensor([0.0010, 1.0000])");
  CHECK(p(test::make({1, NAN, INFINITY}, {3}, kFloat32)) == "tensor([1., nan, inf])");
  CHECK(p(test::make({0, 0}, {2}, kFloat32)) == "tensor([0., 0.])");
  CHECK(p(test::make({0, 1.5}, {2}, kFloat32)) == "tensor([0.0000, 1.5000])");
  CHECK(p(test::make({100.5, 2}, {2}, kFloat32)) == "tensor([100.5000,   2.0000])");
  // Empty tensors: no elements to infer a dtype from, so any non-float32 dtype is shown; a shape
  // other than (0,) is shown too.
  CHECK(p(test::make({}, {0}, kFloat32)) == "tensor([])");
  CHECK(p(test::make({}, {0}, kInt64)) == "tensor([], dtype=ember.int64)");
  CHECK(p(test::make({}, {0, 3}, kFloat32)) == "tensor([], size=(0, 3))");
  // More than 1000 elements are summarised with the first and last three.
  CHECK(p(test::make(iota(1001), {1001}, kInt64)) ==
        "tensor([   0,    1,    2,  ...,  998,  999, 1000])");
  // operator<< prints the same.
  std::ostringstream os;
  os << test::make({1, 2}, {2}, kInt32);
  CHECK(os.str() == "tensor([1, 2], dtype=ember.int32)");
}

TEST_CASE("printing a CUDA tensor names its device", "[tensor][print][cuda]") {
  EMBER_REQUIRE_CUDA();
  CHECK(test::make({1, 2}, {2}, kFloat32, Device::cuda()).str() ==
        "tensor([1., 2.], device='cuda:0')");
  CHECK(test::make({1, 2}, {2}, kInt32, Device::cuda()).str() ==
        "tensor([1, 2], device='cuda:0', dtype=ember.int32)");
}

TEST_CASE("A dtype prints its name", "[tensor]") {
  std::ostringstream os;
  os << kBFloat16 << " " << kInt64 << " " << zeros({1}, kFloat64).dtype();
  CHECK(os.str() == "bfloat16 int64 float64");
}
