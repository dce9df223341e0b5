#pragma once
// The machinery of the op-table sweep (tests/core/test_op_table.cpp): random inputs in an op's
// domain, laid out contiguous / transposed / strided / expanded, trials that pair an op call with
// a float64 reference computed in the test, and the comparison with per-dtype tolerances.
// The trial generators live in tests/core/op_trials_*.cpp, one file per family of ops.
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/host_values.h"
#include "core/op.h"
#include "core/tensor.h"

namespace ember::test::optable {

using Vec = std::vector<double>;
using Rng = std::mt19937_64;

// ---- random values ------------------------------------------------------------------------

double uniform(Rng& r, double lo, double hi);
int64_t integer(Rng& r, int64_t lo, int64_t hi_inclusive);
// Keeps 8 significant bits, so the value is exact in bfloat16 and float16.
double quantize8(double x);

// Where an op's inputs are drawn: keeps log/sqrt/pow in their domains and away from zero.
//  Any: +-[0.1, 2]; Positive: [0.1, 3]; PowBase/PowExp: pow's operands; Discrete: multiples
//  of 1/4 (ties on purpose, for comparisons and argmax); Wide: [-20, 20] with some zeros.
// Integers and bools get the analogous integer ranges; 16-bit floats are quantize8'd.
enum class Domain { Any, Positive, PowBase, PowExp, Discrete, Wide };
double draw(Domain d, DType t, Rng& r);
Vec draws(int64_t n, Domain d, DType t, Rng& r);

// ---- shapes, broadcasting and layouts -----------------------------------------------------

Shape broadcast(const Shape& a, const Shape& b);
// Values of `from`-shaped `v` read as `to` by numpy broadcasting.
Vec broadcast_values(const Vec& v, const Shape& from, const Shape& to);

// How an input is laid out in memory: the logical tensor is a view of a base buffer.
enum class Layout { Contiguous, Transposed, Strided, Expanded };
const char* layout_name(Layout l);

struct ShapeLayout {
  Shape shape;
  Layout layout;
};

struct Input {
  Vec base;  // row-major values of the base buffer
  Shape base_shape;
  DType dtype = kFloat32;
  Layout layout = Layout::Contiguous;
  Shape shape;  // logical shape

