#include "jit/disk_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "jit/log.h"

namespace ember::jit {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kIndexVersion = 1;
constexpr const char* kIndexName = "index.json";
constexpr const char* kLockName = "index.lock";

bool valid_key(std::string_view k) {
  if (k.empty() || k.size() > 128 || k.front() == '.') return false;
  for (char c : k)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
          c == '_' || c == '-'))
      return false;
  return true;
}

std::string entry_file(std::string_view key) { return std::string(key) + ".bin"; }

void say(const std::string& msg) { log(Log::cache, "disk cache: " + msg); }

// An advisory lock on the directory's lock file, held for the object's lifetime (closing the
// descriptor releases it). Without a lock file it holds nothing: a reader then relies on the
// atomic renames and the checksums alone.
class FileLock {
 public:
  FileLock(const fs::path& path, bool exclusive) {
    // Non-blocking opens, so a FIFO under the lock's name cannot stall them.
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd_ < 0 && !exclusive) fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) return;
    int rc;
    do {
      rc = ::flock(fd_, exclusive ? LOCK_EX : LOCK_SH);
    } while (rc != 0 && errno == EINTR);
    locked_ = rc == 0;
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool locked() const { return locked_; }

 private:
  int fd_ = -1;
  bool locked_ = false;
};

// The bytes of the regular file at `path`. nullopt with `problem` empty when there is no such
// file; nullopt with `problem` set when something else is there or reading it failed. Opened
// non-blocking: a FIFO planted under a cache name would otherwise block the open (while the
// caller holds the index lock) until some writer appears; it is refused by the fstat instead.
std::optional<std::string> read_file(const fs::path& path, std::string& problem,
                                     struct stat* examined = nullptr) {
  problem.clear();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) problem = std::string("cannot be opened: ") + std::strerror(errno);
    return std::nullopt;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    problem = std::string("cannot be examined: ") + std::strerror(errno);
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    problem = "is not a regular file";
    return std::nullopt;
  }
  if (examined) *examined = st;
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      problem = std::string("cannot be read: ") + std::strerror(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Writes `bytes` to a temporary file next to `target` and renames it over `target`: readers see
// the old file or the new one, never a partial one. Returns an error message, or empty.
std::string write_atomically(const fs::path& target, std::string_view bytes) {
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid()) + "." +
                       std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + tmp.string() + ": " + std::strerror(errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const std::string why = "cannot write " + tmp.string() + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return why;
    }
    done += static_cast<size_t>(w);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = "cannot replace " + target.string() + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  }
  return {};
}

// Whether `e` is an index record exactly as store() writes it for `key`.
bool valid_record(std::string_view key, const json& e) {
  if (!e.is_object() || e.size() != 4) return false;
  const auto file = e.find("file"), size = e.find("size"), sum = e.find("checksum"),
             created = e.find("created");
  return file != e.end() && file->is_string() &&
         file->get_ref<const std::string&>() == entry_file(key) && size != e.end() &&
         size->is_number_unsigned() && sum != e.end() && sum->is_string() &&
         sum->get_ref<const std::string&>().size() == 16 && created != e.end() &&
         created->is_string();
}

