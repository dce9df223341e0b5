#pragma once
// The report side of the training-step benchmark: reads the JSON documents that bench/ember_bench
// (framework "ember") and bench/torch_mlp.py (framework "pytorch") write (bench/schema/
// bench.schema.json) and turns them into a terminal table, an Ember-vs-PyTorch comparison, a
// Markdown table for the README and an SVG chart. Depends on nlohmann_json and CLI11 only (plus
// the header-only core/error.h), so it builds apart from the ember library.
//
// Bad input (not a schema-1 document, the wrong framework, a missing file) raises ember::Error,
// a std::runtime_error.
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/svg_chart.h"

namespace CLI {
class App;
}

namespace ember::bench {

// One document as a table: a row per (workload, batch, mode); skipped / failed rows give the
// reason instead of figures.
std::string format_table(const nlohmann::json& doc);

// Ember vs PyTorch per (workload, batch, mode): both us/step and PyTorch us / Ember us (> 1:
// Ember is faster). PyTorch's cuda-graph row is set against Ember's fastest compiled mode of the
// same workload and batch, and every workload and batch ends with a "best vs best" line (the
// fastest non-dynamic mode of each side). A missing counterpart shows "-". Warns in the text when
// the two ran on different devices or with different TF32 settings.
std::string format_comparison(const nlohmann::json& ember, const nlohmann::json& torch);

// The comparison as a Markdown table with a header line naming the date, device, driver, CUDA,
// PyTorch and Ember versions (torch may be null: an Ember-only table).
std::string format_markdown(const nlohmann::json& ember, const nlohmann::json* torch);

// Reads and checks one document; `framework` "ember" / "pytorch" / "" (either).
nlohmann::json load_document(const std::string& path, const std::string& framework);

// Registers `report EMBER.json [--torch TORCH.json] [--svg out.svg] [--markdown out.md]`: prints
// the table (and the comparison with --torch) to `out`, writes the chart / Markdown files.
void add_report_command(CLI::App& app, std::ostream& out);
void add_report_command(CLI::App& app);  // prints to std::cout

}  // namespace ember::bench
