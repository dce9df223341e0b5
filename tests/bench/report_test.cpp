// Tests of the benchmark's report library (bench/report.h, bench/svg_chart.h). The documents are
// written here by hand with round numbers, and every expected figure below is worked out by hand
// from them (PyTorch us / Ember us, which row is fastest, where a bar ends on the log axis).
// The hidden [write-files] case is run by tests/bench/check_report_files.py, which validates the
// documents against bench/schema/bench.schema.json and parses the charts as XML.
#include <stdlib.h>  // mkdtemp
#include <catch2/catch.hpp>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench/report.h"

using nlohmann::json;
namespace eb = ember::bench;
namespace fs = std::filesystem;

namespace {

// An ok row whose figures follow from us/step; the table test uses a row written out in full.
json ok_row(const std::string& workload, int64_t batch, const std::string& mode, double us) {
  return {{"workload", workload},
          {"batch", batch},
          {"mode", mode},
          {"status", "ok"},
          {"us_per_step", us},
          {"steps_per_s", 1e6 / us},
          {"us_per_step_min", us * 0.9},
          {"us_per_step_max", us * 1.2},
          {"first_step_ms", {{"cold", 100.0}, {"warm", 50.0}}},
          {"peak_memory_bytes", 1048576},
          {"kernels_per_step", 20},
          {"loss", 2.0},
          {"loss_steps", 100},
          {"loss_rel_diff_vs_eager", 0.0},
          {"recompiles", 0},
          {"floor", {{"flops", 1e8}, {"bytes", 1e7}, {"us", 2.0}, {"share", 2.0 / us}}}};
}

json failed_row(const std::string& workload, int64_t batch, const std::string& mode,
                const std::string& status, const std::string& why) {
  return {
      {"workload", workload}, {"batch", batch}, {"mode", mode}, {"status", status}, {"error", why}};
}

json document(const std::string& framework, const std::string& version) {
  json doc = json::parse(R"({
    "schema_version": 1, "framework": "ember", "framework_version": "0",
    "created": "2026-11-29T21:50:00Z", "command": "hand-written for the test",
    "machine": {"hostname": "h", "os": "Linux", "cpu": "x86", "device": "cuda:0",
                "device_name": "NVIDIA H200", "driver_version": "570.86", "cuda_version": "12.8",
                "compiler": "gcc 12", "peak": {"flops_per_s": 5.07e13, "bytes_per_s": 4.152e12,
                "how": "best of 5 GEMMs 4096^3 and 5 copies of 256 MiB"}},
    "config": {"warmup": 50, "steps": 100, "repeats": 11, "seed": 0, "tf32": false,
               "loss_steps": 100},
    "timing": "host wall clock around each step",
    "workloads": {
      "mlp": {"layers": [784, 512, 10], "activation": "relu", "loss": "cross_entropy",
              "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0}},
      "deep_mlp": {"layers": [784, 1024, 1024, 1024, 1024, 10], "activation": "gelu",
                   "loss": "cross_entropy",
                   "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9}}},
    "results": []})");
  doc["framework"] = framework;
  doc["framework_version"] = version;
  return doc;
}

// Ember: mlp at 64 (every mode; dynamic is the fastest row but must never be "best"), mlp at 1024
// (default failed) and deep_mlp at 64 (eager faster than its one compiled mode). Rows
// deliberately out of order.
json ember_doc() {
  json doc = document("ember", "0.1.0");
  auto& r = doc["results"];
  r.push_back(ok_row("mlp", 1024, "eager", 400));
  r.push_back(failed_row("mlp", 1024, "default", "error", "boom <&>"));
  r.push_back(ok_row("mlp", 1024, "reduce-overhead", 300));
  r.push_back(ok_row("mlp", 64, "eager", 250));
  r.push_back(ok_row("mlp", 64, "default", 200));
  // Written out in full: the table test checks each of its figures.
  r.push_back(
      json::parse(R"({"workload": "mlp", "batch": 64, "mode": "reduce-overhead", "status": "ok",
    "us_per_step": 110.0, "steps_per_s": 9090.909,
    "us_per_step_min": 105.0, "us_per_step_max": 130.0,
    "first_step_ms": {"cold": 1234.4, "warm": 87.25}, "peak_memory_bytes": 3145728,
    "kernels_per_step": 28, "loss": 2.30258, "loss_steps": 100, "loss_rel_diff_vs_eager": 3.1e-7,
    "recompiles": 0, "floor": {"flops": 1.05e8, "bytes": 9.0e6, "us": 2.2, "share": 0.02}})"));
  r.push_back(ok_row("mlp", 64, "max-autotune", 125));
  json dyn = ok_row("mlp", 64, "dynamic", 80);
  dyn["batches"] = {64, 48, 32, 49};
  r.push_back(dyn);
  r.push_back(ok_row("deep_mlp", 64, "eager", 800));
  r.push_back(ok_row("deep_mlp", 64, "default", 1000));
  return doc;
}

// PyTorch: mlp at 64 (no dynamic), at 1024 (eager and cuda-graph), at 8192 (eager only, Ember
// has no such batch) and deep_mlp at 64 (cuda-graph only).
json torch_doc() {
  json doc = document("pytorch", "2.11.0");
  doc["machine"]["cuda_version"] = "12.6";
  doc["machine"]["compiler"] = "Python 3.11";
  auto& r = doc["results"];
  r.push_back(ok_row("mlp", 64, "eager", 1187));
  r.push_back(ok_row("mlp", 64, "default", 1568));
  r.push_back(ok_row("mlp", 64, "reduce-overhead", 1492));
  r.push_back(ok_row("mlp", 64, "max-autotune", 1349));
  r.push_back(ok_row("mlp", 64, "cuda-graph", 175));
  r.push_back(ok_row("mlp", 1024, "eager", 600));
  r.push_back(ok_row("mlp", 1024, "cuda-graph", 350));
  r.push_back(ok_row("mlp", 8192, "eager", 5000));
  r.push_back(ok_row("deep_mlp", 64, "cuda-graph", 920));
  return doc;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

// Columns are separated by two or more spaces; a cell has at most single spaces inside.
std::vector<std::string> cells_of(const std::string& line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    size_t j = line.find("  ", i);
    if (j == std::string::npos) j = line.size();
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
    while (i < line.size() && line[i] == ' ') ++i;
  }
  return out;
}

// The cells of the one line whose first three cells are (workload, batch, label).
std::vector<std::string> row(const std::string& text, const std::string& workload, int batch,
                             const std::string& label) {
  std::vector<std::string> found;
  int count = 0;
  for (const auto& line : lines_of(text)) {
    auto c = cells_of(line);
    if (c.size() >= 3 && c[0] == workload && c[1] == std::to_string(batch) && c[2] == label) {
      found = c;
      ++count;
    }
  }
  INFO(text);
  REQUIRE(count == 1);
  return found;
}

// Markdown table cells of the line starting "| workload | batch | label |".
std::vector<std::string> md_row(const std::string& text, const std::string& workload, int batch,
                                const std::string& label) {
  std::string prefix = "| " + workload + " | " + std::to_string(batch) + " | " + label + " |";
  std::vector<std::string> found;
  int count = 0;
  for (const auto& line : lines_of(text)) {
    if (line.rfind(prefix, 0) != 0) continue;
    ++count;
    found.clear();
    std::string body = line.substr(2, line.size() - 4);  // drop "| " and " |"
    size_t i = 0;
    for (size_t j; (j = body.find(" | ", i)) != std::string::npos; i = j + 3)
      found.push_back(body.substr(i, j - i));
    found.push_back(body.substr(i));
  }
  INFO(text);
  REQUIRE(count == 1);
  return found;
}

// A small well-formedness check written for these tests: every tag closes in order, the one root
// is <svg>, attribute values are quoted, and character data has no raw '<' or bare '&'.
void require_well_formed(const std::string& xml) {
  std::vector<std::string> stack;
  int roots = 0;
  size_t i = 0;
  if (xml.rfind("<?xml", 0) == 0) i = xml.find("?>") + 2;
  auto check_text = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) {
      if (xml[k] != '&') continue;
      const size_t semi = xml.find(';', k);
      REQUIRE(semi != std::string::npos);
      const std::string ent = xml.substr(k, semi - k + 1);
      INFO(ent);
      REQUIRE(
          (ent == "&amp;" || ent == "&lt;" || ent == "&gt;" || ent == "&quot;" || ent == "&apos;"));
    }
  };
  while (true) {
    const size_t lt = xml.find('<', i);
    check_text(i, lt == std::string::npos ? xml.size() : lt);
    if (lt == std::string::npos) break;
    const size_t gt = xml.find('>', lt);
    REQUIRE(gt != std::string::npos);
    const std::string tag = xml.substr(lt + 1, gt - lt - 1);
    INFO(tag);
    REQUIRE(tag.find('<') == std::string::npos);
    if (tag[0] == '/') {
      REQUIRE(!stack.empty());
      REQUIRE(stack.back() == tag.substr(1));
      stack.pop_back();
    } else {
      const std::string name = tag.substr(0, tag.find_first_of(" /"));
      if (stack.empty()) {
        ++roots;
        REQUIRE(name == "svg");
      }
      // Attributes: name="value" pairs, values free of '<' and '"'.
      static const std::regex attrs(R"(^[A-Za-z][\w:-]*(\s+[\w:-]+="[^"<]*")*\s*/?$)");
      REQUIRE(std::regex_match(tag, attrs));
      check_text(lt + 1, gt);
      if (tag.back() != '/') stack.push_back(name);
    }
    i = gt + 1;
  }
  REQUIRE(stack.empty());
  REQUIRE(roots == 1);
}

struct Bar {
  std::string series, title, fill;
  double steps_per_s = 0, y = 0, height = 0;
  bool hatched = false;
};

std::vector<Bar> bars_of(const std::string& svg) {
  static const std::regex re(
      R"re(<g class="bar" data-series="([^"]*)" data-steps-per-s="([^"]*)"><title>([^<]*)</title>)re"
      R"re(<rect x="[^"]*" y="([^"]*)" width="[^"]*" height="([^"]*)" fill="([^"]*)"/>(.*?)</g>)re");
  std::vector<Bar> out;
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it) {
    const auto& m = *it;
    out.push_back({m[1], m[3], m[6], std::stod(m[2]), std::stod(m[4]), std::stod(m[5]),
                   m[7].str().find("url(#hatch)") != std::string::npos});
  }
  return out;
}

