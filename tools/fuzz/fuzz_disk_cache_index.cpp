// libFuzzer target for the JIT disk cache's index reader (jit/disk_cache.cpp), through the public
// API: the input becomes index.json in a scratch cache directory holding one entry file, then
// DiskCache::load and DiskCache::store run on it. Whatever the index holds, load must return
// the entry's true bytes or nothing (never other bytes, never throw), and a store() must succeed
// and make the next load return what it stored: a bad index is rebuilt, not left to fail.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "jit/disk_cache.h"

namespace {

namespace fs = std::filesystem;

// The key the seed corpus's indexes name, and its entry file's bytes.
constexpr std::string_view kKey = "k";
constexpr std::string_view kBytes = "entry bytes";

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "fuzz_disk_cache_index: %s\n", what);
  std::abort();
}

void write_file(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) bug("cannot write the scratch directory");
}

// One scratch directory per process, removed at exit.
struct Scratch {
  fs::path dir;
  Scratch() {
    std::string tmpl = (fs::temp_directory_path() / "ember_fuzz_cache_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) bug("cannot create a scratch directory");
    dir = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const fs::path& scratch() {
  static const Scratch s;
  return s.dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using ember::jit::DiskCache;
  const fs::path& dir = scratch();
  const std::string key(kKey);
  write_file(dir / (key + ".bin"), kBytes);
  write_file(dir / "index.json", std::string_view(reinterpret_cast<const char*>(data), size));
  DiskCache cache(dir);
  const std::optional<std::string> got = cache.load(key);
  if (got && *got != kBytes) bug("load returned bytes that are not the entry's");
  if (!cache.store("other", "other bytes")) bug("store failed on a writable directory");
  if (cache.load("other") != std::optional<std::string>("other bytes"))
    bug("a stored entry does not load back");
  // The entry for `key` is either still trusted (its record was valid) or a miss.
  const std::optional<std::string> after = cache.load(key);
  if (after && *after != kBytes) bug("load returned wrong bytes after a store");
  if (got && !after) bug("a store lost a valid entry");
  return 0;
}
