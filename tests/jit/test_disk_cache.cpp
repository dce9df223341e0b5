// The JIT's on-disk kernel cache (jit/disk_cache.h), host-only: entries survive a "restart" (a
// new cache object on the same directory), a corrupted / truncated / missing entry or index is
// reported on the cache log, ignored and rebuilt, concurrent processes (fork) storing the same
// and different keys lose nothing and never read half an entry, and an unusable directory costs
// only the cache.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "jit/disk_cache.h"
#include "jit/log.h"
#include "test_util.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

std::vector<std::string>& cache_lines() {
  static std::vector<std::string> lines;
  return lines;
}
void keep_cache_line(std::string_view line) { cache_lines().emplace_back(line); }

// The cache log into a buffer for the object's lifetime.
class CacheLog {
 public:
  CacheLog() {
    cache_lines().clear();
    prev_ = jit::set_log_mask(static_cast<unsigned>(jit::Log::cache));
    jit::set_log_sink(&keep_cache_line);
  }
  ~CacheLog() {
    jit::set_log_mask(prev_);
    jit::set_log_sink(nullptr);
  }
  CacheLog(const CacheLog&) = delete;
  CacheLog& operator=(const CacheLog&) = delete;
  int count(std::string_view needle) const {
    int n = 0;
    for (const std::string& l : cache_lines())
      if (l.find(needle) != std::string::npos) ++n;
    return n;
  }
  std::string all() const {
    std::string s;
    for (const std::string& l : cache_lines()) s += l + "\n";
    return s;
  }

 private:
  unsigned prev_ = 0;
};

using TempDir = ember::test::TempDir;

