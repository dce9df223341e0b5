#include "bench/report_data.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"

namespace ember::bench {

using nlohmann::json;

const std::vector<std::string>& mode_order() {
  static const std::vector<std::string> modes{"eager",        "default", "reduce-overhead",
                                              "max-autotune", "dynamic", "cuda-graph"};
  return modes;
}

namespace {

size_t mode_rank(const std::string& mode) {
  const auto& m = mode_order();
  return static_cast<size_t>(std::find(m.begin(), m.end(), mode) - m.begin());
}

bool positive_number(const json& r, const char* key) {
  auto it = r.find(key);
  return it != r.end() && it->is_number() && it->get<double>() > 0 &&
         std::isfinite(it->get<double>());
}

// Workloads by first appearance in `results`; the `workloads` object cannot give that order
// (nlohmann keeps object keys sorted).
std::vector<std::string> workload_order(const json& doc) {
  std::vector<std::string> order;
  for (const auto& r : doc.at("results")) {
    const auto w = r.at("workload").get<std::string>();
    if (std::find(order.begin(), order.end(), w) == order.end()) order.push_back(w);
  }
  return order;
}

}  // namespace

double Row::us() const { return j->at("us_per_step").get<double>(); }
double Row::steps_per_s() const { return j->at("steps_per_s").get<double>(); }

std::string Row::reason() const {
  std::string out = status;
  auto it = j->find("error");
  if (it != j->end() && it->is_string() && !it->get<std::string>().empty()) {
    out += ": ";
    out += it->get<std::string>();
  }
  return out;
}

void check_document(const json& doc, std::string_view framework, std::string_view what) {
  EMBER_CHECK(doc.is_object(), "report: ", what, " is not a JSON object");
  auto ver = doc.find("schema_version");
  EMBER_CHECK(ver != doc.end(), "report: ", what,
              " has no schema_version (not a benchmark document?)");
  EMBER_CHECK(ver->is_number_integer() && ver->get<int64_t>() == 1, "report: ", what,
              " has schema_version ", ver->dump(), "; this report reads version 1");
  auto fw = doc.find("framework");
  EMBER_CHECK(fw != doc.end() && fw->is_string(), "report: ", what, " has no framework field");
  const auto name = fw->get<std::string>();
  EMBER_CHECK(name == "ember" || name == "pytorch", "report: ", what, " has framework '", name,
              "'; expected ember or pytorch");
  EMBER_CHECK(framework.empty() || name == framework, "report: ", what,
              " was written by framework '", name, "', expected '", framework, "'");
  auto res = doc.find("results");
  EMBER_CHECK(res != doc.end() && res->is_array(), "report: ", what, " has no results array");

  std::set<std::tuple<std::string, int64_t, std::string>> seen;
  for (size_t i = 0; i < res->size(); ++i) {
    const json& r = (*res)[i];
    EMBER_CHECK(r.is_object(), "report: ", what, ": results[", i, "] is not an object");
    auto w = r.find("workload");
    EMBER_CHECK(w != r.end() && w->is_string() && !w->get<std::string>().empty(), "report: ", what,
                ": results[", i, "] has no workload");
    auto b = r.find("batch");
    EMBER_CHECK(b != r.end() && b->is_number_integer() && b->get<int64_t>() >= 1, "report: ", what,
                ": results[", i, "] has no batch >= 1");
    auto m = r.find("mode");
    EMBER_CHECK(
        m != r.end() && m->is_string() && mode_rank(m->get<std::string>()) < mode_order().size(),
        "report: ", what, ": results[", i, "] has an unknown mode ",
        m == r.end() ? std::string("(none)") : m->dump());
    EMBER_CHECK(!(name == "ember" && m->get<std::string>() == "cuda-graph"), "report: ", what,
                ": results[", i,
                "]: mode cuda-graph is PyTorch's hand-captured step, not an Ember mode");
    auto s = r.find("status");
    EMBER_CHECK(s != r.end() && s->is_string() && (*s == "ok" || *s == "skipped" || *s == "error"),
                "report: ", what, ": results[", i, "] has no status ok|skipped|error");
    if (*s == "ok") {
      EMBER_CHECK(positive_number(r, "us_per_step") && positive_number(r, "steps_per_s"),
                  "report: ", what, ": results[", i,
                  "] is ok but lacks a positive us_per_step and steps_per_s");
    }
    auto key = std::make_tuple(w->get<std::string>(), b->get<int64_t>(), m->get<std::string>());
    EMBER_CHECK(seen.insert(key).second, "report: ", what, ": (", std::get<0>(key), ", ",
                std::get<1>(key), ", ", std::get<2>(key), ") appears twice in results");
  }
}

std::vector<Row> rows_of(const json& doc) {
  const auto order = workload_order(doc);
  std::vector<Row> rows;
  for (const auto& r : doc.at("results")) {
    Row row;
    row.j = &r;
    row.workload = r.at("workload").get<std::string>();
    row.batch = r.at("batch").get<int64_t>();
    row.mode = r.at("mode").get<std::string>();
    row.status = r.at("status").get<std::string>();
    rows.push_back(std::move(row));
  }
  auto wrank = [&](const std::string& w) {
    return std::find(order.begin(), order.end(), w) - order.begin();
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    return std::make_tuple(wrank(a.workload), a.batch, mode_rank(a.mode)) <
           std::make_tuple(wrank(b.workload), b.batch, mode_rank(b.mode));
  });
  return rows;
}

