#pragma once
// A byte string that equals another trace's exactly when the two traces did the same thing:
// same nodes, attributes, layouts, state identities and frozen constants. The JIT compiles a
// signature once two consecutive traces agree (see jit/compile.cpp for why).
#include <string>

#include "jit/graph.h"

namespace ember::jit {

std::string fingerprint(const Graph& g);
// With `portable`, what another process's trace of the same step would give too: the state's
// addresses and the constants' values stay out (the ranks of a data-parallel job compare these;
// a rank's own constants only shape its own replays).
std::string fingerprint(const Graph& g, bool portable);
// The first difference between two traces, for logs ("node 12: mul vs add"); empty if equal.
std::string first_difference(const Graph& a, const Graph& b);

}  // namespace ember::jit
