// jit::Explanation::write_graph: an SVG through Graphviz when `dot` is on the PATH, the dot text
// without it, and an error (no file) for a function that broke.
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Sets PATH for its scope.
class PathGuard {
 public:
  explicit PathGuard(const char* path) : old_(std::getenv("PATH") ? std::getenv("PATH") : "") {
    setenv("PATH", path, 1);
  }
  ~PathGuard() { setenv("PATH", old_.c_str(), 1); }

 private:
  std::string old_;
};

bool on_path(const char* program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && std::filesystem::exists(std::filesystem::path(dir) / program)) return true;
  return false;
}

}  // namespace

TEST_CASE("write_graph: an SVG through Graphviz, else the dot text", "[jit][explain]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "ember_test_explain_graph";
  fs::remove_all(dir);
  fs::create_directories(dir);
  Tensor w = randn({4, 3}).requires_grad_();
  auto fn = [&](const Tensor& x) {
    Tensor loss = relu(matmul(x, w)).sum();
    loss.backward();
    return loss.detach();
  };
  jit::Explanation ex = jit::explain(fn, randn({2, 4}));
  REQUIRE(ex.captured);

  {
    PathGuard no_programs("/nonexistent");
    const std::string path = ex.write_graph((dir / "no_dot").string());
    CHECK(path == (dir / "no_dot.dot").string());
    CHECK(slurp(path) == ex.dot);
    CHECK_FALSE(fs::exists(dir / "no_dot.svg"));
  }
  if (!on_path("dot")) {
    WARN("Graphviz's dot is not installed: the SVG case is not checked");
    return;
  }
  const std::string svg = ex.write_graph((dir / "with_dot").string());
  CHECK(svg == (dir / "with_dot.svg").string());
  const std::string text = slurp(svg);
  CHECK_THAT(text, Contains("<svg"));
  CHECK_THAT(text, Contains("relu"));
  // No temporaries left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  CHECK(files == 2);  // no_dot.dot and with_dot.svg
  fs::remove_all(dir);
}

TEST_CASE("write_graph: a function that broke has no graph to draw", "[jit][explain]") {
  auto broken = [](const Tensor& x) {
    const float v = x.sum().item<float>();  // a host read: a graph break
    return x * v;
  };
  jit::Explanation ex = jit::explain(broken, ones({3}));
  REQUIRE_FALSE(ex.captured);
  CHECK_THROWS_WITH(ex.write_graph("never_written"),
                    Contains("write_graph") && Contains("no graph to draw"));
  CHECK_FALSE(std::filesystem::exists("never_written.svg"));
  CHECK_FALSE(std::filesystem::exists("never_written.dot"));
}