std::vector<Group> groups_of(const json& a, const json* b) {
  std::vector<std::string> order = workload_order(a);
  if (b) {
    for (const auto& w : workload_order(*b))
      if (std::find(order.begin(), order.end(), w) == order.end()) order.push_back(w);
  }
  std::map<std::pair<size_t, int64_t>, Group> groups;  // ordered by (workload rank, batch)
  auto add = [&](const json& doc) {
    for (const auto& r : doc.at("results")) {
      Group g{r.at("workload").get<std::string>(), r.at("batch").get<int64_t>()};
      size_t rank =
          static_cast<size_t>(std::find(order.begin(), order.end(), g.workload) - order.begin());
      groups.emplace(std::make_pair(rank, g.batch), g);
    }
  };
  add(a);
  if (b) add(*b);
  std::vector<Group> out;
  for (auto& [key, g] : groups) out.push_back(g);
  return out;
}

const Row* find_row(const std::vector<Row>& rows, const std::string& workload, int64_t batch,
                    const std::string& mode) {
  for (const auto& r : rows)
    if (r.workload == workload && r.batch == batch && r.mode == mode) return &r;
  return nullptr;
}

const Row* best_row(const std::vector<Row>& rows, const std::string& workload, int64_t batch,
                    bool compiled_only) {
  const Row* best = nullptr;
  for (const auto& r : rows) {
    if (r.workload != workload || r.batch != batch || !r.ok() || r.mode == "dynamic") continue;
    if (compiled_only && (r.mode == "eager" || r.mode == "cuda-graph")) continue;
    if (!best || r.us() < best->us()) best = &r;  // ties: the earlier mode in mode_order()
  }
  return best;
}

std::string framework_label(const json& doc) {
  return doc.value("framework", std::string()) == "pytorch" ? "PyTorch" : "Ember";
}

std::string str_at(const json& doc, std::initializer_list<const char*> path,
                   std::string_view fallback) {
  const json* cur = &doc;
  for (const char* key : path) {
    if (!cur->is_object()) return std::string(fallback);
    auto it = cur->find(key);
    if (it == cur->end()) return std::string(fallback);
    cur = &*it;
  }
  return cur->is_string() ? cur->get<std::string>() : std::string(fallback);
}

std::string fmt_fixed(double v, int decimals) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string fmt_sig(double v, int digits) {
  if (v == 0 || !std::isfinite(v)) return fmt_fixed(v, 0);
  const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(v))));
  return fmt_fixed(v, std::clamp(digits - 1 - magnitude, 0, 6));
}

std::string fmt_sci(double v) {
  if (v == 0 || !std::isfinite(v)) return fmt_fixed(v, 0);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

std::string fmt_ratio(double r) {
  std::string out = fmt_fixed(r, 2);
  out += 'x';
  return out;
}

}  // namespace ember::bench
