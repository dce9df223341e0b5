#pragma once
// One test row per unary pointwise op written as an expression in core/ops.yaml (and per
// attribute setting worth its own row): the public call, a float64 reference and its
// derivative in plain std:: math, where to draw inputs, and the kinks gradcheck stays away
// from. The op-table sweep (tests/core/test_op_table.cpp) checks the op and its generated
// <op>_backward row against them; the gradcheck sweep (tests/autograd/test_gradcheck_ops.cpp)
// derives its finite-difference checks from the same rows.
#include <string>
#include <vector>

#include "core/op_table_harness.h"

namespace ember::test::optable {

struct ActivationRow {
  OpId op;
  std::string label;       // "leaky_relu(0.2)"
  Api1 api;                // through the public API (or nn::functional)
  Ref1 ref;                // float64, PyTorch's semantics
  Ref1 dref;               // d ref / dx
  Domain domain;           // the sweep's inputs
  double lo = -4, hi = 4;  // gradcheck's inputs, away from `kinks`
  std::vector<double> kinks = {};
};

const std::vector<ActivationRow>& activation_rows();
// The rows of `op`, or of the op whose generated backward row `op` is; empty if none.
std::vector<const ActivationRow*> activation_rows_of(OpId op, bool* is_backward = nullptr);

// Trial generators over those rows: the op itself, and its <op>_backward row (reached through
// autograd: dx of api(x) for an incoming gradient g).
void activation_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);
void activation_backward_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out);

}  // namespace ember::test::optable