// The decade gridlines: label -> y.
std::vector<std::pair<std::string, double>> gridlines_of(const std::string& svg) {
  static const std::regex re(
      R"re(<line x1="[^"]*" y1="([^"]*)" x2="[^"]*" y2="[^"]*" stroke="#cccccc"[^>]*/>\n)re"
      R"re(<text[^>]*>([^<]*)</text>)re");
  std::vector<std::pair<std::string, double>> out;
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it)
    out.emplace_back((*it)[2], std::stod((*it)[1]));
  return out;
}

std::string temp_dir() {
  std::string tmpl = (fs::temp_directory_path() / "ember_report_test_XXXXXX").string();
  REQUIRE(mkdtemp(tmpl.data()) != nullptr);
  return tmpl;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("report table: one row per result, figures formatted, reasons for failed rows",
          "[report]") {
  const std::string t = eb::format_table(ember_doc());
  // The row written out in full, column by column.
  auto ro = row(t, "mlp", 64, "reduce-overhead");
  REQUIRE(ro == std::vector<std::string>{"mlp", "64", "reduce-overhead", "110.0", "9091",
                                         "105.0..130.0", "1234", "87.25", "3.0", "28", "2.3026",
                                         "3.1e-07", "0", "2.20", "2.00"});
  // A failed row gives its reason instead of figures.
  auto failed = row(t, "mlp", 1024, "default");
  REQUIRE(failed.size() == 4);
  REQUIRE(failed[3] == "error: boom <&>");
  // Rows come in report order: mlp by batch then mode, then deep_mlp, whatever the file order.
  std::vector<std::string> order;
  for (const auto& line : lines_of(t)) {
    auto c = cells_of(line);
    if (c.size() >= 3 && (c[0] == "mlp" || c[0] == "deep_mlp"))
      order.push_back(c[0] + " " + c[1] + " " + c[2]);
  }
  REQUIRE(order == std::vector<std::string>{"mlp 64 eager", "mlp 64 default",
                                            "mlp 64 reduce-overhead", "mlp 64 max-autotune",
                                            "mlp 64 dynamic", "mlp 1024 eager", "mlp 1024 default",
                                            "mlp 1024 reduce-overhead", "deep_mlp 64 eager",
                                            "deep_mlp 64 default"});
  // Aligned: the right edge of the us/step column is the same on the header and every full row.
  const auto lines = lines_of(t);
  auto head = std::find_if(lines.begin(), lines.end(),
                           [](const std::string& l) { return l.rfind("workload", 0) == 0; });
  REQUIRE(head != lines.end());
  const size_t edge = head->find("us/step") + std::string("us/step").size();
  int full_rows = 0;
  for (const auto& line : lines) {
    auto c = cells_of(line);
    if (c.size() != 15 || c[0] == "workload") continue;
    ++full_rows;
    INFO(line);
    REQUIRE(line.size() >= edge);
    REQUIRE(line.compare(edge - c[3].size(), c[3].size(), c[3]) == 0);
  }
  REQUIRE(full_rows == 9);
  // The header names the device and the protocol.
  REQUIRE(t.find("NVIDIA H200 (cuda:0), driver 570.86, CUDA 12.8") != std::string::npos);
  REQUIRE(t.find("TF32 off") != std::string::npos);
}

TEST_CASE("report comparison: ratios, the cuda-graph and best-vs-best lines, missing counterparts",
          "[report]") {
  const std::string c = eb::format_comparison(ember_doc(), torch_doc());
  // speedup = PyTorch us / Ember us, worked out by hand.
  REQUIRE(row(c, "mlp", 64, "eager") == std::vector<std::string>{"mlp", "64", "eager", "250.0",
                                                                 "1187",
                                                                 "4.75x"});  // 1187/250 = 4.748
  REQUIRE(row(c, "mlp", 64, "default")[5] == "7.84x");                       // 1568/200
  REQUIRE(row(c, "mlp", 64, "reduce-overhead")[5] == "13.56x");              // 1492/110 = 13.5636
  REQUIRE(row(c, "mlp", 64, "max-autotune")[5] == "10.79x");                 // 1349/125 = 10.792
  // PyTorch ran no dynamic row: its side and the ratio are "-".
  REQUIRE(row(c, "mlp", 64, "dynamic") ==
          std::vector<std::string>{"mlp", "64", "dynamic", "80.00", "-", "-"});
  // cuda-graph meets Ember's fastest compiled mode: reduce-overhead (110), not dynamic (80).
  REQUIRE(
      row(c, "mlp", 64, "cuda-graph") ==
      std::vector<std::string>{"mlp", "64", "cuda-graph", "110.0", "175.0", "1.59x",
                               "Ember reduce-overhead vs PyTorch cuda-graph"});  // 175/110 = 1.5909
  REQUIRE(row(c, "mlp", 64, "best vs best") ==
          std::vector<std::string>{"mlp", "64", "best vs best", "110.0", "175.0", "1.59x",
                                   "Ember reduce-overhead vs PyTorch cuda-graph"});
  // At 1024 Ember's default failed: it shows its status and no ratio; its best compiled mode is
  // then reduce-overhead (300), which also beats its eager (400) for best vs best.
  REQUIRE(row(c, "mlp", 1024, "eager")[5] == "1.50x");  // 600/400
  REQUIRE(row(c, "mlp", 1024, "default") ==
          std::vector<std::string>{"mlp", "1024", "default", "error", "-", "-"});
  REQUIRE(row(c, "mlp", 1024, "reduce-overhead") ==
          std::vector<std::string>{"mlp", "1024", "reduce-overhead", "300.0", "-", "-"});
  REQUIRE(row(c, "mlp", 1024, "cuda-graph")[5] == "1.17x");  // 350/300 = 1.1667
  REQUIRE(row(c, "mlp", 1024, "best vs best") ==
          std::vector<std::string>{"mlp", "1024", "best vs best", "300.0", "350.0", "1.17x",
                                   "Ember reduce-overhead vs PyTorch cuda-graph"});
  // Groups only one side ran.
  REQUIRE(row(c, "mlp", 8192, "eager") ==
          std::vector<std::string>{"mlp", "8192", "eager", "-", "5000", "-"});
  REQUIRE(row(c, "mlp", 8192, "best vs best") ==
          std::vector<std::string>{"mlp", "8192", "best vs best", "-", "5000", "-",
                                   "Ember - vs PyTorch eager"});
  REQUIRE(row(c, "deep_mlp", 64, "eager") ==
          std::vector<std::string>{"deep_mlp", "64", "eager", "800.0", "-", "-"});
  // deep_mlp: Ember's eager (800) beats its only compiled mode (default, 1000). cuda-graph still
  // meets the compiled mode; best vs best takes eager.
  REQUIRE(row(c, "deep_mlp", 64, "cuda-graph") ==
          std::vector<std::string>{"deep_mlp", "64", "cuda-graph", "1000", "920.0", "0.92x",
                                   "Ember default vs PyTorch cuda-graph"});  // 920/1000
  REQUIRE(row(c, "deep_mlp", 64, "best vs best") ==
          std::vector<std::string>{"deep_mlp", "64", "best vs best", "800.0", "920.0", "1.15x",
                                   "Ember eager vs PyTorch cuda-graph"});  // 920/800
  // Same device and TF32 setting: no warning.
  REQUIRE(c.find("warning") == std::string::npos);
}

TEST_CASE("report comparison: warns when the runs differ in device or TF32", "[report]") {
  json t = torch_doc();
  t["machine"]["device_name"] = "NVIDIA A100";
  const std::string c = eb::format_comparison(ember_doc(), t);
  REQUIRE(
      c.find(
          "warning: the runs used different devices (Ember: NVIDIA H200, PyTorch: NVIDIA A100)") !=
      std::string::npos);
  REQUIRE(c.find("TF32 differs") == std::string::npos);
  t = torch_doc();
  t["config"]["tf32"] = true;
  const std::string c2 = eb::format_comparison(ember_doc(), t);
  REQUIRE(c2.find("warning: TF32 differs (Ember off, PyTorch on)") != std::string::npos);
  REQUIRE(c2.find("different devices") == std::string::npos);
}

TEST_CASE("report markdown: header line and the comparison table", "[report]") {
  json e = ember_doc(), t = torch_doc();
  const std::string md = eb::format_markdown(e, &t);
  const std::string first = lines_of(md).at(0);
  INFO(first);
  for (const char* part :
       {"2026-11-29 21:50 UTC", "NVIDIA H200", "driver 570.86",
        "CUDA 12.8 for Ember, 12.6 for PyTorch", "PyTorch 2.11.0", "Ember 0.1.0", "TF32 off"})
    REQUIRE(first.find(part) != std::string::npos);
  REQUIRE(md_row(md, "mlp", 64, "eager") ==
          std::vector<std::string>{"mlp", "64", "eager", "250.0", "1187", "4.75x"});
  REQUIRE(md_row(md, "mlp", 64, "cuda-graph") ==
          std::vector<std::string>{"mlp", "64", "cuda-graph", "110.0 (reduce-overhead)",
                                   "175.0 (cuda-graph)", "1.59x"});
  REQUIRE(md_row(md, "mlp", 64, "**best vs best**") ==
          std::vector<std::string>{"mlp", "64", "**best vs best**", "110.0 (reduce-overhead)",
                                   "175.0 (cuda-graph)", "**1.59x**"});
  REQUIRE(md_row(md, "mlp", 8192, "eager") ==
          std::vector<std::string>{"mlp", "8192", "eager", "-", "5000", "-"});
  // The workload's underscore is escaped for Markdown; every table line has the header's 7 pipes.
  REQUIRE(md_row(md, "deep\\_mlp", 64, "eager")[3] == "800.0");
  for (const auto& line : lines_of(md)) {
    if (line.empty() || line[0] != '|') continue;
    INFO(line);
    REQUIRE(std::count(line.begin(), line.end(), '|') == 7);
  }
  // Without PyTorch: Ember's own figures, no PyTorch column.
  const std::string solo = eb::format_markdown(e, nullptr);
  REQUIRE(solo.find("PyTorch") == std::string::npos);
  REQUIRE(md_row(solo, "mlp", 64, "reduce-overhead") ==
          std::vector<std::string>{"mlp", "64", "reduce-overhead", "110.0", "9091", "1234 / 87.25",
                                   "28", "2.00 %"});
  REQUIRE(md_row(solo, "mlp", 1024, "default")[3] == "error: boom <&>");
}

TEST_CASE("log_y: decades are evenly spaced, the bottom edge is lo, the top edge hi",
          "[report][svg]") {
  // A 3-decade axis from y=424 (10^2) up to y=64 (10^5): 120 px per decade.
  CHECK(eb::log_y(100, 2, 5, 64, 424) == Approx(424));
  CHECK(eb::log_y(1e5, 2, 5, 64, 424) == Approx(64));
  CHECK(eb::log_y(1000, 2, 5, 64, 424) == Approx(304));
  CHECK(eb::log_y(4000, 2, 5, 64, 424) == Approx(231.75).margin(0.01));  // 424 - 120 * 1.60206
  REQUIRE_THROWS(eb::log_y(0, 2, 5, 64, 424));
  REQUIRE_THROWS(eb::log_y(-1, 2, 5, 64, 424));
  REQUIRE_THROWS(eb::log_y(10, 3, 3, 64, 424));
}

TEST_CASE("svg chart: bars on a log axis, frameworks told apart, well-formed and deterministic",
          "[report][svg]") {
  json e = ember_doc(), t = torch_doc();
  const std::string svg = eb::render_svg(e, &t);
  require_well_formed(svg);
  REQUIRE(svg == eb::render_svg(e, &t));

  // One bar per ok row of either side: Ember 5 + 2 + 2, PyTorch 5 + 2 + 1 + 1.
  const auto bars = bars_of(svg);
  REQUIRE(bars.size() == 18);
  // Plotted values run from 200 steps/s (PyTorch mlp 8192 eager, 5000 us) to 12500 (Ember
  // dynamic, 80 us): the axis spans the decades 10^2 .. 10^5.
  const auto grid = gridlines_of(svg);
  REQUIRE(grid.size() == 4);
  REQUIRE(grid[0].first == "100");
  REQUIRE(grid[1].first == "1k");
  REQUIRE(grid[2].first == "10k");
  REQUIRE(grid[3].first == "100k");
  const double y_lo = grid[0].second, y_hi = grid[3].second;
  REQUIRE(y_lo > y_hi);
  REQUIRE(grid[1].second - grid[2].second == Approx((y_lo - y_hi) / 3));  // equal decades
  // Every bar stands on the 10^2 line; Ember eager at mlp 64 (4000 steps/s) ends log10(4000)-2
  // decades up.
  for (const auto& b : bars) REQUIRE(b.y + b.height == Approx(y_lo).margin(0.011));
  auto it = std::find_if(bars.begin(), bars.end(), [](const Bar& b) {
    return b.series == "Ember eager" && b.title.find("mlp B=64:") != std::string::npos;
  });
  REQUIRE(it != bars.end());
  REQUIRE(it->steps_per_s == Approx(4000));
  REQUIRE(it->y == Approx(y_lo - (y_lo - y_hi) * (std::log10(4000.0) - 2) / 3).margin(0.011));
  // Heights grow with steps/s.
  auto sorted = bars;
  std::sort(sorted.begin(), sorted.end(),
            [](const Bar& a, const Bar& b) { return a.steps_per_s < b.steps_per_s; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i].steps_per_s > sorted[i - 1].steps_per_s)
      REQUIRE(sorted[i].height > sorted[i - 1].height);
  }
  // PyTorch bars are hatched, Ember bars are not, and no colour is shared between the two.
  for (const auto& b : bars) {
    const bool torch = b.series.rfind("PyTorch ", 0) == 0;
    REQUIRE(b.hatched == torch);
    for (const auto& o : bars)
      if ((o.series.rfind("PyTorch ", 0) == 0) != torch) REQUIRE(o.fill != b.fill);
  }
  // A legend entry per series; the failed row is marked, its reason escaped.
  for (const char* s :
       {">Ember eager<", ">Ember dynamic<", ">PyTorch cuda-graph<", ">PyTorch max-autotune<"})
    REQUIRE(svg.find(s) != std::string::npos);
  REQUIRE(svg.find(">PyTorch dynamic<") == std::string::npos);
  REQUIRE(svg.find("error: boom &lt;&amp;&gt;") != std::string::npos);
  // Title: device and date.
  REQUIRE(svg.find("on NVIDIA H200, 2026-11-29") != std::string::npos);
  // Ember alone: its 9 bars only.
  const std::string solo = eb::render_svg(e, nullptr);
  require_well_formed(solo);
  REQUIRE(bars_of(solo).size() == 9);
}

