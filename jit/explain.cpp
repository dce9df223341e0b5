// jit::explain: one traced run, the passes, and a readable report of what compiling would do.
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

extern char** environ;  // POSIX: the process's environment, handed on to the program spawned
#include "jit/compile.h"
#include "jit/executor.h"
#include "jit/passes.h"
#include "jit/tracer.h"

namespace ember::jit {

std::string Explanation::str() const {
  std::ostringstream os;
  os << "=== ember jit explain ===\n";
  if (!captured) {
    os << "not captured; graph breaks:\n";
    for (const std::string& b : breaks) os << "  " << b << "\n";
    return os.str();
  }
  os << "captured whole: " << nodes_traced << " ops traced, " << nodes_optimized
     << " after the passes\n";
  os << "passes:\n";
  for (const std::string& p : passes) os << "  " << p << "\n";
  os << "fused groups (" << groups.size() << "):\n";
  for (const std::string& g : groups) os << "  " << g << "\n";
  for (const std::string& l : lowerings) os << "  lowered " << l << "\n";
  os << "kernel calls per replay: " << kernels_per_replay << "\n";
  os << "arena: " << arena_bytes << " bytes\n";
  os << "--- optimized graph ---\n" << optimized_graph;
  return os.str();
}

namespace {

// Runs `argv` (looked up on the PATH) and waits: its exit status, or -errno when it could not
// be started (ENOENT: not installed).
int run_program(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (rc != 0) return -rc;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -errno;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  EMBER_CHECK(f.good(), "jit::Explanation::write_graph: cannot write ", path);
}

}  // namespace

std::string Explanation::write_graph(const std::string& stem) const {
  EMBER_CHECK(captured && !dot.empty(), "jit::Explanation::write_graph: the function broke (",
              breaks.empty() ? std::string("no graph") : breaks.front(),
              "): there is no graph to draw");
  EMBER_CHECK(!stem.empty(), "jit::Explanation::write_graph: an empty file name");
  namespace fs = std::filesystem;
  const std::string svg = stem + ".svg", tmp_dot = svg + ".tmp.dot", tmp_svg = svg + ".tmp";
  write_text(tmp_dot, dot);
  const int rc = run_program({"dot", "-Tsvg", tmp_dot, "-o", tmp_svg});
  std::error_code ec;
  if (rc == -ENOENT) {  // no Graphviz: the text it would have rendered
    const std::string path = stem + ".dot";
    fs::rename(tmp_dot, path, ec);
    EMBER_CHECK(!ec, "jit::Explanation::write_graph: cannot write ", path, ": ", ec.message());
    return path;
  }
  fs::remove(tmp_dot, ec);
  if (rc != 0) {
    fs::remove(tmp_svg, ec);
    EMBER_FAIL("jit::Explanation::write_graph: Graphviz's dot ",
               rc < 0 ? std::string("could not start: ") + std::strerror(-rc)
                      : "exited with status " + std::to_string(rc),
               " rendering ", svg);
  }
  fs::rename(tmp_svg, svg, ec);
  EMBER_CHECK(!ec, "jit::Explanation::write_graph: cannot write ", svg, ": ", ec.message());
  return svg;
}

namespace detail {

Explanation explain_call(std::span<const Tensor> tensors, EagerCall eager, void* ctx) {
  Explanation ex;
  std::vector<Tensor> outputs;
  Graph g;
  {
    Tracer tracer(false);
    for (size_t i = 0; i < tensors.size(); ++i)
      tracer.add_input(tensors[i], static_cast<int32_t>(i));
    eager(ctx, outputs);
    tracer.finish(outputs);
    if (tracer.broken()) {
      ex.breaks.push_back(tracer.break_info().str());
    } else {
      g = std::move(tracer.graph());
    }
  }
  if (!ex.breaks.empty()) {
    std::fprintf(stderr, "%s", ex.str().c_str());
    return ex;
  }
  ex.captured = true;
  ex.traced_graph = g.str();
  ex.nodes_traced = static_cast<int32_t>(g.nodes.size());
  for (const PassReport& r : optimize(g))
    ex.passes.push_back(r.pass + ": " + std::to_string(r.nodes_before) + " -> " +
                        std::to_string(r.nodes_after) + " nodes");
  ex.nodes_optimized = static_cast<int32_t>(g.nodes.size());
  for (const Group& grp : g.groups) {
    std::string s = std::string(group_kind_name(grp.kind)) + ": " +
                    std::to_string(grp.nodes.size()) + " nodes (";
    for (size_t i = 0; i < grp.nodes.size(); ++i)
      s += (i ? ", " : "") + std::string(op_name(g.nodes[grp.nodes[i]].op));
    ex.groups.push_back(s + ")");
  }
  ex.optimized_graph = g.str();
  ex.dot = g.dot();
  Executor exec(std::move(g));
  ex.kernels_per_replay = exec.stats().kernels;
  ex.lowerings = exec.lowerings();
  ex.arena_bytes = exec.stats().arena_bytes;
  std::fprintf(stderr, "%s", ex.str().c_str());
  return ex;
}

}  // namespace detail
}  // namespace ember::jit
