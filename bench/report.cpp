#include "bench/report.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "bench/report_data.h"
#include "core/error.h"

namespace ember::bench {

using nlohmann::json;

namespace {

// ---- aligned text columns ------------------------------------------------------------------

struct Column {
  std::string header;
  bool right = false;  // numbers are right-aligned so their digits line up
};

// A row with fewer cells than columns ends in a cell that spans the rest (a skip reason); it
// does not widen the column it starts in. An empty row is a blank line.
std::string render_columns(const std::vector<Column>& cols,
                           const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) width[c] = cols[c].header.size();
  for (const auto& row : rows) {
    const size_t sized = row.size() < cols.size() && !row.empty() ? row.size() - 1 : row.size();
    for (size_t c = 0; c < sized; ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::ostringstream os;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c) line += "  ";
      const bool last_span = cells.size() < cols.size() && c + 1 == cells.size();
      const size_t pad = last_span || cells[c].size() >= width[c] ? 0 : width[c] - cells[c].size();
      if (cols[c].right && !last_span) line.append(pad, ' ');
      line += cells[c];
      if (!cols[c].right && !last_span) line.append(pad, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << '\n';
  };
  std::vector<std::string> header;
  for (const auto& c : cols) header.push_back(c.header);
  emit(header);
  size_t total = 0;
  for (size_t c = 0; c < cols.size(); ++c) total += width[c] + (c ? 2 : 0);
  os << std::string(total, '-') << '\n';
  for (const auto& row : rows) emit(row);
  return os.str();
}

// ---- cells ---------------------------------------------------------------------------------

// A number field of a result as text, "-" where it is absent or null.
template <class Fmt>
std::string cell(const json& r, const char* key, Fmt fmt) {
  auto it = r.find(key);
  if (it == r.end() || !it->is_number()) return "-";
  return fmt(it->get<double>());
}

std::string count_text(double v) { return v == std::floor(v) ? fmt_fixed(v, 0) : fmt_fixed(v, 1); }

std::string us_text(double us) { return fmt_sig(us, 4); }

// "2026-11-29T21:50:00Z" -> "2026-11-29 21:50 UTC"; anything else is shown as it is.
std::string created_text(const json& doc) {
  std::string c = str_at(doc, {"created"});
  if (c.size() == 20 && c[10] == 'T' && c[19] == 'Z') {
    std::string out = c.substr(0, 10);
    out += ' ';
    out += c.substr(11, 5);
    out += " UTC";
    return out;
  }
  return c;
}

std::string rate_text(double v, const char* unit) {
  std::string out = v >= 1e12 ? fmt_sig(v / 1e12, 3) : fmt_sig(v / 1e9, 3);
  out += v >= 1e12 ? " T" : " G";
  out += unit;
  return out;
}

std::string peak_text(const json& doc) {
  const json& peak = doc.at("machine").at("peak");
  std::ostringstream os;
  os << "peak " << rate_text(peak.value("flops_per_s", 0.0), "FLOP/s") << " fp32 GEMM, "
     << rate_text(peak.value("bytes_per_s", 0.0), "B/s") << " copy";
  return os.str();
}

std::string config_text(const json& doc) {
  const json cfg = doc.value("config", json::object());
  std::ostringstream os;
  const int repeats = cfg.value("repeats", 0);
  os << "warmup " << cfg.value("warmup", 0) << ", " << repeats << " samples of "
     << cfg.value("steps", 0)
     << " steps (us/step: median sample; min..max: fastest..slowest sample), TF32 "
     << (cfg.value("tf32", false) ? "on" : "off") << ", loss after " << cfg.value("loss_steps", 0)
     << " steps from seed " << cfg.value("seed", 0);
  if (cfg.contains("threads")) os << ", " << cfg.value("threads", 0) << " CPU threads";
  return os.str();
}

// "NVIDIA H200 (cuda:0), driver 570.86, CUDA 12.8" / "AMD EPYC (cpu)".
std::string device_text(const json& doc) {
  std::ostringstream os;
  os << str_at(doc, {"machine", "device_name"}) << " (" << str_at(doc, {"machine", "device"})
     << ")";
  const std::string driver = str_at(doc, {"machine", "driver_version"}, "");
  const std::string cuda = str_at(doc, {"machine", "cuda_version"}, "");
  if (!driver.empty()) os << ", driver " << driver;
  if (!cuda.empty()) os << ", CUDA " << cuda;
  return os.str();
}

bool has_machine_peak(const json& doc) {
  auto m = doc.find("machine");
  return m != doc.end() && m->is_object() && m->contains("peak") && (*m)["peak"].is_object();
}

// ---- the comparison, shared by the text and the Markdown -----------------------------------

struct Line {
  std::string workload;
  int64_t batch = 0;
  std::string label;  // a mode, or "best vs best"
  const Row* ember = nullptr;
  const Row* torch = nullptr;
  bool cross = false;  // the sides' modes differ (cuda-graph and best-vs-best lines)
  bool group_end = false;
};

std::vector<Line> comparison_lines(const json& ember, const json& torch, const std::vector<Row>& er,
                                   const std::vector<Row>& tr) {
  std::vector<Line> lines;
  for (const auto& g : groups_of(ember, &torch)) {
    for (const auto& mode : mode_order()) {
      const Row* e = find_row(er, g.workload, g.batch, mode);
      const Row* t = find_row(tr, g.workload, g.batch, mode);
      if (mode == "cuda-graph") {
        if (!t) continue;
        // PyTorch's hand-captured graph is its answer to what Ember's compiled modes do
        // automatically, so it meets Ember's fastest compiled mode.
        lines.push_back(
            {g.workload, g.batch, mode, best_row(er, g.workload, g.batch, true), t, true});
      } else if (e || t) {
        lines.push_back({g.workload, g.batch, mode, e, t, false});
      }
    }
    lines.push_back({g.workload, g.batch, "best vs best", best_row(er, g.workload, g.batch, false),
                     best_row(tr, g.workload, g.batch, false), true, true});
  }
  return lines;
}

std::string side_us(const Row* r) {
  if (!r) return "-";
  return r->ok() ? us_text(r->us()) : r->status;
}

std::string ratio_text(const Line& l) {
  if (!l.ember || !l.torch || !l.ember->ok() || !l.torch->ok()) return "-";
  return fmt_ratio(l.torch->us() / l.ember->us());
}

std::vector<std::string> comparison_warnings(const json& ember, const json& torch) {
  std::vector<std::string> w;
  const std::string ed = str_at(ember, {"machine", "device_name"});
  const std::string td = str_at(torch, {"machine", "device_name"});
  if (ed != td) {
    std::ostringstream os;
    os << "warning: the runs used different devices (Ember: " << ed << ", PyTorch: " << td
       << "); the ratios compare machines, not frameworks";
    w.push_back(os.str());
  }
  const bool et = ember.value("config", json::object()).value("tf32", false);
  const bool tt = torch.value("config", json::object()).value("tf32", false);
  if (et != tt) {
    std::ostringstream os;
    os << "warning: TF32 differs (Ember " << (et ? "on" : "off") << ", PyTorch "
       << (tt ? "on" : "off") << "); GEMM-bound rows are not comparable";
    w.push_back(os.str());
  }
  return w;
}

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|' || c == '*' || c == '_' || c == '`' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// The Markdown header line: when, where, with what.
std::string md_header(const json& ember, const json* torch) {
  std::ostringstream os;
  os << "Measured " << created_text(ember) << " on "
     << md_escape(str_at(ember, {"machine", "device_name"}));
  const std::string driver = str_at(ember, {"machine", "driver_version"}, "");
  const std::string ecuda = str_at(ember, {"machine", "cuda_version"}, "");
  const std::string tcuda = torch ? str_at(*torch, {"machine", "cuda_version"}, "") : "";
  std::vector<std::string> parts;
  if (!driver.empty()) parts.push_back(std::string("driver ").append(md_escape(driver)));
  if (!ecuda.empty() || !tcuda.empty()) {
    std::string c = "CUDA ";
    if (!torch || ecuda == tcuda) {
      c += md_escape(ecuda.empty() ? tcuda : ecuda);
    } else {
      c += md_escape(ecuda.empty() ? "-" : ecuda);
      c += " for Ember, ";
      c += md_escape(tcuda.empty() ? "-" : tcuda);
      c += " for PyTorch";
    }
    parts.push_back(c);
  }
  if (parts.empty()) parts.push_back(md_escape(str_at(ember, {"machine", "device"})));
  os << " (";
  for (size_t i = 0; i < parts.size(); ++i) os << (i ? ", " : "") << parts[i];
  os << ")";
  if (torch) os << ", PyTorch " << md_escape(str_at(*torch, {"framework_version"}));
  os << ", Ember " << md_escape(str_at(ember, {"framework_version"})) << ". ";
  const json cfg = ember.value("config", json::object());
  os << "TF32 " << (cfg.value("tf32", false) ? "on" : "off") << "; µs/step is the median of "
     << cfg.value("repeats", 0) << " samples of " << cfg.value("steps", 0) << " steps after "
     << cfg.value("warmup", 0) << " warm-up steps";
  if (torch) {
    os << "; speedup = PyTorch µs / Ember µs (> 1: Ember is faster). The cuda-graph row sets "
          "PyTorch's "
          "hand-captured step against Ember's fastest compiled mode; best vs best takes each "
          "side's "
          "fastest mode except dynamic.";
  } else {
    os << ".";
  }
  return os.str();
}

std::string md_row(const std::vector<std::string>& cells) {
  std::string out = "|";
  for (const auto& c : cells) {
    out += ' ';
    out += c;
    out += " |";
  }
  out += '\n';
  return out;
}

// A side's cell in a Markdown line: on the cross lines the mode that was picked goes with it.
std::string md_side(const Row* r, bool cross) {
  std::string out = side_us(r);
  if (r && r->ok() && cross) {
    out += " (";
    out += r->mode;
    out += ')';
  }
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  EMBER_CHECK(f.is_open(), "report: cannot write ", path);
  f << text;
  f.close();
  EMBER_CHECK(!f.fail(), "report: writing ", path, " failed");
}

struct ReportOptions {
  std::string ember, torch, svg, markdown;
};

}  // namespace

std::string format_table(const json& doc) {
  check_document(doc, "", "document");
  std::ostringstream os;
  os << framework_label(doc) << ' ' << str_at(doc, {"framework_version"}) << ", "
     << str_at(doc, {"created"}) << ", " << device_text(doc) << '\n';
  if (has_machine_peak(doc)) os << peak_text(doc) << '\n';
  os << config_text(doc) << '\n';
  const std::vector<Column> cols{{"workload"},
                                 {"batch", true},
                                 {"mode"},
                                 {"us/step", true},
                                 {"steps/s", true},
                                 {"min..max us", true},
                                 {"first cold ms", true},
                                 {"first warm ms", true},
                                 {"peak MiB", true},
                                 {"kernels", true},
                                 {"loss", true},
                                 {"rel diff", true},
                                 {"recompiles", true},
                                 {"floor us", true},
                                 {"share %", true}};
  std::vector<std::vector<std::string>> rows;
  bool dynamic = false;
  for (const Row& r : rows_of(doc)) {
    dynamic = dynamic || r.mode == "dynamic";
    std::vector<std::string> cells{r.workload, std::to_string(r.batch), r.mode};
    if (!r.ok()) {
      cells.push_back(r.reason());
      rows.push_back(std::move(cells));
      continue;
    }
    const json& j = *r.j;
    const json first = j.value("first_step_ms", json::object());
    const json floor = j.value("floor", json::object());
    std::string range = cell(j, "us_per_step_min", us_text);
    range += "..";
    range += cell(j, "us_per_step_max", us_text);
    cells.insert(
        cells.end(),
        {us_text(r.us()), fmt_sig(r.steps_per_s(), 4), range,
         cell(first, "cold", [](double v) { return fmt_sig(v, 4); }),
         cell(first, "warm", [](double v) { return fmt_sig(v, 4); }),
         cell(j, "peak_memory_bytes", [](double v) { return fmt_fixed(v / (1024.0 * 1024.0), 1); }),
         cell(j, "kernels_per_step", count_text),
         cell(j, "loss", [](double v) { return fmt_fixed(v, 4); }),
         cell(j, "loss_rel_diff_vs_eager", fmt_sci), cell(j, "recompiles", count_text),
         cell(floor, "us", [](double v) { return fmt_sig(v, 3); }),
         cell(floor, "share", [](double v) { return fmt_sig(100 * v, 3); })});
    rows.push_back(std::move(cells));
  }
  os << '\n' << render_columns(cols, rows);
  if (dynamic)
    os << "dynamic: the batch changes every step (B, 3B/4, B/2, 3B/4+1); batch shows B\n";
  return os.str();
}

std::string format_comparison(const json& ember, const json& torch) {
  check_document(ember, "ember", "ember document");
  check_document(torch, "pytorch", "pytorch document");
  const auto er = rows_of(ember);
  const auto tr = rows_of(torch);
  std::ostringstream os;
  os << "Ember " << str_at(ember, {"framework_version"}) << " vs PyTorch "
     << str_at(torch, {"framework_version"}) << " on " << str_at(ember, {"machine", "device_name"})
     << "; speedup = PyTorch us / Ember us (> 1: Ember is faster)\n";
  for (const auto& w : comparison_warnings(ember, torch)) os << w << '\n';
  const std::vector<Column> cols{{"workload"},
                                 {"batch", true},
                                 {"mode"},
                                 {"Ember us/step", true},
                                 {"PyTorch us/step", true},
                                 {"speedup", true},
                                 {"compared"}};
  std::vector<std::vector<std::string>> rows;
  for (const Line& l : comparison_lines(ember, torch, er, tr)) {
    std::string note;
    if (l.cross) {
      note = "Ember ";
      note += l.ember && l.ember->ok() ? l.ember->mode : "-";
      note += " vs PyTorch ";
      note += l.torch && l.torch->ok() ? l.torch->mode : "-";
    }
    rows.push_back({l.workload, std::to_string(l.batch), l.label, side_us(l.ember),
                    side_us(l.torch), ratio_text(l), note});
    if (l.group_end) rows.push_back({});
  }
  if (!rows.empty()) rows.pop_back();  // no blank line after the last group
  os << '\n' << render_columns(cols, rows);
  return os.str();
}

std::string format_markdown(const json& ember, const json* torch) {
  check_document(ember, "ember", "ember document");
  if (torch) check_document(*torch, "pytorch", "pytorch document");
  std::ostringstream os;
  os << md_header(ember, torch) << "\n\n";
  if (torch) {
    for (const auto& w : comparison_warnings(ember, *torch)) os << "> " << md_escape(w) << "\n\n";
    const auto er = rows_of(ember);
    const auto tr = rows_of(*torch);
    os << md_row(
        {"workload", "batch", "mode", "Ember µs/step", "PyTorch µs/step", "PyTorch / Ember"});
    os << "|---|---:|---|---:|---:|---:|\n";
    for (const Line& l : comparison_lines(ember, *torch, er, tr)) {
      const bool best = l.label == "best vs best";
      std::string ratio = ratio_text(l);
      if (best && ratio != "-") {
        ratio.insert(0, "**");
        ratio += "**";
      }
      os << md_row({md_escape(l.workload), std::to_string(l.batch),
                    best ? "**best vs best**" : l.label, md_side(l.ember, l.cross),
                    md_side(l.torch, l.cross), ratio});
    }
  } else {
    os << md_row({"workload", "batch", "mode", "µs/step", "steps/s", "first step cold / warm (ms)",
                  "kernels/step", "share of floor"});
    os << "|---|---:|---|---:|---:|---:|---:|---:|\n";
    for (const Row& r : rows_of(ember)) {
      if (!r.ok()) {
        os << md_row({md_escape(r.workload), std::to_string(r.batch), r.mode, md_escape(r.reason()),
                      "", "", "", ""});
        continue;
      }
      const json& j = *r.j;
      const json first = j.value("first_step_ms", json::object());
      const json floor = j.value("floor", json::object());
      std::string first_text = cell(first, "cold", [](double v) { return fmt_sig(v, 4); });
      first_text += " / ";
      first_text += cell(first, "warm", [](double v) { return fmt_sig(v, 4); });
      os << md_row(
          {md_escape(r.workload), std::to_string(r.batch), r.mode, us_text(r.us()),
           fmt_sig(r.steps_per_s(), 4), first_text, cell(j, "kernels_per_step", count_text),
           cell(floor, "share", [](double v) { return fmt_sig(100 * v, 3).append(" %"); })});
    }
  }
  return os.str();
}

json load_document(const std::string& path, const std::string& framework) {
  std::ifstream f(path, std::ios::binary);
  EMBER_CHECK(f.is_open(), "report: cannot open ", path);
  json doc;
  try {
    doc = json::parse(f);
  } catch (const json::exception& e) {
    EMBER_FAIL("report: ", path, " is not valid JSON: ", e.what());
  }
  check_document(doc, framework, path);
  return doc;
}

void add_report_command(CLI::App& app, std::ostream& out) {
  auto opts = std::make_shared<ReportOptions>();
  CLI::App* sub = app.add_subcommand(
      "report",
      "Print the table of an ember_bench JSON file, compare it with a torch_mlp.py file, "
      "write the chart and the README table");
  sub->add_option("ember", opts->ember, "JSON written by ember_bench (framework ember)")
      ->required();
  sub->add_option("--torch", opts->torch, "JSON written by bench/torch_mlp.py (framework pytorch)");
  sub->add_option("--svg", opts->svg, "write the steps/s chart (log scale) here");
  sub->add_option("--markdown", opts->markdown, "write the comparison as a Markdown table here");
  std::ostream* sink = &out;
  sub->callback([opts, sink] {
    const json ember = load_document(opts->ember, "ember");
    json torch;
    const bool have_torch = !opts->torch.empty();
    if (have_torch) torch = load_document(opts->torch, "pytorch");
    *sink << format_table(ember);
    if (have_torch) *sink << '\n' << format_table(torch) << '\n' << format_comparison(ember, torch);
    const json* tp = have_torch ? &torch : nullptr;
    if (!opts->svg.empty()) {
      write_file(opts->svg, render_svg(ember, tp));
      *sink << "wrote " << opts->svg << '\n';
    }
    if (!opts->markdown.empty()) {
      write_file(opts->markdown, format_markdown(ember, tp));
      *sink << "wrote " << opts->markdown << '\n';
    }
  });
}

void add_report_command(CLI::App& app) { add_report_command(app, std::cout); }

}  // namespace ember::bench
