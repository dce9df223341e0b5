#pragma once
// EMBER_VECTOR_CLONES before a hot CPU loop's function compiles it once per x86-64 level
// (baseline, AVX2, AVX-512) and picks the best at load time (GCC target_clones, an ifunc): the
// library is built for the baseline ISA so it runs anywhere, and a loop that only vectorises
// with wider integer and conversion instructions still gets them. The clones compute the same
// IEEE operations in the same order (no contraction is added), so results do not change.
// Non-template functions only.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define EMBER_VECTOR_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define EMBER_VECTOR_CLONES
#endif
