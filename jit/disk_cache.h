#pragma once
// The JIT's on-disk cache of compiled kernels (cubins), so a new process skips NVRTC for kernels
// an earlier one built. Host-only.
//
// Layout of the directory (EMBER_CACHE_DIR, default $XDG_CACHE_HOME/ember or ~/.cache/ember):
//   <key>.bin     an entry's bytes
//   index.json    {"version": 1, "entries": {"<key>": {"file", "size", "checksum", "created"}}}
//   index.lock    serializes writers (and readers against a writer) across processes
// Writes are atomic: bytes go to a temporary file renamed over the entry, and the index is
// rewritten the same way under the lock, so concurrent processes never see half an entry. An
// entry whose file is missing, truncated, not a regular file or fails its checksum is reported on
// the `cache` log, ignored (a miss) and rebuilt by the caller's next store(); nothing read is
// trusted unchecked. An index.json not of exactly the form above (or not a regular file: a FIFO is
// refused, never waited on) is reported the same way and replaced by the next store(), which also
// drops any record not of the form it writes.
// The index is parsed again only when the file changed (its inode, size or times) since this
// process last read or wrote it: a load then costs a stat and a lookup, not a parse of every
// record, which made a cache of a few thousand kernels cost milliseconds per kernel.
// A directory that cannot be created or written only costs the cache: every call degrades to a
// miss (reported once) and never throws.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace ember::jit {

class DiskCache {
 public:
  // An empty `dir` disables the cache.
  explicit DiskCache(std::filesystem::path dir);
  ~DiskCache();
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  // EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else $HOME/.cache/ember; empty without any.
  static std::filesystem::path default_dir();
  // The process-wide cache at default_dir() (read once).
  static DiskCache& global();

  const std::filesystem::path& dir() const { return dir_; }
  bool enabled() const { return !dir_.empty(); }

  // The bytes stored under `key`, verified against the index; nullopt on a miss, a bad entry
  // (reported) or an unusable directory. Keys are made of [A-Za-z0-9._-], at most 128 long.
  std::optional<std::string> load(std::string_view key);
  // Stores `bytes` under `key`, replacing any entry. False (reported) when it could not.
  bool store(std::string_view key, std::string_view bytes);

  struct Stats {
    int64_t hits = 0, misses = 0, bad_entries = 0, stores = 0, errors = 0;
  };
  Stats stats() const;

  // The checksum recorded per entry (64-bit FNV-1a of the bytes, as 16 hex digits).
  static std::string checksum(std::string_view bytes);

  struct IndexMemo;  // defined in disk_cache.cpp

 private:
  void report_unusable(const std::string& why);

  std::filesystem::path dir_;
  std::unique_ptr<IndexMemo> memo_;  // the index as last read or written, and its file's identity
  mutable std::mutex mu_;            // guards stats_ and the once-only report
  Stats stats_;
  bool reported_unusable_ = false;
};

}  // namespace ember::jit
