#include "examples/support/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ember::examples {
namespace {

constexpr double kWidth = 760, kLeft = 80, kRight = 24;
constexpr double kTop = 48, kLossHeight = 260, kGap = 56, kDiffHeight = 130, kBottom = 44;
constexpr double kHeight = kTop + kLossHeight + kGap + kDiffHeight + kBottom;

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// One panel: a frame, y ticks over [lo, hi] and the x axis in steps 1..n.
void panel(std::ostringstream& os, double top, double height, double lo, double hi, size_t n,
           const std::string& y_label) {
  const double right = kWidth - kRight, plot_w = right - kLeft;
  os << "<rect x=\"" << kLeft << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\""
     << height << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4, y = top + height - height * i / 4;
    os << "<line x1=\"" << kLeft - 4 << "\" y1=\"" << y << "\" x2=\"" << right << "\" y2=\"" << y
       << "\" stroke=\"#ddd\"/>\n<text x=\"" << kLeft - 8 << "\" y=\"" << y + 4
       << "\" text-anchor=\"end\" font-size=\"11\">" << fmt(v) << "</text>\n";
  }
  for (int i = 0; i <= 4; ++i) {
    const double step = 1 + (static_cast<double>(n) - 1) * i / 4;
    const double x = kLeft + plot_w * i / 4;
    os << "<text x=\"" << x << "\" y=\"" << top + height + 16
       << "\" text-anchor=\"middle\" font-size=\"11\">" << fmt(std::round(step)) << "</text>\n";
  }
  os << "<text x=\"16\" y=\"" << top + height / 2
     << "\" font-size=\"12\" transform=\"rotate(-90 16 " << top + height / 2
     << ")\" text-anchor=\"middle\">" << y_label << "</text>\n";
}

void curve(std::ostringstream& os, const std::vector<double>& v, double top, double height,
           double lo, double hi, const char* series, const char* style) {
  const double plot_w = kWidth - kRight - kLeft;
  const double span = hi > lo ? hi - lo : 1;
  os << "<polyline data-series=\"" << series << "\" fill=\"none\" " << style << " points=\"";
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = kLeft + (v.size() > 1 ? plot_w * i / (v.size() - 1) : plot_w / 2);
    const double y = top + height - height * (v[i] - lo) / span;
    os << (i ? " " : "") << fmt(x) << "," << fmt(y);
  }
  os << "\"/>\n";
}

}  // namespace

void write_loss_svg(const std::string& path, const LossCurves& c) {
  const bool both = !c.eager.empty() && !c.compiled.empty();
  EMBER_CHECK(!c.eager.empty() || !c.compiled.empty(), "write_loss_svg: no losses to draw");
  EMBER_CHECK(!both || c.eager.size() == c.compiled.size(), "write_loss_svg: ", c.eager.size(),
              " eager losses against ", c.compiled.size(), " compiled ones");
  double lo = INFINITY, hi = -INFINITY;
  for (const std::vector<double>* s : {&c.eager, &c.compiled})
    for (double v : *s) {
      EMBER_CHECK(std::isfinite(v), "write_loss_svg: a loss of ", v, " cannot be drawn");
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  const size_t n = std::max(c.eager.size(), c.compiled.size());
  const double pad = hi > lo ? (hi - lo) * 0.05 : std::max(1e-3, std::fabs(hi) * 0.05);
  lo -= pad;
  hi += pad;

  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
     << "width=\"" << kWidth << "\" height=\"" << kHeight << "\" viewBox=\"0 0 " << kWidth << " "
     << kHeight << "\" font-family=\"sans-serif\">\n<title>" << escape(c.title) << "</title>\n"
     << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"" << kLeft
     << "\" y=\"26\" "
     << "font-size=\"15\">" << escape(c.title) << "</text>\n";
  panel(os, kTop, kLossHeight, lo, hi, n, "loss");
  // Eager wide and light, compiled narrow and dark on top: where they agree both stay visible.
  if (!c.eager.empty())
    curve(os, c.eager, kTop, kLossHeight, lo, hi, "eager", "stroke=\"#9ecae1\" stroke-width=\"5\"");
  if (!c.compiled.empty())
    curve(os, c.compiled, kTop, kLossHeight, lo, hi, "compiled",
          "stroke=\"#d94801\" stroke-width=\"1.5\"");
  const double legend_y = kTop + 16;
  os << "<rect x=\"" << kWidth - kRight - 150 << "\" y=\"" << legend_y - 10
     << "\" width=\"20\" height=\"5\" fill=\"#9ecae1\"/><text x=\"" << kWidth - kRight - 124
     << "\" y=\"" << legend_y - 4 << "\" font-size=\"12\">eager</text>\n<rect x=\""
     << kWidth - kRight - 150 << "\" y=\"" << legend_y + 6 << "\" width=\"20\" height=\"2\" "
     << "fill=\"#d94801\"/><text x=\"" << kWidth - kRight - 124 << "\" y=\"" << legend_y + 10
     << "\" font-size=\"12\">compiled</text>\n";

  const double diff_top = kTop + kLossHeight + kGap;
  if (both) {
    std::vector<double> rel(n);
    double rmax = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = std::fabs(c.compiled[i] - c.eager[i]);
      rel[i] = d == 0 ? 0 : d / std::max(std::fabs(c.eager[i]), 1e-30);
      rmax = std::max(rmax, rel[i]);
    }
    panel(os, diff_top, kDiffHeight, 0, rmax > 0 ? rmax : 1, n, "|c - e| / |e|");
    curve(os, rel, diff_top, kDiffHeight, 0, rmax > 0 ? rmax : 1, "relative_difference",
          "stroke=\"#238b45\" stroke-width=\"1.5\"");
    os << "<text x=\"" << kLeft + 8 << "\" y=\"" << diff_top + 16 << "\" font-size=\"12\">"
       << (rmax == 0 ? std::string("bit-equal: every step's losses agree exactly")
                     : "largest relative difference " + fmt(rmax))
       << "</text>\n";
  } else {
    os << "<text x=\"" << kLeft << "\" y=\"" << diff_top + 16 << "\" font-size=\"12\">"
       << "one mode run: no difference to draw</text>\n";
  }
  os << "<text x=\"" << kLeft + (kWidth - kRight - kLeft) / 2 << "\" y=\"" << kHeight - 10
     << "\" text-anchor=\"middle\" font-size=\"12\">step</text>\n</svg>\n";

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << os.str();
  f.close();
  EMBER_CHECK(f.good(), "write_loss_svg: cannot write ", path);
}

}  // namespace ember::examples
