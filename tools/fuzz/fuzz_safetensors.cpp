// libFuzzer target for the in-memory safetensors reader (nn::from_safetensors). Any input must
// either load or raise ember::Error; anything else (a crash, a sanitizer report, another
// exception type) is a bug. A file that loads must survive a round trip through the writer
// unchanged: same names, dtypes, shapes, bytes and metadata.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "core/error.h"
#include "nn/serialize.h"

namespace {

[[noreturn]] void bug(const char* what, const char* detail = "") {
  std::fprintf(stderr, "fuzz_safetensors: %s %s\n", what, detail);
  std::abort();
}

bool same_bytes(const ember::Tensor& a, const ember::Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 ||
          std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember;
  nn::TensorFile file;
  try {
    file = nn::from_safetensors(data, size, "fuzz input");
  } catch (const Error&) {
    return 0;  // refused, as a corrupt file must be
  } catch (const std::exception& e) {
    bug("a non-ember exception escaped the reader:", e.what());
  }
  nn::TensorFile again;
  try {
    const std::string bytes = nn::to_safetensors(file.tensors, file.metadata);
    again = nn::from_safetensors(bytes.data(), bytes.size(), "round trip");
  } catch (const std::exception& e) {
    bug("a file that loaded does not round-trip:", e.what());
  }
  if (again.metadata != file.metadata) bug("the metadata changed in a round trip");
  if (again.tensors.size() != file.tensors.size()) bug("tensors were lost in a round trip");
  for (const auto& [name, t] : file.tensors) {
    const auto it = again.tensors.find(name);
    if (it == again.tensors.end() || !same_bytes(t, it->second))
      bug("a tensor changed in a round trip:", name.c_str());
  }
  return 0;
}
