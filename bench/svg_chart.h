#pragma once
// The benchmark chart: steps/s per (workload, batch) group, one bar per framework and mode, on a
// log-scale y axis, written as a self-contained SVG by hand (no plotting dependency). The output
// depends only on the documents, so the same input gives the same bytes.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ember::bench {

// The y pixel of `value` on a log axis whose bottom edge (pixel `bottom`) is 10^lo_decade and top
// edge (pixel `top`, above it: smaller y) is 10^hi_decade. Values outside the range extrapolate.
double log_y(double value, double lo_decade, double hi_decade, double top, double bottom);

// Text made safe for XML character data and attribute values.
std::string xml_escape(std::string_view text);

// The chart of `ember` alone or beside `torch` (may be null). Both documents must have passed
// check_document (load_document does it; render_svg checks again).
std::string render_svg(const nlohmann::json& ember, const nlohmann::json* torch);

}  // namespace ember::bench
