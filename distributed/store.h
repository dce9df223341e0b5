#pragma once
/// @file
/// The key-value store the ranks of a process group meet through while they start: Gloo's
/// addresses and NCCL's unique id pass through it. A TCP store served by rank 0 (torchrun's
/// MASTER_ADDR and MASTER_PORT) or a directory every rank can reach (`file://`).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ember::distributed {

/// Keys to byte strings, shared by every rank of a group. Every call raises ember::Error when
/// the store cannot be reached or the wait outlasts the timeout.
class Store {
 public:
  virtual ~Store() = default;
  /// Sets `key` to `value` (overwrites).
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  /// The value of `key`, waiting until some rank set it.
  virtual std::vector<char> get(const std::string& key) = 0;
  /// Adds `delta` to the integer at `key` (0 when unset) and returns the sum.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Waits until every key of `keys` is set.
  virtual void wait(const std::vector<std::string>& keys) = 0;
  /// How long get and wait wait.
  std::chrono::milliseconds timeout() const { return timeout_; }

 protected:
  explicit Store(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  std::chrono::milliseconds timeout_;
};

/// A store over TCP: `is_server` (rank 0) serves it on host:port, every rank (the server's own
/// included) is a client. Clients retry the connection until the timeout, so ranks may start in
/// any order.
std::unique_ptr<Store> make_tcp_store(const std::string& host, int port, bool is_server,
                                      std::chrono::milliseconds timeout);
/// A store in the directory `path` (created if missing): one file per key, written atomically.
std::unique_ptr<Store> make_file_store(const std::string& path, std::chrono::milliseconds timeout);

}  // namespace ember::distributed