TEST_CASE("svg chart: text from the documents is escaped", "[report][svg]") {
  CHECK(eb::xml_escape(R"(a<b & "c" 'd'>)") == "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  json e = ember_doc();
  e["machine"]["device_name"] = R"(GPU <"x"> & 'y')";
  e["results"][3]["workload"] = "mlp<1>";  // the eager row of mlp 64 becomes its own workload
  const std::string svg = eb::render_svg(e, nullptr);
  require_well_formed(svg);
  REQUIRE(svg.find("GPU &lt;&quot;x&quot;&gt; &amp; &apos;y&apos;") != std::string::npos);
  REQUIRE(svg.find(">mlp&lt;1&gt;<") != std::string::npos);
  REQUIRE(svg.find("<\"x\">") == std::string::npos);
}

TEST_CASE("report: bad documents raise", "[report]") {
  json e = ember_doc(), t = torch_doc();
  REQUIRE_NOTHROW(eb::format_comparison(e, t));
  // The two swapped: each has the other framework.
  REQUIRE_THROWS_WITH(eb::format_comparison(t, e),
                      Catch::Contains("framework 'pytorch', expected 'ember'"));
  json v2 = e;
  v2["schema_version"] = 2;
  REQUIRE_THROWS_WITH(eb::format_table(v2), Catch::Contains("schema_version 2"));
  json nov = e;
  nov.erase("schema_version");
  REQUIRE_THROWS_WITH(eb::format_table(nov), Catch::Contains("no schema_version"));
  json fw = e;
  fw["framework"] = "jax";
  REQUIRE_THROWS_WITH(eb::format_table(fw), Catch::Contains("framework 'jax'"));
  json dup = e;
  dup["results"].push_back(ok_row("mlp", 64, "eager", 1));
  REQUIRE_THROWS_WITH(eb::format_table(dup), Catch::Contains("(mlp, 64, eager) appears twice"));
  json no_time = e;
  no_time["results"][0].erase("us_per_step");
  REQUIRE_THROWS_WITH(eb::format_table(no_time), Catch::Contains("results[0] is ok but lacks"));
  json bad_mode = e;
  bad_mode["results"][0]["mode"] = "turbo";
  REQUIRE_THROWS_WITH(eb::render_svg(bad_mode, nullptr), Catch::Contains("unknown mode \"turbo\""));
  json graph = e;
  graph["results"].push_back(ok_row("mlp", 64, "cuda-graph", 100));
  REQUIRE_THROWS_WITH(eb::format_markdown(graph, nullptr), Catch::Contains("not an Ember mode"));
  REQUIRE_THROWS(eb::format_table(json::array()));
  // Errors are std::runtime_errors, which the bench's main reports.
  REQUIRE_THROWS_AS(eb::format_table(v2), std::runtime_error);
}

TEST_CASE("report command: prints the tables, writes the chart and the Markdown, bad files raise",
          "[report]") {
  const std::string dir = temp_dir();
  const std::string ep = dir + "/ember.json", tp = dir + "/torch.json";
  write(ep, ember_doc().dump(1));
  write(tp, torch_doc().dump(1));
  auto run = [](std::vector<std::string> args, std::ostream& out) {
    CLI::App app{"test"};
    eb::add_report_command(app, out);
    args.insert(args.begin(), "ember_bench");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
  };
  std::ostringstream out;
  run({"report", ep, "--torch", tp, "--svg", dir + "/c.svg", "--markdown", dir + "/t.md"}, out);
  const std::string text = out.str();
  REQUIRE(text.find("Ember 0.1.0, 2026-11-29T21:50:00Z") != std::string::npos);
  REQUIRE(text.find("PyTorch 2.11.0, 2026-11-29T21:50:00Z") != std::string::npos);
  REQUIRE(row(text, "mlp", 64, "best vs best")[5] == "1.59x");
  json e = ember_doc(), t = torch_doc();
  REQUIRE(read(dir + "/c.svg") == eb::render_svg(e, &t));
  REQUIRE(read(dir + "/t.md") == eb::format_markdown(e, &t));

  // Ember only: the table, no comparison.
  std::ostringstream solo;
  run({"report", ep}, solo);
  REQUIRE(solo.str() == eb::format_table(e));

  std::ostringstream sink;
  REQUIRE_THROWS_WITH(run({"report", dir + "/missing.json"}, sink),
                      Catch::Contains("cannot open " + dir + "/missing.json"));
  write(dir + "/bad.json", "{\"schema_version\": 1,");
  REQUIRE_THROWS_WITH(run({"report", dir + "/bad.json"}, sink),
                      Catch::Contains("bad.json is not valid JSON"));
  // The files given the wrong way round.
  REQUIRE_THROWS_WITH(run({"report", tp, "--torch", ep}, sink),
                      Catch::Contains("expected 'ember'"));
  REQUIRE_THROWS_AS(run({"report"}, sink), CLI::RequiredError);
  fs::remove_all(dir);
}

// Hidden: writes the hand-made documents and charts for tests/bench/check_report_files.py.
TEST_CASE("report: write the test documents and charts", "[.][write-files]") {
  const char* dir = std::getenv("EMBER_REPORT_TEST_OUT");
  REQUIRE(dir != nullptr);
  fs::create_directories(dir);
  const std::string d = dir;
  json e = ember_doc(), t = torch_doc();
  write(d + "/ember.json", e.dump(1));
  write(d + "/torch.json", t.dump(1));
  write(d + "/chart.svg", eb::render_svg(e, &t));
  write(d + "/chart_ember.svg", eb::render_svg(e, nullptr));
  e["machine"]["device_name"] = R"(GPU <"x"> & 'y')";
  write(d + "/chart_escaped.svg", eb::render_svg(e, nullptr));
}
