// Printing in PyTorch's format: tensor([[0.5000, 1.2500], ...], device='cuda:0', dtype=...).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/tensor.h"

namespace ember {
namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

// How every element of one tensor is formatted (one width for all, as PyTorch does).
struct Formatter {
  enum class Mode { Int, Float, IntValuedFloat, Sci, Bool } mode = Mode::Float;
  int width = 1;

  std::string raw(double v) const {
    char buf[64];
    if (mode == Mode::Bool) return v != 0 ? "True" : "False";
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (mode) {
      case Mode::Int:
        std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
        break;
      case Mode::IntValuedFloat:
        std::snprintf(buf, sizeof buf, "%.0f.", v);
        break;
      case Mode::Sci:
        std::snprintf(buf, sizeof buf, "%.4e", v);
        break;
      default:
        std::snprintf(buf, sizeof buf, "%.4f", v);
        break;
    }
    return buf;
  }
  std::string operator()(double v) const {
    std::string s = raw(v);
    if (static_cast<int>(s.size()) < width) s.insert(0, width - s.size(), ' ');
    return s;
  }
};

Formatter make_formatter(DType dtype, const std::vector<double>& shown) {
  Formatter f;
  if (dtype == kBool)
    f.mode = Formatter::Mode::Bool;
  else if (!is_floating(dtype))
    f.mode = Formatter::Mode::Int;
  else {
    std::vector<double> finite;
    for (double v : shown)
      if (std::isfinite(v)) finite.push_back(v);
    bool int_valued = true;
    double amax = 0, amin = INFINITY;
    for (double v : finite) {
      if (v != std::ceil(v)) int_valued = false;
      amax = std::max(amax, std::abs(v));
      if (v != 0) amin = std::min(amin, std::abs(v));
    }
    if (finite.empty())
      f.mode = Formatter::Mode::Float;
    else if (int_valued)
      f.mode = amax > 1e8 ? Formatter::Mode::Sci : Formatter::Mode::IntValuedFloat;
    else if (amax / amin > 1000.0 || amax > 1e8 || amin < 1e-4)
      f.mode = Formatter::Mode::Sci;
    else
      f.mode = Formatter::Mode::Float;
  }
  // Like PyTorch, only finite values set the width; nan and inf are printed unpadded.
  for (double v : shown)
    if (std::isfinite(v) || f.mode == Formatter::Mode::Bool || f.mode == Formatter::Mode::Int)
      f.width = std::max<int>(f.width, static_cast<int>(f.raw(v).size()));
  return f;
}

struct Printer {
  const std::vector<double>& values;  // contiguous, row-major
  const Shape& shape;
  bool summarize;
  Formatter fmt;

  // Element indices along dim `d` that are shown (-1 marks the "..." gap).
  std::vector<int64_t> shown(int d) const {
    std::vector<int64_t> idx;
    const int64_t n = shape[d];
    if (summarize && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      idx.push_back(-1);
      for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    }
    return idx;
  }

  void collect(int d, int64_t base, std::vector<double>& out) const {
    if (d == shape.size()) {
      out.push_back(values[base]);
      return;
    }
    int64_t stride = 1;
    for (int i = d + 1; i < shape.size(); ++i) stride *= shape[i];
    for (int64_t i : shown(d))
      if (i >= 0) collect(d + 1, base + i * stride, out);
  }

  std::string render(int d, int64_t base, int indent) const {
    if (d == shape.size()) return fmt(values[base]);
    int64_t stride = 1;
    for (int i = d + 1; i < shape.size(); ++i) stride *= shape[i];
    const int rest = shape.size() - d;  // dims of this sub-tensor
    std::string sep = ",";
    if (rest > 1) {
      sep += std::string(rest - 1, '\n') + std::string(indent + 1, ' ');
    } else {
      sep += " ";
    }
    std::string s = "[";
    bool first = true;
    for (int64_t i : shown(d)) {
      if (!first) s += sep;
      first = false;
      // The gap reads " ..." inside a row and "..." on a line of its own, as in PyTorch.
      s += i < 0 ? (rest == 1 ? " ..." : "...") : render(d + 1, base + i * stride, indent + 1);
    }
    return s + "]";
  }
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::vector<double> values = to_vector<double>();
  const bool summarize = numel() > kSummarizeThreshold;
  Printer p{values, sizes(), summarize, {}};
  std::vector<double> shown_values;
  if (numel() > 0) p.collect(0, 0, shown_values);
  p.fmt = make_formatter(dtype(), shown_values);
  std::string body;
  const std::string prefix = "tensor(";
  if (dim() == 0)
    body = p.fmt.raw(values[0]);
  else if (numel() == 0)
    body = "[]";
  else
    body = p.render(0, 0, static_cast<int>(prefix.size()));
  std::ostringstream os;
  os << prefix << body;
  if (numel() == 0 && dim() > 1) {
    os << ", size=(";
    for (int i = 0; i < dim(); ++i) os << (i ? ", " : "") << size(i);
    os << ")";
  }
  if (device().is_cuda()) os << ", device='" << device().str() << "'";
  // An empty tensor shows any dtype but float32 (its values cannot tell int from float).
  const bool default_dtype =
      dtype() == kFloat32 || (numel() > 0 && (dtype() == kInt64 || dtype() == kBool));
  if (!default_dtype) os << ", dtype=ember." << dtype_name(dtype());
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace ember