// Bytes that look like a binary: every byte value, NULs included.
std::string payload(int seed, size_t n) {
  std::string s(n, '\0');
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed) * 7919u;
  for (char& c : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x & 0xff);
  }
  return s;
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_all(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

const std::string kKey = "0123456789abcdef0123456789abcdef";

// A process's own key for round r.
std::string own_key(int p, int r) {
  std::string k = "p";
  k += std::to_string(p);
  k += '_';
  k += std::to_string(r);
  return k;
}

// c.load(key) on another thread, failing the test instead of hanging when it does not return
// within a few seconds: then `fifo`'s write side is opened (which completes a reader's blocked
// open, and closing it gives EOF) until the thread is free to finish.
std::optional<std::string> load_or_fail_if_blocked(jit::DiskCache& c, const std::string& key,
                                                   const fs::path& fifo) {
  auto pending = std::async(std::launch::async, [&] { return c.load(key); });
  if (pending.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    while (pending.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    FAIL_CHECK("DiskCache::load blocked on the FIFO " << fifo);
  }
  return pending.get();
}

}  // namespace

TEST_CASE("disk cache: an entry survives a restart, with its index record", "[jit][cache]") {
  TempDir tmp;
  const fs::path dir = tmp.path() / "nested" / "cache";  // created on the first store
  const std::string bytes = payload(1, 70000);
  CacheLog log;
  {
    jit::DiskCache c(dir);
    CHECK_FALSE(c.load(kKey).has_value());  // nothing yet: a miss
    CHECK(c.stats().misses == 1);
    REQUIRE(c.store(kKey, bytes));
    CHECK(c.stats().stores == 1);
  }
  jit::DiskCache again(dir);  // a new process would start like this
  const std::optional<std::string> got = again.load(kKey);
  REQUIRE(got.has_value());
  CHECK(*got == bytes);
  CHECK(again.stats().hits == 1);
  CHECK(log.count("miss " + kKey) == 1);
  CHECK(log.count("stored " + kKey) == 1);
  CHECK(log.count("hit " + kKey) == 1);

  // The index: key -> file, size, checksum, created; the file holds exactly the bytes.
  const nlohmann::json idx = nlohmann::json::parse(read_all(dir / "index.json"));
  REQUIRE(idx["entries"].contains(kKey));
  const nlohmann::json& e = idx["entries"][kKey];
  CHECK(e["file"] == kKey + ".bin");
  CHECK(e["size"] == bytes.size());
  CHECK(e["checksum"] == jit::DiskCache::checksum(bytes));
  CHECK(e["created"].get<std::string>().size() == 20);  // 2025-01-01T00:00:00Z
  CHECK(read_all(dir / (kKey + ".bin")) == bytes);
  // A second store replaces the entry.
  const std::string other = payload(2, 1234);
  REQUIRE(again.store(kKey, other));
  CHECK(jit::DiskCache(dir).load(kKey) == other);
  // No temporary files are left behind.
  for (const auto& f : fs::directory_iterator(dir))
    CHECK(f.path().filename().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("disk cache: corrupted, truncated and missing entries are reported and rebuilt",
          "[jit][cache]") {
  TempDir tmp;
  const std::string bytes = payload(3, 5000);
  const fs::path file = tmp.path() / (kKey + ".bin");
  CacheLog log;
  jit::DiskCache c(tmp.path());
  REQUIRE(c.store(kKey, bytes));

  SECTION("a flipped byte") {
    std::string bad = bytes;
    bad[2500] = static_cast<char>(bad[2500] ^ 0x40);
    write_all(file, bad);
    CHECK_FALSE(jit::DiskCache(tmp.path()).load(kKey).has_value());
    CHECK(log.count("corrupted") == 1);
  }
  SECTION("a truncated file") {
    write_all(file, std::string_view(bytes).substr(0, 4096));
    CHECK_FALSE(c.load(kKey).has_value());
    CHECK(log.count("truncated") == 1);
    CHECK(c.stats().bad_entries == 1);
  }
  SECTION("an empty file") {
    write_all(file, "");
    CHECK_FALSE(c.load(kKey).has_value());
    CHECK(log.count("truncated") == 1);
  }
  SECTION("a longer file") {
    write_all(file, bytes + "x");
    CHECK_FALSE(c.load(kKey).has_value());
    CHECK(log.count("wrong size") == 1);
  }
  SECTION("a missing file") {
    fs::remove(file);
    CHECK_FALSE(c.load(kKey).has_value());
    CHECK(log.count("missing its file") == 1);
  }
  SECTION("a corrupted index") {
    write_all(tmp.path() / "index.json", "{\"version\": 1, \"entries\": {\"012");
    CHECK_FALSE(c.load(kKey).has_value());
    CHECK(log.count("index.json is corrupted") == 1);
  }
  SECTION("an index record pointing elsewhere") {
    nlohmann::json idx = nlohmann::json::parse(read_all(tmp.path() / "index.json"));
    idx["entries"][kKey]["file"] = "../../etc/passwd";
    write_all(tmp.path() / "index.json", idx.dump());
    CHECK_FALSE(c.load(kKey).has_value());
    CHECK(log.count("corrupted index record") == 1);
  }
  SECTION("an index record of the wrong type") {
    nlohmann::json idx = nlohmann::json::parse(read_all(tmp.path() / "index.json"));
    idx["entries"][kKey]["size"] = "lots";
    write_all(tmp.path() / "index.json", idx.dump());
    CHECK_FALSE(c.load(kKey).has_value());
    CHECK(log.count("corrupted index record") == 1);
  }
  INFO(log.all());
  // Whatever was wrong, the next store rebuilds the entry and it is trusted again.
  REQUIRE(c.store(kKey, bytes));
  const std::optional<std::string> got = jit::DiskCache(tmp.path()).load(kKey);
  REQUIRE(got.has_value());
  CHECK(*got == bytes);
}

TEST_CASE("disk cache: an index another process rewrote is read again, never used stale",
          "[jit][cache]") {
  // Two cache objects on one directory stand for two processes: each remembers the index it
  // last read or wrote, which must give way to whatever the other wrote since.
  test::TempDir tmp;
  jit::DiskCache a(tmp.path()), b(tmp.path());
  REQUIRE(a.store("k1", "one"));
  REQUIRE(a.load("k1") == std::optional<std::string>("one"));  // a's index from memory now
  REQUIRE(b.store("k2", "two"));
  CHECK(a.load("k2") == std::optional<std::string>("two"));
  // a's next store adds to the index b wrote, not to the one a remembered.
  REQUIRE(a.store("k3", "three"));
  for (const auto& [k, v] : {std::pair{"k1", "one"}, {"k2", "two"}, {"k3", "three"}}) {
    INFO(k);
    CHECK(b.load(k) == std::optional<std::string>(v));
    CHECK(jit::DiskCache(tmp.path()).load(k) == std::optional<std::string>(v));
  }
  // b replaces k1 (the same length, so the index keeps its size): a reads the new record.
  REQUIRE(b.store("k1", "ONE"));
  CHECK(a.load("k1") == std::optional<std::string>("ONE"));
  // And a removed index is noticed: every entry is then a miss.
  fs::remove(tmp.path() / "index.json");
  CHECK_FALSE(a.load("k2").has_value());
  CHECK(a.stats().bad_entries == 0);
}

TEST_CASE("disk cache: a FIFO under the index's or an entry's name is refused, not waited on",
          "[jit][cache]") {
  TempDir tmp;
  const std::string bytes = payload(4, 3000);
  CacheLog log;
  jit::DiskCache c(tmp.path());
  REQUIRE(c.store(kKey, bytes));
  const fs::path fifo = GENERATE(as<std::string>{}, std::string("index.json"), kKey + ".bin");
  INFO("FIFO at " << fifo);
  fs::remove(tmp.path() / fifo);
  REQUIRE(::mkfifo((tmp.path() / fifo).c_str(), 0600) == 0);
  CHECK_FALSE(load_or_fail_if_blocked(c, kKey, tmp.path() / fifo).has_value());
  CHECK(log.count("not a regular file") == 1);
  CHECK(c.stats().bad_entries == 1);
  INFO(log.all());
  // The next store replaces the FIFO with a real file and the entry is trusted again.
  REQUIRE(c.store(kKey, bytes));
  CHECK(fs::is_regular_file(tmp.path() / fifo));
  CHECK(jit::DiskCache(tmp.path()).load(kKey) == bytes);
}

TEST_CASE("disk cache: an index not of the form this version writes is replaced by store()",
          "[jit][cache]") {
  TempDir tmp;
  const std::string bytes = payload(5, 2000);
  const fs::path index = tmp.path() / "index.json";
  CacheLog log;
  jit::DiskCache c(tmp.path());
  REQUIRE(c.store(kKey, bytes));
  const std::string entries = nlohmann::json::parse(read_all(index))["entries"].dump();
  // Each is valid JSON, and each kept every store() failing while the log said "rebuilding".
  const std::string bad = GENERATE_COPY(values<std::string>({
      R"({"version": "1", "entries": )" + entries + "}",
      R"({"version": {"v": 1}, "entries": )" + entries + "}",
      R"({"version": [1], "entries": )" + entries + "}",
      R"({"version": null, "entries": )" + entries + "}",
      R"({"version": 1.5, "entries": )" + entries + "}",
      R"({"version": 2, "entries": )" + entries + "}",
      R"({"entries": )" + entries + "}",
      R"({"version": 1, "entries": [1, 2]})",
      R"({"version": 1, "entries": )" + entries + R"(, "extra": true})",
      R"([1, {"version": 1}])",
      R"("index")",
  }));
  INFO("index.json: " << bad);
  write_all(index, bad);
  CHECK_FALSE(c.load(kKey).has_value());
  CHECK(log.count("index.json is corrupted") == 1);
  REQUIRE(c.store(kKey, bytes));
  CHECK(log.count("rebuilding it") == 1);
  INFO(log.all());
  const nlohmann::json rebuilt = nlohmann::json::parse(read_all(index));
  CHECK(rebuilt["version"] == 1);
  CHECK(rebuilt.size() == 2);
  CHECK(jit::DiskCache(tmp.path()).load(kKey) == bytes);
  REQUIRE(c.store("second", "more"));  // and later stores keep working
  CHECK(jit::DiskCache(tmp.path()).load("second") == "more");
  CHECK(jit::DiskCache(tmp.path()).load(kKey) == bytes);
}

TEST_CASE("disk cache: store() drops records not of the form it writes", "[jit][cache]") {
  TempDir tmp;
  const fs::path index = tmp.path() / "index.json";
  CacheLog log;
  jit::DiskCache c(tmp.path());
  REQUIRE(c.store(kKey, "kept"));
  nlohmann::json idx = nlohmann::json::parse(read_all(index));
  idx["entries"]["junk"] = "not a record";
  idx["entries"]["../escape"] = idx["entries"][kKey];
  write_all(index, idx.dump());
  CHECK(c.load(kKey) == "kept");  // other records do not spoil this one
  REQUIRE(c.store("fresh", "new"));
  const nlohmann::json after = nlohmann::json::parse(read_all(index));
  CHECK(after["entries"].size() == 2);
  CHECK(after["entries"].contains(kKey));
  CHECK(after["entries"].contains("fresh"));
  CHECK(log.count("dropping the corrupted index record") == 2);
}

TEST_CASE("disk cache: processes storing at once lose nothing and never read half an entry",
          "[jit][cache]") {
  TempDir tmp;
  constexpr int kProcs = 4, kRounds = 12;
  const std::string shared = payload(10, 200000);  // large enough for writes to interleave
  const unsigned prev_mask = jit::set_log_mask(0);
  std::vector<pid_t> children;
  for (int p = 0; p < kProcs; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Child: store the shared key and keys of its own, reading the shared one in between.
      int status = 0;
      jit::DiskCache c(tmp.path());
      for (int r = 0; r < kRounds; ++r) {
        if (!c.store("shared", shared)) status |= 1;
        const std::string own = own_key(p, r);
        if (!c.store(own, payload(100 * p + r, 3000 + 17 * r))) status |= 2;
        const std::optional<std::string> got = c.load("shared");
        if (!got || *got != shared) status |= 4;
      }
      if (c.stats().bad_entries != 0) status |= 8;
      ::_exit(status);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = -1;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);  // 1/2: a store failed, 4: a bad read, 8: a bad entry
  }
  jit::set_log_mask(prev_mask);
  jit::DiskCache c(tmp.path());
  CHECK(c.load("shared") == shared);
  for (int p = 0; p < kProcs; ++p)
    for (int r = 0; r < kRounds; ++r) {
      const std::string own = own_key(p, r);
      INFO(own);
      CHECK(c.load(own) == payload(100 * p + r, 3000 + 17 * r));
    }
  CHECK(c.stats().bad_entries == 0);
}

TEST_CASE("disk cache: an unusable directory only disables the cache", "[jit][cache]") {
  TempDir tmp;
  write_all(tmp.path() / "plain_file", "not a directory");
  CacheLog log;
  jit::DiskCache c(tmp.path() / "plain_file" / "cache");  // can never be created
  CHECK_FALSE(c.load(kKey).has_value());
  CHECK_FALSE(c.store(kKey, "bytes"));
  CHECK_FALSE(c.store(kKey, "bytes"));  // reported once, not per call
  CHECK_FALSE(c.load(kKey).has_value());
  CHECK(c.stats().errors == 2);
  CHECK(log.count("without the disk cache") == 1);

  // Keys that are not plain names never touch the file system.
  jit::DiskCache ok(tmp.path() / "cache");
  CHECK_FALSE(ok.store("../escape", "bytes"));
  CHECK_FALSE(ok.load("../escape").has_value());
  CHECK_FALSE(fs::exists(tmp.path() / "escape.bin"));
  CHECK_FALSE(ok.store("", "bytes"));

  // Disabled outright: an empty directory.
  jit::DiskCache off{fs::path()};
  CHECK_FALSE(off.enabled());
  CHECK_FALSE(off.store(kKey, "bytes"));
  CHECK_FALSE(off.load(kKey).has_value());
}

TEST_CASE("disk cache: the directory comes from EMBER_CACHE_DIR, XDG_CACHE_HOME or HOME",
          "[jit][cache]") {
  auto saved = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const auto cache_dir = saved("EMBER_CACHE_DIR"), xdg = saved("XDG_CACHE_HOME"),
             home = saved("HOME");
  ::setenv("EMBER_CACHE_DIR", "/somewhere/ember", 1);
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/user", 1);
  CHECK(jit::DiskCache::default_dir() == fs::path("/somewhere/ember"));
  ::unsetenv("EMBER_CACHE_DIR");
  CHECK(jit::DiskCache::default_dir() == fs::path("/xdg/ember"));
  ::unsetenv("XDG_CACHE_HOME");
  CHECK(jit::DiskCache::default_dir() == fs::path("/home/user/.cache/ember"));
  ::setenv("EMBER_CACHE_DIR", "", 1);  // set but empty: no disk cache
  CHECK(jit::DiskCache::default_dir().empty());
  auto restore = [](const char* name, const std::optional<std::string>& v) {
    if (v)
      ::setenv(name, v->c_str(), 1);
    else
      ::unsetenv(name);
  };
  restore("EMBER_CACHE_DIR", cache_dir);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}