  // A fresh tensor on `dev`: the base copied there, then the view taken.
  Tensor make(Device dev) const;
  std::string str() const;  // "float32[3, 5] transposed"
  // Whether the layout cannot come out contiguous (it can for degenerate shapes like [1, 4]
  // transposed), so the harness can check it built what it meant to.
  bool must_be_strided() const;
};

// Builds an input of logical `shape` and `layout` from values `gen(n)`; the logical row-major
// values go to `logical`. Layouts that need more dims fall back to contiguous.
//  Transposed: a base with the last two dims swapped, viewed through transpose(-1, -2).
//  Strided: a base twice as long in the last dim (the skipped elements hold other valid values),
//    viewed through slice(-1, 0, n, 2).
//  Expanded: a base with dim 0 of size 1 (ndim != 2) or without the leading dim (ndim == 2),
//    viewed through expand (stride 0).
template <class Gen>
Input make_input(const Shape& shape, Layout layout, DType dtype, Gen gen, Vec& logical) {
  Input in;
  in.dtype = dtype;
  in.shape = shape;
  const int nd = shape.size();
  if ((layout == Layout::Transposed && nd < 2) || (layout != Layout::Contiguous && nd < 1))
    layout = Layout::Contiguous;
  in.layout = layout;
  const int64_t n = numel_of(shape);
  switch (layout) {
    case Layout::Contiguous:
      logical = gen(n);
      in.base = logical;
      in.base_shape = shape;
      break;
    case Layout::Transposed: {
      logical = gen(n);
      in.base_shape = shape;
      std::swap(in.base_shape[nd - 1], in.base_shape[nd - 2]);
      in.base.assign(static_cast<size_t>(n), 0);
      for (int64_t i = 0; i < n; ++i) {
        std::vector<int64_t> idx = unravel(i, shape);
        std::swap(idx[nd - 1], idx[nd - 2]);
        in.base[static_cast<size_t>(ravel(idx, in.base_shape))] = logical[static_cast<size_t>(i)];
      }
      break;
    }
    case Layout::Strided: {
      logical = gen(n);
      in.base_shape = shape;
      in.base_shape[nd - 1] *= 2;
      in.base = gen(numel_of(in.base_shape));
      for (int64_t i = 0; i < n; ++i) {
        std::vector<int64_t> idx = unravel(i, shape);
        idx[nd - 1] *= 2;
        in.base[static_cast<size_t>(ravel(idx, in.base_shape))] = logical[static_cast<size_t>(i)];
      }
      break;
    }
    case Layout::Expanded: {
      Shape small;
      if (nd == 2) {
        small = {shape[1]};
      } else {
        small = shape;
        small[0] = 1;
      }
      in.base_shape = small;
      in.base = gen(numel_of(small));
      logical = broadcast_values(in.base, small, shape);
      break;
    }
  }
  return in;
}
Input make_input(const Shape& shape, Layout layout, DType dtype, Domain dom, Rng& r, Vec& logical);
// A contiguous int64 input (indices, targets).
Input int64_input(const Vec& v, const Shape& s);

// ---- trials and comparisons ---------------------------------------------------------------

struct Expect {
  Shape shape;
  DType dtype = kFloat32;
  Vec v;
  Vec scale;  // per-element magnitude the error is relative to (empty: |v|)
  // Relative tolerance of CUDA against CPU; negative: twice the output dtype's tolerance.
  double cuda_rtol = -1;
  bool on_host = false;  // the result lives on the CPU whatever device the inputs are on
};

using Call = std::function<Tensor(const std::vector<Tensor>&, Device)>;

struct Trial {
  std::string what;  // printed on failure
  std::vector<Input> inputs;
  Call call;  // the op through the public API, on inputs made on the device given
  Expect expect;
  bool writes_inputs = false;  // fill_ writes into its input; every other op must not
};

struct Tol {
  double rtol, atol;
};
// f32 ~1e-5 relative, f16 ~1e-3, bf16 ~1e-2, integers and bool exact.
Tol tol_for(DType t);
// "" when `got` has the expected device, dtype, shape and values; else what differs.
std::string diff(const Tensor& got, Device dev, DType dtype, const Shape& shape, const Vec& want,
                 const Vec& scale, Tol tol);

// ---- dtype rules, written out here rather than taken from the library ---------------------

// torch.promote_types.
DType promote(DType a, DType b);
// torch.result_type of two tensor operands: a 0-dim one only counts when it is of a higher
// category (bool < integer < float) than the other.
DType result_type2(DType a, bool a_zero_dim, DType b, bool b_zero_dim);
// The output dtype of `op` computing in `compute`, by the op's OutRule.
DType out_dtype(OpId op, DType compute);
// Integer inputs of IntToFloat ops compute in float32.
DType compute_dtype(OpId op, DType promoted);

// ---- the coverage table -------------------------------------------------------------------

struct Coverage;
using TrialGen = void (*)(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
using Ref1 = double (*)(double);
using Ref2 = double (*)(double, double);
using Api1 = Tensor (*)(const Tensor&);
using Api2 = Tensor (*)(const Tensor&, const Tensor&);

// One entry per op: its trial generator and, for the pointwise families, the float64 reference
// and the public function that runs it. `dt` is the input dtype (the output dtype for ops
// without tensor inputs).
struct Coverage {
  OpId op;
  TrialGen trials;
  Domain domain = Domain::Any;
  Domain domain_b = Domain::Any;
  Ref1 ref1 = nullptr;
  Ref2 ref2 = nullptr;
  Api1 api1 = nullptr;
  Api2 api2 = nullptr;
};

// op_trials_pointwise.cpp
void unary_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void gelu_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void clamp_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void binary_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void where_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void cast_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void fill_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
// op_trials_reduce.cpp
void reduce_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void mm_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void bmm_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void softmax_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void cross_entropy_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void cross_entropy_backward_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void multi_norm_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void layer_norm_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
// op_trials_conv.cpp (conv2d_backward_trials serves both backward rows)
void conv2d_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void conv2d_backward_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void max_pool2d_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
// op_trials_attention.cpp
void attention_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
// op_trials_shape.cpp
void gather_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void index_select_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void one_hot_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void scatter_add_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void cat_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void view_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void permute_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void slice_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void expand_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
// op_trials_factory.cpp
void arange_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void random_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void to_device_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
// op_trials_optim.cpp
void sgd_update_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void amp_unscale_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void all_reduce_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
// op_trials_adam_family.cpp
void adam_update_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void rmsprop_update_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void adagrad_update_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);

}  // namespace ember::test::optable
