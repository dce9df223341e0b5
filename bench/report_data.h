#pragma once
// What the report and the chart both read from a benchmark document (bench/schema/
// bench.schema.json): the checks a document must pass before it is trusted, its result rows in a
// fixed order, and the number formatting. Kept apart from the formatters so the table, the
// comparison, the Markdown and the SVG cannot disagree about which row is "the best compiled".
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace ember::bench {

// The schema's modes in the order every output lists them.
const std::vector<std::string>& mode_order();

// One entry of `results`, with the keys every output needs pulled out; `j` is the whole entry.
struct Row {
  const nlohmann::json* j = nullptr;
  std::string workload;
  int64_t batch = 0;
  std::string mode;
  std::string status;  // ok | skipped | error
  bool ok() const { return status == "ok"; }
  double us() const;           // us_per_step; only for ok rows
  double steps_per_s() const;  // steps_per_s; only for ok rows
  std::string reason() const;  // "skipped: why" / "error: why"
};

// Throws ember::Error unless `doc` is a schema-version-1 document whose result rows carry what
// the report relies on (ok rows: positive us_per_step and steps_per_s), with no (workload, batch,
// mode) twice. `framework` is "ember", "pytorch" or empty (either); `what` names the document in
// the message (its file name, or "ember document").
void check_document(const nlohmann::json& doc, std::string_view framework, std::string_view what);

// The rows in report order: workloads by first appearance, then batch, then mode_order().
std::vector<Row> rows_of(const nlohmann::json& doc);

struct Group {
  std::string workload;
  int64_t batch = 0;
};
// The (workload, batch) pairs of `a` then those only `b` has, in report order (b may be null).
std::vector<Group> groups_of(const nlohmann::json& a, const nlohmann::json* b);

const Row* find_row(const std::vector<Row>& rows, const std::string& workload, int64_t batch,
                    const std::string& mode);
// The fastest ok row of a group. `compiled_only` leaves out eager (and cuda-graph). dynamic is
// never a candidate: its steps run smaller batches than `batch`, so its time is not comparable.
const Row* best_row(const std::vector<Row>& rows, const std::string& workload, int64_t batch,
                    bool compiled_only);

// "Ember" / "PyTorch".
std::string framework_label(const nlohmann::json& doc);
// A string field of a nested object, `fallback` when absent or not a string (e.g. a null
// driver_version on the CPU).
std::string str_at(const nlohmann::json& doc, std::initializer_list<const char*> path,
                   std::string_view fallback = "?");

// `digits` significant digits, never in exponent form (1187.3 -> "1187", 0.04321 -> "0.0432").
std::string fmt_sig(double v, int digits);
std::string fmt_fixed(double v, int decimals);
// A small relative difference: "0", "3.1e-07".
std::string fmt_sci(double v);
// The speed ratio as printed everywhere: "4.75x".
std::string fmt_ratio(double r);

}  // namespace ember::bench