// The index, or an empty one when there is none yet. `bad` is set (with the reason in `why`)
// when something exists under the name that is not an index of exactly the form this version
// writes: {"version": 1, "entries": {...}} and nothing else. Records are checked one by one
// where they are used.
json read_index(const fs::path& dir, bool& bad, std::string& why, struct stat* examined) {
  bad = false;
  json empty = {{"version", kIndexVersion}, {"entries", json::object()}};
  const std::optional<std::string> text = read_file(dir / kIndexName, why, examined);
  if (!text) {
    bad = !why.empty();
    return empty;
  }
  json idx = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (idx.is_discarded()) {
    why = "is not valid JSON";
  } else if (!idx.is_object() || idx.size() != 2) {
    why = "is not an object of \"version\" and \"entries\"";
  } else if (const auto v = idx.find("version");
             v == idx.end() || !v->is_number_integer() || v->get<int64_t>() != kIndexVersion) {
    why = "has no \"version\": " + std::to_string(kIndexVersion);
  } else if (const auto e = idx.find("entries"); e == idx.end() || !e->is_object()) {
    why = "has no \"entries\" object";
  } else {
    return idx;
  }
  bad = true;
  return empty;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What tells one version of the index file from another: a rewrite renames a new file over it
// (a new inode, or a reused one with new times).
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_s = 0, mtime_ns = 0, ctime_s = 0, ctime_ns = 0;
  bool operator==(const FileId&) const = default;
};
FileId file_id(const struct stat& st) {
  return {st.st_dev,          st.st_ino,          st.st_size,        st.st_mtim.tv_sec,
          st.st_mtim.tv_nsec, st.st_ctim.tv_sec, st.st_ctim.tv_nsec};
}

}  // namespace

struct DiskCache::IndexMemo {
  std::mutex mu;
  std::optional<FileId> id;  // of the file `index` was read from or written as
  std::shared_ptr<const json> index;
  bool validated = false;  // every record checked (by a store) since it was read
};

