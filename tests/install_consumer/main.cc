// Smallest user of an installed Ember: builds a tensor, reduces it, checks the result.
// (Named .cc so the test glob over tests/**/*.cpp leaves it out of ember_tests.)
#include <ember/ember.h>

#include <cstdio>
#include <iostream>
#include <vector>

int main() {
  try {
    std::vector<float> values(12);
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i + 1);
    ember::Tensor t = ember::from_vector(values, {3, 4});
    ember::Tensor s = ember::sum(t);
    std::cout << t << "\n" << s << "\n";
    const float got = s.item<float>();
    const float want = 0.5f * 12 * 13 / 2;  // 0.5 * (1 + ... + 12)
    if (got != want) {
      std::fprintf(stderr, "ember_consumer: sum %g, expected %g\n", got, want);
      return 1;
    }
    std::printf("ember_consumer: ok (cuda available: %s)\n",
                ember::cuda::is_available() ? "yes" : "no");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember_consumer: %s\n", e.what());
    return 1;
  }
}
