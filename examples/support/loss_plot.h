#pragma once
// The examples' loss-curve picture: eager and compiled losses per step overlaid, and below them
// their relative difference, as one standalone SVG (no plotting library: a few hundred bytes of
// markup per curve). Each curve is a <polyline data-series="eager|compiled|relative_difference">
// with one point per step, so a test can read the picture back.
#include <string>
#include <vector>

namespace ember::examples {

struct LossCurves {
  std::string title;             // the picture's heading
  std::vector<double> eager;     // loss per step; empty: not run
  std::vector<double> compiled;  // loss per step; empty: not run
};

// Writes `curves` to `path`. With both series (of one length) the lower panel shows
// |compiled - eager| / |eager| per step; "bit-equal" is written there when every step agrees
// exactly. Raises ember::Error when there is nothing to draw, the two series differ in length,
// a loss is not finite, or the file cannot be written.
void write_loss_svg(const std::string& path, const LossCurves& curves);

}  // namespace ember::examples