namespace {

// With the directory lock held: the index as the file holds it now, from the memo when the file
// is the one it remembers, else read (and remembered). `validated` says whether every record is
// known to be of the form store() writes.
std::shared_ptr<const json> current_index(const fs::path& dir, DiskCache::IndexMemo& memo,
                                          bool& bad, std::string& why, bool& validated) {
  bad = false;
  why.clear();
  struct stat st {};
  if (::stat((dir / kIndexName).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    std::lock_guard<std::mutex> lock(memo.mu);
    if (memo.index && memo.id == file_id(st)) {
      validated = memo.validated;
      return memo.index;
    }
  }
  struct stat examined {};
  auto idx = std::make_shared<const json>(read_index(dir, bad, why, &examined));
  std::lock_guard<std::mutex> lock(memo.mu);
  if (!bad && examined.st_ino != 0) {
    memo.id = file_id(examined);
    memo.index = idx;
  } else {
    memo.id.reset();
    memo.index.reset();
  }
  memo.validated = validated = false;
  return idx;
}

}  // namespace

DiskCache::DiskCache(std::filesystem::path dir)
    : dir_(std::move(dir)), memo_(std::make_unique<IndexMemo>()) {}
DiskCache::~DiskCache() = default;

std::filesystem::path DiskCache::default_dir() {
  if (const char* d = std::getenv("EMBER_CACHE_DIR")) return d;  // set but empty: disabled
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "ember";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "ember";
  return {};
}

DiskCache& DiskCache::global() {
  static DiskCache cache(default_dir());
  return cache;
}

DiskCache::Stats DiskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string DiskCache::checksum(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64-bit
  for (unsigned char c : bytes) h = (h ^ c) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void DiskCache::report_unusable(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.errors;
  if (reported_unusable_) return;
  reported_unusable_ = true;
  say(why + "; kernels are compiled without the disk cache");
}

std::optional<std::string> DiskCache::load(std::string_view key) {
  if (!enabled()) return std::nullopt;
  auto count = [&](int64_t Stats::*field) {
    std::lock_guard<std::mutex> lock(mu_);
    ++(stats_.*field);
  };
  auto miss = [&](const std::string& why) -> std::optional<std::string> {
    count(&Stats::misses);
    say("miss " + std::string(key) + why);
    return std::nullopt;
  };
  auto bad = [&](const std::string& why) -> std::optional<std::string> {
    count(&Stats::bad_entries);
    count(&Stats::misses);
    say("entry " + std::string(key) + " in " + dir_.string() + " " + why +
        "; ignoring it (it is rebuilt)");
    return std::nullopt;
  };
  if (!valid_key(key)) return miss(" (not a valid key)");
  try {
    std::error_code ec;
    if (!fs::is_directory(dir_, ec)) return miss("");
    FileLock lock(dir_ / kLockName, /*exclusive=*/false);
    bool bad_index = false;
    std::string why;
    bool validated = false;
    const std::shared_ptr<const json> idx = current_index(dir_, *memo_, bad_index, why, validated);
    if (bad_index) return bad("is unreadable: index.json is corrupted (it " + why + ")");
    const json& entries = (*idx)["entries"];
    const auto it = entries.find(std::string(key));
    if (it == entries.end()) return miss("");
    const json& e = *it;
    // The index names the file, but only the one name a key can have is ever opened.
    if (!valid_record(key, e)) return bad("has a corrupted index record");
    const std::optional<std::string> bytes = read_file(dir_ / entry_file(key), why);
    if (!bytes) return bad(why.empty() ? "is missing its file" : "has a file that " + why);
    const uint64_t size = e["size"].get<uint64_t>();
    if (bytes->size() != size)
      return bad(std::string(bytes->size() < size ? "is truncated" : "has the wrong size") + " (" +
                 std::to_string(bytes->size()) + " bytes, expected " + std::to_string(size) + ")");
    if (checksum(*bytes) != e["checksum"].get<std::string>())
      return bad("is corrupted (checksum mismatch)");
    count(&Stats::hits);
    say("hit " + std::string(key) + " (" + std::to_string(bytes->size()) + " bytes)");
    return bytes;
  } catch (const std::exception& ex) {
    return bad(std::string("could not be read: ") + ex.what());
  }
}

bool DiskCache::store(std::string_view key, std::string_view bytes) {
  if (!enabled()) return false;
  if (!valid_key(key)) {
    report_unusable("cannot store under the key '" + std::string(key) + "'");
    return false;
  }
  try {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_)) {
      report_unusable("cannot create " + dir_.string() + (ec ? ": " + ec.message() : ""));
      return false;
    }
    FileLock lock(dir_ / kLockName, /*exclusive=*/true);
    if (!lock.locked()) {
      report_unusable("cannot lock " + (dir_ / kLockName).string() + ": " + std::strerror(errno));
      return false;
    }
    std::string why = write_atomically(dir_ / entry_file(key), bytes);
    if (!why.empty()) {
      report_unusable(why);
      return false;
    }
    bool bad_index = false;
    bool validated = false;
    json idx = *current_index(dir_, *memo_, bad_index, why, validated);
    if (bad_index) say("index.json in " + dir_.string() + " " + why + "; rebuilding it");
    // Records not of the form written here are dropped, so the rewritten index is all valid.
    json& entries = idx["entries"];
    for (auto it = entries.begin(); !validated && it != entries.end();) {
      if (valid_key(it.key()) && valid_record(it.key(), it.value())) {
        ++it;
      } else {
        say("dropping the corrupted index record of '" + it.key() + "' in " + dir_.string());
        it = entries.erase(it);
      }
    }
    entries[std::string(key)] = {{"file", entry_file(key)},
                                 {"size", static_cast<uint64_t>(bytes.size())},
                                 {"checksum", checksum(bytes)},
                                 {"created", utc_now()}};
    why = write_atomically(dir_ / kIndexName, idx.dump(1));
    {
      // Remembered as written: the lock is still held, so the file is still this one.
      struct stat st {};
      const bool known = why.empty() && ::stat((dir_ / kIndexName).c_str(), &st) == 0;
      std::lock_guard<std::mutex> guard(memo_->mu);
      memo_->id = known ? std::optional<FileId>(file_id(st)) : std::nullopt;
      memo_->index = known ? std::make_shared<const json>(std::move(idx)) : nullptr;
      memo_->validated = known;
    }
    if (!why.empty()) {
      report_unusable(why);
      return false;
    }
    {
      std::lock_guard<std::mutex> guard(mu_);
      ++stats_.stores;
    }
    say("stored " + std::string(key) + " (" + std::to_string(bytes.size()) + " bytes)");
    return true;
  } catch (const std::exception& ex) {
    report_unusable(std::string("store failed: ") + ex.what());
    return false;
  }
}

}  // namespace ember::jit
