#include "bench/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "bench/report_data.h"
#include "core/error.h"

namespace ember::bench {

using nlohmann::json;

double log_y(double value, double lo_decade, double hi_decade, double top, double bottom) {
  EMBER_CHECK(value > 0, "log_y: value must be positive, got ", value);
  EMBER_CHECK(hi_decade > lo_decade, "log_y: empty decade range ", lo_decade, "..", hi_decade);
  const double t = (std::log10(value) - lo_decade) / (hi_decade - lo_decade);
  return bottom - t * (bottom - top);
}

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab / newline are not allowed in XML 1.0 at all.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

namespace {

// Geometry in SVG user units (pixels).
constexpr double kLeft = 84;  // y tick labels and the y axis title
constexpr double kTop = 64;   // title and subtitle
constexpr double kPlotH = 360;
constexpr double kBarW = 14, kBarGap = 2, kGroupGap = 28;
constexpr double kLegendW = 230;
constexpr double kBottomSpace = 78;  // group labels and the x axis title

struct Series {
  const json* doc;
  std::string framework;  // ember | pytorch
  std::string mode;
  std::string colour;
};

// Ember in the warm family, PyTorch in blues and hatched, darker for the plainer modes.
std::string colour_of(const std::string& framework, const std::string& mode) {
  static const std::map<std::string, std::string> ember{
      {"eager", "#8c2d04"},        {"default", "#d94801"}, {"reduce-overhead", "#f16913"},
      {"max-autotune", "#fd8d3c"}, {"dynamic", "#fdae6b"}, {"cuda-graph", "#fdd0a2"}};
  static const std::map<std::string, std::string> torch{
      {"eager", "#08306b"},        {"default", "#08519c"}, {"reduce-overhead", "#2171b5"},
      {"max-autotune", "#4292c6"}, {"dynamic", "#6baed6"}, {"cuda-graph", "#9ecae1"}};
  return (framework == "pytorch" ? torch : ember).at(mode);
}

// A series for every (framework, mode) with at least one ok row, so every bar has a legend entry
// and no legend entry is empty.
std::vector<Series> series_of(const json& ember, const json* torch) {
  std::vector<Series> out;
  auto add = [&](const json& doc, const std::string& fw) {
    const auto rows = rows_of(doc);
    for (const auto& mode : mode_order()) {
      bool any = std::any_of(rows.begin(), rows.end(),
                             [&](const Row& r) { return r.mode == mode && r.ok(); });
      if (any) out.push_back({&doc, fw, mode, colour_of(fw, mode)});
    }
  };
  add(ember, "ember");
  if (torch) add(*torch, "pytorch");
  return out;
}

std::string num(double v) { return fmt_fixed(v, 2); }

// 10^k as a tick label: 0.01, 0.1, 1, 10, 100, 1k, 10k, 100k, 1M, ...
std::string decade_label(int k) {
  if (k < 0) return fmt_fixed(std::pow(10.0, k), -k);
  static const char* suffix[] = {"", "k", "M", "G", "T"};
  const int group = std::min(k / 3, 4);
  std::string out = fmt_fixed(std::pow(10.0, k - 3 * group), 0);
  out += suffix[group];
  return out;
}

std::string label_of(const Series& s) {
  std::string out = s.framework == "pytorch" ? "PyTorch " : "Ember ";
  out += s.mode;
  return out;
}

void rect(std::ostringstream& os, double x, double y, double w, double h, const std::string& fill,
          const std::string& extra = "") {
  os << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\""
     << num(h) << "\" fill=\"" << fill << "\"" << extra << "/>";
}

void text(std::ostringstream& os, double x, double y, const std::string& body,
          const std::string& attrs) {
  os << "<text x=\"" << num(x) << "\" y=\"" << num(y) << "\"" << attrs << ">" << xml_escape(body)
     << "</text>\n";
}

}  // namespace

std::string render_svg(const json& ember, const json* torch) {
  check_document(ember, "ember", "ember document");
  if (torch) check_document(*torch, "pytorch", "pytorch document");
  const auto groups = groups_of(ember, torch);
  const auto series = series_of(ember, torch);
  std::vector<std::vector<Row>> rows{rows_of(ember)};
  if (torch) rows.push_back(rows_of(*torch));
  auto rows_for = [&](const Series& s) -> const std::vector<Row>& {
    return rows[s.framework == "pytorch" ? 1 : 0];
  };

  // The decades that hold every plotted value.
  double vmin = 0, vmax = 0;
  for (const auto& s : series)
    for (const Row& r : rows_for(s))
      if (r.ok() && r.mode == s.mode) {
        vmin = vmin == 0 ? r.steps_per_s() : std::min(vmin, r.steps_per_s());
        vmax = std::max(vmax, r.steps_per_s());
      }
  int lo = 0, hi = 1;
  if (vmax > 0) {
    lo = static_cast<int>(std::floor(std::log10(vmin)));
    hi = std::max(static_cast<int>(std::ceil(std::log10(vmax))), lo + 1);
  }

  // Title and subtitle first: the chart is made wide enough for them.
  std::ostringstream title;
  title << "Training steps per second: Ember " << str_at(ember, {"framework_version"});
  if (torch) title << " vs PyTorch " << str_at(*torch, {"framework_version"});
  title << " on " << str_at(ember, {"machine", "device_name"});
  if (torch &&
      str_at(*torch, {"machine", "device_name"}) != str_at(ember, {"machine", "device_name"}))
    title << " (PyTorch on " << str_at(*torch, {"machine", "device_name"}) << ")";
  title << ", " << str_at(ember, {"created"}).substr(0, 10);
  const json cfg = ember.value("config", json::object());
  std::ostringstream sub;
  sub << "Higher is better. Log scale. Median of " << cfg.value("repeats", 0) << " samples of "
      << cfg.value("steps", 0) << " steps; TF32 " << (cfg.value("tf32", false) ? "on" : "off")
      << "; dynamic: the batch varies up to B.";
  // Generous glyph widths of a sans-serif face: 16 px bold <= 10 px, 12 px <= 7 px per character.
  const double text_w = std::max(10.0 * static_cast<double>(title.str().size()),
                                 7.0 * static_cast<double>(sub.str().size())) +
                        24;

  const size_t nbars = std::max<size_t>(series.size(), 1);
  const double group_w = static_cast<double>(nbars) * (kBarW + kBarGap) - kBarGap;
  const double plot_w = std::max({320.0, static_cast<double>(groups.size()) * (group_w + kGroupGap),
                                  text_w - kLeft - kLegendW});
  const double legend_h = 22.0 + 18.0 * static_cast<double>(series.size());
  const double width = kLeft + plot_w + kLegendW;
  const double height = kTop + std::max(kPlotH, legend_h) + kBottomSpace;
  const double top = kTop, bottom = kTop + kPlotH, left = kLeft, right = kLeft + plot_w;

  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\""
     << num(height) << "\" viewBox=\"0 0 " << num(width) << ' ' << num(height)
     << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  // PyTorch bars carry diagonal white hatching over their colour, so the two frameworks stay
  // apart in greyscale too.
  os << "<defs><pattern id=\"hatch\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\" "
        "patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"6\" fill=\"#ffffff\" "
        "fill-opacity=\"0.55\"/></pattern></defs>\n";
  rect(os, 0, 0, width, height, "#ffffff");
  os << '\n';
  text(os, left, 26, title.str(), " font-size=\"16\" font-weight=\"bold\"");
  text(os, left, 46, sub.str(), " fill=\"#444444\"");

  // Faint lines at 2 and 5 times each decade, to read values between the labelled decades.
  for (int k = lo; k < hi; ++k) {
    for (double f : {2.0, 5.0}) {
      const double y = log_y(f * std::pow(10.0, k), lo, hi, top, bottom);
      os << "<line x1=\"" << num(left) << "\" y1=\"" << num(y) << "\" x2=\"" << num(right)
         << "\" y2=\"" << num(y) << "\" stroke=\"#eeeeee\" stroke-width=\"1\"/>\n";
    }
  }
  // Decade gridlines and their labels.
  for (int k = lo; k <= hi; ++k) {
    const double y = log_y(std::pow(10.0, k), lo, hi, top, bottom);
    os << "<line x1=\"" << num(left) << "\" y1=\"" << num(y) << "\" x2=\"" << num(right)
       << "\" y2=\"" << num(y) << "\" stroke=\"#cccccc\" stroke-width=\"1\"/>\n";
    text(os, left - 6, y + 4, decade_label(k), " text-anchor=\"end\"");
  }
  os << "<line x1=\"" << num(left) << "\" y1=\"" << num(top) << "\" x2=\"" << num(left)
     << "\" y2=\"" << num(bottom) << "\" stroke=\"#333333\"/>\n";
  os << "<line x1=\"" << num(left) << "\" y1=\"" << num(bottom) << "\" x2=\"" << num(right)
     << "\" y2=\"" << num(bottom) << "\" stroke=\"#333333\"/>\n";
  const double ymid = (top + bottom) / 2;
  os << "<text x=\"22\" y=\"" << num(ymid) << "\" text-anchor=\"middle\" transform=\"rotate(-90 22 "
     << num(ymid) << ")\">steps/s (log scale)</text>\n";
  text(os, (left + right) / 2, bottom + 62, "workload, batch size", " text-anchor=\"middle\"");

  // The bars: one group per (workload, batch), one slot per series (an empty slot where the
  // series has no row there, "n/a" where its row was skipped or failed).
  // Groups are centred when the title made the plot wider than they need.
  const double slack = (plot_w - static_cast<double>(groups.size()) * (group_w + kGroupGap)) / 2;
  for (size_t g = 0; g < groups.size(); ++g) {
    const double gx = left + slack + kGroupGap / 2 + static_cast<double>(g) * (group_w + kGroupGap);
    for (size_t s = 0; s < series.size(); ++s) {
      const Series& se = series[s];
      const Row* r = find_row(rows_for(se), groups[g].workload, groups[g].batch, se.mode);
      if (!r) continue;
      const double x = gx + static_cast<double>(s) * (kBarW + kBarGap);
      std::ostringstream tip;
      tip << label_of(se) << ", " << groups[g].workload << " B=" << groups[g].batch << ": ";
      if (!r->ok()) {
        tip << r->reason();
        const double tx = x + kBarW / 2 + 3, ty = bottom - 4;
        os << "<text x=\"" << num(tx) << "\" y=\"" << num(ty)
           << "\" font-size=\"9\" fill=\"#888888\" transform=\"rotate(-90 " << num(tx) << ' '
           << num(ty) << ")\">n/a<title>" << xml_escape(tip.str()) << "</title></text>\n";
        continue;
      }
      tip << fmt_sig(r->steps_per_s(), 4) << " steps/s (" << fmt_sig(r->us(), 4) << " us/step)";
      const double y = log_y(r->steps_per_s(), lo, hi, top, bottom);
      os << "<g class=\"bar\" data-series=\"" << xml_escape(label_of(se))
         << "\" data-steps-per-s=\"" << xml_escape(fmt_sig(r->steps_per_s(), 6)) << "\"><title>"
         << xml_escape(tip.str()) << "</title>";
      rect(os, x, y, kBarW, bottom - y, se.colour);
      if (se.framework == "pytorch") rect(os, x, y, kBarW, bottom - y, "url(#hatch)");
      os << "</g>\n";
    }
    const double cx = gx + group_w / 2;
    text(os, cx, bottom + 18, groups[g].workload, " text-anchor=\"middle\"");
    std::ostringstream b;
    b << "B=" << groups[g].batch;
    text(os, cx, bottom + 34, b.str(), " text-anchor=\"middle\" fill=\"#444444\"");
  }
  if (series.empty())
    text(os, (left + right) / 2, (top + bottom) / 2, "no successful results",
         " text-anchor=\"middle\"");

  // The legend, right of the plot.
  const double lx = right + 24;
  text(os, lx, top + 4, "framework, mode", " font-weight=\"bold\"");
  for (size_t s = 0; s < series.size(); ++s) {
    const double y = top + 16 + 18 * static_cast<double>(s);
    rect(os, lx, y, 12, 12, series[s].colour);
    if (series[s].framework == "pytorch") rect(os, lx, y, 12, 12, "url(#hatch)");
    os << '\n';
    text(os, lx + 18, y + 10, label_of(series[s]), "");
  }
  os << "</svg>\n";
  return os.str();
}

}  // namespace ember::bench
